//! Token routing of a mixture-of-experts layer, on the host, and the sorted layout the grouped
//! kernels read.
//!
//! [`route`] turns router logits into each token's top-k experts and their weights, with the
//! scoring each model family uses. [`Routing::sort`] groups the (token, slot) pairs by expert
//! and pads each expert's run to whole `block_m`-row blocks, so a workgroup of the grouped GEMM
//! takes one block: rows of one expert, its weights found by the block's expert id, its A rows
//! gathered by token id (the layout vLLM's `moe_align_block_size` and AITER's `moe_sorting`
//! produce).

/// Why routing refused its inputs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RoutingError {
    /// Sizes that must be positive.
    #[error("{what} = {value} must be positive")]
    Empty {
        /// Which size.
        what: &'static str,
        /// Its value.
        value: usize,
    },
    /// More experts per token than experts.
    #[error("top-k = {topk} exceeds the {experts} experts")]
    TopkTooLarge {
        /// k.
        topk: usize,
        /// E.
        experts: usize,
    },
    /// A buffer of the wrong length.
    #[error("{what} holds {got} values, expected {want}")]
    Length {
        /// Which buffer.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length the sizes imply.
        want: usize,
    },
    /// A logit or bias that is NaN or infinite.
    #[error("{what}[{index}] = {value} is not finite")]
    NotFinite {
        /// Which buffer.
        what: &'static str,
        /// Where.
        index: usize,
        /// The value.
        value: f32,
    },
    /// An expert id outside `0..E`.
    #[error("token {token} slot {slot}: expert {expert} is not below E = {experts}")]
    ExpertOutOfRange {
        /// Token.
        token: usize,
        /// Slot in its top-k.
        slot: usize,
        /// The id.
        expert: u32,
        /// E.
        experts: usize,
    },
    /// The same expert twice in a token's top-k.
    #[error("token {token}: expert {expert} appears twice in its top-k")]
    DuplicateExpert {
        /// Token.
        token: usize,
        /// The id.
        expert: u32,
    },
    /// Grouped selection whose groups do not split the experts or pick too few.
    #[error(
        "{groups} expert groups (keeping {keep}) must divide E = {experts}, keep 1..=groups, and hold at least top-k = {topk} experts"
    )]
    BadGroups {
        /// Groups.
        groups: usize,
        /// Groups kept.
        keep: usize,
        /// E.
        experts: usize,
        /// k.
        topk: usize,
    },
    /// A sorted layout read back from a device that breaks the layout's rules.
    #[error("the device's sorted layout: {rule}")]
    DeviceLayout {
        /// The rule, with the values.
        rule: String,
    },
    /// Token ids must fit the sorted layout's 32-bit entries.
    #[error("{tokens} tokens x top-{topk} does not fit 32-bit sorted entries")]
    TooManyTokens {
        /// T.
        tokens: usize,
        /// k.
        topk: usize,
    },
}

/// How logits become expert choices and weights.
#[derive(Debug, Clone, PartialEq)]
pub enum Scoring {
    /// Softmax over all experts, then the k largest probabilities; `renormalize` rescales the
    /// k weights to sum to 1 (Mixtral, Qwen-MoE).
    SoftmaxTopk {
        /// Rescale the chosen weights to sum to 1.
        renormalize: bool,
    },
    /// The k largest logits, then a softmax over those k (gpt-oss).
    TopkSoftmax,
    /// Sigmoid scores; experts chosen by score plus a per-expert bias, within the `keep`
    /// groups (of `groups` equal groups) whose two best biased scores sum highest; weights are
    /// the unbiased scores, normalized to sum 1, times `scale` (DeepSeek-V3: 8 groups, keep 4,
    /// scale 2.5; Kimi-K2: 1 group, scale 2.827).
    SigmoidGrouped {
        /// Equal groups of experts.
        groups: usize,
        /// Groups kept per token.
        keep: usize,
        /// Per-expert selection bias (`e_score_correction_bias`), E values.
        bias: Vec<f32>,
        /// Routed scaling factor.
        scale: f32,
    },
}

/// Each token's top-k experts and weights, slot order fixed by [`route`] (descending selection
/// score, ties to the lower expert id).
#[derive(Debug, Clone, PartialEq)]
pub struct Routing {
    tokens: usize,
    experts: usize,
    topk: usize,
    ids: Vec<u32>,
    weights: Vec<f32>,
}

impl Routing {
    /// A routing given directly (`ids` and `weights` are `[tokens, topk]`, row-major): checked
    /// for ids below `experts` and no expert twice per token.
    pub fn new(
        experts: usize,
        topk: usize,
        ids: Vec<u32>,
        weights: Vec<f32>,
    ) -> Result<Routing, RoutingError> {
        check_sizes(experts, topk)?;
        if !ids.len().is_multiple_of(topk) {
            return Err(RoutingError::Length {
                what: "ids",
                got: ids.len(),
                want: ids.len().next_multiple_of(topk),
            });
        }
        let tokens = ids.len() / topk;
        if weights.len() != ids.len() {
            return Err(RoutingError::Length {
                what: "weights",
                got: weights.len(),
                want: ids.len(),
            });
        }
        finite("weights", &weights)?;
        for (t, row) in ids.chunks(topk).enumerate() {
            for (slot, &e) in row.iter().enumerate() {
                if e as usize >= experts {
                    return Err(RoutingError::ExpertOutOfRange {
                        token: t,
                        slot,
                        expert: e,
                        experts,
                    });
                }
                if row[..slot].contains(&e) {
                    return Err(RoutingError::DuplicateExpert {
                        token: t,
                        expert: e,
                    });
                }
            }
        }
        Ok(Routing {
            tokens,
            experts,
            topk,
            ids,
            weights,
        })
    }

    /// Tokens routed.
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    /// Experts of the layer.
    pub fn experts(&self) -> usize {
        self.experts
    }

    /// Experts per token.
    pub fn topk(&self) -> usize {
        self.topk
    }

    /// Expert ids, `[tokens, topk]` row-major.
    pub fn ids(&self) -> &[u32] {
        &self.ids
    }

    /// Routing weights, `[tokens, topk]` row-major.
    pub fn weights(&self) -> &[f32] {
        &self.weights
    }

    /// Tokens each expert receives.
    pub fn counts(&self) -> Vec<usize> {
        let mut c = vec![0; self.experts];
        for &e in &self.ids {
            c[e as usize] += 1;
        }
        c
    }

    /// The sorted layout for blocks of `block_m` rows (see [`SortedBlocks`]).
    pub fn sort(&self, block_m: usize) -> Result<SortedBlocks, RoutingError> {
        if block_m == 0 {
            return Err(RoutingError::Empty {
                what: "block_m",
                value: 0,
            });
        }
        let pairs = self.tokens * self.topk;
        let pad = u32::try_from(pairs).map_err(|_| RoutingError::TooManyTokens {
            tokens: self.tokens,
            topk: self.topk,
        })?;
        let mut per_expert: Vec<Vec<u32>> = vec![Vec::new(); self.experts];
        // Pairs in token order within each expert: a stable order the kernels and the
        // reference agree on.
        for (i, &e) in self.ids.iter().enumerate() {
            per_expert[e as usize].push(i as u32);
        }
        let mut entries = Vec::new();
        let mut block_expert = Vec::new();
        let mut block_rows = Vec::new();
        for (e, list) in per_expert.iter().enumerate() {
            for chunk in list.chunks(block_m) {
                entries.extend_from_slice(chunk);
                entries.extend(std::iter::repeat_n(pad, block_m - chunk.len()));
                block_expert.push(e as u32);
                block_rows.push(chunk.len() as u32);
            }
        }
        Ok(SortedBlocks {
            block_m,
            pad,
            entries,
            block_expert,
            block_rows,
        })
    }
}

/// The (token, slot) pairs grouped by expert and padded to blocks of `block_m` rows. Entry
/// `token * topk + slot` names a pair; padding entries hold [`SortedBlocks::pad`]
/// (= tokens x topk). Experts without tokens have no block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortedBlocks {
    block_m: usize,
    pad: u32,
    entries: Vec<u32>,
    block_expert: Vec<u32>,
    block_rows: Vec<u32>,
}

impl SortedBlocks {
    /// The layout a device's sort wrote (`entries` `[blocks * block_m]`, `block_expert`
    /// `[blocks]`), its blocks past the routing's (expert [`super::NO_EXPERT`], a suffix)
    /// dropped; each block's valid rows, which come first, are the entries other than `pad`.
    pub fn from_device(
        block_m: usize,
        pad: u32,
        mut entries: Vec<u32>,
        mut block_expert: Vec<u32>,
    ) -> Result<Self, RoutingError> {
        let fail = |rule: String| Err(RoutingError::DeviceLayout { rule });
        if block_m == 0 || entries.len() != block_expert.len() * block_m {
            return fail(format!(
                "{} entries for {} blocks of {block_m} rows",
                entries.len(),
                block_expert.len()
            ));
        }
        let blocks = block_expert
            .iter()
            .position(|&e| e == super::NO_EXPERT)
            .unwrap_or(block_expert.len());
        if let Some(b) = block_expert[blocks..]
            .iter()
            .position(|&e| e != super::NO_EXPERT)
        {
            return fail(format!(
                "block {} has an expert after an empty one",
                blocks + b
            ));
        }
        if block_expert[..blocks].windows(2).any(|w| w[0] > w[1]) {
            return fail("blocks out of expert order".into());
        }
        block_expert.truncate(blocks);
        entries.truncate(blocks * block_m);
        let mut block_rows = Vec::with_capacity(blocks);
        for (b, rows) in entries.chunks(block_m).enumerate() {
            let valid = rows.iter().take_while(|&&p| p != pad).count();
            if rows[valid..].iter().any(|&p| p != pad) {
                return fail(format!("block {b} has a pair after a padding row"));
            }
            if rows.iter().any(|&p| p > pad) {
                return fail(format!("block {b} names a pair past the {pad} pairs"));
            }
            block_rows.push(valid as u32);
        }
        Ok(SortedBlocks {
            block_m,
            pad,
            entries,
            block_expert,
            block_rows,
        })
    }

    /// The same grouping with each expert's pairs in ascending order across its blocks: the
    /// order [`Routing::sort`] gives them, which a device's sort need not.
    pub fn canonical(&self) -> SortedBlocks {
        let mut out = self.clone();
        let bm = self.block_m;
        let mut b = 0;
        while b < out.block_expert.len() {
            let e = out.block_expert[b];
            let end = b + out.block_expert[b..]
                .iter()
                .take_while(|&&x| x == e)
                .count();
            let run = &mut out.entries[b * bm..end * bm];
            // Padding entries (the largest value) sort last, as the host pads the last block.
            run.sort_unstable();
            for (i, rows) in run.chunks(bm).enumerate() {
                out.block_rows[b + i] = rows.iter().filter(|&&p| p != self.pad).count() as u32;
            }
            b = end;
        }
        out
    }

    /// The layout as the device's sort writes it for grids of `max_blocks` blocks: entries
    /// `[max_blocks * block_m]` and block experts `[max_blocks]`, the blocks past this
    /// layout's padding rows of expert [`super::NO_EXPERT`]. `None` if the layout has more
    /// blocks.
    pub fn padded_to(&self, max_blocks: usize) -> Option<(Vec<u32>, Vec<u32>)> {
        let extra = max_blocks.checked_sub(self.blocks())?;
        let mut entries = self.entries.clone();
        entries.extend(std::iter::repeat_n(self.pad, extra * self.block_m));
        let mut experts = self.block_expert.clone();
        experts.extend(std::iter::repeat_n(super::NO_EXPERT, extra));
        Some((entries, experts))
    }

    /// Rows per block.
    pub fn block_m(&self) -> usize {
        self.block_m
    }

    /// The padding entry (tokens x topk).
    pub fn pad(&self) -> u32 {
        self.pad
    }

    /// Blocks.
    pub fn blocks(&self) -> usize {
        self.block_expert.len()
    }

    /// Entries, `blocks x block_m` (the padded row count).
    pub fn entries(&self) -> &[u32] {
        &self.entries
    }

    /// The expert of each block.
    pub fn block_expert(&self) -> &[u32] {
        &self.block_expert
    }

    /// Valid (non-padding) rows of each block; they come first in the block.
    pub fn block_rows(&self) -> &[u32] {
        &self.block_rows
    }
}

fn check_sizes(experts: usize, topk: usize) -> Result<(), RoutingError> {
    for (what, value) in [("experts", experts), ("topk", topk)] {
        if value == 0 {
            return Err(RoutingError::Empty { what, value });
        }
    }
    if topk > experts {
        return Err(RoutingError::TopkTooLarge { topk, experts });
    }
    Ok(())
}

fn finite(what: &'static str, v: &[f32]) -> Result<(), RoutingError> {
    match v.iter().position(|x| !x.is_finite()) {
        Some(index) => Err(RoutingError::NotFinite {
            what,
            index,
            value: v[index],
        }),
        None => Ok(()),
    }
}

/// The indices of the `k` largest `score`s among `candidates`, descending, ties to the lower
/// index.
fn top_k(
    score: impl Fn(usize) -> f32,
    candidates: impl Iterator<Item = usize>,
    k: usize,
) -> Vec<usize> {
    let mut c: Vec<usize> = candidates.collect();
    c.sort_by(|&a, &b| score(b).total_cmp(&score(a)).then(a.cmp(&b)));
    c.truncate(k);
    c
}

/// Routes `tokens` tokens from their router logits (`[tokens, experts]`, row-major).
pub fn route(
    logits: &[f32],
    tokens: usize,
    experts: usize,
    topk: usize,
    scoring: &Scoring,
) -> Result<Routing, RoutingError> {
    check_sizes(experts, topk)?;
    let want = tokens
        .checked_mul(experts)
        .ok_or(RoutingError::TooManyTokens { tokens, topk })?;
    if logits.len() != want {
        return Err(RoutingError::Length {
            what: "logits",
            got: logits.len(),
            want,
        });
    }
    finite("logits", logits)?;
    if let Scoring::SigmoidGrouped {
        groups, keep, bias, ..
    } = scoring
    {
        let (g, keep) = (*groups, *keep);
        if g == 0
            || !experts.is_multiple_of(g)
            || keep == 0
            || keep > g
            || keep * (experts / g) < topk
        {
            return Err(RoutingError::BadGroups {
                groups: g,
                keep,
                experts,
                topk,
            });
        }
        if bias.len() != experts {
            return Err(RoutingError::Length {
                what: "bias",
                got: bias.len(),
                want: experts,
            });
        }
        finite("bias", bias)?;
    }
    let mut ids = Vec::with_capacity(tokens * topk);
    let mut weights = Vec::with_capacity(tokens * topk);
    for row in logits.chunks(experts) {
        let (chosen, w): (Vec<usize>, Vec<f32>) = match scoring {
            Scoring::SoftmaxTopk { renormalize } => {
                let p = softmax(row);
                let chosen = top_k(|e| p[e], 0..experts, topk);
                let mut w: Vec<f32> = chosen.iter().map(|&e| p[e]).collect();
                if *renormalize {
                    normalize(&mut w);
                }
                (chosen, w)
            }
            Scoring::TopkSoftmax => {
                let chosen = top_k(|e| row[e], 0..experts, topk);
                let picked: Vec<f32> = chosen.iter().map(|&e| row[e]).collect();
                (chosen, softmax(&picked))
            }
            Scoring::SigmoidGrouped {
                groups,
                keep,
                bias,
                scale,
            } => {
                let s: Vec<f32> = row.iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect();
                let biased = |e: usize| s[e] + bias[e];
                let per = experts / groups;
                // A group's score: the sum of its two best biased scores (its best alone when
                // it holds one expert).
                let group_score = |g: usize| -> f32 {
                    top_k(biased, g * per..(g + 1) * per, 2)
                        .iter()
                        .map(|&e| biased(e))
                        .sum()
                };
                let kept = top_k(group_score, 0..*groups, *keep);
                let chosen = top_k(
                    biased,
                    kept.iter().flat_map(|&g| g * per..(g + 1) * per),
                    topk,
                );
                let mut w: Vec<f32> = chosen.iter().map(|&e| s[e]).collect();
                normalize(&mut w);
                w.iter_mut().for_each(|x| *x *= scale);
                (chosen, w)
            }
        };
        ids.extend(chosen.iter().map(|&e| e as u32));
        weights.extend(w);
    }
    Routing::new(experts, topk, ids, weights)
}

fn softmax(x: &[f32]) -> Vec<f32> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let e: Vec<f32> = x.iter().map(|&v| (v - max).exp()).collect();
    let sum: f32 = e.iter().sum();
    e.iter().map(|v| v / sum).collect()
}

fn normalize(w: &mut [f32]) {
    let sum: f32 = w.iter().sum();
    if sum > 0.0 {
        w.iter_mut().for_each(|x| *x /= sum);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn logits(tokens: usize, experts: usize, seed: u64) -> Vec<f32> {
        let mut s = seed | 1;
        (0..tokens * experts)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 8.0 - 4.0
            })
            .collect()
    }

    proptest! {
        #[test]
        fn sorted_blocks_hold_every_pair_once(
            tokens in 1usize..70, experts in 1usize..40, k in 1usize..9, bm in 1usize..40,
            seed in any::<u64>(), renorm in any::<bool>()
        ) {
            prop_assume!(k <= experts);
            let r = route(&logits(tokens, experts, seed), tokens, experts, k,
                &Scoring::SoftmaxTopk { renormalize: renorm }).unwrap();
            let s = r.sort(bm).unwrap();
            prop_assert_eq!(s.entries().len(), s.blocks() * bm);
            let mut seen = vec![0u32; tokens * k];
            for (b, rows) in s.entries().chunks(bm).enumerate() {
                let e = s.block_expert()[b];
                let valid = s.block_rows()[b] as usize;
                prop_assert!(valid >= 1);
                for (i, &entry) in rows.iter().enumerate() {
                    if i < valid {
                        prop_assert!(entry < s.pad());
                        prop_assert_eq!(r.ids()[entry as usize], e);
                        seen[entry as usize] += 1;
                    } else {
                        prop_assert_eq!(entry, s.pad());
                    }
                }
            }
            prop_assert!(seen.iter().all(|&c| c == 1));
            // Each expert's blocks are as few as its tokens allow.
            let counts = r.counts();
            prop_assert_eq!(s.blocks(), counts.iter().map(|c| c.div_ceil(bm)).sum::<usize>());
        }

        #[test]
        fn top_k_picks_the_largest(tokens in 1usize..20, experts in 2usize..64, k in 1usize..9,
            seed in any::<u64>()) {
            prop_assume!(k <= experts);
            let l = logits(tokens, experts, seed);
            for scoring in [Scoring::TopkSoftmax, Scoring::SoftmaxTopk { renormalize: false }] {
                let r = route(&l, tokens, experts, k, &scoring).unwrap();
                for t in 0..tokens {
                    let row = &l[t * experts..(t + 1) * experts];
                    let chosen = &r.ids()[t * k..(t + 1) * k];
                    let least = chosen.iter().map(|&e| row[e as usize]).fold(f32::INFINITY, f32::min);
                    let above = row.iter().filter(|&&x| x > least).count();
                    prop_assert!(above < k, "an unchosen logit beats a chosen one");
                    let w = &r.weights()[t * k..(t + 1) * k];
                    prop_assert!(w.windows(2).all(|p| p[0] >= p[1]));
                    if scoring == Scoring::TopkSoftmax {
                        prop_assert!((w.iter().sum::<f32>() - 1.0).abs() < 1e-5);
                    }
                }
            }
        }
    }

    #[test]
    fn grouped_sigmoid_keeps_to_the_best_groups() {
        // 8 experts in 4 groups of 2; keep 2 groups; top-2. With the bias, groups 1 (experts
        // 2, 3) and 3 (6, 7) score best; expert 0 has the highest logit but its group loses.
        // Expert 7 wins over 6 by its bias, and its weight is its unbiased score.
        let row = [3.0, -4.0, 1.0, 0.0, -4.0, -4.0, 2.0, 0.5];
        let bias = vec![0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.5];
        let scoring = Scoring::SigmoidGrouped {
            groups: 4,
            keep: 2,
            bias,
            scale: 2.5,
        };
        let r = route(&row, 1, 8, 2, &scoring).unwrap();
        assert_eq!(r.ids(), &[2, 7]);
        let s = |x: f32| 1.0 / (1.0 + (-x).exp());
        let (a, b) = (s(1.0), s(0.5));
        let w = r.weights();
        assert!((w[0] - 2.5 * a / (a + b)).abs() < 1e-6);
        assert!((w[1] - 2.5 * b / (a + b)).abs() < 1e-6);
    }

    #[test]
    fn inconsistent_inputs_are_refused() {
        assert_eq!(
            Routing::new(4, 2, vec![0, 4], vec![0.5, 0.5]),
            Err(RoutingError::ExpertOutOfRange {
                token: 0,
                slot: 1,
                expert: 4,
                experts: 4
            })
        );
        assert_eq!(
            Routing::new(4, 2, vec![1, 1], vec![0.5, 0.5]),
            Err(RoutingError::DuplicateExpert {
                token: 0,
                expert: 1
            })
        );
        assert_eq!(
            route(&[0.0; 6], 2, 3, 4, &Scoring::TopkSoftmax),
            Err(RoutingError::TopkTooLarge {
                topk: 4,
                experts: 3
            })
        );
        assert!(matches!(
            route(&[0.0; 5], 2, 3, 1, &Scoring::TopkSoftmax),
            Err(RoutingError::Length { what: "logits", .. })
        ));
        assert!(matches!(
            route(&[f32::NAN, 0.0, 0.0], 1, 3, 1, &Scoring::TopkSoftmax),
            Err(RoutingError::NotFinite { index: 0, .. })
        ));
        let grouped = Scoring::SigmoidGrouped {
            groups: 3,
            keep: 1,
            bias: vec![0.0; 8],
            scale: 1.0,
        };
        assert!(matches!(
            route(&[0.0; 8], 1, 8, 2, &grouped),
            Err(RoutingError::BadGroups { .. })
        ));
        // All tokens to one expert; the other experts get no block.
        let r = Routing::new(4, 1, vec![2; 10], vec![1.0; 10]).unwrap();
        let s = r.sort(4).unwrap();
        assert_eq!(s.block_expert(), &[2, 2, 2]);
        assert_eq!(s.block_rows(), &[4, 4, 2]);
    }
}
