//! Matrix-core (MFMA) arithmetic as pure functions over lane-major register blocks.
//!
//! A register block is `&[[u32; 64]]`: entry `r` is VGPR (or AGPR) `base + r`, indexed by
//! lane. The executor gathers the operand blocks, calls one of the functions here, and
//! writes the accumulator block back; nothing here knows about waves or encodings.
//!
//! Operand layout (CDNA3/CDNA4 ISA "matrix core" chapter; the same formulas are printed by
//! AMD's matrix instruction calculator and used by LLVM/Triton's MFMA layouts):
//! * `src0` is A (M x K), `src1` is B (K x N). For A, lane `l` holds row `i = l % M`; for B,
//!   lane `l` holds column `j = l % N`. The `64 / M` lane groups `g = l / M` split K.
//!   Within a lane the elements are packed contiguously (little-endian bit string across the
//!   lane's consecutive registers): element `t` of group `g` is `k = g * E + t` with `E` the
//!   elements per lane. FP8/BF8 operands of the f8f6f4 instructions hold 32 bytes per lane
//!   and use 16-byte chunks instead: byte `t` is `k = 16 g + t % 16 + 16 G (t / 16)` with
//!   `G = 64 / M` groups (so 16x16x128: `16g + t%16 + 64(t/16)`, 32x32x64:
//!   `16g + t%16 + 32(t/16)`). FP6/BF6/FP4 pack contiguously: `k = 32 g + t`.
//! * D/C (M x N, 32-bit elements): element `(i, j)` is in register
//!   `4 * (i / (4 R)) + i % 4` of lane `N * ((i / 4) % R) + j` with `R = 64 / N`; i.e.
//!   16x16: register `i % 4` of lane `16 (i / 4) + j`; 32x32: register `4 (i / 8) + i % 4`
//!   of lane `32 ((i / 4) % 2) + j`. Rows of D come from A's lanes, columns from B's.
//! * Block scales (`v_mfma_scale_*`): lane `l` of the A scale operand gives the E8M0 byte for
//!   row `l % M` and 32-wide K block `l / M`; lane `l` of the B scale operand gives column
//!   `l % N`, block `l / N`. The caller extracts the byte each lane contributes.
//!
//! EXEC is ignored by the matrix core (every lane is read and written), as the ISA states.

// Lane loops index several parallel per-lane arrays at once; an index reads clearer than
// zipped iterators there.
#![allow(clippy::needless_range_loop)]

use super::fp::{self, MiniFloat};

/// One VGPR: 64 lanes of 32 bits.
pub type Vgpr = [u32; 64];

/// K elements that share one E8M0 scale in the block-scaled instructions.
pub const SCALE_BLOCK: usize = tilegen_arch::MX_BLOCK as usize;

/// Largest M x K operand any instruction here uses (16x128 and 32x64 both have 2048).
const MAX_OPERAND_ELEMS: usize = 2048;

/// Errors from malformed matrix operations (the executor turns them into faults).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MfmaError {
    /// A register block is shorter than the instruction reads or writes.
    #[error("{operand} needs {need} registers, got {got}")]
    OperandTooShort {
        /// Which operand ("A", "B", "C/D").
        operand: &'static str,
        /// Registers required.
        need: usize,
        /// Registers supplied.
        got: usize,
    },
    /// `cbsz`/`blgp` selected a format number the f8f6f4 instructions do not define.
    #[error("f8f6f4 format selector {0} is not one of 0 (FP8), 1 (BF8), 2 (FP6), 3 (BF6), 4 (FP4)")]
    BadFormat(u32),
}

/// How the partial products of one instruction reach the accumulator.
///
/// The ISA does not document the internal precision of the matrix core's adder tree, so this
/// is a modelling choice, made once here: every product is exact, products are summed in f64
/// within each 32-element K block, each block sum is multiplied by its (power-of-two, exact)
/// block scale, block results are summed in f64 in K order, and the total is added to C with
/// a single rounding to f32. For FP4/FP6/FP8-E4M3 operands every step before that final
/// rounding is exact (products have at most 8 significant bits and the exponent span of 32
/// of them fits in 53 bits), so only the one rounding into f32 can differ from a real device,
/// and only in the last bit. The unscaled instructions use the same policy with scale 1.
#[inline]
fn accumulate_f32(c: f32, sum: f64) -> f32 {
    (c as f64 + sum) as f32
}

/// Shape of an f8f6f4 instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum F8f6f4Shape {
    /// `*_16x16x128_f8f6f4`.
    M16N16K128,
    /// `*_32x32x64_f8f6f4`.
    M32N32K64,
}

impl F8f6f4Shape {
    /// M (= N) of the shape.
    pub const fn dim(self) -> usize {
        match self {
            F8f6f4Shape::M16N16K128 => 16,
            F8f6f4Shape::M32N32K64 => 32,
        }
    }
    /// K of the shape.
    pub const fn k(self) -> usize {
        match self {
            F8f6f4Shape::M16N16K128 => 128,
            F8f6f4Shape::M32N32K64 => 64,
        }
    }
    /// Accumulator registers (M * N / 64).
    pub const fn acc_regs(self) -> usize {
        self.dim() * self.dim() / 64
    }
}

/// Registers one lane needs for 32 elements of `fmt` (8 for FP8/BF8, 6 for FP6/BF6, 4 for FP4).
pub fn f8f6f4_operand_regs(fmt: &MiniFloat) -> usize {
    (32 * fmt.bits() as usize).div_ceil(32)
}

/// Reads `bits` bits at bit offset `pos` of lane `lane`'s bit string (registers little-endian).
#[inline]
fn extract(regs: &[Vgpr], lane: usize, pos: usize, bits: u32) -> u32 {
    let word = pos / 32;
    let shift = pos % 32;
    let lo = regs[word][lane] as u64;
    let hi = if shift as u32 + bits > 32 {
        regs[word + 1][lane] as u64
    } else {
        0
    };
    (((hi << 32) | lo) >> shift) as u32 & ((1u64 << bits) - 1) as u32
}

/// K index of element `t` of lane group `g` (see the module documentation).
#[inline]
fn k_index(groups: usize, per_lane: usize, bits: u32, g: usize, t: usize) -> usize {
    if bits == 8 && per_lane > 16 {
        16 * g + t % 16 + 16 * groups * (t / 16)
    } else {
        g * per_lane + t
    }
}

/// Decodes an operand block into `out[i * k + kk]` (row/column `i`, reduction index `kk`).
fn decode_operand(
    regs: &[Vgpr],
    dim: usize,
    k: usize,
    bits: u32,
    decode: impl Fn(u32) -> f64,
    out: &mut [f64],
) {
    let groups = 64 / dim;
    let per_lane = k / groups;
    for lane in 0..64 {
        let i = lane % dim;
        let g = lane / dim;
        for t in 0..per_lane {
            let code = extract(regs, lane, t * bits as usize, bits);
            out[i * k + k_index(groups, per_lane, bits, g, t)] = decode(code);
        }
    }
}

/// (register, lane) of accumulator element (row `i`, column `j`) for an M x N (N = 16 or 32)
/// single-block instruction.
#[inline]
pub fn acc_position(n: usize, i: usize, j: usize) -> (usize, usize) {
    let row_groups = 64 / n;
    (
        4 * (i / (4 * row_groups)) + i % 4,
        n * ((i / 4) % row_groups) + j,
    )
}

fn check_len(operand: &'static str, regs: usize, need: usize) -> Result<(), MfmaError> {
    if regs < need {
        Err(MfmaError::OperandTooShort {
            operand,
            need,
            got: regs,
        })
    } else {
        Ok(())
    }
}

/// E8M0 scales for a block-scaled instruction: the byte each lane contributes, already
/// selected by `op_sel`/`op_sel_hi` (or taken from bits 30:23 for a non-VGPR source).
#[derive(Clone, Copy, Debug)]
pub struct BlockScales<'a> {
    /// Per-lane E8M0 byte of the A scale operand.
    pub a: &'a [u8; 64],
    /// Per-lane E8M0 byte of the B scale operand.
    pub b: &'a [u8; 64],
}

/// `v_mfma_[scale_]f32_{16x16x128,32x32x64}_f8f6f4`: `acc = acc + A * B` with A in format
/// `a_fmt` (selected by `cbsz`), B in `b_fmt` (by `blgp`), optionally block-scaled.
///
/// `acc` holds C on entry and D on return (the caller copies C in and D out, so C and D may
/// name different registers).
pub fn f8f6f4(
    shape: F8f6f4Shape,
    a_fmt: &MiniFloat,
    b_fmt: &MiniFloat,
    a: &[Vgpr],
    b: &[Vgpr],
    scales: Option<BlockScales<'_>>,
    acc: &mut [Vgpr],
) -> Result<(), MfmaError> {
    let dim = shape.dim();
    let k = shape.k();
    check_len("A", a.len(), f8f6f4_operand_regs(a_fmt))?;
    check_len("B", b.len(), f8f6f4_operand_regs(b_fmt))?;
    check_len("C/D", acc.len(), shape.acc_regs())?;
    let a_lut = a_fmt.cached_table();
    let b_lut = b_fmt.cached_table();
    let mut am = [0f64; MAX_OPERAND_ELEMS];
    let mut bm = [0f64; MAX_OPERAND_ELEMS];
    decode_operand(
        a,
        dim,
        k,
        a_fmt.bits(),
        |c| a_lut[c as usize] as f64,
        &mut am,
    );
    decode_operand(
        b,
        dim,
        k,
        b_fmt.bits(),
        |c| b_lut[c as usize] as f64,
        &mut bm,
    );
    let blocks = k / SCALE_BLOCK;
    // Per-row/column block scales, decoded once: scale_a[i * blocks + blk].
    let mut scale_a = [1f64; 32 * 4];
    let mut scale_b = [1f64; 32 * 4];
    if let Some(s) = scales {
        for blk in 0..blocks {
            for i in 0..dim {
                scale_a[i * blocks + blk] = fp::e8m0_to_f64(s.a[i + dim * blk]);
                scale_b[i * blocks + blk] = fp::e8m0_to_f64(s.b[i + dim * blk]);
            }
        }
    }
    for i in 0..dim {
        let arow = &am[i * k..(i + 1) * k];
        for j in 0..dim {
            let bcol = &bm[j * k..(j + 1) * k];
            let mut sum = 0f64;
            for blk in 0..blocks {
                let r = blk * SCALE_BLOCK..(blk + 1) * SCALE_BLOCK;
                let partial = dot(&arow[r.clone()], &bcol[r]);
                sum += partial * scale_a[i * blocks + blk] * scale_b[j * blocks + blk];
            }
            let (reg, lane) = acc_position(dim, i, j);
            let c = f32::from_bits(acc[reg][lane]);
            acc[reg][lane] = accumulate_f32(c, sum).to_bits();
        }
    }
    Ok(())
}

/// Dot product in f64. Eight independent partial sums let the compiler vectorise. The order
/// cannot matter where the sum is exact in f64 (FP4/FP6/FP8 blocks: E4M3 products of a block
/// span at most 2^-18..2^23; i8), and where it is not (BF8 with extreme exponents, wide-range
/// f16/bf16/f32 data) the hardware documents no order either; the result is deterministic
/// in any case.
#[inline]
fn dot(a: &[f64], b: &[f64]) -> f64 {
    let mut acc = [0f64; 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for t in 0..8 {
            acc[t] += x[t] * y[t];
        }
    }
    let tail: f64 = ra.iter().zip(rb).map(|(x, y)| x * y).sum();
    ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail
}

/// Element type of a dense (non-f8f6f4) MFMA's A and B operands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DenseInput {
    /// f32 (`v_mfma_f32_*_f32`).
    F32,
    /// IEEE half (`*_f16`).
    F16,
    /// bfloat16 (`*_bf16`, including the older `*_bf16_1k` shapes).
    Bf16,
    /// Signed 8-bit integers, i32 accumulator (`v_mfma_i32_*_i8`).
    I8,
    /// OCP FP8 E4M3 (`v_mfma_f32_*_fp8_*`).
    Fp8,
    /// OCP BF8 E5M2 (`v_mfma_f32_*_bf8_*`).
    Bf8,
}

impl DenseInput {
    /// Bits per element.
    pub const fn bits(self) -> u32 {
        match self {
            DenseInput::F32 => 32,
            DenseInput::F16 | DenseInput::Bf16 => 16,
            DenseInput::I8 | DenseInput::Fp8 | DenseInput::Bf8 => 8,
        }
    }
}

/// A single-block dense MFMA shape (M = N).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DenseShape {
    /// M = N (16 or 32).
    pub dim: usize,
    /// K.
    pub k: usize,
    /// Element type of A.
    pub input: DenseInput,
    /// Element type of B (differs from A only for the mixed FP8/BF8 instructions).
    pub input_b: DenseInput,
}

impl DenseShape {
    /// Registers each of A and B occupy per lane.
    pub const fn operand_regs(&self) -> usize {
        (self.k / (64 / self.dim)) * self.input.bits() as usize / 32
    }
    /// Accumulator registers.
    pub const fn acc_regs(&self) -> usize {
        self.dim * self.dim / 64
    }
}

/// Dense single-block MFMA (`v_mfma_{f32,i32}_{16x16xK,32x32xK}_*`): `acc = acc + A * B`.
/// Floating-point shapes follow [`accumulate_f32`]'s policy; the i8 shapes accumulate in
/// 32-bit two's complement (wrapping, no clamp).
pub fn dense(
    shape: &DenseShape,
    a: &[Vgpr],
    b: &[Vgpr],
    acc: &mut [Vgpr],
) -> Result<(), MfmaError> {
    let (dim, k) = (shape.dim, shape.k);
    check_len("A", a.len(), shape.operand_regs())?;
    check_len("B", b.len(), shape.operand_regs())?;
    check_len("C/D", acc.len(), shape.acc_regs())?;
    if shape.input.bits() != shape.input_b.bits()
        || (shape.input == DenseInput::I8) != (shape.input_b == DenseInput::I8)
    {
        return Err(MfmaError::BadFormat(shape.input_b.bits()));
    }
    let (fp8_table, bf8_table) = (fp::FP8_E4M3.cached_table(), fp::BF8_E5M2.cached_table());
    let (fp8, bf8): (&[f32; 256], &[f32; 256]) = (&fp8_table, &bf8_table);
    let decoder = |ty: DenseInput| {
        move |c: u32| -> f64 {
            match ty {
                DenseInput::F32 => f32::from_bits(c) as f64,
                DenseInput::F16 => fp::f16_to_f32(c as u16) as f64,
                DenseInput::Bf16 => fp::bf16_to_f32(c as u16) as f64,
                DenseInput::I8 => c as u8 as i8 as f64,
                DenseInput::Fp8 => fp8[c as usize & 0xff] as f64,
                DenseInput::Bf8 => bf8[c as usize & 0xff] as f64,
            }
        }
    };
    let mut am = [0f64; MAX_OPERAND_ELEMS];
    let mut bm = [0f64; MAX_OPERAND_ELEMS];
    decode_operand(a, dim, k, shape.input.bits(), decoder(shape.input), &mut am);
    decode_operand(
        b,
        dim,
        k,
        shape.input_b.bits(),
        decoder(shape.input_b),
        &mut bm,
    );
    for i in 0..dim {
        let arow = &am[i * k..(i + 1) * k];
        for j in 0..dim {
            let bcol = &bm[j * k..(j + 1) * k];
            let (reg, lane) = acc_position(dim, i, j);
            if shape.input == DenseInput::I8 {
                // |a*b| <= 2^14, K <= 64: the f64 sum is an exact integer below 2^21.
                let sum = dot(arow, bcol) as i64;
                acc[reg][lane] = (acc[reg][lane] as i32).wrapping_add(sum as i32) as u32;
            } else {
                let sum = dot(arow, bcol);
                acc[reg][lane] = accumulate_f32(f32::from_bits(acc[reg][lane]), sum).to_bits();
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::fp::{BF6_E3M2, BF8_E5M2, FP4_E2M1, FP6_E2M3, FP8_E4M3, Overflow};

    fn zero_block(n: usize) -> Vec<Vgpr> {
        vec![[0u32; 64]; n]
    }

    /// Places element code `code` (of `bits` bits) at bit `pos` of lane `lane`.
    fn put(regs: &mut [Vgpr], lane: usize, pos: usize, bits: u32, code: u32) {
        for b in 0..bits as usize {
            let bit = (code >> b) & 1;
            let p = pos + b;
            regs[p / 32][lane] |= bit << (p % 32);
        }
    }

    /// Builds an A/B operand from a value function f(i, k) using the ISA's documented layout,
    /// written out independently of the code under test (gfx950 notes section 3).
    fn build_f8f6f4(
        shape: F8f6f4Shape,
        fmt: &MiniFloat,
        f: impl Fn(usize, usize) -> f64,
    ) -> Vec<Vgpr> {
        let mut regs = zero_block(8);
        let dim = shape.dim();
        for lane in 0..64 {
            let i = lane % dim;
            let g = lane / dim;
            for t in 0..32 {
                let kk = if fmt.bits() == 8 {
                    match shape {
                        F8f6f4Shape::M16N16K128 => 16 * g + t % 16 + 64 * (t / 16),
                        F8f6f4Shape::M32N32K64 => 16 * g + t % 16 + 32 * (t / 16),
                    }
                } else {
                    32 * g + t
                };
                let code = fmt.encode(f(i, kk), Overflow::InfOrNan);
                put(&mut regs, lane, t * fmt.bits() as usize, fmt.bits(), code);
            }
        }
        regs
    }

    /// Reads D(i, j) with the documented output layout.
    fn d_at(acc: &[Vgpr], dim: usize, i: usize, j: usize) -> f32 {
        let (reg, lane) = if dim == 16 {
            (i % 4, 16 * (i / 4) + j)
        } else {
            (4 * (i / 8) + i % 4, 32 * ((i / 4) % 2) + j)
        };
        f32::from_bits(acc[reg][lane])
    }

    #[test]
    fn fp4_all_ones_16x16x128() {
        let s = F8f6f4Shape::M16N16K128;
        let a = build_f8f6f4(s, &FP4_E2M1, |_, _| 1.0);
        let b = build_f8f6f4(s, &FP4_E2M1, |_, _| 1.0);
        let mut acc = zero_block(4);
        for r in acc.iter_mut() {
            r.fill(2.0f32.to_bits());
        }
        f8f6f4(s, &FP4_E2M1, &FP4_E2M1, &a, &b, None, &mut acc).unwrap();
        // 128 products of 1*1 plus C = 2.
        assert!(
            acc.iter()
                .all(|r| r.iter().all(|&x| f32::from_bits(x) == 130.0))
        );
    }

    /// A one-hot pattern pins the exact (row, k) -> (lane, bit) mapping of A and the
    /// (row, col) -> (register, lane) mapping of D: A(i,k) = 1 only for k = 3i+1 (mod K),
    /// B(k,j) = k + j (small integers, exact in BF6... use FP8 to be exact up to 448).
    #[test]
    fn layout_pinned_by_one_hot() {
        for s in [F8f6f4Shape::M16N16K128, F8f6f4Shape::M32N32K64] {
            let k = s.k();
            for (fa, fb) in [
                (FP4_E2M1, FP8_E4M3),
                (FP8_E4M3, FP8_E4M3),
                (FP6_E2M3, BF8_E5M2),
            ] {
                let a = build_f8f6f4(
                    s,
                    &fa,
                    |i, kk| if kk == (3 * i + 1) % k { 1.0 } else { 0.0 },
                );
                // B(k, j): value 2^(k % 4) * (1 + j % 2) keeps values exact in every format used.
                let bval = |kk: usize, j: usize| (1u32 << (kk % 4)) as f64 * (1 + j % 2) as f64;
                let b = build_f8f6f4(s, &fb, |j, kk| bval(kk, j));
                let mut acc = zero_block(s.acc_regs());
                f8f6f4(s, &fa, &fb, &a, &b, None, &mut acc).unwrap();
                for i in 0..s.dim() {
                    for j in 0..s.dim() {
                        let want = bval((3 * i + 1) % k, j) as f32;
                        assert_eq!(
                            d_at(&acc, s.dim(), i, j),
                            want,
                            "{s:?} {} {} ({i},{j})",
                            fa.name,
                            fb.name
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn block_scales_select_row_and_block() {
        let s = F8f6f4Shape::M16N16K128;
        // A = 1 everywhere, B = 1 everywhere: each 32-block contributes 32 * scale.
        let a = build_f8f6f4(s, &FP4_E2M1, |_, _| 1.0);
        let b = build_f8f6f4(s, &FP4_E2M1, |_, _| 1.0);
        let mut sa = [127u8; 64];
        let mut sb = [127u8; 64];
        // Row 5, block 2 (lane 5 + 16*2 = 37) scaled by 2^3; column 7, block 0 (lane 7) by 2^-1.
        sa[37] = 130;
        sb[7] = 126;
        let mut acc = zero_block(4);
        f8f6f4(
            s,
            &FP4_E2M1,
            &FP4_E2M1,
            &a,
            &b,
            Some(BlockScales { a: &sa, b: &sb }),
            &mut acc,
        )
        .unwrap();
        for i in 0..16 {
            for j in 0..16 {
                let blk = |bl: usize| {
                    let mut x = 32.0;
                    if i == 5 && bl == 2 {
                        x *= 8.0;
                    }
                    if j == 7 && bl == 0 {
                        x *= 0.5;
                    }
                    x
                };
                let want = (0..4).map(blk).sum::<f64>() as f32;
                assert_eq!(d_at(&acc, 16, i, j), want, "({i},{j})");
            }
        }
    }

    #[test]
    fn scale_nan_and_extremes() {
        let s = F8f6f4Shape::M32N32K64;
        let a = build_f8f6f4(s, &FP4_E2M1, |_, _| 6.0);
        let b = build_f8f6f4(s, &FP4_E2M1, |_, _| 6.0);
        let mut sa = [127u8; 64];
        let sb = [254u8; 64]; // 2^127
        sa[0] = 0xff; // row 0 block 0: NaN
        sa[1] = 0; // row 1 block 0: 2^-127
        let mut acc = zero_block(16);
        f8f6f4(
            s,
            &FP4_E2M1,
            &FP4_E2M1,
            &a,
            &b,
            Some(BlockScales { a: &sa, b: &sb }),
            &mut acc,
        )
        .unwrap();
        assert!(d_at(&acc, 32, 0, 0).is_nan());
        // Row 1: block 0 = 32*36*2^0 = 1152, block 1 = 32*36*2^127 -> overflow to inf in f32.
        assert_eq!(d_at(&acc, 32, 1, 3), f32::INFINITY);
        // Make the product land exactly: scale_a 2^-127 with scale_b 2^127 on block 0 only.
        let sb2 = [127u8; 64];
        let mut sa2 = [127u8; 64];
        sa2[33] = 0; // row 1, block 1
        let mut acc = zero_block(16);
        f8f6f4(
            s,
            &FP4_E2M1,
            &FP4_E2M1,
            &a,
            &b,
            Some(BlockScales { a: &sa2, b: &sb2 }),
            &mut acc,
        )
        .unwrap();
        // Block 0: 1152; block 1: 1152 * 2^-127 (tiny, lost when rounding 1152 + tiny to f32).
        assert_eq!(d_at(&acc, 32, 1, 0), 1152.0);
        assert_eq!(d_at(&acc, 32, 2, 0), 2304.0);
    }

    #[test]
    fn nan_inf_denormal_inputs() {
        let s = F8f6f4Shape::M16N16K128;
        // BF8: A(0, 0) = +inf, A(1, 0) = NaN, A(2, *) = smallest subnormal 2^-16.
        let a = build_f8f6f4(s, &BF8_E5M2, |i, k| match (i, k) {
            (0, 0) => f64::INFINITY,
            (1, 0) => f64::NAN,
            (2, _) => 2f64.powi(-16),
            _ => 0.0,
        });
        let b = build_f8f6f4(
            s,
            &BF8_E5M2,
            |j, k| if j == 1 && k == 0 { 0.0 } else { 1.0 },
        );
        let mut acc = zero_block(4);
        f8f6f4(s, &BF8_E5M2, &BF8_E5M2, &a, &b, None, &mut acc).unwrap();
        assert_eq!(d_at(&acc, 16, 0, 0), f32::INFINITY);
        assert!(d_at(&acc, 16, 0, 1).is_nan()); // inf * 0
        assert!(d_at(&acc, 16, 1, 5).is_nan());
        assert_eq!(d_at(&acc, 16, 2, 0), 128.0 * 2f32.powi(-16));
        assert_eq!(d_at(&acc, 16, 3, 3), 0.0);
    }

    #[test]
    fn bf6_fp6_mixed_values() {
        let s = F8f6f4Shape::M32N32K64;
        // A(i,k) = 0.25 * (k % 8) in BF6 (exact: 0, 0.25, ..., 1.75); B(k,j) = 0.5 in FP6.
        let a = build_f8f6f4(s, &BF6_E3M2, |_, k| 0.25 * (k % 8) as f64);
        let b = build_f8f6f4(s, &FP6_E2M3, |_, _| 0.5);
        let mut acc = zero_block(16);
        f8f6f4(s, &BF6_E3M2, &FP6_E2M3, &a, &b, None, &mut acc).unwrap();
        // sum over 64 k of 0.125 * (k % 8) = 8 * 0.125 * 28 = 28.
        assert_eq!(d_at(&acc, 32, 9, 30), 28.0);
    }

    #[test]
    fn short_operands_are_errors() {
        let a = zero_block(3);
        let mut acc = zero_block(4);
        let e = f8f6f4(
            F8f6f4Shape::M16N16K128,
            &FP4_E2M1,
            &FP4_E2M1,
            &a,
            &a,
            None,
            &mut acc,
        );
        assert_eq!(
            e,
            Err(MfmaError::OperandTooShort {
                operand: "A",
                need: 4,
                got: 3
            })
        );
    }

    /// Dense bf16 16x16x32: lane l holds row l % 16, k = 8 (l / 16) + t, 8 halves in 4 VGPRs.
    #[test]
    fn dense_bf16_16x16x32() {
        let shape = DenseShape {
            dim: 16,
            k: 32,
            input: DenseInput::Bf16,
            input_b: DenseInput::Bf16,
        };
        let mut a = zero_block(4);
        let mut b = zero_block(4);
        let av = |i: usize, k: usize| (i as f32) + (k as f32) * 0.5;
        let bv = |k: usize, j: usize| {
            if k == j {
                1.0f32
            } else if k == j + 16 {
                2.0
            } else {
                0.0
            }
        };
        for lane in 0..64 {
            for t in 0..8 {
                let k = 8 * (lane / 16) + t;
                put(
                    &mut a,
                    lane,
                    16 * t,
                    16,
                    fp::f32_to_bf16(av(lane % 16, k)) as u32,
                );
                put(
                    &mut b,
                    lane,
                    16 * t,
                    16,
                    fp::f32_to_bf16(bv(k, lane % 16)) as u32,
                );
            }
        }
        let mut acc = zero_block(4);
        dense(&shape, &a, &b, &mut acc).unwrap();
        for i in 0..16 {
            for j in 0..16 {
                let want = av(i, j) + 2.0 * av(i, j + 16);
                assert_eq!(d_at(&acc, 16, i, j), want, "({i},{j})");
            }
        }
    }

    /// Dense f16 32x32x16: lane l holds row l % 32, k = 8 (l / 32) + t.
    #[test]
    fn dense_f16_32x32x16() {
        let shape = DenseShape {
            dim: 32,
            k: 16,
            input: DenseInput::F16,
            input_b: DenseInput::F16,
        };
        let mut a = zero_block(4);
        let mut b = zero_block(4);
        for lane in 0..64 {
            for t in 0..8 {
                let k = 8 * (lane / 32) + t;
                let i = lane % 32;
                put(
                    &mut a,
                    lane,
                    16 * t,
                    16,
                    fp::f32_to_f16(if k == i % 16 { 1.0 } else { 0.0 }) as u32,
                );
                put(
                    &mut b,
                    lane,
                    16 * t,
                    16,
                    fp::f32_to_f16((k * 100 + i) as f32) as u32,
                );
            }
        }
        let mut acc = zero_block(16);
        dense(&shape, &a, &b, &mut acc).unwrap();
        for i in 0..32 {
            for j in 0..32 {
                assert_eq!(d_at(&acc, 32, i, j), ((i % 16) * 100 + j) as f32);
            }
        }
    }

    /// i8 16x16x64 wraps in 32 bits: C = i32::MAX plus 64 * (1 * 1) wraps negative.
    #[test]
    fn dense_i8_wraps() {
        let shape = DenseShape {
            dim: 16,
            k: 64,
            input: DenseInput::I8,
            input_b: DenseInput::I8,
        };
        let mut a = zero_block(4);
        let mut b = zero_block(4);
        for r in 0..4 {
            a[r].fill(0x0101_0101);
            b[r].fill(0xffff_ffff); // -1 in every byte
        }
        let mut acc = zero_block(4);
        acc[0].fill(i32::MIN as u32);
        dense(&shape, &a, &b, &mut acc).unwrap();
        assert_eq!(acc[0][0] as i32, i32::MIN.wrapping_sub(64));
        assert_eq!(acc[1][0] as i32, -64);
    }

    /// f32 16x16x4: lane l holds A(l % 16, l / 16), one register.
    #[test]
    fn dense_f32_16x16x4() {
        let shape = DenseShape {
            dim: 16,
            k: 4,
            input: DenseInput::F32,
            input_b: DenseInput::F32,
        };
        let mut a = zero_block(1);
        let mut b = zero_block(1);
        for lane in 0..64 {
            a[0][lane] = ((lane % 16) as f32 * 10.0 + (lane / 16) as f32).to_bits();
            b[0][lane] = if lane / 16 == 2 {
                (1.0f32 + (lane % 16) as f32).to_bits()
            } else {
                0
            };
        }
        let mut acc = zero_block(4);
        dense(&shape, &a, &b, &mut acc).unwrap();
        for i in 0..16 {
            for j in 0..16 {
                assert_eq!(
                    d_at(&acc, 16, i, j),
                    (i as f32 * 10.0 + 2.0) * (1.0 + j as f32)
                );
            }
        }
    }

    #[test]
    fn acc_position_matches_documented_maps() {
        assert_eq!(acc_position(16, 5, 3), (1, 16 + 3));
        assert_eq!(acc_position(16, 15, 15), (3, 63));
        assert_eq!(acc_position(32, 5, 3), (1, 32 + 3));
        assert_eq!(acc_position(32, 9, 0), (5, 0));
        assert_eq!(acc_position(32, 31, 31), (15, 63));
    }
}
