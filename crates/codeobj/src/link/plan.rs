//! What is linked: the allocated sections of the object, its symbols (which are dynamic) and the
//! relocations to resolve, read once so the later stages never touch the input file.

use std::collections::HashMap;

use object::elf;
use object::read::elf::{ElfFile64, FileHeader as _, SectionHeader as _, Sym as _};
use object::{
    Endianness, Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget,
    SymbolSection,
};

use super::LinkError;

// AMDGPU relocation types (llvm/BinaryFormat/ELFRelocs/AMDGPU.def); `object` does not name them.
const R_AMDGPU_NONE: u32 = 0;
const R_AMDGPU_REL32: u32 = 4;
const R_AMDGPU_REL64: u32 = 5;
const R_AMDGPU_REL32_LO: u32 = 10;
const R_AMDGPU_REL32_HI: u32 = 11;

/// Which segment, and where in it, an allocated section goes: the output's order, `ld.lld`'s
/// (notes, then read-only data, code, writable data).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Kind {
    /// `SHT_NOTE` (the metadata), first in the read-only segment.
    Note,
    /// Other read-only data (the kernel descriptors), after the dynamic tables.
    ReadOnly,
    /// Executable code: the second segment.
    Code,
    /// Writable data: the third segment, after the dynamic table.
    Writable,
}

/// An allocated input section, copied into the output.
#[derive(Debug)]
pub(super) struct InputSection {
    /// Its index in the input's section table.
    pub index: usize,
    pub name: String,
    pub kind: Kind,
    pub sh_type: elf::SectionType,
    pub flags: elf::SectionFlags,
    pub align: u64,
    /// Size in memory (for `SHT_NOBITS`, with no bytes in the file).
    pub size: u64,
    /// Contents (empty for `SHT_NOBITS`).
    pub data: Vec<u8>,
}

/// Where a symbol's value is relative to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Place {
    /// An absolute value.
    Absolute,
    /// An offset into the allocated input section at this index of [`Plan::sections`].
    Section(usize),
}

/// A symbol the output keeps (every symbol but section and file symbols).
#[derive(Debug)]
pub(super) struct Symbol {
    pub name: String,
    pub info: elf::SymbolInfo,
    pub other: elf::SymbolOther,
    pub place: Place,
    pub value: u64,
    pub size: u64,
}

impl Symbol {
    fn is_local(&self) -> bool {
        self.info.st_bind() == elf::STB_LOCAL
    }
}

/// A PC-relative relocation: the field's width and half.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Field {
    /// `R_AMDGPU_REL32`: 32 bits, which must hold the value.
    Rel32,
    /// `R_AMDGPU_REL64`.
    Rel64,
    /// `R_AMDGPU_REL32_LO`: the low 32 bits of the 64-bit value.
    Rel32Lo,
    /// `R_AMDGPU_REL32_HI`: the high 32 bits.
    Rel32Hi,
}

/// One relocation to resolve: `field` at `offset` of section `section` becomes
/// `S + addend - P` for symbol `symbol`.
#[derive(Debug)]
pub(super) struct Relocation {
    /// Index into [`Plan::sections`].
    pub section: usize,
    pub offset: u64,
    /// The raw type (for errors), and the field it names if this linker resolves it.
    pub r_type: u32,
    pub field: Option<Field>,
    /// Index into [`Plan::symbols`].
    pub symbol: usize,
    pub addend: i64,
}

/// A string table: a leading NUL, then each name NUL-terminated, in the order added.
#[derive(Debug)]
pub(super) struct StringTable {
    pub bytes: Vec<u8>,
}

impl StringTable {
    pub fn new() -> Self {
        StringTable { bytes: vec![0] }
    }

    /// Appends `name` (without sharing suffixes, as `ld.lld` does not for these tables) and
    /// returns its offset.
    pub fn add(&mut self, name: &str) -> u32 {
        let at = self.bytes.len() as u32;
        self.bytes.extend_from_slice(name.as_bytes());
        self.bytes.push(0);
        at
    }

    pub fn size(&self) -> u64 {
        self.bytes.len() as u64
    }
}

/// Everything the link needs from the input.
#[derive(Debug)]
pub(super) struct Plan {
    /// The input's `EI_OSABI`, `EI_ABIVERSION` and `e_flags` (the code object version and
    /// processor), which the output keeps.
    pub os_abi: elf::OsAbi,
    pub abi_version: u8,
    pub e_flags: elf::FileFlags,
    /// The allocated sections in output order: by [`Kind`], then in input order.
    pub sections: Vec<InputSection>,
    /// The kept symbols, locals first (as ELF requires), otherwise in input order.
    pub symbols: Vec<Symbol>,
    /// Names of [`Self::symbols`], in `.strtab`'s order.
    pub symbol_names: Vec<u32>,
    pub strtab: StringTable,
    /// The dynamic symbols (indices into [`Self::symbols`]): the global, visible definitions in
    /// loaded sections, i.e. the kernels and their descriptors.
    pub dynamic: Vec<usize>,
    /// Names of [`Self::dynamic`], in `.dynstr`'s order.
    pub dynamic_names: Vec<u32>,
    pub dynstr: StringTable,
    /// The relocations of the allocated sections (others, e.g. debug information's, are not
    /// loaded and need none).
    pub relocations: Vec<Relocation>,
}

type File<'data> = ElfFile64<'data, Endianness>;

impl Plan {
    /// Reads `object`, a relocatable AMDGPU ELF64 object.
    pub fn read(object: &[u8]) -> Result<Plan, LinkError> {
        let file = File::parse(object)?;
        let endian = file.endian();
        let header = file.elf_header();
        let (e_type, e_machine) = (header.e_type(endian), header.e_machine(endian));
        if e_type != elf::ET_REL || e_machine != elf::EM_AMDGPU {
            return Err(LinkError::NotRelocatable {
                e_type: e_type.0,
                e_machine: e_machine.0,
            });
        }
        let sections = read_sections(&file)?;
        // Input section index -> index into `sections`.
        let section_of: HashMap<usize, usize> = sections
            .iter()
            .enumerate()
            .map(|(at, s)| (s.index, at))
            .collect();
        let (symbols, symbol_of) = read_symbols(&file, &section_of)?;
        let relocations = read_relocations(&file, &sections, &section_of, &symbol_of)?;

        let mut strtab = StringTable::new();
        let symbol_names = symbols.iter().map(|s| strtab.add(&s.name)).collect();
        let dynamic: Vec<usize> = (0..symbols.len())
            .filter(|&i| {
                let s = &symbols[i];
                !s.is_local()
                    && s.other.visibility() != elf::STV_HIDDEN
                    && matches!(s.place, Place::Section(_))
            })
            .collect();
        let mut dynstr = StringTable::new();
        let dynamic_names = dynamic
            .iter()
            .map(|&i| dynstr.add(&symbols[i].name))
            .collect();
        let ident = header.e_ident();
        Ok(Plan {
            os_abi: ident.os_abi,
            abi_version: ident.abi_version,
            e_flags: header.e_flags(endian),
            sections,
            symbols,
            symbol_names,
            strtab,
            dynamic,
            dynamic_names,
            dynstr,
            relocations,
        })
    }

    /// The number of local symbols (they come first).
    pub fn locals(&self) -> usize {
        self.symbols.iter().take_while(|s| s.is_local()).count()
    }

    /// The sections of one kind, in output order.
    pub fn of_kind(&self, kind: Kind) -> impl Iterator<Item = usize> + '_ {
        (0..self.sections.len()).filter(move |&i| self.sections[i].kind == kind)
    }
}

/// The allocated sections, in output order.
fn read_sections(file: &File<'_>) -> Result<Vec<InputSection>, LinkError> {
    let endian = file.endian();
    let mut sections = Vec::new();
    for section in file.sections() {
        let sh = section.elf_section_header();
        let flags = sh.sh_flags(endian);
        if flags.0 & elf::SHF_ALLOC.0 == 0 {
            continue;
        }
        let sh_type = sh.sh_type(endian);
        let kind = if sh_type == elf::SHT_NOTE {
            Kind::Note
        } else if flags.0 & elf::SHF_EXECINSTR.0 != 0 {
            Kind::Code
        } else if flags.0 & elf::SHF_WRITE.0 != 0 {
            Kind::Writable
        } else {
            Kind::ReadOnly
        };
        let (data, size) = if sh_type == elf::SHT_NOBITS {
            (Vec::new(), section.size())
        } else {
            let data = section.data()?.to_vec();
            let size = data.len() as u64;
            (data, size)
        };
        sections.push(InputSection {
            index: section.index().0,
            name: section.name()?.to_string(),
            kind,
            sh_type,
            flags,
            align: section.align().max(1),
            size,
            data,
        });
    }
    // Stable: input order within a kind.
    sections.sort_by_key(|s| s.kind);
    Ok(sections)
}

/// The kept symbols, locals first, and a map from input symbol index to their index.
fn read_symbols(
    file: &File<'_>,
    section_of: &HashMap<usize, usize>,
) -> Result<(Vec<Symbol>, HashMap<usize, usize>), LinkError> {
    let endian = file.endian();
    // Each kept symbol with its index in the input's symbol table.
    let mut kept = Vec::new();
    for sym in file.symbols() {
        let raw = sym.elf_symbol();
        let st_type = raw.st_info().st_type();
        if st_type == elf::STT_SECTION || st_type == elf::STT_FILE {
            continue;
        }
        let name = sym.name()?.to_string();
        let place = match sym.section() {
            SymbolSection::Section(i) => match section_of.get(&i.0) {
                Some(&at) => Place::Section(at),
                None => return Err(LinkError::Unloaded(name)),
            },
            SymbolSection::Absolute => Place::Absolute,
            SymbolSection::Undefined => return Err(LinkError::Undefined(name)),
            _ => continue,
        };
        let symbol = Symbol {
            name,
            info: raw.st_info(),
            other: raw.st_other(),
            place,
            value: raw.st_value(endian),
            size: raw.st_size(endian),
        };
        kept.push((symbol, sym.index().0));
    }
    // Stable: locals first, each group in input order.
    kept.sort_by_key(|(s, _)| !s.is_local());
    let (symbols, input_index): (Vec<Symbol>, Vec<usize>) = kept.into_iter().unzip();
    let symbol_of = input_index
        .iter()
        .enumerate()
        .map(|(at, &i)| (i, at))
        .collect();
    Ok((symbols, symbol_of))
}

/// The relocations of the allocated sections, in input order.
fn read_relocations(
    file: &File<'_>,
    sections: &[InputSection],
    section_of: &HashMap<usize, usize>,
    symbol_of: &HashMap<usize, usize>,
) -> Result<Vec<Relocation>, LinkError> {
    let mut relocations = Vec::new();
    for section in file.sections() {
        let Some(&target) = section_of.get(&section.index().0) else {
            continue;
        };
        for (offset, rel) in section.relocations() {
            let no_symbol = || LinkError::NoSymbol {
                section: sections[target].name.clone(),
                offset,
            };
            let RelocationFlags::Elf { r_type } = rel.flags() else {
                return Err(no_symbol());
            };
            let field = match r_type.0 {
                R_AMDGPU_NONE => continue,
                R_AMDGPU_REL32 => Some(Field::Rel32),
                R_AMDGPU_REL64 => Some(Field::Rel64),
                R_AMDGPU_REL32_LO => Some(Field::Rel32Lo),
                R_AMDGPU_REL32_HI => Some(Field::Rel32Hi),
                _ => None,
            };
            let RelocationTarget::Symbol(si) = rel.target() else {
                return Err(no_symbol());
            };
            let symbol = *symbol_of
                .get(&si.0)
                .ok_or_else(|| LinkError::Undefined(format!("symbol #{}", si.0)))?;
            relocations.push(Relocation {
                section: target,
                offset,
                r_type: r_type.0,
                field,
                symbol,
                addend: rel.addend(),
            });
        }
    }
    Ok(relocations)
}
