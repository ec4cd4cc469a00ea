//! Floating-point decomposition helpers of the VALU (`frexp`, `ldexp`, `fract`), value in and
//! value out.

use super::fp;

pub(crate) fn frexp32(x: f32) -> (f32, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let (m, e) = frexp64(x as f64);
    (m as f32, e)
}

pub(crate) fn frexp64(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: normalise first.
        let (m, e) = frexp64(x * fp::pow2(64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (m, exp - 1022)
}

pub(crate) fn ldexp64(x: f64, e: i32) -> f64 {
    // Split the scaling so intermediate powers of two stay representable.
    let e = e.clamp(-2200, 2200);
    let (a, b) = (e / 2, e - e / 2);
    x * fp::pow2(a) * fp::pow2(b)
}

pub(crate) fn fract32(x: f32) -> f32 {
    if x.is_infinite() {
        return f32::NAN;
    }
    // The largest f32 below 1.0 bounds the result for tiny negative inputs.
    (x - x.floor()).min(f32::from_bits(0x3f7f_ffff))
}

pub(crate) fn fract64(x: f64) -> f64 {
    if x.is_infinite() {
        return f64::NAN;
    }
    (x - x.floor()).min(f64::from_bits(0x3fef_ffff_ffff_ffff))
}
