//! Vector memory: MUBUF (buffer), FLAT, GLOBAL and SCRATCH loads, stores and atomics,
//! including the direct-to-LDS loads.
//!
//! Addresses: GLOBAL with an SGPR base is `saddr + vaddr(32-bit) + offset`, otherwise
//! `vaddr(64-bit) + offset`; FLAT is `vaddr(64-bit) + offset` routed by aperture (the LDS and
//! private windows of [`super::memory`]); SCRATCH is a per-lane private offset
//! `vaddr + saddr + offset`. Direct-to-LDS loads write lane `l`'s data to
//! `M0 + inst_offset + l * 4` (4 bytes per lane for loads of up to a dword, 16 for
//! dwordx3/x4; the immediate offset applies to both the memory and the LDS address) — LLVM
//! AMDGPU "LDS DMA" documentation; MUBUF uses `M0[17:0]`, GLOBAL/SCRATCH `M0[17:2] * 4`
//! (CDNA4 ISA 9.1.9 and 10.3).

// Lane loops index several parallel per-lane arrays at once; an index reads clearer than
// zipped iterators there.
#![allow(clippy::needless_range_loop)]

use super::buffer::{BufferAccess, BufferResource, lane_access};
use super::dsops::{Rmw, rmw32, rmw64};
use super::fault::{FaultKind, unimpl};
use super::interp::Env;
use super::memory::{APERTURE_SIZE, Lds, PRIVATE_APERTURE, SHARED_APERTURE};
use super::mfma::Vgpr;
use super::operands::{read_s32, read_s64, read_sregs, read_v32, read_v64, vreg, write_v32};
use super::stats::{Counter, InstClass};
use super::wave::Wave;
use crate::isa::{Encoding, Inst, Opcode, Operand, Role, ValueType};

/// What an opcode moves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Load `size` bytes per element, `n` elements, extended as `ext` says.
    Load { size: u32, n: u32, ext: Ext },
    /// Load into LDS (`size` bytes, extended to a dword for sub-dword sizes).
    LoadLds { size: u32, signed: bool },
    /// Store; `shift` selects the bytes of the register (16 for the `_d16_hi` stores).
    Store { size: u32, n: u32, shift: u32 },
    /// Read-modify-write of `wide` (64-bit) or 32-bit data.
    Atomic { op: Rmw, wide: bool },
    /// Cache maintenance.
    Nop,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ext {
    Zero,
    Sign,
    /// Into the low half, keeping the high half (sign-extending bytes when `signed`).
    D16Lo {
        signed: bool,
    },
    /// Into the high half, keeping the low half.
    D16Hi {
        signed: bool,
    },
}

fn kind(op: Opcode) -> Option<Kind> {
    use Opcode::*;
    let load = |size, n, ext| Kind::Load { size, n, ext };
    let st = |size, n, shift| Kind::Store { size, n, shift };
    let at = |op, wide| Kind::Atomic { op, wide };
    Some(match op {
        BUFFER_LOAD_UBYTE | FLAT_LOAD_UBYTE | GLOBAL_LOAD_UBYTE | SCRATCH_LOAD_UBYTE => {
            load(1, 1, Ext::Zero)
        }
        BUFFER_LOAD_SBYTE | FLAT_LOAD_SBYTE | GLOBAL_LOAD_SBYTE | SCRATCH_LOAD_SBYTE => {
            load(1, 1, Ext::Sign)
        }
        BUFFER_LOAD_USHORT | FLAT_LOAD_USHORT | GLOBAL_LOAD_USHORT | SCRATCH_LOAD_USHORT => {
            load(2, 1, Ext::Zero)
        }
        BUFFER_LOAD_SSHORT | FLAT_LOAD_SSHORT | GLOBAL_LOAD_SSHORT | SCRATCH_LOAD_SSHORT => {
            load(2, 1, Ext::Sign)
        }
        BUFFER_LOAD_DWORD | FLAT_LOAD_DWORD | GLOBAL_LOAD_DWORD | SCRATCH_LOAD_DWORD => {
            load(4, 1, Ext::Zero)
        }
        BUFFER_LOAD_DWORDX2 | FLAT_LOAD_DWORDX2 | GLOBAL_LOAD_DWORDX2 | SCRATCH_LOAD_DWORDX2 => {
            load(4, 2, Ext::Zero)
        }
        BUFFER_LOAD_DWORDX3 | FLAT_LOAD_DWORDX3 | GLOBAL_LOAD_DWORDX3 | SCRATCH_LOAD_DWORDX3 => {
            load(4, 3, Ext::Zero)
        }
        BUFFER_LOAD_DWORDX4 | FLAT_LOAD_DWORDX4 | GLOBAL_LOAD_DWORDX4 | SCRATCH_LOAD_DWORDX4 => {
            load(4, 4, Ext::Zero)
        }
        BUFFER_LOAD_UBYTE_D16
        | FLAT_LOAD_UBYTE_D16
        | GLOBAL_LOAD_UBYTE_D16
        | SCRATCH_LOAD_UBYTE_D16 => load(1, 1, Ext::D16Lo { signed: false }),
        BUFFER_LOAD_SBYTE_D16
        | FLAT_LOAD_SBYTE_D16
        | GLOBAL_LOAD_SBYTE_D16
        | SCRATCH_LOAD_SBYTE_D16 => load(1, 1, Ext::D16Lo { signed: true }),
        BUFFER_LOAD_UBYTE_D16_HI
        | FLAT_LOAD_UBYTE_D16_HI
        | GLOBAL_LOAD_UBYTE_D16_HI
        | SCRATCH_LOAD_UBYTE_D16_HI => load(1, 1, Ext::D16Hi { signed: false }),
        BUFFER_LOAD_SBYTE_D16_HI
        | FLAT_LOAD_SBYTE_D16_HI
        | GLOBAL_LOAD_SBYTE_D16_HI
        | SCRATCH_LOAD_SBYTE_D16_HI => load(1, 1, Ext::D16Hi { signed: true }),
        BUFFER_LOAD_SHORT_D16
        | FLAT_LOAD_SHORT_D16
        | GLOBAL_LOAD_SHORT_D16
        | SCRATCH_LOAD_SHORT_D16 => load(2, 1, Ext::D16Lo { signed: false }),
        BUFFER_LOAD_SHORT_D16_HI
        | FLAT_LOAD_SHORT_D16_HI
        | GLOBAL_LOAD_SHORT_D16_HI
        | SCRATCH_LOAD_SHORT_D16_HI => load(2, 1, Ext::D16Hi { signed: false }),
        GLOBAL_LOAD_LDS_UBYTE | SCRATCH_LOAD_LDS_UBYTE => Kind::LoadLds {
            size: 1,
            signed: false,
        },
        GLOBAL_LOAD_LDS_SBYTE | SCRATCH_LOAD_LDS_SBYTE => Kind::LoadLds {
            size: 1,
            signed: true,
        },
        GLOBAL_LOAD_LDS_USHORT | SCRATCH_LOAD_LDS_USHORT => Kind::LoadLds {
            size: 2,
            signed: false,
        },
        GLOBAL_LOAD_LDS_SSHORT | SCRATCH_LOAD_LDS_SSHORT => Kind::LoadLds {
            size: 2,
            signed: true,
        },
        GLOBAL_LOAD_LDS_DWORD | SCRATCH_LOAD_LDS_DWORD => Kind::LoadLds {
            size: 4,
            signed: false,
        },
        GLOBAL_LOAD_LDS_DWORDX3 => Kind::LoadLds {
            size: 12,
            signed: false,
        },
        GLOBAL_LOAD_LDS_DWORDX4 => Kind::LoadLds {
            size: 16,
            signed: false,
        },
        BUFFER_STORE_BYTE | FLAT_STORE_BYTE | GLOBAL_STORE_BYTE | SCRATCH_STORE_BYTE => st(1, 1, 0),
        BUFFER_STORE_BYTE_D16_HI
        | FLAT_STORE_BYTE_D16_HI
        | GLOBAL_STORE_BYTE_D16_HI
        | SCRATCH_STORE_BYTE_D16_HI => st(1, 1, 16),
        BUFFER_STORE_SHORT | FLAT_STORE_SHORT | GLOBAL_STORE_SHORT | SCRATCH_STORE_SHORT => {
            st(2, 1, 0)
        }
        BUFFER_STORE_SHORT_D16_HI
        | FLAT_STORE_SHORT_D16_HI
        | GLOBAL_STORE_SHORT_D16_HI
        | SCRATCH_STORE_SHORT_D16_HI => st(2, 1, 16),
        BUFFER_STORE_DWORD | FLAT_STORE_DWORD | GLOBAL_STORE_DWORD | SCRATCH_STORE_DWORD => {
            st(4, 1, 0)
        }
        BUFFER_STORE_DWORDX2
        | FLAT_STORE_DWORDX2
        | GLOBAL_STORE_DWORDX2
        | SCRATCH_STORE_DWORDX2 => st(4, 2, 0),
        BUFFER_STORE_DWORDX3
        | FLAT_STORE_DWORDX3
        | GLOBAL_STORE_DWORDX3
        | SCRATCH_STORE_DWORDX3 => st(4, 3, 0),
        BUFFER_STORE_DWORDX4
        | FLAT_STORE_DWORDX4
        | GLOBAL_STORE_DWORDX4
        | SCRATCH_STORE_DWORDX4 => st(4, 4, 0),
        BUFFER_ATOMIC_SWAP | FLAT_ATOMIC_SWAP | GLOBAL_ATOMIC_SWAP => at(Rmw::Xchg, false),
        BUFFER_ATOMIC_CMPSWAP | FLAT_ATOMIC_CMPSWAP | GLOBAL_ATOMIC_CMPSWAP => {
            at(Rmw::Cmpst, false)
        }
        BUFFER_ATOMIC_ADD | FLAT_ATOMIC_ADD | GLOBAL_ATOMIC_ADD => at(Rmw::Add, false),
        BUFFER_ATOMIC_SUB | FLAT_ATOMIC_SUB | GLOBAL_ATOMIC_SUB => at(Rmw::Sub, false),
        BUFFER_ATOMIC_SMIN | FLAT_ATOMIC_SMIN | GLOBAL_ATOMIC_SMIN => at(Rmw::MinI, false),
        BUFFER_ATOMIC_UMIN | FLAT_ATOMIC_UMIN | GLOBAL_ATOMIC_UMIN => at(Rmw::MinU, false),
        BUFFER_ATOMIC_SMAX | FLAT_ATOMIC_SMAX | GLOBAL_ATOMIC_SMAX => at(Rmw::MaxI, false),
        BUFFER_ATOMIC_UMAX | FLAT_ATOMIC_UMAX | GLOBAL_ATOMIC_UMAX => at(Rmw::MaxU, false),
        BUFFER_ATOMIC_AND | FLAT_ATOMIC_AND | GLOBAL_ATOMIC_AND => at(Rmw::And, false),
        BUFFER_ATOMIC_OR | FLAT_ATOMIC_OR | GLOBAL_ATOMIC_OR => at(Rmw::Or, false),
        BUFFER_ATOMIC_XOR | FLAT_ATOMIC_XOR | GLOBAL_ATOMIC_XOR => at(Rmw::Xor, false),
        BUFFER_ATOMIC_INC | FLAT_ATOMIC_INC | GLOBAL_ATOMIC_INC => at(Rmw::Inc, false),
        BUFFER_ATOMIC_DEC | FLAT_ATOMIC_DEC | GLOBAL_ATOMIC_DEC => at(Rmw::Dec, false),
        BUFFER_ATOMIC_ADD_F32 | FLAT_ATOMIC_ADD_F32 | GLOBAL_ATOMIC_ADD_F32 => at(Rmw::AddF, false),
        BUFFER_ATOMIC_PK_ADD_F16 | FLAT_ATOMIC_PK_ADD_F16 | GLOBAL_ATOMIC_PK_ADD_F16 => {
            at(Rmw::PkAddF16, false)
        }
        BUFFER_ATOMIC_PK_ADD_BF16 | FLAT_ATOMIC_PK_ADD_BF16 | GLOBAL_ATOMIC_PK_ADD_BF16 => {
            at(Rmw::PkAddBf16, false)
        }
        BUFFER_ATOMIC_ADD_F64 | FLAT_ATOMIC_ADD_F64 | GLOBAL_ATOMIC_ADD_F64 => at(Rmw::AddF, true),
        BUFFER_ATOMIC_MIN_F64 | FLAT_ATOMIC_MIN_F64 | GLOBAL_ATOMIC_MIN_F64 => at(Rmw::MinF, true),
        BUFFER_ATOMIC_MAX_F64 | FLAT_ATOMIC_MAX_F64 | GLOBAL_ATOMIC_MAX_F64 => at(Rmw::MaxF, true),
        BUFFER_ATOMIC_SWAP_X2 | FLAT_ATOMIC_SWAP_X2 | GLOBAL_ATOMIC_SWAP_X2 => at(Rmw::Xchg, true),
        BUFFER_ATOMIC_CMPSWAP_X2 | FLAT_ATOMIC_CMPSWAP_X2 | GLOBAL_ATOMIC_CMPSWAP_X2 => {
            at(Rmw::Cmpst, true)
        }
        BUFFER_ATOMIC_ADD_X2 | FLAT_ATOMIC_ADD_X2 | GLOBAL_ATOMIC_ADD_X2 => at(Rmw::Add, true),
        BUFFER_ATOMIC_SUB_X2 | FLAT_ATOMIC_SUB_X2 | GLOBAL_ATOMIC_SUB_X2 => at(Rmw::Sub, true),
        BUFFER_ATOMIC_SMIN_X2 | FLAT_ATOMIC_SMIN_X2 | GLOBAL_ATOMIC_SMIN_X2 => at(Rmw::MinI, true),
        BUFFER_ATOMIC_UMIN_X2 | FLAT_ATOMIC_UMIN_X2 | GLOBAL_ATOMIC_UMIN_X2 => at(Rmw::MinU, true),
        BUFFER_ATOMIC_SMAX_X2 | FLAT_ATOMIC_SMAX_X2 | GLOBAL_ATOMIC_SMAX_X2 => at(Rmw::MaxI, true),
        BUFFER_ATOMIC_UMAX_X2 | FLAT_ATOMIC_UMAX_X2 | GLOBAL_ATOMIC_UMAX_X2 => at(Rmw::MaxU, true),
        BUFFER_ATOMIC_AND_X2 | FLAT_ATOMIC_AND_X2 | GLOBAL_ATOMIC_AND_X2 => at(Rmw::And, true),
        BUFFER_ATOMIC_OR_X2 | FLAT_ATOMIC_OR_X2 | GLOBAL_ATOMIC_OR_X2 => at(Rmw::Or, true),
        BUFFER_ATOMIC_XOR_X2 | FLAT_ATOMIC_XOR_X2 | GLOBAL_ATOMIC_XOR_X2 => at(Rmw::Xor, true),
        BUFFER_ATOMIC_INC_X2 | FLAT_ATOMIC_INC_X2 | GLOBAL_ATOMIC_INC_X2 => at(Rmw::Inc, true),
        BUFFER_ATOMIC_DEC_X2 | FLAT_ATOMIC_DEC_X2 | GLOBAL_ATOMIC_DEC_X2 => at(Rmw::Dec, true),
        BUFFER_WBL2 | BUFFER_INV => Kind::Nop,
        _ => return None,
    })
}

/// Counter class of a vector-memory instruction.
pub fn class(i: &Inst) -> InstClass {
    match kind(i.op) {
        Some(Kind::Store { .. }) => InstClass::VmemStore,
        Some(Kind::Atomic { .. }) => InstClass::VmemAtomic,
        _ => InstClass::VmemLoad,
    }
}

/// Where one lane's access goes.
#[derive(Clone, Copy, Debug)]
enum Target {
    Global(u64),
    Lds(u64),
    Private(u64),
    /// Out of range buffer access: loads read zero, stores are dropped.
    Dropped,
}

/// Per-lane data of a load: up to 4 dwords.
type Data = [[u32; 4]; 64];

fn bytes_of(d: &[u32; 4], len: usize) -> [u8; 16] {
    let mut b = [0u8; 16];
    for k in 0..4 {
        b[4 * k..4 * k + 4].copy_from_slice(&d[k].to_le_bytes());
    }
    let _ = len;
    b
}

fn dwords_of(b: &[u8; 16]) -> [u32; 4] {
    let mut d = [0u32; 4];
    for k in 0..4 {
        d[k] = u32::from_le_bytes([b[4 * k], b[4 * k + 1], b[4 * k + 2], b[4 * k + 3]]);
    }
    d
}

fn read_target(
    env: &Env<'_>,
    w: &Wave,
    lds: &mut Lds,
    lane: usize,
    t: Target,
    buf: &mut [u8],
) -> Result<(), FaultKind> {
    match t {
        Target::Global(a) => Ok(env.mem.read(a, buf)?),
        Target::Lds(a) => {
            lds.read(a, buf);
            Ok(())
        }
        Target::Private(o) => Ok(w.scratch.read(lane, o, buf)?),
        Target::Dropped => {
            buf.fill(0);
            Ok(())
        }
    }
}

/// Whether the attached probe asks for global memory to stay untouched.
pub(crate) fn discards(env: &Env<'_>) -> bool {
    env.probe.as_ref().is_some_and(|p| p.discard_global_writes)
}

fn write_target(
    env: &Env<'_>,
    w: &mut Wave,
    lds: &mut Lds,
    lane: usize,
    t: Target,
    data: &[u8],
) -> Result<(), FaultKind> {
    match t {
        Target::Global(_) if discards(env) => Ok(()),
        Target::Global(a) => Ok(env.mem.write(a, data)?),
        Target::Lds(a) => {
            lds.write(a, data);
            Ok(())
        }
        Target::Private(o) => Ok(w.scratch.write(lane, o, data)?),
        Target::Dropped => Ok(()),
    }
}

/// Routes a flat address through the apertures.
fn flat_target(addr: u64) -> Target {
    if (SHARED_APERTURE..SHARED_APERTURE + APERTURE_SIZE).contains(&addr) {
        Target::Lds(addr - SHARED_APERTURE)
    } else if (PRIVATE_APERTURE..PRIVATE_APERTURE + APERTURE_SIZE).contains(&addr) {
        Target::Private(addr - PRIVATE_APERTURE)
    } else {
        Target::Global(addr)
    }
}

/// Reports the lanes' targets to an attached timing model.
fn probe_targets(
    p: &mut super::interp::VmemProbe,
    exec: u64,
    targets: &[Target; 64],
    in_range: &[u32; 64],
    elem: u32,
    to_lds: bool,
) {
    p.valid = true;
    p.global = 0;
    p.other = 0;
    p.to_lds = to_lds;
    p.bytes = 0;
    for l in (0..64).filter(|&l| exec >> l & 1 != 0) {
        match targets[l] {
            Target::Global(a) => {
                p.global |= 1 << l;
                p.addr[l] = a;
                p.bytes = p.bytes.max(elem * in_range[l]);
            }
            Target::Lds(_) | Target::Private(_) => p.other |= 1 << l,
            Target::Dropped => {}
        }
    }
}

/// Executes a vector-memory instruction.
pub fn exec(env: &mut Env<'_>, w: &mut Wave, lds: &mut Lds, i: &Inst) -> Result<(), FaultKind> {
    let mut k = kind(i.op)
        .ok_or_else(|| unimpl(i, "formatted and typed buffer access are not implemented"))?;
    if i.encoding == Encoding::Mubuf && i.mem.lds {
        // `lds` turns a buffer load into a load to LDS at M0.
        k = match k {
            Kind::Load {
                size,
                n,
                ext: Ext::Zero,
            } => Kind::LoadLds {
                size: size * n,
                signed: false,
            },
            Kind::Load {
                size,
                n: 1,
                ext: Ext::Sign,
            } => Kind::LoadLds { size, signed: true },
            _ => return Err(unimpl(i, "the lds bit on this opcode")),
        };
    }
    if k == Kind::Nop {
        return Ok(());
    }
    let exec = w.exec();
    let (size, n) = match k {
        Kind::Load { size, n, .. } | Kind::Store { size, n, .. } => (size, n),
        // Wide LDS loads are range-checked dword by dword like dwordxN loads.
        Kind::LoadLds { size, .. } => {
            if size > 4 {
                (4, size / 4)
            } else {
                (size, 1)
            }
        }
        Kind::Atomic { wide, .. } => (if wide { 8 } else { 4 }, 1),
        Kind::Nop => (0, 0),
    };
    let access_bytes = size * n;
    // Per-lane targets and, for buffers, the number of leading elements in range.
    let mut targets = [Target::Dropped; 64];
    let mut in_range = [n; 64];
    match i.encoding {
        Encoding::Mubuf => {
            let words = read_sregs(w, i.operand(Role::Srsrc), 4)?;
            let words = [words[0], words[1], words[2], words[3]];
            let r = BufferResource::from_words(words);
            r.check_supported(words)?;
            let soffset = read_s32(w, i.operand(Role::Soffset), i.value_type(Role::Soffset))?;
            let vaddr = i.operand(Role::Vaddr);
            let v0 = if i.mem.idxen || i.mem.offen {
                read_v32(w, vaddr, ValueType::B32)?
            } else {
                [0; 64]
            };
            let v1 = if i.mem.idxen && i.mem.offen {
                w.vgpr[vreg(&vaddr, 1)?]
            } else {
                [0; 64]
            };
            let acc = BufferAccess {
                offen: i.mem.offen,
                idxen: i.mem.idxen,
                inst_offset: i.mem.offset as u32 & 0xfff,
                soffset,
                elem_size: size.min(4),
                num_elems: if size == 8 { 2 } else { n },
                per_element: matches!(
                    k,
                    Kind::Load { size: 4, .. } | Kind::Store { size: 4, .. } | Kind::LoadLds { .. }
                ) && n > 1,
                format_op: false,
            };
            for l in (0..64).filter(|&l| exec >> l & 1 != 0) {
                let (index, voff) = match (i.mem.idxen, i.mem.offen) {
                    (true, true) => (v0[l], v1[l]),
                    (true, false) => (v0[l], 0),
                    (false, true) => (0, v0[l]),
                    (false, false) => (0, 0),
                };
                let la = lane_access(&r, &acc, index, voff, l as u32);
                // Dword and larger accesses ignore the two low address bits (CDNA ISA 9.1.7).
                let addr = if size >= 4 { la.addr & !3 } else { la.addr };
                let full = if size == 8 { 2 } else { n };
                in_range[l] = if size == 8 {
                    (la.elems_in_range == full) as u32
                } else {
                    la.elems_in_range
                };
                if in_range[l] < n {
                    env.stats[Counter::BufferOutOfRange] += 1;
                }
                targets[l] = if in_range[l] == 0 {
                    Target::Dropped
                } else {
                    Target::Global(addr)
                };
            }
        }
        Encoding::Global => {
            let saddr = i.operand(Role::Saddr);
            let vaddr = i.operand(Role::Vaddr);
            let off = i.mem.offset as i64 as u64;
            if saddr == Operand::None {
                let v = read_v64(w, vaddr, ValueType::I64)?;
                for l in 0..64 {
                    targets[l] = Target::Global(v[l].wrapping_add(off));
                }
            } else {
                let base = read_s64(w, saddr, ValueType::I64)?;
                let v = if vaddr == Operand::None {
                    [0; 64]
                } else {
                    read_v32(w, vaddr, ValueType::B32)?
                };
                for l in 0..64 {
                    targets[l] = Target::Global(base.wrapping_add(v[l] as u64).wrapping_add(off));
                }
            }
        }
        Encoding::Flat => {
            let v = read_v64(w, i.operand(Role::Vaddr), ValueType::I64)?;
            let off = i.mem.offset as i64 as u64;
            for l in 0..64 {
                targets[l] = flat_target(v[l].wrapping_add(off));
            }
        }
        Encoding::Scratch => {
            let vaddr = i.operand(Role::Vaddr);
            let saddr = i.operand(Role::Saddr);
            let v = if vaddr == Operand::None {
                [0; 64]
            } else {
                read_v32(w, vaddr, ValueType::B32)?
            };
            let s = if saddr == Operand::None {
                0
            } else {
                read_s32(w, saddr, ValueType::B32)?
            };
            for l in 0..64 {
                let o = v[l].wrapping_add(s).wrapping_add(i.mem.offset as u32);
                targets[l] = Target::Private(o as u64);
            }
        }
        _ => return Err(unimpl(i, "typed buffer (MTBUF) access")),
    }

    if let Some(p) = env.probe.as_deref_mut() {
        probe_targets(
            &mut p.vmem,
            exec,
            &targets,
            &in_range,
            size,
            matches!(k, Kind::LoadLds { .. }),
        );
    }
    match k {
        Kind::Load { size, n, ext } => {
            let mut data: Data = [[0; 4]; 64];
            for l in (0..64).filter(|&l| exec >> l & 1 != 0) {
                let mut buf = [0u8; 16];
                let len = (size * in_range[l]) as usize;
                read_target(env, w, lds, l, targets[l], &mut buf[..len])?;
                data[l] = dwords_of(&buf);
            }
            let dst = if i.encoding == Encoding::Mubuf {
                i.operand(Role::Vdata)
            } else {
                i.dst()
            };
            match ext {
                Ext::Zero | Ext::Sign => {
                    for r in 0..n as usize {
                        let mut v = [0u32; 64];
                        for l in 0..64 {
                            v[l] = match (ext, size) {
                                (Ext::Sign, 1) => data[l][0] as u8 as i8 as i32 as u32,
                                (Ext::Sign, 2) => data[l][0] as u16 as i16 as i32 as u32,
                                _ => data[l][r],
                            };
                        }
                        write_v32(w, dst, r, exec, &v)?;
                    }
                }
                Ext::D16Lo { signed } | Ext::D16Hi { signed } => {
                    let old = w.vgpr[vreg(&dst, 0)?];
                    let mut v = [0u32; 64];
                    for l in 0..64 {
                        let h = match (size, signed) {
                            (1, true) => data[l][0] as u8 as i8 as i16 as u16,
                            (1, false) => data[l][0] as u8 as u16,
                            _ => data[l][0] as u16,
                        } as u32;
                        v[l] = if matches!(ext, Ext::D16Hi { .. }) {
                            (old[l] & 0xffff) | (h << 16)
                        } else {
                            (old[l] & 0xffff_0000) | h
                        };
                    }
                    write_v32(w, dst, 0, exec, &v)?;
                }
            }
            Ok(())
        }
        Kind::LoadLds { size, signed } => {
            let m0 = w.m0();
            let lds_base = if i.encoding == Encoding::Mubuf {
                m0 & 0x3ffff
            } else {
                m0 & 0x3fffc
            } as u64;
            let inst_off = if i.encoding == Encoding::Mubuf {
                i.mem.offset as u32 & 0xfff
            } else {
                i.mem.offset as u32
            } as u64;
            let stride = if size > 4 { 16 } else { 4 };
            for l in (0..64).filter(|&l| exec >> l & 1 != 0) {
                let mut buf = [0u8; 16];
                let len = (if size > 4 {
                    4 * in_range[l]
                } else {
                    size * in_range[l].min(1)
                }) as usize;
                read_target(env, w, lds, l, targets[l], &mut buf[..len])?;
                let v = dwords_of(&buf);
                let word = match (size, signed) {
                    (1, true) => v[0] as u8 as i8 as i32 as u32,
                    (2, true) => v[0] as u16 as i16 as i32 as u32,
                    _ => v[0],
                }
                .to_le_bytes();
                // Sub-dword loads write a whole (extended) dword; wider ones their bytes.
                let out: &[u8] = if size < 4 {
                    &word
                } else {
                    &buf[..size as usize]
                };
                lds.write(lds_base + inst_off + stride * l as u64, out);
            }
            Ok(())
        }
        Kind::Store { size, n, shift } => {
            let src = if i.encoding == Encoding::Mubuf || i.operand(Role::Vdata) != Operand::None {
                i.operand(Role::Vdata)
            } else {
                i.operand(Role::Data0)
            };
            let regs: Vec<Vgpr> = (0..n as usize)
                .map(|r| Ok(w.vgpr[vreg(&src, r)?]))
                .collect::<Result<_, FaultKind>>()?;
            for l in (0..64).filter(|&l| exec >> l & 1 != 0) {
                let mut d = [0u32; 4];
                for r in 0..n as usize {
                    d[r] = regs[r][l] >> shift;
                }
                let b = bytes_of(&d, access_bytes as usize);
                let len = (size * in_range[l]) as usize;
                write_target(env, w, lds, l, targets[l], &b[..len])?;
            }
            Ok(())
        }
        Kind::Atomic { op, wide } => {
            let src = i.operand(Role::Vdata);
            let dw = if wide { 2 } else { 1 };
            let has_cmp = op == Rmw::Cmpst;
            let regs: Vec<Vgpr> = (0..dw * if has_cmp { 2 } else { 1 })
                .map(|r| Ok(w.vgpr[vreg(&src, r)?]))
                .collect::<Result<_, FaultKind>>()?;
            let mut old_vals = vec![[0u32; 64]; dw];
            for l in (0..64).filter(|&l| exec >> l & 1 != 0) {
                // Data is {value, compare} for cmpswap (the value in the low dwords).
                let d0 = if wide {
                    regs[0][l] as u64 | ((regs[1][l] as u64) << 32)
                } else {
                    regs[0][l] as u64
                };
                let d1 = if !has_cmp {
                    0
                } else if wide {
                    regs[2][l] as u64 | ((regs[3][l] as u64) << 32)
                } else {
                    regs[1][l] as u64
                };
                let old = match targets[l] {
                    Target::Global(a) if discards(env) => {
                        if wide {
                            env.mem.read_u64(a)?
                        } else {
                            env.mem.read_u32(a)? as u64
                        }
                    }
                    Target::Global(a) => {
                        if wide {
                            env.mem.atomic_u64(a, |x| rmw64(op, x, d0, d1))?
                        } else {
                            env.mem
                                .atomic_u32(a, |x| rmw32(op, x, d0 as u32, d1 as u32))?
                                as u64
                        }
                    }
                    Target::Lds(a) => {
                        if wide {
                            let mut b = [0u8; 8];
                            lds.read(a, &mut b);
                            let x = u64::from_le_bytes(b);
                            lds.write(a, &rmw64(op, x, d0, d1).to_le_bytes());
                            x
                        } else {
                            let x = lds.read_u32(a);
                            lds.write_u32(a, rmw32(op, x, d0 as u32, d1 as u32));
                            x as u64
                        }
                    }
                    Target::Private(_) => return Err(unimpl(i, "atomic on private memory")),
                    Target::Dropped => 0,
                };
                old_vals[0][l] = old as u32;
                if wide {
                    old_vals[1][l] = (old >> 32) as u32;
                }
            }
            // The pre-op value is returned when sc0 (glc) is set.
            if i.mem.sc0 || i.mem.glc {
                let dst = if i.encoding == Encoding::Mubuf {
                    src
                } else {
                    i.dst()
                };
                for (r, v) in old_vals.iter().enumerate() {
                    write_v32(w, dst, r, exec, v)?;
                }
            }
            Ok(())
        }
        Kind::Nop => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use crate::exec::memory::{PRIVATE_APERTURE, SHARED_APERTURE};
    use crate::exec::testutil::Harness;

    fn pattern_dw(o: u64) -> u32 {
        let b = |k: u64| ((o + k) % 251) as u8 as u32;
        b(0) | (b(1) << 8) | (b(2) << 16) | (b(3) << 24)
    }

    #[test]
    fn global_buffer_scratch_flat_and_lds_dma() {
        let mut h = Harness::new(&[
            0xdc509ffc, 0x02000001, // global_load_dword v2, v1, s[0:1] offset:-4
            0xdc548008, 0x047f0006, // global_load_dwordx2 v[4:5], v[6:7], off offset:8
            0xdc708100, 0x00000801, // global_store_dword v1, v8, s[0:1] offset:256
            0xe05c1004,
            0x08010a09, // buffer_load_dwordx4 v[10:13], v9, s[4:7], s8 offen offset:4
            0xe0701000, 0x80010e09, // buffer_store_dword v14, v9, s[4:7], 0 offen
            0xdd098200, 0x0f001001, // global_atomic_add v15, v1, v16, s[0:1] offset:512 sc0
            0xdd058000, 0x11001412, // global_atomic_cmpswap v17, v18, v[20:21], s[0:1] sc0
            0xdc706008, 0x007f1716, // scratch_store_dword v22, v23, off offset:8
            0xdc506008, 0x187f0016, // scratch_load_dword v24, v22, off offset:8
            0xdc500000, 0x1900001a, // flat_load_dword v25, v[26:27]
            0xbefc00ff, 0x00000100, // s_mov_b32 m0, 0x100
            0xddf48010, 0x007f0006, // global_load_lds_dwordx4 v[6:7], off offset:16
            0xbefc00ff, 0x00000800, // s_mov_b32 m0, 0x800
            0xe0511000, 0x80010009, // buffer_load_dword v9, s[4:7], 0 offen lds
        ]);
        let data: Vec<u8> = (0..4096u64).map(|i| (i % 251) as u8).collect();
        let g = h.mem.upload(&data).unwrap();
        h.w.set_sgpr64(0, g);
        // V#: base g + 1024, stride 0, num_records 64 bytes.
        let rb = g + 1024;
        h.w.sgpr[4] = rb as u32;
        h.w.sgpr[5] = (rb >> 32) as u32;
        h.w.sgpr[6] = 64;
        h.w.sgpr[7] = 0;
        h.w.sgpr[8] = 8;
        h.set_v(1, |l| 4 * l as u32 + 4);
        h.set_v(6, |l| (g + 16 * l as u64) as u32);
        h.set_v(7, |l| ((g + 16 * l as u64) >> 32) as u32);
        h.set_v(8, |l| 0xaa00_0000 + l as u32);
        h.set_v(9, |l| 16 * l as u32);
        h.set_v(14, |l| 0xbb00 + l as u32);
        h.set_v(16, |_| 1000);
        h.set_v(18, |_| 2048);
        h.set_v(20, |_| 7);
        h.set_v(21, |_| pattern_dw(2048));
        h.set_v(22, |_| 4);
        h.set_v(23, |l| 0xcc00 + l as u32);
        h.set_v(26, |l| {
            if l % 2 == 0 {
                (SHARED_APERTURE + 64) as u32
            } else {
                (PRIVATE_APERTURE + 12) as u32
            }
        });
        h.set_v(27, |l| {
            if l % 2 == 0 {
                (SHARED_APERTURE >> 32) as u32
            } else {
                (PRIVATE_APERTURE >> 32) as u32
            }
        });
        h.lds.write_u32(64, 0x1234_5678);
        h.lds.write(0x800, &[0xff; 256]);
        h.run().unwrap();

        assert_eq!(h.v(2)[3], pattern_dw(12));
        assert_eq!((h.v(4)[2], h.v(5)[2]), (pattern_dw(40), pattern_dw(44)));
        assert_eq!(h.mem.read_u32(g + 260 + 4 * 5).unwrap(), 0xaa00_0005);
        // Buffer lane l reads at 16l + 4 + 8 (soffset counts): lane 0 fully in range, lane 3
        // has one dword left before num_records, lane 4 none.
        assert_eq!(
            [h.v(10)[0], h.v(13)[0]],
            [pattern_dw(1024 + 12), pattern_dw(1024 + 24)]
        );
        assert_eq!([h.v(10)[3], h.v(11)[3]], [pattern_dw(1024 + 60), 0]);
        assert_eq!(h.v(10)[4], 0);
        // Stores past num_records are dropped.
        assert_eq!(h.mem.read_u32(rb + 48).unwrap(), 0xbb03);
        assert_eq!(h.mem.read_u32(rb + 64).unwrap(), pattern_dw(1024 + 64));
        // Atomic add returns the old value.
        assert_eq!(h.v(15)[1], pattern_dw(520));
        assert_eq!(
            h.mem.read_u32(g + 520).unwrap(),
            pattern_dw(520).wrapping_add(1000)
        );
        assert_eq!((h.v(17)[0], h.v(17)[1]), (pattern_dw(2048), 7));
        assert_eq!(h.mem.read_u32(g + 2048).unwrap(), 7);
        assert_eq!(h.v(24)[9], 0xcc09);
        // Flat: even lanes hit the LDS aperture, odd lanes their private memory.
        assert_eq!((h.v(25)[0], h.v(25)[1]), (0x1234_5678, 0xcc01));
        // LDS DMA: 16 bytes per lane at M0 + offset + 16 l.
        let mut b = [0u8; 16];
        h.lds.read(0x100 + 16 + 16 * 3, &mut b);
        assert_eq!(b.to_vec(), data[64..80].to_vec());
        // Buffer-to-LDS: 4 bytes per lane at M0 + 4 l; out-of-range lanes write zeros.
        assert_eq!(h.lds.read_u32(0x800 + 4 * 3), 0xbb03);
        assert_eq!(h.lds.read_u32(0x800 + 4 * 4), 0);
    }

    #[test]
    fn a_probe_can_keep_global_memory_untouched() {
        let code = [
            0xdc708100, 0x00000801, // global_store_dword v1, v8, s[0:1] offset:256
            0xdd098200, 0x0f001001, // global_atomic_add v15, v1, v16, s[0:1] offset:512 sc0
            0xc0420240, 0x00000040, // s_store_dword s9, s[0:1], 0x40
            0xdc509ffc, 0x02000001, // global_load_dword v2, v1, s[0:1] offset:-4
        ];
        for discard in [false, true] {
            let mut h = Harness::new(&code);
            let data: Vec<u8> = (0..4096u64).map(|i| (i % 251) as u8).collect();
            let g = h.mem.upload(&data).unwrap();
            h.w.set_sgpr64(0, g);
            h.w.sgpr[9] = 0x5eed;
            h.set_v(1, |l| 4 * l as u32 + 4);
            h.set_v(8, |l| 0xaa00_0000 + l as u32);
            h.set_v(16, |_| 1000);
            h.probe = Some(crate::exec::interp::Probe {
                discard_global_writes: discard,
                ..Default::default()
            });
            h.run().unwrap();
            let after = h.mem.read_vec(g, 4096).unwrap();
            if discard {
                assert_eq!(after, data, "memory changed");
            } else {
                assert_ne!(after, data);
            }
            // Atomics return the current value either way; loads still load.
            assert_eq!(h.v(15)[1], pattern_dw(520));
            assert_eq!(h.v(2)[3], pattern_dw(12));
        }
    }

    #[test]
    fn faults_carry_addresses() {
        let mut h = Harness::new(&[
            0xdc508000, 0x017f0002, // global_load_dword v1, v[2:3], off
        ]);
        h.set_v(2, |l| 0x1000 + 4 * l as u32);
        let e = h.run().unwrap_err();
        assert!(e.to_string().contains("0x1000"), "{e}");
        let mut h = Harness::new(&[
            0xdc506fa0, 0x017f0002, // scratch_load_dword v1, v2, off offset:4000
        ]);
        let e = h.run().unwrap_err();
        assert!(
            e.to_string().contains("0xfa0") && e.to_string().contains("256-byte"),
            "{e}"
        );
    }
}
