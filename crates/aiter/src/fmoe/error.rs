//! Errors of the fused-MoE family; each names the value and the rule it breaks.

use crate::error::AiterError;

/// Everything that can go wrong reading the fused-MoE corpus or building a launch.
#[derive(Debug, thiserror::Error)]
pub enum FmoeError {
    /// Reading a corpus file or code object failed.
    #[error(transparent)]
    Corpus(#[from] AiterError),
    /// A problem or routing the stage-1 kernels cannot run (or this crate does not model).
    #[error("fused-MoE stage 1: {0}")]
    Problem(String),
    /// A table row names a kernel neither stage-1 index lists.
    #[error("tuned_fmoe.csv line {line} names kernel `{symbol}`, which no stage-1 index lists")]
    UnknownKernel {
        /// The row's line.
        line: u64,
        /// The symbol.
        symbol: String,
    },
}

/// Shorthand for [`FmoeError::Problem`].
pub(crate) fn problem(what: impl Into<String>) -> FmoeError {
    FmoeError::Problem(what.into())
}
