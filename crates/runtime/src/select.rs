//! Choosing a device: a gfx950 GPU through HSA when there is one, else the emulator.

use std::fmt;
use std::str::FromStr;

use tilegen_device::{Device, DevicePtr, LaunchConfig, LaunchReport, Module, RuntimeError, Signal};
use tilegen_emu::exec::EmuConfig;
use tilegen_hsa::{AgentInfo, HsaDevice, HsaError, HsaOptions};

use crate::EmuDevice;

/// The agent name of an MI355X: the only GPU tilegen's code objects run on.
pub const GFX950: &str = tilegen_arch::PROCESSOR;

/// Which device to run on (`--device auto|emu|hsa[:N]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceChoice {
    /// A gfx950 HSA agent if the HSA runtime has one, else the emulator.
    #[default]
    Auto,
    /// The emulator.
    Emu,
    /// GPU agent `N` of the HSA runtime (in its order; `hsa` alone is 0).
    Hsa(usize),
}

/// A `--device` value that is none of `auto`, `emu`, `hsa`, `hsa:N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("device `{0}`: expected auto, emu, hsa or hsa:N (N the index of a GPU agent)")]
pub struct BadDeviceChoice(String);

impl FromStr for DeviceChoice {
    type Err = BadDeviceChoice;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim() {
            "auto" => Ok(DeviceChoice::Auto),
            "emu" => Ok(DeviceChoice::Emu),
            "hsa" => Ok(DeviceChoice::Hsa(0)),
            t => t
                .strip_prefix("hsa:")
                .and_then(|n| n.parse().ok())
                .map(DeviceChoice::Hsa)
                .ok_or_else(|| BadDeviceChoice(s.to_string())),
        }
    }
}

impl fmt::Display for DeviceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DeviceChoice::Auto => f.write_str("auto"),
            DeviceChoice::Emu => f.write_str("emu"),
            DeviceChoice::Hsa(n) => write!(f, "hsa:{n}"),
        }
    }
}

/// Why the device asked for could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum SelectError {
    /// The HSA runtime could not open the agent.
    #[error("opening HSA GPU agent {index}: {source}")]
    Hsa {
        /// The agent asked for.
        index: usize,
        /// Why.
        #[source]
        source: HsaError,
    },
    /// The agent is not a gfx950 (tilegen's code objects are for gfx950 only).
    #[error(
        "HSA GPU agent {index} is a `{name}`, not a {GFX950}: tilegen's kernels run on gfx950 (MI355X) only"
    )]
    NotGfx950 {
        /// The agent asked for.
        index: usize,
        /// Its name.
        name: String,
    },
}

/// The emulator or an HSA GPU, as one [`Device`].
pub enum AnyDevice {
    /// The emulated gfx950.
    Emu(EmuDevice),
    /// A GPU agent of an HSA runtime.
    Hsa(HsaDevice),
}

impl AnyDevice {
    /// The device's name (as [`Device::name`], without importing the trait).
    pub fn name(&self) -> String {
        self.inner().name()
    }

    /// The emulator, if that is the device.
    pub fn as_emu(&self) -> Option<&EmuDevice> {
        match self {
            AnyDevice::Emu(e) => Some(e),
            AnyDevice::Hsa(_) => None,
        }
    }

    /// The HSA device, if that is the device.
    pub fn as_hsa(&self) -> Option<&HsaDevice> {
        match self {
            AnyDevice::Emu(_) => None,
            AnyDevice::Hsa(h) => Some(h),
        }
    }

    fn inner(&self) -> &dyn Device {
        match self {
            AnyDevice::Emu(e) => e,
            AnyDevice::Hsa(h) => h,
        }
    }
}

impl Device for AnyDevice {
    fn name(&self) -> String {
        self.inner().name()
    }
    fn alloc(&self, bytes: u64) -> Result<DevicePtr, RuntimeError> {
        self.inner().alloc(bytes)
    }
    fn alloc_lazy(&self, bytes: u64) -> Result<DevicePtr, RuntimeError> {
        self.inner().alloc_lazy(bytes)
    }
    fn free(&self, ptr: DevicePtr) -> Result<(), RuntimeError> {
        self.inner().free(ptr)
    }
    fn copy_to_device(&self, dst: DevicePtr, src: &[u8]) -> Result<(), RuntimeError> {
        self.inner().copy_to_device(dst, src)
    }
    fn copy_from_device(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), RuntimeError> {
        self.inner().copy_from_device(src, dst)
    }
    fn load(&self, code_object: &[u8]) -> Result<Module, RuntimeError> {
        self.inner().load(code_object)
    }
    fn dispatch(
        &self,
        module: &Module,
        kernel: &str,
        config: &LaunchConfig,
        kernargs: &[u8],
    ) -> Result<Signal, RuntimeError> {
        self.inner().dispatch(module, kernel, config, kernargs)
    }
    fn wait(&self, signal: Signal) -> Result<LaunchReport, RuntimeError> {
        self.inner().wait(signal)
    }
}

/// The device a [`choose`] picked, and why.
pub struct Chosen {
    device: AnyDevice,
    reason: String,
}

impl Chosen {
    /// The device.
    pub fn device(&self) -> &AnyDevice {
        &self.device
    }

    /// The device, owned.
    pub fn into_device(self) -> AnyDevice {
        self.device
    }

    /// Which device and why (for `auto`: the gfx950 agent found, or why the HSA runtime
    /// offered none).
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

/// The index (among GPU agents) of the first gfx950 in `agents`.
pub fn first_gfx950(agents: &[AgentInfo]) -> Option<usize> {
    agents
        .iter()
        .filter(|a| a.is_gpu())
        .position(|a| a.name == GFX950)
}

fn describe(agent: &AgentInfo, index: usize, hsa: &HsaDevice) -> String {
    format!(
        "HSA GPU agent {index} `{}` ({} CUs) of {}",
        agent.name,
        agent.compute_units,
        hsa.library().display()
    )
}

fn open_hsa(index: usize, options: HsaOptions) -> Result<HsaDevice, SelectError> {
    let device = HsaDevice::open_with(options.agent(index))
        .map_err(|source| SelectError::Hsa { index, source })?;
    if device.agent().name != GFX950 {
        return Err(SelectError::NotGfx950 {
            index,
            name: device.agent().name.clone(),
        });
    }
    Ok(device)
}

/// Opens the device `choice` names. `auto` takes the first gfx950 agent of the HSA library
/// `hsa` names when the library loads, initializes and has one, else the emulator (built
/// with `emu`), and says which and why; `hsa:N` fails rather than fall back.
pub fn choose(
    choice: DeviceChoice,
    emu: EmuConfig,
    hsa: HsaOptions,
) -> Result<Chosen, SelectError> {
    match choice {
        DeviceChoice::Emu => Ok(Chosen {
            device: AnyDevice::Emu(EmuDevice::with_config(emu)),
            reason: "the gfx950 emulator, as asked (--device emu)".into(),
        }),
        DeviceChoice::Hsa(index) => {
            let device = open_hsa(index, hsa)?;
            let reason = format!(
                "{}, as asked (--device hsa:{index})",
                describe(device.agent(), index, &device)
            );
            Ok(Chosen {
                device: AnyDevice::Hsa(device),
                reason,
            })
        }
        DeviceChoice::Auto => {
            let library = hsa.library_path().to_path_buf();
            let why_not = match tilegen_hsa::agents(&library) {
                Err(e) => format!("no HSA GPU: {e}"),
                Ok(agents) => match first_gfx950(&agents) {
                    None => {
                        let gpus: Vec<&str> = agents
                            .iter()
                            .filter(|a| a.is_gpu())
                            .map(|a| a.name.as_str())
                            .collect();
                        format!(
                            "the HSA runtime `{}` has no {GFX950} agent (GPU agents: {})",
                            library.display(),
                            if gpus.is_empty() {
                                "none".to_string()
                            } else {
                                gpus.join(", ")
                            }
                        )
                    }
                    Some(index) => match open_hsa(index, hsa) {
                        Ok(device) => {
                            let reason = format!(
                                "{} (--device auto found it)",
                                describe(device.agent(), index, &device)
                            );
                            return Ok(Chosen {
                                device: AnyDevice::Hsa(device),
                                reason,
                            });
                        }
                        Err(e) => format!("the {GFX950} agent did not open: {e}"),
                    },
                },
            };
            Ok(Chosen {
                device: AnyDevice::Emu(EmuDevice::with_config(emu)),
                reason: format!("the gfx950 emulator (--device auto): {why_not}"),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn device_choices_parse() {
        assert_eq!("auto".parse(), Ok(DeviceChoice::Auto));
        assert_eq!("emu".parse(), Ok(DeviceChoice::Emu));
        assert_eq!("hsa".parse(), Ok(DeviceChoice::Hsa(0)));
        assert_eq!("hsa:3".parse(), Ok(DeviceChoice::Hsa(3)));
        for bad in ["", "gpu", "hsa:", "hsa:-1", "hsa:x", "emu:0"] {
            assert!(bad.parse::<DeviceChoice>().is_err(), "{bad}");
        }
        assert_eq!(DeviceChoice::Hsa(2).to_string(), "hsa:2");
    }

    #[test]
    fn auto_falls_back_to_the_emulator_saying_why() {
        let chosen = choose(
            DeviceChoice::Auto,
            EmuConfig::default(),
            HsaOptions::new().library("/nonexistent/libhsa-runtime64.so.1"),
        )
        .unwrap();
        assert!(chosen.device().as_emu().is_some());
        assert!(
            chosen.reason().contains("emulator") && chosen.reason().contains("/nonexistent"),
            "{}",
            chosen.reason()
        );
    }
}
