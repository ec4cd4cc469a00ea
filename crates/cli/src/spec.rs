//! Kernel-spec flags shared by `tilegen gemm` and `tilegen build`.

use clap::{Args, ValueEnum};
use tilegen::kernels::{BCachePolicy, KernelSpec, MmaShape, OutDtype, Variant};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum VariantArg {
    /// A and B staged through LDS (MXFP4MatmulAMD).
    Lds,
    /// B preshuffled into VGPRs (MXFP4MatmulAMD_PreB).
    Preb,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum DtypeArg {
    Bf16,
    F32,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum CacheArg {
    Always,
    Global,
    Streaming,
    Volatile,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum MmaArg {
    #[value(name = "16x16x128")]
    M16,
    #[value(name = "32x32x64")]
    M32,
}

/// Tile configuration; unset values take the variant's defaults.
#[derive(Args, Debug, Clone)]
pub struct SpecArgs {
    /// Kernel family.
    #[arg(long, value_enum, default_value = "preb")]
    pub variant: VariantArg,
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
    /// MFMA shape (lds variant).
    #[arg(long, value_enum)]
    pub mma: Option<MmaArg>,
    /// Depth-2 outer-K pipeline with double B registers (preb).
    #[arg(long)]
    pub b_prefetch: bool,
    /// Cache policy of the B loads (preb).
    #[arg(long, value_enum)]
    pub b_cache_policy: Option<CacheArg>,
    /// Load A global -> LDS directly (`buffer_load ... lds`).
    #[arg(long)]
    pub dram_to_lds: bool,
    /// Per-cluster s_setprio brackets and a partial vmcnt staircase (preb, with --b-prefetch).
    #[arg(long)]
    pub cluster_drain_sched: bool,
    /// MFMAs per cluster.
    #[arg(long)]
    pub mfma_cluster: Option<u32>,
    /// Stage A two tiles ahead (preb, with --b-prefetch).
    #[arg(long)]
    pub deep_prime: bool,
    /// Element type of C.
    #[arg(long, value_enum, default_value = "bf16")]
    pub out_dtype: DtypeArg,
    /// Occupancy target in waves per SIMD (1-8): caps registers, spilling past the cap.
    #[arg(long)]
    pub waves_per_eu: Option<u32>,
}

impl SpecArgs {
    pub fn spec(&self) -> anyhow::Result<KernelSpec> {
        if matches!(self.variant, VariantArg::Preb) && self.wm.is_some() {
            anyhow::bail!(
                "--wm applies to the lds variant only (each preb wave covers all BM rows)"
            );
        }
        let mut s = match self.variant {
            VariantArg::Preb => KernelSpec::new(),
            VariantArg::Lds => KernelSpec::lds(),
        };
        if let Some(v) = self.bm {
            s = s.bm(v);
        }
        if let Some(v) = self.bn {
            s = s.bn(v);
        }
        if let Some(v) = self.bk_elems {
            s = s.bk_elems(v);
        }
        if let Some(v) = self.wm {
            s = s.wm(v);
        }
        if let Some(v) = self.wn {
            s = s.wn(v);
        }
        if let Some(v) = self.mma {
            s = s.mma(match v {
                MmaArg::M16 => MmaShape::M16N16K128,
                MmaArg::M32 => MmaShape::M32N32K64,
            });
        }
        if let Some(v) = self.b_cache_policy {
            s = s.b_cache_policy(match v {
                CacheArg::Always => BCachePolicy::Always,
                CacheArg::Global => BCachePolicy::Global,
                CacheArg::Streaming => BCachePolicy::Streaming,
                CacheArg::Volatile => BCachePolicy::Volatile,
            });
        }
        if let Some(v) = self.mfma_cluster {
            s = s.mfma_cluster(v);
        }
        s = s
            .b_prefetch(self.b_prefetch)
            .dram_to_lds(self.dram_to_lds)
            .cluster_drain_sched(self.cluster_drain_sched)
            .deep_prime(self.deep_prime)
            .waves_per_eu(self.waves_per_eu)
            .out_dtype(match self.out_dtype {
                DtypeArg::Bf16 => OutDtype::Bf16,
                DtypeArg::F32 => OutDtype::F32,
            });
        debug_assert!(matches!(s.variant, Variant::Lds | Variant::Preb));
        Ok(s)
    }
}
