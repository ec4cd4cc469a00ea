//! The layout algebra of tilegen: every offset in the project — host preshuffles and device
//! addressing alike — is a [`Layout`] applied to a [`Coord`].
//!
//! A layout is a hierarchical `shape:stride` pair (CuTe's model, also Mojo's `TileTensor`). Its
//! integers are [`Idx`] values, static or dynamic; dynamic values are any [`IndexValue`] (plain
//! `i64` on the host, an IR value in the kernel builder), and arithmetic folds the static parts.
//!
//! A [`Swizzle`] (CuTe's `Swizzle<B, M, S>`), or a [`SwizzleChain`] of them, applied after a
//! layout's byte offset gives a bank-conflict-free LDS tile: the kernel builder's `TileTensor`
//! composes it with its layout (`swizzle ∘ (base + lane + layout)`), where it also keeps the
//! uniform and per-lane parts of the offset apart and counts sub-byte elements.
#![deny(missing_docs)]

mod algebra;
mod coord;
mod error;
mod int;
mod layout;
mod swizzle;
mod walk;

pub use coord::Coord;
pub use error::LayoutError;
pub use int::{Idx, IndexValue};
pub use layout::Layout;
pub use swizzle::{Swizzle, SwizzleChain, SwizzleError};
pub use walk::{CopyMode, CopyOrder, CopyPlan, Odometer, WalkError};
