//! The rest of the C API real clients (ROCr's samples, rocminfo, HIP) call: extensions, ISAs,
//! regions, the legacy code-object calls, the signal and queue-index families, asynchronous
//! copies and fills, locked memory, pointer information, profiling, and the calls this
//! runtime refuses with HSA's statuses (images and samplers, IPC, SVM, graphics interop).

use std::ffi::{CStr, c_char, c_int, c_void};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tilegen_hsa::sys::{self, Status};

use crate::memory;
use crate::signal::{self, SignalObj};
use crate::state::{CPU_AGENT, GPU_AGENT, GPU_ISA, Runtime, put, runtime};
use crate::status::fail;
use crate::{entry, null_argument, with_signal};

/// HSA status codes beyond `tilegen_hsa::sys`'s.
pub(crate) const STATUS_ERROR_INVALID_REGION: Status = 0x1005;
pub(crate) const STATUS_ERROR_INVALID_INDEX: Status = 0x100E;
pub(crate) const STATUS_ERROR_INVALID_ISA_NAME: Status = 0x1017;
pub(crate) const STATUS_ERROR_INVALID_FILE: Status = 0x1020;
pub(crate) const EXT_STATUS_ERROR_IMAGE_FORMAT_UNSUPPORTED: Status = 0x3000;
pub(crate) const EXT_STATUS_ERROR_SAMPLER_DESCRIPTOR_UNSUPPORTED: Status = 0x3003;

fn check_agent(agent: sys::Agent) -> Result<(), Status> {
    if agent == CPU_AGENT || agent == GPU_AGENT {
        Ok(())
    } else {
        Err(fail(
            sys::STATUS_ERROR_INVALID_AGENT,
            format!("agent {:#x} is not an agent of this runtime", agent.handle),
        ))
    }
}

fn live_signal(rt: &Runtime, signal: sys::Signal) -> Result<Arc<SignalObj>, Status> {
    signal::get(rt, signal.handle).ok_or_else(|| {
        fail(
            sys::STATUS_ERROR_INVALID_SIGNAL,
            format!(
                "signal {:#x} does not exist (destroyed already?)",
                signal.handle
            ),
        )
    })
}

// ---- Extensions -------------------------------------------------------------------------

/// Extension IDs between the standard ones and AMD's are invalid (`hsa_extension_t`).
fn check_extension(extension: u16) -> Result<(), Status> {
    if extension > 3 && extension < 0x200 {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("{extension:#x} is not an HSA extension ID"),
        ));
    }
    Ok(())
}

/// `hsa_system_extension_supported`: no extension function table is provided, so none is
/// supported.
///
/// # Safety
/// `result` must be valid for writing a bool.
pub unsafe extern "C" fn hsa_system_extension_supported(
    extension: u16,
    _version_major: u16,
    _version_minor: u16,
    result: *mut bool,
) -> Status {
    entry(|| {
        runtime()?;
        check_extension(extension)?;
        if result.is_null() {
            return Err(null_argument("result"));
        }
        // SAFETY: the caller's pointer, checked non-null.
        Ok(unsafe { put(result.cast(), false) })
    })
}

/// `hsa_system_major_extension_supported`: as `hsa_system_extension_supported`.
///
/// # Safety
/// `version_minor` and `result` must be valid for writing.
pub unsafe extern "C" fn hsa_system_major_extension_supported(
    extension: u16,
    version_major: u16,
    version_minor: *mut u16,
    result: *mut bool,
) -> Status {
    entry(|| {
        if version_minor.is_null() {
            return Err(null_argument("version_minor"));
        }
        // SAFETY: the caller's contract.
        Ok(unsafe { hsa_system_extension_supported(extension, version_major, 0, result) })
    })
}

/// `hsa_agent_extension_supported`: no agent extension is supported.
///
/// # Safety
/// `result` must be valid for writing a bool.
pub unsafe extern "C" fn hsa_agent_extension_supported(
    extension: u16,
    agent: sys::Agent,
    _version_major: u16,
    _version_minor: u16,
    result: *mut bool,
) -> Status {
    entry(|| {
        runtime()?;
        check_agent(agent)?;
        check_extension(extension)?;
        if result.is_null() {
            return Err(null_argument("result"));
        }
        // SAFETY: the caller's pointer, checked non-null.
        Ok(unsafe { put(result.cast(), false) })
    })
}

/// `hsa_system_get_major_extension_table`: refused (`HSA_STATUS_ERROR`), as for any
/// extension the runtime does not support: no table is provided.
pub extern "C" fn hsa_system_get_major_extension_table(
    extension: u16,
    version_major: u16,
    _table_length: usize,
    table: *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        check_extension(extension)?;
        if table.is_null() {
            return Err(null_argument("table"));
        }
        Err(fail(
            sys::STATUS_ERROR,
            format!(
                "extension {extension:#x} version {version_major} is not supported: this runtime provides no extension function tables"
            ),
        ))
    })
}

/// `hsa_system_get_extension_table` (deprecated): as the major-version call.
pub extern "C" fn hsa_system_get_extension_table(
    extension: u16,
    version_major: u16,
    _version_minor: u16,
    table: *mut c_void,
) -> Status {
    hsa_system_get_major_extension_table(extension, version_major, 0, table)
}

// ---- ISAs -------------------------------------------------------------------------------

/// The gfx950 ISA's name as ROCr spells an MI355X's: SRAM ECC on, XNACK off.
fn isa_name() -> String {
    format!(
        "amdgcn-amd-amdhsa--{}:sramecc+:xnack-",
        tilegen_arch::PROCESSOR
    )
}

/// `hsa_agent_iterate_isas`: the gfx950 agent's one ISA; the CPU has none.
///
/// # Safety
/// `callback` must be safe to call with each ISA and `data`.
pub unsafe extern "C" fn hsa_agent_iterate_isas(
    agent: sys::Agent,
    callback: Option<unsafe extern "C" fn(u64, *mut c_void) -> Status>,
    data: *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        check_agent(agent)?;
        let cb = callback.ok_or_else(|| null_argument("callback"))?;
        if agent != GPU_AGENT {
            return Ok(sys::STATUS_SUCCESS);
        }
        // SAFETY: the caller's callback and data.
        Ok(unsafe { cb(GPU_ISA, data) })
    })
}

/// `hsa_isa_from_name`: the gfx950 ISA, by its full name or without target features.
///
/// # Safety
/// `name` must be a NUL-terminated string; `isa` valid for writing.
pub unsafe extern "C" fn hsa_isa_from_name(name: *const c_char, isa: *mut u64) -> Status {
    entry(|| {
        runtime()?;
        if name.is_null() || isa.is_null() {
            return Err(null_argument("name or isa"));
        }
        // SAFETY: the caller's contract.
        let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
        let bare = format!("amdgcn-amd-amdhsa--{}", tilegen_arch::PROCESSOR);
        if name != isa_name() && name != bare {
            return Err(fail(
                STATUS_ERROR_INVALID_ISA_NAME,
                format!(
                    "`{name}` is not an ISA of this runtime (it runs {} only)",
                    isa_name()
                ),
            ));
        }
        // SAFETY: the caller's pointer, checked non-null.
        Ok(unsafe { put(isa.cast(), GPU_ISA) })
    })
}

/// `hsa_isa_get_info_alt`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type (for the name: its length).
pub unsafe extern "C" fn hsa_isa_get_info_alt(
    isa: u64,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        if isa != GPU_ISA {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ISA,
                format!("ISA {isa:#x} is not an ISA of this runtime"),
            ));
        }
        if value.is_null() {
            return Err(null_argument("value"));
        }
        let name = isa_name();
        let wg = tilegen_arch::MAX_WORKGROUP_SIZE;
        // SAFETY (every arm): the caller's buffer is of the attribute's documented type.
        Ok(unsafe {
            match attribute {
                // HSA_ISA_INFO_NAME_LENGTH counts the terminating NUL (ROCr).
                0 => put::<u32>(value, name.len() as u32 + 1),
                1 => {
                    std::ptr::copy_nonoverlapping(name.as_ptr(), value.cast(), name.len());
                    value.cast::<u8>().add(name.len()).write(0);
                    sys::STATUS_SUCCESS
                }
                // HSA_ISA_INFO_MACHINE_MODELS (bool[2]): large only.
                5 => put::<[bool; 2]>(value, [false, true]),
                // HSA_ISA_INFO_PROFILES (bool[2]): base only (a discrete GPU).
                6 => put::<[bool; 2]>(value, [true, false]),
                // HSA_ISA_INFO_DEFAULT_FLOAT_ROUNDING_MODES and the base-profile ones
                // (bool[3]: default, zero, near): near.
                7 | 8 => put::<[bool; 3]>(value, [false, false, true]),
                // HSA_ISA_INFO_FAST_F16_OPERATION.
                9 => put::<bool>(value, true),
                // HSA_ISA_INFO_WORKGROUP_MAX_DIM (uint16_t[3]), _WORKGROUP_MAX_SIZE.
                12 => put::<[u16; 3]>(value, [wg as u16; 3]),
                13 => put::<u32>(value, wg),
                // HSA_ISA_INFO_GRID_MAX_DIM (hsa_dim3_t), _GRID_MAX_SIZE (uint64_t).
                14 => put::<[u32; 3]>(value, [u32::MAX; 3]),
                16 => put::<u64>(value, u64::from(u32::MAX)),
                // HSA_ISA_INFO_FBARRIER_MAX_SIZE.
                17 => put::<u32>(value, 32),
                other => fail(
                    sys::STATUS_ERROR_INVALID_ARGUMENT,
                    format!("ISA attribute {other} is not one this runtime answers"),
                ),
            }
        })
    })
}

/// `hsa_isa_get_info` (deprecated): as `hsa_isa_get_info_alt`, plus the call-convention
/// attributes; the one call convention has index 0.
///
/// # Safety
/// As `hsa_isa_get_info_alt`.
pub unsafe extern "C" fn hsa_isa_get_info(
    isa: u64,
    attribute: u32,
    index: u32,
    value: *mut c_void,
) -> Status {
    entry(|| {
        let needs_index = matches!(attribute, 3 | 4);
        if needs_index && index != 0 {
            return Err(fail(
                STATUS_ERROR_INVALID_INDEX,
                format!("call convention {index} (the ISA has one, index 0)"),
            ));
        }
        // SAFETY (every arm): the caller's contract.
        Ok(unsafe {
            match attribute {
                2..=4 if value.is_null() => null_argument("value"),
                // HSA_ISA_INFO_CALL_CONVENTION_COUNT.
                2 => put::<u32>(value, 1),
                // _CALL_CONVENTION_INFO_WAVEFRONT_SIZE, _WAVEFRONTS_PER_COMPUTE_UNIT.
                3 => put::<u32>(value, tilegen_arch::WAVE_SIZE),
                4 => put::<u32>(
                    value,
                    tilegen_arch::SIMDS_PER_CU * tilegen_arch::MAX_WAVES_PER_SIMD,
                ),
                _ => hsa_isa_get_info_alt(isa, attribute, value),
            }
        })
    })
}

// ---- Regions ----------------------------------------------------------------------------

/// `hsa_agent_iterate_regions`: the agent's pools as regions; the GPU lists the system
/// regions after its own, as ROCr does.
///
/// # Safety
/// `callback` must be safe to call with each region and `data`.
pub unsafe extern "C" fn hsa_agent_iterate_regions(
    agent: sys::Agent,
    callback: Option<unsafe extern "C" fn(u64, *mut c_void) -> Status>,
    data: *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        let cb = callback.ok_or_else(|| null_argument("callback"))?;
        for r in memory::agent_regions(agent)? {
            // SAFETY: the caller's callback and data.
            let s = unsafe { cb(r.handle.handle, data) };
            if s != sys::STATUS_SUCCESS {
                return Ok(s);
            }
        }
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_region_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub unsafe extern "C" fn hsa_region_get_info(
    region: u64,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        // SAFETY: the caller's contract.
        Ok(unsafe { memory::region_info(&rt, region, attribute, value) })
    })
}

/// `hsa_memory_allocate`: as `hsa_amd_memory_pool_allocate` from the region's pool.
///
/// # Safety
/// `ptr` must be valid for writing a pointer.
pub unsafe extern "C" fn hsa_memory_allocate(
    region: u64,
    size: usize,
    ptr: *mut *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if ptr.is_null() {
            return Err(null_argument("ptr"));
        }
        if memory::find_pool(region).is_none() {
            return Err(fail(
                STATUS_ERROR_INVALID_REGION,
                format!("region {region:#x} is not a region of this runtime"),
            ));
        }
        let p = memory::allocate(&rt, region, size)?;
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { ptr.write(p as *mut c_void) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_memory_free`.
pub extern "C" fn hsa_memory_free(ptr: *mut c_void) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(memory::free(&rt, ptr as u64))
    })
}

/// `hsa_memory_assign_agent`: every agent may use every allocation here; checks the
/// arguments.
pub extern "C" fn hsa_memory_assign_agent(
    ptr: *mut c_void,
    agent: sys::Agent,
    access: u32,
) -> Status {
    entry(|| {
        runtime()?;
        check_agent(agent)?;
        if ptr.is_null() || !(1..=3).contains(&access) {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                "a null pointer or an access permission other than RO, WO or RW",
            ));
        }
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_memory_register`: in HSA, registering is a performance hint that grants no access,
/// so it only checks its arguments (a kernel reaches the application's own memory through
/// `hsa_amd_memory_lock`'s agent address).
pub extern "C" fn hsa_memory_register(ptr: *mut c_void, size: usize) -> Status {
    entry(|| {
        runtime()?;
        if size == 0 && !ptr.is_null() {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                "a size of 0 with a non-null pointer",
            ));
        }
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_memory_deregister`: the counterpart of the hint.
pub extern "C" fn hsa_memory_deregister(ptr: *mut c_void, size: usize) -> Status {
    hsa_memory_register(ptr, size)
}

/// `hsa_amd_agent_memory_pool_get_info`: access, link hops and link of a pool from an agent,
/// as ROCr decides them.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub unsafe extern "C" fn hsa_amd_agent_memory_pool_get_info(
    agent: sys::Agent,
    pool: sys::MemoryPool,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        // SAFETY: the caller's contract.
        Ok(unsafe { memory::agent_pool_info(agent, pool.handle, attribute, value) })
    })
}

// ---- Code objects (legacy and from files) -----------------------------------------------

/// `hsa_code_object_reader_create_from_file`: reads the whole file (from its start; the
/// descriptor's offset is left alone and it stays open).
///
/// # Safety
/// `code_object_reader` must be valid for writing.
pub unsafe extern "C" fn hsa_code_object_reader_create_from_file(
    file: c_int,
    code_object_reader: *mut sys::CodeObjectReader,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if code_object_reader.is_null() {
            return Err(null_argument("code_object_reader"));
        }
        let bytes = read_fd(file)?;
        if bytes.is_empty() {
            return Err(fail(
                STATUS_ERROR_INVALID_FILE,
                format!("file descriptor {file} reads as empty"),
            ));
        }
        let r = crate::loader::reader_create(&rt, &bytes);
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { code_object_reader.write(r) };
        Ok(sys::STATUS_SUCCESS)
    })
}

fn read_fd(file: c_int) -> Result<Vec<u8>, Status> {
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::FileExt;
    let bad = |e: std::io::Error| {
        fail(
            STATUS_ERROR_INVALID_FILE,
            format!("file descriptor {file}: {e}"),
        )
    };
    if file < 0 {
        return Err(bad(std::io::Error::from_raw_os_error(9)));
    }
    // SAFETY: the descriptor is the caller's and stays theirs: ManuallyDrop never closes it.
    let f = std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(file) });
    let mut bytes = Vec::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = f.read_at(&mut buf, bytes.len() as u64).map_err(bad)?;
        if n == 0 {
            return Ok(bytes);
        }
        bytes.extend_from_slice(&buf[..n]);
    }
}

/// `hsa_code_object_deserialize` (deprecated): keeps a copy of the code object's bytes.
///
/// # Safety
/// `serialized_code_object` must point to `size` bytes; `code_object` valid for writing.
pub unsafe extern "C" fn hsa_code_object_deserialize(
    serialized_code_object: *const c_void,
    size: usize,
    _options: *const c_char,
    code_object: *mut u64,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if serialized_code_object.is_null() || size == 0 || code_object.is_null() {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                "a null code object or result pointer, or a size of 0",
            ));
        }
        // SAFETY: the caller's contract.
        let bytes =
            unsafe { std::slice::from_raw_parts(serialized_code_object.cast::<u8>(), size) };
        if let Err(e) = tilegen_codeobj::CodeObject::parse(&crate::loader::as_supported(bytes)) {
            return Err(fail(sys::STATUS_ERROR_INVALID_CODE_OBJECT, e));
        }
        let r = crate::loader::reader_create(&rt, bytes);
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { code_object.write(r.handle) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_code_object_destroy` (deprecated).
pub extern "C" fn hsa_code_object_destroy(code_object: u64) -> Status {
    entry(|| {
        let rt = runtime()?;
        match crate::state::lock(&rt.readers).remove(&code_object) {
            Some(_) => Ok(sys::STATUS_SUCCESS),
            None => Err(fail(
                sys::STATUS_ERROR_INVALID_CODE_OBJECT,
                format!("code object {code_object:#x} does not exist (destroyed already?)"),
            )),
        }
    })
}

/// `hsa_executable_create` (deprecated): an unfrozen executable.
///
/// # Safety
/// `executable` must be valid for writing.
pub unsafe extern "C" fn hsa_executable_create(
    profile: u32,
    executable_state: u32,
    options: *const c_char,
    executable: *mut sys::Executable,
) -> Status {
    entry(|| {
        if executable_state != 0 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("executable state {executable_state} (a new executable is unfrozen, 0)"),
            ));
        }
        // SAFETY: the caller's contract.
        Ok(unsafe { crate::hsa_executable_create_alt(profile, 0, options, executable) })
    })
}

/// `hsa_executable_load_code_object` (deprecated): loads a deserialized code object.
pub extern "C" fn hsa_executable_load_code_object(
    executable: sys::Executable,
    agent: sys::Agent,
    code_object: u64,
    _options: *const c_char,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(crate::loader::load(
            &rt,
            executable,
            agent,
            sys::CodeObjectReader {
                handle: code_object,
            },
        ))
    })
}

/// `hsa_executable_get_symbol` (deprecated): the module name is ignored (program symbols).
///
/// # Safety
/// `symbol_name` must be a NUL-terminated string; `symbol` valid for writing.
pub unsafe extern "C" fn hsa_executable_get_symbol(
    executable: sys::Executable,
    _module_name: *const c_char,
    symbol_name: *const c_char,
    agent: sys::Agent,
    _call_convention: i32,
    symbol: *mut sys::ExecutableSymbol,
) -> Status {
    // SAFETY: the caller's contract.
    unsafe { crate::hsa_executable_get_symbol_by_name(executable, symbol_name, &agent, symbol) }
}

/// `hsa_executable_agent_global_variable_define`: tilegen's loader takes code objects whose
/// symbols are all defined, so no loaded code object has an external variable to define.
///
/// # Safety
/// `variable_name` must be a NUL-terminated string.
pub unsafe extern "C" fn hsa_executable_agent_global_variable_define(
    executable: sys::Executable,
    agent: sys::Agent,
    variable_name: *const c_char,
    _address: *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        check_agent(agent)?;
        if variable_name.is_null() {
            return Err(null_argument("variable_name"));
        }
        let frozen = match crate::state::lock(&rt.executables).get(&executable.handle) {
            None => {
                return Err(fail(
                    sys::STATUS_ERROR_INVALID_EXECUTABLE,
                    format!(
                        "executable {:#x} does not exist (destroyed already?)",
                        executable.handle
                    ),
                ));
            }
            Some(e) => e.frozen,
        };
        if frozen {
            return Err(fail(
                sys::STATUS_ERROR_FROZEN_EXECUTABLE,
                format!("executable {:#x} is frozen", executable.handle),
            ));
        }
        // SAFETY: the caller's contract.
        let name = unsafe { CStr::from_ptr(variable_name) }.to_string_lossy();
        Err(fail(
            sys::STATUS_ERROR_INVALID_SYMBOL_NAME,
            format!("no loaded code object declares an external variable `{name}`"),
        ))
    })
}

// ---- Signals ----------------------------------------------------------------------------

/// `hsa_amd_signal_create`: as `hsa_signal_create` (the attributes, such as IPC, are not
/// supported and refused).
///
/// # Safety
/// As `hsa_signal_create`.
pub unsafe extern "C" fn hsa_amd_signal_create(
    initial_value: i64,
    num_consumers: u32,
    consumers: *const sys::Agent,
    attributes: u64,
    signal: *mut sys::Signal,
) -> Status {
    entry(|| {
        if attributes != 0 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!(
                    "signal attributes {attributes:#x}: IPC signals are not supported (attributes must be 0)"
                ),
            ));
        }
        // SAFETY: the caller's contract.
        Ok(unsafe { crate::hsa_signal_create(initial_value, num_consumers, consumers, signal) })
    })
}

/// `hsa_amd_signal_value_pointer`: the address of the signal's value (valid while the
/// signal lives; a store through it reaches waiters within their polling interval).
///
/// # Safety
/// `value_ptr` must be valid for writing a pointer.
pub unsafe extern "C" fn hsa_amd_signal_value_pointer(
    signal: sys::Signal,
    value_ptr: *mut *const i64,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if value_ptr.is_null() {
            return Err(null_argument("value_ptr"));
        }
        let s = live_signal(&rt, signal)?;
        // SAFETY: the caller's pointer, checked non-null; the value lives in the signal.
        unsafe { value_ptr.write(s.value_ptr().cast()) };
        Ok(sys::STATUS_SUCCESS)
    })
}

type SignalHandler = unsafe extern "C" fn(i64, *mut c_void) -> bool;

/// `hsa_amd_signal_async_handler`: a thread waits for the condition and calls the handler
/// with the value; the handler returning true keeps it registered.
pub extern "C" fn hsa_amd_signal_async_handler(
    signal: sys::Signal,
    cond: u32,
    value: i64,
    handler: Option<SignalHandler>,
    arg: *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        let handler = handler.ok_or_else(|| null_argument("handler"))?;
        let s = live_signal(&rt, signal)?;
        if signal::condition(cond, value).is_none() {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("signal condition {cond}"),
            ));
        }
        let weak = Arc::downgrade(&rt);
        let arg = arg as usize;
        drop(rt);
        std::thread::Builder::new()
            .name("hsa-emu-signal-handler".into())
            .spawn(move || {
                let Some(holds) = signal::condition(cond, value) else {
                    return;
                };
                loop {
                    // Gone with its signal or the runtime.
                    let alive = || {
                        weak.upgrade()
                            .is_some_and(|rt| signal::get(&rt, signal.handle).is_some())
                    };
                    let deadline =
                        std::time::Instant::now() + std::time::Duration::from_millis(100);
                    let v = s.wait_until(&holds, Some(deadline), || false);
                    if !holds(v) {
                        if alive() {
                            continue;
                        }
                        return;
                    }
                    // SAFETY: the application's handler with its own argument.
                    if !unsafe { handler(v, arg as *mut c_void) } {
                        return;
                    }
                    // Re-armed: wait for the value to leave the condition before the next call,
                    // as a level-triggered handler would otherwise spin.
                    while holds(s.load()) && alive() {
                        s.wait_until(
                            |v| !holds(v),
                            Some(std::time::Instant::now() + std::time::Duration::from_millis(100)),
                            || false,
                        );
                    }
                    if !alive() {
                        return;
                    }
                }
            })
            .map_err(|e| {
                fail(
                    sys::STATUS_ERROR_OUT_OF_RESOURCES,
                    format!("starting the handler's thread: {e}"),
                )
            })?;
        Ok(sys::STATUS_SUCCESS)
    })
}

/// Defines signal calls that apply `$f(old, value)` (every memory order behaves as the
/// sequentially consistent one).
macro_rules! signal_update {
    ($f:expr => $(fn $name:ident),+) => {$(
        #[doc = concat!("`", stringify!($name), "` (ignored for an unknown signal).")]
                pub extern "C" fn $name(signal: sys::Signal, value: i64) {
            with_signal(signal, (), |s| {
                s.update(|old| $f(old, value));
            });
        }
    )+};
}

signal_update!(|_, v| v => fn hsa_signal_silent_store_relaxed, fn hsa_signal_silent_store_screlease, fn hsa_signal_store_release);
signal_update!(|o: i64, v| o.wrapping_add(v) => fn hsa_signal_add_relaxed, fn hsa_signal_add_screlease,
    fn hsa_signal_add_scacquire, fn hsa_signal_add_scacq_screl, fn hsa_signal_add_acquire,
    fn hsa_signal_add_release, fn hsa_signal_add_acq_rel);
signal_update!(|o: i64, v: i64| o.wrapping_sub(v) => fn hsa_signal_subtract_relaxed,
    fn hsa_signal_subtract_scacquire, fn hsa_signal_subtract_scacq_screl, fn hsa_signal_subtract_acquire,
    fn hsa_signal_subtract_release, fn hsa_signal_subtract_acq_rel);
signal_update!(|o: i64, v| o & v => fn hsa_signal_and_relaxed, fn hsa_signal_and_screlease,
    fn hsa_signal_and_scacquire, fn hsa_signal_and_scacq_screl);
signal_update!(|o: i64, v| o | v => fn hsa_signal_or_relaxed, fn hsa_signal_or_screlease,
    fn hsa_signal_or_scacquire, fn hsa_signal_or_scacq_screl);
signal_update!(|o: i64, v| o ^ v => fn hsa_signal_xor_relaxed, fn hsa_signal_xor_screlease,
    fn hsa_signal_xor_scacquire, fn hsa_signal_xor_scacq_screl);

/// Defines exchange calls: store `value`, return the previous value (0 for an unknown
/// signal).
macro_rules! signal_exchange {
    ($(fn $name:ident),+) => {$(
        #[doc = concat!("`", stringify!($name), "`: returns the previous value.")]
                pub extern "C" fn $name(signal: sys::Signal, value: i64) -> i64 {
            with_signal(signal, 0, |s| s.update(|_| value))
        }
    )+};
}

signal_exchange!(
    fn hsa_signal_exchange_relaxed,
    fn hsa_signal_exchange_screlease,
    fn hsa_signal_exchange_scacquire,
    fn hsa_signal_exchange_scacq_screl,
    fn hsa_signal_exchange_acquire,
    fn hsa_signal_exchange_release,
    fn hsa_signal_exchange_acq_rel
);

/// Defines compare-and-swap calls: return the previous value (0 for an unknown signal).
macro_rules! signal_cas {
    ($(fn $name:ident),+) => {$(
        #[doc = concat!("`", stringify!($name), "`: returns the previous value.")]
                pub extern "C" fn $name(signal: sys::Signal, expected: i64, value: i64) -> i64 {
            with_signal(signal, 0, |s| s.cas(expected, value))
        }
    )+};
}

signal_cas!(
    fn hsa_signal_cas_relaxed,
    fn hsa_signal_cas_screlease,
    fn hsa_signal_cas_scacquire,
    fn hsa_signal_cas_scacq_screl,
    fn hsa_signal_cas_acquire,
    fn hsa_signal_cas_release,
    fn hsa_signal_cas_acq_rel
);

/// `hsa_signal_load_acquire` (deprecated name of `_scacquire`).
pub extern "C" fn hsa_signal_load_acquire(signal: sys::Signal) -> i64 {
    crate::hsa_signal_load_scacquire(signal)
}

/// `hsa_signal_wait_acquire` (deprecated name of `_scacquire`).
pub extern "C" fn hsa_signal_wait_acquire(
    signal: sys::Signal,
    condition: u32,
    compare_value: i64,
    timeout_hint: u64,
    wait_state_hint: u32,
) -> i64 {
    crate::hsa_signal_wait_scacquire(
        signal,
        condition,
        compare_value,
        timeout_hint,
        wait_state_hint,
    )
}

// ---- Queue indices ----------------------------------------------------------------------

fn with_queue<T>(
    queue: *const sys::Queue,
    fallback: T,
    f: impl FnOnce(&crate::queue::QueueObj) -> T,
) -> T {
    crate::value(None, || {
        let rt = runtime().ok()?;
        let q = crate::queue::get(&rt, queue)?;
        drop(rt);
        Some(f(&q))
    })
    .unwrap_or(fallback)
}

/// Defines write-index stores (ignored for a pointer that is not a live queue).
macro_rules! queue_store {
    ($(fn $name:ident),+) => {$(
        #[doc = concat!("`", stringify!($name), "`.")]
                pub extern "C" fn $name(queue: *const sys::Queue, value: u64) {
            with_queue(queue, (), |q| q.write_index().store(value, Ordering::SeqCst));
        }
    )+};
}

queue_store!(
    fn hsa_queue_store_write_index_relaxed,
    fn hsa_queue_store_write_index_screlease,
    fn hsa_queue_store_write_index_release
);

/// Defines write-index additions: return the previous index (`u64::MAX` for a pointer that
/// is not a live queue).
macro_rules! queue_add {
    ($(fn $name:ident),+) => {$(
        #[doc = concat!("`", stringify!($name), "`: returns the previous write index.")]
                pub extern "C" fn $name(queue: *const sys::Queue, value: u64) -> u64 {
            crate::hsa_queue_add_write_index_scacq_screl(queue, value)
        }
    )+};
}

queue_add!(
    fn hsa_queue_add_write_index_screlease,
    fn hsa_queue_add_write_index_scacquire,
    fn hsa_queue_add_write_index_acq_rel,
    fn hsa_queue_add_write_index_acquire,
    fn hsa_queue_add_write_index_release
);

/// Defines write-index compare-and-swaps: return the previous index (`u64::MAX` for a
/// pointer that is not a live queue).
macro_rules! queue_cas {
    ($(fn $name:ident),+) => {$(
        #[doc = concat!("`", stringify!($name), "`: returns the previous write index.")]
                pub extern "C" fn $name(queue: *const sys::Queue, expected: u64, value: u64) -> u64 {
            with_queue(queue, u64::MAX, |q| {
                q.write_index()
                    .compare_exchange(expected, value, Ordering::SeqCst, Ordering::SeqCst)
                    .unwrap_or_else(|v| v)
            })
        }
    )+};
}

queue_cas!(
    fn hsa_queue_cas_write_index_relaxed,
    fn hsa_queue_cas_write_index_screlease,
    fn hsa_queue_cas_write_index_scacquire,
    fn hsa_queue_cas_write_index_scacq_screl,
    fn hsa_queue_cas_write_index_acq_rel,
    fn hsa_queue_cas_write_index_acquire,
    fn hsa_queue_cas_write_index_release
);

/// `hsa_queue_load_write_index_scacquire`.
pub extern "C" fn hsa_queue_load_write_index_scacquire(queue: *const sys::Queue) -> u64 {
    crate::hsa_queue_load_write_index_relaxed(queue)
}

/// `hsa_queue_load_write_index_acquire` (deprecated name).
pub extern "C" fn hsa_queue_load_write_index_acquire(queue: *const sys::Queue) -> u64 {
    crate::hsa_queue_load_write_index_relaxed(queue)
}

/// `hsa_queue_load_read_index_acquire` (deprecated name).
pub extern "C" fn hsa_queue_load_read_index_acquire(queue: *const sys::Queue) -> u64 {
    crate::hsa_queue_load_read_index_scacquire(queue)
}

fn live_queue(
    rt: &Runtime,
    queue: *const sys::Queue,
) -> Result<Arc<crate::queue::QueueObj>, Status> {
    crate::queue::get(rt, queue).ok_or_else(|| {
        fail(
            sys::STATUS_ERROR_INVALID_QUEUE,
            format!("{queue:p} is not a live queue of this runtime (destroyed already?)"),
        )
    })
}

/// `hsa_amd_queue_cu_set_mask`: checks and records the mask. Every dispatch runs on the
/// whole emulated GPU (which CUs run a workgroup changes no result of the emulator).
///
/// # Safety
/// `cu_mask` must point to `num_cu_mask_count / 32` words.
pub unsafe extern "C" fn hsa_amd_queue_cu_set_mask(
    queue: *const sys::Queue,
    num_cu_mask_count: u32,
    cu_mask: *const u32,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        let q = live_queue(&rt, queue)?;
        if !num_cu_mask_count.is_multiple_of(32) || (num_cu_mask_count > 0 && cu_mask.is_null()) {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("{num_cu_mask_count} mask bits (a multiple of 32, with a non-null mask)"),
            ));
        }
        let words = if cu_mask.is_null() {
            Vec::new()
        } else {
            // SAFETY: the caller's contract.
            unsafe { std::slice::from_raw_parts(cu_mask, (num_cu_mask_count / 32) as usize) }
                .to_vec()
        };
        *crate::state::lock(&q.cu_mask) = words;
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_amd_queue_set_priority`: checks and records the priority (queues run concurrently).
pub extern "C" fn hsa_amd_queue_set_priority(queue: *mut sys::Queue, priority: u32) -> Status {
    entry(|| {
        let rt = runtime()?;
        let q = live_queue(&rt, queue)?;
        if priority > 2 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("queue priority {priority} (low 0, normal 1, high 2)"),
            ));
        }
        q.priority.store(priority, Ordering::SeqCst);
        Ok(sys::STATUS_SUCCESS)
    })
}

// ---- Profiling --------------------------------------------------------------------------

static COPY_PROFILING: AtomicBool = AtomicBool::new(false);

/// `hsa_amd_profiling_set_profiler_enabled`: from now on the queue's completion signals
/// carry their dispatch's start and end.
pub extern "C" fn hsa_amd_profiling_set_profiler_enabled(
    queue: *mut sys::Queue,
    enable: c_int,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        let q = live_queue(&rt, queue)?;
        q.profiling.store(enable != 0, Ordering::SeqCst);
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_amd_profiling_get_dispatch_time`: the start and end of the last profiled dispatch
/// that signalled `signal`, in system timestamp ticks (`HSA_SYSTEM_INFO_TIMESTAMP`). The
/// times are modeled: the start is the host time the packet processor took the packet, and
/// end - start is the MI355X timing model's predicted kernel time of that dispatch (its code
/// object, grid and kernarg, over the memory it ran on; the model's launch overhead left
/// out). With `TILEGEN_HSA_EMU_MODELED_TIMING=0` at `hsa_init` they are host times around the
/// emulation instead.
///
/// # Safety
/// `time` must be valid for writing two u64s.
pub unsafe extern "C" fn hsa_amd_profiling_get_dispatch_time(
    agent: sys::Agent,
    signal: sys::Signal,
    time: *mut [u64; 2],
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if agent != GPU_AGENT {
            check_agent(agent)?;
            return Err(fail(
                sys::STATUS_ERROR_INVALID_AGENT,
                "dispatch times come from the GPU agent",
            ));
        }
        let s = live_signal(&rt, signal)?;
        if time.is_null() {
            return Err(null_argument("time"));
        }
        let (start, end) = s.times();
        // SAFETY: the caller's pointer, checked non-null.
        Ok(unsafe { put(time.cast(), [start, end]) })
    })
}

/// `hsa_amd_profiling_async_copy_enable`: from now on async copies' completion signals carry
/// the copy's start and end.
pub extern "C" fn hsa_amd_profiling_async_copy_enable(enable: bool) -> Status {
    entry(|| {
        runtime()?;
        COPY_PROFILING.store(enable, Ordering::SeqCst);
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_amd_profiling_get_async_copy_time`: the start and end (system timestamp ticks, host
/// times around the copy) of the last profiled copy that signalled `signal`.
///
/// # Safety
/// `time` must be valid for writing two u64s.
pub unsafe extern "C" fn hsa_amd_profiling_get_async_copy_time(
    signal: sys::Signal,
    time: *mut [u64; 2],
) -> Status {
    entry(|| {
        let rt = runtime()?;
        let s = live_signal(&rt, signal)?;
        if time.is_null() {
            return Err(null_argument("time"));
        }
        let (start, end) = s.times();
        // SAFETY: the caller's pointer, checked non-null.
        Ok(unsafe { put(time.cast(), [start, end]) })
    })
}

// ---- Asynchronous copies and fills ------------------------------------------------------

/// Runs `op` once every dependency signal is 0, then decrements `completion`: at once when
/// they all are already, else on a thread.
fn after_dependencies(
    rt: &Arc<Runtime>,
    deps: Vec<Arc<SignalObj>>,
    completion: Arc<SignalObj>,
    op: impl FnOnce(&Runtime) -> Status + Send + 'static,
) -> Result<Status, Status> {
    let run = move |rt: &Runtime| {
        let start = crate::state::timestamp();
        let status = op(rt);
        if COPY_PROFILING.load(Ordering::SeqCst) {
            completion.set_times(start, crate::state::timestamp());
        }
        completion.add(-1);
        status
    };
    if deps.iter().all(|d| d.load() == 0) {
        return Ok(run(rt));
    }
    let weak = Arc::downgrade(rt);
    std::thread::Builder::new()
        .name("hsa-emu-async-copy".into())
        .spawn(move || {
            for d in &deps {
                d.wait_until(|v| v == 0, None, || weak.strong_count() == 0);
            }
            if let Some(rt) = weak.upgrade() {
                // A refused copy leaves its reason in hsa_status_string; the completion
                // signal falls all the same, so no waiter is stranded.
                run(&rt);
            }
        })
        .map_err(|e| {
            fail(
                sys::STATUS_ERROR_OUT_OF_RESOURCES,
                format!("starting the copy's thread: {e}"),
            )
        })?;
    Ok(sys::STATUS_SUCCESS)
}

fn dependencies(
    rt: &Runtime,
    n: u32,
    deps: *const sys::Signal,
) -> Result<Vec<Arc<SignalObj>>, Status> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if deps.is_null() {
        return Err(null_argument("dep_signals"));
    }
    // SAFETY: the caller's contract (n signals).
    let list = unsafe { std::slice::from_raw_parts(deps, n as usize) };
    list.iter().map(|s| live_signal(rt, *s)).collect()
}

/// `hsa_amd_memory_async_copy`: copies once the dependency signals are 0, then decrements the
/// completion signal. Argument errors are returned; a copy that is refused after its
/// dependencies (memory freed meanwhile) still signals completion and leaves the reason in
/// `hsa_status_string`.
///
/// # Safety
/// Host ranges must stay valid until the completion signal falls; `dep_signals` must point to
/// `num_dep_signals` signals.
pub unsafe extern "C" fn hsa_amd_memory_async_copy(
    dst: *mut c_void,
    dst_agent: sys::Agent,
    src: *const c_void,
    src_agent: sys::Agent,
    size: usize,
    num_dep_signals: u32,
    dep_signals: *const sys::Signal,
    completion_signal: sys::Signal,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        check_agent(dst_agent)?;
        check_agent(src_agent)?;
        if dst.is_null() || src.is_null() {
            return Err(null_argument("dst or src"));
        }
        let completion = live_signal(&rt, completion_signal)?;
        let deps = dependencies(&rt, num_dep_signals, dep_signals)?;
        let (dst, src) = (dst as u64, src as u64);
        after_dependencies(&rt, deps, completion, move |rt| {
            // SAFETY: the caller's contract.
            unsafe { memory::copy(rt, dst, src, size) }
        })
    })
}

/// `hsa_pitched_ptr_t`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PitchedPtr {
    base: *mut c_void,
    pitch: usize,
    slice: usize,
}

/// `hsa_amd_memory_async_copy_rect`: a 3-D copy (x in bytes, y rows, z slices) done row by
/// row.
///
/// # Safety
/// As `hsa_amd_memory_async_copy`; the pointers must be valid.
pub unsafe extern "C" fn hsa_amd_memory_async_copy_rect(
    dst: *const PitchedPtr,
    dst_offset: *const [u32; 3],
    src: *const PitchedPtr,
    src_offset: *const [u32; 3],
    range: *const [u32; 3],
    copy_agent: sys::Agent,
    dir: u32,
    num_dep_signals: u32,
    dep_signals: *const sys::Signal,
    completion_signal: sys::Signal,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        check_agent(copy_agent)?;
        if dst.is_null()
            || src.is_null()
            || dst_offset.is_null()
            || src_offset.is_null()
            || range.is_null()
        {
            return Err(null_argument("a pitched pointer, offset or range"));
        }
        if dir > 4 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("copy direction {dir}"),
            ));
        }
        // SAFETY: the caller's contract (checked non-null).
        let (d, s, dofs, sofs, r) = unsafe { (*dst, *src, *dst_offset, *src_offset, *range) };
        let completion = live_signal(&rt, completion_signal)?;
        let deps = dependencies(&rt, num_dep_signals, dep_signals)?;
        // (base, row pitch, slice pitch) of each side, as plain integers for the copy thread.
        let dp = (d.base as u64, d.pitch as u64, d.slice as u64);
        let sp = (s.base as u64, s.pitch as u64, s.slice as u64);
        after_dependencies(&rt, deps, completion, move |rt| {
            let at = |(base, pitch, slice): (u64, u64, u64), o: [u32; 3], y: u32, z: u32| {
                base + u64::from(o[2] + z) * slice + u64::from(o[1] + y) * pitch + u64::from(o[0])
            };
            for z in 0..r[2].max(1) {
                for y in 0..r[1].max(1) {
                    // SAFETY: the caller's contract.
                    let st = unsafe {
                        memory::copy(rt, at(dp, dofs, y, z), at(sp, sofs, y, z), r[0] as usize)
                    };
                    if st != sys::STATUS_SUCCESS {
                        return st;
                    }
                }
            }
            sys::STATUS_SUCCESS
        })
    })
}

/// `hsa_amd_memory_fill`: `count` 32-bit words of `value` at `ptr`.
///
/// # Safety
/// A host range must be valid for writing `4 * count` bytes.
pub unsafe extern "C" fn hsa_amd_memory_fill(ptr: *mut c_void, value: u32, count: usize) -> Status {
    entry(|| {
        let rt = runtime()?;
        // SAFETY: the caller's contract.
        Ok(unsafe { memory::fill(&rt, ptr as u64, value, count) })
    })
}

// ---- Locked memory and pointer information ----------------------------------------------

fn check_agents(agents: *const sys::Agent, n: c_int) -> Result<(), Status> {
    if n < 0 || (n > 0 && agents.is_null()) {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            "a negative agent count or a null agent list",
        ));
    }
    if n > 0 {
        // SAFETY: the caller's contract (n agents).
        for a in unsafe { std::slice::from_raw_parts(agents, n as usize) } {
            check_agent(*a)?;
        }
    }
    Ok(())
}

/// `hsa_amd_memory_lock`: gives the application's memory an agent address kernels can use
/// (see the `memory` module for how the two are kept in step).
///
/// # Safety
/// `host_ptr` must stay valid for `size` bytes until unlocked; `agents` must point to
/// `num_agent` agents; `agent_ptr` valid for writing.
pub unsafe extern "C" fn hsa_amd_memory_lock(
    host_ptr: *mut c_void,
    size: usize,
    agents: *const sys::Agent,
    num_agent: c_int,
    agent_ptr: *mut *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        check_agents(agents, num_agent)?;
        if agent_ptr.is_null() {
            return Err(null_argument("agent_ptr"));
        }
        let a = memory::lock_memory(&rt, host_ptr as usize, size, None)?;
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { agent_ptr.write(a as *mut c_void) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_amd_memory_lock_to_pool`: as `hsa_amd_memory_lock`, for a system pool.
///
/// # Safety
/// As `hsa_amd_memory_lock`.
pub unsafe extern "C" fn hsa_amd_memory_lock_to_pool(
    host_ptr: *mut c_void,
    size: usize,
    agents: *const sys::Agent,
    num_agent: c_int,
    pool: sys::MemoryPool,
    flags: u32,
    agent_ptr: *mut *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        check_agents(agents, num_agent)?;
        if agent_ptr.is_null() || flags != 0 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                "a null agent_ptr, or flags other than 0",
            ));
        }
        let a = memory::lock_memory(&rt, host_ptr as usize, size, Some(pool.handle))?;
        // SAFETY: the caller's pointer, checked non-null.
        unsafe { agent_ptr.write(a as *mut c_void) };
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_amd_memory_unlock`.
pub extern "C" fn hsa_amd_memory_unlock(host_ptr: *mut c_void) -> Status {
    entry(|| {
        let rt = runtime()?;
        Ok(memory::unlock_memory(&rt, host_ptr as usize))
    })
}

/// `hsa_amd_pointer_info`: the allocation holding `ptr` (fields up to `info->size`, which is
/// set to the size this runtime fills, that of ROCm 5.2's struct).
///
/// # Safety
/// `info` must point to a structure of `info->size` bytes; `alloc` must return memory for
/// the agent list.
pub unsafe extern "C" fn hsa_amd_pointer_info(
    ptr: *const c_void,
    info: *mut u8,
    alloc: Option<unsafe extern "C" fn(usize) -> *mut c_void>,
    num_agents_accessible: *mut u32,
    accessible: *mut *mut sys::Agent,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if info.is_null() {
            return Err(null_argument("info"));
        }
        // SAFETY: the caller's structure starts with its size.
        let size = unsafe { info.cast::<u32>().read_unaligned() } as usize;
        const FULL: usize = 56;
        if size < 8 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("info->size {size} (at least 8)"),
            ));
        }
        let want_list = !num_agents_accessible.is_null() || !accessible.is_null();
        if want_list && (num_agents_accessible.is_null() || accessible.is_null() || alloc.is_none())
        {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                "the accessible-agent list needs num_agents_accessible, accessible and alloc",
            ));
        }
        let p = memory::pointer_info(&rt, ptr as u64);
        let mut bytes = [0u8; FULL];
        let n = size.min(FULL);
        bytes[0..4].copy_from_slice(&(n as u32).to_le_bytes());
        bytes[4..8].copy_from_slice(&p.kind.to_le_bytes());
        bytes[8..16].copy_from_slice(&p.agent_base.to_le_bytes());
        bytes[16..24].copy_from_slice(&p.host_base.to_le_bytes());
        bytes[24..32].copy_from_slice(&p.size.to_le_bytes());
        // userData (32..40) stays null: hsa_amd_pointer_info_set_userdata is not exported.
        bytes[40..48].copy_from_slice(&p.owner.handle.to_le_bytes());
        bytes[48..52].copy_from_slice(&p.flags.to_le_bytes());
        // SAFETY: the caller's structure holds `size` >= n bytes.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), info, n) };
        if want_list {
            let agents: Vec<sys::Agent> = match p.kind {
                0 => Vec::new(),
                _ if p.owner == GPU_AGENT && p.host_base == 0 => vec![GPU_AGENT],
                _ => vec![CPU_AGENT, GPU_AGENT],
            };
            let alloc = alloc.ok_or_else(|| null_argument("alloc"))?;
            // SAFETY: the caller's allocator.
            let list = unsafe { alloc(agents.len().max(1) * std::mem::size_of::<sys::Agent>()) }
                .cast::<sys::Agent>();
            if list.is_null() {
                return Err(fail(
                    sys::STATUS_ERROR_OUT_OF_RESOURCES,
                    "the caller's alloc returned null",
                ));
            }
            // SAFETY: `list` has room for the agents; the out pointers were checked non-null.
            unsafe {
                std::ptr::copy_nonoverlapping(agents.as_ptr(), list, agents.len());
                num_agents_accessible.write(agents.len() as u32);
                accessible.write(list);
            }
        }
        Ok(sys::STATUS_SUCCESS)
    })
}

/// `hsa_amd_coherency_set_type`: the emulated GPU sees host-visible memory at dispatch
/// boundaries whichever coherency is asked; checks the arguments.
pub extern "C" fn hsa_amd_coherency_set_type(agent: sys::Agent, coherency: u32) -> Status {
    entry(|| {
        runtime()?;
        check_agent(agent)?;
        if agent != GPU_AGENT {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_AGENT,
                "coherency is set for a GPU agent",
            ));
        }
        if coherency > 1 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("coherency type {coherency}"),
            ));
        }
        Ok(sys::STATUS_SUCCESS)
    })
}

// ---- Refused: IPC, SVM, graphics interop, images and samplers ----------------------------

const IPC: &str = "sharing memory with another process is not supported: the emulator's memory lives inside this process";
const SVM: &str = "shared virtual memory is not supported (HSA_AMD_SYSTEM_INFO_SVM_SUPPORTED is false): kernels reach memory allocated from this runtime's pools or locked with hsa_amd_memory_lock";

/// `hsa_amd_ipc_memory_create`: refused (`HSA_STATUS_ERROR`; a pointer that is no allocation
/// of this runtime is `HSA_STATUS_ERROR_INVALID_ARGUMENT`).
pub extern "C" fn hsa_amd_ipc_memory_create(
    ptr: *mut c_void,
    _len: usize,
    handle: *mut c_void,
) -> Status {
    entry(|| {
        let rt = runtime()?;
        if handle.is_null() || !memory::is_allocation(&rt, ptr as u64) {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!(
                    "{ptr:p} is not the base of an allocation of this runtime (or the handle is null)"
                ),
            ));
        }
        Err(fail(sys::STATUS_ERROR, IPC))
    })
}

/// `hsa_amd_ipc_memory_attach`: refused (`HSA_STATUS_ERROR`).
pub extern "C" fn hsa_amd_ipc_memory_attach(
    _handle: *const c_void,
    _len: usize,
    _num_agents: u32,
    _mapping_agents: *const sys::Agent,
    _mapped_ptr: *mut *mut c_void,
) -> Status {
    entry(|| {
        runtime()?;
        Err(fail(sys::STATUS_ERROR, IPC))
    })
}

/// `hsa_amd_ipc_memory_detach`: nothing is ever attached, so any pointer is invalid.
pub extern "C" fn hsa_amd_ipc_memory_detach(mapped_ptr: *mut c_void) -> Status {
    entry(|| {
        runtime()?;
        Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("{mapped_ptr:p} is not attached IPC memory ({IPC})"),
        ))
    })
}

/// `hsa_amd_svm_attributes_set`: refused (`HSA_STATUS_ERROR`).
pub extern "C" fn hsa_amd_svm_attributes_set(
    _ptr: *mut c_void,
    _size: usize,
    _list: *mut c_void,
    _count: usize,
) -> Status {
    entry(|| {
        runtime()?;
        Err(fail(sys::STATUS_ERROR, SVM))
    })
}

/// `hsa_amd_svm_attributes_get`: refused (`HSA_STATUS_ERROR`).
pub extern "C" fn hsa_amd_svm_attributes_get(
    _ptr: *mut c_void,
    _size: usize,
    _list: *mut c_void,
    _count: usize,
) -> Status {
    entry(|| {
        runtime()?;
        Err(fail(sys::STATUS_ERROR, SVM))
    })
}

/// `hsa_amd_svm_prefetch_async`: refused (`HSA_STATUS_ERROR`).
pub extern "C" fn hsa_amd_svm_prefetch_async(
    _ptr: *mut c_void,
    _size: usize,
    _agent: sys::Agent,
    _num_dep_signals: u32,
    _dep_signals: *const sys::Signal,
    _completion_signal: sys::Signal,
) -> Status {
    entry(|| {
        runtime()?;
        Err(fail(sys::STATUS_ERROR, SVM))
    })
}

/// `hsa_amd_interop_map_buffer`: no handle is valid (the emulator has no graphics driver).
pub extern "C" fn hsa_amd_interop_map_buffer(
    _num_agents: u32,
    _agents: *mut sys::Agent,
    interop_handle: c_int,
    _flags: u32,
    _size: *mut usize,
    _ptr: *mut *mut c_void,
    _metadata_size: *mut usize,
    _metadata: *mut *const c_void,
) -> Status {
    entry(|| {
        runtime()?;
        Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!(
                "interop handle {interop_handle}: there is no graphics driver to share buffers with"
            ),
        ))
    })
}

/// `hsa_amd_interop_unmap_buffer`: nothing is ever mapped.
pub extern "C" fn hsa_amd_interop_unmap_buffer(ptr: *mut c_void) -> Status {
    entry(|| {
        runtime()?;
        Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("{ptr:p} is not a mapped interop buffer"),
        ))
    })
}

fn images_refused(agent: sys::Agent) -> Result<Status, Status> {
    runtime()?;
    check_agent(agent)?;
    Err(fail(
        EXT_STATUS_ERROR_IMAGE_FORMAT_UNSUPPORTED,
        "images are not supported by the emulated agent (it supports no image format)",
    ))
}

/// `hsa_ext_image_create`: refused, no image format is supported.
pub extern "C" fn hsa_ext_image_create(
    agent: sys::Agent,
    _descriptor: *const c_void,
    _data: *const c_void,
    _access: u32,
    _image: *mut u64,
) -> Status {
    entry(|| images_refused(agent))
}

/// `hsa_ext_image_create_with_layout`: refused, no image format is supported.
pub extern "C" fn hsa_ext_image_create_with_layout(
    agent: sys::Agent,
    _descriptor: *const c_void,
    _data: *const c_void,
    _access: u32,
    _layout: u32,
    _row_pitch: usize,
    _slice_pitch: usize,
    _image: *mut u64,
) -> Status {
    entry(|| images_refused(agent))
}

/// `hsa_amd_image_create`: refused, no image format is supported.
pub extern "C" fn hsa_amd_image_create(
    agent: sys::Agent,
    _descriptor: *const c_void,
    _layout: *const c_void,
    _data: *const c_void,
    _access: u32,
    _image: *mut u64,
) -> Status {
    entry(|| images_refused(agent))
}

/// `hsa_ext_image_data_get_info`: refused, no image format is supported.
pub extern "C" fn hsa_ext_image_data_get_info(
    agent: sys::Agent,
    _descriptor: *const c_void,
    _access: u32,
    _info: *mut c_void,
) -> Status {
    entry(|| images_refused(agent))
}

fn no_image(agent: sys::Agent, image: u64) -> Result<Status, Status> {
    runtime()?;
    check_agent(agent)?;
    Err(fail(
        sys::STATUS_ERROR_INVALID_ARGUMENT,
        format!("image {image:#x} does not exist (no image can be created)"),
    ))
}

/// `hsa_ext_image_destroy`: no image exists.
pub extern "C" fn hsa_ext_image_destroy(agent: sys::Agent, image: u64) -> Status {
    entry(|| no_image(agent, image))
}

/// `hsa_ext_image_export`: no image exists.
pub extern "C" fn hsa_ext_image_export(
    agent: sys::Agent,
    image: u64,
    _dst: *mut c_void,
    _row_pitch: usize,
    _slice_pitch: usize,
    _region: *const c_void,
) -> Status {
    entry(|| no_image(agent, image))
}

/// `hsa_ext_image_import`: no image exists.
pub extern "C" fn hsa_ext_image_import(
    agent: sys::Agent,
    _src: *const c_void,
    _row_pitch: usize,
    _slice_pitch: usize,
    image: u64,
    _region: *const c_void,
) -> Status {
    entry(|| no_image(agent, image))
}

/// `hsa_ext_sampler_create`: refused, no sampler is supported.
pub extern "C" fn hsa_ext_sampler_create(
    agent: sys::Agent,
    _descriptor: *const c_void,
    _sampler: *mut u64,
) -> Status {
    entry(|| {
        runtime()?;
        check_agent(agent)?;
        Err(fail(
            EXT_STATUS_ERROR_SAMPLER_DESCRIPTOR_UNSUPPORTED,
            "samplers are not supported by the emulated agent",
        ))
    })
}

/// `hsa_ext_sampler_destroy`: no sampler exists.
pub extern "C" fn hsa_ext_sampler_destroy(agent: sys::Agent, sampler: u64) -> Status {
    entry(|| {
        runtime()?;
        check_agent(agent)?;
        Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("sampler {sampler:#x} does not exist (no sampler can be created)"),
        ))
    })
}
