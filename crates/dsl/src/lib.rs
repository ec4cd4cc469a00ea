//! tilegen-dsl: a kernel builder over inkwell (LLVM 22) for gfx950.
//!
//! A [`Kernel`] wraps an LLVM module with one `amdgpu_kernel` function. Index arithmetic is
//! done with [`Int`], which implements `tilegen_layout::IndexValue`, so layouts compute device
//! addresses with their static parts folded at generation time. [`compile`] runs O3 and codegen
//! and links the object into a loadable code object in process.
#![deny(missing_docs)]

mod atom;
mod compile;
mod error;
mod float;
mod int;
pub mod intrinsics;
mod kernel;
mod mem;
mod mfma;
pub mod target;
mod tensor;
mod value;

pub use atom::MmaAtom;
pub use compile::{CompileOptions, Compiled, Timings, compile};
pub use error::{DslError, Result};
pub use float::FloatOp;
/// The LLVM context a [`Kernel`] is built in (one per thread; kernels borrow it).
pub use inkwell::context::Context;
pub use int::Int;
pub use kernel::{I32Param, Kernel, KernelAttrs, Ptr, PtrParam, Signature, Var};
pub use mem::{Buffer, CachePolicy, Lds, RAW_BUFFER_FLAGS};
pub use mfma::{Bf16Shape, MfmaOperand, MfmaShape, MxFormat, sched, waitcnt_vmcnt};
pub use tensor::{DevIdx, DevLayout, Storage, TileTensor, dev_layout, downcast, split_strides};
pub use value::{Cond, Elem, Ty, Value};
