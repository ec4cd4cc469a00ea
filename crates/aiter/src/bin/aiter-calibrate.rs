//! `aiter-calibrate`: judges time predictors on the calibration rows of AMD's MI355X-measured
//! f4gemm table and on the held-out rows; prints their error tables, writes `calibration.csv`,
//! `timing-model-runs.csv` and one SVG plot per predictor into `--out` (default
//! `target/calibrate`). `--fit` runs the timing model's calibration procedure on the
//! calibration rows only and writes the fitted parameters to `DIR/fitted-params.toml`.
//! `cargo xtask calibrate` runs it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{ArgGroup, Parser, ValueEnum};
use tilegen_aiter::calibrate::{
    CalibrationRow, Evaluation, Group, LoopExtrapolation, ModelRun, Predictor, Roofline, Set,
    TimingModel, calibration_rows, extra_rows, fit,
};
use tilegen_aiter::{Corpus, default_dir};
use tilegen_output::Output;
use tilegen_timing::Params;

/// The rows a run covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RowSet {
    /// Calibration and held-out rows.
    All,
    /// The calibration rows only (model development never looks at held-out rows).
    Calibration,
}

/// Judge time predictors against AMD's MI355X-measured f4gemm times (AITER's tuned table).
#[derive(Debug, Parser)]
#[command(
    name = "aiter-calibrate",
    // A flag given twice takes its last value, as `cargo xtask calibrate` relies on when its
    // caller passes its own `--out`.
    args_override_self = true,
    group(ArgGroup::new("one_run").args(["row", "shape"]).multiple(true))
)]
struct Args {
    /// Where calibration.csv, the plots and the report go (default:
    /// <workspace>/target/calibrate).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The AITER corpus (default: $TILEGEN_AITER_DIR or <workspace>/target/aiter).
    #[arg(long, value_name = "DIR")]
    corpus: Option<PathBuf>,
    /// Timing parameters overriding the model's params.toml.
    #[arg(long, value_name = "FILE")]
    params: Option<PathBuf>,
    /// Rows to run.
    #[arg(long, value_enum, default_value_t = RowSet::All)]
    set: RowSet,
    /// Another AITER tuning table of MI355X-measured f4gemm rows (same columns as the wheel's
    /// a4w4 table; e.g. the DeepSeek-V3 and Kimi tables of AITER's repository): its rows are
    /// held out as the set `extra`, reported on their own and never fitted on. Repeatable.
    #[arg(long, value_name = "FILE")]
    extra_table: Vec<PathBuf>,
    /// Run the model on every row and report only its CPU time and failures (no errors).
    #[arg(long)]
    cpu_only: bool,
    /// Fit the timing model's free parameters on the calibration rows, write
    /// DIR/fitted-params.toml.
    #[arg(long)]
    fit: bool,
    /// With --fit: also write the fitted entries into FILE (the model's params.toml).
    #[arg(long, value_name = "FILE")]
    update: Option<PathBuf>,
    /// With --fit: fit only this free parameter (e.g. vmem.l2_channel_bytes_per_cycle); the
    /// launch overhead is always rescanned. Repeatable; without it every free parameter is fitted.
    #[arg(long, value_name = "NAME", requires = "fit")]
    fit_only: Vec<String>,
    /// The roofline only.
    #[arg(long)]
    no_model: bool,
    /// Print every row the model ran.
    #[arg(long)]
    detail: bool,
    /// Simulate every K step (no extrapolation of long K loops).
    #[arg(long)]
    full_k: bool,
    /// Extrapolate long K loops from runs of SHORT and LONG steps (default 4,16).
    #[arg(long, value_name = "SHORT,LONG", value_parser = parse_k_steps)]
    k_steps: Option<(u32, u32)>,
    /// Run the model on one calibration row (table line) and print the whole prediction.
    #[arg(long, value_name = "LINE")]
    row: Option<u64>,
    /// With --tile MxN: run the model on a shape of one's choosing (no measurement to compare).
    #[arg(long, value_name = "M,N,K", value_parser = parse_shape)]
    shape: Option<(u32, u32, u32)>,
    /// The AITER kernel of --shape, by its tile (e.g. 128x128).
    #[arg(long, value_name = "MxN", requires = "shape")]
    tile: Option<String>,
    /// With --row or --shape: write a Perfetto trace of the first CU.
    #[arg(long, value_name = "FILE", requires = "one_run")]
    trace: Option<PathBuf>,
    /// Simulate at most N CUs of XCD 0.
    #[arg(long, value_name = "N")]
    max_cus: Option<u32>,
    /// Instructions per wave of the cross-XCD address census (0: none).
    #[arg(long, value_name = "N")]
    census: Option<u64>,
    /// Simulate every workgroup on every CU (no sampled rounds; slow).
    #[arg(long)]
    full_grid: bool,
}

impl Args {
    fn out(&self) -> PathBuf {
        self.out
            .clone()
            .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/calibrate"))
    }

    fn corpus(&self) -> PathBuf {
        self.corpus.clone().unwrap_or_else(default_dir)
    }
}

/// `--k-steps SHORT,LONG`, `0 < SHORT < LONG`.
fn parse_k_steps(v: &str) -> Result<(u32, u32), String> {
    let bad = || format!("expected SHORT,LONG with 0 < SHORT < LONG, not {v:?}");
    let (x, y) = v.split_once(',').ok_or_else(bad)?;
    let (x, y): (u32, u32) = (
        x.trim().parse().map_err(|_| bad())?,
        y.trim().parse().map_err(|_| bad())?,
    );
    if !(0 < x && x < y) {
        return Err(bad());
    }
    Ok((x, y))
}

/// `--shape M,N,K`.
fn parse_shape(v: &str) -> Result<(u32, u32, u32), String> {
    let bad = || format!("expected M,N,K, not {v:?}");
    let dims: Vec<u32> = v
        .split(',')
        .map(|d| d.trim().parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    match dims[..] {
        [m, n, k] => Ok((m, n, k)),
        _ => Err(bad()),
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let msg = inner.to_string();
        if !s.contains(&msg) {
            s.push_str(": ");
            s.push_str(&msg);
        }
        source = inner.source();
    }
    s
}

/// Sampled rounds, or with `--full-grid` every workgroup.
fn method(args: &Args) -> tilegen_timing::Method {
    if args.full_grid {
        tilegen_timing::Method::Full
    } else {
        tilegen_timing::Method::Rounds
    }
}

/// The cross-XCD census: `--census N` (0: none), else the model's default.
fn census(args: &Args) -> tilegen_timing::CrossXcd {
    match args.census {
        Some(0) => tilegen_timing::CrossXcd::Ignore,
        Some(instructions) => tilegen_timing::CrossXcd::Census { instructions },
        None => tilegen_timing::CrossXcd::default(),
    }
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of the output goes away (`| head`)
    // instead of panicking on the write.
    // SAFETY: resetting a signal disposition at startup, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aiter-calibrate: error: {}", error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let corpus = Corpus::open(args.corpus())?;
    let mut rows = calibration_rows(&corpus)?;
    for (i, table) in args.extra_table.iter().enumerate() {
        rows.extend(extra_rows(&corpus, table, i as u32 + 1)?);
    }
    let params = match &args.params {
        Some(p) => Params::from_file(p)?,
        None => Params::mi355x(),
    };
    let out = args.out();
    std::fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    if let Some(line) = args.row {
        return one_row(&rows, line, params, args);
    }
    if let Some(shape) = args.shape {
        return one_shape(&corpus, shape, params, args);
    }
    if args.cpu_only {
        return cpu_only(&rows, params, args);
    }
    if args.fit {
        let cal: Vec<CalibrationRow> = rows
            .iter()
            .filter(|r| r.set() == Set::Calibration)
            .cloned()
            .collect();
        let options = if args.fit_only.is_empty() {
            fit::FitOptions::default()
        } else {
            fit::FitOptions::default().only(&args.fit_only)?
        };
        let fitted = fit::fit_with(&cal, &params, &options, &mut |line| eprintln!("{line}"))?;
        let path = out.join("fitted-params.toml");
        write_atomically(&path, fitted.toml().as_bytes())?;
        print!("{}", fitted.report());
        println!("wrote {}", path.display());
        if let Some(target) = &args.update {
            let text = std::fs::read_to_string(target)
                .map_err(|e| format!("reading {}: {e}", target.display()))?;
            write_atomically(
                target,
                fit::update_params_toml(&text, &fitted.params).as_bytes(),
            )?;
            println!("updated {}", target.display());
        }
        return Ok(());
    }
    let mut report = String::new();
    let _ = writeln!(
        report,
        "{} MI355X rows with an asm kernel: {} calibration, {} held out{}",
        rows.len(),
        rows.iter().filter(|r| r.set() == Set::Calibration).count(),
        rows.iter().filter(|r| r.set() == Set::HeldOut).count(),
        match rows.iter().filter(|r| r.set() == Set::Extra).count() {
            0 => String::new(),
            n => format!(
                ", {n} extra (held out, from {} other tables)",
                args.extra_table.len()
            ),
        }
    );
    let roofline = Roofline::fit(&rows)?;
    if args.set == RowSet::Calibration {
        rows.retain(|r| r.set() == Set::Calibration);
        let _ = writeln!(report, "running the calibration rows only");
    }
    report.push('\n');
    print!("{report}");
    let model = TimingModel::with_options(
        params,
        tilegen_timing::TimingOptions {
            max_cus: args.max_cus,
            cross_xcd: census(args),
            method: method(args),
            ..Default::default()
        },
    )
    .extrapolating(extrapolation(args));
    let mut predictors: Vec<&dyn Predictor> = vec![&roofline];
    if !args.no_model {
        predictors.push(&model);
    }
    let started = std::time::Instant::now();
    let eval = Evaluation::run(&rows, &predictors);
    let wall = started.elapsed().as_secs_f64();
    let mut tables = eval.table();
    if !args.no_model {
        let _ = writeln!(tables, "{}", eval.comparison(0, 1));
        // The band is the wider of the two held-out sets in each figure, over both.
        let held = eval.stats(1, Set::HeldOut, &Group::All);
        let extra = eval.stats(1, Set::Extra, &Group::All);
        let band = tilegen_timing::HELD_OUT_ERROR;
        if args.set == RowSet::All && extra.rows() == 0 {
            let _ = writeln!(
                tables,
                "note: tilegen_timing::HELD_OUT_ERROR ({}, {} rows) also counts the rows of AITER's DeepSeek-V3 and Kimi tables: give them with --extra-table to check it\n",
                band.label(),
                band.rows
            );
        } else if args.set == RowSet::All {
            let (median, p90) = (
                held.median().max(extra.median()),
                held.p90().max(extra.p90()),
            );
            let rows = held.rows() + extra.rows();
            if (median - band.median).abs() > 0.0005
                || (p90 - band.p90).abs() > 0.0005
                || rows != band.rows as usize
            {
                let _ = writeln!(
                    tables,
                    "note: the held-out error here (the wider of held-out and extra: {rows} rows, median {:.1}%, p90 {:.1}%) is not tilegen_timing::HELD_OUT_ERROR ({} rows, {}): the band the tuner and the benches print; update it when these parameters become the model's\n",
                    100.0 * median,
                    100.0 * p90,
                    band.rows,
                    band.label()
                );
            }
        }
    }
    let mut written = eval.write(&out)?;
    if !args.no_model {
        let runs = model.take_runs();
        tables.push_str(&cpu_report(&runs, &rows, wall));
        if args.detail {
            print!("{}", detail(&runs, &rows));
        }
        let path = out.join("timing-model-runs.csv");
        write_atomically(&path, runs_csv(&runs, &rows).as_bytes())?;
        written.push(path);
    }
    print!("{tables}");
    report.push_str(&tables);
    let path = out.join("report.txt");
    write_atomically(&path, report.as_bytes())?;
    written.push(path);
    for path in written {
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Runs the model on every row and reports its cost and its failures, nothing about its
/// errors (so it may look at held-out rows while the model is being worked on).
fn cpu_only(
    rows: &[CalibrationRow],
    params: Params,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    use rayon::prelude::*;
    let model = TimingModel::new(params).extrapolating(extrapolation(args));
    let started = std::time::Instant::now();
    let failures: Vec<String> = rows
        .par_iter()
        .filter_map(|r| {
            model.run(r.row(), r.kernel()).err().map(|e| {
                let t = r.row();
                format!(
                    "table line {} ({}x{}x{} on {}): {}",
                    t.line(),
                    t.m(),
                    t.n(),
                    t.k(),
                    r.kernel().tile_label(),
                    error_chain(&e)
                )
            })
        })
        .collect();
    let wall = started.elapsed().as_secs_f64();
    print!("{}", cpu_report(&model.take_runs(), rows, wall));
    println!("{} rows failed", failures.len());
    for f in failures {
        println!("  {f}");
    }
    Ok(())
}

/// Runs the model on one calibration row (held-out rows are refused: model work looks at the
/// calibration rows only) and prints the whole prediction.
fn one_row(
    rows: &[CalibrationRow],
    line: u64,
    params: Params,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    let row = rows
        .iter()
        .find(|r| r.row().table() == 0 && r.row().line() == line)
        .ok_or_else(|| format!("no MI355X asm row at table line {line}"))?;
    if row.set() != Set::Calibration {
        return Err(format!("table line {line} is held out").into());
    }
    let model = single_run_model(params, args);
    let (p, cpu) = model.run(row.row(), row.kernel())?;
    let t = row.row();
    println!(
        "{}x{}x{} on {} (split 2^{}): measured {:.2} us, predicted {:.2} us ({:+.1}%), {cpu:.2} s CPU",
        t.m(),
        t.n(),
        t.k(),
        row.kernel().tile_label(),
        t.log2_k_split(),
        t.us(),
        p.us,
        100.0 * (p.us / t.us() - 1.0)
    );
    print_prediction(&p, args)
}

/// `--shape M,N,K --tile MxN`: the model on a shape no table row need hold.
fn one_shape(
    corpus: &Corpus,
    (m, n, k): (u32, u32, u32),
    params: Params,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    let tile = args.tile.as_deref().ok_or("--shape needs --tile MxN")?;
    let kernel = corpus
        .bpreshuffle_kernels()
        .find(|k| k.tile_label() == tile)
        .ok_or_else(|| format!("no BpreShuffle kernel with tile {tile} in the corpus"))?;
    let model = single_run_model(params, args);
    let problem = tilegen_aiter::GemmProblem::new(m, n, k)?;
    let (p, cpu) = model.run_problem(problem, kernel)?;
    println!(
        "{m}x{n}x{k} on {tile}: predicted {:.2} us, {cpu:.2} s CPU",
        p.us
    );
    print_prediction(&p, args)
}

/// The model of `--row` and `--shape`: one launch, traced with `--trace`.
fn single_run_model(params: Params, args: &Args) -> TimingModel {
    let options = tilegen_timing::TimingOptions {
        trace: args
            .trace
            .as_ref()
            .map(|_| tilegen_timing::TraceOptions { cycles: 200_000 }),
        max_cus: args.max_cus,
        cross_xcd: census(args),
        method: method(args),
        ..Default::default()
    };
    TimingModel::with_options(params, options).extrapolating(extrapolation(args))
}

/// Prints a whole prediction as JSON and writes its trace to `--trace`.
fn print_prediction(
    p: &tilegen_timing::Prediction,
    args: &Args,
) -> Result<(), Box<dyn std::error::Error>> {
    println!("{}", serde_json::to_string_pretty(p)?);
    if let (Some(path), Some(tr)) = (args.trace.as_deref(), p.trace.as_ref()) {
        write_trace_atomically(path, tr)?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// Writes `bytes` to `path` through a temporary file renamed over it.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    Output::check(path)?.write(bytes)?;
    Ok(())
}

/// Writes `trace` as Perfetto JSON to `path` through a temporary file renamed over it.
fn write_trace_atomically(
    path: &Path,
    trace: &tilegen_timing::Trace,
) -> Result<(), Box<dyn std::error::Error>> {
    let file = Output::check(path)?.create()?;
    {
        let mut w = std::io::BufWriter::new(file.file());
        tilegen_timing::write_trace(trace, &mut w)?;
        std::io::Write::flush(&mut w)?;
    }
    file.commit()?;
    Ok(())
}

fn extrapolation(args: &Args) -> Option<LoopExtrapolation> {
    (!args.full_k).then(|| match args.k_steps {
        Some((short_steps, long_steps)) => LoopExtrapolation {
            short_steps,
            long_steps,
        },
        None => LoopExtrapolation::default(),
    })
}

fn row_of<'a>(rows: &'a [CalibrationRow], run: &ModelRun) -> Option<&'a CalibrationRow> {
    rows.iter()
        .find(|r| r.row().table() == run.table && r.row().line() == run.line)
}

fn cpu_report(runs: &[ModelRun], rows: &[CalibrationRow], wall: f64) -> String {
    let mut s = String::new();
    let mut cpu: Vec<&ModelRun> = runs.iter().collect();
    if cpu.is_empty() {
        return s;
    }
    cpu.sort_by(|a, b| a.cpu_seconds.total_cmp(&b.cpu_seconds));
    let median = cpu[(cpu.len() - 1) / 2].cpu_seconds;
    let total: f64 = cpu.iter().map(|r| r.cpu_seconds).sum();
    let _ = writeln!(
        s,
        "timing model CPU time per row (one core): median {median:.3} s, total {total:.1} s over {} rows ({wall:.1} s wall)",
        cpu.len()
    );
    let _ = writeln!(s, "  slowest rows:");
    for r in cpu.iter().rev().take(3) {
        if let Some(row) = row_of(rows, r) {
            let t = row.row();
            let _ = writeln!(
                s,
                "    {:.3} s  {}x{}x{} on {} (split 2^{}; {} rounds, {} instructions simulated)",
                r.cpu_seconds,
                t.m(),
                t.n(),
                t.k(),
                row.kernel().tile_label(),
                t.log2_k_split(),
                r.rounds,
                r.instructions
            );
        }
    }
    let over = cpu.iter().filter(|r| r.cpu_seconds > 2.0).count();
    let _ = writeln!(s, "  rows over the 2 s budget: {over}\n");
    s
}

fn detail(runs: &[ModelRun], rows: &[CalibrationRow]) -> String {
    let mut s = String::new();
    let mut runs: Vec<&ModelRun> = runs.iter().collect();
    runs.sort_by_key(|r| (r.table, r.line));
    for r in runs {
        let Some(row) = row_of(rows, r) else {
            continue;
        };
        let t = row.row();
        let _ = writeln!(
            s,
            "{:>6} {:>6} {:>6} {:>8} s{} {:>10.2} {:>10.2} {:>+7.1}% {:>16} mfma {:>4.2} hbm {:>6.0} r{:<3} {:.2}s",
            t.m(),
            t.n(),
            t.k(),
            row.kernel().tile_label(),
            t.log2_k_split(),
            t.us(),
            r.us,
            100.0 * (r.us / t.us() - 1.0),
            format!("{:?}", r.bound),
            r.mfma_busy,
            r.hbm_gbs,
            r.rounds,
            r.cpu_seconds
        );
    }
    s
}

fn runs_csv(runs: &[ModelRun], rows: &[CalibrationRow]) -> String {
    let mut s = String::from(
        "line,M,N,K,kernel,split,set,measured_us,model_us,launch_us,cycles,clock_ghz,bound,mfma_busy,hbm_gbs,rounds,instructions,cpu_s,table\n",
    );
    let mut runs: Vec<&ModelRun> = runs.iter().collect();
    runs.sort_by_key(|r| (r.table, r.line));
    for r in runs {
        let Some(row) = row_of(rows, r) else {
            continue;
        };
        let t = row.row();
        let _ = writeln!(
            s,
            "{},{},{},{},{},{},{},{},{:.4},{:.4},{},{:.4},{:?},{:.4},{:.1},{},{},{:.4},{}",
            r.line,
            t.m(),
            t.n(),
            t.k(),
            row.kernel().tile_label(),
            t.log2_k_split(),
            row.set().label(),
            t.us(),
            r.us,
            r.launch_us,
            r.cycles,
            r.clock_ghz,
            r.bound,
            r.mfma_busy,
            r.hbm_gbs,
            r.rounds,
            r.instructions,
            r.cpu_seconds,
            r.table
        );
    }
    s
}
