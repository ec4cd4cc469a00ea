//! MXFP4 block-scaled GEMMs, `C[M, N] = A[M, K] * B[N, K]^T` with E8M0 block scales: the
//! [`KernelSpec`] that configures them, the LDS-staged kernel (`lds`) and the preshuffled-B
//! kernel (`preb`, whose main loop the grouped MoE kernels reuse), what both share
//! ([`common`]), building ([`CompiledKernel`]) and launching them.

pub mod common;
mod kernel;
mod launch;
mod lds;
pub(crate) mod preb;
mod spec;

pub use kernel::{BuildError, CompiledKernel};
pub use launch::{
    GemmBufferSizes, GemmBuffers, GemmInputs, GemmOutput, LaunchError, check_problem,
};
pub use spec::{
    CachePolicy, KernelSpec, LdsBuffer, MfmaShape, OutDtype, SpecError, SpecValues, Variant,
};
