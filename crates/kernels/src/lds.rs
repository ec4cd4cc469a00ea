//! `MXFP4MatmulAMD`: the LDS-staged kernel the preshuffled-B one derives from. A, B and both
//! scale tensors are plain row-major (`[M, K/2]`, `[N, K/2]`, `[M, K/32]`, `[N, K/32]`), staged
//! tile by tile into row-major LDS tiles, then read as MFMA fragments (seed 002's
//! `load_frag_from_smem` / `load_scales_from_smem`).

use tilegen_dsl::{CachePolicy, Int, Kernel, Result, Storage, TileTensor};
use tilegen_layout::{Idx, Layout};

use crate::gemm::{self, Ctx, static_layout};
use crate::mma::{BlockScaledMmaOp, ScaleSel};
use crate::spec::KernelSpec;

/// Emits the body of the LDS-staged kernel for `spec` (already validated).
pub fn build<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &KernelSpec) -> Result<()> {
    let warps = spec.warps() as i64;
    let cx = Ctx::new(k, warps)?;
    let (m, n, kb, ks) = (cx.m, cx.n, cx.kb, cx.ks);
    let shape = spec.mma.shape();
    let mn = shape.mn() as i64;
    let a = cx.buffer("a", m * kb, CachePolicy::Always)?;
    let b = cx.buffer("b", n * kb, CachePolicy::Always)?;
    let sfa = cx.buffer("sfa", m * ks, CachePolicy::Always)?;
    let sfb = cx.buffer("sfb", n * ks, CachePolicy::Always)?;
    let (bm, bn, bk) = (spec.bm as i64, spec.bn as i64, spec.bk_elems as i64);
    let (wm, wn) = (spec.wm as i64, spec.wn as i64);
    let tile_bytes = bk / 2;
    let a_lds = k.lds_alloc("a_tile", (bm * tile_bytes) as u32, 16)?;
    let b_lds = k.lds_alloc("b_tile", (bn * tile_bytes) as u32, 16)?;
    let sa_lds = k.lds_alloc("a_scales", (bm * bk / 32) as u32, 16)?;
    let sb_lds = k.lds_alloc("b_scales", (bn * bk / 32) as u32, 16)?;
    let warps_n = bn / wn;
    let wave_m = cx.wave / warps_n;
    let wave_n = cx.wave % warps_n;
    let m0 = k.block_id_y()? * bm;
    let n0 = k.block_id_x()? * bn;
    let row0 = m0 + wave_m * wm;
    let col0 = n0 + wave_n * wn;
    let (nm, nn) = ((wm / mn) as usize, (wn / mn) as usize);
    let mma = BlockScaledMmaOp::new(k, shape, nm, nn)?;
    let a_global = cx.row_major(m, kb, 1);
    let b_global = cx.row_major(n, kb, 1);
    let sa_global = cx.row_major(m, ks, 1);
    let sb_global = cx.row_major(n, ks, 1);

    // One stage of `step_elems` K elements starting at element `k0`.
    let stage = |k0: Int<'k, 'ctx>, step_elems: i64| -> Result<()> {
        let row_bytes = step_elems / 2;
        let srow = step_elems / 32;
        let pa = gemm::stage_tile(
            &cx,
            &a,
            &a_global,
            m0,
            k0 / 2,
            &a_lds,
            bm,
            row_bytes,
            spec.dram_to_lds,
        )?;
        let pb = gemm::stage_tile(
            &cx,
            &b,
            &b_global,
            n0,
            k0 / 2,
            &b_lds,
            bn,
            row_bytes,
            spec.dram_to_lds,
        )?;
        gemm::commit_tile(&cx, &a_lds, pa)?;
        gemm::commit_tile(&cx, &b_lds, pb)?;
        gemm::stage_scales(&cx, &sfa, &sa_global, m0, k0 / 32, &sa_lds, bm, srow)?;
        gemm::stage_scales(&cx, &sfb, &sb_global, n0, k0 / 32, &sb_lds, bn, srow)?;
        k.barrier()?;
        let a_view = TileTensor::new(
            k,
            Storage::Lds(a_lds),
            static_layout(&Layout::row_major((bm, row_bytes))),
        );
        let b_view = TileTensor::new(
            k,
            Storage::Lds(b_lds),
            static_layout(&Layout::row_major((bn, row_bytes))),
        );
        let a_warp = a_view.tile(&[wm, row_bytes], &[wave_m.idx(), Idx::Static(0)])?;
        let b_warp = b_view.tile(&[wn, row_bytes], &[wave_n.idx(), Idx::Static(0)])?;
        let sa_layout: Layout = Layout::row_major((bm, srow));
        let sb_layout: Layout = Layout::row_major((bn, srow));
        for kk in 0..step_elems / shape.k() as i64 {
            let a_frags = (0..nm)
                .map(|i| mma.load_frag(&a_warp, i as i64, kk, cx.lane))
                .collect::<Result<Vec<_>>>()?;
            let b_frags = (0..nn)
                .map(|j| mma.load_frag(&b_warp, j as i64, kk, cx.lane))
                .collect::<Result<Vec<_>>>()?;
            let a_sc =
                mma.load_scales(&sa_lds, &sa_layout, (wave_m * wm).idx(), nm, kk, cx.lane)?;
            let b_sc =
                mma.load_scales(&sb_lds, &sb_layout, (wave_n * wn).idx(), nn, kk, cx.lane)?;
            for i in 0..nm {
                for j in 0..nn {
                    let a_sel = ScaleSel {
                        dword: a_sc[i / 4],
                        byte: (i % 4) as u32,
                    };
                    let b_sel = ScaleSel {
                        dword: b_sc[j / 4],
                        byte: (j % 4) as u32,
                    };
                    mma.mma(i, j, a_frags[i], a_sel, b_frags[j], b_sel)?;
                }
            }
        }
        k.barrier()
    };
    let tiles = cx.kdim / bk;
    k.for_range(k.i32(0), tiles, 1, |t| stage(t * bk, bk))?;
    // K past the last full tile, 128 elements at a time (K is a multiple of 256).
    const STEP: i64 = 128;
    let first = tiles * (bk / STEP);
    k.for_range(first, cx.kdim / STEP, 1, |s| stage(s * STEP, STEP))?;
    gemm::store_c(&cx, &mma, row0, col0, spec.out_dtype)
}
