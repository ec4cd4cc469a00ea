//! [`HsaDevice`]: the [`Device`] over an HSA runtime.

use std::collections::HashMap;
use std::ffi::c_void;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tilegen_codeobj::CodeObject;
use tilegen_device::{
    Device, DeviceId, DevicePtr, Fault, LaunchConfig, LaunchReport, Module, RuntimeError, Signal,
};

use crate::sys::{self, Api, Status};
use crate::{AgentInfo, HsaError, Runtime, c_name, list_agents};

/// How [`HsaDevice::open_with`] opens a device.
#[derive(Debug, Clone)]
pub struct HsaOptions {
    library: PathBuf,
    agent: usize,
    timeout: Duration,
    queue_size: u32,
    cancel: Option<Arc<AtomicBool>>,
}

impl Default for HsaOptions {
    fn default() -> Self {
        HsaOptions::new()
    }
}

impl HsaOptions {
    /// The default library ([`sys::default_library`]), GPU agent 0, a 10-minute timeout,
    /// 1024-packet queues, no cancellation flag.
    pub fn new() -> HsaOptions {
        HsaOptions {
            library: sys::default_library(),
            agent: 0,
            timeout: Duration::from_secs(600),
            queue_size: 1024,
            cancel: None,
        }
    }

    /// The HSA library to load (a path, or a file name the dynamic loader finds).
    pub fn library(mut self, path: impl Into<PathBuf>) -> HsaOptions {
        self.library = path.into();
        self
    }

    /// The library these options open.
    pub fn library_path(&self) -> &std::path::Path {
        &self.library
    }

    /// The GPU agent, by index among the runtime's GPU agents (in its order).
    pub fn agent(mut self, index: usize) -> HsaOptions {
        self.agent = index;
        self
    }

    /// How long [`Device::wait`] waits for a dispatch before it reports the kernel as hung
    /// (and destroys its queue, which stops it).
    pub fn timeout(mut self, timeout: Duration) -> HsaOptions {
        self.timeout = timeout;
        self
    }

    /// Packets per queue (rounded up to a power of two, then clamped to what the agent
    /// allows).
    pub fn queue_size(mut self, packets: u32) -> HsaOptions {
        self.queue_size = packets.max(1);
        self
    }

    /// A flag that, once raised (by a Ctrl-C handler), makes a wait stop the dispatch and
    /// return [`RuntimeError::Interrupted`].
    pub fn cancel_flag(mut self, flag: Arc<AtomicBool>) -> HsaOptions {
        self.cancel = Some(flag);
        self
    }
}

/// Memory from an HSA pool, freed on drop.
struct PoolAlloc {
    api: Arc<Api>,
    ptr: *mut c_void,
}

// SAFETY: the pointer names runtime-owned memory that any thread may use; this type only frees
// it (once, on drop) and hands out the address.
unsafe impl Send for PoolAlloc {}
// SAFETY: as above; `&PoolAlloc` gives no access to the memory itself.
unsafe impl Sync for PoolAlloc {}

impl PoolAlloc {
    fn new(api: &Arc<Api>, pool: sys::MemoryPool, bytes: usize) -> Result<PoolAlloc, HsaError> {
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` receives the allocation; flags 0 as hsa_ext_amd.h requires.
        api.check("hsa_amd_memory_pool_allocate", unsafe {
            (api.hsa_amd_memory_pool_allocate)(pool, bytes, 0, &mut ptr)
        })?;
        Ok(PoolAlloc {
            api: api.clone(),
            ptr,
        })
    }

    /// Lets `agent` access the allocation (system memory must be made visible to a GPU).
    fn allow(&self, agent: sys::Agent) -> Result<(), HsaError> {
        // SAFETY: one agent, no flags, a live allocation of this runtime.
        self.api.check("hsa_amd_agents_allow_access", unsafe {
            (self.api.hsa_amd_agents_allow_access)(1, &agent, std::ptr::null(), self.ptr)
        })
    }
}

impl Drop for PoolAlloc {
    fn drop(&mut self) {
        // SAFETY: allocated by hsa_amd_memory_pool_allocate and freed only here.
        unsafe { (self.api.hsa_amd_memory_pool_free)(self.ptr) };
    }
}

/// An HSA signal, destroyed on drop.
struct HsaSignal {
    api: Arc<Api>,
    signal: sys::Signal,
}

impl HsaSignal {
    fn new(api: &Arc<Api>, initial: i64) -> Result<HsaSignal, HsaError> {
        let mut signal = sys::Signal::default();
        // SAFETY: no consumer list (any agent may wait); `signal` receives the handle.
        api.check("hsa_signal_create", unsafe {
            (api.hsa_signal_create)(initial, 0, std::ptr::null(), &mut signal)
        })?;
        Ok(HsaSignal {
            api: api.clone(),
            signal,
        })
    }
}

impl Drop for HsaSignal {
    fn drop(&mut self) {
        // SAFETY: created by hsa_signal_create, destroyed only here, after its dispatch is
        // complete or its queue destroyed.
        unsafe { (self.api.hsa_signal_destroy)(self.signal) };
    }
}

/// What the queue's error callback records. Owned by `Arc`s of the queue slot and of the
/// dispatches on it, so it outlives the queue (the callback's `data` points at it).
#[derive(Default)]
struct QueueErrors {
    /// The first error status the runtime reported (0: none).
    status: AtomicU32,
    /// Set when this device destroyed the queue (a hung or interrupted kernel): why.
    destroyed: Mutex<Option<String>>,
}

unsafe extern "C" fn on_queue_error(status: Status, _queue: *mut sys::Queue, data: *mut c_void) {
    if data.is_null() {
        return;
    }
    // SAFETY: `data` is the `QueueErrors` of `LiveQueue::create`, kept alive (by `Arc`) until
    // after hsa_queue_destroy returned, after which the runtime no longer calls back.
    let errors = unsafe { &*(data as *const QueueErrors) };
    let _ = errors
        .status
        .compare_exchange(0, status, Ordering::SeqCst, Ordering::SeqCst);
}

/// A memory fault the runtime reported through its system event handler.
#[derive(Debug, Clone, Copy)]
struct MemoryFault {
    seq: u64,
    agent: u64,
    address: u64,
}

/// Memory faults of every runtime in the process (the handler has no way to unregister, so
/// its data lives in a static); the last few are kept.
static MEMORY_FAULTS: Mutex<Vec<MemoryFault>> = Mutex::new(Vec::new());
static FAULT_SEQ: AtomicU64 = AtomicU64::new(0);

unsafe extern "C" fn on_system_event(event: *const sys::AmdEvent, _data: *mut c_void) -> Status {
    if event.is_null() {
        return sys::STATUS_SUCCESS;
    }
    // SAFETY: the runtime passes a valid event for the duration of the call.
    let event = unsafe { &*event };
    if event.event_type == sys::AMD_GPU_MEMORY_FAULT_EVENT {
        let mut faults = MEMORY_FAULTS.lock().unwrap_or_else(|p| p.into_inner());
        if faults.len() >= 64 {
            faults.remove(0);
        }
        faults.push(MemoryFault {
            seq: FAULT_SEQ.fetch_add(1, Ordering::SeqCst) + 1,
            agent: event.memory_fault.agent.handle,
            address: event.memory_fault.virtual_address,
        });
    }
    sys::STATUS_SUCCESS
}

/// The device's queue.
struct LiveQueue {
    api: Arc<Api>,
    queue: *mut sys::Queue,
    errors: Arc<QueueErrors>,
    generation: u64,
}

// SAFETY: an HSA queue is made for concurrent producers (the write index is reserved
// atomically); this type only passes the pointer to HSA calls and writes reserved slots.
unsafe impl Send for LiveQueue {}

impl LiveQueue {
    fn create(
        api: &Arc<Api>,
        agent: sys::Agent,
        size: u32,
        generation: u64,
    ) -> Result<LiveQueue, HsaError> {
        let errors = Arc::new(QueueErrors::default());
        let mut queue = std::ptr::null_mut();
        // SAFETY: the callback's data is `errors`, which `LiveQueue` and every dispatch on the
        // queue keep alive past hsa_queue_destroy; no segment-size hints (UINT32_MAX).
        api.check("hsa_queue_create", unsafe {
            (api.hsa_queue_create)(
                agent,
                size,
                sys::QUEUE_TYPE_MULTI,
                Some(on_queue_error),
                Arc::as_ptr(&errors) as *mut c_void,
                u32::MAX,
                u32::MAX,
                &mut queue,
            )
        })?;
        let live = LiveQueue {
            api: api.clone(),
            queue,
            errors,
            generation,
        };
        // Every dispatch is timed by the agent's own timestamps (read after completion).
        // SAFETY: a live queue of this runtime (dropped, and destroyed, on error).
        api.check("hsa_amd_profiling_set_profiler_enabled", unsafe {
            (api.hsa_amd_profiling_set_profiler_enabled)(live.queue, 1)
        })?;
        Ok(live)
    }
}

impl Drop for LiveQueue {
    fn drop(&mut self) {
        // SAFETY: created by hsa_queue_create and destroyed only here. Destroying a queue
        // stops what runs on it; the dispatches' resources are released after this returns.
        unsafe { (self.api.hsa_queue_destroy)(self.queue) };
    }
}

/// A kernel of a loaded executable.
#[derive(Debug, Clone, Copy)]
struct KernelSymbol {
    object: u64,
    kernarg_size: u32,
    group_size: u32,
    private_size: u32,
}

/// A code object loaded for the agent: reader, frozen executable, kernel symbols. Destroyed
/// (executable, then reader) when the last clone of its [`Module`] is dropped.
struct HsaModule {
    rt: Arc<Runtime>,
    reader: Option<sys::CodeObjectReader>,
    executable: Option<sys::Executable>,
    /// The reader reads from this memory until it is destroyed.
    _bytes: Box<[u8]>,
    kernels: HashMap<String, KernelSymbol>,
}

impl Drop for HsaModule {
    fn drop(&mut self) {
        let api = &self.rt.api;
        if let Some(e) = self.executable.take() {
            // SAFETY: created by hsa_executable_create_alt, destroyed once; dispatches keep a
            // clone of the module, so none is in flight.
            unsafe { (api.hsa_executable_destroy)(e) };
        }
        if let Some(r) = self.reader.take() {
            // SAFETY: created by hsa_code_object_reader_create_from_memory, destroyed once,
            // before the bytes it reads are freed (`_bytes` drops after this).
            unsafe { (api.hsa_code_object_reader_destroy)(r) };
        }
    }
}

/// A dispatch in flight: what must live until it completes.
struct InFlight {
    kernel: String,
    signal: HsaSignal,
    _kernargs: PoolAlloc,
    _module: Module,
    errors: Arc<QueueErrors>,
    generation: u64,
    start: Instant,
    fault_seq: u64,
}

/// A GPU agent of an HSA runtime as a [`Device`]: device memory from its coarse-grained
/// pool, copies staged through its fine-grained kernarg pool, one queue (recreated after an
/// error), dispatches as AQL packets, waits bounded by a timeout. Drop it to destroy the queue
/// and shut the runtime down (modules keep the runtime up until they are dropped too).
pub struct HsaDevice {
    id: DeviceId,
    agent: AgentInfo,
    kernarg_pool: sys::MemoryPool,
    device_pool: sys::MemoryPool,
    queue_size: u32,
    timeout: Duration,
    cancel: Option<Arc<AtomicBool>>,
    ticks_per_second: u64,
    queue: Mutex<Option<LiveQueue>>,
    generation: AtomicU64,
    inflight: Mutex<HashMap<u64, InFlight>>,
    next: AtomicU64,
    /// Dropped last: the runtime outlives everything above.
    rt: Arc<Runtime>,
}

/// Bytes staged per copy step.
const STAGING_BYTES: usize = 16 << 20;

impl HsaDevice {
    /// GPU agent `index` of the default library (`$TILEGEN_HSA_LIB`, else
    /// `libhsa-runtime64.so.1`).
    pub fn open(index: usize) -> Result<HsaDevice, HsaError> {
        HsaDevice::open_with(HsaOptions::new().agent(index))
    }

    /// A device as `options` say.
    pub fn open_with(options: HsaOptions) -> Result<HsaDevice, HsaError> {
        let api = Api::load(&options.library)?;
        let rt = Runtime::init(api.clone())?;
        let gpus: Vec<AgentInfo> = list_agents(&api)?
            .into_iter()
            .filter(AgentInfo::is_gpu)
            .collect();
        let agent = gpus
            .get(options.agent)
            .cloned()
            .ok_or_else(|| HsaError::NoAgent {
                index: options.agent,
                names: gpus.iter().map(|a| a.name.clone()).collect(),
            })?;
        let cpus: Vec<AgentInfo> = list_agents(&api)?
            .into_iter()
            .filter(|a| a.device_type == crate::DeviceType::Cpu)
            .collect();
        // Kernarg memory: a fine-grained, kernarg-init global pool (the CPU agent's, in ROCm;
        // a GPU's own as a fallback).
        let kernarg_flags = sys::AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT
            | sys::AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
        let kernarg_pool = cpus
            .iter()
            .chain(std::iter::once(&agent))
            .flat_map(|a| a.pools.iter())
            .find(|p| p.is_global_with(kernarg_flags))
            .map(|p| p.handle)
            .ok_or_else(|| HsaError::NoPool {
                agent: agent.name.clone(),
                what: "fine-grained kernarg",
            })?;
        let device_pool = agent
            .pools
            .iter()
            .find(|p| p.is_global_with(sys::AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED))
            .map(|p| p.handle)
            .ok_or_else(|| HsaError::NoPool {
                agent: agent.name.clone(),
                what: "coarse-grained device",
            })?;
        let queue_max = crate::agent_u32(&api, agent.handle, sys::AGENT_INFO_QUEUE_MAX_SIZE)?;
        let queue_min = crate::agent_u32(&api, agent.handle, sys::AGENT_INFO_QUEUE_MIN_SIZE)?;
        let queue_size = options
            .queue_size
            .checked_next_power_of_two()
            .unwrap_or(u32::MAX)
            .min(queue_max.max(1))
            .max(queue_min);
        let mut frequency = 0u64;
        // SAFETY: the attribute is a uint64_t.
        api.check("hsa_system_get_info", unsafe {
            (api.hsa_system_get_info)(
                sys::SYSTEM_INFO_TIMESTAMP_FREQUENCY,
                (&mut frequency as *mut u64).cast(),
            )
        })?;
        // Memory faults are reported to the handler (with their address) instead of ending
        // the process; the queue then reports the error.
        // SAFETY: the handler only records into a static; no data pointer.
        api.check("hsa_amd_register_system_event_handler", unsafe {
            (api.hsa_amd_register_system_event_handler)(Some(on_system_event), std::ptr::null_mut())
        })?;
        Ok(HsaDevice {
            id: DeviceId::new(),
            agent,
            kernarg_pool,
            device_pool,
            queue_size,
            timeout: options.timeout,
            cancel: options.cancel,
            ticks_per_second: frequency.max(1),
            queue: Mutex::new(None),
            generation: AtomicU64::new(0),
            inflight: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
            rt,
        })
    }

    /// The GPU agent.
    pub fn agent(&self) -> &AgentInfo {
        &self.agent
    }

    /// The library the device runs on.
    pub fn library(&self) -> &std::path::Path {
        self.rt.api.path()
    }

    /// How long a wait lasts before the kernel is reported as hung.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn api(&self) -> &Arc<Api> {
        &self.rt.api
    }

    fn hsa(what: &str, e: HsaError) -> RuntimeError {
        RuntimeError::device(what, e)
    }

    /// The live queue, made (or remade after an error) on demand.
    fn queue(&self) -> Result<MutexGuard<'_, Option<LiveQueue>>, RuntimeError> {
        let mut q = self
            .queue
            .lock()
            .map_err(|_| RuntimeError::Poisoned("queue"))?;
        let broken = q
            .as_ref()
            .is_some_and(|l| l.errors.status.load(Ordering::SeqCst) != 0);
        if broken {
            // Dropping the old queue destroys it; its dispatches see the error it recorded.
            *q = None;
        }
        if q.is_none() {
            let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
            *q = Some(
                LiveQueue::create(self.api(), self.agent.handle, self.queue_size, generation)
                    .map_err(|e| Self::hsa("creating a queue", e))?,
            );
        }
        Ok(q)
    }

    /// Destroys the queue of `generation` (stopping what runs on it), telling the other
    /// dispatches on it why.
    fn abandon_queue(&self, generation: u64, why: String) {
        if let Ok(mut q) = self.queue.lock()
            && q.as_ref().is_some_and(|l| l.generation == generation)
            && let Some(live) = q.take()
        {
            if let Ok(mut d) = live.errors.destroyed.lock() {
                d.get_or_insert(why);
            }
            drop(live);
        }
    }

    fn ticks(&self, d: Duration) -> u64 {
        (d.as_secs_f64() * self.ticks_per_second as f64).min(u64::MAX as f64) as u64
    }

    /// A completed dispatch's time by the agent's profiling timestamps (end - start, in
    /// system timestamp ticks): the kernel's own run, without the host's queueing and waiting.
    fn dispatch_time(&self, f: &InFlight) -> Result<Duration, RuntimeError> {
        let api = self.api();
        let mut time = [0u64; 2];
        // SAFETY: a live signal of this runtime that a dispatch on the profiled queue
        // signalled; `time` is hsa_amd_profiling_dispatch_time_t (two uint64_t).
        api.check("hsa_amd_profiling_get_dispatch_time", unsafe {
            (api.hsa_amd_profiling_get_dispatch_time)(self.agent.handle, f.signal.signal, &mut time)
        })
        .map_err(|e| {
            Self::hsa(
                &format!("reading the dispatch time of kernel `{}`", f.kernel),
                e,
            )
        })?;
        let [start, end] = time;
        if end < start {
            return Err(RuntimeError::device(
                format!("reading the dispatch time of kernel `{}`", f.kernel),
                format!("the runtime says it ended (tick {end}) before it started (tick {start})"),
            ));
        }
        Ok(Duration::from_secs_f64(
            (end - start) as f64 / self.ticks_per_second as f64,
        ))
    }

    /// The error for a dispatch whose queue reported `status`.
    fn queue_error(&self, f: &InFlight, status: Status) -> RuntimeError {
        let text = self.api().status_text(status);
        let error = HsaError::Status {
            call: "the queue",
            status,
            text: text.clone(),
        };
        if sys::is_kernel_fault(status) {
            let mut fault = Fault::new(f.kernel.clone(), format!("{text} (status {status:#x})"));
            let faults = MEMORY_FAULTS.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(m) = faults
                .iter()
                .rev()
                .find(|m| m.seq > f.fault_seq && m.agent == self.agent.handle.handle)
            {
                fault = fault.address(m.address);
            }
            RuntimeError::Fault(Box::new(fault.caused_by(error)))
        } else {
            RuntimeError::device(
                format!("the queue refused the dispatch of kernel `{}`", f.kernel),
                error,
            )
        }
    }
}

impl Drop for HsaDevice {
    fn drop(&mut self) {
        // The queue goes first (stopping anything still running), then what the dispatches
        // held, then (field order) the runtime.
        if let Ok(mut q) = self.queue.lock() {
            q.take();
        }
        if let Ok(mut f) = self.inflight.lock() {
            f.clear();
        }
    }
}

impl Device for HsaDevice {
    fn name(&self) -> String {
        format!(
            "{} (HSA agent via {})",
            self.agent.name,
            self.library().display()
        )
    }

    fn alloc(&self, bytes: u64) -> Result<DevicePtr, RuntimeError> {
        let size = usize::try_from(bytes).map_err(|_| RuntimeError::Alloc {
            bytes,
            source: "more bytes than the host's address space".into(),
        })?;
        let api = self.api();
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `ptr` receives the allocation; flags 0.
        api.check("hsa_amd_memory_pool_allocate", unsafe {
            (api.hsa_amd_memory_pool_allocate)(self.device_pool, size, 0, &mut ptr)
        })
        .map_err(|e| RuntimeError::Alloc {
            bytes,
            source: Box::new(e),
        })?;
        Ok(DevicePtr(ptr as u64))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), RuntimeError> {
        let api = self.api();
        // SAFETY: the runtime checks that `ptr` is one of its allocations and reports it if not.
        api.check("hsa_amd_memory_pool_free", unsafe {
            (api.hsa_amd_memory_pool_free)(ptr.0 as *mut c_void)
        })
        .map_err(|e| RuntimeError::Memory {
            address: ptr.0,
            source: Box::new(e),
        })
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), RuntimeError> {
        if src.is_empty() {
            return Ok(());
        }
        let api = self.api();
        let mem = |e: HsaError| RuntimeError::Memory {
            address: dst.0,
            source: Box::new(e),
        };
        let chunk = src.len().min(STAGING_BYTES);
        let staging = PoolAlloc::new(api, self.kernarg_pool, chunk).map_err(mem)?;
        staging.allow(self.agent.handle).map_err(mem)?;
        for (i, piece) in src.chunks(chunk).enumerate() {
            // SAFETY: the staging buffer is host-accessible system memory of `chunk` bytes and
            // `piece` is at most that long; the regions are distinct allocations.
            unsafe {
                std::ptr::copy_nonoverlapping(piece.as_ptr(), staging.ptr.cast(), piece.len())
            };
            let at = dst.0.wrapping_add((i * chunk) as u64);
            // SAFETY: the runtime checks both ranges and returns a status for a bad one.
            api.check("hsa_memory_copy", unsafe {
                (api.hsa_memory_copy)(at as *mut c_void, staging.ptr, piece.len())
            })
            .map_err(mem)?;
        }
        Ok(())
    }

    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), RuntimeError> {
        if dst.is_empty() {
            return Ok(());
        }
        let api = self.api();
        let mem = |e: HsaError| RuntimeError::Memory {
            address: src.0,
            source: Box::new(e),
        };
        let chunk = dst.len().min(STAGING_BYTES);
        let staging = PoolAlloc::new(api, self.kernarg_pool, chunk).map_err(mem)?;
        staging.allow(self.agent.handle).map_err(mem)?;
        for (i, piece) in dst.chunks_mut(chunk).enumerate() {
            let at = src.0.wrapping_add((i * chunk) as u64);
            // SAFETY: the runtime checks both ranges and returns a status for a bad one.
            api.check("hsa_memory_copy", unsafe {
                (api.hsa_memory_copy)(staging.ptr, at as *const c_void, piece.len())
            })
            .map_err(mem)?;
            // SAFETY: the copy completed into the staging buffer of at least `piece.len()`
            // bytes; the regions are distinct.
            unsafe {
                std::ptr::copy_nonoverlapping(staging.ptr.cast(), piece.as_mut_ptr(), piece.len())
            };
        }
        Ok(())
    }

    fn load(&self, code_object: &[u8]) -> Result<Module, RuntimeError> {
        let co = Arc::new(CodeObject::parse(code_object)?);
        let api = self.api();
        let load = |e: HsaError| RuntimeError::Load(Box::new(e));
        let mut m = HsaModule {
            rt: self.rt.clone(),
            reader: None,
            executable: None,
            _bytes: code_object.into(),
            kernels: HashMap::new(),
        };
        let mut reader = sys::CodeObjectReader::default();
        // SAFETY: the reader reads `_bytes`, which the module keeps until after it destroys
        // the reader.
        api.check("hsa_code_object_reader_create_from_memory", unsafe {
            (api.hsa_code_object_reader_create_from_memory)(
                m._bytes.as_ptr().cast(),
                m._bytes.len(),
                &mut reader,
            )
        })
        .map_err(load)?;
        m.reader = Some(reader);
        let mut exe = sys::Executable::default();
        // SAFETY: no options (null); `exe` receives the handle.
        api.check("hsa_executable_create_alt", unsafe {
            (api.hsa_executable_create_alt)(
                self.agent.profile,
                sys::DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT,
                std::ptr::null(),
                &mut exe,
            )
        })
        .map_err(load)?;
        m.executable = Some(exe);
        let mut loaded = sys::LoadedCodeObject::default();
        // SAFETY: live executable and reader of this runtime; no options.
        api.check("hsa_executable_load_agent_code_object", unsafe {
            (api.hsa_executable_load_agent_code_object)(
                exe,
                self.agent.handle,
                reader,
                std::ptr::null(),
                &mut loaded,
            )
        })
        .map_err(load)?;
        // SAFETY: live executable; no options.
        api.check("hsa_executable_freeze", unsafe {
            (api.hsa_executable_freeze)(exe, std::ptr::null())
        })
        .map_err(load)?;
        for k in &co.kernels {
            let name = c_name(&k.meta.symbol);
            let mut symbol = sys::ExecutableSymbol::default();
            // SAFETY: NUL-terminated name; the agent the code object was loaded for.
            api.check("hsa_executable_get_symbol_by_name", unsafe {
                (api.hsa_executable_get_symbol_by_name)(
                    exe,
                    name.as_ptr(),
                    &self.agent.handle,
                    &mut symbol,
                )
            })
            .map_err(load)?;
            let get = |attribute: u32, out: *mut c_void| {
                // SAFETY: each caller passes a buffer of the attribute's type.
                api.check("hsa_executable_symbol_get_info", unsafe {
                    (api.hsa_executable_symbol_get_info)(symbol, attribute, out)
                })
            };
            let mut s = KernelSymbol {
                object: 0,
                kernarg_size: 0,
                group_size: 0,
                private_size: 0,
            };
            get(
                sys::EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT,
                (&mut s.object as *mut u64).cast(),
            )
            .map_err(load)?;
            for (attribute, out) in [
                (
                    sys::EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE,
                    &mut s.kernarg_size,
                ),
                (
                    sys::EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE,
                    &mut s.group_size,
                ),
                (
                    sys::EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE,
                    &mut s.private_size,
                ),
            ] {
                get(attribute, (out as *mut u32).cast()).map_err(load)?;
            }
            m.kernels.insert(k.name().to_string(), s);
        }
        Ok(Module::new(self.id, co, m))
    }

    fn dispatch(
        &self,
        module: &Module,
        kernel: &str,
        config: &LaunchConfig,
        kernargs: &[u8],
    ) -> Result<Signal, RuntimeError> {
        let loaded: &HsaModule = module.handle(self.id)?;
        let meta = module.kernel(kernel)?;
        let symbol = *loaded
            .kernels
            .get(kernel)
            .ok_or_else(|| RuntimeError::no_such_kernel(module.code_object(), kernel))?;
        config.check(meta.meta.max_flat_workgroup_size)?;
        let group = symbol
            .group_size
            .checked_add(config.dynamic_lds)
            .ok_or_else(|| {
                RuntimeError::Config(format!(
                    "{} bytes of static and {} of dynamic LDS overflow 32 bits",
                    symbol.group_size, config.dynamic_lds
                ))
            })?;
        let api = self.api();
        let hsa = |what: &'static str| move |e: HsaError| Self::hsa(what, e);
        let segment = kernargs.len().max(symbol.kernarg_size as usize).max(16);
        let karg = PoolAlloc::new(api, self.kernarg_pool, segment)
            .map_err(hsa("allocating the kernarg segment"))?;
        karg.allow(self.agent.handle)
            .map_err(hsa("making the kernarg segment visible to the GPU"))?;
        // SAFETY: the kernarg pool is host-accessible memory of at least `segment` >=
        // `kernargs.len()` bytes; the rest stays as allocated (zero-filled by padding below).
        unsafe {
            std::ptr::write_bytes(karg.ptr.cast::<u8>(), 0, segment);
            std::ptr::copy_nonoverlapping(kernargs.as_ptr(), karg.ptr.cast(), kernargs.len());
        }
        let signal = HsaSignal::new(api, 1).map_err(hsa("creating a completion signal"))?;
        let fault_seq = FAULT_SEQ.load(Ordering::SeqCst);
        let (errors, generation) = {
            let mut guard = self.queue()?;
            let Some(q) = guard.as_ref() else {
                return Err(RuntimeError::Poisoned("queue"));
            };
            // SAFETY: `q.queue` is a live queue (destroyed only with the lock held); the runtime
            // filled in its fields at creation.
            let (size, base, doorbell) = unsafe {
                let queue = &*q.queue;
                (queue.size as u64, queue.base_address, queue.doorbell_signal)
            };
            // SAFETY: reserving a slot of a live multi-producer queue.
            let index = unsafe { (api.hsa_queue_add_write_index_scacq_screl)(q.queue, 1) };
            // Wait for the slot to be free (the packet processor has read past it).
            let deadline = Instant::now() + self.timeout;
            // SAFETY: reading the read index of a live queue.
            while index - unsafe { (api.hsa_queue_load_read_index_scacquire)(q.queue) } >= size {
                if Instant::now() > deadline || q.errors.status.load(Ordering::SeqCst) != 0 {
                    // The reserved slot will never be written: the queue cannot go on.
                    if let Ok(mut d) = q.errors.destroyed.lock() {
                        d.get_or_insert_with(|| format!("no slot for kernel `{kernel}` freed up"));
                    }
                    guard.take();
                    return Err(RuntimeError::Timeout {
                        kernel: kernel.to_string(),
                        waited: self.timeout,
                    });
                }
                std::thread::yield_now();
            }
            let slot = base
                .cast::<sys::KernelDispatchPacket>()
                .wrapping_add((index % size) as usize);
            let grid = config.grid_work_items();
            let header = (sys::PACKET_TYPE_KERNEL_DISPATCH << sys::PACKET_HEADER_TYPE)
                | (1 << sys::PACKET_HEADER_BARRIER)
                | (sys::FENCE_SCOPE_SYSTEM << sys::PACKET_HEADER_SCACQUIRE_FENCE_SCOPE)
                | (sys::FENCE_SCOPE_SYSTEM << sys::PACKET_HEADER_SCRELEASE_FENCE_SCOPE);
            let setup = config.dimensions() << sys::KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS;
            // SAFETY: `slot` is the reserved slot of the ring (base + index mod size, in
            // bounds); the packet processor does not read it before the header says
            // KERNEL_DISPATCH. The body is written first; the header and setup (the first 32
            // bits, 4-aligned since the ring is 64-byte aligned) last, with a release store,
            // so the processor sees the whole body once it sees the header.
            unsafe {
                use std::ptr::addr_of_mut;
                addr_of_mut!((*slot).workgroup_size_x).write(config.block[0] as u16);
                addr_of_mut!((*slot).workgroup_size_y).write(config.block[1] as u16);
                addr_of_mut!((*slot).workgroup_size_z).write(config.block[2] as u16);
                addr_of_mut!((*slot).reserved0).write(0);
                addr_of_mut!((*slot).grid_size_x).write(grid[0]);
                addr_of_mut!((*slot).grid_size_y).write(grid[1]);
                addr_of_mut!((*slot).grid_size_z).write(grid[2]);
                addr_of_mut!((*slot).private_segment_size).write(symbol.private_size);
                addr_of_mut!((*slot).group_segment_size).write(group);
                addr_of_mut!((*slot).kernel_object).write(symbol.object);
                addr_of_mut!((*slot).kernarg_address).write(karg.ptr);
                addr_of_mut!((*slot).reserved2).write(0);
                addr_of_mut!((*slot).completion_signal).write(signal.signal);
                let word = &*(slot as *const AtomicU32);
                word.store(header as u32 | (setup as u32) << 16, Ordering::Release);
                (api.hsa_signal_store_screlease)(doorbell, index as i64);
            }
            (q.errors.clone(), q.generation)
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.inflight
            .lock()
            .map_err(|_| RuntimeError::Poisoned("dispatch table"))?
            .insert(
                id,
                InFlight {
                    kernel: kernel.to_string(),
                    signal,
                    _kernargs: karg,
                    _module: module.clone(),
                    errors,
                    generation,
                    start: Instant::now(),
                    fault_seq,
                },
            );
        Ok(Signal::from_raw(id))
    }

    fn wait(&self, signal: Signal) -> Result<LaunchReport, RuntimeError> {
        let f = self
            .inflight
            .lock()
            .map_err(|_| RuntimeError::Poisoned("dispatch table"))?
            .remove(&signal.raw())
            .ok_or(RuntimeError::UnknownSignal(signal.raw()))?;
        let api = self.api();
        let step = Duration::from_millis(20);
        loop {
            let left = self.timeout.saturating_sub(f.start.elapsed());
            // SAFETY: a live signal of this runtime; the wait is bounded by the hint and we
            // re-check after it returns (it may return early).
            let value = unsafe {
                (api.hsa_signal_wait_scacquire)(
                    f.signal.signal,
                    sys::SIGNAL_CONDITION_LT,
                    1,
                    self.ticks(left.min(step)),
                    sys::WAIT_STATE_BLOCKED,
                )
            };
            if value < 1 {
                return Ok(LaunchReport {
                    wall: self.dispatch_time(&f)?,
                    stats: None,
                });
            }
            let status = f.errors.status.load(Ordering::SeqCst);
            if status != 0 {
                let e = self.queue_error(&f, status);
                self.abandon_queue(f.generation, format!("it reported status {status:#x}"));
                return Err(e);
            }
            if let Ok(d) = f.errors.destroyed.lock()
                && let Some(why) = d.as_ref()
            {
                return Err(RuntimeError::device(
                    format!("dispatching kernel `{}`", f.kernel),
                    format!("the queue was destroyed before the kernel ran: {why}"),
                ));
            }
            if self
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
            {
                self.abandon_queue(
                    f.generation,
                    format!("kernel `{}` was interrupted", f.kernel),
                );
                return Err(RuntimeError::Interrupted);
            }
            if f.start.elapsed() >= self.timeout {
                // Destroying the queue stops the hung kernel before its memory is released.
                self.abandon_queue(
                    f.generation,
                    format!(
                        "kernel `{}` did not finish within {:.1} s",
                        f.kernel,
                        self.timeout.as_secs_f64()
                    ),
                );
                return Err(RuntimeError::Timeout {
                    kernel: f.kernel.clone(),
                    waited: f.start.elapsed(),
                });
            }
        }
    }
}
