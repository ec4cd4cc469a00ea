//! `tilegen devices` and `--device auto|emu|hsa[:N]`: which device runs the kernels.
//!
//! `auto` takes the first gfx950 agent of the HSA runtime (`libhsa-runtime64.so.1`, or the
//! library `$TILEGEN_HSA_LIB` names) when the runtime loads, initializes and has one; else the
//! emulator. The choice and its reason go to stderr, so `--json` output stays clean.

use anyhow::Result;
use clap::Args;
use tilegen::runtime::hsa::{self, AgentInfo, DeviceType};
use tilegen::runtime::select::{DeviceChoice, GFX950, first_gfx950};

/// The `--device` flag.
#[derive(Args, Clone, Copy)]
pub struct DeviceArgs {
    /// Where kernels run: auto (a gfx950 GPU through the HSA runtime if there is one, else the
    /// emulator), emu, or hsa[:N] (GPU agent N of the HSA runtime; $TILEGEN_HSA_LIB overrides
    /// the library). `tilegen devices` lists what there is.
    #[arg(long, default_value = "auto", value_name = "auto|emu|hsa[:N]")]
    pub device: DeviceChoice,
}

#[derive(Args)]
pub struct DevicesArgs {
    /// Print the list as JSON.
    #[arg(long)]
    json: bool,
}

fn kind(a: &AgentInfo) -> &'static str {
    match a.device_type {
        DeviceType::Cpu => "CPU",
        DeviceType::Gpu => "GPU",
        DeviceType::Other(_) => "other",
    }
}

/// `tilegen devices`: the HSA runtime's agents (or why there are none) and the emulator.
pub fn devices(a: DevicesArgs) -> Result<()> {
    let library = hsa::sys::default_library();
    let agents = hsa::agents(&library);
    let auto = match &agents {
        Ok(list) => match first_gfx950(list) {
            Some(i) => format!("hsa:{i}"),
            None => "emu".to_string(),
        },
        Err(_) => "emu".to_string(),
    };
    if a.json {
        let hsa = match &agents {
            Ok(list) => serde_json::json!({
                "library": library,
                "agents": list.iter().map(|g| serde_json::json!({
                    "name": g.name,
                    "product": g.product,
                    "type": kind(g),
                    "compute_units": g.compute_units,
                    "device_memory_bytes": g.device_memory(),
                })).collect::<Vec<_>>(),
            }),
            Err(e) => serde_json::json!({
                "library": library,
                "error": e.to_string(),
                "status": e.status(),
            }),
        };
        let v = serde_json::json!({
            "hsa": hsa,
            "emulator": {"name": "gfx950 emulator", "available": true},
            "auto": auto,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    println!("HSA runtime {}:", library.display());
    match &agents {
        Err(e) => {
            println!("  no agents: {e}");
            if e.status() == Some(hsa::sys::STATUS_ERROR_OUT_OF_RESOURCES) {
                println!(
                    "  (hsa_init fails this way when there is no AMD GPU or no amdgpu driver: /dev/kfd)"
                );
            }
        }
        Ok(list) => {
            let mut gpu = 0;
            for g in list {
                let index = if g.is_gpu() {
                    gpu += 1;
                    format!("hsa:{}", gpu - 1)
                } else {
                    "-".to_string()
                };
                println!(
                    "  {index:<6} {} {:<8} {} CUs, {:.1} GiB device memory{}",
                    kind(g),
                    g.name,
                    g.compute_units,
                    g.device_memory() as f64 / (1u64 << 30) as f64,
                    if g.product.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", g.product)
                    }
                );
            }
            if first_gfx950(list).is_none() {
                println!("  no {GFX950} agent: tilegen's kernels need one");
            }
        }
    }
    println!("emu    the gfx950 emulator (always available)");
    println!(
        "--device auto picks: {auto}{}",
        if auto == "emu" {
            " (the gfx950 emulator)"
        } else {
            ""
        }
    );
    Ok(())
}
