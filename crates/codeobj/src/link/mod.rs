//! In-process linking of LLVM's relocatable gfx950 object into a loadable HSA code object.
//!
//! A kernel object holds a handful of allocated sections (`.note` with the metadata, `.rodata`
//! with the 64-byte kernel descriptors, `.text`), a symbol table and PC-relative relocations (the
//! descriptor's entry offset). Linking it is a fixed, small job: lay the sections out in three
//! segments the way `ld.lld` does, apply the relocations, and add the dynamic symbol table the
//! HSA loader looks kernels up in. Doing it here saves a linker process per kernel (16-19 ms,
//! several times the cost of codegen). The output is written directly because its structure is
//! fixed and must stay byte-predictable (tests compare it with `ld.lld-22`).
//!
//! Four stages with a type between each, as a compiler separates lowering from emission:
//! - [`plan`]: read the object into a [`Plan`](plan::Plan): the allocated sections to copy,
//!   the symbols (locals first) and which of them are dynamic, the relocations to resolve;
//! - [`layout`]: place every output section and the three segments
//!   ([`Layout`](layout::Layout)): addresses, file offsets, sizes, header fields;
//! - [`relocate`]: patch the copied sections at their final addresses;
//! - [`emit`]: build the tables (symbols, hashes, dynamic) and write the ELF bytes.

mod emit;
mod layout;
mod plan;
mod relocate;

use object::elf;

/// Why a relocatable object could not be linked.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// Not a readable ELF64 file.
    #[error("not a relocatable AMDGPU ELF64 object")]
    Parse(#[from] object::read::Error),
    /// An ELF64 file, but not a relocatable AMDGPU object.
    #[error(
        "e_type {e_type} e_machine {e_machine}: not a relocatable AMDGPU object (want e_type {} and e_machine {})",
        elf::ET_REL.0,
        elf::EM_AMDGPU.0
    )]
    NotRelocatable {
        /// `e_type` found.
        e_type: u16,
        /// `e_machine` found.
        e_machine: u16,
    },
    /// A relocation this linker does not resolve.
    #[error(
        "relocation type {r_type} against `{symbol}` is not supported (only PC-relative R_AMDGPU_REL32/REL64/REL32_LO/REL32_HI resolve without a dynamic loader relocation)"
    )]
    Relocation {
        /// The type.
        r_type: u32,
        /// Its symbol.
        symbol: String,
    },
    /// A relocation that names no symbol (or is not an ELF relocation).
    #[error("relocation at {offset:#x} of `{section}` has no symbol")]
    NoSymbol {
        /// The section it patches.
        section: String,
        /// Where in the section.
        offset: u64,
    },
    /// A relocation whose field reaches past its section's end.
    #[error("relocation at {offset:#x} reaches past the end of `{section}`")]
    OutOfSection {
        /// The section it patches.
        section: String,
        /// Where in the section.
        offset: u64,
    },
    /// A reference to a symbol nothing defines (or that is not kept, e.g. a section symbol).
    #[error("undefined symbol `{0}`")]
    Undefined(String),
    /// A symbol defined in a section that does not load (so it has no address).
    #[error("symbol `{0}` is in a section that is not loaded")]
    Unloaded(String),
    /// A PC-relative value that does not fit its field.
    #[error("relocation against `{0}` overflows its 32-bit field")]
    Overflow(String),
}

/// Links one relocatable gfx950 object into a code object (an ELF shared object).
pub fn link(object: &[u8]) -> Result<Vec<u8>, LinkError> {
    let plan = plan::Plan::read(object)?;
    let layout = layout::Layout::of(&plan);
    let contents = relocate::apply(&plan, &layout)?;
    Ok(emit::write(&plan, &layout, contents))
}

/// `v` rounded up to a multiple of `align` (0 and 1 align nothing, as in ELF).
fn align_up(v: u64, align: u64) -> u64 {
    if align <= 1 {
        v
    } else {
        v.div_ceil(align) * align
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_non_objects() {
        assert!(matches!(link(b"not an elf"), Err(LinkError::Parse(_))));
    }
}
