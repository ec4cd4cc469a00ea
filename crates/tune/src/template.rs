//! Templates: a model's GEMM shapes and the tile-configuration space to search for them.
//!
//! The format is documented in `templates/README.md`. Every refusal names the file, the line
//! and column of the offending value, and the rule it breaks.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tilegen_kernels::{CachePolicy, KernelSpec, MfmaShape, OutDtype, Variant, check_problem};
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

/// The configuration space: every combination of these values is a candidate, the dimensions
/// a variant ignores collapse, and `KernelSpec::validate` prunes the rest before LLVM runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Space {
    /// Kernel families.
    pub variant: Vec<Variant>,
    /// Rows of C per workgroup.
    pub bm: Vec<u32>,
    /// Columns of C per workgroup.
    pub bn: Vec<u32>,
    /// K elements per stage.
    pub bk_elems: Vec<u32>,
    /// Rows per wave: the lds variant's; on preb each value below BM splits BM across waves
    /// (preb also always takes its default, one wave per BM rows).
    pub wm: Vec<u32>,
    /// Columns per wave.
    pub wn: Vec<u32>,
    /// MFMA shapes.
    pub mma: Vec<MfmaShape>,
    /// Depth-2 pipeline (preb).
    pub b_prefetch: Vec<bool>,
    /// B cache policies (preb).
    pub b_cache_policy: Vec<CachePolicy>,
    /// Direct global-to-LDS loads of A.
    pub dram_to_lds: Vec<bool>,
    /// Per-cluster priority brackets (preb, with b_prefetch).
    pub cluster_drain_sched: Vec<bool>,
    /// MFMAs per cluster (with cluster_drain_sched).
    pub mfma_cluster: Vec<u32>,
    /// Stage A two tiles ahead (preb, with b_prefetch).
    pub deep_prime: Vec<bool>,
    /// K tiles of B in flight ahead of the one multiplied (preb, with b_prefetch).
    pub b_prefetch_depth: Vec<u32>,
    /// Occupancy targets; `None` lets the compiler choose (written `0` in a template).
    pub waves_per_eu: Vec<Option<u32>>,
    /// Split-K slice counts (preb; 1 = no split).
    pub split_k: Vec<u32>,
    /// MFMA accumulators in AGPRs or not.
    pub acc_agprs: Vec<bool>,
    /// XCD-aware tile orders (preb; 0 = the grid's order).
    pub xcd_group_m: Vec<u32>,
    /// Element type of C (one per template: a pack serves one C type).
    pub out_dtype: OutDtype,
    /// Skip a (spec, M) pair when a shorter BM of the space already covers M in one tile: the
    /// taller tile computes only padding rows (on by default).
    pub prune_tall_tiles: bool,
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

type List<T> = Option<Spanned<Vec<Spanned<T>>>>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSpace {
    variant: List<Variant>,
    bm: List<i64>,
    bn: List<i64>,
    bk_elems: List<i64>,
    wm: List<i64>,
    wn: List<i64>,
    mma: List<MfmaShape>,
    b_prefetch: List<bool>,
    b_cache_policy: List<CachePolicy>,
    dram_to_lds: List<bool>,
    cluster_drain_sched: List<bool>,
    mfma_cluster: List<i64>,
    deep_prime: List<bool>,
    b_prefetch_depth: List<i64>,
    waves_per_eu: List<i64>,
    split_k: List<i64>,
    acc_agprs: List<bool>,
    xcd_group_m: List<i64>,
    out_dtype: Option<Spanned<OutDtype>>,
    prune_tall_tiles: Option<bool>,
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

    /// A list that must be non-empty; absent means `default`.
    fn list<T: Clone>(
        &self,
        key: &str,
        v: &List<T>,
        default: Vec<T>,
    ) -> Result<Vec<Spanned<T>>, TemplateError> {
        match v {
            None => Ok(default.into_iter().map(|x| Spanned::new(0..0, x)).collect()),
            Some(l) if l.get_ref().is_empty() => Err(self.err(
                l.span(),
                format!("space.{key} must list at least one value"),
            )),
            Some(l) => Ok(l.get_ref().clone()),
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

    fn sizes(
        &self,
        key: &str,
        v: &List<i64>,
        default: Vec<u32>,
        of: u32,
        why: &str,
    ) -> Result<Vec<u32>, TemplateError> {
        let list = self.list(key, v, default.into_iter().map(i64::from).collect())?;
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for x in &list {
            let value = self.size(&format!("space.{key}"), x, of, why)?;
            if !seen.insert(value) {
                return Err(self.err(x.span(), format!("space.{key} lists {value} twice")));
            }
            out.push(value);
        }
        Ok(out)
    }

    fn values<T: Clone + PartialEq + fmt::Debug>(
        &self,
        key: &str,
        v: &List<T>,
        default: Vec<T>,
    ) -> Result<Vec<T>, TemplateError> {
        let list = self.list(key, v, default)?;
        let mut out: Vec<T> = Vec::new();
        for x in &list {
            if out.contains(x.get_ref()) {
                return Err(self.err(
                    x.span(),
                    format!("space.{key} lists {:?} twice", x.get_ref()),
                ));
            }
            out.push(x.get_ref().clone());
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
        let d = KernelSpec::preb();
        let waves = cx.list("waves_per_eu", &s.waves_per_eu, vec![0])?;
        let mut waves_per_eu = Vec::new();
        for w in &waves {
            let x = *w.get_ref();
            let v = match x {
                0 => None,
                1..=8 => Some(x as u32),
                _ => {
                    return Err(cx.err(
                        w.span(),
                        format!("space.waves_per_eu = {x} must be 0 (the compiler chooses) or 1..=8 (waves per SIMD)"),
                    ));
                }
            };
            if waves_per_eu.contains(&v) {
                return Err(cx.err(w.span(), format!("space.waves_per_eu lists {x} twice")));
            }
            waves_per_eu.push(v);
        }
        let mfma_cluster =
            cx.sizes("mfma_cluster", &s.mfma_cluster, vec![d.mfma_cluster], 1, "")?;
        Ok(Space {
            variant: cx.values("variant", &s.variant, vec![Variant::Preb])?,
            bm: cx.sizes("bm", &s.bm, vec![d.bm], 16, "whole 16-row MFMA tiles")?,
            bn: cx.sizes("bn", &s.bn, vec![d.bn], 16, "whole 16-column MFMA tiles")?,
            bk_elems: cx.sizes(
                "bk_elems",
                &s.bk_elems,
                vec![d.bk_elems],
                128,
                "whole 128-K MFMA steps",
            )?,
            wm: cx.sizes(
                "wm",
                &s.wm,
                vec![KernelSpec::lds().wm],
                16,
                "whole 16-row MFMA tiles",
            )?,
            wn: cx.sizes("wn", &s.wn, vec![d.wn], 16, "whole 16-column MFMA tiles")?,
            mma: cx.values("mma", &s.mma, vec![d.mma])?,
            b_prefetch: cx.values("b_prefetch", &s.b_prefetch, vec![false])?,
            b_cache_policy: cx.values(
                "b_cache_policy",
                &s.b_cache_policy,
                vec![CachePolicy::Always],
            )?,
            dram_to_lds: cx.values("dram_to_lds", &s.dram_to_lds, vec![false])?,
            cluster_drain_sched: cx.values(
                "cluster_drain_sched",
                &s.cluster_drain_sched,
                vec![false],
            )?,
            mfma_cluster,
            deep_prime: cx.values("deep_prime", &s.deep_prime, vec![false])?,
            b_prefetch_depth: cx.sizes("b_prefetch_depth", &s.b_prefetch_depth, vec![1], 1, "")?,
            waves_per_eu,
            split_k: cx.sizes("split_k", &s.split_k, vec![1], 1, "")?,
            acc_agprs: cx.values("acc_agprs", &s.acc_agprs, vec![false])?,
            // 0 is a value here (the grid's order); the spec's rules refuse what is too big.
            xcd_group_m: cx
                .values("xcd_group_m", &s.xcd_group_m, vec![0])?
                .into_iter()
                .map(|g| u32::try_from(g).unwrap_or(u32::MAX))
                .collect(),
            out_dtype: s
                .out_dtype
                .as_ref()
                .map_or(OutDtype::Bf16, |o| *o.get_ref()),
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

    #[test]
    fn line_and_column() {
        assert_eq!(line_col("ab\ncd", 0), (1, 1));
        assert_eq!(line_col("ab\ncd", 4), (2, 2));
    }
}
