//! Device memory: the global heap shared by every workgroup of a launch, the per-workgroup
//! LDS, and per-lane scratch (private segment).
//!
//! Global memory is accessed concurrently by workgroups that run on different host threads.
//! It is stored as `AtomicU64` words and every access is a relaxed atomic load, store or
//! compare-exchange, so racing kernels (which are racy on hardware too) never cause a host
//! data race; GPU atomics are compare-exchange loops and therefore really atomic. Relaxed
//! ordering is enough because the emulator gives no cross-workgroup ordering guarantees
//! beyond what the kernel's own atomics provide, and a launch joins all its threads before
//! the host reads results.

use std::fmt;
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering};

use super::limits::{LimitError, default_max_memory};

/// Base of the first allocation. Far above 4 GiB so that a pointer truncated to 32 bits
/// never lands in the heap, and never 0 so that null is always a fault.
pub const HEAP_BASE: u64 = 0x0000_1000_0000_0000;
/// Allocation granularity (allocation bases are aligned to this).
pub const PAGE: u64 = 4096;
/// Unmapped gap left after every allocation, so small overruns fault instead of silently
/// reading the next buffer.
pub const GUARD: u64 = 64 * 1024;

/// Start of the flat-address window that maps to LDS (what `src_shared_base` reports).
/// Flat addresses `SHARED_APERTURE .. SHARED_APERTURE + 4 GiB` address the workgroup's LDS.
pub const SHARED_APERTURE: u64 = 0x1000_0000_0000_0000;
/// Start of the flat-address window that maps to the lane's private (scratch) memory
/// (what `src_private_base` reports).
pub const PRIVATE_APERTURE: u64 = 0x2000_0000_0000_0000;
/// Size of each aperture window.
pub const APERTURE_SIZE: u64 = 1 << 32;

/// CDNA4 allocates LDS in contiguous 1280-byte blocks (ISA section 3.6.5), so a workgroup may
/// address up to the end of its last block.
pub const LDS_GRANULE: u32 = tilegen_arch::LDS_GRANULE_BYTES;
/// LDS per compute unit on gfx950 (the most one workgroup can have).
pub const LDS_MAX: u32 = tilegen_arch::LDS_BYTES_PER_CU;

/// Whether an access reads or writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AccessKind {
    /// A load.
    Read,
    /// A store.
    Write,
    /// A read-modify-write atomic.
    Atomic,
}

impl fmt::Display for AccessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AccessKind::Read => "read",
            AccessKind::Write => "write",
            AccessKind::Atomic => "atomic",
        })
    }
}

/// An access that does not fall entirely inside one live allocation.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{kind} of {len} bytes at {addr:#x} is outside every allocation{}", describe_nearest(*addr, *nearest))]
pub struct MemFault {
    /// First byte of the access.
    pub addr: u64,
    /// Length of the access in bytes.
    pub len: u64,
    /// What the access was.
    pub kind: AccessKind,
    /// The allocation closest to `addr` as (base, size), if any exists.
    pub nearest: Option<(u64, u64)>,
}

fn describe_nearest(addr: u64, nearest: Option<(u64, u64)>) -> String {
    match nearest {
        None => " (no allocations exist)".to_string(),
        Some((base, size)) => {
            let end = base + size;
            let rel = if addr < base {
                format!("{} bytes before it", base - addr)
            } else if addr >= end {
                format!("{} bytes past its end", addr - end)
            } else {
                format!("at offset {} of it, running past its end", addr - base)
            };
            format!("; nearest allocation [{base:#x}, {end:#x}) ({size} bytes), {rel}")
        }
    }
}

/// Errors of the host-side allocation API.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocError {
    /// A zero-sized allocation was requested.
    #[error("zero-sized allocation")]
    ZeroSize,
    /// The requested alignment is not a power of two.
    #[error("alignment {0} is not a power of two")]
    BadAlignment(u64),
    /// The address space ran out (or the size overflowed).
    #[error("allocation of {0} bytes does not fit the address space")]
    TooLarge(u64),
    /// `free` was given an address that is not the base of a live allocation.
    #[error("{0:#x} is not the base of a live allocation")]
    NotAllocated(u64),
    /// The allocation would exceed the device memory limit (or the host refused it).
    #[error(transparent)]
    Limit(#[from] LimitError),
}

struct Allocation {
    base: u64,
    size: u64,
    words: Storage,
}

/// Words per page of a lazily zeroed allocation (64 KiB pages).
const LAZY_PAGE_WORDS: usize = 8192;

/// The bytes of an allocation: materialized up front, or page by page on first write.
enum Storage {
    Dense(Box<[AtomicU64]>),
    Lazy(LazyWords),
}

/// Pages of `LAZY_PAGE_WORDS` words that exist only once written; a null page reads as zero.
/// A page is installed with a compare-exchange, so racing first writers agree on one page.
struct LazyWords {
    pages: Box<[AtomicPtr<AtomicU64>]>,
    /// Host bytes of the pages materialized so far.
    materialized: AtomicU64,
}

impl LazyWords {
    fn page(&self, i: usize) -> Option<&[AtomicU64]> {
        let p = self.pages[i].load(Ordering::Acquire);
        // SAFETY: a non-null page pointer comes from `Box::into_raw` of a boxed slice of
        // exactly LAZY_PAGE_WORDS words and is freed only when `self` drops.
        (!p.is_null()).then(|| unsafe { std::slice::from_raw_parts(p, LAZY_PAGE_WORDS) })
    }

    fn page_or_make(&self, i: usize) -> &[AtomicU64] {
        if let Some(p) = self.page(i) {
            return p;
        }
        let fresh: Box<[AtomicU64]> = (0..LAZY_PAGE_WORDS).map(|_| AtomicU64::new(0)).collect();
        let raw = Box::into_raw(fresh) as *mut AtomicU64;
        match self.pages[i].compare_exchange(
            std::ptr::null_mut(),
            raw,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                self.materialized
                    .fetch_add(8 * LAZY_PAGE_WORDS as u64, Ordering::Relaxed);
            }
            Err(_) => {
                // Another writer installed the page first: free ours.
                // SAFETY: `raw` came from Box::into_raw just above and was never shared.
                drop(unsafe {
                    Box::from_raw(std::ptr::slice_from_raw_parts_mut(raw, LAZY_PAGE_WORDS))
                });
            }
        }
        self.page(i).unwrap_or(&[])
    }
}

impl Drop for LazyWords {
    fn drop(&mut self) {
        for p in self.pages.iter() {
            let raw = p.load(Ordering::Acquire);
            if !raw.is_null() {
                // SAFETY: see `page`; each page is freed once, here.
                drop(unsafe {
                    Box::from_raw(std::ptr::slice_from_raw_parts_mut(raw, LAZY_PAGE_WORDS))
                });
            }
        }
    }
}

impl Storage {
    /// Word `i` for reading (`None`: an untouched lazy page, which reads as zero).
    #[inline]
    fn get(&self, i: usize) -> Option<&AtomicU64> {
        match self {
            Storage::Dense(w) => Some(&w[i]),
            Storage::Lazy(l) => l.page(i / LAZY_PAGE_WORDS).map(|p| &p[i % LAZY_PAGE_WORDS]),
        }
    }

    /// Word `i` for writing (materializing its page).
    #[inline]
    fn get_mut(&self, i: usize) -> &AtomicU64 {
        match self {
            Storage::Dense(w) => &w[i],
            Storage::Lazy(l) => &l.page_or_make(i / LAZY_PAGE_WORDS)[i % LAZY_PAGE_WORDS],
        }
    }

    fn materialized(&self) -> u64 {
        match self {
            Storage::Dense(w) => 8 * w.len() as u64,
            Storage::Lazy(l) => l.materialized.load(Ordering::Relaxed),
        }
    }
}

/// The global heap. Host code allocates and copies with `&mut self`/`&self`; kernels read and
/// write through `&self` from any thread.
///
/// The heap has a size limit ([`DeviceMemory::limit`]): every allocation is checked against it
/// before any host memory is taken, and launches check the memory their waves need against
/// what is left ([`DeviceMemory::check_available`]).
pub struct DeviceMemory {
    /// Live allocations sorted by base.
    allocs: Vec<Allocation>,
    next_base: u64,
    /// Host bytes the live allocations hold.
    in_use: u64,
    /// Most host bytes the allocations may hold.
    limit: u64,
    /// Index of the allocation the last access found: the lanes of one instruction nearly
    /// always address one allocation, so this spares a binary search per lane. Relaxed: a
    /// stale or raced hint is checked before use.
    last_found: AtomicUsize,
}

impl Default for DeviceMemory {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for DeviceMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut l = f.debug_list();
        for a in &self.allocs {
            l.entry(&format_args!("[{:#x}, {:#x})", a.base, a.base + a.size));
        }
        l.finish()
    }
}

impl DeviceMemory {
    /// An empty heap limited to [`default_max_memory`] bytes.
    pub fn new() -> Self {
        Self::with_limit(default_max_memory())
    }

    /// An empty heap of at most `limit` bytes.
    pub fn with_limit(limit: u64) -> Self {
        DeviceMemory {
            allocs: Vec::new(),
            next_base: HEAP_BASE,
            in_use: 0,
            last_found: AtomicUsize::new(0),
            limit,
        }
    }

    /// The size limit in bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Changes the size limit (live allocations stay even if they exceed a lowered limit).
    pub fn set_limit(&mut self, limit: u64) {
        self.limit = limit;
    }

    /// Host bytes the live allocations hold (sizes rounded up to 8 bytes).
    pub fn in_use(&self) -> u64 {
        self.in_use
    }

    /// Checks that `bytes` more host memory for `what` stay within the limit.
    pub fn check_available(&self, what: &str, bytes: u64) -> Result<(), LimitError> {
        if bytes > self.limit.saturating_sub(self.in_use) {
            return Err(LimitError::Memory {
                what: what.to_string(),
                requested: bytes,
                in_use: self.in_use,
                limit: self.limit,
            });
        }
        Ok(())
    }

    /// Allocates `size` zeroed bytes at a page-aligned base and returns the base.
    pub fn alloc(&mut self, size: u64) -> Result<u64, AllocError> {
        self.alloc_aligned(size, PAGE)
    }

    /// Allocates `size` zeroed bytes whose base is a multiple of `align` (at least a page).
    pub fn alloc_aligned(&mut self, size: u64, align: u64) -> Result<u64, AllocError> {
        self.alloc_with(size, align, false)
    }

    /// Allocates `size` bytes that read as zero without taking host memory for them: pages
    /// (64 KiB) materialize on first write and reads of untouched pages return zero. Only the
    /// page table (8 bytes per page) counts against the limit at allocation; the pages that
    /// kernels write later are not limited (see [`DeviceMemory::materialized_bytes`]). Made
    /// for full-size launches that only a few workgroups touch (the timing model's
    /// `zero:BYTES` buffers).
    pub fn alloc_lazy(&mut self, size: u64) -> Result<u64, AllocError> {
        self.alloc_with(size, PAGE, true)
    }

    /// Host bytes the allocations hold now (lazy pages counted as they materialize).
    pub fn materialized_bytes(&self) -> u64 {
        self.allocs.iter().map(|a| a.words.materialized()).sum()
    }

    fn alloc_with(&mut self, size: u64, align: u64, lazy: bool) -> Result<u64, AllocError> {
        if size == 0 {
            return Err(AllocError::ZeroSize);
        }
        if !align.is_power_of_two() {
            return Err(AllocError::BadAlignment(align));
        }
        let n_words = size.div_ceil(8);
        let n_pages = n_words.div_ceil(LAZY_PAGE_WORDS as u64);
        // Checked against the limit first: an absurd size is reported as over the limit (which
        // says how to raise it) rather than as not fitting the address space.
        let host_bytes = if lazy {
            n_pages.saturating_mul(8)
        } else {
            n_words.saturating_mul(8)
        };
        let what = || "the allocation".to_string();
        self.check_available(&what(), host_bytes)?;
        let align = align.max(PAGE);
        let base = self
            .next_base
            .checked_add(align - 1)
            .map(|b| b & !(align - 1))
            .ok_or(AllocError::TooLarge(size))?;
        let end = base.checked_add(size).ok_or(AllocError::TooLarge(size))?;
        if end >= SHARED_APERTURE {
            return Err(AllocError::TooLarge(size));
        }
        let host_refused = || LimitError::HostMemory {
            what: format!("an allocation of {size} bytes"),
            requested: host_bytes,
        };
        let words = if lazy {
            let n = usize::try_from(n_pages).map_err(|_| AllocError::TooLarge(size))?;
            let mut pages = Vec::new();
            pages.try_reserve_exact(n).map_err(|_| host_refused())?;
            pages.extend((0..n).map(|_| AtomicPtr::new(std::ptr::null_mut())));
            Storage::Lazy(LazyWords {
                pages: pages.into_boxed_slice(),
                materialized: AtomicU64::new(0),
            })
        } else {
            let n = usize::try_from(n_words).map_err(|_| AllocError::TooLarge(size))?;
            let mut words = Vec::new();
            words.try_reserve_exact(n).map_err(|_| host_refused())?;
            words.extend((0..n).map(|_| AtomicU64::new(0)));
            Storage::Dense(words.into_boxed_slice())
        };
        let next_base = end
            .checked_add(GUARD)
            .and_then(|e| e.checked_next_multiple_of(PAGE))
            .ok_or(AllocError::TooLarge(size))?;
        self.next_base = next_base;
        self.in_use += host_bytes;
        // Bases only grow, so pushing keeps the list sorted.
        self.allocs.push(Allocation { base, size, words });
        Ok(base)
    }

    /// Allocates a buffer holding `data` and returns its base.
    pub fn upload(&mut self, data: &[u8]) -> Result<u64, AllocError> {
        let base = self.alloc(data.len().max(1) as u64)?;
        // Cannot fault: the range was just allocated.
        self.write(base, data)
            .map_err(|_| AllocError::TooLarge(data.len() as u64))?;
        Ok(base)
    }

    /// Releases the allocation based at `base`.
    pub fn free(&mut self, base: u64) -> Result<(), AllocError> {
        let idx = self
            .allocs
            .binary_search_by_key(&base, |a| a.base)
            .map_err(|_| AllocError::NotAllocated(base))?;
        let a = self.allocs.remove(idx);
        self.in_use -= match a.words {
            Storage::Dense(_) => a.size.div_ceil(8) * 8,
            Storage::Lazy(_) => a.size.div_ceil(8).div_ceil(LAZY_PAGE_WORDS as u64) * 8,
        };
        Ok(())
    }

    /// Size of the allocation based at `base`, if it is live.
    pub fn size_of(&self, base: u64) -> Option<u64> {
        self.allocs
            .binary_search_by_key(&base, |a| a.base)
            .ok()
            .map(|i| self.allocs[i].size)
    }

    /// Number of live allocations.
    pub fn allocation_count(&self) -> usize {
        self.allocs.len()
    }

    fn find(&self, addr: u64, len: u64, kind: AccessKind) -> Result<&Allocation, MemFault> {
        let holds = |a: &Allocation| {
            addr >= a.base && addr - a.base < a.size && len <= a.size - (addr - a.base)
        };
        let hint = self.last_found.load(Ordering::Relaxed);
        if let Some(a) = self.allocs.get(hint).filter(|a| holds(a)) {
            return Ok(a);
        }
        let idx = self.allocs.partition_point(|a| a.base <= addr);
        if idx > 0 && holds(&self.allocs[idx - 1]) {
            self.last_found.store(idx - 1, Ordering::Relaxed);
            return Ok(&self.allocs[idx - 1]);
        }
        Err(MemFault {
            addr,
            len,
            kind,
            nearest: self.nearest(addr),
        })
    }

    fn nearest(&self, addr: u64) -> Option<(u64, u64)> {
        self.allocs
            .iter()
            .min_by_key(|a| {
                if addr < a.base {
                    a.base - addr
                } else {
                    addr.saturating_sub(a.base + a.size)
                }
            })
            .map(|a| (a.base, a.size))
    }

    /// Copies `buf.len()` bytes starting at `addr` into `buf`.
    pub fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), MemFault> {
        if buf.is_empty() {
            return Ok(());
        }
        let a = self.find(addr, buf.len() as u64, AccessKind::Read)?;
        let off = addr - a.base;
        let word = |i: u64| {
            a.words
                .get(i as usize)
                .map_or(0, |w| w.load(Ordering::Relaxed))
                .to_le_bytes()
        };
        // A leading partial word, then whole words as fixed 8-byte copies (the timing model
        // reads every lane of every load through here; a variable-length copy per word was a
        // tenth of its time), then a trailing partial word.
        let start = (off % 8) as usize;
        let head = if start == 0 {
            0
        } else {
            let n = (8 - start).min(buf.len());
            buf[..n].copy_from_slice(&word(off / 8)[start..start + n]);
            n
        };
        let mut index = (off + head as u64) / 8;
        let mut chunks = buf[head..].chunks_exact_mut(8);
        for chunk in &mut chunks {
            chunk.copy_from_slice(&word(index));
            index += 1;
        }
        let tail = chunks.into_remainder();
        if !tail.is_empty() {
            let n = tail.len();
            tail.copy_from_slice(&word(index)[..n]);
        }
        Ok(())
    }

    /// Copies `data` to `addr`.
    pub fn write(&self, addr: u64, data: &[u8]) -> Result<(), MemFault> {
        if data.is_empty() {
            return Ok(());
        }
        let a = self.find(addr, data.len() as u64, AccessKind::Write)?;
        let mut off = addr - a.base;
        let mut done = 0;
        while done < data.len() {
            let start = (off % 8) as usize;
            let n = (8 - start).min(data.len() - done);
            let slot = a.words.get_mut((off / 8) as usize);
            if n == 8 {
                let mut w = [0u8; 8];
                w.copy_from_slice(&data[done..done + 8]);
                slot.store(u64::from_le_bytes(w), Ordering::Relaxed);
            } else {
                // Partial word: merge under compare-exchange so a concurrent writer of the
                // other bytes of this word is never lost.
                let mut bytes = [0u8; 8];
                bytes[start..start + n].copy_from_slice(&data[done..done + n]);
                let value = u64::from_le_bytes(bytes);
                let mask = (u64::MAX >> (64 - 8 * n as u32)) << (8 * start as u32);
                let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                    Some((old & !mask) | value)
                });
            }
            done += n;
            off += n as u64;
        }
        Ok(())
    }

    /// Reads a little-endian u32.
    pub fn read_u32(&self, addr: u64) -> Result<u32, MemFault> {
        let mut b = [0u8; 4];
        self.read(addr, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a little-endian u32.
    pub fn write_u32(&self, addr: u64, v: u32) -> Result<(), MemFault> {
        self.write(addr, &v.to_le_bytes())
    }

    /// Reads a little-endian u64.
    pub fn read_u64(&self, addr: u64) -> Result<u64, MemFault> {
        let mut b = [0u8; 8];
        self.read(addr, &mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// Copies `len` bytes at `addr` into a new vector.
    pub fn read_vec(&self, addr: u64, len: usize) -> Result<Vec<u8>, MemFault> {
        let mut v = vec![0u8; len];
        self.read(addr, &mut v)?;
        Ok(v)
    }

    /// Atomically replaces the u32 at `addr` (4-byte aligned) by `f(old)` and returns `old`.
    pub fn atomic_u32(&self, addr: u64, f: impl Fn(u32) -> u32) -> Result<u32, MemFault> {
        let a = self.find(addr, 4, AccessKind::Atomic)?;
        if !addr.is_multiple_of(4) {
            return Err(MemFault {
                addr,
                len: 4,
                kind: AccessKind::Atomic,
                nearest: Some((a.base, a.size)),
            });
        }
        let off = addr - a.base;
        let shift = 8 * (off % 8) as u32;
        let slot = a.words.get_mut((off / 8) as usize);
        let mut old32 = 0;
        let _ = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
            old32 = (w >> shift) as u32;
            let new32 = f(old32) as u64;
            Some((w & !(0xffff_ffffu64 << shift)) | (new32 << shift))
        });
        Ok(old32)
    }

    /// Atomically replaces the u64 at `addr` (8-byte aligned) by `f(old)` and returns `old`.
    pub fn atomic_u64(&self, addr: u64, f: impl Fn(u64) -> u64) -> Result<u64, MemFault> {
        let a = self.find(addr, 8, AccessKind::Atomic)?;
        if !addr.is_multiple_of(8) {
            return Err(MemFault {
                addr,
                len: 8,
                kind: AccessKind::Atomic,
                nearest: Some((a.base, a.size)),
            });
        }
        let slot = a.words.get_mut(((addr - a.base) / 8) as usize);
        let old = slot.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| Some(f(w)));
        // fetch_update only fails if the closure returns None, which it never does.
        Ok(old.unwrap_or_else(|w| w))
    }
}

/// One workgroup's LDS. Only the thread running that workgroup touches it, so it is plain
/// bytes.
///
/// Out-of-range rule (CDNA3/CDNA4 ISA, "LDS" chapter): a DS access whose address lies at or
/// beyond the workgroup's allocation returns 0 for reads and is discarded for writes; it
/// does not fault. The check is applied per byte here, which coincides with the hardware's
/// per-dword check for every naturally aligned access.
#[derive(Clone, Debug)]
pub struct Lds {
    bytes: Vec<u8>,
    /// Number of accesses that touched bytes outside the allocation (a diagnostic).
    pub out_of_range: u64,
}

/// `dst.copy_from_slice(src)` with the lengths of a lane's access (4, 8 and 16 bytes) copied
/// as fixed-size words: the timing model moves every lane of every LDS access through here,
/// and a variable-length copy is a call into the C library each time.
#[inline]
fn copy_small(dst: &mut [u8], src: &[u8]) {
    fn fixed<const N: usize>(dst: &mut [u8], src: &[u8]) {
        let s: [u8; N] = src.try_into().unwrap_or([0; N]);
        if let Ok(d) = <&mut [u8; N]>::try_from(dst) {
            *d = s;
        }
    }
    match (dst.len(), src.len()) {
        (4, 4) => fixed::<4>(dst, src),
        (8, 8) => fixed::<8>(dst, src),
        (16, 16) => fixed::<16>(dst, src),
        _ => dst.copy_from_slice(src),
    }
}

impl Lds {
    /// LDS for a workgroup that asked for `requested` bytes, rounded up to the allocation
    /// granule. Returns `None` if more than a compute unit has was requested.
    pub fn new(requested: u32) -> Option<Lds> {
        if requested > LDS_MAX {
            return None;
        }
        let size = requested.div_ceil(LDS_GRANULE) * LDS_GRANULE;
        Some(Lds {
            bytes: vec![0; size as usize],
            out_of_range: 0,
        })
    }

    /// Allocated size in bytes.
    pub fn size(&self) -> u32 {
        self.bytes.len() as u32
    }

    /// Reads `buf.len()` bytes at `addr`; bytes beyond the allocation read as zero.
    pub fn read(&mut self, addr: u64, buf: &mut [u8]) {
        let size = self.bytes.len() as u64;
        if addr < size && addr + buf.len() as u64 <= size {
            copy_small(buf, &self.bytes[addr as usize..addr as usize + buf.len()]);
            return;
        }
        self.out_of_range += 1;
        for (i, b) in buf.iter_mut().enumerate() {
            let a = addr + i as u64;
            *b = if a < size { self.bytes[a as usize] } else { 0 };
        }
    }

    /// Writes `data` at `addr`; bytes beyond the allocation are dropped.
    pub fn write(&mut self, addr: u64, data: &[u8]) {
        let size = self.bytes.len() as u64;
        if addr < size && addr + data.len() as u64 <= size {
            copy_small(
                &mut self.bytes[addr as usize..addr as usize + data.len()],
                data,
            );
            return;
        }
        self.out_of_range += 1;
        for (i, b) in data.iter().enumerate() {
            let a = addr + i as u64;
            if a < size {
                self.bytes[a as usize] = *b;
            }
        }
    }

    /// Reads a u32 (0 where out of range).
    pub fn read_u32(&mut self, addr: u64) -> u32 {
        let mut b = [0u8; 4];
        self.read(addr, &mut b);
        u32::from_le_bytes(b)
    }

    /// Writes a u32 (dropped where out of range).
    pub fn write_u32(&mut self, addr: u64, v: u32) {
        self.write(addr, &v.to_le_bytes());
    }

    /// The whole LDS contents (for tests and debugging).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Private memory of one wave: `per_lane` bytes for each of the 64 lanes.
///
/// Hardware performs no range check on flat scratch (an overrun reads another wave's
/// memory), so an access outside the lane's private segment is reported as a fault rather
/// than emulated: it is always a kernel bug and a silent answer would hide it.
#[derive(Clone, Debug)]
pub struct Scratch {
    per_lane: u32,
    bytes: Vec<u8>,
}

/// An access outside a lane's private segment.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "scratch {kind} of {len} bytes at private offset {offset:#x} (lane {lane}) is outside the {size}-byte private segment"
)]
pub struct ScratchFault {
    /// Lane that made the access.
    pub lane: usize,
    /// Offset inside the private segment.
    pub offset: u64,
    /// Length of the access.
    pub len: u64,
    /// Per-lane segment size.
    pub size: u32,
    /// What the access was.
    pub kind: AccessKind,
}

impl Scratch {
    /// Private memory of `per_lane` bytes per lane.
    pub fn new(per_lane: u32) -> Scratch {
        Scratch {
            per_lane,
            bytes: vec![0; per_lane as usize * 64],
        }
    }

    /// Private memory of `per_lane` bytes per lane; an error instead of an abort when the host
    /// cannot provide it.
    pub fn try_new(per_lane: u32) -> Result<Scratch, LimitError> {
        Ok(Scratch {
            per_lane,
            bytes: super::limits::try_filled(per_lane as usize * 64, 0, "a wave's scratch")?,
        })
    }

    /// Host bytes of one wave's scratch with `per_lane` bytes per lane.
    pub fn bytes_per_wave(per_lane: u32) -> u64 {
        per_lane as u64 * 64
    }

    /// Bytes per lane.
    pub fn per_lane(&self) -> u32 {
        self.per_lane
    }

    /// Zeroes every lane's memory.
    pub fn clear(&mut self) {
        self.bytes.fill(0);
    }

    fn range(
        &self,
        lane: usize,
        offset: u64,
        len: usize,
        kind: AccessKind,
    ) -> Result<usize, ScratchFault> {
        if lane < 64
            && offset
                .checked_add(len as u64)
                .is_some_and(|e| e <= self.per_lane as u64)
        {
            Ok(lane * self.per_lane as usize + offset as usize)
        } else {
            Err(ScratchFault {
                lane,
                offset,
                len: len as u64,
                size: self.per_lane,
                kind,
            })
        }
    }

    /// Reads lane `lane`'s private bytes at `offset`.
    pub fn read(&self, lane: usize, offset: u64, buf: &mut [u8]) -> Result<(), ScratchFault> {
        let at = self.range(lane, offset, buf.len(), AccessKind::Read)?;
        buf.copy_from_slice(&self.bytes[at..at + buf.len()]);
        Ok(())
    }

    /// Writes lane `lane`'s private bytes at `offset`.
    pub fn write(&mut self, lane: usize, offset: u64, data: &[u8]) -> Result<(), ScratchFault> {
        let at = self.range(lane, offset, data.len(), AccessKind::Write)?;
        self.bytes[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocations_are_page_aligned_nonzero_and_separated() {
        let mut m = DeviceMemory::new();
        let a = m.alloc(10).unwrap();
        let b = m.alloc(5000).unwrap();
        assert_ne!(a, 0);
        assert_eq!(a % PAGE, 0);
        assert_eq!(b % PAGE, 0);
        assert!(b >= a + 10 + GUARD);
        let c = m.alloc_aligned(1, 1 << 20).unwrap();
        assert_eq!(c % (1 << 20), 0);
        assert_eq!(m.alloc(0), Err(AllocError::ZeroSize));
        assert_eq!(m.alloc_aligned(8, 3), Err(AllocError::BadAlignment(3)));
    }

    #[test]
    fn read_write_roundtrip_unaligned_and_zeroed() {
        let mut m = DeviceMemory::new();
        let a = m.alloc(64).unwrap();
        assert_eq!(m.read_vec(a, 64).unwrap(), vec![0; 64]);
        let data: Vec<u8> = (0..21).collect();
        m.write(a + 3, &data).unwrap();
        let back = m.read_vec(a, 30).unwrap();
        assert_eq!(&back[3..24], &data[..]);
        assert_eq!(&back[..3], &[0, 0, 0]);
        assert_eq!(&back[24..], &[0; 6]);
        m.write_u32(a + 60, 0xdead_beef).unwrap();
        assert_eq!(m.read_u32(a + 60).unwrap(), 0xdead_beef);
    }

    #[test]
    fn reads_of_every_offset_and_length_match_the_bytes_written() {
        let mut m = DeviceMemory::new();
        let a = m.alloc(48).unwrap();
        let b = m.alloc_lazy(48).unwrap();
        let bytes: Vec<u8> = (0..48u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        m.write(a, &bytes).unwrap();
        m.write(b + 16, &bytes[16..32]).unwrap();
        let mut lazy = [0u8; 48];
        lazy[16..32].copy_from_slice(&bytes[16..32]);
        for off in 0..48 {
            for len in 0..=48 - off {
                // Alternate the allocations, so the last-found hint is wrong every time.
                assert_eq!(
                    m.read_vec(a + off as u64, len).unwrap(),
                    &bytes[off..off + len],
                    "dense {off}+{len}"
                );
                assert_eq!(
                    m.read_vec(b + off as u64, len).unwrap(),
                    &lazy[off..off + len],
                    "lazy {off}+{len}"
                );
            }
        }
        // A hint left on a freed allocation is never trusted.
        m.free(a).unwrap();
        assert!(m.read_vec(a, 8).is_err());
        assert_eq!(m.read_vec(b + 16, 4).unwrap(), &bytes[16..20]);
    }

    #[test]
    fn faults_name_the_address_and_nearest_allocation() {
        let mut m = DeviceMemory::new();
        assert_eq!(
            m.read_u32(0).unwrap_err(),
            MemFault {
                addr: 0,
                len: 4,
                kind: AccessKind::Read,
                nearest: None
            }
        );
        let a = m.alloc(16).unwrap();
        // Straddling the end: 4 bytes at offset 14.
        let e = m.write_u32(a + 14, 1).unwrap_err();
        assert_eq!(
            e,
            MemFault {
                addr: a + 14,
                len: 4,
                kind: AccessKind::Write,
                nearest: Some((a, 16))
            }
        );
        let text = e.to_string();
        assert!(text.contains(&format!("{:#x}", a + 14)), "{text}");
        assert!(text.contains("running past its end"), "{text}");
        let e = m.read_u32(a + 100).unwrap_err();
        assert!(e.to_string().contains("84 bytes past its end"), "{e}");
        let e = m.read_u32(a - 8).unwrap_err();
        assert!(e.to_string().contains("8 bytes before it"), "{e}");
        // The guard gap after the allocation is unmapped.
        assert!(m.read_u32(a + 16).is_err());
    }

    #[test]
    fn free_unmaps() {
        let mut m = DeviceMemory::new();
        let a = m.alloc(16).unwrap();
        m.free(a).unwrap();
        assert!(m.read_u32(a).is_err());
        assert_eq!(m.free(a), Err(AllocError::NotAllocated(a)));
    }

    #[test]
    fn atomics_are_atomic_across_threads() {
        let mut m = DeviceMemory::new();
        let a = m.alloc(16).unwrap();
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1000 {
                        m.atomic_u32(a + 4, |x| x + 1).unwrap();
                        m.atomic_u32(a, |x| x + 2).unwrap();
                        m.atomic_u64(a + 8, |x| x + 3).unwrap();
                    }
                });
            }
        });
        assert_eq!(m.read_u32(a).unwrap(), 8000);
        assert_eq!(m.read_u32(a + 4).unwrap(), 4000);
        assert_eq!(m.read_u64(a + 8).unwrap(), 12000);
        assert!(m.atomic_u32(a + 2, |x| x).is_err());
        assert!(m.atomic_u64(a + 4, |x| x).is_err());
    }

    #[test]
    fn concurrent_byte_writes_to_one_word_are_not_lost() {
        let mut m = DeviceMemory::new();
        let a = m.alloc(8).unwrap();
        std::thread::scope(|s| {
            for t in 0..8u8 {
                let m = &m;
                s.spawn(move || {
                    for _ in 0..200 {
                        m.write(a + t as u64, &[t + 1]).unwrap();
                    }
                });
            }
        });
        assert_eq!(m.read_vec(a, 8).unwrap(), vec![1, 2, 3, 4, 5, 6, 7, 8]);
    }

    #[test]
    fn lds_out_of_range_reads_zero_and_drops_writes() {
        let mut l = Lds::new(100).unwrap();
        assert_eq!(l.size(), LDS_GRANULE);
        l.write_u32(0, 7);
        assert_eq!(l.read_u32(0), 7);
        l.write_u32(LDS_GRANULE as u64, 9);
        assert_eq!(l.read_u32(LDS_GRANULE as u64), 0);
        assert_eq!(l.out_of_range, 2);
        // Partially out of range: the in-range bytes are written and read.
        l.write(LDS_GRANULE as u64 - 2, &[1, 2, 3, 4]);
        let mut b = [9u8; 4];
        l.read(LDS_GRANULE as u64 - 2, &mut b);
        assert_eq!(b, [1, 2, 0, 0]);
        assert!(Lds::new(LDS_MAX).is_some());
        assert!(Lds::new(LDS_MAX + 1).is_none());
        assert_eq!(Lds::new(0).unwrap().size(), 0);
    }

    #[test]
    fn scratch_is_per_lane_and_bounds_checked() {
        let mut s = Scratch::new(16);
        s.write(3, 12, &[1, 2, 3, 4]).unwrap();
        let mut b = [0u8; 4];
        s.read(3, 12, &mut b).unwrap();
        assert_eq!(b, [1, 2, 3, 4]);
        s.read(4, 12, &mut b).unwrap();
        assert_eq!(b, [0; 4]);
        let e = s.write(3, 13, &[0; 4]).unwrap_err();
        assert_eq!(e.offset, 13);
        assert!(s.read(64, 0, &mut b).is_err());
    }

    #[test]
    fn lazy_allocations_read_zero_and_materialize_written_pages() {
        let mut m = DeviceMemory::with_limit(1 << 20);
        // 64 GiB of address space for a page table of 8 MiB... too much for a 1 MiB limit.
        assert!(m.alloc_lazy(64 << 30).is_err());
        let a = m.alloc_lazy(1 << 30).unwrap();
        assert_eq!(m.in_use(), 8 * (1 << 30) / (8 * LAZY_PAGE_WORDS as u64));
        assert_eq!(m.read_u64(a + (1 << 29)).unwrap(), 0);
        assert_eq!(m.materialized_bytes(), 0);
        m.write_u32(a + (1 << 29) + 4, 0x1234_5678).unwrap();
        m.atomic_u32(a + 8, |x| x + 5).unwrap();
        assert_eq!(m.read_u32(a + (1 << 29) + 4).unwrap(), 0x1234_5678);
        assert_eq!(m.read_u32(a + 8).unwrap(), 5);
        assert_eq!(m.materialized_bytes(), 2 * 8 * LAZY_PAGE_WORDS as u64);
        // Unaligned reads across a page edge mix a written page and an untouched one.
        let edge = a + 8 * LAZY_PAGE_WORDS as u64;
        m.write(edge - 2, &[1, 2, 3, 4]).unwrap();
        assert_eq!(
            m.read_vec(edge - 4, 8).unwrap(),
            vec![0, 0, 1, 2, 3, 4, 0, 0]
        );
        assert!(m.read_u32(a + (1 << 30)).is_err(), "still range checked");
        m.free(a).unwrap();
        assert_eq!(m.in_use(), 0);
    }

    #[test]
    fn allocations_are_checked_against_the_limit_before_allocating() {
        let mut m = DeviceMemory::with_limit(1 << 20);
        let a = m.alloc(1000).unwrap();
        assert_eq!(m.in_use(), 1000);
        let e = m.alloc(1 << 40).unwrap_err();
        match &e {
            AllocError::Limit(LimitError::Memory {
                requested,
                in_use,
                limit,
                ..
            }) => assert_eq!((*requested, *in_use, *limit), (1 << 40, 1000, 1 << 20)),
            e => panic!("unexpected {e:?}"),
        }
        let text = e.to_string();
        assert!(
            text.contains("1099511627776") && text.contains("1048576"),
            "{text}"
        );
        // An absurd size is a limit error too, not an address-space or allocation failure.
        assert!(matches!(m.alloc(u64::MAX), Err(AllocError::Limit(_))));
        let b = m.alloc((1 << 20) - 1000).unwrap();
        assert!(m.alloc(1).is_err());
        m.free(a).unwrap();
        m.free(b).unwrap();
        assert_eq!(m.in_use(), 0);
        assert!(m.check_available("x", 1 << 20).is_ok());
        assert!(m.check_available("x", (1 << 20) + 1).is_err());
    }
}
