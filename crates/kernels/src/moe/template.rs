//! MoE templates: a model's MoE layer and the space of [`MoeSpec`]s to build and rank for it,
//! as `templates/moe/<model>.toml` holds them (see `templates/moe/README.md`). The GEMM
//! templates beside them tune each expert's GEMM as a dense GEMM; these carry what the grouped
//! kernels need on top: the routing sizes, the activation, the block size and the combine.

use serde::{Deserialize, Serialize};

use super::spec::{Activation, Combine, MoeShape, MoeSpec, MoeSpecError};

/// How a model's router turns logits into experts and weights (see [`Scoring`]). A sigmoid
/// router's per-expert selection bias is learned, so it is the checkpoint's, not the template's.
///
/// [`Scoring`]: super::Scoring
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "scoring", rename_all = "kebab-case", deny_unknown_fields)]
pub enum MoeRouter {
    /// The k largest logits, then a softmax over those k (gpt-oss).
    TopkSoftmax,
    /// Softmax over all experts, then the k largest (Mixtral, Qwen-MoE).
    SoftmaxTopk {
        /// Rescale the chosen weights to sum to 1.
        renormalize: bool,
    },
    /// Sigmoid scores, experts chosen within the best `keep` of `groups` groups, weights
    /// normalized and scaled (DeepSeek-V3, Kimi-K2).
    SigmoidGrouped {
        /// Equal groups of experts.
        groups: usize,
        /// Groups kept per token.
        keep: usize,
        /// Routed scaling factor.
        scale: f32,
    },
}

/// A model's MoE layer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeModel {
    /// The model's name (no slashes).
    pub name: String,
    /// Where the sizes come from.
    pub source: String,
    /// Experts.
    pub experts: usize,
    /// Experts per token.
    pub topk: usize,
    /// Hidden size.
    pub hidden: usize,
    /// Intermediate size of one expert.
    pub inter: usize,
    /// The activation.
    pub activation: Activation,
    /// Whether the experts carry biases (gpt-oss's `gate_up_proj_bias`, `down_proj_bias`).
    #[serde(default)]
    pub bias: bool,
    /// How the router picks each token's experts.
    pub router: MoeRouter,
    /// Token counts to rank the space at (strictly ascending).
    pub tokens: Vec<usize>,
}

/// The space: the product of its lists (one value each where the default is meant).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeSpace {
    /// Rows per sorted block (BM of both kernels).
    pub block_m: Vec<u32>,
    /// BN of the gate/up kernel (multiples of 64).
    pub gate_up_bn: Vec<u32>,
    /// BN of the down kernel.
    pub down_bn: Vec<u32>,
    /// Columns per wave (both kernels).
    pub wn: Vec<u32>,
    /// K elements per stage (both kernels; must divide the padded sizes).
    pub bk_elems: Vec<u32>,
    /// The depth-2 pipeline (both kernels).
    pub b_prefetch: Vec<bool>,
    /// The combine.
    pub combine: Vec<Combine>,
}

/// One `templates/moe/<model>.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MoeTemplate {
    /// The layer.
    pub model: MoeModel,
    /// The space.
    pub space: MoeSpace,
}

/// A template's space enumerated: the specs that build for its layer, and the refused ones
/// with their rule.
#[derive(Debug, Clone)]
pub struct MoeTemplatePlan {
    /// Valid specs, in the space's order.
    pub specs: Vec<MoeSpec>,
    /// Refused combinations and why.
    pub refused: Vec<(MoeSpec, MoeSpecError)>,
}

impl MoeTemplate {
    /// The layer's sizes.
    pub fn shape(&self) -> MoeShape {
        MoeShape {
            experts: self.model.experts,
            topk: self.model.topk,
            hidden: self.model.hidden,
            inter: self.model.inter,
        }
    }

    /// Checks what the types cannot: non-empty lists without repeats, ascending token counts,
    /// valid sizes, a router whose groups fit the experts.
    pub fn check(&self) -> Result<(), String> {
        fn once<T: PartialEq + std::fmt::Debug>(what: &str, v: &[T]) -> Result<(), String> {
            if v.is_empty() {
                return Err(format!("space.{what} is empty"));
            }
            for (i, x) in v.iter().enumerate() {
                if v[..i].contains(x) {
                    return Err(format!("space.{what} names {x:?} twice"));
                }
            }
            Ok(())
        }
        let s = &self.space;
        once("block_m", &s.block_m)?;
        once("gate_up_bn", &s.gate_up_bn)?;
        once("down_bn", &s.down_bn)?;
        once("wn", &s.wn)?;
        once("bk_elems", &s.bk_elems)?;
        once("b_prefetch", &s.b_prefetch)?;
        once("combine", &s.combine)?;
        let t = &self.model.tokens;
        if t.is_empty() || t[0] == 0 || t.windows(2).any(|w| w[0] >= w[1]) {
            return Err(format!(
                "model.tokens {t:?} must be positive and strictly ascending"
            ));
        }
        if self.model.name.is_empty() || self.model.name.contains('/') {
            return Err(format!(
                "model.name {:?} must be a non-empty name without slashes",
                self.model.name
            ));
        }
        if let MoeRouter::SigmoidGrouped {
            groups,
            keep,
            scale,
        } = self.model.router
        {
            let (experts, topk) = (self.model.experts, self.model.topk);
            if groups == 0
                || keep == 0
                || keep > groups
                || !experts.is_multiple_of(groups)
                || experts / groups * keep < topk
            {
                return Err(format!(
                    "model.router: {groups} groups (keeping {keep}) must divide the {experts} experts, keep 1 to {groups} of them and hold top-{topk}"
                ));
            }
            if !(scale.is_finite() && scale > 0.0) {
                return Err(format!(
                    "model.router: scale {scale} must be positive and finite"
                ));
            }
        }
        self.shape().validate().map_err(|e| e.to_string())
    }

    /// Every combination of the space, checked by [`MoeSpec::validate`] and
    /// [`MoeSpec::check_shape`] for the template's layer.
    pub fn plan(&self) -> MoeTemplatePlan {
        let s = &self.space;
        let shape = self.shape();
        let mut plan = MoeTemplatePlan {
            specs: Vec::new(),
            refused: Vec::new(),
        };
        for &bm in &s.block_m {
            for &gbn in &s.gate_up_bn {
                for &dbn in &s.down_bn {
                    for &wn in &s.wn {
                        for &bk in &s.bk_elems {
                            for &pf in &s.b_prefetch {
                                for &combine in &s.combine {
                                    let tile = |bn: u32| {
                                        MoeSpec::default_tile(bm)
                                            .bn(bn)
                                            .wn(wn)
                                            .bk_elems(bk)
                                            .b_prefetch(pf)
                                    };
                                    let spec = MoeSpec::new(self.model.activation)
                                        .bias(self.model.bias)
                                        .block_m(bm)
                                        .gate_up(tile(gbn))
                                        .down(tile(dbn))
                                        .combine(combine);
                                    match spec.validate().and_then(|()| spec.check_shape(&shape)) {
                                        Ok(()) => plan.specs.push(spec),
                                        Err(e) => plan.refused.push((spec, e)),
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        plan
    }
}
