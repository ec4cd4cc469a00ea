//! The A operand of the gate/up kernel: the token rows of one sorted block, gathered.
//!
//! Row `r` of block `b` is (token, slot) pair `p = sorted_ids[b * BM + r]`, token `p / topk`;
//! padding rows hold `p = tokens * topk`, whose token is one past the last, so its loads fall
//! out of the buffer's range and read zeros. Every lane's rows are fixed for the whole K loop,
//! so their token ids are loaded once, before it: one per staging round (the rows a lane copies
//! into LDS) and one per MMA tile row (the rows whose scales a lane feeds the MFMA).
//!
//! Tokens' scales are row-major `[tokens, K / 32]`, as a previous layer's quantization writes
//! them; a lane's scale for an MMA tile and K step is one byte of a dword it loads, shifted down
//! by that byte's (run-time) place.

use tilegen_dsl::{
    Buffer, DslError, Int, Kernel, Lds, Result, TileTensor, Ty, dev_layout, split_strides,
};
use tilegen_layout::{Coord, Idx, Layout};

use crate::gemm::PrebSpec;
use crate::gemm::common;
use crate::gemm::preb::{AOperand, Mainloop};
use crate::tile::atom::{SCALE_BLOCK, ScaleSel};
use crate::tile::mma::BlockScaledMmaOp;
use crate::tile::scales::ScaleFragments;
use crate::tile::stage::{PendingWrites, Threads};

/// Where a block's pair ids are read.
#[derive(Clone, Copy)]
enum RowSource<'ctx> {
    /// The sorted layout in global memory, `[blocks, bm]`.
    Global(Buffer<'ctx>),
    /// The workgroup's block alone in LDS, `[bm]`.
    Lds(Lds<'ctx>),
}

/// The sorted block layout on the device: pair ids of the workgroup's block.
#[derive(Clone, Copy)]
pub(crate) struct SortedRows<'k, 'ctx> {
    k: &'k Kernel<'ctx>,
    ids: RowSource<'ctx>,
    /// The workgroup's block.
    block: Int<'k, 'ctx>,
    /// Rows per block.
    bm: i64,
    /// Experts per token.
    topk: Int<'k, 'ctx>,
}

impl<'k, 'ctx> SortedRows<'k, 'ctx> {
    /// Block `block` of `ids` (`[blocks, bm]` pair ids, 4 bytes each).
    pub(crate) fn new(
        k: &'k Kernel<'ctx>,
        ids: Buffer<'ctx>,
        block: Int<'k, 'ctx>,
        bm: i64,
        topk: Int<'k, 'ctx>,
    ) -> Self {
        SortedRows {
            k,
            ids: RowSource::Global(ids),
            block,
            bm,
            topk,
        }
    }

    /// The workgroup's block (`block`) alone, `[bm]` pair ids (4 bytes each) in `rows`.
    pub(crate) fn in_lds(
        k: &'k Kernel<'ctx>,
        rows: Lds<'ctx>,
        block: Int<'k, 'ctx>,
        bm: i64,
        topk: Int<'k, 'ctx>,
    ) -> Self {
        SortedRows {
            k,
            ids: RowSource::Lds(rows),
            block,
            bm,
            topk,
        }
    }

    /// The pair id of row `row` (per lane) of the block.
    pub(crate) fn pair(&self, row: Int<'k, 'ctx>) -> Result<Int<'k, 'ctx>> {
        let k = self.k;
        // (block, row) -> byte: the block's start is uniform, the row the lane's.
        let l = Layout::new(
            (Idx::Dynamic(self.block), Idx::Static(self.bm)),
            (Idx::Static(self.bm * 4), Idx::Static(4)),
        )?;
        let uniform = l.crd2idx(&Coord::from((self.block.idx(), Idx::Static(0))))?;
        let lane = l.crd2idx(&Coord::from((Idx::Static(0), row.idx())))?;
        let z = k.i32(0);
        match self.ids {
            RowSource::Global(ids) => k
                .buffer_load(&ids, lane.to_value(&z), uniform.to_value(&z), 1)?
                .int(k),
            RowSource::Lds(rows) => k.lds_load(&rows, lane.to_value(&z), Ty::I32, 4)?.int(k),
        }
    }

    /// The token of row `row` (per lane): pair `p` is slot `p % topk` of token `p / topk`.
    pub(crate) fn token(&self, row: Int<'k, 'ctx>) -> Result<Int<'k, 'ctx>> {
        token_of(self.pair(row)?, self.topk)
    }
}

/// The token of pair `pair`: pairs are `(slot, token)` with the slot fastest.
pub(crate) fn token_of<'k, 'ctx>(
    pair: Int<'k, 'ctx>,
    topk: Int<'k, 'ctx>,
) -> Result<Int<'k, 'ctx>> {
    // The natural coordinate in `(topk, tokens)`: the last mode takes the rest, so a padding
    // pair's token is one past the last (its loads fall out of range).
    let shape: Coord<Int<'k, 'ctx>> = Coord::from((topk.idx(), Idx::Static(1)));
    match shape.idx2crd(&pair.idx()).leaves().as_slice() {
        [_, t] => Ok((*t).to_value(&pair)),
        l => Err(DslError::Modes {
            what: "a pair's (topk, token) coordinate",
            expected: 2,
            found: l.len(),
        }),
    }
}

/// Gathered token rows as a [`Mainloop`]'s A.
pub(crate) struct GatheredA<'k, 'ctx> {
    /// Token data, `[tokens, K / 2]`.
    buf: Buffer<'ctx>,
    /// Its row-major byte layout.
    global: Layout<Int<'k, 'ctx>>,
    /// The stage width every staging call must have (whole `BK` tiles).
    row_bytes: i64,
    /// Per staging round: the wave-instruction, the lane's place in the tile, and its token.
    rounds: Vec<Round<'k, 'ctx>>,
    /// Token scales, `[tokens, K / 32]`.
    scales: Buffer<'ctx>,
    /// Their byte layout split at dwords: the dword a lane loads and the byte in it.
    scale_words: Layout<Int<'k, 'ctx>>,
    scale_within: Layout<Int<'k, 'ctx>>,
    /// Per MMA tile row: the lane's token (the row whose scales it supplies).
    tile_tokens: Vec<Int<'k, 'ctx>>,
}

struct Round<'k, 'ctx> {
    /// The wave-instruction this wave issues (clamped to the last in a partial round).
    instr: Int<'k, 'ctx>,
    /// The LDS byte (unswizzled) of the lane's 16 bytes, and its byte column.
    place: Int<'k, 'ctx>,
    col: Int<'k, 'ctx>,
    token: Int<'k, 'ctx>,
    /// In a partial last round, the unclamped instruction: the wave takes part if it exists.
    partial: Option<Int<'k, 'ctx>>,
}

impl<'k, 'ctx> GatheredA<'k, 'ctx> {
    /// Gathers the block's rows of `x` (`[tokens, kdim]` FP4) and `x_scales`: loads the
    /// lanes' token ids (before the K loop).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        th: &Threads<'k, 'ctx>,
        spec: &PrebSpec,
        mma: &BlockScaledMmaOp<'k, 'ctx>,
        rows: &SortedRows<'k, 'ctx>,
        x: Buffer<'ctx>,
        x_scales: Buffer<'ctx>,
        tokens: Int<'k, 'ctx>,
        kdim: Int<'k, 'ctx>,
    ) -> Result<Self> {
        let k = th.k;
        let bm = spec.bm as i64;
        let row_bytes = spec.bk_elems as i64 / 2;
        let cpr = row_bytes / 16;
        let instrs = bm * cpr / 64;
        if (bm * cpr) % 64 != 0 {
            return Err(DslError::Operand {
                op: "gathered A",
                rule: format!(
                    "a {bm} x {row_bytes} B tile is not a whole number of 1 KB wave loads"
                ),
            });
        }
        let (lds_place, local) = wave_loads(bm, row_bytes, instrs)?;
        let mut rounds = Vec::new();
        let per_wave = (instrs + th.warps - 1) / th.warps;
        for j in 0..per_wave {
            let i = th.wave + j * th.warps;
            let partial = (j + 1) * th.warps > instrs;
            // A wave past the last instruction loads the last one again (its write is skipped).
            let instr = if partial {
                i.min(&k.i32(instrs - 1))
            } else {
                i
            };
            let z = k.i32(0);
            let place = lds_place
                .crd2idx(&Coord::from((th.lane.idx(), instr.idx())))?
                .to_value(&z);
            let (row, col) = row_col(&local, &place.idx())?;
            let row = row.to_value(&z);
            rounds.push(Round {
                instr,
                place,
                col: col.to_value(&z),
                token: rows.token(row)?,
                partial: partial.then_some(i),
            });
        }
        let kb = kdim / 2;
        let ks = kdim / SCALE_BLOCK;
        let global = Layout::new((tokens.idx(), kb.idx()), (kb.idx(), Idx::Static(1)))?;
        // Scales: (token, (4, ks / 4)) row-major bytes, split at dwords.
        let scale_layout = Layout::new(
            (
                tokens.idx(),
                (Idx::Static(4), ks.idx().div(&Idx::Static(4))),
            ),
            (ks.idx(), (Idx::Static(1), Idx::Static(4))),
        )?;
        let (scale_words, scale_within) = split_strides(&scale_layout, 4)?;
        // The rows a lane's scale operand covers, per MMA tile row: an index view of the
        // block's rows partitioned as the MFMA's scale operand.
        let row_of = TileTensor::index(k, dev_layout(&Layout::new((bm, 8i64), (1i64, 0i64))?)?)
            .partition_sfa(&mma.atom, th.lane)?;
        let mut tile_tokens = Vec::new();
        for i in 0..mma.num_m {
            let (u, l) = row_of.offsets(&Coord::from((0, i as i64, 0)))?;
            tile_tokens.push(rows.token(u + l)?);
        }
        Ok(GatheredA {
            buf: x,
            global,
            row_bytes,
            rounds,
            scales: x_scales,
            scale_words,
            scale_within,
            tile_tokens,
        })
    }
}

impl<'k, 'ctx> AOperand<'k, 'ctx> for GatheredA<'k, 'ctx> {
    fn stage_rounds(&self, _: &Mainloop<'_, 'k, 'ctx, Self>, _: i64) -> usize {
        self.rounds.len()
    }

    fn stage_issue_rounds(
        &self,
        ml: &Mainloop<'_, 'k, 'ctx, Self>,
        slot: usize,
        kb0: Int<'k, 'ctx>,
        steps: i64,
        part: std::ops::Range<usize>,
    ) -> Result<PendingWrites<'k, 'ctx>> {
        let k = ml.k();
        let row_bytes = steps * ml.step_bytes();
        if row_bytes != self.row_bytes {
            return Err(DslError::Unsupported {
                what: "a gathered A stage's bytes per row",
                expected: self.row_bytes,
                found: row_bytes,
            });
        }
        let bm = ml.spec.bm as i64;
        let lds = &ml.slots[slot];
        let instrs = bm * (row_bytes / 16) / 64;
        let (lds_place, local) = wave_loads(bm, row_bytes, instrs)?;
        let swizzle = common::operand_swizzle(ml.spec, row_bytes)?;
        let z = k.i32(0);
        let mut pending = Vec::new();
        let part = part.start.min(self.rounds.len())..part.end.min(self.rounds.len());
        for r in &self.rounds[part] {
            // The column's uniform part is the tile's start; the token row is the lane's.
            let uniform = self
                .global
                .crd2idx(&Coord::from((Idx::Static(0), kb0.idx())))?;
            let cond: Option<tilegen_dsl::Cond> = r.partial.map(|i| i.lt(&k.i32(instrs)).into());
            if ml.spec.dram_to_lds {
                // Lane l's 16 bytes land at the instruction's base + 16 l; in a swizzled tile
                // that place holds the chunk the swizzle maps there, which stays in the lane's
                // row (the swizzle moves bits below the row's size only).
                let base = lds_place.crd2idx(&Coord::from((Idx::Static(0), r.instr.idx())))?;
                let logical = swizzle.inverse().apply_idx(&r.place.idx());
                let (_, col) = row_col(&local, &logical)?;
                let g = self.global.crd2idx(&Coord::from((r.token.idx(), col)))?;
                let load = || {
                    k.buffer_load_to_lds(
                        &self.buf,
                        lds,
                        base.to_value(&z),
                        g.to_value(&z),
                        uniform.to_value(&z),
                        16,
                    )
                };
                match cond {
                    Some(c) => k.if_then(c, load)?,
                    None => load()?,
                }
            } else {
                let g = self
                    .global
                    .crd2idx(&Coord::from((r.token.idx(), r.col.idx())))?;
                let v = k.buffer_load(&self.buf, g.to_value(&z), uniform.to_value(&z), 4)?;
                pending.push((swizzle.apply_idx(&r.place.idx()).to_value(&z), v, cond));
            }
        }
        Ok(pending)
    }

    fn scales(
        &self,
        ml: &Mainloop<'_, 'k, 'ctx, Self>,
        t: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<Box<dyn ScaleFragments<'k, 'ctx> + 'k>> {
        let k = ml.k();
        let kbs = steps * ml.k_blocks_per_step();
        if kbs % 4 != 0 {
            return Err(DslError::NotMultiple {
                what: "a stage's scale blocks (a dword of scale bytes each)",
                value: kbs,
                multiple: 4,
            });
        }
        // The K block of each MMA tile and step a lane supplies: an index view of the stage's
        // blocks partitioned as the scale operand.
        let kb_of = TileTensor::index(
            k,
            dev_layout(&Layout::new((ml.spec.bm as i64, kbs), (0i64, 1i64))?)?,
        )
        .partition_sfa(&ml.mma.atom, ml.th.lane)?;
        let z = k.i32(0);
        // The stage's first block is a multiple of 4: it moves whole dwords.
        let uniform = self
            .scale_words
            .crd2idx(&Coord::from((
                Idx::Static(0),
                t.idx().mul(&Idx::Static(kbs)),
            )))?
            .to_value(&z);
        let mut at = Vec::new();
        for (i, token) in self.tile_tokens.iter().enumerate() {
            for kk in 0..steps {
                let (u, l) = kb_of.offsets(&Coord::from((0, i as i64, kk)))?;
                let kb = (u + l).idx();
                let c = Coord::from((token.idx(), kb));
                let word = self.scale_words.crd2idx(&c)?.to_value(&z);
                let byte = self.scale_within.crd2idx(&c)?.to_value(&z);
                at.push((word, byte));
            }
        }
        Ok(Box::new(GatheredFrags {
            buf: self.scales,
            uniform,
            at,
            steps: steps as usize,
        }))
    }
}

/// How a `[bm, row_bytes]` tile is staged: `(lane, instruction) -> LDS byte` (wave-instruction
/// `i` moves the tile's 16-byte chunks `64 i ..` in row-major order, lane `l` chunk `64 i + l`),
/// and the tile's row-major byte layout that gives a byte's `(row, column)`.
fn wave_loads<'k, 'ctx>(
    bm: i64,
    row_bytes: i64,
    instrs: i64,
) -> Result<(Layout<Int<'k, 'ctx>>, Layout<Int<'k, 'ctx>>)> {
    Ok((
        dev_layout(&Layout::new((64, instrs), (16, 1024))?)?,
        dev_layout(&Layout::row_major((bm, row_bytes)))?,
    ))
}

/// The `(row, column)` of byte `at` of a row-major tile.
fn row_col<'k, 'ctx>(
    local: &Layout<Int<'k, 'ctx>>,
    at: &Idx<Int<'k, 'ctx>>,
) -> Result<(Idx<Int<'k, 'ctx>>, Idx<Int<'k, 'ctx>>)> {
    match local.idx2crd(at)?.leaves().as_slice() {
        [r, c] => Ok(((*r).clone(), (*c).clone())),
        l => Err(DslError::Modes {
            what: "a tile's (row, column) coordinate",
            expected: 2,
            found: l.len(),
        }),
    }
}

/// One stage's gathered scale dwords: per (tile, step) the lane's dword and byte.
struct GatheredFrags<'k, 'ctx> {
    buf: Buffer<'ctx>,
    uniform: Int<'k, 'ctx>,
    at: Vec<(Int<'k, 'ctx>, Int<'k, 'ctx>)>,
    steps: usize,
}

impl<'k, 'ctx> ScaleFragments<'k, 'ctx> for GatheredFrags<'k, 'ctx> {
    fn dwords(&self) -> usize {
        self.at.len()
    }

    fn issue(&self, k: &'k Kernel<'ctx>) -> Result<Vec<Int<'k, 'ctx>>> {
        self.at
            .iter()
            .map(|&(word, _)| k.buffer_load(&self.buf, word, self.uniform, 1)?.int(k))
            .collect()
    }

    /// The byte this lane's MFMA uses, shifted down to byte 0.
    fn finish(&self, _k: &'k Kernel<'ctx>, raw: Vec<Int<'k, 'ctx>>) -> Result<Vec<Int<'k, 'ctx>>> {
        Ok(raw
            .into_iter()
            .zip(&self.at)
            .map(|(v, &(_, byte))| v.idx().shr(&byte.idx().mul(&Idx::Static(8))).to_value(&v))
            .collect())
    }

    fn select(&self, dwords: &[Int<'k, 'ctx>], i: usize, kk: usize) -> Result<ScaleSel<'k, 'ctx>> {
        let dword = *dwords
            .get(i * self.steps + kk)
            .ok_or_else(|| DslError::Missing(format!("the scale of tile {i} step {kk}")))?;
        Ok(ScaleSel { dword, byte: 0 })
    }
}
