//! tilegen-runtime: run gfx950 code objects on a [`Device`].
//!
//! The trait follows HSA's model so a real MI355X fits behind it: memory is allocated and
//! copied explicitly; a code object is loaded once into a [`Module`]; a dispatch takes a
//! kernarg segment (built from the kernel's metadata by [`kernargs::build`]) and returns a
//! [`Signal`] that [`Device::wait`] completes. [`launch`] does the usual sequence in one call.
#![deny(missing_docs)]

mod emu;
pub mod kernargs;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tilegen_codeobj::{CodeObject, CodeObjectError};
use tilegen_emu::exec::{AllocError, Fault, LimitError, LoadError};

pub use emu::{EmuDevice, stats_json};
pub use kernargs::ArgValue;
pub use tilegen_emu::exec::{EmuConfig, LaunchControl, Limits};

/// An address in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct DevicePtr(pub u64);

/// Grid and workgroup shape of a dispatch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LaunchConfig {
    /// Workgroups per dimension (as HIP's `gridDim`).
    pub grid: [u32; 3],
    /// Work-items per workgroup and dimension (`blockDim`).
    pub block: [u32; 3],
    /// LDS bytes added to the kernel's static LDS at launch.
    pub dynamic_lds: u32,
}

/// A loaded code object.
#[derive(Debug, Clone)]
pub struct Module {
    /// Device-specific handle.
    pub id: u64,
    /// The parsed code object (kernels, metadata).
    pub code_object: Arc<CodeObject>,
}

/// A dispatch in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signal(pub u64);

/// What a completed dispatch reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LaunchReport {
    /// Wall time of the dispatch.
    pub wall: Duration,
    /// Device-specific statistics (the emulator's instruction counts), as JSON.
    pub stats: Option<serde_json::Value>,
}

/// Runtime errors; each names the operation and the value involved.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// Loading a code object failed.
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
    /// An invalid launch shape.
    #[error("launch configuration: {0}")]
    Config(String),
    /// A memory operation outside every allocation.
    #[error("device memory: {0}")]
    Memory(String),
    /// An allocation was refused (over the device memory limit, or invalid).
    #[error("allocating {bytes} bytes of device memory: {source}")]
    Alloc {
        /// Bytes requested.
        bytes: u64,
        /// Why it was refused.
        #[source]
        source: AllocError,
    },
    /// The kernels of a parsed code object could not be prepared (its image over the memory
    /// limit, an entry outside `.text`, ...).
    #[error("preparing the kernels: {0}")]
    Load(#[source] LoadError),
    /// A launch asks for more than the device's limits allow (grid size, memory for the waves
    /// in flight); checked before anything runs.
    #[error(transparent)]
    Limit(#[from] LimitError),
    /// The kernel faulted: the emulator's fault names the kernel, workgroup, wave, PC and
    /// instruction, and its kind says what went wrong.
    #[error("kernel fault: {0}")]
    Fault(#[source] Box<Fault>),
    /// The launch was cancelled (interrupted) before it finished.
    #[error("interrupted: the launch was cancelled before it finished")]
    Interrupted,
    /// A device-specific failure.
    #[error("{0}")]
    Device(String),
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
}

/// A gfx950 device: the emulator here, a real MI355X through HSA elsewhere.
pub trait Device: Send + Sync {
    /// A human-readable name (`gfx950 emulator`, the agent name, ...).
    fn name(&self) -> String;
    /// Allocates `bytes` of device memory (zeroed).
    fn alloc(&self, bytes: u64) -> Result<DevicePtr, RuntimeError>;
    /// Frees an allocation.
    fn free(&self, ptr: DevicePtr) -> Result<(), RuntimeError>;
    /// Copies host bytes to device memory at `dst`.
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), RuntimeError>;
    /// Copies device memory at `src` to host bytes.
    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), RuntimeError>;
    /// Loads a code object.
    fn load(&self, code_object: &[u8]) -> Result<Module, RuntimeError>;
    /// Queues a dispatch of `kernel` with a ready kernarg segment.
    fn dispatch(
        &self,
        module: &Module,
        kernel: &str,
        config: &LaunchConfig,
        kernargs: &[u8],
    ) -> Result<Signal, RuntimeError>;
    /// Waits for a dispatch to complete.
    fn wait(&self, signal: Signal) -> Result<LaunchReport, RuntimeError>;
}

/// Validates `config`, builds the kernarg segment from the kernel's metadata and `args`
/// (explicit arguments in order; hidden ones filled as the HSA runtime does), dispatches and
/// waits.
pub fn launch(
    device: &dyn Device,
    module: &Module,
    kernel: &str,
    config: &LaunchConfig,
    args: &[ArgValue],
) -> Result<LaunchReport, RuntimeError> {
    let k = module
        .code_object
        .kernel(kernel)
        .ok_or_else(|| RuntimeError::no_such_kernel(&module.code_object, kernel))?;
    check_config(config, k.meta.max_flat_workgroup_size)?;
    let segment = kernargs::build(k, config, args)?;
    let signal = device.dispatch(module, kernel, config, &segment)?;
    device.wait(signal)
}

fn check_config(c: &LaunchConfig, max_workgroup: u32) -> Result<(), RuntimeError> {
    if c.grid.contains(&0) || c.block.contains(&0) {
        return Err(RuntimeError::Config(format!(
            "grid {:?} and block {:?} must be non-zero in every dimension",
            c.grid, c.block
        )));
    }
    let threads: u64 = c.block.iter().map(|&b| b as u64).product();
    let limit = if max_workgroup == 0 {
        1024
    } else {
        max_workgroup as u64
    };
    if threads > limit {
        return Err(RuntimeError::Config(format!(
            "block {:?} has {threads} work-items; the kernel allows at most {limit}",
            c.block
        )));
    }
    for (d, &g) in c.grid.iter().enumerate() {
        // The grid in work-items must fit the 32-bit AQL packet fields.
        if g as u64 * c.block[d] as u64 > u32::MAX as u64 {
            return Err(RuntimeError::Config(format!(
                "grid dimension {d}: {g} x {} work-items exceed 2^32",
                c.block[d]
            )));
        }
    }
    Ok(())
}
