//! `tilegen gemm`: the main job. Build a kernel for a spec, run it on random MXFP4 inputs on the
//! chosen device (`--device`, by default a gfx950 GPU if there is one, else the emulator), check
//! it against the CPU reference, report.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;

use tilegen::kernels::LaunchError;
use tilegen::mx::{MxMatrix, reference_gemm};
use tilegen::runtime::Limits;
use tilegen::timing::LoopExtrapolation;
use tilegen_output::Output;

use crate::device::DeviceArgs;
use crate::session::Session;
use crate::spec::SpecArgs;
use crate::timing::KLoop;

#[derive(Args)]
pub struct GemmArgs {
    /// Rows of A and C.
    #[arg(long)]
    m: usize,
    /// Rows of B, columns of C (a multiple of 16).
    #[arg(long)]
    n: usize,
    /// Reduction length (a multiple of 256).
    #[arg(long)]
    k: usize,
    #[command(flatten)]
    spec: SpecArgs,
    #[command(flatten)]
    device: DeviceArgs,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Leave kernel.hsaco, kernel.s, kernel.ll, report.json, the inputs (a.bin, b.bin, sfa.bin,
    /// sfb.bin, row-major before any preshuffle) and the result c.bin here.
    #[arg(long)]
    emit_dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Run the kernel this kernel pack serves for the shape (no compiling; no spec flags).
    #[arg(long, value_name = "PACK_DIR")]
    pack: Option<PathBuf>,
    /// Also print the kernel's modeled MI355X time at this shape (the timing model, on
    /// full-size zero buffers).
    #[arg(long)]
    timing: bool,
    /// Only the modeled time: no inputs, no run, no check (any shape the kernel accepts, full
    /// size included).
    #[arg(long, conflicts_with_all = ["timing", "emit_dir"])]
    timing_only: bool,
    /// Simulate every K step (by default a main loop of more than 20 steps, K over
    /// bk-elems x split-k, is timed from runs of 4 and 16 steps).
    #[arg(long)]
    full_k: bool,
    #[command(flatten)]
    model: crate::timing::ModelArgs,
}

pub fn run(a: GemmArgs) -> Result<()> {
    let packed = a
        .pack
        .as_deref()
        .map(|dir| crate::pack::gemm_kernel(dir, &a.spec, a.m, a.n, a.k))
        .transpose()?;
    let spec = packed
        .as_ref()
        .map_or_else(|| a.spec.spec(), |k| Ok(k.spec().clone()))?;
    // Everything that can be refused is refused before inputs are made or LLVM runs.
    spec.validate()
        .with_context(|| format!("checking {}", spec.kernel_name()))?;
    spec.check_problem(a.m, a.n, a.k)?;
    let timing = a.timing || a.timing_only;
    let trace_out = if timing {
        a.model.check()?
    } else {
        if a.full_k {
            bail!("--full-k goes with --timing or --timing-only");
        }
        a.model.refuse_without("--timing or --timing-only")?;
        None
    };
    if a.timing_only {
        let kernel = match packed {
            Some(k) => k,
            None => spec
                .build()
                .with_context(|| format!("building {}", spec.kernel_name()))?,
        };
        let k_loop = k_loop(&kernel, a.k, a.full_k);
        let p = predict(&kernel, a.m, a.n, a.k, &a.model, trace_out, k_loop)?;
        if a.json {
            let v = serde_json::json!({
                "problem": {"m": a.m, "n": a.n, "k": a.k},
                "kernel": kernel.name(),
                "spec": kernel.spec(),
                "cache_key": kernel.cache_key(),
                "report": kernel.report(),
                "timing": p.gemm,
                "timing_reduce": p.reduce,
                "timing_us": p.us(),
                "timing_k": k_loop_json(&k_loop),
                "tflops": 2.0 * a.m as f64 * a.n as f64 * a.k as f64 / (p.us() * 1e-6) / 1e12,
            });
            println!("{}", serde_json::to_string_pretty(&v)?);
        } else {
            println!("MXFP4 GEMM {}x{}x{} on the timing model", a.m, a.n, a.k);
            crate::report::print_report(&kernel);
            print_timing(&p, a.m, a.n, a.k, &k_loop)?;
        }
        return Ok(());
    }
    check_memory(a.m, a.n, a.k, spec.out_dtype.bytes())?;
    let outputs = match &a.emit_dir {
        Some(dir) => Some(emit_outputs(dir)?),
        None => None,
    };
    let t = Instant::now();
    let kernel = match packed {
        Some(k) => k,
        None => spec
            .build()
            .with_context(|| format!("building {}", spec.kernel_name()))?,
    };
    let build_s = t.elapsed().as_secs_f64();
    let am = MxMatrix::random(a.m, a.k, a.seed).context("making A")?;
    let bm = MxMatrix::random(a.n, a.k, a.seed ^ 0x9e37_79b9_7f4a_7c15).context("making B")?;
    let t = Instant::now();
    let inputs = kernel
        .prepare_inputs(&am, &bm)
        .context("preparing inputs")?;
    let prep_s = t.elapsed().as_secs_f64();
    let session = Session::open(a.device.device, Limits::default(), a.json)?;
    let device = session.device();
    let (c, report) = match session.launch(|d| kernel.run(d, &inputs)) {
        Ok(r) => r,
        Err(LaunchError::Runtime(e)) => {
            return Err(session.error(e)).with_context(|| format!("running {}", kernel.name()));
        }
        Err(e) => return Err(e).with_context(|| format!("running {}", kernel.name())),
    };
    let t = Instant::now();
    let reference = reference_gemm(&am, &bm).context("reference GEMM")?;
    let cmp = c.compare(&reference)?;
    let ref_s = t.elapsed().as_secs_f64();
    let stats = report.stats.clone();
    let flops = 2.0 * a.m as f64 * a.n as f64 * a.k as f64;
    let k_loop = k_loop(&kernel, a.k, a.full_k);
    let prediction = match a.timing {
        true => Some(predict(
            &kernel, a.m, a.n, a.k, &a.model, trace_out, k_loop,
        )?),
        false => None,
    };
    let summary = serde_json::json!({
        "timing": prediction.as_ref().map(|p| &p.gemm),
        "timing_reduce": prediction.as_ref().and_then(|p| p.reduce.as_ref()),
        "timing_us": prediction.as_ref().map(Timed::us),
        "timing_k": prediction.as_ref().map(|_| k_loop_json(&k_loop)),
        "problem": {"m": a.m, "n": a.n, "k": a.k, "seed": a.seed},
        "kernel": kernel.name(),
        "spec": kernel.spec(),
        "cache_key": kernel.cache_key(),
        "device": device.name(),
        "grid": kernel.grid(a.m, a.n),
        "block": kernel.spec().threads(),
        "report": kernel.report(),
        "main_loop": tilegen::kernels::asm::LoopStats::from_asm(kernel.asm()),
        "timings": {
            "build_ms": build_s * 1e3,
            "compile_ms": kernel.timings().total().as_secs_f64() * 1e3,
            "prepare_ms": prep_s * 1e3,
            "emulate_ms": report.wall.as_secs_f64() * 1e3,
            "reference_ms": ref_s * 1e3,
        },
        "emulator": stats,
        "check": {
            "passed": cmp.passed(),
            "elements": cmp.elements,
            "mismatches": cmp.mismatches,
            "summary": cmp.to_string(),
        },
    });
    if let Some(outputs) = &outputs {
        emit(outputs, &kernel, &am, &bm, c.bytes(), &summary)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!(
            "MXFP4 GEMM {}x{}x{} on the {}",
            a.m,
            a.n,
            a.k,
            device.name()
        );
        crate::report::print_report(&kernel);
        let grid = kernel.grid(a.m, a.n);
        match &stats {
            Some(stats) => println!(
                "  grid {}x{}x{} workgroups of {} work-items; emulated in {:.3} s: {} wave-instructions, {} MFMAs ({:.1} GFLOP)",
                grid[0],
                grid[1],
                grid[2],
                kernel.spec().threads(),
                report.wall.as_secs_f64(),
                stats.wave_instructions(),
                stats.mfma(),
                flops / 1e9
            ),
            None => println!(
                "  grid {}x{}x{} workgroups of {} work-items; ran in {:.6} s ({:.1} GFLOP, {:.1} TFLOP/s)",
                grid[0],
                grid[1],
                grid[2],
                kernel.spec().threads(),
                report.wall.as_secs_f64(),
                flops / 1e9,
                flops / report.wall.as_secs_f64().max(1e-9) / 1e12
            ),
        }
        println!("  check against the CPU reference: {cmp}");
        if let Some(p) = &prediction {
            print_timing(p, a.m, a.n, a.k, &k_loop)?;
        }
        if let Some(dir) = &a.emit_dir {
            println!("  wrote kernel, inputs and result to {}", dir.display());
        }
    }
    if !cmp.passed() {
        bail!("the result disagrees with the reference: {cmp}");
    }
    Ok(())
}

/// The main loop of `kernel` at reduction length `k`: one step is a K tile of every split. A
/// K of whole steps is timed from two short runs when long enough (unless `full_k`); a K
/// with a tail tile is simulated whole.
fn k_loop(kernel: &tilegen::CompiledKernel, k: usize, full_k: bool) -> KLoop {
    let spec = kernel.spec();
    let step = u64::from(spec.bk_elems) * u64::from(spec.split_k());
    let steps = match k as u64 {
        k if step > 0 && k.is_multiple_of(step) => u32::try_from(k / step).unwrap_or(0),
        _ => 0,
    };
    KLoop {
        steps,
        extrapolation: (!full_k).then(LoopExtrapolation::default),
    }
}

fn k_loop_json(k_loop: &KLoop) -> serde_json::Value {
    serde_json::json!({
        "steps": k_loop.steps,
        "extrapolated": k_loop.extrapolated(),
        "runs": k_loop
            .extrapolation
            .filter(|_| k_loop.extrapolated())
            .map(|x| [x.short_steps, x.long_steps]),
    })
}

/// The model's times of the kernels of one launch: the GEMM's, and its split-K reduction's
/// when it has one.
struct Timed {
    gemm: tilegen::timing::Prediction,
    reduce: Option<tilegen::timing::Prediction>,
}

impl Timed {
    /// The launch's time: every kernel's.
    fn us(&self) -> f64 {
        self.gemm.us + self.reduce.as_ref().map_or(0.0, |p| p.us)
    }
}

/// The modeled MI355X time of `kernel`'s launch at `m x n x k`, on lazily zeroed full-size
/// buffers: the GEMM (a long main loop per `k_loop`; the trace is its), then the split-K
/// reduction if the launch has one.
fn predict(
    kernel: &tilegen::CompiledKernel,
    m: usize,
    n: usize,
    k: usize,
    model: &crate::timing::ModelArgs,
    trace_out: Option<Output>,
    k_loop: KLoop,
) -> Result<Timed> {
    let gemm = predict_gemm(kernel, m, n, k, model, trace_out, k_loop)?;
    let Some(reduce) = kernel.reduce_name() else {
        return Ok(Timed { gemm, reduce: None });
    };
    let c_bytes = kernel.buffer_sizes(m, n, k)?.c;
    let workspace = kernel.workspace_bytes(m, n);
    let p = crate::timing::predict(
        kernel.code_object(),
        &reduce,
        &kernel.reduce_launch_config(m, n),
        model,
        None,
        |memory| {
            let c = crate::timing::lazy_zero(memory, c_bytes.max(1))?;
            let w = crate::timing::lazy_zero(memory, workspace.max(1))?;
            Ok(kernel.reduce_arguments(c, w, m, n).to_vec())
        },
    )
    .with_context(|| format!("modeling {reduce} at {m}x{n}"))?;
    Ok(Timed {
        gemm,
        reduce: Some(p),
    })
}

/// The GEMM kernel's part of [`predict`]: its C is the split-K workspace when the reduction
/// writes C.
fn predict_gemm(
    kernel: &tilegen::CompiledKernel,
    m: usize,
    n: usize,
    k: usize,
    model: &crate::timing::ModelArgs,
    trace_out: Option<Output>,
    k_loop: KLoop,
) -> Result<tilegen::timing::Prediction> {
    let mut sizes = kernel.buffer_sizes(m, n, k)?;
    if kernel.reduce_name().is_some() {
        sizes.c = kernel.workspace_bytes(m, n);
    }
    let config = kernel.launch_config(m, n);
    let step_elems = k / k_loop.steps.max(1) as usize;
    crate::timing::predict_loop(
        kernel.code_object(),
        kernel.name(),
        &config,
        model,
        trace_out,
        |memory| {
            let mut zero = |bytes: u64| crate::timing::lazy_zero(memory, bytes.max(1));
            Ok(tilegen::kernels::GemmBuffers {
                c: zero(sizes.c)?,
                a: zero(sizes.a)?,
                b: zero(sizes.b)?,
                sfa: zero(sizes.sfa)?,
                sfb: zero(sizes.sfb)?,
            })
        },
        // The short runs keep the buffers (sized for the whole K) and shorten K alone.
        |bufs, steps| {
            let at_k = steps.map_or(k, |s| s as usize * step_elems);
            Ok(kernel.arguments(bufs, m, n, at_k).to_vec())
        },
        Some(k_loop),
    )
    .with_context(|| format!("modeling {} at {m}x{n}x{k}", kernel.name()))
}

fn print_timing(t: &Timed, m: usize, n: usize, k: usize, k_loop: &KLoop) -> Result<()> {
    let flops = 2.0 * m as f64 * n as f64 * k as f64;
    println!(
        "  modeled MI355X time: {:.2} us = {:.1} TFLOP/s",
        t.us(),
        flops / (t.us() * 1e-6) / 1e12
    );
    if let Some(r) = &t.reduce {
        println!(
            "  of which the GEMM {:.2} us and the split-K reduction {:.2} us (its own launch)",
            t.gemm.us, r.us
        );
    }
    let p = &t.gemm;
    match k_loop.extrapolation.filter(|_| k_loop.extrapolated()) {
        Some(x) => println!(
            "  K loop: {} steps, extrapolated from simulations of {} and {} (--full-k simulates every step)",
            k_loop.steps, x.short_steps, x.long_steps
        ),
        None => println!("  K loop: every step simulated"),
    }
    let mut text = Vec::new();
    crate::timing::describe(p, &mut text)?;
    for line in String::from_utf8_lossy(&text).lines() {
        println!("    {line}");
    }
    if let Some(r) = &t.reduce {
        println!("  split-K reduction:");
        let mut text = Vec::new();
        crate::timing::describe(r, &mut text)?;
        for line in String::from_utf8_lossy(&text).lines() {
            println!("    {line}");
        }
    }
    Ok(())
}

/// Files `--emit-dir` leaves, in the order they are written.
const EMITTED: [&str; 9] = [
    "kernel.hsaco",
    "kernel.s",
    "kernel.ll",
    "a.bin",
    "b.bin",
    "sfa.bin",
    "sfb.bin",
    "c.bin",
    "report.json",
];

/// Creates the directory and checks every file in it can be written, before the work.
fn emit_outputs(dir: &Path) -> Result<Vec<Output>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    EMITTED
        .iter()
        .map(|name| Ok(Output::check(dir.join(name))?))
        .collect()
}

fn emit(
    outputs: &[Output],
    kernel: &tilegen::CompiledKernel,
    a: &MxMatrix,
    b: &MxMatrix,
    c: &[u8],
    summary: &serde_json::Value,
) -> Result<()> {
    let report = serde_json::to_vec_pretty(summary)?;
    let files: [&[u8]; 9] = [
        kernel.code_object(),
        kernel.asm().as_bytes(),
        kernel.ir().as_bytes(),
        a.data(),
        b.data(),
        a.scales(),
        b.scales(),
        c,
        &report,
    ];
    for (out, bytes) in outputs.iter().zip(files) {
        out.write(bytes)?;
    }
    Ok(())
}

/// Refuses a problem whose host memory would not fit, before any of it is allocated.
///
/// The job holds, at its peak: A and B with their scales as generated, again as laid out for
/// the kernel, and a third time in the emulator's device memory; B unpacked to one byte per
/// element by the reference; C on the device, copied back and decoded (up to 4 bytes each);
/// and the reference's two f32 matrices (values and magnitude sums).
fn check_memory(m: usize, n: usize, k: usize, out_bytes: u32) -> Result<()> {
    let (m, n, k, out) = (m as u128, n as u128, k as u128, u128::from(out_bytes));
    let operands = (m + n) * (k / 2 + k / 32);
    let need = 3 * operands + n * k + m * n * (2 * out + 4 + 8);
    tilegen_host::ensure_fits(
        "the problem (operands three times over, the reference's unpacked B and two f32 copies of C)",
        need,
    )?;
    Ok(())
}
