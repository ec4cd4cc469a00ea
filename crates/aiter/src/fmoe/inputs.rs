//! Inputs of a stage-1 launch in the layouts the kernels read, and the CPU reference of its
//! output.
//!
//! Data as AITER's tuner makes it (`generate_data`): activations and weights drawn from
//! `N(0, 1) / 10` and quantised per row to FP8 e4m3fn with an f32 scale `amax / 448`; the
//! weights then go through `shuffle_weight` with its (16, 16) layout ([`shuffle_weight`]).

use tilegen_mx::{Fp8Overflow, decode_e4m3fn, encode_e4m3fn};

use crate::fmoe::{Activation, FmoeProblem, SHUFFLE_K, SHUFFLE_N, SortedRouting};

/// Largest finite e4m3fn value: per-row scales map a row's largest magnitude onto it.
const E4M3_MAX: f32 = 448.0;

/// FP8 activations and weights with their per-row scales (weights in logical row order).
#[derive(Debug, Clone, PartialEq)]
pub struct FmoeInputs {
    problem: FmoeProblem,
    x: Vec<u8>,
    x_scale: Vec<f32>,
    w: Vec<u8>,
    w_scale: Vec<f32>,
}

/// The seeded generator of the inputs (SplitMix64 and Box-Muller).
struct Normal(u64);

impl Normal {
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn sample(&mut self) -> f32 {
        let unit = |v: u64| ((v >> 11) + 1) as f64 / (1u64 << 53) as f64;
        let (u, v) = (unit(self.next_u64()), unit(self.next_u64()));
        ((-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
    }
}

/// Quantises `rows` rows of `cols` values per row: codes and `amax / 448` scales.
fn quantize_rows(values: &[f32], cols: usize) -> (Vec<u8>, Vec<f32>) {
    let mut codes = Vec::with_capacity(values.len());
    let mut scales = Vec::with_capacity(values.len() / cols);
    for row in values.chunks_exact(cols) {
        let amax = row.iter().fold(0f32, |m, v| m.max(v.abs()));
        let scale = if amax > 0.0 { amax / E4M3_MAX } else { 1.0 };
        scales.push(scale);
        codes.extend(
            row.iter()
                .map(|v| encode_e4m3fn(v / scale, Fp8Overflow::Saturate)),
        );
    }
    (codes, scales)
}

impl FmoeInputs {
    /// Random inputs for `problem` (module docs), reproducible from `seed`.
    pub fn random(problem: &FmoeProblem, seed: u64) -> FmoeInputs {
        let (t, d) = (problem.tokens() as usize, problem.model_dim() as usize);
        let rows = problem.experts() as usize * 2 * problem.inter_dim() as usize;
        let mut rng = Normal(seed);
        let x: Vec<f32> = (0..t * d).map(|_| rng.sample() / 10.0).collect();
        let w: Vec<f32> = (0..rows * d).map(|_| rng.sample() / 10.0).collect();
        let (x, x_scale) = quantize_rows(&x, d);
        let (w, w_scale) = quantize_rows(&w, d);
        FmoeInputs {
            problem: *problem,
            x,
            x_scale,
            w,
            w_scale,
        }
    }

    /// The activations' FP8 codes, `[tokens, model_dim]`.
    pub fn x(&self) -> &[u8] {
        &self.x
    }

    /// The activations' per-token scales.
    pub fn x_scale(&self) -> &[f32] {
        &self.x_scale
    }

    /// The weights' FP8 codes in logical order, `[experts, 2 * inter_dim, model_dim]`.
    pub fn w(&self) -> &[u8] {
        &self.w
    }

    /// The weights' per-row scales, `[experts, 2 * inter_dim]`.
    pub fn w_scale(&self) -> &[f32] {
        &self.w_scale
    }

    /// The weights as the kernels read them ([`shuffle_weight`] of each expert).
    pub fn w_shuffled(&self) -> Vec<u8> {
        let rows = 2 * self.problem.inter_dim() as usize;
        let d = self.problem.model_dim() as usize;
        self.w
            .chunks_exact(rows * d)
            .flat_map(|e| shuffle_weight(e, rows, d))
            .collect()
    }

    /// The stage-1 output the kernels should write, `[tokens, topk, inter_dim]` in f64:
    /// for each valid sorted row `(t, slot)` of expert `e`, `act(g) * u`, with `g` and `u` the
    /// dot products of token `t`'s dequantised row with expert `e`'s gate row `j` and up row
    /// `inter_dim + j`. With `doweight` both are first multiplied by the slot's weight `w`
    /// (`act(w g) * w u`, as AITER's `torch_moe_stage1` scales the activation's input). Pairs
    /// the routing never made stay 0.
    pub fn reference(&self, sorted: &SortedRouting, doweight: bool) -> Vec<f64> {
        let p = &self.problem;
        let (d, i, k) = (
            p.model_dim() as usize,
            p.inter_dim() as usize,
            p.topk() as usize,
        );
        let xd: Vec<f64> = self.x.iter().map(|&c| decode_e4m3fn(c) as f64).collect();
        let mut out = vec![0f64; p.tokens() as usize * k * i];
        let valid = sorted.valid_rows() as usize;
        for (row, &id) in sorted.token_ids()[..valid].iter().enumerate() {
            let (t, slot) = ((id & 0xff_ffff) as usize, (id >> 24) as usize);
            if t >= p.tokens() as usize {
                continue;
            }
            let e = sorted.expert_ids()[row / sorted.block_m() as usize] as usize;
            let xrow = &xd[t * d..(t + 1) * d];
            let weight = if doweight {
                sorted.weights()[row] as f64
            } else {
                1.0
            };
            let dot = |r: usize| {
                let base = (e * 2 * i + r) * d;
                let s: f64 = self.w[base..base + d]
                    .iter()
                    .zip(xrow)
                    .map(|(&c, x)| decode_e4m3fn(c) as f64 * x)
                    .sum();
                s * self.x_scale[t] as f64 * self.w_scale[e * 2 * i + r] as f64
            };
            for j in 0..i {
                let (g, u) = (dot(j) * weight, dot(i + j) * weight);
                out[(t * k + slot) * i + j] = activation(p.activation(), g) * u;
            }
        }
        out
    }
}

/// `act(g)`. SiLU is `g / (1 + e^-g)`; GELU is the tanh approximation
/// `0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))`, the form the kernels evaluate (their code
/// computes `g / (1 + e^(-1.5957691 g - 0.0713548 g^3))`, the same function).
pub fn activation(act: Activation, g: f64) -> f64 {
    match act {
        Activation::Silu => g / (1.0 + (-g).exp()),
        Activation::Gelu => {
            let c = (2.0 / std::f64::consts::PI).sqrt();
            0.5 * g * (1.0 + (c * (g + 0.044715 * g * g * g)).tanh())
        }
    }
}

/// AITER's `shuffle_weight(w, (16, 16))` for a 1-byte `[rows, k]` matrix: blocks of 16 rows by
/// 32 bytes of K, in row-block-major then K-block order; inside a block the two 16-byte
/// halves of K come one after the other, each as 16 rows of 16 bytes. `rows` must be a multiple
/// of [`SHUFFLE_N`] and `k` of [`SHUFFLE_K`] ([`FmoeProblem::new`] checks both).
pub fn shuffle_weight(w: &[u8], rows: usize, k: usize) -> Vec<u8> {
    let (bn, bk) = (SHUFFLE_N as usize, SHUFFLE_K as usize);
    assert!(
        rows.is_multiple_of(bn) && k.is_multiple_of(bk) && w.len() == rows * k,
        "shuffle_weight: {rows}x{k} is not a whole number of {bn}x{bk} blocks of {} bytes",
        w.len()
    );
    let mut out = vec![0u8; w.len()];
    let half = bk / 2;
    for r in 0..rows {
        for c in 0..k {
            let (nb, n) = (r / bn, r % bn);
            let (kb, kc, b) = (c / bk, (c % bk) / half, c % half);
            let at = ((nb * (k / bk) + kb) * 2 + kc) * bn * half + n * half + b;
            out[at] = w[r * k + c];
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fmoe::Routing;

    #[test]
    fn shuffle_matches_the_permutation() {
        // view(N/16, 16, K/32, 2, 16).permute(0, 2, 3, 1, 4): element (r, c) lands at
        // [r/16][c/32][(c%32)/16][r%16][c%16].
        let (rows, k) = (32, 64);
        let w: Vec<u8> = (0..rows * k).map(|v| (v * 7 % 251) as u8).collect();
        let s = shuffle_weight(&w, rows, k);
        for r in 0..rows {
            for c in 0..k {
                let at =
                    (((r / 16) * 2 + c / 32) * 2 + (c % 32) / 16) * 256 + (r % 16) * 16 + c % 16;
                assert_eq!(s[at], w[r * k + c]);
            }
        }
        // The first 16 bytes are row 0's first 16 bytes; the next 16 are row 1's.
        assert_eq!(&s[..16], &w[..16]);
        assert_eq!(&s[16..32], &w[k..k + 16]);
    }

    #[test]
    fn quantised_rows_reach_the_format_maximum() {
        let p = FmoeProblem::new(3, 64, 16, 2, 1, Activation::Silu).unwrap();
        let inp = FmoeInputs::random(&p, 5);
        for (row, &s) in inp.x().chunks_exact(64).zip(inp.x_scale()) {
            let m = row
                .iter()
                .map(|&c| decode_e4m3fn(c).abs())
                .fold(0f32, f32::max);
            assert_eq!(m, E4M3_MAX);
            assert!(s > 0.0 && s < 1.0);
        }
        assert_eq!(inp.w().len(), 2 * 32 * 64);
        assert_eq!(inp.w_scale().len(), 64);
    }

    #[test]
    fn reference_fills_exactly_the_routed_pairs() {
        let p = FmoeProblem::new(2, 64, 16, 4, 2, Activation::Silu).unwrap();
        let inp = FmoeInputs::random(&p, 9);
        let r = Routing::new(&p, vec![1, 3, 3, 0], vec![0.25, 0.75, 0.5, 0.5]).unwrap();
        let s = SortedRouting::new(&p, &r, 16).unwrap();
        let plain = inp.reference(&s, false);
        let weighted = inp.reference(&s, true);
        assert_eq!(plain.len(), 2 * 2 * 16);
        let dq = |c: u8| decode_e4m3fn(c) as f64;
        // Token t's pre-activation against weight row `row` (expert-major), by hand.
        let dot = |t: usize, row: usize| -> f64 {
            (0..64)
                .map(|c| dq(inp.x()[t * 64 + c]) * dq(inp.w()[row * 64 + c]))
                .sum::<f64>()
                * inp.x_scale()[t] as f64
                * inp.w_scale()[row] as f64
        };
        let silu = |g: f64| activation(Activation::Silu, g);
        for j in 0..16 {
            // Token 0, slot 1 -> expert 3 (rows 96..128) with weight 0.75.
            let (g, u) = (dot(0, 96 + j), dot(0, 112 + j));
            let at = 16 + j;
            assert!((plain[at] - silu(g) * u).abs() <= 1e-12 * plain[at].abs());
            let want = silu(0.75 * g) * 0.75 * u;
            assert!((weighted[at] - want).abs() <= 1e-12 * want.abs());
            // Token 1, slot 1 -> expert 0 (rows 0..32).
            let at = 3 * 16 + j;
            let want = silu(dot(1, j)) * dot(1, 16 + j);
            assert!((plain[at] - want).abs() <= 1e-12 * want.abs());
        }
        assert!(plain.iter().all(|v| v.is_finite()) && plain.iter().any(|&v| v != 0.0));
    }
}
