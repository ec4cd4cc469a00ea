//! The reduce pass: merges the partials of each query row (`O = sum w acc`, `L = sum w l`,
//! `w = 2^(m_p - max m)`) into the bf16 output. One workgroup of one wave per query row; lane
//! `i` owns depths `2 i, 2 i + 1`.

use tilegen_dsl::{
    CachePolicy, Cond, Elem, I32Param, Int, Kernel, PtrParam, Result, Signature, Ty, Value,
    dev_layout,
};
use tilegen_layout::{Coord, Layout};
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
    let parts = i64::from(spec.partials());
    let (hq, g) = (i64::from(spec.values().q_heads), i64::from(spec.group()));
    let rows = k.i32_arg(p.rows)?;
    let row = k.block_id_x()?;
    let lane = k.thread_id()?;
    let buf = |param, bytes| k.buffer(k.ptr_arg(param)?, bytes, CachePolicy::Always);
    let out = buf(p.out, rows * (2 * d))?;
    let part_o = buf(p.part_o, rows * (4 * parts * d))?;
    let part_ml = buf(p.part_ml, rows * (8 * parts))?;
    let scales = buf(p.v_scales, k.i32(hq / g * 4))?;
    let kv_head = (row % hq) / g;
    let vs = k.bitcast(k.buffer_load(&scales, k.i32(0), kv_head * 4, 1)?, Ty::F32)?;

    // Lane i: depths 2i, 2i + 1 of the row; partial p's pair at byte (p d + 2 i) 4, the output's
    // at (2 i) 2. Lanes past the head point past the buffers' ends.
    let pair = dev_layout(&Layout::new((d / 2, parts), (8, 4 * d))?)?;
    let out_pair = dev_layout(&Layout::leaf(d / 2, 4))?;
    let live: Cond = lane.lt(&k.i32(d / 2)).into();
    let zero = k.f32(0.0);
    let ml_at = |q: Int<'k, 'ctx>| -> Result<(Value<'ctx>, Value<'ctx>)> {
        let v = k.buffer_load(&part_ml, k.i32(0), (row * parts + q) * 8, 2)?;
        let v = k.bitcast(v, Ty::vector(Elem::F32, 2))?;
        Ok((k.slice(v, 0, 1)?, k.slice(v, 1, 1)?))
    };
    // The largest max among partials that saw keys.
    let big_m = k.var(k.f32(f32::NEG_INFINITY))?;
    k.for_range(k.i32(0), k.i32(parts), 1, |q| {
        let (m, l) = ml_at(q)?;
        let cur = k.get(&big_m)?;
        let seen = k.flt(zero, l)?;
        k.set(&big_m, k.select(seen, k.fmax(cur, m)?, cur)?)
    })?;
    let m_all = k.get(&big_m)?;
    let o = k.var(k.zero(Ty::vector(Elem::F32, 2)))?;
    let l_all = k.var(zero)?;
    k.for_range(k.i32(0), k.i32(parts), 1, |q| {
        let (m, l) = ml_at(q)?;
        let seen = k.flt(zero, l)?;
        let w = k.select(seen, k.exp2(k.fsub(m, m_all)?)?, zero)?;
        k.set(&l_all, k.fadd(k.get(&l_all)?, k.fmul(w, l)?)?)?;
        let at = pair
            .crd2idx(&Coord::from((lane.idx(), q.idx())))?
            .to_value(&lane);
        let at = k
            .select(live, Value::from(at), Value::from(part_o.records(k)))?
            .int(k)?;
        let v = k.buffer_load(&part_o, at, row * (4 * parts * d), 2)?;
        let v = k.bitcast(v, Ty::vector(Elem::F32, 2))?;
        let sum = k.fadd(k.get(&o)?, k.fmul(v, k.splat(w, 2)?)?)?;
        k.set(&o, sum)
    })?;
    let l_all = k.get(&l_all)?;
    let denom = k.fmul(l_all, k.f32((1u32 << P_SCALE_LOG2) as f32))?;
    let f = k.select(k.flt(zero, l_all)?, k.fdiv(vs, denom)?, zero)?;
    let res = k.convert(k.fmul(k.get(&o)?, k.splat(f, 2)?)?, Elem::Bf16)?;
    let at = out_pair.crd2idx(&Coord::from(lane.idx()))?.to_value(&lane);
    let at = k
        .select(live, Value::from(at), Value::from(out.records(k)))?
        .int(k)?;
    k.buffer_store(&out, k.bitcast(res, Ty::I32)?, at, row * (2 * d))
}
