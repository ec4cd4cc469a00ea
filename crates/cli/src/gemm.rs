//! `tilegen gemm`: the main job. Build a kernel for a spec, run it on random MXFP4 inputs on the
//! default device (the emulator), check it against the CPU reference, report.

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Args;
use tilegen::kernels::{GemmInputs, OutDtype};
use tilegen::mx::{MxMatrix, reference_gemm};
use tilegen::runtime::EmuDevice;

use crate::spec::SpecArgs;

#[derive(Args)]
pub struct GemmArgs {
    /// Rows of A and C.
    #[arg(long)]
    m: usize,
    /// Rows of B, columns of C (a multiple of 16).
    #[arg(long)]
    n: usize,
    /// Reduction length (a multiple of 256).
    #[arg(long)]
    k: usize,
    #[command(flatten)]
    spec: SpecArgs,
    /// Seed of the random inputs.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Leave kernel.hsaco, kernel.s, kernel.ll, report.json, the inputs (a.bin, b.bin, sfa.bin,
    /// sfb.bin, row-major before any preshuffle) and the result c.bin here.
    #[arg(long)]
    emit_dir: Option<PathBuf>,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
}

pub fn run(a: GemmArgs) -> Result<()> {
    let spec = a.spec.spec();
    let t = Instant::now();
    let kernel = spec
        .build()
        .with_context(|| format!("building {}", spec.kernel_name()))?;
    let build_s = t.elapsed().as_secs_f64();
    let am = MxMatrix::random(a.m, a.k, a.seed).context("making A")?;
    let bm = MxMatrix::random(a.n, a.k, a.seed ^ 0x9e37_79b9_7f4a_7c15).context("making B")?;
    let t = Instant::now();
    let inputs = GemmInputs::new(spec.variant, &am, &bm).context("preparing inputs")?;
    let prep_s = t.elapsed().as_secs_f64();
    let device = EmuDevice::new();
    let (c, report) = kernel
        .run(&device, &inputs)
        .with_context(|| format!("running {}", kernel.name))?;
    let t = Instant::now();
    let reference = reference_gemm(&am, &bm).context("reference GEMM")?;
    let cmp = match spec.out_dtype {
        OutDtype::Bf16 => {
            let got: Vec<half::bf16> = c
                .chunks_exact(2)
                .map(|b| half::bf16::from_le_bytes([b[0], b[1]]))
                .collect();
            reference.compare_bf16(&got)?
        }
        OutDtype::F32 => {
            let got: Vec<f32> = c
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            reference.compare_f32(&got)?
        }
    };
    let ref_s = t.elapsed().as_secs_f64();
    let stats = report.stats.clone().unwrap_or_default();
    let flops = 2.0 * a.m as f64 * a.n as f64 * a.k as f64;
    let summary = serde_json::json!({
        "problem": {"m": a.m, "n": a.n, "k": a.k, "seed": a.seed},
        "kernel": kernel.name,
        "spec": kernel.spec,
        "cache_key": kernel.cache_key,
        "device": "gfx950 emulator",
        "grid": kernel.grid(a.m, a.n),
        "block": kernel.spec.threads(),
        "report": kernel.report,
        "main_loop": tilegen::kernels::asm::LoopStats::from_asm(&kernel.asm),
        "timings": {
            "build_ms": build_s * 1e3,
            "compile_ms": kernel.timings.total().as_secs_f64() * 1e3,
            "prepare_ms": prep_s * 1e3,
            "emulate_ms": report.wall.as_secs_f64() * 1e3,
            "reference_ms": ref_s * 1e3,
        },
        "emulator": stats,
        "check": {
            "passed": cmp.passed(),
            "elements": cmp.elements,
            "mismatches": cmp.mismatches,
            "summary": cmp.to_string(),
        },
    });
    if let Some(dir) = &a.emit_dir {
        emit(dir, &kernel, &am, &bm, &c, &summary)?;
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&summary)?);
    } else {
        println!("MXFP4 GEMM {}x{}x{} on the gfx950 emulator", a.m, a.n, a.k);
        crate::report::print_report(&kernel);
        let grid = kernel.grid(a.m, a.n);
        println!(
            "  grid {}x{} workgroups of {} work-items; emulated in {:.3} s: {} wave-instructions, {} MFMAs ({:.1} GFLOP)",
            grid[0],
            grid[1],
            kernel.spec.threads(),
            report.wall.as_secs_f64(),
            stats["wave_instructions"],
            stats["mfma"],
            flops / 1e9
        );
        println!("  check against the CPU reference: {cmp}");
        if let Some(dir) = &a.emit_dir {
            println!("  wrote kernel, inputs and result to {}", dir.display());
        }
    }
    if !cmp.passed() {
        bail!("the result disagrees with the reference: {cmp}");
    }
    Ok(())
}

fn emit(
    dir: &Path,
    kernel: &tilegen::CompiledKernel,
    a: &MxMatrix,
    b: &MxMatrix,
    c: &[u8],
    summary: &serde_json::Value,
) -> Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let files: [(&str, &[u8]); 9] = [
        ("kernel.hsaco", &kernel.code_object),
        ("kernel.s", kernel.asm.as_bytes()),
        ("kernel.ll", kernel.ir.as_bytes()),
        ("a.bin", a.data()),
        ("b.bin", b.data()),
        ("sfa.bin", a.scales()),
        ("sfb.bin", b.scales()),
        ("c.bin", c),
        ("report.json", &[]),
    ];
    for (name, bytes) in files {
        let path = dir.join(name);
        let bytes = if name == "report.json" {
            serde_json::to_vec_pretty(summary)?
        } else {
            bytes.to_vec()
        };
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}
