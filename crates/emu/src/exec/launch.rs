//! The public launch API.

use rayon::prelude::*;
use tilegen_codeobj::CodeObject;

use super::fault::{Fault, FaultKind};
use super::interp::{self, Env};
use super::limits::{LaunchControl, LimitError, Limits, WAVE_REGISTER_BYTES};
use super::memory::{DeviceMemory, LDS_GRANULE, LDS_MAX, Lds, Scratch};
use super::program::{LoadError, Program};
use super::sched::{self, Budget};
use super::setup::{DispatchState, KernelSetup, init_wave};
use super::stats::{Counter, Stats};
use super::wave::Wave;

/// Emulator settings.
#[derive(Clone, Debug, Default)]
pub struct EmuConfig {
    /// Resource limits: device memory, grid size, per-wave instruction budget.
    pub limits: Limits,
    /// Run workgroups on the calling thread only (otherwise rayon's pool runs them in
    /// parallel; results are identical either way for race-free kernels).
    pub single_threaded: bool,
    /// Cancellation flag and progress counters shared with the caller.
    pub control: LaunchControl,
}

/// A gfx950 device emulated on the CPU: device memory plus the ability to run kernels on it.
#[derive(Debug, Default)]
pub struct Emulator {
    memory: DeviceMemory,
    config: EmuConfig,
    dispatch_id: u64,
}

/// Size of an `hsa_kernel_dispatch_packet_t`.
const DISPATCH_PACKET_BYTES: usize = 64;
/// Size reserved for the (zeroed) `hsa_queue_t` a kernel may be pointed at.
const QUEUE_BYTES: u64 = 256;

impl Emulator {
    /// An emulator owning `memory` (whose size limit it keeps as `limits.max_memory`).
    pub fn new(memory: DeviceMemory) -> Emulator {
        let mut config = EmuConfig::default();
        config.limits.max_memory = memory.limit();
        Emulator {
            memory,
            config,
            dispatch_id: 0,
        }
    }

    /// An emulator with explicit settings (`config.limits.max_memory` becomes the memory's
    /// limit).
    pub fn with_config(mut memory: DeviceMemory, config: EmuConfig) -> Emulator {
        memory.set_limit(config.limits.max_memory);
        Emulator {
            memory,
            config,
            dispatch_id: 0,
        }
    }

    /// The settings.
    pub fn config(&self) -> &EmuConfig {
        &self.config
    }

    /// The settings, for changing (a new `limits.max_memory` applies from the next
    /// allocation, load or launch on).
    pub fn config_mut(&mut self) -> &mut EmuConfig {
        &mut self.config
    }

    /// Device memory (reads, writes and atomics work through a shared reference).
    pub fn memory(&self) -> &DeviceMemory {
        &self.memory
    }

    /// Device memory for allocation (limited to `limits.max_memory` bytes).
    pub fn memory_mut(&mut self) -> &mut DeviceMemory {
        self.memory.set_limit(self.config.limits.max_memory);
        &mut self.memory
    }

    /// Gives the device memory back.
    pub fn into_memory(self) -> DeviceMemory {
        self.memory
    }

    /// Loads kernel `name` of a code object (its image goes into device memory).
    pub fn load(&mut self, co: &CodeObject, name: &str) -> Result<Program, LoadError> {
        Program::load(self.memory_mut(), co, name)
    }

    /// Loads every kernel of a code object (one image in device memory, `.text` decoded once).
    pub fn load_all(&mut self, co: &CodeObject) -> Result<Vec<Program>, LoadError> {
        Program::load_all(self.memory_mut(), co)
    }

    /// Loads raw machine code as a kernel starting at its first byte.
    pub fn load_code(
        &mut self,
        name: &str,
        code: &[u8],
        setup: KernelSetup,
    ) -> Result<Program, LoadError> {
        Program::load_code(self.memory_mut(), name, code, setup)
    }

    /// Runs `prog` on a grid of `grid` workgroups of `block` work-items, with `kernarg`
    /// as the kernel argument segment (hidden arguments included; zero-padded to the
    /// descriptor's size) and `dynamic_lds` bytes of LDS on top of the static amount.
    ///
    /// Before anything runs or is allocated the launch is checked against the limits of
    /// [`EmuConfig::limits`]: the grid's workgroups and work-items, and device memory for the
    /// kernarg segment plus the registers, scratch and LDS of every wave the host threads
    /// will have in flight. Workgroups are streamed (nothing proportional to the grid is
    /// allocated), the control's progress counter counts finished workgroups, and a raised
    /// cancellation flag stops the launch with [`FaultKind::Cancelled`].
    pub fn launch(
        &mut self,
        prog: &Program,
        grid: [u32; 3],
        block: [u32; 3],
        kernarg: &[u8],
        dynamic_lds: u32,
    ) -> Result<Stats, Fault> {
        let limits = self.config.limits.clone();
        let single_threaded = self.config.single_threaded;
        self.dispatch_id += 1;
        // What the host threads hold while workgroups run: each thread keeps the register
        // files and scratch of one workgroup's waves, its LDS and per-instruction counters.
        let in_flight = |total: u64| {
            if single_threaded {
                1
            } else {
                (rayon::current_num_threads() as u64).clamp(1, total)
            }
        };
        let prepared = prepare_launch(
            &mut self.memory,
            &limits,
            prog,
            LaunchShape {
                grid,
                block,
                kernarg,
                dynamic_lds,
            },
            self.dispatch_id,
            in_flight,
        )?;
        let result = run_grid(prog, &self.memory, &self.config, &prepared);
        prepared.release(&mut self.memory);
        result
    }
}

/// What a launch asks for: the grid, the workgroup size, kernel arguments and dynamic LDS.
#[derive(Clone, Copy, Debug)]
pub struct LaunchShape<'a> {
    /// Workgroups in x, y, z.
    pub grid: [u32; 3],
    /// Work-items per workgroup in x, y, z.
    pub block: [u32; 3],
    /// The kernel argument segment (hidden arguments included).
    pub kernarg: &'a [u8],
    /// LDS bytes on top of the descriptor's static amount.
    pub dynamic_lds: u32,
}

/// A checked launch with its kernarg segment, dispatch packet and queue in device memory.
pub struct PreparedLaunch {
    /// What every wave starts from.
    pub dispatch: DispatchState,
    /// Workgroups in the grid.
    pub total: u64,
    /// Waves per workgroup.
    pub waves_per_wg: u32,
    /// LDS bytes per workgroup (static plus dynamic).
    pub lds_bytes: u32,
    allocated: Vec<u64>,
}

impl PreparedLaunch {
    /// Frees the launch-time allocations.
    pub fn release(self, memory: &mut DeviceMemory) {
        for &a in &self.allocated {
            let _ = memory.free(a);
        }
    }
}

/// Checks a launch against `limits` and sets up its device-side state (kernarg segment,
/// dispatch packet, queue); `in_flight(total)` is how many workgroups the caller will hold at
/// once, whose registers, scratch and LDS are checked against the memory limit. The one home
/// of launch setup, shared by [`Emulator::launch`] and any driver that runs workgroups its own
/// way (a timing model). Release the result with [`PreparedLaunch::release`].
pub fn prepare_launch(
    memory: &mut DeviceMemory,
    limits: &Limits,
    prog: &Program,
    shape: LaunchShape<'_>,
    dispatch_id: u64,
    in_flight: impl FnOnce(u64) -> u64,
) -> Result<PreparedLaunch, Fault> {
    let LaunchShape {
        grid,
        block,
        kernarg,
        dynamic_lds,
    } = shape;
    let launch_fault = |kind: FaultKind| Fault {
        kernel: prog.name().to_string(),
        workgroup: [0; 3],
        wave: 0,
        pc: prog.entry(),
        inst: String::new(),
        kind: Box::new(kind),
    };
    let invalid = |msg: String| launch_fault(FaultKind::Launch(msg));
    let setup = prog.setup();
    let kd = &setup.descriptor;
    let threads = block.iter().map(|&b| b as u64).product::<u64>();
    if grid.contains(&0) || block.contains(&0) {
        return Err(invalid(format!("empty grid {grid:?} or block {block:?}")));
    }
    if threads > 1024 {
        return Err(invalid(format!(
            "{threads} work-items per workgroup (at most 1024)"
        )));
    }
    let lds_bytes = kd.group_segment_fixed_size as u64 + dynamic_lds as u64;
    if lds_bytes > LDS_MAX as u64 {
        return Err(invalid(format!(
            "{lds_bytes} bytes of LDS (at most {LDS_MAX})"
        )));
    }
    if kd.enable_wavefront_size32() {
        return Err(invalid("wave32 kernel (gfx950 runs wave64 only)".into()));
    }
    limits
        .check_grid(grid, block)
        .map_err(|e| launch_fault(e.into()))?;
    // `check_grid` compared the product with a u64 limit, so it fits in a u64.
    let total = grid.iter().map(|&g| g as u64).product::<u64>();
    let waves_per_wg = threads.div_ceil(64);

    // Kernarg segment, dispatch packet and queue live in device memory for the launch;
    // every allocation is checked against the memory limit first.
    let karg_len = (kernarg.len() as u64).max(kd.kernarg_size as u64).max(4);
    memory.set_limit(limits.max_memory);
    let alloc_fault = |e: super::memory::AllocError| match e {
        super::memory::AllocError::Limit(l) => launch_fault(l.into()),
        e => invalid(format!("allocating launch state: {e}")),
    };
    let kernarg_addr = memory.alloc(karg_len).map_err(alloc_fault)?;
    let mut allocated = vec![kernarg_addr];
    let mut packet = [0u8; DISPATCH_PACKET_BYTES];
    let dims = if block[2] > 1 || grid[2] > 1 {
        3u16
    } else if block[1] > 1 || grid[1] > 1 {
        2
    } else {
        1
    };
    packet[2..4].copy_from_slice(&dims.to_le_bytes());
    for d in 0..3 {
        packet[4 + 2 * d..6 + 2 * d].copy_from_slice(&(block[d] as u16).to_le_bytes());
        packet[12 + 4 * d..16 + 4 * d]
            .copy_from_slice(&grid[d].wrapping_mul(block[d]).to_le_bytes());
    }
    packet[24..28].copy_from_slice(&kd.private_segment_fixed_size.to_le_bytes());
    packet[28..32].copy_from_slice(&(lds_bytes as u32).to_le_bytes());
    packet[40..48].copy_from_slice(&kernarg_addr.to_le_bytes());
    let prepared = (|| -> Result<(u64, u64), Fault> {
        memory
            .write(kernarg_addr, kernarg)
            .map_err(|e| invalid(format!("writing the kernarg segment: {e}")))?;
        let dispatch_ptr = memory.upload(&packet).map_err(alloc_fault)?;
        allocated.push(dispatch_ptr);
        let queue_ptr = memory
            .upload(&[0u8; QUEUE_BYTES as usize])
            .map_err(alloc_fault)?;
        allocated.push(queue_ptr);
        let in_flight = in_flight(total);
        let scratch = Scratch::bytes_per_wave(kd.private_segment_fixed_size);
        let lds_host = lds_bytes.div_ceil(LDS_GRANULE as u64) * LDS_GRANULE as u64;
        let per_thread = WAVE_REGISTER_BYTES
            .checked_add(scratch)
            .and_then(|w| w.checked_mul(waves_per_wg))
            .and_then(|w| w.checked_add(lds_host))
            .and_then(|w| w.checked_add(8 * prog.instruction_count() as u64))
            .and_then(|w| w.checked_mul(in_flight));
        let what = format!(
            "the registers, scratch and LDS of {in_flight} workgroup(s) in flight ({waves_per_wg} wave(s) each, {} scratch bytes per work-item)",
            kd.private_segment_fixed_size
        );
        let working = per_thread
            .ok_or_else(|| launch_fault(LimitError::Overflow { what: what.clone() }.into()))?;
        memory
            .check_available(&what, working)
            .map_err(|e| launch_fault(e.into()))?;
        Ok((dispatch_ptr, queue_ptr))
    })();
    let (dispatch_ptr, queue_ptr) = match prepared {
        Ok(p) => p,
        Err(f) => {
            for &a in &allocated {
                let _ = memory.free(a);
            }
            return Err(f);
        }
    };
    let dispatch = DispatchState {
        kernarg_addr,
        dispatch_ptr,
        queue_ptr,
        dispatch_id,
        // The host copy serves kernarg preloading; bytes past it read as the zero padding.
        kernarg: kernarg.to_vec(),
        block,
        grid,
    };
    Ok(PreparedLaunch {
        dispatch,
        total,
        waves_per_wg: waves_per_wg as u32,
        lds_bytes: lds_bytes as u32,
        allocated,
    })
}

/// The workgroup id of linear workgroup `index` (x fastest).
pub(crate) fn workgroup_id(grid: [u32; 3], index: u64) -> [u32; 3] {
    [
        (index % grid[0] as u64) as u32,
        ((index / grid[0] as u64) % grid[1] as u64) as u32,
        (index / (grid[0] as u64 * grid[1] as u64)) as u32,
    ]
}

/// One workgroup of a launch, as the functional launch and other drivers of the executor run
/// it.
#[derive(Clone, Copy, Debug)]
pub struct Workgroup {
    /// Launch index (x fastest).
    pub index: u64,
    /// Workgroup id in x, y, z.
    pub id: [u32; 3],
    /// Waves.
    pub waves: u32,
    /// LDS bytes (static and dynamic).
    pub lds_bytes: u32,
}

impl Workgroup {
    /// Workgroup `index` of the launch `d` describes.
    pub fn new(d: &DispatchState, index: u64, waves: u32, lds_bytes: u32) -> Workgroup {
        Workgroup {
            index,
            id: workgroup_id(d.grid, index),
            waves,
            lds_bytes,
        }
    }
}

/// Resets `waves` and sets their launch state for workgroup `wg`; on failure, the index of
/// the wave and the fault.
pub(crate) fn init_workgroup_waves(
    prog: &Program,
    d: &DispatchState,
    wg: [u32; 3],
    waves: &mut [Wave],
) -> Result<(), (u32, FaultKind)> {
    let setup = prog.setup();
    let n = waves.len() as u32;
    for (k, w) in waves.iter_mut().enumerate() {
        w.reset(k as u32, setup.descriptor.private_segment_fixed_size)
            .map_err(|e| (k as u32, e.into()))?;
        w.pc = init_wave(setup, d, wg, k as u32, n, prog.entry(), w).map_err(|e| (k as u32, e))?;
    }
    Ok(())
}

/// How one workgroup ended.
enum Ended {
    /// It ran to the end.
    Done(Stats),
    /// It faulted (or noticed a stop condition while running).
    Fault(Fault),
    /// It did not start: the launch had stopped (a fault elsewhere, or cancellation). Costs
    /// no allocation, so a stopped launch skips the rest of a huge grid quickly.
    Skipped,
}

/// What the workgroups of a launch add up to so far: counters of the ones that finished, the
/// lowest-numbered real fault, and the lowest-numbered workgroup stopped by cancellation.
#[derive(Default)]
struct Outcome {
    stats: Stats,
    fault: Option<(u64, Fault)>,
    cancelled: Option<(u64, Fault)>,
}

impl Outcome {
    fn add(mut self, index: u64, r: Ended) -> Outcome {
        match r {
            Ended::Done(s) => self.stats.merge(&s),
            Ended::Fault(f) => self.offer(index, f),
            Ended::Skipped => {}
        }
        self
    }

    fn offer(&mut self, index: u64, f: Fault) {
        // Aborted workgroups only stop because a lower-numbered one faulted: never reported.
        let slot = match *f.kind {
            FaultKind::Aborted => return,
            FaultKind::Cancelled => &mut self.cancelled,
            _ => &mut self.fault,
        };
        if slot.as_ref().is_none_or(|(j, _)| index < *j) {
            *slot = Some((index, f));
        }
    }

    fn merge(mut self, other: Outcome) -> Outcome {
        self.stats.merge(&other.stats);
        for (i, f) in other.fault.into_iter().chain(other.cancelled) {
            self.offer(i, f);
        }
        self
    }
}

/// Workgroups handed to the thread pool at a time.
const GRID_CHUNK: u64 = 1 << 16;

/// Runs every workgroup of the grid, streaming: workgroup indices are generated as they
/// are run and results are folded as they come, so memory does not grow with the grid.
fn run_grid(
    prog: &Program,
    mem: &DeviceMemory,
    config: &EmuConfig,
    launch: &PreparedLaunch,
) -> Result<Stats, Fault> {
    let PreparedLaunch {
        dispatch: d,
        total,
        waves_per_wg,
        lds_bytes,
        ..
    } = launch;
    let (total, waves_per_wg, lds_bytes) = (*total, *waves_per_wg, *lds_bytes);
    let control = &config.control;
    let budget =
        Budget::new(config.limits.wave_instruction_budget).with_cancel(control.cancel_flag());
    control.start(total);
    let run = |index: u64, cache: &mut ThreadCache| -> Ended {
        if budget.stop(index).is_some() {
            return Ended::Skipped;
        }
        let wg = Workgroup::new(d, index, waves_per_wg, lds_bytes);
        let r = run_workgroup(prog, mem, d, &budget, wg, cache);
        match r {
            Ok(s) => {
                control.workgroup_done();
                Ended::Done(s)
            }
            Err(f) => {
                if !matches!(*f.kind, FaultKind::Aborted | FaultKind::Cancelled) {
                    budget.record_fault(index);
                }
                Ended::Fault(f)
            }
        }
    };
    // The grid goes in chunks: once a chunk has faulted or the launch is cancelled, the
    // workgroups of later chunks (all numbered higher) are not even visited.
    let mut outcome = Outcome::default();
    let mut cache = ThreadCache::default();
    let mut start = 0u64;
    while start < total {
        let end = start.saturating_add(GRID_CHUNK).min(total);
        let part = if config.single_threaded {
            (start..end).fold(Outcome::default(), |acc, i| {
                let r = run(i, &mut cache);
                acc.add(i, r)
            })
        } else {
            (start..end)
                .into_par_iter()
                .map_init(ThreadCache::default, |cache, i| (i, run(i, cache)))
                .fold(Outcome::default, |acc, (i, r)| acc.add(i, r))
                .reduce(Outcome::default, Outcome::merge)
        };
        outcome = outcome.merge(part);
        if outcome.fault.is_some() || control.is_cancelled() {
            break;
        }
        start = end;
    }
    if let Some((_, f)) = outcome.fault {
        return Err(f);
    }
    if control.is_cancelled() {
        // Cancelled: report where a running workgroup noticed, else the first one skipped.
        let f = outcome.cancelled.map(|(_, f)| f).unwrap_or_else(|| Fault {
            kernel: prog.name().to_string(),
            workgroup: workgroup_id(d.grid, control.progress().0.min(total - 1)),
            wave: 0,
            pc: prog.entry(),
            inst: String::new(),
            kind: Box::new(FaultKind::Cancelled),
        });
        return Err(f);
    }
    match outcome.cancelled {
        Some((_, f)) => Err(f),
        None => Ok(outcome.stats),
    }
}

fn run_workgroup(
    prog: &Program,
    mem: &DeviceMemory,
    d: &DispatchState,
    budget: &Budget,
    wg: Workgroup,
    cache: &mut ThreadCache,
) -> Result<Stats, Fault> {
    // Reuse the register files and counters of earlier workgroups on this thread.
    let ThreadCache { waves, counts } = cache;
    // A faulted workgroup leaves its counts behind; start from zero.
    counts.clear();
    counts.resize(prog.instruction_count(), 0);
    let mut stats = Stats::default();
    stats[Counter::Workgroups] = 1;
    stats[Counter::Waves] = wg.waves as u64;
    let mut env = Env {
        prog,
        mem,
        stats: &mut stats,
        counts,
        probe: None,
    };
    run_workgroup_with(prog, d, budget, wg, waves, |w, lds| {
        interp::step(&mut env, w, lds)
    })?;
    interp::fold_counts(prog, counts, &mut stats);
    Ok(stats)
}

/// Sets up workgroup `wg`: its waves in `waves` (whose register files earlier workgroups
/// leave for reuse) and a zeroed LDS, then runs it through the wave scheduler, `step`
/// executing each instruction. A fault names the wave and the instruction it stopped at.
pub fn run_workgroup_with<F>(
    prog: &Program,
    d: &DispatchState,
    budget: &Budget,
    wg: Workgroup,
    waves: &mut Vec<Wave>,
    step: F,
) -> Result<(), Fault>
where
    F: FnMut(&mut Wave, &mut Lds) -> Result<sched::Step, FaultKind>,
{
    let mut lds = prepare_workgroup(prog, d, &wg, waves)?;
    let waves = &mut waves[..wg.waves as usize];
    sched::run_workgroup(waves, &mut lds, budget, wg.index, step).map_err(|(k, kind)| {
        let pc = waves_pc(waves, k);
        wave_fault(prog, wg.id, k as u32, pc, kind)
    })
}

/// Makes the first `wg.waves` of `waves` (adding register files as needed, reusing those
/// earlier workgroups left) the launch state of workgroup `wg`, and returns its zeroed LDS.
pub fn prepare_workgroup(
    prog: &Program,
    d: &DispatchState,
    wg: &Workgroup,
    waves: &mut Vec<Wave>,
) -> Result<Lds, Fault> {
    let n = wg.waves as usize;
    let fault = |wave: u32, kind: FaultKind| wave_fault(prog, wg.id, wave, prog.entry(), kind);
    let private = prog.setup().descriptor.private_segment_fixed_size;
    while waves.len() < n {
        let w = Wave::try_new(waves.len() as u32, private)
            .map_err(|e| fault(waves.len() as u32, e.into()))?;
        waves.push(w);
    }
    init_workgroup_waves(prog, d, wg.id, &mut waves[..n]).map_err(|(k, e)| fault(k, e))?;
    Lds::new(wg.lds_bytes).ok_or_else(|| fault(0, FaultKind::Launch("LDS too large".into())))
}

/// The fault of wave `wave` of workgroup `wg` at `pc`.
pub fn wave_fault(prog: &Program, wg: [u32; 3], wave: u32, pc: u64, kind: FaultKind) -> Fault {
    Fault {
        kernel: prog.name().to_string(),
        workgroup: wg,
        wave,
        pc,
        inst: prog.disassemble(pc),
        kind: Box::new(kind),
    }
}

/// Per-thread state reused from one workgroup to the next.
#[derive(Default)]
struct ThreadCache {
    waves: Vec<Wave>,
    counts: Vec<u64>,
}

fn waves_pc(waves: &[Wave], k: usize) -> u64 {
    waves.get(k).map_or(0, |w| w.pc)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::memory::AccessKind;
    use crate::exec::stats::InstClass;

    /// A kernel descriptor: kernarg segment pointer in s[0:1] (code property bit 3),
    /// USER_SGPR_COUNT 2, workgroup ids x and y enabled (rsrc2 bits 7 and 8, so they land in
    /// s2 and s3), `lds` bytes of static LDS, an 8-byte kernarg segment.
    fn descriptor(lds: u32) -> KernelSetup {
        let mut kd = [0u8; 64];
        kd[0..4].copy_from_slice(&lds.to_le_bytes());
        kd[8..12].copy_from_slice(&8u32.to_le_bytes());
        kd[52..56].copy_from_slice(&((2u32 << 1) | (1 << 7) | (1 << 8)).to_le_bytes());
        kd[56..58].copy_from_slice(&8u16.to_le_bytes());
        KernelSetup::from_descriptor(&kd)
    }

    fn code(words: &[u32]) -> Vec<u8> {
        words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }

    #[test]
    fn ids_kernargs_lds_and_barrier() {
        for single_threaded in [false, true] {
            let mut emu = Emulator::new(DeviceMemory::new());
            emu.config_mut().single_threaded = single_threaded;
            let out = emu.memory_mut().alloc(6 * 128 * 4).unwrap();
            let prog = emu
                .load_code(
                    "exchange",
                    &tilegen_testkit::kernels::exchange(&[]),
                    descriptor(512),
                )
                .unwrap();
            let stats = emu
                .launch(&prog, [3, 2, 1], [128, 1, 1], &out.to_le_bytes(), 0)
                .unwrap();
            for y in 0..2u32 {
                for x in 0..3u32 {
                    for t in 0..128u32 {
                        let at = out + 4 * (((y * 3 + x) * 128 + t) as u64);
                        let want = y * 1_000_000 + x * 1000 + (127 - t);
                        assert_eq!(
                            emu.memory().read_u32(at).unwrap(),
                            want,
                            "wg ({x},{y}) tid {t}"
                        );
                    }
                }
            }
            assert_eq!((stats[Counter::Workgroups], stats[Counter::Waves]), (6, 12));
            // 22 instructions per wave (the listing above).
            assert_eq!(stats.instructions(), 12 * 22);
            assert_eq!(stats.by_opcode.get("s_barrier"), Some(&12));
            assert_eq!(stats.by_opcode.get("global_store_dword"), Some(&12));
            assert_eq!(stats.by_opcode.get("s_waitcnt"), Some(&36));
            assert_eq!(stats.class(InstClass::Lds), 24);
        }
    }

    /// Only wave 1 of workgroup (1,0,0) loads from address 16, which no allocation covers;
    /// the fault names that wave, the instruction and the address.
    #[test]
    fn fault_names_workgroup_wave_instruction_and_address() {
        let words = [
            0xbf068102, // s_cmp_eq_u32 s2, 1
            0xbf840008, // s_cbranch_scc0 8
            0x260200ff, 0x000003ff, // v_and_b32_e32 v1, 0x3ff, v0
            0x7db602c0, // v_cmpx_le_u32_e32 vcc, 64, v1
            0x7e080280, // v_mov_b32_e32 v4, 0
            0x7e0a0280, // v_mov_b32_e32 v5, 0
            0xdc508010, 0x037f0004, // global_load_dword v3, v[4:5], off offset:16
            0xbf8c0f70, // s_waitcnt vmcnt(0)
            0xbf810000, // s_endpgm
        ];
        let mut emu = Emulator::new(DeviceMemory::new());
        let prog = emu
            .load_code("nullread", &code(&words), descriptor(0))
            .unwrap();
        let f = emu
            .launch(&prog, [4, 1, 1], [128, 1, 1], &[0; 8], 0)
            .unwrap_err();
        assert_eq!(
            (f.kernel.as_str(), f.workgroup, f.wave),
            ("nullread", [1, 0, 0], 1)
        );
        assert_eq!(f.pc, prog.entry() + 28);
        assert!(f.inst.starts_with("global_load_dword"), "{}", f.inst);
        match &*f.kind {
            FaultKind::Memory(m) => assert_eq!((m.addr, m.len, m.kind), (16, 4, AccessKind::Read)),
            k => panic!("unexpected fault {k:?}"),
        }
    }

    #[test]
    fn endless_loop_runs_out_of_budget() {
        let mut emu = Emulator::new(DeviceMemory::new());
        emu.config_mut().limits.wave_instruction_budget = 100_000;
        let prog = emu
            .load_code(
                "spin",
                &code(&[0xbf82ffff /* s_branch -1 */]),
                descriptor(0),
            )
            .unwrap();
        let f = emu
            .launch(&prog, [1, 1, 1], [64, 1, 1], &[0; 8], 0)
            .unwrap_err();
        assert_eq!(*f.kind, FaultKind::Budget { budget: 100_000 });
        assert_eq!(f.pc, prog.entry());
        assert!(f.inst.starts_with("s_branch"), "{}", f.inst);
    }

    #[test]
    fn invalid_launches_are_refused() {
        let mut emu = Emulator::new(DeviceMemory::new());
        let prog = emu
            .load_code("k", &code(&[0xbf810000]), descriptor(0))
            .unwrap();
        for (grid, block, lds) in [
            ([0, 1, 1], [64, 1, 1], 0),
            ([1, 1, 1], [1025, 1, 1], 0),
            ([1, 1, 1], [64, 1, 1], 200_000),
        ] {
            let f = emu.launch(&prog, grid, block, &[0; 8], lds).unwrap_err();
            assert!(matches!(*f.kind, FaultKind::Launch(_)), "{f}");
        }
        // Launch-time allocations are released again.
        let before = emu.memory().allocation_count();
        emu.launch(&prog, [2, 1, 1], [64, 1, 1], &[0; 8], 0)
            .unwrap();
        assert_eq!(emu.memory().allocation_count(), before);
    }

    fn descriptor_with_scratch(private: u32) -> KernelSetup {
        let mut kd = [0u8; 64];
        kd[4..8].copy_from_slice(&private.to_le_bytes());
        kd[8..12].copy_from_slice(&8u32.to_le_bytes());
        KernelSetup::from_descriptor(&kd)
    }

    /// With the default limits an endless single-wave loop stops within seconds, with a fault
    /// naming the wave and the PC of the loop.
    #[test]
    fn an_endless_wave_stops_within_seconds_by_default() {
        let mut emu = Emulator::new(DeviceMemory::new());
        let prog = emu
            .load_code(
                "spin",
                &code(&[
                    0xbf800000, /* s_nop 0 */
                    0xbf82ffff, /* s_branch -1 */
                ]),
                descriptor(0),
            )
            .unwrap();
        let t = std::time::Instant::now();
        let f = emu
            .launch(&prog, [1, 1, 1], [64, 1, 1], &[0; 8], 0)
            .unwrap_err();
        let secs = t.elapsed().as_secs_f64();
        assert_eq!(
            *f.kind,
            FaultKind::Budget {
                budget: crate::exec::limits::DEFAULT_WAVE_INSTRUCTION_BUDGET
            }
        );
        assert_eq!((f.wave, f.pc), (0, prog.entry() + 4));
        assert!(f.to_string().contains("wave 0"), "{f}");
        assert!(secs < 10.0, "{secs:.1} s");
        eprintln!("endless loop stopped after {secs:.2} s");
    }

    #[test]
    fn a_huge_private_segment_is_refused_before_allocation() {
        let mut emu = Emulator::new(DeviceMemory::with_limit(1 << 30));
        let prog = emu
            .load_code("k", &code(&[0xbf810000]), descriptor_with_scratch(u32::MAX))
            .unwrap();
        let before = emu.memory().allocation_count();
        let f = emu
            .launch(&prog, [4, 1, 1], [256, 1, 1], &[0; 8], 0)
            .unwrap_err();
        match &*f.kind {
            FaultKind::Limit(LimitError::Memory {
                requested, limit, ..
            }) => {
                assert!(*requested > 4 * 64 * u32::MAX as u64, "{f}");
                assert_eq!(*limit, 1 << 30);
            }
            k => panic!("unexpected {k:?}"),
        }
        assert!(f.to_string().contains("max_memory"), "{f}");
        assert_eq!(emu.memory().allocation_count(), before);
        // A modest private segment fits.
        let prog = emu
            .load_code("k", &code(&[0xbf810000]), descriptor_with_scratch(1024))
            .unwrap();
        emu.launch(&prog, [4, 1, 1], [256, 1, 1], &[0; 8], 0)
            .unwrap();
    }

    #[test]
    fn grids_over_the_limits_are_refused_and_large_ones_stream() {
        let mut emu = Emulator::new(DeviceMemory::new());
        let prog = emu
            .load_code("k", &code(&[0xbf810000]), descriptor(0))
            .unwrap();
        let f = emu
            .launch(&prog, [65536, 65536, 1], [256, 1, 1], &[0; 8], 0)
            .unwrap_err();
        assert!(
            matches!(*f.kind, FaultKind::Limit(LimitError::Workgroups { .. })),
            "{f}"
        );
        let f = emu
            .launch(&prog, [u32::MAX; 3], [1024, 1, 1], &[0; 8], 0)
            .unwrap_err();
        assert!(matches!(*f.kind, FaultKind::Limit(_)), "{f}");
        emu.config_mut().limits.max_work_items = 1000;
        let f = emu
            .launch(&prog, [4, 1, 1], [256, 1, 1], &[0; 8], 0)
            .unwrap_err();
        assert!(
            matches!(*f.kind, FaultKind::Limit(LimitError::WorkItems { .. })),
            "{f}"
        );
        // Half a million workgroups run without memory proportional to the grid; the
        // progress counter follows.
        emu.config_mut().limits.max_work_items = u64::MAX;
        let control = emu.config().control.clone();
        let stats = emu
            .launch(&prog, [1 << 19, 1, 1], [64, 1, 1], &[0; 8], 0)
            .unwrap();
        assert_eq!(stats[Counter::Workgroups], 1 << 19);
        assert_eq!(control.progress(), (1 << 19, 1 << 19));
    }

    #[test]
    fn a_cancelled_launch_stops_cleanly() {
        let mut emu = Emulator::new(DeviceMemory::new());
        let prog = emu
            .load_code("spin", &code(&[0xbf82ffff]), descriptor(0))
            .unwrap();
        // Only the cancellation can stop this launch.
        emu.config_mut().limits.wave_instruction_budget = u64::MAX;
        let control = emu.config().control.clone();
        let canceller = {
            let control = control.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(50));
                control.cancel();
            })
        };
        let t = std::time::Instant::now();
        let f = emu
            .launch(&prog, [64, 1, 1], [256, 1, 1], &[0; 8], 0)
            .unwrap_err();
        canceller.join().unwrap();
        assert_eq!(*f.kind, FaultKind::Cancelled, "{f}");
        assert!(t.elapsed().as_secs_f64() < 5.0);
        // The flag stays raised until reset, and a huge grid is not even walked through.
        emu.config_mut().limits.max_workgroups = u64::MAX;
        emu.config_mut().limits.max_work_items = u64::MAX;
        let t = std::time::Instant::now();
        let f = emu
            .launch(&prog, [1 << 24, 1, 1], [64, 1, 1], &[0; 8], 0)
            .unwrap_err();
        assert_eq!(*f.kind, FaultKind::Cancelled);
        assert!(t.elapsed().as_secs_f64() < 1.0, "{:?}", t.elapsed());
        control.reset();
        let prog = emu
            .load_code("k", &code(&[0xbf810000]), descriptor(0))
            .unwrap();
        emu.launch(&prog, [1, 1, 1], [64, 1, 1], &[0; 8], 0)
            .unwrap();
    }

    #[test]
    fn a_kernarg_segment_over_the_memory_limit_is_refused() {
        let mut emu = Emulator::new(DeviceMemory::with_limit(1 << 20));
        let mut kd = [0u8; 64];
        kd[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        let prog = emu
            .load_code("k", &code(&[0xbf810000]), KernelSetup::from_descriptor(&kd))
            .unwrap();
        let f = emu
            .launch(&prog, [1, 1, 1], [64, 1, 1], &[0; 8], 0)
            .unwrap_err();
        assert!(
            matches!(*f.kind, FaultKind::Limit(LimitError::Memory { .. })),
            "{f}"
        );
    }
}
