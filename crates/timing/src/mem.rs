//! The memory hierarchy of the model: a vL1D per CU, the L2 of each XCD (channels), the
//! MALL and HBM. Caches are keyed by line address (the addresses the instructions computed);
//! every level with a bandwidth is a FIFO server, so latency grows with load (a request waits
//! for the bytes queued before it).

use std::collections::HashMap;
use std::num::NonZeroU64;

use serde::Serialize;

use tilegen_emu::exec::interp::VmemProbe;

use crate::params::Params;

/// An XOR fold of a line number: every 4-bit group of the line address flips the low bits,
/// the way GPUs hash addresses over L2 channels (so strides of a power of two, such as the
/// rows of a row-major matrix, do not all land on one channel).
pub(crate) fn fold_hash(line: u64) -> u64 {
    let mut h = line;
    h ^= h >> 32;
    h ^= h >> 16;
    h ^= h >> 8;
    h ^= h >> 4;
    h
}

/// The distinct lines, ascending, that the global lanes of a probed vector-memory access
/// touch (a lane's first and last byte), in lines of `1 << line_shift` bytes; returns how
/// many of `out` it filled.
pub(crate) fn probed_lines(p: &VmemProbe, line_shift: u32, out: &mut [u64; 128]) -> usize {
    let mut n = 0;
    let bytes = p.bytes.max(1) as u64;
    for l in (0..64).filter(|l| p.global >> l & 1 != 0) {
        let a = p.addr[l];
        out[n] = a >> line_shift;
        out[n + 1] = (a + bytes - 1) >> line_shift;
        n += 2;
    }
    let lines = &mut out[..n];
    // Lanes usually address ascending lines: sort only when they do not.
    if !lines.is_sorted() {
        lines.sort_unstable();
    }
    let mut kept = 0;
    for i in 0..n {
        if kept == 0 || out[i] != out[kept - 1] {
            out[kept] = out[i];
            kept += 1;
        }
    }
    kept
}

/// A set-associative LRU cache of line addresses.
#[derive(Clone, Debug)]
pub(crate) struct Cache {
    sets: usize,
    ways: usize,
    /// `sets * ways` tags (`u64::MAX` = empty) and last-use stamps.
    tags: Vec<u64>,
    stamps: Vec<u64>,
    /// When each way's data is (or will be) there: a hit on a line still being filled
    /// waits for the fill (the miss-status holding register merges the request).
    ready: Vec<f64>,
    clock: u64,
    /// Index sets by [`fold_hash`] of the line (the L2) rather than its low bits (the L1).
    hashed: bool,
}

impl Cache {
    /// A cache of `bytes` in lines of `line` bytes with `sets` sets.
    pub(crate) fn new(bytes: u64, line: NonZeroU64, sets: u64) -> Cache {
        let lines = (bytes / line).max(1);
        let sets = sets.clamp(1, lines) as usize;
        let ways = (lines as usize / sets).max(1);
        Cache {
            sets,
            ways,
            tags: vec![u64::MAX; sets * ways],
            stamps: vec![0; sets * ways],
            ready: vec![0.0; sets * ways],
            clock: 0,
            hashed: false,
        }
    }

    /// The cache with its set index hashed from the whole line address.
    pub(crate) fn hashed(mut self) -> Cache {
        self.hashed = true;
        self
    }

    /// Looks `line` (a line number) up; inserts it on a miss (evicting the least recently
    /// used way). Returns whether it hit.
    #[cfg(test)]
    pub(crate) fn access(&mut self, line: u64) -> bool {
        self.lookup(line).0
    }

    /// Looks `line` up, inserting it on a miss (evicting the least recently used way).
    /// Returns whether it hit and its way, for [`ready`](Self::ready) and
    /// [`fill`](Self::fill).
    pub(crate) fn lookup(&mut self, line: u64) -> (bool, usize) {
        self.clock += 1;
        let key = if self.hashed { fold_hash(line) } else { line };
        let set = (key % self.sets as u64) as usize;
        let base = set * self.ways;
        let tags = &mut self.tags[base..base + self.ways];
        let stamps = &mut self.stamps[base..base + self.ways];
        // Two simple scans (the hit, else the first least recently used way) rather than one
        // with an early exit: the compiler vectorizes each, and the L1's sets are 64 ways wide.
        if let Some(w) = tags.iter().position(|&t| t == line) {
            stamps[w] = self.clock;
            return (true, base + w);
        }
        let victim = stamps
            .iter()
            .enumerate()
            .min_by_key(|&(_, &st)| st)
            .map_or(0, |(w, _)| w);
        tags[victim] = line;
        stamps[victim] = self.clock;
        self.ready[base + victim] = 0.0;
        (false, base + victim)
    }

    /// When the data of way `slot` is there.
    pub(crate) fn ready(&self, slot: usize) -> f64 {
        self.ready[slot]
    }

    /// Records when the data of way `slot` (just missed) arrives.
    pub(crate) fn fill(&mut self, slot: usize, t: f64) {
        self.ready[slot] = t;
    }
}

/// A large cache approximated as FIFO over a hash map (the MALL: far larger than what a
/// sampled simulation touches, so replacement details rarely matter). A line is present while
/// fewer than `capacity` fills came after its own: each entry keeps its fill's sequence number,
/// so an eviction is a comparison, not a removal from the map (which was most of the MALL's
/// cost once a launch touches more lines than it holds); stale entries are swept out when the
/// map reaches twice the capacity.
#[derive(Clone, Debug)]
pub(crate) struct FifoCache {
    capacity: u64,
    /// Lines filled, with their fill's sequence number and when their data is there.
    present: HashMap<u64, (u64, f64), BuildLineHasher>,
    /// Fills so far.
    fills: u64,
}

/// A multiplicative hash of line numbers (the standard library's SipHash is most of the
/// MALL's cost, and line numbers need no protection from collisions chosen by an attacker).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct BuildLineHasher;

/// The hasher of [`BuildLineHasher`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct LineHasher(u64);

impl std::hash::Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }

    fn write_u64(&mut self, v: u64) {
        let x = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = x ^ (x >> 29);
    }
}

impl std::hash::BuildHasher for BuildLineHasher {
    type Hasher = LineHasher;

    fn build_hasher(&self) -> LineHasher {
        LineHasher(0)
    }
}

impl FifoCache {
    pub(crate) fn new(lines: u64) -> FifoCache {
        FifoCache {
            capacity: lines.max(1),
            present: HashMap::default(),
            fills: 0,
        }
    }

    #[cfg(test)]
    pub(crate) fn access(&mut self, line: u64) -> bool {
        let hit = self.lookup(line).is_some();
        if !hit {
            self.fill(line, 0.0);
        }
        hit
    }

    /// When the data of `line` is there, if it is present (or being filled).
    pub(crate) fn lookup(&self, line: u64) -> Option<f64> {
        match self.present.get(&line) {
            Some(&(seq, t)) if seq + self.capacity > self.fills => Some(t),
            _ => None,
        }
    }

    /// Inserts `line` (just missed), whose data arrives at `t`; the oldest line leaves.
    pub(crate) fn fill(&mut self, line: u64, t: f64) {
        self.fills += 1;
        self.present.insert(line, (self.fills, t));
        if self.present.len() as u64 >= 2 * self.capacity {
            let (fills, capacity) = (self.fills, self.capacity);
            self.present
                .retain(|_, &mut (seq, _)| seq + capacity > fills);
        }
    }
}

/// A FIFO bandwidth server: requests wait for the bytes queued before them. It also keeps
/// its recent utilization (an exponentially weighted average of its busy time over a window),
/// for latencies that grow with load before the queue itself does.
#[derive(Clone, Debug)]
pub(crate) struct Server {
    bytes_per_cycle: f64,
    free_at: f64,
    /// Bytes served (a part of a transfer counts its part).
    pub bytes: f64,
    /// Cycles requests waited in the queue.
    pub waited: f64,
    /// Busy cycles per cycle over the recent window, as of `load_at`.
    load: f64,
    load_at: f64,
    window: f64,
}

impl Server {
    pub(crate) fn new(bytes_per_cycle: f64) -> Server {
        Server {
            bytes_per_cycle: bytes_per_cycle.max(1e-9),
            free_at: 0.0,
            bytes: 0.0,
            waited: 0.0,
            load: 0.0,
            load_at: 0.0,
            window: 1.0,
        }
    }

    /// The server with its utilization averaged over `cycles`.
    pub(crate) fn with_window(mut self, cycles: f64) -> Server {
        self.window = cycles.max(1.0);
        self
    }

    /// Serves `bytes` arriving at `t`; returns when the transfer ends.
    pub(crate) fn serve(&mut self, t: f64, bytes: u64) -> f64 {
        self.serve_part(t, bytes, 1.0)
    }

    /// Serves the share `part` of a transfer of `bytes` arriving at `t` (the rest is served
    /// for someone else); returns when the transfer ends.
    pub(crate) fn serve_part(&mut self, t: f64, bytes: u64, part: f64) -> f64 {
        let start = self.free_at.max(t);
        self.waited += start - t;
        let busy = bytes as f64 * part / self.bytes_per_cycle;
        self.free_at = start + busy;
        self.bytes += bytes as f64 * part;
        if t > self.load_at {
            self.load *= (-(t - self.load_at) / self.window).exp();
            self.load_at = t;
        }
        self.load += busy / self.window;
        self.free_at
    }

    /// Recent utilization, 0 to 1.
    pub(crate) fn utilization(&self) -> f64 {
        self.load.min(1.0)
    }
}

/// Hit and byte counts of the hierarchy.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct MemoryReport {
    /// Line requests that reached the L1 (loads).
    pub l1_requests: u64,
    /// Of those, L1 hits.
    pub l1_hits: u64,
    /// Line requests that reached the L2 (L1 misses, stores, atomics).
    pub l2_requests: u64,
    /// Of those, L2 hits.
    pub l2_hits: u64,
    /// Line requests that reached the MALL.
    pub mall_requests: u64,
    /// Of those, MALL hits.
    pub mall_hits: u64,
    /// Bytes read from and written to HBM by the simulated workgroups.
    pub hbm_bytes: u64,
    /// Mean cycles an HBM request waited for bandwidth.
    pub hbm_mean_queue_cycles: f64,
    /// Vector-memory load instructions (with data returned to the wave).
    pub loads: u64,
    /// Mean cycles from a load's issue to its data (all its lines back).
    pub mean_load_latency_cycles: f64,
}

/// The hierarchy shared by the simulated CUs.
#[derive(Debug)]
pub(crate) struct MemSystem {
    line_shift: u32,
    line_bytes: u64,
    l1: Vec<Cache>,
    l2: Vec<Cache>,
    /// `l2_channels` servers per simulated XCD.
    l2_ch: Vec<Server>,
    channels: usize,
    mall: FifoCache,
    mall_srv: Server,
    hbm: Server,
    l1_lat: f64,
    l2_lat: f64,
    mall_lat: f64,
    hbm_lat: f64,
    hbm_loaded_lat: f64,
    store_ack: f64,
    pub report: MemoryReport,
    hbm_requests: u64,
    /// Per load instruction (program slot), the share of a line it loads from HBM that this
    /// XCD fetches itself; the other XCDs that load the same line in the same round fetch
    /// the rest (see `census`). Slots past the end: 1.
    shares: Vec<f64>,
    load_latency: f64,
}

/// The part of the GPU one simulation stands for: its CUs and XCDs, and its shares of what
/// the whole GPU shares.
#[derive(Clone, Debug)]
pub(crate) struct Scope {
    /// CUs simulated (CU `c` is on XCD `c / cus_per_xcd`).
    pub cus: usize,
    /// XCDs simulated.
    pub xcds: usize,
    /// The simulated CUs' share of the CUs active GPU-wide: of the MALL's and HBM's
    /// bandwidth, and of the MALL's capacity.
    pub gpu_share: f64,
    /// Their share of the CUs active on their XCD: of each L2 channel's bandwidth.
    pub l2_share: f64,
    /// Per load instruction (program slot), the share of the HBM traffic of the lines it
    /// loads that the simulated XCD fetches itself (see `census`); none: all of it.
    pub shares: Vec<f64>,
}

/// What a vector-memory access does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    Load,
    Store,
    Atomic,
}

impl MemSystem {
    /// The hierarchy of the CUs `scope` describes, at `clock_ghz`.
    pub(crate) fn new(p: &Params, clock_ghz: f64, scope: &Scope) -> MemSystem {
        let Scope {
            cus,
            xcds,
            gpu_share,
            l2_share,
            ..
        } = *scope;
        let v = &p.vmem;
        let line = v.l1_line_bytes.positive();
        let channels = v.l2_channels.positive().get() as usize;
        let l2_lines = v.l2_bytes.count() / line;
        let ways = v.l2_ways.positive();
        let per_cycle = |gbs: f64| gbs / clock_ghz;
        let ns = |ns: f64| ns * clock_ghz;
        MemSystem {
            line_shift: line.trailing_zeros(),
            line_bytes: line.get(),
            l1: (0..cus)
                .map(|_| Cache::new(v.l1_bytes.count(), line, v.l1_sets.count()))
                .collect(),
            l2: (0..xcds)
                .map(|_| Cache::new(v.l2_bytes.count(), line, (l2_lines / ways).max(1)).hashed())
                .collect(),
            l2_ch: (0..xcds * channels)
                .map(|_| Server::new(v.l2_channel_bytes_per_cycle.get() * l2_share))
                .collect(),
            channels,
            mall: FifoCache::new(((v.mall_bytes.get() * gpu_share) as u64 / line).max(1)),
            mall_srv: Server::new(per_cycle(v.mall_gbs.get()) * gpu_share),
            hbm: Server::new(per_cycle(v.hbm_gbs.get()) * gpu_share)
                .with_window(ns(v.hbm_load_window_ns.get())),
            l1_lat: v.l1_hit_latency_cycles.get(),
            l2_lat: v.l2_hit_latency_cycles.get(),
            mall_lat: ns(v.mall_latency_ns.get()),
            hbm_lat: ns(v.hbm_latency_ns.get()),
            hbm_loaded_lat: ns(v.hbm_loaded_latency_ns.get()),
            store_ack: v.store_ack_latency_cycles.get(),
            report: MemoryReport::default(),
            hbm_requests: 0,
            shares: scope.shares.iter().map(|s| s.clamp(1e-3, 1.0)).collect(),
            load_latency: 0.0,
        }
    }

    /// log2 of the line size.
    pub(crate) fn line_shift(&self) -> u32 {
        self.line_shift
    }

    /// The share of the HBM traffic of load instruction `slot` that the simulated XCD
    /// fetches itself.
    pub(crate) fn share(&self, slot: usize) -> f64 {
        self.shares.get(slot).copied().unwrap_or(1.0)
    }

    /// One line of an access by CU `cu` on XCD `xcd` that leaves the CU at `t` (cycles);
    /// returns when its data (or acknowledgement) is back. A load's HBM fetch costs `share`
    /// of the line's transfer (see [`share`](Self::share)).
    pub(crate) fn line(
        &mut self,
        cu: usize,
        xcd: usize,
        line: u64,
        t: f64,
        kind: Access,
        share: f64,
    ) -> f64 {
        let bytes = self.line_bytes;
        let mut l1_slot = None;
        if kind == Access::Load {
            self.report.l1_requests += 1;
            let (hit, slot) = self.l1[cu].lookup(line);
            if hit {
                self.report.l1_hits += 1;
                return (t + self.l1_lat).max(self.l1[cu].ready(slot));
            }
            l1_slot = Some(slot);
        }
        // The L2 channel of this line: lines interleave over the channels through an XOR
        // hash of the line address, so power-of-two strides spread.
        let ch = xcd * self.channels + (fold_hash(line) % self.channels as u64) as usize;
        let t2 = self.l2_ch[ch].serve(t, bytes);
        self.report.l2_requests += 1;
        let (l2_hit, l2_slot) = self.l2[xcd].lookup(line);
        match kind {
            Access::Store => {
                // Write-back L2: the line reaches HBM later; its bandwidth is taken now.
                if !l2_hit {
                    self.hbm_traffic(t2, bytes, 1.0);
                    self.l2[xcd].fill(l2_slot, t2);
                } else {
                    self.report.l2_hits += 1;
                }
                return t2 + self.store_ack;
            }
            Access::Atomic => {
                if l2_hit {
                    self.report.l2_hits += 1;
                } else {
                    self.hbm_traffic(t2, bytes, 1.0);
                    self.l2[xcd].fill(l2_slot, t2 + self.l2_lat);
                }
                return t2 + self.l2_lat;
            }
            Access::Load => {}
        }
        let done = if l2_hit {
            self.report.l2_hits += 1;
            (t2 + self.l2_lat).max(self.l2[xcd].ready(l2_slot))
        } else {
            let t3 = self.mall_srv.serve(t2, bytes);
            self.report.mall_requests += 1;
            let done = match self.mall.lookup(line) {
                Some(ready) => {
                    self.report.mall_hits += 1;
                    (t3 + self.l2_lat + self.mall_lat).max(ready)
                }
                None => {
                    let t4 = self.hbm_traffic(t3, bytes, share);
                    // DRAM latency grows with its load before its queue does (bank and
                    // bus turnaround conflicts): the loaded part scales with utilization.
                    let hbm = self.hbm_lat + self.hbm_loaded_lat * self.hbm.utilization();
                    let done = t4 + self.l2_lat + self.mall_lat + hbm;
                    self.mall.fill(line, done);
                    done
                }
            };
            self.l2[xcd].fill(l2_slot, done);
            done
        };
        if let Some(slot) = l1_slot {
            self.l1[cu].fill(slot, done);
        }
        done
    }

    /// When HBM has served every byte queued for it so far (the last write-back included).
    pub(crate) fn hbm_drained(&self) -> f64 {
        self.hbm.free_at
    }

    /// Notes a load instruction whose data took `cycles` from issue.
    pub(crate) fn note_load(&mut self, cycles: f64) {
        self.report.loads += 1;
        self.load_latency += cycles;
    }

    fn hbm_traffic(&mut self, t: f64, bytes: u64, part: f64) -> f64 {
        self.hbm_requests += 1;
        self.hbm.serve_part(t, bytes, part)
    }

    /// The report with the queueing mean filled in.
    pub(crate) fn finish_report(&self) -> MemoryReport {
        let mut r = self.report.clone();
        r.hbm_bytes = self.hbm.bytes.round() as u64;
        r.hbm_mean_queue_cycles = if self.hbm_requests > 0 {
            self.hbm.waited / self.hbm_requests as f64
        } else {
            0.0
        };
        r.mean_load_latency_cycles = if r.loads > 0 {
            self.load_latency / r.loads as f64
        } else {
            0.0
        };
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_cache_hits_evicts_least_recent() {
        // 4 lines, 1 set: fully associative.
        let line = NonZeroU64::new(128).unwrap();
        let mut c = Cache::new(4 * 128, line, 1);
        for l in 0..4 {
            assert!(!c.access(l));
        }
        assert!(c.access(0), "still there");
        assert!(!c.access(4), "evicts line 1, the least recent");
        assert!(c.access(0) && c.access(2) && c.access(3) && c.access(4));
        assert!(!c.access(1));
        // Sets split the lines by line number.
        let mut s = Cache::new(4 * 128, line, 4);
        assert!(!s.access(0) && !s.access(4), "same set, one way each");
        assert!(!s.access(0), "line 4 evicted line 0");
    }

    #[test]
    fn server_utilization_follows_the_recent_load() {
        let mut s = Server::new(1.0).with_window(100.0);
        assert_eq!(s.utilization(), 0.0);
        // Half busy for a long time: 50 bytes every 100 cycles.
        for i in 0..100 {
            s.serve(i as f64 * 100.0, 50);
        }
        let u = s.utilization();
        assert!((0.4..0.9).contains(&u), "{u}");
        // Long idle: the load decays away.
        s.serve(1e6, 1);
        assert!(s.utilization() < 0.02, "{}", s.utilization());
    }

    #[test]
    fn servers_queue_bytes_in_order() {
        let mut s = Server::new(2.0);
        assert_eq!(s.serve(0.0, 128), 64.0);
        assert_eq!(s.serve(10.0, 128), 128.0, "waits for the first transfer");
        assert_eq!(s.serve(1000.0, 2), 1001.0, "idle server starts at arrival");
        assert_eq!(s.bytes, 258.0);
    }

    /// `cus` CUs of one XCD, standing for the whole GPU.
    fn one_xcd(cus: usize) -> Scope {
        Scope {
            cus,
            xcds: 1,
            gpu_share: 1.0,
            l2_share: 1.0,
            shares: Vec::new(),
        }
    }

    #[test]
    fn hierarchy_latency_by_level_and_reuse() {
        let p = Params::mi355x();
        let mut m = MemSystem::new(&p, 2.0, &one_xcd(2));
        let first = m.line(0, 0, 7, 0.0, Access::Load, 1.0);
        let l1 = m.line(0, 0, 7, 10_000.0, Access::Load, 1.0) - 10_000.0;
        let l2 = m.line(1, 0, 7, 20_000.0, Access::Load, 1.0) - 20_000.0;
        assert_eq!(l1, p.vmem.l1_hit_latency_cycles.get());
        assert!(l2 > l1 && l2 < first, "{l1} {l2} {first}");
        assert_eq!((m.report.l1_hits, m.report.l2_hits), (1, 1));
        assert_eq!(m.finish_report().hbm_bytes, 128);
    }

    #[test]
    fn a_hit_on_a_line_in_flight_waits_for_its_fill() {
        let p = Params::mi355x();
        let mut m = MemSystem::new(&p, 2.0, &one_xcd(2));
        let first = m.line(0, 0, 7, 0.0, Access::Load, 1.0);
        // Another CU asks for the line 10 cycles later: an L2 hit, but the data is still on
        // its way from HBM.
        let second = m.line(1, 0, 7, 10.0, Access::Load, 1.0);
        assert_eq!(m.report.l2_hits, 1);
        assert!(second >= first, "{second} < {first}");
        // The same CU again: an L1 hit that also waits.
        let third = m.line(0, 0, 7, 20.0, Access::Load, 1.0);
        assert_eq!(m.report.l1_hits, 1);
        assert!(third >= first, "{third} < {first}");
        // Once the data is there, hits take their own latency.
        let late = m.line(1, 0, 7, 1e6, Access::Load, 1.0) - 1e6;
        assert_eq!(late, p.vmem.l1_hit_latency_cycles.get());
    }

    #[test]
    fn power_of_two_strides_spread_over_the_l2_channels() {
        // Rows of a row-major matrix 4 KiB apart (32 lines): all on channel 0 by the low bits.
        for stride in [32u64, 64, 128, 1024] {
            let channels: std::collections::BTreeSet<u64> =
                (0..64).map(|r| fold_hash(r * stride) % 16).collect();
            assert_eq!(channels.len(), 16, "stride {stride}: {channels:?}");
        }
    }

    #[test]
    fn probed_lines_are_distinct_and_ascending() {
        let mut p = tilegen_emu::exec::interp::Probe::default().vmem;
        p.bytes = 16;
        // Lanes 0-2 descending, lane 3 straddles lines 1 and 2 (then 2 and 3), lane 5 is
        // not global.
        for (l, a) in [(0, 300u64), (1, 130), (2, 0), (3, 250), (5, 1000)] {
            p.addr[l] = a;
        }
        p.global = 0b1111;
        let mut out = [0u64; 128];
        let n = probed_lines(&p, 7, &mut out);
        assert_eq!(&out[..n], &[0, 1, 2]);
        p.addr[3] = 380;
        let n = probed_lines(&p, 7, &mut out);
        assert_eq!(&out[..n], &[0, 1, 2, 3]);
    }

    #[test]
    fn fifo_cache_capacity() {
        let mut f = FifoCache::new(2);
        assert!(!f.access(1) && !f.access(2) && f.access(1));
        assert!(!f.access(3));
        assert!(!f.access(1), "1 was the oldest");
    }
}
