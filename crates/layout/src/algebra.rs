//! The layout algebra: coalesce, composition, complement, divides, products, inverse.
//!
//! Shapes must be static for these operations (they decide the result's structure); composition
//! also accepts run-time strides on its left operand, so a global tensor with a run-time row
//! stride can still be tiled. Definitions follow CuTe's layout algebra.

use crate::coord::Coord;
use crate::error::LayoutError;
use crate::int::{Idx, IndexValue};
use crate::layout::Layout;

/// `a / b` when `b` divides `a`, 1 when `a` divides `b` (CuTe's `shape_div`).
fn shape_div(op: &'static str, a: i64, b: i64) -> Result<i64, LayoutError> {
    if b != 0 && a % b == 0 {
        Ok(a / b)
    } else if a != 0 && b % a == 0 {
        Ok(1)
    } else {
        Err(LayoutError::NotDivisible { op, a, b })
    }
}

impl<T: IndexValue> Layout<T> {
    /// The same function on 1-D indices with the fewest modes: size-1 modes dropped and
    /// adjacent modes merged where `stride[i+1] == shape[i] * stride[i]`. Result is a leaf or a
    /// flat tuple. Run-time strides are merged only when provably contiguous.
    pub fn coalesce(&self) -> Layout<T> {
        let mut out: Vec<(Idx<T>, Idx<T>)> = Vec::new();
        for (s, d) in self.leaf_modes() {
            if s.is(1) {
                continue;
            }
            if let Some((ps, pd)) = out.last_mut() {
                let contiguous = match (ps.static_value(), pd.static_value(), d.static_value()) {
                    (Some(ps), Some(pd), Some(d)) => d == ps * pd,
                    _ => false,
                };
                if contiguous {
                    *ps = ps.mul(&s);
                    continue;
                }
            }
            out.push((s, d));
        }
        Layout::from_flat_modes(out)
    }

    /// Coalesce each top-level mode separately, keeping the rank (CuTe's by-mode coalesce).
    pub fn coalesce_modes(&self) -> Layout<T> {
        if self.shape().is_leaf() {
            return self.coalesce();
        }
        Layout::from_modes(self.modes().iter().map(Layout::coalesce).collect())
    }

    /// `self ∘ rhs`: the layout `R` with `R(c) = self(rhs(c))` for every coordinate `c` of `rhs`;
    /// `R` has `rhs`'s shape profile. `self`'s shape and all of `rhs` must be static.
    pub fn compose(&self, rhs: &Layout<T>) -> Result<Layout<T>, LayoutError> {
        match (rhs.shape(), rhs.stride()) {
            (Coord::Tuple(_), _) => Ok(Layout::from_modes(
                rhs.modes()
                    .iter()
                    .map(|m| self.compose(m))
                    .collect::<Result<_, _>>()?,
            )),
            (Coord::Leaf(s), Coord::Leaf(d)) => {
                let (Some(s), Some(d)) = (s.static_value(), d.static_value()) else {
                    return Err(LayoutError::Dynamic {
                        op: "composition (right operand)",
                        layout: rhs.describe(),
                    });
                };
                self.compose_leaf(s, d)
            }
            _ => unreachable!("layouts are congruent by construction"),
        }
    }

    fn compose_leaf(&self, s: i64, d: i64) -> Result<Layout<T>, LayoutError> {
        const OP: &str = "composition";
        if s < 0 || d < 0 {
            return Err(LayoutError::Negative {
                op: OP,
                what: "shape or stride",
                value: s.min(d),
            });
        }
        if d == 0 {
            return Ok(Layout::leaf(s, 0));
        }
        // Only the shapes of all but the last mode matter: the last mode extends without bound,
        // so a run-time extent there (e.g. a dynamic row count) is fine.
        let modes = self.coalesce().leaf_modes();
        let last_mode = modes.len() - 1;
        let flat: Vec<(i64, Idx<T>)> = modes
            .into_iter()
            .enumerate()
            .map(|(i, (s, d))| match s.static_value() {
                Some(s) => Ok((s, d)),
                None if i == last_mode => Ok((i64::MAX, d)),
                None => Err(LayoutError::Dynamic {
                    op: OP,
                    layout: self.describe(),
                }),
            })
            .collect::<Result<_, _>>()?;
        // Divide out the stride: skip the first `d` elements' worth of modes.
        let mut rest_stride = d;
        let mut divided: Vec<(i64, Idx<T>)> = Vec::new();
        let last = flat.len() - 1;
        for (i, (si, di)) in flat.iter().enumerate() {
            if i == last {
                // The last mode extends without bound.
                divided.push((i64::MAX, di.mul(&Idx::Static(rest_stride))));
                break;
            }
            let new_shape = shape_div(OP, *si, rest_stride)?;
            let new_stride = di.mul(&Idx::Static(rest_stride));
            rest_stride = shape_div(OP, rest_stride, *si)?;
            if new_shape != 1 {
                divided.push((new_shape, new_stride));
            }
        }
        // Mod out the shape: keep the first `s` elements.
        let mut rest_shape = s;
        let mut out: Vec<(Idx<T>, Idx<T>)> = Vec::new();
        for (si, di) in divided {
            if rest_shape == 1 {
                break;
            }
            if si == i64::MAX {
                out.push((Idx::Static(rest_shape), di));
                break;
            }
            let take = if rest_shape % si == 0 {
                si
            } else if si % rest_shape == 0 {
                rest_shape
            } else {
                return Err(LayoutError::NotDivisible {
                    op: OP,
                    a: rest_shape,
                    b: si,
                });
            };
            out.push((Idx::Static(take), di));
            rest_shape /= take;
        }
        // `out` is empty only for `s == 1`, which `from_flat_modes` renders as `1:0`.
        Ok(Layout::from_flat_modes(out))
    }

    /// The complement of `self` in `[0, cotarget)`: a layout `C` with increasing strides such that
    /// `(self, C)` is injective and covers at least `cotarget` indices. `self` must be static and
    /// injective with nesting strides.
    pub fn complement(&self, cotarget: i64) -> Result<Layout<T>, LayoutError> {
        const OP: &str = "complement";
        let mut modes: Vec<(i64, i64)> = self
            .coalesce()
            .static_leaf_modes(OP)?
            .into_iter()
            .filter(|&(s, d)| s != 1 && d != 0)
            .collect();
        if let Some(&(s, d)) = modes.iter().find(|&&(s, d)| s < 0 || d < 0) {
            return Err(LayoutError::Negative {
                op: OP,
                what: "shape or stride",
                value: s.min(d),
            });
        }
        modes.sort_by_key(|&(s, d)| (d, s));
        let mut out: Vec<(Idx<T>, Idx<T>)> = Vec::new();
        let mut cur = 1i64;
        for (s, d) in modes {
            if d % cur != 0 {
                return Err(LayoutError::NotComplementable {
                    layout: self.describe(),
                    stride: d,
                    expected: cur,
                });
            }
            out.push((Idx::Static(d / cur), Idx::Static(cur)));
            cur = s * d;
        }
        let tail = (cotarget + cur - 1) / cur;
        out.push((Idx::Static(tail.max(1)), Idx::Static(cur)));
        Ok(Layout::from_flat_modes(out).coalesce())
    }

    /// `self` divided by `tiler`: `self ∘ (tiler, complement(tiler, size(self)))`. Mode 0 of the
    /// result walks one tile, mode 1 walks the tiles.
    pub fn logical_divide(&self, tiler: &Layout<T>) -> Result<Layout<T>, LayoutError> {
        let size = static_size(self, "logical_divide")?;
        let rest = tiler.complement(size)?;
        self.compose(&Layout::from_modes(vec![tiler.clone(), rest]))
    }

    /// Divide top-level mode `i` of `self` by `tilers[i]` (modes without a tiler are kept).
    /// Result mode `i` is `(tile_i, rest_i)`.
    pub fn logical_divide_modes(&self, tilers: &[Layout<T>]) -> Result<Layout<T>, LayoutError> {
        self.check_tiler_rank(tilers.len())?;
        let modes = self
            .modes()
            .into_iter()
            .enumerate()
            .map(|(i, m)| match tilers.get(i) {
                Some(t) => m.logical_divide(t),
                None => Ok(m),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Layout::from_modes(modes))
    }

    /// Divide mode-wise and gather: `((tile_0, tile_1, ..), (rest_0, rest_1, ..))`. Mode 0 is one
    /// tile, mode 1 indexes the tiles.
    pub fn zipped_divide(&self, tilers: &[Layout<T>]) -> Result<Layout<T>, LayoutError> {
        let divided = self.logical_divide_modes(tilers)?;
        let mut tiles = Vec::new();
        let mut rests = Vec::new();
        for (i, m) in divided.modes().into_iter().enumerate() {
            if i < tilers.len() {
                tiles.push(m.mode(0)?);
                rests.push(m.mode(1)?);
            } else {
                rests.push(m);
            }
        }
        Ok(Layout::from_modes(vec![
            Layout::from_modes(tiles),
            Layout::from_modes(rests),
        ]))
    }

    /// Like [`Layout::zipped_divide`] but with the rest modes unpacked:
    /// `((tile_0, tile_1, ..), rest_0, rest_1, ..)`.
    pub fn tiled_divide(&self, tilers: &[Layout<T>]) -> Result<Layout<T>, LayoutError> {
        let z = self.zipped_divide(tilers)?;
        let mut modes = vec![z.mode(0)?];
        modes.extend(z.mode(1)?.modes());
        Ok(Layout::from_modes(modes))
    }

    fn check_tiler_rank(&self, n: usize) -> Result<(), LayoutError> {
        if n > self.rank() {
            return Err(LayoutError::ModeOutOfRange {
                mode: n - 1,
                rank: self.rank(),
            });
        }
        Ok(())
    }

    /// `(self, complement(self, size(self) * cosize(rhs)) ∘ rhs)`: `rhs` copies of `self`
    /// arranged by `rhs`. Both must be static.
    pub fn logical_product(&self, rhs: &Layout<T>) -> Result<Layout<T>, LayoutError> {
        let size = static_size(self, "logical_product")?;
        let cosize = rhs
            .cosize()
            .static_value()
            .ok_or_else(|| LayoutError::Dynamic {
                op: "logical_product",
                layout: rhs.describe(),
            })?;
        let rest = self.complement(size * cosize)?.compose(rhs)?;
        Ok(Layout::from_modes(vec![self.clone(), rest]))
    }

    /// Mode-wise product with `self` inner: result mode `i` is `(self_i, rhs_i')`, so each tile of
    /// `self` stays contiguous (CuTe's `blocked_product`). Ranks are padded with `1:0`.
    pub fn blocked_product(&self, rhs: &Layout<T>) -> Result<Layout<T>, LayoutError> {
        self.rankwise_product(rhs, false)
    }

    /// Mode-wise product with `rhs` inner: result mode `i` is `(rhs_i', self_i)`, interleaving
    /// the copies of `self` (CuTe's `raked_product`).
    pub fn raked_product(&self, rhs: &Layout<T>) -> Result<Layout<T>, LayoutError> {
        self.rankwise_product(rhs, true)
    }

    fn rankwise_product(&self, rhs: &Layout<T>, raked: bool) -> Result<Layout<T>, LayoutError> {
        let rank = self.rank().max(rhs.rank());
        let pad = |l: &Layout<T>| {
            let mut m = l.modes();
            m.resize(rank, Layout::leaf(1, 0));
            Layout::from_modes(m)
        };
        let (a, b) = (pad(self), pad(rhs));
        let prod = a.logical_product(&b)?;
        let inner = prod.mode(0)?;
        let outer = prod.mode(1)?;
        let modes = (0..rank)
            .map(|i| {
                let (x, y) = (inner.mode(i)?, outer.mode(i)?);
                Ok(if raked {
                    Layout::from_modes(vec![y, x])
                } else {
                    Layout::from_modes(vec![x, y])
                })
            })
            .collect::<Result<Vec<_>, LayoutError>>()?;
        Ok(Layout::from_modes(modes))
    }

    /// The largest layout `R` with `self(R(i)) == i` for every `i < size(R)`. `self` must be
    /// static.
    pub fn right_inverse(&self) -> Result<Layout<T>, LayoutError> {
        let flat = self.coalesce().static_leaf_modes("right_inverse")?;
        // Column-major position of each mode in the domain.
        let mut position = Vec::with_capacity(flat.len());
        let mut running = 1i64;
        for &(s, _) in &flat {
            position.push(running);
            running *= s;
        }
        let mut order: Vec<usize> = (0..flat.len()).filter(|&i| flat[i].1 > 0).collect();
        order.sort_by_key(|&i| flat[i].1);
        let mut out: Vec<(Idx<T>, Idx<T>)> = Vec::new();
        let mut cur = 1i64;
        for i in order {
            let (s, d) = flat[i];
            if d != cur {
                break;
            }
            out.push((Idx::Static(s), Idx::Static(position[i])));
            cur = s * d;
        }
        Ok(Layout::from_flat_modes(out).coalesce())
    }
}

fn static_size<T: IndexValue>(l: &Layout<T>, op: &'static str) -> Result<i64, LayoutError> {
    l.size().static_value().ok_or_else(|| LayoutError::Dynamic {
        op,
        layout: l.describe(),
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    fn l(shape: impl Into<Coord>, stride: impl Into<Coord>) -> Layout {
        Layout::new(shape, stride).unwrap()
    }

    fn eval(layout: &Layout, i: i64) -> i64 {
        layout.call(i).static_value().unwrap()
    }

    #[test]
    fn coalesce_examples() {
        assert_eq!(l((2, (1, 6)), (1, (7, 2))).coalesce().to_string(), "12:1");
        assert_eq!(l((4, 8), (8, 1)).coalesce().to_string(), "(4,8):(8,1)");
        assert_eq!(l((1, 1), (3, 5)).coalesce().to_string(), "1:0");
        assert_eq!(
            l(((4, 2), (2, 3)), ((1, 4), (16, 32)))
                .coalesce_modes()
                .to_string(),
            "(8,6):(1,16)"
        );
    }

    #[test]
    fn composition_examples() {
        // Known results from CuTe's documentation.
        let a = l((6, 2), (8, 2));
        let b = l((4, 3), (3, 1));
        assert_eq!(a.compose(&b).unwrap().to_string(), "((2,2),3):((24,2),8)");
        let a = l(20, 2);
        let b = l((4, 5), (1, 4));
        assert_eq!(a.compose(&b).unwrap().to_string(), "(4,5):(2,8)");
        let a = l((10, 2), (16, 4));
        let b = l((5, 4), (1, 5));
        assert_eq!(a.compose(&b).unwrap().to_string(), "(5,(2,2)):(16,(80,4))");
        // (4,3):(1,4) is contiguous, so any prefix composes; (4,3):(1,5) is not and 6 does not
        // split into its modes.
        assert_eq!(
            l((4, 3), (1, 4)).compose(&l(6, 1)).unwrap().to_string(),
            "6:1"
        );
        assert!(l((4, 3), (1, 5)).compose(&l(6, 1)).is_err());
    }

    #[test]
    fn composition_with_runtime_stride() {
        // Row-major [8, ld] with a run-time leading dimension, tiled 2 rows at a time.
        let a: Layout = Layout::new((8, 64), (Idx::Dynamic(100), 1)).unwrap();
        let r = a.compose(&l((2, 4), (1, 2))).unwrap();
        assert_eq!(r.call(3), Idx::Dynamic(300));
        assert_eq!(r.call(5), Idx::Dynamic(300 + 200));
    }

    #[test]
    fn composition_with_runtime_extent_in_last_mode() {
        // Rows of a [M, 64] row-major matrix with M known only at run time, 16 at a time.
        let a: Layout = Layout::new((Idx::Dynamic(1000), 64), (64, 1)).unwrap();
        let rows = a.mode(0).unwrap().compose(&l(16, 1)).unwrap();
        assert_eq!(rows.to_string(), "16:64");
        // A run-time extent before the last mode cannot be divided through.
        let b: Layout = Layout::new((Idx::Dynamic(8), 64), (1, 8)).unwrap();
        assert!(matches!(
            b.compose(&l(16, 1)),
            Err(LayoutError::Dynamic { .. })
        ));
    }

    #[test]
    fn complement_examples() {
        assert_eq!(l(4, 1).complement(24).unwrap().to_string(), "6:4");
        assert_eq!(l(6, 4).complement(24).unwrap().to_string(), "4:1");
        assert_eq!(l((4, 6), (1, 4)).complement(24).unwrap().to_string(), "1:0");
        assert_eq!(
            l((2, 2), (1, 6)).complement(24).unwrap().to_string(),
            "(3,2):(2,12)"
        );
        assert!(l((2, 2), (1, 1)).complement(8).is_err());
    }

    #[test]
    fn divide_examples() {
        let a = l((4, 2, 3), (2, 1, 8));
        let t = l(4, 2);
        assert_eq!(
            a.logical_divide(&t).unwrap().to_string(),
            "((2,2),(2,3)):((4,1),(2,8))"
        );
        // 2-D tiling of an 8x8 column-major matrix into 2x4 tiles.
        let m = Layout::<i64>::col_major((8, 8));
        let z = m.zipped_divide(&[l(2, 1), l(4, 1)]).unwrap();
        assert_eq!(z.to_string(), "((2,4),(4,2)):((1,8),(2,32))");
        let t = m.tiled_divide(&[l(2, 1), l(4, 1)]).unwrap();
        assert_eq!(t.to_string(), "((2,4),4,2):((1,8),2,32)");
    }

    #[test]
    fn product_examples() {
        let a = l((2, 2), (4, 1));
        let b = l(6, 1);
        assert_eq!(
            a.logical_product(&b).unwrap().to_string(),
            "((2,2),(2,3)):((4,1),(2,8))"
        );
        let tile = Layout::<i64>::col_major((2, 2));
        let grid = Layout::<i64>::col_major((3, 4));
        assert_eq!(
            tile.blocked_product(&grid).unwrap().to_string(),
            "((2,3),(2,4)):((1,4),(2,12))"
        );
        assert_eq!(
            tile.raked_product(&grid).unwrap().to_string(),
            "((3,2),(4,2)):((4,1),(12,2))"
        );
    }

    #[test]
    fn right_inverse_examples() {
        assert_eq!(
            l((4, 8), (8, 1)).right_inverse().unwrap().to_string(),
            "(8,4):(4,1)"
        );
        assert_eq!(
            l((2, 4), (4, 1)).right_inverse().unwrap().to_string(),
            "(4,2):(2,1)"
        );
        // Not starting at stride 1: only the trivial inverse.
        assert_eq!(l(4, 2).right_inverse().unwrap().to_string(), "1:0");
    }

    /// A random static shape of 1..=3 top-level modes, some nested, leaves in 1..=6.
    fn shape() -> impl Strategy<Value = Coord> {
        let leaf = (1i64..=6).prop_map(Coord::int);
        let mode = prop_oneof![
            3 => leaf.clone(),
            1 => prop::collection::vec(leaf, 2..=3).prop_map(Coord::Tuple),
        ];
        prop::collection::vec(mode, 1..=3).prop_map(Coord::Tuple)
    }

    /// Like [`shape`] with power-of-two leaves, for which every division in the algebra is exact.
    fn pow2_shape() -> impl Strategy<Value = Coord> {
        let leaf = (0u32..=3).prop_map(|e| Coord::int(1i64 << e));
        let mode = prop_oneof![
            3 => leaf.clone(),
            1 => prop::collection::vec(leaf, 2..=3).prop_map(Coord::Tuple),
        ];
        prop::collection::vec(mode, 1..=3).prop_map(Coord::Tuple)
    }

    /// A compact layout: a random permutation of the column-major strides of `shape`.
    fn compact() -> impl Strategy<Value = Layout> {
        permuted(shape())
    }

    /// A compact layout with power-of-two leaves.
    pub(crate) fn pow2_compact() -> impl Strategy<Value = Layout> {
        permuted(pow2_shape())
    }

    fn permuted(shape: impl Strategy<Value = Coord>) -> impl Strategy<Value = Layout> {
        shape
            .prop_flat_map(|s| {
                let n = s.leaves().len();
                (Just(s), Just((0..n).collect::<Vec<_>>()).prop_shuffle())
            })
            .prop_map(|(s, perm)| {
                let leaves = s.static_leaves().unwrap();
                let mut strides = vec![0i64; leaves.len()];
                let mut running = 1;
                for &p in &perm {
                    strides[p] = running;
                    running *= leaves[p];
                }
                let stride = s.unflatten_like(&mut strides.into_iter().map(Idx::Static));
                Layout::new(s, stride).unwrap()
            })
    }

    proptest! {
        #[test]
        fn compact_layouts_are_bijections(a in compact()) {
            let n = a.size().static_value().unwrap();
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let j = eval(&a, i);
                prop_assert!(j >= 0 && j < n && !seen[j as usize]);
                seen[j as usize] = true;
            }
            prop_assert_eq!(a.cosize().static_value(), Some(n));
            let inv = a.right_inverse().unwrap();
            prop_assert_eq!(inv.size().static_value(), Some(n));
            for i in 0..n {
                prop_assert_eq!(eval(&a, eval(&inv, i)), i);
                let c = a.idx2crd(&Idx::Static(i)).unwrap();
                prop_assert_eq!(a.crd2idx(&c).unwrap().static_value(), Some(i));
            }
        }

        #[test]
        fn coalesce_preserves_function(a in compact(), stride_scale in 1i64..=3) {
            let scaled = Layout::new(
                a.shape().clone(),
                a.stride().map(&mut |d| Idx::Static(d.static_value().unwrap() * stride_scale)),
            ).unwrap();
            let c = scaled.coalesce();
            prop_assert_eq!(c.size().static_value(), scaled.size().static_value());
            prop_assert!(c.depth() <= 1);
            for i in 0..scaled.size().static_value().unwrap() {
                prop_assert_eq!(eval(&c, i), eval(&scaled, i));
            }
        }

        #[test]
        fn composition_is_function_composition(a in pow2_compact(), b in pow2_compact()) {
            let sa = a.size().static_value().unwrap();
            // `b` must map into `a`'s domain; power-of-two extents always divide one another.
            prop_assume!(b.cosize().static_value().unwrap() <= sa);
            let r = a.compose(&b).unwrap();
            prop_assert_eq!(r.rank(), b.rank());
            prop_assert_eq!(r.size().static_value(), b.size().static_value());
            for i in 0..b.size().static_value().unwrap() {
                prop_assert_eq!(eval(&r, i), eval(&a, eval(&b, i)));
            }
        }

        #[test]
        fn composition_succeeds_or_names_the_rule(a in compact(), b in compact()) {
            prop_assume!(b.cosize().static_value().unwrap() <= a.size().static_value().unwrap());
            match a.compose(&b) {
                Ok(r) => {
                    for i in 0..b.size().static_value().unwrap() {
                        prop_assert_eq!(eval(&r, i), eval(&a, eval(&b, i)));
                    }
                }
                Err(e) => {
                    let divisibility = matches!(e, LayoutError::NotDivisible { .. });
                    prop_assert!(divisibility, "unexpected error {}", e);
                }
            }
        }

        #[test]
        fn complement_invariants(a in compact(), extra in 1i64..=4) {
            // Scale strides so `a` leaves holes the complement must fill.
            let scaled = Layout::new(
                a.shape().clone(),
                a.stride().map(&mut |d| Idx::Static(d.static_value().unwrap() * extra)),
            ).unwrap();
            let target = scaled.cosize().static_value().unwrap() * extra;
            let c = scaled.complement(target).unwrap();
            // Strides of the complement increase.
            let cm = c.static_leaf_modes("test").unwrap();
            prop_assert!(cm.windows(2).all(|w| w[0].1 < w[1].1));
            // (a, c) is injective and covers the target.
            let joint = Layout::from_modes(vec![scaled.clone(), c.clone()]);
            let n = joint.size().static_value().unwrap();
            prop_assert!(n >= target);
            let mut seen = std::collections::HashSet::new();
            for i in 0..n {
                prop_assert!(seen.insert(eval(&joint, i)));
            }
        }

        #[test]
        fn logical_divide_tiles_partition_the_layout(a in pow2_compact(), t in 1usize..=3) {
            let n = a.size().static_value().unwrap();
            let tile = [1i64, 2, 4][t - 1];
            prop_assume!(n % tile == 0);
            let d = a.logical_divide(&Layout::leaf(tile, 1)).unwrap();
            prop_assert_eq!(d.size().static_value(), Some(n));
            // Mode 0 steps within a tile, mode 1 across tiles: together they are `a` reordered as
            // a composition with a bijection of its domain.
            let mut seen = std::collections::HashSet::new();
            for i in 0..n {
                prop_assert!(seen.insert(eval(&d, i)));
            }
            for j in 0..tile {
                prop_assert_eq!(eval(&d, j), eval(&a, j));
            }
        }
    }
}
