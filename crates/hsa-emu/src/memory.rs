//! Memory pools and regions, allocations, and the copies and fills between them.
//!
//! Three kinds of memory:
//! - device memory (the gfx950's coarse-grained pool): the emulator's heap, which the host
//!   reaches only through copies;
//! - host-visible memory (every system pool, and the gfx950's fine-grained pool): each
//!   allocation is an emulator allocation *and* host pages mapped at the same address
//!   (`mmap` with `MAP_FIXED_NOREPLACE` at the emulator's base), so the pointer the
//!   application holds is the pointer a kernel uses. The two copies are reconciled around
//!   every dispatch ([`Mirrors::before_dispatch`], [`Mirrors::after_dispatch`]) against a
//!   shadow of what both last agreed on: the pages the host changed are copied into the
//!   emulator before the kernel runs, and afterwards only the 8-byte words the kernel changed
//!   are copied back, so host writes to other words made while the kernel ran are kept. The
//!   read-back costs about half a millisecond per MiB of live host-visible memory per
//!   dispatch (the emulator does not say which pages a kernel wrote). What this does not give
//!   is sharing *during* a kernel (a kernel polling a flag the host sets while it runs never
//!   sees it);
//! - locked host memory (`hsa_amd_memory_lock`, `_lock_to_pool`): the application's own
//!   pages get an emulator twin at a different agent address, reconciled around dispatches
//!   the same way.

use std::collections::{BTreeMap, HashMap};
use std::ffi::c_void;
use std::sync::atomic::Ordering;

use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_hsa::sys::{self, Status};

use crate::state::{CPU_AGENT, GPU_AGENT, Runtime, lock, put};
use crate::status::fail;

/// What backs a pool's allocations.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Backing {
    /// The emulator's heap only (the host copies to and from it).
    Device,
    /// Emulator memory with host pages at the same address.
    HostVisible,
    /// The group segment (LDS): not allocatable.
    Group,
}

/// A memory pool (and the region of the same handle: ROCr gives both APIs one object).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pool {
    pub handle: sys::MemoryPool,
    pub owner: sys::Agent,
    pub flags: u32,
    pub backing: Backing,
}

const fn pool(handle: u64, owner: sys::Agent, flags: u32, backing: Backing) -> Pool {
    Pool {
        handle: sys::MemoryPool { handle },
        owner,
        flags,
        backing,
    }
}

const FINE: u32 = sys::AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
const COARSE: u32 = sys::AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED;
const KERNARG: u32 = sys::AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT;

/// The CPU's fine-grained kernarg pool.
pub(crate) const KERNARG_POOL: sys::MemoryPool = sys::MemoryPool {
    handle: 0x7469_6c65_0000_0101,
};
/// The gfx950's coarse-grained device-memory pool.
pub(crate) const DEVICE_POOL: sys::MemoryPool = sys::MemoryPool {
    handle: 0x7469_6c65_0000_0102,
};

/// Every pool, in the order ROCr lists them per agent: the CPU's fine-grained,
/// kernarg+fine-grained and coarse-grained system pools, then the GPU's coarse-grained and
/// fine-grained local pools and its group segment (rocminfo on an MI300/MI355 system).
pub(crate) const POOLS: [Pool; 6] = [
    pool(0x7469_6c65_0000_0103, CPU_AGENT, FINE, Backing::HostVisible),
    pool(
        KERNARG_POOL.handle,
        CPU_AGENT,
        KERNARG | FINE,
        Backing::HostVisible,
    ),
    pool(
        0x7469_6c65_0000_0104,
        CPU_AGENT,
        COARSE,
        Backing::HostVisible,
    ),
    pool(DEVICE_POOL.handle, GPU_AGENT, COARSE, Backing::Device),
    pool(0x7469_6c65_0000_0105, GPU_AGENT, FINE, Backing::HostVisible),
    pool(0x7469_6c65_0000_0106, GPU_AGENT, 0, Backing::Group),
];

/// The pool of a handle.
pub(crate) fn find_pool(handle: u64) -> Option<Pool> {
    POOLS.iter().copied().find(|p| p.handle.handle == handle)
}

fn no_pool(handle: u64) -> Status {
    fail(
        sys::STATUS_ERROR_INVALID_MEMORY_POOL,
        format!("memory pool {handle:#x} is not a pool of this runtime"),
    )
}

fn no_agent(agent: sys::Agent) -> Status {
    fail(
        sys::STATUS_ERROR_INVALID_AGENT,
        format!("agent {:#x} is not an agent of this runtime", agent.handle),
    )
}

/// The pools an agent lists (`hsa_amd_agent_iterate_memory_pools`).
pub(crate) fn agent_pools(agent: sys::Agent) -> Result<Vec<Pool>, Status> {
    if agent != CPU_AGENT && agent != GPU_AGENT {
        return Err(no_agent(agent));
    }
    Ok(POOLS.iter().copied().filter(|p| p.owner == agent).collect())
}

/// The regions an agent lists (`hsa_agent_iterate_regions`): its own, and for the GPU the
/// system regions too (ROCr's GPU agent visits the system regions after its own).
pub(crate) fn agent_regions(agent: sys::Agent) -> Result<Vec<Pool>, Status> {
    let mut v = agent_pools(agent)?;
    if agent == GPU_AGENT {
        v.extend(POOLS.iter().copied().filter(|p| p.owner == CPU_AGENT));
    }
    Ok(v)
}

/// Allocation granule and alignment of every allocatable pool (ROCr: `kPageSize_`).
pub(crate) const GRANULE: usize = 4096;
/// The recommended allocation granule of GPU-local pools: ROCr's fragment allocator hands
/// out 2 MiB blocks (rocminfo: "Alloc Recommended Granule: 2048KB").
const LOCAL_REC_GRANULE: usize = 2 << 20;

/// `hsa_amd_memory_pool_location_t`.
const LOCATION_CPU: u32 = 0;
const LOCATION_GPU: u32 = 1;

/// `hsa_amd_memory_pool_get_info` (and the pool-shared attributes of `hsa_region_get_info`).
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub(crate) unsafe fn pool_info(
    rt: &Runtime,
    handle: u64,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    let Some(p) = find_pool(handle) else {
        return no_pool(handle);
    };
    if value.is_null() {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            "the value pointer is null",
        );
    }
    let group = p.backing == Backing::Group;
    let system = p.owner == CPU_AGENT;
    // Every global pool shares the emulator's heap (host-visible allocations live in it too).
    let size = if group {
        tilegen_arch::LDS_BYTES_PER_CU as usize
    } else {
        rt.max_memory as usize
    };
    let allocatable = |v: usize| if group { 0 } else { v };
    // SAFETY (every `put`): the caller's buffer is of the attribute's documented type.
    unsafe {
        match attribute {
            // hsa_amd_segment_t: GLOBAL 0, GROUP 3.
            sys::AMD_MEMORY_POOL_INFO_SEGMENT => put::<u32>(value, if group { 3 } else { 0 }),
            sys::AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS => put::<u32>(value, p.flags),
            sys::AMD_MEMORY_POOL_INFO_SIZE => put::<usize>(value, size),
            sys::AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED => put::<bool>(value, !group),
            sys::AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_GRANULE
            | sys::AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALIGNMENT => {
                put::<usize>(value, allocatable(GRANULE))
            }
            // ROCr: true for system memory only.
            sys::AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL => put::<bool>(value, system),
            // HSA_AMD_MEMORY_POOL_INFO_ALLOC_MAX_SIZE (0 for the group segment, as ROCr).
            16 => put::<usize>(value, allocatable(size)),
            // HSA_AMD_MEMORY_POOL_INFO_LOCATION: ROCr refuses it for the group segment.
            17 if group => fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                "the group segment has no location (ROCr answers it for global pools only)",
            ),
            17 => put::<u32>(value, if system { LOCATION_CPU } else { LOCATION_GPU }),
            // HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_REC_GRANULE.
            18 => put::<usize>(
                value,
                if group {
                    0
                } else if system {
                    GRANULE
                } else {
                    LOCAL_REC_GRANULE
                },
            ),
            other => fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("memory pool attribute {other} is not one this runtime answers"),
            ),
        }
    }
}

/// `hsa_region_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub(crate) unsafe fn region_info(
    rt: &Runtime,
    handle: u64,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    let Some(p) = find_pool(handle) else {
        return fail(
            // HSA_STATUS_ERROR_INVALID_REGION.
            0x1005,
            format!("region {handle:#x} is not a region of this runtime"),
        );
    };
    if value.is_null() {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            "the value pointer is null",
        );
    }
    // SAFETY (every arm): the caller's buffer is of the attribute's documented type.
    unsafe {
        match attribute {
            // SEGMENT, GLOBAL_FLAGS (hsa_region_global_flag_t has the pool flags' bits), SIZE,
            // RUNTIME_ALLOC_ALLOWED, _GRANULE, _ALIGNMENT: as the pool's.
            0 | 1 | 2 | 5 | 6 | 7 => pool_info(rt, handle, attribute, value),
            // HSA_REGION_INFO_ALLOC_MAX_SIZE.
            4 => pool_info(rt, handle, 16, value),
            // HSA_AMD_REGION_INFO_HOST_ACCESSIBLE: system memory only (ROCr).
            0xA000 => put::<bool>(value, p.owner == CPU_AGENT),
            // HSA_AMD_REGION_INFO_BASE: the emulator's heap for local memory, 0 for system
            // memory (ROCr: the aperture base, none for system memory).
            0xA001 => put::<u64>(
                value,
                if p.owner == GPU_AGENT && p.backing != Backing::Group {
                    tilegen_emu::exec::memory::HEAP_BASE
                } else {
                    0
                },
            ),
            other => fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("region attribute {other:#x} is not one this runtime answers"),
            ),
        }
    }
}

/// `hsa_amd_memory_pool_access_t`.
const NEVER_ALLOWED: u32 = 0;
const ALLOWED_BY_DEFAULT: u32 = 1;
const DISALLOWED_BY_DEFAULT: u32 = 2;

/// ROCr's `MemoryRegion::GetAccessInfo`: the owner may access by default; system memory is
/// disallowed by default for a GPU; local memory is disallowed by default for the CPU (a
/// single GPU is in no xGMI hive, so its fine-grained memory is not never-allowed); the group
/// segment, neither system nor local, is never allowed to another agent.
fn access(agent: sys::Agent, p: &Pool) -> u32 {
    if agent == p.owner {
        ALLOWED_BY_DEFAULT
    } else if p.backing == Backing::Group {
        NEVER_ALLOWED
    } else {
        DISALLOWED_BY_DEFAULT
    }
}

/// `hsa_amd_agent_memory_pool_get_info`.
///
/// # Safety
/// `value` must be valid for writing the attribute's type.
pub(crate) unsafe fn agent_pool_info(
    agent: sys::Agent,
    handle: u64,
    attribute: u32,
    value: *mut c_void,
) -> Status {
    if agent != CPU_AGENT && agent != GPU_AGENT {
        return no_agent(agent);
    }
    let Some(p) = find_pool(handle) else {
        return no_pool(handle);
    };
    if value.is_null() {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            "the value pointer is null",
        );
    }
    let access = access(agent, &p);
    // One PCIe hop between the CPU and the GPU; none within an agent.
    let hops = u32::from(agent != p.owner && access != NEVER_ALLOWED);
    // SAFETY (every arm): the caller's buffer is of the attribute's documented type.
    unsafe {
        match attribute {
            0 => put::<u32>(value, access),
            1 => put::<u32>(value, hops),
            // HSA_AMD_AGENT_MEMORY_POOL_INFO_LINK_INFO: hsa_amd_memory_pool_link_info_t
            // (latencies and bandwidths, three bools, the link type, the NUMA distance):
            // zero without a hop, as ROCr; with one, a PCIe link (HSA_AMD_LINK_INFO_TYPE_PCIE
            // = 2) with 32- and 64-bit atomics, whose latency and bandwidth are not modelled.
            2 => {
                let mut info = [0u8; 28];
                if hops > 0 {
                    info[16] = 1;
                    info[17] = 1;
                    info[20..24].copy_from_slice(&2u32.to_le_bytes());
                }
                put(value, info)
            }
            other => fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("agent memory pool attribute {other} is not one this runtime answers"),
            ),
        }
    }
}

/// A host-visible or locked allocation: emulator memory at `agent`, host memory at `host`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Mirror {
    pub host: usize,
    pub size: usize,
    /// The pool it came from (`None`: locked application memory).
    pub pool: Option<sys::MemoryPool>,
}

impl Mirror {
    /// Host pages this runtime mapped (a pool allocation), as opposed to the application's.
    fn mapped(&self) -> bool {
        self.pool.is_some()
    }
}

/// Reconciliation compares and copies in chunks of this many bytes (a page): unchanged
/// chunks cost a comparison only.
const CHUNK: usize = 4096;

/// Host-visible and locked allocations by agent (emulator) address, each with its shadow: the
/// bytes host and emulator last agreed on, so a dispatch copies in only what the host changed
/// since and copies back only what the kernel changed.
#[derive(Default)]
pub(crate) struct Mirrors {
    by_agent: BTreeMap<u64, Mirror>,
    shadows: HashMap<u64, Vec<u8>>,
}

impl Mirrors {
    /// The mirror whose agent range holds `addr`, as (agent base, mirror).
    pub fn at_agent(&self, addr: u64) -> Option<(u64, Mirror)> {
        let (&base, m) = self.by_agent.range(..=addr).next_back()?;
        (addr - base < m.size as u64).then_some((base, *m))
    }

    /// Every mirror's emulator range, as (base, size).
    pub fn agent_ranges(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.by_agent.iter().map(|(&a, m)| (a, m.size as u64))
    }

    /// The locked mirror of the application's `host` base.
    fn locked_at_host(&self, host: usize) -> Option<(u64, Mirror)> {
        self.by_agent
            .iter()
            .find(|(_, m)| !m.mapped() && m.host == host)
            .map(|(&a, m)| (a, *m))
    }

    /// Adds a mirror whose emulator memory is zero (as a fresh allocation is).
    fn insert(&mut self, agent: u64, mirror: Mirror) {
        self.shadows.insert(agent, vec![0; mirror.size]);
        self.by_agent.insert(agent, mirror);
    }

    fn remove(&mut self, agent: u64) -> Option<Mirror> {
        self.shadows.remove(&agent);
        self.by_agent.remove(&agent)
    }

    /// Before a dispatch: the host's changes since the last reconciliation go to the emulator.
    pub fn before_dispatch(&mut self, memory: &DeviceMemory) {
        for (&agent, m) in &self.by_agent {
            let Some(shadow) = self.shadows.get_mut(&agent) else {
                continue;
            };
            // SAFETY: a mapped mirror's pages are this runtime's until freed; a locked one's
            // are the application's, which it promised to keep until unlocking.
            let host = unsafe { std::slice::from_raw_parts(m.host as *const u8, m.size) };
            for (i, (h, s)) in host.chunks(CHUNK).zip(shadow.chunks_mut(CHUNK)).enumerate() {
                if h != s {
                    s.copy_from_slice(h);
                    // Cannot fault: the emulator allocation is live while the mirror is.
                    let _ = memory.write(agent + (i * CHUNK) as u64, h);
                }
            }
        }
    }

    /// After a dispatch: the 8-byte words the kernel changed go back to the host (words the
    /// host changed meanwhile, and the kernel did not, are left alone).
    pub fn after_dispatch(&mut self, memory: &DeviceMemory) {
        let mut chunk = [0u8; CHUNK];
        for (&agent, m) in &self.by_agent {
            let Some(shadow) = self.shadows.get_mut(&agent) else {
                continue;
            };
            for (i, s) in shadow.chunks_mut(CHUNK).enumerate() {
                let at = i * CHUNK;
                let device = &mut chunk[..s.len()];
                if memory.read(agent + at as u64, device).is_err() || device == s {
                    continue;
                }
                for (j, (d, w)) in device.chunks(8).zip(s.chunks_mut(8)).enumerate() {
                    if d != w {
                        w.copy_from_slice(d);
                        // SAFETY: within the mirror's host range (as in `before_dispatch`).
                        unsafe {
                            std::ptr::copy_nonoverlapping(
                                d.as_ptr(),
                                (m.host + at + j * 8) as *mut u8,
                                d.len(),
                            )
                        };
                    }
                }
            }
        }
    }
}

unsafe extern "C" {
    fn mmap(addr: *mut c_void, len: usize, prot: i32, flags: i32, fd: i32, off: i64)
    -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> i32;
}

const PROT_READ: i32 = 1;
const PROT_WRITE: i32 = 2;
const MAP_PRIVATE: i32 = 2;
const MAP_ANONYMOUS: i32 = 0x20;
/// Fails instead of replacing an existing mapping (Linux 4.17; older kernels take the address
/// as a hint, which the result check catches).
const MAP_FIXED_NOREPLACE: i32 = 0x10_0000;

/// Maps `len` zeroed host bytes at exactly `addr`.
fn map_at(addr: u64, len: usize) -> Result<(), String> {
    // SAFETY: an anonymous private mapping that replaces nothing (MAP_FIXED_NOREPLACE).
    let p = unsafe {
        mmap(
            addr as *mut c_void,
            len,
            PROT_READ | PROT_WRITE,
            MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };
    if p as usize == usize::MAX {
        return Err(format!(
            "mapping host pages at {addr:#x}: {}",
            std::io::Error::last_os_error()
        ));
    }
    if p as u64 != addr {
        // SAFETY: the mapping just made, at another address.
        unsafe { munmap(p, len) };
        return Err(format!(
            "the host has memory at {addr:#x} already (the kernel placed the mapping at {p:p})"
        ));
    }
    Ok(())
}

fn unmap(addr: u64, len: usize) {
    // SAFETY: a mapping `map_at` made, unmapped once (its mirror is removed first).
    unsafe { munmap(addr as *mut c_void, len) };
}

fn host_len(size: usize) -> usize {
    size.next_multiple_of(GRANULE)
}

/// `hsa_amd_memory_pool_allocate` and `hsa_memory_allocate`.
pub(crate) fn allocate(rt: &Runtime, handle: u64, size: usize) -> Result<u64, Status> {
    let p = find_pool(handle).ok_or_else(|| no_pool(handle))?;
    if size == 0 {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ALLOCATION,
            "a zero-byte allocation",
        ));
    }
    if p.backing == Backing::Group {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ALLOCATION,
            "the group segment (LDS) is not allocatable: a dispatch packet's group_segment_size asks for it",
        ));
    }
    if size > rt.max_memory as usize {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ALLOCATION,
            format!(
                "{size} bytes exceed the pool's size ({} bytes; TILEGEN_HSA_EMU_MAX_MEMORY)",
                rt.max_memory
            ),
        ));
    }
    let mut emu = rt.emu();
    let base = emu.memory_mut().alloc(size as u64).map_err(|e| {
        fail(
            sys::STATUS_ERROR_OUT_OF_RESOURCES,
            format!("allocating {size} bytes: {e}"),
        )
    })?;
    rt.device_high
        .fetch_max(base.saturating_add(size as u64), Ordering::SeqCst);
    if p.backing == Backing::Device {
        lock(&rt.device_allocs).insert(base, size as u64);
        return Ok(base);
    }
    if let Err(e) = map_at(base, host_len(size)) {
        let _ = emu.memory_mut().free(base);
        return Err(fail(sys::STATUS_ERROR_OUT_OF_RESOURCES, e));
    }
    lock(&rt.mirrors).insert(
        base,
        Mirror {
            host: base as usize,
            size,
            pool: Some(p.handle),
        },
    );
    Ok(base)
}

/// `hsa_amd_memory_pool_free` and `hsa_memory_free`.
pub(crate) fn free(rt: &Runtime, ptr: u64) -> Status {
    let mut emu = rt.emu();
    if lock(&rt.device_allocs).remove(&ptr).is_some() {
        let _ = emu.memory_mut().free(ptr);
        return sys::STATUS_SUCCESS;
    }
    let mut mirrors = lock(&rt.mirrors);
    if let Some(m) = mirrors.by_agent.get(&ptr).copied()
        && m.mapped()
    {
        mirrors.remove(ptr);
        unmap(ptr, host_len(m.size));
        let _ = emu.memory_mut().free(ptr);
        return sys::STATUS_SUCCESS;
    }
    fail(
        sys::STATUS_ERROR_INVALID_ARGUMENT,
        format!("{ptr:#x} is not the base of a live allocation (freed already?)"),
    )
}

/// Unmaps every host-visible allocation (the runtime is going away).
pub(crate) fn release_all(rt: &Runtime) {
    let mirrors = std::mem::take(&mut *lock(&rt.mirrors));
    for (agent, m) in mirrors.by_agent {
        if m.mapped() {
            unmap(agent, host_len(m.size));
        }
    }
}

/// `hsa_amd_memory_lock_to_pool`: gives the application's `[host, host + size)` an agent
/// address kernels can use. Locking the same base again returns the same agent address.
pub(crate) fn lock_memory(
    rt: &Runtime,
    host: usize,
    size: usize,
    pool: Option<u64>,
) -> Result<u64, Status> {
    if host == 0 || size == 0 {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            "a null host pointer or a size of 0",
        ));
    }
    // Every system pool is host-visible here, so which one the memory is locked to changes
    // nothing but the check.
    if let Some(h) = pool {
        let p = find_pool(h).ok_or_else(|| no_pool(h))?;
        if p.owner != CPU_AGENT {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("memory pool {h:#x} is not a system (CPU agent) pool"),
            ));
        }
    }
    let mut emu = rt.emu();
    if let Some((agent, m)) = lock(&rt.mirrors).locked_at_host(host) {
        if m.size >= size {
            return Ok(agent);
        }
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!(
                "{host:#x} is locked already with {} bytes; unlock it first",
                m.size
            ),
        ));
    }
    let agent = emu.memory_mut().alloc(size as u64).map_err(|e| {
        fail(
            sys::STATUS_ERROR_OUT_OF_RESOURCES,
            format!("locking {size} bytes: {e}"),
        )
    })?;
    rt.device_high
        .fetch_max(agent.saturating_add(size as u64), Ordering::SeqCst);
    lock(&rt.mirrors).insert(
        agent,
        Mirror {
            host,
            size,
            pool: None,
        },
    );
    Ok(agent)
}

/// `hsa_amd_memory_unlock`.
pub(crate) fn unlock_memory(rt: &Runtime, host: usize) -> Status {
    let mut emu = rt.emu();
    let mut mirrors = lock(&rt.mirrors);
    match mirrors.locked_at_host(host) {
        Some((agent, _)) => {
            mirrors.remove(agent);
            let _ = emu.memory_mut().free(agent);
            sys::STATUS_SUCCESS
        }
        None => fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("{host:#x} is not the base of locked memory (unlocked already?)"),
        ),
    }
}

/// What `hsa_amd_pointer_info` says about an address.
pub(crate) struct PointerInfo {
    /// `hsa_amd_pointer_type_t`: UNKNOWN 0, HSA 1, LOCKED 2.
    pub kind: u32,
    pub agent_base: u64,
    pub host_base: u64,
    pub size: u64,
    pub owner: sys::Agent,
    pub flags: u32,
}

/// `hsa_amd_pointer_info`.
pub(crate) fn pointer_info(rt: &Runtime, addr: u64) -> PointerInfo {
    if let Some((base, size)) = rt.device_range(addr, 1) {
        return PointerInfo {
            kind: 1,
            agent_base: base,
            host_base: 0,
            size,
            owner: GPU_AGENT,
            flags: COARSE,
        };
    }
    let mirrors = lock(&rt.mirrors);
    let found = mirrors.at_agent(addr).or_else(|| {
        // A locked range, named by its host address.
        mirrors
            .by_agent
            .iter()
            .find(|(_, m)| {
                !m.mapped() && addr as usize >= m.host && (addr as usize) < m.host + m.size
            })
            .map(|(&a, m)| (a, *m))
    });
    match found {
        Some((agent, m)) => {
            let p = m.pool.and_then(|h| find_pool(h.handle));
            PointerInfo {
                kind: if m.mapped() { 1 } else { 2 },
                agent_base: agent,
                host_base: m.host as u64,
                size: m.size as u64,
                owner: p.map_or(CPU_AGENT, |p| p.owner),
                flags: p.map_or(FINE, |p| p.flags),
            }
        }
        None => PointerInfo {
            kind: 0,
            agent_base: 0,
            host_base: 0,
            size: 0,
            owner: sys::Agent { handle: 0 },
            flags: 0,
        },
    }
}

/// Whether `ptr` is the base of a live allocation (device or host-visible).
pub(crate) fn is_allocation(rt: &Runtime, ptr: u64) -> bool {
    lock(&rt.device_allocs).contains_key(&ptr)
        || lock(&rt.mirrors)
            .by_agent
            .get(&ptr)
            .is_some_and(|m| m.mapped())
}

/// Where a copy's end is: device memory, or host memory at an address the host can use.
enum Place {
    Device(u64),
    Host(u64),
}

fn place(rt: &Runtime, addr: u64, len: u64, what: &str) -> Result<Place, Status> {
    if rt.device_range(addr, 1).is_some() {
        return match rt.device_range(addr, len) {
            Some(_) => Ok(Place::Device(addr)),
            None => Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!(
                    "the {what} [{addr:#x}, +{len}) runs past the end of its device allocation"
                ),
            )),
        };
    }
    if let Some((base, m)) = lock(&rt.mirrors).at_agent(addr) {
        if addr - base + len > m.size as u64 {
            return Err(fail(
                sys::STATUS_ERROR_INVALID_ARGUMENT,
                format!("the {what} [{addr:#x}, +{len}) runs past the end of its allocation"),
            ));
        }
        // A locked range's agent address stands for the application's host memory.
        return Ok(Place::Host(m.host as u64 + (addr - base)));
    }
    let device = tilegen_emu::exec::memory::HEAP_BASE..rt.device_high.load(Ordering::SeqCst);
    if device.contains(&addr) {
        // Where allocations were made, but no live one: freed (or never allocated).
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!(
                "the {what} {addr:#x} is memory of this runtime that is not allocated (freed already?)"
            ),
        ));
    }
    // Any other address is the application's own (system) memory.
    Ok(Place::Host(addr))
}

/// Copies `len` bytes between any two of: device memory, host-visible or locked memory, and
/// the application's own memory.
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
        (Place::Device(dst), Place::Host(src)) => {
            // SAFETY: the caller's contract for the host source.
            let data = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
            match rt.emu().memory().write(dst, data) {
                Ok(()) => sys::STATUS_SUCCESS,
                Err(e) => fault(e),
            }
        }
        (Place::Host(dst), Place::Device(src)) => {
            // SAFETY: the caller's contract for the host destination.
            let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut u8, len) };
            match rt.emu().memory().read(src, out) {
                Ok(()) => sys::STATUS_SUCCESS,
                Err(e) => fault(e),
            }
        }
        (Place::Device(dst), Place::Device(src)) => {
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
        (Place::Host(dst), Place::Host(src)) => {
            // SAFETY: the caller's contract; `copy` allows overlap.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len) };
            sys::STATUS_SUCCESS
        }
    }
}

/// `hsa_amd_memory_fill`: `count` 32-bit words of `value` at `ptr` (4-byte aligned).
///
/// # Safety
/// A host range must be valid for writing `4 * count` bytes.
pub(crate) unsafe fn fill(rt: &Runtime, ptr: u64, value: u32, count: usize) -> Status {
    if ptr == 0 || !ptr.is_multiple_of(4) {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("{ptr:#x} is null or not 4-byte aligned"),
        );
    }
    let Some(len) = count.checked_mul(4) else {
        return fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("{count} words overflow the address space"),
        );
    };
    if len == 0 {
        return sys::STATUS_SUCCESS;
    }
    match place(rt, ptr, len as u64, "destination") {
        Err(e) => e,
        Ok(Place::Device(at)) => {
            let bytes: Vec<u8> = std::iter::repeat_n(value.to_le_bytes(), count)
                .flatten()
                .collect();
            match rt.emu().memory().write(at, &bytes) {
                Ok(()) => sys::STATUS_SUCCESS,
                Err(e) => fail(sys::STATUS_ERROR_INVALID_ARGUMENT, e),
            }
        }
        Ok(Place::Host(at)) => {
            // SAFETY: the caller's contract; 4-byte aligned (checked, and mirrors keep the
            // offset's alignment).
            let words = unsafe { std::slice::from_raw_parts_mut(at as *mut u32, count) };
            words.fill(value);
            sys::STATUS_SUCCESS
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dispatch_brings_back_only_the_words_the_kernel_changed() {
        let mut memory = DeviceMemory::with_limit(1 << 20);
        let agent = memory.alloc(64).unwrap();
        let mut host = vec![7u64; 8];
        let mut mirrors = Mirrors::default();
        mirrors.insert(
            agent,
            Mirror {
                host: host.as_mut_ptr() as usize,
                size: 64,
                pool: None,
            },
        );
        mirrors.before_dispatch(&memory);
        assert_eq!(
            memory.read_u64(agent + 8).unwrap(),
            7,
            "the kernel sees host memory"
        );
        // The kernel writes word 1; meanwhile the host writes word 3.
        memory.write(agent + 8, &42u64.to_le_bytes()).unwrap();
        host[3] = 99;
        mirrors.after_dispatch(&memory);
        assert_eq!(host, [7, 42, 7, 99, 7, 7, 7, 7]);
        // The host's write reaches the next dispatch; nothing else moves.
        mirrors.before_dispatch(&memory);
        assert_eq!(memory.read_u64(agent + 24).unwrap(), 99);
        mirrors.after_dispatch(&memory);
        assert_eq!(host, [7, 42, 7, 99, 7, 7, 7, 7]);
    }

    #[test]
    fn pool_access_follows_rocr() {
        let by = |handle: u64| find_pool(handle).unwrap();
        let system = by(KERNARG_POOL.handle);
        let device = by(DEVICE_POOL.handle);
        let group = POOLS[5];
        assert_eq!(access(CPU_AGENT, &system), ALLOWED_BY_DEFAULT);
        assert_eq!(access(GPU_AGENT, &system), DISALLOWED_BY_DEFAULT);
        assert_eq!(access(GPU_AGENT, &device), ALLOWED_BY_DEFAULT);
        assert_eq!(access(CPU_AGENT, &device), DISALLOWED_BY_DEFAULT);
        assert_eq!(access(CPU_AGENT, &group), NEVER_ALLOWED);
        assert_eq!(group.backing, Backing::Group);
    }

    #[test]
    fn the_gpu_lists_the_system_regions_after_its_own() {
        let gpu: Vec<u64> = agent_regions(GPU_AGENT)
            .unwrap()
            .iter()
            .map(|p| p.handle.handle)
            .collect();
        let cpu: Vec<u64> = agent_regions(CPU_AGENT)
            .unwrap()
            .iter()
            .map(|p| p.handle.handle)
            .collect();
        assert_eq!(gpu.len(), 6);
        assert_eq!(&gpu[3..], &cpu[..]);
        assert!(agent_pools(sys::Agent { handle: 9 }).is_err());
    }

    #[test]
    fn host_pages_are_mapped_only_where_nothing_is() {
        // A heap address of this process is taken: the mapping is refused, not replaced.
        let taken = Box::new([0u8; 8192]);
        let page = (taken.as_ptr() as u64).next_multiple_of(GRANULE as u64);
        assert!(map_at(page, GRANULE).is_err());
        // A free address is mapped there, zeroed and writable.
        let free = 0x0000_3000_0000_0000u64;
        map_at(free, GRANULE).unwrap();
        // SAFETY: mapped just above, GRANULE bytes.
        unsafe {
            assert_eq!((free as *const u8).read(), 0);
            (free as *mut u8).write(5);
        }
        unmap(free, GRANULE);
    }
}
