//! `Int`: a 32-bit device integer that the layout algebra can compute with.
//!
//! Implementing [`IndexValue`] for it is what lets `tilegen-layout` drive device addressing
//! unchanged: `Idx<Int>` folds the static parts of an expression at generation time and emits
//! instructions only for the dynamic rest.

use std::fmt;

use inkwell::IntPredicate;
use inkwell::values::IntValue;
use tilegen_layout::{Idx, IndexValue};

use crate::kernel::Kernel;

/// A device `i32` value tied to the kernel that computes it. Index arithmetic only ever sees
/// non-negative values that fit in 31 bits (offsets into buffers and LDS), so adds and
/// multiplies carry `nuw nsw` and divisions are unsigned.
#[derive(Clone, Copy)]
pub struct Int<'k, 'ctx> {
    k: &'k Kernel<'ctx>,
    v: IntValue<'ctx>,
}

/// The builder is positioned from `Kernel::new` on; failing here is a bug in this crate, not a
/// user error, so it is not threaded through the arithmetic operators.
const POSITIONED: &str = "the kernel builder is always positioned";

impl<'k, 'ctx> Int<'k, 'ctx> {
    pub(crate) fn new(k: &'k Kernel<'ctx>, v: IntValue<'ctx>) -> Self {
        Int { k, v }
    }

    /// Wraps an `i32` value built directly with LLVM's builder.
    pub fn from_value(k: &'k Kernel<'ctx>, v: IntValue<'ctx>) -> Self {
        Int { k, v }
    }

    /// The LLVM value.
    pub fn value(&self) -> IntValue<'ctx> {
        self.v
    }

    /// The kernel it belongs to.
    pub fn kernel(&self) -> &'k Kernel<'ctx> {
        self.k
    }

    /// As a layout index (static when LLVM folded it to a constant).
    pub fn idx(self) -> Idx<Int<'k, 'ctx>> {
        Idx::dynamic(self)
    }

    fn b(&self) -> &'k inkwell::builder::Builder<'ctx> {
        &self.k.builder
    }

    fn wrap(&self, v: IntValue<'ctx>) -> Self {
        Int { k: self.k, v }
    }

    /// Splits `x + c` chains into `(x, c)`: the constant part of an offset, so it can go to an
    /// instruction's immediate field instead of a register.
    pub fn split_constant(&self) -> (Int<'k, 'ctx>, i64) {
        use inkwell::values::InstructionOpcode;
        let mut base = *self;
        let mut constant = 0i64;
        while let Some(inst) = base.v.as_instruction() {
            if inst.get_opcode() != InstructionOpcode::Add {
                break;
            }
            let (Some(a), Some(b)) = (inst.get_operand(0), inst.get_operand(1)) else {
                break;
            };
            let (inkwell::values::Operand::Value(a), inkwell::values::Operand::Value(b)) = (a, b)
            else {
                break;
            };
            let (a, b) = (a.into_int_value(), b.into_int_value());
            if let Some(c) = b.get_sign_extended_constant() {
                constant += c;
                base = self.wrap(a);
            } else if let Some(c) = a.get_sign_extended_constant() {
                constant += c;
                base = self.wrap(b);
            } else {
                break;
            }
        }
        if let Some(c) = base.v.get_sign_extended_constant() {
            return (self.wrap(self.k.ctx.i32_type().const_zero()), constant + c);
        }
        (base, constant)
    }

    /// `self < rhs` (signed), as an `i1`.
    pub fn lt(&self, rhs: &Self) -> IntValue<'ctx> {
        self.b()
            .build_int_compare(IntPredicate::SLT, self.v, rhs.v, "")
            .expect(POSITIONED)
    }

    /// `self == rhs`, as an `i1`.
    pub fn eq(&self, rhs: &Self) -> IntValue<'ctx> {
        self.b()
            .build_int_compare(IntPredicate::EQ, self.v, rhs.v, "")
            .expect(POSITIONED)
    }

    /// `cond ? self : other`.
    pub fn select(&self, cond: IntValue<'ctx>, other: &Self) -> Self {
        let v = self
            .b()
            .build_select(cond, self.v, other.v, "")
            .expect(POSITIONED);
        self.wrap(v.into_int_value())
    }

    /// `min(self, rhs)` (signed).
    pub fn min(&self, rhs: &Self) -> Self {
        let c = self.lt(rhs);
        self.select(c, rhs)
    }

    /// `max(self, rhs)` (signed).
    pub fn max(&self, rhs: &Self) -> Self {
        let c = self.lt(rhs);
        rhs.select(c, self)
    }
}

impl fmt::Debug for Int<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.v.get_zero_extended_constant() {
            Some(c) => write!(f, "{c}"),
            None => write!(f, "%{}", self.v.get_name().to_string_lossy()),
        }
    }
}

impl fmt::Display for Int<'_, '_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl IndexValue for Int<'_, '_> {
    // An `i32` whose values stay non-negative (see the type's documentation).
    const INDEX_BITS: u32 = 31;
    fn constant_like(&self, value: i64) -> Self {
        self.wrap(self.k.ctx.i32_type().const_int(value as u64, true))
    }
    fn add(&self, rhs: &Self) -> Self {
        self.wrap(
            self.b()
                .build_int_nuw_add(self.v, rhs.v, "")
                .expect(POSITIONED),
        )
    }
    fn sub(&self, rhs: &Self) -> Self {
        self.wrap(self.b().build_int_sub(self.v, rhs.v, "").expect(POSITIONED))
    }
    fn mul(&self, rhs: &Self) -> Self {
        self.wrap(
            self.b()
                .build_int_nuw_mul(self.v, rhs.v, "")
                .expect(POSITIONED),
        )
    }
    fn div(&self, rhs: &Self) -> Self {
        self.wrap(
            self.b()
                .build_int_unsigned_div(self.v, rhs.v, "")
                .expect(POSITIONED),
        )
    }
    fn rem(&self, rhs: &Self) -> Self {
        self.wrap(
            self.b()
                .build_int_unsigned_rem(self.v, rhs.v, "")
                .expect(POSITIONED),
        )
    }
    fn xor(&self, rhs: &Self) -> Self {
        self.wrap(self.b().build_xor(self.v, rhs.v, "").expect(POSITIONED))
    }
    fn and(&self, rhs: &Self) -> Self {
        self.wrap(self.b().build_and(self.v, rhs.v, "").expect(POSITIONED))
    }
    fn shr(&self, rhs: &Self) -> Self {
        self.wrap(
            self.b()
                .build_right_shift(self.v, rhs.v, false, "")
                .expect(POSITIONED),
        )
    }
    fn shl(&self, rhs: &Self) -> Self {
        self.wrap(
            self.b()
                .build_left_shift(self.v, rhs.v, "")
                .expect(POSITIONED),
        )
    }
    fn as_static(&self) -> Option<i64> {
        // LLVM's IR builder folds constant operands, so a constant result is exact.
        self.v.get_sign_extended_constant()
    }
}

macro_rules! int_op {
    ($tr:ident, $m:ident, $im:ident) => {
        impl<'k, 'ctx> std::ops::$tr for Int<'k, 'ctx> {
            type Output = Int<'k, 'ctx>;
            fn $m(self, rhs: Int<'k, 'ctx>) -> Int<'k, 'ctx> {
                IndexValue::$im(&self, &rhs)
            }
        }
        impl<'k, 'ctx> std::ops::$tr<i64> for Int<'k, 'ctx> {
            type Output = Int<'k, 'ctx>;
            fn $m(self, rhs: i64) -> Int<'k, 'ctx> {
                Idx::$im(&Idx::Dynamic(self), &Idx::Static(rhs)).to_value(&self)
            }
        }
    };
}
int_op!(Add, add, add);
int_op!(Sub, sub, sub);
int_op!(Mul, mul, mul);
int_op!(Div, div, div);
int_op!(Rem, rem, rem);
