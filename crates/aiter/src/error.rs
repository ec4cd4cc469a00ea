//! Typed errors; each keeps its source and names the file, row or value involved.

use std::path::PathBuf;

use tilegen_codeobj::CodeObjectError;
use tilegen_device::RuntimeError;
use tilegen_mx::MxError;
use tilegen_output::OutputError;

/// Everything that can go wrong reading the corpus, building a launch or calibrating.
#[derive(Debug, thiserror::Error)]
pub enum AiterError {
    /// `cargo xtask setup` never made the corpus here.
    #[error("the AITER corpus is missing at {}: run `cargo xtask setup`", dir.display())]
    CorpusMissing {
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// Setup ran but could not download the wheel (its STATUS file says why).
    #[error("the AITER corpus at {} is unavailable: {reason}", dir.display())]
    CorpusUnavailable {
        /// The corpus directory.
        dir: PathBuf,
        /// The reason setup recorded.
        reason: String,
    },
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A CSV file could not be parsed.
    #[error("{}: {source}", path.display())]
    Csv {
        /// The file.
        path: PathBuf,
        /// The parser's error (it names the line).
        #[source]
        source: csv::Error,
    },
    /// A CSV row parsed but breaks a rule of its table.
    #[error("{}, line {line}: {problem}", path.display())]
    BadRow {
        /// The file.
        path: PathBuf,
        /// 1-based line of the row.
        line: u64,
        /// The broken rule.
        problem: String,
    },
    /// A code object could not be parsed.
    #[error("{}: {source}", path.display())]
    CodeObject {
        /// The code object.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: CodeObjectError,
    },
    /// A code object does not hold the kernel its index row names, or its metadata disagrees
    /// with the kernel-argument layout of [`crate::Field`].
    #[error("{}: kernel `{symbol}`: {problem}", path.display())]
    KernelMetadata {
        /// The code object.
        path: PathBuf,
        /// The kernel symbol.
        symbol: String,
        /// What disagrees.
        problem: String,
    },
    /// A table row names a kernel the index does not list.
    #[error("the tuned table names kernel `{symbol}`, which the f4gemm index does not list")]
    UnknownKernel {
        /// The symbol.
        symbol: String,
    },
    /// A device's measurement cannot be a row of a tuned table.
    #[error("the measured row of {kernel} at {shape}: {problem}")]
    BadMeasurement {
        /// The kernel's name.
        kernel: String,
        /// `MxNxK`.
        shape: String,
        /// The broken rule.
        problem: String,
    },
    /// A device refused or failed an operation on a kernel's launch.
    #[error("{kernel} at {shape}: {action}")]
    Device {
        /// The kernel's name.
        kernel: String,
        /// `MxNxK`.
        shape: String,
        /// What was being done (`loading the code object`, `launching`, ...).
        action: &'static str,
        /// The device's error.
        #[source]
        source: RuntimeError,
    },
    /// Settings a procedure cannot run with.
    #[error("{0}")]
    Settings(String),
    /// A GEMM problem the kernels cannot run.
    #[error(transparent)]
    Problem(#[from] ProblemError),
    /// Preparing MXFP4 inputs failed.
    #[error("preparing MXFP4 inputs: {0}")]
    Mx(#[from] MxError),
    /// Writing an output file failed.
    #[error("writing {}: {source}", path.display())]
    Output {
        /// The output file.
        path: PathBuf,
        /// Why.
        #[source]
        source: OutputError,
    },
    /// Drawing a plot failed.
    #[error("drawing {what}: {source}")]
    Plot {
        /// The plot.
        what: String,
        /// The plotting library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Fitting a predictor failed.
    #[error("fitting {predictor}: {problem}")]
    Fit {
        /// The predictor.
        predictor: String,
        /// Why.
        problem: String,
    },
}

/// A GEMM problem (or launch of one) the f4gemm kernels cannot run; each variant names the
/// value and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProblemError {
    /// A dimension is zero.
    #[error("{what} must be positive")]
    Zero {
        /// The dimension.
        what: &'static str,
    },
    /// A dimension is not a multiple of what the kernels or layouts need.
    #[error("{what} = {value} must be a multiple of {multiple}: {why}")]
    NotMultiple {
        /// The dimension.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The required multiple.
        multiple: u64,
        /// The reason.
        why: &'static str,
    },
    /// A size exceeds what the kernels address (32-bit buffer offsets and kernel arguments).
    #[error("{what} = {value} exceeds {limit}: the kernels address buffers with 32-bit offsets")]
    TooLarge {
        /// The quantity.
        what: &'static str,
        /// Its value.
        value: u64,
        /// The limit.
        limit: u64,
    },
    /// The D row stride is smaller than N.
    #[error("the D row stride {ldd} is smaller than N = {n}")]
    StrideTooSmall {
        /// The stride in elements.
        ldd: u32,
        /// N.
        n: u32,
    },
    /// Split-K asked of a kernel that does not support it.
    #[error("kernel {kernel} does not support split-K (asked for log2 split {log2_k_split})")]
    SplitUnsupported {
        /// The kernel.
        kernel: String,
        /// The requested log2 split.
        log2_k_split: u32,
    },
    /// The split does not divide K, or is out of range.
    #[error("log2 split-K {log2_k_split} is invalid for K = {k}: {why}")]
    BadSplit {
        /// The requested log2 split.
        log2_k_split: u32,
        /// K.
        k: u32,
        /// The rule broken.
        why: &'static str,
    },
    /// The MXFP4 operands do not have the problem's shape.
    #[error("operand {operand} is {rows}x{k}, the problem needs {want_rows}x{want_k}")]
    OperandShape {
        /// `A` or `B`.
        operand: &'static str,
        /// Its rows.
        rows: usize,
        /// Its K.
        k: usize,
        /// Rows the problem needs.
        want_rows: u32,
        /// K the problem needs.
        want_k: u32,
    },
}
