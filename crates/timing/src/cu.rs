//! One compute unit: its SIMDs, the waves resident on them, the issue arbiter and the pipes.
//!
//! Every `slot_cycles` clocks the sequencer serves one SIMD (SIMD `s` at clocks `t` with
//! `t % slot == s`). In that slot it looks at the SIMD's waves oldest first (a higher
//! `s_setprio` first) and issues at most one instruction per wave and per category
//! (VALU/MFMA, VMEM, SALU/SMEM, LDS, branch/message; waitcnt, nop, setprio, sleep and barrier
//! are the sequencer's own). A wave can issue when its previous instruction's slot has
//! passed, the registers it reads are ready (per-register ready times: VALU latency, MFMA
//! passes plus the hazard wait states, SALU latency), its `s_waitcnt` is satisfied by the
//! modelled completion times of its outstanding memory operations, and the pipe it needs is
//! free (VALU and matrix core per SIMD, one LDS port per SIMD pair, the CU's texture
//! addresser: see [`crate::units`]). An issued instruction executes at once, functionally,
//! through [`interp::step`], so addresses, branches and EXEC are the real ones; the unit that
//! serves it then books it.

use std::collections::VecDeque;

use tilegen_emu::exec::fault::{Fault, FaultKind};
use tilegen_emu::exec::interp::{self, Env, Probe};
use tilegen_emu::exec::launch::{Workgroup, prepare_workgroup, wave_fault};
use tilegen_emu::exec::memory::{DeviceMemory, Lds};
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::sched::Step;
use tilegen_emu::exec::stats::{Counter, Stats};
use tilegen_emu::exec::wave::Wave;

use crate::TimingError;
use crate::inst::{Category, InstInfo, REGS, ReadKind, Special, UnitKind, VECTOR_REGS};
use crate::mem::MemSystem;
use crate::reason::{PerReason, Reason};
use crate::trace::{InstSlice, TraceBuf};
use crate::units::{Booking, Counted, Op, Sequencer, Shared, Units};

/// Everything the CUs share: the kernel, device memory, the executor's counters, the
/// instruction facts, the sequencer's parameters, the units a CU starts with, the memory
/// hierarchy.
pub(crate) struct Ctx<'a> {
    pub prog: &'a Program,
    pub device: &'a DeviceMemory,
    pub stats: Stats,
    pub counts: Vec<u64>,
    pub probe: Probe,
    pub infos: &'a [Option<InstInfo>],
    pub seq: &'a Sequencer,
    pub units: &'a Units,
    pub mem: MemSystem,
    pub budget: u64,
}

/// Timing state of one wave.
pub(crate) struct WaveTiming {
    simd: usize,
    age: u64,
    prio: u8,
    next_issue: u64,
    next_reason: Reason,
    /// Ready time of each register for plain reads.
    ready: Vec<u64>,
    /// Ready time of each vector register for MFMA SrcA/B reads and SrcC reads.
    mfma_ab: Vec<u64>,
    srcc: Vec<u64>,
    from_mfma: Vec<bool>,
    /// Completion times of outstanding vector-memory operations (in order, non-decreasing).
    vm: VecDeque<u64>,
    /// Completion times of outstanding LDS and SMEM operations.
    lgkm: Vec<u64>,
    last_lds: u64,
    /// The first cycle an MFMA may issue after the wave's last VALU write of EXEC.
    exec_for_mfma: u64,
    at_barrier: bool,
    done: bool,
    /// Cached (ready time, reason) of the wave's own conditions for its next instruction.
    own: Option<(u64, Reason)>,
    /// Cached program slot of the wave's PC.
    slot: Option<usize>,
    /// Trace: end of the last slice and the reason it was last seen blocked for.
    last_end: u64,
    blocked: Reason,
    pub trace_id: u32,
}

impl WaveTiming {
    fn new(simd: usize, age: u64, start: u64, trace_id: u32) -> WaveTiming {
        WaveTiming {
            simd,
            age,
            prio: 0,
            next_issue: start,
            next_reason: Reason::Idle,
            ready: vec![0; REGS],
            mfma_ab: vec![0; VECTOR_REGS as usize],
            srcc: vec![0; VECTOR_REGS as usize],
            from_mfma: vec![false; VECTOR_REGS as usize],
            vm: VecDeque::new(),
            lgkm: Vec::new(),
            last_lds: 0,
            exec_for_mfma: 0,
            at_barrier: false,
            done: false,
            own: None,
            slot: None,
            last_end: start,
            blocked: Reason::Idle,
            trace_id,
        }
    }

    /// When the wave's own conditions allow its next instruction `info`, and what binds.
    fn own_ready(&self, info: &InstInfo, k: &Sequencer) -> (u64, Reason) {
        let mut best = (self.next_issue, self.next_reason);
        let mut bump = |t: u64, r: Reason| {
            if t > best.0 {
                best = (t, r);
            }
        };
        match info.special {
            Special::Waitcnt { vm, lgkm } => {
                let (vm, lgkm) = (vm as usize, lgkm as usize);
                if self.vm.len() > vm {
                    bump(self.vm[self.vm.len() - vm - 1], Reason::WaitcntVm);
                }
                if self.lgkm.len() > lgkm {
                    bump(kth_largest(&self.lgkm, lgkm), Reason::WaitcntLgkm);
                }
            }
            Special::None | Special::End => {}
            _ => {}
        }
        match info.unit {
            UnitKind::Vmem if self.vm.len() >= k.max_vm => {
                bump(self.vm[self.vm.len() - k.max_vm], Reason::WaitcntVm)
            }
            UnitKind::Lds | UnitKind::Smem if self.lgkm.len() >= k.max_lgkm => {
                bump(kth_largest(&self.lgkm, k.max_lgkm - 1), Reason::WaitcntLgkm)
            }
            _ => {}
        }
        for r in &info.reads {
            for reg in r.start as usize..(r.start + r.count) as usize {
                let (t, vec) = match r.kind {
                    ReadKind::Plain => (
                        self.ready.get(reg).copied().unwrap_or(0),
                        reg < VECTOR_REGS as usize,
                    ),
                    ReadKind::MfmaAb => (self.mfma_ab.get(reg).copied().unwrap_or(0), true),
                    ReadKind::MfmaC => (self.srcc.get(reg).copied().unwrap_or(0), true),
                };
                if t > best.0 {
                    let mfma = vec && self.from_mfma.get(reg).copied().unwrap_or(false);
                    best = (
                        t,
                        if mfma {
                            Reason::MfmaHazard
                        } else {
                            Reason::Dependency
                        },
                    );
                }
            }
        }
        // An MFMA after a VALU write of EXEC waits out its wait states.
        if info.unit == UnitKind::Mfma && self.exec_for_mfma > best.0 {
            best = (self.exec_for_mfma, Reason::Dependency);
        }
        best
    }

    fn prune(&mut self, t: u64) {
        while self.vm.front().is_some_and(|&c| c <= t) {
            self.vm.pop_front();
        }
        self.lgkm.retain(|&c| c > t);
    }

    /// Takes what booking `info` gave the wave: its registers' ready times and what its
    /// counters wait for.
    fn take(&mut self, info: &InstInfo, b: &Booking) {
        if let Some(w) = b.writes {
            for &(start, count) in &info.writes {
                for r in start as usize..(start + count) as usize {
                    if r < REGS {
                        self.ready[r] = w.plain;
                    }
                    if let Some(v) = w.vector
                        && r < VECTOR_REGS as usize
                    {
                        self.mfma_ab[r] = v.mfma_ab;
                        self.srcc[r] = v.srcc;
                        self.from_mfma[r] = v.from_mfma;
                    }
                }
            }
        }
        match b.counted {
            // Vector memory counts down in order: a completion waits for the ones before.
            Some(Counted::Vm(done)) => {
                let done = done.max(self.vm.back().copied().unwrap_or(0));
                self.vm.push_back(done);
            }
            // LDS accesses return in order.
            Some(Counted::Lds(done)) => {
                let done = done.max(self.last_lds);
                self.last_lds = done;
                self.lgkm.push(done);
            }
            Some(Counted::Smem(done)) => self.lgkm.push(done),
            None => {}
        }
        if let Some(t) = b.exec_for_mfma {
            self.exec_for_mfma = self.exec_for_mfma.max(t);
        }
    }
}

/// The `k`-th largest of `v` (`k` = 0: the largest); `v.len() > k`. The lgkm lists hold at
/// most a counter's worth of entries, so they are sorted in a stack copy.
fn kth_largest(v: &[u64], k: usize) -> u64 {
    let mut buf = [0u64; 32];
    if v.len() <= buf.len() {
        let s = &mut buf[..v.len()];
        s.copy_from_slice(v);
        s.sort_unstable();
        s[s.len() - 1 - k]
    } else {
        let mut c = v.to_vec();
        c.sort_unstable();
        c[c.len() - 1 - k]
    }
}

/// A resident workgroup.
pub(crate) struct Wg {
    pub index: u64,
    pub id: [u32; 3],
    pub waves: Vec<Wave>,
    pub timing: Vec<WaveTiming>,
    pub lds: Lds,
    live: usize,
    arrived: usize,
    /// Matrix-core busy cycles of this workgroup's MFMAs.
    pub mfma_cycles: u64,
}

/// A finished workgroup.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Finished {
    pub end: u64,
    pub mfma_cycles: u64,
}

/// One CU of the simulation.
pub(crate) struct Cu {
    /// Index among the simulated CUs (its L1).
    pub sim_index: usize,
    /// Index of its XCD among the simulated XCDs (its L2).
    pub xcd: usize,
    pub wgs: Vec<Option<Wg>>,
    pool: Vec<Vec<Wave>>,
    rr_simd: usize,
    /// The units that serve the SIMDs' instructions.
    pub units: Units,
    /// Cycles by reason, per SIMD.
    pub stalls: Vec<PerReason<u64>>,
    acct_until: Vec<u64>,
    pending: Vec<Reason>,
    pub trace: Option<TraceBuf>,
    pub finished: Vec<Finished>,
    /// Time of the pending event in the global queue.
    pub scheduled: Option<u64>,
    cands: Vec<Cand>,
    /// Earliest ready time and its reason per SIMD (see `next_event`).
    simd_min: Vec<(u64, Reason)>,
    /// Something shared changed since `simd_min` was computed.
    dirty: bool,
}

type Cand = (u8, u64, usize, usize);

/// What executing one instruction told the model.
struct Executed {
    step: Step,
    /// Its address, and the wave's next one.
    pc: u64,
    new_pc: u64,
    /// Its program slot (`usize::MAX` when the PC is outside the program).
    slot: usize,
    /// Lanes EXEC enabled before it ran.
    lanes: u64,
    /// Extra LDS passes its bank conflicts took.
    lds_conflicts: u64,
}

/// Executes wave `w` of `wg`'s next instruction through the emulator's interpreter, with the
/// probe attached; a fault (or the wave's instruction budget spent) names the instruction.
fn execute(wg: &mut Wg, w: usize, ctx: &mut Ctx<'_>) -> Result<Executed, TimingError> {
    let wave = &mut wg.waves[w];
    let pc = wave.pc;
    let fault = |kind: FaultKind| Fault {
        kernel: ctx.prog.name().to_string(),
        workgroup: wg.id,
        wave: w as u32,
        pc,
        inst: ctx.prog.disassemble(pc),
        kind: Box::new(kind),
    };
    if wave.executed >= ctx.budget {
        let e = FaultKind::Budget { budget: ctx.budget };
        return Err(fault(e).into());
    }
    wave.executed += 1;
    let slot = ctx.prog.slot(pc).map(|(s, _)| s).unwrap_or(usize::MAX);
    let lanes = wave.exec().count_ones() as u64;
    ctx.probe.vmem.valid = false;
    let conflicts_before = ctx.stats[Counter::LdsBankConflictCycles];
    let mut env = Env {
        prog: ctx.prog,
        mem: ctx.device,
        stats: &mut ctx.stats,
        counts: &mut ctx.counts,
        probe: Some(&mut ctx.probe),
    };
    let step = interp::step(&mut env, wave, &mut wg.lds).map_err(fault)?;
    Ok(Executed {
        step,
        pc,
        new_pc: wave.pc,
        slot,
        lanes,
        lds_conflicts: ctx.stats[Counter::LdsBankConflictCycles] - conflicts_before,
    })
}

impl Cu {
    /// CU `sim_index` of the simulation, on simulated XCD `xcd`, with room for `capacity`
    /// workgroups and idle `units`.
    pub(crate) fn new(
        sim_index: usize,
        xcd: usize,
        capacity: usize,
        k: &Sequencer,
        units: &Units,
    ) -> Cu {
        Cu {
            sim_index,
            xcd,
            wgs: (0..capacity).map(|_| None).collect(),
            pool: Vec::new(),
            rr_simd: 0,
            units: units.clone(),
            stalls: vec![PerReason::default(); k.simds],
            acct_until: vec![0; k.simds],
            pending: vec![Reason::Idle; k.simds],
            trace: None,
            finished: Vec::new(),
            scheduled: None,
            cands: Vec::new(),
            simd_min: vec![(u64::MAX, Reason::Idle); k.simds],
            dirty: true,
        }
    }

    /// Whether a workgroup slot is free.
    pub(crate) fn has_room(&self) -> bool {
        self.wgs.iter().any(|w| w.is_none())
    }

    /// Whether nothing is resident.
    pub(crate) fn is_empty(&self) -> bool {
        self.wgs.iter().all(|w| w.is_none())
    }

    /// Places workgroup `wg` whose first instruction may issue at `start`.
    pub(crate) fn dispatch(
        &mut self,
        wg: Workgroup,
        start: u64,
        age: &mut u64,
        prog: &Program,
        d: &tilegen_emu::exec::setup::DispatchState,
        k: &Sequencer,
    ) -> Result<(), TimingError> {
        let slot = self.wgs.iter().position(|w| w.is_none()).ok_or_else(|| {
            let kind = FaultKind::Launch("no free workgroup slot".into());
            wave_fault(prog, wg.id, 0, prog.entry(), kind)
        })?;
        let n_waves = wg.waves as usize;
        let mut waves = self.pool.pop().unwrap_or_default();
        let lds = prepare_workgroup(prog, d, &wg, &mut waves)?;
        waves.truncate(n_waves);
        let mut timing = Vec::with_capacity(n_waves);
        for w in 0..n_waves {
            let simd = (self.rr_simd + w) % k.simds;
            timing.push(WaveTiming::new(simd, *age, start, w as u32));
            *age += 1;
        }
        self.rr_simd = (self.rr_simd + n_waves) % k.simds;
        if let Some(t) = self.trace.as_mut() {
            for (w, wt) in timing.iter_mut().enumerate() {
                wt.trace_id = t.new_wave(wg.index, w as u32, wt.simd);
            }
        }
        self.dirty = true;
        self.wgs[slot] = Some(Wg {
            index: wg.index,
            id: wg.id,
            waves,
            timing,
            lds,
            live: n_waves,
            arrived: 0,
            mfma_cycles: 0,
        });
        Ok(())
    }

    /// When wave (`g`, `w`) can issue its next instruction given the pipes now, and why not
    /// earlier; `None` if it is done.
    fn ready_of(
        &mut self,
        g: usize,
        w: usize,
        now: u64,
        ctx: &Ctx<'_>,
    ) -> Option<(u64, Reason, usize)> {
        let wg = self.wgs[g].as_mut()?;
        let wt = &mut wg.timing[w];
        if wt.done {
            return None;
        }
        let slot = match wt.slot {
            Some(s) => s,
            None => {
                let pc = wg.waves[w].pc;
                let s = ctx.prog.slot(pc).map(|(s, _)| s).unwrap_or(usize::MAX);
                wt.slot = Some(s);
                s
            }
        };
        if wt.at_barrier {
            wt.blocked = Reason::Barrier;
            return Some((u64::MAX, Reason::Barrier, slot));
        }
        let info = match ctx.infos.get(slot).and_then(|i| i.as_ref()) {
            Some(i) => i,
            // An undecodable instruction: issue it, so the executor reports the fault.
            None => return Some((wt.next_issue, wt.next_reason, slot)),
        };
        let own = match wt.own {
            Some(o) => o,
            None => {
                let o = wt.own_ready(info, ctx.seq);
                wt.own = Some(o);
                o
            }
        };
        let pipe = self.units.ready(info.unit, wt.simd);
        let (r, why) = if pipe > own.0 {
            (pipe, Reason::PipeBusy)
        } else {
            (own.0, own.1)
        };
        if r > now {
            wt.blocked = why;
        }
        Some((r, why, slot))
    }

    /// Processes the issue slot at `t` (of SIMD `t % slot`). Returns the time of the CU's
    /// next event (`None` when nothing is resident).
    pub(crate) fn step(&mut self, t: u64, ctx: &mut Ctx<'_>) -> Result<Option<u64>, TimingError> {
        let k = ctx.seq;
        let s = (t % k.slot) as usize;
        if s < k.simds {
            self.account(s, t, k.slot);
            let mut cands = std::mem::take(&mut self.cands);
            cands.clear();
            for (g, wg) in self.wgs.iter().enumerate() {
                if let Some(wg) = wg {
                    for (w, wt) in wg.timing.iter().enumerate() {
                        if wt.simd == s && !wt.done {
                            cands.push((wt.prio, wt.age, g, w));
                        }
                    }
                }
            }
            cands.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
            let mut used = [false; Category::COUNT];
            let mut issued = false;
            let mut best: Option<(u64, Reason)> = None;
            for &(_, _, g, w) in &cands {
                let Some((ready, reason, slot)) = self.ready_of(g, w, t, ctx) else {
                    continue;
                };
                if ready > t {
                    if best.is_none_or(|b| ready < b.0) {
                        best = Some((ready, reason));
                    }
                    continue;
                }
                let cat = ctx
                    .infos
                    .get(slot)
                    .and_then(|i| i.as_ref())
                    .and_then(|i| i.category);
                if let Some(c) = cat {
                    if used[c as usize] {
                        if best.is_none() {
                            best = Some((t + k.slot, Reason::IssueConflict));
                        }
                        if let Some(wg) = self.wgs[g].as_mut() {
                            wg.timing[w].blocked = Reason::IssueConflict;
                        }
                        continue;
                    }
                    used[c as usize] = true;
                }
                self.issue(g, w, t, ctx)?;
                issued = true;
            }
            self.cands = cands;
            let outcome = if issued {
                Reason::Issued
            } else {
                best.map_or(Reason::Idle, |b| b.1)
            };
            self.stalls[s][outcome] += k.slot;
            self.acct_until[s] = t + k.slot;
        }
        let simd = (s < k.simds).then_some(s);
        Ok(self.next_event(t, simd, ctx))
    }

    /// Accounts SIMD `s`'s unaccounted slots before `t` to its pending reason.
    fn account(&mut self, s: usize, t: u64, slot: u64) {
        if t > self.acct_until[s] {
            let n = (t - self.acct_until[s]).div_ceil(slot) * slot;
            self.stalls[s][self.pending[s]] += n;
            self.acct_until[s] += n;
        }
    }

    /// Accounts every SIMD up to `t` (the end of the simulation).
    pub(crate) fn close(&mut self, t: u64, slot: u64) {
        for s in 0..self.stalls.len() {
            if self.is_empty() {
                self.pending[s] = Reason::Idle;
            }
            self.account(s, t, slot);
        }
    }

    /// The CU's next event after `t`. Only SIMD `simd`'s waves are looked at again unless
    /// something shared changed (an LDS port, the addresser, a barrier, the resident set):
    /// the other SIMDs' earliest ready times are absolute and stay valid.
    fn next_event(&mut self, t: u64, simd: Option<usize>, ctx: &Ctx<'_>) -> Option<u64> {
        let k = ctx.seq;
        let all = std::mem::take(&mut self.dirty) || simd.is_none();
        for (s, e) in self.simd_min.iter_mut().enumerate() {
            if all || Some(s) == simd {
                *e = (u64::MAX, Reason::Idle);
            }
        }
        for g in 0..self.wgs.len() {
            let n = self.wgs[g].as_ref().map_or(0, |wg| wg.timing.len());
            for w in 0..n {
                let s = self.wgs[g].as_ref().map_or(0, |wg| wg.timing[w].simd);
                if !all && Some(s) != simd {
                    continue;
                }
                if let Some((r, reason, _)) = self.ready_of(g, w, t + 1, ctx) {
                    let e = &mut self.simd_min[s];
                    if r < e.0 || e.1 == Reason::Idle {
                        *e = (r, reason);
                    }
                }
            }
        }
        let mut next = u64::MAX;
        for (s, &(r, reason)) in self.simd_min.iter().enumerate() {
            self.pending[s] = reason;
            if r != u64::MAX {
                next = next.min(k.slot_at_or_after(s, r.max(t + 1)));
            }
        }
        (next != u64::MAX).then_some(next)
    }

    /// Issues wave (`g`, `w`)'s next instruction at `t`: executes it, has the unit that
    /// serves it book it, and applies the sequencer's own rules.
    fn issue(&mut self, g: usize, w: usize, t: u64, ctx: &mut Ctx<'_>) -> Result<(), TimingError> {
        let k = ctx.seq;
        let Some(wg) = self.wgs[g].as_mut() else {
            return Ok(());
        };
        let Executed {
            step,
            pc,
            new_pc,
            slot,
            lanes,
            lds_conflicts,
        } = execute(wg, w, ctx)?;
        let Some(info) = ctx.infos.get(slot).and_then(|i| i.as_ref()) else {
            return Ok(());
        };
        let wt = &mut wg.timing[w];
        wt.prune(t);
        wt.own = None;
        wt.slot = None;
        let s = wt.simd;
        let op = Op {
            info,
            simd: s,
            t,
            lanes,
            lds_conflicts,
            taken: new_pc != pc + info.size as u64,
            ends: step == Step::End,
            slot,
        };
        let mut shared = Shared {
            mem: &mut ctx.mem,
            probe: &ctx.probe.vmem,
            cu: self.sim_index,
            xcd: self.xcd,
        };
        let booking = self.units.book(&op, &mut shared);
        wt.take(info, &booking);
        wg.mfma_cycles += booking.mfma_cycles;
        if info.unit == UnitKind::Mfma
            && let Some(tr) = self.trace.as_mut()
        {
            tr.pipe(s, t, booking.mfma_cycles, info.mnemonic);
        }
        let (mut next, mut next_reason) = booking.next.unwrap_or((t + k.slot, Reason::Dependency));
        match info.special {
            Special::Nop(n) => {
                next = t + k.slot * (n as u64 + 1);
                next_reason = Reason::Nop;
            }
            Special::Sleep(n) => {
                next = t + (k.sleep_unit * n as u64).max(k.slot);
                next_reason = Reason::Sleep;
            }
            Special::Setprio(p) => wt.prio = p,
            _ => {}
        }
        wt.next_issue = next;
        wt.next_reason = next_reason;
        if let Some(tr) = self.trace.as_mut() {
            if t > wt.last_end {
                tr.stall(wt.trace_id, s, wt.last_end, t, wt.blocked);
            }
            let busy_until = (t + k.slot).max(t + 1).min(next.max(t + 1));
            tr.inst(&InstSlice {
                tid: wt.trace_id,
                simd: s,
                ts: t,
                dur: busy_until - t,
                name: info.mnemonic,
                class: info.class.name(),
                pc: pc - ctx.prog.entry(),
            });
            wt.last_end = busy_until;
        }
        if matches!(info.unit, UnitKind::Lds | UnitKind::Vmem)
            || matches!(step, Step::Barrier | Step::End)
        {
            self.dirty = true;
        }
        match step {
            Step::Barrier => {
                wt.at_barrier = true;
                wg.arrived += 1;
                if wg.arrived >= wg.live {
                    self.release_barrier(g, t + k.barrier_latency);
                }
            }
            Step::End => {
                wt.done = true;
                wg.live -= 1;
                if wg.live == 0 {
                    self.finish(g, t);
                } else if wg.arrived > 0 && wg.arrived >= wg.live {
                    self.release_barrier(g, t + k.barrier_latency);
                }
            }
            Step::Yield | Step::Continue => {}
        }
        Ok(())
    }

    fn release_barrier(&mut self, g: usize, at: u64) {
        let Some(wg) = self.wgs[g].as_mut() else {
            return;
        };
        wg.arrived = 0;
        for wt in wg.timing.iter_mut().filter(|wt| wt.at_barrier) {
            wt.at_barrier = false;
            wt.blocked = Reason::Barrier;
            if at > wt.next_issue {
                wt.next_issue = at;
                wt.next_reason = Reason::Barrier;
            }
            wt.own = None;
        }
        if let Some(tr) = self.trace.as_mut() {
            tr.barrier(wg.index, at);
        }
    }

    fn finish(&mut self, g: usize, t: u64) {
        if let Some(wg) = self.wgs[g].take() {
            self.finished.push(Finished {
                end: t,
                mfma_cycles: wg.mfma_cycles,
            });
            self.pool.push(wg.waves);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::params::Params;

    #[test]
    fn slots_rotate_over_simds() {
        let k = Sequencer::new(&Params::mi355x());
        assert_eq!(k.slot_at_or_after(0, 0), 0);
        assert_eq!(k.slot_at_or_after(1, 0), 1);
        assert_eq!(k.slot_at_or_after(0, 1), 4);
        assert_eq!(k.slot_at_or_after(3, 5), 7);
        assert_eq!(k.slot_at_or_after(2, 6), 6);
    }

    #[test]
    fn waitcnt_waits_for_the_right_completion() {
        let p = Params::mi355x();
        let k = Sequencer::new(&p);
        let mut wt = WaveTiming::new(0, 0, 0, 0);
        wt.vm.extend([100, 200, 300]);
        wt.lgkm.extend([50, 10, 30]);
        let mut info = crate::inst::tests_support::waitcnt(1, 0);
        assert_eq!(wt.own_ready(&info, &k), (200, Reason::WaitcntVm));
        info.special = Special::Waitcnt { vm: 63, lgkm: 1 };
        assert_eq!(wt.own_ready(&info, &k), (30, Reason::WaitcntLgkm));
        info.special = Special::Waitcnt { vm: 3, lgkm: 3 };
        assert_eq!(wt.own_ready(&info, &k), (0, Reason::Idle));
        wt.prune(150);
        assert_eq!(wt.vm.len(), 2);
        assert!(wt.lgkm.is_empty());
    }
}

/// Arbitration through the whole model on hand-encoded kernels.
#[cfg(test)]
mod arbitration {
    use tilegen_emu::exec::memory::DeviceMemory;
    use tilegen_emu::exec::program::Program;
    use tilegen_emu::exec::setup::KernelSetup;

    use crate::{Params, TimingLaunch, TimingOptions, predict};

    const VALU_INDEP: [u32; 4] = [0x6806_0501, 0x6808_0501, 0x680a_0501, 0x680c_0501]; // v3..v6 = v1 + v2
    const SALU: u32 = 0x808a_810a; // s_sub_u32 s10, s10, 1
    const ENDPGM: u32 = 0xbf81_0000;

    fn cycles(code: &[u32], waves: u32) -> u64 {
        let bytes: Vec<u8> = code.iter().flat_map(|w| w.to_le_bytes()).collect();
        let mut mem = DeviceMemory::new();
        let kd = [0u8; 64];
        let p =
            Program::load_code(&mut mem, "k", &bytes, KernelSetup::from_descriptor(&kd)).unwrap();
        let launch = TimingLaunch {
            grid: [1, 1, 1],
            block: [64 * waves, 1, 1],
            dynamic_lds: 0,
            kernarg: &[],
        };
        let r = predict(
            &mut mem,
            &p,
            &launch,
            &Params::mi355x(),
            &TimingOptions::default(),
        )
        .unwrap();
        r.cycles
    }

    #[test]
    fn one_valu_per_simd_slot_and_categories_issue_together() {
        let valu =
            |n: usize| -> Vec<u32> { (0..n).map(|i| VALU_INDEP[i % 4]).chain([ENDPGM]).collect() };
        let mixed = |n: usize| -> Vec<u32> {
            (0..n)
                .flat_map(|i| [VALU_INDEP[i % 4], SALU])
                .chain([ENDPGM])
                .collect()
        };
        // Cycles per extra 200 instructions (per wave), launch constants cancelled.
        let per = |code: &dyn Fn(usize) -> Vec<u32>, waves| {
            (cycles(&code(400), waves) - cycles(&code(200), waves)) as f64 / 200.0
        };
        let one = per(&valu, 4); // one wave per SIMD: one VALU per 4-cycle slot
        let two = per(&valu, 8); // two waves per SIMD share the VALU category
        let mix = per(&mixed, 8); // VALU of one wave issues with SALU of the other
        assert!((one - 4.0).abs() < 0.1, "{one}");
        assert!((two - 8.0).abs() < 0.2, "{two}");
        assert!(
            (mix - 8.0).abs() < 0.2,
            "{mix}: 2 instructions per wave per step"
        );
    }
}
