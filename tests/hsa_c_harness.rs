//! HSA programs in C, written as real clients write them (tests/hsa_c/*.c: agent, pool,
//! region and ISA discovery; a code object read from a file and deserialized, code object v4;
//! kernels on system, device, locked and fine-grained memory; async copies and fills; a
//! dispatch with a completion signal; profiling times; signals; misuse), compiled with the
//! system C compiler against ROCm's headers (Debian's libhsa-runtime-dev) and linked with
//! `-lhsa-runtime64` as clients link. Each runs twice: with tilegen's library chosen through
//! LD_LIBRARY_PATH under ROCr's name (every check passes, and the loader finds the `ROCR_1`
//! version node: no "no version information available"), and against Debian's ROCr, whose
//! hsa_init fails without a GPU driver (0x1008) and which answers the calls made before it
//! with the same statuses.
//!
//! A HIP program (tests/hsa_c/hip_module.c) runs on Debian's HIP 5.2 over tilegen's library:
//! HIP starts the HSA runtime and queries the agent, its pools and its ISA, and then refuses
//! gfx950 by its own ISA table (rocclr's `amd::Isa::findIsa`, during hipGetDeviceCount), which
//! its log names; a HIP that knows gfx950 must instead run the module to correct results.

mod hsa_common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use hsa_common::{DEBIAN_HSA, emulated_hsa};
use tilegen_testkit::llvm::{lld, llvm_mc, require_tool};

const PROGRAMS: &[&str] = &["discovery", "dispatch", "misuse"];
/// Debian's HIP runtime (libamdhip64-5).
const HIP_LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5";
/// HSA_STATUS_ERROR_OUT_OF_RESOURCES: Debian's ROCr's hsa_init on a machine without a GPU.
const ROCR_WITHOUT_GPU: &str = "0x1008";

fn sources() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/hsa_c")
}

fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tilegen-hsa-c-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating the scratch directory");
    dir
}

fn run_tool(cmd: &mut Command, what: &str) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Assembles kernel `scale` as code object `version` (4 or 5).
fn code_object(dir: &Path, version: u32) -> PathBuf {
    let source = std::fs::read_to_string(sources().join("scale.s")).expect("reading scale.s");
    // Code object v4's metadata is version 1.1 (v5's is 1.2).
    let source = if version == 4 {
        source.replace("amdhsa.version: [ 1, 2 ]", "amdhsa.version: [ 1, 1 ]")
    } else {
        source
    };
    let s = dir.join(format!("scale_v{version}.s"));
    let o = dir.join(format!("scale_v{version}.o"));
    let co = dir.join(format!("scale_v{version}.hsaco"));
    std::fs::write(&s, source).expect("writing the kernel source");
    run_tool(
        Command::new(llvm_mc())
            .args(["-triple=amdgcn-amd-amdhsa", "-mcpu=gfx950", "-filetype=obj"])
            .arg(format!("--amdhsa-code-object-version={version}"))
            .arg(&s)
            .arg("-o")
            .arg(&o),
        "llvm-mc",
    );
    run_tool(
        Command::new(lld())
            .arg("-shared")
            .arg(&o)
            .arg("-o")
            .arg(&co),
        "ld.lld",
    );
    let bytes = std::fs::read(&co).expect("reading the code object");
    // EI_ABIVERSION: 2 is v4, 3 is v5.
    assert_eq!(
        bytes[8],
        version as u8 - 2,
        "{} is not code object v{version}",
        co.display()
    );
    co
}

/// Compiles a program against ROCm's headers, linked with ROCr's library as clients link.
fn compile(dir: &Path, name: &str) -> PathBuf {
    compile_with(dir, name, "-lhsa-runtime64")
}

fn compile_with(dir: &Path, name: &str, library: &str) -> PathBuf {
    assert!(
        Path::new("/usr/include/hsa/hsa.h").exists(),
        "ROCm's HSA headers are missing: install libhsa-runtime-dev (run `cargo xtask setup`)"
    );
    let exe = dir.join(name);
    run_tool(
        Command::new("cc")
            .args(["-std=gnu11", "-Wall", "-Werror", "-O1"])
            .arg("-I")
            .arg(sources())
            .arg(sources().join(format!("{name}.c")))
            .arg("-o")
            .arg(&exe)
            .arg(library),
        &format!("cc {name}.c"),
    );
    exe
}

/// Runs with a deadline (a hang is a failure, not a stuck test run).
fn run(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting the program");
    let start = Instant::now();
    while child.try_wait().expect("waiting for the program").is_none() {
        if start.elapsed() > limit {
            let _ = child.kill();
            let out = child.wait_with_output().expect("collecting its output");
            panic!(
                "still running after {limit:?}:\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().expect("collecting its output")
}

/// The program's verdict: every check line, and the library it says answered.
struct Verdict {
    passed: usize,
    failed: Vec<String>,
    library: String,
    text: String,
}

fn verdict(out: &Output) -> Verdict {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let text = format!("{stdout}{}", String::from_utf8_lossy(&out.stderr));
    Verdict {
        passed: stdout.lines().filter(|l| l.starts_with("PASS ")).count(),
        failed: stdout
            .lines()
            .filter(|l| !l.starts_with("PASS ") && !l.starts_with("INFO "))
            .map(str::to_string)
            .collect(),
        library: stdout
            .lines()
            .find_map(|l| l.strip_prefix("INFO library "))
            .unwrap_or("")
            .to_string(),
        text,
    }
}

/// tilegen's library under ROCr's name, in a directory of its own (for LD_LIBRARY_PATH).
fn library_dir(dir: &Path) -> PathBuf {
    let lib = dir.join("lib");
    std::fs::create_dir_all(&lib).expect("creating the library directory");
    let rocr_name = lib.join("libhsa-runtime64.so.1");
    let _ = std::fs::remove_file(&rocr_name);
    std::os::unix::fs::symlink(emulated_hsa(), &rocr_name).expect("linking the library");
    lib
}

#[test]
fn c_clients_run_on_tilegens_library_and_meet_rocrs_statuses_on_debians() {
    require_tool(&llvm_mc());
    require_tool(&lld());
    assert!(
        Path::new(DEBIAN_HSA).exists(),
        "{DEBIAN_HSA} is missing: run `cargo xtask setup`"
    );
    let dir = scratch().join("c");
    std::fs::create_dir_all(&dir).expect("creating the scratch directory");
    let (v5, v4) = (code_object(&dir, 5), code_object(&dir, 4));
    let lib = library_dir(&dir);
    let mut summary = Vec::new();
    for name in PROGRAMS {
        let exe = compile(&dir, name);
        let args: Vec<&Path> = if *name == "dispatch" {
            vec![&v5, &v4]
        } else {
            vec![]
        };

        let out = run(
            Command::new(&exe).args(&args).env("LD_LIBRARY_PATH", &lib),
            Duration::from_secs(300),
        );
        let v = verdict(&out);
        assert!(
            !v.text.contains("no version information available"),
            "{name}: the loader found no ROCR_1 version node:\n{}",
            v.text
        );
        assert_eq!(
            Path::new(&v.library).canonicalize().ok(),
            emulated_hsa().canonicalize().ok(),
            "{name} was answered by {} instead of tilegen's library",
            v.library
        );
        assert!(
            out.status.success() && v.failed.is_empty() && v.passed > 10,
            "{name} on tilegen's library ({}): {} passed, failures:\n{}\n{}",
            out.status,
            v.passed,
            v.failed.join("\n"),
            v.text
        );
        let emulated = v.passed;

        let out = run(
            Command::new(&exe)
                .args(&args)
                .env_remove("LD_LIBRARY_PATH")
                .env("HSA_EXPECT_INIT", ROCR_WITHOUT_GPU),
            Duration::from_secs(60),
        );
        let v = verdict(&out);
        assert_eq!(
            Path::new(&v.library).canonicalize().ok(),
            Path::new(DEBIAN_HSA).canonicalize().ok(),
            "{name} was answered by {} instead of Debian's ROCr",
            v.library
        );
        assert!(
            out.status.success() && v.failed.is_empty() && v.passed == 11,
            "{name} on Debian's ROCr ({}): {} passed, failures:\n{}\n{}",
            out.status,
            v.passed,
            v.failed.join("\n"),
            v.text
        );
        summary.push(format!(
            "{name}: {emulated} checks pass on tilegen's library, {} on Debian's ROCr",
            v.passed
        ));
    }
    eprintln!("{}", summary.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hip_starts_on_tilegens_library_and_refuses_gfx950_by_its_own_isa_table() {
    require_tool(&llvm_mc());
    require_tool(&lld());
    assert!(
        Path::new(HIP_LIBRARY).exists(),
        "{HIP_LIBRARY} is missing: run `cargo xtask setup`"
    );
    let dir = scratch().join("hip");
    std::fs::create_dir_all(&dir).expect("creating the scratch directory");
    let co = code_object(&dir, 5);
    let lib = library_dir(&dir);
    let exe = compile_with(&dir, "hip_module", "-l:libamdhip64.so.5");
    let out = run(
        Command::new(&exe)
            .arg(&co)
            .env("LD_LIBRARY_PATH", &lib)
            .env("AMD_LOG_LEVEL", "1"),
        Duration::from_secs(300),
    );
    let v = verdict(&out);
    assert!(
        !v.text.contains("no version information available"),
        "HIP's libhsa-runtime64.so.1 import found no ROCR_1 version node:\n{}",
        v.text
    );
    match out.status.code() {
        // HIP 5.2: every HSA query before its ISA table succeeded, so the first error it logs is
        // the table's refusal, of the ISA name ROCr gives an MI355X.
        Some(3) => {
            let first_error = v.text.lines().find(|l| l.starts_with(":1:")).unwrap_or("");
            assert!(
                first_error.ends_with(
                    "Unsupported HSA device gfx950 (PCI ID 75a3) for ISA amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-"
                ),
                "HIP failed before its ISA table:\n{}",
                v.text
            );
            eprintln!("HIP refuses gfx950 at its ISA table: {first_error}");
        }
        _ => assert!(
            out.status.success() && v.failed.is_empty() && v.passed >= 8,
            "HIP knows gfx950 but the module did not run ({}):\n{}",
            out.status,
            v.text
        ),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
