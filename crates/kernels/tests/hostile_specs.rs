//! Random and adversarial specs: each is refused with a rule (never a compile failure, a panic or
//! a wrapped size) or builds into a kernel whose code object agrees with the spec; a sample of
//! the kernels that build are run on the emulator against the reference GEMM.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, RngAlgorithm, RngSeed, TestRunner};
use rayon::prelude::*;
use tilegen_dsl::CompileOptions;
use tilegen_kernels::gemm::ClusterSched;
use tilegen_kernels::{
    CachePolicy, CompiledKernel, KernelSpec, MfmaShape, OutDtype, Prefetch, SpecError, SpecValues,
    Variant,
};
use tilegen_mx::{MxMatrix, reference_gemm};
use tilegen_runtime::EmuDevice;

const CASES: u32 = 2000;
/// Kernels that build are also run on the emulator, up to this many (each takes a compile
/// and a small GEMM).
const RUNS: usize = 40;

/// The cases' seed.
const SEED: u64 = 0x7153_9e2d;

/// A tile dimension: mostly values a user would try, some hostile ones (zero, odd, values that
/// wrap u32 products into small valid-looking ones), some anything.
fn dim() -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => prop::sample::select(vec![16u32, 32, 48, 64, 96, 128, 160, 192, 256, 512, 1024]),
        2 => prop::sample::select(vec![
            0u32,
            1,
            8,
            17,
            384,
            2048,
            65536,
            1 << 27,
            1_073_741_840,
            1 << 31,
            (1 << 31) + 16,
            u32::MAX - 15,
            u32::MAX,
        ]),
        1 => any::<u32>(),
    ]
}

/// A spec a user would plausibly write: consistent tile sizes, flags of its own variant.
fn plausible() -> impl Strategy<Value = SpecValues> {
    let flag = || prop::bool::weighted(0.35);
    let preb = (
        prop::sample::select(vec![16u32, 32, 64, 96, 128, 256]),
        prop::sample::select(vec![16u32, 32, 64, 96, 128]),
        1u32..=4,
        prop::sample::select(vec![256u32, 512, 768, 1024, 1280, 1536, 2048]),
        (flag(), flag(), flag(), flag()),
        prop::sample::select(vec![
            CachePolicy::Always,
            CachePolicy::Global,
            CachePolicy::Streaming,
            CachePolicy::Volatile,
        ]),
        1u32..=8,
        // Waves along M: BM split in 1, 2 or 4 strips (refused where a strip breaks a rule);
        // accumulators sometimes in AGPRs.
        (prop::sample::select(vec![1u32, 1, 2, 4]), flag()),
    )
        .prop_map(
            |(bm, wn, waves, bk, (pf, d2l, cds, dp), policy, cluster, (wsplit, agpr))| {
                // The cluster size is a cluster_drain_sched setting.
                let sched = cds.then(|| ClusterSched::new().mfma_cluster(cluster));
                let pipeline = Prefetch::new().deep_prime(dp).cluster(sched);
                KernelSpec::from(
                    KernelSpec::new()
                        .bm(bm)
                        .wm(bm / wsplit)
                        .acc_agprs(agpr)
                        .wn(wn)
                        .bn(wn * waves)
                        .bk_elems(bk)
                        .prefetch(pf.then_some(pipeline))
                        .dram_to_lds(d2l)
                        .b_cache_policy(policy),
                )
            },
        );
    let lds = (
        prop_oneof![Just(MfmaShape::M16N16K128), Just(MfmaShape::M32N32K64)],
        prop::sample::select(vec![1u32, 2, 3, 4]),
        prop::sample::select(vec![1u32, 2, 3, 4]),
        1u32..=2,
        1u32..=2,
        prop::sample::select(vec![128u32, 256, 384, 512, 640, 768, 1024]),
        flag(),
    )
        .prop_map(|(mma, tm, tn, wy, wx, bk, d2l)| {
            let mn = match mma {
                MfmaShape::M16N16K128 => 16,
                MfmaShape::M32N32K64 => 32,
            };
            KernelSpec::from(
                KernelSpec::lds()
                    .mma(mma)
                    .wm(tm * mn)
                    .wn(tn * mn)
                    .bm(tm * mn * wy)
                    .bn(tn * mn * wx)
                    .bk_elems(bk)
                    .dram_to_lds(d2l),
            )
        });
    let out = prop::sample::select(vec![OutDtype::Bf16, OutDtype::F32]);
    let waves = prop_oneof![4 => Just(None), 1 => (1u32..=8).prop_map(Some)];
    // Mostly swizzled (the default), sometimes not: both layouts of the operand tiles.
    let swizzle = prop::bool::weighted(0.8);
    // Split-K on preb specs only (the lds kernel refuses it).
    let split = prop_oneof![3 => Just(1u32), 1 => prop::sample::select(vec![2u32, 3, 4, 8])];
    (prop_oneof![preb, lds], out, waves, swizzle, split)
        .prop_map(|(s, out, waves, sw, split)| {
            let mut v = s
                .out_dtype(out)
                .waves_per_eu(waves)
                .lds_swizzle(sw)
                .values();
            if v.variant == Variant::Preb {
                v.split_k = split;
            }
            v
        })
        // Compile time grows with the unrolled MFMA chain; the largest chains stay in the
        // arbitrary half, which reaches them less often.
        .prop_filter("a chain of at most 64 MFMAs per stage", |v| {
            KernelSpec::try_from(v.clone()).is_ok_and(|s| s.mfmas_per_stage() <= 64)
        })
}

/// Anything: each field of the stored form drawn on its own, hostile values included, knobs
/// the variant or the pipeline has no place for among them.
fn arbitrary() -> impl Strategy<Value = SpecValues> {
    let variant = prop::sample::select(vec![Variant::Preb, Variant::Lds]);
    let mma = prop_oneof![
        2 => Just(MfmaShape::M16N16K128),
        1 => Just(MfmaShape::M32N32K64),
    ];
    let policy = prop_oneof![
        3 => Just(CachePolicy::Always),
        1 => prop::sample::select(vec![
            CachePolicy::Global,
            CachePolicy::Streaming,
            CachePolicy::Volatile,
        ]),
    ];
    let out = prop::sample::select(vec![OutDtype::Bf16, OutDtype::F32]);
    let bk = prop_oneof![
        4 => prop::sample::select(vec![128u32, 256, 512, 768, 1024, 2048]),
        1 => dim(),
    ];
    // Flags are rarer than not, so that combinations of several still occur but most specs
    // are not refused for a flag of the other variant.
    let flag = || prop::bool::weighted(0.3);
    let flags = (flag(), flag(), flag(), flag());
    let cluster = prop_oneof![3 => 1u32..=8, 1 => any::<u32>()];
    let waves = prop_oneof![3 => Just(None), 1 => (0u32..=10).prop_map(Some), 1 => any::<u32>().prop_map(Some)];
    let split = prop_oneof![
        4 => Just(1u32),
        1 => prop::sample::select(vec![0u32, 2, 3, 64, 65, 1 << 16, u32::MAX]),
    ];
    (
        (variant, dim(), dim(), bk, dim(), dim()),
        (mma, policy, out, flags, cluster, waves, split),
        // Mostly, settings the variant ignores are left unset, so the other rules are reached;
        // sometimes they are set anyway, and must be refused.
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(
                (variant, bm, bn, bk, wm, wn),
                (mma, policy, out, flags, cluster, waves, split),
                stray,
            )| {
                let preb = variant == Variant::Preb;
                let mut s = KernelSpec::of_variant(variant).values();
                (s.bm, s.bn, s.bk_elems, s.wn, s.mma, s.out_dtype) = (bm, bn, bk, wn, mma, out);
                // Preb takes wm too (waves along M); sometimes left at its default, BM.
                s.wm = if !preb || stray || flags.0 { wm } else { bm };
                s.acc_agprs = flags.1 && flags.3;
                if preb || stray {
                    s.b_cache_policy = policy;
                    s.b_prefetch = flags.0;
                    s.cluster_drain_sched = flags.2;
                    s.deep_prime = flags.3;
                }
                if flags.2 || stray {
                    s.mfma_cluster = cluster;
                }
                s.dram_to_lds = flags.1;
                s.lds_swizzle = !flags.3;
                s.waves_per_eu = waves;
                s.split_k = split;
                s
            },
        )
}

fn spec() -> impl Strategy<Value = SpecValues> {
    prop_oneof![2 => plausible(), 3 => arbitrary()]
}

/// What a built kernel's code object must say about its spec.
fn agrees(spec: &KernelSpec, k: &CompiledKernel) -> Result<(), String> {
    let r = &k.report();
    let threads = spec.threads();
    if r.workgroup_size != threads {
        return Err(format!(
            "workgroup size {} but the spec has {threads} threads",
            r.workgroup_size
        ));
    }
    if !(1..=1024).contains(&threads) || !threads.is_multiple_of(64) {
        return Err(format!("{threads} threads is not a whole number of waves"));
    }
    if u64::from(r.lds_bytes) != spec.lds_bytes() || r.lds_bytes > tilegen_arch::LDS_BYTES_PER_CU {
        return Err(format!(
            "the code object has {} B of LDS; the spec needs {} B of the 160 KB",
            r.lds_bytes,
            spec.lds_bytes()
        ));
    }
    // On gfx950 the metadata's VGPR count is the unified file: architectural VGPRs (aligned)
    // plus AGPRs.
    if r.vgpr_count > 512 || r.agpr_count > r.vgpr_count {
        return Err(format!(
            "{} unified VGPRs with {} AGPRs do not fit the 512 per lane",
            r.vgpr_count, r.agpr_count
        ));
    }
    if k.name() != spec.kernel_name() {
        return Err(format!(
            "kernel {} for spec {}",
            k.name(),
            spec.kernel_name()
        ));
    }
    Ok(())
}

/// Runs a small GEMM with a ragged M, two N tiles plus a partial one and a K tail (split-K:
/// one tile per K slice, the K its launch rule allows).
fn run_on_emulator(k: &CompiledKernel) -> Result<(), String> {
    let s = k.spec();
    let kd = match s.split_k() {
        1 => 2 * s.bk_elems.max(256) as usize + 256,
        splits => (splits * s.bk_elems) as usize,
    };
    let (m, n) = (s.bm as usize + 3, 2 * s.bn as usize + 16);
    let a = MxMatrix::random(m, kd, 7).map_err(|e| e.to_string())?;
    let b = MxMatrix::random(n, kd, 8).map_err(|e| e.to_string())?;
    let inputs = k.prepare_inputs(&a, &b).map_err(|e| e.to_string())?;
    let (c, _) = k
        .run(&EmuDevice::new(), &inputs)
        .map_err(|e| format!("{m}x{n}x{kd}: {e}"))?;
    let reference = reference_gemm(&a, &b).map_err(|e| e.to_string())?;
    let cmp = c.compare(&reference).map_err(|e| e.to_string())?;
    if cmp.passed() {
        Ok(())
    } else {
        Err(format!("{m}x{n}x{kd}: {cmp}"))
    }
}

/// What happened to one stored spec: refused as it is read (a knob with no place in it), by a
/// rule, or built.
fn outcome(values: &SpecValues, run: bool) -> Result<String, String> {
    let spec = match KernelSpec::try_from(values.clone()) {
        Ok(s) => s,
        Err(e) => {
            let rule = format!("{e:?}");
            return Ok(format!(
                "refused as read: {}",
                rule.split([' ', '{', '(']).next().unwrap_or("")
            ));
        }
    };
    let spec = &spec;
    let built = match spec.validate() {
        Err(e) => {
            // A refusal comes from a rule, before LLVM (validate's error type has no compiler
            // failure), and build must agree with it.
            if spec.build_with(CompileOptions::default()).is_ok() {
                return Err("validate refuses but build accepts".into());
            }
            let rule = format!("{e:?}");
            return Ok(format!(
                "refused: {}",
                rule.split([' ', '{', '(']).next().unwrap_or("")
            ));
        }
        Ok(()) => spec
            .build_with(CompileOptions::default())
            .map_err(|e| format!("a valid spec failed: {e}"))?,
    };
    agrees(spec, &built)?;
    if run {
        run_on_emulator(&built)?;
        return Ok("built and matched the reference on the emulator".into());
    }
    Ok("built".into())
}

#[test]
fn random_specs_are_refused_by_a_rule_or_build_a_kernel_that_agrees() {
    // Deterministic: the same cases on every run and machine (proptest's default seed is
    // random); PROPTEST_RNG_SEED explores others.
    let seed = std::env::var("PROPTEST_RNG_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let mut runner = TestRunner::new(Config {
        rng_algorithm: RngAlgorithm::ChaCha,
        rng_seed: RngSeed::Fixed(seed),
        ..Config::default()
    });
    let strategy = spec();
    let specs: Vec<SpecValues> = (0..CASES)
        .map(|_| strategy.new_tree(&mut runner).map(|t| t.current()))
        .collect::<Result<_, _>>()
        .unwrap();
    let start = std::time::Instant::now();
    // Specs compile in parallel; the first RUNS that build also run on the emulator.
    let valid: Vec<usize> = (0..specs.len())
        .filter(|&i| KernelSpec::try_from(specs[i].clone()).is_ok_and(|s| s.validate().is_ok()))
        .take(RUNS)
        .collect();
    let results: Vec<Result<String, String>> = specs
        .par_iter()
        .enumerate()
        .map(|(i, spec)| outcome(spec, valid.contains(&i)).map_err(|e| format!("{spec:?}: {e}")))
        .collect();
    let mut counts = BTreeMap::<&str, usize>::new();
    let mut failures = Vec::new();
    for r in &results {
        match r {
            Ok(what) => *counts.entry(what.as_str()).or_default() += 1,
            Err(e) => failures.push(e.as_str()),
        }
    }
    eprintln!(
        "{CASES} random specs in {:.1} s:",
        start.elapsed().as_secs_f64()
    );
    for (k, v) in &counts {
        eprintln!("  {v:5}  {k}");
    }
    assert!(
        failures.is_empty(),
        "{} wrong outcome(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
    let built: usize = counts
        .iter()
        .filter(|(k, _)| k.starts_with("built"))
        .map(|(_, v)| v)
        .sum();
    assert!(
        built >= 300,
        "only {built} of {CASES} specs built: the generator no longer reaches valid specs"
    );
}

/// The reproducers of wrapped sizes: each used to pass validation with a product computed in u32.
#[test]
fn wrapped_sizes_are_refused_with_the_real_numbers() {
    let e = KernelSpec::new()
        .bm(64)
        .bn(1_073_741_840)
        .wn(16)
        .validate()
        .unwrap_err();
    assert_eq!(
        e,
        SpecError::TooManyThreads {
            warps: 67_108_865,
            threads: 4_294_967_360
        }
    );
    assert!(e.to_string().contains("4294967360"), "{e}");
    let e = KernelSpec::lds()
        .wn(16)
        .bn(1_073_741_840)
        .bm(64)
        .bk_elems(1024)
        .wm(16)
        .validate()
        .unwrap_err();
    assert!(
        matches!(
            e,
            SpecError::TooManyThreads {
                warps: 268_435_460,
                ..
            }
        ),
        "{e}"
    );
    let e = KernelSpec::new()
        .bm(128)
        .bn(1 << 31)
        .wn(1 << 31)
        .bk_elems(1024)
        .validate()
        .unwrap_err();
    assert!(
        matches!(e, SpecError::RegisterBudget { estimate, .. } if estimate > 1 << 32),
        "{e}"
    );
}

/// Split-K's rules: the slice count is bounded and preb-only, and a launch whose K does not
/// divide into whole-tile slices is refused with the numbers, before anything runs.
#[test]
fn split_k_rules() {
    for bad in [0, KernelSpec::MAX_SPLIT_K + 1, u32::MAX] {
        let e = KernelSpec::new().split_k(bad).validate().unwrap_err();
        assert!(
            matches!(e, SpecError::OutOfRange { name: "split_k", value, .. } if value == bad),
            "{e}"
        );
    }
    let mut stored = KernelSpec::lds().values();
    stored.split_k = 2;
    let e = KernelSpec::try_from(stored).unwrap_err();
    assert!(
        matches!(
            e,
            SpecError::WrongVariant {
                flag: "split_k",
                ..
            }
        ),
        "{e}"
    );
    let spec = KernelSpec::new().split_k(4);
    spec.check_problem(16, 7168, 2048).unwrap();
    let e = spec.check_problem(16, 7168, 3072).unwrap_err();
    assert!(e.to_string().contains("4 x 512 = 2048"), "{e}");
    let k = spec.build().unwrap();
    assert!(k.buffer_sizes(16, 7168, 1024).is_err());
    assert_eq!(k.grid(16, 7168), [56, 1, 4]);
    // The slices go to a workspace the reduction sums; only the atomic form adds into C.
    assert!(!k.accumulates_into_c());
    let atomic = KernelSpec::new()
        .split_k(4)
        .split_k_atomic(true)
        .build()
        .unwrap();
    assert!(atomic.accumulates_into_c());
}
