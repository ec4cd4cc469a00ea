//! Signals: a 64-bit value that waiters block on until it meets their condition.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tilegen_hsa::sys::{self, Status};

use crate::state::{Runtime, TICKS_PER_SECOND};
use crate::status::fail;

/// A signal. Every change takes the lock before notifying, and waiters re-check the value
/// under the lock before sleeping, so no wake-up is lost.
pub(crate) struct SignalObj {
    value: AtomicI64,
    lock: Mutex<()>,
    changed: Condvar,
    /// A queue's doorbell: only its queue destroys it.
    pub doorbell: bool,
    /// The start and end (system timestamp ticks) of the last profiled dispatch or copy that
    /// signalled it; (0, 0) before any.
    times: Mutex<(u64, u64)>,
}

impl SignalObj {
    pub fn new(initial: i64, doorbell: bool) -> SignalObj {
        SignalObj {
            value: AtomicI64::new(initial),
            lock: Mutex::new(()),
            changed: Condvar::new(),
            doorbell,
            times: Mutex::new((0, 0)),
        }
    }

    /// Records the times of the profiled operation that signals it.
    pub fn set_times(&self, start: u64, end: u64) {
        *self.times.lock().unwrap_or_else(|p| p.into_inner()) = (start, end);
    }

    /// The times of the last profiled operation that signalled it.
    pub fn times(&self) -> (u64, u64) {
        *self.times.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The value's address (`hsa_amd_signal_value_pointer`); stable while the signal lives.
    pub fn value_ptr(&self) -> *const AtomicI64 {
        &self.value
    }

    /// Applies `f` atomically and wakes the waiters; returns the previous value.
    pub fn update(&self, f: impl Fn(i64) -> i64) -> i64 {
        let old = self
            .value
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |v| Some(f(v)))
            .unwrap_or_else(|v| v);
        self.notify();
        old
    }

    /// Compare-and-swap; returns the previous value.
    pub fn cas(&self, expected: i64, value: i64) -> i64 {
        let old = self
            .value
            .compare_exchange(expected, value, Ordering::SeqCst, Ordering::SeqCst)
            .unwrap_or_else(|v| v);
        self.notify();
        old
    }

    pub fn load(&self) -> i64 {
        self.value.load(Ordering::SeqCst)
    }

    fn notify(&self) {
        let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.changed.notify_all();
    }

    pub fn store(&self, v: i64) {
        self.value.store(v, Ordering::SeqCst);
        self.notify();
    }

    pub fn add(&self, v: i64) {
        self.value.fetch_add(v, Ordering::SeqCst);
        self.notify();
    }

    /// Waits until `cond(value)` holds, `deadline` passes or `stop()` says so; returns the
    /// value last seen.
    pub fn wait_until(
        &self,
        cond: impl Fn(i64) -> bool,
        deadline: Option<Instant>,
        stop: impl Fn() -> bool,
    ) -> i64 {
        loop {
            let v = self.load();
            if cond(v) || stop() {
                return v;
            }
            let g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            let v = self.load();
            if cond(v) || stop() {
                return v;
            }
            let slice = Duration::from_millis(50);
            let wait = match deadline {
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) if !left.is_zero() => left.min(slice),
                    _ => return v,
                },
                None => slice,
            };
            drop(
                self.changed
                    .wait_timeout(g, wait)
                    .unwrap_or_else(|p| p.into_inner()),
            );
        }
    }
}

/// The live signal of `handle`.
pub(crate) fn get(rt: &Runtime, handle: u64) -> Option<Arc<SignalObj>> {
    rt.signals
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&handle)
        .cloned()
}

/// `hsa_signal_create`.
pub(crate) fn create(rt: &Runtime, initial: i64) -> sys::Signal {
    let handle = rt.handle();
    rt.signals
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(handle, Arc::new(SignalObj::new(initial, false)));
    sys::Signal { handle }
}

/// `hsa_signal_destroy`.
pub(crate) fn destroy(rt: &Runtime, signal: sys::Signal) -> Status {
    if signal.handle == 0 {
        return fail(sys::STATUS_ERROR_INVALID_ARGUMENT, "signal handle 0");
    }
    let mut signals = rt.signals.write().unwrap_or_else(|p| p.into_inner());
    match signals.get(&signal.handle) {
        None => fail(
            sys::STATUS_ERROR_INVALID_SIGNAL,
            format!(
                "signal {:#x} does not exist (destroyed already?)",
                signal.handle
            ),
        ),
        Some(s) if s.doorbell => fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!(
                "signal {:#x} is a queue's doorbell; destroy the queue instead",
                signal.handle
            ),
        ),
        Some(_) => {
            signals.remove(&signal.handle);
            sys::STATUS_SUCCESS
        }
    }
}

/// Whether `value` meets `condition` against `compare` (`None` for an unknown condition).
pub(crate) fn condition(condition: u32, compare: i64) -> Option<impl Fn(i64) -> bool> {
    let ok = matches!(
        condition,
        sys::SIGNAL_CONDITION_EQ
            | sys::SIGNAL_CONDITION_NE
            | sys::SIGNAL_CONDITION_LT
            | sys::SIGNAL_CONDITION_GTE
    );
    ok.then_some(move |v: i64| match condition {
        sys::SIGNAL_CONDITION_EQ => v == compare,
        sys::SIGNAL_CONDITION_NE => v != compare,
        sys::SIGNAL_CONDITION_LT => v < compare,
        _ => v >= compare,
    })
}

/// The deadline of a wait with `timeout_hint` ticks (`u64::MAX`: none).
pub(crate) fn deadline(timeout_hint: u64) -> Option<Instant> {
    if timeout_hint == u64::MAX {
        return None;
    }
    let nanos =
        (timeout_hint as u128 * 1_000_000_000 / TICKS_PER_SECOND as u128).min(u64::MAX as u128);
    Instant::now().checked_add(Duration::from_nanos(nanos as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_end_on_the_condition_or_the_deadline() {
        let s = Arc::new(SignalObj::new(1, false));
        let t = Instant::now();
        let lt1 = condition(sys::SIGNAL_CONDITION_LT, 1).unwrap();
        assert_eq!(
            s.wait_until(&lt1, deadline(TICKS_PER_SECOND / 20), || false),
            1
        );
        assert!(t.elapsed() >= Duration::from_millis(40));
        let other = s.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            other.add(-1);
        });
        assert_eq!(s.wait_until(&lt1, None, || false), 0);
        h.join().unwrap();
        assert!(condition(7, 0).is_none());
    }
}
