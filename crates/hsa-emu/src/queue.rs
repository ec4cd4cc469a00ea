//! User-mode AQL queues and their packet processors: one thread per queue reads the packets
//! the doorbell announces and runs kernel dispatches on the emulator.

use std::alloc::Layout;
use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use tilegen_emu::exec::{DeviceMemory, Emulator, FaultKind, LaunchControl};
use tilegen_hsa::sys::{self, Status};
use tilegen_timing::{Params, TimingLaunch, TimingOptions};

use crate::loader::{self, KernelObj};
use crate::signal::{self, SignalObj};
use crate::state::{GPU_AGENT, Runtime, lock};
use crate::status::fail;

/// Smallest queue (packets).
pub(crate) const MIN_SIZE: u32 = 16;
/// Largest queue (packets).
pub(crate) const MAX_SIZE: u32 = 1 << 17;
/// Most kernarg bytes a dispatch copies from its segment (past the declared size, compilers'
/// wide scalar loads may read zero padding).
const MAX_KERNARG: usize = 64 * 1024 + 64;

/// The memory an application sees: `hsa_queue_t` first (its address is the queue pointer),
/// then the read and write indices.
#[repr(C)]
struct QueueMem {
    hsa: sys::Queue,
    read: AtomicU64,
    write: AtomicU64,
}

/// A queue: its memory and ring, its doorbell, its processor thread.
pub(crate) struct QueueObj {
    mem: *mut QueueMem,
    ring: *mut u8,
    ring_layout: Layout,
    size: u32,
    doorbell: Arc<SignalObj>,
    doorbell_handle: u64,
    control: LaunchControl,
    stop: AtomicBool,
    /// Cleared by an error: the queue processes no more packets.
    active: AtomicBool,
    /// `hsa_amd_profiling_set_profiler_enabled`: completion signals get dispatch times.
    pub profiling: AtomicBool,
    /// `hsa_amd_queue_cu_set_mask`'s mask (recorded; every dispatch runs on the whole
    /// emulated GPU, which changes no result).
    pub cu_mask: Mutex<Vec<u32>>,
    /// `hsa_amd_queue_set_priority`'s priority (recorded; queues run concurrently).
    pub priority: AtomicU32,
    callback: Option<sys::QueueCallback>,
    data: usize,
    thread: Mutex<Option<JoinHandle<()>>>,
}

// SAFETY: `mem` and `ring` are allocations this object owns and frees once (on drop); the
// application and the processor thread share them as HSA prescribes (indices are atomics, a
// slot's header is read and written atomically, its body only by whoever owns the slot).
unsafe impl Send for QueueObj {}
// SAFETY: as above.
unsafe impl Sync for QueueObj {}

impl QueueObj {
    /// The pointer the application holds.
    pub fn ptr(&self) -> *mut sys::Queue {
        self.mem.cast()
    }

    fn mem(&self) -> &QueueMem {
        // SAFETY: allocated in `create`, freed only on drop.
        unsafe { &*self.mem }
    }

    pub fn read_index(&self) -> u64 {
        self.mem().read.load(Ordering::SeqCst)
    }

    pub fn write_index(&self) -> &AtomicU64 {
        &self.mem().write
    }

    /// The first 32 bits (header and setup) of slot `index`, read atomically.
    fn header_word(&self, index: u64) -> &AtomicU32 {
        let at = (index % self.size as u64) as usize * sys::PACKET_BYTES;
        // SAFETY: in bounds of the ring (size slots of 64 bytes), 64-byte aligned.
        unsafe { &*(self.ring.add(at) as *const AtomicU32) }
    }

    /// Stops the processor (cancelling the running launch) and waits for it, unless called
    /// from it (a callback destroying its own queue), in which case it ends by itself.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.control.cancel();
        self.doorbell.store(self.doorbell.load());
        let handle = lock(&self.thread).take();
        if let Some(h) = handle
            && h.thread().id() != std::thread::current().id()
        {
            let _ = h.join();
        }
    }
}

impl Drop for QueueObj {
    fn drop(&mut self) {
        // SAFETY: allocated in `create` with these layouts; the processor thread (which holds
        // a `Weak` only) has ended or no longer upgrades it.
        unsafe {
            std::alloc::dealloc(self.ring, self.ring_layout);
            drop(Box::from_raw(self.mem));
        }
    }
}

/// `hsa_queue_create`.
pub(crate) fn create(
    rt: &Arc<Runtime>,
    agent: sys::Agent,
    size: u32,
    queue_type: u32,
    callback: Option<sys::QueueCallback>,
    data: *mut c_void,
) -> Result<*mut sys::Queue, Status> {
    if agent != GPU_AGENT {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_QUEUE_CREATION,
            format!(
                "agent {:#x} is not this runtime's gfx950 agent (only it runs kernels)",
                agent.handle
            ),
        ));
    }
    if !size.is_power_of_two() || !(1..=MAX_SIZE).contains(&size) {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("queue size {size} is not a power of two between 1 and {MAX_SIZE}"),
        ));
    }
    if queue_type > 1 {
        return Err(fail(
            sys::STATUS_ERROR_INVALID_ARGUMENT,
            format!("queue type {queue_type} (multi 0 and single 1 are supported)"),
        ));
    }
    let size = size.max(MIN_SIZE);
    let ring_layout = Layout::from_size_align(size as usize * sys::PACKET_BYTES, sys::PACKET_BYTES)
        .map_err(|_| fail(sys::STATUS_ERROR_OUT_OF_RESOURCES, "the packet ring's size"))?;
    // SAFETY: non-zero size.
    let ring = unsafe { std::alloc::alloc_zeroed(ring_layout) };
    if ring.is_null() {
        return Err(fail(
            sys::STATUS_ERROR_OUT_OF_RESOURCES,
            "the host refused the packet ring",
        ));
    }
    for i in 0..size as usize {
        // SAFETY: slot i's header lies in the ring just allocated.
        unsafe {
            ring.add(i * sys::PACKET_BYTES)
                .cast::<u16>()
                .write(sys::PACKET_TYPE_INVALID)
        };
    }
    static IDS: AtomicU64 = AtomicU64::new(1);
    let doorbell = Arc::new(SignalObj::new(0, true));
    let doorbell_handle = rt.handle();
    rt.signals
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .insert(doorbell_handle, doorbell.clone());
    let mem = Box::into_raw(Box::new(QueueMem {
        hsa: sys::Queue {
            queue_type,
            features: sys::QUEUE_FEATURE_KERNEL_DISPATCH,
            base_address: ring.cast(),
            doorbell_signal: sys::Signal {
                handle: doorbell_handle,
            },
            size,
            reserved1: 0,
            id: IDS.fetch_add(1, Ordering::Relaxed),
        },
        read: AtomicU64::new(0),
        write: AtomicU64::new(0),
    }));
    let q = Arc::new(QueueObj {
        mem,
        ring,
        ring_layout,
        size,
        doorbell,
        doorbell_handle,
        control: LaunchControl::default(),
        stop: AtomicBool::new(false),
        active: AtomicBool::new(true),
        profiling: AtomicBool::new(false),
        cu_mask: Mutex::new(Vec::new()),
        priority: AtomicU32::new(1),
        callback,
        data: data as usize,
        thread: Mutex::new(None),
    });
    let (weak_q, weak_rt) = (Arc::downgrade(&q), Arc::downgrade(rt));
    let id = q.mem().hsa.id;
    let thread = std::thread::Builder::new()
        .name(format!("hsa-emu-queue-{id}"))
        .spawn(move || process(weak_q, weak_rt))
        .map_err(|e| {
            fail(
                sys::STATUS_ERROR_OUT_OF_RESOURCES,
                format!("starting the packet processor: {e}"),
            )
        })?;
    *lock(&q.thread) = Some(thread);
    let ptr = q.ptr();
    lock(&rt.queues).insert(ptr as usize, q);
    Ok(ptr)
}

/// The live queue at `ptr`.
pub(crate) fn get(rt: &Runtime, ptr: *const sys::Queue) -> Option<Arc<QueueObj>> {
    lock(&rt.queues).get(&(ptr as usize)).cloned()
}

/// `hsa_queue_destroy`.
pub(crate) fn destroy(rt: &Runtime, ptr: *mut sys::Queue) -> Status {
    let Some(q) = lock(&rt.queues).remove(&(ptr as usize)) else {
        return fail(
            sys::STATUS_ERROR_INVALID_QUEUE,
            format!("{ptr:p} is not a live queue of this runtime (destroyed already?)"),
        );
    };
    q.stop();
    rt.signals
        .write()
        .unwrap_or_else(|p| p.into_inner())
        .remove(&q.doorbell_handle);
    sys::STATUS_SUCCESS
}

/// What went wrong with a packet: the status to report and its text (and a memory fault's
/// address, for the system event handlers).
struct PacketError {
    status: Status,
    text: String,
    address: Option<u64>,
}

impl PacketError {
    fn format(index: u64, text: impl Into<String>) -> PacketError {
        PacketError {
            status: sys::STATUS_ERROR_INVALID_PACKET_FORMAT,
            text: format!("the packet at queue index {index}: {}", text.into()),
            address: None,
        }
    }
}

/// The processor loop: runs until the queue is stopped or the runtime is gone.
fn process(queue: Weak<QueueObj>, rt: Weak<Runtime>) {
    loop {
        let (Some(q), Some(rt)) = (queue.upgrade(), rt.upgrade()) else {
            return;
        };
        if q.stop.load(Ordering::SeqCst) {
            return;
        }
        let index = q.read_index();
        let word = q.header_word(index);
        let ready = |w: u32| (w & 0xff) as u16 != sys::PACKET_TYPE_INVALID;
        if !q.active.load(Ordering::SeqCst) || !ready(word.load(Ordering::Acquire)) {
            let stop = || q.stop.load(Ordering::SeqCst);
            q.doorbell.wait_until(
                |_| q.active.load(Ordering::SeqCst) && ready(word.load(Ordering::Acquire)),
                Some(std::time::Instant::now() + std::time::Duration::from_millis(100)),
                stop,
            );
            continue;
        }
        let at = (index % q.size as u64) as usize * sys::PACKET_BYTES;
        // SAFETY: the header (read with acquire ordering) says the producer published the
        // slot, whose body it wrote before its release store; the slot is ours until the
        // read index moves past it, so it is copied first.
        let raw: [u8; sys::PACKET_BYTES] =
            unsafe { q.ring.add(at).cast::<[u8; sys::PACKET_BYTES]>().read() };
        // SAFETY: 64 initialized bytes hold a `KernelDispatchPacket` (plain integers and a
        // pointer, any bit pattern is a value); read unaligned from the byte array.
        let packet: sys::KernelDispatchPacket =
            unsafe { std::ptr::read_unaligned(raw.as_ptr().cast()) };
        // Consumed: the slot goes back to the producers.
        word.store(sys::PACKET_TYPE_INVALID as u32, Ordering::Release);
        q.mem().read.store(index + 1, Ordering::SeqCst);
        let start = crate::state::timestamp();
        let result = match (packet.header >> sys::PACKET_HEADER_TYPE) & 0xff {
            t if t == sys::PACKET_TYPE_KERNEL_DISPATCH => dispatch(&rt, &q, index, &packet),
            t if t == sys::PACKET_TYPE_BARRIER_AND => barrier_and(&rt, &q, &raw).map(|()| None),
            t => Err(Some(PacketError::format(
                index,
                format!("packet type {t} is not supported (kernel dispatch and barrier-AND are)"),
            ))),
        };
        match result {
            Ok(modeled) => {
                if packet.completion_signal.handle != 0
                    && let Some(s) = signal::get(&rt, packet.completion_signal.handle)
                {
                    if q.profiling.load(Ordering::SeqCst) {
                        let end = match modeled {
                            Some(ticks) => start.saturating_add(ticks),
                            None => crate::state::timestamp(),
                        };
                        s.set_times(start, end);
                    }
                    s.add(-1);
                }
            }
            Err(None) => return,
            Err(Some(e)) => {
                q.active.store(false, Ordering::SeqCst);
                let status = fail(e.status, &e.text);
                if let Some(address) = e.address {
                    memory_fault_event(&rt, address);
                }
                if let Some(cb) = q.callback {
                    let ptr = q.ptr();
                    let data = q.data as *mut c_void;
                    drop(rt);
                    // SAFETY: the application's callback with the queue it registered it for
                    // and its own data; no lock is held while it runs.
                    unsafe { cb(status, ptr, data) };
                }
            }
        }
    }
}

/// Tells the system event handlers about a memory fault at `address`.
fn memory_fault_event(rt: &Runtime, address: u64) {
    let handlers = lock(&rt.handlers).clone();
    let event = sys::AmdEvent {
        event_type: sys::AMD_GPU_MEMORY_FAULT_EVENT,
        memory_fault: sys::AmdMemoryFaultInfo {
            agent: GPU_AGENT,
            virtual_address: address,
            // HSA_AMD_MEMORY_FAULT_PAGE_NOT_PRESENT.
            fault_reason_mask: 1,
        },
    };
    for (cb, data) in handlers {
        // SAFETY: the application's handler with its data and an event valid for the call.
        unsafe { cb(&event, data as *mut c_void) };
    }
}

/// A barrier-AND packet (`hsa_barrier_and_packet_t`, five dependency signals at bytes
/// 8..48): waits until each one's value is 0.
fn barrier_and(
    rt: &Runtime,
    q: &QueueObj,
    raw: &[u8; sys::PACKET_BYTES],
) -> Result<(), Option<PacketError>> {
    for dep in raw[8..48].chunks_exact(8) {
        let handle = u64::from_le_bytes(dep.try_into().unwrap_or([0; 8]));
        if handle == 0 {
            continue;
        }
        if let Some(s) = signal::get(rt, handle) {
            s.wait_until(|v| v == 0, None, || q.stop.load(Ordering::SeqCst));
            if q.stop.load(Ordering::SeqCst) {
                return Err(None);
            }
        }
    }
    Ok(())
}

/// Runs a kernel dispatch packet on the emulator. On a profiled queue (unless modeled timing
/// is off) the timing model predicts the dispatch first and its kernel time, in system
/// timestamp ticks, is returned.
fn dispatch(
    rt: &Runtime,
    q: &QueueObj,
    index: u64,
    p: &sys::KernelDispatchPacket,
) -> Result<Option<u64>, Option<PacketError>> {
    let bad = |text: String| Some(PacketError::format(index, text));
    let kernel: Arc<KernelObj> = loader::kernel(rt, p.kernel_object).ok_or_else(|| {
        bad(format!(
            "kernel_object {:#x} is not the kernel descriptor of a kernel in a frozen executable (never loaded, or destroyed?)",
            p.kernel_object
        ))
    })?;
    let dims = (p.setup >> sys::KERNEL_DISPATCH_PACKET_SETUP_DIMENSIONS) & 3;
    if !(1..=3).contains(&dims) {
        return Err(bad(format!(
            "setup says {dims} grid dimensions (1, 2 or 3)"
        )));
    }
    let block = [p.workgroup_size_x, p.workgroup_size_y, p.workgroup_size_z].map(u32::from);
    let size = [p.grid_size_x, p.grid_size_y, p.grid_size_z];
    let mut grid = [1u32; 3];
    for d in 0..3 {
        let (b, s) = if d < dims as usize {
            (block[d], size[d])
        } else {
            (block[d].max(1), size[d].max(1))
        };
        if b == 0 || s == 0 {
            return Err(bad(format!(
                "workgroup size {block:?} and grid size {size:?} must be non-zero"
            )));
        }
        if s % b != 0 {
            return Err(bad(format!(
                "grid size {s} of dimension {d} is not a multiple of the workgroup size {b} (partial workgroups are not emulated)"
            )));
        }
        grid[d] = s / b;
    }
    let kernarg = kernarg(rt, index, p.kernarg_address as u64, kernel.kernarg_size)?;
    let dynamic_lds = p.group_segment_size.saturating_sub(kernel.group_size);
    let modeled_on = q.profiling.load(Ordering::SeqCst) && rt.modeled_timing;
    let mut modeled = None;
    let result = {
        let mut emu = rt.emu();
        emu.config_mut().control = q.control.clone();
        let device: Vec<(u64, u64)> = if modeled_on {
            lock(&rt.device_allocs)
                .iter()
                .map(|(&b, &s)| (b, s))
                .collect()
        } else {
            Vec::new()
        };
        // Host-visible memory goes in before the kernel and what it wrote comes back after.
        let mut mirrors = lock(&rt.mirrors);
        mirrors.before_dispatch(emu.memory());
        let ranges: Vec<(u64, u64)> = device.into_iter().chain(mirrors.agent_ranges()).collect();
        // The functional run goes first: it is the one a queue's destruction can cancel (a
        // kernel that never ends is stopped there), and its faults are the kernel's own.
        let inputs = modeled_on.then(|| save(emu.memory(), &ranges)).transpose();
        let r = inputs.map_err(bad).map(|inputs| {
            let r = emu.launch(&kernel.program, grid, block, &kernarg, dynamic_lds);
            if let (Ok(_), Some(inputs)) = (&r, inputs) {
                modeled = Some(model_on_inputs(
                    &mut emu,
                    &kernel,
                    TimingLaunch {
                        grid,
                        block,
                        dynamic_lds,
                        kernarg: &kernarg,
                    },
                    &ranges,
                    &inputs,
                ));
            }
            r
        });
        mirrors.after_dispatch(emu.memory());
        r?
    };
    if let Some(time) = modeled {
        return time.map(Some).map_err(bad);
    }
    let fault = match result {
        Ok(_) => return Ok(None),
        Err(f) => f,
    };
    let (status, address) = match &*fault.kind {
        FaultKind::Cancelled => return Err(None),
        FaultKind::Memory(m) => (sys::STATUS_ERROR_MEMORY_APERTURE_VIOLATION, Some(m.addr)),
        FaultKind::Scratch(_) => (sys::STATUS_ERROR_MEMORY_APERTURE_VIOLATION, None),
        FaultKind::Illegal(_)
        | FaultKind::Unimplemented(_)
        | FaultKind::BadJump { .. }
        | FaultKind::BadRegister(_) => (sys::STATUS_ERROR_ILLEGAL_INSTRUCTION, None),
        FaultKind::Limit(_) => (sys::STATUS_ERROR_OUT_OF_RESOURCES, None),
        FaultKind::Launch(_) => (sys::STATUS_ERROR_INVALID_PACKET_FORMAT, None),
        _ => (sys::STATUS_ERROR_EXCEPTION, None),
    };
    Err(Some(PacketError {
        status,
        text: format!("kernel fault: {fault}"),
        address,
    }))
}

/// The bytes of every range in `ranges`.
fn save(memory: &DeviceMemory, ranges: &[(u64, u64)]) -> Result<Vec<Vec<u8>>, String> {
    ranges
        .iter()
        .map(|&(base, size)| {
            memory
                .read_vec(base, size as usize)
                .map_err(|e| format!("saving device memory around the timing model: {e}"))
        })
        .collect()
}

/// Puts `saved` back into `ranges`, writing only the ranges whose bytes differ.
fn restore(memory: &DeviceMemory, ranges: &[(u64, u64)], saved: &[Vec<u8>]) -> Result<(), String> {
    let mut now = Vec::new();
    for (&(base, _), bytes) in ranges.iter().zip(saved) {
        now.resize(bytes.len(), 0);
        if memory.read(base, &mut now).is_err() || now != *bytes {
            memory
                .write(base, bytes)
                .map_err(|e| format!("restoring device memory around the timing model: {e}"))?;
        }
    }
    Ok(())
}

/// The timing model's kernel time of a launch the emulator has just run (its prediction less
/// the launch overhead it adds, which a dispatch's own timestamps do not see), in system
/// timestamp ticks.
///
/// The model really executes the workgroups it simulates, so it runs over `inputs`, the bytes
/// of `ranges` as the functional run found them (it sees what the kernel read); its writes are
/// not the kernel's results (matrix results are not computed, and a kernel that accumulates
/// into its output would add twice), so the functional run's results are saved first and put
/// back after.
fn model_on_inputs(
    emu: &mut Emulator,
    kernel: &KernelObj,
    launch: TimingLaunch<'_>,
    ranges: &[(u64, u64)],
    inputs: &[Vec<u8>],
) -> Result<u64, String> {
    let results = save(emu.memory(), ranges)?;
    restore(emu.memory(), ranges, inputs)?;
    let options = TimingOptions {
        wave_instruction_budget: emu.config().limits.wave_instruction_budget,
        ..TimingOptions::default()
    };
    let predicted = tilegen_timing::predict(
        emu.memory_mut(),
        &kernel.program,
        &launch,
        &Params::default(),
        &options,
    );
    restore(emu.memory(), ranges, &results)?;
    let p = predicted.map_err(|e| {
        let mut text = format!(
            "the timing model could not time kernel `{}`: {e}",
            kernel.name
        );
        let mut source = std::error::Error::source(&e);
        while let Some(s) = source {
            text.push_str(&format!(": {s}"));
            source = s.source();
        }
        text + " (TILEGEN_HSA_EMU_MODELED_TIMING=0 gives host times instead)"
    })?;
    let kernel_us = (p.us - p.launch_us).max(0.0);
    Ok((kernel_us * 1e-6 * crate::state::TICKS_PER_SECOND as f64).round() as u64)
}

/// The kernarg bytes at `addr`: from a kernarg-pool allocation (host memory) or device memory,
/// up to the end of the allocation (at most [`MAX_KERNARG`] bytes).
fn kernarg(
    rt: &Runtime,
    index: u64,
    addr: u64,
    declared: u32,
) -> Result<Vec<u8>, Option<PacketError>> {
    if addr == 0 {
        return if declared == 0 {
            Ok(Vec::new())
        } else {
            Err(Some(PacketError::format(
                index,
                format!(
                    "kernarg_address is null but the kernel takes {declared} bytes of arguments"
                ),
            )))
        };
    }
    if let Some((base, m)) = lock(&rt.mirrors).at_agent(addr) {
        let offset = (addr - base) as usize;
        let len = (m.size - offset).min(MAX_KERNARG);
        let mut v = vec![0u8; len];
        // SAFETY: [host + offset, + len) lies in a live host-visible or locked allocation.
        unsafe {
            std::ptr::copy_nonoverlapping((m.host + offset) as *const u8, v.as_mut_ptr(), len)
        };
        return Ok(v);
    }
    if let Some((base, size)) = rt.device_range(addr, 1) {
        let len = ((base + size - addr) as usize).min(MAX_KERNARG);
        return rt.emu().memory().read_vec(addr, len).map_err(|e| {
            Some(PacketError::format(
                index,
                format!("reading the kernarg segment: {e}"),
            ))
        });
    }
    Err(Some(PacketError::format(
        index,
        format!(
            "kernarg_address {addr:#x} is not memory of this runtime (allocate it from a memory pool)"
        ),
    )))
}
