//! What can go wrong on a device: [`RuntimeError`], and the [`Fault`] of a kernel that stopped.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tilegen_codeobj::{CodeObject, CodeObjectError};

/// A device-specific error kept as the source of a [`RuntimeError`] (the emulator's
/// `AllocError` or `LimitError`, an HSA status, ...): callers that know the device downcast it.
pub type BoxError = Box<dyn Error + Send + Sync + 'static>;

/// Runtime errors; each names the operation and the value involved, and keeps the device's own
/// error as its source.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// The code object could not be parsed.
    #[error("loading code object: {0}")]
    CodeObject(#[from] CodeObjectError),
    /// No kernel of that name in the module.
    #[error("the code object has no kernel `{name}` (it has: {available})")]
    NoSuchKernel {
        /// The requested name.
        name: String,
        /// Kernels it does have.
        available: String,
    },
    /// Arguments do not match the kernel's metadata.
    #[error("kernel `{kernel}`: {problem}")]
    Arguments {
        /// The kernel.
        kernel: String,
        /// The mismatch.
        problem: String,
    },
    /// An invalid launch shape (see [`LaunchConfig::check`](crate::LaunchConfig::check)).
    #[error("launch configuration: {0}")]
    Config(String),
    /// A copy touched device memory outside every allocation (or the device refused it).
    #[error("device memory at {address:#x}: {source}")]
    Memory {
        /// The device address of the copy.
        address: u64,
        /// Why it failed.
        #[source]
        source: BoxError,
    },
    /// An allocation was refused (over the device memory limit, invalid, out of memory) or a
    /// free was given something that is not a live allocation.
    #[error("allocating {bytes} bytes of device memory: {source}")]
    Alloc {
        /// Bytes requested (0 for a refused free).
        bytes: u64,
        /// Why it was refused.
        #[source]
        source: BoxError,
    },
    /// The kernels of a parsed code object could not be prepared on the device (the image over
    /// the memory limit, an entry outside `.text`, a code object the device's loader refused).
    #[error("preparing the kernels: {0}")]
    Load(#[source] BoxError),
    /// A launch asks for more than the device's limits allow (grid size, memory for the waves
    /// in flight); checked before anything runs. The source is the device's limit error (the
    /// emulator's `LimitError`).
    #[error(transparent)]
    Limit(BoxError),
    /// The kernel faulted: where (kernel, workgroup, wave, PC, instruction, address, as far as
    /// the device tells) and why.
    #[error("kernel fault: {0}")]
    Fault(#[source] Box<Fault>),
    /// The launch was cancelled (interrupted) before it finished.
    #[error("interrupted: the launch was cancelled before it finished")]
    Interrupted,
    /// A dispatch did not complete within the device's timeout: a hung kernel is reported
    /// instead of waited on forever.
    #[error(
        "kernel `{kernel}` did not finish within {:.1} s: it may be hung (an endless loop?); the device may still be running it",
        waited.as_secs_f64()
    )]
    Timeout {
        /// The kernel.
        kernel: String,
        /// How long it was waited on.
        waited: Duration,
    },
    /// A module loaded on another device (or by another kind of device) was given to this one.
    #[error("the module was loaded on another device")]
    ForeignModule,
    /// A signal this device did not hand out, or one already waited on.
    #[error("unknown or already waited signal {0}")]
    UnknownSignal(u64),
    /// A device-specific failure (an HSA call's status, a queue error).
    #[error("{what}: {source}")]
    Device {
        /// What the device was doing.
        what: String,
        /// The device's error.
        #[source]
        source: BoxError,
    },
    /// A lock of the device was poisoned by a panic on another thread.
    #[error("the device's {0} lock was poisoned by a panic")]
    Poisoned(&'static str),
}

impl RuntimeError {
    /// A [`RuntimeError::NoSuchKernel`] listing what `co` does have.
    pub fn no_such_kernel(co: &CodeObject, name: &str) -> Self {
        RuntimeError::NoSuchKernel {
            name: name.to_string(),
            available: co
                .kernels
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// A [`RuntimeError::Device`] for `what` caused by `source`.
    pub fn device(what: impl Into<String>, source: impl Into<BoxError>) -> Self {
        RuntimeError::Device {
            what: what.into(),
            source: source.into(),
        }
    }
}

/// Where a wave was when it faulted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    workgroup: [u32; 3],
    wave: u32,
    pc: u64,
}

/// A kernel that stopped with a fault, in device-neutral terms: the kernel, and as far as the
/// device can tell, the workgroup, wave, program counter, instruction and memory address, with
/// the device's message. The emulator knows all of them; an HSA device knows the kernel, the
/// status and (for memory faults) the address.
///
/// Built with [`Fault::new`] and the `at`/`instruction`/`address`/`caused_by` methods; the
/// device's own fault (the emulator's `Fault`, an HSA status) stays reachable as
/// [`Fault::cause`] for callers that know the device.
#[derive(Debug, Clone)]
pub struct Fault {
    kernel: String,
    place: Option<Place>,
    instruction: Option<String>,
    address: Option<u64>,
    message: String,
    cause: Option<Arc<dyn Error + Send + Sync + 'static>>,
}

impl Fault {
    /// A fault of `kernel` saying `message` (what went wrong).
    pub fn new(kernel: impl Into<String>, message: impl Into<String>) -> Fault {
        Fault {
            kernel: kernel.into(),
            place: None,
            instruction: None,
            address: None,
            message: message.into(),
            cause: None,
        }
    }

    /// The place of the faulting wave: workgroup id, wave index within the workgroup, PC.
    pub fn at(mut self, workgroup: [u32; 3], wave: u32, pc: u64) -> Fault {
        self.place = Some(Place {
            workgroup,
            wave,
            pc,
        });
        self
    }

    /// The faulting instruction, disassembled (ignored when empty).
    pub fn instruction(mut self, text: impl Into<String>) -> Fault {
        let text = text.into();
        self.instruction = (!text.is_empty()).then_some(text);
        self
    }

    /// The memory address the fault is about.
    pub fn address(mut self, address: u64) -> Fault {
        self.address = Some(address);
        self
    }

    /// The device's own description of the fault.
    pub fn caused_by(mut self, cause: impl Error + Send + Sync + 'static) -> Fault {
        self.cause = Some(Arc::new(cause));
        self
    }

    /// The kernel that faulted.
    pub fn kernel(&self) -> &str {
        &self.kernel
    }

    /// The workgroup id of the faulting wave, if the device knows it.
    pub fn workgroup(&self) -> Option<[u32; 3]> {
        self.place.map(|p| p.workgroup)
    }

    /// The index of the faulting wave within its workgroup, if the device knows it.
    pub fn wave(&self) -> Option<u32> {
        self.place.map(|p| p.wave)
    }

    /// The program counter of the faulting instruction, if the device knows it.
    pub fn pc(&self) -> Option<u64> {
        self.place.map(|p| p.pc)
    }

    /// The faulting instruction, disassembled, if the device knows it.
    pub fn instruction_text(&self) -> Option<&str> {
        self.instruction.as_deref()
    }

    /// The memory address involved, if any.
    pub fn fault_address(&self) -> Option<u64> {
        self.address
    }

    /// What went wrong, in the device's words.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The device's own fault (downcast it: the emulator's `tilegen_emu::exec::Fault`, the HSA
    /// device's `HsaError`).
    pub fn cause(&self) -> Option<&(dyn Error + Send + Sync + 'static)> {
        self.cause.as_deref()
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "kernel `{}`", self.kernel)?;
        if let Some(Place {
            workgroup: [x, y, z],
            wave,
            pc,
        }) = self.place
        {
            write!(f, ", workgroup ({x}, {y}, {z}), wave {wave}, pc {pc:#x}")?;
        }
        if let Some(i) = &self.instruction {
            write!(f, ", `{i}`")?;
        }
        write!(f, ": {}", self.message)?;
        if let Some(a) = self.address
            && !self.message.contains(&format!("{a:#x}"))
        {
            write!(f, " (address {a:#x})")?;
        }
        Ok(())
    }
}

/// The message already says what the cause says, so the source is the cause's own source
/// (error-chain printers show each thing once); the cause itself is [`Fault::cause`].
impl Error for Fault {
    fn source(&self) -> Option<&(dyn Error + 'static)> {
        self.cause.as_deref().and_then(|c| c.source())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, thiserror::Error)]
    #[error("inner")]
    struct Inner;

    #[test]
    fn a_fault_says_what_the_device_knows() {
        let f = Fault::new("k", "memory fault")
            .at([1, 2, 3], 4, 0x100)
            .instruction("global_load_dword v0, v[0:1], off")
            .address(0xdead)
            .caused_by(Inner);
        assert_eq!(
            f.to_string(),
            "kernel `k`, workgroup (1, 2, 3), wave 4, pc 0x100, `global_load_dword v0, v[0:1], off`: memory fault (address 0xdead)"
        );
        assert_eq!(f.workgroup(), Some([1, 2, 3]));
        assert_eq!(f.wave(), Some(4));
        assert_eq!(f.pc(), Some(0x100));
        assert_eq!(f.fault_address(), Some(0xdead));
        assert!(
            f.cause()
                .is_some_and(|c| c.downcast_ref::<Inner>().is_some())
        );
        let hsa = Fault::new("k", "HSA_STATUS_ERROR_EXCEPTION");
        assert_eq!(hsa.to_string(), "kernel `k`: HSA_STATUS_ERROR_EXCEPTION");
        assert_eq!(hsa.pc(), None);
    }
}
