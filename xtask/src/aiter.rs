//! The AITER corpus: AMD's hand-written gfx950 MXFP4 GEMM kernels (f4gemm) and their
//! MI355X-measured times, from the MIT-licensed `amd-aiter` wheel on PyPI.
//!
//! `setup` downloads the pinned wheel (hash-checked) into `target/aiter/wheel/`, extracts the
//! f4gemm code objects with their index, the a4w4 GEMM tables, the fused-MoE 2-stage code
//! objects with their indexes (`fmoe_2stages`) and their tuned table, and AMD's license under
//! the wheel's own paths into `target/aiter/` (each file written to a temporary name and
//! renamed), then writes `VERSION` and `STATUS` (`ok`). A corpus extracted before a member was
//! added to the list is extracted again (`VERSION` and `STATUS` alone do not make it current). When PyPI cannot be reached it writes
//! `STATUS: unavailable: ...` instead and the tests that need the corpus fail unless
//! `TILEGEN_ALLOW_SKIP=1`, as for the Triton corpus. Everything stays under `target/`: AMD's
//! files are never committed.

use std::env;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::{Result, root, run, step, venv_python};

/// The pinned wheel: the kernels and the measured table evidence is judged against.
const AITER_VERSION: &str = "0.1.7.post2.dev18";
/// Its PyPI project.
const AITER_PROJECT: &str = "amd-aiter";
/// SHA-256 of `amd_aiter-0.1.7.post2.dev18-py3-none-any.whl` (pip refuses any other file).
const AITER_WHEEL_SHA256: &str = "fe139d74438217c35e87e3b961166bac8db2d381eadccb371da2e63615f05a31";
/// The f4gemm kernels and their index inside the wheel (only `*.co` and `*.csv` are taken).
const KERNEL_PREFIX: &str = "aiter_meta/hsa/gfx950/f4gemm/";
/// The fused-MoE 2-stage asm kernels and their indexes (only `*.co` and `*.csv` are taken).
const FMOE_PREFIX: &str = "aiter_meta/hsa/gfx950/fmoe_2stages/";
/// Kernel directories taken from the wheel.
const KERNEL_PREFIXES: [&str; 2] = [KERNEL_PREFIX, FMOE_PREFIX];
/// Single files taken from the wheel: the tuned and untuned a4w4 GEMM tables, the tuned
/// fused-MoE table and the license.
fn wheel_files() -> [String; 4] {
    [
        "aiter/configs/a4w4_blockscale_tuned_gemm.csv".into(),
        "aiter/configs/a4w4_blockscale_untuned_gemm.csv".into(),
        "aiter/configs/tuned_fmoe.csv".into(),
        format!("amd_aiter-{AITER_VERSION}.dist-info/LICENSE"),
    ]
}

/// Files a complete corpus holds: the single files and each kernel directory's index.
fn required_files() -> Vec<String> {
    wheel_files()
        .into_iter()
        .chain([
            format!("{KERNEL_PREFIX}f4gemm_bf16_per1x32Fp4.csv"),
            format!("{FMOE_PREFIX}fmoe_stage1_bf16_pertokenFp8_g1u1.csv"),
        ])
        .collect()
}

/// The required files `dir` lacks.
fn missing_files(dir: &Path) -> Vec<String> {
    required_files()
        .into_iter()
        .filter(|f| !dir.join(f).is_file())
        .collect()
}

/// Where the corpus lives: `TILEGEN_AITER_DIR`, else `target/aiter`.
pub fn aiter_dir() -> PathBuf {
    env::var_os("TILEGEN_AITER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/aiter"))
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    fs::write(path, text).map_err(|e| format!("writing {}: {e}", path.display()))
}

/// Downloads and extracts the corpus unless `VERSION` and `STATUS` say this version is there.
pub fn setup_aiter() -> Result<()> {
    let dir = aiter_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let (status_file, version_file) = (dir.join("STATUS"), dir.join("VERSION"));
    let version = format!("{AITER_PROJECT}=={AITER_VERSION}\n");
    if fs::read_to_string(&version_file).ok().as_deref() == Some(version.as_str())
        && fs::read_to_string(&status_file).ok().as_deref() == Some("ok\n")
        && missing_files(&dir).is_empty()
    {
        step("AITER corpus: up to date");
        return Ok(());
    }
    // Whatever is there is stale or partial until the end of this function says otherwise.
    for f in [&status_file, &version_file] {
        if let Err(e) = fs::remove_file(f)
            && e.kind() != io::ErrorKind::NotFound
        {
            return Err(format!("removing {}: {e}", f.display()));
        }
    }
    let wheel_dir = dir.join("wheel");
    let wheel = match find_wheel(&wheel_dir) {
        Some(w) => w,
        None => {
            step(&format!(
                "downloading {AITER_PROJECT}=={AITER_VERSION} (AMD's f4gemm kernels, MIT) into {}",
                wheel_dir.display()
            ));
            if !download(&wheel_dir)? {
                eprintln!("!!! PyPI is unreachable: AITER corpus checks will be SKIPPED");
                return write_file(&status_file, "unavailable: PyPI unreachable\n");
            }
            find_wheel(&wheel_dir).ok_or_else(|| {
                format!(
                    "pip reported success but {} holds no amd_aiter-{AITER_VERSION} wheel",
                    wheel_dir.display()
                )
            })?
        }
    };
    step(&format!(
        "extracting the AITER corpus from {}",
        wheel.display()
    ));
    let count = extract(&wheel, &dir)?;
    step(&format!("AITER corpus: {count} files in {}", dir.display()));
    write_file(&version_file, &version)?;
    write_file(&status_file, "ok\n")
}

fn find_wheel(dir: &Path) -> Option<PathBuf> {
    let prefix = format!("amd_aiter-{AITER_VERSION}-");
    fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with(&prefix) && n.ends_with(".whl"))
        })
}

/// A Python with pip: the Triton venv's (setup made it), else the system's.
fn python() -> PathBuf {
    let venv = venv_python();
    if venv.exists() {
        venv
    } else {
        PathBuf::from("python3")
    }
}

/// `pip download`s the pinned, hash-checked wheel into `dir`. `Ok(false)`: PyPI unreachable.
fn download(dir: &Path) -> Result<bool> {
    fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let requirements = dir.join("requirements.txt");
    write_file(
        &requirements,
        &format!("{AITER_PROJECT}=={AITER_VERSION} --hash=sha256:{AITER_WHEEL_SHA256}\n"),
    )?;
    let py = python();
    let pip = crate::pip(&py)?
        .args([
            "download",
            "-q",
            "--no-deps",
            "--only-binary=:all:",
            "--require-hashes",
            "-r",
        ])
        .arg(&requirements)
        .arg("-d")
        .arg(dir)
        .status();
    if matches!(pip, Ok(s) if s.success()) {
        return Ok(true);
    }
    // Only an unreachable index excuses the corpus; any other failure stops setup.
    if crate::pypi_reachable(&py)? {
        return Err(format!(
            "pip download {AITER_PROJECT}=={AITER_VERSION} failed although PyPI is reachable \
             (a hash mismatch means PyPI serves a different file than the one pinned; {} on the \
             disk of {})",
            crate::free_space(dir),
            dir.display()
        ));
    }
    Ok(false)
}

/// Whether a wheel member belongs to the corpus.
fn wanted(name: &str) -> bool {
    for prefix in KERNEL_PREFIXES {
        if let Some(file) = name.strip_prefix(prefix) {
            return !file.contains('/') && (file.ends_with(".co") || file.ends_with(".csv"));
        }
    }
    wheel_files().iter().any(|f| f == name)
}

/// Extracts the corpus members of `wheel` under `dir`, each atomically; returns how many.
fn extract(wheel: &Path, dir: &Path) -> Result<usize> {
    let file = fs::File::open(wheel).map_err(|e| format!("opening {}: {e}", wheel.display()))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| format!("reading {} as a zip archive: {e}", wheel.display()))?;
    let mut count = 0;
    let mut kernels = 0;
    for i in 0..archive.len() {
        let mut member = archive
            .by_index(i)
            .map_err(|e| format!("{}: member {i}: {e}", wheel.display()))?;
        let name = member
            .name()
            .map_err(|e| format!("{}: member {i}: {e}", wheel.display()))?
            .into_owned();
        if !member.is_file() || !wanted(&name) {
            continue;
        }
        // `enclosed_name` refuses absolute paths and `..`: nothing lands outside `dir`.
        let relative = member
            .enclosed_name()
            .ok_or_else(|| format!("{}: unsafe member path {name:?}", wheel.display()))?;
        let target = dir.join(relative);
        let parent = target.parent().unwrap_or(dir);
        fs::create_dir_all(parent).map_err(|e| format!("creating {}: {e}", parent.display()))?;
        let temp = parent.join(format!(
            ".{}.{}.tmp",
            target
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            std::process::id()
        ));
        let written = (|| -> io::Result<()> {
            let mut out = fs::File::create(&temp)?;
            io::copy(&mut member, &mut out)?;
            out.flush()?;
            out.sync_all()?;
            fs::rename(&temp, &target)
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&temp);
            return Err(format!("extracting {name} to {}: {e}", target.display()));
        }
        count += 1;
        if name.ends_with(".co") {
            kernels += 1;
        }
    }
    let missing = missing_files(dir);
    if !missing.is_empty() || kernels == 0 {
        return Err(format!(
            "{} lacks {} ({kernels} kernels found): not the wheel the corpus expects",
            wheel.display(),
            if missing.is_empty() {
                "kernels".to_string()
            } else {
                missing.join(", ")
            }
        ));
    }
    Ok(count)
}

/// `cargo xtask calibrate [--out DIR]`: makes sure the corpus is there, then runs the
/// calibration harness (`tilegen-aiter`'s `aiter-calibrate`), which prints the predictors'
/// error tables and writes the CSV and plots (default `target/calibrate`).
pub fn calibrate(extra: &[String]) -> Result<()> {
    setup_aiter()?;
    step("calibrating time predictors against AMD's MI355X-measured f4gemm times");
    let mut cmd = crate::cargo();
    cmd.args([
        "run",
        "-q",
        "-p",
        "tilegen-aiter",
        "--bin",
        "aiter-calibrate",
        "--",
    ]);
    if !extra.iter().any(|a| a == "--out") {
        cmd.arg("--out").arg(root().join("target/calibrate"));
    }
    run(cmd.args(extra), "aiter-calibrate")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_only_the_corpus_members() {
        assert!(wanted(
            "aiter_meta/hsa/gfx950/f4gemm/f4gemm_bf16_per1x32Fp4.csv"
        ));
        assert!(wanted(
            "aiter_meta/hsa/gfx950/f4gemm/f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128.co"
        ));
        assert!(wanted("aiter/configs/a4w4_blockscale_tuned_gemm.csv"));
        assert!(wanted("amd_aiter-0.1.7.post2.dev18.dist-info/LICENSE"));
        assert!(!wanted("aiter_meta/hsa/gfx950/f4gemm/codegen.py"));
        assert!(!wanted(
            "aiter_meta/hsa/gfx942/f4gemm/f4gemm_bf16_per1x32Fp4.csv"
        ));
        assert!(!wanted("aiter_meta/hsa/gfx950/f4gemm/sub/x.co"));
        assert!(!wanted("aiter/configs/other.csv"));
        assert!(wanted("aiter/configs/tuned_fmoe.csv"));
        assert!(!wanted("aiter/configs/untuned_fmoe.csv"));
        assert!(wanted(
            "aiter_meta/hsa/gfx950/fmoe_2stages/fmoe_stage1_bf16_pertokenFp8_g1u1.csv"
        ));
        assert!(wanted(
            "aiter_meta/hsa/gfx950/fmoe_2stages/fmoe_stage1_bf16_pertokenFp8_doweight_g1u1_32x512_pf2.co"
        ));
        assert!(!wanted("aiter_meta/hsa/gfx950/fmoe_2stages/tune.py"));
        assert!(!wanted("aiter_meta/hsa/gfx950/fmoe_2stages/codegen.py"));
        assert!(!wanted(
            "aiter_meta/hsa/gfx942/fmoe_2stages/fmoe_stage1_bf16_pertokenFp8_g1u1.csv"
        ));
    }

    #[test]
    fn a_corpus_without_a_required_file_is_not_current() {
        let dir = env::temp_dir().join(format!("xtask-aiter-required-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        assert_eq!(missing_files(&dir), required_files());
        for f in required_files() {
            let path = dir.join(&f);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, "x").unwrap();
        }
        assert!(missing_files(&dir).is_empty());
        fs::remove_file(dir.join("aiter/configs/tuned_fmoe.csv")).unwrap();
        assert_eq!(missing_files(&dir), ["aiter/configs/tuned_fmoe.csv"]);
        fs::remove_dir_all(&dir).unwrap();
    }
}
