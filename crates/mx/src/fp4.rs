//! FP4 E2M1: 1 sign bit, 2 exponent bits (bias 1), 1 mantissa bit; no Inf, no NaN.
//!
//! Magnitudes by code: `0 0.5 1 1.5 2 3 4 6` (codes `0..=7`); bit 3 is the sign. Two values
//! share a byte, the lower-K element in the low nibble.

use crate::error::MxError;

/// Largest finite E2M1 magnitude.
pub const E2M1_MAX: f32 = 6.0;

/// Magnitudes of the eight non-negative codes.
const MAGNITUDE: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// Decodes the E2M1 value in the low nibble of `code` (the high nibble is ignored, so a packed
/// byte can be passed after shifting). Code `0b1000` is negative zero.
#[inline]
pub fn decode_e2m1(code: u8) -> f32 {
    let m = MAGNITUDE[(code & 0x7) as usize];
    if code & 0x8 != 0 { -m } else { m }
}

/// Encodes `x` as E2M1 with round-to-nearest-even, saturating to ±6 (±Inf saturates too).
/// The sign is kept, so values that round to zero give `0b0000` or `0b1000`.
///
/// NaN has no E2M1 encoding; it maps to `0b0000` (+0). In MX data a NaN travels in the block's
/// E8M0 scale (`0xFF`), which makes the element a don't-care, and zero fabricates no magnitude.
#[inline]
pub fn encode_e2m1(x: f32) -> u8 {
    if x.is_nan() {
        return 0;
    }
    let sign = if x.is_sign_negative() { 0x8 } else { 0 };
    let m = x.abs();
    // Midpoints between neighbouring magnitudes are exact in f32. A tie goes to the even code,
    // so the bound is inclusive (`<=`) when the lower neighbour's code is even.
    let code = if m <= 0.25 {
        0
    } else if m < 0.75 {
        1
    } else if m <= 1.25 {
        2
    } else if m < 1.75 {
        3
    } else if m <= 2.5 {
        4
    } else if m < 3.5 {
        5
    } else if m <= 5.0 {
        6
    } else {
        7
    };
    sign | code
}

/// Packs FP4 codes two per byte, element `2i` in the low nibble of byte `i`.
pub fn pack_e2m1(codes: &[u8]) -> Result<Vec<u8>, MxError> {
    if !codes.len().is_multiple_of(2) {
        return Err(MxError::OddLength { len: codes.len() });
    }
    if let Some((index, &value)) = codes.iter().enumerate().find(|&(_, &c)| c > 0xF) {
        return Err(MxError::NibbleOutOfRange { index, value });
    }
    Ok(codes.chunks_exact(2).map(|p| p[0] | (p[1] << 4)).collect())
}

/// Unpacks bytes into FP4 codes, low nibble first (`2 * bytes.len()` codes).
pub fn unpack_e2m1(bytes: &[u8]) -> Vec<u8> {
    bytes.iter().flat_map(|&b| [b & 0xF, b >> 4]).collect()
}

/// The FP4 code of element `i` in a packed buffer (low nibble holds the even element).
/// Returns `None` past the end.
#[inline]
pub fn packed_code(bytes: &[u8], i: usize) -> Option<u8> {
    bytes
        .get(i / 2)
        .map(|&b| if i.is_multiple_of(2) { b & 0xF } else { b >> 4 })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The nearest code by exhaustive search, ties to the even code, saturating above 6.
    fn nearest(x: f32) -> u8 {
        let sign = if x.is_sign_negative() { 8 } else { 0 };
        let m = x.abs().min(E2M1_MAX) as f64;
        let mut best = 0u8;
        for c in 1..8u8 {
            let (dc, db) = (
                (decode_e2m1(c) as f64 - m).abs(),
                (decode_e2m1(best) as f64 - m).abs(),
            );
            if dc < db || (dc == db && c % 2 == 0) {
                best = c;
            }
        }
        sign | best
    }

    #[test]
    fn decodes_the_e2m1_table() {
        // From the format definition: subnormal m * 0.5 for exponent 0, else 2^(e-1) * (1 + m/2).
        for code in 0u8..16 {
            let (s, e, m) = (code >> 3, (code >> 1) & 3, code & 1);
            let mag = if e == 0 {
                m as f32 * 0.5
            } else {
                2f32.powi(e as i32 - 1) * (1.0 + m as f32 / 2.0)
            };
            let want = if s == 1 { -mag } else { mag };
            assert_eq!(decode_e2m1(code).to_bits(), want.to_bits(), "code {code}");
            // The high nibble is ignored.
            assert_eq!(decode_e2m1(code | 0xA0).to_bits(), want.to_bits());
        }
    }

    #[test]
    fn every_code_round_trips() {
        for code in 0u8..16 {
            assert_eq!(encode_e2m1(decode_e2m1(code)), code);
        }
    }

    #[test]
    fn ties_go_to_even_and_large_values_saturate() {
        let cases = [
            (0.25, 0x0),
            (0.75, 0x2),
            (1.25, 0x2),
            (1.75, 0x4),
            (2.5, 0x4),
            (3.5, 0x6),
            (5.0, 0x6),
            (5.01, 0x7),
            (7.0, 0x7),
            (1e30, 0x7),
            (f32::INFINITY, 0x7),
            (f32::NEG_INFINITY, 0xF),
            (-0.1, 0x8),
            (-2.75, 0xD),
            (f32::NAN, 0x0),
        ];
        for (x, want) in cases {
            assert_eq!(encode_e2m1(x), want, "encode({x})");
        }
    }

    #[test]
    fn dense_grid_matches_exhaustive_search() {
        for i in -1024i32..=1024 {
            let x = i as f32 / 128.0;
            assert_eq!(encode_e2m1(x), nearest(x), "x = {x}");
        }
    }

    #[test]
    fn packing_puts_the_lower_element_low() {
        assert_eq!(pack_e2m1(&[0x1, 0xF, 0x7, 0x0]).unwrap(), vec![0xF1, 0x07]);
        assert_eq!(unpack_e2m1(&[0xF1, 0x07]), vec![0x1, 0xF, 0x7, 0x0]);
        assert_eq!(packed_code(&[0xF1, 0x07], 1), Some(0xF));
        assert_eq!(packed_code(&[0xF1, 0x07], 2), Some(0x7));
        assert_eq!(packed_code(&[0xF1, 0x07], 4), None);
    }

    #[test]
    fn packing_rejects_bad_input() {
        assert_eq!(pack_e2m1(&[1, 2, 3]), Err(MxError::OddLength { len: 3 }));
        assert_eq!(
            pack_e2m1(&[1, 0x10]),
            Err(MxError::NibbleOutOfRange {
                index: 1,
                value: 0x10
            })
        );
    }

    proptest! {
        #[test]
        fn encode_is_nearest_even(x in -10.0f32..10.0) {
            prop_assert_eq!(encode_e2m1(x), nearest(x));
        }

        #[test]
        fn pack_unpack_round_trip(codes in prop::collection::vec(0u8..16, 0..64)) {
            let even = &codes[..codes.len() / 2 * 2];
            prop_assert_eq!(unpack_e2m1(&pack_e2m1(even).unwrap()), even.to_vec());
        }
    }
}
