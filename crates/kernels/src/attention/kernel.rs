//! The main attention kernel: one (sequence, KV head, split) per workgroup, one partial per
//! wave (see the module documentation of [`super`]).

use tilegen_dsl::{
    Buffer, CachePolicy, Cond, DslError, Elem, I32Param, Int, Kernel, Lds, MmaAtom, PtrParam,
    Result, Signature, TileTensor, Ty, Value, dev_layout, waitcnt_vmcnt,
};
use tilegen_layout::{Coord, Idx, IndexValue, Layout};
use tilegen_mx::attention::{P_SCALE_LOG2, Q_SCALE_EXP_RANGE, sm_log2e};

use super::BLOCK_N;
use super::spec::AttentionSpec;
use crate::paged::{PagedRowIndices, RowCopy};
use crate::tile::atom::MFMA_16X16X128_FP8;
use crate::tile::loader::{KeyOrder, LdsTile, TiledMmaLoader};
use crate::tile::xcd::xcd_order;

/// `s_waitcnt lgkmcnt(0)` (vmcnt and expcnt at their maxima): every LDS read has returned.
const LGKMCNT_0: u32 = 0xF | (0x3 << 14) | (0x7 << 4);

/// Handles of the main kernel's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// `[batch, q_heads, head_dim]` bf16 output (one partial).
    pub out: PtrParam,
    /// `[batch, q_heads, head_dim]` bf16 queries.
    pub q: PtrParam,
    /// `[cache_rows, kv_heads, head_dim]` FP8 keys.
    pub k_cache: PtrParam,
    /// `[cache_rows, kv_heads, head_dim]` FP8 values.
    pub v_cache: PtrParam,
    /// `[batch, table_stride]` i32 pages (paged caches).
    pub block_table: PtrParam,
    /// `[batch]` i32 context lengths.
    pub context_lens: PtrParam,
    /// `[kv_heads]` f32 K scales.
    pub k_scales: PtrParam,
    /// `[kv_heads]` f32 V scales.
    pub v_scales: PtrParam,
    /// `[batch * q_heads, partials, head_dim]` f32 unnormalized partial outputs.
    pub part_o: PtrParam,
    /// `[batch * q_heads, partials, 2]` f32 partial max and sum.
    pub part_ml: PtrParam,
    /// Sequences.
    pub batch: I32Param,
    /// Block-table row length (paged) or rows per sequence (contiguous).
    pub table_stride: I32Param,
    /// Rows of the cache.
    pub cache_rows: I32Param,
}

/// The main kernel's signature and its handles.
pub fn signature() -> (Signature, Params) {
    let mut s = Signature::new();
    let p = Params {
        out: s.global_ptr("out"),
        q: s.global_ptr("q"),
        k_cache: s.global_ptr("k_cache"),
        v_cache: s.global_ptr("v_cache"),
        block_table: s.global_ptr("block_table"),
        context_lens: s.global_ptr("context_lens"),
        k_scales: s.global_ptr("k_scales"),
        v_scales: s.global_ptr("v_scales"),
        part_o: s.global_ptr("part_o"),
        part_ml: s.global_ptr("part_ml"),
        batch: s.i32("batch"),
        table_stride: s.i32("table_stride"),
        cache_rows: s.i32("cache_rows"),
    };
    (s, p)
}

/// `max(a, b)` of signed values.
fn imax<'k, 'ctx>(a: Int<'k, 'ctx>, b: Int<'k, 'ctx>) -> Int<'k, 'ctx> {
    b.select(a.lt(&b), &a)
}

/// A uniform f32 read of element `index` of `buf`.
fn load_f32<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    buf: &Buffer<'ctx>,
    index: Int<'k, 'ctx>,
) -> Result<Value<'ctx>> {
    let v = k.buffer_load(buf, k.i32(0), index * 4, 1)?;
    k.bitcast(v, Ty::F32)
}

/// The f32 `2^e` for a biased exponent field `e` in 1..=254.
fn pow2_from_field<'k, 'ctx>(k: &'k Kernel<'ctx>, field: Int<'k, 'ctx>) -> Result<Value<'ctx>> {
    k.bitcast(Value::from(field * (1 << 23)), Ty::F32)
}

/// Folds the scalars of `vals` (each a vector) with `op`.
fn fold<'ctx>(
    k: &Kernel<'ctx>,
    vals: &[Value<'ctx>],
    op: impl Fn(Value<'ctx>, Value<'ctx>) -> Result<Value<'ctx>>,
) -> Result<Value<'ctx>> {
    let mut scalars = Vec::new();
    for v in vals {
        for e in 0..v.ty().lanes {
            scalars.push(k.slice(*v, e, 1)?);
        }
    }
    // Pairwise, so the dependency chains stay short.
    while scalars.len() > 1 {
        let next = scalars
            .chunks(2)
            .map(|c| {
                if c.len() == 2 {
                    op(c[0], c[1])
                } else {
                    Ok(c[0])
                }
            })
            .collect::<Result<Vec<_>>>()?;
        scalars = next;
    }
    scalars
        .pop()
        .ok_or_else(|| DslError::Missing("a value to fold".into()))
}

/// Stores `value` at the view's element `coord` where `keep` holds (per lane): other lanes
/// point past the buffer's end, where stores are dropped.
fn store_where<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    buf: &Buffer<'ctx>,
    view: &TileTensor<'k, 'ctx>,
    coord: Coord<Int<'k, 'ctx>>,
    base: Int<'k, 'ctx>,
    value: Value<'ctx>,
    keep: Cond<'ctx>,
) -> Result<()> {
    let (uniform, lane) = view.offsets(&coord)?;
    let past = buf.records(k);
    let lane = k
        .select(keep, Value::from(lane), Value::from(past))?
        .int(k)?;
    let value = k.bitcast(value, Ty::dwords(value.ty().bytes() / 4))?;
    k.buffer_store(buf, value, lane, base + uniform)
}

/// Emits the main kernel for `spec` (validated).
pub fn build<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &AttentionSpec) -> Result<()> {
    let (_, p) = signature();
    let atom = MFMA_16X16X128_FP8;
    let [mn, _, kd] = atom.shape_mnk();
    let d = i64::from(spec.values().head_dim);
    let (hq, hk) = (
        i64::from(spec.values().q_heads),
        i64::from(spec.values().kv_heads),
    );
    let g = i64::from(spec.group());
    let waves = i64::from(spec.values().waves);
    let parts = i64::from(spec.partials());
    let bn = BLOCK_N as i64;
    let row_bytes = hk * d;

    let tid = k.thread_id()?;
    let wave = k.readfirstlane(tid / 64)?;
    let lane = tid % 64;
    let batch = k.i32_arg(p.batch)?;
    let pairs = batch * hk;
    let dispatched = k.block_id_x()? + k.block_id_y()? * pairs;
    let work = xcd_order(dispatched, pairs * i64::from(spec.values().split_kv));
    let (split, bx) = (work / pairs, work % pairs);
    let (b, h) = (bx / hk, bx % hk);
    let stride = k.i32_arg(p.table_stride)?;
    let cache_rows = k.i32_arg(p.cache_rows)?;
    let pidx = split * waves + wave;

    let buf = |param, bytes| k.buffer(k.ptr_arg(param)?, bytes, CachePolicy::Always);
    let cache_bytes = cache_rows * row_bytes;
    let kc = k.buffer(k.ptr_arg(p.k_cache)?, cache_bytes, CachePolicy::Streaming)?;
    let vc = k.buffer(k.ptr_arg(p.v_cache)?, cache_bytes, CachePolicy::Streaming)?;
    let lens = buf(p.context_lens, batch * 4)?;
    let table = buf(p.block_table, batch * stride * 4)?;
    let scales_k = buf(p.k_scales, k.i32(hk * 4))?;
    let scales_v = buf(p.v_scales, k.i32(hk * 4))?;
    let qb = buf(p.q, batch * (hq * d * 2))?;

    let len = k.buffer_load(&lens, k.i32(0), b * 4, 1)?.int(k)?;
    let len = k.readfirstlane(len)?;
    let tiles = (len + (bn - 1)) / bn;

    // ---- Q: the B operand (query heads of the group as columns, zero past the group).
    let q_row0 = b * hq + h * g;
    let q_layout = Layout::new((mn, kd), (2 * d, 2))?;
    let q_view = TileTensor::index(k, dev_layout(&q_layout)?).partition_b(&atom, lane)?;
    let q_cols = TileTensor::index(k, dev_layout(&Layout::new((mn, kd), (1, 0))?)?)
        .partition_b(&atom, lane)?;
    let (_, my_q) = q_cols.offsets(&Coord::from((0, 0, 0)))?;
    let q_live: Cond = my_q.lt(&k.i32(g)).into();
    // The lane's values come in runs of 16 contiguous K; runs past the head are zeros.
    let b_layout = atom.b_layout();
    let values = b_layout.mode(1)?.size().static_value().unwrap_or(0);
    let mut parts_q = Vec::new();
    for run in 0..values / 16 {
        let past = (0..64).all(|l| {
            let idx = b_layout
                .crd2idx(&(l, run * 16).into())
                .ok()
                .and_then(|i| i.static_value())
                .unwrap_or(0);
            idx / mn >= d
        });
        for half in 0..2 {
            if past {
                parts_q.push(k.zero(Ty::dwords(4)));
                continue;
            }
            let (uniform, lane_off) = q_view.offsets(&Coord::from((run * 16 + half * 8, 0, 0)))?;
            let v = k.buffer_load(&qb, lane_off, q_row0 * (2 * d) + uniform, 4)?;
            parts_q.push(v);
        }
    }
    let q_raw = k.bitcast(k.concat(&parts_q)?, Ty::vector(Elem::Bf16, 32))?;
    let q_f = k.convert(q_raw, Elem::F32)?;
    let q_f = k.select(q_live, q_f, k.zero(Ty::vector(Elem::F32, 32)))?;
    // Row amax over the four lanes holding the row, then a power-of-two scale.
    let mut amax = fold(k, &[k.fabs(q_f)?], |a, b| k.fmax(a, b))?;
    for mask in [16, 32] {
        amax = k.fmax(amax, k.shuffle_xor(amax, lane, mask)?)?;
    }
    let field = IndexValue::shr(&k.bitcast(amax, Ty::I32)?.int(k)?, &k.i32(23));
    let field = IndexValue::and(&field, &k.i32(255));
    // s = field - 134 clamped to the range: clamp the field (values stay non-negative).
    let (lo, hi) = (
        134 + Q_SCALE_EXP_RANGE.0 as i64,
        134 + Q_SCALE_EXP_RANGE.1 as i64,
    );
    let field = imax(field.min(&k.i32(hi)), k.i32(lo));
    // 2^-s has field 127 - s = 261 - field; 2^s has field s + 127 = field - 7.
    let inv = pow2_from_field(k, k.i32(261) - field)?;
    let two_s = pow2_from_field(k, field - 7)?;
    let q_s = k.fmul(q_f, k.splat(inv, 32)?)?;
    let q_op = pack_fp8(k, q_s)?;
    let sml = k.f32(sm_log2e(spec.values().sm_scale));
    let c = k.fmul(k.fmul(load_f32(k, &scales_k, h)?, sml)?, two_s)?;
    let c4 = k.splat(c, 4)?;

    // ---- LDS tiles, one K and one V slot per wave, and the lane's fragment reads.
    let slot = bn * d;
    let k_lds = k.lds_alloc("k_tiles", (waves * slot) as u32, 16)?;
    let v_lds = k.lds_alloc("v_tiles", (waves * slot) as u32, 16)?;
    let k_tile = LdsTile {
        lds: k_lds,
        base: wave * slot,
        layout: Layout::row_major((bn, d)),
        elem_bits: 8,
    };
    let v_tile = LdsTile {
        lds: v_lds,
        base: wave * slot,
        layout: Layout::new((d, bn), (1, d))?,
        elem_bits: 8,
    };
    let loader = TiledMmaLoader::new(atom);
    let k_reads = loader.a_reads(k, &k_tile, lane)?;
    let v_reads = loader.v_strip_reads(k, &v_tile, &atom, KeyOrder::Accumulator, lane)?;
    // The key (row of S^T) each accumulator holds, through the C layout.
    let keys = TileTensor::index(k, dev_layout(&Layout::new((bn, mn), (1, 0))?)?)
        .partition_c(&atom, lane)?;

    // ---- The loop over this partial's tiles.
    let neg_inf = k.f32(f32::NEG_INFINITY);
    let m_var = k.var(neg_inf)?;
    let l_var = k.var(k.f32(0.0))?;
    let acc_ty = Ty::vector(Elem::F32, atom.shape.acc_dwords());
    let depth_tiles = d / mn;
    let acc_vars = (0..depth_tiles)
        .map(|_| k.var(k.zero(acc_ty)))
        .collect::<Result<Vec<_>>>()?;
    let tile = spec.tile().map_err(|e| DslError::Plan {
        what: "the attention tile",
        source: Box::new(e),
    })?;
    let page = i64::from(spec.values().page_size);
    let copy = CopyPlan {
        d,
        row_bytes,
        head: h,
        len,
        lane,
        cache_rows,
        tile_loads: (bn * d / 1024) as u32,
    };
    // The block-table entries of the tile at `kv0`, one per page piece (as `populate` asks for
    // them), read as VMEM loads; pieces past the sequence read its last page (any valid page
    // will do: their rows are masked).
    let load_entries = |kv0: Int<'k, 'ctx>| -> Result<Vec<Value<'ctx>>> {
        if page == 0 {
            return Ok(Vec::new());
        }
        let last = (len - 1) / page;
        (0..i64::from(tile.num_pages()))
            .map(|j| {
                let i = ((kv0 + j * i64::from(tile.eff_page())) / page).min(&last);
                k.buffer_load(&table, k.i32(0), (b * stride + i) * 4, 1)
            })
            .collect()
    };
    // The tile's rows from entries `load_entries` read (landed).
    let indices = |kv0: Int<'k, 'ctx>, entries: &[Value<'ctx>]| {
        if page == 0 {
            return PagedRowIndices::populate(tile, &(b * stride + kv0), |_| {
                Err(DslError::Internal("a contiguous cache has no pages".into()))
            });
        }
        let mut next = entries.iter();
        PagedRowIndices::populate(tile, &kv0, |_: &Int<'_, '_>| {
            let e = next.next().ok_or_else(|| {
                DslError::Missing("a block-table entry of the tile's pages".into())
            })?;
            k.readfirstlane(e.int(k)?)
        })
    };
    let paged = |e: crate::paged::PagedError| DslError::Plan {
        what: "the KV tile's copies",
        source: Box::new(e),
    };
    // Loads per K or V tile (1 KB each): what the first wait below leaves outstanding.
    let tile_loads = copy.tile_loads;
    // Two stages in flight per wave: while S of tile t is computed, V of t loads; while PV of t
    // is computed, K of the partial's next tile loads. The issue order K(t), T(t+), V(t)
    // (T: the next tile's block-table entries) keeps each wait a count of the loads issued
    // after what it waits for. The loads of the tile after the partial's last are all past
    // the sequence's end: masked, they read no memory.
    let step = parts * bn;
    let kv_first = pidx * bn;
    let entries = load_entries(kv_first)?;
    let first = indices(kv_first, &entries)?;
    copy.stage(
        k,
        &kc,
        &k_tile,
        &first.k_copies(None).map_err(paged)?,
        kv_first,
    )?;
    let next_vars = load_entries(kv_first + step)?
        .into_iter()
        .map(|e| k.var(e))
        .collect::<Result<Vec<_>>>()?;
    copy.stage(
        k,
        &vc,
        &v_tile,
        &first.v_copies(1, 0, None).map_err(paged)?,
        kv_first,
    )?;
    k.for_range(pidx, tiles, parts, |t| {
        let kv0 = t * bn;
        let kv_next = kv0 + step;
        // K(t) and T(t+) have landed when at most V(t)'s loads are outstanding.
        k.s_waitcnt(waitcnt_vmcnt(tile_loads))?;

        // S^T = K Q^T, scaled to log2 units and masked past the sequence.
        let zero = k.zero(acc_ty);
        let mut x = Vec::new();
        for kt in 0..bn / mn {
            let a = loader.read(k, &k_reads, &k_tile, [kt, 0], 0)?;
            let s = atom.mma(k, a, q_op, zero)?;
            let s = k.fmul(s, c4)?;
            let mut elems = Vec::new();
            for e in 0..acc_ty.lanes {
                let (u, l) = keys.offsets(&Coord::from((i64::from(e), kt, 0)))?;
                let key = kv0 + u + l;
                let valid: Cond = key.lt(&len).into();
                elems.push(k.select(valid, k.slice(s, e, 1)?, neg_inf)?);
            }
            x.push(k.concat(&elems)?);
        }
        let mut tmax = fold(k, &x, |a, b| k.fmax(a, b))?;
        for mask in [16, 32] {
            tmax = k.fmax(tmax, k.shuffle_xor(tmax, lane, mask)?)?;
        }
        let m_old = k.get(&m_var)?;
        let m_new = k.fmax(m_old, tmax)?;
        let alpha = k.exp2(k.fsub(m_old, m_new)?)?;
        let m4 = k.splat(m_new, 4)?;
        let probs = x
            .iter()
            .map(|xv| k.exp2(k.fsub(*xv, m4)?))
            .collect::<Result<Vec<_>>>()?;
        let psum = fold(k, &probs, |a, b| k.fadd(a, b))?;
        let l_new = k.fadd(k.fmul(k.get(&l_var)?, alpha)?, psum)?;
        k.set(&l_var, l_new)?;
        k.set(&m_var, m_new)?;
        // P in FP8, packed in accumulator order: byte 4 kt + v.
        let p_scale = k.splat(k.f32((1u32 << P_SCALE_LOG2) as f32), 4)?;
        let scaled = probs
            .iter()
            .map(|pv| k.fmul(*pv, p_scale))
            .collect::<Result<Vec<_>>>()?;
        let p_op = pack_fp8(k, k.concat(&scaled)?)?;
        // V(t) (issued after T(t+)) has landed once nothing is outstanding; its strips are
        // read before the next K is issued, else LLVM makes the reads wait for that K's
        // LDS-DMA loads too (it does not tell the slots apart). The barrier keeps the
        // scheduler from hoisting the reads, and with them the wait, over the softmax.
        k.sched_barrier(0)?;
        k.s_waitcnt(waitcnt_vmcnt(0))?;
        let strips = (0..depth_tiles)
            .map(|dt| loader.load_v_fp8_strip(k, &v_reads, &v_tile, 0, dt))
            .collect::<Result<Vec<_>>>()?;
        // The next tile's K into the K slot (its reads were consumed by the S MFMAs), and the
        // block-table entries of the tile after it; they load under PV.
        k.sched_barrier(0)?;
        let entries = next_vars
            .iter()
            .map(|v| k.get(v))
            .collect::<Result<Vec<_>>>()?;
        let next = indices(kv_next, &entries)?;
        copy.stage(
            k,
            &kc,
            &k_tile,
            &next.k_copies(None).map_err(paged)?,
            kv_next,
        )?;
        for (v, e) in next_vars.iter().zip(load_entries(kv_next + step)?) {
            k.set(v, e)?;
        }
        // O^T = O^T alpha + V^T P^T.
        let alpha4 = k.splat(alpha, 4)?;
        for (strip, var) in strips.into_iter().zip(&acc_vars) {
            let c_in = k.fmul(k.get(var)?, alpha4)?;
            k.set(var, atom.mma(k, strip, p_op, c_in)?)?;
        }
        // The next tile's V into the V slot once its reads are done.
        k.sched_barrier(0)?;
        k.s_waitcnt(LGKMCNT_0)?;
        copy.stage(
            k,
            &vc,
            &v_tile,
            &next.v_copies(1, 0, None).map_err(paged)?,
            kv_next,
        )?;
        Ok(())
    })?;

    // ---- The partial's result.
    let mut l_tot = k.get(&l_var)?;
    for mask in [16, 32] {
        l_tot = k.fadd(l_tot, k.shuffle_xor(l_tot, lane, mask)?)?;
    }
    // Accumulator (depth, q) positions through the C layout; columns past the group are
    // other heads' rows and are not written.
    let q_of_c = TileTensor::index(k, dev_layout(&Layout::new((mn, mn), (0, 1))?)?)
        .partition_c(&atom, lane)?;
    let (_, my_col) = q_of_c.offsets(&Coord::from((0, 0, 0)))?;
    let c_live: Cond = my_col.lt(&k.i32(g)).into();
    if !spec.needs_reduce() {
        let mut acc = acc_vars
            .iter()
            .map(|v| k.get(v))
            .collect::<Result<Vec<_>>>()?;
        let mut l_tot = l_tot;
        if waves > 1 {
            (acc, l_tot) = merge_waves(k, spec, &k_lds, wave, lane, &acc, k.get(&m_var)?, l_tot)?;
        }
        let write = || -> Result<()> {
            let out = buf(p.out, batch * (hq * d * 2))?;
            let vs = load_f32(k, &scales_v, h)?;
            let denom = k.fmul(l_tot, k.f32((1u32 << P_SCALE_LOG2) as f32))?;
            let f = k.fdiv(vs, denom)?;
            let has = k.flt(k.f32(0.0), l_tot)?;
            let f4 = k.splat(k.select(has, f, k.f32(0.0))?, 4)?;
            let view = TileTensor::index(k, dev_layout(&Layout::new((d, mn), (2, 2 * d))?)?)
                .partition_c(&atom, lane)?;
            for (dt, a) in acc.iter().enumerate() {
                let o = k.convert(k.fmul(*a, f4)?, Elem::Bf16)?;
                let coord = Coord::from((0, dt as i64, 0));
                store_where(k, &out, &view, coord, q_row0 * (2 * d), o, c_live)?;
            }
            Ok(())
        };
        if waves > 1 {
            // Every wave merged the same values; wave 0 writes them.
            k.if_then(wave.eq(&k.i32(0)), write)?;
        } else {
            write()?;
        }
    } else {
        let part_o = buf(p.part_o, batch * (hq * parts * d * 4))?;
        let part_ml = buf(p.part_ml, batch * (hq * parts * 8))?;
        let view = TileTensor::index(k, dev_layout(&Layout::new((d, mn), (4, 4 * parts * d))?)?)
            .partition_c(&atom, lane)?;
        let base = (q_row0 * parts + pidx) * (4 * d);
        for (dt, var) in acc_vars.iter().enumerate() {
            let coord = Coord::from((0, dt as i64, 0));
            store_where(k, &part_o, &view, coord, base, k.get(var)?, c_live)?;
        }
        // Every lane of a query column holds its (m, l); they all write the same bytes.
        let ml_view = TileTensor::index(k, dev_layout(&Layout::new((mn, mn), (0, 8 * parts))?)?)
            .partition_c(&atom, lane)?;
        let ml = k.concat(&[k.get(&m_var)?, l_tot])?;
        let base = (q_row0 * parts + pidx) * 8;
        store_where(
            k,
            &part_ml,
            &ml_view,
            Coord::from((0, 0, 0)),
            base,
            ml,
            c_live,
        )?;
    }
    Ok(())
}

/// Merges the partials of a workgroup's waves (`split_kv == 1`) in LDS, as the reduce kernel
/// merges partials (in wave order: `O = sum w_p O_p`, `L = sum w_p l_p`,
/// `w_p = 2^(m_p - max m)` over the partials that saw keys): each wave leaves its accumulators,
/// max and sum in its own K slot, lane-private, and every wave merges all of them. Returns the
/// merged accumulators and sum.
#[allow(clippy::too_many_arguments)]
fn merge_waves<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    spec: &AttentionSpec,
    k_lds: &Lds<'ctx>,
    wave: Int<'k, 'ctx>,
    lane: Int<'k, 'ctx>,
    acc: &[Value<'ctx>],
    m: Value<'ctx>,
    l: Value<'ctx>,
) -> Result<(Vec<Value<'ctx>>, Value<'ctx>)> {
    let slot = BLOCK_N as i64 * i64::from(spec.values().head_dim);
    let tile_bytes = 64 * 16;
    let ml_at = acc.len() as i64 * tile_bytes;
    // The slots are reused: the wave's LDS-DMA loads (the masked ones past the sequence's end
    // too) must have landed, and the barrier does not wait for them.
    k.s_waitcnt(waitcnt_vmcnt(0))?;
    let mine = wave * slot + lane * 16;
    for (dt, a) in acc.iter().enumerate() {
        k.lds_store(k_lds, mine + dt as i64 * tile_bytes, *a, 16)?;
    }
    let ml = k.concat(&[m, l])?;
    k.lds_store(k_lds, wave * slot + ml_at + lane * 8, ml, 8)?;
    k.barrier_lds_only()?;
    let zero = k.f32(0.0);
    let ml_of = |w: i64| -> Result<(Value<'ctx>, Value<'ctx>)> {
        let v = k.lds_load(
            k_lds,
            lane * 8 + (w * slot + ml_at),
            Ty::vector(Elem::F32, 2),
            8,
        )?;
        Ok((k.slice(v, 0, 1)?, k.slice(v, 1, 1)?))
    };
    let waves = i64::from(spec.values().waves);
    let mut big_m = k.f32(f32::NEG_INFINITY);
    for w in 0..waves {
        let (m, l) = ml_of(w)?;
        big_m = k.select(k.flt(zero, l)?, k.fmax(big_m, m)?, big_m)?;
    }
    let acc_ty = acc
        .first()
        .map(|a| a.ty())
        .ok_or_else(|| DslError::Missing("an accumulator".into()))?;
    let mut o = vec![k.zero(acc_ty); acc.len()];
    let mut l_all = zero;
    for w in 0..waves {
        let (m, l) = ml_of(w)?;
        let weight = k.select(k.flt(zero, l)?, k.exp2(k.fsub(m, big_m)?)?, zero)?;
        l_all = k.fadd(l_all, k.fmul(weight, l)?)?;
        let w4 = k.splat(weight, acc_ty.lanes)?;
        for (dt, o) in o.iter_mut().enumerate() {
            let at = lane * 16 + (w * slot + dt as i64 * tile_bytes);
            let v = k.lds_load(k_lds, at, acc_ty, 16)?;
            *o = k.fadd(*o, k.fmul(v, w4)?)?;
        }
    }
    Ok((o, l_all))
}

/// `vals` (`<32 x f32>`, already scaled into FP8's range) as 32 FP8 E4M3 codes, `<8 x i32>`,
/// element `i` at byte `i`.
fn pack_fp8<'ctx>(k: &Kernel<'ctx>, vals: Value<'ctx>) -> Result<Value<'ctx>> {
    let mut dwords = Vec::new();
    for i in 0..vals.ty().lanes / 4 {
        let e = |j: u32| k.slice(vals, 4 * i + j, 1);
        let lo = k.cvt_pk_fp8(e(0)?, e(1)?, Value::from(k.i32(0)), false)?;
        dwords.push(k.cvt_pk_fp8(e(2)?, e(3)?, lo, true)?);
    }
    k.concat(&dwords)
}

/// How one tile's rows reach LDS: each [`RowCopy`] of the tile's [`PagedRowIndices`] is whole
/// 1 KB wave loads of consecutive cache rows (a page piece is at least 16 rows, a load at most
/// 16 rows of 64 bytes). Both tiles are stored as key rows (`[key][byte]`, row-major); the V
/// tile's [`LdsTile`] views the same bytes as `(depth, key)`.
struct CopyPlan<'k, 'ctx> {
    d: i64,
    row_bytes: i64,
    head: Int<'k, 'ctx>,
    len: Int<'k, 'ctx>,
    lane: Int<'k, 'ctx>,
    cache_rows: Int<'k, 'ctx>,
    /// Loads a whole tile takes; the kernel's waits count on it.
    tile_loads: u32,
}

impl<'k, 'ctx> CopyPlan<'k, 'ctx> {
    fn stage(
        &self,
        k: &'k Kernel<'ctx>,
        cache: &Buffer<'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        copies: &[RowCopy<Int<'k, 'ctx>>],
        kv0: Int<'k, 'ctx>,
    ) -> Result<()> {
        let d = self.d;
        let chunks = d / 16;
        let rows_per_load = 64 / chunks;
        // Lane -> (row, 16-byte chunk) of one load.
        let per_load = dev_layout(&Layout::row_major((rows_per_load, chunks)))?;
        let (row_l, chunk) = match per_load.idx2crd(&self.lane.idx())? {
            Coord::Tuple(c) => match c.as_slice() {
                [Coord::Leaf(r), Coord::Leaf(c)] => (r.clone(), c.clone()),
                _ => {
                    return Err(DslError::Modes {
                        what: "a lane's (row, chunk) coordinate",
                        expected: 2,
                        found: c.len(),
                    });
                }
            },
            _ => {
                return Err(DslError::Modes {
                    what: "a lane's (row, chunk) coordinate",
                    expected: 2,
                    found: 1,
                });
            }
        };
        // Cache (row, head, byte) -> offset; LDS (key row, byte) -> offset.
        let src = Layout::<Int<'k, 'ctx>>::new(
            (
                self.cache_rows.idx(),
                Idx::Static(self.row_bytes / d),
                Idx::Static(d),
            ),
            (Idx::Static(self.row_bytes), Idx::Static(d), Idx::Static(1)),
        )?;
        let storage = dev_layout(&Layout::row_major((BLOCK_N as i64, d)))?;
        let z = k.i32(0);
        let lane_src = src
            .crd2idx(&Coord::from((
                row_l.clone(),
                Idx::Static(0),
                chunk.mul(&Idx::Static(16)),
            )))?
            .to_value(&z);
        let past = Value::from(cache.records(k));
        let mut loads = 0;
        for c in copies {
            if i64::from(c.rows) % rows_per_load != 0 {
                return Err(DslError::Internal(format!(
                    "a copy of {} rows is not whole loads of {rows_per_load} rows",
                    c.rows
                )));
            }
            for i in 0..i64::from(c.rows) / rows_per_load {
                let r = i64::from(c.dst_row) + i * rows_per_load;
                let first = c.src_row + i * rows_per_load;
                let uniform = src
                    .crd2idx(&Coord::from((first.idx(), self.head.idx(), Idx::Static(0))))?
                    .to_value(&z);
                let key = kv0 + r + row_l.to_value(&z);
                let live: Cond = key.lt(&self.len).into();
                let lane_off = k.select(live, Value::from(lane_src), past)?.int(k)?;
                let at = storage
                    .crd2idx(&Coord::from((Idx::Static(r), Idx::Static(0))))?
                    .to_value(&z);
                k.buffer_load_to_lds(cache, &tile.lds, tile.base + at, lane_off, uniform, 16)?;
                loads += 1;
            }
        }
        if loads != self.tile_loads {
            return Err(DslError::Internal(format!(
                "a tile took {loads} loads, the waits count {}",
                self.tile_loads
            )));
        }
        Ok(())
    }
}
