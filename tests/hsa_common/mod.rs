//! Finding the HSA libraries the HSA tests load: Debian's ROCm runtime, and tilegen's own
//! over the emulator (the `tilegen-hsa-emu` cdylib of this workspace).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// Where Debian's `libhsa-runtime64-1` puts the library (`cargo xtask setup` installs it).
pub const DEBIAN_HSA: &str = "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1";

/// `target/<profile>`: the test binary runs from `target/<profile>/deps`.
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test binary's path");
    exe.parent()
        .and_then(Path::parent)
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf()
}

/// The emulator-backed HSA library. The root package names `tilegen-hsa-emu` as a
/// dev-dependency, so cargo builds it (fresh, with the tests' features) into
/// `target/<profile>/deps/libtilegen_hsa_emu.so` before any test runs; a test binary run by
/// hand without it has cargo build the library first.
pub fn emulated_hsa() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = profile_dir();
        let built = dir.join("deps/libtilegen_hsa_emu.so");
        if built.exists() {
            return built;
        }
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "--quiet", "-p", "tilegen-hsa-emu", "--lib"]);
        match dir.file_name().and_then(|n| n.to_str()) {
            Some("debug") | None => {}
            Some("release") => {
                cmd.arg("--release");
            }
            Some(other) => {
                cmd.args(["--profile", other]);
            }
        }
        if let Some(target) = dir.parent() {
            cmd.env("CARGO_TARGET_DIR", target);
        }
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
        let status = cmd
            .status()
            .expect("running cargo to build tilegen-hsa-emu");
        assert!(
            status.success(),
            "cargo build -p tilegen-hsa-emu failed: {status}"
        );
        let lib = dir.join("libtilegen_hsa_emu.so");
        assert!(lib.exists(), "{} was not built", lib.display());
        lib
    })
}
