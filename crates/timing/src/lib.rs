//! A cycle-level timing model of an MI355X running a gfx950 code object.
//!
//! # What it simulates
//! Instructions execute functionally at issue, through the emulator's own
//! [`tilegen_emu::exec::interp::step`] on the real waves (so addresses, branches, loop counts and EXEC
//! masks are the kernel's own); the model only decides *when* each wave may issue. See
//! [`cu`](self) for the issue rules of a CU: 4 SIMDs served round robin, one instruction per
//! wave and per category per slot, oldest first with `s_setprio`, pipe occupancy (VALU,
//! matrix core passes from LLVM's gfx950 scheduling model, one LDS port per SIMD pair with
//! the 64-bank conflict passes of `ds::lds_conflict_cycles`, which LDS-DMA loads write
//! through too, the texture addresser),
//! per-register ready times with the MFMA hazard wait states, `s_waitcnt` against modelled
//! completion times (vmcnt in order; lgkmcnt mixing LDS and SMEM), `s_barrier`, `s_sleep`,
//! `s_nop`. Vector memory goes through a vL1D per CU, the L2 of the XCD, the MALL and HBM,
//! keyed by the line addresses the instructions computed; every level with a bandwidth is a
//! FIFO server, so latency grows with load. The L2 channel and set of a line come from an XOR
//! fold of its whole address (so the rows of a row-major operand, a power of two apart, spread
//! over the channels instead of queueing on one), and a hit on a line whose fill is still in
//! flight waits for that fill (the request merges with the miss), at every level. Matrix
//! arithmetic is skipped (accumulators keep their values) unless
//! [`TimingOptions::exact_mfma`] is set: it is most of the emulation cost and never decides
//! an address or a branch of a GEMM.
//!
//! # The whole GPU, and the sample
//! Occupancy comes from the kernel descriptor ([`occupancy`]). Workgroup `i` goes to XCD
//! `i mod 8`; within an XCD the k-th workgroup goes to CU `k mod 32` (breadth first), up to
//! the occupancy, in rounds. [`Method::Full`] simulates every CU of the GPU and every
//! workgroup with dynamic dispatch (a slot that frees takes the XCD's next workgroup).
//! [`Method::Rounds`] (the default) simulates only XCD 0 (it holds the most workgroups), one
//! round of resident workgroups on (up to [`TimingOptions::max_cus`] of) its CUs in full
//! detail, with HBM and MALL bandwidth and MALL capacity scaled to the simulated CUs' share of
//! the CUs active GPU-wide; the kernel time is `(rounds - 1) * T(first round) + T(last
//! round)` (the last, partial round simulated on its own when it differs). The kernel ends
//! when its last wave has ended and HBM has taken every byte queued for it (the write-back of
//! the results the last round stored, in the final round only: earlier rounds' traffic
//! overlaps the next round). The other XCDs load some of XCD 0's lines in the same round
//! (a GEMM's A rows, when its columns spread over the XCDs), and the MALL serves them from
//! one HBM fetch: before a round is simulated, a census ([`CrossXcd`]) runs every XCD's
//! workgroups of the round functionally up to the head of their first loop that loads and
//! counts which XCDs load which lines; each of XCD 0's load instructions then takes its share
//! (the mean of `1 / XCDs` over its lines) of the HBM transfers it causes. A last round at
//! least half full reuses the first round's census. Lines that earlier rounds brought into
//! the MALL still count as HBM traffic in the later rounds (each simulated round starts with
//! cold caches). The error of the method against a full simulation is measured by a test on
//! mid-size grids.
//!
//! # What is approximate
//! The parameters no document gives (the clock sustained under matrix load, launch overhead,
//! workgroup dispatch, the loaded HBM and MALL latencies and bandwidths, the L2 latency and
//! the rate an L2 channel sustains below its documented peak, ...)
//! are fitted on the calibration rows of AMD's measured AITER table (`tilegen-aiter`'s
//! `aiter-calibrate --fit`; their sources in `params.toml` say so, and say which ones those
//! rows cannot identify). The clock is one number per kernel (the sustained MFMA clock for
//! kernels with matrix instructions, else the peak); the instruction cache, the scalar cache,
//! TLBs, DRAM pages and write-after-read hazards are not modelled; the XOR fold that picks a
//! line's L2 channel stands in for the hardware's undocumented address hash.

#![deny(missing_docs)]

mod census;
mod cu;
mod gpu;
mod inst;
mod mem;
mod params;
mod trace;

use serde::Serialize;

use tilegen_emu::exec::fault::Fault;
use tilegen_emu::exec::interp::Probe;
use tilegen_emu::exec::launch::{LaunchShape, prepare_launch};
use tilegen_emu::exec::limits::Limits;
use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::stats::Stats;

pub use cu::{Reason, StallBreakdown};
pub use gpu::{Limiter, Occupancy, occupancy};
pub use mem::MemoryReport;
pub use params::{
    ClockParams, GpuParams, IssueParams, LdsParams, MfmaParams, Number, Param, ParamBound, Params,
    ParamsError, SaluParams, ValuParams, VmemParams,
};
pub use trace::{Trace, TraceOptions};

use cu::{Ctx, Knobs};
use gpu::Dispatch;
use inst::InstInfo;

/// A launch to time: grid and workgroup size, dynamic LDS, kernel arguments.
#[derive(Clone, Copy, Debug)]
pub struct TimingLaunch<'a> {
    /// Workgroups in x, y, z (z is the split-K dimension of split-K GEMMs).
    pub grid: [u32; 3],
    /// Work-items per workgroup in x, y, z.
    pub block: [u32; 3],
    /// LDS bytes on top of the descriptor's static amount.
    pub dynamic_lds: u32,
    /// The kernel argument segment (hidden arguments included).
    pub kernarg: &'a [u8],
}

/// How a prediction is computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// One round of XCD 0 (and the last partial round), extrapolated over the rounds.
    #[default]
    Rounds,
    /// Every workgroup on every CU.
    Full,
}

/// Options of [`predict`].
#[derive(Clone, Debug)]
pub struct TimingOptions {
    /// Also return a trace of the first simulated CU.
    pub trace: Option<TraceOptions>,
    /// Sampled rounds or the full grid.
    pub method: Method,
    /// Simulate at most this many CUs of XCD 0 in [`Method::Rounds`] (default: all 32). Fewer
    /// CUs run faster but see less L2 reuse between workgroups.
    pub max_cus: Option<u32>,
    /// Compute MFMA results (slow; only needed when a kernel branches on them).
    pub exact_mfma: bool,
    /// Per-wave instruction budget (an endless loop ends in an error).
    pub wave_instruction_budget: u64,
    /// [`Method::Rounds`]: how the simulation of XCD 0 learns which of its lines the other
    /// XCDs load too.
    pub cross_xcd: CrossXcd,
}

/// How a sampled simulation ([`Method::Rounds`], which runs XCD 0 alone) accounts for the
/// other XCDs loading the same lines in the same round: the MALL serves them from one HBM
/// fetch.
#[derive(Clone, Debug, PartialEq)]
pub enum CrossXcd {
    /// Assume the other XCDs load none of XCD 0's lines.
    Ignore,
    /// Before each simulated round, run every XCD's workgroups of the round functionally
    /// until each wave reaches the head of a loop that loads (or has run `instructions`), and
    /// count which XCDs load which lines.
    Census {
        /// Instruction budget per wave.
        instructions: u64,
    },
    /// The census of an earlier prediction of the same launch (same grid, buffers and
    /// addresses; only loop counts may differ, as in a K extrapolation's two runs).
    Known(XcdShares),
}

impl Default for CrossXcd {
    fn default() -> Self {
        CrossXcd::Census {
            instructions: DEFAULT_CENSUS_INSTRUCTIONS,
        }
    }
}

/// What the census of a prediction found, per simulated round (opaque: give it back through
/// [`CrossXcd::Known`]; [`Prediction::hbm_own_share`] states its first round).
#[derive(Clone, Debug, PartialEq)]
pub struct XcdShares {
    rounds: Vec<(u64, census::Census)>,
}

impl Default for TimingOptions {
    fn default() -> Self {
        TimingOptions {
            trace: None,
            method: Method::Rounds,
            max_cus: None,
            exact_mfma: false,
            wave_instruction_budget: Limits::default().wave_instruction_budget,
            cross_xcd: CrossXcd::default(),
        }
    }
}

/// Instructions per wave the census of a round runs by default: enough for the prologue and
/// the first steps of a GEMM's K loop, whose address pattern the later steps repeat.
pub const DEFAULT_CENSUS_INSTRUCTIONS: u64 = 2048;

/// What bounds the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// The matrix cores are busy most of the time.
    Mfma,
    /// LDS bandwidth or latency.
    Lds,
    /// HBM (or MALL/L2) bandwidth.
    MemoryBandwidth,
    /// Waiting for memory with bandwidth to spare.
    MemoryLatency,
    /// Instruction issue, dependencies, barriers.
    Issue,
    /// The launch overhead dominates.
    Launch,
}

impl Bound {
    /// The bound's name, as in the JSON report.
    pub fn name(self) -> &'static str {
        match self {
            Bound::Mfma => "mfma",
            Bound::Lds => "lds",
            Bound::MemoryBandwidth => "memory_bandwidth",
            Bound::MemoryLatency => "memory_latency",
            Bound::Issue => "issue",
            Bound::Launch => "launch",
        }
    }
}

/// Per-SIMD cycles by reason (SIMD `simd` of every simulated CU that held a workgroup, summed).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SimdStalls {
    /// SIMD index in the CU.
    pub simd: u32,
    /// Cycles by reason.
    pub cycles: StallBreakdown,
}

/// A predicted MI355X run time.
#[derive(Clone, Debug, Serialize)]
pub struct Prediction {
    /// Predicted time of the launch (kernel plus launch overhead), µs.
    pub us: f64,
    /// Of which the launch overhead, µs.
    pub launch_us: f64,
    /// Engine clock the cycles are converted with, GHz.
    pub clock_ghz: f64,
    /// Kernel cycles (all rounds).
    pub cycles: u64,
    /// Fraction of SIMD time the matrix cores are busy, GPU-wide.
    pub mfma_busy: f64,
    /// Achieved HBM bandwidth, GB/s.
    pub hbm_gbs: f64,
    /// What bounds the kernel.
    pub bound: Bound,
    /// Cycles by reason per SIMD over the simulated CUs.
    pub stalls: Vec<SimdStalls>,
    /// [`Method::Rounds`]: the share of XCD 0's HBM traffic of the first round that it
    /// fetches itself (1: no other XCD loads its lines; `None`: no census was run).
    pub hbm_own_share: Option<f64>,
    /// The census behind `hbm_own_share`, for [`CrossXcd::Known`].
    #[serde(skip)]
    pub xcd_shares: Option<XcdShares>,
    /// Workgroups simulated in detail.
    pub workgroups_simulated: u64,
    /// Workgroups in the grid.
    pub workgroups_total: u64,
    /// Rounds of resident workgroups on the busiest XCD.
    pub rounds: u64,
    /// CUs simulated.
    pub cus_simulated: u32,
    /// How the time was computed.
    pub method: Method,
    /// The method in words (what was simulated and how it was scaled).
    pub method_detail: String,
    /// Occupancy.
    pub occupancy: Occupancy,
    /// Cache and HBM counts of the simulated workgroups.
    pub memory: MemoryReport,
    /// Instructions the simulated workgroups executed.
    pub instructions: u64,
    /// The trace, when asked for (not serialized; see [`Trace::write_json`]).
    #[serde(skip)]
    pub trace: Option<Trace>,
}

/// Why a prediction failed.
#[derive(Debug, thiserror::Error)]
pub enum TimingError {
    /// The launch was refused or the kernel faulted while it was simulated.
    #[error("timing launch")]
    Fault(#[from] Fault),
    /// A workgroup does not fit on a CU.
    #[error("occupancy: {0}")]
    DoesNotFit(String),
    /// Waves wait forever (at a barrier no other wave will reach).
    #[error("the simulation stopped with waves still resident on CU {cu} at cycle {cycle}")]
    Deadlock {
        /// Simulated CU.
        cu: usize,
        /// Cycle of the last event.
        cycle: u64,
    },
    /// Bad parameters.
    #[error("timing parameters")]
    Params(#[from] ParamsError),
    /// [`CrossXcd::Known`] has no census of a round this launch simulates (it came from
    /// another launch).
    #[error("the known cross-XCD census has no round {round}: it belongs to another launch")]
    UnknownCensusRound {
        /// The round (from 0).
        round: u64,
    },
    /// A matrix instruction the emulator's opcode tables give no pass count (the model never
    /// guesses one).
    #[error("the timing model has no pass count for the matrix instruction {mnemonic}")]
    UnknownMfma {
        /// Its mnemonic.
        mnemonic: &'static str,
    },
    /// Writing a trace failed.
    #[error("writing the trace")]
    Trace(#[from] serde_json::Error),
}

/// Writes `trace` as Chrome/Perfetto trace-event JSON to `w`.
pub fn write_trace<W: std::io::Write>(trace: &Trace, w: W) -> Result<(), TimingError> {
    Ok(trace.write_json(w)?)
}

/// Predicts how long `prog` runs on an MI355X when launched as `launch`. `memory` holds the
/// kernel's buffers (use [`DeviceMemory::alloc_lazy`] for full-size zero buffers); the
/// simulated workgroups really execute, so they read and write it. `params` is validated
/// first (its fields are public, so it may have been changed since it was read).
pub fn predict(
    memory: &mut DeviceMemory,
    prog: &Program,
    launch: &TimingLaunch<'_>,
    params: &Params,
    opts: &TimingOptions,
) -> Result<Prediction, TimingError> {
    params.validate()?;
    let occ = gpu::occupancy_of(prog, launch.block, launch.dynamic_lds, params)?;
    let xcds = params.gpu.xcds.positive().get() as usize;
    let cpx = params.gpu.cus_per_xcd.positive().get() as usize;
    let cap = occ.workgroups_per_cu as u64;
    let total_wgs: u64 = launch.grid.iter().map(|&g| g as u64).product();
    let clock = if gpu::uses_mfma(prog) {
        params.clock.mfma_sustained_ghz.get()
    } else {
        params.clock.peak_ghz.get()
    };
    let sim_cus = match opts.method {
        Method::Full => xcds * cpx,
        Method::Rounds => opts.max_cus.map_or(cpx, |m| (m as usize).clamp(1, cpx)),
    };
    let limits = Limits {
        max_memory: memory.limit(),
        ..Limits::default()
    };
    let in_flight = (sim_cus as u64 * cap).max(1);
    let prepared = prepare_launch(
        memory,
        &limits,
        prog,
        LaunchShape {
            grid: launch.grid,
            block: launch.block,
            kernarg: launch.kernarg,
            dynamic_lds: launch.dynamic_lds,
        },
        1,
        |total| in_flight.min(total),
    )?;
    let result = run(
        memory, prog, params, opts, &occ, &prepared, clock, sim_cus, total_wgs,
    );
    prepared.release(memory);
    result
}

/// A simulated round: its result, the instructions it executed, its workgroups, and the
/// census it ran (with the round's index).
type RoundResult = (gpu::SimResult, u64, u64, Option<(u64, census::Census)>);

#[allow(clippy::too_many_arguments)]
fn run(
    memory: &DeviceMemory,
    prog: &Program,
    params: &Params,
    opts: &TimingOptions,
    occ: &Occupancy,
    prepared: &tilegen_emu::exec::launch::PreparedLaunch,
    clock: f64,
    sim_cus: usize,
    total_wgs: u64,
) -> Result<Prediction, TimingError> {
    let xcds = params.gpu.xcds.positive().get();
    let cpx = params.gpu.cus_per_xcd.positive().get();
    let gpu_cus = xcds * cpx;
    let cap = occ.workgroups_per_cu as u64;
    let infos: Vec<Option<InstInfo>> = (0..prog.instruction_count())
        .map(|s| {
            prog.at_slot(s)
                .map(|i| InstInfo::new(i, params))
                .transpose()
        })
        .collect::<Result<_, _>>()?;
    let new_ctx =
        |cus: usize, sim_xcds: usize, gpu_share: f64, l2_share: f64, shares: Vec<f64>| Ctx {
            prog,
            device: memory,
            stats: Stats::default(),
            counts: vec![0; prog.instruction_count()],
            probe: Probe {
                skip_mfma_math: !opts.exact_mfma,
                ..Probe::default()
            },
            infos: infos.clone(),
            knobs: std::sync::Arc::new(Knobs::new(params)),
            mem: mem::MemSystem::new(params, cus, sim_xcds, clock, gpu_share, l2_share, shares),
            budget: opts.wave_instruction_budget,
        };
    let trace = opts.trace.map(|t| (t, clock));
    let d = &prepared.dispatch;
    let lds = prepared.lds_bytes;
    let mut sims = Vec::new();
    let cycles;
    let rounds;
    let mut detail;
    let mut shares = Vec::new();
    match opts.method {
        Method::Full => {
            let mut pending = vec![std::collections::VecDeque::new(); xcds as usize];
            for i in 0..total_wgs {
                pending[(i % xcds) as usize].push_back(i);
            }
            let dispatch = Dispatch::Dynamic {
                pending,
                rr: vec![0; xcds as usize],
                cus_per_xcd: cpx as usize,
            };
            let mut ctx = new_ctx(gpu_cus as usize, xcds as usize, 1.0, 1.0, Vec::new());
            let r = gpu::simulate(
                &mut ctx,
                d,
                gpu_cus as usize,
                cpx as usize,
                occ,
                lds,
                dispatch,
                trace,
            )?;
            cycles = r.drained;
            rounds = total_wgs.div_ceil(xcds).div_ceil(cpx * cap);
            detail = format!(
                "full simulation of all {total_wgs} workgroups on {gpu_cus} CUs with dynamic dispatch"
            );
            sims.push((r, ctx.counts.iter().sum::<u64>(), 1.0));
        }
        Method::Rounds => {
            let n0 = total_wgs.div_ceil(xcds);
            let per_round = cpx * cap;
            rounds = n0.div_ceil(per_round).max(1);
            let round = |r: u64,
                         trace: Option<(TraceOptions, f64)>,
                         reuse: Option<census::Census>|
             -> Result<RoundResult, TimingError> {
                let first = r * per_round;
                let last = (first + per_round).min(n0);
                let mut lists = vec![Vec::new(); sim_cus];
                for kk in first..last {
                    let c = ((kk - first) % cpx) as usize;
                    if c < sim_cus {
                        lists[c].push(kk * xcds);
                    }
                }
                let sim_active = lists.iter().filter(|l| !l.is_empty()).count().max(1) as f64;
                let xcd0_active = (last - first).min(cpx) as f64;
                // Workgroups of this round GPU-wide, and the CUs they occupy.
                let gpu_round = total_wgs
                    .saturating_sub(r * per_round * xcds)
                    .min(per_round * xcds);
                let gpu_active = gpu_round.min(gpu_cus).max(1) as f64;
                let n_sim = lists.iter().map(|l| l.len() as u64).sum();
                let census = match &opts.cross_xcd {
                    _ if xcds < 2 => None,
                    CrossXcd::Census { .. } if reuse.is_some() => reuse,
                    CrossXcd::Ignore => None,
                    CrossXcd::Known(k) => Some(
                        k.rounds
                            .iter()
                            .find(|(i, _)| *i == r)
                            .map(|(_, c)| c.clone())
                            .ok_or(TimingError::UnknownCensusRound { round: r })?,
                    ),
                    &CrossXcd::Census { instructions } => {
                        let mut by_xcd =
                            vec![lists.iter().flatten().copied().collect::<Vec<u64>>()];
                        for x in 1..xcds {
                            by_xcd.push(
                                (first..last)
                                    .map(|kk| kk * xcds + x)
                                    .filter(|&i| i < total_wgs)
                                    .collect(),
                            );
                        }
                        Some(census::census(
                            prog,
                            memory,
                            d,
                            &infos,
                            occ.waves_per_workgroup as usize,
                            lds,
                            &by_xcd,
                            instructions,
                            opts.exact_mfma,
                            params.vmem.l1_line_bytes.positive().trailing_zeros(),
                        )?)
                    }
                };
                let mut ctx = new_ctx(
                    sim_cus,
                    1,
                    (sim_active / gpu_active).min(1.0),
                    (sim_active / xcd0_active).min(1.0),
                    census.as_ref().map_or_else(Vec::new, |c| c.shares.clone()),
                );
                let res = gpu::simulate(
                    &mut ctx,
                    d,
                    sim_cus,
                    cpx as usize,
                    occ,
                    lds,
                    Dispatch::Fixed(lists),
                    trace,
                )?;
                Ok((res, ctx.counts.iter().sum(), n_sim, census.map(|c| (r, c))))
            };
            let (r0, s0, n_first, c0) = round(0, trace, None)?;
            shares.extend(c0.clone());
            let t0 = r0.end;
            let n_last = n0 - (rounds - 1) * per_round;
            if rounds == 1 {
                cycles = r0.drained;
                detail = format!(
                    "one round: {} of XCD 0 on {sim_cus} of its {cpx} CUs simulated ({} per CU); the other XCDs run theirs in parallel",
                    workgroups(n_first),
                    workgroups(cap)
                );
                sims.push((r0, s0, 1.0));
            } else if n_last == per_round {
                cycles = t0 * (rounds - 1) + r0.drained;
                detail = format!(
                    "{rounds} full rounds of {} on XCD 0; round 1 ({} on {sim_cus} CUs) simulated, time x {rounds}",
                    workgroups(per_round),
                    workgroups(n_first)
                );
                sims.push((r0, s0, rounds as f64));
            } else {
                // A last round at least half full shares its lines as a full one does
                // (the census costs about as much as the simulation of a round).
                let reuse = (2 * n_last >= per_round)
                    .then(|| c0.as_ref().map(|(_, c)| c.clone()))
                    .flatten();
                let (rl, sl, n_l, cl) = round(rounds - 1, None, reuse)?;
                shares.extend(cl);
                cycles = t0 * (rounds - 1) + rl.drained;
                detail = format!(
                    "{rounds} rounds on XCD 0: round 1 ({} on {sim_cus} CUs) simulated, x {}; the last partial round ({}) simulated on its own",
                    workgroups(n_first),
                    rounds - 1,
                    workgroups(n_l)
                );
                sims.push((r0, s0, (rounds - 1) as f64));
                sims.push((rl, sl, 1.0));
            }
            if let Some((_, c)) = shares.first() {
                detail.push_str(&format!(
                    "; XCD 0 fetches {:.0}% of the HBM traffic of the lines it loads, the other XCDs the rest ({})",
                    c.own_share * 100.0,
                    match opts.cross_xcd {
                        CrossXcd::Known(_) => "census of an earlier run of the launch",
                        _ => "census of every XCD's workgroups up to their first loop",
                    }
                ));
            }
        }
    }
    // Per-workgroup means over what was simulated, scaled to the grid.
    let mut wgs_sim = 0u64;
    let mut mfma_cycles = 0u64;
    let mut hbm_bytes = 0u64;
    let mut instructions = 0u64;
    let mut stalls =
        vec![[0u64; cu::REASONS]; params.gpu.simds_per_cu.count().clamp(1, 16) as usize];
    let mut memory_report = MemoryReport::default();
    let mut lds_busy = 0u64;
    let mut sim_cycles = 0u64;
    let mut trace_out = None;
    let mut cus_simulated = 0;
    for (r, stats, _) in sims.iter_mut() {
        wgs_sim += r.finished.len() as u64;
        mfma_cycles += r.finished.iter().map(|f| f.mfma_cycles).sum::<u64>();
        hbm_bytes += r.memory.hbm_bytes;
        instructions += *stats;
        for (a, b) in stalls.iter_mut().zip(&r.stalls) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
        add_report(&mut memory_report, &r.memory);
        lds_busy += r.lds_busy;
        sim_cycles += r.end * r.cus as u64;
        cus_simulated = cus_simulated.max(r.cus as u32);
        if trace_out.is_none() {
            trace_out = r.trace.take();
        }
    }
    let per_wg = |v: u64| {
        if wgs_sim > 0 {
            v as f64 / wgs_sim as f64
        } else {
            0.0
        }
    };
    let simds = params.gpu.simds_per_cu.get();
    let kernel_ns = cycles as f64 / clock;
    let mfma_busy = if cycles > 0 {
        (per_wg(mfma_cycles) * total_wgs as f64 / (simds * gpu_cus as f64 * cycles as f64)).min(1.0)
    } else {
        0.0
    };
    let hbm_gbs = if kernel_ns > 0.0 {
        per_wg(hbm_bytes) * total_wgs as f64 / kernel_ns
    } else {
        0.0
    };
    let launch_us = params.clock.launch_overhead_us.get();
    let us = kernel_ns / 1000.0 + launch_us;
    let lds_util = if sim_cycles > 0 {
        let ports = params.gpu.simds_per_cu.count().div_ceil(2) as f64;
        lds_busy as f64 / (ports * sim_cycles as f64)
    } else {
        0.0
    };
    let hbm_util = hbm_gbs / params.vmem.hbm_gbs.get();
    let bound = classify_bound(launch_us / us, mfma_busy, hbm_util, lds_util, &stalls);
    let stalls = stalls
        .iter()
        .enumerate()
        .map(|(s, a)| SimdStalls {
            simd: s as u32,
            cycles: StallBreakdown::from_array(a),
        })
        .collect();
    Ok(Prediction {
        us,
        launch_us,
        clock_ghz: clock,
        cycles,
        mfma_busy,
        hbm_gbs,
        bound,
        stalls,
        hbm_own_share: shares.first().map(|(_, c)| c.own_share),
        xcd_shares: (!shares.is_empty()).then(|| XcdShares {
            rounds: shares.clone(),
        }),
        workgroups_simulated: wgs_sim,
        workgroups_total: total_wgs,
        rounds,
        cus_simulated,
        method: opts.method,
        method_detail: detail,
        occupancy: occ.clone(),
        memory: memory_report,
        instructions,
        trace: trace_out,
    })
}

fn add_report(a: &mut MemoryReport, b: &MemoryReport) {
    a.l1_requests += b.l1_requests;
    a.l1_hits += b.l1_hits;
    a.l2_requests += b.l2_requests;
    a.l2_hits += b.l2_hits;
    a.mall_requests += b.mall_requests;
    a.mall_hits += b.mall_hits;
    a.hbm_bytes += b.hbm_bytes;
    a.hbm_mean_queue_cycles = a.hbm_mean_queue_cycles.max(b.hbm_mean_queue_cycles);
    let loads = a.loads + b.loads;
    if loads > 0 {
        a.mean_load_latency_cycles = (a.mean_load_latency_cycles * a.loads as f64
            + b.mean_load_latency_cycles * b.loads as f64)
            / loads as f64;
    }
    a.loads = loads;
}

/// `n` workgroups, in words.
fn workgroups(n: impl Into<u64>) -> String {
    match n.into() {
        1 => "1 workgroup".to_string(),
        n => format!("{n} workgroups"),
    }
}

fn classify_bound(
    launch_frac: f64,
    mfma: f64,
    hbm: f64,
    lds: f64,
    stalls: &[[u64; cu::REASONS]],
) -> Bound {
    if launch_frac > 0.5 {
        return Bound::Launch;
    }
    let (best, util) = [
        (Bound::Mfma, mfma),
        (Bound::MemoryBandwidth, hbm),
        (Bound::Lds, lds),
    ]
    .into_iter()
    .fold(
        (Bound::Issue, 0.0),
        |acc, x| if x.1 > acc.1 { x } else { acc },
    );
    if util >= 0.6 {
        return best;
    }
    let sum = |r: Reason| stalls.iter().map(|a| a[r as usize]).sum::<u64>();
    let candidates = [
        (Bound::MemoryLatency, sum(Reason::WaitcntVm)),
        (Bound::Lds, sum(Reason::WaitcntLgkm)),
        (
            Bound::Issue,
            sum(Reason::Dependency)
                + sum(Reason::IssueConflict)
                + sum(Reason::Barrier)
                + sum(Reason::Nop)
                + sum(Reason::Branch)
                + sum(Reason::Issued),
        ),
        (Bound::Mfma, sum(Reason::MfmaHazard) + sum(Reason::PipeBusy)),
    ];
    candidates
        .into_iter()
        .max_by_key(|c| c.1)
        .map_or(Bound::Issue, |c| c.0)
}
