//! `tilegen tune`: autotuning sweeps into a tuning database, reports, merges, Slurm scripts.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tilegen::runtime::DeviceChoice;
use tilegen_output::{Output, OutputError};
use tilegen_tune::slurm::Submitted;
use tilegen_tune::sweep::{self, Observer};
use tilegen_tune::worker::{
    ChildRunner, EvalSettings, Evaluator, InProcess, Runner, WorkerCommand,
};
use tilegen_tune::{
    By, Db, DeviceName, Plan, Shape, Shard, SweepOptions, Target, Template, report, slurm,
};

#[derive(Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TuneArgs {
    #[command(subcommand)]
    command: Option<TuneCommand>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum TuneCommand {
    /// Write the best configuration per shape as a table (best.md, best.csv) and an SVG chart
    /// (tflops.svg) of TFLOP/s: best against the runner-up and the default spec.
    Report(ReportArgs),
    /// Combine shard databases into one (idempotent; keeps the best and the history).
    Merge(MergeArgs),
    /// Write an sbatch job array (one shard per task) and a merge job after it.
    Slurm(SlurmArgs),
    /// Write every result of a database as CSV (AITER's tuned-GEMM columns).
    Export(ExportArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum ByArg {
    /// The MI355X timing model (no GPU needed).
    Model,
    /// Timed launches on --device.
    Device,
}

#[derive(Args)]
struct RunArgs {
    /// The template (templates/*.toml): the model's shapes and the space to search. With
    /// --shape, its space is searched on those shapes instead.
    template: Option<PathBuf>,
    /// Shapes to tune, as M,N,K (repeatable); without a template the space of
    /// templates/gpt-oss-120b.toml is searched.
    #[arg(long, value_name = "M,N,K", num_args = 1..)]
    shape: Vec<String>,
    /// Rank by the timing model or by timed launches on a device.
    #[arg(long, value_enum, default_value_t = ByArg::Model)]
    by: ByArg,
    /// The device of --by device: auto (a gfx950 GPU through HSA if there is one, else the
    /// emulator), emu, or hsa[:N].
    #[arg(long, default_value = "auto", value_name = "auto|emu|hsa[:N]")]
    device: String,
    /// The tuning database (created when missing; sweeps sharing it split the work).
    #[arg(long, default_value = "tune.db")]
    db: PathBuf,
    /// Take the I-th of N deterministic slices of the work (0-based).
    #[arg(long, default_value = "0/1")]
    shard: Shard,
    /// Worker processes (default: the CPUs available).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Wall seconds of evaluation one shape may receive in this run.
    #[arg(long, value_name = "S")]
    budget_per_shape: Option<f64>,
    /// Kill a worker whose job (one spec on its shapes) takes longer, and record the failure.
    #[arg(long, value_name = "S", default_value_t = 1800.0)]
    timeout: f64,
    /// Timing model: simulate at most this many CUs of XCD 0 (faster, less L2 reuse).
    #[arg(long)]
    max_cus: Option<u32>,
    /// Timing model: parameter overrides (TOML).
    #[arg(long)]
    params: Option<PathBuf>,
    /// Device: untimed launches first.
    #[arg(long, default_value_t = 2)]
    warmup: u32,
    /// Device: timed launches (the median is recorded, with the spread).
    #[arg(long, default_value_t = 10)]
    repeats: u32,
    /// CUs of the device, recorded with each result (--by device).
    #[arg(long, default_value_t = 256)]
    cus: u32,
    /// Evaluate in this process instead of worker processes (no isolation from a crash).
    #[arg(long)]
    in_process: bool,
    /// Print the plan (specs enumerated and pruned, pairs, work left) and stop.
    #[arg(long)]
    plan: bool,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
    /// Serve jobs on stdin/stdout (what the sweep starts as its worker processes).
    #[arg(long, hide = true)]
    worker: bool,
}

#[derive(Args)]
struct ReportArgs {
    /// The tuning database.
    db: PathBuf,
    /// Output directory.
    #[arg(short, long)]
    output: PathBuf,
    /// Only this source's results.
    #[arg(long, value_enum)]
    source: Option<ByArg>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct MergeArgs {
    /// Databases to merge.
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// The merged database (created only when the merge succeeds, or merged into in one
    /// transaction when it exists).
    #[arg(short, long)]
    output: PathBuf,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ExportArgs {
    /// The tuning database.
    db: PathBuf,
    /// The CSV file.
    #[arg(short, long)]
    output: PathBuf,
}

#[derive(Args)]
struct SlurmArgs {
    /// The template.
    template: PathBuf,
    /// Array tasks (shards).
    #[arg(long)]
    shards: u32,
    /// Slurm partition.
    #[arg(long)]
    partition: Option<String>,
    /// Directory of the scripts, shard databases and logs (on a file system the nodes share).
    #[arg(short, long, default_value = "tune-slurm")]
    output: PathBuf,
    /// The merged database (default: OUTPUT/tune.db).
    #[arg(long)]
    db: Option<PathBuf>,
    /// CPUs per array task (the shard's --jobs).
    #[arg(long, default_value_t = 2)]
    cpus_per_task: u32,
    /// Time limit per task, minutes.
    #[arg(long, default_value_t = 240)]
    minutes: u32,
    /// Extra arguments for every shard's `tilegen tune` (e.g. `--max-cus=8`).
    #[arg(long, allow_hyphen_values = true)]
    tune_arg: Vec<String>,
    /// Submit with sbatch (the merge depends on the array).
    #[arg(long)]
    submit: bool,
    /// With --submit: wait until the merge job ends; fail when it failed.
    #[arg(long, requires = "submit")]
    wait: bool,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

pub fn run(args: TuneArgs) -> Result<()> {
    match args.command {
        Some(TuneCommand::Report(a)) => report_cmd(a),
        Some(TuneCommand::Merge(a)) => merge(a),
        Some(TuneCommand::Slurm(a)) => slurm_cmd(a),
        Some(TuneCommand::Export(a)) => export(a),
        None if args.run.worker => worker(),
        None => sweep_cmd(args.run),
    }
}

/// The devices `--by device` can use.
pub fn devices(
    choice: DeviceChoice,
) -> std::result::Result<Box<dyn tilegen::runtime::Device>, String> {
    let chosen = tilegen::runtime::choose(
        choice,
        tilegen::runtime::EmuConfig::default(),
        tilegen::runtime::HsaOptions::new(),
    )
    .map_err(|e| tilegen_tune::worker::chain(&e))?;
    Ok(Box::new(chosen.into_device()))
}

fn worker() -> Result<()> {
    // The parent decides when workers stop: a Ctrl-C at the terminal goes to the whole
    // process group, and a worker killed by it would look like a crash of its spec.
    // SAFETY: changing a signal disposition; the worker starts no threads that rely on it.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    tilegen_tune::worker::serve(stdin.lock(), stdout.lock(), Box::new(devices))
        .context("serving tuning jobs")
}

fn parse_shape(s: &str) -> Result<Shape> {
    let v: Vec<&str> = s.split(',').map(str::trim).collect();
    let [m, n, k] = v.as_slice() else {
        bail!("--shape {s}: expected M,N,K");
    };
    let p = |x: &str, what| -> Result<u32> {
        x.parse::<u32>().ok().filter(|&v| v > 0).with_context(|| {
            format!("--shape {s}: {what} = `{x}` must be a positive 32-bit integer")
        })
    };
    let shape = Shape {
        m: p(m, "M")?,
        n: p(n, "N")?,
        k: p(k, "K")?,
    };
    tilegen::kernels::check_problem(shape.m as usize, shape.n as usize, shape.k as usize, 4)
        .with_context(|| format!("--shape {s}"))?;
    Ok(shape)
}

/// The template whose space `--shape` searches without one.
const STANDARD: &str = include_str!("../../../templates/gpt-oss-120b.toml");

struct Bar(Option<ProgressBar>);

impl Observer for Bar {
    fn start(&self, total: u64, skipped: u64) {
        if let Some(b) = &self.0 {
            b.set_length(total);
            if skipped > 0 {
                b.println(format!(
                    "resuming: {skipped} results already in the database"
                ));
            }
        }
    }
    fn advance(&self, n: u64, note: &str) {
        if let Some(b) = &self.0 {
            b.inc(n);
            b.set_message(note.to_string());
        }
    }
    fn finish(&self) {
        if let Some(b) = &self.0 {
            b.finish_and_clear();
        }
    }
}

fn sweep_cmd(a: RunArgs) -> Result<()> {
    let (plan, template_name) = match (&a.template, a.shape.is_empty()) {
        (None, true) => bail!("give a template or --shape M,N,K"),
        (Some(t), true) => {
            let t = Template::load(t)?;
            (Plan::from_template(&t), t.name)
        }
        (t, false) => {
            let space = match t {
                Some(t) => Template::load(t)?.space,
                None => Template::parse(STANDARD, "templates/gpt-oss-120b.toml")?.space,
            };
            let mut shapes: Vec<Shape> = a
                .shape
                .iter()
                .map(|s| parse_shape(s))
                .collect::<Result<_>>()?;
            shapes.dedup();
            (Plan::new("shapes", &space, shapes), "shapes".to_string())
        }
    };
    let by = match a.by {
        ByArg::Model => By::Model,
        ByArg::Device => By::Device,
    };
    let params_toml = match &a.params {
        // Read as `gemm --params` reads it: a regular file of bounded size, never a FIFO or a
        // device; the workers get the text.
        Some(p) => Some(
            tilegen::timing::Params::read_file(p)
                .with_context(|| format!("--params {}", p.display()))?,
        ),
        None => None,
    };
    let device = match by {
        By::Device => a.device.parse::<DeviceChoice>()?,
        // The model runs no device: --device is not read.
        By::Model => DeviceChoice::default(),
    };
    let eval = EvalSettings {
        by,
        device,
        warmup: a.warmup,
        repeats: a.repeats,
        max_cus: a.max_cus,
        params_toml: params_toml.clone(),
    };
    let target = match by {
        By::Model => {
            // A bad file is refused here, before any worker reads it.
            if let Some(t) = &params_toml {
                tilegen::timing::Params::from_toml_str(t).context("timing parameters")?;
            }
            Target {
                gfx: tilegen_arch::PROCESSOR.into(),
                cus: tilegen_arch::COMPUTE_UNITS,
                device: DeviceName::TimingModel,
            }
        }
        By::Device => {
            let dev = devices(device).map_err(anyhow::Error::msg)?;
            Target {
                gfx: tilegen_arch::PROCESSOR.into(),
                cus: a.cus,
                device: DeviceName::Named(dev.name()),
            }
        }
    };
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .max(1);
    let cancel = tilegen_output::interrupt_flag();
    let opts = SweepOptions {
        eval,
        target,
        shard: a.shard,
        budget_per_shape: a.budget_per_shape,
        cancel: cancel.clone(),
    };
    if a.plan {
        return print_plan(&plan, &a);
    }
    let mut db = Db::open(&a.db)?;
    let runners: Vec<Box<dyn Runner>> = (0..jobs)
        .map(|_| -> Result<Box<dyn Runner>> {
            Ok(if a.in_process {
                Box::new(InProcess(Evaluator::new(Box::new(devices))))
            } else {
                Box::new(
                    ChildRunner::new(
                        WorkerCommand {
                            program: std::env::current_exe()
                                .context("locating the tilegen executable")?,
                            args: vec!["tune".into(), "--worker".into()],
                        },
                        Duration::from_secs_f64(a.timeout.max(1.0)),
                    )
                    .with_cancel(cancel.clone()),
                )
            })
        })
        .collect::<Result<_>>()?;
    let bar = (!a.json && std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new(0);
        b.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:32}] {pos}/{len} (ETA {eta}) {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b
    });
    let observer = Bar(bar);
    let summary = match sweep::run(&plan, &mut db, runners, &opts, &observer) {
        Ok(s) => s,
        Err(e @ tilegen_tune::sweep::SweepError::Interrupted { .. }) => {
            return Err(anyhow::Error::new(OutputError::Interrupted).context(e.to_string()));
        }
        Err(e) => return Err(e.into()),
    };
    if a.json {
        let mut v = serde_json::to_value(&summary)?;
        v["db"] = serde_json::json!(a.db);
        v["specs_per_second"] = serde_json::json!(if summary.elapsed_seconds > 0.0 {
            summary.compiled as f64 / summary.elapsed_seconds
        } else {
            0.0
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    let st = &summary.specs;
    println!(
        "tune {template_name} by {} (shard {}): {} shapes; {} combinations, {} valid specs, {} pruned before LLVM{}, {} duplicates; {} tall-tile pairs skipped",
        by.as_str(),
        summary.shard,
        summary.shapes,
        st.combinations,
        st.valid,
        st.pruned_total(),
        pruned_note(st),
        st.duplicates,
        summary.tall_tile_pairs
    );
    println!(
        "  {} pairs in this shard: {} evaluated ({} failed), {} already in the database, {} evaluated by another sweep sharing it, {} over budget; {} specs compiled ({} failed) in {:.1} s of compile time; {:.1} s wall",
        summary.pairs,
        summary.evaluated,
        summary.failed,
        summary.skipped,
        summary.done_elsewhere,
        summary.over_budget,
        summary.compiled,
        summary.compile_failed,
        summary.compile_seconds,
        summary.elapsed_seconds
    );
    if summary.workers_lost > 0 {
        println!(
            "  {} worker processes died or timed out (their specs are recorded as failed)",
            summary.workers_lost
        );
    }
    for b in &summary.best {
        println!(
            "  {:>18}  {:>9.2} us  {:>7.1} TFLOP/s  {}{}",
            b.shape.to_string(),
            b.us,
            b.tflops,
            b.kernel,
            b.vs_default.map_or(String::new(), |v| {
                if by == By::Model {
                    let band = tilegen::timing::HELD_OUT_ERROR;
                    format!(
                        "  ({v:.2}x the default, model error {}{})",
                        band.label(),
                        if band.ties(1.0, v) { ": a tie" } else { "" }
                    )
                } else {
                    format!("  ({v:.2}x the default)")
                }
            })
        );
    }
    println!("  database: {}", a.db.display());
    Ok(())
}

fn report_cmd(a: ReportArgs) -> Result<()> {
    let db = Db::open_read_only(&a.db)?;
    let rows = db.results()?;
    let source = a.source.map(|s| match s {
        ByArg::Model => By::Model,
        ByArg::Device => By::Device,
    });
    let reports = report::per_shape(&rows, source);
    if reports.is_empty() {
        bail!(
            "{} holds no successful result{}",
            a.db.display(),
            source.map_or(String::new(), |s| format!(" from the {s}"))
        );
    }
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("creating {}", a.output.display()))?;
    let outs = ["best.md", "best.csv", "tflops.svg"].map(|f| Output::check(a.output.join(f)));
    let [md, csv, svg] = outs;
    let (md, csv, svg) = (md?, csv?, svg?);
    let title = format!(
        "{}: TFLOP/s per shape, best vs runner-up vs default spec",
        a.db.file_name()
            .map_or(String::new(), |n| n.to_string_lossy().into_owned())
    );
    let chart = report::svg(&reports, &title)?;
    let table = report::markdown(&reports);
    md.write(table.as_bytes())?;
    csv.write(report::csv(&reports).as_bytes())?;
    svg.write(chart.as_bytes())?;
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "shapes": reports.len(),
                "output": a.output,
                "best": reports.iter().map(|r| serde_json::json!({
                    "m": r.shape.m, "n": r.shape.n, "k": r.shape.k, "source": r.source,
                    "kernel": r.best.kernel, "us": r.best.us, "tflops": r.best.tflops,
                    "runner_up_tflops": r.runner_up.as_ref().and_then(|x| x.tflops),
                    "margin": r.margin, "within_model_error": r.within_band,
                    "default_tflops": r.default.as_ref().and_then(|x| x.tflops),
                })).collect::<Vec<_>>(),
            }))?
        );
    } else {
        print!("{table}");
        println!(
            "wrote best.md, best.csv and tflops.svg to {}",
            a.output.display()
        );
    }
    Ok(())
}

fn merge(a: MergeArgs) -> Result<()> {
    // Polled by the merge: an interrupted merge removes the output it was creating.
    let cancel = tilegen_output::interrupt_flag();
    let merged = match tilegen_tune::db::merge_into(&a.output, &a.inputs, &cancel) {
        Ok(m) => m,
        Err(e @ tilegen_tune::DbError::Interrupted(_)) => {
            return Err(anyhow::Error::new(OutputError::Interrupted).context(e.to_string()));
        }
        Err(e) => return Err(e.into()),
    };
    let (stats, results, history) = (merged.stats, merged.results, merged.history);
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "inputs": a.inputs, "output": a.output, "read": stats.read, "added": stats.added,
                "improved": stats.improved, "results": results, "history": history,
            }))?
        );
    } else {
        println!(
            "merged {} databases into {}: {} history rows read, {} new; {} results improved; now {} results, {} history rows",
            a.inputs.len(),
            a.output.display(),
            stats.read,
            stats.added,
            stats.improved,
            results,
            history
        );
    }
    Ok(())
}

fn export(a: ExportArgs) -> Result<()> {
    let db = Db::open_read_only(&a.db)?;
    let out = Output::check(&a.output)?;
    out.write(Db::csv(&db.results()?).as_bytes())?;
    Ok(())
}

fn slurm_cmd(a: SlurmArgs) -> Result<()> {
    // Refuse a malformed template before writing scripts that would fail on the cluster.
    Template::load(&a.template)?;
    // Everything is checked before the directory is made (`slurm::write` makes it).
    let abs =
        |p: &PathBuf| std::path::absolute(p).with_context(|| format!("resolving {}", p.display()));
    let dir = abs(&a.output)?;
    let mut job = slurm::SlurmJob::new(
        std::env::current_exe().context("locating the tilegen executable")?,
        abs(&a.template)?,
        dir.clone(),
        match &a.db {
            Some(d) => abs(d)?,
            None => dir.join("tune.db"),
        },
        a.shards,
    )?
    .cpus_per_task(a.cpus_per_task)?
    .minutes(a.minutes)?
    .tune_args(a.tune_arg.clone());
    if let Some(p) = &a.partition {
        job = job.partition(p.parse()?);
    }
    let scripts = slurm::write(&job).map_err(|e| anyhow::anyhow!(e))?;
    let submitted = if a.submit {
        Some(slurm::submit(&scripts, &dir, a.wait)?)
    } else {
        None
    };
    if a.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "scripts": scripts, "db": job.db(), "shards": a.shards, "submitted": submitted,
            }))?
        );
    } else {
        println!(
            "wrote {}, {} and {}",
            scripts.array.display(),
            scripts.merge.display(),
            scripts.submit.display()
        );
        if let Some(s) = &submitted {
            println!(
                "submitted array job {} and merge job {} (afterok)",
                s.array, s.merge
            );
        }
    }
    if let Some(Submitted {
        merge_exit: Some(code),
        ..
    }) = &submitted
        && *code != 0
    {
        bail!(
            "the merge job ended with status {code} (see {}/merge.log)",
            dir.display()
        );
    }
    Ok(())
}

fn print_plan(plan: &Plan, a: &RunArgs) -> Result<()> {
    let work = plan.shard_work(a.shard);
    let pairs: usize = work.iter().map(|(_, s)| s.len()).sum();
    let v = serde_json::json!({
        "template": plan.name,
        "shapes": plan.shapes.len(),
        "specs": plan.stats,
        "specs_in_plan": plan.specs.len(),
        "pairs": plan.pairs,
        "tall_tile_pairs": plan.tall_tile_pairs,
        "shard": a.shard,
        "shard_specs": work.len(),
        "shard_pairs": pairs,
    });
    if a.json {
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        let st = &plan.stats;
        println!(
            "{}: {} shapes; {} combinations, {} valid specs ({} with the default spec), {} pruned before LLVM{}, {} duplicates; {} (spec, shape) pairs, {} tall-tile pairs skipped; shard {}: {} specs, {} pairs",
            plan.name,
            plan.shapes.len(),
            st.combinations,
            st.valid,
            plan.specs.len(),
            st.pruned_total(),
            pruned_note(st),
            st.duplicates,
            plan.pairs,
            plan.tall_tile_pairs,
            a.shard,
            work.len(),
            pairs
        );
    }
    Ok(())
}

/// ` (rule: count, ...)`, or nothing when nothing was pruned.
fn pruned_note(st: &tilegen_tune::space::EnumStats) -> String {
    if st.pruned.is_empty() {
        String::new()
    } else {
        format!(" ({})", st.describe_pruned())
    }
}
