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

fn field(v: u32, lo: u32, width: u32) -> u32 {
    (v >> lo) & ((1u32 << width) - 1)
}

fn put(v: &mut u32, lo: u32, width: u32, x: u32) {
    let mask = ((1u32 << width) - 1) << lo;
    *v = (*v & !mask) | ((x << lo) & mask);
}

/// `COMPUTE_PGM_RSRC1` decoded (GFX9 layout, AMDGPUUsage "compute_pgm_rsrc1").
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Rsrc1 {
    /// Bits 5:0: VGPR blocks minus one (blocks of 8 unified VGPRs+AGPRs on GFX90A-class).
    pub granulated_workitem_vgpr_count: u32,
    /// Bits 9:6: SGPR blocks minus one (blocks of 8 in the GFX9 encoding).
    pub granulated_wavefront_sgpr_count: u32,
    /// Bits 11:10: wave priority.
    pub priority: u32,
    /// Bits 13:12: f32 rounding mode.
    pub float_round_mode_32: u32,
    /// Bits 15:14: f16/f64 rounding mode.
    pub float_round_mode_16_64: u32,
    /// Bits 17:16: f32 denormal mode.
    pub float_denorm_mode_32: u32,
    /// Bits 19:18: f16/f64 denormal mode.
    pub float_denorm_mode_16_64: u32,
    /// Bit 20: privileged.
    pub privileged: bool,
    /// Bit 21: DX10 clamp.
    pub enable_dx10_clamp: bool,
    /// Bit 22: debug mode.
    pub debug_mode: bool,
    /// Bit 23: IEEE mode.
    pub enable_ieee_mode: bool,
    /// Bit 24: bulky.
    pub bulky: bool,
    /// Bit 25: CDBG user.
    pub cdbg_user: bool,
    /// Bit 26: f16 overflow saturates.
    pub fp16_overflow: bool,
}

impl Rsrc1 {
    /// Decode the register.
    pub fn from_bits(v: u32) -> Self {
        Rsrc1 {
            granulated_workitem_vgpr_count: field(v, 0, 6),
            granulated_wavefront_sgpr_count: field(v, 6, 4),
            priority: field(v, 10, 2),
            float_round_mode_32: field(v, 12, 2),
            float_round_mode_16_64: field(v, 14, 2),
            float_denorm_mode_32: field(v, 16, 2),
            float_denorm_mode_16_64: field(v, 18, 2),
            privileged: field(v, 20, 1) != 0,
            enable_dx10_clamp: field(v, 21, 1) != 0,
            debug_mode: field(v, 22, 1) != 0,
            enable_ieee_mode: field(v, 23, 1) != 0,
            bulky: field(v, 24, 1) != 0,
            cdbg_user: field(v, 25, 1) != 0,
            fp16_overflow: field(v, 26, 1) != 0,
        }
    }

    /// Encode (reserved bits zero).
    pub fn to_bits(&self) -> u32 {
        let mut v = 0;
        put(&mut v, 0, 6, self.granulated_workitem_vgpr_count);
        put(&mut v, 6, 4, self.granulated_wavefront_sgpr_count);
        put(&mut v, 10, 2, self.priority);
        put(&mut v, 12, 2, self.float_round_mode_32);
        put(&mut v, 14, 2, self.float_round_mode_16_64);
        put(&mut v, 16, 2, self.float_denorm_mode_32);
        put(&mut v, 18, 2, self.float_denorm_mode_16_64);
        put(&mut v, 20, 1, self.privileged as u32);
        put(&mut v, 21, 1, self.enable_dx10_clamp as u32);
        put(&mut v, 22, 1, self.debug_mode as u32);
        put(&mut v, 23, 1, self.enable_ieee_mode as u32);
        put(&mut v, 24, 1, self.bulky as u32);
        put(&mut v, 25, 1, self.cdbg_user as u32);
        put(&mut v, 26, 1, self.fp16_overflow as u32);
        v
    }
}

/// `COMPUTE_PGM_RSRC2` decoded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Rsrc2 {
    /// Bit 0: the private segment wave offset SGPR is set up.
    pub enable_private_segment: bool,
    /// Bits 5:1: user SGPRs set up at launch (preloaded kernargs included).
    pub user_sgpr_count: u32,
    /// Bit 6: trap handler present.
    pub enable_trap_handler: bool,
    /// Bit 7: workgroup id x SGPR.
    pub enable_sgpr_workgroup_id_x: bool,
    /// Bit 8: workgroup id y SGPR.
    pub enable_sgpr_workgroup_id_y: bool,
    /// Bit 9: workgroup id z SGPR.
    pub enable_sgpr_workgroup_id_z: bool,
    /// Bit 10: workgroup info SGPR.
    pub enable_sgpr_workgroup_info: bool,
    /// Bits 12:11: workitem ids in VGPRs (0 x; 1 x, y; 2 x, y, z).
    pub enable_vgpr_workitem_id: u32,
    /// Bit 13: address-watch exceptions.
    pub enable_exception_address_watch: bool,
    /// Bit 14: memory exceptions.
    pub enable_exception_memory: bool,
    /// Bits 23:15: LDS granules (written by the dispatcher).
    pub granulated_lds_size: u32,
    /// Bits 30:24: exception enables: IEEE invalid, denormal source, divide by zero,
    /// overflow, underflow, inexact, integer divide by zero (bit 0 = invalid).
    pub exception_enables: u32,
}

impl Rsrc2 {
    /// Decode the register.
    pub fn from_bits(v: u32) -> Self {
        Rsrc2 {
            enable_private_segment: field(v, 0, 1) != 0,
            user_sgpr_count: field(v, 1, 5),
            enable_trap_handler: field(v, 6, 1) != 0,
            enable_sgpr_workgroup_id_x: field(v, 7, 1) != 0,
            enable_sgpr_workgroup_id_y: field(v, 8, 1) != 0,
            enable_sgpr_workgroup_id_z: field(v, 9, 1) != 0,
            enable_sgpr_workgroup_info: field(v, 10, 1) != 0,
            enable_vgpr_workitem_id: field(v, 11, 2),
            enable_exception_address_watch: field(v, 13, 1) != 0,
            enable_exception_memory: field(v, 14, 1) != 0,
            granulated_lds_size: field(v, 15, 9),
            exception_enables: field(v, 24, 7),
        }
    }

    /// Encode (reserved bits zero).
    pub fn to_bits(&self) -> u32 {
        let mut v = 0;
        put(&mut v, 0, 1, self.enable_private_segment as u32);
        put(&mut v, 1, 5, self.user_sgpr_count);
        put(&mut v, 6, 1, self.enable_trap_handler as u32);
        put(&mut v, 7, 1, self.enable_sgpr_workgroup_id_x as u32);
        put(&mut v, 8, 1, self.enable_sgpr_workgroup_id_y as u32);
        put(&mut v, 9, 1, self.enable_sgpr_workgroup_id_z as u32);
        put(&mut v, 10, 1, self.enable_sgpr_workgroup_info as u32);
        put(&mut v, 11, 2, self.enable_vgpr_workitem_id);
        put(&mut v, 13, 1, self.enable_exception_address_watch as u32);
        put(&mut v, 14, 1, self.enable_exception_memory as u32);
        put(&mut v, 15, 9, self.granulated_lds_size);
        put(&mut v, 24, 7, self.exception_enables);
        v
    }
}

/// `COMPUTE_PGM_RSRC3` decoded (GFX90A-class layout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Rsrc3 {
    /// Bits 5:0: AGPRs start at unified register `(accum_offset + 1) * 4`.
    pub accum_offset: u32,
    /// Bit 16: threadgroup split mode.
    pub tg_split: bool,
}

impl Rsrc3 {
    /// Decode the register.
    pub fn from_bits(v: u32) -> Self {
        Rsrc3 {
            accum_offset: field(v, 0, 6),
            tg_split: field(v, 16, 1) != 0,
        }
    }

    /// Encode (reserved bits zero).
    pub fn to_bits(&self) -> u32 {
        let mut v = 0;
        put(&mut v, 0, 6, self.accum_offset);
        put(&mut v, 16, 1, self.tg_split as u32);
        v
    }
}

impl KernelDescriptor {
    /// `COMPUTE_PGM_RSRC1`, field by field.
    pub fn rsrc1(&self) -> Rsrc1 {
        Rsrc1::from_bits(self.compute_pgm_rsrc1)
    }

    /// `COMPUTE_PGM_RSRC2`, field by field.
    pub fn rsrc2(&self) -> Rsrc2 {
        Rsrc2::from_bits(self.compute_pgm_rsrc2)
    }

    /// `COMPUTE_PGM_RSRC3`, field by field.
    pub fn rsrc3(&self) -> Rsrc3 {
        Rsrc3::from_bits(self.compute_pgm_rsrc3)
    }

    /// SGPRs allocated per wave: `(granulated + 1) * 8` (what llvm-objdump reports as
    /// `.amdhsa_next_free_sgpr`).
    pub fn allocated_sgprs(&self) -> u32 {
        (self.granulated_sgpr_count() + 1) * 8
    }

    /// User SGPRs the `kernel_code_properties` enables take, in launch order (private segment
    /// buffer 4, dispatch ptr 2, queue ptr 2, kernarg ptr 2, dispatch id 2, flat scratch init 2,
    /// private segment size 1); preloaded kernargs follow them.
    pub fn enabled_user_sgprs(&self) -> u32 {
        4 * self.enable_sgpr_private_segment_buffer() as u32
            + 2 * self.enable_sgpr_dispatch_ptr() as u32
            + 2 * self.enable_sgpr_queue_ptr() as u32
            + 2 * self.enable_sgpr_kernarg_segment_ptr() as u32
            + 2 * self.enable_sgpr_dispatch_id() as u32
            + 2 * self.enable_sgpr_flat_scratch_init() as u32
            + self.enable_sgpr_private_segment_size() as u32
    }

    /// The 64 descriptor bytes (reserved fields zero): the inverse of [`KernelDescriptor::parse`]
    /// for descriptors LLVM produces, for writers.
    pub fn to_bytes(&self) -> [u8; DESCRIPTOR_BYTES] {
        let mut b = [0u8; DESCRIPTOR_BYTES];
        b[0..4].copy_from_slice(&self.group_segment_fixed_size.to_le_bytes());
        b[4..8].copy_from_slice(&self.private_segment_fixed_size.to_le_bytes());
        b[8..12].copy_from_slice(&self.kernarg_size.to_le_bytes());
        b[16..24].copy_from_slice(&self.kernel_code_entry_byte_offset.to_le_bytes());
        b[44..48].copy_from_slice(&self.compute_pgm_rsrc3.to_le_bytes());
        b[48..52].copy_from_slice(&self.compute_pgm_rsrc1.to_le_bytes());
        b[52..56].copy_from_slice(&self.compute_pgm_rsrc2.to_le_bytes());
        b[56..58].copy_from_slice(&self.kernel_code_properties.to_le_bytes());
        b[58..60].copy_from_slice(&self.kernarg_preload.to_le_bytes());
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_sit_where_amdgpuusage_puts_them() {
        let mut b = [0u8; DESCRIPTOR_BYTES];
        b[8..12].copy_from_slice(&344u32.to_le_bytes());
        b[16..24].copy_from_slice(&(-2880i64).to_le_bytes());
        b[44] = 30; // accum_offset 30: AGPRs from 124
        b[48..52].copy_from_slice(&(15u32 | 13 << 6 | 3 << 16 | 1 << 21 | 1 << 23).to_le_bytes());
        b[52..56].copy_from_slice(&(8u32 << 1 | 1 << 7 | 1 << 8 | 1 << 9 | 2 << 11).to_le_bytes());
        b[56] = 0b1_1110; // dispatch ptr, queue ptr, kernarg ptr, dispatch id
        b[58] = 8; // 8 preloaded dwords from offset 0
        let d = KernelDescriptor::parse(&b);
        assert_eq!(d.kernarg_size, 344);
        assert_eq!(d.kernel_code_entry_byte_offset, -2880);
        assert_eq!(d.accum_offset(), 124);
        assert_eq!(d.rsrc3().accum_offset, 30);
        assert_eq!(d.allocated_vgprs(), 128);
        assert_eq!(d.allocated_sgprs(), 112);
        let r1 = d.rsrc1();
        assert_eq!(
            (
                r1.float_denorm_mode_32,
                r1.enable_dx10_clamp,
                r1.enable_ieee_mode
            ),
            (3, true, true)
        );
        let r2 = d.rsrc2();
        assert_eq!(r2.user_sgpr_count, 8);
        assert!(r2.enable_sgpr_workgroup_id_x && r2.enable_sgpr_workgroup_id_y);
        assert_eq!(r2.enable_vgpr_workitem_id, 2);
        assert_eq!(d.enabled_user_sgprs(), 8);
        assert_eq!(
            (d.kernarg_preload_length(), d.kernarg_preload_offset()),
            (8, 0)
        );
        assert_eq!(d.to_bytes(), b);
        assert_eq!(
            Rsrc1::from_bits(d.compute_pgm_rsrc1).to_bits(),
            d.compute_pgm_rsrc1
        );
        assert_eq!(
            Rsrc2::from_bits(d.compute_pgm_rsrc2).to_bits(),
            d.compute_pgm_rsrc2
        );
        assert_eq!(
            Rsrc3::from_bits(d.compute_pgm_rsrc3).to_bits(),
            d.compute_pgm_rsrc3
        );
    }
}
