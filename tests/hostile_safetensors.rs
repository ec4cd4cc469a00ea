//! `tilegen preshuffle` / `unshuffle` against hostile safetensors files, through the binary.
//!
//! A seeded generator makes malformed inputs (truncated files, bad header lengths, garbage,
//! non-UTF-8 and ambiguous headers, bad offsets, wrong dtypes and shapes, half pairs, forged
//! `tilegen.preshuffle` records). Each is run through both commands, under a memory cap and a
//! timeout, with a "precious" file in the output's place. A run either succeeds, and then the
//! output is a valid file that round-trips exactly, or exits with status 1 leaving the input,
//! the precious output and the directory as they were. Named tests below pin down the
//! reproducers of the reliability issue (data loss, trusted metadata, leftovers on signals,
//! symlinks, modes, metadata round trip).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use safetensors::SafeTensors;
use safetensors::tensor::{Dtype, TensorView};
use serde_json::{Value, json};
use tilegen::mx::weights::{self, METADATA_KEY, PreshuffleOptions};

/// Address space a run may use: the binary maps libLLVM (~200 MB); the inputs here are under
/// a megabyte, so anything near this cap is a header's size believed.
const MEMORY_CAP: u64 = 1 << 30;
const TIMEOUT: Duration = Duration::from_secs(60);
const PRECIOUS: &[u8] = b"precious";
const CASES: usize = 600;

// ---------------------------------------------------------------------------------------------
// Running the binary

struct Run {
    status: ExitStatus,
    stderr: String,
}

/// Why a run is a failure of the tool, not of its input.
fn abnormal(r: &Result<Run, String>) -> Option<String> {
    match r {
        Err(e) => Some(e.clone()),
        Ok(run) => match (run.status.code(), run.status.signal()) {
            (Some(0 | 1), _) => None,
            (_, Some(sig)) => Some(format!("killed by signal {sig}: {}", run.stderr)),
            (code, _) => Some(format!("exit status {code:?}: {}", run.stderr)),
        },
    }
}

/// Runs `tilegen args` with the memory cap, an optional umask, and a timeout; stderr goes to a
/// file in `logs` so a chatty child cannot block on a full pipe.
fn tilegen(args: &[&Path], logs: &Path, umask: Option<u32>) -> Result<Run, String> {
    let log = logs.join(format!(
        "run-{}.stderr",
        SERIAL.fetch_add(1, Ordering::Relaxed)
    ));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tilegen"));
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(File::create(&log).map_err(|e| e.to_string())?)
        .env_remove("RUST_LIB_BACKTRACE");
    // SAFETY: setrlimit and umask are async-signal-safe; nothing else runs before exec.
    unsafe {
        cmd.pre_exec(move || {
            let limit = libc::rlimit {
                rlim_cur: MEMORY_CAP,
                rlim_max: MEMORY_CAP,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if let Some(mask) = umask {
                libc::umask(mask as libc::mode_t);
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().map_err(|e| format!("spawn: {e}"))?;
    let start = Instant::now();
    let status = loop {
        match child.try_wait().map_err(|e| e.to_string())? {
            Some(status) => break status,
            None if start.elapsed() > TIMEOUT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("timed out after {TIMEOUT:?} ({args:?})"));
            }
            None => std::thread::sleep(Duration::from_millis(2)),
        }
    };
    let stderr = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    Ok(Run { status, stderr })
}

static SERIAL: AtomicUsize = AtomicUsize::new(0);

fn p(s: &str) -> &Path {
    Path::new(s)
}

/// `tilegen <op> in -o out [extra]`.
fn op(op: &str, input: &Path, out: &Path, extra: &[&str], logs: &Path) -> Result<Run, String> {
    let mut args: Vec<&Path> = vec![p(op), input, p("-o"), out];
    args.extend(extra.iter().map(|a| p(a)));
    tilegen(&args, logs, None)
}

fn names_in(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// Building files

/// SplitMix64: the suite's inputs depend on nothing but the seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo)
    }
    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.below(v.len())]
    }
}

/// A tensor: name, dtype, shape, bytes.
#[derive(Clone, Debug)]
struct Spec(String, Dtype, Vec<usize>, Vec<u8>);

type Meta = Option<HashMap<String, String>>;

fn spec(rng: &mut Rng, name: &str, dtype: Dtype, shape: &[usize]) -> Spec {
    let elems: usize = shape.iter().product();
    Spec(
        name.to_string(),
        dtype,
        shape.to_vec(),
        rng.bytes(elems * dtype.bitsize() / 8),
    )
}

/// The file the safetensors crate writes.
fn serialize(tensors: &[Spec], meta: Meta) -> Vec<u8> {
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|Spec(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize(views, meta).unwrap()
}

/// Tensors by name and the metadata: what a file means.
type Meaning = (HashMap<String, (Dtype, Vec<usize>, Vec<u8>)>, Meta);

fn meaning(bytes: &[u8]) -> Option<Meaning> {
    let st = SafeTensors::deserialize(bytes).ok()?;
    let t = st
        .iter()
        .map(|(n, v)| {
            (
                n.to_string(),
                (v.dtype(), v.shape().to_vec(), v.data().to_vec()),
            )
        })
        .collect();
    let (_, m) = SafeTensors::read_metadata(bytes).ok()?;
    Some((t, m.metadata().clone()))
}

fn specs_of(bytes: &[u8]) -> (Vec<Spec>, Meta) {
    let (t, m) = meaning(bytes).expect("a valid file");
    let mut v: Vec<Spec> = t
        .into_iter()
        .map(|(n, (d, s, b))| Spec(n, d, s, b))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    (v, m)
}

const OTHER_DTYPES: [Dtype; 7] = [
    Dtype::F32,
    Dtype::BF16,
    Dtype::F16,
    Dtype::I64,
    Dtype::U8,
    Dtype::I8,
    Dtype::BOOL,
];

/// A valid MXFP4 pair: grouped `[E, N, K/32, 16]` or not.
fn pair(rng: &mut Rng, stem: &str) -> Vec<Spec> {
    let n = 16 * rng.range(1, 4);
    let kb = rng.range(1, 12);
    if rng.chance(2) {
        let e = rng.range(1, 4);
        vec![
            spec(rng, &format!("{stem}_blocks"), Dtype::U8, &[e, n, kb, 16]),
            spec(rng, &format!("{stem}_scales"), Dtype::U8, &[e, n, kb]),
        ]
    } else {
        vec![
            spec(rng, &format!("{stem}_blocks"), Dtype::U8, &[n, kb, 16]),
            spec(rng, &format!("{stem}_scales"), Dtype::U8, &[n, kb]),
        ]
    }
}

/// A valid model file's tensors and metadata.
fn base(rng: &mut Rng) -> (Vec<Spec>, Meta) {
    let mut t = Vec::new();
    for i in 0..rng.range(0, 4) {
        t.extend(pair(rng, &format!("model.layers.{i}.mlp.w")));
    }
    for i in 0..rng.range(0, 4) {
        let dtype = *rng.pick(&OTHER_DTYPES);
        let len = rng.range(0, 9);
        // A float `_scales` without blocks is an ordinary tensor.
        let name = if i == 0 && dtype != Dtype::U8 {
            "norm_scales".to_string()
        } else {
            format!("t{i}")
        };
        t.push(spec(rng, &name, dtype, &[len]));
    }
    if t.is_empty() {
        // safetensors 0.8 writes `{},"__metadata__":{}}` for no tensors and empty metadata (its
        // map length hint is 0), a file it cannot read itself.
        t.push(spec(rng, "t", Dtype::F32, &[1]));
    }
    let meta = match rng.below(4) {
        0 => None,
        1 => Some(HashMap::new()),
        2 => Some(HashMap::from([("format".into(), "pt".into())])),
        _ => Some(HashMap::from([
            ("format".into(), "pt".into()),
            ("b \"q\"".into(), "ü\n".into()),
            ("z".into(), String::new()),
        ])),
    };
    (t, meta)
}

/// A header as entries of raw JSON, for edits the crate's writer would never make.
struct Parts {
    entries: Vec<(String, String)>,
    data: Vec<u8>,
}

fn split(bytes: &[u8]) -> Parts {
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, Value> = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    Parts {
        entries: header
            .into_iter()
            .map(|(k, v)| (k, v.to_string()))
            .collect(),
        data: bytes[8 + n..].to_vec(),
    }
}

fn join(parts: &Parts, pad: bool) -> Vec<u8> {
    let body: Vec<String> = parts
        .entries
        .iter()
        .map(|(k, v)| format!("{}:{v}", Value::from(k.as_str())))
        .collect();
    let mut json = format!("{{{}}}", body.join(",")).into_bytes();
    if pad {
        json.resize(json.len().next_multiple_of(8), b' ');
    }
    let mut out = (json.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&json);
    out.extend_from_slice(&parts.data);
    out
}

fn edit_entry(parts: &mut Parts, i: usize, f: impl FnOnce(&mut Value)) {
    let mut v: Value = serde_json::from_str(&parts.entries[i].1).unwrap();
    f(&mut v);
    parts.entries[i].1 = v.to_string();
}

/// Indices of the tensor entries (not `__metadata__`).
fn tensor_entries(parts: &Parts) -> Vec<usize> {
    (0..parts.entries.len())
        .filter(|&i| parts.entries[i].0 != "__metadata__")
        .collect()
}

/// `bytes` preshuffled by the library (the binary is what is under test; this only makes inputs).
fn preshuffled(bytes: &[u8], scratch: &Path) -> Vec<u8> {
    let (input, out) = (scratch.join("base"), scratch.join("base.pre"));
    std::fs::write(&input, bytes).unwrap();
    weights::preshuffle_file(&input, &out, PreshuffleOptions::default(), &|_| {}).unwrap();
    std::fs::read(&out).unwrap()
}

/// One hostile input.
struct Case {
    label: String,
    bytes: Vec<u8>,
    /// Exactly what the crate (or our preshuffle of such a file) writes: a round trip gives
    /// these bytes back.
    canonical: bool,
    /// For a preshuffled file nobody edited: what unshuffle must give back.
    origin: Option<Vec<u8>>,
}

impl Case {
    fn new(label: impl Into<String>, bytes: Vec<u8>) -> Case {
        Case {
            label: label.into(),
            bytes,
            canonical: false,
            origin: None,
        }
    }
}

/// Case `i` of the suite: its category is `i % 12`, its details come from the seed.
fn case(i: usize, scratch: &Path) -> Case {
    let mut rng = Rng(0x7113_9e11 ^ (i as u64).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let (tensors, meta) = base(&mut rng);
    let good = serialize(&tensors, meta.clone());
    match i % 12 {
        0 => Case {
            label: "valid".into(),
            bytes: good,
            canonical: true,
            origin: None,
        },
        1 => {
            let len = match rng.below(4) {
                0 => rng.below(9),
                1 => {
                    let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
                    8 + rng.below(n + 1)
                }
                _ => rng.below(good.len()),
            };
            Case::new(format!("truncated to {len}"), good[..len].to_vec())
        }
        2 => {
            let n = u64::from_le_bytes(good[..8].try_into().unwrap());
            let len = good.len() as u64;
            let random = rng.next();
            let bad = *rng.pick(&[
                0,
                1,
                7,
                n - 1,
                n + 1,
                n + 7,
                n + 8,
                len,
                len - 8,
                99_999_999,
                100_000_000,
                100_000_001,
                1 << 32,
                1 << 40,
                1 << 63,
                u64::MAX - 7,
                u64::MAX,
                random,
            ]);
            let mut b = good;
            b[..8].copy_from_slice(&bad.to_le_bytes());
            Case::new(format!("header length {bad}"), b)
        }
        3 => {
            let n = u64::from_le_bytes(good[..8].try_into().unwrap()) as usize;
            let mut b = good;
            let what = rng.below(6);
            match what {
                0 => {
                    for _ in 0..rng.range(1, 6) {
                        let at = 8 + rng.below(n);
                        b[at] = rng.next() as u8;
                    }
                }
                1 => {
                    let at = 8 + rng.below(n);
                    b[at] = *rng.pick(&[0xff, 0xc3, 0x80, 0xed, 0x00]);
                }
                2 => {
                    for x in &mut b[8..8 + n] {
                        *x = b' ' + (rng.next() % 95) as u8;
                    }
                }
                3 => {
                    let junk: &[u8] = rng.pick::<&[u8]>(&[
                        &b"{}"[..],
                        b"[]",
                        b"null",
                        b"\"x\"",
                        b"{\"a\":1}",
                        b"{\"__metadata__\":{\"a\":1}}",
                        b"{\"__metadata__\":[]}",
                        b"{\"t\":{\"dtype\":\"U9\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                        b"{\"t\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,1]}}",
                        b"{\"t\":{\"dtype\":\"U8\",\"shape\":[1.5],\"data_offsets\":[0,1]}}",
                        b"{\"t\":{\"dtype\":\"U8\",\"shape\":[18446744073709551615,2],\"data_offsets\":[0,1]}}",
                    ]);
                    let mut f = (junk.len() as u64).to_le_bytes().to_vec();
                    f.extend_from_slice(junk);
                    f.extend_from_slice(&b[8 + n..]);
                    b = f;
                }
                4 => {
                    // Deep nesting: a recursive parser without a limit overflows its stack.
                    let depth = rng.range(100, 100_000);
                    let mut j = "[".repeat(depth).into_bytes();
                    j.extend(std::iter::repeat_n(b']', depth));
                    let mut f = (j.len() as u64).to_le_bytes().to_vec();
                    f.extend_from_slice(&j);
                    b = f;
                }
                _ => {
                    for _ in 0..rng.range(1, 9) {
                        let at = rng.below(b.len());
                        b[at] ^= 1 << rng.below(8);
                    }
                }
            }
            Case::new(format!("garbage header ({what})"), b)
        }
        4 | 5 => {
            // Structural header edits through raw JSON entries.
            let mut parts = split(&good);
            let ts = tensor_entries(&parts);
            let what = rng.below(9);
            let mut pad = true;
            match what {
                0 if !ts.is_empty() => {
                    let e = parts.entries[*rng.pick(&ts)].clone();
                    parts.entries.push(e);
                }
                1 => {
                    let m = parts
                        .entries
                        .iter()
                        .find(|e| e.0 == "__metadata__")
                        .cloned()
                        .unwrap_or(("__metadata__".into(), "{}".into()));
                    parts.entries.push(m);
                }
                2 => {
                    // A metadata key twice, in raw JSON.
                    parts.entries.retain(|e| e.0 != "__metadata__");
                    parts
                        .entries
                        .insert(0, ("__metadata__".into(), r#"{"a":"1","a":"2"}"#.into()));
                }
                3 if !ts.is_empty() => {
                    let at = *rng.pick(&ts);
                    let shift = rng.below(7);
                    edit_entry(&mut parts, at, |v| {
                        let o = &mut v["data_offsets"];
                        let (s, e) = (o[0].as_u64().unwrap(), o[1].as_u64().unwrap());
                        *o = match shift {
                            0 => json!([s.saturating_sub(1), e.saturating_sub(1)]),
                            1 => json!([0, e]),
                            2 => json!([s, e + 1]),
                            3 => json!([s, e + 1000]),
                            4 => json!([e, s]),
                            5 => json!([u64::MAX - 1, u64::MAX]),
                            _ => json!([s + 1, e + 1]),
                        };
                    });
                }
                4 if !ts.is_empty() => {
                    let at = *rng.pick(&ts);
                    let choice = rng.below(5);
                    edit_entry(&mut parts, at, |v| match choice {
                        0 => v["dtype"] = json!("u8"),
                        1 => v["shape"] = json!([]),
                        2 => v["shape"] = json!([1u64 << 62, 1u64 << 62]),
                        3 => {
                            v.as_object_mut().unwrap().remove("shape");
                        }
                        _ => v["extra"] = json!(1),
                    });
                }
                5 => {
                    // Valid, but not the crate's layout: entries reversed, no padding.
                    parts.entries.reverse();
                    pad = false;
                }
                6 => {
                    parts.entries.retain(|e| e.0 != "__metadata__");
                    parts
                        .entries
                        .push(("__metadata__".into(), r#"{"n":1}"#.into()));
                }
                7 => {
                    parts.entries.retain(|e| e.0 != "__metadata__");
                    parts.entries.push(("__metadata__".into(), "null".into()));
                }
                _ => {
                    let extra = rng.range(1, 9);
                    parts.data.extend_from_slice(&rng.bytes(extra));
                }
            }
            Case::new(format!("header edit {what}"), join(&parts, pad))
        }
        6 | 7 => {
            // Semantically wrong MXFP4 tensors, each a valid safetensors file.
            let mut t = tensors;
            let (n, kb, e) = (16 * rng.range(1, 3), rng.range(1, 5), rng.range(1, 3));
            let what = rng.below(14);
            let (bd, bs, sd, ss): (Dtype, Vec<usize>, Dtype, Vec<usize>) = match what {
                0 => (
                    *rng.pick(&[Dtype::I8, Dtype::F8_E4M3, Dtype::BOOL, Dtype::F8_E8M0]),
                    vec![n, kb, 16],
                    Dtype::U8,
                    vec![n, kb],
                ),
                1 => (Dtype::F16, vec![n, kb, 8], Dtype::U8, vec![n, kb]),
                2 => (
                    Dtype::U8,
                    vec![n, kb, 16],
                    *rng.pick(&[Dtype::I8, Dtype::F8_E8M0, Dtype::F16]),
                    vec![n, kb],
                ),
                3 => {
                    let bad_n = *rng.pick(&[1, 8, 20, 24, 33]);
                    (
                        Dtype::U8,
                        vec![e, bad_n, kb, 16],
                        Dtype::U8,
                        vec![e, bad_n, kb],
                    )
                }
                4 => {
                    let last = *rng.pick(&[1, 8, 15, 17, 32]);
                    (Dtype::U8, vec![n, kb, last], Dtype::U8, vec![n, kb])
                }
                5 => (Dtype::U8, vec![n, kb, 16], Dtype::U8, vec![n, kb + 1]),
                6 => (Dtype::U8, vec![n, kb, 16], Dtype::U8, vec![n + 1, kb]),
                7 => (Dtype::U8, vec![e, n, kb, 16], Dtype::U8, vec![n, kb]),
                8 => (Dtype::U8, vec![n, 16], Dtype::U8, vec![n]),
                9 => (
                    Dtype::U8,
                    vec![1, e, n, kb, 16],
                    Dtype::U8,
                    vec![1, e, n, kb],
                ),
                10 => (Dtype::U8, vec![n * kb * 16], Dtype::U8, vec![n * kb]),
                11 => {
                    let mut dims = [e, n, kb];
                    dims[rng.below(3)] = 0;
                    (
                        Dtype::U8,
                        vec![dims[0], dims[1], dims[2], 16],
                        Dtype::U8,
                        dims.to_vec(),
                    )
                }
                12 => (Dtype::U8, vec![n, kb, 16], Dtype::U8, vec![e, n, kb, 1]),
                _ => (Dtype::U8, vec![n, kb, 16], Dtype::U8, vec![n, kb]),
            };
            match what {
                13 => {
                    // One half of a pair.
                    let half = rng.below(3);
                    match half {
                        0 => t.push(spec(&mut rng, "x_blocks", bd, &bs)),
                        1 => t.push(spec(&mut rng, "x_scales", sd, &ss)),
                        _ => {
                            t.push(spec(&mut rng, "x_blocks", bd, &bs));
                            t.push(spec(&mut rng, "x_scale", sd, &ss));
                        }
                    }
                }
                _ => {
                    t.push(spec(&mut rng, "x_blocks", bd, &bs));
                    t.push(spec(&mut rng, "x_scales", sd, &ss));
                }
            }
            Case::new(format!("bad pair {what}"), serialize(&t, meta))
        }
        8..=10 => forged(&mut rng, &good, scratch),
        _ => {
            // Bit flips anywhere in a preshuffled file.
            let mut b = preshuffled(&good, scratch);
            for _ in 0..rng.range(1, 5) {
                let at = rng.below(b.len());
                b[at] ^= 1 << rng.below(8);
            }
            Case::new("flipped preshuffled", b)
        }
    }
}

/// A preshuffled file with its record or tensors edited.
fn forged(rng: &mut Rng, good: &[u8], scratch: &Path) -> Case {
    let pre = preshuffled(good, scratch);
    let (mut t, meta) = specs_of(&pre);
    let mut meta = meta.unwrap();
    let mut record: Value = serde_json::from_str(&meta[METADATA_KEY]).unwrap();
    let names: Vec<String> = record["tensors"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let what = rng.below(22);
    let mut raw = None;
    match what {
        0 => {
            return Case {
                label: "preshuffled".into(),
                bytes: pre,
                canonical: true,
                origin: Some(good.to_vec()),
            };
        }
        1 => {
            record["version"] = rng
                .pick(&[
                    json!(0),
                    json!(3),
                    json!(99),
                    json!(u32::MAX),
                    json!(-1),
                    json!("2"),
                    Value::Null,
                ])
                .clone()
        }
        2 if !names.is_empty() => {
            let n = rng.pick(&names).clone();
            record["tensors"].as_object_mut().unwrap().remove(&n);
        }
        3 if !names.is_empty() => {
            let n = rng.pick(&names).clone();
            let stem = n
                .trim_end_matches("_blocks")
                .trim_end_matches("_scales")
                .to_string();
            let m = record["tensors"].as_object_mut().unwrap();
            m.remove(&format!("{stem}_blocks"));
            m.remove(&format!("{stem}_scales"));
        }
        4 | 5 if !names.is_empty() => {
            let n = rng.pick(&names).clone();
            let s = &mut record["tensors"][&n]["original_shape"];
            let mut dims: Vec<u64> = serde_json::from_value(s.clone()).unwrap();
            let d = rng.below(dims.len());
            dims[d] = match rng.below(6) {
                0 => dims[d] + 1,
                1 => dims[d].saturating_sub(1),
                2 => dims[d] * 2,
                3 => 8,
                4 => 0,
                _ => 1 << 62,
            };
            *s = json!(dims);
        }
        6 if !names.is_empty() => {
            let n = rng.pick(&names).clone();
            let r = &mut record["tensors"][&n];
            let k = r["k"].as_u64().unwrap();
            r["k"] = json!(*rng.pick(&[k + 32, k.saturating_sub(32), 0, k + 1, u64::MAX]));
        }
        7 if !names.is_empty() => {
            let n = rng.pick(&names).clone();
            let r = &mut record["tensors"][&n];
            let k = r["k_padded"].as_u64().unwrap();
            r["k_padded"] = json!(*rng.pick(&[k + 256, k.saturating_sub(256), 0, k + 32]));
        }
        8 if !names.is_empty() => {
            let n = rng.pick(&names).clone();
            record["tensors"][&n]["layout"] = rng
                .pick(&[
                    json!("b_5d_grouped"),
                    json!("scale_4d_grouped"),
                    json!("row_major"),
                    json!(7),
                ])
                .clone();
        }
        9 => record["extra"] = json!(true),
        10 => {
            raw = Some(
                rng.pick(&[
                    "",
                    "[]",
                    "null",
                    "{}",
                    "42",
                    "{\"version\":2",
                    "{\"version\":2,\"version\":2,\"original_has_metadata\":true,\"tensors\":{}}",
                ])
                .to_string(),
            )
        }
        11 => {
            record["original_has_metadata"] =
                rng.pick(&[json!(false), json!("yes"), Value::Null]).clone()
        }
        12 => {
            // A pair recorded but absent from the file.
            let (tn, kb) = (16, 2);
            record["tensors"]["ghost_blocks"] =
                json!({"layout":"b_5d_grouped","original_shape":[tn,kb,16],"k":64,"k_padded":256});
            record["tensors"]["ghost_scales"] =
                json!({"layout":"scale_4d_grouped","original_shape":[tn,kb],"k":64,"k_padded":256});
        }
        13 if !t.is_empty() => {
            // A recorded tensor renamed in the file (or a copied one).
            let i = rng.below(t.len());
            t[i].0 = format!("{}_renamed", t[i].0);
        }
        14 if !names.is_empty() => {
            let n = rng.pick(&names).clone();
            let i = t.iter().position(|s| s.0 == n).unwrap();
            t[i].1 = *rng.pick(&[Dtype::I8, Dtype::F8_E8M0, Dtype::BOOL]);
        }
        15 if !names.is_empty() => {
            // Same bytes, another shape.
            let n = rng.pick(&names).clone();
            let i = t.iter().position(|s| s.0 == n).unwrap();
            let len = t[i].3.len();
            t[i].2 = if rng.chance(2) {
                vec![len]
            } else {
                vec![len / 16, 16]
            };
        }
        16 if !names.is_empty() => {
            let n = rng.pick(&names).clone();
            t.retain(|s| s.0 != n);
        }
        17 => {
            // An unrecorded pair next to recorded ones.
            t.extend(pair(rng, "extra.w"));
        }
        18 => {
            let n = *rng.pick(&["rogue_blocks", "rogue_scales"]);
            t.push(spec(rng, n, Dtype::U8, &[16, 2, 16]));
        }
        19 => {
            // A record that is consistent, merely written differently: accepted.
            raw = Some(serde_json::to_string_pretty(&record).unwrap());
        }
        20 => {
            // The N = 8 reproducer: a pair the preshuffle could never have written.
            t.push(spec(rng, "n8_blocks", Dtype::U8, &[8, 8, 16]));
            t.push(spec(rng, "n8_scales", Dtype::U8, &[32, 8]));
            record["tensors"]["n8_blocks"] =
                json!({"layout":"b_5d_grouped","original_shape":[8,8,16],"k":256,"k_padded":256});
            record["tensors"]["n8_scales"] =
                json!({"layout":"scale_4d_grouped","original_shape":[8,8],"k":256,"k_padded":256});
        }
        _ => {
            meta.insert("other".into(), "entry".into());
        }
    }
    let text = raw.unwrap_or_else(|| record.to_string());
    meta.insert(METADATA_KEY.into(), text);
    Case::new(format!("forged record {what}"), serialize(&t, Some(meta)))
}

// ---------------------------------------------------------------------------------------------
// The suite

#[derive(Default)]
struct Tally {
    runs: usize,
    clean_errors: usize,
    successes: usize,
    round_trips: usize,
    failures: Vec<String>,
}

/// Runs `op` on the case with a precious output in place and checks the contract.
fn check_run(
    case: &Case,
    which: &str,
    extra: &[&str],
    dir: &Path,
    logs: &Path,
    tally: &Mutex<Tally>,
) {
    let input = dir.join("in.safetensors");
    let out = dir.join("out.safetensors");
    std::fs::write(&input, &case.bytes).unwrap();
    std::fs::write(&out, PRECIOUS).unwrap();
    let r = op(which, &input, &out, extra, logs);
    let mut problems = Vec::new();
    if let Some(why) = abnormal(&r) {
        problems.push(why);
    }
    if std::fs::read(&input).unwrap() != case.bytes {
        problems.push("the input changed".into());
    }
    let names = names_in(dir);
    if names != ["in.safetensors", "out.safetensors"] {
        problems.push(format!("directory holds {names:?}"));
    }
    let mut success = false;
    if let Ok(run) = &r {
        match run.status.code() {
            Some(1) => {
                if std::fs::read(&out).unwrap() != PRECIOUS {
                    problems.push("a refused run changed the output".into());
                }
                if !run.stderr.starts_with("error: ") || run.stderr.contains("panicked") {
                    problems.push(format!("unexpected message: {}", run.stderr));
                }
            }
            Some(0) => {
                success = true;
                let written = std::fs::read(&out).unwrap();
                if meaning(&written).is_none() {
                    problems.push("the output is not a valid safetensors file".into());
                } else if let Err(e) = round_trip(case, which, &written, dir, logs) {
                    problems.push(e);
                }
            }
            _ => {}
        }
    }
    if let (Some(log), Ok(run)) = (std::env::var_os("HOSTILE_LOG"), &r) {
        // HOSTILE_LOG=path: one line per run, to read what the refusals say.
        use std::io::Write;
        let line = format!(
            "{} | {which} {extra:?} | {:?} | {}\n",
            case.label,
            run.status.code(),
            run.stderr.lines().next().unwrap_or("")
        );
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .unwrap();
        let _ = f.write_all(line.as_bytes());
    }
    let mut t = tally.lock().unwrap();
    t.runs += 1;
    if !problems.is_empty() {
        t.failures.push(format!(
            "{} / {which} {extra:?}: {}",
            case.label,
            problems.join("; ")
        ));
    } else if success {
        t.successes += 1;
        t.round_trips += 1;
    } else {
        t.clean_errors += 1;
    }
}

/// After a success: the other command must take the output back exactly.
fn round_trip(
    case: &Case,
    which: &str,
    written: &[u8],
    dir: &Path,
    logs: &Path,
) -> Result<(), String> {
    let rt = dir.join("rt");
    std::fs::create_dir(&rt).map_err(|e| e.to_string())?;
    let step = |op_name: &str, from: &[u8], name: &str| -> Result<Vec<u8>, String> {
        let (a, b) = (
            rt.join(format!("{name}.in")),
            rt.join(format!("{name}.out")),
        );
        std::fs::write(&a, from).map_err(|e| e.to_string())?;
        let r = op(op_name, &a, &b, &[], logs)?;
        if !r.status.success() {
            return Err(format!("round trip {op_name} failed: {}", r.stderr));
        }
        std::fs::read(&b).map_err(|e| e.to_string())
    };
    let result = (|| {
        if which == "preshuffle" {
            let back = step("unshuffle", written, "u")?;
            if case.canonical {
                if back != case.bytes {
                    return Err("preshuffle + unshuffle is not byte-exact".into());
                }
            } else if meaning(&back) != meaning(&case.bytes) {
                return Err("preshuffle + unshuffle changed the tensors or metadata".into());
            }
        } else {
            if let Some(origin) = &case.origin
                && written != origin.as_slice()
            {
                return Err("unshuffle did not restore the original bytes".into());
            }
            // What unshuffle writes, preshuffle accepts, and the pair gives it back exactly.
            let pre = step("preshuffle", written, "p")?;
            let back = step("unshuffle", &pre, "u")?;
            if back != written {
                return Err("unshuffle output does not round-trip exactly".into());
            }
        }
        Ok(())
    })();
    let _ = std::fs::remove_dir_all(&rt);
    result
}

#[test]
fn hostile_inputs_are_refused_cleanly_or_round_trip() {
    let scratch = tempfile::tempdir().unwrap();
    let logs = scratch.path().join("logs");
    std::fs::create_dir(&logs).unwrap();
    let tally = Mutex::new(Tally::default());
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for worker in 0..2 {
            let (tally, next, scratch, logs) = (&tally, &next, scratch.path(), &logs);
            s.spawn(move || {
                let own = scratch.join(format!("gen{worker}"));
                std::fs::create_dir(&own).unwrap();
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= CASES {
                        break;
                    }
                    let case = case(i, &own);
                    let dir = scratch.join(format!("case{i}"));
                    std::fs::create_dir(&dir).unwrap();
                    check_run(&case, "preshuffle", &[], &dir, logs, tally);
                    // K not a multiple of 256 without padding: refused or fine, never half-done.
                    if i % 5 == 0 {
                        check_run(
                            &case,
                            "preshuffle",
                            &["--pad-k", "false"],
                            &dir,
                            logs,
                            tally,
                        );
                    }
                    check_run(&case, "unshuffle", &[], &dir, logs, tally);
                    let _ = std::fs::remove_dir_all(&dir);
                }
            });
        }
    });
    let t = tally.into_inner().unwrap();
    println!(
        "hostile safetensors: {CASES} cases, {} runs: {} clean errors, {} successes ({} round trips exact), {} failures",
        t.runs,
        t.clean_errors,
        t.successes,
        t.round_trips,
        t.failures.len()
    );
    assert!(
        t.failures.is_empty(),
        "{} of {} runs broke the contract:\n{}",
        t.failures.len(),
        t.runs,
        t.failures.join("\n")
    );
    // The generator must exercise both outcomes, or the suite proves little.
    assert!(
        t.successes > CASES / 10 && t.clean_errors > CASES,
        "{} {}",
        t.successes,
        t.clean_errors
    );
}

// ---------------------------------------------------------------------------------------------
// Regression tests of the reproducers

struct Scene {
    dir: tempfile::TempDir,
    logs: PathBuf,
}

impl Scene {
    fn new() -> Scene {
        let dir = tempfile::tempdir().unwrap();
        let logs = dir.path().join("logs");
        std::fs::create_dir(&logs).unwrap();
        Scene { dir, logs }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Leftover temporary files (everything hidden).
    fn leftovers(&self) -> Vec<String> {
        names_in(self.dir.path())
            .into_iter()
            .filter(|n| n.starts_with('.'))
            .collect()
    }

    /// `op input -o out` with a precious out; the run must be refused with status 1, keep
    /// out and leave nothing behind. Returns the message.
    fn refused(&self, which: &str, input: &[u8]) -> String {
        let (i, o) = (self.path("w.safetensors"), self.path("out.safetensors"));
        std::fs::write(&i, input).unwrap();
        std::fs::write(&o, PRECIOUS).unwrap();
        let r = op(which, &i, &o, &[], &self.logs).unwrap();
        assert_eq!(r.status.code(), Some(1), "{}", r.stderr);
        assert_eq!(std::fs::read(&o).unwrap(), PRECIOUS, "{}", r.stderr);
        assert_eq!(std::fs::read(&i).unwrap(), input);
        assert!(self.leftovers().is_empty(), "{:?}", self.leftovers());
        r.stderr
    }
}

/// A preshuffled file as a forger writes it: the tensors and the record given.
fn forge(tensors: &[Spec], record: Value) -> Vec<u8> {
    serialize(
        tensors,
        Some(HashMap::from([(
            METADATA_KEY.to_string(),
            record.to_string(),
        )])),
    )
}

fn n8_pair(rng: &mut Rng) -> Vec<Spec> {
    vec![
        spec(rng, "w_blocks", Dtype::U8, &[8, 8, 16]),
        spec(rng, "w_scales", Dtype::U8, &[32, 8]),
    ]
}

fn pair_record(version: u32, blocks: Value, scales: Value) -> Value {
    let mut r = json!({
        "version": version,
        "tensors": {
            "w_blocks": {"layout": "b_5d_grouped", "original_shape": blocks, "k": 256, "k_padded": 256},
            "w_scales": {"layout": "scale_4d_grouped", "original_shape": scales, "k": 256, "k_padded": 256},
        }
    });
    if version == 2 {
        r["original_has_metadata"] = json!(true);
    }
    r
}

#[test]
fn unshuffle_of_an_n8_pair_is_refused_naming_the_tensor_and_keeps_the_output() {
    let scene = Scene::new();
    let mut rng = Rng(8);
    for version in [1, 2] {
        let file = forge(
            &n8_pair(&mut rng),
            pair_record(version, json!([8, 8, 16]), json!([8, 8])),
        );
        let err = scene.refused("unshuffle", &file);
        assert!(err.contains("w_blocks"), "{err}");
        assert!(err.contains("multiple of 16"), "{err}");
        assert!(!err.contains("Unshuffle"), "{err}");
    }
}

#[test]
fn unshuffle_refuses_a_record_naming_one_tensor_of_a_pair() {
    let scene = Scene::new();
    let mut rng = Rng(1);
    let tensors = vec![
        spec(&mut rng, "w_blocks", Dtype::U8, &[16, 8, 16]),
        spec(&mut rng, "w_scales", Dtype::U8, &[32, 8]),
    ];
    let mut record = pair_record(2, json!([16, 8, 16]), json!([16, 8]));
    record["tensors"]
        .as_object_mut()
        .unwrap()
        .remove("w_blocks");
    let err = scene.refused("unshuffle", &forge(&tensors, record));
    assert!(
        err.contains("w_scales") && err.contains("w_blocks"),
        "{err}"
    );
    // Nothing recorded at all, yet a preshuffled-looking pair.
    let mut record = pair_record(2, json!([16, 8, 16]), json!([16, 8]));
    record["tensors"] = json!({});
    let err = scene.refused("unshuffle", &forge(&tensors, record));
    assert!(err.contains("does not list it"), "{err}");
    // The consistent record is accepted.
    let (i, o) = (scene.path("ok"), scene.path("ok.out"));
    std::fs::write(
        &i,
        forge(&tensors, pair_record(2, json!([16, 8, 16]), json!([16, 8]))),
    )
    .unwrap();
    let r = op("unshuffle", &i, &o, &[], &scene.logs).unwrap();
    assert!(r.status.success(), "{}", r.stderr);
}

#[test]
fn unshuffle_refuses_unknown_record_versions() {
    let scene = Scene::new();
    let mut rng = Rng(99);
    let tensors = vec![
        spec(&mut rng, "w_blocks", Dtype::U8, &[16, 8, 16]),
        spec(&mut rng, "w_scales", Dtype::U8, &[32, 8]),
    ];
    let mut record = pair_record(2, json!([16, 8, 16]), json!([16, 8]));
    record["version"] = json!(99);
    let err = scene.refused("unshuffle", &forge(&tensors, record));
    assert!(err.contains("version 99"), "{err}");
}

#[test]
fn unshuffle_refuses_records_disagreeing_on_n_and_k() {
    let scene = Scene::new();
    let mut rng = Rng(3);
    let tensors = vec![
        spec(&mut rng, "w_blocks", Dtype::U8, &[2, 32, 8, 16]),
        spec(&mut rng, "w_scales", Dtype::U8, &[2, 32, 8]),
    ];
    // The scales' record says N = 16, the blocks' N = 32.
    let err = scene.refused(
        "unshuffle",
        &forge(
            &tensors,
            pair_record(2, json!([2, 32, 8, 16]), json!([2, 16, 8])),
        ),
    );
    assert!(
        err.contains("w_scales") && err.contains("[2, 16, 8]"),
        "{err}"
    );
    // K: the blocks' record says K = 256, the scales' K = 224.
    let mut record = pair_record(2, json!([2, 32, 8, 16]), json!([2, 32, 7]));
    record["tensors"]["w_scales"]["k"] = json!(224);
    let err = scene.refused("unshuffle", &forge(&tensors, record));
    assert!(err.contains("w_scales"), "{err}");
    // Consistent with each other, not with the tensors: N = 48 recorded, 32 stored.
    let err = scene.refused(
        "unshuffle",
        &forge(
            &tensors,
            pair_record(2, json!([2, 48, 8, 16]), json!([2, 48, 8])),
        ),
    );
    assert!(
        err.contains("w_blocks") && err.contains("has shape"),
        "{err}"
    );
}

#[test]
fn round_trip_without_metadata_is_byte_exact() {
    let scene = Scene::new();
    let mut rng = Rng(5);
    let mut tensors = pair(&mut rng, "a.w");
    tensors.push(spec(&mut rng, "bias", Dtype::F32, &[7]));
    for meta in [None, Some(HashMap::new())] {
        let original = serialize(&tensors, meta);
        let (i, pre, back) = (scene.path("i"), scene.path("p"), scene.path("b"));
        std::fs::write(&i, &original).unwrap();
        let r = op("preshuffle", &i, &pre, &[], &scene.logs).unwrap();
        assert!(r.status.success(), "{}", r.stderr);
        let r = op("unshuffle", &pre, &back, &[], &scene.logs).unwrap();
        assert!(r.status.success(), "{}", r.stderr);
        assert_eq!(std::fs::read(&back).unwrap(), original);
    }
}

#[test]
fn an_unusable_output_is_reported_before_the_input_is_read() {
    let scene = Scene::new();
    let garbage = scene.path("garbage");
    std::fs::write(&garbage, b"not safetensors at all").unwrap();
    for which in ["preshuffle", "unshuffle"] {
        let r = op(which, &garbage, scene.dir.path(), &[], &scene.logs).unwrap();
        assert_eq!(r.status.code(), Some(1));
        assert!(r.stderr.contains("is a directory"), "{}", r.stderr);
        let r = op(
            which,
            &garbage,
            &scene.path("no/such/out"),
            &[],
            &scene.logs,
        )
        .unwrap();
        assert!(r.stderr.contains("does not exist"), "{}", r.stderr);
    }
    assert!(scene.leftovers().is_empty());
}

#[test]
fn a_symlinked_output_is_written_through() {
    let scene = Scene::new();
    let mut rng = Rng(11);
    let input = scene.path("in");
    std::fs::write(&input, serialize(&pair(&mut rng, "w"), None)).unwrap();
    let real = scene.path("real.safetensors");
    std::fs::write(&real, PRECIOUS).unwrap();
    let link = scene.path("link.safetensors");
    std::os::unix::fs::symlink("real.safetensors", &link).unwrap();
    let r = op("preshuffle", &input, &link, &[], &scene.logs).unwrap();
    assert!(r.status.success(), "{}", r.stderr);
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(meaning(&std::fs::read(&real).unwrap()).is_some());
    // A link to the input is the input.
    let to_input = scene.path("to_input");
    std::os::unix::fs::symlink("in", &to_input).unwrap();
    let r = op("preshuffle", &input, &to_input, &[], &scene.logs).unwrap();
    assert_eq!(r.status.code(), Some(1));
    assert!(
        r.stderr.contains("refusing to overwrite the input"),
        "{}",
        r.stderr
    );
    assert!(scene.leftovers().is_empty());
}

#[test]
fn output_modes_follow_the_umask_or_the_replaced_file() {
    let scene = Scene::new();
    let mut rng = Rng(22);
    let input = scene.path("in");
    std::fs::write(&input, serialize(&pair(&mut rng, "w"), None)).unwrap();
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    for (mask, want) in [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)] {
        let out = scene.path(&format!("out{mask:o}"));
        let args: [&Path; 4] = [p("preshuffle"), &input, p("-o"), &out];
        let r = tilegen(&args, &scene.logs, Some(mask)).unwrap();
        assert!(r.status.success(), "{}", r.stderr);
        assert_eq!(mode(&out), want, "umask {mask:o}");
    }
    // A replaced file keeps its mode, whatever the umask.
    let kept = scene.path("kept");
    std::fs::write(&kept, PRECIOUS).unwrap();
    std::fs::set_permissions(&kept, std::fs::Permissions::from_mode(0o640)).unwrap();
    let args: [&Path; 4] = [p("preshuffle"), &input, p("-o"), &kept];
    let r = tilegen(&args, &scene.logs, Some(0o077)).unwrap();
    assert!(r.status.success(), "{}", r.stderr);
    assert_eq!(mode(&kept), 0o640);
}

/// A ~220 MB input: eight expert pairs, so the write takes long enough to be caught mid-way.
fn big_input(path: &Path) {
    let (e, n, kb) = (8usize, 1024usize, 200usize);
    let mut rng = Rng(77);
    let mut tensors = Vec::new();
    for l in 0..8 {
        // Cheap bytes: the content does not matter, only the size.
        let seed = rng.next() as u8;
        let blocks: Vec<u8> = (0..e * n * kb * 16)
            .map(|i| (i as u8).wrapping_mul(73) ^ seed)
            .collect();
        tensors.push(Spec(
            format!("l{l}.w_blocks"),
            Dtype::U8,
            vec![e, n, kb, 16],
            blocks,
        ));
        tensors.push(spec(
            &mut rng,
            &format!("l{l}.w_scales"),
            Dtype::U8,
            &[e, n, kb],
        ));
    }
    let views: Vec<(String, TensorView<'_>)> = tensors
        .iter()
        .map(|Spec(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
}

/// Starts a big preshuffle, sends `signal` once its temporary file is being filled, and checks
/// that the run stops with status 128 + the signal (as shells report it), the precious output
/// intact and no temporary file left.
fn interrupt_mid_write(signal: libc::c_int) {
    let scene = Scene::new();
    let input = scene.path("big.safetensors");
    big_input(&input);
    let out = scene.path("out.safetensors");
    std::fs::write(&out, PRECIOUS).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .arg("preshuffle")
        .arg(&input)
        .arg("-o")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut sent = false;
    while start.elapsed() < TIMEOUT {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        let temp_size = std::fs::read_dir(scene.dir.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tilegen-tmp"))
            .filter_map(|e| e.metadata().ok())
            .map(|m| m.len())
            .max();
        if temp_size.is_some_and(|s| s > 0) {
            // SAFETY: signalling our own child, which has not been reaped.
            assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
            sent = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    eprintln!("stopped after {:?}: {stderr}", start.elapsed());
    assert!(
        sent,
        "the preshuffle ended before its temporary file grew: {stderr}"
    );
    assert_eq!(
        output.status.signal(),
        None,
        "killed by the signal: {stderr}"
    );
    assert_eq!(output.status.code(), Some(128 + signal), "{stderr}");
    assert_eq!(std::fs::read(&out).unwrap(), PRECIOUS);
    assert!(scene.leftovers().is_empty(), "{:?}", scene.leftovers());
}

#[test]
fn sigterm_mid_write_leaves_no_temporary_file_and_the_output_intact() {
    interrupt_mid_write(libc::SIGTERM);
}

#[test]
fn sigint_mid_write_leaves_no_temporary_file_and_the_output_intact() {
    interrupt_mid_write(libc::SIGINT);
}
