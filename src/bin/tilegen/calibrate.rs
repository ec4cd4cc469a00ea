//! `tilegen calibrate --device hsa[:N]`: time AITER's kernels (the corpus `cargo xtask setup`
//! extracts) and tilegen's own on an MI355X, write the times in AITER's tuned-table format and
//! refit the timing model's free parameters on them.
//!
//! The measuring is `tilegen_aiter::calibrate::device`'s (AITER's kernels, their check, the
//! refit) and `tilegen_tune::eval::DeviceEvaluator`'s (tilegen's kernels, timed as `tune --by
//! device` times them); this file chooses the rows, the device and the files.

use std::io::IsTerminal;
use std::path::PathBuf;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use tilegen::kernels::gemm::{Knob, KnobValue};
use tilegen::kernels::{KernelSpec, Variant};
use tilegen::runtime::select::AnyDevice;
use tilegen::runtime::{EmuConfig, HsaOptions, choose};
use tilegen::timing::Params;
use tilegen_aiter::calibrate::device::{self as measure, DeviceTimer, Pick, TimingSettings};
use tilegen_aiter::calibrate::fit::FitOptions;
use tilegen_aiter::calibrate::{CalibrationRow, MI355X_CUS, Set, calibration_rows, measured_rows};
use tilegen_aiter::{Corpus, MeasuredRow, TableRow};
use tilegen_output::Output;
use tilegen_tune::Shape;
use tilegen_tune::eval::{DeviceEvaluator, compile};

use crate::device::DeviceArgs;

/// The files written into `--out`.
const MEASURED_CSV: &str = "measured.csv";
const PARAMS_TOML: &str = "params.toml";
const REPORT_TXT: &str = "report.txt";

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum RowsArg {
    /// The calibration rows (AITER's 32x128, 128x512 and 160x256 kernels): the fit's evidence.
    Calibration,
    /// The held-out rows (every other kernel): judged, never fitted on.
    HeldOut,
    /// Both.
    All,
}

#[derive(Clone, Copy, ValueEnum)]
enum PickArg {
    /// Evenly spread over the table.
    Spread,
    /// The fewest multiply-adds first (what an emulated device can afford).
    Smallest,
}

#[derive(Args)]
pub struct CalibrateArgs {
    #[command(flatten)]
    device: DeviceArgs,
    /// Output directory (created when missing): measured.csv (AITER's tuned-table columns),
    /// params.toml (the refit parameter table) and report.txt.
    #[arg(long, default_value = "calibration")]
    out: PathBuf,
    /// Which of AITER's MI355X rows to time.
    #[arg(long, value_enum, default_value_t = RowsArg::Calibration)]
    rows: RowsArg,
    /// Time at most N of those rows, chosen by --pick.
    #[arg(long, value_name = "N")]
    limit: Option<usize>,
    /// How --limit chooses.
    #[arg(long, value_enum, default_value_t = PickArg::Spread)]
    pick: PickArg,
    /// tilegen kernels to time on every shape of the rows: each a comma-separated list of
    /// knob=value (`bm=16,bn=128`; knobs as `tilegen gemm`'s flags name them, with `_`),
    /// `default` for the default spec, or `none` alone for no tilegen kernel.
    #[arg(
        long,
        value_name = "SPEC",
        num_args = 1..,
        default_values = ["default", "bm=16", "bm=128,bn=256"]
    )]
    tilegen_specs: Vec<String>,
    /// Untimed launches per kernel and shape.
    #[arg(long, default_value_t = 10)]
    warmup: u32,
    /// Timed launches per kernel and shape (the median is the time).
    #[arg(long, default_value_t = 101)]
    repeats: u32,
    /// Stop the refit after N candidates (the starting point is the first): a quick, partial
    /// fit. Without it the fit runs to its end.
    #[arg(long, value_name = "N")]
    fit_trials: Option<usize>,
    /// The AITER corpus (default: $TILEGEN_AITER_DIR, else target/aiter of the workspace).
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Print a JSON summary.
    #[arg(long)]
    json: bool,
}

/// A tilegen spec from `knob=value,...` (or `default`).
fn parse_spec(text: &str) -> Result<KernelSpec> {
    let t = text.trim();
    let mut given = Vec::new();
    if t != "default" {
        for pair in t.split(',') {
            let (key, value) = pair
                .split_once('=')
                .with_context(|| format!("--tilegen-specs {text}: `{pair}` is not knob=value"))?;
            let (key, value) = (key.trim(), value.trim());
            let knob = *Knob::ALL
                .iter()
                .find(|k| k.name() == key)
                .with_context(|| {
                    format!(
                        "--tilegen-specs {text}: no knob `{key}` (knobs: {})",
                        Knob::ALL
                            .iter()
                            .map(|k| k.name())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                })?;
            // Numbers and switches as they are, names (variant, mma, ...) as text.
            let json = serde_json::from_str::<serde_json::Value>(value)
                .unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
            let v = knob
                .deserialize_value(json)
                .map_err(|e| anyhow::anyhow!("--tilegen-specs {text}: {key} = {value}: {e}"))?;
            if given.iter().any(|(k, _)| *k == knob) {
                bail!("--tilegen-specs {text}: {key} is given twice");
            }
            given.push((knob, v));
        }
    }
    // The table's order: the variant first, every switch before the knobs it makes a place for.
    given.sort_by_key(|(k, _)| Knob::ALL.iter().position(|x| x == k));
    let mut spec = KernelSpec::of_variant(Variant::Preb);
    for (k, v) in given {
        if k == Knob::Variant {
            if let KnobValue::Variant(variant) = v {
                spec = KernelSpec::of_variant(variant);
            }
            continue;
        }
        k.set(&mut spec, v)
            .with_context(|| format!("--tilegen-specs {text}"))?;
    }
    spec.validate()
        .with_context(|| format!("--tilegen-specs {text}: {}", spec.kernel_name()))?;
    Ok(spec)
}

/// The specs of `--tilegen-specs`, distinct by cache key.
fn parse_specs(texts: &[String]) -> Result<Vec<KernelSpec>> {
    if texts.iter().any(|t| t.trim() == "none") {
        if texts.len() > 1 {
            bail!("--tilegen-specs none goes alone");
        }
        return Ok(Vec::new());
    }
    let mut specs: Vec<KernelSpec> = Vec::new();
    for t in texts {
        let s = parse_spec(t)?;
        if !specs.iter().any(|x| x.cache_key() == s.cache_key()) {
            specs.push(s);
        }
    }
    Ok(specs)
}

/// One timed tilegen kernel and shape, or why the shape is not one the spec runs.
struct TilegenRow {
    shape: Shape,
    kernel: String,
    result: std::result::Result<(TableRow, f64), String>,
}

fn bar(len: u64, hidden: bool) -> Option<ProgressBar> {
    (!hidden && std::io::stderr().is_terminal()).then(|| {
        let b = ProgressBar::new(len);
        b.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:32}] {pos}/{len} (ETA {eta}) {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        b
    })
}

fn say(bar: &Option<ProgressBar>, line: &str) {
    match bar {
        Some(b) => b.println(line),
        None => eprintln!("{line}"),
    }
}

pub fn run(a: CalibrateArgs) -> Result<()> {
    // Everything that can be refused is refused before a kernel runs.
    let specs = parse_specs(&a.tilegen_specs)?;
    let settings = TimingSettings::new(a.warmup, a.repeats)?;
    if a.fit_trials == Some(0) {
        bail!("--fit-trials 0: the fit needs at least its starting point (1)");
    }
    if a.limit == Some(0) {
        bail!("--limit 0 leaves no row to time");
    }
    let cancel = tilegen_output::interrupt_flag();
    let chosen = choose(
        a.device.device,
        EmuConfig::default(),
        HsaOptions::new().cancel_flag(cancel),
    )?;
    eprintln!("device: {}", chosen.reason());
    let (device_name, cu_num) = match chosen.device() {
        AnyDevice::Hsa(h) => (chosen.device().name(), h.agent().compute_units),
        AnyDevice::Emu(_) => bail!(
            "calibrate times kernels on a GPU through the HSA runtime (--device hsa[:N]), and \
             the device is {}: the emulator has no MI355X clock to time kernels by. Without a \
             GPU, `cargo xtask hsa-emu-install DIR` and \
             TILEGEN_HSA_LIB=DIR/libhsa-runtime64.so.1 give an HSA runtime whose profiled \
             times are the timing model's",
            chosen.reason()
        ),
    };
    if cu_num != MI355X_CUS {
        bail!(
            "HSA agent {device_name} has {cu_num} compute units; the timing model is of a whole \
             MI355X ({MI355X_CUS} CUs: one agent in SPX mode), so its refit needs times from one"
        );
    }

    let corpus = match &a.corpus {
        Some(dir) => Corpus::open(dir),
        None => Corpus::open_default(),
    }
    .context("opening the AITER corpus")?;
    let mut rows = calibration_rows(&corpus)?;
    rows.retain(|r| match a.rows {
        RowsArg::Calibration => r.set() == Set::Calibration,
        RowsArg::HeldOut => r.set() == Set::HeldOut,
        RowsArg::All => true,
    });
    let pick = match a.pick {
        PickArg::Spread => Pick::Spread,
        PickArg::Smallest => Pick::Smallest,
    };
    let rows = measure::pick_rows(rows, a.limit, pick);
    if rows.is_empty() {
        bail!("no AITER row to time");
    }
    if !rows.iter().any(|r| r.set() == Set::Calibration) {
        bail!(
            "none of the {} rows chosen is a calibration row (AITER's 32x128, 128x512 and \
             160x256 kernels), and the refit fits on those only: choose --rows calibration or all",
            rows.len()
        );
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("creating the output directory {}", a.out.display()))?;
    let paths = [MEASURED_CSV, PARAMS_TOML, REPORT_TXT].map(|f| a.out.join(f));
    for p in &paths {
        Output::check(p)?;
    }
    let [csv_path, params_path, report_path] = paths;

    let kernels = specs
        .iter()
        .map(|s| compile(s).with_context(|| format!("building {}", s.kernel_name())))
        .collect::<Result<Vec<_>>>()?;
    let mut shapes: Vec<Shape> = Vec::new();
    for r in &rows {
        let s = Shape {
            m: r.row().m(),
            n: r.row().n(),
            k: r.row().k(),
        };
        if !shapes.contains(&s) {
            shapes.push(s);
        }
    }
    let evaluator = DeviceEvaluator {
        device: Box::new(chosen.into_device()),
        warmup: settings.warmup(),
        repeats: settings.repeats(),
    };
    let total = rows.len() + kernels.len() * shapes.len();
    let progress = bar(total as u64, a.json);

    // AITER's kernels.
    let mut timer = DeviceTimer::new(evaluator.device.as_ref(), settings);
    let mut aiter = Vec::with_capacity(rows.len());
    for r in &rows {
        let row = r.row();
        let what = format!(
            "AITER {} at {}x{}x{} (splitK {}, tuned table line {})",
            r.kernel().tile_label(),
            row.m(),
            row.n(),
            row.k(),
            row.log2_k_split(),
            row.line()
        );
        if let Some(b) = &progress {
            b.set_message(what.clone());
        }
        tilegen_output::check_interrupted()?;
        let t = timer.time(r).with_context(|| format!("timing {what}"))?;
        let measured = TableRow::measured(MeasuredRow {
            cu_num,
            m: row.m(),
            n: row.n(),
            k: row.k(),
            kernel_id: row.kernel_id(),
            log2_k_split: row.log2_k_split(),
            us: t.median_us(),
            kernel_name: row.kernel_name().to_string(),
            err_ratio: t.err_ratio(),
        })?;
        if t.mismatches() > 0 {
            say(
                &progress,
                &format!(
                    "{what}: {} of {} checked outputs outside AITER's tolerance",
                    t.mismatches(),
                    t.checked()
                ),
            );
        }
        aiter.push((r.clone(), measured, t));
        if let Some(b) = &progress {
            b.inc(1);
        }
    }
    drop(timer);

    // tilegen's kernels, on the same shapes.
    let mut tilegen_rows = Vec::new();
    for kernel in &kernels {
        let spec = kernel.spec();
        let split = spec.split_k();
        if !split.is_power_of_two() {
            bail!(
                "{}: split-K {split} is not a power of two, and AITER's splitK column holds log2 of the split",
                kernel.name()
            );
        }
        for &shape in &shapes {
            if let Some(b) = &progress {
                b.set_message(format!("tilegen {} at {shape}", kernel.name()));
            }
            tilegen_output::check_interrupted()?;
            let refused = spec
                .check_problem(shape.m as usize, shape.n as usize, shape.k as usize)
                .err();
            let result = match refused {
                Some(e) => Err(format!("not run: {e}")),
                None => {
                    let m = evaluator
                        .measure(kernel, &shape)
                        .with_context(|| format!("timing tilegen {} at {shape}", kernel.name()))?;
                    let row = TableRow::measured(MeasuredRow {
                        cu_num,
                        m: shape.m,
                        n: shape.n,
                        k: shape.k,
                        kernel_id: -1,
                        log2_k_split: split.trailing_zeros(),
                        us: m.us,
                        kernel_name: kernel.name().to_string(),
                        // Timed on zeroed inputs as `tune --by device` times them: not checked.
                        err_ratio: 0.0,
                    })?;
                    Ok((row, m.spread))
                }
            };
            if let Err(why) = &result {
                say(
                    &progress,
                    &format!("tilegen {} at {shape}: {why}", kernel.name()),
                );
            }
            tilegen_rows.push(TilegenRow {
                shape,
                kernel: kernel.name().to_string(),
                result,
            });
            if let Some(b) = &progress {
                b.inc(1);
            }
        }
    }
    if let Some(b) = &progress {
        b.finish_and_clear();
    }

    let table: Vec<TableRow> = aiter
        .iter()
        .map(|(_, t, _)| t.clone())
        .chain(
            tilegen_rows
                .iter()
                .filter_map(|r| r.result.as_ref().ok().map(|(t, _)| t.clone())),
        )
        .collect();
    tilegen_aiter::write_tuned(&csv_path, &table)?;

    // The fit reads the rows back as any tuned table is read: the file is its evidence.
    let measured = measured_rows(&corpus, &csv_path)
        .with_context(|| format!("reading back {}", csv_path.display()))?;
    if measured.len() != aiter.len() {
        bail!(
            "{} holds {} AITER rows, {} were written",
            csv_path.display(),
            measured.len(),
            aiter.len()
        );
    }
    let calibration = measured
        .iter()
        .filter(|r| r.set() == Set::Calibration)
        .count();
    let options = FitOptions::default()
        .source(format!(
            "calibrated on {calibration} AITER calibration rows (32x128, 128x512, 160x256 kernels) timed on {device_name} ({cu_num} CUs) by `tilegen calibrate` (median of {} profiled launches)",
            settings.repeats()
        ))
        .max_trials(a.fit_trials);
    let log_fit = !a.json;
    let refit = measure::refit(&measured, &Params::mi355x(), &options, &mut |line| {
        if log_fit {
            eprintln!("{line}");
        }
    })?;
    let params_text = refit.params_toml(Params::DEFAULT_TOML)?;
    Output::check(&params_path)?.write(params_text.as_bytes())?;
    let report = report_text(
        &device_name,
        cu_num,
        &settings,
        &aiter,
        &tilegen_rows,
        &refit.report(),
    );
    Output::check(&report_path)?.write(report.as_bytes())?;

    let (cal_before, cal_after) = refit.errors(Set::Calibration);
    let (held_before, held_after) = refit.errors(Set::HeldOut);
    if a.json {
        let stats = |s: &tilegen_aiter::calibrate::ErrorStats| {
            serde_json::json!({
                "rows": s.rows(),
                "failed": s.failed(),
                "median": finite(s.median()),
                "p90": finite(s.p90()),
                "signed_median": finite(s.signed_median()),
            })
        };
        let f = refit.fitted();
        let v = serde_json::json!({
            "device": device_name,
            "cu_num": cu_num,
            "warmup": settings.warmup(),
            "repeats": settings.repeats(),
            "files": {
                "measured": csv_path,
                "params": params_path,
                "report": report_path,
            },
            "aiter": aiter.iter().map(|(r, t, d)| serde_json::json!({
                "line": r.row().line(),
                "set": r.set().label(),
                "kernel": r.kernel().tile_label(),
                "kernel_name": t.kernel_name(),
                "m": t.m(), "n": t.n(), "k": t.k(),
                "split_k": t.log2_k_split(),
                "us": t.us(),
                "aiter_measured_us": r.row().us(),
                "times_us": d.times_us(),
                "spread": d.spread(),
                "tflops": t.tflops(),
                "bw": t.bandwidth_gbps(),
                "err_ratio": t.err_ratio(),
                "checked": d.checked(),
            })).collect::<Vec<_>>(),
            "tilegen": tilegen_rows.iter().map(|r| match &r.result {
                Ok((t, spread)) => serde_json::json!({
                    "kernel_name": r.kernel,
                    "m": r.shape.m, "n": r.shape.n, "k": r.shape.k,
                    "us": t.us(),
                    "spread": spread,
                    "tflops": t.tflops(),
                    "bw": t.bandwidth_gbps(),
                    "err_ratio": t.err_ratio(),
                    "checked": 0,
                }),
                Err(why) => serde_json::json!({
                    "kernel_name": r.kernel,
                    "m": r.shape.m, "n": r.shape.n, "k": r.shape.k,
                    "not_run": why,
                }),
            }).collect::<Vec<_>>(),
            "fit": {
                "start_objective": f.start_objective,
                "objective": f.objective,
                "candidates": f.trials.len(),
                "stopped_at": f.stopped_at,
                "untried": f.untried,
                "values": f.values.iter().map(|(name, from, to, identifiable)| serde_json::json!({
                    "name": name, "from": from, "to": to, "identifiable": identifiable,
                })).collect::<Vec<_>>(),
            },
            "errors": {
                "calibration": {"before": stats(&cal_before), "after": stats(&cal_after)},
                "held_out": {"before": stats(&held_before), "after": stats(&held_after)},
            },
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!(
        "timed {} AITER rows and {} tilegen kernel-shapes on {device_name} ({cu_num} CUs), median of {} launches after {} warm-up",
        aiter.len(),
        tilegen_rows.iter().filter(|r| r.result.is_ok()).count(),
        settings.repeats(),
        settings.warmup()
    );
    let pct = |v: f64| format!("{:.1}%", 100.0 * v);
    for (label, before, after) in [
        ("calibration", cal_before, cal_after),
        ("held-out", held_before, held_after),
    ] {
        if before.rows() + before.failed() > 0 {
            println!(
                "  {label:<12} {:>3} rows: median / p90 error {} / {} before the refit, {} / {} after",
                before.rows(),
                pct(before.median()),
                pct(before.p90()),
                pct(after.median()),
                pct(after.p90())
            );
        }
    }
    print!("{}", refit.fitted().report());
    for p in [&csv_path, &params_path, &report_path] {
        println!("wrote {}", p.display());
    }
    Ok(())
}

/// `v`, or `null` in JSON when it is not a number.
fn finite(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// report.txt: what was measured and how, each row, and the refit.
fn report_text(
    device: &str,
    cu_num: u32,
    settings: &TimingSettings,
    aiter: &[(CalibrationRow, TableRow, measure::DeviceTiming)],
    tilegen_rows: &[TilegenRow],
    refit: &str,
) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tilegen calibrate on {device} ({cu_num} CUs): {} warm-up and {} timed launches per kernel and shape; a time is the median of the device's profiled dispatch times.",
        settings.warmup(),
        settings.repeats()
    );
    let _ = writeln!(
        s,
        "errRatio of AITER's rows: outputs outside AITER's tolerance (|ref - out| <= {} + {} |out|) among up to {} x {} sampled elements of D after the last launch; tilegen's rows (errRatio - here): 0 in the CSV, not checked (timed on zeroed inputs, as `tune --by device` times them).\n",
        measure::CHECK_ATOL,
        measure::CHECK_RTOL,
        measure::CHECK_ROWS,
        measure::CHECK_COLS
    );
    let _ = writeln!(
        s,
        "{:<12} {:<8} {:>6} {:>6} {:>6} {:>5} {:>10} {:>10} {:>7} {:>8}",
        "set", "kernel", "M", "N", "K", "split", "device us", "AITER us", "spread", "errRatio"
    );
    for (r, t, d) in aiter {
        let _ = writeln!(
            s,
            "{:<12} {:<8} {:>6} {:>6} {:>6} {:>5} {:>10.4} {:>10.4} {:>7.3} {:>8}",
            r.set().label(),
            r.kernel().tile_label(),
            t.m(),
            t.n(),
            t.k(),
            t.log2_k_split(),
            t.us(),
            r.row().us(),
            d.spread(),
            t.err_ratio()
        );
    }
    for r in tilegen_rows {
        match &r.result {
            Ok((t, spread)) => {
                let _ = writeln!(
                    s,
                    "{:<12} {:<8} {:>6} {:>6} {:>6} {:>5} {:>10.4} {:>10} {:>7.3} {:>8}  {}",
                    "tilegen",
                    "-",
                    t.m(),
                    t.n(),
                    t.k(),
                    t.log2_k_split(),
                    t.us(),
                    "-",
                    spread,
                    "-",
                    r.kernel
                );
            }
            Err(why) => {
                let _ = writeln!(s, "tilegen {} at {}: {why}", r.kernel, r.shape);
            }
        }
    }
    s.push('\n');
    s.push_str(refit);
    s
}
