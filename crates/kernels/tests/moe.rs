//! The grouped MoE layer on the emulator against the CPU reference layer: both activations,
//! both combines, several tiles, skewed routings (every token to one expert, experts without
//! tokens, a block of one row), sizes that need padding, gpt-oss's expert biases, and the
//! refusals.

use rayon::prelude::*;
use tilegen_kernels::KernelSpec;
use tilegen_kernels::moe::{
    Activation, Combine, DeviceWeights, FUSED_SORT_PAIRS, MoeError, MoeInputError, MoeLayer,
    MoeShape, MoeSpec, MoeSpecError, PreshuffledExpert, Routing, Scoring, Stage, route,
};
use tilegen_mx::MxMatrix;
use tilegen_mx::moe::{ExpertBias, ExpertWeights, MoeRefError, MoeReference, random_tokens};
use tilegen_runtime::EmuDevice;

/// Random weights of expert `e`, with random biases for a spec that adds them.
fn random_expert(spec: &MoeSpec, shape: &MoeShape, e: usize, seed: u64) -> ExpertWeights {
    let w = ExpertWeights::random(shape, e, seed).unwrap();
    if spec.has_bias() {
        w.with_bias(shape, ExpertBias::random(shape, e, seed).unwrap())
            .unwrap()
    } else {
        w
    }
}

/// Runs `layer` on `routing` with random experts and checks the three comparisons; returns a
/// failure description.
fn check(
    layer: &MoeLayer,
    shape: &MoeShape,
    tokens: usize,
    routing: &Routing,
    seed: u64,
) -> Result<String, String> {
    let make = |e| random_expert(layer.spec(), shape, e, seed);
    check_with(layer, shape, tokens, routing, seed, &make).map(|(s, _)| s)
}

/// [`check`] with the experts `make` gives; also returns the run.
fn check_with(
    layer: &MoeLayer,
    shape: &MoeShape,
    tokens: usize,
    routing: &Routing,
    seed: u64,
    make: &(dyn Fn(usize) -> ExpertWeights + Sync),
) -> Result<(String, tilegen_kernels::moe::MoeRun), String> {
    let spec = layer.spec();
    let dev = EmuDevice::new();
    let experts: Vec<Option<ExpertWeights>> = {
        let counts = routing.counts();
        (0..shape.experts)
            .map(|e| (counts[e] > 0).then(|| make(e)))
            .collect()
    };
    let weights = DeviceWeights::new(&dev, shape, spec.has_bias()).map_err(|e| e.to_string())?;
    for (e, w) in experts.iter().enumerate() {
        if let Some(w) = w {
            let p = PreshuffledExpert::new(shape, w).unwrap();
            weights.write(e, &p).map_err(|e| e.to_string())?;
        }
    }
    let x = random_tokens(shape, tokens, seed ^ 0x77).unwrap();
    let run = layer
        .run(&dev, &weights, &x, routing)
        .map_err(|e| format!("{e:#}"))?;
    let host = routing.sort(spec.rows_per_block() as usize).unwrap();
    if run.sorted.canonical() != host {
        return Err(format!(
            "the device's sort: block experts {:?}, host {:?}",
            run.sorted.block_expert(),
            host.block_expert()
        ));
    }
    let get = |e: usize| {
        experts[e]
            .as_ref()
            .ok_or_else(|| MoeRefError::Input(format!("expert {e} was never routed to")))
    };
    let reference = MoeReference::new(
        shape,
        &x,
        routing.ids(),
        routing.weights(),
        spec.activation_kind(),
        spec.combine_kind(),
        &get,
    )
    .unwrap();
    let s1 = reference.check_stage1(&run.activations).unwrap();
    let s2 = reference
        .stage2_from(&run.activations, &get)
        .unwrap()
        .compare(&run.out)
        .unwrap();
    let layer_cmp = reference.compare_layer(&run.out).unwrap();
    let summary = format!(
        "stage1 {} of {} codes differ ({} scales), stage2 {s2}, layer {layer_cmp}",
        s1.differing, s1.elements, s1.differing_scales
    );
    // A layer that wrote nothing would pass trivially only if the reference were zero.
    let nonzero = run.out.iter().filter(|v| v.to_f32() != 0.0).count();
    if !s1.passed() || !s2.passed() || !layer_cmp.passed() || nonzero < run.out.len() / 2 {
        return Err(format!(
            "{summary}; stage1 violations {} (first: {:?}); {nonzero} nonzero outputs",
            s1.violations, s1.first_violation
        ));
    }
    Ok((summary, run))
}

fn small() -> MoeShape {
    MoeShape {
        experts: 8,
        topk: 2,
        hidden: 480,
        inter: 448,
    }
}

fn random_routing(shape: &MoeShape, tokens: usize, seed: u64) -> Routing {
    let mut s = seed | 1;
    let logits: Vec<f32> = (0..tokens * shape.experts)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 6.0 - 3.0
        })
        .collect();
    route(
        &logits,
        tokens,
        shape.experts,
        shape.topk,
        &Scoring::TopkSoftmax,
    )
    .unwrap()
}

/// Checks every case in parallel and reports all failures together.
fn sweep(cases: Vec<(String, MoeSpec, MoeShape, usize, Routing)>) {
    let failures: Vec<String> = cases
        .par_iter()
        .filter_map(|(name, spec, shape, tokens, routing)| {
            let layer = match spec.build() {
                Ok(l) => l,
                Err(e) => return Some(format!("{name}: {e:#}")),
            };
            match check(&layer, shape, *tokens, routing, 11) {
                Ok(_) => None,
                Err(e) => Some(format!("{name}: {e}")),
            }
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn activations_and_combines() {
    let shape = small();
    let mut cases = Vec::new();
    for act in [Activation::Swiglu, Activation::SiluMul] {
        for combine in [Combine::Atomic, Combine::SortedReduce] {
            for tokens in [1, 13] {
                cases.push((
                    format!("{act:?} {combine:?} {tokens} tokens"),
                    MoeSpec::new(act).combine(combine),
                    shape,
                    tokens,
                    random_routing(&shape, tokens, tokens as u64),
                ));
            }
        }
    }
    sweep(cases);
}

/// gpt-oss's expert biases with both activations and both combines, on a routing with several
/// blocks per expert and padded sizes (the gate/up bias's padding, the down bias's last
/// partial N tile).
#[test]
fn biases_with_both_activations() {
    let shape = small();
    let mut cases = Vec::new();
    for act in [Activation::Swiglu, Activation::SiluMul] {
        for (combine, tokens) in [(Combine::Atomic, 29), (Combine::SortedReduce, 7)] {
            cases.push((
                format!("{act:?} {combine:?} with biases, {tokens} tokens"),
                MoeSpec::new(act).combine(combine).bias(true),
                shape,
                tokens,
                random_routing(&shape, tokens, 90 + tokens as u64),
            ));
        }
    }
    // Another tile: 32x32 MFMAs (16 values a lane), BN = 256 and 64.
    let tile = |bn: u32| {
        KernelSpec::preb()
            .bm(32)
            .bn(bn)
            .wn(64)
            .bk_elems(256)
            .mma(tilegen_kernels::MfmaShape::M32N32K64)
    };
    cases.push((
        "Swiglu 32x32 MFMAs with biases".into(),
        MoeSpec::new(Activation::Swiglu)
            .gate_up(tile(256))
            .down(tile(64))
            .bias(true),
        shape,
        11,
        random_routing(&shape, 11, 5),
    ));
    sweep(cases);
}

/// With zero weights the layer is its biases alone: a kernel that dropped the gate/up bias
/// would give zero activations, one that dropped the down bias a zero output. With the sorted
/// reduce the output is exactly `bf16(sum_k w_k b2[e_k])`.
#[test]
fn zero_weights_give_the_bias_path() {
    let shape = small();
    let zero = |rows: usize, k: usize| {
        MxMatrix::from_parts(rows, k, vec![0; rows * k / 2], vec![127; rows * k / 32]).unwrap()
    };
    let make = |e: usize| {
        ExpertWeights::from_logical(
            &shape,
            &zero(2 * shape.inter, shape.hidden),
            &zero(shape.hidden, shape.inter),
        )
        .unwrap()
        .with_bias(&shape, ExpertBias::random(&shape, e, 3).unwrap())
        .unwrap()
    };
    let tokens = 9;
    let routing = random_routing(&shape, tokens, 17);
    for act in [Activation::Swiglu, Activation::SiluMul] {
        let spec = MoeSpec::new(act).combine(Combine::SortedReduce).bias(true);
        let layer = spec.build().unwrap();
        let (_, run) = check_with(&layer, &shape, tokens, &routing, 1, &make)
            .unwrap_or_else(|e| panic!("{act:?}: {e}"));
        let nonzero_codes = run.activations.data().iter().filter(|&&b| b != 0).count();
        assert!(
            nonzero_codes > run.activations.data().len() / 4,
            "{act:?}: {nonzero_codes} nonzero activation bytes"
        );
        let h = shape.hidden;
        for t in 0..tokens {
            for n in 0..h {
                let want: f32 = (0..shape.topk)
                    .map(|k| {
                        let p = t * shape.topk + k;
                        let b = make(routing.ids()[p] as usize).bias.unwrap();
                        routing.weights()[p] * b.down[n].to_f32()
                    })
                    .sum();
                assert_eq!(
                    run.out[t * h + n],
                    half::bf16::from_f32(want),
                    "{act:?} token {t} column {n}"
                );
            }
        }
    }
}

/// Routings a random router rarely gives: every token to the same expert (several blocks of
/// one expert, the other experts without a block), every token to the last expert, and one
/// token per expert for a few experts (blocks of one valid row).
#[test]
fn skewed_routings() {
    let shape = small();
    let mut cases = Vec::new();
    let tokens = 40;
    // Slot 0 always expert 5, slot 1 always expert 2: two experts hold everything.
    let ids: Vec<u32> = (0..tokens).flat_map(|_| [5, 2]).collect();
    let w: Vec<f32> = (0..tokens)
        .flat_map(|t| [0.6 + t as f32 / 200.0, 0.3])
        .collect();
    let two = Routing::new(shape.experts, 2, ids, w).unwrap();
    let one_hot = MoeShape { topk: 1, ..shape };
    let all_last = Routing::new(8, 1, vec![7; 70], vec![1.0; 70]).unwrap();
    let spread = Routing::new(
        8,
        2,
        vec![0, 3, 6, 1, 4, 7],
        vec![0.5, -0.25, 1.5, 0.5, 0.75, 0.25],
    )
    .unwrap();
    for act in [Activation::Swiglu, Activation::SiluMul] {
        cases.push((
            format!("{act:?} two experts"),
            MoeSpec::new(act),
            shape,
            tokens,
            two.clone(),
        ));
        cases.push((
            format!("{act:?} all to the last expert, blocks of 16"),
            MoeSpec::new(act).block_m(16).combine(Combine::SortedReduce),
            one_hot,
            70,
            all_last.clone(),
        ));
        cases.push((
            format!("{act:?} one row per block"),
            MoeSpec::new(act),
            shape,
            3,
            spread.clone(),
        ));
    }
    sweep(cases);
}

/// The pipeline's flags and tile shapes, on a shape whose K is several BK tiles: prefetch,
/// direct-to-LDS staging (gathered rows), 32x32x64 MFMAs, wide and narrow tiles.
#[test]
fn tiles_and_flags() {
    let shape = MoeShape {
        experts: 6,
        topk: 2,
        hidden: 992,
        inter: 960,
    };
    let tile = |bm: u32| KernelSpec::preb().bm(bm).bn(128).wn(64).bk_elems(512);
    let specs = [
        MoeSpec::new(Activation::Swiglu)
            .block_m(64)
            .gate_up(tile(64).b_prefetch(true))
            .down(tile(64).b_prefetch(true).dram_to_lds(true)),
        MoeSpec::new(Activation::SiluMul)
            .block_m(16)
            .gate_up(tile(16).bn(256).wn(64).dram_to_lds(true))
            .down(tile(16).bn(64).wn(16).bk_elems(256)),
        MoeSpec::new(Activation::Swiglu)
            .block_m(32)
            .gate_up(
                tile(32)
                    .mma(tilegen_kernels::MfmaShape::M32N32K64)
                    .b_prefetch(true)
                    .with_prefetch(|p| p.deep_prime(true)),
            )
            .down(
                tile(32)
                    .mma(tilegen_kernels::MfmaShape::M32N32K64)
                    .bk_elems(256),
            )
            .combine(Combine::SortedReduce),
        MoeSpec::new(Activation::SiluMul)
            .block_m(32)
            .gate_up(tile(32).bn(64).wn(32).bk_elems(256).lds_swizzle(false))
            .down(
                tile(32)
                    .b_prefetch(true)
                    .with_prefetch(|p| p.cluster_drain_sched(true))
                    .with_prefetch(|p| p.with_cluster(|c| c.mfma_cluster(2))),
            ),
        // The combine staged through LDS at its other geometries: 32-row MMA tiles read back
        // 8 lanes a row (f32 partials), and a 128-wide wave a whole row per read.
        MoeSpec::new(Activation::Swiglu)
            .block_m(64)
            .gate_up(tile(64))
            .down(
                tile(64)
                    .wn(32)
                    .bk_elems(256)
                    .mma(tilegen_kernels::MfmaShape::M32N32K64),
            )
            .combine(Combine::SortedReduce),
        MoeSpec::new(Activation::SiluMul)
            .block_m(64)
            .gate_up(tile(64))
            .down(tile(64).bn(256).wn(128)),
    ];
    let cases = specs
        .into_iter()
        .enumerate()
        .map(|(i, spec)| {
            (
                format!(
                    "spec {i}: {} / {}",
                    spec.kernel_name(tilegen_kernels::moe::Stage::GateUp),
                    spec.kernel_name(tilegen_kernels::moe::Stage::Down)
                ),
                spec,
                shape,
                21,
                random_routing(&shape, 21, 40 + i as u64),
            )
        })
        .collect();
    sweep(cases);
}

/// What the layer refuses before anything runs, each with the rule it breaks.
#[test]
fn refusals() {
    let shape = small();
    // A tile that is not whole MX blocks of activations.
    let bad = MoeSpec::new(Activation::Swiglu).gate_up(KernelSpec::preb().bm(32).bn(96).wn(32));
    assert!(matches!(
        bad.build(),
        Err(MoeError::Spec(MoeSpecError::Rule { .. }))
    ));
    let layer = MoeSpec::new(Activation::Swiglu).build().unwrap();
    let dev = EmuDevice::new();
    let weights = DeviceWeights::new(&dev, &shape, false).unwrap();
    let x = random_tokens(&shape, 4, 1).unwrap();
    // A routing over another number of experts.
    let r = Routing::new(9, 2, vec![0, 1, 2, 3, 4, 5, 6, 8], vec![0.5; 8]).unwrap();
    let e = layer.run(&dev, &weights, &x, &r).unwrap_err();
    assert!(
        matches!(
            e,
            MoeError::Inputs(MoeInputError::Routing {
                experts: 9,
                topk: 2,
                ..
            })
        ),
        "{e}"
    );
    // Tokens of another width, or count.
    let r = random_routing(&shape, 4, 1);
    let narrow = random_tokens(
        &MoeShape {
            hidden: 256,
            ..shape
        },
        4,
        1,
    )
    .unwrap();
    assert!(matches!(
        layer.run(&dev, &weights, &narrow, &r),
        Err(MoeError::Inputs(MoeInputError::Tokens { k: 256, .. }))
    ));
    let r5 = random_routing(&shape, 5, 1);
    assert!(matches!(
        layer.run(&dev, &weights, &x, &r5),
        Err(MoeError::Inputs(MoeInputError::Tokens {
            rows: 4,
            tokens: 5,
            ..
        }))
    ));
    // A hidden size BK does not divide once padded.
    let odd = MoeShape {
        hidden: 224,
        ..shape
    };
    let w2 = DeviceWeights::new(&dev, &odd, false).unwrap();
    let x2 = random_tokens(&odd, 4, 1).unwrap();
    assert!(matches!(
        layer.run(&dev, &w2, &x2, &r),
        Err(MoeError::Spec(MoeSpecError::Shape { .. }))
    ));
    // An expert past the layer's.
    let p = PreshuffledExpert::new(&shape, &ExpertWeights::random(&shape, 0, 1).unwrap()).unwrap();
    assert!(matches!(
        weights.write(8, &p),
        Err(MoeError::Inputs(MoeInputError::Expert {
            expert: 8,
            experts: 8
        }))
    ));
    // Biases where the weights have none, and the other way round.
    let b = ExpertBias::random(&shape, 0, 1).unwrap();
    let pb = PreshuffledExpert::new(
        &shape,
        &ExpertWeights::random(&shape, 0, 1)
            .unwrap()
            .with_bias(&shape, b)
            .unwrap(),
    )
    .unwrap();
    assert!(matches!(
        weights.write(0, &pb),
        Err(MoeError::Inputs(MoeInputError::BiasPresence {
            expert_has: true
        }))
    ));
    let wb = DeviceWeights::new(&dev, &shape, true).unwrap();
    assert!(matches!(
        wb.write(0, &p),
        Err(MoeError::Inputs(MoeInputError::BiasPresence {
            expert_has: false
        }))
    ));
    let biased = MoeSpec::new(Activation::Swiglu).bias(true).build().unwrap();
    assert!(matches!(
        biased.run(&dev, &weights, &x, &r),
        Err(MoeError::Inputs(MoeInputError::BiasPresence {
            expert_has: false
        }))
    ));
    assert!(matches!(
        layer.run(&dev, &wb, &x, &r),
        Err(MoeError::Inputs(MoeInputError::BiasPresence {
            expert_has: true
        }))
    ));
    // And the run itself works once the inputs fit.
    assert!(layer.run(&dev, &weights, &x, &r).is_ok());
}

/// The shipped MoE templates parse, their layers are the models' and their spaces build.
#[test]
fn shipped_moe_templates_parse_and_enumerate() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/moe");
    let mut names = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap();
        let t: tilegen_kernels::moe::MoeTemplate =
            toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        t.check().unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let plan = t.plan();
        assert!(
            plan.specs.len() >= 64,
            "{}: {} specs",
            t.model.name,
            plan.specs.len()
        );
        for s in &plan.specs {
            s.validate().unwrap();
            s.check_shape(&t.shape()).unwrap();
        }
        names.push((t.model.name.clone(), t.shape()));
    }
    names.sort_by(|a, b| a.0.cmp(&b.0));
    let want = [
        ("deepseek-v3", (256, 8, 7168, 2048)),
        ("gpt-oss-120b", (128, 4, 2880, 2880)),
        ("gpt-oss-20b", (32, 4, 2880, 2880)),
        ("kimi-k2", (384, 8, 7168, 2048)),
    ];
    assert_eq!(names.len(), want.len());
    for ((name, s), (wn, (e, k, h, i))) in names.iter().zip(want) {
        assert_eq!(
            (name.as_str(), s.experts, s.topk, s.hidden, s.inter),
            (wn, e, k, h, i)
        );
    }
    // Broken lists and sizes are refused by the check, unknown keys by the parser.
    let text = std::fs::read_to_string(dir.join("gpt-oss-20b.toml")).unwrap();
    let good: tilegen_kernels::moe::MoeTemplate = toml::from_str(&text).unwrap();
    let mut dup = good.clone();
    let wn = dup.space.axis(tilegen_kernels::gemm::Knob::Wn).to_vec();
    dup.space.set_axis(
        tilegen_kernels::gemm::Knob::Wn,
        wn.iter().chain(&wn[..1]).copied(),
    );
    assert!(dup.check().unwrap_err().contains("twice"));
    let mut desc = good.clone();
    desc.model.tokens = vec![4, 2];
    assert!(desc.check().is_err());
    let mut odd = good;
    odd.model.hidden = 2881;
    assert!(odd.check().is_err());
    let bad = "[model]\nname='x'\nsource=''\nexperts=4\ntopk=2\nhidden=64\ninter=64\nactivation='swiglu'\ntokens=[1]\ncolour=1\n";
    assert!(toml::from_str::<tilegen_kernels::moe::MoeTemplate>(bad).is_err());
}

/// The default spec fitted to sizes whose K is not a whole number of its 512-element tiles
/// (a tensor-parallel shard's intermediate 256, a hidden size of 768) runs the K loop in
/// 256-element steps and agrees with the reference.
#[test]
fn fitted_default_on_shard_sizes() {
    let mut cases = Vec::new();
    for (hidden, inter) in [(512, 256), (768, 224), (736, 384)] {
        let shape = MoeShape {
            experts: 6,
            topk: 3,
            hidden,
            inter,
        };
        let spec = MoeSpec::new(Activation::SiluMul).fit_to(&shape);
        // Unfitted, each is refused.
        assert!(
            MoeSpec::new(Activation::SiluMul)
                .check_shape(&shape)
                .is_err()
        );
        for tokens in [1, 9] {
            cases.push((
                format!("hidden {hidden} inter {inter}, {tokens} tokens"),
                spec.clone(),
                shape,
                tokens,
                random_routing(&shape, tokens, 3 + tokens as u64),
            ));
        }
    }
    sweep(cases);
}

/// The per-token-count rule's specs (blocks of 16, 32 and 64 rows; gate/up 64, 128 or 256
/// wide, down 128 or 256) on a narrow and a wide gate/up agree with the reference. Grids this
/// small take the decode gate/up tile (16-wide waves, K steps of up to 1024, fitted).
#[test]
fn per_token_rule_specs() {
    let mut cases = Vec::new();
    for (hidden, inter) in [(512, 256), (256, 1024), (1024, 256)] {
        let shape = MoeShape {
            experts: 4,
            topk: 2,
            hidden,
            inter,
        };
        // 1, 20 and 50 rows per expert: each of the rule's branches. Their gate/up tiles split
        // each quantization block of the epilogue over 16 (the decode tile) and 8 lanes; the
        // tiles of `tiles_and_flags` over 1, 2 and 4.
        for tokens in [2, 40, 100] {
            let spec = MoeSpec::new(Activation::Swiglu).for_tokens(&shape, tokens);
            cases.push((
                format!(
                    "hidden {hidden} inter {inter}, {tokens} tokens: {} / {}",
                    spec.kernel_name(tilegen_kernels::moe::Stage::GateUp),
                    spec.kernel_name(tilegen_kernels::moe::Stage::Down)
                ),
                spec,
                shape,
                tokens,
                random_routing(&shape, tokens, 60 + tokens as u64),
            ));
        }
    }
    sweep(cases);
}

/// The device's sort groups every routing as the host's does (up to the order of an
/// expert's pairs): one pair, a token per expert, every pair on the same experts, more
/// experts than the sort's work-items, more pairs than they load in one round, and each block
/// size; a layout that broke a rule would not read back at all.
#[test]
fn device_sort_groups_as_the_host() {
    let dev = EmuDevice::new();
    // (experts, topk, tokens, skewed)
    let cases = [
        (1, 1, 1, false),
        (8, 2, 1, false),
        (257, 9, 1, false),
        (257, 9, 16, false),
        (64, 8, 1024, false),
        (384, 8, 40, false),
        (2048, 8, 700, false),
        (257, 9, 2000, true),
        (257, 9, 4096, false),
    ];
    for block_m in [16, 32, 64, 128] {
        let layer = MoeSpec::new(Activation::SiluMul)
            .block_m(block_m)
            .build()
            .unwrap();
        for &(experts, topk, tokens, skewed) in &cases {
            let routing = if skewed {
                let ids = (0..tokens).flat_map(|_| 0..topk as u32).collect();
                Routing::new(experts, topk, ids, vec![1.0; tokens * topk]).unwrap()
            } else {
                let shape = MoeShape {
                    experts,
                    topk,
                    ..small()
                };
                random_routing(&shape, tokens, (experts * tokens + block_m as usize) as u64)
            };
            let host = routing.sort(block_m as usize).unwrap();
            let device = layer.sort_on(&dev, &routing).unwrap();
            assert_eq!(
                device.canonical(),
                host,
                "block_m {block_m}, {experts} experts top-{topk}, {tokens} tokens, skewed {skewed}"
            );
        }
    }
    let too_many = Routing::new(4096, 1, vec![4095], vec![1.0]).unwrap();
    let err = MoeSpec::new(Activation::SiluMul)
        .build()
        .unwrap()
        .sort_on(&dev, &too_many)
        .unwrap_err();
    assert!(err.to_string().contains("at most 2048"), "{err}");
}

/// The gate/up kernel groups a small pass's pairs itself ([`MoeSpec::fused_sort`]) and no sort
/// kernel runs; a pass past [`FUSED_SORT_PAIRS`] launches the sort, which the same kernels
/// read. Each pass's grouping, activations and output are checked (blocks of 16, 32 and 64
/// rows; one pair, a pass of exactly the limit, one past it; every token on the same experts).
#[test]
fn fused_sort_groups_small_passes_and_falls_back_past_its_limit() {
    let shape = MoeShape {
        experts: 12,
        topk: 4,
        hidden: 256,
        inter: 256,
    };
    let mut cases = Vec::new();
    for block_m in [16, 32, 64] {
        let spec = MoeSpec::new(Activation::SiluMul)
            .block_m(block_m)
            .fused_sort(true)
            .fit_to(&shape);
        // 1 pair is one token of top-1: use the layer's top-4 at 1, 16 (the limit) and 17
        // tokens.
        for tokens in [
            1,
            FUSED_SORT_PAIRS / shape.topk,
            FUSED_SORT_PAIRS / shape.topk + 1,
        ] {
            cases.push((
                format!("block_m {block_m}, {tokens} tokens"),
                spec.clone(),
                shape,
                tokens,
                random_routing(&shape, tokens, 90 + tokens as u64),
            ));
        }
        let tokens = 9;
        let ids = (0..tokens).flat_map(|_| 0..shape.topk as u32).collect();
        cases.push((
            format!("block_m {block_m}, {tokens} tokens on the same experts"),
            spec.clone(),
            shape,
            tokens,
            Routing::new(
                shape.experts,
                shape.topk,
                ids,
                vec![0.25; tokens * shape.topk],
            )
            .unwrap(),
        ));
    }
    for (_, spec, shape, tokens, routing) in &cases {
        let layer = spec.build().unwrap();
        let sorted_here = tokens * shape.topk <= FUSED_SORT_PAIRS;
        let (_, run) = check_with(&layer, shape, *tokens, routing, 5, &|e| {
            random_expert(spec, shape, e, 5)
        })
        .unwrap_or_else(|e| panic!("{tokens} tokens, block_m {}: {e}", spec.rows_per_block()));
        let launched: Vec<Stage> = run.launches.iter().map(|l| l.stage).collect();
        assert_eq!(
            launched.contains(&Stage::Sort),
            !sorted_here,
            "{tokens} tokens: launched {launched:?}"
        );
    }
    assert!(matches!(
        MoeSpec::new(Activation::SiluMul)
            .block_m(128)
            .fused_sort(true)
            .validate(),
        Err(MoeSpecError::Rule { .. })
    ));
}
