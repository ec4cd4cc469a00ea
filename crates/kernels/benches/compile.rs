//! Compile latency: spec -> loadable code object, in process, against Triton 3.9 compiling the
//! same tile (same BM, BN, BK, waves, 16x16x128 MFMAs) in the same run, plus a static report of
//! both kernels side by side.
//!
//! `cargo bench -p tilegen-kernels --bench compile [-- --quick] [--json FILE]`
//! Triton runs from the project's venv (`TILEGEN_VENV`, default `target/venv`); without it the
//! Triton column says why it is missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use tilegen_codeobj::CodeObject;
use tilegen_dsl::CompileOptions;
use tilegen_kernels::asm::LoopStats;
use tilegen_kernels::{KernelSpec, occupancy};

struct Static {
    /// `*` marks counts of the whole kernel (no loop holding MFMAs was found).
    whole: bool,
    loop_instructions: u32,
    loop_mfmas: u32,
    vgpr: u32,
    agpr: u32,
    sgpr: u32,
    lds: u32,
    occupancy: u32,
}

impl Static {
    fn row(&self) -> String {
        format!(
            "{:>5}{} {:>5} {:>5} {:>5} {:>4} {:>7} {:>4}",
            self.loop_instructions,
            if self.whole { "*" } else { " " },
            self.loop_mfmas,
            self.vgpr,
            self.agpr,
            self.sgpr,
            self.lds,
            self.occupancy
        )
    }
    fn json(&self) -> String {
        format!(
            "{{\"loop_instructions\":{},\"loop_mfmas\":{},\"vgpr\":{},\"agpr\":{},\"sgpr\":{},\"lds\":{},\"occupancy\":{}}}",
            self.loop_instructions,
            self.loop_mfmas,
            self.vgpr,
            self.agpr,
            self.sgpr,
            self.lds,
            self.occupancy
        )
    }
}

fn static_of(code_object: &[u8], asm: &str, dynamic_lds: u32) -> Static {
    let co = CodeObject::parse(code_object).expect("a code object this bench just made");
    let k = &co.kernels[0];
    let lp = LoopStats::from_asm(asm);
    let lds = k.descriptor.group_segment_fixed_size + dynamic_lds;
    Static {
        whole: !lp.found_loop,
        loop_instructions: lp.instructions,
        loop_mfmas: lp.mfmas,
        vgpr: k.meta.vgpr_count,
        agpr: k.meta.agpr_count,
        sgpr: k.meta.sgpr_count,
        lds,
        occupancy: occupancy(
            k.descriptor.allocated_vgprs(),
            k.descriptor.granulated_sgpr_count(),
            lds,
            k.meta.max_flat_workgroup_size,
        ),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Compiles `configs` with Triton `repeat` times each; per config the median seconds and the
/// static report, or why Triton could not run.
fn triton(configs: &[String], repeat: usize) -> Result<Vec<(f64, Static)>, String> {
    let venv = std::env::var_os("TILEGEN_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/venv"));
    let py = venv.join("bin/python");
    if !py.exists() {
        return Err(format!(
            "no Triton venv at {} (run cargo xtask setup)",
            venv.display()
        ));
    }
    let out = std::env::temp_dir().join(format!("tilegen-bench-triton-{}", std::process::id()));
    let cache = out.join("cache");
    let status = Command::new(&py)
        .arg(root().join("scripts/triton/mxfp4_gemm.py"))
        .args(["--repeat", &repeat.to_string()])
        .arg(&out)
        .args(configs)
        .env("TRITON_CACHE_DIR", &cache)
        .status()
        .map_err(|e| format!("running Triton: {e}"))?;
    if !status.success() {
        return Err(format!("Triton failed: {status}"));
    }
    let mut results = Vec::new();
    for cfg in configs {
        let (tile, rest) = cfg.split_once(':').ok_or("config")?;
        let (warps, nk) = rest.split_once(':').ok_or("config")?;
        let t: Vec<&str> = tile.split('x').collect();
        let dir = out.join(format!("bm{}_bn{}_bk{}_w{warps}_nk{nk}", t[0], t[1], t[2]));
        let meta: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("meta.json")).map_err(|e| e.to_string())?,
        )
        .map_err(|e| e.to_string())?;
        let times: Vec<f64> = meta["compile_seconds_all"]
            .as_array()
            .ok_or("times")?
            .iter()
            .filter_map(|v| v.as_f64())
            .collect();
        // The first compile in a fresh process pays Triton's warm-up; compare warm compiles.
        let warm = if times.len() > 1 {
            times[1..].to_vec()
        } else {
            times
        };
        let hsaco = std::fs::read(dir.join("kernel.hsaco")).map_err(|e| e.to_string())?;
        let asm = std::fs::read_to_string(dir.join("kernel.s")).map_err(|e| e.to_string())?;
        // Triton allocates LDS dynamically at launch; its size is in the metadata.
        let dynamic_lds = meta["lds_bytes"].as_u64().unwrap_or(0) as u32;
        results.push((median(warm), static_of(&hsaco, &asm, dynamic_lds)));
    }
    let _ = std::fs::remove_dir_all(&out);
    Ok(results)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // `cargo test --all-targets` runs benches without `--bench`: a short smoke pass then.
    let smoke = !args.iter().any(|a| a == "--bench");
    let quick = smoke || args.iter().any(|a| a == "--quick");
    let json_out = args
        .iter()
        .position(|a| a == "--json")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let repeat = if quick { 3 } else { 7 };
    let specs: Vec<(&str, KernelSpec)> = vec![
        ("preb default", KernelSpec::new().into()),
        (
            "preb all flags",
            KernelSpec::new()
                .with_prefetch(|p| p.cluster_drain_sched(true).deep_prime(true))
                .dram_to_lds(true)
                .into(),
        ),
        (
            "preb 128x128x256 wn32",
            KernelSpec::new()
                .bm(128)
                .bn(128)
                .bk_elems(256)
                .wn(32)
                .into(),
        ),
        (
            "lds default",
            KernelSpec::lds()
                .mma(tilegen_kernels::MfmaShape::M16N16K128)
                .into(),
        ),
    ];
    // Warm the target machine once, as a long-running generator would be.
    let _ = KernelSpec::new().build_with(CompileOptions::default());
    let mut ours = Vec::new();
    for (name, spec) in &specs {
        let mut times = Vec::new();
        for _ in 0..repeat {
            let t = Instant::now();
            let k = spec
                .build_with(CompileOptions::default())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            times.push(t.elapsed().as_secs_f64());
            std::hint::black_box(k);
        }
        let full = spec.build().unwrap_or_else(|e| panic!("{name}: {e}"));
        ours.push((median(times), static_of(full.code_object(), full.asm(), 0)));
    }
    let configs: Vec<String> = specs
        .iter()
        .map(|(_, s)| format!("{}x{}x{}:{}:16", s.bm, s.bn, s.bk_elems, s.warps()))
        .collect();
    let peer = if smoke {
        Err("skipped in the test-mode smoke pass".to_string())
    } else {
        triton(&configs, repeat.min(4))
    };
    println!(
        "\ncompile latency, spec -> loadable code object (median of {repeat}; Triton: warm compiles)"
    );
    println!(
        "{:<24} {:>10} {:>10} {:>8}",
        "kernel", "tilegen", "triton", "speedup"
    );
    let mut json = Vec::new();
    for (i, (name, _)) in specs.iter().enumerate() {
        let (t_ours, _) = &ours[i];
        let (t_peer, ratio) = match &peer {
            Ok(p) => (
                format!("{:.1} ms", p[i].0 * 1e3),
                format!("{:.1}x", p[i].0 / t_ours),
            ),
            Err(_) => ("-".into(), "-".into()),
        };
        println!(
            "{:<24} {:>7.1} ms {:>10} {:>8}",
            name,
            t_ours * 1e3,
            t_peer,
            ratio
        );
    }
    if let Err(e) = &peer {
        println!("Triton unavailable: {e}");
    }
    println!(
        "\nstatic report (main loop: instructions, MFMAs [* = whole kernel, no loop found]; registers; LDS bytes; waves/SIMD)"
    );
    println!(
        "{:<24} {:<9} {:>5} {:>5} {:>5} {:>5} {:>4} {:>7} {:>4}",
        "kernel", "compiler", "loop", "mfma", "vgpr", "agpr", "sgpr", "lds", "occ"
    );
    for (i, (name, spec)) in specs.iter().enumerate() {
        println!("{:<24} {:<9} {}", name, "tilegen", ours[i].1.row());
        let peer_json = match &peer {
            Ok(p) => {
                println!("{:<24} {:<9} {}", "", "triton", p[i].1.row());
                format!(
                    ",\"triton_ms\":{:.3},\"triton\":{}",
                    p[i].0 * 1e3,
                    p[i].1.json()
                )
            }
            Err(_) => String::new(),
        };
        json.push(format!(
            "{{\"kernel\":\"{name}\",\"spec\":\"{}\",\"tilegen_ms\":{:.3},\"tilegen\":{}{peer_json}}}",
            spec.kernel_name(),
            ours[i].0 * 1e3,
            ours[i].1.json()
        ));
    }
    if let Some(path) = json_out {
        tilegen_output::Output::check(&path)
            .and_then(|o| o.write(format!("[{}]\n", json.join(",\n")).as_bytes()))
            .expect("writing the JSON report");
    }
}
