//! Paged FP8 decode attention for gfx950: one query token per sequence attends to its paged
//! FP8 E4M3 KV cache, `out = softmax(q K^T * sm_scale) V` per query head, in bf16.
//!
//! ```no_run
//! use tilegen_kernels::attention::AttentionSpec;
//! // Llama-3-70B-like decode: 64 query heads over 8 KV heads, d = 128, 16-row pages.
//! let kernels = AttentionSpec::new(64, 8, 128, 16).split_kv(4).build()?;
//! println!("{} VGPRs", kernels.main().report().vgpr_count);
//! # Ok::<(), tilegen_kernels::attention::AttentionBuildError>(())
//! ```
//!
//! # The kernel
//! A workgroup serves one (sequence, KV head) and one split of the keys; each of its waves is an
//! independent partial over tiles of [`BLOCK_N`] = 128 keys (partial `p = split * waves + wave`
//! of `P = split_kv * waves` takes tiles `p, p + P, ...`), with its own LDS slots for the K and V
//! tile. Per tile:
//! 1. [`PagedRowIndices`](crate::paged::PagedRowIndices) looks the tile's pages up in the block
//!    table (one entry per page piece; one for a page at least as big as the tile, or a
//!    contiguous cache), and its K and V copies move each piece's rows to LDS with LDS-DMA loads
//!    (`buffer_load_dwordx4 ... lds`, 1 KB per wave instruction). Rows past the sequence's end
//!    are fetched from past the buffer's end, so they land as zeros.
//! 2. `S^T = K Q^T` with `v_mfma_f32_16x16x128_f8f6f4`: K tiles (16 keys each) are the A operand,
//!    read by [`TiledMmaLoader`](crate::tile::loader::TiledMmaLoader) (a 64-wide head reads its second
//!    K half as zeros); Q (bf16, up to 16 query heads of the group, zero-padded) is the B operand,
//!    quantized to FP8 once per workgroup with a power-of-two scale per row.
//! 3. Online softmax in log2 units on the accumulators: each lane holds one query column and 32
//!    keys of the tile, so the row max needs two cross-lane steps (`ds_bpermute`), the row sum
//!    none until the end.
//! 4. `O^T += V^T P^T`: P (times 256, in FP8) is packed from the accumulators in order; V strips
//!    are read with four `ds_read_b64_tr_b8` each in the accumulators' key order
//!    ([`KeyOrder::Accumulator`](crate::tile::loader::KeyOrder)), so P needs no shuffle.
//!
//! Each wave keeps two loads in flight: V of a tile loads while its S and softmax are
//! computed, and K of the wave's next tile (into the K slot, just read) while its PV is.
//! Workgroups are numbered so that consecutive ones share an XCD (workgroups are dealt to the
//! 8 XCDs round robin): neighbouring KV heads, which read the two halves of the same 128-byte
//! lines when `head_dim` is 64, then meet in one L2.
//!
//! With one workgroup per (sequence, KV head) the kernel writes bf16 directly (its waves merge
//! their partials in LDS, as the reduce pass does); otherwise it writes each partial's
//! unnormalized `O`, max and sum, and a second kernel merges them. The numerics, step by step,
//! are those of [`tilegen_mx::attention`], which is the reference the tests hold the kernel to.
//!
//! gfx950 has no TMA and no CTA pairs; the pair split of [`PagedRowIndices`] is not used here
//! because each wave owns its tile (K and V are both needed whole by the wave that computes on
//! them).
//!
//! [`PagedRowIndices`]: crate::paged::PagedRowIndices

mod kernel;
mod mainloop;
mod reduce;
mod run;
mod spec;

pub use run::{AttentionBuffers, AttentionLaunchError, AttentionOutput};
pub use spec::{
    AttentionBuildError, AttentionKernels, AttentionSpec, AttentionSpecError, GROUP_SIZES,
    HEAD_DIMS, MAX_SPLIT_KV, MAX_WAVES, MIN_TILES_PER_PARTIAL, PAGE_SIZES,
};
pub use tilegen_mx::attention::BLOCK_N;
