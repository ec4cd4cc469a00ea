//! Device `TileTensor` views: a layout over bytes in global memory (through a buffer resource)
//! or LDS, or over a lane's registers, with `tile`, `vectorize` and `distribute` as in CuTe /
//! Mojo's `TileTensor`.
//!
//! A view keeps two offsets: a wave-uniform `base` (tile coordinates come from workgroup ids and
//! loop counters) and a per-lane `lane` part (from `distribute`). Buffer loads take them as
//! `soffset` and `voffset`, so uniform address arithmetic stays on the scalar unit.

use inkwell::values::BasicValueEnum;
use tilegen_layout::{Coord, Idx, Layout};

use crate::error::{DslError, Result};
use crate::int::Int;
use crate::kernel::Kernel;
use std::rc::Rc;

use crate::kernel::Var;
use crate::mem::{Buffer, Lds};

/// Where a view's elements live.
#[derive(Debug, Clone)]
pub enum Storage<'ctx> {
    /// Global memory through a buffer resource (layout in bytes).
    Global(Buffer<'ctx>),
    /// Shared memory (layout in bytes).
    Lds(Lds<'ctx>),
    /// This lane's registers: one variable per element, the layout giving the element's index.
    /// Registers cannot be indexed at run time, so coordinates must be static.
    Regs(Rc<[Var<'ctx>]>),
}

/// An index of the layout algebra on the device.
pub type DevIdx<'k, 'ctx> = Idx<Int<'k, 'ctx>>;
/// A layout over device indices.
pub type DevLayout<'k, 'ctx> = Layout<Int<'k, 'ctx>>;

/// A typed view of bytes: `layout` maps element coordinates to element indices, and one element
/// is `vector` consecutive... bytes as described by `elem_layout` (a vector element loads with
/// one instruction).
#[derive(Clone)]
pub struct TileTensor<'k, 'ctx> {
    k: &'k Kernel<'ctx>,
    storage: Storage<'ctx>,
    /// Uniform byte offset of the view.
    base: DevIdx<'k, 'ctx>,
    /// Per-lane byte offset of the view.
    lane: DevIdx<'k, 'ctx>,
    /// Element coordinates -> byte offsets (relative to `base + lane`).
    layout: DevLayout<'k, 'ctx>,
    /// Bytes per element (a vectorized element spans several scalars).
    elem_bytes: u32,
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
            elem_bytes: 1,
        }
    }

    /// The layout (element coordinates to byte offsets).
    pub fn layout(&self) -> &DevLayout<'k, 'ctx> {
        &self.layout
    }

    /// Bytes per element.
    pub fn elem_bytes(&self) -> u32 {
        self.elem_bytes
    }

    /// The storage.
    pub fn storage(&self) -> &Storage<'ctx> {
        &self.storage
    }

    /// A view of a lane's registers: element `c` is `vars[layout(c)]`.
    pub fn registers(
        k: &'k Kernel<'ctx>,
        vars: Vec<Var<'ctx>>,
        layout: DevLayout<'k, 'ctx>,
    ) -> Self {
        TileTensor {
            k,
            storage: Storage::Regs(vars.into()),
            base: Idx::Static(0),
            lane: Idx::Static(0),
            layout,
            elem_bytes: 1,
        }
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
        let origin: Vec<Coord<Int<'k, 'ctx>>> = coord
            .iter()
            .zip(shape)
            .map(|(c, &s)| Coord::Leaf(c.mul(&Idx::Static(s))))
            .collect();
        let offset = self
            .layout
            .crd2idx(&Coord::Tuple(origin))
            .map_err(layout_err)?;
        let sub: Vec<DevLayout<'k, 'ctx>> = modes
            .iter()
            .zip(shape)
            .map(|(m, &s)| {
                // A tile of a flat mode keeps its stride; nested modes must be tiled by whole
                // sub-modes, which the composition expresses.
                m.compose(&Layout::leaf(s, 1)).map_err(layout_err)
            })
            .collect::<Result<_>>()?;
        Ok(TileTensor {
            k: self.k,
            storage: self.storage.clone(),
            base: self.base.add(&offset),
            lane: self.lane.clone(),
            layout: Layout::from_modes(sub),
            elem_bytes: self.elem_bytes,
        })
    }

    /// Groups `widths[i]` consecutive elements of mode `i` into one vector element. The grouped
    /// elements must be contiguous bytes (the result loads each element with one instruction).
    pub fn vectorize(&self, widths: &[i64]) -> Result<Self> {
        if let Storage::Regs(_) = self.storage {
            return Err(DslError::Operand {
                op: "vectorize",
                rule: "register elements are whole values already: vectorize views of memory"
                    .into(),
            });
        }
        let tilers: Vec<DevLayout<'k, 'ctx>> = widths.iter().map(|&w| Layout::leaf(w, 1)).collect();
        let z = self.layout.zipped_divide(&tilers).map_err(layout_err)?;
        let inner = z.mode(0).map_err(layout_err)?;
        let outer = z.mode(1).map_err(layout_err)?;
        // The vector must be one contiguous run of bytes starting at its first element.
        let run = inner.coalesce();
        let bytes = inner.size().static_value().unwrap_or(0) * self.elem_bytes as i64;
        let contiguous = match run.leaf_modes().as_slice() {
            [(s, d)] => d.is(self.elem_bytes as i64) || (s.is(1)),
            _ => false,
        };
        if !contiguous {
            return Err(DslError::Operand {
                op: "vectorize",
                rule: format!(
                    "vector element {} is not contiguous bytes",
                    inner.describe()
                ),
            });
        }
        Ok(TileTensor {
            k: self.k,
            storage: self.storage.clone(),
            base: self.base.clone(),
            lane: self.lane.clone(),
            layout: outer,
            elem_bytes: bytes as u32,
        })
    }

    /// The part of the view that lane `lane` owns when `threads` (a layout from thread
    /// coordinates to lane ids, e.g. column-major `[16, 4]`) is tiled over it: each mode `i` is
    /// split into `threads`' extent and the rest, and the lane keeps the rest at its coordinate.
    pub fn distribute(&self, threads: &Layout, lane: Int<'k, 'ctx>) -> Result<Self> {
        if let Storage::Regs(_) = self.storage {
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
        let z = self.layout.zipped_divide(&tilers).map_err(layout_err)?;
        let within = z.mode(0).map_err(layout_err)?;
        let rest = z.mode(1).map_err(layout_err)?;
        // The lane's thread coordinate: per mode `(lane / stride) % extent` of `threads`.
        let t = threads.flatten();
        let lane_idx = lane.idx();
        let coords: Vec<Coord<Int<'k, 'ctx>>> = t
            .leaf_modes()
            .iter()
            .map(|(s, d)| {
                let (s, d) = (s.static_value().unwrap_or(1), d.static_value().unwrap_or(0));
                Coord::Leaf(if d == 0 {
                    Idx::Static(0)
                } else {
                    lane_idx.div(&Idx::Static(d)).rem(&Idx::Static(s))
                })
            })
            .collect();
        let offset = within.crd2idx(&Coord::Tuple(coords)).map_err(layout_err)?;
        Ok(TileTensor {
            k: self.k,
            storage: self.storage.clone(),
            base: self.base.clone(),
            lane: self.lane.add(&offset),
            layout: rest,
            elem_bytes: self.elem_bytes,
        })
    }

    /// Byte offsets (uniform, per-lane) of the element at `coord`.
    pub fn offsets(&self, coord: &Coord<Int<'k, 'ctx>>) -> Result<(Int<'k, 'ctx>, Int<'k, 'ctx>)> {
        if let Storage::Regs(_) = self.storage {
            return Err(DslError::Operand {
                op: "offsets",
                rule: "a register view has no byte offsets: load or store its elements".into(),
            });
        }
        let at = self.layout.crd2idx(coord).map_err(layout_err)?;
        let zero = self.k.i32(0);
        let lane = self.lane.add(&at).to_value(&zero);
        Ok((self.base.to_value(&zero), lane))
    }

    /// Loads the element at `coord` as `elem_bytes / 4` dwords (`i32` or `<N x i32>`).
    pub fn load(&self, coord: &Coord<Int<'k, 'ctx>>) -> Result<BasicValueEnum<'ctx>> {
        if let Storage::Regs(vars) = &self.storage {
            return self.k.get(&vars[self.register(coord, vars.len())?]);
        }
        let (base, lane) = self.offsets(coord)?;
        let dwords = self.dwords("load")?;
        match &self.storage {
            Storage::Global(buf) => self.k.buffer_load(buf, lane, base, dwords),
            Storage::Lds(lds) => {
                let ty = if dwords == 1 {
                    self.k.context().i32_type().into()
                } else {
                    inkwell::types::BasicTypeEnum::from(
                        self.k.context().i32_type().vec_type(dwords),
                    )
                };
                self.k
                    .lds_load(lds, base + lane, ty, self.elem_bytes.min(16))
            }
            Storage::Regs(_) => unreachable!("handled above"),
        }
    }

    /// Stores `value` (`elem_bytes` bytes) as the element at `coord`.
    pub fn store(&self, coord: &Coord<Int<'k, 'ctx>>, value: BasicValueEnum<'ctx>) -> Result<()> {
        if let Storage::Regs(vars) = &self.storage {
            return self.k.set(&vars[self.register(coord, vars.len())?], value);
        }
        let (base, lane) = self.offsets(coord)?;
        match &self.storage {
            Storage::Global(buf) => self.k.buffer_store(buf, value, lane, base),
            Storage::Lds(lds) => self
                .k
                .lds_store(lds, base + lane, value, self.elem_bytes.min(16)),
            Storage::Regs(_) => unreachable!("handled above"),
        }
    }

    /// The register index of `coord` in a register view.
    fn register(&self, coord: &Coord<Int<'k, 'ctx>>, count: usize) -> Result<usize> {
        let at = self
            .layout
            .crd2idx(coord)
            .map_err(layout_err)?
            .add(&self.base);
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

    fn dwords(&self, op: &'static str) -> Result<u32> {
        if !self.elem_bytes.is_multiple_of(4) || !(4..=16).contains(&self.elem_bytes) {
            return Err(DslError::Operand {
                op,
                rule: format!(
                    "element of {} bytes: vector elements move 4 to 16 bytes (1-4 dwords)",
                    self.elem_bytes
                ),
            });
        }
        Ok(self.elem_bytes / 4)
    }
}

fn layout_err(e: tilegen_layout::LayoutError) -> DslError {
    DslError::Operand {
        op: "layout",
        rule: e.to_string(),
    }
}
