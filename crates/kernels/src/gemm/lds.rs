//! `MXFP4MatmulAMD`: the LDS-staged kernel the preshuffled-B one derives from. A, B and both
//! scale tensors are plain row-major (`[M, K/2]`, `[N, K/2]`, `[M, K/32]`, `[N, K/32]`), staged
//! tile by tile into row-major LDS tiles, then read as MFMA fragments (seed 002's
//! `load_frag_from_smem` / `load_scales_from_smem`) through the atom's partitions.

use tilegen_dsl::{CachePolicy, Elem, Int, Kernel, Result, Storage, TileTensor, dev_layout};
use tilegen_layout::{Coord, Idx, Layout, SwizzleChain};

use super::common::{self, Ctx};
use super::spec::LdsSpec;
use crate::tile::atom::{SCALE_BLOCK, ScaleSel};
use crate::tile::mma::BlockScaledMmaOp;
use crate::tile::stage;

/// Bits of one FP4 element.
const FP4_BITS: u32 = 4;

/// Emits the body of the LDS-staged kernel for `spec` (already validated).
pub fn build<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &LdsSpec) -> Result<()> {
    let warps = spec.warps() as i64;
    let cx = Ctx::new(k, warps)?;
    let (m, n, kb, ks) = (cx.m, cx.n, cx.kb, cx.ks);
    let shape = spec.mma;
    let p = cx.params;
    let a = cx.buffer(p.a, m * kb, CachePolicy::Always)?;
    let b = cx.buffer(p.b, n * kb, CachePolicy::Always)?;
    let sfa = cx.buffer(p.sfa, m * ks, CachePolicy::Always)?;
    let sfb = cx.buffer(p.sfb, n * ks, CachePolicy::Always)?;
    let (bm, bn, bk) = (spec.bm as i64, spec.bn as i64, spec.bk_elems as i64);
    let (wm, wn) = (spec.warp_m() as i64, spec.wn as i64);
    // The spec's LDS plan, in its order: A tile, B tile, A scales, B scales.
    let plan = common::alloc_lds(k, &spec.lds_buffers())?;
    let [a_lds, b_lds, sa_lds, sb_lds] = <[_; 4]>::try_from(plan).map_err(|_| {
        tilegen_dsl::DslError::Internal("the LDS variant plans four LDS buffers".into())
    })?;
    let warps_n = bn / wn;
    let wave_m = cx.wave / warps_n;
    let wave_n = cx.wave % warps_n;
    let (bid_x, bid_y) = (k.block_id_x()?, k.block_id_y()?);
    let m0 = bid_y * bm;
    let n0 = bid_x * bn;
    let mn = shape.mn() as i64;
    let (nm, nn) = ((wm / mn) as usize, (wn / mn) as usize);
    let mma = BlockScaledMmaOp::new(k, shape, nm, nn)?;
    let atom = mma.atom;
    let a_global = cx.row_major(m, kb, 1);
    let b_global = cx.row_major(n, kb, 1);
    let sa_global = cx.row_major(m, ks, 1);
    let sb_global = cx.row_major(n, ks, 1);

    // Each lane's fragments of this wave's rows of the LDS tiles for stages of `step_elems`
    // K elements (built once, outside the loops that reuse them).
    let fragments = |step_elems: i64| -> Result<[TileTensor<'k, 'ctx>; 4]> {
        let wave_tile = |lds, rows, wave_rows, wave: Int<'k, 'ctx>, cols, bits, sw| {
            let layout = dev_layout(&Layout::row_major((rows, cols)))?;
            TileTensor::packed(k, Storage::Lds(lds), layout, bits)?
                .swizzled(sw)?
                .tile(&[wave_rows, cols], &[wave.idx(), Idx::Static(0)])
        };
        let srow = step_elems / SCALE_BLOCK;
        let sw = common::operand_swizzle(spec, step_elems / 2)?;
        let none = SwizzleChain::identity();
        Ok([
            wave_tile(a_lds, bm, wm, wave_m, step_elems, FP4_BITS, sw.clone())?
                .partition_a(&atom, cx.lane)?,
            wave_tile(b_lds, bn, wn, wave_n, step_elems, FP4_BITS, sw)?
                .partition_b(&atom, cx.lane)?,
            wave_tile(sa_lds, bm, wm, wave_m, srow, 8, none.clone())?
                .partition_sfa(&atom, cx.lane)?,
            wave_tile(sb_lds, bn, wn, wave_n, srow, 8, none)?.partition_sfb(&atom, cx.lane)?,
        ])
    };
    // One stage of `step_elems` K elements starting at element `k0`.
    let stage =
        |k0: Int<'k, 'ctx>, step_elems: i64, frags: &[TileTensor<'k, 'ctx>; 4]| -> Result<()> {
            let row_bytes = step_elems / 2;
            let srow = step_elems / SCALE_BLOCK;
            let sw = common::operand_swizzle(spec, row_bytes)?;
            let pa = stage::stage_tile(
                &cx,
                &a,
                &a_global,
                m0,
                k0 / 2,
                &a_lds,
                bm,
                row_bytes,
                spec.dram_to_lds,
                &sw,
                ..,
            )?;
            let pb = stage::stage_tile(
                &cx,
                &b,
                &b_global,
                n0,
                k0 / 2,
                &b_lds,
                bn,
                row_bytes,
                spec.dram_to_lds,
                &sw,
                ..,
            )?;
            stage::commit_tile(&cx, &a_lds, pa)?;
            stage::commit_tile(&cx, &b_lds, pb)?;
            stage::stage_scales(
                &cx,
                &sfa,
                &sa_global,
                m0,
                k0 / SCALE_BLOCK,
                &sa_lds,
                bm,
                srow,
            )?;
            stage::stage_scales(
                &cx,
                &sfb,
                &sb_global,
                n0,
                k0 / SCALE_BLOCK,
                &sb_lds,
                bn,
                srow,
            )?;
            k.barrier()?;
            let [a_frag, b_frag, sa_frag, sb_frag] = frags;
            for kk in 0..step_elems / shape.k() as i64 {
                let a_frags = (0..nm)
                    .map(|i| a_frag.load_values(&[i as i64, kk]))
                    .collect::<Result<Vec<_>>>()?;
                let b_frags = (0..nn)
                    .map(|j| b_frag.load_values(&[j as i64, kk]))
                    .collect::<Result<Vec<_>>>()?;
                let a_sc = pack_scales(k, sa_frag, nm, kk)?;
                let b_sc = pack_scales(k, sb_frag, nn, kk)?;
                for i in 0..nm {
                    for j in 0..nn {
                        mma.mma(i, j, a_frags[i], a_sc[i], b_frags[j], b_sc[j])?;
                    }
                }
            }
            k.barrier()
        };
    let tiles = cx.kdim / bk;
    let main = fragments(bk)?;
    k.for_range(k.i32(0), tiles, 1, |t| stage(t * bk, bk, &main))?;
    // K past the last full tile, 128 elements at a time (K is a multiple of 256).
    const STEP: i64 = 128;
    let first = tiles * (bk / STEP);
    let tail = fragments(STEP)?;
    k.for_range(first, cx.kdim / STEP, 1, |s| stage(s * STEP, STEP, &tail))?;
    let block = ([bm, bn], [bid_y, bid_x]);
    common::store_c(
        &cx,
        &mma,
        block,
        ([wm, wn], [wave_m, wave_n]),
        spec.out_dtype,
    )
}

/// The scales of `tiles` MMA tiles at K step `kk` from a lane's scale fragment (bytes in LDS):
/// four tiles' bytes share a dword, and each tile's selector picks its byte.
fn pack_scales<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    frag: &TileTensor<'k, 'ctx>,
    tiles: usize,
    kk: i64,
) -> Result<Vec<ScaleSel<'k, 'ctx>>> {
    let bytes = (0..tiles)
        .map(|i| frag.load(&Coord::from((0, i as i64, kk))))
        .collect::<Result<Vec<_>>>()?;
    let mut sel = Vec::with_capacity(tiles);
    for group in bytes.chunks(4) {
        let mut dword = k.i32(0);
        for (byte, &v) in group.iter().enumerate() {
            // Byte `byte` of the dword; the bytes are disjoint, so the sum is their union.
            dword = dword + k.convert(v, Elem::I32)?.int(k)? * (1i64 << (8 * byte));
        }
        sel.extend((0..group.len() as u32).map(|byte| ScaleSel { dword, byte }));
    }
    Ok(sel)
}
