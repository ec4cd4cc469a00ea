//! Launch state: what the kernel descriptor asks for, and how a wave's registers look when it
//! starts (LLVM AMDGPUUsage, "Initial Kernel Execution State" and "Kernel Descriptor").

use super::fault::FaultKind;
use super::memory::{PRIVATE_APERTURE, SHARED_APERTURE};
use super::wave::{Wave, sreg};
use tilegen_codeobj::{DESCRIPTOR_BYTES, KernelDescriptor};

/// What a kernel's descriptor asks of a launch. Every field is read through
/// [`KernelDescriptor`]'s accessors (tilegen-codeobj is the one home of the descriptor layout);
/// this adds what only an executor needs, the initial MODE register.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelSetup {
    /// The kernel descriptor.
    pub descriptor: KernelDescriptor,
}

/// Bytes the hardware skips at the entry point when it preloads kernel arguments: the
/// compiler puts a fallback loader there for firmware that cannot preload (AMDGPUUsage,
/// "Preloaded Kernel Arguments").
pub const KERNARG_PRELOAD_SKIP: u64 = 256;

impl KernelSetup {
    /// Decodes a 64-byte kernel descriptor.
    pub fn from_descriptor(kd: &[u8; DESCRIPTOR_BYTES]) -> KernelSetup {
        KernelSetup {
            descriptor: KernelDescriptor::parse(kd),
        }
    }

    /// The setup a code-object kernel descriptor describes.
    pub fn from_kernel_descriptor(kd: &KernelDescriptor) -> KernelSetup {
        KernelSetup { descriptor: *kd }
    }

    /// The MODE register a wave starts with: round modes (bits 3:0), denorm modes (7:4),
    /// DX10 clamp (8), IEEE (9) and FP16_OVFL (23), from `COMPUTE_PGM_RSRC1`.
    pub fn initial_mode(&self) -> u32 {
        let r = self.descriptor.rsrc1();
        r.float_round_mode_32
            | r.float_round_mode_16_64 << 2
            | r.float_denorm_mode_32 << 4
            | r.float_denorm_mode_16_64 << 6
            | (r.enable_dx10_clamp as u32) << 8
            | (r.enable_ieee_mode as u32) << 9
            | (r.fp16_overflow as u32) << 23
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
    let kd = &setup.descriptor;
    // User SGPR values in the order the descriptor enables them.
    let mut user_vals: Vec<u32> = Vec::new();
    let mut push = |v: u32| user_vals.push(v);
    if kd.enable_sgpr_private_segment_buffer() {
        // Private segment buffer: a swizzled V# over the lanes' private memory, as the
        // hardware builds it (add_tid + swizzle). Buffer access through it is reported as
        // unimplemented swizzled addressing; gfx950 kernels use flat scratch instead.
        let base = PRIVATE_APERTURE;
        push(base as u32);
        push(((base >> 32) as u32 & 0xffff) | (1 << 31));
        push(u32::MAX);
        push(1 << 23);
    }
    if kd.enable_sgpr_dispatch_ptr() {
        push(d.dispatch_ptr as u32);
        push((d.dispatch_ptr >> 32) as u32);
    }
    if kd.enable_sgpr_queue_ptr() {
        push(d.queue_ptr as u32);
        push((d.queue_ptr >> 32) as u32);
    }
    if kd.enable_sgpr_kernarg_segment_ptr() {
        push(d.kernarg_addr as u32);
        push((d.kernarg_addr >> 32) as u32);
    }
    if kd.enable_sgpr_dispatch_id() {
        push(d.dispatch_id as u32);
        push((d.dispatch_id >> 32) as u32);
    }
    if kd.enable_sgpr_flat_scratch_init() {
        // Flat scratch init: gfx950 has architected flat scratch, so this only informs code
        // that reads it; private accesses go through the private aperture either way.
        push(0);
        push(0);
    }
    if kd.enable_sgpr_private_segment_size() {
        push(kd.private_segment_fixed_size);
    }
    for i in 0..kd.kernarg_preload_length() {
        let at = 4 * (kd.kernarg_preload_offset() + i) as usize;
        let mut b = [0u8; 4];
        for (k, byte) in b.iter_mut().enumerate() {
            *byte = d.kernarg.get(at + k).copied().unwrap_or(0);
        }
        push(u32::from_le_bytes(b));
    }
    let user = kd.user_sgpr_count() as usize;
    if user_vals.len() > user {
        return Err(FaultKind::Launch(format!(
            "kernel descriptor enables {} user SGPRs but USER_SGPR_COUNT is {user}",
            user_vals.len()
        )));
    }
    // System SGPRs follow the user SGPRs.
    let mut system = Vec::new();
    let wg_id_enabled = [
        kd.enable_workgroup_id_x(),
        kd.enable_workgroup_id_y(),
        kd.enable_workgroup_id_z(),
    ];
    for (dim, enabled) in wg_id_enabled.into_iter().enumerate() {
        if enabled {
            system.push(wg[dim]);
        }
    }
    if kd.enable_workgroup_info() {
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
            let ids = match kd.workitem_id_vgprs() {
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
    Ok(if kd.kernarg_preload_length() > 0 {
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
        let kd = &s.descriptor;
        assert_eq!(kd.kernarg_size, 344);
        assert_eq!(kd.kernel_code_entry_byte_offset, -0x40);
        assert_eq!(kd.user_sgpr_count(), 16);
        assert_eq!(kd.workitem_id_vgprs(), 2);
        assert_eq!(kd.accum_offset(), 256);
        assert_eq!(kd.kernarg_preload_length(), 8);
        assert_eq!(kd.kernarg_preload_offset(), 0);
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
