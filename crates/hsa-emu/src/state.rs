//! The runtime's state: the emulator, its agents and pools, memory, and the tables of live
//! objects (signals, queues, readers, executables, kernels).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};

use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::{EmuConfig, Emulator, Limits};
use tilegen_hsa::sys::{self, Status};

use crate::loader::{ExecutableObj, KernelObj, SymbolObj};
use crate::queue::QueueObj;
use crate::signal::SignalObj;
use crate::status::fail;

/// The CPU agent's handle.
pub(crate) const CPU_AGENT: sys::Agent = sys::Agent {
    handle: 0x7469_6c65_0000_0001,
};
/// The gfx950 agent's handle.
pub(crate) const GPU_AGENT: sys::Agent = sys::Agent {
    handle: 0x7469_6c65_0000_0002,
};
/// The gfx950 ISA's handle (`hsa_isa_t`).
pub(crate) const GPU_ISA: u64 = 0x7469_6c65_0000_0201;

/// The emulated GPU's compute units (an MI355X has 256).
pub(crate) const COMPUTE_UNITS: u32 = tilegen_arch::COMPUTE_UNITS;
/// Timestamp ticks per second (`HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`): 100 MHz.
pub(crate) const TICKS_PER_SECOND: u64 = 100_000_000;

/// Everything the runtime holds between `hsa_init` and the last `hsa_shut_down`.
pub(crate) struct Runtime {
    pub emu: Mutex<Emulator>,
    pub max_memory: u64,
    /// Whether profiled dispatches carry the timing model's time (`TILEGEN_HSA_EMU_MODELED_TIMING`).
    pub modeled_timing: bool,
    /// Device allocations: base -> size (the emulator's addresses).
    pub device_allocs: Mutex<BTreeMap<u64, u64>>,
    /// The end of the highest device allocation ever made: device addresses lie below it.
    pub device_high: AtomicU64,
    /// Host-visible and locked allocations (taken after `emu` when both are held).
    pub mirrors: Mutex<crate::memory::Mirrors>,
    pub signals: RwLock<HashMap<u64, Arc<SignalObj>>>,
    pub queues: Mutex<HashMap<usize, Arc<QueueObj>>>,
    pub readers: Mutex<HashMap<u64, Arc<[u8]>>>,
    pub executables: Mutex<HashMap<u64, ExecutableObj>>,
    pub symbols: Mutex<HashMap<u64, SymbolObj>>,
    /// Kernels of frozen executables by kernel object (descriptor address).
    pub kernels: RwLock<HashMap<u64, Arc<KernelObj>>>,
    /// System event handlers: (callback, data).
    pub handlers: Mutex<Vec<(sys::SystemEventCallback, usize)>>,
    next_handle: AtomicU64,
}

impl Runtime {
    fn new() -> Runtime {
        let mut limits = Limits::default();
        if let Some(b) = env_u64("TILEGEN_HSA_EMU_INSTRUCTION_BUDGET") {
            limits.wave_instruction_budget = if b == 0 { u64::MAX } else { b };
        }
        if let Some(m) = env_u64("TILEGEN_HSA_EMU_MAX_MEMORY") {
            limits.max_memory = m;
        }
        let max_memory = limits.max_memory;
        // Any value but 0 (or an absent variable) keeps the model on.
        let modeled_timing = env_u64("TILEGEN_HSA_EMU_MODELED_TIMING") != Some(0);
        let config = EmuConfig {
            limits,
            ..EmuConfig::default()
        };
        Runtime {
            emu: Mutex::new(Emulator::with_config(
                DeviceMemory::with_limit(max_memory),
                config,
            )),
            max_memory,
            modeled_timing,
            device_allocs: Mutex::new(BTreeMap::new()),
            device_high: AtomicU64::new(0),
            mirrors: Mutex::new(crate::memory::Mirrors::default()),
            signals: RwLock::new(HashMap::new()),
            queues: Mutex::new(HashMap::new()),
            readers: Mutex::new(HashMap::new()),
            executables: Mutex::new(HashMap::new()),
            symbols: Mutex::new(HashMap::new()),
            kernels: RwLock::new(HashMap::new()),
            handlers: Mutex::new(Vec::new()),
            next_handle: AtomicU64::new(0x1000),
        }
    }

    /// A fresh handle for a signal, reader, executable or symbol (never 0, never reused).
    pub fn handle(&self) -> u64 {
        self.next_handle.fetch_add(1, Ordering::Relaxed)
    }

    /// The emulator, locked (a poisoned lock is taken over: the emulator's state is only
    /// changed through its own methods, which leave it consistent).
    pub fn emu(&self) -> MutexGuard<'_, Emulator> {
        self.emu.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The device allocation that holds `[addr, addr + len)`, as (base, size).
    pub fn device_range(&self, addr: u64, len: u64) -> Option<(u64, u64)> {
        let allocs = lock(&self.device_allocs);
        let (&base, &size) = allocs.range(..=addr).next_back()?;
        (addr - base < size && len <= size - (addr - base)).then_some((base, size))
    }

    /// Stops every queue's processor (cancelling what runs) and waits for them.
    fn stop_queues(&self) {
        let queues: Vec<Arc<QueueObj>> = lock(&self.queues).drain().map(|(_, q)| q).collect();
        for q in queues {
            q.stop();
        }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        crate::memory::release_all(self);
    }
}

/// The system timestamp (`HSA_SYSTEM_INFO_TIMESTAMP`): ticks of [`TICKS_PER_SECOND`] since
/// the library's first use of the clock.
pub(crate) fn timestamp() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let now = START.get_or_init(std::time::Instant::now).elapsed();
    (now.as_nanos() * TICKS_PER_SECOND as u128 / 1_000_000_000) as u64
}

/// Locks a table, taking it over if a panic poisoned it (tables hold plain data).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

struct Global {
    refs: u32,
    rt: Option<Arc<Runtime>>,
}

static GLOBAL: Mutex<Global> = Mutex::new(Global { refs: 0, rt: None });

/// The initialized runtime, or `HSA_STATUS_ERROR_NOT_INITIALIZED`.
pub(crate) fn runtime() -> Result<Arc<Runtime>, Status> {
    lock(&GLOBAL).rt.clone().ok_or_else(|| {
        fail(
            sys::STATUS_ERROR_NOT_INITIALIZED,
            "hsa_init has not been called (or hsa_shut_down was called as often)",
        )
    })
}

/// `hsa_init`: counts a reference, creating the runtime on the first.
pub(crate) fn init() -> Status {
    let mut g = lock(&GLOBAL);
    if g.refs == i32::MAX as u32 {
        return fail(0x100C, "hsa_init was called 2^31 - 1 times");
    }
    g.refs += 1;
    if g.rt.is_none() {
        g.rt = Some(Arc::new(Runtime::new()));
    }
    sys::STATUS_SUCCESS
}

/// `hsa_shut_down`: drops a reference, stopping the queues and releasing everything on the
/// last one.
pub(crate) fn shut_down() -> Status {
    let rt = {
        let mut g = lock(&GLOBAL);
        if g.refs == 0 {
            return fail(
                sys::STATUS_ERROR_NOT_INITIALIZED,
                "hsa_shut_down without a matching hsa_init",
            );
        }
        g.refs -= 1;
        if g.refs > 0 {
            return sys::STATUS_SUCCESS;
        }
        g.rt.take()
    };
    if let Some(rt) = rt {
        rt.stop_queues();
    }
    sys::STATUS_SUCCESS
}

/// Writes `v` to the caller's attribute buffer.
///
/// # Safety
/// `out` must be valid for writing a `T` (the attribute's documented type); it may be
/// unaligned.
pub(crate) unsafe fn put<T>(out: *mut std::ffi::c_void, v: T) -> Status {
    // SAFETY: the caller's contract.
    unsafe { out.cast::<T>().write_unaligned(v) };
    sys::STATUS_SUCCESS
}

/// Writes a NUL-padded `char[64]`.
///
/// # Safety
/// `out` must be valid for writing 64 bytes.
pub(crate) unsafe fn put_name(out: *mut std::ffi::c_void, name: &str) -> Status {
    let mut buf = [0u8; 64];
    let n = name.len().min(63);
    buf[..n].copy_from_slice(&name.as_bytes()[..n]);
    // SAFETY: the caller's contract.
    unsafe { put(out, buf) }
}

/// L1 vector cache, L2 and Infinity Cache (MALL) of an MI355X, in bytes (CDNA 4 white paper:
/// 32 KiB per CU, 4 MiB per XCD, 256 MiB), as `HSA_AGENT_INFO_CACHE_SIZE` lists them.
const GPU_CACHES: [u32; 4] = [32 << 10, 4 << 20, 256 << 20, 0];
/// Shader engines per XCD on CDNA 3/4 (rocminfo on an MI300X: 32 engines for 8 XCDs).
const SHADER_ENGINES_PER_XCD: u32 = 4;
/// The PCI device ID of an MI355X (`HSA_AMD_AGENT_INFO_CHIP_ID`; amdgpu's ID table).
const MI355X_DEVICE_ID: u32 = 0x75A3;
/// HBM3E interface width of an MI355X in bits: 8 stacks of 1024.
const GPU_MEMORY_WIDTH: u32 = 8 * 1024;
/// The HBM3E memory clock in MHz as the driver reports it: the MI355X's 8 Gbps per pin is
/// four transfers per clock.
const GPU_MEMORY_CLOCK_MHZ: u32 = 2000;
/// Watch points per gfx9 agent (ROCr: `1 << WatchPointsTotalBits`, 2 bits on gfx9).
const GPU_WATCH_POINTS: u32 = 4;
/// FBARRIER_MAX_SIZE (ROCr's GPU agent: 32).
const GPU_FBARRIERS: u32 = 32;

/// A field of the first processor in /proc/cpuinfo.
fn cpuinfo(field: &str) -> Option<String> {
    std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|s| {
        s.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == field))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    })
}

/// The host CPU's model name (ROCr names the CPU agent after it).
fn cpu_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| cpuinfo("model name").unwrap_or_else(|| "CPU".to_string()))
}

/// The host CPU's clock in MHz (ROCr reports the CPU agent's from the driver): the highest
/// cpufreq allows, else the clock /proc/cpuinfo reports, else 0 when neither is readable.
fn cpu_mhz() -> u32 {
    static MHZ: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    *MHZ.get_or_init(|| {
        std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq")
            .ok()
            .and_then(|khz| khz.trim().parse::<u64>().ok())
            .map(|khz| (khz / 1000) as u32)
            .or_else(|| {
                cpuinfo("cpu MHz")
                    .and_then(|m| m.parse::<f64>().ok())
                    .map(|m| m.round() as u32)
            })
            .unwrap_or(0)
    })
}

/// The HDP flush control words `HSA_AMD_AGENT_INFO_HDP_FLUSH` hands out.
fn hdp_flush() -> [*const u32; 2] {
    static WORDS: [std::sync::atomic::AtomicU32; 2] = [
        std::sync::atomic::AtomicU32::new(0),
        std::sync::atomic::AtomicU32::new(0),
    ];
    [
        WORDS[0].as_ptr().cast_const(),
        WORDS[1].as_ptr().cast_const(),
    ]
}

/// A NUL-padded `char[N]`.
fn chars<const N: usize>(text: &str) -> [u8; N] {
    let mut buf = [0u8; N];
    let n = text.len().min(N - 1);
    buf[..n].copy_from_slice(&text.as_bytes()[..n]);
    buf
}

/// `hsa_agent_get_info`. Values are what ROCr reports for an MI355X and its host CPU, except
/// where the emulator has no such thing (noted beside the value).
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub(crate) unsafe fn agent_info(
    agent: sys::Agent,
    attribute: u32,
    value: *mut std::ffi::c_void,
) -> Status {
    let gpu = agent == GPU_AGENT;
    if !gpu && agent != CPU_AGENT {
        return fail(
            sys::STATUS_ERROR_INVALID_AGENT,
            format!("agent {:#x} is not an agent of this runtime", agent.handle),
        );
    }
    if value.is_null() {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            "the value pointer is null",
        );
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
    let g = |v: u32| if gpu { v } else { 0 };
    let max_wg = tilegen_arch::MAX_WORKGROUP_SIZE;
    // SAFETY (every `put`): the caller's buffer is of the attribute's documented type.
    unsafe {
        match attribute {
            sys::AGENT_INFO_NAME => put_name(
                value,
                if gpu {
                    tilegen_arch::PROCESSOR
                } else {
                    cpu_name()
                },
            ),
            // ROCr's CPU agent says "CPU".
            sys::AGENT_INFO_VENDOR_NAME => put_name(value, if gpu { "AMD" } else { "CPU" }),
            sys::AGENT_INFO_FEATURE => put::<u32>(value, g(sys::AGENT_FEATURE_KERNEL_DISPATCH)),
            // HSA_AGENT_INFO_MACHINE_MODEL: large.
            3 => put::<u32>(value, 1),
            // A discrete GPU is a base-profile agent; the CPU is full-profile (ROCr).
            sys::AGENT_INFO_PROFILE => put::<u32>(value, if gpu { sys::PROFILE_BASE } else { 1 }),
            // HSA_AGENT_INFO_DEFAULT_FLOAT_ROUNDING_MODE and _BASE_PROFILE_..._MODES: NEAR.
            5 | 23 => put::<u32>(value, 2),
            // HSA_AGENT_INFO_FAST_F16_OPERATION: ROCr says true for gfx8 and later.
            24 => put::<bool>(value, gpu),
            sys::AGENT_INFO_WAVEFRONT_SIZE => put::<u32>(value, g(tilegen_arch::WAVE_SIZE)),
            // HSA_AGENT_INFO_WORKGROUP_MAX_DIM: uint16_t[3].
            7 => put::<[u16; 3]>(value, [g(max_wg) as u16; 3]),
            sys::AGENT_INFO_WORKGROUP_MAX_SIZE => put::<u32>(value, g(max_wg)),
            // HSA_AGENT_INFO_GRID_MAX_DIM (hsa_dim3_t), HSA_AGENT_INFO_GRID_MAX_SIZE.
            9 => put::<[u32; 3]>(value, [u32::MAX; 3]),
            10 => put::<u32>(value, u32::MAX),
            11 => put::<u32>(value, g(GPU_FBARRIERS)),
            // HSA_AGENT_INFO_QUEUES_MAX.
            12 => put::<u32>(value, g(128)),
            sys::AGENT_INFO_QUEUE_MIN_SIZE => put::<u32>(value, g(crate::queue::MIN_SIZE)),
            sys::AGENT_INFO_QUEUE_MAX_SIZE => put::<u32>(value, g(crate::queue::MAX_SIZE)),
            // HSA_AGENT_INFO_QUEUE_TYPE: multi-producer.
            15 => put::<u32>(value, sys::QUEUE_TYPE_MULTI),
            // HSA_AGENT_INFO_NODE.
            16 => put::<u32>(value, u32::from(gpu)),
            sys::AGENT_INFO_DEVICE => put::<u32>(
                value,
                if gpu {
                    sys::DEVICE_TYPE_GPU
                } else {
                    sys::DEVICE_TYPE_CPU
                },
            ),
            // HSA_AGENT_INFO_CACHE_SIZE: uint32_t[4] (the host's caches are not described).
            18 => put::<[u32; 4]>(value, if gpu { GPU_CACHES } else { [0; 4] }),
            // HSA_AGENT_INFO_ISA: the CPU has none (ROCr writes handle 0).
            19 => put::<u64>(value, if gpu { GPU_ISA } else { 0 }),
            // HSA_AGENT_INFO_EXTENSIONS: no extension tables are provided.
            20 => put::<[u8; 128]>(value, [0; 128]),
            // HSA_AGENT_INFO_VERSION_MAJOR, _MINOR.
            21 | 22 => put::<u16>(value, 1),
            0xA000 => put::<u32>(value, g(MI355X_DEVICE_ID)),
            // HSA_AMD_AGENT_INFO_CACHELINE_SIZE.
            0xA001 => put::<u32>(value, if gpu { 128 } else { 64 }),
            sys::AMD_AGENT_INFO_COMPUTE_UNIT_COUNT => {
                put::<u32>(value, if gpu { COMPUTE_UNITS } else { cpus })
            }
            // HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY (MHz): the MI355X's peak engine clock;
            // the host's for the CPU.
            0xA003 => put::<u32>(value, if gpu { 2400 } else { cpu_mhz() }),
            // HSA_AMD_AGENT_INFO_DRIVER_NODE_ID: the KFD node (the CPU is node 0).
            0xA004 => put::<u32>(value, u32::from(gpu)),
            0xA005 => put::<u32>(value, g(GPU_WATCH_POINTS)),
            // HSA_AMD_AGENT_INFO_BDFID: an emulated device sits on no PCI bus.
            0xA006 => put::<u32>(value, 0),
            // HSA_AMD_AGENT_INFO_MEMORY_WIDTH, _MEMORY_MAX_FREQUENCY.
            0xA007 => put::<u32>(value, g(GPU_MEMORY_WIDTH)),
            0xA008 => put::<u32>(value, g(GPU_MEMORY_CLOCK_MHZ)),
            sys::AMD_AGENT_INFO_PRODUCT_NAME => put_name(
                value,
                if gpu {
                    "AMD Instinct MI355X (tilegen gfx950 emulator)"
                } else {
                    cpu_name()
                },
            ),
            // HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU, HSA_AMD_AGENT_INFO_NUM_SIMDS_PER_CU.
            0xA00A => put::<u32>(
                value,
                g(tilegen_arch::SIMDS_PER_CU * tilegen_arch::MAX_WAVES_PER_SIMD),
            ),
            0xA00B => put::<u32>(value, g(tilegen_arch::SIMDS_PER_CU)),
            // HSA_AMD_AGENT_INFO_NUM_SHADER_ENGINES, _NUM_SHADER_ARRAYS_PER_SE.
            0xA00C => put::<u32>(value, g(tilegen_arch::XCDS * SHADER_ENGINES_PER_XCD)),
            0xA00D => put::<u32>(value, g(1)),
            // HSA_AMD_AGENT_INFO_HDP_FLUSH (hsa_amd_hdp_flush_t: the memory and register flush
            // controls): two words of host memory; the emulator reconciles host-visible memory
            // at dispatch boundaries, so there is nothing for a write to them to flush.
            0xA00E if gpu => put::<[*const u32; 2]>(value, hdp_flush()),
            // HSA_AMD_AGENT_INFO_DOMAIN: the PCI domain.
            0xA00F => put::<u32>(value, 0),
            // HSA_AMD_AGENT_INFO_COOPERATIVE_QUEUES: cooperative queues (HSA_QUEUE_TYPE_COOPERATIVE)
            // are not created here.
            0xA010 => put::<bool>(value, false),
            // HSA_AMD_AGENT_INFO_UUID: char[21]; ROCr writes "GPU-XX" for a device without a
            // unique ID (an emulated one) and "CPU-XX" for the CPU.
            0xA011 => put::<[u8; 21]>(value, chars(if gpu { "GPU-XX" } else { "CPU-XX" })),
            // HSA_AMD_AGENT_INFO_ASIC_REVISION: the emulated chip is revision 0.
            0xA012 => put::<u32>(value, 0),
            // HSA_AMD_AGENT_INFO_SVM_DIRECT_HOST_ACCESS: a discrete GPU reaches host memory
            // over PCIe, not coherently; the CPU is the host.
            0xA013 => put::<bool>(value, !gpu),
            // HSA_AMD_AGENT_INFO_COOPERATIVE_COMPUTE_UNIT_COUNT.
            0xA014 => put::<u32>(value, g(COMPUTE_UNITS)),
            // HSA_AMD_AGENT_INFO_TIMESTAMP_FREQUENCY: the system timestamp's.
            0xA016 => put::<u64>(value, TICKS_PER_SECOND),
            // HSA_AMD_AGENT_INFO_UCODE_VERSION, _SDMA_UCODE_VERSION: the emulator runs no
            // firmware, so version 0.
            0xA108 | 0xA109 => put::<u32>(value, 0),
            // HSA_AMD_AGENT_INFO_IOMMU_SUPPORT: HSA_IOMMU_SUPPORT_NONE (a discrete GPU).
            0xA110 => put::<u32>(value, 0),
            // HSA_AMD_AGENT_INFO_NUM_XCC.
            0xA111 => put::<u32>(value, g(tilegen_arch::XCDS)),
            // HSA_AMD_AGENT_INFO_NEAREST_CPU.
            0xA113 if gpu => put(value, CPU_AGENT),
            // HSA_AMD_AGENT_INFO_MEMORY_PROPERTIES: uint8_t[8] bit set; no AGENT_IS_APU.
            0xA114 => put::<[u8; 8]>(value, [0; 8]),
            other => fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("agent attribute {other:#x} is not one this runtime answers"),
            ),
        }
    }
}

/// `hsa_amd_agents_allow_access`: every agent may access every allocation here; checks the
/// arguments.
pub(crate) fn allow_access(rt: &Runtime, agents: &[sys::Agent], ptr: u64) -> Status {
    if let Some(a) = agents.iter().find(|a| **a != GPU_AGENT && **a != CPU_AGENT) {
        return fail(
            sys::STATUS_ERROR_INVALID_AGENT,
            format!("agent {:#x} is not an agent of this runtime", a.handle),
        );
    }
    if !crate::memory::is_allocation(rt, ptr) {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("{ptr:#x} is not the base of a live allocation (freed already?)"),
        );
    }
    sys::STATUS_SUCCESS
}
