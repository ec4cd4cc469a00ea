//! Paged FP8 decode attention on the emulator against the CPU reference
//! (`tilegen_mx::attention`), which follows the kernel's quantization points and bounds the
//! rest of its arithmetic per element (see that module). Inputs: random bf16 queries, random
//! FP8 caches with per-head scales, a shuffled block table whose pages are scattered over a
//! cache with spare pages, ragged context lengths in one batch.
//!
//! The matrix is sized for the emulator on two cores: the shapes (Llama-3-70B-like
//! 64/8 heads at d = 128, gpt-oss-like 64/8 at d = 64; batch 1 and 8; contexts 1, 17, 255 and
//! 4096; pages 16 and 64) each appear, but not every combination: batch 1 runs each context
//! alone, and batch 8 mixes all four (and others) in one ragged batch.

use std::time::Instant;

use tilegen_kernels::attention::{AttentionKernels, AttentionSpec};
use tilegen_mx::attention::{AttentionProblem, reference_attention};
use tilegen_runtime::EmuDevice;

/// Builds `spec`, runs it on `lens`, and checks every output element against the reference.
fn check(spec: AttentionSpec, lens: &[i32], seed: u64) -> Result<String, String> {
    let t0 = Instant::now();
    let kernels: AttentionKernels = spec.build().map_err(|e| format!("{spec:?}: {e}"))?;
    let problem = AttentionProblem::random(
        lens.len(),
        spec.values().q_heads as usize,
        spec.values().kv_heads as usize,
        spec.values().head_dim as usize,
        spec.values().page_size as usize,
        lens,
        spec.values().sm_scale,
        seed,
    )
    .map_err(|e| e.to_string())?;
    let dev = EmuDevice::new();
    let t1 = Instant::now();
    let got = kernels
        .run(&dev, &problem.inputs())
        .map_err(|e| format!("{}: {e}", kernels.main().name()))?;
    let t2 = Instant::now();
    let reference = reference_attention(&problem.inputs(), spec.partials() as usize)
        .map_err(|e| e.to_string())?;
    let cmp = reference
        .compare_bf16(&got.out)
        .map_err(|e| e.to_string())?;
    let line = format!(
        "{} lens {:?}: {cmp}; bound/max|out| {:.2e}; build {:.1?} emulate {:.1?}",
        kernels.main().name(),
        if lens.len() > 4 { &lens[..4] } else { lens },
        reference.relative_bound(),
        t1 - t0,
        t2 - t1,
    );
    if cmp.passed() { Ok(line) } else { Err(line) }
}

fn run_all(cases: &[(AttentionSpec, Vec<i32>)]) {
    let mut failures = Vec::new();
    for (i, (spec, lens)) in cases.iter().enumerate() {
        match check(*spec, lens, i as u64 + 1) {
            Ok(line) => eprintln!("ok   {line}"),
            Err(line) => {
                eprintln!("FAIL {line}");
                failures.push(line);
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn small_shapes_every_page_size_and_split() {
    let mut cases = Vec::new();
    for page in [0, 16, 32, 64] {
        for (d, group) in [(64, 4), (128, 8)] {
            let spec = AttentionSpec::new(group * 2, 2, d, page);
            cases.push((spec, vec![17, 1, 300]));
            cases.push((spec.split_kv(2).waves(2), vec![255, 129]));
            // Waves merged in LDS (no reduce pass), one of them with no keys.
            cases.push((spec.waves(3), vec![300, 129]));
        }
    }
    // Groups of 1 and 16.
    cases.push((AttentionSpec::new(2, 2, 128, 16), vec![200]));
    cases.push((AttentionSpec::new(16, 1, 64, 64).split_kv(3), vec![500, 7]));
    run_all(&cases);
}

/// The shapes for one model: batch 1 at each context, and batch 8 with ragged
/// contexts (4096 included), at pages of 16 and 64 rows; long contexts split over workgroups
/// and waves (and so through the reduce pass).
fn model_cases(q_heads: u32, kv_heads: u32, head_dim: u32) -> Vec<(AttentionSpec, Vec<i32>)> {
    let mut cases = Vec::new();
    for page in [16, 64] {
        let spec = AttentionSpec::new(q_heads, kv_heads, head_dim, page);
        for len in [1, 17, 255] {
            cases.push((spec, vec![len]));
        }
        cases.push((spec.split_kv(8).waves(4), vec![4096]));
        // Pages of 16: partials merged by the reduce pass; of 64: by the waves of one
        // workgroup in LDS.
        let ragged = if page == 16 {
            spec.split_kv(4).waves(2)
        } else {
            spec.waves(4)
        };
        cases.push((ragged, vec![1, 17, 255, 4096, 300, 17, 1000, 129]));
    }
    cases
}

#[test]
fn llama3_70b_like_decode() {
    run_all(&model_cases(64, 8, 128));
}

#[test]
fn gpt_oss_like_decode() {
    run_all(&model_cases(64, 8, 64));
}

/// The fused reduce ([`AttentionSpec::fused_reduce`]): the main kernel's last wave per
/// (sequence, KV head) merges the partials, for every group size, both head sizes, one to four
/// waves, ragged contexts (one key; a sequence whose later splits see none), and no reduce
/// kernel is built.
#[test]
fn fused_reduce_merges_in_the_main_kernel() {
    let mut cases = Vec::new();
    for (q, kv, d) in [(2, 2, 128), (8, 2, 64), (16, 2, 128), (32, 2, 64)] {
        let spec = AttentionSpec::new(q, kv, d, 16).fused_reduce(true);
        cases.push((spec.split_kv(3), vec![700, 1, 40]));
        cases.push((spec.split_kv(5).waves(2), vec![1500, 129]));
    }
    cases.push((
        AttentionSpec::new(8, 1, 128, 64)
            .split_kv(4)
            .waves(4)
            .fused_reduce(true),
        vec![3000, 17],
    ));
    for (spec, _) in &cases {
        assert!(spec.merges_in_main() && !spec.needs_reduce(), "{spec:?}");
        assert!(spec.build().unwrap().reduce().is_none());
    }
    run_all(&cases);
}

/// The fused reduce's counters are zero again after a launch: two launches on the same
/// buffers (the second reusing the first's counters) give the same output, which the
/// reference accepts.
#[test]
fn fused_reduce_leaves_its_counters_zero() {
    use tilegen_device::{Buffer, Device};
    let spec = AttentionSpec::new(8, 2, 128, 16)
        .split_kv(4)
        .waves(2)
        .fused_reduce(true);
    let kernels = spec.build().unwrap();
    let lens = [900, 33, 2000];
    let problem =
        AttentionProblem::random(3, 8, 2, 128, 16, &lens, spec.values().sm_scale, 3).unwrap();
    let inputs = problem.inputs();
    let s = inputs.shape;
    let dev = EmuDevice::new();
    let sizes = kernels.buffer_bytes(&s);
    let bytes = |v: Vec<u8>| Buffer::upload(&dev, &v).unwrap();
    let le = |v: &[i32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let lef = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let q = bytes(
        inputs
            .q
            .iter()
            .flat_map(|x| x.to_bits().to_le_bytes())
            .collect(),
    );
    let (kc, vc) = (
        bytes(inputs.k_cache.to_vec()),
        bytes(inputs.v_cache.to_vec()),
    );
    let (table, ctx) = (
        bytes(le(inputs.block_table)),
        bytes(le(inputs.context_lens)),
    );
    let (ks, vs) = (bytes(lef(inputs.k_scales)), bytes(lef(inputs.v_scales)));
    let fresh = |n: u64| Buffer::new(&dev, n).unwrap();
    let (out, part_o, part_ml, counters) = (
        fresh(sizes[0]),
        fresh(sizes[8]),
        fresh(sizes[9]),
        fresh(sizes[10]),
    );
    let bufs = tilegen_kernels::attention::AttentionBuffers {
        out: out.ptr(),
        q: q.ptr(),
        k_cache: kc.ptr(),
        v_cache: vc.ptr(),
        block_table: table.ptr(),
        context_lens: ctx.ptr(),
        k_scales: ks.ptr(),
        v_scales: vs.ptr(),
        part_o: Some(part_o.ptr()),
        part_ml: Some(part_ml.ptr()),
        counters: Some(counters.ptr()),
    };
    let module = dev.load(kernels.main().code_object()).unwrap();
    let reference = reference_attention(&inputs, spec.partials() as usize).unwrap();
    let mut outs = Vec::new();
    for _ in 0..2 {
        tilegen_device::launch(
            &dev,
            &module,
            kernels.main().name(),
            &kernels.launch_config(s.batch),
            &kernels.main_args(&bufs, &s),
        )
        .unwrap();
        assert!(counters.to_vec().unwrap().iter().all(|&b| b == 0));
        let raw = out.to_vec().unwrap();
        let got: Vec<half::bf16> = raw
            .chunks_exact(2)
            .map(|c| half::bf16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect();
        let cmp = reference.compare_bf16(&got).unwrap();
        assert!(cmp.passed(), "{cmp}");
        outs.push(got);
        out.write(0, &vec![0; sizes[0] as usize]).unwrap();
    }
    assert_eq!(outs[0], outs[1]);
}
