//! The timing model on the command line: `tilegen emu time`, `emu run --timing` and `gemm
//! --timing` / `--timing-only`, through the binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use tilegen_testkit::{Ending, run_capped};

fn tilegen(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tilegen"))
        .args(args)
        .output()
        .expect("run tilegen")
}

fn json(out: &Output) -> serde_json::Value {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// `gemm --timing-only --json` at a full-size shape: the modeled time and its parts.
fn modeled(m: &str, n: &str, k: &str) -> serde_json::Value {
    modeled_with(m, n, k, &[])
}

/// [`modeled`] with more flags.
fn modeled_with(m: &str, n: &str, k: &str, more: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "gemm",
        "--m",
        m,
        "--n",
        n,
        "--k",
        k,
        "--timing-only",
        "--json",
    ];
    args.extend_from_slice(more);
    json(&tilegen(&args))["timing"].clone()
}

#[test]
fn the_census_finds_the_lines_other_xcds_share() {
    // 64 x 128 tiles over 1024 x 4096: each XCD holds every row block of A for its own
    // column blocks of B, so most of XCD 0's A lines are the other XCDs' too.
    let with = modeled("1024", "4096", "2048");
    let share = with["hbm_own_share"].as_f64().unwrap();
    assert!(share > 0.0 && share < 0.9, "{with}");
    let without = modeled_with("1024", "4096", "2048", &["--no-census"]);
    assert!(without["hbm_own_share"].is_null(), "{without}");
    let gbs = |t: &serde_json::Value| t["hbm_gbs"].as_f64().unwrap();
    assert!(gbs(&without) > gbs(&with), "{with}\n{without}");
}

#[test]
fn full_size_gemm_is_modeled_without_running_it() {
    // 8192^3 needs 100 MB of inputs the model never materializes.
    let t = modeled("8192", "8192", "8192");
    let us = t["us"].as_f64().unwrap();
    assert!(us > 0.0, "{t}");
    let busy = t["mfma_busy"].as_f64().unwrap();
    assert!(busy > 0.0 && busy <= 1.0, "{t}");
    assert!(t["hbm_gbs"].as_f64().unwrap() > 0.0, "{t}");
    assert!(t["bound"].is_string(), "{t}");
    assert!(t["workgroups_simulated"].as_u64() < t["workgroups_total"].as_u64());
    // Twice the K is never faster.
    let longer = modeled("8192", "8192", "16384");
    assert!(longer["us"].as_f64().unwrap() >= us, "{t}\n{longer}");
}

#[test]
fn emu_time_takes_zero_buffers_and_writes_a_perfetto_trace() {
    let dir = tempfile::tempdir().unwrap();
    let hsaco = dir.path().join("k.hsaco");
    let built = tilegen(&["build", "-o", hsaco.to_str().unwrap()]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let trace = dir.path().join("trace.json");
    // The default spec (BM 64, BN 128): a 512 x 1024 x 2048 problem.
    let (m, n, k) = (512u64, 1024u64, 2048u64);
    let zero = |bytes: u64| format!("zero:{bytes}");
    let args = [
        zero(m * n * 2),
        zero(m * k / 2),
        zero(n * k / 2),
        zero(m * k / 32),
        zero(n * k / 32),
        format!("i32:{m}"),
        format!("i32:{n}"),
        format!("i32:{k}"),
    ];
    let grid = format!("{},{}", n / 128, m / 64);
    let mut cmd = vec![
        "emu",
        "time",
        hsaco.to_str().unwrap(),
        "--grid",
        &grid,
        "--block",
        "128",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-cycles",
        "5000",
        "--json",
    ];
    for a in &args {
        cmd.push("--arg");
        cmd.push(a);
    }
    let p = json(&tilegen(&cmd));
    for key in ["us", "mfma_busy", "hbm_gbs", "bound", "stalls", "clock_ghz"] {
        assert!(!p[key].is_null(), "{key} missing: {p}");
    }
    let t: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&trace).unwrap()).expect("trace JSON");
    let events = t["traceEvents"]
        .as_array()
        .or_else(|| t.as_array())
        .expect("trace events");
    // Complete slices ("X") on wave tracks, within the cycles asked for.
    let slices: Vec<_> = events.iter().filter(|e| e["ph"] == "X").collect();
    assert!(!slices.is_empty());
    assert!(
        slices.iter().all(|e| e["ts"].as_f64().unwrap() <= 5000.0),
        "a slice past the traced cycles"
    );
}

#[test]
fn model_flags_without_timing_are_refused() {
    let out = tilegen(&[
        "gemm",
        "--m",
        "64",
        "--n",
        "128",
        "--k",
        "512",
        "--trace",
        "/tmp/never-written.json",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--timing"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = tilegen(&[
        "emu", "time", "x.hsaco", "--grid", "1", "--block", "64", "--arg", "zero:0",
    ]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("at least one byte"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A `--params` file in `dir` that sets `table.key` to the TOML number `value`.
fn params_file(dir: &Path, table: &str, key: &str, value: &str) -> PathBuf {
    let path = dir.join(format!("{table}.{key}.{value}.toml"));
    std::fs::write(
        &path,
        format!("[{table}]\n{key} = {{ value = {value}, source = \"hostile\" }}\n"),
    )
    .unwrap();
    path
}

/// Parameter files that used to abort allocating terabytes, panic (capacity overflow, a
/// division by zero), never finish, or predict from NaN or from no CUs: each is refused with
/// exit status 1 by `gemm --timing-only` and by `emu time`, naming the entry and its bound (or,
/// for a fact of the machine such as its CUs, the tilegen-arch constant that holds it), under a
/// memory cap and a deadline; a valid file still predicts.
#[test]
fn hostile_timing_parameters_are_refused_by_gemm_and_emu_time() {
    const CAP: u64 = 3 << 30;
    let dir = tempfile::tempdir().unwrap();
    let hsaco = dir.path().join("k.hsaco");
    let built = tilegen(&["build", "-o", hsaco.to_str().unwrap()]);
    assert!(
        built.status.success(),
        "{}",
        String::from_utf8_lossy(&built.stderr)
    );
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let bin = Path::new(env!("CARGO_BIN_EXE_tilegen"));
        run_capped(bin, &args, &[], CAP, Duration::from_secs(60)).unwrap()
    };
    let gemm = [
        "gemm",
        "--m",
        "256",
        "--n",
        "256",
        "--k",
        "1024",
        "--timing-only",
        "--json",
    ];
    let time = [
        "emu",
        "time",
        hsaco.to_str().unwrap(),
        "--grid",
        "2,4",
        "--block",
        "128",
        "--json",
        "--arg",
        "zero:131072",
        "--arg",
        "zero:131072",
        "--arg",
        "zero:262144",
        "--arg",
        "zero:8192",
        "--arg",
        "zero:16384",
        "--arg",
        "i32:256",
        "--arg",
        "i32:256",
        "--arg",
        "i32:1024",
    ];
    let cases = [
        (
            "gpu",
            "cus_per_xcd",
            "1e12",
            "gfx950 fact owned by tilegen-arch (tilegen_arch::CUS_PER_XCD = 32)",
        ),
        ("vmem", "l1_bytes", "inf", "from 1024 to 262144"),
        ("vmem", "l1_bytes", "1e18", "from 1024 to 262144"),
        ("vmem", "l2_bytes", "1e15", "from 1024 to 16777216"),
        ("vmem", "l2_channels", "1e12", "from 1 to 64"),
        ("gpu", "xcds", "8", "tilegen_arch::XCDS = 8"),
        ("vmem", "l2_channels", "1e300", "from 1 to 64"),
        ("vmem", "l2_channels", "9223372036854775807", "from 1 to 64"),
        ("issue", "slot_cycles", "1e300", "from 4 to 16"),
        ("issue", "slot_cycles", "1e-300", "from 4 to 16"),
        ("vmem", "max_vmcnt", "nan", "6-bit counter"),
        ("vmem", "l2_channels", "1e-300", "from 1 to 64"),
        ("vmem", "mall_latency_ns", "-1", "from 0 to 100000"),
    ];
    let mut refusals = 0;
    for (table, key, value, bound) in cases {
        let file = params_file(dir.path(), table, key, value);
        for command in [&gemm[..], &time[..]] {
            let mut args = command.to_vec();
            args.extend(["--params", file.to_str().unwrap()]);
            let o = run(&args);
            assert_eq!(o.ending, Ending::Exit(1), "{table}.{key} = {value}: {o:?}");
            let entry = format!("timing parameter {table}.{key} ");
            assert!(
                o.stderr.contains(&entry) && o.stderr.contains(bound),
                "{table}.{key} = {value}: {}",
                o.stderr
            );
            assert!(o.stdout.is_empty(), "{}", o.stdout);
            refusals += 1;
        }
    }
    // A device that never ends and a FIFO no one writes: refused, not read.
    let fifo = dir.path().join("fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(made.success());
    for file in [Path::new("/dev/zero"), &fifo] {
        for command in [&gemm[..], &time[..]] {
            let mut args = command.to_vec();
            args.extend(["--params", file.to_str().unwrap()]);
            let o = run(&args);
            assert_eq!(o.ending, Ending::Exit(1), "{}: {o:?}", file.display());
            assert!(o.stderr.contains("is not a regular file"), "{}", o.stderr);
            refusals += 1;
        }
    }
    assert_eq!(refusals, 30);
    // A file within the bounds predicts, through both commands.
    let fine = params_file(dir.path(), "vmem", "l2_channels", "8");
    for command in [&gemm[..], &time[..]] {
        let mut args = command.to_vec();
        args.extend(["--params", fine.to_str().unwrap()]);
        let o = run(&args);
        assert_eq!(o.ending, Ending::Success, "{o:?}");
        assert!(o.stdout.contains("\"us\""), "{}", o.stdout);
    }
}
