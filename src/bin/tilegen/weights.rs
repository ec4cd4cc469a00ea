//! `tilegen preshuffle` / `tilegen unshuffle`: thin wrappers over `tilegen::mx::weights`.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use tilegen::mx::weights::{self, Plan, PreshuffleOptions, Summary};

/// Arguments of `tilegen preshuffle`.
#[derive(Args)]
pub struct PreshuffleArgs {
    /// Input safetensors file.
    input: PathBuf,
    /// Output safetensors file (written atomically; never the input).
    #[arg(short, long)]
    output: PathBuf,
    /// Pad K to a multiple of 256 with zero blocks and scales (on by default).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pad_k: bool,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
}

/// Arguments of `tilegen unshuffle`.
#[derive(Args)]
pub struct UnshuffleArgs {
    /// Preshuffled safetensors file.
    input: PathBuf,
    /// Output safetensors file (written atomically; never the input).
    #[arg(short, long)]
    output: PathBuf,
    /// Print a JSON summary instead of text.
    #[arg(long)]
    json: bool,
}

pub fn preshuffle(args: PreshuffleArgs) -> Result<()> {
    let start = Instant::now();
    let options = PreshuffleOptions { pad_k: args.pad_k };
    let context = || format!("preshuffling {}", args.input.display());
    // Every check runs before the progress bar appears and the first byte is written.
    let plan = Plan::preshuffle(&args.input, &args.output, options).with_context(context)?;
    let summary = write(plan, args.json).with_context(context)?;
    report(
        "preshuffled",
        &args.input,
        &args.output,
        &summary,
        start,
        args.json,
    )
}

pub fn unshuffle(args: UnshuffleArgs) -> Result<()> {
    let start = Instant::now();
    let context = || format!("unshuffling {}", args.input.display());
    let plan = Plan::unshuffle(&args.input, &args.output).with_context(context)?;
    let summary = write(plan, args.json).with_context(context)?;
    report(
        "unshuffled",
        &args.input,
        &args.output,
        &summary,
        start,
        args.json,
    )
}

/// Runs a checked plan behind a progress bar of its output bytes (none with `--json`).
fn write(plan: Plan, quiet: bool) -> Result<Summary, weights::WeightsError> {
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        let bar = ProgressBar::new(plan.bytes_out());
        bar.set_style(
            ProgressStyle::with_template(
                "{bar:40} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            )
            .expect("static template is valid"),
        );
        bar
    };
    let summary = plan.write(&|n| bar.set_position(n));
    bar.finish_and_clear();
    summary
}

fn report(
    verb: &str,
    input: &Path,
    output: &Path,
    s: &Summary,
    start: Instant,
    json: bool,
) -> Result<()> {
    let seconds = start.elapsed().as_secs_f64();
    if json {
        let value = serde_json::json!({
            "input": input,
            "output": output,
            "operation": verb,
            "pairs": s.pairs,
            "copied": s.copied,
            "bytes_in": s.bytes_in,
            "bytes_out": s.bytes_out,
            "seconds": seconds,
        });
        println!("{}", serde_json::to_string_pretty(&value)?);
        return Ok(());
    }
    println!("{verb} {} -> {}", input.display(), output.display());
    for p in &s.pairs {
        let pad = if p.k_padded != p.k {
            format!(" (K padded to {})", p.k_padded)
        } else {
            String::new()
        };
        println!(
            "  {}: {} expert(s) x N={} x K={}{pad}",
            p.stem, p.experts, p.n, p.k
        );
    }
    println!(
        "  {} pair(s), {} tensor(s) copied, {:.1} MB in, {:.1} MB out, {:.2} s",
        s.pairs.len(),
        s.copied.len(),
        s.bytes_in as f64 / 1e6,
        s.bytes_out as f64 / 1e6,
        seconds
    );
    Ok(())
}
