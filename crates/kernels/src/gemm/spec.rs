//! `KernelSpec`: one MXFP4 GEMM tile configuration, typed by its kernel (an LDS-staged
//! [`LdsSpec`] or a preshuffled-B [`PrebSpec`], whose prefetching pipeline is one optional
//! [`Prefetch`]), so that a knob a kernel would ignore cannot be set on it. Every knob is declared
//! once, in the table below; `validate` checks what the types cannot (sizes, budgets) before LLVM
//! sees the spec.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::knobs::{Axis, KnobType, KnobValue, Range, Scope, Stored, kebab, knobs};
use tilegen_dsl::target::{
    LDS_BYTES, MAX_ARCH_VGPRS, MAX_UNIFIED_VGPRS, MAX_WAVES_PER_SIMD, MAX_WORKGROUP_SIZE,
    SIMDS_PER_CU, WAVE_SIZE,
};
pub use tilegen_dsl::{CachePolicy, MfmaShape};

/// Which kernel family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum Variant {
    /// `MXFP4MatmulAMD`: A and B staged through LDS, row-major inputs and scales.
    Lds,
    /// `MXFP4MatmulAMD_PreB`: A through LDS, B preshuffled and read straight into VGPRs, both
    /// scale tensors preshuffled.
    Preb,
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Variant::Lds => "lds",
            Variant::Preb => "preb",
        })
    }
}

/// Element type of C.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum OutDtype {
    /// bfloat16 (round to nearest even).
    Bf16,
    /// f32.
    F32,
}

impl OutDtype {
    /// Bytes per element.
    pub fn bytes(self) -> u32 {
        match self {
            OutDtype::Bf16 => 2,
            OutDtype::F32 => 4,
        }
    }
}

impl fmt::Display for OutDtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            OutDtype::Bf16 => "bf16",
            OutDtype::F32 => "f32",
        })
    }
}

/// A rule a spec breaks; each names the values and the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// A size that must be positive.
    #[error("{name} = {value} must be positive")]
    NotPositive {
        /// Parameter.
        name: &'static str,
        /// Value.
        value: u32,
    },
    /// `a` must be a multiple of `b`.
    #[error("{name} = {value} must be a multiple of {multiple} ({why})")]
    NotMultiple {
        /// Parameter.
        name: &'static str,
        /// Value.
        value: u32,
        /// Required divisor.
        multiple: u32,
        /// Why.
        why: &'static str,
    },
    /// A value outside its range.
    #[error("{name} = {value} must be in {min}..={max} ({why})")]
    OutOfRange {
        /// Parameter.
        name: &'static str,
        /// Value.
        value: u32,
        /// Smallest allowed.
        min: u32,
        /// Largest allowed.
        max: u32,
        /// Why.
        why: &'static str,
    },
    /// BM, WM or WN of the preshuffled-B kernel: its scale dwords pair 16-row (16-column) MFMA
    /// tiles, so a wave's tiles must start on a pair unless it has only one.
    #[error(
        "{name} = {value} must be 16 or a multiple of 32 (one scale dword covers a 32-{what} pair of MFMA tiles)"
    )]
    PairRule {
        /// `bm`, `wm` or `wn`.
        name: &'static str,
        /// Value.
        value: u32,
        /// Rows or columns.
        what: &'static str,
    },
    /// A flag that only exists on the other variant.
    #[error("{flag} applies to the {needs} variant only (this spec is {variant})")]
    WrongVariant {
        /// The flag.
        flag: &'static str,
        /// The variant it needs.
        needs: Variant,
        /// The spec's variant.
        variant: Variant,
    },
    /// A flag that needs `b_prefetch`.
    #[error("{flag} requires b_prefetch (it schedules the prefetching K pipeline)")]
    NeedsPrefetch {
        /// The flag.
        flag: &'static str,
    },
    /// `mfma_cluster` out of range.
    #[error("mfma_cluster = {value} must be in 1..={chain} (the MFMAs of one K tile)")]
    MfmaCluster {
        /// Value.
        value: u32,
        /// MFMAs per tile and wave.
        chain: u64,
    },
    /// Too many threads per workgroup.
    #[error(
        "{warps} waves x {WAVE_SIZE} lanes = {threads} threads exceeds gfx950's {MAX_WORKGROUP_SIZE} per workgroup"
    )]
    TooManyThreads {
        /// Waves.
        warps: u64,
        /// Threads.
        threads: u64,
    },
    /// LDS over budget.
    #[error("LDS budget exceeded: {bytes} bytes ({detail}) > {LDS_BYTES}")]
    LdsBudget {
        /// Bytes needed.
        bytes: u64,
        /// What they are for.
        detail: String,
    },
    /// Registers over budget.
    #[error(
        "register budget exceeded: about {estimate} VGPRs+AGPRs per lane ({detail}) > {MAX_UNIFIED_VGPRS}; shrink the warp tile or drop b_prefetch"
    )]
    RegisterBudget {
        /// Estimated registers.
        estimate: u64,
        /// Breakdown.
        detail: String,
    },
    /// Accumulators in AGPRs over the registers an occupancy target leaves a lane.
    #[error(
        "register budget at waves_per_eu {waves}: about {estimate} VGPRs+AGPRs per lane ({detail}) > the {budget} a lane has at {waves} waves per SIMD, and accumulators in AGPRs cannot spill; lower waves_per_eu or drop acc_agprs"
    )]
    OccupancyBudget {
        /// Estimated registers.
        estimate: u64,
        /// Breakdown.
        detail: String,
        /// The occupancy target.
        waves: u32,
        /// Registers a lane has at that target.
        budget: u64,
    },
    /// A value of the wrong type for its knob (a command line or a template gave it).
    #[error("{value} is not a value of {knob}")]
    KnobType {
        /// The knob.
        knob: &'static str,
        /// The value.
        value: String,
    },
    /// A setting the spec's variant or flags would ignore.
    #[error("{setter} would be ignored: {why}")]
    Ignored {
        /// The setter.
        setter: &'static str,
        /// Why the kernel does not use it.
        why: &'static str,
    },
}

/// One LDS buffer of a kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LdsBuffer {
    /// Its name in the kernel.
    pub name: &'static str,
    /// Bytes.
    pub bytes: u64,
}

impl LdsBuffer {
    /// Alignment of every buffer (16-byte LDS accesses).
    pub const ALIGN: u64 = 16;
}

knobs! {
    /// Kernel family: lds (A and B staged through LDS) or preb (B preshuffled into VGPRs).
    Variant [Structure] variant: Variant {
        default: |_| Variant::Preb,
        piece: 0 => |v| Some(format!("_{v}")),
        stored: Required,
        axis: Axis::Values,
        range: None,
    }
    /// Rows of C per workgroup.
    Bm [Common] bm: u32 {
        default: |v| match v { Variant::Preb => 64, Variant::Lds => 128 },
        piece: 1 => |x| Some(format!("_bm{x}")),
        stored: Required,
        axis: Axis::Sizes { multiple: 16, why: "whole 16-row MFMA tiles" },
        range: None,
    }
    /// Columns of C per workgroup.
    Bn [Common] bn: u32 {
        default: |_| 128,
        piece: 2 => |x| Some(format!("_bn{x}")),
        stored: Required,
        axis: Axis::Sizes { multiple: 16, why: "whole 16-column MFMA tiles" },
        range: None,
    }
    /// K elements per pipeline stage.
    BkElems [Common] bk_elems: u32 {
        default: |v| match v { Variant::Preb => 512, Variant::Lds => 128 },
        piece: 3 => |x| Some(format!("_bk{x}")),
        stored: Required,
        axis: Axis::Sizes { multiple: 128, why: "whole 128-K MFMA steps" },
        range: None,
    }
    /// Rows per wave: waves split BM into BM / WM strips (preb: by default one wave covers all
    /// BM rows, and a template's values below BM split them).
    Wm [Structure] wm: u32 {
        default: |_| 64,
        piece: 4 => |x| Some(format!("_wm{x}")),
        stored: Required,
        axis: Axis::Sizes { multiple: 16, why: "whole 16-row MFMA tiles" },
        range: None,
    }
    /// Columns per wave: waves split BN into BN / WN strips.
    Wn [Common] wn: u32 {
        default: |_| 64,
        piece: 5 => |x| Some(format!("_wn{x}")),
        stored: Required,
        axis: Axis::Sizes { multiple: 16, why: "whole 16-column MFMA tiles" },
        range: None,
    }
    /// MFMA shape.
    Mma [Common] mma: MfmaShape {
        default: |_| MfmaShape::M16N16K128,
        piece: 6 => |x| Some(match x { MfmaShape::M16N16K128 => "_m16", MfmaShape::M32N32K64 => "_m32" }.to_string()),
        stored: Required,
        axis: Axis::Values,
        range: None,
    }
    /// Element type of C (one per template: a pack serves one C type).
    OutDtype [Common] out_dtype: OutDtype {
        default: |_| OutDtype::Bf16,
        piece: 7 => |x| Some(format!("_{x}")),
        stored: Required,
        axis: Axis::Setting,
        range: None,
    }
    /// Prefetching outer-K pipeline: B tiles loaded into registers ahead of the one multiplied
    /// (preb).
    BPrefetch [Structure] b_prefetch: bool {
        default: |_| false,
        piece: 8 => |x| x.then(|| "_bpf".to_string()),
        stored: Required,
        axis: Axis::Values,
        range: None,
    }
    /// Cache policy of the B loads (preb).
    BCachePolicy [PrebKnobs] b_cache_policy: CachePolicy {
        default: |_| CachePolicy::Always,
        piece: 10 => |x| (x != CachePolicy::Always).then(|| format!("_b{x:?}").to_lowercase()),
        stored: Required,
        axis: Axis::Values,
        range: None,
    }
    /// Load A global -> LDS directly (`buffer_load ... lds`) instead of through VGPRs.
    DramToLds [Common] dram_to_lds: bool {
        default: |_| false,
        piece: 11 => |x| x.then(|| "_d2l".to_string()),
        stored: Required,
        axis: Axis::Values,
        range: None,
    }
    /// Swizzle the FP4 operand tiles in LDS so fragment reads are free of bank conflicts (off
    /// to measure what swizzling saves).
    LdsSwizzle [Common] lds_swizzle: bool {
        default: |_| true,
        piece: 12 => |x| (!x).then(|| "_nosw".to_string()),
        stored: Required,
        axis: Axis::Fixed,
        range: None,
    }
    /// Per-cluster s_setprio brackets and a partial vmcnt staircase (preb, with b_prefetch).
    ClusterDrainSched [Structure] cluster_drain_sched: bool {
        default: |_| false,
        piece: 14 => |x| x.then(|| "_cds".to_string()),
        stored: Required,
        axis: Axis::Values,
        range: None,
    }
    /// MFMAs per cluster (with cluster_drain_sched).
    MfmaCluster [ClusterSched] mfma_cluster: u32 {
        default: |_| 4,
        piece: 15 => |x| Some(x.to_string()),
        stored: Required,
        axis: Axis::Sizes { multiple: 1, why: "" },
        range: None,
    }
    /// Stage A two tiles ahead (preb, with b_prefetch; with b_prefetch_depth 2 a tile's loads
    /// are issued two steps before it is multiplied and written to LDS the step between).
    DeepPrime [Prefetch] deep_prime: bool {
        default: |_| false,
        piece: 16 => |x| x.then(|| "_dp".to_string()),
        stored: Required,
        axis: Axis::Values,
        range: None,
    }
    /// Occupancy target in waves per SIMD (1-8), which bounds the registers the compiler may
    /// use (it spills past them); unset lets the compiler choose (0 in a template).
    WavesPerEu [Common] waves_per_eu: Option<u32> {
        default: |_| None,
        piece: 13 => |x| x.map(|w| format!("_w{w}")),
        stored: Defaulted,
        axis: Axis::Values,
        range: Some(Range { min: 1, max: MAX_WAVES_PER_SIMD, why: "a gfx950 SIMD holds 1 to 8 waves" }),
    }
    /// Split K into this many slices run by the grid's z dimension, whose f32 partials a
    /// second kernel sums in order and rounds once (preb; 1 = no split; see
    /// `KernelSpec::split_k`).
    SplitK [PrebKnobs] split_k: u32 {
        default: |_| 1,
        piece: 17 => |x| (x > 1).then(|| format!("_sk{x}")),
        stored: Defaulted,
        axis: Axis::Sizes { multiple: 1, why: "" },
        range: Some(Range { min: 1, max: KernelSpec::MAX_SPLIT_K, why: "K slices run by the grid's z dimension" }),
    }
    /// Let the MFMA accumulators live in AGPRs (`amdgpu-agpr-alloc`; LLVM otherwise keeps them
    /// in VGPRs).
    AccAgprs [Common] acc_agprs: bool {
        default: |_| false,
        piece: 18 => |x| x.then(|| "_agpr".to_string()),
        stored: Defaulted,
        axis: Axis::Values,
        range: None,
    }
    /// XCD-aware tile order in groups of this many M tiles (preb; 0 = the grid's order): the
    /// workgroups one XCD runs share A and B tiles in its L2.
    XcdGroupM [PrebKnobs] xcd_group_m: u32 {
        default: |_| 0,
        piece: 19 => |x| (x > 0).then(|| format!("_xg{x}")),
        stored: UnlessDefault,
        axis: Axis::Values,
        range: Some(Range { min: 0, max: KernelSpec::MAX_XCD_GROUP_M, why: "M tiles per group of the XCD-aware tile order" }),
    }
    /// K tiles of B in flight ahead of the one multiplied: 1 or 2 (preb, with b_prefetch; 2
    /// costs a third B register set and A slot and unrolls the K loop by three).
    BPrefetchDepth [Prefetch] b_prefetch_depth: u32 {
        default: |_| 1,
        piece: 9 => |x| (x > 1).then(|| x.to_string()),
        stored: UnlessDefault,
        axis: Axis::Sizes { multiple: 1, why: "" },
        range: Some(Range { min: 1, max: KernelSpec::MAX_B_PREFETCH_DEPTH, why: "K tiles of B in flight ahead of the one being multiplied" }),
    }
    /// Issue a stage's prefetched B loads in one burst before its MFMAs instead of spread
    /// between its MMA rows (preb, with b_prefetch): they reach memory a row's MFMAs sooner,
    /// at the price of bursts from every wave meeting in the CU's memory path.
    BBurst [Prefetch] b_burst: bool {
        default: |_| false,
        piece: 20 => |x| x.then(|| "_bburst".to_string()),
        stored: UnlessDefault,
        axis: Axis::Values,
        range: None,
    }
    /// Issue the next A tile's global loads over the second half of a stage's MFMA chain, a
    /// round (one load per wave) per MMA row, instead of in one burst before it (preb, with
    /// b_prefetch, A through VGPRs): after a barrier every wave's burst meets in the CU's
    /// memory path, and a wave's LDS fragment reads, issued in order behind its burst, wait
    /// with the matrix core idle. Pays where a CU stages many A rows at once (256-row tiles).
    ASpread [Prefetch] a_spread: bool {
        default: |_| false,
        piece: 22 => |x| x.then(|| "_aspread".to_string()),
        stored: UnlessDefault,
        axis: Axis::Values,
        range: None,
    }
    /// Split-K slices add their partials into C with atomics (bf16 output: each partial is
    /// rounded to bf16 and every add rounds again, up to split_k bf16 ulps off and the last bit
    /// nondeterministic) instead of storing f32 partials to a workspace that a reduction kernel
    /// sums in a fixed order and rounds once (preb, with split_k > 1). The atomic kernel is the
    /// one split-K specs named before the workspace existed, so it keeps their name and the
    /// exact one is marked (only on split-K specs: see `KernelSpec::kernel_name`).
    SplitKAtomic [PrebKnobs] split_k_atomic: bool {
        default: |_| false,
        piece: 21 => |x| (!x).then(|| "_exact".to_string()),
        stored: UnlessDefault,
        axis: Axis::Setting,
        range: None,
    }
}

/// Version of the stored form ([`SpecValues`]) that tuning databases and kernel packs record:
/// 1 is every knob up to `b_prefetch_depth`, 2 adds `b_burst` (written only when on, so every
/// spec without it is stored, and keyed, as in version 1), 3 adds `split_k_atomic`, written (as
/// false) by the exact split-K specs alone: a split-K spec stored without it adds into C with
/// atomics, as every one stored before the f32 workspace existed did, and reads so. A build reads its own version and older ones, and
/// refuses newer ones, whose knobs it would not know. 4 adds `a_spread` (written only when on).
pub const SPEC_FORMAT: u32 = 4;

/// `wm` of a new spec: the preb kernel's follows `bm` (one wave over all rows), the LDS-staged
/// kernel's is 64.
pub(crate) fn default_wm(variant: Variant) -> Option<u32> {
    match variant {
        Variant::Preb => None,
        Variant::Lds => Some(64),
    }
}

/// A preshuffled-B GEMM spec: A staged through LDS, B preshuffled and read straight into
/// VGPRs. Made by [`KernelSpec::preb`] (or [`KernelSpec::new`]), adjusted with the setters; the
/// common knobs are read through `Deref` (`spec.bm`), its own through [`PrebSpec::knobs`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "KernelSpec", into = "KernelSpec")]
pub struct PrebSpec {
    pub(crate) common: Common,
    pub(crate) knobs: PrebKnobs,
}

/// An LDS-staged GEMM spec: A, B and both scale tensors row-major, staged through LDS. Made by
/// [`KernelSpec::lds`]; it has the common knobs only.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LdsSpec {
    pub(crate) common: Common,
}

/// A GEMM kernel configuration: `C[M, N] = A[M, K] * B[N, K]^T` in MXFP4 with E8M0 block
/// scales, one of the two kernels. Start from [`KernelSpec::preb`] (the preshuffled-B kernel with
/// the seed's defaults; [`KernelSpec::new`] is the same) or [`KernelSpec::lds`], adjust with the
/// setters, then `build`. Common knobs are read through `Deref` (`spec.bm`). Stored (databases,
/// packs) as its [`SpecValues`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "SpecValues", into = "SpecValues")]
pub enum KernelSpec {
    /// The LDS-staged kernel.
    Lds(LdsSpec),
    /// The preshuffled-B kernel.
    Preb(PrebSpec),
}

impl std::ops::Deref for PrebSpec {
    type Target = Common;
    fn deref(&self) -> &Common {
        &self.common
    }
}

impl std::ops::Deref for LdsSpec {
    type Target = Common;
    fn deref(&self) -> &Common {
        &self.common
    }
}

impl std::ops::Deref for KernelSpec {
    type Target = Common;
    fn deref(&self) -> &Common {
        self.common()
    }
}

impl From<PrebSpec> for KernelSpec {
    fn from(s: PrebSpec) -> Self {
        KernelSpec::Preb(s)
    }
}

impl From<LdsSpec> for KernelSpec {
    fn from(s: LdsSpec) -> Self {
        KernelSpec::Lds(s)
    }
}

impl TryFrom<KernelSpec> for PrebSpec {
    type Error = SpecError;
    /// The preb spec, or the error naming the variant it is instead.
    fn try_from(s: KernelSpec) -> Result<Self, SpecError> {
        match s {
            KernelSpec::Preb(p) => Ok(p),
            KernelSpec::Lds(_) => Err(SpecError::WrongVariant {
                flag: "this spec",
                needs: Variant::Preb,
                variant: Variant::Lds,
            }),
        }
    }
}

impl Default for KernelSpec {
    fn default() -> Self {
        KernelSpec::preb().into()
    }
}

impl Default for PrebSpec {
    fn default() -> Self {
        KernelSpec::preb()
    }
}

impl Prefetch {
    /// The double-buffered pipeline: one B tile ahead, A one tile ahead, scheduled per MMA row.
    pub fn new() -> Self {
        Prefetch::default()
    }

    /// Per-cluster priority brackets and vmcnt staircase, with the default cluster size, or
    /// none.
    pub fn cluster_drain_sched(mut self, on: bool) -> Self {
        self.cluster = on.then(|| self.cluster.unwrap_or_default());
        self
    }

    /// The per-cluster schedule, or none.
    pub fn cluster(mut self, cluster: Option<ClusterSched>) -> Self {
        self.cluster = cluster;
        self
    }

    /// The per-cluster schedule (its current settings, or the defaults) adjusted by `f`.
    pub fn with_cluster(self, f: impl FnOnce(ClusterSched) -> ClusterSched) -> Self {
        let c = self.cluster.unwrap_or_default();
        self.cluster(Some(f(c)))
    }
}

impl ClusterSched {
    /// The per-cluster schedule with the default cluster size.
    pub fn new() -> Self {
        ClusterSched::default()
    }
}

impl PrebSpec {
    /// Its own knobs.
    pub fn knobs(&self) -> &PrebKnobs {
        &self.knobs
    }

    /// The prefetching pipeline, if it has one.
    pub fn prefetch_settings(&self) -> Option<&Prefetch> {
        self.knobs.prefetch.as_ref()
    }

    /// The prefetching pipeline with its default settings (or none); settings already chosen
    /// are kept.
    pub fn b_prefetch(mut self, on: bool) -> Self {
        self.knobs.prefetch = on.then(|| self.knobs.prefetch.unwrap_or_default());
        self
    }

    /// The prefetching pipeline's settings, or none.
    pub fn prefetch(mut self, prefetch: Option<Prefetch>) -> Self {
        self.knobs.prefetch = prefetch;
        self
    }

    /// The prefetching pipeline (its current settings, or the defaults) adjusted by `f`.
    pub fn with_prefetch(self, f: impl FnOnce(Prefetch) -> Prefetch) -> Self {
        let p = self.knobs.prefetch.unwrap_or_default();
        self.prefetch(Some(f(p)))
    }

    /// Rows per wave: by default all BM rows (and `bm` moves them); smaller splits BM across
    /// waves.
    pub fn wm(mut self, v: u32) -> Self {
        self.common.wm = Some(v);
        self
    }

    /// Pipeline stages of the K loop: the tile being multiplied and the B tiles in flight ahead
    /// of it (1 without b_prefetch).
    pub fn stages(&self) -> u32 {
        1 + self.knobs.prefetch.map_or(0, |p| p.b_prefetch_depth)
    }

    /// This spec under every combination of the pipeline's flags (`b_prefetch`, `dram_to_lds`,
    /// `cluster_drain_sched`, `deep_prime`; the last two exist only with `b_prefetch`), in a
    /// fixed order (`b_prefetch` outermost). With `cluster_drain_sched` the cluster is `cluster`
    /// MFMAs, or the whole chain when it is shorter.
    pub fn preb_flag_variants(&self, cluster: u32) -> Vec<PrebSpec> {
        let chain = self.mfmas_per_stage();
        let mut out = Vec::new();
        for prefetch in [false, true] {
            for dram in [false, true] {
                for cds in [false, true] {
                    for deep in [false, true] {
                        if !prefetch && (cds || deep) {
                            continue;
                        }
                        let sched = ClusterSched::new().mfma_cluster(chain.min(cluster).max(1));
                        let pipeline = Prefetch::new()
                            .deep_prime(deep)
                            .cluster(cds.then_some(sched));
                        out.push(
                            self.clone()
                                .prefetch(prefetch.then_some(pipeline))
                                .dram_to_lds(dram),
                        );
                    }
                }
            }
        }
        out
    }
}

impl LdsSpec {
    /// Rows per wave.
    pub fn wm(mut self, v: u32) -> Self {
        self.common.wm = Some(v);
        self
    }
}

/// What a spec type shares with [`KernelSpec`] by becoming one: checking, naming, keying and
/// building.
macro_rules! as_kernel_spec {
    ($t:ty) => {
        impl $t {
            /// Checks every rule; an `Ok` spec compiles.
            pub fn validate(&self) -> Result<(), SpecError> {
                KernelSpec::from(self.clone()).validate()
            }
            /// The kernel's symbol name, unique per configuration.
            pub fn kernel_name(&self) -> String {
                KernelSpec::from(self.clone()).kernel_name()
            }
            /// A stable key for caches (see [`KernelSpec::cache_key`]).
            pub fn cache_key(&self) -> String {
                KernelSpec::from(self.clone()).cache_key()
            }
            /// The split-K reduction's symbol name (see [`KernelSpec::reduce_name`]).
            pub fn reduce_name(&self) -> String {
                KernelSpec::from(self.clone()).reduce_name()
            }
            /// The bound on C's distance in bf16 ulps (see [`KernelSpec::bf16_ulps`]).
            pub fn bf16_ulps(&self) -> u32 {
                KernelSpec::from(self.clone()).bf16_ulps()
            }
            /// The stored form.
            pub fn values(&self) -> SpecValues {
                KernelSpec::from(self.clone()).values()
            }
            /// The LDS buffers the kernel allocates (see [`KernelSpec::lds_buffers`]).
            pub fn lds_buffers(&self) -> Vec<LdsBuffer> {
                KernelSpec::from(self.clone()).lds_buffers()
            }
            /// LDS bytes the kernel allocates.
            pub fn lds_bytes(&self) -> u64 {
                KernelSpec::from(self.clone()).lds_bytes()
            }
            /// Estimated VGPR+AGPR demand per lane (see [`KernelSpec::register_estimate`]).
            pub fn register_estimate(&self) -> (u64, String) {
                KernelSpec::from(self.clone()).register_estimate()
            }
            /// Checks `m x n x k` against this kernel (see [`KernelSpec::check_problem`]).
            pub fn check_problem(
                &self,
                m: usize,
                n: usize,
                k: usize,
            ) -> Result<(), crate::LaunchError> {
                KernelSpec::from(self.clone()).check_problem(m, n, k)
            }
            /// Validates the spec and compiles it, in process (see [`KernelSpec::build`]).
            pub fn build(&self) -> Result<crate::CompiledKernel, crate::BuildError> {
                KernelSpec::from(self.clone()).build()
            }
            /// [`KernelSpec::build_with`].
            pub fn build_with(
                &self,
                options: tilegen_dsl::CompileOptions,
            ) -> Result<crate::CompiledKernel, crate::BuildError> {
                KernelSpec::from(self.clone()).build_with(options)
            }
        }
    };
}

as_kernel_spec!(PrebSpec);
as_kernel_spec!(LdsSpec);

impl KernelSpec {
    /// The preshuffled-B kernel with the seed's defaults (the same as [`KernelSpec::preb`]).
    #[allow(clippy::new_ret_no_self)]
    pub fn new() -> PrebSpec {
        KernelSpec::preb()
    }

    /// The preshuffled-B kernel with the seed's defaults: BM=64, BN=128, BK_ELEMS=512, WN=64,
    /// one wave over all BM rows, no prefetching pipeline, swizzled LDS, bf16 output.
    pub fn preb() -> PrebSpec {
        PrebSpec {
            common: Common::defaults(Variant::Preb),
            knobs: PrebKnobs::default(),
        }
    }

    /// The LDS-staged kernel with its defaults: BM=BN=128, BK_ELEMS=128, WM=WN=64.
    pub fn lds() -> LdsSpec {
        LdsSpec {
            common: Common::defaults(Variant::Lds),
        }
    }

    /// The default spec of `variant`.
    pub fn of_variant(variant: Variant) -> KernelSpec {
        match variant {
            Variant::Preb => KernelSpec::preb().into(),
            Variant::Lds => KernelSpec::lds().into(),
        }
    }

    /// Most K slices [`KernelSpec::split_k`] takes: each split adds one more rounding into
    /// C and one more pass of atomics over it, and past 64 slices the atomics cost more than
    /// the extra workgroups recover on 256 CUs.
    pub const MAX_SPLIT_K: u32 = 64;

    /// Most M tiles one group of `xcd_group_m` spans.
    pub const MAX_XCD_GROUP_M: u32 = 64;

    /// Most K tiles of B `b_prefetch_depth` keeps in flight: each more costs a full set of B
    /// fragment registers, an A slot and another copy of the loop body in the instruction
    /// cache.
    pub const MAX_B_PREFETCH_DEPTH: u32 = 2;

    /// The kernel family.
    pub fn variant(&self) -> Variant {
        match self {
            KernelSpec::Lds(_) => Variant::Lds,
            KernelSpec::Preb(_) => Variant::Preb,
        }
    }

    /// The preb spec, if it is one.
    pub fn as_preb(&self) -> Option<&PrebSpec> {
        match self {
            KernelSpec::Preb(p) => Some(p),
            KernelSpec::Lds(_) => None,
        }
    }

    /// The knobs every spec has.
    pub fn common(&self) -> &Common {
        match self {
            KernelSpec::Lds(s) => &s.common,
            KernelSpec::Preb(s) => &s.common,
        }
    }

    pub(crate) fn common_mut(&mut self) -> &mut Common {
        match self {
            KernelSpec::Lds(s) => &mut s.common,
            KernelSpec::Preb(s) => &mut s.common,
        }
    }

    pub(crate) fn preb_knobs(&self) -> Option<&PrebKnobs> {
        self.as_preb().map(|p| &p.knobs)
    }

    /// The prefetching pipeline's settings, where the spec has one (a preb spec with
    /// `b_prefetch`).
    pub(crate) fn prefetch_settings(&self) -> Option<&Prefetch> {
        self.as_preb().and_then(PrebSpec::prefetch_settings)
    }

    pub(crate) fn preb_knobs_mut(&mut self) -> Option<&mut PrebKnobs> {
        match self {
            KernelSpec::Preb(p) => Some(&mut p.knobs),
            KernelSpec::Lds(_) => None,
        }
    }

    /// Rows per wave.
    pub fn wm(mut self, v: u32) -> Self {
        self.common_mut().wm = Some(v);
        self
    }

    /// The structural knobs' values: the variant, `wm` and the switches that make a scope
    /// present (`None` where the spec has no place for the switch).
    pub(crate) fn structure(&self, knob: Knob) -> Option<KnobValue> {
        let prefetch = self.preb_knobs().and_then(|k| k.prefetch);
        match knob {
            Knob::Variant => Some(self.variant().value()),
            Knob::Wm => Some(self.warp_m().value()),
            Knob::BPrefetch => self.preb_knobs().map(|k| k.prefetch.is_some().value()),
            Knob::ClusterDrainSched => prefetch.map(|p| p.cluster.is_some().value()),
            _ => None,
        }
    }

    /// Sets a structural knob: `wm`, or a switch that adds (or drops) its scope with default
    /// settings. The variant is chosen when a spec is made, not set.
    pub(crate) fn set_structure(&mut self, knob: Knob, v: KnobValue) -> Result<(), SpecError> {
        let missing = self.missing_scope(knob);
        match (knob, v) {
            (Knob::Variant, KnobValue::Variant(v)) if v == self.variant() => Ok(()),
            (Knob::Wm, KnobValue::Count(v)) => {
                self.common_mut().wm = Some(v);
                Ok(())
            }
            (Knob::BPrefetch, KnobValue::Flag(on)) => {
                let k = self.preb_knobs_mut().ok_or(missing)?;
                k.prefetch = on.then(|| k.prefetch.unwrap_or_default());
                Ok(())
            }
            (Knob::ClusterDrainSched, KnobValue::Flag(on)) => {
                let p = self
                    .preb_knobs_mut()
                    .and_then(|k| k.prefetch.as_mut())
                    .ok_or(missing)?;
                p.cluster = on.then(|| p.cluster.unwrap_or_default());
                Ok(())
            }
            _ => Err(SpecError::Ignored {
                setter: knob.name(),
                why: "a spec's variant is chosen when it is made",
            }),
        }
    }

    /// Why `knob` has no place in this spec: the scope it lives in is absent.
    pub(crate) fn missing_scope(&self, knob: Knob) -> SpecError {
        let flag = knob.name();
        match (knob.scope(), knob) {
            (Scope::Preb, _) | (Scope::Structure, Knob::BPrefetch) => SpecError::WrongVariant {
                flag,
                needs: Variant::Preb,
                variant: self.variant(),
            },
            (Scope::Prefetch, _) | (Scope::Structure, Knob::ClusterDrainSched)
                if self.variant() != Variant::Preb =>
            {
                SpecError::WrongVariant {
                    flag,
                    needs: Variant::Preb,
                    variant: self.variant(),
                }
            }
            (Scope::Prefetch, _) | (Scope::Structure, Knob::ClusterDrainSched) => {
                SpecError::NeedsPrefetch { flag }
            }
            (Scope::Cluster, _) if self.variant() != Variant::Preb => SpecError::WrongVariant {
                flag,
                needs: Variant::Preb,
                variant: self.variant(),
            },
            (Scope::Cluster, _) => SpecError::Ignored {
                setter: flag,
                why: "the cluster size shapes the schedule only with cluster_drain_sched",
            },
            _ => SpecError::Ignored {
                setter: flag,
                why: "a spec's variant is chosen when it is made",
            },
        }
    }

    /// The stored form: every knob, those the spec has no place for at their defaults.
    pub fn values(&self) -> SpecValues {
        let mut v = SpecValues::defaults(self.variant());
        for &k in Knob::ALL {
            if let Some(x) = k.get(self) {
                v.put(k, x);
            }
        }
        v
    }

    /// Pipeline stages of the K loop (see [`PrebSpec::stages`]; 1 for the LDS-staged kernel).
    pub fn stages(&self) -> u32 {
        self.as_preb().map_or(1, PrebSpec::stages)
    }

    /// This spec with K split into `splits` slices run by the grid's z dimension (preb; 1..=
    /// [`KernelSpec::MAX_SPLIT_K`], default 1), so a problem with few `BM x BN` tiles (decode,
    /// small M) still fills the GPU. A launch needs `K` to be a multiple of `splits *
    /// bk_elems`: every slice runs whole tiles.
    ///
    /// By default each slice stores its f32 partial tile to its own `[M, N]` plane of an f32
    /// workspace ([`KernelSpec::workspace_bytes`], which the launcher allocates), and a second
    /// kernel of the same code object sums the planes in slice order and rounds once to C's
    /// type: C is within one bf16 ulp of the f32-accumulated product and the same on every run.
    ///
    /// With `split_k_atomic` each slice instead adds its partial into C with buffer atomics:
    /// `buffer_atomic_add_f32` for f32 output, `buffer_atomic_pk_add_bf16` for bf16 (as AMD's
    /// hand-written kernels do), so C must be zero before the launch; the launcher
    /// ([`CompiledKernel::launch`](crate::CompiledKernel::launch)) zeroes it. With bf16 output
    /// every add rounds: each slice's partial is rounded to bf16 and each add into C rounds
    /// again, so an element may differ from the once-rounded product by up to `splits` bf16
    /// ulps of the sum of its terms' magnitudes, and the order of the adds, hence the last bit,
    /// varies from run to run. f32 output keeps f32 accuracy (the order still varies).
    pub fn split_k(&self) -> u32 {
        self.preb_knobs().map_or(1, |k| k.split_k)
    }

    /// Whether split-K slices add into C with atomics (see [`KernelSpec::split_k`]): only a
    /// split-K spec with `split_k_atomic`.
    pub fn split_k_atomic(&self) -> bool {
        self.preb_knobs()
            .is_some_and(|k| k.split_k > 1 && k.split_k_atomic)
    }

    /// Whether the launch runs a second kernel, the split-K reduction, after the GEMM: a
    /// split-K spec without atomics.
    pub fn reduces_split_k(&self) -> bool {
        self.split_k() > 1 && !self.split_k_atomic()
    }

    /// Bytes of the f32 workspace an `m x n` launch needs: one `[M, N]` f32 plane per K slice
    /// when the split-K reduction runs, none otherwise.
    pub fn workspace_bytes(&self, m: usize, n: usize) -> u64 {
        if self.reduces_split_k() {
            u64::from(self.split_k()) * m as u64 * n as u64 * 4
        } else {
            0
        }
    }

    /// How far, in bf16 ulps, an element of C may be from the f32-accumulated product rounded
    /// once to bf16: 1 (f32 accumulation order, then one rounding) for every kernel but a
    /// split-K one adding bf16 partials with atomics, whose `split_k` roundings each cost up
    /// to an ulp of the sum of the element's term magnitudes.
    pub fn bf16_ulps(&self) -> u32 {
        if self.split_k_atomic() && self.out_dtype == OutDtype::Bf16 {
            self.split_k()
        } else {
            1
        }
    }

    /// The LDS buffers the kernel allocates, in order: the kernels allocate exactly these, so
    /// [`KernelSpec::lds_bytes`] is what the code object reports.
    pub fn lds_buffers(&self) -> Vec<LdsBuffer> {
        let (bm, bn, bk) = (
            u64::from(self.bm),
            u64::from(self.bn),
            u64::from(self.bk_elems),
        );
        // FP4 tiles hold two elements a byte; E8M0 scales one byte per 32 elements.
        let buf = |name, bytes| LdsBuffer { name, bytes };
        match self {
            KernelSpec::Preb(_) => {
                const NAMES: [&str; 1 + KernelSpec::MAX_B_PREFETCH_DEPTH as usize] =
                    ["a_slot0", "a_slot1", "a_slot2"];
                NAMES
                    .iter()
                    .take(self.stages() as usize)
                    .map(|name| buf(name, bm * bk / 2))
                    .collect()
            }
            KernelSpec::Lds(_) => vec![
                buf("a_tile", bm * bk / 2),
                buf("b_tile", bn * bk / 2),
                buf("a_scales", bm * bk / u64::from(tilegen_arch::MX_BLOCK)),
                buf("b_scales", bn * bk / u64::from(tilegen_arch::MX_BLOCK)),
            ],
        }
    }

    /// LDS bytes the kernel allocates (each buffer 16-byte aligned).
    pub fn lds_bytes(&self) -> u64 {
        self.lds_buffers()
            .iter()
            .map(|b| b.bytes.next_multiple_of(LdsBuffer::ALIGN))
            .sum()
    }

    /// Estimated VGPR+AGPR demand per lane: accumulators, operand fragments, scales and a
    /// margin for addresses. Used to refuse specs that cannot fit before compiling them.
    pub fn register_estimate(&self) -> (u64, String) {
        let s = self.mma;
        let (nm, nn) = (
            u64::from(self.warp_m() / s.mn()),
            u64::from(self.wn / s.mn()),
        );
        let nk = u64::from(self.bk_elems / s.k());
        let acc = nm * nn * u64::from(s.acc_dwords());
        debug_assert_eq!(acc, self.accumulator_dwords());
        let (b, a) = match self {
            KernelSpec::Preb(_) => {
                let slots = u64::from(self.stages());
                (slots * nn * nk * 4, nm * 4)
            }
            KernelSpec::Lds(_) => (nn * 4, nm * 4),
        };
        let margin = 24;
        (
            acc + a + b + margin,
            format!("{acc} accumulators + {a} A + {b} B fragment + {margin} address"),
        )
    }

    /// Checks every rule the types cannot: sizes, ranges and budgets. An `Ok` spec compiles.
    pub fn validate(&self) -> Result<(), SpecError> {
        for (name, value) in [
            ("bm", self.bm),
            ("bn", self.bn),
            ("bk_elems", self.bk_elems),
            ("wn", self.wn),
            ("wm", self.warp_m()),
        ] {
            if value == 0 {
                return Err(SpecError::NotPositive { name, value });
            }
        }
        // Each knob's declared range, where the spec has the knob (an unset occupancy target
        // has none).
        for &k in Knob::ALL {
            let (Some(r), Some(v)) = (k.range(), k.get(self)) else {
                continue;
            };
            let value = match v {
                KnobValue::Count(x) | KnobValue::Auto(Some(x)) => x,
                _ => continue,
            };
            in_range(k.name(), value, r.min, r.max, r.why)?;
        }
        let multiple = |name, value: u32, multiple: u32, why| {
            if !value.is_multiple_of(multiple) {
                Err(SpecError::NotMultiple {
                    name,
                    value,
                    multiple,
                    why,
                })
            } else {
                Ok(())
            }
        };
        let mn = self.mma.mn();
        match self {
            KernelSpec::Preb(_) => {
                if self.bm != 16 && !self.bm.is_multiple_of(32) {
                    return Err(SpecError::PairRule {
                        name: "bm",
                        value: self.bm,
                        what: "row",
                    });
                }
                for (name, value, what) in [("wm", self.warp_m(), "row"), ("wn", self.wn, "column")]
                {
                    if value != 16 && !value.is_multiple_of(32) {
                        return Err(SpecError::PairRule { name, value, what });
                    }
                }
                multiple(
                    "bk_elems",
                    self.bk_elems,
                    256,
                    "one scale dword covers two 128-K MFMA steps",
                )?;
                multiple("bm", self.bm, mn, "whole MFMA tiles per workgroup")?;
                multiple("wm", self.warp_m(), mn, "whole MFMA tiles per wave")?;
                multiple("wn", self.wn, mn, "whole MFMA tiles per wave")?;
                multiple(
                    "bm",
                    self.bm,
                    self.warp_m(),
                    "waves split BM into WM-high strips",
                )?;
                multiple("bn", self.bn, self.wn, "waves split BN into WN-wide strips")?;
            }
            KernelSpec::Lds(_) => {
                multiple("bm", self.bm, mn, "whole MFMA tiles per workgroup")?;
                multiple("wm", self.warp_m(), mn, "whole MFMA tiles per wave")?;
                multiple("wn", self.wn, mn, "whole MFMA tiles per wave")?;
                multiple(
                    "bm",
                    self.bm,
                    self.warp_m(),
                    "waves split BM into WM-high strips",
                )?;
                multiple("bn", self.bn, self.wn, "waves split BN into WN-wide strips")?;
                multiple(
                    "bk_elems",
                    self.bk_elems,
                    128,
                    "scale rows are staged as whole dwords (4 scales = 128 K)",
                )?;
            }
        }
        if self.prefetch_settings().is_some_and(|p| p.a_spread) && self.dram_to_lds {
            return Err(SpecError::Ignored {
                setter: "a_spread",
                why: "dram_to_lds loads A straight into LDS, after the barrier that frees its slot, not over the MFMA chain",
            });
        }
        if let Some(k) = self.preb_knobs()
            && k.split_k_atomic
            && k.split_k == 1
        {
            return Err(SpecError::Ignored {
                setter: "split_k_atomic",
                why: "split_k is 1, so nothing is added into C",
            });
        }
        let warps = self.warps_wide();
        let threads = warps * u64::from(WAVE_SIZE);
        if threads > u64::from(MAX_WORKGROUP_SIZE) {
            return Err(SpecError::TooManyThreads { warps, threads });
        }
        let chain = self.mfmas_per_stage_wide();
        if let Some(KnobValue::Count(value)) = Knob::MfmaCluster.get(self)
            && (value == 0 || u64::from(value) > chain)
        {
            return Err(SpecError::MfmaCluster { value, chain });
        }
        let lds = self.lds_bytes();
        if lds > u64::from(LDS_BYTES) {
            let detail = match self {
                KernelSpec::Preb(_) => format!(
                    "{} A slot(s) of {} x {} bytes",
                    self.stages(),
                    self.bm,
                    self.bk_elems / 2
                ),
                KernelSpec::Lds(_) => format!(
                    "A {}x{} + B {}x{} bytes + scales",
                    self.bm,
                    self.bk_elems / 2,
                    self.bn,
                    self.bk_elems / 2
                ),
            };
            return Err(SpecError::LdsBudget { bytes: lds, detail });
        }
        let (estimate, detail) = self.register_estimate();
        if estimate > u64::from(MAX_UNIFIED_VGPRS) {
            return Err(SpecError::RegisterBudget { estimate, detail });
        }
        if self.acc_agprs && self.accumulator_dwords() > u64::from(MAX_ARCH_VGPRS) {
            return Err(SpecError::RegisterBudget {
                estimate,
                detail: format!(
                    "{} accumulators > the {MAX_ARCH_VGPRS} AGPRs of a lane",
                    self.accumulator_dwords()
                ),
            });
        }
        // An occupancy target bounds the registers LLVM may use: past it VGPRs spill to
        // scratch, but accumulators held in AGPRs cannot, and LLVM fails to allocate them
        // (leaving a broken object).
        if self.acc_agprs
            && let Some(w) = self.waves_per_eu
        {
            let budget = u64::from(tilegen_arch::max_unified_vgprs_at(w));
            if estimate > budget {
                return Err(SpecError::OccupancyBudget {
                    estimate,
                    detail,
                    waves: w,
                    budget,
                });
            }
        }
        // A workgroup's waves are resident on one CU together, spread over its SIMDs, so
        // each SIMD's share of them divides the register file.
        let per_simd = warps.div_ceil(u64::from(SIMDS_PER_CU));
        if estimate * per_simd > u64::from(MAX_UNIFIED_VGPRS) {
            return Err(SpecError::RegisterBudget {
                estimate: estimate * per_simd,
                detail: format!("{per_simd} waves per SIMD x ({detail})"),
            });
        }
        Ok(())
    }

    /// The kernel's symbol name, unique per configuration: each knob the spec has adds its
    /// piece, in the pieces' declared order.
    pub fn kernel_name(&self) -> String {
        let mut pieces: Vec<(u8, String)> = Knob::ALL
            .iter()
            // How slices are added means nothing without slices.
            .filter(|&&k| k != Knob::SplitKAtomic || self.split_k() > 1)
            .filter_map(|&k| Some((k.rank(), k.piece(k.get(self)?)?)))
            .collect();
        pieces.sort_by_key(|(rank, _)| *rank);
        pieces
            .into_iter()
            .fold("mxfp4_gemm".to_string(), |name, (_, piece)| name + &piece)
    }

    /// The symbol name of the split-K reduction kernel in this spec's code object (see
    /// [`KernelSpec::split_k`]).
    pub fn reduce_name(&self) -> String {
        format!("{}_reduce", self.kernel_name())
    }

    /// A stable key for caches: specs that generate the same code, with the same crate version
    /// and LLVM major version, give the same key on every machine and run. It hashes the
    /// stored form, where a knob the spec lacks holds its default.
    pub fn cache_key(&self) -> String {
        let canonical = format!(
            "tilegen-kernels {} llvm22 {}",
            env!("CARGO_PKG_VERSION"),
            serde_json::to_string(&self.values()).unwrap_or_else(|_| self.kernel_name())
        );
        // FNV-1a, 128 bits (two 64-bit lanes): stable across platforms and Rust versions, unlike
        // `std::hash`.
        let mut h1 = 0xcbf29ce484222325u64;
        let mut h2 = 0x84222325cbf29ce4u64;
        for b in canonical.bytes() {
            h1 = (h1 ^ b as u64).wrapping_mul(0x100000001b3);
            h2 = (h2 ^ b as u64 ^ 0x5a).wrapping_mul(0x100000001b3);
        }
        format!("{h1:016x}{h2:016x}")
    }
}

impl SpecValues {
    /// Whether the stored form writes knob `k`: always, unless it was added later and is at
    /// its default. `split_k_atomic` is written by the exact split-K specs alone: an atomic
    /// one is stored, named and keyed byte for byte as split-K specs were before the knob
    /// existed (their kernels added with atomics), so older databases and packs still match.
    fn written(&self, k: Knob) -> bool {
        if k == Knob::SplitKAtomic {
            return self.split_k > 1 && !self.split_k_atomic;
        }
        k.stored() != Stored::UnlessDefault || self.get(k) != k.default_value(self.variant)
    }

    /// Fills the knobs a stored spec left out whose meaning depends on the others: a split-K
    /// spec without `split_k_atomic` was stored before the f32 workspace existed, and its
    /// kernel added into C with atomics.
    pub(crate) fn read_absent(&mut self, absent: &[Knob]) {
        if self.split_k > 1 && absent.contains(&Knob::SplitKAtomic) {
            self.split_k_atomic = true;
        }
    }
}

impl TryFrom<SpecValues> for KernelSpec {
    type Error = SpecError;

    /// The typed spec of a stored one. A knob the spec has no place for (a preb knob on the
    /// LDS-staged kernel, a pipeline setting without `b_prefetch`, a cluster size without
    /// `cluster_drain_sched`) must hold its default, or the spec is refused: the kernel would
    /// ignore it. `validate` still checks the values.
    fn try_from(v: SpecValues) -> Result<Self, SpecError> {
        let mut spec = KernelSpec::of_variant(v.variant);
        // The table's order puts every switch before the knobs it makes a place for.
        for &k in Knob::ALL {
            let x = v.get(k);
            if let Err(e) = k.set(&mut spec, x)
                && x != k.default_value(v.variant)
            {
                return Err(e);
            }
        }
        // A preb spec whose wm is its bm was stored from one whose wm follows bm.
        if let KernelSpec::Preb(p) = &mut spec
            && p.common.wm == Some(p.common.bm)
        {
            p.common.wm = None;
        }
        Ok(spec)
    }
}

impl From<KernelSpec> for SpecValues {
    fn from(s: KernelSpec) -> Self {
        s.values()
    }
}

impl Common {
    /// Rows per wave as the kernel uses them (all of `bm` unless set).
    pub fn warp_m(&self) -> u32 {
        self.wm.unwrap_or(self.bm)
    }

    /// Accumulator dwords per lane: the wave's MMA tiles times the atom's accumulator size.
    pub fn accumulator_dwords(&self) -> u64 {
        let s = self.mma;
        u64::from(self.warp_m() / s.mn()) * u64::from(self.wn / s.mn()) * u64::from(s.acc_dwords())
    }

    /// Waves along M (`BM / WM`) and along N (`BN / WN`); the wave index runs along N first.
    pub fn wave_grid(&self) -> (u32, u32) {
        (self.bm / self.warp_m().max(1), self.bn / self.wn.max(1))
    }

    /// Waves per workgroup in u64: every size derived from the user's values is computed wide,
    /// so a huge tile is refused by its rule instead of wrapping into a small, valid-looking one.
    fn warps_wide(&self) -> u64 {
        u64::from(self.bm / self.warp_m().max(1)) * u64::from(self.bn / self.wn.max(1))
    }

    /// Waves per workgroup (saturating at `u32::MAX` for a spec `validate` refuses).
    pub fn warps(&self) -> u32 {
        saturate(self.warps_wide())
    }

    /// Work-items per workgroup (saturating at `u32::MAX` for a spec `validate` refuses).
    pub fn threads(&self) -> u32 {
        saturate(self.warps_wide() * u64::from(WAVE_SIZE))
    }

    fn mfmas_per_stage_wide(&self) -> u64 {
        let s = self.mma;
        u64::from(self.warp_m() / s.mn())
            * u64::from(self.wn / s.mn())
            * u64::from(self.bk_elems / s.k())
    }

    /// MFMAs per wave and K stage (saturating at `u32::MAX` for a spec `validate` refuses).
    pub fn mfmas_per_stage(&self) -> u32 {
        saturate(self.mfmas_per_stage_wide())
    }
}

/// `value` within `min..=max`, or the error naming the rule.
fn in_range(
    name: &'static str,
    value: u32,
    min: u32,
    max: u32,
    why: &'static str,
) -> Result<(), SpecError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(SpecError::OutOfRange {
            name,
            value,
            min,
            max,
            why,
        })
    }
}

fn saturate(v: u64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid() {
        KernelSpec::new().validate().unwrap();
        KernelSpec::lds().validate().unwrap();
        assert_eq!(KernelSpec::new().warps(), 2);
        assert_eq!(KernelSpec::lds().warps(), 4);
    }

    #[test]
    fn every_rule_is_named() {
        let e = KernelSpec::new().bn(96).validate().unwrap_err();
        assert!(
            matches!(e, SpecError::NotMultiple { name: "bn", .. }),
            "{e}"
        );
        let e = KernelSpec::new().bm(48).validate().unwrap_err();
        assert_eq!(
            e,
            SpecError::PairRule {
                name: "bm",
                value: 48,
                what: "row"
            }
        );
        let e = KernelSpec::new().bn(96).wn(48).validate().unwrap_err();
        assert!(matches!(e, SpecError::PairRule { name: "wn", .. }), "{e}");
        let e = KernelSpec::new().bk_elems(384).validate().unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::NotMultiple {
                    name: "bk_elems",
                    multiple: 256,
                    ..
                }
            ),
            "{e}"
        );
        // B two tiles ahead stays within its bound, and costs a third A slot and B register
        // set.
        let depth = |d| KernelSpec::new().prefetch(Some(Prefetch::new().b_prefetch_depth(d)));
        let deeper = depth(3);
        assert!(matches!(
            deeper.validate().unwrap_err(),
            SpecError::OutOfRange {
                name: "b_prefetch_depth",
                ..
            }
        ));
        let two = KernelSpec::new().b_prefetch(true);
        let three = depth(2);
        assert_eq!((two.stages(), three.stages()), (2, 3));
        assert_eq!(three.lds_bytes(), two.lds_bytes() / 2 * 3);
        assert!(three.register_estimate().0 > two.register_estimate().0);
        assert!(three.kernel_name().ends_with("_bpf2"));
        let cluster = |n| Prefetch::new().cluster(Some(ClusterSched::new().mfma_cluster(n)));
        let e = KernelSpec::new()
            .prefetch(Some(cluster(0)))
            .validate()
            .unwrap_err();
        assert!(matches!(e, SpecError::MfmaCluster { .. }));
        let e = KernelSpec::new()
            .bm(256)
            .bk_elems(2048)
            .b_prefetch(true)
            .validate()
            .unwrap_err();
        assert!(matches!(e, SpecError::LdsBudget { .. }), "{e}");
        let e = KernelSpec::new()
            .bm(256)
            .wn(128)
            .bn(128)
            .validate()
            .unwrap_err();
        assert!(matches!(e, SpecError::RegisterBudget { .. }), "{e}");
        let e = KernelSpec::new().bn(2048).wn(64).validate().unwrap_err();
        assert!(matches!(e, SpecError::TooManyThreads { .. }), "{e}");
        let e = KernelSpec::new()
            .mma(MfmaShape::M32N32K64)
            .bm(16)
            .validate()
            .unwrap_err();
        assert!(
            matches!(e, SpecError::NotMultiple { name: "bm", .. }),
            "{e}"
        );
        // Accumulators in AGPRs cannot spill: an occupancy target that leaves a lane fewer
        // registers than the tile needs is refused (128 accumulators at 7 waves: 72).
        let agprs = KernelSpec::new().bm(128).bn(256).wm(128).acc_agprs(true);
        let e = agprs.clone().waves_per_eu(Some(7)).validate().unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::OccupancyBudget {
                    waves: 7,
                    budget: 72,
                    ..
                }
            ),
            "{e}"
        );
        assert!(agprs.clone().waves_per_eu(Some(2)).validate().is_ok());
        assert!(
            agprs
                .acc_agprs(false)
                .waves_per_eu(Some(7))
                .validate()
                .is_ok()
        );
        let e = KernelSpec::new()
            .waves_per_eu(Some(9))
            .validate()
            .unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::OutOfRange {
                    name: "waves_per_eu",
                    ..
                }
            ),
            "{e}"
        );
        // Waves along M: WM divides BM and keeps the scale pairs.
        let e = KernelSpec::new().bm(128).wm(48).validate().unwrap_err();
        assert!(matches!(e, SpecError::PairRule { name: "wm", .. }), "{e}");
        let e = KernelSpec::new().bm(96).wm(64).validate().unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::NotMultiple {
                    name: "bm",
                    multiple: 64,
                    ..
                }
            ),
            "{e}"
        );
        // 8 waves of a 256x256 tile share each SIMD two ways: half the file each.
        let e = KernelSpec::new()
            .bm(256)
            .wm(128)
            .bn(256)
            .wn(64)
            .b_prefetch(true)
            .validate()
            .unwrap_err();
        assert!(
            matches!(&e, SpecError::RegisterBudget { detail, .. } if detail.contains("2 waves per SIMD")),
            "{e}"
        );
        KernelSpec::new()
            .bm(256)
            .wm(128)
            .bn(256)
            .wn(64)
            .validate()
            .unwrap();
        // AGPRs hold at most 256 accumulators.
        let e = KernelSpec::new()
            .bm(256)
            .wm(256)
            .bn(128)
            .wn(128)
            .bk_elems(256)
            .acc_agprs(true)
            .validate()
            .unwrap_err();
        assert!(matches!(e, SpecError::RegisterBudget { .. }), "{e}");
        let e = KernelSpec::new().split_k(0).validate().unwrap_err();
        assert!(
            matches!(
                e,
                SpecError::OutOfRange {
                    name: "split_k",
                    ..
                }
            ),
            "{e}"
        );
        let e = KernelSpec::new().bm(0).validate().unwrap_err();
        assert_eq!(
            e,
            SpecError::NotPositive {
                name: "bm",
                value: 0
            }
        );
    }

    #[test]
    fn report_reads_back_the_kernarg_layout() {
        let k = KernelSpec::new().build().unwrap();
        let names: Vec<_> = k
            .report()
            .kernargs
            .iter()
            .filter_map(|a| a.name.clone())
            .collect();
        assert_eq!(names, ["c", "a", "b", "sfa", "sfb", "m", "n", "k"]);
        let offsets: Vec<_> = k.report().kernargs.iter().map(|a| a.offset).collect();
        assert_eq!(offsets, [0, 8, 16, 24, 32, 40, 44, 48]);
        assert_eq!(k.report().kernarg_bytes, 52);
    }

    #[test]
    fn preb_flag_variants_are_the_ten_the_rules_allow() {
        let v = KernelSpec::new().preb_flag_variants(3);
        assert_eq!(v.len(), 10);
        let keys: std::collections::HashSet<String> = v.iter().map(|s| s.cache_key()).collect();
        assert_eq!(keys.len(), 10, "every variant differs");
        for s in &v {
            s.validate().unwrap();
            let f = s.values();
            assert!(f.b_prefetch || !(f.cluster_drain_sched || f.deep_prime));
            assert_eq!(
                KernelSpec::try_from(f).unwrap(),
                KernelSpec::from(s.clone())
            );
        }
    }

    #[test]
    fn cache_key_is_stable_and_distinguishes_specs() {
        let a = KernelSpec::new();
        assert_eq!(a.cache_key(), KernelSpec::new().cache_key());
        assert_ne!(a.cache_key(), a.clone().b_prefetch(true).cache_key());
        assert_eq!(a.cache_key().len(), 32);
    }
}

#[cfg(test)]
mod stored_tests {
    use super::*;

    /// A stored knob the spec has no place for is refused with the reason, never dropped.
    #[test]
    fn misplaced_stored_knobs_are_refused() {
        let stored = |f: fn(&mut SpecValues)| {
            let mut v = KernelSpec::new().values();
            f(&mut v);
            KernelSpec::try_from(v)
        };
        assert_eq!(
            stored(|v| v.deep_prime = true),
            Err(SpecError::NeedsPrefetch { flag: "deep_prime" })
        );
        assert_eq!(
            stored(|v| v.b_prefetch_depth = 2),
            Err(SpecError::NeedsPrefetch {
                flag: "b_prefetch_depth"
            })
        );
        assert_eq!(
            stored(|v| v.cluster_drain_sched = true),
            Err(SpecError::NeedsPrefetch {
                flag: "cluster_drain_sched"
            })
        );
        assert!(matches!(
            stored(|v| {
                v.b_prefetch = true;
                v.mfma_cluster = 2;
            }),
            Err(SpecError::Ignored {
                setter: "mfma_cluster",
                ..
            })
        ));
        assert!(matches!(
            stored(|v| {
                v.variant = Variant::Lds;
                v.b_prefetch = true;
            }),
            Err(SpecError::WrongVariant {
                flag: "b_prefetch",
                ..
            })
        ));
        // Unknown and repeated fields are refused; knobs added later read as their defaults.
        let json = serde_json::to_string(&KernelSpec::new()).unwrap();
        assert!(!json.contains("b_burst") && !json.contains("xcd_group_m"));
        let extra = json.replacen('{', "{\"warp_n\":64,", 1);
        assert!(serde_json::from_str::<KernelSpec>(&extra).is_err());
        let twice = json.replacen('{', "{\"bm\":64,", 1);
        assert!(serde_json::from_str::<KernelSpec>(&twice).is_err());
        let burst = KernelSpec::new().prefetch(Some(Prefetch::new().b_burst(true)));
        let json = serde_json::to_string(&burst).unwrap();
        assert!(json.ends_with(",\"b_burst\":true}"), "{json}");
        assert_eq!(
            serde_json::from_str::<KernelSpec>(&json).unwrap(),
            burst.clone().into()
        );
        assert!(burst.kernel_name().ends_with("_bpf_bburst"));
        // a_spread: stored only when on, a name piece, refused beside dram_to_lds.
        assert!(!json.contains("a_spread"));
        let spread = KernelSpec::new().prefetch(Some(Prefetch::new().a_spread(true)));
        let json = serde_json::to_string(&spread).unwrap();
        assert!(json.ends_with(",\"a_spread\":true}"), "{json}");
        assert_eq!(
            serde_json::from_str::<KernelSpec>(&json).unwrap(),
            spread.clone().into()
        );
        assert!(spread.kernel_name().ends_with("_bpf_aspread"));
        assert!(matches!(
            KernelSpec::from(spread.dram_to_lds(true)).validate(),
            Err(SpecError::Ignored {
                setter: "a_spread",
                ..
            })
        ));
    }

    /// A split-K spec always writes how it adds its slices, so that the key of the exact
    /// reduction is never that of a spec stored before it existed, which reads as atomics.
    #[test]
    fn split_k_reduction_is_stored_and_read_back() {
        let plain = serde_json::to_string(&KernelSpec::new()).unwrap();
        assert!(!plain.contains("split_k_atomic"), "{plain}");
        let exact = KernelSpec::new().split_k(4);
        let json = serde_json::to_string(&exact).unwrap();
        assert!(json.ends_with(",\"split_k_atomic\":false}"), "{json}");
        let back: KernelSpec = serde_json::from_str(&json).unwrap();
        assert!(back.reduces_split_k() && !back.split_k_atomic());
        assert_eq!(back.bf16_ulps(), 1);
        let old = json.replace(",\"split_k_atomic\":false", "");
        let old: KernelSpec = serde_json::from_str(&old).unwrap();
        assert!(old.split_k_atomic() && !old.reduces_split_k());
        assert_eq!(old.bf16_ulps(), 4);
        assert_ne!(old.cache_key(), back.cache_key());
        assert!(old.kernel_name().ends_with("_sk4"));
        assert!(back.kernel_name().ends_with("_sk4_exact"));
        // The atomic spec is written again as it was stored before the knob existed.
        let old_json = json.replace(",\"split_k_atomic\":false", "");
        assert_eq!(serde_json::to_string(&old).unwrap(), old_json);
        assert!(!KernelSpec::new().kernel_name().contains("_exact"));
        assert_eq!(
            KernelSpec::new().split_k_atomic(true).validate(),
            Err(SpecError::Ignored {
                setter: "split_k_atomic",
                why: "split_k is 1, so nothing is added into C",
            })
        );
        let f32_atomic = KernelSpec::new()
            .split_k(4)
            .split_k_atomic(true)
            .out_dtype(OutDtype::F32);
        assert_eq!(f32_atomic.values().split_k, 4);
        assert_eq!(KernelSpec::from(f32_atomic).bf16_ulps(), 1);
        assert_eq!(exact.values().split_k, 4);
        assert_eq!(
            KernelSpec::from(exact.clone()).workspace_bytes(3, 32),
            4 * 3 * 32 * 4
        );
    }

    /// Every knob has one declaration: a distinct name, a flag, a doc, a default of its type.
    #[test]
    fn every_knob_is_declared_whole() {
        let mut names = std::collections::HashSet::new();
        for &k in Knob::ALL {
            assert!(names.insert(k.name()), "{k:?}");
            assert!(!k.doc().is_empty() && !k.flag().contains('_'));
            for v in [Variant::Preb, Variant::Lds] {
                assert!(k.accepts(k.default_value(v)));
            }
        }
        assert_eq!(Knob::LdsSwizzle.flag(), "no-lds-swizzle");
        assert_eq!(Knob::BPrefetchDepth.flag(), "b-prefetch-depth");
    }
}
