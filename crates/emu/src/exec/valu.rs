//! Vector ALU: VOP1/VOP2/VOP3/VOPC (with SDWA and DPP) and VOP3P packed math.
//!
//! Every operation computes all 64 lanes and then writes only the lanes EXEC (and, for DPP,
//! the row/bank masks and source validity) allows, so inactive lanes keep their values.
//! Floating-point source modifiers (`abs`, then `neg`) apply to floating-point operands only;
//! output modifiers (`omod`, then `clamp`) to floating-point results only. Rounding is
//! round-to-nearest-even; `MODE` round/denorm fields other than the default are not modelled.

// Lane loops index several parallel per-lane arrays at once; an index reads clearer than
// zipped iterators there.
#![allow(clippy::needless_range_loop)]

use super::alu;
use super::fault::FaultKind;
use super::fp::{self, BF8_E5M2, FP4_E2M1, FP8_E4M3, MiniFloat, Overflow};
use super::mfma::Vgpr;
use super::operands::{
    read_s32, read_v32, read_v64, vreg, write_s32, write_s64, write_v32, write_v64,
};
use super::wave::Wave;
use crate::isa::{DppCtrl, DstUnused, Encoding, Inst, Opcode, Operand, Role, SdwaSel, ValueType};

type Lanes = Vgpr;

const SRC: [Role; 3] = [Role::Src0, Role::Src1, Role::Src2];

fn unimpl(i: &Inst, what: &str) -> FaultKind {
    FaultKind::Unimplemented(format!("{} ({what})", i.mnemonic()))
}

fn mode_ieee(w: &Wave) -> bool {
    w.mode >> 9 & 1 != 0
}

fn mode_dx10(w: &Wave) -> bool {
    w.mode >> 8 & 1 != 0
}

fn fp16_ovfl(w: &Wave) -> bool {
    w.mode >> 23 & 1 != 0
}

// ---------------------------------------------------------------------------------------------
// DPP and SDWA
// ---------------------------------------------------------------------------------------------

/// Source lane DPP reads for destination `lane`, or `None` when the control points outside
/// the row/wave.
fn dpp_source(ctrl: DppCtrl, lane: usize) -> Option<usize> {
    let row = lane & !15;
    let r = lane % 16;
    match ctrl {
        DppCtrl::QuadPerm(sel) => Some((lane & !3) | sel[lane & 3] as usize),
        DppCtrl::RowShl(n) => (r + n as usize <= 15).then(|| lane + n as usize),
        DppCtrl::RowShr(n) => (r >= n as usize).then(|| lane - n as usize),
        DppCtrl::RowRor(n) => Some(row + (r + 16 - n as usize) % 16),
        DppCtrl::WaveShl1 => (lane < 63).then_some(lane + 1),
        DppCtrl::WaveRol1 => Some((lane + 1) % 64),
        DppCtrl::WaveShr1 => lane.checked_sub(1),
        DppCtrl::WaveRor1 => Some((lane + 63) % 64),
        DppCtrl::RowMirror => Some(row + 15 - r),
        DppCtrl::RowHalfMirror => Some((lane & !7) + 7 - lane % 8),
        DppCtrl::RowBcast15 => (lane >= 16).then(|| row - 1),
        DppCtrl::RowBcast31 => (lane >= 32).then_some(31),
        DppCtrl::RowNewBcast(n) => Some(row + n as usize),
        DppCtrl::Invalid(_) => None,
    }
}

/// Applies the DPP lane movement to `v` and returns the lanes allowed to write: a lane writes
/// when its row and bank are enabled and its source lane exists and is active; with
/// `bound_ctrl` an invalid source reads 0 and the lane still writes.
fn dpp(i: &Inst, exec: u64, v: &Lanes) -> Result<(Lanes, u64), FaultKind> {
    let ctrl = i.dpp.control();
    if let DppCtrl::Invalid(c) = ctrl {
        return Err(FaultKind::Illegal(format!("reserved dpp_ctrl {c:#x}")));
    }
    let mut out = [0u32; 64];
    let mut mask = 0u64;
    for (lane, o) in out.iter_mut().enumerate() {
        let enabled =
            i.dpp.row_mask >> (lane / 16) & 1 != 0 && i.dpp.bank_mask >> ((lane % 16) / 4) & 1 != 0;
        match dpp_source(ctrl, lane).filter(|&s| exec >> s & 1 != 0) {
            Some(s) => {
                *o = v[s];
                mask |= (enabled as u64) << lane;
            }
            None if i.dpp.bound_ctrl => mask |= (enabled as u64) << lane,
            None => {}
        }
    }
    Ok((out, mask))
}

fn sdwa_select(x: u32, sel: SdwaSel, sext: bool) -> u32 {
    let (shift, bits) = match sel {
        SdwaSel::Byte0 => (0, 8),
        SdwaSel::Byte1 => (8, 8),
        SdwaSel::Byte2 => (16, 8),
        SdwaSel::Byte3 => (24, 8),
        SdwaSel::Word0 => (0, 16),
        SdwaSel::Word1 => (16, 16),
        SdwaSel::Dword => return x,
    };
    let f = (x >> shift) & ((1 << bits) - 1);
    if sext {
        (((f << (32 - bits)) as i32) >> (32 - bits)) as u32
    } else {
        f
    }
}

fn sdwa_dst(old: u32, v: u32, sel: SdwaSel, unused: DstUnused) -> u32 {
    let (shift, bits) = match sel {
        SdwaSel::Byte0 => (0, 8),
        SdwaSel::Byte1 => (8, 8),
        SdwaSel::Byte2 => (16, 8),
        SdwaSel::Byte3 => (24, 8),
        SdwaSel::Word0 => (0, 16),
        SdwaSel::Word1 => (16, 16),
        SdwaSel::Dword => return v,
    };
    let field_mask = ((1u64 << bits) - 1) as u32;
    let field = (v & field_mask) << shift;
    let mask = field_mask << shift;
    match unused {
        DstUnused::Pad => field,
        DstUnused::Preserve => (old & !mask) | field,
        DstUnused::Sext => {
            // Bits above the field take its sign; bits below are zero.
            let sign = (v >> (bits - 1)) & 1;
            let above = if sign == 1 && shift + bits < 32 {
                u32::MAX << (shift + bits)
            } else {
                0
            };
            field | above
        }
    }
}

/// Per-lane value of source `k` after DPP movement (source 0) and SDWA selection.
fn fetch(w: &Wave, i: &Inst, k: usize) -> Result<Lanes, FaultKind> {
    let role = SRC[k];
    let mut v = read_v32(w, i.operand(role), i.value_type(role))?;
    if i.encoding.is_dpp() && k == 0 {
        v = dpp(i, w.exec(), &v)?.0;
    }
    if i.encoding.is_sdwa() && k < 2 {
        let sel = if k == 0 {
            i.sdwa.src0_sel
        } else {
            i.sdwa.src1_sel
        };
        let sext = i.mods.sext >> k & 1 != 0;
        for x in v.iter_mut() {
            *x = sdwa_select(*x, sel, sext);
        }
    }
    Ok(v)
}

/// Lanes this instruction writes.
fn write_mask(w: &Wave, i: &Inst) -> Result<u64, FaultKind> {
    let exec = w.exec();
    if i.encoding.is_dpp() {
        let v = read_v32(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
        Ok(exec & dpp(i, exec, &v)?.1)
    } else {
        Ok(exec)
    }
}

/// Writes a 32-bit result, honouring the SDWA destination select.
fn store(w: &mut Wave, i: &Inst, vals: &Lanes) -> Result<(), FaultKind> {
    let mask = write_mask(w, i)?;
    let dst = i.dst();
    if i.encoding.is_sdwa() && i.sdwa.dst_sel != SdwaSel::Dword {
        let r = vreg(&dst, 0)?;
        let old = w.vgpr[r];
        let mut merged = [0u32; 64];
        for l in 0..64 {
            merged[l] = sdwa_dst(old[l], vals[l], i.sdwa.dst_sel, i.sdwa.dst_unused);
        }
        return write_v32(w, dst, 0, mask, &merged);
    }
    write_v32(w, dst, 0, mask, vals)
}

// ---------------------------------------------------------------------------------------------
// Typed helpers
// ---------------------------------------------------------------------------------------------

fn fmods(i: &Inst, k: usize, mut x: f32) -> f32 {
    if i.mods.abs >> k & 1 != 0 {
        x = x.abs();
    }
    if i.mods.neg >> k & 1 != 0 {
        x = -x;
    }
    x
}

fn fmods64(i: &Inst, k: usize, mut x: f64) -> f64 {
    if i.mods.abs >> k & 1 != 0 {
        x = x.abs();
    }
    if i.mods.neg >> k & 1 != 0 {
        x = -x;
    }
    x
}

/// Output modifier and clamp of a floating-point result (computed in f64 so the same code
/// serves f16/f32/f64; scaling by 2, 4 or 0.5 is exact).
fn omod_clamp(w: &Wave, i: &Inst, x: f64) -> f64 {
    let mut x = match i.mods.omod {
        1 => x * 2.0,
        2 => x * 4.0,
        3 => x * 0.5,
        _ => x,
    };
    if i.mods.clamp {
        x = if x.is_nan() {
            if mode_dx10(w) { 0.0 } else { x }
        } else {
            x.clamp(0.0, 1.0)
        };
    }
    x
}

fn f32_srcs(w: &Wave, i: &Inst, n: usize) -> Result<Vec<[f32; 64]>, FaultKind> {
    (0..n)
        .map(|k| {
            let v = fetch(w, i, k)?;
            let mut o = [0f32; 64];
            for l in 0..64 {
                o[l] = fmods(i, k, f32::from_bits(v[l]));
            }
            Ok(o)
        })
        .collect()
}

fn op_f32(w: &mut Wave, i: &Inst, n: usize, f: impl Fn(&[f32]) -> f32) -> Result<(), FaultKind> {
    let s = f32_srcs(w, i, n)?;
    let mut out = [0u32; 64];
    let mut args = [0f32; 3];
    for l in 0..64 {
        for k in 0..n {
            args[k] = s[k][l];
        }
        let r = f(&args[..n]);
        out[l] = if i.mods.omod != 0 || i.mods.clamp {
            omod_clamp(w, i, r as f64) as f32
        } else {
            r
        }
        .to_bits();
    }
    store(w, i, &out)
}

fn op_u32(
    w: &mut Wave,
    i: &Inst,
    n: usize,
    f: impl Fn(&[u32], usize) -> u32,
) -> Result<(), FaultKind> {
    let s: Vec<Lanes> = (0..n).map(|k| fetch(w, i, k)).collect::<Result<_, _>>()?;
    let mut out = [0u32; 64];
    let mut args = [0u32; 3];
    for l in 0..64 {
        for k in 0..n {
            args[k] = s[k][l];
        }
        out[l] = f(&args[..n], l);
    }
    store(w, i, &out)
}

fn f64_srcs(w: &Wave, i: &Inst, n: usize) -> Result<Vec<[f64; 64]>, FaultKind> {
    if i.encoding.is_dpp() || i.encoding.is_sdwa() {
        return Err(unimpl(i, "DPP/SDWA on 64-bit operands"));
    }
    (0..n)
        .map(|k| {
            let v = read_v64(w, i.operand(SRC[k]), i.value_type(SRC[k]))?;
            let mut o = [0f64; 64];
            for l in 0..64 {
                o[l] = fmods64(i, k, f64::from_bits(v[l]));
            }
            Ok(o)
        })
        .collect()
}

fn op_f64(w: &mut Wave, i: &Inst, n: usize, f: impl Fn(&[f64]) -> f64) -> Result<(), FaultKind> {
    let s = f64_srcs(w, i, n)?;
    let mut out = [0u64; 64];
    let mut args = [0f64; 3];
    for l in 0..64 {
        for k in 0..n {
            args[k] = s[k][l];
        }
        out[l] = omod_clamp(w, i, f(&args[..n])).to_bits();
    }
    let mask = w.exec();
    write_v64(w, i.dst(), mask, &out)
}

/// Half `k` of a 16-bit source: the high half when VOP3 `op_sel` bit `k` is set (SDWA has
/// already moved its selection into the low half).
fn half(i: &Inst, k: usize, x: u32) -> u16 {
    if i.encoding == Encoding::Vop3 && i.mods.op_sel >> k & 1 != 0 {
        (x >> 16) as u16
    } else {
        x as u16
    }
}

/// 16-bit VOP3 ops whose destination keeps the other half (the "native" VOP3 16-bit opcodes,
/// which the CDNA4 ISA defines to preserve it); promoted VOP1/VOP2 16-bit ops zero the high
/// half like their 32-bit encodings on gfx9.
fn preserves_other_half(op: Opcode) -> bool {
    use Opcode::*;
    matches!(
        op,
        V_MAD_F16
            | V_MAD_U16
            | V_MAD_I16
            | V_FMA_F16
            | V_DIV_FIXUP_F16
            | V_MAD_LEGACY_F16
            | V_MAD_LEGACY_U16
            | V_MAD_LEGACY_I16
            | V_FMA_LEGACY_F16
            | V_DIV_FIXUP_LEGACY_F16
    )
}

/// Stores 16-bit results: the high half when VOP3 `op_sel[3]` is set (low half kept),
/// otherwise the low half (high half zeroed, or kept for [`preserves_other_half`] ops).
fn store16(w: &mut Wave, i: &Inst, vals: &[u16; 64]) -> Result<(), FaultKind> {
    let hi = i.encoding == Encoding::Vop3 && i.mods.op_sel >> 3 & 1 != 0;
    let keep = hi || (i.encoding == Encoding::Vop3 && preserves_other_half(i.op));
    let mut out = [0u32; 64];
    let old = if keep {
        w.vgpr[vreg(&i.dst(), 0)?]
    } else {
        [0; 64]
    };
    for l in 0..64 {
        out[l] = if hi {
            (old[l] & 0xffff) | ((vals[l] as u32) << 16)
        } else if keep {
            (old[l] & 0xffff_0000) | vals[l] as u32
        } else {
            vals[l] as u32
        };
    }
    store(w, i, &out)
}

fn op_f16(w: &mut Wave, i: &Inst, n: usize, f: impl Fn(&[f32]) -> f64) -> Result<(), FaultKind> {
    let s: Vec<Lanes> = (0..n).map(|k| fetch(w, i, k)).collect::<Result<_, _>>()?;
    let mut out = [0u16; 64];
    let mut args = [0f32; 3];
    for l in 0..64 {
        for k in 0..n {
            args[k] = fmods(i, k, fp::f16_to_f32(half(i, k, s[k][l])));
        }
        // Computed exactly enough in f64 and rounded once to f16.
        let r = omod_clamp(w, i, f(&args[..n]));
        out[l] = fp::F16.encode(r, Overflow::InfOrNan) as u16;
        if r.is_nan() {
            out[l] = 0x7e00;
        }
    }
    store16(w, i, &out)
}

fn op_u16(w: &mut Wave, i: &Inst, n: usize, f: impl Fn(&[u16]) -> u16) -> Result<(), FaultKind> {
    let s: Vec<Lanes> = (0..n).map(|k| fetch(w, i, k)).collect::<Result<_, _>>()?;
    let mut out = [0u16; 64];
    let mut args = [0u16; 3];
    for l in 0..64 {
        for k in 0..n {
            args[k] = half(i, k, s[k][l]);
        }
        out[l] = f(&args[..n]);
    }
    store16(w, i, &out)
}

/// Writes a per-lane condition mask (`v_cmp*`, carry-outs) to a scalar destination; bits of
/// inactive lanes are zero.
fn write_mask_dst(w: &mut Wave, op: Operand, bits: u64) -> Result<(), FaultKind> {
    match op.count() {
        1 => write_s32(w, op, bits as u32),
        _ => write_s64(w, op, bits),
    }
}

fn read_mask(w: &Wave, op: Operand) -> Result<u64, FaultKind> {
    super::operands::read_s64(w, op, ValueType::I64)
}

// ---------------------------------------------------------------------------------------------
// Floating-point details
// ---------------------------------------------------------------------------------------------

fn frexp32(x: f32) -> (f32, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let (m, e) = frexp64(x as f64);
    (m as f32, e)
}

fn frexp64(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    let bits = x.to_bits();
    let exp = ((bits >> 52) & 0x7ff) as i32;
    if exp == 0 {
        // Subnormal: normalise first.
        let (m, e) = frexp64(x * fp::pow2(64));
        return (m, e - 64);
    }
    let m = f64::from_bits((bits & !(0x7ffu64 << 52)) | (1022u64 << 52));
    (m, exp - 1022)
}

fn ldexp64(x: f64, e: i32) -> f64 {
    // Split the scaling so intermediate powers of two stay representable.
    let e = e.clamp(-2200, 2200);
    let (a, b) = (e / 2, e - e / 2);
    x * fp::pow2(a) * fp::pow2(b)
}

fn fract32(x: f32) -> f32 {
    if x.is_infinite() {
        return f32::NAN;
    }
    // The largest f32 below 1.0 bounds the result for tiny negative inputs.
    (x - x.floor()).min(f32::from_bits(0x3f7f_ffff))
}

fn fract64(x: f64) -> f64 {
    if x.is_infinite() {
        return f64::NAN;
    }
    (x - x.floor()).min(f64::from_bits(0x3fef_ffff_ffff_ffff))
}

fn class_bits32(x: f32) -> u32 {
    let b = x.to_bits();
    let neg = b >> 31 != 0;
    if x.is_nan() {
        return if alu::is_snan_f32(x) { 1 } else { 2 };
    }
    if x.is_infinite() {
        return if neg { 1 << 2 } else { 1 << 9 };
    }
    if x == 0.0 {
        return if neg { 1 << 5 } else { 1 << 6 };
    }
    let denorm = b & 0x7f80_0000 == 0;
    match (neg, denorm) {
        (true, false) => 1 << 3,
        (true, true) => 1 << 4,
        (false, true) => 1 << 7,
        (false, false) => 1 << 8,
    }
}

fn class_bits64(x: f64) -> u32 {
    let b = x.to_bits();
    let neg = b >> 63 != 0;
    if x.is_nan() {
        return if b & (1 << 51) == 0 { 1 } else { 2 };
    }
    if x.is_infinite() {
        return if neg { 1 << 2 } else { 1 << 9 };
    }
    if x == 0.0 {
        return if neg { 1 << 5 } else { 1 << 6 };
    }
    let denorm = b & (0x7ff << 52) == 0;
    match (neg, denorm) {
        (true, false) => 1 << 3,
        (true, true) => 1 << 4,
        (false, true) => 1 << 7,
        (false, false) => 1 << 8,
    }
}

fn class_bits16(h: u16) -> u32 {
    let x = fp::f16_to_f32(h);
    let neg = h >> 15 != 0;
    if x.is_nan() {
        return if h & 0x200 == 0 { 1 } else { 2 };
    }
    if x.is_infinite() {
        return if neg { 1 << 2 } else { 1 << 9 };
    }
    if x == 0.0 {
        return if neg { 1 << 5 } else { 1 << 6 };
    }
    let denorm = h & 0x7c00 == 0;
    match (neg, denorm) {
        (true, false) => 1 << 3,
        (true, true) => 1 << 4,
        (false, true) => 1 << 7,
        (false, false) => 1 << 8,
    }
}

/// The 16 floating-point compare predicates in opcode order (F, LT, EQ, LE, GT, LG, GE, O, U,
/// NGE, NLG, NGT, NLE, NEQ, NLT, TRU).
fn fcmp(pred: usize, a: f64, b: f64) -> bool {
    let unordered = a.is_nan() || b.is_nan();
    match pred {
        0 => false,
        1 => a < b,
        2 => a == b,
        3 => a <= b,
        4 => a > b,
        5 => !unordered && a != b,
        6 => a >= b,
        7 => !unordered,
        8 => unordered,
        // The "not" predicates are true for unordered operands.
        9 => unordered || a < b,
        10 => unordered || a == b,
        11 => unordered || a <= b,
        12 => unordered || a > b,
        13 => unordered || a != b,
        14 => unordered || a >= b,
        _ => true,
    }
}

/// The 8 integer compare predicates (F, LT, EQ, LE, GT, NE, GE, T).
fn icmp<T: Ord>(pred: usize, a: T, b: T) -> bool {
    match pred {
        0 => false,
        1 => a < b,
        2 => a == b,
        3 => a <= b,
        4 => a > b,
        5 => a != b,
        6 => a >= b,
        _ => true,
    }
}

/// (type, predicate index, is cmpx) of a compare opcode, derived from its name.
fn cmp_kind(i: &Inst) -> Option<(&'static str, usize, bool)> {
    let name = format!("{:?}", i.op).to_ascii_lowercase();
    let rest = name.strip_prefix("v_cmp")?;
    let (x, rest) = match rest.strip_prefix('x') {
        Some(r) => (true, r),
        None => (false, rest),
    };
    let rest = rest.strip_prefix('_')?;
    let (pred, ty) = rest.rsplit_once('_')?;
    let ty: &'static str = match ty {
        "f16" => "f16",
        "f32" => "f32",
        "f64" => "f64",
        "i16" => "i16",
        "u16" => "u16",
        "i32" => "i32",
        "u32" => "u32",
        "i64" => "i64",
        "u64" => "u64",
        _ => return None,
    };
    if pred == "class" {
        return Some((ty, usize::MAX, x));
    }
    let fpreds = [
        "f", "lt", "eq", "le", "gt", "lg", "ge", "o", "u", "nge", "nlg", "ngt", "nle", "neq",
        "nlt", "tru",
    ];
    let ipreds = ["f", "lt", "eq", "le", "gt", "ne", "ge", "t"];
    let idx = if ty.starts_with('f') {
        fpreds.iter().position(|p| *p == pred)?
    } else {
        ipreds.iter().position(|p| *p == pred)?
    };
    Some((ty, idx, x))
}

fn compare(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    let (ty, pred, cmpx) = cmp_kind(i).ok_or_else(|| unimpl(i, "unknown compare"))?;
    let exec = w.exec();
    let mut bits = 0u64;
    match ty {
        "f64" | "i64" | "u64" => {
            let a = read_v64(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
            let b = read_v64(w, i.operand(Role::Src1), i.value_type(Role::Src1))?;
            for l in 0..64 {
                let r = match ty {
                    "f64" if pred == usize::MAX => {
                        class_bits64(fmods64(i, 0, f64::from_bits(a[l]))) & b[l] as u32 != 0
                    }
                    "f64" => fcmp(
                        pred,
                        fmods64(i, 0, f64::from_bits(a[l])),
                        fmods64(i, 1, f64::from_bits(b[l])),
                    ),
                    "i64" => icmp(pred, a[l] as i64, b[l] as i64),
                    _ => icmp(pred, a[l], b[l]),
                };
                bits |= (r as u64) << l;
            }
        }
        _ => {
            let a = fetch(w, i, 0)?;
            let b = fetch(w, i, 1)?;
            for l in 0..64 {
                let r = match ty {
                    "f32" if pred == usize::MAX => {
                        class_bits32(fmods(i, 0, f32::from_bits(a[l]))) & b[l] != 0
                    }
                    "f32" => fcmp(
                        pred,
                        fmods(i, 0, f32::from_bits(a[l])) as f64,
                        fmods(i, 1, f32::from_bits(b[l])) as f64,
                    ),
                    "f16" if pred == usize::MAX => {
                        let h = half(i, 0, a[l]);
                        let h = fp::f32_to_f16(fmods(i, 0, fp::f16_to_f32(h)));
                        class_bits16(h) & b[l] != 0
                    }
                    "f16" => fcmp(
                        pred,
                        fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l]))) as f64,
                        fmods(i, 1, fp::f16_to_f32(half(i, 1, b[l]))) as f64,
                    ),
                    "i32" => icmp(pred, a[l] as i32, b[l] as i32),
                    "u32" => icmp(pred, a[l], b[l]),
                    "i16" => icmp(pred, half(i, 0, a[l]) as i16, half(i, 1, b[l]) as i16),
                    _ => icmp(pred, half(i, 0, a[l]), half(i, 1, b[l])),
                };
                bits |= (r as u64) << l;
            }
        }
    }
    bits &= exec;
    write_mask_dst(w, i.dst(), bits)?;
    if cmpx {
        w.set_exec(bits);
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Conversions with small formats
// ---------------------------------------------------------------------------------------------

fn byte_sel(i: &Inst) -> u32 {
    // VOP3 forms pick the byte with op_sel[1:0]; SDWA has already selected it.
    if i.encoding == Encoding::Vop3 {
        (i.mods.op_sel & 3) as u32
    } else {
        0
    }
}

fn word_sel(i: &Inst) -> u32 {
    if i.encoding == Encoding::Vop3 {
        (i.mods.op_sel & 1) as u32
    } else {
        0
    }
}

fn narrow_overflow(w: &Wave, i: &Inst) -> Overflow {
    if i.mods.clamp || fp16_ovfl(w) {
        Overflow::Saturate
    } else {
        Overflow::InfOrNan
    }
}

/// `v_cvt_scalef32_*`: conversions between f32/f16/bf16 and FP8/BF8/FP4 with an E8M0 scale
/// taken from the exponent field of source 1 (CDNA4 ISA 7.3).
fn scalef32(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    let src = fetch(w, i, 0)?;
    let scale = fetch(w, i, 1)?;
    let ovf = narrow_overflow(w, i);
    let exec = w.exec();
    // Widening to two f32 results (a 64-bit destination).
    let widen_pk_f32 = |fmt: &MiniFloat, per: u32, sel: u32| -> [u64; 64] {
        let mut out = [0u64; 64];
        for l in 0..64 {
            let bits = fmt.bits();
            let base = sel * per * bits;
            let lo =
                alu::cvt_scalef32_from(fmt, (src[l] >> base) & fmt.code_mask(), scale[l]) as f32;
            let hi =
                alu::cvt_scalef32_from(fmt, (src[l] >> (base + bits)) & fmt.code_mask(), scale[l])
                    as f32;
            out[l] = lo.to_bits() as u64 | ((hi.to_bits() as u64) << 32);
        }
        out
    };
    match i.op {
        V_CVT_SCALEF32_PK_F32_FP4 => {
            let out = widen_pk_f32(&FP4_E2M1, 2, byte_sel(i));
            write_v64(w, i.dst(), exec, &out)
        }
        V_CVT_SCALEF32_PK_F32_FP8 | V_CVT_SCALEF32_PK_F32_BF8 => {
            let fmt = if i.op == V_CVT_SCALEF32_PK_F32_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let out = widen_pk_f32(&fmt, 2, word_sel(i));
            write_v64(w, i.dst(), exec, &out)
        }
        V_CVT_SCALEF32_F32_FP8 | V_CVT_SCALEF32_F32_BF8 => {
            let fmt = if i.op == V_CVT_SCALEF32_F32_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let sel = byte_sel(i);
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = (alu::cvt_scalef32_from(&fmt, (src[l] >> (8 * sel)) & 0xff, scale[l])
                    as f32)
                    .to_bits();
            }
            store(w, i, &out)
        }
        V_CVT_SCALEF32_PK_BF16_FP4
        | V_CVT_SCALEF32_PK_F16_FP4
        | V_CVT_SCALEF32_PK_BF16_FP8
        | V_CVT_SCALEF32_PK_BF16_BF8
        | V_CVT_SCALEF32_PK_F16_FP8
        | V_CVT_SCALEF32_PK_F16_BF8 => {
            // Two elements of the selected byte (FP4) or word (FP8/BF8) become two halves.
            let (fmt, shift) = match i.op {
                V_CVT_SCALEF32_PK_BF16_FP4 | V_CVT_SCALEF32_PK_F16_FP4 => {
                    (FP4_E2M1, 8 * byte_sel(i))
                }
                V_CVT_SCALEF32_PK_BF16_FP8 | V_CVT_SCALEF32_PK_F16_FP8 => {
                    (FP8_E4M3, 16 * word_sel(i))
                }
                _ => (BF8_E5M2, 16 * word_sel(i)),
            };
            let to_bf16 = matches!(
                i.op,
                V_CVT_SCALEF32_PK_BF16_FP4
                    | V_CVT_SCALEF32_PK_BF16_FP8
                    | V_CVT_SCALEF32_PK_BF16_BF8
            );
            let bits = fmt.bits();
            // Hot in Triton's FP4-to-bf16 GEMM path, hence the table and the f32 route: an
            // FP8/BF8/FP4 value times a power of two in [2^-127, 2^127] has at most four
            // significant bits and a magnitude of at least 2^-145, so it is exact in f32 (or
            // overflows there exactly when it overflows bf16/f16), and converting the f32
            // rounds once, as converting the exact value would.
            let lut = fmt.cached_table();
            let mut out = [0u32; 64];
            for l in 0..64 {
                let mut r = 0u32;
                for e in 0..2 {
                    let code = (src[l] >> (shift + e * bits)) & fmt.code_mask();
                    let v = (lut[code as usize] as f64 * alu::scalef32(scale[l])) as f32;
                    let h = if v.is_nan() {
                        if to_bf16 { 0x7fc0 } else { 0x7e00 }
                    } else if to_bf16 {
                        fp::f32_to_bf16(v) as u32
                    } else {
                        fp::f32_to_f16(v) as u32
                    };
                    r |= h << (16 * e);
                }
                out[l] = r;
            }
            store(w, i, &out)
        }
        V_CVT_SCALEF32_F16_FP8 | V_CVT_SCALEF32_F16_BF8 => {
            // One element to one half; op_sel[1:0] pick the source byte, op_sel[3] the
            // destination half (the other half is kept).
            let fmt = if i.op == V_CVT_SCALEF32_F16_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let sel = byte_sel(i);
            let mut out = [0u16; 64];
            for l in 0..64 {
                let v = alu::cvt_scalef32_from(&fmt, (src[l] >> (8 * sel)) & 0xff, scale[l]);
                out[l] = if v.is_nan() {
                    0x7e00
                } else {
                    fp::F16.encode(v, Overflow::InfOrNan) as u16
                };
            }
            let hi = i.mods.op_sel >> 3 & 1 != 0;
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let mut merged = [0u32; 64];
            for l in 0..64 {
                merged[l] = if hi {
                    (old[l] & 0xffff) | ((out[l] as u32) << 16)
                } else {
                    (old[l] & 0xffff_0000) | out[l] as u32
                };
            }
            store(w, i, &merged)
        }
        V_CVT_SCALEF32_PK_FP8_F32 | V_CVT_SCALEF32_PK_BF8_F32 | V_CVT_SCALEF32_PK_FP4_F32 => {
            // Two f32 sources become two codes written to the word (FP8) or byte (FP4)
            // op_sel[3] / op_sel[3:2] selects; the rest of the destination is kept.
            let b = fetch(w, i, 1)?;
            let scale2 = fetch(w, i, 2)?;
            let (fmt, width, slot) = match i.op {
                V_CVT_SCALEF32_PK_FP8_F32 => (FP8_E4M3, 16, (i.mods.op_sel >> 3 & 1) as u32),
                V_CVT_SCALEF32_PK_BF8_F32 => (BF8_E5M2, 16, (i.mods.op_sel >> 3 & 1) as u32),
                _ => (FP4_E2M1, 8, (i.mods.op_sel >> 2 & 3) as u32),
            };
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let mut out = [0u32; 64];
            let sat = ovf == Overflow::Saturate;
            for l in 0..64 {
                let x0 = fmods(i, 0, f32::from_bits(src[l]));
                let x1 = fmods(i, 1, f32::from_bits(b[l]));
                let c0 = alu::cvt_scalef32_to(&fmt, x0, scale2[l], sat);
                let c1 = alu::cvt_scalef32_to(&fmt, x1, scale2[l], sat);
                let field = c0 | (c1 << fmt.bits());
                let mask = ((1u64 << width) - 1) as u32;
                out[l] = (old[l] & !(mask << (width * slot))) | ((field & mask) << (width * slot));
            }
            store(w, i, &out)
        }
        V_CVT_SCALEF32_PK_FP8_F16
        | V_CVT_SCALEF32_PK_BF8_F16
        | V_CVT_SCALEF32_PK_FP8_BF16
        | V_CVT_SCALEF32_PK_BF8_BF16
        | V_CVT_SCALEF32_PK_FP4_F16
        | V_CVT_SCALEF32_PK_FP4_BF16 => {
            // A packed pair of halves becomes two codes in the selected word/byte.
            let from_bf16 = matches!(
                i.op,
                V_CVT_SCALEF32_PK_FP8_BF16
                    | V_CVT_SCALEF32_PK_BF8_BF16
                    | V_CVT_SCALEF32_PK_FP4_BF16
            );
            let (fmt, width, slot) = match i.op {
                V_CVT_SCALEF32_PK_FP8_F16 | V_CVT_SCALEF32_PK_FP8_BF16 => {
                    (FP8_E4M3, 16, (i.mods.op_sel >> 3 & 1) as u32)
                }
                V_CVT_SCALEF32_PK_BF8_F16 | V_CVT_SCALEF32_PK_BF8_BF16 => {
                    (BF8_E5M2, 16, (i.mods.op_sel >> 3 & 1) as u32)
                }
                _ => (FP4_E2M1, 8, (i.mods.op_sel >> 2 & 3) as u32),
            };
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let sat = ovf == Overflow::Saturate;
            let mut out = [0u32; 64];
            for l in 0..64 {
                let h = |e: u32| {
                    let bits = (src[l] >> (16 * e)) as u16;
                    if from_bf16 {
                        fp::bf16_to_f32(bits)
                    } else {
                        fp::f16_to_f32(bits)
                    }
                };
                let field = alu::cvt_scalef32_to(&fmt, h(0), scale[l], sat)
                    | (alu::cvt_scalef32_to(&fmt, h(1), scale[l], sat) << fmt.bits());
                let mask = ((1u64 << width) - 1) as u32;
                out[l] = (old[l] & !(mask << (width * slot))) | ((field & mask) << (width * slot));
            }
            store(w, i, &out)
        }
        _ => Err(unimpl(
            i,
            "this scaled conversion (stochastic rounding and FP6/BF6 forms are not implemented)",
        )),
    }
}

// ---------------------------------------------------------------------------------------------
// The opcode table
// ---------------------------------------------------------------------------------------------

fn lane_mask_below(lane: usize) -> u64 {
    if lane == 0 {
        0
    } else {
        u64::MAX >> (64 - lane)
    }
}

fn sat_u32(v: i64) -> u32 {
    v.clamp(0, u32::MAX as i64) as u32
}

fn sat_i32(v: i64) -> u32 {
    v.clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32
}

/// Executes a VOP1/VOP2/VOP3/VOPC (any of their SDWA/DPP forms) or VOP3P instruction.
pub fn exec(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    if i.encoding == Encoding::Vop3p {
        return vop3p(w, i);
    }
    if i.encoding.is_dpp() && i.dpp.control() == DppCtrl::Invalid(i.dpp.ctrl) {
        return Err(FaultKind::Illegal(format!(
            "reserved dpp_ctrl {:#x}",
            i.dpp.ctrl
        )));
    }
    let ieee = mode_ieee(w);
    let clampi = i.mods.clamp;
    match i.op {
        V_NOP | V_CLREXCP => Ok(()),
        // ---------------- moves and lane access ----------------
        V_MOV_B32 => op_f32_or_bits(w, i),
        V_MOV_B64 => {
            let v = read_v64(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &v)
        }
        V_READFIRSTLANE_B32 => {
            let v = read_v32(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
            let exec = w.exec();
            // With EXEC zero the ISA reads lane 0.
            let lane = if exec == 0 {
                0
            } else {
                exec.trailing_zeros() as usize
            };
            write_s32(w, i.dst(), v[lane])
        }
        V_READLANE_B32 => {
            let v = read_v32(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
            let lane = read_s32(w, i.operand(Role::Src1), i.value_type(Role::Src1))? & 63;
            write_s32(w, i.dst(), v[lane as usize])
        }
        V_WRITELANE_B32 => {
            let v = read_s32(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
            let lane = read_s32(w, i.operand(Role::Src1), i.value_type(Role::Src1))? & 63;
            let r = vreg(&i.dst(), 0)?;
            // v_writelane ignores EXEC.
            w.vgpr[r][lane as usize] = v;
            Ok(())
        }
        V_SWAP_B32 => {
            let (a, b) = (vreg(&i.dst(), 0)?, vreg(&i.operand(Role::Src0), 0)?);
            let exec = w.exec();
            let (va, vb) = (w.vgpr[a], w.vgpr[b]);
            w.write_lanes(a, exec, &vb);
            w.write_lanes(b, exec, &va);
            Ok(())
        }
        V_PERMLANE16_SWAP_B32 | V_PERMLANE32_SWAP_B32 => {
            // vdst's odd 16-lane rows trade with src0's even rows (16), or vdst's upper 32
            // lanes with src0's lower 32 (32); each written lane obeys EXEC.
            let (d, s) = (vreg(&i.dst(), 0)?, vreg(&i.operand(Role::Src0), 0)?);
            let exec = w.exec();
            let (mut vd, mut vs) = (w.vgpr[d], w.vgpr[s]);
            let pairs: Vec<(usize, usize)> = if i.op == V_PERMLANE32_SWAP_B32 {
                (0..32).map(|l| (l + 32, l)).collect()
            } else {
                (0..16)
                    .flat_map(|l| [(l + 16, l), (l + 48, l + 32)])
                    .collect()
            };
            for (dl, sl) in pairs {
                let (a, b) = (vd[dl], vs[sl]);
                if exec >> dl & 1 != 0 {
                    vd[dl] = b;
                }
                if exec >> sl & 1 != 0 {
                    vs[sl] = a;
                }
            }
            w.vgpr[d] = vd;
            w.vgpr[s] = vs;
            Ok(())
        }
        V_ACCVGPR_MOV_B32 => {
            let v = read_v32(w, i.operand(Role::Src0), ValueType::B32)?;
            let mask = w.exec();
            write_v32(w, i.dst(), 0, mask, &v)
        }
        V_CNDMASK_B32 => {
            let mask = read_mask(w, i.operand(Role::Src2))?;
            let s = f32_srcs_bits(w, i)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = if mask >> l & 1 != 0 { s.1[l] } else { s.0[l] };
            }
            store(w, i, &out)
        }
        // ---------------- f32 arithmetic ----------------
        V_ADD_F32 => op_f32(w, i, 2, |a| a[0] + a[1]),
        V_SUB_F32 => op_f32(w, i, 2, |a| a[0] - a[1]),
        V_SUBREV_F32 => op_f32(w, i, 2, |a| a[1] - a[0]),
        V_MUL_F32 => op_f32(w, i, 2, |a| a[0] * a[1]),
        V_MUL_LEGACY_F32 => op_f32(w, i, 2, |a| {
            if a[0] == 0.0 || a[1] == 0.0 {
                0.0
            } else {
                a[0] * a[1]
            }
        }),
        V_MIN_F32 => op_f32(w, i, 2, |a| alu::minmax_f32(a[0], a[1], false, ieee)),
        V_MAX_F32 => op_f32(w, i, 2, |a| alu::minmax_f32(a[0], a[1], true, ieee)),
        V_MIN3_F32 => op_f32(w, i, 3, |a| {
            alu::minmax_f32(alu::minmax_f32(a[0], a[1], false, ieee), a[2], false, ieee)
        }),
        V_MAX3_F32 => op_f32(w, i, 3, |a| {
            alu::minmax_f32(alu::minmax_f32(a[0], a[1], true, ieee), a[2], true, ieee)
        }),
        V_MED3_F32 => op_f32(w, i, 3, |a| alu::med3_f32(a[0], a[1], a[2], ieee)),
        V_MINIMUM3_F32 => op_f32(w, i, 3, |a| {
            alu::maximum_f32(alu::maximum_f32(a[0], a[1], false), a[2], false)
        }),
        V_MAXIMUM3_F32 => op_f32(w, i, 3, |a| {
            alu::maximum_f32(alu::maximum_f32(a[0], a[1], true), a[2], true)
        }),
        V_FMA_F32 => op_f32(w, i, 3, |a| a[0].mul_add(a[1], a[2])),
        V_FMAC_F32 => {
            let acc = w.vgpr[vreg(&i.dst(), 0)?];
            let s = f32_srcs(w, i, 2)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                let r = s[0][l].mul_add(s[1][l], f32::from_bits(acc[l]));
                out[l] = (omod_clamp(w, i, r as f64) as f32).to_bits();
            }
            store(w, i, &out)
        }
        V_FMAMK_F32 | V_FMAAK_F32 => {
            let k = f32::from_bits(match i.operand(Role::K) {
                Operand::Literal(v) | Operand::Imm(v) => v,
                _ => return Err(unimpl(i, "missing literal")),
            });
            let s = f32_srcs(w, i, 2)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = if i.op == V_FMAMK_F32 {
                    s[0][l].mul_add(k, s[1][l])
                } else {
                    s[0][l].mul_add(s[1][l], k)
                }
                .to_bits();
            }
            store(w, i, &out)
        }
        V_DOT2C_F32_BF16 | V_DOT2C_F32_F16 => {
            let acc = w.vgpr[vreg(&i.dst(), 0)?];
            let (a, b) = (fetch(w, i, 0)?, fetch(w, i, 1)?);
            let bf = i.op == V_DOT2C_F32_BF16;
            let cv = |h: u32| -> f64 {
                if bf {
                    fp::bf16_to_f32(h as u16) as f64
                } else {
                    fp::f16_to_f32(h as u16) as f64
                }
            };
            let mut out = [0u32; 64];
            for l in 0..64 {
                let s = cv(a[l]) * cv(b[l])
                    + cv(a[l] >> 16) * cv(b[l] >> 16)
                    + f32::from_bits(acc[l]) as f64;
                out[l] = (s as f32).to_bits();
            }
            store(w, i, &out)
        }
        V_LDEXP_F32 => {
            let a = f32_srcs(w, i, 1)?;
            let e = fetch(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = (ldexp64(a[0][l] as f64, e[l] as i32) as f32).to_bits();
            }
            store(w, i, &out)
        }
        V_FRACT_F32 => op_f32(w, i, 1, |a| fract32(a[0])),
        V_TRUNC_F32 => op_f32(w, i, 1, |a| a[0].trunc()),
        V_CEIL_F32 => op_f32(w, i, 1, |a| a[0].ceil()),
        V_RNDNE_F32 => op_f32(w, i, 1, |a| a[0].round_ties_even()),
        V_FLOOR_F32 => op_f32(w, i, 1, |a| a[0].floor()),
        // Transcendentals: the hardware's are accurate to about 1 ulp; these are computed in
        // f64 and correctly rounded, so results can differ from a device in the last bit.
        V_EXP_F32 | V_EXP_LEGACY_F32 => op_f32(w, i, 1, |a| (a[0] as f64).exp2() as f32),
        V_LOG_F32 | V_LOG_LEGACY_F32 => op_f32(w, i, 1, |a| (a[0] as f64).log2() as f32),
        V_RCP_F32 | V_RCP_IFLAG_F32 => op_f32(w, i, 1, |a| (1.0 / a[0] as f64) as f32),
        V_RSQ_F32 => op_f32(w, i, 1, |a| (1.0 / (a[0] as f64).sqrt()) as f32),
        V_SQRT_F32 => op_f32(w, i, 1, |a| (a[0] as f64).sqrt() as f32),
        V_SIN_F32 => op_f32(w, i, 1, |a| {
            ((a[0] as f64) * std::f64::consts::TAU).sin() as f32
        }),
        V_COS_F32 => op_f32(w, i, 1, |a| {
            ((a[0] as f64) * std::f64::consts::TAU).cos() as f32
        }),
        V_FREXP_MANT_F32 => op_f32(w, i, 1, |a| frexp32(a[0]).0),
        V_FREXP_EXP_I32_F32 => {
            let a = f32_srcs(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = frexp32(a[0][l]).1 as u32;
            }
            store(w, i, &out)
        }
        V_DIV_FIXUP_F32 => op_f32(w, i, 3, |a| {
            div_fixup(a[0] as f64, a[1] as f64, a[2] as f64, 150, |x| {
                exp_f32(x as f32)
            }) as f32
        }),
        V_DIV_FIXUP_F64 => op_f64(w, i, 3, |a| div_fixup(a[0], a[1], a[2], 1075, exp_f64)),
        V_DIV_SCALE_F32 | V_DIV_SCALE_F64 | V_DIV_FMAS_F32 | V_DIV_FMAS_F64 => div_ops(w, i),
        // ---------------- f64 ----------------
        V_ADD_F64 => op_f64(w, i, 2, |a| a[0] + a[1]),
        V_MUL_F64 => op_f64(w, i, 2, |a| a[0] * a[1]),
        V_FMA_F64 => op_f64(w, i, 3, |a| a[0].mul_add(a[1], a[2])),
        V_FMAC_F64 => {
            let acc = read_v64(w, i.dst(), ValueType::F64)?;
            let s = f64_srcs(w, i, 2)?;
            let mut out = [0u64; 64];
            for l in 0..64 {
                out[l] =
                    omod_clamp(w, i, s[0][l].mul_add(s[1][l], f64::from_bits(acc[l]))).to_bits();
            }
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &out)
        }
        V_MIN_F64 => op_f64(w, i, 2, |a| alu::minmax_f64(a[0], a[1], false, ieee)),
        V_MAX_F64 => op_f64(w, i, 2, |a| alu::minmax_f64(a[0], a[1], true, ieee)),
        V_LDEXP_F64 => {
            let a = f64_srcs(w, i, 1)?;
            let e = read_v32(w, i.operand(Role::Src1), i.value_type(Role::Src1))?;
            let mut out = [0u64; 64];
            for l in 0..64 {
                out[l] = ldexp64(a[0][l], e[l] as i32).to_bits();
            }
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &out)
        }
        V_TRUNC_F64 => op_f64(w, i, 1, |a| a[0].trunc()),
        V_CEIL_F64 => op_f64(w, i, 1, |a| a[0].ceil()),
        V_RNDNE_F64 => op_f64(w, i, 1, |a| a[0].round_ties_even()),
        V_FLOOR_F64 => op_f64(w, i, 1, |a| a[0].floor()),
        V_FRACT_F64 => op_f64(w, i, 1, |a| fract64(a[0])),
        V_RCP_F64 => op_f64(w, i, 1, |a| 1.0 / a[0]),
        V_RSQ_F64 => op_f64(w, i, 1, |a| 1.0 / a[0].sqrt()),
        V_SQRT_F64 => op_f64(w, i, 1, |a| a[0].sqrt()),
        V_FREXP_MANT_F64 => op_f64(w, i, 1, |a| frexp64(a[0]).0),
        V_FREXP_EXP_I32_F64 => {
            let a = f64_srcs(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = frexp64(a[0][l]).1 as u32;
            }
            store(w, i, &out)
        }
        // ---------------- conversions ----------------
        V_CVT_F32_I32 => cvt_to_f32(w, i, |x| x as i32 as f32),
        V_CVT_F32_U32 => cvt_to_f32(w, i, |x| x as f32),
        V_CVT_I32_F32 => op_f32_to_u32(w, i, alu::cvt_i32_f32),
        V_CVT_U32_F32 => op_f32_to_u32(w, i, alu::cvt_u32_f32),
        V_CVT_RPI_I32_F32 => {
            op_f32_to_u32(w, i, |x| alu::cvt_i32_f32((x as f64 + 0.5).floor() as f32))
        }
        V_CVT_FLR_I32_F32 => op_f32_to_u32(w, i, |x| alu::cvt_i32_f32(x.floor())),
        V_CVT_OFF_F32_I4 => cvt_to_f32(w, i, |x| (((x & 0xf) << 28) as i32 >> 28) as f32 / 16.0),
        V_CVT_F32_UBYTE0 => cvt_to_f32(w, i, |x| (x & 0xff) as f32),
        V_CVT_F32_UBYTE1 => cvt_to_f32(w, i, |x| ((x >> 8) & 0xff) as f32),
        V_CVT_F32_UBYTE2 => cvt_to_f32(w, i, |x| ((x >> 16) & 0xff) as f32),
        V_CVT_F32_UBYTE3 => cvt_to_f32(w, i, |x| (x >> 24) as f32),
        V_CVT_F16_F32 => {
            let a = f32_srcs(w, i, 1)?;
            let mut out = [0u16; 64];
            for l in 0..64 {
                out[l] = fp::f32_to_f16(omod_clamp(w, i, a[0][l] as f64) as f32);
            }
            store16(w, i, &out)
        }
        V_CVT_F32_F16 => {
            let a = fetch(w, i, 0)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                let x = fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l])));
                out[l] = (omod_clamp(w, i, x as f64) as f32).to_bits();
            }
            store(w, i, &out)
        }
        V_CVT_F32_BF16 => {
            let a = fetch(w, i, 0)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = fmods(i, 0, fp::bf16_to_f32(half(i, 0, a[l]))).to_bits();
            }
            store(w, i, &out)
        }
        V_CVT_F32_F64 => {
            let a = f64_srcs(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = (omod_clamp(w, i, a[0][l]) as f32).to_bits();
            }
            store(w, i, &out)
        }
        V_CVT_F64_F32 | V_CVT_F64_I32 | V_CVT_F64_U32 => {
            let a = fetch(w, i, 0)?;
            let mut out = [0u64; 64];
            for l in 0..64 {
                let x = match i.op {
                    V_CVT_F64_F32 => fmods(i, 0, f32::from_bits(a[l])) as f64,
                    V_CVT_F64_I32 => a[l] as i32 as f64,
                    _ => a[l] as f64,
                };
                out[l] = omod_clamp(w, i, x).to_bits();
            }
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &out)
        }
        V_CVT_I32_F64 | V_CVT_U32_F64 => {
            let a = f64_srcs(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = if i.op == V_CVT_I32_F64 {
                    a[0][l] as i32 as u32
                } else {
                    a[0][l] as u32
                };
            }
            store(w, i, &out)
        }
        V_CVT_PK_BF16_F32 => {
            let s = f32_srcs(w, i, 2)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = alu::cvt_pk_bf16_f32(s[0][l], s[1][l]);
            }
            store(w, i, &out)
        }
        V_CVT_PK_F16_F32 => {
            let s = f32_srcs(w, i, 2)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = alu::cvt_pk_f16_f32(s[0][l], s[1][l]);
            }
            store(w, i, &out)
        }
        V_CVT_PKRTZ_F16_F32 => {
            let s = f32_srcs(w, i, 2)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = alu::cvt_pkrtz_f16_f32(s[0][l], s[1][l]);
            }
            store(w, i, &out)
        }
        V_CVT_PK_U16_U32 => op_u32(w, i, 2, |a, _| a[0].min(0xffff) | (a[1].min(0xffff) << 16)),
        V_CVT_PK_I16_I32 => op_u32(w, i, 2, |a, _| {
            let c = |x: u32| (x as i32).clamp(i16::MIN as i32, i16::MAX as i32) as u16 as u32;
            c(a[0]) | (c(a[1]) << 16)
        }),
        V_PACK_B32_F16 => {
            let (a, b) = (fetch(w, i, 0)?, fetch(w, i, 1)?);
            let mut out = [0u32; 64];
            for l in 0..64 {
                let h = |k: usize, x: u32| {
                    fp::f32_to_f16(fmods(i, k, fp::f16_to_f32(half(i, k, x)))) as u32
                };
                out[l] = h(0, a[l]) | (h(1, b[l]) << 16);
            }
            store(w, i, &out)
        }
        V_CVT_F16_U16 | V_CVT_F16_I16 | V_CVT_U16_F16 | V_CVT_I16_F16 => conv16(w, i),
        V_CVT_F32_FP8 | V_CVT_F32_BF8 => {
            let fmt = if i.op == V_CVT_F32_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let a = fetch(w, i, 0)?;
            let sel = byte_sel(i);
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = fmt.decode_f32((a[l] >> (8 * sel)) & 0xff).to_bits();
            }
            // SDWA only selects the source byte here; the result is a whole f32.
            let mask = write_mask(w, i)?;
            write_v32(w, i.dst(), 0, mask, &out)
        }
        V_CVT_PK_F32_FP8 | V_CVT_PK_F32_BF8 => {
            let fmt = if i.op == V_CVT_PK_F32_FP8 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let a = fetch(w, i, 0)?;
            let sel = word_sel(i);
            let mut out = [0u64; 64];
            for l in 0..64 {
                let word = a[l] >> (16 * sel);
                let lo = fmt.decode_f32(word & 0xff).to_bits() as u64;
                let hi = fmt.decode_f32((word >> 8) & 0xff).to_bits() as u64;
                out[l] = lo | (hi << 32);
            }
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &out)
        }
        V_CVT_PK_FP8_F32 | V_CVT_PK_BF8_F32 => {
            // Two f32 become two codes in the word op_sel[3] selects; the other word is kept.
            let fmt = if i.op == V_CVT_PK_FP8_F32 {
                FP8_E4M3
            } else {
                BF8_E5M2
            };
            let s = f32_srcs(w, i, 2)?;
            let ovf = narrow_overflow(w, i);
            let slot = (i.mods.op_sel >> 3 & 1) as u32;
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let mut out = [0u32; 64];
            for l in 0..64 {
                let field =
                    fmt.encode(s[0][l] as f64, ovf) | (fmt.encode(s[1][l] as f64, ovf) << 8);
                out[l] = (old[l] & !(0xffff << (16 * slot))) | (field << (16 * slot));
            }
            store(w, i, &out)
        }
        V_CVT_SCALEF32_PK_FP8_F32
        | V_CVT_SCALEF32_PK_BF8_F32
        | V_CVT_SCALEF32_SR_FP8_F32
        | V_CVT_SCALEF32_SR_BF8_F32
        | V_CVT_SCALEF32_PK_F32_FP8
        | V_CVT_SCALEF32_PK_F32_BF8
        | V_CVT_SCALEF32_F32_FP8
        | V_CVT_SCALEF32_F32_BF8
        | V_CVT_SCALEF32_PK_FP4_F32
        | V_CVT_SCALEF32_SR_PK_FP4_F32
        | V_CVT_SCALEF32_PK_F32_FP4
        | V_CVT_SCALEF32_PK_FP8_F16
        | V_CVT_SCALEF32_PK_BF8_F16
        | V_CVT_SCALEF32_SR_FP8_F16
        | V_CVT_SCALEF32_SR_BF8_F16
        | V_CVT_SCALEF32_PK_FP8_BF16
        | V_CVT_SCALEF32_PK_BF8_BF16
        | V_CVT_SCALEF32_SR_FP8_BF16
        | V_CVT_SCALEF32_SR_BF8_BF16
        | V_CVT_SCALEF32_PK_F16_FP8
        | V_CVT_SCALEF32_PK_F16_BF8
        | V_CVT_SCALEF32_F16_FP8
        | V_CVT_SCALEF32_F16_BF8
        | V_CVT_SCALEF32_PK_FP4_F16
        | V_CVT_SCALEF32_PK_FP4_BF16
        | V_CVT_SCALEF32_SR_PK_FP4_F16
        | V_CVT_SCALEF32_SR_PK_FP4_BF16
        | V_CVT_SCALEF32_PK_F16_FP4
        | V_CVT_SCALEF32_PK_BF16_FP4
        | V_CVT_SCALEF32_PK_BF16_FP8
        | V_CVT_SCALEF32_PK_BF16_BF8 => scalef32(w, i),
        V_SAT_PK_U8_I16 => op_u32(w, i, 1, |a, _| {
            let s = |h: u32| (h as u16 as i16).clamp(0, 255) as u32;
            s(a[0]) | (s(a[0] >> 16) << 8)
        }),
        V_PRNG_B32 => op_u32(w, i, 1, |a, _| {
            (a[0] << 1) ^ if a[0] >> 31 != 0 { 197 } else { 0 }
        }),
        // ---------------- integer ----------------
        V_ADD_U32 => op_u32(w, i, 2, |a, _| {
            if clampi {
                sat_u32(a[0] as i64 + a[1] as i64)
            } else {
                a[0].wrapping_add(a[1])
            }
        }),
        V_SUB_U32 => op_u32(w, i, 2, |a, _| {
            if clampi {
                sat_u32(a[0] as i64 - a[1] as i64)
            } else {
                a[0].wrapping_sub(a[1])
            }
        }),
        V_SUBREV_U32 => op_u32(w, i, 2, |a, _| {
            if clampi {
                sat_u32(a[1] as i64 - a[0] as i64)
            } else {
                a[1].wrapping_sub(a[0])
            }
        }),
        V_ADD_I32 => op_u32(w, i, 2, |a, _| {
            if clampi {
                sat_i32(a[0] as i32 as i64 + a[1] as i32 as i64)
            } else {
                a[0].wrapping_add(a[1])
            }
        }),
        V_SUB_I32 => op_u32(w, i, 2, |a, _| {
            if clampi {
                sat_i32(a[0] as i32 as i64 - a[1] as i32 as i64)
            } else {
                a[0].wrapping_sub(a[1])
            }
        }),
        V_ADD_CO_U32 | V_SUB_CO_U32 | V_SUBREV_CO_U32 | V_ADDC_CO_U32 | V_SUBB_CO_U32
        | V_SUBBREV_CO_U32 => carry_op(w, i),
        V_MUL_LO_U32 => op_u32(w, i, 2, |a, _| a[0].wrapping_mul(a[1])),
        V_MUL_HI_U32 => op_u32(w, i, 2, |a, _| alu::mul_hi_u32(a[0], a[1])),
        V_MUL_HI_I32 => op_u32(w, i, 2, |a, _| alu::mul_hi_i32(a[0], a[1])),
        V_MUL_I32_I24 => op_u32(w, i, 2, |a, _| (i24(a[0]) * i24(a[1])) as u32),
        V_MUL_HI_I32_I24 => op_u32(w, i, 2, |a, _| ((i24(a[0]) * i24(a[1])) >> 32) as u32),
        V_MUL_U32_U24 => op_u32(w, i, 2, |a, _| {
            ((a[0] & 0xff_ffff) as u64 * (a[1] & 0xff_ffff) as u64) as u32
        }),
        V_MUL_HI_U32_U24 => op_u32(w, i, 2, |a, _| {
            (((a[0] & 0xff_ffff) as u64 * (a[1] & 0xff_ffff) as u64) >> 32) as u32
        }),
        V_MAD_I32_I24 => op_u32(w, i, 3, |a, _| {
            (i24(a[0]) * i24(a[1])).wrapping_add(a[2] as i32 as i64) as u32
        }),
        V_MAD_U32_U24 => op_u32(w, i, 3, |a, _| {
            ((a[0] & 0xff_ffff).wrapping_mul(a[1] & 0xff_ffff)).wrapping_add(a[2])
        }),
        V_MIN_I32 => op_u32(w, i, 2, |a, _| (a[0] as i32).min(a[1] as i32) as u32),
        V_MAX_I32 => op_u32(w, i, 2, |a, _| (a[0] as i32).max(a[1] as i32) as u32),
        V_MIN_U32 => op_u32(w, i, 2, |a, _| a[0].min(a[1])),
        V_MAX_U32 => op_u32(w, i, 2, |a, _| a[0].max(a[1])),
        V_MIN3_I32 => op_u32(w, i, 3, |a, _| {
            (a[0] as i32).min(a[1] as i32).min(a[2] as i32) as u32
        }),
        V_MAX3_I32 => op_u32(w, i, 3, |a, _| {
            (a[0] as i32).max(a[1] as i32).max(a[2] as i32) as u32
        }),
        V_MIN3_U32 => op_u32(w, i, 3, |a, _| a[0].min(a[1]).min(a[2])),
        V_MAX3_U32 => op_u32(w, i, 3, |a, _| a[0].max(a[1]).max(a[2])),
        V_MED3_I32 => op_u32(w, i, 3, |a, _| {
            let (x, y, z) = (a[0] as i32, a[1] as i32, a[2] as i32);
            x.max(y).min(x.min(y).max(z)) as u32
        }),
        V_MED3_U32 => op_u32(w, i, 3, |a, _| a[0].max(a[1]).min(a[0].min(a[1]).max(a[2]))),
        V_LSHRREV_B32 => op_u32(w, i, 2, |a, _| a[1] >> (a[0] & 31)),
        V_ASHRREV_I32 => op_u32(w, i, 2, |a, _| ((a[1] as i32) >> (a[0] & 31)) as u32),
        V_LSHLREV_B32 => op_u32(w, i, 2, |a, _| a[1] << (a[0] & 31)),
        V_AND_B32 => op_u32(w, i, 2, |a, _| a[0] & a[1]),
        V_OR_B32 => op_u32(w, i, 2, |a, _| a[0] | a[1]),
        V_XOR_B32 => op_u32(w, i, 2, |a, _| a[0] ^ a[1]),
        V_XNOR_B32 => op_u32(w, i, 2, |a, _| !(a[0] ^ a[1])),
        V_NOT_B32 => op_u32(w, i, 1, |a, _| !a[0]),
        V_BFREV_B32 => op_u32(w, i, 1, |a, _| a[0].reverse_bits()),
        V_FFBH_U32 => op_u32(w, i, 1, |a, _| alu::ffbh_u32(a[0])),
        V_FFBL_B32 => op_u32(w, i, 1, |a, _| alu::ffbl_b32(a[0])),
        V_FFBH_I32 => op_u32(w, i, 1, |a, _| alu::ffbh_i32(a[0])),
        V_BFE_U32 => op_u32(w, i, 3, |a, _| alu::bfe_u32(a[0], a[1], a[2] & 31)),
        V_BFE_I32 => op_u32(w, i, 3, |a, _| alu::bfe_i32(a[0], a[1], a[2] & 31)),
        V_BFI_B32 => op_u32(w, i, 3, |a, _| (a[0] & a[1]) | (!a[0] & a[2])),
        V_BFM_B32 => op_u32(w, i, 2, |a, _| {
            ((1u32 << (a[0] & 31)).wrapping_sub(1)) << (a[1] & 31)
        }),
        V_ALIGNBIT_B32 => op_u32(w, i, 3, |a, _| alu::alignbit(a[0], a[1], a[2])),
        V_ALIGNBYTE_B32 => op_u32(w, i, 3, |a, _| alu::alignbyte(a[0], a[1], a[2])),
        V_PERM_B32 => op_u32(w, i, 3, |a, _| alu::perm_b32(a[0], a[1], a[2])),
        V_BITOP3_B32 => {
            let t = i.mods.bitop3;
            op_u32(w, i, 3, move |a, _| alu::bitop3(a[0], a[1], a[2], t))
        }
        V_BITOP3_B16 => {
            let t = i.mods.bitop3;
            op_u16(w, i, 3, move |a| {
                alu::bitop3(a[0] as u32, a[1] as u32, a[2] as u32, t) as u16
            })
        }
        V_XAD_U32 => op_u32(w, i, 3, |a, _| (a[0] ^ a[1]).wrapping_add(a[2])),
        V_LSHL_ADD_U32 => op_u32(w, i, 3, |a, _| (a[0] << (a[1] & 31)).wrapping_add(a[2])),
        V_ADD_LSHL_U32 => op_u32(w, i, 3, |a, _| a[0].wrapping_add(a[1]) << (a[2] & 31)),
        V_ADD3_U32 => op_u32(w, i, 3, |a, _| a[0].wrapping_add(a[1]).wrapping_add(a[2])),
        V_LSHL_OR_B32 => op_u32(w, i, 3, |a, _| (a[0] << (a[1] & 31)) | a[2]),
        V_AND_OR_B32 => op_u32(w, i, 3, |a, _| (a[0] & a[1]) | a[2]),
        V_OR3_B32 => op_u32(w, i, 3, |a, _| a[0] | a[1] | a[2]),
        V_BCNT_U32_B32 => op_u32(w, i, 2, |a, _| a[0].count_ones().wrapping_add(a[1])),
        V_MBCNT_LO_U32_B32 => op_u32(w, i, 2, |a, l| {
            let below = lane_mask_below(l) as u32;
            (a[0] & below).count_ones().wrapping_add(a[1])
        }),
        V_MBCNT_HI_U32_B32 => op_u32(w, i, 2, |a, l| {
            let below = (lane_mask_below(l) >> 32) as u32;
            (a[0] & below).count_ones().wrapping_add(a[1])
        }),
        V_SAD_U8 => op_u32(w, i, 3, |a, _| {
            (0..4)
                .map(|b| ((a[0] >> (8 * b)) & 0xff).abs_diff((a[1] >> (8 * b)) & 0xff))
                .sum::<u32>()
                .wrapping_add(a[2])
        }),
        V_SAD_U16 => op_u32(w, i, 3, |a, _| {
            (0..2)
                .map(|b| ((a[0] >> (16 * b)) & 0xffff).abs_diff((a[1] >> (16 * b)) & 0xffff))
                .sum::<u32>()
                .wrapping_add(a[2])
        }),
        V_SAD_U32 => op_u32(w, i, 3, |a, _| a[0].abs_diff(a[1]).wrapping_add(a[2])),
        V_LERP_U8 => op_u32(w, i, 3, |a, _| {
            (0..4)
                .map(|b| {
                    let x = (a[0] >> (8 * b)) & 0xff;
                    let y = (a[1] >> (8 * b)) & 0xff;
                    let r = (a[2] >> (8 * b)) & 1;
                    ((x + y + r) >> 1) << (8 * b)
                })
                .sum()
        }),
        V_ASHR_PK_I8_I32 | V_ASHR_PK_U8_I32 => {
            let signed = i.op == V_ASHR_PK_I8_I32;
            let (a, b, c) = (fetch(w, i, 0)?, fetch(w, i, 1)?, fetch(w, i, 2)?);
            let mut out = [0u16; 64];
            for l in 0..64 {
                let sh = c[l] & 31;
                let f = |x: u32| {
                    let v = (x as i32) >> sh;
                    (if signed {
                        v.clamp(-128, 127)
                    } else {
                        v.clamp(0, 255)
                    }) as u8 as u16
                };
                out[l] = f(a[l]) | (f(b[l]) << 8);
            }
            store16(w, i, &out)
        }
        V_LSHLREV_B64 | V_LSHRREV_B64 | V_ASHRREV_I64 => {
            let sh = read_v32(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
            let v = read_v64(w, i.operand(Role::Src1), i.value_type(Role::Src1))?;
            let mut out = [0u64; 64];
            for l in 0..64 {
                let s = sh[l] & 63;
                out[l] = match i.op {
                    V_LSHLREV_B64 => v[l] << s,
                    V_LSHRREV_B64 => v[l] >> s,
                    _ => ((v[l] as i64) >> s) as u64,
                };
            }
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &out)
        }
        V_LSHL_ADD_U64 => {
            let a = read_v64(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
            let sh = read_v32(w, i.operand(Role::Src1), i.value_type(Role::Src1))?;
            let c = read_v64(w, i.operand(Role::Src2), i.value_type(Role::Src2))?;
            let mut out = [0u64; 64];
            for l in 0..64 {
                out[l] = alu::lshl_add_u64(a[l], sh[l], c[l]);
            }
            let mask = w.exec();
            write_v64(w, i.dst(), mask, &out)
        }
        V_MAD_U64_U32 | V_MAD_I64_I32 => {
            let (a, b) = (fetch(w, i, 0)?, fetch(w, i, 1)?);
            let c = read_v64(w, i.operand(Role::Src2), i.value_type(Role::Src2))?;
            let exec = w.exec();
            let mut out = [0u64; 64];
            let mut carry = 0u64;
            for l in 0..64 {
                let (r, o) = if i.op == V_MAD_U64_U32 {
                    let p = a[l] as u128 * b[l] as u128 + c[l] as u128;
                    (p as u64, p >> 64 != 0)
                } else {
                    let p = a[l] as i32 as i128 * b[l] as i32 as i128 + c[l] as i64 as i128;
                    (p as u64, p != p as i64 as i128)
                };
                out[l] = r;
                carry |= (o as u64) << l;
            }
            write_v64(w, i.dst(), exec, &out)?;
            if i.sdst() != Operand::None {
                write_mask_dst(w, i.sdst(), carry & exec)?;
            }
            Ok(())
        }
        // ---------------- 16-bit ----------------
        V_ADD_F16 => op_f16(w, i, 2, |a| a[0] as f64 + a[1] as f64),
        V_SUB_F16 => op_f16(w, i, 2, |a| a[0] as f64 - a[1] as f64),
        V_SUBREV_F16 => op_f16(w, i, 2, |a| a[1] as f64 - a[0] as f64),
        V_MUL_F16 => op_f16(w, i, 2, |a| a[0] as f64 * a[1] as f64),
        V_FMA_F16 | V_MAD_F16 | V_FMA_LEGACY_F16 | V_MAD_LEGACY_F16 => {
            op_f16(w, i, 3, |a| (a[0] as f64).mul_add(a[1] as f64, a[2] as f64))
        }
        V_MAC_F16 => {
            let acc = w.vgpr[vreg(&i.dst(), 0)?];
            let (a, b) = (fetch(w, i, 0)?, fetch(w, i, 1)?);
            let mut out = [0u16; 64];
            for l in 0..64 {
                let x = fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l]))) as f64;
                let y = fmods(i, 1, fp::f16_to_f32(half(i, 1, b[l]))) as f64;
                let r = omod_clamp(w, i, x * y + fp::f16_to_f32(acc[l] as u16) as f64);
                out[l] = fp::f32_to_f16(r as f32);
            }
            store16(w, i, &out)
        }
        V_MADMK_F16 | V_MADAK_F16 => {
            let k = match i.operand(Role::K) {
                Operand::Literal(v) | Operand::Imm(v) => fp::f16_to_f32(v as u16) as f64,
                _ => return Err(unimpl(i, "missing literal")),
            };
            let op = i.op;
            op_f16(w, i, 2, move |a| {
                if op == V_MADMK_F16 {
                    a[0] as f64 * k + a[1] as f64
                } else {
                    a[0] as f64 * a[1] as f64 + k
                }
            })
        }
        V_MAX_F16 => op_f16(w, i, 2, |a| alu::minmax_f32(a[0], a[1], true, ieee) as f64),
        V_MIN_F16 => op_f16(w, i, 2, |a| alu::minmax_f32(a[0], a[1], false, ieee) as f64),
        V_MIN3_F16 => op_f16(w, i, 3, |a| {
            alu::minmax_f32(alu::minmax_f32(a[0], a[1], false, ieee), a[2], false, ieee) as f64
        }),
        V_MAX3_F16 => op_f16(w, i, 3, |a| {
            alu::minmax_f32(alu::minmax_f32(a[0], a[1], true, ieee), a[2], true, ieee) as f64
        }),
        V_MED3_F16 => op_f16(w, i, 3, |a| alu::med3_f32(a[0], a[1], a[2], ieee) as f64),
        V_LDEXP_F16 => {
            let a = fetch(w, i, 0)?;
            let e = fetch(w, i, 1)?;
            let mut out = [0u16; 64];
            for l in 0..64 {
                let x = fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l]))) as f64;
                out[l] = fp::F16.encode(ldexp64(x, e[l] as u16 as i16 as i32), Overflow::InfOrNan)
                    as u16;
            }
            store16(w, i, &out)
        }
        V_RCP_F16 => op_f16(w, i, 1, |a| 1.0 / a[0] as f64),
        V_SQRT_F16 => op_f16(w, i, 1, |a| (a[0] as f64).sqrt()),
        V_RSQ_F16 => op_f16(w, i, 1, |a| 1.0 / (a[0] as f64).sqrt()),
        V_LOG_F16 => op_f16(w, i, 1, |a| (a[0] as f64).log2()),
        V_EXP_F16 => op_f16(w, i, 1, |a| (a[0] as f64).exp2()),
        V_SIN_F16 => op_f16(w, i, 1, |a| (a[0] as f64 * std::f64::consts::TAU).sin()),
        V_COS_F16 => op_f16(w, i, 1, |a| (a[0] as f64 * std::f64::consts::TAU).cos()),
        V_FLOOR_F16 => op_f16(w, i, 1, |a| (a[0] as f64).floor()),
        V_CEIL_F16 => op_f16(w, i, 1, |a| (a[0] as f64).ceil()),
        V_TRUNC_F16 => op_f16(w, i, 1, |a| (a[0] as f64).trunc()),
        V_RNDNE_F16 => op_f16(w, i, 1, |a| (a[0] as f64).round_ties_even()),
        V_FRACT_F16 => op_f16(w, i, 1, |a| {
            if a[0].is_infinite() {
                f64::NAN
            } else {
                (a[0] as f64 - (a[0] as f64).floor()).min(fp::f16_to_f32(0x3bff) as f64)
            }
        }),
        V_FREXP_MANT_F16 => op_f16(w, i, 1, |a| frexp32(a[0]).0 as f64),
        V_FREXP_EXP_I16_F16 => {
            let a = fetch(w, i, 0)?;
            let mut out = [0u16; 64];
            for l in 0..64 {
                out[l] = frexp32(fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l])))).1 as i16 as u16;
            }
            store16(w, i, &out)
        }
        V_ADD_U16 => op_u16(w, i, 2, |a| {
            if clampi {
                a[0].saturating_add(a[1])
            } else {
                a[0].wrapping_add(a[1])
            }
        }),
        V_SUB_U16 => op_u16(w, i, 2, |a| {
            if clampi {
                a[0].saturating_sub(a[1])
            } else {
                a[0].wrapping_sub(a[1])
            }
        }),
        V_SUBREV_U16 => op_u16(w, i, 2, |a| {
            if clampi {
                a[1].saturating_sub(a[0])
            } else {
                a[1].wrapping_sub(a[0])
            }
        }),
        V_ADD_I16 => op_u16(w, i, 2, |a| {
            if clampi {
                (a[0] as i16).saturating_add(a[1] as i16) as u16
            } else {
                a[0].wrapping_add(a[1])
            }
        }),
        V_SUB_I16 => op_u16(w, i, 2, |a| {
            if clampi {
                (a[0] as i16).saturating_sub(a[1] as i16) as u16
            } else {
                a[0].wrapping_sub(a[1])
            }
        }),
        V_MUL_LO_U16 => op_u16(w, i, 2, |a| a[0].wrapping_mul(a[1])),
        V_LSHLREV_B16 => op_u16(w, i, 2, |a| a[1] << (a[0] & 15)),
        V_LSHRREV_B16 => op_u16(w, i, 2, |a| a[1] >> (a[0] & 15)),
        V_ASHRREV_I16 => op_u16(w, i, 2, |a| ((a[1] as i16) >> (a[0] & 15)) as u16),
        V_MAX_U16 => op_u16(w, i, 2, |a| a[0].max(a[1])),
        V_MAX_I16 => op_u16(w, i, 2, |a| (a[0] as i16).max(a[1] as i16) as u16),
        V_MIN_U16 => op_u16(w, i, 2, |a| a[0].min(a[1])),
        V_MIN_I16 => op_u16(w, i, 2, |a| (a[0] as i16).min(a[1] as i16) as u16),
        V_MIN3_I16 => op_u16(w, i, 3, |a| {
            (a[0] as i16).min(a[1] as i16).min(a[2] as i16) as u16
        }),
        V_MAX3_I16 => op_u16(w, i, 3, |a| {
            (a[0] as i16).max(a[1] as i16).max(a[2] as i16) as u16
        }),
        V_MIN3_U16 => op_u16(w, i, 3, |a| a[0].min(a[1]).min(a[2])),
        V_MAX3_U16 => op_u16(w, i, 3, |a| a[0].max(a[1]).max(a[2])),
        V_MED3_I16 => op_u16(w, i, 3, |a| {
            let (x, y, z) = (a[0] as i16, a[1] as i16, a[2] as i16);
            x.max(y).min(x.min(y).max(z)) as u16
        }),
        V_MED3_U16 => op_u16(w, i, 3, |a| a[0].max(a[1]).min(a[0].min(a[1]).max(a[2]))),
        V_MAD_U16 | V_MAD_LEGACY_U16 => op_u16(w, i, 3, |a| {
            if clampi {
                (a[0] as u32 * a[1] as u32 + a[2] as u32).min(0xffff) as u16
            } else {
                a[0].wrapping_mul(a[1]).wrapping_add(a[2])
            }
        }),
        V_MAD_I16 | V_MAD_LEGACY_I16 => op_u16(w, i, 3, |a| {
            let p = a[0] as i16 as i32 * a[1] as i16 as i32 + a[2] as i16 as i32;
            if clampi {
                p.clamp(i16::MIN as i32, i16::MAX as i32) as u16
            } else {
                p as u16
            }
        }),
        V_MAD_U32_U16 => {
            let (a, b, c) = (fetch(w, i, 0)?, fetch(w, i, 1)?, fetch(w, i, 2)?);
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = (half(i, 0, a[l]) as u32 * half(i, 1, b[l]) as u32).wrapping_add(c[l]);
            }
            store(w, i, &out)
        }
        V_MAD_I32_I16 => {
            let (a, b, c) = (fetch(w, i, 0)?, fetch(w, i, 1)?, fetch(w, i, 2)?);
            let mut out = [0u32; 64];
            for l in 0..64 {
                let p = half(i, 0, a[l]) as i16 as i32 * half(i, 1, b[l]) as i16 as i32;
                out[l] = p.wrapping_add(c[l] as i32) as u32;
            }
            store(w, i, &out)
        }
        V_DOT2C_I32_I16 | V_DOT4C_I32_I8 | V_DOT8C_I32_I4 => {
            let acc = w.vgpr[vreg(&i.dst(), 0)?];
            let (a, b) = (fetch(w, i, 0)?, fetch(w, i, 1)?);
            let bits = match i.op {
                V_DOT2C_I32_I16 => 16,
                V_DOT4C_I32_I8 => 8,
                _ => 4,
            };
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = dot_int(a[l], b[l], bits, true).wrapping_add(acc[l] as i32) as u32;
            }
            store(w, i, &out)
        }
        V_PK_FMAC_F16 => {
            let acc = w.vgpr[vreg(&i.dst(), 0)?];
            let (a, b) = (fetch(w, i, 0)?, fetch(w, i, 1)?);
            let mut out = [0u32; 64];
            for l in 0..64 {
                let h = |x: u32, k: u32| fp::f16_to_f32((x >> (16 * k)) as u16) as f64;
                let r0 = h(a[l], 0).mul_add(h(b[l], 0), h(acc[l], 0));
                let r1 = h(a[l], 1).mul_add(h(b[l], 1), h(acc[l], 1));
                out[l] = fp::F16.encode(r0, Overflow::InfOrNan)
                    | (fp::F16.encode(r1, Overflow::InfOrNan) << 16);
            }
            store(w, i, &out)
        }
        V_CVT_NORM_I16_F16 | V_CVT_NORM_U16_F16 => {
            let a = fetch(w, i, 0)?;
            let signed = i.op == V_CVT_NORM_I16_F16;
            let mut out = [0u16; 64];
            for l in 0..64 {
                let x = fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l]))) as f64;
                out[l] = if signed {
                    (x.clamp(-1.0, 1.0) * 32767.0).round_ties_even() as i16 as u16
                } else {
                    (x.clamp(0.0, 1.0) * 65535.0).round_ties_even() as u16
                };
            }
            store16(w, i, &out)
        }
        _ if cmp_kind(i).is_some() => compare(w, i),
        _ => Err(FaultKind::Unimplemented(i.mnemonic().to_string())),
    }
}

fn i24(x: u32) -> i64 {
    ((x << 8) as i32 >> 8) as i64
}

fn dot_int(a: u32, b: u32, bits: u32, signed: bool) -> i32 {
    let n = 32 / bits;
    let mut s = 0i64;
    for k in 0..n {
        let ea = (a >> (k * bits)) & ((1u64 << bits) - 1) as u32;
        let eb = (b >> (k * bits)) & ((1u64 << bits) - 1) as u32;
        let (x, y) = if signed {
            (
                ((ea << (32 - bits)) as i32 >> (32 - bits)) as i64,
                ((eb << (32 - bits)) as i32 >> (32 - bits)) as i64,
            )
        } else {
            (ea as i64, eb as i64)
        };
        s += x * y;
    }
    s as i32
}

/// `v_mov_b32`: a bit copy, except that the VOP3 form applies float modifiers when present
/// (CDNA4 ISA V_MOV_B32 notes).
fn op_f32_or_bits(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    if i.mods.abs != 0 || i.mods.neg != 0 || i.mods.omod != 0 || i.mods.clamp {
        op_f32(w, i, 1, |a| a[0])
    } else {
        op_u32(w, i, 1, |a, _| a[0])
    }
}

/// Sources 0 and 1 with float modifiers applied as bit patterns (for `v_cndmask_b32`, whose
/// VOP3 form accepts abs/neg).
fn f32_srcs_bits(w: &Wave, i: &Inst) -> Result<(Lanes, Lanes), FaultKind> {
    let mut a = fetch(w, i, 0)?;
    let mut b = fetch(w, i, 1)?;
    if i.mods.abs != 0 || i.mods.neg != 0 {
        for l in 0..64 {
            a[l] = fmods(i, 0, f32::from_bits(a[l])).to_bits();
            b[l] = fmods(i, 1, f32::from_bits(b[l])).to_bits();
        }
    }
    Ok((a, b))
}

fn cvt_to_f32(w: &mut Wave, i: &Inst, f: impl Fn(u32) -> f32) -> Result<(), FaultKind> {
    let a = fetch(w, i, 0)?;
    let mut out = [0u32; 64];
    for l in 0..64 {
        out[l] = (omod_clamp(w, i, f(a[l]) as f64) as f32).to_bits();
    }
    store(w, i, &out)
}

fn op_f32_to_u32(w: &mut Wave, i: &Inst, f: impl Fn(f32) -> u32) -> Result<(), FaultKind> {
    let a = f32_srcs(w, i, 1)?;
    let mut out = [0u32; 64];
    for l in 0..64 {
        out[l] = f(a[0][l]);
    }
    store(w, i, &out)
}

fn conv16(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    let a = fetch(w, i, 0)?;
    let mut out = [0u16; 64];
    for l in 0..64 {
        let h = half(i, 0, a[l]);
        out[l] = match i.op {
            V_CVT_F16_U16 => fp::F16.encode(h as f64, Overflow::InfOrNan) as u16,
            V_CVT_F16_I16 => fp::F16.encode(h as i16 as f64, Overflow::InfOrNan) as u16,
            V_CVT_U16_F16 => {
                let x = fmods(i, 0, fp::f16_to_f32(h));
                if x.is_nan() {
                    0
                } else {
                    x.clamp(0.0, 65535.0) as u16
                }
            }
            _ => {
                let x = fmods(i, 0, fp::f16_to_f32(h));
                if x.is_nan() {
                    0
                } else {
                    x.clamp(i16::MIN as f32, i16::MAX as f32) as i16 as u16
                }
            }
        };
    }
    store16(w, i, &out)
}

/// Carry/borrow arithmetic: the carry (or borrow) of each active lane goes to the scalar
/// destination (VCC for `_e32`); the `c`/`b` forms read a carry-in mask from source 2.
fn carry_op(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    let (a, b) = (fetch(w, i, 0)?, fetch(w, i, 1)?);
    let cin = match i.op {
        V_ADDC_CO_U32 | V_SUBB_CO_U32 | V_SUBBREV_CO_U32 => read_mask(w, i.operand(Role::Src2))?,
        _ => 0,
    };
    let exec = w.exec();
    let mut out = [0u32; 64];
    let mut carry = 0u64;
    for l in 0..64 {
        let c = cin >> l & 1;
        let (x, y) = (a[l] as u64, b[l] as u64);
        let (r, co) = match i.op {
            V_ADD_CO_U32 | V_ADDC_CO_U32 => {
                let s = x + y + c;
                (s as u32, s >> 32 != 0)
            }
            V_SUB_CO_U32 | V_SUBB_CO_U32 => (x.wrapping_sub(y).wrapping_sub(c) as u32, y + c > x),
            _ => (y.wrapping_sub(x).wrapping_sub(c) as u32, x + c > y),
        };
        out[l] = if i.mods.clamp && co {
            if matches!(i.op, V_ADD_CO_U32 | V_ADDC_CO_U32) {
                u32::MAX
            } else {
                0
            }
        } else {
            r
        };
        carry |= (co as u64) << l;
    }
    store(w, i, &out)?;
    let mask = write_mask(w, i)?;
    write_mask_dst(w, i.sdst(), carry & mask & exec)
}

/// `v_div_fixup_f32/f64` (CDNA4 ISA pseudocode): `s0` is the quotient estimate, `s1` the
/// denominator, `s2` the numerator. NaN inputs propagate quietened (numerator first), 0/0 and
/// inf/inf give the default NaN, x/0 and inf/y infinity, x/inf and 0/y zero, all with the
/// quotient's sign; a quotient far below the smallest denormal (biased exponent difference
/// below -`underflow_gap`) gives signed zero; a NaN estimate signed infinity; otherwise the
/// estimate's magnitude with the quotient's sign.
fn div_fixup(
    s0: f64,
    s1: f64,
    s2: f64,
    underflow_gap: i32,
    biased_exp: impl Fn(f64) -> i32,
) -> f64 {
    let neg = s1.is_sign_negative() != s2.is_sign_negative();
    let signed = |x: f64| if neg { -x } else { x };
    if s2.is_nan() {
        s2
    } else if s1.is_nan() {
        s1
    } else if (s1 == 0.0 && s2 == 0.0) || (s1.is_infinite() && s2.is_infinite()) {
        // The ISA writes the default NaN with its sign bit set (0xffc00000).
        -f64::NAN
    } else if s1 == 0.0 || s2.is_infinite() {
        signed(f64::INFINITY)
    } else if s1.is_infinite() || s2 == 0.0 || biased_exp(s2) - biased_exp(s1) < -underflow_gap {
        // x/inf, 0/y, and quotients far below the smallest denormal.
        signed(0.0)
    } else if s0.is_nan() {
        // With finite non-zero operands a NaN estimate means the scaled quotient overflowed
        // inside the Newton-Raphson steps (a true quotient beyond 2^192): the ISA pseudocode
        // has no case for it; hardware returns the overflow value (infinity in the default
        // round mode), as tinygrad's hardware-checked model of this instruction records.
        signed(f64::INFINITY)
    } else {
        signed(s0.abs())
    }
}

/// Biased exponent field of an f32.
fn exp_f32(x: f32) -> i32 {
    ((x.to_bits() >> 23) & 0xff) as i32
}

/// Biased exponent field of an f64.
fn exp_f64(x: f64) -> i32 {
    ((x.to_bits() >> 52) & 0x7ff) as i32
}

/// Parameters of the division helpers for one precision: the exponent distance that means
/// "quotient near overflow", the power-of-two scale, the "numerator tiny" exponent bound and
/// the biased exponent of 1.0.
struct DivParams {
    near_max: i32,
    scale: i32,
    tiny: i32,
    one: i32,
}

const DIV_F32: DivParams = DivParams {
    near_max: 96,
    scale: 64,
    tiny: 23,
    one: 127,
};
const DIV_F64: DivParams = DivParams {
    near_max: 768,
    scale: 128,
    tiny: 53,
    one: 1023,
};

/// `v_div_scale_*` for one lane: `s0` is the value to scale (the numerator or the
/// denominator), `s1` the denominator, `s2` the numerator. Returns the scaled value and the
/// lane's VCC bit ("the quotient needs post-scaling").
///
/// This follows the CDNA4 ISA pseudocode branch by branch. "1.0 / S1 == DENORM" is evaluated
/// in f64 as the pseudocode writes it (`1.0 / 64'F(S1.f32) == DENORM.f64`), so for f32
/// operands those two branches never apply. One reading is forced by the division macro the
/// instruction exists for (LLVM's fdiv expansion, which must return the correctly rounded
/// quotient): where both 1/S1 and S2/S1 are denormal (f64: |S1| > 2^1022) the denominator
/// is scaled *down*; the pseudocode's `ldexp(S0, 128)` would overflow it to infinity. With
/// `v_div_fmas`'s 2^-128 post-scale for a small quotient this yields the true quotient.
///
/// The unit tests run the f32 and f64 macros over every input class and compare with host
/// division.
fn div_scale(s0: f64, s1: f64, s2: f64, p: &DivParams, narrow: bool) -> (f64, bool) {
    // Rounds to the operand precision so that "is denormal" tests the value the hardware sees.
    let round = |x: f64| if narrow { x as f32 as f64 } else { x };
    let exp = |x: f64| {
        if narrow {
            exp_f32(x as f32)
        } else {
            exp_f64(x)
        }
    };
    let denorm = |x: f64| x != 0.0 && x.is_finite() && exp(x) == 0;
    let denorm64 = |x: f64| x != 0.0 && x.is_subnormal();
    let ldexp = |x: f64, e: i32| round(x * fp::pow2(e));
    if s2 == 0.0 || s1 == 0.0 {
        (f64::NAN, false)
    } else if exp(s2) - exp(s1) >= p.near_max {
        // The quotient is near the largest finite value: scale the denominator up.
        (if s0 == s1 { ldexp(s0, p.scale) } else { s0 }, true)
    } else if denorm(s1) {
        (ldexp(s0, p.scale), false)
    } else if denorm64(1.0 / s1) && denorm(round(s2 / s1)) {
        (if s0 == s1 { ldexp(s0, -p.scale) } else { s0 }, true)
    } else if denorm64(1.0 / s1) {
        (ldexp(s0, -p.scale), false)
    } else if denorm(round(s2 / s1)) {
        // The quotient is denormal: scale the numerator up, post-scale the quotient down.
        (if s0 == s2 { ldexp(s0, p.scale) } else { s0 }, true)
    } else if exp(s2) <= p.tiny {
        // The numerator is tiny: scale both (no post-scaling needed).
        (ldexp(s0, p.scale), false)
    } else {
        (s0, false)
    }
}

/// `v_div_fmas_*` for one lane: `fma(s0, s1, s2)`, post-scaled when `vcc` is set. The ISA
/// pseudocode writes a fixed 2^32 (2^64 for f64), which cannot undo `v_div_scale`'s 2^64
/// (2^128) scaling; the scale applied here is 2^+64 when the quotient estimate `s2` is at
/// least 2.0 (the denominator was scaled up because the quotient is huge) and 2^-64 otherwise
/// (the numerator was scaled up, or the denominator down, because the quotient is denormal).
/// Hardware tests published by tinygrad (RDNA3, same division macro) report the same rule.
fn div_fmas(s0: f64, s1: f64, s2: f64, vcc: bool, p: &DivParams, narrow: bool) -> f64 {
    let exp = |x: f64| {
        if narrow {
            exp_f32(x as f32)
        } else {
            exp_f64(x)
        }
    };
    if !vcc {
        return if narrow {
            (s0 as f32).mul_add(s1 as f32, s2 as f32) as f64
        } else {
            s0.mul_add(s1, s2)
        };
    }
    let scale = if exp(s2) > p.one { p.scale } else { -p.scale };
    // f32: the f64 fma of f32 values is exact enough that scaling it before the one rounding
    // to f32 matches a fused scale; f64: scaling after the fma is exact unless the result is
    // denormal.
    s0.mul_add(s1, s2) * fp::pow2(scale)
}

/// `v_div_scale_*` and `v_div_fmas_*`, the scaling steps of LLVM's division expansion.
fn div_ops(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    let wide = matches!(i.op, V_DIV_SCALE_F64 | V_DIV_FMAS_F64);
    let s = if wide {
        f64_srcs(w, i, 3)?
    } else {
        f32_srcs(w, i, 3)?
            .into_iter()
            .map(|v| v.map(|x| x as f64))
            .collect()
    };
    let p = if wide { &DIV_F64 } else { &DIV_F32 };
    let exec = w.exec();
    let scale = matches!(i.op, V_DIV_SCALE_F32 | V_DIV_SCALE_F64);
    let vcc_in = w.vcc();
    let mut out = [0u64; 64];
    let mut vcc_out = 0u64;
    for l in 0..64 {
        let (a, b, c) = (s[0][l], s[1][l], s[2][l]);
        let d = if scale {
            let (d, flag) = div_scale(a, b, c, p, !wide);
            vcc_out |= (flag as u64) << l;
            d
        } else {
            div_fmas(a, b, c, vcc_in >> l & 1 != 0, p, !wide)
        };
        out[l] = d.to_bits();
    }
    if wide {
        write_v64(w, i.dst(), exec, &out)?;
    } else {
        let mut o32 = [0u32; 64];
        for l in 0..64 {
            o32[l] = (f64::from_bits(out[l]) as f32).to_bits();
        }
        write_v32(w, i.dst(), 0, exec, &o32)?;
    }
    if scale {
        write_mask_dst(w, i.sdst(), vcc_out & exec)?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// VOP3P
// ---------------------------------------------------------------------------------------------

/// Packed 16-bit operand `k`: (low element, high element) after op_sel/op_sel_hi.
fn pk16(i: &Inst, k: usize, x: u32) -> (u16, u16) {
    let lo = if i.mods.op_sel >> k & 1 != 0 {
        (x >> 16) as u16
    } else {
        x as u16
    };
    let hi = if i.mods.op_sel_hi >> k & 1 != 0 {
        (x >> 16) as u16
    } else {
        x as u16
    };
    (lo, hi)
}

fn pkf(i: &Inst, k: usize, h: u16, high: bool, bf: bool) -> f64 {
    let mut x = if bf {
        fp::bf16_to_f32(h)
    } else {
        fp::f16_to_f32(h)
    } as f64;
    let neg = if high { i.mods.neg_hi } else { i.mods.neg };
    if neg >> k & 1 != 0 {
        x = -x;
    }
    x
}

fn vop3p(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    let exec = w.exec();
    let clampi = i.mods.clamp;
    let n = match i.op {
        V_PK_MAD_I16 | V_PK_MAD_U16 | V_PK_FMA_F16 | V_PK_MINIMUM3_F16 | V_PK_MAXIMUM3_F16
        | V_FMA_MIX_F32 | V_FMA_MIXLO_F16 | V_FMA_MIXHI_F16 | V_DOT2_F32_BF16 | V_DOT2_F32_F16
        | V_DOT2_I32_I16 | V_DOT2_U32_U16 | V_DOT4_I32_I8 | V_DOT4_U32_U8 | V_DOT8_I32_I4
        | V_DOT8_U32_U4 | V_PK_FMA_F32 => 3,
        V_PK_MOV_B32 | V_PK_MUL_F32 | V_PK_ADD_F32 => 2,
        _ => 2,
    };
    // 32-bit packed ops work on register pairs.
    if matches!(
        i.op,
        V_PK_FMA_F32 | V_PK_MUL_F32 | V_PK_ADD_F32 | V_PK_MOV_B32
    ) {
        let srcs: Vec<[u64; 64]> = (0..n)
            .map(|k| read_v64(w, i.operand(SRC[k]), i.value_type(SRC[k])))
            .collect::<Result<_, _>>()?;
        let mut out = [0u64; 64];
        for l in 0..64 {
            let pick = |k: usize, high: bool| -> u32 {
                let sel = if high {
                    i.mods.op_sel_hi
                } else {
                    i.mods.op_sel
                } >> k
                    & 1;
                (srcs[k][l] >> (32 * sel)) as u32
            };
            let f = |k: usize, high: bool| -> f32 {
                let mut x = f32::from_bits(pick(k, high));
                let neg = if high { i.mods.neg_hi } else { i.mods.neg };
                if neg >> k & 1 != 0 {
                    x = -x;
                }
                x
            };
            let (lo, hi) = match i.op {
                // v_pk_mov_b32 selects each output dword with op_sel alone: bit 0 picks the
                // dword of src0 for the low result, bit 1 the dword of src1 for the high one.
                V_PK_MOV_B32 => (
                    (srcs[0][l] >> (32 * (i.mods.op_sel & 1))) as u32,
                    (srcs[1][l] >> (32 * (i.mods.op_sel >> 1 & 1))) as u32,
                ),
                V_PK_ADD_F32 => (
                    (f(0, false) + f(1, false)).to_bits(),
                    (f(0, true) + f(1, true)).to_bits(),
                ),
                V_PK_MUL_F32 => (
                    (f(0, false) * f(1, false)).to_bits(),
                    (f(0, true) * f(1, true)).to_bits(),
                ),
                _ => (
                    f(0, false).mul_add(f(1, false), f(2, false)).to_bits(),
                    f(0, true).mul_add(f(1, true), f(2, true)).to_bits(),
                ),
            };
            out[l] = lo as u64 | ((hi as u64) << 32);
        }
        return write_v64(w, i.dst(), exec, &out);
    }
    let srcs: Vec<Lanes> = (0..n)
        .map(|k| read_v32(w, i.operand(SRC[k]), i.value_type(SRC[k])))
        .collect::<Result<_, _>>()?;
    let mut out = [0u32; 64];
    match i.op {
        V_FMA_MIX_F32 | V_FMA_MIXLO_F16 | V_FMA_MIXHI_F16 => {
            // Each source is an f32 or (op_sel_hi bit set) an f16 taken from the half op_sel
            // picks; neg_hi acts as abs. One fused rounding.
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            for l in 0..64 {
                let v = |k: usize| -> f64 {
                    let x = srcs[k][l];
                    let mut f = if i.mods.op_sel_hi >> k & 1 != 0 {
                        fp::f16_to_f32(if i.mods.op_sel >> k & 1 != 0 {
                            (x >> 16) as u16
                        } else {
                            x as u16
                        }) as f64
                    } else {
                        f32::from_bits(x) as f64
                    };
                    if i.mods.neg_hi >> k & 1 != 0 {
                        f = f.abs();
                    }
                    if i.mods.neg >> k & 1 != 0 {
                        f = -f;
                    }
                    f
                };
                let r = v(0).mul_add(v(1), v(2));
                let r = if clampi { r.clamp(0.0, 1.0) } else { r };
                out[l] = match i.op {
                    V_FMA_MIX_F32 => (r as f32).to_bits(),
                    V_FMA_MIXLO_F16 => {
                        (old[l] & 0xffff_0000) | fp::F16.encode(r, Overflow::InfOrNan)
                    }
                    _ => (old[l] & 0xffff) | (fp::F16.encode(r, Overflow::InfOrNan) << 16),
                };
            }
        }
        V_DOT2_F32_F16 | V_DOT2_F32_BF16 => {
            let bf = i.op == V_DOT2_F32_BF16;
            for l in 0..64 {
                let (a0, a1) = pk16(i, 0, srcs[0][l]);
                let (b0, b1) = pk16(i, 1, srcs[1][l]);
                let s = pkf(i, 0, a0, false, bf) * pkf(i, 1, b0, false, bf)
                    + pkf(i, 0, a1, true, bf) * pkf(i, 1, b1, true, bf)
                    + f32::from_bits(srcs[2][l]) as f64;
                out[l] = (if clampi { s.clamp(0.0, 1.0) } else { s } as f32).to_bits();
            }
        }
        V_DOT2_I32_I16 | V_DOT2_U32_U16 | V_DOT4_I32_I8 | V_DOT4_U32_U8 | V_DOT8_I32_I4
        | V_DOT8_U32_U4 => {
            let (bits, signed) = match i.op {
                V_DOT2_I32_I16 => (16, true),
                V_DOT2_U32_U16 => (16, false),
                V_DOT4_I32_I8 => (8, true),
                V_DOT4_U32_U8 => (8, false),
                V_DOT8_I32_I4 => (4, true),
                _ => (4, false),
            };
            for l in 0..64 {
                let d = dot_int(srcs[0][l], srcs[1][l], bits, signed) as i64;
                let s = if signed {
                    d + srcs[2][l] as i32 as i64
                } else {
                    d as u32 as i64 + srcs[2][l] as i64
                };
                out[l] = if clampi {
                    if signed { sat_i32(s) } else { sat_u32(s) }
                } else {
                    s as u32
                };
            }
        }
        _ => {
            for l in 0..64 {
                let e: Vec<(u16, u16)> = (0..n).map(|k| pk16(i, k, srcs[k][l])).collect();
                let mut r = [0u16; 2];
                for (h, rh) in r.iter_mut().enumerate() {
                    let high = h == 1;
                    let g = |k: usize| if high { e[k].1 } else { e[k].0 };
                    let fl = |k: usize| pkf(i, k, g(k), high, false);
                    let fres = |x: f64| {
                        let x = if clampi { x.clamp(0.0, 1.0) } else { x };
                        if x.is_nan() {
                            0x7e00
                        } else {
                            fp::F16.encode(x, Overflow::InfOrNan) as u16
                        }
                    };
                    *rh = match i.op {
                        V_PK_ADD_F16 => fres(fl(0) + fl(1)),
                        V_PK_MUL_F16 => fres(fl(0) * fl(1)),
                        V_PK_FMA_F16 => fres(fl(0).mul_add(fl(1), fl(2))),
                        V_PK_MIN_F16 => {
                            fres(
                                alu::minmax_f32(fl(0) as f32, fl(1) as f32, false, mode_ieee(w))
                                    as f64,
                            )
                        }
                        V_PK_MAX_F16 => {
                            fres(
                                alu::minmax_f32(fl(0) as f32, fl(1) as f32, true, mode_ieee(w))
                                    as f64,
                            )
                        }
                        V_PK_MINIMUM3_F16 => fres(alu::maximum_f32(
                            alu::maximum_f32(fl(0) as f32, fl(1) as f32, false),
                            fl(2) as f32,
                            false,
                        ) as f64),
                        V_PK_MAXIMUM3_F16 => fres(alu::maximum_f32(
                            alu::maximum_f32(fl(0) as f32, fl(1) as f32, true),
                            fl(2) as f32,
                            true,
                        ) as f64),
                        V_PK_ADD_U16 => {
                            if clampi {
                                g(0).saturating_add(g(1))
                            } else {
                                g(0).wrapping_add(g(1))
                            }
                        }
                        V_PK_SUB_U16 => {
                            if clampi {
                                g(0).saturating_sub(g(1))
                            } else {
                                g(0).wrapping_sub(g(1))
                            }
                        }
                        V_PK_ADD_I16 => {
                            if clampi {
                                (g(0) as i16).saturating_add(g(1) as i16) as u16
                            } else {
                                g(0).wrapping_add(g(1))
                            }
                        }
                        V_PK_SUB_I16 => {
                            if clampi {
                                (g(0) as i16).saturating_sub(g(1) as i16) as u16
                            } else {
                                g(0).wrapping_sub(g(1))
                            }
                        }
                        V_PK_MUL_LO_U16 => g(0).wrapping_mul(g(1)),
                        V_PK_MAD_U16 => {
                            let p = g(0) as u32 * g(1) as u32 + g(2) as u32;
                            if clampi {
                                p.min(0xffff) as u16
                            } else {
                                p as u16
                            }
                        }
                        V_PK_MAD_I16 => {
                            let p = g(0) as i16 as i32 * g(1) as i16 as i32 + g(2) as i16 as i32;
                            if clampi {
                                p.clamp(i16::MIN as i32, i16::MAX as i32) as u16
                            } else {
                                p as u16
                            }
                        }
                        V_PK_LSHLREV_B16 => g(1) << (g(0) & 15),
                        V_PK_LSHRREV_B16 => g(1) >> (g(0) & 15),
                        V_PK_ASHRREV_I16 => ((g(1) as i16) >> (g(0) & 15)) as u16,
                        V_PK_MAX_I16 => (g(0) as i16).max(g(1) as i16) as u16,
                        V_PK_MIN_I16 => (g(0) as i16).min(g(1) as i16) as u16,
                        V_PK_MAX_U16 => g(0).max(g(1)),
                        V_PK_MIN_U16 => g(0).min(g(1)),
                        _ => return Err(FaultKind::Unimplemented(i.mnemonic().to_string())),
                    };
                }
                out[l] = r[0] as u32 | ((r[1] as u32) << 16);
            }
        }
    }
    write_v32(w, i.dst(), 0, exec, &out)
}

#[cfg(test)]
mod tests {
    use crate::exec::testutil::Harness;

    fn f(x: f32) -> u32 {
        x.to_bits()
    }

    /// LLVM's f32 division expansion (as in compiled kernels, e.g. Triton softmax): the
    /// result must be the correctly rounded quotient for every input class, which pins down
    /// v_div_scale/v_div_fmas/v_div_fixup together. Expected values: host IEEE division.
    #[test]
    fn division_macro_is_correctly_rounded() {
        const MACRO: &[u32] = &[
            0xd1e00002, 0x04020301, // v_div_scale_f32 v2, s[0:1], v1, v1, v0
            0xd1e06a03, 0x04020300, // v_div_scale_f32 v3, vcc, v0, v1, v0
            0x7e084502, // v_rcp_f32_e32 v4, v2
            0xd1cb0005, 0x23ca0902, // v_fma_f32 v5, -v2, v4, 1.0
            0xd1cb0004, 0x04120905, // v_fma_f32 v4, v5, v4, v4
            0x0a0a0903, // v_mul_f32_e32 v5, v3, v4
            0xd1cb0006, 0x240e0b02, // v_fma_f32 v6, -v2, v5, v3
            0xd1cb0005, 0x04160906, // v_fma_f32 v5, v6, v4, v5
            0xd1cb0002, 0x240e0b02, // v_fma_f32 v2, -v2, v5, v3
            0xd1e20002, 0x04160902, // v_div_fmas_f32 v2, v2, v4, v5
            0xd1de0000, 0x04020302, // v_div_fixup_f32 v0, v2, v1, v0
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // A float with a random sign and mantissa and a biased exponent in `exps`.
        let mut float_in = |exps: std::ops::RangeInclusive<u32>| {
            let r = rnd();
            let e = exps.start() + (r >> 40) as u32 % (exps.end() - exps.start() + 1);
            f32::from_bits(((r as u32) & 0x807f_ffff) | (e << 23))
        };
        // (numerator exponents, denominator exponents) per input class; 0 = denormal.
        let classes = [
            (107..=147, 107..=147), // ordinary
            (190..=254, 1..=90),    // quotient near or past overflow
            (1..=30, 137..=190),    // denormal quotient
            (100..=254, 253..=254), // denominator above 2^126 (denormal reciprocal)
            (1..=30, 253..=254),    // both: tiny numerator over a huge denominator
            (1..=147, 0..=0),       // denormal denominator
            (0..=0, 1..=254),       // denormal numerator
            (1..=23, 100..=140),    // tiny numerator
            (0..=0, 0..=0),         // denormal over denormal
        ];
        for (c, (ne, de)) in classes.iter().enumerate() {
            for _ in 0..4 {
                let mut h = Harness::new(MACRO);
                let pairs: Vec<(f32, f32)> = (0..64)
                    .map(|_| (float_in(ne.clone()), float_in(de.clone())))
                    .collect();
                h.set_v(0, |l| pairs[l].0.to_bits());
                h.set_v(1, |l| pairs[l].1.to_bits());
                h.run().unwrap();
                for (l, (n, d)) in pairs.iter().enumerate() {
                    let want = n / d;
                    let got = f32::from_bits(h.v(0)[l]);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "class {c}: {n:e} / {d:e} = {want:e}, got {got:e}"
                    );
                }
            }
        }
        // Special operands: zeros, infinities and NaN in every combination.
        let specials = [
            0.0f32,
            -0.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.5,
            -3.0,
            f32::MAX,
        ];
        let mut h = Harness::new(MACRO);
        h.set_v(0, |l| specials[l % 8].to_bits());
        h.set_v(1, |l| specials[l / 8].to_bits());
        h.run().unwrap();
        for l in 0..64 {
            let (n, d) = (specials[l % 8], specials[l / 8]);
            let (want, got) = (n / d, f32::from_bits(h.v(0)[l]));
            if want.is_nan() {
                assert!(got.is_nan(), "{n} / {d} = NaN, got {got}");
            } else {
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{n} / {d} = {want}, got {got}"
                );
            }
        }
    }

    /// FP4 to bf16/f16 with extreme scales (the scale is the exponent field of the f32
    /// source 1). FP4 codes: 0x7 = 6, 0x1 = 0.5, 0x3 = 1.5, 0x9 = -0.5; byte 0 holds element 0
    /// in its low nibble. Hand-derived:
    /// * lane 0, scale 2^127: bf16(6 * 2^127) overflows to 0x7f80, bf16(2^126) = 0x7e80;
    ///   scale 2^-24: f16(6 * 2^-24) = denormal 6 = 0x0006, f16(2^-25) ties to even = 0.
    /// * lane 1, scale 2^-127 (field 0): bf16(1.5 * 2^-127) = 96 * 2^-133 = 0x0060,
    ///   bf16(-0.5 * 2^-127) = 0x8020; scale 2^-15: f16(1.5 * 2^-15) = 768 * 2^-24 = 0x0300,
    ///   f16(-2^-16) = 0x8100.
    #[test]
    fn scaled_fp4_conversions_at_the_range_ends() {
        let mut h = Harness::new(&[
            0xd251000e, 0x00020702, // v_cvt_scalef32_pk_bf16_fp4 v14, v2, v3
            0xd250000f, 0x00020902, // v_cvt_scalef32_pk_f16_fp4 v15, v2, v4
        ]);
        h.set_v(2, |l| [0x17, 0x93][l % 2]);
        h.set_v(3, |l| [0x7f00_0000, 0x0000_0000][l % 2]);
        h.set_v(4, |l| [0x3380_0000, 0x3800_0000][l % 2]);
        h.run().unwrap();
        assert_eq!((h.v(14)[0], h.v(15)[0]), (0x7e80_7f80, 0x0000_0006));
        assert_eq!((h.v(14)[1], h.v(15)[1]), (0x8020_0060, 0x8100_0300));
    }

    /// LLVM's f64 division expansion, checked like the f32 one.
    #[test]
    fn f64_division_macro_is_correctly_rounded() {
        const MACRO: &[u32] = &[
            0xd1e10004, 0x04020502, // v_div_scale_f64 v[4:5], s[0:1], v[2:3], v[2:3], v[0:1]
            0x7e0c4b04, // v_rcp_f64_e32 v[6:7], v[4:5]
            0xd1cc0008, 0x23ca0d04, // v_fma_f64 v[8:9], -v[4:5], v[6:7], 1.0
            0xd1cc0006, 0x041a1106, // v_fma_f64 v[6:7], v[6:7], v[8:9], v[6:7]
            0xd1cc0008, 0x23ca0d04, // v_fma_f64 v[8:9], -v[4:5], v[6:7], 1.0
            0xd1cc0006, 0x041a1106, // v_fma_f64 v[6:7], v[6:7], v[8:9], v[6:7]
            0xd1e16a08, 0x04020500, // v_div_scale_f64 v[8:9], vcc, v[0:1], v[2:3], v[0:1]
            0xd281000a, 0x00020d08, // v_mul_f64 v[10:11], v[8:9], v[6:7]
            0xd1cc0004, 0x24221504, // v_fma_f64 v[4:5], -v[4:5], v[10:11], v[8:9]
            0xd1e30004, 0x042a0d04, // v_div_fmas_f64 v[4:5], v[4:5], v[6:7], v[10:11]
            0xd1df0000, 0x04020504, // v_div_fixup_f64 v[0:1], v[4:5], v[2:3], v[0:1]
        ];
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut float_in = |exps: std::ops::RangeInclusive<u64>| {
            let r = rnd();
            let e = exps.start() + (rnd() >> 20) % (exps.end() - exps.start() + 1);
            f64::from_bits((r & 0x800f_ffff_ffff_ffff) | (e << 52))
        };
        let classes = [
            (1000..=1046, 1000..=1046), // ordinary
            (1800..=2046, 1..=600),     // quotient near or past overflow
            (1..=100, 1100..=1500),     // denormal quotient
            (900..=2046, 2045..=2046),  // denominator above 2^1022 (denormal reciprocal)
            (1..=100, 2045..=2046),     // both
            (1..=1046, 0..=0),          // denormal denominator
            (0..=0, 1..=2046),          // denormal numerator
            (1..=53, 900..=1100),       // tiny numerator
        ];
        for (c, (ne, de)) in classes.iter().enumerate() {
            for _ in 0..4 {
                let mut h = Harness::new(MACRO);
                let pairs: Vec<(f64, f64)> = (0..64)
                    .map(|_| (float_in(ne.clone()), float_in(de.clone())))
                    .collect();
                h.set_v(0, |l| pairs[l].0.to_bits() as u32);
                h.set_v(1, |l| (pairs[l].0.to_bits() >> 32) as u32);
                h.set_v(2, |l| pairs[l].1.to_bits() as u32);
                h.set_v(3, |l| (pairs[l].1.to_bits() >> 32) as u32);
                h.run().unwrap();
                for (l, (n, d)) in pairs.iter().enumerate() {
                    let want = n / d;
                    let got = f64::from_bits(h.v(0)[l] as u64 | (h.v(1)[l] as u64) << 32);
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "class {c}: {n:e} / {d:e} = {want:e}, got {got:e}"
                    );
                }
            }
        }
    }

    /// Expected values worked out by hand from the ISA definitions (see each comment).
    #[test]
    fn vop_arithmetic_masks_and_lane_ops() {
        let mut h = Harness::new(&[
            0xd1018102, 0x20020300, // v_add_f32_e64 v2, -|v0|, v1 clamp
            0xd1050003, 0x08020300, // v_mul_f32_e64 v3, v0, v1 mul:2
            0x00080300, // v_cndmask_b32_e32 v4, v0, v1, vcc
            0xd1000005, 0x002a0300, // v_cndmask_b32_e64 v5, v0, v1, s[10:11]
            0x320c1107, // v_add_co_u32_e32 v6, vcc, v7, v8
            0x3812170a, // v_addc_co_u32_e32 v9, vcc, v10, v11, vcc
            0x7d881900, // v_cmp_gt_i32_e32 vcc, v0, v12
            0xd0d9000c, 0x0001070d, // v_cmpx_lt_u32_e64 s[12:13], v13, 3
            0x7e1c050d, // v_readfirstlane_b32 s14, v13
            0xd289000f, 0x00014b0d, // v_readlane_b32 s15, v13, 37
            0xd28a000e, 0x0001040f, // v_writelane_b32 v14, s15, 2
            0xd2080010, 0x04510512, // v_lshl_add_u64 v[16:17], v[18:19], 2, v[20:21]
            0xd2080016, 0x04510b12, // v_lshl_add_u64 v[22:23], v[18:19], 5, v[20:21]
            0xd28c0018, 0x000100c1, // v_mbcnt_lo_u32_b32 v24, -1, 0
            0xd28d0018, 0x000230c1, // v_mbcnt_hi_u32_b32 v24, -1, v24
            0xd1ed0019, 0x0472371a, // v_perm_b32 v25, v26, v27, v28
            0xd234051d, 0x1c72371a, // v_bitop3_b32 v29, v26, v27, v28 bitop3:0xe8
            0xd268001e, 0x00020300, // v_cvt_pk_bf16_f32 v30, v0, v1
            0xd1e81020, 0x04521107, // v_mad_u64_u32 v[32:33], s[16:17], v7, v8, v[20:21]
            0xd1f3001f, 0x04361107, // v_xad_u32 v31, v7, v8, v13
        ]);
        h.set_v(0, |l| f((l as f32 - 32.0) * 0.25));
        h.set_v(1, |_| f(0.5));
        h.set_v(7, |l| 0xffff_ffc0 + l as u32);
        h.set_v(8, |_| 0x20);
        h.set_v(10, |_| u32::MAX);
        h.set_v(11, |_| 0);
        h.set_v(12, |_| 0);
        h.set_v(13, |l| l as u32);
        h.set_v(18, |_| 3);
        h.set_v(19, |_| 1);
        h.set_v(20, |_| 5);
        h.set_v(21, |_| 0);
        h.set_v(26, |l| 0x8877_6655 ^ (l as u32 * 0x0101_0101));
        h.set_v(27, |_| 0x4433_2211);
        h.set_v(28, |_| 0x0004_0700);
        h.w.set_vcc(0x5555_5555_5555_5555);
        h.w.set_sgpr64(10, 0xffff_0000_ffff_0000);
        // Step through the part that runs with all lanes active.
        for _ in 0..7 {
            h.step().unwrap();
        }
        // -|x| + 0.5 clamped to [0, 1]: lane 0 is -7.5 -> 0, lane 32 is 0.5, lane 33 0.25.
        assert_eq!(
            (h.v(2)[0], h.v(2)[32], h.v(2)[33]),
            (f(0.0), f(0.5), f(0.25))
        );
        // (x * 0.5) * 2.
        assert_eq!(h.v(3)[5], f(-6.75));
        // cndmask picks src1 where the mask bit is set.
        assert_eq!((h.v(4)[0], h.v(4)[1]), (f(0.5), f(-7.75)));
        assert_eq!((h.v(5)[15], h.v(5)[16]), (f(-4.25), f(0.5)));
        // 0xffffffc0 + l + 0x20 carries exactly for l >= 32, and the carry feeds addc.
        assert_eq!((h.v(6)[0], h.v(6)[40]), (0xffff_ffe0, 8));
        assert_eq!((h.v(9)[0], h.v(9)[40]), (u32::MAX, 0));
        // The compare ran last: signed compare of the f32 bits with 0 is true for x > 0.
        assert_eq!(h.w.vcc(), !0u64 << 33);
        h.run().unwrap();
        // cmpx: lanes whose id is below 3, written to the SGPR pair and to EXEC.
        assert_eq!(h.w.sgpr64(12), 0b111);
        assert_eq!(h.w.exec(), 0b111);
        assert_eq!(h.w.sgpr[14], 0, "first active lane");
        assert_eq!(h.w.sgpr[15], 37, "readlane ignores EXEC");
        assert_eq!(h.v(14)[2], 37);
        // (0x1_0000_0003 << 2) + 5, only in active lanes; a shift of 5 acts as 0.
        assert_eq!((h.v(16)[1], h.v(17)[1], h.v(16)[5]), (0x11, 4, 0));
        assert_eq!((h.v(22)[2], h.v(23)[2]), (8, 1));
        assert_eq!(&h.v(24)[..4], &[0, 1, 2, 0]);
        // perm: bytes {s1.b0, s0.b3, s0.b0, s1.b0} of lane 0.
        assert_eq!(h.v(25)[0], 0x1155_8811);
        let (a, b, c) = (h.v(26)[1], h.v(27)[1], h.v(28)[1]);
        assert_eq!(
            h.v(29)[1],
            (a & b) | (a & c) | (b & c),
            "table 0xe8 is majority"
        );
        assert_eq!(h.v(30)[0], 0x3f00_c100);
        // 0xffffffc0 * 0x20 + 5 = 0x1f_ffff_f805.
        assert_eq!((h.v(32)[0], h.v(33)[0]), (0xffff_f805, 0x1f));
        assert_eq!(h.w.sgpr64(16), 0);
        assert_eq!(h.v(31)[1], 0xffff_ffe2);
    }

    #[test]
    fn sdwa_selects_and_merges() {
        let mut h = Harness::new(&[
            0x28c2c2f9,
            0x04060660, // v_or_b32_sdwa v97, v96, v97 dst_sel:DWORD dst_unused:UNUSED_PAD src0_sel:DWORD src1_sel:WORD_0
            0x680206f9,
            0x00021502, // v_add_u32_sdwa v1, v2, v3 dst_sel:WORD_1 dst_unused:UNUSED_PRESERVE src0_sel:BYTE_2 src1_sel:BYTE_0
            0x5e0806f9,
            0x02000105, // v_max_u16_sdwa v4, v5, v3 dst_sel:BYTE_1 dst_unused:UNUSED_PAD src0_sel:BYTE_0 src1_sel:BYTE_2
            0x7d5406f9,
            0x04048005, // v_cmp_eq_u16_sdwa s[0:1], v5, v3 src0_sel:WORD_0 src1_sel:WORD_0
        ]);
        h.set_v(96, |_| 0xabcd_0000);
        h.set_v(97, |_| 0x1234_5678);
        h.set_v(1, |_| 0xdead_beef);
        h.set_v(2, |_| 0x0077_0000);
        h.set_v(3, |l| 0x0099_0000 | l as u32);
        h.set_v(5, |_| 0x0000_0010);
        h.run().unwrap();
        // src1 WORD_0 of 0x12345678 is 0x5678, zero-extended.
        assert_eq!(h.v(97)[0], 0xabcd_5678);
        // 0x77 + l into the high word; the low word of the old value is kept.
        assert_eq!(h.v(1)[9], ((0x77 + 9) << 16) | 0xbeef);
        // max(0x10, 0x99) = 0x99 into byte 1, other bits zero.
        assert_eq!(h.v(4)[0], 0x9900);
        // Low halves equal only in lane 16 (0x0010).
        assert_eq!(h.w.sgpr64(0), 1 << 16);
    }

    #[test]
    fn dpp_moves_lanes() {
        let mut h = Harness::new(&[
            0x7e0202fa,
            0xff091102, // v_mov_b32_dpp v1, v2 row_shr:1 row_mask:0xf bank_mask:0xf bound_ctrl:1
            0x7e0602fa,
            0xff001b02, // v_mov_b32_dpp v3, v2 quad_perm:[3,2,1,0] row_mask:0xf bank_mask:0xf
            0x7e0802fa,
            0xf3011102, // v_mov_b32_dpp v4, v2 row_shr:1 row_mask:0xf bank_mask:0x3
        ]);
        h.set_v(2, |l| 100 + l as u32);
        h.set_v(4, |_| 7);
        h.w.set_exec(!(1u64 << 20));
        h.run().unwrap();
        // row_shr:1 reads lane - 1 within the row; lane 0 of each row has no source and reads
        // 0 with bound_ctrl; lane 21's source (lane 20) is inactive.
        assert_eq!(
            (h.v(1)[0], h.v(1)[1], h.v(1)[16], h.v(1)[17], h.v(1)[21]),
            (0, 100, 0, 116, 0)
        );
        assert_eq!((h.v(3)[0], h.v(3)[3], h.v(3)[5]), (103, 100, 106));
        // Without bound_ctrl an invalid source disables the lane; bank_mask 0x3 enables only
        // lanes 0-7 of each row.
        assert_eq!(
            (h.v(4)[0], h.v(4)[1], h.v(4)[7], h.v(4)[8]),
            (7, 100, 106, 7)
        );
    }

    #[test]
    fn permlane_swaps() {
        let mut h = Harness::new(&[
            0x7e02b502, // v_permlane32_swap_b32_e32 v1, v2
            0x7e06b304, // v_permlane16_swap_b32_e32 v3, v4
        ]);
        h.set_v(1, |l| l as u32);
        h.set_v(2, |l| 1000 + l as u32);
        h.set_v(3, |l| l as u32);
        h.set_v(4, |l| 1000 + l as u32);
        h.run().unwrap();
        // v1's upper half trades with v2's lower half.
        assert_eq!((h.v(1)[0], h.v(1)[32], h.v(1)[63]), (0, 1000, 1031));
        assert_eq!((h.v(2)[0], h.v(2)[31], h.v(2)[32]), (32, 63, 1032));
        // v3's rows 1 and 3 trade with v4's rows 0 and 2.
        assert_eq!((h.v(3)[16], h.v(3)[48], h.v(3)[0]), (1000, 1032, 0));
        assert_eq!((h.v(4)[0], h.v(4)[32], h.v(4)[16]), (16, 48, 1016));
    }

    #[test]
    fn halves_and_packed_math() {
        let mut h = Harness::new(&[
            0x3e020702, // v_add_f16_e32 v1, v2, v3
            0xd2060004, 0x040e0702, // v_fma_f16 v4, v2, v3, v3
            0xd38f4005, 0x18020702, // v_pk_add_f16 v5, v2, v3
            0xd38f4806, 0x10020702, // v_pk_add_f16 v6, v2, v3 op_sel:[1,0] op_sel_hi:[0,1]
            0xd3b00008,
            0x0c0a150a, // v_pk_fma_f32 v[8:9], v[10:11], v[10:11], v[2:3] op_sel_hi:[1,0,0]
            0xd3b3400c, 0x1802150e, // v_pk_mov_b32 v[12:13], v[14:15], v[10:11]
            0xd251000e, 0x00020702, // v_cvt_scalef32_pk_bf16_fp4 v14, v2, v3
        ]);
        // v2 = {lo 1.0 (0x3c00), hi 2.0 (0x4000)}, v3 = {lo 0.5 (0x3800), hi 4.0 (0x4400)}.
        h.set_v(2, |_| 0x4000_3c00);
        h.set_v(3, |_| 0x4400_3800);
        h.set_v(4, |_| 0xffff_0000);
        h.set_v(10, |_| 3.0f32.to_bits());
        h.set_v(11, |_| 5.0f32.to_bits());
        h.set_v(14, |_| 1.0f32.to_bits());
        h.set_v(15, |_| 2.0f32.to_bits());
        h.run().unwrap();
        // e32 f16 add: 1.0 + 0.5 = 1.5 (0x3e00), high half zeroed.
        assert_eq!(h.v(1)[0], 0x3e00);
        // v_fma_f16 keeps the destination's high half: 1.0 * 0.5 + 0.5 = 1.0.
        assert_eq!(h.v(4)[0], 0xffff_3c00);
        // Packed: {1.0 + 0.5, 2.0 + 4.0} = {1.5, 6.0}.
        assert_eq!(h.v(5)[0], 0x4600_3e00);
        // op_sel picks v2's high half for the low result: {2.0 + 0.5, 1.0 + 4.0}.
        assert_eq!(h.v(6)[0], 0x4500_4100);
        // lo: 3 * 3 + v2 as f32; hi: src0 high (5) * src1 low (3) + src2 low.
        let c = f32::from_bits(0x4000_3c00);
        assert_eq!(
            (h.v(8)[0], h.v(9)[0]),
            ((9.0 + c).to_bits(), (15.0 + c).to_bits())
        );
        // v_pk_mov_b32 with op_sel 0: low from src0's low dword, high from src1's low dword.
        assert_eq!(
            (h.v(12)[0], h.v(13)[0]),
            (1.0f32.to_bits(), 3.0f32.to_bits())
        );
        // FP4 byte 0 of 0x3c00 is 0x00: two zeros; scale exponent field of 0x44003800 is
        // 0x88 -> 2^9.
        assert_eq!(h.v(14)[0], 0);
    }

    #[test]
    fn scaled_fp4_conversion_selects_byte_and_scales() {
        let mut h = Harness::new(&[
            0xd251081f, 0x0002290e, // v_cvt_scalef32_pk_bf16_fp4 v31, v14, v20 op_sel:[1,0,0]
            0xd23f1800, 0x00021109, // v_cvt_scalef32_pk_f32_fp4 v[0:1], v9, v8 op_sel:[1,1,0]
        ]);
        // Byte 1 of v14 = 0x9f: low nibble 0xf = -6.0, high nibble 0x9 = -0.5.
        h.set_v(14, |_| 0x0000_9f00);
        h.set_v(20, |_| 4.0f32.to_bits());
        // Byte 3 of v9 = 0x73: 0x3 = 1.5, 0x7 = 6.0; scale 0.5.
        h.set_v(9, |_| 0x7300_0000);
        h.set_v(8, |_| 0.5f32.to_bits());
        h.run().unwrap();
        // -6 * 4 = -24 (bf16 0xc1c0), -0.5 * 4 = -2 (0xc000).
        assert_eq!(h.v(31)[0], 0xc000_c1c0);
        assert_eq!(
            (h.v(0)[0], h.v(1)[0]),
            (0.75f32.to_bits(), 3.0f32.to_bits())
        );
    }
}
