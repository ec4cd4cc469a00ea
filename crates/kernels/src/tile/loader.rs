//! `TiledMmaLoader`: LDS-to-register loads of MFMA operand fragments (seed 003).
//!
//! Sibling of the MMA atoms: an atom says which element of an `(rows, K)` operand tile each
//! `(lane, value)` of an instruction holds ([`MmaAtom::b_layout`] and friends); the loader reads
//! those elements out of a tile in LDS. Every address is the layout algebra's: the tile's
//! layout ([`LdsTile::layout`], element coordinates to element offsets), partitioned by the
//! atom's thread-value layout into per-lane fragments, then the loader's swizzle (at most two
//! steps, applied in order: `swizzle2 ∘ swizzle`) on the tile-relative byte offset, then the
//! tile's uniform base and an optional immediate byte offset that lands in the `ds_read`'s
//! `offset:` field.
//!
//! Three kinds of read:
//! - [`TiledMmaLoader::load_b`]: the whole operand of a `WN x BK` warp tile, one fragment per MMA
//!   tile, N outer. A lane's fragment is cut into its runs of contiguous elements (bf16: one run
//!   of 16 bytes; FP8 f8f6f4: two 16-byte halves), one `ds_read_b128` each. Runs whose K lies
//!   wholly past the tile's columns read as zeros (a 64-wide head dimension fed to a K = 128
//!   instruction), so no padding has to exist in LDS.
//! - [`TiledMmaLoader::load_b_tr`]: one MMA tile of a bf16 B operand stored N-contiguous
//!   (`[K][N]` rows), read with two `ds_read_b64_tr_b16` and joined.
//! - [`TiledMmaLoader::load_v_fp8_strip`] / [`TiledMmaLoader::load_v_fp8_strip_16`]: one
//!   `16 x 128` strip of FP8 V (depth x keys, stored key rows `[key][depth]`) as the A operand of
//!   `v_mfma_f32_16x16x128_f8f6f4` for `O^T = V^T P^T`, read with four `ds_read_b64_tr_b8`.
//!
//! # The transposing reads
//! `ds_read_b64_tr_b{16,8,4}` read 8 bytes per lane, `E` = 4, 8 or 16 elements, and transpose
//! within each group of 16 lanes (CDNA4 ISA 11.4; the emulator's `transpose`, which Triton's
//! FP8 and bf16 GEMMs and the foreign attention check confirm): source lane `s` holds rows
//! `E (s % (16/E)) .. + E` of K index `s / (16/E)`, and destination lane `d` receives its row
//! `d % 16` at K indices `0 .. E`. So read `j` of a sequence fills values `E j .. E j + E` of
//! every lane, and source lane `s` must point at the element that destination
//! `((s & !15) | E (s % (16/E)) + e, E j + (s % 16) / (16/E))` wants: [`tr_source_map`] is that
//! map as a layout, and the loader composes the fragment's thread-value layout with it, so the
//! per-lane source addresses come out of the same partition as every other read. Because a
//! source lane's address is free, any K order of the fragment can be read: the paired even/odd
//! lanes of `tr_b8` (one key each, depths `0..8` and `8..16`) may point at any key.
//!
//! # V strips and the key order
//! `P` leaves the `Q K^T` MFMA as accumulators: lane `l` holds keys `16 t + 4 (l / 16) + v`
//! (tile `t`, accumulator `v`). Feeding them as PV's B operand without moving a byte needs V's
//! A operand in the same K order: [`KeyOrder::Accumulator`], derived from the QK atom's C
//! layout ([`v_operand_layout`]); each lane then receives keys `{0..3, 16..19} + 4 (l / 16)`
//! of each 32-key block, reads at key offsets `{0, 32, 64, 96}`. [`KeyOrder::Contiguous`] gives
//! every lane group 32 consecutive keys (reads at key offsets `{0, 8, 16, 24}` of the group's
//! block), the seed's `load_v_fp8_strip_16`. Depth comes out in lane order (lane `l` holds
//! depth `l % 16`): the ISA's transpose returns row `d % 16` to destination lane `d`, so the
//! seed's "butterfly" depth order does not arise with this lane map.
//!
//! Per-lane coordinates are computed once per [`FragmentReads`] (the partitioned view holds the
//! lane's offset), so a caller builds them before its loops and reuses them for every tile.

use tilegen_dsl::{DslError, Int, Kernel, Lds, MmaAtom, Result, TileTensor, Ty, Value, dev_layout};
use tilegen_layout::{Coord, Idx, Layout, Swizzle, SwizzleChain};

use super::atom::F8f6f4;

/// Lanes per wave.
const LANES: i64 = 64;

/// A tile in LDS: element `(row, col)` of `layout` lives at byte
/// `base + swizzle(layout(row, col) * elem_bytes)` of `lds` (the swizzle is the loader's).
#[derive(Clone)]
pub struct LdsTile<'k, 'ctx> {
    /// The allocation.
    pub lds: Lds<'ctx>,
    /// Wave-uniform byte offset of the tile's origin (a multiple of the swizzle's block and of
    /// 16, so swizzled 16-byte reads stay aligned).
    pub base: Int<'k, 'ctx>,
    /// `(rows, cols)` element coordinates to element offsets (static).
    pub layout: Layout,
    /// Bits per element: 8 or 16.
    pub elem_bits: u32,
}

/// The K order of a V strip's fragment (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyOrder {
    /// The order of the QK MFMA's accumulators: P feeds PV without a shuffle.
    Accumulator,
    /// 32 consecutive keys per 16-lane group.
    Contiguous,
}

/// How one read of a fragment goes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ReadKind {
    /// Plain reads of `runs` contiguous runs of `run_values` values; `skip[j]` runs are past the
    /// tile's columns and read as zeros.
    Plain {
        run_values: i64,
        run_bytes: u32,
        skip: Vec<bool>,
    },
    /// `loads` transposing reads of `bits`-bit elements.
    Transposed { bits: u32, loads: i64 },
}

/// A lane's reads of one operand from tiles of one layout: the partitioned index view (the
/// lane's offset computed once) and how its values are read.
#[derive(Clone)]
pub struct FragmentReads<'k, 'ctx> {
    /// Index view: modes `(value, tile_row, tile_col)` to tile-relative byte offsets.
    view: TileTensor<'k, 'ctx>,
    kind: ReadKind,
    /// Bytes of one element.
    elem_bytes: u32,
    /// Values per lane.
    values: i64,
    /// MMA tiles along rows and columns of the tile.
    tiles: [i64; 2],
}

impl FragmentReads<'_, '_> {
    /// MMA tiles of the tile along its rows and its columns.
    pub fn tiles(&self) -> [i64; 2] {
        self.tiles
    }
}

/// LDS-to-register loader of MFMA operand fragments for atom `A`, with an optional swizzle of
/// the tile's byte offsets and a second one applied after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiledMmaLoader<A> {
    atom: A,
    swizzle: SwizzleChain,
}

/// `(source lane, (element, read)) -> lane + 64 * value` of a sequence of `loads`
/// `ds_read_b64_tr_b{bits}` filling a fragment: the fragment position source lane `s`'s
/// element `e` lands in at read `j` (see the module documentation).
pub fn tr_source_map(bits: u32, loads: i64) -> Result<Layout> {
    if !matches!(bits, 4 | 8 | 16) || loads < 1 {
        return Err(DslError::Operand {
            op: "tr_source_map",
            rule: format!("{loads} reads of {bits}-bit elements: ds_read_b64_tr_b4/b8/b16"),
        });
    }
    let e = 64 / bits as i64;
    let per_k = 16 / e;
    Ok(Layout::new(
        ((per_k, e, 4), (e, loads)),
        ((e, LANES, 16), (1, LANES * e)),
    )?)
}

/// `l` with each stride below `m` kept and the others zeroed (`keep_low`), or the other way
/// round: the row and column parts of a layout into `row + m * col`.
fn split_at(l: &Layout, m: i64, keep_low: bool) -> Result<Layout> {
    let mut bad = None;
    let stride = l.stride().map(&mut |d| {
        let v = d.static_value().unwrap_or(0);
        let low = v < m;
        if !low && v % m != 0 {
            bad = Some(v);
        }
        match (low, keep_low) {
            (true, true) => Idx::Static(v),
            (false, false) => Idx::Static(v / m),
            _ => Idx::Static(0),
        }
    });
    if let Some(v) = bad {
        return Err(DslError::Operand {
            op: "split_at",
            rule: format!("stride {v} of {l} is neither below {m} nor a multiple of it"),
        });
    }
    Ok(Layout::new(l.shape().clone(), stride)?)
}

/// The thread-value layout `(lane, byte) -> depth + 16 * key` of a 16 x 128 V strip as the A
/// operand of `pv` (16x16x128 FP8) when P comes from `qk`'s accumulators: the depth is the
/// operand row `pv` assigns the lane, the key follows `order`. For [`KeyOrder::Accumulator`]
/// the key of byte `b = v + 4 t` is row `v` of `qk`'s accumulator layout for the lane, in key
/// tile `t`: exactly the key of P's accumulator `v` of QK tile `t` in that lane.
pub fn v_operand_layout(pv: &F8f6f4, qk: &impl MmaAtom, order: KeyOrder) -> Result<Layout> {
    let [m, _, kd] = pv.shape_mnk();
    let [qm, qn, _] = qk.shape_mnk();
    if m != 16 || kd != 128 || qm != 16 || qn != 16 || pv.operand_bits() != [8, 8] {
        return Err(DslError::Operand {
            op: "v_operand_layout",
            rule: "V strips feed a 16x16x128 FP8 MFMA from 16x16 QK accumulators".into(),
        });
    }
    let a = pv.a_layout();
    let depth_lane = split_at(&a.mode(0)?, m, true)?;
    let groups = LANES / m;
    let (key_lane, key_values) = match order {
        KeyOrder::Accumulator => {
            let c = qk.c_layout();
            let rows = split_at(&c, qm, true)?;
            let tiles = kd / qm;
            let acc = rows.mode(1)?;
            (
                rows.mode(0)?,
                Layout::new(
                    (acc.shape().clone(), tiles),
                    (acc.stride().clone(), Idx::Static(qm)),
                )?,
            )
        }
        KeyOrder::Contiguous => (
            Layout::new((m, groups), (0, kd / groups))?,
            Layout::leaf(kd / groups, 1),
        ),
    };
    if depth_lane.shape() != key_lane.shape() {
        return Err(DslError::Operand {
            op: "v_operand_layout",
            rule: format!("lane shapes {depth_lane} and {key_lane} differ"),
        });
    }
    // depth + 16 key, mode by mode.
    let mut i = 0;
    let key_strides: Vec<i64> = key_lane
        .leaf_modes()
        .iter()
        .map(|(_, d)| d.static_value().unwrap_or(0))
        .collect();
    let lane_stride = depth_lane.stride().map(&mut |d| {
        let s = d.static_value().unwrap_or(0) + m * key_strides[i];
        i += 1;
        Idx::Static(s)
    });
    let value_stride = key_values
        .stride()
        .map(&mut |d| Idx::Static(m * d.static_value().unwrap_or(0)));
    let tv = Layout::new(
        (depth_lane.shape().clone(), key_values.shape().clone()),
        (lane_stride, value_stride),
    )?;
    // Every (depth, key) of the strip exactly once: `qk`'s accumulator rows must be keys
    // (S^T = K Q^T, K as the A operand), not query columns.
    let mut seen = vec![false; (m * kd) as usize];
    for i in 0..m * kd {
        let at = tv.call(i).static_value().unwrap_or(-1);
        match seen.get_mut(at as usize) {
            Some(s) if !*s && at >= 0 => *s = true,
            _ => {
                return Err(DslError::Operand {
                    op: "v_operand_layout",
                    rule: format!(
                        "{tv} covers some (depth, key) twice: the QK atom's accumulator rows must be keys"
                    ),
                });
            }
        }
    }
    Ok(tv)
}

/// The thread-value layout `(lane, byte) -> q + 16 * key` of P as the B operand of `pv` when it
/// is packed from `qk`'s accumulators in order (byte `v + 4 t` is accumulator `v` of QK tile
/// `t`): the counterpart of [`v_operand_layout`] with [`KeyOrder::Accumulator`].
pub fn p_operand_layout(qk: &impl MmaAtom) -> Result<Layout> {
    let [qm, qn, _] = qk.shape_mnk();
    let c = qk.c_layout();
    // C: key + qm * q. As B of PV: q + qn * key.
    let rows = split_at(&c, qm, true)?;
    let cols = split_at(&c, qm, false)?;
    let tiles = 128 / qm;
    let mut j = 0;
    let row_strides: Vec<i64> = rows
        .leaf_modes()
        .iter()
        .map(|(_, d)| d.static_value().unwrap_or(0))
        .collect();
    let stride = cols.stride().map(&mut |d| {
        let s = d.static_value().unwrap_or(0) + qn * row_strides[j];
        j += 1;
        Idx::Static(s)
    });
    let tv = Layout::new(c.shape().clone(), stride)?;
    let acc = tv.mode(1)?;
    Ok(Layout::new(
        (tv.mode(0)?.shape().clone(), (acc.shape().clone(), tiles)),
        (
            tv.mode(0)?.stride().clone(),
            (acc.stride().clone(), Idx::Static(qn * qm)),
        ),
    )?)
}

impl<A: MmaAtom> TiledMmaLoader<A> {
    /// A loader for `atom`'s operands, unswizzled.
    pub fn new(atom: A) -> Self {
        TiledMmaLoader {
            atom,
            swizzle: SwizzleChain::identity(),
        }
    }

    /// The same loader with `swizzle` applied to every tile-relative byte offset (after any
    /// swizzle it already has): `with_swizzle(a).with_swizzle(b)` is the seed's
    /// `swizzle = a, swizzle2 = b`, two XOR steps no single `Swizzle` expresses.
    pub fn with_swizzle(self, swizzle: impl Into<SwizzleChain>) -> Result<Self> {
        let swizzle = self.swizzle.then(swizzle.into());
        swizzle.check_index::<Int<'_, '_>>()?;
        Ok(TiledMmaLoader { swizzle, ..self })
    }

    /// The atom.
    pub fn atom(&self) -> &A {
        &self.atom
    }

    /// The swizzle applied to tile-relative byte offsets.
    pub fn swizzle(&self) -> &SwizzleChain {
        &self.swizzle
    }

    /// The tile's layout in bytes, its columns padded to whole MMA tiles (a flat column mode
    /// keeps its stride past the tile's last column), and the real column count.
    fn byte_layout(tile: &LdsTile<'_, '_>, mma: [i64; 2]) -> Result<(Layout, i64, i64)> {
        let l = &tile.layout;
        let eb = i64::from(tile.elem_bits / 8);
        if !matches!(tile.elem_bits, 8 | 16) || l.rank() != 2 {
            return Err(DslError::Operand {
                op: "TiledMmaLoader",
                rule: format!(
                    "a rank-2 tile of 8- or 16-bit elements, not {} of {} bits",
                    l, tile.elem_bits
                ),
            });
        }
        let (rows, cols) = match l.shape().static_leaves().as_deref() {
            Some(&[r, c]) => (r, c),
            _ => (
                l.mode(0)?.size().static_value().unwrap_or(0),
                l.mode(1)?.size().static_value().unwrap_or(0),
            ),
        };
        if rows % mma[0] != 0 || cols <= 0 {
            return Err(DslError::Operand {
                op: "TiledMmaLoader",
                rule: format!("{rows} tile rows are not whole {}-row MMA tiles", mma[0]),
            });
        }
        let padded = (cols + mma[1] - 1) / mma[1] * mma[1];
        let bytes = |d: &Idx<i64>| Idx::Static(d.static_value().unwrap_or(0) * eb);
        let mut layout = Layout::new(l.shape().clone(), l.stride().map(&mut |d| bytes(d)))?;
        if padded != cols {
            let col = l.mode(1)?.leaf_modes();
            let [(_, d)] = col.as_slice() else {
                return Err(DslError::Operand {
                    op: "TiledMmaLoader",
                    rule: format!(
                        "a tile of {cols} columns padded to {padded} needs a flat column mode"
                    ),
                });
            };
            let row = l.mode(0)?;
            layout = Layout::from_modes(vec![
                Layout::new(row.shape().clone(), row.stride().map(&mut |d| bytes(d)))?,
                Layout::leaf(padded, bytes(d).static_value().unwrap_or(0)),
            ]);
        }
        Ok((layout, rows, cols))
    }

    /// Host offsets `(lane, value) -> tile byte offset` of MMA tile (0, 0), and the column of
    /// each, under the thread-value layout `tv` of a `[rows, cols]` MMA tile.
    fn host_offsets(bytes: &Layout, tv: &Layout, mma: [i64; 2]) -> Result<Vec<Vec<(i64, i64)>>> {
        let values = tv.mode(1)?.size().static_value().unwrap_or(0);
        let col_of = |idx: i64| idx / mma[0];
        let z = bytes.zipped_divide(&[Layout::leaf(mma[0], 1), Layout::leaf(mma[1], 1)])?;
        let thr_val = z.mode(0)?.compose(tv)?;
        let mut out = Vec::with_capacity(LANES as usize);
        for lane in 0..LANES {
            let mut row = Vec::with_capacity(values as usize);
            for v in 0..values {
                let c = Coord::from((lane, v));
                let off = thr_val.crd2idx(&c)?.static_value().unwrap_or(-1);
                let idx = tv.crd2idx(&c)?.static_value().unwrap_or(0);
                row.push((off, col_of(idx)));
            }
            out.push(row);
        }
        Ok(out)
    }

    /// The lane's plain reads of operand fragments with thread-value layout `tv` over
    /// `[rows, cols]` MMA tiles of `tile`'s layout.
    pub fn plain_reads<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        tv: &Layout,
        mma: [i64; 2],
        lane: Int<'k, 'ctx>,
    ) -> Result<FragmentReads<'k, 'ctx>> {
        let (bytes, rows, cols) = Self::byte_layout(tile, mma)?;
        let eb = i64::from(tile.elem_bits / 8);
        let host = Self::host_offsets(&bytes, tv, mma)?;
        let values = host[0].len() as i64;
        // The widest run (up to 16 bytes) every lane's values split into contiguously.
        let mut run = values;
        let contiguous = |r: i64| {
            values % r == 0
                && r * eb <= 16
                && host.iter().all(|vals| {
                    vals.chunks(r as usize).all(|c| {
                        c.iter()
                            .enumerate()
                            .all(|(i, (off, _))| *off == c[0].0 + i as i64 * eb)
                            && c[0].0 % (r * eb) == 0
                    })
                })
        };
        while run > 1 && !contiguous(run) {
            run /= 2;
        }
        let run_bytes = (run * eb) as u32;
        if run_bytes < 4 {
            return Err(DslError::Operand {
                op: "TiledMmaLoader",
                rule: format!(
                    "the fragment's contiguous runs are {run_bytes} bytes: reads move whole dwords"
                ),
            });
        }
        self.check_swizzle_keeps(run_bytes)?;
        let tiles_k = bytes.mode(1)?.size().static_value().unwrap_or(0) / mma[1];
        let mut skip = Vec::new();
        for j in 0..values / run {
            let range = (j * run) as usize..((j + 1) * run) as usize;
            let mut past = Vec::new();
            // The last MMA tile along the columns is where padding shows.
            for vals in &host {
                for (_, c) in &vals[range.clone()] {
                    past.push(c + (tiles_k - 1) * mma[1] >= cols);
                }
            }
            let all = past.iter().all(|&p| p);
            if !all && past.iter().any(|&p| p) {
                return Err(DslError::Operand {
                    op: "TiledMmaLoader",
                    rule: format!(
                        "a run of {run} values straddles the tile's last column {cols}: K past the tile must fall on whole runs"
                    ),
                });
            }
            skip.push(all);
        }
        if tiles_k > 1 && skip.iter().any(|&s| s) {
            return Err(DslError::Operand {
                op: "TiledMmaLoader",
                rule: format!("{cols} columns: only a single MMA tile along K may be partial"),
            });
        }
        let view = TileTensor::index(k, dev_layout(&bytes)?).partition(tv, mma, lane)?;
        Ok(FragmentReads {
            view,
            kind: ReadKind::Plain {
                run_values: run,
                run_bytes,
                skip,
            },
            elem_bytes: eb as u32,
            values,
            tiles: [rows / mma[0], tiles_k],
        })
    }

    /// The lane's transposing reads (`loads` reads of `bits`-bit elements) of fragments with
    /// thread-value layout `tv` over `[rows, cols]` MMA tiles of `tile`'s layout.
    pub fn transposed_reads<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        tv: &Layout,
        mma: [i64; 2],
        bits: u32,
        lane: Int<'k, 'ctx>,
    ) -> Result<FragmentReads<'k, 'ctx>> {
        let (bytes, rows, cols) = Self::byte_layout(tile, mma)?;
        if cols % mma[1] != 0 || bits != tile.elem_bits {
            return Err(DslError::Operand {
                op: "TiledMmaLoader",
                rule: format!(
                    "transposing reads of {bits}-bit elements need whole MMA tiles of {bits}-bit elements ({cols} columns of {} bits)",
                    tile.elem_bits
                ),
            });
        }
        let values = tv.mode(1)?.size().static_value().unwrap_or(0);
        let e = 64 / i64::from(bits);
        if values % e != 0 {
            return Err(DslError::Operand {
                op: "TiledMmaLoader",
                rule: format!("{values} values per lane are not whole reads of {e}"),
            });
        }
        let loads = values / e;
        let src = tv.compose(&tr_source_map(bits, loads)?)?;
        // Each source lane's E elements must be consecutive bytes of the tile.
        let eb = i64::from(bits / 8);
        let host = Self::host_offsets(&bytes, &src, mma)?;
        for (s, vals) in host.iter().enumerate() {
            for read in vals.chunks(e as usize) {
                let first = read[0].0;
                let ok = read
                    .iter()
                    .enumerate()
                    .all(|(i, (off, _))| *off == first + i as i64 * eb)
                    && first % 8 == 0;
                if !ok {
                    return Err(DslError::Operand {
                        op: "TiledMmaLoader",
                        rule: format!(
                            "source lane {s} of a ds_read_b64_tr_b{bits} would read elements at {:?}: they must be 8 aligned consecutive bytes",
                            read.iter().map(|(o, _)| *o).collect::<Vec<_>>()
                        ),
                    });
                }
            }
        }
        self.check_swizzle_keeps(8)?;
        let view = TileTensor::index(k, dev_layout(&bytes)?).partition(&src, mma, lane)?;
        Ok(FragmentReads {
            view,
            kind: ReadKind::Transposed { bits, loads },
            elem_bytes: eb as u32,
            values,
            tiles: [rows / mma[0], cols / mma[1]],
        })
    }

    /// Every swizzle step must keep `bytes`-byte aligned runs whole.
    fn check_swizzle_keeps(&self, bytes: u32) -> Result<()> {
        let low = bytes.trailing_zeros();
        let bad = self
            .swizzle
            .steps()
            .iter()
            .find(|s: &&Swizzle| !s.is_identity() && s.base() < low);
        match bad {
            Some(s) => Err(DslError::Operand {
                op: "TiledMmaLoader",
                rule: format!("swizzle {s} moves bytes inside the {bytes}-byte reads"),
            }),
            None => Ok(()),
        }
    }

    /// The LDS address of the tile-relative byte offset `off`: swizzled, plus the tile's base
    /// and the immediate.
    fn address<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        off: Idx<Int<'k, 'ctx>>,
        imm_offset_bytes: i64,
    ) -> Int<'k, 'ctx> {
        let z = k.i32(0);
        let at = self.swizzle.apply_idx(&off).to_value(&z);
        let at = tile.base + at;
        if imm_offset_bytes == 0 {
            at
        } else {
            at + imm_offset_bytes
        }
    }

    /// The tile-relative byte offset of value coordinate `value` of MMA tile `(tr, tc)`.
    fn offset<'k, 'ctx>(
        reads: &FragmentReads<'k, 'ctx>,
        value: Coord<Int<'k, 'ctx>>,
        at: [i64; 2],
    ) -> Result<Idx<Int<'k, 'ctx>>> {
        let coord = Coord::Tuple(vec![
            value,
            Coord::Leaf(Idx::Static(at[0])),
            Coord::Leaf(Idx::Static(at[1])),
        ]);
        let (base, lane, fixed, rest) = reads.view.offset_parts(&coord)?;
        Ok(lane.add(&rest).add(&base).add(&Idx::Static(fixed)))
    }

    /// The fragment of MMA tile `at = (row tile, column tile)` (`reads` from
    /// [`Self::plain_reads`] or [`Self::transposed_reads`] on a tile of the same layout), as
    /// `<N x i32>` holding the lane's values in the thread-value layout's order.
    pub fn read<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        reads: &FragmentReads<'k, 'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        at: [i64; 2],
        imm_offset_bytes: i64,
    ) -> Result<Value<'ctx>> {
        if at[0] < 0 || at[1] < 0 || at[0] >= reads.tiles[0] || at[1] >= reads.tiles[1] {
            return Err(DslError::Operand {
                op: "TiledMmaLoader::read",
                rule: format!("MMA tile {at:?} outside the {:?} tiles", reads.tiles),
            });
        }
        if !(0..65536).contains(&imm_offset_bytes) {
            return Err(DslError::Operand {
                op: "TiledMmaLoader::read",
                rule: format!("immediate offset {imm_offset_bytes}: a DS offset is 0..65535"),
            });
        }
        let leaf = |v: i64| Coord::Leaf(Idx::Static(v));
        let parts = match &reads.kind {
            ReadKind::Plain {
                run_values,
                run_bytes,
                skip,
            } => skip
                .iter()
                .enumerate()
                .map(|(j, &past)| {
                    let ty = Ty::dwords(*run_bytes / 4);
                    if past {
                        return Ok(k.zero(ty));
                    }
                    let off = Self::offset(reads, leaf(j as i64 * run_values), at)?;
                    let addr = self.address(k, tile, off, imm_offset_bytes);
                    k.lds_load(&tile.lds, addr, ty, *run_bytes)
                })
                .collect::<Result<Vec<_>>>()?,
            ReadKind::Transposed { bits, loads } => (0..*loads)
                .map(|j| {
                    let value = Coord::Tuple(vec![leaf(0), leaf(j)]);
                    let off = Self::offset(reads, value, at)?;
                    let addr = self.address(k, tile, off, imm_offset_bytes);
                    k.lds_load_tr_b64(&tile.lds, addr, *bits)
                })
                .collect::<Result<Vec<_>>>()?,
        };
        let joined = k.concat(&parts)?;
        let dwords = (reads.values * i64::from(reads.elem_bytes) / 4) as u32;
        k.bitcast(joined, Ty::dwords(dwords))
    }

    /// The full B operand of a `WN x BK` warp tile (`tile`: `(N, K)` element coordinates): one
    /// fragment per MMA tile, N outer (`[n * k_tiles + kk]`). bf16 fragments are one 16-byte
    /// read, FP8 f8f6f4 fragments two; `imm_offset_bytes` is added to every read's address after
    /// the swizzle, in the instruction's offset field.
    pub fn load_b<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        lane: Int<'k, 'ctx>,
        imm_offset_bytes: i64,
    ) -> Result<Vec<Value<'ctx>>> {
        let reads = self.b_reads(k, tile, lane)?;
        let [tn, tk] = reads.tiles;
        let mut out = Vec::with_capacity((tn * tk) as usize);
        for n in 0..tn {
            for kk in 0..tk {
                out.push(self.read(k, &reads, tile, [n, kk], imm_offset_bytes)?);
            }
        }
        Ok(out)
    }

    /// The lane's plain reads of B fragments from tiles laid out as `tile` (for [`Self::read`]
    /// inside loops).
    pub fn b_reads<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        lane: Int<'k, 'ctx>,
    ) -> Result<FragmentReads<'k, 'ctx>> {
        let [_, n, kd] = self.atom.shape_mnk();
        self.check_bits(self.atom.operand_bits()[1], tile)?;
        self.plain_reads(k, tile, &self.atom.b_layout(), [n, kd], lane)
    }

    /// The lane's plain reads of A fragments from tiles laid out as `tile` (`(M, K)`).
    pub fn a_reads<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        lane: Int<'k, 'ctx>,
    ) -> Result<FragmentReads<'k, 'ctx>> {
        let [m, _, kd] = self.atom.shape_mnk();
        self.check_bits(self.atom.operand_bits()[0], tile)?;
        self.plain_reads(k, tile, &self.atom.a_layout(), [m, kd], lane)
    }

    fn check_bits(&self, bits: u32, tile: &LdsTile<'_, '_>) -> Result<()> {
        if bits != tile.elem_bits {
            return Err(DslError::Operand {
                op: "TiledMmaLoader",
                rule: format!(
                    "the atom's operand has {bits}-bit elements, the tile {}",
                    tile.elem_bits
                ),
            });
        }
        Ok(())
    }

    /// One MMA tile of a bf16 B operand stored N-contiguous (`tile`: `(N, K)` coordinates with
    /// N of stride 1, i.e. `[K][N]` rows), read with two `ds_read_b64_tr_b16` and joined: the
    /// fragment [`MmaAtom::b_layout`] describes, as `<4 x i32>`.
    pub fn load_b_tr<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        tile: &LdsTile<'k, 'ctx>,
        lane: Int<'k, 'ctx>,
    ) -> Result<Value<'ctx>> {
        let [_, n, kd] = self.atom.shape_mnk();
        if self.atom.operand_bits() != [16, 16] {
            return Err(DslError::Operand {
                op: "load_b_tr",
                rule: "transposed B loads are for the bf16 16x16x32 and 32x32x16 atoms".into(),
            });
        }
        let reads = self.transposed_reads(k, tile, &self.atom.b_layout(), [n, kd], 16, lane)?;
        self.read(k, &reads, tile, [0, 0], 0)
    }
}

impl TiledMmaLoader<F8f6f4> {
    /// The lane's reads of 16 x 128 FP8 V strips (`v_tile`: `(depth, key)` coordinates, depth
    /// of stride 1, i.e. `[key][depth]` rows) as the A operand of this loader's 16x16x128 FP8
    /// atom, keys in `order` relative to the QK atom `qk` (see the module documentation).
    /// Computed once, before the loops that read strips.
    pub fn v_strip_reads<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        v_tile: &LdsTile<'k, 'ctx>,
        qk: &impl MmaAtom,
        order: KeyOrder,
        lane: Int<'k, 'ctx>,
    ) -> Result<FragmentReads<'k, 'ctx>> {
        let tv = v_operand_layout(&self.atom, qk, order)?;
        self.transposed_reads(k, v_tile, &tv, [16, 128], 8, lane)
    }

    /// The V strip of depth tile `dt` and key tile `bk_tile` ( depths `16 dt ..`, keys
    /// `128 bk_tile ..`): four `ds_read_b64_tr_b8` joined into the `<8 x i32>` A operand, keys
    /// in the order `reads` were made for ([`KeyOrder::Accumulator`]: reads at key offsets
    /// `{0, 32, 64, 96}`, each lane group's keys `{0..3, 16..19} + 4 g`).
    pub fn load_v_fp8_strip<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        reads: &FragmentReads<'k, 'ctx>,
        v_tile: &LdsTile<'k, 'ctx>,
        bk_tile: i64,
        dt: i64,
    ) -> Result<Value<'ctx>> {
        self.read(k, reads, v_tile, [dt, bk_tile], 0)
    }

    /// [`Self::load_v_fp8_strip`] for reads made with [`KeyOrder::Contiguous`]: lane group `g`
    /// holds keys `32 g .. 32 g + 32`, read at key offsets `{0, 8, 16, 24}` of its block.
    pub fn load_v_fp8_strip_16<'k, 'ctx>(
        &self,
        k: &'k Kernel<'ctx>,
        reads: &FragmentReads<'k, 'ctx>,
        v_tile: &LdsTile<'k, 'ctx>,
        bk_tile: i64,
        dt: i64,
    ) -> Result<Value<'ctx>> {
        self.read(k, reads, v_tile, [dt, bk_tile], 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tile::atom::{MFMA_16X16X128_FP8, Swapped};

    /// The fragment positions a transposing sequence fills cover every (lane, value) once.
    #[test]
    fn tr_source_maps_are_bijections() {
        for (bits, loads) in [(16, 2), (8, 4), (4, 2)] {
            let m = tr_source_map(bits, loads).unwrap();
            let n = 64 * (64 / bits as i64) * loads;
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let v = m.call(i).static_value().unwrap() as usize;
                assert!(!seen[v], "bits {bits}: {v} twice");
                seen[v] = true;
            }
        }
        assert!(tr_source_map(6, 1).is_err());
    }

    /// V's keys (Accumulator order) are P's keys byte for byte, and P's bytes are the QK
    /// accumulators in order.
    #[test]
    fn v_and_p_agree_on_every_key() {
        let qk = MFMA_16X16X128_FP8;
        let v = v_operand_layout(&MFMA_16X16X128_FP8, &qk, KeyOrder::Accumulator).unwrap();
        let p = p_operand_layout(&qk).unwrap();
        let c = qk.c_layout();
        for lane in 0..64 {
            for b in 0..32 {
                let vi = v
                    .crd2idx(&(lane, b).into())
                    .unwrap()
                    .static_value()
                    .unwrap();
                let pi = p
                    .crd2idx(&(lane, b).into())
                    .unwrap()
                    .static_value()
                    .unwrap();
                let (depth, vkey) = (vi % 16, vi / 16);
                let (q, pkey) = (pi % 16, pi / 16);
                assert_eq!(vkey, pkey, "lane {lane} byte {b}");
                assert_eq!(vkey, 16 * (b / 4) + 4 * (lane / 16) + b % 4);
                assert_eq!((depth, q), (lane % 16, lane % 16));
                // Accumulator b % 4 of QK tile b / 4: C(lane, v) = key + 16 q.
                let ci = c
                    .crd2idx(&(lane, b % 4).into())
                    .unwrap()
                    .static_value()
                    .unwrap();
                assert_eq!((ci % 16 + 16 * (b / 4), ci / 16), (pkey, q));
            }
        }
        // Query columns in the accumulator rows: refused.
        let swapped = Swapped(MFMA_16X16X128_FP8);
        assert!(v_operand_layout(&MFMA_16X16X128_FP8, &swapped, KeyOrder::Accumulator).is_err());
        let cont = v_operand_layout(&MFMA_16X16X128_FP8, &qk, KeyOrder::Contiguous).unwrap();
        let key = |lane: i64, b: i64| {
            cont.crd2idx(&(lane, b).into())
                .unwrap()
                .static_value()
                .unwrap()
                / 16
        };
        assert_eq!(key(17, 5), 32 + 5);
        assert_eq!(key(63, 31), 127);
    }
}
