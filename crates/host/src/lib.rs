//! What the host machine allows, in one place: the memory a process may use, and sizes checked
//! before anything is allocated.
//!
//! Every size tilegen derives from user input (a launch, a problem shape, a parameter file, a
//! shard count) goes through [`product`] in 64-bit checked arithmetic and is compared with
//! [`memory_budget`] (or [`available_memory`]) by [`ensure_fits`] *before* the memory is asked
//! for; [`try_vec`] then allocates fallibly, so a host that still refuses ends in a
//! [`SizeError`] rather than an abort.

#![deny(missing_docs)]

/// Memory budget used when the machine's memory cannot be determined (not Linux): 4 GiB.
pub const FALLBACK_MEMORY_BUDGET: u64 = 4 << 30;

/// A size that overflows, exceeds what the host allows, or that the host refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SizeError {
    /// The size does not fit in 64 bits.
    #[error("the size of {what} overflows 64 bits")]
    Overflow {
        /// What was being sized.
        what: String,
    },
    /// More than the host allows.
    #[error(
        "{what} needs {} of host memory, more than the {} {limit_name}",
        gb(*bytes),
        gb(u128::from(*limit))
    )]
    TooLarge {
        /// What the memory is for.
        what: String,
        /// Bytes needed.
        bytes: u128,
        /// The limit.
        limit: u64,
        /// Which limit (e.g. "available", "budget of this process").
        limit_name: &'static str,
    },
    /// The host refused an allocation that passed the checks.
    #[error("the host could not allocate {} for {what}", gb(u128::from(*bytes)))]
    Refused {
        /// What the memory is for.
        what: String,
        /// Bytes requested.
        bytes: u64,
    },
}

/// `bytes` for a message: exact below 10 kB, else in kB/MB/GB with the exact count.
fn gb(bytes: u128) -> String {
    let b = bytes as f64;
    match bytes {
        0..10_000 => format!("{bytes} bytes"),
        10_000..10_000_000 => format!("{:.1} kB ({bytes} bytes)", b / 1e3),
        10_000_000..10_000_000_000 => format!("{:.1} MB ({bytes} bytes)", b / 1e6),
        _ => format!("{:.1} GB ({bytes} bytes)", b / 1e9),
    }
}

/// The product of `factors` (element counts and sizes), or [`SizeError::Overflow`] naming
/// `what`.
pub fn product(what: &str, factors: &[u64]) -> Result<u64, SizeError> {
    if factors.contains(&0) {
        return Ok(0);
    }
    factors
        .iter()
        .try_fold(1u64, |acc, &f| acc.checked_mul(f))
        .ok_or_else(|| SizeError::Overflow {
            what: what.to_string(),
        })
}

/// Refuses `bytes` for `what` when they exceed the smaller of [`memory_budget`] and the memory
/// the kernel reports available right now.
pub fn ensure_fits(what: &str, bytes: u128) -> Result<(), SizeError> {
    let budget = memory_budget();
    let (limit, limit_name) = match available_memory() {
        Some(a) if a < budget => (a, "available on this machine"),
        _ => (budget, "this process may use"),
    };
    if bytes > u128::from(limit) {
        return Err(SizeError::TooLarge {
            what: what.to_string(),
            bytes,
            limit,
            limit_name,
        });
    }
    Ok(())
}

/// A vector of `n` copies of `value`, allocated fallibly after checking its size: an
/// overflowing size, one beyond the budget, or a refusal by the host is an error, not an abort.
pub fn try_vec<T: Clone>(what: &str, n: usize, value: T) -> Result<Vec<T>, SizeError> {
    let bytes = product(what, &[n as u64, std::mem::size_of::<T>() as u64])?;
    if bytes > memory_budget() {
        return Err(SizeError::TooLarge {
            what: what.to_string(),
            bytes: bytes.into(),
            limit: memory_budget(),
            limit_name: "this process may use",
        });
    }
    let mut v = Vec::new();
    v.try_reserve_exact(n).map_err(|_| SizeError::Refused {
        what: what.to_string(),
        bytes,
    })?;
    v.resize(n, value);
    Ok(v)
}

/// The memory one tilegen process may use: half of the smallest of the machine's physical
/// memory (`MemTotal` in `/proc/meminfo`), the cgroup's memory limit (`memory.max` of cgroup v2
/// or `memory.limit_in_bytes` of v1) and the process's address-space limit (`RLIMIT_AS`, as
/// `/proc/self/limits` shows it). Half, because the host side of the work (code, threads, the
/// caller's own copies of inputs and outputs) needs room too. [`FALLBACK_MEMORY_BUDGET`] when
/// none of these can be read (not Linux).
pub fn memory_budget() -> u64 {
    let mut avail: Option<u64> = None;
    let mut take = |v: Option<u64>| {
        if let Some(v) = v.filter(|&v| v > 0 && v < 1 << 60) {
            avail = Some(avail.map_or(v, |a| a.min(v)));
        }
    };
    let read = |p: &str| std::fs::read_to_string(p).ok();
    take(read("/proc/meminfo").and_then(|s| meminfo_field(&s, "MemTotal:")));
    take(read("/sys/fs/cgroup/memory.max").and_then(|s| s.trim().parse().ok()));
    take(read("/sys/fs/cgroup/memory/memory.limit_in_bytes").and_then(|s| s.trim().parse().ok()));
    take(read("/proc/self/limits").and_then(|s| address_space_limit(&s)));
    avail.map_or(FALLBACK_MEMORY_BUDGET, |a| a / 2)
}

/// The memory the kernel reports available now (`MemAvailable` of `/proc/meminfo`), when it
/// can be read.
pub fn available_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    meminfo_field(&text, "MemAvailable:")
}

/// A `kB` field of `/proc/meminfo`, in bytes.
fn meminfo_field(s: &str, field: &str) -> Option<u64> {
    let line = s.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The soft `Max address space` limit of `/proc/self/limits`, in bytes (`None` if unlimited).
fn address_space_limit(s: &str) -> Option<u64> {
    s.lines()
        .find_map(|l| l.strip_prefix("Max address space"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn proc_files_parse() {
        let meminfo = "MemTotal:       24683656 kB\nMemFree: 1 kB\nMemAvailable:   100 kB\n";
        assert_eq!(meminfo_field(meminfo, "MemTotal:"), Some(24683656 * 1024));
        assert_eq!(meminfo_field(meminfo, "MemAvailable:"), Some(100 * 1024));
        assert_eq!(meminfo_field("MemTotal: x kB", "MemTotal:"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max address space         4294967296           unlimited            bytes\n";
        assert_eq!(address_space_limit(limits), Some(4 << 30));
        let unlimited =
            "Max address space         unlimited            unlimited            bytes\n";
        assert_eq!(address_space_limit(unlimited), None);
        let m = memory_budget();
        assert!(m >= 1 << 20, "{m}");
    }

    #[test]
    fn huge_requests_are_refused_before_allocating() {
        let e = try_vec("a huge table", usize::MAX, 0u64).unwrap_err();
        assert!(matches!(e, SizeError::Overflow { .. }), "{e}");
        let e = try_vec("a big table", 1 << 50, 0u8).unwrap_err();
        assert!(matches!(e, SizeError::TooLarge { .. }), "{e}");
        assert!(e.to_string().contains("a big table needs"), "{e}");
        assert_eq!(try_vec("small", 3, 7u32).unwrap(), [7, 7, 7]);
        assert!(ensure_fits("everything", u128::MAX).is_err());
        assert!(ensure_fits("nothing", 0).is_ok());
    }

    proptest! {
        /// The checked product is the exact product when it fits, and an error otherwise.
        #[test]
        fn product_is_exact_or_refused(f in proptest::collection::vec(any::<u64>(), 0..5)) {
            let exact: Option<u128> = f.iter().try_fold(1u128, |a, &x| a.checked_mul(x.into()));
            match product("x", &f) {
                Ok(p) => prop_assert_eq!(Some(u128::from(p)), exact),
                Err(_) => prop_assert!(exact.is_none_or(|e| e > u128::from(u64::MAX))),
            }
        }
    }
}
