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

/// User SGPRs the hardware initialises at wave start (kernarg segment pointer, dispatch and
/// queue pointers, preloaded kernel arguments: AMDGPUUsage "Initial Kernel Execution State",
/// 16 on GFX9).
pub const MAX_USER_SGPRS: u32 = 16;

/// Granule in which a wave's unified VGPRs are allocated (LLVM `AMDGPUBaseInfo.cpp`
/// `getVGPRAllocGranule`: 8 on gfx90a and later).
pub const VGPR_ALLOC_GRANULE: u32 = 8;

/// Unified VGPRs + AGPRs a lane may use when `waves` waves share its SIMD: the file divided by
/// the waves, rounded down to the allocation granule (LLVM `AMDGPUBaseInfo.cpp`
/// `getMaxNumVGPRs` on gfx90a and later), which is what an `amdgpu-waves-per-eu` target of
/// `waves` leaves the register allocator.
pub const fn max_unified_vgprs_at(waves: u32) -> u32 {
    let waves = if waves == 0 { 1 } else { waves };
    let per_wave = MAX_UNIFIED_VGPRS / waves;
    per_wave - per_wave % VGPR_ALLOC_GRANULE
}

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

/// The SGPRs a wave addresses at most on gfx9 (LLVM `AMDGPUBaseInfo.cpp`
/// `getAddressableNumSGPRs`: 102, plus VCC, rounded to the descriptor's granule of 8 gives 106
/// as the largest count a descriptor's granulated field can stand for).
pub const MAX_WAVE_SGPRS: u32 = 106;

/// Granule of the kernel descriptor's SGPR count field (`granulated_wavefront_sgpr_count`
/// counts blocks of 8 on gfx9).
pub const DESCRIPTOR_SGPR_GRANULE: u32 = 8;

/// What limits how many workgroups a CU holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Limiter {
    /// Wave slots per SIMD.
    Waves,
    /// The unified VGPR/AGPR file.
    Vgprs,
    /// The SGPR file.
    Sgprs,
    /// LDS capacity.
    Lds,
    /// Barrier resources (workgroups of more than one wave per CU).
    Barriers,
    /// The per-CU workgroup limit.
    Workgroups,
}

impl Limiter {
    /// Every limiter.
    pub const ALL: [Limiter; 6] = [
        Limiter::Waves,
        Limiter::Vgprs,
        Limiter::Sgprs,
        Limiter::Lds,
        Limiter::Barriers,
        Limiter::Workgroups,
    ];

    /// The limiter's name, as reports print and store it.
    pub fn name(self) -> &'static str {
        match self {
            Limiter::Waves => "waves",
            Limiter::Vgprs => "vgprs",
            Limiter::Sgprs => "sgprs",
            Limiter::Lds => "lds",
            Limiter::Barriers => "barriers",
            Limiter::Workgroups => "workgroups",
        }
    }

    /// The limiter named `name` (the inverse of [`Limiter::name`]).
    pub fn from_name(name: &str) -> Option<Limiter> {
        Limiter::ALL.into_iter().find(|l| l.name() == name)
    }
}

/// What a workgroup of a kernel asks of a CU, as its code object's descriptor states it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WorkgroupNeeds {
    /// Work-items per workgroup.
    pub work_items: u64,
    /// Unified VGPRs (arch + acc) the descriptor allocates per lane.
    pub vgprs: u32,
    /// The descriptor's granulated SGPR count field (blocks of
    /// [`DESCRIPTOR_SGPR_GRANULE`], minus one).
    pub granulated_sgprs: u32,
    /// LDS bytes per workgroup (static and dynamic).
    pub lds_bytes: u64,
    /// Whether the code contains `s_barrier`.
    pub barrier: bool,
}

/// How many workgroups of a kernel one CU holds, what each allocates, and why not more.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Residency {
    /// Waves per workgroup.
    pub waves_per_workgroup: u32,
    /// Unified VGPRs allocated per lane (granule-rounded).
    pub vgprs: u32,
    /// SGPRs allocated per wave (granule-rounded, the extra ones included).
    pub sgprs: u32,
    /// LDS bytes allocated per workgroup (granule-rounded).
    pub lds_bytes: u64,
    /// Waves one SIMD can hold for the kernel's registers.
    pub waves_per_simd: u32,
    /// Resident workgroups per CU; 0 when one does not fit.
    pub workgroups_per_cu: u32,
    /// The binding limit.
    pub limiter: Limiter,
}

impl Residency {
    /// Waves resident per SIMD once the CU is full (its workgroups' waves spread over the
    /// SIMDs), at most [`Residency::waves_per_simd`].
    pub fn resident_waves_per_simd(&self, limits: &CuLimits) -> u32 {
        let waves = u64::from(self.workgroups_per_cu) * u64::from(self.waves_per_workgroup);
        (waves.div_ceil(u64::from(limits.simds.max(1))) as u32).min(self.waves_per_simd)
    }
}

/// What one CU holds, the limits occupancy is computed against. [`CuLimits::GFX950`] is the
/// machine; another value shows what a limit gfx950 never reaches would do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CuLimits {
    /// SIMDs per CU.
    pub simds: u32,
    /// Wave slots per SIMD.
    pub waves_per_simd: u32,
    /// Unified VGPR+AGPR registers per lane and SIMD.
    pub vgprs_per_lane: u32,
    /// VGPR allocation granule.
    pub vgpr_granule: u32,
    /// SGPRs per SIMD.
    pub sgprs_per_simd: u32,
    /// SGPR allocation granule.
    pub sgpr_granule: u32,
    /// SGPRs a wave holds beyond the descriptor's count (VCC, flat scratch, XNACK).
    pub extra_sgprs: u32,
    /// LDS bytes per CU.
    pub lds_bytes: u32,
    /// LDS allocation granule in bytes.
    pub lds_granule_bytes: u32,
    /// Resident workgroups per CU.
    pub workgroups: u32,
    /// Resident workgroups with barriers (more than one wave) per CU.
    pub barrier_workgroups: u32,
}

impl CuLimits {
    /// A gfx950 CU.
    pub const GFX950: CuLimits = CuLimits {
        simds: SIMDS_PER_CU,
        waves_per_simd: MAX_WAVES_PER_SIMD,
        vgprs_per_lane: MAX_UNIFIED_VGPRS,
        vgpr_granule: VGPR_ALLOC_GRANULE,
        sgprs_per_simd: SGPRS_PER_SIMD,
        sgpr_granule: SGPR_ALLOC_GRANULE,
        extra_sgprs: EXTRA_SGPRS,
        lds_bytes: LDS_BYTES_PER_CU,
        lds_granule_bytes: LDS_GRANULE_BYTES,
        workgroups: MAX_WORKGROUPS_PER_CU,
        barrier_workgroups: MAX_BARRIER_WORKGROUPS_PER_CU,
    };

    /// How many workgroups with `needs` this CU holds: registers bound the waves per SIMD,
    /// the workgroup's waves spread over the SIMDs, then LDS, barriers and the workgroup limit
    /// bound the workgroups. `workgroups_per_cu` is 0 when one workgroup does not fit.
    pub fn occupancy(&self, needs: &WorkgroupNeeds) -> Residency {
        let align = |v: u64, a: u32| v.div_ceil(u64::from(a.max(1))) * u64::from(a.max(1));
        let waves = needs.work_items.div_ceil(u64::from(WAVE_SIZE)).max(1);
        let vgprs = align(u64::from(needs.vgprs), self.vgpr_granule);
        let sgprs = align(
            ((u64::from(needs.granulated_sgprs) + 1) * u64::from(DESCRIPTOR_SGPR_GRANULE))
                .min(u64::from(MAX_WAVE_SGPRS))
                + u64::from(self.extra_sgprs),
            self.sgpr_granule,
        );
        let lds = align(needs.lds_bytes, self.lds_granule_bytes);
        let by_vgpr = u64::from(self.vgprs_per_lane) / vgprs.max(1);
        let by_sgpr = u64::from(self.sgprs_per_simd) / sgprs.max(1);
        let mut waves_per_simd = u64::from(self.waves_per_simd);
        let mut limiter = Limiter::Waves;
        if by_vgpr < waves_per_simd {
            waves_per_simd = by_vgpr;
            limiter = Limiter::Vgprs;
        }
        if by_sgpr < waves_per_simd {
            waves_per_simd = by_sgpr;
            limiter = Limiter::Sgprs;
        }
        let simds = u64::from(self.simds.max(1));
        let mut wgs = if waves.div_ceil(simds) > waves_per_simd {
            0
        } else {
            waves_per_simd * simds / waves
        };
        let mut cap = |v: u64, l: Limiter| {
            if v < wgs {
                wgs = v;
                limiter = l;
            }
        };
        if let Some(by_lds) = u64::from(self.lds_bytes).checked_div(lds) {
            cap(by_lds, Limiter::Lds);
        }
        if waves > 1 && needs.barrier {
            cap(u64::from(self.barrier_workgroups), Limiter::Barriers);
        }
        cap(u64::from(self.workgroups), Limiter::Workgroups);
        Residency {
            waves_per_workgroup: waves.min(u64::from(u32::MAX)) as u32,
            vgprs: vgprs.min(u64::from(u32::MAX)) as u32,
            sgprs: sgprs.min(u64::from(u32::MAX)) as u32,
            lds_bytes: lds,
            waves_per_simd: waves_per_simd as u32,
            workgroups_per_cu: wgs as u32,
            limiter,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_occupancy_target_divides_the_register_file_in_granules() {
        assert_eq!(max_unified_vgprs_at(1), 512);
        assert_eq!(max_unified_vgprs_at(2), 256);
        assert_eq!(max_unified_vgprs_at(3), 168);
        assert_eq!(max_unified_vgprs_at(7), 72);
        assert_eq!(max_unified_vgprs_at(8), 64);
        assert_eq!(max_unified_vgprs_at(0), 512);
    }

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

    fn needs(work_items: u64, vgprs: u32, lds_bytes: u64) -> WorkgroupNeeds {
        WorkgroupNeeds {
            work_items,
            vgprs,
            granulated_sgprs: 3,
            lds_bytes,
            barrier: true,
        }
    }

    #[test]
    fn occupancy_names_the_binding_limit() {
        let g = CuLimits::GFX950;
        // 256 registers: two waves per SIMD; a 4-wave workgroup puts one on each SIMD.
        let r = g.occupancy(&needs(256, 256, 0));
        assert_eq!(
            (r.waves_per_simd, r.workgroups_per_cu, r.limiter),
            (2, 2, Limiter::Vgprs)
        );
        assert_eq!(r.resident_waves_per_simd(&g), 2);
        // 64 KiB of LDS each: two workgroups.
        let r = g.occupancy(&needs(256, 64, 64 * 1024));
        assert_eq!((r.workgroups_per_cu, r.limiter), (2, Limiter::Lds));
        assert_eq!(r.resident_waves_per_simd(&g), 2);
        // Small 2-wave workgroups: the wave slots hold 16, as many as the barriers allow;
        // with twice the slots the barriers bind.
        let r = g.occupancy(&needs(128, 32, 0));
        assert_eq!((r.workgroups_per_cu, r.limiter), (16, Limiter::Waves));
        let wide = CuLimits {
            waves_per_simd: 16,
            ..g
        };
        let r = wide.occupancy(&needs(128, 32, 0));
        assert_eq!((r.workgroups_per_cu, r.limiter), (16, Limiter::Barriers));
        // A workgroup of 16 waves of 256 registers does not fit (4 per SIMD, 2 slots).
        let r = g.occupancy(&needs(1024, 256, 0));
        assert_eq!(r.workgroups_per_cu, 0);
        for l in Limiter::ALL {
            assert_eq!(Limiter::from_name(l.name()), Some(l));
        }
    }
}
