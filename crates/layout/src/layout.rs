//! `Layout`: a hierarchical shape paired with a congruent stride — a function from coordinates to
//! indices.

use std::fmt;

use crate::coord::Coord;
use crate::error::LayoutError;
use crate::int::{Idx, IndexValue};

/// A layout `shape:stride`. Maps a coordinate in `shape` to `sum(coord_i * stride_i)`.
#[derive(Clone, Debug, PartialEq)]
pub struct Layout<T = i64> {
    shape: Coord<T>,
    stride: Coord<T>,
}

/// Renders a coordinate with dynamic leaves shown by their `Debug` form (for error messages,
/// where `T` need not be `Display`).
pub(crate) fn describe<T: fmt::Debug>(c: &Coord<T>) -> String {
    match c {
        Coord::Leaf(Idx::Static(v)) => v.to_string(),
        Coord::Leaf(Idx::Dynamic(v)) => format!("{v:?}"),
        Coord::Tuple(items) => {
            let parts: Vec<String> = items.iter().map(describe).collect();
            format!("({})", parts.join(","))
        }
    }
}

impl<T: IndexValue> Layout<T> {
    /// A layout from a shape and a congruent stride.
    pub fn new(
        shape: impl Into<Coord<T>>,
        stride: impl Into<Coord<T>>,
    ) -> Result<Self, LayoutError> {
        let (shape, stride) = (shape.into(), stride.into());
        if !shape.congruent(&stride) {
            return Err(LayoutError::NotCongruent {
                shape: describe(&shape),
                stride: describe(&stride),
            });
        }
        Ok(Layout { shape, stride })
    }

    /// A one-mode layout `shape:stride`.
    pub fn leaf(shape: impl Into<Idx<T>>, stride: impl Into<Idx<T>>) -> Self {
        Layout {
            shape: Coord::Leaf(shape.into()),
            stride: Coord::Leaf(stride.into()),
        }
    }

    /// Compact column-major (CuTe's LayoutLeft): the first leaf varies fastest.
    pub fn col_major(shape: impl Into<Coord<T>>) -> Self {
        let shape = shape.into();
        let mut running = Idx::Static(1);
        let strides: Vec<Idx<T>> = shape
            .leaves()
            .into_iter()
            .map(|s| {
                let d = running.clone();
                running = running.mul(s);
                d
            })
            .collect();
        let stride = shape.unflatten_like(&mut strides.into_iter());
        Layout { shape, stride }
    }

    /// Compact row-major (CuTe's LayoutRight): the last leaf varies fastest.
    pub fn row_major(shape: impl Into<Coord<T>>) -> Self {
        let shape = shape.into();
        let leaves = shape.leaves();
        let mut strides = vec![Idx::Static(1); leaves.len()];
        let mut running = Idx::Static(1);
        for (i, s) in leaves.iter().enumerate().rev() {
            strides[i] = running.clone();
            running = running.mul(s);
        }
        let stride = shape.unflatten_like(&mut strides.into_iter());
        Layout { shape, stride }
    }

    /// A layout whose top-level modes are the given layouts (CuTe's `make_layout(l0, l1, ...)`).
    pub fn from_modes(modes: Vec<Layout<T>>) -> Self {
        let (shape, stride) = modes.into_iter().map(|l| (l.shape, l.stride)).unzip();
        Layout {
            shape: Coord::Tuple(shape),
            stride: Coord::Tuple(stride),
        }
    }

    /// The shape.
    pub fn shape(&self) -> &Coord<T> {
        &self.shape
    }

    /// The stride.
    pub fn stride(&self) -> &Coord<T> {
        &self.stride
    }

    /// Number of top-level modes.
    pub fn rank(&self) -> usize {
        self.shape.rank()
    }

    /// Nesting depth of the shape.
    pub fn depth(&self) -> usize {
        self.shape.depth()
    }

    /// Number of coordinates in the domain: the product of the shape.
    pub fn size(&self) -> Idx<T> {
        self.shape.product()
    }

    /// One past the largest index the layout produces (for non-negative strides).
    pub fn cosize(&self) -> Idx<T> {
        self.shape
            .leaves()
            .into_iter()
            .zip(self.stride.leaves())
            .fold(Idx::Static(1), |acc, (s, d)| {
                acc.add(&s.sub(&Idx::Static(1)).mul(d))
            })
    }

    /// Top-level mode `i` as a layout.
    pub fn mode(&self, i: usize) -> Result<Layout<T>, LayoutError> {
        match (self.shape.mode(i), self.stride.mode(i)) {
            (Some(s), Some(d)) => Ok(Layout {
                shape: s.clone(),
                stride: d.clone(),
            }),
            _ => Err(LayoutError::ModeOutOfRange {
                mode: i,
                rank: self.rank(),
            }),
        }
    }

    /// All top-level modes as layouts.
    pub fn modes(&self) -> Vec<Layout<T>> {
        self.shape
            .modes()
            .iter()
            .zip(self.stride.modes())
            .map(|(s, d)| Layout {
                shape: s.clone(),
                stride: d.clone(),
            })
            .collect()
    }

    /// The leaves as `(shape, stride)` pairs, depth first.
    pub fn leaf_modes(&self) -> Vec<(Idx<T>, Idx<T>)> {
        self.shape
            .leaves()
            .into_iter()
            .cloned()
            .zip(self.stride.leaves().into_iter().cloned())
            .collect()
    }

    /// The same function with a flat tuple of leaf modes.
    pub fn flatten(&self) -> Layout<T> {
        Layout {
            shape: self.shape.flatten(),
            stride: self.stride.flatten(),
        }
    }

    /// Whether every shape and stride leaf is static.
    pub fn is_static(&self) -> bool {
        self.shape.is_static() && self.stride.is_static()
    }

    /// Whether every shape leaf is static (strides may be run-time values).
    pub fn has_static_shape(&self) -> bool {
        self.shape.is_static()
    }

    /// The index of a coordinate. The coordinate may be hierarchical (congruent with the shape),
    /// or coarser: an integer where the shape has a tuple is split in colexicographic order
    /// (the first sub-mode fastest), so `crd2idx(i)` for an integer `i` is the layout applied to
    /// a 1-D index.
    pub fn crd2idx(&self, coord: &Coord<T>) -> Result<Idx<T>, LayoutError> {
        crd2idx_rec(coord, &self.shape, &self.stride).ok_or_else(|| LayoutError::CoordMismatch {
            coord: describe(coord),
            shape: describe(&self.shape),
        })
    }

    /// The layout applied to a 1-D index in its domain.
    pub fn call(&self, index: impl Into<Idx<T>>) -> Idx<T> {
        let c = Coord::Leaf(index.into());
        crd2idx_rec(&c, &self.shape, &self.stride).expect("an integer fits every shape")
    }

    /// The index of a flat coordinate: one value per leaf of the shape, depth first.
    pub fn crd2idx_flat(&self, coord: &[Idx<T>]) -> Result<Idx<T>, LayoutError> {
        let strides = self.stride.leaves();
        if coord.len() != strides.len() {
            return Err(LayoutError::CoordMismatch {
                coord: format!("{coord:?}"),
                shape: describe(&self.shape),
            });
        }
        Ok(coord
            .iter()
            .zip(strides)
            .fold(Idx::Static(0), |acc, (c, d)| acc.add(&c.mul(d))))
    }

    /// The coordinate (congruent with the shape) that maps to `index`: per leaf
    /// `(index / stride) % shape`, and 0 on stride-0 leaves. Exact for layouts whose leaves nest
    /// (every compact layout and its permutations); for a static index the result is checked and
    /// an index outside the image is an error.
    pub fn idx2crd(&self, index: &Idx<T>) -> Result<Coord<T>, LayoutError> {
        let mut crds = self.leaf_modes().into_iter().map(|(s, d)| {
            if d.is(0) {
                Idx::Static(0)
            } else {
                index.div(&d).rem(&s)
            }
        });
        let coord = self.shape.unflatten_like(&mut crds);
        if index.is_static() && self.is_static() {
            let back = self.crd2idx(&coord)?;
            if back.static_value() != index.static_value() {
                return Err(LayoutError::NotInImage {
                    index: format!("{index:?}"),
                    layout: self.describe(),
                });
            }
        }
        Ok(coord)
    }

    /// Renders like `Display`, with dynamic leaves in their `Debug` form.
    pub fn describe(&self) -> String {
        format!("{}:{}", describe(&self.shape), describe(&self.stride))
    }

    /// The shape's leaves and strides as static `(shape, stride)` pairs, or an error naming `op`.
    pub(crate) fn static_leaf_modes(
        &self,
        op: &'static str,
    ) -> Result<Vec<(i64, i64)>, LayoutError> {
        self.leaf_modes()
            .into_iter()
            .map(|(s, d)| match (s.static_value(), d.static_value()) {
                (Some(s), Some(d)) => Ok((s, d)),
                _ => Err(LayoutError::Dynamic {
                    op,
                    layout: self.describe(),
                }),
            })
            .collect()
    }

    /// A layout from flat `(shape, stride)` modes: a leaf for one mode, `1:0` for none.
    pub(crate) fn from_flat_modes(modes: Vec<(Idx<T>, Idx<T>)>) -> Layout<T> {
        match modes.len() {
            0 => Layout::leaf(1, 0),
            1 => {
                let (s, d) = modes.into_iter().next().expect("one mode");
                Layout::leaf(s, d)
            }
            _ => {
                let (s, d): (Vec<_>, Vec<_>) = modes
                    .into_iter()
                    .map(|(s, d)| (Coord::Leaf(s), Coord::Leaf(d)))
                    .unzip();
                Layout {
                    shape: Coord::Tuple(s),
                    stride: Coord::Tuple(d),
                }
            }
        }
    }
}

fn crd2idx_rec<T: IndexValue>(c: &Coord<T>, s: &Coord<T>, d: &Coord<T>) -> Option<Idx<T>> {
    match (c, s, d) {
        (Coord::Leaf(ci), Coord::Leaf(_), Coord::Leaf(di)) => Some(ci.mul(di)),
        (Coord::Tuple(cs), Coord::Tuple(ss), Coord::Tuple(ds)) if cs.len() == ss.len() => {
            let mut acc = Idx::Static(0);
            for ((ci, si), di) in cs.iter().zip(ss).zip(ds) {
                acc = acc.add(&crd2idx_rec(ci, si, di)?);
            }
            Some(acc)
        }
        // An integer into a tuple: split colexicographically; the last mode takes the rest.
        (Coord::Leaf(ci), Coord::Tuple(ss), Coord::Tuple(ds)) => {
            let mut acc = Idx::Static(0);
            let mut rest = ci.clone();
            let n = ss.len();
            for (i, (si, di)) in ss.iter().zip(ds).enumerate() {
                let sub = if i + 1 == n {
                    rest.clone()
                } else {
                    let size = si.product();
                    let sub = rest.rem(&size);
                    rest = rest.div(&size);
                    sub
                };
                acc = acc.add(&crd2idx_rec(&Coord::Leaf(sub), si, di)?);
            }
            Some(acc)
        }
        // A 1-tuple coordinate addresses a leaf mode.
        (Coord::Tuple(cs), Coord::Leaf(_), Coord::Leaf(_)) if cs.len() == 1 => {
            crd2idx_rec(&cs[0], s, d)
        }
        _ => None,
    }
}

impl<T: IndexValue> Coord<T> {
    /// The natural (colexicographic) coordinate of the 1-D index `index` in this shape: the
    /// first leaf varies fastest, the last top-level mode takes the rest.
    pub fn idx2crd(&self, index: &Idx<T>) -> Coord<T> {
        match self {
            Coord::Leaf(_) => Coord::Leaf(index.clone()),
            Coord::Tuple(modes) => {
                let mut rest = index.clone();
                let n = modes.len();
                Coord::Tuple(
                    modes
                        .iter()
                        .enumerate()
                        .map(|(i, m)| {
                            if i + 1 == n {
                                m.idx2crd(&rest)
                            } else {
                                let size = m.product();
                                let sub = rest.rem(&size);
                                rest = rest.div(&size);
                                m.idx2crd(&sub)
                            }
                        })
                        .collect(),
                )
            }
        }
    }
}

impl<T: fmt::Display> fmt::Display for Layout<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.shape, self.stride)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(shape: impl Into<Coord>, stride: impl Into<Coord>) -> Layout {
        Layout::new(shape, stride).unwrap()
    }

    #[test]
    fn display_uses_shape_colon_stride() {
        assert_eq!(
            l((4, (16, 2)), (1, (4, 64))).to_string(),
            "(4,(16,2)):(1,(4,64))"
        );
        assert_eq!(Layout::<i64>::leaf(8, 2).to_string(), "8:2");
    }

    #[test]
    fn constructors() {
        assert_eq!(
            Layout::<i64>::col_major((4, (16, 2))).to_string(),
            "(4,(16,2)):(1,(4,64))"
        );
        assert_eq!(
            Layout::<i64>::row_major((4, (16, 2))).to_string(),
            "(4,(16,2)):(32,(2,1))"
        );
        assert!(Layout::<i64>::new((4, 2), 1).is_err());
    }

    #[test]
    fn size_cosize_rank_depth() {
        let a = l((4, (16, 2)), (1, (8, 256)));
        assert_eq!(a.size().static_value(), Some(128));
        assert_eq!(a.cosize().static_value(), Some(3 + 15 * 8 + 256 + 1));
        assert_eq!(a.rank(), 2);
        assert_eq!(a.depth(), 2);
    }

    #[test]
    fn crd2idx_profiles() {
        let a = l((4, (16, 2)), (1, (4, 64)));
        let hier = a.crd2idx(&Coord::from((3, (5, 1)))).unwrap();
        assert_eq!(hier.static_value(), Some(3 + 20 + 64));
        // Integer for the tuple mode: 21 = (5, 1) in (16, 2).
        let coarse = a.crd2idx(&Coord::from((3, 21))).unwrap();
        assert_eq!(coarse, hier);
        // 1-D: 3 + 4 * 21.
        assert_eq!(a.call(3 + 4 * 21), hier);
        let flat = a.crd2idx_flat(&[3.into(), 5.into(), 1.into()]).unwrap();
        assert_eq!(flat, hier);
        assert!(a.crd2idx(&Coord::from((1, 2, 3))).is_err());
    }

    #[test]
    fn dynamic_values_compute_and_fold() {
        // Row-major [M, 64] with M only known at run time.
        let a: Layout = Layout::new((Idx::Dynamic(100), 64), (64, 1)).unwrap();
        let i = a.crd2idx(&Coord::from((Idx::Dynamic(7), 5))).unwrap();
        assert_eq!(i, Idx::Dynamic(7 * 64 + 5));
        let s = a.crd2idx(&Coord::from((2, 5))).unwrap();
        assert_eq!(s, Idx::Static(133));
    }

    #[test]
    fn idx2crd_inverts() {
        let a = l((4, 8), (8, 1));
        let c = a.idx2crd(&Idx::Static(13)).unwrap();
        assert_eq!(c, Coord::from((1, 5)));
        let b = l((2, 2), (1, 3));
        assert!(b.idx2crd(&Idx::Static(2)).is_err());
        let shape: Coord = Coord::from((4, (16, 2)));
        assert_eq!(shape.idx2crd(&Idx::Static(87)), Coord::from((3, (5, 1))));
    }
}
