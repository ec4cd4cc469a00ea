//! Device timing through HSA's profiling API over the emulated library: `tilegen tune --by
//! device --device hsa` records each launch's dispatch time, which the library models with
//! the MI355X timing model, so a sweep ranked on the device ranks its specs as the sweep
//! ranked by the model does (the two differ by the launch overhead the model adds).

mod hsa_common;

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use tilegen_tune::Db;

/// One GEMM at one M and a space of small specs: 20 at M = 16 once the tall tiles are dropped,
/// and the default spec.
const TEMPLATE: &str = r#"[model]
name = "rank"
m = [16]

[[gemm]]
name = "g"
n = 256
k = 512

[space]
variant = ["preb"]
bm = [16, 32]
bn = [32, 64, 128]
bk_elems = [256, 512]
wn = [32, 64]
b_prefetch = [false, true]
"#;

fn sweep(template: &Path, db: &Path, args: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .arg("tune")
        .arg(template)
        .arg("--db")
        .arg(db)
        .args(args)
        .env("TILEGEN_HSA_LIB", hsa_common::emulated_hsa())
        .output()
        .expect("run tilegen");
    assert!(
        out.status.success(),
        "tilegen tune {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Times by kernel cache key, of the sweep's succeeded rows.
fn times(db: &Path) -> HashMap<String, f64> {
    Db::open_existing(db)
        .unwrap()
        .results()
        .unwrap()
        .into_iter()
        .filter_map(|r| r.us.map(|us| (r.cache_key, us)))
        .collect()
}

/// Ranks from 1, ties sharing their mean rank.
fn ranks(v: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..v.len()).collect();
    order.sort_by(|&a, &b| v[a].total_cmp(&v[b]));
    let mut r = vec![0.0; v.len()];
    let mut i = 0;
    while i < order.len() {
        let mut j = i;
        while j + 1 < order.len() && v[order[j + 1]] == v[order[i]] {
            j += 1;
        }
        for &o in &order[i..=j] {
            r[o] = (i + j) as f64 / 2.0 + 1.0;
        }
        i = j + 1;
    }
    r
}

/// Spearman's rank correlation (Pearson's of the ranks).
fn spearman(x: &[f64], y: &[f64]) -> f64 {
    let (rx, ry) = (ranks(x), ranks(y));
    let n = rx.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let cov: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    cov / (vx * vy).sqrt()
}

#[test]
fn spearman_ranks_agree_with_themselves() {
    assert_eq!(ranks(&[3.0, 1.0, 2.0, 1.0]), vec![4.0, 1.5, 3.0, 1.5]);
    assert!((spearman(&[1.0, 2.0, 3.0], &[10.0, 20.0, 30.0]) - 1.0).abs() < 1e-12);
    assert!((spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]) + 1.0).abs() < 1e-12);
}

#[test]
fn device_sweep_over_the_emulated_library_ranks_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("rank.toml");
    std::fs::write(&t, TEMPLATE).unwrap();
    let (by_model, by_device) = (dir.path().join("model.db"), dir.path().join("device.db"));
    sweep(&t, &by_model, &["--by", "model", "--json"]);
    sweep(
        &t,
        &by_device,
        &[
            "--by",
            "device",
            "--device",
            "hsa",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--json",
        ],
    );
    let (model, device) = (times(&by_model), times(&by_device));
    let mut pairs: Vec<(f64, f64)> = model
        .iter()
        .filter_map(|(key, &m)| device.get(key).map(|&d| (m, d)))
        .collect();
    pairs.sort_by(|a, b| a.0.total_cmp(&b.0));
    assert!(
        pairs.len() >= 21 && pairs.len() == model.len(),
        "{} specs timed by both (model {}, device {})",
        pairs.len(),
        model.len(),
        device.len()
    );
    for &(m, d) in &pairs {
        // The device time is the kernel's; the model's adds its launch overhead.
        assert!(d > 0.0 && d < m, "device {d} µs, model {m} µs");
    }
    let (m, d): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
    let rho = spearman(&m, &d);
    println!(
        "{} specs: Spearman rank correlation of model and device times {rho:.4}",
        pairs.len()
    );
    for (m, d) in &pairs {
        println!(
            "  model {m:8.3} µs  device {d:8.3} µs  difference {:.3}",
            m - d
        );
    }
    assert!(rho >= 0.9, "Spearman {rho:.4} < 0.9");
}
