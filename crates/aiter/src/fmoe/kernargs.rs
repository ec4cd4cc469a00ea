//! The stage-1 kernels' argument block, grid and buffers, as AITER's launcher
//! (`csrc/py_itfs_cu/asm_moe_2stage.cu`, `moe_stage1_g1u1`, called by `asm_stage1` in
//! `aiter/fused_moe.py`) fills them.
//!
//! The block is 368 bytes: 23 fields, each in its own 16-byte slot ([`FmoeField`], in slot
//! order; the code objects' metadata names them and [`FmoeKernel::load`] checks every offset).
//! The launcher declares the block without initialising it, so its padding and the field it
//! never sets (`SMQ`) hold whatever the stack held; this writer puts zeros there.
//!
//! Grid: `x` = intermediate columns / `tile_n` (rounded up), `y` = every block of the sorted
//! token list AITER allocates (not only the valid ones: a workgroup whose first row is at or
//! past `num_valid_ids[0]` exits at once), `z` = `2^splitk`. Block: 256 work-items (4 wave64),
//! no dynamic LDS.
//!
//! [`FmoeKernel::load`]: crate::fmoe::FmoeKernel::load

use crate::fmoe::{FmoeError, FmoeKernel, problem};

/// Bytes of the kernel-argument block.
pub const KERNARG_BYTES: usize = 368;
/// Bytes of one field's slot.
const SLOT_BYTES: usize = 16;
/// Work-items per workgroup, as AITER launches the kernels (`bdx = 256`).
pub const BLOCK: [u32; 3] = [256, 1, 1];
/// K (model dimension) granularity of AITER's `shuffle_weight` for 1-byte elements with its
/// (16, 16) layout: 32 bytes of K per 16-row block.
pub const SHUFFLE_K: u32 = 32;
/// N (weight row) granularity of `shuffle_weight`'s (16, 16) layout.
pub const SHUFFLE_N: u32 = 16;

/// One field of the kernel-argument block, in slot order. Pointers are 8 bytes, scalars are
/// `u32`; the rest of each 16-byte slot is padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FmoeField {
    /// `O`: the output, bf16 `[tokens, topk, inter_dim]`: `act(gate) * up`, with gate and up
    /// both first multiplied by the top-k weight in the doweight kernels; row `(t, k)` at
    /// `t * Os + k * inter_dim * 2` bytes.
    Out,
    /// `X`: the FP8 (e4m3fn) activations `[tokens, model_dim]`, row stride `Xs` bytes.
    X,
    /// `G`: the FP8 gate-and-up weights `[experts, 2 * inter_dim, model_dim]` (gate rows
    /// first, then up rows) in `shuffle_weight`'s (16, 16) layout; expert stride `eGUs` bytes.
    GateUp,
    /// `Xc`: `num_valid_ids`, two i32: rows of the sorted token list in use (whole blocks),
    /// and the token count.
    ValidIds,
    /// `XQ`: the activations' per-token f32 scales `[tokens]`.
    XScale,
    /// `GQ`: the weights' per-row f32 scales `[experts, 2 * inter_dim]`; expert stride `eGUQs`
    /// bytes.
    GateUpScale,
    /// `SMQ`: a smooth-quant scale the launcher never sets (null here).
    SmoothScale,
    /// `STP`: the sorted token list, i32 `token | slot << 24` (see [`crate::fmoe::SortedRouting`]).
    SortedTokens,
    /// `SEP`: the expert of each block of `block_m` sorted rows, i32.
    SortedExperts,
    /// `dim`: model dimension (the GEMM's K), elements.
    Dim,
    /// `hdim`: intermediate dimension (each of gate and up), elements.
    HiddenDim,
    /// `batch`: tokens.
    Tokens,
    /// `eprt`: experts.
    Experts,
    /// `Xs`: row stride of X, bytes (`model_dim` for packed FP8).
    XStride,
    /// `GUs`: row stride of the weights, bytes (`model_dim`).
    GateUpStride,
    /// `Os`: row (token) stride of the output, bytes (`topk * inter_dim * 2`).
    OutStride,
    /// `eGUs`: expert stride of the weights, bytes (`2 * inter_dim * model_dim`).
    ExpertGateUpStride,
    /// `eGUQs`: expert stride of the weight scales, bytes (`2 * inter_dim * 4`).
    ExpertGateUpScaleStride,
    /// `eSMQs`: expert stride of the smooth-quant scales, bytes (`inter_dim * 4`; unread).
    ExpertSmoothScaleStride,
    /// `topk`: experts per token.
    Topk,
    /// `splitk`: log2 of the K split (0: no split).
    SplitK,
    /// `activation`: AITER's `ActivationType`, 0 SiLU, 1 GELU.
    Activation,
    /// `SW`: the sorted top-k weights, f32 per sorted row (doweight kernels; null otherwise).
    SortedWeights,
}

impl FmoeField {
    /// Every field, in slot order.
    pub const ALL: [FmoeField; 23] = [
        FmoeField::Out,
        FmoeField::X,
        FmoeField::GateUp,
        FmoeField::ValidIds,
        FmoeField::XScale,
        FmoeField::GateUpScale,
        FmoeField::SmoothScale,
        FmoeField::SortedTokens,
        FmoeField::SortedExperts,
        FmoeField::Dim,
        FmoeField::HiddenDim,
        FmoeField::Tokens,
        FmoeField::Experts,
        FmoeField::XStride,
        FmoeField::GateUpStride,
        FmoeField::OutStride,
        FmoeField::ExpertGateUpStride,
        FmoeField::ExpertGateUpScaleStride,
        FmoeField::ExpertSmoothScaleStride,
        FmoeField::Topk,
        FmoeField::SplitK,
        FmoeField::Activation,
        FmoeField::SortedWeights,
    ];

    /// Byte offset in the block.
    pub fn offset(self) -> usize {
        self as usize * SLOT_BYTES
    }

    /// Whether the field is a device pointer.
    pub fn is_pointer(self) -> bool {
        self <= FmoeField::SortedExperts || self == FmoeField::SortedWeights
    }

    /// Bytes of the value.
    pub fn size(self) -> usize {
        if self.is_pointer() { 8 } else { 4 }
    }

    /// The argument's name in the code objects' metadata.
    pub fn metadata_name(self) -> &'static str {
        match self {
            FmoeField::Out => "O",
            FmoeField::X => "X",
            FmoeField::GateUp => "G",
            FmoeField::ValidIds => "Xc",
            FmoeField::XScale => "XQ",
            FmoeField::GateUpScale => "GQ",
            FmoeField::SmoothScale => "SMQ",
            FmoeField::SortedTokens => "STP",
            FmoeField::SortedExperts => "SEP",
            FmoeField::Dim => "dim",
            FmoeField::HiddenDim => "hdim",
            FmoeField::Tokens => "batch",
            FmoeField::Experts => "eprt",
            FmoeField::XStride => "Xs",
            FmoeField::GateUpStride => "GUs",
            FmoeField::OutStride => "Os",
            FmoeField::ExpertGateUpStride => "eGUs",
            FmoeField::ExpertGateUpScaleStride => "eGUQs",
            FmoeField::ExpertSmoothScaleStride => "eSMQs",
            FmoeField::Topk => "topk",
            FmoeField::SplitK => "splitk",
            FmoeField::Activation => "activation",
            FmoeField::SortedWeights => "SW",
        }
    }
}

/// AITER's `ActivationType` of the stage-1 kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Activation {
    /// `silu(x) = x / (1 + e^-x)` (value 0).
    Silu,
    /// GELU (value 1).
    Gelu,
}

impl Activation {
    /// The value the kernels read.
    pub fn code(self) -> u32 {
        match self {
            Activation::Silu => 0,
            Activation::Gelu => 1,
        }
    }
}

/// A stage-1 problem: `tokens` tokens of `model_dim` FP8 activations, each routed to `topk`
/// of `experts` experts whose gate and up projections have `inter_dim` columns each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FmoeProblem {
    tokens: u32,
    model_dim: u32,
    inter_dim: u32,
    experts: u32,
    topk: u32,
    activation: Activation,
}

/// The sorted token list holds 24 bits of token index (`token | slot << 24`).
pub const MAX_TOKENS: u32 = 1 << 24;
/// ... and 8 bits of top-k slot.
pub const MAX_TOPK: u32 = 1 << 8;

impl FmoeProblem {
    /// The problem, checked: every size positive, `topk <= experts`, tokens and top-k within
    /// the sorted list's packing, and `model_dim` a multiple of [`SHUFFLE_K`] (the weight
    /// layout's K block).
    pub fn new(
        tokens: u32,
        model_dim: u32,
        inter_dim: u32,
        experts: u32,
        topk: u32,
        activation: Activation,
    ) -> Result<Self, FmoeError> {
        for (what, v) in [
            ("tokens", tokens),
            ("model_dim", model_dim),
            ("inter_dim", inter_dim),
            ("experts", experts),
            ("topk", topk),
        ] {
            if v == 0 {
                return Err(problem(format!("{what} must be positive")));
            }
        }
        if topk > experts {
            return Err(problem(format!(
                "topk {topk} > experts {experts}: a token's experts are distinct"
            )));
        }
        if tokens >= MAX_TOKENS || topk >= MAX_TOPK {
            return Err(problem(format!(
                "tokens {tokens} / topk {topk}: the sorted list packs tokens in 24 bits and slots in 8"
            )));
        }
        if !model_dim.is_multiple_of(SHUFFLE_K) || !inter_dim.is_multiple_of(SHUFFLE_N) {
            return Err(problem(format!(
                "model_dim {model_dim} must be a multiple of {SHUFFLE_K} and inter_dim {inter_dim} of {SHUFFLE_N} (shuffle_weight's layout)"
            )));
        }
        // The launcher's byte strides are 32-bit.
        let expert_bytes = 2 * inter_dim as u64 * model_dim as u64;
        let out_row = topk as u64 * inter_dim as u64 * 2;
        if expert_bytes > u32::MAX as u64 || out_row > u32::MAX as u64 {
            return Err(problem(format!(
                "an expert's weights ({expert_bytes} bytes) or an output row ({out_row} bytes) overflow the 32-bit strides"
            )));
        }
        Ok(FmoeProblem {
            tokens,
            model_dim,
            inter_dim,
            experts,
            topk,
            activation,
        })
    }

    /// Tokens.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Model dimension (K).
    pub fn model_dim(&self) -> u32 {
        self.model_dim
    }

    /// Intermediate dimension (columns of each of gate and up).
    pub fn inter_dim(&self) -> u32 {
        self.inter_dim
    }

    /// Experts.
    pub fn experts(&self) -> u32 {
        self.experts
    }

    /// Experts per token.
    pub fn topk(&self) -> u32 {
        self.topk
    }

    /// The activation.
    pub fn activation(&self) -> Activation {
        self.activation
    }

    /// Rows of the sorted token list AITER's `moe_sorting` allocates for blocks of `block_m`:
    /// `tokens * topk + experts * block_m - topk`.
    pub fn max_sorted_rows(&self, block_m: u32) -> u64 {
        self.tokens as u64 * self.topk as u64 + self.experts as u64 * block_m as u64
            - self.topk as u64
    }

    /// Blocks of the sorted token list: `max_sorted_rows` over `block_m`, rounded up.
    pub fn max_blocks(&self, block_m: u32) -> u64 {
        self.max_sorted_rows(block_m).div_ceil(block_m as u64)
    }
}

/// A buffer of a launch: the field that points at it and its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FmoeBuffer {
    field: FmoeField,
    bytes: u64,
}

impl FmoeBuffer {
    /// The pointer field.
    pub fn field(&self) -> FmoeField {
        self.field
    }

    /// Bytes.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

/// The device addresses of a launch's buffers (0: null).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FmoePointers {
    addresses: [u64; FmoeField::ALL.len()],
}

impl FmoePointers {
    /// Sets the address of pointer field `field`.
    pub fn set(&mut self, field: FmoeField, address: u64) -> Result<(), FmoeError> {
        if !field.is_pointer() {
            return Err(problem(format!(
                "{} is not a pointer field",
                field.metadata_name()
            )));
        }
        self.addresses[field as usize] = address;
        Ok(())
    }

    /// The address of `field` (0 for null or a scalar field).
    pub fn get(&self, field: FmoeField) -> u64 {
        self.addresses[field as usize]
    }
}

/// A stage-1 kernel bound to a problem: grid, buffers and argument block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FmoeLaunch {
    kernel: FmoeKernel,
    problem: FmoeProblem,
}

impl FmoeLaunch {
    /// `kernel` on `problem`, under the launcher's checks: `inter_dim` a multiple of the
    /// kernel's `tile_n`. `block_m` is the kernel's `tile_m` (the launcher refuses any other);
    /// the K split is 0, the only one the tuned table's asm rows use (a split writes f32 gate
    /// and up for a later activation, another output this crate does not model).
    pub fn new(kernel: &FmoeKernel, problem: FmoeProblem) -> Result<Self, FmoeError> {
        if !problem.inter_dim.is_multiple_of(kernel.tile_n()) {
            return Err(crate::fmoe::problem(format!(
                "inter_dim {} is not a multiple of {}'s tile_n {}",
                problem.inter_dim,
                kernel.name(),
                kernel.tile_n()
            )));
        }
        let blocks = problem.max_blocks(kernel.tile_m());
        if blocks > u32::MAX as u64 {
            return Err(crate::fmoe::problem(format!(
                "{blocks} sorted blocks overflow the grid"
            )));
        }
        Ok(FmoeLaunch {
            kernel: kernel.clone(),
            problem,
        })
    }

    /// The kernel.
    pub fn kernel(&self) -> &FmoeKernel {
        &self.kernel
    }

    /// The problem.
    pub fn problem(&self) -> &FmoeProblem {
        &self.problem
    }

    /// Rows per sorted block (`block_m`).
    pub fn block_m(&self) -> u32 {
        self.kernel.tile_m()
    }

    /// Workgroups per dimension.
    pub fn grid(&self) -> [u32; 3] {
        let p = &self.problem;
        [
            p.inter_dim.div_ceil(self.kernel.tile_n()),
            // `new` checked that it fits.
            p.max_blocks(self.block_m()) as u32,
            1,
        ]
    }

    /// Work-items per workgroup.
    pub fn block(&self) -> [u32; 3] {
        BLOCK
    }

    /// Workgroups launched (including those that exit at once).
    pub fn workgroups(&self) -> u64 {
        self.grid().iter().map(|&g| g as u64).product()
    }

    /// The buffers the kernel is given, in field order (`SMQ` and, without doweight, `SW`
    /// stay null).
    pub fn buffers(&self) -> Vec<FmoeBuffer> {
        let p = &self.problem;
        let (t, d, i, e, k) = (
            p.tokens as u64,
            p.model_dim as u64,
            p.inter_dim as u64,
            p.experts as u64,
            p.topk as u64,
        );
        let rows = p.max_sorted_rows(self.block_m());
        let mut b = vec![
            (FmoeField::Out, t * k * i * 2),
            (FmoeField::X, t * d),
            (FmoeField::GateUp, e * 2 * i * d),
            (FmoeField::ValidIds, 8),
            (FmoeField::XScale, t * 4),
            (FmoeField::GateUpScale, e * 2 * i * 4),
            (FmoeField::SortedTokens, rows * 4),
            (FmoeField::SortedExperts, p.max_blocks(self.block_m()) * 4),
        ];
        if self.kernel.doweight() {
            b.push((FmoeField::SortedWeights, rows * 4));
        }
        b.into_iter()
            .map(|(field, bytes)| FmoeBuffer { field, bytes })
            .collect()
    }

    /// The value of scalar field `field` (`None` for a pointer).
    pub fn scalar(&self, field: FmoeField) -> Option<u32> {
        let p = &self.problem;
        // `FmoeProblem::new` bounded every product below by u32.
        Some(match field {
            FmoeField::Dim | FmoeField::XStride | FmoeField::GateUpStride => p.model_dim,
            FmoeField::HiddenDim => p.inter_dim,
            FmoeField::Tokens => p.tokens,
            FmoeField::Experts => p.experts,
            FmoeField::OutStride => p.topk * p.inter_dim * 2,
            FmoeField::ExpertGateUpStride => 2 * p.inter_dim * p.model_dim,
            FmoeField::ExpertGateUpScaleStride => 2 * p.inter_dim * 4,
            FmoeField::ExpertSmoothScaleStride => p.inter_dim * 4,
            FmoeField::Topk => p.topk,
            FmoeField::SplitK => 0,
            FmoeField::Activation => p.activation.code(),
            _ => return None,
        })
    }

    /// The argument block with the buffers at `ptrs`.
    pub fn kernargs(&self, ptrs: &FmoePointers) -> [u8; KERNARG_BYTES] {
        let mut block = [0u8; KERNARG_BYTES];
        for field in FmoeField::ALL {
            let at = field.offset();
            match self.scalar(field) {
                Some(v) => block[at..at + 4].copy_from_slice(&v.to_le_bytes()),
                None => block[at..at + 8].copy_from_slice(&ptrs.get(field).to_le_bytes()),
            }
        }
        block
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fmoe::kernel::tests::kernel;

    fn read_u32(b: &[u8], f: FmoeField) -> u32 {
        u32::from_le_bytes(b[f.offset()..f.offset() + 4].try_into().unwrap())
    }

    #[test]
    fn layout_is_23_slots_with_the_metadata_names() {
        assert_eq!(FmoeField::ALL.len() * SLOT_BYTES, KERNARG_BYTES);
        for (i, f) in FmoeField::ALL.iter().enumerate() {
            assert_eq!(f.offset(), i * 16);
        }
        assert_eq!(FmoeField::Dim.offset(), 144);
        assert_eq!(FmoeField::SortedWeights.offset(), 352);
        let pointers: Vec<&str> = FmoeField::ALL
            .iter()
            .filter(|f| f.is_pointer())
            .map(|f| f.metadata_name())
            .collect();
        assert_eq!(
            pointers,
            ["O", "X", "G", "Xc", "XQ", "GQ", "SMQ", "STP", "SEP", "SW"]
        );
    }

    #[test]
    fn fills_the_block_as_the_launcher_does() {
        let k = kernel(32, 128, true);
        let p = FmoeProblem::new(16, 7168, 512, 256, 8, Activation::Gelu).unwrap();
        let l = FmoeLaunch::new(&k, p).unwrap();
        // 16 * 8 + 256 * 32 - 8 = 8312 rows, 260 blocks of 32.
        assert_eq!(p.max_sorted_rows(32), 8312);
        assert_eq!(l.grid(), [4, 260, 1]);
        assert_eq!(l.workgroups(), 1040);
        let mut ptrs = FmoePointers::default();
        ptrs.set(FmoeField::GateUp, 0x1234_5678_9abc).unwrap();
        assert!(ptrs.set(FmoeField::Dim, 1).is_err());
        let b = l.kernargs(&ptrs);
        assert_eq!(
            u64::from_le_bytes(b[32..40].try_into().unwrap()),
            0x1234_5678_9abc
        );
        for (f, v) in [
            (FmoeField::Dim, 7168),
            (FmoeField::HiddenDim, 512),
            (FmoeField::Tokens, 16),
            (FmoeField::Experts, 256),
            (FmoeField::XStride, 7168),
            (FmoeField::GateUpStride, 7168),
            (FmoeField::OutStride, 8 * 512 * 2),
            (FmoeField::ExpertGateUpStride, 7168 * 1024),
            (FmoeField::ExpertGateUpScaleStride, 4096),
            (FmoeField::ExpertSmoothScaleStride, 2048),
            (FmoeField::Topk, 8),
            (FmoeField::SplitK, 0),
            (FmoeField::Activation, 1),
        ] {
            assert_eq!(read_u32(&b, f), v, "{f:?}");
        }
        let sizes: Vec<(FmoeField, u64)> =
            l.buffers().iter().map(|b| (b.field(), b.bytes())).collect();
        assert_eq!(
            sizes,
            [
                (FmoeField::Out, 16 * 8 * 512 * 2),
                (FmoeField::X, 16 * 7168),
                (FmoeField::GateUp, 256 * 1024 * 7168),
                (FmoeField::ValidIds, 8),
                (FmoeField::XScale, 64),
                (FmoeField::GateUpScale, 256 * 1024 * 4),
                (FmoeField::SortedTokens, 8312 * 4),
                (FmoeField::SortedExperts, 260 * 4),
                (FmoeField::SortedWeights, 8312 * 4),
            ]
        );
        let no_weight = FmoeLaunch::new(&kernel(32, 128, false), p).unwrap();
        assert!(
            no_weight
                .buffers()
                .iter()
                .all(|b| b.field() != FmoeField::SortedWeights)
        );
    }

    #[test]
    fn refuses_what_the_launcher_refuses() {
        let p = FmoeProblem::new(4, 256, 192, 8, 2, Activation::Silu).unwrap();
        let e = FmoeLaunch::new(&kernel(32, 128, false), p).unwrap_err();
        assert!(e.to_string().contains("tile_n 128"), "{e}");
        for (args, want) in [
            ((0, 256, 128, 8, 2), "tokens must be positive"),
            ((4, 256, 128, 2, 3), "topk 3 > experts 2"),
            ((4, 250, 128, 8, 2), "multiple of 32"),
            ((4, 256, 120, 8, 2), "multiple of 32"),
            ((4, 1 << 20, 1 << 12, 8, 2), "32-bit"),
        ] {
            let (t, d, i, e, k) = args;
            let err = FmoeProblem::new(t, d, i, e, k, Activation::Silu).unwrap_err();
            assert!(err.to_string().contains(want), "{args:?}: {err}");
        }
    }
}
