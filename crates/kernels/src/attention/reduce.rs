//! The reduce pass: merges the partials of each query row (`O = sum w acc`, `L = sum w l`,
//! `w = 2^(m_p - max m)`) into the bf16 output. One workgroup of one wave per query row; lane
//! `i` owns depths `2 i, 2 i + 1`.

use tilegen_dsl::{
    Buffer, CachePolicy, Cond, Elem, I32Param, Int, Kernel, PtrParam, Result, Signature, Ty, Value,
};
use tilegen_layout::{Coord, Idx, Layout};
use tilegen_mx::attention::P_SCALE_LOG2;

use super::spec::AttentionSpec;

/// Handles of the reduce kernel's parameters.
#[derive(Debug, Clone, Copy)]
pub struct Params {
    /// `[rows, head_dim]` bf16 output.
    pub out: PtrParam,
    /// `[rows, partials, head_dim]` f32 partial outputs.
    pub part_o: PtrParam,
    /// `[rows, partials, 2]` f32 partial max and sum.
    pub part_ml: PtrParam,
    /// `[kv_heads]` f32 V scales.
    pub v_scales: PtrParam,
    /// Query rows: `batch * q_heads`.
    pub rows: I32Param,
}

/// The reduce kernel's signature and its handles.
pub fn signature() -> (Signature, Params) {
    let mut s = Signature::new();
    let p = Params {
        out: s.global_ptr("out"),
        part_o: s.global_ptr("part_o"),
        part_ml: s.global_ptr("part_ml"),
        v_scales: s.global_ptr("v_scales"),
        rows: s.i32("rows"),
    };
    (s, p)
}

/// Emits the reduce kernel for `spec` (validated, `split_kv > 1`).
pub fn build<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &AttentionSpec) -> Result<()> {
    let (_, p) = signature();
    let d = i64::from(spec.values().head_dim);
    let (hq, g) = (i64::from(spec.values().q_heads), i64::from(spec.group()));
    let rows = k.i32_arg(p.rows)?;
    let row = k.block_id_x()?;
    let lane = k.thread_id()?;
    let v_scales = k.buffer(
        k.ptr_arg(p.v_scales)?,
        k.i32(hq / g * 4),
        CachePolicy::Always,
    )?;
    let bufs = Partials::new(k, spec, rows, &v_scales, [p.out, p.part_o, p.part_ml])?;
    let kv_head = (row % hq) / g;
    // Lane i: depths 2i, 2i + 1 of the row; lanes past the head write past the output.
    let live = lane.lt(&k.i32(d / 2)).into();
    bufs.merge(k, (row, k.i32(0)), lane * 2, 2, Some(live), kv_head)
}

/// The buffers a merge of partials reads and writes: the bf16 output `[rows, d]`, the f32
/// partial outputs `[rows, parts, d]` and their (max, sum) `[rows, parts, 2]`, and the V
/// scales `[kv_heads]`.
pub(super) struct Partials<'k, 'ctx> {
    rows: Int<'k, 'ctx>,
    out: Buffer<'ctx>,
    part_o: Buffer<'ctx>,
    part_ml: Buffer<'ctx>,
    v_scales: Buffer<'ctx>,
    d: i64,
    parts: i64,
}

/// Partials a merge loads before it uses the first (their loads in flight together).
const MERGE_GROUP: i64 = 8;

impl<'k, 'ctx> Partials<'k, 'ctx> {
    /// The buffers of `rows` query rows of `spec`: the output, partial output and partial
    /// (max, sum) parameters, and the V scales.
    pub(super) fn new(
        k: &'k Kernel<'ctx>,
        spec: &AttentionSpec,
        rows: Int<'k, 'ctx>,
        v_scales: &Buffer<'ctx>,
        [out, part_o, part_ml]: [PtrParam; 3],
    ) -> Result<Self> {
        let d = i64::from(spec.values().head_dim);
        let parts = i64::from(spec.partials());
        let buf = |param, bytes| k.buffer(k.ptr_arg(param)?, bytes, CachePolicy::Always);
        Ok(Partials {
            rows,
            out: buf(out, rows * (2 * d))?,
            part_o: buf(part_o, rows * (4 * parts * d))?,
            part_ml: buf(part_ml, rows * (8 * parts))?,
            v_scales: *v_scales,
            d,
            parts,
        })
    }

    /// `at`, or for a lane that is not `live` the end of `buf` (where accesses are dropped).
    fn or_past(
        &self,
        k: &'k Kernel<'ctx>,
        live: Option<Cond<'ctx>>,
        at: Int<'k, 'ctx>,
        buf: &Buffer<'ctx>,
    ) -> Result<Int<'k, 'ctx>> {
        match live {
            Some(c) => k
                .select(c, Value::from(at), Value::from(buf.records(k)))?
                .int(k),
            None => Ok(at),
        }
    }

    /// Merges the partials of query row `row.0 + row.1` (`row.0` the same in every lane, `row.1`
    /// the lane's: a buffer's uniform offset must not vary across lanes) over the lane's `c`
    /// depths from `depth0` (`c` a power of two up to 32) into the bf16 output: `O = sum w_p O_p`, `L = sum w_p l_p`,
    /// `w_p = 2^(m_p - max m)` over the partials that saw keys, scaled by the row's KV head's
    /// V scale over `L`. A lane that is not `live` (when given) writes past the output's end.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn merge(
        &self,
        k: &'k Kernel<'ctx>,
        row: (Int<'k, 'ctx>, Int<'k, 'ctx>),
        depth0: Int<'k, 'ctx>,
        c: i64,
        live: Option<Cond<'ctx>>,
        kv_head: Int<'k, 'ctx>,
    ) -> Result<()> {
        let (d, parts) = (self.d, self.parts);
        let z = k.i32(0);
        let zero = k.f32(0.0);
        let vs = k.bitcast(k.buffer_load(&self.v_scales, z, kv_head * 4, 1)?, Ty::F32)?;
        // (partial, row) -> byte of the (max, sum) pairs; (depth, partial, row) -> byte of the
        // partial outputs; (depth, row) -> byte of the output. The uniform row goes to the
        // buffer's uniform offset, the lane's row and the rest to the lane's.
        let (st, rows) = (Idx::Static, self.rows.idx());
        let ml_l = Layout::new((st(parts), rows.clone()), (st(8), st(8 * parts)))?;
        let o_l = Layout::new(
            (st(d), st(parts), rows.clone()),
            (st(4), st(4 * d), st(4 * parts * d)),
        )?;
        let out_l = Layout::new((st(d), rows), (st(2), st(2 * d)))?;
        let (row0, lane_row) = row;
        let ml_at = |q: Int<'k, 'ctx>| -> Result<Int<'k, 'ctx>> {
            Ok(ml_l
                .crd2idx(&Coord::from((q.idx(), lane_row.idx())))?
                .to_value(&z))
        };
        let o_at = |q: Int<'k, 'ctx>| -> Result<Int<'k, 'ctx>> {
            Ok(o_l
                .crd2idx(&Coord::from((depth0.idx(), q.idx(), lane_row.idx())))?
                .to_value(&z))
        };
        let ml_row = row0 * (8 * parts);
        let o_row = row0 * (4 * parts * d);
        let pieces = |dwords: i64| -> Vec<(i64, u32)> {
            (0..(dwords + 3) / 4)
                .map(|i| (i * 16, (dwords - 4 * i).min(4) as u32))
                .collect()
        };
        // Every partial, `MERGE_GROUP` of them loaded before the first is used; the indices
        // past the last load the last and are not partials. One pass: the running max moves
        // up as partials come, and what was summed is rescaled to it (`2^(m_old - m_new)`).
        let m_run = k.var(k.f32(f32::NEG_INFINITY))?;
        let o = k.var(k.zero(Ty::vector(Elem::F32, c as u32)))?;
        let l_all = k.var(zero)?;
        k.for_range(z, k.i32(parts), MERGE_GROUP, |q0| {
            let loaded = (0..MERGE_GROUP.min(parts))
                .map(|j| {
                    let q = q0 + j;
                    let qc = q.min(&k.i32(parts - 1));
                    let ml = k.bitcast(
                        k.buffer_load(&self.part_ml, ml_at(qc)?, ml_row, 2)?,
                        Ty::vector(Elem::F32, 2),
                    )?;
                    let at = self.or_past(k, live, o_at(qc)?, &self.part_o)?;
                    let parts_o = pieces(c)
                        .into_iter()
                        .map(|(off, n)| k.buffer_load(&self.part_o, at + off, o_row, n))
                        .collect::<Result<Vec<_>>>()?;
                    let v = k.bitcast(k.concat(&parts_o)?, Ty::vector(Elem::F32, c as u32))?;
                    Ok((q, ml, v))
                })
                .collect::<Result<Vec<_>>>()?;
            for (q, ml, v) in loaded {
                let m = k.slice(ml, 0, 1)?;
                // A partial (past the last: a sum of 0) that saw keys.
                let l = k.select(q.lt(&k.i32(parts)).into(), k.slice(ml, 1, 1)?, zero)?;
                let counts = k.flt(zero, l)?;
                let cur = k.get(&m_run)?;
                let m_new = k.select(counts, k.fmax(cur, m)?, cur)?;
                // What was summed is kept whole by a partial that does not count (and its
                // max, which may be -inf, is not subtracted from itself).
                let keep = k.select(counts, k.exp2(k.fsub(cur, m_new)?)?, k.f32(1.0))?;
                let w = k.select(counts, k.exp2(k.fsub(m, m_new)?)?, zero)?;
                k.set(&m_run, m_new)?;
                k.set(
                    &l_all,
                    k.fadd(k.fmul(k.get(&l_all)?, keep)?, k.fmul(w, l)?)?,
                )?;
                let scaled = k.fmul(k.get(&o)?, k.splat(keep, c as u32)?)?;
                k.set(&o, k.fadd(scaled, k.fmul(v, k.splat(w, c as u32)?)?)?)?;
            }
            Ok(())
        })?;
        let l_all = k.get(&l_all)?;
        let denom = k.fmul(l_all, k.f32((1u32 << P_SCALE_LOG2) as f32))?;
        let f = k.select(k.flt(zero, l_all)?, k.fdiv(vs, denom)?, zero)?;
        let res = k.convert(k.fmul(k.get(&o)?, k.splat(f, c as u32)?)?, Elem::Bf16)?;
        let at = out_l
            .crd2idx(&Coord::from((depth0.idx(), lane_row.idx())))?
            .to_value(&z);
        let at = self.or_past(k, live, at, &self.out)?;
        let out_row = row0 * (2 * d);
        if c == 1 {
            return k.buffer_store(
                &self.out,
                k.bitcast(res, Ty::scalar(Elem::I16))?,
                at,
                out_row,
            );
        }
        let words = k.bitcast(res, Ty::dwords((c / 2) as u32))?;
        for (i, (off, n)) in pieces(c / 2).into_iter().enumerate() {
            let part = if c / 2 <= 4 {
                words
            } else {
                k.slice(words, (4 * i) as u32, n)?
            };
            k.buffer_store(&self.out, part, at + off, out_row)?;
        }
        Ok(())
    }
}
