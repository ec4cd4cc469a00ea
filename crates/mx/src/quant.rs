//! MXFP4 per OCP MX v1.0: blocks of 32 consecutive K elements share one E8M0 scale.
//!
//! Quantisation of a block `V`: `X = 2^(floor(log2(max|V|)) - 2)` (2 is E2M1's largest
//! exponent), clamped to the E8M0 range; element `i` is `encode_e2m1(V_i / X)`, rounding to
//! nearest even and saturating to ±6. Choices where the spec leaves room:
//! * a block containing NaN gets scale `0xFF` (NaN) and all-zero element codes;
//! * an all-zero block gets scale 1.0 (code 127): any scale represents it, and 1.0 keeps the
//!   block's terms in a GEMM far from the f32 range limits;
//! * a block containing ±Inf has `log2(max) = Inf`, so its scale clamps to `2^127` and the
//!   infinite elements saturate to ±6 (which dequantises back to ±Inf in f32).

use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rayon::prelude::*;

use crate::e8m0::{E8M0_NAN, E8M0_ONE, decode_e8m0, e8m0_from_exponent};
use crate::error::MxError;
use crate::fp4::{decode_e2m1, encode_e2m1, packed_code};

/// Elements per MX block (one E8M0 scale each).
pub const MX_BLOCK: usize = tilegen_arch::MX_BLOCK as usize;
/// Bytes of packed FP4 data per block.
pub const MX_BLOCK_BYTES: usize = MX_BLOCK / 2;
/// E2M1's largest exponent (`emax_elem` in the OCP MX spec): `6 = 1.5 * 2^2`.
pub const E2M1_EMAX: i32 = 2;

/// Scale exponents of [`MxMatrix::random`] lie in `127 ± RANDOM_SCALE_SPREAD`, so a GEMM over
/// random operands stays far inside the f32 range.
pub const RANDOM_SCALE_SPREAD: u8 = 8;

/// An MXFP4 matrix of `rows x k` elements, K-major: row `r` holds `k / 2` packed bytes (element
/// `2i` in the low nibble of byte `i`) and `k / 32` E8M0 scales.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MxMatrix {
    rows: usize,
    k: usize,
    data: Vec<u8>,
    scales: Vec<u8>,
}

/// `(rows * k / 2, rows * k / 32)` after checking `k` and the sizes.
fn checked_sizes(rows: usize, k: usize) -> Result<(usize, usize), MxError> {
    if k == 0 {
        return Err(MxError::Zero { what: "k" });
    }
    if !k.is_multiple_of(MX_BLOCK) {
        return Err(MxError::NotMultiple {
            what: "k",
            value: k,
            multiple: MX_BLOCK,
        });
    }
    let n = rows.checked_mul(k).ok_or_else(|| MxError::SizeOverflow {
        what: "rows * k",
        detail: format!("{rows} * {k}"),
    })?;
    Ok((n / 2, n / MX_BLOCK))
}

/// The E8M0 scale OCP MX v1.0 assigns to a block of E2M1 elements (see the module docs for NaN,
/// zero and Inf).
pub fn block_scale(block: &[f32]) -> u8 {
    let mut amax = 0f32;
    for &v in block {
        if v.is_nan() {
            return E8M0_NAN;
        }
        amax = amax.max(v.abs());
    }
    if amax == 0.0 {
        return E8M0_ONE;
    }
    // Via f64 every f32 magnitude (denormals included) is normal and Inf has exponent 1024, so
    // the biased exponent field is exactly floor(log2) + 1023.
    let floor_log2 = ((amax as f64).to_bits() >> 52) as i32 - 1023;
    e8m0_from_exponent(floor_log2 - E2M1_EMAX)
}

/// Quantises one block: its scale and its E2M1 codes (one per element, unpacked).
pub fn quantize_block(block: &[f32]) -> (u8, Vec<u8>) {
    let scale = block_scale(block);
    if scale == E8M0_NAN {
        return (scale, vec![0; block.len()]);
    }
    let x = decode_e8m0(scale);
    // Division by a power of two is exact unless the quotient is an f32 denormal, and those
    // all round to ±0 in E2M1 anyway.
    (scale, block.iter().map(|&v| encode_e2m1(v / x)).collect())
}

impl MxMatrix {
    /// A matrix from its packed data (`rows * k / 2` bytes) and scales (`rows * k / 32`).
    /// `k` must be a positive multiple of 32.
    pub fn from_parts(
        rows: usize,
        k: usize,
        data: Vec<u8>,
        scales: Vec<u8>,
    ) -> Result<Self, MxError> {
        let (nd, ns) = checked_sizes(rows, k)?;
        check_len("data", nd, data.len())?;
        check_len("scales", ns, scales.len())?;
        Ok(MxMatrix {
            rows,
            k,
            data,
            scales,
        })
    }

    /// Quantises a row-major `rows x k` f32 matrix (K contiguous), block by block.
    pub fn quantize(values: &[f32], rows: usize, k: usize) -> Result<Self, MxError> {
        let (nd, ns) = checked_sizes(rows, k)?;
        check_len("values", rows * k, values.len())?;
        let mut data = vec![0u8; nd];
        let mut scales = vec![0u8; ns];
        data.par_chunks_mut(MX_BLOCK_BYTES)
            .zip(scales.par_iter_mut())
            .zip(values.par_chunks(MX_BLOCK))
            .for_each(|((bytes, scale), block)| {
                let (s, codes) = quantize_block(block);
                *scale = s;
                for (b, pair) in bytes.iter_mut().zip(codes.chunks_exact(2)) {
                    *b = pair[0] | (pair[1] << 4);
                }
            });
        Ok(MxMatrix {
            rows,
            k,
            data,
            scales,
        })
    }

    /// A deterministic random matrix: uniformly random FP4 codes (all 16, both zeros included)
    /// and scale codes uniform in `127 ± RANDOM_SCALE_SPREAD`. The same `seed` gives the same
    /// matrix on every platform (xoshiro256++ is portable).
    pub fn random(rows: usize, k: usize, seed: u64) -> Result<Self, MxError> {
        let (nd, ns) = checked_sizes(rows, k)?;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
        let mut data = vec![0u8; nd];
        rng.fill(&mut data[..]);
        let lo = E8M0_ONE - RANDOM_SCALE_SPREAD;
        let hi = E8M0_ONE + RANDOM_SCALE_SPREAD;
        let scales = (0..ns).map(|_| rng.random_range(lo..=hi)).collect();
        Ok(MxMatrix {
            rows,
            k,
            data,
            scales,
        })
    }

    /// Decodes every element: `e2m1(code) * 2^(scale - 127)` (exact unless it overflows f32;
    /// NaN for a NaN scale), row-major `rows x k`.
    pub fn dequantize(&self) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.k];
        out.par_chunks_mut(MX_BLOCK)
            .zip(self.data.par_chunks(MX_BLOCK_BYTES))
            .zip(self.scales.par_iter())
            .for_each(|((vals, bytes), &s)| {
                let x = decode_e8m0(s);
                for (pair, &b) in vals.chunks_exact_mut(2).zip(bytes) {
                    pair[0] = decode_e2m1(b) * x;
                    pair[1] = decode_e2m1(b >> 4) * x;
                }
            });
        out
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of K elements per row.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Packed bytes per row (`k / 2`).
    pub fn k_bytes(&self) -> usize {
        self.k / 2
    }

    /// Scale blocks per row (`k / 32`).
    pub fn k_blocks(&self) -> usize {
        self.k / MX_BLOCK
    }

    /// Packed FP4 data, `[rows, k / 2]` row-major.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// E8M0 scales, `[rows, k / 32]` row-major.
    pub fn scales(&self) -> &[u8] {
        &self.scales
    }

    /// The packed data and scales, consuming the matrix.
    pub fn into_parts(self) -> (Vec<u8>, Vec<u8>) {
        (self.data, self.scales)
    }

    /// The FP4 code of element `(row, col)`, `None` outside the matrix.
    pub fn code(&self, row: usize, col: usize) -> Option<u8> {
        if row >= self.rows || col >= self.k {
            return None;
        }
        packed_code(&self.data, row * self.k + col)
    }

    /// The scale code of block `block` of `row`, `None` outside the matrix.
    pub fn scale(&self, row: usize, block: usize) -> Option<u8> {
        (row < self.rows && block < self.k_blocks())
            .then(|| self.scales[row * self.k_blocks() + block])
    }

    /// The value of element `(row, col)`, `None` outside the matrix.
    pub fn value(&self, row: usize, col: usize) -> Option<f32> {
        let code = self.code(row, col)?;
        let scale = self.scale(row, col / MX_BLOCK)?;
        Some(decode_e2m1(code) * decode_e8m0(scale))
    }
}

pub(crate) fn check_len(what: &'static str, expected: usize, actual: usize) -> Result<(), MxError> {
    if expected != actual {
        return Err(MxError::LengthMismatch {
            what,
            expected,
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn scale_follows_the_spec_formula() {
        let block = |amax: f32| {
            let mut b = [0f32; 32];
            b[7] = -amax;
            b
        };
        // floor(log2(6)) - 2 = 0 -> X = 1.
        assert_eq!(block_scale(&block(6.0)), 127);
        assert_eq!(block_scale(&block(7.9)), 127);
        assert_eq!(block_scale(&block(8.0)), 128);
        assert_eq!(block_scale(&block(1.0)), 125);
        assert_eq!(block_scale(&block(f32::MAX)), 127 + 125);
        // Clamped at the bottom of the E8M0 range.
        assert_eq!(block_scale(&block(2f32.powi(-125))), 0);
        assert_eq!(block_scale(&block(f32::from_bits(1))), 0);
        assert_eq!(block_scale(&block(f32::INFINITY)), 254);
        assert_eq!(block_scale(&[0.0; 32]), E8M0_ONE);
        let mut nan = block(1.0);
        nan[31] = f32::NAN;
        assert_eq!(block_scale(&nan), E8M0_NAN);
    }

    #[test]
    fn block_elements_saturate_and_round_even() {
        let mut b = [0f32; 32];
        b[0] = 7.0; // X = 1: 7 saturates to 6
        b[1] = 2.5; // tie: 2
        b[2] = -0.75; // tie: -1
        b[3] = 0.1; // rounds to 0
        let (s, codes) = quantize_block(&b);
        assert_eq!(s, 127);
        assert_eq!(&codes[..4], &[0x7, 0x4, 0xA, 0x0]);
        let mut nan = b;
        nan[9] = f32::NAN;
        assert_eq!(quantize_block(&nan), (E8M0_NAN, vec![0; 32]));
        let mut inf = b;
        inf[5] = f32::NEG_INFINITY;
        let (s, codes) = quantize_block(&inf);
        assert_eq!((s, codes[5], codes[0]), (254, 0xF, 0x0));
    }

    #[test]
    fn quantize_layout_and_dequantize() {
        // Row 0: a ramp in block 0, zeros in block 1. Row 1: constant 3 then -0.5.
        let mut v = vec![0f32; 2 * 64];
        for (i, x) in v[..32].iter_mut().enumerate() {
            *x = i as f32 * 0.25;
        }
        v[64..96].fill(3.0);
        v[96..].fill(-0.5);
        let m = MxMatrix::quantize(&v, 2, 64).unwrap();
        assert_eq!(m.scales(), &[127 + 2 - 2, 127, 127 + 1 - 2, 127 - 1 - 2]);
        assert_eq!((m.data().len(), m.k_bytes(), m.k_blocks()), (64, 32, 2));
        // 3.0 / 2^-1 = 6 -> code 7 in both nibbles.
        assert_eq!(m.data()[32], 0x77);
        // -0.5 / 2^-3 = -4 -> code 0xE.
        assert_eq!(m.data()[63], 0xEE);
        assert_eq!(m.code(0, 1), Some(encode_e2m1(0.25)));
        assert_eq!(m.value(1, 10), Some(3.0));
        assert_eq!(m.value(1, 40), Some(-0.5));
        assert_eq!(m.value(2, 0), None);
        assert_eq!(m.scale(0, 2), None);
        let d = m.dequantize();
        assert_eq!(&d[64..], &v[64..]);
        // The ramp's X is 1: values round to the E2M1 grid.
        assert_eq!(d[5], 1.0); // 1.25 ties to 1
        assert_eq!(d[31], 6.0); // 7.75 saturates
    }

    #[test]
    fn validation_errors() {
        assert_eq!(
            MxMatrix::quantize(&[0.0; 48], 1, 48),
            Err(MxError::NotMultiple {
                what: "k",
                value: 48,
                multiple: 32
            })
        );
        assert_eq!(MxMatrix::random(4, 0, 1), Err(MxError::Zero { what: "k" }));
        assert_eq!(
            MxMatrix::quantize(&[0.0; 63], 2, 32),
            Err(MxError::LengthMismatch {
                what: "values",
                expected: 64,
                actual: 63
            })
        );
        assert!(matches!(
            MxMatrix::random(usize::MAX / 16, 64, 0),
            Err(MxError::SizeOverflow {
                what: "rows * k",
                ..
            })
        ));
        assert_eq!(
            MxMatrix::from_parts(1, 32, vec![0; 15], vec![0; 1]),
            Err(MxError::LengthMismatch {
                what: "data",
                expected: 16,
                actual: 15
            })
        );
        assert_eq!(
            MxMatrix::from_parts(1, 32, vec![0; 16], vec![]),
            Err(MxError::LengthMismatch {
                what: "scales",
                expected: 1,
                actual: 0
            })
        );
        let m = MxMatrix::from_parts(1, 32, vec![0x21; 16], vec![127]).unwrap();
        assert_eq!(m.value(0, 1), Some(1.0));
        assert_eq!(m.into_parts(), (vec![0x21; 16], vec![127]));
        // No rows is a valid (empty) matrix.
        assert!(MxMatrix::quantize(&[], 0, 32).unwrap().data().is_empty());
    }

    #[test]
    fn random_is_deterministic_and_in_range() {
        let a = MxMatrix::random(8, 256, 42).unwrap();
        assert_eq!(a, MxMatrix::random(8, 256, 42).unwrap());
        assert_ne!(a, MxMatrix::random(8, 256, 43).unwrap());
        assert!(a.scales().iter().all(|&s| (119..=135).contains(&s)));
        // Both extremes of the scale range and all 16 codes occur in a large sample.
        let big = MxMatrix::random(64, 1024, 7).unwrap();
        assert!(big.scales().contains(&119) && big.scales().contains(&135));
        let mut seen = [false; 16];
        for &b in big.data() {
            seen[(b & 0xF) as usize] = true;
            seen[(b >> 4) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    proptest! {
        #[test]
        fn quantize_matches_the_spec_per_element(
            vals in prop::collection::vec(
                prop_oneof![-1e6f32..1e6, -1e-3f32..1e-3, Just(0.0f32)], 64)
        ) {
            let m = MxMatrix::quantize(&vals, 2, 32).unwrap();
            for (row, block) in vals.chunks(32).enumerate() {
                // Independent: f64 log2 of the block maximum.
                let amax = block.iter().fold(0f64, |a, &v| a.max(v.abs() as f64));
                let want_scale = if amax == 0.0 {
                    127
                } else {
                    (amax.log2().floor() as i32 - 2).clamp(-127, 127) + 127
                };
                prop_assert_eq!(m.scale(row, 0), Some(want_scale as u8));
                let x = 2f64.powi(want_scale - 127);
                for (col, &v) in block.iter().enumerate() {
                    let code = m.code(row, col).unwrap();
                    let got = decode_e2m1(code) as f64 * x;
                    // Saturation aside, the error is at most half the grid step (<= X).
                    let err = (got - v as f64).abs();
                    prop_assert!(err <= 2.0 * x, "{} -> {}", v, got);
                    prop_assert_eq!(code, encode_e2m1((v as f64 / x) as f32));
                }
            }
        }

        #[test]
        fn dequantize_then_quantize_is_identity_on_values(seed in any::<u64>()) {
            let m = MxMatrix::random(3, 96, seed).unwrap();
            let d = m.dequantize();
            let again = MxMatrix::quantize(&d, 3, 96).unwrap();
            prop_assert_eq!(again.dequantize(), d);
        }
    }
}
