//! Code-object readers, executables and their kernel symbols.

use std::ffi::c_void;
use std::sync::Arc;

use tilegen_codeobj::{CodeObject, Kernel};
use tilegen_emu::exec::Program;
use tilegen_hsa::sys::{self, Status};

use crate::state::{GPU_AGENT, Runtime, lock, put};
use crate::status::fail;

/// A kernel of a frozen executable, as a dispatch packet names it (by kernel object).
pub(crate) struct KernelObj {
    pub name: String,
    pub program: Program,
    /// Bytes of kernel arguments (the larger of the metadata's and the descriptor's).
    pub kernarg_size: u32,
    pub kernarg_align: u32,
    /// Static LDS bytes per workgroup.
    pub group_size: u32,
    /// Scratch bytes per work-item.
    pub private_size: u32,
    pub dynamic_callstack: bool,
    /// The kernel descriptor's address in device memory.
    pub object: u64,
}

/// A code object loaded into an executable: its image in device memory and its kernels.
pub(crate) struct LoadedCode {
    pub image_base: u64,
    pub kernels: Vec<Arc<KernelObj>>,
}

/// An executable: code objects loaded for the gfx950 agent, frozen before its kernels run.
#[derive(Default)]
pub(crate) struct ExecutableObj {
    pub frozen: bool,
    pub loaded: Vec<LoadedCode>,
}

/// A symbol handle: a kernel of an executable.
#[derive(Clone)]
pub(crate) struct SymbolObj {
    pub executable: u64,
    pub kernel: Arc<KernelObj>,
}

fn kernel_obj(k: &Kernel, program: Program, image_base: u64) -> KernelObj {
    KernelObj {
        name: k.name().to_string(),
        program,
        kernarg_size: k.meta.kernarg_segment_size.max(k.descriptor.kernarg_size),
        kernarg_align: k.meta.kernarg_segment_align.max(16),
        group_size: k.meta.group_segment_fixed_size,
        private_size: k.meta.private_segment_fixed_size,
        dynamic_callstack: k.meta.uses_dynamic_stack,
        object: image_base.wrapping_add(k.descriptor_address),
    }
}

/// The bytes tilegen's code-object reader takes for `bytes`: code object v4 (`EI_ABIVERSION`
/// 2) is laid out as v5 is (the same ELF sections, notes and kernel descriptor; v5 changed
/// the metadata's version and the hidden kernel arguments, which the application writes and
/// the reader takes by name), so a v4 object is read as v5. ROCr loads v4, v5 and v6.
pub(crate) fn as_supported(bytes: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    // e_ident[EI_OSABI] 64 (ELFOSABI_AMDGPU_HSA), e_ident[EI_ABIVERSION] 2 (v4).
    if bytes.len() > 8 && bytes[7] == 64 && bytes[8] == 2 {
        let mut v = bytes.to_vec();
        v[8] = 3;
        return std::borrow::Cow::Owned(v);
    }
    std::borrow::Cow::Borrowed(bytes)
}

/// `hsa_code_object_reader_create_from_memory`: keeps a copy of the bytes.
pub(crate) fn reader_create(rt: &Runtime, bytes: &[u8]) -> sys::CodeObjectReader {
    let handle = rt.handle();
    lock(&rt.readers).insert(handle, Arc::from(bytes));
    sys::CodeObjectReader { handle }
}

/// `hsa_code_object_reader_destroy`.
pub(crate) fn reader_destroy(rt: &Runtime, reader: sys::CodeObjectReader) -> Status {
    match lock(&rt.readers).remove(&reader.handle) {
        Some(_) => sys::STATUS_SUCCESS,
        None => fail(
            sys::STATUS_ERROR_INVALID_CODE_OBJECT_READER,
            format!(
                "code object reader {:#x} does not exist (destroyed already?)",
                reader.handle
            ),
        ),
    }
}

/// `hsa_executable_create_alt`.
pub(crate) fn executable_create(rt: &Runtime) -> sys::Executable {
    let handle = rt.handle();
    lock(&rt.executables).insert(handle, ExecutableObj::default());
    sys::Executable { handle }
}

fn no_executable(e: sys::Executable) -> Status {
    fail(
        sys::STATUS_ERROR_INVALID_EXECUTABLE,
        format!(
            "executable {:#x} does not exist (destroyed already?)",
            e.handle
        ),
    )
}

/// `hsa_executable_load_agent_code_object`.
pub(crate) fn load(
    rt: &Runtime,
    exe: sys::Executable,
    agent: sys::Agent,
    reader: sys::CodeObjectReader,
) -> Status {
    match lock(&rt.executables).get(&exe.handle) {
        None => return no_executable(exe),
        Some(e) if e.frozen => {
            return fail(
                sys::STATUS_ERROR_FROZEN_EXECUTABLE,
                format!(
                    "executable {:#x} is frozen: nothing more can be loaded into it",
                    exe.handle
                ),
            );
        }
        Some(_) => {}
    }
    if agent != GPU_AGENT {
        return fail(
            sys::STATUS_ERROR_INVALID_AGENT,
            format!(
                "agent {:#x} is not this runtime's gfx950 agent",
                agent.handle
            ),
        );
    }
    let Some(bytes) = lock(&rt.readers).get(&reader.handle).cloned() else {
        return fail(
            sys::STATUS_ERROR_INVALID_CODE_OBJECT_READER,
            format!(
                "code object reader {:#x} does not exist (destroyed already?)",
                reader.handle
            ),
        );
    };
    let co = match CodeObject::parse(&as_supported(&bytes)) {
        Ok(co) => co,
        Err(e) => return fail(sys::STATUS_ERROR_INVALID_CODE_OBJECT, e),
    };
    if co.kernels.is_empty() {
        return fail(
            sys::STATUS_ERROR_INVALID_CODE_OBJECT,
            "the code object has no kernels",
        );
    }
    let programs = match rt.emu().load_all(&co) {
        Ok(p) => p,
        Err(e) => {
            return fail(
                sys::STATUS_ERROR_INVALID_CODE_OBJECT,
                format!("loading its image: {e}"),
            );
        }
    };
    let image_base = programs.first().map_or(0, Program::image_base);
    rt.device_high.fetch_max(
        image_base.saturating_add(co.image_size()),
        std::sync::atomic::Ordering::SeqCst,
    );
    let kernels = co
        .kernels
        .iter()
        .zip(programs)
        .map(|(k, p)| Arc::new(kernel_obj(k, p, image_base)))
        .collect();
    match lock(&rt.executables).get_mut(&exe.handle) {
        Some(e) if !e.frozen => {
            e.loaded.push(LoadedCode {
                image_base,
                kernels,
            });
            sys::STATUS_SUCCESS
        }
        // Destroyed or frozen meanwhile: give the image back.
        _ => {
            let _ = rt.emu().memory_mut().free(image_base);
            no_executable(exe)
        }
    }
}

/// `hsa_executable_freeze`: the kernels become dispatchable.
pub(crate) fn freeze(rt: &Runtime, exe: sys::Executable) -> Status {
    let mut exes = lock(&rt.executables);
    let Some(e) = exes.get_mut(&exe.handle) else {
        return no_executable(exe);
    };
    if e.frozen {
        return fail(
            sys::STATUS_ERROR_FROZEN_EXECUTABLE,
            format!("executable {:#x} is frozen already", exe.handle),
        );
    }
    e.frozen = true;
    let mut kernels = rt.kernels.write().unwrap_or_else(|p| p.into_inner());
    for k in e.loaded.iter().flat_map(|l| &l.kernels) {
        kernels.insert(k.object, k.clone());
    }
    sys::STATUS_SUCCESS
}

/// `hsa_executable_destroy`: its kernels can no longer be dispatched, its images are freed.
pub(crate) fn executable_destroy(rt: &Runtime, exe: sys::Executable) -> Status {
    let Some(e) = lock(&rt.executables).remove(&exe.handle) else {
        return no_executable(exe);
    };
    {
        let mut kernels = rt.kernels.write().unwrap_or_else(|p| p.into_inner());
        for k in e.loaded.iter().flat_map(|l| &l.kernels) {
            kernels.remove(&k.object);
        }
    }
    lock(&rt.symbols).retain(|_, s| s.executable != exe.handle);
    let mut emu = rt.emu();
    for l in &e.loaded {
        let _ = emu.memory_mut().free(l.image_base);
    }
    sys::STATUS_SUCCESS
}

/// `hsa_executable_get_symbol_by_name`.
pub(crate) fn symbol_by_name(
    rt: &Runtime,
    exe: sys::Executable,
    name: &str,
    agent: Option<sys::Agent>,
) -> Result<sys::ExecutableSymbol, Status> {
    if let Some(a) = agent
        && a != GPU_AGENT
    {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_AGENT,
            format!("agent {:#x} is not this runtime's gfx950 agent", a.handle),
        ));
    }
    let exes = lock(&rt.executables);
    let e = exes.get(&exe.handle).ok_or_else(|| no_executable(exe))?;
    let all = || e.loaded.iter().flat_map(|l| &l.kernels);
    let kernel = all()
        // Kernels are named by their descriptor symbol only, `name.kd` (as ROCr since 4.1).
        .find(|k| format!("{}.kd", k.name) == name)
        .cloned()
        .ok_or_else(|| {
            let names: Vec<String> = all().map(|k| format!("{}.kd", k.name)).collect();
            fail(
                sys::STATUS_ERROR_INVALID_SYMBOL_NAME,
                format!(
                    "the executable has no symbol `{name}` (it has: {})",
                    names.join(", ")
                ),
            )
        })?;
    let mut symbols = lock(&rt.symbols);
    if let Some((&h, _)) = symbols
        .iter()
        .find(|(_, s)| s.executable == exe.handle && Arc::ptr_eq(&s.kernel, &kernel))
    {
        return Ok(sys::ExecutableSymbol { handle: h });
    }
    let handle = rt.handle();
    symbols.insert(
        handle,
        SymbolObj {
            executable: exe.handle,
            kernel,
        },
    );
    Ok(sys::ExecutableSymbol { handle })
}

/// `hsa_executable_symbol_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type (for the name: its length).
pub(crate) unsafe fn symbol_info(
    rt: &Runtime,
    symbol: sys::ExecutableSymbol,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    let Some(s) = lock(&rt.symbols).get(&symbol.handle).cloned() else {
        return fail(
            sys::STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL,
            format!(
                "executable symbol {:#x} does not exist (its executable destroyed?)",
                symbol.handle
            ),
        );
    };
    if value.is_null() {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            "the value pointer is null",
        );
    }
    let frozen = lock(&rt.executables)
        .get(&s.executable)
        .is_some_and(|e| e.frozen);
    let k = &s.kernel;
    let name = format!("{}.kd", k.name);
    // SAFETY (every `put`): the caller's buffer is of the attribute's documented type.
    unsafe {
        match attribute {
            sys::EXECUTABLE_SYMBOL_INFO_TYPE => put::<u32>(value, sys::SYMBOL_KIND_KERNEL),
            sys::EXECUTABLE_SYMBOL_INFO_NAME_LENGTH => put::<u32>(value, name.len() as u32),
            sys::EXECUTABLE_SYMBOL_INFO_NAME => {
                std::ptr::copy_nonoverlapping(name.as_ptr(), value.cast(), name.len());
                sys::STATUS_SUCCESS
            }
            sys::EXECUTABLE_SYMBOL_INFO_AGENT => put(value, GPU_AGENT),
            sys::EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT => {
                put::<u64>(value, if frozen { k.object } else { 0 })
            }
            sys::EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE => {
                put::<u32>(value, k.kernarg_size)
            }
            sys::EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT => {
                put::<u32>(value, k.kernarg_align)
            }
            sys::EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE => {
                put::<u32>(value, k.group_size)
            }
            sys::EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE => {
                put::<u32>(value, k.private_size)
            }
            sys::EXECUTABLE_SYMBOL_INFO_KERNEL_DYNAMIC_CALLSTACK => {
                put::<bool>(value, k.dynamic_callstack)
            }
            other => fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("symbol attribute {other} is not one this runtime answers"),
            ),
        }
    }
}

/// The kernels of frozen executables by kernel object (for the packet processor).
pub(crate) fn kernel(rt: &Runtime, object: u64) -> Option<Arc<KernelObj>> {
    rt.kernels
        .read()
        .unwrap_or_else(|p| p.into_inner())
        .get(&object)
        .cloned()
}
