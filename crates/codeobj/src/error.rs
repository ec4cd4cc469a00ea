//! Errors of the reader; each names what was found.

/// Why a file is not a usable gfx950 code object.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeObjectError {
    /// Not an ELF file at all, or a malformed one.
    #[error("not a valid ELF file: {0}")]
    Elf(String),
    /// An ELF for another machine or class.
    #[error("not an AMDGPU code object: {0}")]
    NotAmdgpu(String),
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
