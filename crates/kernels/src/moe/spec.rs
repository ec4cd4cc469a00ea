//! `MoeSpec`: the kernels of one grouped MXFP4 MoE layer, validated before LLVM sees them.
//!
//! A layer runs two grouped preshuffled-B GEMMs, each a [`PrebSpec`] tile whose
//! `BM` rows are one sorted block of (token, slot) pairs of one expert:
//! * **gate/up**: gathers the block's token rows, multiplies by the expert's `[2 I, H]` weight,
//!   applies the [`Activation`] to each (gate, up) pair and quantizes the `BN / 2` results per
//!   row to MXFP4 (E8M0 scales), written in sorted-row order for the next stage;
//! * **down**: the sorted rows times the expert's `[H, I]` weight, scaled by each pair's
//!   routing weight and combined into the bf16 output ([`Combine`]).
//!
//! With [`Combine::SortedReduce`] a third, small kernel sums each token's slots.
//!
//! With [`MoeSpec::bias`] (gpt-oss) both GEMMs add a per-expert bf16 bias to their f32
//! accumulators: the gate/up bias before the activation, the down bias before the routing
//! weight.

use std::fmt;

use serde::{Deserialize, Serialize};
use tilegen_arch::COMPUTE_UNITS;
use tilegen_dsl::target::LDS_BYTES;
pub use tilegen_mx::moe::{Activation, Combine, MoeShape};

use crate::gemm::{KernelSpec, OutDtype, PrebSpec, SpecError};

/// Which kernel of the layer, in launch order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Stage {
    /// The routing's sort: the pairs grouped by expert into blocks.
    Sort,
    /// Gathered tokens times the gate/up weight, activation, MXFP4 quantization.
    GateUp,
    /// Sorted rows times the down weight, routing weight, combine.
    Down,
    /// The sorted reduce of [`Combine::SortedReduce`].
    Reduce,
}

impl fmt::Display for Stage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Stage::Sort => "sort",
            Stage::GateUp => "gate/up",
            Stage::Down => "down",
            Stage::Reduce => "reduce",
        })
    }
}

/// How the down kernel's combine moves its outputs through LDS: the element (bf16 for the
/// atomic combine, f32 partials for the sorted reduce) and the elements one access moves (a
/// packed bf16 atomic: 2; a 4-dword store: 4).
#[derive(Debug, Clone, Copy)]
pub(crate) struct CombineStaging {
    pub(crate) elem: tilegen_dsl::Elem,
    pub(crate) vec: u32,
}

impl CombineStaging {
    /// Staging buffers per wave, used in turn by its tile rows.
    pub(crate) const BUFFERS: u64 = 2;

    /// Bytes a block row's output row (token or pair, i32) takes in LDS.
    pub(crate) const OUT_ROW_BYTES: u64 = 4;

    /// Bytes of one element.
    pub(crate) fn elem_bytes(self) -> u32 {
        self.elem.bits() / 8
    }

    /// The value one access moves.
    pub(crate) fn access_ty(self) -> tilegen_dsl::Ty {
        tilegen_dsl::Ty::vector(self.elem, self.vec)
    }

    /// Bytes of one access.
    pub(crate) fn access_bytes(self) -> u32 {
        self.elem_bytes() * self.vec
    }

    /// Elements of one staged row of a `wn`-wide wave: its own and a pad of one access, so a
    /// column's rows spread over the LDS banks.
    pub(crate) fn row_elems(self, wn: u32) -> u64 {
        u64::from(wn) + u64::from(self.vec)
    }
}

/// A rule a [`MoeSpec`] (or a layer shape for it) breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoeSpecError {
    /// A stage's tile breaks a GEMM tile rule.
    #[error("the {stage} kernel's tile")]
    Tile {
        /// Which kernel.
        stage: Stage,
        /// The rule.
        #[source]
        source: SpecError,
    },
    /// A rule of the grouped kernels.
    #[error("the {stage} kernel: {rule}")]
    Rule {
        /// Which kernel.
        stage: Stage,
        /// The rule, with the values.
        rule: String,
    },
    /// The layer's sizes.
    #[error("MoE layer of {shape}: {rule}")]
    Shape {
        /// The sizes.
        shape: MoeShape,
        /// The rule.
        rule: String,
    },
}

/// The kernels of a grouped MXFP4 MoE layer: the block size (rows of one expert per
/// workgroup), the two stages' tiles, the activation and the combine. Start from
/// [`MoeSpec::new`], adjust with the setters, then [`MoeSpec::build`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MoeSpec {
    block_m: u32,
    gate_up: PrebSpec,
    down: PrebSpec,
    activation: Activation,
    combine: Combine,
    /// Per-expert biases on both GEMMs' outputs; absent in specs written before they existed.
    #[serde(default)]
    bias: bool,
    /// The gate/up kernel groups a small pass's pairs itself (see [`MoeSpec::fused_sort`]);
    /// absent in specs written before it existed.
    #[serde(default)]
    fused_sort: bool,
}

impl MoeSpec {
    /// The default tile of both stages for `block_m` rows: the preb kernel's defaults (BN = 128
    /// in two 64-wide waves, BK = 512) with `BM` the block size.
    pub fn default_tile(block_m: u32) -> PrebSpec {
        KernelSpec::preb().bm(block_m)
    }

    /// The tile knobs the layer fixes: `bm` (the block size) and `wm` (one wave strip over the
    /// block), `out_dtype` (bf16), `split_k` (1) and `xcd_group_m` (blocks go in expert order).
    pub const FIXED_KNOBS: &'static [crate::gemm::Knob] = &[
        crate::gemm::Knob::Bm,
        crate::gemm::Knob::Wm,
        crate::gemm::Knob::OutDtype,
        crate::gemm::Knob::SplitK,
        crate::gemm::Knob::XcdGroupM,
    ];
}

/// The tile knobs a layer's command line offers: every GEMM knob but those the layer fixes
/// ([`MoeSpec::FIXED_KNOBS`]).
#[cfg(feature = "clap")]
#[derive(Debug, Clone, Copy, Default)]
pub struct MoeTileKnobs;

#[cfg(feature = "clap")]
impl crate::gemm::KnobSet for MoeTileKnobs {
    fn takes(k: crate::gemm::Knob) -> bool {
        !MoeSpec::FIXED_KNOBS.contains(&k)
    }
}

impl MoeSpec {
    /// Blocks of 32 rows, both stages with BN = 128 (two waves of 64 columns) and BK = 512,
    /// bf16 atomics for the combine.
    pub fn new(activation: Activation) -> Self {
        MoeSpec {
            block_m: 32,
            gate_up: MoeSpec::default_tile(32),
            down: MoeSpec::default_tile(32),
            activation,
            combine: Combine::Atomic,
            bias: false,
            fused_sort: false,
        }
    }

    /// The spec fitted to a layer's sizes, as a tensor-parallel shard gives them: each GEMM
    /// stage's `bk_elems` becomes the largest multiple of 256 not above its own that divides
    /// the stage's K (the padded hidden size for gate/up, the padded intermediate size for
    /// down; both are multiples of 256, so one always does). A shard's intermediate size
    /// (DeepSeek-V3's 2048 over 8 ranks is 256, gpt-oss's 2880 over 8 is 360, padded to 512)
    /// is often not a whole number of the default 512-element K tiles. Every other knob is
    /// kept; sizes [`MoeShape::validate`] refuses are left for [`MoeSpec::check_shape`] to name.
    pub fn fit_to(mut self, shape: &MoeShape) -> Self {
        let fit = |tile: PrebSpec, k: usize| {
            let k = k as u64;
            let cur = u64::from(tile.bk_elems);
            match (1..=cur / 256)
                .rev()
                .map(|n| n * 256)
                .find(|&bk| k.is_multiple_of(bk))
            {
                Some(bk) if bk != cur && k > 0 => tile.bk_elems(bk as u32),
                _ => tile,
            }
        };
        self.gate_up = fit(self.gate_up, shape.hidden_padded());
        self.down = fit(self.down, shape.inter_padded());
        self
    }

    /// The spec the per-token-count rule picks for `tokens` tokens through a `shape` layer:
    /// the block size and both kernels' widths from the rows an expert the routing touches
    /// gets on average (`r = tokens * topk / min(experts, tokens * topk)`), on the default
    /// tiles, fitted to the sizes ([`MoeSpec::fit_to`]); the activation, combine and biases
    /// are kept, any other tile knob is the default's. On the MI355X timing model:
    /// * `r <= 16` (decode, or many experts): blocks of 16 rows, so a token's row is not
    ///   padded to 32 and each expert's weights are read by as many workgroups as columns
    ///   need; a narrow gate/up (64 columns when its width `2 * inter` is below 2048, as a
    ///   tensor-parallel shard's is) for more workgroups over the few blocks;
    /// * `r <= 48`: blocks of 32 (DeepSeek-V3 over 8 ranks at 1,024 tokens, `r = 36`: 210 us
    ///   in blocks of 32, 221 in blocks of 64, every workgroup simulated);
    /// * more: blocks of 64 and 256-column tiles of the down kernel (and of a gate/up at
    ///   least 2048 wide), so each weight tile is read by fewer, longer blocks.
    ///
    /// Decode: when the gate/up grid (one block per touched expert at least, times its column
    /// tiles) is under two workgroups per compute unit, each workgroup streams a long K loop
    /// of its expert's weights with little else resident, and the loop's latency is the
    /// time. There the gate/up tile splits its columns over 16-wide waves (four waves where
    /// one was), takes 1024-element K steps (fitted) and loads the weights two steps ahead of
    /// the one it multiplies and the activations two steps ahead of their LDS slot, so more
    /// loads are in flight and fewer steps wait on them: DeepSeek-V3 over 8 ranks at 1 and 4
    /// tokens, 35.5 and 42.4 us to 22.5 and 29.8 with every workgroup simulated with the
    /// next step's weights ahead; two steps ahead, the gate/up kernel at 1 token models 10.7
    /// us where one step ahead modelled 12.1 (sampled). A pass of at most
    /// [`super::FUSED_SORT_PAIRS`] pairs is grouped by the gate/up kernel itself
    /// ([`MoeSpec::fused_sort`]): a launch less.
    pub fn for_tokens(self, shape: &MoeShape, tokens: usize) -> Self {
        let pairs = tokens.saturating_mul(shape.topk).max(1);
        let touched = shape.experts.min(pairs).max(1);
        let rows = pairs.div_ceil(touched);
        let wide = shape.gate_up_rows() >= 2048;
        let (bm, gate_up_bn, down_bn) = match rows {
            0..=16 => (16, if wide { 128 } else { 64 }, 128),
            17..=48 => (32, if wide { 256 } else { 128 }, 128),
            _ => (64, if wide { 256 } else { 128 }, 256),
        };
        let workgroups = touched.saturating_mul(shape.gate_up_rows() / gate_up_bn as usize);
        let gate_up = if workgroups < 2 * COMPUTE_UNITS as usize {
            MoeSpec::default_tile(bm)
                .bn(gate_up_bn)
                .wn(16)
                .bk_elems(1024)
                .b_prefetch(true)
                .with_prefetch(|p| p.b_prefetch_depth(2).deep_prime(true))
        } else {
            MoeSpec::default_tile(bm).bn(gate_up_bn)
        };
        self.block_m(bm)
            .gate_up(gate_up)
            .down(MoeSpec::default_tile(bm).bn(down_bn))
            .fused_sort(pairs <= super::sort::FUSED_SORT_PAIRS)
            .fit_to(shape)
    }

    /// Whether the gate/up kernel groups a pass's pairs itself when the pass has at most
    /// [`super::FUSED_SORT_PAIRS`] (decode): each of its workgroups places the pairs in one
    /// wave, as the sort kernel would, and keeps its block's rows in LDS, and the first column
    /// tile's workgroups write the layout the down kernel reads. Such a pass launches no sort
    /// kernel (a launch saved); a larger one launches it and the gate/up kernel reads its
    /// layout. Blocks of at most 64 rows.
    pub fn fused_sort(mut self, on: bool) -> Self {
        self.fused_sort = on;
        self
    }

    /// Whether the gate/up kernel groups small passes' pairs itself.
    pub fn has_fused_sort(&self) -> bool {
        self.fused_sort
    }

    /// Rows per sorted block (`BM` of both stages; the routing's `sort(block_m)`).
    pub fn block_m(mut self, rows: u32) -> Self {
        self.block_m = rows;
        self.gate_up = self.gate_up.bm(rows);
        self.down = self.down.bm(rows);
        self
    }

    /// The gate/up kernel's tile (a preb spec whose `bm` is the block size).
    pub fn gate_up(mut self, tile: PrebSpec) -> Self {
        self.gate_up = tile;
        self
    }

    /// The down kernel's tile (a preb spec whose `bm` is the block size).
    pub fn down(mut self, tile: PrebSpec) -> Self {
        self.down = tile;
        self
    }

    /// The activation.
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// The combine.
    pub fn combine(mut self, combine: Combine) -> Self {
        self.combine = combine;
        self
    }

    /// Whether both GEMMs add per-expert biases (gpt-oss's `gate_up_proj_bias` `[E, 2 I]`
    /// before the activation and `down_proj_bias` `[E, H]` before the routing weight, bf16).
    pub fn bias(mut self, on: bool) -> Self {
        self.bias = on;
        self
    }

    /// Whether the kernels add biases.
    pub fn has_bias(&self) -> bool {
        self.bias
    }

    /// Rows per sorted block.
    pub fn rows_per_block(&self) -> u32 {
        self.block_m
    }

    /// The layer's kernels in launch order: the sort, gate/up, down, and the reduce of
    /// [`Combine::SortedReduce`].
    pub fn stages(&self) -> Vec<Stage> {
        let mut v = vec![Stage::Sort, Stage::GateUp, Stage::Down];
        if self.combine == Combine::SortedReduce {
            v.push(Stage::Reduce);
        }
        v
    }

    /// The tile of a GEMM stage ([`Stage::GateUp`] or [`Stage::Down`]; the sort and the reduce
    /// have none and give the gate/up and the down tile).
    pub fn tile(&self, stage: Stage) -> &PrebSpec {
        match stage {
            Stage::Sort | Stage::GateUp => &self.gate_up,
            Stage::Down | Stage::Reduce => &self.down,
        }
    }

    /// The activation.
    pub fn activation_kind(&self) -> Activation {
        self.activation
    }

    /// The combine.
    pub fn combine_kind(&self) -> Combine {
        self.combine
    }

    /// LDS bytes of the gate/up kernel's epilogue: the block's `BM x BN / 2` activations in
    /// f32, regrouped there into rows of 32 for quantization.
    pub fn epilogue_lds_bytes(&self) -> u64 {
        u64::from(self.block_m) * u64::from(self.gate_up.bn / 2) * 4
    }

    /// How the down kernel's combine stages its outputs through LDS.
    pub(crate) fn combine_staging(&self) -> CombineStaging {
        match self.combine {
            Combine::Atomic => CombineStaging {
                elem: tilegen_dsl::Elem::Bf16,
                vec: 2,
            },
            Combine::SortedReduce => CombineStaging {
                elem: tilegen_dsl::Elem::F32,
                vec: 4,
            },
        }
    }

    /// Whether the down kernel's combine goes through LDS: where a wave holds two MMA tile rows
    /// or more. Straight from the accumulators, one access touches a few bytes of each of an
    /// MMA tile's rows (sixteen cache lines for 16x16 tiles); staged, whole row segments. A
    /// block of one tile row is a decode block, whose few valid rows make few accesses either
    /// way, and there the round trip through LDS and its barrier only add latency
    /// (DeepSeek-V3 over 8 ranks at 1 token: down 6.48 us straight, 6.98 staged, on the model).
    pub(crate) fn combine_staged(&self) -> bool {
        self.down.warp_m() / self.down.mma.mn() >= 2
    }

    /// LDS bytes of the down kernel's combine, if staged ([`MoeSpec::combine_staged`]): each
    /// wave's outputs of one MMA tile row, in two alternating buffers whose rows are padded by
    /// one access (so a column's rows spread over the banks), and the output row (4 bytes) of
    /// each row of the block.
    pub fn combine_lds_bytes(&self) -> u64 {
        if !self.combine_staged() {
            return 0;
        }
        let s = self.combine_staging();
        let tile = &self.down;
        let rows = CombineStaging::BUFFERS * u64::from(tile.warps()) * u64::from(tile.mma.mn());
        u64::from(self.block_m) * CombineStaging::OUT_ROW_BYTES
            + rows * s.row_elems(tile.wn) * u64::from(s.elem_bytes())
    }

    /// LDS bytes a stage allocates.
    pub fn lds_bytes(&self, stage: Stage) -> u64 {
        match stage {
            Stage::GateUp => {
                self.gate_up.lds_bytes()
                    + self.epilogue_lds_bytes()
                    + if self.fused_sort {
                        super::sort::FUSED_SORT_LDS_BYTES + 4 * u64::from(self.block_m) + 4
                    } else {
                        0
                    }
            }
            Stage::Down => self.down.lds_bytes() + self.combine_lds_bytes(),
            Stage::Sort => super::sort::SORT_LDS_BYTES,
            Stage::Reduce => 0,
        }
    }

    /// Checks every rule; an `Ok` spec compiles.
    pub fn validate(&self) -> Result<(), MoeSpecError> {
        for (stage, tile) in [(Stage::GateUp, &self.gate_up), (Stage::Down, &self.down)] {
            let rule = |rule: String| Err(MoeSpecError::Rule { stage, rule });
            tile.validate()
                .map_err(|source| MoeSpecError::Tile { stage, source })?;
            if tile.bm != self.block_m {
                return rule(format!(
                    "bm = {} must be the block size {} (one sorted block per workgroup)",
                    tile.bm, self.block_m
                ));
            }
            // The grouped kernels' gathered A rows and epilogues serve one wave strip of the
            // whole block and write each output once.
            if tile.warp_m() != tile.bm {
                return rule(format!(
                    "wm = {} must equal bm = {} (waves along M are not supported by the grouped kernels)",
                    tile.warp_m(),
                    tile.bm
                ));
            }
            if tile.knobs().split_k != 1 {
                return rule(format!(
                    "split_k = {} must be 1 (the activation and the combine need the whole K sum)",
                    tile.knobs().split_k
                ));
            }
            if tile.knobs().xcd_group_m != 0 {
                return rule(format!(
                    "xcd_group_m = {} would be ignored (the grouped kernels take their blocks in expert order)",
                    tile.knobs().xcd_group_m
                ));
            }
            if tile.out_dtype != OutDtype::Bf16 {
                return rule(format!(
                    "out_dtype = {} would be ignored (the gate/up output is MXFP4, the layer's is bf16)",
                    tile.out_dtype
                ));
            }
        }
        if !self.gate_up.bn.is_multiple_of(64) {
            return Err(MoeSpecError::Rule {
                stage: Stage::GateUp,
                rule: format!(
                    "bn = {} must be a multiple of 64 (its bn / 2 activations are whole 32-element MX blocks)",
                    self.gate_up.bn
                ),
            });
        }
        if self.fused_sort && self.block_m > 64 {
            return Err(MoeSpecError::Rule {
                stage: Stage::GateUp,
                rule: format!(
                    "fused_sort needs blocks of at most 64 rows (a wave's lanes), not {}",
                    self.block_m
                ),
            });
        }
        let lds = self.lds_bytes(Stage::GateUp);
        if lds > u64::from(LDS_BYTES) {
            return Err(MoeSpecError::Rule {
                stage: Stage::GateUp,
                rule: format!(
                    "LDS budget exceeded: {} bytes of A slots + {} bytes of activations{} > {LDS_BYTES}",
                    self.gate_up.lds_bytes(),
                    self.epilogue_lds_bytes(),
                    if self.fused_sort {
                        " + the fused sort's"
                    } else {
                        ""
                    }
                ),
            });
        }
        let lds = self.lds_bytes(Stage::Down);
        if lds > u64::from(LDS_BYTES) {
            return Err(MoeSpecError::Rule {
                stage: Stage::Down,
                rule: format!(
                    "LDS budget exceeded: {} bytes of A slots + {} bytes of the staged combine > {LDS_BYTES}",
                    self.down.lds_bytes(),
                    self.combine_lds_bytes()
                ),
            });
        }
        Ok(())
    }

    /// Checks a layer's sizes against the tiles: K of both GEMMs (the padded hidden and
    /// intermediate sizes) whole `BK` tiles, the gate/up width `2 * inter_padded` whole `BN`
    /// tiles (no partial MX blocks), and the sizes themselves ([`MoeShape::validate`]).
    pub fn check_shape(&self, shape: &MoeShape) -> Result<(), MoeSpecError> {
        let fail = |rule: String| {
            Err(MoeSpecError::Shape {
                shape: *shape,
                rule,
            })
        };
        match shape.validate() {
            Ok(()) => {}
            Err(tilegen_mx::moe::MoeRefError::Shape { rule, .. }) => return fail(rule),
            Err(e) => return fail(e.to_string()),
        }
        if shape.experts > super::sort::MAX_SORT_EXPERTS {
            return fail(format!(
                "{} experts; the device sort groups at most {}",
                shape.experts,
                super::sort::MAX_SORT_EXPERTS
            ));
        }
        let (hp, ip) = (shape.hidden_padded() as u64, shape.inter_padded() as u64);
        // The sizes as given, and their padding when it differs: the K a tile divides.
        let padded = |v: usize, p: u64| {
            if v as u64 == p {
                format!("{v}")
            } else {
                format!("{v} (padded to {p})")
            }
        };
        if !hp.is_multiple_of(u64::from(self.gate_up.bk_elems)) {
            return fail(format!(
                "hidden {} is not a multiple of the gate/up kernel's bk_elems {}",
                padded(shape.hidden, hp),
                self.gate_up.bk_elems
            ));
        }
        if !ip.is_multiple_of(u64::from(self.down.bk_elems)) {
            return fail(format!(
                "inter {} is not a multiple of the down kernel's bk_elems {}",
                padded(shape.inter, ip),
                self.down.bk_elems
            ));
        }
        if !(2 * ip).is_multiple_of(u64::from(self.gate_up.bn)) {
            return fail(format!(
                "the gate/up width {} (twice inter, padded) is not a multiple of the gate/up kernel's bn {}",
                2 * ip,
                self.gate_up.bn
            ));
        }
        // Buffers are addressed with 31-bit offsets: one expert's weight, the activations
        // and the outputs must fit.
        let limit = (1u64 << 31) - 1;
        let (e_h, e_i) = (shape.hidden as u64, shape.inter_padded() as u64);
        for (what, bytes) in [
            ("one expert's gate/up weight", 2 * ip * hp / 2),
            ("one expert's down weight", e_h * e_i / 2),
        ] {
            if bytes > limit {
                return fail(format!("{what} is {bytes} bytes; offsets are 31-bit"));
            }
        }
        Ok(())
    }

    /// The symbol name of a stage's kernel, unique per configuration.
    pub fn kernel_name(&self, stage: Stage) -> String {
        let tile = |t: &PrebSpec| {
            // Every tile's output is bf16 here: the name leaves it out.
            t.kernel_name()
                .trim_start_matches("mxfp4_gemm_")
                .replace("_bf16", "")
        };
        let bias = if self.bias { "_bias" } else { "" };
        match stage {
            Stage::GateUp => format!(
                "mxfp4_moe_gate_up_{}{bias}_{}{}",
                match self.activation {
                    Activation::Swiglu => "swiglu",
                    Activation::SiluMul => "silu",
                },
                tile(&self.gate_up),
                if self.fused_sort { "_fs" } else { "" }
            ),
            Stage::Down => format!(
                "mxfp4_moe_down_{}{bias}_{}",
                match self.combine {
                    Combine::Atomic => "atomic",
                    Combine::SortedReduce => "sorted",
                },
                tile(&self.down)
            ),
            Stage::Sort => format!("moe_sort_bm{}", self.block_m),
            Stage::Reduce => "mxfp4_moe_reduce_bf16".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_rules_are_named() {
        let s = MoeSpec::new(Activation::Swiglu);
        s.validate().unwrap();
        assert_eq!(s.tile(Stage::GateUp).bm, 32);
        let e = s.clone().block_m(48).validate().unwrap_err();
        assert!(
            matches!(
                e,
                MoeSpecError::Tile {
                    stage: Stage::GateUp,
                    ..
                }
            ),
            "{e}"
        );
        let e = s
            .clone()
            .down(KernelSpec::preb().bm(64))
            .validate()
            .unwrap_err();
        assert!(
            matches!(
                e,
                MoeSpecError::Rule {
                    stage: Stage::Down,
                    ..
                }
            ),
            "{e}"
        );
        let e = s
            .clone()
            .gate_up(KernelSpec::preb().bm(32).bn(96).wn(32))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("multiple of 64"), "{e}");
        let e = s
            .clone()
            .down(MoeSpec::default_tile(32).out_dtype(OutDtype::F32))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("ignored"), "{e}");
        let e = s
            .clone()
            .gate_up(MoeSpec::default_tile(32).wm(16))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("waves along M"), "{e}");
        let e = s
            .clone()
            .down(MoeSpec::default_tile(32).split_k(2))
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("split_k = 2"), "{e}");
        let big = s
            .clone()
            .block_m(256)
            .gate_up(KernelSpec::preb().bm(256).bn(512).wn(16).bk_elems(512));
        assert!(big.validate().is_err());
        assert_ne!(
            s.kernel_name(Stage::GateUp),
            s.clone()
                .activation(Activation::SiluMul)
                .kernel_name(Stage::GateUp)
        );
        assert_ne!(
            s.kernel_name(Stage::Down),
            s.clone()
                .combine(Combine::SortedReduce)
                .kernel_name(Stage::Down)
        );
        let b = s.clone().bias(true);
        assert!(b.has_bias() && !s.has_bias());
        for stage in [Stage::GateUp, Stage::Down] {
            assert_ne!(s.kernel_name(stage), b.kernel_name(stage));
        }
        // Specs serialized before biases existed read as bias-free.
        let mut v = serde_json::to_value(&s).unwrap();
        v.as_object_mut().unwrap().remove("bias");
        assert_eq!(serde_json::from_value::<MoeSpec>(v).unwrap(), s);
    }

    #[test]
    fn shapes_are_checked_against_the_tiles() {
        let s = MoeSpec::new(Activation::Swiglu);
        let oss = MoeShape {
            experts: 32,
            topk: 4,
            hidden: 2880,
            inter: 2880,
        };
        s.check_shape(&oss).unwrap();
        // 3072 is not a whole number of 2048-element tiles.
        let e = s
            .clone()
            .gate_up(MoeSpec::default_tile(32).bk_elems(2048))
            .check_shape(&oss)
            .unwrap_err();
        assert!(e.to_string().contains("hidden"), "{e}");
        let bad = MoeShape {
            hidden: 2000,
            ..oss
        };
        assert!(s.check_shape(&bad).is_err());
    }

    /// The per-token-count rule: its branches for the two layers AMD measured AITER on
    /// (gpt-oss-120b-sized, DeepSeek-V3 over 8 ranks), and valid fitted specs for every shard
    /// size and token count.
    #[test]
    fn the_per_token_rule_picks_by_rows_per_expert() {
        let oss = MoeShape {
            experts: 128,
            topk: 4,
            hidden: 3072,
            inter: 3072,
        };
        let ds = MoeShape {
            experts: 257,
            topk: 9,
            hidden: 7168,
            inter: 256,
        };
        let pick = |shape: &MoeShape, tokens: usize| {
            let s = MoeSpec::new(Activation::Swiglu).for_tokens(shape, tokens);
            s.validate().unwrap();
            s.check_shape(shape).unwrap();
            (
                s.rows_per_block(),
                s.tile(Stage::GateUp).bn,
                s.tile(Stage::Down).bn,
                s.tile(Stage::Down).bk_elems,
            )
        };
        assert_eq!(pick(&oss, 256), (16, 128, 128, 512));
        assert_eq!(pick(&oss, 1024), (32, 256, 128, 512));
        assert_eq!(pick(&oss, 4096), (64, 256, 256, 512));
        assert_eq!(pick(&ds, 1), (16, 64, 128, 256));
        // Decode: 9 and 36 blocks of 8 gate/up tiles are under two workgroups per CU.
        for tokens in [1, 4] {
            let s = MoeSpec::new(Activation::SiluMul).for_tokens(&ds, tokens);
            let g = s.tile(Stage::GateUp);
            assert_eq!((g.wn, g.bk_elems), (16, 1024), "{tokens} tokens");
            assert!(g.knobs().prefetch.is_some(), "{tokens} tokens");
        }
        let s = MoeSpec::new(Activation::SiluMul).for_tokens(&ds, 16);
        assert_eq!(s.tile(Stage::GateUp).wn, 64);
        assert_eq!(pick(&ds, 256), (16, 64, 128, 256));
        assert_eq!(pick(&ds, 1024), (32, 128, 128, 256));
        assert_eq!(pick(&ds, 4096), (64, 128, 256, 256));
        for inter in [256, 384, 512, 768, 1536, 2048, 3072] {
            for tokens in [1, 3, 16, 100, 1000, 100_000] {
                pick(&MoeShape { inter, ..ds }, tokens);
                pick(&MoeShape { inter, ..oss }, tokens);
            }
        }
        let kept = MoeSpec::new(Activation::SiluMul)
            .bias(true)
            .combine(Combine::SortedReduce)
            .for_tokens(&ds, 4);
        assert!(kept.has_bias() && kept.combine_kind() == Combine::SortedReduce);
        assert_eq!(kept.activation_kind(), Activation::SiluMul);
    }

    /// Every size a tensor-parallel shard of the shipped models gives (DeepSeek-V3's and
    /// Kimi-K2's intermediate 2048, Qwen3's 1536 and 768, gpt-oss's 2880, over 1 to 8 ranks)
    /// builds with the default spec fitted to it, and the fit changes only `bk_elems`. A rank
    /// of an MXFP4 checkpoint holds whole 32-element blocks, so gpt-oss's 2880 over 4 and 8
    /// ranks (720 and 360: 22.5 and 11.25 blocks) is a rank of 736 and 384.
    #[test]
    fn the_default_spec_fits_every_tensor_parallel_shard() {
        let mut inters: Vec<usize> = [2048usize, 1536, 768, 2880]
            .iter()
            .flat_map(|&i| [1, 2, 4, 8].map(|tp| (i / tp).next_multiple_of(32)))
            .collect();
        inters.extend([384, 512]);
        for hidden in [2880, 3072, 4096, 7168] {
            for &inter in &inters {
                let shape = MoeShape {
                    experts: 257,
                    topk: 9,
                    hidden,
                    inter,
                };
                let s = MoeSpec::new(Activation::SiluMul).fit_to(&shape);
                s.validate().unwrap();
                s.check_shape(&shape)
                    .unwrap_or_else(|e| panic!("hidden {hidden}, inter {inter}: {e}"));
                let k = |st| u64::from(s.tile(st).bk_elems);
                assert_eq!(
                    k(Stage::Down),
                    if shape.inter_padded().is_multiple_of(512) {
                        512
                    } else {
                        256
                    },
                    "inter {inter}"
                );
                assert_eq!(
                    s.clone()
                        .gate_up(MoeSpec::default_tile(32))
                        .down(MoeSpec::default_tile(32)),
                    MoeSpec::new(Activation::SiluMul),
                    "only the tiles change"
                );
            }
        }
        // A tile with a larger K step keeps the largest divisor below it.
        let shape = MoeShape {
            experts: 8,
            topk: 2,
            hidden: 3072,
            inter: 768,
        };
        let s = MoeSpec::new(Activation::SiluMul)
            .gate_up(MoeSpec::default_tile(32).bk_elems(2048))
            .down(MoeSpec::default_tile(32).bk_elems(1024))
            .fit_to(&shape);
        assert_eq!(s.tile(Stage::GateUp).bk_elems, 1536);
        assert_eq!(s.tile(Stage::Down).bk_elems, 768);
        // Unfitted, the refusal names the sizes plainly.
        let e = MoeSpec::new(Activation::SiluMul)
            .fit_to(&shape)
            .check_shape(&MoeShape {
                inter: 360,
                ..shape
            })
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with("inter = 360 must be a multiple of 32 (whole MX blocks)"),
            "{e}"
        );
        let e = MoeSpec::new(Activation::SiluMul)
            .check_shape(&MoeShape {
                inter: 640,
                ..shape
            })
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with(
                "inter 640 (padded to 768) is not a multiple of the down kernel's bk_elems 512"
            ),
            "{e}"
        );
        let e = MoeSpec::new(Activation::SiluMul)
            .check_shape(&MoeShape {
                inter: 256,
                ..shape
            })
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "MoE layer of 8 experts top-2, hidden 3072, intermediate 256: inter 256 is not a multiple of the down kernel's bk_elems 512"
        );
    }
}
