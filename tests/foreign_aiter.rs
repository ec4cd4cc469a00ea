//! Foreign kernels: AMD AITER's hand-written gfx950 MXFP4 GEMMs (the f4gemm BpreShuffle code
//! objects of the `amd-aiter` wheel, which `cargo xtask setup` extracts into `target/aiter`) run
//! on the emulator and must agree with the CPU reference GEMM.
//!
//! Shapes, per kernel:
//! * ragged: M = tile_m + 17 (a second, mostly empty M tile whose rows end inside a 32-row scale
//!   group), N = tile_n + 32 (a ragged N tile), K = 768 (three 256-element K steps, not a
//!   multiple of 512). D is packed, except for the four kernels that do not mask a ragged N
//!   (`UNMASKED_N_TILES`: they store the columns past N into D's next row), which get a D row
//!   stride of N rounded up to tile_n; only the first N columns are compared.
//! * wide decode: M = 5, N = 33 tiles, K = 512, packed D. More than 32 N tiles takes the other
//!   branch of the kernels' workgroup-to-tile remapping (groups of 32 N tiles).
//! * split-K, on the kernels that support it: M = tile_m + 44, N = 2 tile_n, packed D, over
//!   uneven (K = 768, log2 split 1: 512 + 256) and even (K = 1024, log2 split 2: 4 x 256) slices.
//!
//! What the kernels allow: any M; N a multiple of 32 (B's scales are bounded by N rows but laid
//! out in 32-row tiles); K a multiple of 256. See `tilegen_aiter`'s kernargs docs.
//!
//! Error bound, derived (no tolerance is picked):
//! * Without split-K a kernel sums the same exact block terms as the reference in f32, in
//!   another order, and rounds once to bf16. Two f32 sums of the same `n` terms differ by at
//!   most `n * eps * sum|term|` (eps = 2^-23; the reference's `abs_sum`), and rounding to bf16
//!   moves a value by at most half a bf16 ulp of itself, which is at most one ulp of the
//!   reference value. That is `Reference::compare_bf16`.
//! * With split-K each of the S slices sums its own terms in f32 (error `f_s = n_s * eps *
//!   a_s`, `a_s` the slice's `sum|term|`), rounds the partial to bf16 (at most `u |P_s|`,
//!   u = 2^-8, bf16's unit roundoff) and adds it to D with a bf16 atomic, which rounds again (at
//!   most `u |running sum|`; the first add to the zeroed D is exact). With `c_s` the slice's
//!   reference partial and `W = sum_s (|c_s| + 2 f_s)`, every running sum is at most
//!   `W (1 + u)^S`, so `|D - sum_s c_s| <= sum_s 2 f_s + u W (1 + (S - 1)(1 + u)^(S + 1))`
//!   (`2 f_s`: the reference's own f32 order error counts too).
//!
//! The kernels run in parallel (rayon), each on its own emulator.

use std::time::{Duration, Instant};

use half::bf16;
use rayon::prelude::*;
use tilegen::mx::{MxMatrix, Reference, reference_gemm};
use tilegen::runtime::{Device, EmuDevice, LaunchConfig};
use tilegen_aiter::{F4GemmKernel, Field, GemmInputs, GemmLaunch, GemmPointers, GemmProblem};

#[path = "../crates/aiter/tests/aiter_corpus/mod.rs"]
mod aiter_corpus;
use aiter_corpus::corpus;

/// K of the ragged runs: three K steps, not a multiple of 512.
const K: u32 = 768;

/// One kernel run: the output (first N columns of each row) and what the emulator reported.
struct Run {
    d: Vec<bf16>,
    wall: Duration,
    mfma: u64,
}

/// Runs `launch` on a fresh emulator with inputs `a` and `b`.
fn run(launch: &GemmLaunch, a: &MxMatrix, b: &MxMatrix) -> Result<Run, String> {
    let kernel = launch.kernel();
    let p = launch.problem();
    let image = kernel.load().map_err(|e| e.to_string())?;
    let inputs = GemmInputs::prepare(p, a, b).map_err(|e| e.to_string())?;
    let dev = EmuDevice::new();
    let module = dev.load(image.bytes()).map_err(|e| e.to_string())?;
    let mut ptrs = GemmPointers::default();
    for spec in launch.buffers() {
        // Fresh allocations are zeroed: D starts at 0, as split-K needs.
        let ptr = dev.alloc(spec.bytes()).map_err(|e| e.to_string())?;
        if let Some(bytes) = inputs.get(spec.field()) {
            dev.copy_to_device(ptr, bytes).map_err(|e| e.to_string())?;
        }
        match spec.field() {
            Field::D => ptrs.d = ptr.0,
            Field::A => ptrs.a = ptr.0,
            Field::B => ptrs.b = ptr.0,
            Field::ScaleA => ptrs.scale_a = ptr.0,
            Field::ScaleB => ptrs.scale_b = ptr.0,
            other => return Err(format!("unexpected buffer {other:?}")),
        }
    }
    let config = LaunchConfig {
        grid: launch.grid(),
        block: launch.block(),
        dynamic_lds: 0,
    };
    let signal = dev
        .dispatch(&module, kernel.symbol(), &config, &launch.kernargs(&ptrs))
        .map_err(|e| e.to_string())?;
    let report = dev.wait(signal).map_err(|e| e.to_string())?;
    let (m, n, ldd) = (p.m() as usize, p.n() as usize, p.d_row_stride() as usize);
    let mut raw = vec![0u8; m * ldd * 2];
    dev.copy_from_device(tilegen::runtime::DevicePtr(ptrs.d), &mut raw)
        .map_err(|e| e.to_string())?;
    let d = raw
        .chunks_exact(ldd * 2)
        .flat_map(|row| {
            row[..n * 2]
                .chunks_exact(2)
                .map(|v| bf16::from_le_bytes([v[0], v[1]]))
        })
        .collect();
    let stats = report.stats.unwrap_or_default();
    Ok(Run {
        d,
        wall: report.wall,
        mfma: stats.mfma(),
    })
}

/// Columns `[k0, k1)` of an MXFP4 matrix (both multiples of 32).
fn k_slice(x: &MxMatrix, k0: usize, k1: usize) -> MxMatrix {
    let (kb, sb) = (x.k_bytes(), x.k_blocks());
    let data = x
        .data()
        .chunks_exact(kb)
        .flat_map(|row| row[k0 / 2..k1 / 2].iter().copied())
        .collect();
    let scales = x
        .scales()
        .chunks_exact(sb)
        .flat_map(|row| row[k0 / 32..k1 / 32].iter().copied())
        .collect();
    MxMatrix::from_parts(x.rows(), k1 - k0, data, scales).unwrap()
}

/// Checks a split-K result against the per-slice references with the bound derived in the
/// module docs. Returns the number of elements outside it and the worst `|error| / bound`.
fn check_split(launch: &GemmLaunch, a: &MxMatrix, b: &MxMatrix, got: &[bf16]) -> (usize, f64) {
    let k = launch.problem().k() as usize;
    let per = launch.k_per_split() as usize;
    let slices: Vec<Reference> = (0..k)
        .step_by(per)
        .map(|k0| {
            let k1 = (k0 + per).min(k);
            reference_gemm(&k_slice(a, k0, k1), &k_slice(b, k0, k1)).unwrap()
        })
        .collect();
    assert_eq!(slices.len(), launch.k_splits() as usize);
    let s = slices.len() as i32;
    let (eps, u) = (f32::EPSILON as f64, 2f64.powi(-8));
    let mut bad = 0;
    let mut worst = 0f64;
    for (i, g) in got.iter().enumerate() {
        let mut want = 0f64;
        let mut f = 0f64;
        let mut w = 0f64;
        for r in &slices {
            let c = r.c()[i] as f64;
            let fs = r.k_blocks() as f64 * eps * r.abs_sum()[i] as f64;
            want += c;
            f += 2.0 * fs;
            w += c.abs() + 2.0 * fs;
        }
        let bound = f + u * w * (1.0 + (s - 1) as f64 * (1.0 + u).powi(s + 1));
        let err = (g.to_f64() - want).abs();
        // A NaN error (a NaN or infinite output) is outside every bound.
        if err.is_nan() || err > bound {
            bad += 1;
        }
        worst = worst.max(if bound > 0.0 { err / bound } else { err });
    }
    (bad, worst)
}

/// One case: a kernel on a problem, checked against the reference.
struct Case {
    kernel: F4GemmKernel,
    launch: GemmLaunch,
    seed: u64,
}

impl Case {
    fn new(kernel: &F4GemmKernel, problem: GemmProblem, seed: u64) -> Case {
        Case {
            kernel: kernel.clone(),
            launch: GemmLaunch::new(kernel, problem).unwrap(),
            seed,
        }
    }

    fn label(&self) -> String {
        let p = self.launch.problem();
        format!(
            "{:<8} {:>4}x{:<4}x{:<4} ldd {:<4} split {}",
            self.kernel.tile_label(),
            p.m(),
            p.n(),
            p.k(),
            p.d_row_stride(),
            self.launch.k_splits()
        )
    }

    /// Runs the case: `Ok(summary)` or `Err(what went wrong)`.
    fn check(&self) -> Result<String, String> {
        let p = self.launch.problem();
        let a = MxMatrix::random(p.m() as usize, p.k() as usize, self.seed).unwrap();
        let b = MxMatrix::random(p.n() as usize, p.k() as usize, self.seed ^ 0x5eed).unwrap();
        let run = run(&self.launch, &a, &b)?;
        if run.mfma == 0 {
            return Err("no MFMA executed".into());
        }
        let verdict = if self.launch.k_splits() > 1 {
            let (bad, worst) = check_split(&self.launch, &a, &b, &run.d);
            if bad > 0 {
                return Err(format!(
                    "{bad} of {} elements outside the split-K bound (worst error/bound {worst:.2})",
                    run.d.len()
                ));
            }
            format!("worst error/bound {worst:.2}")
        } else {
            let cmp = reference_gemm(&a, &b)
                .unwrap()
                .compare_bf16(&run.d)
                .unwrap();
            if !cmp.passed() {
                return Err(cmp.to_string());
            }
            format!(
                "worst error/bound {:.2}",
                cmp.worst.map_or(0.0, |w| w.ratio())
            )
        };
        Ok(format!(
            "{:>7.2?}  {:>6} MFMA  {verdict}",
            run.wall, run.mfma
        ))
    }
}

#[test]
fn aiter_f4gemm_kernels_match_the_reference() {
    let Some(corpus) = corpus() else {
        return;
    };
    let start = Instant::now();
    let kernels: Vec<&F4GemmKernel> = corpus.bpreshuffle_kernels().collect();
    assert_eq!(
        kernels.len(),
        34,
        "the corpus should hold AITER's 34 BpreShuffle kernels"
    );
    let mut cases = Vec::new();
    for (i, k) in kernels.iter().enumerate() {
        let seed = 10 * i as u64;
        let (m, n) = (k.tile_m() + 17, k.tile_n() + 32);
        let mut ragged = GemmProblem::new(m, n, K).unwrap();
        if !k.masks_ragged_n() {
            ragged = ragged
                .with_d_row_stride(n.next_multiple_of(k.tile_n()))
                .unwrap();
        }
        cases.push(Case::new(k, ragged, seed + 1));
        let wide = GemmProblem::new(5, 33 * k.tile_n(), 512).unwrap();
        cases.push(Case::new(k, wide, seed + 2));
        if k.supports_split_k() {
            let (m, n) = (k.tile_m() + 44, 2 * k.tile_n());
            for (kk, log2) in [(768, 1), (1024, 2)] {
                let split = GemmProblem::new(m, n, kk)
                    .unwrap()
                    .with_log2_k_split(log2)
                    .unwrap();
                cases.push(Case::new(k, split, seed + 3 + log2 as u64));
            }
        }
    }
    for c in &cases {
        assert!(!c.launch.stores_past_n(), "{}: stores past N", c.label());
    }
    let splits = cases.iter().filter(|c| c.launch.k_splits() > 1).count();
    assert!(splits >= 2, "no split-K run: no kernel supports split-K");
    let outcomes: Vec<(String, Result<String, String>)> =
        cases.par_iter().map(|c| (c.label(), c.check())).collect();
    let mut failures = Vec::new();
    for (label, outcome) in &outcomes {
        match outcome {
            Ok(summary) => eprintln!("ok    {label}  {summary}"),
            Err(e) => {
                eprintln!("FAIL  {label}  {e}");
                failures.push(format!("{label}: {e}"));
            }
        }
    }
    eprintln!("{} AITER cases in {:.1?}", outcomes.len(), start.elapsed());
    assert!(
        failures.is_empty(),
        "{} of {} AITER cases failed:\n{}",
        failures.len(),
        outcomes.len(),
        failures.join("\n")
    );
}
