//! Errors of the layout algebra.

/// What went wrong in a layout operation; every variant names the values involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    /// Shape and stride have different tree structures.
    #[error("shape {shape} and stride {stride} are not congruent (different nesting)")]
    NotCongruent {
        /// The shape.
        shape: String,
        /// The stride.
        stride: String,
    },
    /// A coordinate's structure does not fit the shape.
    #[error("coordinate {coord} does not fit shape {shape}")]
    CoordMismatch {
        /// The coordinate.
        coord: String,
        /// The shape.
        shape: String,
    },
    /// An index that the layout never produces.
    #[error("index {index} is not in the image of layout {layout}")]
    NotInImage {
        /// The index.
        index: String,
        /// The layout.
        layout: String,
    },
    /// An operation that needs static shapes or strides met a run-time value.
    #[error("{op} needs static shapes and strides, but layout {layout} has a dynamic one")]
    Dynamic {
        /// The operation.
        op: &'static str,
        /// The layout.
        layout: String,
    },
    /// Two extents that must divide one another do not.
    #[error("{op}: {a} and {b} must divide one another (the layouts are not compatible)")]
    NotDivisible {
        /// The operation.
        op: &'static str,
        /// One extent.
        a: i64,
        /// The other.
        b: i64,
    },
    /// Complement of a layout that is not injective, or whose strides do not nest.
    #[error(
        "complement: layout {layout} has stride {stride} that is not a multiple of {expected}; it must be injective with nesting strides"
    )]
    NotComplementable {
        /// The layout.
        layout: String,
        /// The offending stride.
        stride: i64,
        /// The stride it had to be a multiple of.
        expected: i64,
    },
    /// A mode index past the rank.
    #[error("mode {mode} is out of range for a layout of rank {rank}")]
    ModeOutOfRange {
        /// The requested mode.
        mode: usize,
        /// The rank.
        rank: usize,
    },
    /// A negative extent or stride where the algebra needs a non-negative one.
    #[error("{op}: {what} {value} must be non-negative")]
    Negative {
        /// The operation.
        op: &'static str,
        /// Which quantity.
        what: &'static str,
        /// Its value.
        value: i64,
    },
}
