//! tilegen's grouped MXFP4 MoE layer on the MI355X timing model against AMD's MI355X-measured
//! times of AITER's fused MXFP4 MoE (two stages): `cargo bench --bench vs_aiter_moe [-- OPTIONS]`.
//!
//! The layers and AITER's times are those AMD publishes:
//! * gpt-oss-120b-sized: model_dim 3072, inter_dim 3072, 128 experts, top-4 (SwiGLU with
//!   gpt-oss's expert biases here), at 256 to 4,096 tokens;
//! * DeepSeek-V3 at tensor-parallel 8: model_dim 7168, inter_dim 256, 257 experts (the shared
//!   expert routed to by every token as the 257th) and top-9 (8 routed + the shared one),
//!   SiLU, at 1 to 4,096 tokens.
//!
//! tilegen's side is its whole layer as it launches it (the sort that groups the pairs by
//! expert, gate/up, down; the atomic combine needs no fourth kernel), each kernel predicted
//! on the pass's real routing, as AITER's times include its sorting kernel. Both take the
//! router's top-k ids and weights as inputs: the router is in neither time. Each row is modeled with two specs: the default fitted to the sizes
//! ([`MoeSpec::fit_to`]) and the per-token-count rule ([`MoeSpec::for_tokens`]); the ratio is
//! AITER's measured time over the rule's (above 1: tilegen is faster), beside it the model's
//! held-out error band, and the share of the roofline of the expert weights the routing
//! touches (their bytes over the model's sustained HBM rate, `Params::mi355x()`).
//!
//! Run without `--bench` (as `cargo test --all-targets` does), it is a smoke test: one row.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use tilegen::kernels::moe::{Activation, MoeShape, MoeSpec, Routing, Scoring, Stage, route};
use tilegen::moe_timing::{predict_layer, touched_weight_bytes};
use tilegen::mx::moe::random_tokens;
use tilegen::timing::{HELD_OUT_ERROR, Method, Params, TimingOptions};
use tilegen_output::Output;

mod common;

use common::BoxError;

const USAGE: &str = "usage: cargo bench --bench vs_aiter_moe -- [--out DIR] [--model gpt-oss|deepseek] [--tokens LIST] [--full-simulation]\n  \
  --out DIR       where vs-aiter-moe.md goes (default target/vs-aiter-moe)\n  \
  --full-simulation  every workgroup simulated (default: the model's sampled rounds)\n  \
  --model NAME    only this layer (gpt-oss or deepseek)\n  \
  --tokens LIST   only these token counts (comma separated)";

/// One of AMD's measured layers.
struct Layer {
    name: &'static str,
    shape: MoeShape,
    activation: Activation,
    bias: bool,
    /// Tokens and AITER's MI355X-measured microseconds.
    measured: &'static [(usize, f64)],
}

const LAYERS: [Layer; 2] = [
    Layer {
        name: "gpt-oss",
        shape: MoeShape {
            experts: 128,
            topk: 4,
            hidden: 3072,
            inter: 3072,
        },
        activation: Activation::Swiglu,
        bias: true,
        measured: &[(256, 317.6), (1024, 329.8), (2048, 440.9), (4096, 614.8)],
    },
    Layer {
        name: "deepseek",
        shape: MoeShape {
            experts: 257,
            topk: 9,
            hidden: 7168,
            inter: 256,
        },
        activation: Activation::SiluMul,
        bias: false,
        measured: &[
            (1, 18.9),
            (4, 30.7),
            (16, 65.5),
            (256, 145.7),
            (1024, 213.8),
            (4096, 475.9),
        ],
    },
];

struct Args {
    out: PathBuf,
    model: Option<String>,
    tokens: Option<Vec<usize>>,
    method: Method,
    smoke: bool,
}

fn parse() -> Result<Option<Args>, String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut a = Args {
        out: root.join("target/vs-aiter-moe"),
        model: None,
        tokens: None,
        method: Method::Rounds,
        smoke: !std::env::args().any(|a| a == "--bench"),
    };
    // Under `cargo test` the arguments are the test harness's: the smoke run takes none.
    if a.smoke {
        a.model = Some("deepseek".into());
        a.tokens = Some(vec![4]);
        return Ok(Some(a));
    }
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |f: &str| it.next().ok_or_else(|| format!("{f} needs a value"));
        match arg.as_str() {
            "--bench" => {}
            "--out" => a.out = value("--out")?.into(),
            "--model" => {
                let v = value("--model")?;
                if !LAYERS.iter().any(|l| l.name == v) {
                    return Err(format!("--model {v}: one of gpt-oss, deepseek"));
                }
                a.model = Some(v);
            }
            "--tokens" => {
                let v = value("--tokens")?;
                let t = v
                    .split(',')
                    .map(|x| {
                        x.trim()
                            .parse::<usize>()
                            .map_err(|_| format!("--tokens {v}: `{x}` is not a number"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                a.tokens = Some(t);
            }
            "--full-simulation" => a.method = Method::Full,
            "-h" | "--help" => return Ok(None),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(Some(a))
}

fn main() -> ExitCode {
    common::main("vs_aiter_moe", USAGE, parse, run)
}

/// Seeded uniform numbers in [-4, 4): router logits.
fn logits(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
        })
        .collect()
}

/// The layer's routing of `tokens` random tokens: gpt-oss's top-k softmax over its experts;
/// DeepSeek-V3's sigmoid router over 8 groups (keeping 4) of its 256 routed experts, top-8,
/// then the shared expert (the last) for every token with weight 1.
fn routing(layer: &Layer, tokens: usize) -> Result<Routing, BoxError> {
    let s = &layer.shape;
    if layer.name == "deepseek" {
        let routed = s.experts - 1;
        let scoring = Scoring::SigmoidGrouped {
            groups: 8,
            keep: 4,
            bias: vec![0.0; routed],
            scale: 2.5,
        };
        let r = route(
            &logits(tokens * routed, 7),
            tokens,
            routed,
            s.topk - 1,
            &scoring,
        )?;
        let k = s.topk - 1;
        let mut ids = Vec::with_capacity(tokens * s.topk);
        let mut weights = Vec::with_capacity(tokens * s.topk);
        for t in 0..tokens {
            ids.extend_from_slice(&r.ids()[t * k..(t + 1) * k]);
            ids.push(routed as u32);
            weights.extend_from_slice(&r.weights()[t * k..(t + 1) * k]);
            weights.push(1.0);
        }
        return Ok(Routing::new(s.experts, s.topk, ids, weights)?);
    }
    Ok(route(
        &logits(tokens * s.experts, 7),
        tokens,
        s.experts,
        s.topk,
        &Scoring::TopkSoftmax,
    )?)
}

/// One spec's modeled layer.
struct Modeled {
    spec: MoeSpec,
    /// Per kernel: stage, microseconds, the model's bound.
    kernels: Vec<(Stage, f64, String)>,
    us: f64,
}

fn model(
    spec: &MoeSpec,
    layer: &Layer,
    routing: &Routing,
    params: &Params,
    method: Method,
) -> Result<Modeled, BoxError> {
    let built = spec.build()?;
    let x = random_tokens(&layer.shape, routing.tokens(), 0x70c3)?;
    let stages = predict_layer(
        &built,
        &layer.shape,
        routing,
        &x,
        params,
        &TimingOptions {
            method,
            ..TimingOptions::default()
        },
    )?;
    let kernels: Vec<_> = stages
        .iter()
        .map(|s| {
            let bound = serde_json::to_value(s.prediction.bound)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            (s.stage, s.prediction.us, bound)
        })
        .collect();
    Ok(Modeled {
        spec: spec.clone(),
        us: kernels.iter().map(|k| k.1).sum(),
        kernels,
    })
}

/// A spec in a few words: block size, each GEMM's BN and BK (and the gate/up's WN and B
/// prefetch).
fn describe(s: &MoeSpec) -> String {
    let (g, d) = (s.tile(Stage::GateUp), s.tile(Stage::Down));
    format!(
        "bm{} gu bn{} wn{} bk{}{} / down bn{} bk{}",
        s.rows_per_block(),
        g.bn,
        g.wn,
        g.bk_elems,
        if g.knobs().prefetch.is_some() {
            " prefetch"
        } else {
            ""
        },
        d.bn,
        d.bk_elems
    )
}

fn run(args: &Args) -> Result<(), BoxError> {
    let params = Params::mi355x();
    let hbm = params.vmem.hbm_gbs.get();
    let band = HELD_OUT_ERROR;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "tilegen's MXFP4 MoE layer on the MI355X timing model ({}; HBM {hbm:.0} GB/s sustained) vs AITER's fused MoE as AMD measured it on MI355X; ratio = AITER us / tilegen us (above 1: tilegen faster), the model's held-out error {} beside it. tilegen's time is its sort's and its two GEMM stages', as AITER's includes its sorting kernel; both take the router's top-k ids and weights as inputs. Roofline = bytes of the expert weights the routing touches at {hbm:.0} GB/s over tilegen's time; above 100% the model read them faster than its own HBM rate (marked `!`).\n",
        match args.method {
            Method::Full => "every workgroup simulated",
            Method::Rounds => "sampled rounds",
        },
        band.label()
    );
    let _ = writeln!(
        s,
        "| layer | tokens | experts touched | default fitted us | rule us (sort + gate/up + down) | rule spec | AITER us | ratio | roofline share |"
    );
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    let mut rows = 0;
    for layer in &LAYERS {
        if args.model.as_deref().is_some_and(|m| m != layer.name) {
            continue;
        }
        for &(tokens, aiter_us) in layer.measured {
            if args.tokens.as_ref().is_some_and(|t| !t.contains(&tokens)) {
                continue;
            }
            let r = routing(layer, tokens)?;
            let touched = r.counts().iter().filter(|&&c| c > 0).count();
            let base = MoeSpec::new(layer.activation).bias(layer.bias);
            let fitted = model(
                &base.clone().fit_to(&layer.shape),
                layer,
                &r,
                &params,
                args.method,
            )?;
            let rule_spec = base.for_tokens(&layer.shape, tokens);
            let rule = if rule_spec == fitted.spec {
                None
            } else {
                Some(model(&rule_spec, layer, &r, &params, args.method)?)
            };
            let best = rule.as_ref().unwrap_or(&fitted);
            let ratio = aiter_us / best.us;
            let bytes = touched_weight_bytes(&layer.shape, &r)? as f64;
            let roofline_us = bytes / (hbm * 1e9) * 1e6;
            let parts: Vec<String> = best
                .kernels
                .iter()
                .map(|(_, us, bound)| format!("{us:.1} {bound}"))
                .collect();
            let _ = writeln!(
                s,
                "| {} | {tokens} | {touched} | {:.1} | {:.1} ({}) | {} | {aiter_us:.1} | {ratio:.2} ±{:.2}{} | {:.0}%{} |",
                layer.name,
                fitted.us,
                best.us,
                parts.join(" + "),
                describe(&best.spec),
                ratio * band.median,
                if band.ties(1.0, ratio) { " tie" } else { "" },
                100.0 * roofline_us / best.us,
                if roofline_us > best.us { " !" } else { "" }
            );
            eprintln!("{} {tokens} tokens: {:.1} us", layer.name, best.us);
            if !(best.us > 0.0 && ratio.is_finite()) {
                return Err(format!("{} at {tokens} tokens was not modeled", layer.name).into());
            }
            rows += 1;
        }
    }
    if rows == 0 {
        return Err("no layer and token count selected".into());
    }
    print!("{s}");
    if args.smoke {
        return Ok(());
    }
    std::fs::create_dir_all(&args.out)?;
    Output::check(args.out.join("vs-aiter-moe.md"))?.write(s.as_bytes())?;
    eprintln!("wrote {}/vs-aiter-moe.md", args.out.display());
    Ok(())
}
