//! DS (LDS) instructions. Addresses are `VGPR[addr] + offset` (two-address forms scale
//! `offset0`/`offset1` by the element size, times 64 for the `st64` forms); accesses outside
//! the workgroup's LDS read 0 and drop writes (see [`Lds`]). gfx9 and later do not clamp DS
//! addresses with M0.

// Lane loops index several parallel per-lane arrays at once; an index reads clearer than
// zipped iterators there.
#![allow(clippy::needless_range_loop)]

use super::ds::{self, TransposeKind};
use super::fault::{FaultKind, unimpl};
use super::interp::Env;
use super::memory::Lds;
use super::mfma::Vgpr;
use super::operands::{read_v32, vreg, write_v32};
use super::stats::Counter;
use super::wave::Wave;
use crate::isa::{Inst, Opcode, Role, ValueType};

fn regs(w: &Wave, i: &Inst, role: Role, n: usize) -> Result<Vec<Vgpr>, FaultKind> {
    let op = i.operand(role);
    (0..n).map(|k| Ok(w.vgpr[vreg(&op, k)?])).collect()
}

/// Read-modify-write operations of the DS atomics (32-bit forms; the 64-bit forms use the
/// same names on u64).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rmw {
    Add,
    Sub,
    Rsub,
    Inc,
    Dec,
    MinI,
    MaxI,
    MinU,
    MaxU,
    And,
    Or,
    Xor,
    Mskor,
    Xchg,
    Cmpst,
    CmpstF,
    MinF,
    MaxF,
    AddF,
    PkAddF16,
    PkAddBf16,
}

pub(crate) fn rmw32(op: Rmw, old: u32, d0: u32, d1: u32) -> u32 {
    let f = f32::from_bits;
    match op {
        Rmw::Add => old.wrapping_add(d0),
        Rmw::Sub => old.wrapping_sub(d0),
        Rmw::Rsub => d0.wrapping_sub(old),
        Rmw::Inc => {
            if old >= d0 {
                0
            } else {
                old + 1
            }
        }
        Rmw::Dec => {
            if old == 0 || old > d0 {
                d0
            } else {
                old - 1
            }
        }
        Rmw::MinI => (old as i32).min(d0 as i32) as u32,
        Rmw::MaxI => (old as i32).max(d0 as i32) as u32,
        Rmw::MinU => old.min(d0),
        Rmw::MaxU => old.max(d0),
        Rmw::And => old & d0,
        Rmw::Or => old | d0,
        Rmw::Xor => old ^ d0,
        Rmw::Mskor => (old & !d0) | d1,
        Rmw::Xchg => d0,
        // ds_cmpst: DATA0 is the value stored, DATA1 the one compared against.
        Rmw::Cmpst => {
            if old == d1 {
                d0
            } else {
                old
            }
        }
        Rmw::CmpstF => {
            if f(old) == f(d1) {
                d0
            } else {
                old
            }
        }
        Rmw::MinF => super::alu::minmax_f32(f(old), f(d0), false, true).to_bits(),
        Rmw::MaxF => super::alu::minmax_f32(f(old), f(d0), true, true).to_bits(),
        Rmw::AddF => (f(old) + f(d0)).to_bits(),
        Rmw::PkAddF16 => {
            let h = |x: u32, k: u32| super::fp::f16_to_f32((x >> (16 * k)) as u16);
            super::fp::f32_to_f16(h(old, 0) + h(d0, 0)) as u32
                | ((super::fp::f32_to_f16(h(old, 1) + h(d0, 1)) as u32) << 16)
        }
        Rmw::PkAddBf16 => {
            let h = |x: u32, k: u32| super::fp::bf16_to_f32((x >> (16 * k)) as u16);
            super::fp::f32_to_bf16(h(old, 0) + h(d0, 0)) as u32
                | ((super::fp::f32_to_bf16(h(old, 1) + h(d0, 1)) as u32) << 16)
        }
    }
}

pub(crate) fn rmw64(op: Rmw, old: u64, d0: u64, d1: u64) -> u64 {
    let f = f64::from_bits;
    match op {
        Rmw::Add => old.wrapping_add(d0),
        Rmw::Sub => old.wrapping_sub(d0),
        Rmw::Rsub => d0.wrapping_sub(old),
        Rmw::Inc => {
            if old >= d0 {
                0
            } else {
                old + 1
            }
        }
        Rmw::Dec => {
            if old == 0 || old > d0 {
                d0
            } else {
                old - 1
            }
        }
        Rmw::MinI => (old as i64).min(d0 as i64) as u64,
        Rmw::MaxI => (old as i64).max(d0 as i64) as u64,
        Rmw::MinU => old.min(d0),
        Rmw::MaxU => old.max(d0),
        Rmw::And => old & d0,
        Rmw::Or => old | d0,
        Rmw::Xor => old ^ d0,
        Rmw::Mskor => (old & !d0) | d1,
        Rmw::Xchg => d0,
        Rmw::Cmpst => {
            if old == d1 {
                d0
            } else {
                old
            }
        }
        Rmw::CmpstF => {
            if f(old) == f(d1) {
                d0
            } else {
                old
            }
        }
        Rmw::MinF => super::alu::minmax_f64(f(old), f(d0), false, true).to_bits(),
        Rmw::MaxF => super::alu::minmax_f64(f(old), f(d0), true, true).to_bits(),
        Rmw::AddF => (f(old) + f(d0)).to_bits(),
        Rmw::PkAddF16 | Rmw::PkAddBf16 => old,
    }
}

/// (operation, 64-bit, returns the old value) of a DS atomic.
fn atomic_kind(op: Opcode) -> Option<(Rmw, bool, bool)> {
    use Opcode::*;
    Some(match op {
        DS_ADD_U32 => (Rmw::Add, false, false),
        DS_SUB_U32 => (Rmw::Sub, false, false),
        DS_RSUB_U32 => (Rmw::Rsub, false, false),
        DS_INC_U32 => (Rmw::Inc, false, false),
        DS_DEC_U32 => (Rmw::Dec, false, false),
        DS_MIN_I32 => (Rmw::MinI, false, false),
        DS_MAX_I32 => (Rmw::MaxI, false, false),
        DS_MIN_U32 => (Rmw::MinU, false, false),
        DS_MAX_U32 => (Rmw::MaxU, false, false),
        DS_AND_B32 => (Rmw::And, false, false),
        DS_OR_B32 => (Rmw::Or, false, false),
        DS_XOR_B32 => (Rmw::Xor, false, false),
        DS_MSKOR_B32 => (Rmw::Mskor, false, false),
        DS_CMPST_B32 => (Rmw::Cmpst, false, false),
        DS_CMPST_F32 => (Rmw::CmpstF, false, false),
        DS_MIN_F32 => (Rmw::MinF, false, false),
        DS_MAX_F32 => (Rmw::MaxF, false, false),
        DS_ADD_F32 => (Rmw::AddF, false, false),
        DS_PK_ADD_F16 => (Rmw::PkAddF16, false, false),
        DS_PK_ADD_BF16 => (Rmw::PkAddBf16, false, false),
        DS_ADD_RTN_U32 => (Rmw::Add, false, true),
        DS_SUB_RTN_U32 => (Rmw::Sub, false, true),
        DS_RSUB_RTN_U32 => (Rmw::Rsub, false, true),
        DS_INC_RTN_U32 => (Rmw::Inc, false, true),
        DS_DEC_RTN_U32 => (Rmw::Dec, false, true),
        DS_MIN_RTN_I32 => (Rmw::MinI, false, true),
        DS_MAX_RTN_I32 => (Rmw::MaxI, false, true),
        DS_MIN_RTN_U32 => (Rmw::MinU, false, true),
        DS_MAX_RTN_U32 => (Rmw::MaxU, false, true),
        DS_AND_RTN_B32 => (Rmw::And, false, true),
        DS_OR_RTN_B32 => (Rmw::Or, false, true),
        DS_XOR_RTN_B32 => (Rmw::Xor, false, true),
        DS_MSKOR_RTN_B32 => (Rmw::Mskor, false, true),
        DS_WRXCHG_RTN_B32 => (Rmw::Xchg, false, true),
        DS_CMPST_RTN_B32 => (Rmw::Cmpst, false, true),
        DS_CMPST_RTN_F32 => (Rmw::CmpstF, false, true),
        DS_MIN_RTN_F32 => (Rmw::MinF, false, true),
        DS_MAX_RTN_F32 => (Rmw::MaxF, false, true),
        DS_ADD_RTN_F32 => (Rmw::AddF, false, true),
        DS_PK_ADD_RTN_F16 => (Rmw::PkAddF16, false, true),
        DS_PK_ADD_RTN_BF16 => (Rmw::PkAddBf16, false, true),
        DS_ADD_U64 => (Rmw::Add, true, false),
        DS_SUB_U64 => (Rmw::Sub, true, false),
        DS_RSUB_U64 => (Rmw::Rsub, true, false),
        DS_INC_U64 => (Rmw::Inc, true, false),
        DS_DEC_U64 => (Rmw::Dec, true, false),
        DS_MIN_I64 => (Rmw::MinI, true, false),
        DS_MAX_I64 => (Rmw::MaxI, true, false),
        DS_MIN_U64 => (Rmw::MinU, true, false),
        DS_MAX_U64 => (Rmw::MaxU, true, false),
        DS_AND_B64 => (Rmw::And, true, false),
        DS_OR_B64 => (Rmw::Or, true, false),
        DS_XOR_B64 => (Rmw::Xor, true, false),
        DS_MSKOR_B64 => (Rmw::Mskor, true, false),
        DS_CMPST_B64 => (Rmw::Cmpst, true, false),
        DS_CMPST_F64 => (Rmw::CmpstF, true, false),
        DS_MIN_F64 => (Rmw::MinF, true, false),
        DS_MAX_F64 => (Rmw::MaxF, true, false),
        DS_ADD_F64 => (Rmw::AddF, true, false),
        DS_ADD_RTN_U64 => (Rmw::Add, true, true),
        DS_SUB_RTN_U64 => (Rmw::Sub, true, true),
        DS_RSUB_RTN_U64 => (Rmw::Rsub, true, true),
        DS_INC_RTN_U64 => (Rmw::Inc, true, true),
        DS_DEC_RTN_U64 => (Rmw::Dec, true, true),
        DS_MIN_RTN_I64 => (Rmw::MinI, true, true),
        DS_MAX_RTN_I64 => (Rmw::MaxI, true, true),
        DS_MIN_RTN_U64 => (Rmw::MinU, true, true),
        DS_MAX_RTN_U64 => (Rmw::MaxU, true, true),
        DS_AND_RTN_B64 => (Rmw::And, true, true),
        DS_OR_RTN_B64 => (Rmw::Or, true, true),
        DS_XOR_RTN_B64 => (Rmw::Xor, true, true),
        DS_MSKOR_RTN_B64 => (Rmw::Mskor, true, true),
        DS_WRXCHG_RTN_B64 => (Rmw::Xchg, true, true),
        DS_CMPST_RTN_B64 => (Rmw::Cmpst, true, true),
        DS_CMPST_RTN_F64 => (Rmw::CmpstF, true, true),
        DS_MIN_RTN_F64 => (Rmw::MinF, true, true),
        DS_MAX_RTN_F64 => (Rmw::MaxF, true, true),
        DS_ADD_RTN_F64 => (Rmw::AddF, true, true),
        _ => return None,
    })
}

/// Executes a DS instruction.
pub fn exec(env: &mut Env<'_>, w: &mut Wave, lds: &mut Lds, i: &Inst) -> Result<(), FaultKind> {
    let exec = w.exec();
    if let Some(bytes) = plain_access_bytes(i.op)
        && let Ok(a) = read_v32(w, i.operand(Role::Addr), ValueType::B32)
    {
        let off = i.mem.offset as u16 as u64;
        env.stats[Counter::LdsBankConflictCycles] +=
            super::ds::lds_conflict_cycles(|l| a[l] as u64 + off, exec, bytes);
    }
    let before = lds.out_of_range;
    let r = exec_inner(w, lds, i, exec);
    env.stats[Counter::LdsOutOfRange] += lds.out_of_range - before;
    let _ = ValueType::B32;
    r
}

/// Bytes per lane of the single-address loads and stores, whose bank conflicts are counted.
fn plain_access_bytes(op: Opcode) -> Option<u32> {
    use Opcode::*;
    Some(match op {
        DS_READ_B32 | DS_WRITE_B32 => 4,
        DS_READ_B64 | DS_WRITE_B64 => 8,
        DS_READ_B96 | DS_WRITE_B96 => 12,
        DS_READ_B128 | DS_WRITE_B128 => 16,
        DS_READ_U16 | DS_READ_I16 | DS_WRITE_B16 => 2,
        DS_READ_U8 | DS_READ_I8 | DS_WRITE_B8 => 1,
        _ => return None,
    })
}

fn exec_inner(w: &mut Wave, lds: &mut Lds, i: &Inst, exec: u64) -> Result<(), FaultKind> {
    use Opcode::*;
    let active = |l: usize| exec >> l & 1 != 0;
    let addr_reg = |w: &Wave| read_v32(w, i.operand(Role::Addr), ValueType::B32);
    let off = i.mem.offset as u16 as u64;
    let lane_addr = |base: &Vgpr, l: usize| base[l] as u64 + off;

    // Plain loads and stores.
    let store = |w: &mut Wave, lds: &mut Lds, bytes: usize, shift: u32| -> Result<(), FaultKind> {
        let a = addr_reg(w)?;
        let d = regs(w, i, Role::Data0, bytes.div_ceil(4))?;
        for l in (0..64).filter(|&l| active(l)) {
            let mut buf = [0u8; 16];
            for k in 0..bytes.div_ceil(4) {
                buf[4 * k..4 * k + 4].copy_from_slice(&(d[k][l] >> shift).to_le_bytes());
            }
            lds.write(lane_addr(&a, l), &buf[..bytes]);
        }
        Ok(())
    };
    // The registers loaded, in a fixed array (at most four dwords a lane): the timing model
    // runs every LDS read through here, and a heap vector per access showed in its profile.
    let load =
        |w: &mut Wave, lds: &mut Lds, bytes: usize| -> Result<([Vgpr; 4], usize), FaultKind> {
            let a = addr_reg(w)?;
            let n = bytes.div_ceil(4);
            let mut out = [[0u32; 64]; 4];
            for l in (0..64).filter(|&l| active(l)) {
                let mut buf = [0u8; 16];
                lds.read(lane_addr(&a, l), &mut buf[..bytes]);
                for (k, o) in out[..n].iter_mut().enumerate() {
                    o[l] = u32::from_le_bytes([
                        buf[4 * k],
                        buf[4 * k + 1],
                        buf[4 * k + 2],
                        buf[4 * k + 3],
                    ]);
                }
            }
            Ok((out, n))
        };
    let put = |w: &mut Wave, vals: &[Vgpr]| -> Result<(), FaultKind> {
        for (k, v) in vals.iter().enumerate() {
            write_v32(w, i.dst(), k, exec, v)?;
        }
        Ok(())
    };

    match i.op {
        DS_WRITE_B8 => store(w, lds, 1, 0),
        DS_WRITE_B16 => store(w, lds, 2, 0),
        DS_WRITE_B32 => store(w, lds, 4, 0),
        DS_WRITE_B64 => store(w, lds, 8, 0),
        DS_WRITE_B96 => store(w, lds, 12, 0),
        DS_WRITE_B128 => store(w, lds, 16, 0),
        DS_WRITE_B8_D16_HI => store(w, lds, 1, 16),
        DS_WRITE_B16_D16_HI => store(w, lds, 2, 16),
        DS_READ_B32 => {
            let (v, n) = load(w, lds, 4)?;
            put(w, &v[..n])
        }
        DS_READ_B64 => {
            let (v, n) = load(w, lds, 8)?;
            put(w, &v[..n])
        }
        DS_READ_B96 => {
            let (v, n) = load(w, lds, 12)?;
            put(w, &v[..n])
        }
        DS_READ_B128 => {
            let (v, n) = load(w, lds, 16)?;
            put(w, &v[..n])
        }
        DS_READ_U8 | DS_READ_I8 | DS_READ_U16 | DS_READ_I16 => {
            let bytes = if matches!(i.op, DS_READ_U8 | DS_READ_I8) {
                1
            } else {
                2
            };
            let (mut v, n) = load(w, lds, bytes)?;
            for x in v[0].iter_mut() {
                *x = match i.op {
                    DS_READ_U8 => *x & 0xff,
                    DS_READ_I8 => *x as u8 as i8 as i32 as u32,
                    DS_READ_U16 => *x & 0xffff,
                    _ => *x as u16 as i16 as i32 as u32,
                };
            }
            put(w, &v[..n])
        }
        DS_READ_U8_D16 | DS_READ_U8_D16_HI | DS_READ_I8_D16 | DS_READ_I8_D16_HI
        | DS_READ_U16_D16 | DS_READ_U16_D16_HI => {
            // Load into one half of the destination, keeping the other half.
            let bytes = if matches!(i.op, DS_READ_U16_D16 | DS_READ_U16_D16_HI) {
                2
            } else {
                1
            };
            let (v, _) = load(w, lds, bytes)?;
            let old = w.vgpr[vreg(&i.dst(), 0)?];
            let hi = matches!(
                i.op,
                DS_READ_U8_D16_HI | DS_READ_I8_D16_HI | DS_READ_U16_D16_HI
            );
            let mut out = [0u32; 64];
            for l in 0..64 {
                let h = match i.op {
                    DS_READ_I8_D16 | DS_READ_I8_D16_HI => v[0][l] as u8 as i8 as i16 as u16,
                    DS_READ_U8_D16 | DS_READ_U8_D16_HI => v[0][l] as u8 as u16,
                    _ => v[0][l] as u16,
                } as u32;
                out[l] = if hi {
                    (old[l] & 0xffff) | (h << 16)
                } else {
                    (old[l] & 0xffff_0000) | h
                };
            }
            put(w, &[out])
        }
        DS_WRITE2_B32 | DS_WRITE2ST64_B32 | DS_WRITE2_B64 | DS_WRITE2ST64_B64 => {
            let wide = matches!(i.op, DS_WRITE2_B64 | DS_WRITE2ST64_B64);
            let size = if wide { 8 } else { 4 };
            let stride = if matches!(i.op, DS_WRITE2ST64_B32 | DS_WRITE2ST64_B64) {
                64 * size
            } else {
                size
            };
            let a = addr_reg(w)?;
            let n = if wide { 2 } else { 1 };
            let d0 = regs(w, i, Role::Data0, n)?;
            let d1 = regs(w, i, Role::Data1, n)?;
            for l in (0..64).filter(|&l| active(l)) {
                let bytes =
                    |d: &[Vgpr]| -> Vec<u8> { d.iter().flat_map(|r| r[l].to_le_bytes()).collect() };
                let base = a[l] as u64;
                lds.write(base + i.mem.offset0 as u64 * stride, &bytes(&d0));
                // Equal offsets name one address: only DATA0 is written (CDNA4 ISA 11.3.1).
                if i.mem.offset1 != i.mem.offset0 {
                    lds.write(base + i.mem.offset1 as u64 * stride, &bytes(&d1));
                }
            }
            Ok(())
        }
        DS_READ2_B32 | DS_READ2ST64_B32 | DS_READ2_B64 | DS_READ2ST64_B64 => {
            let wide = matches!(i.op, DS_READ2_B64 | DS_READ2ST64_B64);
            let size = if wide { 8 } else { 4 };
            let stride = if matches!(i.op, DS_READ2ST64_B32 | DS_READ2ST64_B64) {
                64 * size
            } else {
                size
            };
            let a = addr_reg(w)?;
            let n = if wide { 2 } else { 1 };
            let mut out = vec![[0u32; 64]; 2 * n];
            for l in (0..64).filter(|&l| active(l)) {
                for (e, offn) in [i.mem.offset0, i.mem.offset1].into_iter().enumerate() {
                    let mut buf = [0u8; 8];
                    lds.read(
                        a[l] as u64 + offn as u64 * stride,
                        &mut buf[..size as usize],
                    );
                    for k in 0..n {
                        out[e * n + k][l] = u32::from_le_bytes([
                            buf[4 * k],
                            buf[4 * k + 1],
                            buf[4 * k + 2],
                            buf[4 * k + 3],
                        ]);
                    }
                }
            }
            put(w, &out)
        }
        DS_WRXCHG2_RTN_B32
        | DS_WRXCHG2ST64_RTN_B32
        | DS_WRXCHG2_RTN_B64
        | DS_WRXCHG2ST64_RTN_B64 => {
            let wide = matches!(i.op, DS_WRXCHG2_RTN_B64 | DS_WRXCHG2ST64_RTN_B64);
            let size = if wide { 8usize } else { 4 };
            let stride = (if matches!(i.op, DS_WRXCHG2ST64_RTN_B32 | DS_WRXCHG2ST64_RTN_B64) {
                64
            } else {
                1
            }) * size as u64;
            let a = addr_reg(w)?;
            let n = size / 4;
            let d = [regs(w, i, Role::Data0, n)?, regs(w, i, Role::Data1, n)?];
            let mut out = vec![[0u32; 64]; 2 * n];
            for l in (0..64).filter(|&l| active(l)) {
                for (e, offn) in [i.mem.offset0, i.mem.offset1].into_iter().enumerate() {
                    let at = a[l] as u64 + offn as u64 * stride;
                    let mut buf = [0u8; 8];
                    lds.read(at, &mut buf[..size]);
                    for k in 0..n {
                        out[e * n + k][l] = u32::from_le_bytes([
                            buf[4 * k],
                            buf[4 * k + 1],
                            buf[4 * k + 2],
                            buf[4 * k + 3],
                        ]);
                    }
                    let new: Vec<u8> = d[e].iter().flat_map(|r| r[l].to_le_bytes()).collect();
                    lds.write(at, &new);
                }
            }
            put(w, &out)
        }
        DS_WRITE_ADDTID_B32 | DS_READ_ADDTID_B32 => {
            // Address = offset + M0[15:0] + lane * 4 (CDNA4 ISA DS_*_ADDTID_B32).
            let base = off + (w.m0() & 0xffff) as u64;
            if i.op == DS_WRITE_ADDTID_B32 {
                let d = regs(w, i, Role::Data0, 1)?;
                for l in (0..64).filter(|&l| active(l)) {
                    lds.write(base + 4 * l as u64, &d[0][l].to_le_bytes());
                }
                Ok(())
            } else {
                let mut out = [0u32; 64];
                for l in (0..64).filter(|&l| active(l)) {
                    out[l] = lds.read_u32(base + 4 * l as u64);
                }
                put(w, &[out])
            }
        }
        DS_SWIZZLE_B32 => {
            let d = regs(w, i, Role::Addr, 1)?;
            let mut out = [0u32; 64];
            for (l, o) in out.iter_mut().enumerate() {
                let src = ds::swizzle_source(i.mem.offset as u16, l).ok_or_else(|| {
                    unimpl(i, &format!("offset {:#x}: rotate/FFT mode", i.mem.offset))
                })?;
                // A lane whose source is inactive reads zero.
                *o = if active(src) { d[0][src] } else { 0 };
            }
            put(w, &[out])
        }
        DS_PERMUTE_B32 | DS_BPERMUTE_B32 => {
            let a = addr_reg(w)?;
            let d = regs(w, i, Role::Data0, 1)?;
            let out = if i.op == DS_BPERMUTE_B32 {
                ds::bpermute(&a, i.mem.offset as u16 as u32, &d[0], exec)
            } else {
                ds::permute(&a, i.mem.offset as u16 as u32, &d[0], exec)
            };
            put(w, &[out])
        }
        DS_READ_B64_TR_B4 | DS_READ_B96_TR_B6 | DS_READ_B64_TR_B8 | DS_READ_B64_TR_B16 => {
            let kind = match i.op {
                DS_READ_B64_TR_B4 => TransposeKind::B4,
                DS_READ_B96_TR_B6 => TransposeKind::B6,
                DS_READ_B64_TR_B8 => TransposeKind::B8,
                _ => TransposeKind::B16,
            };
            // The ISA requires EXEC to be all ones: the transpose mixes lanes, so a partial
            // mask has no defined result.
            if exec != u64::MAX {
                return Err(unimpl(
                    i,
                    &format!("EXEC {exec:#x}: the ISA requires all lanes"),
                ));
            }
            let a = addr_reg(w)?;
            let mut rows = [[0u8; 12]; 64];
            for (l, row) in rows.iter_mut().enumerate() {
                lds.read(lane_addr(&a, l), &mut row[..kind.bytes()]);
            }
            let t = ds::transpose(kind, &rows);
            let n = kind.bytes() / 4;
            let mut out = vec![[0u32; 64]; n];
            for l in 0..64 {
                for (k, o) in out.iter_mut().enumerate() {
                    o[l] = u32::from_le_bytes([
                        t[l][4 * k],
                        t[l][4 * k + 1],
                        t[l][4 * k + 2],
                        t[l][4 * k + 3],
                    ]);
                }
            }
            put(w, &out)
        }
        op => {
            let (kind, wide, rtn) = atomic_kind(op).ok_or_else(|| unimpl(i, ""))?;
            let a = addr_reg(w)?;
            let n = if wide { 2 } else { 1 };
            let has_d1 = matches!(kind, Rmw::Mskor | Rmw::Cmpst | Rmw::CmpstF);
            let d0 = regs(w, i, Role::Data0, n)?;
            let d1 = if has_d1 {
                regs(w, i, Role::Data1, n)?
            } else {
                vec![[0; 64]; n]
            };
            let mut out = vec![[0u32; 64]; n];
            for l in (0..64).filter(|&l| active(l)) {
                let at = lane_addr(&a, l);
                if wide {
                    let mut b = [0u8; 8];
                    lds.read(at, &mut b);
                    let old = u64::from_le_bytes(b);
                    let v0 = d0[0][l] as u64 | ((d0[1][l] as u64) << 32);
                    let v1 = d1[0][l] as u64 | ((d1[1][l] as u64) << 32);
                    lds.write(at, &rmw64(kind, old, v0, v1).to_le_bytes());
                    out[0][l] = old as u32;
                    out[1][l] = (old >> 32) as u32;
                } else {
                    let old = lds.read_u32(at);
                    lds.write_u32(at, rmw32(kind, old, d0[0][l], d1[0][l]));
                    out[0][l] = old;
                }
            }
            if rtn { put(w, &out) } else { Ok(()) }
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::exec::stats::Counter;
    use crate::exec::testutil::Harness;

    #[test]
    fn loads_stores_atomics_and_permutes() {
        let mut h = Harness::new(&[
            0xd81a0008, 0x00000100, // ds_write_b32 v0, v1 offset:8
            0xd86c0008, 0x02000000, // ds_read_b32 v2, v0 offset:8
            0xd89e0201,
            0x00060400, // ds_write2st64_b64 v0, v[4:5], v[6:7] offset0:1 offset1:2
            0xd86e8180, 0x08000000, // ds_read2_b32 v[8:9], v0 offset0:128 offset1:129
            0xd9fe0000, 0x0a000003, // ds_read_b128 v[10:13], v3
            0xd8400000, 0x0e00100f, // ds_add_rtn_u32 v14, v15, v16
            0xd87e0000, 0x11000112, // ds_bpermute_b32 v17, v18, v1
            0xd87a041f, 0x13000001, // ds_swizzle_b32 v19, v1 offset:swizzle(SWAP,1)
            0xd8740000, 0x14000015, // ds_read_u8 v20, v21
            0xd8720000, 0x16000015, // ds_read_i8 v22, v21
            0xd83c0001, 0x00000115, // ds_write_b8 v21, v1 offset:1
            0xd8600000, 0x1a1c1b0f, // ds_cmpst_rtn_b32 v26, v15, v27, v28
        ]);
        h.set_v(0, |l| 4 * l as u32);
        h.set_v(1, |l| 0x1000 + l as u32);
        h.set_v(3, |_| 1024);
        h.set_v(4, |l| 0x2000 + l as u32);
        h.set_v(5, |l| 0x3000 + l as u32);
        h.set_v(6, |l| 0x4000 + l as u32);
        h.set_v(7, |l| 0x5000 + l as u32);
        h.set_v(15, |_| 2048);
        h.set_v(16, |_| 1);
        h.set_v(18, |l| 4 * (63 - l as u32));
        h.set_v(21, |_| 4096);
        h.set_v(27, |_| 99);
        h.set_v(28, |_| 64);
        h.lds.write(4096, &[0x85, 0, 0, 0]);
        h.run().unwrap();
        assert_eq!(h.v(2)[7], 0x1007);
        // write2st64 put lane l's 8 bytes at 4l + 512 and 4l + 1024 (later lanes overwrite
        // the upper dword of earlier ones), so read2 at 4l + 512 and 4l + 516 sees the low
        // dwords of lanes l and l + 1 (and lane 63's high dword past the end).
        assert_eq!((h.v(8)[5], h.v(9)[5]), (0x2005, 0x2006));
        assert_eq!(h.v(9)[63], 0x303f);
        assert_eq!(
            [h.v(10)[0], h.v(11)[0], h.v(12)[0], h.v(13)[0]],
            [0x4000, 0x4001, 0x4002, 0x4003]
        );
        // 64 lanes add 1 to one address in lane order and get the running count.
        assert_eq!((h.v(14)[0], h.v(14)[63]), (0, 63));
        assert_eq!(h.v(17)[0], 0x1000 + 63);
        assert_eq!((h.v(19)[0], h.v(19)[1]), (0x1001, 0x1000));
        assert_eq!((h.v(20)[0], h.v(22)[0]), (0x85, 0xffff_ff85));
        let mut b = [0u8; 1];
        h.lds.read(4097, &mut b);
        assert_eq!(b[0], 0x3f, "the highest lane's byte lands last");
        // cmpst: lane 0 sees 64 == DATA1 and stores 99; later lanes see 99 and leave it.
        assert_eq!((h.v(26)[0], h.v(26)[1]), (64, 99));
        assert_eq!(h.lds.read_u32(2048), 99);
    }

    #[test]
    fn out_of_range_reads_zero_and_drops_writes() {
        let mut h = Harness::new(&[
            0xd81a0008, 0x00000100, // ds_write_b32 v0, v1 offset:8
            0xd86c0008, 0x02000000, // ds_read_b32 v2, v0 offset:8
        ]);
        // 64 KiB rounds up to 52 granules of 1280 bytes; every lane's address + 8 is at or
        // past the end.
        let size = h.lds.size();
        assert_eq!(size, 52 * 1280);
        h.set_v(0, |l| size - 8 + 4 * l as u32);
        h.set_v(1, |_| 0xabcd);
        h.set_v(2, |_| 0x5555);
        h.run().unwrap();
        assert_eq!(h.v(2), [0; 64]);
        assert!(h.lds.bytes().iter().all(|&b| b == 0));
        assert_eq!(h.stats[Counter::LdsOutOfRange], 128);
    }

    /// Checked against AMD's hardware-validated map for tr_b16 (see `ds::transpose`).
    #[test]
    fn read_b64_tr_b16() {
        let mut h = Harness::new(&[
            0xd9c60000, 0x18000017, // ds_read_b64_tr_b16 v[24:25], v23
        ]);
        h.set_v(23, |l| 8192 + 8 * l as u32);
        for l in 0..64u32 {
            for hw in 0..4u32 {
                h.lds.write(
                    (8192 + 8 * l + 2 * hw) as u64,
                    &(((l << 8) | hw) as u16).to_le_bytes(),
                );
            }
        }
        h.run().unwrap();
        for l in 0..64usize {
            let src = (l & 0x30) + ((l & 0xc) >> 2);
            let hw = (l & 3) as u32;
            let want = |n: usize| ((((src + 4 * n) as u32) << 8) | hw) & 0xffff;
            assert_eq!(h.v(24)[l], want(0) | (want(1) << 16), "lane {l}");
            assert_eq!(h.v(25)[l], want(2) | (want(3) << 16), "lane {l}");
        }
        // A partial EXEC mask has no defined result: it faults.
        let mut h = Harness::new(&[0xd9c60000, 0x18000017]);
        h.w.set_exec(1);
        assert!(h.run().is_err());
    }
}
