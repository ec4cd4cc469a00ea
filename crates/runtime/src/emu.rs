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

use crate::{Device, DevicePtr, LaunchConfig, LaunchReport, Module, RuntimeError, Signal};

/// The emulated gfx950. Dispatches run to completion inside `dispatch` (workgroups in parallel
/// on the host's cores); `wait` hands back the result.
pub struct EmuDevice {
    emu: Mutex<Emulator>,
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

    /// An emulator with explicit settings (instruction budget, threading).
    pub fn with_config(config: EmuConfig) -> Self {
        EmuDevice {
            emu: Mutex::new(Emulator::with_config(DeviceMemory::new(), config)),
            modules: Mutex::new(HashMap::new()),
            done: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        }
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
            .map_err(|e| RuntimeError::Memory(format!("allocating {bytes} bytes: {e}")))?;
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
        let mut programs = HashMap::new();
        {
            let mut emu = self.emu()?;
            for k in &co.kernels {
                let p = emu
                    .load(&co, k.name())
                    .map_err(|e| RuntimeError::Device(format!("loading {}: {e}", k.name())))?;
                programs.insert(k.name().to_string(), p);
            }
        }
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
            .map_err(|fault| RuntimeError::Fault(fault.to_string()));
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
