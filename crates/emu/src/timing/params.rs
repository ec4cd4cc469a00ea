//! The model's parameters: one TOML table ([`Params::DEFAULT_TOML`], embedded from
//! `params.toml`) whose every entry carries its value and its source.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// One parameter: a number and where it comes from (LLVM's SISchedule.td, AMD's ISA guide, a
/// published microbenchmark, an estimate, or "calibrated on ...").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Param {
    /// The value (integers are accepted and stored as floats).
    pub value: f64,
    /// Where the value comes from.
    pub source: String,
}

impl Param {
    /// The value.
    pub fn get(&self) -> f64 {
        self.value
    }

    /// The value as a non-negative whole number (rounded).
    pub fn count(&self) -> u64 {
        self.value.max(0.0).round() as u64
    }
}

/// Clocks and launch costs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClockParams {
    /// Peak engine clock (GHz), used for kernels without matrix instructions.
    pub peak_ghz: Param,
    /// Engine clock sustained under matrix-core load (GHz), used for kernels with MFMAs.
    pub mfma_sustained_ghz: Param,
    /// Time from a launch call to the first wave and after the last (µs).
    pub launch_overhead_us: Param,
    /// Cycles from a free slot to a workgroup's first instruction.
    pub workgroup_dispatch_cycles: Param,
}

/// The machine's size and occupancy limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuParams {
    /// Accelerator complex dies.
    pub xcds: Param,
    /// Compute units per XCD.
    pub cus_per_xcd: Param,
    /// SIMDs per CU.
    pub simds_per_cu: Param,
    /// Wave slots per SIMD.
    pub max_waves_per_simd: Param,
    /// Unified VGPR+AGPR registers per lane and SIMD.
    pub vgprs_per_lane: Param,
    /// VGPR allocation granule.
    pub vgpr_granule: Param,
    /// SGPRs per SIMD.
    pub sgprs_per_simd: Param,
    /// SGPR allocation granule.
    pub sgpr_granule: Param,
    /// SGPRs a wave holds beyond the descriptor's count (VCC, flat scratch, XNACK).
    pub sgpr_extra: Param,
    /// LDS bytes per CU.
    pub lds_bytes_per_cu: Param,
    /// LDS allocation granule in bytes.
    pub lds_granule_bytes: Param,
    /// Resident workgroups per CU.
    pub max_workgroups_per_cu: Param,
    /// Resident workgroups with barriers (more than one wave) per CU.
    pub max_barrier_workgroups_per_cu: Param,
}

/// The sequencer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueParams {
    /// Clocks between two issue slots of one SIMD (and the length of one wait state).
    pub slot_cycles: Param,
    /// Clocks a wave waits after a taken branch.
    pub branch_taken_cycles: Param,
    /// Clocks a wave waits after a branch that falls through.
    pub branch_not_taken_cycles: Param,
    /// Clocks from the last wave's arrival at a barrier to the release.
    pub barrier_latency_cycles: Param,
    /// Clocks per unit of `s_sleep`.
    pub sleep_cycles_per_unit: Param,
}

/// Vector ALU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ValuParams {
    /// Clocks a wave64 VALU instruction occupies the SIMD's VALU.
    pub issue_cycles: Param,
    /// Clocks of a transcendental (quarter rate).
    pub transcendental_cycles: Param,
    /// Clocks of an f64 instruction.
    pub f64_cycles: Param,
    /// Issue-to-issue clocks of a dependent VALU chain.
    pub dependent_latency_cycles: Param,
    /// Wait states between a VALU write of a VGPR and an MFMA reading it.
    pub write_then_mfma_read_wait_states: Param,
    /// Wait states between a VALU write of EXEC and an MFMA.
    pub exec_write_then_mfma_wait_states: Param,
}

/// One rule of the MFMA pass table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MfmaPassRule {
    /// Mnemonic pattern; `*` matches any text.
    pub pattern: String,
    /// Passes (4 clocks each).
    pub passes: u32,
    /// Passes when A or B is FP8/BF8 (f8f6f4 formats 0 and 1), if different.
    #[serde(default)]
    pub fp8_passes: Option<u32>,
    /// Where the numbers come from.
    pub source: String,
}

/// Matrix core.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MfmaParams {
    /// Wait states beyond the passes before SrcA/B of an MFMA or a VALU may read an MFMA
    /// result.
    pub result_extra_wait_states: Param,
    /// Wait states before a back-to-back MFMA may read the previous result as SrcC.
    pub srcc_same_acc_wait_states: Param,
    /// Passes by mnemonic, first match wins.
    pub passes: Vec<MfmaPassRule>,
}

/// Scalar unit.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SaluParams {
    /// Issue-to-issue clocks of dependent SALU instructions.
    pub latency_cycles: Param,
    /// Clocks of a scalar memory load (scalar cache hit).
    pub smem_latency_cycles: Param,
}

/// Local data share.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LdsParams {
    /// Clocks from the end of an access's passes to its data.
    pub latency_cycles: Param,
    /// Read bytes per clock of one LDS port (two SIMDs share one).
    pub port_bytes_per_cycle: Param,
    /// Bytes of one conflict-free pass.
    pub pass_bytes: Param,
    /// Write bytes per clock of one port.
    pub write_bytes_per_cycle: Param,
}

/// Vector memory and the cache hierarchy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmemParams {
    /// Bytes per clock the CU's texture addresser and L1 move.
    pub issue_bytes_per_cycle: Param,
    /// Least clocks one vector-memory instruction occupies the addresser.
    pub min_issue_cycles: Param,
    /// Largest vmcnt.
    pub max_vmcnt: Param,
    /// Largest lgkmcnt.
    pub max_lgkmcnt: Param,
    /// L1 bytes per CU.
    pub l1_bytes: Param,
    /// Cache line bytes (L1, L2 and the MALL model).
    pub l1_line_bytes: Param,
    /// L1 sets.
    pub l1_sets: Param,
    /// L1 hit latency (clocks).
    pub l1_hit_latency_cycles: Param,
    /// L2 bytes per XCD.
    pub l2_bytes: Param,
    /// L2 associativity.
    pub l2_ways: Param,
    /// L2 channels per XCD.
    pub l2_channels: Param,
    /// Bytes per clock of one L2 channel.
    pub l2_channel_bytes_per_cycle: Param,
    /// L2 hit latency (clocks).
    pub l2_hit_latency_cycles: Param,
    /// MALL (Infinity Cache) bytes.
    pub mall_bytes: Param,
    /// MALL bandwidth (GB/s, whole GPU).
    pub mall_gbs: Param,
    /// Latency a MALL hit adds beyond the L2 (ns).
    pub mall_latency_ns: Param,
    /// HBM bandwidth (GB/s, whole GPU).
    pub hbm_gbs: Param,
    /// Latency an HBM access adds beyond the MALL, unloaded (ns).
    pub hbm_latency_ns: Param,
    /// Latency HBM adds on top at full utilization (ns; scaled by the recent utilization).
    pub hbm_loaded_latency_ns: Param,
    /// Window of the utilization average behind the loaded latency (ns).
    pub hbm_load_window_ns: Param,
    /// Clocks from a store's L2 arrival to its acknowledgement (vmcnt decrement).
    pub store_ack_latency_cycles: Param,
}

/// Every parameter of the timing model.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Params {
    /// Clocks and launch costs.
    pub clock: ClockParams,
    /// Machine size and occupancy limits.
    pub gpu: GpuParams,
    /// Sequencer.
    pub issue: IssueParams,
    /// Vector ALU.
    pub valu: ValuParams,
    /// Matrix core.
    pub mfma: MfmaParams,
    /// Scalar unit.
    pub salu: SaluParams,
    /// LDS.
    pub lds: LdsParams,
    /// Vector memory.
    pub vmem: VmemParams,
}

/// Why parameters could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ParamsError {
    /// A TOML text did not parse or did not fit the parameter tables.
    #[error("timing parameters: {0}")]
    Toml(#[from] toml::de::Error),
    /// A parameter file could not be read.
    #[error("reading timing parameters from {path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A value is out of its range.
    #[error("timing parameter {name} = {value} is out of range ({why})")]
    Invalid {
        /// Dotted name of the entry.
        name: String,
        /// Its value.
        value: f64,
        /// What is required.
        why: &'static str,
    },
}

impl Default for Params {
    fn default() -> Self {
        Params::mi355x()
    }
}

impl Params {
    /// The default table (MI355X), as embedded.
    pub const DEFAULT_TOML: &'static str = include_str!("params.toml");

    /// The default parameters of an MI355X.
    pub fn mi355x() -> Params {
        // The embedded table is checked by a unit test; a broken build of it is a bug.
        Self::from_toml_str("").expect("the embedded params.toml is valid")
    }

    /// The defaults overridden by a TOML text: tables merge entry by entry, an entry
    /// (`{ value, source }`) or an array (`[[mfma.passes]]`) replaces the default whole, so
    /// every value keeps a source. Unknown names are errors.
    pub fn from_toml_str(overrides: &str) -> Result<Params, ParamsError> {
        let mut base: toml::Table = toml::from_str(Self::DEFAULT_TOML)?;
        let over: toml::Table = toml::from_str(overrides)?;
        merge(&mut base, over);
        let p: Params = toml::Value::Table(base).try_into()?;
        p.validate()?;
        Ok(p)
    }

    /// The defaults overridden by the TOML file at `path` (see [`Params::from_toml_str`]).
    pub fn from_file(path: &Path) -> Result<Params, ParamsError> {
        let text = std::fs::read_to_string(path).map_err(|source| ParamsError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_toml_str(&text)
    }

    /// The parameters as TOML (the format [`Params::from_toml_str`] reads).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    fn validate(&self) -> Result<(), ParamsError> {
        let positive: [(&str, &Param); 22] = [
            ("clock.peak_ghz", &self.clock.peak_ghz),
            ("clock.mfma_sustained_ghz", &self.clock.mfma_sustained_ghz),
            ("gpu.xcds", &self.gpu.xcds),
            ("gpu.cus_per_xcd", &self.gpu.cus_per_xcd),
            ("gpu.simds_per_cu", &self.gpu.simds_per_cu),
            ("gpu.max_waves_per_simd", &self.gpu.max_waves_per_simd),
            ("gpu.vgprs_per_lane", &self.gpu.vgprs_per_lane),
            ("gpu.sgprs_per_simd", &self.gpu.sgprs_per_simd),
            ("gpu.lds_bytes_per_cu", &self.gpu.lds_bytes_per_cu),
            ("gpu.lds_granule_bytes", &self.gpu.lds_granule_bytes),
            ("gpu.max_workgroups_per_cu", &self.gpu.max_workgroups_per_cu),
            ("issue.slot_cycles", &self.issue.slot_cycles),
            ("lds.port_bytes_per_cycle", &self.lds.port_bytes_per_cycle),
            ("lds.pass_bytes", &self.lds.pass_bytes),
            ("lds.write_bytes_per_cycle", &self.lds.write_bytes_per_cycle),
            (
                "vmem.issue_bytes_per_cycle",
                &self.vmem.issue_bytes_per_cycle,
            ),
            ("vmem.l1_line_bytes", &self.vmem.l1_line_bytes),
            ("vmem.l1_sets", &self.vmem.l1_sets),
            ("vmem.l2_channels", &self.vmem.l2_channels),
            (
                "vmem.l2_channel_bytes_per_cycle",
                &self.vmem.l2_channel_bytes_per_cycle,
            ),
            ("vmem.mall_gbs", &self.vmem.mall_gbs),
            ("vmem.hbm_gbs", &self.vmem.hbm_gbs),
        ];
        for (name, p) in positive {
            if !(p.value.is_finite() && p.value > 0.0) {
                return Err(ParamsError::Invalid {
                    name: name.to_string(),
                    value: p.value,
                    why: "must be a positive number",
                });
            }
        }
        let line = self.vmem.l1_line_bytes.count();
        if !line.is_power_of_two() {
            return Err(ParamsError::Invalid {
                name: "vmem.l1_line_bytes".into(),
                value: line as f64,
                why: "must be a power of two",
            });
        }
        for (name, p) in [
            ("clock.launch_overhead_us", &self.clock.launch_overhead_us),
            (
                "clock.workgroup_dispatch_cycles",
                &self.clock.workgroup_dispatch_cycles,
            ),
            (
                "valu.dependent_latency_cycles",
                &self.valu.dependent_latency_cycles,
            ),
            ("lds.latency_cycles", &self.lds.latency_cycles),
            (
                "vmem.l1_hit_latency_cycles",
                &self.vmem.l1_hit_latency_cycles,
            ),
            ("vmem.hbm_latency_ns", &self.vmem.hbm_latency_ns),
            (
                "vmem.hbm_loaded_latency_ns",
                &self.vmem.hbm_loaded_latency_ns,
            ),
            ("vmem.hbm_load_window_ns", &self.vmem.hbm_load_window_ns),
        ] {
            if !(p.value.is_finite() && p.value >= 0.0) {
                return Err(ParamsError::Invalid {
                    name: name.to_string(),
                    value: p.value,
                    why: "must be a non-negative number",
                });
            }
        }
        Ok(())
    }

    /// Passes of the matrix instruction `mnemonic` with f8f6f4 formats `cbsz` (A) and `blgp`
    /// (B); `None` when no rule matches.
    pub fn mfma_passes(&self, mnemonic: &str, cbsz: u8, blgp: u8) -> Option<u32> {
        let rule = self
            .mfma
            .passes
            .iter()
            .find(|r| glob(&r.pattern, mnemonic))?;
        let fp8 = cbsz <= 1 || blgp <= 1;
        Some(match rule.fp8_passes {
            Some(p) if fp8 => p,
            _ => rule.passes,
        })
    }
}

/// Merges `over` into `base` (see [`Params::from_toml_str`]).
fn merge(base: &mut toml::Table, over: toml::Table) {
    for (k, v) in over {
        match (base.get_mut(&k), v) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) if !o.contains_key("value") => {
                merge(b, o)
            }
            (_, v) => {
                base.insert(k, v);
            }
        }
    }
}

/// `*`-wildcard match of the whole `text`.
fn glob(pattern: &str, text: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == text;
    }
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !text.starts_with(first) || text.len() < first.len() + last.len() || !text.ends_with(last) {
        return false;
    }
    let mut rest = &text[first.len()..text.len() - last.len()];
    for mid in &parts[1..parts.len() - 1] {
        match rest.find(mid) {
            Some(i) => rest = &rest[i + mid.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_table_parses_and_every_entry_has_a_source() {
        let p = Params::mi355x();
        assert_eq!(p.gpu.xcds.count(), 8);
        let text = p.to_toml_string();
        let back = Params::from_toml_str(&text).unwrap();
        assert_eq!(back, p);
        for r in &p.mfma.passes {
            assert!(!r.source.is_empty(), "{}", r.pattern);
        }
        // Every `value` line of the embedded table has a non-empty source next to it.
        for line in Params::DEFAULT_TOML
            .lines()
            .filter(|l| l.contains("value ="))
        {
            assert!(
                line.contains("source = \"") && !line.contains("source = \"\""),
                "{line}"
            );
        }
    }

    #[test]
    fn overrides_merge_and_keep_sources() {
        let p = Params::from_toml_str(
            "[clock]\nmfma_sustained_ghz = { value = 2.0, source = \"calibrated on test\" }\n",
        )
        .unwrap();
        assert_eq!(p.clock.mfma_sustained_ghz.value, 2.0);
        assert_eq!(p.clock.peak_ghz, Params::mi355x().clock.peak_ghz);
        // An entry without a source, an unknown name and a bad value are refused.
        assert!(Params::from_toml_str("[clock]\npeak_ghz = { value = 2.0 }\n").is_err());
        assert!(Params::from_toml_str("[clock]\nturbo = { value = 2.0, source = \"x\" }").is_err());
        assert!(matches!(
            Params::from_toml_str("[clock]\npeak_ghz = { value = 0, source = \"x\" }"),
            Err(ParamsError::Invalid { .. })
        ));
    }

    #[test]
    fn mfma_pass_table_follows_sischedule() {
        let p = Params::mi355x();
        let f = |m: &str, a, b| p.mfma_passes(m, a, b);
        assert_eq!(f("v_mfma_scale_f32_16x16x128_f8f6f4", 4, 4), Some(4));
        assert_eq!(f("v_mfma_scale_f32_16x16x128_f8f6f4", 0, 4), Some(8));
        assert_eq!(f("v_mfma_scale_f32_32x32x64_f8f6f4", 4, 2), Some(8));
        assert_eq!(f("v_mfma_f32_32x32x64_f8f6f4", 4, 1), Some(16));
        assert_eq!(f("v_mfma_f32_16x16x32_bf16", 0, 0), Some(4));
        assert_eq!(f("v_mfma_f32_32x32x16_bf16", 0, 0), Some(8));
        assert_eq!(f("v_mfma_f32_32x32x8_f16", 0, 0), Some(8));
        assert_eq!(f("v_mfma_f32_32x32x2_f32", 0, 0), Some(16));
        assert_eq!(f("v_mfma_f32_16x16x4_f32", 0, 0), Some(8));
        assert_eq!(f("v_mfma_f32_4x4x4_16b_f16", 0, 0), Some(2));
        assert_eq!(f("v_mfma_f64_16x16x4_f64", 0, 0), Some(16));
        assert_eq!(f("v_smfmac_f32_32x32x32_bf16", 0, 0), Some(8));
        assert_eq!(f("v_add_f32", 0, 0), None);
        assert!(glob("a*b*c", "axxbyyc") && !glob("a*b*c", "axxc") && glob("abc", "abc"));
    }
}
