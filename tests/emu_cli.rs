//! `tilegen emu run|disasm` and `tilegen gemm` end to end, through the binary.

use std::path::Path;
use std::process::Command;

use tilegen::mx::{MxMatrix, reference_gemm};

fn tilegen() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tilegen"))
}

fn bf16s(bytes: &[u8]) -> Vec<half::bf16> {
    bytes
        .chunks_exact(2)
        .map(|b| half::bf16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// Instruction text of an llvm-objdump-style listing (labels and blank lines dropped).
fn listing(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.starts_with('\t'))
        .map(|l| l.trim().to_string())
        .collect()
}

#[test]
fn emu_run_executes_a_foreign_kernel_from_files() {
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    let fk = corpus
        .iter()
        .find(|k| k.name().starts_with("bm64_bn64"))
        .expect("the 64x64 Triton kernel");
    let (m, n, k) = (70usize, 128usize, 512usize);
    let a = MxMatrix::random(m, k, 7).unwrap();
    let b = MxMatrix::random(n, k, 8).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let w = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p.display().to_string()
    };
    let (fa, fb, fsa, fsb) = (
        w("a", a.data()),
        w("b", b.data()),
        w("sa", a.scales()),
        w("sb", b.scales()),
    );
    let fc = dir.path().join("c").display().to_string();
    let mut args: Vec<String> = vec!["emu".into(), "run".into(), fk.hsaco.display().to_string()];
    args.extend([
        "--grid".into(),
        format!("{},{}", m.div_ceil(64), n.div_ceil(64)),
        "--block".into(),
        "256".into(),
    ]);
    args.extend([
        "--dynamic-lds".into(),
        fk.meta_u64("lds_bytes").to_string(),
        "--stats".into(),
        "--json".into(),
    ]);
    for arg in [
        format!("in:{fa}"),
        format!("in:{fb}"),
        format!("in:{fsa}"),
        format!("in:{fsb}"),
        format!("out:{fc}:{}", m * n * 2),
        format!("i32:{m}"),
        format!("i32:{n}"),
        format!("i32:{k}"),
        format!("i32:{}", k / 2),
        format!("i32:{}", k / 2),
        format!("i32:{}", k / 32),
        format!("i32:{}", k / 32),
        format!("i32:{n}"),
        "null".into(),
        "null".into(),
    ] {
        args.extend(["--arg".into(), arg]);
    }
    let out = tilegen().args(&args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(v["stats"]["mfma"].as_u64().unwrap() > 0);
    let c = bf16s(&std::fs::read(&fc).unwrap());
    let cmp = reference_gemm(&a, &b).unwrap().compare_bf16(&c).unwrap();
    assert!(cmp.passed(), "{cmp}");
    // A wrong argument count is refused with the kernel's signature.
    let out = tilegen().args(&args[..args.len() - 2]).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("explicit argument"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tilegen()
        .args([
            "emu",
            "run",
            &fk.hsaco.display().to_string(),
            "--grid",
            "1",
            "--block",
            "64",
            "--arg",
            "bogus:1",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn emu_disasm_matches_llvm_objdump() {
    let Some(corpus) = tilegen_testkit::foreign_kernels() else {
        return;
    };
    let fk = &corpus[0];
    let ours = tilegen()
        .args(["emu", "disasm"])
        .arg(&fk.hsaco)
        .output()
        .unwrap();
    assert!(ours.status.success());
    let theirs = Command::new("llvm-objdump-22")
        .args(["-d", "--mcpu=gfx950"])
        .arg(&fk.hsaco)
        .output()
        .expect("llvm-objdump-22");
    let ours = listing(&String::from_utf8_lossy(&ours.stdout));
    let theirs = listing(&String::from_utf8_lossy(&theirs.stdout));
    // objdump continues into the padding after the kernel's last instruction.
    assert!(!ours.is_empty());
    assert_eq!(ours, theirs[..ours.len()]);
}

#[test]
fn gemm_main_job_emits_checkable_files() {
    let dir = tempfile::tempdir().unwrap();
    let out = tilegen()
        .args([
            "gemm",
            "--m",
            "17",
            "--n",
            "144",
            "--k",
            "768",
            "--b-prefetch",
            "--out-dtype",
            "f32",
            "--json",
            "--emit-dir",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["check"]["passed"], true);
    assert_eq!(v["grid"], serde_json::json!([2, 1, 1]));
    for f in ["kernel.hsaco", "kernel.s", "kernel.ll", "report.json"] {
        assert!(dir.path().join(f).exists(), "{f}");
    }
    // Anyone can check the result from the plain files alone.
    let read = |f: &str| std::fs::read(dir.path().join(f)).unwrap();
    let a = MxMatrix::from_parts(17, 768, read("a.bin"), read("sfa.bin")).unwrap();
    let b = MxMatrix::from_parts(144, 768, read("b.bin"), read("sfb.bin")).unwrap();
    let c: Vec<f32> = read("c.bin")
        .chunks_exact(4)
        .map(|x| f32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .collect();
    assert!(
        reference_gemm(&a, &b)
            .unwrap()
            .compare_f32(&c)
            .unwrap()
            .passed()
    );
    assert!(
        Path::new(&dir.path().join("kernel.hsaco"))
            .metadata()
            .unwrap()
            .len()
            > 1000
    );
}

#[test]
fn build_reports_llvm_warnings_instead_of_printing_them() {
    let dir = tempfile::tempdir().unwrap();
    let out = tilegen()
        .args(["build", "--waves-per-eu", "8", "-o"])
        .arg(dir.path().join("k.hsaco"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("LLVM warning: failed to meet occupancy target")
    );
    assert!(
        out.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn gemm_rejects_bad_specs_and_shapes_by_rule() {
    let out = tilegen()
        .args(["gemm", "--m", "8", "--n", "64", "--k", "512", "--bm", "48"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("bm = 48 must be 16 or a multiple of 32")
    );
    let out = tilegen()
        .args(["gemm", "--m", "8", "--n", "60", "--k", "512"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("N = 60 must be a positive multiple of 16")
    );
    let out = tilegen()
        .args([
            "gemm",
            "--m",
            "8",
            "--n",
            "64",
            "--k",
            "512",
            "--deep-prime",
        ])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("deep_prime requires b_prefetch"));
}
