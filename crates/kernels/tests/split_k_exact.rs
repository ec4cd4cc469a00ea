//! Split-K with the f32 workspace on the emulator: at ragged decode shapes (M from 1 to 16, N
//! not a multiple of BN) and 2 to 16 K slices, every element of a bf16 C is within one bf16
//! ulp of the exact product rounded once to bf16, and two runs give the same bits.
//!
//! The inputs' scales are kept within a factor of two of one, so every product and every sum
//! of them up to K = 4096 fits f32's 24 bits exactly: the f32-accumulated product is then the
//! exact one whatever the order of the adds, and the check needs no allowance for it.

use rayon::prelude::*;
use tilegen_kernels::{CompiledKernel, KernelSpec, OutDtype, PrebSpec};
use tilegen_mx::MxMatrix;
use tilegen_runtime::EmuDevice;

/// Random FP4 codes with E8M0 scales in {2^-1, 1, 2}.
fn narrow(rows: usize, k: usize, seed: u64) -> MxMatrix {
    let (data, scales) = MxMatrix::random(rows, k, seed).unwrap().into_parts();
    let scales = scales.into_iter().map(|s| 126 + s % 3).collect();
    MxMatrix::from_parts(rows, k, data, scales).unwrap()
}

/// The exact product (f64 holds every sum of these inputs exactly), rounded once to bf16.
fn exact_bf16(a: &MxMatrix, b: &MxMatrix) -> Vec<half::bf16> {
    let (da, db, k) = (a.dequantize(), b.dequantize(), a.k());
    let mut c = Vec::with_capacity(a.rows() * b.rows());
    for m in 0..a.rows() {
        for n in 0..b.rows() {
            let (ra, rb) = (&da[m * k..(m + 1) * k], &db[n * k..(n + 1) * k]);
            let sum: f64 = ra.iter().zip(rb).map(|(&x, &y)| x as f64 * y as f64).sum();
            c.push(half::bf16::from_f64(sum));
        }
    }
    c
}

/// bf16 ulps between two finite values (both zeros are the same place).
fn ulps(x: half::bf16, y: half::bf16) -> u32 {
    let place = |v: half::bf16| {
        let b = i32::from(v.to_bits());
        if b & 0x8000 != 0 { -(b & 0x7fff) } else { b }
    };
    place(x).abs_diff(place(y))
}

/// The largest distance in bf16 ulps of `kernel`'s C from the once-rounded exact product on
/// `m x n x kd`, after checking that a second run gives the same bytes.
fn worst_ulps(dev: &EmuDevice, kernel: &CompiledKernel, m: usize, n: usize, kd: usize) -> u32 {
    let a = narrow(m, kd, (m * 1000 + n) as u64);
    let b = narrow(n, kd, kd as u64);
    let inputs = kernel.prepare_inputs(&a, &b).unwrap();
    let (c, _) = kernel.run(dev, &inputs).unwrap();
    let want = exact_bf16(&a, &b);
    let got: Vec<half::bf16> = c
        .bytes()
        .chunks_exact(2)
        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(got.len(), want.len());
    let worst = got
        .iter()
        .zip(&want)
        .map(|(&g, &w)| ulps(g, w))
        .max()
        .unwrap_or(0);
    if !kernel.accumulates_into_c() {
        let (again, _) = kernel.run(dev, &inputs).unwrap();
        assert_eq!(
            again.bytes(),
            c.bytes(),
            "{} is not deterministic",
            kernel.name()
        );
        // The launcher's own check holds it to one rounding.
        assert!(
            c.compare(&tilegen_mx::reference_gemm(&a, &b).unwrap())
                .unwrap()
                .passed()
        );
    }
    worst
}

fn decode_tile() -> PrebSpec {
    KernelSpec::preb().bm(16).bn(64).wn(32).bk_elems(256)
}

#[test]
fn split_k_workspace_is_within_one_bf16_ulp() {
    let cases: Vec<(u32, usize, usize, usize)> = [2u32, 4, 8, 16]
        .into_iter()
        .flat_map(|s| {
            let slice = s as usize * 256;
            let ks = if s == 16 {
                vec![slice]
            } else {
                vec![slice, 2 * slice]
            };
            [1usize, 5, 16]
                .into_iter()
                .flat_map(move |m| {
                    let ks = ks.clone();
                    [80usize, 208]
                        .into_iter()
                        .flat_map(move |n| ks.clone().into_iter().map(move |k| (s, m, n, k)))
                })
                .collect::<Vec<_>>()
        })
        .collect();
    let kernels: Vec<(u32, CompiledKernel)> = [2u32, 4, 8, 16]
        .into_par_iter()
        .map(|s| (s, decode_tile().split_k(s).build().unwrap()))
        .collect();
    let failures: Vec<String> = cases
        .par_iter()
        .filter_map(|&(s, m, n, k)| {
            let kernel = &kernels.iter().find(|(x, _)| *x == s).unwrap().1;
            assert_eq!(kernel.spec().bf16_ulps(), 1);
            let worst = worst_ulps(&EmuDevice::new(), kernel, m, n, k);
            (worst > 1).then(|| format!("{} {m}x{n}x{k}: {worst} ulps", kernel.name()))
        })
        .collect();
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The same check finds what bf16 atomics lose: sixteen slices each rounding their partial
/// and their add put some element of C more than one ulp away.
#[test]
fn split_k_bf16_atomics_exceed_one_ulp() {
    let spec = decode_tile().split_k(16).split_k_atomic(true);
    assert_eq!(spec.values().split_k, 16);
    let kernel = spec.build().unwrap();
    assert!(kernel.accumulates_into_c() && kernel.reduce_name().is_none());
    assert_eq!(kernel.spec().bf16_ulps(), 16);
    let worst = worst_ulps(&EmuDevice::new(), &kernel, 16, 208, 4096);
    assert!(worst > 1, "{worst}");
}

/// f32 output through the workspace: the slices' partials summed in order, unrounded.
#[test]
fn split_k_workspace_f32_output() {
    let kernel = decode_tile()
        .split_k(4)
        .out_dtype(OutDtype::F32)
        .build()
        .unwrap();
    let (a, b) = (narrow(7, 2048, 1), narrow(80, 2048, 2));
    let (c, _) = kernel
        .run(&EmuDevice::new(), &kernel.prepare_inputs(&a, &b).unwrap())
        .unwrap();
    let (da, db) = (a.dequantize(), b.dequantize());
    for (i, got) in c.to_f32().into_iter().enumerate() {
        let (m, n) = (i / 80, i % 80);
        let want: f64 = (0..2048)
            .map(|j| da[m * 2048 + j] as f64 * db[n * 2048 + j] as f64)
            .sum();
        assert_eq!(got as f64, want, "element ({m}, {n})");
    }
}

/// A caller's workspace: too small is refused before anything runs; one holding an earlier
/// launch's partials (or garbage) is overwritten, and C is the same as with a fresh one.
#[test]
fn a_callers_workspace_is_checked_and_reused() {
    use tilegen_kernels::{GemmBuffers, LaunchError};
    use tilegen_runtime::{Buffer, Device};
    let kernel = decode_tile().split_k(4).build().unwrap();
    let (m, n, kd) = (3, 80, 2048);
    let (a, b) = (narrow(m, kd, 3), narrow(n, kd, 4));
    let inputs = kernel.prepare_inputs(&a, &b).unwrap();
    let dev = EmuDevice::new();
    let (fresh, _) = kernel.run(&dev, &inputs).unwrap();
    let module = kernel.load(&dev).unwrap();
    let c = Buffer::new(&dev, kernel.c_bytes(m, n) as u64).unwrap();
    let (ab, bb) = (
        Buffer::upload(&dev, inputs.a()).unwrap(),
        Buffer::upload(&dev, inputs.b()).unwrap(),
    );
    let (sfa, sfb) = (
        Buffer::upload(&dev, inputs.sfa()).unwrap(),
        Buffer::upload(&dev, inputs.sfb()).unwrap(),
    );
    let bufs = GemmBuffers {
        c: c.ptr(),
        a: ab.ptr(),
        b: bb.ptr(),
        sfa: sfa.ptr(),
        sfb: sfb.ptr(),
    };
    let needed = kernel.workspace_bytes(m, n);
    assert_eq!(needed, 4 * 3 * 80 * 4);
    let ws = Buffer::new(&dev, needed).unwrap();
    let e = kernel
        .launch_with_workspace(&dev, &module, &bufs, ws.ptr(), needed - 4, m, n, kd)
        .unwrap_err();
    assert!(
        matches!(e, LaunchError::Workspace { needed: x, given } if x == needed && given == needed - 4),
        "{e}"
    );
    dev.copy_to_device(ws.ptr(), &vec![0x5a; needed as usize])
        .unwrap();
    for _ in 0..2 {
        kernel
            .launch_with_workspace(&dev, &module, &bufs, ws.ptr(), needed, m, n, kd)
            .unwrap();
        assert_eq!(c.to_vec().unwrap(), fresh.bytes());
    }
}
