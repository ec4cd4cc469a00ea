//! Timing AITER's kernels on a device (an MI355X through HSA), and refitting the timing model
//! on those times: what `tilegen calibrate` measures and fits.
//!
//! # What a row's time is
//! The row's launch is AITER's ([`launch_for_row`](crate::calibrate::launch_for_row): its
//! shape, its split, D packed). The inputs are random MXFP4 matrices of the row's sizes, B and
//! both scale arrays laid out as the kernels read them ([`GemmInputs`]); D starts zeroed. The kernel is launched `warmup` times
//! untimed, then `repeats` times timed; a launch's time is the device's own
//! ([`LaunchReport::wall`](tilegen_device::LaunchReport): an HSA agent's profiled end - start
//! of the dispatch), and the row's time is the median.
//!
//! # What its error ratio is
//! AITER's tuner writes, per row, the fraction of output elements outside
//! `|reference - output| <= atol + rtol |output|` with `atol = rtol = 0.01` (its a4w4 asm
//! tuning tasks' tolerances), the reference rounded to bf16. Here the same test runs on a
//! sample of D after the last timed launch: up to [`CHECK_ROWS`] rows and [`CHECK_COLS`]
//! columns, evenly spaced from the first to the last (so the ragged last tiles are in it),
//! against `tilegen_mx`'s reference GEMM of those rows and columns. A split-K launch adds into
//! D, so D is zeroed again before the last timed launch; its slices' bf16 atomic adds round
//! the running sums, which puts some elements (where the slices cancel) outside the tolerance.
//!
//! # The refit
//! [`refit`] fits the model's free parameters on the measured calibration rows by the
//! procedure of [`fit`] and runs the model before and after the fit on every measured row,
//! calibration and held out.

use std::collections::HashMap;
use std::path::PathBuf;

use half::bf16;
use tilegen_device::{Device, DevicePtr, LaunchConfig, Module, RuntimeError};
use tilegen_mx::{MxMatrix, reference_gemm};
use tilegen_timing::Params;

use crate::calibrate::fit::{self, FitOptions, Fitted};
use crate::calibrate::{CalibrationRow, ErrorStats, Evaluation, Group, Set, TimingModel};
use crate::error::AiterError;
use crate::inputs::GemmInputs;
use crate::kernargs::{Field, GemmLaunch, GemmPointers};

/// AITER's absolute tolerance for an a4w4 asm kernel's output.
pub const CHECK_ATOL: f64 = 0.01;
/// AITER's relative tolerance for an a4w4 asm kernel's output.
pub const CHECK_RTOL: f64 = 0.01;
/// Rows of D checked at most.
pub const CHECK_ROWS: usize = 8;
/// Columns of D checked at most.
pub const CHECK_COLS: usize = 256;

/// How many launches a row gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimingSettings {
    warmup: u32,
    repeats: u32,
    seed: u64,
}

impl TimingSettings {
    /// `warmup` untimed launches, then `repeats` (at least 1) timed ones.
    pub fn new(warmup: u32, repeats: u32) -> Result<TimingSettings, AiterError> {
        if repeats == 0 {
            return Err(AiterError::Settings(
                "at least one timed launch per row is needed (repeats 0)".into(),
            ));
        }
        Ok(TimingSettings {
            warmup,
            repeats,
            seed: 0x5eed,
        })
    }

    /// The inputs' seed (each shape's inputs derive from it); 0x5eed by default.
    pub fn seed(mut self, seed: u64) -> TimingSettings {
        self.seed = seed;
        self
    }

    /// Untimed launches per row.
    pub fn warmup(&self) -> u32 {
        self.warmup
    }

    /// Timed launches per row.
    pub fn repeats(&self) -> u32 {
        self.repeats
    }
}

/// One launch's times on the device and the check of its output.
#[derive(Debug, Clone, PartialEq)]
pub struct DeviceTiming {
    times_us: Vec<f64>,
    checked: usize,
    mismatches: usize,
}

impl DeviceTiming {
    /// Every timed launch, µs, shortest first.
    pub fn times_us(&self) -> &[f64] {
        &self.times_us
    }

    /// The median launch, µs (the upper one of an even count, as `tune --by device` takes it).
    pub fn median_us(&self) -> f64 {
        self.times_us[self.times_us.len() / 2]
    }

    /// `(max - min) / median` of the timed launches (0 for a zero median).
    pub fn spread(&self) -> f64 {
        let median = self.median_us();
        if median > 0.0 {
            (self.times_us[self.times_us.len() - 1] - self.times_us[0]) / median
        } else {
            0.0
        }
    }

    /// Output elements checked.
    pub fn checked(&self) -> usize {
        self.checked
    }

    /// Of which outside AITER's tolerance.
    pub fn mismatches(&self) -> usize {
        self.mismatches
    }

    /// `mismatches / checked`: the row's `errRatio`.
    pub fn err_ratio(&self) -> f64 {
        if self.checked == 0 {
            0.0
        } else {
            self.mismatches as f64 / self.checked as f64
        }
    }
}

/// Times AITER's kernels on a device, loading each code object once.
pub struct DeviceTimer<'d> {
    device: &'d dyn Device,
    settings: TimingSettings,
    modules: HashMap<PathBuf, Module>,
}

/// `count` indices from 0 to `len - 1`, evenly spaced, both ends included (all of them when
/// `len <= count`).
fn spaced(len: usize, count: usize) -> Vec<usize> {
    match count {
        _ if len <= count => return (0..len).collect(),
        0 => return Vec::new(),
        1 => return vec![0],
        _ => {}
    }
    (0..count).map(|i| i * (len - 1) / (count - 1)).collect()
}

/// The rows `rows` of `x`, as a matrix of their own.
fn take_rows(x: &MxMatrix, rows: &[usize]) -> Result<MxMatrix, AiterError> {
    let (kb, sb) = (x.k_bytes(), x.k_blocks());
    let mut data = Vec::with_capacity(rows.len() * kb);
    let mut scales = Vec::with_capacity(rows.len() * sb);
    for &r in rows {
        data.extend_from_slice(&x.data()[r * kb..(r + 1) * kb]);
        scales.extend_from_slice(&x.scales()[r * sb..(r + 1) * sb]);
    }
    Ok(MxMatrix::from_parts(rows.len(), x.k(), data, scales)?)
}

/// Whether `got` passes AITER's check against `want` (`torch.isclose(ref, out)`: NaN is never
/// close).
fn close(want: f32, got: f32) -> bool {
    let (w, g) = (f64::from(want), f64::from(got));
    if w == g {
        return true;
    }
    (w - g).abs() <= CHECK_ATOL + CHECK_RTOL * g.abs()
}

impl<'d> DeviceTimer<'d> {
    /// A timer on `device`.
    pub fn new(device: &'d dyn Device, settings: TimingSettings) -> DeviceTimer<'d> {
        DeviceTimer {
            device,
            settings,
            modules: HashMap::new(),
        }
    }

    /// Times `row`'s launch (see the module documentation).
    pub fn time(&mut self, row: &CalibrationRow) -> Result<DeviceTiming, AiterError> {
        self.time_launch(&crate::calibrate::launch_for_row(row.row(), row.kernel())?)
    }

    /// Times `launch` (any problem the kernel runs, not only a table row's).
    pub fn time_launch(&mut self, launch: &GemmLaunch) -> Result<DeviceTiming, AiterError> {
        let kernel = launch.kernel();
        let p = *launch.problem();
        let device_err = |action: &'static str| {
            move |source: RuntimeError| AiterError::Device {
                kernel: kernel.name().to_string(),
                shape: format!("{}x{}x{}", p.m(), p.n(), p.k()),
                action,
                source,
            }
        };
        let module = match self.modules.get(kernel.path()) {
            Some(m) => m.clone(),
            None => {
                let image = kernel.load()?;
                let m = self
                    .device
                    .load(image.bytes())
                    .map_err(device_err("loading the code object"))?;
                self.modules.insert(kernel.path().to_path_buf(), m.clone());
                m
            }
        };
        // Each shape has inputs of its own, the same on every run.
        let seed = self.settings.seed
            ^ (u64::from(p.m()) << 42)
            ^ (u64::from(p.n()) << 21)
            ^ u64::from(p.k());
        let a = MxMatrix::random(p.m() as usize, p.k() as usize, seed)?;
        let b = MxMatrix::random(p.n() as usize, p.k() as usize, !seed)?;
        let inputs = GemmInputs::prepare(&p, &a, &b)?;
        let mut owned: Vec<DevicePtr> = Vec::new();
        let result = (|| {
            let mut ptrs = GemmPointers::default();
            let mut d_bytes = 0;
            for spec in launch.buffers() {
                // Fresh allocations are zeroed: D starts at 0, as split-K needs.
                let ptr = self
                    .device
                    .alloc(spec.bytes().max(1))
                    .map_err(device_err("allocating a buffer"))?;
                owned.push(ptr);
                if let Some(bytes) = inputs.get(spec.field()) {
                    self.device
                        .copy_to_device(ptr, bytes)
                        .map_err(device_err("copying an input"))?;
                }
                match spec.field() {
                    Field::D => {
                        ptrs.d = ptr.0;
                        d_bytes = spec.bytes();
                    }
                    Field::A => ptrs.a = ptr.0,
                    Field::B => ptrs.b = ptr.0,
                    Field::ScaleA => ptrs.scale_a = ptr.0,
                    Field::ScaleB => ptrs.scale_b = ptr.0,
                    // `buffers` lists only the fields above.
                    _ => {}
                }
            }
            let kernargs = launch.kernargs(&ptrs);
            let config = LaunchConfig {
                grid: launch.grid(),
                block: launch.block(),
                dynamic_lds: 0,
            };
            let run = || {
                let signal = self
                    .device
                    .dispatch(&module, kernel.symbol(), &config, &kernargs)
                    .map_err(device_err("launching"))?;
                let report = self.device.wait(signal).map_err(device_err("running"))?;
                Ok::<f64, AiterError>(report.wall.as_secs_f64() * 1e6)
            };
            for _ in 0..self.settings.warmup {
                run()?;
            }
            let mut times = Vec::with_capacity(self.settings.repeats as usize);
            for i in 0..self.settings.repeats {
                if i + 1 == self.settings.repeats && p.log2_k_split() > 0 {
                    // The checked launch adds its slices into a zeroed D.
                    self.device
                        .copy_to_device(DevicePtr(ptrs.d), &vec![0u8; d_bytes as usize])
                        .map_err(device_err("zeroing D"))?;
                }
                times.push(run()?);
            }
            let (checked, mismatches) = self.check(launch, &a, &b, DevicePtr(ptrs.d))?;
            Ok::<_, AiterError>((times, checked, mismatches))
        })();
        for ptr in owned {
            // A buffer the device will not free is its own leak, not a wrong time.
            let _ = self.device.free(ptr);
        }
        let (mut times_us, checked, mismatches) = result?;
        times_us.sort_by(f64::total_cmp);
        Ok(DeviceTiming {
            times_us,
            checked,
            mismatches,
        })
    }

    /// `(checked, mismatches)` of a sample of D at `d` (see the module documentation).
    fn check(
        &self,
        launch: &GemmLaunch,
        a: &MxMatrix,
        b: &MxMatrix,
        d: DevicePtr,
    ) -> Result<(usize, usize), AiterError> {
        let p = launch.problem();
        let (m, n, ldd) = (p.m() as usize, p.n() as usize, p.d_row_stride() as usize);
        let rows = spaced(m, CHECK_ROWS);
        let cols = spaced(n, CHECK_COLS);
        let reference = reference_gemm(&take_rows(a, &rows)?, &take_rows(b, &cols)?)?;
        let mut line = vec![0u8; n * 2];
        let mut mismatches = 0;
        for (i, &r) in rows.iter().enumerate() {
            let at = DevicePtr(d.0 + (r * ldd * 2) as u64);
            self.device
                .copy_from_device(at, &mut line)
                .map_err(|source| AiterError::Device {
                    kernel: launch.kernel().name().to_string(),
                    shape: format!("{}x{}x{}", p.m(), p.n(), p.k()),
                    action: "reading D back",
                    source,
                })?;
            for (j, &c) in cols.iter().enumerate() {
                let got = bf16::from_le_bytes([line[2 * c], line[2 * c + 1]]).to_f32();
                let want = bf16::from_f32(reference.c()[i * cols.len() + j]).to_f32();
                if !close(want, got) {
                    mismatches += 1;
                }
            }
        }
        Ok((rows.len() * cols.len(), mismatches))
    }
}

/// How [`pick_rows`] chooses rows when there are more than asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// Evenly spaced over the rows in table order (the first and the last included).
    Spread,
    /// The fewest multiply-adds (`M N K`) first, ties in table order: the cheapest rows, for a
    /// run over an emulated device.
    Smallest,
}

/// At most `limit` of `rows` (all of them without a limit), chosen by `pick`, in table order.
pub fn pick_rows(
    rows: Vec<CalibrationRow>,
    limit: Option<usize>,
    pick: Pick,
) -> Vec<CalibrationRow> {
    let Some(limit) = limit.filter(|&l| l < rows.len()) else {
        return rows;
    };
    let keep: Vec<usize> = match pick {
        Pick::Spread => spaced(rows.len(), limit),
        Pick::Smallest => {
            let mut order: Vec<usize> = (0..rows.len()).collect();
            let work = |i: usize| {
                let r = rows[i].row();
                u64::from(r.m()) * u64::from(r.n()) * u64::from(r.k())
            };
            order.sort_by_key(|&i| (work(i), i));
            order.truncate(limit);
            order.sort_unstable();
            order
        }
    };
    let mut keep = keep.into_iter().peekable();
    rows.into_iter()
        .enumerate()
        .filter_map(|(i, r)| {
            (keep.peek() == Some(&i)).then(|| {
                keep.next();
                r
            })
        })
        .collect()
}

/// A refit of the timing model on measured rows, and the model before and after it on them.
pub struct Refit {
    fitted: Fitted,
    evaluation: Evaluation,
}

/// Name of the refit model's column in the report.
pub const REFIT_NAME: &str = "refit";

/// Fits the free parameters of `start` on the [`Set::Calibration`] rows of `rows` (rows whose
/// times a device measured: their `us` is the evidence) with `options`, then runs the model
/// with `start` and with the fit on every row of `rows`. Refused when no row is a calibration
/// row.
pub fn refit(
    rows: &[CalibrationRow],
    start: &Params,
    options: &FitOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Refit, AiterError> {
    let calibration: Vec<CalibrationRow> = rows
        .iter()
        .filter(|r| r.set() == Set::Calibration)
        .cloned()
        .collect();
    if calibration.is_empty() {
        return Err(AiterError::Fit {
            predictor: TimingModel::NAME.into(),
            problem: format!(
                "none of the {} measured rows is a calibration row (kernels {}): the fit has nothing to fit on",
                rows.len(),
                crate::calibrate::CALIBRATION_TILES
                    .map(|(m, n)| format!("{m}x{n}"))
                    .join(", ")
            ),
        });
    }
    let fitted = fit::fit_with(&calibration, start, options, log)?;
    let before = TimingModel::new(start.clone());
    let after = TimingModel::new(fitted.params.clone()).named(REFIT_NAME);
    let evaluation = Evaluation::run(rows, &[&before, &after]);
    Ok(Refit { fitted, evaluation })
}

impl Refit {
    /// The fit.
    pub fn fitted(&self) -> &Fitted {
        &self.fitted
    }

    /// The model before (column 0) and after (column 1) the fit on every measured row.
    pub fn evaluation(&self) -> &Evaluation {
        &self.evaluation
    }

    /// Absolute relative errors of the model on the rows of `set`: before the fit, and after.
    pub fn errors(&self, set: Set) -> (ErrorStats, ErrorStats) {
        (
            self.evaluation.stats(0, set, &Group::All),
            self.evaluation.stats(1, set, &Group::All),
        )
    }

    /// The fit's outcome, and the model before and after it side by side on the measured rows.
    pub fn report(&self) -> String {
        let mut s = self.fitted.report();
        s.push('\n');
        s.push_str(&self.evaluation.comparison(0, 1));
        s.push('\n');
        s.push_str(&self.evaluation.table());
        s
    }

    /// `base` (a `params.toml`, such as [`Params::DEFAULT_TOML`]) with the fitted entries
    /// replaced ([`fit::update_params_toml`]); refused when the text does not read back as the
    /// fitted parameters (`base` lacks an entry the fit owns, or holds other values than the
    /// fit started from).
    pub fn params_toml(&self, base: &str) -> Result<String, AiterError> {
        let text = fit::update_params_toml(base, &self.fitted.params);
        let fit_err = |problem: String| AiterError::Fit {
            predictor: TimingModel::NAME.into(),
            problem,
        };
        let back = Params::from_toml_str(&text)
            .map_err(|e| fit_err(format!("the refit parameters do not read back: {e}")))?;
        if back != self.fitted.params {
            return Err(fit_err(
                "the parameter table given is not the one the fit started from: the refit would not read back as fitted"
                    .into(),
            ));
        }
        Ok(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::tests::crow;
    use crate::kernel::tests::kernel;

    #[test]
    fn samples_are_evenly_spaced_with_both_ends() {
        assert_eq!(spaced(5, 8), vec![0, 1, 2, 3, 4]);
        assert_eq!(spaced(1, 8), vec![0]);
        assert_eq!(spaced(0, 8), Vec::<usize>::new());
        assert_eq!(spaced(100, 3), vec![0, 49, 99]);
        let s = spaced(7168, CHECK_COLS);
        assert_eq!((s.len(), s[0], s[s.len() - 1]), (CHECK_COLS, 0, 7167));
        assert!(s.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn the_check_is_aiters_isclose() {
        assert!(close(1.0, 1.0));
        assert!(close(100.0, 100.9));
        assert!(!close(100.0, 98.9));
        // The absolute tolerance carries values near zero.
        assert!(close(0.0, 0.009));
        assert!(!close(0.0, 0.011));
        assert!(!close(f32::NAN, f32::NAN));
        assert!(close(f32::INFINITY, f32::INFINITY));
    }

    #[test]
    fn settings_need_a_timed_launch() {
        assert!(TimingSettings::new(3, 0).is_err());
        let s = TimingSettings::new(0, 1).unwrap();
        assert_eq!((s.warmup(), s.repeats()), (0, 1));
    }

    #[test]
    fn rows_are_picked_spread_or_smallest_in_table_order() {
        let k = kernel(32, 128, false);
        let rows: Vec<CalibrationRow> = [(64, 7), (1, 5), (8, 3), (1, 1), (16, 2)]
            .iter()
            .map(|&(m, us)| crow(m, 256, 512, us as f64, &k))
            .collect();
        let ms = |v: &[CalibrationRow]| v.iter().map(|r| r.row().m()).collect::<Vec<_>>();
        assert_eq!(
            ms(&pick_rows(rows.clone(), None, Pick::Spread)),
            [64, 1, 8, 1, 16]
        );
        assert_eq!(
            ms(&pick_rows(rows.clone(), Some(9), Pick::Smallest)).len(),
            5
        );
        assert_eq!(
            ms(&pick_rows(rows.clone(), Some(3), Pick::Spread)),
            [64, 8, 16]
        );
        // The two M = 1 rows, then M = 8; kept in table order.
        assert_eq!(ms(&pick_rows(rows, Some(3), Pick::Smallest)), [1, 8, 1]);
    }

    #[test]
    fn a_device_timing_reports_median_spread_and_ratio() {
        let t = DeviceTiming {
            times_us: vec![1.0, 2.0, 4.0],
            checked: 8,
            mismatches: 2,
        };
        assert_eq!((t.median_us(), t.spread(), t.err_ratio()), (2.0, 1.5, 0.25));
    }
}
