//! `tilegen attention` end to end through the binary: a gpt-oss-like decode with ragged
//! contexts checked against the reference and reported as JSON, a split-KV run through the
//! reduce pass with `--emit-dir`, and refused shapes. Small problems, so a debug build runs
//! each in a few seconds on the emulator.

use std::process::{Command, Output};

fn tilegen() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tilegen"));
    // The emulator: the tests must not depend on (or probe for) a GPU.
    c.args(["attention", "--device", "emu"]);
    c
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("--json prints one JSON document")
}

/// gpt-oss-like heads (64 query heads over 8 KV heads, d = 64), pages of 16 rows.
const GPT_OSS: [&str; 8] = [
    "--q-heads",
    "64",
    "--kv-heads",
    "8",
    "--head-dim",
    "64",
    "--page-size",
    "16",
];

#[test]
fn ragged_batch_passes_and_reports_json() {
    let out = tilegen()
        .args(GPT_OSS)
        .args(["--batch", "4", "--context", "1,17,255,1100", "--json"])
        .output()
        .unwrap();
    let v = json(&out);
    // What a script reads: the verdict, the shape it ran, the kernels and the launch.
    let check = &v["check"];
    assert_eq!(check["passed"], true, "{v}");
    assert_eq!(check["mismatches"], 0, "{v}");
    assert_eq!(check["elements"], 4 * 64 * 64, "{v}");
    assert!(check["max_abs_err"].as_f64().unwrap() >= 0.0, "{v}");
    assert!(check["relative_bound"].as_f64().unwrap() > 0.0, "{v}");
    let problem = &v["problem"];
    assert_eq!(problem["batch"], 4);
    assert_eq!(problem["context"], serde_json::json!([1, 17, 255, 1100]));
    assert_eq!(problem["head_dim"], 64);
    assert_eq!(problem["page_size"], 16);
    assert_eq!(v["spec"]["q_heads"], 64);
    // No --split-kv or --waves: fitted to the problem (9 tiles at most: two partials of at
    // least 4 tiles, as two waves of one workgroup).
    assert_eq!(v["spec"]["split_kv"], 1, "{v}");
    assert_eq!(v["spec"]["waves"], 2, "{v}");
    let main = &v["kernels"]["main"];
    assert_eq!(main["name"], "paged_attn_fp8_q64_kv8_d64_p16_s1_w2", "{v}");
    assert!(main["report"]["vgpr_count"].as_u64().unwrap() > 0, "{v}");
    // The waves merge in LDS: no reduce kernel.
    assert!(v["kernels"]["reduce"].is_null(), "{v}");
    // A workgroup per (sequence, KV head).
    assert_eq!(v["grid"][0], 4 * 8, "{v}");
    assert_eq!(v["device"], "gfx950 emulator", "{v}");
    assert!(v["timing"].is_null(), "no --timing, no prediction: {v}");
}

#[test]
fn split_kv_runs_the_reduce_and_emits_code_objects() {
    let dir = tempfile::tempdir().unwrap();
    let out = tilegen()
        .args(&GPT_OSS[..6])
        .args(["--page-size", "64", "--split-kv", "3", "--waves", "2"])
        .args(["--batch", "2", "--context", "700,5", "--json"])
        .arg("--emit-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["check"]["passed"], true, "{v}");
    assert_eq!(v["spec"]["split_kv"], 3);
    assert_eq!(v["spec"]["waves"], 2);
    assert_eq!(v["spec"]["page_size"], 64);
    let reduce = &v["kernels"]["reduce"];
    assert_eq!(
        reduce["name"], "paged_attn_fp8_q64_kv8_d64_p64_s3_w2_reduce",
        "{v}"
    );
    assert_eq!(v["grid"], serde_json::json!([2 * 8, 3, 1]), "{v}");
    assert!(v["timings"]["reduce_ms"].as_f64().is_some(), "{v}");
    for name in ["main.hsaco", "reduce.hsaco"] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        assert!(bytes.starts_with(b"\x7fELF"), "{name} is a code object");
    }
    // A run without a reduce kernel into the same directory leaves no reduce files (neither
    // empty ones nor the earlier run's).
    let fused = tilegen()
        .args(&GPT_OSS[..6])
        .args(["--page-size", "64", "--split-kv", "3", "--waves", "2"])
        .args([
            "--batch",
            "2",
            "--context",
            "700,5",
            "--fused-reduce",
            "true",
            "--json",
        ])
        .arg("--emit-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let f = json(&fused);
    assert!(f["kernels"]["reduce"].is_null(), "{f}");
    for name in ["reduce.hsaco", "reduce.s"] {
        assert!(!dir.path().join(name).exists(), "{name} left behind");
    }
    let bytes = std::fs::read(dir.path().join("main.hsaco")).unwrap();
    assert!(bytes.starts_with(b"\x7fELF"));
    let listing = std::fs::read_to_string(dir.path().join("main.s")).unwrap();
    assert!(
        listing.contains("ds_read_b64_tr_b8"),
        "V strips are read transposed"
    );
    // The emitted result is the run's bf16 output; the report is the printed JSON.
    let result = std::fs::read(dir.path().join("out.bin")).unwrap();
    assert_eq!(result.len(), 2 * 64 * 64 * 2);
    let lens = std::fs::read(dir.path().join("context_lens.bin")).unwrap();
    assert_eq!(lens, [700i32, 5].map(i32::to_le_bytes).concat());
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("report.json")).unwrap()).unwrap();
    assert_eq!(report["check"], v["check"]);
}

#[test]
fn unsupported_shapes_are_refused_naming_the_rule() {
    let refuse = |args: &[&str], rule: &str| {
        let out = tilegen()
            .args(["--batch", "1", "--context", "16"])
            .args(args)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} was accepted");
        assert!(stderr.contains(rule), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{stderr}");
    };
    let heads = |q: &'static str, kv: &'static str, d: &'static str, page: &'static str| {
        [
            "--q-heads",
            q,
            "--kv-heads",
            kv,
            "--head-dim",
            d,
            "--page-size",
            page,
        ]
    };
    refuse(
        &heads("64", "2", "64", "16"),
        "q_heads / kv_heads = 32: the kernel supports groups of [1, 4, 8, 16]",
    );
    refuse(
        &heads("8", "8", "96", "16"),
        "head_dim = 96: the kernel supports [64, 128]",
    );
    refuse(&heads("8", "8", "64", "8"), "page_size = 8");
    refuse(
        &heads("6", "4", "64", "16"),
        "q_heads a multiple of kv_heads",
    );
    let mut split = heads("8", "8", "64", "16").to_vec();
    split.extend(["--split-kv", "0"]);
    refuse(&split, "split_kv = 0");
    // The problem, not the kernel: contexts that do not match the batch, an empty context.
    let ok = heads("8", "8", "64", "16");
    let out = tilegen()
        .args(["--batch", "3", "--context", "16,16"])
        .args(ok)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--context has 2 values"));
    let out = tilegen()
        .args(["--batch", "1", "--context", "0"])
        .args(ok)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("context length 0"));
}
