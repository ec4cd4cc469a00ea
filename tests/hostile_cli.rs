//! `tilegen build` and `tilegen gemm` given what a hostile user gives them: each reproducer of a
//! wrong kernel, an abort or a lost file is a named test here, run through the binary under a
//! memory cap and a deadline.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;
use std::time::Duration;

use tilegen_testkit::{Ending, Outcome, run_capped};

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");
/// Enough for LLVM and a small emulated GEMM; far below what the reproducers used to allocate.
const CAP: u64 = 3 << 30;

fn tilegen(args: &[&str]) -> Outcome {
    tilegen_env(args, &[])
}

fn tilegen_env(args: &[&str], env: &[(&str, &str)]) -> Outcome {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    run_capped(Path::new(BIN), &args, env, CAP, Duration::from_secs(60)).unwrap()
}

/// Exit status 1 with the rule in the message, and nothing on stdout.
fn refused(o: &Outcome, needle: &str) {
    assert_eq!(o.ending, Ending::Exit(1), "{o:?}");
    assert!(
        o.stderr.contains(needle),
        "expected `{needle}` in: {}",
        o.stderr
    );
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn wrapped_thread_counts_are_refused_and_write_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.hsaco");
    let o = tilegen(&[
        "build",
        "--bm",
        "64",
        "--bn",
        "1073741840",
        "--wn",
        "16",
        "-o",
        path(&x),
    ]);
    refused(&o, "4294967360 threads");
    let o = tilegen(&[
        "build",
        "--variant",
        "lds",
        "--wn",
        "16",
        "--bn",
        "1073741840",
        "--bm",
        "64",
        "--bk-elems",
        "1024",
        "--wm",
        "16",
        "-o",
        path(&x),
    ]);
    refused(&o, "threads exceeds");
    assert!(!x.exists());
}

#[test]
fn a_huge_warp_tile_is_refused_before_llvm() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.hsaco");
    let o = tilegen(&[
        "build",
        "--bm",
        "128",
        "--bn",
        "2147483648",
        "--wn",
        "2147483648",
        "--bk-elems",
        "1024",
        "-o",
        path(&x),
    ]);
    refused(&o, "register budget exceeded");
    assert!(o.elapsed < Duration::from_secs(10), "{:?}", o.elapsed);
}

#[test]
fn huge_problems_are_refused_before_inputs_are_made() {
    for (m, n, k, needle) in [
        ("2147483648", "16", "256", "buffer resource"),
        ("1", "16", "8589934592", "buffer resource"),
        ("1048576", "1048576", "4194304", "buffer resource"),
        ("65536", "16", "131072", "buffer resource"),
    ] {
        let o = tilegen(&["gemm", "--m", m, "--n", n, "--k", k]);
        refused(&o, needle);
        // Refused by arithmetic, not after generating gigabytes.
        assert!(
            o.elapsed < Duration::from_secs(10),
            "{m}x{n}x{k}: {:?}",
            o.elapsed
        );
    }
}

#[test]
fn settings_the_spec_would_ignore_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.hsaco");
    let o = tilegen(&["build", "--mfma-cluster", "2", "-o", path(&x)]);
    refused(&o, "mfma_cluster would be ignored");
    assert!(!x.exists());
    let o = tilegen(&[
        "build",
        "--variant",
        "lds",
        "--split-k",
        "2",
        "-o",
        path(&x),
    ]);
    refused(&o, "split_k applies to the preb variant only");
    assert!(!x.exists());
}

#[test]
fn outputs_are_checked_before_the_work_and_kept_on_failure() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.hsaco");
    let missing = dir.path().join("missing/a.s");
    let o = tilegen(&["build", "-o", path(&x), "--asm", path(&missing)]);
    refused(&o, "does not exist");
    assert!(
        !x.exists(),
        "the code object was written before the listing failed"
    );
    // A refused spec leaves an existing output as it was.
    std::fs::write(&x, b"precious").unwrap();
    let o = tilegen(&["build", "--bm", "48", "-o", path(&x)]);
    refused(&o, "bm = 48");
    assert_eq!(std::fs::read(&x).unwrap(), b"precious");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n.to_string_lossy().starts_with('.'))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // gemm --emit-dir checks its files before building: a file where the directory should be.
    let o = tilegen(&[
        "gemm",
        "--m",
        "1",
        "--n",
        "16",
        "--k",
        "256",
        "--emit-dir",
        path(&x),
    ]);
    refused(&o, "x.hsaco");
    assert_eq!(std::fs::read(&x).unwrap(), b"precious");
}

#[test]
fn a_symlinked_output_is_written_through_with_the_umask_mode() {
    let dir = tempfile::tempdir().unwrap();
    let real = dir.path().join("real.hsaco");
    let link = dir.path().join("link.hsaco");
    symlink(&real, &link).unwrap();
    let args: Vec<String> = ["build", "-o", path(&link)]
        .iter()
        .map(|s| s.to_string())
        .collect();
    // The umask is set by the shell that starts the binary.
    let o = run_capped(
        Path::new("sh"),
        &[
            "-c".into(),
            "umask 027 && exec \"$0\" \"$@\"".into(),
            BIN.into(),
        ]
        .into_iter()
        .chain(args)
        .collect::<Vec<_>>(),
        &[],
        CAP,
        Duration::from_secs(60),
    )
    .unwrap();
    assert_eq!(o.ending, Ending::Success, "{o:?}");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let mode = std::fs::metadata(&real).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o640);
    assert!(std::fs::read(&real).unwrap().starts_with(b"\x7fELF"));
}

#[test]
fn rust_backtrace_does_not_turn_a_mistake_into_a_stack_trace() {
    let dir = tempfile::tempdir().unwrap();
    let x = dir.path().join("x.hsaco");
    let o = tilegen_env(
        &["build", "--bm", "48", "-o", path(&x)],
        &[("RUST_BACKTRACE", "1")],
    );
    refused(&o, "bm = 48");
    assert!(!o.stderr.contains("backtrace"), "{}", o.stderr);
    assert_eq!(o.stderr.lines().count(), 1, "{}", o.stderr);
    let o = tilegen(&["--verbose", "build", "--bm", "48", "-o", path(&x)]);
    refused(&o, "Stack backtrace");
}

#[test]
fn ctrl_c_stops_a_long_gemm_cleanly() {
    let mut child = std::process::Command::new(BIN)
        .args(["gemm", "--m", "4096", "--n", "4096", "--k", "4096"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Past the compile and the input generation, into the emulation (about 30 s of it).
    std::thread::sleep(Duration::from_secs(4));
    let sent = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "still running 10 s after SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    // 130 either way: a signal during the emulation stops it with "interrupted"; one that
    // arrives earlier (a slow machine still compiling) ends the process at once.
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(
        stderr.is_empty() || stderr.contains("interrupted"),
        "{stderr}"
    );
}
