//! Vector ALU: VOP1/VOP2/VOP3/VOPC (with SDWA and DPP) and VOP3P packed math.
//!
//! Every operation computes all 64 lanes and then writes only the lanes EXEC (and, for DPP,
//! the row/bank masks and source validity) allows, so inactive lanes keep their values.
//! Floating-point source modifiers (`abs`, then `neg`) apply to floating-point operands only;
//! output modifiers (`omod`, then `clamp`) to floating-point results only. Rounding is
//! round-to-nearest-even; `MODE` round/denorm fields other than the default are not modelled.
//!
//! This module reads sources (DPP movement, SDWA selection, modifiers) and writes results;
//! the families live in submodules: [`compare`], [`convert`], [`packed`] (VOP3P), [`div`]
//! (division steps and transcendentals) and [`arith`] (everything else). Their value-level
//! semantics are in [`super::sem`].

// Lane loops index several parallel per-lane arrays at once; an index reads clearer than
// zipped iterators there.
#![allow(clippy::needless_range_loop)]

mod arith;
mod compare;
mod convert;
mod div;
mod packed;

use super::fault::{FaultKind, unimpl};
use super::fp::{self, Overflow};
use super::mfma::Vgpr;
use super::operands::{read_v32, read_v64, vreg, write_s32, write_s64, write_v32, write_v64};
use super::wave::Wave;
use crate::isa::{DppCtrl, DstUnused, Encoding, Inst, Opcode, Operand, Role, SdwaSel, ValueType};

type Lanes = Vgpr;

const SRC: [Role; 3] = [Role::Src0, Role::Src1, Role::Src2];

/// Executes a VOP1/VOP2/VOP3/VOPC (any of their SDWA/DPP forms) or VOP3P instruction.
///
/// Compares are recognised by their generated table facts; every other opcode goes to
/// [`arith::exec`], whose match hands the opcodes it does not own on to [`convert`], then
/// [`div`], so each opcode is named in exactly one family.
pub fn exec(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    if i.encoding == Encoding::Vop3p {
        return packed::exec(w, i);
    }
    if i.encoding.is_dpp() && i.dpp.control() == DppCtrl::Invalid(i.dpp.ctrl) {
        return Err(FaultKind::Illegal(format!(
            "reserved dpp_ctrl {:#x}",
            i.dpp.ctrl
        )));
    }
    match i.op.compare() {
        Some(c) => compare::exec(w, i, c),
        None => arith::exec(w, i),
    }
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

#[cfg(test)]
mod tests {
    use crate::exec::testutil::Harness;

    fn f(x: f32) -> u32 {
        x.to_bits()
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
}
