//! The runtime's state: the emulator, its agents and pools, memory, and the tables of live
//! objects (signals, queues, readers, executables, kernels).

use std::alloc::Layout;
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
/// The CPU's fine-grained, kernarg-init system-memory pool (host memory).
pub(crate) const KERNARG_POOL: sys::MemoryPool = sys::MemoryPool {
    handle: 0x7469_6c65_0000_0101,
};
/// The gfx950's coarse-grained device-memory pool (the emulator's memory).
pub(crate) const DEVICE_POOL: sys::MemoryPool = sys::MemoryPool {
    handle: 0x7469_6c65_0000_0102,
};

/// The emulated GPU's compute units (an MI355X has 256).
pub(crate) const COMPUTE_UNITS: u32 = tilegen_arch::COMPUTE_UNITS;
/// Allocation granule and alignment of both pools.
pub(crate) const GRANULE: usize = 4096;
/// Timestamp ticks per second (`HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`): 100 MHz.
pub(crate) const TICKS_PER_SECOND: u64 = 100_000_000;

/// A host allocation of the kernarg pool.
pub(crate) struct HostAlloc {
    pub layout: Layout,
}

/// Everything the runtime holds between `hsa_init` and the last `hsa_shut_down`.
pub(crate) struct Runtime {
    pub emu: Mutex<Emulator>,
    pub max_memory: u64,
    /// Device allocations: base -> size (the emulator's addresses).
    pub device_allocs: Mutex<BTreeMap<u64, u64>>,
    /// The end of the highest device allocation ever made: device addresses lie below it.
    pub device_high: AtomicU64,
    /// Kernarg-pool allocations: host address -> layout.
    pub host_allocs: Mutex<BTreeMap<usize, HostAlloc>>,
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
            device_allocs: Mutex::new(BTreeMap::new()),
            device_high: AtomicU64::new(0),
            host_allocs: Mutex::new(BTreeMap::new()),
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

    /// The kernarg-pool allocation that holds `addr`, as (base, size).
    pub fn host_range(&self, addr: usize) -> Option<(usize, usize)> {
        let allocs = lock(&self.host_allocs);
        let (&base, a) = allocs.range(..=addr).next_back()?;
        (addr - base < a.layout.size()).then_some((base, a.layout.size()))
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
        let allocs = std::mem::take(&mut *lock(&self.host_allocs));
        for (base, a) in allocs {
            // SAFETY: allocated with this layout by `allocate` and not freed (it is still in
            // the table); nothing uses the runtime's memory once it is dropped.
            unsafe { std::alloc::dealloc(base as *mut u8, a.layout) };
        }
    }
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

/// `hsa_agent_get_info`.
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
    // SAFETY (every `put`): the caller's buffer is of the attribute's documented type.
    unsafe {
        match attribute {
            sys::AGENT_INFO_NAME => put_name(
                value,
                if gpu {
                    tilegen_arch::PROCESSOR
                } else {
                    "tilegen-hsa-emu host CPU"
                },
            ),
            sys::AGENT_INFO_VENDOR_NAME => put_name(value, if gpu { "AMD" } else { "host" }),
            sys::AGENT_INFO_FEATURE => put::<u32>(
                value,
                if gpu {
                    sys::AGENT_FEATURE_KERNEL_DISPATCH
                } else {
                    0
                },
            ),
            // HSA_AGENT_INFO_MACHINE_MODEL: large.
            3 => put::<u32>(value, 1),
            sys::AGENT_INFO_PROFILE => put::<u32>(value, sys::PROFILE_BASE),
            sys::AGENT_INFO_WAVEFRONT_SIZE => put::<u32>(value, if gpu { 64 } else { 0 }),
            // HSA_AGENT_INFO_WORKGROUP_MAX_DIM: uint16_t[3].
            7 => put::<[u16; 3]>(value, if gpu { [1024; 3] } else { [0; 3] }),
            sys::AGENT_INFO_WORKGROUP_MAX_SIZE => put::<u32>(value, if gpu { 1024 } else { 0 }),
            // HSA_AGENT_INFO_GRID_MAX_DIM (hsa_dim3_t), HSA_AGENT_INFO_GRID_MAX_SIZE.
            9 => put::<[u32; 3]>(value, [u32::MAX; 3]),
            10 => put::<u32>(value, u32::MAX),
            // HSA_AGENT_INFO_QUEUES_MAX.
            12 => put::<u32>(value, if gpu { 128 } else { 0 }),
            sys::AGENT_INFO_QUEUE_MIN_SIZE => {
                put::<u32>(value, if gpu { crate::queue::MIN_SIZE } else { 0 })
            }
            sys::AGENT_INFO_QUEUE_MAX_SIZE => {
                put::<u32>(value, if gpu { crate::queue::MAX_SIZE } else { 0 })
            }
            // HSA_AGENT_INFO_QUEUE_TYPE: multi-producer.
            15 => put::<u32>(value, sys::QUEUE_TYPE_MULTI),
            // HSA_AGENT_INFO_NODE.
            16 => put::<u32>(value, if gpu { 1 } else { 0 }),
            sys::AGENT_INFO_DEVICE => put::<u32>(
                value,
                if gpu {
                    sys::DEVICE_TYPE_GPU
                } else {
                    sys::DEVICE_TYPE_CPU
                },
            ),
            // HSA_AGENT_INFO_VERSION_MAJOR, _MINOR.
            21 => put::<u16>(value, 1),
            22 => put::<u16>(value, 1),
            // HSA_AMD_AGENT_INFO_CACHELINE_SIZE.
            0xA001 => put::<u32>(value, if gpu { 128 } else { 64 }),
            sys::AMD_AGENT_INFO_COMPUTE_UNIT_COUNT => {
                put::<u32>(value, if gpu { COMPUTE_UNITS } else { cpus })
            }
            // HSA_AMD_AGENT_INFO_MAX_CLOCK_FREQUENCY (MHz).
            0xA003 => put::<u32>(value, if gpu { 2400 } else { 0 }),
            sys::AMD_AGENT_INFO_PRODUCT_NAME => put_name(
                value,
                if gpu {
                    "AMD Instinct MI355X (tilegen gfx950 emulator)"
                } else {
                    "host CPU"
                },
            ),
            // HSA_AMD_AGENT_INFO_MAX_WAVES_PER_CU, HSA_AMD_AGENT_INFO_NUM_SIMDS_PER_CU.
            0xA00A => put::<u32>(value, if gpu { 32 } else { 0 }),
            0xA00B => put::<u32>(value, if gpu { 4 } else { 0 }),
            other => fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("agent attribute {other:#x} is not one this runtime answers"),
            ),
        }
    }
}

/// `hsa_amd_memory_pool_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub(crate) unsafe fn pool_info(
    rt: &Runtime,
    pool: sys::MemoryPool,
    attribute: u32,
    value: *mut std::ffi::c_void,
) -> Status {
    let device = pool == DEVICE_POOL;
    if !device && pool != KERNARG_POOL {
        return fail(
            sys::STATUS_ERROR_INVALID_MEMORY_POOL,
            format!(
                "memory pool {:#x} is not a pool of this runtime",
                pool.handle
            ),
        );
    }
    if value.is_null() {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            "the value pointer is null",
        );
    }
    let size = if device {
        rt.max_memory as usize
    } else {
        rt.max_memory.max(1 << 30) as usize
    };
    // SAFETY (every `put`): the caller's buffer is of the attribute's documented type.
    unsafe {
        match attribute {
            sys::AMD_MEMORY_POOL_INFO_SEGMENT => put::<u32>(value, sys::AMD_SEGMENT_GLOBAL),
            sys::AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS => put::<u32>(
                value,
                if device {
                    sys::AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
                } else {
                    sys::AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT
                        | sys::AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED
                },
            ),
            sys::AMD_MEMORY_POOL_INFO_SIZE => put::<usize>(value, size),
            sys::AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED => put::<bool>(value, true),
            sys::AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE
            | sys::AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT => put::<usize>(value, GRANULE),
            sys::AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL => put::<bool>(value, !device),
            // HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE.
            16 => put::<usize>(value, size),
            other => fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("memory pool attribute {other} is not one this runtime answers"),
            ),
        }
    }
}

/// `hsa_amd_memory_pool_allocate`.
pub(crate) fn allocate(rt: &Runtime, pool: sys::MemoryPool, size: usize) -> Result<u64, Status> {
    if size == 0 {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ALLOCATION,
            "a zero-byte allocation",
        ));
    }
    if pool == DEVICE_POOL {
        let base = rt.emu().memory_mut().alloc(size as u64).map_err(|e| {
            fail(
                sys::STATUS_ERROR_OUT_OF_RESOURCES,
                format!("allocating {size} bytes of device memory: {e}"),
            )
        })?;
        lock(&rt.device_allocs).insert(base, size as u64);
        rt.device_high
            .fetch_max(base.saturating_add(size as u64), Ordering::SeqCst);
        Ok(base)
    } else if pool == KERNARG_POOL {
        let layout = size
            .checked_next_multiple_of(GRANULE)
            .and_then(|n| Layout::from_size_align(n, GRANULE).ok())
            .ok_or_else(|| {
                fail(
                    sys::STATUS_ERROR_INVALID_ALLOCATION,
                    format!("{size} bytes do not fit the address space"),
                )
            })?;
        // SAFETY: the layout has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        if p.is_null() {
            return Err(fail(
                sys::STATUS_ERROR_OUT_OF_RESOURCES,
                format!("the host refused {size} bytes of system memory"),
            ));
        }
        lock(&rt.host_allocs).insert(p as usize, HostAlloc { layout });
        Ok(p as u64)
    } else {
        Err(fail(
            sys::STATUS_ERROR_INVALID_MEMORY_POOL,
            format!(
                "memory pool {:#x} is not a pool of this runtime",
                pool.handle
            ),
        ))
    }
}

/// `hsa_amd_memory_pool_free`.
pub(crate) fn free(rt: &Runtime, ptr: u64) -> Status {
    if lock(&rt.device_allocs).remove(&ptr).is_some() {
        let _ = rt.emu().memory_mut().free(ptr);
        return sys::STATUS_SUCCESS;
    }
    if let Some(a) = lock(&rt.host_allocs).remove(&(ptr as usize)) {
        // SAFETY: allocated with this layout by `allocate`; removed from the table, so freed
        // once.
        unsafe { std::alloc::dealloc(ptr as *mut u8, a.layout) };
        return sys::STATUS_SUCCESS;
    }
    fail(
        sys::STATUS_ERROR_INVALID_ARGUMENT,
        format!("{ptr:#x} is not the base of a live allocation (freed already?)"),
    )
}

/// `hsa_amd_agents_allow_access`: every agent may access every pool here; checks the
/// arguments.
pub(crate) fn allow_access(rt: &Runtime, agents: &[sys::Agent], ptr: u64) -> Status {
    if let Some(a) = agents.iter().find(|a| **a != GPU_AGENT && **a != CPU_AGENT) {
        return fail(
            sys::STATUS_ERROR_INVALID_AGENT,
            format!("agent {:#x} is not an agent of this runtime", a.handle),
        );
    }
    if !lock(&rt.device_allocs).contains_key(&ptr)
        && !lock(&rt.host_allocs).contains_key(&(ptr as usize))
    {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("{ptr:#x} is not the base of a live allocation (freed already?)"),
        );
    }
    sys::STATUS_SUCCESS
}

/// Where a copy's end is.
enum Place {
    Device,
    Host,
}

fn place(rt: &Runtime, addr: u64, len: u64, what: &str) -> Result<Place, Status> {
    if rt.device_range(addr, 1).is_some() {
        return match rt.device_range(addr, len) {
            Some(_) => Ok(Place::Device),
            None => Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!(
                    "the {what} [{addr:#x}, +{len}) runs past the end of its device allocation"
                ),
            )),
        };
    }
    if let Some((base, size)) = rt.host_range(addr as usize) {
        if (addr as usize - base) as u64 + len > size as u64 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!(
                    "the {what} [{addr:#x}, +{len}) runs past the end of its system-memory allocation"
                ),
            ));
        }
        return Ok(Place::Host);
    }
    let device = tilegen_emu::exec::memory::HEAP_BASE..rt.device_high.load(Ordering::SeqCst);
    if device.contains(&addr) {
        // Where device allocations were made, but no live one: freed (or never allocated).
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("the {what} {addr:#x} is device memory that is not allocated (freed already?)"),
        ));
    }
    // Any other address is the application's own (system) memory.
    Ok(Place::Host)
}

/// `hsa_memory_copy` between host memory (any, as system memory is in HSA) and device memory.
///
/// # Safety
/// Host ranges must be valid for the access (the HSA contract).
pub(crate) unsafe fn copy(rt: &Runtime, dst: u64, src: u64, len: usize) -> Status {
    if len == 0 {
        return sys::STATUS_SUCCESS;
    }
    if dst == 0 || src == 0 {
        return fail(sys::STATUS_ERROR_INVALID_ARGUMENT, "a null pointer");
    }
    let n = len as u64;
    let (d, s) = match (
        place(rt, dst, n, "destination"),
        place(rt, src, n, "source"),
    ) {
        (Ok(d), Ok(s)) => (d, s),
        (Err(e), _) | (_, Err(e)) => return e,
    };
    let fault = |e: tilegen_emu::exec::MemFault| fail(sys::STATUS_ERROR_INVALID_ARGUMENT, e);
    match (d, s) {
        (Place::Device, Place::Host) => {
            // SAFETY: the caller's contract for the host source.
            let data = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
            match rt.emu().memory().write(dst, data) {
                Ok(()) => sys::STATUS_SUCCESS,
                Err(e) => fault(e),
            }
        }
        (Place::Host, Place::Device) => {
            // SAFETY: the caller's contract for the host destination.
            let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
            match rt.emu().memory().read(src, out) {
                Ok(()) => sys::STATUS_SUCCESS,
                Err(e) => fault(e),
            }
        }
        (Place::Device, Place::Device) => {
            let emu = rt.emu();
            match emu
                .memory()
                .read_vec(src, len)
                .and_then(|v| emu.memory().write(dst, &v))
            {
                Ok(()) => sys::STATUS_SUCCESS,
                Err(e) => fault(e),
            }
        }
        (Place::Host, Place::Host) => {
            // SAFETY: the caller's contract; `copy` allows overlap.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
            sys::STATUS_SUCCESS
        }
    }
}
