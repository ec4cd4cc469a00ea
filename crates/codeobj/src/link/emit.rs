//! Emission: the tables the linker makes (symbols, hashes, dynamic section) and the ELF file.

use object::elf;
use object::endian::{I64, LittleEndian as LE, U16, U32, U64};
use object::pod::bytes_of;

use super::layout::{Contents, DYNAMIC_ENTRIES, EHDR, Layout, PHDR, ProgramHeader, SHDR, SYM};
use super::plan::{Plan, Symbol};
use super::relocate::Relocated;

/// The code object's bytes.
pub(super) fn write(plan: &Plan, layout: &Layout, relocated: Relocated) -> Vec<u8> {
    let mut out = vec![0u8; layout.size as usize];
    let mut put = |at: u64, bytes: &[u8]| {
        let at = at as usize;
        out[at..at + bytes.len()].copy_from_slice(bytes);
    };
    put(0, bytes_of(&file_header(plan, layout)));
    for (i, ph) in layout.program_headers.iter().enumerate() {
        put(EHDR + i as u64 * PHDR, bytes_of(&program_header(ph)));
    }
    let mut relocated = relocated.0;
    for (i, s) in layout.sections.iter().enumerate() {
        let data = match s.contents {
            Contents::Null | Contents::RelroPadding => Vec::new(),
            Contents::Input(i) => std::mem::take(&mut relocated[i]),
            Contents::DynSym => dynsym(plan, layout),
            Contents::GnuHash => gnu_hash_table(&dynamic_names(plan)),
            Contents::Hash => sysv_hash_table(&dynamic_names(plan), layout.hash_buckets),
            Contents::DynStr => plan.dynstr.bytes.clone(),
            Contents::Dynamic => dynamic(plan, layout),
            Contents::SymTab => symtab(plan, layout),
            Contents::StrTab => plan.strtab.bytes.clone(),
            Contents::ShStrTab => layout.shstrtab.bytes.clone(),
        };
        if s.sh_type != elf::SHT_NOBITS {
            debug_assert_eq!(data.len() as u64, s.size, "section {i}'s size as laid out");
            put(s.offset, &data);
        }
        if i > 0 {
            put(layout.shoff + i as u64 * SHDR, bytes_of(&section_header(s)));
        }
    }
    out
}

fn file_header(plan: &Plan, layout: &Layout) -> elf::FileHeader64<LE> {
    let half = |v: u64| U16::new(LE, v as u16);
    elf::FileHeader64 {
        e_ident: elf::Ident {
            magic: elf::ELFMAG,
            class: elf::ELFCLASS64,
            data: elf::ELFDATA2LSB,
            version: elf::EV_CURRENT,
            os_abi: plan.os_abi,
            abi_version: plan.abi_version,
            padding: [0; 7],
        },
        e_type: U16::new(LE, elf::ET_DYN),
        e_machine: U16::new(LE, elf::EM_AMDGPU),
        e_version: U32::new(LE, u32::from(elf::EV_CURRENT.0)),
        e_entry: U64::new(LE, 0),
        e_phoff: U64::new(LE, EHDR),
        e_shoff: U64::new(LE, layout.shoff),
        e_flags: U32::new(LE, plan.e_flags),
        e_ehsize: half(EHDR),
        e_phentsize: half(PHDR),
        e_phnum: half(layout.program_headers.len() as u64),
        e_shentsize: half(SHDR),
        e_shnum: half(layout.sections.len() as u64),
        e_shstrndx: U16::new(LE, elf::SymbolSection(layout.synthetic.shstrtab as u16)),
    }
}

fn program_header(ph: &ProgramHeader) -> elf::ProgramHeader64<LE> {
    let e = ph.extent;
    elf::ProgramHeader64 {
        p_type: U32::new(LE, ph.p_type),
        p_flags: U32::new(LE, elf::ProgramFlags(ph.flags)),
        p_offset: U64::new(LE, e.offset),
        p_vaddr: U64::new(LE, e.addr),
        p_paddr: U64::new(LE, e.addr),
        p_filesz: U64::new(LE, e.filesz),
        p_memsz: U64::new(LE, e.memsz),
        p_align: U64::new(LE, ph.align),
    }
}

fn section_header(s: &super::layout::OutSection) -> elf::SectionHeader64<LE> {
    elf::SectionHeader64 {
        sh_name: U32::new(LE, s.name),
        sh_type: U32::new(LE, s.sh_type),
        sh_flags: U64::new(LE, s.flags),
        sh_addr: U64::new(LE, s.addr),
        sh_offset: U64::new(LE, s.offset),
        sh_size: U64::new(LE, s.size),
        sh_link: U32::new(LE, s.link),
        sh_info: U32::new(LE, s.info),
        sh_addralign: U64::new(LE, s.align),
        sh_entsize: U64::new(LE, s.entsize),
    }
}

/// One symbol table entry for `symbol`, named at `name`.
fn sym(layout: &Layout, symbol: &Symbol, name: u32) -> elf::Sym64<LE> {
    let (shndx, value) = layout.symbol(symbol);
    elf::Sym64 {
        st_name: U32::new(LE, name),
        st_info: symbol.info,
        st_other: symbol.other,
        st_shndx: U16::new(LE, shndx),
        st_value: U64::new(LE, value),
        st_size: U64::new(LE, symbol.size),
    }
}

/// A symbol table: the null entry, then `entries`.
fn symbol_table(entries: impl Iterator<Item = elf::Sym64<LE>>) -> Vec<u8> {
    let mut out = vec![0u8; SYM as usize];
    for e in entries {
        out.extend_from_slice(bytes_of(&e));
    }
    out
}

fn symtab(plan: &Plan, layout: &Layout) -> Vec<u8> {
    symbol_table(
        plan.symbols
            .iter()
            .zip(&plan.symbol_names)
            .map(|(s, &name)| sym(layout, s, name)),
    )
}

fn dynsym(plan: &Plan, layout: &Layout) -> Vec<u8> {
    symbol_table(
        plan.dynamic
            .iter()
            .zip(&plan.dynamic_names)
            .map(|(&i, &name)| sym(layout, &plan.symbols[i], name)),
    )
}

fn dynamic_names(plan: &Plan) -> Vec<&str> {
    plan.dynamic
        .iter()
        .map(|&i| plan.symbols[i].name.as_str())
        .collect()
}

fn dynamic(plan: &Plan, layout: &Layout) -> Vec<u8> {
    let at = |i: usize| layout.sections[i].addr;
    let t = layout.synthetic;
    let entries = [
        (elf::DT_SYMTAB, at(t.dynsym)),
        (elf::DT_SYMENT, SYM),
        (elf::DT_STRTAB, at(t.dynstr)),
        (elf::DT_STRSZ, plan.dynstr.size()),
        (elf::DT_GNU_HASH, at(t.gnu_hash)),
        (elf::DT_HASH, at(t.hash)),
        (elf::DT_NULL, 0),
    ];
    debug_assert_eq!(entries.len() as u64, DYNAMIC_ENTRIES);
    let mut out = Vec::new();
    for (tag, val) in entries {
        out.extend_from_slice(bytes_of(&elf::Dyn64 {
            d_tag: I64::new(LE, tag),
            d_val: U64::new(LE, val),
        }));
    }
    out
}

/// The SysV `.hash` table over dynamic symbols 1..=n (symbol 0 is the null symbol).
fn sysv_hash_table(names: &[&str], buckets: u32) -> Vec<u8> {
    let chains = names.len() as u32 + 1;
    let mut bucket = vec![0u32; buckets as usize];
    let mut chain = vec![0u32; chains as usize];
    for (i, name) in names.iter().enumerate() {
        let sym = i as u32 + 1;
        let b = (elf::hash(name.as_bytes()) % buckets) as usize;
        chain[sym as usize] = bucket[b];
        bucket[b] = sym;
    }
    let mut out = Vec::new();
    for w in [buckets, chains].into_iter().chain(bucket).chain(chain) {
        out.extend(w.to_le_bytes());
    }
    out
}

/// The GNU `.gnu.hash` table with one bucket and a one-word Bloom filter (enough for the one or
/// two dynamic symbols of a kernel; the dynamic symbols need no reordering with one bucket).
fn gnu_hash_table(names: &[&str]) -> Vec<u8> {
    const SHIFT: u32 = 26;
    let hashes: Vec<u32> = names.iter().map(|n| elf::gnu_hash(n.as_bytes())).collect();
    let mut bloom = 0u64;
    for &h in &hashes {
        bloom |= 1 << (h % 64);
        bloom |= 1 << ((h >> SHIFT) % 64);
    }
    let mut out = Vec::new();
    // Buckets, first hashed symbol, Bloom words, Bloom shift.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_the_abi_ones() {
        // Values of the System V ABI hash for well-known names, and the GNU hash (djb2).
        assert_eq!(elf::hash(b""), 0);
        assert_eq!(elf::hash(b"printf"), 0x077905a6);
        assert_eq!(elf::hash(b"exit"), 0x0006cf04);
        assert_eq!(elf::gnu_hash(b""), 5381);
        assert_eq!(elf::gnu_hash(b"printf"), 0x156b2bb8);
    }

    #[test]
    fn hash_tables_chain_every_symbol() {
        // Two names in three buckets: each bucket heads a chain ending at 0.
        let t = sysv_hash_table(&["a", "b"], 3);
        let words: Vec<u32> = t
            .chunks(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(&words[..2], &[3, 3]);
        let (buckets, chains) = words[2..].split_at(3);
        let mut seen: Vec<u32> = Vec::new();
        for &head in buckets {
            let mut s = head;
            while s != 0 {
                seen.push(s);
                s = chains[s as usize];
            }
        }
        seen.sort_unstable();
        assert_eq!(seen, [1, 2]);
        // The GNU table marks the last hash of its one chain.
        let g = gnu_hash_table(&["a", "b"]);
        assert_eq!(g.len(), 16 + 8 + 4 + 8);
        assert_eq!(u32::from_le_bytes(g[32..36].try_into().unwrap()) & 1, 1);
    }
}
