//! LLVM 22's tools, the ground truth of the tests that assemble gfx950 code: where they are
//! (overridable through the environment), a loud failure when one is missing, and assembling a
//! `.s` file.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `llvm-mc-22`, overridable with `LLVM_MC`.
pub fn llvm_mc() -> String {
    std::env::var("LLVM_MC").unwrap_or_else(|_| "llvm-mc-22".into())
}

/// `llvm-objdump-22`, overridable with `LLVM_OBJDUMP`.
pub fn llvm_objdump() -> String {
    std::env::var("LLVM_OBJDUMP").unwrap_or_else(|_| "llvm-objdump-22".into())
}

/// `ld.lld-22`, overridable with `LLD`.
pub fn lld() -> String {
    std::env::var("LLD").unwrap_or_else(|_| "ld.lld-22".into())
}

/// Fails loudly when a tool is missing: the project's setup step installs LLVM 22.
pub fn require_tool(name: &str) {
    let ok = Command::new(name)
        .arg("--version")
        .output()
        .map(|o| o.status.success());
    assert!(
        matches!(ok, Ok(true)),
        "{name} is not runnable: install LLVM 22 (run `cargo xtask setup`)"
    );
}

/// A scratch directory in the system's temporary directory, unique per test name and process.
pub fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tilegen-emu-{}-{}", name, std::process::id()));
    std::fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Assembles a `.s` file into a gfx950 relocatable object with `llvm-mc`.
pub fn assemble(src: &Path, obj: &Path) {
    let out = Command::new(llvm_mc())
        .args(["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx950", "-filetype=obj"])
        .arg(src)
        .arg("-o")
        .arg(obj)
        .output()
        .expect("run llvm-mc");
    assert!(
        out.status.success(),
        "llvm-mc failed on {}: {}",
        src.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Links a relocatable object into a code object with `ld.lld -shared`, as the toolchain
/// does for HSA.
pub fn link(obj: &Path, out: &Path) {
    let o = Command::new(lld())
        .arg("-shared")
        .arg(obj)
        .arg("-o")
        .arg(out)
        .output()
        .expect("run ld.lld");
    assert!(
        o.status.success(),
        "ld.lld failed on {}: {}",
        obj.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Assembles and links `body` as kernel `name` for gfx950 into `dir` and returns the code
/// object: two 8-byte global-buffer arguments (kernarg pointer in s[0:1]), workgroup ids x and
/// y in s2 and s3, `lds` bytes of static LDS, 128 VGPRs and 24 SGPRs; an `s_endpgm` follows
/// `body`.
pub fn kernel_object(dir: &Path, name: &str, body: &str, lds: u32) -> Vec<u8> {
    require_tool(&llvm_mc());
    require_tool(&lld());
    let src = dir.join(format!("{name}.s"));
    let obj = dir.join(format!("{name}.o"));
    let out = dir.join(format!("{name}.hsaco"));
    let text = format!(
        "\t.amdgcn_target \"amdgcn-amd-amdhsa--gfx950\"\n\t.text\n\t.globl {name}\n\t.p2align 8\n\t.type {name},@function\n{name}:\n{body}\n\ts_endpgm\n.Lend_{name}:\n\t.size {name}, .Lend_{name}-{name}\n\t.rodata\n\t.p2align 6\n\t.amdhsa_kernel {name}\n\t\t.amdhsa_user_sgpr_kernarg_segment_ptr 1\n\t\t.amdhsa_system_sgpr_workgroup_id_x 1\n\t\t.amdhsa_system_sgpr_workgroup_id_y 1\n\t\t.amdhsa_group_segment_fixed_size {lds}\n\t\t.amdhsa_next_free_vgpr 128\n\t\t.amdhsa_next_free_sgpr 24\n\t\t.amdhsa_accum_offset 128\n\t.end_amdhsa_kernel\n\t.amdgpu_metadata\n---\namdhsa.kernels:\n  - .args:\n      - .offset: 0\n        .size: 8\n        .value_kind: global_buffer\n        .address_space: global\n      - .offset: 8\n        .size: 8\n        .value_kind: global_buffer\n        .address_space: global\n    .group_segment_fixed_size: {lds}\n    .kernarg_segment_align: 8\n    .kernarg_segment_size: 16\n    .max_flat_workgroup_size: 1024\n    .name: {name}\n    .private_segment_fixed_size: 0\n    .sgpr_count: 24\n    .symbol: {name}.kd\n    .vgpr_count: 128\n    .wavefront_size: 64\namdhsa.target: amdgcn-amd-amdhsa--gfx950\namdhsa.version:\n  - 1\n  - 2\n...\n\t.end_amdgpu_metadata\n"
    );
    std::fs::write(&src, text).expect("write kernel source");
    assemble(&src, &obj);
    link(&obj, &out);
    std::fs::read(&out).expect("read code object")
}
