//! Matrix instructions (VOP3P-MAI): MFMAs and `v_accvgpr_read/write`.

// Lane loops index several parallel per-lane arrays at once; an index reads clearer than
// zipped iterators there.
#![allow(clippy::needless_range_loop)]

use super::fault::{FaultKind, unimpl};
use super::fp;
use super::interp::Env;
use super::mfma::{self, BlockScales, DenseInput, DenseShape, F8f6f4Shape, Vgpr};
use super::operands::{read_s32, read_v32, vindex, vreg, write_v32};
use super::stats::Counter;
use super::wave::Wave;
use crate::isa::{Inst, Opcode, Operand, Role, ValueType};

/// Copies `n` registers starting at a VGPR/AGPR operand.
fn gather(w: &Wave, op: Operand, n: usize) -> Result<Vec<Vgpr>, FaultKind> {
    (0..n).map(|k| Ok(w.vgpr[vreg(&op, k)?])).collect()
}

/// The per-lane E8M0 byte a scale operand supplies: for a VGPR the byte `op_sel` +
/// 2 `op_sel_hi` selects (CDNA4 ISA: "{OP_SEL_HI[i], OP_SEL[i]}" picks one of the four
/// bytes); for an SGPR or inline constant the exponent field, bits 30:23 (the ISA uses only
/// the exponent portion of a constant scale; LLVM PR 158117 describes the same hardware
/// behaviour for SGPRs).
fn scale_bytes(w: &Wave, i: &Inst, role: Role, idx: u8) -> Result<[u8; 64], FaultKind> {
    let op = i.operand(role);
    let mut out = [0u8; 64];
    if vindex(&op).is_some() {
        let v = read_v32(w, op, ValueType::B32)?;
        let byte = ((i.mods.op_sel >> idx) & 1) + 2 * ((i.mods.op_sel_hi >> idx) & 1);
        for l in 0..64 {
            out[l] = (v[l] >> (8 * byte)) as u8;
        }
    } else {
        let v = read_s32(w, op, ValueType::B32)?;
        out = [((v >> 23) & 0xff) as u8; 64];
    }
    Ok(out)
}

fn dense_shape(op: Opcode) -> Option<DenseShape> {
    use DenseInput::*;
    use Opcode::*;
    let (dim, k, a, b) = match op {
        V_MFMA_F32_16X16X32_BF16 => (16, 32, Bf16, Bf16),
        V_MFMA_F32_32X32X16_BF16 => (32, 16, Bf16, Bf16),
        V_MFMA_F32_16X16X32_F16 => (16, 32, F16, F16),
        V_MFMA_F32_32X32X16_F16 => (32, 16, F16, F16),
        V_MFMA_F32_16X16X16_BF16 => (16, 16, Bf16, Bf16),
        V_MFMA_F32_32X32X8_BF16 => (32, 8, Bf16, Bf16),
        V_MFMA_F32_16X16X16_F16 => (16, 16, F16, F16),
        V_MFMA_F32_32X32X8_F16 => (32, 8, F16, F16),
        V_MFMA_I32_16X16X64_I8 => (16, 64, I8, I8),
        V_MFMA_I32_32X32X32_I8 => (32, 32, I8, I8),
        V_MFMA_I32_16X16X32_I8 => (16, 32, I8, I8),
        V_MFMA_I32_32X32X16_I8 => (32, 16, I8, I8),
        V_MFMA_F32_16X16X4_F32 => (16, 4, F32, F32),
        V_MFMA_F32_32X32X2_F32 => (32, 2, F32, F32),
        V_MFMA_F32_16X16X32_FP8_FP8 => (16, 32, Fp8, Fp8),
        V_MFMA_F32_16X16X32_FP8_BF8 => (16, 32, Fp8, Bf8),
        V_MFMA_F32_16X16X32_BF8_FP8 => (16, 32, Bf8, Fp8),
        V_MFMA_F32_16X16X32_BF8_BF8 => (16, 32, Bf8, Bf8),
        V_MFMA_F32_32X32X16_FP8_FP8 => (32, 16, Fp8, Fp8),
        V_MFMA_F32_32X32X16_FP8_BF8 => (32, 16, Fp8, Bf8),
        V_MFMA_F32_32X32X16_BF8_FP8 => (32, 16, Bf8, Fp8),
        V_MFMA_F32_32X32X16_BF8_BF8 => (32, 16, Bf8, Bf8),
        _ => return None,
    };
    Some(DenseShape {
        dim,
        k,
        input: a,
        input_b: b,
    })
}

/// Loads C (registers or an inline constant broadcast) into an accumulator block.
fn load_c(w: &Wave, i: &Inst, n: usize) -> Result<Vec<Vgpr>, FaultKind> {
    let c = i.operand(Role::Src2);
    if vindex(&c).is_some() {
        gather(w, c, n)
    } else {
        let v = read_s32(w, c, i.value_type(Role::Src2))?;
        Ok(vec![[v; 64]; n])
    }
}

fn store_d(w: &mut Wave, i: &Inst, acc: &[Vgpr]) -> Result<(), FaultKind> {
    for (k, r) in acc.iter().enumerate() {
        // The matrix core writes every lane regardless of EXEC.
        write_v32(w, i.dst(), k, u64::MAX, r)?;
    }
    Ok(())
}

/// Executes a VOP3P-MAI instruction.
pub fn exec(env: &mut Env<'_>, w: &mut Wave, i: &Inst) -> Result<(), FaultKind> {
    use Opcode::*;
    match i.op {
        V_ACCVGPR_READ_B32 | V_ACCVGPR_WRITE_B32 => {
            let v = read_v32(w, i.operand(Role::Src0), i.value_type(Role::Src0))?;
            let mask = w.exec();
            write_v32(w, i.dst(), 0, mask, &v)
        }
        _ if env.probe.as_ref().is_some_and(|p| p.skip_mfma_math) => {
            // A timing model asked for the control flow only: the accumulators keep their
            // values (see `interp::Probe`).
            env.stats[Counter::Mfma] += 1;
            Ok(())
        }
        V_MFMA_F32_16X16X128_F8F6F4
        | V_MFMA_F32_32X32X64_F8F6F4
        | V_MFMA_SCALE_F32_16X16X128_F8F6F4
        | V_MFMA_SCALE_F32_32X32X64_F8F6F4 => {
            let shape = match i.op {
                V_MFMA_F32_16X16X128_F8F6F4 | V_MFMA_SCALE_F32_16X16X128_F8F6F4 => {
                    F8f6f4Shape::M16N16K128
                }
                _ => F8f6f4Shape::M32N32K64,
            };
            let a_fmt = fp::f8f6f4_format(i.mfma.cbsz as u32)
                .ok_or(mfma::MfmaError::BadFormat(i.mfma.cbsz as u32))?;
            let b_fmt = fp::f8f6f4_format(i.mfma.blgp as u32)
                .ok_or(mfma::MfmaError::BadFormat(i.mfma.blgp as u32))?;
            let a = gather(w, i.operand(Role::Src0), mfma::f8f6f4_operand_regs(&a_fmt))?;
            let b = gather(w, i.operand(Role::Src1), mfma::f8f6f4_operand_regs(&b_fmt))?;
            let mut acc = load_c(w, i, shape.acc_regs())?;
            let scaled = matches!(
                i.op,
                V_MFMA_SCALE_F32_16X16X128_F8F6F4 | V_MFMA_SCALE_F32_32X32X64_F8F6F4
            );
            if scaled {
                let sa = scale_bytes(w, i, Role::ScaleA, 0)?;
                let sb = scale_bytes(w, i, Role::ScaleB, 1)?;
                mfma::f8f6f4(
                    shape,
                    &a_fmt,
                    &b_fmt,
                    &a,
                    &b,
                    Some(BlockScales { a: &sa, b: &sb }),
                    &mut acc,
                )?;
            } else {
                mfma::f8f6f4(shape, &a_fmt, &b_fmt, &a, &b, None, &mut acc)?;
            }
            store_d(w, i, &acc)?;
            env.stats[Counter::Mfma] += 1;
            env.stats[Counter::MfmaOps] += 2 * (shape.dim() * shape.dim() * shape.k()) as u64;
            Ok(())
        }
        op => {
            let shape = dense_shape(op).ok_or_else(|| {
                unimpl(
                    i,
                    "multi-block, f64 and sparse (smfmac) matrix instructions are not implemented",
                )
            })?;
            if i.mfma.cbsz != 0 || i.mfma.abid != 0 || i.mfma.blgp != 0 {
                return Err(unimpl(i, "cbsz/abid/blgp broadcast controls"));
            }
            let a = gather(w, i.operand(Role::Src0), shape.operand_regs())?;
            let b = gather(w, i.operand(Role::Src1), shape.operand_regs())?;
            let mut acc = load_c(w, i, shape.acc_regs())?;
            mfma::dense(&shape, &a, &b, &mut acc)?;
            store_d(w, i, &acc)?;
            env.stats[Counter::Mfma] += 1;
            env.stats[Counter::MfmaOps] += 2 * (shape.dim * shape.dim * shape.k) as u64;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::exec::testutil::Harness;

    const BF16_ONE: u32 = 0x3f80;
    const F32_ONE: u32 = 0x3f80_0000;

    /// bf16 of a small integer: the top half of its exactly representable f32.
    fn bf16(n: u32) -> u32 {
        (n as f32).to_bits() >> 16
    }

    #[test]
    fn accvgpr_moves_respect_exec() {
        let mut h = Harness::new(&[
            0xd3d94000, 0x18000101, // v_accvgpr_write_b32 a0, v1
            0xd3d84002, 0x18000100, // v_accvgpr_read_b32 v2, a0
        ]);
        h.set_v(1, |l| 100 + l as u32);
        h.set_v(2, |_| 7);
        h.w.vgpr[256] = [5; 64];
        h.w.set_exec(0xffff_0000_0000_ffff);
        h.run().unwrap();
        for l in 0..64 {
            let on = !(16..48).contains(&l);
            assert_eq!(
                h.w.vgpr[256][l],
                if on { 100 + l as u32 } else { 5 },
                "a0 lane {l}"
            );
            assert_eq!(
                h.v(2)[l],
                if on { 100 + l as u32 } else { 7 },
                "v2 lane {l}"
            );
        }
    }

    /// 32x32x16 bf16 with an inline-constant C. Operand layout (CDNA3/4 ISA, matrix core
    /// chapter): A[i][k] sits in lane i + 32*(k/8), register (k%8)/2, half k%2, and B[k][j]
    /// likewise with j for i. D[i][j] is in lane j + 32*((i/4)%2), register 4*(i/8) + i%4.
    /// Only k = 0 and k = 15 are non-zero, so D = (i+1)(j+1) + 2*2 + C with C = 1.0.
    #[test]
    fn bf16_32x32x16_layout_and_inline_c() {
        let mut h = Harness::new(&[
            0xd3b70010, 0x03ca0900, // v_mfma_f32_32x32x16_bf16 v[16:31], v[0:3], v[4:7], 1.0
        ]);
        for r in 0..8 {
            h.set_v(r, |_| 0);
        }
        for l in 0..32 {
            h.w.vgpr[0][l] = bf16(l as u32 + 1); // A[l][0]
            h.w.vgpr[4][l] = bf16(l as u32 + 1); // B[0][l]
            h.w.vgpr[3][32 + l] = bf16(2) << 16; // A[l][15]
            h.w.vgpr[7][32 + l] = bf16(2) << 16; // B[15][l]
        }
        h.run().unwrap();
        for i in 0..32 {
            for j in 0..32 {
                let (reg, lane) = (16 + 4 * (i / 8) + i % 4, j + 32 * ((i / 4) % 2));
                let want = ((i + 1) * (j + 1) + 4 + 1) as f32;
                assert_eq!(f32::from_bits(h.w.vgpr[reg][lane]), want, "D[{i}][{j}]");
            }
        }
    }

    /// With AGPR sources and destination (acc_cd) the matrix core reads C from and writes D to
    /// the accumulation registers: 32 products of 1*1 plus C = 2.
    #[test]
    fn bf16_16x16x32_accumulates_in_agprs() {
        let mut h = Harness::new(&[
            0xd3b58000, 0x04020900, // v_mfma_f32_16x16x32_bf16 a[0:3], v[0:3], v[4:7], a[0:3]
        ]);
        for r in 0..8 {
            h.set_v(r, |_| BF16_ONE | (BF16_ONE << 16));
        }
        for r in 256..260 {
            h.w.vgpr[r] = [2.0f32.to_bits(); 64];
        }
        // EXEC does not mask the matrix core.
        h.w.set_exec(1);
        h.run().unwrap();
        for r in 256..260 {
            assert_eq!(h.w.vgpr[r], [34.0f32.to_bits(); 64], "a{}", r - 256);
        }
    }

    /// Scale byte selection: the ISA picks byte {OP_SEL_HI[i], OP_SEL[i]} of each scale VGPR
    /// (i = 0 for A, 1 for B). FP8 E4M3 1.0 is 0x38. With op_sel:[1,1] op_sel_hi:[1,0] A uses
    /// byte 3 and B byte 1; A's scale exponent depends on the lane: +1 per K block (lane/16)
    /// and +4 for row 5 (lane%16 == 5), so D[i][j] = 32*(1+2+4+8) * 2^4 (B) * (16 if i == 5)
    /// + C, with C = 1.0 from v[0:3].
    #[test]
    fn scaled_fp8_16x16x128_selects_scale_bytes() {
        let mut h = Harness::new(&[
            // v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[0:3], v20, v21
            //     op_sel:[1,1,0] op_sel_hi:[1,0,0]
            0xd3ac1800, 0x08022b14, 0xd3ad0800, 0x04021904,
        ]);
        for r in 4..20 {
            h.set_v(r, |_| 0x3838_3838);
        }
        for r in 0..4 {
            h.set_v(r, |_| F32_ONE);
        }
        h.set_v(20, |l| {
            let e = 127 + (l / 16) as u32 + if l % 16 == 5 { 4 } else { 0 };
            // Other bytes hold scales that would be visibly wrong if selected.
            (e << 24) | 0x0080_9000
        });
        h.set_v(21, |_| u32::from_le_bytes([0x90, 131, 0x70, 0x60]));
        h.run().unwrap();
        for l in 0..64 {
            for r in 0..4 {
                let i = 4 * (l / 16) + r;
                let want = 480.0 * 16.0 * if i == 5 { 16.0 } else { 1.0 } + 1.0;
                assert_eq!(f32::from_bits(h.w.vgpr[r][l]), want, "D[{i}][{}]", l % 16);
            }
        }
    }

    /// A zero op_sel picks byte 0; an E8M0 0xFF scale makes the whole block NaN.
    #[test]
    fn scaled_byte_zero_and_nan_scale() {
        let mut h = Harness::new(&[
            // v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], 0, v20, v21
            //     op_sel:[1,0,0] op_sel_hi:[1,0,0]
            0xd3ac0800, 0x08022b14, 0xd3ad0800, 0x02021904,
        ]);
        for r in 4..20 {
            h.set_v(r, |_| 0x3838_3838);
        }
        // A: byte 3 = 2^3 except lane 0 (row 0, K block 0) whose byte 3 is NaN.
        h.set_v(20, |l| if l == 0 { 0xff00_0000 } else { 0x8200_0000 });
        // B: byte 0 = 2^0.
        h.set_v(21, |_| 0xffff_ff7f);
        h.run().unwrap();
        for l in 0..64 {
            for r in 0..4 {
                let d = f32::from_bits(h.w.vgpr[r][l]);
                if 4 * (l / 16) + r == 0 {
                    assert!(d.is_nan(), "row 0 col {} = {d}", l % 16);
                } else {
                    assert_eq!(d, 1024.0, "lane {l} reg {r}");
                }
            }
        }
    }
}
