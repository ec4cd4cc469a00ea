//! `MXFP4MatmulAMD_PreB` (seed 001): A staged through LDS, B preshuffled by `Shuffler` and read
//! straight into VGPRs with one `buffer_load_dwordx4` per lane and MFMA; both scale tensors in the
//! Shuffler's 4D layout, one dword per lane covering a 2x2 (MN pack, K pack) block.
//!
//! One wave covers all `BM` rows (`num_warps_m == 1`: with B never in LDS there is no reuse of
//! B across M waves) and `WN` columns; waves split `BN`.

use inkwell::values::BasicValueEnum;
use tilegen_dsl::{
    Buffer, CachePolicy, Int, Kernel, Lds, MfmaShape, Result, Storage, TileTensor, Var,
};
use tilegen_layout::{Coord, Idx, Layout};
use tilegen_mx::Shuffler;

use crate::gemm::{self, Ctx, layout_err, static_layout};
use crate::mma::{BlockScaledMmaOp, ScaleSel};
use crate::spec::KernelSpec;

const MMA: MfmaShape = MfmaShape::M16N16K128;
/// K elements of one MFMA K step.
const STEP_ELEMS: i64 = 128;
/// Bytes of packed FP4 per row in one K step.
const STEP_BYTES: i64 = STEP_ELEMS / 2;

type DevLayout<'k, 'ctx> = Layout<Int<'k, 'ctx>>;

/// Whether a 16-row block is the first (0) or second (1) of its scale pair, when known at
/// generation time, or the block index to test at run time.
enum Parity<'k, 'ctx> {
    Static(i64),
    Dynamic(Int<'k, 'ctx>),
}

/// One tile's B operands in registers: fragments `[n][k_mma]` and scale dwords `[n_pair][pack]`.
struct BRegs<'ctx> {
    frags: Vec<Var<'ctx>>,
    scales: Vec<Var<'ctx>>,
}

struct PreB<'s, 'k, 'ctx> {
    spec: &'s KernelSpec,
    cx: Ctx<'k, 'ctx>,
    a: Buffer<'ctx>,
    b: Buffer<'ctx>,
    sfa: Buffer<'ctx>,
    sfb: Buffer<'ctx>,
    a_global: DevLayout<'k, 'ctx>,
    b_layout: DevLayout<'k, 'ctx>,
    sfa_layout: DevLayout<'k, 'ctx>,
    sfb_layout: DevLayout<'k, 'ctx>,
    slots: Vec<Lds<'ctx>>,
    mma: BlockScaledMmaOp<'k, 'ctx>,
    /// First row of the workgroup's tile.
    m0: Int<'k, 'ctx>,
    /// 16-row block index of `m0`.
    m_blk0: Int<'k, 'ctx>,
    /// 16-column block index of this wave's first column.
    n_blk0: Int<'k, 'ctx>,
    /// First column of this wave.
    n_w0: Int<'k, 'ctx>,
    nm: usize,
    nn: usize,
    /// K bytes per full tile.
    tile_bytes: i64,
}

/// Emits the body of the preshuffled-B kernel for `spec` (already validated).
pub fn build<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &KernelSpec) -> Result<()> {
    let warps = spec.warps() as i64;
    let cx = Ctx::new(k, warps)?;
    let (m, n, kb, ks) = (cx.m, cx.n, cx.kb, cx.ks);
    // Scale rows are padded to the Shuffler's 32-row block, as the host preshuffle pads them.
    let blk = Shuffler::S_MN_BLOCK as i64;
    let pad32 = |v: Int<'k, 'ctx>| (v + (blk - 1)) / blk * blk;
    let a = cx.buffer("a", m * kb, CachePolicy::Always)?;
    let b = cx.buffer("b", n * kb, spec.b_cache_policy.policy())?;
    let sfa = cx.buffer("sfa", pad32(m) * ks, CachePolicy::Always)?;
    let sfb = cx.buffer("sfb", pad32(n) * ks, CachePolicy::Always)?;
    let one = Idx::Static(1);
    // The same layouts the host preshuffle writes with, here over run-time N, M and K.
    let b_layout = Shuffler::b_5d_layout(one.clone(), n.idx(), kb.idx());
    let sfa_layout = Shuffler::scale_4d_layout(one.clone(), pad32(m).idx(), ks.idx());
    let sfb_layout = Shuffler::scale_4d_layout(one, pad32(n).idx(), ks.idx());
    let a_global = cx.row_major(m, kb, 1);
    let tile_bytes = spec.bk_elems as i64 / 2;
    let nslots = if spec.b_prefetch { 2 } else { 1 };
    let slots = (0..nslots)
        .map(|s| k.lds_alloc(&format!("a_slot{s}"), spec.bm * tile_bytes as u32, 16))
        .collect::<Result<Vec<_>>>()?;
    let nm = spec.bm as usize / 16;
    let nn = spec.wn as usize / 16;
    let mma = BlockScaledMmaOp::new(k, MMA, nm, nn)?;
    let bid_x = k.block_id_x()?;
    let bid_y = k.block_id_y()?;
    let m0 = bid_y * spec.bm as i64;
    let n_w0 = bid_x * spec.bn as i64 + cx.wave * spec.wn as i64;
    let p = PreB {
        spec,
        a,
        b,
        sfa,
        sfb,
        a_global,
        b_layout,
        sfa_layout,
        sfb_layout,
        slots,
        mma,
        m0,
        m_blk0: m0 / 16,
        n_blk0: n_w0 / 16,
        n_w0,
        nm,
        nn,
        tile_bytes,
        cx,
    };
    p.main_loop()?;
    p.tail()?;
    gemm::store_c(&p.cx, &p.mma, p.m0, p.n_w0, spec.out_dtype)
}

impl<'s, 'k, 'ctx> PreB<'s, 'k, 'ctx> {
    fn k(&self) -> &'k Kernel<'ctx> {
        self.cx.k
    }

    /// Full tiles of `BK_ELEMS`.
    fn tiles(&self) -> Int<'k, 'ctx> {
        self.cx.kdim / self.spec.bk_elems as i64
    }

    /// Stages A's `[BM, steps * 64]` bytes (`steps` MFMA K steps of 128) starting at K byte
    /// `kb0` into `slot`.
    fn stage_a(&self, slot: usize, kb0: Int<'k, 'ctx>, steps: i64) -> Result<()> {
        let pending = self.stage_a_issue(slot, kb0, steps)?;
        gemm::commit_tile(&self.cx, &self.slots[slot], pending)
    }

    /// Issues the global loads of [`Self::stage_a`]; through VGPRs, the LDS writes are returned
    /// for later, so they do not force a wait on loads issued after them.
    fn stage_a_issue(
        &self,
        slot: usize,
        kb0: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<gemm::PendingWrites<'k, 'ctx>> {
        gemm::stage_tile(
            &self.cx,
            &self.a,
            &self.a_global,
            self.m0,
            kb0,
            &self.slots[slot],
            self.spec.bm as i64,
            steps * STEP_BYTES,
            self.spec.dram_to_lds,
        )
    }

    /// Scale dwords a stage of `steps` K steps needs per 32-row pair: one per K pack, and one for
    /// a single step (the tail).
    fn packs_of(steps: i64) -> usize {
        (steps as usize / 2).max(1)
    }

    /// Loads one stage's B fragments and B scale dwords into `regs` (`steps` K steps starting at
    /// K step `step0`; a stage of two or more steps starts on a pack boundary), and returns how
    /// many loads it issued.
    fn load_b(&self, regs: &BRegs<'ctx>, step0: Int<'k, 'ctx>, steps: i64) -> Result<u32> {
        let k = self.k();
        let z = k.i32(0);
        let lane = self.cx.lane.idx();
        let s16 = |v: i64| Idx::Static(v);
        // Lane part of a B fragment: (n_lane, k_lane) = (lane % 16, lane / 16).
        let lane_b = Coord::from((
            s16(0),
            (lane.rem(&s16(16)), s16(0)),
            (s16(0), lane.div(&s16(16)), s16(0)),
        ));
        let lane_off = self
            .b_layout
            .crd2idx(&lane_b)
            .map_err(layout_err)?
            .to_value(&z);
        let mut issued = 0;
        // Fragments in the order the MFMA chain consumes them (K step outer), so waits for the
        // first MFMAs do not cover the later loads. The per-N-block part of the offset goes to
        // the lane offset (one VGPR per block, computed once) and the K part to the uniform
        // one: uniform offsets per fragment would each hold an SGPR through the loop.
        let zero_c = |c: Coord<Int<'k, 'ctx>>| -> Result<Int<'k, 'ctx>> {
            Ok(self.b_layout.crd2idx(&c).map_err(layout_err)?.to_value(&z))
        };
        for kk in 0..steps {
            let k0 = step0.idx().add(&s16(kk));
            let k_off = zero_c(Coord::from((
                s16(0),
                (s16(0), self.n_blk0.idx()),
                (s16(0), s16(0), k0),
            )))?;
            for j in 0..self.nn {
                let n_off = zero_c(Coord::from((
                    s16(0),
                    (s16(0), s16(j as i64)),
                    (s16(0), s16(0), s16(0)),
                )))?;
                let v = k.buffer_load(&self.b, lane_off + n_off, k_off, 4)?;
                k.set(&regs.frags[kk as usize * self.nn + j], v)?;
                issued += 1;
            }
        }
        let pairs = self.scale_pairs(self.nn);
        for pk in 0..Self::packs_of(steps) {
            for q in 0..pairs {
                let blk = self.n_blk0.idx().add(&s16(2 * q as i64));
                let pack = step0.idx().div(&s16(2)).add(&s16(pk as i64));
                let v = self.load_scale_dword(&self.sfb, &self.sfb_layout, blk, pack)?;
                k.set(&regs.scales[pk * pairs + q], v.value().into())?;
                issued += 1;
            }
        }
        Ok(issued)
    }

    /// Scale dwords per K pack: one per pair of 16-row blocks.
    fn scale_pairs(&self, blocks: usize) -> usize {
        blocks.div_ceil(2)
    }

    /// The scale dword of the 32-row group holding 16-row block `blk` (either parity) for K pack
    /// `pack`. Lane `l` gets the four scales of row `l % 16` of both blocks of the pair and K
    /// block `l / 16` of both K halves of the pack: byte `mn_pack + 2 * k_pack`.
    fn load_scale_dword(
        &self,
        buf: &Buffer<'ctx>,
        layout: &DevLayout<'k, 'ctx>,
        blk: Idx<Int<'k, 'ctx>>,
        pack: Idx<Int<'k, 'ctx>>,
    ) -> Result<Int<'k, 'ctx>> {
        let k = self.k();
        let z = k.i32(0);
        let lane = self.cx.lane.idx();
        let s = |v: i64| Idx::Static(v);
        let lane_c = Coord::from((
            s(0),
            (lane.rem(&s(16)), s(0), s(0)),
            (lane.div(&s(16)), s(0), s(0)),
        ));
        let uni = Coord::from((s(0), (s(0), s(0), blk.div(&s(2))), (s(0), s(0), pack)));
        let l_off = layout.crd2idx(&lane_c).map_err(layout_err)?.to_value(&z);
        let u_off = layout.crd2idx(&uni).map_err(layout_err)?.to_value(&z);
        let v = k.buffer_load(buf, l_off, u_off, 1)?;
        Ok(Int::from_value(k, v.into_int_value()))
    }

    /// Selects a scale from its pack dword: byte `mn_pack + 2 * k_pack`. A parity not known at
    /// generation time (16-row tiles, or the one-step tail) is applied by shifting the dword
    /// right (8 bits per odd block, 16 per odd K step), so the byte index stays static.
    fn select(
        &self,
        dword: Int<'k, 'ctx>,
        mn: Parity<'k, 'ctx>,
        kstep: Parity<'k, 'ctx>,
    ) -> ScaleSel<'k, 'ctx> {
        if let (Parity::Static(m), Parity::Static(s)) = (&mn, &kstep) {
            return ScaleSel {
                dword,
                byte: (m + 2 * s) as u32,
            };
        }
        let k = self.k();
        let bits = |p: Parity<'k, 'ctx>, per: i64| match p {
            Parity::Static(v) => k.i32(v * per),
            Parity::Dynamic(i) => (i % 2) * per,
        };
        let shift = bits(mn, 8) + bits(kstep, 16);
        let v = k
            .builder()
            .build_right_shift(dword.value(), shift.value(), false, "")
            .expect("builder positioned");
        ScaleSel {
            dword: Int::from_value(k, v),
            byte: 0,
        }
    }

    fn new_regs(&self, steps: i64) -> Result<BRegs<'ctx>> {
        let k = self.k();
        let ctx = k.context();
        let v4 = ctx.i32_type().vec_type(4);
        let frags = (0..steps as usize * self.nn)
            .map(|_| k.var(v4, v4.const_zero().into()))
            .collect::<Result<_>>()?;
        let scales = (0..Self::packs_of(steps) * self.scale_pairs(self.nn))
            .map(|_| k.var(ctx.i32_type(), ctx.i32_type().const_zero().into()))
            .collect::<Result<_>>()?;
        Ok(BRegs { frags, scales })
    }

    /// The MFMA chain of one stage: A fragments from `slot` (a `[BM, steps*64]` row-major
    /// tile), B from `regs`, scales of A loaded here. `step0` is the stage's first K step.
    fn compute(
        &self,
        slot: usize,
        regs: &BRegs<'ctx>,
        step0: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<()> {
        let k = self.k();
        let view = TileTensor::new(
            k,
            Storage::Lds(self.slots[slot]),
            static_layout(&Layout::row_major((
                self.spec.bm as i64,
                steps * STEP_BYTES,
            ))),
        );
        let s = |v: i64| Idx::Static(v);
        // A scale dwords: one per 32-row pair of blocks and K pack.
        let a_pairs = self.scale_pairs(self.nm);
        let mut a_scales = Vec::new();
        for pk in 0..Self::packs_of(steps) {
            for q in 0..a_pairs {
                let blk = self.m_blk0.idx().add(&s(2 * q as i64));
                let pack = step0.idx().div(&s(2)).add(&s(pk as i64));
                a_scales.push(self.load_scale_dword(&self.sfa, &self.sfa_layout, blk, pack)?);
            }
        }
        let m_parity = |i: usize| {
            if self.spec.bm.is_multiple_of(32) {
                Parity::Static(i as i64 % 2)
            } else {
                Parity::Dynamic(self.m_blk0 + i as i64)
            }
        };
        let n_parity = |j: usize| {
            if self.spec.wn.is_multiple_of(32) {
                Parity::Static(j as i64 % 2)
            } else {
                Parity::Dynamic(self.n_blk0 + j as i64)
            }
        };
        // Stages of whole packs start on a pack boundary; a single step may be either half.
        let k_parity = |kk: i64| {
            if steps > 1 {
                Parity::Static(kk % 2)
            } else {
                Parity::Dynamic(step0 + kk)
            }
        };
        let b_pairs = self.scale_pairs(self.nn);
        let cluster = self.spec.mfma_cluster as usize;
        let mut in_cluster = 0usize;
        let bracket = self.spec.cluster_drain_sched;
        for kk in 0..steps {
            let a_frags: Vec<BasicValueEnum<'ctx>> = (0..self.nm)
                .map(|i| self.mma.load_frag(&view, i as i64, kk, self.cx.lane))
                .collect::<Result<_>>()?;
            let pk = (kk / 2) as usize;
            for i in 0..self.nm {
                let a_dw = a_scales[pk * a_pairs + i / 2];
                let a_sel = self.select(a_dw, m_parity(i), k_parity(kk));
                for j in 0..self.nn {
                    let b = k.get(&regs.frags[kk as usize * self.nn + j])?;
                    let b_dw = k.get(&regs.scales[pk * b_pairs + j / 2])?.into_int_value();
                    let b_sel = self.select(Int::from_value(k, b_dw), n_parity(j), k_parity(kk));
                    if bracket && in_cluster == 0 {
                        k.setprio(1)?;
                        k.sched_barrier(0)?;
                    }
                    self.mma.mma(i, j, a_frags[i], a_sel, b, b_sel)?;
                    in_cluster += 1;
                    if bracket && in_cluster == cluster {
                        k.sched_barrier(0)?;
                        k.setprio(0)?;
                        in_cluster = 0;
                    }
                }
            }
        }
        if bracket && in_cluster != 0 {
            k.sched_barrier(0)?;
            k.setprio(0)?;
        }
        Ok(())
    }

    /// Barrier between pipeline stages. With `cluster_drain_sched` only LDS is fenced and the
    /// wait covers just the A staging, so prefetched B loads (issued after it) stay in flight
    /// across the barrier and drain per MFMA cluster instead.
    fn stage_barrier(&self, b_loads_in_flight: u32) -> Result<()> {
        let k = self.k();
        if self.spec.cluster_drain_sched {
            if self.spec.dram_to_lds {
                k.s_waitcnt(tilegen_dsl::waitcnt_vmcnt(b_loads_in_flight))?;
            }
            k.barrier_lds_only()
        } else {
            k.barrier()
        }
    }

    fn main_loop(&self) -> Result<()> {
        let k = self.k();
        let steps = self.spec.bk_elems as i64 / STEP_ELEMS;
        let tiles = self.tiles();
        let tile_kb = |t: Int<'k, 'ctx>| t * self.tile_bytes;
        let tile_step = |t: Int<'k, 'ctx>| t * steps;
        if !self.spec.b_prefetch {
            let regs = self.new_regs(steps)?;
            return k.for_range(k.i32(0), tiles, 1, |t| {
                self.stage_a(0, tile_kb(t), steps)?;
                self.load_b(&regs, tile_step(t), steps)?;
                k.barrier()?;
                self.compute(0, &regs, tile_step(t), steps)?;
                k.barrier()
            });
        }
        // Depth-2 pipeline, unrolled by two so each half's register and LDS slot are static.
        let regs = [self.new_regs(steps)?, self.new_regs(steps)?];
        let deep = self.spec.deep_prime;
        let zero = k.i32(0);
        let mut prologue_loads = 0;
        k.if_then(zero.lt(&tiles), || {
            self.stage_a(0, zero, steps)?;
            if deep {
                // Tile 1 into slot 1 (tile 0 again when there is only one: the 1-deep fallback).
                let one = k.i32(1).min(&(tiles - 1));
                self.stage_a(1, tile_kb(one), steps)?;
            }
            prologue_loads = self.load_b(&regs[0], zero, steps)?;
            Ok(())
        })?;
        self.stage_barrier(prologue_loads)?;
        // One tile per half. The next A tile's global loads are issued before the next B
        // fragments and written to LDS only after this tile's MFMAs, so neither the LDS writes
        // nor the barrier wait for the B loads: those stay in flight into the next half, where
        // each MFMA waits only for its own fragments. Tile indices past the last tile are
        // clamped to it instead of branched around: the extra loads land in a free slot or in
        // registers nothing reads again.
        let last = tiles - 1;
        let half = |t: Int<'k, 'ctx>, cur: usize| -> Result<()> {
            let nxt = 1 - cur;
            let b_tile = (t + 1).min(&last);
            if deep {
                // A for tile t+2 goes into this half's slot once everyone is done reading it.
                let a_tile = (t + 2).min(&last);
                let pending = if self.spec.dram_to_lds {
                    Vec::new()
                } else {
                    self.stage_a_issue(cur, tile_kb(a_tile), steps)?
                };
                let issued = self.load_b(&regs[nxt], tile_step(b_tile), steps)?;
                self.compute(cur, &regs[cur], tile_step(t), steps)?;
                self.stage_barrier(issued)?;
                if self.spec.dram_to_lds {
                    self.stage_a(cur, tile_kb(a_tile), steps)?;
                } else {
                    gemm::commit_tile(&self.cx, &self.slots[cur], pending)?;
                }
            } else {
                let pending = self.stage_a_issue(nxt, tile_kb(b_tile), steps)?;
                let issued = self.load_b(&regs[nxt], tile_step(b_tile), steps)?;
                self.compute(cur, &regs[cur], tile_step(t), steps)?;
                gemm::commit_tile(&self.cx, &self.slots[nxt], pending)?;
                self.stage_barrier(issued)?;
            }
            Ok(())
        };
        k.for_range(k.i32(0), tiles, 2, |t| {
            half(t, 0)?;
            let t1 = t + 1;
            k.if_then(t1.lt(&tiles), || half(t1, 1))
        })
    }

    /// The K past the last full tile (K is a multiple of 256, BK_ELEMS may be larger), one MFMA
    /// K step (128) per iteration through slot 0: the smallest body that covers every K.
    fn tail(&self) -> Result<()> {
        if self.spec.bk_elems == 256 {
            // K is a multiple of 256 (the launch contract): whole tiles cover it.
            return Ok(());
        }
        let k = self.k();
        let steps_per_tile = self.spec.bk_elems as i64 / STEP_ELEMS;
        let first = self.tiles() * steps_per_tile;
        let total = self.cx.kdim / STEP_ELEMS;
        let regs = self.new_regs(1)?;
        k.for_range(first, total, 1, |st| {
            self.stage_a(0, st * STEP_BYTES, 1)?;
            self.load_b(&regs, st, 1)?;
            k.barrier()?;
            self.compute(0, &regs, st, 1)?;
            k.barrier()
        })
    }
}
