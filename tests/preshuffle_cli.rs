//! `tilegen preshuffle` / `unshuffle` end to end, through the binary.

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use safetensors::tensor::{Dtype, TensorView};

fn tilegen() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tilegen"))
}

fn write(path: &Path, tensors: &[(&str, Dtype, Vec<usize>, Vec<u8>)]) {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|(n, d, s, b)| (n.to_string(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, Some(HashMap::new()), path).unwrap();
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

#[test]
fn round_trip_is_byte_exact_and_json_is_machine_readable() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("w.safetensors");
    write(
        &input,
        &[
            (
                "l.w_blocks",
                Dtype::U8,
                vec![3, 16, 9, 16],
                pattern(3 * 16 * 9 * 16),
            ),
            ("l.w_scales", Dtype::U8, vec![3, 16, 9], pattern(3 * 16 * 9)),
            ("l.b", Dtype::BF16, vec![16], pattern(32)),
        ],
    );
    let pre = dir.path().join("p.safetensors");
    let back = dir.path().join("b.safetensors");
    let out = tilegen()
        .arg("preshuffle")
        .arg(&input)
        .arg("-o")
        .arg(&pre)
        .arg("--json")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["pairs"][0]["k"], 288);
    assert_eq!(v["pairs"][0]["k_padded"], 512);
    assert_eq!(v["copied"][0], "l.b");
    let st = tilegen()
        .arg("unshuffle")
        .arg(&pre)
        .arg("-o")
        .arg(&back)
        .status()
        .unwrap();
    assert!(st.success());
    assert_eq!(
        std::fs::read(&input).unwrap(),
        std::fs::read(&back).unwrap()
    );
}

#[test]
fn bad_input_fails_with_a_message_and_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("bad.safetensors");
    std::fs::write(&input, b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}").unwrap();
    let output = dir.path().join("o.safetensors");
    let out = tilegen()
        .arg("preshuffle")
        .arg(&input)
        .arg("-o")
        .arg(&output)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a valid safetensors file"), "{err}");
    assert!(!output.exists());
    // The input is never overwritten.
    let good = dir.path().join("g.safetensors");
    write(&good, &[("x", Dtype::U8, vec![4], vec![1, 2, 3, 4])]);
    let out = tilegen()
        .arg("preshuffle")
        .arg(&good)
        .arg("-o")
        .arg(&good)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("refusing to overwrite the input"));
    // K not a multiple of 256 without padding.
    let k = dir.path().join("k.safetensors");
    write(
        &k,
        &[
            ("w_blocks", Dtype::U8, vec![16, 3, 16], pattern(768)),
            ("w_scales", Dtype::U8, vec![16, 3], pattern(48)),
        ],
    );
    let out = tilegen()
        .arg("preshuffle")
        .arg(&k)
        .arg("-o")
        .arg(&output)
        .args(["--pad-k", "false"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("K = 96 is not a multiple of 256"));
}
