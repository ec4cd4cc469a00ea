//! Every flag combination on several tile shapes: builds, keeps registers out of scratch, and
//! its listing shows what the flag promises.

use tilegen_kernels::asm::LoopStats;
use tilegen_kernels::{
    BuildError, CachePolicy, CompiledKernel, KernelSpec, MfmaShape, OutDtype, PrebSpec, SpecError,
    SpecValues,
};

/// (bm, bn, bk_elems, wn): the seed default, a square tile with 32-wide waves, and the smallest
/// (BM = 16 and WN = 16 exercise the run-time scale-byte selection).
const PREB_SHAPES: &[(u32, u32, u32, u32)] =
    &[(64, 128, 512, 64), (128, 128, 256, 32), (16, 64, 256, 16)];

fn main_loop(asm: &str) -> Vec<&str> {
    tilegen_kernels::asm::main_loop_lines(asm).expect("a main loop")
}

fn b_policy_flags(p: CachePolicy) -> &'static str {
    match p {
        CachePolicy::Always => "",
        CachePolicy::Global => "sc1",
        CachePolicy::Streaming => "nt",
        CachePolicy::Volatile => "sc0 sc1",
    }
}

#[test]
fn preb_flag_combinations() {
    let policies = [
        CachePolicy::Always,
        CachePolicy::Global,
        CachePolicy::Streaming,
        CachePolicy::Volatile,
    ];
    for &(bm, bn, bk, wn) in PREB_SHAPES {
        let base = KernelSpec::new().bm(bm).bn(bn).bk_elems(bk).wn(wn);
        // Clusters of 4 MFMAs (the default), or fewer where a tile has fewer.
        for spec in base.preb_flag_variants(4) {
            let f = spec.values().clone();
            // Cache policies are independent of the schedule: cycle through them.
            let policy = policies[(f.b_prefetch as usize
                + 2 * f.dram_to_lds as usize
                + f.cluster_drain_sched as usize
                + f.deep_prime as usize)
                % 4];
            let spec = spec.b_cache_policy(policy);
            check_preb(&spec);
            // B two tiles ahead, on the schedules without priority brackets.
            if f.b_prefetch && !f.cluster_drain_sched {
                check_preb(&spec.with_prefetch(|p| p.b_prefetch_depth(2)));
            }
        }
    }
}

fn check_preb(spec: &PrebSpec) {
    let pipeline = spec.prefetch_settings();
    let sched = pipeline.and_then(|p| p.cluster);
    let name = spec.kernel_name();
    let k = spec.build().unwrap_or_else(|e| panic!("{name}: {e}"));
    // The kernel allocates exactly the spec's LDS plan.
    assert_eq!(
        u64::from(k.report().lds_bytes),
        spec.lds_bytes(),
        "{name}: LDS bytes"
    );
    let r = &k.report();
    assert_eq!(
        (r.vgpr_spill_count, r.sgpr_spill_count, r.private_bytes),
        (0, 0, 0),
        "{name} spills"
    );
    let body = main_loop(k.asm());
    let mfmas = body
        .iter()
        .filter(|l| l.contains("v_mfma_scale_f32_16x16x128_f8f6f4"))
        .count();
    let per_tile = spec.mfmas_per_stage() as usize;
    // The loop is unrolled once per pipeline stage.
    let tiles_in_body = spec.stages() as usize;
    assert_eq!(
        mfmas,
        per_tile * tiles_in_body,
        "{name}: MFMAs in the main loop"
    );
    // dram_to_lds: A moves with `buffer_load_dwordx4 ... lds`; otherwise through VGPRs and
    // ds_write (anywhere in the kernel: rounds only some waves take are placed out of line).
    let lds_loads = k
        .asm()
        .lines()
        .filter(|l| l.contains("buffer_load_dwordx4") && l.trim_end().ends_with(" lds"))
        .count();
    let ds_writes = k
        .asm()
        .lines()
        .filter(|l| l.contains("ds_write_b128"))
        .count();
    if spec.dram_to_lds {
        assert!(
            lds_loads > 0 && ds_writes == 0,
            "{name}: {lds_loads} lds loads, {ds_writes} ds_writes"
        );
    } else {
        assert!(
            lds_loads == 0 && ds_writes > 0,
            "{name}: {lds_loads} lds loads, {ds_writes} ds_writes"
        );
    }
    // B fragments: one dwordx4 per (n, k) MFMA operand, with the requested cache bits.
    let b_frags = (spec.wn / 16 * spec.bk_elems / 128) as usize;
    let b_loads: Vec<&&str> = body
        .iter()
        .filter(|l| l.contains("buffer_load_dwordx4") && !l.trim_end().ends_with(" lds"))
        .filter(|l| spec.dram_to_lds || !l.contains("offen offset"))
        .collect();
    if spec.dram_to_lds {
        // Every non-lds dwordx4 load in the loop is a B fragment.
        assert_eq!(b_loads.len(), b_frags * tiles_in_body, "{name}: B loads");
        // A register set per stage with b_prefetch: the destinations of the steps differ.
        let dests: std::collections::BTreeSet<&str> = b_loads
            .iter()
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(|d| d.trim_end_matches(','))
            .collect();
        // One register set would give exactly `b_frags` destinations; the allocator may reuse a
        // register another step has already freed, so S sets give more than S - 1 would, not
        // always S times as many.
        assert!(
            tiles_in_body < 2 || dests.len() > b_frags * (tiles_in_body - 1),
            "{name}: {} distinct B destinations for {b_frags} fragments a half",
            dests.len()
        );
        // With b_prefetch the next stage's B fragments are issued between this stage's MFMAs,
        // not in one burst before them: most of them sit inside the MFMA chain (where the chain
        // has rows enough to spread them over; LLVM may order a load and its row's MFMAs
        // either way).
        let rows = (spec.warp_m() / 16 * spec.bk_elems / 128) as usize;
        if pipeline.is_some() && rows >= 4 {
            let is_mfma = |l: &str| l.contains("v_mfma_scale_f32_16x16x128_f8f6f4");
            let first = body.iter().position(|l| is_mfma(l));
            let last = body.iter().rposition(|l| is_mfma(l));
            if let (Some(first), Some(last)) = (first, last) {
                let inside = body[first..last]
                    .iter()
                    .filter(|l| {
                        l.contains("buffer_load_dwordx4") && !l.trim_end().ends_with(" lds")
                    })
                    .count();
                assert!(
                    2 * inside >= b_loads.len(),
                    "{name}: {inside} of {} B loads inside the MFMA chain",
                    b_loads.len()
                );
            }
        }
        let flags = b_policy_flags(spec.knobs().b_cache_policy);
        for l in &b_loads {
            let has = |f: &str| l.split_whitespace().any(|w| w == f);
            for f in ["sc0", "sc1", "nt"] {
                assert_eq!(
                    has(f),
                    flags.split_whitespace().any(|x| x == f),
                    "{name}: B load `{}` cache bits",
                    l.trim()
                );
            }
        }
    }
    // cluster_drain_sched: s_setprio 1 / s_setprio 0 around every cluster of mfma_cluster MFMAs,
    // and waits that leave loads in flight (a staircase of partial vmcnt) inside the chain.
    let raises = body.iter().filter(|l| l.trim() == "s_setprio 1").count();
    let lowers = body.iter().filter(|l| l.trim() == "s_setprio 0").count();
    if let Some(sched) = sched {
        let clusters = per_tile.div_ceil(sched.mfma_cluster as usize) * tiles_in_body;
        assert_eq!(
            (raises, lowers),
            (clusters, clusters),
            "{name}: priority brackets"
        );
        let partial: std::collections::BTreeSet<&str> = body
            .iter()
            .filter_map(|l| l.trim().strip_prefix("s_waitcnt vmcnt("))
            .filter(|v| !v.starts_with("0)"))
            .collect();
        assert!(
            partial.len() >= 2,
            "{name}: partial vmcnt staircase {partial:?}"
        );
    } else {
        assert_eq!(
            (raises, lowers),
            (0, 0),
            "{name}: no priority changes without cluster_drain_sched"
        );
    }
    if pipeline.is_some_and(|p| p.deep_prime) {
        // The prologue stages a second A tile: the kernel holds exactly one more A staging
        // (one wave's rounds of 16-byte moves into LDS) than the same spec without deep_prime;
        // two B tiles ahead through VGPRs, the second tile's loads are held and the first step
        // writes them with its own, so there are as many as without deep_prime.
        let staging = |asm: &str| {
            asm.lines()
                .filter(|l| {
                    let l = l.trim_end();
                    (l.contains("buffer_load_dwordx4") && l.ends_with(" lds"))
                        || l.contains("ds_write_b128")
                })
                .count()
        };
        let shallow = spec
            .clone()
            .with_prefetch(|p| p.deep_prime(false))
            .build()
            .unwrap();
        let held = spec.stages() == 3 && !spec.dram_to_lds;
        let rounds = if held {
            0
        } else {
            (spec.bm * spec.bk_elems / 2 / 1024).div_ceil(spec.warps()) as usize
        };
        assert_eq!(
            staging(k.asm()),
            staging(shallow.asm()) + rounds,
            "{name}: A stagings"
        );
    }
}

#[test]
fn every_setting_that_changes_the_code_changes_the_key() {
    // The same spec built twice is the same kernel, bit for bit.
    let base = KernelSpec::new().b_prefetch(true);
    let once = base.build().unwrap();
    let twice = base.clone().build().unwrap();
    assert_eq!(once.code_object(), twice.code_object());
    assert_eq!(once.cache_key(), twice.cache_key());
    // Each setting below changes the generated code, and so the key.
    let variants = [
        ("no prefetch", KernelSpec::new()),
        ("bm", base.clone().bm(32)),
        ("bn", base.clone().bn(64)),
        ("bk_elems", base.clone().bk_elems(256)),
        ("wn", base.clone().wn(32)),
        ("dram_to_lds", base.clone().dram_to_lds(true)),
        ("lds_swizzle", base.clone().lds_swizzle(false)),
        (
            "deep_prime",
            base.clone().with_prefetch(|p| p.deep_prime(true)),
        ),
        (
            "cluster_drain_sched",
            base.clone().with_prefetch(|p| p.cluster_drain_sched(true)),
        ),
        (
            "mfma_cluster",
            base.clone()
                .with_prefetch(|p| p.with_cluster(|c| c.mfma_cluster(2))),
        ),
        (
            "b_cache_policy",
            base.clone().b_cache_policy(CachePolicy::Streaming),
        ),
        ("out_dtype", base.clone().out_dtype(OutDtype::F32)),
        ("waves_per_eu", base.clone().waves_per_eu(Some(2))),
        ("split_k", base.clone().split_k(2)),
        ("wm", base.clone().bm(128).wm(64)),
        ("acc_agprs", base.clone().acc_agprs(true)),
        (
            "b_prefetch_depth",
            base.clone().with_prefetch(|p| p.b_prefetch_depth(2)),
        ),
        ("b_burst", base.clone().with_prefetch(|p| p.b_burst(true))),
        ("a_spread", base.clone().with_prefetch(|p| p.a_spread(true))),
    ];
    let mut keys = vec![once.cache_key().to_string()];
    for (what, spec) in variants {
        let k = spec.build().unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_ne!(k.code_object(), once.code_object(), "{what}: same code");
        assert!(
            !keys.contains(&k.cache_key().to_string()),
            "{what}: the key of another spec"
        );
        keys.push(k.cache_key().to_string());
    }
}

#[test]
fn settings_a_variant_ignores_are_refused_not_keyed() {
    // A preb wm below bm splits BM across waves: another kernel, another key. A cluster size
    // without cluster_drain_sched is refused.
    let split = KernelSpec::new().wm(32);
    assert_eq!(split.wave_grid(), (2, 2));
    assert_ne!(split.cache_key(), KernelSpec::new().cache_key());
    // Without an explicit wm, a preb wave keeps covering all BM rows.
    assert_eq!(KernelSpec::new().bm(128).wave_grid(), (1, 2));
    // The types have no place for a cluster size without cluster_drain_sched, nor for a
    // preb knob on the LDS kernel; a stored spec that holds one is refused as it is read.
    let stored = |f: fn(&mut SpecValues), base: KernelSpec| {
        let mut v = base.values();
        f(&mut v);
        KernelSpec::try_from(v).map_err(BuildError::Spec)
    };
    let e = stored(|v| v.mfma_cluster = 2, KernelSpec::new().into()).unwrap_err();
    assert!(
        matches!(e, BuildError::Spec(SpecError::Ignored { setter, .. }) if setter == "mfma_cluster"),
        "{e}"
    );
    let e = stored(|v| v.b_prefetch = true, KernelSpec::lds().into()).unwrap_err();
    assert!(
        matches!(
            e,
            BuildError::Spec(SpecError::WrongVariant {
                flag: "b_prefetch",
                ..
            })
        ),
        "{e}"
    );
}

#[test]
fn lds_variant_shapes_and_outputs() {
    for (bm, bn, bk, wm, wn, mma) in [
        (128, 128, 128, 64, 64, MfmaShape::M16N16K128),
        (64, 64, 256, 32, 32, MfmaShape::M32N32K64),
        (32, 64, 128, 32, 32, MfmaShape::M16N16K128),
    ] {
        for dram in [false, true] {
            for out in [OutDtype::Bf16, OutDtype::F32] {
                let spec = KernelSpec::lds()
                    .bm(bm)
                    .bn(bn)
                    .bk_elems(bk)
                    .wm(wm)
                    .wn(wn)
                    .mma(mma)
                    .dram_to_lds(dram)
                    .out_dtype(out);
                let name = spec.kernel_name();
                let k = spec.build().unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(
                    u64::from(k.report().lds_bytes),
                    spec.lds_bytes(),
                    "{name}: LDS"
                );
                assert_eq!(
                    (k.report().vgpr_spill_count, k.report().private_bytes),
                    (0, 0),
                    "{name} spills"
                );
                let mnemonic = match mma {
                    MfmaShape::M16N16K128 => "v_mfma_scale_f32_16x16x128_f8f6f4",
                    MfmaShape::M32N32K64 => "v_mfma_scale_f32_32x32x64_f8f6f4",
                };
                let lp = LoopStats::from_asm(k.asm());
                assert_eq!(lp.mfmas, spec.mfmas_per_stage(), "{name}");
                assert!(
                    main_loop(k.asm())
                        .iter()
                        .all(|l| !l.contains("v_mfma") || l.contains(mnemonic))
                );
                let store = match out {
                    OutDtype::Bf16 => "buffer_store_dwordx2",
                    OutDtype::F32 => "buffer_store_dwordx4",
                };
                assert!(k.asm().contains(store), "{name}: {store}");
                assert_eq!(
                    k.asm().contains("offen lds"),
                    dram,
                    "{name}: direct-to-LDS loads"
                );
            }
        }
    }
}

/// Split-K with `split_k_atomic` adds into C with the atomic of the output type and stores
/// nothing; one slice stores and has no atomics. The slice index comes from the workgroup's z
/// id.
#[test]
fn split_k_adds_with_atomics() {
    for (spec, atomic) in [
        (
            KernelSpec::new().split_k(4).split_k_atomic(true),
            "buffer_atomic_pk_add_bf16",
        ),
        (
            KernelSpec::new()
                .split_k(4)
                .split_k_atomic(true)
                .out_dtype(OutDtype::F32),
            "buffer_atomic_add_f32",
        ),
        (
            KernelSpec::new()
                .bm(16)
                .bn(64)
                .wn(16)
                .bk_elems(256)
                .b_prefetch(true)
                .split_k(8)
                .split_k_atomic(true),
            "buffer_atomic_pk_add_bf16",
        ),
    ] {
        let name = spec.kernel_name();
        let k = spec.build().unwrap_or_else(|e| panic!("{name}: {e}"));
        let count = |what: &str| k.asm().lines().filter(|l| l.contains(what)).count();
        // One atomic per accumulator dword (f32) or pair (bf16) of every MMA tile of the wave.
        let per_tile = match spec.out_dtype {
            OutDtype::F32 => 4,
            OutDtype::Bf16 => 2,
        };
        let tiles = (spec.bm / 16 * spec.wn / 16) as usize;
        assert_eq!(count(atomic), tiles * per_tile, "{name}: {atomic}");
        assert_eq!(count("buffer_store"), 0, "{name}: C is added, not stored");
        assert!(
            k.asm().contains(".amdhsa_system_sgpr_workgroup_id_z 1"),
            "{name}: the slice is the workgroup's z id"
        );
        assert_eq!(k.spec().split_k(), spec.knobs().split_k);
    }
    let one = KernelSpec::new().build().unwrap();
    assert!(!one.asm().contains("buffer_atomic"), "no split: no atomics");
}

/// Split-K by default: no atomics; the GEMM stores each MMA tile's four f32 accumulators per
/// lane with one dwordx4 store, and the code object also holds the reduction, which loads one
/// dwordx4 from each of the S planes and stores the rounded sum once.
#[test]
fn split_k_stores_f32_partials_and_reduces_them() {
    for (spec, stores) in [
        (KernelSpec::new().split_k(4), "buffer_store_dwordx2"),
        (
            KernelSpec::new().split_k(4).out_dtype(OutDtype::F32),
            "buffer_store_dwordx4",
        ),
        (
            KernelSpec::new()
                .bm(16)
                .bn(64)
                .wn(16)
                .bk_elems(256)
                .b_prefetch(true)
                .split_k(8),
            "buffer_store_dwordx2",
        ),
    ] {
        let name = spec.kernel_name();
        let k = spec.build().unwrap_or_else(|e| panic!("{name}: {e}"));
        let asm = k.asm();
        assert!(!asm.contains("buffer_atomic"), "{name}: no atomics");
        let reduce = spec.reduce_name();
        assert_eq!(k.reduce_name().as_deref(), Some(reduce.as_str()));
        // The listing holds the GEMM, then the reduction.
        let at = asm
            .find(&format!("{reduce}:"))
            .unwrap_or_else(|| panic!("{name}: no {reduce} in the listing"));
        let (gemm, sum) = asm.split_at(at);
        let count = |text: &str, what: &str| text.lines().filter(|l| l.contains(what)).count();
        let tiles = (spec.bm / 16 * spec.wn / 16) as usize;
        assert_eq!(count(gemm, "buffer_store_dwordx4"), tiles, "{name}");
        let slices = spec.knobs().split_k as usize;
        assert_eq!(count(sum, "buffer_load_dwordx4"), slices, "{name}");
        assert_eq!(count(sum, "buffer_store"), 1, "{name}");
        assert_eq!(count(sum, stores), 1, "{name}: {stores}");
        assert!(
            CompiledKernel::from_code_object(spec.clone().into(), k.code_object().to_vec()).is_ok()
        );
    }
}

/// Waves along M: a 128x256 tile of 8 waves (2 x 4) and a 256x256 one, each wave's MFMAs and
/// B fragments its own, within the registers; with acc_agprs the MFMAs accumulate in AGPRs.
#[test]
fn preb_waves_along_m() {
    for spec in [
        KernelSpec::new().bm(128).wm(64).bn(256).wn(64),
        KernelSpec::new().bm(256).wm(128).bn(256).wn(64),
        KernelSpec::new()
            .bm(128)
            .wm(64)
            .bn(128)
            .wn(64)
            .b_prefetch(true)
            .dram_to_lds(true),
    ] {
        let name = spec.kernel_name();
        let k = spec.build().unwrap_or_else(|e| panic!("{name}: {e}"));
        let (waves_m, waves_n) = spec.wave_grid();
        assert_eq!(k.report().workgroup_size, 64 * waves_m * waves_n, "{name}");
        assert_eq!(
            LoopStats::from_asm(k.asm()).mfmas,
            spec.mfmas_per_stage() * spec.stages(),
            "{name}: each wave runs its WM x WN tile"
        );
        assert_eq!(u64::from(k.report().lds_bytes), spec.lds_bytes(), "{name}");
    }
    // Accumulators in AGPRs: every MFMA of the main loop writes a[...].
    let spec = KernelSpec::new()
        .bm(128)
        .wm(128)
        .bn(256)
        .wn(64)
        .acc_agprs(true);
    let k = spec.build().unwrap();
    let body = main_loop(k.asm());
    let mfmas: Vec<&&str> = body.iter().filter(|l| l.contains("v_mfma")).collect();
    assert!(!mfmas.is_empty());
    assert!(
        mfmas.iter().all(|l| l
            .split_whitespace()
            .nth(1)
            .is_some_and(|d| d.starts_with("a["))),
        "{}: MFMAs writing VGPRs: {mfmas:?}",
        k.name()
    );
    assert!(k.report().agpr_count >= spec.accumulator_dwords() as u32);
    // Without it, LLVM keeps them in VGPRs.
    let k = KernelSpec::new().build().unwrap();
    assert!(
        main_loop(k.asm())
            .iter()
            .filter(|l| l.contains("v_mfma"))
            .all(|l| !l.contains(" a[")),
        "{}",
        k.name()
    );
}
