//! The MI355X timing model on the command line: `tilegen emu time`, and the `--timing` of
//! `emu run`, `gemm`, `moe` and `attention`.
//!
//! A prediction runs the kernel's real code on the emulator's timing model. Buffers the model
//! does not need the contents of are zero memory allocated lazily (`zero:BYTES`, and the
//! outputs), so a full-size launch fits in host memory.

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::Args;
use tilegen::codeobj::CodeObject;
use tilegen::emu::exec::{DeviceMemory, Program};
use tilegen::runtime::{ArgValue, DevicePtr, LaunchConfig, kernargs};
use tilegen::timing::{
    self, CrossXcd, LoopExtrapolation, Method, Params, Prediction, TimingLaunch, TimingOptions,
    TraceOptions,
};
use tilegen_output::Output;

/// How the model runs (shared by every command that predicts a time).
#[derive(Args, Clone, Debug)]
pub struct ModelArgs {
    /// Timing parameters that override the built-in MI355X table (a TOML file with the
    /// layout of the model's params.toml; every entry names its source).
    #[arg(long, value_name = "FILE")]
    pub params: Option<PathBuf>,
    /// Simulate every workgroup on every CU instead of one sampled round of one XCD (slow on
    /// large grids; the sampled method is within about 10% of it).
    #[arg(long)]
    pub full_simulation: bool,
    /// Skip the census of the other XCDs' loads: the sampled XCD then fetches from HBM every
    /// line it misses, even those other XCDs load in the same round (faster, and slower
    /// predictions for kernels whose operands several XCDs share).
    #[arg(long, conflicts_with = "full_simulation")]
    pub no_census: bool,
    /// Write a Chrome/Perfetto trace (JSON trace events; open in ui.perfetto.dev) of one CU's
    /// waves over the first cycles of the run. Commands that time several kernels write one
    /// file each, the kernel's stage before the extension (`t.json`: `t.gate-up.json`,
    /// `t.down.json`; attention's `t.main.json`, `t.reduce.json`).
    #[arg(long, value_name = "FILE")]
    pub trace: Option<PathBuf>,
    /// Cycles the trace covers.
    #[arg(long, default_value_t = 20_000, value_name = "CYCLES")]
    pub trace_cycles: u64,
}

/// One buffer or scalar of a launch to time.
#[derive(Debug, Clone)]
pub enum TimedArg {
    /// A buffer holding these bytes.
    Bytes(Vec<u8>),
    /// A zeroed buffer of this many bytes, allocated lazily.
    Zero(u64),
    /// A scalar (or null pointer).
    Value(ArgValue),
}

impl ModelArgs {
    /// Checks the parameter file and the outputs before any work (the kernel is built only
    /// after a bad `--params` has been refused); returns the trace file's output.
    pub fn check(&self) -> Result<Option<Output>> {
        self.params()?;
        self.trace
            .as_deref()
            .map(|p| Output::check(p).with_context(|| format!("--trace {}", p.display())))
            .transpose()
    }

    /// Refuses the model's flags when nothing is modelled (`with` names the flags that turn
    /// the model on).
    pub fn refuse_without(&self, with: &str) -> Result<()> {
        if self.params.is_some() || self.full_simulation || self.no_census || self.trace.is_some() {
            bail!("--params, --full-simulation, --no-census and --trace go with {with}");
        }
        Ok(())
    }

    /// The method in the words of the JSON reports: `rounds` (sampled) or `full`.
    pub fn method_name(&self) -> &'static str {
        match self.options().method {
            Method::Rounds => "rounds",
            Method::Full => "full",
        }
    }

    /// The timing parameters: the `--params` file's, else the built-in MI355X table.
    pub fn params(&self) -> Result<Params> {
        match &self.params {
            Some(p) => Params::from_file(p).with_context(|| format!("--params {}", p.display())),
            None => Ok(Params::mi355x()),
        }
    }

    /// The model's options from the flags.
    pub fn options(&self) -> TimingOptions {
        TimingOptions {
            trace: self.trace.as_ref().map(|_| TraceOptions {
                cycles: self.trace_cycles,
            }),
            method: if self.full_simulation {
                Method::Full
            } else {
                Method::Rounds
            },
            cross_xcd: if self.no_census {
                CrossXcd::Ignore
            } else {
                CrossXcd::default()
            },
            ..TimingOptions::default()
        }
    }
}

/// Allocates `args` in the model's memory: their explicit argument values.
pub fn materialize(memory: &mut DeviceMemory, args: &[TimedArg]) -> Result<Vec<ArgValue>> {
    args.iter()
        .enumerate()
        .map(|(i, a)| {
            Ok(match a {
                TimedArg::Bytes(b) => {
                    ArgValue::Ptr(DevicePtr(memory.upload(b).with_context(|| {
                        format!("argument {i}: a {}-byte buffer", b.len())
                    })?))
                }
                TimedArg::Zero(n) => ArgValue::Ptr(lazy_zero(memory, *n)?),
                TimedArg::Value(v) => v.clone(),
            })
        })
        .collect()
}

/// A zeroed buffer of `bytes` that takes host memory only where the kernel writes.
pub fn lazy_zero(memory: &mut DeviceMemory, bytes: u64) -> Result<DevicePtr> {
    Ok(DevicePtr(memory.alloc_lazy(bytes).with_context(|| {
        format!("a lazily zeroed {bytes}-byte buffer")
    })?))
}

/// Predicts the MI355X time of `kernel` of `code_object` launched as `config`; `args` makes
/// its explicit arguments (in metadata order) in the model's memory. Writes the trace if asked.
pub fn predict(
    code_object: &[u8],
    kernel: &str,
    config: &LaunchConfig,
    model: &ModelArgs,
    trace_out: Option<Output>,
    args: impl FnOnce(&mut DeviceMemory) -> Result<Vec<ArgValue>>,
) -> Result<Prediction> {
    predict_loop(
        code_object,
        kernel,
        config,
        model,
        trace_out,
        args,
        |values, _| Ok(values.clone()),
        None,
    )
}

/// A main loop of `steps` steps timed from two short runs when `extrapolation` applies (see
/// [`tilegen::timing::predict_loop`]).
#[derive(Debug, Clone, Copy)]
pub struct KLoop {
    /// Steps of the launch's main loop.
    pub steps: u32,
    /// The short runs; `None` simulates every step.
    pub extrapolation: Option<LoopExtrapolation>,
}

impl KLoop {
    /// Whether the prediction of this loop is extrapolated.
    pub fn extrapolated(&self) -> bool {
        self.extrapolation.is_some_and(|x| x.applies(self.steps))
    }
}

/// [`predict`] of a launch whose main loop may be extrapolated: `alloc` makes the launch's
/// buffers in the model's memory, `args(&buffers, steps)` its arguments with the loop's trip
/// count set to `steps` (`None`: the launch's own).
#[allow(clippy::too_many_arguments)]
pub fn predict_loop<B>(
    code_object: &[u8],
    kernel: &str,
    config: &LaunchConfig,
    model: &ModelArgs,
    trace_out: Option<Output>,
    alloc: impl FnOnce(&mut DeviceMemory) -> Result<B>,
    args: impl Fn(&B, Option<u32>) -> Result<Vec<ArgValue>>,
    k_loop: Option<KLoop>,
) -> Result<Prediction> {
    let co = CodeObject::parse(code_object).context("reading the code object")?;
    let meta = co
        .kernel(kernel)
        .with_context(|| format!("the code object has no kernel {kernel}"))?;
    let params = model.params()?;
    let mut memory = DeviceMemory::new();
    let program =
        Program::load(&mut memory, &co, kernel).context("loading the kernel for the model")?;
    let buffers = alloc(&mut memory)?;
    let segment = kernargs::build(meta, config, &args(&buffers, None)?)
        .context("building the kernel arguments")?;
    let launch = TimingLaunch {
        grid: config.grid,
        block: config.block,
        dynamic_lds: config.dynamic_lds,
        kernarg: &segment,
    };
    let kernarg_for = |steps: u32| -> Result<Vec<u8>> {
        kernargs::build(meta, config, &args(&buffers, Some(steps))?)
            .with_context(|| format!("building the kernel arguments of {steps} loop steps"))
    };
    let k_loop = k_loop.unwrap_or(KLoop {
        steps: 0,
        extrapolation: None,
    });
    let prediction = timing::predict_loop::<anyhow::Error>(
        &mut memory,
        &program,
        &launch,
        k_loop.steps,
        &kernarg_for,
        &params,
        &model.options(),
        k_loop.extrapolation,
    )
    .context("the timing model")?;
    if let Some(out) = trace_out {
        write_trace(out, &prediction)?;
    }
    Ok(prediction)
}

/// Writes the prediction's trace (when it has one) to `out`.
pub fn write_trace(out: Output, prediction: &Prediction) -> Result<()> {
    if let Some(trace) = prediction.trace.as_ref() {
        let mut file = out.create()?;
        timing::write_trace(trace, &mut file).context("writing the trace")?;
        file.commit()?;
    }
    Ok(())
}

/// The trace file of one kernel of several launched together: `--trace`'s path with `name`
/// before its extension (`t.json` -> `t.down.json`), checked before any work.
pub fn trace_for(model: &ModelArgs, name: &str) -> Result<Option<(PathBuf, Output)>> {
    let Some(path) = &model.trace else {
        return Ok(None);
    };
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let file = match path.extension() {
        Some(ext) => format!("{stem}.{name}.{}", ext.to_string_lossy()),
        None => format!("{stem}.{name}"),
    };
    let p = path.with_file_name(file);
    let out = Output::check(&p).with_context(|| format!("--trace {}", p.display()))?;
    Ok(Some((p, out)))
}

/// The prediction for a person: time, clock, MFMA busy, HBM bandwidth, the bound and the
/// per-SIMD stall breakdown.
pub fn describe(p: &Prediction, w: &mut impl Write) -> Result<()> {
    writeln!(
        w,
        "predicted MI355X time: {:.2} us ({:.2} us launch) at {:.2} GHz, {} cycles",
        p.us, p.launch_us, p.clock_ghz, p.cycles
    )?;
    writeln!(
        w,
        "MFMA busy {:.1}%, HBM {:.0} GB/s, bound: {}",
        100.0 * p.mfma_busy,
        p.hbm_gbs,
        p.bound.name()
    )?;
    writeln!(
        w,
        "occupancy: {} waves per SIMD, {} workgroups per CU (limited by {}); {} of {} workgroups simulated ({})",
        p.occupancy.waves_per_simd,
        p.occupancy.workgroups_per_cu,
        p.occupancy.limiter.name(),
        p.workgroups_simulated,
        p.workgroups_total,
        p.method_detail
    )?;
    writeln!(
        w,
        "per-SIMD cycles (simulated CUs that held a workgroup, summed):"
    )?;
    for s in &p.stalls {
        let mut parts: Vec<(&str, u64)> = s
            .cycles
            .by_reason()
            .into_iter()
            .filter(|r| r.1 > 0)
            .collect();
        parts.sort_by_key(|r| std::cmp::Reverse(r.1));
        let total = s.cycles.total().max(1);
        let text: Vec<String> = parts
            .iter()
            .map(|(k, v)| format!("{k} {:.1}%", 100.0 * *v as f64 / total as f64))
            .collect();
        writeln!(w, "  SIMD {}: {}", s.simd, text.join(", "))?;
    }
    Ok(())
}

/// Reads an `in:`/`inout:` file for the model.
pub fn read_input(path: &Path) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    if bytes.is_empty() {
        bail!(
            "{} is empty: a buffer needs at least one byte",
            path.display()
        );
    }
    Ok(bytes)
}
