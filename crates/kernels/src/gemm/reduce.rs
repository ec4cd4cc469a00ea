//! The split-K reduction: the second kernel of a split-K GEMM's code object. The GEMM's K
//! slices store their f32 partial products to a workspace of one `[M, N]` f32 plane per slice;
//! this kernel sums the planes in slice order, in f32, and rounds the sum once to C's type, so
//! C is the same on every run and a bf16 C is within one ulp of the f32-accumulated product.
//!
//! Each lane reduces four consecutive elements of the row-major `[M, N]` output (one
//! `buffer_load_dwordx4` per plane): N is a multiple of 16, so the four never straddle a row,
//! and the lanes past `M * N` fall out of the buffers' ranges (their loads read 0 and their
//! stores are dropped).

use tilegen_dsl::{CachePolicy, Elem, I32Param, Kernel, PtrParam, Result, Signature, Ty};

use super::spec::OutDtype;

/// Work-items per workgroup of the reduction.
pub const REDUCE_THREADS: u32 = 256;

/// Output elements each work-item reduces.
pub const REDUCE_ELEMS_PER_LANE: u32 = 4;

/// Handles of the reduction's parameters `(c, workspace, m, n)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReduceParams {
    c: PtrParam,
    workspace: PtrParam,
    m: I32Param,
    n: I32Param,
}

/// The reduction's signature, `(c, workspace, m, n)`, with its handles.
pub(crate) fn signature() -> (Signature, ReduceParams) {
    let mut s = Signature::new();
    let p = ReduceParams {
        c: s.global_ptr("c"),
        workspace: s.global_ptr("workspace"),
        m: s.i32("m"),
        n: s.i32("n"),
    };
    (s, p)
}

/// The reduction's workgroups for an `m x n` output.
pub(crate) fn grid(m: usize, n: usize) -> [u32; 3] {
    let per_group = (REDUCE_THREADS * REDUCE_ELEMS_PER_LANE) as usize;
    let groups = (m * n).div_ceil(per_group);
    [u32::try_from(groups).unwrap_or(u32::MAX), 1, 1]
}

/// Emits the body of the reduction of `slices` planes into a C of type `out`.
pub(crate) fn build(k: &Kernel<'_>, slices: u32, out: OutDtype) -> Result<()> {
    let (_, p) = signature();
    let (m, n) = (k.i32_arg(p.m)?, k.i32_arg(p.n)?);
    let elems = m * n;
    let plane_bytes = elems * 4;
    let lanes = REDUCE_ELEMS_PER_LANE;
    let first = (k.block_id_x()? * REDUCE_THREADS as i64 + k.thread_id()?) * lanes as i64;
    let zero = k.i32(0);
    let workspace = k.ptr_arg(p.workspace)?;
    let f32x4 = Ty::vector(Elem::F32, lanes);
    let mut sum = None;
    // Slice order, every run: the sum (and so its rounding) does not depend on which slice
    // finished first.
    for s in 0..slices {
        let base = k.ptr_offset(workspace, k.i32(i64::from(s)), plane_bytes)?;
        let plane = k.buffer(base, plane_bytes, CachePolicy::Always)?;
        let part = k.bitcast(k.buffer_load(&plane, first * 4, zero, lanes)?, f32x4)?;
        sum = Some(match sum {
            None => part,
            Some(acc) => k.fadd(acc, part)?,
        });
    }
    let sum = sum.unwrap_or_else(|| k.zero(f32x4));
    let elem = match out {
        OutDtype::F32 => Elem::F32,
        OutDtype::Bf16 => Elem::Bf16,
    };
    let value = k.convert(sum, elem)?;
    let bytes = out.bytes() as i64;
    let c = k.buffer(k.ptr_arg(p.c)?, elems * bytes, CachePolicy::Always)?;
    k.buffer_store(&c, value, first * bytes, zero)
}
