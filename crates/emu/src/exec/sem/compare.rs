//! Vector compare semantics, value in and value out: predicates and IEEE class tests.

use super::alu;
use super::fp;
use crate::isa::CmpPred;

pub(crate) fn class_bits32(x: f32) -> u32 {
    let b = x.to_bits();
    let neg = b >> 31 != 0;
    if x.is_nan() {
        return if alu::is_snan_f32(x) { 1 } else { 2 };
    }
    if x.is_infinite() {
        return if neg { 1 << 2 } else { 1 << 9 };
    }
    if x == 0.0 {
        return if neg { 1 << 5 } else { 1 << 6 };
    }
    let denorm = b & 0x7f80_0000 == 0;
    match (neg, denorm) {
        (true, false) => 1 << 3,
        (true, true) => 1 << 4,
        (false, true) => 1 << 7,
        (false, false) => 1 << 8,
    }
}

pub(crate) fn class_bits64(x: f64) -> u32 {
    let b = x.to_bits();
    let neg = b >> 63 != 0;
    if x.is_nan() {
        return if b & (1 << 51) == 0 { 1 } else { 2 };
    }
    if x.is_infinite() {
        return if neg { 1 << 2 } else { 1 << 9 };
    }
    if x == 0.0 {
        return if neg { 1 << 5 } else { 1 << 6 };
    }
    let denorm = b & (0x7ff << 52) == 0;
    match (neg, denorm) {
        (true, false) => 1 << 3,
        (true, true) => 1 << 4,
        (false, true) => 1 << 7,
        (false, false) => 1 << 8,
    }
}

pub(crate) fn class_bits16(h: u16) -> u32 {
    let x = fp::f16_to_f32(h);
    let neg = h >> 15 != 0;
    if x.is_nan() {
        return if h & 0x200 == 0 { 1 } else { 2 };
    }
    if x.is_infinite() {
        return if neg { 1 << 2 } else { 1 << 9 };
    }
    if x == 0.0 {
        return if neg { 1 << 5 } else { 1 << 6 };
    }
    let denorm = h & 0x7c00 == 0;
    match (neg, denorm) {
        (true, false) => 1 << 3,
        (true, true) => 1 << 4,
        (false, true) => 1 << 7,
        (false, false) => 1 << 8,
    }
}

/// Floating-point predicate `pred` of `a` and `b` (f16 and f32 operands widen exactly). The
/// `N*` forms, `Neq`/`Ne` and `U` are true for unordered operands, the others false.
pub(crate) fn fcmp(pred: CmpPred, a: f64, b: f64) -> bool {
    let unordered = a.is_nan() || b.is_nan();
    match pred {
        CmpPred::F | CmpPred::Class => false,
        CmpPred::Lt => a < b,
        CmpPred::Eq => a == b,
        CmpPred::Le => a <= b,
        CmpPred::Gt => a > b,
        CmpPred::Lg => !unordered && a != b,
        CmpPred::Ge => a >= b,
        CmpPred::O => !unordered,
        CmpPred::U => unordered,
        CmpPred::Nge => unordered || a < b,
        CmpPred::Nlg => unordered || a == b,
        CmpPred::Ngt => unordered || a <= b,
        CmpPred::Nle => unordered || a > b,
        CmpPred::Neq | CmpPred::Ne => unordered || a != b,
        CmpPred::Nlt => unordered || a >= b,
        CmpPred::Tru | CmpPred::T => true,
    }
}

/// Integer predicate `pred` of `a` and `b`. Integers are always ordered, so the unordered
/// forms reduce to their ordered complements.
pub(crate) fn icmp<T: Ord>(pred: CmpPred, a: T, b: T) -> bool {
    match pred {
        CmpPred::F | CmpPred::U | CmpPred::Class => false,
        CmpPred::Lt | CmpPred::Nge => a < b,
        CmpPred::Eq | CmpPred::Nlg => a == b,
        CmpPred::Le | CmpPred::Ngt => a <= b,
        CmpPred::Gt | CmpPred::Nle => a > b,
        CmpPred::Lg | CmpPred::Ne | CmpPred::Neq => a != b,
        CmpPred::Ge | CmpPred::Nlt => a >= b,
        CmpPred::O | CmpPred::Tru | CmpPred::T => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each float predicate on an ordered pair (1 < 2) and an unordered one (NaN), and its
    /// integer reading on 1 < 2 (integers are always ordered).
    #[test]
    fn predicates_on_ordered_and_unordered_operands() {
        use CmpPred::*;
        let table = [
            (F, false, false),
            (Lt, true, false),
            (Eq, false, false),
            (Le, true, false),
            (Gt, false, false),
            (Lg, true, false),
            (Ge, false, false),
            (O, true, false),
            (U, false, true),
            (Nge, true, true),
            (Nlg, false, true),
            (Ngt, true, true),
            (Nle, false, true),
            (Neq, true, true),
            (Nlt, false, true),
            (Tru, true, true),
            (Ne, true, true),
            (T, true, true),
        ];
        for (p, ordered, unordered) in table {
            assert_eq!(fcmp(p, 1.0, 2.0), ordered, "{p:?} ordered");
            assert_eq!(fcmp(p, f64::NAN, 2.0), unordered, "{p:?} unordered");
            assert_eq!(icmp(p, 1, 2), ordered, "{p:?} integer");
        }
    }
}
