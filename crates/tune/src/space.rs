//! Enumerating a template's configuration space into valid specs, before LLVM sees any.

use std::collections::{BTreeMap, HashSet};

use serde::Serialize;
use tilegen_arch::COMPUTE_UNITS;
use tilegen_kernels::gemm::{Knob, KnobValue, Scope};
use tilegen_kernels::{KernelSpec, SpecError};

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
        SpecError::OccupancyBudget { .. } => "register budget at the occupancy target".into(),
        SpecError::Ignored { setter, .. } => format!("{setter} ignored"),
        SpecError::KnobType { knob, .. } => format!("{knob} of the wrong type"),
    }
}

/// The most combinations a space may hold. Enumeration judges each combination (validation
/// and a cache key, tens of microseconds), so this bounds a template's load and plan to seconds;
/// the shipped templates hold about 2,000.
pub const MAX_COMBINATIONS: u64 = 200_000;

/// The axes in the order a spec takes them: the variant first (it makes the spec), then every
/// other knob with an axis in the knobs' order, so a switch comes before the knobs it makes a
/// place for.
fn order(space: &Space) -> Vec<Knob> {
    std::iter::once(Knob::Variant)
        .chain(space.axes().map(|(k, _)| k).filter(|&k| k != Knob::Variant))
        .collect()
}

/// One step of a combination: a value for the axis, or `None` to keep the spec's own (the
/// knob's default, or a knob the spec has no place for).
type Choice = Option<KnobValue>;

/// The choices of axis `k` for a spec made so far (`None` before the variant). A knob the spec
/// has no place for (a preb knob on the LDS-staged kernel, a pipeline setting without
/// `b_prefetch`, a cluster size without `cluster_drain_sched`) is not multiplied in. Preb's `wm`
/// takes its default (one wave over all BM rows) and each listed value below BM, which splits
/// BM across waves; a value of BM or more would be the default again or no tile at all.
fn choices(space: &Space, k: Knob, spec: Option<&KernelSpec>) -> Vec<Choice> {
    let Some(spec) = spec else {
        return space.axis(k).iter().copied().map(Some).collect();
    };
    if k.get(spec).is_none() {
        return vec![None];
    }
    match (k, spec) {
        (Knob::Wm, KernelSpec::Preb(p)) => std::iter::once(None)
            .chain(
                space
                    .counts(Knob::Wm)
                    .into_iter()
                    .filter(|&w| w < p.bm)
                    .map(|w| Some(KnobValue::Count(w))),
            )
            .collect(),
        _ => space.axis(k).iter().copied().map(Some).collect(),
    }
}

/// The spec after choosing `c` for axis `k`.
fn apply(space: &Space, k: Knob, spec: Option<&KernelSpec>, c: Choice) -> KernelSpec {
    match (spec, c) {
        (None, Some(KnobValue::Variant(v))) => KernelSpec::of_variant(v).out_dtype(space.out_dtype),
        (Some(s), Some(v)) => {
            let mut s = s.clone();
            // The choices are the knob's own values, where the spec has the knob.
            let _ = k.set(&mut s, v);
            // A split-K spec adds with atomics only where the template says so (the knob has
            // no place, and is refused, without a split).
            if k == Knob::SplitK {
                let atomic = space.split_k_atomic && v != KnobValue::Count(1);
                let _ = Knob::SplitKAtomic.set(&mut s, KnobValue::Flag(atomic));
            }
            s
        }
        (Some(s), None) => s.clone(),
        (None, _) => KernelSpec::default().out_dtype(space.out_dtype),
    }
}

/// Whether later axes depend on axis `k`'s value: the variant and the switches decide which
/// knobs a spec has, and `bm` bounds preb's `wm`.
fn shapes_later_axes(k: Knob) -> bool {
    k.scope() == Scope::Structure || k == Knob::Bm
}

/// How many combinations [`enumerate`] generates for `space`, computed without generating
/// them (so a huge space is refused at once): the same axes, with the same dependencies, counted
/// by branching only where later axes depend on a value. Saturates at `u64::MAX`.
pub fn combinations(space: &Space) -> u64 {
    fn count(space: &Space, order: &[Knob], spec: Option<&KernelSpec>) -> u128 {
        let Some((&k, rest)) = order.split_first() else {
            return 1;
        };
        let cs = choices(space, k, spec);
        if shapes_later_axes(k) {
            cs.into_iter()
                .map(|c| count(space, rest, Some(&apply(space, k, spec, c))))
                .fold(0u128, u128::saturating_add)
        } else {
            let rest = match spec {
                Some(_) => count(space, rest, spec),
                None => 0,
            };
            (cs.len() as u128).saturating_mul(rest)
        }
    }
    u64::try_from(count(space, &order(space), None)).unwrap_or(u64::MAX)
}

/// Every combination of a space's axes as a spec, in a fixed order (the variant outermost, then
/// the knobs' order): an odometer whose wheels depend on the wheels before them.
pub struct Combinations<'a> {
    space: &'a Space,
    order: Vec<Knob>,
    /// Per axis chosen so far: its choices, the one taken, and the spec after it.
    wheels: Vec<(Vec<Choice>, usize, KernelSpec)>,
    started: bool,
}

impl<'a> Combinations<'a> {
    /// The combinations of `space`.
    pub fn new(space: &'a Space) -> Self {
        Combinations {
            space,
            order: order(space),
            wheels: Vec::new(),
            started: false,
        }
    }

    /// Turns the innermost wheel that has a next choice, dropping the exhausted ones; `false`
    /// when every wheel is exhausted.
    fn turn(&mut self) -> bool {
        while let Some((cs, at, _)) = self.wheels.last_mut() {
            if *at + 1 < cs.len() {
                *at += 1;
                let (c, at) = (cs[*at], self.wheels.len() - 1);
                let before = at.checked_sub(1).map(|i| self.wheels[i].2.clone());
                self.wheels[at].2 = apply(self.space, self.order[at], before.as_ref(), c);
                return true;
            }
            self.wheels.pop();
        }
        false
    }
}

impl Iterator for Combinations<'_> {
    type Item = KernelSpec;

    fn next(&mut self) -> Option<KernelSpec> {
        if self.started && !self.turn() {
            return None;
        }
        self.started = true;
        loop {
            let depth = self.wheels.len();
            let before = self.wheels.last().map(|w| w.2.clone());
            if depth == self.order.len() {
                return before;
            }
            let k = self.order[depth];
            let cs = choices(self.space, k, before.as_ref());
            match cs.first() {
                Some(&c) => {
                    let spec = apply(self.space, k, before.as_ref(), c);
                    self.wheels.push((cs, 0, spec));
                }
                // An empty axis: no combination below here.
                None => {
                    if !self.turn() {
                        return None;
                    }
                }
            }
        }
    }
}

/// Every valid spec of `space`: its [`Combinations`], each judged by
/// [`KernelSpec::validate`], and distinct by cache key.
pub fn enumerate(space: &Space) -> Enumeration {
    let mut stats = EnumStats::default();
    let mut specs = Vec::new();
    let mut keys = HashSet::new();
    for s in Combinations::new(space) {
        stats.combinations += 1;
        match s.validate() {
            Err(e) => *stats.pruned.entry(rule_label(&e)).or_default() += 1,
            Ok(()) => {
                if keys.insert(s.cache_key()) {
                    specs.push(s);
                } else {
                    stats.duplicates += 1;
                }
            }
        }
    }
    stats.valid = specs.len() as u64;
    Enumeration { specs, stats }
}

/// The default spec of a template's output type: the baseline every report compares with.
pub fn default_spec(space: &Space) -> KernelSpec {
    KernelSpec::preb().out_dtype(space.out_dtype).into()
}

/// Whether `spec` is worth evaluating on `shape`. A split-K spec runs only where K divides into
/// its slices, and is skipped where the tiles alone already give every CU a workgroup (the
/// split then only adds the partials' traffic and their reduction). With `prune_tall_tiles`, a spec whose BM is taller than the
/// shortest BM of the space that covers M in one tile computes only padding rows, and is
/// skipped (the default spec never is).
pub fn worth(space: &Space, spec: &KernelSpec, shape: &Shape) -> bool {
    let (m, n, k) = (shape.m as usize, shape.n as usize, shape.k as usize);
    if spec.split_k() > 1 {
        let tiles = m.div_ceil(spec.bm as usize) * n.div_ceil(spec.bn as usize);
        if spec.check_problem(m, n, k).is_err() || tiles >= COMPUTE_UNITS as usize {
            return false;
        }
    }
    if !space.prune_tall_tiles || spec.cache_key() == default_spec(space).cache_key() {
        return true;
    }
    match space
        .counts(Knob::Bm)
        .into_iter()
        .filter(|&b| b >= shape.m)
        .min()
    {
        Some(cover) => spec.bm <= cover,
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::Template;
    use tilegen_kernels::Variant;

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
        let flags = |on: &[bool]| on.iter().map(|&b| KnobValue::Flag(b)).collect::<Vec<_>>();
        let counts = |c: &[u32]| c.iter().map(|&x| KnobValue::Count(x)).collect::<Vec<_>>();
        v.set_axis(Knob::BPrefetch, flags(&[false, true]));
        v.set_axis(Knob::ClusterDrainSched, flags(&[true, false]));
        v.set_axis(Knob::MfmaCluster, counts(&[1, 2, 4]));
        v.set_axis(Knob::DeepPrime, flags(&[false, true]));
        v.set_axis(Knob::BPrefetchDepth, counts(&[1, 2]));
        v.set_axis(Knob::BBurst, flags(&[false, true]));
        spaces.push(v.clone());
        v.set_axis(Knob::Wm, counts(&[16, 32, 64, 128, 256]));
        v.set_axis(Knob::SplitK, counts(&[1, 2]));
        v.set_axis(Knob::XcdGroupM, counts(&[0, 4]));
        spaces.push(v.clone());
        v.set_axis(
            Knob::Variant,
            [
                KnobValue::Variant(Variant::Lds),
                KnobValue::Variant(Variant::Preb),
            ],
        );
        spaces.push(v.clone());
        v.set_axis(Knob::Bn, []);
        spaces.push(v);
        for s in &spaces {
            assert_eq!(combinations(s), enumerate(s).stats.combinations, "{s:?}");
        }
    }
}
