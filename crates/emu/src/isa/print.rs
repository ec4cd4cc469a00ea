//! [`Inst`] -> the text `llvm-objdump-22 -d --mcpu=gfx950` prints for it (instruction only: no
//! address comment, no branch-target annotation).

use std::fmt::Write;

use super::decode::has_array;
use super::desc::{
    ArrayDesc, ArrayKind, Enc, ImmKind, OpDesc, OperandDesc, Role, Trail, ValueType,
};
use super::inst::{DppCtrl, DstUnused, Inst};
use super::operand::{InlineFloat, Operand};
use super::special;
use super::tables::MTBUF_FORMATS;

/// The instruction's disassembly text.
pub(crate) fn format_inst(inst: &Inst) -> String {
    let d = inst.desc();
    let mut s = String::from(d.mnemonic);
    let mut first = true;
    for o in d.operands {
        let Some(text) = operand_text(inst, d, o) else {
            continue;
        };
        s.push_str(if first { " " } else { ", " });
        first = false;
        s.push_str(&text);
    }
    for &t in d.trailing {
        if let Some(text) = trailing_text(inst, d, t) {
            s.push(' ');
            s.push_str(&text);
        }
    }
    s
}

fn hex(v: impl Into<u64>) -> String {
    format!("{:#x}", v.into())
}

fn signed_hex(v: i32) -> String {
    if v < 0 {
        format!("-{:#x}", -(v as i64))
    } else {
        format!("{v:#x}")
    }
}

fn is_int_inline(v: i64) -> bool {
    (-16..=64).contains(&v)
}

const F16_INLINE: [u16; 9] = [
    0x3800, 0xB800, 0x3C00, 0xBC00, 0x4000, 0xC000, 0x4400, 0xC400, 0x3118,
];
const BF16_INLINE: [u16; 9] = [
    0x3F00, 0xBF00, 0x3F80, 0xBF80, 0x4000, 0xC000, 0x4080, 0xC080, 0x3E22,
];
const F32_INLINE: [u32; 9] = [
    0x3F00_0000,
    0xBF00_0000,
    0x3F80_0000,
    0xBF80_0000,
    0x4000_0000,
    0xC000_0000,
    0x4080_0000,
    0xC080_0000,
    0x3E22_F983,
];
/// High dwords of the f64 inline constants ±0.5, ±1, ±2, ±4 (1/(2π) needs a low dword too).
const F64_HI_INLINE: [u32; 8] = [
    0x3FE0_0000,
    0xBFE0_0000,
    0x3FF0_0000,
    0xBFF0_0000,
    0x4000_0000,
    0xC000_0000,
    0x4010_0000,
    0xC010_0000,
];
const FLOAT_NAMES: [&str; 8] = ["0.5", "-0.5", "1.0", "-1.0", "2.0", "-2.0", "4.0", "-4.0"];

fn inlinable32(v: u32) -> bool {
    is_int_inline(v as i32 as i64) || F32_INLINE.contains(&v)
}

fn inlinable_f16(v: u16) -> bool {
    is_int_inline(v as i16 as i64) || F16_INLINE.contains(&v)
}

fn inlinable_bf16(v: u16) -> bool {
    is_int_inline(v as i16 as i64) || BF16_INLINE.contains(&v)
}

/// A literal dword as LLVM prints it in an operand of type `ty`. `lit(..)` marks a literal whose
/// value an inline constant could have encoded, so re-assembly keeps the literal.
fn literal_text(ty: ValueType, v: u32) -> String {
    let lo = v as u16;
    let lit = |keep: bool, shown: String| {
        if keep {
            format!("lit({})", hex(v))
        } else {
            shown
        }
    };
    match ty {
        ValueType::None => hex(v),
        ValueType::B32 => lit(inlinable32(v), hex(v)),
        ValueType::I16 => lit(inlinable32(v), hex(lo)),
        ValueType::F16 => lit(inlinable_f16(lo), hex(lo)),
        ValueType::Bf16 => lit(inlinable_bf16(lo), hex(v)),
        ValueType::F64 => {
            if v == 0 {
                "0".to_string()
            } else if let Some(i) = F64_HI_INLINE.iter().position(|&h| h == v) {
                FLOAT_NAMES[i].to_string()
            } else {
                hex(v)
            }
        }
        ValueType::I64 => lit(v <= 64, hex(v)),
        ValueType::V2F16 => lit(
            is_int_inline(v as i32 as i64) || (v <= 0xFFFF && F16_INLINE.contains(&lo)),
            hex(v),
        ),
        ValueType::V2Bf16 => lit(
            is_int_inline(v as i32 as i64) || (v <= 0xFFFF && BF16_INLINE.contains(&lo)),
            hex(v),
        ),
    }
}

/// A 32-bit value as LLVM's printImmediate32 spells it: small integers in decimal, the float
/// constants by name, anything else in hexadecimal.
fn imm32_text(v: u32) -> String {
    if is_int_inline(v as i32 as i64) {
        (v as i32).to_string()
    } else if let Some(i) = F32_INLINE.iter().position(|&f| f == v) {
        if i == 8 {
            "0.15915494".into()
        } else {
            FLOAT_NAMES[i].into()
        }
    } else {
        hex(v)
    }
}

fn inline_float_text(ty: ValueType, f: InlineFloat) -> String {
    match (ty, f) {
        (ValueType::I16, _) => hex(f.f16_bits()),
        (ValueType::F64 | ValueType::I64, InlineFloat::InvTwoPi) => "0.15915494309189532".into(),
        (_, InlineFloat::InvTwoPi) => "0.15915494".into(),
        (_, other) => FLOAT_NAMES[other as usize].into(),
    }
}

fn value_text(op: Operand, ty: ValueType) -> String {
    match op {
        Operand::Literal(v) => literal_text(ty, v),
        Operand::InlineFloat(f) => inline_float_text(ty, f),
        other => other.to_string(),
    }
}

fn src_index(role: Role) -> Option<u8> {
    match role {
        Role::Src0 => Some(0),
        Role::Src1 => Some(1),
        Role::Src2 => Some(2),
        _ => None,
    }
}

fn operand_text(inst: &Inst, d: &OpDesc, o: &OperandDesc) -> Option<String> {
    let op = inst.operands[o.role as usize];
    if let Enc::Imm(kind) = o.enc {
        let Operand::Imm(v) = op else {
            // An SMEM offset that names a register.
            return Some(op.to_string());
        };
        return imm_text(inst, kind, v);
    }
    let mut text = match (o.enc, op) {
        (Enc::LiteralImm32, Operand::Literal(v)) => imm32_text(v),
        _ => value_text(op, o.ty),
    };
    if let Some(i) = src_index(o.role) {
        let bit = 1u8 << i;
        let abs = inst.mods.abs & bit != 0;
        let neg = inst.mods.neg & bit != 0 && !has_array(d, ArrayKind::NegLo);
        if inst.mods.sext & bit != 0 {
            text = format!("sext({text})");
        }
        if abs {
            text = format!("|{text}|");
        }
        if neg {
            // `-1` would read as a constant of its own: LLVM writes neg(1) instead.
            let imm = matches!(
                op,
                Operand::InlineInt(_) | Operand::InlineFloat(_) | Operand::Literal(_)
            );
            text = if imm && !abs {
                format!("neg({text})")
            } else {
                format!("-{text}")
            };
        }
    }
    Some(text)
}

fn imm_text(inst: &Inst, kind: ImmKind, v: u32) -> Option<String> {
    Some(match kind {
        ImmKind::Hex => hex(v),
        ImmKind::Imm32 => {
            if v <= 64 {
                v.to_string()
            } else {
                hex(v)
            }
        }
        ImmKind::Branch => v.to_string(),
        ImmKind::DecNz => {
            if v == 0 {
                return None;
            }
            v.to_string()
        }
        ImmKind::Waitcnt => special::waitcnt(v as u16),
        ImmKind::Sendmsg => special::sendmsg(v as u16),
        ImmKind::Hwreg => special::hwreg(v as u16),
        ImmKind::GprIdx => special::gpr_idx(v),
        ImmKind::SmemOffset => signed_hex(inst.mem.offset),
    })
}

fn flag(on: bool, name: &str) -> Option<String> {
    on.then(|| name.to_string())
}

fn array_text(inst: &Inst, a: &ArrayDesc) -> Option<String> {
    let (name, bits) = match a.kind {
        ArrayKind::OpSel => ("op_sel", inst.mods.op_sel),
        ArrayKind::OpSelHi => ("op_sel_hi", inst.mods.op_sel_hi),
        ArrayKind::NegLo => ("neg_lo", inst.mods.neg),
        ArrayKind::NegHi => ("neg_hi", inst.mods.neg_hi),
        ArrayKind::BlgpNeg => ("neg", inst.mfma.blgp),
    };
    let vals: Vec<u8> = a
        .entries
        .iter()
        // 255: an entry no field feeds (the MFMA's own src2 in a scaled MFMA's list) reads 0.
        .map(|&b| if b == 255 { 0 } else { (bits >> b) & 1 })
        .collect();
    if vals.iter().all(|&v| v == a.default) {
        return None;
    }
    let list: Vec<String> = vals.iter().map(|v| v.to_string()).collect();
    Some(format!("{name}:[{}]", list.join(",")))
}

fn trailing_text(inst: &Inst, d: &OpDesc, t: Trail) -> Option<String> {
    let m = &inst.mem;
    match t {
        Trail::Offset => (m.offset != 0).then(|| format!("offset:{}", m.offset)),
        Trail::Offset0 => (m.offset0 != 0).then(|| format!("offset0:{}", m.offset0)),
        Trail::Offset1 => (m.offset1 != 0).then(|| format!("offset1:{}", m.offset1)),
        Trail::Swizzle => {
            (m.offset != 0).then(|| format!("offset:{}", special::swizzle(m.offset as u16)))
        }
        Trail::SmemOffset => {
            (m.smem_soe && m.smem_imm).then(|| format!("offset:{}", signed_hex(m.offset)))
        }
        Trail::Offen => flag(m.offen, "offen"),
        Trail::Idxen => flag(m.idxen, "idxen"),
        Trail::Sc0 => flag(m.sc0, "sc0"),
        Trail::Sc1 => flag(m.sc1, "sc1"),
        Trail::Nt => flag(m.nt, "nt"),
        Trail::Lds => flag(m.lds, "lds"),
        Trail::Glc => flag(m.glc, "glc"),
        Trail::Clamp => flag(inst.mods.clamp, "clamp"),
        Trail::Omod => match inst.mods.omod {
            1 => Some("mul:2".into()),
            2 => Some("mul:4".into()),
            3 => Some("div:2".into()),
            _ => None,
        },
        Trail::OpSel | Trail::OpSelHi | Trail::NegLo | Trail::NegHi | Trail::BlgpNeg => {
            let kind = match t {
                Trail::OpSel => ArrayKind::OpSel,
                Trail::OpSelHi => ArrayKind::OpSelHi,
                Trail::NegLo => ArrayKind::NegLo,
                Trail::NegHi => ArrayKind::NegHi,
                _ => ArrayKind::BlgpNeg,
            };
            d.arrays
                .iter()
                .find(|a| a.kind == kind)
                .and_then(|a| array_text(inst, a))
        }
        Trail::Cbsz => (inst.mfma.cbsz != 0).then(|| format!("cbsz:{}", inst.mfma.cbsz)),
        Trail::Abid => (inst.mfma.abid != 0).then(|| format!("abid:{}", inst.mfma.abid)),
        Trail::Blgp => (inst.mfma.blgp != 0).then(|| format!("blgp:{}", inst.mfma.blgp)),
        Trail::DstSel => Some(format!("dst_sel:{}", inst.sdwa.dst_sel.name())),
        Trail::DstUnused => Some(format!(
            "dst_unused:{}",
            match inst.sdwa.dst_unused {
                DstUnused::Pad => "UNUSED_PAD",
                DstUnused::Sext => "UNUSED_SEXT",
                DstUnused::Preserve => "UNUSED_PRESERVE",
            }
        )),
        Trail::Src0Sel => Some(format!("src0_sel:{}", inst.sdwa.src0_sel.name())),
        Trail::Src1Sel => Some(format!("src1_sel:{}", inst.sdwa.src1_sel.name())),
        Trail::DppCtrl => Some(dpp_ctrl_text(inst)),
        Trail::RowMask => Some(format!("row_mask:{}", hex(inst.dpp.row_mask))),
        Trail::BankMask => Some(format!("bank_mask:{}", hex(inst.dpp.bank_mask))),
        Trail::BoundCtrl => {
            let on = if inst.encoding.is_dpp() {
                inst.dpp.bound_ctrl
            } else {
                inst.mods.bound_ctrl
            };
            flag(on, "bound_ctrl:1")
        }
        Trail::Fi => flag(inst.mods.fi, "fi:1"),
        Trail::Format => {
            let f = MTBUF_FORMATS[(m.dfmt as usize & 15) * 8 + (m.nfmt as usize & 7)];
            (!f.is_empty()).then(|| f.to_string())
        }
        Trail::Bitop3 => {
            let v = inst.mods.bitop3;
            (v != 0).then(|| {
                if v <= 10 {
                    format!("bitop3:{v}")
                } else {
                    format!("bitop3:{}", hex(v))
                }
            })
        }
    }
}

fn dpp_ctrl_text(inst: &Inst) -> String {
    let ctrl = inst.dpp.control();
    // DPP of instructions with 64-bit operands only moves data with row_newbcast.
    let wide = inst
        .operands
        .iter()
        .any(|o| o.count() >= 2 && matches!(o, Operand::Vgpr { .. }));
    if wide && !matches!(ctrl, DppCtrl::RowNewBcast(_)) {
        return " /* DP ALU dpp only supports row_newbcast */".to_string();
    }
    let mut s = String::new();
    match ctrl {
        DppCtrl::QuadPerm(p) => {
            let _ = write!(s, "quad_perm:[{},{},{},{}]", p[0], p[1], p[2], p[3]);
        }
        DppCtrl::RowShl(n) => {
            let _ = write!(s, "row_shl:{n}");
        }
        DppCtrl::RowShr(n) => {
            let _ = write!(s, "row_shr:{n}");
        }
        DppCtrl::RowRor(n) => {
            let _ = write!(s, "row_ror:{n}");
        }
        DppCtrl::WaveShl1 => s.push_str("wave_shl:1"),
        DppCtrl::WaveRol1 => s.push_str("wave_rol:1"),
        DppCtrl::WaveShr1 => s.push_str("wave_shr:1"),
        DppCtrl::WaveRor1 => s.push_str("wave_ror:1"),
        DppCtrl::RowMirror => s.push_str("row_mirror"),
        DppCtrl::RowHalfMirror => s.push_str("row_half_mirror"),
        DppCtrl::RowBcast15 => s.push_str("row_bcast:15"),
        DppCtrl::RowBcast31 => s.push_str("row_bcast:31"),
        DppCtrl::RowNewBcast(n) => {
            let _ = write!(s, "row_newbcast:{n}");
        }
        DppCtrl::Invalid(v) if (0x160..=0x16F).contains(&v) => {
            s.push_str("/* row_xmask is not supported on ASICs earlier than GFX10 */")
        }
        DppCtrl::Invalid(_) => s.push_str("/* Invalid dpp_ctrl value */"),
    }
    s
}
