//! MoE templates: a model's MoE layer and the space of [`MoeSpec`]s to build and rank for it,
//! as `templates/moe/<model>.toml` holds them (see `templates/moe/README.md`). The GEMM
//! templates beside them tune each expert's GEMM as a dense GEMM; these carry what the grouped
//! kernels need on top: the routing sizes, the activation, the block size and the combine.

use std::fmt;

use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

use super::spec::{Activation, Combine, MoeShape, MoeSpec, MoeSpecError};
use crate::gemm::{KernelSpec, Knob, KnobValue, PrebSpec, Variant};

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

/// The space: the product of its lists. The layer's own axes (the block size, each kernel's BN,
/// the combine) are declared here; the GEMM tile knobs both kernels share are the GEMM table's
/// axes ([`MoeSpace::tile_knobs`]), read with their names, types, rules and defaults from
/// there (`Knob::axis_value`), each optional (a knob not listed takes its default).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoeSpace {
    /// Rows per sorted block (BM of both kernels).
    pub block_m: Vec<u32>,
    /// BN of the gate/up kernel (multiples of 64).
    pub gate_up_bn: Vec<u32>,
    /// BN of the down kernel.
    pub down_bn: Vec<u32>,
    /// Every tile knob's values (both kernels), in [`MoeSpace::tile_knobs`]' order.
    tile: Vec<(Knob, Vec<KnobValue>)>,
    /// The combine.
    pub combine: Vec<Combine>,
}

/// A key of a MoE template's `[space]` that is the layer's own, not a GEMM tile knob's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnKey {
    BlockM,
    GateUpBn,
    DownBn,
    Combine,
}

impl OwnKey {
    const ALL: [OwnKey; 4] = [
        OwnKey::BlockM,
        OwnKey::GateUpBn,
        OwnKey::DownBn,
        OwnKey::Combine,
    ];

    fn name(self) -> &'static str {
        match self {
            OwnKey::BlockM => "block_m",
            OwnKey::GateUpBn => "gate_up_bn",
            OwnKey::DownBn => "down_bn",
            OwnKey::Combine => "combine",
        }
    }
}

impl MoeSpace {
    /// The GEMM knobs a MoE space searches on both kernels' tiles, in the order it nests them:
    /// every knob with a searched template axis that a layer's tiles take (not
    /// [`MoeSpec::FIXED_KNOBS`]), except `variant` (the tiles are preb) and `bn` (each kernel
    /// has its own), in the table's order, save that `wn` comes first: MoE plans have always
    /// nested `wn` outside `bk_elems`, and their order is what their listings and keys are
    /// indexed by. A switch still precedes the knobs it makes a place for.
    pub fn tile_knobs() -> impl Iterator<Item = Knob> {
        let shared = |k: &Knob| {
            k.axis().searched()
                && !MoeSpec::FIXED_KNOBS.contains(k)
                && !matches!(k, Knob::Variant | Knob::Bn | Knob::Wn)
        };
        std::iter::once(Knob::Wn).chain(Knob::ALL.iter().copied().filter(shared))
    }

    /// Every key of a MoE template's `[space]`, in the order the space nests them: the block
    /// size and each kernel's BN outermost, then the tile knobs, the combine innermost.
    pub fn keys() -> impl Iterator<Item = &'static str> {
        [OwnKey::BlockM, OwnKey::GateUpBn, OwnKey::DownBn]
            .into_iter()
            .map(OwnKey::name)
            .chain(Self::tile_knobs().map(Knob::name))
            .chain([OwnKey::Combine.name()])
    }

    /// Tile knob `k`'s values (none for a knob the space does not search).
    pub fn axis(&self, k: Knob) -> &[KnobValue] {
        self.tile
            .iter()
            .find(|(a, _)| *a == k)
            .map_or(&[], |(_, v)| v.as_slice())
    }

    /// Replaces tile knob `k`'s values (a knob the space does not search keeps none).
    pub fn set_axis(&mut self, k: Knob, values: impl IntoIterator<Item = KnobValue>) {
        if let Some((_, v)) = self.tile.iter_mut().find(|(a, _)| *a == k) {
            *v = values.into_iter().collect();
        }
    }

    /// Every combination of the tile axes on `base`, the first axis outermost. A knob the tile
    /// has no place for (`deep_prime` without `b_prefetch`) is not multiplied in, as in the
    /// GEMM templates' spaces.
    fn tiles(&self, base: PrebSpec) -> Vec<PrebSpec> {
        let mut out: Vec<KernelSpec> = vec![base.into()];
        for (k, values) in &self.tile {
            out = out
                .into_iter()
                .flat_map(|t| {
                    if k.get(&t).is_none() {
                        return vec![t];
                    }
                    values
                        .iter()
                        .filter_map(|&v| {
                            let mut t = t.clone();
                            // The tile has the knob and `v` is of its type: the set holds.
                            k.set(&mut t, v).ok().map(|()| t)
                        })
                        .collect()
                })
                .collect();
        }
        // No tile knob changes the variant: every tile is still preb.
        out.into_iter()
            .filter_map(|t| t.as_preb().cloned())
            .collect()
    }
}

impl<'de> Deserialize<'de> for MoeSpace {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        /// A `[space]` key.
        enum Key {
            Own(OwnKey),
            Tile(Knob),
        }
        impl<'de> Deserialize<'de> for Key {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                if let Some(k) = OwnKey::ALL.iter().find(|k| k.name() == name) {
                    return Ok(Key::Own(*k));
                }
                MoeSpace::tile_knobs()
                    .find(|k| k.name() == name)
                    .map(Key::Tile)
                    .ok_or_else(|| {
                        let known: Vec<&str> = MoeSpace::keys().collect();
                        serde::de::Error::custom(format!(
                            "unknown key `space.{name}`; a MoE space's keys are {}",
                            known.join(", ")
                        ))
                    })
            }
        }
        /// One tile knob's list, each element read by the GEMM table's axis rules.
        struct Axis(Knob);
        impl<'de> DeserializeSeed<'de> for Axis {
            type Value = Vec<KnobValue>;
            fn deserialize<D: serde::Deserializer<'de>>(
                self,
                d: D,
            ) -> Result<Self::Value, D::Error> {
                d.deserialize_seq(self)
            }
        }
        impl<'de> Visitor<'de> for Axis {
            type Value = Vec<KnobValue>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a list of {} values", self.0.name())
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(v) = a.next_element_seed(Value(self.0))? {
                    out.push(v);
                }
                Ok(out)
            }
        }
        struct Value(Knob);
        impl<'de> DeserializeSeed<'de> for Value {
            type Value = KnobValue;
            fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<KnobValue, D::Error> {
                self.0.axis_value(d)
            }
        }
        struct Keys;
        impl<'de> Visitor<'de> for Keys {
            type Value = MoeSpace;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a MoE template's space (a table of lists)")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<MoeSpace, A::Error> {
                use serde::de::Error;
                let (mut block_m, mut gate_up_bn, mut down_bn, mut combine) =
                    (None, None, None, None);
                let mut tile: Vec<(Knob, Vec<KnobValue>)> = Vec::new();
                while let Some(key) = a.next_key::<Key>()? {
                    let name = match key {
                        Key::Own(k) => k.name(),
                        Key::Tile(k) => k.name(),
                    };
                    let taken = match key {
                        Key::Own(OwnKey::BlockM) => block_m.replace(a.next_value()?).is_some(),
                        Key::Own(OwnKey::GateUpBn) => gate_up_bn.replace(a.next_value()?).is_some(),
                        Key::Own(OwnKey::DownBn) => down_bn.replace(a.next_value()?).is_some(),
                        Key::Own(OwnKey::Combine) => combine.replace(a.next_value()?).is_some(),
                        Key::Tile(k) => {
                            let taken = tile.iter().any(|(x, _)| *x == k);
                            tile.push((k, a.next_value_seed(Axis(k))?));
                            taken
                        }
                    };
                    if taken {
                        return Err(A::Error::duplicate_field(name));
                    }
                }
                let missing = |k: OwnKey| A::Error::missing_field(k.name());
                // A tile knob the template does not search takes its default on both kernels.
                let tile = MoeSpace::tile_knobs()
                    .map(|k| match tile.iter().position(|(x, _)| *x == k) {
                        Some(i) => tile.swap_remove(i),
                        None => (k, vec![k.default_value(Variant::Preb)]),
                    })
                    .collect();
                Ok(MoeSpace {
                    block_m: block_m.ok_or_else(|| missing(OwnKey::BlockM))?,
                    gate_up_bn: gate_up_bn.ok_or_else(|| missing(OwnKey::GateUpBn))?,
                    down_bn: down_bn.ok_or_else(|| missing(OwnKey::DownBn))?,
                    tile,
                    combine: combine.ok_or_else(|| missing(OwnKey::Combine))?,
                })
            }
        }
        d.deserialize_map(Keys)
    }
}

impl Serialize for MoeSpace {
    /// The space as a template writes it: the layer's own lists, then every tile knob's (an
    /// unset optional count as 0).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        struct Item(KnobValue);
        impl Serialize for Item {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match self.0 {
                    KnobValue::Variant(x) => x.serialize(s),
                    KnobValue::Count(x) | KnobValue::Auto(Some(x)) => x.serialize(s),
                    KnobValue::Auto(None) => 0u32.serialize(s),
                    KnobValue::Flag(x) => x.serialize(s),
                    KnobValue::Mma(x) => x.serialize(s),
                    KnobValue::Policy(x) => x.serialize(s),
                    KnobValue::Out(x) => x.serialize(s),
                }
            }
        }
        let mut m = s.serialize_map(Some(OwnKey::ALL.len() + self.tile.len()))?;
        m.serialize_entry(OwnKey::BlockM.name(), &self.block_m)?;
        m.serialize_entry(OwnKey::GateUpBn.name(), &self.gate_up_bn)?;
        m.serialize_entry(OwnKey::DownBn.name(), &self.down_bn)?;
        for (k, values) in &self.tile {
            let items: Vec<Item> = values.iter().map(|&v| Item(v)).collect();
            m.serialize_entry(k.name(), &items)?;
        }
        m.serialize_entry(OwnKey::Combine.name(), &self.combine)?;
        m.end()
    }
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
        fn once<T: PartialEq>(
            what: &str,
            v: &[T],
            show: impl Fn(&T) -> String,
        ) -> Result<(), String> {
            if v.is_empty() {
                return Err(format!("space.{what} is empty"));
            }
            for (i, x) in v.iter().enumerate() {
                if v[..i].contains(x) {
                    return Err(format!("space.{what} names {} twice", show(x)));
                }
            }
            Ok(())
        }
        let s = &self.space;
        once(OwnKey::BlockM.name(), &s.block_m, u32::to_string)?;
        once(OwnKey::GateUpBn.name(), &s.gate_up_bn, u32::to_string)?;
        once(OwnKey::DownBn.name(), &s.down_bn, u32::to_string)?;
        for (k, values) in &s.tile {
            once(k.name(), values, KnobValue::to_string)?;
        }
        once(OwnKey::Combine.name(), &s.combine, |c| format!("{c:?}"))?;
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
            let tiles = s.tiles(MoeSpec::default_tile(bm));
            for &gbn in &s.gate_up_bn {
                for &dbn in &s.down_bn {
                    for tile in &tiles {
                        for &combine in &s.combine {
                            let spec = MoeSpec::new(self.model.activation)
                                .bias(self.model.bias)
                                .block_m(bm)
                                .gate_up(tile.clone().bn(gbn))
                                .down(tile.clone().bn(dbn))
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
        plan
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/moe")
    }

    /// templates/moe/README.md documents every key of a MoE space, in the order the space
    /// nests them, and no other.
    #[test]
    fn the_readme_documents_every_space_key() {
        let readme = std::fs::read_to_string(dir().join("README.md")).unwrap();
        let block = readme
            .split("```toml")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap();
        let documented: Vec<&str> = block
            .split("[space]")
            .nth(1)
            .unwrap()
            .lines()
            .skip(1)
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim()))
            .collect();
        assert_eq!(documented, MoeSpace::keys().collect::<Vec<_>>());
    }

    /// The shipped spaces read, write back as they read, and take each GEMM tile knob's rule.
    #[test]
    fn spaces_read_with_the_knobs_rules() {
        let text = std::fs::read_to_string(dir().join("gpt-oss-20b.toml")).unwrap();
        let t: MoeTemplate = toml::from_str(&text).unwrap();
        assert_eq!(t.space.axis(Knob::Wn), [32, 64].map(KnobValue::Count));
        assert_eq!(t.space.axis(Knob::DeepPrime), [KnobValue::Flag(false)]);
        let again: MoeTemplate = toml::from_str(&toml::to_string(&t).unwrap()).unwrap();
        assert_eq!(again, t);
        let with = |from: &str, to: &str| {
            assert!(text.contains(from));
            toml::from_str::<MoeTemplate>(&text.replace(from, to))
        };
        let e = with("wn = [32, 64]", "wn = [32, 40]").unwrap_err();
        assert!(
            e.to_string()
                .contains("space.wn = 40 must be a multiple of 16"),
            "{e}"
        );
        let e = with("wn = [32, 64]", "wn = [32, 64]\nsplit_k = [2]").unwrap_err();
        assert!(e.to_string().contains("unknown key `space.split_k`"), "{e}");
        let e = with("wn = [32, 64]", "wn = [32, 64]\nwaves_per_eu = [9]").unwrap_err();
        assert!(e.to_string().contains("space.waves_per_eu = 9"), "{e}");
        // A knob the tile has no place for is not multiplied in.
        let total = |t: &MoeTemplate| {
            let p = t.plan();
            p.specs.len() + p.refused.len()
        };
        let deep = with("wn = [32, 64]", "wn = [32, 64]\ndeep_prime = [false, true]").unwrap();
        assert_eq!(t.space.axis(Knob::BPrefetch).len(), 2);
        // b_prefetch off keeps its one tile, on takes both deep_prime values: 1 + 2 for 1 + 1.
        assert_eq!(2 * total(&deep), 3 * total(&t));
    }
}
