//! Runs an MXFP4 GEMM kernel on whatever device `auto` picks: an MI355X through the HSA
//! runtime when there is one (ROCm's libhsa-runtime64, or `$TILEGEN_HSA_LIB`), else the
//! emulator; then checks it against the CPU reference.
//!
//! `cargo run --release --example run_on_device`
use tilegen::KernelSpec;
use tilegen::mx::{MxMatrix, reference_gemm};
use tilegen::runtime::{DeviceChoice, EmuConfig, HsaOptions, choose};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (m, n, k) = (64, 512, 1024);
    let kernel = KernelSpec::new().b_prefetch(true).build()?;
    let chosen = choose(DeviceChoice::Auto, EmuConfig::default(), HsaOptions::new())?;
    println!("running {} on {}", kernel.name(), chosen.reason());
    let device = chosen.device();
    let module = kernel.load(device)?; // load once, launch as often as needed
    let a = MxMatrix::random(m, k, 1)?;
    let b = MxMatrix::random(n, k, 2)?;
    let inputs = kernel.prepare_inputs(&a, &b)?; // preshuffled the way the kernel reads them
    let (c, report) = kernel.run_loaded(device, &module, &inputs)?;
    let check = c.compare(&reference_gemm(&a, &b)?)?;
    println!(
        "{m}x{n}x{k} in {:.3} ms: {check}",
        report.wall.as_secs_f64() * 1e3
    );
    if !check.passed() {
        return Err(format!("the result disagrees with the reference: {check}").into());
    }
    Ok(())
}
