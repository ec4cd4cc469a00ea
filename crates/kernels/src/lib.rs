//! tilegen-kernels: MXFP4 block-scaled GEMM kernels for gfx950, generated from a [`KernelSpec`].
//!
//! ```no_run
//! use tilegen_kernels::KernelSpec;
//! let kernel = KernelSpec::new().b_prefetch(true).build()?;
//! println!("{} VGPRs, {} bytes of LDS", kernel.report().vgpr_count, kernel.report().lds_bytes);
//! # Ok::<(), tilegen_kernels::BuildError>(())
//! ```
#![deny(missing_docs)]

pub mod asm;
pub mod attention;
mod compiled;
pub mod gemm;
mod launch;
mod lds;
pub mod loader;
pub mod mma;
pub mod moe;
pub mod paged;
mod preb;
mod spec;
mod xcd;

pub use compiled::{BuildError, CompiledKernel, Kernarg, ReportError, ResourceReport, occupancy};
pub use launch::{
    GemmBufferSizes, GemmBuffers, GemmInputs, GemmOutput, LaunchError, check_problem,
};
pub use spec::{
    CachePolicy, KernelSpec, LdsBuffer, MfmaShape, OutDtype, SpecError, SpecValues, Variant,
};
pub mod atom;
