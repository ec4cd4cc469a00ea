//! The part of the HSA C API (`hsa.h`, `hsa_ext_amd.h` of ROCm's ROCR-Runtime) that
//! [`HsaDevice`](crate::HsaDevice) uses: types with the C layouts, the constants, and [`Api`],
//! the functions resolved from one library at run time.
//!
//! Everything here is the raw interface: calling through [`Api`] is `unsafe` and follows the C
//! API's rules. It is public for tests and tools that speak HSA directly (a packet the device
//! would never write, a misuse the runtime must refuse).

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::HsaError;

/// `hsa_status_t`.
pub type Status = u32;

/// `HSA_STATUS_SUCCESS`.
pub const STATUS_SUCCESS: Status = 0;
/// `HSA_STATUS_INFO_BREAK`: an iteration callback stopped the iteration.
pub const STATUS_INFO_BREAK: Status = 0x1;
/// `HSA_STATUS_ERROR`.
pub const STATUS_ERROR: Status = 0x1000;
/// `HSA_STATUS_ERROR_INVALID_ARGUMENT`.
pub const STATUS_ERROR_INVALID_ARGUMENT: Status = 0x1001;
/// `HSA_STATUS_ERROR_INVALID_QUEUE_CREATION`.
pub const STATUS_ERROR_INVALID_QUEUE_CREATION: Status = 0x1002;
/// `HSA_STATUS_ERROR_INVALID_ALLOCATION`.
pub const STATUS_ERROR_INVALID_ALLOCATION: Status = 0x1003;
/// `HSA_STATUS_ERROR_INVALID_AGENT`.
pub const STATUS_ERROR_INVALID_AGENT: Status = 0x1004;
/// `HSA_STATUS_ERROR_INVALID_SIGNAL`.
pub const STATUS_ERROR_INVALID_SIGNAL: Status = 0x1006;
/// `HSA_STATUS_ERROR_INVALID_QUEUE`.
pub const STATUS_ERROR_INVALID_QUEUE: Status = 0x1007;
/// `HSA_STATUS_ERROR_OUT_OF_RESOURCES`.
pub const STATUS_ERROR_OUT_OF_RESOURCES: Status = 0x1008;
/// `HSA_STATUS_ERROR_INVALID_PACKET_FORMAT`.
pub const STATUS_ERROR_INVALID_PACKET_FORMAT: Status = 0x1009;
/// `HSA_STATUS_ERROR_NOT_INITIALIZED`.
pub const STATUS_ERROR_NOT_INITIALIZED: Status = 0x100B;
/// `HSA_STATUS_ERROR_INVALID_ISA`.
pub const STATUS_ERROR_INVALID_ISA: Status = 0x100F;
/// `HSA_STATUS_ERROR_INVALID_CODE_OBJECT`.
pub const STATUS_ERROR_INVALID_CODE_OBJECT: Status = 0x1010;
/// `HSA_STATUS_ERROR_INVALID_EXECUTABLE`.
pub const STATUS_ERROR_INVALID_EXECUTABLE: Status = 0x1011;
/// `HSA_STATUS_ERROR_FROZEN_EXECUTABLE`.
pub const STATUS_ERROR_FROZEN_EXECUTABLE: Status = 0x1012;
/// `HSA_STATUS_ERROR_INVALID_SYMBOL_NAME`.
pub const STATUS_ERROR_INVALID_SYMBOL_NAME: Status = 0x1013;
/// `HSA_STATUS_ERROR_EXCEPTION`: the kernel raised a hardware exception.
pub const STATUS_ERROR_EXCEPTION: Status = 0x1016;
/// `HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL`.
pub const STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL: Status = 0x1019;
/// `HSA_STATUS_ERROR_INVALID_CODE_OBJECT_READER`.
pub const STATUS_ERROR_INVALID_CODE_OBJECT_READER: Status = 0x1021;
/// `HSA_STATUS_ERROR_INVALID_MEMORY_POOL` (AMD).
pub const STATUS_ERROR_INVALID_MEMORY_POOL: Status = 40;
/// `HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION` (AMD): an access outside the legal addresses.
pub const STATUS_ERROR_MEMORY_APERTURE_VIOLATION: Status = 41;
/// `HSA_STATUS_ERROR_ILLEGAL_INSTRUCTION` (AMD).
pub const STATUS_ERROR_ILLEGAL_INSTRUCTION: Status = 42;
/// `HSA_STATUS_ERROR_MEMORY_FAULT` (AMD): an access to an inaccessible address.
pub const STATUS_ERROR_MEMORY_FAULT: Status = 43;

/// Whether `status` says a dispatched kernel faulted (rather than that a call was misused).
pub fn is_kernel_fault(status: Status) -> bool {
    matches!(
        status,
        STATUS_ERROR_EXCEPTION
            | STATUS_ERROR_MEMORY_APERTURE_VIOLATION
            | STATUS_ERROR_ILLEGAL_INSTRUCTION
            | STATUS_ERROR_MEMORY_FAULT
    )
}

/// `HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY` (`uint64_t`, Hz).
pub const SYSTEM_INFO_TIMESTAMP_FREQUENCY: u32 = 3;

/// `HSA_AGENT_INFO_NAME` (`char[64]`).
pub const AGENT_INFO_NAME: u32 = 0;
/// `HSA_AGENT_INFO_VENDOR_NAME` (`char[64]`).
pub const AGENT_INFO_VENDOR_NAME: u32 = 1;
/// `HSA_AGENT_INFO_FEATURE` (`hsa_agent_feature_t`).
pub const AGENT_INFO_FEATURE: u32 = 2;
/// `HSA_AGENT_INFO_PROFILE` (`hsa_profile_t`).
pub const AGENT_INFO_PROFILE: u32 = 4;
/// `HSA_AGENT_INFO_WAVEFRONT_SIZE` (`uint32_t`).
pub const AGENT_INFO_WAVEFRONT_SIZE: u32 = 6;
/// `HSA_AGENT_INFO_WORKGROUP_MAX_SIZE` (`uint32_t`).
pub const AGENT_INFO_WORKGROUP_MAX_SIZE: u32 = 8;
/// `HSA_AGENT_INFO_QUEUE_MIN_SIZE` (`uint32_t`).
pub const AGENT_INFO_QUEUE_MIN_SIZE: u32 = 13;
/// `HSA_AGENT_INFO_QUEUE_MAX_SIZE` (`uint32_t`).
pub const AGENT_INFO_QUEUE_MAX_SIZE: u32 = 14;
/// `HSA_AGENT_INFO_DEVICE` (`hsa_device_type_t`).
pub const AGENT_INFO_DEVICE: u32 = 17;
/// `HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT` (`uint32_t`).
pub const AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: u32 = 0xA002;
/// `HSA_AMD_AGENT_INFO_PRODUCT_NAME` (`char[64]`).
pub const AMD_AGENT_INFO_PRODUCT_NAME: u32 = 0xA009;

/// `HSA_AGENT_FEATURE_KERNEL_DISPATCH`.
pub const AGENT_FEATURE_KERNEL_DISPATCH: u32 = 1;
/// `HSA_DEVICE_TYPE_CPU`.
pub const DEVICE_TYPE_CPU: u32 = 0;
/// `HSA_DEVICE_TYPE_GPU`.
pub const DEVICE_TYPE_GPU: u32 = 1;
/// `HSA_PROFILE_BASE`.
pub const PROFILE_BASE: u32 = 0;
/// `HSA_DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT`.
pub const DEFAULT_FLOAT_ROUNDING_MODE_DEFAULT: u32 = 0;

/// `HSA_AMD_MEMORY_POOL_INFO_SEGMENT` (`hsa_amd_segment_t`).
pub const AMD_MEMORY_POOL_INFO_SEGMENT: u32 = 0;
/// `HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS` (`uint32_t`).
pub const AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS: u32 = 1;
/// `HSA_AMD_MEMORY_POOL_INFO_SIZE` (`size_t`).
pub const AMD_MEMORY_POOL_INFO_SIZE: u32 = 2;
/// `HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED` (`bool`).
pub const AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: u32 = 5;
/// `HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE` (`size_t`).
pub const AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE: u32 = 6;
/// `HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT` (`size_t`).
pub const AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT: u32 = 7;
/// `HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL` (`bool`).
pub const AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL: u32 = 15;
/// `HSA_AMD_SEGMENT_GLOBAL`.
pub const AMD_SEGMENT_GLOBAL: u32 = 0;
/// `HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT`.
pub const AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT: u32 = 1;
/// `HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED`.
pub const AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED: u32 = 2;
/// `HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED`.
pub const AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED: u32 = 4;

/// `HSA_QUEUE_TYPE_MULTI`.
pub const QUEUE_TYPE_MULTI: u32 = 0;
/// `HSA_QUEUE_FEATURE_KERNEL_DISPATCH`.
pub const QUEUE_FEATURE_KERNEL_DISPATCH: u32 = 1;

/// `HSA_SIGNAL_CONDITION_EQ`.
pub const SIGNAL_CONDITION_EQ: u32 = 0;
/// `HSA_SIGNAL_CONDITION_NE`.
pub const SIGNAL_CONDITION_NE: u32 = 1;
/// `HSA_SIGNAL_CONDITION_LT`.
pub const SIGNAL_CONDITION_LT: u32 = 2;
/// `HSA_SIGNAL_CONDITION_GTE`.
pub const SIGNAL_CONDITION_GTE: u32 = 3;
/// `HSA_WAIT_STATE_BLOCKED`.
pub const WAIT_STATE_BLOCKED: u32 = 0;
/// `HSA_WAIT_STATE_ACTIVE`.
pub const WAIT_STATE_ACTIVE: u32 = 1;

/// `HSA_PACKET_TYPE_INVALID`: a slot the packet processor must not read yet.
pub const PACKET_TYPE_INVALID: u16 = 1;
/// `HSA_PACKET_TYPE_KERNEL_DISPATCH`.
pub const PACKET_TYPE_KERNEL_DISPATCH: u16 = 2;
/// `HSA_PACKET_TYPE_BARRIER_AND`.
pub const PACKET_TYPE_BARRIER_AND: u16 = 3;
/// Bit offset of the packet type in the header (`HSA_PACKET_HEADER_TYPE`, 8 bits).
pub const PACKET_HEADER_TYPE: u16 = 0;
/// Bit offset of the barrier bit (`HSA_PACKET_HEADER_BARRIER`).
pub const PACKET_HEADER_BARRIER: u16 = 8;
/// Bit offset of the acquire fence scope (`HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE`, 2 bits).
pub const PACKET_HEADER_SCACQUIRE_FENCE_SCOPE: u16 = 9;
/// Bit offset of the release fence scope (`HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE`, 2 bits).
pub const PACKET_HEADER_SCRELEASE_FENCE_SCOPE: u16 = 11;
/// `HSA_FENCE_SCOPE_SYSTEM`.
pub const FENCE_SCOPE_SYSTEM: u16 = 2;
/// Bit offset of the grid dimensions in a kernel dispatch packet's `setup`.
pub const KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS: u16 = 0;

/// `HSA_EXECUTABLE_SYMBOL_INFO_TYPE` (`hsa_symbol_kind_t`).
pub const EXECUTABLE_SYMBOL_INFO_TYPE: u32 = 0;
/// `HSA_EXECUTABLE_SYMBOL_INFO_NAME_LENGTH` (`uint32_t`).
pub const EXECUTABLE_SYMBOL_INFO_NAME_LENGTH: u32 = 1;
/// `HSA_EXECUTABLE_SYMBOL_INFO_NAME` (`char[NAME_LENGTH]`, not NUL-terminated).
pub const EXECUTABLE_SYMBOL_INFO_NAME: u32 = 2;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE` (`uint32_t`).
pub const EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: u32 = 11;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT` (`uint32_t`).
pub const EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT: u32 = 12;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE` (`uint32_t`).
pub const EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: u32 = 13;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE` (`uint32_t`).
pub const EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: u32 = 14;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK` (`bool`).
pub const EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK: u32 = 15;
/// `HSA_EXECUTABLE_SYMBOL_INFO_AGENT` (`hsa_agent_t`).
pub const EXECUTABLE_SYMBOL_INFO_AGENT: u32 = 20;
/// `HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT` (`uint64_t`).
pub const EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: u32 = 22;
/// `HSA_SYMBOL_KIND_KERNEL`.
pub const SYMBOL_KIND_KERNEL: u32 = 1;

/// `HSA_AMD_GPU_MEMORY_FAULT_EVENT`.
pub const AMD_GPU_MEMORY_FAULT_EVENT: u32 = 0;

/// `hsa_agent_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Agent {
    /// Opaque handle.
    pub handle: u64,
}

/// `hsa_signal_t` (handle 0 is "no signal").
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Signal {
    /// Opaque handle.
    pub handle: u64,
}

/// `hsa_amd_memory_pool_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct MemoryPool {
    /// Opaque handle.
    pub handle: u64,
}

/// `hsa_code_object_reader_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CodeObjectReader {
    /// Opaque handle.
    pub handle: u64,
}

/// `hsa_executable_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Executable {
    /// Opaque handle.
    pub handle: u64,
}

/// `hsa_executable_symbol_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ExecutableSymbol {
    /// Opaque handle.
    pub handle: u64,
}

/// `hsa_loaded_code_object_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LoadedCodeObject {
    /// Opaque handle.
    pub handle: u64,
}

/// `hsa_queue_t` (large model): the runtime allocates it; the packet ring is at
/// `base_address`, `size` packets long.
#[repr(C)]
#[derive(Debug)]
pub struct Queue {
    /// `hsa_queue_type32_t`.
    pub queue_type: u32,
    /// Bit-field of `hsa_queue_feature_t`.
    pub features: u32,
    /// The packet ring (`size` slots of 64 bytes).
    pub base_address: *mut c_void,
    /// Rung with the index of the last written packet.
    pub doorbell_signal: Signal,
    /// Slots in the ring (a power of two).
    pub size: u32,
    /// Reserved, 0.
    pub reserved1: u32,
    /// Unique over the process' lifetime.
    pub id: u64,
}

/// `hsa_kernel_dispatch_packet_t` (large model), 64 bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct KernelDispatchPacket {
    /// Type, barrier bit and fence scopes; written last, with a release store.
    pub header: u16,
    /// Grid dimensions (bits 0..2).
    pub setup: u16,
    /// Work-items per workgroup, x.
    pub workgroup_size_x: u16,
    /// Work-items per workgroup, y.
    pub workgroup_size_y: u16,
    /// Work-items per workgroup, z.
    pub workgroup_size_z: u16,
    /// Reserved, 0.
    pub reserved0: u16,
    /// The grid in work-items, x.
    pub grid_size_x: u32,
    /// The grid in work-items, y.
    pub grid_size_y: u32,
    /// The grid in work-items, z.
    pub grid_size_z: u32,
    /// Private (scratch) bytes per work-item.
    pub private_segment_size: u32,
    /// Group (LDS) bytes per workgroup, static plus dynamic.
    pub group_segment_size: u32,
    /// The kernel object (a kernel descriptor's address) from the executable's symbol.
    pub kernel_object: u64,
    /// The kernarg segment.
    pub kernarg_address: *mut c_void,
    /// Reserved, 0.
    pub reserved2: u64,
    /// Decremented when the kernel completes.
    pub completion_signal: Signal,
}

impl Default for KernelDispatchPacket {
    fn default() -> Self {
        KernelDispatchPacket {
            header: 0,
            setup: 0,
            workgroup_size_x: 0,
            workgroup_size_y: 0,
            workgroup_size_z: 0,
            reserved0: 0,
            grid_size_x: 0,
            grid_size_y: 0,
            grid_size_z: 0,
            private_segment_size: 0,
            group_segment_size: 0,
            kernel_object: 0,
            kernarg_address: std::ptr::null_mut(),
            reserved2: 0,
            completion_signal: Signal::default(),
        }
    }
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            queue_type: 0,
            features: 0,
            base_address: std::ptr::null_mut(),
            doorbell_signal: Signal::default(),
            size: 0,
            reserved1: 0,
            id: 0,
        }
    }
}

/// Bytes of an AQL packet.
pub const PACKET_BYTES: usize = 64;
const _: () = assert!(std::mem::size_of::<KernelDispatchPacket>() == PACKET_BYTES);
const _: () = assert!(std::mem::offset_of!(KernelDispatchPacket, kernel_object) == 32);
const _: () = assert!(std::mem::offset_of!(KernelDispatchPacket, completion_signal) == 56);
const _: () = assert!(std::mem::size_of::<Queue>() == 40);
const _: () = assert!(std::mem::offset_of!(Queue, doorbell_signal) == 16);

/// `hsa_amd_gpu_memory_fault_info_t`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AmdMemoryFaultInfo {
    /// The agent where the fault occurred.
    pub agent: Agent,
    /// The address accessed.
    pub virtual_address: u64,
    /// Bit-field of `hsa_amd_memory_fault_reason_t`.
    pub fault_reason_mask: u32,
}

/// `hsa_amd_event_t` (the memory-fault member of its union).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AmdEvent {
    /// `hsa_amd_event_type_t`.
    pub event_type: u32,
    /// Valid when `event_type` is [`AMD_GPU_MEMORY_FAULT_EVENT`].
    pub memory_fault: AmdMemoryFaultInfo,
}

const _: () = assert!(std::mem::offset_of!(AmdEvent, memory_fault) == 8);

/// `hsa_status_t (*)(hsa_agent_t, void*)`.
pub type AgentCallback = unsafe extern "C" fn(Agent, *mut c_void) -> Status;
/// `hsa_status_t (*)(hsa_amd_memory_pool_t, void*)`.
pub type PoolCallback = unsafe extern "C" fn(MemoryPool, *mut c_void) -> Status;
/// `void (*)(hsa_status_t, hsa_queue_t*, void*)`: the queue's error callback.
pub type QueueCallback = unsafe extern "C" fn(Status, *mut Queue, *mut c_void);
/// `hsa_amd_system_event_callback_t`.
pub type SystemEventCallback = unsafe extern "C" fn(*const AmdEvent, *mut c_void) -> Status;

macro_rules! api {
    ($( $(#[$doc:meta])* fn $name:ident($($ty:ty),* $(,)?) $(-> $ret:ty)?; )*) => {
        /// The HSA functions [`HsaDevice`](crate::HsaDevice) calls, resolved from one library
        /// when it is loaded (a missing one is an error naming it). Libraries stay loaded for
        /// the life of the process: a runtime's threads may still run its code.
        pub struct Api {
            path: PathBuf,
            _lib: libloading::Library,
            $( $(#[$doc])* pub $name: unsafe extern "C" fn($($ty),*) $(-> $ret)?, )*
        }

        /// Every symbol [`Api`] resolves.
        pub const SYMBOLS: &[&str] = &[$(stringify!($name)),*];

        impl Api {
            fn resolve(path: PathBuf, lib: libloading::Library) -> Result<Api, HsaError> {
                $(
                    // SAFETY: the symbol is declared with its C signature from hsa.h /
                    // hsa_ext_amd.h; the pointer is copied out and stays valid because the
                    // library is never unloaded (it is kept in `Api` and `Api`s are never
                    // dropped, see `Api::load`).
                    let $name = unsafe {
                        *lib.get::<unsafe extern "C" fn($($ty),*) $(-> $ret)?>(stringify!($name))
                            .map_err(|source| HsaError::MissingSymbol {
                                path: path.clone(),
                                symbol: stringify!($name),
                                source,
                            })?
                    };
                )*
                Ok(Api { path, _lib: lib, $($name),* })
            }
        }
    };
}

api! {
    /// `hsa_status_t hsa_init(void)`.
    fn hsa_init() -> Status;
    /// `hsa_status_t hsa_shut_down(void)`.
    fn hsa_shut_down() -> Status;
    /// `hsa_status_t hsa_status_string(hsa_status_t, const char**)`.
    fn hsa_status_string(Status, *mut *const c_char) -> Status;
    /// `hsa_status_t hsa_system_get_info(hsa_system_info_t, void*)`.
    fn hsa_system_get_info(u32, *mut c_void) -> Status;
    /// `hsa_status_t hsa_iterate_agents(callback, void*)`.
    fn hsa_iterate_agents(AgentCallback, *mut c_void) -> Status;
    /// `hsa_status_t hsa_agent_get_info(hsa_agent_t, hsa_agent_info_t, void*)`.
    fn hsa_agent_get_info(Agent, u32, *mut c_void) -> Status;
    /// `hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t, callback, void*)`.
    fn hsa_amd_agent_iterate_memory_pools(Agent, PoolCallback, *mut c_void) -> Status;
    /// `hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t, attribute, void*)`.
    fn hsa_amd_memory_pool_get_info(MemoryPool, u32, *mut c_void) -> Status;
    /// `hsa_status_t hsa_amd_memory_pool_allocate(pool, size_t, uint32_t flags, void**)`.
    fn hsa_amd_memory_pool_allocate(MemoryPool, usize, u32, *mut *mut c_void) -> Status;
    /// `hsa_status_t hsa_amd_memory_pool_free(void*)`.
    fn hsa_amd_memory_pool_free(*mut c_void) -> Status;
    /// `hsa_status_t hsa_amd_agents_allow_access(uint32_t, const hsa_agent_t*, const uint32_t*, const void*)`.
    fn hsa_amd_agents_allow_access(u32, *const Agent, *const u32, *const c_void) -> Status;
    /// `hsa_status_t hsa_memory_copy(void* dst, const void* src, size_t)`.
    fn hsa_memory_copy(*mut c_void, *const c_void, usize) -> Status;
    /// `hsa_status_t hsa_amd_register_system_event_handler(callback, void*)`.
    fn hsa_amd_register_system_event_handler(Option<SystemEventCallback>, *mut c_void) -> Status;
    /// `hsa_status_t hsa_queue_create(agent, size, type, callback, data, private, group, hsa_queue_t**)`.
    fn hsa_queue_create(Agent, u32, u32, Option<QueueCallback>, *mut c_void, u32, u32, *mut *mut Queue) -> Status;
    /// `hsa_status_t hsa_queue_destroy(hsa_queue_t*)`.
    fn hsa_queue_destroy(*mut Queue) -> Status;
    /// `uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t*)`.
    fn hsa_queue_load_read_index_scacquire(*const Queue) -> u64;
    /// `uint64_t hsa_queue_add_write_index_scacq_screl(const hsa_queue_t*, uint64_t)`: the index before.
    fn hsa_queue_add_write_index_scacq_screl(*const Queue, u64) -> u64;
    /// `hsa_status_t hsa_signal_create(hsa_signal_value_t, uint32_t, const hsa_agent_t*, hsa_signal_t*)`.
    fn hsa_signal_create(i64, u32, *const Agent, *mut Signal) -> Status;
    /// `hsa_status_t hsa_signal_destroy(hsa_signal_t)`.
    fn hsa_signal_destroy(Signal) -> Status;
    /// `void hsa_signal_store_screlease(hsa_signal_t, hsa_signal_value_t)`.
    fn hsa_signal_store_screlease(Signal, i64);
    /// `hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t)`.
    fn hsa_signal_load_scacquire(Signal) -> i64;
    /// `hsa_signal_value_t hsa_signal_wait_scacquire(signal, condition, compare, timeout_hint, wait_state)`.
    fn hsa_signal_wait_scacquire(Signal, u32, i64, u64, u32) -> i64;
    /// `hsa_status_t hsa_code_object_reader_create_from_memory(const void*, size_t, hsa_code_object_reader_t*)`.
    fn hsa_code_object_reader_create_from_memory(*const c_void, usize, *mut CodeObjectReader) -> Status;
    /// `hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t)`.
    fn hsa_code_object_reader_destroy(CodeObjectReader) -> Status;
    /// `hsa_status_t hsa_executable_create_alt(profile, rounding mode, const char* options, hsa_executable_t*)`.
    fn hsa_executable_create_alt(u32, u32, *const c_char, *mut Executable) -> Status;
    /// `hsa_status_t hsa_executable_load_agent_code_object(executable, agent, reader, options, hsa_loaded_code_object_t*)`.
    fn hsa_executable_load_agent_code_object(Executable, Agent, CodeObjectReader, *const c_char, *mut LoadedCodeObject) -> Status;
    /// `hsa_status_t hsa_executable_freeze(hsa_executable_t, const char*)`.
    fn hsa_executable_freeze(Executable, *const c_char) -> Status;
    /// `hsa_status_t hsa_executable_destroy(hsa_executable_t)`.
    fn hsa_executable_destroy(Executable) -> Status;
    /// `hsa_status_t hsa_executable_get_symbol_by_name(executable, const char*, const hsa_agent_t*, hsa_executable_symbol_t*)`.
    fn hsa_executable_get_symbol_by_name(Executable, *const c_char, *const Agent, *mut ExecutableSymbol) -> Status;
    /// `hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t, attribute, void*)`.
    fn hsa_executable_symbol_get_info(ExecutableSymbol, u32, *mut c_void) -> Status;
    /// `hsa_status_t hsa_amd_profiling_set_profiler_enabled(hsa_queue_t*, int)`.
    fn hsa_amd_profiling_set_profiler_enabled(*mut Queue, c_int) -> Status;
    /// `hsa_status_t hsa_amd_profiling_get_dispatch_time(hsa_agent_t, hsa_signal_t, hsa_amd_profiling_dispatch_time_t*)`:
    /// start and end in system timestamp ticks.
    fn hsa_amd_profiling_get_dispatch_time(Agent, Signal, *mut [u64; 2]) -> Status;
}

/// The library's file name, as the dynamic loader finds it.
pub const DEFAULT_LIBRARY: &str = "libhsa-runtime64.so.1";

/// The environment variable that overrides [`DEFAULT_LIBRARY`] with a path.
pub const LIBRARY_ENV: &str = "TILEGEN_HSA_LIB";

/// The library a device opens by default: `$TILEGEN_HSA_LIB`, else [`DEFAULT_LIBRARY`].
pub fn default_library() -> PathBuf {
    std::env::var_os(LIBRARY_ENV)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_LIBRARY))
}

impl Api {
    /// Loads the HSA library at `path` (a file name is looked up by the dynamic loader) and
    /// resolves every function in [`SYMBOLS`]. Each library is loaded once per process and
    /// never unloaded; later calls return the same [`Api`].
    pub fn load(path: &Path) -> Result<Arc<Api>, HsaError> {
        static LOADED: Mutex<Option<HashMap<PathBuf, Arc<Api>>>> = Mutex::new(None);
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        let map = loaded.get_or_insert_with(HashMap::new);
        if let Some(api) = map.get(path) {
            return Ok(api.clone());
        }
        check_library_file(path)?;
        // SAFETY: loading a shared library runs its initializers; an HSA runtime's are meant
        // to run in any process that links it. The library is kept loaded for the rest of
        // the process (the map owns it and is never cleared).
        let lib = unsafe { libloading::Library::new(path) }.map_err(|source| HsaError::Load {
            path: path.to_path_buf(),
            source,
        })?;
        let api = Arc::new(Api::resolve(path.to_path_buf(), lib)?);
        map.insert(path.to_path_buf(), api.clone());
        Ok(api)
    }

    /// The path the library was loaded from (as given).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `hsa_status_string` of `status`, or a fallback naming the number when the library has
    /// no text for it.
    pub fn status_text(&self, status: Status) -> String {
        let mut text: *const c_char = std::ptr::null();
        // SAFETY: `hsa_status_string` writes a pointer to a NUL-terminated string it owns (or
        // fails); the string is copied out at once.
        let ok = unsafe { (self.hsa_status_string)(status, &mut text) } == STATUS_SUCCESS;
        if ok && !text.is_null() {
            // SAFETY: non-null and NUL-terminated, as hsa_status_string promises.
            unsafe { std::ffi::CStr::from_ptr(text) }
                .to_string_lossy()
                .into_owned()
        } else {
            format!("HSA status {status:#x} (the runtime has no text for it)")
        }
    }

    /// `Ok` for success, else an [`HsaError::Status`] for `call` with the runtime's text.
    pub fn check(&self, call: &'static str, status: Status) -> Result<(), HsaError> {
        if status == STATUS_SUCCESS {
            Ok(())
        } else {
            Err(HsaError::Status {
                call,
                status,
                text: self.status_text(status),
            })
        }
    }
}

/// The largest library file accepted (ROCm's runtime is a few MB).
const MAX_LIBRARY_BYTES: u64 = 1 << 30;

/// The ELF machine of the process: a library for another one cannot be loaded.
const HOST_MACHINE: object::elf::Machine = if cfg!(target_arch = "aarch64") {
    object::elf::EM_AARCH64
} else {
    object::elf::EM_X86_64
};

/// Checks that the file at `path` is a complete 64-bit shared object for this machine before
/// the dynamic loader maps it: the loader trusts its program headers, and a segment reaching
/// past the end of a truncated file kills the process with SIGBUS when touched. A bare file
/// name is left to the loader's search (it finds installed libraries, not user files), as is a
/// path that does not exist (the loader names that itself).
pub(crate) fn check_library_file(path: &Path) -> Result<(), HsaError> {
    use object::read::elf::{FileHeader, ProgramHeader};
    use std::os::unix::fs::OpenOptionsExt;

    if path.components().count() < 2 || !path.exists() {
        return Ok(());
    }
    let bad = |why: String| HsaError::NotALibrary {
        path: path.to_path_buf(),
        why,
    };
    let io = |source| HsaError::LibraryFile {
        path: path.to_path_buf(),
        source,
    };
    // Non-blocking, so a FIFO in the library's place does not wait for a writer.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.is_file() {
        return Err(bad("it is not a regular file".into()));
    }
    let len = meta.len();
    if len > MAX_LIBRARY_BYTES {
        return Err(bad(format!(
            "it is {len} bytes, more than the {MAX_LIBRARY_BYTES} accepted"
        )));
    }
    let data = object::read::ReadCache::new(file);
    let header = object::elf::FileHeader64::<object::Endianness>::parse(&data)
        .map_err(|e| bad(format!("not a 64-bit ELF file ({e})")))?;
    let endian = header
        .endian()
        .map_err(|e| bad(format!("unknown byte order ({e})")))?;
    if header.e_type(endian) != object::elf::ET_DYN {
        return Err(bad(format!(
            "ELF type {} is not a shared object",
            header.e_type(endian)
        )));
    }
    if header.e_machine(endian) != HOST_MACHINE {
        return Err(bad(format!(
            "it is built for ELF machine {}, not this one ({HOST_MACHINE})",
            header.e_machine(endian)
        )));
    }
    let segments = header
        .program_headers(endian, &data)
        .map_err(|e| bad(format!("its program headers cannot be read ({e})")))?;
    if segments.is_empty() {
        return Err(bad("it has no program headers".into()));
    }
    for (i, ph) in segments.iter().enumerate() {
        let end = ph.p_offset(endian).checked_add(ph.p_filesz(endian));
        if end.is_none_or(|end| end > len) {
            return Err(bad(format!(
                "segment {i} spans bytes {}..{} of a {len}-byte file (truncated?)",
                ph.p_offset(endian),
                end.map_or_else(|| "overflow".to_string(), |e| e.to_string())
            )));
        }
    }
    header
        .section_headers(endian, &data)
        .map_err(|e| bad(format!("its section headers lie past its end ({e})")))?;
    Ok(())
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Api").field("path", &self.path).finish()
    }
}
