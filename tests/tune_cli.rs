//! `tilegen tune` and `tilegen pack` as a user runs them: a sweep killed and resumed repeats no
//! work; a worker that aborts is recorded and the sweep finishes; two processes appending to
//! one database lose nothing; a pack built from a sweep serves `tilegen gemm --pack` (checked
//! against the reference on the emulator) and is refused once tampered with.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use tilegen_tune::{Db, Plan, Status, Template};

fn tilegen() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tilegen"))
}

/// Runs and returns the output, failing with its stderr when it fails.
fn ok(cmd: &mut Command) -> Output {
    let out = cmd.output().expect("run tilegen");
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&out.stdout)))
}

/// A small model: two GEMMs at two M buckets, and a space of `specs`-ish valid specs.
fn template(dir: &Path, bm: &str) -> PathBuf {
    let p = dir.join("small.toml");
    std::fs::write(
        &p,
        format!(
            r#"[model]
name = "small"
m = [16, 64]

[[gemm]]
name = "up"
n = 256
k = 512

[[gemm]]
name = "down"
n = 128
k = 256

[space]
variant = ["preb"]
bm = {bm}
bn = [128]
bk_elems = [256, 512]
wn = [32, 64]
b_prefetch = [false, true]
"#
        ),
    )
    .unwrap();
    p
}

fn plan_pairs(t: &Path) -> u64 {
    Plan::from_template(&Template::load(t).unwrap()).pairs
}

fn sweep(t: &Path, db: &Path) -> Command {
    let mut c = tilegen();
    c.args(["tune"])
        .arg(t)
        .arg("--db")
        .arg(db)
        .args(["--max-cus", "4", "--json"]);
    c
}

#[test]
fn a_killed_sweep_resumes_without_repeating_work() {
    let dir = tempfile::tempdir().unwrap();
    // Shapes where every spec is worth evaluating (M above every BM), so the work is long
    // enough to be cut.
    let t = template(dir.path(), "[16, 32]");
    let db = dir.path().join("t.db");
    let pairs = plan_pairs(&t);
    let mut child = sweep(&t, &db)
        .args(["--jobs", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let mut before = 0;
    while t0.elapsed() < Duration::from_secs(120) {
        std::thread::sleep(Duration::from_millis(20));
        if db.exists()
            && let Ok(d) = Db::open_existing(&db)
            && let Ok((r, _)) = d.counts()
            && r > 0
        {
            before = r;
            break;
        }
    }
    // SIGKILL: no handler runs, the sweep stops wherever it is.
    child.kill().unwrap();
    child.wait().unwrap();
    let (results, history) = Db::open_existing(&db).unwrap().counts().unwrap();
    assert!(before > 0 && results >= before);
    assert!(
        results < pairs,
        "the sweep finished before it was killed ({results} of {pairs})"
    );
    assert_eq!(results, history);
    let s = json(&ok(&mut sweep(&t, &db)));
    assert_eq!(s["skipped"], results, "{s}");
    assert_eq!(s["evaluated"], pairs - results, "{s}");
    let (results, history) = Db::open_existing(&db).unwrap().counts().unwrap();
    assert_eq!(
        (results, history),
        (pairs, pairs),
        "every pair evaluated exactly once"
    );
}

#[test]
fn an_aborting_worker_is_recorded_and_the_sweep_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let t = template(dir.path(), "[16, 32]");
    let db = dir.path().join("t.db");
    let pairs = plan_pairs(&t);
    // Every spec with b_prefetch aborts its worker process before compiling.
    let s = json(&ok(sweep(&t, &db).env("TILEGEN_TUNE_ABORT_ON", "_bpf")));
    assert_eq!(s["evaluated"], pairs, "{s}");
    let failed = s["failed"].as_u64().unwrap();
    assert!(failed > 0 && failed < pairs, "{s}");
    assert!(s["workers_lost"].as_u64().unwrap() > 0, "{s}");
    let rows = Db::open_existing(&db).unwrap().results().unwrap();
    for r in &rows {
        let bpf = r.kernel.contains("_bpf");
        assert_eq!(
            r.status == Status::Failed,
            bpf,
            "{}: {:?}",
            r.kernel,
            r.reason
        );
        if bpf {
            let reason = r.reason.as_deref().unwrap_or("");
            assert!(
                reason.contains("SIGABRT") && reason.contains("compiling"),
                "{reason}"
            );
        }
    }
    // The failures are finished work: a second run repeats nothing.
    let again = json(&ok(&mut sweep(&t, &db)));
    assert_eq!(
        (again["evaluated"].as_u64(), again["skipped"].as_u64()),
        (Some(0), Some(pairs))
    );
}

#[test]
fn two_processes_appending_at_once_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let t = template(dir.path(), "[16, 32]");
    let db = dir.path().join("shared.db");
    let pairs = plan_pairs(&t);
    let children: Vec<_> = ["0/2", "1/2"]
        .iter()
        .map(|shard| {
            sweep(&t, &db)
                .args(["--jobs", "1", "--shard", shard])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut evaluated = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        evaluated += json(&out)["evaluated"].as_u64().unwrap();
    }
    assert_eq!(evaluated, pairs);
    assert_eq!(
        Db::open_existing(&db).unwrap().counts().unwrap(),
        (pairs, pairs)
    );
}

#[test]
fn a_pack_from_a_sweep_serves_gemm_and_is_refused_once_tampered_with() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let t = template(dir.path(), "[16, 64]");
    let db = p("t.db");
    ok(&mut sweep(&t, &db));
    // The report: table, CSV and chart.
    ok(tilegen()
        .args(["tune", "report"])
        .arg(&db)
        .arg("-o")
        .arg(p("report")));
    let svg = std::fs::read_to_string(p("report/tflops.svg")).unwrap();
    assert!(svg.contains("<svg") && svg.contains("default spec") && svg.contains("runner-up"));
    assert_eq!(
        std::fs::read_to_string(p("report/best.csv"))
            .unwrap()
            .lines()
            .count(),
        5
    );

    let cache = p("cache");
    let build = || {
        let mut c = tilegen();
        c.args(["pack"])
            .arg(&t)
            .arg("--db")
            .arg(&db)
            .arg("-o")
            .arg(p("pack"));
        c.arg("--cache")
            .arg(&cache)
            .args(["--require-tuned", "--json"]);
        c
    };
    let first = json(&ok(&mut build()));
    assert_eq!(first["shapes"], 4);
    assert_eq!(first["cache_hits"], 0);
    let t0 = Instant::now();
    let second = json(&ok(&mut build()));
    let rebuild = t0.elapsed();
    assert_eq!(second["compiled"], 0, "{second}");
    assert!(
        rebuild < Duration::from_secs(10),
        "rebuild took {rebuild:?}"
    );
    let v = json(&ok(tilegen()
        .args(["pack", "verify", "--json"])
        .arg(p("pack"))));
    assert_eq!(v["ok"], true);
    let inspect = ok(tilegen().args(["pack", "inspect"]).arg(p("pack")));
    let text = String::from_utf8_lossy(&inspect.stdout);
    assert!(
        text.contains("N=256 K=512") && text.contains("model"),
        "{text}"
    );

    // M = 40 falls between the buckets 16 and 64; 100 is beyond them; 16 is one.
    for (m, n, k) in [(40, 256, 512), (100, 256, 512), (16, 128, 256)] {
        let out = ok(tilegen()
            .args(["gemm", "--device", "emu", "--json", "--pack"])
            .arg(p("pack"))
            .args([
                "--m",
                &m.to_string(),
                "--n",
                &n.to_string(),
                "--k",
                &k.to_string(),
            ]));
        let r = json(&out);
        assert_eq!(r["check"]["passed"], true, "{r}");
        let bucket = if m <= 16 { 16 } else { 64 };
        let note = String::from_utf8_lossy(&out.stderr);
        assert!(note.contains(&format!("M bucket {bucket}")), "{note}");
    }
    let flags = tilegen()
        .args([
            "gemm", "--device", "emu", "--bm", "32", "--m", "16", "--n", "256", "--k", "512",
            "--pack",
        ])
        .arg(p("pack"))
        .output()
        .unwrap();
    assert!(!flags.status.success());
    assert!(String::from_utf8_lossy(&flags.stderr).contains("spec flags"));
    let unserved = tilegen()
        .args([
            "gemm", "--device", "emu", "--m", "16", "--n", "512", "--k", "512", "--pack",
        ])
        .arg(p("pack"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&unserved.stderr).contains("serves no kernel for N = 512"));

    // One flipped byte: verify, inspect and gemm all refuse, and nothing runs.
    let kernels = p("pack/kernels");
    let victim = std::fs::read_dir(&kernels)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut bytes = std::fs::read(&victim).unwrap();
    let i = bytes.len() - 100;
    bytes[i] ^= 0x40;
    std::fs::write(&victim, bytes).unwrap();
    for args in [vec!["pack", "verify"], vec!["pack", "inspect"]] {
        let out = tilegen().args(&args).arg(p("pack")).output().unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("SHA-256") && err.contains("nothing from this pack is used"),
            "{err}"
        );
    }
    let out = tilegen()
        .args([
            "gemm", "--device", "emu", "--m", "16", "--n", "256", "--k", "512", "--pack",
        ])
        .arg(p("pack"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(out.stdout.is_empty(), "nothing ran");
    assert!(String::from_utf8_lossy(&out.stderr).contains("SHA-256"));
}

#[test]
fn malformed_input_is_refused_with_its_place() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(
        &p,
        "[model]\nname = \"x\"\nm = [1]\n\n[[gemm]]\nname = \"a\"\nn = 100\nk = 256\n\n[space]\n",
    )
    .unwrap();
    let out = tilegen()
        .arg("tune")
        .arg(&p)
        .arg("--plan")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bad.toml:7:5: gemm.n = 100 must be a multiple of 16"),
        "{err}"
    );
    for shard in ["2/2", "1", "a/b", "0/0"] {
        let out = tilegen()
            .args(["tune", "--shape", "16,256,512", "--plan", "--shard", shard])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{shard}");
    }
    let out = tilegen()
        .args(["tune", "--shape", "16,250,512", "--plan"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("multiple of 16"));
}

#[test]
fn ranking_by_device_times_launches_on_the_emulator() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("one.toml");
    std::fs::write(
        &t,
        "[model]\nname = \"one\"\nm = [16]\n\n[[gemm]]\nname = \"a\"\nn = 256\nk = 512\n\n\
         [space]\nvariant = [\"preb\"]\nbm = [16]\nbn = [128]\nbk_elems = [256]\nwn = [32]\n",
    )
    .unwrap();
    let db = dir.path().join("d.db");
    let s = json(&ok(tilegen()
        .arg("tune")
        .arg(&t)
        .arg("--db")
        .arg(&db)
        .args([
            "--by",
            "device",
            "--device",
            "emu",
            "--warmup",
            "1",
            "--repeats",
            "3",
            "--json",
        ])));
    assert_eq!(s["evaluated"], 2, "{s}");
    for r in Db::open_existing(&db).unwrap().results().unwrap() {
        assert_eq!((r.source.as_str(), r.repeats), ("device", 3));
        assert_eq!(r.device.as_str(), "gfx950 emulator");
        assert!(r.us.is_some_and(|t| t > 0.0) && r.spread >= 0.0);
    }
}
