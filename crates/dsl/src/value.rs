//! Typed device values: what kernels hold between builder calls, without naming LLVM types.
//!
//! A [`Value`] is an SSA value of a [`Ty`] (a scalar or a short vector of one element type).
//! The operations kernels need on whole values (vector slices and concatenation, bitcasts,
//! numeric conversions) are [`Kernel`] methods here; index arithmetic stays on [`Int`].

use inkwell::types::BasicTypeEnum;
use inkwell::values::{BasicValueEnum, IntValue, VectorValue};

use crate::error::{DslError, Result};
use crate::int::Int;
use crate::kernel::Kernel;

/// Element types of device values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem {
    /// 8-bit integer.
    I8,
    /// 16-bit integer.
    I16,
    /// 32-bit integer.
    I32,
    /// bfloat16.
    Bf16,
    /// IEEE single.
    F32,
}

impl Elem {
    /// Bits of one element.
    pub fn bits(self) -> u32 {
        match self {
            Elem::I8 => 8,
            Elem::I16 | Elem::Bf16 => 16,
            Elem::I32 | Elem::F32 => 32,
        }
    }

    fn is_float(self) -> bool {
        matches!(self, Elem::Bf16 | Elem::F32)
    }
}

/// A value type: one element (`lanes == 1`) or a vector of `lanes` elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ty {
    /// Element type.
    pub elem: Elem,
    /// Elements (1 for a scalar).
    pub lanes: u32,
}

impl Ty {
    /// `i32`.
    pub const I32: Ty = Ty::scalar(Elem::I32);
    /// `f32`.
    pub const F32: Ty = Ty::scalar(Elem::F32);
    /// `i8`.
    pub const I8: Ty = Ty::scalar(Elem::I8);

    /// A scalar.
    pub const fn scalar(elem: Elem) -> Ty {
        Ty { elem, lanes: 1 }
    }

    /// A vector of `lanes` elements (`lanes == 1` is the scalar).
    pub const fn vector(elem: Elem, lanes: u32) -> Ty {
        Ty { elem, lanes }
    }

    /// `<dwords x i32>` (`i32` for one): how memory operations move bytes.
    pub const fn dwords(dwords: u32) -> Ty {
        Ty::vector(Elem::I32, dwords)
    }

    /// Size in bytes.
    pub fn bytes(self) -> u32 {
        self.elem.bits() * self.lanes / 8
    }

    pub(crate) fn llvm<'ctx>(self, k: &Kernel<'ctx>) -> BasicTypeEnum<'ctx> {
        let c = k.ctx;
        let e: BasicTypeEnum<'ctx> = match self.elem {
            Elem::I8 => c.i8_type().into(),
            Elem::I16 => c.i16_type().into(),
            Elem::I32 => c.i32_type().into(),
            Elem::Bf16 => c.bf16_type().into(),
            Elem::F32 => c.f32_type().into(),
        };
        if self.lanes == 1 {
            return e;
        }
        match e {
            BasicTypeEnum::IntType(t) => t.vec_type(self.lanes).into(),
            BasicTypeEnum::FloatType(t) => t.vec_type(self.lanes).into(),
            _ => unreachable!("element types are integers or floats"),
        }
    }

    fn of(t: BasicTypeEnum<'_>) -> Option<Ty> {
        let (elem, lanes) = match t {
            BasicTypeEnum::VectorType(v) => (v.get_element_type(), v.get_size()),
            other => (other, 1),
        };
        let elem = match elem {
            BasicTypeEnum::IntType(i) => match i.get_bit_width() {
                8 => Elem::I8,
                16 => Elem::I16,
                32 => Elem::I32,
                _ => return None,
            },
            BasicTypeEnum::FloatType(f) => {
                if f == f.get_context().f32_type() {
                    Elem::F32
                } else if f == f.get_context().bf16_type() {
                    Elem::Bf16
                } else {
                    return None;
                }
            }
            _ => return None,
        };
        Some(Ty { elem, lanes })
    }
}

/// A device value of a known [`Ty`].
#[derive(Debug, Clone, Copy)]
pub struct Value<'ctx> {
    pub(crate) v: BasicValueEnum<'ctx>,
    ty: Ty,
}

impl<'ctx> Value<'ctx> {
    /// Wraps an LLVM value built inside this crate; its type must be one of [`Ty`]'s.
    pub(crate) fn new(v: BasicValueEnum<'ctx>) -> Result<Self> {
        let ty =
            Ty::of(v.get_type()).ok_or_else(|| DslError::UntypedValue(v.get_type().to_string()))?;
        Ok(Value { v, ty })
    }

    /// Wraps an LLVM value whose type is known to be `ty`.
    pub(crate) fn typed(v: BasicValueEnum<'ctx>, ty: Ty) -> Self {
        Value { v, ty }
    }

    /// Its type.
    pub fn ty(&self) -> Ty {
        self.ty
    }

    /// An `i32` value as an index integer.
    pub fn int<'k>(self, k: &'k Kernel<'ctx>) -> Result<Int<'k, 'ctx>> {
        if self.ty != Ty::I32 {
            return Err(DslError::Operand {
                op: "int",
                rule: format!("{:?} is not an i32", self.ty),
            });
        }
        Ok(Int::from_value(k, self.v.into_int_value()))
    }

    fn vector(&self) -> VectorValue<'ctx> {
        match self.v {
            BasicValueEnum::VectorValue(v) => v,
            _ => unreachable!("checked by the caller: lanes > 1"),
        }
    }
}

/// A wave-level condition (an `i1`), as [`Int`]'s comparisons produce it.
#[derive(Debug, Clone, Copy)]
pub struct Cond<'ctx>(pub(crate) IntValue<'ctx>);

impl<'ctx> Cond<'ctx> {
    /// The condition's `i1`.
    pub fn value(self) -> IntValue<'ctx> {
        self.0
    }
}

impl<'ctx> From<IntValue<'ctx>> for Cond<'ctx> {
    fn from(v: IntValue<'ctx>) -> Self {
        Cond(v)
    }
}

impl<'ctx> From<Int<'_, 'ctx>> for Value<'ctx> {
    fn from(i: Int<'_, 'ctx>) -> Self {
        Value {
            v: i.value().into(),
            ty: Ty::I32,
        }
    }
}

impl<'ctx> Kernel<'ctx> {
    /// The zero of `ty`.
    pub fn zero(&self, ty: Ty) -> Value<'ctx> {
        Value {
            v: ty.llvm(self).const_zero(),
            ty,
        }
    }

    /// Reinterprets the bits of `v` as `ty` (same size).
    pub fn bitcast(&self, v: Value<'ctx>, ty: Ty) -> Result<Value<'ctx>> {
        if v.ty.bytes() != ty.bytes() {
            return Err(DslError::Operand {
                op: "bitcast",
                rule: format!("{:?} and {ty:?} differ in size", v.ty),
            });
        }
        if v.ty == ty {
            return Ok(v);
        }
        Value::new(self.builder.build_bit_cast(v.v, ty.llvm(self), "")?)
    }

    /// Converts each element to `elem`: floats round to nearest even when narrowing and widen
    /// exactly, integers widen with zeros (index bytes and scale bytes are unsigned).
    pub fn convert(&self, v: Value<'ctx>, elem: Elem) -> Result<Value<'ctx>> {
        let to = Ty::vector(elem, v.ty.lanes);
        if v.ty == to {
            return Ok(v);
        }
        let t = to.llvm(self);
        let b = &self.builder;
        let out: BasicValueEnum<'ctx> = match (v.ty.elem.is_float(), elem.is_float()) {
            (true, true) if elem.bits() < v.ty.elem.bits() => match v.v {
                BasicValueEnum::VectorValue(x) => {
                    b.build_float_trunc(x, t.into_vector_type(), "")?.into()
                }
                x => b
                    .build_float_trunc(x.into_float_value(), t.into_float_type(), "")?
                    .into(),
            },
            (true, true) if elem.bits() > v.ty.elem.bits() => match v.v {
                BasicValueEnum::VectorValue(x) => {
                    b.build_float_ext(x, t.into_vector_type(), "")?.into()
                }
                x => b
                    .build_float_ext(x.into_float_value(), t.into_float_type(), "")?
                    .into(),
            },
            (false, false) if elem.bits() > v.ty.elem.bits() => match v.v {
                BasicValueEnum::VectorValue(x) => {
                    b.build_int_z_extend(x, t.into_vector_type(), "")?.into()
                }
                x => b
                    .build_int_z_extend(x.into_int_value(), t.into_int_type(), "")?
                    .into(),
            },
            _ => {
                return Err(DslError::Operand {
                    op: "convert",
                    rule: format!(
                        "{:?} to {elem:?}: only between float widths and widening integers",
                        v.ty
                    ),
                });
            }
        };
        Value::new(out)
    }

    /// Elements `start .. start + len` of a vector (a scalar for `len == 1`).
    pub fn slice(&self, v: Value<'ctx>, start: u32, len: u32) -> Result<Value<'ctx>> {
        if len == 0 || start + len > v.ty.lanes {
            return Err(DslError::Operand {
                op: "slice",
                rule: format!(
                    "elements {start}..{} of a {}-element value",
                    start + len,
                    v.ty.lanes
                ),
            });
        }
        if len == v.ty.lanes {
            return Ok(v);
        }
        let i32t = self.ctx.i32_type();
        let vec = v.vector();
        if len == 1 {
            let at = i32t.const_int(start as u64, false);
            return Value::new(self.builder.build_extract_element(vec, at, "")?);
        }
        let mask: Vec<_> = (start..start + len)
            .map(|i| i32t.const_int(i as u64, false))
            .collect();
        let mask = inkwell::types::VectorType::const_vector(&mask);
        Value::new(
            self.builder
                .build_shuffle_vector(vec, vec, mask, "")?
                .into(),
        )
    }

    /// `v` cut into `parts` equal consecutive slices.
    pub fn split(&self, v: Value<'ctx>, parts: u32) -> Result<Vec<Value<'ctx>>> {
        if parts == 0 || !v.ty.lanes.is_multiple_of(parts) {
            return Err(DslError::Operand {
                op: "split",
                rule: format!("{} elements into {parts} equal parts", v.ty.lanes),
            });
        }
        let len = v.ty.lanes / parts;
        (0..parts).map(|p| self.slice(v, p * len, len)).collect()
    }

    /// The elements of `parts` (scalars or vectors of one element type) in order, as one vector.
    pub fn concat(&self, parts: &[Value<'ctx>]) -> Result<Value<'ctx>> {
        let Some(first) = parts.first() else {
            return Err(DslError::Operand {
                op: "concat",
                rule: "nothing to concatenate".into(),
            });
        };
        if parts.len() == 1 {
            return Ok(*first);
        }
        let elem = first.ty.elem;
        if let Some(p) = parts.iter().find(|p| p.ty.elem != elem) {
            return Err(DslError::Operand {
                op: "concat",
                rule: format!("{:?} among {elem:?} parts", p.ty),
            });
        }
        let total: u32 = parts.iter().map(|p| p.ty.lanes).sum();
        let ty = Ty::vector(elem, total);
        let i32t = self.ctx.i32_type();
        if let [a, b] = parts
            && a.ty.lanes == b.ty.lanes
            && a.ty.lanes > 1
        {
            // Two halves: one shuffle.
            let mask: Vec<_> = (0..total)
                .map(|i| i32t.const_int(i as u64, false))
                .collect();
            let mask = inkwell::types::VectorType::const_vector(&mask);
            let v = self
                .builder
                .build_shuffle_vector(a.vector(), b.vector(), mask, "")?;
            return Value::new(v.into());
        }
        let mut acc = ty.llvm(self).into_vector_type().get_poison();
        let mut at = 0u32;
        for p in parts {
            for e in 0..p.ty.lanes {
                let x = if p.ty.lanes == 1 {
                    p.v
                } else {
                    self.builder.build_extract_element(
                        p.vector(),
                        i32t.const_int(e as u64, false),
                        "",
                    )?
                };
                acc = self.builder.build_insert_element(
                    acc,
                    x,
                    i32t.const_int(at as u64, false),
                    "",
                )?;
                at += 1;
            }
        }
        Value::new(acc.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(Ty::dwords(4).bytes(), 16);
        assert_eq!(Ty::vector(Elem::Bf16, 4).bytes(), 8);
        assert_eq!(Ty::I8.bytes(), 1);
    }
}
