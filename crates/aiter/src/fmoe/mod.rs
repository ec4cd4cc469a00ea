//! AITER's FP8 fused-MoE stage-1 asm kernels (`fmoe_stage1_bf16_pertokenFp8_[doweight_]g1u1`)
//! and their MI355X-measured times: a second measured kernel family, after f4gemm.
//!
//! Stage 1 of AITER's 2-stage fused MoE computes, for every (token, top-k slot) pair routed to
//! an expert, `act(x W_gate^T) * (x W_up^T)` (times the slot's routing weight for the doweight
//! kernels) from FP8 activations and weights with per-row f32 scales, into bf16
//! `[tokens, topk, inter_dim]`. A workgroup takes one block of `block_m` rows of the sorted
//! token list (all one expert's) and `tile_n` intermediate columns of both gate and up.
//!
//! * [`FmoeCorpus`]: the two stage-1 indexes ([`FmoeKernel`]) and the tuned table's rows that
//!   used them ([`FmoeRow`]).
//! * [`FmoeProblem`], [`FmoeLaunch`]: the launch AITER's `moe_stage1_g1u1` makes: grid,
//!   buffers and the 368-byte argument block ([`FmoeField`] documents each field and its unit).
//! * [`Routing`], [`SortedRouting`]: the tuner's routing and `moe_sorting`'s lists.
//! * [`FmoeInputs`]: data in the kernels' layouts and the CPU reference.
//! * [`model`]: the timing model on every row, with the error statistics by regime and tile.
//!
//! Limits: only unsplit launches (`ksplit = 0`, all the table's rows), bf16 output, FP8 inputs.

mod error;
mod inputs;
mod kernargs;
mod kernel;
pub mod model;
mod routing;
mod table;

use std::path::{Path, PathBuf};

pub use error::FmoeError;
pub(crate) use error::problem;
pub use inputs::{FmoeInputs, activation, shuffle_weight};
pub use kernargs::{
    Activation, BLOCK, FmoeBuffer, FmoeField, FmoeLaunch, FmoePointers, FmoeProblem, KERNARG_BYTES,
    MAX_TOKENS, MAX_TOPK, SHUFFLE_K, SHUFFLE_N,
};
pub use kernel::{FMOE_DIR, FMOE_DOWEIGHT_INDEX, FMOE_INDEX, FmoeImage, FmoeKernel};
pub use routing::{Routing, SortedRouting};
pub use table::{FMOE_TUNED_TABLE, FmoeRow, QuantType, STAGE1_ASM_FAMILY, STAGE1_ASM_PREFIX};

use crate::corpus::{Corpus, CorpusStatus, status};
use crate::error::AiterError;

/// Compute units of an MI355X: the table's rows measured on it.
pub const MI355X_CUS: u32 = 256;

/// The fused-MoE part of the AITER corpus.
#[derive(Debug, Clone)]
pub struct FmoeCorpus {
    dir: PathBuf,
    kernels: Vec<FmoeKernel>,
}

impl FmoeCorpus {
    /// Opens the corpus in `dir` (setup must have said `ok`) and reads both stage-1 indexes.
    pub fn open(dir: impl AsRef<Path>) -> Result<FmoeCorpus, FmoeError> {
        let dir = dir.as_ref().to_path_buf();
        match status(&dir) {
            CorpusStatus::Ready => {}
            CorpusStatus::Unavailable(reason) => {
                return Err(AiterError::CorpusUnavailable { dir, reason }.into());
            }
            CorpusStatus::Missing => return Err(AiterError::CorpusMissing { dir }.into()),
        }
        let kdir = dir.join(FMOE_DIR);
        let mut kernels = kernel::parse_index(&kdir.join(FMOE_INDEX), &kdir, false)?;
        kernels.extend(kernel::parse_index(
            &kdir.join(FMOE_DOWEIGHT_INDEX),
            &kdir,
            true,
        )?);
        Ok(FmoeCorpus { dir, kernels })
    }

    /// Opens the corpus at [`crate::default_dir`].
    pub fn open_default() -> Result<FmoeCorpus, FmoeError> {
        FmoeCorpus::open(crate::default_dir())
    }

    /// The corpus of the f4gemm family in the same directory.
    pub fn gemm_corpus(&self) -> Result<Corpus, AiterError> {
        Corpus::open(&self.dir)
    }

    /// The corpus directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every stage-1 kernel: the plain index, then the doweight index.
    pub fn kernels(&self) -> &[FmoeKernel] {
        &self.kernels
    }

    /// The kernel with this symbol.
    pub fn kernel_by_symbol(&self, symbol: &str) -> Option<&FmoeKernel> {
        self.kernels.iter().find(|k| k.symbol() == symbol)
    }

    /// The tuned table's FP8 stage-1 asm rows measured on an MI355X.
    pub fn rows(&self) -> Result<Vec<FmoeRow>, FmoeError> {
        table::parse_table(&self.dir.join(FMOE_TUNED_TABLE), MI355X_CUS)
    }
}
