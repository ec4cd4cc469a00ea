//! Emulation speed on foreign GEMMs: each Triton MXFP4 kernel of the corpus computes a
//! 256x256x1024 GEMM on the emulator (through the runtime, as users run it), against the CPU
//! reference GEMM of the same problem in the same run. Prints wall time, wave-instructions per
//! second and MFMA throughput; the goal is under 2 s per GEMM on a 2-core machine.
//!
//! `cargo bench -p tilegen --bench emulate [-- --quick]` (needs `cargo xtask setup` for the corpus)

use std::time::Instant;

use tilegen::mx::{MxMatrix, reference_gemm};
use tilegen::runtime::{ArgValue, Device, EmuDevice, LaunchConfig, launch};

const M: usize = 256;
const N: usize = 256;
const K: usize = 1024;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo test --all-targets` runs this without `--bench`: one short pass as a smoke test.
    let smoke = !args.iter().any(|a| a == "--bench");
    let reps = if smoke || args.iter().any(|a| a == "--quick") {
        1
    } else {
        5
    };
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    let a = MxMatrix::random(M, K, 11).expect("A");
    let b = MxMatrix::random(N, K, 12).expect("B");
    let mut ref_times = Vec::new();
    let mut reference = None;
    for _ in 0..reps {
        let t = Instant::now();
        reference = Some(reference_gemm(&a, &b).expect("reference"));
        ref_times.push(t.elapsed().as_secs_f64());
    }
    let reference = reference.expect("at least one repetition");
    let t_ref = median(ref_times);
    println!(
        "emulated MXFP4 GEMM {M}x{N}x{K} (median of {reps}); peer: CPU reference GEMM {:.1} ms",
        t_ref * 1e3
    );
    println!(
        "{:<28} {:>9} {:>10} {:>10} {:>10} {:>9} {:>8}",
        "Triton kernel", "wall ms", "wave-inst", "Minst/s", "MFMA/s", "GFLOP/s", "vs ref"
    );
    let dev = EmuDevice::new();
    let up = |bytes: &[u8]| {
        let p = dev.alloc(bytes.len() as u64).expect("alloc");
        dev.copy_to_device(p, bytes).expect("copy");
        p
    };
    let (pa, pb, psa, psb) = (up(a.data()), up(b.data()), up(a.scales()), up(b.scales()));
    let pc = dev.alloc((M * N * 2) as u64).expect("alloc C");
    for fk in &corpus {
        let code = std::fs::read(&fk.hsaco).expect("code object");
        let module = dev.load(&code).expect("load");
        let call = fk.gemm_launch(M, N, K);
        let mut kargs: Vec<ArgValue> = [pa, pb, psa, psb, pc].map(ArgValue::Ptr).to_vec();
        kargs.extend(call.scalars.map(ArgValue::I32));
        kargs.resize(
            module.code_object().kernels[0].meta.explicit_args().count(),
            ArgValue::Null,
        );
        let config = LaunchConfig {
            grid: call.grid,
            block: call.block,
            dynamic_lds: call.dynamic_lds,
        };
        let name = call.kernel.as_str();
        let mut times = Vec::new();
        let mut stats = tilegen::runtime::LaunchStats::default();
        for _ in 0..reps {
            let t = Instant::now();
            let r = launch(&dev, &module, name, &config, &kargs)
                .unwrap_or_else(|e| panic!("{}: {e}", fk.name()));
            times.push(t.elapsed().as_secs_f64());
            stats = r.stats.unwrap_or_default();
        }
        let mut c = vec![0u8; M * N * 2];
        dev.copy_from_device(pc, &mut c).expect("copy C");
        let got: Vec<half::bf16> = c
            .chunks_exact(2)
            .map(|x| half::bf16::from_le_bytes([x[0], x[1]]))
            .collect();
        let cmp = reference.compare_bf16(&got).expect("compare");
        assert!(cmp.passed(), "{}: {cmp}", fk.name());
        let t = median(times);
        let insts = stats.wave_instructions() as f64;
        let mfmas = stats.mfma() as f64;
        let flops = 2.0 * (M * N * K) as f64;
        println!(
            "{:<28} {:>9.1} {:>10} {:>10.1} {:>10.0} {:>9.2} {:>7.1}x",
            fk.name(),
            t * 1e3,
            insts,
            insts / t / 1e6,
            mfmas / t,
            flops / t / 1e9,
            t / t_ref
        );
        if !smoke {
            assert!(t < 2.0, "{}: {t:.2} s is over the 2 s goal", fk.name());
        }
    }
}
