//! The CPU reference MXFP4 GEMM — the oracle for every kernel test — and the comparison that
//! decides whether a kernel's output agrees with it.
//!
//! `C[m, n] = sum over K blocks kb, ascending, of 2^(sa + sb - 254) * S(m, n, kb)` where
//! `S` is the sum of the block's 32 products `a_k * b_k`, A is `[M, K]` and B is `[N, K]`, both
//! K-major. Every E2M1 value is a multiple of 1/2 with magnitude at most 6, so `S` is a multiple
//! of 1/4 of magnitude at most 1152 — exact in integers. Each block term is formed exactly in
//! f64, rounded once to f32, and added into an f32 accumulator in block order: the only freedom
//! a kernel has is the order (and grouping) of those f32 additions.

use std::fmt;

use half::bf16;
use rayon::prelude::*;

use crate::e8m0::E8M0_NAN;
use crate::error::MxError;
use crate::quant::{MX_BLOCK, MxMatrix};

/// Twice each E2M1 value, indexed by code: integers, so block sums are integer dot products.
const TWICE_E2M1: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// The reference product `C = A * B^T` with, per element, the sum of the magnitudes of its block
/// terms (which bounds how far a different f32 summation order can move the result).
#[derive(Clone, Debug, PartialEq)]
pub struct Reference {
    rows: usize,
    cols: usize,
    k_blocks: usize,
    c: Vec<f32>,
    abs_sum: Vec<f32>,
}

/// Every packed element as `2 * value` in `i8`, in order (doubling makes E2M1 values integers).
fn unpack_twice(bytes: &[u8]) -> Vec<i8> {
    bytes
        .iter()
        .flat_map(|&b| {
            [
                TWICE_E2M1[(b & 0xF) as usize],
                TWICE_E2M1[(b >> 4) as usize],
            ]
        })
        .collect()
}

/// `4 * S` for one block: integer dot product of doubled values.
#[inline]
fn block_dot(a: &[i8], b: &[i8]) -> i32 {
    // |products| <= 144 and 32 of them sum to at most 4608: i16 is exact and vectorises well.
    let mut sum = 0i16;
    for (&x, &y) in a.iter().zip(b) {
        sum += x as i16 * y as i16;
    }
    sum as i32
}

/// `2^e` as f64; `e` stays well inside the f64 normal range here.
fn pow2_f64(e: i32) -> f64 {
    f64::from_bits(((e + 1023) as u64) << 52)
}

/// The exact block term `2^(sa + sb - 254) * dot4 / 4` in f64 (NaN if either scale is NaN).
#[inline]
fn block_term(dot4: i32, sa: u8, sb: u8) -> f64 {
    if sa == E8M0_NAN || sb == E8M0_NAN {
        return f64::NAN;
    }
    // |dot4| <= 4608 < 2^13 and the exponent is in [-256, 252]: the product is exact in f64.
    dot4 as f64 * pow2_f64(sa as i32 + sb as i32 - 254 - 2)
}

/// Computes the reference `C[M, N] = A[M, K] * B[N, K]^T` in parallel over rows of C.
pub fn reference_gemm(a: &MxMatrix, b: &MxMatrix) -> Result<Reference, MxError> {
    if a.k() != b.k() {
        return Err(MxError::KMismatch {
            a_k: a.k(),
            b_k: b.k(),
        });
    }
    let (rows, cols, kbs) = (a.rows(), b.rows(), a.k_blocks());
    let len = rows
        .checked_mul(cols)
        .ok_or_else(|| MxError::SizeOverflow {
            what: "M * N",
            detail: format!("{rows} * {cols}"),
        })?;
    let mut c = vec![0f32; len];
    let mut abs_sum = vec![0f32; len];
    if len > 0 {
        let bv = unpack_twice(b.data());
        let k = a.k();
        c.par_chunks_mut(cols)
            .zip(abs_sum.par_chunks_mut(cols))
            .enumerate()
            .for_each(|(m, (c_row, abs_row))| {
                let av = unpack_twice(&a.data()[m * k / 2..(m + 1) * k / 2]);
                let sa = &a.scales()[m * kbs..(m + 1) * kbs];
                for (n, (out, abs_out)) in c_row.iter_mut().zip(abs_row.iter_mut()).enumerate() {
                    let bn = &bv[n * k..(n + 1) * k];
                    let sb = &b.scales()[n * kbs..(n + 1) * kbs];
                    let mut acc = 0f32;
                    let mut abs = 0f64;
                    let blocks = av.chunks_exact(MX_BLOCK).zip(bn.chunks_exact(MX_BLOCK));
                    for ((x, y), (&s, &t)) in blocks.zip(sa.iter().zip(sb)) {
                        let term = block_term(block_dot(x, y), s, t);
                        acc += term as f32;
                        abs += term.abs();
                    }
                    *out = acc;
                    *abs_out = abs as f32;
                }
            });
    }
    Ok(Reference {
        rows,
        cols,
        k_blocks: kbs,
        c,
        abs_sum,
    })
}

/// The reference product in f32 (see [`reference_gemm`]).
pub fn gemm_f32(a: &MxMatrix, b: &MxMatrix) -> Result<Vec<f32>, MxError> {
    Ok(reference_gemm(a, b)?.c)
}

/// The reference product accumulated in f32 and rounded once to bf16 (nearest even).
pub fn gemm_bf16(a: &MxMatrix, b: &MxMatrix) -> Result<Vec<bf16>, MxError> {
    Ok(reference_gemm(a, b)?.to_bf16())
}

/// The spacing of bf16 values at `|x|` (the subnormal spacing below the normal range).
fn bf16_ulp(x: f32) -> f64 {
    let a = x.abs() as f64;
    if a < 2f64.powi(-126) {
        return 2f64.powi(-133);
    }
    let e = ((a.to_bits() >> 52) as i32) - 1023;
    2f64.powi(e - 7)
}

/// One element of a comparison.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ElementDiff {
    /// Row of C.
    pub row: usize,
    /// Column of C.
    pub col: usize,
    /// The candidate's value (bf16 widened to f32).
    pub got: f32,
    /// The reference value.
    pub want: f32,
    /// The largest difference the accumulation order can explain.
    pub bound: f64,
}

impl ElementDiff {
    /// `|got - want| / bound`: above 1 is a mismatch; infinite for a NaN/Inf disagreement or a
    /// nonzero difference against a zero bound.
    pub fn ratio(&self) -> f64 {
        let (g, w) = (self.got as f64, self.want as f64);
        if w.is_nan() || g.is_nan() || w.is_infinite() || g.is_infinite() {
            let same = (w.is_nan() && g.is_nan()) || g == w;
            return if same { 0.0 } else { f64::INFINITY };
        }
        let err = (g - w).abs();
        if err == 0.0 {
            0.0
        } else if self.bound == 0.0 {
            f64::INFINITY
        } else {
            err / self.bound
        }
    }

    /// Whether the candidate agrees with the reference at this element.
    pub fn agrees(&self) -> bool {
        self.ratio() <= 1.0
    }
}

/// The outcome of comparing a candidate C with the reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Comparison {
    /// Elements compared.
    pub elements: usize,
    /// Elements outside their bound.
    pub mismatches: usize,
    /// The element with the largest [`ElementDiff::ratio`] (the first such, row-major);
    /// `None` when C is empty.
    pub worst: Option<ElementDiff>,
}

impl Comparison {
    /// Whether every element agrees.
    pub fn passed(&self) -> bool {
        self.mismatches == 0
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} of {} elements mismatch",
            self.mismatches, self.elements
        )?;
        if let Some(w) = &self.worst {
            write!(
                f,
                "; worst at ({}, {}): got {:e}, want {:e}, bound {:e}",
                w.row, w.col, w.got, w.want, w.bound
            )?;
        }
        Ok(())
    }
}

impl Reference {
    /// Rows of C (M).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Columns of C (N).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// K blocks summed per element.
    pub fn k_blocks(&self) -> usize {
        self.k_blocks
    }

    /// C in f32, row-major `[M, N]`.
    pub fn c(&self) -> &[f32] {
        &self.c
    }

    /// Per element, the sum of `|block term|` over the K blocks.
    pub fn abs_sum(&self) -> &[f32] {
        &self.abs_sum
    }

    /// C rounded to bf16 (nearest even).
    pub fn to_bf16(&self) -> Vec<bf16> {
        self.c.par_iter().map(|&x| bf16::from_f32(x)).collect()
    }

    /// The f32 bound at flat index `i`: `k_blocks * EPSILON * abs_sum[i]`. Two f32 sums of the
    /// same terms in different orders differ by at most `(k_blocks - 1) * EPSILON * sum|terms|`;
    /// the extra term covers a kernel that rounds each block term itself.
    fn f32_bound(&self, i: usize) -> f64 {
        self.k_blocks as f64 * f32::EPSILON as f64 * self.abs_sum[i] as f64
    }

    fn compare(
        &self,
        len: usize,
        got: impl Fn(usize) -> f32 + Sync,
        extra: impl Fn(f32) -> f64 + Sync,
    ) -> Result<Comparison, MxError> {
        if len != self.c.len() {
            return Err(MxError::ShapeMismatch {
                rows: self.rows,
                cols: self.cols,
                actual: len,
            });
        }
        let diff = |i: usize| {
            let want = self.c[i];
            ElementDiff {
                row: i / self.cols,
                col: i % self.cols,
                got: got(i),
                want,
                bound: self.f32_bound(i) + extra(want),
            }
        };
        let (mismatches, worst) = (0..len)
            .into_par_iter()
            .map(|i| {
                let d = diff(i);
                (usize::from(!d.agrees()), Some((d.ratio(), i)))
            })
            .reduce(
                || (0, None),
                |(ma, wa), (mb, wb)| {
                    let w = match (wa, wb) {
                        (Some(a), Some(b)) => Some(if b.0 > a.0 || (b.0 == a.0 && b.1 < a.1) {
                            b
                        } else {
                            a
                        }),
                        (a, b) => a.or(b),
                    };
                    (ma + mb, w)
                },
            );
        Ok(Comparison {
            elements: len,
            mismatches,
            worst: worst.map(|(_, i)| diff(i)),
        })
    }

    /// Compares an f32 candidate (row-major `[M, N]`); the only allowed difference is the f32
    /// accumulation order: per element `|got - want| <= k_blocks * EPSILON * abs_sum`. A NaN
    /// reference needs a NaN candidate; an infinite one needs the same infinity.
    pub fn compare_f32(&self, got: &[f32]) -> Result<Comparison, MxError> {
        self.compare(got.len(), |i| got[i], |_| 0.0)
    }

    /// Compares a bf16 candidate: the f32 bound plus one bf16 ulp of the reference value.
    pub fn compare_bf16(&self, got: &[bf16]) -> Result<Comparison, MxError> {
        self.compare(got.len(), |i| got[i].to_f32(), bf16_ulp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::MxMatrix;

    /// The same GEMM from dequantised values, one block at a time in f64 (exact), then the same
    /// f32 accumulation: independent of the integer trick.
    fn naive(a: &MxMatrix, b: &MxMatrix) -> Vec<f32> {
        let (da, db) = (a.dequantize(), b.dequantize());
        let k = a.k();
        let mut c = vec![0f32; a.rows() * b.rows()];
        for m in 0..a.rows() {
            for n in 0..b.rows() {
                let mut acc = 0f32;
                for kb in 0..k / 32 {
                    let t: f64 = (kb * 32..(kb + 1) * 32)
                        .map(|i| da[m * k + i] as f64 * db[n * k + i] as f64)
                        .sum();
                    acc += t as f32;
                }
                c[m * b.rows() + n] = acc;
            }
        }
        c
    }

    #[test]
    fn matches_a_naive_dequantised_gemm() {
        let a = MxMatrix::random(7, 256, 1).unwrap();
        let b = MxMatrix::random(5, 256, 2).unwrap();
        let r = reference_gemm(&a, &b).unwrap();
        assert_eq!(r.c(), naive(&a, &b).as_slice());
        assert_eq!((r.rows(), r.cols(), r.k_blocks()), (7, 5, 8));
        assert_eq!(gemm_f32(&a, &b).unwrap(), r.c());
        let bf = gemm_bf16(&a, &b).unwrap();
        assert_eq!(bf[3], bf16::from_f32(r.c()[3]));
    }

    #[test]
    fn hand_computed_element() {
        // A row: all 1.0 (code 2) with scale 2^1; B row: all -1.5 (code 0xB) with scale 2^-2.
        // Block sum -48, scaled by 2^-1: -24 per block, two blocks: -48.
        let a = MxMatrix::from_parts(1, 64, vec![0x22; 32], vec![128, 128]).unwrap();
        let b = MxMatrix::from_parts(1, 64, vec![0xBB; 32], vec![125, 125]).unwrap();
        let r = reference_gemm(&a, &b).unwrap();
        assert_eq!(r.c(), &[-48.0]);
        assert_eq!(r.abs_sum(), &[48.0]);
    }

    #[test]
    fn extreme_scales_are_exact_or_rounded_once() {
        // 2^(0 + 0 - 254) * 6 * 6 * 32 underflows f32 to zero; 2^(254 + 254 - 254) overflows.
        let a = MxMatrix::from_parts(1, 32, vec![0x77; 16], vec![0]).unwrap();
        let b = MxMatrix::from_parts(2, 32, vec![0x77; 32], vec![0, 254]).unwrap();
        let r = reference_gemm(&a, &b).unwrap();
        assert_eq!(r.c()[0], 0.0);
        // Scales 2^-127 and 2^127 cancel exactly.
        assert_eq!(r.c()[1], 1152.0);
        let big = MxMatrix::from_parts(1, 32, vec![0x77; 16], vec![254]).unwrap();
        let r = reference_gemm(&big, &big).unwrap();
        assert_eq!(r.c()[0], f32::INFINITY);
    }

    #[test]
    fn nan_scales_propagate() {
        let a = MxMatrix::from_parts(1, 64, vec![0x11; 32], vec![127, E8M0_NAN]).unwrap();
        let b = MxMatrix::random(2, 64, 3).unwrap();
        let r = reference_gemm(&a, &b).unwrap();
        assert!(r.c().iter().all(|x| x.is_nan()));
        let cmp = r.compare_f32(&[f32::NAN, f32::NAN]).unwrap();
        assert!(cmp.passed());
        let cmp = r.compare_f32(&[f32::NAN, 1.0]).unwrap();
        assert_eq!(cmp.mismatches, 1);
        assert_eq!(cmp.worst.unwrap().col, 1);
    }

    #[test]
    fn errors() {
        let a = MxMatrix::random(2, 64, 1).unwrap();
        let b = MxMatrix::random(2, 96, 1).unwrap();
        assert_eq!(
            reference_gemm(&a, &b),
            Err(MxError::KMismatch { a_k: 64, b_k: 96 })
        );
        let r = reference_gemm(&a, &a).unwrap();
        assert_eq!(
            r.compare_f32(&[0.0; 3]),
            Err(MxError::ShapeMismatch {
                rows: 2,
                cols: 2,
                actual: 3
            })
        );
        assert!(r.compare_bf16(&[bf16::ZERO; 5]).is_err());
        let empty = MxMatrix::random(0, 64, 1).unwrap();
        let r = reference_gemm(&empty, &a).unwrap();
        assert!(r.c().is_empty());
        assert_eq!(r.compare_f32(&[]).unwrap().worst, None);
    }

    /// Re-accumulates each element's block terms in reverse order: a legal kernel result.
    fn reversed(a: &MxMatrix, b: &MxMatrix) -> Vec<f32> {
        let (av, bv) = (unpack_twice(a.data()), unpack_twice(b.data()));
        let (k, kbs) = (a.k(), a.k_blocks());
        let mut c = Vec::new();
        for m in 0..a.rows() {
            for n in 0..b.rows() {
                let mut acc = 0f32;
                for kb in (0..kbs).rev() {
                    let r = kb * 32..(kb + 1) * 32;
                    let d = block_dot(&av[m * k..][r.clone()], &bv[n * k..][r]);
                    let t = block_term(d, a.scale(m, kb).unwrap(), b.scale(n, kb).unwrap());
                    acc += t as f32;
                }
                c.push(acc);
            }
        }
        c
    }

    #[test]
    fn comparison_accepts_reordering_and_rejects_real_errors() {
        let a = MxMatrix::random(16, 2048, 10).unwrap();
        let b = MxMatrix::random(12, 2048, 11).unwrap();
        let r = reference_gemm(&a, &b).unwrap();
        let rev = reversed(&a, &b);
        // The orders really differ somewhere, and the comparison accepts them.
        assert!(rev.iter().zip(r.c()).any(|(x, y)| x != y));
        let cmp = r.compare_f32(&rev).unwrap();
        assert!(cmp.passed(), "{cmp}");
        assert_eq!(cmp.elements, 16 * 12);
        // One block term dropped is far outside the bound.
        let mut bad = r.c().to_vec();
        bad[37] += 0.25 * (r.abs_sum()[37] / 64.0).max(1.0);
        let cmp = r.compare_f32(&bad).unwrap();
        assert_eq!(cmp.mismatches, 1);
        let w = cmp.worst.unwrap();
        assert_eq!((w.row, w.col), (3, 1));
        assert!(w.ratio() > 1.0 && !w.agrees());
        assert!(
            cmp.to_string()
                .starts_with("1 of 192 elements mismatch; worst at (3, 1)")
        );
    }

    #[test]
    fn bf16_comparison_allows_one_ulp() {
        let a = MxMatrix::random(8, 512, 20).unwrap();
        let b = MxMatrix::random(8, 512, 21).unwrap();
        let r = reference_gemm(&a, &b).unwrap();
        let c16 = r.to_bf16();
        assert!(r.compare_bf16(&c16).unwrap().passed());
        // Rounding the reversed-order f32 result is also fine.
        let rev: Vec<bf16> = reversed(&a, &b).into_iter().map(bf16::from_f32).collect();
        assert!(r.compare_bf16(&rev).unwrap().passed());
        // Three ulps away is not, at an element whose f32 bound is well below an ulp.
        let i = (0..64)
            .find(|&i| {
                let f32_bound = 16.0 * f32::EPSILON as f64 * r.abs_sum()[i] as f64;
                r.c()[i] != 0.0 && f32_bound < 0.5 * bf16_ulp(r.c()[i])
            })
            .unwrap();
        let mut bad = c16.clone();
        let step = bf16::from_bits(c16[i].to_bits() + 3);
        bad[i] = step;
        let cmp = r.compare_bf16(&bad).unwrap();
        assert_eq!(cmp.mismatches, 1, "{cmp}");
        assert_eq!(bf16_ulp(1.0), 2f64.powi(-7));
        assert_eq!(bf16_ulp(-3.0), 2f64.powi(-6));
        assert_eq!(bf16_ulp(0.0), 2f64.powi(-133));
    }
}
