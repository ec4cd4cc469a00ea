//! Writes the listing (assembly) of every kernel of a fixed corpus into a directory, one file
//! per kernel, so a restructuring of the generator can be shown to leave every kernel
//! byte-identical: dump before, dump after, `diff -r`.
//!
//! The corpus: every valid spec of `templates/reference.toml`, every preshuffled-B flag
//! combination of a few tiles, every MoE spec the MoE templates' spaces allow, and every
//! attention spec (head group, head size, page size, split-KV, waves) the kernel supports.
//!
//! `cargo run --release --example dump_listings -- OUT_DIR [--quick] [--only PREFIX]`
//! (`--quick`: every 10th; `--only`: the kernels whose directory starts with `PREFIX`, e.g.
//! `attention`).

use std::path::{Path, PathBuf};

use rayon::prelude::*;
use tilegen::kernels::KernelSpec;
use tilegen::kernels::attention::AttentionSpec;
use tilegen::kernels::moe::MoeTemplate;

type Job = (
    String,
    Box<dyn Fn() -> Result<Vec<(String, String)>, String> + Send + Sync>,
);

fn gemm(spec: impl Into<KernelSpec>) -> Job {
    let spec: KernelSpec = spec.into();
    let name = spec.kernel_name();
    (
        format!("gemm/{name}"),
        Box::new(move || {
            let k = spec.build().map_err(|e| e.to_string())?;
            Ok(vec![(k.name().to_string(), k.asm().to_string())])
        }),
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let usage = "usage: dump_listings OUT_DIR [--quick] [--only PREFIX]";
    let out = PathBuf::from(args.next().ok_or(usage)?);
    let (mut quick, mut only) = (false, None);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--quick" => quick = true,
            "--only" => only = Some(args.next().ok_or(usage)?),
            _ => return Err(usage.into()),
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut jobs: Vec<Job> = Vec::new();

    let reference = tilegen_tune::Template::load(root.join("templates/reference.toml"))?;
    for spec in tilegen_tune::space::enumerate(&reference.space).specs {
        jobs.push(gemm(spec));
    }
    for base in [
        KernelSpec::preb(),
        KernelSpec::preb().bm(32).bn(128),
        KernelSpec::preb().bm(128).bn(256).bk_elems(512),
    ] {
        for spec in base.preb_flag_variants(3) {
            jobs.push(gemm(spec));
        }
    }
    for entry in std::fs::read_dir(root.join("templates/moe"))? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "toml") {
            continue;
        }
        let t: MoeTemplate = toml::from_str(&std::fs::read_to_string(&path)?)?;
        for (i, spec) in t.plan().specs.into_iter().enumerate() {
            jobs.push((
                format!("moe/{}-{i}", t.model.name),
                Box::new(move || {
                    let layer = spec.build().map_err(|e| e.to_string())?;
                    Ok(layer
                        .kernels()
                        .iter()
                        .map(|k| (k.name().to_string(), k.asm().to_string()))
                        .collect())
                }),
            ));
        }
    }
    for (group, d, page) in [1u32, 4, 8, 16]
        .into_iter()
        .flat_map(|g| [64u32, 128].map(|d| (g, d)))
        .flat_map(|(g, d)| [0u32, 16, 32, 64].map(|p| (g, d, p)))
    {
        for split in [1, 4] {
            for waves in 1..=4 {
                let spec = AttentionSpec::new(8 * group, 8, d, page)
                    .split_kv(split)
                    .waves(waves);
                if spec.validate().is_err() {
                    continue;
                }
                jobs.push((
                    format!("attention/{}", spec.kernel_name()),
                    Box::new(move || {
                        let k = spec.build().map_err(|e| e.to_string())?;
                        Ok(std::iter::once(k.main())
                            .chain(k.reduce())
                            .map(|b| (b.name().to_string(), b.asm().to_string()))
                            .collect())
                    }),
                ));
            }
        }
    }
    if let Some(prefix) = &only {
        jobs.retain(|(label, _)| label.starts_with(prefix.as_str()));
    }
    if quick {
        jobs = jobs.into_iter().step_by(10).collect();
    }
    let total = jobs.len();
    let failures: Vec<String> = jobs
        .par_iter()
        .filter_map(|(label, job)| {
            let listings = match job() {
                Ok(l) => l,
                Err(e) => return Some(format!("{label}: {e}")),
            };
            let dir = out.join(label);
            if let Err(e) = std::fs::create_dir_all(&dir) {
                return Some(format!("{label}: {e}"));
            }
            for (name, asm) in listings {
                // Written once into a directory made for this dump; not a user's output.
                if let Err(e) = std::fs::write(dir.join(format!("{name}.s")), asm) {
                    return Some(format!("{label}: {e}"));
                }
            }
            None
        })
        .collect();
    println!(
        "{} kernels' listings in {} ({} failed)",
        total - failures.len(),
        out.display(),
        failures.len()
    );
    for f in &failures {
        eprintln!("{f}");
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err("some kernels failed to build".into())
    }
}
