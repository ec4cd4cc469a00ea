//! The bodies of the layer's kernels: the two grouped GEMMs (the preshuffled-B [`Mainloop`] over
//! one sorted block and one expert's weights, with their epilogues) and the sorted reduce.
//!
//! Each GEMM workgroup takes sorted block `block_id.y` and column tile `block_id.x`. Its
//! expert's weights are one group of a `Shuffler[E]` buffer: the kernel makes a buffer
//! resource over that group alone (`base + e * group_stride`, the stride read off the grouped
//! layout's expert mode), so the expert's rows are addressed exactly as a one-group GEMM's B
//! and a weight tensor past 2^31 bytes still needs only 32-bit offsets. A layer's biases
//! (`[E, n]` bf16) are addressed the same way, one expert's row per workgroup.

use tilegen_dsl::{
    Buffer, CachePolicy, DslError, Elem, I32Param, Int, Kernel, MmaAtom, PtrParam, Result,
    Signature, Storage, TileTensor, Ty, Value, dev_layout,
};
use tilegen_layout::{Coord, Idx, IndexValue, Layout};
use tilegen_mx::Shuffler;

use super::gather::{GatheredA, SortedRows, token_of};
use super::spec::{Activation, MoeSpec, Stage};
use crate::gemm::preb::{self, Mainloop, RowsA};
use crate::tile::atom::SCALE_BLOCK;
use crate::tile::mma::BlockScaledMmaOp;
use crate::tile::scales::Scales;
use crate::tile::stage::Threads;

/// `log2(e)`: `exp(x) = 2^(x log2 e)`.
const LOG2_E: f32 = std::f32::consts::LOG2_E;

/// Parameters of the gate/up kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GateUpParams {
    out: PtrParam,
    out_scales: PtrParam,
    x: PtrParam,
    x_scales: PtrParam,
    w: PtrParam,
    w_scales: PtrParam,
    bias: Option<PtrParam>,
    sorted_ids: PtrParam,
    block_expert: PtrParam,
    tokens: I32Param,
    topk: I32Param,
    rows: I32Param,
    n: I32Param,
    k: I32Param,
    /// With a fused sort: each pair's expert `[tokens * topk]`, and whether this pass's
    /// pairs are grouped here (1) or were by the sort kernel (0).
    fused: Option<(PtrParam, I32Param)>,
}

/// The gate/up kernel's signature: `(out, out_scales, x, x_scales, w, w_scales, [bias,]
/// sorted_ids, block_expert, tokens, topk, rows, n, k)`: `out` the activations `[rows, n / 4]`
/// (FP4, n / 2 per row) in sorted-row order with scales in the Shuffler's 4D layout over
/// `rows` padded to 32; `x` the tokens `[tokens, k / 2]` with row-major scales
/// `[tokens, k / 32]`; `w` the gate/up weights `[E, n, k]` in the Shuffler's grouped 5D layout
/// and their 4D scales; `bias` (with `bias`) the biases `[E, n]` bf16; `rows` = blocks x BM
/// sorted rows; `n` = 2 x padded intermediate size; `k` = padded hidden; with `fused` (the
/// spec's fused sort) then `ids` (each pair's expert) and `sort_here` (1: this kernel groups
/// the pairs and writes `sorted_ids` and `block_expert` for the down kernel; 0: it reads
/// them).
pub(crate) fn gate_up_signature(bias: bool, fused: bool) -> (Signature, GateUpParams) {
    let mut s = Signature::new();
    let p = GateUpParams {
        out: s.global_ptr("out"),
        out_scales: s.global_ptr("out_scales"),
        x: s.global_ptr("x"),
        x_scales: s.global_ptr("x_scales"),
        w: s.global_ptr("w"),
        w_scales: s.global_ptr("w_scales"),
        bias: bias.then(|| s.global_ptr("bias")),
        sorted_ids: s.global_ptr("sorted_ids"),
        block_expert: s.global_ptr("block_expert"),
        tokens: s.i32("tokens"),
        topk: s.i32("topk"),
        rows: s.i32("rows"),
        n: s.i32("n"),
        k: s.i32("k"),
        fused: fused.then(|| (s.global_ptr("ids"), s.i32("sort_here"))),
    };
    (s, p)
}

/// Parameters of the down kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DownParams {
    out: PtrParam,
    a: PtrParam,
    a_scales: PtrParam,
    w: PtrParam,
    w_scales: PtrParam,
    bias: Option<PtrParam>,
    sorted_ids: PtrParam,
    block_expert: PtrParam,
    weights: PtrParam,
    tokens: I32Param,
    topk: I32Param,
    rows: I32Param,
    n: I32Param,
    k: I32Param,
}

/// The down kernel's signature: `(out, a, a_scales, w, w_scales, [bias,] sorted_ids,
/// block_expert, weights, tokens, topk, rows, n, k)`: `out` the bf16 layer output
/// `[tokens, n]` (atomic combine) or the f32 contributions `[tokens * topk, n]` (sorted
/// reduce); `a` the gate/up kernel's output; `bias` (with `bias`) the biases `[E, n]` bf16;
/// `weights` the routing weights `[tokens * topk]` (f32); `n` = hidden size; `k` = padded
/// intermediate size.
pub(crate) fn down_signature(bias: bool) -> (Signature, DownParams) {
    let mut s = Signature::new();
    let p = DownParams {
        out: s.global_ptr("out"),
        a: s.global_ptr("a"),
        a_scales: s.global_ptr("a_scales"),
        w: s.global_ptr("w"),
        w_scales: s.global_ptr("w_scales"),
        bias: bias.then(|| s.global_ptr("bias")),
        sorted_ids: s.global_ptr("sorted_ids"),
        block_expert: s.global_ptr("block_expert"),
        weights: s.global_ptr("weights"),
        tokens: s.i32("tokens"),
        topk: s.i32("topk"),
        rows: s.i32("rows"),
        n: s.i32("n"),
        k: s.i32("k"),
    };
    (s, p)
}

/// Parameters of the reduce kernel.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReduceParams {
    out: PtrParam,
    parts: PtrParam,
    tokens: I32Param,
    topk: I32Param,
    n: I32Param,
}

/// The reduce kernel's signature: `(out, parts, tokens, topk, n)`: `out[t] = bf16(sum over
/// slots s, in order, of parts[t * topk + s])`, rows of `n` values.
pub(crate) fn reduce_signature() -> (Signature, ReduceParams) {
    let mut s = Signature::new();
    let p = ReduceParams {
        out: s.global_ptr("out"),
        parts: s.global_ptr("parts"),
        tokens: s.i32("tokens"),
        topk: s.i32("topk"),
        n: s.i32("n"),
    };
    (s, p)
}

/// Work-items of the reduce kernel's workgroups; each sums 4 columns.
pub(crate) const REDUCE_THREADS: u32 = 256;
/// Columns a reduce work-item sums.
pub(crate) const REDUCE_COLUMNS: u32 = 4;

/// The stride between the groups of a grouped layout (its mode 0), as a device integer.
fn group_stride<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    grouped: &Layout<Int<'k, 'ctx>>,
) -> Result<Int<'k, 'ctx>> {
    match grouped.mode(0)?.stride() {
        Coord::Leaf(d) => Ok(d.to_value(&k.i32(0))),
        s => Err(DslError::Modes {
            what: "the stride of a grouped layout's group mode",
            expected: 1,
            found: s.leaves().len(),
        }),
    }
}

/// One expert's B of a `Shuffler[E]` weight: `(n, k)` FP4 view and scale view over buffers of
/// that expert alone.
#[allow(clippy::too_many_arguments)]
fn expert_b<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    w: PtrParam,
    w_scales: PtrParam,
    expert: Int<'k, 'ctx>,
    n: Int<'k, 'ctx>,
    kb: Int<'k, 'ctx>,
    ks: Int<'k, 'ctx>,
    policy: CachePolicy,
) -> Result<(TileTensor<'k, 'ctx>, Scales<'k, 'ctx>)> {
    let one = Idx::Static(1);
    let b5 = Shuffler::b_5d_layout(one.clone(), n.idx(), kb.idx());
    let npad = preb::pad32(n);
    let s4 = Shuffler::scale_4d_layout(one, npad.idx(), ks.idx());
    let w_e = k.ptr_offset(k.ptr_arg(w)?, expert, group_stride(k, &b5)?)?;
    let s_e = k.ptr_offset(k.ptr_arg(w_scales)?, expert, group_stride(k, &s4)?)?;
    let wb = k.buffer(w_e, n * kb, policy)?;
    let sb = k.buffer(s_e, npad * ks, CachePolicy::Always)?;
    Ok((preb::b_view(k, wb, n, kb)?, Scales::new(k, sb, npad, ks)?))
}

/// The workgroup's block in LDS (its `bm` rows' pairs, then its expert, one word each) and
/// its expert (wave-uniform).
/// Grouped here (`sort_here` 1: wave 0 places the pass's pairs, whose experts `pair_experts`
/// holds; the workgroups of column tile 0 also write the block's rows and expert for the down
/// kernel) or copied from the sort kernel's layout (`sort_here` 0). A workgroup past the
/// blocks the pairs fill finds expert [`super::NO_EXPERT`].
#[allow(clippy::too_many_arguments)]
fn block_rows_in_lds<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    th: &Threads<'k, 'ctx>,
    block_expert_p: PtrParam,
    sorted_ids: &Buffer<'ctx>,
    pair_experts: PtrParam,
    sort_here: Int<'k, 'ctx>,
    pairs: Int<'k, 'ctx>,
    blocks: Int<'k, 'ctx>,
    bid_x: Int<'k, 'ctx>,
    bid_y: Int<'k, 'ctx>,
    bm: i64,
) -> Result<(tilegen_dsl::Lds<'ctx>, Int<'k, 'ctx>)> {
    let z = k.i32(0);
    let lds = k.lds_alloc("moe_block_rows", (4 * bm + 4) as u32, 16)?;
    let scratch = k.lds_alloc(
        "moe_fused_sort",
        super::sort::FUSED_SORT_LDS_BYTES as u32,
        16,
    )?;
    // (row, block) -> byte of the sorted layout; the block's rows, then its expert, in LDS.
    let layout_l = Layout::new(
        (Idx::Static(bm), blocks.idx()),
        (Idx::Static(4), Idx::Static(4 * bm)),
    )?;
    let row_at = |r: Int<'k, 'ctx>| -> Result<Int<'k, 'ctx>> {
        Ok(layout_l
            .crd2idx(&Coord::from((r.idx(), bid_y.idx())))?
            .to_value(&z))
    };
    let local = Layout::new(Idx::Static(bm + 1), Idx::Static(4))?;
    let slot = |r: Int<'k, 'ctx>| -> Result<Int<'k, 'ctx>> {
        Ok(local.crd2idx(&Coord::Leaf(r.idx()))?.to_value(&z))
    };
    let (experts_buf, expert_at) = block_expert_at(k, block_expert_p, blocks, bid_y)?;
    let lane = th.lane;
    let in_block = lane.lt(&k.i32(bm));
    k.if_then(th.wave.eq(&z), || {
        k.if_then(z.lt(&sort_here), || {
            let ids = k.buffer(k.ptr_arg(pair_experts)?, pairs * 4, CachePolicy::Always)?;
            let expert =
                super::sort::block_in_wave(k, &ids, pairs, lane, bid_y, bm, &scratch, &lds)?;
            k.if_then(lane.eq(&z), || {
                k.lds_store(&lds, slot(k.i32(bm))?, expert.into(), 4)
            })?;
            // Column tile 0 writes the layout the down kernel reads.
            let row = k.lds_load(&lds, slot(lane.min(&k.i32(bm - 1)))?, Ty::I32, 4)?;
            k.if_then(bid_x.eq(&z), || {
                k.if_then(in_block, || {
                    k.buffer_store(sorted_ids, row, row_at(lane)?, z)
                })?;
                k.if_then(lane.eq(&z), || {
                    k.buffer_store(&experts_buf, expert.into(), expert_at, z)
                })
            })
        })?;
        k.if_then(sort_here.eq(&z), || {
            k.if_then(in_block, || {
                let row = k.buffer_load(sorted_ids, row_at(lane)?, z, 1)?;
                k.lds_store(&lds, slot(lane)?, row, 4)
            })?;
            k.if_then(lane.eq(&z), || {
                let e = k.buffer_load(&experts_buf, expert_at, z, 1)?;
                k.lds_store(&lds, slot(k.i32(bm))?, e, 4)
            })
        })
    })?;
    k.barrier()?;
    let expert = k.lds_load(&lds, slot(k.i32(bm))?, Ty::I32, 4)?.int(k)?;
    Ok((lds, k.readfirstlane(expert)?))
}

/// The block experts `[blocks]` (u32) and block `block`'s byte in them.
fn block_expert_at<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    p: PtrParam,
    blocks: Int<'k, 'ctx>,
    block: Int<'k, 'ctx>,
) -> Result<(Buffer<'ctx>, Int<'k, 'ctx>)> {
    let buf = k.buffer(k.ptr_arg(p)?, blocks * 4, CachePolicy::Always)?;
    let at = Layout::new(blocks.idx(), Idx::Static(4))?.crd2idx(&Coord::Leaf(block.idx()))?;
    Ok((buf, at.to_value(&k.i32(0))))
}

/// The expert of the workgroup's block (wave-uniform). A block past the sort's count has
/// none ([`super::NO_EXPERT`]): its workgroup leaves here.
fn block_expert<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    p: PtrParam,
    blocks: Int<'k, 'ctx>,
    block: Int<'k, 'ctx>,
) -> Result<Int<'k, 'ctx>> {
    let (buf, at) = block_expert_at(k, p, blocks, block)?;
    let z = k.i32(0);
    let e = k.buffer_load(&buf, z, at, 1)?.int(k)?;
    let e = k.readfirstlane(e)?;
    super::sort::leave_without_expert(k, e)?;
    Ok(e)
}

/// Expert `expert`'s row of a `[E, n]` bf16 bias tensor: a buffer over that row alone and its
/// byte layout `(n)`.
fn expert_bias<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    p: PtrParam,
    expert: Int<'k, 'ctx>,
    n: Int<'k, 'ctx>,
) -> Result<(Buffer<'ctx>, Layout<Int<'k, 'ctx>>)> {
    let l = Layout::new((Idx::Static(1), n.idx()), ((n * 2).idx(), Idx::Static(2)))?;
    let row = k.ptr_offset(k.ptr_arg(p)?, expert, group_stride(k, &l)?)?;
    Ok((k.buffer(row, n * 2, CachePolicy::Always)?, l.mode(1)?))
}

/// An index view of the `[BM, n]` output (element `(r, c)` = `r * strides.0 + c *
/// strides.1`) tiled by the workgroup's and the wave's tiles and partitioned like the
/// accumulators: per (value, MMA tile row, MMA tile column) of a lane, its row or column.
fn accum_index<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    tile: &crate::PrebSpec,
    th: &Threads<'k, 'ctx>,
    mma: &BlockScaledMmaOp<'k, 'ctx>,
    n: Int<'k, 'ctx>,
    bid_x: Int<'k, 'ctx>,
    strides: (i64, i64),
) -> Result<TileTensor<'k, 'ctx>> {
    let (bm, bn, wn) = (tile.bm as i64, tile.bn as i64, tile.wn as i64);
    let l = Layout::new(
        (Idx::Static(bm), n.idx()),
        (Idx::Static(strides.0), Idx::Static(strides.1)),
    )?;
    TileTensor::index(k, l)
        .tile(&[bm, bn], &[Idx::Static(0), bid_x.idx()])?
        .tile(&[bm, wn], &[Idx::Static(0), th.wave.idx()])?
        .partition_c(&mma.atom, th.lane)
}

/// The biases of a lane's accumulator values, per MMA tile column `j` and value, in f32: one
/// load of the bf16 biases of each run of consecutive columns, shared by the tile rows (a
/// column's bias is the same in every row); zero for columns past `n`.
fn accum_bias<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    (bias, row): (Buffer<'ctx>, Layout<Int<'k, 'ctx>>),
    col_of: &TileTensor<'k, 'ctx>,
    mma: &BlockScaledMmaOp<'k, 'ctx>,
    n: Int<'k, 'ctx>,
) -> Result<Vec<Vec<Value<'ctx>>>> {
    let [m, nn, _] = mma.atom.shape_mnk();
    let values = (m * nn / 64) as usize;
    // Runs of 4 columns are 2 dwords; every atom's values come in at least pairs.
    let runs = column_runs(&mma.atom, 4).or_else(|_| column_runs(&mma.atom, 2))?;
    let z = k.i32(0);
    let mut per_j = Vec::with_capacity(mma.num_n);
    for j in 0..mma.num_n {
        let mut vals: Vec<Option<Value<'ctx>>> = vec![None; values];
        for run in &runs {
            let (u, l) = col_of.offsets(&Coord::from((run[0] as i64, 0, j as i64)))?;
            let col = u + l;
            // A run starts on a multiple of its length and n is a multiple of 32: a run is
            // wholly inside or wholly past the row.
            let at = row
                .crd2idx(&Coord::Leaf(col.idx()))?
                .to_value(&z)
                .select(col.lt(&n), &bias.records(k));
            let len = run.len() as u32;
            let b = k.buffer_load(&bias, at, z, len / 2)?;
            let b = k.convert(k.bitcast(b, Ty::vector(Elem::Bf16, len))?, Elem::F32)?;
            for (&v, x) in run.iter().zip(k.split(b, len)?) {
                vals[v] = Some(x);
            }
        }
        per_j.push(
            vals.into_iter()
                .map(|v| v.ok_or_else(|| DslError::Missing("a value's bias".into())))
                .collect::<Result<_>>()?,
        );
    }
    Ok(per_j)
}

/// Emits the gate/up kernel of `spec`.
pub(crate) fn gate_up<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &MoeSpec) -> Result<()> {
    let tile = spec.tile(Stage::GateUp);
    let th = Threads::new(k, tile.warps() as i64)?;
    let (_, p) = gate_up_signature(spec.has_bias(), spec.has_fused_sort());
    let tokens = k.i32_arg(p.tokens)?;
    let topk = k.i32_arg(p.topk)?;
    let rows = k.i32_arg(p.rows)?;
    let n = k.i32_arg(p.n)?;
    let kdim = k.i32_arg(p.k)?;
    let (kb, ks) = (kdim / 2, kdim / SCALE_BLOCK);
    let bm = tile.bm as i64;
    let (bid_x, bid_y) = (k.block_id_x()?, k.block_id_y()?);
    let blocks = rows / bm;
    let (slots, mma) = preb::mma_state(k, tile)?;
    let ids = k.buffer(k.ptr_arg(p.sorted_ids)?, rows * 4, CachePolicy::Always)?;
    let x = k.buffer(k.ptr_arg(p.x)?, tokens * kb, CachePolicy::Always)?;
    let xs = k.buffer(k.ptr_arg(p.x_scales)?, tokens * ks, CachePolicy::Always)?;
    let (a, expert) = match p.fused {
        None => {
            let sorted = SortedRows::new(k, ids, bid_y, bm, topk);
            // The rows' token ids are loaded before the block's expert: neither depends on
            // the other, and the expert's wave-uniform read waits for every load issued
            // before it, so issued in this order the two latencies overlap instead of
            // following each other.
            let a = GatheredA::new(&th, tile, &mma, &sorted, x, xs, tokens, kdim)?;
            (a, block_expert(k, p.block_expert, blocks, bid_y)?)
        }
        Some((pair_experts, sort_here)) => {
            let (rows_lds, expert) = block_rows_in_lds(
                k,
                &th,
                p.block_expert,
                &ids,
                pair_experts,
                k.i32_arg(sort_here)?,
                tokens * topk,
                blocks,
                bid_x,
                bid_y,
                bm,
            )?;
            super::sort::leave_without_expert(k, expert)?;
            let sorted = SortedRows::in_lds(k, rows_lds, bid_y, bm, topk);
            (
                GatheredA::new(&th, tile, &mma, &sorted, x, xs, tokens, kdim)?,
                expert,
            )
        }
    };
    let (b, sfb) = expert_b(
        k,
        p.w,
        p.w_scales,
        expert,
        n,
        kb,
        ks,
        tile.knobs().b_cache_policy,
    )?;
    // The biases are loaded before the main loop: their latency hides under its first stage's.
    let bias = match p.bias {
        Some(bp) => {
            let col_of = accum_index(k, tile, &th, &mma, n, bid_x, (0, 1))?;
            Some(accum_bias(
                k,
                expert_bias(k, bp, expert, n)?,
                &col_of,
                &mma,
                n,
            )?)
        }
        None => None,
    };
    let ml = Mainloop::new(tile, th, kdim, a, b, sfb, bid_x, slots, mma, false);
    ml.run()?;
    let out = k.buffer(k.ptr_arg(p.out)?, rows * (n / 4), CachePolicy::Always)?;
    let npad_rows = preb::pad32(rows);
    let out_scales = k.buffer(
        k.ptr_arg(p.out_scales)?,
        npad_rows * (n / 64),
        CachePolicy::Always,
    )?;
    let epi = GateUpEpilogue {
        k,
        spec,
        th,
        mma: &ml.mma,
        bid_x,
        bid_y,
        rows,
        n,
        bias,
    };
    epi.emit(out, out_scales)
}

/// The gate/up epilogue: activation of each (gate, up) pair into LDS, then per row and 32
/// outputs the OCP MXFP4 quantization, written in sorted-row order.
struct GateUpEpilogue<'a, 'k, 'ctx> {
    k: &'k Kernel<'ctx>,
    spec: &'a MoeSpec,
    th: Threads<'k, 'ctx>,
    mma: &'a BlockScaledMmaOp<'k, 'ctx>,
    bid_x: Int<'k, 'ctx>,
    bid_y: Int<'k, 'ctx>,
    rows: Int<'k, 'ctx>,
    n: Int<'k, 'ctx>,
    /// The biases of the lane's values per MMA tile column ([`accum_bias`]), if any.
    bias: Option<Vec<Vec<Value<'ctx>>>>,
}

impl<'k, 'ctx> GateUpEpilogue<'_, 'k, 'ctx> {
    fn emit(&self, out: Buffer<'ctx>, out_scales: Buffer<'ctx>) -> Result<()> {
        let k = self.k;
        let tile = self.spec.tile(Stage::GateUp);
        let (bm, bn, wn) = (tile.bm as i64, tile.bn as i64, tile.wn as i64);
        let half = bn / 2;
        let bytes = u32::try_from(bm * half * 4).map_err(|_| DslError::LdsSize {
            name: "moe_act".into(),
            bytes: (bm * half * 4) as u64,
        })?;
        let lds = k.lds_alloc("moe_act", bytes, 16)?;
        // Gate/up column n of the tile is (n % 2, n / 2): which of the pair, and the output.
        // The activations are f32, row-major `[BM, BN / 2]`; the parity is an index view.
        let act = TileTensor::new(
            k,
            Storage::Lds(lds),
            dev_layout(&Layout::new((bm, (2, half)), (half * 4, (0, 4)))?)?,
        );
        let parity = TileTensor::index(k, dev_layout(&Layout::new((bm, (2, half)), (0, (1, 0)))?)?);
        let frag = |v: &TileTensor<'k, 'ctx>| {
            v.tile(&[bm, wn], &[Idx::Static(0), self.th.wave.idx()])?
                .partition_c(&self.mma.atom, self.th.lane)
        };
        let (act, parity) = (frag(&act)?, frag(&parity)?);
        let values = self.mma.atom.shape_mnk()[0] * self.mma.atom.shape_mnk()[1] / 64;
        let z = k.i32(0);
        for i in 0..self.mma.num_m {
            for j in 0..self.mma.num_n {
                let acc = self.mma.accum_tile().load(&Coord::from((i, j)))?;
                let mut accs = k.split(acc, values as u32)?;
                if let Some(bias) = &self.bias {
                    for (a, &b) in accs.iter_mut().zip(&bias[j]) {
                        *a = k.fadd(*a, b)?;
                    }
                }
                // Each value's (which, static output offset); the lane's part is common.
                let mut which = Vec::new();
                for v in 0..values {
                    let c = Coord::from((v, i as i64, j as i64));
                    let (pb, pl, pf, pr) = parity.offset_parts(&c)?;
                    let static_zero = |x: &Idx<Int<'k, 'ctx>>| x.static_value() == Some(0);
                    if !(static_zero(&pb) && static_zero(&pl) && static_zero(&pr)) {
                        return Err(DslError::Internal(
                            "a lane's gate and up values are not in the same lane".into(),
                        ));
                    }
                    let (_, _, fixed, rest) = act.offset_parts(&c)?;
                    if !static_zero(&rest) {
                        return Err(DslError::NotStatic("an activation's place per value"));
                    }
                    which.push((pf, fixed, v));
                }
                for &(pf, fixed, v) in &which {
                    if pf != 0 {
                        continue;
                    }
                    let up = which
                        .iter()
                        .find(|&&(qf, qfixed, _)| qf == 1 && qfixed == fixed)
                        .map(|&(_, _, u)| u)
                        .ok_or_else(|| DslError::Missing(format!("the up partner of value {v}")))?;
                    let a = activation(
                        k,
                        self.spec.activation_kind(),
                        accs[v as usize],
                        accs[up as usize],
                    )?;
                    let (base, lane, _, _) =
                        act.offset_parts(&Coord::from((v, i as i64, j as i64)))?;
                    let at = base.add(&lane).add(&Idx::Static(fixed)).to_value(&z);
                    k.lds_store(&lds, at, a, 4)?;
                }
            }
        }
        k.barrier()?;
        self.quantize(&lds, out, out_scales)
    }

    /// The (row, block) items of the LDS tile (32 activations each: one E8M0 scale and 16
    /// bytes of FP4 codes, exactly as `tilegen_mx::quantize_block` computes them) spread over
    /// the workgroup: an item's values are split over `parts` neighbouring lanes of one wave,
    /// which share the block maximum through lane shuffles. One lane per item would leave a
    /// small tile's quantization (a decode block: 16 items) to 16 lanes of the first wave,
    /// each running the 32 values' conversion alone while the other waves wait.
    fn quantize(
        &self,
        lds: &tilegen_dsl::Lds<'ctx>,
        out: Buffer<'ctx>,
        out_scales: Buffer<'ctx>,
    ) -> Result<()> {
        let k = self.k;
        let tile = self.spec.tile(Stage::GateUp);
        let (bm, bn) = (tile.bm as i64, tile.bn as i64);
        let half = bn / 2;
        let per_row = half / SCALE_BLOCK;
        let items = bm * per_row;
        let threads = self.th.warps * 64;
        let parts = lanes_per_item(items, threads);
        let per_lane = SCALE_BLOCK / parts;
        let units = items * parts;
        // Unit u is part u % parts of block (u / parts) % per_row of row u / (parts per_row):
        // neighbouring lanes write neighbouring bytes.
        let unit_of = dev_layout(&Layout::col_major((parts, per_row, bm)))?;
        // A lane's slice of its row: its part of its block, `per_lane` values.
        let slice_of = dev_layout(&Layout::col_major((parts, per_row)))?;
        // Code bytes per lane: 4 bits per value.
        let code_bytes = per_lane / 2;
        // The tile's activations as f32 words, `(output, row)`.
        let words = TileTensor::packed(
            k,
            Storage::Lds(*lds),
            dev_layout(&Layout::new((half, bm), (1, half))?)?,
            32,
        )?;
        // The layer's activations `[rows, n / 2]` FP4 (n / 4 bytes a row), in sorted order, as
        // `(row, slice)` of the lanes' slices of code bytes, and their scales in the Shuffler's
        // 4D layout over the rows padded to 32, as `(row, block)`; the workgroup writes its
        // `[BM, BN / 64]` blocks of both.
        let n_out = self.n / 2;
        let blocks = n_out / SCALE_BLOCK;
        let out_view = TileTensor::new(
            k,
            Storage::Global(out),
            Layout::new(
                (self.rows.idx(), (blocks * parts).idx()),
                ((n_out / 2).idx(), Idx::Static(code_bytes)),
            )?,
        );
        let s4 =
            Shuffler::scale_4d_layout(Idx::Static(1), preb::pad32(self.rows).idx(), blocks.idx());
        let scale_view = TileTensor::new(
            k,
            Storage::Global(out_scales),
            Layout::from_modes(vec![s4.mode(1)?, s4.mode(2)?]),
        );
        let at = [self.bid_y.idx(), self.bid_x.idx()];
        let out_tile = out_view.tile(&[bm, per_row * parts], &at)?;
        let scale_tile = scale_view.tile(&[bm, per_row], &at)?;
        let z = k.i32(0);
        let rounds = (units + threads - 1) / threads;
        for r in 0..rounds {
            let u = self.th.tid + r * threads;
            let full = (r + 1) * threads <= units;
            // Lanes past the last unit work on the last one (their loads stay in the tile)
            // and store nothing: every lane of a wave takes part in the shuffles.
            let unit = if full { u } else { u.min(&k.i32(units - 1)) };
            let crd = unit_of.idx2crd(&unit.idx())?;
            let (part, blk, row) = match crd.leaves().as_slice() {
                [p, b, r] => ((*p).clone(), (*b).clone(), (*r).clone()),
                l => {
                    return Err(DslError::Modes {
                        what: "a lane's (part, block, row) coordinate",
                        expected: 3,
                        found: l.len(),
                    });
                }
            };
            let slice = slice_of.crd2idx(&Coord::from((part.clone(), blk.clone())))?;
            let values = words
                .tile(&[per_lane, 1], &[slice.clone(), row.clone()])?
                .load_values(&[0])?;
            let bits: Vec<Int<'k, 'ctx>> = k
                .split(values, per_lane as u32)?
                .into_iter()
                .map(|v| k.bitcast(v, Ty::I32)?.int(k))
                .collect::<Result<_>>()?;
            let mut amax = block_amax(k, &bits)?;
            let mut mask = 1;
            while mask < parts {
                amax = amax.max(&k.shuffle_xor(amax.into(), self.th.lane, mask)?.int(k)?);
                mask *= 2;
            }
            let scale = BlockScale::of(k, amax)?;
            let codes = scale.encode(k, &bits)?;
            let store = || -> Result<()> {
                let (u, l) = out_tile.offsets(&Coord::from((row.clone(), slice.clone())))?;
                // A buffer store moves whole dwords, one i16 or one i8.
                let packed = match code_bytes {
                    1 => k.slice(k.bitcast(codes[0].into(), Ty::vector(Elem::I8, 4))?, 0, 1)?,
                    2 => k.slice(k.bitcast(codes[0].into(), Ty::vector(Elem::I16, 2))?, 0, 1)?,
                    _ => k.concat(&codes.iter().map(|&c| Value::from(c)).collect::<Vec<_>>())?,
                };
                k.buffer_store(&out, packed, l, u)?;
                let first = || -> Result<()> {
                    let (u, l) = scale_tile.offsets(&Coord::from((row.clone(), blk.clone())))?;
                    let byte =
                        k.slice(k.bitcast(scale.code.into(), Ty::vector(Elem::I8, 4))?, 0, 1)?;
                    k.buffer_store(&out_scales, byte, l, u)
                };
                if parts == 1 {
                    first()
                } else {
                    k.if_then(part.to_value(&z).eq(&z), first)
                }
            };
            if full {
                store()?;
            } else {
                k.if_then(u.lt(&k.i32(units)), store)?;
            }
        }
        Ok(())
    }
}

/// Lanes sharing one 32-value quantization block: the power of two (1 to 16, each lane
/// keeping whole bytes of codes) that spreads `items` blocks over `threads` lanes best.
fn lanes_per_item(items: i64, threads: i64) -> i64 {
    let mut parts = 1;
    while parts < 16 && items * parts * 2 <= threads {
        parts *= 2;
    }
    parts
}

/// `act(gate, up)` in f32 on the device (the formulas of [`Activation`]), with
/// `sigmoid(x) = 1 / (1 + 2^(-x log2 e))`.
fn activation<'ctx>(
    k: &Kernel<'ctx>,
    act: Activation,
    gate: Value<'ctx>,
    up: Value<'ctx>,
) -> Result<Value<'ctx>> {
    let c = |v: f32| k.f32(v);
    // The hardware's exponential and reciprocal alone: an exponential below 2^-126 leaves
    // `1 + e` at 1 either way, and the reciprocal's ulp is inside the device error the
    // reference allows the activation (tilegen_mx::moe: 16 roundings of 2^-24).
    let sigmoid = |x: Value<'ctx>| -> Result<Value<'ctx>> {
        let e = k.exp2_ftz(k.fmul(x, c(-LOG2_E))?)?;
        k.rcp_approx(k.fadd(c(1.0), e)?)
    };
    match act {
        Activation::Swiglu => {
            let limit = tilegen_mx::moe::SWIGLU_LIMIT;
            // min(gate, 7) (a NaN gate gives 7, as f32::min does); clamp(up, -7, 7).
            let g = k.select(k.flt(gate, c(limit))?, gate, c(limit))?;
            let u = k.fmax(k.select(k.flt(up, c(limit))?, up, c(limit))?, c(-limit))?;
            let x = k.fmul(c(tilegen_mx::moe::SWIGLU_ALPHA), g)?;
            let f = k.fmul(g, sigmoid(x)?)?;
            k.fmul(f, k.fadd(u, c(1.0))?)
        }
        Activation::SiluMul => {
            let f = k.fmul(gate, sigmoid(gate)?)?;
            k.fmul(f, up)
        }
    }
}

/// The magnitude of an f32 given as its bits, as bits (the sign cleared).
fn magnitude<'k, 'ctx>(k: &'k Kernel<'ctx>, bits: &Int<'k, 'ctx>) -> Int<'k, 'ctx> {
    bits.and(&k.i32(0x7fff_ffff))
}

/// The largest magnitude of `bits` (f32 values as their bits), as bits: magnitudes of
/// non-negative floats order like their bits, and a NaN's bits lie above an infinity's.
fn block_amax<'k, 'ctx>(k: &'k Kernel<'ctx>, bits: &[Int<'k, 'ctx>]) -> Result<Int<'k, 'ctx>> {
    bits.iter()
        .map(|b| magnitude(k, b))
        .reduce(|a, b| a.max(&b))
        .ok_or_else(|| DslError::Missing("a block's values".into()))
}

/// OCP MXFP4 quantization of a 32-value block with maximum magnitude `amax`: the E8M0 scale
/// `2^(floor(log2(amax)) - 2)` clamped to the E8M0 range (127 for an all-zero block, 255 for
/// a block with a NaN, 254 for one with an infinity), and per element the E2M1 code of
/// `v / scale` rounded to nearest even and saturated. All in integers on the bits, so the
/// rounding thresholds are integer compares.
struct BlockScale<'k, 'ctx> {
    /// The E8M0 code.
    code: Int<'k, 'ctx>,
    /// `1 / scale` as an f32.
    recip: Value<'ctx>,
}

impl<'k, 'ctx> BlockScale<'k, 'ctx> {
    fn of(k: &'k Kernel<'ctx>, amax: Int<'k, 'ctx>) -> Result<Self> {
        let c = |v: i64| k.i32(v);
        let inf = c(0x7f80_0000);
        let exp = amax.shr(&c(23));
        let code = exp - 2;
        let code = c(0).select(code.lt(&c(0)), &code);
        let code = c(254).select(amax.eq(&inf), &code);
        let code = c(127).select(amax.eq(&c(0)), &code);
        let nan = inf.lt(&amax);
        let scale = c(255).select(nan, &code);
        // 1 / scale = 2^(127 - code): biased exponent 254 - code, or the denormal 2^-127.
        let recip = (c(254) - code).shl(&c(23));
        let recip = c(0x0040_0000).select(code.eq(&c(254)), &recip);
        let recip = k.bitcast(recip.into(), Ty::F32)?;
        Ok(BlockScale { code: scale, recip })
    }

    /// The E2M1 codes of `bits` packed 8 to a dword (element 2i in the low nibble of byte
    /// i); a last group of fewer than 8 fills the low nibbles of its dword.
    fn encode(&self, k: &'k Kernel<'ctx>, bits: &[Int<'k, 'ctx>]) -> Result<Vec<Int<'k, 'ctx>>> {
        let c = |v: i64| k.i32(v);
        // E2M1 magnitude codes 0..7, rounded to nearest even and saturated at 6. From 1.0 up
        // the f32 bits round to one mantissa bit (add half an ulp of it less one, plus the
        // kept bit for ties to even) and the exponent and that bit are the code (1.0 is 2;
        // past 6 it saturates to 7). Below 1.0 two thresholds: 0.25 < m gives 0.5 and
        // 0.75 <= m gives 1.0 (ties to the even code).
        let one = f32::to_bits(1.0) as i64;
        let half_ulp = (1i64 << 21) - 1;
        let code_of_one = (one >> 22) - 2;
        let below_one = [f32::to_bits(0.25) as i64, f32::to_bits(0.75) as i64 - 1];
        // A block with a NaN (scale code 255) has every code 0.
        let nan = self.code.eq(&c(255));
        let mut dwords = Vec::with_capacity(bits.len().div_ceil(8));
        for group in bits.chunks(8) {
            let mut d = c(0);
            for (i, b) in group.iter().enumerate() {
                let v = k.bitcast((*b).into(), Ty::F32)?;
                let q = k.bitcast(k.fmul(v, self.recip)?, Ty::I32)?.int(k)?;
                let m = magnitude(k, &q);
                let kept = m.shr(&c(22)).and(&c(1));
                let normal = ((m + c(half_ulp) + kept).shr(&c(22)) - c(code_of_one)).min(&c(7));
                let mut small = c(0);
                for &t in &below_one {
                    small = small + c(1).select(c(t).lt(&m), &c(0));
                }
                let e = small.select(m.lt(&c(one)), &normal);
                let sign = q.shr(&c(31)).shl(&c(3));
                let code = e.xor(&sign);
                let code = c(0).select(nan, &code);
                d = d.xor(&code.shl(&c(4 * i as i64)));
            }
            dwords.push(d);
        }
        Ok(dwords)
    }
}

/// Emits the down kernel of `spec`.
pub(crate) fn down<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &MoeSpec) -> Result<()> {
    let tile = spec.tile(Stage::Down);
    let th = Threads::new(k, tile.warps() as i64)?;
    let (_, p) = down_signature(spec.has_bias());
    let tokens = k.i32_arg(p.tokens)?;
    let topk = k.i32_arg(p.topk)?;
    let rows = k.i32_arg(p.rows)?;
    let n = k.i32_arg(p.n)?;
    let kdim = k.i32_arg(p.k)?;
    let (kb, ks) = (kdim / 2, kdim / SCALE_BLOCK);
    let bm = tile.bm as i64;
    let (bid_x, bid_y) = (k.block_id_x()?, k.block_id_y()?);
    let blocks = rows / bm;
    let expert = block_expert(k, p.block_expert, blocks, bid_y)?;
    let (b, sfb) = expert_b(
        k,
        p.w,
        p.w_scales,
        expert,
        n,
        kb,
        ks,
        tile.knobs().b_cache_policy,
    )?;
    let (slots, mma) = preb::mma_state(k, tile)?;
    let a_buf = k.buffer(k.ptr_arg(p.a)?, rows * kb, CachePolicy::Always)?;
    let sa_buf = k.buffer(
        k.ptr_arg(p.a_scales)?,
        preb::pad32(rows) * ks,
        CachePolicy::Always,
    )?;
    let a = RowsA {
        buf: a_buf,
        global: th.row_major(rows, kb, 1),
        tile: bid_y,
        sfa: Scales::new(k, sa_buf, preb::pad32(rows), ks)?,
    };
    // Columns of the output of the wave's accumulators; the biases are loaded before the main
    // loop, their latency hidden under its first stage's.
    let col_of = accum_index(k, tile, &th, &mma, n, bid_x, (0, 1))?;
    let bias = match p.bias {
        Some(bp) => Some(accum_bias(
            k,
            expert_bias(k, bp, expert, n)?,
            &col_of,
            &mma,
            n,
        )?),
        None => None,
    };
    let ids = k.buffer(k.ptr_arg(p.sorted_ids)?, rows * 4, CachePolicy::Always)?;
    let sorted = SortedRows::new(k, ids, bid_y, bm, topk);
    let pairs = tokens * topk;
    let weights = k.buffer(k.ptr_arg(p.weights)?, pairs * 4, CachePolicy::Always)?;
    // Rows of the block of the wave's accumulators.
    let row_of = accum_index(k, tile, &th, &mma, n, bid_x, (1, 0))?;
    let values = (mma.atom.shape_mnk()[0] * mma.atom.shape_mnk()[1] / 64) as usize;
    let (num_m, num_n) = (mma.num_m, mma.num_n);
    // Each MMA tile row's pair, token and routing weight: two dependent loads the combine
    // needs. Loaded after the main loop they follow its last MFMA (a decode block's whole K
    // loop is one or two steps, so they were a sixth of its time); loaded before it they
    // hold three registers per tile row through the loop, so only where the wave has at most
    // two tile rows. Otherwise every row's are loaded right after the loop, before the first
    // combine access (such a wave's combine is staged, and the staging records every row's
    // output row first): gfx950 counts stores and atomics in vmcnt too, so a load issued after
    // a row's atomics would wait for all of them to be acknowledged.
    let row_loads = |i: usize| -> Result<_> {
        // Every value of tile row i is in one row of the block (checked).
        let row = uniform_part(&row_of, i, num_n, values)?;
        let pair = sorted.pair(row)?;
        let token = token_of(pair, topk)?;
        let z = k.i32(0);
        let wz = Layout::new(pairs.idx(), Idx::Static(4))?.crd2idx(&Coord::Leaf(pair.idx()))?;
        let w = k.bitcast(k.buffer_load(&weights, wz.to_value(&z), z, 1)?, Ty::F32)?;
        Ok((row, pair, token, w))
    };
    let early = num_m <= 2;
    let mut loaded = if early {
        (0..num_m).map(row_loads).collect::<Result<Vec<_>>>()?
    } else {
        Vec::new()
    };
    let ml = Mainloop::new(tile, th, kdim, a, b, sfb, bid_x, slots, mma, false);
    ml.run()?;
    if !early {
        loaded = (0..num_m).map(row_loads).collect::<Result<Vec<_>>>()?;
    }
    let combine = spec.combine_kind();
    let (out, out_layout) = match combine {
        // `[tokens, n]` bf16.
        super::spec::Combine::Atomic => (
            k.buffer(k.ptr_arg(p.out)?, tokens * n * 2, CachePolicy::Always)?,
            Layout::new((tokens.idx(), n.idx()), ((n * 2).idx(), Idx::Static(2)))?,
        ),
        // `[pairs, n]` f32.
        super::spec::Combine::SortedReduce => (
            k.buffer(k.ptr_arg(p.out)?, pairs * n * 4, CachePolicy::Always)?,
            Layout::new((pairs.idx(), n.idx()), ((n * 4).idx(), Idx::Static(4)))?,
        ),
    };
    let staging = spec.combine_staging();
    let runs = column_runs(&ml.mma.atom, staging.vec as usize)?;
    let z = k.i32(0);
    // One access of the combine: its output row (token, or pair for the sorted reduce) and
    // column. Padding rows' output row is past the output's end (tokens, or tokens x topk), so
    // those adds and stores are dropped by the buffer, as are columns past `n`.
    let emit = |value: Value<'ctx>, out_row: Int<'k, 'ctx>, col: Int<'k, 'ctx>| -> Result<()> {
        let at = out_layout
            .crd2idx(&Coord::from((out_row.idx(), col.idx())))?
            .to_value(&z)
            .select(col.lt(&n), &out.records(k));
        match combine {
            super::spec::Combine::Atomic => k.buffer_atomic_fadd(&out, value, at, z),
            super::spec::Combine::SortedReduce => k.buffer_store(&out, value, at, z),
        }
    };
    let out_row = |pair: Int<'k, 'ctx>, token: Int<'k, 'ctx>| match combine {
        super::spec::Combine::Atomic => token,
        super::spec::Combine::SortedReduce => pair,
    };
    let stage = if spec.combine_staged() {
        let stage = CombineStage::new(k, spec, &th, bid_x, n)?;
        // The output row of each row of the block, which the rows read back from LDS look
        // up: written by every lane of its tile row.
        for &(row, pair, token, _) in &loaded {
            stage
                .rows
                .store(&Coord::Leaf(row.idx()), out_row(pair, token).into())?;
        }
        Some(stage)
    } else {
        None
    };
    for (i, &(_, pair, token, w)) in loaded.iter().enumerate() {
        let chunk = match &stage {
            Some(s) => Some(s.chunk(i, &ml.mma.atom)?),
            None => None,
        };
        for j in 0..num_n {
            let acc = ml.mma.accum_tile().load(&Coord::from((i, j)))?;
            let accs = k.split(acc, values as u32)?;
            for run in &runs {
                // The bias joins the expert's output before the routing weight scales it.
                let scaled: Vec<Value<'ctx>> = run
                    .iter()
                    .map(|&v| match &bias {
                        Some(b) => k.fmul(k.fadd(accs[v], b[j][v])?, w),
                        None => k.fmul(accs[v], w),
                    })
                    .collect::<Result<_>>()?;
                let value = k.concat(&scaled)?;
                let value = match staging.elem {
                    Elem::F32 => value,
                    elem => k.convert(value, elem)?,
                };
                let first = Coord::from((run[0] as i64, 0, j as i64));
                match (&stage, &chunk) {
                    (Some(stage), Some(chunk)) => {
                        let (u, l) = chunk.write.offsets(&first)?;
                        k.lds_store(&stage.lds, u + l, value, staging.access_bytes())?;
                    }
                    _ => {
                        let first = Coord::from((run[0] as i64, i as i64, j as i64));
                        let (u, l) = col_of.offsets(&first)?;
                        emit(value, out_row(pair, token), u + l)?;
                    }
                }
            }
        }
        if let (Some(stage), Some(chunk)) = (&stage, &chunk) {
            // Orders the wave's writes of this tile row before its reads of them (other
            // lanes' values) and, with the other buffer, its reads of the last row before its
            // next writes.
            k.barrier_lds_only()?;
            let [reads, groups] = chunk.reads;
            for t in 0..reads {
                for g in 0..groups {
                    let c = Coord::from((t, g));
                    let (ru, rl) = chunk.row.offsets(&c)?;
                    let (cu, cl) = chunk.col.offsets(&c)?;
                    let value = chunk.read.load_as(&c, staging.access_ty())?;
                    let row = stage.rows.load(&Coord::Leaf((ru + rl).idx()))?.int(k)?;
                    emit(value, row, cu + cl)?;
                }
            }
        }
    }
    Ok(())
}

/// The down kernel's combine through LDS. In the accumulators' layout a lane's values of one
/// MMA tile row are a few columns of one row, so an access straight from them touches as many
/// output rows (cache lines) as the tile has rows, each for a few bytes. Staged, each wave's
/// outputs of one tile row are read back row-major, so one access covers whole row segments
/// of its columns: for a 64-wide wave and the bf16 atomic, two 128-byte rows instead of
/// sixteen partial lines.
struct CombineStage<'k, 'ctx> {
    lds: tilegen_dsl::Lds<'ctx>,
    /// The output row (token or pair) of each row of the block, `[BM]` i32.
    rows: TileTensor<'k, 'ctx>,
    /// The staging buffers, `[2 x waves x atom rows, WN]` elements.
    whole: TileTensor<'k, 'ctx>,
    /// The same, in accesses of `vec` elements: `[2 x waves x atom rows, WN / vec]`.
    whole_read: TileTensor<'k, 'ctx>,
    /// The row in the block of each access of the wave's rows, `[BM, WN / vec]`.
    row_of: TileTensor<'k, 'ctx>,
    /// The output column of each read of a tile row.
    col_of: TileTensor<'k, 'ctx>,
    th: Threads<'k, 'ctx>,
    threads: Layout,
    atom_rows: i64,
    wn: i64,
    vec: i64,
}

/// One tile row's staging buffer of the wave.
struct Chunk<'k, 'ctx> {
    /// Written in the accumulators' layout: modes (value, 1, tile column).
    write: TileTensor<'k, 'ctx>,
    /// Read by the lane: modes (read, column group) of `vec`-element accesses.
    read: TileTensor<'k, 'ctx>,
    /// The row in the block and the output column of each read.
    row: TileTensor<'k, 'ctx>,
    col: TileTensor<'k, 'ctx>,
    /// Extents of the read modes.
    reads: [i64; 2],
}

impl<'k, 'ctx> CombineStage<'k, 'ctx> {
    fn new(
        k: &'k Kernel<'ctx>,
        spec: &MoeSpec,
        th: &Threads<'k, 'ctx>,
        bid_x: Int<'k, 'ctx>,
        n: Int<'k, 'ctx>,
    ) -> Result<Self> {
        let tile = spec.tile(Stage::Down);
        let staging = spec.combine_staging();
        let (bm, bn, wn) = (tile.bm as i64, tile.bn as i64, tile.wn as i64);
        let atom_rows = i64::from(tile.mma.mn());
        let (eb, vec) = (i64::from(staging.elem_bytes()), i64::from(staging.vec));
        let row_elems = staging.row_elems(tile.wn) as i64;
        let buffers = super::spec::CombineStaging::BUFFERS as i64 * th.warps * atom_rows;
        let lds_size = |what: &str, bytes: i64| {
            u32::try_from(bytes).map_err(|_| DslError::LdsSize {
                name: what.into(),
                bytes: bytes as u64,
            })
        };
        let out_row = super::spec::CombineStaging::OUT_ROW_BYTES as i64;
        let rows_lds = k.lds_alloc("moe_out_rows", lds_size("moe_out_rows", bm * out_row)?, 16)?;
        let lds = k.lds_alloc(
            "moe_out",
            lds_size("moe_out", buffers * row_elems * eb)?,
            16,
        )?;
        let rows = TileTensor::packed(
            k,
            Storage::Lds(rows_lds),
            dev_layout(&Layout::new(bm, 1)?)?,
            32,
        )?;
        let whole = TileTensor::packed(
            k,
            Storage::Lds(lds),
            dev_layout(&Layout::new((buffers, wn), (row_elems, 1))?)?,
            staging.elem.bits(),
        )?;
        let whole_read = whole.vectorize(&[1, vec])?;
        // Lanes along a row's accesses first, then down the rows: one read instruction covers
        // whole row segments.
        let lanes_per_row = (wn / vec).min(64);
        if 64 % lanes_per_row != 0 || (wn / vec) % lanes_per_row != 0 {
            return Err(DslError::Internal(format!(
                "a {wn}-wide wave's rows of {vec}-element accesses do not tile 64 lanes"
            )));
        }
        let threads = Layout::new((64 / lanes_per_row, lanes_per_row), (lanes_per_row, 1))?;
        if atom_rows % (64 / lanes_per_row) != 0 {
            return Err(DslError::Internal(format!(
                "{} rows a read do not tile the {atom_rows} rows of an MMA tile row",
                64 / lanes_per_row
            )));
        }
        let row_of = TileTensor::index(k, dev_layout(&Layout::new((bm, wn / vec), (1, 0))?)?);
        let col_of = TileTensor::index(
            k,
            Layout::new(
                (Idx::Static(atom_rows), n.idx()),
                (Idx::Static(0), Idx::Static(1)),
            )?,
        )
        .tile(&[atom_rows, bn], &[Idx::Static(0), bid_x.idx()])?
        .tile(&[atom_rows, wn], &[Idx::Static(0), th.wave.idx()])?
        .vectorize(&[1, vec])?
        .distribute(&threads, th.lane)?;
        Ok(CombineStage {
            lds,
            rows,
            whole,
            whole_read,
            row_of,
            col_of,
            th: *th,
            threads,
            atom_rows,
            wn,
            vec,
        })
    }

    /// Tile row `i`'s buffer of the wave (two alternate, so a row's writes never meet the last
    /// row's reads in the same bytes).
    fn chunk(&self, i: usize, atom: &impl MmaAtom) -> Result<Chunk<'k, 'ctx>> {
        let (rows, wn, vec) = (self.atom_rows, self.wn, self.vec);
        let which = self.th.wave.idx().add(&Idx::Static(
            (i as i64 % super::spec::CombineStaging::BUFFERS as i64) * self.th.warps,
        ));
        let write = self
            .whole
            .tile(&[rows, wn], &[which.clone(), Idx::Static(0)])?;
        let read = self
            .whole_read
            .tile(&[rows, wn / vec], &[which, Idx::Static(0)])?
            .distribute(&self.threads, self.th.lane)?;
        let reads = match read.layout().shape().static_leaves().as_deref() {
            Some(&[t, g]) => [t, g],
            _ => {
                return Err(DslError::NotStatic("the reads of a staged tile row"));
            }
        };
        let row = self
            .row_of
            .tile(&[rows, wn / vec], &[Idx::Static(i as i64), Idx::Static(0)])?
            .distribute(&self.threads, self.th.lane)?;
        Ok(Chunk {
            write: write.partition_c(atom, self.th.lane)?,
            read,
            row,
            col: self.col_of.clone(),
            reads,
        })
    }
}

/// The row (per lane) of every accumulator value of MMA tile row `i`, checked to be one row:
/// the values of a tile row differ only in their columns.
fn uniform_part<'k, 'ctx>(
    row_of: &TileTensor<'k, 'ctx>,
    i: usize,
    tiles_n: usize,
    values: usize,
) -> Result<Int<'k, 'ctx>> {
    let mut first = None;
    for j in 0..tiles_n {
        for v in 0..values {
            let (_, _, fixed, rest) =
                row_of.offset_parts(&Coord::from((v as i64, i as i64, j as i64)))?;
            if rest.static_value() != Some(0) {
                return Err(DslError::NotStatic("a value's row"));
            }
            if *first.get_or_insert(fixed) != fixed {
                return Err(DslError::Internal(format!(
                    "tile row {i} holds values of several rows of the block"
                )));
            }
        }
    }
    let (u, l) = row_of.offsets(&Coord::from((0, i as i64, 0)))?;
    Ok(u + l)
}

/// The accumulator values of one lane grouped into runs of `width` consecutive output
/// columns that one access covers (a packed bf16 atomic: 2 from an even column; a 4-dword
/// store or a 4-bias load: 4 from a multiple of 4), checked on the atom's C layout for every
/// lane.
fn column_runs(atom: &impl MmaAtom, width: usize) -> Result<Vec<Vec<usize>>> {
    let [m, n, _] = atom.shape_mnk();
    let values = (m * n / 64) as usize;
    let c = atom.c_layout();
    let col = |lane: i64, v: usize| -> Result<i64> {
        let idx = c
            .crd2idx(&Coord::from((lane, v as i64)))?
            .static_value()
            .ok_or_else(|| DslError::NotStatic("a lane's value in the accumulator layout"))?;
        Ok(idx / m)
    };
    let mut runs = Vec::new();
    for first in (0..values).step_by(width) {
        let run: Vec<usize> = (first..first + width).collect();
        for lane in 0..64 {
            let c0 = col(lane, first)?;
            if c0 % width as i64 != 0 {
                return Err(DslError::Internal(format!(
                    "lane {lane} value {first}: column {c0} does not start a run of {width}"
                )));
            }
            for (d, &v) in run.iter().enumerate() {
                if col(lane, v)? != c0 + d as i64 {
                    return Err(DslError::Internal(format!(
                        "lane {lane}: values {run:?} are not consecutive columns"
                    )));
                }
            }
        }
        runs.push(run);
    }
    Ok(runs)
}

/// Emits the reduce kernel: each work-item sums 4 columns of one token over its slots, in slot
/// order, and stores them as bf16.
pub(crate) fn reduce<'k, 'ctx>(k: &'k Kernel<'ctx>) -> Result<()> {
    let (_, p) = reduce_signature();
    let tid = k.thread_id()?;
    let tokens = k.i32_arg(p.tokens)?;
    let topk = k.i32_arg(p.topk)?;
    let n = k.i32_arg(p.n)?;
    let (bid_x, token) = (k.block_id_x()?, k.block_id_y()?);
    let pairs = tokens * topk;
    let parts = k.buffer(k.ptr_arg(p.parts)?, pairs * n * 4, CachePolicy::Streaming)?;
    let out = k.buffer(k.ptr_arg(p.out)?, tokens * n * 2, CachePolicy::Always)?;
    // Work-item `tid` of workgroup `x` sums columns `4 (256 x + tid) ..`.
    let (cols, threads) = (REDUCE_COLUMNS as i64, REDUCE_THREADS as i64);
    let col = Layout::new(
        (Idx::Static(threads), n.idx()),
        (Idx::Static(cols), Idx::Static(cols * threads)),
    )?
    .crd2idx(&Coord::from((tid.idx(), bid_x.idx())))?
    .to_value(&k.i32(0));
    let keep = col.lt(&n);
    let z = k.i32(0);
    // The contributions `[tokens * topk, n]` f32: pair `(token, slot)` is row `token topk + slot`.
    let parts_l = Layout::new(
        ((topk.idx(), tokens.idx()), n.idx()),
        (((n * 4).idx(), (n * 4 * topk).idx()), Idx::Static(4)),
    )?;
    let out_l = Layout::new((tokens.idx(), n.idx()), ((n * 2).idx(), Idx::Static(2)))?;
    let sum = k.var(k.zero(Ty::vector(Elem::F32, REDUCE_COLUMNS)))?;
    k.for_range(z, topk, 1, |slot| {
        let at = parts_l
            .crd2idx(&Coord::from(((slot.idx(), token.idx()), col.idx())))?
            .to_value(&z);
        let v = k.buffer_load(&parts, at.select(keep, &parts.records(k)), z, 4)?;
        let v = k.bitcast(v, Ty::vector(Elem::F32, REDUCE_COLUMNS))?;
        k.set(&sum, k.fadd(k.get(&sum)?, v)?)
    })?;
    let at = out_l
        .crd2idx(&Coord::from((token.idx(), col.idx())))?
        .to_value(&z);
    let v = k.convert(k.get(&sum)?, Elem::Bf16)?;
    k.buffer_store(&out, v, at.select(keep, &out.records(k)), z)
}

#[cfg(test)]
mod tests {
    use tilegen_dsl::{
        CachePolicy, CompileOptions, Context, Kernel, KernelAttrs, Signature, Ty, compile,
    };
    use tilegen_runtime::{ArgValue, Device, EmuDevice, LaunchConfig, launch};

    use super::{BlockScale, lanes_per_item};

    /// The device encoder against the host's E2M1 rounding (`tilegen_mx::encode_e2m1`)
    /// at every rounding midpoint, one ulp either side of each, the saturation range, zeros,
    /// subnormals and infinities, both signs; scale 1 (E8M0 127).
    #[test]
    fn e2m1_codes_match_the_host_at_every_midpoint() {
        let mut values = vec![0.0f32, f32::from_bits(1), 1e-30, 6.0, 6.5, 7.0, 8.0, 1e30];
        values.push(f32::INFINITY);
        for m in [
            0.25f32, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0,
        ] {
            values.extend([
                f32::from_bits(m.to_bits() - 1),
                m,
                f32::from_bits(m.to_bits() + 1),
            ]);
        }
        let negatives: Vec<f32> = values.iter().map(|v| -v).collect();
        values.extend(negatives);
        // 8 values a lane, one dword of codes each.
        values.resize(values.len().next_multiple_of(8), 0.0);
        let lanes = values.len() / 8;
        assert!(lanes <= 64);

        let ctx = Context::create();
        let mut sig = Signature::new();
        let buf_param = sig.global_ptr("buf");
        let attrs = KernelAttrs {
            workgroup_size: 64,
            waves_per_eu: None,
        };
        let k = Kernel::new(&ctx, "e2m1", &sig, attrs).unwrap();
        let lane = k.thread_id().unwrap();
        let buf = k
            .buffer(
                k.ptr_arg(buf_param).unwrap(),
                k.i32(64 * 36),
                CachePolicy::Always,
            )
            .unwrap();
        let bits = (0..2)
            .flat_map(|h| {
                let v = k
                    .buffer_load(&buf, lane * 32 + 16 * h, k.i32(0), 4)
                    .unwrap();
                k.split(v, 4).unwrap()
            })
            .map(|v| k.bitcast(v, Ty::I32).unwrap().int(&k).unwrap())
            .collect::<Vec<_>>();
        let scale = BlockScale {
            code: k.i32(127),
            recip: k.f32(1.0),
        };
        let codes = scale.encode(&k, &bits).unwrap();
        k.buffer_store(&buf, codes[0].into(), lane * 4 + 64 * 32, k.i32(0))
            .unwrap();
        k.finish().unwrap();
        let built = compile(&k, CompileOptions::default()).unwrap();

        let mut data: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        data.resize(64 * 36, 0);
        let dev = EmuDevice::new();
        let module = dev.load(&built.code_object).unwrap();
        let dbuf = dev.alloc(data.len() as u64).unwrap();
        dev.copy_to_device(dbuf, &data).unwrap();
        let config = LaunchConfig {
            grid: [1, 1, 1],
            block: [64, 1, 1],
            dynamic_lds: 0,
        };
        launch(&dev, &module, "e2m1", &config, &[ArgValue::Ptr(dbuf)]).unwrap();
        dev.copy_from_device(dbuf, &mut data).unwrap();
        for (l, chunk) in values.chunks(8).enumerate().take(lanes) {
            let at = 64 * 32 + 4 * l;
            let word = u32::from_le_bytes(data[at..at + 4].try_into().unwrap());
            for (i, &v) in chunk.iter().enumerate() {
                let got = (word >> (4 * i)) & 0xf;
                let want = tilegen_mx::encode_e2m1(v) as u32;
                assert_eq!(got, want, "{v:e} (bits {:#x})", v.to_bits());
            }
        }
    }

    #[test]
    fn quantization_blocks_spread_over_the_workgroup() {
        // A decode tile (BM 16, BN 64: 16 blocks) on 4 waves: 16 lanes a block, all 256 busy.
        assert_eq!(lanes_per_item(16, 256), 16);
        // Never more than 16 (a lane keeps whole bytes of codes), never fewer than 1.
        assert_eq!(lanes_per_item(1, 1024), 16);
        assert_eq!(lanes_per_item(64, 512), 8);
        assert_eq!(lanes_per_item(64, 128), 2);
        assert_eq!(lanes_per_item(128, 128), 1);
        assert_eq!(lanes_per_item(512, 256), 1);
        // Not a power of two: the largest power that does not leave a round part-empty.
        assert_eq!(lanes_per_item(24, 256), 8);
    }
}
