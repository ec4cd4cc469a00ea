//! The VALU's moves, lane access, and f32/f64/integer/16-bit arithmetic: every opcode the
//! other families do not own.

use super::super::alu;
use super::super::fault::{FaultKind, unimpl};
use super::super::fp::{self, Overflow};
use super::super::operands::{read_s32, read_v32, read_v64, vreg, write_s32, write_v32, write_v64};
use super::super::sem::float::{fract32, fract64, frexp32, frexp64, ldexp64};
use super::super::wave::Wave;
use super::*;
use crate::isa::{Inst, Opcode, Operand, Role, ValueType};

fn lane_mask_below(lane: usize) -> u64 {
    if lane == 0 {
        0
    } else {
        u64::MAX >> (64 - lane)
    }
}

pub(super) fn sat_u32(v: i64) -> u32 {
    v.clamp(0, u32::MAX as i64) as u32
}

pub(super) fn sat_i32(v: i64) -> u32 {
    v.clamp(i32::MIN as i64, i32::MAX as i64) as i32 as u32
}

/// Executes the opcodes of this family; the rest go on to [`super::convert::exec`].
pub(super) fn exec(w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
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
        V_FREXP_MANT_F32 => op_f32(w, i, 1, |a| frexp32(a[0]).0),
        V_FREXP_EXP_I32_F32 => {
            let a = f32_srcs(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = frexp32(a[0][l]).1 as u32;
            }
            store(w, i, &out)
        }
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
        V_FREXP_MANT_F64 => op_f64(w, i, 1, |a| frexp64(a[0]).0),
        V_FREXP_EXP_I32_F64 => {
            let a = f64_srcs(w, i, 1)?;
            let mut out = [0u32; 64];
            for l in 0..64 {
                out[l] = frexp64(a[0][l]).1 as u32;
            }
            store(w, i, &out)
        }
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
        _ => super::convert::exec(w, i),
    }
}

fn i24(x: u32) -> i64 {
    ((x << 8) as i32 >> 8) as i64
}

pub(super) fn dot_int(a: u32, b: u32, bits: u32, signed: bool) -> i32 {
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
