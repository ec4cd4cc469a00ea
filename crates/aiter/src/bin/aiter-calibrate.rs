//! `aiter-calibrate [--out DIR] [--corpus DIR]`: fits the predictors on the calibration rows of
//! AMD's MI355X-measured f4gemm table, prints their error tables (calibration and held-out),
//! and writes `calibration.csv` and one SVG plot per predictor into DIR (default
//! `target/calibrate`). `cargo xtask calibrate` runs it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tilegen_aiter::calibrate::{Evaluation, Predictor, Roofline, calibration_rows};
use tilegen_aiter::{Corpus, default_dir};

const USAGE: &str = "usage: aiter-calibrate [--out DIR] [--corpus DIR]\n  \
    --out DIR     where calibration.csv and the plots go (default: <workspace>/target/calibrate)\n  \
    --corpus DIR  the AITER corpus (default: $TILEGEN_AITER_DIR or <workspace>/target/aiter)";

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

fn main() -> ExitCode {
    let mut out = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/calibrate");
    let mut corpus_dir = default_dir();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut value = |flag: &str| {
            args.next()
                .map(PathBuf::from)
                .ok_or_else(|| format!("{flag} needs a directory"))
        };
        let parsed = match arg.as_str() {
            "--out" => value("--out").map(|v| out = v),
            "--corpus" => value("--corpus").map(|v| corpus_dir = v),
            "-h" | "--help" => {
                println!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            other => Err(format!("unknown argument {other:?}")),
        };
        if let Err(e) = parsed {
            eprintln!("aiter-calibrate: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    }
    match run(&corpus_dir, &out) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("aiter-calibrate: error: {}", error_chain(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

fn run(corpus_dir: &Path, out: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let corpus = Corpus::open(corpus_dir)?;
    let rows = calibration_rows(&corpus)?;
    let roofline = Roofline::fit(&rows)?;
    // The cycle-level timing model joins here as a second `&dyn Predictor`.
    let predictors: Vec<&dyn Predictor> = vec![&roofline];
    let eval = Evaluation::run(&rows, &predictors);
    println!(
        "{} MI355X rows with an asm kernel: {} calibration, {} held out\n",
        rows.len(),
        rows.iter()
            .filter(|r| r.set() == tilegen_aiter::calibrate::Set::Calibration)
            .count(),
        rows.iter()
            .filter(|r| r.set() == tilegen_aiter::calibrate::Set::HeldOut)
            .count()
    );
    print!("{}", eval.table());
    std::fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    for path in eval.write(out)? {
        println!("wrote {}", path.display());
    }
    Ok(())
}
