//! The emulator's disassembler against `llvm-objdump-22` on code objects this project builds:
//! every instruction of every flag family must print identically.

use std::process::Command;

use tilegen_codeobj::CodeObject;
use tilegen_kernels::{KernelSpec, MfmaShape};

#[test]
fn our_kernels_disassemble_like_objdump() {
    let specs: [KernelSpec; 5] = [
        KernelSpec::new().into(),
        KernelSpec::new()
            .with_prefetch(|p| p.cluster_drain_sched(true).deep_prime(true))
            .dram_to_lds(true)
            .into(),
        KernelSpec::new()
            .bm(16)
            .bn(64)
            .bk_elems(256)
            .wn(16)
            .b_prefetch(true)
            .into(),
        KernelSpec::lds().into(),
        KernelSpec::lds()
            .bm(64)
            .bn(64)
            .bk_elems(256)
            .wm(32)
            .wn(32)
            .mma(MfmaShape::M32N32K64)
            .dram_to_lds(true)
            .into(),
    ];
    let dir = tempfile::tempdir().unwrap();
    for spec in specs {
        let k = spec.build().unwrap();
        let co = CodeObject::parse(k.code_object()).unwrap();
        let kern = co.kernel(k.name()).unwrap();
        let (base, text) = &co.text;
        let start = (kern.entry - base) as usize;
        let code = &text[start..start + kern.code_size as usize];
        let ours: Vec<String> = tilegen_emu::isa::decode_all(code, kern.entry)
            .unwrap()
            .into_iter()
            .map(|(_, i)| i.to_string())
            .collect();
        let path = dir.path().join(format!("{}.hsaco", k.name()));
        std::fs::write(&path, k.code_object()).unwrap();
        let out = Command::new("llvm-objdump-22")
            .args(["-d", "--mcpu=gfx950"])
            .arg(&path)
            .output()
            .expect("llvm-objdump-22");
        let theirs: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| l.starts_with('\t'))
            .map(|l| l.split("//").next().unwrap_or("").trim().to_string())
            .take(ours.len())
            .collect();
        assert_eq!(ours.len(), theirs.len(), "{}", k.name());
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert_eq!(a, b, "{} instruction {i}", k.name());
        }
    }
}
