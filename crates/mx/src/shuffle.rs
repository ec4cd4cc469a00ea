//! `Shuffler`: host-side MXFP4 preshuffle layouts for CDNA4 scaled MFMAs (seed 000).
//!
//! B (`[E, N, K_BYTES]` packed FP4, K-major) is rearranged so that one 16-byte
//! `buffer_load_dwordx4` per lane feeds a 16x16x128 MFMA: within a 1 KiB tile, 16 N-lanes of
//! 16 bytes each form one 256-byte K-lane group, and the four K-lane groups follow. Scales
//! (`[E, MN, K_SCALES]` E8M0) are rearranged so each lane reads one dword holding the 2x2
//! (MN pack, K pack) scales it needs. Both are [`Layout`]s built from the seed's shapes and
//! strides; the copies walk them with a [`CopyPlan`].

use tilegen_layout::{Coord, CopyOrder, CopyPlan, Idx, IndexValue, Layout, WalkError};

use crate::copy::copy_with_plan;
use crate::error::MxError;
use crate::quant::check_len;

/// Host-side preshuffles for `e` groups (experts / sort blocks); `Shuffler::new(1)` for
/// single-group consumers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Shuffler {
    e: usize,
}

fn to_i64(what: &'static str, v: usize) -> Result<i64, MxError> {
    i64::try_from(v).map_err(|_| MxError::SizeOverflow {
        what,
        detail: format!("{v} does not fit in i64"),
    })
}

fn mul(what: &'static str, a: usize, b: usize) -> Result<usize, MxError> {
    a.checked_mul(b).ok_or_else(|| MxError::SizeOverflow {
        what,
        detail: format!("{a} * {b}"),
    })
}

/// `value` must be a positive multiple of `multiple`.
fn positive_multiple(what: &'static str, value: usize, multiple: usize) -> Result<(), MxError> {
    if value == 0 {
        return Err(MxError::Zero { what });
    }
    if !value.is_multiple_of(multiple) {
        return Err(MxError::NotMultiple {
            what,
            value,
            multiple,
        });
    }
    Ok(())
}

impl Shuffler {
    /// Lanes along M/N in one MFMA operand tile.
    pub const MFMA_MN_LANES: usize = 16;
    /// Bytes one lane loads (one `dwordx4`).
    pub const MFMA_LANE_BYTES: usize = 16;
    /// Lane groups along K.
    pub const MFMA_K_LANES: usize = 4;
    /// Packed K bytes one MFMA consumes per row: 64 bytes = 128 FP4 values.
    pub const MFMA_K_BYTES: usize = Self::MFMA_K_LANES * Self::MFMA_LANE_BYTES;
    /// B stride of a byte within a lane's 16.
    pub const B_STRIDE_LANE_BYTES: usize = 1;
    /// B stride between N-lanes.
    pub const B_STRIDE_MN_LANE: usize = Self::MFMA_LANE_BYTES;
    /// B stride between K-lane groups: 16 lanes of 16 bytes.
    pub const B_STRIDE_K_LANE: usize = Self::MFMA_MN_LANES * Self::MFMA_LANE_BYTES;
    /// B stride between consecutive 64-byte K tiles: one 1 KiB MFMA operand tile.
    pub const B_STRIDE_K0: usize = Self::MFMA_K_LANES * Self::B_STRIDE_K_LANE;
    /// Scales packed along M/N in one lane's dword.
    pub const S_MN_PACK: usize = 2;
    /// Scales packed along K in one lane's dword.
    pub const S_K_PACK: usize = 2;
    /// Rows covered by one scale tile (MN is padded to this).
    pub const S_MN_BLOCK: usize = Self::MFMA_MN_LANES * Self::S_MN_PACK;
    /// Scale columns covered by one scale tile (`K_SCALES` must be a multiple).
    pub const S_K_BLOCK: usize = Self::MFMA_K_LANES * Self::S_K_PACK;
    /// Scale stride between M/N lanes: one dword per lane.
    pub const S_STRIDE_MN_LANE: usize = 4;
    /// Scale stride of the M/N pack within a dword.
    pub const S_STRIDE_MN_PACK: usize = 1;
    /// Scale stride of the K pack within a dword.
    pub const S_STRIDE_K_PACK: usize = 2;
    /// Scale stride between K lane groups: 16 lanes of one dword.
    pub const S_STRIDE_K_LANE: usize = Self::MFMA_MN_LANES * Self::S_STRIDE_MN_LANE;
    /// Scale stride between consecutive scale tiles along K (256 bytes).
    pub const S_STRIDE_K0: usize = Self::MFMA_K_LANES * Self::S_STRIDE_K_LANE;

    /// A shuffler for `e >= 1` groups.
    pub fn new(e: usize) -> Result<Self, MxError> {
        if e == 0 {
            return Err(MxError::Zero { what: "e (groups)" });
        }
        Ok(Shuffler { e })
    }

    /// The number of groups.
    pub fn e(&self) -> usize {
        self.e
    }

    /// MN rounded up to the 32-row scale tile ([`S_MN_BLOCK`](Self::S_MN_BLOCK)).
    pub fn scale_padded_mn(mn: usize) -> Result<usize, MxError> {
        mn.checked_next_multiple_of(Self::S_MN_BLOCK)
            .ok_or_else(|| MxError::SizeOverflow {
                what: "scale_padded_mn",
                detail: format!("{mn} rounded up to a multiple of {}", Self::S_MN_BLOCK),
            })
    }

    /// Bytes of a B buffer, `E * N * K_BYTES` (both layouts of B have this size).
    pub fn b_len(&self, n: usize, k_bytes: usize) -> Result<usize, MxError> {
        mul(
            "E * N * K_BYTES",
            mul("E * N * K_BYTES", self.e, n)?,
            k_bytes,
        )
    }

    /// Bytes of a preshuffled scale buffer, `E * scale_padded_mn(MN) * K_SCALES`.
    pub fn scale_len(&self, mn: usize, k_scales: usize) -> Result<usize, MxError> {
        let padded = Self::scale_padded_mn(mn)?;
        mul(
            "E * MN_padded * K_SCALES",
            mul("E * MN_padded * K_SCALES", self.e, padded)?,
            k_scales,
        )
    }

    fn check_b(&self, n: usize, k_bytes: usize) -> Result<usize, MxError> {
        positive_multiple("n", n, Self::MFMA_MN_LANES)?;
        positive_multiple("k_bytes", k_bytes, Self::MFMA_K_BYTES)?;
        let len = self.b_len(n, k_bytes)?;
        to_i64("E * N * K_BYTES", len)?;
        Ok(len)
    }

    /// The 5-D B layout over the domain `(E, (16, N/16), (16, 4, K_BYTES/64))`:
    /// `(e, (n_lane, n_tile), (byte, k_lane, k_tile))` to a byte offset. N must be a positive
    /// multiple of 16 and K_BYTES of 64.
    pub fn b_5d_grouped_layout(&self, n: usize, k_bytes: usize) -> Result<Layout, MxError> {
        self.check_b(n, k_bytes)?;
        Ok(Self::b_5d_layout(
            Idx::Static(self.e as i64),
            Idx::Static(n as i64),
            Idx::Static(k_bytes as i64),
        ))
    }

    /// [`b_5d_grouped_layout`](Self::b_5d_grouped_layout) over any index integer: the kernel
    /// builder evaluates this same layout with run-time N and K_BYTES, so the device loads and
    /// the host preshuffle cannot drift apart. No checks: callers guarantee the divisibility.
    pub fn b_5d_layout<T: IndexValue>(e: Idx<T>, n: Idx<T>, k_bytes: Idx<T>) -> Layout<T> {
        let c = |v: usize| Idx::<T>::Static(v as i64);
        let k_tiles = k_bytes.div(&c(Self::MFMA_K_BYTES));
        let shape = Coord::from((
            e,
            (c(Self::MFMA_MN_LANES), n.div(&c(Self::MFMA_MN_LANES))),
            (
                c(Self::MFMA_LANE_BYTES),
                c(Self::MFMA_K_LANES),
                k_tiles.clone(),
            ),
        ));
        let stride = Coord::from((
            n.mul(&k_bytes),
            (
                c(Self::B_STRIDE_MN_LANE),
                k_tiles.mul(&c(Self::B_STRIDE_K0)),
            ),
            (
                c(Self::B_STRIDE_LANE_BYTES),
                c(Self::B_STRIDE_K_LANE),
                c(Self::B_STRIDE_K0),
            ),
        ));
        Layout::new(shape, stride).expect("shape and stride are built with the same nesting")
    }

    fn check_scale(&self, mn_padded: usize, k_scales: usize) -> Result<usize, MxError> {
        positive_multiple("mn_padded", mn_padded, Self::S_MN_BLOCK)?;
        positive_multiple("k_scales", k_scales, Self::S_K_BLOCK)?;
        let len = mul(
            "E * MN_padded * K_SCALES",
            mul("E * MN_padded * K_SCALES", self.e, mn_padded)?,
            k_scales,
        )?;
        to_i64("E * MN_padded * K_SCALES", len)?;
        Ok(len)
    }

    /// The 4-D scale layout over `(E, (16, 2, MN_padded/32), (4, 2, K_SCALES/8))`:
    /// `(e, (mn_lane, mn_pack, mn_tile), (k_lane, k_pack, k_tile))` to a byte offset.
    /// MN_padded must be a positive multiple of 32 and K_SCALES of 8.
    pub fn scale_4d_grouped_layout(
        &self,
        mn_padded: usize,
        k_scales: usize,
    ) -> Result<Layout, MxError> {
        self.check_scale(mn_padded, k_scales)?;
        Ok(Self::scale_4d_layout(
            Idx::Static(self.e as i64),
            Idx::Static(mn_padded as i64),
            Idx::Static(k_scales as i64),
        ))
    }

    /// [`scale_4d_grouped_layout`](Self::scale_4d_grouped_layout) over any index integer (see
    /// [`b_5d_layout`](Self::b_5d_layout)).
    pub fn scale_4d_layout<T: IndexValue>(
        e: Idx<T>,
        mn_padded: Idx<T>,
        k_scales: Idx<T>,
    ) -> Layout<T> {
        let c = |v: usize| Idx::<T>::Static(v as i64);
        let k_tiles = k_scales.div(&c(Self::S_K_BLOCK));
        let shape = Coord::from((
            e,
            (
                c(Self::MFMA_MN_LANES),
                c(Self::S_MN_PACK),
                mn_padded.div(&c(Self::S_MN_BLOCK)),
            ),
            (c(Self::MFMA_K_LANES), c(Self::S_K_PACK), k_tiles.clone()),
        ));
        let stride = Coord::from((
            mn_padded.mul(&k_scales),
            (
                c(Self::S_STRIDE_MN_LANE),
                c(Self::S_STRIDE_MN_PACK),
                k_tiles.mul(&c(Self::S_STRIDE_K0)),
            ),
            (
                c(Self::S_STRIDE_K_LANE),
                c(Self::S_STRIDE_K_PACK),
                c(Self::S_STRIDE_K0),
            ),
        ));
        Layout::new(shape, stride).expect("shape and stride are built with the same nesting")
    }

    /// Row-major `[E, rows, cols]` over the domain of `shuffled`: an index `(e, r, c)` of the
    /// 3-D tensor splits into `shuffled`'s nested modes colexicographically, which is exactly
    /// the row-major layout composed with the compact map from `shuffled`'s coordinates to 1-D
    /// indices.
    fn row_major_over(
        &self,
        shuffled: &Layout,
        rows: usize,
        cols: usize,
    ) -> Result<Layout, MxError> {
        let rm = Layout::row_major((self.e as i64, rows as i64, cols as i64));
        rm.compose(&Layout::col_major(shuffled.shape().clone()))
            .map_err(|e| WalkError::from(e).into())
    }

    /// The copy plans (row-major -> shuffled, shuffled -> row-major) between `shuffled` and
    /// row-major `[E, rows, cols]`. Both walk in the shuffled layout's order: it keeps 16 rows'
    /// lanes together, so the row-major side advances 16 rows in lock-step and finishes each
    /// cache line within a few steps (about 1.5x faster than the row-major order, measured).
    fn plans(
        &self,
        shuffled: &Layout,
        rows: usize,
        cols: usize,
    ) -> Result<(CopyPlan, CopyPlan), MxError> {
        let rm = self.row_major_over(shuffled, rows, cols)?;
        Ok((
            CopyPlan::with_order(&rm, shuffled, CopyOrder::Destination)?,
            CopyPlan::with_order(shuffled, &rm, CopyOrder::Source)?,
        ))
    }

    fn b_plans(&self, n: usize, k_bytes: usize) -> Result<(CopyPlan, CopyPlan), MxError> {
        self.plans(&self.b_5d_grouped_layout(n, k_bytes)?, n, k_bytes)
    }

    /// Preshuffles B: `src` is `[E, N, K_BYTES]` row-major packed FP4 (K_BYTES = K / 2), `dst`
    /// receives the 5-D layout: `dst[L(e, n, kb)] = src[e, n, kb]`. Both buffers must hold
    /// exactly `E * N * K_BYTES` bytes.
    pub fn preshuffle_b_5d(
        &self,
        n: usize,
        k_bytes: usize,
        src: &[u8],
        dst: &mut [u8],
    ) -> Result<(), MxError> {
        let len = self.check_b(n, k_bytes)?;
        check_len("src", len, src.len())?;
        check_len("dst", len, dst.len())?;
        copy_with_plan(&self.b_plans(n, k_bytes)?.0, src, dst)
    }

    /// The inverse of [`preshuffle_b_5d`](Self::preshuffle_b_5d): `src` in the 5-D layout,
    /// `dst` row-major `[E, N, K_BYTES]`.
    pub fn unshuffle_b_5d(
        &self,
        n: usize,
        k_bytes: usize,
        src: &[u8],
        dst: &mut [u8],
    ) -> Result<(), MxError> {
        let len = self.check_b(n, k_bytes)?;
        check_len("src", len, src.len())?;
        check_len("dst", len, dst.len())?;
        copy_with_plan(&self.b_plans(n, k_bytes)?.1, src, dst)
    }

    /// Shared checks of the scale preshuffle: `(padded MN, row-major length, shuffled length)`.
    fn check_scale_io(&self, mn: usize, k_scales: usize) -> Result<(usize, usize, usize), MxError> {
        if mn == 0 {
            return Err(MxError::Zero { what: "mn" });
        }
        let padded = Self::scale_padded_mn(mn)?;
        let shuffled_len = self.check_scale(padded, k_scales)?;
        // mn <= padded, so this cannot overflow once the padded size did not.
        let row_major_len = self.e * mn * k_scales;
        Ok((padded, row_major_len, shuffled_len))
    }

    fn scale_plans(&self, padded: usize, k_scales: usize) -> Result<(CopyPlan, CopyPlan), MxError> {
        self.plans(
            &self.scale_4d_grouped_layout(padded, k_scales)?,
            padded,
            k_scales,
        )
    }

    /// Preshuffles E8M0 scales: `src` is `[E, MN, K_SCALES]` row-major (K_SCALES = K / 32, a
    /// multiple of 8), `dst` is `E * scale_padded_mn(MN) * K_SCALES` bytes in the 4-D layout.
    /// Rows `MN..MN_padded` of each group are zero-filled.
    pub fn preshuffle_scale_4d(
        &self,
        mn: usize,
        k_scales: usize,
        src: &[u8],
        dst: &mut [u8],
    ) -> Result<(), MxError> {
        let (padded, rm_len, sh_len) = self.check_scale_io(mn, k_scales)?;
        check_len("src", rm_len, src.len())?;
        check_len("dst", sh_len, dst.len())?;
        let plan = self.scale_plans(padded, k_scales)?.0;
        if padded == mn {
            return copy_with_plan(&plan, src, dst);
        }
        // The layout's domain is the padded one: pad the source with zero rows first. Scales
        // are ~1/32 of the FP4 data, so the extra pass is cheap.
        let mut padded_src = vec![0u8; sh_len];
        for (from, to) in src
            .chunks_exact(mn * k_scales)
            .zip(padded_src.chunks_exact_mut(padded * k_scales))
        {
            to[..from.len()].copy_from_slice(from);
        }
        copy_with_plan(&plan, &padded_src, dst)
    }

    /// The inverse of [`preshuffle_scale_4d`](Self::preshuffle_scale_4d): `src` in the 4-D
    /// layout (`E * scale_padded_mn(MN) * K_SCALES` bytes), `dst` row-major `[E, MN, K_SCALES]`;
    /// pad rows are dropped.
    pub fn unshuffle_scale_4d(
        &self,
        mn: usize,
        k_scales: usize,
        src: &[u8],
        dst: &mut [u8],
    ) -> Result<(), MxError> {
        let (padded, rm_len, sh_len) = self.check_scale_io(mn, k_scales)?;
        check_len("src", sh_len, src.len())?;
        check_len("dst", rm_len, dst.len())?;
        let plan = self.scale_plans(padded, k_scales)?.1;
        if padded == mn {
            return copy_with_plan(&plan, src, dst);
        }
        let mut padded_dst = vec![0u8; sh_len];
        copy_with_plan(&plan, src, &mut padded_dst)?;
        for (from, to) in padded_dst
            .chunks_exact(padded * k_scales)
            .zip(dst.chunks_exact_mut(mn * k_scales))
        {
            to.copy_from_slice(&from[..to.len()]);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use rand::rngs::Xoshiro256PlusPlus;
    use rand::{RngExt, SeedableRng};

    type S = Shuffler;

    fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
        let mut v = vec![0u8; len];
        Xoshiro256PlusPlus::seed_from_u64(seed).fill(&mut v[..]);
        v
    }

    /// The seed's B strides written out per element.
    fn b_offset(n_total: usize, kb_total: usize, e: usize, n: usize, kb: usize) -> usize {
        e * n_total * kb_total
            + (n % 16) * 16
            + (n / 16) * (kb_total / 64) * 1024
            + kb % 16
            + ((kb / 16) % 4) * 256
            + (kb / 64) * 1024
    }

    /// The seed's scale strides written out per element.
    fn s_offset(mn_padded: usize, ks_total: usize, e: usize, mn: usize, ks: usize) -> usize {
        e * mn_padded * ks_total
            + (mn % 16) * 4
            + ((mn / 16) % 2)
            + (mn / 32) * (ks_total / 8) * 256
            + (ks % 4) * 64
            + ((ks / 4) % 2) * 2
            + (ks / 8) * 256
    }

    fn b_by_formula(e: usize, n: usize, kb: usize, src: &[u8]) -> Vec<u8> {
        let mut out = vec![0u8; src.len()];
        for g in 0..e {
            for r in 0..n {
                for c in 0..kb {
                    out[b_offset(n, kb, g, r, c)] = src[(g * n + r) * kb + c];
                }
            }
        }
        out
    }

    fn s_by_formula(e: usize, mn: usize, ks: usize, src: &[u8]) -> Vec<u8> {
        let padded = mn.next_multiple_of(32);
        let mut out = vec![0u8; e * padded * ks];
        for g in 0..e {
            for r in 0..mn {
                for c in 0..ks {
                    out[s_offset(padded, ks, g, r, c)] = src[(g * mn + r) * ks + c];
                }
            }
        }
        out
    }

    #[test]
    fn constants_follow_the_seed() {
        assert_eq!(S::MFMA_MN_LANES, 16);
        assert_eq!(S::MFMA_LANE_BYTES, 16);
        assert_eq!(S::MFMA_K_LANES, 4);
        assert_eq!(S::MFMA_K_BYTES, S::MFMA_K_LANES * S::MFMA_LANE_BYTES);
        assert_eq!(S::MFMA_K_BYTES, 64);
        assert_eq!(S::B_STRIDE_LANE_BYTES, 1);
        assert_eq!(S::B_STRIDE_MN_LANE, S::MFMA_LANE_BYTES);
        assert_eq!(S::B_STRIDE_K_LANE, S::MFMA_MN_LANES * S::MFMA_LANE_BYTES);
        assert_eq!(S::B_STRIDE_K_LANE, 256);
        assert_eq!(S::B_STRIDE_K0, S::MFMA_K_LANES * S::B_STRIDE_K_LANE);
        assert_eq!(S::B_STRIDE_K0, 1024);
        assert_eq!(S::S_MN_PACK, 2);
        assert_eq!(S::S_K_PACK, 2);
        assert_eq!(S::S_MN_BLOCK, S::MFMA_MN_LANES * S::S_MN_PACK);
        assert_eq!(S::S_MN_BLOCK, 32);
        assert_eq!(S::S_K_BLOCK, S::MFMA_K_LANES * S::S_K_PACK);
        assert_eq!(S::S_K_BLOCK, 8);
        assert_eq!(S::S_STRIDE_MN_LANE, 4);
        assert_eq!(S::S_STRIDE_MN_PACK, 1);
        assert_eq!(S::S_STRIDE_K_PACK, 2);
        assert_eq!(S::S_STRIDE_K_LANE, S::MFMA_MN_LANES * S::S_STRIDE_MN_LANE);
        assert_eq!(S::S_STRIDE_K_LANE, 64);
        assert_eq!(S::S_STRIDE_K0, S::MFMA_K_LANES * S::S_STRIDE_K_LANE);
        assert_eq!(S::S_STRIDE_K0, 256);
    }

    #[test]
    fn layouts_display_like_the_seed() {
        let s = Shuffler::new(2).unwrap();
        assert_eq!(
            s.b_5d_grouped_layout(32, 128).unwrap().to_string(),
            "(2,(16,2),(16,4,2)):(4096,(16,2048),(1,256,1024))"
        );
        assert_eq!(
            s.scale_4d_grouped_layout(64, 16).unwrap().to_string(),
            "(2,(16,2,2),(4,2,2)):(1024,(4,1,512),(64,2,256))"
        );
    }

    #[test]
    fn layouts_are_the_seed_formulas() {
        let s = Shuffler::new(3).unwrap();
        let (n, kb) = (48, 192);
        let l = s.b_5d_grouped_layout(n, kb).unwrap();
        for (e, r, c) in [(0, 0, 0), (2, 47, 191), (1, 17, 70), (2, 33, 130)] {
            let idx = l
                .crd2idx(&Coord::from((e as i64, r as i64, c as i64)))
                .unwrap();
            assert_eq!(idx.static_value(), Some(b_offset(n, kb, e, r, c) as i64));
        }
        let (mn, ks) = (96, 24);
        let l = s.scale_4d_grouped_layout(mn, ks).unwrap();
        for (e, r, c) in [(0, 0, 0), (2, 95, 23), (1, 49, 13), (0, 31, 8)] {
            let idx = l
                .crd2idx(&Coord::from((e as i64, r as i64, c as i64)))
                .unwrap();
            assert_eq!(idx.static_value(), Some(s_offset(mn, ks, e, r, c) as i64));
        }
    }

    #[test]
    fn padded_mn() {
        assert_eq!(S::scale_padded_mn(0).unwrap(), 0);
        assert_eq!(S::scale_padded_mn(1).unwrap(), 32);
        assert_eq!(S::scale_padded_mn(32).unwrap(), 32);
        assert_eq!(S::scale_padded_mn(33).unwrap(), 64);
        assert!(matches!(
            S::scale_padded_mn(usize::MAX),
            Err(MxError::SizeOverflow { .. })
        ));
    }

    #[test]
    fn preshuffle_b_matches_the_formula() {
        let (e, n, kb) = (2, 48, 192);
        let s = Shuffler::new(e).unwrap();
        let src = random_bytes(e * n * kb, 5);
        let mut dst = vec![0u8; src.len()];
        s.preshuffle_b_5d(n, kb, &src, &mut dst).unwrap();
        assert_eq!(dst, b_by_formula(e, n, kb, &src));
        let mut back = vec![0u8; src.len()];
        s.unshuffle_b_5d(n, kb, &dst, &mut back).unwrap();
        assert_eq!(back, src);
    }

    #[test]
    fn preshuffle_b_at_a_parallel_size() {
        // Large enough that the copy splits into several rayon tasks.
        let (e, n, kb) = (1, 256, 1024);
        let s = Shuffler::new(e).unwrap();
        let src = random_bytes(e * n * kb, 6);
        let mut dst = vec![0u8; src.len()];
        s.preshuffle_b_5d(n, kb, &src, &mut dst).unwrap();
        assert_eq!(dst, b_by_formula(e, n, kb, &src));
    }

    #[test]
    fn preshuffle_scale_matches_the_formula_and_zero_pads() {
        for (e, mn, ks) in [(1, 64, 16), (3, 40, 8), (2, 7, 24)] {
            let s = Shuffler::new(e).unwrap();
            let src = random_bytes(e * mn * ks, 7);
            let len = s.scale_len(mn, ks).unwrap();
            let mut dst = vec![0xAAu8; len];
            s.preshuffle_scale_4d(mn, ks, &src, &mut dst).unwrap();
            assert_eq!(dst, s_by_formula(e, mn, ks, &src), "e={e} mn={mn} ks={ks}");
            let mut back = vec![0u8; src.len()];
            s.unshuffle_scale_4d(mn, ks, &dst, &mut back).unwrap();
            assert_eq!(back, src);
        }
    }

    #[test]
    fn every_error_names_value_and_rule() {
        assert_eq!(Shuffler::new(0), Err(MxError::Zero { what: "e (groups)" }));
        let s = Shuffler::new(2).unwrap();
        let e = s.b_5d_grouped_layout(24, 64).unwrap_err();
        assert_eq!(
            e,
            MxError::NotMultiple {
                what: "n",
                value: 24,
                multiple: 16
            }
        );
        assert_eq!(e.to_string(), "n = 24 must be a multiple of 16");
        assert_eq!(
            s.b_5d_grouped_layout(16, 96).unwrap_err(),
            MxError::NotMultiple {
                what: "k_bytes",
                value: 96,
                multiple: 64
            }
        );
        assert_eq!(
            s.b_5d_grouped_layout(0, 64).unwrap_err(),
            MxError::Zero { what: "n" }
        );
        assert_eq!(
            s.b_5d_grouped_layout(16, 0).unwrap_err(),
            MxError::Zero { what: "k_bytes" }
        );
        assert!(matches!(
            s.b_5d_grouped_layout(1 << 40, 1 << 40),
            Err(MxError::SizeOverflow { .. })
        ));
        assert_eq!(
            s.scale_4d_grouped_layout(48, 8).unwrap_err(),
            MxError::NotMultiple {
                what: "mn_padded",
                value: 48,
                multiple: 32
            }
        );
        assert_eq!(
            s.scale_4d_grouped_layout(32, 12).unwrap_err(),
            MxError::NotMultiple {
                what: "k_scales",
                value: 12,
                multiple: 8
            }
        );
        assert_eq!(
            s.scale_4d_grouped_layout(0, 8).unwrap_err(),
            MxError::Zero { what: "mn_padded" }
        );
        let mut dst = vec![0u8; 2 * 16 * 64];
        assert_eq!(
            s.preshuffle_b_5d(16, 64, &dst.clone()[1..], &mut dst),
            Err(MxError::LengthMismatch {
                what: "src",
                expected: 2048,
                actual: 2047
            })
        );
        let src = dst.clone();
        assert_eq!(
            s.unshuffle_b_5d(16, 64, &src, &mut dst[..100]),
            Err(MxError::LengthMismatch {
                what: "dst",
                expected: 2048,
                actual: 100
            })
        );
        assert_eq!(
            s.preshuffle_scale_4d(0, 8, &[], &mut []),
            Err(MxError::Zero { what: "mn" })
        );
        assert_eq!(
            s.preshuffle_scale_4d(20, 8, &[0; 320], &mut [0; 100]),
            Err(MxError::LengthMismatch {
                what: "dst",
                expected: 512,
                actual: 100
            })
        );
        assert_eq!(
            s.unshuffle_scale_4d(20, 8, &[0; 511], &mut [0; 320]),
            Err(MxError::LengthMismatch {
                what: "src",
                expected: 512,
                actual: 511
            })
        );
        assert_eq!(
            s.preshuffle_scale_4d(20, 4, &[0; 160], &mut [0; 256]),
            Err(MxError::NotMultiple {
                what: "k_scales",
                value: 4,
                multiple: 8
            })
        );
        assert!(matches!(
            s.scale_len(usize::MAX, 8),
            Err(MxError::SizeOverflow { .. })
        ));
        assert!(matches!(
            s.b_len(usize::MAX, 64),
            Err(MxError::SizeOverflow { .. })
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]

        #[test]
        fn b_round_trips_and_matches_formula(
            e in 1usize..=3, n16 in 1usize..=5, kb64 in 1usize..=5, seed in any::<u64>()
        ) {
            let (n, kb) = (16 * n16, 64 * kb64);
            let s = Shuffler::new(e).unwrap();
            let src = random_bytes(e * n * kb, seed);
            let mut dst = vec![0u8; src.len()];
            s.preshuffle_b_5d(n, kb, &src, &mut dst).unwrap();
            prop_assert_eq!(&dst, &b_by_formula(e, n, kb, &src));
            let mut back = vec![0u8; src.len()];
            s.unshuffle_b_5d(n, kb, &dst, &mut back).unwrap();
            prop_assert_eq!(back, src);
        }

        #[test]
        fn scales_round_trip_and_match_formula(
            e in 1usize..=3, mn in 1usize..=100, ks8 in 1usize..=4, seed in any::<u64>()
        ) {
            let ks = 8 * ks8;
            let s = Shuffler::new(e).unwrap();
            let src = random_bytes(e * mn * ks, seed);
            let mut dst = vec![0u8; s.scale_len(mn, ks).unwrap()];
            s.preshuffle_scale_4d(mn, ks, &src, &mut dst).unwrap();
            prop_assert_eq!(&dst, &s_by_formula(e, mn, ks, &src));
            let mut back = vec![0u8; src.len()];
            s.unshuffle_scale_4d(mn, ks, &dst, &mut back).unwrap();
            prop_assert_eq!(back, src);
        }
    }
}
