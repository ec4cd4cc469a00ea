//! The binary given hostile input on its newer surfaces: generated Slurm scripts, attention and
//! MoE problem sizes, template spaces, and the HSA library it loads. Every case runs under a
//! memory cap and a deadline and must end in a clean refusal (exit 1, the rule named, nothing
//! written) or a correct success: never a signal, a hang, or an allocation the size checks
//! should have refused.

use std::path::Path;
use std::time::Duration;

use tilegen_testkit::{Ending, Outcome, run_capped};

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");
/// Far below what the reproducers used to allocate (17 GB, 103 GB, 24 TB).
const CAP: u64 = 1 << 30;
/// Refusals come before any work: a few seconds even on a loaded CI machine.
const DEADLINE: Duration = Duration::from_secs(30);

fn tilegen_env(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    run_capped(Path::new(BIN), &args, env, CAP, DEADLINE).unwrap()
}

fn tilegen(args: &[&str]) -> Outcome {
    tilegen_env(args, &[])
}

/// Exit status 1 with `needle` in the message.
fn refused(o: &Outcome, needle: &str) {
    assert_eq!(o.ending, Ending::Exit(1), "{o:?}");
    assert!(
        o.stderr.contains(needle),
        "expected `{needle}` in: {}",
        o.stderr
    );
}

fn template(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("templates")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn a_partition_that_opens_a_shell_line_is_refused_and_no_script_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("slurm");
    let t = template("gpt-oss-20b.toml");
    for partition in [
        "gpu\ntouch /tmp/X",
        "gpu\rtouch",
        "gpu;touch /tmp/X",
        "gpu touch",
        "$(touch /tmp/X)",
        "`id`",
        "gpu'",
        "",
    ] {
        let o = tilegen(&[
            "tune",
            "slurm",
            &t,
            "--shards",
            "2",
            "--partition",
            partition,
            "-o",
            path(&out),
        ]);
        refused(&o, "is not a Slurm partition list");
        assert!(!out.exists(), "{partition:?} wrote {}", out.display());
    }
    // A partition list Slurm accepts is written as one directive line.
    let o = tilegen(&[
        "tune",
        "slurm",
        &t,
        "--shards",
        "2",
        "--partition",
        "mi355x,gpu-2",
        "-o",
        path(&out),
    ]);
    assert_eq!(o.ending, Ending::Success, "{o:?}");
    for script in ["tune-array.sbatch", "tune-merge.sbatch"] {
        let text = std::fs::read_to_string(out.join(script)).unwrap();
        let lines: Vec<&str> = text.lines().filter(|l| l.contains("mi355x")).collect();
        assert_eq!(lines, ["#SBATCH --partition=mi355x,gpu-2"], "{text}");
    }
}

#[test]
fn slurm_counts_out_of_range_are_refused_without_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("slurm");
    let t = template("gpt-oss-20b.toml");
    for (flag, value, named) in [
        ("--shards", "4294967295", "--shards = 4294967295"),
        ("--shards", "0", "--shards = 0"),
        ("--shards", "10001", "between 1 and 10000"),
        ("--cpus-per-task", "0", "--cpus-per-task = 0"),
        ("--minutes", "0", "--minutes = 0"),
        ("--minutes", "4294967295", "--minutes = 4294967295"),
    ] {
        let mut args = vec!["tune", "slurm", &t, "-o", path(&out), flag, value];
        if flag != "--shards" {
            args.extend(["--shards", "2"]);
        }
        let o = tilegen(&args);
        refused(&o, named);
        assert!(!out.exists());
    }
    // A directory sbatch would read as a file-name pattern is refused, not written.
    let pct = dir.path().join("100%");
    let o = tilegen(&["tune", "slurm", &t, "--shards", "2", "-o", path(&pct)]);
    refused(&o, "cannot be named in an #SBATCH line");
    assert!(!pct.exists());
}

#[test]
fn attention_sizes_are_refused_before_anything_is_made() {
    let base = ["--q-heads", "8", "--kv-heads", "1", "--head-dim", "128"];
    for (batch, context, page, named) in [
        // Used to abort allocating 17 GB of context lengths.
        ("4294967295", "64", "16", "the K or V cache is"),
        // Used to fill a 2 GiB cache for a minute before refusing it.
        (
            "1",
            "16777216",
            "16",
            "the K or V cache is 4294973440 bytes",
        ),
        ("16777216", "64", "16", "the K or V cache is"),
        ("1", "16777216", "0", "the K or V cache is"),
        ("4294967295", "16777216", "16", "the K or V cache is"),
        ("18446744073709551615", "1", "0", "overflows"),
        ("2", "1,2,3", "16", "--context has 3 values"),
        ("1", "16777217", "16", "must be 1 to 2^24"),
    ] {
        let mut args = vec!["attention", "--batch", batch, "--context", context];
        args.extend(base);
        args.extend(["--page-size", page]);
        let o = tilegen(&args);
        refused(&o, named);
        assert!(o.elapsed < Duration::from_secs(10), "{args:?}: {o:?}");
    }
}

#[test]
fn moe_sizes_are_refused_plainly() {
    for (flag, value, named) in [
        ("--tokens", "4294967295", "too many pairs"),
        ("--experts", "4294967295", "experts"),
        ("--experts", "0", "experts"),
        ("--hidden", "4294967264", "hidden"),
        ("--inter", "4294967264", "intermediate"),
        ("--topk", "4294967295", "top"),
        ("--block-m", "4294967295", "bm = 4294967295"),
    ] {
        let mut args = vec!["moe", "--model", "gpt-oss-20b", flag, value];
        if flag != "--tokens" {
            args.extend(["--tokens", "1"]);
        }
        let o = tilegen(&args);
        refused(&o, named);
        // Sizes are named in words, never as a Rust debug struct.
        assert!(!o.stderr.contains("MoeShape {"), "{}", o.stderr);
    }
    let o = tilegen(&["moe", "--model", "kimi-k2", "--tokens", "16777216"]);
    refused(&o, "host memory");
}

#[test]
fn a_space_of_billions_of_combinations_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(template("gpt-oss-20b.toml")).unwrap();
    let head = &text[..text.find("[space]").unwrap()];
    let space = "[space]\n\
        variant = [\"preb\", \"lds\"]\n\
        bm = [16, 32, 64, 128, 256]\n\
        bn = [64, 128, 256, 512]\n\
        bk_elems = [128, 256, 512, 1024]\n\
        wm = [16, 32, 64, 128]\n\
        wn = [16, 32, 64]\n\
        mma = [\"16x16x128\", \"32x32x64\"]\n\
        b_prefetch = [false, true]\n\
        b_cache_policy = [\"always\", \"streaming\", \"global\", \"volatile\"]\n\
        dram_to_lds = [false, true]\n\
        cluster_drain_sched = [false, true]\n\
        mfma_cluster = [1, 2, 3, 4, 5, 6, 7, 8]\n\
        deep_prime = [false, true]\n\
        b_prefetch_depth = [1, 2]\n\
        waves_per_eu = [0, 1, 2, 3, 4, 5, 6, 7, 8]\n\
        split_k = [1, 2, 4, 8, 16, 32, 64]\n\
        acc_agprs = [false, true]\n\
        xcd_group_m = [0, 1, 2, 4, 8, 16, 32, 64]\n\
        out_dtype = \"bf16\"\n";
    let big = dir.path().join("big.toml");
    std::fs::write(&big, format!("{head}{space}")).unwrap();
    for args in [
        vec!["tune", path(&big), "--plan"],
        vec!["tune", path(&big), "--plan", "--json"],
        vec!["pack", path(&big), "--db", "x.db", "-o", "p"],
    ] {
        let o = tilegen(&args);
        refused(&o, "combinations, more than the 200000 a template may hold");
        assert!(o.elapsed < Duration::from_secs(10), "{o:?}");
    }
}

#[test]
fn a_truncated_hsa_library_is_refused_before_it_is_mapped() {
    let Some(real) = [
        "/usr/lib/x86_64-linux-gnu/libhsa-runtime64.so.1",
        "/usr/lib/x86_64-linux-gnu/libm.so.6",
    ]
    .into_iter()
    .find_map(|p| std::fs::read(p).ok()) else {
        panic!(
            "neither Debian's HSA runtime nor libm is installed (cargo xtask setup installs the runtime)"
        );
    };
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libhsa-runtime64.so.1");
    std::fs::write(&lib, &real[..real.len() / 3]).unwrap();
    let env = [("TILEGEN_HSA_LIB", path(&lib))];
    // `devices` reports the library as unusable and still lists the emulator.
    let o = tilegen_env(&["devices"], &env);
    assert_eq!(o.ending, Ending::Success, "{o:?}");
    assert!(
        o.stdout.contains("is not a loadable shared library"),
        "{o:?}"
    );
    // `--device hsa` refuses; `--device auto` falls back to the emulator and runs.
    let gemm = ["gemm", "--m", "16", "--n", "128", "--k", "256"];
    let o = tilegen_env(&[&gemm[..], &["--device", "hsa"]].concat(), &env);
    refused(&o, "is not a loadable shared library");
    let o = tilegen_env(&gemm, &env);
    assert_eq!(o.ending, Ending::Success, "{o:?}");
}

#[test]
fn tune_params_that_are_not_a_regular_file_are_refused_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("params.toml");
    let c = std::ffi::CString::new(path(&fifo)).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let db = dir.path().join("t.db");
    for params in [path(&fifo), "/dev/zero", path(dir.path())] {
        let o = tilegen(&[
            "tune",
            "--shape",
            "256,256,1024",
            "--params",
            params,
            "--db",
            path(&db),
        ]);
        refused(&o, "--params");
        assert!(o.elapsed < Duration::from_secs(10), "{o:?}");
    }
    assert!(!db.exists());
}
