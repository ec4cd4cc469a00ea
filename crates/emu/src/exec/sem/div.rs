//! Division steps of LLVM's division expansion, value in and value out: what `v_div_scale`,
//! `v_div_fmas` and `v_div_fixup` compute for one lane.

use super::fp;

/// `v_div_fixup_f32/f64` (CDNA4 ISA pseudocode): `s0` is the quotient estimate, `s1` the
/// denominator, `s2` the numerator. NaN inputs propagate quietened (numerator first), 0/0 and
/// inf/inf give the default NaN, x/0 and inf/y infinity, x/inf and 0/y zero, all with the
/// quotient's sign; a quotient far below the smallest denormal (biased exponent difference
/// below -`underflow_gap`) gives signed zero; a NaN estimate signed infinity; otherwise the
/// estimate's magnitude with the quotient's sign.
pub(crate) fn div_fixup(
    s0: f64,
    s1: f64,
    s2: f64,
    underflow_gap: i32,
    biased_exp: impl Fn(f64) -> i32,
) -> f64 {
    let neg = s1.is_sign_negative() != s2.is_sign_negative();
    let signed = |x: f64| if neg { -x } else { x };
    if s2.is_nan() {
        s2
    } else if s1.is_nan() {
        s1
    } else if (s1 == 0.0 && s2 == 0.0) || (s1.is_infinite() && s2.is_infinite()) {
        // The ISA writes the default NaN with its sign bit set (0xffc00000).
        -f64::NAN
    } else if s1 == 0.0 || s2.is_infinite() {
        signed(f64::INFINITY)
    } else if s1.is_infinite() || s2 == 0.0 || biased_exp(s2) - biased_exp(s1) < -underflow_gap {
        // x/inf, 0/y, and quotients far below the smallest denormal.
        signed(0.0)
    } else if s0.is_nan() {
        // With finite non-zero operands a NaN estimate means the scaled quotient overflowed
        // inside the Newton-Raphson steps (a true quotient beyond 2^192): the ISA pseudocode
        // has no case for it; hardware returns the overflow value (infinity in the default
        // round mode), as tinygrad's hardware-checked model of this instruction records.
        signed(f64::INFINITY)
    } else {
        signed(s0.abs())
    }
}

/// Biased exponent field of an f32.
pub(crate) fn exp_f32(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xff) as i32
}

/// Biased exponent field of an f64.
pub(crate) fn exp_f64(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32
}

/// Parameters of the division helpers for one precision: the exponent distance that means
/// "quotient near overflow", the power-of-two scale, the "numerator tiny" exponent bound and
/// the biased exponent of 1.0.
pub(crate) struct DivParams {
    near_max: i32,
    scale: i32,
    tiny: i32,
    one: i32,
}

pub(crate) const DIV_F32: DivParams = DivParams {
    near_max: 96,
    scale: 64,
    tiny: 23,
    one: 127,
};
pub(crate) const DIV_F64: DivParams = DivParams {
    near_max: 768,
    scale: 128,
    tiny: 53,
    one: 1023,
};

/// `v_div_scale_*` for one lane: `s0` is the value to scale (the numerator or the
/// denominator), `s1` the denominator, `s2` the numerator. Returns the scaled value and the
/// lane's VCC bit ("the quotient needs post-scaling").
///
/// This follows the CDNA4 ISA pseudocode branch by branch. "1.0 / S1 == DENORM" is evaluated
/// in f64 as the pseudocode writes it (`1.0 / 64'F(S1.f32) == DENORM.f64`), so for f32
/// operands those two branches never apply. One reading is forced by the division macro the
/// instruction exists for (LLVM's fdiv expansion, which must return the correctly rounded
/// quotient): where both 1/S1 and S2/S1 are denormal (f64: |S1| > 2^1022) the denominator
/// is scaled *down*; the pseudocode's `ldexp(S0, 128)` would overflow it to infinity. With
/// `v_div_fmas`'s 2^-128 post-scale for a small quotient this yields the true quotient.
///
/// The unit tests run the f32 and f64 macros over every input class and compare with host
/// division.
pub(crate) fn div_scale(s0: f64, s1: f64, s2: f64, p: &DivParams, narrow: bool) -> (f64, bool) {
    // Rounds to the operand precision so that "is denormal" tests the value the hardware sees.
    let round = |x: f64| if narrow { x as f32 as f64 } else { x };
    let exp = |x: f64| {
        if narrow {
            exp_f32(x as f32)
        } else {
            exp_f64(x)
        }
    };
    let denorm = |x: f64| x != 0.0 && x.is_finite() && exp(x) == 0;
    let denorm64 = |x: f64| x != 0.0 && x.is_subnormal();
    let ldexp = |x: f64, e: i32| round(x * fp::pow2(e));
    if s2 == 0.0 || s1 == 0.0 {
        (f64::NAN, false)
    } else if exp(s2) - exp(s1) >= p.near_max {
        // The quotient is near the largest finite value: scale the denominator up.
        (if s0 == s1 { ldexp(s0, p.scale) } else { s0 }, true)
    } else if denorm(s1) {
        (ldexp(s0, p.scale), false)
    } else if denorm64(1.0 / s1) && denorm(round(s2 / s1)) {
        (if s0 == s1 { ldexp(s0, -p.scale) } else { s0 }, true)
    } else if denorm64(1.0 / s1) {
        (ldexp(s0, -p.scale), false)
    } else if denorm(round(s2 / s1)) {
        // The quotient is denormal: scale the numerator up, post-scale the quotient down.
        (if s0 == s2 { ldexp(s0, p.scale) } else { s0 }, true)
    } else if exp(s2) <= p.tiny {
        // The numerator is tiny: scale both (no post-scaling needed).
        (ldexp(s0, p.scale), false)
    } else {
        (s0, false)
    }
}

/// `v_div_fmas_*` for one lane: `fma(s0, s1, s2)`, post-scaled when `vcc` is set. The ISA
/// pseudocode writes a fixed 2^32 (2^64 for f64), which cannot undo `v_div_scale`'s 2^64
/// (2^128) scaling; the scale applied here is 2^+64 when the quotient estimate `s2` is at
/// least 2.0 (the denominator was scaled up because the quotient is huge) and 2^-64 otherwise
/// (the numerator was scaled up, or the denominator down, because the quotient is denormal).
/// Hardware tests published by tinygrad (RDNA3, same division macro) report the same rule.
pub(crate) fn div_fmas(s0: f64, s1: f64, s2: f64, vcc: bool, p: &DivParams, narrow: bool) -> f64 {
    let exp = |x: f64| {
        if narrow {
            exp_f32(x as f32)
        } else {
            exp_f64(x)
        }
    };
    if !vcc {
        return if narrow {
            (s0 as f32).mul_add(s1 as f32, s2 as f32) as f64
        } else {
            s0.mul_add(s1, s2)
        };
    }
    let scale = if exp(s2) > p.one { p.scale } else { -p.scale };
    // f32: the f64 fma of f32 values is exact enough that scaling it before the one rounding
    // to f32 matches a fused scale; f64: scaling after the fma is exact unless the result is
    // denormal.
    s0.mul_add(s1, s2) * fp::pow2(scale)
}
