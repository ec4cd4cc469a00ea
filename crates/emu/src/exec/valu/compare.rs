//! VOPC and VOP3 compares (`v_cmp*`, `v_cmpx*`, `v_cmp_class_*`): a per-lane mask to VCC or an
//! SGPR pair, and to EXEC for `v_cmpx*`. What to compare comes from [`Opcode::compare`].
//!
//! [`Opcode::compare`]: crate::isa::Opcode::compare

use super::super::fault::FaultKind;
use super::super::fp;
use super::super::operands::read_v64;
use super::super::sem::compare::{class_bits16, class_bits32, class_bits64, fcmp, icmp};
use super::super::wave::Wave;
use super::*;
use crate::isa::{CmpPred, CmpType, Compare, Inst, Role};

/// Executes compare `c` (the facts of `i.op`).
pub(super) fn exec(w: &mut Wave, i: &Inst, c: Compare) -> Result<(), FaultKind> {
    let exec = w.exec();
    let class = c.pred == CmpPred::Class;
    let mut bits = 0u64;
    if c.ty.bits() == 64 {
        let a = read_v64(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
        if class {
            // The class mask is a 32-bit source even for f64.
            let m = fetch(w, i, 1)?;
            for l in 0..64 {
                let hit = class_bits64(fmods64(i, 0, f64::from_bits(a[l]))) & m[l] != 0;
                bits |= (hit as u64) << l;
            }
        } else {
            let b = read_v64(w, i.operand(Role::Src1), i.value_type(Role::Src1))?;
            for l in 0..64 {
                let r = match c.ty {
                    CmpType::I64 => icmp(c.pred, a[l] as i64, b[l] as i64),
                    CmpType::U64 => icmp(c.pred, a[l], b[l]),
                    _ => fcmp(
                        c.pred,
                        fmods64(i, 0, f64::from_bits(a[l])),
                        fmods64(i, 1, f64::from_bits(b[l])),
                    ),
                };
                bits |= (r as u64) << l;
            }
        }
    } else {
        let a = fetch(w, i, 0)?;
        let b = fetch(w, i, 1)?;
        for l in 0..64 {
            let r = match c.ty {
                CmpType::F32 if class => {
                    class_bits32(fmods(i, 0, f32::from_bits(a[l]))) & b[l] != 0
                }
                CmpType::F32 => fcmp(
                    c.pred,
                    fmods(i, 0, f32::from_bits(a[l])) as f64,
                    fmods(i, 1, f32::from_bits(b[l])) as f64,
                ),
                CmpType::F16 if class => {
                    let h = half(i, 0, a[l]);
                    let h = fp::f32_to_f16(fmods(i, 0, fp::f16_to_f32(h)));
                    class_bits16(h) & b[l] != 0
                }
                CmpType::F16 => fcmp(
                    c.pred,
                    fmods(i, 0, fp::f16_to_f32(half(i, 0, a[l]))) as f64,
                    fmods(i, 1, fp::f16_to_f32(half(i, 1, b[l]))) as f64,
                ),
                CmpType::I32 => icmp(c.pred, a[l] as i32, b[l] as i32),
                CmpType::I16 => icmp(c.pred, half(i, 0, a[l]) as i16, half(i, 1, b[l]) as i16),
                CmpType::U16 => icmp(c.pred, half(i, 0, a[l]), half(i, 1, b[l])),
                _ => icmp(c.pred, a[l], b[l]),
            };
            bits |= (r as u64) << l;
        }
    }
    bits &= exec;
    write_mask_dst(w, i.dst(), bits)?;
    if c.writes_exec {
        w.set_exec(bits);
    }
    Ok(())
}
