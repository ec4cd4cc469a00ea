//! The model's parameters: one TOML table ([`Params::DEFAULT_TOML`], embedded from
//! `params.toml`) whose every entry carries its value and its source, and the one table of
//! what each entry may hold ([`Params::bounds`]).
//!
//! A parameter file is user input: the model sizes host allocations, divides and loops by
//! these numbers. [`Params::validate`] walks every entry of the tables (so an entry added
//! without a bound is refused, and a unit test catches it) and requires a finite value within
//! its declared bound, a whole number where the model counts or sizes with it. Every way to
//! get a [`Params`] ([`Params::mi355x`], [`Params::from_toml_str`], [`Params::from_file`])
//! validates, and [`predict`](crate::predict) validates again, since the fields are public.

use std::fmt;
use std::io::Read;
use std::num::NonZeroU64;
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

    /// The value as a whole number of at least 1, for what the model divides by or needs
    /// one of (CUs, channels, lines, slots). A validated entry whose bound starts at 1 holds
    /// exactly this; anything else reads as 1 rather than a division by zero.
    pub fn positive(&self) -> NonZeroU64 {
        NonZeroU64::new(self.count()).unwrap_or(NonZeroU64::MIN)
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

/// Matrix core.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MfmaParams {
    /// Wait states beyond the passes before SrcA/B of an MFMA or a VALU may read an MFMA
    /// result.
    pub result_extra_wait_states: Param,
    /// Wait states before a back-to-back MFMA may read the previous result as SrcC.
    pub srcc_same_acc_wait_states: Param,
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
    /// Issue slots of accesses a port takes ahead of the one it serves (its queue): a wave
    /// waits for the port only when the port is booked further ahead than this.
    pub queue_slots: Param,
}

/// Vector memory and the cache hierarchy.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct VmemParams {
    /// Bytes per clock the CU's texture addresser and L1 move.
    pub issue_bytes_per_cycle: Param,
    /// Least clocks one vector-memory instruction occupies the addresser.
    pub min_issue_cycles: Param,
    /// Issue slots of instructions the texture addresser takes ahead of the one it serves
    /// (its queue): a wave waits for it only when it is booked further ahead than this.
    pub queue_slots: Param,
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

/// The kind of number an entry holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Number {
    /// Any finite number within the range.
    Real,
    /// A whole number: the model counts, sizes or waits with it.
    Whole,
    /// A whole power of two: the model shifts by its logarithm.
    PowerOfTwo,
}

/// What one entry may hold: a closed range, the kind of number, and why the bound is what
/// it is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ParamBound {
    /// Smallest value allowed.
    pub min: f64,
    /// Largest value allowed.
    pub max: f64,
    /// Whole numbers, powers of two or any number.
    pub number: Number,
    /// Why, in a few words (what the hardware has and how far the model goes).
    pub why: &'static str,
}

impl ParamBound {
    const fn real(min: f64, max: f64, why: &'static str) -> ParamBound {
        ParamBound {
            min,
            max,
            number: Number::Real,
            why,
        }
    }

    const fn whole(min: f64, max: f64, why: &'static str) -> ParamBound {
        ParamBound {
            min,
            max,
            number: Number::Whole,
            why,
        }
    }

    const fn power_of_two(min: f64, max: f64, why: &'static str) -> ParamBound {
        ParamBound {
            min,
            max,
            number: Number::PowerOfTwo,
            why,
        }
    }

    /// Whether `v` is finite, within the range and of the right kind.
    pub fn admits(&self, v: f64) -> bool {
        // NaN fails every comparison, so it falls out here with the infinities.
        if !(v.is_finite() && v >= self.min && v <= self.max) {
            return false;
        }
        match self.number {
            Number::Real => true,
            Number::Whole => v.fract() == 0.0,
            // Within range, so at most 2^53 and exact as an integer.
            Number::PowerOfTwo => v.fract() == 0.0 && (v as u64).is_power_of_two(),
        }
    }
}

impl fmt::Display for ParamBound {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.number {
            Number::Real => "a number",
            Number::Whole => "a whole number",
            Number::PowerOfTwo => "a power of two",
        };
        write!(
            f,
            "{kind} from {} to {} ({})",
            Shown(self.min),
            Shown(self.max),
            self.why
        )
    }
}

/// A number as a person reads it: whole numbers in full up to 10^15, very large or very
/// small ones in exponent form (a 1e300 is not printed with its 301 digits).
struct Shown(f64);

impl fmt::Display for Shown {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v = self.0;
        let a = v.abs();
        if !v.is_finite() || a == 0.0 || (1e-4..1e15).contains(&a) {
            write!(f, "{v}")
        } else {
            write!(f, "{v:e}")
        }
    }
}

// What the bounds allow the model to allocate and compute, so a file within them cannot
// exhaust the host or stall the simulation (the machine's size is gfx950's, from
// `tilegen_arch`, not a parameter):
// * CUs: `Method::Rounds` simulates at most `tilegen_arch::CUS_PER_XCD` (32) CUs,
//   `Method::Full` every CU, `tilegen_arch::COMPUTE_UNITS` = 8 x 32 = 256; the products of
//   CUs, workgroups per CU (32) and XCDs that size a round are at most 2^16.
// * The vL1D of each simulated CU holds `vmem.l1_bytes / vmem.l1_line_bytes` <= 256 KiB / 64
//   B = 4,096 lines of 24 bytes (tag, last use, fill time): 96 KiB per CU, 3 MiB for a round,
//   24 MiB for a full simulation. A lookup scans one set: at most 4,096 ways.
// * The L2 of each simulated XCD holds `vmem.l2_bytes / vmem.l1_line_bytes` <= 16 MiB / 64 B
//   = 262,144 lines: 6 MiB per XCD, 48 MiB for 8; a lookup scans `vmem.l2_ways` <= 64 ways;
//   `vmem.l2_channels` <= 64 bandwidth servers per XCD.
// * The MALL keeps the lines the simulated workgroups touch, up to `vmem.mall_bytes /
//   vmem.l1_line_bytes` <= 1 GiB / 64 B = 16 Mi lines, reached only by a kernel that touches
//   a gigabyte in one simulated round.
// * Resident waves (a 128 KiB register file each) are checked against the emulator's memory
//   limit when the launch is prepared; per CU there are at most 4 SIMDs x 8 wave slots of them.
// * Time: latencies up to 100,000 clocks (10^5 ns), bandwidths of at least 1 byte per clock
//   for a unit of a CU and 100 GB/s for the GPU, and s_sleep units up to 10,000 clocks keep
//   simulated times of any real kernel far inside 64-bit cycle counts; `issue.slot_cycles` <= 16
//   and MFMA passes (at most 32 in the opcode tables) keep an instruction's busy time within
//   32 bits.
// * The bounds hold every value `aiter-calibrate --fit` tries (its ranges are checked
//   against these by its tests).

/// Clocks, as the model's clock is one number per kernel: divides cycle counts into time.
const CLOCK_GHZ: ParamBound = ParamBound::real(
    0.1,
    10.0,
    "gfx950 peaks at 2.4 GHz; an engine clock of 0.1 to 10 GHz modelled",
);
/// Latencies of a pipeline inside a CU, in clocks.
const PIPE_CYCLES: ParamBound = ParamBound::whole(
    0.0,
    10_000.0,
    "a pipeline latency inside a CU, tens of clocks on gfx950; up to 10,000 modelled",
);
/// Clocks a unit is busy with one instruction.
const BUSY_CYCLES: ParamBound = ParamBound::whole(
    1.0,
    1_000.0,
    "clocks one instruction occupies its unit: 4 to 16 on gfx950; 1 to 1,000 modelled",
);
/// Latencies through the memory system and launch machinery, in clocks.
const MEMORY_CYCLES: ParamBound = ParamBound::whole(
    0.0,
    100_000.0,
    "a memory or dispatch latency, hundreds of clocks on gfx950; up to 100,000 modelled",
);
/// Latencies through the memory system, in nanoseconds.
const MEMORY_NS: ParamBound = ParamBound::real(
    0.0,
    100_000.0,
    "a memory latency, hundreds of ns on gfx950; up to 100 us modelled",
);
/// Hazard wait states (each one issue slot).
const WAIT_STATES: ParamBound = ParamBound::whole(
    0.0,
    100.0,
    "hazard wait states: under 20 on gfx950; up to 100 modelled",
);
/// Bytes per clock of one unit inside a CU (divides bytes into clocks).
const UNIT_BYTES_PER_CYCLE: ParamBound = ParamBound::real(
    1.0,
    1_024.0,
    "bytes per clock of one unit: 64 to 128 on gfx950; 1 to 1,024 modelled",
);
/// The depth of a unit's instruction queue, in issue slots.
const QUEUE_SLOTS: ParamBound = ParamBound::whole(
    0.0,
    64.0,
    "instructions a unit queues ahead: a few on gfx950 (undocumented); none to 64 modelled",
);
/// GPU-wide bandwidths in GB/s (divided by the clock into bytes per clock).
const GPU_GBS: ParamBound = ParamBound::real(
    100.0,
    200_000.0,
    "a GPU-wide bandwidth: 8 TB/s HBM on gfx950; 0.1 to 200 TB/s modelled",
);

/// Every entry's bound by dotted name (`table.entry`), in the order of `params.toml`; the
/// one place the bounds live. See the comment above for what they allow the model to
/// allocate.
const BOUNDS: [(&str, ParamBound); 46] = [
    ("clock.peak_ghz", CLOCK_GHZ),
    ("clock.mfma_sustained_ghz", CLOCK_GHZ),
    (
        "clock.launch_overhead_us",
        ParamBound::real(0.0, 1_000.0, "a launch costs a few us; up to 1 ms modelled"),
    ),
    ("clock.workgroup_dispatch_cycles", MEMORY_CYCLES),
    (
        "issue.slot_cycles",
        ParamBound::whole(
            4.0,
            16.0,
            "a wave64 instruction takes 4 clocks on a 16-lane SIMD, and a slot serves each of at most 4 SIMDs once: 4 to 16 clocks modelled",
        ),
    ),
    ("issue.branch_taken_cycles", PIPE_CYCLES),
    ("issue.branch_not_taken_cycles", PIPE_CYCLES),
    ("issue.barrier_latency_cycles", PIPE_CYCLES),
    (
        "issue.sleep_cycles_per_unit",
        ParamBound::whole(
            0.0,
            10_000.0,
            "s_sleep waits about 64 clocks per unit; up to 10,000 modelled",
        ),
    ),
    ("valu.issue_cycles", BUSY_CYCLES),
    ("valu.transcendental_cycles", BUSY_CYCLES),
    ("valu.f64_cycles", BUSY_CYCLES),
    ("valu.dependent_latency_cycles", PIPE_CYCLES),
    ("valu.write_then_mfma_read_wait_states", WAIT_STATES),
    ("valu.exec_write_then_mfma_wait_states", WAIT_STATES),
    ("mfma.result_extra_wait_states", WAIT_STATES),
    ("mfma.srcc_same_acc_wait_states", WAIT_STATES),
    ("salu.latency_cycles", PIPE_CYCLES),
    ("salu.smem_latency_cycles", MEMORY_CYCLES),
    ("lds.latency_cycles", PIPE_CYCLES),
    ("lds.port_bytes_per_cycle", UNIT_BYTES_PER_CYCLE),
    (
        "lds.pass_bytes",
        ParamBound::whole(
            4.0,
            4_096.0,
            "64 banks of 4 bytes pass 256 bytes on gfx950; one bank, 4, to 4,096 modelled",
        ),
    ),
    ("lds.write_bytes_per_cycle", UNIT_BYTES_PER_CYCLE),
    ("lds.queue_slots", QUEUE_SLOTS),
    ("vmem.issue_bytes_per_cycle", UNIT_BYTES_PER_CYCLE),
    ("vmem.min_issue_cycles", BUSY_CYCLES),
    ("vmem.queue_slots", QUEUE_SLOTS),
    (
        "vmem.max_vmcnt",
        ParamBound::whole(1.0, 63.0, "vmcnt is a 6-bit counter"),
    ),
    (
        "vmem.max_lgkmcnt",
        ParamBound::whole(1.0, 15.0, "lgkmcnt is a 4-bit counter"),
    ),
    (
        "vmem.l1_bytes",
        ParamBound::whole(
            1_024.0,
            262_144.0,
            "gfx950 has a 32 KiB vL1D per CU; 1 KiB to 256 KiB modelled",
        ),
    ),
    // At least 64 bytes: a lane's access (at most 16 bytes) then spans at most two lines, and
    // the caches hold at most the line counts of the comment above.
    (
        "vmem.l1_line_bytes",
        ParamBound::power_of_two(
            64.0,
            1_024.0,
            "gfx950's lines are 128 bytes; 64 to 1,024 modelled",
        ),
    ),
    (
        "vmem.l1_sets",
        ParamBound::whole(
            1.0,
            4_096.0,
            "gfx950's vL1D has 4 sets; up to 4,096, one per line, modelled",
        ),
    ),
    ("vmem.l1_hit_latency_cycles", MEMORY_CYCLES),
    (
        "vmem.l2_bytes",
        ParamBound::whole(
            1_024.0,
            16_777_216.0,
            "gfx950 has 4 MiB of L2 per XCD; 1 KiB to 16 MiB modelled",
        ),
    ),
    (
        "vmem.l2_ways",
        ParamBound::whole(1.0, 64.0, "CDNA's L2 is 16-way; 1 to 64 modelled"),
    ),
    (
        "vmem.l2_channels",
        ParamBound::whole(
            1.0,
            64.0,
            "gfx950 has 16 L2 channels per XCD; 1 to 64 modelled",
        ),
    ),
    ("vmem.l2_channel_bytes_per_cycle", UNIT_BYTES_PER_CYCLE),
    ("vmem.l2_hit_latency_cycles", MEMORY_CYCLES),
    (
        "vmem.mall_bytes",
        ParamBound::whole(
            0.0,
            1_073_741_824.0,
            "gfx950 has 256 MiB of MALL; none to 1 GiB modelled",
        ),
    ),
    ("vmem.mall_gbs", GPU_GBS),
    ("vmem.mall_latency_ns", MEMORY_NS),
    ("vmem.hbm_gbs", GPU_GBS),
    ("vmem.hbm_latency_ns", MEMORY_NS),
    ("vmem.hbm_loaded_latency_ns", MEMORY_NS),
    (
        "vmem.hbm_load_window_ns",
        ParamBound::real(
            1.0,
            1_000_000.0,
            "the HBM utilization average spans about 1 us; 1 ns to 1 ms modelled",
        ),
    ),
    ("vmem.store_ack_latency_cycles", MEMORY_CYCLES),
];

/// The entries parameter files used to hold that are facts of the machine, each with the
/// `tilegen_arch` constant that holds it now: a file naming one is refused
/// ([`ParamsError::ArchFact`]), since the model would not read it.
const ARCH_FACTS: [(&str, &str, u32); 13] = [
    ("gpu.xcds", "XCDS", tilegen_arch::XCDS),
    ("gpu.cus_per_xcd", "CUS_PER_XCD", tilegen_arch::CUS_PER_XCD),
    (
        "gpu.simds_per_cu",
        "SIMDS_PER_CU",
        tilegen_arch::SIMDS_PER_CU,
    ),
    (
        "gpu.max_waves_per_simd",
        "MAX_WAVES_PER_SIMD",
        tilegen_arch::MAX_WAVES_PER_SIMD,
    ),
    (
        "gpu.vgprs_per_lane",
        "MAX_UNIFIED_VGPRS",
        tilegen_arch::MAX_UNIFIED_VGPRS,
    ),
    (
        "gpu.vgpr_granule",
        "VGPR_ALLOC_GRANULE",
        tilegen_arch::VGPR_ALLOC_GRANULE,
    ),
    (
        "gpu.sgprs_per_simd",
        "SGPRS_PER_SIMD",
        tilegen_arch::SGPRS_PER_SIMD,
    ),
    (
        "gpu.sgpr_granule",
        "SGPR_ALLOC_GRANULE",
        tilegen_arch::SGPR_ALLOC_GRANULE,
    ),
    ("gpu.sgpr_extra", "EXTRA_SGPRS", tilegen_arch::EXTRA_SGPRS),
    (
        "gpu.lds_bytes_per_cu",
        "LDS_BYTES_PER_CU",
        tilegen_arch::LDS_BYTES_PER_CU,
    ),
    (
        "gpu.lds_granule_bytes",
        "LDS_GRANULE_BYTES",
        tilegen_arch::LDS_GRANULE_BYTES,
    ),
    (
        "gpu.max_workgroups_per_cu",
        "MAX_WORKGROUPS_PER_CU",
        tilegen_arch::MAX_WORKGROUPS_PER_CU,
    ),
    (
        "gpu.max_barrier_workgroups_per_cu",
        "MAX_BARRIER_WORKGROUPS_PER_CU",
        tilegen_arch::MAX_BARRIER_WORKGROUPS_PER_CU,
    ),
];

/// Refuses `over` (a parameter file's tables) if it names a fact of [`ARCH_FACTS`].
fn refuse_arch_facts(over: &toml::Table) -> Result<(), ParamsError> {
    for (name, constant, value) in ARCH_FACTS {
        let (table, key) = name.split_once('.').unwrap_or((name, ""));
        if over
            .get(table)
            .and_then(toml::Value::as_table)
            .is_some_and(|t| t.contains_key(key))
        {
            return Err(ParamsError::ArchFact {
                name: name.to_string(),
                constant,
                value,
            });
        }
    }
    Ok(())
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
    /// A parameter file is not a regular file (a directory, a FIFO, a device).
    #[error("timing parameters: {path} is not a regular file")]
    NotAFile {
        /// The path.
        path: PathBuf,
    },
    /// A parameter file is larger than any parameter table.
    #[error(
        "timing parameters: {path} is larger than {limit} bytes, more than any parameter table"
    )]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// [`Params::MAX_FILE_BYTES`].
        limit: u64,
    },
    /// A value is outside its entry's bound (or not finite, or not whole where the model
    /// needs a whole number).
    #[error("timing parameter {name} = {shown} is out of range: it must be {bound}", shown = Shown(*value))]
    Invalid {
        /// Dotted name of the entry.
        name: String,
        /// Its value.
        value: f64,
        /// What the entry may hold.
        bound: ParamBound,
    },
    /// A parameter file names a fact of the machine (its size, register files, LDS, residency
    /// limits), which is gfx950's and read from `tilegen_arch`, not a timing parameter.
    #[error(
        "timing parameter {name} is not a timing parameter: it is a gfx950 fact owned by tilegen-arch (tilegen_arch::{constant} = {value}); remove it from the file"
    )]
    ArchFact {
        /// Dotted name of the entry.
        name: String,
        /// The `tilegen_arch` constant that holds the fact.
        constant: &'static str,
        /// Its value.
        value: u32,
    },
    /// An entry of the tables has no declared bound: a defect of this crate (every entry
    /// needs one in `Params::bounds`), caught by its unit tests.
    #[error("timing parameter {name} has no declared bound")]
    Unbounded {
        /// Dotted name of the entry.
        name: String,
    },
    /// The parameters could not be written as TOML for the walk over their entries.
    #[error("timing parameters: writing them as TOML")]
    Serialize(#[from] toml::ser::Error),
}

impl Default for Params {
    fn default() -> Self {
        Params::mi355x()
    }
}

impl Params {
    /// The default table (MI355X), as embedded.
    pub const DEFAULT_TOML: &'static str = include_str!("params.toml");

    /// Largest parameter file read, in bytes: the whole built-in table is about 12 KiB.
    pub const MAX_FILE_BYTES: u64 = 1 << 20;

    /// The default parameters of an MI355X.
    pub fn mi355x() -> Params {
        // The embedded table is validated like any file, and a unit test proves it passes;
        // a failure here is a defect of the build, not of user input.
        Self::from_toml_str("").expect("the embedded params.toml is valid")
    }

    /// The defaults overridden by a TOML text: tables merge entry by entry, an entry
    /// (`{ value, source }`) replaces the default whole, so every value keeps a source. Unknown
    /// names are errors; a name of a gfx950 fact the tables once held (`gpu.xcds`, ...) is
    /// [`ParamsError::ArchFact`].
    pub fn from_toml_str(overrides: &str) -> Result<Params, ParamsError> {
        let mut base: toml::Table = toml::from_str(Self::DEFAULT_TOML)?;
        let over: toml::Table = toml::from_str(overrides)?;
        refuse_arch_facts(&over)?;
        merge(&mut base, over);
        let p: Params = toml::Value::Table(base).try_into()?;
        p.validate()?;
        Ok(p)
    }

    /// The defaults overridden by the TOML file at `path` (see [`Params::from_toml_str`] and
    /// [`Params::read_file`]).
    pub fn from_file(path: &Path) -> Result<Params, ParamsError> {
        Self::from_toml_str(&Self::read_file(path)?)
    }

    /// The text of the parameter file at `path`, for [`Params::from_toml_str`] (a caller that
    /// passes the text on, such as a sweep's workers, reads it with this too). Only a regular
    /// file of at most [`Params::MAX_FILE_BYTES`] is read: a FIFO would block and a device
    /// such as /dev/zero would fill the memory.
    pub fn read_file(path: &Path) -> Result<String, ParamsError> {
        let io = |source| ParamsError::Io {
            path: path.to_path_buf(),
            source,
        };
        if !std::fs::metadata(path).map_err(io)?.is_file() {
            return Err(ParamsError::NotAFile {
                path: path.to_path_buf(),
            });
        }
        let mut text = String::new();
        std::fs::File::open(path)
            .map_err(io)?
            .take(Self::MAX_FILE_BYTES + 1)
            .read_to_string(&mut text)
            .map_err(io)?;
        if text.len() as u64 > Self::MAX_FILE_BYTES {
            return Err(ParamsError::TooLarge {
                path: path.to_path_buf(),
                limit: Self::MAX_FILE_BYTES,
            });
        }
        Ok(text)
    }

    /// The parameters as TOML (the format [`Params::from_toml_str`] reads).
    pub fn to_toml_string(&self) -> String {
        toml::to_string(self).unwrap_or_default()
    }

    /// Every entry's bound, by dotted name (`table.entry`): the one place they are declared.
    pub fn bounds() -> &'static [(&'static str, ParamBound)] {
        &BOUNDS
    }

    /// The bound of the entry `name` (`table.entry`), if it has one.
    pub fn bound(name: &str) -> Option<ParamBound> {
        BOUNDS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
    }

    /// Checks every entry against its bound, and the MFMA pass table's rules. The walk goes
    /// over the entries as they serialize, so an entry added to the tables without a bound
    /// is an error ([`ParamsError::Unbounded`]), not an unchecked number.
    pub fn validate(&self) -> Result<(), ParamsError> {
        check_entries(&toml::Table::try_from(self)?)
    }
}

/// Checks every `{ value, source }` entry of the serialized tables against its bound.
fn check_entries(tree: &toml::Table) -> Result<(), ParamsError> {
    for (table, entries) in tree {
        let toml::Value::Table(entries) = entries else {
            return Err(ParamsError::Unbounded {
                name: table.clone(),
            });
        };
        for (key, entry) in entries {
            let name = format!("{table}.{key}");
            let value = match entry {
                toml::Value::Table(e) => match e.get("value") {
                    Some(toml::Value::Float(v)) => *v,
                    Some(toml::Value::Integer(v)) => *v as f64,
                    _ => return Err(ParamsError::Unbounded { name }),
                },
                _ => return Err(ParamsError::Unbounded { name }),
            };
            let bound = Params::bound(&name)
                .ok_or_else(|| ParamsError::Unbounded { name: name.clone() })?;
            if !bound.admits(value) {
                return Err(ParamsError::Invalid { name, value, bound });
            }
        }
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use tilegen_emu::exec::memory::DeviceMemory;
    use tilegen_emu::exec::program::Program;
    use tilegen_emu::exec::setup::KernelSetup;

    use crate::{Method, Prediction, TimingError, TimingLaunch, TimingOptions, predict};

    #[test]
    fn embedded_table_parses_and_every_entry_has_a_source() {
        let p = Params::mi355x();
        assert_eq!(p.vmem.l2_channels.count(), 16);
        let text = p.to_toml_string();
        let back = Params::from_toml_str(&text).unwrap();
        assert_eq!(back, p);
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

    /// A source that names a file of the repository names one that exists.
    #[test]
    fn sources_cite_files_that_exist() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let tree = toml::Table::try_from(Params::mi355x()).unwrap();
        let mut cited = 0;
        for (table, entries) in &tree {
            for (key, entry) in entries.as_table().unwrap() {
                let source = entry["source"].as_str().unwrap();
                assert!(!source.contains("timing-notes"), "{table}.{key}: {source}");
                for word in source.split(|c: char| c.is_whitespace() || "(),;:".contains(c)) {
                    if word.starts_with("crates/") {
                        assert!(root.join(word).is_file(), "{table}.{key} cites {word}");
                        cited += 1;
                    }
                }
            }
        }
        assert!(cited >= 12, "{cited} sources cite the crate's docs");
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

    /// `[table]` / `key` of a dotted name.
    fn split(name: &str) -> (&str, &str) {
        name.split_once('.').expect("dotted name")
    }

    /// The defaults with entry `name` set to `v`, read the way a `--params` file is.
    fn with_entry(name: &str, v: f64) -> Result<Params, ParamsError> {
        let (table, key) = split(name);
        let text = format!(
            "[{table}]\n{key} = {{ value = {}, source = \"test\" }}\n",
            toml::Value::Float(v)
        );
        Params::from_toml_str(&text)
    }

    /// `with_entry` is refused with `Invalid` naming `name`, and the message names the bound.
    fn refused(name: &str, v: f64) -> String {
        let e = with_entry(name, v).expect_err(name);
        let ParamsError::Invalid { name: n, bound, .. } = &e else {
            panic!("{name} = {v}: expected Invalid, got {e:?}");
        };
        assert_eq!(n, name);
        let msg = e.to_string();
        assert!(msg.contains(name) && msg.contains(bound.why), "{msg}");
        msg
    }

    #[test]
    fn the_embedded_table_passes_its_bounds() {
        Params::mi355x().validate().unwrap();
        let p: Params = toml::from_str(Params::DEFAULT_TOML).unwrap();
        p.validate().unwrap();
        assert_eq!(p, Params::mi355x());
    }

    #[test]
    fn every_entry_has_one_bound_and_every_bound_an_entry() {
        let tree = toml::Table::try_from(Params::mi355x()).unwrap();
        let mut names = Vec::new();
        for (table, entries) in &tree {
            for (key, entry) in entries.as_table().unwrap() {
                if entry.is_table() {
                    names.push(format!("{table}.{key}"));
                }
            }
        }
        let mut declared: Vec<String> = BOUNDS.iter().map(|(n, _)| n.to_string()).collect();
        names.sort();
        declared.sort();
        let before = declared.len();
        declared.dedup();
        assert_eq!(declared.len(), before, "a name with two bounds");
        assert_eq!(names, declared);
        // The walk refuses an entry it has no bound for.
        let mut tree = tree;
        let clock = tree.get_mut("clock").unwrap().as_table_mut().unwrap();
        clock.insert(
            "turbo_ghz".into(),
            toml::Value::Table(toml::toml! { value = 3.0 source = "x" }),
        );
        assert!(matches!(
            check_entries(&tree),
            Err(ParamsError::Unbounded { name }) if name == "clock.turbo_ghz"
        ));
    }

    #[test]
    fn bounds_are_ranges_of_their_own_kind_and_say_why() {
        for (name, b) in BOUNDS.iter() {
            assert!(
                b.min <= b.max && b.admits(b.min) && b.admits(b.max),
                "{name}"
            );
            assert!(!b.why.is_empty(), "{name}");
            assert!(
                !b.admits(b.min - 1.0) && !b.admits(b.max + 1.0),
                "{name}: a bound is closed"
            );
        }
        // Each SIMD gets one issue slot per round of `slot_cycles` clocks (see the bound).
        let b = |n| Params::bound(n).unwrap();
        assert!(b("issue.slot_cycles").min >= f64::from(tilegen_arch::SIMDS_PER_CU));
        let line = b("vmem.l1_line_bytes");
        assert!(line.admits(128.0) && !line.admits(96.0) && !line.admits(128.5));
        assert!(!b("vmem.l2_channels").admits(7.5) && b("clock.peak_ghz").admits(2.45));
    }

    #[test]
    fn the_bounds_keep_the_allocations_the_comment_promises() {
        let max = |n| Params::bound(n).unwrap().max;
        let min = |n| Params::bound(n).unwrap().min;
        let cus = f64::from(tilegen_arch::COMPUTE_UNITS);
        let xcds = f64::from(tilegen_arch::XCDS);
        assert_eq!(cus, 256.0);
        // 24 bytes per line: tag, last use, fill time.
        let l1_lines = max("vmem.l1_bytes") / min("vmem.l1_line_bytes");
        let l2_lines = max("vmem.l2_bytes") / min("vmem.l1_line_bytes");
        assert_eq!((l1_lines, l2_lines), (4096.0, 262_144.0));
        assert_eq!(l1_lines * 24.0 * cus, 24.0 * 1024.0 * 1024.0);
        assert_eq!(l2_lines * 24.0 * xcds, 48.0 * 1024.0 * 1024.0);
        assert_eq!(
            max("vmem.mall_bytes") / min("vmem.l1_line_bytes"),
            16_777_216.0
        );
        // A round's workgroup counts stay far from overflow.
        assert!(cus * f64::from(tilegen_arch::MAX_WORKGROUPS_PER_CU) <= (1u64 << 16) as f64);
        // An instruction's busy time fits 32 bits (an f8f6f4 MFMA with FP8 operands takes at
        // most 2 x 16 passes, a u8 in the opcode tables).
        assert!(max("issue.slot_cycles") * u8::MAX as f64 <= u32::MAX as f64);
    }

    #[test]
    fn messages_name_the_entry_its_value_and_its_bound() {
        let msg = refused("vmem.l2_channels", 1e12);
        assert_eq!(
            msg,
            "timing parameter vmem.l2_channels = 1000000000000 is out of range: it must be a \
             whole number from 1 to 64 (gfx950 has 16 L2 channels per XCD; 1 to 64 modelled)"
        );
        assert!(refused("vmem.l2_channels", 1e300).contains("= 1e300 is"));
        assert!(refused("vmem.max_vmcnt", f64::NAN).contains("= NaN is"));
        assert!(refused("vmem.l1_bytes", f64::INFINITY).contains("= inf is"));
        assert!(refused("clock.peak_ghz", 1e-300).contains("= 1e-300 is"));
    }

    // The reproducers of a parameter file that used to abort, panic, hang or predict nonsense.

    #[test]
    fn a_file_naming_a_gfx950_fact_is_refused_with_the_fact() {
        // The machine's size and limits come from tilegen_arch: a file that sets one, to any
        // value (the fact's own, or the 1e12 CUs per XCD that once allocated terabytes), is
        // refused rather than silently ignored.
        for (name, constant, value) in ARCH_FACTS {
            for v in [f64::from(value), 1e12] {
                let e = with_entry(name, v).expect_err(name);
                assert!(
                    matches!(&e, ParamsError::ArchFact { name: n, .. } if n == name),
                    "{name}: {e:?}"
                );
                let msg = e.to_string();
                assert!(
                    msg.contains(name)
                        && msg.contains("gfx950 fact owned by tilegen-arch")
                        && msg.contains(&format!("tilegen_arch::{constant} = {value}")),
                    "{msg}"
                );
            }
        }
        // Beside entries that are parameters, too.
        let e = Params::from_toml_str(
            "[clock]\npeak_ghz = { value = 2.0, source = \"x\" }\n\
             [gpu]\nsimds_per_cu = { value = 4, source = \"x\" }\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("gpu.simds_per_cu"), "{e}");
        // A table of the machine that names nothing known is an unknown table.
        assert!(matches!(
            Params::from_toml_str("[gpu]\nturbo = { value = 1, source = \"x\" }\n"),
            Err(ParamsError::Toml(_))
        ));
    }

    #[test]
    fn huge_or_infinite_cache_sizes_are_refused() {
        for v in [f64::INFINITY, 1e15, 1e18] {
            refused("vmem.l1_bytes", v);
            refused("vmem.l2_bytes", v);
        }
    }

    #[test]
    fn huge_channel_counts_are_refused() {
        for v in [f64::INFINITY, 1e12, 1e15, 1e18] {
            refused("vmem.l2_channels", v);
            refused("vmem.l2_ways", v);
        }
    }

    #[test]
    fn counts_of_1e300_no_longer_overflow_a_capacity() {
        for name in [
            "vmem.l2_channels",
            "vmem.l1_sets",
            "vmem.l1_bytes",
            "vmem.l2_bytes",
        ] {
            refused(name, 1e300);
        }
    }

    #[test]
    fn channels_of_i64_max_no_longer_divide_by_zero() {
        // Written as a TOML integer, as a user would.
        let e = Params::from_toml_str(
            "[vmem]\nl2_channels = { value = 9223372036854775807, source = \"x\" }\n",
        )
        .unwrap_err();
        assert!(
            matches!(&e, ParamsError::Invalid { name, .. } if name == "vmem.l2_channels"),
            "{e}"
        );
        refused("vmem.l1_sets", i64::MAX as f64);
    }

    #[test]
    fn slot_cycles_of_1e300_or_1e_minus_300_no_longer_hang() {
        refused("issue.slot_cycles", 1e300);
        refused("issue.slot_cycles", 1e-300);
        // Fewer clocks than SIMDs starved the SIMDs past the slot.
        refused("issue.slot_cycles", 2.0);
    }

    #[test]
    fn max_vmcnt_of_nan_is_refused() {
        refused("vmem.max_vmcnt", f64::NAN);
    }

    #[test]
    fn channels_of_1e_minus_300_no_longer_round_to_none() {
        refused("vmem.l2_channels", 1e-300);
        refused("vmem.l2_channels", 0.4);
    }

    #[test]
    fn nan_infinities_and_minus_one_are_refused_for_every_entry() {
        let mut refusals = 0;
        for (name, _) in BOUNDS {
            for v in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -1.0] {
                refused(name, v);
                refusals += 1;
            }
        }
        assert_eq!(refusals, 4 * BOUNDS.len());
    }

    #[test]
    fn parameter_files_are_regular_files_of_bounded_size() {
        let dir = std::env::temp_dir().join(format!("tilegen-params-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("p.toml");
        std::fs::write(
            &good,
            "[vmem]\nl2_channels = { value = 4, source = \"x\" }\n",
        )
        .unwrap();
        assert_eq!(
            Params::from_file(&good).unwrap().vmem.l2_channels.count(),
            4
        );
        // A directory, a device that never ends (it used to be read until memory ran out) and
        // a FIFO no one writes (it used to block).
        let fifo = dir.join("fifo");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(made.is_ok_and(|s| s.success()), "mkfifo");
        for path in [&dir, Path::new("/dev/zero"), &fifo] {
            assert!(
                matches!(Params::from_file(path), Err(ParamsError::NotAFile { .. })),
                "{}",
                path.display()
            );
        }
        let big = dir.join("big.toml");
        let comment = format!("# {}\n", "x".repeat(1 << 20));
        std::fs::write(&big, comment).unwrap();
        assert!(matches!(
            Params::from_file(&big),
            Err(ParamsError::TooLarge { .. })
        ));
        assert!(matches!(
            Params::from_file(&dir.join("missing.toml")),
            Err(ParamsError::Io { .. })
        ));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A small kernel that uses every unit the parameters time: a scalar load of the kernel
    /// argument, LDS writes and reads around a barrier, VALU and SALU, a global store and a
    /// global load (the testkit's exchange kernel with the load added). Each workgroup of a
    /// [3, Y] grid writes its own 512 bytes of `out`.
    fn kernel_code() -> Vec<u8> {
        tilegen_testkit::kernels::exchange(&[
            0xdc508000, 0x06040005, // global_load_dword v6, v5, s[4:5]
            0xbf8c0f70, // s_waitcnt vmcnt(0)
        ])
    }

    /// [`kernel_code`] loaded into `mem`: kernarg pointer in s[0:1], workgroup ids x and y in s2
    /// and s3, 512 bytes of LDS.
    fn small_kernel(mem: &mut DeviceMemory) -> Program {
        let mut kd = [0u8; 64];
        kd[0..4].copy_from_slice(&512u32.to_le_bytes());
        kd[8..12].copy_from_slice(&8u32.to_le_bytes());
        kd[52..56].copy_from_slice(&((2u32 << 1) | (1 << 7) | (1 << 8)).to_le_bytes());
        kd[56..58].copy_from_slice(&8u16.to_le_bytes());
        Program::load_code(mem, "k", &kernel_code(), KernelSetup::from_descriptor(&kd)).unwrap()
    }

    /// Predicts [`kernel_code`] on a grid of 3 x `rows` workgroups of `waves` waves under `params`.
    fn predict_small(
        params: &Params,
        rows: u32,
        waves: u32,
        method: Method,
    ) -> Result<Prediction, TimingError> {
        let mut mem = DeviceMemory::new();
        let prog = small_kernel(&mut mem);
        let out = mem.alloc(3 * rows as u64 * 512).unwrap();
        let kernarg = out.to_le_bytes();
        let launch = TimingLaunch {
            grid: [3, rows, 1],
            block: [64 * waves, 1, 1],
            dynamic_lds: 0,
            kernarg: &kernarg,
        };
        let opts = TimingOptions {
            method,
            ..TimingOptions::default()
        };
        predict(&mut mem, &prog, &launch, params, &opts)
    }

    /// A prediction that ended well: a time, or a workgroup that does not fit the machine the
    /// parameters describe.
    fn sane(r: Result<Prediction, TimingError>, what: &str) -> bool {
        match r {
            Ok(p) => {
                assert!(p.us.is_finite() && p.us > 0.0, "{what}: {} us", p.us);
                true
            }
            Err(TimingError::DoesNotFit(_)) => false,
            Err(e) => panic!("{what}: {e}"),
        }
    }

    #[test]
    fn the_model_refuses_parameters_changed_after_reading() {
        let mut p = Params::mi355x();
        p.vmem.l2_channels.value = 1e12;
        let e = predict_small(&p, 2, 2, Method::Rounds).unwrap_err();
        assert!(
            matches!(&e, TimingError::Params(ParamsError::Invalid { name, .. }) if name == "vmem.l2_channels"),
            "{e}"
        );
        let mut p = Params::mi355x();
        p.vmem.max_vmcnt.value = f64::NAN;
        assert!(predict_small(&p, 2, 2, Method::Full).is_err());
        let mut p = Params::mi355x();
        p.mfma.result_extra_wait_states.value = 1e9;
        assert!(matches!(
            predict_small(&p, 2, 2, Method::Rounds),
            Err(TimingError::Params(ParamsError::Invalid { name, .. })) if name == "mfma.result_extra_wait_states"
        ));
    }

    #[test]
    fn every_entry_at_either_end_of_its_bound_predicts() {
        // Each entry at its least and its greatest value, the others at their defaults; then
        // all at their least and all at their greatest, fully simulated. The machine is
        // gfx950's whatever the timing parameters, so the workgroup always fits.
        let mut predicted = 0;
        for (name, b) in BOUNDS {
            for v in [b.min, b.max] {
                let p = with_entry(name, v).unwrap();
                let fits = sane(predict_small(&p, 40, 2, Method::Rounds), name);
                assert!(fits, "{name} = {v}: the workgroup does not fit");
                predicted += 1;
            }
        }
        assert_eq!(predicted, 2 * BOUNDS.len());
        let mut all = [Params::mi355x(), Params::mi355x()];
        for (name, b) in BOUNDS {
            let (table, key) = split(name);
            for (p, v) in all.iter_mut().zip([b.min, b.max]) {
                let mut tree = toml::Table::try_from(&*p).unwrap();
                tree[table][key]["value"] = toml::Value::Float(v);
                *p = tree.try_into().unwrap();
            }
        }
        all[0].validate().unwrap();
        all[1].validate().unwrap();
        assert!(sane(
            predict_small(&all[0], 40, 1, Method::Full),
            "all at their least"
        ));
        assert!(sane(
            predict_small(&all[1], 40, 2, Method::Full),
            "all at their greatest"
        ));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Any number in any entry is either taken, and then within the entry's bound, or
        /// refused with `Invalid` naming the entry: never a panic.
        #[test]
        fn any_number_in_any_entry_is_taken_within_its_bound_or_refused(
            entry in 0..BOUNDS.len(),
            pick in 0..12u32,
            any in proptest::num::f64::ANY,
        ) {
            let (name, b) = BOUNDS[entry];
            let v = match pick {
                0 => f64::NAN,
                1 => f64::INFINITY,
                2 => f64::NEG_INFINITY,
                3 => f64::MIN_POSITIVE / 4.0, // subnormal
                4 => 1e300,
                5 => i64::MAX as f64,
                6 => b.min,
                7 => b.max,
                8 => b.min - 1.0,
                9 => b.max + 1.0,
                10 => b.min + (b.max - b.min) * (any.abs().fract()),
                _ => any,
            };
            match with_entry(name, v) {
                Ok(p) => {
                    prop_assert!(b.admits(v), "{name} = {v} taken outside {b}");
                    let back = toml::Table::try_from(&p).unwrap();
                    let (table, key) = split(name);
                    prop_assert_eq!(back[table][key]["value"].as_float(), Some(v));
                }
                Err(ParamsError::Invalid { name: n, value, .. }) => {
                    prop_assert_eq!(n, name);
                    prop_assert!(!b.admits(v));
                    prop_assert!(value.to_bits() == v.to_bits() || (value.is_nan() && v.is_nan()));
                }
                Err(e) => prop_assert!(false, "{name} = {v}: {e}"),
            }
        }

    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Any parameters within their bounds predict a small kernel to a finite time (or find
        /// that its workgroup does not fit), with either method: no panic, no hang.
        #[test]
        fn any_parameters_within_bounds_predict(
            fractions in proptest::collection::vec(0.0f64..=1.0, BOUNDS.len()),
            full in any::<bool>(),
        ) {
            let mut tree = toml::Table::try_from(Params::mi355x()).unwrap();
            for ((name, b), f) in BOUNDS.iter().zip(&fractions) {
                // Spread over orders of magnitude, as the ranges span several.
                let v = if b.min > 0.0 {
                    b.min * (b.max / b.min).powf(*f)
                } else {
                    b.max * f * f
                };
                let v = match b.number {
                    Number::Real => v.clamp(b.min, b.max),
                    Number::Whole => v.round().clamp(b.min, b.max),
                    Number::PowerOfTwo => (v.log2().round().exp2()).clamp(b.min, b.max),
                };
                let (table, key) = split(name);
                tree[table][key]["value"] = toml::Value::Float(v);
            }
            let p: Params = tree.try_into().unwrap();
            p.validate().unwrap();
            let method = if full { Method::Full } else { Method::Rounds };
            sane(predict_small(&p, 24, 2, method), "random parameters within their bounds");
        }
    }
}
