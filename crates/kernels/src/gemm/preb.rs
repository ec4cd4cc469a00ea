//! `MXFP4MatmulAMD_PreB` (seed 001): A staged through LDS, B preshuffled by `Shuffler` and read
//! straight into VGPRs with one `buffer_load_dwordx4` per lane and MFMA; both scale tensors in the
//! Shuffler's 4D layout, one dword per lane covering a 2x2 (MN pack, K pack) block.
//!
//! A wave covers `WM` rows and `WN` columns; waves split `BN` and, for tiles too large for one
//! wave's registers, `BM` (by default `WM = BM`: B never passes through LDS, so waves along M
//! each load the same B fragments, from the caches after the first). Every fragment, scale and
//! accumulator position comes from the atom's layouts applied to the Shuffler's layouts, so the
//! kernel runs with either MFMA shape: a 16-byte FP4 fragment is contiguous in the preshuffled B
//! for both.
//!
//! The pipeline is written once over its operands ([`Mainloop`]): where A's tiles and scales
//! come from is an [`AOperand`] (contiguous rows here, gathered or sorted rows in the grouped
//! MoE kernels), B is a view of one `[N, K]` preshuffled matrix and its scales, and the
//! epilogue is the caller's.

use tilegen_dsl::{
    Buffer, CachePolicy, DevLayout, Int, Kernel, Lds, MfmaShape, MmaAtom, Result, Storage,
    TileTensor, Ty, Value, Var, dev_layout, downcast,
};
use tilegen_layout::{Idx, Layout};
use tilegen_mx::Shuffler;

use super::common::{self, Ctx};
use super::spec::PrebSpec;
use crate::tile::mma::BlockScaledMmaOp;
use crate::tile::scales::{Rows, ScaleFragments, ScaleFrags, Scales};
use crate::tile::stage::{self, Threads};
use crate::tile::xcd::xcd_order;

/// Bits of one FP4 element.
const FP4_BITS: u32 = 4;

/// MMA rows of A fragments read from LDS ahead of the MFMAs that use them: two rows' MFMAs
/// (at least 2 x 16 cycles) cover an LDS read's latency, at 4 VGPRs per fragment in flight.
const A_READ_AHEAD: usize = 2;

/// One tile's operands loaded into registers ahead of its MFMAs: B fragments `[k_step][n]`,
/// and the raw scale dwords of B and of A (A's tile itself goes through LDS).
struct BRegs<'ctx> {
    frags: Vec<Var<'ctx>>,
    scales: Vec<Var<'ctx>>,
    a_scales: Vec<Var<'ctx>>,
}

/// A stage's B fragment loads not issued yet, in the order the MFMA chain consumes them (K
/// step outer), so waits for the first MFMAs do not cover the later loads.
struct PendingB<'r, 'k, 'ctx> {
    regs: &'r BRegs<'ctx>,
    /// The stage's B fragments of this lane.
    frag: TileTensor<'k, 'ctx>,
    /// The next fragment to load, as `k_step * nn + n`.
    next: usize,
    /// Loads issued for the stage so far (scales included).
    issued: u32,
}

impl<'k, 'ctx> PendingB<'_, 'k, 'ctx> {
    /// Fragments not issued yet.
    fn left(&self) -> usize {
        self.regs.frags.len() - self.next
    }

    /// Issues up to `n` more fragment loads. The per-N-tile part of the offset goes to the
    /// lane offset (one VGPR per tile, computed once) and the K part to the uniform one.
    fn issue<A: AOperand<'k, 'ctx>>(
        &mut self,
        ml: &Mainloop<'_, 'k, 'ctx, A>,
        n: usize,
    ) -> Result<()> {
        for _ in 0..n.min(self.left()) {
            let (kk, j) = (self.next / ml.nn, self.next % ml.nn);
            let v = self.frag.load_values(&[j as i64, kk as i64])?;
            ml.k().set(&self.regs.frags[self.next], v)?;
            self.next += 1;
            self.issued += 1;
        }
        Ok(())
    }
}

/// A stage's A tile whose global loads a pipeline issues over the MFMA chain of a step:
/// `rounds` rounds (one load per wave each), the first at MMA row `start` of the chain and
/// one a row after it (see [`Mainloop::a_issue_row`]); rounds left at the chain's end go
/// after it.
struct PendingA<'k, 'ctx> {
    slot: usize,
    kb0: Int<'k, 'ctx>,
    steps: i64,
    rounds: usize,
    issued: usize,
    start: usize,
    /// The LDS writes of the rounds issued so far.
    writes: stage::PendingWrites<'k, 'ctx>,
}

impl<'k, 'ctx> PendingA<'k, 'ctx> {
    /// A tile's loads, those due before the chain (at `start` 0) issued at once.
    fn new<A: AOperand<'k, 'ctx>>(
        ml: &Mainloop<'_, 'k, 'ctx, A>,
        slot: usize,
        kb0: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<Self> {
        let start = ml.a_issue_row(steps);
        let mut a = Self {
            slot,
            kb0,
            steps,
            rounds: ml.a.stage_rounds(ml, steps),
            issued: 0,
            start,
            writes: Vec::new(),
        };
        if start == 0 {
            // Before the chain, in the step's first burst (unfenced: as the pipeline always
            // issued it).
            a.writes = ml.a.stage_issue_rounds(ml, slot, kb0, steps, 0..a.rounds)?;
            a.issued = a.rounds;
        }
        Ok(a)
    }

    /// Issues the rounds due by MMA row `p` of the chain (all of them past its end).
    fn issue_due<A: AOperand<'k, 'ctx>>(
        &mut self,
        ml: &Mainloop<'_, 'k, 'ctx, A>,
        p: usize,
    ) -> Result<()> {
        let due = if p < self.start {
            0
        } else if p == usize::MAX {
            self.rounds
        } else {
            (p - self.start + 1).min(self.rounds)
        };
        if due > self.issued {
            // Fenced, so the scheduler keeps them between the MFMAs they were placed among.
            ml.fence()?;
            let part = self.issued..due;
            self.writes
                .extend(ml.a.stage_issue_rounds(ml, self.slot, self.kb0, self.steps, part)?);
            ml.fence()?;
            self.issued = due;
        }
        Ok(())
    }
}

/// Where a [`Mainloop`]'s A operand comes from: how a K tile of its `BM` rows is staged into
/// an LDS slot, and a lane's scale fragments for a stage.
pub(crate) trait AOperand<'k, 'ctx> {
    /// Issues the global loads of A's `[BM, steps * step_bytes]` bytes from K byte `kb0` into
    /// LDS slot `slot`; through VGPRs, the LDS writes are returned for later (see
    /// [`stage::stage_tile`]).
    fn stage_issue(
        &self,
        ml: &Mainloop<'_, 'k, 'ctx, Self>,
        slot: usize,
        kb0: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<stage::PendingWrites<'k, 'ctx>>
    where
        Self: Sized,
    {
        let all = 0..self.stage_rounds(ml, steps);
        self.stage_issue_rounds(ml, slot, kb0, steps, all)
    }

    /// How many rounds of loads (one instruction per wave each) [`AOperand::stage_issue`]
    /// issues for a stage of `steps` K steps.
    fn stage_rounds(&self, ml: &Mainloop<'_, 'k, 'ctx, Self>, steps: i64) -> usize
    where
        Self: Sized;

    /// [`AOperand::stage_issue`]'s rounds `part` only, so a pipeline can spread a tile's
    /// loads over the MFMA chain; the parts' pending writes together are the tile's.
    fn stage_issue_rounds(
        &self,
        ml: &Mainloop<'_, 'k, 'ctx, Self>,
        slot: usize,
        kb0: Int<'k, 'ctx>,
        steps: i64,
        part: std::ops::Range<usize>,
    ) -> Result<stage::PendingWrites<'k, 'ctx>>
    where
        Self: Sized;

    /// A lane's A scale fragments for stage `t` of `steps` K steps.
    fn scales(
        &self,
        ml: &Mainloop<'_, 'k, 'ctx, Self>,
        t: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<Box<dyn ScaleFragments<'k, 'ctx> + 'k>>
    where
        Self: Sized;

    /// Whether [`AOperand::scales`] gives each wave the scales of its own `WM` rows
    /// ([`Mainloop::wave_m`]), so waves may split `BM`; an operand that gives every wave the
    /// scales of all `BM` rows runs only with `WM = BM`.
    fn splits_rows(&self) -> bool {
        false
    }
}

/// A: rows `tile * BM ..` of a row-major `[M, K/2]` matrix, its scales in the Shuffler's 4D
/// layout over `M` padded to 32 rows (the GEMM; the grouped down projection over sorted rows).
pub(crate) struct RowsA<'k, 'ctx> {
    /// The matrix.
    pub(crate) buf: Buffer<'ctx>,
    /// Its row-major layout in bytes.
    pub(crate) global: DevLayout<'k, 'ctx>,
    /// The workgroup's row tile (in units of `BM`).
    pub(crate) tile: Int<'k, 'ctx>,
    /// Its scales.
    pub(crate) sfa: Scales<'k, 'ctx>,
}

impl<'k, 'ctx> AOperand<'k, 'ctx> for RowsA<'k, 'ctx> {
    fn stage_rounds(&self, ml: &Mainloop<'_, 'k, 'ctx, Self>, steps: i64) -> usize {
        stage::stage_rounds(&ml.th, ml.spec.bm as i64, steps * ml.step_bytes())
    }

    fn stage_issue_rounds(
        &self,
        ml: &Mainloop<'_, 'k, 'ctx, Self>,
        slot: usize,
        kb0: Int<'k, 'ctx>,
        steps: i64,
        part: std::ops::Range<usize>,
    ) -> Result<stage::PendingWrites<'k, 'ctx>> {
        stage::stage_tile(
            &ml.th,
            &self.buf,
            &self.global,
            self.tile * ml.spec.bm as i64,
            kb0,
            &ml.slots[slot],
            ml.spec.bm as i64,
            steps * ml.step_bytes(),
            ml.spec.dram_to_lds,
            &common::operand_swizzle(ml.spec, steps * ml.step_bytes())?,
            part,
        )
    }

    fn scales(
        &self,
        ml: &Mainloop<'_, 'k, 'ctx, Self>,
        t: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<Box<dyn ScaleFragments<'k, 'ctx> + 'k>> {
        let atom = &ml.mma.atom;
        let lane = ml.th.lane;
        let k_blocks = steps * ml.k_blocks_per_step();
        let sf = |v: &TileTensor<'k, 'ctx>| v.partition_sfa(atom, lane);
        // The wave's WM rows: its strip of the workgroup's BM, counted in WM like B's rows.
        let (waves_m, _) = ml.spec.wave_grid();
        let rows = Rows {
            rows: ml.spec.warp_m() as i64,
            tile: self.tile * waves_m as i64 + ml.wave_m(),
        };
        Ok(Box::new(self.sfa.fragments(sf, rows, k_blocks, t)?))
    }

    fn splits_rows(&self) -> bool {
        true
    }
}

/// The preshuffled-B pipeline of one workgroup: `BM` rows of A (from an [`AOperand`]) times a
/// `BN`-column tile of B, accumulated in [`Mainloop::mma`]; the caller runs
/// [`Mainloop::run`] and then its epilogue on the accumulators.
pub(crate) struct Mainloop<'s, 'k, 'ctx, A> {
    pub(crate) spec: &'s PrebSpec,
    pub(crate) th: Threads<'k, 'ctx>,
    /// K in elements.
    pub(crate) kdim: Int<'k, 'ctx>,
    pub(crate) a: A,
    /// B in FP4 elements over the preshuffled layout, `(n, k)`.
    pub(crate) b: TileTensor<'k, 'ctx>,
    pub(crate) sfb: Scales<'k, 'ctx>,
    /// The workgroup's column tile of B (in units of `BN`).
    pub(crate) b_tile: Int<'k, 'ctx>,
    pub(crate) slots: Vec<Lds<'ctx>>,
    pub(crate) mma: BlockScaledMmaOp<'k, 'ctx>,
    pub(crate) nm: usize,
    pub(crate) nn: usize,
    /// K elements of one MFMA.
    pub(crate) step_elems: i64,
    /// K bytes per full tile.
    pub(crate) tile_bytes: i64,
    /// Emit the loop over the K past the last full tile (the GEMM's launch contract allows
    /// such K; a caller whose K is always whole tiles leaves it out).
    pub(crate) tail: bool,
    /// The K tiles this workgroup runs, `(first, count)` in units of `BK_ELEMS`: all of K, or
    /// one split-K slice ([`Mainloop::k_slice`]).
    tiles: (Int<'k, 'ctx>, Int<'k, 'ctx>),
    /// Whether [`Mainloop::k_slice`] chose the tiles.
    sliced: bool,
}

/// Emits the body of the preshuffled-B kernel for `spec` (already validated).
pub fn build<'k, 'ctx>(k: &'k Kernel<'ctx>, spec: &PrebSpec) -> Result<()> {
    let warps = spec.warps() as i64;
    let cx = Ctx::new(k, warps)?;
    let (m, n, kb, ks) = (cx.m, cx.n, cx.kb, cx.ks);
    let p = cx.params;
    // Scale rows are padded to the Shuffler's 32-row block, as the host preshuffle pads them.
    let a = cx.buffer(p.a, m * kb, CachePolicy::Always)?;
    let b = cx.buffer(p.b, n * kb, spec.knobs().b_cache_policy)?;
    let sfa = cx.buffer(p.sfa, pad32(m) * ks, CachePolicy::Always)?;
    let sfb = cx.buffer(p.sfb, pad32(n) * ks, CachePolicy::Always)?;
    let b = b_view(k, b, n, kb)?;
    let (slots, mma) = mma_state(k, spec)?;
    let (bid_x, bid_y, slice) = tile_order(k, spec, cx.m, cx.n)?;
    let a = RowsA {
        buf: a,
        global: cx.row_major(m, kb, 1),
        tile: bid_y,
        sfa: Scales::new(k, sfa, pad32(m), ks)?,
    };
    let sfb = Scales::new(k, sfb, pad32(n), ks)?;
    let mut p = Mainloop::new(spec, *cx, cx.kdim, a, b, sfb, bid_x, slots, mma, true);
    if spec.knobs().split_k > 1 {
        p = p.k_slice(slice, spec.knobs().split_k);
    }
    p.run()?;
    let (bm, bn, wm, wn) = (
        spec.bm as i64,
        spec.bn as i64,
        spec.warp_m() as i64,
        spec.wn as i64,
    );
    let wave = ([wm, wn], [p.wave_m(), p.wave_n()]);
    let block = ([bm, bn], [bid_y, bid_x]);
    if spec.knobs().split_k > 1 && spec.knobs().split_k_atomic {
        common::atomic_add_c(&cx, &p.mma, block, wave, spec.out_dtype)
    } else if spec.knobs().split_k > 1 {
        common::store_partial(&cx, &p.mma, block, wave, slice)
    } else {
        common::store_c(&cx, &p.mma, block, wave, spec.out_dtype)
    }
}

/// The workgroup's output tile `(n tile, m tile)` and split-K slice. In the grid's order they
/// are its ids. With `xcd_group_m` `g`, the linear id is first renumbered so
/// that the workgroups of one XCD take consecutive numbers ([`xcd_order`]), then the number
/// walks the slices, and within a slice groups of `g` M tiles column by column. Both steps are
/// bijections of `0..T`, so every tile and slice is still run exactly once.
fn tile_order<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    spec: &PrebSpec,
    m: Int<'k, 'ctx>,
    n: Int<'k, 'ctx>,
) -> Result<(Int<'k, 'ctx>, Int<'k, 'ctx>, Int<'k, 'ctx>)> {
    let (x, y) = (k.block_id_x()?, k.block_id_y()?);
    let z = if spec.knobs().split_k > 1 {
        k.block_id_z()?
    } else {
        k.i32(0)
    };
    if spec.knobs().xcd_group_m == 0 {
        return Ok((x, y, z));
    }
    let gx = (n + (spec.bn as i64 - 1)) / spec.bn as i64;
    let gy = (m + (spec.bm as i64 - 1)) / spec.bm as i64;
    let plane = gx * gy;
    let total = plane * spec.knobs().split_k as i64;
    let w = (z * gy + y) * gx + x;
    let w = xcd_order(w, total);
    // Slice, then groups of G M tiles within the slice.
    let (slice, t) = (w / plane, w % plane);
    let g = spec.knobs().xcd_group_m as i64;
    let in_group = gx * g;
    let first_m = t / in_group * g;
    let rows = (gy - first_m).min(&k.i32(g));
    let r = t % in_group;
    Ok((r / rows, first_m + r % rows, slice))
}

/// `v` rounded up to the Shuffler's 32-row scale block, as the host preshuffle pads scale rows.
pub(crate) fn pad32<'k, 'ctx>(v: Int<'k, 'ctx>) -> Int<'k, 'ctx> {
    let blk = Shuffler::S_MN_BLOCK as i64;
    (v + (blk - 1)) / blk * blk
}

/// The `(n, k)` FP4 view of a preshuffled `[n, K]` B in `buf` (`kb` = K / 2 bytes per row):
/// the same layout the host preshuffle writes with, over run-time N and K.
pub(crate) fn b_view<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    buf: Buffer<'ctx>,
    n: Int<'k, 'ctx>,
    kb: Int<'k, 'ctx>,
) -> Result<TileTensor<'k, 'ctx>> {
    let b5 = Shuffler::b_5d_layout(Idx::Static(1), n.idx(), kb.idx());
    let b_nk = downcast(&Layout::from_modes(vec![b5.mode(1)?, b5.mode(2)?]), 2)?;
    TileTensor::packed(k, Storage::Global(buf), b_nk, FP4_BITS)
}

/// The A slots of the spec's LDS plan (one per pipeline stage) and the zeroed
/// accumulators of a wave's `BM x WN` tile.
pub(crate) fn mma_state<'k, 'ctx>(
    k: &'k Kernel<'ctx>,
    spec: &PrebSpec,
) -> Result<(Vec<Lds<'ctx>>, BlockScaledMmaOp<'k, 'ctx>)> {
    let shape: MfmaShape = spec.mma;
    let mn = shape.mn() as usize;
    let slots = common::alloc_lds(k, &spec.lds_buffers())?;
    let (nm, nn) = (spec.warp_m() as usize / mn, spec.wn as usize / mn);
    Ok((slots, BlockScaledMmaOp::new(k, shape, nm, nn)?))
}

impl<'s, 'k, 'ctx, A: AOperand<'k, 'ctx>> Mainloop<'s, 'k, 'ctx, A> {
    /// The pipeline for `spec` over its operands (`b_tile`: the workgroup's BN tile of B).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        spec: &'s PrebSpec,
        th: Threads<'k, 'ctx>,
        kdim: Int<'k, 'ctx>,
        a: A,
        b: TileTensor<'k, 'ctx>,
        sfb: Scales<'k, 'ctx>,
        b_tile: Int<'k, 'ctx>,
        slots: Vec<Lds<'ctx>>,
        mma: BlockScaledMmaOp<'k, 'ctx>,
        tail: bool,
    ) -> Self {
        let shape: MfmaShape = spec.mma;
        let tiles = (kdim.kernel().i32(0), kdim / spec.bk_elems as i64);
        Mainloop {
            tiles,
            sliced: false,
            spec,
            th,
            kdim,
            a,
            b,
            sfb,
            b_tile,
            nm: mma.num_m,
            nn: mma.num_n,
            slots,
            mma,
            step_elems: shape.k() as i64,
            tile_bytes: spec.bk_elems as i64 / 2,
            tail,
        }
    }

    /// Runs slice `slice` of `slices` equal K slices instead of all of K (split-K). The launch
    /// contract makes K a multiple of `slices * BK_ELEMS`, so a slice is whole tiles and has
    /// no tail.
    pub(crate) fn k_slice(mut self, slice: Int<'k, 'ctx>, slices: u32) -> Self {
        let count = self.kdim / (i64::from(slices) * self.spec.bk_elems as i64);
        self.tiles = (slice * count, count);
        self.tail = false;
        self.sliced = true;
        self
    }

    /// The wave's strip along M (0 when waves do not split `BM`): waves run along N first.
    pub(crate) fn wave_m(&self) -> Int<'k, 'ctx> {
        match self.spec.wave_grid() {
            (1, _) => self.k().i32(0),
            (_, waves_n) => self.th.wave / waves_n as i64,
        }
    }

    /// The wave's strip along N.
    pub(crate) fn wave_n(&self) -> Int<'k, 'ctx> {
        match self.spec.wave_grid() {
            (1, _) => self.th.wave,
            (_, waves_n) => self.th.wave % waves_n as i64,
        }
    }

    /// Emits the K loop (and the tail, if asked for): the accumulators then hold the tile.
    pub(crate) fn run(&self) -> Result<()> {
        // Settings only some callers implement are refused, not ignored.
        let refuse = |rule: &str| {
            Err(tilegen_dsl::DslError::Operand {
                op: "preb mainloop",
                rule: rule.into(),
            })
        };
        if self.spec.warp_m() != self.spec.bm && !self.a.splits_rows() {
            return refuse("this kernel's A operand runs with wm = bm only");
        }
        if self.spec.knobs().split_k > 1 && !self.sliced {
            return refuse("this kernel does not split K (split_k must be 1)");
        }
        self.main_loop()?;
        if self.tail {
            self.tail()?;
        }
        Ok(())
    }

    pub(crate) fn k(&self) -> &'k Kernel<'ctx> {
        self.th.k
    }

    /// Bytes of packed FP4 per row in one MFMA K step.
    pub(crate) fn step_bytes(&self) -> i64 {
        self.step_elems / 2
    }

    /// Stages A's `[BM, steps * step_bytes]` bytes (`steps` MFMA K steps) starting at K byte
    /// `kb0` into `slot`.
    fn stage_a(&self, slot: usize, kb0: Int<'k, 'ctx>, steps: i64) -> Result<()> {
        let pending = self.stage_a_issue(slot, kb0, steps)?;
        stage::commit_tile(&self.th, &self.slots[slot], pending)
    }

    /// Issues the global loads of [`Self::stage_a`]; through VGPRs, the LDS writes are returned
    /// for later, so they do not force a wait on loads issued after them.
    fn stage_a_issue(
        &self,
        slot: usize,
        kb0: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<stage::PendingWrites<'k, 'ctx>> {
        self.a.stage_issue(self, slot, kb0, steps)
    }

    /// The wave's rows of B: its `WN` of the workgroup's `BN` (A's are all `BM` of the
    /// workgroup's). B's tile index counts in `WN`: a `BN` tile need not start on one of the
    /// Shuffler's 32-row scale groups (BN = 48, say), so it cannot be tiled first and then split
    /// by waves.
    fn b_rows(&self) -> Rows<'k, 'ctx> {
        let s = self.spec;
        Rows {
            rows: s.wn as i64,
            tile: self.b_tile * (s.bn / s.wn) as i64 + self.wave_n(),
        }
    }

    /// A lane's B scale fragments for stage `t` of `steps` K steps.
    fn b_scales(&self, t: Int<'k, 'ctx>, steps: i64) -> Result<ScaleFrags<'k, 'ctx>> {
        let atom = &self.mma.atom;
        let lane = self.th.lane;
        let k_blocks = steps * self.k_blocks_per_step();
        let sf = |v: &TileTensor<'k, 'ctx>| v.partition_sfb(atom, lane);
        self.sfb.fragments(sf, self.b_rows(), k_blocks, t)
    }

    /// A lane's A scale fragments for stage `t` of `steps` K steps.
    fn a_scales(
        &self,
        t: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<Box<dyn ScaleFragments<'k, 'ctx> + 'k>> {
        self.a.scales(self, t, steps)
    }

    pub(crate) fn k_blocks_per_step(&self) -> i64 {
        self.step_elems / self.mma.atom.scale_block().unwrap_or(1)
    }

    /// Loads stage `t`'s scale dwords of A and B and its B fragments into `regs` (`steps` K
    /// steps), and returns how many loads it issued.
    fn load_b(&self, regs: &BRegs<'ctx>, t: Int<'k, 'ctx>, steps: i64) -> Result<u32> {
        let mut pending = self.start_b(regs, t, steps)?;
        pending.issue(self, usize::MAX)?;
        Ok(pending.issued)
    }

    /// Issues stage `t`'s scale dwords of A and B into `regs` and returns its B fragment loads,
    /// to be issued later ([`PendingB::issue`]). The scales go first: the stage's first MFMA
    /// needs all of them, and a wait on the vector memory counter covers every load issued
    /// before the one it waits for.
    fn start_b<'r>(
        &self,
        regs: &'r BRegs<'ctx>,
        t: Int<'k, 'ctx>,
        steps: i64,
    ) -> Result<PendingB<'r, 'k, 'ctx>> {
        let k = self.k();
        let frag = self
            .b_rows()
            .of(&self.b, steps * self.step_elems, t)?
            .partition_b(&self.mma.atom, self.th.lane)?;
        let mut issued = 0;
        for (var, v) in regs.scales.iter().zip(self.b_scales(t, steps)?.issue(k)?) {
            k.set(var, v.into())?;
            issued += 1;
        }
        for (var, v) in regs.a_scales.iter().zip(self.a_scales(t, steps)?.issue(k)?) {
            k.set(var, v.into())?;
            issued += 1;
        }
        Ok(PendingB {
            regs,
            frag,
            next: 0,
            issued,
        })
    }

    fn new_regs(&self, steps: i64) -> Result<BRegs<'ctx>> {
        let k = self.k();
        let frag = k.zero(Ty::dwords(4));
        let frags = (0..steps as usize * self.nn)
            .map(|_| k.var(frag))
            .collect::<Result<_>>()?;
        let dword_vars = |n: usize| {
            (0..n)
                .map(|_| k.var(k.zero(Ty::I32)))
                .collect::<Result<Vec<_>>>()
        };
        let scales = dword_vars(self.b_scales(k.i32(0), steps)?.dwords())?;
        let a_scales = dword_vars(self.a_scales(k.i32(0), steps)?.dwords())?;
        Ok(BRegs {
            frags,
            scales,
            a_scales,
        })
    }

    /// The MFMA chain of stage `t`: A fragments from `slot` (a `[BM, steps * step_bytes]`
    /// row-major tile), B fragments and both operands' scales from `regs`.
    ///
    /// `next`, when given, is a later stage's B fragment loads: they are issued a few per MMA
    /// row over the whole chain, between MFMAs, instead of in one burst before
    /// it, where the CU's vector memory path serializes the bursts of all its waves and each
    /// wave waits for its turn with its matrix core idle. `a_next`, when given, is a later
    /// stage's A tile, whose loads not yet issued go at the rows it names.
    fn compute(
        &self,
        slot: usize,
        regs: &BRegs<'ctx>,
        t: Int<'k, 'ctx>,
        steps: i64,
        mut next: Option<&mut PendingB<'_, 'k, 'ctx>>,
        mut a_next: Option<&mut PendingA<'k, 'ctx>>,
    ) -> Result<()> {
        let k = self.k();
        let (bm, cols) = (self.spec.bm as i64, steps * self.step_elems);
        let layout = dev_layout(&Layout::row_major((bm, cols)))?;
        let slot_tile =
            TileTensor::packed(k, Storage::Lds(self.slots[slot]), layout, FP4_BITS)?.swizzled(
                common::operand_swizzle(self.spec, steps * self.step_bytes())?,
            )?;
        // The wave's WM rows of the workgroup's BM in the slot.
        let wave_tile = match self.spec.wave_grid() {
            (1, _) => slot_tile,
            _ => slot_tile.tile(
                &[self.spec.warp_m() as i64, cols],
                &[self.wave_m().idx(), Idx::Static(0)],
            )?,
        };
        let a_frag = wave_tile.partition_a(&self.mma.atom, self.th.lane)?;
        let read = |vars: &[Var<'ctx>]| {
            vars.iter()
                .map(|v| k.get(v)?.int(k))
                .collect::<Result<Vec<_>>>()
        };
        let a_sf = self.a_scales(t, steps)?;
        let a_dwords = a_sf.finish(k, read(&regs.a_scales)?)?;
        let b_sf = self.b_scales(t, steps)?;
        let b_dwords = b_sf.finish(k, read(&regs.scales)?)?;
        let pipeline = self.spec.prefetch_settings();
        let sched = pipeline.and_then(|p| p.cluster);
        let cluster = sched.map_or(0, |c| c.mfma_cluster as usize);
        let mut in_cluster = 0usize;
        let bracket = sched.is_some();
        let burst = pipeline.is_some_and(|p| p.b_burst);
        // A's fragments are read from LDS `A_READ_AHEAD` MMA rows ahead of the MFMAs that use
        // them, and each row's MFMAs are fenced, so a read's latency hides behind the MFMAs
        // before it (left to itself, LLVM reuses one register pair for every fragment and
        // waits for each read in turn).
        let order: Vec<(usize, usize)> = (0..steps as usize)
            .flat_map(|kk| (0..self.nm).map(move |i| (kk, i)))
            .collect();
        let read_a = |&(kk, i): &(usize, usize)| a_frag.load_values(&[i as i64, kk as i64]);
        let mut ahead: std::collections::VecDeque<Value<'ctx>> = order
            .iter()
            .take(A_READ_AHEAD)
            .map(read_a)
            .collect::<Result<_>>()?;
        let spread = order.len().max(1);
        for (p, &(kk, i)) in order.iter().enumerate() {
            if let Some(a) = a_next.as_deref_mut() {
                a.issue_due(self, p)?;
            }
            if let Some(next) = order.get(p + A_READ_AHEAD) {
                ahead.push_back(read_a(next)?);
            }
            if let Some(b) = next.as_deref_mut() {
                let rows_left = spread.saturating_sub(p).max(1);
                let n = if burst {
                    usize::MAX
                } else {
                    b.left().div_ceil(rows_left)
                };
                b.issue(self, n)?;
            }
            let a = ahead
                .pop_front()
                .ok_or_else(|| tilegen_dsl::DslError::Missing("an A fragment read ahead".into()))?;
            let a_sel = a_sf.select(&a_dwords, i, kk)?;
            for j in 0..self.nn {
                let b = k.get(&regs.frags[kk * self.nn + j])?;
                let b_sel = b_sf.select(&b_dwords, j, kk)?;
                if bracket && in_cluster == 0 {
                    k.setprio(1)?;
                    k.sched_barrier(0)?;
                }
                self.mma.mma(i, j, a, a_sel, b, b_sel)?;
                in_cluster += 1;
                if bracket && in_cluster == cluster {
                    k.sched_barrier(0)?;
                    k.setprio(0)?;
                    in_cluster = 0;
                }
            }
            if !bracket {
                k.sched_barrier(0)?;
            }
        }
        if bracket && in_cluster != 0 {
            k.sched_barrier(0)?;
            k.setprio(0)?;
        }
        if let Some(b) = next {
            b.issue(self, usize::MAX)?;
        }
        if let Some(a) = a_next {
            a.issue_due(self, usize::MAX)?;
        }
        Ok(())
    }

    /// Barrier between pipeline stages. With `cluster_drain_sched` only LDS is fenced and the
    /// wait covers just the A staging, so prefetched B loads (issued after it) stay in flight
    /// across the barrier and drain per MFMA cluster instead.
    fn stage_barrier(&self, b_loads_in_flight: u32) -> Result<()> {
        let k = self.k();
        if self
            .spec
            .prefetch_settings()
            .is_some_and(|p| p.cluster.is_some())
        {
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
        let steps = self.spec.bk_elems as i64 / self.step_elems;
        let (first, count) = self.tiles;
        let end = first + count;
        let tile_kb = |t: Int<'k, 'ctx>| t * self.tile_bytes;
        let Some(pipeline) = self.spec.prefetch_settings() else {
            let regs = self.new_regs(steps)?;
            return k.for_range(first, end, 1, |t| {
                self.stage_a(0, tile_kb(t), steps)?;
                self.load_b(&regs, t, steps)?;
                k.barrier()?;
                self.compute(0, &regs, t, steps, None, None)?;
                k.barrier()
            });
        };
        // A pipeline of `stages` tiles (the one multiplied and the B tiles in flight ahead of
        // it), unrolled by `stages` so each step's registers and LDS slot are static.
        let stages = self.spec.stages() as usize;
        let ahead = stages - 1;
        let regs = (0..stages)
            .map(|_| self.new_regs(steps))
            .collect::<Result<Vec<_>>>()?;
        let deep = pipeline.deep_prime;
        // A runs one tile ahead (two with deep_prime), B `ahead` tiles.
        let a_ahead = if deep { 2 } else { 1 };
        // Two tiles ahead with three slots, A's loads are held in registers for a step and
        // written to LDS the step after they were issued (into the slot the tile two back
        // freed), so a whole step's time covers their latency, not just the MFMA chain's.
        let hold = deep && stages == 3 && !self.spec.dram_to_lds;
        let last = end - 1;
        let mut prologue_loads = 0;
        let mut held = Vec::new();
        k.if_then(k.i32(0).lt(&count), || {
            // A tiles up to (not including) the first one a step stages, each into its slot
            // (tiles past the last clamped to it: the 1-deep fallback); held, the second one's
            // loads wait in registers for the first step to write them.
            for d in 0..a_ahead {
                let tile = tile_kb((first + d as i64).min(&last));
                if hold && d == 1 {
                    let pending = self.stage_a_issue(d, tile, steps)?;
                    for _ in 0..stages {
                        held.push(stage::HeldWrites::new(k, &pending)?);
                    }
                } else {
                    self.stage_a(d, tile, steps)?;
                }
            }
            // B of every tile before the first one a step loads; the last group's count is
            // what stays in flight across the barrier.
            for (d, r) in regs.iter().enumerate().take(ahead) {
                prologue_loads = self.load_b(r, (first + d as i64).min(&last), steps)?;
            }
            Ok(())
        })?;
        self.stage_barrier(prologue_loads)?;
        // One tile per step. The next A tile's global loads are issued before the B fragments
        // of the tile `ahead` on (with a_spread, among the second half of this tile's MFMAs
        // instead: `PendingA`), and written to LDS only after this tile's MFMAs, so neither
        // the LDS writes nor the barrier wait for the B loads: those stay in flight into the
        // next steps, where each MFMA waits only for its own fragments. Tile indices past the
        // last tile are clamped to it instead of branched around: the extra loads land in a
        // free slot or in registers nothing reads again.
        let step = |t: Int<'k, 'ctx>, cur: usize| -> Result<()> {
            let b_slot = (cur + ahead) % stages;
            let b_tile = (t + ahead as i64).min(&last);
            let a_slot = (cur + a_ahead) % stages;
            let a_tile = (t + a_ahead as i64).min(&last);
            if hold {
                let mut a = PendingA::new(self, a_slot, tile_kb(a_tile), steps)?;
                let mut b = self.start_b(&regs[b_slot], b_tile, steps)?;
                self.fence()?;
                self.compute(cur, &regs[cur], t, steps, Some(&mut b), Some(&mut a))?;
                let pending = a.writes;
                self.fence()?;
                // The next tile's A, held since the step before; its slot's tile (three back)
                // was read before the last barrier.
                let next = (cur + 1) % stages;
                held[next].commit(&self.th, &self.slots[next])?;
                held[a_slot].hold(k, pending)?;
                self.stage_barrier(b.issued)?;
            } else if deep {
                // A two tiles on; with two stages its slot is this step's, so it is written
                // once everyone is done reading it.
                let mut a = if self.spec.dram_to_lds {
                    None
                } else {
                    Some(PendingA::new(self, a_slot, tile_kb(a_tile), steps)?)
                };
                let mut b = self.start_b(&regs[b_slot], b_tile, steps)?;
                self.fence()?;
                self.compute(cur, &regs[cur], t, steps, Some(&mut b), a.as_mut())?;
                let pending = a.map(|a| a.writes).unwrap_or_default();
                self.fence()?;
                self.stage_barrier(b.issued)?;
                if self.spec.dram_to_lds {
                    self.stage_a(a_slot, tile_kb(a_tile), steps)?;
                } else {
                    stage::commit_tile(&self.th, &self.slots[a_slot], pending)?;
                }
            } else {
                let mut a = PendingA::new(self, a_slot, tile_kb(a_tile), steps)?;
                let mut b = self.start_b(&regs[b_slot], b_tile, steps)?;
                self.fence()?;
                self.compute(cur, &regs[cur], t, steps, Some(&mut b), Some(&mut a))?;
                self.fence()?;
                stage::commit_tile(&self.th, &self.slots[a_slot], a.writes)?;
                self.stage_barrier(b.issued)?;
            }
            Ok(())
        };
        k.for_range(first, end, stages as i64, |t| {
            self.unrolled(t, end, stages, &step)
        })
    }

    /// The MMA row of a step's MFMA chain (`nm * steps` rows) where the next A tile's loads
    /// start: with `a_spread` the middle, a round a row from there (the first half of the
    /// chain runs on fragment reads the burst no longer holds up, and the second half still
    /// covers most of the loads' latency); otherwise 0, all before the chain.
    fn a_issue_row(&self, steps: i64) -> usize {
        if self.spec.prefetch_settings().is_some_and(|p| p.a_spread) {
            self.nm * steps as usize / 2
        } else {
            0
        }
    }

    /// Keeps LLVM's scheduler from moving instructions across this point. The pipeline's
    /// order is its point: loads issued early stay in flight across the MFMAs, and the LDS
    /// writes of the next A tile, which wait for its loads, stay after them. Left alone the
    /// scheduler hoists those writes above the MFMAs (so every step waits out a full load
    /// latency) and sinks loads into registers the next step reads.
    fn fence(&self) -> Result<()> {
        self.k().sched_barrier(0)
    }

    /// Steps `0..stages` of one unrolled iteration from tile `t`, each past the first only
    /// while its tile is below `end`.
    fn unrolled(
        &self,
        t: Int<'k, 'ctx>,
        end: Int<'k, 'ctx>,
        stages: usize,
        step: &dyn Fn(Int<'k, 'ctx>, usize) -> Result<()>,
    ) -> Result<()> {
        fn from<'k, 'ctx>(
            k: &'k Kernel<'ctx>,
            t: Int<'k, 'ctx>,
            end: Int<'k, 'ctx>,
            cur: usize,
            stages: usize,
            step: &dyn Fn(Int<'k, 'ctx>, usize) -> Result<()>,
        ) -> Result<()> {
            step(t + cur as i64, cur)?;
            if cur + 1 == stages {
                return Ok(());
            }
            let next = t + (cur + 1) as i64;
            k.if_then(next.lt(&end), || from(k, t, end, cur + 1, stages, step))
        }
        from(self.k(), t, end, 0, stages, step)
    }

    /// The K past the last full tile (K is a multiple of 256, BK_ELEMS may be larger), one MFMA
    /// K step per iteration through slot 0: the smallest body that covers every K.
    fn tail(&self) -> Result<()> {
        if self.spec.bk_elems == 256 {
            // K is a multiple of 256 (the launch contract): whole tiles cover it.
            return Ok(());
        }
        let k = self.k();
        let steps_per_tile = self.spec.bk_elems as i64 / self.step_elems;
        let first = (self.tiles.0 + self.tiles.1) * steps_per_tile;
        let total = self.kdim / self.step_elems;
        let regs = self.new_regs(1)?;
        k.for_range(first, total, 1, |st| {
            self.stage_a(0, st * self.step_bytes(), 1)?;
            self.load_b(&regs, st, 1)?;
            k.barrier()?;
            self.compute(0, &regs, st, 1, None, None)?;
            k.barrier()
        })
    }
}
