//! `TiledMmaLoader` on the emulator: each kernel copies a tile of random bytes into LDS, reads
//! fragments with a loader, and writes every lane's registers out. Each byte of each lane must be
//! the element the atom's thread-value layout puts there, found on the host from the atom's
//! layout, the tile's layout and the swizzle (`SwizzleChain::apply`), independently of the
//! device's address arithmetic. Random bytes make a misplaced read visible (a wrong byte matches
//! by chance with probability 1/256, and every fragment has thousands).
//!
//! The transposing reads also rest on the emulator's lane map of `ds_read_b64_tr_b{8,16}`
//! (CDNA4 ISA 11.4), which Triton's kernels confirm (tests/foreign_zoo.rs, tests/foreign_attention.rs).

use tilegen_dsl::{
    CachePolicy, CompileOptions, Context, Int, Kernel, KernelAttrs, Lds, MmaAtom, Signature, Value,
    compile,
};
use tilegen_kernels::tile::atom::{
    MFMA_16X16X32_BF16, MFMA_16X16X128_FP8, MFMA_32X32X16_BF16, MFMA_32X32X64_FP8,
};
use tilegen_kernels::tile::loader::{KeyOrder, LdsTile, TiledMmaLoader, v_operand_layout};
use tilegen_layout::{Layout, Swizzle, SwizzleChain};
use tilegen_runtime::{ArgValue, Device, EmuDevice, LaunchConfig, launch};

/// LDS bytes of every test kernel.
const LDS_BYTES: usize = 32 * 1024;

fn random_bytes(n: usize, seed: u64) -> Vec<u8> {
    let mut s = seed | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

/// Runs a kernel that fills LDS with `lds` and stores, per lane, the values `read` returns
/// (each a whole number of dwords). Returns `fragments[f][lane]` bytes and the listing.
fn run(
    lds: &[u8],
    read: impl for<'k, 'ctx> Fn(&'k Kernel<'ctx>, Lds<'ctx>, Int<'k, 'ctx>) -> Vec<Value<'ctx>>,
) -> (Vec<Vec<Vec<u8>>>, String) {
    assert_eq!(lds.len(), LDS_BYTES);
    let ctx = Context::create();
    let mut sig = Signature::new();
    let (p_out, p_in) = (sig.global_ptr("out"), sig.global_ptr("tile"));
    let attrs = KernelAttrs {
        workgroup_size: 64,
        waves_per_eu: None,
    };
    let k = Kernel::new(&ctx, "loader", &sig, attrs).unwrap();
    let lane = k.thread_id().unwrap();
    let input = k
        .buffer(
            k.ptr_arg(p_in).unwrap(),
            k.i32(LDS_BYTES as i64),
            CachePolicy::Always,
        )
        .unwrap();
    let out = k
        .buffer(
            k.ptr_arg(p_out).unwrap(),
            k.i32(1 << 20),
            CachePolicy::Always,
        )
        .unwrap();
    let mem = k.lds_alloc("tile", LDS_BYTES as u32, 16).unwrap();
    for i in 0..(LDS_BYTES / 1024) as i64 {
        let off = lane * 16 + i * 1024;
        let v = k.buffer_load(&input, off, k.i32(0), 4).unwrap();
        k.lds_store(&mem, off, v, 16).unwrap();
    }
    k.barrier().unwrap();
    let frags = read(&k, mem, lane);
    let mut sizes = Vec::new();
    let mut at = 0i64;
    for f in &frags {
        let bytes = f.ty().bytes() as i64;
        let dwords = k
            .bitcast(*f, tilegen_dsl::Ty::dwords(bytes as u32 / 4))
            .unwrap();
        // 16 bytes at a time, lane-major within the fragment.
        for (c, part) in k
            .split(dwords, (bytes / 16).max(1) as u32)
            .unwrap()
            .into_iter()
            .enumerate()
        {
            let off = lane * bytes + (at + c as i64 * 16);
            k.buffer_store(&out, part, off, k.i32(0)).unwrap();
        }
        at += 64 * bytes;
        sizes.push(bytes as usize);
    }
    k.finish().unwrap();
    let built = compile(
        &k,
        CompileOptions {
            emit_asm: true,
            ..CompileOptions::default()
        },
    )
    .unwrap();

    let dev = EmuDevice::new();
    let module = dev.load(&built.code_object).unwrap();
    let tile = dev.alloc(LDS_BYTES as u64).unwrap();
    dev.copy_to_device(tile, lds).unwrap();
    let total = at as usize;
    let outp = dev.alloc(total as u64).unwrap();
    let config = LaunchConfig {
        grid: [1, 1, 1],
        block: [64, 1, 1],
        dynamic_lds: 0,
    };
    launch(
        &dev,
        &module,
        "loader",
        &config,
        &[ArgValue::Ptr(outp), ArgValue::Ptr(tile)],
    )
    .unwrap();
    let mut raw = vec![0u8; total];
    dev.copy_from_device(outp, &mut raw).unwrap();
    let mut frags_out = Vec::new();
    let mut at = 0;
    for bytes in sizes {
        frags_out.push(
            (0..64)
                .map(|l| raw[at + l * bytes..at + (l + 1) * bytes].to_vec())
                .collect(),
        );
        at += 64 * bytes;
    }
    (frags_out, built.asm.unwrap_or_default())
}

/// What a tile holds where, on the host: element `(row, col)` of `layout` at byte
/// `base + imm + swizzle(layout(row, col) * eb)`; columns at or past `cols` read as zero.
struct HostTile<'a> {
    lds: &'a [u8],
    layout: Layout,
    eb: usize,
    cols: i64,
    swizzle: SwizzleChain,
    at: i64,
}

impl HostTile<'_> {
    fn element(&self, row: i64, col: i64) -> Vec<u8> {
        if col >= self.cols {
            return vec![0; self.eb];
        }
        let off = self
            .layout
            .crd2idx(&(row, col).into())
            .unwrap()
            .static_value()
            .unwrap();
        let byte = self.at + self.swizzle.apply(off * self.eb as i64);
        self.lds[byte as usize..byte as usize + self.eb].to_vec()
    }

    /// Checks lane fragments `got[lane]` of MMA tile `(tr, tc)` of `[rows, cols]` against `tv`.
    fn check(&self, what: &str, got: &[Vec<u8>], tv: &Layout, mma: [i64; 2], at: [i64; 2]) {
        let values = tv.mode(1).unwrap().size().static_value().unwrap();
        for (lane, frag) in got.iter().enumerate() {
            assert_eq!(
                frag.len(),
                values as usize * self.eb,
                "{what}: fragment size"
            );
            for v in 0..values {
                let idx = tv
                    .crd2idx(&(lane as i64, v).into())
                    .unwrap()
                    .static_value()
                    .unwrap();
                let (row, col) = (idx % mma[0] + at[0] * mma[0], idx / mma[0] + at[1] * mma[1]);
                let want = self.element(row, col);
                let have = &frag[v as usize * self.eb..(v as usize + 1) * self.eb];
                assert_eq!(
                    have, want,
                    "{what}: lane {lane} value {v} should be element ({row}, {col})"
                );
            }
        }
    }
}

fn sw(bits: u32, base: u32, shift: i32) -> Swizzle {
    Swizzle::new(bits, base, shift).unwrap()
}

/// `load_b` of a `rows x cols` row-major tile of `eb`-byte elements with `pitch` elements per
/// row, for atom `atom`, with `swizzle` and the tile at byte `imm` (an immediate offset).
fn check_load_b<A: MmaAtom + Clone>(
    what: &str,
    atom: A,
    rows: i64,
    cols: i64,
    swizzle: SwizzleChain,
    imm: i64,
) -> String {
    let eb = (atom.operand_bits()[1] / 8) as usize;
    let layout = Layout::row_major((rows, cols));
    let lds = random_bytes(LDS_BYTES, rows as u64 * 31 + cols as u64 + imm as u64);
    let loader = TiledMmaLoader::new(atom.clone())
        .with_swizzle(swizzle.clone())
        .unwrap();
    let l2 = layout.clone();
    let (frags, asm) = run(&lds, move |k, mem, lane| {
        let tile = LdsTile {
            lds: mem,
            base: k.i32(0),
            layout: l2.clone(),
            elem_bits: eb as u32 * 8,
        };
        loader.load_b(k, &tile, lane, imm).unwrap()
    });
    let [_, n, kd] = atom.shape_mnk();
    let host = HostTile {
        lds: &lds,
        layout,
        eb,
        cols,
        swizzle,
        at: imm,
    };
    let tk = (cols + kd - 1) / kd;
    assert_eq!(
        frags.len() as i64,
        (rows / n) * tk,
        "{what}: fragment count"
    );
    for (f, got) in frags.iter().enumerate() {
        let at = [f as i64 / tk, f as i64 % tk];
        host.check(what, got, &atom.b_layout(), [n, kd], at);
    }
    asm
}

#[test]
fn load_b_fp8_and_bf16_fragments() {
    let none = SwizzleChain::identity();
    // FP8 16x16x128: two 16-byte halves per lane; 2 x 2 MMA tiles of a 32 x 256 warp tile.
    check_load_b(
        "fp8 16x16x128",
        MFMA_16X16X128_FP8,
        32,
        256,
        none.clone(),
        0,
    );
    check_load_b(
        "fp8 16x16x128 Sw<4,4,4>",
        MFMA_16X16X128_FP8,
        32,
        256,
        sw(4, 4, 4).into(),
        0,
    );
    // A two-step chain (the seed's swizzle + swizzle2): chunk bits 5..4 ^= row bits 8..7 (of
    // 128-byte rows), then chunk bit 4 ^= bit 10.
    let chain = sw(2, 4, 3).then(sw(1, 4, 6));
    check_load_b(
        "fp8 16x16x128 two-step",
        MFMA_16X16X128_FP8,
        64,
        128,
        chain,
        0,
    );
    // FP8 32x32x64: halves 32 K apart.
    check_load_b(
        "fp8 32x32x64 Sw<3,4,4>",
        MFMA_32X32X64_FP8,
        64,
        128,
        sw(3, 4, 4).into(),
        0,
    );
    // bf16: one 16-byte read per lane.
    check_load_b("bf16 16x16x32", MFMA_16X16X32_BF16, 32, 64, none.clone(), 0);
    check_load_b(
        "bf16 32x32x16 Sw<3,4,3>",
        MFMA_32X32X16_BF16,
        64,
        64,
        sw(3, 4, 3).into(),
        0,
    );
    // A 64-wide K for a K = 128 instruction: the second half reads as zeros.
    check_load_b("fp8 16x16x128 K = 64", MFMA_16X16X128_FP8, 32, 64, none, 0);
}

#[test]
fn load_b_folds_the_immediate_offset() {
    // The tile sits 8 KB into LDS: the offset goes to the ds_read's offset field, after the
    // swizzle (which the chain applies to tile-relative offsets).
    for (what, swizzle) in [
        ("unswizzled", SwizzleChain::identity()),
        ("two-step", sw(2, 4, 3).then(sw(1, 4, 6))),
    ] {
        let asm = check_load_b(what, MFMA_16X16X128_FP8, 32, 128, swizzle, 8192);
        let reads: Vec<&str> = asm.lines().filter(|l| l.contains("ds_read_b128")).collect();
        assert!(!reads.is_empty(), "{what}: no ds_read_b128");
        let offset = |l: &str| -> Option<i64> {
            l.split("offset:")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        };
        assert!(
            reads.iter().all(|l| offset(l).is_some_and(|o| o >= 8192)),
            "{what}: every fragment read should carry the 8 KB immediate:\n{}",
            reads.join("\n")
        );
    }
}

/// `load_b_tr`: a bf16 B operand stored `[K][N]` (N contiguous), two `ds_read_b64_tr_b16`.
fn check_load_b_tr(what: &str, atom: tilegen_kernels::tile::atom::Bf16Mfma, swizzle: SwizzleChain) {
    let [_, n, kd] = atom.shape_mnk();
    // (n, k) -> n + N k: rows of N elements.
    let layout = Layout::new((n, kd), (1, n)).unwrap();
    let lds = random_bytes(LDS_BYTES, n as u64 * 7 + 3);
    let loader = TiledMmaLoader::new(atom)
        .with_swizzle(swizzle.clone())
        .unwrap();
    let l2 = layout.clone();
    let (frags, asm) = run(&lds, move |k, mem, lane| {
        let tile = LdsTile {
            lds: mem,
            base: k.i32(0),
            layout: l2.clone(),
            elem_bits: 16,
        };
        vec![loader.load_b_tr(k, &tile, lane).unwrap()]
    });
    assert_eq!(
        asm.matches("ds_read_b64_tr_b16").count(),
        2,
        "{what}: two transposing reads"
    );
    let host = HostTile {
        lds: &lds,
        layout,
        eb: 2,
        cols: kd,
        swizzle,
        at: 0,
    };
    host.check(what, &frags[0], &atom.b_layout(), [n, kd], [0, 0]);
}

#[test]
fn load_b_tr_bf16_fragments() {
    check_load_b_tr("16x16x32", MFMA_16X16X32_BF16, SwizzleChain::identity());
    check_load_b_tr("32x32x16", MFMA_32X32X16_BF16, SwizzleChain::identity());
    // 32-byte rows: 8-byte units (M = 3) XORed with row bits.
    check_load_b_tr("16x16x32 Sw<2,3,2>", MFMA_16X16X32_BF16, sw(2, 3, 2).into());
    check_load_b_tr("32x32x16 Sw<3,3,3>", MFMA_32X32X16_BF16, sw(3, 3, 3).into());
}

/// V strips of a `[keys][depth]` FP8 tile (`depth` bytes per key row) as the PV A operand.
fn check_v_strips(what: &str, depth: i64, keys: i64, order: KeyOrder, swizzle: SwizzleChain) {
    let qk = MFMA_16X16X128_FP8;
    let layout = Layout::new((depth, keys), (1, depth)).unwrap();
    let lds = random_bytes(LDS_BYTES, depth as u64 * 13 + keys as u64);
    let loader = TiledMmaLoader::new(MFMA_16X16X128_FP8)
        .with_swizzle(swizzle.clone())
        .unwrap();
    let l2 = layout.clone();
    let strips: Vec<(i64, i64)> = (0..keys / 128)
        .flat_map(|b| (0..depth / 16).map(move |d| (b, d)))
        .collect();
    let s2 = strips.clone();
    let (frags, asm) = run(&lds, move |k, mem, lane| {
        let tile = LdsTile {
            lds: mem,
            base: k.i32(0),
            layout: l2.clone(),
            elem_bits: 8,
        };
        // Per-lane coordinates once, then every strip.
        let reads = loader.v_strip_reads(k, &tile, &qk, order, lane).unwrap();
        s2.iter()
            .map(|&(b, d)| match order {
                KeyOrder::Accumulator => loader.load_v_fp8_strip(k, &reads, &tile, b, d),
                KeyOrder::Contiguous => loader.load_v_fp8_strip_16(k, &reads, &tile, b, d),
            })
            .collect::<Result<Vec<_>, _>>()
            .unwrap()
    });
    assert_eq!(
        asm.matches("ds_read_b64_tr_b8").count(),
        4 * strips.len(),
        "{what}: four transposing reads per strip"
    );
    let tv = v_operand_layout(&MFMA_16X16X128_FP8, &qk, order).unwrap();
    let host = HostTile {
        lds: &lds,
        layout,
        eb: 1,
        cols: keys,
        swizzle,
        at: 0,
    };
    for (got, &(b, d)) in frags.iter().zip(&strips) {
        host.check(what, got, &tv, [16, 128], [d, b]);
    }
}

#[test]
fn v_fp8_strips() {
    let none = SwizzleChain::identity();
    check_v_strips("acc d128", 128, 128, KeyOrder::Accumulator, none.clone());
    check_v_strips(
        "contiguous d128",
        128,
        128,
        KeyOrder::Contiguous,
        none.clone(),
    );
    check_v_strips("acc d64 x 256 keys", 64, 256, KeyOrder::Accumulator, none);
    // 128-byte key rows, 8-byte units XORed with key bits; and a two-step chain.
    check_v_strips(
        "acc d128 Sw<4,3,4>",
        128,
        128,
        KeyOrder::Accumulator,
        sw(4, 3, 4).into(),
    );
    check_v_strips(
        "contiguous d128 two-step",
        128,
        128,
        KeyOrder::Contiguous,
        sw(3, 4, 3).then(sw(1, 3, 7)),
    );
}

#[test]
fn refusals_name_the_rule() {
    // A swizzle that splits the 16-byte reads; a tile of the wrong element width.
    let lds = vec![0u8; LDS_BYTES];
    let (_, _) = run(&lds, |k, mem, lane| {
        let tile = LdsTile {
            lds: mem,
            base: k.i32(0),
            layout: Layout::row_major((32, 128)),
            elem_bits: 8,
        };
        let split = TiledMmaLoader::new(MFMA_16X16X128_FP8)
            .with_swizzle(sw(2, 2, 5))
            .unwrap();
        let e = split.load_b(k, &tile, lane, 0).unwrap_err().to_string();
        assert!(e.contains("moves bytes inside"), "{e}");
        let bf16 = TiledMmaLoader::new(MFMA_16X16X32_BF16);
        let e = bf16.load_b(k, &tile, lane, 0).unwrap_err().to_string();
        assert!(e.contains("16-bit"), "{e}");
        let e = TiledMmaLoader::new(MFMA_16X16X128_FP8)
            .load_b(k, &tile, lane, 70000)
            .unwrap_err()
            .to_string();
        assert!(e.contains("immediate"), "{e}");
        // Something to store, so the kernel runs.
        vec![Value::from(k.i32(0))]
    });
}
