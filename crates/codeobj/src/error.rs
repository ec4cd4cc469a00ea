//! Errors of the reader; each names what was found.

/// Why a file is not a usable gfx950 code object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeObjectError {
    /// A malformed ELF: damaged tables, offsets outside the file, missing `.text`.
    #[error("not a valid ELF file: {0}")]
    Elf(String),
    /// Shorter than an ELF64 header.
    #[error("file is {len} bytes, shorter than an ELF64 header (64 bytes)")]
    TooShort {
        /// File length.
        len: usize,
    },
    /// Does not start with `\x7fELF`.
    #[error("not an ELF file: the magic is {found:02x?}, not 7f 45 4c 46")]
    NotElf {
        /// The first four bytes.
        found: [u8; 4],
    },
    /// Not a 64-bit ELF.
    #[error("ELF class {found} is not ELFCLASS64 (2)")]
    NotElf64 {
        /// `EI_CLASS`.
        found: u8,
    },
    /// Not little-endian.
    #[error("ELF data encoding {found} is not little-endian ELFDATA2LSB (1)")]
    NotLittleEndian {
        /// `EI_DATA`.
        found: u8,
    },
    /// Built for another machine.
    #[error("e_machine is {found}, not EM_AMDGPU (224)")]
    WrongMachine {
        /// `e_machine`.
        found: u16,
    },
    /// Not for the HSA runtime.
    #[error("OS/ABI is {found}, not ELFOSABI_AMDGPU_HSA (64)")]
    WrongOsAbi {
        /// `EI_OSABI`.
        found: u8,
    },
    /// An unlinked object (or anything else that is not a shared object).
    #[error("ELF type {found} is not ET_DYN (3); a relocatable object must be linked first")]
    NotSharedObject {
        /// `e_type`.
        found: u16,
    },
    /// An AMDGPU code object for another processor.
    #[error("code object is for processor mach {mach:#04x} ({name}), not gfx950 (mach 0x4f)")]
    WrongProcessor {
        /// `EF_AMDGPU_MACH` found.
        mach: u32,
        /// Its name, where known.
        name: &'static str,
    },
    /// A code object version this reader does not support.
    #[error("code object ABI version {0} is not supported (v5 = 3, v6 = 4)")]
    Version(u8),
    /// The metadata note is missing or malformed.
    #[error("AMDGPU metadata: {0}")]
    Metadata(String),
    /// A kernel's descriptor symbol or bytes are missing.
    #[error("kernel {kernel}: {problem}")]
    Kernel {
        /// The kernel.
        kernel: String,
        /// What is wrong.
        problem: String,
    },
}
