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
