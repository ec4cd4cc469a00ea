//! Running the waves of one workgroup on one host thread.
//!
//! Waves are interleaved deterministically: in wave order, each ready wave runs until it
//! reaches `s_barrier`, ends, executes `s_sleep` or has used a time slice of
//! [`TIME_SLICE`] instructions; when every wave that has not ended waits at the barrier, all
//! of them are released. A wave that has ended counts as having arrived (CDNA4 ISA 4.3:
//! early-terminated waves satisfy the barrier). Instructions execute atomically and in
//! program order, so every ordering a race-free program relies on is honoured; the yields
//! exist so that a wave spin-waiting on LDS or memory written by a sibling (without a
//! barrier) still lets that sibling run. The schedule depends only on instruction counts,
//! so even racy programs give the same answer on every run.
//!
//! A wave stuck short of the barrier (an endless loop) shows up when it has executed its
//! per-wave instruction budget; if other waves wait at the barrier at that point the fault
//! is reported as a barrier deadlock.
//!
//! Every [`CHECK_INTERVAL`] instructions (and when a workgroup starts) the scheduler looks
//! at the launch's stop conditions: a lower-numbered workgroup has faulted, or the caller
//! cancelled the launch.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::fault::FaultKind;
use super::memory::Lds;
use super::wave::{Wave, WaveStatus};

/// What one instruction did to the wave's scheduling state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// Keep running.
    Continue,
    /// Wait at the workgroup barrier.
    Barrier,
    /// The wave ended.
    End,
    /// Let the other waves run for a while.
    Yield,
}

/// Instructions a wave runs before the scheduler moves on to its siblings (long enough that
/// switching costs nothing measurable, short enough that spin-waits resolve quickly).
pub const TIME_SLICE: u32 = 1 << 16;

/// Instructions between two looks at the launch's stop conditions (the shared atomics are
/// read rarely, so the check costs nothing measurable).
pub const CHECK_INTERVAL: u64 = 4096;

/// The per-wave instruction budget and the stop conditions shared by all workgroups of a
/// launch.
#[derive(Debug)]
pub struct Budget {
    per_wave: u64,
    /// Index of the lowest-numbered workgroup that has faulted (`u64::MAX` if none).
    /// Workgroups numbered above it stop early; lower ones run on, so the fault that is
    /// finally reported (the lowest-numbered) does not depend on thread timing.
    pub first_fault: AtomicU64,
    cancel: Option<std::sync::Arc<AtomicBool>>,
}

impl Budget {
    /// A budget of `per_wave` instructions for each wave.
    pub fn new(per_wave: u64) -> Budget {
        Budget {
            per_wave,
            first_fault: AtomicU64::new(u64::MAX),
            cancel: None,
        }
    }

    /// The same budget, also stopped when `flag` is raised.
    pub fn with_cancel(mut self, flag: std::sync::Arc<AtomicBool>) -> Budget {
        self.cancel = Some(flag);
        self
    }

    /// Records that workgroup `index` faulted.
    pub fn record_fault(&self, index: u64) {
        self.first_fault.fetch_min(index, Ordering::Relaxed);
    }

    /// Whether workgroup `index` should stop: a lower-numbered one has faulted
    /// ([`FaultKind::Aborted`]) or the launch was cancelled ([`FaultKind::Cancelled`]).
    pub fn stop(&self, index: u64) -> Option<FaultKind> {
        if self.first_fault.load(Ordering::Relaxed) < index {
            return Some(FaultKind::Aborted);
        }
        if self
            .cancel
            .as_ref()
            .is_some_and(|c| c.load(Ordering::Relaxed))
        {
            return Some(FaultKind::Cancelled);
        }
        None
    }
}

/// Runs all waves of a workgroup to completion. On a fault returns the index of the wave
/// that faulted (its PC still points at the faulting instruction) and the reason.
pub fn run_workgroup<F>(
    waves: &mut [Wave],
    lds: &mut Lds,
    budget: &Budget,
    wg_index: u64,
    mut step: F,
) -> Result<(), (usize, FaultKind)>
where
    F: FnMut(&mut Wave, &mut Lds) -> Result<Step, FaultKind>,
{
    let mut credit = 0u64;
    loop {
        for i in 0..waves.len() {
            let mut slice = TIME_SLICE;
            while waves[i].status == WaveStatus::Ready && slice > 0 {
                if credit == 0 {
                    if let Some(stop) = budget.stop(wg_index) {
                        return Err((i, stop));
                    }
                    credit = CHECK_INTERVAL;
                }
                credit -= 1;
                slice -= 1;
                let w = &mut waves[i];
                if w.executed >= budget.per_wave {
                    let e = FaultKind::Budget {
                        budget: budget.per_wave,
                    };
                    return Err((i, out_of_budget(waves, e)));
                }
                w.executed += 1;
                match step(w, lds).map_err(|e| (i, e))? {
                    Step::Continue => {}
                    Step::Yield => break,
                    Step::Barrier => w.status = WaveStatus::AtBarrier,
                    Step::End => w.status = WaveStatus::Done,
                }
            }
        }
        if waves.iter().any(|w| w.status == WaveStatus::Ready) {
            continue;
        }
        if !waves.iter().any(|w| w.status == WaveStatus::AtBarrier) {
            return Ok(());
        }
        for w in waves.iter_mut() {
            if w.status == WaveStatus::AtBarrier {
                w.status = WaveStatus::Ready;
            }
        }
    }
}

/// The fault for an exhausted budget: a barrier deadlock when waves wait at the barrier for
/// the ones still running, else the plain budget fault.
fn out_of_budget(waves: &[Wave], e: FaultKind) -> FaultKind {
    let waiting: Vec<u32> = waves
        .iter()
        .filter(|w| w.status == WaveStatus::AtBarrier)
        .map(|w| w.id)
        .collect();
    if waiting.is_empty() {
        return e;
    }
    let running = waves
        .iter()
        .filter(|w| w.status == WaveStatus::Ready)
        .map(|w| w.id)
        .collect();
    FaultKind::BarrierDeadlock { waiting, running }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A toy "program": each wave appends its id to LDS byte `n`, hits a barrier after its
    /// first write, then after the barrier reads how many waves wrote before it.
    #[test]
    fn barrier_orders_phases() {
        let mut waves: Vec<Wave> = (0..4).map(|i| Wave::new(i, 0)).collect();
        let mut lds = Lds::new(64).unwrap();
        let budget = Budget::new(1_000_000);
        let mut seen_after_barrier = Vec::new();
        run_workgroup(&mut waves, &mut lds, &budget, 0, |w, lds| {
            w.pc += 1;
            match w.pc {
                1 => {
                    let n = lds.read_u32(0);
                    lds.write_u32(4 + 4 * n as u64, w.id);
                    lds.write_u32(0, n + 1);
                    Ok(Step::Continue)
                }
                2 => Ok(Step::Barrier),
                3 => {
                    seen_after_barrier.push((w.id, lds.read_u32(0)));
                    Ok(Step::Continue)
                }
                _ => Ok(Step::End),
            }
        })
        .unwrap();
        // Every wave saw all four phase-1 writes, and waves ran in order.
        assert_eq!(seen_after_barrier, vec![(0, 4), (1, 4), (2, 4), (3, 4)]);
        assert_eq!(
            (0..4).map(|i| lds.read_u32(4 + 4 * i)).collect::<Vec<_>>(),
            vec![0, 1, 2, 3]
        );
    }

    #[test]
    fn ended_waves_satisfy_the_barrier() {
        let mut waves: Vec<Wave> = (0..2).map(|i| Wave::new(i, 0)).collect();
        let mut lds = Lds::new(0).unwrap();
        let budget = Budget::new(1000);
        let mut after = 0;
        run_workgroup(&mut waves, &mut lds, &budget, 0, |w, _| {
            w.pc += 1;
            Ok(match (w.id, w.pc) {
                (0, 1) => Step::End,
                (1, 1) => Step::Barrier,
                (1, 2) => {
                    after += 1;
                    Step::End
                }
                _ => unreachable!(),
            })
        })
        .unwrap();
        assert_eq!(after, 1);
    }

    #[test]
    fn budget_stops_an_endless_wave() {
        let mut waves = vec![Wave::new(0, 0)];
        let mut lds = Lds::new(0).unwrap();
        let budget = Budget::new(10_000);
        let r = run_workgroup(&mut waves, &mut lds, &budget, 0, |_, _| Ok(Step::Continue));
        assert_eq!(r, Err((0, FaultKind::Budget { budget: 10_000 })));
        assert_eq!(waves[0].executed, 10_000);
    }

    /// The budget is per wave: two waves of 6000 instructions each fit a budget of 10000.
    #[test]
    fn budget_is_per_wave() {
        let mut waves: Vec<Wave> = (0..2).map(|i| Wave::new(i, 0)).collect();
        let mut lds = Lds::new(0).unwrap();
        let budget = Budget::new(10_000);
        let r = run_workgroup(&mut waves, &mut lds, &budget, 0, |w, _| {
            Ok(if w.executed == 6000 {
                Step::End
            } else {
                Step::Continue
            })
        });
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn a_raised_cancel_flag_stops_the_workgroup() {
        let flag = std::sync::Arc::new(AtomicBool::new(false));
        let budget = Budget::new(u64::MAX).with_cancel(flag.clone());
        let mut waves = vec![Wave::new(0, 0)];
        let mut lds = Lds::new(0).unwrap();
        let mut n = 0u64;
        let r = run_workgroup(&mut waves, &mut lds, &budget, 0, |_, _| {
            n += 1;
            if n == 10 {
                flag.store(true, Ordering::Relaxed);
            }
            Ok(Step::Continue)
        });
        assert_eq!(r, Err((0, FaultKind::Cancelled)));
        assert_eq!(n, CHECK_INTERVAL, "stopped at the next check");
    }

    #[test]
    fn faults_report_the_wave() {
        let mut waves: Vec<Wave> = (0..3).map(|i| Wave::new(i, 0)).collect();
        let mut lds = Lds::new(0).unwrap();
        let budget = Budget::new(1000);
        let r = run_workgroup(&mut waves, &mut lds, &budget, 0, |w, _| {
            if w.id == 1 {
                Err(FaultKind::Unimplemented("x".into()))
            } else {
                Ok(Step::End)
            }
        });
        assert_eq!(r, Err((1, FaultKind::Unimplemented("x".into()))));
    }

    #[test]
    fn higher_workgroups_abort_after_a_fault() {
        let budget = Budget::new(1_000_000);
        budget.record_fault(3);
        let mut waves = vec![Wave::new(0, 0)];
        let mut lds = Lds::new(0).unwrap();
        let r = run_workgroup(&mut waves, &mut lds, &budget, 5, |_, _| Ok(Step::End));
        assert_eq!(r, Err((0, FaultKind::Aborted)));
        let r = run_workgroup(&mut waves, &mut lds, &budget, 2, |_, _| Ok(Step::End));
        assert_eq!(r, Ok(()));
    }

    #[test]
    fn an_endless_wave_while_others_wait_is_a_barrier_deadlock() {
        let mut waves: Vec<Wave> = (0..3).map(|i| Wave::new(i, 0)).collect();
        let mut lds = Lds::new(0).unwrap();
        let budget = Budget::new(100_000);
        let r = run_workgroup(&mut waves, &mut lds, &budget, 0, |w, _| {
            w.pc += 1;
            Ok(match w.id {
                0 => Step::Barrier,
                1 => Step::Continue,
                _ => Step::End,
            })
        });
        assert_eq!(
            r,
            Err((
                1,
                FaultKind::BarrierDeadlock {
                    waiting: vec![0],
                    running: vec![1]
                }
            ))
        );
    }

    /// Wave 0 spins on an LDS flag that wave 1 sets without any barrier: it must yield (at
    /// s_sleep here, or when its time slice ends) for wave 1 to run at all.
    #[test]
    fn spin_waits_make_progress() {
        for sleep in [true, false] {
            let mut waves: Vec<Wave> = (0..2).map(|i| Wave::new(i, 0)).collect();
            let mut lds = Lds::new(64).unwrap();
            let budget = Budget::new(10_000_000);
            let mut spins = 0u64;
            run_workgroup(&mut waves, &mut lds, &budget, 0, |w, lds| {
                if w.id == 1 {
                    lds.write_u32(0, 1);
                    return Ok(Step::End);
                }
                if lds.read_u32(0) == 1 {
                    return Ok(Step::End);
                }
                spins += 1;
                Ok(if sleep { Step::Yield } else { Step::Continue })
            })
            .unwrap();
            assert_eq!(spins, if sleep { 1 } else { TIME_SLICE as u64 });
        }
    }
}
