//! `BlockScaledMmaOp` (seed 002): register ownership and the block-scaled MFMA.
//!
//! Each wave owns `num_m x num_n` accumulator tiles. Operand fragments are 16 bytes per lane (32
//! FP4 values); lane `l` holds row `l % MN` and K group `l / MN` of its tile (the MFMA's native
//! lane mapping). Scales are E8M0 bytes packed four to a dword, one byte per spatial MMA tile,
//! and the MFMA's byte selector (`op_sel`) picks the byte, so one scale load serves four tiles.

use inkwell::types::BasicTypeEnum;
use inkwell::values::BasicValueEnum;
use tilegen_dsl::{Int, Kernel, MfmaOperand, MfmaShape, MxFormat, Result, TileTensor, Var};
use tilegen_layout::{Coord, Idx, Layout};

/// A packed scale dword and the byte of it that applies to one MMA tile.
#[derive(Clone, Copy)]
pub struct ScaleSel<'k, 'ctx> {
    /// Four E8M0 bytes.
    pub dword: Int<'k, 'ctx>,
    /// The byte (0..=3).
    pub byte: u32,
}

/// Accumulators and MFMA issue for one wave's `num_m x num_n` grid of MMA tiles.
pub struct BlockScaledMmaOp<'k, 'ctx> {
    k: &'k Kernel<'ctx>,
    /// MFMA shape.
    pub shape: MfmaShape,
    /// MMA tiles along M.
    pub num_m: usize,
    /// MMA tiles along N.
    pub num_n: usize,
    acc: Vec<Var<'ctx>>,
}

impl<'k, 'ctx> BlockScaledMmaOp<'k, 'ctx> {
    /// Zeroed accumulators.
    pub fn new(k: &'k Kernel<'ctx>, shape: MfmaShape, num_m: usize, num_n: usize) -> Result<Self> {
        let ty = k.context().f32_type().vec_type(shape.acc_dwords());
        let acc = (0..num_m * num_n)
            .map(|_| k.var(ty, ty.const_zero().into()))
            .collect::<Result<_>>()?;
        Ok(BlockScaledMmaOp {
            k,
            shape,
            num_m,
            num_n,
            acc,
        })
    }

    /// Bytes of K one MFMA consumes per row (packed FP4).
    pub fn k_bytes_per_mma(&self) -> i64 {
        self.shape.k() as i64 / 2
    }

    /// E8M0 scales one MFMA consumes per row.
    pub fn scales_per_mma(&self) -> i64 {
        self.shape.k() as i64 / 32
    }

    /// Lanes per K group (`MN`).
    pub fn mn(&self) -> i64 {
        self.shape.mn() as i64
    }

    /// The accumulators as a register view `[num_m, num_n]`: element `(m, n)` is tile
    /// `(m, n)`'s `<acc_dwords x float>` (`D[n][m]` in MFMA terms).
    pub fn accum_tile(&self) -> TileTensor<'k, 'ctx> {
        let layout = Layout::row_major((self.num_m as i64, self.num_n as i64));
        TileTensor::registers(
            self.k,
            self.acc.clone(),
            crate::gemm::static_layout(&layout),
        )
    }

    /// `acc[m][n] += A_m * B_n` with their scales. B goes to the MFMA's `src_a` and A to `src_b`
    /// (AMD's convention), so the accumulator holds `C^T` tiles: each lane then owns consecutive
    /// columns of a row of C, which store as vectors.
    pub fn mma(
        &self,
        m: usize,
        n: usize,
        a: BasicValueEnum<'ctx>,
        a_scale: ScaleSel<'k, 'ctx>,
        b: BasicValueEnum<'ctx>,
        b_scale: ScaleSel<'k, 'ctx>,
    ) -> Result<()> {
        let var = &self.acc[m * self.num_n + n];
        let c = self.k.get(var)?;
        let d = self.k.mfma_scale(
            self.shape,
            MfmaOperand {
                data: b,
                format: MxFormat::Fp4,
                scale: b_scale.dword,
                scale_byte: b_scale.byte,
            },
            MfmaOperand {
                data: a,
                format: MxFormat::Fp4,
                scale: a_scale.dword,
                scale_byte: a_scale.byte,
            },
            c,
        )?;
        self.k.set(var, d)
    }

    /// One lane's 16-byte fragment of MMA tile `mma_idx` at K step `k_idx` from a row-major byte
    /// tile in LDS (`[rows, k_bytes]`): `tile` the `[MN, K/2]` sub-tile, `vectorize` 16-byte
    /// groups, and `distribute` them over the lanes column-major `[MN, 64/MN]`.
    pub fn load_frag(
        &self,
        smem: &TileTensor<'k, 'ctx>,
        mma_idx: i64,
        k_idx: i64,
        lane: Int<'k, 'ctx>,
    ) -> Result<BasicValueEnum<'ctx>> {
        let tile = smem.tile(
            &[self.mn(), self.k_bytes_per_mma()],
            &[Idx::Static(mma_idx), Idx::Static(k_idx)],
        )?;
        let threads: Layout = Layout::col_major((self.mn(), 64 / self.mn()));
        let frag = tile.vectorize(&[1, 16])?.distribute(&threads, lane)?;
        frag.load(&Coord::from((0, 0)))
    }

    /// Packed scale dwords for K step `k_idx` from a row-major E8M0 tile in LDS
    /// (`[rows, k_scales]`, this wave's rows starting at `row0`): byte `i` of dword `d` is the
    /// scale of MMA tile `4d + i` for this lane's row (`lane % MN`) and K block (`lane / MN`).
    pub fn load_scales(
        &self,
        scales: &tilegen_dsl::Lds<'ctx>,
        layout: &Layout,
        row0: Idx<Int<'k, 'ctx>>,
        num_mmas: usize,
        k_idx: i64,
        lane: Int<'k, 'ctx>,
    ) -> Result<Vec<Int<'k, 'ctx>>> {
        let k = self.k;
        let dev = crate::gemm::static_layout(layout);
        let row = lane.idx().rem(&Idx::Static(self.mn())).add(&row0);
        let kblk = lane
            .idx()
            .div(&Idx::Static(self.mn()))
            .add(&Idx::Static(k_idx * self.scales_per_mma()));
        let i8t = k.context().i8_type();
        let i32t = k.context().i32_type();
        let mut out = Vec::new();
        for d in 0..num_mmas.div_ceil(4) {
            let mut word = k.i32(0);
            for byte in 0..4.min(num_mmas - 4 * d) {
                let r = row.add(&Idx::Static(((4 * d + byte) as i64) * self.mn()));
                let off = dev.crd2idx(&Coord::from((r, kblk.clone()))).map_err(|e| {
                    tilegen_dsl::DslError::Operand {
                        op: "load_scales",
                        rule: e.to_string(),
                    }
                })?;
                let v = k.lds_load(scales, off.to_value(&k.i32(0)), BasicTypeEnum::from(i8t), 1)?;
                let wide = k
                    .builder()
                    .build_int_z_extend(v.into_int_value(), i32t, "")?;
                let shifted = Int::from_value(k, wide) * (1i64 << (8 * byte));
                word = Int::from_value(k, k.builder().build_or(word.value(), shifted.value(), "")?);
            }
            out.push(word);
        }
        Ok(out)
    }
}
