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
//! A wave stuck short of the barrier (an endless loop) shows up when the launch's
//! instruction budget runs out; if other waves wait at the barrier at that point the fault
//! is reported as a barrier deadlock.

use std::sync::atomic::{AtomicU64, Ordering};

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

/// Instructions are taken from the shared budget in chunks of this size, so the atomic is
/// touched rarely.
const BUDGET_CHUNK: u64 = 4096;

/// The launch-wide instruction budget and stop flag, shared by all workgroups.
#[derive(Debug)]
pub struct Budget {
    remaining: AtomicU64,
    total: u64,
    /// Index of the lowest-numbered workgroup that has faulted (`u64::MAX` if none).
    /// Workgroups numbered above it stop early; lower ones run on, so the fault that is
    /// finally reported (the lowest-numbered) does not depend on thread timing.
    pub first_fault: AtomicU64,
}

impl Budget {
    /// A budget of `total` wave-instructions.
    pub fn new(total: u64) -> Budget {
        Budget {
            remaining: AtomicU64::new(total),
            total,
            first_fault: AtomicU64::new(u64::MAX),
        }
    }

    /// Takes up to one chunk of the budget; fails once nothing is left.
    fn take(&self) -> Result<u64, FaultKind> {
        self.remaining
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| {
                if r == 0 {
                    None
                } else {
                    Some(r - r.min(BUDGET_CHUNK))
                }
            })
            .map(|r| r.min(BUDGET_CHUNK))
            .map_err(|_| FaultKind::Budget { budget: self.total })
    }

    /// Records that workgroup `index` faulted.
    pub fn record_fault(&self, index: u64) {
        self.first_fault.fetch_min(index, Ordering::Relaxed);
    }

    fn aborted(&self, index: u64) -> bool {
        self.first_fault.load(Ordering::Relaxed) < index
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
                    if budget.aborted(wg_index) {
                        return Err((i, FaultKind::Aborted));
                    }
                    credit = budget.take().map_err(|e| (i, out_of_budget(waves, e)))?;
                }
                credit -= 1;
                slice -= 1;
                let w = &mut waves[i];
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
