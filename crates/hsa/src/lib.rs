//! tilegen-hsa: [`HsaDevice`], tilegen's [`Device`](tilegen_device::Device) on a real GPU
//! through the HSA runtime (ROCm's `libhsa-runtime64`), loaded at run time.
//!
//! Nothing links against ROCm: [`sys::Api::load`] opens `libhsa-runtime64.so.1` (or the path
//! in `$TILEGEN_HSA_LIB`) and resolves every function the device needs up front, naming any
//! that is missing. [`HsaDevice::open`] initializes the runtime, picks a GPU agent by index,
//! finds its kernarg (fine-grained, kernarg-init) and device (coarse-grained) memory pools and
//! creates a queue; code objects load through a code-object reader into a frozen executable;
//! dispatches are AQL kernel-dispatch packets published with a release store of the header
//! and a rung doorbell; waits end in a timeout that reports a hung kernel instead of blocking
//! forever. Every failing status becomes an [`HsaError::Status`] carrying the runtime's
//! `hsa_status_string`.
//!
//! [`agents`] lists what a library finds (for `tilegen devices`) or says why it finds
//! nothing: the library is missing, `hsa_init` failed (with its status), or there is no GPU.
#![deny(missing_docs)]

mod device;
pub mod sys;

use std::ffi::{c_char, c_void};
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub use device::{HsaDevice, HsaOptions};
use sys::{Api, Status};

/// Why the HSA runtime could not be used, or what it refused.
#[derive(Debug, thiserror::Error)]
pub enum HsaError {
    /// The library file is not a complete shared object for this machine; loading it could
    /// crash the process (a segment past the end of a truncated file faults when mapped).
    #[error("the HSA runtime `{}` is not a loadable shared library: {why} (point ${} at ROCm's libhsa-runtime64)", path.display(), sys::LIBRARY_ENV)]
    NotALibrary {
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        why: String,
    },
    /// The library file could not be read for its check.
    #[error("reading the HSA runtime `{}`", path.display())]
    LibraryFile {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The library could not be loaded (not installed, or not a shared library).
    #[error(
        "loading the HSA runtime `{}`: {} (install ROCm's libhsa-runtime64, or point ${} at one)",
        path.display(),
        chain(source),
        sys::LIBRARY_ENV
    )]
    Load {
        /// The library asked for.
        path: PathBuf,
        /// The dynamic loader's error.
        #[source]
        source: libloading::Error,
    },
    /// The library lacks a function tilegen calls.
    #[error("the HSA runtime `{}` has no function `{symbol}`, which tilegen needs: {}", path.display(), chain(source))]
    MissingSymbol {
        /// The library.
        path: PathBuf,
        /// The missing function.
        symbol: &'static str,
        /// The dynamic loader's error.
        #[source]
        source: libloading::Error,
    },
    /// An HSA call returned a status other than success.
    #[error("{call} failed with status {status:#x}: {text}")]
    Status {
        /// The function called.
        call: &'static str,
        /// The `hsa_status_t`.
        status: Status,
        /// The runtime's `hsa_status_string` for it.
        text: String,
    },
    /// There is no GPU agent of that index.
    #[error("there is no GPU agent {index}: the HSA runtime found {} ({})", names.len(), if names.is_empty() { "none".to_string() } else { names.join(", ") })]
    NoAgent {
        /// The index asked for.
        index: usize,
        /// The GPU agents there are.
        names: Vec<String>,
    },
    /// The agent lacks a memory pool the device needs.
    #[error("GPU agent `{agent}` has no {what} memory pool the runtime can allocate from")]
    NoPool {
        /// The agent's name.
        agent: String,
        /// Which pool (kernarg, device).
        what: &'static str,
    },
}

/// An error and its sources on one line (the dynamic loader's text is a source).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut next = e.source();
    while let Some(s) = next {
        text.push_str(": ");
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

impl HsaError {
    /// The HSA status, for a failed call.
    pub fn status(&self) -> Option<Status> {
        match self {
            HsaError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

/// What kind of device an agent is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceType {
    /// A CPU.
    Cpu,
    /// A GPU.
    Gpu,
    /// Something else (`hsa_device_type_t` value).
    Other(u32),
}

/// A memory pool of an agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolInfo {
    /// The pool's handle.
    pub handle: sys::MemoryPool,
    /// `hsa_amd_segment_t` (0 = global).
    pub segment: u32,
    /// Bit-field of `hsa_amd_memory_pool_global_flag_t` (kernarg-init, fine, coarse).
    pub flags: u32,
    /// Bytes.
    pub size: u64,
    /// Whether `hsa_amd_memory_pool_allocate` may allocate from it.
    pub alloc_allowed: bool,
}

impl PoolInfo {
    /// A global pool the runtime allocates from, with all of `flags`.
    fn is_global_with(&self, flags: u32) -> bool {
        self.segment == sys::AMD_SEGMENT_GLOBAL && self.alloc_allowed && self.flags & flags == flags
    }
}

/// An HSA agent as the runtime describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentInfo {
    /// The agent's handle.
    pub handle: sys::Agent,
    /// `HSA_AGENT_INFO_NAME` (`gfx950` for an MI355X).
    pub name: String,
    /// `HSA_AMD_AGENT_INFO_PRODUCT_NAME` (empty if the runtime has none).
    pub product: String,
    /// CPU, GPU, ...
    pub device_type: DeviceType,
    /// `HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT` (0 if unknown).
    pub compute_units: u32,
    /// `HSA_AGENT_INFO_PROFILE`.
    pub profile: u32,
    /// The agent's memory pools.
    pub pools: Vec<PoolInfo>,
}

impl AgentInfo {
    /// Whether the agent runs kernels (a GPU).
    pub fn is_gpu(&self) -> bool {
        self.device_type == DeviceType::Gpu
    }

    /// Bytes of the agent's coarse-grained global pools (its device memory).
    pub fn device_memory(&self) -> u64 {
        self.pools
            .iter()
            .filter(|p| p.is_global_with(sys::AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED))
            .map(|p| p.size)
            .sum()
    }
}

/// The runtime, initialized: `hsa_init` on creation, `hsa_shut_down` when the last user
/// (device, module) is gone. The runtime counts references itself, so several devices may
/// each hold one.
struct Runtime {
    api: Arc<Api>,
}

impl Runtime {
    fn init(api: Arc<Api>) -> Result<Arc<Runtime>, HsaError> {
        // SAFETY: hsa_init takes no arguments; the runtime counts calls.
        api.check("hsa_init", unsafe { (api.hsa_init)() })?;
        Ok(Arc::new(Runtime { api }))
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        // SAFETY: balances the hsa_init of `Runtime::init`; every object made under it (queues,
        // signals, executables, memory) has been released by the owners holding this runtime.
        unsafe { (self.api.hsa_shut_down)() };
    }
}

/// Reads a `char[64]` agent attribute.
fn agent_string(api: &Api, agent: sys::Agent, attribute: u32) -> Result<String, HsaError> {
    let mut buf = [0u8; 64];
    // SAFETY: the attribute is a char[64]; the buffer has 64 bytes.
    api.check("hsa_agent_get_info", unsafe {
        (api.hsa_agent_get_info)(agent, attribute, buf.as_mut_ptr().cast())
    })?;
    let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
    Ok(String::from_utf8_lossy(&buf[..end]).into_owned())
}

/// Reads a `uint32_t`-sized agent attribute (`attribute` must be one).
fn agent_u32(api: &Api, agent: sys::Agent, attribute: u32) -> Result<u32, HsaError> {
    let mut v = 0u32;
    // SAFETY: the attribute is 32 bits wide (uint32_t or an enum).
    api.check("hsa_agent_get_info", unsafe {
        (api.hsa_agent_get_info)(agent, attribute, (&mut v as *mut u32).cast())
    })?;
    Ok(v)
}

/// Collects the values an HSA iteration hands its callback.
unsafe extern "C" fn collect_agent(agent: sys::Agent, data: *mut c_void) -> Status {
    // SAFETY: `data` is the `Vec` the caller passed to hsa_iterate_agents, alive and not
    // otherwise borrowed during the (synchronous) iteration.
    unsafe { &mut *(data as *mut Vec<sys::Agent>) }.push(agent);
    sys::STATUS_SUCCESS
}

unsafe extern "C" fn collect_pool(pool: sys::MemoryPool, data: *mut c_void) -> Status {
    // SAFETY: as in `collect_agent`.
    unsafe { &mut *(data as *mut Vec<sys::MemoryPool>) }.push(pool);
    sys::STATUS_SUCCESS
}

fn pool_info(api: &Api, pool: sys::MemoryPool) -> Result<PoolInfo, HsaError> {
    let get = |attribute: u32, out: *mut c_void| {
        // SAFETY: each caller passes a buffer of the attribute's type.
        api.check("hsa_amd_memory_pool_get_info", unsafe {
            (api.hsa_amd_memory_pool_get_info)(pool, attribute, out)
        })
    };
    let (mut segment, mut flags, mut size, mut alloc) = (0u32, 0u32, 0usize, false);
    get(
        sys::AMD_MEMORY_POOL_INFO_SEGMENT,
        (&mut segment as *mut u32).cast(),
    )?;
    if segment == sys::AMD_SEGMENT_GLOBAL {
        get(
            sys::AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS,
            (&mut flags as *mut u32).cast(),
        )?;
    }
    get(
        sys::AMD_MEMORY_POOL_INFO_SIZE,
        (&mut size as *mut usize).cast(),
    )?;
    get(
        sys::AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED,
        (&mut alloc as *mut bool).cast(),
    )?;
    Ok(PoolInfo {
        handle: pool,
        segment,
        flags,
        size: size as u64,
        alloc_allowed: alloc,
    })
}

/// Every agent of an initialized runtime, with its pools.
fn list_agents(api: &Api) -> Result<Vec<AgentInfo>, HsaError> {
    let mut handles: Vec<sys::Agent> = Vec::new();
    // SAFETY: the callback only pushes into the Vec passed as `data`, which outlives the call.
    api.check("hsa_iterate_agents", unsafe {
        (api.hsa_iterate_agents)(collect_agent, (&mut handles as *mut Vec<sys::Agent>).cast())
    })?;
    handles
        .into_iter()
        .map(|agent| {
            let device_type = match agent_u32(api, agent, sys::AGENT_INFO_DEVICE)? {
                sys::DEVICE_TYPE_CPU => DeviceType::Cpu,
                sys::DEVICE_TYPE_GPU => DeviceType::Gpu,
                other => DeviceType::Other(other),
            };
            let mut pools: Vec<sys::MemoryPool> = Vec::new();
            // SAFETY: as for hsa_iterate_agents.
            api.check("hsa_amd_agent_iterate_memory_pools", unsafe {
                (api.hsa_amd_agent_iterate_memory_pools)(
                    agent,
                    collect_pool,
                    (&mut pools as *mut Vec<sys::MemoryPool>).cast(),
                )
            })?;
            Ok(AgentInfo {
                handle: agent,
                name: agent_string(api, agent, sys::AGENT_INFO_NAME)?,
                product: agent_string(api, agent, sys::AMD_AGENT_INFO_PRODUCT_NAME)
                    .unwrap_or_default(),
                device_type,
                compute_units: agent_u32(api, agent, sys::AMD_AGENT_INFO_COMPUTE_UNIT_COUNT)
                    .unwrap_or(0),
                profile: agent_u32(api, agent, sys::AGENT_INFO_PROFILE)
                    .unwrap_or(sys::PROFILE_BASE),
                pools: pools
                    .into_iter()
                    .map(|p| pool_info(api, p))
                    .collect::<Result<_, _>>()?,
            })
        })
        .collect()
}

/// The agents the HSA library at `library` finds (CPUs and GPUs), or why it finds none: it
/// does not load, lacks a function, or `hsa_init` fails (the error names the status and the
/// runtime's text for it). The runtime is shut down again before returning.
pub fn agents(library: &Path) -> Result<Vec<AgentInfo>, HsaError> {
    let rt = Runtime::init(Api::load(library)?)?;
    list_agents(&rt.api)
}

/// A C string from a Rust one, for names the runtime looks up (NUL bytes cannot occur in
/// kernel symbol names the code-object reader accepted; one that has them is cut there).
fn c_name(s: &str) -> Vec<c_char> {
    s.bytes()
        .take_while(|&b| b != 0)
        .map(|b| b as c_char)
        .chain(std::iter::once(0))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_library_is_named_with_the_loaders_reason() {
        let e = agents(Path::new("/nonexistent/libhsa-runtime64.so.1")).unwrap_err();
        let text = e.to_string();
        assert!(matches!(e, HsaError::Load { .. }), "{text}");
        assert!(
            text.contains("/nonexistent/libhsa-runtime64.so.1")
                && text.contains("No such file")
                && text.contains(sys::LIBRARY_ENV),
            "{text}"
        );
        assert_eq!(e.status(), None);
    }

    /// A file that is not a whole shared object for this machine is refused before the
    /// dynamic loader maps it (a truncated library used to end the process with SIGBUS).
    #[test]
    fn broken_library_files_are_refused_before_loading() {
        let dir = tempfile::tempdir().unwrap();
        let real = [
            "/usr/lib/x86_64-linux-gnu/libm.so.6",
            "/lib/x86_64-linux-gnu/libm.so.6",
        ]
        .into_iter()
        .find_map(|p| std::fs::read(p).ok())
        .expect("the C library's libm");
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("truncated", real[..real.len() / 2].to_vec()),
            ("header-only", real[..64].to_vec()),
            ("empty", Vec::new()),
            ("text", b"not a library\n".to_vec()),
            ("object", {
                // ET_REL instead of ET_DYN.
                let mut b = real.clone();
                b[16] = 1;
                b[17] = 0;
                b
            }),
            ("machine", {
                let mut b = real.clone();
                b[18] = 0xe0; // EM_AMDGPU
                b[19] = 0;
                b
            }),
        ];
        for (name, bytes) in cases {
            let path = dir.path().join(format!("{name}.so"));
            std::fs::write(&path, bytes).unwrap();
            let e = agents(&path).unwrap_err();
            assert!(matches!(e, HsaError::NotALibrary { .. }), "{name}: {e}");
        }
        let fifo = dir.path().join("fifo.so");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = agents(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let zero = dir.path().join("zero.so");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = agents(&zero).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        // The whole library passes the check (and fails later, at hsa's missing functions).
        let whole = dir.path().join("whole.so");
        std::fs::write(&whole, &real).unwrap();
        assert!(sys::check_library_file(&whole).is_ok());
    }

    #[test]
    fn names_become_nul_terminated_c_strings() {
        assert_eq!(
            c_name("k.kd"),
            [b'k', b'.', b'k', b'd', 0].map(|b| b as c_char)
        );
        assert_eq!(c_name("a\0b"), [b'a' as c_char, 0]);
    }

    #[test]
    fn options_keep_what_they_are_given() {
        let o = HsaOptions::new()
            .library("/x/lib.so")
            .agent(2)
            .timeout(std::time::Duration::from_secs(3));
        assert_eq!(o.library_path(), Path::new("/x/lib.so"));
    }
}
