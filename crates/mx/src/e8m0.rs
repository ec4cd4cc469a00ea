//! E8M0: the MX shared scale, an 8-bit biased exponent with no sign and no mantissa.
//!
//! Code `e` in `0..=254` is `2^(e - 127)`; `0xFF` is NaN. There is no zero and no Inf.

/// The exponent bias.
pub const E8M0_BIAS: i32 = 127;
/// The NaN code.
pub const E8M0_NAN: u8 = 0xFF;
/// The code of 1.0.
pub const E8M0_ONE: u8 = 127;
/// Smallest unbiased exponent (code 0): `2^-127`.
pub const E8M0_MIN_EXP: i32 = -127;
/// Largest unbiased exponent (code 254): `2^127`.
pub const E8M0_MAX_EXP: i32 = 127;

/// Decodes an E8M0 scale. Exact for every code: `2^-127` (code 0) is the f32 denormal
/// `0x0040_0000`, and `0xFF` is NaN.
#[inline]
pub fn decode_e8m0(code: u8) -> f32 {
    match code {
        E8M0_NAN => f32::NAN,
        // Below the f32 normal range the value sits in the mantissa: 2^-127 = 2^-149 * 2^22.
        0 => f32::from_bits(1 << 22),
        // A biased f32 exponent field equal to the code, zero mantissa, is exactly 2^(e-127).
        e => f32::from_bits((e as u32) << 23),
    }
}

/// The unbiased exponent of a scale code, `None` for NaN.
#[inline]
pub fn e8m0_exponent(code: u8) -> Option<i32> {
    (code != E8M0_NAN).then_some(code as i32 - E8M0_BIAS)
}

/// The code of `2^exp`, with `exp` clamped to the representable `-127..=127`.
#[inline]
pub fn e8m0_from_exponent(exp: i32) -> u8 {
    (exp.clamp(E8M0_MIN_EXP, E8M0_MAX_EXP) + E8M0_BIAS) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_is_exact_for_all_codes() {
        for code in 0u8..=254 {
            let want = 2f64.powi(code as i32 - 127);
            let got = decode_e8m0(code);
            assert_eq!(got as f64, want, "code {code}");
        }
        assert!(decode_e8m0(0xFF).is_nan());
        // The denormal end is exact, not flushed.
        assert_eq!(decode_e8m0(0).to_bits(), 0x0040_0000);
        assert_eq!(decode_e8m0(0) * 2f32.powi(100), 2f32.powi(-27));
        assert_eq!(decode_e8m0(E8M0_ONE), 1.0);
        assert_eq!(decode_e8m0(254), 2f32.powi(127));
    }

    #[test]
    fn exponent_round_trip_and_clamping() {
        for code in 0u8..=254 {
            assert_eq!(e8m0_from_exponent(e8m0_exponent(code).unwrap()), code);
        }
        assert_eq!(e8m0_exponent(E8M0_NAN), None);
        assert_eq!(e8m0_from_exponent(-500), 0);
        assert_eq!(e8m0_from_exponent(-128), 0);
        assert_eq!(e8m0_from_exponent(128), 254);
        assert_eq!(e8m0_from_exponent(i32::MAX), 254);
        assert_eq!(e8m0_from_exponent(0), E8M0_ONE);
    }
}
