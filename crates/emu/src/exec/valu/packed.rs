//! VOP3P: packed 16-bit and 32-bit math, mixed-precision FMA and dot products.

use super::super::alu;
use super::super::fault::{FaultKind, unimpl};
use super::super::fp::{self, Overflow};
use super::super::operands::{read_v64, write_v32, write_v64};
use super::super::wave::Wave;
use super::arith::{dot_int, sat_i32, sat_u32};
use super::*;
use crate::isa::{Inst, Opcode};

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

pub(super) fn exec(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
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
                        _ => return Err(unimpl(i, "")),
                    };
                }
                out[l] = r[0] as u32 | ((r[1] as u32) << 16);
            }
        }
    }
    write_v32(w, i.dst(), 0, exec, &out)
}
