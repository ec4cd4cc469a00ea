//! `tilegen`: generate, build, run and check MXFP4 GEMM kernels for gfx950.

mod attention;
mod build;
mod calibrate;
mod device;
mod emu;
mod gemm;
mod models;
mod moe;
mod pack;
mod report;
mod session;
mod spec;
mod timing;
mod tune;
mod weights;

use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use tilegen_output::OutputError;

#[derive(Parser)]
#[command(
    name = "tilegen",
    version,
    about = "MXFP4 GEMM kernel generator for AMD gfx950 (MI355X)"
)]
struct Cli {
    /// On failure print the error's full chain, with a backtrace (a user's mistake otherwise
    /// prints the chain on one line, whatever RUST_BACKTRACE says).
    #[arg(long, short, global = true)]
    verbose: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a kernel, run it on random MXFP4 inputs on the emulator and check it against the
    /// CPU reference (exits non-zero on disagreement).
    Gemm(gemm::GemmArgs),
    /// Build the paged FP8 decode attention kernels for a shape, run them on a random paged
    /// cache with a shuffled block table and check them against the CPU reference (exits
    /// non-zero on disagreement); `--timing` adds the MI355X timing model's prediction.
    Attention(attention::AttentionArgs),
    /// Build, run and check one grouped MXFP4 MoE layer (gpt-oss, DeepSeek-V3, Kimi-K2 sizes)
    /// on the emulator against the CPU reference layer (exits non-zero on disagreement).
    Moe(moe::MoeArgs),
    /// Preshuffle the MXFP4 weights of a safetensors file for preshuffled-B kernels.
    Preshuffle(weights::PreshuffleArgs),
    /// Undo `preshuffle`: restore the original layouts, shapes and K.
    Unshuffle(weights::UnshuffleArgs),
    /// Compile one kernel ahead of time and print its resource report.
    Build(build::BuildArgs),
    /// Run or disassemble any gfx950 code object on the emulator.
    #[command(subcommand)]
    Emu(emu::EmuCommand),
    /// List the devices kernels can run on: the HSA runtime's agents (or why there are none)
    /// and the emulator.
    Devices(device::DevicesArgs),
    /// Autotune tile configurations for a model's GEMM shapes into a tuning database (by the
    /// MI355X timing model, or by timed launches on a device); report, merge, Slurm scripts.
    Tune(tune::TuneArgs),
    /// Build the best kernels of a template ahead of time into a verified kernel pack; verify
    /// or inspect one.
    Pack(pack::PackArgs),
    /// Time AITER's kernels and tilegen's on an MI355X (--device hsa[:N]), write the times in
    /// AITER's tuned-table format and refit the timing model's parameters on them.
    Calibrate(calibrate::CalibrateArgs),
}

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away (`| head`)
    // instead of failing on the write.
    // SAFETY: resetting a signal disposition at startup, before any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let cli = Cli::parse();
    let verbose = cli.verbose;
    if verbose {
        // SAFETY: set at startup, before any thread exists; makes anyhow capture backtraces.
        unsafe { std::env::set_var("RUST_LIB_BACKTRACE", "1") };
    }
    match tilegen_output::install_interrupt_handler()
        .map_err(anyhow::Error::from)
        .and_then(|()| dispatch(cli))
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // RUST_BACKTRACE is for bugs (panics); a refused input prints its reasons only.
            let backtrace =
                verbose || std::env::var_os("RUST_LIB_BACKTRACE").is_some_and(|v| v != "0");
            if backtrace {
                eprintln!("error: {e:?}");
            } else {
                eprintln!("error: {e:#}");
            }
            let interrupted = e
                .chain()
                .any(|c| matches!(c.downcast_ref(), Some(OutputError::Interrupted)));
            // 128 + the signal's number, as a shell reports a command a signal stopped.
            ExitCode::from(if interrupted {
                tilegen_output::interrupt_exit_status()
            } else {
                1
            })
        }
    }
}

fn dispatch(cli: Cli) -> Result<()> {
    match cli.command {
        Command::Gemm(args) => gemm::run(args),
        Command::Moe(args) => moe::run(args),
        Command::Attention(args) => attention::run(args),
        Command::Preshuffle(args) => weights::preshuffle(args),
        Command::Unshuffle(args) => weights::unshuffle(args),
        Command::Build(args) => build::run(args),
        Command::Emu(cmd) => emu::run(cmd),
        Command::Tune(args) => tune::run(args),
        Command::Pack(args) => pack::run(args),
        Command::Devices(args) => device::devices(args),
        Command::Calibrate(args) => calibrate::run(args),
    }
}
