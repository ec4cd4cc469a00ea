//! `EmuDevice`: the [`Device`] backed by the gfx950 emulator.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tilegen_codeobj::CodeObject;
use tilegen_emu::exec::launch::{EmuConfig, Emulator};
use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::stats::{InstClass, Stats};
use tilegen_emu::exec::{FaultKind, LaunchControl, Limits};

use crate::{Device, DevicePtr, LaunchConfig, LaunchReport, Module, RuntimeError, Signal};

/// The emulated gfx950. Dispatches run to completion inside `dispatch` (workgroups in parallel
/// on the host's cores); `wait` hands back the result.
///
/// The device enforces the emulator's [`Limits`] (device memory, grid size, per-wave
/// instruction budget; see [`EmuConfig`]) and shares a [`LaunchControl`] with its user: raise
/// its cancellation flag (a Ctrl-C handler) to stop a dispatch with
/// [`RuntimeError::Interrupted`], read its progress counters from another thread.
pub struct EmuDevice {
    emu: Mutex<Emulator>,
    control: LaunchControl,
    limits: Limits,
    modules: Mutex<HashMap<u64, Loaded>>,
    done: Mutex<HashMap<u64, Result<LaunchReport, RuntimeError>>>,
    next: AtomicU64,
}

struct Loaded {
    code_object: Arc<CodeObject>,
    programs: HashMap<String, Program>,
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
            control: config.control.clone(),
            limits: config.limits.clone(),
            emu: Mutex::new(Emulator::with_config(
                DeviceMemory::with_limit(config.limits.max_memory),
                config,
            )),
            modules: Mutex::new(HashMap::new()),
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

    fn emu(&self) -> Result<MutexGuard<'_, Emulator>, RuntimeError> {
        self.emu
            .lock()
            .map_err(|_| RuntimeError::Device("the emulator's lock was poisoned by a panic".into()))
    }
}

/// The emulator's counters as JSON: instructions by class and by mnemonic, MFMAs.
pub fn stats_json(s: &Stats) -> serde_json::Value {
    let classes: serde_json::Map<String, serde_json::Value> = InstClass::ALL
        .iter()
        .map(|c| (c.name().to_string(), s.class(*c).into()))
        .collect();
    let opcodes: serde_json::Map<String, serde_json::Value> = s
        .by_opcode
        .iter()
        .map(|(k, v)| (k.to_string(), (*v).into()))
        .collect();
    serde_json::json!({
        "wave_instructions": s.instructions(),
        "by_class": classes,
        "by_opcode": opcodes,
        "mfma": s.mfma,
        "mfma_ops": s.mfma_ops,
        "workgroups": s.workgroups,
        "waves": s.waves,
        "lds_out_of_range": s.lds_out_of_range,
        "buffer_out_of_range": s.buffer_out_of_range,
        "lds_bank_conflict_cycles": s.lds_bank_conflict_cycles,
    })
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
            .map_err(|source| RuntimeError::Alloc { bytes, source })?;
        Ok(DevicePtr(p))
    }

    fn free(&self, ptr: DevicePtr) -> Result<(), RuntimeError> {
        let mut emu = self.emu()?;
        emu.memory_mut()
            .free(ptr.0)
            .map_err(|e| RuntimeError::Memory(format!("freeing {:#x}: {e}", ptr.0)))
    }

    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), RuntimeError> {
        let emu = self.emu()?;
        emu.memory()
            .write(dst.0, src)
            .map_err(|e| RuntimeError::Memory(e.to_string()))
    }

    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), RuntimeError> {
        let emu = self.emu()?;
        emu.memory()
            .read(src.0, dst)
            .map_err(|e| RuntimeError::Memory(e.to_string()))
    }

    fn load(&self, code_object: &[u8]) -> Result<Module, RuntimeError> {
        let co = Arc::new(CodeObject::parse(code_object)?);
        // One image and one decoding of `.text` for all kernels of the code object.
        let programs: HashMap<String, Program> = self
            .emu()?
            .load_all(&co)
            .map_err(RuntimeError::Load)?
            .into_iter()
            .map(|p| (p.name().to_string(), p))
            .collect();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let module = Module {
            id,
            code_object: co.clone(),
        };
        self.modules
            .lock()
            .map_err(|_| RuntimeError::Device("module table poisoned".into()))?
            .insert(
                id,
                Loaded {
                    code_object: co,
                    programs,
                },
            );
        Ok(module)
    }

    fn dispatch(
        &self,
        module: &Module,
        kernel: &str,
        config: &LaunchConfig,
        kernargs: &[u8],
    ) -> Result<Signal, RuntimeError> {
        let modules = self
            .modules
            .lock()
            .map_err(|_| RuntimeError::Device("module table poisoned".into()))?;
        let loaded = modules.get(&module.id).ok_or_else(|| {
            RuntimeError::Device(format!("module {} is not loaded here", module.id))
        })?;
        let program = loaded
            .programs
            .get(kernel)
            .ok_or_else(|| RuntimeError::no_such_kernel(&loaded.code_object, kernel))?;
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
                stats: Some(stats_json(&stats)),
            })
            .map_err(|fault| match *fault.kind {
                FaultKind::Cancelled => RuntimeError::Interrupted,
                FaultKind::Limit(ref l) => RuntimeError::Limit(l.clone()),
                _ => RuntimeError::Fault(Box::new(fault)),
            });
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.done
            .lock()
            .map_err(|_| RuntimeError::Device("signal table poisoned".into()))?
            .insert(id, result);
        Ok(Signal(id))
    }

    fn wait(&self, signal: Signal) -> Result<LaunchReport, RuntimeError> {
        self.done
            .lock()
            .map_err(|_| RuntimeError::Device("signal table poisoned".into()))?
            .remove(&signal.0)
            .unwrap_or_else(|| {
                Err(RuntimeError::Device(format!(
                    "unknown or already waited signal {}",
                    signal.0
                )))
            })
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
        assert!(
            matches!(
                &e,
                RuntimeError::Alloc {
                    bytes: 1099511627776,
                    source: AllocError::Limit(LimitError::Memory { limit: 1048576, .. })
                }
            ),
            "{e}"
        );
        assert!(std::error::Error::source(&e).is_some());
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
}
