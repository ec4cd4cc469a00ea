//! The main attention kernel's loop over a wave's key tiles: staging K and V through LDS,
//! the scores, the online softmax and the PV step (see the module documentation of
//! [`super`]).

use tilegen_dsl::{
    Buffer, Cond, DslError, Elem, Int, Kernel, Lds, MmaAtom, Result, TileTensor, Ty, Value, Var,
    dev_layout, waitcnt_vmcnt,
};
use tilegen_layout::{Coord, Idx, Layout};
use tilegen_mx::attention::P_SCALE_LOG2;

use super::BLOCK_N;
use super::kernel::{Query, Workgroup, fold, pack_fp8};
use crate::paged::{PagedError, PagedRowIndices, PagedTile, RowCopy};
use crate::tile::atom::F8f6f4;
use crate::tile::loader::{FragmentReads, KeyOrder, LdsTile, TiledMmaLoader};

/// `s_waitcnt lgkmcnt(0)` (vmcnt and expcnt at their maxima): every LDS read has returned.
const LGKMCNT_0: u32 = 0xF | (0x3 << 14) | (0x7 << 4);

/// The rows of one key tile, as the block table places them in the cache.
type TileRows<'k, 'ctx> = PagedRowIndices<Int<'k, 'ctx>>;

/// The loop of one wave over its partial's key tiles (`p, p + P, ...`), with the online
/// softmax's running max, sum and accumulators; the epilogue reads them once
/// [`Mainloop::run`] is done.
///
/// Two stages are in flight per wave: while S of tile t is computed, V of t loads; while PV
/// of t is computed, K of the partial's next tile loads. The issue order K(t), T(t+), V(t)
/// (T: the next tile's block-table entries) keeps each wait a count of the loads issued after
/// what it waits for. The loads of the tile after the partial's last are all past the
/// sequence's end: masked, they read no memory.
pub(super) struct Mainloop<'w, 's, 'k, 'ctx> {
    wg: &'w Workgroup<'s, 'k, 'ctx>,
    q: &'w Query<'k, 'ctx>,
    /// The wave's K slot (the merge of the waves reuses the K slots).
    k_tile: LdsTile<'k, 'ctx>,
    /// The wave's V slot.
    v_tile: LdsTile<'k, 'ctx>,
    loader: TiledMmaLoader<F8f6f4>,
    /// The lane's reads of K fragments (the A operand of the scores).
    k_reads: FragmentReads<'k, 'ctx>,
    /// The lane's reads of V strips, in accumulator key order (so P needs no shuffle).
    v_reads: FragmentReads<'k, 'ctx>,
    /// The key (row of S^T) each accumulator holds, through the C layout.
    keys: TileTensor<'k, 'ctx>,
    neg_inf: Value<'ctx>,
    /// The running max, in log2 units.
    pub(super) m: Var<'ctx>,
    /// The lane's share of the running sum.
    pub(super) l: Var<'ctx>,
    /// The unnormalized `O^T`, one accumulator per 16 of the head's depth.
    pub(super) acc: Vec<Var<'ctx>>,
    acc_ty: Ty,
    /// How a tile's rows fall on pages.
    tile: PagedTile,
    /// The page size (0: a contiguous cache).
    page: i64,
    copy: CopyPlan<'k, 'ctx>,
}

impl<'w, 's, 'k, 'ctx> Mainloop<'w, 's, 'k, 'ctx> {
    /// Allocates the LDS slots (one K and one V slot per wave) and the lane's fragment reads of
    /// them, and starts the running max, sum and accumulators.
    pub(super) fn new(wg: &'w Workgroup<'s, 'k, 'ctx>, q: &'w Query<'k, 'ctx>) -> Result<Self> {
        let (k, atom, d, lane) = (wg.k, wg.atom, wg.d, wg.lane);
        let [mn, _, _] = atom.shape_mnk();
        let bn = BLOCK_N as i64;
        let slot = bn * d;
        let k_lds = k.lds_alloc("k_tiles", (wg.waves * slot) as u32, 16)?;
        let v_lds = k.lds_alloc("v_tiles", (wg.waves * slot) as u32, 16)?;
        let k_tile = LdsTile {
            lds: k_lds,
            base: wg.wave * slot,
            layout: Layout::row_major((bn, d)),
            elem_bits: 8,
        };
        let v_tile = LdsTile {
            lds: v_lds,
            base: wg.wave * slot,
            layout: Layout::new((d, bn), (1, d))?,
            elem_bits: 8,
        };
        let loader = TiledMmaLoader::new(atom);
        let k_reads = loader.a_reads(k, &k_tile, lane)?;
        let v_reads = loader.v_strip_reads(k, &v_tile, &atom, KeyOrder::Accumulator, lane)?;
        let keys = TileTensor::index(k, dev_layout(&Layout::new((bn, mn), (1, 0))?)?)
            .partition_c(&atom, lane)?;

        let neg_inf = k.f32(f32::NEG_INFINITY);
        let m = k.var(neg_inf)?;
        let l = k.var(k.f32(0.0))?;
        let acc_ty = Ty::vector(Elem::F32, atom.shape.acc_dwords());
        let acc = (0..d / mn)
            .map(|_| k.var(k.zero(acc_ty)))
            .collect::<Result<Vec<_>>>()?;
        let tile = wg.spec.tile().map_err(|e| DslError::Plan {
            what: "the attention tile",
            source: Box::new(e),
        })?;
        let copy = CopyPlan {
            d,
            row_bytes: wg.row_bytes,
            head: wg.h,
            len: wg.len,
            lane,
            cache_rows: wg.cache_rows,
            tile_loads: (bn * d / 1024) as u32,
        };
        Ok(Mainloop {
            wg,
            q,
            k_tile,
            v_tile,
            loader,
            k_reads,
            v_reads,
            keys,
            neg_inf,
            m,
            l,
            acc,
            acc_ty,
            tile,
            page: i64::from(wg.spec.values().page_size),
            copy,
        })
    }

    /// The K slots, which the merge of the waves reuses.
    pub(super) fn k_lds(&self) -> Lds<'ctx> {
        self.k_tile.lds
    }

    /// Emits the first tile's loads and the loop over the partial's tiles.
    pub(super) fn run(&self) -> Result<()> {
        let wg = self.wg;
        let bn = BLOCK_N as i64;
        let step = wg.parts * bn;
        let kv_first = wg.pidx * bn;
        let entries = self.load_entries(kv_first)?;
        let first = self.rows(kv_first, &entries)?;
        self.stage_k(&first, kv_first)?;
        let next_entries = self
            .load_entries(kv_first + step)?
            .into_iter()
            .map(|e| wg.k.var(e))
            .collect::<Result<Vec<_>>>()?;
        self.stage_v(&first, kv_first)?;
        wg.k.for_range(wg.pidx, wg.tiles, wg.parts, |t| {
            self.iteration(t, step, &next_entries)
        })
    }

    /// One tile `t` (of [`BLOCK_N`] keys); `next_entries` hold the block-table entries of the
    /// partial's next tile, `step` keys on.
    fn iteration(&self, t: Int<'k, 'ctx>, step: i64, next_entries: &[Var<'ctx>]) -> Result<()> {
        let k = self.wg.k;
        let kv0 = t * BLOCK_N as i64;
        let kv_next = kv0 + step;
        // K(t) and T(t+) have landed when at most V(t)'s loads are outstanding.
        k.s_waitcnt(waitcnt_vmcnt(self.copy.tile_loads))?;
        let x = self.scores(kv0)?;
        let (alpha, p_op) = self.softmax(&x)?;
        let strips = self.read_v()?;
        let next = self.prefetch_k(kv_next, step, next_entries)?;
        self.pv(strips, alpha, p_op)?;
        // The next tile's V into the V slot once its reads are done.
        k.sched_barrier(0)?;
        k.s_waitcnt(LGKMCNT_0)?;
        self.stage_v(&next, kv_next)
    }

    /// `S^T = K Q^T` of the tile at `kv0`, scaled to log2 units and masked past the sequence,
    /// one accumulator per 16 keys.
    ///
    /// Only the tile that holds the sequence's end has keys past it, so the mask (a compare
    /// and a select per score) runs under a branch the whole wave takes or skips: on every
    /// other tile the scores go to the softmax as the MFMAs left them.
    fn scores(&self, kv0: Int<'k, 'ctx>) -> Result<Vec<Value<'ctx>>> {
        let (k, atom) = (self.wg.k, self.wg.atom);
        let [mn, _, _] = atom.shape_mnk();
        let zero = k.zero(self.acc_ty);
        let mut x = Vec::new();
        for kt in 0..BLOCK_N as i64 / mn {
            let a = self
                .loader
                .read(k, &self.k_reads, &self.k_tile, [kt, 0], 0)?;
            let s = atom.mma(k, a, self.q.op, zero)?;
            x.push(k.var(k.fmul(s, self.q.c4)?)?);
        }
        let tile_end = kv0 + BLOCK_N as i64;
        k.if_then(self.wg.len.lt(&tile_end), || {
            for (kt, var) in x.iter().enumerate() {
                let s = k.get(var)?;
                let mut elems = Vec::new();
                for e in 0..self.acc_ty.lanes {
                    let (u, l) = self
                        .keys
                        .offsets(&Coord::from((i64::from(e), kt as i64, 0)))?;
                    let key = kv0 + u + l;
                    let valid: Cond = key.lt(&self.wg.len).into();
                    elems.push(k.select(valid, k.slice(s, e, 1)?, self.neg_inf)?);
                }
                k.set(var, k.concat(&elems)?)?;
            }
            Ok(())
        })?;
        x.iter().map(|v| k.get(v)).collect()
    }

    /// The online softmax's step over the scores `x`: updates the running max and sum, and
    /// returns the factor `alpha` the accumulators are rescaled by and P in FP8 (times
    /// `2^P_SCALE_LOG2`), packed in accumulator order (byte `4 kt + v`), as PV's B operand.
    fn softmax(&self, x: &[Value<'ctx>]) -> Result<(Value<'ctx>, Value<'ctx>)> {
        let (k, lane) = (self.wg.k, self.wg.lane);
        let mut tmax = fold(k, x, |a, b| k.fmax(a, b))?;
        for mask in [16, 32] {
            tmax = k.fmax(tmax, k.shuffle_xor(tmax, lane, mask)?)?;
        }
        let m_old = k.get(&self.m)?;
        let m_new = k.fmax(m_old, tmax)?;
        // Factors and probabilities below 2^-126 flush to zero (`exp2_ftz`): P is FP8 times
        // 2^P_SCALE_LOG2, where they are zero anyway, and a factor that small leaves nothing
        // of the accumulators it scales.
        let alpha = k.exp2_ftz(k.fsub(m_old, m_new)?)?;
        let m4 = k.splat(m_new, 4)?;
        let probs = x
            .iter()
            .map(|xv| k.exp2_ftz(k.fsub(*xv, m4)?))
            .collect::<Result<Vec<_>>>()?;
        let psum = fold(k, &probs, |a, b| k.fadd(a, b))?;
        let l_new = k.fadd(k.fmul(k.get(&self.l)?, alpha)?, psum)?;
        k.set(&self.l, l_new)?;
        k.set(&self.m, m_new)?;
        let p_scale = k.splat(k.f32((1u32 << P_SCALE_LOG2) as f32), 4)?;
        let scaled = probs
            .iter()
            .map(|pv| k.fmul(*pv, p_scale))
            .collect::<Result<Vec<_>>>()?;
        Ok((alpha, pack_fp8(k, k.concat(&scaled)?)?))
    }

    /// The V strips of the tile, one per accumulator. V(t) (issued after T(t+)) has landed
    /// once nothing is outstanding; its strips are read before the next K is issued, else
    /// LLVM makes the reads wait for that K's LDS-DMA loads too (it does not tell the slots
    /// apart). The barrier keeps the scheduler from hoisting the reads, and with them the
    /// wait, over the softmax.
    fn read_v(&self) -> Result<Vec<Value<'ctx>>> {
        let k = self.wg.k;
        k.sched_barrier(0)?;
        k.s_waitcnt(waitcnt_vmcnt(0))?;
        (0..self.acc.len() as i64)
            .map(|dt| {
                self.loader
                    .load_v_fp8_strip(k, &self.v_reads, &self.v_tile, 0, dt)
            })
            .collect()
    }

    /// Issues the next tile's K (at `kv_next`) into the K slot (its reads were consumed by
    /// the S MFMAs), from the entries in `next_entries`, and the block-table entries of the
    /// tile after it into them; they load under PV. Returns the next tile's rows.
    fn prefetch_k(
        &self,
        kv_next: Int<'k, 'ctx>,
        step: i64,
        next_entries: &[Var<'ctx>],
    ) -> Result<TileRows<'k, 'ctx>> {
        let k = self.wg.k;
        k.sched_barrier(0)?;
        let entries = next_entries
            .iter()
            .map(|v| k.get(v))
            .collect::<Result<Vec<_>>>()?;
        let next = self.rows(kv_next, &entries)?;
        self.stage_k(&next, kv_next)?;
        for (v, e) in next_entries.iter().zip(self.load_entries(kv_next + step)?) {
            k.set(v, e)?;
        }
        Ok(next)
    }

    /// `O^T = O^T alpha + V^T P^T`.
    fn pv(&self, strips: Vec<Value<'ctx>>, alpha: Value<'ctx>, p_op: Value<'ctx>) -> Result<()> {
        let (k, atom) = (self.wg.k, self.wg.atom);
        let alpha4 = k.splat(alpha, 4)?;
        for (strip, var) in strips.into_iter().zip(&self.acc) {
            let c_in = k.fmul(k.get(var)?, alpha4)?;
            k.set(var, atom.mma(k, strip, p_op, c_in)?)?;
        }
        Ok(())
    }

    /// The block-table entries of the tile at `kv0`, one per page piece (as `populate` asks
    /// for them), read as VMEM loads; pieces past the sequence read its last page (any valid
    /// page will do: their rows are masked).
    fn load_entries(&self, kv0: Int<'k, 'ctx>) -> Result<Vec<Value<'ctx>>> {
        let (k, wg, page) = (self.wg.k, self.wg, self.page);
        if page == 0 {
            return Ok(Vec::new());
        }
        let last = (wg.len - 1) / page;
        (0..i64::from(self.tile.num_pages()))
            .map(|j| {
                let i = ((kv0 + j * i64::from(self.tile.eff_page())) / page).min(&last);
                k.buffer_load(&wg.table, k.i32(0), (wg.b * wg.stride + i) * 4, 1)
            })
            .collect()
    }

    /// The tile's rows from entries [`Self::load_entries`] read (landed).
    fn rows(&self, kv0: Int<'k, 'ctx>, entries: &[Value<'ctx>]) -> Result<TileRows<'k, 'ctx>> {
        let (k, wg) = (self.wg.k, self.wg);
        if self.page == 0 {
            return PagedRowIndices::populate(self.tile, &(wg.b * wg.stride + kv0), |_| {
                Err(DslError::Internal("a contiguous cache has no pages".into()))
            });
        }
        let mut next = entries.iter();
        PagedRowIndices::populate(self.tile, &kv0, |_: &Int<'_, '_>| {
            let e = next.next().ok_or_else(|| {
                DslError::Missing("a block-table entry of the tile's pages".into())
            })?;
            k.readfirstlane(e.int(k)?)
        })
    }

    /// Issues the loads of the K tile at `kv0` into the wave's K slot.
    fn stage_k(&self, rows: &TileRows<'k, 'ctx>, kv0: Int<'k, 'ctx>) -> Result<()> {
        let copies = rows.k_copies(None).map_err(copy_error)?;
        self.copy
            .stage(self.wg.k, &self.wg.kc, &self.k_tile, &copies, kv0)
    }

    /// Issues the loads of the V tile at `kv0` into the wave's V slot.
    fn stage_v(&self, rows: &TileRows<'k, 'ctx>, kv0: Int<'k, 'ctx>) -> Result<()> {
        let copies = rows.v_copies(1, 0, None).map_err(copy_error)?;
        self.copy
            .stage(self.wg.k, &self.wg.vc, &self.v_tile, &copies, kv0)
    }
}

/// A tile's copies that cannot be planned, as the kernel's error.
fn copy_error(e: PagedError) -> DslError {
    DslError::Plan {
        what: "the KV tile's copies",
        source: Box::new(e),
    }
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
                return Err(DslError::NotMultiple {
                    what: "a cache copy's rows",
                    value: i64::from(c.rows),
                    multiple: rows_per_load,
                });
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
