//! Errors of the MX crate: every precondition a caller can violate has a variant naming the
//! offending value and the rule it broke.

use tilegen_layout::WalkError;

/// What went wrong in an MX operation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MxError {
    /// A buffer or slice has the wrong number of elements.
    #[error("{what} has length {actual}, expected {expected}")]
    LengthMismatch {
        /// Which buffer.
        what: &'static str,
        /// The length the operation needs.
        expected: usize,
        /// The length supplied.
        actual: usize,
    },
    /// A size that must be a multiple of some granule is not.
    #[error("{what} = {value} must be a multiple of {multiple}")]
    NotMultiple {
        /// Which size.
        what: &'static str,
        /// Its value.
        value: usize,
        /// The required granule.
        multiple: usize,
    },
    /// A size that must be positive is zero.
    #[error("{what} must be at least 1, got 0")]
    Zero {
        /// Which size.
        what: &'static str,
    },
    /// A size computation does not fit the integer type.
    #[error("{what} overflows: {detail}")]
    SizeOverflow {
        /// Which size.
        what: &'static str,
        /// The operands, for the message.
        detail: String,
    },
    /// An FP4 code that does not fit in a nibble.
    #[error("FP4 code {value:#x} at index {index} does not fit in 4 bits")]
    NibbleOutOfRange {
        /// Position in the input.
        index: usize,
        /// The offending value.
        value: u8,
    },
    /// Two FP4 values share a byte, so a packed sequence must have even length.
    #[error("{len} FP4 values cannot be packed: two share a byte, so the count must be even")]
    OddLength {
        /// The number of values.
        len: usize,
    },
    /// The operands of a GEMM disagree on K.
    #[error("A has k = {a_k} but B has k = {b_k}; C = A * B^T needs the same K")]
    KMismatch {
        /// K of A.
        a_k: usize,
        /// K of B.
        b_k: usize,
    },
    /// A result being compared has the wrong shape.
    #[error("candidate has {actual} elements but the reference is {rows} x {cols}")]
    ShapeMismatch {
        /// Reference rows.
        rows: usize,
        /// Reference columns.
        cols: usize,
        /// Candidate length.
        actual: usize,
    },
    /// A layout could not be built, or a layout-to-layout copy could not be planned or run
    /// (layout algebra errors arrive as [`WalkError::Layout`]).
    #[error(transparent)]
    Walk(#[from] WalkError),
}
