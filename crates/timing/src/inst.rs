//! What the model needs to know about each decoded instruction, computed once per program:
//! the unit that serves it, its issue category, how long it holds its unit, and the registers
//! it reads and writes (for the per-register ready times). Every fact comes from the decoded
//! instruction and the generated columns of the emulator's opcode tables
//! ([`Opcode::timing`](tilegen_emu::isa::Opcode::timing)), never from its mnemonic.

use tilegen_emu::exec::interp::classify;
use tilegen_emu::exec::stats::InstClass;
use tilegen_emu::isa::{ConstReg, Encoding, Inst, Opcode, Operand, Role, SpecialReg, ValuRate};

use crate::TimingError;
use crate::params::Params;

/// Vector registers of a lane in a wave's ready-time table: v0-v255, then a0-a255 (gfx950's
/// unified file).
pub(crate) const VECTOR_REGS: u16 = tilegen_arch::MAX_UNIFIED_VGPRS as u16;
/// Index of the first SGPR (by scalar operand code) in a wave's ready-time table.
pub(crate) const SREG_BASE: u16 = VECTOR_REGS;
/// Index of SCC in the ready-time table.
pub(crate) const SCC: u16 = SREG_BASE + 128;
/// Entries of the ready-time table: v0-v255, a0-a255, the 128 scalar codes, SCC.
pub(crate) const REGS: usize = SCC as usize + 1;
/// EXEC (both halves start here).
pub(crate) const EXEC: u16 = SREG_BASE + 126;
/// VCC.
pub(crate) const VCC: u16 = SREG_BASE + 106;
/// M0.
pub(crate) const M0: u16 = SREG_BASE + 124;

/// The unit of a CU that serves an instruction (see [`crate::units`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnitKind {
    /// The SIMD's vector ALU.
    Valu,
    /// The SIMD's matrix core.
    Mfma,
    /// The scalar ALU.
    Salu,
    /// Scalar memory (the scalar cache).
    Smem,
    /// The LDS port of the SIMD's pair.
    Lds,
    /// The CU's texture addresser, and behind it the memory hierarchy.
    Vmem,
    /// Branches and messages.
    Branch,
    /// Handled by the sequencer itself (waitcnt, nop, setprio, sleep, barrier).
    Internal,
}

/// Issue categories: at most one instruction of each per SIMD issue slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Category {
    /// VALU and MFMA.
    Valu,
    /// Vector memory.
    Vmem,
    /// SALU and SMEM.
    Salu,
    /// LDS.
    Lds,
    /// Branches and messages.
    Branch,
}

impl Category {
    /// Number of categories.
    pub(crate) const COUNT: usize = 5;
}

/// Sequencer instructions with a timing effect of their own.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Special {
    None,
    /// Wait until at most `vm` vector-memory and `lgkm` LDS/SMEM operations are outstanding.
    Waitcnt {
        vm: u8,
        lgkm: u8,
    },
    Barrier,
    /// `s_sleep` units.
    Sleep(u32),
    /// `s_nop` wait states.
    Nop(u32),
    Setprio(u8),
    End,
}

/// How a register is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReadKind {
    /// By a VALU, SALU or memory instruction.
    Plain,
    /// As SrcA/SrcB of an MFMA.
    MfmaAb,
    /// As SrcC of an MFMA.
    MfmaC,
}

/// A register range read by an instruction.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Read {
    pub start: u16,
    pub count: u16,
    pub kind: ReadKind,
}

/// Timing facts of one instruction.
#[derive(Clone, Debug)]
pub(crate) struct InstInfo {
    pub unit: UnitKind,
    /// Issue category (`None`: sequencer-internal, never conflicts).
    pub category: Option<Category>,
    /// Clocks the unit is busy (VALU, MFMA).
    pub busy: u32,
    /// MFMA passes.
    pub passes: u32,
    pub reads: Vec<Read>,
    /// Register ranges written (start, count).
    pub writes: Vec<(u16, u16)>,
    pub special: Special,
    /// DS: bytes per lane, and whether it only writes LDS.
    pub ds_bytes: u32,
    pub ds_write: bool,
    /// VMEM: a store or atomic (no data returned to registers unless `returns`).
    pub vmem_store: bool,
    pub vmem_atomic: bool,
    /// VALU: writes EXEC (an explicit `exec` destination, or a `v_cmpx`), which an MFMA
    /// must wait for.
    pub writes_exec: bool,
    /// VMEM: a load whose data goes to LDS instead of registers (`buffer_load ... lds`,
    /// `global_load_lds_*`); it writes the LDS through a port like a `ds_write`.
    pub lds_dma: bool,
    /// Coarse class (for traces and counts).
    pub class: InstClass,
    /// Instruction size in bytes (to tell a taken branch).
    pub size: u8,
    /// The mnemonic, for traces only.
    pub mnemonic: &'static str,
}

/// Registers of an operand as (start, count) in the ready-time table.
fn regs(op: Operand) -> Option<(u16, u16)> {
    Some(match op {
        Operand::Vgpr { reg, count } => (reg as u16, count as u16),
        Operand::Agpr { reg, count } => (256 + reg as u16, count as u16),
        Operand::Sgpr { reg, count } => (SREG_BASE + reg as u16, count as u16),
        Operand::Ttmp { reg, count } => (SREG_BASE + 108 + reg as u16, count as u16),
        Operand::Special { reg, count } => {
            if reg == SpecialReg::Null {
                return None;
            }
            (SREG_BASE + reg.code() as u16, count as u16)
        }
        Operand::Const(ConstReg::Vccz) => (VCC, 2),
        Operand::Const(ConstReg::Execz) => (EXEC, 2),
        Operand::Const(ConstReg::Scc) => (SCC, 1),
        _ => return None,
    })
}

fn simm16(i: &Inst) -> u32 {
    match i.operand(Role::Simm16) {
        Operand::Imm(v) => v,
        Operand::Literal(v) => v,
        _ => 0,
    }
}

impl InstInfo {
    /// The timing facts of `i` under `params`; a matrix instruction the opcode tables give no
    /// pass count is an error (the model never guesses one).
    pub(crate) fn new(i: &Inst, params: &Params) -> Result<InstInfo, TimingError> {
        let class = classify(i);
        let facts = i.op.timing();
        let slot = params.issue.slot_cycles.positive().get() as u32;
        let mut info = InstInfo {
            unit: UnitKind::Internal,
            category: None,
            busy: 0,
            passes: 0,
            reads: Vec::new(),
            writes: Vec::new(),
            special: Special::None,
            ds_bytes: 0,
            ds_write: false,
            vmem_store: false,
            vmem_atomic: false,
            writes_exec: false,
            lds_dma: false,
            class,
            size: i.size,
            mnemonic: i.mnemonic(),
        };
        match class {
            InstClass::Salu => {
                info.unit = UnitKind::Salu;
                info.category = Some(Category::Salu);
                if i.op == Opcode::S_SETPRIO {
                    info.special = Special::Setprio((simm16(i) & 3) as u8);
                    info.unit = UnitKind::Internal;
                    info.category = None;
                }
            }
            InstClass::Smem => {
                info.unit = UnitKind::Smem;
                info.category = Some(Category::Salu);
            }
            InstClass::Branch => {
                info.unit = UnitKind::Branch;
                info.category = Some(Category::Branch);
                if i.op == Opcode::S_ENDPGM {
                    info.special = Special::End;
                }
            }
            InstClass::Barrier => {
                info.special = Special::Barrier;
            }
            InstClass::Control => match i.op {
                Opcode::S_WAITCNT => {
                    let s = simm16(i);
                    info.special = Special::Waitcnt {
                        vm: ((s & 0xf) | ((s >> 14) & 3) << 4) as u8,
                        lgkm: ((s >> 8) & 0xf) as u8,
                    };
                }
                Opcode::S_NOP => info.special = Special::Nop(simm16(i) & 0xf),
                Opcode::S_SLEEP => info.special = Special::Sleep(simm16(i) & 0x7f),
                Opcode::S_SETPRIO => info.special = Special::Setprio((simm16(i) & 3) as u8),
                _ => {
                    // Messages, traps and the like go through the branch/message category.
                    info.unit = UnitKind::Branch;
                    info.category = Some(Category::Branch);
                }
            },
            InstClass::Valu | InstClass::Vop3p => {
                info.unit = UnitKind::Valu;
                info.category = Some(Category::Valu);
                let v = &params.valu;
                info.busy = match facts.rate {
                    ValuRate::Transcendental => v.transcendental_cycles.count(),
                    ValuRate::Double => v.f64_cycles.count(),
                    ValuRate::Full => v.issue_cycles.count(),
                } as u32;
            }
            InstClass::Mfma => {
                info.unit = UnitKind::Mfma;
                info.category = Some(Category::Valu);
                // cbsz and blgp select the A and B formats of the f8f6f4 opcodes; 0 and 1 are
                // FP8 and BF8. The other matrix opcodes take the same passes either way.
                let fp8 = i.mfma.cbsz <= 1 || i.mfma.blgp <= 1;
                let passes = if fp8 { facts.fp8_passes } else { facts.passes };
                if passes == 0 {
                    return Err(TimingError::UnknownMfma {
                        mnemonic: i.mnemonic(),
                    });
                }
                info.passes = passes as u32;
                info.busy = info.passes * slot;
            }
            InstClass::Lds => {
                info.unit = UnitKind::Lds;
                info.category = Some(Category::Lds);
                info.ds_bytes = facts.lane_bytes as u32;
                info.ds_write = facts.ds_write() && i.dst() == Operand::None;
            }
            InstClass::VmemLoad | InstClass::VmemStore | InstClass::VmemAtomic => {
                info.unit = UnitKind::Vmem;
                info.category = Some(Category::Vmem);
                info.vmem_store = class == InstClass::VmemStore;
                info.vmem_atomic = class == InstClass::VmemAtomic;
                info.lds_dma = class == InstClass::VmemLoad
                    && ((i.encoding == Encoding::Mubuf && i.mem.lds) || facts.loads_to_lds());
            }
        }
        info.collect_registers(i);
        if info.unit == UnitKind::Valu {
            let exec = |&(start, count): &(u16, u16)| start < EXEC + 2 && start + count > EXEC;
            info.writes_exec =
                info.writes.iter().any(exec) || i.op.compare().is_some_and(|c| c.writes_exec);
        }
        Ok(info)
    }

    fn collect_registers(&mut self, i: &Inst) {
        let facts = i.op.timing();
        let vector = matches!(
            self.unit,
            UnitKind::Valu | UnitKind::Mfma | UnitKind::Lds | UnitKind::Vmem
        );
        let mut read = |r: (u16, u16), kind| {
            self.reads.push(Read {
                start: r.0,
                count: r.1,
                kind,
            })
        };
        let lds_dma = self.lds_dma;
        let mut writes = Vec::new();
        for (role, op) in i.operands() {
            let Some(r) = regs(op) else { continue };
            match role {
                Role::Vdst => {
                    if self.unit == UnitKind::Vmem && self.vmem_store {
                        read(r, ReadKind::Plain);
                    } else {
                        writes.push(r);
                    }
                }
                Role::Sdst if facts.sdst_is_source() => read(r, ReadKind::Plain),
                Role::Sdata if facts.sdata_is_source() => read(r, ReadKind::Plain),
                Role::Sdst | Role::Sdata => writes.push(r),
                Role::Vdata => {
                    if self.vmem_store || self.vmem_atomic {
                        read(r, ReadKind::Plain);
                        if self.vmem_atomic && i.mem.sc0 {
                            writes.push(r);
                        }
                    } else if !lds_dma {
                        writes.push(r);
                    }
                }
                Role::Src0 | Role::Src1 if self.unit == UnitKind::Mfma => read(r, ReadKind::MfmaAb),
                Role::Src2 if self.unit == UnitKind::Mfma => read(r, ReadKind::MfmaC),
                _ => read(r, ReadKind::Plain),
            }
        }
        if vector && self.unit != UnitKind::Mfma {
            read((EXEC, 2), ReadKind::Plain);
        }
        if lds_dma {
            read((M0, 1), ReadKind::Plain);
        }
        if self.unit == UnitKind::Salu {
            writes.push((SCC, 1));
        }
        if facts.reads_scc() {
            read((SCC, 1), ReadKind::Plain);
        }
        if facts.reads_vcc() {
            read((VCC, 2), ReadKind::Plain);
        }
        if facts.reads_exec() {
            read((EXEC, 2), ReadKind::Plain);
        }
        self.writes = writes;
    }
}

#[cfg(test)]
pub(crate) mod tests_support {
    use super::*;

    /// An `s_waitcnt` with these counts.
    pub(crate) fn waitcnt(vm: u8, lgkm: u8) -> InstInfo {
        InstInfo {
            unit: UnitKind::Internal,
            category: None,
            busy: 0,
            passes: 0,
            reads: Vec::new(),
            writes: Vec::new(),
            special: Special::Waitcnt { vm, lgkm },
            ds_bytes: 0,
            ds_write: false,
            vmem_store: false,
            vmem_atomic: false,
            writes_exec: false,
            lds_dma: false,
            class: InstClass::Control,
            size: 4,
            mnemonic: "s_waitcnt",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tilegen_emu::isa::decode;

    fn info(words: &[u32]) -> InstInfo {
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        let i = decode(&bytes, 0).unwrap();
        InstInfo::new(&i, &Params::mi355x()).unwrap()
    }

    #[test]
    fn classes_categories_and_registers() {
        // v_fma_f32 v3, v1, v3, v4
        let f = info(&[0xd1cb0003, 0x04120701]);
        assert_eq!(
            (f.unit, f.category, f.busy),
            (UnitKind::Valu, Some(Category::Valu), 4)
        );
        assert_eq!(f.writes, vec![(3, 1)]);
        assert_eq!(f.reads.len(), 4, "three sources and EXEC");
        // v_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:11], v[12:19], v[0:3], v20, v21 (fp8)
        let m = info(&[0xd3ac1800, 0x08022b14, 0xd3ad0800, 0x04021904]);
        assert_eq!((m.unit, m.passes, m.busy), (UnitKind::Mfma, 8, 32));
        assert_eq!(m.writes, vec![(0, 4)]);
        assert!(
            m.reads
                .iter()
                .any(|r| r.kind == ReadKind::MfmaC && r.start == 0)
        );
        assert!(
            m.reads
                .iter()
                .any(|r| r.kind == ReadKind::MfmaAb && r.start == 12)
        );
        // s_waitcnt vmcnt(0) lgkmcnt(0)
        let w = info(&[0xbf8c0070]);
        assert_eq!(w.special, Special::Waitcnt { vm: 0, lgkm: 0 });
        // s_waitcnt lgkmcnt(0) keeps vmcnt at its maximum.
        let w = info(&[0xbf8cc07f]);
        assert_eq!(w.special, Special::Waitcnt { vm: 63, lgkm: 0 });
        // ds_read_b32 v4, v3 / ds_write_b32 v2, v1
        let r = info(&[0xd86c0000, 0x04000003]);
        assert_eq!((r.unit, r.ds_bytes, r.ds_write), (UnitKind::Lds, 4, false));
        assert_eq!(r.writes, vec![(4, 1)]);
        let wr = info(&[0xd81a0000, 0x00000102]);
        assert!(wr.ds_write && wr.writes.is_empty());
        // global_store_dword v5, v4, s[4:5]: reads data, writes nothing.
        let st = info(&[0xdc708000, 0x00040405]);
        assert!(st.vmem_store && st.writes.is_empty());
        // s_cbranch_scc1 reads SCC; s_sub_u32 writes SCC.
        let b = info(&[0xbf85fff9]);
        assert!(b.reads.iter().any(|r| r.start == SCC));
        let s = info(&[0x808a810a]);
        assert!(s.writes.contains(&(SCC, 1)));
    }
}
