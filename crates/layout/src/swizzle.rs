//! Swizzles: CuTe's `Swizzle<B, M, S>`, an XOR permutation of offsets, and chains of them.
//!
//! A swizzle moves an offset only inside its aligned block of `2^span` values (bits at and above
//! `span` are untouched), so it permutes every buffer whose size is a multiple of that block. LDS
//! tiles use it to spread a column of a row-major tile across banks.

use std::fmt;

use crate::int::{Idx, IndexValue};

/// Why swizzle parameters were refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwizzleError {
    /// The source (y) and target (z) bit ranges overlap, so the swizzle would not be a bijection.
    #[error(
        "swizzle Sw<{bits},{base},{shift}>: |shift| must be at least bits ({bits}) so the source and target bits do not overlap"
    )]
    Overlap {
        /// `B`: bits in each mask.
        bits: u32,
        /// `M`: low bits kept constant.
        base: u32,
        /// `S`: distance from the source to the target bits.
        shift: i32,
    },
    /// The swizzle touches bits the index type cannot hold.
    #[error(
        "swizzle Sw<{bits},{base},{shift}> touches the low {span} bits of an offset, but the index type holds only {width}"
    )]
    TooWide {
        /// `B`: bits in each mask.
        bits: u32,
        /// `M`: low bits kept constant.
        base: u32,
        /// `S`: distance from the source to the target bits.
        shift: i32,
        /// Bits the swizzle touches: `M + B + |S|`.
        span: u64,
        /// Bits a non-negative value of the index type can use ([`IndexValue::INDEX_BITS`]).
        width: u32,
    },
}

/// CuTe's `Swizzle<B, M, S>`: `x ^ ((x & yyy) >> S)` on an offset `x`.
///
/// ```text
/// offset  0b ...xxx YYY xxxx ZZZ MMMM          (drawn for S > 0; S < 0 swaps Y and Z)
///                   ^-^      ^-^               B bits each
///                        ^------^              S: distance from the Y bits down to the Z bits
///                                ^--^          M: low bits that never change
/// yyy = (2^B - 1) << (M + max(0, S))
/// zzz = (2^B - 1) << (M - min(0, S))
/// ```
///
/// The Y bits are XORed into the Z bits (a negative `S` shifts left instead). Because
/// `|S| >= B`, the two ranges are disjoint, the Y bits pass through unchanged, and applying the
/// swizzle twice gives back `x`: every swizzle is an involution, hence a bijection of each
/// aligned block of [`block`](Self::block) offsets.
///
/// `Sw<3,4,3>` on byte offsets of a tile with 128-byte rows: `M = 4` keeps 16-byte chunks whole,
/// the `B = 3` chunk bits (8 chunks per row) are XORed with the row index mod 8 (bits 7..10, 3
/// above), so a column of chunks lands in 8 different chunk slots:
///
/// ```
/// use tilegen_layout::Swizzle;
/// let sw = Swizzle::new(3, 4, 3)?;
/// assert_eq!(sw.apply(128), 128 + 16); // row 1, chunk 0 -> chunk 1
/// assert_eq!(sw.apply(5 * 128 + 2 * 16 + 3), 5 * 128 + 7 * 16 + 3); // row 5: chunk 2 -> 2 ^ 5
/// assert_eq!(sw.apply(sw.apply(1000)), 1000);
/// assert_eq!(sw.block(), 1024);
/// # Ok::<(), tilegen_layout::SwizzleError>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Swizzle {
    bits: u32,
    base: u32,
    shift: i32,
}

impl Swizzle {
    /// `Sw<bits, base, shift>`; refused when `|shift| < bits` (overlapping masks) or when it
    /// touches more than the 63 bits of a non-negative `i64`. Use
    /// [`check_index`](Self::check_index) for narrower index types.
    pub fn new(bits: u32, base: u32, shift: i32) -> Result<Self, SwizzleError> {
        if shift.unsigned_abs() < bits {
            return Err(SwizzleError::Overlap { bits, base, shift });
        }
        let sw = Swizzle { bits, base, shift };
        sw.check_index::<i64>()?;
        Ok(sw)
    }

    /// `Sw<0,0,0>`, the identity.
    pub const fn identity() -> Self {
        Swizzle {
            bits: 0,
            base: 0,
            shift: 0,
        }
    }

    /// `B`: bits in each mask.
    pub fn bits(&self) -> u32 {
        self.bits
    }

    /// `M`: low bits that never change.
    pub fn base(&self) -> u32 {
        self.base
    }

    /// `S`: how far the source (Y) bits sit above the target (Z) bits; negative when below.
    pub fn shift(&self) -> i32 {
        self.shift
    }

    /// Whether this is the identity (`B = 0`, whatever `M` and `S`).
    pub fn is_identity(&self) -> bool {
        self.bits == 0
    }

    /// The source bits: `(2^B - 1) << (M + max(0, S))`.
    pub fn yyy_mask(&self) -> i64 {
        self.mask_at(self.base + self.shift.max(0).unsigned_abs())
    }

    /// The target bits: `(2^B - 1) << (M - min(0, S))`.
    pub fn zzz_mask(&self) -> i64 {
        self.mask_at(self.base + self.shift.min(0).unsigned_abs())
    }

    fn mask_at(&self, low: u32) -> i64 {
        // The identity's M and S may be anything; it has no mask to place.
        if self.is_identity() {
            return 0;
        }
        ((1i64 << self.bits) - 1) << low
    }

    /// Number of low bits the swizzle reads or writes: `M + B + |S|` (0 for the identity).
    pub fn span_bits(&self) -> u32 {
        // `new` bounded it by 63.
        self.span() as u32
    }

    fn span(&self) -> u64 {
        if self.is_identity() {
            return 0;
        }
        u64::from(self.base) + u64::from(self.bits) + u64::from(self.shift.unsigned_abs())
    }

    /// `2^span_bits`: the swizzle permutes every aligned block of this many offsets, and moves
    /// no offset out of its block.
    pub fn block(&self) -> i64 {
        1i64 << self.span_bits()
    }

    /// Whether the swizzle fits the index type `T` (touches no bit past
    /// [`IndexValue::INDEX_BITS`]), so [`apply_idx`](Self::apply_idx) computes it exactly.
    pub fn check_index<T: IndexValue>(&self) -> Result<(), SwizzleError> {
        let span = self.span();
        if span > u64::from(T::INDEX_BITS) {
            return Err(SwizzleError::TooWide {
                bits: self.bits,
                base: self.base,
                shift: self.shift,
                span,
                width: T::INDEX_BITS,
            });
        }
        Ok(())
    }

    /// The swizzled host offset; `x` must be non-negative.
    pub fn apply(&self, x: i64) -> i64 {
        if self.is_identity() {
            return x;
        }
        let y = x & self.yyy_mask();
        let moved = if self.shift >= 0 {
            y >> self.shift
        } else {
            y << self.shift.unsigned_abs()
        };
        x ^ moved
    }

    /// The swizzled offset for any index type: folds when `x` is static, emits an and, a shift
    /// and a xor when it is dynamic. `T` must pass [`check_index`](Self::check_index).
    pub fn apply_idx<T: IndexValue>(&self, x: &Idx<T>) -> Idx<T> {
        if self.is_identity() {
            return x.clone();
        }
        let y = x.and(&Idx::Static(self.yyy_mask()));
        let moved = if self.shift >= 0 {
            y.shr(&Idx::Static(i64::from(self.shift)))
        } else {
            y.shl(&Idx::Static(i64::from(self.shift.unsigned_abs())))
        };
        x.xor(&moved)
    }

    /// [`apply_idx`](Self::apply_idx) on a run-time value.
    pub fn apply_value<T: IndexValue>(&self, x: &T) -> T {
        self.apply_idx(&Idx::dynamic(x.clone())).to_value(x)
    }

    /// The inverse function: a swizzle is its own inverse.
    pub fn inverse(&self) -> Swizzle {
        *self
    }

    /// `self` applied first, then `next` (CuTe's `composition(next, self)`).
    pub fn then(self, next: impl Into<SwizzleChain>) -> SwizzleChain {
        SwizzleChain::from(self).then(next)
    }
}

impl Default for Swizzle {
    fn default() -> Self {
        Swizzle::identity()
    }
}

impl fmt::Display for Swizzle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sw<{},{},{}>", self.bits, self.base, self.shift)
    }
}

/// Swizzles applied one after another: the composition of swizzles as functions.
///
/// Two swizzles with different shifts do not merge into one `Swizzle` (CuTe merges only equal
/// shifts), so a chain keeps each step and applies them in order. Every step is a bijection of
/// its aligned blocks, so the chain is a bijection of each aligned block of
/// [`block`](Self::block) offsets; its inverse applies the steps in reverse order.
///
/// ```
/// use tilegen_layout::Swizzle;
/// let a = Swizzle::new(2, 4, 3)?;
/// let b = Swizzle::new(1, 4, 5)?;
/// let ab = a.then(b);
/// assert_eq!(ab.apply(300), b.apply(a.apply(300)));
/// assert_eq!(ab.to_string(), "Sw<1,4,5> o Sw<2,4,3>"); // function-composition order
/// assert_eq!(ab.inverse().apply(ab.apply(300)), 300);
/// # Ok::<(), tilegen_layout::SwizzleError>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct SwizzleChain {
    /// In application order.
    steps: Vec<Swizzle>,
}

impl SwizzleChain {
    /// The empty chain, the identity.
    pub fn identity() -> Self {
        SwizzleChain::default()
    }

    /// The swizzles in application order (the first is applied first).
    pub fn steps(&self) -> &[Swizzle] {
        &self.steps
    }

    /// Whether every step is the identity.
    pub fn is_identity(&self) -> bool {
        self.steps.iter().all(Swizzle::is_identity)
    }

    /// `self` applied first, then `next`.
    pub fn then(mut self, next: impl Into<SwizzleChain>) -> SwizzleChain {
        self.steps.extend(next.into().steps);
        self
    }

    /// Number of low bits any step reads or writes.
    pub fn span_bits(&self) -> u32 {
        self.steps.iter().map(Swizzle::span_bits).max().unwrap_or(0)
    }

    /// `2^span_bits`: the chain permutes every aligned block of this many offsets.
    pub fn block(&self) -> i64 {
        1i64 << self.span_bits()
    }

    /// Whether every step fits the index type `T`; the error names the first that does not.
    pub fn check_index<T: IndexValue>(&self) -> Result<(), SwizzleError> {
        self.steps.iter().try_for_each(Swizzle::check_index::<T>)
    }

    /// The swizzled host offset; `x` must be non-negative.
    pub fn apply(&self, x: i64) -> i64 {
        self.steps.iter().fold(x, |x, s| s.apply(x))
    }

    /// The swizzled offset for any index type (see [`Swizzle::apply_idx`]).
    pub fn apply_idx<T: IndexValue>(&self, x: &Idx<T>) -> Idx<T> {
        self.steps.iter().fold(x.clone(), |x, s| s.apply_idx(&x))
    }

    /// [`apply_idx`](Self::apply_idx) on a run-time value.
    pub fn apply_value<T: IndexValue>(&self, x: &T) -> T {
        self.apply_idx(&Idx::dynamic(x.clone())).to_value(x)
    }

    /// The inverse function: the steps in reverse order (each is its own inverse).
    pub fn inverse(&self) -> SwizzleChain {
        SwizzleChain {
            steps: self.steps.iter().rev().copied().collect(),
        }
    }
}

impl From<Swizzle> for SwizzleChain {
    fn from(s: Swizzle) -> Self {
        SwizzleChain { steps: vec![s] }
    }
}

impl FromIterator<Swizzle> for SwizzleChain {
    fn from_iter<I: IntoIterator<Item = Swizzle>>(iter: I) -> Self {
        SwizzleChain {
            steps: iter.into_iter().collect(),
        }
    }
}

impl fmt::Display for SwizzleChain {
    /// Function-composition order, as CuTe prints: the last step applied comes first.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.steps.is_empty() {
            return fmt::Display::fmt(&Swizzle::identity(), f);
        }
        for (n, s) in self.steps.iter().rev().enumerate() {
            if n > 0 {
                f.write_str(" o ")?;
            }
            write!(f, "{s}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A symbolic index that records the operations applied to it, standing in for a device
    /// integer: 31 usable bits like the kernel builder's `i32`.
    #[derive(Clone, Debug, PartialEq)]
    pub(crate) struct Expr(pub(crate) String);

    impl Expr {
        pub(crate) fn var(name: &str) -> Idx<Expr> {
            Idx::Dynamic(Expr(name.to_string()))
        }

        fn op(&self, op: &str, rhs: &Self) -> Self {
            Expr(format!("({} {op} {})", self.0, rhs.0))
        }
    }

    impl IndexValue for Expr {
        const INDEX_BITS: u32 = 31;
        fn constant_like(&self, value: i64) -> Self {
            Expr(value.to_string())
        }
        fn add(&self, rhs: &Self) -> Self {
            self.op("+", rhs)
        }
        fn sub(&self, rhs: &Self) -> Self {
            self.op("-", rhs)
        }
        fn mul(&self, rhs: &Self) -> Self {
            self.op("*", rhs)
        }
        fn div(&self, rhs: &Self) -> Self {
            self.op("/", rhs)
        }
        fn rem(&self, rhs: &Self) -> Self {
            self.op("%", rhs)
        }
        fn xor(&self, rhs: &Self) -> Self {
            self.op("^", rhs)
        }
        fn and(&self, rhs: &Self) -> Self {
            self.op("&", rhs)
        }
        fn shr(&self, rhs: &Self) -> Self {
            self.op(">>", rhs)
        }
        fn shl(&self, rhs: &Self) -> Self {
            self.op("<<", rhs)
        }
    }

    fn sw(b: u32, m: u32, s: i32) -> Swizzle {
        Swizzle::new(b, m, s).unwrap()
    }

    /// `Sw<b,m,s>` computed bit by bit, without masks: output bit `i` is `x_i`, XORed with
    /// `x_{i+S}` when `i` is one of the `B` target bits, which start at bit `M` (S > 0, sources
    /// above) or `M + |S|` (S < 0, sources below).
    fn closed_form(b: u32, m: u32, s: i32, x: i64) -> i64 {
        let (b, m, s) = (i64::from(b), i64::from(m), i64::from(s));
        let z_start = m + (-s).max(0);
        (0..63).fold(0, |out, i| {
            let mut bit = (x >> i) & 1;
            if (z_start..z_start + b).contains(&i) {
                bit ^= (x >> (i + s)) & 1;
            }
            out | (bit << i)
        })
    }

    #[test]
    fn masks_follow_cute() {
        // Sw<3,4,3>: yyy = 0b111 << 7, zzz = 0b111 << 4.
        let a = sw(3, 4, 3);
        assert_eq!((a.yyy_mask(), a.zzz_mask()), (0x380, 0x70));
        assert_eq!((a.span_bits(), a.block()), (10, 1024));
        // Sw<2,0,-2>: the sources are the low bits, the targets 2 above.
        let b = sw(2, 0, -2);
        assert_eq!((b.yyy_mask(), b.zzz_mask()), (0b0011, 0b1100));
        assert_eq!(b.block(), 16);
        assert_eq!(a.to_string(), "Sw<3,4,3>");
        assert_eq!(b.to_string(), "Sw<2,0,-2>");
    }

    #[test]
    fn sw_3_4_3_on_128_byte_rows() {
        // Byte x = row * 128 + chunk * 16 + byte-in-chunk; Sw<3,4,3> turns the chunk into
        // chunk ^ (row % 8) and keeps row and byte-in-chunk. Rows 0..16, every chunk, byte 5.
        let s = sw(3, 4, 3);
        for row in 0..16 {
            for chunk in 0..8 {
                let x = row * 128 + chunk * 16 + 5;
                assert_eq!(
                    s.apply(x),
                    row * 128 + (chunk ^ (row % 8)) * 16 + 5,
                    "x = {x}"
                );
            }
        }
        // Spot values worked by hand: 675 = 0b10_1010_0011 has Y bits 0b101 (row 5) and Z bits
        // 0b010 (chunk 2); 2 ^ 5 = 7 gives 0b10_1111_0011 = 755.
        assert_eq!(s.apply(675), 755);
        assert_eq!(s.apply(128), 144);
    }

    #[test]
    fn sw_3_3_3_and_2_0_neg2_tables() {
        // Sw<3,3,3> on half-precision elements of 64-element rows: 8-element chunks (M = 3),
        // row bits 6..9 into chunk bits 3..6. 72 = row 1 chunk 1 -> chunk 0 = 64; 511 = row 7
        // chunk 7 -> chunk 0 = 448 + 7.
        let s = sw(3, 3, 3);
        assert_eq!([s.apply(64), s.apply(72), s.apply(511)], [72, 64, 455]);
        // Sw<2,0,-2> on 0..16: x = hi * 4 + lo -> (hi ^ lo) * 4 + lo. One table row per hi,
        // lo = 0..4 across; lo = 0 keeps x, e.g. 6 = (1, 2) -> (3, 2) = 14.
        let t = sw(2, 0, -2);
        let got: Vec<i64> = (0..16).map(|x| t.apply(x)).collect();
        #[rustfmt::skip]
        let want = vec![
            0, 5, 10, 15,
            4, 1, 14, 11,
            8, 13, 2, 7,
            12, 9, 6, 3,
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn parameters_are_validated() {
        assert_eq!(
            Swizzle::new(3, 4, 2),
            Err(SwizzleError::Overlap {
                bits: 3,
                base: 4,
                shift: 2
            })
        );
        assert!(matches!(
            Swizzle::new(2, 0, -1),
            Err(SwizzleError::Overlap { .. })
        ));
        // 57 + 3 + 3 = 63 bits fit an i64; one more does not.
        assert_eq!(sw(3, 57, 3).span_bits(), 63);
        assert_eq!(
            Swizzle::new(3, 58, -3),
            Err(SwizzleError::TooWide {
                bits: 3,
                base: 58,
                shift: -3,
                span: 64,
                width: 63
            })
        );
        assert!(matches!(
            Swizzle::new(1, u32::MAX, i32::MIN),
            Err(SwizzleError::TooWide { .. })
        ));
        // The identity places no mask, whatever its M and S.
        let id = sw(0, 200, -9);
        assert_eq!((id.span_bits(), id.apply(12345)), (0, 12345));
        // A 31-bit index type takes Sw<3,25,3> (31 bits) but not Sw<3,26,3>.
        assert!(sw(3, 25, 3).check_index::<Expr>().is_ok());
        let e = sw(3, 26, 3).check_index::<Expr>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "swizzle Sw<3,26,3> touches the low 32 bits of an offset, but the index type holds only 31"
        );
    }

    #[test]
    fn dynamic_values_emit_and_shift_xor() {
        let x = Expr::var("x");
        let out = sw(3, 4, 3).apply_idx(&x);
        assert_eq!(out, Idx::Dynamic(Expr("(x ^ ((x & 896) >> 3))".into())));
        let out = sw(2, 0, -2).apply_idx(&x);
        assert_eq!(out, Idx::Dynamic(Expr("(x ^ ((x & 3) << 2))".into())));
        // Static inputs fold; the identity emits nothing.
        assert_eq!(
            sw(3, 4, 3).apply_idx(&Idx::<Expr>::Static(675)),
            Idx::Static(755)
        );
        assert_eq!(Swizzle::identity().apply_idx(&x), x);
        let chain = sw(1, 4, 3).then(sw(1, 0, -2));
        assert_eq!(
            chain.apply_idx(&x),
            Idx::Dynamic(Expr(
                "((x ^ ((x & 128) >> 3)) ^ (((x ^ ((x & 128) >> 3)) & 1) << 2))".into()
            ))
        );
    }

    #[test]
    fn chains_compose_in_order() {
        let a = sw(3, 4, 3);
        let b = sw(2, 4, -4);
        let ab = a.then(b);
        assert_eq!(ab.steps(), &[a, b]);
        assert_eq!(ab.to_string(), "Sw<2,4,-4> o Sw<3,4,3>");
        assert_eq!(ab.span_bits(), 10);
        // 128 -> 144 (Sw<3,4,3>); 144 = chunk 1, whose low 2 bits 0b01 go 4 up: 144 ^ 256 = 400.
        assert_eq!(ab.apply(128), 400);
        assert_eq!(ab.inverse().steps(), &[b, a]);
        assert_eq!(SwizzleChain::identity().to_string(), "Sw<0,0,0>");
        assert!(SwizzleChain::identity().is_identity());
        let c: SwizzleChain = [a, b, a].into_iter().collect();
        assert_eq!(c, ab.then(a));
        assert!(
            c.check_index::<Expr>().is_ok() && sw(4, 21, 7).then(a).check_index::<Expr>().is_err()
        );
    }

    /// A swizzle touching at most 12 bits (blocks of at most 4096 offsets).
    pub(crate) fn small_swizzle() -> impl Strategy<Value = Swizzle> {
        (0u32..=3, 0u32..=3, 0u32..=3, any::<bool>()).prop_map(|(b, m, extra, neg)| {
            let s = (b + extra) as i32;
            sw(b, m, if neg { -s } else { s })
        })
    }

    /// Any valid swizzle of an `i64`, up to the full 63 bits.
    fn wide_swizzle() -> impl Strategy<Value = Swizzle> {
        (0u32..=10, 0u32..=20, any::<bool>())
            .prop_flat_map(|(b, extra, neg)| {
                let s = b + extra;
                (Just((b, s, neg)), 0..=63 - b - s)
            })
            .prop_map(|((b, s, neg), m)| sw(b, m, if neg { -(s as i32) } else { s as i32 }))
    }

    fn assert_block_permuted(f: impl Fn(i64) -> i64, block: i64, start: i64) {
        let mut seen = vec![false; block as usize];
        for x in start..start + block {
            let y = f(x);
            assert!(
                (start..start + block).contains(&y),
                "{x} -> {y} leaves its block"
            );
            assert!(!seen[(y - start) as usize], "{y} is hit twice");
            seen[(y - start) as usize] = true;
        }
    }

    proptest! {
        #[test]
        fn swizzle_permutes_each_aligned_block(s in small_swizzle(), k in 0i64..1000) {
            assert_block_permuted(|x| s.apply(x), s.block(), k * s.block());
        }

        #[test]
        fn swizzle_is_its_closed_form_and_an_involution(
            s in wide_swizzle(),
            x in 0i64..(1 << 62),
        ) {
            let y = s.apply(x);
            prop_assert_eq!(y, closed_form(s.bits(), s.base(), s.shift(), x));
            // Only bits below the span move.
            prop_assert_eq!(y >> s.span_bits(), x >> s.span_bits());
            prop_assert_eq!(s.apply(y), x);
            prop_assert_eq!(s.inverse().apply(y), x);
        }

        #[test]
        fn generic_path_matches_host(s in wide_swizzle(), x in 0i64..(1 << 62)) {
            let want = s.apply(x);
            prop_assert_eq!(s.apply_idx(&Idx::<i64>::Dynamic(x)), Idx::Dynamic(want));
            prop_assert_eq!(s.apply_idx(&Idx::<i64>::Static(x)), Idx::Static(want));
            prop_assert_eq!(s.apply_value(&x), want);
            let chain = s.then(Swizzle::identity());
            prop_assert_eq!(chain.apply_value(&x), want);
        }

        #[test]
        fn chains_are_bijections_applied_in_sequence(
            a in small_swizzle(),
            b in small_swizzle(),
            c in small_swizzle(),
            k in 0i64..100,
        ) {
            let chain = a.then(b).then(c);
            prop_assert_eq!(chain.block(), a.block().max(b.block()).max(c.block()));
            assert_block_permuted(|x| chain.apply(x), chain.block(), k * chain.block());
            let inv = chain.inverse();
            for x in k * chain.block()..(k + 1) * chain.block() {
                let y = chain.apply(x);
                prop_assert_eq!(y, c.apply(b.apply(a.apply(x))));
                prop_assert_eq!(chain.apply_idx(&Idx::<i64>::Dynamic(x)), Idx::Dynamic(y));
                prop_assert_eq!(inv.apply(y), x);
            }
        }
    }
}
