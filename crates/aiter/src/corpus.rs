//! Where the corpus lives and what `cargo xtask setup` left there.
//!
//! Setup downloads AMD's `amd-aiter` wheel (MIT licensed) and extracts, under the wheel's own
//! paths, the gfx950 f4gemm code objects with their index and the a4w4 GEMM tables into
//! `target/aiter/` (never committed), then writes `STATUS`: `ok`, or `unavailable: <reason>`
//! when PyPI could not be reached.

use std::path::{Path, PathBuf};

use crate::error::AiterError;
use crate::kernel::{F4GemmKernel, parse_index};
use crate::table::{Shape, TableRow, parse_tuned, parse_untuned};

/// Environment variable that overrides the corpus directory.
pub const CORPUS_DIR_ENV: &str = "TILEGEN_AITER_DIR";
/// The file setup writes last: `ok` or `unavailable: <reason>`.
pub const STATUS_FILE: &str = "STATUS";
/// The gfx950 f4gemm code objects, as the wheel lays them out.
pub const KERNEL_DIR: &str = "aiter_meta/hsa/gfx950/f4gemm";
/// The kernel index, inside [`KERNEL_DIR`].
pub const INDEX_FILE: &str = "f4gemm_bf16_per1x32Fp4.csv";
/// The tuned table: measured time of the best kernel per GPU and shape.
pub const TUNED_TABLE: &str = "aiter/configs/a4w4_blockscale_tuned_gemm.csv";
/// The untuned shape list.
pub const UNTUNED_TABLE: &str = "aiter/configs/a4w4_blockscale_untuned_gemm.csv";

/// What setup left in a corpus directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CorpusStatus {
    /// The corpus is extracted.
    Ready,
    /// Setup could not download it; the reason it recorded.
    Unavailable(String),
    /// Setup never ran here.
    Missing,
}

/// The extracted corpus: its directory and the kernel index.
#[derive(Debug, Clone)]
pub struct Corpus {
    dir: PathBuf,
    kernels: Vec<F4GemmKernel>,
}

/// The default corpus directory: `$TILEGEN_AITER_DIR`, else `<workspace>/target/aiter`.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os(CORPUS_DIR_ENV) {
        return PathBuf::from(d);
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/aiter")
}

/// What setup left in `dir`.
pub fn status(dir: &Path) -> CorpusStatus {
    match std::fs::read_to_string(dir.join(STATUS_FILE)) {
        Ok(s) if s.trim() == "ok" => CorpusStatus::Ready,
        Ok(s) => match s.trim().strip_prefix("unavailable:") {
            Some(reason) => CorpusStatus::Unavailable(reason.trim().to_string()),
            None => CorpusStatus::Missing,
        },
        Err(_) => CorpusStatus::Missing,
    }
}

impl Corpus {
    /// Opens the corpus in `dir` (it must say `ok`) and reads the kernel index.
    pub fn open(dir: impl AsRef<Path>) -> Result<Corpus, AiterError> {
        let dir = dir.as_ref().to_path_buf();
        match status(&dir) {
            CorpusStatus::Ready => {}
            CorpusStatus::Unavailable(reason) => {
                return Err(AiterError::CorpusUnavailable { dir, reason });
            }
            CorpusStatus::Missing => return Err(AiterError::CorpusMissing { dir }),
        }
        let kernel_dir = dir.join(KERNEL_DIR);
        let kernels = parse_index(&kernel_dir.join(INDEX_FILE), &kernel_dir)?;
        Ok(Corpus { dir, kernels })
    }

    /// Opens the corpus in [`default_dir`].
    pub fn open_default() -> Result<Corpus, AiterError> {
        Corpus::open(default_dir())
    }

    /// The corpus directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every kernel of the index, in index order.
    pub fn kernels(&self) -> &[F4GemmKernel] {
        &self.kernels
    }

    /// The BpreShuffle kernels (those whose B and scales are preshuffled).
    pub fn bpreshuffle_kernels(&self) -> impl Iterator<Item = &F4GemmKernel> {
        self.kernels.iter().filter(|k| k.bpreshuffle())
    }

    /// The kernel with this symbol.
    pub fn kernel_by_symbol(&self, symbol: &str) -> Option<&F4GemmKernel> {
        self.kernels.iter().find(|k| k.symbol() == symbol)
    }

    /// Every row of the tuned table (all GPUs, asm and CK kernels).
    pub fn tuned_table(&self) -> Result<Vec<TableRow>, AiterError> {
        parse_tuned(&self.dir.join(TUNED_TABLE))
    }

    /// The untuned shape list.
    pub fn untuned_shapes(&self) -> Result<Vec<Shape>, AiterError> {
        parse_untuned(&self.dir.join(UNTUNED_TABLE))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_open_follow_the_status_file() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(status(dir.path()), CorpusStatus::Missing);
        assert!(matches!(
            Corpus::open(dir.path()),
            Err(AiterError::CorpusMissing { .. })
        ));
        std::fs::write(
            dir.path().join(STATUS_FILE),
            "unavailable: PyPI unreachable\n",
        )
        .unwrap();
        assert_eq!(
            status(dir.path()),
            CorpusStatus::Unavailable("PyPI unreachable".into())
        );
        let e = Corpus::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains("PyPI unreachable"), "{e}");
        std::fs::write(dir.path().join(STATUS_FILE), "garbage").unwrap();
        assert_eq!(status(dir.path()), CorpusStatus::Missing);
        std::fs::write(dir.path().join(STATUS_FILE), "ok\n").unwrap();
        // Ready, but no index: the read error names the file.
        let e = Corpus::open(dir.path()).unwrap_err();
        assert!(e.to_string().contains(INDEX_FILE), "{e}");
        let kdir = dir.path().join(KERNEL_DIR);
        std::fs::create_dir_all(&kdir).unwrap();
        std::fs::write(
            kdir.join(INDEX_FILE),
            "tile_m,tile_n,splitK,bpreshuffle,knl_name,co_name\n\
             256,256,0,0,_ZN5aiterNoE,no.co\n32,128,0,1,_ZN5aiterYesE,yes.co\n",
        )
        .unwrap();
        let c = Corpus::open(dir.path()).unwrap();
        assert_eq!(c.kernels().len(), 2);
        assert_eq!(c.bpreshuffle_kernels().count(), 1);
        assert_eq!(
            c.kernel_by_symbol("_ZN5aiterYesE").unwrap().path(),
            kdir.join("yes.co")
        );
        assert!(c.kernel_by_symbol("nope").is_none());
        assert!(matches!(c.tuned_table(), Err(AiterError::Csv { .. })));
    }
}
