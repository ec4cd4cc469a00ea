//! What a prediction reports: the time and what bounds it ([`Prediction`], [`Bound`]), and the
//! aggregation of the simulated rounds into GPU-wide figures ([`Tally`]).

use serde::{Deserialize, Serialize};

use crate::gpu::{Occupancy, SimResult};
use crate::mem::MemoryReport;
use crate::params::Params;
use crate::reason::{PerReason, Reason, StallBreakdown};
use crate::trace::Trace;
use crate::{Method, XcdShares};

/// What bounds the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The census behind `hbm_own_share`, for [`CrossXcd::Known`](crate::CrossXcd::Known).
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

/// The simulated rounds summed: per-workgroup means over what was simulated, scaled to the
/// grid by the prediction.
#[derive(Default)]
pub(crate) struct Tally {
    /// Workgroups simulated.
    workgroups: u64,
    mfma_cycles: u64,
    hbm_bytes: u64,
    instructions: u64,
    /// Cycles by reason per SIMD, over the CUs that held a workgroup.
    stalls: Vec<PerReason<u64>>,
    memory: MemoryReport,
    lds_busy: u64,
    /// Cycles times CUs of every simulation.
    cu_cycles: u64,
    cus: u32,
    trace: Option<Trace>,
}

/// What the prediction adds to a [`Tally`]: the kernel's cycles and how they were sampled.
pub(crate) struct Sampled {
    /// Kernel cycles, all rounds.
    pub cycles: u64,
    /// Rounds of resident workgroups on the busiest XCD.
    pub rounds: u64,
    /// How the time was computed.
    pub method: Method,
    /// The method in words.
    pub detail: String,
    /// The censuses of the simulated rounds (with the round's index).
    pub shares: Option<XcdShares>,
}

impl Tally {
    /// The sum of `sims`, each with the instructions it executed; `simds` per CU.
    pub(crate) fn of(sims: Vec<(SimResult, u64)>, simds: usize) -> Tally {
        let mut t = Tally {
            stalls: vec![PerReason::default(); simds],
            ..Tally::default()
        };
        for (mut r, instructions) in sims {
            t.workgroups += r.finished.len() as u64;
            t.mfma_cycles += r.finished.iter().map(|f| f.mfma_cycles).sum::<u64>();
            t.hbm_bytes += r.memory.hbm_bytes;
            t.instructions += instructions;
            for (a, b) in t.stalls.iter_mut().zip(&r.stalls) {
                a.add(b);
            }
            add_report(&mut t.memory, &r.memory);
            t.lds_busy += r.lds_busy;
            t.cu_cycles += r.end * r.cus as u64;
            t.cus = t.cus.max(r.cus as u32);
            if t.trace.is_none() {
                t.trace = r.trace.take();
            }
        }
        t
    }

    /// The prediction of a grid of `total_workgroups` at `clock` GHz under `params`.
    pub(crate) fn prediction(
        self,
        sampled: Sampled,
        total_workgroups: u64,
        occupancy: &Occupancy,
        params: &Params,
        clock: f64,
    ) -> Prediction {
        let cycles = sampled.cycles;
        let per_wg = |v: u64| {
            if self.workgroups > 0 {
                v as f64 / self.workgroups as f64
            } else {
                0.0
            }
        };
        let gpu_cus = tilegen_arch::COMPUTE_UNITS;
        let simds = f64::from(tilegen_arch::SIMDS_PER_CU);
        let kernel_ns = cycles as f64 / clock;
        let mfma_busy = if cycles > 0 {
            (per_wg(self.mfma_cycles) * total_workgroups as f64
                / (simds * gpu_cus as f64 * cycles as f64))
                .min(1.0)
        } else {
            0.0
        };
        let hbm_gbs = if kernel_ns > 0.0 {
            per_wg(self.hbm_bytes) * total_workgroups as f64 / kernel_ns
        } else {
            0.0
        };
        let launch_us = params.clock.launch_overhead_us.get();
        let us = kernel_ns / 1000.0 + launch_us;
        let lds_util = if self.cu_cycles > 0 {
            // Two SIMDs share one LDS port.
            let ports = f64::from(tilegen_arch::SIMDS_PER_CU.div_ceil(2));
            self.lds_busy as f64 / (ports * self.cu_cycles as f64)
        } else {
            0.0
        };
        let hbm_util = hbm_gbs / params.vmem.hbm_gbs.get();
        let bound = classify_bound(launch_us / us, mfma_busy, hbm_util, lds_util, &self.stalls);
        let stalls = self
            .stalls
            .into_iter()
            .enumerate()
            .map(|(s, cycles)| SimdStalls {
                simd: s as u32,
                cycles,
            })
            .collect();
        let shares = sampled.shares;
        Prediction {
            us,
            launch_us,
            clock_ghz: clock,
            cycles,
            mfma_busy,
            hbm_gbs,
            bound,
            stalls,
            hbm_own_share: shares.as_ref().and_then(XcdShares::own_share),
            xcd_shares: shares,
            workgroups_simulated: self.workgroups,
            workgroups_total: total_workgroups,
            rounds: sampled.rounds,
            cus_simulated: self.cus,
            method: sampled.method,
            method_detail: sampled.detail,
            occupancy: occupancy.clone(),
            memory: self.memory,
            instructions: self.instructions,
            trace: self.trace,
        }
    }
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

fn classify_bound(
    launch_frac: f64,
    mfma: f64,
    hbm: f64,
    lds: f64,
    stalls: &[PerReason<u64>],
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
    let sum = |r: Reason| stalls.iter().map(|a| a[r]).sum::<u64>();
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
