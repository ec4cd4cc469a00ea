//! Floating-point arithmetic on device values, the FP8 pack conversion, and cross-lane reads:
//! what a kernel needs beyond index arithmetic to compute a softmax (scales, maxima,
//! exponentials, sums across the lanes that share a row).
//!
//! Operands are `f32` (or bf16) scalars or vectors of one type; binary operations require both
//! sides to have the same [`Ty`].

use inkwell::FloatPredicate;
use inkwell::values::BasicValueEnum;

use crate::error::{DslError, Result};
use crate::int::Int;
use crate::kernel::Kernel;
use crate::value::{Cond, Elem, Ty, Value};

/// A binary floating-point operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FloatOp {
    /// `a + b`.
    Add,
    /// `a - b`.
    Sub,
    /// `a * b`.
    Mul,
    /// `a / b` (correctly rounded).
    Div,
    /// `maxnum(a, b)` (a NaN operand yields the other).
    Max,
}

impl<'ctx> Kernel<'ctx> {
    /// An `f32` constant.
    pub fn f32(&self, v: f32) -> Value<'ctx> {
        Value::typed(self.ctx.f32_type().const_float(v as f64).into(), Ty::F32)
    }

    fn float_operand(&self, op: &'static str, v: &Value<'ctx>) -> Result<()> {
        if !matches!(v.ty().elem, Elem::F32 | Elem::Bf16) {
            return Err(DslError::Operand {
                op,
                rule: format!("{:?} is not a float value", v.ty()),
            });
        }
        Ok(())
    }

    /// `a op b`, element-wise; `a` and `b` have the same float type.
    pub fn fbin(&self, op: FloatOp, a: Value<'ctx>, b: Value<'ctx>) -> Result<Value<'ctx>> {
        self.float_operand("float op", &a)?;
        if a.ty() != b.ty() {
            return Err(DslError::Operand {
                op: "float op",
                rule: format!("{:?} and {:?} differ", a.ty(), b.ty()),
            });
        }
        let bld = &self.builder;
        let out: BasicValueEnum<'ctx> = match (a.v, b.v) {
            (BasicValueEnum::FloatValue(x), BasicValueEnum::FloatValue(y)) => match op {
                FloatOp::Add => bld.build_float_add(x, y, "")?.into(),
                FloatOp::Sub => bld.build_float_sub(x, y, "")?.into(),
                FloatOp::Mul => bld.build_float_mul(x, y, "")?.into(),
                FloatOp::Div => bld.build_float_div(x, y, "")?.into(),
                FloatOp::Max => return self.float_intrinsic("llvm.maxnum", &[a, b]),
            },
            (BasicValueEnum::VectorValue(x), BasicValueEnum::VectorValue(y)) => match op {
                FloatOp::Add => bld.build_float_add(x, y, "")?.into(),
                FloatOp::Sub => bld.build_float_sub(x, y, "")?.into(),
                FloatOp::Mul => bld.build_float_mul(x, y, "")?.into(),
                FloatOp::Div => bld.build_float_div(x, y, "")?.into(),
                FloatOp::Max => return self.float_intrinsic("llvm.maxnum", &[a, b]),
            },
            _ => {
                return Err(DslError::Operand {
                    op: "float op",
                    rule: "operands are not both float scalars or both float vectors".into(),
                });
            }
        };
        Value::new(out)
    }

    /// `a + b`.
    pub fn fadd(&self, a: Value<'ctx>, b: Value<'ctx>) -> Result<Value<'ctx>> {
        self.fbin(FloatOp::Add, a, b)
    }

    /// `a - b`.
    pub fn fsub(&self, a: Value<'ctx>, b: Value<'ctx>) -> Result<Value<'ctx>> {
        self.fbin(FloatOp::Sub, a, b)
    }

    /// `a * b`.
    pub fn fmul(&self, a: Value<'ctx>, b: Value<'ctx>) -> Result<Value<'ctx>> {
        self.fbin(FloatOp::Mul, a, b)
    }

    /// `a / b`.
    pub fn fdiv(&self, a: Value<'ctx>, b: Value<'ctx>) -> Result<Value<'ctx>> {
        self.fbin(FloatOp::Div, a, b)
    }

    /// `maxnum(a, b)`.
    pub fn fmax(&self, a: Value<'ctx>, b: Value<'ctx>) -> Result<Value<'ctx>> {
        self.fbin(FloatOp::Max, a, b)
    }

    /// `2^a`, element-wise (`2^-inf = 0`).
    pub fn exp2(&self, a: Value<'ctx>) -> Result<Value<'ctx>> {
        self.float_operand("exp2", &a)?;
        self.float_intrinsic("llvm.exp2", &[a])
    }

    /// `2^a` on f32 elements by the hardware's `v_exp_f32` alone (`2^-inf = 0`), where results
    /// below 2^-126 are flushed to zero. [`Kernel::exp2`] keeps those subnormal results, and
    /// LLVM pays for that with a compare, a select and a rescale around every exponential;
    /// a softmax, whose probabilities that small are zero in any output format, need not.
    pub fn exp2_ftz(&self, a: Value<'ctx>) -> Result<Value<'ctx>> {
        self.f32_hardware("exp2_ftz", "llvm.amdgcn.exp2", a)
    }

    /// `1 / a` on f32 elements by the hardware's `v_rcp_f32` alone (within 1 ulp; results below
    /// 2^-126 flushed to zero). A division [`Kernel::fdiv`] is correctly rounded, which LLVM
    /// pays for with a scale, a Newton step and a fix-up of about ten instructions and their
    /// hazard waits.
    pub fn rcp_approx(&self, a: Value<'ctx>) -> Result<Value<'ctx>> {
        self.f32_hardware("rcp_approx", "llvm.amdgcn.rcp", a)
    }

    /// The one-operand f32 intrinsic `name` on each element of `a`.
    fn f32_hardware(&self, op: &'static str, name: &str, a: Value<'ctx>) -> Result<Value<'ctx>> {
        let ty = a.ty();
        if ty.elem != Elem::F32 {
            return Err(DslError::Operand {
                op,
                rule: format!("takes f32 elements, not {ty:?}"),
            });
        }
        let f32t = self.ctx.f32_type();
        let one = |x: Value<'ctx>| -> Result<Value<'ctx>> {
            Value::new(self.call_intrinsic_value(name, &[f32t.into()], &[x.v.into()])?)
        };
        if ty.lanes == 1 {
            return one(a);
        }
        let parts = (0..ty.lanes)
            .map(|e| one(self.slice(a, e, 1)?))
            .collect::<Result<Vec<_>>>()?;
        self.concat(&parts)
    }

    /// `|a|`, element-wise.
    pub fn fabs(&self, a: Value<'ctx>) -> Result<Value<'ctx>> {
        self.float_operand("fabs", &a)?;
        self.float_intrinsic("llvm.fabs", &[a])
    }

    fn float_intrinsic(&self, name: &str, args: &[Value<'ctx>]) -> Result<Value<'ctx>> {
        let ty = args[0].v.get_type();
        let args: Vec<_> = args.iter().map(|a| a.v.into()).collect();
        let v = self.call_intrinsic_value(name, &[ty], &args)?;
        Value::new(v)
    }

    /// `a < b` on `f32` scalars (ordered: false when either is NaN).
    pub fn flt(&self, a: Value<'ctx>, b: Value<'ctx>) -> Result<Cond<'ctx>> {
        if a.ty() != Ty::F32 || b.ty() != Ty::F32 {
            return Err(DslError::Operand {
                op: "flt",
                rule: format!("compares f32 scalars, not {:?} and {:?}", a.ty(), b.ty()),
            });
        }
        let c = self.builder.build_float_compare(
            FloatPredicate::OLT,
            a.v.into_float_value(),
            b.v.into_float_value(),
            "",
        )?;
        Ok(Cond(c))
    }

    /// `cond ? a : b` for values of one type (a scalar condition selects whole vectors).
    pub fn select(&self, cond: Cond<'ctx>, a: Value<'ctx>, b: Value<'ctx>) -> Result<Value<'ctx>> {
        if a.ty() != b.ty() {
            return Err(DslError::Operand {
                op: "select",
                rule: format!("{:?} and {:?} differ", a.ty(), b.ty()),
            });
        }
        Value::new(self.builder.build_select(cond.0, a.v, b.v, "")?)
    }

    /// A vector of `lanes` copies of the scalar `v`.
    pub fn splat(&self, v: Value<'ctx>, lanes: u32) -> Result<Value<'ctx>> {
        if v.ty().lanes != 1 || lanes == 0 {
            return Err(DslError::Operand {
                op: "splat",
                rule: format!("{lanes} copies of {:?}: a scalar, at least once", v.ty()),
            });
        }
        self.concat(&vec![v; lanes as usize])
    }

    /// `v_cvt_pk_fp8_f32`: `a` and `b` (f32) rounded to nearest even FP8 E4M3 codes, packed as
    /// the low (`high == false`) or high 16 bits of `old` (an `i32`), the other half kept.
    /// Magnitudes past 448 follow the MODE register's overflow setting; callers keep them in
    /// range.
    pub fn cvt_pk_fp8(
        &self,
        a: Value<'ctx>,
        b: Value<'ctx>,
        old: Value<'ctx>,
        high: bool,
    ) -> Result<Value<'ctx>> {
        if a.ty() != Ty::F32 || b.ty() != Ty::F32 || old.ty() != Ty::I32 {
            return Err(DslError::Operand {
                op: "cvt_pk_fp8",
                rule: format!(
                    "converts two f32 into an i32, not {:?}, {:?} into {:?}",
                    a.ty(),
                    b.ty(),
                    old.ty()
                ),
            });
        }
        let sel = self.ctx.bool_type().const_int(high as u64, false);
        let v = self.call_intrinsic_value(
            "llvm.amdgcn.cvt.pk.fp8.f32",
            &[],
            &[a.v.into(), b.v.into(), old.v.into(), sel.into()],
        )?;
        Value::new(v)
    }

    /// `ds_bpermute_b32`: each lane reads `data` of lane `(byte_addr / 4) % 64` (a pull; every
    /// lane of the wave must be active).
    pub fn bpermute(&self, byte_addr: Int<'_, 'ctx>, data: Value<'ctx>) -> Result<Value<'ctx>> {
        if data.ty().bytes() != 4 || data.ty().lanes != 1 {
            return Err(DslError::Operand {
                op: "bpermute",
                rule: format!("moves 32-bit scalars, not {:?}", data.ty()),
            });
        }
        let as_i32 = self.bitcast(data, Ty::I32)?;
        let v = self.call_intrinsic_value(
            "llvm.amdgcn.ds.bpermute",
            &[],
            &[byte_addr.value().into(), as_i32.v.into()],
        )?;
        self.bitcast(Value::new(v)?, data.ty())
    }

    /// The value `v` holds in lane `lane ^ mask` (`lane` is this lane's id in the wave).
    pub fn shuffle_xor(
        &self,
        v: Value<'ctx>,
        lane: Int<'_, 'ctx>,
        mask: i64,
    ) -> Result<Value<'ctx>> {
        if !(1..64).contains(&mask) {
            return Err(DslError::Operand {
                op: "shuffle_xor",
                rule: format!("lane mask {mask} must be in 1..64"),
            });
        }
        let mask = lane.kernel().i32(mask);
        let src = tilegen_layout::IndexValue::xor(&lane, &mask) * 4;
        self.bpermute(src, v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::test_kernel;
    use inkwell::context::Context;

    #[test]
    fn refusals_name_the_rule() {
        let ctx = Context::create();
        let k = test_kernel(&ctx);
        let one = k.f32(1.0);
        let i = Value::from(k.i32(1));
        assert!(k.fadd(one, i).is_err());
        assert!(k.exp2(i).is_err());
        assert!(k.cvt_pk_fp8(one, one, one, false).is_err());
        assert!(k.shuffle_xor(one, k.i32(0), 64).is_err());
        let v = k.splat(one, 4).unwrap();
        assert_eq!(v.ty(), Ty::vector(Elem::F32, 4));
        assert!(k.select(k.flt(one, one).unwrap(), v, one).is_err());
    }
}
