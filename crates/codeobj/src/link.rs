//! In-process linking of LLVM's relocatable gfx950 object into a loadable HSA code object.
//!
//! A kernel object holds a handful of allocated sections (`.note` with the metadata, `.rodata`
//! with the 64-byte kernel descriptors, `.text`), a symbol table and PC-relative relocations (the
//! descriptor's entry offset). Linking it is a fixed, small job: lay the sections out in three
//! segments the way `ld.lld` does, apply the relocations, and add the dynamic symbol table the
//! HSA loader looks kernels up in. Doing it here saves a linker process per kernel (16-19 ms,
//! several times the cost of codegen). The input is read with `object`; the output is written
//! directly because its structure is fixed and must stay byte-predictable (tests compare it
//! with `ld.lld-22`).

use object::read::elf::{ElfFile64, FileHeader as _, SectionHeader as _, Sym as _};
use object::{
    Endianness, Object, ObjectSection, ObjectSymbol, RelocationFlags, RelocationTarget,
    SymbolSection,
};

const PAGE: u64 = 0x1000;
const EHDR: u64 = 64;
const PHDR: u64 = 56;
const SHDR: u64 = 64;
const SYM: u64 = 24;

const SHT_PROGBITS: u32 = 1;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_HASH: u32 = 5;
const SHT_DYNAMIC: u32 = 6;
const SHT_NOTE: u32 = 7;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const SHF_WRITE: u64 = 1;
const SHF_ALLOC: u64 = 2;
const SHF_EXECINSTR: u64 = 4;
const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_NOTE: u32 = 4;
const PT_PHDR: u32 = 6;
const PT_GNU_STACK: u32 = 0x6474_e551;
const PT_GNU_RELRO: u32 = 0x6474_e552;
const SHT_GNU_HASH: u32 = 0x6fff_fff6;
const DT_GNU_HASH: u64 = 0x6fff_fef5;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const PF_R: u32 = 4;
const SHN_ABS: u16 = 0xfff1;
const STB_LOCAL: u8 = 0;
const STT_SECTION: u8 = 3;
const STT_FILE: u8 = 4;
const STV_HIDDEN: u8 = 2;
const DT_NULL: u64 = 0;
const DT_HASH: u64 = 4;
const DT_STRTAB: u64 = 5;
const DT_SYMTAB: u64 = 6;
const DT_STRSZ: u64 = 10;
const DT_SYMENT: u64 = 11;
const EM_AMDGPU: u16 = 224;
const ET_REL: u16 = 1;
const ET_DYN: u16 = 3;

// AMDGPU relocation types (llvm/BinaryFormat/ELFRelocs/AMDGPU.def).
const R_AMDGPU_NONE: u32 = 0;
const R_AMDGPU_REL32: u32 = 4;
const R_AMDGPU_REL64: u32 = 5;
const R_AMDGPU_REL32_LO: u32 = 10;
const R_AMDGPU_REL32_HI: u32 = 11;

/// Why a relocatable object could not be linked.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// Not a relocatable AMDGPU ELF64 object.
    #[error("not a relocatable AMDGPU ELF64 object: {0}")]
    Input(String),
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
    /// A reference to a symbol nothing defines.
    #[error("undefined symbol `{0}`")]
    Undefined(String),
    /// A PC-relative value that does not fit its field.
    #[error("relocation against `{0}` overflows its 32-bit field")]
    Overflow(String),
}

struct OutSection {
    name: String,
    sh_type: u32,
    flags: u64,
    align: u64,
    data: Vec<u8>,
    /// Size in memory (differs from `data.len()` for NOBITS).
    size: u64,
    /// Input section index, if copied from the input.
    input: Option<usize>,
    addr: u64,
    offset: u64,
    link: u32,
    info: u32,
    entsize: u64,
}

impl OutSection {
    fn synthetic(name: &str, sh_type: u32, flags: u64, align: u64) -> Self {
        OutSection {
            name: name.to_string(),
            sh_type,
            flags,
            align,
            data: Vec::new(),
            size: 0,
            input: None,
            addr: 0,
            offset: 0,
            link: 0,
            info: 0,
            entsize: 0,
        }
    }
}

struct Symbol {
    name: String,
    info: u8,
    other: u8,
    /// Output section index, or None for absolute.
    section: Option<usize>,
    value: u64,
    size: u64,
}

fn align_up(v: u64, a: u64) -> u64 {
    if a <= 1 { v } else { v.div_ceil(a) * a }
}

fn input_err(e: impl std::fmt::Display) -> LinkError {
    LinkError::Input(e.to_string())
}

/// Links one relocatable gfx950 object into a code object (an ELF shared object).
pub fn link(object: &[u8]) -> Result<Vec<u8>, LinkError> {
    let file = ElfFile64::<Endianness>::parse(object).map_err(input_err)?;
    let endian = file.endian();
    let header = file.elf_header();
    if header.e_type(endian).0 != ET_REL || header.e_machine(endian).0 != EM_AMDGPU {
        return Err(LinkError::Input(format!(
            "e_type {} e_machine {} (want {ET_REL} and {EM_AMDGPU})",
            header.e_type(endian).0,
            header.e_machine(endian).0
        )));
    }
    let ident = header.e_ident();
    let (os_abi, abi_version) = (ident.os_abi.0, ident.abi_version);
    let e_flags = header.e_flags(endian).0;

    // Output sections in address order: notes, dynamic symbols, read-only data, code, writable.
    let mut notes = Vec::new();
    let mut rodata = Vec::new();
    let mut text = Vec::new();
    let mut rw = Vec::new();
    for section in file.sections() {
        let sh = section.elf_section_header();
        let flags = sh.sh_flags(endian).0;
        if flags & SHF_ALLOC == 0 {
            continue;
        }
        let sh_type = sh.sh_type(endian).0;
        let data = if sh_type == SHT_NOBITS {
            Vec::new()
        } else {
            section.data().map_err(input_err)?.to_vec()
        };
        let out = OutSection {
            name: section.name().map_err(input_err)?.to_string(),
            sh_type,
            flags,
            align: section.align().max(1),
            size: section.size(),
            data,
            input: Some(section.index().0),
            addr: 0,
            offset: 0,
            link: 0,
            info: 0,
            entsize: 0,
        };
        if sh_type == SHT_NOTE {
            notes.push(out);
        } else if flags & SHF_EXECINSTR != 0 {
            text.push(out);
        } else if flags & SHF_WRITE != 0 {
            rw.push(out);
        } else {
            rodata.push(out);
        }
    }

    // Symbols: everything but section and file symbols; locals first, as ELF requires.
    let mut symbols: Vec<(Symbol, usize)> = Vec::new();
    for sym in file.symbols() {
        let raw = sym.elf_symbol();
        let st_type = raw.st_type().0;
        if st_type == STT_SECTION || st_type == STT_FILE {
            continue;
        }
        let name = sym.name().map_err(input_err)?.to_string();
        let section = match sym.section() {
            SymbolSection::Section(i) => Some(i.0),
            SymbolSection::Absolute => None,
            SymbolSection::Undefined => return Err(LinkError::Undefined(name)),
            _ => continue,
        };
        symbols.push((
            Symbol {
                name,
                info: raw.st_info().0,
                other: raw.st_other().0,
                section,
                value: raw.st_value(endian),
                size: raw.st_size(endian),
            },
            sym.index().0,
        ));
    }
    symbols.sort_by_key(|(s, _)| (s.info >> 4) != STB_LOCAL);

    // Dynamic symbols: the global, visible definitions (the kernel and its descriptor).
    let dynamic: Vec<usize> = symbols
        .iter()
        .enumerate()
        .filter(|(_, (s, _))| {
            s.info >> 4 != STB_LOCAL && s.other & 3 != STV_HIDDEN && s.section.is_some()
        })
        .map(|(i, _)| i)
        .collect();
    let mut dynstr = vec![0u8];
    let dyn_names: Vec<u32> = dynamic
        .iter()
        .map(|&i| {
            let off = dynstr.len() as u32;
            dynstr.extend_from_slice(symbols[i].0.name.as_bytes());
            dynstr.push(0);
            off
        })
        .collect();

    let mut sections: Vec<OutSection> = Vec::new();
    sections.push(OutSection::synthetic("", 0, 0, 0));
    sections.extend(notes);
    let dynsym_idx = sections.len();
    let mut s = OutSection::synthetic(".dynsym", SHT_DYNSYM, SHF_ALLOC, 8);
    s.size = (dynamic.len() as u64 + 1) * SYM;
    s.entsize = SYM;
    s.info = 1;
    sections.push(s);
    let gnu_hash_idx = sections.len();
    let mut s = OutSection::synthetic(".gnu.hash", SHT_GNU_HASH, SHF_ALLOC, 8);
    s.size = 16 + 8 + 4 + 4 * dynamic.len() as u64;
    sections.push(s);
    sections[gnu_hash_idx].link = dynsym_idx as u32;
    let hash_idx = sections.len();
    let nsyms = dynamic.len() as u32 + 1;
    // lld sizes the SysV table with one bucket per dynamic symbol (null included).
    let nbucket = nsyms;
    let mut s = OutSection::synthetic(".hash", SHT_HASH, SHF_ALLOC, 4);
    s.size = 4 * (2 + nbucket as u64 + nsyms as u64);
    s.entsize = 4;
    sections.push(s);
    let dynstr_idx = sections.len();
    let mut s = OutSection::synthetic(".dynstr", SHT_STRTAB, SHF_ALLOC, 1);
    s.size = dynstr.len() as u64;
    s.data = dynstr.clone();
    sections.push(s);
    sections[dynsym_idx].link = dynstr_idx as u32;
    sections[hash_idx].link = dynsym_idx as u32;
    sections.extend(rodata);
    let first_text = sections.len();
    sections.extend(text);
    let first_rw = sections.len();
    let dynamic_idx = sections.len();
    let mut s = OutSection::synthetic(".dynamic", SHT_DYNAMIC, SHF_ALLOC | SHF_WRITE, 8);
    s.size = 7 * 16;
    s.entsize = 16;
    s.link = dynstr_idx as u32;
    sections.push(s);
    sections.extend(rw);
    // Like lld, pad the RELRO region (the dynamic table) to the end of its page.
    let relro_pad_idx = sections.len();
    sections.push(OutSection::synthetic(
        ".relro_padding",
        SHT_NOBITS,
        SHF_ALLOC | SHF_WRITE,
        1,
    ));
    let symtab_idx = sections.len();
    let mut s = OutSection::synthetic(".symtab", SHT_SYMTAB, 0, 8);
    s.entsize = SYM;
    sections.push(s);
    let strtab_idx = sections.len();
    sections.push(OutSection::synthetic(".strtab", SHT_STRTAB, 0, 1));
    let shstrtab_idx = sections.len();
    sections.push(OutSection::synthetic(".shstrtab", SHT_STRTAB, 0, 1));
    sections[symtab_idx].link = strtab_idx as u32;

    // Layout. Segment 1 (R) starts at address 0 with the headers; each later segment starts on a
    // new page at an address congruent to its file offset, as lld does.
    let nphdr = 8u64;
    let mut off = EHDR + nphdr * PHDR;
    let mut addr_base = 0u64; // addr = off + addr_base within a segment
    let mut segment_bounds = [(0u64, 0u64, 0u64, 0u64); 3]; // (offset, addr, filesz, memsz)
    let rx_start = first_text;
    let rw_start = first_rw;
    let mut seg = 0usize;
    segment_bounds[0] = (0, 0, 0, 0);
    // `i` is compared with the segment start indices as well as used to index the sections.
    #[allow(clippy::needless_range_loop)]
    for i in 1..symtab_idx {
        let next_seg = if i >= rw_start {
            2
        } else if i >= rx_start {
            1
        } else {
            0
        };
        if next_seg != seg {
            let (so, sa, _, _) = segment_bounds[seg];
            let end_addr = sa + (off - so);
            segment_bounds[seg].2 = off - so;
            segment_bounds[seg].3 = end_addr - sa;
            seg = next_seg;
            let sec_off = align_up(off, sections[i].align);
            let page = align_up(end_addr, PAGE);
            let addr = page + sec_off % PAGE;
            addr_base = addr - sec_off;
            segment_bounds[seg] = (sec_off, addr, 0, 0);
        }
        if i == relro_pad_idx {
            let end = off + addr_base;
            sections[i].size = align_up(end, PAGE) - end;
        }
        let sct = &mut sections[i];
        off = align_up(off, sct.align);
        sct.offset = off;
        sct.addr = off + addr_base;
        if sct.input.is_some() && sct.sh_type != SHT_NOBITS {
            sct.size = sct.data.len() as u64;
        }
        if sct.sh_type != SHT_NOBITS {
            off += sct.size;
        }
    }
    {
        let (so, sa, _, _) = segment_bounds[seg];
        segment_bounds[seg].2 = off - so;
        let nobits: u64 = sections[rw_start..symtab_idx]
            .iter()
            .filter(|s| s.sh_type == SHT_NOBITS)
            .map(|s| s.size)
            .sum();
        segment_bounds[seg].3 = off - so + nobits;
        let _ = sa;
    }

    // Map input section index -> output section index.
    let index_of: std::collections::HashMap<usize, usize> = sections
        .iter()
        .enumerate()
        .filter_map(|(o, s)| s.input.map(|i| (i, o)))
        .collect();
    let out_of = |input: usize| index_of.get(&input).copied();
    let addrs: Vec<u64> = sections.iter().map(|s| s.addr).collect();
    let sym_addr = |s: &Symbol| -> Option<u64> {
        match s.section {
            None => Some(s.value),
            Some(i) => out_of(i).map(|o| addrs[o] + s.value),
        }
    };

    // Relocations.
    let mut patches: Vec<(usize, usize, Vec<u8>)> = Vec::new();
    for section in file.sections() {
        let Some(target) = out_of(section.index().0) else {
            continue;
        };
        for (offset, rel) in section.relocations() {
            let RelocationFlags::Elf { r_type } = rel.flags() else {
                return Err(LinkError::Input("non-ELF relocation".into()));
            };
            let r_type = r_type.0;
            if r_type == R_AMDGPU_NONE {
                continue;
            }
            let RelocationTarget::Symbol(si) = rel.target() else {
                return Err(LinkError::Input(format!(
                    "relocation at {offset:#x} without a symbol"
                )));
            };
            let (sym, _) = symbols
                .iter()
                .find(|(_, idx)| *idx == si.0)
                .ok_or_else(|| LinkError::Undefined(format!("symbol #{}", si.0)))?;
            let s = sym_addr(sym).ok_or_else(|| LinkError::Undefined(sym.name.clone()))?;
            let p = addrs[target] + offset;
            let v = (s as i64).wrapping_add(rel.addend()).wrapping_sub(p as i64);
            let bytes = match r_type {
                R_AMDGPU_REL64 => v.to_le_bytes().to_vec(),
                R_AMDGPU_REL32 => {
                    let t = i32::try_from(v).map_err(|_| LinkError::Overflow(sym.name.clone()))?;
                    t.to_le_bytes().to_vec()
                }
                R_AMDGPU_REL32_LO => (v as u64 as u32).to_le_bytes().to_vec(),
                R_AMDGPU_REL32_HI => ((v as u64 >> 32) as u32).to_le_bytes().to_vec(),
                _ => {
                    return Err(LinkError::Relocation {
                        r_type,
                        symbol: sym.name.clone(),
                    });
                }
            };
            patches.push((target, offset as usize, bytes));
        }
    }
    for (target, at, bytes) in patches {
        let data = &mut sections[target].data;
        let end = at + bytes.len();
        if end > data.len() {
            return Err(LinkError::Input(format!(
                "relocation at {at:#x} past the end of {}",
                sections[target].name
            )));
        }
        data[at..end].copy_from_slice(&bytes);
    }

    // Symbol tables.
    let mut strtab = vec![0u8];
    let mut symtab = vec![0u8; SYM as usize];
    let mut first_global = 1u32;
    for (n, (s, _)) in symbols.iter().enumerate() {
        let name = strtab.len() as u32;
        strtab.extend_from_slice(s.name.as_bytes());
        strtab.push(0);
        let (shndx, value) = match s.section {
            None => (SHN_ABS, s.value),
            Some(i) => {
                let o = out_of(i).ok_or_else(|| {
                    LinkError::Input(format!("symbol {} in a dropped section", s.name))
                })?;
                (o as u16, addrs[o] + s.value)
            }
        };
        if s.info >> 4 == STB_LOCAL {
            first_global = n as u32 + 2;
        }
        symtab.extend(sym_bytes(name, s.info, s.other, shndx, value, s.size));
    }
    sections[symtab_idx].data = symtab;
    sections[symtab_idx].info = first_global;
    sections[strtab_idx].data = strtab;
    let mut dynsym = vec![0u8; SYM as usize];
    for (k, &i) in dynamic.iter().enumerate() {
        let s = &symbols[i].0;
        let o = s
            .section
            .and_then(out_of)
            .ok_or_else(|| LinkError::Undefined(s.name.clone()))?;
        dynsym.extend(sym_bytes(
            dyn_names[k],
            s.info,
            s.other,
            o as u16,
            addrs[o] + s.value,
            s.size,
        ));
    }
    sections[dynsym_idx].data = dynsym;
    sections[gnu_hash_idx].data = gnu_hash_table(
        &dynamic
            .iter()
            .map(|&i| symbols[i].0.name.as_str())
            .collect::<Vec<_>>(),
    );
    sections[hash_idx].data = sysv_hash_table(
        &dynamic
            .iter()
            .map(|&i| symbols[i].0.name.as_str())
            .collect::<Vec<_>>(),
        nbucket,
    );
    let mut dynamic_data = Vec::new();
    for (tag, val) in [
        (DT_SYMTAB, sections[dynsym_idx].addr),
        (DT_SYMENT, SYM),
        (DT_STRTAB, sections[dynstr_idx].addr),
        (DT_STRSZ, dynstr.len() as u64),
        (DT_GNU_HASH, sections[gnu_hash_idx].addr),
        (DT_HASH, sections[hash_idx].addr),
        (DT_NULL, 0),
    ] {
        dynamic_data.extend(tag.to_le_bytes());
        dynamic_data.extend(val.to_le_bytes());
    }
    sections[dynamic_idx].data = dynamic_data;
    let mut shstrtab = vec![0u8];
    let mut name_offsets = Vec::new();
    for s in &sections {
        if s.name.is_empty() {
            name_offsets.push(0u32);
            continue;
        }
        name_offsets.push(shstrtab.len() as u32);
        shstrtab.extend_from_slice(s.name.as_bytes());
        shstrtab.push(0);
    }
    sections[shstrtab_idx].data = shstrtab;

    // Non-allocated sections after the last segment.
    for sct in &mut sections[symtab_idx..] {
        off = align_up(off, sct.align);
        sct.offset = off;
        sct.size = sct.data.len() as u64;
        off += sct.size;
    }
    let shoff = align_up(off, 8);
    let total = shoff + SHDR * sections.len() as u64;

    let mut out = vec![0u8; total as usize];
    // ELF header.
    out[0..4].copy_from_slice(b"\x7fELF");
    out[4] = 2; // ELFCLASS64
    out[5] = 1; // little endian
    out[6] = 1; // EV_CURRENT
    out[7] = os_abi;
    out[8] = abi_version;
    put16(&mut out, 16, ET_DYN);
    put16(&mut out, 18, EM_AMDGPU);
    put32(&mut out, 20, 1);
    put64(&mut out, 24, 0);
    put64(&mut out, 32, EHDR);
    put64(&mut out, 40, shoff);
    put32(&mut out, 48, e_flags);
    put16(&mut out, 52, EHDR as u16);
    put16(&mut out, 54, PHDR as u16);
    put16(&mut out, 56, nphdr as u16);
    put16(&mut out, 58, SHDR as u16);
    put16(&mut out, 60, sections.len() as u16);
    put16(&mut out, 62, shstrtab_idx as u16);
    // Program headers.
    let note_range = sections.iter().filter(|s| s.sh_type == SHT_NOTE).fold(
        None,
        |acc: Option<(u64, u64)>, s| {
            Some(match acc {
                None => (s.offset, s.offset + s.size),
                Some((a, _)) => (a, s.offset + s.size),
            })
        },
    );
    let (no, ne) = note_range.unwrap_or((0, 0));
    let dynamic_sec = &sections[dynamic_idx];
    let relro_end = sections[relro_pad_idx].addr + sections[relro_pad_idx].size;
    let phdrs: [(u32, u32, u64, u64, u64, u64, u64); 8] = [
        (PT_PHDR, PF_R, EHDR, EHDR, nphdr * PHDR, nphdr * PHDR, 8),
        (
            PT_LOAD,
            PF_R,
            0,
            0,
            segment_bounds[0].2,
            segment_bounds[0].3,
            PAGE,
        ),
        (
            PT_LOAD,
            PF_R | PF_X,
            segment_bounds[1].0,
            segment_bounds[1].1,
            segment_bounds[1].2,
            segment_bounds[1].3,
            PAGE,
        ),
        (
            PT_LOAD,
            PF_R | PF_W,
            segment_bounds[2].0,
            segment_bounds[2].1,
            segment_bounds[2].2,
            segment_bounds[2].3,
            PAGE,
        ),
        (
            PT_DYNAMIC,
            PF_R | PF_W,
            dynamic_sec.offset,
            dynamic_sec.addr,
            dynamic_sec.size,
            dynamic_sec.size,
            8,
        ),
        (
            PT_GNU_RELRO,
            PF_R,
            dynamic_sec.offset,
            dynamic_sec.addr,
            dynamic_sec.size,
            relro_end - dynamic_sec.addr,
            1,
        ),
        (PT_GNU_STACK, PF_R | PF_W, 0, 0, 0, 0, 0),
        (PT_NOTE, PF_R, no, no, ne - no, ne - no, 4),
    ];
    for (i, (t, f, o, a, fs, ms, al)) in phdrs.into_iter().enumerate() {
        let at = (EHDR + i as u64 * PHDR) as usize;
        put32(&mut out, at, t);
        put32(&mut out, at + 4, f);
        put64(&mut out, at + 8, o);
        put64(&mut out, at + 16, a);
        put64(&mut out, at + 24, a);
        put64(&mut out, at + 32, fs);
        put64(&mut out, at + 40, ms);
        put64(&mut out, at + 48, al);
    }
    // Section contents and headers.
    for (i, s) in sections.iter().enumerate() {
        if s.sh_type != SHT_NOBITS && !s.data.is_empty() {
            let at = s.offset as usize;
            out[at..at + s.data.len()].copy_from_slice(&s.data);
        }
        if i == 0 {
            continue;
        }
        let at = (shoff + i as u64 * SHDR) as usize;
        put32(&mut out, at, name_offsets[i]);
        put32(&mut out, at + 4, s.sh_type);
        put64(&mut out, at + 8, s.flags);
        put64(&mut out, at + 16, s.addr);
        put64(&mut out, at + 24, s.offset);
        put64(&mut out, at + 32, s.size);
        put32(&mut out, at + 40, s.link);
        put32(&mut out, at + 44, s.info);
        put64(&mut out, at + 48, s.align);
        put64(&mut out, at + 56, s.entsize);
    }
    let _ = SHT_PROGBITS;
    Ok(out)
}

fn sym_bytes(name: u32, info: u8, other: u8, shndx: u16, value: u64, size: u64) -> [u8; 24] {
    let mut b = [0u8; 24];
    b[0..4].copy_from_slice(&name.to_le_bytes());
    b[4] = info;
    b[5] = other;
    b[6..8].copy_from_slice(&shndx.to_le_bytes());
    b[8..16].copy_from_slice(&value.to_le_bytes());
    b[16..24].copy_from_slice(&size.to_le_bytes());
    b
}

/// The SysV `.hash` table over dynamic symbols 1..=n (symbol 0 is the null symbol).
fn sysv_hash_table(names: &[&str], nbucket: u32) -> Vec<u8> {
    let nchain = names.len() as u32 + 1;
    let mut buckets = vec![0u32; nbucket as usize];
    let mut chains = vec![0u32; nchain as usize];
    for (i, name) in names.iter().enumerate() {
        let sym = i as u32 + 1;
        let b = (sysv_hash(name.as_bytes()) % nbucket) as usize;
        chains[sym as usize] = buckets[b];
        buckets[b] = sym;
    }
    let mut out = Vec::new();
    for w in [nbucket, nchain].into_iter().chain(buckets).chain(chains) {
        out.extend(w.to_le_bytes());
    }
    out
}

/// The GNU `.gnu.hash` table with one bucket and a one-word Bloom filter (enough for the one or
/// two dynamic symbols of a kernel; the dynamic symbols need no reordering with one bucket).
fn gnu_hash_table(names: &[&str]) -> Vec<u8> {
    const SHIFT: u32 = 26;
    let hashes: Vec<u32> = names.iter().map(|n| gnu_hash(n.as_bytes())).collect();
    let mut bloom = 0u64;
    for &h in &hashes {
        bloom |= 1 << (h % 64);
        bloom |= 1 << ((h >> SHIFT) % 64);
    }
    let mut out = Vec::new();
    for w in [1u32, 1, 1, SHIFT] {
        out.extend(w.to_le_bytes());
    }
    out.extend(bloom.to_le_bytes());
    out.extend((if names.is_empty() { 0u32 } else { 1 }).to_le_bytes());
    for (i, &h) in hashes.iter().enumerate() {
        let last = i + 1 == hashes.len();
        out.extend(((h & !1) | last as u32).to_le_bytes());
    }
    out
}

fn gnu_hash(name: &[u8]) -> u32 {
    name.iter()
        .fold(5381u32, |h, &c| h.wrapping_mul(33).wrapping_add(c as u32))
}

fn sysv_hash(name: &[u8]) -> u32 {
    let mut h: u32 = 0;
    for &c in name {
        h = (h << 4).wrapping_add(c as u32);
        let g = h & 0xf000_0000;
        if g != 0 {
            h ^= g >> 24;
        }
        h &= !g;
    }
    h
}

fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}
fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sysv_hash_known_values() {
        // Values of the System V ABI hash for well-known names.
        assert_eq!(sysv_hash(b""), 0);
        assert_eq!(sysv_hash(b"printf"), 0x077905a6);
        assert_eq!(sysv_hash(b"exit"), 0x0006cf04);
    }

    #[test]
    fn rejects_non_objects() {
        assert!(link(b"not an elf").is_err());
    }
}
