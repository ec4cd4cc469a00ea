//! Printers of the immediates LLVM spells symbolically: `s_waitcnt`, `s_sendmsg`, `hwreg`,
//! `gpr_idx` and the `ds_swizzle_b32` pattern.

use super::tables::{HWREG_NAMES, SENDMSG};

/// `s_waitcnt` counters of the gfx9 family: vmcnt is split over bits 3:0 and 15:14, expcnt is
/// bits 6:4, lgkmcnt bits 11:8. A counter at its maximum waits for nothing and is left out,
/// unless all are.
pub(crate) fn waitcnt(v: u16) -> String {
    let vm = (v & 0xF) | ((v >> 14) & 3) << 4;
    let exp = (v >> 4) & 7;
    let lgkm = (v >> 8) & 0xF;
    let all_default = vm == 63 && exp == 7 && lgkm == 15;
    let mut parts = Vec::new();
    if vm != 63 || all_default {
        parts.push(format!("vmcnt({vm})"));
    }
    if exp != 7 || all_default {
        parts.push(format!("expcnt({exp})"));
    }
    if lgkm != 15 || all_default {
        parts.push(format!("lgkmcnt({lgkm})"));
    }
    parts.join(" ")
}

/// `s_sendmsg` operand. The generated table holds LLVM's spelling of every message in the 10
/// bits that encode one (id 3:0, operation 6:4, stream 9:8). A known message prints by name
/// whatever the other bits hold; the numeric `sendmsg(id, op, stream)` form is only used when
/// no other bits are set, and anything else prints as a plain number.
pub(crate) fn sendmsg(v: u16) -> String {
    let named = SENDMSG[(v & 0x3FF) as usize];
    let symbolic = named
        .strip_prefix("sendmsg(")
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_alphabetic()));
    if symbolic || (v < 0x400 && !named.is_empty()) {
        named.to_string()
    } else {
        v.to_string()
    }
}

/// `hwreg(id[, offset, size])`: id is bits 5:0, offset 10:6, size-1 15:11. The offset and size
/// are left out when they select the whole register.
pub(crate) fn hwreg(v: u16) -> String {
    let id = (v & 0x3F) as usize;
    let offset = (v >> 6) & 0x1F;
    let size = ((v >> 11) & 0x1F) + 1;
    let name = match HWREG_NAMES[id] {
        Some(n) => n.to_string(),
        None => id.to_string(),
    };
    if offset == 0 && size == 32 {
        format!("hwreg({name})")
    } else {
        format!("hwreg({name}, {offset}, {size})")
    }
}

/// `s_set_gpr_idx_on`/`s_set_gpr_idx_mode` enable bits: SRC0, SRC1, SRC2, DST.
pub(crate) fn gpr_idx(v: u32) -> String {
    if v & !0xF != 0 {
        return format!("{v:#x}");
    }
    let names = ["SRC0", "SRC1", "SRC2", "DST"];
    let on: Vec<&str> = (0..4)
        .filter(|i| v >> i & 1 != 0)
        .map(|i| names[i])
        .collect();
    format!("gpr_idx({})", on.join(","))
}

/// The `ds_swizzle_b32` offset pattern (after `offset:`).
///
/// gfx9 modes: FFT (bits 15:13 = 0b111), rotate (bits 15:14 = 0b11), quad permute (bit 15 set,
/// bits 14:8 clear), and the 32-lane bitmask permute (bit 15 clear) with and/or/xor masks in bits
/// 4:0, 9:5, 14:10.
pub(crate) fn swizzle(v: u16) -> String {
    if v >= 0xE000 {
        return format!("swizzle(FFT,{})", v & 0x1F);
    }
    if v >= 0xC000 {
        return format!("swizzle(ROTATE,{},{})", (v >> 10) & 1, (v >> 5) & 0x1F);
    }
    if v & 0xFF00 == 0x8000 {
        let l = |i: u16| (v >> (2 * i)) & 3;
        return format!("swizzle(QUAD_PERM,{},{},{},{})", l(0), l(1), l(2), l(3));
    }
    if v & 0x8000 != 0 {
        return v.to_string();
    }
    let and = v & 0x1F;
    let or = (v >> 5) & 0x1F;
    let xor = (v >> 10) & 0x1F;
    if and == 0x1F && or == 0 && xor.count_ones() == 1 {
        return format!("swizzle(SWAP,{xor})");
    }
    if and == 0x1F && or == 0 && xor > 0 && (xor + 1).is_power_of_two() {
        return format!("swizzle(REVERSE,{})", xor + 1);
    }
    let group = 0x1F - and + 1;
    if group > 1 && group.is_power_of_two() && or < group && xor == 0 {
        return format!("swizzle(BROADCAST,{group},{or})");
    }
    // Per lane-id bit from the top: constant 0/1, preserved (p) or inverted (i).
    let p0 = or ^ xor;
    let p1 = ((0x1F & and) | or) ^ xor;
    let mut s = String::from("swizzle(BITMASK_PERM,\"");
    for b in (0..5).rev() {
        let (a, c) = ((p0 >> b) & 1, (p1 >> b) & 1);
        s.push(match (a, c) {
            (0, 0) => '0',
            (1, 1) => '1',
            (0, _) => 'p',
            _ => 'i',
        });
    }
    s.push_str("\")");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waitcnt_matches_llvm_examples() {
        assert_eq!(waitcnt(0), "vmcnt(0) expcnt(0) lgkmcnt(0)");
        assert_eq!(waitcnt(0xC07F), "lgkmcnt(0)");
        assert_eq!(waitcnt(0x0F70), "vmcnt(0)");
        assert_eq!(waitcnt(0xFFFF), "vmcnt(63) expcnt(7) lgkmcnt(15)");
        assert_eq!(waitcnt(0x1234), "vmcnt(4) expcnt(3) lgkmcnt(2)");
    }

    #[test]
    fn swizzle_modes() {
        assert_eq!(swizzle(0x0201), "swizzle(BITMASK_PERM,\"1000p\")");
        assert_eq!(swizzle(0xFFFF), "swizzle(FFT,31)");
        assert_eq!(swizzle(0x80E4), "swizzle(QUAD_PERM,0,1,2,3)");
    }

    #[test]
    fn gpr_idx_names() {
        assert_eq!(gpr_idx(0), "gpr_idx()");
        assert_eq!(gpr_idx(3), "gpr_idx(SRC0,SRC1)");
        assert_eq!(gpr_idx(0x3C), "0x3c");
    }
}
