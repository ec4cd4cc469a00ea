//! tilegen-device: run gfx950 code objects on a [`Device`], whatever the device is.
//!
//! The trait follows HSA's model so a real MI355X fits behind it as well as the emulator:
//! memory is allocated and copied explicitly; a code object is loaded once into a [`Module`]
//! (a handle: launch it many times; the device unloads it when the last clone is dropped); a
//! dispatch takes a kernarg segment (built from the kernel's metadata by [`kernargs::build`])
//! and returns a [`Signal`] that [`Device::wait`] completes. [`launch`] does the usual sequence
//! in one call, [`Buffer`] frees device memory on every path.
//!
//! This crate does not depend on the emulator: building and launching kernels compiles without
//! it. `tilegen-runtime` has the emulated device (`EmuDevice`), `tilegen-hsa` the device over
//! the HSA runtime (`HsaDevice`).
#![deny(missing_docs)]

mod buffer;
mod error;
pub mod kernargs;
mod stats;

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tilegen_codeobj::{CodeObject, Kernel};

pub use buffer::Buffer;
pub use error::{BoxError, Fault, RuntimeError};
pub use kernargs::ArgValue;
pub use stats::{Counter, Counters, LaunchStats};
pub use tilegen_codeobj::ValueKind;

/// An address in device memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct DevicePtr(pub u64);

/// Most work-items a workgroup may have on gfx950.
pub const MAX_WORKGROUP_SIZE: u32 = 1024;

/// Grid and workgroup shape of a dispatch. Any values can be written; [`LaunchConfig::check`]
/// (called by [`launch`] and by every device's dispatch) refuses the invalid ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct LaunchConfig {
    /// Workgroups per dimension (as HIP's `gridDim`).
    pub grid: [u32; 3],
    /// Work-items per workgroup and dimension (`blockDim`).
    pub block: [u32; 3],
    /// LDS bytes added to the kernel's static LDS at launch.
    pub dynamic_lds: u32,
}

impl LaunchConfig {
    /// The launch-shape rules, in one place: every dimension non-zero, at most
    /// `max_flat_workgroup_size` work-items per workgroup (the kernel's metadata; 0 means the
    /// gfx950 limit of [`MAX_WORKGROUP_SIZE`]), and the grid in work-items within the 32-bit
    /// fields of an AQL dispatch packet.
    pub fn check(&self, max_flat_workgroup_size: u32) -> Result<(), RuntimeError> {
        if self.grid.contains(&0) || self.block.contains(&0) {
            return Err(RuntimeError::Config(format!(
                "grid {:?} and block {:?} must be non-zero in every dimension",
                self.grid, self.block
            )));
        }
        if self.block.iter().any(|&b| b > u16::MAX as u32) {
            return Err(RuntimeError::Config(format!(
                "block {:?}: a workgroup dimension is at most {}",
                self.block,
                u16::MAX
            )));
        }
        let threads: u64 = self.block.iter().map(|&b| b as u64).product();
        let limit = match max_flat_workgroup_size {
            0 => MAX_WORKGROUP_SIZE,
            n => n.min(MAX_WORKGROUP_SIZE),
        } as u64;
        if threads > limit {
            return Err(RuntimeError::Config(format!(
                "block {:?} has {threads} work-items; the kernel allows at most {limit}",
                self.block
            )));
        }
        for (d, &g) in self.grid.iter().enumerate() {
            if g as u64 * self.block[d] as u64 > u32::MAX as u64 {
                return Err(RuntimeError::Config(format!(
                    "grid dimension {d}: {g} x {} work-items exceed 2^32",
                    self.block[d]
                )));
            }
        }
        Ok(())
    }

    /// Grid dimensions that matter: 3 if anything is larger than 1 in z, else 2 if in y, else
    /// 1 (the AQL packet's `setup` and the `hidden_grid_dims` argument).
    pub fn dimensions(&self) -> u16 {
        if self.grid[2] > 1 || self.block[2] > 1 {
            3
        } else if self.grid[1] > 1 || self.block[1] > 1 {
            2
        } else {
            1
        }
    }

    /// The grid in work-items per dimension (the AQL packet's `grid_size`); wraps for a
    /// configuration [`LaunchConfig::check`] refuses.
    pub fn grid_work_items(&self) -> [u32; 3] {
        [0, 1, 2].map(|d| self.grid[d].wrapping_mul(self.block[d]))
    }
}

/// Which device object a [`Module`] or [`Signal`] belongs to; unique in the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DeviceId(u64);

impl DeviceId {
    /// A fresh id (devices take one when they are created).
    pub fn new() -> DeviceId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        DeviceId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

impl Default for DeviceId {
    fn default() -> Self {
        DeviceId::new()
    }
}

/// A dispatch in flight: [`Device::wait`] takes it (once).
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Signal(u64);

impl Signal {
    /// A signal with a device-chosen number (for device implementations).
    pub fn from_raw(raw: u64) -> Signal {
        Signal(raw)
    }

    /// The device-chosen number.
    pub fn raw(&self) -> u64 {
        self.0
    }
}

struct ModuleInner {
    device: DeviceId,
    code_object: Arc<CodeObject>,
    /// The device's loaded state; its `Drop` unloads the code object.
    handle: Box<dyn Any + Send + Sync>,
}

/// A code object loaded on a device: launch its kernels any number of times. Clones share the
/// load; the device unloads it (frees the image, destroys the executable) when the last clone
/// is dropped.
#[derive(Clone)]
pub struct Module {
    inner: Arc<ModuleInner>,
}

impl Module {
    /// A module of `device` for `code_object`, whose loaded state is `handle` (for device
    /// implementations: `handle`'s `Drop` unloads).
    pub fn new(
        device: DeviceId,
        code_object: Arc<CodeObject>,
        handle: impl Any + Send + Sync,
    ) -> Module {
        Module {
            inner: Arc::new(ModuleInner {
                device,
                code_object,
                handle: Box::new(handle),
            }),
        }
    }

    /// The parsed code object (kernels, metadata).
    pub fn code_object(&self) -> &CodeObject {
        &self.inner.code_object
    }

    /// The kernel called `name`.
    pub fn kernel(&self, name: &str) -> Result<&Kernel, RuntimeError> {
        self.inner
            .code_object
            .kernel(name)
            .ok_or_else(|| RuntimeError::no_such_kernel(&self.inner.code_object, name))
    }

    /// The device the module was loaded on.
    pub fn device(&self) -> DeviceId {
        self.inner.device
    }

    /// The loaded state, for device `device` (for device implementations): refused with
    /// [`RuntimeError::ForeignModule`] if another device loaded the module.
    pub fn handle<T: Any>(&self, device: DeviceId) -> Result<&T, RuntimeError> {
        if self.inner.device != device {
            return Err(RuntimeError::ForeignModule);
        }
        self.inner
            .handle
            .downcast_ref::<T>()
            .ok_or(RuntimeError::ForeignModule)
    }
}

impl std::fmt::Debug for Module {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Module")
            .field("device", &self.inner.device)
            .field(
                "kernels",
                &self
                    .inner
                    .code_object
                    .kernels
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// What a completed dispatch reports.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LaunchReport {
    /// Wall time of the dispatch: by the device's own timestamps where it has them (an HSA
    /// agent times each dispatch with the runtime's profiling start and end), else as the
    /// host saw it.
    pub wall: Duration,
    /// Instruction counts, from devices that count them (the emulator).
    pub stats: Option<LaunchStats>,
}

/// A gfx950 device: the emulator, or a real MI355X through HSA.
pub trait Device: Send + Sync {
    /// A human-readable name (`gfx950 emulator`, the agent's name, ...).
    fn name(&self) -> String;
    /// Allocates `bytes` of device memory (zeroed).
    fn alloc(&self, bytes: u64) -> Result<DevicePtr, RuntimeError>;
    /// Allocates `bytes` of zeroed device memory of which a launch may touch only a part (a
    /// layer's grouped expert weights, of which a batch routes to a few): a device may back
    /// it lazily, as it is written. By default an ordinary [`Device::alloc`].
    fn alloc_lazy(&self, bytes: u64) -> Result<DevicePtr, RuntimeError> {
        self.alloc(bytes)
    }
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
    let k = module.kernel(kernel)?;
    config.check(k.meta.max_flat_workgroup_size)?;
    let segment = kernargs::build(k, config, args)?;
    let signal = device.dispatch(module, kernel, config, &segment)?;
    device.wait(signal)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;

    use super::*;

    /// Host memory behind the trait, counting live allocations; copies to one address fail.
    #[derive(Default)]
    struct Fake {
        live: Mutex<BTreeMap<u64, Vec<u8>>>,
        next: AtomicU64,
    }

    const POISON: u64 = 0x4000;

    impl Device for Fake {
        fn name(&self) -> String {
            "fake".into()
        }
        fn alloc(&self, bytes: u64) -> Result<DevicePtr, RuntimeError> {
            let p = 0x1000 * (1 + self.next.fetch_add(1, Ordering::Relaxed));
            self.live.lock().unwrap().insert(p, vec![0; bytes as usize]);
            Ok(DevicePtr(p))
        }
        fn free(&self, ptr: DevicePtr) -> Result<(), RuntimeError> {
            self.live.lock().unwrap().remove(&ptr.0);
            Ok(())
        }
        fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), RuntimeError> {
            if dst.0 == POISON {
                return Err(RuntimeError::Memory {
                    address: dst.0,
                    source: "poisoned".into(),
                });
            }
            let mut live = self.live.lock().unwrap();
            let (base, mem) = live.range_mut(..=dst.0).next_back().unwrap();
            let at = (dst.0 - base) as usize;
            mem[at..at + src.len()].copy_from_slice(src);
            Ok(())
        }
        fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), RuntimeError> {
            let live = self.live.lock().unwrap();
            let (base, mem) = live.range(..=src.0).next_back().unwrap();
            let at = (src.0 - base) as usize;
            dst.copy_from_slice(&mem[at..at + dst.len()]);
            Ok(())
        }
        fn load(&self, _: &[u8]) -> Result<Module, RuntimeError> {
            unimplemented!()
        }
        fn dispatch(
            &self,
            _: &Module,
            _: &str,
            _: &LaunchConfig,
            _: &[u8],
        ) -> Result<Signal, RuntimeError> {
            unimplemented!()
        }
        fn wait(&self, _: Signal) -> Result<LaunchReport, RuntimeError> {
            unimplemented!()
        }
    }

    #[test]
    fn buffers_are_freed_on_every_path() {
        let dev = Fake::default();
        {
            let a = Buffer::upload(&dev, &[1, 2, 3]).unwrap();
            assert_eq!(a.to_vec().unwrap(), [1, 2, 3]);
            let b = Buffer::new(&dev, 8).unwrap();
            assert!(b.write(6, &[0; 4]).is_err(), "past the end");
            assert_eq!(dev.live.lock().unwrap().len(), 2);
        }
        assert!(dev.live.lock().unwrap().is_empty());
        // The third allocation lands on the poisoned address: the failed upload frees it.
        let _keep = Buffer::new(&dev, 1).unwrap();
        assert!(Buffer::upload(&dev, &[9]).is_err());
        assert_eq!(dev.live.lock().unwrap().len(), 1);
        Buffer::new(&dev, 4).unwrap().free().unwrap();
        assert_eq!(dev.live.lock().unwrap().len(), 1);
    }

    #[test]
    fn launch_shapes_are_checked_in_one_place() {
        let ok = LaunchConfig {
            grid: [4, 2, 1],
            block: [256, 1, 1],
            dynamic_lds: 0,
        };
        ok.check(256).unwrap();
        assert_eq!(ok.dimensions(), 2);
        assert_eq!(ok.grid_work_items(), [1024, 2, 1]);
        for (bad, max) in [
            (
                LaunchConfig {
                    grid: [0, 1, 1],
                    ..ok
                },
                256,
            ),
            (
                LaunchConfig {
                    block: [512, 1, 1],
                    ..ok
                },
                256,
            ),
            (
                LaunchConfig {
                    block: [2048, 1, 1],
                    ..ok
                },
                0,
            ),
            (
                LaunchConfig {
                    grid: [u32::MAX, 1, 1],
                    ..ok
                },
                256,
            ),
        ] {
            assert!(
                matches!(bad.check(max), Err(RuntimeError::Config(_))),
                "{bad:?}"
            );
        }
    }
}
