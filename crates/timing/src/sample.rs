//! How a prediction samples the grid: every workgroup on every CU ([`Method::Full`]), or one
//! round of XCD 0 and the last partial round ([`Method::Rounds`]) with each round's census of
//! the lines the other XCDs load; and how the simulated rounds extrapolate to the kernel
//! ([`Extrapolation`]).

use std::collections::VecDeque;

use tilegen_emu::exec::interp::Probe;
use tilegen_emu::exec::launch::PreparedLaunch;
use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::stats::Stats;

use crate::census::{Census, CensusRun};
use crate::cu::Ctx;
use crate::gpu::{self, Dispatch, Machine, Occupancy, SimResult};
use crate::inst::InstInfo;
use crate::mem::{MemSystem, Scope};
use crate::params::Params;
use crate::report::Sampled;
use crate::trace::TraceOptions;
use crate::units::{Sequencer, Units};
use crate::{CrossXcd, Method, TimingError, TimingOptions, XcdShares};

/// A simulation's result and the instructions it executed.
pub(crate) type Simulated = (SimResult, u64);

/// What every simulation of one prediction shares: the kernel and its launch, the parameters
/// and options, the instruction facts, the sequencer and the units a CU starts with, and the
/// machine's size.
pub(crate) struct Simulator<'a> {
    pub prog: &'a Program,
    pub memory: &'a DeviceMemory,
    pub params: &'a Params,
    pub opts: &'a TimingOptions,
    pub occ: &'a Occupancy,
    pub prepared: &'a PreparedLaunch,
    /// Engine clock, GHz.
    pub clock: f64,
    pub infos: Vec<Option<InstInfo>>,
    pub seq: Sequencer,
    pub units: Units,
    /// XCDs of the GPU.
    pub xcds: u64,
    /// CUs per XCD.
    pub cus_per_xcd: u64,
    /// Workgroups in the grid.
    pub total: u64,
    /// CUs a simulation of [`Method::Rounds`] runs.
    pub sim_cus: usize,
}

/// One round of [`Method::Rounds`] simulated, with its census.
struct RoundRun {
    sim: Simulated,
    /// Workgroups it simulated.
    workgroups: u64,
    /// The census it used, with the round's index.
    census: Option<(u64, Census)>,
}

/// How the simulated rounds of XCD 0 stand for the kernel's time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Extrapolation {
    /// One round is the kernel.
    One,
    /// `rounds` full rounds, each taking the first one's time.
    Repeated { rounds: u64 },
    /// `rounds - 1` rounds taking the first one's time and a last partial round simulated
    /// on its own.
    WithLast { rounds: u64 },
}

impl Extrapolation {
    /// The extrapolation of `rounds` rounds whose last holds `last` of `per_round`
    /// workgroups.
    fn of(rounds: u64, last: u64, per_round: u64) -> Extrapolation {
        if rounds == 1 {
            Extrapolation::One
        } else if last == per_round {
            Extrapolation::Repeated { rounds }
        } else {
            Extrapolation::WithLast { rounds }
        }
    }

    /// Kernel cycles from the first round and, for [`Extrapolation::WithLast`], the last.
    /// Every round but the last ends when its last wave does (the next round's traffic
    /// overlaps its write-back); the last ends when HBM has taken its writes.
    fn cycles(self, first: &SimResult, last: Option<&SimResult>) -> u64 {
        match self {
            Extrapolation::One => first.drained,
            Extrapolation::Repeated { rounds } => first.end * (rounds - 1) + first.drained,
            Extrapolation::WithLast { rounds } => {
                first.end * (rounds - 1) + last.map_or(first.drained, |l| l.drained)
            }
        }
    }
}

impl Simulator<'_> {
    /// Simulates the grid as the options' method says.
    pub(crate) fn sample(&self) -> Result<(Sampled, Vec<Simulated>), TimingError> {
        match self.opts.method {
            Method::Full => self.full(),
            Method::Rounds => self.rounds(),
        }
    }

    /// Workgroups one CU holds.
    fn capacity(&self) -> u64 {
        self.occ.workgroups_per_cu as u64
    }

    /// Runs `dispatch`'s workgroups on the CUs `scope` describes.
    fn simulate(
        &self,
        scope: &Scope,
        dispatch: Dispatch,
        trace: Option<(TraceOptions, f64)>,
    ) -> Result<Simulated, TimingError> {
        let mut ctx = Ctx {
            prog: self.prog,
            device: self.memory,
            stats: Stats::default(),
            counts: vec![0; self.prog.instruction_count()],
            probe: Probe {
                skip_mfma_math: !self.opts.exact_mfma,
                ..Probe::default()
            },
            infos: &self.infos,
            seq: &self.seq,
            units: &self.units,
            mem: MemSystem::new(self.params, self.clock, scope),
            budget: self.opts.wave_instruction_budget,
        };
        let machine = Machine {
            dispatch: &self.prepared.dispatch,
            cus: scope.cus,
            cus_per_xcd: self.cus_per_xcd as usize,
            capacity: self.capacity() as usize,
            waves: self.occ.waves_per_workgroup,
            lds_bytes: self.prepared.lds_bytes,
        };
        let r = gpu::simulate(&mut ctx, &machine, dispatch, trace)?;
        Ok((r, ctx.counts.iter().sum()))
    }

    fn trace(&self) -> Option<(TraceOptions, f64)> {
        self.opts.trace.map(|t| (t, self.clock))
    }

    /// [`Method::Full`]: every workgroup on every CU, dispatched as slots free.
    fn full(&self) -> Result<(Sampled, Vec<Simulated>), TimingError> {
        let (xcds, cpx, total) = (self.xcds, self.cus_per_xcd, self.total);
        let gpu_cus = xcds * cpx;
        let mut pending = vec![VecDeque::new(); xcds as usize];
        for i in 0..total {
            pending[(i % xcds) as usize].push_back(i);
        }
        let dispatch = Dispatch::Dynamic {
            pending,
            rr: vec![0; xcds as usize],
        };
        let scope = Scope {
            cus: gpu_cus as usize,
            xcds: xcds as usize,
            gpu_share: 1.0,
            l2_share: 1.0,
            shares: Vec::new(),
        };
        let sim = self.simulate(&scope, dispatch, self.trace())?;
        let sampled = Sampled {
            cycles: sim.0.drained,
            rounds: total.div_ceil(xcds).div_ceil(cpx * self.capacity()),
            method: Method::Full,
            detail: format!(
                "full simulation of all {total} workgroups on {gpu_cus} CUs with dynamic dispatch"
            ),
            shares: None,
        };
        Ok((sampled, vec![sim]))
    }

    /// [`Method::Rounds`]: the first round of XCD 0 (and the last, partial one on its own),
    /// extrapolated over the rounds.
    fn rounds(&self) -> Result<(Sampled, Vec<Simulated>), TimingError> {
        let (xcds, cpx, sim_cus) = (self.xcds, self.cus_per_xcd, self.sim_cus);
        let n0 = self.total.div_ceil(xcds);
        let per_round = cpx * self.capacity();
        let rounds = n0.div_ceil(per_round).max(1);
        let first = self.round(0, self.trace(), None)?;
        let last_workgroups = n0 - (rounds - 1) * per_round;
        let how = Extrapolation::of(rounds, last_workgroups, per_round);
        let last = match how {
            Extrapolation::WithLast { .. } => {
                // A last round at least half full shares its lines as a full one does (the
                // census costs about as much as the simulation of a round).
                let reuse = (2 * last_workgroups >= per_round)
                    .then(|| first.census.as_ref().map(|(_, c)| c.clone()))
                    .flatten();
                Some(self.round(rounds - 1, None, reuse)?)
            }
            _ => None,
        };
        let cycles = how.cycles(&first.sim.0, last.as_ref().map(|l| &l.sim.0));
        let mut detail = match how {
            Extrapolation::One => format!(
                "one round: {} of XCD 0 on {sim_cus} of its {cpx} CUs simulated ({} per CU); the other XCDs run theirs in parallel",
                workgroups(first.workgroups),
                workgroups(self.capacity())
            ),
            Extrapolation::Repeated { rounds } => format!(
                "{rounds} full rounds of {} on XCD 0; round 1 ({} on {sim_cus} CUs) simulated, time x {rounds}",
                workgroups(per_round),
                workgroups(first.workgroups)
            ),
            Extrapolation::WithLast { rounds } => format!(
                "{rounds} rounds on XCD 0: round 1 ({} on {sim_cus} CUs) simulated, x {}; the last partial round ({}) simulated on its own",
                workgroups(first.workgroups),
                rounds - 1,
                workgroups(last.as_ref().map_or(0, |l| l.workgroups))
            ),
        };
        let mut censuses = Vec::new();
        let mut sims = vec![first.sim];
        censuses.extend(first.census);
        if let Some(l) = last {
            sims.push(l.sim);
            censuses.extend(l.census);
        }
        if let Some((_, c)) = censuses.first() {
            detail.push_str(&format!(
                "; XCD 0 fetches {:.0}% of the HBM traffic of the lines it loads, the other XCDs the rest ({})",
                c.own_share * 100.0,
                match self.opts.cross_xcd {
                    CrossXcd::Known(_) => "census of an earlier run of the launch",
                    _ => "census of every XCD's workgroups up to their first loop",
                }
            ));
        }
        let sampled = Sampled {
            cycles,
            rounds,
            method: Method::Rounds,
            detail,
            shares: (!censuses.is_empty()).then_some(XcdShares { rounds: censuses }),
        };
        Ok((sampled, sims))
    }

    /// Simulates round `r` of XCD 0 (the k-th workgroup of the round on CU `k mod 32`, the
    /// CUs past the simulated ones left out), with its census, or `reuse` as its census.
    fn round(
        &self,
        r: u64,
        trace: Option<(TraceOptions, f64)>,
        reuse: Option<Census>,
    ) -> Result<RoundRun, TimingError> {
        let (xcds, cpx, total, sim_cus) = (self.xcds, self.cus_per_xcd, self.total, self.sim_cus);
        let n0 = total.div_ceil(xcds);
        let per_round = cpx * self.capacity();
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
        let gpu_round = total
            .saturating_sub(r * per_round * xcds)
            .min(per_round * xcds);
        let gpu_active = gpu_round.min(xcds * cpx).max(1) as f64;
        let workgroups = lists.iter().map(|l| l.len() as u64).sum();
        let census = match &self.opts.cross_xcd {
            _ if xcds < 2 => None,
            CrossXcd::Census { .. } if reuse.is_some() => reuse,
            CrossXcd::Ignore => None,
            CrossXcd::Known(k) => Some(
                k.round(r)
                    .cloned()
                    .ok_or(TimingError::UnknownCensusRound { round: r })?,
            ),
            &CrossXcd::Census { instructions } => {
                let mut by_xcd = vec![lists.iter().flatten().copied().collect::<Vec<u64>>()];
                for x in 1..xcds {
                    by_xcd.push(
                        (first..last)
                            .map(|kk| kk * xcds + x)
                            .filter(|&i| i < total)
                            .collect(),
                    );
                }
                Some(self.census().run(&by_xcd, instructions)?)
            }
        };
        let scope = Scope {
            cus: sim_cus,
            xcds: 1,
            gpu_share: (sim_active / gpu_active).min(1.0),
            l2_share: (sim_active / xcd0_active).min(1.0),
            shares: census.as_ref().map_or_else(Vec::new, |c| c.shares.clone()),
        };
        let sim = self.simulate(&scope, Dispatch::Fixed(lists), trace)?;
        Ok(RoundRun {
            sim,
            workgroups,
            census: census.map(|c| (r, c)),
        })
    }

    /// The census of this prediction's launch.
    fn census(&self) -> CensusRun<'_> {
        CensusRun {
            prog: self.prog,
            device: self.memory,
            dispatch: &self.prepared.dispatch,
            infos: &self.infos,
            waves_per_workgroup: self.occ.waves_per_workgroup as usize,
            lds_bytes: self.prepared.lds_bytes,
            exact_mfma: self.opts.exact_mfma,
            line_shift: self.params.vmem.l1_line_bytes.positive().trailing_zeros(),
        }
    }
}

/// `n` workgroups, in words.
fn workgroups(n: impl Into<u64>) -> String {
    match n.into() {
        1 => "1 workgroup".to_string(),
        n => format!("{n} workgroups"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_extrapolate_by_how_the_last_one_fills() {
        let sim = |end, drained| SimResult {
            end,
            drained,
            finished: Vec::new(),
            stalls: Vec::new(),
            lds_busy: 0,
            memory: Default::default(),
            trace: None,
            cus: 1,
        };
        let (first, last) = (sim(100, 130), sim(40, 70));
        assert_eq!(Extrapolation::of(1, 5, 64), Extrapolation::One);
        assert_eq!(Extrapolation::One.cycles(&first, None), 130);
        let full = Extrapolation::of(3, 64, 64);
        assert_eq!(full, Extrapolation::Repeated { rounds: 3 });
        assert_eq!(full.cycles(&first, None), 2 * 100 + 130);
        let partial = Extrapolation::of(3, 10, 64);
        assert_eq!(partial, Extrapolation::WithLast { rounds: 3 });
        assert_eq!(partial.cycles(&first, Some(&last)), 2 * 100 + 70);
    }
}
