//! `tilegen`: generate, build, run and check MXFP4 GEMM kernels for gfx950.

mod build;
mod emu;
mod gemm;
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
    /// Build a kernel, run it on random MXFP4 inputs on the emulator and check it against the
    /// CPU reference (exits non-zero on disagreement).
    Gemm(gemm::GemmArgs),
    /// Preshuffle the MXFP4 weights of a safetensors file for preshuffled-B kernels.
    Preshuffle(weights::PreshuffleArgs),
    /// Undo `preshuffle`: restore the original layouts, shapes and K.
    Unshuffle(weights::UnshuffleArgs),
    /// Compile one kernel ahead of time and print its resource report.
    Build(build::BuildArgs),
    /// Run or disassemble any gfx950 code object on the emulator.
    #[command(subcommand)]
    Emu(emu::EmuCommand),
}

fn main() -> Result<()> {
    // Like other Unix tools, end quietly when the reader of our output goes away (`| head`)
    // instead of failing on the write.
    // SAFETY: resetting a signal disposition at startup, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Gemm(args) => gemm::run(args),
        Command::Preshuffle(args) => weights::preshuffle(args),
        Command::Unshuffle(args) => weights::unshuffle(args),
        Command::Build(args) => build::run(args),
        Command::Emu(cmd) => emu::run(cmd),
    }
}
