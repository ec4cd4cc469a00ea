//! The 64-byte kernel descriptor (AMDGPUUsage, "Kernel Descriptor"), field by field.

use serde::Serialize;

/// A kernel descriptor as the hardware's dispatcher reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct KernelDescriptor {
    /// Static LDS bytes.
    pub group_segment_fixed_size: u32,
    /// Static scratch bytes per work-item.
    pub private_segment_fixed_size: u32,
    /// Kernarg bytes.
    pub kernarg_size: u32,
    /// Code entry, relative to the descriptor's address.
    pub kernel_code_entry_byte_offset: i64,
    /// COMPUTE_PGM_RSRC3.
    pub compute_pgm_rsrc3: u32,
    /// COMPUTE_PGM_RSRC1.
    pub compute_pgm_rsrc1: u32,
    /// COMPUTE_PGM_RSRC2.
    pub compute_pgm_rsrc2: u32,
    /// Enable bits of the user SGPRs and more.
    pub kernel_code_properties: u16,
    /// Kernarg preload: length (dwords) in bits 6:0, offset (dwords) in 15:7.
    pub kernarg_preload: u16,
}

/// Size of a descriptor in bytes.
pub const DESCRIPTOR_BYTES: usize = 64;

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl KernelDescriptor {
    /// Parses 64 bytes.
    pub fn parse(b: &[u8; DESCRIPTOR_BYTES]) -> Self {
        KernelDescriptor {
            group_segment_fixed_size: u32_at(b, 0),
            private_segment_fixed_size: u32_at(b, 4),
            kernarg_size: u32_at(b, 8),
            kernel_code_entry_byte_offset: i64::from_le_bytes(
                b[16..24].try_into().expect("8 bytes"),
            ),
            compute_pgm_rsrc3: u32_at(b, 44),
            compute_pgm_rsrc1: u32_at(b, 48),
            compute_pgm_rsrc2: u32_at(b, 52),
            kernel_code_properties: u16::from_le_bytes([b[56], b[57]]),
            kernarg_preload: u16::from_le_bytes([b[58], b[59]]),
        }
    }

    fn property(&self, bit: u32) -> bool {
        self.kernel_code_properties & (1 << bit) != 0
    }

    /// Four user SGPRs with the private segment buffer descriptor.
    pub fn enable_sgpr_private_segment_buffer(&self) -> bool {
        self.property(0)
    }
    /// Two user SGPRs with the dispatch packet address.
    pub fn enable_sgpr_dispatch_ptr(&self) -> bool {
        self.property(1)
    }
    /// Two user SGPRs with the queue address.
    pub fn enable_sgpr_queue_ptr(&self) -> bool {
        self.property(2)
    }
    /// Two user SGPRs with the kernarg segment address.
    pub fn enable_sgpr_kernarg_segment_ptr(&self) -> bool {
        self.property(3)
    }
    /// Two user SGPRs with the dispatch id.
    pub fn enable_sgpr_dispatch_id(&self) -> bool {
        self.property(4)
    }
    /// Two user SGPRs to initialise flat scratch.
    pub fn enable_sgpr_flat_scratch_init(&self) -> bool {
        self.property(5)
    }
    /// One user SGPR with the private segment size.
    pub fn enable_sgpr_private_segment_size(&self) -> bool {
        self.property(6)
    }
    /// Wave32 (gfx950 runs wave64 only).
    pub fn enable_wavefront_size32(&self) -> bool {
        self.property(10)
    }
    /// The kernel uses a dynamically sized stack.
    pub fn uses_dynamic_stack(&self) -> bool {
        self.property(11)
    }

    /// Kernarg dwords preloaded into user SGPRs.
    pub fn kernarg_preload_length(&self) -> u32 {
        (self.kernarg_preload & 0x7f) as u32
    }
    /// Dword offset of the first preloaded kernarg.
    pub fn kernarg_preload_offset(&self) -> u32 {
        (self.kernarg_preload >> 7) as u32
    }

    /// `COMPUTE_PGM_RSRC2.ENABLE_PRIVATE_SEGMENT`.
    pub fn enable_private_segment(&self) -> bool {
        self.compute_pgm_rsrc2 & 1 != 0
    }
    /// `COMPUTE_PGM_RSRC2.USER_SGPR_COUNT` (bits 5:1): user SGPRs incl. preloaded kernargs.
    pub fn user_sgpr_count(&self) -> u32 {
        (self.compute_pgm_rsrc2 >> 1) & 0x1f
    }
    /// `ENABLE_SGPR_WORKGROUP_ID_X` (bit 7).
    pub fn enable_workgroup_id_x(&self) -> bool {
        self.compute_pgm_rsrc2 & (1 << 7) != 0
    }
    /// `ENABLE_SGPR_WORKGROUP_ID_Y` (bit 8).
    pub fn enable_workgroup_id_y(&self) -> bool {
        self.compute_pgm_rsrc2 & (1 << 8) != 0
    }
    /// `ENABLE_SGPR_WORKGROUP_ID_Z` (bit 9).
    pub fn enable_workgroup_id_z(&self) -> bool {
        self.compute_pgm_rsrc2 & (1 << 9) != 0
    }
    /// `ENABLE_SGPR_WORKGROUP_INFO` (bit 10).
    pub fn enable_workgroup_info(&self) -> bool {
        self.compute_pgm_rsrc2 & (1 << 10) != 0
    }
    /// `ENABLE_VGPR_WORKITEM_ID` (bits 12:11): 0 = x, 1 = x and y, 2 = x, y and z.
    pub fn workitem_id_vgprs(&self) -> u32 {
        (self.compute_pgm_rsrc2 >> 11) & 3
    }
    /// `COMPUTE_PGM_RSRC1.GRANULATED_WORKITEM_VGPR_COUNT` (bits 5:0).
    pub fn granulated_vgpr_count(&self) -> u32 {
        self.compute_pgm_rsrc1 & 0x3f
    }
    /// `COMPUTE_PGM_RSRC1.GRANULATED_WAVEFRONT_SGPR_COUNT` (bits 9:6).
    pub fn granulated_sgpr_count(&self) -> u32 {
        (self.compute_pgm_rsrc1 >> 6) & 0xf
    }
    /// Unified VGPRs allocated per lane (gfx90a+: granule of 8, `(g + 1) * 8`).
    pub fn allocated_vgprs(&self) -> u32 {
        (self.granulated_vgpr_count() + 1) * 8
    }
    /// `COMPUTE_PGM_RSRC3.ACCUM_OFFSET` (bits 5:0) as the first AGPR's index in the unified
    /// register file: `(v + 1) * 4`.
    pub fn accum_offset(&self) -> u32 {
        ((self.compute_pgm_rsrc3 & 0x3f) + 1) * 4
    }
}
