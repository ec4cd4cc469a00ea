//! `aiter-fmoe`: the timing model on AITER's FP8 fused-MoE stage-1 asm kernels, against their
//! MI355X-measured times (the 64 asm stage-1 rows of `tuned_fmoe.csv`; all held out). Prints
//! each row and the error table (overall, by regime, by tile; sampled method against full
//! simulation) and writes `fmoe-runs.csv` and `fmoe-report.txt` into `--out` (default
//! `target/calibrate`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Parser;
use rayon::prelude::*;
use tilegen_aiter::default_dir;
use tilegen_aiter::fmoe::FmoeCorpus;
use tilegen_aiter::fmoe::model::{FmoeModel, FmoeRun, report, runs_csv};
use tilegen_output::Output;
use tilegen_timing::Params;

/// Time AITER's FP8 fused-MoE stage-1 kernels with the timing model against MI355X
/// measurements.
#[derive(Debug, Parser)]
#[command(name = "aiter-fmoe")]
struct Args {
    /// Where fmoe-runs.csv and fmoe-report.txt go (default: <workspace>/target/calibrate).
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// The AITER corpus (default: $TILEGEN_AITER_DIR or <workspace>/target/aiter).
    #[arg(long, value_name = "DIR")]
    corpus: Option<PathBuf>,
    /// Timing parameters overriding the model's params.toml.
    #[arg(long, value_name = "FILE")]
    params: Option<PathBuf>,
    /// Also simulate every workgroup (`Method::Full`) on rows whose sampled prediction took at
    /// most this many CPU seconds (0: never; default: every row).
    #[arg(long, value_name = "SECONDS", default_value_t = f64::INFINITY)]
    full_max_cpu: f64,
    /// Only the rows of these table lines (repeatable; default: every row).
    #[arg(long, value_name = "LINE")]
    line: Vec<u64>,
}

fn main() -> ExitCode {
    // End quietly when the reader of the output goes away (`| head`).
    // SAFETY: resetting a signal disposition at startup, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = Args::parse();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut s = e.to_string();
            let mut source = e.source();
            while let Some(c) = source {
                s.push_str(&format!(": {c}"));
                source = c.source();
            }
            eprintln!("aiter-fmoe: error: {s}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let corpus = FmoeCorpus::open(args.corpus.clone().unwrap_or_else(default_dir))?;
    let mut rows = corpus.rows()?;
    if !args.line.is_empty() {
        if let Some(l) = args
            .line
            .iter()
            .find(|l| !rows.iter().any(|r| r.line() == **l))
        {
            return Err(format!("no MI355X asm stage-1 row on line {l}").into());
        }
        rows.retain(|r| args.line.contains(&r.line()));
    }
    let params = match &args.params {
        Some(p) => Params::from_file(p)?,
        None => Params::mi355x(),
    };
    let model = FmoeModel::new(params);
    let runs: Vec<FmoeRun> = rows
        .par_iter()
        .map(|row| {
            let sampled = model.run(row, corpus.kernels(), false)?;
            let cheap = matches!(sampled.sampled(), Ok(t) if t.cpu_seconds <= args.full_max_cpu);
            let run = if cheap && args.full_max_cpu > 0.0 {
                model.run(row, corpus.kernels(), true)?
            } else {
                sampled
            };
            eprintln!("{}", line_of(&run));
            Ok(run)
        })
        .collect::<Result<_, tilegen_aiter::fmoe::FmoeError>>()?;
    let mut runs = runs;
    runs.sort_by_key(|r| r.row().line());
    let mut text = String::new();
    for r in &runs {
        text.push_str(&line_of(r));
        text.push('\n');
    }
    text.push('\n');
    text.push_str(&report(&runs));
    print!("{text}");
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| default_dir().join("../calibrate"));
    std::fs::create_dir_all(&out)?;
    for (name, bytes) in [
        ("fmoe-runs.csv", runs_csv(&runs)),
        ("fmoe-report.txt", text),
    ] {
        let path = out.join(name);
        write_atomically(&path, bytes.as_bytes())?;
        println!("wrote {}", path.display());
    }
    Ok(())
}

/// One row as a line of the report.
fn line_of(r: &FmoeRun) -> String {
    let p = r.launch().problem();
    let t = |x: Option<&Result<tilegen_aiter::fmoe::model::FmoeTiming, String>>| match x {
        Some(Ok(t)) => format!(
            "{:8.2} us {:+6.1}% ({:5.1} s)",
            t.us,
            100.0 * (t.us - r.row().us()) / r.row().us(),
            t.cpu_seconds
        ),
        Some(Err(e)) => format!("failed: {e}"),
        None => "-".into(),
    };
    format!(
        "line {:3} {:<9} tok {:4} d {:4} i {:3} e {:3} k {} wg {:5}/{:5} measured {:8.2} us | sampled {} | full {}",
        r.row().line(),
        r.launch().kernel().tile_label(),
        p.tokens(),
        p.model_dim(),
        p.inter_dim(),
        p.experts(),
        p.topk(),
        r.working_workgroups(),
        r.launch().workgroups(),
        r.row().us(),
        t(Some(r.sampled())),
        t(r.full()),
    )
}

fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Box<dyn std::error::Error>> {
    Output::check(path)?.write(bytes)?;
    Ok(())
}
