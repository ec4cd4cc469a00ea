//! `cargo xtask setup|test|demo|calibrate`: the project's bootstrap.
//!
//! One small dependency (`zip`, to read AMD's AITER wheel) on purpose: it must build in seconds
//! on a fresh machine, before LLVM exists. Every step is idempotent: it checks first and only
//! installs what is missing.

mod aiter;

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// Debian packages that provide LLVM 22 with the AMDGPU target, its linker and the MC tools.
const LLVM_PACKAGES: &[&str] = &["llvm-22-dev", "lld-22", "llvm-22"];
/// Tools later steps run (tests compare against them).
const LLVM_TOOLS: &[&str] = &[
    "llvm-config-22",
    "llvm-mc-22",
    "llvm-objdump-22",
    "llvm-readelf-22",
    "ld.lld-22",
];
/// The peer compiler the emulator and the kernel builder are checked against.
const TRITON: &str = "triton==3.9.0";

type Result<T> = std::result::Result<T, String>;

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup(),
        Some("test") => setup().and_then(|()| test(&args[1..])),
        Some("demo") => setup().and_then(|()| demo(&args[1..])),
        Some("calibrate") => aiter::calibrate(&args[1..]),
        Some("hsa-emu-install") => hsa_emu_install(&args[1..]),
        _ => {
            eprintln!(
                "usage: cargo xtask <setup|test|demo|calibrate|hsa-emu-install> [args]\n  setup      install LLVM 22 and the Triton peer when missing, fetch the AITER corpus\n  test       setup + the whole test suite (extra args go to cargo test)\n  demo       setup + the main job\n  calibrate  fetch the AITER corpus, fit and judge the time predictors against AMD's MI355X times\n             (--out DIR, default target/calibrate)\n  hsa-emu-install DIR  build tilegen's HSA library (release) and install it as DIR/libhsa-runtime64.so.1\n             (put DIR on LD_LIBRARY_PATH to run HSA programs on the gfx950 emulator)"
            );
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    // xtask lives one level below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask has a parent directory")
        .to_path_buf()
}

fn step(msg: &str) {
    eprintln!("==> {msg}");
}

fn have(tool: &str) -> bool {
    Command::new(tool)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

fn run(cmd: &mut Command, what: &str) -> Result<()> {
    let status = cmd
        .status()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{what}: failed with {status}"))
    }
}

fn output(cmd: &mut Command, what: &str) -> Result<String> {
    let out = cmd
        .output()
        .map_err(|e| format!("{what}: could not start: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{what}: failed with {}: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn setup() -> Result<()> {
    setup_llvm()?;
    setup_hsa()?;
    setup_triton()?;
    setup_slurm()?;
    aiter::setup_aiter()
}

/// Debian's Slurm and munge: the `tilegen tune slurm` test brings up a single-node cluster
/// (munged, slurmctld, slurmd) from these, with its own key and slurm.conf.
const SLURM_PACKAGES: &[&str] = &["slurm-wlm", "munge"];
/// The programs that test runs; any one missing installs the packages.
const SLURM_PROGRAMS: &[&str] = &[
    "/usr/sbin/munged",
    "/usr/sbin/slurmctld",
    "/usr/sbin/slurmd",
    "/usr/bin/sbatch",
    "/usr/bin/sinfo",
];

/// Installs `SLURM_PACKAGES` when a program of theirs is missing (only then).
fn setup_slurm() -> Result<()> {
    let missing: Vec<&str> = SLURM_PROGRAMS
        .iter()
        .copied()
        .filter(|p| !Path::new(p).exists())
        .collect();
    if missing.is_empty() {
        step("Slurm and munge: ok");
        return Ok(());
    }
    step(&format!(
        "installing Slurm and munge ({} missing)",
        missing.join(", ")
    ));
    let sudo = !is_root();
    if sudo && !have("sudo") {
        return Err(format!(
            "Slurm is missing ({}) and this is not root; run as root or install: apt-get install -y {}",
            missing.join(", "),
            SLURM_PACKAGES.join(" ")
        ));
    }
    let apt = |args: &[&str]| {
        let mut c = Command::new(if sudo { "sudo" } else { "apt-get" });
        if sudo {
            c.arg("apt-get");
        }
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    run(&mut apt(&["update", "-q"]), "apt-get update")?;
    let mut install = apt(&["install", "-y", "-q", "--no-install-recommends"]);
    install.args(SLURM_PACKAGES);
    run(&mut install, "apt-get install slurm-wlm munge")
}

/// Debian's HSA runtime (ROCm 5.2), which HsaDevice's tests load: it has no gfx950 support
/// and, without a GPU driver, its `hsa_init` fails, as it does for a user without one. Its
/// headers (and the `libhsa-runtime64.so` link name) build the C programs of the HSA harness,
/// and Debian's HIP 5.2 runs one of them over tilegen's HSA library.
const HSA_PACKAGES: &[(&str, &str)] = &[
    ("libhsa-runtime64-1", HSA_LIBRARY),
    ("libhsa-runtime-dev", "/usr/include/hsa/hsa.h"),
    (
        "libamdhip64-5",
        "/usr/lib/x86_64-linux-gnu/libamdhip64.so.5",
    ),
];
const HSA_LIBRARY: &str = "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1";

/// Installs the `HSA_PACKAGES` whose file is missing (only those).
fn setup_hsa() -> Result<()> {
    let missing: Vec<&str> = HSA_PACKAGES
        .iter()
        .filter(|(_, file)| !Path::new(file).exists())
        .map(|(package, _)| *package)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    step(&format!(
        "installing Debian's HSA runtime packages ({})",
        missing.join(", ")
    ));
    let apt = |args: &[&str]| {
        let mut c = if is_root() {
            Command::new("apt-get")
        } else {
            let mut c = Command::new("sudo");
            c.arg("apt-get");
            c
        };
        c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
        c
    };
    run(&mut apt(&["update", "-q"]), "apt-get update")?;
    let mut install = apt(&["install", "-y", "-q", "--no-install-recommends"]);
    install.args(&missing);
    run(
        &mut install,
        &format!("apt-get install {}", missing.join(" ")),
    )?;
    for (package, file) in HSA_PACKAGES {
        if !Path::new(file).exists() {
            return Err(format!("{package} is installed but {file} is missing"));
        }
    }
    Ok(())
}

/// `cargo xtask hsa-emu-install DIR`: builds `tilegen-hsa-emu` in release and installs it as
/// `DIR/libhsa-runtime64.so.1` (copied beside it, then renamed over the old one, so a program
/// starting meanwhile loads either whole library).
fn hsa_emu_install(args: &[String]) -> Result<()> {
    let [dir] = args else {
        return Err("usage: cargo xtask hsa-emu-install DIR".into());
    };
    let dir = PathBuf::from(dir);
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    step("building tilegen's HSA library (release)");
    let cargo = env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    run(
        Command::new(cargo)
            .args(["build", "--release", "-p", "tilegen-hsa-emu", "--lib"])
            .current_dir(root()),
        "cargo build --release -p tilegen-hsa-emu",
    )?;
    let target = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    let built = target.join("release/libtilegen_hsa_emu.so");
    let installed = dir.join("libhsa-runtime64.so.1");
    let temp = dir.join(format!(".libhsa-runtime64.so.1.{}", std::process::id()));
    fs::copy(&built, &temp)
        .map_err(|e| format!("copying {} to {}: {e}", built.display(), temp.display()))?;
    fs::rename(&temp, &installed).map_err(|e| {
        let _ = fs::remove_file(&temp);
        format!(
            "renaming {} to {}: {e}",
            temp.display(),
            installed.display()
        )
    })?;
    step(&format!(
        "installed {}; run HSA programs with LD_LIBRARY_PATH={}",
        installed.display(),
        dir.display()
    ));
    Ok(())
}

fn is_root() -> bool {
    output(Command::new("id").arg("-u"), "id -u")
        .map(|s| s.trim() == "0")
        .unwrap_or(false)
}

fn setup_llvm() -> Result<()> {
    let missing: Vec<&str> = LLVM_TOOLS.iter().copied().filter(|t| !have(t)).collect();
    if !missing.is_empty() {
        step(&format!(
            "installing LLVM 22 ({} missing)",
            missing.join(", ")
        ));
        let sudo = !is_root();
        if sudo && !have("sudo") {
            return Err(format!(
                "LLVM 22 is missing ({}) and this is not root; run as root or install: apt-get install -y {}",
                missing.join(", "),
                LLVM_PACKAGES.join(" ")
            ));
        }
        let apt = |args: &[&str]| {
            let mut c = if sudo {
                Command::new("sudo")
            } else {
                Command::new("apt-get")
            };
            if sudo {
                c.arg("apt-get");
            }
            c.args(args).env("DEBIAN_FRONTEND", "noninteractive");
            c
        };
        run(&mut apt(&["update", "-q"]), "apt-get update")?;
        let mut install = apt(&["install", "-y", "-q", "--no-install-recommends"]);
        install.args(LLVM_PACKAGES);
        run(&mut install, "apt-get install LLVM 22").map_err(|e| {
            format!("{e}\n  Debian 12 ships LLVM 22 in bookworm-security; check that it is in the apt sources")
        })?;
    }
    let targets = output(
        Command::new("llvm-config-22").arg("--targets-built"),
        "llvm-config-22 --targets-built",
    )?;
    if !targets.split_whitespace().any(|t| t == "AMDGPU") {
        return Err(format!(
            "llvm-config-22 --targets-built does not list AMDGPU (it lists: {})",
            targets.trim()
        ));
    }
    let libdir = output(
        Command::new("llvm-config-22").arg("--libdir"),
        "llvm-config-22 --libdir",
    )?;
    let shared = Path::new(libdir.trim()).join("libLLVM.so");
    if !shared.exists() {
        return Err(format!(
            "{} is missing: install llvm-22-dev",
            shared.display()
        ));
    }
    step("LLVM 22 with AMDGPU: ok");
    Ok(())
}

/// Where the Triton venv and the foreign code objects live. Both are build products, so they
/// sit under `target/` and a fresh clone makes its own.
fn venv_dir() -> PathBuf {
    env::var_os("TILEGEN_VENV")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/venv"))
}

fn foreign_dir() -> PathBuf {
    env::var_os("TILEGEN_FOREIGN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/foreign"))
}

fn venv_python() -> PathBuf {
    venv_dir().join("bin/python")
}

/// `python -m pip` with its temporary files under `target/` and without its cache: the wheels
/// are large (Triton's unpacks to hundreds of MB) and a machine's `/tmp` may be far smaller than
/// the disk `target/` lives on; the cache would only keep a second copy of each wheel.
fn pip(py: &Path) -> Result<Command> {
    let tmp = root().join("target/tmp");
    fs::create_dir_all(&tmp).map_err(|e| format!("creating {}: {e}", tmp.display()))?;
    let mut cmd = Command::new(py);
    cmd.env("TMPDIR", &tmp)
        .env("PIP_NO_CACHE_DIR", "1")
        .env("PIP_DISABLE_PIP_VERSION_CHECK", "1")
        .args(["-m", "pip"]);
    Ok(cmd)
}

/// Whether PyPI answers: a small pinned download succeeds. Only an unreachable index excuses
/// a missing peer; any other pip failure stops setup.
fn pypi_reachable(py: &Path) -> Result<bool> {
    Ok(pip(py)?
        .args(["download", "-q", "--no-deps", "-d"])
        .arg(root().join("target/tmp"))
        .arg("six==1.16.0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false))
}

/// The free space on the disk that holds `dir`, as `df` prints it, for error messages.
fn free_space(dir: &Path) -> String {
    Command::new("df")
        .args(["-Pk"])
        .arg(dir)
        .output()
        .ok()
        .and_then(|o| {
            let text = String::from_utf8_lossy(&o.stdout).into_owned();
            let line = text.lines().nth(1)?.to_owned();
            let kib: u64 = line.split_whitespace().nth(3)?.parse().ok()?;
            Some(format!("{:.1} GiB free", kib as f64 / (1024.0 * 1024.0)))
        })
        .unwrap_or_else(|| "free space unknown".to_owned())
}

fn setup_triton() -> Result<()> {
    let dir = foreign_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let status_file = dir.join("STATUS");
    let py = venv_python();
    let installed = py.exists()
        && Command::new(&py)
            .args([
                "-c",
                "import triton, sys; sys.exit(0 if triton.__version__ == '3.9.0' else 1)",
            ])
            .stderr(Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if !installed {
        step(&format!(
            "installing {TRITON} into {}",
            venv_dir().display()
        ));
        run(
            Command::new("python3").args(["-m", "venv"]).arg(venv_dir()),
            "python3 -m venv",
        )
        .map_err(|e| format!("{e}\n  install python3-venv (apt-get install -y python3-venv)"))?;
        let install = pip(&py)?.args(["install", "-q", TRITON]).status();
        if !matches!(install, Ok(s) if s.success()) {
            // Only an unreachable index excuses the peer checks; tests print a loud SKIP then.
            if pypi_reachable(&py)? {
                return Err(format!(
                    "pip install {TRITON} failed although PyPI is reachable ({} on the disk of {})",
                    free_space(&venv_dir()),
                    venv_dir().display()
                ));
            }
            eprintln!("!!! PyPI is unreachable: Triton peer checks will be SKIPPED");
            fs::write(&status_file, "unavailable: PyPI unreachable\n")
                .map_err(|e| e.to_string())?;
            return Ok(());
        }
    }
    compile_foreign(&py, &dir)?;
    fs::write(&status_file, "ok\n").map_err(|e| e.to_string())?;
    Ok(())
}

/// Compiles the foreign corpus with Triton: the MXFP4 GEMMs into `dir`, the kernel zoo
/// (kernels with inputs and expected outputs) into `dir/zoo` and the FP8 paged attention cases
/// into `dir/attention`, each once per version of its script.
fn compile_foreign(py: &Path, dir: &Path) -> Result<()> {
    compile_corpus(py, "mxfp4_gemm.py", dir, "Triton MXFP4 corpus")?;
    compile_corpus(py, "zoo.py", &dir.join("zoo"), "Triton kernel zoo")?;
    compile_corpus(
        py,
        "attention.py",
        &dir.join("attention"),
        "Triton FP8 paged attention",
    )
}

/// Runs `scripts/triton/<script> out` unless `out/SCRIPT_HASH` says this version already did.
fn compile_corpus(py: &Path, script: &str, out: &Path, what: &str) -> Result<()> {
    let script = root().join("scripts/triton").join(script);
    let source = fs::read(&script).map_err(|e| format!("reading {}: {e}", script.display()))?;
    let stamp = format!("{:016x}\n", fnv1a(&source));
    let stamp_file = out.join("SCRIPT_HASH");
    if fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp.as_str()) {
        step(&format!("{what}: up to date"));
        return Ok(());
    }
    fs::create_dir_all(out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    step(&format!("compiling the {what} for gfx950"));
    run(Command::new(py).arg(&script).arg(out), what)?;
    fs::write(&stamp_file, stamp).map_err(|e| e.to_string())
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, &b| {
        (h ^ b as u64).wrapping_mul(0x100000001b3)
    })
}

fn cargo() -> Command {
    let mut c = Command::new(env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    c.current_dir(root());
    c.env("TILEGEN_FOREIGN_DIR", foreign_dir());
    c.env("TILEGEN_VENV", venv_dir());
    c.env("TILEGEN_AITER_DIR", aiter::aiter_dir());
    c
}

fn test(extra: &[String]) -> Result<()> {
    step("running the test suite");
    run(
        cargo()
            .args(["test", "--workspace", "--all-targets"])
            .args(extra),
        "cargo test",
    )?;
    // Doc tests are not part of --all-targets.
    run(
        cargo().args(["test", "--workspace", "--doc"]),
        "cargo test --doc",
    )
}

/// The main job. Extra arguments go to the final `tilegen gemm` (e.g. `--json`).
fn demo(extra: &[String]) -> Result<()> {
    step("building tilegen");
    run(
        cargo().args(["build", "--release", "-q", "--bin", "tilegen"]),
        "cargo build",
    )?;
    run(
        cargo().args([
            "build",
            "--release",
            "-q",
            "-p",
            "tilegen",
            "--example",
            "synth_weights",
        ]),
        "cargo build",
    )?;
    let out = root().join("target/demo");
    fs::create_dir_all(&out).map_err(|e| format!("creating {}: {e}", out.display()))?;
    let bin = root().join("target/release/tilegen");
    let weights = out.join("gpt-oss-like.safetensors");
    let pre = out.join("gpt-oss-like.pre.safetensors");
    let back = out.join("gpt-oss-like.back.safetensors");
    step("1/3 synthesising MXFP4 weights shaped like a gpt-oss MoE layer");
    run(
        Command::new(root().join("target/release/examples/synth_weights")).arg(&weights),
        "synth_weights",
    )?;
    step("2/3 preshuffling them for preshuffled-B kernels, then back");
    run(
        Command::new(&bin)
            .arg("preshuffle")
            .arg(&weights)
            .arg("-o")
            .arg(&pre),
        "tilegen preshuffle",
    )?;
    run(
        Command::new(&bin)
            .arg("unshuffle")
            .arg(&pre)
            .arg("-o")
            .arg(&back),
        "tilegen unshuffle",
    )?;
    let (a, b) = (
        fs::read(&weights).map_err(|e| e.to_string())?,
        fs::read(&back).map_err(|e| e.to_string())?,
    );
    if a != b {
        return Err(format!(
            "{} and {} differ: the round trip is not exact",
            weights.display(),
            back.display()
        ));
    }
    println!(
        "round trip exact: {} bytes identical ({} -> {} -> {})",
        a.len(),
        weights.display(),
        pre.display(),
        back.display()
    );
    // The MoE up-projection of gpt-oss-20b for a decode batch of 64 tokens: N = 2 x 2880,
    // K = 2880 padded to 3072 as the preshuffle above pads it.
    step("3/3 generating a preshuffled-B MXFP4 GEMM kernel and proving it on the emulator");
    run(
        Command::new(&bin)
            .args([
                "gemm",
                "--m",
                "64",
                "--n",
                "5760",
                "--k",
                "3072",
                "--b-prefetch",
                "--dram-to-lds",
                "--emit-dir",
            ])
            .arg(out.join("gemm"))
            .args(extra),
        "tilegen gemm",
    )
}
