//! The instruction interpreter: one call executes one instruction of one wave.

use super::fault::FaultKind;
use super::memory::{DeviceMemory, Lds};
use super::program::Program;
use super::sched::Step;
use super::stats::{InstClass, Stats};
use super::wave::Wave;
use super::{dsops, mai, salu, valu, vmem};
use crate::isa::{Encoding, Inst, Opcode};

/// What an instruction does to control flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Continue with the next instruction.
    Next,
    /// Continue at this address.
    Jump(u64),
    /// Advance, then wait at the workgroup barrier.
    Barrier,
    /// Advance, then let the other waves of the workgroup run (`s_sleep`).
    Yield,
    /// The wave ends.
    End,
}

/// Everything an instruction may touch besides its wave and the LDS.
pub struct Env<'a> {
    /// The kernel being run.
    pub prog: &'a Program,
    /// Global memory.
    pub mem: &'a DeviceMemory,
    /// Counters of the running workgroup.
    pub stats: &'a mut Stats,
    /// Executions per decoded instruction (indexed by [`Program::slot`]); folded into
    /// `stats` by [`fold_counts`]. Counting by index keeps the per-instruction cost to one
    /// increment instead of a map lookup by mnemonic.
    pub counts: &'a mut [u64],
    /// What a timing model wants to learn from each instruction (`None` when no model is
    /// attached: the executor then pays one untaken branch per memory instruction).
    pub probe: Option<&'a mut Probe>,
}

/// The executor's reports to an attached timing model, and the model's one request.
#[derive(Clone, Debug)]
pub struct Probe {
    /// Leave MFMA accumulators untouched instead of computing them (the matrix arithmetic
    /// is most of an emulated GEMM's cost and never decides an address or a branch of the
    /// kernels timed; every other effect of the instruction, counters included, stays).
    pub skip_mfma_math: bool,
    /// Leave global memory untouched: stores write nothing and atomics return the current
    /// value without changing it (a run that only looks at addresses, and must not disturb
    /// what other workgroups will read).
    pub discard_global_writes: bool,
    /// The global-memory lanes of the last vector-memory instruction.
    pub vmem: VmemProbe,
}

/// Where a vector-memory instruction went, lane by lane (written by every MUBUF, FLAT,
/// GLOBAL and SCRATCH instruction while a [`Probe`] is attached).
#[derive(Clone, Debug)]
pub struct VmemProbe {
    /// Set by the instruction; the model clears it before the next one.
    pub valid: bool,
    /// Global (device) address of each lane in `global`.
    pub addr: [u64; 64],
    /// Lanes that access global memory.
    pub global: u64,
    /// Lanes that access private (scratch) or LDS memory through the flat apertures.
    pub other: u64,
    /// Bytes each lane moves.
    pub bytes: u32,
    /// A load straight into LDS (`buffer_load ... lds`, `global_load_lds_*`).
    pub to_lds: bool,
}

impl Default for Probe {
    fn default() -> Self {
        Probe {
            skip_mfma_math: false,
            discard_global_writes: false,
            vmem: VmemProbe {
                valid: false,
                addr: [0; 64],
                global: 0,
                other: 0,
                bytes: 0,
                to_lds: false,
            },
        }
    }
}

/// Adds the per-instruction counts into `stats` (by class and mnemonic) and zeroes them.
pub fn fold_counts(prog: &Program, counts: &mut [u64], stats: &mut Stats) {
    for (slot, n) in counts.iter_mut().enumerate() {
        if *n == 0 {
            continue;
        }
        if let Some(inst) = prog.at_slot(slot) {
            let class = classify(inst);
            stats.by_class[class as usize] += *n;
            *stats.by_opcode.entry(inst.mnemonic()).or_insert(0) += *n;
        }
        *n = 0;
    }
}

/// The counter class of an instruction.
pub fn classify(inst: &Inst) -> InstClass {
    use Encoding::*;
    match inst.encoding {
        Sop1 | Sop2 | Sopk | Sopc => match inst.op {
            Opcode::S_SETPC_B64 | Opcode::S_SWAPPC_B64 | Opcode::S_CALL_B64 => InstClass::Branch,
            _ => InstClass::Salu,
        },
        Sopp => match inst.op {
            Opcode::S_BARRIER => InstClass::Barrier,
            _ if inst.branch_target.is_some() => InstClass::Branch,
            Opcode::S_ENDPGM => InstClass::Branch,
            _ => InstClass::Control,
        },
        Smem => InstClass::Smem,
        Vop1 | Vop2 | Vopc | Vop3 | Vop1Sdwa | Vop2Sdwa | VopcSdwa | Vop1Dpp | Vop2Dpp => {
            InstClass::Valu
        }
        Vop3p => InstClass::Vop3p,
        Mai | MaiScaled => match inst.op {
            Opcode::V_ACCVGPR_READ_B32 | Opcode::V_ACCVGPR_WRITE_B32 => InstClass::Valu,
            _ => InstClass::Mfma,
        },
        Ds => InstClass::Lds,
        Mubuf | Mtbuf | Flat | Global | Scratch => vmem::class(inst),
    }
}

/// Executes the instruction at the wave's PC.
pub fn step(env: &mut Env<'_>, w: &mut Wave, lds: &mut Lds) -> Result<Step, FaultKind> {
    let (slot, inst) = env.prog.slot(w.pc)?;
    let next = w.pc + inst.size as u64;
    // `w.executed` was counted by the scheduler, which enforces the per-wave budget.
    env.counts[slot] += 1;
    use Encoding::*;
    let flow = match inst.encoding {
        Sop1 | Sop2 | Sopk | Sopc | Sopp => salu::exec(w, inst, next)?,
        Smem => salu::smem(env, w, inst)?,
        Vop1 | Vop2 | Vopc | Vop3 | Vop1Sdwa | Vop2Sdwa | VopcSdwa | Vop1Dpp | Vop2Dpp | Vop3p => {
            valu::exec(w, inst)?;
            Flow::Next
        }
        Mai | MaiScaled => {
            mai::exec(env, w, inst)?;
            Flow::Next
        }
        Ds => {
            dsops::exec(env, w, lds, inst)?;
            Flow::Next
        }
        Mubuf | Mtbuf | Flat | Global | Scratch => {
            vmem::exec(env, w, lds, inst)?;
            Flow::Next
        }
    };
    Ok(match flow {
        Flow::Next => {
            w.pc = next;
            Step::Continue
        }
        Flow::Jump(t) => {
            w.pc = t;
            Step::Continue
        }
        Flow::Barrier => {
            w.pc = next;
            Step::Barrier
        }
        Flow::Yield => {
            w.pc = next;
            Step::Yield
        }
        Flow::End => Step::End,
    })
}
