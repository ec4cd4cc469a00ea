//! tilegen's best tuned GEMM against AMD AITER's hand-written gfx950 kernels, on the MI355X
//! timing model, in the same run: `cargo bench --bench vs_aiter [-- OPTIONS]`.
//!
//! For every shape of `templates/reference.toml` (DeepSeek-V3's and gpt-oss-120b's expert
//! projections at M in {1, 16, 64, 256, 2048, 8192}):
//! * tilegen: the template's spec space is tuned by the model (a resumable sweep into a
//!   database keyed by the model's parameters), and the best few specs of the database are
//!   modeled again in this run; the fastest is the row's time.
//! * AITER: the asm kernel AITER's own MI355X table picks for the shape, with its split-K; where
//!   the table has no asm row for the shape (it picks a CK kernel we cannot run, or lacks the
//!   shape), the fastest of AITER's preshuffled-B asm kernels on the model (every kernel whose
//!   tile height does not exceed the shortest one covering M, and split-K 2, 4, 8 where the
//!   kernel supports it and the tiles alone do not fill the GPU).
//!
//! Prints the table with the ratio AITER time / tilegen time (above 1: tilegen is faster), the
//! geometric means over all shapes and over M <= 16, and the lowest ratio; writes it as
//! Markdown, CSV and JSON. With `--traces`, writes Perfetto traces of both kernels for every
//! shape tilegen loses. Run without `--bench` (as `cargo test --all-targets` does), it is a smoke
//! test: one shape, the default spec, a temporary database.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use rayon::prelude::*;
use serde::Serialize;
use tilegen::kernels::KernelSpec;
use tilegen::runtime::DeviceChoice;
use tilegen_aiter::calibrate::TimingModel;
use tilegen_aiter::{Corpus, F4GemmKernel, GemmProblem};
use tilegen_output::Output;
use tilegen_timing::{Params, Prediction, TimingOptions, TraceOptions};
use tilegen_tune::db::{Db, DeviceName, Status};
use tilegen_tune::eval::{By, ModelEvaluator, compile};
use tilegen_tune::sweep::{self, Plan, Quiet, SweepOptions, Target};
use tilegen_tune::template::{Shape, Template};
use tilegen_tune::worker::{EvalSettings, Evaluator, InProcess, Runner};

mod common;

use common::BoxError;

const USAGE: &str = "usage: cargo bench --bench vs_aiter -- [--out DIR] [--db FILE] [--m LIST] [--shape M,N,K]... [--recheck N] [--traces]\n  \
  --out DIR    where vs-aiter.md/.csv/.json (and traces) go (default target/vs-aiter)\n  \
  --db FILE    the tuning database (default target/tune/vs-aiter-<params hash>.sqlite)\n  \
  --m LIST     only these M values (comma separated)\n  \
  --shape M,N,K  these shapes instead of the reference set (the reference space is searched)\n  \
  --recheck N  model the best N specs of the database again in this run (default 3)\n  \
  --traces     write Perfetto traces of both kernels for every shape tilegen loses";

/// Cycles of one CU the traces cover.
const TRACE_CYCLES: u64 = 60_000;

struct Args {
    out: PathBuf,
    db: Option<PathBuf>,
    only_m: Option<Vec<u32>>,
    shapes: Vec<Shape>,
    recheck: usize,
    traces: bool,
    /// `cargo test --all-targets` runs benches without `--bench`: one shape, the default spec
    /// only, into a temporary database, as a smoke test of the whole comparison.
    smoke: bool,
}

fn parse() -> Result<Option<Args>, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut a = Args {
        out: root.join("target/vs-aiter"),
        db: None,
        only_m: None,
        shapes: Vec::new(),
        recheck: 3,
        traces: false,
        smoke: !std::env::args().any(|a| a == "--bench"),
    };
    // Under `cargo test` the arguments are the test harness's (filters, --quiet, ...): the
    // smoke run takes none of them.
    if a.smoke {
        return Ok(Some(a));
    }
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |f: &str| it.next().ok_or_else(|| format!("{f} needs a value"));
        match arg.as_str() {
            // cargo bench passes --bench to harness=false targets.
            "--bench" => {}
            "--out" => a.out = value("--out")?.into(),
            "--db" => a.db = Some(value("--db")?.into()),
            "--m" => {
                let v = value("--m")?;
                let ms = v
                    .split(',')
                    .map(|x| {
                        x.trim()
                            .parse::<u32>()
                            .map_err(|_| format!("--m {v}: `{x}` is not a number"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                a.only_m = Some(ms);
            }
            "--shape" => {
                let v = value("--shape")?;
                let d = v
                    .split(',')
                    .map(|x| x.trim().parse::<u32>().ok().filter(|&d| d > 0))
                    .collect::<Option<Vec<_>>>();
                let Some(&[m, n, k]) = d.as_deref() else {
                    return Err(format!("--shape {v}: expected M,N,K (positive)"));
                };
                a.shapes.push(Shape { m, n, k });
            }
            "--recheck" => {
                let v = value("--recheck")?;
                a.recheck = v
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| format!("--recheck {v}: a positive count"))?;
            }
            "--traces" => a.traces = true,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    common::main("vs_aiter", USAGE, parse, run)
}

/// tilegen's side of one shape.
#[derive(Debug, Clone, Serialize)]
struct Ours {
    spec: String,
    kernel: String,
    us: f64,
    bound: String,
    mfma_busy: f64,
    hbm_gbs: f64,
    /// The spec values, to rebuild the kernel.
    #[serde(skip)]
    values: KernelSpec,
}

/// AITER's side of one shape.
#[derive(Debug, Clone, Serialize)]
struct Theirs {
    kernel: String,
    log2_k_split: u32,
    /// `table` (AITER's pick) or `best on the model`.
    chosen_by: &'static str,
    us: f64,
    bound: String,
    mfma_busy: f64,
    hbm_gbs: f64,
    /// What AITER's table measured for the shape on MI355X, and with which kernel, if it has
    /// the shape.
    table_us: Option<f64>,
    table_kernel: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
struct Line {
    m: u32,
    n: u32,
    k: u32,
    ours: Ours,
    aiter: Theirs,
    /// AITER time / tilegen time.
    ratio: f64,
}

fn run(args: &Args) -> Result<(), BoxError> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let template = Template::load(root.join("templates/reference.toml"))?;
    let mut plan = Plan::from_template(&template);
    let smoke_dir = if args.smoke {
        let shape = Shape {
            m: 1,
            n: 3072,
            k: 3072,
        };
        plan = Plan::new("smoke", &plan.space, vec![shape]);
        plan.specs.truncate(1);
        Some(tempfile::tempdir()?)
    } else {
        None
    };
    if !args.shapes.is_empty() {
        plan = Plan::new("shapes", &plan.space, args.shapes.clone());
    }
    if let Some(ms) = &args.only_m {
        let shapes: Vec<Shape> = plan
            .shapes
            .iter()
            .copied()
            .filter(|s| ms.contains(&s.m))
            .collect();
        plan = Plan::new(&template.name, &plan.space, shapes);
    }
    let params = Params::mi355x();
    let corpus = Corpus::open_default()?;
    let table: Vec<_> = corpus
        .tuned_table()?
        .into_iter()
        // AITER's table rows of this GPU.
        .filter(|r| r.cu_num() == tilegen_arch::COMPUTE_UNITS)
        .collect();

    // tilegen: tune the space by the model (resumable).
    let db_path = match (&args.db, &smoke_dir) {
        (_, Some(d)) => d.path().join("smoke.sqlite"),
        (Some(p), None) => p.clone(),
        (None, None) => root.join(format!(
            "target/tune/vs-aiter-{}.sqlite",
            &tilegen_tune::pack::sha256_hex(Params::DEFAULT_TOML.as_bytes())[..12]
        )),
    };
    if let Some(dir) = db_path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut db = Db::open(&db_path)?;
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get());
    let runners: Vec<Box<dyn Runner>> = (0..jobs)
        .map(|_| -> Box<dyn Runner> {
            Box::new(InProcess(Evaluator::new(Box::new(|_: DeviceChoice| {
                Err("the comparison ranks by the model only".to_string())
            }))))
        })
        .collect();
    let cus = tilegen_arch::COMPUTE_UNITS;
    let opts = SweepOptions {
        eval: EvalSettings {
            by: By::Model,
            ..EvalSettings::default()
        },
        target: Target {
            gfx: tilegen_arch::PROCESSOR.into(),
            cus,
            device: DeviceName::TimingModel,
        },
        shard: Default::default(),
        budget_per_shape: None,
        cancel: Arc::new(AtomicBool::new(false)),
    };
    eprintln!(
        "tuning {} shapes over {} specs by the model into {}",
        plan.shapes.len(),
        plan.specs.len(),
        db_path.display()
    );
    let summary = sweep::run(&plan, &mut db, runners, &opts, &Quiet)?;
    eprintln!(
        "  {} evaluated now, {} already in the database, {} failed ({:.0} s)",
        summary.evaluated, summary.skipped, summary.failed, summary.elapsed_seconds
    );
    let rows = db.results()?;

    // Every K step simulated on both sides, as AITER's kernels are below.
    let model = ModelEvaluator {
        params: params.clone(),
        options: TimingOptions::default(),
        extrapolation: None,
    };
    let aiter = TimingModel::new(params.clone()).extrapolating(None);
    let bpre: Vec<F4GemmKernel> = corpus.bpreshuffle_kernels().cloned().collect();

    let lines: Vec<Result<Line, String>> = plan
        .shapes
        .par_iter()
        .map(|shape| {
            let ours = ours(&rows, shape, &model, args.recheck, &opts.target)?;
            let theirs = theirs(&table, &corpus, &bpre, shape, &aiter, cus)?;
            Ok(Line {
                m: shape.m,
                n: shape.n,
                k: shape.k,
                ratio: theirs.us / ours.us,
                ours,
                aiter: theirs,
            })
        })
        .collect();
    let mut good = Vec::new();
    for (shape, l) in plan.shapes.iter().zip(lines) {
        match l {
            Ok(l) => good.push(l),
            Err(e) => return Err(format!("{}x{}x{}: {e}", shape.m, shape.n, shape.k).into()),
        }
    }
    let report = markdown(&good, &params);
    print!("{report}");
    if let Some(d) = &smoke_dir {
        // The smoke run checks that both sides were modeled, and writes nothing that stays.
        for l in &good {
            if !(l.ours.us > 0.0 && l.aiter.us > 0.0 && l.ratio.is_finite()) {
                return Err(format!("smoke run: a side was not modeled: {l:?}").into());
            }
        }
        Output::check(d.path().join("vs-aiter.md"))?.write(report.as_bytes())?;
        return Ok(());
    }
    std::fs::create_dir_all(&args.out)?;
    Output::check(args.out.join("vs-aiter.md"))?.write(report.as_bytes())?;
    Output::check(args.out.join("vs-aiter.csv"))?.write(csv(&good).as_bytes())?;
    Output::check(args.out.join("vs-aiter.json"))?
        .write(serde_json::to_string_pretty(&good)?.as_bytes())?;
    eprintln!("wrote {}/vs-aiter.{{md,csv,json}}", args.out.display());
    if args.traces {
        for l in good.iter().filter(|l| l.ratio < 1.0) {
            traces(l, &args.out, &params, &corpus)?;
        }
    }
    Ok(())
}

fn bound(p: &Prediction) -> String {
    serde_json::to_value(p.bound)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// The best of the database's best `recheck` specs for `shape`, modeled again now.
fn ours(
    rows: &[tilegen_tune::db::Row],
    shape: &Shape,
    model: &ModelEvaluator,
    recheck: usize,
    target: &Target,
) -> Result<Ours, String> {
    let mut cands: Vec<_> = rows
        .iter()
        .filter(|r| {
            r.status == Status::Ok
                && r.source == By::Model
                && r.gfx == target.gfx
                && r.cus == target.cus
                && r.shape() == *shape
        })
        .filter_map(|r| r.us.map(|us| (us, r)))
        .collect();
    cands.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut best: Option<Ours> = None;
    for (_, r) in cands.into_iter().take(recheck) {
        let spec = KernelSpec::try_from(r.spec.clone())
            .map_err(|e| format!("the stored spec of {}: {e}", r.cache_key))?;
        let kernel = compile(&spec).map_err(|e| format!("compiling {}: {e}", r.cache_key))?;
        let p = model
            .predict(&kernel, shape)
            .map_err(|e| format!("modeling {}: {e}", r.cache_key))?;
        if best.as_ref().is_none_or(|b| p.us < b.us) {
            best = Some(Ours {
                spec: r.cache_key.clone(),
                kernel: r.kernel.clone(),
                us: p.us,
                bound: bound(&p),
                mfma_busy: p.mfma_busy,
                hbm_gbs: p.hbm_gbs,
                values: spec,
            });
        }
    }
    best.ok_or_else(|| "no tilegen spec ran on this shape (see the sweep's failures)".to_string())
}

/// AITER's kernel for `shape`: the table's asm pick, or the fastest candidate on the model.
fn theirs(
    table: &[tilegen_aiter::TableRow],
    corpus: &Corpus,
    bpre: &[F4GemmKernel],
    shape: &Shape,
    model: &TimingModel,
    cus: u32,
) -> Result<Theirs, String> {
    let row = table
        .iter()
        .find(|r| r.m() == shape.m && r.n() == shape.n && r.k() == shape.k);
    let table_us = row.map(|r| r.us());
    let table_kernel = row.map(|r| r.kernel_name().to_string());
    let run = |kernel: &F4GemmKernel, log2: u32| -> Result<Prediction, String> {
        let problem = GemmProblem::new(shape.m, shape.n, shape.k)
            .and_then(|p| p.with_log2_k_split(log2))
            .map_err(|e| e.to_string())?;
        model
            .run_problem(problem, kernel)
            .map(|(p, _)| p)
            .map_err(|e| format!("{} split 2^{log2}: {e}", kernel.tile_label()))
    };
    let make = |kernel: &F4GemmKernel, log2, chosen_by, p: &Prediction| Theirs {
        kernel: kernel.tile_label(),
        log2_k_split: log2,
        chosen_by,
        us: p.us,
        bound: bound(p),
        mfma_busy: p.mfma_busy,
        hbm_gbs: p.hbm_gbs,
        table_us,
        table_kernel: table_kernel.clone(),
    };
    if let Some(r) = row.filter(|r| r.uses_asm_kernel())
        && let Some(kernel) = corpus.kernel_by_symbol(r.kernel_name())
    {
        let p = run(kernel, r.log2_k_split())?;
        return Ok(make(kernel, r.log2_k_split(), "table", &p));
    }
    // The shortest tile covering M; taller tiles compute padding only.
    let cover = bpre
        .iter()
        .map(F4GemmKernel::tile_m)
        .filter(|&t| t >= shape.m)
        .min();
    let mut cands = Vec::new();
    for k in bpre {
        if cover.is_some_and(|c| k.tile_m() > c) {
            continue;
        }
        cands.push((k, 0));
        let tiles = shape.m.div_ceil(k.tile_m()) * shape.n.div_ceil(k.tile_n());
        if k.supports_split_k() && tiles < cus {
            cands.extend((1..=3).map(|s| (k, s)));
        }
    }
    let mut best: Option<(&F4GemmKernel, u32, Prediction)> = None;
    for (k, s) in cands {
        // A split the problem refuses (K too short for it) is not a candidate; a candidate
        // the model fails on is an error.
        let fits = GemmProblem::new(shape.m, shape.n, shape.k)
            .and_then(|p| p.with_log2_k_split(s))
            .is_ok();
        if !fits {
            continue;
        }
        let p = run(k, s)?;
        if best.as_ref().is_none_or(|b| p.us < b.2.us) {
            best = Some((k, s, p));
        }
    }
    let (k, s, p) = best.ok_or("no AITER kernel runs this shape")?;
    Ok(make(k, s, "best on the model", &p))
}

fn geomean(xs: impl Iterator<Item = f64>) -> f64 {
    let (sum, n) = xs.fold((0.0, 0u32), |(s, n), x| (s + x.ln(), n + 1));
    if n == 0 {
        f64::NAN
    } else {
        (sum / n as f64).exp()
    }
}

fn markdown(lines: &[Line], params: &Params) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let band = tilegen::timing::HELD_OUT_ERROR;
    let _ = writeln!(
        s,
        "tilegen vs AITER on the MI355X timing model (clock {:.3} GHz under MFMA load, HBM {:.0} GB/s); ratio = AITER us / tilegen us, each ratio within the model's held-out error {} marked `tie`\n",
        params.clock.mfma_sustained_ghz.get(),
        params.vmem.hbm_gbs.get(),
        band.label()
    );
    let _ = writeln!(
        s,
        "| M | N | K | tilegen us | bound, MFMA busy | AITER kernel | chosen by | AITER us | bound, MFMA busy | table us (kernel) | ratio |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|---|---|");
    for l in lines {
        let table = match (&l.aiter.table_us, &l.aiter.table_kernel) {
            (Some(us), Some(k)) => format!("{us:.2} ({})", short_kernel(k)),
            _ => "-".into(),
        };
        let _ = writeln!(
            s,
            "| {} | {} | {} | {:.2} | {}, {:.0}% | {} split 2^{} | {} | {:.2} | {}, {:.0}% | {} | {:.2} ±{:.2}{} |",
            l.m,
            l.n,
            l.k,
            l.ours.us,
            l.ours.bound,
            100.0 * l.ours.mfma_busy,
            l.aiter.kernel,
            l.aiter.log2_k_split,
            l.aiter.chosen_by,
            l.aiter.us,
            l.aiter.bound,
            100.0 * l.aiter.mfma_busy,
            table,
            l.ratio,
            l.ratio * band.median,
            if band.ties(1.0, l.ratio) { " tie" } else { "" }
        );
    }
    let all = geomean(lines.iter().map(|l| l.ratio));
    let small = geomean(lines.iter().filter(|l| l.m <= 16).map(|l| l.ratio));
    let min = lines
        .iter()
        .min_by(|a, b| a.ratio.total_cmp(&b.ratio))
        .map(|l| format!("{:.2} at {}x{}x{}", l.ratio, l.m, l.n, l.k))
        .unwrap_or_default();
    let _ = writeln!(
        s,
        "\ngeometric-mean ratio: {all:.3} over {} shapes (goal >= 1.0), {small:.3} over M <= 16 (goal >= 1.2); lowest {min} (goal >= 0.8); the model's held-out error {} over {} rows: {} of the shapes are ties within it",
        lines.len(),
        band.label(),
        band.rows,
        lines.iter().filter(|l| band.ties(1.0, l.ratio)).count()
    );
    let _ = writeln!(s, "\ntilegen's specs:");
    for l in lines {
        let _ = writeln!(
            s,
            "  {}x{}x{}: {} ({})",
            l.m, l.n, l.k, l.ours.kernel, l.ours.spec
        );
    }
    s
}

/// A CK kernel name is long; its tile prefix says enough.
fn short_kernel(k: &str) -> String {
    if k.chars().count() > 40 {
        format!("{}...", k.chars().take(40).collect::<String>())
    } else {
        k.to_string()
    }
}

fn csv(lines: &[Line]) -> String {
    let mut s = String::from(
        "m,n,k,tilegen_us,tilegen_spec,tilegen_bound,tilegen_mfma_busy,aiter_kernel,aiter_log2_k_split,aiter_chosen_by,aiter_us,aiter_bound,aiter_mfma_busy,table_us,table_kernel,ratio\n",
    );
    for l in lines {
        s.push_str(&format!(
            "{},{},{},{:.3},\"{}\",{},{:.4},{},{},{},{:.3},{},{:.4},{},{},{:.4}\n",
            l.m,
            l.n,
            l.k,
            l.ours.us,
            l.ours.spec,
            l.ours.bound,
            l.ours.mfma_busy,
            l.aiter.kernel,
            l.aiter.log2_k_split,
            l.aiter.chosen_by,
            l.aiter.us,
            l.aiter.bound,
            l.aiter.mfma_busy,
            l.aiter
                .table_us
                .map(|u| format!("{u:.3}"))
                .unwrap_or_default(),
            l.aiter.table_kernel.clone().unwrap_or_default(),
            l.ratio
        ));
    }
    s
}

/// Perfetto traces of both kernels of `l`, for reading why tilegen loses.
fn traces(l: &Line, out: &Path, params: &Params, corpus: &Corpus) -> Result<(), BoxError> {
    let shape = Shape {
        m: l.m,
        n: l.n,
        k: l.k,
    };
    let options = TimingOptions {
        trace: Some(TraceOptions {
            cycles: TRACE_CYCLES,
        }),
        ..TimingOptions::default()
    };
    let model = ModelEvaluator {
        params: params.clone(),
        options: options.clone(),
        extrapolation: None,
    };
    let kernel = compile(&l.ours.values)?;
    let p = model.predict(&kernel, &shape)?;
    let stem = format!("{}x{}x{}", l.m, l.n, l.k);
    if let Some(t) = &p.trace {
        let mut buf = Vec::new();
        tilegen_timing::write_trace(t, &mut buf)?;
        Output::check(out.join(format!("{stem}-tilegen.json")))?.write(&buf)?;
    }
    let aiter = TimingModel::with_options(params.clone(), options).extrapolating(None);
    let kernel = corpus
        .bpreshuffle_kernels()
        .find(|k| k.tile_label() == l.aiter.kernel)
        .ok_or("the AITER kernel vanished from the corpus")?;
    let problem = GemmProblem::new(l.m, l.n, l.k)?.with_log2_k_split(l.aiter.log2_k_split)?;
    let (p, _) = aiter.run_problem(problem, kernel)?;
    if let Some(t) = &p.trace {
        let mut buf = Vec::new();
        tilegen_timing::write_trace(t, &mut buf)?;
        Output::check(out.join(format!("{stem}-aiter.json")))?.write(&buf)?;
    }
    eprintln!("wrote {stem}-tilegen.json and {stem}-aiter.json (open in ui.perfetto.dev)");
    Ok(())
}
