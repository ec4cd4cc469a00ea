//! The timing model's method through the binary: `moe` and `attention` take the model's
//! flags (refused without `--timing`) and say in their JSON which method ran; `moe --routing
//! skewed` sends every token to the same experts; `gemm` extrapolates a long K loop unless
//! `--full-k`, and says so.

use std::process::{Command, Output};

fn tilegen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A small layer with padding (480 -> 512) on the command line.
const MOE: [&str; 13] = [
    "moe",
    "--model",
    "gpt-oss-20b",
    "--experts",
    "6",
    "--topk",
    "2",
    "--hidden",
    "480",
    "--inter",
    "448",
    "--tokens",
    "40",
];

const ATTENTION: [&str; 13] = [
    "attention",
    "--batch",
    "2",
    "--context",
    "300",
    "--q-heads",
    "8",
    "--kv-heads",
    "1",
    "--head-dim",
    "64",
    "--page-size",
    "16",
];

#[test]
fn model_flags_go_with_timing() {
    for (base, flag) in [
        (&MOE[..], "--full-simulation"),
        (&MOE[..], "--no-census"),
        (&ATTENTION[..], "--full-simulation"),
        (&ATTENTION[..], "--params"),
    ] {
        let mut args = base.to_vec();
        args.push(flag);
        if flag == "--params" {
            args.push("/nonexistent/params.toml");
        }
        let out = tilegen(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}");
        assert!(err.contains("go with --timing"), "{args:?}: {err}");
    }
    let out = tilegen(&["gemm", "--m", "64", "--n", "128", "--k", "512", "--full-k"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--full-k goes with --timing"));
}

#[test]
fn moe_says_which_method_ran_and_routes_skewed() {
    let mut args = MOE.to_vec();
    args.extend([
        "--timing",
        "--full-simulation",
        "--routing",
        "skewed",
        "--json",
    ]);
    let v = json(&tilegen(&args));
    assert_eq!(v["run"]["passed"], true, "{v}");
    assert_eq!(v["routing"]["kind"], "skewed");
    // 40 tokens on the same two experts.
    assert_eq!(v["routing"]["experts_touched"], 2, "{v}");
    let t = &v["timing"];
    assert_eq!(t["method"], "full", "{t}");
    for k in t["kernels"].as_array().unwrap() {
        assert_eq!(k["method"], "full", "{k}");
        assert_eq!(k["workgroups_simulated"], k["workgroups_total"], "{k}");
    }
    let mut args = MOE.to_vec();
    args.extend(["--timing", "--no-run", "--json"]);
    let v = json(&tilegen(&args));
    assert_eq!(v["routing"]["kind"], "uniform");
    assert!(v["routing"]["experts_touched"].as_u64().unwrap() > 2, "{v}");
    assert_eq!(v["timing"]["method"], "rounds");
    assert_eq!(v["timing"]["kernels"][0]["method"], "rounds");
}

#[test]
fn attention_says_which_method_ran_and_writes_a_trace_per_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.json");
    let mut args = ATTENTION.to_vec();
    let trace_arg = trace.to_str().unwrap();
    args.extend([
        "--split-kv",
        "2",
        "--timing",
        "--full-simulation",
        "--trace",
        trace_arg,
        "--json",
    ]);
    let v = json(&tilegen(&args));
    let t = &v["timing"];
    assert_eq!(t["method"], "full", "{t}");
    assert_eq!(t["main"]["method"], "full", "{t}");
    assert_eq!(t["reduce"]["method"], "full", "{t}");
    for name in ["t.main.json", "t.reduce.json"] {
        let bytes = std::fs::read(dir.path().join(name)).unwrap();
        let trace: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert!(trace.is_object() || trace.is_array(), "{name}");
    }
    assert!(
        !trace.exists(),
        "the per-kernel files replace --trace's own"
    );
}

/// 21 K steps of 512 on the default preb kernel: just past the 4 + 16 steps the extrapolation
/// runs, so both predictions stay cheap.
#[test]
fn gemm_extrapolates_a_long_k_loop_unless_full_k() {
    let base = [
        "gemm",
        "--m",
        "64",
        "--n",
        "128",
        "--k",
        "10752",
        "--timing-only",
        "--json",
    ];
    let x = json(&tilegen(&base));
    assert_eq!(x["timing_k"]["steps"], 21, "{x}");
    assert_eq!(x["timing_k"]["extrapolated"], true, "{x}");
    assert_eq!(x["timing_k"]["runs"], serde_json::json!([4, 16]));
    let mut args = base.to_vec();
    args.push("--full-k");
    let f = json(&tilegen(&args));
    assert_eq!(f["timing_k"]["extrapolated"], false, "{f}");
    assert!(f["timing_k"]["runs"].is_null(), "{f}");
    let (xu, fu) = (
        x["timing"]["us"].as_f64().unwrap(),
        f["timing"]["us"].as_f64().unwrap(),
    );
    assert!(
        (xu / fu - 1.0).abs() < 0.02,
        "extrapolated {xu} us, every step {fu} us"
    );
    // A short K is simulated whole either way.
    let short = json(&tilegen(&[
        "gemm",
        "--m",
        "64",
        "--n",
        "128",
        "--k",
        "4096",
        "--timing-only",
        "--json",
    ]));
    assert_eq!(short["timing_k"]["extrapolated"], false, "{short}");
}
