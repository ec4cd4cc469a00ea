//! tilegen-codeobj: read HSA code objects (AMDGPU ELF) for gfx950.
//!
//! A code object is an ELF64 shared object with, per kernel, a symbol `<name>` (its code), a
//! 64-byte kernel descriptor `<name>.kd`, and an entry in the `NT_AMDGPU_METADATA` note (a
//! msgpack map describing arguments and resources). The emulator, the runtime and the kernel
//! builder all read code objects through this crate, and [`link`] writes them: it links LLVM's
//! relocatable output into a loadable code object without a linker process.
#![deny(missing_docs)]

mod descriptor;
mod error;
pub mod link;
mod metadata;
mod reader;

pub use descriptor::{DESCRIPTOR_BYTES, KernelDescriptor, Rsrc1, Rsrc2, Rsrc3};
pub use error::CodeObjectError;
pub use metadata::{KernelArg, KernelMeta, ValueKind};
pub use reader::{CodeObject, CodeObjectVersion, GFX950_MACH, Kernel, Segment, Symbol, SymbolKind};
