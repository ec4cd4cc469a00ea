//! gfx950 (MI355X, CDNA4) emulator of real HSA code objects.
//!
//! [`isa`] decodes machine code into [`isa::Inst`] values once per kernel and prints them exactly
//! as `llvm-objdump-22 -d --mcpu=gfx950` does; the executor builds on those decoded instructions.
#![deny(missing_docs)]

pub mod exec;
pub mod isa;
