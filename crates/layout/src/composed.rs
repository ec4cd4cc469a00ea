//! Swizzled layouts: [`ComposedLayout`] is a swizzle applied after a layout (CuTe's
//! `composition(Swizzle, Layout)`), and [`OffsetMap`] is the coordinate-to-offset surface it
//! shares with [`Layout`], so tile views can take either.

use std::fmt;

use crate::coord::Coord;
use crate::error::LayoutError;
use crate::int::{Idx, IndexValue};
use crate::layout::{Layout, describe};
use crate::swizzle::{SwizzleChain, SwizzleError};

/// A function from coordinates to offsets: what a tile view needs from its layout.
pub trait OffsetMap<T: IndexValue = i64> {
    /// The shape of the domain.
    fn shape(&self) -> &Coord<T>;

    /// Number of coordinates in the domain: the product of the shape.
    fn size(&self) -> Idx<T> {
        self.shape().product()
    }

    /// One past the largest offset of the linear layout (for a swizzled layout, see
    /// [`ComposedLayout::cosize`]).
    fn cosize(&self) -> Idx<T>;

    /// The offset of a coordinate, hierarchical or coarser (as [`Layout::crd2idx`]).
    fn crd2idx(&self, coord: &Coord<T>) -> Result<Idx<T>, LayoutError>;
}

impl<T: IndexValue> OffsetMap<T> for Layout<T> {
    fn shape(&self) -> &Coord<T> {
        Layout::shape(self)
    }
    fn size(&self) -> Idx<T> {
        Layout::size(self)
    }
    fn cosize(&self) -> Idx<T> {
        Layout::cosize(self)
    }
    fn crd2idx(&self, coord: &Coord<T>) -> Result<Idx<T>, LayoutError> {
        Layout::crd2idx(self, coord)
    }
}

/// `swizzle ∘ offset ∘ layout`: coordinate `c` maps to `swizzle(offset + layout(c))`.
///
/// The offset sits inside the swizzle because a swizzle is not linear: a tile of a swizzled
/// buffer must swizzle its absolute position, so tiling moves the tile origin into `offset`
/// (see [`translate`](Self::translate)) rather than adding it afterwards.
///
/// A half-precision tile of 8 rows by 64 elements (128-byte rows) with `Sw<3,3,3>`: 8-element
/// chunks (`M = 3`), chunk `j` of row `r` stored at chunk `j ^ (r % 8)`:
///
/// ```
/// use tilegen_layout::{ComposedLayout, Coord, Layout, Swizzle};
/// let tile: ComposedLayout =
///     ComposedLayout::new(Swizzle::new(3, 3, 3)?, 0, Layout::row_major((8, 64)))?;
/// assert_eq!(tile.to_string(), "Sw<3,3,3> o 0 o (8,64):(64,1)");
/// // Row 3, element 10 = chunk 1 + 2 -> chunk 1 ^ 3 = 2: 3 * 64 + 2 * 8 + 2.
/// assert_eq!(tile.crd2idx(&Coord::from((3, 10)))?.static_value(), Some(210));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone, Debug, PartialEq)]
pub struct ComposedLayout<T = i64> {
    swizzle: SwizzleChain,
    offset: Idx<T>,
    layout: Layout<T>,
}

impl<T: IndexValue> ComposedLayout<T> {
    /// `swizzle ∘ offset ∘ layout`. `swizzle` is a [`Swizzle`](crate::Swizzle) or a
    /// [`SwizzleChain`]; it must fit the index type `T` (a 32-bit device index refuses a swizzle
    /// reaching bit 31).
    pub fn new(
        swizzle: impl Into<SwizzleChain>,
        offset: impl Into<Idx<T>>,
        layout: Layout<T>,
    ) -> Result<Self, SwizzleError> {
        let swizzle = swizzle.into();
        swizzle.check_index::<T>()?;
        Ok(ComposedLayout {
            swizzle,
            offset: offset.into(),
            layout,
        })
    }

    /// The swizzle, applied last.
    pub fn swizzle(&self) -> &SwizzleChain {
        &self.swizzle
    }

    /// The offset added to the layout's result before the swizzle.
    pub fn offset(&self) -> &Idx<T> {
        &self.offset
    }

    /// The linear layout, applied first.
    pub fn layout(&self) -> &Layout<T> {
        &self.layout
    }

    /// The layout's shape.
    pub fn shape(&self) -> &Coord<T> {
        self.layout.shape()
    }

    /// Number of top-level modes.
    pub fn rank(&self) -> usize {
        self.layout.rank()
    }

    /// The layout's size.
    pub fn size(&self) -> Idx<T> {
        self.layout.size()
    }

    /// The layout's cosize, as CuTe reports it. The swizzled offsets stay below it when the
    /// layout is compact, `offset` is 0 and the cosize is a multiple of the swizzle's block;
    /// otherwise size buffers with [`footprint`](Self::footprint).
    pub fn cosize(&self) -> Idx<T> {
        self.layout.cosize()
    }

    /// One past any offset this layout can produce (for a non-negative offset and strides):
    /// `offset + cosize` rounded up to the swizzle's block, since a swizzle moves an offset only
    /// within its aligned block.
    pub fn footprint(&self) -> Idx<T> {
        let block = self.swizzle.block();
        self.offset
            .add(&self.layout.cosize())
            .add(&Idx::Static(block - 1))
            .div(&Idx::Static(block))
            .mul(&Idx::Static(block))
    }

    /// `swizzle(offset + layout(coord))`; the coordinate's profile is as [`Layout::crd2idx`].
    pub fn crd2idx(&self, coord: &Coord<T>) -> Result<Idx<T>, LayoutError> {
        Ok(self.finish(&self.layout.crd2idx(coord)?))
    }

    /// [`crd2idx`](Self::crd2idx) of a flat coordinate: one value per leaf of the shape.
    pub fn crd2idx_flat(&self, coord: &[Idx<T>]) -> Result<Idx<T>, LayoutError> {
        Ok(self.finish(&self.layout.crd2idx_flat(coord)?))
    }

    /// The composed function at a 1-D index of the domain.
    pub fn call(&self, index: impl Into<Idx<T>>) -> Idx<T> {
        self.finish(&self.layout.call(index))
    }

    fn finish(&self, linear: &Idx<T>) -> Idx<T> {
        self.swizzle.apply_idx(&self.offset.add(linear))
    }

    /// `self ∘ rhs`: the swizzle and offset over `layout ∘ rhs` (CuTe composes a tiler into the
    /// inner layout). Rules and errors as [`Layout::compose`].
    pub fn compose(&self, rhs: &Layout<T>) -> Result<ComposedLayout<T>, LayoutError> {
        Ok(ComposedLayout {
            swizzle: self.swizzle.clone(),
            offset: self.offset.clone(),
            layout: self.layout.compose(rhs)?,
        })
    }

    /// The same layout over a buffer moved by `delta` before swizzling: the offset becomes
    /// `offset + delta`. A tile at `origin` is `self.compose(tiler)?.translate(&origin_offset)`
    /// with `origin_offset = self.layout().crd2idx(origin)?`.
    pub fn translate(&self, delta: &Idx<T>) -> ComposedLayout<T> {
        ComposedLayout {
            swizzle: self.swizzle.clone(),
            offset: self.offset.add(delta),
            layout: self.layout.clone(),
        }
    }

    /// Renders like `Display`, with dynamic values in their `Debug` form.
    pub fn describe(&self) -> String {
        format!(
            "{} o {} o {}",
            self.swizzle,
            describe(&Coord::Leaf(self.offset.clone())),
            self.layout.describe()
        )
    }
}

impl<T: IndexValue> OffsetMap<T> for ComposedLayout<T> {
    fn shape(&self) -> &Coord<T> {
        ComposedLayout::shape(self)
    }
    fn size(&self) -> Idx<T> {
        ComposedLayout::size(self)
    }
    fn cosize(&self) -> Idx<T> {
        ComposedLayout::cosize(self)
    }
    fn crd2idx(&self, coord: &Coord<T>) -> Result<Idx<T>, LayoutError> {
        ComposedLayout::crd2idx(self, coord)
    }
}

impl<T: fmt::Display> fmt::Display for ComposedLayout<T> {
    /// CuTe's form: `Sw<3,4,3> o 0 o (8,64):(64,1)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} o {} o {}", self.swizzle, self.offset, self.layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algebra::tests::pow2_compact;
    use crate::swizzle::Swizzle;
    use crate::swizzle::tests::Expr;
    use proptest::prelude::*;

    fn sw(b: u32, m: u32, s: i32) -> Swizzle {
        Swizzle::new(b, m, s).unwrap()
    }

    fn at(l: &impl OffsetMap, c: impl Into<Coord>) -> i64 {
        value(l.crd2idx(&c.into()).unwrap())
    }

    fn value(i: Idx<i64>) -> i64 {
        match i {
            Idx::Static(v) | Idx::Dynamic(v) => v,
        }
    }

    #[test]
    fn half_tile_with_sw_3_3_3() {
        // 8 x 64 halves, row-major: element (r, c) is chunk c / 8 of row r; Sw<3,3,3> stores it
        // at chunk (c / 8) ^ r, keeping c % 8.
        let halves = ComposedLayout::new(sw(3, 3, 3), 0, Layout::row_major((8, 64))).unwrap();
        for r in 0..8 {
            for c in 0..64 {
                assert_eq!(at(&halves, (r, c)), r * 64 + ((c / 8) ^ r) * 8 + c % 8);
            }
        }
        // The same tile in bytes (128-byte rows) is Sw<3,4,3>: every bit one place up, so the
        // byte offset of half (r, c) is twice its element offset.
        let bytes = ComposedLayout::new(sw(3, 4, 3), 0, Layout::row_major((8, 128))).unwrap();
        for r in 0..8 {
            for c in 0..64 {
                assert_eq!(at(&bytes, (r, 2 * c)), 2 * at(&halves, (r, c)));
            }
        }
        assert_eq!(bytes.to_string(), "Sw<3,4,3> o 0 o (8,128):(128,1)");
        assert_eq!(value(bytes.cosize()), 1024);
        assert_eq!(value(bytes.footprint()), 1024);
        // 1-D and flat coordinates agree with the hierarchical one: 3 * 128 + 20 = chunk 1 of
        // row 3 -> chunk 2, so 384 + 32 + 4.
        assert_eq!(value(bytes.call(3 + 8 * 20)), 420);
        assert_eq!(
            value(bytes.crd2idx_flat(&[3.into(), 20.into()]).unwrap()),
            420
        );
        assert!(bytes.crd2idx(&Coord::from((1, 2, 3))).is_err());
    }

    #[test]
    fn offset_is_inside_the_swizzle() {
        let tile = Layout::row_major((8, 128));
        // An offset of one whole block (1024) moves every result by the block.
        let one = ComposedLayout::new(sw(3, 4, 3), 1024, tile.clone()).unwrap();
        let zero = ComposedLayout::new(sw(3, 4, 3), 0, tile.clone()).unwrap();
        assert_eq!(at(&one, (5, 37)), 1024 + at(&zero, (5, 37)));
        // An offset of one row changes which row bits the swizzle sees: row 0 chunk 0 at 128 is
        // row 1 of the buffer, so it lands on chunk 1.
        let shifted = ComposedLayout::new(sw(3, 4, 3), 128, tile).unwrap();
        assert_eq!(at(&shifted, (0, 0)), 144);
        assert_eq!(shifted.to_string(), "Sw<3,4,3> o 128 o (8,128):(128,1)");
    }

    #[test]
    fn tiles_of_a_swizzled_buffer() {
        let full = ComposedLayout::new(sw(3, 4, 3), 0, Layout::row_major((16, 128))).unwrap();
        // The 4 x 32 tile (1, 1): compose with a tiler over the 1-D (column-major) domain of
        // the layout (row r, column c is r + 16 c), then move to its origin (4, 32).
        let tiler = Layout::new((4, 32), (1, 16)).unwrap();
        let origin = full.layout().crd2idx(&Coord::from((4, 32))).unwrap();
        let tile = full.compose(&tiler).unwrap().translate(&origin);
        assert_eq!(tile.to_string(), "Sw<3,4,3> o 544 o (4,32):(128,1)");
        for r in 0..4 {
            for c in 0..32 {
                assert_eq!(at(&tile, (r, c)), at(&full, (4 + r, 32 + c)));
            }
        }
    }

    #[test]
    fn footprint_bounds_an_unaligned_layout() {
        // Sw<1,0,-3> sends 1 to 1 ^ 8 = 9, past the layout's cosize of 2; the footprint rounds
        // up to the 16-offset block.
        let l = ComposedLayout::new(sw(1, 0, -3), 0, Layout::leaf(2, 1)).unwrap();
        assert_eq!(
            (at(&l, 1), value(l.cosize()), value(l.footprint())),
            (9, 2, 16)
        );
        // The identity rounds nothing.
        let id =
            ComposedLayout::new(SwizzleChain::identity(), 3, Layout::<i64>::leaf(5, 2)).unwrap();
        assert_eq!(value(id.footprint()), 3 + 9);
        assert_eq!(id.to_string(), "Sw<0,0,0> o 3 o 5:2");
    }

    #[test]
    fn two_xor_chain() {
        // Sw<3,4,3> and then Sw<1,3,4> (bit 7 into bit 3): a chain over 16 rows of 128 bytes.
        let chain = sw(3, 4, 3).then(sw(1, 3, 4));
        let l = ComposedLayout::new(chain.clone(), 0, Layout::row_major((16, 128))).unwrap();
        assert_eq!(
            l.to_string(),
            "Sw<1,3,4> o Sw<3,4,3> o 0 o (16,128):(128,1)"
        );
        for r in 0..16 {
            for c in 0..128 {
                let first = sw(3, 4, 3).apply(r * 128 + c);
                assert_eq!(at(&l, (r, c)), sw(1, 3, 4).apply(first));
            }
        }
        // Row 1, byte 0: 128 -> 144 by the first step; bit 7 is set, so the second sets bit 3.
        assert_eq!(at(&l, (1, 0)), 152);
    }

    #[test]
    fn device_width_is_checked_and_code_is_emitted() {
        // A 31-bit index refuses a swizzle touching bit 31 (Sw<3,26,3> spans 32 bits).
        let l = Layout::<Expr>::row_major((8, 64));
        let err = ComposedLayout::new(sw(3, 26, 3), 0, l.clone()).unwrap_err();
        assert!(matches!(err, SwizzleError::TooWide { width: 31, .. }));
        let err = ComposedLayout::new(sw(3, 4, 3).then(sw(1, 28, 3)), 0, l.clone()).unwrap_err();
        assert!(matches!(err, SwizzleError::TooWide { base: 28, .. }));
        // Dynamic coordinates emit the linear part, then one and/shift/xor.
        let tile = ComposedLayout::new(sw(3, 3, 3), 0, l).unwrap();
        let off = tile
            .crd2idx(&Coord::from((Expr::var("r"), Expr::var("c"))))
            .unwrap();
        let lin = "((r * 64) + c)";
        assert_eq!(
            off,
            Idx::Dynamic(Expr(format!("({lin} ^ (({lin} & 448) >> 3))")))
        );
        // Static coordinates fold to a constant.
        let off = tile.crd2idx(&Coord::from((3, 10))).unwrap();
        assert_eq!(off, Idx::Static(210));
        assert_eq!(tile.describe(), "Sw<3,3,3> o 0 o (8,64):(64,1)".to_string());
    }

    /// A swizzle touching at most `n` bits, chosen by `raw`.
    fn swizzle_within(n: u32, (b, s, m, neg): (u32, u32, u32, bool)) -> Swizzle {
        let b = b % (n / 2 + 1);
        let s = b + s % (n - 2 * b + 1);
        let m = m % (n - b - s + 1);
        sw(b, m, if neg { -(s as i32) } else { s as i32 })
    }

    fn raw() -> impl Strategy<Value = (u32, u32, u32, bool)> {
        (any::<u32>(), any::<u32>(), any::<u32>(), any::<bool>())
    }

    proptest! {
        #[test]
        fn swizzled_compact_layout_permutes_its_image(
            a in pow2_compact(),
            first in raw(),
            second in raw(),
            chained in any::<bool>(),
            k in 0i64..4,
        ) {
            let n = value(a.size());
            prop_assume!(n <= 1 << 12);
            // Compact with a power-of-two size: the image is [0, n), whole blocks of any
            // swizzle touching at most log2(n) bits.
            let bits = n.trailing_zeros();
            let mut chain = SwizzleChain::from(swizzle_within(bits, first));
            if chained {
                chain = chain.then(swizzle_within(bits, second));
            }
            let offset = k * chain.block();
            let c = ComposedLayout::new(chain.clone(), offset, a.clone()).unwrap();
            prop_assert_eq!(c.size(), a.size());
            prop_assert_eq!(c.cosize(), a.cosize());
            let footprint = value(c.footprint());
            let mut swizzled = Vec::new();
            let mut plain = Vec::new();
            for i in 0..n {
                let linear = offset + value(a.call(i));
                let crd = a.shape().idx2crd(&Idx::Static(i));
                let got = value(c.crd2idx(&crd).unwrap());
                prop_assert_eq!(got, chain.apply(linear));
                prop_assert_eq!(value(c.call(i)), got);
                prop_assert!(got < footprint);
                // The generic path with run-time coordinates computes the same number.
                let dynamic = crd.map(&mut |x| Idx::Dynamic(x.static_value().unwrap()));
                prop_assert_eq!(c.crd2idx(&dynamic).unwrap(), Idx::Dynamic(got));
                swizzled.push(got);
                plain.push(linear);
            }
            swizzled.sort_unstable();
            plain.sort_unstable();
            prop_assert_eq!(swizzled, plain);
        }
    }
}
