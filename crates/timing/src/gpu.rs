//! The whole GPU: occupancy from the kernel descriptor, dispatch of workgroups to XCDs and
//! CUs, the event loop over the simulated CUs, and the extrapolation from a sample.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use serde::Serialize;

use tilegen_emu::exec::launch::Workgroup;
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::setup::DispatchState;
use tilegen_emu::isa::Opcode;

use tilegen_arch::WorkgroupNeeds;

use crate::TimingError;
use crate::cu::{Ctx, Cu, Finished};
use crate::mem::MemoryReport;
use crate::reason::{PerReason, Reason};
use crate::trace::{Trace, TraceBuf, TraceOptions};

pub use tilegen_arch::{CuLimits, Limiter};

/// [`Limiter`] in reports and stored details: its name ([`Limiter::name`]).
mod limiter_name {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};
    use tilegen_arch::Limiter;

    pub fn serialize<S: Serializer>(l: &Limiter, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(l.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Limiter, D::Error> {
        let name = String::deserialize(d)?;
        Limiter::from_name(&name).ok_or_else(|| {
            D::Error::unknown_variant(
                &name,
                &["waves", "vgprs", "sgprs", "lds", "barriers", "workgroups"],
            )
        })
    }
}

/// How many workgroups of a kernel fit on one CU, and why not more.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Occupancy {
    /// Waves per workgroup.
    pub waves_per_workgroup: u32,
    /// Unified VGPRs (arch + acc) allocated per lane.
    pub vgprs: u32,
    /// SGPRs allocated per wave.
    pub sgprs: u32,
    /// LDS bytes allocated per workgroup (granule-rounded).
    pub lds_bytes: u32,
    /// Waves one SIMD can hold for this kernel.
    pub waves_per_simd: u32,
    /// Resident workgroups per CU.
    pub workgroups_per_cu: u32,
    /// The binding limit.
    #[serde(with = "limiter_name")]
    pub limiter: Limiter,
}

/// Whether the kernel contains `s_barrier`.
pub(crate) fn uses_barrier(prog: &Program) -> bool {
    (0..prog.instruction_count())
        .any(|s| prog.at_slot(s).is_some_and(|i| i.op == Opcode::S_BARRIER))
}

/// Whether the kernel contains matrix instructions.
pub(crate) fn uses_mfma(prog: &Program) -> bool {
    (0..prog.instruction_count()).any(|s| {
        prog.at_slot(s).is_some_and(|i| {
            tilegen_emu::exec::interp::classify(i) == tilegen_emu::exec::stats::InstClass::Mfma
        })
    })
}

/// The occupancy of `prog` on a gfx950 CU launched with `block` work-items and `dynamic_lds`
/// bytes.
pub fn occupancy(
    prog: &Program,
    block: [u32; 3],
    dynamic_lds: u32,
) -> Result<Occupancy, TimingError> {
    occupancy_on(&CuLimits::GFX950, prog, block, dynamic_lds)
}

/// The occupancy of `prog` on a CU of `limits` launched with `block` work-items and
/// `dynamic_lds` bytes (the rule is tilegen-arch's [`CuLimits::occupancy`]).
pub fn occupancy_on(
    limits: &CuLimits,
    prog: &Program,
    block: [u32; 3],
    dynamic_lds: u32,
) -> Result<Occupancy, TimingError> {
    let kd = &prog.setup().descriptor;
    let r = limits.occupancy(&WorkgroupNeeds {
        work_items: block.iter().map(|&b| u64::from(b)).product(),
        vgprs: kd.allocated_vgprs(),
        granulated_sgprs: kd.granulated_sgpr_count(),
        lds_bytes: u64::from(kd.group_segment_fixed_size) + u64::from(dynamic_lds),
        barrier: uses_barrier(prog),
    });
    if r.workgroups_per_cu == 0 {
        return Err(TimingError::DoesNotFit(format!(
            "a workgroup of {} waves with {} VGPRs, {} SGPRs and {} bytes of LDS does not fit on a CU (limited by {:?})",
            r.waves_per_workgroup, r.vgprs, r.sgprs, r.lds_bytes, r.limiter
        )));
    }
    Ok(Occupancy {
        waves_per_workgroup: r.waves_per_workgroup,
        vgprs: r.vgprs,
        sgprs: r.sgprs,
        lds_bytes: r.lds_bytes as u32,
        waves_per_simd: r.waves_per_simd,
        workgroups_per_cu: r.workgroups_per_cu,
        limiter: r.limiter,
    })
}

/// How workgroups reach the simulated CUs.
pub(crate) enum Dispatch {
    /// Each simulated CU runs its list (all resident at once).
    Fixed(Vec<Vec<u64>>),
    /// Workgroup `i` goes to XCD `i mod xcds`, then to the XCD's CUs round robin as slots free.
    Dynamic {
        /// Workgroups not yet placed, per XCD.
        pending: Vec<VecDeque<u64>>,
        /// The XCD's CU the round robin tries next.
        rr: Vec<usize>,
    },
}

/// The machine of one simulation and the workgroups it places: how many CUs, how they group
/// into XCDs, what each holds, and the launch every workgroup comes from.
pub(crate) struct Machine<'a> {
    /// The launch's dispatch state.
    pub dispatch: &'a DispatchState,
    /// CUs simulated.
    pub cus: usize,
    /// CUs per XCD (CU `c` is on XCD `c / cus_per_xcd`).
    pub cus_per_xcd: usize,
    /// Workgroups one CU holds.
    pub capacity: usize,
    /// Waves per workgroup.
    pub waves: u32,
    /// LDS bytes per workgroup.
    pub lds_bytes: u32,
}

/// What one simulation produced.
pub(crate) struct SimResult {
    /// When the last workgroup ended.
    pub end: u64,
    /// When, in addition, HBM had taken every byte queued for it.
    pub drained: u64,
    pub finished: Vec<Finished>,
    pub stalls: Vec<PerReason<u64>>,
    pub lds_busy: u64,
    pub memory: MemoryReport,
    pub trace: Option<Trace>,
    pub cus: usize,
}

/// The simulated CUs and the queue of their next events.
struct Floor<'a> {
    cus: Vec<Cu>,
    /// (time, CU) of each CU's next event; stale entries are skipped.
    heap: BinaryHeap<Reverse<(u64, usize)>>,
    /// Waves placed so far (a wave's age orders issue).
    age: u64,
    machine: &'a Machine<'a>,
}

impl Floor<'_> {
    /// Makes CU `c`'s next event `t`, unless it has an earlier one.
    fn schedule(&mut self, c: usize, t: u64) {
        let cu = &mut self.cus[c];
        if cu.scheduled.is_none_or(|s| t < s) {
            cu.scheduled = Some(t);
            self.heap.push(Reverse((t, c)));
        }
    }

    /// Places workgroup `index` on CU `c`, its first instruction issuing at `t` at the
    /// earliest.
    fn place(&mut self, c: usize, index: u64, t: u64, ctx: &Ctx<'_>) -> Result<(), TimingError> {
        let m = self.machine;
        let wg = Workgroup::new(m.dispatch, index, m.waves, m.lds_bytes);
        self.cus[c].dispatch(wg, t, &mut self.age, ctx.prog, m.dispatch, ctx.seq)
    }

    /// Places pending workgroups of XCD `x` on its CUs with free slots (round robin) at `t`.
    fn fill(
        &mut self,
        dispatch: &mut Dispatch,
        x: usize,
        t: u64,
        ctx: &Ctx<'_>,
    ) -> Result<(), TimingError> {
        let Dispatch::Dynamic { pending, rr } = dispatch else {
            return Ok(());
        };
        let Some(queue) = pending.get_mut(x) else {
            return Ok(());
        };
        let per_xcd = self.machine.cus_per_xcd;
        let first = x * per_xcd;
        let n = per_xcd.min(self.cus.len().saturating_sub(first));
        if n == 0 {
            return Ok(());
        }
        while !queue.is_empty() {
            let Some(off) = (0..n)
                .map(|j| (rr[x] + j) % n)
                .find(|&j| self.cus[first + j].has_room())
            else {
                break;
            };
            let c = first + off;
            rr[x] = (off + 1) % n;
            let Some(i) = queue.pop_front() else { break };
            self.place(c, i, t, ctx)?;
            self.schedule(c, t);
        }
        Ok(())
    }
}

/// Runs the simulated CUs of `machine` until every workgroup `dispatch` holds has finished;
/// `trace`: trace the first CU (with the clock the trace reports).
pub(crate) fn simulate(
    ctx: &mut Ctx<'_>,
    machine: &Machine<'_>,
    mut dispatch: Dispatch,
    trace: Option<(TraceOptions, f64)>,
) -> Result<SimResult, TimingError> {
    let k = ctx.seq;
    let per_xcd = machine.cus_per_xcd.max(1);
    let mut floor = Floor {
        cus: (0..machine.cus)
            .map(|c| Cu::new(c, c / per_xcd, machine.capacity, k, ctx.units))
            .collect(),
        heap: BinaryHeap::new(),
        age: 0,
        machine,
    };
    if let Some((opts, clock)) = trace
        && let Some(cu) = floor.cus.first_mut()
    {
        cu.trace = Some(TraceBuf::new(opts, k.simds, clock));
    }
    // Initial placement.
    let start = k.dispatch;
    match &mut dispatch {
        Dispatch::Fixed(lists) => {
            for (c, list) in lists.iter().enumerate().take(machine.cus) {
                for &i in list {
                    floor.place(c, i, start, ctx)?;
                }
                if !floor.cus[c].is_empty() {
                    floor.schedule(c, start);
                }
            }
        }
        Dispatch::Dynamic { .. } => {
            for x in 0..machine.cus.div_ceil(per_xcd) {
                floor.fill(&mut dispatch, x, start, ctx)?;
            }
        }
    }
    let mut finished = Vec::new();
    let mut end = 0u64;
    while let Some(Reverse((t, c))) = floor.heap.pop() {
        if floor.cus[c].scheduled != Some(t) {
            continue;
        }
        floor.cus[c].scheduled = None;
        if let Some(n) = floor.cus[c].step(t, ctx)? {
            floor.schedule(c, n);
        }
        if !floor.cus[c].finished.is_empty() {
            for f in floor.cus[c].finished.drain(..) {
                end = end.max(f.end);
                finished.push(f);
            }
            let x = floor.cus[c].xcd;
            if matches!(dispatch, Dispatch::Dynamic { .. }) {
                floor.fill(&mut dispatch, x, t + k.dispatch, ctx)?;
            }
        }
    }
    if let Some(cu) = floor.cus.iter().find(|cu| !cu.is_empty()) {
        return Err(TimingError::Deadlock {
            cu: cu.sim_index,
            cycle: end,
        });
    }
    let mut stalls = vec![PerReason::default(); k.simds];
    let mut lds_busy = 0;
    let mut trace_out = None;
    for cu in floor.cus.iter_mut() {
        cu.close(end, k.slot);
        // A CU that never held a workgroup adds only idle cycles: leave it out, so a small
        // grid's breakdown describes the CUs that worked.
        let worked = cu
            .stalls
            .iter()
            .any(|a| a.iter().any(|(r, v)| r != Reason::Idle && v > 0));
        for (s, a) in cu.stalls.iter().enumerate().filter(|_| worked) {
            stalls[s].add(a);
        }
        lds_busy += cu.units.lds.busy;
        if let Some(t) = cu.trace.take() {
            trace_out = Some(t.trace);
        }
    }
    Ok(SimResult {
        end,
        drained: end.max(ctx.mem.hbm_drained().ceil() as u64),
        finished,
        stalls,
        lds_busy,
        memory: ctx.mem.finish_report(),
        trace: trace_out,
        cus: machine.cus,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilegen_emu::exec::setup::KernelSetup;

    #[test]
    fn limiters_and_bounds_are_named_as_in_the_json_report() {
        use crate::Bound;
        for l in Limiter::ALL {
            let o = Occupancy {
                waves_per_workgroup: 4,
                vgprs: 128,
                sgprs: 32,
                lds_bytes: 0,
                waves_per_simd: 4,
                workgroups_per_cu: 4,
                limiter: l,
            };
            let v = serde_json::to_value(&o).unwrap();
            assert_eq!(v["limiter"], l.name());
            assert_eq!(serde_json::from_value::<Occupancy>(v).unwrap(), o);
        }
        let mut v = serde_json::to_value(Occupancy {
            waves_per_workgroup: 1,
            vgprs: 8,
            sgprs: 16,
            lds_bytes: 0,
            waves_per_simd: 8,
            workgroups_per_cu: 32,
            limiter: Limiter::Waves,
        })
        .unwrap();
        v["limiter"] = "registers".into();
        assert!(serde_json::from_value::<Occupancy>(v).is_err());
        for b in [
            Bound::Mfma,
            Bound::Lds,
            Bound::MemoryBandwidth,
            Bound::MemoryLatency,
            Bound::Issue,
            Bound::Launch,
        ] {
            assert_eq!(serde_json::to_value(b).unwrap(), b.name());
        }
    }

    fn prog(vgpr_granules: u32, lds: u32, code: &[u32]) -> (DeviceMemory, Program) {
        let mut kd = [0u8; 64];
        kd[0..4].copy_from_slice(&lds.to_le_bytes());
        kd[48..52].copy_from_slice(&(vgpr_granules & 0x3f).to_le_bytes());
        let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut mem = DeviceMemory::new();
        let p =
            Program::load_code(&mut mem, "k", &bytes, KernelSetup::from_descriptor(&kd)).unwrap();
        (mem, p)
    }

    use tilegen_emu::exec::memory::DeviceMemory;

    const ENDPGM: u32 = 0xbf81_0000;
    const BARRIER: u32 = 0xbf8a_0000;

    #[test]
    fn occupancy_limits() {
        let p = CuLimits::GFX950;
        // 8 VGPRs, no LDS, one wave per workgroup: 8 waves per SIMD, 32 workgroups per CU.
        let (_m, k) = prog(0, 0, &[ENDPGM]);
        let o = occupancy(&k, [64, 1, 1], 0).unwrap();
        assert_eq!((o.waves_per_simd, o.workgroups_per_cu), (8, 32));
        // 256 unified VGPRs: 2 waves per SIMD; 4-wave workgroups: 2 per CU.
        let (_m, k) = prog(31, 0, &[ENDPGM]);
        let o = occupancy_on(&p, &k, [256, 1, 1], 0).unwrap();
        assert_eq!(
            (o.vgprs, o.waves_per_simd, o.workgroups_per_cu),
            (256, 2, 2)
        );
        assert_eq!(o.limiter, Limiter::Vgprs);
        // 64 KB of LDS (+1 byte of dynamic LDS rounds up a granule): 2 per CU.
        let (_m, k) = prog(0, 65536, &[ENDPGM]);
        let o = occupancy_on(&p, &k, [256, 1, 1], 1).unwrap();
        assert_eq!(
            (o.lds_bytes, o.workgroups_per_cu, o.limiter),
            (66560, 2, Limiter::Lds)
        );
        // Barriers cap multi-wave workgroups at 16 per CU and the CU holds 32 workgroups:
        // binding once SIMDs hold more than 8 waves, which gfx950's do not.
        let (_m, k) = prog(0, 0, &[BARRIER, ENDPGM]);
        let o = occupancy_on(&p, &k, [128, 1, 1], 0).unwrap();
        assert_eq!((o.workgroups_per_cu, o.limiter), (16, Limiter::Waves));
        let p16 = CuLimits {
            waves_per_simd: 16,
            ..p
        };
        let o = occupancy_on(&p16, &k, [128, 1, 1], 0).unwrap();
        assert_eq!((o.workgroups_per_cu, o.limiter), (16, Limiter::Barriers));
        let o = occupancy_on(&p16, &k, [64, 1, 1], 0).unwrap();
        assert_eq!(
            o.limiter,
            Limiter::Workgroups,
            "one-wave workgroups need no barrier"
        );
        // 16 waves of 512 VGPRs do not fit.
        let (_m, k) = prog(63, 0, &[ENDPGM]);
        assert!(occupancy_on(&p, &k, [1024, 1, 1], 0).is_err());
    }
}
