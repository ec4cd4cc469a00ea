//! The gfx950 execution engine.
//!
//! [`Emulator`] owns [`DeviceMemory`], loads kernels into [`Program`]s (decoded once) and
//! launches them: workgroups run in parallel on rayon's pool, the waves of one workgroup
//! interleave on one thread (each runs to its next `s_barrier`), and any fault stops the
//! launch with a [`Fault`] naming the kernel, workgroup, wave, PC, instruction and cause.
//!
//! Modules are of two kinds. [`sem`] holds pure instruction semantics, value in and value out,
//! separately tested: [`fp`] (number formats), [`mfma`] (matrix core), [`alu`] (per-lane
//! helpers), [`buffer`] (V# addressing and range checks), [`ds`] (cross-lane DS shuffles),
//! compares and division steps. The others are wave-level units: register files ([`wave`]),
//! operand access, the per-family executors (`salu`, `valu`, `vmem`, `dsops`, `mai`), the
//! scheduler ([`sched`]), [`memory`] and launch.

pub(crate) mod dsops;
pub mod fault;
pub mod interp;
pub mod launch;
pub mod limits;
pub(crate) mod mai;
pub mod memory;
pub(crate) mod operands;
pub mod program;
pub(crate) mod salu;
pub mod sched;
pub mod sem;
pub mod setup;
pub mod stats;
pub(crate) mod valu;
pub(crate) mod vmem;
pub mod wave;

// The semantics modules keep the paths they had before `sem` existed (`exec::fp`, ...).
pub use sem::{alu, buffer, ds, fp, mfma};

pub use fault::{Fault, FaultKind};
pub use launch::{EmuConfig, Emulator};
pub use limits::{LaunchControl, LimitError, Limits};
pub use memory::{AllocError, DeviceMemory, MemFault};
pub use program::{LoadError, Program};
pub use setup::KernelSetup;
pub use stats::{Counter, Counters, InstClass, Stats};
#[cfg(test)]
pub(crate) mod testutil;
