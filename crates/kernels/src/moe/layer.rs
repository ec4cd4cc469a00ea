//! The layer on a device: building a [`MoeSpec`]'s kernels, the expert weights in the
//! preshuffled grouped layouts, and one forward pass.

use half::bf16;
use serde::Serialize;
use tilegen_device::{
    ArgValue, Buffer, Device, DevicePtr, LaunchConfig, LaunchReport, Module, RuntimeError,
};
use tilegen_dsl::{CompileOptions, KernelAttrs};
use tilegen_mx::moe::{ExpertBias, ExpertWeights, MoeRefError, MoeShape};
use tilegen_mx::weights::expert_group_bytes;
use tilegen_mx::{MX_BLOCK, MxError, MxMatrix, Shuffler};

use super::routing::{Routing, RoutingError, SortedBlocks};
use super::spec::{Combine, MoeSpec, MoeSpecError, Stage};
use super::{sort, stages};
use crate::compiled::{BuiltKernel, CompileError, compile_kernel};

/// Why a layer could not be built or run.
#[derive(Debug, thiserror::Error)]
pub enum MoeError {
    /// The spec, or the layer's sizes for it, break a rule; nothing was generated.
    #[error(transparent)]
    Spec(#[from] MoeSpecError),
    /// Compiling a validated kernel failed.
    #[error("building the {stage} kernel")]
    Build {
        /// Which kernel.
        stage: Stage,
        /// Why.
        #[source]
        source: CompileError,
    },
    /// The routing is inconsistent with the layer.
    #[error("routing")]
    Routing(#[from] RoutingError),
    /// Inputs that do not fit the layer.
    #[error("inputs: {0}")]
    Inputs(#[from] MoeInputError),
    /// Preparing inputs (preshuffle, quantization) failed.
    #[error("preparing inputs")]
    Mx(#[from] MxError),
    /// The layer's sizes are invalid.
    #[error(transparent)]
    Shape(#[from] MoeRefError),
    /// The device failed.
    #[error("running the {stage} kernel")]
    Runtime {
        /// Which kernel (or the copies around it).
        stage: Stage,
        /// Why.
        #[source]
        source: RuntimeError,
    },
}

/// How inputs fail to fit a layer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoeInputError {
    /// A buffer would be too large for the kernels' 31-bit offsets.
    #[error("the {what} buffer would pass 2^31 bytes (offsets are 31-bit)")]
    TooLarge {
        /// Which buffer.
        what: &'static str,
    },
    /// An expert index past the layer's experts.
    #[error("expert {expert} of a layer with {experts} experts")]
    Expert {
        /// The index given.
        expert: usize,
        /// The layer's experts.
        experts: usize,
    },
    /// A preshuffled expert tensor of the wrong size.
    #[error("an expert tensor of {bytes} bytes where the layout holds {expected}")]
    TensorBytes {
        /// Its size.
        bytes: usize,
        /// The layout's.
        expected: usize,
    },
    /// An expert bias of the wrong length.
    #[error("expert {expert}: a bias of {values} values where the layer has {expected}")]
    BiasLength {
        /// The expert.
        expert: usize,
        /// Its values.
        values: usize,
        /// The layer's.
        expected: usize,
    },
    /// Biases on one side only: the expert's weights or the layer's (or the kernels').
    #[error(
        "{}",
        if *expert_has { "biases where the layer has none" } else { "no biases where the layer has them" }
    )]
    BiasPresence {
        /// Whether the expert's weights (or the pass's buffers) have biases.
        expert_has: bool,
    },
    /// A routing made for another layer.
    #[error(
        "the routing has {experts} experts and top-{topk}, the layer {layer_experts} and top-{layer_topk}"
    )]
    Routing {
        /// The routing's experts.
        experts: usize,
        /// Its experts per token.
        topk: usize,
        /// The layer's experts.
        layer_experts: usize,
        /// The layer's experts per token.
        layer_topk: usize,
    },
    /// A pass without tokens.
    #[error("no tokens")]
    NoTokens,
    /// Tokens of the wrong shape.
    #[error(
        "tokens are {rows} x {k}, the layer needs {tokens} x {hidden_padded} (the hidden size padded to 256)"
    )]
    Tokens {
        /// Rows given.
        rows: usize,
        /// Elements per row given.
        k: usize,
        /// Tokens routed.
        tokens: usize,
        /// The padded hidden size.
        hidden_padded: usize,
    },
    /// More experts than the device sort groups.
    #[error("{experts} experts; the device sort groups at most {max}")]
    SortExperts {
        /// The routing's experts.
        experts: usize,
        /// The sort's limit.
        max: usize,
    },
    /// The layer has no kernel for a stage.
    #[error("no {stage} kernel")]
    NoKernel {
        /// The stage.
        stage: Stage,
    },
}

/// One compiled kernel of a layer: the [`BuiltKernel`] (read through `Deref`) and its stage.
#[derive(Debug, Clone)]
pub struct MoeKernel {
    stage: Stage,
    kernel: BuiltKernel,
}

impl std::ops::Deref for MoeKernel {
    type Target = BuiltKernel;
    fn deref(&self) -> &BuiltKernel {
        &self.kernel
    }
}

impl MoeKernel {
    /// Which kernel.
    pub fn stage(&self) -> Stage {
        self.stage
    }

    /// The compiled kernel itself.
    pub fn kernel(&self) -> &BuiltKernel {
        &self.kernel
    }
}

/// The compiled kernels of one [`MoeSpec`]: the routing's sort, gate/up, down, and the
/// reduce of [`Combine::SortedReduce`].
#[derive(Debug, Clone)]
pub struct MoeLayer {
    spec: MoeSpec,
    sort: MoeKernel,
    gate_up: MoeKernel,
    down: MoeKernel,
    reduce: Option<MoeKernel>,
}

impl MoeSpec {
    /// Validates the spec and compiles its kernels, in process.
    pub fn build(&self) -> Result<MoeLayer, MoeError> {
        self.build_with(CompileOptions {
            emit_asm: true,
            emit_ir: true,
            code_object_v5: false,
        })
    }

    /// [`MoeSpec::build`] with explicit outputs.
    pub fn build_with(&self, options: CompileOptions) -> Result<MoeLayer, MoeError> {
        self.validate()?;
        let one = |stage: Stage| -> Result<MoeKernel, MoeError> {
            let name = self.kernel_name(stage);
            let (sig, threads, waves_per_eu) = match stage {
                Stage::Sort => (sort::sort_signature().0, sort::SORT_THREADS, None),
                Stage::GateUp | Stage::Down => {
                    let t = self.tile(stage);
                    let sig = match stage {
                        Stage::GateUp => {
                            stages::gate_up_signature(self.has_bias(), self.has_fused_sort()).0
                        }
                        _ => stages::down_signature(self.has_bias()).0,
                    };
                    (sig, t.threads(), t.waves_per_eu)
                }
                Stage::Reduce => (stages::reduce_signature().0, stages::REDUCE_THREADS, None),
            };
            let attrs = KernelAttrs {
                workgroup_size: threads,
                waves_per_eu,
            };
            let kernel = compile_kernel(&name, &sig, attrs, options, |k| match stage {
                Stage::Sort => sort::sort(k, self.rows_per_block()),
                Stage::GateUp => stages::gate_up(k, self),
                Stage::Down => stages::down(k, self),
                Stage::Reduce => stages::reduce(k),
            })
            .map_err(|source| MoeError::Build { stage, source })?;
            Ok(MoeKernel { stage, kernel })
        };
        Ok(MoeLayer {
            spec: self.clone(),
            sort: one(Stage::Sort)?,
            gate_up: one(Stage::GateUp)?,
            down: one(Stage::Down)?,
            reduce: match self.combine_kind() {
                Combine::Atomic => None,
                Combine::SortedReduce => Some(one(Stage::Reduce)?),
            },
        })
    }
}

/// One expert's weights in the layouts the kernels read: both weights in the Shuffler's 5D
/// layout, their scales in its 4D layout (rows padded to 32), and the biases as they are.
#[derive(Debug, Clone, PartialEq)]
pub struct PreshuffledExpert {
    /// Gate/up, `[2 * inter_padded, hidden_padded]`.
    pub gate_up: Vec<u8>,
    /// Its scales.
    pub gate_up_scales: Vec<u8>,
    /// Down, `[hidden, inter_padded]`.
    pub down: Vec<u8>,
    /// Its scales.
    pub down_scales: Vec<u8>,
    /// The biases of a layer that has them (padded, bf16).
    pub bias: Option<ExpertBias>,
}

impl PreshuffledExpert {
    /// Preshuffles one expert's (padded) weights.
    pub fn new(shape: &MoeShape, w: &ExpertWeights) -> Result<Self, MxError> {
        let s = Shuffler::new(1)?;
        let (hp, ip) = (shape.hidden_padded(), shape.inter_padded());
        let [gu, gus, d, ds] = expert_group_bytes(shape)?;
        let check = |what, m: &MxMatrix, rows: usize, k: usize| {
            if m.rows() != rows || m.k() != k {
                return Err(MxError::LengthMismatch {
                    what,
                    expected: rows * k,
                    actual: m.rows() * m.k(),
                });
            }
            Ok(())
        };
        check("gate_up", &w.gate_up, shape.gate_up_rows(), hp)?;
        check("down", &w.down, shape.hidden, ip)?;
        let mut e = PreshuffledExpert {
            gate_up: vec![0; gu],
            gate_up_scales: vec![0; gus],
            down: vec![0; d],
            down_scales: vec![0; ds],
            bias: w.bias.clone(),
        };
        s.preshuffle_b_5d(
            shape.gate_up_rows(),
            hp / 2,
            w.gate_up.data(),
            &mut e.gate_up,
        )?;
        s.preshuffle_scale_4d(
            shape.gate_up_rows(),
            hp / MX_BLOCK,
            w.gate_up.scales(),
            &mut e.gate_up_scales,
        )?;
        s.preshuffle_b_5d(shape.hidden, ip / 2, w.down.data(), &mut e.down)?;
        s.preshuffle_scale_4d(
            shape.hidden,
            ip / MX_BLOCK,
            w.down.scales(),
            &mut e.down_scales,
        )?;
        Ok(e)
    }
}

/// Bytes of one expert's row in the two bias buffers (bf16): gate/up, down.
pub fn expert_bias_bytes(shape: &MoeShape) -> [usize; 2] {
    [2 * shape.gate_up_rows(), 2 * shape.hidden]
}

/// A layer's expert weights on a device, one `Shuffler[E]` buffer per tensor (and one
/// `[E, n]` bf16 buffer per bias of a layer with biases). The buffers are lazily allocated
/// ([`Device::alloc_lazy`]): a batch routes to few of a large layer's experts, only the
/// experts written take memory on a device that backs them lazily, and experts never written
/// read as zero (a routing that never picks them never reads them).
pub struct DeviceWeights<'d> {
    shape: MoeShape,
    bytes: [usize; 4],
    bufs: [Buffer<'d>; 4],
    bias: Option<[Buffer<'d>; 2]>,
}

impl<'d> DeviceWeights<'d> {
    /// Zeroed grouped buffers for `shape`'s experts, with bias buffers if `bias`.
    pub fn new(device: &'d dyn Device, shape: &MoeShape, bias: bool) -> Result<Self, MoeError> {
        shape.validate()?;
        let bytes = expert_group_bytes(shape)?;
        let rt = |source| MoeError::Runtime {
            stage: Stage::GateUp,
            source,
        };
        let alloc = |b: usize| -> Result<Buffer<'d>, MoeError> {
            let total =
                (b as u64)
                    .checked_mul(shape.experts as u64)
                    .ok_or(MoeInputError::TooLarge {
                        what: "grouped weight",
                    })?;
            Buffer::new_lazy(device, total).map_err(rt)
        };
        let [gb, db] = expert_bias_bytes(shape);
        Ok(DeviceWeights {
            shape: *shape,
            bytes,
            bufs: [
                alloc(bytes[0])?,
                alloc(bytes[1])?,
                alloc(bytes[2])?,
                alloc(bytes[3])?,
            ],
            bias: if bias {
                Some([alloc(gb)?, alloc(db)?])
            } else {
                None
            },
        })
    }

    /// Whether the layer has biases.
    pub fn has_bias(&self) -> bool {
        self.bias.is_some()
    }

    /// The device addresses: the four weight tensors (gate/up, its scales, down, its scales)
    /// and the two bias tensors (gate/up, down) of a layer with biases.
    pub fn ptrs(&self) -> ([DevicePtr; 4], Option<[DevicePtr; 2]>) {
        (
            [0, 1, 2, 3].map(|i| self.bufs[i].ptr()),
            self.bias.as_ref().map(|b| [b[0].ptr(), b[1].ptr()]),
        )
    }

    /// Writes expert `e`'s preshuffled weights into its groups.
    pub fn write(&self, e: usize, w: &PreshuffledExpert) -> Result<(), MoeError> {
        if e >= self.shape.experts {
            return Err(MoeInputError::Expert {
                expert: e,
                experts: self.shape.experts,
            }
            .into());
        }
        for ((buf, &len), data) in self.bufs.iter().zip(&self.bytes).zip([
            &w.gate_up,
            &w.gate_up_scales,
            &w.down,
            &w.down_scales,
        ]) {
            if data.len() != len {
                return Err(MoeInputError::TensorBytes {
                    bytes: data.len(),
                    expected: len,
                }
                .into());
            }
            buf.write((e * len) as u64, data)
                .map_err(|source| MoeError::Runtime {
                    stage: Stage::GateUp,
                    source,
                })?;
        }
        match (&self.bias, &w.bias) {
            (None, None) => Ok(()),
            (Some(bufs), Some(b)) => {
                for ((buf, len), v) in bufs
                    .iter()
                    .zip(expert_bias_bytes(&self.shape))
                    .zip([&b.gate_up, &b.down])
                {
                    let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
                    if bytes.len() != len {
                        return Err(MoeInputError::BiasLength {
                            expert: e,
                            values: v.len(),
                            expected: len / 2,
                        }
                        .into());
                    }
                    buf.write((e * len) as u64, &bytes)
                        .map_err(|source| MoeError::Runtime {
                            stage: Stage::GateUp,
                            source,
                        })?;
                }
                Ok(())
            }
            (Some(_), None) => Err(MoeInputError::BiasPresence { expert_has: false }.into()),
            (None, Some(_)) => Err(MoeInputError::BiasPresence { expert_has: true }.into()),
        }
    }

    /// The layer's sizes.
    pub fn shape(&self) -> &MoeShape {
        &self.shape
    }
}

/// What a forward pass gives back.
#[derive(Debug, Clone)]
pub struct MoeRun {
    /// The layer output, `[tokens, hidden]`.
    pub out: Vec<bf16>,
    /// The gate/up kernel's output (the quantized activations) in pair order,
    /// `[tokens * topk, inter_padded]`.
    pub activations: MxMatrix,
    /// The sorted layout the kernels ran on, as the device's sort made it.
    pub sorted: SortedBlocks,
    /// Per launched kernel: which, its grid, and the device's report.
    pub launches: Vec<MoeLaunch>,
}

/// One kernel launch of a forward pass.
#[derive(Debug, Clone, Serialize)]
pub struct MoeLaunch {
    /// Which kernel.
    pub stage: Stage,
    /// Its name.
    pub kernel: String,
    /// Grid and workgroup.
    pub config: LaunchConfig,
    /// What the device reported.
    pub report: LaunchReport,
}

/// The buffers and launch geometry of one pass, shared by the device run and the timing model.
#[derive(Debug, Clone)]
pub struct MoePlan {
    /// Tokens.
    pub tokens: usize,
    /// Blocks the grouped kernels' grids hold: the most the routing's pairs can fill
    /// ([`sort::max_blocks`]); the device's sort marks those past its count.
    pub max_blocks: usize,
    /// Sorted rows the buffers hold (`max_blocks` x block size).
    pub rows: usize,
    /// Bytes of each input and intermediate buffer, by name, in launch-argument terms.
    pub sizes: MoeBuffers<usize>,
}

/// The non-weight buffers of a pass (sizes, device pointers, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct MoeBuffers<T> {
    /// Tokens' FP4 data.
    pub x: T,
    /// Tokens' scales (row-major).
    pub x_scales: T,
    /// Each pair's expert (`[tokens, topk]`, u32): the sort's input.
    pub ids: T,
    /// Sorted pair ids.
    pub sorted_ids: T,
    /// Expert of each block.
    pub block_expert: T,
    /// Routing weights.
    pub weights: T,
    /// Gate/up output (FP4, sorted rows).
    pub act: T,
    /// Its scales (4D layout).
    pub act_scales: T,
    /// f32 contributions per pair (sorted reduce; one byte otherwise).
    pub parts: T,
    /// The bf16 output.
    pub out: T,
}

/// Offsets are 31-bit: every buffer a kernel addresses must stay below 2^31 bytes.
const MAX_BUFFER: usize = (1 << 31) - 1;

impl MoeLayer {
    /// The spec.
    pub fn spec(&self) -> &MoeSpec {
        &self.spec
    }

    /// The kernel of `stage` (`None` for the reduce of an atomic combine).
    pub fn kernel(&self, stage: Stage) -> Option<&MoeKernel> {
        match stage {
            Stage::Sort => Some(&self.sort),
            Stage::GateUp => Some(&self.gate_up),
            Stage::Down => Some(&self.down),
            Stage::Reduce => self.reduce.as_ref(),
        }
    }

    /// The kernels in launch order.
    pub fn kernels(&self) -> Vec<&MoeKernel> {
        let mut v = vec![&self.sort, &self.gate_up, &self.down];
        v.extend(self.reduce.as_ref());
        v
    }

    /// Checks a pass (`tokens` routed by `routing` through a `shape` layer) and plans its
    /// buffers.
    pub fn plan(&self, shape: &MoeShape, routing: &Routing) -> Result<MoePlan, MoeError> {
        self.spec.check_shape(shape)?;
        if routing.experts() != shape.experts || routing.topk() != shape.topk {
            return Err(MoeInputError::Routing {
                experts: routing.experts(),
                topk: routing.topk(),
                layer_experts: shape.experts,
                layer_topk: shape.topk,
            }
            .into());
        }
        let tokens = routing.tokens();
        if tokens == 0 {
            return Err(MoeInputError::NoTokens.into());
        }
        let pairs = tokens * shape.topk;
        let bm = self.spec.rows_per_block() as usize;
        let max_blocks = sort::max_blocks(pairs, shape.experts, bm);
        let rows = max_blocks * bm;
        let (hp, ip, h) = (shape.hidden_padded(), shape.inter_padded(), shape.hidden);
        let big = |what: &'static str, v: Option<usize>| -> Result<usize, MoeError> {
            match v {
                Some(b) if b <= MAX_BUFFER => Ok(b),
                _ => Err(MoeInputError::TooLarge { what }.into()),
            }
        };
        let pad32 = rows.next_multiple_of(Shuffler::S_MN_BLOCK);
        let sizes = MoeBuffers {
            x: big("token", tokens.checked_mul(hp / 2))?,
            x_scales: big("token scale", tokens.checked_mul(hp / MX_BLOCK))?,
            ids: big("routed expert", pairs.checked_mul(4))?,
            sorted_ids: big("sorted id", rows.checked_mul(4))?,
            block_expert: big("block expert", max_blocks.checked_mul(4))?,
            weights: big("routing weight", pairs.checked_mul(4))?,
            act: big("activation", rows.checked_mul(ip / 2))?,
            act_scales: big("activation scale", pad32.checked_mul(ip / MX_BLOCK))?,
            parts: match self.spec.combine_kind() {
                Combine::Atomic => 1,
                Combine::SortedReduce => big(
                    "contribution",
                    pairs.checked_mul(h).and_then(|v| v.checked_mul(4)),
                )?,
            },
            out: big("output", tokens.checked_mul(h * 2))?,
        };
        Ok(MoePlan {
            tokens,
            max_blocks,
            rows,
            sizes,
        })
    }

    /// The launches of a pass: per kernel its grid and workgroup, and its arguments given the
    /// buffers' addresses (`weights` = gate/up, its scales, down, its scales; `bias` =
    /// gate/up, down, needed exactly when the spec has biases).
    pub fn launches(
        &self,
        shape: &MoeShape,
        plan: &MoePlan,
        bufs: &MoeBuffers<DevicePtr>,
        weights: [DevicePtr; 4],
        bias: Option<[DevicePtr; 2]>,
    ) -> Result<Vec<(Stage, LaunchConfig, Vec<ArgValue>)>, MoeError> {
        if bias.is_some() != self.spec.has_bias() {
            return Err(MoeInputError::BiasPresence {
                expert_has: bias.is_some(),
            }
            .into());
        }
        let i = |v: usize| ArgValue::I32(v as i32);
        let p = ArgValue::Ptr;
        // The bias pointer follows the weight scales in both signatures.
        let with_bias = |mut args: Vec<ArgValue>, at: usize, which: usize| {
            if let Some(b) = bias {
                args.insert(at, p(b[which]));
            }
            args
        };
        let blocks = plan.max_blocks as u32;
        let (hp, ip, h) = (shape.hidden_padded(), shape.inter_padded(), shape.hidden);
        let g = self.spec.tile(Stage::GateUp);
        let d = self.spec.tile(Stage::Down);
        let pairs = plan.tokens * shape.topk;
        // A small pass the gate/up kernel groups itself launches no sort.
        let sort_here = self.spec.has_fused_sort() && pairs <= sort::FUSED_SORT_PAIRS;
        let mut gate_up_args = with_bias(
            vec![
                p(bufs.act),
                p(bufs.act_scales),
                p(bufs.x),
                p(bufs.x_scales),
                p(weights[0]),
                p(weights[1]),
                p(bufs.sorted_ids),
                p(bufs.block_expert),
                i(plan.tokens),
                i(shape.topk),
                i(plan.rows),
                i(shape.gate_up_rows()),
                i(hp),
            ],
            6,
            0,
        );
        if self.spec.has_fused_sort() {
            gate_up_args.extend([p(bufs.ids), i(usize::from(sort_here))]);
        }
        let mut v = Vec::new();
        if !sort_here {
            v.push(sort_launch(
                [bufs.sorted_ids, bufs.block_expert, bufs.ids],
                pairs,
                shape.experts,
                plan.max_blocks,
            ));
        }
        v.extend([
            (
                Stage::GateUp,
                LaunchConfig {
                    grid: [(shape.gate_up_rows() / g.bn as usize) as u32, blocks, 1],
                    block: [g.threads(), 1, 1],
                    dynamic_lds: 0,
                },
                gate_up_args,
            ),
            (
                Stage::Down,
                LaunchConfig {
                    grid: [h.div_ceil(d.bn as usize) as u32, blocks, 1],
                    block: [d.threads(), 1, 1],
                    dynamic_lds: 0,
                },
                with_bias(
                    vec![
                        p(match self.spec.combine_kind() {
                            Combine::Atomic => bufs.out,
                            Combine::SortedReduce => bufs.parts,
                        }),
                        p(bufs.act),
                        p(bufs.act_scales),
                        p(weights[2]),
                        p(weights[3]),
                        p(bufs.sorted_ids),
                        p(bufs.block_expert),
                        p(bufs.weights),
                        i(plan.tokens),
                        i(shape.topk),
                        i(plan.rows),
                        i(h),
                        i(ip),
                    ],
                    5,
                    1,
                ),
            ),
        ]);
        if self.reduce.is_some() {
            let per_group = (stages::REDUCE_THREADS * stages::REDUCE_COLUMNS) as usize;
            v.push((
                Stage::Reduce,
                LaunchConfig {
                    grid: [h.div_ceil(per_group) as u32, plan.tokens as u32, 1],
                    block: [stages::REDUCE_THREADS, 1, 1],
                    dynamic_lds: 0,
                },
                vec![
                    p(bufs.out),
                    p(bufs.parts),
                    i(plan.tokens),
                    i(shape.topk),
                    i(h),
                ],
            ));
        }
        Ok(v)
    }

    /// The host bytes of the small per-pass inputs: tokens (data, scales), each pair's expert,
    /// routing weights.
    pub fn pass_inputs(x: &MxMatrix, routing: &Routing) -> [Vec<u8>; 4] {
        [
            x.data().to_vec(),
            x.scales().to_vec(),
            ids_bytes(routing),
            routing
                .weights()
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect(),
        ]
    }

    /// One forward pass of `x` (`[tokens, hidden_padded]`, MXFP4) routed by `routing` through
    /// the experts in `weights`, on `device`.
    pub fn run(
        &self,
        device: &dyn Device,
        weights: &DeviceWeights<'_>,
        x: &MxMatrix,
        routing: &Routing,
    ) -> Result<MoeRun, MoeError> {
        let shape = *weights.shape();
        let plan = self.plan(&shape, routing)?;
        if x.rows() != plan.tokens || x.k() != shape.hidden_padded() {
            return Err(MoeInputError::Tokens {
                rows: x.rows(),
                k: x.k(),
                tokens: plan.tokens,
                hidden_padded: shape.hidden_padded(),
            }
            .into());
        }
        let rt = |stage| move |source| MoeError::Runtime { stage, source };
        let [xd, xs, ids, wts] = Self::pass_inputs(x, routing);
        let up = |bytes: &[u8]| Buffer::upload(device, bytes).map_err(rt(Stage::GateUp));
        let zeroed = |len: usize| Buffer::new(device, len as u64).map_err(rt(Stage::GateUp));
        let s = &plan.sizes;
        let bufs = MoeBuffers {
            x: up(&xd)?,
            x_scales: up(&xs)?,
            ids: up(&ids)?,
            sorted_ids: zeroed(s.sorted_ids)?,
            block_expert: zeroed(s.block_expert)?,
            weights: up(&wts)?,
            act: zeroed(s.act)?,
            act_scales: zeroed(s.act_scales)?,
            parts: zeroed(s.parts)?,
            out: zeroed(s.out)?,
        };
        let ptrs = MoeBuffers {
            x: bufs.x.ptr(),
            x_scales: bufs.x_scales.ptr(),
            ids: bufs.ids.ptr(),
            sorted_ids: bufs.sorted_ids.ptr(),
            block_expert: bufs.block_expert.ptr(),
            weights: bufs.weights.ptr(),
            act: bufs.act.ptr(),
            act_scales: bufs.act_scales.ptr(),
            parts: bufs.parts.ptr(),
            out: bufs.out.ptr(),
        };
        let (wptrs, bias) = weights.ptrs();
        let mut launches = Vec::new();
        for (stage, config, args) in self.launches(&shape, &plan, &ptrs, wptrs, bias)? {
            let kernel = self
                .kernel(stage)
                .ok_or(MoeInputError::NoKernel { stage })?;
            let module: Module = device.load(kernel.code_object()).map_err(rt(stage))?;
            let report = tilegen_device::launch(device, &module, kernel.name(), &config, &args)
                .map_err(rt(stage))?;
            launches.push(MoeLaunch {
                stage,
                kernel: kernel.name().to_string(),
                config,
                report,
            });
        }
        let out_bytes = bufs.out.to_vec().map_err(rt(Stage::Down))?;
        let out = out_bytes
            .chunks_exact(2)
            .map(|b| bf16::from_le_bytes([b[0], b[1]]))
            .collect();
        let sorted = self.read_sorted(
            (plan.tokens * shape.topk) as u32,
            &bufs.sorted_ids,
            &bufs.block_expert,
        )?;
        let act = bufs.act.to_vec().map_err(rt(Stage::GateUp))?;
        let act_scales = bufs.act_scales.to_vec().map_err(rt(Stage::GateUp))?;
        let activations = pair_order(&shape, &plan, &sorted, &act, &act_scales)?;
        Ok(MoeRun {
            out,
            activations,
            sorted,
            launches,
        })
    }
}

impl MoeLayer {
    /// Runs the layer's sort alone on `device`: `routing`'s pairs grouped by expert into
    /// blocks, as the device's sort makes them (each expert's pairs in the order its atomics
    /// served them; [`SortedBlocks::canonical`] orders them as [`Routing::sort`] does).
    pub fn sort_on(
        &self,
        device: &dyn Device,
        routing: &Routing,
    ) -> Result<SortedBlocks, MoeError> {
        let experts = routing.experts();
        if experts > sort::MAX_SORT_EXPERTS {
            return Err(MoeInputError::SortExperts {
                experts,
                max: sort::MAX_SORT_EXPERTS,
            }
            .into());
        }
        let pairs = routing.ids().len();
        if pairs == 0 {
            return Err(MoeInputError::NoTokens.into());
        }
        let bm = self.spec.rows_per_block() as usize;
        let max_blocks = sort::max_blocks(pairs, experts, bm);
        let rt = move |source| MoeError::Runtime {
            stage: Stage::Sort,
            source,
        };
        let words = |what: &'static str, n: usize| match n.checked_mul(4) {
            Some(b) if b <= MAX_BUFFER => Ok(b),
            _ => Err(MoeError::from(MoeInputError::TooLarge { what })),
        };
        let ids = Buffer::upload(device, &ids_bytes(routing)).map_err(rt)?;
        let sorted =
            Buffer::new(device, words("sorted id", max_blocks * bm)? as u64).map_err(rt)?;
        let experts_buf =
            Buffer::new(device, words("block expert", max_blocks)? as u64).map_err(rt)?;
        let (_, config, args) = sort_launch(
            [sorted.ptr(), experts_buf.ptr(), ids.ptr()],
            pairs,
            experts,
            max_blocks,
        );
        let module: Module = device.load(self.sort.code_object()).map_err(rt)?;
        tilegen_device::launch(device, &module, self.sort.name(), &config, &args).map_err(rt)?;
        self.read_sorted(pairs as u32, &sorted, &experts_buf)
    }

    /// The sorted layout in a pass's buffers after its sort ran.
    fn read_sorted(
        &self,
        pad: u32,
        sorted_ids: &Buffer<'_>,
        block_expert: &Buffer<'_>,
    ) -> Result<SortedBlocks, MoeError> {
        let words = |buf: &Buffer<'_>| -> Result<Vec<u32>, MoeError> {
            let bytes = buf.to_vec().map_err(|source| MoeError::Runtime {
                stage: Stage::Sort,
                source,
            })?;
            Ok(bytes
                .chunks_exact(4)
                .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
                .collect())
        };
        Ok(SortedBlocks::from_device(
            self.spec.rows_per_block() as usize,
            pad,
            words(sorted_ids)?,
            words(block_expert)?,
        )?)
    }
}

/// Each pair's expert as the sort reads them: `[tokens * topk]` u32, little-endian.
fn ids_bytes(routing: &Routing) -> Vec<u8> {
    routing.ids().iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// The sort's launch: one workgroup over `pairs` pairs of `experts` experts into grids of
/// `max_blocks` blocks (`ptrs` = sorted ids, block experts, the pairs' experts).
fn sort_launch(
    ptrs: [DevicePtr; 3],
    pairs: usize,
    experts: usize,
    max_blocks: usize,
) -> (Stage, LaunchConfig, Vec<ArgValue>) {
    let i = |v: usize| ArgValue::I32(v as i32);
    (
        Stage::Sort,
        LaunchConfig {
            grid: [1, 1, 1],
            block: [sort::SORT_THREADS, 1, 1],
            dynamic_lds: 0,
        },
        vec![
            ArgValue::Ptr(ptrs[0]),
            ArgValue::Ptr(ptrs[1]),
            ArgValue::Ptr(ptrs[2]),
            i(pairs),
            i(experts),
            i(max_blocks),
        ],
    )
}

/// The gate/up output (sorted rows, scales in the 4D layout) as a `[pairs, inter_padded]`
/// matrix in pair order.
fn pair_order(
    shape: &MoeShape,
    plan: &MoePlan,
    sorted: &SortedBlocks,
    act: &[u8],
    act_scales: &[u8],
) -> Result<MxMatrix, MoeError> {
    let ip = shape.inter_padded();
    let (kb, ks) = (ip / 2, ip / MX_BLOCK);
    let mut scales = vec![0u8; plan.rows * ks];
    Shuffler::new(1)?.unshuffle_scale_4d(plan.rows, ks, act_scales, &mut scales)?;
    let pairs = plan.tokens * shape.topk;
    let mut data = vec![0u8; pairs * kb];
    let mut sc = vec![0u8; pairs * ks];
    for (r, &p) in sorted.entries().iter().enumerate() {
        let p = p as usize;
        if p >= pairs {
            continue;
        }
        data[p * kb..(p + 1) * kb].copy_from_slice(&act[r * kb..(r + 1) * kb]);
        sc[p * ks..(p + 1) * ks].copy_from_slice(&scales[r * ks..(r + 1) * ks]);
    }
    Ok(MxMatrix::from_parts(pairs, ip, data, sc)?)
}
