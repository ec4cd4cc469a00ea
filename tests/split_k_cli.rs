//! `tilegen gemm --timing-only` of a split-K kernel: the model times the launch's two kernels
//! (the GEMM and its split-K reduction) and reports both and their sum; with bf16 atomics the
//! launch is the GEMM alone.

use std::process::Command;

fn timed(more: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "gemm",
        "--m",
        "4",
        "--n",
        "2112",
        "--k",
        "7168",
        "--bm",
        "16",
        "--bk-elems",
        "256",
        "--timing-only",
        "--json",
    ];
    args.extend_from_slice(more);
    let out = Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .args(&args)
        .output()
        .expect("run tilegen");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

#[test]
fn a_split_k_launch_is_timed_with_its_reduction() {
    let us = |v: &serde_json::Value, key: &str| v[key].as_f64().unwrap();
    let exact = timed(&["--split-k", "4"]);
    let (gemm, reduce) = (
        us(&exact["timing"], "us"),
        us(&exact["timing_reduce"], "us"),
    );
    assert!(gemm > 0.0 && reduce > 0.0, "{exact}");
    // The total is summed where the CLI reports it: equal up to the rounding of the sum.
    let total = us(&exact, "timing_us");
    assert!(
        (total - (gemm + reduce)).abs() <= 1e-9 * total,
        "total {total} us, parts {gemm} + {reduce}"
    );
    let atomic = timed(&["--split-k", "4", "--split-k-atomic"]);
    assert!(atomic["timing_reduce"].is_null(), "{atomic}");
    assert_eq!(us(&atomic, "timing_us"), us(&atomic["timing"], "us"));
    let unsplit = timed(&[]);
    assert!(unsplit["timing_reduce"].is_null(), "{unsplit}");
}
