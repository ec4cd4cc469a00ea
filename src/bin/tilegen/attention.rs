//! `tilegen attention`: build the paged FP8 decode attention kernels for a shape, fill a paged
//! cache with a shuffled block table, run on the chosen device, check against the CPU
//! reference (non-zero exit on disagreement); `--timing` adds the MI355X timing model's
//! prediction (sampled, or with `--full-simulation` every workgroup) against the HBM roofline
//! of the KV bytes read.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;

use tilegen::codeobj::CodeObject;
use tilegen::emu::exec::{DeviceMemory, Program};
use tilegen::kernels::BuiltKernel;
use tilegen::kernels::attention::{
    AttentionBuffers, AttentionKernels, AttentionLaunchError, AttentionSpec,
};
use tilegen::mx::attention::{AttentionProblem, AttentionShape, reference_attention};
use tilegen::runtime::{DevicePtr, LaunchConfig, Limits};
use tilegen::timing::{self, Prediction, TimingLaunch};
use tilegen_output::Output;

use crate::device::DeviceArgs;
use crate::session::Session;
use crate::timing::ModelArgs;

/// The HBM peak the roofline is drawn at (MI355X: 8.0 TB/s, HBM3E).
const HBM_PEAK_GBS: f64 = 8000.0;

#[derive(Args)]
pub struct AttentionArgs {
    /// Sequences in the decode batch.
    #[arg(long)]
    batch: usize,
    /// Context length per sequence: one value for all, or one per sequence (comma separated).
    #[arg(long, value_delimiter = ',', required = true)]
    context: Vec<u32>,
    /// Query heads.
    #[arg(long)]
    q_heads: u32,
    /// KV heads (q_heads / kv_heads must be 1, 4, 8 or 16).
    #[arg(long)]
    kv_heads: u32,
    /// Elements per head (64 or 128).
    #[arg(long)]
    head_dim: u32,
    /// Rows per page of the KV cache (16, 32 or 64; 0 for a contiguous cache).
    #[arg(long)]
    page_size: u32,
    /// Workgroups the keys of one (sequence, KV head) are split over (default: chosen with
    /// --waves to fill the 256 CUs, see AttentionSpec::fit_to).
    #[arg(long)]
    split_kv: Option<u32>,
    /// Waves per workgroup, each an independent partial of the keys (default: chosen with
    /// --split-kv).
    #[arg(long)]
    waves: Option<u32>,
    /// Whether the main kernel merges the partials of keys split over workgroups (its last
    /// wave per sequence and KV head) instead of a reduce kernel (default: false). The
    /// sampled timing method does not see the merge (which wave is last is decided by the
    /// other workgroups' atomics): time it with --full-simulation.
    #[arg(long)]
    fused_reduce: Option<bool>,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    #[command(flatten)]
    device: DeviceArgs,
    /// Leave main.hsaco, main.s (and reduce.hsaco, reduce.s where a reduce kernel runs; where
    /// none does, an earlier run's are removed), the inputs (q.bin bf16,
    /// k_cache.bin and v_cache.bin FP8, block_table.bin and context_lens.bin i32, k_scales.bin
    /// and v_scales.bin f32), the result out.bin (bf16) and report.json here.
    #[arg(long)]
    emit_dir: Option<PathBuf>,
    /// Also predict the MI355X time with the timing model and compare it with the HBM roofline
    /// of the KV bytes read.
    #[arg(long)]
    timing: bool,
    /// The model's flags (one trace file per kernel).
    #[command(flatten)]
    model: ModelArgs,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

/// Files `--emit-dir` leaves.
const EMITTED: [&str; 14] = [
    "main.hsaco",
    "main.s",
    "reduce.hsaco",
    "reduce.s",
    "q.bin",
    "k_cache.bin",
    "v_cache.bin",
    "block_table.bin",
    "context_lens.bin",
    "k_scales.bin",
    "v_scales.bin",
    "out.bin",
    "report.json",
    "timing.json",
];

pub fn run(a: AttentionArgs) -> Result<()> {
    // Sizes first, from the flags alone: nothing of batch size is made before they pass.
    let max_context = check_contexts(&a.context, a.batch)?;
    let fitted = AttentionSpec::new(a.q_heads, a.kv_heads, a.head_dim, a.page_size)
        .fit_to(a.batch.try_into().unwrap_or(u32::MAX), max_context);
    let spec = fitted
        .split_kv(a.split_kv.unwrap_or(fitted.values().split_kv))
        .waves(a.waves.unwrap_or(fitted.values().waves))
        .fused_reduce(a.fused_reduce.unwrap_or(fitted.values().fused_reduce));
    spec.validate()
        .with_context(|| format!("checking {}", spec.kernel_name()))?;
    let shape = AttentionShape::for_contexts(
        a.batch,
        a.q_heads as usize,
        a.kv_heads as usize,
        a.head_dim as usize,
        a.page_size as usize,
        max_context as usize,
    )
    .context("sizing the problem")?;
    spec.check_shape(&shape)
        .with_context(|| format!("checking the problem against {}", spec.kernel_name()))?;
    check_memory(&spec, &shape)?;
    let traces = if a.timing {
        a.model.check()?;
        Traces {
            main: crate::timing::trace_for(&a.model, "main")?,
            reduce: if spec.needs_reduce() {
                crate::timing::trace_for(&a.model, "reduce")?
            } else {
                None
            },
        }
    } else {
        a.model.refuse_without("--timing")?;
        Traces::default()
    };
    let lens = contexts(&a.context, a.batch)?;
    let outputs = match &a.emit_dir {
        Some(dir) => Some(emit_outputs(dir)?),
        None => None,
    };
    let t = Instant::now();
    let kernels = spec
        .build()
        .with_context(|| format!("building {}", spec.kernel_name()))?;
    let build_s = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let problem = AttentionProblem::random(
        a.batch,
        a.q_heads as usize,
        a.kv_heads as usize,
        a.head_dim as usize,
        a.page_size as usize,
        &lens,
        spec.values().sm_scale,
        a.seed,
    )
    .context("making the inputs")?;
    let inputs_s = t.elapsed().as_secs_f64();
    kernels
        .check_inputs(&problem.inputs())
        .context("checking the inputs")?;

    let session = Session::open(a.device.device, Limits::default(), a.json)?;
    let device = session.device();
    let got = match session.launch(|d| kernels.run(d, &problem.inputs())) {
        Ok(r) => r,
        Err(AttentionLaunchError::Runtime(e)) => {
            return Err(session.error(e))
                .with_context(|| format!("running {}", kernels.main().name()));
        }
        Err(e) => return Err(e).with_context(|| format!("running {}", kernels.main().name())),
    };
    let t = Instant::now();
    let reference = reference_attention(&problem.inputs(), spec.partials() as usize)
        .context("reference attention")?;
    let cmp = reference.compare_bf16(&got.out)?;
    let ref_s = t.elapsed().as_secs_f64();
    let kv_bytes = problem.kv_bytes_read();
    let prediction = if a.timing {
        Some(predict(&kernels, &problem, &a.model, traces).context("timing model")?)
    } else {
        None
    };
    let timing_json = prediction.as_ref().map(|p| {
        let roofline_us = kv_bytes as f64 / (HBM_PEAK_GBS * 1e3);
        let model_roofline_us = kv_bytes as f64 / (p.model_hbm_gbs * 1e3);
        serde_json::json!({
            "method": a.model.method_name(),
            "main": p.main,
            "reduce": p.reduce,
            "model_s": p.model_s,
            "traces": p.traces,
            "total_us": p.total_us(),
            "kv_bytes": kv_bytes,
            "hbm_peak_gbs": HBM_PEAK_GBS,
            "hbm_roofline_us": roofline_us,
            "fraction_of_roofline": roofline_us / p.total_us(),
            "model_hbm_gbs": p.model_hbm_gbs,
            "model_hbm_roofline_us": model_roofline_us,
            "fraction_of_model_roofline": model_roofline_us / p.total_us(),
        })
    });
    let wall = |r: &tilegen::runtime::LaunchReport| r.wall.as_secs_f64() * 1e3;
    let summary = serde_json::json!({
        "problem": {
            "batch": a.batch,
            "context": lens,
            "q_heads": a.q_heads,
            "kv_heads": a.kv_heads,
            "head_dim": a.head_dim,
            "page_size": a.page_size,
            "seed": a.seed,
        },
        "spec": spec,
        "kernels": {
            "main": kernel_json(kernels.main()),
            "reduce": kernels.reduce().map(kernel_json),
        },
        "device": device.name(),
        "grid": kernels.launch_config(a.batch).grid,
        "block": spec.threads(),
        "timings": {
            "build_ms": build_s * 1e3,
            "inputs_ms": inputs_s * 1e3,
            "main_ms": wall(&got.main),
            "reduce_ms": got.reduce.as_ref().map(wall),
            "reference_ms": ref_s * 1e3,
        },
        "emulator": got.main.stats,
        "check": {
            "passed": cmp.passed(),
            "elements": cmp.elements,
            "mismatches": cmp.mismatches,
            "max_abs_err": cmp.max_abs_err,
            "relative_bound": reference.relative_bound(),
            "summary": cmp.to_string(),
        },
        "timing": timing_json,
    });
    if let Some(outputs) = &outputs {
        emit(
            outputs,
            &kernels,
            &problem,
            &got.out,
            &summary,
            timing_json.as_ref(),
        )?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_text(&a, &kernels, &lens, device.name(), &got, &cmp, &reference);
        if let (Some(p), Some(t)) = (&prediction, &timing_json) {
            let f = |key: &str| t[key].as_f64().unwrap_or(0.0);
            println!(
                "  MI355X timing model: {:.1} us (main {:.1} us{}, {:.1} us launch each), {}",
                p.total_us(),
                p.main.us,
                p.reduce
                    .as_ref()
                    .map(|r| format!(", reduce {:.1} us", r.us))
                    .unwrap_or_default(),
                p.main.launch_us,
                bound_text(&p.main),
            );
            println!(
                "  model: main {}{}; {:.1} s",
                p.main.method_detail,
                p.reduce
                    .as_ref()
                    .map(|r| format!(", reduce {}", r.method_detail))
                    .unwrap_or_default(),
                p.model_s
            );
            for path in &p.traces {
                println!("  wrote the trace {path}");
            }
            println!(
                "  KV bytes {:.1} MB: HBM roofline {:.1} us at the {:.1} TB/s peak ({:.0} % of it), {:.1} us at the model's {:.1} TB/s sustained HBM ({:.0} % of it)",
                kv_bytes as f64 / 1e6,
                f("hbm_roofline_us"),
                HBM_PEAK_GBS / 1e3,
                100.0 * f("fraction_of_roofline"),
                f("model_hbm_roofline_us"),
                p.model_hbm_gbs / 1e3,
                100.0 * f("fraction_of_model_roofline"),
            );
        }
        if let Some(dir) = &a.emit_dir {
            println!("  wrote kernels, inputs and result to {}", dir.display());
        }
    }
    if !cmp.passed() {
        bail!("the result disagrees with the reference: {cmp}");
    }
    Ok(())
}

fn bound_text(p: &Prediction) -> String {
    format!(
        "{} bound, {:.0} GB/s HBM",
        serde_json::to_value(p.bound)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default(),
        p.hbm_gbs
    )
}

fn kernel_json(k: &BuiltKernel) -> serde_json::Value {
    serde_json::json!({
        "name": k.name(),
        "report": k.report(),
        "compile_ms": k.timings().total().as_secs_f64() * 1e3,
    })
}

fn print_text(
    a: &AttentionArgs,
    kernels: &AttentionKernels,
    lens: &[i32],
    device: String,
    got: &tilegen::kernels::attention::AttentionOutput,
    cmp: &tilegen::mx::attention::AttentionComparison,
    reference: &tilegen::mx::attention::AttentionReference,
) {
    let shown: Vec<String> = lens.iter().take(8).map(|l| l.to_string()).collect();
    println!(
        "paged FP8 decode attention: batch {}, contexts [{}{}], {} q heads / {} kv heads, d {}, {} on the {}",
        a.batch,
        shown.join(", "),
        if lens.len() > 8 { ", ..." } else { "" },
        a.q_heads,
        a.kv_heads,
        a.head_dim,
        match a.page_size {
            0 => "contiguous cache".to_string(),
            p => format!("pages of {p} rows"),
        },
        device
    );
    for k in std::iter::once(kernels.main()).chain(kernels.reduce()) {
        let r = k.report();
        println!(
            "  {}: {} VGPRs, {} AGPRs, {} SGPRs, {} B LDS, {} B code, occupancy {} waves/SIMD",
            k.name(),
            r.vgpr_count,
            r.agpr_count,
            r.sgpr_count,
            r.lds_bytes,
            r.code_bytes,
            r.occupancy
        );
    }
    let grid = kernels.launch_config(a.batch).grid;
    println!(
        "  grid {}x{} workgroups of {} work-items, {} partial(s) per (sequence, kv head); ran in {:.3} s{}",
        grid[0],
        grid[1],
        kernels.spec().threads(),
        kernels.spec().partials(),
        got.main.wall.as_secs_f64(),
        got.reduce
            .as_ref()
            .map(|r| format!(" + reduce {:.3} s", r.wall.as_secs_f64()))
            .unwrap_or_default()
    );
    println!(
        "  check against the CPU reference (same FP8 points, derived bound; max bound {:.2e} of max |out|): {cmp}",
        reference.relative_bound()
    );
}

/// Checks the `--context` values against `--batch` without making anything of batch size;
/// returns the longest context.
fn check_contexts(values: &[u32], batch: usize) -> Result<u32> {
    if batch == 0 {
        bail!("--batch must be at least 1");
    }
    if values.len() != 1 && values.len() != batch {
        bail!(
            "--context has {} values: give one, or one per sequence ({batch})",
            values.len()
        );
    }
    if let Some(l) = values.iter().find(|&&l| l == 0 || l > (1 << 24)) {
        bail!("context length {l}: must be 1 to 2^24 (attention over no keys is undefined)");
    }
    Ok(values.iter().copied().max().unwrap_or(1))
}

/// One context per sequence from the flag's values (checked by [`check_contexts`]).
fn contexts(values: &[u32], batch: usize) -> Result<Vec<i32>> {
    let lens = match values {
        [one] => tilegen_host::try_vec("the context lengths", batch, *one as i32)?,
        _ => values.iter().map(|&l| l as i32).collect(),
    };
    Ok(lens)
}

/// Refuses a problem whose host memory would not fit, before any of it is made: the caches
/// three times (host, device, and once more on the way), the queries, outputs and partials.
fn check_memory(spec: &AttentionSpec, shape: &AttentionShape) -> Result<()> {
    let (rows, batch) = (shape.cache_rows as u128, shape.batch as u128);
    let (kv, d, hq) = (
        u128::from(spec.values().kv_heads),
        u128::from(spec.values().head_dim),
        u128::from(spec.values().q_heads),
    );
    let caches = 2 * rows * kv * d;
    let need = 3 * caches + batch * hq * d * (2 + 2 + 8 + 4 * u128::from(spec.partials()));
    tilegen_host::ensure_fits("the K and V caches three times over", need)?;
    Ok(())
}

fn emit_outputs(dir: &Path) -> Result<Vec<Output>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    EMITTED
        .iter()
        .map(|name| Ok(Output::check(dir.join(name))?))
        .collect()
}

fn le_bytes<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
    v.iter().flat_map(|&x| f(x)).collect()
}

fn emit(
    outputs: &[Output],
    kernels: &AttentionKernels,
    p: &AttentionProblem,
    out: &[half::bf16],
    summary: &serde_json::Value,
    timing: Option<&serde_json::Value>,
) -> Result<()> {
    let report = serde_json::to_vec_pretty(summary)?;
    let timing = serde_json::to_vec_pretty(&timing.cloned().unwrap_or_default())?;
    let reduce = kernels.reduce();
    let files: [Option<Vec<u8>>; 14] = [
        Some(kernels.main().code_object().to_vec()),
        Some(kernels.main().asm().as_bytes().to_vec()),
        reduce.map(|r| r.code_object().to_vec()),
        reduce.map(|r| r.asm().as_bytes().to_vec()),
        Some(le_bytes(&p.q, |x| x.to_bits().to_le_bytes())),
        Some(p.k_cache.clone()),
        Some(p.v_cache.clone()),
        Some(le_bytes(&p.block_table, i32::to_le_bytes)),
        Some(le_bytes(&p.context_lens, i32::to_le_bytes)),
        Some(le_bytes(&p.k_scales, f32::to_le_bytes)),
        Some(le_bytes(&p.v_scales, f32::to_le_bytes)),
        Some(le_bytes(out, |x| x.to_bits().to_le_bytes())),
        Some(report),
        Some(timing),
    ];
    for (o, bytes) in outputs.iter().zip(files) {
        match bytes {
            Some(b) => o.write(&b)?,
            None => o.remove()?,
        }
    }
    Ok(())
}

/// The timing model's predictions of both launches.
struct Predictions {
    main: Prediction,
    reduce: Option<Prediction>,
    /// The model's sustained HBM bandwidth, GB/s.
    model_hbm_gbs: f64,
    /// Seconds both predictions took.
    model_s: f64,
    /// The trace files written.
    traces: Vec<String>,
}

/// The trace file of each kernel, when `--trace` asks for them.
#[derive(Default)]
struct Traces {
    main: Option<(PathBuf, Output)>,
    reduce: Option<(PathBuf, Output)>,
}

impl Predictions {
    fn total_us(&self) -> f64 {
        self.main.us + self.reduce.as_ref().map_or(0.0, |r| r.us)
    }
}

/// Predicts both kernels on the problem: the block table and context lengths hold the
/// problem's values (they decide every address and loop count); the caches, queries and
/// partial buffers are full-size zero buffers (their values decide nothing).
fn predict(
    kernels: &AttentionKernels,
    p: &AttentionProblem,
    model: &ModelArgs,
    traces: Traces,
) -> Result<Predictions> {
    let t = Instant::now();
    let shape: AttentionShape = p.shape;
    let sizes = kernels.buffer_bytes(&shape);
    let mut mem = DeviceMemory::new();
    let mut ptr = |bytes: u64, data: Option<&[u8]>| -> Result<DevicePtr> {
        let addr = match data {
            Some(d) => {
                let a = mem.alloc(bytes.max(1))?;
                mem.write(a, d)?;
                a
            }
            None => mem.alloc_lazy(bytes.max(1))?,
        };
        Ok(DevicePtr(addr))
    };
    let table = le_bytes(&p.block_table, i32::to_le_bytes);
    let lens = le_bytes(&p.context_lens, i32::to_le_bytes);
    let ks = le_bytes(&p.k_scales, f32::to_le_bytes);
    let vs = le_bytes(&p.v_scales, f32::to_le_bytes);
    let bufs = AttentionBuffers {
        out: ptr(sizes[0], None)?,
        q: ptr(sizes[1], None)?,
        k_cache: ptr(sizes[2], None)?,
        v_cache: ptr(sizes[3], None)?,
        block_table: ptr(sizes[4], Some(&table))?,
        context_lens: ptr(sizes[5], Some(&lens))?,
        k_scales: ptr(sizes[6], Some(&ks))?,
        v_scales: ptr(sizes[7], Some(&vs))?,
        part_o: (sizes[8] > 0).then(|| ptr(sizes[8], None)).transpose()?,
        part_ml: (sizes[9] > 0).then(|| ptr(sizes[9], None)).transpose()?,
        counters: (sizes[10] > 0).then(|| ptr(sizes[10], None)).transpose()?,
    };
    let params = model.params()?;
    let options = model.options();
    let mut one = |k: &BuiltKernel, config: LaunchConfig, args: Vec<tilegen::runtime::ArgValue>| {
        let co = CodeObject::parse(k.code_object())?;
        let kd = co
            .kernel(k.name())
            .with_context(|| format!("the code object has no kernel {}", k.name()))?;
        let prog = Program::load(&mut mem, &co, k.name())?;
        let kernarg = tilegen::runtime::kernargs::build(kd, &config, &args)?;
        let launch = TimingLaunch {
            grid: config.grid,
            block: config.block,
            dynamic_lds: config.dynamic_lds,
            kernarg: &kernarg,
        };
        anyhow::Ok(timing::predict(
            &mut mem, &prog, &launch, &params, &options,
        )?)
    };
    let main = one(
        kernels.main(),
        kernels.launch_config(shape.batch),
        kernels.main_args(&bufs, &shape),
    )?;
    let reduce = match (kernels.reduce(), kernels.reduce_args(&bufs, &shape)) {
        (Some(r), Some(args)) => Some(one(r, kernels.reduce_config(shape.batch), args)?),
        _ => None,
    };
    let model_s = t.elapsed().as_secs_f64();
    let mut written = Vec::new();
    for (trace, p) in [(traces.main, Some(&main)), (traces.reduce, reduce.as_ref())] {
        if let (Some((path, out)), Some(p)) = (trace, p) {
            crate::timing::write_trace(out, p)?;
            written.push(path.display().to_string());
        }
    }
    Ok(Predictions {
        main,
        reduce,
        model_hbm_gbs: params.vmem.hbm_gbs.get(),
        model_s,
        traces: written,
    })
}
