//! The models `tilegen moe --model` knows: the MoE templates (`templates/moe/*.toml`), built
//! into the binary so that it runs outside the repository. A model's `--model` name, its help
//! line, sizes, activation, biases and router all come from its template.

use std::ffi::OsStr;
use std::sync::OnceLock;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use tilegen::kernels::moe::{Activation, MoeRouter, MoeTemplate};

/// The MoE templates: where each lives in the repository, and its text.
const MOE_TEMPLATES: [(&str, &str); 4] = [
    (
        "templates/moe/gpt-oss-20b.toml",
        include_str!("../../../templates/moe/gpt-oss-20b.toml"),
    ),
    (
        "templates/moe/gpt-oss-120b.toml",
        include_str!("../../../templates/moe/gpt-oss-120b.toml"),
    ),
    (
        "templates/moe/deepseek-v3.toml",
        include_str!("../../../templates/moe/deepseek-v3.toml"),
    ),
    (
        "templates/moe/kimi-k2.toml",
        include_str!("../../../templates/moe/kimi-k2.toml"),
    ),
];

/// The built-in MoE templates, parsed and checked once (a broken one is a build's fault, named
/// here rather than hidden).
fn catalog() -> Result<&'static [MoeTemplate], &'static str> {
    static CATALOG: OnceLock<Result<Vec<MoeTemplate>, String>> = OnceLock::new();
    let parsed = CATALOG.get_or_init(|| {
        MOE_TEMPLATES
            .iter()
            .map(|(path, text)| {
                let t: MoeTemplate =
                    toml::from_str(text).map_err(|e| format!("the built-in {path}: {e}"))?;
                t.check().map_err(|e| format!("the built-in {path}: {e}"))?;
                Ok(t)
            })
            .collect()
    });
    parsed.as_deref().map_err(String::as_str)
}

/// A model's layer in one line, for `--help`.
fn describe(t: &MoeTemplate) -> String {
    let m = &t.model;
    let activation = match m.activation {
        Activation::Swiglu => "SwiGLU",
        Activation::SiluMul => "SiLU",
    };
    let router = match m.router {
        MoeRouter::TopkSoftmax => "top-k then softmax".to_string(),
        MoeRouter::SoftmaxTopk { renormalize } => format!(
            "softmax then top-k{}",
            if renormalize { ", renormalized" } else { "" }
        ),
        MoeRouter::SigmoidGrouped {
            groups: 1, scale, ..
        } => format!("sigmoid routing scaled by {scale}"),
        MoeRouter::SigmoidGrouped {
            groups,
            keep,
            scale,
        } => format!("sigmoid routing in {groups} groups (best {keep} kept) scaled by {scale}"),
    };
    format!(
        "{} experts, top-{}, hidden {}, intermediate {}, {activation}{}, {router}",
        m.experts,
        m.topk,
        m.hidden,
        m.inter,
        if m.bias { " with expert biases" } else { "" }
    )
}

/// `--model NAME`: the built-in MoE template whose `model.name` is NAME.
#[derive(Clone, Copy)]
pub struct MoeModelParser;

impl TypedValueParser for MoeModelParser {
    type Value = MoeTemplate;

    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &OsStr,
    ) -> Result<MoeTemplate, clap::Error> {
        let templates =
            catalog().map_err(|e| clap::Error::raw(clap::error::ErrorKind::ValueValidation, e))?;
        // Clap's own check of a choice: its message lists the names.
        let name = PossibleValuesParser::new(templates.iter().map(|t| t.model.name.as_str()))
            .parse_ref(cmd, arg, value)?;
        templates
            .iter()
            .find(|t| t.model.name == name)
            .cloned()
            .ok_or_else(|| clap::Error::new(clap::error::ErrorKind::InvalidValue).with_cmd(cmd))
    }

    fn possible_values(&self) -> Option<Box<dyn Iterator<Item = PossibleValue> + '_>> {
        let templates = catalog().unwrap_or_default();
        Some(Box::new(templates.iter().map(|t| {
            PossibleValue::new(t.model.name.as_str()).help(describe(t))
        })))
    }
}
