//! Faults: every way a launch can stop early, with enough context to find the instruction.

use std::fmt;

use super::buffer::BufferError;
use super::limits::LimitError;
use super::memory::{MemFault, ScratchFault};
use super::mfma::MfmaError;
use crate::isa::Inst;

/// The fault for an instruction the emulator does not implement: its mnemonic, and `what`
/// part of it is missing when that is narrower than the whole instruction (empty: all of it).
pub(crate) fn unimpl(i: &Inst, what: &str) -> FaultKind {
    if what.is_empty() {
        FaultKind::Unimplemented(i.mnemonic().to_string())
    } else {
        FaultKind::Unimplemented(format!("{} ({what})", i.mnemonic()))
    }
}

/// Why execution stopped.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum FaultKind {
    /// A global/flat access outside every allocation.
    #[error(transparent)]
    Memory(#[from] MemFault),
    /// A private-memory access outside the lane's segment.
    #[error(transparent)]
    Scratch(#[from] ScratchFault),
    /// An unsupported buffer resource.
    #[error(transparent)]
    Buffer(#[from] BufferError),
    /// A malformed matrix operation.
    #[error(transparent)]
    Mfma(#[from] MfmaError),
    /// The instruction decodes but the emulator does not implement it (or the named part of
    /// it).
    #[error("unimplemented: {0}")]
    Unimplemented(String),
    /// The bytes at the PC are not a valid gfx950 instruction.
    #[error("illegal instruction: {0}")]
    Illegal(String),
    /// A branch or `s_setpc` went somewhere that is not the start of a decoded instruction.
    #[error("jump to {target:#x}, which is not the start of an instruction of this kernel")]
    BadJump {
        /// The target address.
        target: u64,
    },
    /// A register operand is outside the register file.
    #[error("register {0} is outside the register file")]
    BadRegister(String),
    /// The wave executed as many instructions as its per-wave budget allows
    /// ([`Limits::wave_instruction_budget`](super::limits::Limits::wave_instruction_budget)):
    /// most likely an endless loop.
    #[error(
        "the wave executed its budget of {budget} instructions without ending (an endless loop? Limits::wave_instruction_budget raises the budget)"
    )]
    Budget {
        /// The per-wave budget.
        budget: u64,
    },
    /// Waves wait at a barrier the others never reach: a running wave used up its
    /// instruction budget while they waited.
    #[error(
        "barrier deadlock: waves {waiting:?} wait at s_barrier while waves {running:?} used up the instruction budget without reaching it"
    )]
    BarrierDeadlock {
        /// Waves at the barrier.
        waiting: Vec<u32>,
        /// Waves that are neither done nor at the barrier.
        running: Vec<u32>,
    },
    /// The kernel executed `s_trap`.
    #[error("s_trap {code} (the kernel trapped, e.g. an assertion or llvm.trap)")]
    Trap {
        /// The trap id.
        code: u16,
    },
    /// The launch parameters are invalid (checked before any wave runs).
    #[error("invalid launch: {0}")]
    Launch(String),
    /// The launch asks for more than the emulator's limits allow (checked before any wave
    /// runs, and before anything is allocated).
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The launch was cancelled through its [`LaunchControl`](super::limits::LaunchControl).
    #[error("cancelled (interrupted)")]
    Cancelled,
    /// Another workgroup faulted first; this one was stopped early.
    #[error("stopped because another workgroup faulted")]
    Aborted,
}

/// A fault with the place it happened.
#[derive(Clone, Debug, PartialEq)]
pub struct Fault {
    /// Kernel name.
    pub kernel: String,
    /// Workgroup id (x, y, z).
    pub workgroup: [u32; 3],
    /// Wave index within the workgroup.
    pub wave: u32,
    /// Program counter of the faulting instruction.
    pub pc: u64,
    /// The instruction, disassembled (empty if the fault is not tied to one).
    pub inst: String,
    /// What went wrong (memory faults carry the address). Boxed to keep `Result<_, Fault>`
    /// small.
    pub kind: Box<FaultKind>,
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [x, y, z] = self.workgroup;
        write!(
            f,
            "kernel `{}`, workgroup ({x}, {y}, {z}), wave {}, pc {:#x}",
            self.kernel, self.wave, self.pc
        )?;
        if !self.inst.is_empty() {
            write!(f, ", `{}`", self.inst)?;
        }
        write!(f, ": {}", self.kind)
    }
}

/// The message already includes the kind's, so the source is the kind's own source (as for a
/// transparent error): error-chain printers show each cause once. The kind itself is the
/// [`Fault::kind`] field.
impl std::error::Error for Fault {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&*self.kind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::memory::AccessKind;

    #[test]
    fn display_names_everything() {
        let f = Fault {
            kernel: "gemm".into(),
            workgroup: [1, 2, 3],
            wave: 4,
            pc: 0x1000,
            inst: "global_load_dword v1, v[2:3], off".into(),
            kind: Box::new(FaultKind::Memory(MemFault {
                addr: 0xdead0,
                len: 4,
                kind: AccessKind::Read,
                nearest: None,
            })),
        };
        let s = f.to_string();
        for part in [
            "gemm",
            "(1, 2, 3)",
            "wave 4",
            "0x1000",
            "global_load_dword",
            "0xdead0",
        ] {
            assert!(s.contains(part), "{s} lacks {part}");
        }
    }
}
