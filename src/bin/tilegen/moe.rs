//! `tilegen moe`: one grouped MXFP4 MoE layer. Builds both stages' kernels, routes random
//! tokens with the model's router, runs the layer on the default device (the emulator) with
//! random expert weights or a gpt-oss-layout safetensors file preshuffled by
//! `tilegen preshuffle`, checks it against the CPU reference layer (three comparisons: the
//! quantized activations, the second stage from the device's own activations, the layer), and
//! with `--timing` models each kernel's MI355X time. Exits non-zero on disagreement.
//!
//! gpt-oss layers carry per-expert biases (`gate_up_proj_bias`, `down_proj_bias`, bf16): the
//! gpt-oss presets add random ones, a weights file's are used when it has them.
//!
//! The grouped weight buffers are allocated lazily on the device and only the experts the
//! routing touches are written, so a layer whose experts do not all fit the emulator's memory
//! (Kimi-K2's 384 experts, 9 GB) runs when the touched ones do.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{IsTerminal, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use half::bf16;
use serde_json::json;

use tilegen::codeobj::CodeObject;
use tilegen::emu::exec::{DeviceMemory, Program};
use tilegen::kernels::moe::{
    Activation, Combine, DeviceWeights, MoeBuffers, MoeError, MoeLayer, MoeShape, MoeSpec,
    PreshuffledExpert, Routing, Scoring, expert_bias_bytes, expert_bytes, route,
};
use tilegen::kernels::{CachePolicy, KernelSpec, MfmaShape};
use tilegen::mx::moe::{ExpertBias, ExpertWeights, MoeRefError, MoeReference, random_tokens};
use tilegen::mx::weights::{METADATA_KEY, PreshuffleRecord, TensorRecord};
use tilegen::mx::{MX_BLOCK, MxMatrix, Shuffler};
use tilegen::runtime::{Device, DevicePtr, EmuConfig, LaunchControl, RuntimeError};
use tilegen::timing::{self, Params, TimingLaunch, TimingOptions};

use crate::device::DeviceArgs;
use crate::emu::{Progress, cli_error};

/// Models whose MoE layers the command knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Model {
    /// 32 experts, top-4, hidden 2880, intermediate 2880, SwiGLU, top-k then softmax.
    #[value(name = "gpt-oss-20b")]
    GptOss20b,
    /// 128 experts, top-4, hidden 2880, intermediate 2880, SwiGLU, top-k then softmax.
    #[value(name = "gpt-oss-120b")]
    GptOss120b,
    /// 256 experts, top-8, hidden 7168, intermediate 2048, SiLU, grouped sigmoid routing.
    #[value(name = "deepseek-v3")]
    DeepseekV3,
    /// 384 experts, top-8, hidden 7168, intermediate 2048, SiLU, sigmoid routing.
    #[value(name = "kimi-k2")]
    KimiK2,
}

impl Model {
    /// The name on the command line.
    fn name(self) -> String {
        self.to_possible_value()
            .map(|v| v.get_name().to_string())
            .unwrap_or_default()
    }

    fn shape(self) -> MoeShape {
        let (experts, topk, hidden, inter) = match self {
            Model::GptOss20b => (32, 4, 2880, 2880),
            Model::GptOss120b => (128, 4, 2880, 2880),
            Model::DeepseekV3 => (256, 8, 7168, 2048),
            Model::KimiK2 => (384, 8, 7168, 2048),
        };
        MoeShape {
            experts,
            topk,
            hidden,
            inter,
        }
    }

    /// Whether the model's experts carry biases.
    fn bias(self) -> bool {
        matches!(self, Model::GptOss20b | Model::GptOss120b)
    }

    fn activation(self) -> Activation {
        match self {
            Model::GptOss20b | Model::GptOss120b => Activation::Swiglu,
            Model::DeepseekV3 | Model::KimiK2 => Activation::SiluMul,
        }
    }

    /// The router; the sigmoid routers' per-expert bias is random (a trained layer's is
    /// learned), small next to the scores. DeepSeek's 8 groups (best 4 kept) hold with its 256
    /// experts; fewer experts (`--experts`) that cannot hold top-k in 4 groups route ungrouped.
    fn scoring(self, experts: usize, topk: usize, seed: u64) -> Scoring {
        let bias = || {
            let mut s = seed ^ 0xb1a5;
            (0..experts)
                .map(|_| {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((s >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.02
                })
                .collect()
        };
        match self {
            Model::GptOss20b | Model::GptOss120b => Scoring::TopkSoftmax,
            Model::DeepseekV3 => {
                let grouped = experts.is_multiple_of(8) && experts / 8 * 4 >= topk;
                Scoring::SigmoidGrouped {
                    groups: if grouped { 8 } else { 1 },
                    keep: if grouped { 4 } else { 1 },
                    bias: bias(),
                    scale: 2.5,
                }
            }
            Model::KimiK2 => Scoring::SigmoidGrouped {
                groups: 1,
                keep: 1,
                bias: bias(),
                scale: 2.827,
            },
        }
    }
}

#[derive(Args)]
pub struct MoeArgs {
    /// The model whose layer to run (sizes, activation, router).
    #[arg(long, value_enum)]
    model: Model,
    /// Tokens in the batch.
    #[arg(long)]
    tokens: usize,
    /// Experts (overrides the model's).
    #[arg(long)]
    experts: Option<usize>,
    /// Experts per token (overrides the model's).
    #[arg(long)]
    topk: Option<usize>,
    /// Hidden size (overrides the model's; a multiple of 32, padded to 256).
    #[arg(long)]
    hidden: Option<usize>,
    /// Intermediate size of an expert (overrides the model's; a multiple of 32, padded to 256).
    #[arg(long)]
    inter: Option<usize>,
    /// Expert weights from a gpt-oss-layout safetensors file preshuffled by `tilegen
    /// preshuffle` (pairs `<prefix>{gate_up_proj,mlp1_weight}_{blocks,scales}` and
    /// `<prefix>{down_proj,mlp2_weight}_{blocks,scales}`); sizes come from the file.
    #[arg(long)]
    weights: Option<PathBuf>,
    /// Which layer of the file: the tensors' name prefix (needed when it holds several).
    #[arg(long)]
    layer: Option<String>,
    /// Rows per sorted block (BM of both kernels).
    #[arg(long, default_value_t = 32)]
    block_m: u32,
    /// Columns per workgroup of both kernels.
    #[arg(long)]
    bn: Option<u32>,
    /// Columns per workgroup of the down kernel (overrides --bn there).
    #[arg(long)]
    down_bn: Option<u32>,
    /// Columns per wave.
    #[arg(long)]
    wn: Option<u32>,
    /// K elements per pipeline stage.
    #[arg(long)]
    bk_elems: Option<u32>,
    /// MFMA shape.
    #[arg(long, value_enum)]
    mma: Option<MfmaShape>,
    /// Depth-2 outer-K pipeline.
    #[arg(long)]
    b_prefetch: bool,
    /// Load A global -> LDS directly.
    #[arg(long)]
    dram_to_lds: bool,
    /// Cache policy of the weight loads.
    #[arg(long, value_enum)]
    b_cache_policy: Option<CachePolicy>,
    /// How a token's top-k contributions are summed.
    #[arg(long, value_enum, default_value_t = Combine::Atomic)]
    combine: Combine,
    /// The activation (overrides the model's).
    #[arg(long, value_enum)]
    activation: Option<Activation>,
    /// Per-expert biases on both GEMMs (default: the model's, on for gpt-oss; with --weights,
    /// whether the file has them). Random without --weights.
    #[arg(long)]
    bias: Option<bool>,
    /// Seed of the tokens, router logits and (without --weights) expert weights.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Model each kernel's MI355X time with the timing model.
    #[arg(long)]
    timing: bool,
    /// Build (and with --timing, model) only: no emulated run, no check.
    #[arg(long)]
    no_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    device: DeviceArgs,
}

impl MoeArgs {
    fn tile(&self, bn: Option<u32>) -> KernelSpec {
        let mut s = KernelSpec::preb()
            .bm(self.block_m)
            .bn(bn.or(self.bn).unwrap_or(128))
            .wn(self.wn.unwrap_or(64))
            .bk_elems(self.bk_elems.unwrap_or(512));
        if let Some(m) = self.mma {
            s = s.mma(m);
        }
        if self.b_prefetch {
            s = s.b_prefetch(true);
        }
        if self.dram_to_lds {
            s = s.dram_to_lds(true);
        }
        if let Some(p) = self.b_cache_policy {
            s = s.b_cache_policy(p);
        }
        s
    }

    fn spec(&self, activation: Activation, bias: bool) -> MoeSpec {
        MoeSpec::new(self.activation.unwrap_or(activation))
            .bias(bias)
            .block_m(self.block_m)
            .gate_up(self.tile(None))
            .down(self.tile(self.down_bn))
            .combine(self.combine)
    }
}

/// Where the experts' weights come from.
enum Source {
    Random(u64),
    File(Box<WeightFile>),
}

pub fn run(a: MoeArgs) -> Result<()> {
    let file = match &a.weights {
        Some(p) => Some(WeightFile::open(p, a.layer.as_deref())?),
        None => None,
    };
    let mut shape = a.model.shape();
    if let Some(f) = &file {
        if a.hidden.is_some() || a.inter.is_some() || a.experts.is_some() {
            bail!("--experts, --hidden and --inter come from the weights file with --weights");
        }
        shape = MoeShape {
            topk: shape.topk,
            ..f.shape
        };
    }
    shape.experts = a.experts.unwrap_or(shape.experts);
    shape.topk = a.topk.unwrap_or(shape.topk);
    shape.hidden = a.hidden.unwrap_or(shape.hidden);
    shape.inter = a.inter.unwrap_or(shape.inter);
    let bias = match (&file, a.bias) {
        (Some(f), Some(true)) if f.bias.is_none() => bail!(
            "--bias true, but {} has no expert biases (<prefix>gate_up_proj_bias / mlp1_bias and down_proj_bias / mlp2_bias)",
            f.path.display()
        ),
        (Some(f), b) => b.unwrap_or(f.bias.is_some()),
        (None, b) => b.unwrap_or(a.model.bias()),
    };
    let spec = a.spec(a.model.activation(), bias);
    // Everything that can be refused is refused before inputs are made or LLVM runs.
    spec.validate().context("checking the kernels' spec")?;
    spec.check_shape(&shape)
        .context("checking the layer against the spec")?;
    if a.tokens == 0 {
        bail!("--tokens must be at least 1");
    }
    if shape.experts > u32::MAX as usize || a.tokens > (i32::MAX as usize) / shape.topk {
        bail!("{} tokens x top-{} is too many pairs", a.tokens, shape.topk);
    }
    // The host's share before anything is made: logits, tokens, the touched experts.
    let most_touched = shape.experts.min(a.tokens.saturating_mul(shape.topk));
    let per_expert: usize = expert_bytes(&shape)?.iter().sum();
    check_host(&shape, a.tokens, most_touched, per_expert)?;
    let scoring = a.model.scoring(shape.experts, shape.topk, a.seed);
    let routing = random_routing(&shape, a.tokens, &scoring, a.seed)?;
    let counts = routing.counts();
    let touched: Vec<usize> = (0..shape.experts).filter(|&e| counts[e] > 0).collect();
    let t = Instant::now();
    let layer = spec.build().context("building the layer's kernels")?;
    let build_s = t.elapsed().as_secs_f64();
    let source = match file {
        Some(f) => Source::File(Box::new(f)),
        None => Source::Random(a.seed),
    };
    let mut summary = json!({
        "model": a.model.name(),
        "shape": shape,
        "padded": {"hidden": shape.hidden_padded(), "inter": shape.inter_padded()},
        "tokens": a.tokens,
        "spec": layer.spec(),
        "weights": match &a.weights { Some(p) => p.display().to_string(), None => "random".into() },
        "bias": bias,
        "routing": {
            "pairs": a.tokens * shape.topk,
            "experts_touched": touched.len(),
        },
        "kernels": layer.kernels().iter().map(|k| json!({
            "stage": k.stage(),
            "name": k.name(),
            "report": k.report(),
            "compile_ms": k.timings().total().as_secs_f64() * 1e3,
        })).collect::<Vec<_>>(),
        "build_ms": build_s * 1e3,
    });
    let mut passed = true;
    if !a.no_run {
        // Ctrl-C stops the emulation (or the wait for a GPU) at its next check.
        let chosen = crate::device::open(
            a.device,
            EmuConfig {
                control: LaunchControl::with_cancel_flag(tilegen_output::interrupt_flag()),
                ..EmuConfig::default()
            },
            tilegen_output::interrupt_flag(),
        )?;
        let device = chosen.device();
        summary["device"] = device.name().into();
        let control = device
            .as_emu()
            .map(|e| e.control().clone())
            .unwrap_or_default();
        let show = !a.json && device.as_emu().is_some() && std::io::stderr().is_terminal();
        if device.as_emu().is_some() {
            check_device(&shape, a.tokens, touched.len(), per_expert)?;
        }
        let checked = run_and_check(
            &a, device, &control, show, &layer, &shape, &routing, &touched, &source,
        )?;
        passed = checked["passed"].as_bool().unwrap_or(false);
        summary["run"] = checked;
    }
    if a.timing {
        summary["timing"] = model_time(&layer, &shape, &routing, &touched, per_expert, a.seed)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        print_text(&a, &shape, &layer, &summary);
    }
    if !passed {
        bail!("the layer disagrees with the reference");
    }
    Ok(())
}

fn random_routing(
    shape: &MoeShape,
    tokens: usize,
    scoring: &Scoring,
    seed: u64,
) -> Result<Routing> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let logits: Vec<f32> = (0..tokens * shape.experts)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect();
    route(&logits, tokens, shape.experts, shape.topk, scoring).context("routing the tokens")
}

/// The emulator's memory limit (half of this machine's memory unless raised).
fn memory_limit() -> u128 {
    tilegen::runtime::Limits::default().max_memory as u128
}

/// Refuses a run whose host memory would pass the limit, before anything is allocated: router
/// logits, tokens, and the touched experts' weights twice (the reference's and the
/// preshuffled copy).
fn check_host(shape: &MoeShape, tokens: usize, touched: usize, per_expert: usize) -> Result<()> {
    let host = (tokens as u128) * (4 * shape.experts + shape.hidden_padded()) as u128
        + 2 * (touched as u128) * per_expert as u128;
    let limit = memory_limit();
    if host > limit {
        bail!(
            "{tokens} tokens through {touched} experts need about {host} bytes of host memory, over {limit}"
        );
    }
    Ok(())
}

/// Refuses a run whose emulated device memory (the touched experts' weights: the grouped
/// buffers are lazy and only those experts are written; the pass's buffers) would pass the
/// emulator's limit, before any of it is allocated.
fn check_device(shape: &MoeShape, tokens: usize, touched: usize, per_expert: usize) -> Result<()> {
    let device = (per_expert as u128) * touched as u128
        + (tokens * shape.topk) as u128 * (shape.inter_padded() + 4 * shape.hidden) as u128
        + (tokens * shape.hidden_padded()) as u128;
    let limit = memory_limit();
    if device > limit {
        bail!(
            "the layer needs {device} bytes of emulated device memory ({touched} touched experts' weights), over the emulator's limit of {limit} (half of this machine's memory); use fewer --tokens or --experts, or --no-run with --timing"
        );
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn run_and_check(
    a: &MoeArgs,
    device: &dyn Device,
    control: &LaunchControl,
    show_progress: bool,
    layer: &MoeLayer,
    shape: &MoeShape,
    routing: &Routing,
    touched: &[usize],
    source: &Source,
) -> Result<serde_json::Value> {
    let on_runtime = |e: MoeError| match e {
        MoeError::Runtime { stage, source } => {
            cli_error(source, control).context(format!("running the {stage} kernel"))
        }
        e => anyhow::Error::from(e),
    };
    let t = Instant::now();
    let bias = layer.spec().has_bias();
    let weights = DeviceWeights::new(device, shape, bias).map_err(on_runtime)?;
    let mut experts: Vec<Option<ExpertWeights>> = vec![None; shape.experts];
    for &e in touched {
        let (pre, logical) = match source {
            Source::Random(seed) => {
                let mut w = ExpertWeights::random(shape, e, *seed)?;
                if bias {
                    w = w.with_bias(shape, ExpertBias::random(shape, e, *seed)?)?;
                }
                (PreshuffledExpert::new(shape, &w)?, w)
            }
            Source::File(f) => f.expert(shape, e, bias)?,
        };
        weights.write(e, &pre).map_err(on_runtime)?;
        experts[e] = Some(logical);
    }
    let x = random_tokens(shape, a.tokens, a.seed ^ 0x70c3)?;
    let prep_s = t.elapsed().as_secs_f64();
    let progress = Progress::start(control, show_progress);
    let result = layer.run(device, &weights, &x, routing);
    progress.finish();
    let run = result.map_err(on_runtime)?;
    let t = Instant::now();
    let get = |e: usize| {
        experts
            .get(e)
            .and_then(Option::as_ref)
            .ok_or_else(|| MoeRefError::Input(format!("expert {e} was never routed to")))
    };
    let spec = layer.spec();
    let reference = MoeReference::new(
        shape,
        &x,
        routing.ids(),
        routing.weights(),
        spec.activation_kind(),
        spec.combine_kind(),
        &get,
    )?;
    let s1 = reference.check_stage1(&run.activations)?;
    let s2 = reference
        .stage2_from(&run.activations, &get)?
        .compare(&run.out)?;
    let whole = reference.compare_layer(&run.out)?;
    let ref_s = t.elapsed().as_secs_f64();
    let passed = s1.passed() && s2.passed() && whole.passed();
    let nonzero = run.out.iter().filter(|v| v.to_f32() != 0.0).count();
    let max_abs = run
        .out
        .iter()
        .map(|v| v.to_f32().abs())
        .fold(0f32, f32::max);
    Ok(json!({
        "passed": passed,
        "nonzero_outputs": nonzero,
        "max_abs_output": max_abs,
        "blocks": run.sorted.blocks(),
        "block_m": run.sorted.block_m(),
        "launches": run.launches.iter().map(|l| json!({
            "stage": l.stage,
            "kernel": l.kernel,
            "grid": l.config.grid,
            "block": l.config.block,
            "emulate_ms": l.report.wall.as_secs_f64() * 1e3,
            "emulator": l.report.stats,
        })).collect::<Vec<_>>(),
        "timings": {
            "prepare_ms": prep_s * 1e3,
            "emulate_ms": run.launches.iter().map(|l| l.report.wall.as_secs_f64()).sum::<f64>() * 1e3,
            "reference_ms": ref_s * 1e3,
        },
        "check": {
            "stage1": s1,
            "stage2": {"passed": s2.passed(), "elements": s2.elements, "mismatches": s2.mismatches, "summary": s2.to_string()},
            "layer": {"passed": whole.passed(), "elements": whole.elements, "mismatches": whole.mismatches, "summary": whole.to_string()},
        },
    }))
}

/// Each kernel's MI355X time from the timing model, on the pass's real routing (sorted ids,
/// block experts, tokens) with full-size lazily zeroed weights and intermediates.
fn model_time(
    layer: &MoeLayer,
    shape: &MoeShape,
    routing: &Routing,
    touched: &[usize],
    per_expert: usize,
    seed: u64,
) -> Result<serde_json::Value> {
    let plan = layer.plan(shape, routing)?;
    let x = random_tokens(shape, routing.tokens(), seed ^ 0x70c3)?;
    let inputs = MoeLayer::pass_inputs(&x, routing, &plan.sorted);
    let mut mem = DeviceMemory::new();
    let mut programs = BTreeMap::new();
    let mut cos = BTreeMap::new();
    for k in layer.kernels() {
        let co = CodeObject::parse(k.code_object()).context("parsing a kernel")?;
        let prog = Program::load(&mut mem, &co, k.name()).context("loading a kernel")?;
        programs.insert(k.stage(), prog);
        cos.insert(k.stage(), co);
    }
    let lazy = |mem: &mut DeviceMemory, bytes: usize| -> Result<DevicePtr> {
        Ok(DevicePtr(mem.alloc_lazy(bytes.max(1) as u64)?))
    };
    let with = |mem: &mut DeviceMemory, bytes: &[u8]| -> Result<DevicePtr> {
        let p = lazy(mem, bytes.len())?;
        mem.write(p.0, bytes).map_err(|e| anyhow!("{e:?}"))?;
        Ok(p)
    };
    let s = &plan.sizes;
    let bufs = MoeBuffers {
        x: with(&mut mem, &inputs[0])?,
        x_scales: with(&mut mem, &inputs[1])?,
        sorted_ids: with(&mut mem, &inputs[2])?,
        block_expert: with(&mut mem, &inputs[3])?,
        weights: with(&mut mem, &inputs[4])?,
        act: lazy(&mut mem, s.act)?,
        act_scales: lazy(&mut mem, s.act_scales)?,
        parts: lazy(&mut mem, s.parts)?,
        out: lazy(&mut mem, s.out)?,
    };
    let sizes = expert_bytes(shape)?;
    let mut wptrs = [DevicePtr(0); 4];
    for (p, b) in wptrs.iter_mut().zip(sizes) {
        *p = lazy(&mut mem, b * shape.experts)?;
    }
    let bias = if layer.spec().has_bias() {
        let [g, d] = expert_bias_bytes(shape);
        Some([
            lazy(&mut mem, g * shape.experts)?,
            lazy(&mut mem, d * shape.experts)?,
        ])
    } else {
        None
    };
    let params = Params::mi355x();
    let mut total = 0.0;
    let mut kernels = Vec::new();
    for (stage, config, args) in layer.launches(shape, &plan, &bufs, wptrs, bias)? {
        let (Some(prog), Some(co)) = (programs.get(&stage), cos.get(&stage)) else {
            bail!("no {stage} kernel");
        };
        let name = layer.kernel(stage).map(|k| k.name()).unwrap_or_default();
        let kd = co
            .kernel(name)
            .ok_or_else(|| anyhow!("the code object has no {name}"))?;
        let kernarg = tilegen::runtime::kernargs::build(kd, &config, &args)
            .map_err(|e: RuntimeError| anyhow!("{e}"))?;
        let launch = TimingLaunch {
            grid: config.grid,
            block: config.block,
            dynamic_lds: config.dynamic_lds,
            kernarg: &kernarg,
        };
        let t = Instant::now();
        let p = timing::predict(&mut mem, prog, &launch, &params, &TimingOptions::default())
            .with_context(|| format!("modelling the {stage} kernel"))?;
        total += p.us;
        kernels.push(json!({
            "stage": stage,
            "us": p.us,
            "launch_us": p.launch_us,
            "bound": p.bound,
            "mfma_busy": p.mfma_busy,
            "hbm_gbs": p.hbm_gbs,
            "grid": config.grid,
            "rounds": p.rounds,
            "cycles": p.cycles,
            "memory": p.memory,
            "stalls": p.stalls,
            "method": p.method_detail,
            "model_s": t.elapsed().as_secs_f64(),
        }));
    }
    // The roofline of the weights the routing touches: every byte read once from HBM, at the
    // MI355X's peak (8.0 TB/s, HBM3E) and at the sustained bandwidth the model assumes.
    let touched_bytes = (touched.len() * per_expert) as f64;
    let peak = 8.0e12;
    let sustained = params.vmem.hbm_gbs.get() * 1e9;
    let roofline_us = touched_bytes / peak * 1e6;
    Ok(json!({
        "total_us": total,
        "kernels": kernels,
        "touched_weight_bytes": touched_bytes,
        "hbm_peak_tbs": peak / 1e12,
        "roofline_us": roofline_us,
        "roofline_share": roofline_us / total,
        "hbm_sustained_tbs": sustained / 1e12,
        "sustained_share": touched_bytes / sustained * 1e6 / total,
    }))
}

fn print_text(a: &MoeArgs, shape: &MoeShape, layer: &MoeLayer, s: &serde_json::Value) {
    let spec = layer.spec();
    println!(
        "MXFP4 MoE layer {}: {} experts top-{}, hidden {} (padded {}), intermediate {} (padded {}), {} tokens, {:?}, {:?} combine",
        a.model.name(),
        shape.experts,
        shape.topk,
        shape.hidden,
        shape.hidden_padded(),
        shape.inter,
        shape.inter_padded(),
        a.tokens,
        spec.activation_kind(),
        spec.combine_kind()
    );
    println!(
        "  routing: {} pairs over {} experts",
        s["routing"]["pairs"], s["routing"]["experts_touched"]
    );
    for k in layer.kernels() {
        let r = k.report();
        println!(
            "  {} kernel {}: {} VGPR, {} AGPR, {} B LDS, occupancy {}, compiled in {:.0} ms",
            k.stage(),
            k.name(),
            r.vgpr_count,
            r.agpr_count,
            r.lds_bytes,
            r.occupancy,
            k.timings().total().as_secs_f64() * 1e3
        );
    }
    if let Some(run) = s.get("run") {
        println!(
            "  {} blocks of {} rows; emulated in {:.2} s (reference {:.2} s)",
            run["blocks"],
            run["block_m"],
            run["timings"]["emulate_ms"].as_f64().unwrap_or(0.0) / 1e3,
            run["timings"]["reference_ms"].as_f64().unwrap_or(0.0) / 1e3
        );
        let c = &run["check"];
        println!(
            "  stage 1 (activations): {} of {} codes and {} of {} scales differ from the reference, {} outside the derived bound",
            c["stage1"]["differing"],
            c["stage1"]["elements"],
            c["stage1"]["differing_scales"],
            c["stage1"]["blocks"],
            c["stage1"]["violations"]
        );
        println!(
            "  stage 2 (from the device's activations): {}",
            c["stage2"]["summary"].as_str().unwrap_or("")
        );
        println!("  layer: {}", c["layer"]["summary"].as_str().unwrap_or(""));
    }
    if let Some(t) = s.get("timing") {
        for k in t["kernels"].as_array().into_iter().flatten() {
            println!(
                "  modelled {}: {:.2} us ({}, {:.0} GB/s HBM, MFMA busy {:.0}%)",
                k["stage"].as_str().unwrap_or(""),
                k["us"].as_f64().unwrap_or(0.0),
                k["bound"].as_str().unwrap_or(""),
                k["hbm_gbs"].as_f64().unwrap_or(0.0),
                100.0 * k["mfma_busy"].as_f64().unwrap_or(0.0)
            );
        }
        println!(
            "  modelled layer: {:.2} us; touched expert weights {:.1} MB read at the 8 TB/s peak take {:.2} us: {:.0}% of the roofline ({:.0}% of the model's {:.1} TB/s sustained)",
            t["total_us"].as_f64().unwrap_or(0.0),
            t["touched_weight_bytes"].as_f64().unwrap_or(0.0) / 1e6,
            t["roofline_us"].as_f64().unwrap_or(0.0),
            100.0 * t["roofline_share"].as_f64().unwrap_or(0.0),
            100.0 * t["sustained_share"].as_f64().unwrap_or(0.0),
            t["hbm_sustained_tbs"].as_f64().unwrap_or(0.0)
        );
    }
}

/// A preshuffled gpt-oss-layout safetensors file, read one expert at a time.
struct WeightFile {
    path: PathBuf,
    shape: MoeShape,
    /// Byte ranges in the file (absolute) of: gate/up blocks, scales; down blocks, scales.
    ranges: [(u64, u64); 4],
    /// Byte ranges of the biases (bf16 `[E, 2 inter]` and `[E, hidden]`), if the file has them.
    bias: Option<[(u64, u64); 2]>,
}

/// A tensor of the header: dtype, shape, data offsets.
struct TensorInfo {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: (u64, u64),
}

impl TensorInfo {
    fn parse(name: &str, v: &serde_json::Value) -> Result<TensorInfo> {
        let bad = || anyhow!("tensor {name}: a malformed header entry");
        let dtype = v["dtype"].as_str().ok_or_else(bad)?.to_string();
        let shape = v["shape"]
            .as_array()
            .ok_or_else(bad)?
            .iter()
            .map(|d| {
                d.as_u64()
                    .and_then(|d| usize::try_from(d).ok())
                    .ok_or_else(bad)
            })
            .collect::<Result<_>>()?;
        let offs = v["data_offsets"].as_array().ok_or_else(bad)?;
        let at = |i: usize| offs.get(i).and_then(|o| o.as_u64()).ok_or_else(bad);
        Ok(TensorInfo {
            dtype,
            shape,
            data_offsets: (at(0)?, at(1)?),
        })
    }
}

impl WeightFile {
    fn open(path: &Path, layer: Option<&str>) -> Result<WeightFile> {
        let ctx = || format!("reading {}", path.display());
        let mut f = File::open(path).with_context(ctx)?;
        let mut len = [0u8; 8];
        f.read_exact(&mut len).with_context(ctx)?;
        let n = u64::from_le_bytes(len);
        let file_len = f.metadata().with_context(ctx)?.len();
        if n > 100_000_000 || n + 8 > file_len {
            bail!(
                "{} is not a safetensors file (header of {n} bytes)",
                path.display()
            );
        }
        let mut header = vec![0u8; n as usize];
        f.read_exact(&mut header).with_context(ctx)?;
        let mut map: BTreeMap<String, serde_json::Value> = serde_json::from_slice(&header)
            .with_context(|| format!("parsing the header of {}", path.display()))?;
        let meta = map.remove("__metadata__");
        let record: PreshuffleRecord = meta
            .as_ref()
            .and_then(|m| m.get(METADATA_KEY))
            .and_then(|v| v.as_str())
            .map(serde_json::from_str)
            .transpose()
            .context("reading the preshuffle record")?
            .ok_or_else(|| {
                anyhow!(
                    "{} was not preshuffled by `tilegen preshuffle` (no `{METADATA_KEY}` record)",
                    path.display()
                )
            })?;
        let tensors: BTreeMap<String, TensorInfo> = map
            .iter()
            .map(|(k, v)| Ok((k.clone(), TensorInfo::parse(k, v)?)))
            .collect::<Result<_>>()?;
        // The layer: a prefix with both pairs.
        let stems = |suffixes: &[&str]| -> Vec<(String, String)> {
            tensors
                .keys()
                .filter_map(|name| {
                    suffixes.iter().find_map(|s| {
                        name.strip_suffix(&format!("{s}_blocks"))
                            .map(|p| (p.to_string(), format!("{p}{s}")))
                    })
                })
                .collect()
        };
        let ups = stems(&["gate_up_proj", "mlp1_weight"]);
        let downs = stems(&["down_proj", "mlp2_weight"]);
        let layers: Vec<(String, String, String)> = ups
            .iter()
            .filter_map(|(p, up)| {
                downs
                    .iter()
                    .find(|(q, _)| q == p)
                    .map(|(_, down)| (p.clone(), up.clone(), down.clone()))
            })
            .filter(|(p, _, _)| layer.is_none_or(|l| l == p))
            .collect();
        let (prefix, up, down) = match layers.as_slice() {
            [one] => one.clone(),
            [] => bail!(
                "{} has no MoE layer{} (pairs <prefix>gate_up_proj/mlp1_weight and down_proj/mlp2_weight _blocks/_scales)",
                path.display(),
                layer
                    .map(|l| format!(" with prefix {l:?}"))
                    .unwrap_or_default()
            ),
            many => bail!(
                "{} has {} MoE layers; pick one with --layer (one of {:?})",
                path.display(),
                many.len(),
                many.iter().map(|l| &l.0).collect::<Vec<_>>()
            ),
        };
        let get = |name: &str| -> Result<(&TensorInfo, &TensorRecord)> {
            let t = tensors
                .get(name)
                .ok_or_else(|| anyhow!("{} has no tensor {name}", path.display()))?;
            if t.dtype != "U8" {
                bail!("tensor {name} is {}, not U8", t.dtype);
            }
            let r = record
                .tensors
                .get(name)
                .ok_or_else(|| anyhow!("tensor {name} is not in the preshuffle record"))?;
            Ok((t, r))
        };
        let (ub, ur) = get(&format!("{up}_blocks"))?;
        let (us, _) = get(&format!("{up}_scales"))?;
        let (db, dr) = get(&format!("{down}_blocks"))?;
        let (ds, _) = get(&format!("{down}_scales"))?;
        let dims = |t: &TensorInfo| -> Result<(usize, usize)> {
            match t.shape.as_slice() {
                [e, n, _, 16] => Ok((*e, *n)),
                s => bail!("a grouped MXFP4 blocks tensor is [E, N, K/32, 16], not {s:?}"),
            }
        };
        let (e, gate_up_rows) = dims(ub)?;
        let (e2, hidden) = dims(db)?;
        let inter = dr.k;
        if e != e2 || gate_up_rows != 2 * inter || ur.k != hidden {
            bail!(
                "{prefix}: gate/up is {e} x {gate_up_rows} x K {} and down {e2} x {hidden} x K {}: not one layer's pair (gate/up rows must be 2 x the down's K)",
                ur.k,
                dr.k
            );
        }
        let shape = MoeShape {
            experts: e,
            topk: 1,
            hidden,
            inter,
        };
        shape
            .validate()
            .with_context(|| format!("the layer in {}", path.display()))?;
        if ur.k_padded != shape.hidden_padded() || dr.k_padded != shape.inter_padded() {
            bail!(
                "the file pads K to {} and {}; the layer needs {} and {} (preshuffle with --pad-k)",
                ur.k_padded,
                dr.k_padded,
                shape.hidden_padded(),
                shape.inter_padded()
            );
        }
        let data_start = 8 + n;
        let s = Shuffler::new(1)?;
        let want = [
            s.b_len(gate_up_rows, shape.hidden_padded() / 2)? * e,
            s.scale_len(gate_up_rows, shape.hidden_padded() / MX_BLOCK)? * e,
            s.b_len(hidden, shape.inter_padded() / 2)? * e,
            s.scale_len(hidden, shape.inter_padded() / MX_BLOCK)? * e,
        ];
        let range = |t: &TensorInfo, w: usize| -> Result<(u64, u64)> {
            let (a, b) = t.data_offsets;
            if b < a || b - a != w as u64 || data_start + b > file_len {
                bail!(
                    "a tensor of {} bytes at {a}..{b} where the layout holds {w}",
                    b.saturating_sub(a)
                );
            }
            Ok((data_start + a, data_start + b))
        };
        let mut ranges = [(0, 0); 4];
        for ((r, t), w) in ranges.iter_mut().zip([ub, us, db, ds]).zip(want) {
            *r = range(t, w)?;
        }
        // gpt-oss's biases beside the weights: `gate_up_proj_bias` (`mlp1_bias` in OpenAI's
        // own layout) `[E, 2 inter]` and `down_proj_bias` (`mlp2_bias`) `[E, hidden]`, bf16,
        // copied unchanged by the preshuffle.
        let bias_name = |stem: &str| match stem.strip_suffix("_weight") {
            Some(s) => format!("{s}_bias"),
            None => format!("{stem}_bias"),
        };
        let (ub_name, db_name) = (bias_name(&up), bias_name(&down));
        let bias = match (tensors.get(&ub_name), tensors.get(&db_name)) {
            (None, None) => None,
            (Some(g), Some(d)) => {
                let mut r = [(0, 0); 2];
                for ((r, (name, t)), n) in r
                    .iter_mut()
                    .zip([(&ub_name, g), (&db_name, d)])
                    .zip([gate_up_rows, hidden])
                {
                    if t.dtype != "BF16" || t.shape != [e, n] {
                        bail!(
                            "tensor {name} is {} {:?}; an expert bias is BF16 [{e}, {n}]",
                            t.dtype,
                            t.shape
                        );
                    }
                    *r = range(t, 2 * e * n).with_context(|| format!("tensor {name}"))?;
                }
                Some(r)
            }
            (g, _) => bail!(
                "{} has {} but not {}: a layer's biases come in pairs",
                path.display(),
                if g.is_some() { &ub_name } else { &db_name },
                if g.is_some() { &db_name } else { &ub_name }
            ),
        };
        Ok(WeightFile {
            path: path.to_path_buf(),
            shape,
            ranges,
            bias,
        })
    }

    /// Expert `e`: its groups as the kernels read them (the gate/up rows padded with zero rows
    /// to 2 x the padded intermediate size: appended whole 16-row tiles in both layouts), and
    /// the logical weights the reference reads (the same bytes unshuffled); with `bias`, its
    /// biases (padded alike).
    fn expert(
        &self,
        shape: &MoeShape,
        e: usize,
        bias: bool,
    ) -> Result<(PreshuffledExpert, ExpertWeights)> {
        let mut f =
            File::open(&self.path).with_context(|| format!("reading {}", self.path.display()))?;
        let mut read = |range: (u64, u64), len: usize| -> Result<Vec<u8>> {
            let per = (range.1 - range.0) / shape.experts as u64;
            let mut v = vec![0u8; len];
            f.seek(SeekFrom::Start(range.0 + per * e as u64))?;
            f.read_exact(&mut v[..per as usize])?;
            Ok(v)
        };
        let [gu, gus, d, ds] = expert_bytes(shape)?;
        let bias = match (bias, self.bias) {
            (false, _) => None,
            (true, None) => bail!("{} has no expert biases", self.path.display()),
            (true, Some([g, d])) => {
                let mut values = |range, n| -> Result<Vec<bf16>> {
                    Ok(read(range, 2 * n)?
                        .chunks_exact(2)
                        .map(|b| bf16::from_le_bytes([b[0], b[1]]))
                        .collect())
                };
                let (g, d) = (values(g, 2 * shape.inter)?, values(d, shape.hidden)?);
                Some(ExpertBias::from_logical(shape, &g, &d)?)
            }
        };
        let pre = PreshuffledExpert {
            gate_up: read(self.ranges[0], gu)?,
            gate_up_scales: read(self.ranges[1], gus)?,
            down: read(self.ranges[2], d)?,
            down_scales: read(self.ranges[3], ds)?,
            bias: bias.clone(),
        };
        let s = Shuffler::new(1)?;
        let (hp, ip, rows) = (
            shape.hidden_padded(),
            shape.inter_padded(),
            shape.gate_up_rows(),
        );
        let mut data = vec![0u8; rows * hp / 2];
        let mut scales = vec![0u8; rows * hp / MX_BLOCK];
        s.unshuffle_b_5d(rows, hp / 2, &pre.gate_up, &mut data)?;
        s.unshuffle_scale_4d(rows, hp / MX_BLOCK, &pre.gate_up_scales, &mut scales)?;
        let gate_up = MxMatrix::from_parts(rows, hp, data, scales)?;
        let mut data = vec![0u8; shape.hidden * ip / 2];
        let mut scales = vec![0u8; shape.hidden * ip / MX_BLOCK];
        s.unshuffle_b_5d(shape.hidden, ip / 2, &pre.down, &mut data)?;
        s.unshuffle_scale_4d(shape.hidden, ip / MX_BLOCK, &pre.down_scales, &mut scales)?;
        let down = MxMatrix::from_parts(shape.hidden, ip, data, scales)?;
        Ok((
            pre,
            ExpertWeights {
                gate_up,
                down,
                bias,
            },
        ))
    }
}
