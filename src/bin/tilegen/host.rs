//! The host's memory, for commands that refuse a problem before allocating it.

use anyhow::{Context, Result, bail};

/// Fails with the sizes when `need` bytes (what they hold: `what`) exceed the memory the kernel
/// reports available.
pub fn ensure_memory(need: u128, what: &str) -> Result<()> {
    let available = available_memory()?;
    if need > u128::from(available) {
        bail!(
            "the problem needs about {:.1} GB of host memory ({what}) but {:.1} GB are available",
            need as f64 / 1e9,
            available as f64 / 1e9
        );
    }
    Ok(())
}

/// Memory the kernel reports available (`MemAvailable` of /proc/meminfo).
fn available_memory() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    text.lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().strip_suffix("kB"))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(|kb| kb.saturating_mul(1024))
        .context("/proc/meminfo has no MemAvailable line")
}
