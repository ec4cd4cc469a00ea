//! A tile-quantized roofline: `time = launch + max(quantized flops / peak, bytes / bandwidth)`.
//!
//! * Quantized flops: every workgroup computes a whole `tile_m x tile_n` tile over its K slice,
//!   and workgroups run in waves of [`MI355X_CUS`] (one per CU), so the compute term is
//!   `ceil(workgroups / CUs) * CUs * 2 * tile_m * tile_n * k_per_split`.
//! * Bytes: each operand once from memory: A and B (`K/2` bytes per row), their E8M0 scales
//!   (`K/32` per row), and D (`2` bytes per element, once per K slice: split slices add into it).
//!
//! The three parameters (launch overhead, effective peak, effective bandwidth) are fitted by
//! least squares on `log(predicted) - log(measured)` over the calibration rows only, with a
//! Nelder-Mead search over their logarithms.

use crate::calibrate::{CalibrationRow, MI355X_CUS, PredictError, Predictor, Set, launch_for_row};
use crate::error::AiterError;
use crate::kernel::F4GemmKernel;
use crate::table::TableRow;

/// The two sides of the roofline for one launch.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RooflineTerms {
    /// Tile- and wave-quantized floating-point operations.
    pub quantized_flops: f64,
    /// Bytes moved to and from memory.
    pub bytes: f64,
}

impl RooflineTerms {
    /// The terms of `row`'s launch of `kernel`.
    pub fn of(row: &TableRow, kernel: &F4GemmKernel) -> Result<Self, AiterError> {
        let launch = launch_for_row(row, kernel)?;
        let (m, n, k) = (row.m() as f64, row.n() as f64, row.k() as f64);
        let waves = launch.workgroups().div_ceil(MI355X_CUS as u64) as f64;
        let tile_flops =
            2.0 * kernel.tile_m() as f64 * kernel.tile_n() as f64 * launch.k_per_split() as f64;
        let splits = launch.k_splits() as f64;
        Ok(RooflineTerms {
            quantized_flops: waves * MI355X_CUS as f64 * tile_flops,
            bytes: (m + n) * (k / 2.0 + k / 32.0) + m * n * 2.0 * splits,
        })
    }
}

/// The fitted roofline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Roofline {
    launch_us: f64,
    peak_tflops: f64,
    bandwidth_gbps: f64,
}

/// `ln(predicted) - ln(measured)` residuals summed in squares; `params` are the logarithms.
fn loss(params: [f64; 3], data: &[(RooflineTerms, f64)]) -> f64 {
    let r = Roofline {
        launch_us: params[0].exp(),
        peak_tflops: params[1].exp(),
        bandwidth_gbps: params[2].exp(),
    };
    data.iter()
        .map(|(t, us)| {
            let d = r.time_us(t).ln() - us.ln();
            d * d
        })
        .sum()
}

/// Nelder-Mead minimisation of `f` from `start` with initial steps `step`.
fn nelder_mead(f: impl Fn([f64; 3]) -> f64, start: [f64; 3], step: f64) -> ([f64; 3], f64) {
    let mut simplex: Vec<([f64; 3], f64)> = (0..4)
        .map(|i| {
            let mut p = start;
            if i > 0 {
                p[i - 1] += step;
            }
            (p, f(p))
        })
        .collect();
    let lerp = |a: [f64; 3], b: [f64; 3], t: f64| -> [f64; 3] {
        [0, 1, 2].map(|i| a[i] + t * (b[i] - a[i]))
    };
    for _ in 0..5000 {
        simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
        if (simplex[3].1 - simplex[0].1).abs() <= 1e-14 * (1.0 + simplex[0].1.abs()) {
            break;
        }
        let centroid = [0, 1, 2].map(|i| simplex[..3].iter().map(|(p, _)| p[i]).sum::<f64>() / 3.0);
        let worst = simplex[3];
        let reflected = lerp(centroid, worst.0, -1.0);
        let fr = f(reflected);
        if fr < simplex[0].1 {
            let expanded = lerp(centroid, worst.0, -2.0);
            let fe = f(expanded);
            simplex[3] = if fe < fr {
                (expanded, fe)
            } else {
                (reflected, fr)
            };
        } else if fr < simplex[2].1 {
            simplex[3] = (reflected, fr);
        } else {
            let contracted = if fr < worst.1 {
                lerp(centroid, reflected, 0.5)
            } else {
                lerp(centroid, worst.0, 0.5)
            };
            let fc = f(contracted);
            if fc < worst.1.min(fr) {
                simplex[3] = (contracted, fc);
            } else {
                let best = simplex[0].0;
                for v in simplex.iter_mut().skip(1) {
                    v.0 = lerp(best, v.0, 0.5);
                    v.1 = f(v.0);
                }
            }
        }
    }
    simplex.sort_by(|a, b| a.1.total_cmp(&b.1));
    simplex[0]
}

impl Roofline {
    /// The predictor's name.
    pub const NAME: &'static str = "roofline";

    /// A roofline with given parameters: launch overhead in microseconds, effective peak in
    /// TFLOP/s and effective bandwidth in GB/s (all positive and finite).
    pub fn new(launch_us: f64, peak_tflops: f64, bandwidth_gbps: f64) -> Result<Self, AiterError> {
        for (what, v) in [
            ("launch_us", launch_us),
            ("peak_tflops", peak_tflops),
            ("bandwidth_gbps", bandwidth_gbps),
        ] {
            if !(v.is_finite() && v > 0.0) {
                return Err(AiterError::Fit {
                    predictor: Self::NAME.into(),
                    problem: format!("{what} = {v} must be positive and finite"),
                });
            }
        }
        Ok(Roofline {
            launch_us,
            peak_tflops,
            bandwidth_gbps,
        })
    }

    /// Fits the parameters on the [`Set::Calibration`] rows of `rows` (the others are ignored).
    pub fn fit(rows: &[CalibrationRow]) -> Result<Self, AiterError> {
        let data: Vec<(RooflineTerms, f64)> = rows
            .iter()
            .filter(|r| r.set() == Set::Calibration)
            .map(|r| Ok((RooflineTerms::of(r.row(), r.kernel())?, r.row().us())))
            .collect::<Result<_, AiterError>>()?;
        if data.len() < 3 {
            return Err(AiterError::Fit {
                predictor: Self::NAME.into(),
                problem: format!(
                    "{} calibration rows, at least 3 are needed for 3 parameters",
                    data.len()
                ),
            });
        }
        // Start from MI355X's nominal dense MXFP4 peak and HBM bandwidth, a few us of launch;
        // restart the search from its own result until it stops improving.
        let mut best = {
            let start = [2f64.ln(), 10_000f64.ln(), 8_000f64.ln()];
            (start, loss(start, &data))
        };
        for _ in 0..8 {
            let next = nelder_mead(|p| loss(p, &data), best.0, 0.5);
            let improved = next.1 < best.1 * (1.0 - 1e-12);
            best = if next.1 <= best.1 { next } else { best };
            if !improved {
                break;
            }
        }
        let [l, p, b] = best.0.map(f64::exp);
        Roofline::new(l, p, b)
    }

    /// Launch overhead in microseconds.
    pub fn launch_us(&self) -> f64 {
        self.launch_us
    }

    /// Effective peak in TFLOP/s.
    pub fn peak_tflops(&self) -> f64 {
        self.peak_tflops
    }

    /// Effective bandwidth in GB/s.
    pub fn bandwidth_gbps(&self) -> f64 {
        self.bandwidth_gbps
    }

    /// The predicted time of a launch with these terms, in microseconds.
    pub fn time_us(&self, t: &RooflineTerms) -> f64 {
        // 1 TFLOP/s = 1e6 flop per us; 1 GB/s = 1e3 bytes per us.
        let compute = t.quantized_flops / (self.peak_tflops * 1e6);
        let memory = t.bytes / (self.bandwidth_gbps * 1e3);
        self.launch_us + compute.max(memory)
    }
}

impl Predictor for Roofline {
    fn name(&self) -> &str {
        Self::NAME
    }

    fn summary(&self) -> String {
        format!(
            "{}: {:.2} us + max(quantized flops / {:.0} TFLOP/s, bytes / {:.0} GB/s), fitted on the calibration rows",
            Self::NAME,
            self.launch_us,
            self.peak_tflops,
            self.bandwidth_gbps
        )
    }

    fn predict_us(&self, row: &TableRow, kernel: &F4GemmKernel) -> Result<f64, PredictError> {
        Ok(self.time_us(&RooflineTerms::of(row, kernel)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::tests::crow;
    use crate::kernel::tests::kernel;

    #[test]
    fn terms_quantize_tiles_and_waves() {
        let k = kernel(32, 128, false);
        let r = crow(33, 256, 512, 1.0, &k);
        let t = RooflineTerms::of(r.row(), &k).unwrap();
        // 2 x 2 workgroups fit one wave: 256 CUs' worth of 32x128x512 tiles.
        assert_eq!(t.quantized_flops, 256.0 * 2.0 * 32.0 * 128.0 * 512.0);
        assert_eq!(
            t.bytes,
            (33.0 + 256.0) * (256.0 + 16.0) + 33.0 * 256.0 * 2.0
        );
        // 257 workgroups need two waves.
        let r = crow(32 * 257, 128, 512, 1.0, &k);
        let t2 = RooflineTerms::of(r.row(), &k).unwrap();
        assert_eq!(t2.quantized_flops, 2.0 * t.quantized_flops);
    }

    #[test]
    fn time_is_launch_plus_the_larger_side() {
        let r = Roofline::new(2.0, 1000.0, 1000.0).unwrap();
        let t = RooflineTerms {
            quantized_flops: 3e6,
            bytes: 1e3,
        };
        assert_eq!(r.time_us(&t), 2.0 + 3e-3);
        let t = RooflineTerms {
            quantized_flops: 1.0,
            bytes: 5e6,
        };
        assert_eq!(r.time_us(&t), 2.0 + 5.0);
        assert!(Roofline::new(0.0, 1.0, 1.0).is_err());
        assert!(Roofline::new(1.0, f64::NAN, 1.0).is_err());
    }

    #[test]
    fn fit_recovers_parameters_from_calibration_rows_only() {
        let truth = Roofline::new(3.0, 4000.0, 5000.0).unwrap();
        let kernels = [
            kernel(32, 128, false),
            kernel(128, 512, true),
            kernel(160, 256, false),
        ];
        let mut rows = Vec::new();
        for (i, k) in kernels.iter().enumerate() {
            for m in [1, 16, 200, 1000, 5000, 20000] {
                for (n, kk) in [(1024, 1024), (8192, 4096), (16384, 16384)] {
                    let r = crow(m, n, kk, 1.0, k);
                    let us = truth.time_us(&RooflineTerms::of(r.row(), k).unwrap())
                        * (1.0 + 0.01 * i as f64);
                    rows.push(crow(m, n, kk, us, k));
                }
            }
        }
        // A held-out row with an absurd time must not move the fit.
        let held = kernel(256, 256, true);
        rows.push(crow(64, 1024, 1024, 1e6, &held));
        let fitted = Roofline::fit(&rows).unwrap();
        let close = |a: f64, b: f64| (a / b - 1.0).abs() < 0.05;
        assert!(close(fitted.launch_us(), 3.0), "{fitted:?}");
        assert!(close(fitted.peak_tflops(), 4000.0), "{fitted:?}");
        assert!(close(fitted.bandwidth_gbps(), 5000.0), "{fitted:?}");
        assert!(Roofline::fit(&rows[rows.len() - 1..]).is_err());
    }
}
