//! `tilegen pack`: build, verify and inspect kernel packs.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use tilegen_tune::pack::{self, BuildOptions, Pack, PackError};
use tilegen_tune::{Db, Template};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct PackArgs {
    #[command(subcommand)]
    command: Option<PackCommand>,
    #[command(flatten)]
    build: BuildArgs,
}

#[derive(Subcommand)]
enum PackCommand {
    /// Check a pack's format, versions and checksums.
    Verify(DirArgs),
    /// Print what a pack holds.
    Inspect(DirArgs),
}

#[derive(Args)]
struct DirArgs {
    /// The pack directory.
    dir: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct BuildArgs {
    /// The template whose shapes the pack serves.
    #[arg(required = true)]
    template: Option<PathBuf>,
    /// The tuning database the best specs come from.
    #[arg(long, required = true)]
    db: Option<PathBuf>,
    /// The pack directory (written to a new directory and swapped into place; a symlink is
    /// written through). An existing pack is replaced only if it holds nothing but its own files.
    #[arg(short, long, required = true)]
    output: Option<PathBuf>,
    /// Refuse a shape without a tuning result instead of serving it with the default spec.
    #[arg(long)]
    require_tuned: bool,
    /// The compile cache (default: $TILEGEN_CACHE_DIR, else ~/.cache/tilegen/kernels).
    #[arg(long)]
    cache: Option<PathBuf>,
    /// Compile everything, reading and writing no cache.
    #[arg(long, conflicts_with = "cache")]
    no_cache: bool,
    /// Parallel compiles (default: the CPUs available).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

pub fn run(args: PackArgs) -> Result<()> {
    match args.command {
        Some(PackCommand::Verify(a)) => verify(a),
        Some(PackCommand::Inspect(a)) => inspect(a),
        None => build(args.build),
    }
}

fn build(a: BuildArgs) -> Result<()> {
    let (Some(template), Some(db), Some(output)) = (a.template, a.db, a.output) else {
        anyhow::bail!("give TEMPLATE, --db and -o");
    };
    let t = Template::load(&template)?;
    let db = Db::open_read_only(&db)?;
    let opts = BuildOptions {
        require_tuned: a.require_tuned,
        cache_dir: if a.no_cache {
            None
        } else {
            a.cache.or_else(pack::default_cache_dir)
        },
        jobs: a
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            .max(1),
        cancel: tilegen_output::interrupt_flag(),
    };
    let r = match pack::build(&t, &db, &output, &opts) {
        Err(PackError::Interrupted) => {
            return Err(anyhow::Error::new(tilegen_output::OutputError::Interrupted)
                .context("building the pack"));
        }
        r => r.with_context(|| format!("building the pack {}", output.display()))?,
    };
    // Warnings go to stderr whatever the format, so a JSON reader still gets one document.
    for d in &r.discarded {
        eprintln!(
            "warning: compile cache: {} was not used ({}); {}, and its kernel compiled again",
            d.path.display(),
            d.reason,
            if d.removed {
                "removed"
            } else {
                "left in place"
            }
        );
    }
    if let Some(kept) = &r.old_pack_kept {
        eprintln!(
            "warning: the pack this one replaced is kept at {}: something its manifest does not list appeared in it during the build",
            kept.display()
        );
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&r)?);
    } else {
        println!(
            "pack {}: {} kernels serving {} shapes of {} ({} untuned: default spec); {} compiled, {} from the cache ({} cache entries discarded), {:.2} s",
            output.display(),
            r.kernels,
            r.shapes,
            t.name,
            r.untuned,
            r.compiled,
            r.cache_hits,
            r.cache_discarded,
            r.seconds
        );
    }
    Ok(())
}

fn verify(a: DirArgs) -> Result<()> {
    let m = pack::verify(&a.dir)?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "ok": true, "dir": a.dir, "format": m.format, "tilegen_version": m.tilegen_version,
                "llvm_version": m.llvm_version, "target": m.target, "kernels": m.kernels.len(),
            }))?
        );
    } else {
        println!(
            "{}: ok (format {}, tilegen {}, LLVM {}, {}, {} kernels, every checksum matches)",
            a.dir.display(),
            m.format,
            m.tilegen_version,
            m.llvm_version,
            m.target,
            m.kernels.len()
        );
    }
    Ok(())
}

fn inspect(a: DirArgs) -> Result<()> {
    let p = Pack::open(&a.dir)?;
    let m = p.manifest();
    if a.json {
        println!("{}", serde_json::to_string_pretty(m)?);
        return Ok(());
    }
    println!(
        "pack {} of {}: format {}, tilegen {}, LLVM {}, target {}",
        a.dir.display(),
        m.template,
        m.format,
        m.tilegen_version,
        m.llvm_version,
        m.target
    );
    for k in &m.kernels {
        println!(
            "  {} ({} bytes, sha256 {}...)",
            k.name,
            k.bytes,
            &k.sha256[..16.min(k.sha256.len())]
        );
        let mut by_nk: std::collections::BTreeMap<(u32, u32), Vec<String>> = Default::default();
        for s in &k.shapes {
            let tag = match &s.result {
                Some(r) => format!(
                    "{} ({:.1} us {}, {:.0} TFLOP/s)",
                    s.m, r.us, r.source, r.tflops
                ),
                None => format!("{} (untuned)", s.m),
            };
            by_nk.entry((s.n, s.k)).or_default().push(tag);
        }
        for ((n, kk), ms) in by_nk {
            println!("    N={n} K={kk}: M {}", ms.join(", "));
        }
    }
    Ok(())
}

/// The kernel `tilegen gemm --pack DIR` runs: the pack is verified, then serves `m x n x k`.
pub fn gemm_kernel(
    dir: &std::path::Path,
    flags: &crate::spec::SpecArgs,
    m: usize,
    n: usize,
    k: usize,
) -> Result<tilegen::CompiledKernel> {
    if flags.spec().ok() != Some(tilegen::KernelSpec::preb().into()) {
        anyhow::bail!("--pack chooses the kernel: spec flags cannot be combined with it");
    }
    let small = |v: usize, what: &str| {
        u32::try_from(v).with_context(|| format!("{what} = {v} is beyond what a pack serves"))
    };
    let pack = Pack::open(dir)?;
    let pk = pack.kernel_for(small(m, "M")?, small(n, "N")?, small(k, "K")?)?;
    eprintln!(
        "pack: {} serves {m}x{n}x{k} with {} (M bucket {}, {})",
        dir.display(),
        pk.name,
        pk.m_bucket,
        if pk.tuned {
            "tuned"
        } else {
            "untuned: default spec"
        }
    );
    pk.compiled()
        .with_context(|| format!("reading {} from the pack", pk.name))
}
