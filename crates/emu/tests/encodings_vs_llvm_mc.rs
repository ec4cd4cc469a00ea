//! llvm-mc-22 assembles a corpus listing every instruction form we decode; its `-show-encoding`
//! output gives, per instruction, the bytes and LLVM's canonical text. Our decoder must turn the
//! bytes back into exactly that text.

mod common;

use std::path::Path;
use std::process::Command;

use common::{llvm_mc, require_tool};
use tilegen_emu::isa::decode;

/// (text, bytes) of every instruction line of `llvm-mc -show-encoding`.
fn assemble_with_encodings(src: &Path) -> Vec<(String, Vec<u8>)> {
    let out = Command::new(llvm_mc())
        .args([
            "-triple=amdgcn-amd-amdhsa",
            "-mcpu=gfx950",
            "-show-encoding",
        ])
        .arg(src)
        .output()
        .expect("run llvm-mc");
    assert!(
        out.status.success(),
        "llvm-mc failed on {}:\n{}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut v = Vec::new();
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Some((text, enc)) = line.split_once("; encoding: [") else {
            continue;
        };
        // A branch to a label is encoded with a fixup (placeholder bytes); the code-object
        // comparison with llvm-objdump checks resolved branches instead.
        if text.contains(" .L") {
            continue;
        }
        let bytes: Vec<u8> = enc
            .trim_end_matches(']')
            .split(',')
            .filter_map(|b| u8::from_str_radix(b.trim().trim_start_matches("0x"), 16).ok())
            .collect();
        v.push((text.trim().to_string(), bytes));
    }
    v
}

fn check_file(name: &str) -> usize {
    require_tool(&llvm_mc());
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    let insts = assemble_with_encodings(&src);
    assert!(!insts.is_empty(), "{name}: llvm-mc printed no encodings");
    let mut bad = Vec::new();
    for (text, bytes) in &insts {
        match decode(bytes, 0) {
            Ok(inst) if inst.to_string() == *text && inst.size as usize == bytes.len() => {}
            Ok(inst) => bad.push(format!(
                "  llvm-mc: {text}\n  ours:    {inst} ({} of {} bytes)",
                inst.size,
                bytes.len()
            )),
            Err(e) => bad.push(format!("  llvm-mc: {text}\n  ours:    error: {e}")),
        }
    }
    assert!(
        bad.is_empty(),
        "{name}: {} of {} instructions differ from llvm-mc; first ones:\n{}",
        bad.len(),
        insts.len(),
        bad.iter().take(30).cloned().collect::<Vec<_>>().join("\n")
    );
    insts.len()
}

#[test]
fn every_learned_form_round_trips_through_llvm_mc() {
    let n = check_file("all_forms.s");
    assert!(n > 3000, "the corpus lists every form ({n} found)");
}

#[test]
fn hand_written_kernels_round_trip_through_llvm_mc() {
    for f in ["salu.s", "valu.s", "mfma.s", "memory.s"] {
        let n = check_file(f);
        assert!(n > 30, "{f}: only {n} instructions");
    }
}
