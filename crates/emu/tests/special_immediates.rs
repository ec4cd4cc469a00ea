//! Exhaustive sweeps of the immediates LLVM prints symbolically, against llvm-objdump-22:
//! every `s_waitcnt`, `s_sendmsg`, `hwreg`, `gpr_idx` and `ds_swizzle_b32` pattern, every DPP
//! control with every mask, every `bitop3` table and every SOPP immediate style.

mod common;

use common::{objdump_probes_in_slots, require_tool, scratch};
use tilegen_emu::isa::decode;

/// Decode every probe and compare with objdump; panics with the first differences.
fn sweep(name: &str, probes: Vec<Vec<u32>>, slot: usize) {
    require_tool(&common::llvm_mc());
    require_tool(&common::llvm_objdump());
    let dir = scratch(name);
    let want = objdump_probes_in_slots(&probes, &dir, slot);
    let _ = std::fs::remove_dir_all(&dir);
    let decoded = want.iter().filter(|w| w.is_some()).count();
    assert!(
        decoded * 4 >= probes.len(),
        "{name}: llvm-objdump decoded only {decoded} of {} probes; the sweep would prove little",
        probes.len()
    );
    let mut bad = Vec::new();
    for (p, w) in probes.iter().zip(&want) {
        let bytes: Vec<u8> = p.iter().flat_map(|x| x.to_le_bytes()).collect();
        let ours = decode(&bytes, 0)
            .ok()
            .map(|i| (i.to_string(), i.size as usize / 4));
        if ours != *w {
            bad.push(format!("  {:08x?}: llvm {:?}, ours {:?}", p, w, ours));
        }
    }
    assert!(
        bad.is_empty(),
        "{name}: {} of {} differ:\n{}",
        bad.len(),
        probes.len(),
        bad.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    );
}

fn all16(base: u32) -> Vec<Vec<u32>> {
    (0..=0xFFFFu32).map(|v| vec![base | v]).collect()
}

#[test]
fn s_waitcnt_every_immediate() {
    sweep("waitcnt", all16(0xBF8C_0000), 1);
}

#[test]
fn s_sendmsg_every_immediate() {
    sweep("sendmsg", all16(0xBF90_0000), 1);
}

#[test]
fn hwreg_every_immediate() {
    // s_getreg_b32 s7, hwreg(...)
    sweep("hwreg", all16(0xB887_0000), 1);
}

#[test]
fn gpr_idx_mode_every_immediate() {
    sweep("gpr_idx", all16(0xBF9D_0000), 1);
}

#[test]
fn sopp_immediate_styles() {
    // s_nop (hex above 64), s_endpgm (omitted when zero), s_branch (decimal), s_setprio.
    let mut p = Vec::new();
    for op in [0x00u32, 0x01, 0x02, 0x0F] {
        for v in (0..=0xFFFFu32).step_by(7).chain(0..=70) {
            p.push(vec![0xBF80_0000 | op << 16 | v]);
        }
    }
    sweep("sopp", p, 1);
}

#[test]
fn ds_swizzle_every_pattern() {
    // ds_swizzle_b32 v5, v6 offset:<pattern>
    let p = (0..=0xFFFFu32)
        .map(|v| vec![0xD87A_0000 | v, 0x0500_0006])
        .collect();
    sweep("swizzle", p, 2);
}

#[test]
fn dpp_every_control_and_mask() {
    let mut p = Vec::new();
    for ctrl in 0..0x200u32 {
        for masks in [0xFF, 0x5A, 0x00, 0xF1] {
            for bc in [0u32, 1] {
                let dpp = 0x21 | ctrl << 8 | bc << 19 | masks << 24;
                p.push(vec![0x7E06_02FA, dpp]); // v_mov_b32_dpp v3, v33
                p.push(vec![0x7E0C_70FA, dpp & !1]); // v_mov_b64_dpp v[6:7], v[32:33]
                p.push(vec![0x0206_04FA, dpp | 0x3 << 20]); // v_add_f32_dpp v3, -|v33|, v2
            }
        }
    }
    sweep("dpp", p, 2);
}

#[test]
fn bitop3_every_table() {
    let mut p = Vec::new();
    for v in 0..256u32 {
        // v_bitop3_b32 v16, s19, v2, v0 with the table spread over neg (2:0), abs (5:3) and
        // omod (7:6).
        let w0 = 0xD234_0010 | ((v >> 3) & 7) << 8;
        let w1 = 0x0002_0413 | (v & 7) << 29 | ((v >> 6) & 3) << 27;
        p.push(vec![w0, w1]);
    }
    sweep("bitop3", p, 2);
}
