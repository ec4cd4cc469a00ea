//! What both GEMM kernels (and the grouped MoE GEMMs) share: the signature and its sizes,
//! the LDS plan, and the epilogues that store accumulators to C, atomically add them into C, or
//! store them to a split-K workspace plane.

use tilegen_dsl::{
    Buffer, CachePolicy, DslError, Elem, I32Param, Int, Kernel, Lds, PtrParam, Result, Signature,
    Storage, TileTensor,
};
use tilegen_layout::{Coord, Idx, Layout, SwizzleChain};

use super::spec::{Common, LdsBuffer, OutDtype};
use crate::tile::atom::SCALE_BLOCK;
use crate::tile::mma::BlockScaledMmaOp;
use crate::tile::stage::{Threads, swizzle_for_rows};

/// Handles of the GEMM kernel's parameters `(c, a, b, sfa, sfb, m, n, k)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmParams {
    /// C, `[M, N]` in the output type.
    pub c: PtrParam,
    /// A, `[M, K/2]` packed FP4.
    pub a: PtrParam,
    /// B, `[N, K/2]` packed FP4 (preshuffled in the preb variant).
    pub b: PtrParam,
    /// A's E8M0 scales.
    pub sfa: PtrParam,
    /// B's E8M0 scales.
    pub sfb: PtrParam,
    /// M.
    pub m: I32Param,
    /// N.
    pub n: I32Param,
    /// K in elements.
    pub k: I32Param,
}

/// The signature every GEMM kernel has, `(c, a, b, sfa, sfb, m, n, k)`, with its handles.
pub fn signature() -> (Signature, GemmParams) {
    let mut s = Signature::new();
    let p = GemmParams {
        c: s.global_ptr("c"),
        a: s.global_ptr("a"),
        b: s.global_ptr("b"),
        sfa: s.global_ptr("sfa"),
        sfb: s.global_ptr("sfb"),
        m: s.i32("m"),
        n: s.i32("n"),
        k: s.i32("k"),
    };
    (s, p)
}

/// The GEMM signature alone, to declare a kernel with (`Kernel::new`).
pub fn params() -> Signature {
    signature().0
}

/// The launch's sizes and its work-item coordinates (the work-items' through `Deref`).
pub struct Ctx<'k, 'ctx> {
    /// The work-item coordinates.
    pub threads: Threads<'k, 'ctx>,
    /// Its parameters.
    pub params: GemmParams,
    /// Rows of A and C.
    pub m: Int<'k, 'ctx>,
    /// Rows of B, columns of C.
    pub n: Int<'k, 'ctx>,
    /// K in elements.
    pub kdim: Int<'k, 'ctx>,
    /// Bytes per row of A/B (K / 2).
    pub kb: Int<'k, 'ctx>,
    /// Scales per row (K / [`SCALE_BLOCK`]).
    pub ks: Int<'k, 'ctx>,
}

impl<'k, 'ctx> std::ops::Deref for Ctx<'k, 'ctx> {
    type Target = Threads<'k, 'ctx>;
    fn deref(&self) -> &Threads<'k, 'ctx> {
        &self.threads
    }
}

impl<'k, 'ctx> Ctx<'k, 'ctx> {
    /// Reads sizes and ids of a kernel declared with [`params`].
    pub fn new(k: &'k Kernel<'ctx>, warps: i64) -> Result<Self> {
        let (sig, params) = signature();
        if k.signature() != &sig {
            return Err(DslError::Operand {
                op: "gemm",
                rule: format!(
                    "kernel `{}` was not declared with the GEMM signature",
                    k.name()
                ),
            });
        }
        let m = k.i32_arg(params.m)?;
        let n = k.i32_arg(params.n)?;
        let kdim = k.i32_arg(params.k)?;
        let tid = k.thread_id()?;
        // tid / 64 is the same for every lane of a wave; say so, so it lives in an SGPR.
        let wave = k.readfirstlane(tid / 64)?;
        // The same values, in the same order, as before `Threads` was split out.
        let (kb, ks) = (kdim / 2, kdim / SCALE_BLOCK);
        Ok(Ctx {
            threads: Threads {
                k,
                tid,
                lane: tid % 64,
                wave,
                warps,
            },
            params,
            m,
            n,
            kdim,
            kb,
            ks,
        })
    }
}

/// A tile position: the tile's shape and its coordinate in units of that shape.
pub type TileAt<'k, 'ctx> = ([i64; 2], [Int<'k, 'ctx>; 2]);

/// Allocates the LDS buffers of a spec's plan
/// ([`KernelSpec::lds_buffers`](crate::KernelSpec::lds_buffers)), in its order: the kernels
/// allocate exactly what `lds_bytes` counts.
pub fn alloc_lds<'ctx>(k: &Kernel<'ctx>, plan: &[LdsBuffer]) -> Result<Vec<Lds<'ctx>>> {
    plan.iter()
        .map(|b| {
            let bytes = u32::try_from(b.bytes).map_err(|_| DslError::LdsSize {
                name: b.name.to_string(),
                bytes: b.bytes,
            })?;
            k.lds_alloc(b.name, bytes, LdsBuffer::ALIGN as u32)
        })
        .collect()
}

/// [`swizzle_for_rows`], or the identity when the spec turns LDS swizzling off.
pub fn operand_swizzle(spec: &Common, row_bytes: i64) -> Result<SwizzleChain> {
    if spec.lds_swizzle {
        swizzle_for_rows(row_bytes)
    } else {
        Ok(SwizzleChain::identity())
    }
}

/// Stores the accumulators of a wave to C (row-major `[M, N]` in `out`): the wave's tile is
/// tile `wave` of tile `block` of C, and each MMA tile's fragment is where the atom's C layout
/// puts it. Rows past M fall out of the buffer's range by themselves; columns past N are
/// dropped by pointing their stores past the buffer's end. N is a multiple of 16, so the aligned
/// 16 columns around each vector store are wholly in or out, and lane 0's column decides.
pub fn store_c<'k, 'ctx>(
    cx: &Ctx<'k, 'ctx>,
    mma: &BlockScaledMmaOp<'k, 'ctx>,
    block: TileAt<'k, 'ctx>,
    wave: TileAt<'k, 'ctx>,
    out: OutDtype,
) -> Result<()> {
    store_fragments(cx, mma, block, wave, out, None)
}

/// Stores the accumulators of a wave, unrounded, to plane `slice` of the split-K workspace
/// that C's parameter points to: `[slices, M, N]` f32, one row-major `[M, N]` plane per K
/// slice, which the reduction kernel sums. Placement and masking are [`store_c`]'s, within the
/// slice's plane (its buffer resource covers that plane alone, so rows past M are dropped as
/// they are from C).
pub fn store_partial<'k, 'ctx>(
    cx: &Ctx<'k, 'ctx>,
    mma: &BlockScaledMmaOp<'k, 'ctx>,
    block: TileAt<'k, 'ctx>,
    wave: TileAt<'k, 'ctx>,
    slice: Int<'k, 'ctx>,
) -> Result<()> {
    store_fragments(cx, mma, block, wave, OutDtype::F32, Some(slice))
}

fn store_fragments<'k, 'ctx>(
    cx: &Ctx<'k, 'ctx>,
    mma: &BlockScaledMmaOp<'k, 'ctx>,
    block: TileAt<'k, 'ctx>,
    wave: TileAt<'k, 'ctx>,
    out: OutDtype,
    slice: Option<Int<'k, 'ctx>>,
) -> Result<()> {
    let k = cx.k;
    let (c, cols, _) = c_fragments(cx, mma, block, wave, out, slice)?;
    let elem = match out {
        OutDtype::F32 => Elem::F32,
        OutDtype::Bf16 => Elem::Bf16,
    };
    let acc_tile = mma.accum_tile();
    for i in 0..mma.num_m {
        for j in 0..mma.num_n {
            let acc = acc_tile.load(&Coord::from((i, j)))?;
            let value = k.convert(acc, elem)?;
            c.store_values(&[i as i64, j as i64], value, |first| {
                let (col, _) = cols.offsets(first)?;
                Ok(Some(col.lt(&cx.n).into()))
            })?;
        }
    }
    Ok(())
}

/// C's view (`out` elements) and its column-index twin, tiled to the wave's fragment of tile
/// `wave` of tile `block` and partitioned like the accumulators; and C's buffer. With `slice`,
/// C's parameter holds one `[M, N]` plane per slice and the view is of plane `slice`.
#[allow(clippy::type_complexity)]
fn c_fragments<'k, 'ctx>(
    cx: &Ctx<'k, 'ctx>,
    mma: &BlockScaledMmaOp<'k, 'ctx>,
    block: TileAt<'k, 'ctx>,
    wave: TileAt<'k, 'ctx>,
    out: OutDtype,
    slice: Option<Int<'k, 'ctx>>,
) -> Result<(TileTensor<'k, 'ctx>, TileTensor<'k, 'ctx>, Buffer<'ctx>)> {
    let k = cx.k;
    let bits = out.bytes() * 8;
    // C's resource is made here, after the main loop, so it holds no SGPRs during it.
    let c_bytes = cx.m * cx.n * out.bytes() as i64;
    let buf = match slice {
        None => cx.buffer(cx.params.c, c_bytes, CachePolicy::Always)?,
        Some(s) => {
            let plane = k.ptr_offset(k.ptr_arg(cx.params.c)?, s, c_bytes)?;
            k.buffer(plane, c_bytes, CachePolicy::Always)?
        }
    };
    let c = TileTensor::packed(k, Storage::Global(buf), cx.row_major(cx.m, cx.n, 1), bits)?;
    // Column indices of C, tiled and partitioned like C itself: the store predicates.
    let cols = TileTensor::index(
        k,
        Layout::new((cx.m.idx(), cx.n.idx()), (Idx::Static(0), Idx::Static(1)))?,
    );
    let fragment = |t: &TileTensor<'k, 'ctx>| {
        t.tile(&block.0, &block.1.map(Int::idx))?
            .tile(&wave.0, &wave.1.map(Int::idx))?
            .partition_c(&mma.atom, cx.lane)
    };
    Ok((fragment(&c)?, fragment(&cols)?, buf))
}

/// Adds the accumulators of a wave into C with buffer atomics (split-K: every K slice adds its
/// partial tile into a C that starts at zero). Placement and masking are [`store_c`]'s. The
/// accumulators hold `C^T` tiles, so a lane's values are consecutive columns of one row: bf16
/// pairs go out with one `buffer_atomic_pk_add_bf16` each (the C view vectorized by two
/// checks that they are contiguous), f32 values with one `buffer_atomic_add_f32` each.
pub fn atomic_add_c<'k, 'ctx>(
    cx: &Ctx<'k, 'ctx>,
    mma: &BlockScaledMmaOp<'k, 'ctx>,
    block: TileAt<'k, 'ctx>,
    wave: TileAt<'k, 'ctx>,
    out: OutDtype,
) -> Result<()> {
    let k = cx.k;
    let (c, cols, buf) = c_fragments(cx, mma, block, wave, out, None)?;
    let (width, elem) = match out {
        OutDtype::F32 => (1, Elem::F32),
        OutDtype::Bf16 => (2, Elem::Bf16),
    };
    let c = c.vectorize(&[width, 1, 1])?;
    let acc_tile = mma.accum_tile();
    let past_end = buf.records(k);
    for i in 0..mma.num_m {
        for j in 0..mma.num_n {
            let acc = k.convert(acc_tile.load(&Coord::from((i, j)))?, elem)?;
            let parts = acc.ty().lanes / width as u32;
            for (p, x) in k.split(acc, parts)?.into_iter().enumerate() {
                let at = |first: i64| Coord::from((first, i as i64, j as i64));
                let (base, lane) = c.offsets(&at(p as i64))?;
                let (col, _) = cols.offsets(&at(p as i64 * width))?;
                // Columns past N: the add points past the buffer's end and is dropped.
                let base = base.select(col.lt(&cx.n), &past_end);
                k.buffer_atomic_fadd(&buf, x, lane, base)?;
            }
        }
    }
    Ok(())
}
