//! Pure instruction semantics: values in, values out. Nothing here sees a register file, a
//! wave or memory; the executors in [`super`] read operands, call these and write results.

pub mod alu;
pub mod buffer;
pub(crate) mod compare;
pub(crate) mod div;
pub mod ds;
pub(crate) mod float;
pub mod fp;
pub mod mfma;
