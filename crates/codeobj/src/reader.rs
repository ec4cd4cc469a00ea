//! Parsing the ELF container: header checks, segments, symbols, descriptors and the note.

use std::collections::HashMap;

use object::read::elf::{ElfFile64, ProgramHeader as _};
use object::{
    Endianness, Object, ObjectSection, ObjectSymbol, SectionKind, SymbolKind as ObjSymbolKind,
};
use serde::Serialize;

use crate::descriptor::{DESCRIPTOR_BYTES, KernelDescriptor};
use crate::error::CodeObjectError;
use crate::metadata::KernelMeta;

/// `EF_AMDGPU_MACH` of gfx950.
pub const GFX950_MACH: u32 = 0x4f;
const EM_AMDGPU: u16 = 224;
const ELFOSABI_AMDGPU_HSA: u8 = 64;
const NT_AMDGPU_METADATA: u32 = 32;
const PT_LOAD: u32 = 1;

/// The code object format version (from `EI_ABIVERSION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum CodeObjectVersion {
    /// Version 5 (`EI_ABIVERSION` 3).
    V5,
    /// Version 6 (`EI_ABIVERSION` 4), LLVM 22's default.
    V6,
}

/// A loadable segment: `file_bytes` at `vaddr`, zero-filled up to `mem_size`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Virtual address (relative to the load base).
    pub vaddr: u64,
    /// Bytes from the file.
    pub file_bytes: Vec<u8>,
    /// Size in memory.
    pub mem_size: u64,
}

/// What a symbol names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum SymbolKind {
    /// Code.
    Function,
    /// Data (kernel descriptors are objects).
    Object,
    /// Anything else (labels, absolute values).
    Other,
}

/// A symbol of the code object.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Symbol {
    /// Name.
    pub name: String,
    /// Address.
    pub address: u64,
    /// Size in bytes.
    pub size: u64,
    /// Kind.
    pub kind: SymbolKind,
}

/// A kernel: its metadata, descriptor and code.
#[derive(Debug, Clone)]
pub struct Kernel {
    /// Metadata from the note.
    pub meta: KernelMeta,
    /// Address of the descriptor.
    pub descriptor_address: u64,
    /// The descriptor.
    pub descriptor: KernelDescriptor,
    /// Address of the first instruction.
    pub entry: u64,
    /// Size of the kernel's code in bytes (from its symbol).
    pub code_size: u64,
}

impl Kernel {
    /// Name.
    pub fn name(&self) -> &str {
        &self.meta.name
    }
}

/// A parsed gfx950 code object.
#[derive(Debug, Clone)]
pub struct CodeObject {
    /// Format version.
    pub version: CodeObjectVersion,
    /// `e_flags`.
    pub e_flags: u32,
    /// Loadable segments.
    pub segments: Vec<Segment>,
    /// `.text` address and bytes.
    pub text: (u64, Vec<u8>),
    /// Function and object symbols, by address.
    pub symbols: Vec<Symbol>,
    /// Kernels, in metadata order.
    pub kernels: Vec<Kernel>,
    /// The whole metadata map.
    pub metadata: rmpv::Value,
}

fn elf_err(e: object::Error) -> CodeObjectError {
    CodeObjectError::Elf(e.to_string())
}

/// Processor names of `EF_AMDGPU_MACH` values (as llvm-readelf-22 prints them).
fn mach_name(mach: u32) -> &'static str {
    match mach {
        0x2c => "gfx900",
        0x2d => "gfx902",
        0x2e => "gfx904",
        0x2f => "gfx906",
        0x30 => "gfx908",
        0x31 => "gfx909",
        0x32 => "gfx90c",
        0x33 => "gfx1010",
        0x36 => "gfx1030",
        0x37 => "gfx1031",
        0x3f => "gfx90a",
        0x40 => "gfx940",
        0x41 => "gfx1100",
        0x43 => "gfx1150",
        0x46 => "gfx1101",
        0x47 => "gfx1102",
        0x48 => "gfx1200",
        0x49 => "gfx1250",
        0x4a => "gfx1151",
        0x4b => "gfx941",
        0x4c => "gfx942",
        0x4e => "gfx1201",
        0x4f => "gfx950",
        _ => "unknown",
    }
}

/// Checks the ELF identification and header fields that make a file a gfx950 HSA code object,
/// before any table is parsed, so that each mismatch is reported with what was found.
fn check_header(bytes: &[u8]) -> Result<(CodeObjectVersion, u32), CodeObjectError> {
    const ET_DYN: u16 = 3;
    if bytes.len() < 64 {
        if bytes.len() >= 4 && bytes[..4] != [0x7f, b'E', b'L', b'F'] {
            let mut found = [0; 4];
            found.copy_from_slice(&bytes[..4]);
            return Err(CodeObjectError::NotElf { found });
        }
        return Err(CodeObjectError::TooShort { len: bytes.len() });
    }
    let mut magic = [0; 4];
    magic.copy_from_slice(&bytes[..4]);
    if magic != [0x7f, b'E', b'L', b'F'] {
        return Err(CodeObjectError::NotElf { found: magic });
    }
    if bytes[4] != 2 {
        return Err(CodeObjectError::NotElf64 { found: bytes[4] });
    }
    if bytes[5] != 1 {
        return Err(CodeObjectError::NotLittleEndian { found: bytes[5] });
    }
    let u16_at = |at: usize| u16::from_le_bytes([bytes[at], bytes[at + 1]]);
    let machine = u16_at(18);
    if machine != EM_AMDGPU {
        return Err(CodeObjectError::WrongMachine { found: machine });
    }
    if bytes[7] != ELFOSABI_AMDGPU_HSA {
        return Err(CodeObjectError::WrongOsAbi { found: bytes[7] });
    }
    // ELFABIVERSION_AMDGPU_HSA_V5 = 3, _V6 = 4 (AMDGPUUsage); v4 and older are not read.
    let version = match bytes[8] {
        3 => CodeObjectVersion::V5,
        4 => CodeObjectVersion::V6,
        v => return Err(CodeObjectError::Version(v)),
    };
    let e_flags = u32::from_le_bytes([bytes[48], bytes[49], bytes[50], bytes[51]]);
    // EF_AMDGPU_MACH is the low byte; bits 11:8 are the xnack/sramecc feature settings.
    let mach = e_flags & 0xff;
    if mach != GFX950_MACH {
        return Err(CodeObjectError::WrongProcessor {
            mach,
            name: mach_name(mach),
        });
    }
    let e_type = u16_at(16);
    if e_type != ET_DYN {
        return Err(CodeObjectError::NotSharedObject { found: e_type });
    }
    Ok((version, e_flags))
}

impl CodeObject {
    /// Parses and validates a gfx950 code object.
    pub fn parse(bytes: &[u8]) -> Result<Self, CodeObjectError> {
        let (version, e_flags) = check_header(bytes)?;
        let file = ElfFile64::<Endianness>::parse(bytes).map_err(elf_err)?;
        let endian = file.endian();
        let mut segments = Vec::new();
        // Each segment's file bytes are copied: with overlapping segments a small file could
        // ask for many times its size, so the number of segments and the bytes copied are
        // bounded (real code objects have three or four PT_LOADs that do not overlap).
        let mut copied = 0u64;
        for ph in file.elf_program_headers() {
            if ph.p_type(endian).0 != PT_LOAD {
                continue;
            }
            if segments.len() == MAX_LOAD_SEGMENTS {
                return Err(CodeObjectError::Elf(format!(
                    "more than {MAX_LOAD_SEGMENTS} PT_LOAD segments"
                )));
            }
            let data = ph.data(endian, bytes).map_err(|_| {
                CodeObjectError::Elf("a PT_LOAD segment lies outside the file".into())
            })?;
            copied += data.len() as u64;
            if copied > 2 * bytes.len() as u64 {
                return Err(CodeObjectError::Elf(format!(
                    "the PT_LOAD segments overlap: they hold more than twice the file's {} bytes",
                    bytes.len()
                )));
            }
            segments.push(Segment {
                vaddr: ph.p_vaddr(endian),
                file_bytes: data.to_vec(),
                mem_size: ph.p_memsz(endian),
            });
        }
        let text = file
            .section_by_name(".text")
            .ok_or_else(|| CodeObjectError::Elf("no .text section".into()))?;
        let text = (text.address(), text.data().map_err(elf_err)?.to_vec());
        let symtab: Vec<_> = if file.symbols().next().is_some() {
            file.symbols().collect()
        } else {
            file.dynamic_symbols().collect()
        };
        let mut symbols: Vec<Symbol> = symtab
            .iter()
            .filter_map(|s| {
                let name = s.name().ok()?.to_string();
                if name.is_empty() || s.is_undefined() {
                    return None;
                }
                let kind = match s.kind() {
                    ObjSymbolKind::Text => SymbolKind::Function,
                    ObjSymbolKind::Data => SymbolKind::Object,
                    _ => SymbolKind::Other,
                };
                Some(Symbol {
                    name,
                    address: s.address(),
                    size: s.size(),
                    kind,
                })
            })
            .collect();
        symbols.sort_by(|a, b| (a.address, &a.name).cmp(&(b.address, &b.name)));
        let metadata = read_metadata(&file)?;
        let kernels = kernels(&metadata, &symbols, &segments)?;
        Ok(CodeObject {
            version,
            e_flags,
            segments,
            text,
            symbols,
            kernels,
            metadata,
        })
    }

    /// The kernel named `name`.
    pub fn kernel(&self, name: &str) -> Option<&Kernel> {
        self.kernels.iter().find(|k| k.meta.name == name)
    }

    /// Reads `len` bytes at `addr` from the loaded image.
    pub fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        read_image(&self.segments, addr, len)
    }

    /// Bytes of the loaded image (`max(vaddr + mem_size)`).
    pub fn image_size(&self) -> u64 {
        self.segments
            .iter()
            .map(|s| s.vaddr.saturating_add(s.mem_size))
            .max()
            .unwrap_or(0)
    }
}

/// Most PT_LOAD segments a code object may have.
const MAX_LOAD_SEGMENTS: usize = 64;

/// Reads `len` bytes at `addr` from the image `segments` describe (`None` unless one segment
/// holds them all).
fn read_image(segments: &[Segment], addr: u64, len: usize) -> Option<Vec<u8>> {
    let end = addr.checked_add(len as u64)?;
    let seg = segments
        .iter()
        .find(|s| addr >= s.vaddr && s.vaddr.checked_add(s.mem_size).is_some_and(|e| end <= e))?;
    let start = usize::try_from(addr - seg.vaddr).ok()?;
    let mut out = vec![0u8; len];
    // Bytes past the file image are the zero fill up to mem_size.
    let avail = seg.file_bytes.len().saturating_sub(start).min(len);
    if avail > 0 {
        out[..avail].copy_from_slice(&seg.file_bytes[start..start + avail]);
    }
    Some(out)
}

fn read_metadata(file: &ElfFile64<'_, Endianness>) -> Result<rmpv::Value, CodeObjectError> {
    for section in file.sections() {
        if section.kind() != SectionKind::Note {
            continue;
        }
        let data = section.data().map_err(elf_err)?;
        let mut at = 0usize;
        // Every size below comes from the file: the arithmetic is checked and each slice is
        // taken with `get`, so a damaged note is an error, never a panic.
        let past = || CodeObjectError::Metadata("a note runs past its section".into());
        while data.len().saturating_sub(at) >= 12 {
            let word = |o: usize| -> Result<usize, CodeObjectError> {
                let b = data.get(o..o + 4).ok_or_else(past)?;
                Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
            };
            let (namesz, descsz, ty) = (word(at)?, word(at + 4)?, word(at + 8)? as u32);
            let name_at = at + 12;
            let padded = |n: usize| n.checked_next_multiple_of(4);
            let desc_at = padded(namesz)
                .and_then(|n| name_at.checked_add(n))
                .ok_or_else(past)?;
            let desc_end = desc_at.checked_add(descsz).ok_or_else(past)?;
            let end = padded(descsz)
                .and_then(|n| desc_at.checked_add(n))
                .ok_or_else(past)?;
            let name = data.get(name_at..name_at + namesz).ok_or_else(past)?;
            let desc = data.get(desc_at..desc_end).ok_or_else(past)?;
            if ty == NT_AMDGPU_METADATA && name.starts_with(b"AMDGPU") {
                let mut desc = desc;
                return rmpv::decode::read_value(&mut desc)
                    .map_err(|e| CodeObjectError::Metadata(format!("msgpack: {e}")));
            }
            at = end;
        }
    }
    Err(CodeObjectError::Metadata(
        "no NT_AMDGPU_METADATA note".into(),
    ))
}

fn kernels(
    metadata: &rmpv::Value,
    symbols: &[Symbol],
    segments: &[Segment],
) -> Result<Vec<Kernel>, CodeObjectError> {
    let rmpv::Value::Map(top) = metadata else {
        return Err(CodeObjectError::Metadata(
            "the metadata is not a map".into(),
        ));
    };
    let list = top
        .iter()
        .find(|(k, _)| k.as_str() == Some("amdhsa.kernels"))
        .map(|(_, v)| v)
        .ok_or_else(|| CodeObjectError::Metadata("no amdhsa.kernels".into()))?;
    let rmpv::Value::Array(entries) = list else {
        return Err(CodeObjectError::Metadata(
            "amdhsa.kernels is not an array".into(),
        ));
    };
    // Lookups by name and by address in maps (the first symbol in address order wins, as a
    // scan would find it): a file with many kernels and symbols stays linear.
    let mut by_name: HashMap<&str, &Symbol> = HashMap::new();
    let mut functions: HashMap<u64, u64> = HashMap::new();
    for s in symbols {
        by_name.entry(s.name.as_str()).or_insert(s);
        if s.kind == SymbolKind::Function {
            functions.entry(s.address).or_insert(s.size);
        }
    }
    entries
        .iter()
        .map(|e| {
            let meta = KernelMeta::parse(e)?;
            let problem = |p: String| CodeObjectError::Kernel {
                kernel: meta.name.clone(),
                problem: p,
            };
            let kd = by_name
                .get(meta.symbol.as_str())
                .ok_or_else(|| problem(format!("no descriptor symbol {}", meta.symbol)))?;
            let bytes = read_image(segments, kd.address, DESCRIPTOR_BYTES).ok_or_else(|| {
                problem(format!(
                    "descriptor at {:#x} is outside the loaded image",
                    kd.address
                ))
            })?;
            let bytes: &[u8; DESCRIPTOR_BYTES] = bytes
                .as_slice()
                .try_into()
                .map_err(|_| problem(format!("descriptor at {:#x} is truncated", kd.address)))?;
            let descriptor = KernelDescriptor::parse(bytes);
            let entry = kd
                .address
                .wrapping_add_signed(descriptor.kernel_code_entry_byte_offset);
            let code_size = functions.get(&entry).copied().unwrap_or(0);
            Ok(Kernel {
                meta,
                descriptor_address: kd.address,
                descriptor,
                entry,
                code_size,
            })
        })
        .collect()
}
