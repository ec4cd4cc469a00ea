//! Damaged code objects through the reader, the loader and a small launch, in-process and by
//! the thousand: each must give a typed error or a fault, never a panic, an abort or an
//! allocation beyond the device memory limit. (`tilegen-cli`'s `hostile_codeobj` test runs
//! fewer mutants through the binary, under a memory cap and a deadline.)
//!
//! The mutants are seeded: truncations, and byte flips and extreme values of 32- and 64-bit
//! fields anywhere in the file, aimed mostly at the ELF, program and section headers, the
//! kernel descriptor, the metadata note and `.text`. `HOSTILE_LOAD_MUTANTS` sets the number per
//! code object (1000 by default; 20000 per code object were run clean while developing).

mod common;

use common::Rng;
use tilegen_codeobj::CodeObject;
use tilegen_emu::exec::{DeviceMemory, EmuConfig, Emulator, FaultKind, Limits};

/// The device memory limit of every launch: any image, scratch or kernarg segment beyond it
/// must be refused before it is allocated.
const LIMIT: u64 = 256 << 20;

/// File ranges worth aiming at: (start, end) of the ELF header, program headers, section
/// headers, each section's contents.
fn regions(b: &[u8]) -> Vec<(usize, usize)> {
    let u16_at = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]) as usize;
    let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap()) as usize;
    let (phoff, shoff) = (u64_at(32), u64_at(40));
    let (phnum, shnum) = (u16_at(56), u16_at(60));
    let mut r = vec![
        (0, 64),
        (phoff, phoff + 56 * phnum),
        (shoff, shoff + 64 * shnum),
    ];
    for i in 0..shnum {
        let sh = shoff + 64 * i;
        let (off, size) = (u64_at(sh + 24), u64_at(sh + 32));
        if size > 0 && off + size <= b.len() {
            r.push((off, off + size));
        }
    }
    r
}

fn mutate(b: &[u8], regions: &[(usize, usize)], rng: &mut Rng) -> (String, Vec<u8>) {
    const EXTREMES: [u64; 8] = [
        0,
        0xffff_ffff,
        1 << 32,
        1 << 40,
        280_000_000_000_000,
        i64::MAX as u64,
        u64::MAX - 7,
        u64::MAX,
    ];
    let mut m = b.to_vec();
    if rng.below(10) == 0 {
        let cut = rng.below(b.len() as u32) as usize;
        m.truncate(cut);
        return (format!("truncated to {cut}"), m);
    }
    let mut what = Vec::new();
    for _ in 0..1 + rng.below(3) {
        let (s, e) = if rng.below(8) == 0 {
            (0, b.len())
        } else {
            regions[rng.below(regions.len() as u32) as usize]
        };
        let at = s + rng.below((e - s).max(1) as u32) as usize;
        let (width, v) = match rng.below(4) {
            0 => (1, rng.next_u64() & 0xff),
            1 => (1, (m[at.min(m.len() - 1)] ^ (1 << rng.below(8))) as u64),
            2 => (4, EXTREMES[rng.below(8) as usize]),
            _ => (8, EXTREMES[rng.below(8) as usize]),
        };
        for (i, byte) in v.to_le_bytes()[..width].iter().enumerate() {
            if let Some(slot) = m.get_mut(at + i) {
                *slot = *byte;
            }
        }
        what.push(format!("{width} bytes at {at} = {v:#x}"));
    }
    (what.join(", "), m)
}

/// Parses, loads all kernels and launches the first on one workgroup with a zeroed kernarg
/// segment and a small budget. Returns what happened, for the tally.
fn exercise(bytes: &[u8]) -> &'static str {
    let co = match CodeObject::parse(bytes) {
        Ok(co) => co,
        Err(_) => return "parse error",
    };
    let config = EmuConfig {
        limits: Limits {
            max_memory: LIMIT,
            wave_instruction_budget: 20_000,
            ..Limits::default()
        },
        single_threaded: true,
        ..EmuConfig::default()
    };
    let mut emu = Emulator::with_config(DeviceMemory::with_limit(LIMIT), config);
    let Ok(programs) = emu.load_all(&co) else {
        return "load error";
    };
    assert!(emu.memory().in_use() <= LIMIT);
    let Some(prog) = programs.first() else {
        return "loaded";
    };
    let block = [
        prog.setup().descriptor.kernel_code_properties as u32 % 4 * 64 + 64,
        1,
        1,
    ];
    match emu.launch(prog, [1, 1, 1], block, &[0; 64], 0) {
        Ok(_) => "ran",
        Err(f) => match *f.kind {
            FaultKind::Limit(_) | FaultKind::Launch(_) => "launch refused",
            _ => "fault",
        },
    }
}

#[test]
fn damaged_code_objects_give_errors_or_faults() {
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    let per_base: usize = std::env::var("HOSTILE_LOAD_MUTANTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let start = std::time::Instant::now();
    let mut tally = std::collections::BTreeMap::new();
    for (i, fk) in corpus.iter().take(3).enumerate() {
        let bytes = std::fs::read(&fk.hsaco).unwrap();
        let clean = exercise(&bytes);
        assert!(matches!(clean, "fault" | "ran"), "{}: {clean}", fk.name());
        let regions = regions(&bytes);
        let mut rng = Rng(0x9e37_79b9 + i as u64);
        for n in 0..per_base {
            let (what, m) = mutate(&bytes, &regions, &mut rng);
            // A panic is reported with the mutant that caused it.
            match std::panic::catch_unwind(|| exercise(&m)) {
                Ok(kind) => *tally.entry(kind).or_insert(0) += 1,
                Err(_) => panic!("panicked on {} mutant {n}: {what}", fk.name()),
            }
        }
    }
    eprintln!(
        "damaged code objects: {tally:?} in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}
