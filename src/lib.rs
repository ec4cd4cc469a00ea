//! tilegen: block-scaled MXFP4 GEMM kernels for AMD gfx950 (MI355X), generated on demand.
//!
//! This crate re-exports the workspace's libraries under one name.
#![deny(missing_docs)]

pub use tilegen_layout as layout;
pub use tilegen_mx as mx;
pub use tilegen_kernels as kernels;
pub use tilegen_dsl as dsl;
pub use tilegen_codeobj as codeobj;
pub use tilegen_runtime as runtime;
pub use tilegen_emu as emu;

pub use tilegen_kernels::{CompiledKernel, KernelSpec, SpecError};
