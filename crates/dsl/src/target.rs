//! The gfx950 target: limits the builder checks against, and LLVM's target machine.

use std::sync::Once;

use inkwell::OptimizationLevel;
use inkwell::targets::{
    CodeModel, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};

use target_lexicon::{Architecture, BinaryFormat, Environment, OperatingSystem, Triple, Vendor};

use crate::error::{DslError, Result};

/// Target triple of HSA code objects (`amdgcn-amd-amdhsa`), as the crate Rust itself uses for
/// triples; LLVM is handed its printed form.
pub const TRIPLE: Triple = Triple {
    architecture: Architecture::AmdGcn,
    vendor: Vendor::Amd,
    operating_system: OperatingSystem::AmdHsa,
    environment: Environment::Unknown,
    binary_format: BinaryFormat::Elf,
};

/// LLVM's form of [`TRIPLE`].
pub(crate) fn llvm_triple() -> TargetTriple {
    TargetTriple::create(&TRIPLE.to_string())
}
// The machine's facts live in tilegen-arch; the builder checks against them.
pub use tilegen_arch::{
    COMPUTE_UNITS, MAX_ARCH_VGPRS, MAX_UNIFIED_VGPRS, MAX_USER_SGPRS, MAX_WAVES_PER_SIMD,
    MAX_WORKGROUP_SIZE, SIMDS_PER_CU, WAVE_SIZE, XCDS,
};
/// Kernel-argument dwords a kernel preloads into user SGPRs: the user SGPRs less the kernarg
/// segment pointer's 2 and 2 kept for a dispatch or queue pointer.
pub const MAX_PRELOAD_KERNARG_DWORDS: u32 = MAX_USER_SGPRS - 4;
/// The processor LLVM compiles for.
pub const CPU: &str = tilegen_arch::PROCESSOR;
/// LDS bytes one workgroup may allocate: all of a CU's.
pub const LDS_BYTES: u32 = tilegen_arch::LDS_BYTES_PER_CU;
/// LLVM's calling convention number of `amdgpu_kernel`.
pub const AMDGPU_KERNEL_CC: u32 = 91;

/// Address spaces of the AMDGPU backend.
pub mod addrspace {
    /// Global memory.
    pub const GLOBAL: u16 = 1;
    /// LDS (shared memory).
    pub const LDS: u16 = 3;
    /// Constant memory (kernarg segment).
    pub const CONSTANT: u16 = 4;
    /// Private (scratch).
    pub const PRIVATE: u16 = 5;
    /// Buffer resources (`ptr addrspace(8)`).
    pub const BUFFER_RSRC: u16 = 8;
}

static INIT: Once = Once::new();

/// LLVM's target machine for gfx950 at O3.
pub fn target_machine() -> Result<TargetMachine> {
    INIT.call_once(|| Target::initialize_amd_gpu(&InitializationConfig::default()));
    let triple = llvm_triple();
    let target = Target::from_triple(&triple).map_err(|e| DslError::Llvm {
        stage: "target lookup",
        message: e.to_string(),
    })?;
    target
        .create_target_machine(
            &triple,
            CPU,
            "",
            OptimizationLevel::Aggressive,
            RelocMode::PIC,
            CodeModel::Default,
        )
        .ok_or_else(|| DslError::Llvm {
            stage: "target machine",
            message: format!("could not create a target machine for {TRIPLE} {CPU}"),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::str::FromStr;

    #[test]
    fn triple_prints_and_parses_as_hsa_code_objects_name_it() {
        assert_eq!(TRIPLE.to_string(), "amdgcn-amd-amdhsa");
        assert_eq!(Triple::from_str("amdgcn-amd-amdhsa"), Ok(TRIPLE));
    }
}
