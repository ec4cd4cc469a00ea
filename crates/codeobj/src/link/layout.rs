//! Where everything goes: the output's sections in order, their addresses and file offsets, the
//! three loaded segments and the program headers, as `ld.lld -shared` places them.

use std::mem::size_of;

use object::LittleEndian as LE;
use object::elf;

use super::align_up;
use super::plan::{Kind, Place, Plan, StringTable, Symbol};

pub(super) const PAGE: u64 = 0x1000;
pub(super) const EHDR: u64 = size_of::<elf::FileHeader64<LE>>() as u64;
pub(super) const PHDR: u64 = size_of::<elf::ProgramHeader64<LE>>() as u64;
pub(super) const SHDR: u64 = size_of::<elf::SectionHeader64<LE>>() as u64;
pub(super) const SYM: u64 = size_of::<elf::Sym64<LE>>() as u64;
pub(super) const DYN: u64 = size_of::<elf::Dyn64<LE>>() as u64;
/// Entries of `.dynamic`: symbol table, its entry size, string table, its size, the two hash
/// tables, and the terminator.
pub(super) const DYNAMIC_ENTRIES: u64 = 7;

/// What an output section holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Contents {
    /// The null section header.
    Null,
    /// A copy of the allocated input section at this index of [`Plan::sections`].
    Input(usize),
    DynSym,
    GnuHash,
    Hash,
    DynStr,
    Dynamic,
    /// `ld.lld`'s padding of the RELRO region (the dynamic table) to a page end.
    RelroPadding,
    SymTab,
    StrTab,
    ShStrTab,
}

/// A placed output section: its header's fields and what it holds.
#[derive(Debug)]
pub(super) struct OutSection {
    pub contents: Contents,
    /// Offset of the name in `.shstrtab`.
    pub name: u32,
    pub sh_type: elf::SectionType,
    pub flags: elf::SectionFlags,
    pub addr: u64,
    pub offset: u64,
    /// Size in memory; also in the file unless `SHT_NOBITS`.
    pub size: u64,
    pub link: u32,
    pub info: u32,
    pub align: u64,
    pub entsize: u64,
    /// The loaded segment (0 read-only, 1 code, 2 writable), `None` if not loaded.
    segment: Option<usize>,
}

impl OutSection {
    fn new(contents: Contents, sh_type: elf::SectionType, flags: u64, align: u64) -> Self {
        OutSection {
            contents,
            name: 0,
            sh_type,
            flags: elf::SectionFlags(flags),
            addr: 0,
            offset: 0,
            size: 0,
            link: 0,
            info: 0,
            align,
            entsize: 0,
            segment: None,
        }
    }

    fn in_segment(mut self, segment: usize) -> Self {
        self.segment = Some(segment);
        self
    }

    fn sized(mut self, size: u64, entsize: u64) -> Self {
        self.size = size;
        self.entsize = entsize;
        self
    }
}

/// One program header.
#[derive(Debug, Clone, Copy)]
pub(super) struct ProgramHeader {
    pub p_type: elf::ProgramType,
    pub flags: u32,
    pub extent: Extent,
    pub align: u64,
}

/// Where a segment is in the file and in memory.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Extent {
    pub offset: u64,
    pub addr: u64,
    pub filesz: u64,
    pub memsz: u64,
}

/// Output indices of the sections the linker makes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Synthetic {
    pub dynsym: usize,
    pub gnu_hash: usize,
    pub hash: usize,
    pub dynstr: usize,
    pub shstrtab: usize,
}

/// The placed output.
#[derive(Debug)]
pub(super) struct Layout {
    /// Every output section in section-header order (index 0 is the null header).
    pub sections: Vec<OutSection>,
    /// The output index of each of [`Plan::sections`].
    pub output_of: Vec<usize>,
    pub synthetic: Synthetic,
    pub program_headers: Vec<ProgramHeader>,
    pub shstrtab: StringTable,
    /// Buckets of the SysV `.hash` table.
    pub hash_buckets: u32,
    /// File offset of the section headers.
    pub shoff: u64,
    /// File size.
    pub size: u64,
}

/// Program headers: PHDR, three LOADs, DYNAMIC, GNU_RELRO, GNU_STACK, NOTE.
const PROGRAM_HEADERS: u64 = 8;

impl Layout {
    /// Places the output of `plan`.
    pub fn of(plan: &Plan) -> Layout {
        let dynamic_symbols = plan.dynamic.len() as u64;
        // lld sizes the SysV table with one bucket per dynamic symbol (null included).
        let hash_buckets = dynamic_symbols as u32 + 1;
        let input = |i: usize| {
            let s = &plan.sections[i];
            let segment = match s.kind {
                Kind::Note | Kind::ReadOnly => 0,
                Kind::Code => 1,
                Kind::Writable => 2,
            };
            OutSection::new(Contents::Input(i), s.sh_type, s.flags.0, s.align)
                .in_segment(segment)
                .sized(s.size, 0)
        };
        let (alloc, write) = (elf::SHF_ALLOC.0, elf::SHF_WRITE.0);

        let mut sections = vec![OutSection::new(Contents::Null, elf::SHT_NULL, 0, 0)];
        sections.extend(plan.of_kind(Kind::Note).map(input));
        let dynsym = sections.len();
        sections.push(
            OutSection::new(Contents::DynSym, elf::SHT_DYNSYM, alloc, 8)
                .in_segment(0)
                .sized((dynamic_symbols + 1) * SYM, SYM),
        );
        // One local symbol: the null one.
        sections[dynsym].info = 1;
        let gnu_hash = sections.len();
        sections.push(
            OutSection::new(Contents::GnuHash, elf::SHT_GNU_HASH, alloc, 8)
                .in_segment(0)
                .sized(gnu_hash_size(plan.dynamic.len()), 0),
        );
        let hash = sections.len();
        sections.push(
            OutSection::new(Contents::Hash, elf::SHT_HASH, alloc, 4)
                .in_segment(0)
                .sized(4 * (2 + 2 * u64::from(hash_buckets)), 4),
        );
        let dynstr = sections.len();
        sections.push(
            OutSection::new(Contents::DynStr, elf::SHT_STRTAB, alloc, 1)
                .in_segment(0)
                .sized(plan.dynstr.size(), 0),
        );
        sections[dynsym].link = dynstr as u32;
        sections[gnu_hash].link = dynsym as u32;
        sections[hash].link = dynsym as u32;
        sections.extend(plan.of_kind(Kind::ReadOnly).map(input));
        sections.extend(plan.of_kind(Kind::Code).map(input));
        let dynamic = sections.len();
        sections.push(
            OutSection::new(Contents::Dynamic, elf::SHT_DYNAMIC, alloc | write, 8)
                .in_segment(2)
                .sized(DYNAMIC_ENTRIES * DYN, DYN),
        );
        sections[dynamic].link = dynstr as u32;
        sections.extend(plan.of_kind(Kind::Writable).map(input));
        let relro_padding = sections.len();
        sections.push(
            OutSection::new(Contents::RelroPadding, elf::SHT_NOBITS, alloc | write, 1)
                .in_segment(2),
        );
        let symtab = sections.len();
        let mut s = OutSection::new(Contents::SymTab, elf::SHT_SYMTAB, 0, 8)
            .sized((plan.symbols.len() as u64 + 1) * SYM, SYM);
        // The first global: after the null symbol and the locals.
        s.info = plan.locals() as u32 + 1;
        sections.push(s);
        let strtab = sections.len();
        sections.push(
            OutSection::new(Contents::StrTab, elf::SHT_STRTAB, 0, 1).sized(plan.strtab.size(), 0),
        );
        sections[symtab].link = strtab as u32;
        let shstrtab = sections.len();
        sections.push(OutSection::new(Contents::ShStrTab, elf::SHT_STRTAB, 0, 1));

        let mut names = StringTable::new();
        for s in &mut sections {
            let name = match s.contents {
                Contents::Null => continue,
                Contents::Input(i) => plan.sections[i].name.as_str(),
                Contents::DynSym => ".dynsym",
                Contents::GnuHash => ".gnu.hash",
                Contents::Hash => ".hash",
                Contents::DynStr => ".dynstr",
                Contents::Dynamic => ".dynamic",
                Contents::RelroPadding => ".relro_padding",
                Contents::SymTab => ".symtab",
                Contents::StrTab => ".strtab",
                Contents::ShStrTab => ".shstrtab",
            };
            // An unnamed section shares the leading NUL.
            s.name = if name.is_empty() { 0 } else { names.add(name) };
        }
        sections[shstrtab].size = names.size();

        let (extents, end) = place_loaded(&mut sections[..symtab]);

        // The tables that do not load, after the last segment.
        let mut off = end;
        for s in &mut sections[symtab..] {
            off = align_up(off, s.align);
            s.offset = off;
            off += s.size;
        }
        let shoff = align_up(off, 8);
        let size = shoff + SHDR * sections.len() as u64;

        let program_headers = program_headers(&sections, &extents, dynamic, relro_padding);
        Layout {
            output_of: output_of(&sections, plan.sections.len()),
            sections,
            synthetic: Synthetic {
                dynsym,
                gnu_hash,
                hash,
                dynstr,
                shstrtab,
            },
            program_headers,
            shstrtab: names,
            hash_buckets,
            shoff,
            size,
        }
    }

    /// A symbol's section-header index and its address (its value for an absolute symbol).
    pub fn symbol(&self, symbol: &Symbol) -> (elf::SymbolSection, u64) {
        match symbol.place {
            Place::Absolute => (elf::SHN_ABS, symbol.value),
            Place::Section(i) => {
                let out = self.output_of[i];
                (
                    elf::SymbolSection(out as u16),
                    self.sections[out].addr + symbol.value,
                )
            }
        }
    }
}

/// Places the loaded sections (every one after the null header) in the three segments and
/// returns the segments' extents and the file offset after them. The read-only segment starts at
/// address 0 with the headers; each later one starts on a new page at an address congruent to
/// its file offset, as lld does.
fn place_loaded(sections: &mut [OutSection]) -> ([Extent; 3], u64) {
    // The writable segment's memory size counts its NOBITS sections (lld's RELRO padding, any
    // `.bss`), which take no room in the file.
    let first_writable = sections
        .iter()
        .position(|s| s.segment == Some(2))
        .unwrap_or(sections.len());
    let mut off = EHDR + PROGRAM_HEADERS * PHDR;
    let mut addr_base = 0u64; // addr = off + addr_base within a segment
    let mut extents = [Extent::default(); 3];
    let mut seg = 0usize;
    for s in sections.iter_mut().skip(1) {
        let next = s.segment.expect("every section placed here loads");
        if next != seg {
            let e = &mut extents[seg];
            e.filesz = off - e.offset;
            e.memsz = e.filesz;
            let end_addr = e.addr + e.filesz;
            seg = next;
            let sec_off = align_up(off, s.align);
            let addr = align_up(end_addr, PAGE) + sec_off % PAGE;
            addr_base = addr - sec_off;
            extents[seg] = Extent {
                offset: sec_off,
                addr,
                ..Extent::default()
            };
        }
        if s.contents == Contents::RelroPadding {
            let end = off + addr_base;
            s.size = align_up(end, PAGE) - end;
        }
        off = align_up(off, s.align);
        s.offset = off;
        s.addr = off + addr_base;
        if s.sh_type != elf::SHT_NOBITS {
            off += s.size;
        }
    }
    let nobits: u64 = sections[first_writable..]
        .iter()
        .filter(|s| s.sh_type == elf::SHT_NOBITS)
        .map(|s| s.size)
        .sum();
    let e = &mut extents[seg];
    e.filesz = off - e.offset;
    e.memsz = e.filesz + nobits;
    (extents, off)
}

fn gnu_hash_size(symbols: usize) -> u64 {
    // Header, one Bloom word, one bucket, one hash per symbol: see `emit::gnu_hash_table`.
    16 + 8 + 4 + 4 * symbols as u64
}

fn output_of(sections: &[OutSection], inputs: usize) -> Vec<usize> {
    let mut out = vec![0; inputs];
    for (o, s) in sections.iter().enumerate() {
        if let Contents::Input(i) = s.contents {
            out[i] = o;
        }
    }
    out
}

fn program_headers(
    sections: &[OutSection],
    extents: &[Extent; 3],
    dynamic: usize,
    relro_padding: usize,
) -> Vec<ProgramHeader> {
    let (r, w, x) = (elf::PF_R.0, elf::PF_W.0, elf::PF_X.0);
    let header = |p_type, flags, extent, align| ProgramHeader {
        p_type,
        flags,
        extent,
        align,
    };
    // A range loaded where it sits in the file.
    let at = |offset: u64, size: u64| Extent {
        offset,
        addr: offset,
        filesz: size,
        memsz: size,
    };
    let d = &sections[dynamic];
    let dynamic = Extent {
        offset: d.offset,
        addr: d.addr,
        filesz: d.size,
        memsz: d.size,
    };
    let pad = &sections[relro_padding];
    let relro = Extent {
        memsz: pad.addr + pad.size - d.addr,
        ..dynamic
    };
    // The notes come first in the read-only segment, where offset = address.
    let notes: Vec<&OutSection> = sections
        .iter()
        .filter(|s| s.sh_type == elf::SHT_NOTE)
        .collect();
    let notes = match (notes.first(), notes.last()) {
        (Some(first), Some(last)) => at(first.offset, last.offset + last.size - first.offset),
        _ => at(0, 0),
    };
    vec![
        header(elf::PT_PHDR, r, at(EHDR, PROGRAM_HEADERS * PHDR), 8),
        // The read-only segment includes the headers from offset 0.
        header(elf::PT_LOAD, r, extents[0], PAGE),
        header(elf::PT_LOAD, r | x, extents[1], PAGE),
        header(elf::PT_LOAD, r | w, extents[2], PAGE),
        header(elf::PT_DYNAMIC, r | w, dynamic, 8),
        header(elf::PT_GNU_RELRO, r, relro, 1),
        header(elf::PT_GNU_STACK, r | w, at(0, 0), 0),
        header(elf::PT_NOTE, r, notes, 4),
    ]
}
