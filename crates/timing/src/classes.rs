//! Workgroups that do unequal work: a functional survey of the grid ([`SurveyRun`]) classes
//! the workgroups by the instructions they execute ([`Classes`]), and a dispatch-level list
//! schedule ([`ListSchedule`]) spreads the classes' simulated times over the whole grid.
//!
//! The sampled method ([`Method::Rounds`](crate::Method::Rounds)) times one round of XCD 0
//! and repeats it, which assumes every round, and every XCD, does the same work. Kernels
//! whose workgroups past a bound exit at once, or whose first rows hold all the work, break
//! that. The survey runs every workgroup functionally (no timing, global writes discarded so
//! the simulations that follow see the memory they would have seen) and records whether it
//! ended and how many wave-instructions it executed. Its cost is bounded: each pass gives
//! every workgroup still running the same per-wave budget (the survey's budget shared over
//! them), so a grid whose workgroups all end cheaply is run to completion, and a grid of long
//! workgroups is run only until each wave has spent its share: the ones that ended within it
//! (early exits) class apart from those still running, which form one class. Workgroups
//! whose counts lie within [`TOLERANCE`] of each other are one class; a grid of one class
//! takes the sampled method unchanged.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use tilegen_emu::exec::interp::{self, Env, Probe};
use tilegen_emu::exec::launch::{Workgroup, run_workgroup_with};
use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::sched::{Budget, Step};
use tilegen_emu::exec::setup::DispatchState;
use tilegen_emu::exec::stats::Stats;
use tilegen_emu::exec::wave::Wave;

/// Wave-instructions the survey of one prediction may execute in all: about a fifth of a
/// second of the interpreter on one core (2.5 to 5 million wave-instructions a second), a
/// tenth of a large prediction's budget.
pub(crate) const SURVEY_INSTRUCTIONS: u64 = 1_000_000;

/// The fewest instructions per wave the first pass runs (enough for a kernel's prologue and
/// the test that sends surplus workgroups home). A grid whose first pass would cost more than
/// twice the survey's budget at this rate is not surveyed.
const MIN_WAVE_INSTRUCTIONS: u64 = 32;

/// `0..n` in bit-reversed order (the indices below `n` of the bit reversal of `0..2^bits`):
/// each prefix spreads over the range ever more finely.
fn spread(n: u64) -> impl Iterator<Item = u64> {
    let bits = u64::BITS - n.saturating_sub(1).leading_zeros();
    (0..1u64 << bits)
        .map(move |k| {
            if bits == 0 {
                0
            } else {
                k.reverse_bits() >> (u64::BITS - bits)
            }
        })
        .filter(move |&i| i < n)
}

/// The least number of workgroups the second pass of the survey can follow to their end: a
/// sampled workgroup runs at most this share of the budget left after the first pass.
const SAMPLED_SHARE: u64 = 16;

/// Relative difference of instruction counts within which workgroups are one class.
pub(crate) const TOLERANCE: f64 = 0.05;

/// How much the classes must change the schedule (in wave-instructions) to be simulated
/// apart ([`ListSchedule::matters`]).
pub(crate) const MATTERS: f64 = 0.10;

/// Most classes simulated: counts spread wider are binned more coarsely (each workgroup's
/// time then scales with its count within its class).
pub(crate) const MAX_CLASSES: usize = 4;

/// What the survey saw of one workgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Signature {
    /// It ended within the survey's budget.
    pub ended: bool,
    /// Wave-instructions it executed (up to the budget when it did not end).
    pub instructions: u64,
}

/// A launch's workgroups as the survey runs them.
pub(crate) struct SurveyRun<'a> {
    pub prog: &'a Program,
    /// Device memory (global writes are discarded).
    pub device: &'a DeviceMemory,
    pub dispatch: &'a DispatchState,
    pub waves_per_workgroup: usize,
    pub lds_bytes: u32,
    /// Compute MFMA results (see `TimingOptions::exact_mfma`).
    pub exact_mfma: bool,
    /// The most instructions a wave may run (the prediction's per-wave budget).
    pub wave_limit: u64,
}

/// The survey of a grid: each workgroup's signature.
#[derive(Clone, Debug)]
pub(crate) struct Survey {
    pub signatures: Vec<Signature>,
    /// Per-wave budget of the first pass (what "did not end" means).
    pub wave_budget: u64,
    /// Workgroups the first pass ran (all, unless the grid is too large; the others took the
    /// signature of the nearest one in launch order).
    pub surveyed: u64,
    /// Workgroups that ran past the first pass, and of them those run on (to their end or to
    /// [`Survey::sample_cap`]); the others took the signature of the nearest one in launch
    /// order.
    pub sampled: (u64, u64),
    /// Most instructions a wave of a workgroup the second pass runs on.
    pub sample_cap: u64,
    /// Wave-instructions executed.
    pub spent: u64,
}

impl SurveyRun<'_> {
    /// Surveys the `total` workgroups within about `budget` wave-instructions. A first pass
    /// runs every workgroup with half the budget shared out per wave (the early exits end
    /// in it); the workgroups still running are then run on in bit-reversed order of their
    /// launch index (so the sample spreads over the grid ever more finely), each to its end or
    /// to a cap of a sixteenth of the budget left (then it runs past the cap), while the
    /// budget lasts, and the ones left take the signature of the nearest sampled one, since
    /// work varies by ranges of workgroups (rows, blocks). `None` when a workgroup faults
    /// without its global writes (it reads what another one wrote), or when the grid is too
    /// large to survey: the grid is then taken as uniform, as before the survey existed.
    pub(crate) fn run(&self, total: u64, budget: u64) -> Option<Survey> {
        let waves = self.waves_per_workgroup.max(1) as u64;
        let mut signatures = vec![
            Signature {
                ended: false,
                instructions: 0,
            };
            usize::try_from(total).ok()?
        ];
        // A grid too large for the first pass to run every workgroup at the fewest
        // instructions within half the budget runs a spread sample of it (bit-reversed launch
        // order), the others taking the nearest surveyed workgroup's signature.
        let first = (budget / 2 / (waves * MIN_WAVE_INSTRUCTIONS)).clamp(1, total.max(1));
        let mut surveyed: Vec<u64> = if first >= total {
            (0..total).collect()
        } else {
            spread(total).take(first as usize).collect()
        };
        surveyed.sort_unstable();
        let per_wave = (budget / 2 / (surveyed.len().max(1) as u64 * waves))
            .max(MIN_WAVE_INSTRUCTIONS)
            .min(self.wave_limit);
        let mut state = PassState::new(self);
        let mut spent = 0u64;
        for &i in &surveyed {
            let s = state.run(self, i, per_wave)?;
            spent += s.instructions;
            signatures[i as usize] = s;
        }
        let pending: Vec<u64> = surveyed
            .iter()
            .copied()
            .filter(|&i| !signatures[i as usize].ended)
            .collect();
        let mut sampled = vec![false; pending.len()];
        // A sampled workgroup runs at most this many instructions a wave, so that one long
        // workgroup (the first sampled is the grid's first: often the longest, as in a ragged
        // batch sorted longest first) cannot take the whole budget: it is recorded as running
        // past the cap, and the survey goes on with the others.
        let cap = (budget.saturating_sub(spent) / SAMPLED_SHARE / waves).max(per_wave);
        let bits = usize::BITS - pending.len().saturating_sub(1).leading_zeros();
        for k in 0..(1usize << bits) {
            let pos = k.reverse_bits() >> (usize::BITS - bits).min(usize::BITS - 1);
            let pos = if bits == 0 { 0 } else { pos };
            if pos >= pending.len() || sampled[pos] {
                continue;
            }
            let left = budget.saturating_sub(spent) / waves;
            // Only a whole cap: a workgroup cut short by the budget's end would pass for a
            // long one.
            if left < cap {
                break;
            }
            let s = state.run(self, pending[pos], cap.min(self.wave_limit))?;
            spent += s.instructions;
            signatures[pending[pos] as usize] = s;
            sampled[pos] = true;
        }
        let runs = sampled.iter().filter(|&&s| s).count() as u64;
        // The nearest sampled workgroup in launch order (the earlier one on a tie).
        let mut last: Option<usize> = None;
        let mut next = sampled.iter().position(|&s| s);
        for pos in 0..pending.len() {
            if sampled[pos] {
                last = Some(pos);
                next = sampled[pos + 1..]
                    .iter()
                    .position(|&s| s)
                    .map(|n| pos + 1 + n);
                continue;
            }
            let near = match (last, next) {
                (Some(a), Some(b)) => Some(if pos - a <= b - pos { a } else { b }),
                (a, b) => a.or(b),
            };
            if let Some(n) = near {
                signatures[pending[pos] as usize] = signatures[pending[n] as usize];
            }
        }
        if surveyed.len() as u64 != total {
            // Every workgroup the first pass left out: the nearest surveyed one's signature.
            let mut next = 0usize;
            for i in 0..total {
                while next + 1 < surveyed.len() && surveyed[next + 1] <= i {
                    next += 1;
                }
                let a = surveyed[next];
                if a == i {
                    continue;
                }
                let near = match surveyed.get(next + 1) {
                    Some(&b) if a < i && b - i < i - a => b,
                    _ => a,
                };
                signatures[i as usize] = signatures[near as usize];
            }
        }
        Some(Survey {
            signatures,
            wave_budget: per_wave,
            surveyed: surveyed.len() as u64,
            sampled: (pending.len() as u64, runs),
            sample_cap: cap,
            spent,
        })
    }
}

impl Survey {
    /// How far the survey ran the workgroups, in words.
    pub(crate) fn describe(&self) -> String {
        let total = self.signatures.len() as u64;
        let passes = self.passes();
        if self.surveyed < total {
            format!(
                "a spread sample of {} of the {total} workgroups surveyed, the others taking the nearest one's count; {passes}",
                self.surveyed
            )
        } else {
            passes
        }
    }

    /// What the passes did, in words.
    fn passes(&self) -> String {
        let (past, runs) = self.sampled;
        if past == 0 {
            format!(
                "every workgroup ended within {} instructions a wave",
                self.wave_budget
            )
        } else if runs == past {
            format!(
                "each wave run up to {} instructions, the {past} workgroups still running then run on (up to {} a wave)",
                self.wave_budget, self.sample_cap
            )
        } else {
            format!(
                "each wave run up to {} instructions, {runs} of the {past} workgroups still running then run on (up to {} a wave), the others taking the nearest one's count",
                self.wave_budget, self.sample_cap
            )
        }
    }
}

/// What a survey pass reuses from one workgroup to the next.
struct PassState {
    stats: Stats,
    counts: Vec<u64>,
    probe: Probe,
    waves: Vec<Wave>,
}

impl PassState {
    fn new(run: &SurveyRun<'_>) -> PassState {
        PassState {
            stats: Stats::default(),
            counts: vec![0; run.prog.instruction_count()],
            probe: Probe {
                skip_mfma_math: !run.exact_mfma,
                discard_global_writes: true,
                ..Probe::default()
            },
            waves: Vec::with_capacity(run.waves_per_workgroup),
        }
    }

    /// Runs workgroup `index`, each wave for at most `per_wave` instructions.
    fn run(&mut self, r: &SurveyRun<'_>, index: u64, per_wave: u64) -> Option<Signature> {
        let wg = Workgroup::new(r.dispatch, index, r.waves_per_workgroup as u32, r.lds_bytes);
        // The survey sets its own limit per wave, and stops quietly at it.
        let unlimited = Budget::new(u64::MAX);
        let (mut executed, mut cut) = (0u64, false);
        let PassState {
            stats,
            counts,
            probe,
            waves,
        } = self;
        let prog = r.prog;
        let run = run_workgroup_with(prog, r.dispatch, &unlimited, wg, waves, |w, lds| {
            if w.executed > per_wave {
                // The wave has spent its share: it leaves the workgroup as if it had ended,
                // so barriers still release.
                cut = true;
                return Ok(Step::End);
            }
            executed += 1;
            let mut env = Env {
                prog,
                mem: r.device,
                stats: &mut *stats,
                counts: &mut *counts,
                probe: Some(&mut *probe),
            };
            interp::step(&mut env, w, lds)
        });
        run.ok()?;
        Some(Signature {
            ended: !cut,
            instructions: executed,
        })
    }
}

/// One class of workgroups.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Class {
    /// Its workgroups, in launch order.
    pub members: Vec<u64>,
    /// Whether they ended within the survey's budget.
    pub ended: bool,
    /// The fewest and most wave-instructions of its members.
    pub instructions: (u64, u64),
}

/// The grid's workgroups by class.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Classes {
    /// Ended classes by instruction count, then the class still running (if any).
    pub classes: Vec<Class>,
    /// The class of each workgroup.
    pub of: Vec<u16>,
    /// The ratio of counts one class spans (1 + [`TOLERANCE`] unless the counts were binned
    /// more coarsely to keep [`MAX_CLASSES`]).
    pub span: f64,
}

impl Classes {
    /// Classes the surveyed workgroups: the ended ones by instruction count (a class spans
    /// at most `1 + tolerance`, widened until there are at most `max` classes in all), the
    /// ones still running as one class.
    pub(crate) fn of(survey: &Survey, tolerance: f64, max: usize) -> Classes {
        let sig = &survey.signatures;
        let mut ended: Vec<u64> = sig
            .iter()
            .filter(|s| s.ended)
            .map(|s| s.instructions)
            .collect();
        ended.sort_unstable();
        ended.dedup();
        let running = sig.iter().any(|s| !s.ended);
        let room = max.saturating_sub(running as usize).max(1);
        let mut span = 1.0 + tolerance;
        let mut bounds = bins(&ended, span);
        while bounds.len() > room {
            span *= 1.0 + 2.0 * (span - 1.0).max(tolerance);
            bounds = bins(&ended, span);
        }
        let mut classes: Vec<Class> = bounds
            .iter()
            .map(|&(lo, hi)| Class {
                members: Vec::new(),
                ended: true,
                instructions: (lo, hi),
            })
            .collect();
        if running {
            classes.push(Class {
                members: Vec::new(),
                ended: false,
                instructions: (survey.wave_budget, survey.wave_budget),
            });
        }
        let mut of = Vec::with_capacity(sig.len());
        for (i, s) in sig.iter().enumerate() {
            let c = if s.ended {
                bounds.partition_point(|&(_, hi)| hi < s.instructions)
            } else {
                classes.len() - 1
            };
            classes[c].members.push(i as u64);
            of.push(c as u16);
        }
        Classes { classes, of, span }
    }

    /// Whether the grid is one class (the sampled method applies unchanged).
    pub(crate) fn uniform(&self) -> bool {
        self.classes.len() <= 1
    }
}

/// Greedy bins of the sorted distinct `counts`: each starts at its smallest count and holds
/// the counts up to `span` times it. Returns each bin's (first, last) count.
fn bins(counts: &[u64], span: f64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::new();
    for &n in counts {
        match out.last_mut() {
            Some((lo, hi)) if n as f64 <= *lo as f64 * span => *hi = n,
            _ => out.push((n, n)),
        }
    }
    out
}

/// What one class's simulated round says of its workgroups.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct ClassTime {
    /// Cycles a workgroup of the class holds its slot once the kernel runs in steady state:
    /// the mean time the round's workgroups took (each sharing its CU with the round's
    /// others), which a member the survey misplaced in the class does not decide as it would
    /// the round's length; for a class of two rounds or more, the second round's increment
    /// over the first (its lines found in L2 and MALL, its dispatch staggered as slots free).
    pub cycles: u64,
    /// Cycles of a workgroup that takes a slot fresh, at the kernel's start: the first
    /// round's mean time (cold caches, every slot starting at once); `cycles` for a class
    /// simulated as one round.
    pub first: u64,
    /// Cycles HBM took past the round's last wave (the write-back of its results).
    pub drain: u64,
    /// Mean wave-instructions of the simulated workgroups, to scale the time of a member
    /// with another count; `None` when the class is the survey's still-running one (counts
    /// unknown).
    pub instructions: Option<u64>,
}

/// The dispatch of the whole grid at the level of workgroups: workgroup `i` goes to XCD
/// `i mod xcds`, where each of the `slots` (CUs times the workgroups a CU holds) takes the
/// XCD's next workgroup when it frees; a workgroup holds its slot for its class's time
/// (which counts its dispatch: the simulated round starts with it).
pub(crate) struct ListSchedule {
    pub xcds: u64,
    pub slots: u64,
}

impl ListSchedule {
    /// Cycles of the kernel: the last workgroup's end plus its class's drain.
    pub(crate) fn cycles(&self, classes: &Classes, survey: &Survey, times: &[ClassTime]) -> u64 {
        self.end(classes.of.len() as u64, |i, fresh| {
            let c = classes.of[i as usize] as usize;
            let t = times[c];
            let own = survey.signatures[i as usize].instructions;
            let base = if fresh { t.first } else { t.cycles };
            let cycles = match t.instructions {
                Some(n) if n > 0 && own != n => {
                    (base as f64 * own as f64 / n as f64).round() as u64
                }
                _ => base,
            };
            (cycles, t.drain)
        })
    }

    /// Whether the survey's counts change the grid's schedule: with each workgroup lasting
    /// its wave-instruction count, the list schedule of the whole grid and the rounds of XCD
    /// 0 repeating its first round's longest workgroup (a partial last round taking its own
    /// longest) differ by more than `threshold`. Classes that do not are left to the rounds,
    /// whose error is of that order anyway. Every further round is compared with the first,
    /// as every extrapolation of rounds repeats one (the warm rounds the second's increment):
    /// a last full round of blocks that exit at once (past the valid rows of a sorted MoE
    /// batch) counts as a full round of work there, which is what the classes correct.
    pub(crate) fn matters(&self, survey: &Survey, threshold: f64) -> bool {
        let sig = &survey.signatures;
        let total = sig.len() as u64;
        let count = |i: u64| sig[i as usize].instructions;
        let n0 = total.div_ceil(self.xcds.max(1));
        let slots = self.slots.max(1);
        let rounds = n0.div_ceil(slots).max(1);
        let longest = |r: u64| {
            (r * slots..((r + 1) * slots).min(n0))
                .map(|kk| count(kk * self.xcds))
                .max()
                .unwrap_or(0)
        };
        let rounds_say = if n0.is_multiple_of(slots) {
            rounds * longest(0)
        } else {
            (rounds - 1) * longest(0) + longest(rounds - 1)
        };
        let schedule_says = self.end(total, |i, _| (count(i), 0));
        (schedule_says as f64 - rounds_say as f64).abs() > threshold * rounds_say.max(1) as f64
    }

    /// The end of the schedule of `total` workgroups, workgroup `i` lasting `time_of(i,
    /// fresh).0 (`fresh`: it takes a slot no workgroup held before) and its end followed by a
    /// drain of `time_of(i, fresh).1`.
    fn end(&self, total: u64, time_of: impl Fn(u64, bool) -> (u64, u64)) -> u64 {
        let mut end = 0u64;
        for x in 0..self.xcds.min(total) {
            let mut free: BinaryHeap<Reverse<u64>> = BinaryHeap::new();
            let mut i = x;
            while i < total {
                let fresh = (free.len() as u64) < self.slots;
                let start = if fresh {
                    0
                } else {
                    free.pop().map_or(0, |Reverse(t)| t)
                };
                let (cycles, drain) = time_of(i, fresh);
                let finish = start + cycles;
                free.push(Reverse(finish));
                end = end.max(finish + drain);
                i += self.xcds;
            }
        }
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn survey(counts: &[(bool, u64)]) -> Survey {
        Survey {
            signatures: counts
                .iter()
                .map(|&(ended, instructions)| Signature {
                    ended,
                    instructions,
                })
                .collect(),
            wave_budget: 100,
            surveyed: 0,
            sampled: (0, 0),
            sample_cap: 100,
            spent: 0,
        }
    }

    #[test]
    fn counts_within_the_tolerance_are_one_class() {
        let s = survey(&[
            (true, 1000),
            (true, 1040),
            (true, 20),
            (true, 1100),
            (true, 21),
        ]);
        let c = Classes::of(&s, 0.05, 4);
        assert_eq!(c.classes.len(), 3);
        assert_eq!(c.of, vec![1, 1, 0, 2, 0]);
        assert_eq!(c.classes[0].instructions, (20, 21));
        let uniform = survey(&[(false, 400), (false, 400)]);
        assert!(Classes::of(&uniform, 0.05, 4).uniform());
        let split = survey(&[(false, 400), (true, 12)]);
        let c = Classes::of(&split, 0.05, 4);
        assert_eq!(c.of, vec![1, 0]);
        assert!(!c.classes[1].ended);
    }

    #[test]
    fn many_counts_bin_into_at_most_max_classes() {
        let counts: Vec<(bool, u64)> = (1..=64).map(|i| (true, 100 * i)).collect();
        let c = Classes::of(&survey(&counts), 0.05, 4);
        assert!(c.classes.len() <= 4, "{:?}", c.classes.len());
        assert_eq!(c.classes.iter().map(|k| k.members.len()).sum::<usize>(), 64);
    }

    #[test]
    fn the_list_schedule_of_one_class_is_rounds_times_its_time() {
        let s = survey(&[(true, 10); 64]);
        let c = Classes::of(&s, 0.05, 4);
        let times = [ClassTime {
            cycles: 100,
            first: 100,
            drain: 7,
            instructions: Some(10),
        }];
        // 2 XCDs of 8 slots: 32 workgroups each, 4 rounds.
        let l = ListSchedule { xcds: 2, slots: 8 };
        assert_eq!(l.cycles(&c, &s, &times), 4 * 100 + 7);
        // A slower first round (cold caches) once, then the steady state.
        let cold = [ClassTime {
            first: 130,
            ..times[0]
        }];
        assert_eq!(l.cycles(&c, &s, &cold), 130 + 3 * 100 + 7);
        // One long workgroup beside short ones: it sets the end.
        let mut s = survey(&[(true, 10); 64]);
        s.signatures[5].instructions = 1000;
        let c = Classes::of(&s, 0.05, 4);
        let times = [
            times[0],
            ClassTime {
                cycles: 5000,
                first: 5000,
                drain: 0,
                instructions: Some(1000),
            },
        ];
        assert_eq!(l.cycles(&c, &s, &times), 5000);
        // It is on XCD 1, which the rounds of XCD 0 do not see.
        assert!(l.matters(&s, 0.1));
        // In one round on XCD 0, the rounds see it.
        let mut s = survey(&[(true, 10); 16]);
        s.signatures[4].instructions = 1000;
        assert!(!l.matters(&s, 0.1));
        s.signatures[5].instructions = 1200;
        assert!(l.matters(&s, 0.1));
    }

    #[test]
    fn full_rounds_that_do_no_work_matter() {
        // 2 XCDs of 8 slots, 4 full rounds each; the last round of each XCD (its workgroups
        // 24..32, grid indices 48..64) exits at once, as blocks past a sorted batch's valid
        // rows do.
        let mut s = survey(&[(true, 100); 64]);
        for sig in &mut s.signatures[48..] {
            sig.instructions = 2;
        }
        let l = ListSchedule { xcds: 2, slots: 8 };
        // Both ways of extrapolating rounds count the empty round as a full one.
        assert!(l.matters(&s, 0.1));
        // A partial last round is simulated as it is, so an empty one there does not matter.
        let mut s = survey(&[(true, 100); 56]);
        for sig in &mut s.signatures[52..] {
            sig.instructions = 2;
        }
        assert!(!l.matters(&s, 0.1));
    }
}
