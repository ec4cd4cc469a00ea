//! `MmaAtom`: a matrix instruction described by its thread-value layouts, as CuTe's MMA traits
//! describe theirs. The layouts are the one place the lane mapping of an instruction is
//! written down; [`crate::TileTensor`]'s `partition_*` hand each lane its fragment from them.
//!
//! Conventions (CuTe's): a TV layout maps `(lane, value)` to an index of the instruction's
//! operand tile read column-major, so `A: (lane, v) -> m + M * k`, `B: (lane, v) -> n + N * k`,
//! `C: (lane, v) -> m + M * n`. Value `v` is the `v`-th element of the lane's operand register
//! (for packed sub-byte formats, element `v` sits at bit `v * bits` of the lane's registers).
//! Scale operands map `(lane, v) -> row + rows * k_block` over the `(rows, K / block)` scale
//! tile, with a single value: the byte the instruction's byte select picks.

use tilegen_layout::Layout;

use crate::error::Result;
use crate::kernel::Kernel;
use crate::value::Value;

/// One matrix instruction of a wave: its shape, operand layouts and issue.
pub trait MmaAtom {
    /// `[M, N, K]` of one instruction.
    fn shape_mnk(&self) -> [i64; 3];

    /// Bits of one element of A and of B (4 for FP4, 8 for FP8, 16 for bf16).
    fn operand_bits(&self) -> [u32; 2];

    /// A's TV layout: `(lane, value) -> m + M * k`.
    fn a_layout(&self) -> Layout;

    /// B's TV layout: `(lane, value) -> n + N * k`.
    fn b_layout(&self) -> Layout;

    /// C's (and D's) TV layout: `(lane, value) -> m + M * n`; value `v` is accumulator `v`.
    fn c_layout(&self) -> Layout;

    /// K elements that share one scale, for block-scaled instructions.
    fn scale_block(&self) -> Option<i64> {
        None
    }

    /// A's scale operand: `(lane, 0) -> m + M * k_block` (block-scaled instructions only).
    fn sfa_layout(&self) -> Option<Layout> {
        None
    }

    /// B's scale operand: `(lane, 0) -> n + N * k_block` (block-scaled instructions only).
    fn sfb_layout(&self) -> Option<Layout> {
        None
    }

    /// `D = C + A * B`, one instruction, every scale 1. `a` and `b` hold each lane's values in
    /// the order of [`MmaAtom::a_layout`] / [`MmaAtom::b_layout`], `c` the accumulators.
    fn mma<'ctx>(
        &self,
        k: &Kernel<'ctx>,
        a: Value<'ctx>,
        b: Value<'ctx>,
        c: Value<'ctx>,
    ) -> Result<Value<'ctx>>;
}
