//! tilegen-hsa-emu: an HSA runtime library over the gfx950 emulator.
//!
//! Built as `libtilegen_hsa_emu.so`, it exports the HSA C API (`hsa.h`, `hsa_ext_amd.h`,
//! `hsa_ext_image.h`) that tilegen's `HsaDevice`, ROCr's samples, rocminfo and HIP call, with
//! HSA's signatures and status codes, linked as ROCr is (SONAME `libhsa-runtime64.so.1`, every
//! symbol in version node `ROCR_1`), so an unmodified HSA program runs without a GPU: install
//! it under ROCr's name (`cargo xtask hsa-emu-install DIR`) and put DIR on `LD_LIBRARY_PATH`,
//! or point `TILEGEN_HSA_LIB` at it. It is how CI proves the HSA path end to end.
//!
//! What it models (values are what ROCr reports for an MI355X and its host):
//! - two agents: a full-profile CPU, and a base-profile GPU named `gfx950` with 256 compute
//!   units and ISA `amdgcn-amd-amdhsa--gfx950:sramecc+:xnack-`;
//! - memory pools (and regions, the same objects): the CPU's fine-grained, kernarg and
//!   coarse-grained system pools, and the GPU's coarse-grained pool (the emulator's device
//!   memory, reached with copies), fine-grained pool and group segment. System and
//!   fine-grained allocations are host-visible: the host pointer is the address kernels use
//!   (see the `memory` module for how the two copies are kept in step around dispatches);
//!   `hsa_amd_memory_lock` gives the application's own memory such an address too;
//! - user-mode queues: the application reserves a slot, writes an AQL packet, publishes its
//!   header and rings the doorbell; a processor thread per queue reads the packets after the
//!   doorbell and runs kernel dispatches on the emulator (barrier-AND packets wait for their
//!   signals), decrementing the completion signal when the kernel is done;
//! - code objects v4, v5 and v6: readers from memory and files (and the legacy deserialized
//!   objects), executables loaded for the gfx950 agent and frozen, kernel symbols named
//!   `name.kd` (kernel object, kernarg, group and private segment sizes);
//! - asynchronous copies and fills, locked memory, pointer information, and profiling: a
//!   profiled kernel dispatch's end is *modeled*: its start is the host time the packet was
//!   taken and its end lies the MI355X timing model's predicted kernel time later
//!   (`tilegen_timing::predict`, sampled rounds, default parameters, launch overhead left
//!   out), predicted after the functional run on the dispatch's own code object, grid and
//!   kernarg over its memory as the kernel found it (the kernel's results are put back
//!   after the model's run); a profiled copy's
//!   start and end are host times; both in system timestamp ticks;
//! - errors: misuse returns HSA's statuses (a bad queue, an unknown symbol, freed memory, a
//!   packet whose kernel object is no kernel), and a kernel that faults stops its queue with an
//!   error status reported to the queue's callback (memory faults also go to the system event
//!   handlers with their address); `hsa_status_string` of the status then carries the
//!   emulator's fault text (kernel, workgroup, wave, PC, instruction, cause).
//!
//! Settings (read at the first `hsa_init`): `TILEGEN_HSA_EMU_INSTRUCTION_BUDGET` (instructions
//! a wave may execute before it is stopped as an endless loop; 0 for no limit) and
//! `TILEGEN_HSA_EMU_MAX_MEMORY` (bytes of device memory), `TILEGEN_HSA_EMU_MODELED_TIMING`
//! (0: profiled dispatches carry host times around the emulation instead of the model's,
//! which spares the model's run; on by default).
//!
//! What it does not model: host and kernel sharing memory *while* a kernel runs (host-visible
//! memory is reconciled at dispatch boundaries); partial workgroups; agent dispatch and
//! barrier-OR packets; images and samplers, IPC, SVM and graphics interop (refused with HSA's
//! statuses); extension function tables.
#![deny(missing_docs)]

mod ext;
mod loader;
mod memory;
mod queue;
mod signal;
mod state;
mod status;

// The exported entry points: `hsa_*` symbols in ROCr's version node, each jumping to the
// Rust function of its name (see build.rs).
include!(concat!(env!("OUT_DIR"), "/entry_points.rs"));

use std::ffi::{CStr, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};

use tilegen_hsa::sys::{self, Status};

use state::{CPU_AGENT, GPU_AGENT, TICKS_PER_SECOND, lock, put, runtime};
use status::fail;

/// Runs an entry point, turning a panic into `HSA_STATUS_ERROR` (a panic must not unwind into
/// C).
pub(crate) fn entry(f: impl FnOnce() -> Result<Status, Status>) -> Status {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(s)) | Ok(Err(s)) => s,
        Err(_) => fail(
            sys::STATUS_ERROR,
            "internal error: the emulator's runtime panicked",
        ),
    }
}

/// Runs an entry point that returns a value, with `fallback` for a panic.
pub(crate) fn value<T>(fallback: T, f: impl FnOnce() -> T) -> T {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or(fallback)
}

pub(crate) fn null_argument(what: &str) -> Status {
    fail(
        sys::STATUS_ERROR_INVALID_ARGUMENT,
        format!("{what} is null"),
    )
}

/// `hsa_init`: initializes the runtime (the first call) and counts a reference.
pub extern "C" fn hsa_init() -> Status {
    entry(|| Ok(state::init()))
}

/// `hsa_shut_down`: drops a reference; the last one stops every queue and frees everything.
pub extern "C" fn hsa_shut_down() -> Status {
    entry(|| Ok(state::shut_down()))
}

/// `hsa_status_string`.
///
/// # Safety
/// `status_string` must be valid for writing a pointer. The text stays valid for the life of
/// the process.
pub unsafe extern "C" fn hsa_status_string(
    status: Status,
    status_string: *mut *const c_char,
) -> Status {
    entry(|| {
        if status_string.is_null() {
            return Err(null_argument("status_string"));
        }
        let text = status::text(status).ok_or_else(|| {
            fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("{status:#x} is not a status code"),
            )
        })?;
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { status_string.write(text) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_system_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub unsafe extern "C" fn hsa_system_get_info(attribute: u32, value: *mut c_void) -> Status {
    entry(|| {
        runtime()?;
        if value.is_null() {
            return Err(null_argument("value"));
        }
        let ticks = state::timestamp();
        // SAFETY (every `put`): the caller's buffer is of the attribute's documented type.
        Ok(unsafe {
            match attribute {
                0 | 1 => put::<u16>(value, 1),
                2 => put::<u64>(value, ticks),
                sys::SYSTEM_INFO_TIMESTAMP_FREQUENCY => put::<u64>(value, TICKS_PER_SECOND),
                4 => put::<u64>(value, u64::MAX),
                5 => put::<u32>(value, 0),
                6 => put::<u32>(value, 1),
                // HSA_SYSTEM_INFO_EXTENSIONS: no extension tables are provided.
                7 => put::<[u8; 128]>(value, [0; 128]),
                // HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED, _SVM_ACCESSIBLE_BY_DEFAULT: the
                // hsa_amd_svm_* calls are refused; the emulator cannot reach arbitrary host
                // memory.
                0x201 | 0x202 => put::<bool>(value, false),
                // HSA_AMD_SYSTEM_INFO_MWAITX_ENABLED: waits sleep on a condition variable.
                0x203 => put::<bool>(value, false),
                // HSA_AMD_SYSTEM_INFO_DMABUF_SUPPORTED, _VIRTUAL_MEM_API_SUPPORTED: neither API
                // is exported.
                0x204 | 0x205 => put::<bool>(value, false),
                // HSA_AMD_SYSTEM_INFO_XNACK_ENABLED: the emulated GPU does not retry faults.
                0x206 => put::<bool>(value, false),
                // HSA_AMD_SYSTEM_INFO_EXT_VERSION_MAJOR, _MINOR: the hsa_ext_amd.h interface
                // version whose calls this library exports (1.0, ROCm 5.2's; later additions
                // such as the virtual-memory API of 1.6 are not exported).
                0x207 => put::<u16>(value, 1),
                0x208 => put::<u16>(value, 0),
                other => fail(
                    sys::STATUS_ERROR_INVALID_ARGUMENT,
                    format!("system attribute {other:#x} is not one this runtime answers"),
                ),
            }
        })
    })
}

/// `hsa_iterate_agents`: the CPU agent, then the gfx950 agent.
///
/// # Safety
/// `callback` must be safe to call with each agent and `data`.
pub unsafe extern "C" fn hsa_iterate_agents(
    callback: Option<sys::AgentCallback>,
    data: *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        let cb = callback.ok_or_else(|| null_argument("callback"))?;
        for agent in [CPU_AGENT, GPU_AGENT] {
            // SAFETY: the caller's callback and data, as the C API passes them.
            let s = unsafe { cb(agent, data) };
            if s != sys::STATUS_SUCCESS {
                return Ok(s);
            }
        }
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_agent_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub unsafe extern "C" fn hsa_agent_get_info(
    agent: sys::Agent,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        // SAFETY: the caller's contract.
        Ok(unsafe { state::agent_info(agent, attribute, value) })
    })
}

/// `hsa_amd_agent_iterate_memory_pools`: the CPU's three system pools, or the GPU's
/// coarse-grained, fine-grained and group pools.
///
/// # Safety
/// `callback` must be safe to call with each pool and `data`.
pub unsafe extern "C" fn hsa_amd_agent_iterate_memory_pools(
    agent: sys::Agent,
    callback: Option<sys::PoolCallback>,
    data: *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        let cb = callback.ok_or_else(|| null_argument("callback"))?;
        for p in memory::agent_pools(agent)? {
            // SAFETY: the caller's callback and data.
            let s = unsafe { cb(p.handle, data) };
            if s != sys::STATUS_SUCCESS {
                return Ok(s);
            }
        }
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_amd_memory_pool_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub unsafe extern "C" fn hsa_amd_memory_pool_get_info(
    pool: sys::MemoryPool,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        // SAFETY: the caller's contract.
        Ok(unsafe { memory::pool_info(&rt, pool.handle, attribute, value) })
    })
}

/// `hsa_amd_memory_pool_allocate`: host-visible memory from the system pools and the gfx950's
/// fine-grained pool, device memory from its coarse-grained pool.
///
/// # Safety
/// `ptr` must be valid for writing a pointer.
pub unsafe extern "C" fn hsa_amd_memory_pool_allocate(
    pool: sys::MemoryPool,
    size: usize,
    _flags: u32,
    ptr: *mut *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if ptr.is_null() {
            return Err(null_argument("ptr"));
        }
        let p = memory::allocate(&rt, pool.handle, size)?;
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { ptr.write(p as *mut c_void) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_amd_memory_pool_free`: refuses an address that is not a live allocation.
pub extern "C" fn hsa_amd_memory_pool_free(ptr: *mut c_void) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(memory::free(&rt, ptr as u64))
    })
}

/// `hsa_amd_agents_allow_access`: every agent may access every allocation here; the arguments
/// are checked.
///
/// # Safety
/// `agents` must point to `num_agents` agents.
pub unsafe extern "C" fn hsa_amd_agents_allow_access(
    num_agents: u32,
    agents: *const sys::Agent,
    _flags: *const u32,
    ptr: *const c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if num_agents == 0 || agents.is_null() || ptr.is_null() {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                "no agents, or a null agent list or pointer",
            ));
        }
        // SAFETY: the caller's contract.
        let agents = unsafe { std::slice::from_raw_parts(agents, num_agents as usize) };
        Ok(state::allow_access(&rt, agents, ptr as u64))
    })
}

/// `hsa_memory_copy` between host memory and the emulator's device memory (either way, or
/// within one).
///
/// # Safety
/// Host ranges must be valid for `size` bytes.
pub unsafe extern "C" fn hsa_memory_copy(
    dst: *mut c_void,
    src: *const c_void,
    size: usize,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        // SAFETY: the caller's contract.
        Ok(unsafe { memory::copy(&rt, dst as u64, src as u64, size) })
    })
}

/// `hsa_amd_register_system_event_handler`: memory faults of dispatched kernels are reported
/// to every handler.
pub extern "C" fn hsa_amd_register_system_event_handler(
    callback: Option<sys::SystemEventCallback>,
    data: *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        let cb = callback.ok_or_else(|| null_argument("callback"))?;
        lock(&rt.handlers).push((cb, data as usize));
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_queue_create`: a queue of the gfx950 agent with its own packet processor thread.
///
/// # Safety
/// `queue` must be valid for writing a pointer; `callback` must be safe to call (from the
/// processor thread) with `data`.
pub unsafe extern "C" fn hsa_queue_create(
    agent: sys::Agent,
    size: u32,
    queue_type: u32,
    callback: Option<sys::QueueCallback>,
    data: *mut c_void,
    _private_segment_size: u32,
    _group_segment_size: u32,
    queue: *mut *mut sys::Queue,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if queue.is_null() {
            return Err(null_argument("queue"));
        }
        let q = queue::create(&rt, agent, size, queue_type, callback, data)?;
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { queue.write(q) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_queue_destroy`: stops the queue's processor (a running kernel is cancelled) and
/// releases it; refuses a pointer that is not a live queue.
pub extern "C" fn hsa_queue_destroy(queue: *mut sys::Queue) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(queue::destroy(&rt, queue))
    })
}

/// `hsa_queue_load_read_index_scacquire` (0 for a pointer that is not a live queue).
pub extern "C" fn hsa_queue_load_read_index_scacquire(queue: *const sys::Queue) -> u64 {
    value(0, || {
        runtime()
            .ok()
            .and_then(|rt| queue::get(&rt, queue))
            .map_or(0, |q| q.read_index())
    })
}

/// `hsa_queue_load_read_index_relaxed`.
pub extern "C" fn hsa_queue_load_read_index_relaxed(queue: *const sys::Queue) -> u64 {
    hsa_queue_load_read_index_scacquire(queue)
}

/// `hsa_queue_load_write_index_relaxed` (0 for a pointer that is not a live queue).
pub extern "C" fn hsa_queue_load_write_index_relaxed(queue: *const sys::Queue) -> u64 {
    value(0, || {
        runtime()
            .ok()
            .and_then(|rt| queue::get(&rt, queue))
            .map_or(0, |q| {
                q.write_index().load(std::sync::atomic::Ordering::SeqCst)
            })
    })
}

/// `hsa_queue_add_write_index_scacq_screl`: reserves `value` slots and returns the index of
/// the first (`u64::MAX` for a pointer that is not a live queue).
pub extern "C" fn hsa_queue_add_write_index_scacq_screl(
    queue: *const sys::Queue,
    value: u64,
) -> u64 {
    self::value(u64::MAX, || {
        runtime()
            .ok()
            .and_then(|rt| queue::get(&rt, queue))
            .map_or(u64::MAX, |q| {
                q.write_index()
                    .fetch_add(value, std::sync::atomic::Ordering::SeqCst)
            })
    })
}

/// `hsa_queue_add_write_index_relaxed`.
pub extern "C" fn hsa_queue_add_write_index_relaxed(queue: *const sys::Queue, value: u64) -> u64 {
    hsa_queue_add_write_index_scacq_screl(queue, value)
}

/// `hsa_signal_create`.
///
/// # Safety
/// `signal` must be valid for writing a signal.
pub unsafe extern "C" fn hsa_signal_create(
    initial_value: i64,
    num_consumers: u32,
    consumers: *const sys::Agent,
    signal: *mut sys::Signal,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if signal.is_null() || (num_consumers > 0 && consumers.is_null()) {
            return Err(null_argument("signal (or a non-empty consumer list)"));
        }
        let s = signal::create(&rt, initial_value);
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { signal.write(s) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_signal_destroy`: refuses an unknown signal and a queue's doorbell.
pub extern "C" fn hsa_signal_destroy(signal: sys::Signal) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(signal::destroy(&rt, signal))
    })
}

/// Runs `f` on a live signal; `fallback` for an unknown one (these calls have no status).
pub(crate) fn with_signal<T>(
    signal: sys::Signal,
    fallback: T,
    f: impl FnOnce(&signal::SignalObj) -> T,
) -> T {
    catch_unwind(AssertUnwindSafe(|| {
        let rt = runtime().ok()?;
        let s = signal::get(&rt, signal.handle)?;
        // The runtime is not held while waiting: a shut-down may proceed.
        drop(rt);
        Some(f(&s))
    }))
    .ok()
    .flatten()
    .unwrap_or(fallback)
}

/// `hsa_signal_store_screlease` (ignored for an unknown signal).
pub extern "C" fn hsa_signal_store_screlease(signal: sys::Signal, value: i64) {
    with_signal(signal, (), |s| s.store(value));
}

/// `hsa_signal_store_relaxed`.
pub extern "C" fn hsa_signal_store_relaxed(signal: sys::Signal, value: i64) {
    hsa_signal_store_screlease(signal, value);
}

/// `hsa_signal_subtract_screlease` (ignored for an unknown signal).
pub extern "C" fn hsa_signal_subtract_screlease(signal: sys::Signal, value: i64) {
    with_signal(signal, (), |s| s.add(value.wrapping_neg()));
}

/// `hsa_signal_load_scacquire` (0 for an unknown signal).
pub extern "C" fn hsa_signal_load_scacquire(signal: sys::Signal) -> i64 {
    with_signal(signal, 0, |s| s.load())
}

/// `hsa_signal_load_relaxed`.
pub extern "C" fn hsa_signal_load_relaxed(signal: sys::Signal) -> i64 {
    hsa_signal_load_scacquire(signal)
}

/// `hsa_signal_wait_scacquire`: blocks until the condition holds or `timeout_hint` ticks (of
/// `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY`) pass; returns the value last seen (0 for an unknown
/// signal or condition).
pub extern "C" fn hsa_signal_wait_scacquire(
    signal: sys::Signal,
    condition: u32,
    compare_value: i64,
    timeout_hint: u64,
    _wait_state_hint: u32,
) -> i64 {
    with_signal(signal, 0, |s| {
        match signal::condition(condition, compare_value) {
            Some(cond) => s.wait_until(cond, signal::deadline(timeout_hint), || false),
            None => 0,
        }
    })
}

/// `hsa_signal_wait_relaxed`.
pub extern "C" fn hsa_signal_wait_relaxed(
    signal: sys::Signal,
    condition: u32,
    compare_value: i64,
    timeout_hint: u64,
    wait_state_hint: u32,
) -> i64 {
    hsa_signal_wait_scacquire(
        signal,
        condition,
        compare_value,
        timeout_hint,
        wait_state_hint,
    )
}

/// `hsa_code_object_reader_create_from_memory` (the bytes are copied).
///
/// # Safety
/// `code_object` must point to `size` bytes; `code_object_reader` must be valid for writing.
pub unsafe extern "C" fn hsa_code_object_reader_create_from_memory(
    code_object: *const c_void,
    size: usize,
    code_object_reader: *mut sys::CodeObjectReader,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if code_object.is_null() || size == 0 || code_object_reader.is_null() {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                "a null code object or reader pointer, or a size of 0",
            ));
        }
        // SAFETY: the caller's contract.
        let bytes = unsafe { std::slice::from_raw_parts(code_object.cast::<u8>(), size) };
        let r = loader::reader_create(&rt, bytes);
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { code_object_reader.write(r) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_code_object_reader_destroy`.
pub extern "C" fn hsa_code_object_reader_destroy(
    code_object_reader: sys::CodeObjectReader,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(loader::reader_destroy(&rt, code_object_reader))
    })
}

/// `hsa_executable_create_alt`.
///
/// # Safety
/// `executable` must be valid for writing.
pub unsafe extern "C" fn hsa_executable_create_alt(
    profile: u32,
    _default_float_rounding_mode: u32,
    _options: *const c_char,
    executable: *mut sys::Executable,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if executable.is_null() {
            return Err(null_argument("executable"));
        }
        if profile > 1 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("profile {profile}"),
            ));
        }
        let e = loader::executable_create(&rt);
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { executable.write(e) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_executable_load_agent_code_object`: parses the reader's code object and loads its
/// image into device memory.
///
/// # Safety
/// `loaded_code_object` must be null or valid for writing.
pub unsafe extern "C" fn hsa_executable_load_agent_code_object(
    executable: sys::Executable,
    agent: sys::Agent,
    code_object_reader: sys::CodeObjectReader,
    _options: *const c_char,
    loaded_code_object: *mut sys::LoadedCodeObject,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        let s = loader::load(&rt, executable, agent, code_object_reader);
        if s == sys::STATUS_SUCCESS && !loaded_code_object.is_null() {
            // SAFETY: the caller's pointer, checked non-null.
            unsafe {
                loaded_code_object.write(sys::LoadedCodeObject {
                    handle: rt.handle(),
                })
            };
        }
        Ok(s)
    })
}

/// `hsa_executable_freeze`: the executable's kernels become dispatchable.
pub extern "C" fn hsa_executable_freeze(
    executable: sys::Executable,
    _options: *const c_char,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(loader::freeze(&rt, executable))
    })
}

/// `hsa_executable_destroy`.
pub extern "C" fn hsa_executable_destroy(executable: sys::Executable) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(loader::executable_destroy(&rt, executable))
    })
}

/// `hsa_executable_get_symbol_by_name` (`name.kd` for a kernel).
///
/// # Safety
/// `symbol_name` must be a NUL-terminated string; `agent` null or valid; `symbol` valid for
/// writing.
pub unsafe extern "C" fn hsa_executable_get_symbol_by_name(
    executable: sys::Executable,
    symbol_name: *const c_char,
    agent: *const sys::Agent,
    symbol: *mut sys::ExecutableSymbol,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if symbol_name.is_null() || symbol.is_null() {
            return Err(null_argument("symbol_name or symbol"));
        }
        // SAFETY: the caller's contract.
        let name = unsafe { CStr::from_ptr(symbol_name) }.to_string_lossy();
        // SAFETY: the caller's contract (null or a valid agent).
        let agent = unsafe { agent.as_ref() }.copied();
        let s = loader::symbol_by_name(&rt, executable, &name, agent)?;
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { symbol.write(s) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_executable_symbol_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub unsafe extern "C" fn hsa_executable_symbol_get_info(
    symbol: sys::ExecutableSymbol,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        // SAFETY: the caller's contract.
        Ok(unsafe { loader::symbol_info(&rt, symbol, attribute, value) })
    })
}
