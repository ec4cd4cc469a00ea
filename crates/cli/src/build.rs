//! `tilegen build`: compile one kernel ahead of time.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;

use crate::spec::SpecArgs;

#[derive(Args)]
pub struct BuildArgs {
    #[command(flatten)]
    spec: SpecArgs,
    /// Where to write the code object.
    #[arg(short, long)]
    output: PathBuf,
    /// Also write LLVM's assembly listing here.
    #[arg(long)]
    asm: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(args: BuildArgs) -> Result<()> {
    let spec = args.spec.spec();
    let kernel = spec
        .build()
        .with_context(|| format!("building {}", spec.kernel_name()))?;
    std::fs::write(&args.output, &kernel.code_object)
        .with_context(|| format!("writing {}", args.output.display()))?;
    if let Some(p) = &args.asm {
        std::fs::write(p, &kernel.asm).with_context(|| format!("writing {}", p.display()))?;
    }
    if args.json {
        let v = serde_json::json!({
            "kernel": kernel.name,
            "spec": kernel.spec,
            "cache_key": kernel.cache_key,
            "report": kernel.report,
            "compile_ms": kernel.timings.total().as_secs_f64() * 1e3,
            "output": args.output,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        crate::report::print_report(&kernel);
        println!(
            "wrote {} ({} bytes)",
            args.output.display(),
            kernel.code_object.len()
        );
    }
    Ok(())
}
