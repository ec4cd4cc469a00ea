//! Templates: a model's GEMM shapes and the tile-configuration space to search for them.
//!
//! The format is documented in `templates/README.md`. Every refusal names the file, the line
//! and column of the offending value, and the rule it breaks.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tilegen_kernels::gemm::{Axis, Knob, KnobValue};
use tilegen_kernels::{OutDtype, Variant, check_problem};
use toml::Spanned;

/// Why a template was refused: the file, the 1-based line and column, and the rule.
#[derive(Debug, thiserror::Error)]
#[error("{}:{line}:{column}: {rule}", file.display())]
pub struct TemplateError {
    /// The template file (or `<string>` for text parsed directly).
    pub file: PathBuf,
    /// 1-based line of the offending value.
    pub line: usize,
    /// 1-based column.
    pub column: usize,
    /// The rule it breaks.
    pub rule: String,
    /// The underlying error (I/O or TOML syntax), when there is one.
    #[source]
    pub source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

/// One GEMM of a model: `C[M, N] = A[M, K] * B[N, K]^T` for every M bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gemm {
    /// Layer names that run this GEMM (`attn.qkv`, `moe.up`, ...): shapes the template lists
    /// twice are tuned once.
    pub names: Vec<String>,
    /// Columns of C (output features).
    pub n: u32,
    /// Reduction length the kernel runs (the model's K padded to a multiple of 256).
    pub k: u32,
    /// The model's own K before padding, when it differs.
    pub k_model: Option<u32>,
}

/// A GEMM problem: M, N, K.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct Shape {
    /// Rows of A and C (tokens).
    pub m: u32,
    /// Columns of C.
    pub n: u32,
    /// Reduction length.
    pub k: u32,
}

impl Shape {
    /// Floating-point operations of the GEMM (2 M N K).
    pub fn flops(&self) -> f64 {
        2.0 * f64::from(self.m) * f64::from(self.n) * f64::from(self.k)
    }

    /// Bytes a kernel must move at least: packed FP4 A and B, their E8M0 scales, and C.
    pub fn min_bytes(&self, out: OutDtype) -> f64 {
        let (m, n, k) = (f64::from(self.m), f64::from(self.n), f64::from(self.k));
        (m + n) * (k / 2.0 + k / 32.0) + m * n * f64::from(out.bytes())
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}x{}x{}", self.m, self.n, self.k)
    }
}

/// The configuration space: one axis per searchable knob of the spec (its values, in the
/// template's order; the knob's default where the template lists none), searched as every
/// combination the spec's structure allows (see [`crate::space`]); `KernelSpec::validate` prunes
/// the rest before LLVM runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Space {
    /// Every knob with an axis and its values, in the knobs' order.
    axes: Vec<(Knob, Vec<KnobValue>)>,
    /// Element type of C (one per template: a pack serves one C type).
    pub out_dtype: OutDtype,
    /// Whether the template's split-K kernels add into C with atomics (`split_k_atomic =
    /// true`): faster, but a bf16 C is then up to `split_k` ulps from the once-rounded product
    /// and its last bit varies from run to run. Off by default: split-K kernels reduce an f32
    /// workspace and round once.
    pub split_k_atomic: bool,
    /// Skip a (spec, M) pair when a shorter BM of the space already covers M in one tile: the
    /// taller tile computes only padding rows (on by default).
    pub prune_tall_tiles: bool,
}

impl Space {
    /// Knob `k`'s values (none for a knob without an axis).
    pub fn axis(&self, k: Knob) -> &[KnobValue] {
        self.axes
            .iter()
            .find(|(a, _)| *a == k)
            .map_or(&[], |(_, v)| v.as_slice())
    }

    /// Replaces knob `k`'s values (a knob without an axis keeps none).
    pub fn set_axis(&mut self, k: Knob, values: impl IntoIterator<Item = KnobValue>) {
        if let Some((_, v)) = self.axes.iter_mut().find(|(a, _)| *a == k) {
            *v = values.into_iter().collect();
        }
    }

    /// The counts of a count knob's axis (`bm`, `split_k`, ...).
    pub fn counts(&self, k: Knob) -> Vec<u32> {
        self.axis(k).iter().filter_map(|v| v.count()).collect()
    }

    /// Every knob that has an axis, with its values, in the knobs' order.
    pub fn axes(&self) -> impl Iterator<Item = (Knob, &[KnobValue])> {
        self.axes.iter().map(|(k, v)| (*k, v.as_slice()))
    }
}

/// A parsed, checked template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    /// Where it was read from.
    pub file: PathBuf,
    /// Model name (`gpt-oss-120b`).
    pub name: String,
    /// Where the shapes come from, in words.
    pub source: String,
    /// Token-count buckets: the M values every GEMM is tuned for, ascending.
    pub m: Vec<u32>,
    /// The model's GEMMs, each (N, K) once.
    pub gemms: Vec<Gemm>,
    /// The configuration space.
    pub space: Space,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTemplate {
    model: Spanned<RawModel>,
    #[serde(default)]
    gemm: Vec<Spanned<RawGemm>>,
    space: Spanned<RawSpace>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    name: Spanned<String>,
    #[serde(default)]
    source: String,
    m: Spanned<Vec<Spanned<i64>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGemm {
    name: Spanned<String>,
    n: Spanned<i64>,
    k: Spanned<i64>,
    k_model: Option<Spanned<i64>>,
}

/// `[space]` as written: one list per knob axis, kept with its positions, and the settings.
/// Read key by key so an unknown key is refused at its own position.
struct RawSpace {
    axes: Vec<(Knob, Spanned<Vec<Spanned<toml::Value>>>)>,
    /// The knobs the table makes one value per template ([`Axis::Setting`]: `out_dtype`).
    settings: Vec<(Knob, KnobValue)>,
    prune_tall_tiles: Option<bool>,
}

/// A key of `[space]`: a knob's axis or setting (named, typed and defaulted by the knob table),
/// or the one setting that is the tuner's own rather than a kernel knob.
enum SpaceKey {
    Axis(Knob),
    Setting(Knob),
    PruneTallTiles,
}

impl SpaceKey {
    /// The tuner's own setting (see [`Space::prune_tall_tiles`]).
    const PRUNE_TALL_TILES: &str = "prune_tall_tiles";

    fn of(name: &str) -> Option<SpaceKey> {
        if name == Self::PRUNE_TALL_TILES {
            return Some(SpaceKey::PruneTallTiles);
        }
        let k = *Knob::ALL.iter().find(|k| k.name() == name)?;
        match k.axis() {
            Axis::Setting => Some(SpaceKey::Setting(k)),
            a if a.searched() => Some(SpaceKey::Axis(k)),
            _ => None,
        }
    }
}

/// Every key a template's `[space]` takes: each searched knob's axis and each setting, in the
/// knobs' order, then the tuner's own setting.
pub fn space_keys() -> Vec<&'static str> {
    Knob::ALL
        .iter()
        .filter(|k| k.axis().searched() || k.axis() == Axis::Setting)
        .map(|k| k.name())
        .chain([SpaceKey::PRUNE_TALL_TILES])
        .collect()
}

impl<'de> Deserialize<'de> for SpaceKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        SpaceKey::of(&name).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown key `space.{name}`; the space's keys are {}",
                space_keys().join(", ")
            ))
        })
    }
}

/// A setting's value, read as its knob's type.
struct SettingValue(Knob);

impl<'de> serde::de::DeserializeSeed<'de> for SettingValue {
    type Value = KnobValue;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<KnobValue, D::Error> {
        self.0.deserialize_value(d)
    }
}

impl<'de> Deserialize<'de> for RawSpace {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = RawSpace;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a table of knob axes")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut a: A,
            ) -> Result<RawSpace, A::Error> {
                use serde::de::Error;
                let mut raw = RawSpace {
                    axes: Vec::new(),
                    settings: Vec::new(),
                    prune_tall_tiles: None,
                };
                while let Some(key) = a.next_key::<SpaceKey>()? {
                    match key {
                        SpaceKey::Axis(k) => {
                            if raw.axes.iter().any(|(x, _)| *x == k) {
                                return Err(A::Error::duplicate_field(k.name()));
                            }
                            raw.axes.push((k, a.next_value()?));
                        }
                        SpaceKey::Setting(k) => {
                            if raw.settings.iter().any(|(x, _)| *x == k) {
                                return Err(A::Error::duplicate_field(k.name()));
                            }
                            raw.settings.push((k, a.next_value_seed(SettingValue(k))?));
                        }
                        SpaceKey::PruneTallTiles => raw.prune_tall_tiles = Some(a.next_value()?),
                    }
                }
                Ok(raw)
            }
        }
        d.deserialize_map(Keys)
    }
}

/// Position of a byte offset as 1-based line and column.
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let offset = offset.min(text.len());
    let before = &text[..text.floor_char_boundary(offset)];
    let line = before.matches('\n').count() + 1;
    let column = before
        .rfind('\n')
        .map_or(before.len(), |p| before.len() - p - 1)
        + 1;
    (line, column)
}

struct Ctx<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Ctx<'_> {
    fn err(&self, span: std::ops::Range<usize>, rule: impl Into<String>) -> TemplateError {
        let (line, column) = line_col(self.text, span.start);
        TemplateError {
            file: self.file.to_path_buf(),
            line,
            column,
            rule: rule.into(),
            source: None,
        }
    }

    /// A positive u32 that is a multiple of `of`.
    fn size(&self, what: &str, v: &Spanned<i64>, of: u32, why: &str) -> Result<u32, TemplateError> {
        let x = *v.get_ref();
        let x = u32::try_from(x).ok().filter(|&x| x > 0).ok_or_else(|| {
            self.err(
                v.span(),
                format!("{what} = {x} must be a positive 32-bit integer"),
            )
        })?;
        if !x.is_multiple_of(of) {
            return Err(self.err(
                v.span(),
                format!("{what} = {x} must be a multiple of {of} ({why})"),
            ));
        }
        Ok(x)
    }

    /// Knob `k`'s axis: its values, each of the knob's type, within its range, following its
    /// axis rule, listed once.
    fn axis(
        &self,
        k: Knob,
        list: &Spanned<Vec<Spanned<toml::Value>>>,
    ) -> Result<Vec<KnobValue>, TemplateError> {
        let key = format!("space.{}", k.name());
        if list.get_ref().is_empty() {
            return Err(self.err(list.span(), format!("{key} must list at least one value")));
        }
        let mut out: Vec<KnobValue> = Vec::new();
        for item in list.get_ref() {
            let err = |rule: String| self.err(item.span(), rule);
            let value = k
                .axis_value(item.get_ref().clone())
                .map_err(|e| err(e.message().trim().to_string()))?;
            if out.contains(&value) {
                return Err(err(format!("{key} lists {value} twice")));
            }
            out.push(value);
        }
        Ok(out)
    }
}

impl Template {
    /// Reads and checks the template at `path`.
    pub fn load(path: impl AsRef<Path>) -> Result<Template, TemplateError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| TemplateError {
            file: path.to_path_buf(),
            line: 0,
            column: 0,
            rule: "the template cannot be read".into(),
            source: Some(Box::new(e)),
        })?;
        Template::parse(&text, path)
    }

    /// Parses and checks template text; `file` names it in errors.
    pub fn parse(text: &str, file: impl AsRef<Path>) -> Result<Template, TemplateError> {
        let cx = Ctx {
            file: file.as_ref(),
            text,
        };
        let raw: RawTemplate = toml::from_str(text).map_err(|e| {
            let mut err = cx.err(e.span().unwrap_or(0..0), e.message().trim().to_string());
            err.source = Some(Box::new(e));
            err
        })?;
        let model = raw.model.get_ref();
        let name = model.name.get_ref().trim().to_string();
        if name.is_empty() || name.contains(['/', '\\']) || name.chars().any(char::is_control) {
            return Err(cx.err(
                model.name.span(),
                "model.name must be a non-empty name without slashes or control characters",
            ));
        }
        let mut m = Vec::new();
        if model.m.get_ref().is_empty() {
            return Err(cx.err(model.m.span(), "model.m must list at least one token count"));
        }
        for v in model.m.get_ref() {
            let x = cx.size("model.m", v, 1, "")?;
            if m.last().is_some_and(|&last| x <= last) {
                return Err(cx.err(
                    v.span(),
                    format!(
                        "model.m must ascend strictly: {x} follows {}",
                        m.last().copied().unwrap_or(0)
                    ),
                ));
            }
            m.push(x);
        }
        let space = Self::space(&cx, &raw.space)?;
        let max_m = *m.last().unwrap_or(&1);
        if raw.gemm.is_empty() {
            return Err(cx.err(raw.model.span(), "the template lists no [[gemm]]"));
        }
        let mut gemms: Vec<Gemm> = Vec::new();
        let mut names = BTreeSet::new();
        for g in &raw.gemm {
            let r = g.get_ref();
            let gname = r.name.get_ref().trim().to_string();
            if gname.is_empty() {
                return Err(cx.err(r.name.span(), "gemm.name must not be empty"));
            }
            if !names.insert(gname.clone()) {
                return Err(cx.err(r.name.span(), format!("gemm `{gname}` is listed twice")));
            }
            let n = cx.size("gemm.n", &r.n, 16, "C columns come in 16-wide MFMA tiles")?;
            let k = cx.size(
                "gemm.k",
                &r.k,
                256,
                "the kernels step K by 256; pad the model's K and give it as k_model",
            )?;
            let k_model = match &r.k_model {
                None => None,
                Some(v) => {
                    let x = cx.size("gemm.k_model", v, 1, "")?;
                    if x > k || k - x >= 256 {
                        return Err(cx.err(
                            v.span(),
                            format!("k = {k} must be k_model = {x} rounded up to a multiple of 256 ({})", x.next_multiple_of(256)),
                        ));
                    }
                    Some(x)
                }
            };
            check_problem(
                max_m as usize,
                n as usize,
                k as usize,
                space.out_dtype.bytes() as usize,
            )
            .map_err(|e| {
                cx.err(
                    g.span(),
                    format!("the largest bucket M = {max_m} does not fit: {e}"),
                )
            })?;
            match gemms.iter_mut().find(|x| x.n == n && x.k == k) {
                Some(same) => same.names.push(gname),
                None => gemms.push(Gemm {
                    names: vec![gname],
                    n,
                    k,
                    k_model,
                }),
            }
        }
        let t = Template {
            file: file.as_ref().to_path_buf(),
            name,
            source: model.source.trim().to_string(),
            m,
            gemms,
            space,
        };
        // Counted before anything is generated: a space of billions of combinations is refused
        // at once instead of enumerated for hours.
        let count = crate::space::combinations(&t.space);
        if count > crate::space::MAX_COMBINATIONS {
            return Err(cx.err(
                raw.space.span(),
                format!(
                    "the space has {count} combinations, more than the {} a template may hold; narrow its axes",
                    crate::space::MAX_COMBINATIONS
                ),
            ));
        }
        let e = crate::space::enumerate(&t.space);
        if e.specs.is_empty() {
            return Err(cx.err(
                raw.space.span(),
                format!(
                    "no spec of the space is valid ({} combinations; refusals: {})",
                    e.stats.combinations,
                    e.stats.describe_pruned()
                ),
            ));
        }
        Ok(t)
    }

    fn space(cx: &Ctx<'_>, raw: &Spanned<RawSpace>) -> Result<Space, TemplateError> {
        let s = raw.get_ref();
        let mut axes = Vec::new();
        for &k in Knob::ALL {
            if !k.axis().searched() {
                continue;
            }
            let values = match s.axes.iter().find(|(x, _)| *x == k) {
                Some((_, list)) => cx.axis(k, list)?,
                // A knob the template does not search keeps its default.
                None => vec![k.default_value(Variant::Preb)],
            };
            axes.push((k, values));
        }
        // A setting the template does not give keeps its default.
        let setting = |k: Knob| {
            s.settings
                .iter()
                .find(|(x, _)| *x == k)
                .map_or(k.default_value(Variant::Preb), |(_, v)| *v)
        };
        Ok(Space {
            axes,
            out_dtype: match setting(Knob::OutDtype) {
                KnobValue::Out(o) => o,
                _ => OutDtype::Bf16,
            },
            split_k_atomic: setting(Knob::SplitKAtomic) == KnobValue::Flag(true),
            prune_tall_tiles: s.prune_tall_tiles.unwrap_or(true),
        })
    }

    /// Every (M, N, K) of the template: each GEMM at each M bucket, GEMM-major.
    pub fn shapes(&self) -> Vec<Shape> {
        self.gemms
            .iter()
            .flat_map(|g| self.m.iter().map(move |&m| Shape { m, n: g.n, k: g.k }))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The keys of the `[space]` table in a README's format block, in order.
    fn documented_space_keys(readme: &str) -> Vec<String> {
        let block = readme
            .split("```toml")
            .nth(1)
            .and_then(|b| b.split("```").next())
            .unwrap_or_default();
        let space = block.split("[space]").nth(1).unwrap_or_default();
        space
            .lines()
            .skip(1)
            .take_while(|l| !l.starts_with('['))
            .filter(|l| !l.trim_start().starts_with('#'))
            .filter_map(|l| l.split_once('=').map(|(k, _)| k.trim().to_string()))
            .collect()
    }

    /// templates/README.md documents every key of `[space]` the knob table and the tuner
    /// declare, once each, and no other.
    #[test]
    fn the_readme_documents_every_space_key() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates/README.md");
        let readme = std::fs::read_to_string(path).unwrap();
        let mut documented = documented_space_keys(&readme);
        let n = documented.len();
        documented.sort();
        documented.dedup();
        assert_eq!(documented.len(), n, "a key is documented twice");
        let mut keys: Vec<String> = space_keys().into_iter().map(String::from).collect();
        keys.sort();
        assert_eq!(documented, keys, "templates/README.md's [space] block");
    }

    #[test]
    fn line_and_column() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
