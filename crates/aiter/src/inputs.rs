//! Host-side inputs for the f4gemm kernels: A as is, B and both scale arrays in the layouts the
//! BpreShuffle kernels read.
//!
//! B goes through [`Shuffler::preshuffle_b_5d`], which is AITER's `shuffle_weight(x, (16, 16))`.
//! The scales are first padded as AITER's `e8m0_shuffle` pads them (rows to a multiple of 256,
//! columns K/32 to a multiple of 8, with zero bytes) and then go through
//! [`Shuffler::preshuffle_scale_4d`], which is `e8m0_shuffle`'s permutation; the padded rows
//! only add whole 32-row tiles after the real ones, so real rows land where AITER puts them.

use tilegen_mx::{MxMatrix, Shuffler};

use crate::error::{AiterError, ProblemError};
use crate::kernargs::{Field, GemmProblem};

/// The four input buffers of a problem, ready to copy to the device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GemmInputs {
    a: Vec<u8>,
    b: Vec<u8>,
    scale_a: Vec<u8>,
    scale_b: Vec<u8>,
}

fn check_operand(
    operand: &'static str,
    x: &MxMatrix,
    rows: u32,
    k: u32,
) -> Result<(), ProblemError> {
    if x.rows() != rows as usize || x.k() != k as usize {
        return Err(ProblemError::OperandShape {
            operand,
            rows: x.rows(),
            k: x.k(),
            want_rows: rows,
            want_k: k,
        });
    }
    Ok(())
}

/// Row-major E8M0 scales `[rows, k_blocks]` padded with zero bytes to AITER's padded shape
/// and preshuffled: `scale_rows(rows) * scale_cols` bytes.
pub fn preshuffle_scales(
    problem: &GemmProblem,
    rows: u32,
    scales: &[u8],
) -> Result<Vec<u8>, AiterError> {
    let k_blocks = problem.k() as usize / 32;
    let (rows_p, cols_p) = (
        GemmProblem::scale_rows(rows) as usize,
        problem.scale_cols() as usize,
    );
    if scales.len() != rows as usize * k_blocks {
        return Err(tilegen_mx::MxError::LengthMismatch {
            what: "scales",
            expected: rows as usize * k_blocks,
            actual: scales.len(),
        }
        .into());
    }
    let mut padded = vec![0u8; rows_p * cols_p];
    for (from, to) in scales
        .chunks_exact(k_blocks)
        .zip(padded.chunks_exact_mut(cols_p))
    {
        to[..k_blocks].copy_from_slice(from);
    }
    let mut out = vec![0u8; rows_p * cols_p];
    Shuffler::new(1)?.preshuffle_scale_4d(rows_p, cols_p, &padded, &mut out)?;
    Ok(out)
}

impl GemmInputs {
    /// Lays out `a` (`M x K`) and `b` (`N x K`) for `problem`.
    pub fn prepare(problem: &GemmProblem, a: &MxMatrix, b: &MxMatrix) -> Result<Self, AiterError> {
        check_operand("A", a, problem.m(), problem.k())?;
        check_operand("B", b, problem.n(), problem.k())?;
        let shuffler = Shuffler::new(1)?;
        let mut b_shuffled = vec![0u8; b.data().len()];
        shuffler.preshuffle_b_5d(b.rows(), b.k_bytes(), b.data(), &mut b_shuffled)?;
        Ok(GemmInputs {
            a: a.data().to_vec(),
            b: b_shuffled,
            scale_a: preshuffle_scales(problem, problem.m(), a.scales())?,
            scale_b: preshuffle_scales(problem, problem.n(), b.scales())?,
        })
    }

    /// A, packed FP4 `[M, K/2]` row-major.
    pub fn a(&self) -> &[u8] {
        &self.a
    }

    /// B, packed FP4 `[N, K/2]` preshuffled.
    pub fn b(&self) -> &[u8] {
        &self.b
    }

    /// A's scales, padded and preshuffled.
    pub fn scale_a(&self) -> &[u8] {
        &self.scale_a
    }

    /// B's scales, padded and preshuffled.
    pub fn scale_b(&self) -> &[u8] {
        &self.scale_b
    }

    /// The bytes for an input pointer field (A, B, ScaleA, ScaleB); `None` for D, C and
    /// non-pointer fields.
    pub fn get(&self, field: Field) -> Option<&[u8]> {
        match field {
            Field::A => Some(&self.a),
            Field::B => Some(&self.b),
            Field::ScaleA => Some(&self.scale_a),
            Field::ScaleB => Some(&self.scale_b),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernargs::GemmLaunch;
    use crate::kernel::tests::kernel;

    /// AITER's `e8m0_shuffle` written out: pad to `(ceil256(m), ceil8(n))`, view as
    /// `(sm/32, 2, 16, sn/8, 2, 4)`, permute `(0, 3, 5, 2, 4, 1)`.
    fn e8m0_shuffle(m: usize, n: usize, s: &[u8]) -> Vec<u8> {
        let (sm, sn) = (m.next_multiple_of(256), n.next_multiple_of(8));
        let mut padded = vec![0u8; sm * sn];
        for r in 0..m {
            padded[r * sn..r * sn + n].copy_from_slice(&s[r * n..(r + 1) * n]);
        }
        let mut out = Vec::with_capacity(sm * sn);
        for t0 in 0..sm / 32 {
            for t3 in 0..sn / 8 {
                for t5 in 0..4 {
                    for t2 in 0..16 {
                        for t4 in 0..2 {
                            for t1 in 0..2 {
                                let row = t0 * 32 + t1 * 16 + t2;
                                let col = t3 * 8 + t4 * 4 + t5;
                                out.push(padded[row * sn + col]);
                            }
                        }
                    }
                }
            }
        }
        out
    }

    /// AITER's `shuffle_weight(x, (16, 16))` for bytes: view `(N/16, 16, Kb/32, 2, 16)`,
    /// permute `(0, 2, 3, 1, 4)`.
    fn shuffle_weight(n: usize, kb: usize, x: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(n * kb);
        for t0 in 0..n / 16 {
            for t2 in 0..kb / 32 {
                for t3 in 0..2 {
                    for t1 in 0..16 {
                        for t4 in 0..16 {
                            out.push(x[(t0 * 16 + t1) * kb + t2 * 32 + t3 * 16 + t4]);
                        }
                    }
                }
            }
        }
        out
    }

    #[test]
    fn layouts_are_aiters() {
        let (m, n, k) = (37, 96, 768);
        let p = GemmProblem::new(m, n, k).unwrap();
        let a = MxMatrix::random(m as usize, k as usize, 1).unwrap();
        let b = MxMatrix::random(n as usize, k as usize, 2).unwrap();
        let inputs = GemmInputs::prepare(&p, &a, &b).unwrap();
        assert_eq!(inputs.a(), a.data());
        assert_eq!(inputs.b(), shuffle_weight(96, 384, b.data()));
        assert_eq!(inputs.scale_a(), e8m0_shuffle(37, 24, a.scales()));
        assert_eq!(inputs.scale_b(), e8m0_shuffle(96, 24, b.scales()));
        // The sizes are the launch's buffer sizes.
        let l = GemmLaunch::new(&kernel(32, 128, false), p).unwrap();
        for spec in l.buffers() {
            if let Some(bytes) = inputs.get(spec.field()) {
                assert_eq!(bytes.len() as u64, spec.bytes(), "{:?}", spec.field());
            }
        }
        assert!(inputs.get(Field::D).is_none());
    }

    #[test]
    fn refuses_operands_of_another_shape() {
        let p = GemmProblem::new(32, 32, 256).unwrap();
        let a = MxMatrix::random(32, 256, 1).unwrap();
        let b = MxMatrix::random(16, 256, 2).unwrap();
        let e = GemmInputs::prepare(&p, &a, &b).unwrap_err();
        assert!(
            matches!(
                e,
                AiterError::Problem(ProblemError::OperandShape { operand: "B", .. })
            ),
            "{e}"
        );
        let e = preshuffle_scales(&p, 32, &[0; 7]).unwrap_err();
        assert!(matches!(e, AiterError::Mx(_)), "{e}");
    }
}
