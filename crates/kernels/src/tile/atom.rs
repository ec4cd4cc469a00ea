//! The gfx950 MFMA atoms: each instruction's A, B, C (and scale) thread-value layouts, the one
//! statement of its lane mapping (see [`tilegen_dsl::MmaAtom`] for the conventions).
//!
//! The mappings are the CDNA4 ISA's matrix-core operand layouts, as AMD's matrix instruction
//! calculator prints them and as the emulator implements them (validated there on Triton's and
//! AITER's kernels; `tests/atoms.rs` pins every atom to it). With `G = 64 / MN` lane groups:
//! - operands: lane `l` holds row `l % MN` and K group `l / MN`. Packed FP4/FP6 values and bf16
//!   are contiguous in K (`k = E g + v`, `E` values per lane); the 32 FP8 bytes of the f8f6f4
//!   instructions come as two 16-byte halves `16 G` apart (`k = 16 g + v % 16 + 16 G (v / 16)`).
//! - accumulators: value `v` of lane `l` is `D[i][l % N]` with
//!   `i = v % 4 + 4 (l / N) + 4 G (v / 4)`.
//! - scales: lane `l` gives row `l % MN`, 32-wide K block `l / MN`.

use tilegen_dsl::{
    Bf16Shape, Elem, Int, Kernel, MfmaOperand, MfmaShape, MmaAtom, MxFormat, Result, Ty, Value,
};
use tilegen_layout::Layout;

/// K elements that share one E8M0 scale: [`tilegen_arch::MX_BLOCK`] as the layouts' integer.
pub const SCALE_BLOCK: i64 = tilegen_arch::MX_BLOCK as i64;

/// Lanes per wave.
const LANES: i64 = tilegen_arch::WAVE_SIZE as i64;

/// `(lane, v) -> i + MN k` of an operand whose lane holds `values` K-contiguous elements.
fn contiguous_operand(mn: i64, values: i64) -> Layout {
    let groups = LANES / mn;
    Layout::new(((mn, groups), values), ((1, mn * values), mn)).expect("congruent by construction")
}

/// `(lane, v) -> i + MN k` of a 32-byte FP8 operand of an f8f6f4 instruction.
fn fp8_operand(mn: i64) -> Layout {
    let groups = LANES / mn;
    Layout::new(
        ((mn, groups), (16, 2)),
        ((1, mn * 16), (mn, mn * 16 * groups)),
    )
    .expect("congruent by construction")
}

/// `(lane, v) -> i + MN j` of the accumulators of an `MN x MN` instruction.
fn accumulator(mn: i64) -> Layout {
    let groups = LANES / mn;
    let blocks = mn * mn / LANES / 4;
    Layout::new(((mn, groups), (4, blocks)), ((mn, 4), (1, 4 * groups)))
        .expect("congruent by construction")
}

/// `(lane, 0) -> i + MN k_block` of a scale operand.
fn scale_operand(mn: i64) -> Layout {
    Layout::new(((mn, LANES / mn), 1), ((1, mn), 0)).expect("congruent by construction")
}

/// A packed scale dword and the byte of it that applies to one MMA tile.
#[derive(Clone, Copy)]
pub struct ScaleSel<'k, 'ctx> {
    /// Four E8M0 bytes.
    pub dword: Int<'k, 'ctx>,
    /// The byte (0..=3): the instruction's `op_sel`.
    pub byte: u32,
}

/// A block-scaled atom: [`MmaAtom`] plus the scaled issue.
pub trait BlockScaled: MmaAtom {
    /// `D = C + (sa * A) * (sb * B)`, scales per 32-wide K block as
    /// [`MmaAtom::sfa_layout`] / [`MmaAtom::sfb_layout`] map them.
    fn mma_scaled<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        sa: ScaleSel<'_, 'ctx>,
        b: Value<'ctx>,
        sb: ScaleSel<'_, 'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>>;
}

/// `v_mfma[_scale]_f32_{16x16x128,32x32x64}_f8f6f4` with A in format `a` and B in `b`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct F8f6f4 {
    /// Shape.
    pub shape: MfmaShape,
    /// A's format (`cbsz`).
    pub a: MxFormat,
    /// B's format (`blgp`).
    pub b: MxFormat,
    /// Block-scaled (`v_mfma_scale_*`) or not.
    pub scaled: bool,
}

/// `v_mfma_scale_f32_16x16x128_f8f6f4`, FP4 x FP4.
pub const SCALE_16X16X128_FP4: F8f6f4 = F8f6f4::new(MfmaShape::M16N16K128, MxFormat::Fp4, true);
/// `v_mfma_scale_f32_32x32x64_f8f6f4`, FP4 x FP4.
pub const SCALE_32X32X64_FP4: F8f6f4 = F8f6f4::new(MfmaShape::M32N32K64, MxFormat::Fp4, true);
/// `v_mfma_scale_f32_16x16x128_f8f6f4`, FP8 (E4M3) x FP8.
pub const SCALE_16X16X128_FP8: F8f6f4 = F8f6f4::new(MfmaShape::M16N16K128, MxFormat::Fp8, true);
/// `v_mfma_scale_f32_32x32x64_f8f6f4`, FP8 (E4M3) x FP8.
pub const SCALE_32X32X64_FP8: F8f6f4 = F8f6f4::new(MfmaShape::M32N32K64, MxFormat::Fp8, true);
/// `v_mfma_f32_16x16x128_f8f6f4`, FP8 (E4M3) x FP8, unscaled.
pub const MFMA_16X16X128_FP8: F8f6f4 = F8f6f4::new(MfmaShape::M16N16K128, MxFormat::Fp8, false);
/// `v_mfma_f32_32x32x64_f8f6f4`, FP8 (E4M3) x FP8, unscaled.
pub const MFMA_32X32X64_FP8: F8f6f4 = F8f6f4::new(MfmaShape::M32N32K64, MxFormat::Fp8, false);

impl F8f6f4 {
    /// Both operands in `format`.
    pub const fn new(shape: MfmaShape, format: MxFormat, scaled: bool) -> Self {
        F8f6f4 {
            shape,
            a: format,
            b: format,
            scaled,
        }
    }

    fn mn(&self) -> i64 {
        self.shape.mn() as i64
    }

    fn operand(&self, format: MxFormat) -> Layout {
        match format {
            MxFormat::Fp8 | MxFormat::Bf8 => fp8_operand(self.mn()),
            MxFormat::Fp4 | MxFormat::Fp6 | MxFormat::Bf6 => {
                contiguous_operand(self.mn(), self.shape.k() as i64 / (LANES / self.mn()))
            }
        }
    }

    fn data<'ctx>(&self, k: &Kernel<'ctx>, v: Value<'ctx>, f: MxFormat) -> Result<Value<'ctx>> {
        k.bitcast(v, Ty::dwords(f.operand_dwords()))
    }
}

fn format_bits(f: MxFormat) -> u32 {
    match f {
        MxFormat::Fp8 | MxFormat::Bf8 => 8,
        MxFormat::Fp6 | MxFormat::Bf6 => 6,
        MxFormat::Fp4 => 4,
    }
}

impl MmaAtom for F8f6f4 {
    fn shape_mnk(&self) -> [i64; 3] {
        [self.mn(), self.mn(), self.shape.k() as i64]
    }

    fn operand_bits(&self) -> [u32; 2] {
        [format_bits(self.a), format_bits(self.b)]
    }

    fn a_layout(&self) -> Layout {
        self.operand(self.a)
    }

    fn b_layout(&self) -> Layout {
        self.operand(self.b)
    }

    fn c_layout(&self) -> Layout {
        accumulator(self.mn())
    }

    fn scale_block(&self) -> Option<i64> {
        self.scaled.then_some(SCALE_BLOCK)
    }

    fn sfa_layout(&self) -> Option<Layout> {
        self.scaled.then(|| scale_operand(self.mn()))
    }

    fn sfb_layout(&self) -> Option<Layout> {
        self.sfa_layout()
    }

    fn mma<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        b: Value<'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        if self.scaled {
            // E8M0 127 is 2^0.
            let one = ScaleSel {
                dword: k.i32(127),
                byte: 0,
            };
            return self.mma_scaled(k, a, one, b, one, c);
        }
        let (a, b) = (self.data(k, a, self.a)?, self.data(k, b, self.b)?);
        k.mfma_f8f6f4(self.shape, a, self.a, b, self.b, c)
    }
}

impl BlockScaled for F8f6f4 {
    fn mma_scaled<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        sa: ScaleSel<'_, 'ctx>,
        b: Value<'ctx>,
        sb: ScaleSel<'_, 'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        let a = MfmaOperand {
            data: self.data(k, a, self.a)?,
            format: self.a,
            scale: sa.dword,
            scale_byte: sa.byte,
        };
        let b = MfmaOperand {
            data: self.data(k, b, self.b)?,
            format: self.b,
            scale: sb.dword,
            scale_byte: sb.byte,
        };
        k.mfma_scale(self.shape, a, b, c)
    }
}

/// `v_mfma_f32_{16x16x32,32x32x16}_bf16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Bf16Mfma(pub Bf16Shape);

/// `v_mfma_f32_16x16x32_bf16`.
pub const MFMA_16X16X32_BF16: Bf16Mfma = Bf16Mfma(Bf16Shape::M16N16K32);
/// `v_mfma_f32_32x32x16_bf16`.
pub const MFMA_32X32X16_BF16: Bf16Mfma = Bf16Mfma(Bf16Shape::M32N32K16);

impl MmaAtom for Bf16Mfma {
    fn shape_mnk(&self) -> [i64; 3] {
        let mn = self.0.mn() as i64;
        [mn, mn, self.0.k() as i64]
    }

    fn operand_bits(&self) -> [u32; 2] {
        [16, 16]
    }

    fn a_layout(&self) -> Layout {
        let mn = self.0.mn() as i64;
        contiguous_operand(mn, self.0.k() as i64 / (LANES / mn))
    }

    fn b_layout(&self) -> Layout {
        self.a_layout()
    }

    fn c_layout(&self) -> Layout {
        accumulator(self.0.mn() as i64)
    }

    fn mma<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        b: Value<'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        let bf16x8 = Ty::vector(Elem::Bf16, 8);
        k.mfma_bf16(self.0, k.bitcast(a, bf16x8)?, k.bitcast(b, bf16x8)?, c)
    }
}

/// An atom fed with its operands exchanged: `D^T = B^T A^T`, so this atom's A is the
/// instruction's B (`src1`), its B the instruction's A (`src0`), and its C the transpose of the
/// instruction's. The GEMMs use it to keep C's rows in lanes and its columns in registers: a
/// lane's accumulators are then consecutive columns of one row of C, which store as vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Swapped<A>(pub A);

impl<A: MmaAtom> MmaAtom for Swapped<A> {
    fn shape_mnk(&self) -> [i64; 3] {
        let [m, n, k] = self.0.shape_mnk();
        [n, m, k]
    }

    fn operand_bits(&self) -> [u32; 2] {
        let [a, b] = self.0.operand_bits();
        [b, a]
    }

    fn a_layout(&self) -> Layout {
        self.0.b_layout()
    }

    fn b_layout(&self) -> Layout {
        self.0.a_layout()
    }

    fn c_layout(&self) -> Layout {
        // `i + M j` of the instruction's C is `j + N i` of the transpose.
        let [m, n, _] = self.0.shape_mnk();
        Layout::new((m, n), (n, 1))
            .and_then(|t| t.compose(&self.0.c_layout()))
            .expect("a transpose composes with any layout of its domain")
    }

    fn scale_block(&self) -> Option<i64> {
        self.0.scale_block()
    }

    fn sfa_layout(&self) -> Option<Layout> {
        self.0.sfb_layout()
    }

    fn sfb_layout(&self) -> Option<Layout> {
        self.0.sfa_layout()
    }

    fn mma<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        b: Value<'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        self.0.mma(k, b, a, c)
    }
}

impl<A: BlockScaled> BlockScaled for Swapped<A> {
    fn mma_scaled<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        sa: ScaleSel<'_, 'ctx>,
        b: Value<'ctx>,
        sb: ScaleSel<'_, 'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        self.0.mma_scaled(k, b, sb, a, sa, c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every (lane, value) of an `MN x K` operand hits a distinct element, all of them.
    fn bijective(l: &Layout, size: i64) {
        let mut seen = vec![false; size as usize];
        for i in 0..size {
            let v = l.call(i).static_value().unwrap();
            assert!(!seen[v as usize], "{l}: {v} twice");
            seen[v as usize] = true;
        }
    }

    #[test]
    fn layouts_cover_their_tiles_once() {
        for atom in [
            SCALE_16X16X128_FP4,
            SCALE_32X32X64_FP4,
            SCALE_16X16X128_FP8,
            SCALE_32X32X64_FP8,
        ] {
            let [m, n, k] = atom.shape_mnk();
            bijective(&atom.a_layout(), m * k);
            bijective(&atom.b_layout(), n * k);
            bijective(&atom.c_layout(), m * n);
            bijective(&atom.sfa_layout().unwrap(), m * k / SCALE_BLOCK);
        }
        for atom in [MFMA_16X16X32_BF16, MFMA_32X32X16_BF16] {
            let [m, _, k] = atom.shape_mnk();
            bijective(&atom.a_layout(), m * k);
        }
    }

    #[test]
    fn known_positions() {
        // 16x16x128 FP8: lane 17 (row 1, group 1), byte 20 is K = 16 + 4 + 64.
        let a = SCALE_16X16X128_FP8.a_layout();
        assert_eq!(
            a.crd2idx(&(17, 20).into()).unwrap().static_value(),
            Some(1 + 16 * 84)
        );
        // 32x32 accumulator 13 of lane 40: D[8 * 3 + 4 + 1][8].
        let c = SCALE_32X32X64_FP4.c_layout();
        assert_eq!(
            c.crd2idx(&(40, 13).into()).unwrap().static_value(),
            Some(29 + 32 * 8)
        );
        // Swapped: lane l's accumulators are columns 4 (l / 16) .. + 4 of row l % 16.
        let t = Swapped(SCALE_16X16X128_FP4).c_layout();
        for v in 0..4 {
            let idx = t.crd2idx(&(37, v).into()).unwrap().static_value().unwrap();
            assert_eq!((idx % 16, idx / 16), (5, 8 + v));
        }
    }
}
