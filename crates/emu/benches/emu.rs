//! Emulator throughput: the matrix-core functions on their own, and whole launches that
//! stress the interpreter (a VALU loop) and the MFMA path (a 256x256x1024 MXFP4 GEMM's worth
//! of 32x32x64 scaled MFMAs, 1024 of them).
//!
//! Run with `cargo bench -p tilegen-emu`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tilegen_emu::exec::fp::{BF8_E5M2, FP4_E2M1, FP8_E4M3};
use tilegen_emu::exec::mfma::{self, BlockScales, DenseInput, DenseShape, F8f6f4Shape, Vgpr};
use tilegen_emu::exec::{Counter, DeviceMemory, Emulator, KernelSetup};

/// Deterministic register contents (an xorshift stream) so every run does the same work.
fn regs(n: usize, seed: u64) -> Vec<Vgpr> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            let mut r = [0u32; 64];
            for v in r.iter_mut() {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                *v = (s >> 16) as u32;
            }
            r
        })
        .collect()
}

fn matrix_core(c: &mut Criterion) {
    let scales_a = [120u8; 64];
    let scales_b = [131u8; 64];
    let mut g = c.benchmark_group("mfma");
    for (name, shape) in [
        ("scale_32x32x64_fp4", F8f6f4Shape::M32N32K64),
        ("scale_16x16x128_fp4", F8f6f4Shape::M16N16K128),
    ] {
        let (a, b) = (regs(4, 1), regs(4, 2));
        let mut acc = vec![[0u32; 64]; shape.acc_regs()];
        g.bench_function(name, |bench| {
            bench.iter(|| {
                let s = Some(BlockScales {
                    a: &scales_a,
                    b: &scales_b,
                });
                mfma::f8f6f4(
                    shape,
                    &FP4_E2M1,
                    &FP4_E2M1,
                    black_box(&a),
                    black_box(&b),
                    s,
                    &mut acc,
                )
                .unwrap();
            })
        });
    }
    let (a, b) = (regs(8, 3), regs(8, 4));
    let mut acc = vec![[0u32; 64]; 16];
    g.bench_function("32x32x64_fp8_bf8", |bench| {
        bench.iter(|| {
            mfma::f8f6f4(
                F8f6f4Shape::M32N32K64,
                &FP8_E4M3,
                &BF8_E5M2,
                black_box(&a),
                black_box(&b),
                None,
                &mut acc,
            )
            .unwrap();
        })
    });
    let shape = DenseShape {
        dim: 16,
        k: 32,
        input: DenseInput::Bf16,
        input_b: DenseInput::Bf16,
    };
    let (a, b) = (regs(4, 5), regs(4, 6));
    let mut acc = vec![[0u32; 64]; 4];
    g.bench_function("16x16x32_bf16", |bench| {
        bench.iter(|| mfma::dense(&shape, black_box(&a), black_box(&b), &mut acc).unwrap())
    });
    g.finish();
}

fn code(words: &[u32]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A descriptor asking for nothing: no user or system SGPRs, only v0's work-item ids.
fn bare_setup() -> KernelSetup {
    KernelSetup::from_descriptor(&[0; 64])
}

fn launches(c: &mut Criterion) {
    let mut g = c.benchmark_group("launch");
    g.sample_size(10);

    // 64 workgroups of one wave, 16 scaled FP4 MFMAs each (assembled with llvm-mc-22).
    let mfma_loop = code(&[
        0xbe8a0090, // s_mov_b32 s10, 16
        // v_mfma_scale_f32_32x32x64_f8f6f4 v[0:15], v[16:19], v[20:23], v[0:15], v24, v25
        //     cbsz:4 blgp:4
        0xd3ac0000, 0x00023318, 0xd3ae0c00, 0x84022910, 0x808a810a, // s_sub_u32 s10, s10, 1
        0xbf07800a, // s_cmp_lg_u32 s10, 0
        0xbf85fff9, // s_cbranch_scc1 -7
        0xbf810000, // s_endpgm
    ]);
    let mut emu = Emulator::new(DeviceMemory::new());
    let prog = emu
        .load_code("mfma_loop", &mfma_loop, bare_setup())
        .unwrap();
    g.bench_function("1024_scaled_fp4_32x32x64_mfmas", |bench| {
        bench.iter(|| {
            let s = emu.launch(&prog, [64, 1, 1], [64, 1, 1], &[], 0).unwrap();
            assert_eq!(s[Counter::Mfma], 1024);
        })
    });

    // 8 workgroups of 4 waves, 1000 iterations of 3 VALU + 3 SALU instructions.
    let valu_loop = code(&[
        0xb00a03e8, // s_movk_i32 s10, 0x3e8
        0x68020501, // v_add_u32_e32 v1, v1, v2
        0xd1cb0003, 0x04120701, // v_fma_f32 v3, v1, v3, v4
        0x2a040302, // v_xor_b32_e32 v2, v2, v1
        0x808a810a, // s_sub_u32 s10, s10, 1
        0xbf07800a, // s_cmp_lg_u32 s10, 0
        0xbf85fff9, // s_cbranch_scc1 -7
        0xbf810000, // s_endpgm
    ]);
    let prog = emu
        .load_code("valu_loop", &valu_loop, bare_setup())
        .unwrap();
    g.bench_function("192k_wave_instructions", |bench| {
        bench.iter(|| {
            let s = emu.launch(&prog, [8, 1, 1], [256, 1, 1], &[], 0).unwrap();
            assert_eq!(s.instructions(), 32 * (2 + 6 * 1000));
        })
    });
    g.finish();
}

criterion_group!(benches, matrix_core, launches);
criterion_main!(benches);
