//! `tilegen`: generate, build, run and check MXFP4 GEMM kernels for gfx950.

mod build;
mod report;
mod spec;
mod weights;

use anyhow::Result;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "tilegen",
    version,
    about = "MXFP4 GEMM kernel generator for AMD gfx950 (MI355X)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Preshuffle the MXFP4 weights of a safetensors file for preshuffled-B kernels.
    Preshuffle(weights::PreshuffleArgs),
    /// Undo `preshuffle`: restore the original layouts, shapes and K.
    Unshuffle(weights::UnshuffleArgs),
    /// Compile one kernel ahead of time and print its resource report.
    Build(build::BuildArgs),
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Preshuffle(args) => weights::preshuffle(args),
        Command::Unshuffle(args) => weights::unshuffle(args),
        Command::Build(args) => build::run(args),
    }
}
