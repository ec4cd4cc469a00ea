//! Random encodings of every family, decoded by us and by llvm-objdump-22: both must agree on
//! whether the bytes are an instruction, on its size, and on its text. `FUZZ_PER_FAMILY` sets
//! the number of probes per family (3000 by default; 10000 was run clean while developing).

mod common;

use common::{Rng, objdump_probes, require_tool, scratch};
use tilegen_emu::isa::decode;

/// (family, fixed high bits, mask of the fixed bits, dwords)
const FAMILIES: &[(&str, u32, u32, usize)] = &[
    ("SOP2", 0x8000_0000, 0xC000_0000, 1),
    ("SOPK", 0xB000_0000, 0xF000_0000, 1),
    ("SOP1", 0xBE80_0000, 0xFF80_0000, 1),
    ("SOPC", 0xBF00_0000, 0xFF80_0000, 1),
    ("SOPP", 0xBF80_0000, 0xFF80_0000, 1),
    ("SMEM", 0xC000_0000, 0xFC00_0000, 2),
    ("VOP2", 0x0000_0000, 0x8000_0000, 1),
    ("VOP1", 0x7E00_0000, 0xFE00_0000, 1),
    ("VOPC", 0x7C00_0000, 0xFE00_0000, 1),
    ("VOP3", 0xD000_0000, 0xFC00_0000, 2),
    ("VOP3P", 0xD380_0000, 0xFF80_0000, 2),
    ("DS", 0xD800_0000, 0xFC00_0000, 2),
    ("FLAT", 0xDC00_0000, 0xFC00_0000, 2),
    ("MUBUF", 0xE000_0000, 0xFC00_0000, 2),
    ("MTBUF", 0xE800_0000, 0xFC00_0000, 2),
];

fn probe(rng: &mut Rng, fixed: u32, mask: u32, dwords: usize, family: &str) -> Vec<u32> {
    let mut w = vec![fixed | (rng.next_u32() & !mask)];
    for _ in 1..dwords {
        w.push(rng.next_u32());
    }
    match family {
        // Mostly valid sources and small modifiers, or nearly nothing decodes.
        "VOP2" | "VOP1" | "VOPC" => {
            let r = rng.below(4);
            let src = match r {
                0 => 0xF9,
                1 => 0xFA,
                _ => w[0] & 0x1FF,
            };
            w[0] = (w[0] & !0x1FF) | src;
            if r < 2 {
                w.push(rng.next_u32());
            }
        }
        "VOP3" | "VOP3P" => {
            if rng.below(2) == 0 {
                w[0] &= !0x7F00; // clear abs/op_sel half the time
                w[1] &= 0x07FF_FFFF; // and neg/omod
            }
            if rng.below(3) == 0 && family == "VOP3P" {
                // A scaled-MFMA prefix followed by an MFMA. Operands are kept to VGPRs: when they
                // are not, LLVM's choice between the fused form, the lone prefix and an error
                // depends on its decoder tables' internals (see the crate's known gaps).
                let vgpr9 = |r: &mut Rng| 0x100 | (r.below(120) * 2);
                w[0] = 0xD3AC_0000 | (w[0] & 0x1800);
                w[1] = vgpr9(rng) | vgpr9(rng) << 9 | (w[1] & 0x1800_0000);
                w.push(
                    0xD380_0800
                        | ((0x2D + rng.below(2)) << 16)
                        | (rng.next_u32() & 0x87FF) & !0x7F
                        | (rng.below(64) * 4),
                );
                w.push(
                    vgpr9(rng)
                        | vgpr9(rng) << 9
                        | vgpr9(rng) << 18
                        | (rng.next_u32() & 0xF800_0000),
                );
            }
        }
        // Half the time keep the data register small, where most encodings are valid.
        "DS" | "MUBUF" | "MTBUF" | "FLAT" if rng.below(2) == 0 => {
            w[1] &= 0x00FF_FFFF | (rng.next_u32() & 0xFF00_0000);
        }
        _ => {}
    }
    // A literal candidate; instructions that need none leave it to decode on its own.
    w.push(rng.next_u32());
    w
}

#[test]
fn random_encodings_agree_with_llvm_objdump() {
    require_tool(&common::llvm_mc());
    require_tool(&common::llvm_objdump());
    let per_family: usize = std::env::var("FUZZ_PER_FAMILY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut probes = Vec::new();
    let mut names = Vec::new();
    for &(name, fixed, mask, dwords) in FAMILIES {
        for _ in 0..per_family {
            probes.push(probe(&mut rng, fixed, mask, dwords, name));
            names.push(name);
        }
    }
    let dir = scratch("fuzz");
    let want = objdump_probes(&probes, &dir);
    let mut bad = Vec::new();
    let mut decoded = 0usize;
    for (i, p) in probes.iter().enumerate() {
        let bytes: Vec<u8> = p
            .iter()
            .chain(std::iter::repeat(&0xBF80_0000u32))
            .take(common::SLOT)
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let ours = decode(&bytes, 0)
            .ok()
            .map(|inst| (inst.to_string(), inst.size as usize / 4));
        if ours.is_some() {
            decoded += 1;
        }
        if ours != want[i] {
            bad.push(format!(
                "{:5} {}\n      llvm: {:?}\n      ours: {:?}",
                names[i],
                p.iter()
                    .map(|w| format!("{w:08x}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                want[i],
                ours
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!(
        "{} probes, {} decoded, {} disagreements",
        probes.len(),
        decoded,
        bad.len()
    );
    if !bad.is_empty() {
        // A few of each family, so one noisy family does not hide the others.
        let mut shown = std::collections::BTreeMap::<&str, Vec<&String>>::new();
        for b in &bad {
            let fam = b.split_whitespace().next().unwrap_or("");
            let v = shown.entry(fam).or_default();
            if v.len() < 6 {
                v.push(b);
            }
        }
        let mut report = String::new();
        for (fam, v) in &shown {
            let n = bad
                .iter()
                .filter(|b| b.split_whitespace().next() == Some(fam))
                .count();
            report.push_str(&format!("== {fam}: {n} disagreements\n"));
            for b in v {
                report.push_str(b);
                report.push('\n');
            }
        }
        panic!(
            "{} of {} random encodings disagree with llvm-objdump:\n{}",
            bad.len(),
            probes.len(),
            report
        );
    }
}

/// Debugging aid: `DECODE_WORDS="d3ac0000 ..." cargo test -p tilegen-emu --test fuzz_vs_objdump
/// decode_words_from_env -- --ignored --nocapture` prints our decode of the given dwords next to
/// llvm-objdump's.
#[test]
#[ignore]
fn decode_words_from_env() {
    let words: Vec<u32> = std::env::var("DECODE_WORDS")
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|w| u32::from_str_radix(w.trim_start_matches("0x"), 16).ok())
        .collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    println!(
        "ours: {:?}",
        decode(&bytes, 0).map(|i| (i.to_string(), i.size))
    );
    let dir = scratch("one");
    println!("llvm: {:?}", objdump_probes(&[words], &dir)[0]);
    let _ = std::fs::remove_dir_all(&dir);
}
