//! The main attention kernel: one (sequence, KV head, split) per workgroup, one partial per
//! wave (see the module documentation of [`super`]).

use tilegen_dsl::{
    Buffer, CachePolicy, Cond, DslError, Elem, I32Param, Int, Kernel, Lds, MmaAtom, PtrParam,
    Result, Signature, TileTensor, Ty, Value, dev_layout, waitcnt_vmcnt,
};
use tilegen_layout::{Coord, IndexValue, Layout};
use tilegen_mx::attention::{P_SCALE_LOG2, Q_SCALE_EXP_RANGE, sm_log2e};

use super::BLOCK_N;
use super::mainloop::Mainloop;
use super::spec::AttentionSpec;
use crate::tile::atom::{F8f6f4, MFMA_16X16X128_FP8};
use crate::tile::xcd::xcd_order;

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
    /// `[batch * kv_heads]` counters of the partials written, a u32 per 128-byte line (a
    /// fused reduce; zero between launches).
    pub counters: PtrParam,
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
        counters: s.global_ptr("counters"),
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
pub(super) fn fold<'ctx>(
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

/// Emits the main kernel for `spec` (validated): the workgroup's work and buffers, the query
/// as an FP8 operand, the loop over the wave's key tiles ([`Mainloop`]), then the wave's
/// partial (or, with one workgroup per (sequence, KV head), the output).
pub fn build<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &AttentionSpec) -> Result<()> {
    let (_, p) = signature();
    let wg = Workgroup::new(k, spec, p)?;
    let q = Query::load(&wg)?;
    let ml = Mainloop::new(&wg, &q)?;
    ml.run()?;
    epilogue(&wg, &q, &ml)
}

/// What a workgroup works on, for every part of the kernel: its (sequence, KV head, split),
/// the wave's partial, the sequence's length and the buffers read throughout.
pub(super) struct Workgroup<'s, 'k, 'ctx> {
    pub(super) k: &'k Kernel<'ctx>,
    pub(super) spec: &'s AttentionSpec,
    /// The kernel's parameters.
    pub(super) p: Params,
    /// The MFMA of both products (`S^T = K Q^T`, `O^T += V^T P^T`).
    pub(super) atom: F8f6f4,
    /// Head size.
    pub(super) d: i64,
    /// Query heads.
    pub(super) hq: i64,
    /// Bytes of one cache row (every KV head's `d` bytes).
    pub(super) row_bytes: i64,
    /// Query heads per KV head.
    pub(super) g: i64,
    /// Waves per workgroup, each its own partial.
    pub(super) waves: i64,
    /// Partials per (sequence, KV head): `split_kv * waves`.
    pub(super) parts: i64,
    /// The wave (uniform).
    pub(super) wave: Int<'k, 'ctx>,
    /// The lane in the wave.
    pub(super) lane: Int<'k, 'ctx>,
    /// Sequences.
    pub(super) batch: Int<'k, 'ctx>,
    /// The sequence.
    pub(super) b: Int<'k, 'ctx>,
    /// The KV head.
    pub(super) h: Int<'k, 'ctx>,
    /// Block-table row length (paged) or rows per sequence (contiguous).
    pub(super) stride: Int<'k, 'ctx>,
    /// Rows of the cache.
    pub(super) cache_rows: Int<'k, 'ctx>,
    /// The wave's partial, `split * waves + wave`.
    pub(super) pidx: Int<'k, 'ctx>,
    /// The (sequence, KV head) pair, `b * kv_heads + h`.
    pub(super) pair: Int<'k, 'ctx>,
    /// The K and V caches (streamed: each workgroup reads its rows once).
    pub(super) kc: Buffer<'ctx>,
    pub(super) vc: Buffer<'ctx>,
    /// The block table.
    pub(super) table: Buffer<'ctx>,
    /// The per-KV-head K and V scales.
    pub(super) scales_k: Buffer<'ctx>,
    pub(super) scales_v: Buffer<'ctx>,
    /// The queries.
    pub(super) qb: Buffer<'ctx>,
    /// The sequence's length (uniform).
    pub(super) len: Int<'k, 'ctx>,
    /// Its tiles of [`BLOCK_N`] keys.
    pub(super) tiles: Int<'k, 'ctx>,
}

impl<'s, 'k, 'ctx> Workgroup<'s, 'k, 'ctx> {
    /// Finds the workgroup's work (in XCD order, see the module documentation of [`super`])
    /// and reads the sequence's length.
    fn new(k: &'k Kernel<'ctx>, spec: &'s AttentionSpec, p: Params) -> Result<Self> {
        let atom = MFMA_16X16X128_FP8;
        let d = i64::from(spec.values().head_dim);
        let (hq, hk) = (
            i64::from(spec.values().q_heads),
            i64::from(spec.values().kv_heads),
        );
        let waves = i64::from(spec.values().waves);
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

        let buf = |param, bytes| cached_buffer(k, param, bytes);
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
        Ok(Workgroup {
            k,
            spec,
            p,
            atom,
            d,
            hq,
            row_bytes,
            g: i64::from(spec.group()),
            waves,
            parts: i64::from(spec.partials()),
            wave,
            lane,
            batch,
            b,
            h,
            stride,
            cache_rows,
            pidx,
            pair: bx,
            kc,
            vc,
            table,
            scales_k,
            scales_v,
            qb,
            len,
            tiles,
        })
    }

    /// A buffer over `param`'s `bytes`, cached as usual.
    fn buffer(&self, param: PtrParam, bytes: Int<'k, 'ctx>) -> Result<Buffer<'ctx>> {
        cached_buffer(self.k, param, bytes)
    }
}

/// A buffer over `param`'s `bytes`, cached as usual: every buffer but the KV cache, which
/// is streamed.
fn cached_buffer<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    param: PtrParam,
    bytes: Int<'k, 'ctx>,
) -> Result<Buffer<'ctx>> {
    k.buffer(k.ptr_arg(param)?, bytes, CachePolicy::Always)
}

/// The query as the B operand of `S^T = K Q^T`: the query heads of the group as columns,
/// zero past the group, quantized to FP8 once per workgroup.
pub(super) struct Query<'k, 'ctx> {
    /// The group's first row of `q` (and of `out`).
    pub(super) row0: Int<'k, 'ctx>,
    /// The lane's FP8 fragment.
    pub(super) op: Value<'ctx>,
    /// What turns the lane's scores into log2 units, splatted over an accumulator: the K
    /// scale, `sm_scale * log2(e)`, and the power of two Q was scaled by.
    pub(super) c4: Value<'ctx>,
}

impl<'k, 'ctx> Query<'k, 'ctx> {
    /// Loads the group's queries and quantizes them.
    fn load(wg: &Workgroup<'_, 'k, 'ctx>) -> Result<Self> {
        let k = wg.k;
        let row0 = wg.b * wg.hq + wg.h * wg.g;
        let q_f = Self::load_f32(wg, row0)?;
        let (op, two_s) = Self::quantize(wg, q_f)?;
        let sml = k.f32(sm_log2e(wg.spec.values().sm_scale));
        let c = k.fmul(k.fmul(load_f32(k, &wg.scales_k, wg.h)?, sml)?, two_s)?;
        let c4 = k.splat(c, 4)?;
        Ok(Query { row0, op, c4 })
    }

    /// The lane's B fragment of the bf16 queries from row `row0`, in f32, zero in columns past
    /// the group and in K past the head.
    fn load_f32(wg: &Workgroup<'_, 'k, 'ctx>, row0: Int<'k, 'ctx>) -> Result<Value<'ctx>> {
        let (k, atom, d, lane) = (wg.k, wg.atom, wg.d, wg.lane);
        let [mn, _, kd] = atom.shape_mnk();
        let q_layout = Layout::new((mn, kd), (2 * d, 2))?;
        let q_view = TileTensor::index(k, dev_layout(&q_layout)?).partition_b(&atom, lane)?;
        let q_cols = TileTensor::index(k, dev_layout(&Layout::new((mn, kd), (1, 0))?)?)
            .partition_b(&atom, lane)?;
        let (_, my_q) = q_cols.offsets(&Coord::from((0, 0, 0)))?;
        let q_live: Cond = my_q.lt(&k.i32(wg.g)).into();
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
                let (uniform, lane_off) =
                    q_view.offsets(&Coord::from((run * 16 + half * 8, 0, 0)))?;
                let v = k.buffer_load(&wg.qb, lane_off, row0 * (2 * d) + uniform, 4)?;
                parts_q.push(v);
            }
        }
        let q_raw = k.bitcast(k.concat(&parts_q)?, Ty::vector(Elem::Bf16, 32))?;
        let q_f = k.convert(q_raw, Elem::F32)?;
        k.select(q_live, q_f, k.zero(Ty::vector(Elem::F32, 32)))
    }

    /// `q_f` scaled by a power of two `2^-s` per row, so the row's amax lands near FP8's top,
    /// in FP8; with `2^s`, which the scores are scaled back by.
    fn quantize(
        wg: &Workgroup<'_, 'k, 'ctx>,
        q_f: Value<'ctx>,
    ) -> Result<(Value<'ctx>, Value<'ctx>)> {
        let k = wg.k;
        // Row amax over the four lanes holding the row, then a power-of-two scale.
        let mut amax = fold(k, &[k.fabs(q_f)?], |a, b| k.fmax(a, b))?;
        for mask in [16, 32] {
            amax = k.fmax(amax, k.shuffle_xor(amax, wg.lane, mask)?)?;
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
        Ok((pack_fp8(k, q_s)?, two_s))
    }
}

/// Writes the wave's result once its tiles are done. The row sum is summed over the four
/// lanes of a query column only now (the loop carries each lane's share). With one workgroup
/// per (sequence, KV head) the waves merge their partials and the output is written, else the
/// partial is, for the reduce kernel.
fn epilogue<'k, 'ctx>(
    wg: &Workgroup<'_, 'k, 'ctx>,
    q: &Query<'k, 'ctx>,
    ml: &Mainloop<'_, '_, 'k, 'ctx>,
) -> Result<()> {
    let (k, atom, lane) = (wg.k, wg.atom, wg.lane);
    let [mn, _, _] = atom.shape_mnk();
    let mut l_tot = k.get(&ml.l)?;
    for mask in [16, 32] {
        l_tot = k.fadd(l_tot, k.shuffle_xor(l_tot, lane, mask)?)?;
    }
    // Accumulator (depth, q) positions through the C layout; columns past the group are
    // other heads' rows and are not written.
    let q_of_c = TileTensor::index(k, dev_layout(&Layout::new((mn, mn), (0, 1))?)?)
        .partition_c(&atom, lane)?;
    let (_, my_col) = q_of_c.offsets(&Coord::from((0, 0, 0)))?;
    let c_live: Cond = my_col.lt(&k.i32(wg.g)).into();
    if !wg.spec.writes_partials() {
        store_output(wg, q, ml, l_tot, c_live)
    } else {
        store_partial(wg, q, ml, l_tot, c_live)?;
        if wg.spec.merges_in_main() {
            merge_if_last(wg, q)?;
        }
        Ok(())
    }
}

/// Bytes of one (sequence, KV head)'s counter of a fused reduce: a u32 on its own 128-byte
/// line, so the atomics of different pairs do not meet on one line.
pub const COUNTER_BYTES: i64 = 128;

/// The fused reduce: the wave counts its partial (written above) into its (sequence, KV
/// head)'s counter, after a release fence at agent scope (the other partials may be written
/// from other XCDs); the wave that counts the last acquires, merges the group's partials
/// (lane `l`: row `l / (64 / g)` of the group, `d g / 64` depths of it) and resets the counter.
fn merge_if_last<'k, 'ctx>(wg: &Workgroup<'_, 'k, 'ctx>, q: &Query<'k, 'ctx>) -> Result<()> {
    let (k, lane, d, g) = (wg.k, wg.lane, wg.d, wg.g);
    let z = k.i32(0);
    let counters_ptr = k.ptr_arg(wg.p.counters)?;
    let pairs = wg.batch * (wg.hq / g);
    let slot = Layout::new(pairs.idx(), tilegen_layout::Idx::Static(COUNTER_BYTES))?
        .crd2idx(&Coord::Leaf(wg.pair.idx()))?
        .to_value(&z);
    k.release_agent()?;
    let seen = k.var(z.into())?;
    k.if_then(lane.eq(&z), || {
        let old = k.global_atomic_add(counters_ptr, slot, k.i32(1))?;
        k.set(&seen, old.into())
    })?;
    let before = k.readfirstlane(k.get(&seen)?.int(k)?)?;
    k.if_then(before.eq(&k.i32(wg.parts - 1)), || {
        k.acquire_agent()?;
        let rows = wg.batch * wg.hq;
        let bufs = super::reduce::Partials::new(
            k,
            wg.spec,
            rows,
            &wg.scales_v,
            [wg.p.out, wg.p.part_o, wg.p.part_ml],
        )?;
        let per_row = 64 / g;
        let c = d / per_row;
        bufs.merge(
            k,
            (q.row0, lane / per_row),
            (lane % per_row) * c,
            c,
            None,
            wg.h,
        )?;
        let counters = k.buffer(counters_ptr, pairs * COUNTER_BYTES, CachePolicy::Always)?;
        k.if_then(lane.eq(&z), || k.buffer_store(&counters, z.into(), slot, z))
    })
}

/// The normalised bf16 output of the group's query heads (`split_kv == 1`): with several
/// waves, their partials merged first, and written by wave 0.
fn store_output<'k, 'ctx>(
    wg: &Workgroup<'_, 'k, 'ctx>,
    q: &Query<'k, 'ctx>,
    ml: &Mainloop<'_, '_, 'k, 'ctx>,
    l_tot: Value<'ctx>,
    c_live: Cond<'ctx>,
) -> Result<()> {
    let (k, atom, d, lane) = (wg.k, wg.atom, wg.d, wg.lane);
    let [mn, _, _] = atom.shape_mnk();
    let mut acc = ml
        .acc
        .iter()
        .map(|v| k.get(v))
        .collect::<Result<Vec<_>>>()?;
    let mut l_tot = l_tot;
    if wg.waves > 1 {
        (acc, l_tot) = merge_waves(wg, &ml.k_lds(), &acc, k.get(&ml.m)?, l_tot)?;
    }
    let write = || -> Result<()> {
        let out = wg.buffer(wg.p.out, wg.batch * (wg.hq * d * 2))?;
        let vs = load_f32(k, &wg.scales_v, wg.h)?;
        let denom = k.fmul(l_tot, k.f32((1u32 << P_SCALE_LOG2) as f32))?;
        let f = k.fdiv(vs, denom)?;
        let has = k.flt(k.f32(0.0), l_tot)?;
        let f4 = k.splat(k.select(has, f, k.f32(0.0))?, 4)?;
        let view = TileTensor::index(k, dev_layout(&Layout::new((d, mn), (2, 2 * d))?)?)
            .partition_c(&atom, lane)?;
        for (dt, a) in acc.iter().enumerate() {
            let o = k.convert(k.fmul(*a, f4)?, Elem::Bf16)?;
            let coord = Coord::from((0, dt as i64, 0));
            store_where(k, &out, &view, coord, q.row0 * (2 * d), o, c_live)?;
        }
        Ok(())
    };
    if wg.waves > 1 {
        // Every wave merged the same values; wave 0 writes them.
        k.if_then(wg.wave.eq(&k.i32(0)), write)
    } else {
        write()
    }
}

/// The wave's partial for the reduce kernel: its unnormalized accumulators, max and sum.
fn store_partial<'k, 'ctx>(
    wg: &Workgroup<'_, 'k, 'ctx>,
    q: &Query<'k, 'ctx>,
    ml: &Mainloop<'_, '_, 'k, 'ctx>,
    l_tot: Value<'ctx>,
    c_live: Cond<'ctx>,
) -> Result<()> {
    let (k, atom, d, lane, parts) = (wg.k, wg.atom, wg.d, wg.lane, wg.parts);
    let [mn, _, _] = atom.shape_mnk();
    let (batch, hq) = (wg.batch, wg.hq);
    let part_o = wg.buffer(wg.p.part_o, batch * (hq * parts * d * 4))?;
    let part_ml = wg.buffer(wg.p.part_ml, batch * (hq * parts * 8))?;
    let view = TileTensor::index(k, dev_layout(&Layout::new((d, mn), (4, 4 * parts * d))?)?)
        .partition_c(&atom, lane)?;
    let base = (q.row0 * parts + wg.pidx) * (4 * d);
    for (dt, var) in ml.acc.iter().enumerate() {
        let coord = Coord::from((0, dt as i64, 0));
        store_where(k, &part_o, &view, coord, base, k.get(var)?, c_live)?;
    }
    // Every lane of a query column holds its (m, l); they all write the same bytes.
    let ml_view = TileTensor::index(k, dev_layout(&Layout::new((mn, mn), (0, 8 * parts))?)?)
        .partition_c(&atom, lane)?;
    let m_l = k.concat(&[k.get(&ml.m)?, l_tot])?;
    let base = (q.row0 * parts + wg.pidx) * 8;
    store_where(
        k,
        &part_ml,
        &ml_view,
        Coord::from((0, 0, 0)),
        base,
        m_l,
        c_live,
    )
}

/// Merges the partials of a workgroup's waves (`split_kv == 1`) in LDS, as the reduce kernel
/// merges partials (in wave order: `O = sum w_p O_p`, `L = sum w_p l_p`,
/// `w_p = 2^(m_p - max m)` over the partials that saw keys): each wave leaves its accumulators,
/// max and sum in its own K slot, lane-private, and every wave merges all of them. Returns the
/// merged accumulators and sum.
fn merge_waves<'k, 'ctx>(
    wg: &Workgroup<'_, 'k, 'ctx>,
    k_lds: &Lds<'ctx>,
    acc: &[Value<'ctx>],
    m: Value<'ctx>,
    l: Value<'ctx>,
) -> Result<(Vec<Value<'ctx>>, Value<'ctx>)> {
    let (k, wave, lane) = (wg.k, wg.wave, wg.lane);
    let slot = BLOCK_N as i64 * wg.d;
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
    let waves = wg.waves;
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
pub(super) fn pack_fp8<'ctx>(k: &Kernel<'ctx>, vals: Value<'ctx>) -> Result<Value<'ctx>> {
    let mut dwords = Vec::new();
    for i in 0..vals.ty().lanes / 4 {
        let e = |j: u32| k.slice(vals, 4 * i + j, 1);
        let lo = k.cvt_pk_fp8(e(0)?, e(1)?, Value::from(k.i32(0)), false)?;
        dwords.push(k.cvt_pk_fp8(e(2)?, e(3)?, lo, true)?);
    }
    k.concat(&dwords)
}
