//! The block-scaled MFMA of gfx950 and the scheduling controls around it.

use crate::error::{DslError, Result};
use crate::int::Int;
use crate::kernel::Kernel;
use crate::value::{Elem, Ty, Value};

/// Operand formats of `v_mfma_scale_f32_*_f8f6f4` (the `cbsz`/`blgp` codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MxFormat {
    /// FP8 E4M3.
    Fp8 = 0,
    /// BF8 E5M2.
    Bf8 = 1,
    /// FP6 E2M3.
    Fp6 = 2,
    /// BF6 E3M2.
    Bf6 = 3,
    /// FP4 E2M1.
    Fp4 = 4,
}

impl MxFormat {
    /// Dwords per lane of one operand: 32 elements of 8, 6 or 4 bits.
    pub fn operand_dwords(self) -> u32 {
        match self {
            MxFormat::Fp8 | MxFormat::Bf8 => 8,
            MxFormat::Fp6 | MxFormat::Bf6 => 6,
            MxFormat::Fp4 => 4,
        }
    }
}

/// Shapes of the f8f6f4 MFMA (`v_mfma[_scale]_f32_{16x16x128,32x32x64}_f8f6f4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum MfmaShape {
    /// 16x16 output, K = 128 per instruction, 4 accumulator dwords per lane.
    #[serde(rename = "16x16x128")]
    #[cfg_attr(feature = "clap", value(name = "16x16x128"))]
    M16N16K128,
    /// 32x32 output, K = 64 per instruction, 16 accumulator dwords per lane.
    #[serde(rename = "32x32x64")]
    #[cfg_attr(feature = "clap", value(name = "32x32x64"))]
    M32N32K64,
}

impl MfmaShape {
    /// Rows (and columns) of the output tile.
    pub fn mn(self) -> u32 {
        match self {
            MfmaShape::M16N16K128 => 16,
            MfmaShape::M32N32K64 => 32,
        }
    }

    /// K per instruction.
    pub fn k(self) -> u32 {
        match self {
            MfmaShape::M16N16K128 => 128,
            MfmaShape::M32N32K64 => 64,
        }
    }

    /// f32 accumulators per lane.
    pub fn acc_dwords(self) -> u32 {
        self.mn() * self.mn() / 64
    }

    fn intrinsic(self) -> &'static str {
        match self {
            MfmaShape::M16N16K128 => "llvm.amdgcn.mfma.scale.f32.16x16x128.f8f6f4",
            MfmaShape::M32N32K64 => "llvm.amdgcn.mfma.scale.f32.32x32x64.f8f6f4",
        }
    }
}

/// Shapes of the dense bf16 MFMA (`v_mfma_f32_{16x16x32,32x32x16}_bf16`, 8 bf16 values of A
/// and of B per lane).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bf16Shape {
    /// 16x16 output, K = 32, 4 accumulator dwords per lane.
    M16N16K32,
    /// 32x32 output, K = 16, 16 accumulator dwords per lane.
    M32N32K16,
}

impl Bf16Shape {
    /// Rows (and columns) of the output tile.
    pub fn mn(self) -> u32 {
        match self {
            Bf16Shape::M16N16K32 => 16,
            Bf16Shape::M32N32K16 => 32,
        }
    }

    /// K per instruction.
    pub fn k(self) -> u32 {
        match self {
            Bf16Shape::M16N16K32 => 32,
            Bf16Shape::M32N32K16 => 16,
        }
    }

    /// f32 accumulators per lane.
    pub fn acc_dwords(self) -> u32 {
        self.mn() * self.mn() / 64
    }

    fn intrinsic(self) -> &'static str {
        match self {
            Bf16Shape::M16N16K32 => "llvm.amdgcn.mfma.f32.16x16x32.bf16",
            Bf16Shape::M32N32K16 => "llvm.amdgcn.mfma.f32.32x32x16.bf16",
        }
    }
}

/// One side of a scaled MFMA: its data, format, and E8M0 scale dword with the byte to use.
#[derive(Clone, Copy)]
pub struct MfmaOperand<'k, 'ctx> {
    /// `<N x i32>` data (N = [`MxFormat::operand_dwords`]).
    pub data: Value<'ctx>,
    /// Element format.
    pub format: MxFormat,
    /// A VGPR dword holding up to four E8M0 scale bytes (an SGPR or constant scale is read from
    /// bits [30:23] by the hardware, so the scale is always a per-lane value here).
    pub scale: Int<'k, 'ctx>,
    /// Which byte of `scale` applies (0..=3).
    pub scale_byte: u32,
}

impl<'ctx> Kernel<'ctx> {
    /// `D = C + scaled(A) * scaled(B)` with `v_mfma_scale_f32_*_f8f6f4`. `a` is the matrix
    /// whose rows index D's rows (lane `l % mn`), `b` the one whose rows index D's columns.
    pub fn mfma_scale(
        &self,
        shape: MfmaShape,
        a: MfmaOperand<'_, 'ctx>,
        b: MfmaOperand<'_, 'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        for (side, op) in [("A", &a), ("B", &b)] {
            if op.scale_byte > 3 {
                return Err(DslError::Operand {
                    op: "mfma_scale",
                    rule: format!("{side} scale byte {} must be 0..=3", op.scale_byte),
                });
            }
        }
        self.f8f6f4(
            shape,
            (a.data, a.format, a.scale_byte, a.scale),
            (b.data, b.format, b.scale_byte, b.scale),
            c,
        )
    }

    /// `D = C + A * B` with the unscaled `v_mfma_f32_*_f8f6f4` (A in format `a_format`, B in
    /// `b_format`). LLVM spells it as the scaled intrinsic with constant zero scales and byte
    /// selects, which its instruction selector turns into the unscaled instruction.
    pub fn mfma_f8f6f4(
        &self,
        shape: MfmaShape,
        a: Value<'ctx>,
        a_format: MxFormat,
        b: Value<'ctx>,
        b_format: MxFormat,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        let zero = self.i32(0);
        self.f8f6f4(shape, (a, a_format, 0, zero), (b, b_format, 0, zero), c)
    }

    fn f8f6f4(
        &self,
        shape: MfmaShape,
        a: (Value<'ctx>, MxFormat, u32, Int<'_, 'ctx>),
        b: (Value<'ctx>, MxFormat, u32, Int<'_, 'ctx>),
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        for (side, (data, format, _, _)) in [("A", &a), ("B", &b)] {
            let want = Ty::dwords(format.operand_dwords());
            if data.ty() != want {
                return Err(DslError::Operand {
                    op: "mfma",
                    rule: format!("{side} operand in {format:?} must be {want:?}"),
                });
            }
        }
        check_acc(c, shape.acc_dwords())?;
        let i32t = self.ctx.i32_type();
        let imm = |v: u32| i32t.const_int(v as u64, false).into();
        let v = self.call_intrinsic_value(
            shape.intrinsic(),
            &[a.0.v.get_type(), b.0.v.get_type()],
            &[
                a.0.v.into(),
                b.0.v.into(),
                c.v.into(),
                imm(a.1 as u32),
                imm(b.1 as u32),
                imm(a.2),
                a.3.value().into(),
                imm(b.2),
                b.3.value().into(),
            ],
        )?;
        Value::new(v)
    }

    /// `D = C + A * B` with `v_mfma_f32_*_bf16`: `a` and `b` are `<8 x bf16>`.
    pub fn mfma_bf16(
        &self,
        shape: Bf16Shape,
        a: Value<'ctx>,
        b: Value<'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>> {
        let want = Ty::vector(Elem::Bf16, 8);
        for (side, op) in [("A", &a), ("B", &b)] {
            if op.ty() != want {
                return Err(DslError::Operand {
                    op: "mfma_bf16",
                    rule: format!("{side} operand must be {want:?}, not {:?}", op.ty()),
                });
            }
        }
        check_acc(c, shape.acc_dwords())?;
        let i32t = self.ctx.i32_type();
        let zero = i32t.const_zero().into();
        let v = self.call_intrinsic_value(
            shape.intrinsic(),
            &[],
            &[a.v.into(), b.v.into(), c.v.into(), zero, zero, zero],
        )?;
        Value::new(v)
    }

    /// `s_setprio prio` (0..=3): raise this wave's issue priority around a latency-critical
    /// stretch.
    pub fn setprio(&self, prio: u16) -> Result<()> {
        if prio > 3 {
            return Err(DslError::Operand {
                op: "setprio",
                rule: format!("priority {prio} must be 0..=3"),
            });
        }
        let v = self.ctx.i16_type().const_int(prio as u64, false);
        self.call_intrinsic("llvm.amdgcn.s.setprio", &[], &[v.into()])?;
        Ok(())
    }

    /// `sched_barrier(mask)`: instructions of the classes in `mask` may cross it (0 = none).
    pub fn sched_barrier(&self, mask: u32) -> Result<()> {
        let v = self.ctx.i32_type().const_int(mask as u64, false);
        self.call_intrinsic("llvm.amdgcn.sched.barrier", &[], &[v.into()])?;
        Ok(())
    }

    /// `sched_group_barrier(mask, size, sync_id)`: ask the scheduler for a group of `size`
    /// instructions of the classes in `mask` at this point of the pipeline `sync_id`.
    pub fn sched_group_barrier(&self, mask: u32, size: u32, sync_id: u32) -> Result<()> {
        let i32t = self.ctx.i32_type();
        let c = |v: u32| i32t.const_int(v as u64, false).into();
        self.call_intrinsic(
            "llvm.amdgcn.sched.group.barrier",
            &[],
            &[c(mask), c(size), c(sync_id)],
        )?;
        Ok(())
    }

    /// `s_waitcnt` with the raw 16-bit gfx9 encoding (see [`waitcnt_vmcnt`]).
    pub fn s_waitcnt(&self, imm: u32) -> Result<()> {
        let v = self.ctx.i32_type().const_int(imm as u64, false);
        self.call_intrinsic("llvm.amdgcn.s.waitcnt", &[], &[v.into()])?;
        Ok(())
    }
}

fn check_acc(c: Value<'_>, dwords: u32) -> Result<()> {
    if c.ty() != Ty::vector(Elem::F32, dwords) {
        return Err(DslError::Operand {
            op: "mfma",
            rule: format!("accumulator must be <{dwords} x float>, not {:?}", c.ty()),
        });
    }
    Ok(())
}

/// Scheduler class masks of `sched_barrier` / `sched_group_barrier`.
pub mod sched {
    /// MFMA / WMMA.
    pub const MFMA: u32 = 0x8;
    /// All VMEM.
    pub const VMEM: u32 = 0x10;
    /// VMEM reads.
    pub const VMEM_READ: u32 = 0x20;
    /// VMEM writes.
    pub const VMEM_WRITE: u32 = 0x40;
    /// All DS.
    pub const DS: u32 = 0x80;
    /// DS reads.
    pub const DS_READ: u32 = 0x100;
    /// DS writes.
    pub const DS_WRITE: u32 = 0x200;
    /// Non-memory ALU (VALU, SALU).
    pub const ALU: u32 = 0x1;
    /// VALU.
    pub const VALU: u32 = 0x2;
    /// SALU.
    pub const SALU: u32 = 0x4;
}

/// The gfx9 `s_waitcnt` immediate that waits until at most `vmcnt` vector-memory operations are
/// outstanding, leaving the other counters unconstrained (vmcnt is split over bits 3:0 and
/// 15:14; expcnt 6:4 and lgkmcnt 11:8 at their maxima).
pub fn waitcnt_vmcnt(vmcnt: u32) -> u32 {
    let v = vmcnt.min(63);
    (v & 0xF) | ((v >> 4) << 14) | (0x7 << 4) | (0xF << 8)
}
