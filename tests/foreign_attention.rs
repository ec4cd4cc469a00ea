//! A foreign FP8 paged decode attention on the emulator: Triton 3.9 compiled it for gfx950
//! (`scripts/triton/attention.py`, into `target/foreign/attention` by `cargo xtask setup`), and
//! its output must match the script's pure-Python reference to f32 rounding (the inputs make
//! every FP8 quantization point exact). Its P V product reads V with `ds_read_b64_tr_b8`, so a
//! wrong lane map of that instruction in the emulator would move outputs by whole values of V:
//! this confirms the map our `TiledMmaLoader` V strips rely on, with a compiler that is not ours.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::Value;
use tilegen::runtime::{ArgValue, Device, DevicePtr, EmuDevice, LaunchConfig, launch};

/// Instructions the cases exist to run.
const MUST_EXECUTE: &[&str] = &["ds_read_b64_tr_b8", "v_mfma_f32_16x16x128_f8f6f4"];

fn corpus() -> Option<PathBuf> {
    // Panics when the corpus was never made; None after a loud SKIP when it could not be.
    tilegen_testkit::foreign_kernels()?;
    Some(tilegen_testkit::foreign_dir().join("attention"))
}

/// One output's expectation.
struct Out {
    file: PathBuf,
    bytes: usize,
    rtol: f64,
    atol: f64,
}

fn num(v: &Value, key: &str, at: &Path) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{}: no number `{key}`", at.display()))
}

/// Runs one case; returns the mnemonics executed, or what went wrong.
fn run_case(dev: &EmuDevice, dir: &Path) -> Result<BTreeSet<String>, String> {
    let file = dir.join("case.json");
    let text = std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?;
    let case: Value =
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let dims = |key: &str| -> Result<[u32; 3], String> {
        let a = case[key]
            .as_array()
            .filter(|a| a.len() == 3)
            .ok_or(format!("{}: `{key}` is not 3 integers", file.display()))?;
        let mut out = [0u32; 3];
        for (o, x) in out.iter_mut().zip(a) {
            *o = x.as_u64().ok_or(format!("{}: `{key}`", file.display()))? as u32;
        }
        Ok(out)
    };
    let kernel = case["kernel"].as_str().ok_or("no kernel name")?;
    let code = std::fs::read(dir.join("kernel.hsaco")).map_err(|e| e.to_string())?;
    let module = dev.load(&code).map_err(|e| format!("load: {e}"))?;
    let mut args = Vec::new();
    let mut owned: Vec<DevicePtr> = Vec::new();
    let mut outs: Vec<(DevicePtr, Out)> = Vec::new();
    for a in case["args"].as_array().ok_or("no args")? {
        let obj = a.as_object().ok_or("an argument is not an object")?;
        let (kind, val) = obj.iter().next().ok_or("an empty argument")?;
        args.push(match kind.as_str() {
            "in" => {
                let path = dir.join(val.as_str().ok_or("`in` needs a file")?);
                let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
                let p = dev.alloc(bytes.len() as u64).map_err(|e| e.to_string())?;
                dev.copy_to_device(p, &bytes).map_err(|e| e.to_string())?;
                owned.push(p);
                ArgValue::Ptr(p)
            }
            "out" => {
                let out = Out {
                    file: dir.join(val["file"].as_str().ok_or("`out` needs `file`")?),
                    bytes: num(val, "bytes", &file) as usize,
                    rtol: num(val, "rtol", &file),
                    atol: num(val, "atol", &file),
                };
                if val["dtype"].as_str() != Some("f32") {
                    return Err("outputs are f32".into());
                }
                let p = dev.alloc(out.bytes as u64).map_err(|e| e.to_string())?;
                owned.push(p);
                outs.push((p, out));
                ArgValue::Ptr(p)
            }
            "i32" => ArgValue::I32(val.as_i64().ok_or("`i32` needs an integer")? as i32),
            "null" => ArgValue::Null,
            other => return Err(format!("unexpected argument kind {other}")),
        });
    }
    let config = LaunchConfig {
        grid: dims("grid")?,
        block: dims("block")?,
        dynamic_lds: case["dynamic_lds"].as_u64().ok_or("no dynamic_lds")? as u32,
    };
    let report =
        launch(dev, &module, kernel, &config, &args).map_err(|e| format!("launch: {e}"))?;
    let executed: BTreeSet<String> = report
        .stats
        .as_ref()
        .map(|s| s.by_opcode().map(|(op, _)| op.to_string()).collect())
        .unwrap_or_default();
    let mut problems = Vec::new();
    for (p, out) in &outs {
        let mut got = vec![0u8; out.bytes];
        dev.copy_from_device(*p, &mut got)
            .map_err(|e| e.to_string())?;
        let want = std::fs::read(&out.file).map_err(|e| e.to_string())?;
        let f32s = |b: &[u8]| -> Vec<f32> {
            b.chunks_exact(4)
                .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let (got, want) = (f32s(&got), f32s(&want));
        // NaN differences count as misses.
        let within = |g: f32, w: f32| {
            let (g, w) = (g as f64, w as f64);
            (g - w).abs() <= out.atol + out.rtol * w.abs()
        };
        let misses: Vec<(usize, f32, f32)> = got
            .iter()
            .zip(&want)
            .enumerate()
            .filter(|(_, (g, w))| !within(**g, **w))
            .map(|(i, (g, w))| (i, *g, *w))
            .collect();
        let bad: Vec<String> = misses
            .iter()
            .take(5)
            .map(|(i, g, w)| format!("[{i}] got {g:e} want {w:e}"))
            .collect();
        let count = misses.len();
        if count > 0 {
            problems.push(format!(
                "{count} of {} outputs differ: {}",
                got.len(),
                bad.join(", ")
            ));
        }
    }
    for p in owned {
        dev.free(p).map_err(|e| e.to_string())?;
    }
    if problems.is_empty() {
        Ok(executed)
    } else {
        Err(problems.join("; "))
    }
}

#[test]
fn triton_fp8_paged_attention_matches_its_reference() {
    let Some(dir) = corpus() else {
        return;
    };
    let manifest = dir.join("cases.json");
    let text = std::fs::read_to_string(&manifest).unwrap_or_else(|e| {
        panic!(
            "the Triton attention corpus is missing ({}: {e}): run `cargo xtask setup`",
            manifest.display()
        )
    });
    let names: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = names["cases"]
        .as_array()
        .expect("a `cases` list")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!names.is_empty(), "{} lists no cases", manifest.display());
    let dev = EmuDevice::new();
    let mut executed = BTreeSet::new();
    let mut problems = Vec::new();
    for name in names {
        let case_dir = dir.join(name);
        let asm = std::fs::read_to_string(case_dir.join("kernel.s")).unwrap_or_default();
        assert!(
            asm.contains("ds_read_b64_tr_b8"),
            "{name}: Triton no longer reads V with ds_read_b64_tr_b8; the check lost its point"
        );
        match run_case(&dev, &case_dir) {
            Ok(ops) => {
                eprintln!("{name}: ok");
                executed.extend(ops);
            }
            Err(e) => problems.push(format!("{name}: {e}")),
        }
    }
    for m in MUST_EXECUTE {
        if !executed.contains(*m) {
            problems.push(format!("no case executed {m}"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
