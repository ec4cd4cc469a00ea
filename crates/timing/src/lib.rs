//! A cycle-level timing model of an MI355X running a gfx950 code object.
//!
//! # What it simulates
//! Instructions execute functionally at issue, through the emulator's own
//! [`tilegen_emu::exec::interp::step`] on the real waves (so addresses, branches, loop
//! counts and EXEC masks are the kernel's own); the model only decides *when* each wave may
//! issue. A CU (`cu.rs`) serves its 4 SIMDs round robin, one instruction per wave and per
//! category per slot, oldest first with `s_setprio`; its units (`units.rs`) keep pipe
//! occupancy (VALU, matrix core passes from LLVM's gfx950 scheduling model, one LDS port per
//! SIMD pair with the 64-bank conflict passes of the emulator's `ds::lds_conflict_cycles`,
//! which LDS-DMA loads write through too, the texture addresser), per-register ready times
//! with the MFMA hazard wait states, `s_waitcnt` against modelled
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
//! [`Method::Rounds`] (the default) simulates only XCD 0 (it holds the most workgroups), its
//! first rounds of resident workgroups on (up to [`TimingOptions::max_cus`] of) its CUs in
//! full detail, with HBM and MALL bandwidth and MALL capacity scaled to the simulated CUs'
//! share of the CUs active GPU-wide. A grid of one round is that round. A grid of two or more
//! has its first two rounds (and its last, partial one, if any) simulated together with
//! dynamic dispatch ([`TimingOptions::warm_rounds`]): the second round starts as the first's
//! workgroups end and finds the lines they left in L2 and MALL, and every further full round
//! takes the second's increment (the mean end of its workgroups less the first's). Simulated
//! apart and added, a cold first round repeated over-predicted tilegen's MoE stages by 12% to
//! 27% against the full simulation. The kernel ends when its last wave has ended and HBM has
//! taken every byte queued for it (the write-back of the results the last round stored, in
//! the final round only: earlier rounds' traffic overlaps the next round). The other XCDs load some of XCD 0's lines in the same round
//! (a GEMM's A rows, when its columns spread over the XCDs), and the MALL serves them from
//! one HBM fetch: before a round is simulated, a census ([`CrossXcd`]) runs every XCD's
//! workgroups of the round functionally through one pass of their first loop that loads and
//! counts which XCDs load which lines; each of XCD 0's load instructions then takes its share
//! (the mean of `1 / XCDs` over its lines) of the HBM transfers it causes. A last round at
//! least half full reuses the first round's census, and the rounds simulated together share
//! the first's. Lines that rounds before the simulated ones brought into the MALL still count
//! as HBM traffic (the simulation starts with cold caches). The error of the method against a
//! full simulation is measured by tests on mid-size grids.
//!
//! Repeating XCD 0's first round assumes every round and every XCD does the same work;
//! grids whose workgroups past a bound exit at once, or whose first rows hold all the work,
//! break that. So before it samples, [`Method::Rounds`] surveys the grid (`classes.rs`): it
//! runs the workgroups functionally (writes discarded) and records whether each ended and
//! how many wave-instructions it executed, within a budget of about 1 million
//! wave-instructions in all (a fifth of a second of one core, at the interpreter's 2.5 to 5
//! million a second): a first pass runs every workgroup with half of it shared out per wave
//! (at least 32 instructions; a grid too large for that is not surveyed), which ends the
//! early exits; the workgroups still running are then run to their end in bit-reversed
//! order of their launch index while the budget lasts, and the rest take the count of the
//! nearest one run (work varies by ranges of workgroups: rows, blocks). Workgroups longer
//! than the rest of the budget stay one class of "still running". Counts within 5% are one
//! class (wider bins keep at most 4 classes; a workgroup's time then scales with its count
//! within its class). A grid of one class takes the rounds above unchanged, and so does a
//! grid whose classes would not change its schedule: with each workgroup lasting its count,
//! the list schedule below and the rounds' extrapolation agree within 10% (a GEMM whose
//! edge tiles run a little less, one round that holds the longest workgroups anyway). A
//! grid of several simulates one round of each class on XCD 0 (the class's first workgroups
//! dealt to the XCDs as a grid of that class alone would be, with that round's census and
//! shares), and a class of more than a round its second round after it on the same CUs as
//! slots free: a workgroup that takes a slot fresh holds it for the first round's mean time,
//! later ones for the second round's increment (the steady state the rounds above also
//! extrapolate: lines the first round left in L2 and MALL, dispatch staggered). A list
//! schedule of the whole grid then deals workgroup `i` to XCD `i mod 8`, where each of the
//! XCD's slots (CUs times the workgroups a CU holds) takes the next workgroup as it frees;
//! the kernel ends at the last workgroup's end plus the HBM drain its class's round saw. What this leaves out: a class's round runs alongside workgroups of its own class
//! only (the bandwidth the others use meanwhile is not shared out), the per-workgroup means
//! of the report (MFMA busy, HBM bandwidth) average the simulated rounds without weighting
//! them by their classes' sizes, and a kernel whose work depends on what other workgroups
//! wrote (the survey discards writes) is classed by what it does without them.
//!
//! # How the code is laid out
//! [`predict`] checks the parameters, takes the occupancy ([`occupancy`]) and prepares the
//! launch through the emulator's executor, then hands over to the sampler (`sample.rs`:
//! [`Method::Full`] or [`Method::Rounds`], each round's census (`census.rs`), the survey
//! that classes the workgroups and the list schedule of the classes (`classes.rs`), and the
//! extrapolation of the rounds to the kernel), which runs simulations (`gpu.rs`: dispatch
//! and the event loop over the CUs; `cu.rs`: a CU's waves and issue arbiter). Each unit of a
//! CU that serves instructions (VALU, matrix core, LDS ports, texture addresser, SALU, SMEM,
//! branch) books them behind one interface (`units.rs`); the texture addresser books each
//! line in the memory hierarchy (`mem.rs`). What the model knows of an instruction
//! (`inst.rs`) comes from the decoded instruction and the generated columns of the
//! emulator's opcode tables. The report (`report.rs`) sums the simulations into a
//! [`Prediction`]; stall reasons are one enum ([`Reason`]) indexing per-reason arrays
//! ([`PerReason`]). The parameters (`params.toml`, [`Params`]) are timing only and cite their
//! sources, among them the facts in [`docs`], which also says how to add a hardware effect; the
//! machine's size and per-CU limits (XCDs, CUs, SIMDs, wave slots, register files, LDS,
//! barriers) are gfx950 facts read from `tilegen_arch` ([`CuLimits::GFX950`]).
//!
//! # What is approximate
//! The clock sustained under matrix load is derived from a published throughput and its
//! matrix-core busy fraction (not fitted: the calibration rows alone put it below what AITER's
//! fastest rows need). The parameters no document gives (launch overhead, workgroup dispatch,
//! the loaded HBM and MALL latencies and bandwidths, the L2 latency and the rate an L2
//! channel sustains below its documented peak, ...) are fitted on the calibration rows of AMD's measured AITER table (`tilegen-aiter`'s
//! `aiter-calibrate --fit`; their sources in `params.toml` say so, and say which ones those
//! rows cannot identify). The clock is one number per kernel (the sustained MFMA clock for
//! kernels with matrix instructions, else the peak); the instruction cache, the scalar cache,
//! TLBs, DRAM pages and write-after-read hazards are not modelled; the XOR fold that picks a
//! line's L2 channel stands in for the hardware's undocumented address hash.

#![deny(missing_docs)]

mod band;
mod census;
mod classes;
mod cu;
pub mod docs;
mod extrapolate;
mod gpu;
mod inst;
mod mem;
mod params;
mod reason;
mod report;
mod sample;
mod trace;
mod units;

use serde::Serialize;

use tilegen_emu::exec::fault::Fault;
use tilegen_emu::exec::launch::{LaunchShape, prepare_launch};
use tilegen_emu::exec::limits::Limits;
use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;

pub use band::{ErrorBand, HELD_OUT_ERROR};
pub use extrapolate::{LoopExtrapolation, predict_loop};
pub use gpu::{CuLimits, Limiter, Occupancy, occupancy, occupancy_on};
pub use mem::MemoryReport;
pub use params::{
    ClockParams, IssueParams, LdsParams, MfmaParams, Number, Param, ParamBound, Params,
    ParamsError, SaluParams, ValuParams, VmemParams,
};
pub use reason::{PerReason, Reason, StallBreakdown};
pub use report::{Bound, Prediction, SimdStalls};
pub use trace::{Trace, TraceOptions};

use inst::InstInfo;
use report::Tally;
use sample::Simulator;
use units::{Sequencer, Units};

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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Method {
    /// The first rounds of XCD 0 (and the last partial round), extrapolated over the rounds.
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
    /// [`Method::Rounds`]: survey the grid functionally first and, when its workgroups do
    /// unequal work, simulate a round of each class and list-schedule the grid (false: assume
    /// every round of every XCD does the work of XCD 0's first).
    pub classes: bool,
    /// [`Method::Rounds`] of a grid of two rounds or more: simulate its first two rounds (and
    /// the last, partial one) together and extrapolate by the second's increment, so later
    /// rounds find the lines the earlier ones left in L2 and MALL and start as slots free
    /// (false: every round takes the first's cold time, the last simulated on its own).
    pub warm_rounds: bool,
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
    /// The census of each class's round, when the grid's workgroups do unequal work.
    classes: Vec<census::Census>,
}

impl XcdShares {
    /// The census of round `r`.
    fn round(&self, r: u64) -> Option<&census::Census> {
        self.rounds.iter().find(|(i, _)| *i == r).map(|(_, c)| c)
    }

    /// The share of XCD 0's HBM traffic of the first simulated round that it fetches itself.
    fn own_share(&self) -> Option<f64> {
        self.rounds
            .first()
            .map(|(_, c)| c)
            .or(self.classes.first())
            .map(|c| c.own_share)
    }
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
            classes: true,
            warm_rounds: true,
        }
    }
}

/// Instructions per wave the census of a round runs by default: enough for the prologue and
/// the first steps of a GEMM's K loop, whose address pattern the later steps repeat.
pub const DEFAULT_CENSUS_INSTRUCTIONS: u64 = 2048;

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
    let occ = occupancy(prog, launch.block, launch.dynamic_lds)?;
    let xcds = tilegen_arch::XCDS as usize;
    let cpx = tilegen_arch::CUS_PER_XCD as usize;
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
    // The launch's allocations are released whatever the simulation's outcome.
    let result = (|| {
        let simulator = Simulator {
            prog,
            memory,
            params,
            opts,
            occ: &occ,
            prepared: &prepared,
            clock,
            infos: (0..prog.instruction_count())
                .map(|s| {
                    prog.at_slot(s)
                        .map(|i| InstInfo::new(i, params))
                        .transpose()
                })
                .collect::<Result<_, _>>()?,
            seq: Sequencer::new(params),
            units: Units::new(params, tilegen_arch::SIMDS_PER_CU as usize),
            xcds: xcds as u64,
            cus_per_xcd: cpx as u64,
            total: total_wgs,
            sim_cus,
        };
        let (sampled, sims) = simulator.sample()?;
        let tally = Tally::of(sims, simulator.seq.simds);
        Ok(tally.prediction(sampled, total_wgs, &occ, params, clock))
    })();
    prepared.release(memory);
    result
}
