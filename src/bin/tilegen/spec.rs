//! Kernel-spec flags shared by `tilegen gemm` and `tilegen build`.

use clap::Args;
use tilegen::kernels::{CachePolicy, KernelSpec, MfmaShape, OutDtype, Variant};

/// Tile configuration; unset values take the variant's defaults. Only the flags given reach the
/// spec, so one the variant would ignore is refused by the spec's rules.
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// Kernel family: lds (A and B staged through LDS) or preb (B preshuffled into VGPRs).
    #[arg(long, value_enum, default_value_t = Variant::Preb)]
    pub variant: Variant,
    /// Rows of C per workgroup.
    #[arg(long)]
    pub bm: Option<u32>,
    /// Columns of C per workgroup.
    #[arg(long)]
    pub bn: Option<u32>,
    /// K elements per pipeline stage.
    #[arg(long)]
    pub bk_elems: Option<u32>,
    /// Rows per wave (lds variant).
    #[arg(long)]
    pub wm: Option<u32>,
    /// Columns per wave.
    #[arg(long)]
    pub wn: Option<u32>,
    /// MFMA shape.
    #[arg(long, value_enum)]
    pub mma: Option<MfmaShape>,
    /// Depth-2 outer-K pipeline with double B registers (preb).
    #[arg(long)]
    pub b_prefetch: bool,
    /// Cache policy of the B loads (preb).
    #[arg(long, value_enum)]
    pub b_cache_policy: Option<CachePolicy>,
    /// Load A global -> LDS directly (`buffer_load ... lds`).
    #[arg(long)]
    pub dram_to_lds: bool,
    /// Keep the FP4 operand tiles in LDS unswizzled (to measure what swizzling saves).
    #[arg(long)]
    pub no_lds_swizzle: bool,
    /// Per-cluster s_setprio brackets and a partial vmcnt staircase (preb, with --b-prefetch).
    #[arg(long)]
    pub cluster_drain_sched: bool,
    /// MFMAs per cluster (with --cluster-drain-sched).
    #[arg(long)]
    pub mfma_cluster: Option<u32>,
    /// Stage A two tiles ahead (preb, with --b-prefetch).
    #[arg(long)]
    pub deep_prime: bool,
    /// K tiles of B in flight ahead of the one multiplied: 1 or 2 (preb, with --b-prefetch;
    /// 2 costs a third B register set and A slot).
    #[arg(long)]
    pub b_prefetch_depth: Option<u32>,
    /// Element type of C.
    #[arg(long, value_enum, default_value_t = OutDtype::Bf16)]
    pub out_dtype: OutDtype,
    /// Occupancy target in waves per SIMD (1-8): caps registers, spilling past the cap.
    #[arg(long)]
    pub waves_per_eu: Option<u32>,
    /// Split K into this many slices run by the grid's z dimension, each adding into C with
    /// atomics (preb; K must be a multiple of split-k x bk-elems; bf16 output rounds per add).
    #[arg(long)]
    pub split_k: Option<u32>,
    /// Let the MFMA accumulators live in AGPRs (amdgpu-agpr-alloc; LLVM otherwise keeps them
    /// in VGPRs).
    #[arg(long)]
    pub acc_agprs: bool,
    /// XCD-aware tile order in groups of this many M tiles (preb; 0 = the grid's order): the
    /// workgroups one XCD runs share A and B tiles in its L2.
    #[arg(long)]
    pub xcd_group_m: Option<u32>,
}

impl SpecArgs {
    pub fn spec(&self) -> KernelSpec {
        let mut s = match self.variant {
            Variant::Preb => KernelSpec::preb(),
            Variant::Lds => KernelSpec::lds(),
        };
        let set = |s: KernelSpec, v: Option<u32>, f: fn(KernelSpec, u32) -> KernelSpec| match v {
            Some(v) => f(s, v),
            None => s,
        };
        s = set(s, self.bm, KernelSpec::bm);
        s = set(s, self.bn, KernelSpec::bn);
        s = set(s, self.bk_elems, KernelSpec::bk_elems);
        s = set(s, self.wm, KernelSpec::wm);
        s = set(s, self.wn, KernelSpec::wn);
        s = set(s, self.mfma_cluster, KernelSpec::mfma_cluster);
        s = set(s, self.split_k, KernelSpec::split_k);
        s = set(s, self.xcd_group_m, KernelSpec::xcd_group_m);
        s = set(s, self.b_prefetch_depth, KernelSpec::b_prefetch_depth);
        if let Some(v) = self.mma {
            s = s.mma(v);
        }
        if let Some(v) = self.b_cache_policy {
            s = s.b_cache_policy(v);
        }
        for (given, f) in [
            (
                self.b_prefetch,
                KernelSpec::b_prefetch as fn(KernelSpec, bool) -> KernelSpec,
            ),
            (self.dram_to_lds, KernelSpec::dram_to_lds),
            (self.cluster_drain_sched, KernelSpec::cluster_drain_sched),
            (self.deep_prime, KernelSpec::deep_prime),
            (self.acc_agprs, KernelSpec::acc_agprs),
        ] {
            if given {
                s = f(s, true);
            }
        }
        if self.no_lds_swizzle {
            s = s.lds_swizzle(false);
        }
        s.waves_per_eu(self.waves_per_eu).out_dtype(self.out_dtype)
    }
}
