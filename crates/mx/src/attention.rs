//! The CPU reference of paged FP8 decode attention, with the kernel's quantization points and an
//! error bound derived from the f32 arithmetic between them.
//!
//! # What is computed
//! One query row per (sequence `b`, query head `h`): `q` is bf16, the KV cache holds FP8 E4M3
//! codes with a scale per KV head (`k_scales`, `v_scales`; per-tensor scales repeat one value).
//! Query head `h` reads KV head `h / (q_heads / kv_heads)`. The cache is `[rows, kv_heads,
//! head_dim]`: logical position `pos` of sequence `b` is row `block_table[b][pos / page] * page +
//! pos % page` of a paged cache, row `b * table_stride + pos` of a contiguous one (page 0).
//!
//! The kernel's numerics, step by step (the reference follows them exactly, except where it
//! says "exact"):
//! 1. Q is quantized per row: `s = clamp(e(amax) - 7, -100, 100)` with `e(x)` the unbiased
//!    exponent field of `|q|`'s largest element (an f32 bit field, so exact), and
//!    `q8 = e4m3(q * 2^-s)` (RNE; `|q| 2^-s < 256`, so never saturated). A power-of-two scale
//!    makes `q * 2^-s` exact: both sides quantize identical values.
//! 2. `c = (k_scale * sm_log2e) * 2^s` in f32, `sm_log2e = f32(sm_scale * log2 e)`.
//! 3. `S = sum_d q8 k8` (exact here; an f32 MFMA sum in the kernel), `t = f32(S * c)`: scores in
//!    log2 units.
//! 4. Keys go in tiles of [`BLOCK_N`]; partial `p` of `P` takes tiles `p, p + P, ...`. Per tile:
//!    `m' = max(m, max t)`, `alpha = 2^(m - m')`, `p = 2^(t - m')`, `l = l alpha + sum p`,
//!    `p8 = e4m3(p * 256)`, `acc = acc alpha + sum p8 v8`.
//! 5. Partials merge with `w = 2^(m_p - M)`, `M = max m_p`: `O = sum w acc`, `L = sum w l`;
//!    the output is `bf16(O * (v_scale / (256 L)))`.
//!
//! # The bound
//! Against this reference (f64, with `p8` from the f64 `p`), the kernel differs only by f32
//! rounding and `exp2`'s error, and by where those move a `p * 256` across an FP8 rounding
//! boundary. Per key the reference carries an interval for the kernel's `t` (the MFMA sum's
//! `n u sum |q8 k8|` and the product's rounding), hence for `m`, for `p` (relative
//! `2^(ln 2 * arg error) - 1` plus [`EXP2_REL`]) and for `p8`: when the interval's FP8 codes
//! differ, the whole difference times `|v8|` joins the bound (a "flip"). Sums then add their
//! `n u sum |terms|`, rescales their relative errors, and the output adds half a bf16 ulp.
//! A misplaced fragment, key or scale moves outputs by whole multiples of the values, far past
//! this.

use half::bf16;
use rayon::prelude::*;

use crate::fp8::{Fp8Overflow, decode_e4m3fn, encode_e4m3fn};

/// Keys per tile (one 16x16x128 PV MFMA).
pub const BLOCK_N: usize = 128;
/// `log2` of the factor P is scaled by before its FP8 quantization.
pub const P_SCALE_LOG2: i32 = 8;
/// The range of the Q scale exponent.
pub const Q_SCALE_EXP_RANGE: (i32, i32) = (-100, 100);
/// Relative error allowed for the device's `exp2` (4 f32 ulps; `v_exp_f32` is documented at 1).
pub const EXP2_REL: f64 = 4.0 * f32::EPSILON as f64 / 2.0;

const U: f64 = f32::EPSILON as f64 / 2.0;

/// Why a problem was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttentionError {
    /// A shape parameter breaks a rule.
    #[error("{what}: {rule}")]
    Shape {
        /// The parameter.
        what: &'static str,
        /// The rule it breaks.
        rule: String,
    },
    /// An input has the wrong length.
    #[error("{what} has {actual} elements, expected {expected}")]
    Length {
        /// The input.
        what: &'static str,
        /// Its length.
        actual: usize,
        /// The length the shape implies.
        expected: usize,
    },
    /// A context length or block-table entry points outside the cache.
    #[error("sequence {seq}: {detail}")]
    Index {
        /// The sequence.
        seq: usize,
        /// What is out of range.
        detail: String,
    },
}

/// Shape of a decode attention problem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AttentionShape {
    /// Sequences.
    pub batch: usize,
    /// Query heads.
    pub q_heads: usize,
    /// KV heads (divides `q_heads`).
    pub kv_heads: usize,
    /// Elements per head.
    pub head_dim: usize,
    /// Rows per page; 0 for a contiguous cache.
    pub page_size: usize,
    /// Entries per block-table row (paged), or rows per sequence (contiguous).
    pub table_stride: usize,
    /// Rows of the cache.
    pub cache_rows: usize,
}

/// A problem's inputs, as the kernel receives them.
#[derive(Debug, Clone, Copy)]
pub struct AttentionInputs<'a> {
    /// The shape.
    pub shape: AttentionShape,
    /// `[batch, q_heads, head_dim]`.
    pub q: &'a [bf16],
    /// FP8 E4M3 codes, `[cache_rows, kv_heads, head_dim]`.
    pub k_cache: &'a [u8],
    /// FP8 E4M3 codes, `[cache_rows, kv_heads, head_dim]`.
    pub v_cache: &'a [u8],
    /// `[batch, table_stride]` physical pages (paged caches; empty otherwise).
    pub block_table: &'a [i32],
    /// `[batch]` positions per sequence.
    pub context_lens: &'a [i32],
    /// `[kv_heads]`.
    pub k_scales: &'a [f32],
    /// `[kv_heads]`.
    pub v_scales: &'a [f32],
    /// The softmax scale (usually `1 / sqrt(head_dim)`).
    pub sm_scale: f32,
}

/// A problem's host data, owned: what [`AttentionProblem::random`] makes and
/// [`AttentionProblem::inputs`] lends.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionProblem {
    /// The shape.
    pub shape: AttentionShape,
    /// `[batch, q_heads, head_dim]`.
    pub q: Vec<bf16>,
    /// FP8 E4M3 codes, `[cache_rows, kv_heads, head_dim]`.
    pub k_cache: Vec<u8>,
    /// FP8 E4M3 codes, `[cache_rows, kv_heads, head_dim]`.
    pub v_cache: Vec<u8>,
    /// `[batch, table_stride]` (paged caches).
    pub block_table: Vec<i32>,
    /// `[batch]`.
    pub context_lens: Vec<i32>,
    /// `[kv_heads]`.
    pub k_scales: Vec<f32>,
    /// `[kv_heads]`.
    pub v_scales: Vec<f32>,
    /// The softmax scale.
    pub sm_scale: f32,
}

/// A seeded xorshift generator: reproducible inputs without a dependency's API.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Roughly normal (a sum of four uniforms), mean 0, standard deviation about 1.
    fn normal(&mut self) -> f32 {
        let u: f32 = (0..4)
            .map(|_| (self.next() % 10_000) as f32 / 10_000.0)
            .sum();
        (u - 2.0) * 1.7
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

impl AttentionProblem {
    /// A random problem: bf16 queries and FP8 caches of roughly normal values, K and V scales
    /// that differ per KV head, and for a paged cache (`page_size > 0`) twice the pages the
    /// sequences need, handed out by a random permutation (so the block table is shuffled and
    /// some pages belong to no sequence). A contiguous cache gives each sequence its longest
    /// context plus 37 rows, so sequences do not start on tile boundaries.
    #[allow(clippy::too_many_arguments)]
    pub fn random(
        batch: usize,
        q_heads: usize,
        kv_heads: usize,
        head_dim: usize,
        page_size: usize,
        context_lens: &[i32],
        sm_scale: f32,
        seed: u64,
    ) -> Result<AttentionProblem, AttentionError> {
        let too_big = |what| AttentionError::Shape {
            what,
            rule: "the problem's size overflows".into(),
        };
        if context_lens.len() != batch {
            return Err(AttentionError::Length {
                what: "context_lens",
                actual: context_lens.len(),
                expected: batch,
            });
        }
        if let Some((seq, len)) = context_lens.iter().enumerate().find(|(_, l)| **l < 0) {
            return Err(AttentionError::Index {
                seq,
                detail: format!("context length {len} is negative"),
            });
        }
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let max_len = context_lens.iter().copied().max().unwrap_or(0).max(1) as usize;
        let shape =
            AttentionShape::for_contexts(batch, q_heads, kv_heads, head_dim, page_size, max_len)?;
        let table = match shape.cache_rows.checked_div(page_size) {
            // A contiguous cache has no block table.
            None => Vec::new(),
            Some(pages) => {
                let mut perm: Vec<i32> = (0..pages).map(|p| p as i32).collect();
                for i in (1..pages).rev() {
                    perm.swap(i, rng.below(i + 1));
                }
                perm.truncate(batch * shape.table_stride);
                perm
            }
        };
        let cache_len = shape
            .cache_rows
            .checked_mul(kv_heads)
            .and_then(|n| n.checked_mul(head_dim))
            .ok_or(too_big("cache"))?;
        let q_len = batch
            .checked_mul(q_heads)
            .and_then(|n| n.checked_mul(head_dim))
            .ok_or(too_big("queries"))?;
        let q = (0..q_len).map(|_| bf16::from_f32(rng.normal())).collect();
        let mut cache = || -> Vec<u8> {
            (0..cache_len)
                .map(|_| encode_e4m3fn(rng.normal() * 1.5, Fp8Overflow::Saturate))
                .collect()
        };
        let (k_cache, v_cache) = (cache(), cache());
        Ok(AttentionProblem {
            shape,
            q,
            k_cache,
            v_cache,
            block_table: table,
            context_lens: context_lens.to_vec(),
            k_scales: (0..kv_heads).map(|i| 0.6 + 0.1 * i as f32).collect(),
            v_scales: (0..kv_heads).map(|i| 0.25 + 0.05 * i as f32).collect(),
            sm_scale,
        })
    }

    /// The inputs, borrowed.
    pub fn inputs(&self) -> AttentionInputs<'_> {
        AttentionInputs {
            shape: self.shape,
            q: &self.q,
            k_cache: &self.k_cache,
            v_cache: &self.v_cache,
            block_table: &self.block_table,
            context_lens: &self.context_lens,
            k_scales: &self.k_scales,
            v_scales: &self.v_scales,
            sm_scale: self.sm_scale,
        }
    }

    /// Bytes of K and V a decode step reads: every context position's rows of every KV head.
    pub fn kv_bytes_read(&self) -> u64 {
        let per_pos = 2 * (self.shape.kv_heads * self.shape.head_dim) as u64;
        self.context_lens
            .iter()
            .map(|&l| l.max(0) as u64)
            .sum::<u64>()
            * per_pos
    }
}

/// The Q scale exponent of a row whose largest magnitude is `amax` (step 1).
pub fn q_scale_exponent(amax: f32) -> i32 {
    let e = ((amax.to_bits() >> 23) & 0xff) as i32 - 127;
    (e - 7).clamp(Q_SCALE_EXP_RANGE.0, Q_SCALE_EXP_RANGE.1)
}

/// `2^e` as an f32 (`e` in the normal range).
fn pow2(e: i32) -> f32 {
    f32::from_bits(((e + 127) as u32) << 23)
}

/// `f32(sm_scale * log2 e)` (step 2).
pub fn sm_log2e(sm_scale: f32) -> f32 {
    (sm_scale as f64 * std::f64::consts::LOG2_E) as f32
}

/// A row of Q quantized (step 1): the FP8 codes and the scale exponent.
pub fn quantize_q_row(q: &[bf16]) -> (Vec<u8>, i32) {
    let amax = q.iter().map(|x| x.to_f32().abs()).fold(0f32, f32::max);
    let s = q_scale_exponent(amax);
    let inv = pow2(-s);
    let codes = q
        .iter()
        .map(|x| encode_e4m3fn(x.to_f32() * inv, Fp8Overflow::Saturate))
        .collect();
    (codes, s)
}

impl AttentionShape {
    /// The shape of a problem of `batch` sequences whose longest context is `max_len`, as
    /// [`AttentionProblem::random`] lays it out: a paged cache (`page_size > 0`) of twice the
    /// pages the contexts need plus 3 spare, so a shuffled block table has free pages between
    /// used ones; a contiguous cache of `max_len + 37` rows per sequence. Known before any
    /// input is made, so its sizes can be checked first.
    pub fn for_contexts(
        batch: usize,
        q_heads: usize,
        kv_heads: usize,
        head_dim: usize,
        page_size: usize,
        max_len: usize,
    ) -> Result<AttentionShape, AttentionError> {
        let too_big = |what| AttentionError::Shape {
            what,
            rule: "the problem's size overflows".into(),
        };
        let (table_stride, cache_rows) = match max_len.checked_div(page_size) {
            None => {
                let stride = max_len.checked_add(37).ok_or(too_big("cache rows"))?;
                let rows = batch.checked_mul(stride).ok_or(too_big("cache rows"))?;
                (stride, rows)
            }
            Some(_) => {
                let per_seq = max_len.div_ceil(page_size);
                let pages = batch
                    .checked_mul(per_seq)
                    .and_then(|p| p.checked_mul(2))
                    .and_then(|p| p.checked_add(3))
                    .ok_or(too_big("pages"))?;
                let rows = pages.checked_mul(page_size).ok_or(too_big("cache rows"))?;
                (per_seq, rows)
            }
        };
        let shape = AttentionShape {
            batch,
            q_heads,
            kv_heads,
            head_dim,
            page_size,
            table_stride,
            cache_rows,
        };
        shape.validate()?;
        Ok(shape)
    }

    /// Checks the shape's own rules (sizes, divisibility).
    pub fn validate(&self) -> Result<(), AttentionError> {
        let bad = |what, rule: String| Err(AttentionError::Shape { what, rule });
        if self.batch == 0 || self.q_heads == 0 || self.kv_heads == 0 || self.head_dim == 0 {
            return bad("shape", "batch, heads and head_dim must be positive".into());
        }
        if !self.q_heads.is_multiple_of(self.kv_heads) {
            return bad(
                "q_heads",
                format!(
                    "{} is not a multiple of kv_heads {}",
                    self.q_heads, self.kv_heads
                ),
            );
        }
        Ok(())
    }

    /// The cache row of position `pos` of sequence `b`.
    fn row(&self, table: &[i32], b: usize, pos: usize) -> Result<usize, AttentionError> {
        let row = match pos.checked_div(self.page_size) {
            None => b * self.table_stride + pos,
            Some(page) => {
                let entry = *table
                    .get(b * self.table_stride + page)
                    .filter(|_| page < self.table_stride)
                    .ok_or_else(|| AttentionError::Index {
                        seq: b,
                        detail: format!(
                            "page {page} is past the block table's {} entries",
                            self.table_stride
                        ),
                    })?;
                if entry < 0 {
                    return Err(AttentionError::Index {
                        seq: b,
                        detail: format!("block-table entry {entry} is negative"),
                    });
                }
                entry as usize * self.page_size + pos % self.page_size
            }
        };
        if row >= self.cache_rows {
            return Err(AttentionError::Index {
                seq: b,
                detail: format!(
                    "position {pos} maps to row {row} of a {}-row cache",
                    self.cache_rows
                ),
            });
        }
        Ok(row)
    }
}

/// The reference output and its bound.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionReference {
    /// `[batch, q_heads, head_dim]` in f64.
    pub out: Vec<f64>,
    /// Per element, the largest difference the kernel's arithmetic can explain.
    pub bound: Vec<f64>,
    /// Rows of `head_dim` elements.
    pub head_dim: usize,
}

/// One element of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionDiff {
    /// Flat index (`(b * q_heads + h) * head_dim + d`).
    pub index: usize,
    /// The kernel's value.
    pub got: f32,
    /// The reference value.
    pub want: f64,
    /// The bound.
    pub bound: f64,
}

impl AttentionDiff {
    /// `|got - want| / bound` (infinite for a NaN, or a difference against a zero bound).
    pub fn ratio(&self) -> f64 {
        let err = (self.got as f64 - self.want).abs();
        if err.is_nan() {
            f64::INFINITY
        } else if err == 0.0 {
            0.0
        } else if self.bound == 0.0 {
            f64::INFINITY
        } else {
            err / self.bound
        }
    }
}

/// The outcome of a comparison.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttentionComparison {
    /// Elements compared.
    pub elements: usize,
    /// Elements outside their bound.
    pub mismatches: usize,
    /// The element with the largest ratio.
    pub worst: Option<AttentionDiff>,
    /// The largest `|got - want|`.
    pub max_abs_err: f64,
}

impl AttentionComparison {
    /// Whether every element is within its bound.
    pub fn passed(&self) -> bool {
        self.mismatches == 0
    }
}

impl std::fmt::Display for AttentionComparison {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} of {} elements outside the bound, max |err| {:.3e}",
            self.mismatches, self.elements, self.max_abs_err
        )?;
        if let Some(w) = &self.worst {
            write!(
                f,
                "; worst at {}: got {:e}, want {:e}, bound {:e} (ratio {:.3})",
                w.index,
                w.got,
                w.want,
                w.bound,
                w.ratio()
            )?;
        }
        Ok(())
    }
}

impl AttentionReference {
    /// Compares the kernel's bf16 output.
    pub fn compare_bf16(&self, got: &[bf16]) -> Result<AttentionComparison, AttentionError> {
        if got.len() != self.out.len() {
            return Err(AttentionError::Length {
                what: "output",
                actual: got.len(),
                expected: self.out.len(),
            });
        }
        let diffs = (0..got.len()).map(|i| AttentionDiff {
            index: i,
            got: got[i].to_f32(),
            want: self.out[i],
            bound: self.bound[i],
        });
        let mut cmp = AttentionComparison {
            elements: got.len(),
            mismatches: 0,
            worst: None,
            max_abs_err: 0.0,
        };
        for d in diffs {
            let r = d.ratio();
            if r > 1.0 {
                cmp.mismatches += 1;
            }
            cmp.max_abs_err = cmp.max_abs_err.max((d.got as f64 - d.want).abs());
            if cmp.worst.is_none_or(|w| r > w.ratio()) {
                cmp.worst = Some(d);
            }
        }
        Ok(cmp)
    }

    /// The largest bound relative to the output's largest magnitude (how tight the check is).
    pub fn relative_bound(&self) -> f64 {
        let scale = self.out.iter().fold(0f64, |m, x| m.max(x.abs()));
        let b = self.bound.iter().fold(0f64, |m, x| m.max(*x));
        if scale == 0.0 { b } else { b / scale }
    }
}

/// Half an ulp of bf16 at magnitude `x`.
fn bf16_half_ulp(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        // The smallest subnormal's half.
        return 2f64.powi(-134);
    }
    let e = x.abs().log2().floor() as i32;
    2f64.powi(e.max(-126) - 8)
}

/// Relative error of `2^a` when `a` is off by at most `da`, plus `exp2`'s own.
fn exp2_rel(da: f64) -> f64 {
    (std::f64::consts::LN_2 * da).exp_m1() + EXP2_REL
}

/// One partial's state for one query row.
struct Partial {
    /// Running max (log2 units), its error bound.
    m: f64,
    dm: f64,
    /// Running sum, its relative error bound.
    l: f64,
    rel_l: f64,
    /// Accumulators, their magnitudes and absolute error bounds.
    acc: Vec<f64>,
    mag: Vec<f64>,
    err: Vec<f64>,
}

/// Checks `inputs` against their shape: every length, every context's pages inside the block
/// table and every row inside the cache. Returns each sequence's cache rows, position by
/// position.
pub fn check_inputs(inputs: &AttentionInputs<'_>) -> Result<Vec<Vec<usize>>, AttentionError> {
    let s = inputs.shape;
    s.validate()?;
    let (b_n, hq, hk, d) = (s.batch, s.q_heads, s.kv_heads, s.head_dim);
    let check = |what, actual: usize, expected: usize| {
        if actual == expected {
            Ok(())
        } else {
            Err(AttentionError::Length {
                what,
                actual,
                expected,
            })
        }
    };
    check("q", inputs.q.len(), b_n * hq * d)?;
    check("k_cache", inputs.k_cache.len(), s.cache_rows * hk * d)?;
    check("v_cache", inputs.v_cache.len(), s.cache_rows * hk * d)?;
    check("context_lens", inputs.context_lens.len(), b_n)?;
    check("k_scales", inputs.k_scales.len(), hk)?;
    check("v_scales", inputs.v_scales.len(), hk)?;
    if s.page_size > 0 {
        check(
            "block_table",
            inputs.block_table.len(),
            b_n * s.table_stride,
        )?;
    }
    // Rows of every position, checked once.
    let mut rows = Vec::with_capacity(b_n);
    for b in 0..b_n {
        let len = inputs.context_lens[b];
        if len < 0 {
            return Err(AttentionError::Index {
                seq: b,
                detail: format!("context length {len} is negative"),
            });
        }
        let r = (0..len as usize)
            .map(|pos| s.row(inputs.block_table, b, pos))
            .collect::<Result<Vec<_>, _>>()?;
        rows.push(r);
    }
    Ok(rows)
}

/// The reference for `inputs`, with keys split into `partials` interleaved partials of
/// [`BLOCK_N`]-key tiles (the kernel's split-KV partials times its waves per workgroup).
pub fn reference_attention(
    inputs: &AttentionInputs<'_>,
    partials: usize,
) -> Result<AttentionReference, AttentionError> {
    let s = inputs.shape;
    s.validate()?;
    if partials == 0 {
        return Err(AttentionError::Shape {
            what: "partials",
            rule: "at least one".into(),
        });
    }
    let (b_n, hq, hk, d) = (s.batch, s.q_heads, s.kv_heads, s.head_dim);
    let rows = check_inputs(inputs)?;
    let group = hq / hk;
    // FP8 codes decode through a table (the caches stay one byte per element).
    let lut: Vec<f64> = (0..=255u8).map(|c| decode_e4m3fn(c) as f64).collect();

    let sml = sm_log2e(inputs.sm_scale);
    let p_scale = 2f64.powi(P_SCALE_LOG2);
    let results: Vec<(Vec<f64>, Vec<f64>)> = (0..b_n * hq)
        .into_par_iter()
        .map(|row| {
            let (b, h) = (row / hq, row % hq);
            let kvh = h / group;
            let (q8, qs) = quantize_q_row(&inputs.q[row * d..(row + 1) * d]);
            let q8: Vec<f64> = q8.iter().map(|&c| decode_e4m3fn(c) as f64).collect();
            let c = ((inputs.k_scales[kvh] * sml) * pow2(qs)) as f64;
            let vs = inputs.v_scales[kvh] as f64;
            let positions = &rows[b];
            let tiles = positions.len().div_ceil(BLOCK_N);
            let at = |r: usize| (r * hk + kvh) * d;
            let mut parts = Vec::with_capacity(partials);
            for p in 0..partials {
                let mut st = Partial {
                    m: f64::NEG_INFINITY,
                    dm: 0.0,
                    l: 0.0,
                    rel_l: 0.0,
                    acc: vec![0.0; d],
                    mag: vec![0.0; d],
                    err: vec![0.0; d],
                };
                for t in (p..tiles).step_by(partials) {
                    let keys = &positions[t * BLOCK_N..((t + 1) * BLOCK_N).min(positions.len())];
                    // Scores and their error bounds.
                    let (ts, dts): (Vec<f64>, Vec<f64>) = keys
                        .iter()
                        .map(|&r| {
                            let kr = &inputs.k_cache[at(r)..at(r) + d];
                            let (mut sum, mut mag) = (0f64, 0f64);
                            for (a, &code) in q8.iter().zip(kr) {
                                let b = lut[code as usize];
                                sum += a * b;
                                mag += (a * b).abs();
                            }
                            let t = ((sum * c) as f32) as f64;
                            let dt = c.abs() * 130.0 * U * mag + t.abs() * U;
                            (t, dt)
                        })
                        .unzip();
                    let tmax = ts.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let m_new = st.m.max(tmax);
                    let dm_new = st.dm.max(dts.iter().copied().fold(0.0, f64::max));
                    let (alpha, e_alpha) = if st.m == f64::NEG_INFINITY {
                        (0.0, 0.0)
                    } else {
                        let arg = st.m - m_new;
                        ((arg).exp2(), exp2_rel(st.dm + dm_new + arg.abs() * U))
                    };
                    let mut psum = 0f64;
                    let mut e_p_max = 0f64;
                    let mut tile_acc = vec![0f64; d];
                    let mut tile_mag = vec![0f64; d];
                    let mut tile_flip = vec![0f64; d];
                    for ((&r, &t), &dt) in keys.iter().zip(&ts).zip(&dts) {
                        let arg = t - m_new;
                        let p = arg.exp2();
                        let e_p = exp2_rel(dt + dm_new + arg.abs() * U);
                        e_p_max = e_p_max.max(e_p);
                        psum += p;
                        let code = |x: f64| encode_e4m3fn(x as f32, Fp8Overflow::Saturate);
                        let p8 = decode_e4m3fn(code(p * p_scale)) as f64;
                        let lo = decode_e4m3fn(code(p * p_scale * (1.0 - e_p))) as f64;
                        let hi = decode_e4m3fn(code(p * p_scale * (1.0 + e_p))) as f64;
                        let flip = (hi - lo).max(0.0);
                        let vr = &inputs.v_cache[at(r)..at(r) + d];
                        for j in 0..d {
                            let v = lut[vr[j] as usize];
                            tile_acc[j] += p8 * v;
                            tile_mag[j] += (p8 * v).abs();
                            tile_flip[j] += flip * v.abs();
                        }
                    }
                    // l = l alpha + sum p (per-lane sums of 32, two cross-lane adds).
                    let rel_sum = e_p_max + 36.0 * U;
                    st.rel_l = if st.l == 0.0 {
                        rel_sum
                    } else {
                        (st.rel_l + e_alpha + U).max(rel_sum) + U
                    };
                    st.l = st.l * alpha + psum;
                    for j in 0..d {
                        let scaled = st.acc[j] * alpha;
                        let mag = st.mag[j] * alpha;
                        st.err[j] = st.err[j] * alpha * (1.0 + e_alpha + U)
                            + mag * (e_alpha + U)
                            + 130.0 * U * (mag + tile_mag[j])
                            + tile_flip[j];
                        st.acc[j] = scaled + tile_acc[j];
                        st.mag[j] = mag + tile_mag[j];
                    }
                    st.m = m_new;
                    st.dm = dm_new;
                }
                parts.push(st);
            }
            // Merge (step 5) and the output's bound.
            let big_m = parts.iter().map(|p| p.m).fold(f64::NEG_INFINITY, f64::max);
            let dbig = parts.iter().map(|p| p.dm).fold(0.0, f64::max);
            let mut o = vec![0f64; d];
            let mut o_mag = vec![0f64; d];
            let mut o_err = vec![0f64; d];
            let (mut l, mut rel_l) = (0f64, 0f64);
            let n = parts.len() as f64;
            for p in &parts {
                if p.l == 0.0 {
                    continue;
                }
                let (w, e_w) = if partials == 1 {
                    (1.0, 0.0)
                } else {
                    let arg = p.m - big_m;
                    (arg.exp2(), exp2_rel(p.dm + dbig + arg.abs() * U))
                };
                l += w * p.l;
                rel_l = rel_l.max(p.rel_l + e_w + U);
                for j in 0..d {
                    o[j] += w * p.acc[j];
                    o_mag[j] += w * p.mag[j];
                    o_err[j] += w * p.err[j] * (1.0 + e_w + U) + w * p.mag[j] * (e_w + U);
                }
            }
            rel_l += n * U;
            let mut out = vec![0f64; d];
            let mut bound = vec![0f64; d];
            if l > 0.0 {
                let f = vs / (p_scale * l);
                for j in 0..d {
                    out[j] = o[j] * f;
                    let e = (o_err[j] + n * U * o_mag[j] + o[j].abs() * (rel_l + 3.0 * U)) * f;
                    // Second-order terms: 1 % on top.
                    let e = e * 1.01;
                    bound[j] = e + bf16_half_ulp(out[j].abs() + e);
                }
            } else {
                bound.iter_mut().for_each(|x| *x = bf16_half_ulp(0.0));
            }
            (out, bound)
        })
        .collect();
    let mut out = Vec::with_capacity(b_n * hq * d);
    let mut bound = Vec::with_capacity(b_n * hq * d);
    for (o, e) in results {
        out.extend(o);
        bound.extend(e);
    }
    Ok(AttentionReference {
        out,
        bound,
        head_dim: d,
    })
}

/// Plain attention in f64 from the dequantized cache and unquantized Q (no FP8 on Q or P): how
/// far the quantization points move the result, for reports.
pub fn exact_attention(inputs: &AttentionInputs<'_>) -> Result<Vec<f64>, AttentionError> {
    let s = inputs.shape;
    s.validate()?;
    let (hq, hk, d) = (s.q_heads, s.kv_heads, s.head_dim);
    let group = hq / hk;
    let mut out = vec![0f64; s.batch * hq * d];
    for b in 0..s.batch {
        let len = inputs.context_lens.get(b).copied().unwrap_or(0).max(0) as usize;
        let rows = (0..len)
            .map(|pos| s.row(inputs.block_table, b, pos))
            .collect::<Result<Vec<_>, _>>()?;
        for h in 0..hq {
            let kvh = h / group;
            let q = &inputs.q[(b * hq + h) * d..(b * hq + h + 1) * d];
            let at = |r: usize| (r * hk + kvh) * d;
            let ks = inputs.k_scales[kvh] as f64;
            let scores: Vec<f64> = rows
                .iter()
                .map(|&r| {
                    let dot: f64 = (0..d)
                        .map(|j| q[j].to_f64() * decode_e4m3fn(inputs.k_cache[at(r) + j]) as f64)
                        .sum();
                    dot * ks * inputs.sm_scale as f64
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|x| (x - m).exp()).collect();
            let l: f64 = w.iter().sum();
            for j in 0..d {
                let v: f64 = rows
                    .iter()
                    .zip(&w)
                    .map(|(&r, &w)| w * decode_e4m3fn(inputs.v_cache[at(r) + j]) as f64)
                    .sum();
                out[(b * hq + h) * d + j] = v * inputs.v_scales[kvh] as f64 / l;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(
        page: usize,
        lens: &[i32],
    ) -> (AttentionShape, Vec<bf16>, Vec<u8>, Vec<u8>, Vec<i32>) {
        let (batch, hq, hk, d) = (lens.len(), 4, 2, 64);
        let stride = 512usize.checked_div(page).unwrap_or(512);
        let rows = batch * 512;
        let shape = AttentionShape {
            batch,
            q_heads: hq,
            kv_heads: hk,
            head_dim: d,
            page_size: page,
            table_stride: stride,
            cache_rows: rows,
        };
        let mut s = 12345u64;
        let mut next = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        let q = (0..batch * hq * d)
            .map(|_| bf16::from_f32((next() % 2001) as f32 / 500.0 - 2.0))
            .collect();
        let mut code = || {
            let c = (next() % 256) as u8;
            if c & 0x7f == 0x7f { 0 } else { c & 0xbf }
        };
        let k = (0..rows * hk * d).map(|_| code()).collect();
        let v = (0..rows * hk * d).map(|_| code()).collect();
        // Sequence b's pages in reverse order within its own 512 rows.
        let table = (0..batch * stride)
            .map(|i| {
                let (b, p) = (i / stride.max(1), i % stride.max(1));
                (b * stride + stride - 1 - p) as i32
            })
            .collect();
        (shape, q, k, v, table)
    }

    /// The reference with FP8 points agrees with plain attention to within FP8's resolution,
    /// and does not depend on how the keys are split (beyond that resolution).
    #[test]
    fn close_to_plain_attention_for_any_split() {
        for page in [0, 16, 64] {
            let lens = [1, 17, 255, 300];
            let (shape, q, k, v, table) = problem(page, &lens);
            let inputs = AttentionInputs {
                shape,
                q: &q,
                k_cache: &k,
                v_cache: &v,
                block_table: &table,
                context_lens: &lens,
                k_scales: &[0.01, 0.02],
                v_scales: &[0.5, 0.25],
                sm_scale: 0.125,
            };
            let exact = exact_attention(&inputs).unwrap();
            let mut first = None;
            for partials in [1, 2, 3] {
                let r = reference_attention(&inputs, partials).unwrap();
                let scale = exact.iter().fold(0f64, |m, x| m.max(x.abs()));
                let worst = r
                    .out
                    .iter()
                    .zip(&exact)
                    .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
                assert!(
                    worst < 0.08 * scale,
                    "page {page} P {partials}: {worst} vs {scale}"
                );
                assert!(r.relative_bound() < 0.05, "bound {}", r.relative_bound());
                let f = first.get_or_insert(r.out.clone());
                let spread = f
                    .iter()
                    .zip(&r.out)
                    .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
                assert!(spread < 0.05 * scale);
            }
        }
    }

    #[test]
    fn the_reference_bound_rejects_a_perturbed_output() {
        let lens = [200];
        let (shape, q, k, v, table) = problem(16, &lens);
        let inputs = AttentionInputs {
            shape,
            q: &q,
            k_cache: &k,
            v_cache: &v,
            block_table: &table,
            context_lens: &lens,
            k_scales: &[0.01, 0.02],
            v_scales: &[0.5, 0.25],
            sm_scale: 0.125,
        };
        let r = reference_attention(&inputs, 2).unwrap();
        let good: Vec<bf16> = r.out.iter().map(|&x| bf16::from_f64(x)).collect();
        assert!(r.compare_bf16(&good).unwrap().passed());
        // The largest output 25 % off (a misplaced fragment moves values by more) is caught.
        let mut bad = good.clone();
        let i = (0..bad.len())
            .max_by(|&a, &b| r.out[a].abs().total_cmp(&r.out[b].abs()))
            .unwrap();
        bad[i] = bf16::from_f64(r.out[i] * 1.25);
        assert!(!r.compare_bf16(&bad).unwrap().passed());
        assert!(r.compare_bf16(&good[1..]).is_err());
    }

    #[test]
    fn q_scale_is_a_power_of_two_keeping_q_below_256() {
        for amax in [1e-30f32, 0.3, 1.0, 7.9, 448.0, 3e5] {
            let s = q_scale_exponent(amax);
            let scaled = amax * pow2(-s);
            assert!(
                scaled < 256.0 && (scaled >= 128.0 || s == -100),
                "{amax}: {s}"
            );
        }
        assert_eq!(q_scale_exponent(0.0), -100);
    }
}
