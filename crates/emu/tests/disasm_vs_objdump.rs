//! The disassembler against llvm-objdump-22 on whole code objects: the Triton corpus (another
//! compiler's output) and code objects assembled from the hand-written kernels in tests/data
//! (every format and instruction class) plus the generated list of every form.
//!
//! Every instruction must print exactly as objdump prints it (the instruction only: objdump's
//! `// address: words` comment is not part of it) and have the same size. Branch targets are
//! checked separately: objdump appends `<symbol+0xoffset>` to the comment; we compute
//! [`Inst::branch_target`] and name it from the code object's symbols the same way.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    assemble, link, lld, llvm_mc, llvm_objdump, objdump, parse_objdump, require_tool, scratch,
};
use tilegen_codeobj::{CodeObject, SymbolKind};
use tilegen_emu::isa::{Encoding, Inst, decode_lenient};

fn data(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Assemble and link `src` into a code object in `dir`.
fn build(src: &Path, dir: &Path, v5: bool) -> PathBuf {
    let stem = src.file_stem().and_then(|s| s.to_str()).unwrap_or("k");
    let obj = dir.join(format!("{stem}.o"));
    let out = dir.join(format!("{stem}.hsaco"));
    if v5 {
        let o = Command::new(llvm_mc())
            .args(["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx950", "-filetype=obj"])
            .arg("--amdhsa-code-object-version=5")
            .arg(src)
            .arg("-o")
            .arg(&obj)
            .output()
            .expect("llvm-mc");
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    } else {
        assemble(src, &obj);
    }
    link(&obj, &out);
    out
}

/// Wrap the generated list of every form into a kernel so it becomes a code object too.
fn wrap_all_forms(dir: &Path) -> PathBuf {
    let body = std::fs::read_to_string(data("all_forms.s")).expect("all_forms.s");
    let mut s = String::from(
        "\t.amdgcn_target \"amdgcn-amd-amdhsa--gfx950\"\n\t.text\n\t.globl all_forms\n\t.p2align 8\n\t.type all_forms,@function\nall_forms:\n",
    );
    s.push_str(&body);
    s.push_str(
        "\ts_endpgm\n.Lend:\n\t.size all_forms, .Lend-all_forms\n\t.rodata\n\t.p2align 6\n\t.amdhsa_kernel all_forms\n\t\t.amdhsa_next_free_vgpr 256\n\t\t.amdhsa_next_free_sgpr 96\n\t\t.amdhsa_accum_offset 128\n\t.end_amdhsa_kernel\n\t.amdgpu_metadata\n---\namdhsa.kernels:\n  - .args: []\n    .group_segment_fixed_size: 0\n    .kernarg_segment_align: 4\n    .kernarg_segment_size: 0\n    .max_flat_workgroup_size: 64\n    .name: all_forms\n    .private_segment_fixed_size: 0\n    .sgpr_count: 96\n    .symbol: all_forms.kd\n    .vgpr_count: 256\n    .wavefront_size: 64\namdhsa.target: amdgcn-amd-amdhsa--gfx950\namdhsa.version:\n  - 1\n  - 2\n...\n\t.end_amdgpu_metadata\n",
    );
    let src = dir.join("all_forms_kernel.s");
    std::fs::write(&src, s).expect("write wrapper");
    src
}

/// objdump's annotation for a branch target: the closest preceding symbol of the code.
fn annotation(co: &CodeObject, target: u64) -> Option<String> {
    // objdump names targets inside a function symbol's extent; others get no annotation.
    let sym = co
        .symbols
        .iter()
        .filter(|s| {
            s.kind == SymbolKind::Function && s.address <= target && target < s.address + s.size
        })
        .max_by_key(|s| s.address)?;
    let off = target - sym.address;
    Some(if off == 0 {
        format!("<{}>", sym.name)
    } else {
        format!("<{}+{:#x}>", sym.name, off)
    })
}

/// Compare our disassembly of one code object with objdump's. Returns (instructions, mismatches).
fn compare(path: &Path) -> (usize, Vec<String>) {
    let bytes = std::fs::read(path).expect("read code object");
    let co = CodeObject::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let (text_addr, text) = (&co.text.0, &co.text.1);
    let dump = objdump(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let lines: HashMap<u64, common::DumpLine> = parse_objdump(&dump)
        .into_iter()
        .map(|l| (l.addr, l))
        .collect();
    let mut bad = Vec::new();
    let mut n = 0;
    for (pc, r) in decode_lenient(text, *text_addr) {
        n += 1;
        let Some(l) = lines.get(&pc) else {
            bad.push(format!(
                "{pc:#x}: objdump shows no instruction here; ours: {r:?}"
            ));
            continue;
        };
        let llvm_valid = !l.text.starts_with(".long") && !l.text.contains("<unknown>");
        match (&r, llvm_valid) {
            (Ok(inst), true) => {
                let ours = inst.to_string();
                if ours != l.text || inst.size as usize != l.words.len() * 4 {
                    bad.push(format!(
                        "{pc:#x} [{}]\n    objdump: {}\n    ours:    {} ({} bytes)",
                        l.words
                            .iter()
                            .map(|w| format!("{w:08x}"))
                            .collect::<Vec<_>>()
                            .join(" "),
                        l.text,
                        ours,
                        inst.size
                    ));
                }
                check_branch(&co, inst, l, &mut bad);
            }
            (Err(_), false) => {}
            (Ok(inst), false) => bad.push(format!("{pc:#x}: objdump cannot decode, ours: {inst}")),
            (Err(e), true) => bad.push(format!("{pc:#x}: objdump: {}\n    ours: {e}", l.text)),
        }
    }
    (n, bad)
}

fn check_branch(co: &CodeObject, inst: &Inst, l: &common::DumpLine, bad: &mut Vec<String>) {
    // objdump annotates the SOPP branches only, not s_call_b64/s_cbranch_i_fork (SOPK), whose
    // targets we compute all the same.
    if inst.encoding != Encoding::Sopp {
        return;
    }
    let ours = inst.branch_target.and_then(|t| annotation(co, t));
    if ours != l.annotation.clone().map(|a| a.trim().to_string()) {
        bad.push(format!(
            "{:#x}: branch annotation: objdump {:?}, ours {:?} (target {:?})",
            l.addr, l.annotation, ours, inst.branch_target
        ));
    }
}

fn report(name: &str, n: usize, bad: &[String]) {
    assert!(n > 0, "{name}: no instructions");
    assert!(
        bad.is_empty(),
        "{name}: {} of {n} instructions disagree with llvm-objdump; first ones:\n{}",
        bad.len(),
        bad.iter().take(25).cloned().collect::<Vec<_>>().join("\n")
    );
    eprintln!("{name}: {n} instructions agree with llvm-objdump");
}

#[test]
fn hand_written_kernels_match_objdump() {
    for tool in [llvm_mc(), llvm_objdump(), lld()] {
        require_tool(&tool);
    }
    let dir = scratch("disasm");
    for (file, v5) in [
        ("salu.s", false),
        ("valu.s", false),
        ("mfma.s", false),
        ("memory.s", true),
    ] {
        let co = build(&data(file), &dir, v5);
        let (n, bad) = compare(&co);
        report(file, n, &bad);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_form_matches_objdump_in_a_code_object() {
    for tool in [llvm_mc(), llvm_objdump(), lld()] {
        require_tool(&tool);
    }
    let dir = scratch("allforms");
    let co = build(&wrap_all_forms(&dir), &dir, false);
    let (n, bad) = compare(&co);
    report("all_forms", n, &bad);
    assert!(n > 3000);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn triton_code_objects_match_objdump() {
    require_tool(&llvm_objdump());
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    for fk in corpus {
        let (n, bad) = compare(&fk.hsaco);
        report(&fk.name(), n, &bad);
    }
}
