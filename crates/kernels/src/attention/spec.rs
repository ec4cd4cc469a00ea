//! [`AttentionSpec`]: what to build, validated before LLVM sees it; [`AttentionKernels`]: what
//! comes back.

use serde::Serialize;
use tilegen_dsl::target::{COMPUTE_UNITS, LDS_BYTES};
use tilegen_dsl::{CompileOptions, KernelAttrs};

use crate::compiled::{BuiltKernel, CompileError, compile_kernel};
use crate::paged::{PagedError, PagedTile};

use super::{BLOCK_N, kernel, reduce};

/// Query heads per KV head the kernel supports (one 16-column MFMA tile holds the group).
pub const GROUP_SIZES: [u32; 4] = [1, 4, 8, 16];
/// Head dimensions the kernel supports.
pub const HEAD_DIMS: [u32; 2] = [64, 128];
/// Page sizes the kernel supports (0: a contiguous cache).
pub const PAGE_SIZES: [u32; 4] = [0, 16, 32, 64];
/// The largest split of the keys across workgroups.
pub const MAX_SPLIT_KV: u32 = 64;
/// The most waves per workgroup.
pub const MAX_WAVES: u32 = 4;
/// The fewest key tiles [`AttentionSpec::fit_to`] gives a partial: each partial pays a
/// prologue (Q, the first loads) and an epilogue (its result), and keeps two loads in flight
/// only from its second tile on.
pub const MIN_TILES_PER_PARTIAL: u32 = 4;

/// A rule an [`AttentionSpec`] breaks.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AttentionSpecError {
    /// Heads must be positive and the query heads a multiple of the KV heads.
    #[error(
        "q_heads = {q_heads}, kv_heads = {kv_heads}: both positive, q_heads a multiple of kv_heads"
    )]
    Heads {
        /// Query heads.
        q_heads: u32,
        /// KV heads.
        kv_heads: u32,
    },
    /// The group of query heads per KV head must fit one 16-column MFMA tile.
    #[error("q_heads / kv_heads = {group}: the kernel supports groups of {GROUP_SIZES:?}")]
    Group {
        /// Query heads per KV head.
        group: u32,
    },
    /// The head dimension.
    #[error("head_dim = {head_dim}: the kernel supports {HEAD_DIMS:?}")]
    HeadDim {
        /// The head dimension.
        head_dim: u32,
    },
    /// The page size.
    #[error("page_size = {page_size}: the kernel supports {PAGE_SIZES:?} (0: contiguous)")]
    PageSize {
        /// The page size.
        page_size: u32,
    },
    /// The split of the keys.
    #[error("split_kv = {split_kv}: must be 1 to {MAX_SPLIT_KV}")]
    SplitKv {
        /// The split.
        split_kv: u32,
    },
    /// Waves per workgroup.
    #[error("waves = {waves}: must be 1 to {MAX_WAVES}")]
    Waves {
        /// Waves per workgroup.
        waves: u32,
    },
    /// The softmax scale.
    #[error("sm_scale = {sm_scale}: must be finite and positive")]
    SmScale {
        /// The scale.
        sm_scale: f32,
    },
    /// The LDS the waves' K and V tiles need.
    #[error(
        "{waves} waves x 2 tiles x {BLOCK_N} x {head_dim} bytes = {bytes} bytes of LDS: the limit is {LDS_BYTES}"
    )]
    Lds {
        /// Waves per workgroup.
        waves: u32,
        /// The head dimension.
        head_dim: u32,
        /// Bytes needed.
        bytes: u64,
    },
    /// The tile does not nest with the pages (cannot happen for the supported sizes; kept so
    /// the paged geometry's own rule is reported, not unwrapped).
    #[error(transparent)]
    Paged(#[from] PagedError),
}

/// The values of an [`AttentionSpec`], read-only through [`AttentionSpec::values`] (the
/// setters are the one way to change them, and [`AttentionSpec::validate`] judges them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AttentionValues {
    /// Query heads.
    pub q_heads: u32,
    /// KV heads.
    pub kv_heads: u32,
    /// Elements per head.
    pub head_dim: u32,
    /// Rows per page (0: contiguous cache).
    pub page_size: u32,
    /// Workgroups the keys of one (sequence, KV head) are split over.
    pub split_kv: u32,
    /// Waves per workgroup (each an independent partial).
    pub waves: u32,
    /// Softmax scale.
    pub sm_scale: f32,
    /// With the keys split over workgroups: the last wave to finish a (sequence, KV head)
    /// merges its partials in the main kernel instead of a reduce kernel.
    pub fused_reduce: bool,
}

/// A paged FP8 decode attention configuration. Built with [`AttentionSpec::new`] and setters;
/// [`AttentionSpec::build`] validates it and compiles both kernels.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(transparent)]
pub struct AttentionSpec {
    v: AttentionValues,
}

impl AttentionSpec {
    /// `q_heads` query heads over `kv_heads` KV heads of `head_dim`, pages of `page_size` rows
    /// (0: contiguous); one split, one wave, `sm_scale = 1 / sqrt(head_dim)`.
    pub fn new(q_heads: u32, kv_heads: u32, head_dim: u32, page_size: u32) -> Self {
        AttentionSpec {
            v: AttentionValues {
                q_heads,
                kv_heads,
                head_dim,
                page_size,
                split_kv: 1,
                waves: 1,
                sm_scale: 1.0 / (head_dim.max(1) as f32).sqrt(),
                fused_reduce: false,
            },
        }
    }

    /// The values, read-only.
    pub fn values(&self) -> &AttentionValues {
        &self.v
    }

    /// Splits the keys over `split_kv` workgroups.
    pub fn split_kv(self, split_kv: u32) -> Self {
        let mut s = self;
        s.v.split_kv = split_kv;
        s
    }

    /// `waves` waves per workgroup.
    pub fn waves(self, waves: u32) -> Self {
        let mut s = self;
        s.v.waves = waves;
        s
    }

    /// Whether, with the keys split over workgroups, the main kernel merges the partials:
    /// each wave counts its partial into a per-(sequence, KV head) counter (an agent-scope
    /// atomic after a release fence), and the wave that counts the last merges the group's
    /// partials and resets the counter, so no reduce kernel is launched (one launch less)
    /// and the counters (zeroed once, see [`AttentionKernels::buffer_bytes`]) are zero again
    /// after every launch. Off by default: on the MI355X timing model (every workgroup
    /// simulated) it saves a little where one (sequence, KV head) pair splits (batch 1, 8
    /// query heads on one KV head, 8,192 keys: 23.3 to 23.0 us) but not at batch 8 of 64/8
    /// heads at 8,192 keys (36.4 with the reduce kernel, 36.7 fused), where the merging
    /// waves' tail costs what the launch saved.
    /// The sampled timing method does not see the merge (which wave is last is decided by
    /// the other workgroups' atomics).
    pub fn fused_reduce(self, on: bool) -> Self {
        let mut s = self;
        s.v.fused_reduce = on;
        s
    }

    /// The softmax scale.
    pub fn sm_scale(self, sm_scale: f32) -> Self {
        let mut s = self;
        s.v.sm_scale = sm_scale;
        s
    }

    /// Chooses `waves` and `split_kv` for `batch` sequences of at most `max_context` keys on
    /// the [`COMPUTE_UNITS`] compute units: the most waves per workgroup that still leave LDS
    /// for two workgroups per CU, then enough partials per (sequence, KV head) that the grid's
    /// waves fill every CU's resident waves once, but no fewer than [`MIN_TILES_PER_PARTIAL`]
    /// tiles each.
    pub fn fit_to(self, batch: u32, max_context: u32) -> Self {
        let lds = |waves: u32| self.waves(waves).lds_bytes().max(1);
        let waves = (1..=MAX_WAVES)
            .rev()
            .find(|&w| 2 * lds(w) <= u64::from(LDS_BYTES))
            .unwrap_or(1);
        // Resident waves per CU as LDS allows (allocation granules ignored).
        let per_cu = waves as u64 * (u64::from(LDS_BYTES) / lds(waves)).max(1);
        let slots = u64::from(COMPUTE_UNITS) * per_cu;
        let pairs = (u64::from(batch) * u64::from(self.v.kv_heads)).max(1);
        let tiles = u64::from(max_context).div_ceil(BLOCK_N as u64).max(1);
        let most = (tiles / u64::from(MIN_TILES_PER_PARTIAL)).max(1);
        let partials = slots.div_ceil(pairs).min(most);
        let waves = waves.min(partials as u32);
        let split = partials
            .div_ceil(u64::from(waves))
            .min(u64::from(MAX_SPLIT_KV)) as u32;
        self.waves(waves).split_kv(split)
    }

    /// Query heads per KV head.
    pub fn group(&self) -> u32 {
        self.v.q_heads / self.v.kv_heads.max(1)
    }

    /// Partials per (sequence, KV head): `split_kv * waves`.
    pub fn partials(&self) -> u32 {
        self.v.split_kv * self.v.waves
    }

    /// Whether the main kernel writes partials for a merge across workgroups: with more than
    /// one workgroup per (sequence, KV head). The waves of one workgroup merge theirs in LDS.
    pub fn writes_partials(&self) -> bool {
        self.v.split_kv > 1
    }

    /// Whether a reduce kernel merges the partials: with partials, unless the main kernel
    /// merges them itself ([`AttentionSpec::fused_reduce`]).
    pub fn needs_reduce(&self) -> bool {
        self.writes_partials() && !self.v.fused_reduce
    }

    /// Whether the main kernel merges partials across workgroups itself.
    pub fn merges_in_main(&self) -> bool {
        self.writes_partials() && self.v.fused_reduce
    }

    /// LDS bytes: a K and a V tile per wave.
    pub fn lds_bytes(&self) -> u64 {
        u64::from(self.v.waves) * 2 * BLOCK_N as u64 * u64::from(self.v.head_dim)
    }

    /// Work-items per workgroup.
    pub fn threads(&self) -> u32 {
        self.v.waves * 64
    }

    /// The paged geometry of one tile.
    pub fn tile(&self) -> Result<PagedTile, AttentionSpecError> {
        Ok(PagedTile::new(BLOCK_N as u32, self.v.page_size)?)
    }

    /// Checks every rule; the first broken one is the error.
    pub fn validate(&self) -> Result<(), AttentionSpecError> {
        let (q, kv) = (self.v.q_heads, self.v.kv_heads);
        if q == 0 || kv == 0 || !q.is_multiple_of(kv) {
            return Err(AttentionSpecError::Heads {
                q_heads: q,
                kv_heads: kv,
            });
        }
        if !GROUP_SIZES.contains(&self.group()) {
            return Err(AttentionSpecError::Group {
                group: self.group(),
            });
        }
        if !HEAD_DIMS.contains(&self.v.head_dim) {
            return Err(AttentionSpecError::HeadDim {
                head_dim: self.v.head_dim,
            });
        }
        if !PAGE_SIZES.contains(&self.v.page_size) {
            return Err(AttentionSpecError::PageSize {
                page_size: self.v.page_size,
            });
        }
        if !(1..=MAX_SPLIT_KV).contains(&self.v.split_kv) {
            return Err(AttentionSpecError::SplitKv {
                split_kv: self.v.split_kv,
            });
        }
        if !(1..=MAX_WAVES).contains(&self.v.waves) {
            return Err(AttentionSpecError::Waves {
                waves: self.v.waves,
            });
        }
        if !(self.v.sm_scale.is_finite() && self.v.sm_scale > 0.0) {
            return Err(AttentionSpecError::SmScale {
                sm_scale: self.v.sm_scale,
            });
        }
        if self.lds_bytes() > u64::from(LDS_BYTES) {
            return Err(AttentionSpecError::Lds {
                waves: self.v.waves,
                head_dim: self.v.head_dim,
                bytes: self.lds_bytes(),
            });
        }
        self.tile()?;
        Ok(())
    }

    /// The main kernel's symbol.
    pub fn kernel_name(&self) -> String {
        let page = match self.v.page_size {
            0 => "contig".to_string(),
            p => format!("p{p}"),
        };
        format!(
            "paged_attn_fp8_q{}_kv{}_d{}_{page}_s{}_w{}{}",
            self.v.q_heads,
            self.v.kv_heads,
            self.v.head_dim,
            self.v.split_kv,
            self.v.waves,
            if self.merges_in_main() { "_fr" } else { "" }
        )
    }

    /// The reduce kernel's symbol.
    pub fn reduce_name(&self) -> String {
        format!("{}_reduce", self.kernel_name())
    }

    /// Validates and compiles the main kernel and, with the keys split over workgroups, the
    /// reduce kernel, in process.
    pub fn build(&self) -> Result<AttentionKernels, AttentionBuildError> {
        self.build_with(CompileOptions {
            emit_asm: true,
            emit_ir: false,
            code_object_v5: false,
        })
    }

    /// [`AttentionSpec::build`] with explicit compile outputs.
    pub fn build_with(
        &self,
        options: CompileOptions,
    ) -> Result<AttentionKernels, AttentionBuildError> {
        self.validate()?;
        let attrs = |workgroup_size| KernelAttrs {
            workgroup_size,
            waves_per_eu: None,
        };
        let main = compile_kernel(
            &self.kernel_name(),
            &kernel::signature().0,
            attrs(self.threads()),
            options,
            |k| kernel::build(k, self),
        )?;
        let reduce = if self.needs_reduce() {
            Some(compile_kernel(
                &self.reduce_name(),
                &reduce::signature().0,
                attrs(64),
                options,
                |k| reduce::build(k, self),
            )?)
        } else {
            None
        };
        Ok(AttentionKernels {
            spec: *self,
            main,
            reduce,
        })
    }
}

/// Why [`AttentionSpec::build`] gave no kernels.
#[derive(Debug, thiserror::Error)]
pub enum AttentionBuildError {
    /// The spec breaks a rule; nothing was generated.
    #[error(transparent)]
    Spec(#[from] AttentionSpecError),
    /// Compiling the validated spec failed (a generator bug, reported with its cause).
    #[error(transparent)]
    Compile(#[from] CompileError),
}

/// The compiled kernels of a spec: the main kernel and, with the keys split over workgroups,
/// the reduce kernel.
#[derive(Debug, Clone)]
pub struct AttentionKernels {
    pub(crate) spec: AttentionSpec,
    main: BuiltKernel,
    reduce: Option<BuiltKernel>,
}

impl AttentionKernels {
    /// The spec.
    pub fn spec(&self) -> &AttentionSpec {
        &self.spec
    }

    /// The main kernel.
    pub fn main(&self) -> &BuiltKernel {
        &self.main
    }

    /// The reduce kernel (with `split_kv > 1`).
    pub fn reduce(&self) -> Option<&BuiltKernel> {
        self.reduce.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_rule() {
        let ok = AttentionSpec::new(64, 8, 128, 16);
        assert_eq!(ok.validate(), Ok(()));
        let cases = [
            (AttentionSpec::new(6, 4, 128, 16), "q_heads a multiple"),
            (AttentionSpec::new(64, 32, 128, 16), "groups of"),
            (AttentionSpec::new(64, 2, 128, 16), "groups of"),
            (AttentionSpec::new(8, 8, 96, 16), "head_dim = 96"),
            (AttentionSpec::new(8, 8, 128, 8), "page_size = 8"),
            (AttentionSpec::new(8, 8, 128, 128), "page_size = 128"),
            (ok.split_kv(0), "split_kv = 0"),
            (ok.split_kv(65), "split_kv = 65"),
            (ok.waves(5), "waves = 5"),
            (ok.sm_scale(f32::NAN), "sm_scale"),
            (AttentionSpec::new(0, 8, 128, 16), "both positive"),
        ];
        for (spec, rule) in cases {
            let e = spec.validate().unwrap_err().to_string();
            assert!(e.contains(rule), "{spec:?}: {e}");
            assert!(matches!(spec.build(), Err(AttentionBuildError::Spec(_))));
        }
        assert_eq!(ok.waves(4).lds_bytes(), 128 * 1024);
    }

    #[test]
    fn fit_fills_the_cus_without_starving_partials() {
        let fit = |d, batch, context| {
            let s = AttentionSpec::new(64, 8, d, 16).fit_to(batch, context);
            assert_eq!(s.validate(), Ok(()), "{s:?}");
            (s.values().split_kv, s.values().waves)
        };
        // Batch 64 of 8192 keys: 512 (sequence, KV head) pairs fill 256 CUs with 8 (d = 64) or
        // 4 (d = 128) resident waves each.
        assert_eq!(fit(64, 64, 8192), (1, 4));
        assert_eq!(fit(128, 64, 8192), (1, 2));
        // One sequence: split as far as its tiles allow.
        assert_eq!(fit(128, 1, 4096), (4, 2));
        assert_eq!(fit(64, 1, 1 << 20), (MAX_SPLIT_KV, 4));
        // Short contexts are not split.
        assert_eq!(fit(64, 1, 17), (1, 1));
        assert_eq!(fit(128, 8, 255), (1, 1));
        assert_eq!(fit(64, 1, 0), (1, 1));
    }
}
