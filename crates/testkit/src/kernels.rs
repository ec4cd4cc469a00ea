//! Small hand-encoded gfx950 kernels several crates' tests run (machine words with their
//! disassembly, checked against llvm-mc-22 by the emulator's disassembler tests).

/// Each work-item stores its id in LDS, the two waves of a 128-item workgroup meet at the
/// barrier, and each then reads the id of work-item 127 - tid (written by the other wave) and
/// stores wg_y*10^6 + wg_x*10^3 + (127 - tid) to out[(wg_y*3 + wg_x)*128 + tid]: kernarg
/// pointer in s[0:1], workgroup ids x and y in s2 and s3, 512 bytes of LDS.
const EXCHANGE: &[u32] = &[
    0xc0060100, 0x00000000, // s_load_dwordx2 s[4:5], s[0:1], 0x0
    0x260200ff, 0x000003ff, // v_and_b32_e32 v1, 0x3ff, v0
    0x24040282, // v_lshlrev_b32_e32 v2, 2, v1
    0xd81a0000, 0x00000102, // ds_write_b32 v2, v1
    0xbf8cc07f, // s_waitcnt lgkmcnt(0)
    0xbf8a0000, // s_barrier
    0x6a0602ff, 0x0000007f, // v_sub_u32_e32 v3, 0x7f, v1
    0x24060682, // v_lshlrev_b32_e32 v3, 2, v3
    0xd86c0000, 0x04000003, // ds_read_b32 v4, v3
    0x9206ff03, 0x000f4240, // s_mul_i32 s6, s3, 0xf4240
    0x9207ff02, 0x000003e8, // s_mul_i32 s7, s2, 0x3e8
    0x80060706, // s_add_u32 s6, s6, s7
    0xbf8cc07f, // s_waitcnt lgkmcnt(0)
    0x68080806, // v_add_u32_e32 v4, s6, v4
    0x92088303, // s_mul_i32 s8, s3, 3
    0x80080208, // s_add_u32 s8, s8, s2
    0x8e088708, // s_lshl_b32 s8, s8, 7
    0x680a0208, // v_add_u32_e32 v5, s8, v1
    0x240a0a82, // v_lshlrev_b32_e32 v5, 2, v5
    0xbf8c0070, // s_waitcnt vmcnt(0) lgkmcnt(0)
    0xdc708000, 0x00040405, // global_store_dword v5, v4, s[4:5]
];

/// `s_endpgm`.
const ENDPGM: u32 = 0xbf81_0000;

/// The exchange kernel's code, `tail` (more machine words) appended before its `s_endpgm`.
pub fn exchange(tail: &[u32]) -> Vec<u8> {
    EXCHANGE
        .iter()
        .chain(tail)
        .chain(std::iter::once(&ENDPGM))
        .flat_map(|w| w.to_le_bytes())
        .collect()
}
