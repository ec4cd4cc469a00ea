//! `KernelSpec`: one MXFP4 GEMM tile configuration, validated before LLVM sees it.

use std::fmt;

use serde::{Deserialize, Serialize};
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

/// The values of a [`KernelSpec`], read through it (`spec.bm`). They change only through the
/// spec's setters, which also record what was set, so that a setting the variant would ignore
/// is refused instead of silently dropped.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SpecValues {
    /// Kernel family.
    pub variant: Variant,
    /// Rows of C per workgroup.
    pub bm: u32,
    /// Columns of C per workgroup.
    pub bn: u32,
    /// K elements per pipeline stage.
    pub bk_elems: u32,
    /// Rows per wave: waves split `BM` into `BM / WM` strips (and `BN` into `BN / WN`).
    pub wm: u32,
    /// Columns per wave.
    pub wn: u32,
    /// MFMA shape.
    pub mma: MfmaShape,
    /// Output element type.
    pub out_dtype: OutDtype,
    /// Depth-2 outer-K pipeline with double B registers (preb).
    pub b_prefetch: bool,
    /// Cache policy of the B loads (preb).
    pub b_cache_policy: CachePolicy,
    /// Move A global -> LDS with `buffer_load ... lds` instead of through VGPRs.
    pub dram_to_lds: bool,
    /// Swizzle the FP4 operand tiles in LDS so fragment reads are free of bank conflicts.
    pub lds_swizzle: bool,
    /// Per-cluster `s_setprio` brackets and a partial vmcnt staircase (preb, b_prefetch).
    pub cluster_drain_sched: bool,
    /// MFMAs per cluster.
    pub mfma_cluster: u32,
    /// Stage A two tiles ahead (preb, b_prefetch).
    pub deep_prime: bool,
    /// Occupancy target: at least this many waves per SIMD (1..=8), which bounds the registers
    /// the compiler may use (it spills past them). `None` lets the compiler choose.
    pub waves_per_eu: Option<u32>,
    /// Split-K: the launch grid's z dimension runs this many K slices of the problem, each
    /// adding its partial product into C with atomics (preb; 1 = no split). See
    /// [`KernelSpec::split_k`].
    #[serde(default = "one")]
    pub split_k: u32,
    /// Let the MFMA accumulators live in AGPRs (see [`KernelSpec::acc_agprs`]).
    #[serde(default)]
    pub acc_agprs: bool,
    /// XCD-aware tile order (preb; 0 = the grid's order). See [`KernelSpec::xcd_group_m`].
    /// Left out of the serialized spec when 0, so specs without it keep their cache keys.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub xcd_group_m: u32,
    /// K tiles of B in flight ahead of the one being multiplied (preb, b_prefetch): 1 (double
    /// buffer) or 2. See [`KernelSpec::b_prefetch_depth`]. Left out of the serialized spec
    /// when 1, so specs without it keep their cache keys.
    #[serde(default = "one", skip_serializing_if = "is_one")]
    pub b_prefetch_depth: u32,
}

fn is_one(v: &u32) -> bool {
    *v == 1
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

fn is_zero(v: &u32) -> bool {
    *v == 0
}

fn one() -> u32 {
    1
}

/// Setters that a variant may ignore, recorded when called.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
struct Explicit(u8);

impl Explicit {
    const WM: u8 = 1;
    const MMA: u8 = 1 << 1;
    const B_PREFETCH: u8 = 1 << 2;
    const B_CACHE_POLICY: u8 = 1 << 3;
    const CLUSTER_DRAIN_SCHED: u8 = 1 << 4;
    const DEEP_PRIME: u8 = 1 << 5;
    const MFMA_CLUSTER: u8 = 1 << 6;
    const B_PREFETCH_DEPTH: u8 = 1 << 7;

    fn has(self, bit: u8) -> bool {
        self.0 & bit != 0
    }
}

/// A GEMM kernel configuration: `C[M, N] = A[M, K] * B[N, K]^T` in MXFP4 with E8M0 block
/// scales. Start from [`KernelSpec::preb`] (the preshuffled-B kernel with the seed's defaults;
/// [`KernelSpec::new`] is the same) or [`KernelSpec::lds`] (the LDS-staged kernel), adjust with
/// the setters, then [`KernelSpec::build`]. Values are read through `Deref` (`spec.bm`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(from = "SpecValues", into = "SpecValues")]
pub struct KernelSpec {
    values: SpecValues,
    explicit: Explicit,
}

impl From<SpecValues> for KernelSpec {
    /// A spec read back (from a tuning database, say): nothing counts as explicitly set, and
    /// `validate` still checks every value.
    fn from(values: SpecValues) -> Self {
        KernelSpec {
            values,
            explicit: Explicit::default(),
        }
    }
}

impl From<KernelSpec> for SpecValues {
    fn from(spec: KernelSpec) -> Self {
        spec.values
    }
}

impl std::ops::Deref for KernelSpec {
    type Target = SpecValues;
    fn deref(&self) -> &SpecValues {
        &self.values
    }
}

impl Default for KernelSpec {
    fn default() -> Self {
        KernelSpec::preb()
    }
}

macro_rules! setter {
    ($name:ident, $t:ty, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(mut self, v: $t) -> Self {
            self.values.$name = v;
            self
        }
    };
    ($name:ident, $t:ty, $bit:expr, $doc:literal) => {
        #[doc = $doc]
        pub fn $name(mut self, v: $t) -> Self {
            self.values.$name = v;
            self.explicit.0 |= $bit;
            self
        }
    };
}

impl KernelSpec {
    /// The preshuffled-B kernel with the seed's defaults (the same as [`KernelSpec::preb`]).
    pub fn new() -> Self {
        KernelSpec::preb()
    }

    /// The preshuffled-B kernel with the seed's defaults: BM=64, BN=128, BK_ELEMS=512, WN=64,
    /// every flag off but `lds_swizzle`, `mfma_cluster` 4, bf16 output.
    pub fn preb() -> Self {
        SpecValues {
            variant: Variant::Preb,
            bm: 64,
            bn: 128,
            bk_elems: 512,
            wm: 64,
            wn: 64,
            mma: MfmaShape::M16N16K128,
            out_dtype: OutDtype::Bf16,
            b_prefetch: false,
            b_cache_policy: CachePolicy::Always,
            dram_to_lds: false,
            lds_swizzle: true,
            cluster_drain_sched: false,
            mfma_cluster: 4,
            deep_prime: false,
            waves_per_eu: None,
            split_k: 1,
            acc_agprs: false,
            xcd_group_m: 0,
            b_prefetch_depth: 1,
        }
        .into()
    }

    /// The LDS-staged kernel with its defaults: BM=BN=128, BK_ELEMS=128, WM=WN=64.
    pub fn lds() -> Self {
        SpecValues {
            variant: Variant::Lds,
            bm: 128,
            bn: 128,
            bk_elems: 128,
            wm: 64,
            wn: 64,
            ..KernelSpec::preb().values
        }
        .into()
    }

    /// Most K slices [`KernelSpec::split_k`] takes: each split adds one more rounding into
    /// C and one more pass of atomics over it, and past 64 slices the atomics cost more than
    /// the extra workgroups recover on 256 CUs.
    pub const MAX_SPLIT_K: u32 = 64;

    /// The values only.
    pub fn values(&self) -> &SpecValues {
        &self.values
    }

    /// Rows of C per workgroup. On a preb spec whose `wm` was not set, `wm` follows: one wave
    /// covers all `BM` rows, as before waves could split `BM`.
    pub fn bm(mut self, v: u32) -> Self {
        self.values.bm = v;
        if self.variant == Variant::Preb && !self.explicit.has(Explicit::WM) {
            self.values.wm = v;
        }
        self
    }

    setter!(bn, u32, "Columns of C per workgroup.");
    setter!(bk_elems, u32, "K elements per stage.");
    setter!(
        wm,
        u32,
        Explicit::WM,
        "Rows per wave (preb: by default all BM rows; smaller splits BM across waves)."
    );
    setter!(wn, u32, "Columns per wave.");
    setter!(mma, MfmaShape, Explicit::MMA, "MFMA shape.");
    setter!(out_dtype, OutDtype, "Output element type.");
    setter!(
        b_prefetch,
        bool,
        Explicit::B_PREFETCH,
        "Depth-2 outer-K pipeline (preb)."
    );
    setter!(
        b_cache_policy,
        CachePolicy,
        Explicit::B_CACHE_POLICY,
        "Cache policy of the B loads (preb)."
    );
    setter!(dram_to_lds, bool, "Direct global-to-LDS loads of A.");
    setter!(
        lds_swizzle,
        bool,
        "Swizzled LDS operand tiles (on by default; off to measure bank conflicts)."
    );
    setter!(
        cluster_drain_sched,
        bool,
        Explicit::CLUSTER_DRAIN_SCHED,
        "Per-cluster priority brackets and vmcnt staircase (preb, b_prefetch)."
    );
    setter!(
        mfma_cluster,
        u32,
        Explicit::MFMA_CLUSTER,
        "MFMAs per cluster (shapes the schedule with cluster_drain_sched only)."
    );
    setter!(
        waves_per_eu,
        Option<u32>,
        "Occupancy target in waves per SIMD (bounds register use)."
    );
    setter!(
        deep_prime,
        bool,
        Explicit::DEEP_PRIME,
        "Stage A two tiles ahead (preb, b_prefetch)."
    );

    setter!(
        b_prefetch_depth,
        u32,
        Explicit::B_PREFETCH_DEPTH,
        "K tiles of B in flight ahead of the one being multiplied (preb, b_prefetch): 1 or 2. \
         Depth 2 keeps a third set of B registers and a third A slot in LDS, and unrolls the \
         K loop by three, so each B fragment has two tiles' MFMAs to arrive in instead of one."
    );

    /// Most K tiles of B [`KernelSpec::b_prefetch_depth`] keeps in flight: each more costs a
    /// full set of B fragment registers, an A slot and another copy of the loop body in the
    /// instruction cache.
    pub const MAX_B_PREFETCH_DEPTH: u32 = 2;

    /// Pipeline stages of the preb K loop: the tile being multiplied and the B tiles in
    /// flight ahead of it (1 without b_prefetch).
    pub fn stages(&self) -> u32 {
        if self.b_prefetch {
            1 + self.b_prefetch_depth
        } else {
            1
        }
    }

    /// Lets the MFMA accumulators live in AGPRs: the kernel asks LLVM for at least as many
    /// AGPRs as it has accumulator dwords (`amdgpu-agpr-alloc`), so MFMAs write `a[...]` and
    /// the architectural VGPRs stay for operands and addresses. Without it LLVM sees no AGPR
    /// use, pins the AGPR budget to zero and keeps accumulators in VGPRs, so a wave spills
    /// past 256 registers even at one wave per SIMD, where 512 are there.
    pub fn acc_agprs(mut self, on: bool) -> Self {
        self.values.acc_agprs = on;
        self
    }

    /// Accumulator dwords per lane: the wave's MMA tiles times the atom's accumulator size.
    pub fn accumulator_dwords(&self) -> u64 {
        let s = self.mma;
        u64::from(self.warp_m() / s.mn()) * u64::from(self.wn / s.mn()) * u64::from(s.acc_dwords())
    }

    /// Splits K into `splits` slices run by the grid's z dimension (preb; 1..=
    /// [`KernelSpec::MAX_SPLIT_K`], default 1), so a problem with few `BM x BN` tiles (decode,
    /// small M) still fills the GPU. Each slice adds its partial tile into C with buffer
    /// atomics: `buffer_atomic_add_f32` for f32 output, `buffer_atomic_pk_add_bf16` for bf16
    /// (as AMD's hand-written kernels do), so C must be zero before the launch; the launcher
    /// ([`CompiledKernel::launch`](crate::CompiledKernel::launch)) zeroes it.
    ///
    /// A launch needs `K` to be a multiple of `splits * bk_elems`: every slice runs whole
    /// tiles. With bf16 output every add rounds: each slice's partial is rounded to bf16 and
    /// each add into C rounds again, so an element may differ from the once-rounded product by
    /// up to `splits` bf16 ulps of the sum of its terms' magnitudes (instead of half an ulp of
    /// its value), and the order of the adds, hence the last bit, varies from run to run. f32
    /// output keeps f32 accuracy (the order still varies).
    pub fn split_k(mut self, splits: u32) -> Self {
        self.values.split_k = splits;
        self
    }

    /// Most M tiles one group of [`KernelSpec::xcd_group_m`] spans.
    pub const MAX_XCD_GROUP_M: u32 = 64;

    /// Orders the output tiles for the MI355X's 8 XCDs (preb; 0, the default, keeps the
    /// grid's order). The GPU hands workgroup `i` to XCD `i mod 8`, and each XCD has its own
    /// L2, so in the grid's order the workgroups sharing an A row tile or a B column tile land
    /// on different XCDs and each fetches it from memory. With `g > 0` the kernel renumbers
    /// its workgroup: the workgroups one XCD receives take consecutive tiles, walked in groups
    /// of `g` M tiles (down a group's M tiles, then to the next N tile), so the workgroups
    /// resident on one XCD share both operands' tiles in its L2. The renumbering is a
    /// bijection for any grid, split-K slices included.
    pub fn xcd_group_m(mut self, g: u32) -> Self {
        self.values.xcd_group_m = g;
        self
    }

    /// Rows per wave as the kernel uses them.
    pub fn warp_m(&self) -> u32 {
        self.wm
    }

    /// Waves along M (`BM / WM`) and along N (`BN / WN`); the wave index runs along N first.
    pub fn wave_grid(&self) -> (u32, u32) {
        (self.bm / self.wm.max(1), self.bn / self.wn.max(1))
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

    fn mma_mn(&self) -> u32 {
        self.mma.mn()
    }

    fn mfmas_per_stage_wide(&self) -> u64 {
        let s = self.mma;
        u64::from(self.warp_m() / s.mn())
            * u64::from(self.wn / s.mn())
            * u64::from(self.bk_elems / s.k())
    }

    /// This spec under every combination of the preb pipeline's flags the rules allow
    /// (`b_prefetch`, `dram_to_lds`, `cluster_drain_sched`, `deep_prime`; the last two need
    /// `b_prefetch`), in a fixed order (`b_prefetch` outermost). With `cluster_drain_sched`
    /// the cluster is `cluster` MFMAs, or the whole chain when it is shorter.
    pub fn preb_flag_variants(&self, cluster: u32) -> Vec<KernelSpec> {
        let chain = self.mfmas_per_stage();
        let mut out = Vec::new();
        for prefetch in [false, true] {
            for dram in [false, true] {
                for cds in [false, true] {
                    for deep in [false, true] {
                        if !prefetch && (cds || deep) {
                            continue;
                        }
                        let spec = self
                            .clone()
                            .b_prefetch(prefetch)
                            .dram_to_lds(dram)
                            .cluster_drain_sched(cds)
                            .deep_prime(deep);
                        out.push(if cds {
                            spec.mfma_cluster(chain.min(cluster).max(1))
                        } else {
                            spec
                        });
                    }
                }
            }
        }
        out
    }

    /// MFMAs per wave and K stage (saturating at `u32::MAX` for a spec `validate` refuses).
    pub fn mfmas_per_stage(&self) -> u32 {
        saturate(self.mfmas_per_stage_wide())
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
        match self.variant {
            Variant::Preb => {
                const NAMES: [&str; 1 + KernelSpec::MAX_B_PREFETCH_DEPTH as usize] =
                    ["a_slot0", "a_slot1", "a_slot2"];
                NAMES
                    .iter()
                    .take(self.stages() as usize)
                    .map(|name| buf(name, bm * bk / 2))
                    .collect()
            }
            Variant::Lds => vec![
                buf("a_tile", bm * bk / 2),
                buf("b_tile", bn * bk / 2),
                buf("a_scales", bm * bk / 32),
                buf("b_scales", bn * bk / 32),
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
        let (b, a) = match self.variant {
            Variant::Preb => {
                let slots = u64::from(self.stages());
                (slots * nn * nk * 4, nm * 4)
            }
            Variant::Lds => (nn * 4, nm * 4),
        };
        let margin = 24;
        (
            acc + a + b + margin,
            format!("{acc} accumulators + {a} A + {b} B fragment + {margin} address"),
        )
    }

    /// Checks every rule; an `Ok` spec compiles.
    pub fn validate(&self) -> Result<(), SpecError> {
        for (name, value) in [
            ("bm", self.bm),
            ("bn", self.bn),
            ("bk_elems", self.bk_elems),
            ("wn", self.wn),
            ("wm", self.wm),
        ] {
            if value == 0 {
                return Err(SpecError::NotPositive { name, value });
            }
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
        let preb_only = |flag: &'static str, set: bool| {
            if set && self.variant != Variant::Preb {
                Err(SpecError::WrongVariant {
                    flag,
                    needs: Variant::Preb,
                    variant: self.variant,
                })
            } else {
                Ok(())
            }
        };
        // Set explicitly, or (for a spec read back) set to something other than the default.
        let x = self.explicit;
        preb_only("b_prefetch", self.b_prefetch || x.has(Explicit::B_PREFETCH))?;
        preb_only(
            "b_cache_policy",
            self.b_cache_policy != CachePolicy::Always || x.has(Explicit::B_CACHE_POLICY),
        )?;
        preb_only(
            "cluster_drain_sched",
            self.cluster_drain_sched || x.has(Explicit::CLUSTER_DRAIN_SCHED),
        )?;
        preb_only("deep_prime", self.deep_prime || x.has(Explicit::DEEP_PRIME))?;
        if x.has(Explicit::MFMA_CLUSTER) && !self.cluster_drain_sched {
            return Err(SpecError::Ignored {
                setter: "mfma_cluster",
                why: "the cluster size shapes the schedule only with cluster_drain_sched",
            });
        }
        if !self.b_prefetch {
            if self.cluster_drain_sched {
                return Err(SpecError::NeedsPrefetch {
                    flag: "cluster_drain_sched",
                });
            }
            if self.deep_prime {
                return Err(SpecError::NeedsPrefetch { flag: "deep_prime" });
            }
            if self.b_prefetch_depth != 1 || x.has(Explicit::B_PREFETCH_DEPTH) {
                return Err(SpecError::NeedsPrefetch {
                    flag: "b_prefetch_depth",
                });
            }
        }
        in_range(
            "b_prefetch_depth",
            self.b_prefetch_depth,
            1,
            KernelSpec::MAX_B_PREFETCH_DEPTH,
            "K tiles of B in flight ahead of the one being multiplied",
        )?;
        let mn = self.mma_mn();
        match self.variant {
            Variant::Preb => {
                if self.bm != 16 && !self.bm.is_multiple_of(32) {
                    return Err(SpecError::PairRule {
                        name: "bm",
                        value: self.bm,
                        what: "row",
                    });
                }
                for (name, value, what) in [("wm", self.wm, "row"), ("wn", self.wn, "column")] {
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
                multiple("wm", self.wm, mn, "whole MFMA tiles per wave")?;
                multiple("wn", self.wn, mn, "whole MFMA tiles per wave")?;
                multiple("bm", self.bm, self.wm, "waves split BM into WM-high strips")?;
                multiple("bn", self.bn, self.wn, "waves split BN into WN-wide strips")?;
            }
            Variant::Lds => {
                multiple("bm", self.bm, mn, "whole MFMA tiles per workgroup")?;
                multiple("wm", self.wm, mn, "whole MFMA tiles per wave")?;
                multiple("wn", self.wn, mn, "whole MFMA tiles per wave")?;
                multiple("bm", self.bm, self.wm, "waves split BM into WM-high strips")?;
                multiple("bn", self.bn, self.wn, "waves split BN into WN-wide strips")?;
                multiple(
                    "bk_elems",
                    self.bk_elems,
                    128,
                    "scale rows are staged as whole dwords (4 scales = 128 K)",
                )?;
            }
        }
        let warps = self.warps_wide();
        let threads = warps * u64::from(WAVE_SIZE);
        if threads > u64::from(MAX_WORKGROUP_SIZE) {
            return Err(SpecError::TooManyThreads { warps, threads });
        }
        let chain = self.mfmas_per_stage_wide();
        // The cluster size only shapes the schedule with cluster_drain_sched.
        if self.mfma_cluster == 0
            || (self.cluster_drain_sched && u64::from(self.mfma_cluster) > chain)
        {
            return Err(SpecError::MfmaCluster {
                value: self.mfma_cluster,
                chain,
            });
        }
        let lds = self.lds_bytes();
        if lds > u64::from(LDS_BYTES) {
            let detail = match self.variant {
                Variant::Preb => format!(
                    "{} A slot(s) of {} x {} bytes",
                    self.stages(),
                    self.bm,
                    self.bk_elems / 2
                ),
                Variant::Lds => format!(
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
        // A workgroup's waves are resident on one CU together, spread over its SIMDs, so
        // each SIMD's share of them divides the register file.
        let per_simd = warps.div_ceil(u64::from(SIMDS_PER_CU));
        if estimate * per_simd > u64::from(MAX_UNIFIED_VGPRS) {
            return Err(SpecError::RegisterBudget {
                estimate: estimate * per_simd,
                detail: format!("{per_simd} waves per SIMD x ({detail})"),
            });
        }
        in_range(
            "split_k",
            self.split_k,
            1,
            KernelSpec::MAX_SPLIT_K,
            "K slices run by the grid's z dimension",
        )?;
        preb_only("split_k", self.split_k > 1)?;
        in_range(
            "xcd_group_m",
            self.xcd_group_m,
            0,
            KernelSpec::MAX_XCD_GROUP_M,
            "M tiles per group of the XCD-aware tile order",
        )?;
        preb_only("xcd_group_m", self.xcd_group_m > 0)?;
        if let Some(w) = self.waves_per_eu {
            in_range(
                "waves_per_eu",
                w,
                1,
                MAX_WAVES_PER_SIMD,
                "a gfx950 SIMD holds 1 to 8 waves",
            )?;
        }
        Ok(())
    }

    /// The kernel's symbol name, unique per configuration.
    pub fn kernel_name(&self) -> String {
        let mut s = format!(
            "mxfp4_gemm_{}_bm{}_bn{}_bk{}_wm{}_wn{}_{}_{}",
            self.variant,
            self.bm,
            self.bn,
            self.bk_elems,
            self.warp_m(),
            self.wn,
            match self.mma {
                MfmaShape::M16N16K128 => "m16",
                MfmaShape::M32N32K64 => "m32",
            },
            self.out_dtype
        );
        if self.b_prefetch {
            s.push_str("_bpf");
            if self.b_prefetch_depth > 1 {
                s.push_str(&self.b_prefetch_depth.to_string());
            }
        }
        if self.b_cache_policy != CachePolicy::Always {
            s.push_str(&format!("_b{:?}", self.b_cache_policy).to_lowercase());
        }
        if self.dram_to_lds {
            s.push_str("_d2l");
        }
        if !self.lds_swizzle {
            s.push_str("_nosw");
        }
        if let Some(w) = self.waves_per_eu {
            s.push_str(&format!("_w{w}"));
        }
        if self.cluster_drain_sched {
            s.push_str(&format!("_cds{}", self.mfma_cluster));
        }
        if self.deep_prime {
            s.push_str("_dp");
        }
        if self.split_k > 1 {
            s.push_str(&format!("_sk{}", self.split_k));
        }
        if self.acc_agprs {
            s.push_str("_agpr");
        }
        if self.xcd_group_m > 0 {
            s.push_str(&format!("_xg{}", self.xcd_group_m));
        }
        s
    }

    /// The values that change the generated code: what a variant ignores is set to what it
    /// uses (the cluster size matters only with cluster_drain_sched).
    fn canonical(&self) -> SpecValues {
        let mut v = self.values.clone();
        if !v.cluster_drain_sched {
            v.mfma_cluster = KernelSpec::preb().mfma_cluster;
        }
        v
    }

    /// A stable key for caches: specs that generate the same code, with the same crate version
    /// and LLVM major version, give the same key on every machine and run.
    pub fn cache_key(&self) -> String {
        let canonical = format!(
            "tilegen-kernels {} llvm22 {}",
            env!("CARGO_PKG_VERSION"),
            serde_json::to_string(&self.canonical()).unwrap_or_else(|_| self.kernel_name())
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
        let e = KernelSpec::new().deep_prime(true).validate().unwrap_err();
        assert_eq!(e, SpecError::NeedsPrefetch { flag: "deep_prime" });
        let e = KernelSpec::new()
            .cluster_drain_sched(true)
            .validate()
            .unwrap_err();
        assert_eq!(
            e,
            SpecError::NeedsPrefetch {
                flag: "cluster_drain_sched"
            }
        );
        // B two tiles ahead needs the pipeline, stays within its bound, and costs a third A
        // slot and B register set.
        let e = KernelSpec::new()
            .b_prefetch_depth(2)
            .validate()
            .unwrap_err();
        assert_eq!(
            e,
            SpecError::NeedsPrefetch {
                flag: "b_prefetch_depth"
            }
        );
        let deeper = KernelSpec::new().b_prefetch(true).b_prefetch_depth(3);
        assert!(matches!(
            deeper.validate().unwrap_err(),
            SpecError::OutOfRange {
                name: "b_prefetch_depth",
                ..
            }
        ));
        let two = KernelSpec::new().b_prefetch(true);
        let three = two.clone().b_prefetch_depth(2);
        assert_eq!((two.stages(), three.stages()), (2, 3));
        assert_eq!(three.lds_bytes(), two.lds_bytes() / 2 * 3);
        assert!(three.register_estimate().0 > two.register_estimate().0);
        assert!(three.kernel_name().ends_with("_bpf2"));
        let e = KernelSpec::lds().b_prefetch(true).validate().unwrap_err();
        assert!(matches!(
            e,
            SpecError::WrongVariant {
                flag: "b_prefetch",
                ..
            }
        ));
        let e = KernelSpec::new()
            .b_prefetch(true)
            .cluster_drain_sched(true)
            .mfma_cluster(0)
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
