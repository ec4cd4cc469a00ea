//! Staging tiles into LDS, shared by every kernel that stages operands: a workgroup's
//! work-item coordinates, 16-byte row-major tile copies (through VGPRs or LDS-DMA) with the
//! operand swizzle that keeps fragment reads free of bank conflicts, and E8M0 scale tiles.

use tilegen_dsl::{
    Buffer, CachePolicy, Cond, DslError, Int, Kernel, Lds, PtrParam, Result, Value, Var, dev_layout,
};
use tilegen_layout::{Coord, Idx, Layout, Swizzle, SwizzleChain};

/// A workgroup's work-item coordinates: what every kernel reads whatever its parameters.
#[derive(Clone, Copy)]
pub struct Threads<'k, 'ctx> {
    /// The kernel.
    pub k: &'k Kernel<'ctx>,
    /// Work-item id in the workgroup.
    pub tid: Int<'k, 'ctx>,
    /// Lane in the wave.
    pub lane: Int<'k, 'ctx>,
    /// Wave in the workgroup (wave-uniform, an SGPR).
    pub wave: Int<'k, 'ctx>,
    /// Waves per workgroup.
    pub warps: i64,
}

impl<'k, 'ctx> Threads<'k, 'ctx> {
    /// Reads the work-item id of a kernel with `warps` waves per workgroup.
    pub fn new(k: &'k Kernel<'ctx>, warps: i64) -> Result<Self> {
        let tid = k.thread_id()?;
        // tid / 64 is the same for every lane of a wave; say so, so it lives in an SGPR.
        let wave = k.readfirstlane(tid / 64)?;
        Ok(Threads {
            k,
            tid,
            lane: tid % 64,
            wave,
            warps,
        })
    }

    /// A raw buffer over parameter `p` with `bytes` records.
    pub fn buffer(
        &self,
        p: PtrParam,
        bytes: Int<'k, 'ctx>,
        policy: CachePolicy,
    ) -> Result<Buffer<'ctx>> {
        self.k.buffer(self.k.ptr_arg(p)?, bytes, policy)
    }

    /// Row-major `[rows, cols]` with run-time extents, `elem` units per element.
    pub fn row_major(
        &self,
        rows: Int<'k, 'ctx>,
        cols: Int<'k, 'ctx>,
        elem: i64,
    ) -> Layout<Int<'k, 'ctx>> {
        Layout::new(
            (rows.idx(), cols.idx()),
            (cols.idx().mul(&Idx::Static(elem)), Idx::Static(elem)),
        )
        .expect("two leaves are congruent with two leaves")
    }
}
/// One LDS write of a tile whose global load was issued but not yet stored (see
/// [`stage_tile`]): LDS byte offset, value, and the (wave-uniform) condition under which this
/// wave owns the write, for rounds only some waves take part in.
pub type PendingWrite<'k, 'ctx> = (Int<'k, 'ctx>, Value<'ctx>, Option<Cond<'ctx>>);
/// The pending writes of a staged tile.
pub type PendingWrites<'k, 'ctx> = Vec<PendingWrite<'k, 'ctx>>;

/// The swizzle of a row-major FP4 operand tile in LDS with rows of `row_bytes`, staged 16 bytes
/// per lane (`ds_write_b128` or `buffer_load ... lds`) and read as MFMA fragments
/// (`ds_read_b128`, 16 bytes per lane: 16 rows x 4 chunks for 16x16x128, 32 rows x 2 chunks for
/// 32x32x64). It XORs the 16-byte chunk index with row bits, so the rows one read phase touches
/// land in distinct bank groups. Each choice was found by an exhaustive search over one- and
/// two-step swizzles against the phase rules of both fragment reads and of the row-major writes,
/// and is conflict-free for all of them (the unswizzled tile is not: its rows fall on the same
/// banks every 256 bytes).
///
/// Every step moves bits only below `log2(row_bytes)`, so a swizzled offset stays in its row
/// and in the tile whatever the tile's height. Rows that are not a power of two bytes (384, say)
/// are not aligned to the XOR's blocks: they stay unswizzled.
pub fn swizzle_for_rows(row_bytes: i64) -> Result<SwizzleChain> {
    let sw = |bits, base, shift| Swizzle::new(bits, base, shift).map_err(DslError::from);
    if row_bytes < 64 || row_bytes.count_ones() != 1 {
        return Ok(SwizzleChain::identity());
    }
    let log = row_bytes.trailing_zeros() as i32;
    Ok(match row_bytes {
        64 => sw(2, 4, 3)?.then(sw(1, 4, 6)?),
        128 => sw(3, 4, 4)?.into(),
        _ => sw(4, 4, log - 4)?.into(),
    })
}

/// Copies a `[rows, row_bytes]` byte tile of a row-major global matrix (rows from `row0`, bytes
/// from `col0`) into a row-major LDS tile at the start of `lds`, 16 bytes per lane. Wave-instruction `i`
/// moves chunks `64 i .. 64 i + 63`, which are 1 KB of contiguous LDS, so the same mapping works
/// with `buffer_load ... lds` (`direct`), where each lane's 16 bytes land at `M0 + 16 * lane`.
///
/// Through VGPRs (`!direct`) the LDS writes are returned instead of emitted, so a pipeline can
/// issue the global loads early and write LDS later ([`commit_tile`]). In a round only some
/// waves take part in, the other waves load the last round again (no branch, so the value
/// reaches the later write) and their write is skipped.
///
/// `rounds` picks which of the tile's [`stage_rounds`] rounds (one load per wave each) to issue
/// (`..` for all), so a pipeline can spread a tile's loads; the pending writes of the parts
/// together are the whole tile's.
#[allow(clippy::too_many_arguments)]
#[must_use = "LDS writes through VGPRs are returned, not emitted: pass them to commit_tile"]
pub fn stage_tile<'k, 'ctx>(
    cx: &Threads<'k, 'ctx>,
    src: &Buffer<'ctx>,
    global: &Layout<Int<'k, 'ctx>>,
    row0: Int<'k, 'ctx>,
    col0: Int<'k, 'ctx>,
    lds: &Lds<'ctx>,
    rows: i64,
    row_bytes: i64,
    direct: bool,
    swizzle: &SwizzleChain,
    rounds: impl std::ops::RangeBounds<usize>,
) -> Result<PendingWrites<'k, 'ctx>> {
    let k = cx.k;
    let chunks_per_row = row_bytes / 16;
    // 16-byte chunks in row-major order, 64 per instruction. When whole rows fit an instruction
    // (or whole instructions fit a row) the chunk coordinate splits into a wave-uniform part and
    // a lane part; otherwise (a row of 24 chunks, say) each lane divides its flat chunk index.
    let split =
        (64 % chunks_per_row == 0 && rows % (64 / chunks_per_row) == 0) || chunks_per_row % 64 == 0;
    if (rows * chunks_per_row) % 64 != 0 {
        return Err(DslError::Operand {
            op: "stage_tile",
            rule: format!("a {rows} x {row_bytes} B tile is not a whole number of 1 KB wave loads"),
        });
    }
    let instrs = rows * chunks_per_row / 64;
    let per_wave = stage_rounds(cx, rows, row_bytes);
    let local = dev_layout(&Layout::row_major((rows, row_bytes)))?;
    let lane = cx.lane.idx();
    let mut pending = Vec::new();
    for j in (0..per_wave).filter(|j| rounds.contains(j)) {
        let j = j as i64;
        // Loads one round; returns the LDS write it still owes (none when direct).
        let emit = |i: Idx<Int<'k, 'ctx>>| -> Result<Option<(Int<'k, 'ctx>, Value<'ctx>)>> {
            // Split the chunk coordinate into a wave-uniform part (from `i`) and a lane part.
            let (u, l) = if !split {
                let c = i.mul(&Idx::Static(64)).add(&lane);
                (
                    (Idx::Static(0), Idx::Static(0)),
                    (
                        c.div(&Idx::Static(chunks_per_row)),
                        c.rem(&Idx::Static(chunks_per_row)).mul(&Idx::Static(16)),
                    ),
                )
            } else if chunks_per_row <= 64 {
                let rpi = 64 / chunks_per_row;
                (
                    (i.mul(&Idx::Static(rpi)), Idx::Static(0)),
                    (
                        lane.div(&Idx::Static(chunks_per_row)),
                        lane.rem(&Idx::Static(chunks_per_row)).mul(&Idx::Static(16)),
                    ),
                )
            } else {
                let ipr = chunks_per_row / 64;
                (
                    (
                        i.div(&Idx::Static(ipr)),
                        i.rem(&Idx::Static(ipr)).mul(&Idx::Static(1024)),
                    ),
                    (Idx::Static(0), lane.mul(&Idx::Static(16))),
                )
            };
            let g_u = global.crd2idx(&Coord::from((u.0.add(&row0.idx()), u.1.add(&col0.idx()))))?;
            let g_l = global.crd2idx(&Coord::from(l.clone()))?;
            let s_u = local.crd2idx(&Coord::from(u))?;
            let s_l = local.crd2idx(&Coord::from(l))?;
            let z = k.i32(0);
            if direct {
                // The load writes lane l's chunk at base + 16 l: in a dense row-major tile that
                // is chunk 64 i + l exactly when the chunk index is split per lane.
                let base = if split {
                    s_u
                } else {
                    i.mul(&Idx::Static(1024))
                };
                // In a swizzled tile that place holds the chunk the swizzle maps there: the lane
                // loads that one (same row, another chunk).
                // Its coordinate in the tile is whole (uniform and lane parts mixed), so the
                // uniform offset is the tile's origin alone.
                let (g_l, g_u) = if swizzle.is_identity() {
                    (g_l, g_u)
                } else {
                    let place = base.add(&lane.mul(&Idx::Static(16)));
                    let logical = swizzle.inverse().apply_idx(&place);
                    (
                        global.crd2idx(&local.idx2crd(&logical)?)?,
                        global.crd2idx(&Coord::from((row0.idx(), col0.idx())))?,
                    )
                };
                k.buffer_load_to_lds(
                    src,
                    lds,
                    base.to_value(&z),
                    g_l.to_value(&z),
                    g_u.to_value(&z),
                    16,
                )?;
                Ok(None)
            } else {
                let v = k.buffer_load(src, g_l.to_value(&z), g_u.to_value(&z), 4)?;
                let at = swizzle.apply_idx(&s_u.add(&s_l));
                Ok(Some((at.to_value(&z), v)))
            }
        };
        let i = cx.wave.idx().add(&Idx::Static(j * cx.warps));
        if (j + 1) * cx.warps <= instrs {
            pending.extend(emit(i)?.map(|(off, v)| (off, v, None)));
        } else {
            // The last round has fewer instructions than waves.
            let limit = k.i32(instrs);
            let cond: Cond = i.to_value(&limit).lt(&limit).into();
            if direct {
                // The load itself writes LDS: the other waves skip it.
                k.if_then(cond, || emit(i.clone()).map(|_| ()))?;
            } else {
                let clamped = i.to_value(&limit).min(&k.i32(instrs - 1)).idx();
                pending.extend(emit(clamped)?.map(|(off, v)| (off, v, Some(cond))));
            }
        }
    }
    Ok(pending)
}

/// The rounds of one-load-per-wave instructions [`stage_tile`] issues for a `rows` x
/// `row_bytes` tile.
pub fn stage_rounds(cx: &Threads<'_, '_>, rows: i64, row_bytes: i64) -> usize {
    let instrs = rows * (row_bytes / 16) / 64;
    ((instrs + cx.warps - 1) / cx.warps).max(0) as usize
}

/// Emits the LDS writes [`stage_tile`] left pending.
pub fn commit_tile<'k, 'ctx>(
    cx: &Threads<'k, 'ctx>,
    lds: &Lds<'ctx>,
    pending: PendingWrites<'k, 'ctx>,
) -> Result<()> {
    for (off, v, owned) in pending {
        match owned {
            None => cx.k.lds_store(lds, off, v, 16)?,
            Some(cond) => cx.k.if_then(cond, || cx.k.lds_store(lds, off, v, 16))?,
        }
    }
    Ok(())
}

/// A staged tile's pending writes kept in variables, so a pipeline can issue a tile's loads
/// one step and write them to LDS the next: the loop carries the loaded registers across its
/// back edge instead of waiting for them within the step that issued them. One `HeldWrites`
/// per LDS slot keeps each variable's live range from its write to its commit (LLVM's phis
/// then need no copies, which would wait for the loads).
pub struct HeldWrites<'ctx> {
    writes: Vec<(Var<'ctx>, Var<'ctx>, Option<Var<'ctx>>)>,
}

impl<'ctx> HeldWrites<'ctx> {
    /// Variables shaped like `pending` (every tile of one staging has the same writes),
    /// initialised with it.
    pub fn new<'k>(k: &'k Kernel<'ctx>, pending: &PendingWrites<'k, 'ctx>) -> Result<Self> {
        let writes = pending
            .iter()
            .map(|(off, v, cond)| {
                let cond = cond
                    .map(|c| k.var(k.i32(1).select(c.value(), &k.i32(0)).into()))
                    .transpose()?;
                Ok((k.var((*off).into())?, k.var(*v)?, cond))
            })
            .collect::<Result<_>>()?;
        Ok(HeldWrites { writes })
    }

    /// Holds `pending` (a tile of the same staging) until [`HeldWrites::commit`].
    pub fn hold<'k>(&self, k: &'k Kernel<'ctx>, pending: PendingWrites<'k, 'ctx>) -> Result<()> {
        if pending.len() != self.writes.len() {
            return Err(DslError::Operand {
                op: "hold",
                rule: format!(
                    "{} pending writes into {} held ones",
                    pending.len(),
                    self.writes.len()
                ),
            });
        }
        for ((off, v, cond), (off_var, v_var, cond_var)) in pending.into_iter().zip(&self.writes) {
            k.set(off_var, off.into())?;
            k.set(v_var, v)?;
            match (cond, cond_var) {
                (Some(c), Some(var)) => k.set(var, k.i32(1).select(c.value(), &k.i32(0)).into())?,
                (None, None) => {}
                _ => {
                    return Err(DslError::Operand {
                        op: "hold",
                        rule: "a conditional write into an unconditional one, or back".into(),
                    });
                }
            }
        }
        Ok(())
    }

    /// Writes the held tile to `lds` ([`commit_tile`]).
    pub fn commit<'k>(&self, cx: &Threads<'k, 'ctx>, lds: &Lds<'ctx>) -> Result<()> {
        let k = cx.k;
        let pending = self
            .writes
            .iter()
            .map(|(off, v, cond)| {
                let cond = cond
                    .as_ref()
                    .map(|c| -> Result<Cond<'ctx>> { Ok(k.get(c)?.int(k)?.eq(&k.i32(1)).into()) })
                    .transpose()?;
                Ok((k.get(off)?.int(k)?, k.get(v)?, cond))
            })
            .collect::<Result<_>>()?;
        commit_tile(cx, lds, pending)
    }
}

/// Copies a `[rows, row_bytes]` row-major E8M0 tile (row_bytes a multiple of 4) from a row-major
/// global scale matrix into LDS, one dword per work-item and round.
#[allow(clippy::too_many_arguments)]
pub fn stage_scales<'k, 'ctx>(
    cx: &Threads<'k, 'ctx>,
    src: &Buffer<'ctx>,
    global: &Layout<Int<'k, 'ctx>>,
    row0: Int<'k, 'ctx>,
    col0: Int<'k, 'ctx>,
    lds: &Lds<'ctx>,
    rows: i64,
    row_bytes: i64,
) -> Result<()> {
    let k = cx.k;
    let threads = cx.warps * 64;
    let dwords_per_row = row_bytes / 4;
    let total = rows * dwords_per_row;
    let local = dev_layout(&Layout::row_major((rows, row_bytes)))?;
    for j in 0..(total + threads - 1) / threads {
        let q = cx.tid.idx().add(&Idx::Static(j * threads));
        let emit = || -> Result<()> {
            let row = q.div(&Idx::Static(dwords_per_row));
            let col = q.rem(&Idx::Static(dwords_per_row)).mul(&Idx::Static(4));
            let z = k.i32(0);
            let g_u = global.crd2idx(&Coord::from((row0.idx(), col0.idx())))?;
            let g_l = global.crd2idx(&Coord::from((row.clone(), col.clone())))?;
            let s = local.crd2idx(&Coord::from((row, col)))?;
            let v = k.buffer_load(src, g_l.to_value(&z), g_u.to_value(&z), 1)?;
            k.lds_store(lds, s.to_value(&z), v, 4)
        };
        if (j + 1) * threads <= total {
            emit()?;
        } else {
            let limit = k.i32(total);
            let cond = q.to_value(&limit).lt(&limit);
            k.if_then(cond, emit)?;
        }
    }
    Ok(())
}
