//! gfx950 (CDNA4) and MI355X facts, the ground floor of the workspace: every crate that needs
//! a wave size, an LDS size, a register-file size, the CU/XCD topology or the MX block reads it
//! here, so a fact has one home. No dependencies; plain constants.
//!
//! Sources: AMD's CDNA4 ISA guide and whitepaper, LLVM's AMDGPU backend
//! (`AMDGPUBaseInfo.cpp`, `GCNSubtarget`), and the OCP Microscaling (MX) specification v1.0.

#![deny(missing_docs)]

/// The processor name LLVM and HSA code objects use.
pub const PROCESSOR: &str = "gfx950";

/// Lanes per wave (wave64).
pub const WAVE_SIZE: u32 = 64;

/// Largest workgroup, in work-items.
pub const MAX_WORKGROUP_SIZE: u32 = 1024;

/// SIMDs per compute unit.
pub const SIMDS_PER_CU: u32 = 4;

/// Wave slots per SIMD (LLVM `AMDGPUBaseInfo.cpp`: 8 waves per EU on gfx90a and later).
pub const MAX_WAVES_PER_SIMD: u32 = 8;

/// Architectural VGPRs per lane; AGPRs come on top, up to the same count.
pub const MAX_ARCH_VGPRS: u32 = 256;

/// The unified VGPR + AGPR file per lane (LLVM: 512 on gfx90a and later).
pub const MAX_UNIFIED_VGPRS: u32 = 512;

/// LDS bytes per compute unit, the most one workgroup may allocate (160 KB on CDNA4).
pub const LDS_BYTES_PER_CU: u32 = 160 * 1024;

/// LDS allocation granule in bytes (CDNA4 ISA 3.6.5: 1280-byte blocks).
pub const LDS_GRANULE_BYTES: u32 = 1280;

/// Accelerator complex dies of an MI355X, each with its own L2; the dispatcher deals
/// workgroups to them round robin in linear (x-fastest) order.
pub const XCDS: u32 = 8;

/// Compute units per XCD of an MI355X.
pub const CUS_PER_XCD: u32 = 32;

/// Compute units of an MI355X (8 XCDs x 32): the workgroups one round of a launch runs.
pub const COMPUTE_UNITS: u32 = XCDS * CUS_PER_XCD;

/// Elements sharing one E8M0 scale in an MX format (OCP MX v1.0 block size), which is also the
/// K extent one scale byte covers in the scaled MFMA.
pub const MX_BLOCK: u32 = 32;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_topology_multiplies_out() {
        assert_eq!(COMPUTE_UNITS, 256);
        assert_eq!(MAX_UNIFIED_VGPRS, 2 * MAX_ARCH_VGPRS);
        assert_eq!(LDS_BYTES_PER_CU % LDS_GRANULE_BYTES, 0);
        assert_eq!(MAX_WORKGROUP_SIZE / WAVE_SIZE, 16);
    }
}
