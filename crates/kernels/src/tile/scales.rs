//! Preshuffled E8M0 scale fragments, shared by the preshuffled-B GEMM and the grouped MoE
//! GEMMs: the views of a scale tensor in the Shuffler's 4D layout, the dwords a lane loads for a
//! stage and the byte each MMA tile and K step selects.

use tilegen_dsl::{Buffer, DevIdx, Int, Kernel, Result, Storage, TileTensor, Ty, split_strides};
use tilegen_layout::{Coord, Idx, Layout};
use tilegen_mx::Shuffler;

use super::atom::ScaleSel;

/// One operand's preshuffled scales, as two views of the same layout split at dword
/// granularity: `dwords` addresses the dword a lane loads, `bytes` (no memory) the byte within
/// it that the MFMA's `op_sel` (or a shift) picks.
pub(crate) struct Scales<'k, 'ctx> {
    dwords: TileTensor<'k, 'ctx>,
    bytes: TileTensor<'k, 'ctx>,
}

/// A lane's scale fragments for one stage: which dword each MMA tile and K step reads.
pub(crate) struct ScaleFrags<'k, 'ctx> {
    dwords: TileTensor<'k, 'ctx>,
    bytes: TileTensor<'k, 'ctx>,
    /// Distinct dwords in load order, as `(tile, step)` of their first reader.
    loads: Vec<(i64, i64)>,
    /// For `(tile, step)`: its dword's index in `loads`.
    slot: Vec<Vec<usize>>,
}

impl<'k, 'ctx> Scales<'k, 'ctx> {
    /// The view of scale tensor `buf` in the Shuffler's layout over `mn_padded` rows.
    pub(crate) fn new(
        k: &'k Kernel<'ctx>,
        buf: Buffer<'ctx>,
        mn_padded: Int<'k, 'ctx>,
        ks: Int<'k, 'ctx>,
    ) -> Result<Self> {
        let l = Shuffler::scale_4d_layout(Idx::Static(1), mn_padded.idx(), ks.idx());
        // `(rows, k_blocks)`: the layout without its group mode.
        let rows_k = Layout::from_modes(vec![l.mode(1)?, l.mode(2)?]);
        let (words, within) = split_strides(&rows_k, 4)?;
        Ok(Scales {
            dwords: TileTensor::new(k, Storage::Global(buf), words),
            bytes: TileTensor::index(k, within),
        })
    }

    /// A lane's fragments for stage `t` of `k_blocks` K blocks, of the wave's rows `rows`.
    pub(crate) fn fragments(
        &self,
        sf: impl Fn(&TileTensor<'k, 'ctx>) -> Result<TileTensor<'k, 'ctx>>,
        rows: Rows<'k, 'ctx>,
        k_blocks: i64,
        t: Int<'k, 'ctx>,
    ) -> Result<ScaleFrags<'k, 'ctx>> {
        let at = |v: &TileTensor<'k, 'ctx>| sf(&rows.of(v, k_blocks, t)?);
        let (dwords, bytes) = (at(&self.dwords)?, at(&self.bytes)?);
        // Two (tile, step) pairs read the same dword when they differ only along leaves that
        // move within it: number the others compactly and compare.
        let shape = dwords.layout().shape().clone();
        let moves: Vec<bool> = dwords
            .layout()
            .leaf_modes()
            .iter()
            .map(|(_, d)| !d.is(0))
            .collect();
        let mut size = 1;
        let mut i = 0;
        let key_stride = shape.map(&mut |s| {
            i += 1;
            let d = if moves[i - 1] { size } else { 0 };
            size *= s.static_value().unwrap_or(1);
            Idx::Static(d)
        });
        let key = Layout::new(shape, key_stride)?;
        let [_, tiles, steps] = [0, 1, 2].map(|m| {
            dwords
                .layout()
                .mode(m)
                .map(|l| l.size().static_value().unwrap_or(0))
        });
        let (tiles, steps) = (tiles?, steps?);
        let mut keys = Vec::new();
        let mut loads = Vec::new();
        let mut slot = vec![vec![0; steps as usize]; tiles as usize];
        for kk in 0..steps {
            for i in 0..tiles {
                let key = key.crd2idx(&Coord::from((0, i, kk)))?.static_value();
                let at = keys.iter().position(|&k| k == key).unwrap_or_else(|| {
                    keys.push(key);
                    loads.push((i, kk));
                    keys.len() - 1
                });
                slot[i as usize][kk as usize] = at;
            }
        }
        Ok(ScaleFrags {
            dwords,
            bytes,
            loads,
            slot,
        })
    }
}

/// A lane's scale fragments for one pipeline stage, whatever their layout: the dwords to
/// load, and the byte of a loaded dword each MMA tile and K step uses.
///
/// Loading is split in two so a pipeline can issue a stage's loads a tile ahead and use them
/// later: [`ScaleFragments::issue`] only loads, [`ScaleFragments::finish`] does the per-lane
/// arithmetic on the loaded dwords, which would otherwise wait for the loads where they are
/// issued.
pub(crate) trait ScaleFragments<'k, 'ctx> {
    /// Issues the loads of the dwords this stage needs.
    fn issue(&self, k: &'k Kernel<'ctx>) -> Result<Vec<Int<'k, 'ctx>>>;
    /// The dwords [`ScaleFragments::select`] reads, from those `issue` loaded.
    fn finish(&self, k: &'k Kernel<'ctx>, raw: Vec<Int<'k, 'ctx>>) -> Result<Vec<Int<'k, 'ctx>>>;
    /// How many dwords `issue` loads.
    fn dwords(&self) -> usize;
    /// The scale of MMA tile `i` at K step `kk` from the loaded `dwords`.
    fn select(&self, dwords: &[Int<'k, 'ctx>], i: usize, kk: usize) -> Result<ScaleSel<'k, 'ctx>>;
}

impl<'k, 'ctx> ScaleFrags<'k, 'ctx> {
    fn lane_byte(&self) -> Result<DevIdx<'k, 'ctx>> {
        Ok(self.bytes.offset_parts(&Coord::from((0, 0, 0)))?.1)
    }
}

impl<'k, 'ctx> ScaleFragments<'k, 'ctx> for ScaleFrags<'k, 'ctx> {
    fn dwords(&self) -> usize {
        self.loads.len()
    }

    /// Loads the distinct dwords.
    fn issue(&self, k: &'k Kernel<'ctx>) -> Result<Vec<Int<'k, 'ctx>>> {
        self.loads
            .iter()
            .map(|&(i, kk)| {
                self.dwords
                    .load_as(&Coord::from((0, i, kk)), Ty::I32)?
                    .int(k)
            })
            .collect()
    }

    /// A byte offset that is the lane's own (a 32-row MMA tile's lanes span both 16-row
    /// halves of a dword) is shifted out here, once per dword.
    fn finish(&self, _k: &'k Kernel<'ctx>, raw: Vec<Int<'k, 'ctx>>) -> Result<Vec<Int<'k, 'ctx>>> {
        let lane_byte = self.lane_byte()?;
        Ok(match lane_byte.static_value() {
            Some(_) => raw,
            None => raw
                .into_iter()
                .map(|v| shift_bytes(v, &lane_byte))
                .collect(),
        })
    }

    /// The scale of MMA tile `i` at K step `kk` from the loaded `dwords`: a byte known at
    /// generation time goes to `op_sel`; a run-time one (a 16-row tile in either half of its
    /// pair, a one-step stage in either K half) is shifted down to byte 0.
    fn select(&self, dwords: &[Int<'k, 'ctx>], i: usize, kk: usize) -> Result<ScaleSel<'k, 'ctx>> {
        let dword = dwords[self.slot[i][kk]];
        let (base, _, fixed, rest) = self
            .bytes
            .offset_parts(&Coord::from((0, i as i64, kk as i64)))?;
        let mut byte = base.add(&rest).add(&Idx::Static(fixed));
        let lane_byte = self.lane_byte()?;
        if lane_byte.is_static() {
            byte = byte.add(&lane_byte);
        }
        Ok(match byte.static_value() {
            Some(b) => ScaleSel {
                dword,
                byte: b as u32,
            },
            None => ScaleSel {
                dword: shift_bytes(dword, &byte),
                byte: 0,
            },
        })
    }
}

/// `v >> 8 * bytes`.
fn shift_bytes<'k, 'ctx>(v: Int<'k, 'ctx>, bytes: &DevIdx<'k, 'ctx>) -> Int<'k, 'ctx> {
    v.idx().shr(&bytes.mul(&Idx::Static(8))).to_value(&v)
}

/// A wave's rows of an operand: row tile `tile` of `rows` rows.
#[derive(Clone, Copy)]
pub(crate) struct Rows<'k, 'ctx> {
    pub(crate) rows: i64,
    pub(crate) tile: Int<'k, 'ctx>,
}

impl<'k, 'ctx> Rows<'k, 'ctx> {
    /// These rows of `view` (`(rows, K)`), K tile `t` of `cols` columns.
    pub(crate) fn of(
        &self,
        view: &TileTensor<'k, 'ctx>,
        cols: i64,
        t: Int<'k, 'ctx>,
    ) -> Result<TileTensor<'k, 'ctx>> {
        view.tile(&[self.rows, cols], &[self.tile.idx(), t.idx()])
    }
}
