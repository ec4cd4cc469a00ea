//! Scalar ALU (SOP1/SOP2/SOPK/SOPC/SOPP) and scalar memory (SMEM).
//!
//! Semantics follow the CDNA3/CDNA4 ISA instruction definitions. SCC rules worth noting:
//! `s_min_*` sets SCC when S0 < S1, `s_max_*` when S0 >= S1 (the manual's inclusive
//! predicate); logical ops set SCC when the result is non-zero; unsigned add/sub set it on
//! carry/borrow, signed add/sub on overflow.

use super::alu;
use super::buffer::BufferResource;
use super::fault::{FaultKind, unimpl};
use super::interp::{Env, Flow};
use super::operands::{read_s32, read_s64, read_sregs, sindex, write_s32, write_s64, write_sregs};
use super::wave::{Wave, sreg};
use crate::isa::{Inst, Opcode, Operand, Role, ValueType};

fn s0(w: &Wave, i: &Inst) -> Result<u32, FaultKind> {
    read_s32(w, i.operand(Role::Src0), i.value_type(Role::Src0))
}
fn s1(w: &Wave, i: &Inst) -> Result<u32, FaultKind> {
    read_s32(w, i.operand(Role::Src1), i.value_type(Role::Src1))
}
fn s0_64(w: &Wave, i: &Inst) -> Result<u64, FaultKind> {
    read_s64(w, i.operand(Role::Src0), i.value_type(Role::Src0))
}
fn s1_64(w: &Wave, i: &Inst) -> Result<u64, FaultKind> {
    read_s64(w, i.operand(Role::Src1), i.value_type(Role::Src1))
}
fn simm16(i: &Inst) -> u16 {
    match i.operand(Role::Simm16) {
        Operand::Imm(v) => v as u16,
        _ => 0,
    }
}

/// Writes the 32-bit result and SCC.
fn d32(w: &mut Wave, i: &Inst, v: u32, scc: Option<bool>) -> Result<Flow, FaultKind> {
    write_s32(w, i.operand(Role::Sdst), v)?;
    if let Some(s) = scc {
        w.scc = s;
    }
    Ok(Flow::Next)
}

fn d64(w: &mut Wave, i: &Inst, v: u64, scc: Option<bool>) -> Result<Flow, FaultKind> {
    write_s64(w, i.operand(Role::Sdst), v)?;
    if let Some(s) = scc {
        w.scc = s;
    }
    Ok(Flow::Next)
}

/// Hardware register ids of `s_getreg`/`s_setreg` (CDNA4 XML map).
const HW_REG_MODE: u16 = 1;
const HW_REG_STATUS: u16 = 2;
const HW_REG_TRAPSTS: u16 = 3;

fn hwreg_fields(v: u16) -> (u16, u32, u32) {
    let id = v & 0x3f;
    let offset = ((v >> 6) & 0x1f) as u32;
    let size = ((v >> 11) & 0x1f) as u32 + 1;
    (id, offset, size)
}

fn status(w: &Wave) -> u32 {
    // SCC bit 0, EXECZ bit 9, VCCZ bit 10, VALID bit 16.
    (w.scc as u32) | (((w.exec() == 0) as u32) << 9) | (((w.vcc() == 0) as u32) << 10) | (1 << 16)
}

fn getreg(w: &Wave, i: &Inst, v: u16) -> Result<u32, FaultKind> {
    let (id, offset, size) = hwreg_fields(v);
    let reg = match id {
        HW_REG_MODE => w.mode,
        HW_REG_STATUS => status(w),
        HW_REG_TRAPSTS => 0,
        _ => return Err(unimpl(i, &format!("hardware register {id}"))),
    };
    let mask = if size >= 32 {
        u32::MAX
    } else {
        (1u32 << size) - 1
    };
    Ok((reg >> offset) & mask)
}

fn setreg(w: &mut Wave, i: &Inst, v: u16, data: u32) -> Result<(), FaultKind> {
    let (id, offset, size) = hwreg_fields(v);
    let mask = (if size >= 32 {
        u32::MAX
    } else {
        (1u32 << size) - 1
    }) << offset;
    match id {
        HW_REG_MODE => {
            w.mode = (w.mode & !mask) | ((data << offset) & mask);
            Ok(())
        }
        // Writes to the trap status only matter to a trap handler, which is not emulated.
        HW_REG_TRAPSTS => Ok(()),
        _ => Err(unimpl(i, &format!("writing hardware register {id}"))),
    }
}

/// Executes a SOP1/SOP2/SOPK/SOPC/SOPP instruction.
pub fn exec(w: &mut Wave, i: &Inst, next: u64) -> Result<Flow, FaultKind> {
    use Opcode::*;
    match i.op {
        // ---- SOP2 ----
        S_ADD_U32 => {
            let (r, c) = s0(w, i)?.overflowing_add(s1(w, i)?);
            d32(w, i, r, Some(c))
        }
        S_SUB_U32 => {
            let (r, c) = s0(w, i)?.overflowing_sub(s1(w, i)?);
            d32(w, i, r, Some(c))
        }
        S_ADD_I32 => {
            let (r, o) = (s0(w, i)? as i32).overflowing_add(s1(w, i)? as i32);
            d32(w, i, r as u32, Some(o))
        }
        S_SUB_I32 => {
            let (r, o) = (s0(w, i)? as i32).overflowing_sub(s1(w, i)? as i32);
            d32(w, i, r as u32, Some(o))
        }
        S_ADDC_U32 => {
            let t = s0(w, i)? as u64 + s1(w, i)? as u64 + w.scc as u64;
            d32(w, i, t as u32, Some(t >> 32 != 0))
        }
        S_SUBB_U32 => {
            let (a, b, c) = (s0(w, i)? as u64, s1(w, i)? as u64, w.scc as u64);
            d32(
                w,
                i,
                a.wrapping_sub(b).wrapping_sub(c) as u32,
                Some(b + c > a),
            )
        }
        S_MIN_I32 => {
            let (a, b) = (s0(w, i)? as i32, s1(w, i)? as i32);
            d32(w, i, a.min(b) as u32, Some(a < b))
        }
        S_MIN_U32 => {
            let (a, b) = (s0(w, i)?, s1(w, i)?);
            d32(w, i, a.min(b), Some(a < b))
        }
        S_MAX_I32 => {
            let (a, b) = (s0(w, i)? as i32, s1(w, i)? as i32);
            d32(w, i, a.max(b) as u32, Some(a >= b))
        }
        S_MAX_U32 => {
            let (a, b) = (s0(w, i)?, s1(w, i)?);
            d32(w, i, a.max(b), Some(a >= b))
        }
        S_CSELECT_B32 => {
            let v = if w.scc { s0(w, i)? } else { s1(w, i)? };
            d32(w, i, v, None)
        }
        S_CSELECT_B64 => {
            let v = if w.scc { s0_64(w, i)? } else { s1_64(w, i)? };
            d64(w, i, v, None)
        }
        S_AND_B32 | S_OR_B32 | S_XOR_B32 | S_ANDN2_B32 | S_ORN2_B32 | S_NAND_B32 | S_NOR_B32
        | S_XNOR_B32 => {
            let (a, b) = (s0(w, i)?, s1(w, i)?);
            let r = match i.op {
                S_AND_B32 => a & b,
                S_OR_B32 => a | b,
                S_XOR_B32 => a ^ b,
                S_ANDN2_B32 => a & !b,
                S_ORN2_B32 => a | !b,
                S_NAND_B32 => !(a & b),
                S_NOR_B32 => !(a | b),
                _ => !(a ^ b),
            };
            d32(w, i, r, Some(r != 0))
        }
        S_AND_B64 | S_OR_B64 | S_XOR_B64 | S_ANDN2_B64 | S_ORN2_B64 | S_NAND_B64 | S_NOR_B64
        | S_XNOR_B64 => {
            let (a, b) = (s0_64(w, i)?, s1_64(w, i)?);
            let r = match i.op {
                S_AND_B64 => a & b,
                S_OR_B64 => a | b,
                S_XOR_B64 => a ^ b,
                S_ANDN2_B64 => a & !b,
                S_ORN2_B64 => a | !b,
                S_NAND_B64 => !(a & b),
                S_NOR_B64 => !(a | b),
                _ => !(a ^ b),
            };
            d64(w, i, r, Some(r != 0))
        }
        S_LSHL_B32 => {
            let r = s0(w, i)? << (s1(w, i)? & 31);
            d32(w, i, r, Some(r != 0))
        }
        S_LSHR_B32 => {
            let r = s0(w, i)? >> (s1(w, i)? & 31);
            d32(w, i, r, Some(r != 0))
        }
        S_ASHR_I32 => {
            let r = ((s0(w, i)? as i32) >> (s1(w, i)? & 31)) as u32;
            d32(w, i, r, Some(r != 0))
        }
        S_LSHL_B64 => {
            let r = s0_64(w, i)? << (s1(w, i)? & 63);
            d64(w, i, r, Some(r != 0))
        }
        S_LSHR_B64 => {
            let r = s0_64(w, i)? >> (s1(w, i)? & 63);
            d64(w, i, r, Some(r != 0))
        }
        S_ASHR_I64 => {
            let r = ((s0_64(w, i)? as i64) >> (s1(w, i)? & 63)) as u64;
            d64(w, i, r, Some(r != 0))
        }
        S_BFM_B32 => {
            let (a, b) = (s0(w, i)? & 31, s1(w, i)? & 31);
            d32(w, i, ((1u32 << a).wrapping_sub(1)) << b, None)
        }
        S_BFM_B64 => {
            let (a, b) = (s0(w, i)? & 63, s1(w, i)? & 63);
            d64(w, i, ((1u64 << a).wrapping_sub(1)) << b, None)
        }
        S_MUL_I32 => {
            let r = (s0(w, i)? as i32).wrapping_mul(s1(w, i)? as i32);
            d32(w, i, r as u32, None)
        }
        S_MUL_HI_U32 => d32(w, i, alu::mul_hi_u32(s0(w, i)?, s1(w, i)?), None),
        S_MUL_HI_I32 => d32(w, i, alu::mul_hi_i32(s0(w, i)?, s1(w, i)?), None),
        S_BFE_U32 | S_BFE_I32 => {
            let (x, c) = (s0(w, i)?, s1(w, i)?);
            let (off, width) = (c & 31, (c >> 16) & 0x7f);
            let r = if i.op == S_BFE_U32 {
                alu::bfe_u32(x, off, width)
            } else {
                alu::bfe_i32(x, off, width)
            };
            d32(w, i, r, Some(r != 0))
        }
        S_BFE_U64 | S_BFE_I64 => {
            let (x, c) = (s0_64(w, i)?, s1(w, i)?);
            let r = alu::bfe_64(x, c & 63, (c >> 16) & 0x7f, i.op == S_BFE_I64);
            d64(w, i, r, Some(r != 0))
        }
        S_ABSDIFF_I32 => {
            // The 32-bit difference wraps first, then takes its absolute value.
            let d = (s0(w, i)? as i32).wrapping_sub(s1(w, i)? as i32);
            let r = d.wrapping_abs() as u32;
            d32(w, i, r, Some(r != 0))
        }
        S_LSHL1_ADD_U32 | S_LSHL2_ADD_U32 | S_LSHL3_ADD_U32 | S_LSHL4_ADD_U32 => {
            let n = match i.op {
                S_LSHL1_ADD_U32 => 1,
                S_LSHL2_ADD_U32 => 2,
                S_LSHL3_ADD_U32 => 3,
                _ => 4,
            };
            let t = ((s0(w, i)? as u64) << n) + s1(w, i)? as u64;
            d32(w, i, t as u32, Some(t >> 32 != 0))
        }
        S_PACK_LL_B32_B16 => d32(w, i, (s0(w, i)? & 0xffff) | (s1(w, i)? << 16), None),
        S_PACK_LH_B32_B16 => d32(w, i, (s0(w, i)? & 0xffff) | (s1(w, i)? & 0xffff_0000), None),
        S_PACK_HH_B32_B16 => d32(w, i, (s0(w, i)? >> 16) | (s1(w, i)? & 0xffff_0000), None),

        // ---- SOPK ----
        S_MOVK_I32 => d32(w, i, simm16(i) as i16 as i32 as u32, None),
        S_CMOVK_I32 => {
            if w.scc {
                d32(w, i, simm16(i) as i16 as i32 as u32, None)
            } else {
                Ok(Flow::Next)
            }
        }
        S_CMPK_EQ_I32 | S_CMPK_LG_I32 | S_CMPK_GT_I32 | S_CMPK_GE_I32 | S_CMPK_LT_I32
        | S_CMPK_LE_I32 => {
            let a = read_s32(w, i.operand(Role::Sdst), ValueType::B32)? as i32;
            let b = simm16(i) as i16 as i32;
            w.scc = match i.op {
                S_CMPK_EQ_I32 => a == b,
                S_CMPK_LG_I32 => a != b,
                S_CMPK_GT_I32 => a > b,
                S_CMPK_GE_I32 => a >= b,
                S_CMPK_LT_I32 => a < b,
                _ => a <= b,
            };
            Ok(Flow::Next)
        }
        S_CMPK_EQ_U32 | S_CMPK_LG_U32 | S_CMPK_GT_U32 | S_CMPK_GE_U32 | S_CMPK_LT_U32
        | S_CMPK_LE_U32 => {
            let a = read_s32(w, i.operand(Role::Sdst), ValueType::B32)?;
            let b = simm16(i) as u32;
            w.scc = match i.op {
                S_CMPK_EQ_U32 => a == b,
                S_CMPK_LG_U32 => a != b,
                S_CMPK_GT_U32 => a > b,
                S_CMPK_GE_U32 => a >= b,
                S_CMPK_LT_U32 => a < b,
                _ => a <= b,
            };
            Ok(Flow::Next)
        }
        S_ADDK_I32 => {
            let a = read_s32(w, i.operand(Role::Sdst), ValueType::B32)? as i32;
            let (r, o) = a.overflowing_add(simm16(i) as i16 as i32);
            d32(w, i, r as u32, Some(o))
        }
        S_MULK_I32 => {
            let a = read_s32(w, i.operand(Role::Sdst), ValueType::B32)? as i32;
            d32(w, i, a.wrapping_mul(simm16(i) as i16 as i32) as u32, None)
        }
        S_GETREG_B32 => {
            let v = getreg(w, i, simm16(i))?;
            d32(w, i, v, None)
        }
        S_SETREG_B32 => {
            let data = read_s32(w, i.operand(Role::Sdst), ValueType::B32)?;
            setreg(w, i, simm16(i), data)?;
            Ok(Flow::Next)
        }
        S_SETREG_IMM32_B32 => {
            let data = match i.operand(Role::K) {
                Operand::Literal(v) | Operand::Imm(v) => v,
                _ => return Err(unimpl(i, "missing 32-bit immediate")),
            };
            setreg(w, i, simm16(i), data)?;
            Ok(Flow::Next)
        }
        S_CALL_B64 => {
            write_s64(w, i.operand(Role::Sdst), next)?;
            branch(i)
        }

        // ---- SOP1 ----
        S_MOV_B32 => d32(w, i, s0(w, i)?, None),
        S_MOV_B64 => d64(w, i, s0_64(w, i)?, None),
        S_CMOV_B32 => {
            if w.scc {
                d32(w, i, s0(w, i)?, None)
            } else {
                Ok(Flow::Next)
            }
        }
        S_CMOV_B64 => {
            if w.scc {
                d64(w, i, s0_64(w, i)?, None)
            } else {
                Ok(Flow::Next)
            }
        }
        S_NOT_B32 => {
            let r = !s0(w, i)?;
            d32(w, i, r, Some(r != 0))
        }
        S_NOT_B64 => {
            let r = !s0_64(w, i)?;
            d64(w, i, r, Some(r != 0))
        }
        S_WQM_B32 | S_WQM_B64 => {
            let x = if i.op == S_WQM_B32 {
                s0(w, i)? as u64
            } else {
                s0_64(w, i)?
            };
            let mut r = 0u64;
            for q in 0..16 {
                if (x >> (4 * q)) & 0xf != 0 {
                    r |= 0xf << (4 * q);
                }
            }
            if i.op == S_WQM_B32 {
                d32(w, i, r as u32, Some(r as u32 != 0))
            } else {
                d64(w, i, r, Some(r != 0))
            }
        }
        S_BREV_B32 => d32(w, i, s0(w, i)?.reverse_bits(), None),
        S_BREV_B64 => d64(w, i, s0_64(w, i)?.reverse_bits(), None),
        S_BCNT0_I32_B32 => {
            let r = s0(w, i)?.count_zeros();
            d32(w, i, r, Some(r != 0))
        }
        S_BCNT0_I32_B64 => {
            let r = s0_64(w, i)?.count_zeros();
            d32(w, i, r, Some(r != 0))
        }
        S_BCNT1_I32_B32 => {
            let r = s0(w, i)?.count_ones();
            d32(w, i, r, Some(r != 0))
        }
        S_BCNT1_I32_B64 => {
            let r = s0_64(w, i)?.count_ones();
            d32(w, i, r, Some(r != 0))
        }
        S_FF0_I32_B32 => d32(w, i, alu::ffbl_b32(!s0(w, i)?), None),
        S_FF1_I32_B32 => d32(w, i, alu::ffbl_b32(s0(w, i)?), None),
        S_FF0_I32_B64 | S_FF1_I32_B64 => {
            let mut x = s0_64(w, i)?;
            if i.op == S_FF0_I32_B64 {
                x = !x;
            }
            d32(
                w,
                i,
                if x == 0 { u32::MAX } else { x.trailing_zeros() },
                None,
            )
        }
        S_FLBIT_I32_B32 => d32(w, i, alu::ffbh_u32(s0(w, i)?), None),
        S_FLBIT_I32_B64 => {
            let x = s0_64(w, i)?;
            d32(
                w,
                i,
                if x == 0 { u32::MAX } else { x.leading_zeros() },
                None,
            )
        }
        S_FLBIT_I32 => d32(w, i, alu::ffbh_i32(s0(w, i)?), None),
        S_FLBIT_I32_I64 => {
            let x = s0_64(w, i)?;
            let y = if (x as i64) < 0 { !x } else { x };
            d32(
                w,
                i,
                if y == 0 {
                    u32::MAX
                } else {
                    y.leading_zeros() - 1
                },
                None,
            )
        }
        S_SEXT_I32_I8 => d32(w, i, s0(w, i)? as u8 as i8 as i32 as u32, None),
        S_SEXT_I32_I16 => d32(w, i, s0(w, i)? as u16 as i16 as i32 as u32, None),
        S_BITSET0_B32 | S_BITSET1_B32 => {
            let bit = s0(w, i)? & 31;
            let old = read_s32(w, i.operand(Role::Sdst), ValueType::B32)?;
            let r = if i.op == S_BITSET1_B32 {
                old | (1 << bit)
            } else {
                old & !(1 << bit)
            };
            d32(w, i, r, None)
        }
        S_BITSET0_B64 | S_BITSET1_B64 => {
            let bit = s0(w, i)? & 63;
            let old = read_s64(w, i.operand(Role::Sdst), ValueType::I64)?;
            let r = if i.op == S_BITSET1_B64 {
                old | (1 << bit)
            } else {
                old & !(1 << bit)
            };
            d64(w, i, r, None)
        }
        S_GETPC_B64 => d64(w, i, next, None),
        S_SETPC_B64 => Ok(Flow::Jump(s0_64(w, i)?)),
        S_SWAPPC_B64 => {
            let target = s0_64(w, i)?;
            write_s64(w, i.operand(Role::Sdst), next)?;
            Ok(Flow::Jump(target))
        }
        S_AND_SAVEEXEC_B64 | S_OR_SAVEEXEC_B64 | S_XOR_SAVEEXEC_B64 | S_ANDN2_SAVEEXEC_B64
        | S_ORN2_SAVEEXEC_B64 | S_NAND_SAVEEXEC_B64 | S_NOR_SAVEEXEC_B64 | S_XNOR_SAVEEXEC_B64
        | S_ANDN1_SAVEEXEC_B64 | S_ORN1_SAVEEXEC_B64 => {
            let (s, e) = (s0_64(w, i)?, w.exec());
            let new = match i.op {
                S_AND_SAVEEXEC_B64 => s & e,
                S_OR_SAVEEXEC_B64 => s | e,
                S_XOR_SAVEEXEC_B64 => s ^ e,
                S_ANDN2_SAVEEXEC_B64 => s & !e,
                S_ORN2_SAVEEXEC_B64 => s | !e,
                S_NAND_SAVEEXEC_B64 => !(s & e),
                S_NOR_SAVEEXEC_B64 => !(s | e),
                S_XNOR_SAVEEXEC_B64 => !(s ^ e),
                S_ANDN1_SAVEEXEC_B64 => !s & e,
                _ => !s | e,
            };
            // The old EXEC goes to the destination before EXEC changes (the destination may
            // itself be EXEC only in degenerate code).
            write_s64(w, i.operand(Role::Sdst), e)?;
            w.set_exec(new);
            w.scc = new != 0;
            Ok(Flow::Next)
        }
        S_ANDN1_WREXEC_B64 | S_ANDN2_WREXEC_B64 => {
            let (s, e) = (s0_64(w, i)?, w.exec());
            let new = if i.op == S_ANDN1_WREXEC_B64 {
                !s & e
            } else {
                s & !e
            };
            w.set_exec(new);
            write_s64(w, i.operand(Role::Sdst), new)?;
            w.scc = new != 0;
            Ok(Flow::Next)
        }
        S_QUADMASK_B32 | S_QUADMASK_B64 => {
            let x = if i.op == S_QUADMASK_B32 {
                s0(w, i)? as u64
            } else {
                s0_64(w, i)?
            };
            let mut r = 0u64;
            for q in 0..16 {
                if (x >> (4 * q)) & 0xf != 0 {
                    r |= 1 << q;
                }
            }
            if i.op == S_QUADMASK_B32 {
                d32(w, i, r as u32, Some(r != 0))
            } else {
                d64(w, i, r, Some(r != 0))
            }
        }
        S_MOVRELS_B32 | S_MOVRELS_B64 => {
            let n = if i.op == S_MOVRELS_B32 { 1 } else { 2 };
            let base = i
                .operand(Role::Src0)
                .scalar_code()
                .ok_or_else(|| unimpl(i, "non-register source"))?;
            let idx = base as usize + w.m0() as usize;
            let vals = rel_read(w, i, idx, n)?;
            write_sregs(w, i.operand(Role::Sdst), &vals)?;
            Ok(Flow::Next)
        }
        S_MOVRELD_B32 | S_MOVRELD_B64 => {
            let n = if i.op == S_MOVRELD_B32 { 1 } else { 2 };
            let vals = read_sregs(w, i.operand(Role::Src0), n)?;
            let base = i
                .operand(Role::Sdst)
                .scalar_code()
                .ok_or_else(|| unimpl(i, "non-register destination"))?;
            let idx = base as usize + w.m0() as usize;
            if idx + n > 102 {
                return Err(FaultKind::BadRegister(format!("s{idx} (relative to m0)")));
            }
            w.sgpr[idx..idx + n].copy_from_slice(&vals);
            Ok(Flow::Next)
        }
        S_ABS_I32 => {
            let r = (s0(w, i)? as i32).wrapping_abs() as u32;
            d32(w, i, r, Some(r != 0))
        }
        S_BITREPLICATE_B64_B32 => {
            let x = s0(w, i)?;
            let mut r = 0u64;
            for b in 0..32 {
                if x >> b & 1 != 0 {
                    r |= 3 << (2 * b);
                }
            }
            d64(w, i, r, None)
        }

        // ---- SOPC ----
        S_CMP_EQ_I32 | S_CMP_LG_I32 | S_CMP_GT_I32 | S_CMP_GE_I32 | S_CMP_LT_I32 | S_CMP_LE_I32 => {
            let (a, b) = (s0(w, i)? as i32, s1(w, i)? as i32);
            w.scc = match i.op {
                S_CMP_EQ_I32 => a == b,
                S_CMP_LG_I32 => a != b,
                S_CMP_GT_I32 => a > b,
                S_CMP_GE_I32 => a >= b,
                S_CMP_LT_I32 => a < b,
                _ => a <= b,
            };
            Ok(Flow::Next)
        }
        S_CMP_EQ_U32 | S_CMP_LG_U32 | S_CMP_GT_U32 | S_CMP_GE_U32 | S_CMP_LT_U32 | S_CMP_LE_U32 => {
            let (a, b) = (s0(w, i)?, s1(w, i)?);
            w.scc = match i.op {
                S_CMP_EQ_U32 => a == b,
                S_CMP_LG_U32 => a != b,
                S_CMP_GT_U32 => a > b,
                S_CMP_GE_U32 => a >= b,
                S_CMP_LT_U32 => a < b,
                _ => a <= b,
            };
            Ok(Flow::Next)
        }
        S_CMP_EQ_U64 => {
            w.scc = s0_64(w, i)? == s1_64(w, i)?;
            Ok(Flow::Next)
        }
        S_CMP_LG_U64 => {
            w.scc = s0_64(w, i)? != s1_64(w, i)?;
            Ok(Flow::Next)
        }
        S_BITCMP0_B32 | S_BITCMP1_B32 => {
            let bit = s0(w, i)? >> (s1(w, i)? & 31) & 1;
            w.scc = (bit == 1) == (i.op == S_BITCMP1_B32);
            Ok(Flow::Next)
        }
        S_BITCMP0_B64 | S_BITCMP1_B64 => {
            let bit = s0_64(w, i)? >> (s1(w, i)? & 63) & 1;
            w.scc = (bit == 1) == (i.op == S_BITCMP1_B64);
            Ok(Flow::Next)
        }

        // ---- SOPP ----
        // A sleeping wave gives the SIMD to its siblings: a spin-wait loop (which compilers
        // write with s_sleep) lets the wave it waits for make progress.
        S_SLEEP => Ok(Flow::Yield),
        S_NOP | S_WAITCNT | S_SETPRIO | S_INCPERFLEVEL | S_DECPERFLEVEL | S_SETKILL | S_SENDMSG => {
            // Ordering, priority and performance hints: the emulator executes each wave's
            // instructions to completion in order, so these have nothing left to do.
            // s_sendmsg only talks to the graphics pipeline and the debugger.
            Ok(Flow::Next)
        }
        S_ENDPGM => Ok(Flow::End),
        S_BARRIER => Ok(Flow::Barrier),
        S_BRANCH => branch(i),
        S_CBRANCH_SCC0 => cond(i, !w.scc),
        S_CBRANCH_SCC1 => cond(i, w.scc),
        S_CBRANCH_VCCZ => cond(i, w.vcc() == 0),
        S_CBRANCH_VCCNZ => cond(i, w.vcc() != 0),
        S_CBRANCH_EXECZ => cond(i, w.exec() == 0),
        S_CBRANCH_EXECNZ => cond(i, w.exec() != 0),
        // The debug-flag branches are taken only when a debugger sets the flags.
        S_CBRANCH_CDBGSYS
        | S_CBRANCH_CDBGUSER
        | S_CBRANCH_CDBGSYS_OR_USER
        | S_CBRANCH_CDBGSYS_AND_USER => Ok(Flow::Next),
        S_TRAP => Err(FaultKind::Trap {
            code: simm16(i) & 0xff,
        }),
        _ => Err(unimpl(i, "")),
    }
}

fn rel_read(w: &Wave, i: &Inst, idx: usize, n: usize) -> Result<Vec<u32>, FaultKind> {
    if idx + n > 102 {
        return Err(FaultKind::BadRegister(format!(
            "s{idx} (relative to m0) in {}",
            i.mnemonic()
        )));
    }
    Ok(w.sgpr[idx..idx + n].to_vec())
}

fn branch(i: &Inst) -> Result<Flow, FaultKind> {
    i.branch_target
        .map(Flow::Jump)
        .ok_or_else(|| FaultKind::Illegal(format!("{} without a branch target", i.mnemonic())))
}

fn cond(i: &Inst, take: bool) -> Result<Flow, FaultKind> {
    if take { branch(i) } else { Ok(Flow::Next) }
}

/// Executes an SMEM instruction.
///
/// Address (CDNA ISA 8.2.1.1): `sbase + offset`, where the offset is the immediate when
/// `imm` is set, else the SGPR the offset field names, plus the SGPR in `soffset` when `soe`
/// is set; the two low address bits are ignored. Buffer forms use the V# base, and each dword
/// at or beyond `num_records` (times the stride when it is non-zero) reads as zero / is not
/// written.
pub fn smem(env: &mut Env<'_>, w: &mut Wave, i: &Inst) -> Result<Flow, FaultKind> {
    use Opcode::*;
    let n = match i.op {
        S_LOAD_DWORD | S_BUFFER_LOAD_DWORD | S_STORE_DWORD | S_BUFFER_STORE_DWORD => 1,
        S_LOAD_DWORDX2 | S_BUFFER_LOAD_DWORDX2 | S_STORE_DWORDX2 | S_BUFFER_STORE_DWORDX2 => 2,
        S_LOAD_DWORDX4 | S_BUFFER_LOAD_DWORDX4 | S_STORE_DWORDX4 | S_BUFFER_STORE_DWORDX4 => 4,
        S_LOAD_DWORDX8 | S_BUFFER_LOAD_DWORDX8 => 8,
        S_LOAD_DWORDX16 | S_BUFFER_LOAD_DWORDX16 => 16,
        S_DCACHE_INV | S_DCACHE_WB | S_DCACHE_INV_VOL | S_DCACHE_WB_VOL | S_ATC_PROBE
        | S_ATC_PROBE_BUFFER | S_DCACHE_DISCARD | S_DCACHE_DISCARD_X2 => {
            // Cache maintenance: the emulator has no caches.
            return Ok(Flow::Next);
        }
        S_MEMTIME | S_MEMREALTIME => {
            // A deterministic clock: the wave's executed-instruction count.
            write_s64(w, i.operand(Role::Sdata), w.executed)?;
            return Ok(Flow::Next);
        }
        _ => return Err(unimpl(i, "")),
    };
    let mut offset = match i.operand(Role::Offset) {
        // The immediate is a 21-bit signed byte offset.
        Operand::Imm(_) => i.mem.offset as i64 as u64,
        Operand::None => 0,
        op => read_s32(w, op, ValueType::B32)? as u64,
    };
    if i.mem.smem_soe {
        offset = offset.wrapping_add(read_s32(w, i.operand(Role::Soffset), ValueType::B32)? as u64);
    }
    let buffer = matches!(
        i.op,
        S_BUFFER_LOAD_DWORD
            | S_BUFFER_LOAD_DWORDX2
            | S_BUFFER_LOAD_DWORDX4
            | S_BUFFER_LOAD_DWORDX8
            | S_BUFFER_LOAD_DWORDX16
            | S_BUFFER_STORE_DWORD
            | S_BUFFER_STORE_DWORDX2
            | S_BUFFER_STORE_DWORDX4
    );
    let store = matches!(
        i.op,
        S_STORE_DWORD
            | S_STORE_DWORDX2
            | S_STORE_DWORDX4
            | S_BUFFER_STORE_DWORD
            | S_BUFFER_STORE_DWORDX2
            | S_BUFFER_STORE_DWORDX4
    );
    let sbase = i.operand(Role::Sbase);
    let (base, limit) = if buffer {
        let words = read_sregs(w, sbase, 4)?;
        let r = BufferResource::from_words([words[0], words[1], words[2], words[3]]);
        let limit = if r.stride == 0 {
            r.num_records as u64
        } else {
            r.num_records as u64 * r.stride as u64
        };
        // Buffer offsets are unsigned 32-bit byte offsets.
        offset &= 0xffff_ffff;
        (r.base, Some(limit))
    } else {
        (read_s64(w, sbase, ValueType::I64)?, None)
    };
    let addr = base.wrapping_add(offset) & !3;
    let in_range = |k: usize| limit.is_none_or(|l| (offset & !3) + 4 * k as u64 + 4 <= l);
    if store {
        let vals = read_sregs(w, i.operand(Role::Sdata), n)?;
        for (k, v) in vals.iter().enumerate() {
            if in_range(k) && !super::vmem::discards(env) {
                env.mem.write_u32(addr + 4 * k as u64, *v)?;
            }
        }
    } else {
        let mut vals = vec![0u32; n];
        if limit.is_none() {
            let mut bytes = vec![0u8; 4 * n];
            env.mem.read(addr, &mut bytes)?;
            for (k, v) in vals.iter_mut().enumerate() {
                *v = u32::from_le_bytes([
                    bytes[4 * k],
                    bytes[4 * k + 1],
                    bytes[4 * k + 2],
                    bytes[4 * k + 3],
                ]);
            }
        } else {
            for (k, v) in vals.iter_mut().enumerate() {
                if in_range(k) {
                    *v = env.mem.read_u32(addr + 4 * k as u64)?;
                }
            }
        }
        let dst = i.operand(Role::Sdata);
        // Writing past s101 would land in special registers; the ISA calls it out of range.
        if let Some(first) = sindex(&dst, 0)?
            && first < sreg::FLAT_SCRATCH_LO as usize
            && first + n > sreg::FLAT_SCRATCH_LO as usize
        {
            return Err(FaultKind::BadRegister(format!("{dst:?}")));
        }
        write_sregs(w, dst, &vals)?;
    }
    Ok(Flow::Next)
}

#[cfg(test)]
mod tests {
    use crate::exec::testutil::Harness;

    /// Results and SCC after each instruction, derived from the ISA definitions.
    #[test]
    fn sop_arithmetic_and_scc() {
        let mut h = Harness::new(&[
            0x80020100, // s_add_u32 s2, s0, s1
            0x82030504, // s_addc_u32 s3, s4, s5
            0x80860100, // s_sub_u32 s6, s0, s1
            0x81070908, // s_add_i32 s7, s8, s9
            0x838a0b0b, // s_min_u32 s10, s11, s11
            0x840c0b0b, // s_max_i32 s12, s11, s11
            0x850d0100, // s_cselect_b32 s13, s0, s1
            0x978e100f, // s_lshl2_add_u32 s14, s15, s16
            0x9291ff12, 0x00080008, // s_bfe_u32 s17, s18, 0x80008
            0x9313ff12, 0x00040010, // s_bfe_i32 s19, s18, 0x40010
            0x99940f12, // s_pack_lh_b32_b16 s20, s18, s15
            0x95151716, // s_absdiff_i32 s21, s22, s23
            0xbe981019, // s_ff1_i32_b32 s24, s25
            0xbe9a1219, // s_flbit_i32_b32 s26, s25
            0xbe9b0d1c, // s_bcnt1_i32_b64 s27, s[28:29]
            0xb01e8000, // s_movk_i32 s30, 0x8000
            0xb71f7fff, // s_addk_i32 s31, 0x7fff
            0xb31e0000, // s_cmpk_lt_i32 s30, 0x0
            0xbea01a85, // s_bitset1_b32 s32, 5
            0xbea12822, // s_quadmask_b32 s33, s34
        ]);
        let s = &mut h.w.sgpr;
        s[0] = 0xffff_fff0;
        s[1] = 0x20;
        s[4] = 0xffff_ffff;
        s[5] = 0;
        s[8] = 0x7fff_ffff;
        s[9] = 1;
        s[11] = 5;
        s[15] = 0x8000_0001;
        s[16] = 3;
        s[18] = 0x00ab_cd00;
        s[22] = 0x8000_0000;
        s[23] = 1;
        s[25] = 0x100;
        s[28] = 0xf0f0;
        s[29] = 1;
        s[31] = 0x7fff_ffff;
        s[32] = 1;
        s[34] = 0xf010;
        // (register, value, SCC) after each instruction.
        let expect: [(usize, u32, Option<bool>); 20] = [
            (2, 0x10, Some(true)),
            (3, 0, Some(true)),
            (6, 0xffff_ffd0, Some(false)),
            (7, 0x8000_0000, Some(true)),
            (10, 5, Some(false)),
            (12, 5, Some(true)),
            (13, 0xffff_fff0, None),
            (14, 7, Some(true)),
            (17, 0xcd, Some(true)),
            (19, 0xffff_fffb, Some(true)),
            (20, 0x8000_cd00, None),
            (21, 0x7fff_ffff, Some(true)),
            (24, 8, None),
            (26, 23, None),
            (27, 9, Some(true)),
            (30, 0xffff_8000, None),
            (31, 0x8000_7ffe, Some(true)),
            (30, 0xffff_8000, Some(true)),
            (32, 0x21, None),
            (33, 0xa, Some(true)),
        ];
        for (n, (reg, val, scc)) in expect.into_iter().enumerate() {
            h.step().unwrap();
            assert_eq!(h.w.sgpr[reg], val, "instruction {n}: s{reg}");
            if let Some(scc) = scc {
                assert_eq!(h.w.scc, scc, "instruction {n}: scc");
            }
        }
    }

    #[test]
    fn saveexec_branches_and_getpc() {
        let mut h = Harness::new(&[
            0xbe802002, // s_and_saveexec_b64 s[0:1], s[2:3]
            0xbf880002, // s_cbranch_execz 2
            0xbe840081, // s_mov_b32 s4, 1
            0xbf820001, // s_branch 1
            0xbe840082, // s_mov_b32 s4, 2
            0xbe861c00, // s_getpc_b64 s[6:7]
            0xbf138002, // s_cmp_lg_u64 s[2:3], 0
            0x858880c1, // s_cselect_b64 s[8:9], -1, 0
        ]);
        h.w.sgpr[2] = 0;
        h.w.sgpr[3] = 0;
        h.w.sgpr[8] = 7;
        let base = h.prog.entry();
        h.run().unwrap();
        assert_eq!(h.w.sgpr64(0), u64::MAX, "old EXEC saved");
        assert_eq!(h.w.exec(), 0);
        assert_eq!(h.w.sgpr[4], 2, "execz branch taken");
        assert_eq!(
            h.w.sgpr64(6),
            base + 6 * 4,
            "s_getpc returns the next instruction's address"
        );
        assert_eq!(h.w.sgpr64(8), 0);
    }

    #[test]
    fn smem_loads_and_buffer_range() {
        let mut h = Harness::new(&[
            0xc0060080, 0x00000008, // s_load_dwordx2 s[2:3], s[0:1], 0x8
            0xc0000100, 0x00000005, // s_load_dword s4, s[0:1], s5
            0xc02a0206, 0x00000008, // s_buffer_load_dwordx4 s[8:11], s[12:15], 0x8
        ]);
        let data: Vec<u8> = (0..64u8).collect();
        let base = h.mem.upload(&data).unwrap();
        h.w.set_sgpr64(0, base);
        h.w.sgpr[5] = 0x13; // the low two address bits are ignored: reads offset 0x10
        // V#: base, stride 0, num_records 20 bytes: dwords at 8 and 12 and 16 fit, 20 not.
        h.w.sgpr[12] = base as u32;
        h.w.sgpr[13] = (base >> 32) as u32;
        h.w.sgpr[14] = 20;
        h.w.sgpr[15] = 0;
        h.run().unwrap();
        let dw = |o: u32| u32::from_le_bytes([o as u8, o as u8 + 1, o as u8 + 2, o as u8 + 3]);
        assert_eq!(h.w.sgpr[2], dw(8));
        assert_eq!(h.w.sgpr[3], dw(12));
        assert_eq!(h.w.sgpr[4], dw(16));
        assert_eq!(&h.w.sgpr[8..12], &[dw(8), dw(12), dw(16), 0]);
    }

    #[test]
    fn smem_fault_names_the_address() {
        let mut h = Harness::new(&[
            0xc0060080, 0x00000008, // s_load_dwordx2 s[2:3], s[0:1], 0x8
        ]);
        h.w.set_sgpr64(0, 0x40);
        let e = h.run().unwrap_err();
        assert!(e.to_string().contains("0x48"), "{e}");
    }
}
