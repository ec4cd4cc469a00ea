//! gfx950 (CDNA4) and MI355X facts, the ground floor of the workspace: every crate that needs
//! a wave size, an LDS size, a register file and its allocation granules, a per-CU residency
//! limit, the CU/XCD topology or the MX block reads it here, so a fact has one home. No
//! dependencies; plain constants.
//!
//! Sources: AMD's CDNA4 ISA guide and whitepaper, LLVM's AMDGPU backend
//! (`AMDGPUBaseInfo.cpp`, `GCNSubtarget`), ROCm's rocprofiler-compute (its gfx950
//! configuration and `docs/conceptual/pipeline-descriptions.rst`), and the OCP Microscaling
//! (MX) specification v1.0.

#![deny(missing_docs)]

/// The processor name LLVM and HSA code objects use.
pub const PROCESSOR: &str = "gfx950";

/// Lanes per wave (wave64).
pub const WAVE_SIZE: u32 = 64;

/// Largest workgroup, in work-items.
pub const MAX_WORKGROUP_SIZE: u32 = 1024;

/// SIMDs per compute unit (rocprofiler-compute `pipeline-descriptions.rst`).
pub const SIMDS_PER_CU: u32 = 4;

/// Wave slots per SIMD (LLVM `AMDGPUBaseInfo.cpp`: 8 waves per EU on gfx90a and later;
/// rocprofiler-compute's gfx950 configuration).
pub const MAX_WAVES_PER_SIMD: u32 = 8;

/// Architectural VGPRs per lane; AGPRs come on top, up to the same count.
pub const MAX_ARCH_VGPRS: u32 = 256;

/// The unified VGPR + AGPR file per lane (LLVM: 512 on gfx90a and later).
pub const MAX_UNIFIED_VGPRS: u32 = 512;

/// Granule in which a wave's unified VGPRs are allocated (LLVM `AMDGPUBaseInfo.cpp`
/// `getVGPRAllocGranule`: 8 on gfx90a and later).
pub const VGPR_ALLOC_GRANULE: u32 = 8;

/// SGPRs of one SIMD, shared by its waves (LLVM `AMDGPUBaseInfo.cpp` `getTotalNumSGPRs`: 800
/// on GFX8 and later before GFX10).
pub const SGPRS_PER_SIMD: u32 = 800;

/// Granule in which a wave's SGPRs are allocated (LLVM `AMDGPUBaseInfo.cpp`
/// `getSGPRAllocGranule`: 16 on GFX8 and later).
pub const SGPR_ALLOC_GRANULE: u32 = 16;

/// SGPRs a wave holds beyond its descriptor's count: VCC (2), FLAT_SCRATCH (2) and XNACK_MASK
/// (2) on gfx9 when used (LLVM `AMDGPUBaseInfo.cpp` `getNumExtraSGPRs`); all three, the upper
/// bound, since a descriptor does not say which.
pub const EXTRA_SGPRS: u32 = 6;

/// LDS bytes per compute unit, the most one workgroup may allocate (160 KB on CDNA4: AMD's
/// ROCm blog "CDNA4 GEMM kernels").
pub const LDS_BYTES_PER_CU: u32 = 160 * 1024;

/// LDS allocation granule in bytes (CDNA4 ISA 3.6.5: 1280-byte blocks).
pub const LDS_GRANULE_BYTES: u32 = 1280;

/// Workgroups of more than one wave resident per CU, one per barrier (LLVM
/// `AMDGPUBaseInfo.cpp` `getMaxWorkGroupsPerCU`: 16 barriers before GFX10; rocprofiler-compute's
/// gfx950 configuration).
pub const MAX_BARRIER_WORKGROUPS_PER_CU: u32 = 16;

/// Workgroups resident per CU: LLVM (`AMDGPUBaseInfo.cpp` `getMaxWorkGroupsPerCU`) bounds them
/// by the wave slots, one one-wave workgroup per slot; no document states a lower limit of the
/// dispatcher's.
pub const MAX_WORKGROUPS_PER_CU: u32 = SIMDS_PER_CU * MAX_WAVES_PER_SIMD;

/// Accelerator complex dies of an MI355X, each with its own L2; the dispatcher deals
/// workgroups to them round robin in linear (x-fastest) order (AMD's CDNA4 white paper).
pub const XCDS: u32 = 8;

/// Compute units per XCD of an MI355X (AMD's CDNA4 white paper; IREE `KnownTargets.cpp`).
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
        assert_eq!(MAX_UNIFIED_VGPRS % VGPR_ALLOC_GRANULE, 0);
        assert_eq!(MAX_WORKGROUPS_PER_CU, 32);
        const { assert!(MAX_BARRIER_WORKGROUPS_PER_CU <= MAX_WORKGROUPS_PER_CU) };
    }
}
