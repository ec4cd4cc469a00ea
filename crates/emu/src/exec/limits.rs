//! Resource limits of the emulator and the hooks that bound a launch from outside: how much
//! host memory it may use, how big a grid it accepts, how many instructions a wave may run,
//! and a cancellation flag with a progress counter.
//!
//! Every size the emulator derives from a code object or a launch (image extents from program
//! headers, kernarg and scratch sizes from the kernel descriptor, the grid) is computed with
//! checked arithmetic and compared with these limits *before* anything is allocated, so a
//! hostile or mistaken request ends in a [`LimitError`] instead of an out-of-memory abort or an
//! emulation that runs for hours.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Default per-wave instruction budget: 10^7 wave-instructions. The largest real kernels the
/// project runs execute a few thousand instructions per wave (a K = 7168 GEMM of ours about
/// 2,600, Triton's 256x256x1024 MXFP4 GEMMs up to about 5,200), so this leaves a factor of
/// about 2000. An endless loop reaches it quickly: a single wave spinning on `s_branch -1`
/// in about 0.15 s (the emulator runs 50-75 M such instructions per second), a 16-wave
/// workgroup (its waves interleave) in about 2.5 s; a loop of matrix instructions, which
/// emulate at a few M per second, in a few seconds per wave.
pub const DEFAULT_WAVE_INSTRUCTION_BUDGET: u64 = 10_000_000;

/// Default limit on the workgroups of one launch: 2^20 = 1,048,576. Real launches of that
/// size run for tens of minutes to hours on the emulator (a GEMM workgroup takes milliseconds),
/// so larger grids are refused unless the limit is raised explicitly.
pub const DEFAULT_MAX_WORKGROUPS: u64 = 1 << 20;

/// Default limit on the work-items of one launch: 2^28 = 268,435,456 (2^20 workgroups of 256).
pub const DEFAULT_MAX_WORK_ITEMS: u64 = 1 << 28;

/// Device memory limit used when the machine's memory cannot be determined: 4 GiB.
pub const FALLBACK_MAX_MEMORY: u64 = tilegen_host::FALLBACK_MEMORY_BUDGET;

/// Host bytes of one wave's register file (512 VGPR/AGPR slots of 64 lanes of 4 bytes).
pub const WAVE_REGISTER_BYTES: u64 =
    tilegen_arch::MAX_UNIFIED_VGPRS as u64 * tilegen_arch::WAVE_SIZE as u64 * 4;

/// A request beyond one of the emulator's limits, or a size that does not fit in 64 bits.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// More host memory than the device memory limit leaves.
    #[error(
        "{what} needs {requested} bytes, more than the {free} bytes left of the device memory limit of {limit} bytes ({in_use} in use; Limits::max_memory raises the limit)",
        free = limit.saturating_sub(*in_use)
    )]
    Memory {
        /// What the memory is for.
        what: String,
        /// Bytes requested.
        requested: u64,
        /// Bytes already in use.
        in_use: u64,
        /// The limit.
        limit: u64,
    },
    /// The host refused an allocation that was within the limit.
    #[error("the host could not allocate {requested} bytes for {what}")]
    HostMemory {
        /// What the memory is for.
        what: String,
        /// Bytes requested.
        requested: u64,
    },
    /// A size computed from a code object or launch overflows 64 bits.
    #[error("the size of {what} overflows 64 bits")]
    Overflow {
        /// What was being sized.
        what: String,
    },
    /// The grid has more workgroups than allowed.
    #[error(
        "a grid of {grid:?} is {workgroups} workgroups, over the limit of {limit} (Limits::max_workgroups raises it)"
    )]
    Workgroups {
        /// The grid.
        grid: [u32; 3],
        /// Workgroups requested.
        workgroups: u128,
        /// The limit.
        limit: u64,
    },
    /// The launch has more work-items than allowed.
    #[error(
        "a grid of {grid:?} workgroups of {block:?} is {work_items} work-items, over the limit of {limit} (Limits::max_work_items raises it)"
    )]
    WorkItems {
        /// The grid.
        grid: [u32; 3],
        /// The workgroup shape.
        block: [u32; 3],
        /// Work-items requested.
        work_items: u128,
        /// The limit.
        limit: u64,
    },
}

/// The emulator's resource limits. [`Limits::default`] documents each default.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Bytes of host memory the emulated device may use: every buffer, the code-object images
    /// and kernarg segments, plus the registers, scratch (private segments) and LDS of the waves
    /// a launch has in flight. Default: [`default_max_memory`], half of the memory available to
    /// the process.
    pub max_memory: u64,
    /// Workgroups per launch. Default [`DEFAULT_MAX_WORKGROUPS`].
    pub max_workgroups: u64,
    /// Work-items per launch. Default [`DEFAULT_MAX_WORK_ITEMS`].
    pub max_work_items: u64,
    /// Instructions one wave may execute before it is stopped with
    /// [`FaultKind::Budget`](super::FaultKind::Budget). Default
    /// [`DEFAULT_WAVE_INSTRUCTION_BUDGET`].
    pub wave_instruction_budget: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_memory: default_max_memory(),
            max_workgroups: DEFAULT_MAX_WORKGROUPS,
            max_work_items: DEFAULT_MAX_WORK_ITEMS,
            wave_instruction_budget: DEFAULT_WAVE_INSTRUCTION_BUDGET,
        }
    }
}

impl Limits {
    /// Checks a launch shape against the workgroup and work-item limits.
    pub fn check_grid(&self, grid: [u32; 3], block: [u32; 3]) -> Result<(), LimitError> {
        let workgroups: u128 = grid.iter().map(|&g| g as u128).product();
        if workgroups > self.max_workgroups as u128 {
            return Err(LimitError::Workgroups {
                grid,
                workgroups,
                limit: self.max_workgroups,
            });
        }
        let work_items = workgroups * block.iter().map(|&b| b as u128).product::<u128>();
        if work_items > self.max_work_items as u128 {
            return Err(LimitError::WorkItems {
                grid,
                block,
                work_items,
                limit: self.max_work_items,
            });
        }
        Ok(())
    }
}

/// The default device memory limit: the host's budget for one process
/// ([`tilegen_host::memory_budget`]: half of the smallest of physical memory, the cgroup's
/// limit and `RLIMIT_AS`), [`FALLBACK_MAX_MEMORY`] when none of these can be read.
pub fn default_max_memory() -> u64 {
    tilegen_host::memory_budget()
}

/// Shared hooks of a running launch: a cancellation flag the caller may raise from another
/// thread (a Ctrl-C handler), and counters of workgroups finished and launched, for progress
/// reports. Clones share the same state.
///
/// Workgroups check the flag when they start and every few thousand instructions, so a
/// cancelled launch stops within milliseconds with [`FaultKind::Cancelled`](super::FaultKind::Cancelled).
/// The flag stays raised (later launches stop at once) until [`LaunchControl::reset`].
#[derive(Clone, Debug, Default)]
pub struct LaunchControl {
    cancel: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
}

impl LaunchControl {
    /// Hooks with a cancellation flag of the caller's (for instance one a signal handler sets).
    pub fn with_cancel_flag(flag: Arc<AtomicBool>) -> LaunchControl {
        LaunchControl {
            cancel: flag,
            ..LaunchControl::default()
        }
    }

    /// Asks the running launch (and later ones) to stop.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::Relaxed);
    }

    /// Lowers the cancellation flag.
    pub fn reset(&self) {
        self.cancel.store(false, Ordering::Relaxed);
    }

    /// Whether cancellation was asked for.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed)
    }

    /// The cancellation flag itself (to hand to a signal handler).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// Workgroups finished and workgroups in the current (or last) launch.
    pub fn progress(&self) -> (u64, u64) {
        (
            self.done.load(Ordering::Relaxed),
            self.total.load(Ordering::Relaxed),
        )
    }

    pub(crate) fn start(&self, total: u64) {
        self.done.store(0, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
    }

    pub(crate) fn workgroup_done(&self) {
        self.done.fetch_add(1, Ordering::Relaxed);
    }
}

/// A vector of `n` copies of `value`, allocated fallibly: a size beyond the host's budget or
/// a refusal by the host is an error, not an abort.
pub(crate) fn try_filled<T: Clone>(n: usize, value: T, what: &str) -> Result<Vec<T>, LimitError> {
    tilegen_host::try_vec(what, n, value).map_err(|e| match e {
        tilegen_host::SizeError::Overflow { what } => LimitError::Overflow { what },
        _ => LimitError::HostMemory {
            what: what.to_string(),
            requested: (n as u64).saturating_mul(std::mem::size_of::<T>() as u64),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_limits_use_wide_arithmetic() {
        let l = Limits {
            max_workgroups: 100,
            max_work_items: 1000,
            ..Limits::default()
        };
        assert!(l.check_grid([10, 10, 1], [10, 1, 1]).is_ok());
        assert!(matches!(
            l.check_grid([u32::MAX; 3], [1024, 1, 1]),
            Err(LimitError::Workgroups { .. })
        ));
        let e = l.check_grid([10, 10, 1], [11, 1, 1]).unwrap_err();
        assert!(
            matches!(
                e,
                LimitError::WorkItems {
                    work_items: 1100,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn control_counts_and_cancels() {
        let c = LaunchControl::default();
        let shared = c.clone();
        c.start(7);
        c.workgroup_done();
        assert_eq!(shared.progress(), (1, 7));
        assert!(!shared.is_cancelled());
        shared.cancel();
        assert!(c.is_cancelled());
        c.reset();
        assert!(!shared.is_cancelled());
    }
}
