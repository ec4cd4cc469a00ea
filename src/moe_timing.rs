//! A grouped MXFP4 MoE layer's kernels on the MI355X timing model: each kernel of one forward
//! pass predicted on the pass's real routing (sorted ids, block experts, tokens) with
//! full-size, lazily zeroed weights and intermediates, and the layer's share of the weight
//! roofline. `tilegen moe --timing` and the AITER comparison bench both model layers this way.
//!
//! The router (top-k ids and weights) runs on the host; the sort that groups the pairs by
//! expert is the layer's first kernel, so a layer's modeled time is its sort's, its GEMM
//! kernels' and the sorted reduce's.

use std::collections::BTreeMap;
use std::time::Instant;

use tilegen_codeobj::{CodeObject, CodeObjectError};
use tilegen_emu::exec::{AllocError, DeviceMemory, LoadError, MemFault, Program};
use tilegen_kernels::moe::{
    MoeBuffers, MoeError, MoeLayer, MoeShape, Routing, Stage, expert_bias_bytes, expert_group_bytes,
};
use tilegen_mx::MxError;
use tilegen_mx::MxMatrix;
use tilegen_runtime::{DevicePtr, LaunchConfig, RuntimeError};
use tilegen_timing::{Params, Prediction, TimingError, TimingLaunch, TimingOptions};

/// Why a layer could not be modeled.
#[derive(Debug, thiserror::Error)]
pub enum MoeTimingError {
    /// The layer refused the pass (sizes, routing, buffers).
    #[error("planning the pass")]
    Layer(#[from] MoeError),
    /// The expert weights' sizes.
    #[error("sizing the expert weights")]
    Weights(#[from] MxError),
    /// A kernel's code object did not parse.
    #[error("reading the {stage} kernel's code object")]
    CodeObject {
        /// Which kernel.
        stage: Stage,
        /// Why.
        #[source]
        source: CodeObjectError,
    },
    /// A kernel did not load into the model's memory.
    #[error("loading the {stage} kernel")]
    Load {
        /// Which kernel.
        stage: Stage,
        /// Why.
        #[source]
        source: LoadError,
    },
    /// The code object lacks the kernel the layer names.
    #[error("the {stage} kernel's code object has no kernel {name}")]
    NoKernel {
        /// Which kernel.
        stage: Stage,
        /// The name looked for.
        name: String,
    },
    /// A buffer could not be allocated in the model's memory.
    #[error("allocating {bytes} bytes")]
    Alloc {
        /// The size asked for.
        bytes: u64,
        /// Why.
        #[source]
        source: AllocError,
    },
    /// The pass's inputs could not be written.
    #[error("writing the pass's inputs")]
    Write(#[from] MemFault),
    /// A kernel's arguments did not fit its metadata.
    #[error("the {stage} kernel's arguments")]
    Arguments {
        /// Which kernel.
        stage: Stage,
        /// Why.
        #[source]
        source: RuntimeError,
    },
    /// The timing model failed.
    #[error("modeling the {stage} kernel")]
    Model {
        /// Which kernel.
        stage: Stage,
        /// Why.
        #[source]
        source: TimingError,
    },
}

/// One kernel of a modeled pass.
#[derive(Debug, Clone)]
pub struct StageTime {
    /// Which kernel.
    pub stage: Stage,
    /// Its grid and workgroup.
    pub config: LaunchConfig,
    /// The model's prediction.
    pub prediction: Prediction,
    /// CPU seconds the prediction took.
    pub model_seconds: f64,
}

/// Every kernel of `layer`'s pass of the tokens `x` routed by `routing` through a `shape`
/// layer, in launch order, each predicted with `params` and `options`.
pub fn predict_layer(
    layer: &MoeLayer,
    shape: &MoeShape,
    routing: &Routing,
    x: &MxMatrix,
    params: &Params,
    options: &TimingOptions,
) -> Result<Vec<StageTime>, MoeTimingError> {
    let plan = layer.plan(shape, routing)?;
    let inputs = MoeLayer::pass_inputs(x, routing);
    let mut mem = DeviceMemory::new();
    let mut loaded = BTreeMap::new();
    for k in layer.kernels() {
        let stage = k.stage();
        let co = CodeObject::parse(k.code_object())
            .map_err(|source| MoeTimingError::CodeObject { stage, source })?;
        let prog = Program::load(&mut mem, &co, k.name())
            .map_err(|source| MoeTimingError::Load { stage, source })?;
        loaded.insert(stage, (co, prog));
    }
    let lazy = |mem: &mut DeviceMemory, bytes: usize| -> Result<DevicePtr, MoeTimingError> {
        let bytes = bytes.max(1) as u64;
        mem.alloc_lazy(bytes)
            .map(DevicePtr)
            .map_err(|source| MoeTimingError::Alloc { bytes, source })
    };
    let with = |mem: &mut DeviceMemory, bytes: &[u8]| -> Result<DevicePtr, MoeTimingError> {
        let p = lazy(mem, bytes.len())?;
        mem.write(p.0, bytes)?;
        Ok(p)
    };
    let s = &plan.sizes;
    let bufs = MoeBuffers {
        x: with(&mut mem, &inputs[0])?,
        x_scales: with(&mut mem, &inputs[1])?,
        ids: with(&mut mem, &inputs[2])?,
        sorted_ids: lazy(&mut mem, s.sorted_ids)?,
        block_expert: lazy(&mut mem, s.block_expert)?,
        weights: with(&mut mem, &inputs[3])?,
        act: lazy(&mut mem, s.act)?,
        act_scales: lazy(&mut mem, s.act_scales)?,
        parts: lazy(&mut mem, s.parts)?,
        out: lazy(&mut mem, s.out)?,
    };
    let mut wptrs = [DevicePtr(0); 4];
    for (p, b) in wptrs.iter_mut().zip(expert_group_bytes(shape)?) {
        *p = lazy(&mut mem, b.saturating_mul(shape.experts))?;
    }
    let bias = if layer.spec().has_bias() {
        let [g, d] = expert_bias_bytes(shape);
        Some([
            lazy(&mut mem, g.saturating_mul(shape.experts))?,
            lazy(&mut mem, d.saturating_mul(shape.experts))?,
        ])
    } else {
        None
    };
    let launches = layer.launches(shape, &plan, &bufs, wptrs, bias)?;
    if !launches.iter().any(|(stage, ..)| *stage == Stage::Sort) {
        // The gate/up kernel groups this pass itself, and its first column tile's workgroups
        // write the layout the down kernel reads; the sampled method runs only some of them,
        // so the layout they would write (the host's, up to the order within an expert) is
        // in place before, whichever workgroups the model runs.
        let bm = layer.spec().rows_per_block() as usize;
        let host = routing.sort(bm).map_err(MoeError::from)?;
        if let Some((entries, experts)) = host.padded_to(plan.max_blocks) {
            let words =
                |v: Vec<u32>| -> Vec<u8> { v.into_iter().flat_map(u32::to_le_bytes).collect() };
            mem.write(bufs.sorted_ids.0, &words(entries))?;
            mem.write(bufs.block_expert.0, &words(experts))?;
        }
    }
    let mut out = Vec::new();
    for (stage, config, args) in launches {
        let name = layer.kernel(stage).map(|k| k.name()).unwrap_or_default();
        let no_kernel = || MoeTimingError::NoKernel {
            stage,
            name: name.to_string(),
        };
        let (co, prog) = loaded.get(&stage).ok_or_else(no_kernel)?;
        let kd = co.kernel(name).ok_or_else(no_kernel)?;
        let kernarg = tilegen_runtime::kernargs::build(kd, &config, &args)
            .map_err(|source| MoeTimingError::Arguments { stage, source })?;
        let launch = TimingLaunch {
            grid: config.grid,
            block: config.block,
            dynamic_lds: config.dynamic_lds,
            kernarg: &kernarg,
        };
        let t = Instant::now();
        let prediction = tilegen_timing::predict(&mut mem, prog, &launch, params, options)
            .map_err(|source| MoeTimingError::Model { stage, source })?;
        out.push(StageTime {
            stage,
            config,
            prediction,
            model_seconds: t.elapsed().as_secs_f64(),
        });
    }
    Ok(out)
}

/// Bytes of the expert weights (both GEMMs' data and scales) `routing` touches: every expert
/// at least one token goes to, read once.
pub fn touched_weight_bytes(shape: &MoeShape, routing: &Routing) -> Result<u64, MxError> {
    let per_expert: usize = expert_group_bytes(shape)?.iter().sum();
    let touched = routing.counts().iter().filter(|&&c| c > 0).count();
    Ok(touched as u64 * per_expert as u64)
}
