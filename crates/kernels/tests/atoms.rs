//! The MFMA atoms against the emulator, which implements the ISA's matrix-core layouts and was
//! validated on Triton's and AITER's kernels: each atom's kernel reads A, B (and scales) from
//! row-major memory through `partition_a/b/sfa/sfb`, issues one instruction, and writes D
//! through `partition_c`. Any row, column, K-block or accumulator placement the atom's layouts
//! got wrong moves products to the wrong element of D (distinct random values make that visible;
//! per-block scales make a K element in the wrong 32-wide block visible).
//!
//! Also: the preshuffled-B kernel with 32x32x64 MFMAs, end to end.

use tilegen_dsl::{
    CachePolicy, CompileOptions, Context, Elem, Kernel, KernelAttrs, MmaAtom, Signature, Storage,
    TileTensor, Ty, Value, compile, dev_layout,
};
use tilegen_kernels::tile::atom::{
    Bf16Mfma, BlockScaled, F8f6f4, MFMA_16X16X32_BF16, MFMA_16X16X128_FP8, MFMA_32X32X16_BF16,
    MFMA_32X32X64_FP8, SCALE_16X16X128_FP4, SCALE_16X16X128_FP8, SCALE_32X32X64_FP4,
    SCALE_32X32X64_FP8, ScaleSel, Swapped,
};
use tilegen_layout::{Coord, Layout};
use tilegen_mx::{Fp8Overflow, encode_e2m1, encode_e4m3fn};
use tilegen_runtime::{ArgValue, Device, EmuDevice, LaunchConfig, launch};

/// How a test matrix's elements are stored.
#[derive(Clone, Copy, PartialEq)]
enum Format {
    Fp4,
    Fp8,
    Bf16,
}

impl Format {
    fn of_bits(bits: u32) -> Format {
        match bits {
            4 => Format::Fp4,
            8 => Format::Fp8,
            _ => Format::Bf16,
        }
    }

    /// Values every format holds exactly, so products and their sums are exact.
    fn pick(self, r: u64) -> f32 {
        const V: [f32; 12] = [
            0.5, 1.0, 1.5, 2.0, 3.0, 4.0, -0.5, -1.0, -1.5, -2.0, -3.0, -6.0,
        ];
        V[(r % V.len() as u64) as usize]
    }

    /// Row-major bytes of `values` (`rows x cols`).
    fn encode(self, values: &[f32]) -> Vec<u8> {
        match self {
            Format::Fp4 => values
                .chunks(2)
                .map(|p| encode_e2m1(p[0]) | (encode_e2m1(p[1]) << 4))
                .collect(),
            Format::Fp8 => values
                .iter()
                .map(|&v| encode_e4m3fn(v, Fp8Overflow::Saturate))
                .collect(),
            Format::Bf16 => values
                .iter()
                .flat_map(|&v| ((v.to_bits() >> 16) as u16).to_le_bytes())
                .collect(),
        }
    }
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// Builds and runs one instruction of `atom` on random inputs; returns `(D, reference)`.
fn run(atom: &impl Issue, seed: u64) -> (Vec<f32>, Vec<f64>, String) {
    let [m, n, kd] = atom.shape_mnk();
    let [abits, bbits] = atom.operand_bits();
    let (fa, fb) = (Format::of_bits(abits), Format::of_bits(bbits));
    let mut rng = Rng(seed | 1);
    let a: Vec<f32> = (0..m * kd).map(|_| fa.pick(rng.next())).collect();
    let b: Vec<f32> = (0..n * kd).map(|_| fb.pick(rng.next())).collect();
    let blocks = atom.scale_block().map_or(1, |blk| kd / blk);
    let scaled = atom.scale_block().is_some();
    let scale = |rng: &mut Rng| {
        if scaled {
            124 + (rng.next() % 7) as u8
        } else {
            127
        }
    };
    let sa: Vec<u8> = (0..m * blocks).map(|_| scale(&mut rng)).collect();
    let sb: Vec<u8> = (0..n * blocks).map(|_| scale(&mut rng)).collect();
    let mut want = vec![0f64; (m * n) as usize];
    for i in 0..m {
        for j in 0..n {
            let mut acc = 0f64;
            for blk in 0..blocks {
                let e = sa[(i * blocks + blk) as usize] as i32
                    + sb[(j * blocks + blk) as usize] as i32
                    - 254;
                let per = kd / blocks;
                let sum: f64 = (blk * per..(blk + 1) * per)
                    .map(|k| a[(i * kd + k) as usize] as f64 * b[(j * kd + k) as usize] as f64)
                    .sum();
                acc += sum * 2f64.powi(e);
            }
            want[(i * n + j) as usize] = acc;
        }
    }

    let ctx = Context::create();
    let mut sig = Signature::new();
    let (p_out, p_a, p_b, p_sa, p_sb) = (
        sig.global_ptr("out"),
        sig.global_ptr("a"),
        sig.global_ptr("b"),
        sig.global_ptr("sa"),
        sig.global_ptr("sb"),
    );
    let attrs = KernelAttrs {
        workgroup_size: 64,
        waves_per_eu: None,
    };
    let k = Kernel::new(&ctx, "atom", &sig, attrs).unwrap();
    let lane = k.thread_id().unwrap();
    // A row-major `rows x cols` matrix of `bits`-bit elements.
    let view = |p, rows: i64, cols: i64, bits: u32| {
        let bytes = rows * cols * bits as i64 / 8;
        let buf = k
            .buffer(k.ptr_arg(p).unwrap(), k.i32(bytes), CachePolicy::Always)
            .unwrap();
        let layout = dev_layout(&Layout::row_major((rows, cols))).unwrap();
        TileTensor::packed(&k, Storage::Global(buf), layout, bits).unwrap()
    };
    let av = view(p_a, m, kd, abits).partition_a(atom, lane).unwrap();
    let bv = view(p_b, n, kd, bbits).partition_b(atom, lane).unwrap();
    let (av, bv) = (
        av.load_values(&[0, 0]).unwrap(),
        bv.load_values(&[0, 0]).unwrap(),
    );
    let c = k.zero(Ty::vector(Elem::F32, (m * n / 64) as u32));
    let scales = scaled.then(|| {
        // The lane's scale byte is the low byte of the dword at its offset (op_sel 0).
        // One scale per dword (its low byte), so each lane's load is aligned.
        let sa = view(p_sa, m, blocks, 32).partition_sfa(atom, lane).unwrap();
        let sb = view(p_sb, n, blocks, 32).partition_sfb(atom, lane).unwrap();
        let [sa, sb] = [sa, sb].map(|v| ScaleSel {
            dword: v.load(&Coord::from((0, 0, 0))).unwrap().int(&k).unwrap(),
            byte: 0,
        });
        (sa, sb)
    });
    let d = atom.issue(&k, av, bv, scales, c);
    view(p_out, m, n, 32)
        .partition_c(atom, lane)
        .unwrap()
        .store_values(&[0, 0], d, |_| Ok(None))
        .unwrap();
    k.finish().unwrap();
    let options = CompileOptions {
        emit_asm: true,
        ..CompileOptions::default()
    };
    let built = compile(&k, options).unwrap();

    let dev = EmuDevice::new();
    let module = dev.load(&built.code_object).unwrap();
    let dwords =
        |s: &[u8]| -> Vec<u8> { s.iter().flat_map(|&b| (b as u32).to_le_bytes()).collect() };
    let upload = |bytes: &[u8]| {
        let p = dev.alloc(bytes.len() as u64).unwrap();
        dev.copy_to_device(p, bytes).unwrap();
        p
    };
    let out = dev.alloc((m * n * 4) as u64).unwrap();
    let args = [
        ArgValue::Ptr(out),
        ArgValue::Ptr(upload(&fa.encode(&a))),
        ArgValue::Ptr(upload(&fb.encode(&b))),
        ArgValue::Ptr(upload(&dwords(&sa))),
        ArgValue::Ptr(upload(&dwords(&sb))),
    ];
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        dynamic_lds: 0,
    };
    launch(&dev, &module, "atom", &config, &args).unwrap();
    let mut raw = vec![0u8; (m * n * 4) as usize];
    dev.copy_from_device(out, &mut raw).unwrap();
    let got = raw
        .chunks(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    (got, want, built.asm.unwrap_or_default())
}

/// The atoms under test behind one issue call: with scales for the block-scaled ones.
trait Issue: MmaAtom {
    fn issue<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        b: Value<'ctx>,
        scales: Option<(ScaleSel<'_, 'ctx>, ScaleSel<'_, 'ctx>)>,
        c: Value<'ctx>,
    ) -> Value<'ctx>;
}

fn issue<'ctx, A: BlockScaled>(
    atom: &A,
    k: &Kernel<'ctx>,
    a: Value<'ctx>,
    b: Value<'ctx>,
    scales: Option<(ScaleSel<'_, 'ctx>, ScaleSel<'_, 'ctx>)>,
    c: Value<'ctx>,
) -> Value<'ctx> {
    match scales {
        Some((sa, sb)) => atom.mma_scaled(k, a, sa, b, sb, c),
        None => atom.mma(k, a, b, c),
    }
    .unwrap()
}

impl Issue for F8f6f4 {
    fn issue<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        b: Value<'ctx>,
        scales: Option<(ScaleSel<'_, 'ctx>, ScaleSel<'_, 'ctx>)>,
        c: Value<'ctx>,
    ) -> Value<'ctx> {
        issue(self, k, a, b, scales, c)
    }
}

impl Issue for Swapped<F8f6f4> {
    fn issue<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        b: Value<'ctx>,
        scales: Option<(ScaleSel<'_, 'ctx>, ScaleSel<'_, 'ctx>)>,
        c: Value<'ctx>,
    ) -> Value<'ctx> {
        issue(self, k, a, b, scales, c)
    }
}

impl Issue for Bf16Mfma {
    fn issue<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        b: Value<'ctx>,
        _: Option<(ScaleSel<'_, 'ctx>, ScaleSel<'_, 'ctx>)>,
        c: Value<'ctx>,
    ) -> Value<'ctx> {
        self.mma(k, a, b, c).unwrap()
    }
}

fn check(name: &str, atom: &impl Issue, mnemonic: &str) {
    for seed in [1, 0x9e37_79b9] {
        let (got, want, asm) = run(atom, seed);
        assert!(
            asm.contains(mnemonic),
            "{name}: no {mnemonic} in the listing"
        );
        let n = atom.shape_mnk()[1] as usize;
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(*g as f64, *w, "{name} seed {seed}: D[{}][{}]", i / n, i % n);
        }
    }
}

#[test]
fn scaled_f8f6f4_atoms_match_the_emulator() {
    let s = "v_mfma_scale_f32_";
    check(
        "16x16x128 fp4",
        &SCALE_16X16X128_FP4,
        &format!("{s}16x16x128_f8f6f4"),
    );
    check(
        "32x32x64 fp4",
        &SCALE_32X32X64_FP4,
        &format!("{s}32x32x64_f8f6f4"),
    );
    check(
        "16x16x128 fp8",
        &SCALE_16X16X128_FP8,
        &format!("{s}16x16x128_f8f6f4"),
    );
    check(
        "32x32x64 fp8",
        &SCALE_32X32X64_FP8,
        &format!("{s}32x32x64_f8f6f4"),
    );
    // The GEMMs' atoms: operands exchanged, C transposed.
    check(
        "swapped 16x16x128",
        &Swapped(SCALE_16X16X128_FP4),
        &format!("{s}16x16x128"),
    );
    check(
        "swapped 32x32x64",
        &Swapped(SCALE_32X32X64_FP4),
        &format!("{s}32x32x64"),
    );
}

#[test]
fn unscaled_atoms_match_the_emulator() {
    check(
        "16x16x128 fp8",
        &MFMA_16X16X128_FP8,
        "v_mfma_f32_16x16x128_f8f6f4",
    );
    check(
        "32x32x64 fp8",
        &MFMA_32X32X64_FP8,
        "v_mfma_f32_32x32x64_f8f6f4",
    );
    check(
        "16x16x32 bf16",
        &MFMA_16X16X32_BF16,
        "v_mfma_f32_16x16x32_bf16",
    );
    check(
        "32x32x16 bf16",
        &MFMA_32X32X16_BF16,
        "v_mfma_f32_32x32x16_bf16",
    );
}

/// The preshuffled-B kernel with 32x32x64 MFMAs against the CPU reference: the Shuffler lays B
/// out for 16-row blocks, and the atom's partitions read a 32-row fragment from two of them (16
/// contiguous bytes per lane either way); a lane's scale byte is then in either half of its
/// dword, which the kernel shifts out. Ragged M and N, a K tail, every pipeline flag.
#[test]
fn preb_with_32x32x64() {
    use rayon::prelude::*;
    use tilegen_kernels::gemm::ClusterSched;
    use tilegen_kernels::{KernelSpec, MfmaShape, Prefetch};
    use tilegen_mx::{MxMatrix, reference_gemm};

    let mut specs = Vec::new();
    for (bm, bn, bk, wn) in [(64, 128, 512, 64), (32, 64, 256, 32), (128, 64, 256, 32)] {
        for (prefetch, dram, deep, cds) in [
            (false, false, false, false),
            (false, true, false, false),
            (true, false, false, false),
            (true, true, true, true),
        ] {
            let base = KernelSpec::new()
                .mma(MfmaShape::M32N32K64)
                .bm(bm)
                .bn(bn)
                .bk_elems(bk)
                .wn(wn);
            let chain = base.mfmas_per_stage();
            let sched = ClusterSched::new().mfma_cluster(chain.min(3));
            let pipeline = Prefetch::new()
                .deep_prime(deep)
                .cluster(cds.then_some(sched));
            specs.push(
                base.prefetch(prefetch.then_some(pipeline))
                    .dram_to_lds(dram),
            );
        }
    }
    let failures: Vec<String> = specs
        .par_iter()
        .flat_map(|spec| {
            let k = match spec.build() {
                Ok(k) => k,
                Err(e) => return vec![format!("{}: {e}", spec.kernel_name())],
            };
            let dev = EmuDevice::new();
            let mut errs = Vec::new();
            for (seed, (m, n, kd)) in [(1, 2 * spec.bn as usize + 16, 768), (200, 64, 1024)]
                .into_iter()
                .flat_map(|(m, n, kd)| [(m, n, kd), (17, n, kd)])
                .enumerate()
            {
                let a = MxMatrix::random(m, kd, seed as u64).unwrap();
                let b = MxMatrix::random(n, kd, seed as u64 ^ 0xb).unwrap();
                let inputs = k.prepare_inputs(&a, &b).unwrap();
                let result = k
                    .run(&dev, &inputs)
                    .map_err(|e| e.to_string())
                    .and_then(|(c, _)| {
                        let cmp = c.compare(&reference_gemm(&a, &b).unwrap()).unwrap();
                        if cmp.passed() {
                            Ok(())
                        } else {
                            Err(cmp.to_string())
                        }
                    });
                if let Err(e) = result {
                    errs.push(format!("{} {m}x{n}x{kd}: {e}", k.name()));
                }
            }
            errs
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
