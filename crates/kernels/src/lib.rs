//! tilegen-kernels: MXFP4 kernels for gfx950 — block-scaled GEMMs generated from a
//! [`KernelSpec`] ([`gemm`]), grouped mixture-of-experts layers ([`moe`]) and paged FP8 decode
//! attention ([`attention`]), built from the shared pieces of [`tile`] and compiled by one path
//! into [`BuiltKernel`]s.
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
pub mod moe;
pub mod paged;
pub mod tile;

pub use compiled::{BuiltKernel, CompileError, Kernarg, ReportError, ResourceReport, occupancy};
pub use gemm::{
    BuildError, CachePolicy, CompiledKernel, GemmBufferSizes, GemmBuffers, GemmInputs, GemmOutput,
    KernelSpec, LaunchError, LdsBuffer, LdsSpec, MfmaShape, OutDtype, PrebSpec, Prefetch,
    SPEC_FORMAT, SpecError, SpecValues, Variant, check_problem,
};
