//! tilegen: block-scaled MXFP4 GEMM kernels for AMD gfx950 (MI355X), generated on demand.
//!
//! This crate re-exports the workspace's libraries under one name.
#![deny(missing_docs)]

pub use tilegen_layout as layout;
pub use tilegen_mx as mx;
