//! `tilegen moe` end to end through the binary: a small layer with random weights, the same
//! layer from a gpt-oss-layout safetensors file after `tilegen preshuffle` (K padded, with and
//! without expert biases), the timing model, Kimi-K2's real layer on lazily allocated weights,
//! and refusals.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Output};

use safetensors::tensor::{Dtype, TensorView};
use tilegen::mx::MxMatrix;

fn tilegen() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tilegen"))
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A small layer on the command line: sizes that need padding (480 -> 512).
const SMALL: [&str; 10] = [
    "--experts",
    "6",
    "--topk",
    "2",
    "--hidden",
    "480",
    "--inter",
    "448",
    "--tokens",
    "5",
];

#[test]
fn random_layer_runs_checks_and_times() {
    let out = tilegen()
        .args(["moe", "--model", "gpt-oss-20b", "--json", "--timing"])
        .args(SMALL)
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["run"]["passed"], true, "{v}");
    // gpt-oss presets add (random) expert biases.
    assert_eq!(v["bias"], true, "{v}");
    assert_eq!(v["padded"]["hidden"], 512);
    assert_eq!(v["run"]["check"]["stage1"]["violations"], 0);
    assert!(v["run"]["nonzero_outputs"].as_u64().unwrap() > 1000, "{v}");
    // 10 pairs: the rule's gate/up kernel groups them itself, so gate/up and down run (no
    // sort kernel), and the grouping is the host's.
    assert_eq!(v["run"]["launches"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["run"]["launches"][0]["stage"], "gate-up");
    assert_eq!(v["run"]["check"]["sort"]["passed"], true);
    let t = &v["timing"];
    assert!(t["total_us"].as_f64().unwrap() > 0.0, "{t}");
    assert_eq!(t["kernels"].as_array().unwrap().len(), 2);
    // DeepSeek's activation and router, the sorted reduce (a third kernel), other tiles, the
    // fused sort asked for (blocks given, it is off unless asked).
    let out = tilegen()
        .args([
            "moe",
            "--model",
            "deepseek-v3",
            "--json",
            "--combine",
            "sorted-reduce",
        ])
        .args([
            "--block-m",
            "16",
            "--bn",
            "256",
            "--down-bn",
            "64",
            "--wn",
            "32",
        ])
        .args(["--bk-elems", "256", "--fused-sort", "true"])
        .args([
            "--experts",
            "16",
            "--topk",
            "4",
            "--hidden",
            "512",
            "--inter",
            "256",
        ])
        .args(["--tokens", "3"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["run"]["passed"], true, "{v}");
    assert_eq!(v["run"]["launches"].as_array().unwrap().len(), 3);
    assert_eq!(v["run"]["launches"][2]["stage"], "reduce");
    assert_eq!(v["spec"]["activation"], "silu-mul");
}

fn write(path: &Path, tensors: &[(String, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, Some(HashMap::new()), path).unwrap();
}

/// A gpt-oss-layout layer: `[E, N, K/32, 16]` blocks and `[E, N, K/32]` scales, K = hidden or
/// intermediate, unpadded, and with `bias` the bf16 biases `[E, 2 inter]` and `[E, hidden]`.
/// `zero_down` writes a down projection of zeros.
fn gpt_oss_file(
    path: &Path,
    experts: usize,
    hidden: usize,
    inter: usize,
    zero_down: bool,
    bias: bool,
) {
    let mut tensors = Vec::new();
    if bias {
        for (name, n) in [
            ("model.layers.0.mlp.experts.gate_up_proj_bias", 2 * inter),
            ("model.layers.0.mlp.experts.down_proj_bias", hidden),
        ] {
            let bytes = (0..experts * n)
                .flat_map(|i| {
                    let v = ((i * 37 % 101) as f32 / 50.0 - 1.0) * 0.5;
                    half::bf16::from_f32(v).to_le_bytes()
                })
                .collect();
            tensors.push((name.to_string(), Dtype::BF16, vec![experts, n], bytes));
        }
    }
    for (name, n, k) in [
        ("model.layers.0.mlp.experts.gate_up_proj", 2 * inter, hidden),
        ("model.layers.0.mlp.experts.down_proj", hidden, inter),
    ] {
        let (mut blocks, mut scales) = (Vec::new(), Vec::new());
        for e in 0..experts {
            let m = MxMatrix::random(n, k, (e * 31 + n) as u64).unwrap();
            if zero_down && name.ends_with("down_proj") {
                blocks.extend(std::iter::repeat_n(0u8, m.data().len()));
            } else {
                blocks.extend_from_slice(m.data());
            }
            // Scales near 2^-6, as a trained layer's.
            scales.extend(m.scales().iter().map(|&s| s - 6));
        }
        tensors.push((
            format!("{name}_blocks"),
            Dtype::U8,
            vec![experts, n, k / 32, 16],
            blocks,
        ));
        tensors.push((
            format!("{name}_scales"),
            Dtype::U8,
            vec![experts, n, k / 32],
            scales,
        ));
    }
    write(path, &tensors);
}

/// `tilegen preshuffle RAW -o PRE`, which must succeed.
fn preshuffle(raw: &Path, pre: &Path) {
    let st = tilegen()
        .arg("preshuffle")
        .arg(raw)
        .arg("-o")
        .arg(pre)
        .output()
        .unwrap();
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
}

#[test]
fn weights_from_a_preshuffled_gpt_oss_file() {
    let dir = tempfile::tempdir().unwrap();
    let raw = dir.path().join("layer.safetensors");
    let pre = dir.path().join("layer.pre.safetensors");
    gpt_oss_file(&raw, 4, 480, 288, false, false);
    let run = |weights: &Path| {
        tilegen()
            .args([
                "moe",
                "--model",
                "gpt-oss-20b",
                "--json",
                "--topk",
                "2",
                "--tokens",
                "6",
            ])
            .arg("--weights")
            .arg(weights)
            .output()
            .unwrap()
    };
    // An unpreshuffled file is refused with the reason.
    let out = run(&raw);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not preshuffled"), "{err}");
    preshuffle(&raw, &pre);
    let v = json(&run(&pre));
    assert_eq!(v["run"]["passed"], true, "{v}");
    // A file without biases runs without them.
    assert_eq!(v["bias"], false, "{v}");
    // Sizes come from the file: K = 480 and 288 pad to 512.
    assert_eq!(v["shape"]["experts"], 4);
    assert_eq!(v["shape"]["hidden"], 480);
    assert_eq!(v["shape"]["inter"], 288);
    assert!(v["run"]["nonzero_outputs"].as_u64().unwrap() > 1000);
    // The file's weights are the ones used: a zero down projection gives a zero layer.
    let raw0 = dir.path().join("zero.safetensors");
    let pre0 = dir.path().join("zero.pre.safetensors");
    gpt_oss_file(&raw0, 4, 480, 288, true, false);
    preshuffle(&raw0, &pre0);
    let v = json(&run(&pre0));
    assert_eq!(v["run"]["passed"], true, "{v}");
    assert_eq!(v["run"]["nonzero_outputs"], 0, "{v}");
    // A file with biases: they are read and applied (a zero down projection now gives the
    // down bias), or left off with --bias false; asking for them from a file without them
    // is refused.
    let raw_b = dir.path().join("bias.safetensors");
    let pre_b = dir.path().join("bias.pre.safetensors");
    gpt_oss_file(&raw_b, 4, 480, 288, true, true);
    preshuffle(&raw_b, &pre_b);
    let v = json(&run(&pre_b));
    assert_eq!(v["run"]["passed"], true, "{v}");
    assert_eq!(v["bias"], true, "{v}");
    assert!(v["run"]["nonzero_outputs"].as_u64().unwrap() > 1000, "{v}");
    let off = tilegen()
        .args(["moe", "--model", "gpt-oss-20b", "--json", "--topk", "2"])
        .args(["--tokens", "6", "--bias", "false", "--weights"])
        .arg(&pre_b)
        .output()
        .unwrap();
    let v = json(&off);
    assert_eq!(v["bias"], false, "{v}");
    assert_eq!(v["run"]["nonzero_outputs"], 0, "{v}");
    let out = tilegen()
        .args([
            "moe",
            "--model",
            "gpt-oss-20b",
            "--tokens",
            "2",
            "--bias",
            "true",
        ])
        .arg("--weights")
        .arg(&pre0)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no expert biases"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Sizes given with --weights are refused: they come from the file.
    let out = tilegen()
        .args([
            "moe",
            "--model",
            "gpt-oss-20b",
            "--tokens",
            "2",
            "--hidden",
            "512",
        ])
        .arg("--weights")
        .arg(&pre)
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn refusals_name_the_rule() {
    let fails = |args: &[&str], needle: &str| {
        let out = tilegen().arg("moe").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
    };
    fails(&["--model", "gpt-oss-20b", "--tokens", "0"], "--tokens");
    fails(
        &["--model", "gpt-oss-20b", "--tokens", "2", "--experts", "3"],
        "topk",
    );
    fails(
        &["--model", "gpt-oss-20b", "--tokens", "2", "--bn", "96"],
        "multiple of 64",
    );
    fails(
        &[
            "--model",
            "gpt-oss-20b",
            "--tokens",
            "2",
            "--hidden",
            "1000",
        ],
        "multiple of 32",
    );
    fails(
        &[
            "--model",
            "gpt-oss-20b",
            "--tokens",
            "2",
            "--bk-elems",
            "2048",
        ],
        "bk_elems",
    );
    fails(
        &[
            "--model",
            "gpt-oss-20b",
            "--tokens",
            "2",
            "--weights",
            "/nonexistent.safetensors",
        ],
        "nonexistent",
    );
}

/// `--model` is the MoE templates: every template of `templates/moe` is a model, named and
/// described by its sizes in `--help`.
#[test]
fn models_are_the_moe_templates() {
    let out = tilegen().args(["moe", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("templates/moe");
    let mut seen = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let t: toml::Value = toml::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let m = &t["model"];
        let line = format!("- {}:", m["name"].as_str().unwrap(),);
        let sizes = format!(
            "{} experts, top-{}, hidden {}, intermediate {}",
            m["experts"], m["topk"], m["hidden"], m["inter"]
        );
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&line) && l.contains(&sizes)),
            "{}: {line} {sizes} not in\n{help}",
            path.display()
        );
        seen += 1;
    }
    assert_eq!(seen, 4);
}

/// The models' real sizes, in CI's budget: gpt-oss-20b (32 experts, hidden and intermediate
/// 2880 padded to 3072) at one token, and DeepSeek-V3's hidden 7168 and intermediate 2048 with
/// 8 of its 256 experts at one token (all 8 picked: 8 blocks of one row).
#[test]
fn real_model_sizes() {
    let out = tilegen()
        .args(["moe", "--model", "gpt-oss-20b", "--tokens", "1", "--json"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["run"]["passed"], true, "{v}");
    assert_eq!(v["padded"]["hidden"], 3072);
    assert_eq!(v["run"]["blocks"], 4);
    // One token's 4 pairs are grouped by the gate/up kernel itself: no sort launch.
    let launches = v["run"]["launches"].as_array().unwrap();
    assert_eq!(launches.len(), 2, "{v}");
    assert_eq!(launches[0]["stage"], "gate-up");
    assert_eq!(launches[0]["grid"][0], 48);
    assert_eq!(v["run"]["check"]["sort"]["passed"], true);
    let out = tilegen()
        .args([
            "moe",
            "--model",
            "deepseek-v3",
            "--tokens",
            "1",
            "--experts",
            "8",
            "--json",
        ])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["run"]["passed"], true, "{v}");
    assert_eq!(v["shape"]["hidden"], 7168);
    assert_eq!(v["run"]["blocks"], 8);
    assert_eq!(v["spec"]["activation"], "silu-mul");
}

/// Kimi-K2's layer at its real sizes: 384 experts of hidden 7168 and intermediate 2048 are 9 GB
/// of grouped weights; they are allocated lazily and only the 8 experts one token routes to are
/// written, so the run takes what those need. (16 tokens, 97 experts, run too: about 3 minutes
/// on two cores, past a test's budget.)
#[test]
fn kimi_k2_runs_on_lazily_allocated_experts() {
    let out = tilegen()
        .args(["moe", "--model", "kimi-k2", "--tokens", "1", "--json"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["run"]["passed"], true, "{v}");
    assert_eq!(v["shape"]["experts"], 384);
    assert_eq!(v["shape"]["hidden"], 7168);
    assert_eq!(v["routing"]["experts_touched"], 8);
    assert_eq!(v["bias"], false);
    assert!(v["run"]["nonzero_outputs"].as_u64().unwrap() > 7000, "{v}");
}

/// A layer of explicit sizes, without `--model`: a tensor-parallel shard's intermediate 256
/// (DeepSeek-V3's 2048 over 8 ranks) runs with the per-token-count rule's spec fitted to it
/// (the down kernel's K tiles of 256, the decode gate/up's of 768) and agrees with the
/// reference; a size left out and an explicit
/// tile that does not divide K are refused in plain sizes.
#[test]
fn explicit_sizes_without_a_model() {
    let sizes = [
        "--model-dim",
        "768",
        "--inter",
        "256",
        "--experts",
        "9",
        "--topk",
        "3",
    ];
    let out = tilegen()
        .arg("moe")
        .args(sizes)
        .args(["--tokens", "3", "--json"])
        .output()
        .unwrap();
    let v = json(&out);
    assert_eq!(v["run"]["passed"], true, "{v}");
    assert_eq!(v["model"], "custom");
    assert_eq!(v["shape"]["hidden"], 768);
    assert_eq!(v["spec"]["down"]["bk_elems"], 256, "{}", v["spec"]);
    // The decode gate/up tile's 1024-element K steps, fitted to 768.
    assert_eq!(v["spec"]["gate_up"]["bk_elems"], 768, "{}", v["spec"]);
    assert_eq!(v["spec"]["block_m"], 16, "{}", v["spec"]);
    assert_eq!(v["spec"]["activation"], "silu-mul");
    let fails = |args: &[&str], needle: &str| {
        let out = tilegen().arg("moe").args(args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && err.contains(needle),
            "{args:?}: {err}"
        );
        assert!(!err.contains("MoeShape {"), "{err}");
    };
    fails(
        &[
            "--inter",
            "256",
            "--experts",
            "9",
            "--topk",
            "3",
            "--tokens",
            "1",
        ],
        "--model-dim is needed without --model",
    );
    let mut args = sizes.to_vec();
    args.extend(["--tokens", "1", "--bk-elems", "512", "--no-run"]);
    fails(
        &args,
        "hidden 768, intermediate 256: hidden 768 is not a multiple of the gate/up kernel's bk_elems 512",
    );
    fails(
        &[
            "--model",
            "deepseek-v3",
            "--inter",
            "256",
            "--tokens",
            "1",
            "--bk-elems",
            "512",
            "--no-run",
        ],
        "inter 256 is not a multiple of the down kernel's bk_elems 512",
    );
    fails(
        &[
            "--model",
            "gpt-oss-120b",
            "--inter",
            "360",
            "--tokens",
            "1",
            "--no-run",
        ],
        "inter = 360 must be a multiple of 32 (whole MX blocks)",
    );
}
