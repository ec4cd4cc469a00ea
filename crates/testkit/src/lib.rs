//! Test support: where the foreign code-object corpus lives and what to do when it is missing;
//! running the binary under a memory cap and a deadline.
//!
//! `cargo xtask setup` compiles MXFP4 GEMM kernels with Triton (a compiler independent of this
//! project) into `target/foreign/<config>/{kernel.hsaco, kernel.s, meta.json}`, the kernel zoo
//! (`scripts/triton/zoo.py`: assorted kernels with inputs and expected outputs) into
//! `target/foreign/zoo/<case>/`, and writes `target/foreign/STATUS`: `ok`, or
//! `unavailable: <reason>` when PyPI could not be reached. Tests that need the corpus fail in
//! that case too, unless `TILEGEN_ALLOW_SKIP=1` is set (then they skip loudly); a missing corpus
//! is always a failure, with the command that makes it.
#![deny(missing_docs)]

mod child;
pub mod kernels;
pub mod llvm;
mod zoo;

use std::path::{Path, PathBuf};

pub use child::{Ending, Outcome, run_capped};
pub use zoo::{ZooArg, ZooCase, ZooDtype, ZooOut, zoo_cases, zoo_dir};

/// One compiled foreign kernel.
#[derive(Debug, Clone)]
pub struct ForeignKernel {
    /// Directory holding its files.
    pub dir: PathBuf,
    /// `kernel.hsaco`.
    pub hsaco: PathBuf,
    /// `kernel.s` (the compiler's own listing).
    pub asm: PathBuf,
    /// `meta.json`.
    pub meta: serde_json::Value,
}

impl ForeignKernel {
    /// Configuration name (the directory name).
    pub fn name(&self) -> String {
        self.dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// How to launch this MXFP4 GEMM (`scripts/triton/mxfp4_gemm.py`) on an `m x n x k`
    /// problem: A `[M, K/2]`, B `[N, K/2]`, scales `[M, K/32]` / `[N, K/32]`, C `[M, N]` bf16, all
    /// row-major. The kernel's arguments are the five pointers (A, B, A scales, B scales, C),
    /// then [`TritonGemmLaunch::scalars`], then Triton's two scratch pointers (null).
    pub fn gemm_launch(&self, m: usize, n: usize, k: usize) -> TritonGemmLaunch {
        let (bm, bn) = (self.meta_u64("bm") as usize, self.meta_u64("bn") as usize);
        TritonGemmLaunch {
            kernel: self.meta["kernel"]
                .as_str()
                .unwrap_or("mxfp4_gemm")
                .to_string(),
            grid: [m.div_ceil(bm) as u32, n.div_ceil(bn) as u32, 1],
            block: [self.meta_u64("block_threads") as u32, 1, 1],
            dynamic_lds: self.meta_u64("lds_bytes") as u32,
            scalars: [m, n, k, k / 2, k / 2, k / 32, k / 32, n].map(|v| v as i32),
        }
    }

    /// An integer field of `meta.json`.
    pub fn meta_u64(&self, key: &str) -> u64 {
        self.meta[key]
            .as_u64()
            .unwrap_or_else(|| panic!("{}: meta.json has no integer {key}", self.dir.display()))
    }
}

/// Launch parameters of a foreign MXFP4 GEMM (see [`ForeignKernel::gemm_launch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TritonGemmLaunch {
    /// Kernel symbol.
    pub kernel: String,
    /// Workgroups.
    pub grid: [u32; 3],
    /// Work-items per workgroup.
    pub block: [u32; 3],
    /// LDS bytes to allocate at launch (Triton's shared memory is dynamic).
    pub dynamic_lds: u32,
    /// M, N, K and the four row strides (A, B, A scales, B scales, C).
    pub scalars: [i32; 8],
}

/// The corpus directory: `TILEGEN_FOREIGN_DIR`, else `<workspace>/target/foreign`.
pub fn foreign_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TILEGEN_FOREIGN_DIR") {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/foreign")
}

/// The environment variable that lets tests needing an unavailable corpus skip (CI never sets it).
pub const ALLOW_SKIP: &str = "TILEGEN_ALLOW_SKIP";

fn allow_skip() -> bool {
    std::env::var_os(ALLOW_SKIP).is_some_and(|v| v == "1")
}

/// The foreign kernels, or `None` after printing a loud SKIP when setup recorded that PyPI was
/// unreachable. Panics (fails the test) when the corpus was never made.
pub fn foreign_kernels() -> Option<Vec<ForeignKernel>> {
    if !corpus_available() {
        return None;
    }
    let dir = foreign_dir();
    let mut out = Vec::new();
    let entries =
        std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()));
    for entry in entries.flatten() {
        let d = entry.path();
        // One level deep only: `zoo/` has no kernel.hsaco of its own, so the zoo is not here.
        let hsaco = d.join("kernel.hsaco");
        if !hsaco.exists() {
            continue;
        }
        let meta = std::fs::read_to_string(d.join("meta.json"))
            .unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        let meta = serde_json::from_str(&meta).unwrap_or_else(|e| panic!("{}: {e}", d.display()));
        out.push(ForeignKernel {
            asm: d.join("kernel.s"),
            hsaco,
            dir: d,
            meta,
        });
    }
    out.sort_by_key(|k| k.name());
    assert!(
        !out.is_empty(),
        "{} holds no kernels: run `cargo xtask setup`",
        dir.display()
    );
    Some(out)
}

/// Whether setup made the corpus: false after printing a loud SKIP when it recorded that PyPI
/// was unreachable; panics (fails the test) when setup never ran.
fn corpus_available() -> bool {
    let dir = foreign_dir();
    let status = std::fs::read_to_string(dir.join("STATUS")).unwrap_or_default();
    if let Some(reason) = status.trim().strip_prefix("unavailable:") {
        // A skipped peer test is a failure unless the person running the tests said otherwise.
        assert!(
            allow_skip(),
            "the Triton corpus is unavailable ({}); set {ALLOW_SKIP}=1 to skip the tests that need it",
            reason.trim()
        );
        eprintln!(
            "\n!!!!!!!! SKIPPED ({ALLOW_SKIP}=1): the Triton corpus is unavailable ({}) !!!!!!!!\n",
            reason.trim()
        );
        return false;
    }
    assert!(
        status.trim() == "ok",
        "the foreign code-object corpus is missing at {}: run `cargo xtask setup`",
        dir.display()
    );
    true
}
