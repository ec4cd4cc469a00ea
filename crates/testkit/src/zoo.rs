//! The foreign kernel zoo: Triton kernels with inputs and expected outputs
//! (`scripts/triton/zoo.py`), described by `target/foreign/zoo/<case>/case.json`.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{corpus_available, foreign_dir};

/// One zoo case: a kernel, its launch and its arguments with the expected outputs.
#[derive(Debug, Clone)]
pub struct ZooCase {
    /// Case name (its directory name).
    pub name: String,
    /// Directory holding its files.
    pub dir: PathBuf,
    /// `kernel.hsaco`.
    pub hsaco: PathBuf,
    /// `kernel.s` (Triton's own listing).
    pub asm: PathBuf,
    /// Kernel symbol.
    pub kernel: String,
    /// Workgroups.
    pub grid: [u32; 3],
    /// Work-items per workgroup.
    pub block: [u32; 3],
    /// LDS bytes to allocate at launch (Triton's shared memory is dynamic).
    pub dynamic_lds: u32,
    /// What the kernel exercises, in words.
    pub features: String,
    /// Explicit kernel arguments, in order.
    pub args: Vec<ZooArg>,
    /// Text that the emulator's failure on this case contains: a known emulator bug, recorded
    /// so that the case keeps running and a fix is noticed.
    pub known_failure: Option<String>,
}

/// One explicit kernel argument of a [`ZooCase`].
#[derive(Debug, Clone, PartialEq)]
pub enum ZooArg {
    /// A buffer initialised from this file.
    In(PathBuf),
    /// A zeroed buffer the kernel writes, compared with the expected file afterwards.
    Out(ZooOut),
    /// A 32-bit integer.
    I32(i32),
    /// A 64-bit integer.
    I64(i64),
    /// A 32-bit float.
    F32(f32),
    /// A null pointer (Triton's unused scratch pointers).
    Null,
}

/// An output buffer and how to judge it.
#[derive(Debug, Clone, PartialEq)]
pub struct ZooOut {
    /// The expected contents.
    pub expected: PathBuf,
    /// Buffer size in bytes (the expected file's size).
    pub bytes: usize,
    /// Element type.
    pub dtype: ZooDtype,
    /// Relative tolerance: an element matches when `|got - want| <= atol + rtol * |want|`.
    pub rtol: f64,
    /// Absolute tolerance. `rtol == atol == 0` means bit-identical (NaN still matches NaN).
    pub atol: f64,
}

impl ZooOut {
    /// Whether only bit-identical results pass.
    pub fn exact(&self) -> bool {
        self.rtol == 0.0 && self.atol == 0.0
    }
}

/// Element type of an output buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZooDtype {
    /// IEEE binary32.
    F32,
    /// IEEE binary64.
    F64,
    /// IEEE binary16.
    F16,
    /// bfloat16.
    Bf16,
    /// Signed 8-bit integer.
    I8,
    /// Unsigned 8-bit integer (also raw FP8 codes).
    U8,
    /// Signed 16-bit integer.
    I16,
    /// Unsigned 16-bit integer.
    U16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 32-bit integer.
    U32,
    /// Signed 64-bit integer.
    I64,
    /// Unsigned 64-bit integer.
    U64,
}

impl ZooDtype {
    /// The name case.json uses (`f32`, `bf16`, `i64`, ...).
    pub fn parse(name: &str) -> Option<Self> {
        use ZooDtype::*;
        Some(match name {
            "f32" => F32,
            "f64" => F64,
            "f16" => F16,
            "bf16" => Bf16,
            "i8" => I8,
            "u8" => U8,
            "i16" => I16,
            "u16" => U16,
            "i32" => I32,
            "u32" => U32,
            "i64" => I64,
            "u64" => U64,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        use ZooDtype::*;
        match self {
            I8 | U8 => 1,
            F16 | Bf16 | I16 | U16 => 2,
            F32 | I32 | U32 => 4,
            F64 | I64 | U64 => 8,
        }
    }

    /// Whether elements are floating point.
    pub fn is_float(self) -> bool {
        matches!(
            self,
            ZooDtype::F32 | ZooDtype::F64 | ZooDtype::F16 | ZooDtype::Bf16
        )
    }
}

/// The zoo's directory: `<foreign_dir>/zoo`. It sits below the MXFP4 corpus, whose scan looks
/// one level deep for `kernel.hsaco` and so never sees it.
pub fn zoo_dir() -> PathBuf {
    foreign_dir().join("zoo")
}

/// The zoo's cases in the order zoo.py lists them, or `None` after a loud SKIP when setup
/// recorded that PyPI was unreachable. Panics (fails the test) when the zoo was never made or
/// is incomplete (zoo.py writes `cases.json` last).
pub fn zoo_cases() -> Option<Vec<ZooCase>> {
    if !corpus_available() {
        return None;
    }
    let dir = zoo_dir();
    let manifest = dir.join("cases.json");
    let text = std::fs::read_to_string(&manifest).unwrap_or_else(|e| {
        panic!(
            "the foreign kernel zoo is missing or incomplete ({}: {e}): run `cargo xtask setup`",
            manifest.display()
        )
    });
    let manifest_json: Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let names = manifest_json["cases"]
        .as_array()
        .unwrap_or_else(|| panic!("{}: no `cases` list", manifest.display()));
    let cases: Vec<ZooCase> = names
        .iter()
        .map(|n| {
            let n = n
                .as_str()
                .unwrap_or_else(|| panic!("{}: case names are strings", manifest.display()));
            parse_case(&dir.join(n))
        })
        .collect();
    assert!(
        !cases.is_empty(),
        "{} lists no cases: run `cargo xtask setup`",
        manifest.display()
    );
    Some(cases)
}

/// Parses `dir/case.json`; a malformed file panics naming the file and the field.
fn parse_case(dir: &Path) -> ZooCase {
    let file = dir.join("case.json");
    let bad = |what: &str| -> ! { panic!("{}: {what}", file.display()) };
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| bad(&e.to_string()));
    let v: Value = serde_json::from_str(&text).unwrap_or_else(|e| bad(&e.to_string()));
    let u32s = |key: &str| -> [u32; 3] {
        let a = v[key]
            .as_array()
            .filter(|a| a.len() == 3)
            .unwrap_or_else(|| bad(&format!("`{key}` is not 3 integers")));
        let mut out = [0; 3];
        for (o, x) in out.iter_mut().zip(a) {
            *o = x
                .as_u64()
                .and_then(|x| u32::try_from(x).ok())
                .unwrap_or_else(|| bad(&format!("`{key}` is not 3 integers")));
        }
        out
    };
    let string = |key: &str| -> String {
        v[key]
            .as_str()
            .unwrap_or_else(|| bad(&format!("no string `{key}`")))
            .to_string()
    };
    let args = v["args"]
        .as_array()
        .unwrap_or_else(|| bad("no `args` list"))
        .iter()
        .enumerate()
        .map(|(i, a)| parse_arg(dir, a).unwrap_or_else(|e| bad(&format!("argument {i}: {e}"))))
        .collect();
    ZooCase {
        name: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        hsaco: dir.join("kernel.hsaco"),
        asm: dir.join("kernel.s"),
        kernel: string("kernel"),
        grid: u32s("grid"),
        block: u32s("block"),
        dynamic_lds: v["dynamic_lds"]
            .as_u64()
            .and_then(|x| u32::try_from(x).ok())
            .unwrap_or_else(|| bad("no integer `dynamic_lds`")),
        features: string("features"),
        args,
        known_failure: v["known_failure"].as_str().map(str::to_string),
        dir: dir.to_path_buf(),
    }
}

fn parse_arg(dir: &Path, a: &Value) -> Result<ZooArg, String> {
    let obj = a.as_object().ok_or("not an object")?;
    let (kind, val) = match obj.iter().next() {
        Some(kv) if obj.len() == 1 => kv,
        _ => return Err(format!("expected one key, got {a}")),
    };
    let int = || {
        val.as_i64()
            .ok_or_else(|| format!("`{kind}` needs an integer"))
    };
    Ok(match kind.as_str() {
        "in" => ZooArg::In(dir.join(val.as_str().ok_or("`in` needs a file name")?)),
        "out" => {
            let file = val["file"].as_str().ok_or("`out` needs `file`")?;
            let dtype = val["dtype"].as_str().ok_or("`out` needs `dtype`")?;
            let num = |k: &str| val[k].as_f64().ok_or(format!("`out` needs a number `{k}`"));
            let out = ZooOut {
                expected: dir.join(file),
                bytes: val["bytes"].as_u64().ok_or("`out` needs `bytes`")? as usize,
                dtype: ZooDtype::parse(dtype).ok_or(format!("unknown dtype `{dtype}`"))?,
                rtol: num("rtol")?,
                atol: num("atol")?,
            };
            if !out.bytes.is_multiple_of(out.dtype.size()) {
                return Err(format!(
                    "{} bytes is not a whole number of {dtype}",
                    out.bytes
                ));
            }
            ZooArg::Out(out)
        }
        "i32" => ZooArg::I32(i32::try_from(int()?).map_err(|e| e.to_string())?),
        "i64" => ZooArg::I64(int()?),
        "f32" => ZooArg::F32(val.as_f64().ok_or("`f32` needs a number")? as f32),
        "null" => ZooArg::Null,
        _ => return Err(format!("unknown argument kind `{kind}`")),
    })
}
