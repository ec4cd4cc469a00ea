//! Loaded kernels are handles (load once, launch many times, unloaded on drop) and device
//! buffers are freed on every path, a failed upload included.

use tilegen::KernelSpec;
use tilegen::mx::MxMatrix;
use tilegen::runtime::{EmuConfig, EmuDevice, Limits, RuntimeError};

#[test]
fn a_module_is_loaded_once_launched_many_times_and_unloaded_on_drop() {
    let k = KernelSpec::new().build().unwrap();
    let dev = EmuDevice::new();
    assert_eq!(dev.allocation_count().unwrap(), 0);
    let module = k.load(&dev).unwrap();
    assert_eq!(dev.allocation_count().unwrap(), 1, "one image");
    let a = MxMatrix::random(17, 512, 1).unwrap();
    let b = MxMatrix::random(144, 512, 2).unwrap();
    let x = k.prepare_inputs(&a, &b).unwrap();
    let first = k.run_loaded(&dev, &module, &x).unwrap().0;
    let clone = module.clone();
    drop(module);
    let second = k.run_loaded(&dev, &clone, &x).unwrap().0;
    assert_eq!(first, second);
    assert_eq!(
        dev.allocation_count().unwrap(),
        1,
        "buffers freed after each run"
    );
    drop(clone);
    assert_eq!(
        dev.allocation_count().unwrap(),
        0,
        "the image is freed with the last clone"
    );
    // A module of another device is refused.
    let other = EmuDevice::new();
    let foreign = k.load(&other).unwrap();
    let e = k.run_loaded(&dev, &foreign, &x).unwrap_err();
    assert!(
        matches!(
            &e,
            tilegen::kernels::LaunchError::Runtime(RuntimeError::ForeignModule)
        ),
        "{e}"
    );
}

#[test]
fn buffers_are_freed_when_an_upload_fails() {
    let k = KernelSpec::new().build().unwrap();
    let a = MxMatrix::random(64, 7168, 1).unwrap();
    let b = MxMatrix::random(1024, 7168, 2).unwrap();
    let x = k.prepare_inputs(&a, &b).unwrap();
    // Room for the image, C and A, but not for B (3.5 MiB).
    let dev = EmuDevice::with_config(EmuConfig {
        limits: Limits {
            max_memory: 2 << 20,
            ..Limits::default()
        },
        ..EmuConfig::default()
    });
    let module = k.load(&dev).unwrap();
    let e = k.run_loaded(&dev, &module, &x).unwrap_err();
    assert!(
        matches!(
            &e,
            tilegen::kernels::LaunchError::Runtime(RuntimeError::Alloc { .. })
        ),
        "{e}"
    );
    assert_eq!(dev.allocation_count().unwrap(), 1, "only the image is left");
}
