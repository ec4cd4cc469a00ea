//! Foreign kernels: MXFP4 GEMMs that Triton (a compiler independent of this project) built for
//! gfx950 run on the emulator through the runtime, and must agree with the CPU reference GEMM
//! up to f32 accumulation order.

use tilegen::mx::{MxMatrix, reference_gemm};
use tilegen::runtime::{ArgValue, Device, EmuDevice, LaunchConfig, launch};
use tilegen_testkit::ForeignKernel;

/// Runs one Triton kernel on `m x n x k` and compares with the reference.
fn check(dev: &EmuDevice, fk: &ForeignKernel, m: usize, n: usize, k: usize, seed: u64) {
    let a = MxMatrix::random(m, k, seed).unwrap();
    let b = MxMatrix::random(n, k, seed ^ 0x5eed).unwrap();
    let code = std::fs::read(&fk.hsaco).unwrap();
    let module = dev.load(&code).unwrap();
    let up = |bytes: &[u8]| {
        let p = dev.alloc(bytes.len().max(1) as u64).unwrap();
        dev.copy_to_device(p, bytes).unwrap();
        p
    };
    let (pa, pb, psa, psb) = (up(a.data()), up(b.data()), up(a.scales()), up(b.scales()));
    let pc = dev.alloc((m * n * 2) as u64).unwrap();
    let call = fk.gemm_launch(m, n, k);
    let mut args: Vec<ArgValue> = [pa, pb, psa, psb, pc].map(ArgValue::Ptr).to_vec();
    args.extend(call.scalars.map(ArgValue::I32));
    // Triton appends its global and profile scratch pointers; these kernels use neither.
    args.resize(
        module.code_object().kernels[0].meta.explicit_args().count(),
        ArgValue::Null,
    );
    let config = LaunchConfig {
        grid: call.grid,
        block: call.block,
        dynamic_lds: call.dynamic_lds,
    };
    let kernel = call.kernel.as_str();
    let report = launch(dev, &module, kernel, &config, &args)
        .unwrap_or_else(|e| panic!("{} {m}x{n}x{k}: {e}", fk.name()));
    let mut c = vec![0u8; m * n * 2];
    dev.copy_from_device(pc, &mut c).unwrap();
    let got: Vec<half::bf16> = c
        .chunks_exact(2)
        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]))
        .collect();
    let reference = reference_gemm(&a, &b).unwrap();
    let cmp = reference.compare_bf16(&got).unwrap();
    assert!(cmp.passed(), "{} {m}x{n}x{k}: {cmp}", fk.name());
    let stats = report.stats.unwrap();
    assert!(stats.mfma() > 0, "{}: no MFMA executed", fk.name());
    for p in [pa, pb, psa, psb, pc] {
        dev.free(p).unwrap();
    }
}

#[test]
fn triton_mxfp4_gemms_match_the_reference() {
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    let dev = EmuDevice::new();
    let mut mfma_shapes = std::collections::BTreeSet::new();
    for fk in &corpus {
        let asm = std::fs::read_to_string(&fk.asm).unwrap();
        for shape in ["16x16x128", "32x32x64"] {
            if asm.contains(&format!("v_mfma_scale_f32_{shape}_f8f6f4")) {
                mfma_shapes.insert(shape);
            }
        }
        let (bm, bn, bk) = (
            fk.meta_u64("bm") as usize,
            fk.meta_u64("bn") as usize,
            fk.meta_u64("bk") as usize,
        );
        // Full tiles, then a ragged M (masked rows) with two K iterations.
        check(&dev, fk, bm, bn, bk, 1);
        check(&dev, fk, 2 * bm + 3, 2 * bn, 2 * bk, 2);
    }
    assert!(
        mfma_shapes.contains("32x32x64") && mfma_shapes.contains("16x16x128"),
        "corpus covers {mfma_shapes:?}"
    );
}
