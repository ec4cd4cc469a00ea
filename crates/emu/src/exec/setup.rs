//! Launch state: what the kernel descriptor asks for, and how a wave's registers look when it
//! starts (LLVM AMDGPUUsage, "Initial Kernel Execution State" and "Kernel Descriptor").

use super::fault::FaultKind;
use super::memory::{PRIVATE_APERTURE, SHARED_APERTURE};
use super::wave::{Wave, sreg};

/// The fields of a 64-byte kernel descriptor that shape execution.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSetup {
    /// `group_segment_fixed_size`: static LDS bytes.
    pub group_segment_fixed_size: u32,
    /// `private_segment_fixed_size`: scratch bytes per work-item.
    pub private_segment_fixed_size: u32,
    /// `kernarg_size`.
    pub kernarg_size: u32,
    /// `kernel_code_entry_byte_offset`: entry point relative to the descriptor's address.
    pub entry_offset: i64,
    /// `compute_pgm_rsrc1`.
    pub rsrc1: u32,
    /// `compute_pgm_rsrc2`.
    pub rsrc2: u32,
    /// `compute_pgm_rsrc3`.
    pub rsrc3: u32,
    /// `kernel_code_properties`.
    pub code_properties: u16,
    /// Kernel arguments preloaded into SGPRs, in dwords.
    pub kernarg_preload_length: u32,
    /// Offset (in dwords) of the first preloaded kernel argument.
    pub kernarg_preload_offset: u32,
}

/// Bytes the hardware skips at the entry point when it preloads kernel arguments: the
/// compiler puts a fallback loader there for firmware that cannot preload (AMDGPUUsage,
/// "Preloaded Kernel Arguments").
pub const KERNARG_PRELOAD_SKIP: u64 = 256;

impl KernelSetup {
    /// Decodes a kernel descriptor.
    pub fn from_descriptor(kd: &[u8; 64]) -> KernelSetup {
        let u32_at = |o: usize| u32::from_le_bytes([kd[o], kd[o + 1], kd[o + 2], kd[o + 3]]);
        let u16_at = |o: usize| u16::from_le_bytes([kd[o], kd[o + 1]]);
        let mut off = [0u8; 8];
        off.copy_from_slice(&kd[16..24]);
        let preload = u16_at(58);
        KernelSetup {
            group_segment_fixed_size: u32_at(0),
            private_segment_fixed_size: u32_at(4),
            kernarg_size: u32_at(8),
            entry_offset: i64::from_le_bytes(off),
            rsrc3: u32_at(44),
            rsrc1: u32_at(48),
            rsrc2: u32_at(52),
            code_properties: u16_at(56),
            kernarg_preload_length: (preload & 0x7f) as u32,
            kernarg_preload_offset: (preload >> 7) as u32,
        }
    }

    fn prop(&self, bit: u32) -> bool {
        self.code_properties >> bit & 1 != 0
    }

    /// `rsrc2.USER_SGPR_COUNT`: user SGPRs, preloaded kernel arguments included.
    pub fn user_sgpr_count(&self) -> u32 {
        (self.rsrc2 >> 1) & 0x1f
    }

    /// `rsrc2.ENABLE_VGPR_WORKITEM_ID`: 0 = x only, 1 = x and y, 2 = x, y and z.
    pub fn workitem_id_dims(&self) -> u32 {
        (self.rsrc2 >> 11) & 3
    }

    /// First AGPR in the unified register file (`rsrc3.ACCUM_OFFSET`), in registers.
    pub fn accum_offset(&self) -> u32 {
        ((self.rsrc3 & 0x3f) + 1) * 4
    }

    /// Whether the wave starts with the given MODE bits: round modes, denorm modes, DX10
    /// clamp and IEEE come from `rsrc1` (bits 12-23), FP16_OVFL from bit 26.
    pub fn initial_mode(&self) -> u32 {
        let r = self.rsrc1;
        let round = (r >> 12) & 0xf;
        let denorm = (r >> 16) & 0xf;
        let dx10 = (r >> 21) & 1;
        let ieee = (r >> 23) & 1;
        let fp16_ovfl = (r >> 26) & 1;
        round | (denorm << 4) | (dx10 << 8) | (ieee << 9) | (fp16_ovfl << 23)
    }
}

/// Everything a wave needs at launch besides its own ids.
#[derive(Clone, Debug)]
pub struct DispatchState {
    /// Address of the kernarg segment.
    pub kernarg_addr: u64,
    /// Address of the 64-byte dispatch packet.
    pub dispatch_ptr: u64,
    /// Address of the (zeroed) queue descriptor.
    pub queue_ptr: u64,
    /// Dispatch id.
    pub dispatch_id: u64,
    /// Kernel arguments (for preloading).
    pub kernarg: Vec<u8>,
    /// Workgroup size in work-items.
    pub block: [u32; 3],
    /// Number of workgroups.
    pub grid: [u32; 3],
}

/// Sets a wave's initial registers for workgroup `wg`, wave index `wave_idx` (of
/// `waves_in_wg`), and returns the PC it starts at given the kernel `entry` address.
pub fn init_wave(
    setup: &KernelSetup,
    d: &DispatchState,
    wg: [u32; 3],
    wave_idx: u32,
    waves_in_wg: u32,
    entry: u64,
    w: &mut Wave,
) -> Result<u64, FaultKind> {
    // User SGPR values in the order the descriptor enables them.
    let mut user_vals: Vec<u32> = Vec::new();
    let mut push = |v: u32| user_vals.push(v);
    if setup.prop(0) {
        // Private segment buffer: a swizzled V# over the lanes' private memory, as the
        // hardware builds it (add_tid + swizzle). Buffer access through it is reported as
        // unimplemented swizzled addressing; gfx950 kernels use flat scratch instead.
        let base = PRIVATE_APERTURE;
        push(base as u32);
        push(((base >> 32) as u32 & 0xffff) | (1 << 31));
        push(u32::MAX);
        push(1 << 23);
    }
    if setup.prop(1) {
        push(d.dispatch_ptr as u32);
        push((d.dispatch_ptr >> 32) as u32);
    }
    if setup.prop(2) {
        push(d.queue_ptr as u32);
        push((d.queue_ptr >> 32) as u32);
    }
    if setup.prop(3) {
        push(d.kernarg_addr as u32);
        push((d.kernarg_addr >> 32) as u32);
    }
    if setup.prop(4) {
        push(d.dispatch_id as u32);
        push((d.dispatch_id >> 32) as u32);
    }
    if setup.prop(5) {
        // Flat scratch init: gfx950 has architected flat scratch, so this only informs code
        // that reads it; private accesses go through the private aperture either way.
        push(0);
        push(0);
    }
    if setup.prop(6) {
        push(setup.private_segment_fixed_size);
    }
    for i in 0..setup.kernarg_preload_length {
        let at = 4 * (setup.kernarg_preload_offset + i) as usize;
        let mut b = [0u8; 4];
        for (k, byte) in b.iter_mut().enumerate() {
            *byte = d.kernarg.get(at + k).copied().unwrap_or(0);
        }
        push(u32::from_le_bytes(b));
    }
    let user = setup.user_sgpr_count() as usize;
    if user_vals.len() > user {
        return Err(FaultKind::Launch(format!(
            "kernel descriptor enables {} user SGPRs but USER_SGPR_COUNT is {user}",
            user_vals.len()
        )));
    }
    // System SGPRs follow the user SGPRs.
    let mut system = Vec::new();
    for (dim, bit) in [7, 8, 9].into_iter().enumerate() {
        if setup.rsrc2 >> bit & 1 != 0 {
            system.push(wg[dim]);
        }
    }
    if setup.rsrc2 >> 10 & 1 != 0 {
        // Workgroup info (TG_SIZE): waves in the group in bits 5:0, this wave's index in
        // bits 11:6 and "first wave" in bit 31.
        system.push(
            (waves_in_wg & 0x3f) | ((wave_idx & 0x3f) << 6) | (((wave_idx == 0) as u32) << 31),
        );
    }
    for (i, v) in user_vals.into_iter().enumerate() {
        w.sgpr[i] = v;
    }
    if user + system.len() > 102 {
        return Err(FaultKind::Launch(format!(
            "{} initial SGPRs exceed s101",
            user + system.len()
        )));
    }
    for (i, v) in system.into_iter().enumerate() {
        w.sgpr[user + i] = v;
    }
    // VGPR 0: packed work-item ids, x in 9:0, y in 19:10, z in 29:20 (gfx90a and later pack
    // all three into v0; the wave's 64 work-items are consecutive in x-major order).
    let threads = d.block[0] * d.block[1] * d.block[2];
    let mut exec = 0u64;
    for lane in 0..64u32 {
        let t = wave_idx * 64 + lane;
        if t < threads {
            exec |= 1 << lane;
            let x = t % d.block[0];
            let y = (t / d.block[0]) % d.block[1];
            let z = t / (d.block[0] * d.block[1]);
            let ids = match setup.workitem_id_dims() {
                0 => x,
                1 => x | (y << 10),
                _ => x | (y << 10) | (z << 20),
            };
            w.vgpr[0][lane as usize] = ids;
        }
    }
    w.set_exec(exec);
    w.mode = setup.initial_mode();
    w.sgpr[sreg::M0 as usize] = 0;
    let _ = SHARED_APERTURE; // apertures are constants read through src_shared_base etc.
    Ok(if setup.kernarg_preload_length > 0 {
        entry + KERNARG_PRELOAD_SKIP
    } else {
        entry
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn descriptor() -> [u8; 64] {
        // The Triton MXFP4 kernel's settings: dispatch ptr, queue ptr, kernarg ptr,
        // dispatch id, 8 preloaded dwords, user_sgpr_count 16, wg id x/y/z, workitem id 2.
        let mut kd = [0u8; 64];
        kd[8..12].copy_from_slice(&344u32.to_le_bytes());
        kd[16..24].copy_from_slice(&(-0x40i64).to_le_bytes());
        let rsrc2: u32 = (16 << 1) | (1 << 7) | (1 << 8) | (1 << 9) | (2 << 11);
        kd[52..56].copy_from_slice(&rsrc2.to_le_bytes());
        let rsrc3: u32 = 63; // accum_offset 256
        kd[44..48].copy_from_slice(&rsrc3.to_le_bytes());
        let rsrc1: u32 = (3 << 16) | (3 << 18) | (1 << 21) | (1 << 23);
        kd[48..52].copy_from_slice(&rsrc1.to_le_bytes());
        kd[56..58].copy_from_slice(&0b11110u16.to_le_bytes());
        kd[58..60].copy_from_slice(&8u16.to_le_bytes());
        kd
    }

    #[test]
    fn descriptor_fields() {
        let s = KernelSetup::from_descriptor(&descriptor());
        assert_eq!(s.kernarg_size, 344);
        assert_eq!(s.entry_offset, -0x40);
        assert_eq!(s.user_sgpr_count(), 16);
        assert_eq!(s.workitem_id_dims(), 2);
        assert_eq!(s.accum_offset(), 256);
        assert_eq!(s.kernarg_preload_length, 8);
        assert_eq!(s.kernarg_preload_offset, 0);
        // denorm 0xf in MODE bits 7:4, DX10 bit 8, IEEE bit 9.
        assert_eq!(s.initial_mode(), 0xf0 | (1 << 8) | (1 << 9));
    }

    #[test]
    fn user_and_system_sgprs_in_order() {
        let setup = KernelSetup::from_descriptor(&descriptor());
        let kernarg: Vec<u8> = (0..64u8).collect();
        let d = DispatchState {
            kernarg_addr: 0x1111_2222_3333,
            dispatch_ptr: 0x4444_5555_6666,
            queue_ptr: 0x7777_8888_9999,
            dispatch_id: 5,
            kernarg,
            block: [256, 1, 1],
            grid: [4, 3, 2],
        };
        let mut w = Wave::new(1, 0);
        let pc = init_wave(&setup, &d, [3, 2, 1], 1, 4, 0x1000, &mut w).unwrap();
        assert_eq!(pc, 0x1000 + 256, "preloading skips the fallback prologue");
        assert_eq!(w.sgpr64(0), 0x4444_5555_6666);
        assert_eq!(w.sgpr64(2), 0x7777_8888_9999);
        assert_eq!(w.sgpr64(4), 0x1111_2222_3333);
        assert_eq!(w.sgpr64(6), 5);
        assert_eq!(w.sgpr[8], u32::from_le_bytes([0, 1, 2, 3]));
        assert_eq!(w.sgpr[15], u32::from_le_bytes([28, 29, 30, 31]));
        assert_eq!(&w.sgpr[16..19], &[3, 2, 1]);
        // Wave 1 of a 256-wide block: work-items 64..127.
        assert_eq!(w.vgpr[0][0], 64);
        assert_eq!(w.vgpr[0][63], 127);
        assert_eq!(w.exec(), u64::MAX);
    }

    #[test]
    fn partial_wave_and_packed_ids() {
        let setup = KernelSetup::from_descriptor(&descriptor());
        let d = DispatchState {
            kernarg_addr: 0,
            dispatch_ptr: 0,
            queue_ptr: 0,
            dispatch_id: 0,
            kernarg: vec![],
            block: [8, 4, 3],
            grid: [1, 1, 1],
        };
        let mut w = Wave::new(1, 0);
        init_wave(&setup, &d, [0, 0, 0], 1, 2, 0, &mut w).unwrap();
        // 96 work-items: wave 1 has 32 of them.
        assert_eq!(w.exec(), 0xffff_ffff);
        // Lane 5 of wave 1 = work-item 69: x = 5, y = (69/8)%4 = 0, z = 69/32 = 2.
        assert_eq!(w.vgpr[0][5], 5 | (2 << 20));
        assert_eq!(w.vgpr[0][13], 5 | (1 << 10) | (2 << 20));
    }

    #[test]
    fn too_many_user_sgprs_is_a_launch_error() {
        let mut kd = descriptor();
        let rsrc2: u32 = 4 << 1;
        kd[52..56].copy_from_slice(&rsrc2.to_le_bytes());
        let setup = KernelSetup::from_descriptor(&kd);
        let d = DispatchState {
            kernarg_addr: 0,
            dispatch_ptr: 0,
            queue_ptr: 0,
            dispatch_id: 0,
            kernarg: vec![],
            block: [64, 1, 1],
            grid: [1, 1, 1],
        };
        let mut w = Wave::new(0, 0);
        assert!(matches!(
            init_wave(&setup, &d, [0; 3], 0, 1, 0, &mut w),
            Err(FaultKind::Launch(_))
        ));
    }
}
