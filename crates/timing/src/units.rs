//! The units of a CU that serve instructions, behind one interface: when a SIMD may hand a
//! unit its next instruction ([`Unit::ready`]), and what booking an instruction on it gives the
//! wave that issued it ([`Unit::book`]).
//!
//! [`Valu`] and [`Mfma`] are per SIMD; [`LdsPorts`] has one port per pair of SIMDs;
//! [`Addresser`] (the texture addresser) is shared by the CU and books each line of an access
//! in the memory hierarchy ([`MemSystem`]); [`Salu`], [`Smem`] and [`Branch`] hold no state
//! between instructions. Each unit reads its own parameters when it is made ([`Units::new`]),
//! and a CU starts from a copy of the units the simulation made once. The sequencer's own
//! rules (issue slots, counters, barriers, `s_nop`, `s_sleep`) are in [`Sequencer`] and the
//! CU's issue loop.

use tilegen_emu::exec::interp::VmemProbe;

use crate::inst::{InstInfo, UnitKind};
use crate::mem::{Access, MemSystem, probed_lines};
use crate::params::Params;
use crate::reason::Reason;

/// One instruction at issue, as a unit sees it.
pub(crate) struct Op<'a> {
    /// Its timing facts.
    pub info: &'a InstInfo,
    /// The issuing SIMD.
    pub simd: usize,
    /// The issue cycle.
    pub t: u64,
    /// Lanes EXEC enabled when it issued.
    pub lanes: u64,
    /// Extra LDS passes its bank conflicts took (as the executor counted them).
    pub lds_conflicts: u64,
    /// A branch that was taken.
    pub taken: bool,
    /// The instruction ended the wave.
    pub ends: bool,
    /// Its program slot (the census's share of its HBM traffic is per slot).
    pub slot: usize,
}

/// What the units share: the memory hierarchy, and where the executor said a vector-memory
/// instruction went.
pub(crate) struct Shared<'a> {
    /// The memory hierarchy of the simulated CUs.
    pub mem: &'a mut MemSystem,
    /// The lanes of the last vector-memory instruction.
    pub probe: &'a VmemProbe,
    /// The CU's index among the simulated CUs (its L1).
    pub cu: usize,
    /// Its XCD among the simulated XCDs (its L2).
    pub xcd: usize,
}

/// When the registers an instruction writes are ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Ready {
    /// For reads by VALU, SALU and memory instructions.
    pub plain: u64,
    /// For reads by MFMAs, of vector registers (`None`: the instruction sets no such time).
    pub vector: Option<VectorReady>,
}

/// When a vector register is ready for an MFMA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct VectorReady {
    /// As SrcA or SrcB.
    pub mfma_ab: u64,
    /// As SrcC.
    pub srcc: u64,
    /// The value comes from an MFMA (a wait for it is an MFMA hazard).
    pub from_mfma: bool,
}

/// A completion a wave's counters count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counted {
    /// On vmcnt, which counts down in order.
    Vm(u64),
    /// On lgkmcnt, from the LDS: LDS accesses return in order.
    Lds(u64),
    /// On lgkmcnt, from scalar memory (in any order).
    Smem(u64),
}

/// What booking an instruction gives the wave that issued it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Booking {
    /// When the registers it writes are ready.
    pub writes: Option<Ready>,
    /// What its counters wait for.
    pub counted: Option<Counted>,
    /// The wave issues its next instruction no earlier than this, for this reason.
    pub next: Option<(u64, Reason)>,
    /// Matrix-core cycles it took.
    pub mfma_cycles: u64,
    /// Cycles the LDS port of the SIMD's pair is to take writing the data it returns (an
    /// LDS-DMA load).
    pub lds_write: u64,
    /// A VALU write of EXEC: the first cycle an MFMA of the wave may issue.
    pub exec_for_mfma: Option<u64>,
}

/// A unit of a CU.
pub(crate) trait Unit {
    /// The earliest cycle at which SIMD `simd` may hand the unit an instruction (0: the unit
    /// never holds one back).
    fn ready(&self, simd: usize) -> u64;

    /// Books `op`, which the unit serves, and returns what its wave waits for.
    fn book(&mut self, op: &Op<'_>, shared: &mut Shared<'_>) -> Booking;
}

/// The sequencer's parameters, in the units the issue loop uses.
#[derive(Clone, Debug)]
pub(crate) struct Sequencer {
    /// Clocks between two issue slots of one SIMD (one wait state).
    pub slot: u64,
    /// SIMDs per CU.
    pub simds: usize,
    /// Outstanding vector-memory operations a wave may have (vmcnt's largest value).
    pub max_vm: usize,
    /// Outstanding LDS and scalar-memory operations (lgkmcnt's largest value).
    pub max_lgkm: usize,
    /// Clocks from the last arrival at a barrier to its release.
    pub barrier_latency: u64,
    /// Clocks per unit of `s_sleep`.
    pub sleep_unit: u64,
    /// Clocks from a free workgroup slot to the workgroup's first instruction.
    pub dispatch: u64,
}

impl Sequencer {
    /// The sequencer of `p`.
    pub(crate) fn new(p: &Params) -> Sequencer {
        Sequencer {
            slot: p.issue.slot_cycles.positive().get(),
            simds: tilegen_arch::SIMDS_PER_CU as usize,
            max_vm: p.vmem.max_vmcnt.positive().get() as usize,
            max_lgkm: p.vmem.max_lgkmcnt.positive().get() as usize,
            barrier_latency: p.issue.barrier_latency_cycles.count(),
            sleep_unit: p.issue.sleep_cycles_per_unit.count(),
            dispatch: p.clock.workgroup_dispatch_cycles.count(),
        }
    }

    /// The first cycle at or after `t` at which SIMD `s` issues.
    pub(crate) fn slot_at_or_after(&self, s: usize, t: u64) -> u64 {
        let r = t % self.slot;
        let s = s as u64 % self.slot;
        if r <= s {
            t - r + s
        } else {
            t - r + self.slot + s
        }
    }
}

/// The vector ALU of each SIMD.
#[derive(Clone, Debug)]
pub(crate) struct Valu {
    /// When each SIMD's VALU is free.
    free: Vec<u64>,
    slot: u64,
    /// Issue-to-issue clocks of a dependent VALU chain.
    latency: u64,
    /// Clocks from a VALU write of a VGPR to an MFMA reading it.
    to_mfma: u64,
    /// Clocks from a VALU write of EXEC to any MFMA.
    exec_to_mfma: u64,
}

impl Valu {
    fn new(p: &Params, simds: usize) -> Valu {
        let slot = p.issue.slot_cycles.positive().get();
        Valu {
            free: vec![0; simds],
            slot,
            latency: p.valu.dependent_latency_cycles.count(),
            to_mfma: slot * (1 + p.valu.write_then_mfma_read_wait_states.count()),
            exec_to_mfma: slot * (1 + p.valu.exec_write_then_mfma_wait_states.count()),
        }
    }
}

impl Unit for Valu {
    fn ready(&self, simd: usize) -> u64 {
        self.free[simd]
    }

    fn book(&mut self, op: &Op<'_>, _: &mut Shared<'_>) -> Booking {
        let (t, busy) = (op.t, op.info.busy as u64);
        self.free[op.simd] = t + busy;
        let latency = self.latency.max(busy + self.slot);
        let mfma = t + latency.max(self.to_mfma);
        Booking {
            writes: Some(Ready {
                plain: t + latency,
                vector: Some(VectorReady {
                    mfma_ab: mfma,
                    srcc: mfma,
                    from_mfma: false,
                }),
            }),
            exec_for_mfma: op.info.writes_exec.then_some(t + self.exec_to_mfma),
            ..Booking::default()
        }
    }
}

/// The matrix core of each SIMD.
#[derive(Clone, Debug)]
pub(crate) struct Mfma {
    /// When each SIMD's matrix core is free.
    free: Vec<u64>,
    slot: u64,
    /// Wait states beyond the passes before an MFMA result may be read as SrcA/B or by the
    /// VALU.
    extra_wait_states: u64,
    /// Wait states before a back-to-back MFMA may read the previous result as SrcC.
    srcc_wait_states: u64,
}

impl Mfma {
    fn new(p: &Params, simds: usize) -> Mfma {
        Mfma {
            free: vec![0; simds],
            slot: p.issue.slot_cycles.positive().get(),
            extra_wait_states: p.mfma.result_extra_wait_states.count(),
            srcc_wait_states: p.mfma.srcc_same_acc_wait_states.count(),
        }
    }
}

impl Unit for Mfma {
    fn ready(&self, simd: usize) -> u64 {
        self.free[simd]
    }

    fn book(&mut self, op: &Op<'_>, _: &mut Shared<'_>) -> Booking {
        let busy = op.info.busy as u64;
        self.free[op.simd] = op.t + busy;
        let result = op.t + self.slot * (1 + op.info.passes as u64 + self.extra_wait_states);
        Booking {
            writes: Some(Ready {
                plain: result,
                vector: Some(VectorReady {
                    mfma_ab: result,
                    srcc: op.t + self.slot * (1 + self.srcc_wait_states),
                    from_mfma: true,
                }),
            }),
            mfma_cycles: busy,
            ..Booking::default()
        }
    }
}

/// The scalar ALU.
#[derive(Clone, Debug)]
pub(crate) struct Salu {
    /// Issue-to-issue clocks of dependent SALU instructions.
    latency: u64,
}

impl Unit for Salu {
    fn ready(&self, _: usize) -> u64 {
        0
    }

    fn book(&mut self, op: &Op<'_>, _: &mut Shared<'_>) -> Booking {
        Booking {
            writes: Some(Ready {
                plain: op.t + self.latency,
                vector: None,
            }),
            ..Booking::default()
        }
    }
}

/// Scalar memory: a scalar-cache hit.
#[derive(Clone, Debug)]
pub(crate) struct Smem {
    latency: u64,
}

impl Unit for Smem {
    fn ready(&self, _: usize) -> u64 {
        0
    }

    fn book(&mut self, op: &Op<'_>, _: &mut Shared<'_>) -> Booking {
        Booking {
            counted: Some(Counted::Smem(op.t + self.latency)),
            ..Booking::default()
        }
    }
}

/// Branches and messages: the wave's next instruction waits for the redirect.
#[derive(Clone, Debug)]
pub(crate) struct Branch {
    taken: u64,
    not_taken: u64,
}

impl Unit for Branch {
    fn ready(&self, _: usize) -> u64 {
        0
    }

    fn book(&mut self, op: &Op<'_>, _: &mut Shared<'_>) -> Booking {
        let wait = if op.taken { self.taken } else { self.not_taken };
        Booking {
            next: (!op.ends).then_some((op.t + wait, Reason::Branch)),
            ..Booking::default()
        }
    }
}

/// The LDS ports: one per pair of SIMDs, a FIFO of reservations that takes a few
/// instructions ahead of time.
#[derive(Clone, Debug)]
pub(crate) struct LdsPorts {
    /// When each port is free.
    free: Vec<u64>,
    /// Busy cycles of both ports.
    pub busy: u64,
    /// Cycles of reservations a port takes ahead (its queue).
    queue: u64,
    latency: u64,
    read_bytes_per_cycle: f64,
    write_bytes_per_cycle: f64,
    pass_bytes: u64,
}

impl LdsPorts {
    fn new(p: &Params, simds: usize) -> LdsPorts {
        let slot = p.issue.slot_cycles.positive().get();
        LdsPorts {
            free: vec![0; simds.div_ceil(2)],
            busy: 0,
            queue: p.lds.queue_slots.count() * slot,
            latency: p.lds.latency_cycles.count(),
            read_bytes_per_cycle: p.lds.port_bytes_per_cycle.get(),
            write_bytes_per_cycle: p.lds.write_bytes_per_cycle.get(),
            pass_bytes: p.lds.pass_bytes.positive().get(),
        }
    }

    /// Reserves the port of SIMD `simd`'s pair for `busy` cycles from `t`, or from when the
    /// requests queued before are served; returns when the reservation starts.
    pub(crate) fn reserve(&mut self, simd: usize, t: u64, busy: u64) -> u64 {
        let port = &mut self.free[simd / 2];
        let start = (*port).max(t);
        *port = start + busy;
        self.busy += busy;
        start
    }
}

impl Unit for LdsPorts {
    fn ready(&self, simd: usize) -> u64 {
        self.free[simd / 2].saturating_sub(self.queue)
    }

    fn book(&mut self, op: &Op<'_>, _: &mut Shared<'_>) -> Booking {
        let bytes = op.lanes * op.info.ds_bytes as u64;
        let passes = bytes.div_ceil(self.pass_bytes).max(1) + op.lds_conflicts;
        let per_cycle = if op.info.ds_write {
            self.write_bytes_per_cycle
        } else {
            self.read_bytes_per_cycle
        };
        let busy = ((passes * self.pass_bytes) as f64 / per_cycle)
            .ceil()
            .max(1.0) as u64;
        let start = self.reserve(op.simd, op.t, busy);
        Booking {
            counted: Some(Counted::Lds(start + busy + self.latency)),
            ..Booking::default()
        }
    }
}

/// The CU's texture addresser: it takes the lanes' addresses at a number of bytes per cycle
/// and hands each line to the memory hierarchy.
#[derive(Clone, Debug)]
pub(crate) struct Addresser {
    free: u64,
    /// Cycles of instructions it takes ahead (its queue).
    queue: u64,
    bytes_per_cycle: f64,
    min_cycles: u64,
    l1_latency: u64,
    /// Bytes per cycle an LDS port writes (the data of an LDS-DMA load).
    lds_write_bytes_per_cycle: f64,
}

impl Addresser {
    fn new(p: &Params) -> Addresser {
        let slot = p.issue.slot_cycles.positive().get();
        Addresser {
            free: 0,
            queue: p.vmem.queue_slots.count() * slot,
            bytes_per_cycle: p.vmem.issue_bytes_per_cycle.get(),
            min_cycles: p.vmem.min_issue_cycles.positive().get(),
            l1_latency: p.vmem.l1_hit_latency_cycles.count(),
            lds_write_bytes_per_cycle: p.lds.write_bytes_per_cycle.get(),
        }
    }
}

impl Unit for Addresser {
    fn ready(&self, _: usize) -> u64 {
        self.free.saturating_sub(self.queue)
    }

    fn book(&mut self, op: &Op<'_>, shared: &mut Shared<'_>) -> Booking {
        let (info, t, p) = (op.info, op.t, shared.probe);
        let kind = if info.vmem_store {
            Access::Store
        } else if info.vmem_atomic {
            Access::Atomic
        } else {
            Access::Load
        };
        let (active_bytes, done) = if p.valid {
            let lanes = (p.global | p.other).count_ones() as u64;
            let active = lanes * p.bytes as u64;
            let busy = ((active as f64 / self.bytes_per_cycle).ceil() as u64).max(self.min_cycles);
            let start = self.free.max(t);
            self.free = start + busy;
            let mut lines = [0u64; 128];
            let n = probed_lines(p, shared.mem.line_shift(), &mut lines);
            let mut done = (start + busy) as f64;
            let share = shared.mem.share(op.slot);
            for &line in &lines[..n] {
                let d = shared
                    .mem
                    .line(shared.cu, shared.xcd, line, start as f64, kind, share);
                done = done.max(d);
            }
            if p.other != 0 {
                done = done.max((start + busy + self.l1_latency) as f64);
            }
            (active, done.ceil() as u64)
        } else {
            (0, t + self.l1_latency)
        };
        if kind == Access::Load {
            shared.mem.note_load(done.saturating_sub(t) as f64);
        }
        // The returning data of an LDS-DMA load is written to LDS through the SIMD pair's
        // port. The port is a FIFO of reservations, so the write is charged when the load
        // issues rather than when its data returns (hundreds of cycles later): the port's
        // bandwidth is right, the exact cycle of the write is not.
        let lds_write = if info.lds_dma && active_bytes > 0 {
            ((active_bytes as f64 / self.lds_write_bytes_per_cycle).ceil() as u64).max(1)
        } else {
            0
        };
        Booking {
            counted: Some(Counted::Vm(done)),
            lds_write,
            ..Booking::default()
        }
    }
}

/// Every unit of one CU.
#[derive(Clone, Debug)]
pub(crate) struct Units {
    pub valu: Valu,
    pub mfma: Mfma,
    pub salu: Salu,
    pub smem: Smem,
    pub branch: Branch,
    pub lds: LdsPorts,
    pub addresser: Addresser,
}

impl Units {
    /// The units of a CU of `simds` SIMDs under `p`, idle.
    pub(crate) fn new(p: &Params, simds: usize) -> Units {
        let slot = p.issue.slot_cycles.positive().get();
        Units {
            valu: Valu::new(p, simds),
            mfma: Mfma::new(p, simds),
            salu: Salu {
                latency: p.salu.latency_cycles.count(),
            },
            smem: Smem {
                latency: p.salu.smem_latency_cycles.count(),
            },
            branch: Branch {
                taken: p.issue.branch_taken_cycles.count().max(slot),
                not_taken: p.issue.branch_not_taken_cycles.count().max(slot),
            },
            lds: LdsPorts::new(p, simds),
            addresser: Addresser::new(p),
        }
    }

    /// When SIMD `simd` may hand the unit of kind `kind` an instruction.
    pub(crate) fn ready(&self, kind: UnitKind, simd: usize) -> u64 {
        match kind {
            UnitKind::Valu => self.valu.ready(simd),
            UnitKind::Mfma => self.mfma.ready(simd),
            UnitKind::Lds => self.lds.ready(simd),
            UnitKind::Vmem => self.addresser.ready(simd),
            UnitKind::Salu => self.salu.ready(simd),
            UnitKind::Smem => self.smem.ready(simd),
            UnitKind::Branch => self.branch.ready(simd),
            UnitKind::Internal => 0,
        }
    }

    /// Books `op` on the unit that serves it (an LDS-DMA load also on its LDS port).
    pub(crate) fn book(&mut self, op: &Op<'_>, shared: &mut Shared<'_>) -> Booking {
        let booking = match op.info.unit {
            UnitKind::Valu => self.valu.book(op, shared),
            UnitKind::Mfma => self.mfma.book(op, shared),
            UnitKind::Lds => self.lds.book(op, shared),
            UnitKind::Vmem => self.addresser.book(op, shared),
            UnitKind::Salu => self.salu.book(op, shared),
            UnitKind::Smem => self.smem.book(op, shared),
            UnitKind::Branch => self.branch.book(op, shared),
            UnitKind::Internal => Booking::default(),
        };
        if booking.lds_write > 0 {
            self.lds.reserve(op.simd, op.t, booking.lds_write);
        }
        booking
    }
}

#[cfg(test)]
mod tests {
    use tilegen_emu::exec::interp::Probe;

    use super::*;
    use crate::inst::tests_support::waitcnt;
    use crate::mem::Scope;

    /// Books `info` issued by SIMD 0 at `t` on `units`.
    fn book(units: &mut Units, info: &InstInfo, t: u64) -> Booking {
        let p = Params::mi355x();
        let scope = Scope {
            cus: 1,
            xcds: 1,
            gpu_share: 1.0,
            l2_share: 1.0,
            shares: Vec::new(),
        };
        let mut mem = MemSystem::new(&p, 2.0, &scope);
        let probe = Probe::default();
        let op = Op {
            info,
            simd: 0,
            t,
            lanes: 64,
            lds_conflicts: 0,
            taken: false,
            ends: false,
            slot: 0,
        };
        let mut shared = Shared {
            mem: &mut mem,
            probe: &probe.vmem,
            cu: 0,
            xcd: 0,
        };
        units.book(&op, &mut shared)
    }

    #[test]
    fn a_valu_exec_write_sets_when_an_mfma_may_follow() {
        let p = Params::mi355x();
        let mut units = Units::new(&p, 4);
        let mut info = waitcnt(0, 0);
        info.unit = UnitKind::Valu;
        info.busy = 4;
        let b = book(&mut units, &info, 100);
        assert_eq!(b.exec_for_mfma, None);
        assert_eq!(units.ready(UnitKind::Valu, 0), 104);
        info.writes_exec = true;
        let b = book(&mut units, &info, 200);
        // The v_cmpx's own slot and 4 wait states of 4 clocks.
        assert_eq!(b.exec_for_mfma, Some(200 + 4 * (1 + 4)));
    }

    #[test]
    fn an_lds_port_takes_its_queue_ahead_and_serves_in_order() {
        let p = Params::mi355x();
        let mut units = Units::new(&p, 4);
        let mut info = waitcnt(0, 0);
        info.unit = UnitKind::Lds;
        info.ds_bytes = 16;
        // 64 lanes x 16 bytes: 4 passes of 256 bytes at 128 bytes per clock.
        let first = book(&mut units, &info, 0);
        assert_eq!(first.counted, Some(Counted::Lds(8 + 64)));
        let second = book(&mut units, &info, 0);
        assert_eq!(second.counted, Some(Counted::Lds(16 + 64)));
        // SIMD 1 shares the port; SIMD 2 has the other one. The queue holds 4 slots.
        let queue = p.lds.queue_slots.count() * 4;
        assert_eq!(units.ready(UnitKind::Lds, 1), 16u64.saturating_sub(queue));
        assert_eq!(units.ready(UnitKind::Lds, 2), 0);
        assert_eq!(units.lds.busy, 16);
    }
}
