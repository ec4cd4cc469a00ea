//! Kernel-spec flags shared by `tilegen gemm` and `tilegen build`: one flag per knob of the
//! spec, declared with the knob (see `tilegen_kernels::gemm::SpecArgs`).

pub use tilegen::kernels::gemm::SpecArgs;
