//! tilegen's HSA device against Debian's ROCm runtime (`libhsa-runtime64-1`, ROCm 5.2, which
//! `cargo xtask setup` installs): it loads, every function `HsaDevice` calls resolves, and on a
//! machine without an AMD GPU driver `hsa_init` fails with a clear error naming the status; the
//! command line explains it (`tilegen devices`) and `--device auto` falls back to the emulator
//! saying why.

mod hsa_common;

use std::path::Path;
use std::process::Command;

use tilegen::runtime::hsa::{self, HsaError, sys};
use tilegen::runtime::select::first_gfx950;
use tilegen::runtime::{HsaDevice, HsaOptions};

use hsa_common::{DEBIAN_HSA, emulated_hsa};

fn debian() -> &'static Path {
    let p = Path::new(DEBIAN_HSA);
    assert!(
        p.exists(),
        "{DEBIAN_HSA} is missing: `cargo xtask setup` installs Debian's libhsa-runtime64-1"
    );
    p
}

/// What `hsa_init` of Debian's runtime does here: fail (no GPU driver), or find agents none
/// of which is a gfx950 (ROCm 5.2 predates it).
fn init_outcome() -> Result<Vec<hsa::AgentInfo>, HsaError> {
    hsa::agents(debian())
}

#[test]
fn debians_runtime_loads_and_every_needed_function_resolves() {
    let api = sys::Api::load(debian()).expect("loading Debian's libhsa-runtime64");
    assert_eq!(api.path(), debian());
    assert_eq!(sys::SYMBOLS.len(), 32);
    // A status string is available without a GPU.
    assert!(
        api.status_text(0x1008)
            .contains("HSA_STATUS_ERROR_OUT_OF_RESOURCES")
    );
}

#[test]
fn hsa_init_fails_with_a_clear_error_naming_the_status() {
    let e = match HsaDevice::open_with(HsaOptions::new().library(debian())) {
        Ok(d) => panic!("Debian's runtime opened a GPU: {}", d.agent().name),
        Err(e) => e,
    };
    match init_outcome() {
        Err(_) => {
            let HsaError::Status { call, status, text } = &e else {
                panic!("{e}")
            };
            assert_eq!(*call, "hsa_init");
            // Without /dev/kfd ROCm 5.2 reports HSA_STATUS_ERROR_OUT_OF_RESOURCES.
            assert_eq!(*status, sys::STATUS_ERROR_OUT_OF_RESOURCES, "{e}");
            assert!(
                text.starts_with("HSA_STATUS_ERROR_OUT_OF_RESOURCES"),
                "{text}"
            );
            let shown = e.to_string();
            assert!(
                shown.starts_with(
                    "hsa_init failed with status 0x1008: HSA_STATUS_ERROR_OUT_OF_RESOURCES"
                ),
                "{shown}"
            );
        }
        // A machine with a driver: the runtime initializes but has no gfx950.
        Ok(agents) => assert!(first_gfx950(&agents).is_none(), "{agents:?}"),
    }
}

fn tilegen(args: &[&str], library: Option<&Path>) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tilegen"));
    cmd.args(args);
    match library {
        Some(l) => cmd.env(sys::LIBRARY_ENV, l),
        None => cmd.env_remove(sys::LIBRARY_ENV),
    };
    let out = cmd.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tilegen_devices_explains_what_it_finds() {
    // The default library is Debian's (the dynamic loader finds libhsa-runtime64.so.1).
    let (ok, out, err) = tilegen(&["devices"], None);
    assert!(ok, "{err}");
    assert!(out.contains("HSA runtime libhsa-runtime64.so.1"), "{out}");
    if init_outcome().is_err() {
        assert!(
            out.contains("hsa_init failed with status 0x1008") && out.contains("no amdgpu driver"),
            "{out}"
        );
    }
    assert!(
        out.contains("--device auto picks: emu (the gfx950 emulator)"),
        "{out}"
    );
    let (ok, out, _) = tilegen(&["devices", "--json"], None);
    assert!(ok);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["auto"], "emu");
    // No library at all.
    let (ok, out, _) = tilegen(&["devices"], Some(Path::new("/nonexistent/libhsa.so")));
    assert!(ok);
    assert!(
        out.contains("cannot open shared object file") && out.contains("TILEGEN_HSA_LIB"),
        "{out}"
    );
    // The emulated runtime has a gfx950 with 256 CUs, which auto would take.
    let (ok, out, err) = tilegen(&["devices"], Some(emulated_hsa()));
    assert!(ok, "{err}");
    assert!(
        out.contains("hsa:0  GPU gfx950   256 CUs") && out.contains("--device auto picks: hsa:0"),
        "{out}"
    );
}

#[test]
fn device_auto_falls_back_to_the_emulator_saying_why() {
    let gemm = [
        "gemm", "--m", "17", "--n", "144", "--k", "512", "--device", "auto",
    ];
    let (ok, out, err) = tilegen(&gemm, None);
    assert!(ok, "{err}");
    assert!(
        err.contains("device: the gfx950 emulator (--device auto): no HSA GPU: hsa_init failed with status 0x1008")
            || init_outcome().is_ok(),
        "{err}"
    );
    assert!(out.contains("on the gfx950 emulator"), "{out}");
    // Through the emulated runtime auto takes its gfx950 agent, and the GEMM checks out.
    let (ok, out, err) = tilegen(&gemm, Some(emulated_hsa()));
    assert!(ok, "{err}");
    assert!(
        err.contains("device: HSA GPU agent 0 `gfx950` (256 CUs)"),
        "{err}"
    );
    assert!(out.contains("0 of 2448 elements mismatch"), "{out}");
    // An explicit HSA agent that cannot be opened is an error, not a fallback.
    let (ok, _, err) = tilegen(
        &[
            "gemm", "--m", "17", "--n", "144", "--k", "512", "--device", "hsa:1",
        ],
        Some(emulated_hsa()),
    );
    assert!(!ok);
    assert!(err.contains("there is no GPU agent 1"), "{err}");
    let (ok, _, err) = tilegen(
        &[
            "gemm", "--m", "17", "--n", "144", "--k", "512", "--device", "hsa",
        ],
        None,
    );
    assert!(!ok);
    assert!(
        err.contains("opening HSA GPU agent 0: hsa_init failed") || init_outcome().is_ok(),
        "{err}"
    );
    let (ok, _, err) = tilegen(
        &[
            "gemm", "--m", "17", "--n", "144", "--k", "512", "--device", "gpu",
        ],
        None,
    );
    assert!(!ok);
    assert!(err.contains("expected auto, emu, hsa or hsa:N"), "{err}");
}
