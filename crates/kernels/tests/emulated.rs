//! Our kernels on the emulator, against the CPU reference GEMM: every flag combination on three
//! tile shapes of the preshuffled-B kernel and three of the LDS-staged one, for M in
//! {1, 17, 64, 200} (tails masked by buffer ranges) and two (N, K) pairs: one with a ragged N
//! and a K tail past the last full tile, one with K = 7168.

use rayon::prelude::*;
use tilegen_kernels::{CompiledKernel, KernelSpec, MfmaShape, OutDtype, PrebSpec};
use tilegen_mx::{MxMatrix, reference_gemm};
use tilegen_runtime::{Counter, EmuDevice};

const MS: [usize; 4] = [1, 17, 64, 200];

fn check(
    dev: &EmuDevice,
    k: &CompiledKernel,
    m: usize,
    n: usize,
    kd: usize,
    seed: u64,
) -> Result<(), String> {
    let a = MxMatrix::random(m, kd, seed).unwrap();
    let b = MxMatrix::random(n, kd, seed ^ 0xb).unwrap();
    let inputs = k.prepare_inputs(&a, &b).unwrap();
    let (c, _report) = k
        .run(dev, &inputs)
        .map_err(|e| format!("{} {m}x{n}x{kd}: {e}", k.name()))?;
    let reference = reference_gemm(&a, &b).unwrap();
    let cmp = c.compare(&reference).unwrap();
    if cmp.passed() {
        Ok(())
    } else {
        Err(format!("{} {m}x{n}x{kd}: {cmp}", k.name()))
    }
}

/// Runs every (M, N, K) of the matrix for each spec; specs build and run in parallel.
fn sweep<S: Into<KernelSpec>>(specs: Vec<S>) {
    sweep_shapes(specs, |spec| {
        let pairs = [(2 * spec.bn as usize + 16, 768), (64, 7168)];
        MS.iter()
            .flat_map(|&m| pairs.iter().map(move |&(n, kd)| (m, n, kd)))
            .collect()
    });
}

/// Builds every spec and checks it on the emulator at each `(m, n, k)` that `shapes` gives
/// for it (the shape's index is its input seed); reports every failure at once.
fn sweep_shapes<S: Into<KernelSpec>>(
    specs: Vec<S>,
    shapes: impl Fn(&KernelSpec) -> Vec<(usize, usize, usize)> + Sync,
) {
    let specs: Vec<KernelSpec> = specs.into_iter().map(Into::into).collect();
    let failures: Vec<String> = specs
        .par_iter()
        .flat_map(|spec| {
            let k = match spec.build() {
                Ok(k) => k,
                Err(e) => return vec![format!("{}: {e}", spec.kernel_name())],
            };
            let dev = EmuDevice::new();
            shapes(spec)
                .into_iter()
                .enumerate()
                .filter_map(|(seed, (m, n, kd))| check(&dev, &k, m, n, kd, seed as u64).err())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} failure(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// (bm, bn, bk_elems, wn) of the preb flag matrices: the seed default, a square tile with
/// 32-wide waves, and the smallest (BM = 16 and WN = 16 exercise the run-time scale-byte
/// selection).
const PREB_TILES: &[(u32, u32, u32, u32)] =
    &[(64, 128, 512, 64), (128, 128, 256, 32), (16, 64, 256, 16)];

/// The preb spec of one of [`PREB_TILES`].
fn preb_tile(&(bm, bn, bk, wn): &(u32, u32, u32, u32)) -> PrebSpec {
    KernelSpec::new().bm(bm).bn(bn).bk_elems(bk).wn(wn)
}

#[test]
fn preb_every_flag_combination() {
    let mut specs = Vec::new();
    for tile in PREB_TILES {
        specs.extend(preb_tile(tile).preb_flag_variants(3));
    }
    // Output type and cache policies do not change the schedule; one spec each covers them.
    specs.push(KernelSpec::new().out_dtype(OutDtype::F32));
    specs.push(
        KernelSpec::new()
            .b_prefetch(true)
            .b_cache_policy(tilegen_kernels::CachePolicy::Streaming),
    );
    sweep(specs);
}

#[test]
fn lds_variant_shapes() {
    let mut specs = Vec::new();
    for (bm, bn, bk, wm, wn, mma) in [
        (128, 128, 128, 64, 64, MfmaShape::M16N16K128),
        (64, 64, 256, 32, 32, MfmaShape::M32N32K64),
        (32, 64, 512, 32, 32, MfmaShape::M16N16K128),
    ] {
        for dram in [false, true] {
            specs.push(
                KernelSpec::lds()
                    .bm(bm)
                    .bn(bn)
                    .bk_elems(bk)
                    .wm(wm)
                    .wn(wn)
                    .mma(mma)
                    .dram_to_lds(dram),
            );
        }
    }
    specs.push(KernelSpec::lds().out_dtype(OutDtype::F32));
    sweep(specs);
}

/// Tiles whose rows are not a power-of-two number of 16-byte chunks (a 384-byte row is 24): the
/// staging once loaded only the rows whole 64-lane loads covered, so rows past 12 of 16 (or 48
/// of 64) read stale LDS.
#[test]
fn rows_of_any_whole_chunk_count_are_staged() {
    let mut specs = Vec::new();
    for dram in [false, true] {
        specs.push(KernelSpec::from(
            KernelSpec::new().bk_elems(768).dram_to_lds(dram),
        ));
        specs.push(
            KernelSpec::new()
                .bm(16)
                .bn(32)
                .wn(16)
                .bk_elems(1280)
                .b_prefetch(true)
                .dram_to_lds(dram)
                .into(),
        );
        specs.push(KernelSpec::lds().bk_elems(384).dram_to_lds(dram).into());
    }
    sweep(specs);
}

#[test]
fn spilling_kernel_runs_through_scratch() {
    // Demanding 8 waves per SIMD leaves 64 registers per lane: the default tile spills, and the
    // emulator must carry the private segment (scratch) through the run.
    let spec = KernelSpec::new().waves_per_eu(Some(8));
    let k = spec.build().unwrap();
    assert!(
        k.report().vgpr_spill_count > 0 && k.report().private_bytes > 0,
        "{:?}",
        k.report()
    );
    let dev = EmuDevice::new();
    for (m, n, kd) in [(64, 128, 512), (17, 144, 768)] {
        check(&dev, &k, m, n, kd, 3).unwrap();
    }
}

/// The swizzled operand tiles: fragment reads and row writes free of bank conflicts (by the
/// emulator's phase rules) where the unswizzled tiles lose cycles, with the same results. What
/// is left with 32x32x64 is the byte-wide scale reads (rows 16 apart share a bank), which the
/// operand swizzle does not cover.
#[test]
fn swizzled_lds_tiles_have_no_bank_conflicts() {
    let bases: [KernelSpec; 6] = [
        KernelSpec::lds().into(),
        KernelSpec::lds().bk_elems(256).dram_to_lds(true).into(),
        KernelSpec::lds()
            .bm(64)
            .bn(64)
            .wm(32)
            .wn(32)
            .bk_elems(512)
            .mma(MfmaShape::M32N32K64)
            .into(),
        KernelSpec::new().into(),
        KernelSpec::new().dram_to_lds(true).into(),
        KernelSpec::new()
            .mma(MfmaShape::M32N32K64)
            .b_prefetch(true)
            .into(),
    ];
    let failures: Vec<String> = bases
        .par_iter()
        .flat_map(|base| {
            let dev = EmuDevice::new();
            let mut cycles = Vec::new();
            let mut errs = Vec::new();
            for swizzle in [true, false] {
                let spec = base.clone().lds_swizzle(swizzle);
                let k = match spec.build() {
                    Ok(k) => k,
                    Err(e) => return vec![format!("{}: {e}", spec.kernel_name())],
                };
                let (m, n, kd) = (128, 128, 1024);
                let a = MxMatrix::random(m, kd, 5).unwrap();
                let b = MxMatrix::random(n, kd, 6).unwrap();
                let inputs = k.prepare_inputs(&a, &b).unwrap();
                match k.run(&dev, &inputs) {
                    Ok((c, report)) => {
                        let cmp = c.compare(&reference_gemm(&a, &b).unwrap()).unwrap();
                        if !cmp.passed() {
                            errs.push(format!("{}: {cmp}", k.name()));
                        }
                        let lost = report
                            .stats
                            .as_ref()
                            .map(|s| s[Counter::LdsBankConflictCycles]);
                        cycles.push((k.name().to_string(), lost));
                    }
                    Err(e) => errs.push(format!("{}: {e}", k.name())),
                }
            }
            match cycles.as_slice() {
                [(_, Some(on)), (_, Some(off))] if *off > 0 && on * 32 <= *off => {}
                other => errs.push(format!(
                    "expected (almost) no conflicts swizzled and many unswizzled: {other:?}"
                )),
            }
            errs
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Split-K: the grid's z dimension runs K slices that add into C with atomics, on ragged M and
/// N with K of one and of three tiles per slice; bf16 output is held to the bound of its
/// rounded adds, f32 to the f32 bound. Each tile shape, schedule and MFMA shape once.
/// The XCD-aware tile order renumbers workgroups; every tile and K slice must still be run
/// exactly once, on grids whose workgroup count is and is not a multiple of the 8 XCDs, with
/// partial last groups of M tiles.
#[test]
fn preb_xcd_tile_order() {
    let specs = vec![
        KernelSpec::new()
            .bm(16)
            .bn(64)
            .wn(32)
            .bk_elems(256)
            .xcd_group_m(1),
        KernelSpec::new()
            .bm(16)
            .bn(64)
            .wn(32)
            .bk_elems(256)
            .xcd_group_m(3),
        KernelSpec::new()
            .bm(16)
            .bn(64)
            .wn(32)
            .bk_elems(256)
            .split_k(3)
            .xcd_group_m(2),
    ];
    // Grids of 7x5 (35 workgroups), 3x8 (24) and 5x1 tiles.
    sweep_shapes(specs, |spec| {
        let kd = (spec.split_k() * spec.bk_elems) as usize;
        vec![(70, 448, kd), (128, 192, kd), (9, 320, kd)]
    });
}

/// B two tiles ahead (`b_prefetch_depth` 2): three register sets and A slots rotated by a loop
/// unrolled by three, on K of 1, 2, 3, 5 and 28 tiles (fewer tiles than stages, and every
/// remainder of the unrolled loop), with each A schedule, waves along M and split-K.
#[test]
fn preb_prefetch_depth_two() {
    let mut specs = Vec::new();
    for tile in PREB_TILES {
        for dram in [false, true] {
            for deep in [false, true] {
                specs.push(
                    preb_tile(tile)
                        .b_prefetch(true)
                        .with_prefetch(|p| p.b_prefetch_depth(2))
                        .dram_to_lds(dram)
                        .with_prefetch(|p| p.deep_prime(deep)),
                );
            }
        }
    }
    specs.push(
        KernelSpec::new()
            .bm(128)
            .wm(64)
            .bn(128)
            .wn(64)
            .bk_elems(256)
            .b_prefetch(true)
            .with_prefetch(|p| p.b_prefetch_depth(2))
            .with_prefetch(|p| p.cluster_drain_sched(true))
            .acc_agprs(true),
    );
    specs.push(
        preb_tile(&(32, 128, 256, 32))
            .b_prefetch(true)
            .with_prefetch(|p| p.b_prefetch_depth(2))
            .split_k(2),
    );
    sweep_shapes(specs, |spec| {
        let slice = spec.split_k() as usize;
        let n = 2 * spec.bn as usize + 16;
        [17, 200]
            .into_iter()
            .flat_map(|m| {
                [256, 512, 768, 1280, 7168]
                    .into_iter()
                    .filter(|kd| kd % (slice * spec.bk_elems as usize) == 0 || slice == 1)
                    .map(move |kd| (m, n, kd))
            })
            .collect()
    });
}

/// The prefetched B loads issued in one burst before each stage's MFMAs (`b_burst`): the same
/// results as spread between them, with each A schedule and two tiles ahead.
#[test]
fn preb_b_burst() {
    let specs = vec![
        KernelSpec::new().with_prefetch(|p| p.b_burst(true)),
        preb_tile(&PREB_TILES[1])
            .dram_to_lds(true)
            .with_prefetch(|p| p.b_burst(true).deep_prime(true).b_prefetch_depth(2)),
        preb_tile(&PREB_TILES[2])
            .with_prefetch(|p| p.b_burst(true).with_cluster(|c| c.mfma_cluster(2))),
    ];
    sweep(specs);
}

/// The next A tile's loads spread over the MFMA chain (`a_spread`): the same results with each
/// pipeline that stages A through VGPRs (one tile ahead, two, two with B two ahead), waves
/// along M, split-K, and an A stage of one round a wave as of many.
#[test]
fn preb_a_spread() {
    let mut specs = Vec::new();
    for tile in PREB_TILES {
        for (deep, depth) in [(false, 1), (true, 1), (true, 2), (false, 2)] {
            specs.push(
                preb_tile(tile)
                    .b_prefetch(true)
                    .with_prefetch(|p| p.a_spread(true).deep_prime(deep).b_prefetch_depth(depth)),
            );
        }
    }
    // One wave: more rounds (8) than MMA rows after the chain's middle (4), so the rest go
    // after the chain.
    specs.push(
        preb_tile(&(64, 64, 256, 64))
            .b_prefetch(true)
            .with_prefetch(|p| p.a_spread(true).deep_prime(true)),
    );
    specs.push(
        KernelSpec::new()
            .bm(256)
            .wm(128)
            .bn(128)
            .wn(64)
            .bk_elems(512)
            .b_prefetch(true)
            .with_prefetch(|p| p.a_spread(true).deep_prime(true))
            .split_k(2),
    );
    // Rows past one 256-row tile; K of 1, 3 and 5 stages (split: per slice) and a remainder.
    sweep_shapes(specs, |spec| {
        let kd = (spec.split_k() * spec.bk_elems) as usize;
        let rem = if spec.split_k() > 1 { 0 } else { 256 };
        vec![(70, 448, kd), (300, 192, 3 * kd + rem), (9, 320, 5 * kd)]
    });
}

#[test]
fn preb_split_k() {
    let specs = vec![
        KernelSpec::new().split_k(2),
        KernelSpec::new().split_k(3).out_dtype(OutDtype::F32),
        KernelSpec::new()
            .bm(16)
            .bn(64)
            .wn(16)
            .bk_elems(256)
            .split_k(8),
        preb_tile(&(32, 128, 256, 32))
            .b_prefetch(true)
            .with_prefetch(|p| p.deep_prime(true))
            .dram_to_lds(true)
            .split_k(4),
        KernelSpec::new()
            .bk_elems(512)
            .b_prefetch(true)
            .with_prefetch(|p| p.cluster_drain_sched(true))
            .split_k(2)
            .out_dtype(OutDtype::F32),
        KernelSpec::new()
            .mma(MfmaShape::M32N32K64)
            .bm(64)
            .bn(64)
            .wn(32)
            .bk_elems(256)
            .split_k(2),
        KernelSpec::new().bm(64).wm(32).bn(128).wn(64).split_k(2),
        // The atomic epilogue, bf16 and f32.
        KernelSpec::new().split_k(4).split_k_atomic(true),
        KernelSpec::new()
            .bm(16)
            .bn(64)
            .wn(16)
            .bk_elems(256)
            .split_k(8)
            .split_k_atomic(true)
            .out_dtype(OutDtype::F32),
    ];
    sweep_shapes(specs, |spec| {
        let slice = (spec.split_k() * spec.bk_elems) as usize;
        let n = 2 * spec.bn as usize + 16;
        [1, 17, 200]
            .into_iter()
            .flat_map(|m| [(m, n, slice), (m, n, 3 * slice)])
            .collect()
    });
}

/// Waves along M (WM < BM): each wave's rows of A from the LDS slot, its A scales and its strip
/// of C, with every schedule, both MFMA shapes and AGPR accumulators (split-K in
/// `preb_split_k`).
#[test]
fn preb_waves_along_m() {
    let specs = vec![
        KernelSpec::new()
            .bm(128)
            .wm(64)
            .bn(128)
            .wn(64)
            .bk_elems(256),
        KernelSpec::new().bm(64).wm(16).bn(64).wn(32).bk_elems(512),
        KernelSpec::new()
            .bm(64)
            .wm(32)
            .bn(64)
            .wn(32)
            .bk_elems(256)
            .b_prefetch(true)
            .with_prefetch(|p| p.deep_prime(true))
            .dram_to_lds(true),
        KernelSpec::new()
            .bm(128)
            .wm(64)
            .bn(128)
            .wn(32)
            .bk_elems(512)
            .b_prefetch(true)
            .with_prefetch(|p| p.cluster_drain_sched(true)),
        KernelSpec::new()
            .mma(MfmaShape::M32N32K64)
            .bm(128)
            .wm(64)
            .bn(64)
            .wn(32)
            .bk_elems(256)
            .out_dtype(OutDtype::F32),
        KernelSpec::new()
            .bm(128)
            .wm(128)
            .bn(128)
            .wn(64)
            .acc_agprs(true),
    ];
    sweep(specs);
}
