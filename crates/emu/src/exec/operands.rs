//! Reading and writing decoded operands.

// Lane loops index several parallel per-lane arrays at once; an index reads clearer than
// zipped iterators there.
#![allow(clippy::needless_range_loop)]

use super::fault::FaultKind;
use super::memory::{APERTURE_SIZE, PRIVATE_APERTURE, SHARED_APERTURE};
use super::mfma::Vgpr;
use super::wave::{AGPR_BASE, Wave};
use crate::isa::{ConstReg, Operand, SpecialReg, ValueType};

fn bad(op: &Operand) -> FaultKind {
    FaultKind::BadRegister(format!("{op:?}"))
}

/// Index into the scalar file of dword `i` of a scalar register operand; `None` for `null`.
pub fn sindex(op: &Operand, i: u8) -> Result<Option<usize>, FaultKind> {
    if let Operand::Special {
        reg: SpecialReg::Null,
        ..
    } = op
    {
        return Ok(None);
    }
    let code = op.scalar_code().ok_or_else(|| bad(op))? as usize + i as usize;
    if code >= 128 {
        return Err(bad(op));
    }
    Ok(Some(code))
}

/// The 64-bit value of a hardware constant source.
fn const_value(w: &Wave, c: ConstReg) -> Result<u64, FaultKind> {
    Ok(match c {
        ConstReg::SharedBase => SHARED_APERTURE,
        ConstReg::SharedLimit => SHARED_APERTURE + APERTURE_SIZE - 1,
        ConstReg::PrivateBase => PRIVATE_APERTURE,
        ConstReg::PrivateLimit => PRIVATE_APERTURE + APERTURE_SIZE - 1,
        ConstReg::Vccz => (w.vcc() == 0) as u64,
        ConstReg::Execz => (w.exec() == 0) as u64,
        ConstReg::Scc => w.scc as u64,
        ConstReg::FlatScratchBaseLo | ConstReg::FlatScratchBaseHi => 0,
        ConstReg::PopsExitingWaveId => 0,
        ConstReg::LdsDirect => return Err(FaultKind::Unimplemented("src_lds_direct".into())),
    })
}

/// Reads a 32-bit scalar value (register, constant or literal) typed `ty`.
pub fn read_s32(w: &Wave, op: Operand, ty: ValueType) -> Result<u32, FaultKind> {
    if let Some(bits) = op.constant_bits(ty) {
        return Ok(bits as u32);
    }
    match op {
        // As a 32-bit operand the aperture registers give their low half (the hardware's
        // documented quirk: the base lives in the high dword, compilers read it 64-bit).
        Operand::Const(c) => Ok(const_value(w, c)? as u32),
        _ => Ok(sindex(&op, 0)?.map_or(0, |i| w.sgpr[i])),
    }
}

/// Reads a 64-bit scalar value typed `ty`.
pub fn read_s64(w: &Wave, op: Operand, ty: ValueType) -> Result<u64, FaultKind> {
    if let Some(bits) = op.constant_bits(ty) {
        return Ok(bits);
    }
    match op {
        Operand::Const(c) => const_value(w, c),
        _ => {
            let lo = sindex(&op, 0)?.map_or(0, |i| w.sgpr[i]) as u64;
            let hi = sindex(&op, 1)?.map_or(0, |i| w.sgpr[i]) as u64;
            Ok(lo | (hi << 32))
        }
    }
}

/// Writes a 32-bit scalar register.
pub fn write_s32(w: &mut Wave, op: Operand, v: u32) -> Result<(), FaultKind> {
    if let Some(i) = sindex(&op, 0)? {
        w.sgpr[i] = v;
    }
    Ok(())
}

/// Writes a 64-bit scalar register pair.
pub fn write_s64(w: &mut Wave, op: Operand, v: u64) -> Result<(), FaultKind> {
    if let Some(i) = sindex(&op, 0)? {
        w.sgpr[i] = v as u32;
    }
    if let Some(i) = sindex(&op, 1)? {
        w.sgpr[i] = (v >> 32) as u32;
    }
    Ok(())
}

/// Writes `vals` to consecutive scalar registers starting at `op`.
pub fn write_sregs(w: &mut Wave, op: Operand, vals: &[u32]) -> Result<(), FaultKind> {
    for (i, v) in vals.iter().enumerate() {
        if let Some(r) = sindex(&op, i as u8)? {
            w.sgpr[r] = *v;
        }
    }
    Ok(())
}

/// Reads `n` consecutive scalar registers starting at `op`.
pub fn read_sregs(w: &Wave, op: Operand, n: usize) -> Result<Vec<u32>, FaultKind> {
    (0..n)
        .map(|i| Ok(sindex(&op, i as u8)?.map_or(0, |r| w.sgpr[r])))
        .collect()
}

/// Index in [`Wave::vgpr`] of the first register of a VGPR/AGPR operand.
pub fn vindex(op: &Operand) -> Option<usize> {
    match *op {
        Operand::Vgpr { reg, .. } => Some(reg as usize),
        Operand::Agpr { reg, .. } => Some(AGPR_BASE + reg as usize),
        _ => None,
    }
}

/// Index of dword `i` of a vector register operand, checked against the register file.
pub fn vreg(op: &Operand, i: usize) -> Result<usize, FaultKind> {
    let base = vindex(op).ok_or_else(|| bad(op))?;
    let limit = if base >= AGPR_BASE {
        2 * AGPR_BASE
    } else {
        AGPR_BASE
    };
    if base + i >= limit {
        return Err(bad(op));
    }
    Ok(base + i)
}

/// Per-lane 32-bit values of a source: a VGPR/AGPR, or a scalar/constant broadcast.
pub fn read_v32(w: &Wave, op: Operand, ty: ValueType) -> Result<Vgpr, FaultKind> {
    if vindex(&op).is_some() {
        return Ok(w.vgpr[vreg(&op, 0)?]);
    }
    Ok([read_s32(w, op, ty)?; 64])
}

/// Per-lane 64-bit values of a source (register pair or scalar/constant broadcast).
pub fn read_v64(w: &Wave, op: Operand, ty: ValueType) -> Result<[u64; 64], FaultKind> {
    if vindex(&op).is_some() {
        let lo = &w.vgpr[vreg(&op, 0)?];
        let hi = &w.vgpr[vreg(&op, 1)?];
        let mut out = [0u64; 64];
        for l in 0..64 {
            out[l] = lo[l] as u64 | ((hi[l] as u64) << 32);
        }
        return Ok(out);
    }
    Ok([read_s64(w, op, ty)?; 64])
}

/// Writes dword `i` of a vector destination for the lanes in `mask`.
pub fn write_v32(
    w: &mut Wave,
    op: Operand,
    i: usize,
    mask: u64,
    vals: &Vgpr,
) -> Result<(), FaultKind> {
    let r = vreg(&op, i)?;
    w.write_lanes(r, mask, vals);
    Ok(())
}

/// Writes a 64-bit vector destination for the lanes in `mask`.
pub fn write_v64(w: &mut Wave, op: Operand, mask: u64, vals: &[u64; 64]) -> Result<(), FaultKind> {
    let mut lo = [0u32; 64];
    let mut hi = [0u32; 64];
    for l in 0..64 {
        lo[l] = vals[l] as u32;
        hi[l] = (vals[l] >> 32) as u32;
    }
    write_v32(w, op, 0, mask, &lo)?;
    write_v32(w, op, 1, mask, &hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::isa::InlineFloat;

    #[test]
    fn scalar_reads_and_writes() {
        let mut w = Wave::new(0, 0);
        let s4 = Operand::Sgpr { reg: 4, count: 2 };
        write_s64(&mut w, s4, 0x1122_3344_5566_7788).unwrap();
        assert_eq!(w.sgpr[4], 0x5566_7788);
        assert_eq!(
            read_s64(&w, s4, ValueType::I64).unwrap(),
            0x1122_3344_5566_7788
        );
        let vcc = Operand::Special {
            reg: SpecialReg::VccLo,
            count: 2,
        };
        write_s64(&mut w, vcc, 5).unwrap();
        assert_eq!(w.vcc(), 5);
        let null = Operand::Special {
            reg: SpecialReg::Null,
            count: 1,
        };
        write_s32(&mut w, null, 9).unwrap();
        assert_eq!(read_s32(&w, null, ValueType::B32).unwrap(), 0);
        assert_eq!(
            read_s32(&w, Operand::InlineInt(-3), ValueType::B32).unwrap(),
            (-3i32) as u32
        );
        assert_eq!(
            read_s32(&w, Operand::InlineFloat(InlineFloat::Two), ValueType::B32).unwrap(),
            2.0f32.to_bits()
        );
        assert_eq!(
            read_s64(&w, Operand::Const(ConstReg::SharedBase), ValueType::I64).unwrap(),
            SHARED_APERTURE
        );
        assert_eq!(
            read_s32(&w, Operand::Const(ConstReg::Vccz), ValueType::B32).unwrap(),
            0
        );
    }

    #[test]
    fn vector_reads_broadcast_constants() {
        let mut w = Wave::new(0, 0);
        w.vgpr[7][3] = 42;
        w.vgpr[AGPR_BASE + 1][0] = 9;
        let v = read_v32(&w, Operand::Vgpr { reg: 7, count: 1 }, ValueType::B32).unwrap();
        assert_eq!(v[3], 42);
        let a = read_v32(&w, Operand::Agpr { reg: 1, count: 1 }, ValueType::B32).unwrap();
        assert_eq!(a[0], 9);
        let c = read_v32(&w, Operand::Literal(77), ValueType::B32).unwrap();
        assert!(c.iter().all(|&x| x == 77));
        assert!(vreg(&Operand::Vgpr { reg: 255, count: 2 }, 1).is_err());
    }
}
