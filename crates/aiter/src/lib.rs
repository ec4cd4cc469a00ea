//! AMD AITER's hand-written gfx950 MXFP4 GEMM kernels ("f4gemm") and AMD's MI355X-measured
//! times for them, as a foreign corpus: evidence the emulator and the timing model are checked
//! against, never committed (`cargo xtask setup` extracts it from the MIT-licensed `amd-aiter`
//! wheel into `target/aiter/`).
//!
//! * [`Corpus`]: where the corpus is ([`default_dir`], `TILEGEN_AITER_DIR`), the kernel index
//!   ([`F4GemmKernel`]) and the tuned table ([`TableRow`]).
//! * [`GemmProblem`] and [`GemmLaunch`]: a problem bound to a kernel — grid, buffers, and the
//!   384-byte argument block ([`Field`] documents what the kernels read and in which units).
//! * [`GemmInputs`]: A, and B and the scales in the preshuffled, padded layouts the kernels read.
//! * [`LaunchDescription`]: a launch with its buffers described by size, for consumers that
//!   allocate their own memory (the timing model).
//! * [`calibrate`]: predictors of kernel time against the measured table, with a fixed
//!   calibration / held-out split; timing the kernels on a device and refitting the model on
//!   those times ([`calibrate::device`]); [`write_tuned`] writes a device's measurements in the
//!   tuned table's format.
//! * [`fmoe`]: a second measured family, AITER's FP8 fused-MoE stage-1 asm kernels: index,
//!   tuned rows, launch, routing, inputs and the timing model on every row.
#![deny(missing_docs)]

pub mod calibrate;
mod corpus;
mod error;
pub mod fmoe;
mod inputs;
mod kernargs;
mod kernel;
mod launch;
mod table;

pub use corpus::{
    CORPUS_DIR_ENV, Corpus, CorpusStatus, INDEX_FILE, KERNEL_DIR, STATUS_FILE, TUNED_TABLE,
    UNTUNED_TABLE, default_dir, status,
};
pub use error::{AiterError, ProblemError};
pub use inputs::{GemmInputs, preshuffle_scales};
pub use kernargs::{
    ALPHA, BETA, BLOCK, BufferSpec, Field, GemmLaunch, GemmPointers, GemmProblem, K_STEP,
    KERNARG_BYTES, MAX_LOG2_K_SPLIT, N_MULTIPLE, SCALE_COL_PAD, SCALE_ROW_PAD,
};
pub use kernel::{F4GemmKernel, KernelImage, UNMASKED_N_TILES};
pub use launch::{BindError, LaunchDescription};
pub use table::{
    ASM_KERNEL_PREFIX, MeasuredRow, Shape, TUNED_COLUMNS, TableRow, aiter_rates, read_tuned,
    tuned_csv, write_tuned,
};
