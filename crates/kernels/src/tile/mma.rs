//! `BlockScaledMmaOp` (seed 002): register ownership and the block-scaled MFMA.
//!
//! Each wave owns `num_m x num_n` accumulator tiles of one block-scaled atom. Which element a
//! lane holds in each operand, accumulator and scale is the atom's business ([`crate::tile::atom`]);
//! the kernels read fragments with `TileTensor::partition_*`. Scales are E8M0 bytes packed four
//! to a dword, and the MFMA's byte selector (`op_sel`) picks one, so one scale load serves up to
//! four MMA tiles.

use tilegen_dsl::{Elem, Kernel, MfmaShape, Result, TileTensor, Ty, Value, dev_layout};
use tilegen_layout::{Coord, Layout};

use super::atom::{BlockScaled, F8f6f4, ScaleSel, Swapped};

/// The atom the GEMMs compute with for `shape`: FP4 x FP4 block-scaled, fed B as the
/// instruction's A so that the accumulators hold `C^T` tiles (see [`Swapped`]).
pub fn gemm_atom(shape: MfmaShape) -> Swapped<F8f6f4> {
    Swapped(F8f6f4::new(shape, tilegen_dsl::MxFormat::Fp4, true))
}

/// Accumulators and MFMA issue for one wave's `num_m x num_n` grid of MMA tiles.
pub struct BlockScaledMmaOp<'k, 'ctx> {
    k: &'k Kernel<'ctx>,
    /// The atom.
    pub atom: Swapped<F8f6f4>,
    /// MMA tiles along M.
    pub num_m: usize,
    /// MMA tiles along N.
    pub num_n: usize,
    acc: TileTensor<'k, 'ctx>,
}

impl<'k, 'ctx> BlockScaledMmaOp<'k, 'ctx> {
    /// Zeroed accumulators.
    pub fn new(k: &'k Kernel<'ctx>, shape: MfmaShape, num_m: usize, num_n: usize) -> Result<Self> {
        let zero = k.zero(Ty::vector(Elem::F32, shape.acc_dwords()));
        let vars = (0..num_m * num_n)
            .map(|_| k.var(zero))
            .collect::<Result<_>>()?;
        let layout = dev_layout(&Layout::row_major((num_m as i64, num_n as i64)))?;
        Ok(BlockScaledMmaOp {
            k,
            atom: gemm_atom(shape),
            num_m,
            num_n,
            acc: TileTensor::registers(k, vars, layout),
        })
    }

    /// The accumulators as a register view `[num_m, num_n]`: element `(m, n)` is tile
    /// `(m, n)`'s accumulator vector, laid out as the atom's C layout says.
    pub fn accum_tile(&self) -> &TileTensor<'k, 'ctx> {
        &self.acc
    }

    /// `acc[m][n] += A_m * B_n` with their scales.
    pub fn mma(
        &self,
        m: usize,
        n: usize,
        a: Value<'ctx>,
        a_scale: ScaleSel<'k, 'ctx>,
        b: Value<'ctx>,
        b_scale: ScaleSel<'k, 'ctx>,
    ) -> Result<()> {
        let at = Coord::from((m, n));
        let c = self.acc.load(&at)?;
        let d = self.atom.mma_scaled(self.k, a, a_scale, b, b_scale, c)?;
        self.acc.store(&at, d)
    }
}
