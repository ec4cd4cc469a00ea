//! MXFP4 block-scaled GEMMs, `C[M, N] = A[M, K] * B[N, K]^T` with E8M0 block scales: the
//! [`KernelSpec`] that configures them, the LDS-staged kernel (`lds`) and the preshuffled-B
//! kernel (`preb`, whose main loop the grouped MoE kernels reuse), what both share
//! ([`common`]), building ([`CompiledKernel`]) and launching them.

#[cfg(feature = "clap")]
mod args;
pub mod common;
mod kernel;
mod knobs;
mod launch;
mod lds;
pub(crate) mod preb;
mod reduce;
mod spec;

#[cfg(feature = "clap")]
pub use args::{AllKnobs, KnobArgs, KnobSet, SpecArgs};
pub use kernel::{BuildError, CompiledKernel};
pub use knobs::{Axis, KnobType, KnobValue, Range, Scope, Stored};
pub use launch::{
    GemmBufferSizes, GemmBuffers, GemmInputs, GemmOutput, LaunchError, check_problem,
};
pub use reduce::{REDUCE_ELEMS_PER_LANE, REDUCE_THREADS};
pub use spec::{
    CachePolicy, ClusterSched, Common, KernelSpec, Knob, LdsBuffer, LdsSpec, MfmaShape, OutDtype,
    PrebKnobs, PrebSpec, Prefetch, SPEC_FORMAT, SpecError, SpecValues, Variant,
};
