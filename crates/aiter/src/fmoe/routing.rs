//! Routing: which experts each token goes to, and the sorted token list the kernels read.
//!
//! [`Routing::uniform`] follows AITER's MoE tuner (`FmoeTuner.generate_data` in
//! `aiter_meta/hsa/gfx942/fmoe_2stages/tune.py`, which the gfx950 tuner inherits): a standard
//! normal score per token and expert (`torch.randn((token, expert))`), then `fused_topk` with
//! renormalisation: the `topk` highest scores pick distinct experts (so every expert is equally
//! likely) and their softmax weights are renormalised to sum to 1. The scores here come from a
//! seeded generator of this crate, not from torch's: the same distribution, not the same draw.
//!
//! [`SortedRouting::new`] is `moe_sorting` (`aiter/fused_moe.py`, the reference in Composable
//! Kernel's `reference_moe_sorting.hpp`): experts in ascending order, each expert with tokens
//! gets its (token, slot) pairs in token order, padded to whole blocks of `block_m` rows with
//! the sentinel `tokens | topk << 24` and weight 0; `sorted_expert_ids` names each block's
//! expert; `num_valid_ids = [rows in use, tokens]`. AITER allocates the lists for the worst case
//! ([`FmoeProblem::max_sorted_rows`](crate::fmoe::FmoeProblem::max_sorted_rows)) and leaves
//! their tails unwritten; the kernels never read them (a workgroup whose block starts at or past
//! `num_valid_ids[0]` exits before loading anything), and here they hold the sentinel, weight 0
//! and expert 0.

use crate::fmoe::problem as bad;
use crate::fmoe::{FmoeError, FmoeProblem};

/// Each token's experts and weights.
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    tokens: u32,
    experts: u32,
    topk: u32,
    ids: Vec<u32>,
    weights: Vec<f32>,
}

/// SplitMix64: a small seeded generator (the routing must be reproducible, not secret).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }

    /// Standard normal (Box-Muller).
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.unit(), self.unit());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

impl Routing {
    /// Random scores then top-k, as AITER's tuner routes the rows it times (module docs).
    pub fn uniform(problem: &FmoeProblem, seed: u64) -> Routing {
        let (t, e, k) = (problem.tokens(), problem.experts(), problem.topk());
        let mut rng = SplitMix(seed);
        let mut ids = Vec::with_capacity((t * k) as usize);
        let mut weights = Vec::with_capacity((t * k) as usize);
        let mut scores: Vec<(f64, u32)> = Vec::with_capacity(e as usize);
        for _ in 0..t {
            scores.clear();
            scores.extend((0..e).map(|x| (rng.normal(), x)));
            // Highest score first; ties (measure zero) by expert.
            scores.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            let top = &scores[..k as usize];
            // Softmax over all experts then renormalised over the top k is the softmax of
            // the top k alone.
            let max = top[0].0;
            let sum: f64 = top.iter().map(|s| (s.0 - max).exp()).sum();
            for s in top {
                ids.push(s.1);
                weights.push(((s.0 - max).exp() / sum) as f32);
            }
        }
        Routing {
            tokens: t,
            experts: e,
            topk: k,
            ids,
            weights,
        }
    }

    /// A routing given explicitly: `ids[t * topk + k]` is token `t`'s `k`-th expert.
    pub fn new(
        problem: &FmoeProblem,
        ids: Vec<u32>,
        weights: Vec<f32>,
    ) -> Result<Routing, FmoeError> {
        let (t, e, k) = (problem.tokens(), problem.experts(), problem.topk());
        let n = t as usize * k as usize;
        if ids.len() != n || weights.len() != n {
            return Err(problem_len(n, ids.len(), weights.len()));
        }
        for (tok, row) in ids.chunks_exact(k as usize).enumerate() {
            for (i, &x) in row.iter().enumerate() {
                if x >= e || row[..i].contains(&x) {
                    return Err(bad(format!(
                        "token {tok}: expert {x} is out of range (experts {e}) or repeated"
                    )));
                }
            }
        }
        Ok(Routing {
            tokens: t,
            experts: e,
            topk: k,
            ids,
            weights,
        })
    }

    /// Token `t`'s experts.
    pub fn experts_of(&self, t: u32) -> &[u32] {
        let k = self.topk as usize;
        &self.ids[t as usize * k..(t as usize + 1) * k]
    }

    /// Token `t`'s weights (same order as [`experts_of`](Self::experts_of)).
    pub fn weights_of(&self, t: u32) -> &[f32] {
        let k = self.topk as usize;
        &self.weights[t as usize * k..(t as usize + 1) * k]
    }

    /// Tokens.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// Tokens routed to each expert.
    pub fn expert_loads(&self) -> Vec<u32> {
        let mut loads = vec![0; self.experts as usize];
        for &x in &self.ids {
            loads[x as usize] += 1;
        }
        loads
    }
}

fn problem_len(n: usize, ids: usize, weights: usize) -> FmoeError {
    bad(format!(
        "a routing of tokens x topk = {n} entries got {ids} ids and {weights} weights"
    ))
}

/// The sorted token list of a routing for blocks of `block_m` rows (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct SortedRouting {
    block_m: u32,
    token_ids: Vec<u32>,
    weights: Vec<f32>,
    expert_ids: Vec<u32>,
    valid_rows: u32,
    tokens: u32,
}

impl SortedRouting {
    /// Sorts `routing` of `problem` into blocks of `block_m` rows.
    pub fn new(
        problem: &FmoeProblem,
        routing: &Routing,
        block_m: u32,
    ) -> Result<SortedRouting, FmoeError> {
        if block_m == 0 {
            return Err(problem_zero_block());
        }
        if routing.tokens != problem.tokens()
            || routing.experts != problem.experts()
            || routing.topk != problem.topk()
        {
            return Err(bad(
                "the routing was made for another problem (tokens, experts or topk differ)",
            ));
        }
        let (t, k) = (problem.tokens(), problem.topk());
        let rows = problem.max_sorted_rows(block_m) as usize;
        let blocks = problem.max_blocks(block_m) as usize;
        let sentinel = t | k << 24;
        let mut per_expert: Vec<Vec<(u32, f32)>> = vec![Vec::new(); problem.experts() as usize];
        for tok in 0..t {
            for (slot, (&x, &w)) in routing
                .experts_of(tok)
                .iter()
                .zip(routing.weights_of(tok))
                .enumerate()
            {
                per_expert[x as usize].push((tok | (slot as u32) << 24, w));
            }
        }
        let mut token_ids = Vec::with_capacity(rows);
        let mut weights = Vec::with_capacity(rows);
        let mut expert_ids = Vec::with_capacity(blocks);
        for (x, list) in per_expert.iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let padded = list.len().next_multiple_of(block_m as usize);
            for i in 0..padded {
                let (id, w) = list.get(i).copied().unwrap_or((sentinel, 0.0));
                token_ids.push(id);
                weights.push(w);
            }
            expert_ids.extend(std::iter::repeat_n(x as u32, padded / block_m as usize));
        }
        let valid_rows = token_ids.len();
        // The worst case (each expert one partial block, plus the rest) bounds the valid rows.
        debug_assert!(valid_rows <= rows && expert_ids.len() <= blocks);
        token_ids.resize(rows, sentinel);
        weights.resize(rows, 0.0);
        expert_ids.resize(blocks, 0);
        Ok(SortedRouting {
            block_m,
            token_ids,
            weights,
            expert_ids,
            valid_rows: valid_rows as u32,
            tokens: t,
        })
    }

    /// Rows per block.
    pub fn block_m(&self) -> u32 {
        self.block_m
    }

    /// `token | slot << 24` per sorted row (the whole allocated list).
    pub fn token_ids(&self) -> &[u32] {
        &self.token_ids
    }

    /// Top-k weight per sorted row (0 on padding).
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Expert per block (the whole allocated list).
    pub fn expert_ids(&self) -> &[u32] {
        &self.expert_ids
    }

    /// Rows in use (`num_valid_ids[0]`), a multiple of `block_m`.
    pub fn valid_rows(&self) -> u32 {
        self.valid_rows
    }

    /// Blocks in use: the workgroup rows of the grid that do work.
    pub fn valid_blocks(&self) -> u32 {
        self.valid_rows / self.block_m
    }

    /// `num_valid_ids`: rows in use and tokens, as the kernels read it (little-endian i32s).
    pub fn valid_ids_bytes(&self) -> Vec<u8> {
        [self.valid_rows, self.tokens]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    /// The sorted token list's bytes.
    pub fn token_ids_bytes(&self) -> Vec<u8> {
        self.token_ids
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }

    /// The sorted weights' bytes.
    pub fn weights_bytes(&self) -> Vec<u8> {
        self.weights.iter().flat_map(|v| v.to_le_bytes()).collect()
    }

    /// The block experts' bytes.
    pub fn expert_ids_bytes(&self) -> Vec<u8> {
        self.expert_ids
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect()
    }
}

fn problem_zero_block() -> FmoeError {
    bad("block_m must be positive")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fmoe::Activation;

    fn prob(t: u32, e: u32, k: u32) -> FmoeProblem {
        FmoeProblem::new(t, 256, 128, e, k, Activation::Silu).unwrap()
    }

    #[test]
    fn uniform_routing_picks_distinct_experts_with_normalised_weights() {
        let p = prob(300, 64, 6);
        let r = Routing::uniform(&p, 7);
        assert_eq!(r, Routing::uniform(&p, 7), "seeded");
        assert_ne!(r, Routing::uniform(&p, 8));
        for t in 0..300 {
            let ids = r.experts_of(t);
            let mut sorted = ids.to_vec();
            sorted.sort();
            sorted.dedup();
            assert_eq!(sorted.len(), 6);
            assert!(ids.iter().all(|&x| x < 64));
            let w = r.weights_of(t);
            assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            // Highest score first, so non-increasing weights.
            assert!(w.windows(2).all(|p| p[0] >= p[1]));
        }
        // Roughly uniform: 1800 picks over 64 experts, 28.1 each on average.
        let loads = r.expert_loads();
        assert_eq!(loads.iter().sum::<u32>(), 1800);
        assert!(loads.iter().all(|&l| (8..=60).contains(&l)), "{loads:?}");
    }

    #[test]
    fn sorting_is_moe_sorting() {
        let p = prob(3, 4, 2);
        // Token 0 -> experts 2, 0; token 1 -> 2, 3; token 2 -> 0, 2.
        let r = Routing::new(
            &p,
            vec![2, 0, 2, 3, 0, 2],
            vec![0.6, 0.4, 0.5, 0.5, 0.7, 0.3],
        )
        .unwrap();
        let s = SortedRouting::new(&p, &r, 2).unwrap();
        let pad = 3 | 2 << 24;
        // Expert 0: (t0, slot 1), (t2, slot 0); expert 2: (t0,0), (t1,0), (t2,1) + pad;
        // expert 3: (t1, 1) + pad; expert 1 has no token and no block.
        let valid = [1 << 24, 2, 0, 1, 2 | 1 << 24, pad, 1 | 1 << 24, pad];
        assert_eq!(s.valid_rows(), 8);
        assert_eq!(s.valid_blocks(), 4);
        assert_eq!(&s.token_ids()[..8], valid);
        assert_eq!(&s.expert_ids()[..4], [0, 2, 2, 3]);
        assert_eq!(&s.weights()[..8], [0.4, 0.7, 0.6, 0.5, 0.3, 0.0, 0.5, 0.0]);
        // Allocated for the worst case: 3 * 2 + 4 * 2 - 2 = 12 rows, 6 blocks.
        assert_eq!(s.token_ids().len(), 12);
        assert_eq!(s.expert_ids().len(), 6);
        assert!(s.token_ids()[8..].iter().all(|&v| v == pad));
        assert_eq!(s.valid_ids_bytes(), [8, 0, 0, 0, 3, 0, 0, 0]);
    }

    #[test]
    fn sorted_lists_cover_every_pair_once() {
        for (t, e, k, bm) in [(1, 256, 8, 32), (1024, 256, 8, 32), (77, 8, 3, 16)] {
            let p = prob(t, e, k);
            let r = Routing::uniform(&p, 1);
            let s = SortedRouting::new(&p, &r, bm).unwrap();
            assert_eq!(s.valid_rows() % bm, 0);
            assert!(s.valid_blocks() as u64 <= p.max_blocks(bm));
            let mut seen = vec![false; (t * k) as usize];
            for (i, &id) in s.token_ids()[..s.valid_rows() as usize].iter().enumerate() {
                let (tok, slot) = (id & 0xff_ffff, id >> 24);
                if tok == t {
                    assert_eq!(slot, k, "sentinel");
                    continue;
                }
                let x = s.expert_ids()[i / bm as usize];
                assert_eq!(r.experts_of(tok)[slot as usize], x);
                assert_eq!(s.weights()[i], r.weights_of(tok)[slot as usize]);
                assert!(!std::mem::replace(
                    &mut seen[(tok * k + slot) as usize],
                    true
                ));
            }
            assert!(seen.iter().all(|&s| s));
            // Blocks are in ascending expert order.
            let used = &s.expert_ids()[..s.valid_blocks() as usize];
            assert!(used.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn refuses_bad_routings() {
        let p = prob(2, 4, 2);
        assert!(Routing::new(&p, vec![0, 0, 1, 2], vec![0.5; 4]).is_err());
        assert!(Routing::new(&p, vec![0, 4, 1, 2], vec![0.5; 4]).is_err());
        assert!(Routing::new(&p, vec![0, 1, 1], vec![0.5; 3]).is_err());
        let r = Routing::new(&p, vec![0, 1, 1, 2], vec![0.5; 4]).unwrap();
        assert!(SortedRouting::new(&p, &r, 0).is_err());
        assert!(SortedRouting::new(&prob(3, 4, 2), &r, 16).is_err());
    }
}
