//! `tilegen build`: compile one kernel ahead of time.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use tilegen_output::Output;

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
    let spec = args.spec.spec()?;
    // Both outputs are checked before compiling, and the listing is written first: a failure
    // leaves no code object without its listing.
    let output = Output::check(&args.output)?;
    let asm = args.asm.as_ref().map(Output::check).transpose()?;
    // The listing costs a second codegen pass: produced only when asked for.
    let kernel = spec
        .build_with(tilegen::dsl::CompileOptions {
            emit_asm: asm.is_some(),
            emit_ir: false,
            code_object_v5: false,
        })
        .with_context(|| format!("building {}", spec.kernel_name()))?;
    if let Some(asm) = &asm {
        asm.write(kernel.asm().as_bytes())?;
    }
    output.write(kernel.code_object())?;
    if args.json {
        let v = serde_json::json!({
            "kernel": kernel.name(),
            "spec": kernel.spec(),
            "cache_key": kernel.cache_key(),
            "report": kernel.report(),
            "compile_ms": kernel.timings().total().as_secs_f64() * 1e3,
            "output": args.output,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        crate::report::print_report(&kernel);
        println!(
            "wrote {} ({} bytes)",
            args.output.display(),
            kernel.code_object().len()
        );
    }
    Ok(())
}
