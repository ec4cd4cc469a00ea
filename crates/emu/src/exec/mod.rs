//! The gfx950 execution engine.
//!
//! [`Emulator`] owns [`DeviceMemory`], loads kernels into [`Program`]s (decoded once) and
//! launches them: workgroups run in parallel on rayon's pool, the waves of one workgroup
//! interleave on one thread (each runs to its next `s_barrier`), and any fault stops the
//! launch with a [`Fault`] naming the kernel, workgroup, wave, PC, instruction and cause.
//!
//! The arithmetic lives in pure, separately tested modules: [`fp`] (number formats),
//! [`mfma`] (matrix core), [`alu`] (per-lane helpers), [`buffer`] (V# addressing and range
//! checks), [`ds`] (cross-lane DS shuffles) and [`memory`].

pub mod alu;
pub mod buffer;
pub mod ds;
pub(crate) mod dsops;
pub mod fault;
pub mod fp;
pub(crate) mod interp;
pub mod launch;
pub mod limits;
pub(crate) mod mai;
pub mod memory;
pub mod mfma;
pub(crate) mod operands;
pub mod program;
pub(crate) mod salu;
pub mod sched;
pub mod setup;
pub mod stats;
pub(crate) mod valu;
pub(crate) mod vmem;
pub mod wave;

pub use fault::{Fault, FaultKind};
pub use launch::{EmuConfig, Emulator};
pub use limits::{LaunchControl, LimitError, Limits};
pub use memory::{AllocError, DeviceMemory, MemFault};
pub use program::{LoadError, Program};
pub use setup::KernelSetup;
pub use stats::{InstClass, Stats};
#[cfg(test)]
pub(crate) mod testutil;
