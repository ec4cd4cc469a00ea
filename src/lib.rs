#![deny(missing_docs)]
#![doc = include_str!("../README.md")]

pub use tilegen_codeobj as codeobj;
pub use tilegen_dsl as dsl;
pub use tilegen_emu as emu;
pub use tilegen_kernels as kernels;
pub use tilegen_layout as layout;
pub use tilegen_mx as mx;
pub use tilegen_runtime as runtime;
pub use tilegen_timing as timing;

pub mod moe_timing;

pub use tilegen_kernels::{CompiledKernel, KernelSpec, SpecError};
