//! How a prediction samples the grid: every workgroup on every CU ([`Method::Full`]), or XCD
//! 0's first two rounds (with its last partial one) simulated together, or its first round
//! alone ([`Method::Rounds`]), with the census of the lines the other XCDs load; and how the
//! simulated rounds extrapolate to the kernel ([`Extrapolation`]).

use std::collections::VecDeque;

use tilegen_emu::exec::interp::Probe;
use tilegen_emu::exec::launch::PreparedLaunch;
use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::stats::Stats;

use crate::census::{Census, CensusRun};
use crate::classes::{
    ClassTime, Classes, ListSchedule, MATTERS, MAX_CLASSES, SURVEY_INSTRUCTIONS, Survey, SurveyRun,
    TOLERANCE,
};
use crate::cu::Ctx;
use crate::gpu::{self, Dispatch, Machine, Occupancy, SimResult};
use crate::inst::InstInfo;
use crate::mem::{MemSystem, Scope};
use crate::params::Params;
use crate::report::Sampled;
use crate::trace::TraceOptions;
use crate::units::{Sequencer, Units};
use crate::{CrossXcd, DEFAULT_CENSUS_INSTRUCTIONS, Method, TimingError, TimingOptions, XcdShares};

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

/// The workgroups of one simulated round: XCD 0's in dispatch order, the other XCDs' (for
/// the census), and how many run GPU-wide.
struct RoundSet {
    xcd0: Vec<u64>,
    /// XCDs 1, 2, ... in order.
    others: Vec<Vec<u64>>,
    gpu: u64,
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
    /// The first two rounds simulated together (the second finds the lines the first left in
    /// L2 and MALL, and starts as the first's workgroups end) with, if `last`, the last
    /// partial round after them; every further full round takes the second's increment.
    Warm { rounds: u64, step: u64, last: bool },
    /// Two rounds (the second possibly partial) simulated together: that run is the kernel.
    Two,
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
            Extrapolation::One | Extrapolation::Two => first.drained,
            Extrapolation::Repeated { rounds } => first.end * (rounds - 1) + first.drained,
            Extrapolation::WithLast { rounds } => {
                first.end * (rounds - 1) + last.map_or(first.drained, |l| l.drained)
            }
            // `first` is the simulation of the first two rounds and the last partial one.
            Extrapolation::Warm { rounds, step, last } => {
                first.drained + step * (rounds - 2 - u64::from(last))
            }
        }
    }

    /// The increment of a round in steady state, from the simulation of the first two rounds
    /// whose first `n` workgroups were the first round's and next `n` the second's: the mean
    /// of the second `n` ends less the mean of the first `n` (under dynamic dispatch a round's
    /// workgroups end before the next round's on the same slot).
    fn step(two: &SimResult, n: usize) -> Option<u64> {
        let mut ends: Vec<u64> = two.finished.iter().map(|f| f.end).collect();
        if n == 0 || ends.len() < 2 * n {
            return None;
        }
        ends.sort_unstable();
        let (a, b) = ends[..2 * n].split_at(n);
        let (a, b) = (mean(a.iter().copied())?, mean(b.iter().copied())?);
        b.checked_sub(a).filter(|&d| d > 0)
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

    /// [`Method::Rounds`]: a grid whose workgroups do unequal work by classes, else
    /// [`Simulator::uniform_rounds`].
    fn rounds(&self) -> Result<(Sampled, Vec<Simulated>), TimingError> {
        let schedule = ListSchedule {
            xcds: self.xcds,
            slots: self.cus_per_xcd * self.capacity(),
        };
        match self.survey() {
            Some((survey, classes)) if !classes.uniform() && schedule.matters(&survey, MATTERS) => {
                self.classed(&survey, &classes, &schedule)
            }
            _ => self.uniform_rounds(),
        }
    }

    /// The survey of the grid and its classes (`None` for a single workgroup, or when the
    /// survey cannot run the workgroups without their global writes).
    fn survey(&self) -> Option<(Survey, Classes)> {
        if self.total < 2 || !self.opts.classes {
            return None;
        }
        let run = SurveyRun {
            prog: self.prog,
            device: self.memory,
            dispatch: &self.prepared.dispatch,
            waves_per_workgroup: self.occ.waves_per_workgroup as usize,
            lds_bytes: self.prepared.lds_bytes,
            exact_mfma: self.opts.exact_mfma,
            wave_limit: self.opts.wave_instruction_budget,
        };
        let survey = run.run(self.total, SURVEY_INSTRUCTIONS)?;
        let classes = Classes::of(&survey, TOLERANCE, MAX_CLASSES);
        Some((survey, classes))
    }

    /// A grid of several classes: one round of each class simulated on XCD 0 (its first
    /// workgroups, dealt to the XCDs as a grid of that class alone would be), and the whole
    /// grid list-scheduled on every XCD's slots with each workgroup taking its class's time.
    fn classed(
        &self,
        survey: &Survey,
        classes: &Classes,
        schedule: &ListSchedule,
    ) -> Result<(Sampled, Vec<Simulated>), TimingError> {
        let (xcds, cpx, sim_cus) = (self.xcds, self.cus_per_xcd, self.sim_cus);
        let per_round = cpx * self.capacity();
        let mut sims = Vec::new();
        let mut times = Vec::new();
        let mut censuses = Vec::new();
        let mut parts = Vec::new();
        for (c, class) in classes.classes.iter().enumerate() {
            let m = &class.members;
            let set = RoundSet {
                xcd0: m
                    .iter()
                    .step_by(xcds as usize)
                    .take(per_round as usize)
                    .copied()
                    .collect(),
                others: (1..xcds as usize)
                    .map(|x| {
                        m.iter()
                            .skip(x)
                            .step_by(xcds as usize)
                            .take(per_round as usize)
                            .copied()
                            .collect()
                    })
                    .collect(),
                gpu: (m.len() as u64).min(per_round * xcds),
            };
            let known = match &self.opts.cross_xcd {
                CrossXcd::Known(k) => k.classes.get(c).cloned(),
                _ => None,
            };
            let trace = if c == 0 { self.trace() } else { None };
            // The class's second round on XCD 0, when it has one: simulated after the first
            // as slots free, for the steady state the rounds' extrapolation also takes.
            let second: Vec<u64> = if self.opts.warm_rounds {
                m.iter()
                    .step_by(xcds as usize)
                    .skip(per_round as usize)
                    .take(per_round as usize)
                    .copied()
                    .collect()
            } else {
                Vec::new()
            };
            let (run, first_ends) = self.simulate_class(&set, &second, known, trace)?;
            let simulated: Vec<u64> = set
                .xcd0
                .iter()
                .enumerate()
                .filter(|(k, _)| (*k as u64 % cpx) < sim_cus as u64)
                .map(|(_, &i)| survey.signatures[i as usize].instructions)
                .collect();
            let ends = &run.sim.0.finished;
            let mut sorted: Vec<u64> = ends.iter().map(|f| f.end).collect();
            sorted.sort_unstable();
            let first = mean(sorted.iter().copied().take(first_ends)).unwrap_or(run.sim.0.end);
            let step = if first_ends < ends.len() {
                Extrapolation::step(&run.sim.0, first_ends)
            } else {
                None
            };
            let time = ClassTime {
                cycles: step.unwrap_or(first),
                first,
                drain: run.sim.0.drained - run.sim.0.end,
                instructions: if class.ended {
                    mean(simulated.iter().copied())
                } else {
                    None
                },
            };
            parts.push(format!(
                "{} {} (round of {} on {sim_cus} CUs simulated: {} cycles a slot)",
                workgroups(m.len() as u64),
                if class.ended {
                    let (lo, hi) = class.instructions;
                    if lo == hi {
                        format!("ending after {lo} wave-instructions")
                    } else {
                        format!("ending after {lo}-{hi} wave-instructions")
                    }
                } else {
                    format!("running past {} instructions a wave", survey.wave_budget)
                },
                run.workgroups,
                time.cycles
            ));
            times.push(time);
            censuses.extend(run.census.map(|(_, census)| census));
            sims.push(run.sim);
        }
        let cycles = schedule.cycles(classes, survey, &times);
        let n0 = self.total.div_ceil(xcds);
        let mut detail = format!(
            "{} classes of workgroups by the wave-instructions a functional survey counted ({}, {} in all): {}; the whole grid list-scheduled on each XCD's {} slots, every workgroup taking its class's time{}",
            classes.classes.len(),
            survey.describe(),
            survey.spent,
            parts.join("; "),
            per_round,
            if classes.span > 1.0 + TOLERANCE + 1e-9 {
                format!(
                    " (classes span up to {:.2}x in count; a workgroup's time scales with its count)",
                    classes.span
                )
            } else {
                String::new()
            }
        );
        // The census of the class with the most work speaks for the grid's traffic.
        let busiest = (0..times.len())
            .max_by_key(|&c| times[c].cycles * classes.classes[c].members.len() as u64);
        if let Some(c) = busiest.and_then(|c| censuses.get(c)) {
            detail.push_str(&format!(
                "; XCD 0 fetches {:.0}% of the HBM traffic of the lines the busiest class loads",
                c.own_share * 100.0
            ));
        }
        let sampled = Sampled {
            cycles,
            rounds: n0.div_ceil(per_round).max(1),
            method: Method::Rounds,
            detail,
            shares: (!censuses.is_empty()).then_some(XcdShares {
                rounds: Vec::new(),
                classes: censuses,
            }),
        };
        Ok((sampled, sims))
    }

    /// [`Method::Rounds`] of a grid of one class: the first round of XCD 0 (and the last,
    /// partial one on its own), extrapolated over the rounds.
    fn uniform_rounds(&self) -> Result<(Sampled, Vec<Simulated>), TimingError> {
        let (xcds, cpx, sim_cus) = (self.xcds, self.cus_per_xcd, self.sim_cus);
        let n0 = self.total.div_ceil(xcds);
        let per_round = cpx * self.capacity();
        let rounds = n0.div_ceil(per_round).max(1);
        let last_workgroups = n0 - (rounds - 1) * per_round;
        let warm = self.opts.warm_rounds && rounds >= 2;
        let (first, how) = if warm {
            let has_last = rounds > 2 && last_workgroups < per_round;
            let (two, step) = self.two_rounds(self.trace(), has_last.then_some(rounds - 1))?;
            let how = match step {
                _ if rounds == 2 => Extrapolation::Two,
                Some(step) => Extrapolation::Warm {
                    rounds,
                    step,
                    last: has_last,
                },
                // No increment to tell: the run's mean round.
                None => Extrapolation::Warm {
                    rounds,
                    step: two.sim.0.end / (2 + u64::from(has_last)),
                    last: has_last,
                },
            };
            (two, how)
        } else {
            let first = self.round(0, self.trace(), None)?;
            (first, Extrapolation::of(rounds, last_workgroups, per_round))
        };
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
            Extrapolation::Two => format!(
                "2 rounds on XCD 0 simulated together ({} on {sim_cus} CUs, the second finding the lines the first left in L2 and MALL)",
                workgroups(first.workgroups)
            ),
            Extrapolation::Warm {
                rounds,
                step,
                last: has_last,
            } => format!(
                "{rounds} rounds of {} on XCD 0: rounds 1 and 2{} ({} on {sim_cus} CUs) simulated together, each further full round x {step} cycles (the second's increment)",
                workgroups(per_round),
                if has_last {
                    " and the last, partial one"
                } else {
                    ""
                },
                workgroups(first.workgroups),
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
                    _ => "census of every XCD's workgroups through one pass of their first loop",
                }
            ));
        }
        let sampled = Sampled {
            cycles,
            rounds,
            method: Method::Rounds,
            detail,
            shares: (!censuses.is_empty()).then_some(XcdShares {
                rounds: censuses,
                classes: Vec::new(),
            }),
        };
        Ok((sampled, sims))
    }

    /// Simulates the first two rounds of XCD 0 together, and round `last` after them if
    /// given: the workgroups of the simulated CUs dispatched as slots free, the first round's
    /// census standing for all (the census costs about as much as a round's simulation).
    /// Returns the run and the second round's increment ([`Extrapolation::step`]; `None`
    /// when it cannot be told).
    fn two_rounds(
        &self,
        trace: Option<(TraceOptions, f64)>,
        last: Option<u64>,
    ) -> Result<(RoundRun, Option<u64>), TimingError> {
        let (xcds, cpx, sim_cus) = (self.xcds, self.cus_per_xcd, self.sim_cus as u64);
        let per_round = cpx * self.capacity();
        let n0 = self.total.div_ceil(xcds);
        // The workgroups round `r` puts on the simulated CUs (its k-th on CU `k mod cpx`).
        let simulated = |r: u64| {
            (0..per_round)
                .filter(move |k| k % cpx < sim_cus && r * per_round + k < n0)
                .map(move |k| (r * per_round + k) * xcds)
        };
        let first = self.round_set(0);
        let known = self.known_census(0, None)?;
        let census = self.census_for(&self.lists(&first), &first, known)?;
        let n = simulated(0).count();
        let queue: VecDeque<u64> = simulated(0)
            .chain(simulated(1))
            .chain(last.into_iter().flat_map(simulated))
            .collect();
        let workgroups = queue.len() as u64;
        let scope = self.scope((n as u64).min(sim_cus), &first, census.as_ref());
        let dispatch = Dispatch::Dynamic {
            pending: vec![queue],
            rr: vec![0],
        };
        let sim = self.simulate(&scope, dispatch, trace)?;
        let step = Extrapolation::step(&sim.0, n);
        Ok((
            RoundRun {
                sim,
                workgroups,
                census: census.map(|c| (0, c)),
            },
            step,
        ))
    }

    /// The workgroups of round `r`: XCD 0's, the other XCDs', and how many run GPU-wide.
    fn round_set(&self, r: u64) -> RoundSet {
        let (xcds, total) = (self.xcds, self.total);
        let n0 = total.div_ceil(xcds);
        let per_round = self.cus_per_xcd * self.capacity();
        let first = r * per_round;
        let last = (first + per_round).min(n0);
        RoundSet {
            xcd0: (first..last).map(|kk| kk * xcds).collect(),
            others: (1..xcds)
                .map(|x| {
                    (first..last)
                        .map(|kk| kk * xcds + x)
                        .filter(|&i| i < total)
                        .collect()
                })
                .collect(),
            // Workgroups of this round GPU-wide.
            gpu: total
                .saturating_sub(r * per_round * xcds)
                .min(per_round * xcds),
        }
    }

    /// The simulated CUs' lists of `set`'s XCD 0 workgroups (its k-th on CU `k mod 32`, the
    /// CUs past the simulated ones left out).
    fn lists(&self, set: &RoundSet) -> Vec<Vec<u64>> {
        let cpx = self.cus_per_xcd as usize;
        let mut lists = vec![Vec::new(); self.sim_cus];
        for (k, &i) in set.xcd0.iter().enumerate() {
            let c = k % cpx;
            if c < self.sim_cus {
                lists[c].push(i);
            }
        }
        lists
    }

    /// Simulates round `r` of XCD 0 (the k-th workgroup of the round on CU `k mod 32`, the
    /// CUs past the simulated ones left out), with its census, or `reuse` as its census.
    fn round(
        &self,
        r: u64,
        trace: Option<(TraceOptions, f64)>,
        reuse: Option<Census>,
    ) -> Result<RoundRun, TimingError> {
        let set = self.round_set(r);
        let known = self.known_census(r, reuse)?;
        let run = self.simulate_set(&set, known, trace)?;
        Ok(RoundRun {
            census: run.census.map(|(_, c)| (r, c)),
            ..run
        })
    }

    /// Simulates the round `set` on XCD 0's CUs (its k-th workgroup on CU `k mod 32`, the
    /// CUs past the simulated ones left out), with `known` as its census or else a census
    /// of the set's workgroups on every XCD (as the options say).
    fn simulate_set(
        &self,
        set: &RoundSet,
        known: Option<Census>,
        trace: Option<(TraceOptions, f64)>,
    ) -> Result<RoundRun, TimingError> {
        let lists = self.lists(set);
        let sim_active = lists.iter().filter(|l| !l.is_empty()).count() as u64;
        let workgroups = lists.iter().map(|l| l.len() as u64).sum();
        let census = self.census_for(&lists, set, known)?;
        let scope = self.scope(sim_active, set, census.as_ref());
        let sim = self.simulate(&scope, Dispatch::Fixed(lists), trace)?;
        Ok(RoundRun {
            sim,
            workgroups,
            census: census.map(|c| (0, c)),
        })
    }

    /// One class's round `set` simulated, and after it on the same CUs (as slots free) the
    /// class's XCD 0 workgroups `second` of its next round; the census is the first
    /// round's. Returns the run and how many of its workgroups were the first round's (their
    /// ends come first in the run's sorted ends; all of them without a second round).
    fn simulate_class(
        &self,
        set: &RoundSet,
        second: &[u64],
        known: Option<Census>,
        trace: Option<(TraceOptions, f64)>,
    ) -> Result<(RoundRun, usize), TimingError> {
        if second.is_empty() {
            let run = self.simulate_set(set, known, trace)?;
            let n = run.workgroups as usize;
            return Ok((run, n));
        }
        let cpx = self.cus_per_xcd;
        let sim_cus = self.sim_cus as u64;
        let lists = self.lists(set);
        let census = self.census_for(&lists, set, known)?;
        let on_simulated = |wgs: &[u64]| -> Vec<u64> {
            wgs.iter()
                .enumerate()
                .filter(|(k, _)| (*k as u64 % cpx) < sim_cus)
                .map(|(_, &i)| i)
                .collect()
        };
        let first = on_simulated(&set.xcd0);
        let n = first.len();
        let queue: VecDeque<u64> = first.into_iter().chain(on_simulated(second)).collect();
        let workgroups = queue.len() as u64;
        let scope = self.scope((n as u64).min(sim_cus), set, census.as_ref());
        let dispatch = Dispatch::Dynamic {
            pending: vec![queue],
            rr: vec![0],
        };
        let sim = self.simulate(&scope, dispatch, trace)?;
        Ok((
            RoundRun {
                sim,
                workgroups,
                census: census.map(|c| (0, c)),
            },
            n,
        ))
    }

    /// The census round `r` takes from the options without counting one: a known census's
    /// (none for a census of a launch sampled by classes, whose workgroups did unequal work
    /// with the other loop counts: this round's is counted), or `reuse` under
    /// [`CrossXcd::Census`].
    fn known_census(&self, r: u64, reuse: Option<Census>) -> Result<Option<Census>, TimingError> {
        Ok(match &self.opts.cross_xcd {
            _ if self.xcds < 2 => None,
            CrossXcd::Known(k) if k.rounds.is_empty() && !k.classes.is_empty() => None,
            CrossXcd::Known(k) => Some(
                k.round(r)
                    .cloned()
                    .ok_or(TimingError::UnknownCensusRound { round: r })?,
            ),
            CrossXcd::Census { .. } => reuse,
            CrossXcd::Ignore => None,
        })
    }

    /// The census of `set` (placed on XCD 0 as `lists`): `known` if given, else counted as the
    /// options say.
    fn census_for(
        &self,
        lists: &[Vec<u64>],
        set: &RoundSet,
        known: Option<Census>,
    ) -> Result<Option<Census>, TimingError> {
        Ok(match &self.opts.cross_xcd {
            _ if self.xcds < 2 => None,
            CrossXcd::Ignore => None,
            _ if known.is_some() => known,
            // A known census of another sampling of the launch: this round's is counted.
            CrossXcd::Known(_) => Some(self.census_of(lists, set, DEFAULT_CENSUS_INSTRUCTIONS)?),
            &CrossXcd::Census { instructions } => Some(self.census_of(lists, set, instructions)?),
        })
    }

    /// The memory scope of a simulation of XCD 0 in which `sim_active` CUs run `set`'s
    /// workgroups: HBM and MALL shared in proportion to the CUs active GPU-wide, L2 to those
    /// active on XCD 0.
    fn scope(&self, sim_active: u64, set: &RoundSet, census: Option<&Census>) -> Scope {
        let (xcds, cpx) = (self.xcds, self.cus_per_xcd);
        let sim_active = sim_active.max(1) as f64;
        let xcd0_active = (set.xcd0.len() as u64).min(cpx) as f64;
        let gpu_active = set.gpu.min(xcds * cpx).max(1) as f64;
        Scope {
            cus: self.sim_cus,
            xcds: 1,
            gpu_share: (sim_active / gpu_active).min(1.0),
            l2_share: (sim_active / xcd0_active).min(1.0),
            shares: census.map_or_else(Vec::new, |c| c.shares.clone()),
        }
    }

    /// The census of a round: XCD 0's workgroups as `lists` places them, the other XCDs'
    /// as `set` holds them.
    fn census_of(
        &self,
        lists: &[Vec<u64>],
        set: &RoundSet,
        instructions: u64,
    ) -> Result<Census, TimingError> {
        let mut by_xcd = vec![lists.iter().flatten().copied().collect::<Vec<u64>>()];
        by_xcd.extend(set.others.iter().cloned());
        self.census().run(&by_xcd, instructions)
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

/// The rounded mean of `values` (`None` when there are none).
fn mean(values: impl Iterator<Item = u64>) -> Option<u64> {
    let (n, sum) = values.fold((0u64, 0u128), |(n, s), v| (n + 1, s + v as u128));
    (n > 0).then(|| ((sum + n as u128 / 2) / n as u128) as u64)
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
