//! The calibration harness: time predictors against AMD's MI355X-measured f4gemm times.
//!
//! The evidence is the tuned table's rows measured on MI355X (`cu_num` 256) that use an asm
//! f4gemm kernel. They are split once, in code, by kernel ([`CALIBRATION_TILES`]): a predictor
//! may fit parameters on the calibration rows only ([`Set::Calibration`]) and is judged on the
//! held-out rows, whose kernels it never saw.
//!
//! A predictor is one [`Predictor`] impl: the fitted tile-quantized [`Roofline`], and
//! [`TimingModel`], the cycle-level MI355X model of `tilegen_timing` run on each row's
//! real launch ([`describe_row`]: code object, symbol, grid, block, dynamic LDS, and an
//! argument block bound to lazily zeroed buffers of the row's sizes). [`fit`] is the documented
//! procedure that fits the model's free parameters on the calibration rows only.
//! [`Evaluation`] runs predictors over the rows (in parallel) and reports the absolute relative
//! error `|predicted - measured| / measured`: median and p90 per set, per M range and per
//! kernel, the predictors side by side on the same rows, a CSV with every prediction and an
//! SVG plot per predictor. [`device`] times the kernels of the rows on a device (an MI355X)
//! and refits the model on those times.

pub mod device;
pub mod fit;
mod model;
mod report;
mod roofline;

use std::error::Error;
use std::path::Path;

pub use model::{ModelRun, TimingModel, thread_cpu_seconds};
pub use report::{ErrorStats, Evaluation, Group, GroupStats, MRange, Regime};
pub use roofline::{Roofline, RooflineTerms};
pub use tilegen_timing::LoopExtrapolation;

use crate::corpus::Corpus;
use crate::error::AiterError;
use crate::kernargs::{GemmLaunch, GemmProblem};
use crate::kernel::F4GemmKernel;
use crate::launch::LaunchDescription;
use crate::table::TableRow;

/// Compute units of an MI355X: the tuned table's `cu_num` for its rows, and the number of
/// workgroups that run at once (one per CU: the kernels use all 160 KiB of a CU's LDS).
pub const MI355X_CUS: u32 = tilegen_arch::COMPUTE_UNITS;

/// The calibration split, fixed: rows of the kernels with these `(tile_m, tile_n)` tiles are
/// calibration (a small-M, a wide-N and a large-M kernel: 211 of the 796 MI355X rows); every
/// other kernel's rows are held out. Changing it invalidates every figure reported against it.
pub const CALIBRATION_TILES: [(u32, u32); 3] = [(32, 128), (128, 512), (160, 256)];

/// Which side of the split a row is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Set {
    /// Predictors may fit on these rows.
    Calibration,
    /// Predictors are judged on these rows.
    HeldOut,
    /// MI355X-measured rows of another table of AITER's (shapes the wheel's table lacks, the
    /// same kernels): held out whatever their kernel, never fitted on, reported on their own.
    Extra,
}

impl Set {
    /// The set of a kernel's rows.
    pub fn of(kernel: &F4GemmKernel) -> Set {
        if CALIBRATION_TILES.contains(&(kernel.tile_m(), kernel.tile_n())) {
            Set::Calibration
        } else {
            Set::HeldOut
        }
    }

    /// `calibration` or `held-out`.
    pub fn label(self) -> &'static str {
        match self {
            Set::Calibration => "calibration",
            Set::HeldOut => "held-out",
            Set::Extra => "extra",
        }
    }
}

/// A measured row with its kernel and its side of the split.
#[derive(Debug, Clone, PartialEq)]
pub struct CalibrationRow {
    row: TableRow,
    kernel: F4GemmKernel,
    set: Set,
    workgroups: u64,
}

impl CalibrationRow {
    /// The table row.
    pub fn row(&self) -> &TableRow {
        &self.row
    }

    /// Its kernel.
    pub fn kernel(&self) -> &F4GemmKernel {
        &self.kernel
    }

    /// Its side of the split.
    pub fn set(&self) -> Set {
        self.set
    }

    /// Workgroups of its launch (0 when the launch cannot be built; predicting it then fails
    /// with the reason).
    pub fn workgroups(&self) -> u64 {
        self.workgroups
    }

    fn new(row: TableRow, kernel: F4GemmKernel, set: Set) -> CalibrationRow {
        let workgroups = launch_for_row(&row, &kernel)
            .map_or(0, |l| l.grid().iter().map(|&g| u64::from(g)).product());
        CalibrationRow {
            row,
            kernel,
            set,
            workgroups,
        }
    }
}

/// The launch AITER makes for a row: its shape, its log2 split-K, D packed.
pub fn launch_for_row(row: &TableRow, kernel: &F4GemmKernel) -> Result<GemmLaunch, AiterError> {
    let problem =
        GemmProblem::new(row.m(), row.n(), row.k())?.with_log2_k_split(row.log2_k_split())?;
    Ok(GemmLaunch::new(kernel, problem)?)
}

/// The full launch description of a row, for predictors that run the kernel.
pub fn describe_row(
    row: &TableRow,
    kernel: &F4GemmKernel,
) -> Result<LaunchDescription, AiterError> {
    Ok(LaunchDescription::new(&launch_for_row(row, kernel)?))
}

/// The MI355X rows of the tuned table that use an asm kernel, with their kernels and sets, in
/// table order. A row naming a kernel the index lacks is an error.
pub fn calibration_rows(corpus: &Corpus) -> Result<Vec<CalibrationRow>, AiterError> {
    asm_rows(corpus, corpus.tuned_table()?, Set::of)
}

/// The MI355X asm-kernel rows of another AITER tuning table of the same columns (a `gfx`
/// column and others are ignored), all [`Set::Extra`], numbered as table `index` (from 1;
/// 0 is the wheel's); the kernels come from the corpus.
pub fn extra_rows(
    corpus: &Corpus,
    table: &Path,
    index: u32,
) -> Result<Vec<CalibrationRow>, AiterError> {
    let rows = crate::table::parse_tuned(table)?
        .into_iter()
        .map(|r| r.in_table(index))
        .collect();
    asm_rows(corpus, rows, |_| Set::Extra)
}

/// The MI355X asm-kernel rows of a table of the tuned table's columns whose times a device
/// measured (`tilegen calibrate` writes one), split by kernel as the wheel's rows are
/// ([`Set::of`]); the kernels come from the corpus.
pub fn measured_rows(corpus: &Corpus, table: &Path) -> Result<Vec<CalibrationRow>, AiterError> {
    asm_rows(corpus, crate::table::parse_tuned(table)?, Set::of)
}

fn asm_rows(
    corpus: &Corpus,
    table: Vec<TableRow>,
    set: impl Fn(&F4GemmKernel) -> Set,
) -> Result<Vec<CalibrationRow>, AiterError> {
    table
        .into_iter()
        .filter(|r| r.cu_num() == MI355X_CUS && r.uses_asm_kernel())
        .map(|row| {
            let kernel = corpus
                .kernel_by_symbol(row.kernel_name())
                .ok_or_else(|| AiterError::UnknownKernel {
                    symbol: row.kernel_name().to_string(),
                })?
                .clone();
            Ok(CalibrationRow::new(row, kernel.clone(), set(&kernel)))
        })
        .collect()
}

/// Why a predictor could not predict a row.
#[derive(Debug, thiserror::Error)]
pub enum PredictError {
    /// The row's launch could not be built.
    #[error(transparent)]
    Launch(#[from] AiterError),
    /// The model itself failed.
    #[error(transparent)]
    Model(Box<dyn Error + Send + Sync>),
}

/// A predictor of a kernel's time on MI355X.
pub trait Predictor: Sync {
    /// A short name: the CSV column and the plot's file name.
    fn name(&self) -> &str;

    /// One line on what the predictor is (with fitted parameters, if any).
    fn summary(&self) -> String {
        self.name().to_string()
    }

    /// The predicted time of `row`'s launch of `kernel`, in microseconds.
    fn predict_us(&self, row: &TableRow, kernel: &F4GemmKernel) -> Result<f64, PredictError>;
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::kernel::tests::kernel;

    /// A table row for tests.
    pub(crate) fn row(m: u32, n: u32, k: u32, us: f64, kernel: &F4GemmKernel) -> TableRow {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(
            &path,
            format!(
                "cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n\
                 256,{m},{n},{k},0,0,{us},{},1,1,0\n",
                kernel.symbol()
            ),
        )
        .unwrap();
        crate::table::parse_tuned(&path).unwrap().remove(0)
    }

    /// A calibration row for tests.
    pub(crate) fn crow(m: u32, n: u32, k: u32, us: f64, kernel: &F4GemmKernel) -> CalibrationRow {
        CalibrationRow::new(row(m, n, k, us, kernel), kernel.clone(), Set::of(kernel))
    }

    #[test]
    fn split_is_by_kernel() {
        assert_eq!(Set::of(&kernel(32, 128, false)), Set::Calibration);
        assert_eq!(Set::of(&kernel(128, 512, true)), Set::Calibration);
        assert_eq!(Set::of(&kernel(160, 256, false)), Set::Calibration);
        assert_eq!(Set::of(&kernel(256, 256, true)), Set::HeldOut);
        assert_eq!(Set::of(&kernel(128, 128, false)), Set::HeldOut);
    }

    #[test]
    fn rows_describe_their_launch() {
        let k = kernel(32, 128, false);
        let d = describe_row(&row(33, 256, 512, 5.0, &k), &k).unwrap();
        assert_eq!(d.grid(), [2, 2, 1]);
        let bad = row(33, 250, 512, 5.0, &k);
        assert!(matches!(
            describe_row(&bad, &k),
            Err(AiterError::Problem(_))
        ));
    }
}
