//! `EmuDevice`: the [`Device`] backed by the gfx950 emulator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Instant;

use tilegen_codeobj::CodeObject;
use tilegen_device::{
    Device, DeviceId, DevicePtr, Fault, LaunchConfig, LaunchReport, LaunchStats, Module,
    RuntimeError, Signal,
};
use tilegen_emu::exec::launch::{EmuConfig, Emulator};
use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::stats::{InstClass, Stats};
use tilegen_emu::exec::{FaultKind, LaunchControl, Limits};

/// The emulated gfx950. Dispatches run to completion inside `dispatch` (workgroups in parallel
/// on the host's cores); `wait` hands back the result.
///
/// The device enforces the emulator's [`Limits`] (device memory, grid size, per-wave
/// instruction budget; see [`EmuConfig`]) and shares a [`LaunchControl`] with its user: raise
/// its cancellation flag (a Ctrl-C handler) to stop a dispatch with
/// [`RuntimeError::Interrupted`], read its progress counters from another thread.
pub struct EmuDevice {
    id: DeviceId,
    emu: Arc<Mutex<Emulator>>,
    control: LaunchControl,
    limits: Limits,
    done: Mutex<HashMap<u64, Result<LaunchReport, RuntimeError>>>,
    next: AtomicU64,
}

/// A code object loaded on the emulator: its kernels, decoded once; the image is freed when
/// the module is dropped.
struct EmuModule {
    emu: Weak<Mutex<Emulator>>,
    image_base: u64,
    programs: HashMap<String, Program>,
}

impl Drop for EmuModule {
    fn drop(&mut self) {
        if let Some(emu) = self.emu.upgrade()
            && let Ok(mut emu) = emu.lock()
        {
            // The image was allocated by the load; nothing else frees it.
            let _ = emu.memory_mut().free(self.image_base);
        }
    }
}

impl Default for EmuDevice {
    fn default() -> Self {
        EmuDevice::new()
    }
}

impl EmuDevice {
    /// An emulator with empty memory and the default instruction budget.
    pub fn new() -> Self {
        EmuDevice::with_config(EmuConfig::default())
    }

    /// An emulator with explicit settings (limits, threading, launch control).
    pub fn with_config(config: EmuConfig) -> Self {
        EmuDevice {
            id: DeviceId::new(),
            control: config.control.clone(),
            limits: config.limits.clone(),
            emu: Arc::new(Mutex::new(Emulator::with_config(
                DeviceMemory::with_limit(config.limits.max_memory),
                config,
            ))),
            done: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
    }

    /// The cancellation flag and progress counters of this device's launches.
    pub fn control(&self) -> &LaunchControl {
        &self.control
    }

    /// The limits this device enforces.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// Live allocations in the emulator's memory (buffers and loaded images).
    pub fn allocation_count(&self) -> Result<usize, RuntimeError> {
        Ok(self.emu()?.memory().allocation_count())
    }

    fn emu(&self) -> Result<MutexGuard<'_, Emulator>, RuntimeError> {
        self.emu
            .lock()
            .map_err(|_| RuntimeError::Poisoned("emulator"))
    }
}

/// The emulator's counters as typed stats: instructions by class and by mnemonic, MFMAs, ...
pub fn launch_stats(s: &Stats) -> LaunchStats {
    LaunchStats::new(
        InstClass::ALL.iter().map(|c| (c.name(), s.class(*c))),
        s.by_opcode.iter().map(|(k, v)| (*k, *v)),
        s.counters,
    )
}

/// The emulator's fault as a runtime error: cancellation and limits keep their own variants,
/// everything else becomes a device-neutral [`Fault`] whose cause is the emulator's.
fn runtime_error(fault: tilegen_emu::exec::Fault) -> RuntimeError {
    match &*fault.kind {
        FaultKind::Cancelled => RuntimeError::Interrupted,
        FaultKind::Limit(l) => RuntimeError::Limit(Box::new(l.clone())),
        kind => {
            let mut f = Fault::new(fault.kernel.clone(), kind.to_string())
                .at(fault.workgroup, fault.wave, fault.pc)
                .instruction(fault.inst.clone());
            if let FaultKind::Memory(m) = kind {
                f = f.address(m.addr);
            }
            RuntimeError::Fault(Box::new(f.caused_by(fault)))
        }
    }
}

impl Device for EmuDevice {
    fn name(&self) -> String {
        "gfx950 emulator".into()
    }

    fn alloc(&self, bytes: u64) -> Result<DevicePtr, RuntimeError> {
        let mut emu = self.emu()?;
        let p = emu
            .memory_mut()
            .alloc(bytes)
            .map_err(|source| RuntimeError::Alloc {
                bytes,
                source: Box::new(source),
            })?;
        Ok(DevicePtr(p))
    }

    /// Pages materialize as they are written; untouched ones read as zero and take no host
    /// memory.
    fn alloc_lazy(&self, bytes: u64) -> Result<DevicePtr, RuntimeError> {
        let mut emu = self.emu()?;
        let p = emu
            .memory_mut()
            .alloc_lazy(bytes)
            .map_err(|source| RuntimeError::Alloc {
                bytes,
                source: Box::new(source),
            })?;
        Ok(DevicePtr(p))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), RuntimeError> {
        let mut emu = self.emu()?;
        emu.memory_mut()
            .free(ptr.0)
            .map_err(|e| RuntimeError::Memory {
                address: ptr.0,
                source: Box::new(e),
            })
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), RuntimeError> {
        let emu = self.emu()?;
        emu.memory()
            .write(dst.0, src)
            .map_err(|e| RuntimeError::Memory {
                address: dst.0,
                source: Box::new(e),
            })
    }

    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), RuntimeError> {
        let emu = self.emu()?;
        emu.memory()
            .read(src.0, dst)
            .map_err(|e| RuntimeError::Memory {
                address: src.0,
                source: Box::new(e),
            })
    }

    fn load(&self, code_object: &[u8]) -> Result<Module, RuntimeError> {
        let co = Arc::new(CodeObject::parse(code_object)?);
        if co.kernels.is_empty() {
            return Err(RuntimeError::Load("the code object has no kernels".into()));
        }
        // One image and one decoding of `.text` for all kernels of the code object.
        let programs = self
            .emu()?
            .load_all(&co)
            .map_err(|e| RuntimeError::Load(Box::new(e)))?;
        let image_base = programs.first().map_or(0, Program::image_base);
        let handle = EmuModule {
            emu: Arc::downgrade(&self.emu),
            image_base,
            programs: programs
                .into_iter()
                .map(|p| (p.name().to_string(), p))
                .collect(),
        };
        Ok(Module::new(self.id, co, handle))
    }

    fn dispatch(
        &self,
        module: &Module,
        kernel: &str,
        config: &LaunchConfig,
        kernargs: &[u8],
    ) -> Result<Signal, RuntimeError> {
        let loaded: &EmuModule = module.handle(self.id)?;
        let meta = module.kernel(kernel)?;
        let program = loaded
            .programs
            .get(kernel)
            .ok_or_else(|| RuntimeError::no_such_kernel(module.code_object(), kernel))?;
        config.check(meta.meta.max_flat_workgroup_size)?;
        let start = Instant::now();
        let result = self
            .emu()?
            .launch(
                program,
                config.grid,
                config.block,
                kernargs,
                config.dynamic_lds,
            )
            .map(|stats| LaunchReport {
                wall: start.elapsed(),
                stats: Some(launch_stats(&stats)),
            })
            .map_err(runtime_error);
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.done
            .lock()
            .map_err(|_| RuntimeError::Poisoned("signal table"))?
            .insert(id, result);
        Ok(Signal::from_raw(id))
    }

    fn wait(&self, signal: Signal) -> Result<LaunchReport, RuntimeError> {
        self.done
            .lock()
            .map_err(|_| RuntimeError::Poisoned("signal table"))?
            .remove(&signal.raw())
            .unwrap_or(Err(RuntimeError::UnknownSignal(signal.raw())))
    }
}

#[cfg(test)]
mod tests {
    use tilegen_emu::exec::{AllocError, LimitError};

    use super::*;

    #[test]
    fn allocations_over_the_limit_are_typed_errors() {
        let dev = EmuDevice::with_config(EmuConfig {
            limits: Limits {
                max_memory: 1 << 20,
                ..Limits::default()
            },
            ..EmuConfig::default()
        });
        assert_eq!(dev.limits().max_memory, 1 << 20);
        let p = dev.alloc(1000).unwrap();
        let e = dev.alloc(1 << 40).unwrap_err();
        let RuntimeError::Alloc { bytes, source } = &e else {
            panic!("{e}")
        };
        assert_eq!(*bytes, 1 << 40);
        assert!(
            matches!(
                source.downcast_ref::<AllocError>(),
                Some(AllocError::Limit(LimitError::Memory { limit: 1048576, .. }))
            ),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
        dev.free(p).unwrap();
        assert!(matches!(
            dev.free(p),
            Err(RuntimeError::Memory { address, .. }) if address == p.0
        ));
    }

    /// A lazy allocation far over the memory limit reads as zero and holds what is written.
    #[test]
    fn lazy_allocations_take_memory_as_written() {
        let dev = EmuDevice::with_config(EmuConfig {
            limits: Limits {
                max_memory: 1 << 24,
                ..Limits::default()
            },
            ..EmuConfig::default()
        });
        assert!(dev.alloc(1 << 32).is_err());
        let p = dev.alloc_lazy(1 << 32).unwrap();
        let at = DevicePtr(p.0 + (3 << 30));
        dev.copy_to_device(at, &[1, 2, 3]).unwrap();
        let mut got = [9u8; 4];
        dev.copy_from_device(at, &mut got).unwrap();
        assert_eq!(got, [1, 2, 3, 0]);
        dev.copy_from_device(DevicePtr(p.0 + (1 << 31)), &mut got)
            .unwrap();
        assert_eq!(got, [0; 4]);
        dev.free(p).unwrap();
    }

    #[test]
    fn the_control_is_shared_with_the_caller() {
        let config = EmuConfig::default();
        let control = config.control.clone();
        let dev = EmuDevice::with_config(config);
        control.cancel();
        assert!(dev.control().is_cancelled());
    }

    #[test]
    fn unknown_signals_are_refused() {
        let dev = EmuDevice::new();
        assert!(matches!(
            dev.wait(Signal::from_raw(77)),
            Err(RuntimeError::UnknownSignal(77))
        ));
    }
}
