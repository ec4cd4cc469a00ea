//! The CPU reference of a grouped MXFP4 mixture-of-experts layer, with the same quantization
//! points as the kernels, and the bounds that decide whether a device's result agrees with it.
//!
//! The layer, per (token `t`, slot `k`) pair routed to expert `e` with weight `w`:
//! 1. `h = x[t] * W13[e]^T (+ b13[e])`: the MXFP4 token row times the expert's gate/up weight
//!    (`[2 I, H]`, gate and up rows interleaved: gate of output `j` is row `2 j`, up is row
//!    `2 j + 1`, as gpt-oss ships them), plus the expert's gate/up bias where the layer has
//!    one (gpt-oss's `gate_up_proj_bias`, bf16, interleaved like the rows), in f32;
//! 2. `a_j = act(h[2 j], h[2 j + 1])` ([`Activation`]), quantized to MXFP4 per 32 outputs
//!    (OCP rules, [`MxMatrix::quantize`]);
//! 3. `y = a * W2[e]^T (+ b2[e])` (the down weight, `[H, I]`, and gpt-oss's `down_proj_bias`),
//!    and `out[t] = sum_k w_k * y_k` in bf16.
//!
//! Sizes that are not multiples of 256 are padded with zeros to the next multiple, the way
//! `tilegen preshuffle --pad-k` pads them: the hidden size (K of the first GEMM) and the
//! intermediate size (K of the second, so also the first GEMM's outputs). Padded weight rows and
//! columns are zero, so the padded outputs are zero and change nothing.
//!
//! # What a device may differ in, and the bounds
//! A device sums the same exact block terms as [`reference_gemm`] in another f32 order, and
//! evaluates the activation with its own `exp2` and roundings. Both move an activation by a
//! small radius `r` (derived below), and quantization can turn a small move into a different
//! FP4 code (a value near a rounding midpoint) or a different block scale (a block maximum near
//! a power of two). So the check has three parts:
//! * **stage 1**: every device scale must be one the block's maximum allows within the radii,
//!   and every device code one its element allows under that scale ([`MoeReference::check_stage1`]);
//! * **stage 2**: the device's output is compared with the reference second stage computed *from
//!   the device's own stage-1 output*, where only the f32 accumulation order, the routing-weight
//!   product and the combine's rounding differ ([`MoeReference::stage2_from`]);
//! * **the layer**: the device's output against the reference layer, the stage-2 bound plus
//!   `sum_k |w_k| sum_j |W2[n, j]| D_kj`, with `D_kj` the largest change of element `j`'s
//!   dequantized value any allowed code and scale make ([`MoeReference::compare_layer`]).
//!
//! The radius of an activation: the pre-activation `h` is within `rho = k_blocks * 2^-23 *
//! sum |terms|` of the reference (the GEMM comparison's order bound). `f(y) = y * sigmoid(y)`
//! has `|f'| <= 1.1` (its derivative `sigmoid(y) (1 + y (1 - sigmoid(y)))` lies in
//! [-0.1, 1.1]), `g * sigmoid(alpha g) = f(alpha g) / alpha` likewise, and clamps are
//! 1-Lipschitz, so for `a = F(g) * U(u)` the move is at most
//! `1.1 rho_g (|U| + rho_u) + (|F| + 1.1 rho_g) rho_u`; the device's evaluation adds a relative
//! error of at most `(16 + 2 |x|) 2^-24`, `x` the sigmoid's argument (each rounding is 2^-24;
//! the rounding of `x` moves `exp` by `|x| 2^-24` relative).
//!
//! A bias is added in f32 on both sides: `fl(h' + b)` and `fl(h + b)` with `|h' - h| <= rho`
//! differ by at most `rho (1 + u) + 2 u |h + b|` (`u = 2^-24`, each sum rounded once), taken
//! as `rho (1 + u) + 3 u |fl(h + b)|`, in both stages.

use half::bf16;
use rand::rngs::Xoshiro256PlusPlus;
use rand::{RngExt, SeedableRng};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::e8m0::{E8M0_NAN, decode_e8m0};
use crate::error::MxError;
use crate::fp4::{decode_e2m1, encode_e2m1};
use crate::quant::{MX_BLOCK, MxMatrix, block_scale};
use crate::reference::{Comparison, ElementDiff, reference_gemm};

/// gpt-oss's SwiGLU: `alpha` of `gate * sigmoid(alpha * gate)`.
pub const SWIGLU_ALPHA: f32 = 1.702;
/// gpt-oss's SwiGLU: the gate is clamped above at this, the up projection to `±` this.
pub const SWIGLU_LIMIT: f32 = 7.0;
/// Sizes the kernels' K must be a multiple of (the preshuffled-B kernel's stage granule); the
/// hidden and intermediate sizes are padded to it.
pub const K_GRANULE: usize = 256;

/// `|d/dy (y * sigmoid(y))| <= SILU_SLOPE` for every `y`.
const SILU_SLOPE: f64 = 1.1;
/// f32's unit roundoff.
const U32: f64 = 1.0 / (1u64 << 24) as f64;

/// Why the reference refused its inputs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoeRefError {
    /// The layer's sizes break a rule.
    #[error("MoE layer of {shape}: {rule}")]
    Shape {
        /// The sizes.
        shape: MoeShape,
        /// The rule, with the values.
        rule: String,
    },
    /// An input that does not fit the layer (routing, tokens, weights).
    #[error("{0}")]
    Input(String),
    /// An MX operation failed.
    #[error(transparent)]
    Mx(#[from] MxError),
}

/// The activation of the gate/up pair, applied in the first stage's epilogue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Activation {
    /// gpt-oss: `g = min(gate, 7)`, `u = clamp(up, -7, 7)`, `(u + 1) * g * sigmoid(1.702 g)`.
    Swiglu,
    /// DeepSeek-V3, Kimi-K2: `silu(gate) * up = gate * sigmoid(gate) * up`.
    SiluMul,
}

/// How the top-k contributions of a token are summed into its bf16 output row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Combine {
    /// Each (token, slot) contribution is rounded to bf16 and added to the output with a bf16
    /// atomic; the order of the adds is the device's.
    Atomic,
    /// Contributions are written in f32 per (token, slot); a reduce sums a token's slots in
    /// slot order and rounds once to bf16.
    SortedReduce,
}

impl Activation {
    /// The argument of the sigmoid and the factors `(F, U)` with `act = F * U`, in f64 from
    /// f32 inputs.
    fn parts(self, gate: f32, up: f32) -> (f64, f64, f64) {
        let sigmoid = |x: f64| 1.0 / (1.0 + (-x).exp());
        match self {
            Activation::Swiglu => {
                let g = gate.min(SWIGLU_LIMIT) as f64;
                let u = up.clamp(-SWIGLU_LIMIT, SWIGLU_LIMIT) as f64;
                let x = SWIGLU_ALPHA as f64 * g;
                (x, g * sigmoid(x), u + 1.0)
            }
            Activation::SiluMul => {
                let (g, u) = (gate as f64, up as f64);
                (g, g * sigmoid(g), u)
            }
        }
    }

    /// `act(gate, up)`, exactly up to f64 rounding.
    pub fn eval(self, gate: f32, up: f32) -> f64 {
        let (_, f, u) = self.parts(gate, up);
        f * u
    }

    /// How far a device's activation can be from [`Activation::eval`] when its `gate` and `up`
    /// are within `rg` and `ru` of these (see the module docs).
    pub fn radius(self, gate: f32, up: f32, rg: f64, ru: f64) -> f64 {
        let (x, f, u) = self.parts(gate, up);
        // The clamped gate moves as much as the gate at most; for swiglu, F's slope in g is
        // f'(alpha g) alpha / alpha.
        let moved = SILU_SLOPE * rg * (u.abs() + ru) + (f.abs() + SILU_SLOPE * rg) * ru;
        moved + (16.0 + 2.0 * x.abs()) * U32 * (f * u).abs()
    }
}

/// The sizes of an MoE layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MoeShape {
    /// Experts.
    pub experts: usize,
    /// Experts per token.
    pub topk: usize,
    /// Hidden size (the layer's input and output width).
    pub hidden: usize,
    /// Intermediate size of one expert (outputs of the activation).
    pub inter: usize,
}

impl std::fmt::Display for MoeShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} experts top-{}, hidden {}, intermediate {}",
            self.experts, self.topk, self.hidden, self.inter
        )
    }
}

impl MoeShape {
    /// Checks the sizes: all positive, `topk <= experts`, hidden and intermediate multiples of
    /// 32 (whole MX blocks), hidden a multiple of 16 (the second GEMM's N).
    pub fn validate(&self) -> Result<(), MoeRefError> {
        let fail = |rule: String| Err(MoeRefError::Shape { shape: *self, rule });
        for (what, v) in [
            ("experts", self.experts),
            ("topk", self.topk),
            ("hidden", self.hidden),
            ("inter", self.inter),
        ] {
            if v == 0 {
                return fail(format!("{what} must be positive"));
            }
        }
        if self.topk > self.experts {
            return fail(format!(
                "topk = {} exceeds the {} experts",
                self.topk, self.experts
            ));
        }
        // Sizes a layer has; they keep every size computed from them in range.
        for (what, v, max) in [
            ("experts", self.experts, 1 << 16),
            ("hidden", self.hidden, 1 << 24),
            ("inter", self.inter, 1 << 24),
        ] {
            if v > max {
                return fail(format!("{what} = {v} is over {max}"));
            }
        }
        for (what, v) in [("hidden", self.hidden), ("inter", self.inter)] {
            if !v.is_multiple_of(MX_BLOCK) {
                return fail(format!(
                    "{what} = {v} must be a multiple of {MX_BLOCK} (whole MX blocks)"
                ));
            }
        }
        Ok(())
    }

    /// The hidden size padded to [`K_GRANULE`]: K of the gate/up GEMM.
    pub fn hidden_padded(&self) -> usize {
        self.hidden.next_multiple_of(K_GRANULE)
    }

    /// The intermediate size padded to [`K_GRANULE`]: K of the down GEMM.
    pub fn inter_padded(&self) -> usize {
        self.inter.next_multiple_of(K_GRANULE)
    }

    /// Rows of the padded gate/up weight, `2 * inter_padded`.
    pub fn gate_up_rows(&self) -> usize {
        2 * self.inter_padded()
    }
}

/// One expert's weights as the reference and the preshuffle read them, padded: the gate/up
/// weight `[2 * inter_padded, hidden_padded]` (interleaved rows) and the down weight
/// `[hidden, inter_padded]`, and the biases of a layer that has them.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertWeights {
    /// Gate/up, `[2 * inter_padded, hidden_padded]`.
    pub gate_up: MxMatrix,
    /// Down, `[hidden, inter_padded]`.
    pub down: MxMatrix,
    /// The biases (gpt-oss's), or none.
    pub bias: Option<ExpertBias>,
}

/// One expert's biases, bf16 as gpt-oss stores them (`gate_up_proj_bias [E, 2 I]`,
/// `down_proj_bias [E, H]`), padded like the weights.
#[derive(Debug, Clone, PartialEq)]
pub struct ExpertBias {
    /// Added to the gate/up GEMM's outputs before the activation, `[2 * inter_padded]`,
    /// interleaved like the weight's rows (gate of output `j` at `2 j`); padding is zero.
    pub gate_up: Vec<bf16>,
    /// Added to the down GEMM's outputs before the routing weight, `[hidden]`.
    pub down: Vec<bf16>,
}

impl ExpertBias {
    /// Pads logical biases (gate/up `[2 * inter]` interleaved, down `[hidden]`).
    pub fn from_logical(
        shape: &MoeShape,
        gate_up: &[bf16],
        down: &[bf16],
    ) -> Result<ExpertBias, MoeRefError> {
        shape.validate()?;
        crate::quant::check_len("gate_up bias", 2 * shape.inter, gate_up.len())?;
        crate::quant::check_len("down bias", shape.hidden, down.len())?;
        // Padded outputs j >= inter are the last rows, as in the weight: zeros appended.
        let mut g = gate_up.to_vec();
        g.resize(shape.gate_up_rows(), bf16::ZERO);
        Ok(ExpertBias {
            gate_up: g,
            down: down.to_vec(),
        })
    }

    /// Deterministic random biases of expert `expert`, uniform in [-1, 1) (the size of the
    /// pre-activations [`ExpertWeights::random`] gives).
    pub fn random(shape: &MoeShape, expert: usize, seed: u64) -> Result<ExpertBias, MoeRefError> {
        let s = seed ^ (expert as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0xb1a5;
        let mut rng = Xoshiro256PlusPlus::seed_from_u64(s);
        let mut draw = |n: usize| -> Vec<bf16> {
            (0..n)
                .map(|_| bf16::from_f32(rng.random_range(-1.0f32..1.0)))
                .collect()
        };
        let g = draw(2 * shape.inter);
        let d = draw(shape.hidden);
        ExpertBias::from_logical(shape, &g, &d)
    }

    /// Checks the padded lengths against the layer.
    fn check(&self, shape: &MoeShape) -> Result<(), MxError> {
        crate::quant::check_len("gate_up bias", shape.gate_up_rows(), self.gate_up.len())?;
        crate::quant::check_len("down bias", shape.hidden, self.down.len())
    }
}

/// Random FP4 codes with scale codes uniform in `center ± spread` (deterministic per seed).
fn random_mx(
    rows: usize,
    k: usize,
    seed: u64,
    center: u8,
    spread: u8,
) -> Result<MxMatrix, MxError> {
    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let data_len = rows
        .checked_mul(k / 2)
        .ok_or_else(|| MxError::SizeOverflow {
            what: "rows * k",
            detail: format!("{rows} * {k}"),
        })?;
    let mut data = vec![0u8; data_len];
    rng.fill(&mut data[..]);
    let scales = (0..rows * (k / MX_BLOCK))
        .map(|_| rng.random_range(center - spread..=center + spread))
        .collect();
    MxMatrix::from_parts(rows, k, data, scales)
}

/// `m` (`[rows, k]`) widened to `[rows_to, k_to]` with zero elements (scale code 127, 1.0).
pub fn pad_mx(m: &MxMatrix, rows_to: usize, k_to: usize) -> Result<MxMatrix, MxError> {
    if rows_to < m.rows() || k_to < m.k() {
        return Err(MxError::LengthMismatch {
            what: "padded size (smaller than the matrix)",
            expected: m.rows() * m.k(),
            actual: rows_to * k_to,
        });
    }
    let (kb, kb_to) = (m.k() / 2, k_to / 2);
    let (ks, ks_to) = (m.k_blocks(), k_to / MX_BLOCK);
    let mut data = vec![0u8; rows_to * kb_to];
    let mut scales = vec![crate::e8m0::E8M0_ONE; rows_to * ks_to];
    for r in 0..m.rows() {
        data[r * kb_to..r * kb_to + kb].copy_from_slice(&m.data()[r * kb..(r + 1) * kb]);
        scales[r * ks_to..r * ks_to + ks].copy_from_slice(&m.scales()[r * ks..(r + 1) * ks]);
    }
    MxMatrix::from_parts(rows_to, k_to, data, scales)
}

/// Interleaves the rows of separate gate and up weights (`[I, H]` each, as DeepSeek's `w1` and
/// `w3`) into the `[2 I, H]` layout the layer reads (gate of output `j` at row `2 j`).
pub fn interleave_gate_up(gate: &MxMatrix, up: &MxMatrix) -> Result<MxMatrix, MxError> {
    if gate.rows() != up.rows() || gate.k() != up.k() {
        return Err(MxError::LengthMismatch {
            what: "up (gate and up must have the same shape)",
            expected: gate.rows() * gate.k(),
            actual: up.rows() * up.k(),
        });
    }
    let (kb, ks) = (gate.k_bytes(), gate.k_blocks());
    let mut data = Vec::with_capacity(2 * gate.data().len());
    let mut scales = Vec::with_capacity(2 * gate.scales().len());
    for r in 0..gate.rows() {
        for m in [gate, up] {
            data.extend_from_slice(&m.data()[r * kb..(r + 1) * kb]);
            scales.extend_from_slice(&m.scales()[r * ks..(r + 1) * ks]);
        }
    }
    MxMatrix::from_parts(2 * gate.rows(), gate.k(), data, scales)
}

impl ExpertWeights {
    /// Pads logical weights (gate/up `[2 * inter, hidden]` interleaved, down `[hidden, inter]`)
    /// to the layer's padded shapes.
    pub fn from_logical(
        shape: &MoeShape,
        gate_up: &MxMatrix,
        down: &MxMatrix,
    ) -> Result<ExpertWeights, MoeRefError> {
        shape.validate()?;
        let want = |what, m: &MxMatrix, rows: usize, k: usize| {
            if m.rows() != rows || m.k() != k {
                Err(MxError::LengthMismatch {
                    what,
                    expected: rows * k,
                    actual: m.rows() * m.k(),
                })
            } else {
                Ok(())
            }
        };
        want("gate_up", gate_up, 2 * shape.inter, shape.hidden)?;
        want("down", down, shape.hidden, shape.inter)?;
        // Interleaved rows stay interleaved: padded outputs j >= inter get rows 2j, 2j + 1.
        Ok(ExpertWeights {
            gate_up: pad_mx(gate_up, shape.gate_up_rows(), shape.hidden_padded())?,
            down: pad_mx(down, shape.hidden, shape.inter_padded())?,
            bias: None,
        })
    }

    /// The same weights with biases (checked against the layer's padded sizes).
    pub fn with_bias(
        self,
        shape: &MoeShape,
        bias: ExpertBias,
    ) -> Result<ExpertWeights, MoeRefError> {
        bias.check(shape)?;
        Ok(ExpertWeights {
            bias: Some(bias),
            ..self
        })
    }

    /// Deterministic random weights of expert `expert` with magnitudes like a trained layer's
    /// (scales near `2^-6`, so a hidden row of unit-sized activations gives pre-activations of
    /// a few units).
    pub fn random(
        shape: &MoeShape,
        expert: usize,
        seed: u64,
    ) -> Result<ExpertWeights, MoeRefError> {
        let s = seed ^ (expert as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        let gate_up = random_mx(2 * shape.inter, shape.hidden, s ^ 0x13, 121, 1)?;
        let down = random_mx(shape.hidden, shape.inter, s ^ 0x2, 121, 1)?;
        ExpertWeights::from_logical(shape, &gate_up, &down)
    }
}

/// Deterministic random token activations `[tokens, hidden_padded]` (values of order one,
/// padded columns zero).
pub fn random_tokens(shape: &MoeShape, tokens: usize, seed: u64) -> Result<MxMatrix, MoeRefError> {
    shape.validate()?;
    let x = random_mx(tokens, shape.hidden, seed, 125, 1)?;
    Ok(pad_mx(&x, tokens, shape.hidden_padded())?)
}

/// Checks that expert `e`'s weights have the layer's padded shapes.
fn check_expert(shape: &MoeShape, e: usize, w: &ExpertWeights) -> Result<(), MoeRefError> {
    let (g, d) = (&w.gate_up, &w.down);
    if (g.rows(), g.k()) != (shape.gate_up_rows(), shape.hidden_padded())
        || (d.rows(), d.k()) != (shape.hidden, shape.inter_padded())
    {
        return Err(MoeRefError::Input(format!(
            "expert {e}: gate/up is {} x {} and down {} x {}; the layer needs {} x {} and {} x {}",
            g.rows(),
            g.k(),
            d.rows(),
            d.k(),
            shape.gate_up_rows(),
            shape.hidden_padded(),
            shape.hidden,
            shape.inter_padded()
        )));
    }
    if let Some(b) = &w.bias {
        b.check(shape)
            .map_err(|err| MoeRefError::Input(format!("expert {e}'s biases: {err}")))?;
    }
    Ok(())
}

/// A GEMM output `c` (within `rho` of a device's) plus a bias in f32, and the radius of the
/// sum (see the module docs); no bias leaves both as they are.
fn add_bias(c: f32, rho: f64, bias: Option<bf16>) -> (f32, f64) {
    match bias {
        None => (c, rho),
        Some(b) => {
            let h = c + b.to_f32();
            (h, rho * (1.0 + U32) + 3.0 * U32 * h.abs() as f64)
        }
    }
}

/// Rows `rows` of `m`, in order, as a matrix.
fn gather_rows(m: &MxMatrix, rows: &[usize]) -> Result<MxMatrix, MxError> {
    let (kb, ks) = (m.k_bytes(), m.k_blocks());
    let mut data = Vec::with_capacity(rows.len() * kb);
    let mut scales = Vec::with_capacity(rows.len() * ks);
    for &r in rows {
        data.extend_from_slice(&m.data()[r * kb..(r + 1) * kb]);
        scales.extend_from_slice(&m.scales()[r * ks..(r + 1) * ks]);
    }
    MxMatrix::from_parts(rows.len(), m.k(), data, scales)
}

/// The f32 order bound of a reference GEMM element (`Reference`'s): `k_blocks * 2^-23 * sum`.
fn order_bound(k_blocks: usize, abs_sum: f32) -> f64 {
    k_blocks as f64 * f32::EPSILON as f64 * abs_sum as f64
}

/// The spacing of bf16 values at `|x|`.
fn bf16_ulp(x: f64) -> f64 {
    let a = x.abs();
    if a < 2f64.powi(-126) {
        return 2f64.powi(-133);
    }
    2f64.powi(a.log2().floor() as i32 - 7)
}

/// The possible results of quantizing one block whose elements are known within radii.
struct BlockChoices {
    /// Scale codes the device may pick (ascending).
    scales: Vec<u8>,
}

impl BlockChoices {
    fn new(values: &[f64], radii: &[f64]) -> BlockChoices {
        if values.iter().any(|v| v.is_nan()) {
            return BlockChoices {
                scales: vec![E8M0_NAN],
            };
        }
        let lo = values
            .iter()
            .zip(radii)
            .map(|(v, r)| (v.abs() - r).max(0.0))
            .fold(0.0, f64::max);
        let hi = values
            .iter()
            .zip(radii)
            .map(|(v, r)| v.abs() + r)
            .fold(0.0, f64::max);
        // The device's maximum is an f32 in [lo, hi]; the scale is monotone in it, except that
        // an all-zero block gets 127.
        let code = |a: f64| block_scale(&[a as f32]);
        // A maximum that may be as small as zero may have any scale up to `hi`'s.
        let first = if (lo as f32) == 0.0 { 0 } else { code(lo) };
        let last = code(hi);
        let mut scales: Vec<u8> = if hi == 0.0 {
            Vec::new()
        } else {
            (first..=last).collect()
        };
        if (lo as f32) == 0.0 && !scales.contains(&crate::e8m0::E8M0_ONE) {
            scales.push(crate::e8m0::E8M0_ONE);
            scales.sort_unstable();
        }
        BlockChoices { scales }
    }

    /// The codes element `v ± r` may get under scale `s` (as dequantized values in units of
    /// the scale: `(lowest, highest)`).
    fn code_range(v: f64, r: f64, s: u8) -> (f32, f32) {
        let x = decode_e8m0(s) as f64;
        let lo = decode_e2m1(encode_e2m1(((v - r) / x) as f32));
        let hi = decode_e2m1(encode_e2m1(((v + r) / x) as f32));
        (lo, hi)
    }
}

/// One (token, slot) pair of the routing.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pair {
    /// Token.
    pub token: usize,
    /// Expert.
    pub expert: usize,
    /// Routing weight.
    pub weight: f32,
}

/// What [`MoeReference::check_stage1`] found.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage1Check {
    /// Elements compared (pairs x padded intermediate size).
    pub elements: usize,
    /// Blocks compared.
    pub blocks: usize,
    /// Elements whose device code differs from the reference's (allowed or not).
    pub differing: usize,
    /// Blocks whose device scale differs from the reference's (allowed or not).
    pub differing_scales: usize,
    /// Elements or scales outside what the radii allow.
    pub violations: usize,
    /// The first violation, described.
    pub first_violation: Option<String>,
}

impl Stage1Check {
    /// Whether every scale and code is one the radii allow.
    pub fn passed(&self) -> bool {
        self.violations == 0
    }
}

/// A reference second stage (from some first-stage output) with the per-element bound a device
/// running the same second stage on the same input must stay within.
#[derive(Debug, Clone, PartialEq)]
pub struct Stage2Reference {
    tokens: usize,
    hidden: usize,
    out: Vec<f32>,
    bound: Vec<f64>,
}

impl Stage2Reference {
    /// The combined output in f32, `[tokens, hidden]`.
    pub fn out(&self) -> &[f32] {
        &self.out
    }

    /// The per-element bound.
    pub fn bound(&self) -> &[f64] {
        &self.bound
    }

    /// Compares a device's bf16 output `[tokens, hidden]`.
    pub fn compare(&self, got: &[bf16]) -> Result<Comparison, MxError> {
        compare_bounded(self.tokens, self.hidden, &self.out, &self.bound, got)
    }
}

fn compare_bounded(
    rows: usize,
    cols: usize,
    want: &[f32],
    bound: &[f64],
    got: &[bf16],
) -> Result<Comparison, MxError> {
    if got.len() != want.len() {
        return Err(MxError::ShapeMismatch {
            rows,
            cols,
            actual: got.len(),
        });
    }
    let diff = |i: usize| ElementDiff {
        row: i / cols.max(1),
        col: i % cols.max(1),
        got: got[i].to_f32(),
        want: want[i],
        bound: bound[i],
    };
    let mut mismatches = 0;
    let mut worst: Option<(f64, usize)> = None;
    for i in 0..want.len() {
        let d = diff(i);
        if !d.agrees() {
            mismatches += 1;
        }
        let r = d.ratio();
        if worst.is_none_or(|(w, _)| r > w) {
            worst = Some((r, i));
        }
    }
    Ok(Comparison {
        elements: want.len(),
        mismatches,
        worst: worst.map(|(_, i)| diff(i)),
    })
}

/// The reference layer for one batch of tokens and one routing.
#[derive(Debug, Clone)]
pub struct MoeReference {
    shape: MoeShape,
    tokens: usize,
    combine: Combine,
    pairs: Vec<Pair>,
    /// Reference activations (f64), `[pairs, inter_padded]`.
    act: Vec<f64>,
    /// Their radii.
    radius: Vec<f64>,
    /// The reference's quantized activations, `[pairs, inter_padded]`.
    a2: MxMatrix,
    /// Per element, the largest change of its dequantized value an allowed code and scale
    /// make.
    change: Vec<f32>,
    /// The reference second stage from `a2`.
    stage2: Stage2Reference,
    /// The layer bound: `stage2`'s plus the effect of `change`.
    layer_bound: Vec<f64>,
}

impl MoeReference {
    /// Runs the reference layer: `x` is `[tokens, hidden_padded]`, `ids` and `weights` the
    /// routing (`[tokens, topk]` row-major), `expert(e)` expert `e`'s weights (only the experts
    /// some token is routed to are asked for).
    #[allow(clippy::too_many_arguments)]
    pub fn new<'w>(
        shape: &MoeShape,
        x: &MxMatrix,
        ids: &[u32],
        weights: &[f32],
        activation: Activation,
        combine: Combine,
        expert: &(dyn Fn(usize) -> Result<&'w ExpertWeights, MoeRefError> + Sync),
    ) -> Result<MoeReference, MoeRefError> {
        shape.validate()?;
        let (hp, ip) = (shape.hidden_padded(), shape.inter_padded());
        if x.k() != hp {
            return Err(MoeRefError::Input(format!(
                "tokens have K = {}, the layer's padded hidden size is {hp}",
                x.k()
            )));
        }
        let tokens = x.rows();
        let pairs_len = tokens * shape.topk;
        crate::quant::check_len("ids", pairs_len, ids.len())?;
        crate::quant::check_len("weights", pairs_len, weights.len())?;
        let mut pairs = Vec::with_capacity(pairs_len);
        for (p, (&e, &w)) in ids.iter().zip(weights).enumerate() {
            if e as usize >= shape.experts {
                return Err(MoeRefError::Input(format!(
                    "pair {p} routes to expert {e} of {}",
                    shape.experts
                )));
            }
            pairs.push(Pair {
                token: p / shape.topk,
                expert: e as usize,
                weight: w,
            });
        }
        let by_expert = group(&pairs, shape.experts);
        // Stage 1 per expert: the pre-activations, their order bounds, the activations.
        let mut act = vec![0f64; pairs_len * ip];
        let mut radius = vec![0f64; pairs_len * ip];
        // Per expert: its pairs, their activations and radii.
        type Stage1 = (Vec<usize>, Vec<f64>, Vec<f64>);
        let per_expert: Vec<Stage1> = by_expert
            .par_iter()
            .enumerate()
            .filter(|(_, list)| !list.is_empty())
            .map(|(e, list)| -> Result<_, MoeRefError> {
                let w = expert(e)?;
                check_expert(shape, e, w)?;
                let rows: Vec<usize> = list.iter().map(|&p| pairs[p].token).collect();
                let xe = gather_rows(x, &rows)?;
                let h = reference_gemm(&xe, &w.gate_up)?;
                let n = w.gate_up.rows();
                let kbs = h.k_blocks();
                let bias = |c: usize| w.bias.as_ref().map(|b| b.gate_up[c]);
                let mut a = vec![0f64; list.len() * ip];
                let mut r = vec![0f64; list.len() * ip];
                for i in 0..list.len() {
                    for j in 0..n / 2 {
                        let at = |c: usize| {
                            let rho = order_bound(kbs, h.abs_sum()[i * n + c]);
                            add_bias(h.c()[i * n + c], rho, bias(c))
                        };
                        let ((g, rg), (u, ru)) = (at(2 * j), at(2 * j + 1));
                        a[i * ip + j] = activation.eval(g, u);
                        r[i * ip + j] = activation.radius(g, u, rg, ru);
                    }
                }
                Ok((list.clone(), a, r))
            })
            .collect::<Result<_, _>>()?;
        for (list, a, r) in &per_expert {
            for (i, &p) in list.iter().enumerate() {
                act[p * ip..(p + 1) * ip].copy_from_slice(&a[i * ip..(i + 1) * ip]);
                radius[p * ip..(p + 1) * ip].copy_from_slice(&r[i * ip..(i + 1) * ip]);
            }
        }
        let act32: Vec<f32> = act.iter().map(|&v| v as f32).collect();
        let a2 = MxMatrix::quantize(&act32, pairs_len, ip)?;
        // The largest move of each element's dequantized value over the allowed choices.
        let mut change = vec![0f32; pairs_len * ip];
        change
            .par_chunks_mut(MX_BLOCK)
            .enumerate()
            .for_each(|(b, out)| {
                let at = b * MX_BLOCK;
                let (v, r) = (&act[at..at + MX_BLOCK], &radius[at..at + MX_BLOCK]);
                let (row, blk) = (at / ip, (at % ip) / MX_BLOCK);
                let choices = BlockChoices::new(v, r);
                let ref_scale = a2.scale(row, blk).unwrap_or(E8M0_NAN);
                for (i, o) in out.iter_mut().enumerate() {
                    let want = a2.value(row, at % ip + i).unwrap_or(f32::NAN) as f64;
                    let mut worst = 0f64;
                    for &s in &choices.scales {
                        if s == E8M0_NAN || ref_scale == E8M0_NAN {
                            continue;
                        }
                        let x = decode_e8m0(s) as f64;
                        let (lo, hi) = BlockChoices::code_range(v[i], r[i], s);
                        worst = worst
                            .max((lo as f64 * x - want).abs())
                            .max((hi as f64 * x - want).abs());
                    }
                    *o = worst as f32;
                }
            });
        let mut reference = MoeReference {
            shape: *shape,
            tokens,
            combine,
            pairs,
            act,
            radius,
            a2,
            change,
            stage2: Stage2Reference {
                tokens,
                hidden: shape.hidden,
                out: Vec::new(),
                bound: Vec::new(),
            },
            layer_bound: Vec::new(),
        };
        let a2 = reference.a2.clone();
        reference.stage2 = reference.stage2_from(&a2, expert)?;
        reference.layer_bound = reference.compute_layer_bound(expert)?;
        Ok(reference)
    }

    /// The routed pairs, in pair order (`token * topk + slot`).
    pub fn pairs(&self) -> &[Pair] {
        &self.pairs
    }

    /// Tokens.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// The reference activations in f64, `[pairs, inter_padded]`.
    pub fn activations(&self) -> &[f64] {
        &self.act
    }

    /// Their radii.
    pub fn radii(&self) -> &[f64] {
        &self.radius
    }

    /// The reference's quantized activations (the second stage's A), `[pairs, inter_padded]`.
    pub fn stage1(&self) -> &MxMatrix {
        &self.a2
    }

    /// The reference second stage from the reference's own first stage.
    pub fn stage2(&self) -> &Stage2Reference {
        &self.stage2
    }

    /// The reference layer output in f32, `[tokens, hidden]`.
    pub fn out(&self) -> &[f32] {
        &self.stage2.out
    }

    /// The layer bound per output element.
    pub fn layer_bound(&self) -> &[f64] {
        &self.layer_bound
    }

    /// Checks a device's first-stage output (`[pairs, inter_padded]`, pair order) against what
    /// the radii allow.
    pub fn check_stage1(&self, got: &MxMatrix) -> Result<Stage1Check, MoeRefError> {
        let ip = self.shape.inter_padded();
        if got.rows() != self.pairs.len() || got.k() != ip {
            return Err(MxError::ShapeMismatch {
                rows: self.pairs.len(),
                cols: ip,
                actual: got.rows() * got.k(),
            }
            .into());
        }
        let blocks = self.pairs.len() * ip / MX_BLOCK;
        let results: Vec<(usize, usize, usize, Option<String>)> = (0..blocks)
            .into_par_iter()
            .map(|b| {
                let at = b * MX_BLOCK;
                let (row, col0) = (at / ip, at % ip);
                let blk = col0 / MX_BLOCK;
                let (v, r) = (&self.act[at..at + MX_BLOCK], &self.radius[at..at + MX_BLOCK]);
                let choices = BlockChoices::new(v, r);
                let s = got.scale(row, blk).unwrap_or(E8M0_NAN);
                let ref_s = self.a2.scale(row, blk).unwrap_or(E8M0_NAN);
                let mut differing = 0;
                let mut bad = 0;
                let mut first = None;
                if !choices.scales.contains(&s) {
                    bad += 1;
                    first = Some(format!(
                        "pair {row} block {blk}: scale {s} is not one of {:?} (reference {ref_s})",
                        choices.scales
                    ));
                }
                for i in 0..MX_BLOCK {
                    let code = got.code(row, col0 + i).unwrap_or(0);
                    if code != self.a2.code(row, col0 + i).unwrap_or(0) || s != ref_s {
                        differing += 1;
                    }
                    if s == E8M0_NAN {
                        continue;
                    }
                    let (lo, hi) = BlockChoices::code_range(v[i], r[i], s);
                    let d = decode_e2m1(code);
                    // -0 and +0 are both zero here; the sign of a zero carries no value.
                    if d < lo || d > hi {
                        bad += 1;
                        first.get_or_insert_with(|| {
                            format!(
                                "pair {row} element {}: code {code:#x} ({d}) under scale {s} is outside [{lo}, {hi}] (activation {} ± {:e})",
                                col0 + i,
                                v[i],
                                r[i]
                            )
                        });
                    }
                }
                (differing, usize::from(s != ref_s), bad, first)
            })
            .collect();
        let mut check = Stage1Check {
            elements: self.pairs.len() * ip,
            blocks,
            differing: 0,
            differing_scales: 0,
            violations: 0,
            first_violation: None,
        };
        for (d, ds, bad, first) in results {
            check.differing += d;
            check.differing_scales += ds;
            check.violations += bad;
            if check.first_violation.is_none() {
                check.first_violation = first;
            }
        }
        Ok(check)
    }

    /// The reference second stage computed from `a2` (`[pairs, inter_padded]`, pair order),
    /// e.g. a device's first-stage output, with the bound a device's second stage on the same
    /// input stays within (see the module docs).
    pub fn stage2_from<'w>(
        &self,
        a2: &MxMatrix,
        expert: &(dyn Fn(usize) -> Result<&'w ExpertWeights, MoeRefError> + Sync),
    ) -> Result<Stage2Reference, MoeRefError> {
        let (h, topk) = (self.shape.hidden, self.shape.topk);
        if a2.rows() != self.pairs.len() || a2.k() != self.shape.inter_padded() {
            return Err(MxError::ShapeMismatch {
                rows: self.pairs.len(),
                cols: self.shape.inter_padded(),
                actual: a2.rows() * a2.k(),
            }
            .into());
        }
        // y per pair and its order bound.
        let mut y = vec![0f32; self.pairs.len() * h];
        let mut rho = vec![0f64; self.pairs.len() * h];
        let by_expert = group(&self.pairs, self.shape.experts);
        let parts: Vec<(Vec<usize>, Vec<f32>, Vec<f64>)> = by_expert
            .par_iter()
            .enumerate()
            .filter(|(_, list)| !list.is_empty())
            .map(|(e, list)| -> Result<_, MoeRefError> {
                let w = expert(e)?;
                check_expert(&self.shape, e, w)?;
                let ae = gather_rows(a2, list)?;
                let r = reference_gemm(&ae, &w.down)?;
                let kbs = r.k_blocks();
                let (c, bound) = r
                    .c()
                    .iter()
                    .zip(r.abs_sum())
                    .enumerate()
                    .map(|(i, (&c, &s))| {
                        let bias = w.bias.as_ref().map(|b| b.down[i % h]);
                        add_bias(c, order_bound(kbs, s), bias)
                    })
                    .unzip();
                Ok((list.clone(), c, bound))
            })
            .collect::<Result<_, _>>()?;
        for (list, c, b) in parts {
            for (i, &p) in list.iter().enumerate() {
                y[p * h..(p + 1) * h].copy_from_slice(&c[i * h..(i + 1) * h]);
                rho[p * h..(p + 1) * h].copy_from_slice(&b[i * h..(i + 1) * h]);
            }
        }
        let mut out = vec![0f32; self.tokens * h];
        let mut bound = vec![0f64; self.tokens * h];
        out.par_chunks_mut(h)
            .zip(bound.par_chunks_mut(h))
            .enumerate()
            .for_each(|(t, (o, bd))| {
                for n in 0..h {
                    let mut acc = 0f32;
                    let mut abs = 0f64;
                    let mut moved = 0f64;
                    for k in 0..topk {
                        let p = t * topk + k;
                        let w = self.pairs[p].weight;
                        let v = w * y[p * h + n];
                        acc += v;
                        abs += (v as f64).abs();
                        moved += (w as f64).abs() * rho[p * h + n];
                    }
                    o[n] = acc;
                    // The product's rounding, the f32 sum's (in any order, both sides), and the
                    // combine's bf16 roundings.
                    let f32_sum = (1.0 + 2.0 * topk as f64) * U32 * abs;
                    let combine = match self.combine {
                        Combine::Atomic => (topk as f64 + 1.0) * 2f64.powi(-8) * abs,
                        Combine::SortedReduce => 0.0,
                    };
                    bd[n] = moved * (1.0 + 4.0 * U32) + f32_sum + combine + bf16_ulp(acc as f64);
                }
            });
        Ok(Stage2Reference {
            tokens: self.tokens,
            hidden: h,
            out,
            bound,
        })
    }

    /// The layer bound: the second stage's plus `sum_k |w_k| sum_j |W2[n, j]| change_kj`.
    fn compute_layer_bound<'w>(
        &self,
        expert: &(dyn Fn(usize) -> Result<&'w ExpertWeights, MoeRefError> + Sync),
    ) -> Result<Vec<f64>, MoeRefError> {
        let (h, ip, topk) = (
            self.shape.hidden,
            self.shape.inter_padded(),
            self.shape.topk,
        );
        let mut extra = vec![0f64; self.pairs.len() * h];
        extra
            .par_chunks_mut(h)
            .enumerate()
            .try_for_each(|(p, ex)| -> Result<(), MoeRefError> {
                let moved: Vec<(usize, f64)> = self.change[p * ip..(p + 1) * ip]
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| **c != 0.0)
                    .map(|(j, &c)| (j, c as f64))
                    .collect();
                if moved.is_empty() {
                    return Ok(());
                }
                let w2 = &expert(self.pairs[p].expert)?.down;
                let wt = (self.pairs[p].weight as f64).abs();
                for (n, e) in ex.iter_mut().enumerate() {
                    let s: f64 = moved
                        .iter()
                        .map(|&(j, c)| (w2.value(n, j).unwrap_or(0.0) as f64).abs() * c)
                        .sum();
                    *e = wt * s;
                }
                Ok(())
            })?;
        let mut bound = self.stage2.bound.clone();
        for (t, row) in bound.chunks_mut(h).enumerate() {
            for (n, b) in row.iter_mut().enumerate() {
                let s: f64 = (0..topk).map(|k| extra[(t * topk + k) * h + n]).sum();
                // The moved value also moves the f32 and bf16 roundings a little.
                *b += s * (1.0 + 2f64.powi(-7));
            }
        }
        Ok(bound)
    }

    /// Compares a device's bf16 layer output `[tokens, hidden]` with the reference layer.
    pub fn compare_layer(&self, got: &[bf16]) -> Result<Comparison, MxError> {
        compare_bounded(
            self.tokens,
            self.shape.hidden,
            &self.stage2.out,
            &self.layer_bound,
            got,
        )
    }
}

/// Pair indices per expert, in pair order.
fn group(pairs: &[Pair], experts: usize) -> Vec<Vec<usize>> {
    let mut by = vec![Vec::new(); experts];
    for (p, pair) in pairs.iter().enumerate() {
        by[pair.expert].push(p);
    }
    by
}

#[cfg(test)]
mod tests {
    use super::*;

    fn small() -> MoeShape {
        MoeShape {
            experts: 4,
            topk: 2,
            hidden: 96,
            inter: 64,
        }
    }

    #[test]
    fn activations_follow_their_definitions() {
        let s = |x: f64| 1.0 / (1.0 + (-x).exp());
        // gpt-oss: gate clamped above only, up both ways, (up + 1).
        let a = Activation::Swiglu.eval(9.0, -8.0);
        let g = 7.0;
        assert!((a - g * s(1.702f32 as f64 * g) * (-7.0 + 1.0)).abs() < 1e-12);
        let a = Activation::Swiglu.eval(-3.0, 0.5);
        assert!((a - -3.0 * s(1.702f32 as f64 * -3.0) * 1.5).abs() < 1e-12);
        let a = Activation::SiluMul.eval(2.0, 3.0);
        assert!((a - 2.0 * s(2.0) * 3.0).abs() < 1e-12);
        // No clamp for SiLU.
        assert!(Activation::SiluMul.eval(20.0, 20.0) > 399.0);
    }

    #[test]
    fn silu_slope_bounds_the_derivative() {
        let f = |y: f64| y / (1.0 + (-y).exp());
        let mut worst = 0f64;
        for i in -20000..20000 {
            let y = i as f64 / 1000.0;
            let d = (f(y + 1e-6) - f(y - 1e-6)) / 2e-6;
            worst = worst.max(d.abs());
        }
        assert!(worst < SILU_SLOPE && worst > 1.09, "{worst}");
    }

    #[test]
    fn radius_covers_moved_inputs() {
        for act in [Activation::Swiglu, Activation::SiluMul] {
            for (g, u) in [
                (0.3f32, -1.2f32),
                (6.99, 6.5),
                (-4.0, 3.0),
                (7.2, -7.5),
                (2.0, -1.0),
            ] {
                let (rg, ru) = (1e-3, 2e-3);
                let r = act.radius(g, u, rg, ru);
                let base = act.eval(g, u);
                for dg in [-1.0, 0.0, 1.0] {
                    for du in [-1.0, 0.0, 1.0] {
                        let moved = act.eval(g + (dg * rg) as f32, u + (du * ru) as f32);
                        assert!((moved - base).abs() <= r, "{act:?} {g} {u}");
                    }
                }
            }
        }
    }

    #[test]
    fn padding_and_interleaving() {
        let shape = small();
        let w = ExpertWeights::random(&shape, 1, 5).unwrap();
        assert_eq!(
            (w.gate_up.rows(), w.gate_up.k()),
            (2 * 256, 256),
            "inter 64 and hidden 96 pad to 256"
        );
        assert_eq!((w.down.rows(), w.down.k()), (96, 256));
        assert_eq!(w.gate_up.value(0, 100), Some(0.0));
        assert_eq!(w.gate_up.value(200, 0), Some(0.0));
        let gate = random_mx(3, 64, 1, 127, 2).unwrap();
        let up = random_mx(3, 64, 2, 127, 2).unwrap();
        let both = interleave_gate_up(&gate, &up).unwrap();
        for r in 0..3 {
            for c in 0..64 {
                assert_eq!(both.value(2 * r, c), gate.value(r, c));
                assert_eq!(both.value(2 * r + 1, c), up.value(r, c));
            }
        }
    }

    /// A device that computes exactly what the reference computes passes all three checks;
    /// one wrong code, scale or output fails them.
    #[test]
    fn checks_accept_the_reference_and_refuse_changes() {
        let shape = small();
        for bias in [false, true] {
            checks_accept_and_refuse(&shape, bias);
        }
    }

    fn checks_accept_and_refuse(shape: &MoeShape, bias: bool) {
        let shape = *shape;
        let experts: Vec<ExpertWeights> = (0..shape.experts)
            .map(|e| {
                let w = ExpertWeights::random(&shape, e, 9).unwrap();
                if bias {
                    let b = ExpertBias::random(&shape, e, 9).unwrap();
                    w.with_bias(&shape, b).unwrap()
                } else {
                    w
                }
            })
            .collect();
        let get = |e: usize| Ok(&experts[e]);
        let x = random_tokens(&shape, 5, 3).unwrap();
        let ids = vec![0, 1, 1, 2, 0, 3, 2, 0, 1, 3];
        let w = vec![0.7, 0.3, 0.6, 0.4, 0.5, 0.5, 0.9, 0.1, 0.2, 0.8];
        for combine in [Combine::Atomic, Combine::SortedReduce] {
            for act in [Activation::Swiglu, Activation::SiluMul] {
                let r = MoeReference::new(&shape, &x, &ids, &w, act, combine, &get).unwrap();
                let c = r.check_stage1(r.stage1()).unwrap();
                assert!(c.passed() && c.differing == 0, "{c:?}");
                let bf: Vec<bf16> = r.out().iter().map(|&v| bf16::from_f32(v)).collect();
                assert!(r.stage2().compare(&bf).unwrap().passed());
                assert!(r.compare_layer(&bf).unwrap().passed());
                // A wrong scale (by 4x) is outside the allowed choices.
                let (mut data, mut scales) = r.stage1().clone().into_parts();
                scales[3] = scales[3].wrapping_add(2);
                let bad = MxMatrix::from_parts(10, 256, data.clone(), scales.clone()).unwrap();
                assert!(!r.check_stage1(&bad).unwrap().passed());
                scales[3] = scales[3].wrapping_sub(2);
                // A large code changed in a nonzero block.
                let i = data.iter().position(|&b| b & 0x7 >= 4).unwrap();
                data[i] ^= 0x3;
                let bad = MxMatrix::from_parts(10, 256, data, scales).unwrap();
                assert!(!r.check_stage1(&bad).unwrap().passed());
                // An output off by a few bf16 steps.
                let mut off = bf.clone();
                off[7] = bf16::from_f32(off[7].to_f32() * 1.1 + 0.5);
                assert!(!r.compare_layer(&off).unwrap().passed());
                assert!(!r.stage2().compare(&off).unwrap().passed());
            }
        }
    }

    /// With zero weights the layer is its biases alone: the activations are `act(b13[2 j],
    /// b13[2 j + 1])` and the output `sum_k w_k b2[e_k]`.
    #[test]
    fn biases_are_added_before_the_activation_and_the_routing_weight() {
        let shape = small();
        let zero = |rows: usize, k: usize| {
            MxMatrix::from_parts(
                rows,
                k,
                vec![0; rows * k / 2],
                vec![crate::e8m0::E8M0_ONE; rows * k / MX_BLOCK],
            )
            .unwrap()
        };
        let experts: Vec<ExpertWeights> = (0..shape.experts)
            .map(|e| {
                let w = ExpertWeights::from_logical(
                    &shape,
                    &zero(2 * shape.inter, shape.hidden),
                    &zero(shape.hidden, shape.inter),
                )
                .unwrap();
                w.with_bias(&shape, ExpertBias::random(&shape, e, 4).unwrap())
                    .unwrap()
            })
            .collect();
        let get = |e: usize| Ok(&experts[e]);
        let x = random_tokens(&shape, 2, 3).unwrap();
        let (ids, wts) = (vec![1, 3, 2, 1], vec![0.75, 0.25, 0.5, -0.5]);
        let r = MoeReference::new(
            &shape,
            &x,
            &ids,
            &wts,
            Activation::Swiglu,
            Combine::SortedReduce,
            &get,
        )
        .unwrap();
        let ip = shape.inter_padded();
        for (p, &e) in ids.iter().enumerate() {
            let b = &experts[e as usize].bias.as_ref().unwrap().gate_up;
            for j in 0..ip {
                let want = Activation::Swiglu.eval(b[2 * j].to_f32(), b[2 * j + 1].to_f32());
                assert_eq!(r.activations()[p * ip + j], want, "pair {p} output {j}");
            }
        }
        let h = shape.hidden;
        for t in 0..2 {
            for n in 0..h {
                let want: f32 = (0..2)
                    .map(|k| {
                        let e = ids[t * 2 + k] as usize;
                        wts[t * 2 + k] * experts[e].bias.as_ref().unwrap().down[n].to_f32()
                    })
                    .sum();
                assert_eq!(r.out()[t * h + n], want);
            }
        }
        assert!(r.out().iter().filter(|v| **v != 0.0).count() > h);
        // Lengths that are not the layer's are refused.
        assert!(ExpertBias::from_logical(&shape, &[bf16::ONE; 3], &[bf16::ONE; 96]).is_err());
    }

    #[test]
    fn refusals() {
        let shape = small();
        let x = random_tokens(&shape, 2, 1).unwrap();
        let experts: Vec<ExpertWeights> = (0..shape.experts)
            .map(|e| ExpertWeights::random(&shape, e, 9).unwrap())
            .collect();
        let get = |e: usize| Ok(&experts[e]);
        let r = MoeReference::new(
            &shape,
            &x,
            &[0, 9, 1, 2],
            &[0.5; 4],
            Activation::Swiglu,
            Combine::Atomic,
            &get,
        );
        assert!(r.is_err());
        let bad = MoeShape { topk: 5, ..shape };
        assert!(bad.validate().is_err());
        let bad = MoeShape {
            hidden: 100,
            ..shape
        };
        assert!(bad.validate().is_err());
    }
}
