//! Enumerating a template's configuration space into valid specs, before LLVM sees any.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;
use tilegen_arch::COMPUTE_UNITS;
use tilegen_kernels::{KernelSpec, SpecError, Variant};

use crate::template::{Shape, Space};

/// What enumeration produced and refused.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct EnumStats {
    /// Combinations generated (dimensions a variant ignores collapsed).
    pub combinations: u64,
    /// Valid, distinct specs.
    pub valid: u64,
    /// Combinations `KernelSpec::validate` refused, by rule.
    pub pruned: BTreeMap<String, u64>,
    /// Valid combinations that generate the same code as an earlier one (same cache key).
    pub duplicates: u64,
}

impl EnumStats {
    /// Combinations refused in all.
    pub fn pruned_total(&self) -> u64 {
        self.pruned.values().sum()
    }

    /// `rule: count` pairs, most frequent first.
    pub fn describe_pruned(&self) -> String {
        let mut v: Vec<_> = self.pruned.iter().collect();
        v.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        v.iter()
            .map(|(r, c)| format!("{r}: {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// The valid specs of a space, in a deterministic order, with the statistics.
#[derive(Debug, Clone)]
pub struct Enumeration {
    /// Valid, distinct specs.
    pub specs: Vec<KernelSpec>,
    /// Counts.
    pub stats: EnumStats,
}

/// The rule a refusal names, as a short stable label for counting.
pub fn rule_label(e: &SpecError) -> String {
    match e {
        SpecError::NotPositive { name, .. } => format!("{name} not positive"),
        SpecError::NotMultiple { name, multiple, .. } => {
            format!("{name} not a multiple of {multiple}")
        }
        SpecError::OutOfRange { name, .. } => format!("{name} out of range"),
        SpecError::PairRule { name, .. } => format!("{name} scale pair rule"),
        SpecError::WrongVariant { flag, .. } => format!("{flag} on the wrong variant"),
        SpecError::NeedsPrefetch { flag } => format!("{flag} needs b_prefetch"),
        SpecError::MfmaCluster { .. } => "mfma_cluster above the MFMAs of a tile".into(),
        SpecError::TooManyThreads { .. } => "more than 1024 threads".into(),
        SpecError::LdsBudget { .. } => "LDS budget".into(),
        SpecError::RegisterBudget { .. } => "register budget".into(),
        SpecError::Ignored { setter, .. } => format!("{setter} ignored"),
    }
}

/// The most combinations a space may hold. Enumeration judges each combination (validation
/// and a cache key, tens of microseconds), so this bounds a template's load and plan to seconds;
/// the shipped templates hold about 2,000.
pub const MAX_COMBINATIONS: u64 = 200_000;

/// How many combinations [`enumerate`] generates for `space`, computed without generating
/// them (so a huge space is refused at once): the same dimensions, collapsed the same way.
/// Saturates at `u64::MAX`.
pub fn combinations(space: &Space) -> u64 {
    let n = |len: usize| len as u128;
    let mut total: u128 = 0;
    for &variant in &space.variant {
        let preb = variant == Variant::Preb;
        let (splits, orders, policies) = if preb {
            (
                n(space.split_k.len()),
                n(space.xcd_group_m.len()),
                n(space.b_cache_policy.len()),
            )
        } else {
            (1, 1, 1)
        };
        let modes = n(space.acc_agprs.len()) * orders;
        // Per prefetch setting: the cluster, deep-prime and depth settings it multiplies in.
        let prefetch: u128 = if preb {
            space
                .b_prefetch
                .iter()
                .map(|&bpf| {
                    if !bpf {
                        return 1;
                    }
                    let clusters: u128 = space
                        .cluster_drain_sched
                        .iter()
                        .map(|&cds| if cds { n(space.mfma_cluster.len()) } else { 1 })
                        .sum();
                    clusters * n(space.deep_prime.len()) * n(space.b_prefetch_depth.len())
                })
                .sum()
        } else {
            1
        };
        let per_tile = n(space.bn.len())
            * n(space.bk_elems.len())
            * n(space.wn.len())
            * n(space.mma.len())
            * policies
            * n(space.dram_to_lds.len())
            * prefetch
            * n(space.waves_per_eu.len())
            * splits
            * modes;
        for &bm in &space.bm {
            let wms = if preb {
                1 + n(space.wm.iter().filter(|&&w| w < bm).count())
            } else {
                n(space.wm.len())
            };
            total = total.saturating_add(wms.saturating_mul(per_tile));
        }
    }
    u64::try_from(total).unwrap_or(u64::MAX)
}

/// Every valid spec of `space`. A dimension the variant (or an unset flag) ignores is not
/// multiplied in: the lds variant takes none of the preb flags (`split_k` included), preb takes
/// its default `wm` (= BM) and the listed values below BM, and `mfma_cluster` varies only with
/// `cluster_drain_sched`. Everything else is generated and judged by [`KernelSpec::validate`].
pub fn enumerate(space: &Space) -> Enumeration {
    let mut stats = EnumStats::default();
    let mut specs = Vec::new();
    let mut keys = HashSet::new();
    let off = [false];
    for &variant in &space.variant {
        let preb = variant == Variant::Preb;
        // Preb always takes its default (one wave over all BM rows) and each listed wm below
        // BM, which splits BM across waves; lds takes the listed values.
        let wms: Vec<Option<u32>> = if preb {
            std::iter::once(None)
                .chain(space.wm.iter().copied().map(Some))
                .collect()
        } else {
            space.wm.iter().copied().map(Some).collect()
        };
        let splits: &[u32] = if preb { &space.split_k } else { &[1] };
        let orders: &[u32] = if preb { &space.xcd_group_m } else { &[0] };
        let modes: Vec<(bool, u32)> = space
            .acc_agprs
            .iter()
            .flat_map(|&a| orders.iter().map(move |&g| (a, g)))
            .collect();
        let prefetch: &[bool] = if preb { &space.b_prefetch } else { &off };
        let policies = if preb {
            space.b_cache_policy.clone()
        } else {
            vec![tilegen_kernels::CachePolicy::Always]
        };
        for &bm in &space.bm {
            for &bn in &space.bn {
                for &bk in &space.bk_elems {
                    for &wm in &wms {
                        // A preb wm of BM or more is its default (one wave over BM rows) or
                        // no tile at all: not a combination of its own.
                        if preb && wm.is_some_and(|w| w >= bm) {
                            continue;
                        }
                        for &wn in &space.wn {
                            for &mma in &space.mma {
                                for &bpf in prefetch {
                                    for &policy in &policies {
                                        for &d2l in &space.dram_to_lds {
                                            let cds_list: &[bool] = if preb && bpf {
                                                &space.cluster_drain_sched
                                            } else {
                                                &off
                                            };
                                            for &cds in cds_list {
                                                let clusters: Vec<Option<u32>> = if cds {
                                                    space
                                                        .mfma_cluster
                                                        .iter()
                                                        .copied()
                                                        .map(Some)
                                                        .collect()
                                                } else {
                                                    vec![None]
                                                };
                                                let primes: &[bool] = if preb && bpf {
                                                    &space.deep_prime
                                                } else {
                                                    &off
                                                };
                                                let depths: &[u32] = if preb && bpf {
                                                    &space.b_prefetch_depth
                                                } else {
                                                    &[1]
                                                };
                                                for &mc in &clusters {
                                                    for (&dp, &depth) in
                                                        primes.iter().flat_map(|p| {
                                                            depths.iter().map(move |d| (p, d))
                                                        })
                                                    {
                                                        for (&w, &sk, &(agpr, xg)) in product3(
                                                            &space.waves_per_eu,
                                                            splits,
                                                            &modes,
                                                        ) {
                                                            stats.combinations += 1;
                                                            let mut s = if preb {
                                                                KernelSpec::preb()
                                                            } else {
                                                                KernelSpec::lds()
                                                            };
                                                            s = s.bm(bm).bn(bn).bk_elems(bk).wn(wn);
                                                            if let Some(wm) = wm {
                                                                s = s.wm(wm);
                                                            }
                                                            if mma != s.mma {
                                                                s = s.mma(mma);
                                                            }
                                                            if bpf {
                                                                s = s.b_prefetch(true);
                                                            }
                                                            if policy != s.b_cache_policy {
                                                                s = s.b_cache_policy(policy);
                                                            }
                                                            if d2l {
                                                                s = s.dram_to_lds(true);
                                                            }
                                                            if cds {
                                                                s = s.cluster_drain_sched(true);
                                                            }
                                                            if let Some(mc) = mc {
                                                                s = s.mfma_cluster(mc);
                                                            }
                                                            if dp {
                                                                s = s.deep_prime(true);
                                                            }
                                                            if depth != 1 {
                                                                s = s.b_prefetch_depth(depth);
                                                            }
                                                            s = s
                                                                .waves_per_eu(w)
                                                                .split_k(sk)
                                                                .acc_agprs(agpr)
                                                                .xcd_group_m(xg)
                                                                .out_dtype(space.out_dtype);
                                                            match s.validate() {
                                                                Err(e) => {
                                                                    *stats
                                                                        .pruned
                                                                        .entry(rule_label(&e))
                                                                        .or_default() += 1;
                                                                }
                                                                Ok(()) => {
                                                                    if keys.insert(s.cache_key()) {
                                                                        specs.push(s);
                                                                    } else {
                                                                        stats.duplicates += 1;
                                                                    }
                                                                }
                                                            }
                                                        }
                                                    }
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
    stats.valid = specs.len() as u64;
    Enumeration { specs, stats }
}

/// Every `(a, b, c)` of three lists, `a` outermost.
fn product3<'a, A, B, C>(
    a: &'a [A],
    b: &'a [B],
    c: &'a [C],
) -> impl Iterator<Item = (&'a A, &'a B, &'a C)> {
    a.iter()
        .flat_map(move |x| b.iter().flat_map(move |y| c.iter().map(move |z| (x, y, z))))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::Template;

    /// The closed-form count is the count enumeration makes, for every shipped template and
    /// for spaces with one axis at a time widened or emptied.
    #[test]
    fn combinations_are_counted_as_enumeration_generates_them() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates");
        let mut spaces = Vec::new();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                spaces.push(Template::load(&path).unwrap().space);
            }
        }
        assert!(!spaces.is_empty());
        let base = spaces[0].clone();
        let mut v = base.clone();
        v.b_prefetch = vec![false, true];
        v.cluster_drain_sched = vec![true, false];
        v.mfma_cluster = vec![1, 2, 4];
        v.deep_prime = vec![false, true];
        v.b_prefetch_depth = vec![1, 2];
        spaces.push(v.clone());
        v.wm = vec![16, 32, 64, 128, 256];
        v.split_k = vec![1, 2];
        v.xcd_group_m = vec![0, 4];
        spaces.push(v.clone());
        v.variant = vec![Variant::Lds];
        spaces.push(v.clone());
        v.bn.clear();
        spaces.push(v);
        for s in &spaces {
            assert_eq!(combinations(s), enumerate(s).stats.combinations, "{s:?}");
        }
    }
}

/// The default spec of a template's output type: the baseline every report compares with.
pub fn default_spec(space: &Space) -> KernelSpec {
    KernelSpec::preb().out_dtype(space.out_dtype)
}

/// Whether `spec` is worth evaluating on `shape`. A split-K spec runs only where K divides into
/// its slices, and is skipped where the tiles alone already give every CU a workgroup (the
/// split then only adds atomics). With `prune_tall_tiles`, a spec whose BM is taller than the
/// shortest BM of the space that covers M in one tile computes only padding rows, and is
/// skipped (the default spec never is).
pub fn worth(space: &Space, spec: &KernelSpec, shape: &Shape) -> bool {
    let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
    if spec.split_k > 1 {
        let tiles = m.div_ceil(spec.bm as usize) * n.div_ceil(spec.bn as usize);
        if spec.check_problem(m, n, k).is_err() || tiles >= COMPUTE_UNITS as usize {
            return false;
        }
    }
    if !space.prune_tall_tiles || spec.cache_key() == default_spec(space).cache_key() {
        return true;
    }
    match space.bm.iter().copied().filter(|&b| b >= shape.m).min() {
        Some(cover) => spec.bm <= cover,
        None => true,
    }
}
