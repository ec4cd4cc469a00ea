//! Device `TileTensor` views: a layout over memory (global through a buffer resource, or LDS),
//! over a lane's registers, or over nothing (an index view), with `tile`, `vectorize`,
//! `distribute` and the MMA `partition_*` as in CuTe / Mojo's `TileTensor`.
//!
//! A view keeps two byte offsets: a wave-uniform `base` (tile coordinates come from workgroup
//! ids and loop counters) and a per-lane `lane` part (from `distribute` / `partition_*`).
//! Buffer loads take them as `soffset` and `voffset`, so uniform address arithmetic stays on the
//! scalar unit. The layout counts in units of `unit_bits` (8 for a byte view, 4 for packed FP4):
//! elements keep their natural coordinates, and offsets become bytes only when evaluated, by
//! scaling the strides (so a run-time coordinate never needs a division).

use std::rc::Rc;

use tilegen_layout::{Coord, Idx, Layout, SwizzleChain};

use crate::atom::MmaAtom;
use crate::error::{DslError, Result};
use crate::int::Int;
use crate::kernel::{Kernel, Var};
use crate::mem::{Buffer, Lds};
use crate::value::{Cond, Elem, Ty, Value};

/// Where a view's elements live.
#[derive(Debug, Clone)]
pub enum Storage<'ctx> {
    /// Global memory through a buffer resource.
    Global(Buffer<'ctx>),
    /// Shared memory.
    Lds(Lds<'ctx>),
    /// This lane's registers: one variable per element, the layout giving the element's index.
    /// Registers cannot be indexed at run time, so coordinates must be static.
    Regs(Rc<[Var<'ctx>]>),
    /// No memory: the view's offsets are the values of its layout (CuTe's counting tensors), for
    /// predicates and byte selects that must follow the same tiling and partitioning as a
    /// memory view.
    Index,
}

/// An index of the layout algebra on the device.
pub type DevIdx<'k, 'ctx> = Idx<Int<'k, 'ctx>>;
/// A layout over device indices.
pub type DevLayout<'k, 'ctx> = Layout<Int<'k, 'ctx>>;

/// A host layout as a device layout (every value known at generation time).
pub fn dev_layout<'k, 'ctx>(l: &Layout) -> Result<DevLayout<'k, 'ctx>> {
    let leaf = |v: &Idx<i64>| match v {
        Idx::Static(x) | Idx::Dynamic(x) => Idx::Static(*x),
    };
    Ok(Layout::new(
        l.shape().map(&mut |v| leaf(v)),
        l.stride().map(&mut |v| leaf(v)),
    )?)
}

/// `l` with every stride scaled by `num / den`; static strides must scale exactly.
fn scale_strides<'k, 'ctx>(
    l: &DevLayout<'k, 'ctx>,
    num: i64,
    den: i64,
) -> Result<DevLayout<'k, 'ctx>> {
    let mut bad = None;
    let stride = l.stride().map(&mut |d| match d.static_value() {
        Some(v) if (v * num) % den != 0 => {
            bad = Some(v);
            Idx::Static(0)
        }
        _ => d.mul(&Idx::Static(num)).div(&Idx::Static(den)),
    });
    if let Some(v) = bad {
        return Err(DslError::Operand {
            op: "byte offset",
            rule: format!(
                "stride {v} of {} is not a whole number of bytes: coordinates along it must be static",
                l.describe()
            ),
        });
    }
    Ok(Layout::new(l.shape().clone(), stride)?)
}

/// The layout of tile origins when `mode` is cut into tiles of `s` consecutive coordinates:
/// tile `c` starts at `grid(c)` (the rest mode of CuTe's `logical_divide(mode, s)`). The tile
/// covers the leading leaves it spans wholly, so their coordinates are zero without any
/// division; the last leaf may have a run-time extent, which bounds nothing here.
fn tile_grid<'k, 'ctx>(mode: &DevLayout<'k, 'ctx>, s: i64) -> Result<DevLayout<'k, 'ctx>> {
    let leaves = mode.leaf_modes();
    let last = leaves.len() - 1;
    let mut rest = s;
    let mut out: Vec<(DevIdx<'k, 'ctx>, DevIdx<'k, 'ctx>)> = Vec::new();
    for (i, (shape, stride)) in leaves.into_iter().enumerate() {
        match shape.static_value() {
            _ if rest == 1 => out.push((shape, stride)),
            Some(n) if i < last && rest % n == 0 => rest /= n,
            Some(n) if i < last && n % rest == 0 => {
                out.push((Idx::Static(n / rest), stride.mul(&Idx::Static(rest))));
                rest = 1;
            }
            Some(n) if i < last => {
                return Err(DslError::Operand {
                    op: "tile",
                    rule: format!(
                        "tiles of {s} do not divide {} (a leaf of {n})",
                        mode.describe()
                    ),
                });
            }
            _ => {
                out.push((shape, stride.mul(&Idx::Static(rest))));
                rest = 1;
            }
        }
    }
    if out.is_empty() {
        return Ok(Layout::leaf(1, 0));
    }
    let (shape, stride): (Vec<_>, Vec<_>) = out
        .into_iter()
        .map(|(a, b)| (Coord::Leaf(a), Coord::Leaf(b)))
        .unzip();
    Ok(Layout::new(Coord::Tuple(shape), Coord::Tuple(stride))?)
}

/// `l` split leaf by leaf at `bytes`: the first layout keeps the strides that move by whole
/// `bytes`-sized words (run-time strides count as such), the second the ones inside a word,
/// so `l(c) = words(c) + within(c)`. A static stride that is neither is an error.
pub fn split_strides<'k, 'ctx>(
    l: &DevLayout<'k, 'ctx>,
    bytes: i64,
) -> Result<(DevLayout<'k, 'ctx>, DevLayout<'k, 'ctx>)> {
    let mut bad = None;
    let mut within = |d: &DevIdx<'k, 'ctx>, keep_small: bool| match d.static_value() {
        Some(v) if v < bytes => {
            if keep_small {
                Idx::Static(v)
            } else {
                Idx::Static(0)
            }
        }
        Some(v) if v % bytes != 0 => {
            bad = Some(v);
            Idx::Static(0)
        }
        _ if keep_small => Idx::Static(0),
        _ => d.clone(),
    };
    let words = l.stride().map(&mut |d| within(d, false));
    let small = l.stride().map(&mut |d| within(d, true));
    if let Some(v) = bad {
        return Err(DslError::Operand {
            op: "split_strides",
            rule: format!(
                "stride {v} of {} is neither inside a {bytes}-byte word nor a whole number of them",
                l.describe()
            ),
        });
    }
    Ok((
        Layout::new(l.shape().clone(), words)?,
        Layout::new(l.shape().clone(), small)?,
    ))
}

/// The same layout counted in `n` times smaller units (CuTe's `downcast<n>`): a stride-1 leaf
/// has `n` times the extent, every other stride is `n` times larger. A byte layout of packed
/// FP4 data becomes an element layout with `downcast(l, 2)`.
pub fn downcast<'k, 'ctx>(l: &DevLayout<'k, 'ctx>, n: i64) -> Result<DevLayout<'k, 'ctx>> {
    let unit: Vec<bool> = l.leaf_modes().iter().map(|(_, d)| d.is(1)).collect();
    let mut i = 0;
    let shape = l.shape().map(&mut |s| {
        i += 1;
        if unit[i - 1] {
            s.mul(&Idx::Static(n))
        } else {
            s.clone()
        }
    });
    let mut i = 0;
    let stride = l.stride().map(&mut |d| {
        i += 1;
        if unit[i - 1] {
            d.clone()
        } else {
            d.mul(&Idx::Static(n))
        }
    });
    Ok(Layout::new(shape, stride)?)
}

/// A typed view: `layout` maps element coordinates to offsets in units of `unit_bits`, and one
/// element spans `elem_bits` (more than a unit once vectorized: it then loads with one
/// instruction).
#[derive(Clone)]
pub struct TileTensor<'k, 'ctx> {
    k: &'k Kernel<'ctx>,
    storage: Storage<'ctx>,
    /// Uniform byte offset of the view.
    base: DevIdx<'k, 'ctx>,
    /// Per-lane byte offset of the view.
    lane: DevIdx<'k, 'ctx>,
    /// Element coordinates -> offsets in units (relative to `base + lane`).
    layout: DevLayout<'k, 'ctx>,
    /// Bits of one step of the layout's codomain.
    unit_bits: u32,
    /// Bits per element (a vectorized element spans several units).
    elem_bits: u32,
    /// Applied to the whole byte offset from the start of the storage (CuTe's composed layout
    /// `swizzle o (base + lane + layout)`): identity unless [`Self::swizzled`].
    swizzle: SwizzleChain,
}

impl<'k, 'ctx> TileTensor<'k, 'ctx> {
    /// A byte view of `storage` with `layout` (in bytes).
    pub fn new(k: &'k Kernel<'ctx>, storage: Storage<'ctx>, layout: DevLayout<'k, 'ctx>) -> Self {
        TileTensor {
            k,
            storage,
            base: Idx::Static(0),
            lane: Idx::Static(0),
            layout,
            unit_bits: 8,
            elem_bits: 8,
            swizzle: SwizzleChain::identity(),
        }
    }

    /// The same view with `swizzle` applied to every byte offset from the start of its storage
    /// (an LDS tile whose rows are permuted chunk-wise to spread columns over the banks). Only a
    /// view of a whole storage, not yet tiled or partitioned, can be swizzled: the swizzle is a
    /// function of the storage's offsets. Tiles and partitions of the result stay swizzled.
    pub fn swizzled(self, swizzle: impl Into<SwizzleChain>) -> Result<Self> {
        let swizzle = self.swizzle.clone().then(swizzle.into());
        swizzle.check_index::<Int<'k, 'ctx>>()?;
        let whole = self.base.static_value() == Some(0) && self.lane.static_value() == Some(0);
        if !whole || matches!(self.storage, Storage::Regs(_) | Storage::Index) {
            return Err(DslError::Operand {
                op: "swizzled",
                rule: "only a whole memory view (not tiled or partitioned, not registers) can be swizzled".into(),
            });
        }
        Ok(TileTensor { swizzle, ..self })
    }

    /// The swizzle applied to this view's byte offsets (identity unless swizzled).
    pub fn swizzle(&self) -> &SwizzleChain {
        &self.swizzle
    }

    /// A view of `bits`-bit elements: `layout` counts in elements. Sub-byte elements are packed
    /// low bits first (FP4: element `2 i` is the low nibble of byte `i`).
    pub fn packed(
        k: &'k Kernel<'ctx>,
        storage: Storage<'ctx>,
        layout: DevLayout<'k, 'ctx>,
        bits: u32,
    ) -> Result<Self> {
        if !matches!(bits, 1 | 2 | 4 | 8 | 16 | 32 | 64) {
            return Err(DslError::Operand {
                op: "packed view",
                rule: format!("{bits}-bit elements: a power of two up to 64 bits"),
            });
        }
        Ok(TileTensor {
            unit_bits: bits,
            elem_bits: bits,
            ..TileTensor::new(k, storage, layout)
        })
    }

    /// An index view: its offsets are `layout`'s values (see [`Storage::Index`]).
    pub fn index(k: &'k Kernel<'ctx>, layout: DevLayout<'k, 'ctx>) -> Self {
        TileTensor::new(k, Storage::Index, layout)
    }

    /// A view of a lane's registers: element `c` is `vars[layout(c)]`.
    pub fn registers(
        k: &'k Kernel<'ctx>,
        vars: Vec<Var<'ctx>>,
        layout: DevLayout<'k, 'ctx>,
    ) -> Self {
        TileTensor::new(k, Storage::Regs(vars.into()), layout)
    }

    /// The layout (element coordinates to offsets in units).
    pub fn layout(&self) -> &DevLayout<'k, 'ctx> {
        &self.layout
    }

    /// Bits per element.
    pub fn elem_bits(&self) -> u32 {
        self.elem_bits
    }

    /// Bytes per element (0 for an unvectorized sub-byte view).
    pub fn elem_bytes(&self) -> u32 {
        self.elem_bits / 8
    }

    /// The storage.
    pub fn storage(&self) -> &Storage<'ctx> {
        &self.storage
    }

    /// The byte offset of `coord` under `layout` (a layout counting in this view's units), as
    /// the part known at generation time and the run-time rest. Each top-level mode with a
    /// run-time coordinate is evaluated on byte strides; static parts are summed in units first,
    /// so a static coordinate may address any whole byte.
    fn byte_parts(
        &self,
        layout: &DevLayout<'k, 'ctx>,
        coord: &Coord<Int<'k, 'ctx>>,
    ) -> Result<(i64, DevIdx<'k, 'ctx>)> {
        let parts: Vec<(DevLayout<'k, 'ctx>, Coord<Int<'k, 'ctx>>)> = match coord {
            Coord::Tuple(cs) if cs.len() == layout.rank() && !layout.shape().is_leaf() => {
                layout.modes().into_iter().zip(cs.iter().cloned()).collect()
            }
            c => vec![(layout.clone(), c.clone())],
        };
        let packed = self.unit_bits != 8 && !matches!(self.storage, Storage::Regs(_));
        let (num, den) = if packed {
            (self.unit_bits as i64, 8)
        } else {
            (1, 1)
        };
        let mut units = 0i64;
        let mut bytes = Idx::Static(0);
        for (mode, c) in parts {
            let at = mode.crd2idx(&c)?;
            match at.static_value() {
                Some(u) => units += u,
                None if packed => bytes = bytes.add(&scale_strides(&mode, num, den)?.crd2idx(&c)?),
                None => bytes = bytes.add(&at),
            }
        }
        if (units * num) % den != 0 {
            return Err(DslError::Operand {
                op: "byte offset",
                rule: format!(
                    "{units} units of {} bits is not a whole number of bytes",
                    self.unit_bits
                ),
            });
        }
        Ok((units * num / den, bytes))
    }

    /// [`Self::byte_parts`] summed.
    fn bytes(
        &self,
        layout: &DevLayout<'k, 'ctx>,
        coord: &Coord<Int<'k, 'ctx>>,
    ) -> Result<DevIdx<'k, 'ctx>> {
        let (fixed, rest) = self.byte_parts(layout, coord)?;
        Ok(rest.add(&Idx::Static(fixed)))
    }

    /// The `shape`-sized tile at tile coordinate `coord` (per mode: `coord[i] * shape[i]`). The
    /// tile keeps the parent's strides. Tile coordinates must be wave-uniform.
    pub fn tile(&self, shape: &[i64], coord: &[DevIdx<'k, 'ctx>]) -> Result<Self> {
        let modes = self.layout.modes();
        if shape.len() != modes.len() || coord.len() != modes.len() {
            return Err(DslError::Operand {
                op: "tile",
                rule: format!(
                    "tile rank {} / coordinate rank {} must equal the view's rank {}",
                    shape.len(),
                    coord.len(),
                    modes.len()
                ),
            });
        }
        let mut offset = Idx::Static(0);
        for ((m, c), &s) in modes.iter().zip(coord).zip(shape) {
            offset = offset.add(&self.bytes(&tile_grid(m, s)?, &Coord::Leaf(c.clone()))?);
        }
        // A tile of a flat mode keeps its stride; nested modes must be tiled by whole sub-modes,
        // which the composition expresses.
        let sub: Vec<DevLayout<'k, 'ctx>> = modes
            .iter()
            .zip(shape)
            .map(|(m, &s)| m.compose(&Layout::leaf(s, 1)))
            .collect::<std::result::Result<_, _>>()?;
        Ok(TileTensor {
            base: self.base.add(&offset),
            layout: Layout::from_modes(sub),
            ..self.clone()
        })
    }

    /// Groups `widths[i]` consecutive elements of mode `i` into one vector element. The grouped
    /// elements must be contiguous (the result loads each element with one instruction).
    pub fn vectorize(&self, widths: &[i64]) -> Result<Self> {
        if let Storage::Regs(_) = self.storage {
            return Err(DslError::Operand {
                op: "vectorize",
                rule: "register elements are whole values already: vectorize views of memory"
                    .into(),
            });
        }
        let tilers: Vec<DevLayout<'k, 'ctx>> = widths.iter().map(|&w| Layout::leaf(w, 1)).collect();
        let z = self.layout.zipped_divide(&tilers)?;
        let inner = z.mode(0)?;
        let outer = z.mode(1)?;
        let run = inner.coalesce();
        let contiguous = match run.leaf_modes().as_slice() {
            [(s, d)] => d.is(1) || s.is(1),
            _ => false,
        };
        if !contiguous {
            return Err(DslError::Operand {
                op: "vectorize",
                rule: format!("vector element {} is not contiguous", inner.describe()),
            });
        }
        let count = inner.size().static_value().unwrap_or(0);
        Ok(TileTensor {
            layout: outer,
            elem_bits: (count as u32) * self.elem_bits,
            ..self.clone()
        })
    }

    /// The part of the view that lane `lane` owns when `threads` (a layout from thread
    /// coordinates to lane ids, e.g. column-major `[16, 4]`) is tiled over it: each mode `i` is
    /// split into `threads`' extent and the rest, and the lane keeps the rest at its coordinate.
    pub fn distribute(&self, threads: &Layout, lane: Int<'k, 'ctx>) -> Result<Self> {
        if matches!(self.storage, Storage::Regs(_)) {
            return Err(DslError::Operand {
                op: "distribute",
                rule: "a register view is already one lane's: distribute views of memory".into(),
            });
        }
        let shape = threads
            .shape()
            .static_leaves()
            .ok_or_else(|| DslError::Operand {
                op: "distribute",
                rule: "thread layout must be static".into(),
            })?;
        let tilers: Vec<DevLayout<'k, 'ctx>> = shape.iter().map(|&s| Layout::leaf(s, 1)).collect();
        let z = self.layout.zipped_divide(&tilers)?;
        let within = z.mode(0)?;
        let rest = z.mode(1)?;
        // The lane's thread coordinate is the thread layout's inverse at `lane`.
        let coord = dev_layout(&threads.flatten())?.idx2crd(&lane.idx())?;
        let offset = self.bytes(&within, &coord)?;
        Ok(TileTensor {
            lane: self.lane.add(&offset),
            layout: rest,
            ..self.clone()
        })
    }

    /// Lane `lane`'s fragment when this `(rows, cols)` view is covered by tiles of `tile`
    /// (`[rows, cols]` of one instruction) and `tv` maps `(lane, value)` to `row + rows * col` of
    /// a tile (CuTe's `thrfrg`). The result has modes `(value, tile_row, tile_col)`.
    pub fn partition(&self, tv: &Layout, tile: [i64; 2], lane: Int<'k, 'ctx>) -> Result<Self> {
        if self.layout.rank() != 2 || matches!(self.storage, Storage::Regs(_)) {
            return Err(DslError::Operand {
                op: "partition",
                rule: format!(
                    "partition a rank-2 view of memory, not {}",
                    self.layout.describe()
                ),
            });
        }
        let z = self
            .layout
            .zipped_divide(&[Layout::leaf(tile[0], 1), Layout::leaf(tile[1], 1)])?;
        let per_tile = z.mode(0)?;
        let tiles = z.mode(1)?;
        let thr_val = per_tile.compose(&dev_layout(tv)?)?;
        let offset = self.bytes(&thr_val.mode(0)?, &Coord::Leaf(lane.idx()))?;
        Ok(TileTensor {
            lane: self.lane.add(&offset),
            layout: Layout::from_modes(vec![thr_val.mode(1)?, tiles.mode(0)?, tiles.mode(1)?]),
            ..self.clone()
        })
    }

    /// Lane `lane`'s fragment of this `(M, K)` view as operand A of `atom`.
    pub fn partition_a(&self, atom: &impl MmaAtom, lane: Int<'k, 'ctx>) -> Result<Self> {
        let [m, _, k] = atom.shape_mnk();
        self.partition(&atom.a_layout(), [m, k], lane)
    }

    /// Lane `lane`'s fragment of this `(N, K)` view as operand B of `atom`.
    pub fn partition_b(&self, atom: &impl MmaAtom, lane: Int<'k, 'ctx>) -> Result<Self> {
        let [_, n, k] = atom.shape_mnk();
        self.partition(&atom.b_layout(), [n, k], lane)
    }

    /// Lane `lane`'s fragment of this `(M, N)` view as the accumulator of `atom`.
    pub fn partition_c(&self, atom: &impl MmaAtom, lane: Int<'k, 'ctx>) -> Result<Self> {
        let [m, n, _] = atom.shape_mnk();
        self.partition(&atom.c_layout(), [m, n], lane)
    }

    /// Lane `lane`'s scale of this `(M, K / block)` view as A's scale operand of `atom`.
    pub fn partition_sfa(&self, atom: &impl MmaAtom, lane: Int<'k, 'ctx>) -> Result<Self> {
        let [m, _, k] = atom.shape_mnk();
        let (tv, block) = scales("partition_sfa", atom.sfa_layout(), atom.scale_block())?;
        self.partition(&tv, [m, k / block], lane)
    }

    /// Lane `lane`'s scale of this `(N, K / block)` view as B's scale operand of `atom`.
    pub fn partition_sfb(&self, atom: &impl MmaAtom, lane: Int<'k, 'ctx>) -> Result<Self> {
        let [_, n, k] = atom.shape_mnk();
        let (tv, block) = scales("partition_sfb", atom.sfb_layout(), atom.scale_block())?;
        self.partition(&tv, [n, k / block], lane)
    }

    /// The byte offset of the element at `coord` in four parts: the view's uniform base, the
    /// lane's part, and the coordinate's part known at generation time and its run-time rest
    /// (`coord`'s leaves must be wave-uniform).
    pub fn offset_parts(
        &self,
        coord: &Coord<Int<'k, 'ctx>>,
    ) -> Result<(DevIdx<'k, 'ctx>, DevIdx<'k, 'ctx>, i64, DevIdx<'k, 'ctx>)> {
        if let Storage::Regs(_) = self.storage {
            return Err(DslError::Operand {
                op: "offsets",
                rule: "a register view has no byte offsets: load or store its elements".into(),
            });
        }
        if !self.swizzle.is_identity() {
            return Err(DslError::Operand {
                op: "offsets",
                rule: "a swizzled view's offset is not a sum of parts: use offsets()".into(),
            });
        }
        let (fixed, rest) = self.byte_parts(&self.layout, coord)?;
        Ok((self.base.clone(), self.lane.clone(), fixed, rest))
    }

    /// Byte offsets (uniform, per-lane) of the element at `coord`. The coordinate's static part
    /// joins the uniform offset (buffer operations fold it into the instruction's immediate);
    /// its run-time part (modes with run-time strides) joins the lane's, where loop-invariant
    /// offsets stay in one VGPR each instead of holding an SGPR each through a loop.
    ///
    /// In a swizzled view the swizzle mixes uniform and lane bits, so the whole offset is the
    /// lane's, except a static part that is a multiple of the swizzle's block (it passes through
    /// the swizzle unchanged, and stays an immediate).
    pub fn offsets(&self, coord: &Coord<Int<'k, 'ctx>>) -> Result<(Int<'k, 'ctx>, Int<'k, 'ctx>)> {
        let zero = self.k.i32(0);
        if !self.swizzle.is_identity() {
            let (fixed, rest) = self.byte_parts(&self.layout, coord)?;
            let block = self.swizzle.block();
            let (outside, inside) = (fixed - fixed.rem_euclid(block), fixed.rem_euclid(block));
            let total = self
                .base
                .add(&self.lane)
                .add(&rest)
                .add(&Idx::Static(inside));
            let lane = self.swizzle.apply_idx(&total);
            return Ok((self.k.i32(outside), lane.to_value(&zero)));
        }
        let (base, lane, fixed, rest) = self.offset_parts(coord)?;
        let base = base.add(&Idx::Static(fixed));
        Ok((base.to_value(&zero), lane.add(&rest).to_value(&zero)))
    }

    fn mem_ty(&self, op: &'static str) -> Result<Ty> {
        match self.elem_bits {
            8 => Ok(Ty::I8),
            16 => Ok(Ty::scalar(Elem::I16)),
            b if b % 32 == 0 && (32..=128).contains(&b) => Ok(Ty::dwords(b / 32)),
            b => Err(DslError::Operand {
                op,
                rule: format!("element of {b} bits: memory moves 1, 2 or 4 to 16 bytes"),
            }),
        }
    }

    /// Loads the element at `coord` (`i8`, `i16`, `i32` or `<N x i32>` by size).
    pub fn load(&self, coord: &Coord<Int<'k, 'ctx>>) -> Result<Value<'ctx>> {
        if let Storage::Regs(vars) = &self.storage {
            return self.k.get(&vars[self.register(coord, vars.len())?]);
        }
        self.load_as(coord, self.mem_ty("load")?)
    }

    /// Loads a `ty` (1, 2 or 4 to 16 bytes) at the element at `coord`, whatever the element's
    /// size: e.g. the dword whose first byte is a scale.
    pub fn load_as(&self, coord: &Coord<Int<'k, 'ctx>>, ty: Ty) -> Result<Value<'ctx>> {
        let (base, lane) = self.offsets(coord)?;
        match &self.storage {
            Storage::Global(buf) if ty.bytes() >= 4 => {
                self.k
                    .raw_buffer_load(buf, lane, base, ty.bytes() / 4, buf.policy)
            }
            Storage::Lds(lds) => self.k.lds_load(lds, base + lane, ty, ty.bytes().min(16)),
            _ => Err(self.no_memory("load")),
        }
    }

    /// Stores `value` (`elem_bits` bits) as the element at `coord`.
    pub fn store(&self, coord: &Coord<Int<'k, 'ctx>>, value: Value<'ctx>) -> Result<()> {
        self.store_if(coord, value, None)
    }

    /// [`TileTensor::store`] that only takes effect where `keep` holds (wave-uniform). Global
    /// stores are dropped by pointing them past the buffer's end, which needs no branch.
    pub fn store_if(
        &self,
        coord: &Coord<Int<'k, 'ctx>>,
        value: Value<'ctx>,
        keep: Option<Cond<'ctx>>,
    ) -> Result<()> {
        if let Storage::Regs(vars) = &self.storage {
            if keep.is_some() {
                return Err(DslError::Operand {
                    op: "store_if",
                    rule: "registers are always written: predicate memory stores".into(),
                });
            }
            return self.k.set(&vars[self.register(coord, vars.len())?], value);
        }
        if value.ty().bytes() * 8 != self.elem_bits {
            return Err(DslError::Operand {
                op: "store",
                rule: format!("a {:?} into a {}-bit element", value.ty(), self.elem_bits),
            });
        }
        let (base, lane) = self.offsets(coord)?;
        match &self.storage {
            Storage::Global(buf) => {
                let base = match keep {
                    Some(c) => base.select(c.0, &buf.records(self.k)),
                    None => base,
                };
                self.k.raw_buffer_store(buf, value, lane, base)
            }
            Storage::Lds(lds) => {
                let write = || {
                    self.k
                        .lds_store(lds, base + lane, value, (self.elem_bits / 8).min(16))
                };
                match keep {
                    Some(c) => self.k.if_then(c, write),
                    None => write(),
                }
            }
            _ => Err(self.no_memory("store")),
        }
    }

    /// Mode 0's elements at coordinate `rest` of the other modes, in mode-0 order, as one value:
    /// the widest contiguous runs (up to 16 bytes) load with one instruction each. This is how a
    /// lane reads its MMA fragment from a `partition_*` view.
    pub fn load_values(&self, rest: &[i64]) -> Result<Value<'ctx>> {
        let (chunks, runs) = self.value_runs(rest)?;
        let parts = (0..runs)
            .map(|r| {
                let mut c = vec![Idx::Static(r)];
                c.extend(rest.iter().map(|&x| Idx::Static(x)));
                chunks.load(&Coord::from(
                    c.into_iter().map(Coord::Leaf).collect::<Vec<_>>(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        self.k.concat(&parts)
    }

    /// Stores `value` (mode 0's elements at coordinate `rest` of the other modes, in mode-0
    /// order, as [`TileTensor::load_values`] returns them), each contiguous run with one
    /// instruction. `keep(c)` may predicate the run whose first element is at coordinate `c` of
    /// this view (see [`TileTensor::store_if`]).
    pub fn store_values(
        &self,
        rest: &[i64],
        value: Value<'ctx>,
        keep: impl Fn(&Coord<Int<'k, 'ctx>>) -> Result<Option<Cond<'ctx>>>,
    ) -> Result<()> {
        let (chunks, runs) = self.value_runs(rest)?;
        let width = self.layout.modes()[0].size().static_value().unwrap_or(0) / runs;
        let ty = chunks.mem_ty("store_values")?;
        let parts = self.k.split(value, runs as u32)?;
        for (r, part) in (0..runs).zip(parts) {
            let at = |first: i64| {
                let mut c = vec![Coord::Leaf(Idx::Static(first))];
                c.extend(rest.iter().map(|&x| Coord::Leaf(Idx::Static(x))));
                Coord::Tuple(c)
            };
            let cond = keep(&at(r * width))?;
            chunks.store_if(&at(r), self.k.bitcast(part, ty)?, cond)?;
        }
        Ok(())
    }

    /// Mode 0 vectorized into its widest contiguous runs of at most 16 bytes, and their number.
    fn value_runs(&self, rest: &[i64]) -> Result<(Self, i64)> {
        let modes = self.layout.modes();
        if rest.len() + 1 != modes.len() {
            return Err(DslError::Operand {
                op: "load_values",
                rule: format!(
                    "{} coordinates for the {} modes after the values",
                    rest.len(),
                    modes.len() - 1
                ),
            });
        }
        let values = modes[0].size().static_value().unwrap_or(0);
        let mut width = values;
        while width > 1 {
            let fits = values % width == 0 && width * self.elem_bits as i64 <= 128;
            let mut w = vec![width];
            w.extend(std::iter::repeat_n(1, rest.len()));
            if fits && let Ok(v) = self.vectorize(&w) {
                return Ok((v, values / width));
            }
            width /= 2;
        }
        Ok((self.clone(), values))
    }

    fn no_memory(&self, op: &'static str) -> DslError {
        DslError::Operand {
            op,
            rule: "an index view has no memory: use its offsets".into(),
        }
    }

    /// The register index of `coord` in a register view.
    fn register(&self, coord: &Coord<Int<'k, 'ctx>>, count: usize) -> Result<usize> {
        let at = self.layout.crd2idx(coord)?.add(&self.base);
        match at.static_value() {
            Some(i) if (0..count as i64).contains(&i) => Ok(i as usize),
            Some(i) => Err(DslError::Operand {
                op: "register view",
                rule: format!("element {i} is outside the {count} registers of the view"),
            }),
            None => Err(DslError::Operand {
                op: "register view",
                rule: "registers cannot be indexed at run time: use a static coordinate".into(),
            }),
        }
    }
}

fn scales(op: &'static str, layout: Option<Layout>, block: Option<i64>) -> Result<(Layout, i64)> {
    match (layout, block) {
        (Some(l), Some(b)) if b > 0 => Ok((l, b)),
        _ => Err(DslError::Operand {
            op,
            rule: "the instruction takes no scales".into(),
        }),
    }
}
