//! What the bench binaries that compare tilegen with AITER share: their `main`.

use std::process::ExitCode;

/// The benches' error: any error, kept with its chain of sources.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Parses the arguments (`Ok(None)`: help was asked for), runs the bench and turns the outcome
/// into the exit code: 2 with the usage for bad arguments, 1 with the error and each of its
/// sources on one line for a failed run.
pub fn main<A>(
    name: &str,
    usage: &str,
    parse: impl FnOnce() -> Result<Option<A>, String>,
    run: impl FnOnce(&A) -> Result<(), BoxError>,
) -> ExitCode {
    let args = match parse() {
        Ok(Some(a)) => a,
        Ok(None) => {
            println!("{usage}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{name}: {e}\n{usage}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("{name}: error: {e}");
            let mut src = e.source();
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}
