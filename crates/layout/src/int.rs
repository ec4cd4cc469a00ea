//! Index integers: a value is either known to the generator (`Static`) or only at run time
//! (`Dynamic`). Arithmetic on [`Idx`] folds static parts, so a layout evaluated with IR values
//! emits instructions only for what is truly dynamic.

use std::fmt;
use std::ops::{Add, Div, Mul, Rem, Sub};

/// A run-time integer the layout algebra can compute with.
///
/// On the host this is plain `i64`; in the kernel builder it is an IR value that emits an
/// instruction per operation. Operations are only ever applied to non-negative values (indices,
/// sizes and strides), so `div`/`rem` may be unsigned.
pub trait IndexValue: Clone + fmt::Debug {
    /// How many low bits a non-negative value of this type can use (63 for `i64`, 31 for a
    /// 32-bit device integer). Bit operations past it would wrap or hit the sign bit, so a
    /// [`Swizzle`](crate::Swizzle) that reaches higher is refused for the type.
    const INDEX_BITS: u32;
    /// A constant in the same context as `self` (an IR value needs its builder to make one).
    fn constant_like(&self, value: i64) -> Self;
    /// `self + rhs`
    fn add(&self, rhs: &Self) -> Self;
    /// `self - rhs`
    fn sub(&self, rhs: &Self) -> Self;
    /// `self * rhs`
    fn mul(&self, rhs: &Self) -> Self;
    /// `self / rhs` for non-negative operands.
    fn div(&self, rhs: &Self) -> Self;
    /// `self % rhs` for non-negative operands.
    fn rem(&self, rhs: &Self) -> Self;
    /// `self ^ rhs` (swizzles).
    fn xor(&self, rhs: &Self) -> Self;
    /// `self & rhs` (swizzles).
    fn and(&self, rhs: &Self) -> Self;
    /// `self >> rhs` (logical).
    fn shr(&self, rhs: &Self) -> Self;
    /// `self << rhs`.
    fn shl(&self, rhs: &Self) -> Self;
    /// The value, if the context can prove it is a constant (an IR builder folds constants).
    fn as_static(&self) -> Option<i64> {
        None
    }
}

impl IndexValue for i64 {
    const INDEX_BITS: u32 = 63;
    fn constant_like(&self, value: i64) -> Self {
        value
    }
    fn add(&self, rhs: &Self) -> Self {
        self + rhs
    }
    fn sub(&self, rhs: &Self) -> Self {
        self - rhs
    }
    fn mul(&self, rhs: &Self) -> Self {
        self * rhs
    }
    fn div(&self, rhs: &Self) -> Self {
        self / rhs
    }
    fn rem(&self, rhs: &Self) -> Self {
        self % rhs
    }
    fn xor(&self, rhs: &Self) -> Self {
        self ^ rhs
    }
    fn and(&self, rhs: &Self) -> Self {
        self & rhs
    }
    fn shr(&self, rhs: &Self) -> Self {
        ((*self as u64) >> rhs) as i64
    }
    fn shl(&self, rhs: &Self) -> Self {
        self << rhs
    }
}

/// An index integer: static (known when the kernel is generated) or dynamic (a run-time value).
#[derive(Clone, Debug)]
pub enum Idx<T = i64> {
    /// Known to the generator; folds into constants and immediates.
    Static(i64),
    /// Known only at run time.
    Dynamic(T),
}

impl<T: PartialEq> PartialEq for Idx<T> {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Idx::Static(a), Idx::Static(b)) => a == b,
            (Idx::Dynamic(a), Idx::Dynamic(b)) => a == b,
            _ => false,
        }
    }
}

impl<T> Idx<T> {
    /// The static value, if any.
    pub fn static_value(&self) -> Option<i64> {
        match self {
            Idx::Static(v) => Some(*v),
            Idx::Dynamic(_) => None,
        }
    }

    /// Whether the value is known to the generator.
    pub fn is_static(&self) -> bool {
        matches!(self, Idx::Static(_))
    }

    /// Whether the value is the static constant `v`.
    pub fn is(&self, v: i64) -> bool {
        self.static_value() == Some(v)
    }
}

impl<T: IndexValue> Idx<T> {
    /// A dynamic value, folded to `Static` when its context proves it constant.
    pub fn dynamic(v: T) -> Self {
        match v.as_static() {
            Some(s) => Idx::Static(s),
            None => Idx::Dynamic(v),
        }
    }

    /// Materialise as a run-time value, using `like` as the context for a static constant.
    pub fn to_value(&self, like: &T) -> T {
        match self {
            Idx::Static(v) => like.constant_like(*v),
            Idx::Dynamic(v) => v.clone(),
        }
    }

    fn binary(&self, rhs: &Self, fold: impl Fn(i64, i64) -> i64, op: impl Fn(&T, &T) -> T) -> Self {
        match (self, rhs) {
            (Idx::Static(a), Idx::Static(b)) => Idx::Static(fold(*a, *b)),
            (Idx::Dynamic(a), Idx::Static(b)) => Idx::dynamic(op(a, &a.constant_like(*b))),
            (Idx::Static(a), Idx::Dynamic(b)) => Idx::dynamic(op(&b.constant_like(*a), b)),
            (Idx::Dynamic(a), Idx::Dynamic(b)) => Idx::dynamic(op(a, b)),
        }
    }

    /// `self + rhs`, folding zeros and constants.
    pub fn add(&self, rhs: &Self) -> Self {
        if self.is(0) {
            return rhs.clone();
        }
        if rhs.is(0) {
            return self.clone();
        }
        self.binary(rhs, |a, b| a + b, T::add)
    }

    /// `self - rhs`, folding zeros and constants.
    pub fn sub(&self, rhs: &Self) -> Self {
        if rhs.is(0) {
            return self.clone();
        }
        self.binary(rhs, |a, b| a - b, T::sub)
    }

    /// `self * rhs`, folding zeros, ones and constants.
    pub fn mul(&self, rhs: &Self) -> Self {
        if self.is(0) || rhs.is(0) {
            return Idx::Static(0);
        }
        if self.is(1) {
            return rhs.clone();
        }
        if rhs.is(1) {
            return self.clone();
        }
        self.binary(rhs, |a, b| a * b, T::mul)
    }

    /// `self / rhs` for non-negative operands, folding ones and constants.
    pub fn div(&self, rhs: &Self) -> Self {
        if rhs.is(1) || self.is(0) {
            return self.clone();
        }
        self.binary(rhs, |a, b| a / b, T::div)
    }

    /// `self % rhs` for non-negative operands, folding ones and constants.
    pub fn rem(&self, rhs: &Self) -> Self {
        if rhs.is(1) || self.is(0) {
            return Idx::Static(0);
        }
        self.binary(rhs, |a, b| a % b, T::rem)
    }

    /// `self ^ rhs`.
    pub fn xor(&self, rhs: &Self) -> Self {
        if self.is(0) {
            return rhs.clone();
        }
        if rhs.is(0) {
            return self.clone();
        }
        self.binary(rhs, |a, b| a ^ b, T::xor)
    }

    /// `self & rhs`.
    pub fn and(&self, rhs: &Self) -> Self {
        if self.is(0) || rhs.is(0) {
            return Idx::Static(0);
        }
        self.binary(rhs, |a, b| a & b, T::and)
    }

    /// `self >> rhs` (logical).
    pub fn shr(&self, rhs: &Self) -> Self {
        if rhs.is(0) || self.is(0) {
            return self.clone();
        }
        self.binary(rhs, |a, b| ((a as u64) >> b) as i64, T::shr)
    }

    /// `self << rhs`.
    pub fn shl(&self, rhs: &Self) -> Self {
        if rhs.is(0) || self.is(0) {
            return self.clone();
        }
        self.binary(rhs, |a, b| a << b, T::shl)
    }
}

impl<T> From<i64> for Idx<T> {
    fn from(v: i64) -> Self {
        Idx::Static(v)
    }
}
impl<T> From<i32> for Idx<T> {
    fn from(v: i32) -> Self {
        Idx::Static(v as i64)
    }
}
impl<T> From<usize> for Idx<T> {
    fn from(v: usize) -> Self {
        Idx::Static(v as i64)
    }
}
impl<T> From<u32> for Idx<T> {
    fn from(v: u32) -> Self {
        Idx::Static(v as i64)
    }
}

impl<T: fmt::Display> fmt::Display for Idx<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Idx::Static(v) => write!(f, "{v}"),
            Idx::Dynamic(v) => write!(f, "{v}"),
        }
    }
}

macro_rules! idx_op {
    ($tr:ident, $method:ident) => {
        impl<T: IndexValue> $tr for Idx<T> {
            type Output = Idx<T>;
            fn $method(self, rhs: Self) -> Idx<T> {
                Idx::$method(&self, &rhs)
            }
        }
        impl<T: IndexValue> $tr<&Idx<T>> for &Idx<T> {
            type Output = Idx<T>;
            fn $method(self, rhs: &Idx<T>) -> Idx<T> {
                Idx::$method(self, rhs)
            }
        }
        impl<T: IndexValue> $tr<i64> for Idx<T> {
            type Output = Idx<T>;
            fn $method(self, rhs: i64) -> Idx<T> {
                Idx::$method(&self, &Idx::Static(rhs))
            }
        }
        impl<T: IndexValue> $tr<i64> for &Idx<T> {
            type Output = Idx<T>;
            fn $method(self, rhs: i64) -> Idx<T> {
                Idx::$method(self, &Idx::Static(rhs))
            }
        }
    };
}
idx_op!(Add, add);
idx_op!(Sub, sub);
idx_op!(Mul, mul);
idx_op!(Div, div);
idx_op!(Rem, rem);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_parts_fold() {
        let d: Idx<i64> = Idx::Dynamic(7);
        assert!((&d * &Idx::Static(0)).is(0));
        assert_eq!(&d * &Idx::Static(1), d);
        assert_eq!(&d + &Idx::Static(0), d);
        assert!((&d % &Idx::Static(1)).is(0));
        assert_eq!((Idx::<i64>::Static(6) * 7).static_value(), Some(42));
        // Mixed operations stay dynamic and compute the right value.
        assert_eq!(&d * &Idx::Static(3), Idx::Dynamic(21));
        assert_eq!(Idx::Static(30) / d.clone(), Idx::Dynamic(4));
        assert_eq!(Idx::Static(30) % d, Idx::Dynamic(2));
    }
}
