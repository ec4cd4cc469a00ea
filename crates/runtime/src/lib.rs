//! tilegen-runtime: the devices that run gfx950 code objects, and the choice between them.
//!
//! Everything device-neutral (the [`Device`] trait, [`Module`] handles, kernarg segments,
//! [`launch`], typed errors, faults and stats, [`Buffer`]) lives in `tilegen-device` and is
//! re-exported here; this crate adds [`EmuDevice`], the emulated gfx950, re-exports
//! [`HsaDevice`] (a real MI355X through the HSA runtime, `tilegen-hsa`), and chooses between
//! them ([`choose`]: `auto` takes a gfx950 HSA agent when there is one, else the emulator, and
//! says why).
#![deny(missing_docs)]

mod emu;
pub mod select;

pub use emu::{EmuDevice, launch_stats};
pub use select::{AnyDevice, Chosen, DeviceChoice, SelectError, choose};
pub use tilegen_device::*;
pub use tilegen_emu::exec::{EmuConfig, LaunchControl, Limits};
pub use tilegen_hsa as hsa;
pub use tilegen_hsa::{HsaDevice, HsaError, HsaOptions};
