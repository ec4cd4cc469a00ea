//! `tilegen moe`: one grouped MXFP4 MoE layer. Builds both stages' kernels, routes random
//! tokens with the model's router, runs the layer on the default device (the emulator) with
//! random expert weights or a gpt-oss-layout safetensors file preshuffled by
//! `tilegen preshuffle`, checks it against the CPU reference layer (three comparisons: the
//! quantized activations, the second stage from the device's own activations, the layer), and
//! with `--timing` models each kernel's MI355X time (sampled, or with `--full-simulation` every
//! workgroup). Exits non-zero on disagreement.
//!
//! gpt-oss layers carry per-expert biases (`gate_up_proj_bias`, `down_proj_bias`, bf16): the
//! gpt-oss presets add random ones, a weights file's are used when it has them.
//!
//! The grouped weight buffers are allocated lazily on the device and only the experts the
//! routing touches are written, so a layer whose experts do not all fit the emulator's memory
//! (Kimi-K2's 384 experts, 9 GB) runs when the touched ones do.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, Result, anyhow, bail};
use clap::{Args, ValueEnum};
use serde_json::json;

use tilegen::kernels::PrebSpec;
use tilegen::kernels::gemm::KnobArgs;
use tilegen::kernels::moe::{
    Activation, Combine, DeviceWeights, MoeError, MoeLayer, MoeRouter, MoeShape, MoeSpec,
    MoeTemplate, MoeTileKnobs, PreshuffledExpert, Routing, Scoring, Stage, expert_group_bytes,
    route,
};
use tilegen::moe_timing;
use tilegen::mx::moe::{ExpertBias, ExpertWeights, MoeRefError, MoeReference, random_tokens};
use tilegen::mx::weights::MoeWeightFile;
use tilegen::runtime::Limits;
use tilegen_output::Output;

use crate::device::DeviceArgs;
use crate::models::MoeModelParser;
use crate::session::Session;
use crate::timing::ModelArgs;

/// How the tokens are routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum RoutingKind {
    /// The model's router on random logits: every expert equally likely.
    Uniform,
    /// Every token on the same top-k experts (chosen by the seed), weighted by the model's
    /// router: the worst load imbalance.
    Skewed,
}

/// The router `router` for `experts` experts with top-`topk`. A sigmoid router's selection
/// bias is random here (a trained layer's is learned), small next to the scores. The template's
/// groups hold with its experts; fewer experts (`--experts`) that cannot hold top-k in the kept
/// groups route ungrouped.
fn scoring(router: MoeRouter, experts: usize, topk: usize, seed: u64) -> Scoring {
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
    match router {
        MoeRouter::TopkSoftmax => Scoring::TopkSoftmax,
        MoeRouter::SoftmaxTopk { renormalize } => Scoring::SoftmaxTopk { renormalize },
        MoeRouter::SigmoidGrouped {
            groups,
            keep,
            scale,
        } => {
            let grouped = experts.is_multiple_of(groups) && experts / groups * keep >= topk;
            Scoring::SigmoidGrouped {
                groups: if grouped { groups } else { 1 },
                keep: if grouped { keep } else { 1 },
                bias: bias(),
                scale,
            }
        }
    }
}

#[derive(Args)]
pub struct MoeArgs {
    /// The model whose layer to run (sizes, activation, router): one of the MoE templates.
    /// Without it the layer is the sizes given (--experts, --topk, --model-dim, --inter; SiLU
    /// unless --activation, a softmax-then-top-k router, no biases unless --bias).
    #[arg(long, value_parser = MoeModelParser)]
    model: Option<MoeTemplate>,
    /// Tokens in the batch.
    #[arg(long)]
    tokens: usize,
    /// Experts (overrides the model's).
    #[arg(long)]
    experts: Option<usize>,
    /// Experts per token (overrides the model's).
    #[arg(long)]
    topk: Option<usize>,
    /// Hidden size, the model dimension (overrides the model's; a multiple of 32, padded to
    /// 256).
    #[arg(long, visible_alias = "model-dim")]
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
    /// Rows per sorted block (BM of both kernels; default: the per-token-count rule's, 16, 32
    /// or 64 by the rows an expert gets, with its tiles; given, the default tiles).
    #[arg(long)]
    block_m: Option<u32>,
    /// Columns per workgroup of the down kernel (overrides --bn there).
    #[arg(long)]
    down_bn: Option<u32>,
    /// The tile knobs of both kernels (the GEMM's flags but those the layer fixes); unset
    /// ones keep the layer's default tile.
    #[command(flatten)]
    tile: KnobArgs<MoeTileKnobs>,
    /// How a token's top-k contributions are summed.
    #[arg(long, value_enum, default_value_t = Combine::Atomic)]
    combine: Combine,
    /// Whether the gate/up kernel groups a pass of at most 64 (token, expert) pairs itself,
    /// without the sort kernel (default: the per-token-count rule's, on for such passes;
    /// with --block-m, off). Blocks of at most 64 rows.
    #[arg(long)]
    fused_sort: Option<bool>,
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
    /// How the tokens are routed.
    #[arg(long, value_enum, default_value_t = RoutingKind::Uniform)]
    routing: RoutingKind,
    /// Model each kernel's MI355X time with the timing model.
    #[arg(long)]
    timing: bool,
    /// The model's flags (one trace file per kernel).
    #[command(flatten)]
    timing_model: ModelArgs,
    /// Build (and with --timing, model) only: no emulated run, no check.
    #[arg(long)]
    no_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    device: DeviceArgs,
}

/// The layer a run is of: a template's model, or the sizes given on the command line.
struct LayerModel {
    name: String,
    shape: MoeShape,
    activation: Activation,
    bias: bool,
    router: MoeRouter,
}

impl MoeArgs {
    /// The model's layer, or without `--model` the one the sizes describe (every size needed
    /// unless a weights file gives it).
    fn layer_model(&self) -> Result<LayerModel> {
        if let Some(t) = &self.model {
            return Ok(LayerModel {
                name: t.model.name.clone(),
                shape: t.shape(),
                activation: t.model.activation,
                bias: t.model.bias,
                router: t.model.router,
            });
        }
        let size = |flag: &str, v: Option<usize>| match v {
            Some(v) => Ok(v),
            // A weights file holds these; 0 until it gives them.
            None if self.weights.is_some() && flag != "--topk" => Ok(0),
            None => Err(anyhow!(
                "{flag} is needed without --model (or give --model NAME for a template's sizes)"
            )),
        };
        Ok(LayerModel {
            name: "custom".into(),
            shape: MoeShape {
                experts: size("--experts", self.experts)?,
                topk: size("--topk", self.topk)?,
                hidden: size("--model-dim", self.hidden)?,
                inter: size("--inter", self.inter)?,
            },
            activation: Activation::SiluMul,
            bias: false,
            router: MoeRouter::SoftmaxTopk { renormalize: true },
        })
    }

    /// The layer's spec: the per-token-count rule's for `shape` and `--tokens`
    /// ([`MoeSpec::for_tokens`]), or with `--block-m` the default tiles of that block size
    /// fitted to `shape` ([`MoeSpec::fit_to`]: each K tile a divisor of its K); then the knobs
    /// given on both kernels' tiles, and `--down-bn`.
    fn spec(&self, activation: Activation, bias: bool, shape: &MoeShape) -> Result<MoeSpec> {
        let mut s = MoeSpec::new(self.activation.unwrap_or(activation))
            .bias(bias)
            .combine(self.combine);
        // Sizes the shape check refuses later keep the unfitted default.
        let valid = shape.validate().is_ok();
        s = match self.block_m {
            Some(rows) if valid => s.block_m(rows).fit_to(shape),
            Some(rows) => s.block_m(rows),
            None if valid => s.for_tokens(shape, self.tokens),
            None => s,
        };
        let tile = |stage: Stage| -> Result<PrebSpec> {
            Ok(PrebSpec::try_from(self.tile.apply(s.tile(stage).clone())?)?)
        };
        let gate_up = tile(Stage::GateUp)?;
        let down = match self.down_bn {
            Some(bn) => tile(Stage::Down)?.bn(bn),
            None => tile(Stage::Down)?,
        };
        if let Some(on) = self.fused_sort {
            s = s.fused_sort(on);
        }
        Ok(s.gate_up(gate_up).down(down))
    }
}

/// Where the experts' weights come from.
enum Source {
    Random(u64),
    File(Box<MoeWeightFile>),
}

pub fn run(a: MoeArgs) -> Result<()> {
    let file = a
        .weights
        .as_deref()
        .map(|p| MoeWeightFile::open(p, a.layer.as_deref()))
        .transpose()?;
    let model = a.layer_model()?;
    let mut shape = model.shape;
    if let Some(f) = &file {
        if a.hidden.is_some() || a.inter.is_some() || a.experts.is_some() {
            bail!("--experts, --hidden and --inter come from the weights file with --weights");
        }
        shape = f.shape(shape.topk);
    }
    shape.experts = a.experts.unwrap_or(shape.experts);
    shape.topk = a.topk.unwrap_or(shape.topk);
    shape.hidden = a.hidden.unwrap_or(shape.hidden);
    shape.inter = a.inter.unwrap_or(shape.inter);
    let bias = match (&file, a.bias) {
        (Some(f), Some(true)) if !f.has_bias() => bail!(
            "--bias true, but {} has no expert biases (<prefix>gate_up_proj_bias / mlp1_bias and down_proj_bias / mlp2_bias)",
            f.path().display()
        ),
        (Some(f), b) => b.unwrap_or(f.has_bias()),
        (None, b) => b.unwrap_or(model.bias),
    };
    let spec = a.spec(model.activation, bias, &shape)?;
    // Everything that can be refused is refused before inputs are made or LLVM runs.
    spec.validate().context("checking the kernels' spec")?;
    let traces = if a.timing {
        a.timing_model.check()?;
        spec.stages()
            .into_iter()
            .map(|s| Ok(crate::timing::trace_for(&a.timing_model, &stage_name(s))?.map(|t| (s, t))))
            .filter_map(Result::transpose)
            .collect::<Result<BTreeMap<_, _>>>()?
    } else {
        a.timing_model.refuse_without("--timing")?;
        BTreeMap::new()
    };
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
    let per_expert: usize = expert_group_bytes(&shape)?.iter().sum();
    check_host(&shape, a.tokens, most_touched, per_expert)?;
    let scoring = scoring(model.router, shape.experts, shape.topk, a.seed);
    let routing = match a.routing {
        RoutingKind::Uniform => random_routing(&shape, a.tokens, &scoring, a.seed)?,
        RoutingKind::Skewed => skewed_routing(&shape, a.tokens, &scoring, a.seed)?,
    };
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
        "model": model.name,
        "shape": shape,
        "padded": {"hidden": shape.hidden_padded(), "inter": shape.inter_padded()},
        "tokens": a.tokens,
        "spec": layer.spec(),
        "weights": match &a.weights { Some(p) => p.display().to_string(), None => "random".into() },
        "bias": bias,
        "routing": {
            "kind": a.routing.to_possible_value().map(|v| v.get_name().to_string()),
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
        let session = Session::open(a.device.device, Limits::default(), a.json)?;
        summary["device"] = session.device().name().into();
        if session.is_emulated() {
            check_device(&shape, a.tokens, touched.len(), per_expert)?;
        }
        let checked = run_and_check(&a, &session, &layer, &shape, &routing, &touched, &source)?;
        passed = checked["passed"].as_bool().unwrap_or(false);
        summary["run"] = checked;
    }
    if a.timing {
        summary["timing"] = model_time(
            &layer,
            &shape,
            &routing,
            &touched,
            per_expert,
            a.seed,
            &a.timing_model,
            traces,
        )?;
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

/// Every token on the same `topk` experts: consecutive ones from a seeded first, so a grouped
/// router keeps them (they span at most two groups), their logits raised far above the rest
/// so the model's router picks them and weighs them by their random logits.
fn skewed_routing(
    shape: &MoeShape,
    tokens: usize,
    scoring: &Scoring,
    seed: u64,
) -> Result<Routing> {
    let (experts, topk) = (shape.experts, shape.topk);
    let first = (seed.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize
        % (experts.saturating_sub(topk) + 1);
    let chosen = first..first + topk;
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let logits: Vec<f32> = (0..tokens * experts)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let r = ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0;
            if chosen.contains(&(i % experts)) {
                r + 64.0
            } else {
                r
            }
        })
        .collect();
    let routing = route(&logits, tokens, experts, topk, scoring).context("routing the tokens")?;
    let counts = routing.counts();
    if chosen.clone().any(|e| counts[e] != tokens) {
        bail!(
            "the router did not send every token to experts {first}..{}: skewed routing needs top-k experts one or two of its groups hold",
            first + topk
        );
    }
    Ok(routing)
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

fn run_and_check(
    a: &MoeArgs,
    session: &Session,
    layer: &MoeLayer,
    shape: &MoeShape,
    routing: &Routing,
    touched: &[usize],
    source: &Source,
) -> Result<serde_json::Value> {
    let on_runtime = |e: MoeError| match e {
        MoeError::Runtime { stage, source } => session
            .error(source)
            .context(format!("running the {stage} kernel")),
        e => anyhow::Error::from(e),
    };
    let t = Instant::now();
    let bias = layer.spec().has_bias();
    let weights = DeviceWeights::new(session.device(), shape, bias).map_err(on_runtime)?;
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
            Source::File(f) => {
                let x = f
                    .expert(e, bias)
                    .with_context(|| format!("reading expert {e} of {}", f.path().display()))?;
                let pre = PreshuffledExpert {
                    gate_up: x.gate_up,
                    gate_up_scales: x.gate_up_scales,
                    down: x.down,
                    down_scales: x.down_scales,
                    bias: x.weights.bias.clone(),
                };
                (pre, x.weights)
            }
        };
        weights.write(e, &pre).map_err(on_runtime)?;
        experts[e] = Some(logical);
    }
    let x = random_tokens(shape, a.tokens, a.seed ^ 0x70c3)?;
    let prep_s = t.elapsed().as_secs_f64();
    let run = session
        .launch(|device| layer.run(device, &weights, &x, routing))
        .map_err(on_runtime)?;
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
    // The device's sort groups the pairs as the host's does, up to their order in an expert.
    let sort_ok = run.sorted.canonical() == routing.sort(spec.rows_per_block() as usize)?;
    let ref_s = t.elapsed().as_secs_f64();
    let passed = s1.passed() && s2.passed() && whole.passed() && sort_ok;
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
            "sort": {"passed": sort_ok},
            "stage1": s1,
            "stage2": {"passed": s2.passed(), "elements": s2.elements, "mismatches": s2.mismatches, "summary": s2.to_string()},
            "layer": {"passed": whole.passed(), "elements": whole.elements, "mismatches": whole.mismatches, "summary": whole.to_string()},
        },
    }))
}

/// A stage's name in JSON and in trace file names (`sort`, `gate-up`, `down`, `reduce`).
fn stage_name(stage: Stage) -> String {
    serde_json::to_value(stage)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| stage.to_string())
}

/// Each kernel's MI355X time from the timing model, on the pass's real routing (sorted ids,
/// block experts, tokens) with full-size lazily zeroed weights and intermediates; `traces`
/// holds the trace file of each stage when one is asked for.
#[allow(clippy::too_many_arguments)]
fn model_time(
    layer: &MoeLayer,
    shape: &MoeShape,
    routing: &Routing,
    touched: &[usize],
    per_expert: usize,
    seed: u64,
    model: &ModelArgs,
    mut traces: BTreeMap<Stage, (PathBuf, Output)>,
) -> Result<serde_json::Value> {
    let x = random_tokens(shape, routing.tokens(), seed ^ 0x70c3)?;
    let params = model.params()?;
    let options = model.options();
    let mut total = 0.0;
    let mut kernels = Vec::new();
    for st in moe_timing::predict_layer(layer, shape, routing, &x, &params, &options)? {
        let (stage, p, config) = (st.stage, &st.prediction, &st.config);
        total += p.us;
        let trace = match traces.remove(&stage) {
            Some((path, out)) => {
                crate::timing::write_trace(out, p)?;
                Some(path.display().to_string())
            }
            None => None,
        };
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
            "method": p.method,
            "method_detail": p.method_detail,
            "workgroups_simulated": p.workgroups_simulated,
            "workgroups_total": p.workgroups_total,
            "model_s": st.model_seconds,
            "trace": trace,
        }));
    }
    // The roofline of the weights the routing touches: every byte read once from HBM, at the
    // MI355X's peak (8.0 TB/s, HBM3E) and at the sustained bandwidth the model assumes.
    let touched_bytes = (touched.len() * per_expert) as f64;
    let peak = 8.0e12;
    let sustained = params.vmem.hbm_gbs.get() * 1e9;
    let roofline_us = touched_bytes / peak * 1e6;
    Ok(json!({
        "method": model.method_name(),
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
        s["model"].as_str().unwrap_or(""),
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
        "  {} routing: {} pairs over {} experts",
        s["routing"]["kind"].as_str().unwrap_or(""),
        s["routing"]["pairs"],
        s["routing"]["experts_touched"]
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
            "  sort: {}",
            if c["sort"]["passed"].as_bool() == Some(true) {
                "the device grouped the pairs as the host does"
            } else {
                "the device's blocks differ from the host's"
            }
        );
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
                "  modelled {}: {:.2} us ({}, {:.0} GB/s HBM, MFMA busy {:.0}%; {}, {:.1} s)",
                k["stage"].as_str().unwrap_or(""),
                k["us"].as_f64().unwrap_or(0.0),
                k["bound"].as_str().unwrap_or(""),
                k["hbm_gbs"].as_f64().unwrap_or(0.0),
                100.0 * k["mfma_busy"].as_f64().unwrap_or(0.0),
                k["method_detail"].as_str().unwrap_or(""),
                k["model_s"].as_f64().unwrap_or(0.0)
            );
            if let Some(path) = k["trace"].as_str() {
                println!("    wrote the trace {path}");
            }
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
