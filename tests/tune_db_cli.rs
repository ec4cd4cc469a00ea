//! Tuning databases a hostile user hands to `tilegen tune` and `tilegen pack`, through the
//! binary under a memory cap and a deadline: another application's SQLite file is refused by
//! every reading and writing command and left byte for byte as it was (no table, no row, no
//! WAL switch, no file beside it); a read-only database is reported and exported; a failed
//! merge leaves no output; a database holding absurd numbers is refused or reported at once;
//! two sweeps sharing a database split the work.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use rusqlite::Connection;
use tilegen::kernels::KernelSpec;
use tilegen_testkit::{Ending, Outcome, run_capped};
use tilegen_tune::{By, Db, Detail, DeviceName, Plan, Row, Status, Template};

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");
/// Enough for a refusal or a report; far below what a runaway loop would take.
const CAP: u64 = 2 << 30;

fn tilegen(args: &[&str]) -> Outcome {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    run_capped(Path::new(BIN), &args, &[], CAP, Duration::from_secs(60)).unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Every file under `dir` (names, modes and bytes).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let meta = std::fs::symlink_metadata(e.path()).unwrap();
        if meta.is_dir() {
            for (p, v) in snapshot(&e.path()) {
                out.insert(p, v);
            }
            out.insert(e.path(), (meta.permissions().mode(), Vec::new()));
        } else {
            let bytes = if meta.is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            out.insert(e.path(), (meta.permissions().mode(), bytes));
        }
    }
    out
}

/// A result as a sweep records it.
fn row(uid: &str, m: u32, us: f64) -> Row {
    let spec = KernelSpec::preb();
    let flops = 2.0 * f64::from(m) * 256.0 * 512.0;
    Row {
        uid: uid.into(),
        gfx: "gfx950".into(),
        cus: 256,
        m,
        n: 256,
        k: 512,
        cache_key: spec.cache_key(),
        kernel: spec.kernel_name(),
        spec: spec.values().clone(),
        status: Status::Ok,
        reason: None,
        us: Some(us),
        tflops: Some(flops / us / 1e6),
        gbs: Some(1.0),
        source: By::Model,
        device: DeviceName::TimingModel,
        repeats: 1,
        spread: 0.0,
        tilegen_version: "0.1.0".into(),
        llvm_version: "22.1.0".into(),
        compile_ms: Some(10.0),
        created: 1.0,
        detail: Detail::Empty {},
    }
}

/// A tuning database with a result for M = 16 and 64 (the shapes of `template`'s `up`).
fn good_db(path: &Path) {
    Db::open(path)
        .unwrap()
        .record(&[row("a", 16, 4.0), row("b", 64, 5.0)])
        .unwrap();
}

/// One GEMM at two M buckets and a space of a few specs: quick to sweep with the model.
fn template(dir: &Path) -> PathBuf {
    let p = dir.join("small.toml");
    std::fs::write(
        &p,
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
bm = [16, 32]
bn = [128]
bk_elems = [256, 512]
wn = [32, 64]
b_prefetch = [false, true]
"#,
    )
    .unwrap();
    p
}

/// Makes a file at the path given.
type Make = fn(&Path);

/// Files that are not tuning databases.
fn foreign_kinds() -> Vec<(&'static str, Make)> {
    vec![
        ("another application's database", |p| {
            Connection::open(p)
                .unwrap()
                .execute_batch(
                    "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                     INSERT INTO meta VALUES ('owner', 'someone else');
                     CREATE TABLE results (id INTEGER PRIMARY KEY, score REAL);
                     INSERT INTO results (score) VALUES (2.5);
                     CREATE TABLE history (id INTEGER PRIMARY KEY, note TEXT);",
                )
                .unwrap();
        }),
        ("another application's database in WAL mode", |p| {
            let c = Connection::open(p).unwrap();
            c.pragma_update(None, "journal_mode", "WAL").unwrap();
            c.execute_batch(
                "CREATE TABLE meta (key TEXT, value TEXT); INSERT INTO meta VALUES ('v', '1');",
            )
            .unwrap();
        }),
        ("an SQLite file with another application id", |p| {
            let c = Connection::open(p).unwrap();
            c.pragma_update(None, "application_id", 0x4750_4b47)
                .unwrap();
            c.execute_batch("CREATE TABLE t (x)").unwrap();
        }),
        ("an SQLite file with only a user_version", |p| {
            Connection::open(p)
                .unwrap()
                .pragma_update(None, "user_version", 3)
                .unwrap();
        }),
        (
            "a tuning database with another application's table added",
            |p| {
                good_db(p);
                Connection::open(p)
                    .unwrap()
                    .execute_batch("CREATE TABLE users (name TEXT)")
                    .unwrap();
            },
        ),
        ("text", |p| {
            std::fs::write(p, "M,N,K\n16,256,512\n").unwrap()
        }),
        ("an SQLite header and garbage", |p| {
            let mut b = b"SQLite format 3\0".to_vec();
            b.resize(8192, 0x5a);
            std::fs::write(p, b).unwrap();
        }),
    ]
}

/// The reproducer: every command that reads or writes a database, given another application's
/// file, refuses it, writes no output and leaves the file (and the files beside it) unchanged.
#[test]
fn foreign_files_are_refused_by_every_command_and_left_unchanged() {
    let root = tempfile::tempdir().unwrap();
    let t = template(root.path());
    let good = root.path().join("good.db");
    good_db(&good);
    let (mut cases, mut refusals) = (0, 0);
    for (what, make) in foreign_kinds() {
        let dir = tempfile::tempdir().unwrap();
        let app = dir.path().join("app.db");
        make(&app);
        let before = snapshot(dir.path());
        let out = tempfile::tempdir().unwrap();
        let o = |n: &str| out.path().join(n);
        let (report, csv, merged, pack) = (o("report"), o("x.csv"), o("m.db"), o("pack"));
        let commands: [Vec<&str>; 7] = [
            vec!["tune", "report", path(&app), "-o", path(&report)],
            vec!["tune", "export", path(&app), "-o", path(&csv)],
            vec!["tune", "merge", path(&app), "-o", path(&merged)],
            vec![
                "tune",
                "merge",
                path(&good),
                path(&app),
                "-o",
                path(&merged),
            ],
            vec!["tune", "merge", path(&good), "-o", path(&app)],
            vec!["pack", path(&t), "--db", path(&app), "-o", path(&pack)],
            vec![
                "tune",
                path(&t),
                "--db",
                path(&app),
                "--max-cus",
                "4",
                "--jobs",
                "1",
            ],
        ];
        for args in commands {
            let r = tilegen(&args);
            cases += 1;
            assert_eq!(r.ending, Ending::Exit(1), "{what}: {args:?}: {r:?}");
            assert!(
                r.stderr.contains("is not a tilegen tuning database")
                    && r.stderr.contains("left unchanged"),
                "{what}: {args:?}: {}",
                r.stderr
            );
            refusals += 1;
            assert_eq!(
                snapshot(dir.path()),
                before,
                "{what}: {args:?} changed the file or made one beside it"
            );
            assert!(
                std::fs::read_dir(out.path()).unwrap().next().is_none(),
                "{what}: {args:?} wrote an output"
            );
        }
    }
    eprintln!("foreign databases: {cases} cases, {refusals} clean refusals, 0 successes");
    assert_eq!(cases, refusals);
    let r = tilegen(&[
        "tune",
        "export",
        path(&good),
        "-o",
        path(&root.path().join("g.csv")),
    ]);
    assert_eq!(r.ending, Ending::Success, "{r:?}");
}

/// Reading commands open the database read-only: a read-only file in a read-only directory
/// is reported and exported, and nothing beside it changes.
#[test]
fn a_read_only_database_is_reported_and_exported() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("ro");
    std::fs::create_dir(&dir).unwrap();
    let db = dir.join("t.db");
    good_db(&db);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o444)).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o555)).unwrap();
    let before = snapshot(&dir);
    let report = tilegen(&[
        "tune",
        "report",
        path(&db),
        "-o",
        path(&root.path().join("r")),
    ]);
    let csv = root.path().join("t.csv");
    let export = tilegen(&["tune", "export", path(&db), "-o", path(&csv)]);
    let after = snapshot(&dir);
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    assert_eq!(report.ending, Ending::Success, "{report:?}");
    assert!(
        report.stdout.contains("| 64 | 256 | 512 |"),
        "{}",
        report.stdout
    );
    assert_eq!(export.ending, Ending::Success, "{export:?}");
    assert_eq!(std::fs::read_to_string(&csv).unwrap().lines().count(), 3);
    assert_eq!(after, before);
}

/// `tune merge` creates its output only when the merge succeeds, and leaves an existing
/// output as it was when an input is bad.
#[test]
fn a_failed_merge_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    good_db(&p("good.db"));
    std::fs::write(p("garbage.db"), b"garbage").unwrap();
    good_db(&p("bad-row.db"));
    Connection::open(p("bad-row.db"))
        .unwrap()
        .execute_batch("UPDATE history SET tflops = -1 WHERE uid = 'b'")
        .unwrap();
    let before = snapshot(dir.path());
    for inputs in [
        vec![p("garbage.db")],
        vec![p("good.db"), p("garbage.db")],
        vec![p("good.db"), p("bad-row.db")],
        vec![p("good.db"), p("missing.db")],
    ] {
        let mut args = vec!["tune", "merge"];
        args.extend(inputs.iter().map(|i| path(i)));
        let out = p("m.db");
        args.extend(["-o", path(&out)]);
        let r = tilegen(&args);
        assert_eq!(r.ending, Ending::Exit(1), "{args:?}: {r:?}");
        assert_eq!(snapshot(dir.path()), before, "{args:?} left a file");
    }
    // Into an existing database: one bad input and nothing changes.
    let r = tilegen(&["tune", "merge", path(&p("good.db")), "-o", path(&p("m.db"))]);
    assert_eq!(r.ending, Ending::Success, "{r:?}");
    let kept = snapshot(dir.path());
    let r = tilegen(&[
        "tune",
        "merge",
        path(&p("bad-row.db")),
        "-o",
        path(&p("m.db")),
    ]);
    assert_eq!(r.ending, Ending::Exit(1), "{r:?}");
    assert!(r.stderr.contains("tflops"), "{}", r.stderr);
    assert_eq!(snapshot(dir.path()), kept);
}

/// The reproducer (a report spun forever on `us = -1e308, tflops = 1e308`) and its kin: any
/// number or type a database holds gives a prompt refusal naming the row and column, or a
/// report.
#[test]
fn reports_of_absurd_numbers_end_promptly() {
    let dir = tempfile::tempdir().unwrap();
    let clean = dir.path().join("clean.db");
    good_db(&clean);
    let (mut cases, mut refusals, mut successes) = (0, 0, 0);
    for (sql, refused) in [
        ("UPDATE results SET us = -1e308, tflops = 1e308", Some("us")),
        ("UPDATE results SET us = 1e-300, tflops = 1e308", None),
        ("UPDATE results SET us = 1e308, tflops = 1e-300", None),
        ("UPDATE results SET tflops = 1.7976931348623157e308", None),
        ("UPDATE results SET us = 9e999", Some("us")),
        ("UPDATE results SET us = -9e999", Some("us")),
        ("UPDATE results SET us = 0", Some("us")),
        ("UPDATE results SET us = NULL", Some("us")),
        ("UPDATE results SET tflops = 9e999", Some("tflops")),
        ("UPDATE results SET gbs = -0.5", Some("gbs")),
        ("UPDATE results SET spread = -9e999", Some("spread")),
        ("UPDATE results SET created = 9e999", Some("created")),
        ("UPDATE results SET compile_ms = -1", Some("compile_ms")),
        ("UPDATE results SET m = 4294967296", Some("m")),
        ("UPDATE results SET n = -256", Some("n")),
        ("UPDATE results SET k = 0", Some("k")),
        ("UPDATE results SET cus = 9223372036854775807", Some("cus")),
        ("UPDATE results SET repeats = -1", Some("repeats")),
        ("UPDATE results SET m = 'sixteen'", Some("m")),
        ("UPDATE results SET us = 'fast'", Some("us")),
        ("UPDATE results SET kernel = x'c0ff'", Some("kernel")),
        ("UPDATE results SET status = 'best'", Some("status")),
        ("UPDATE results SET spec = 'not json'", Some("spec")),
        ("UPDATE results SET spec = '{}'", Some("spec")),
    ] {
        let case = tempfile::tempdir().unwrap();
        let db = case.path().join("t.db");
        std::fs::copy(&clean, &db).unwrap();
        Connection::open(&db)
            .unwrap()
            .execute_batch(&format!("{sql} WHERE uid = 'a'"))
            .unwrap();
        let r = tilegen(&[
            "tune",
            "report",
            path(&db),
            "-o",
            path(&case.path().join("r")),
        ]);
        cases += 1;
        assert!(
            r.elapsed < Duration::from_secs(20),
            "{sql}: {:?}",
            r.elapsed
        );
        match refused {
            Some(column) => {
                assert_eq!(r.ending, Ending::Exit(1), "{sql}: {r:?}");
                assert!(r.stderr.contains(column), "{sql}: {}", r.stderr);
                refusals += 1;
            }
            None => {
                assert_eq!(r.ending, Ending::Success, "{sql}: {r:?}");
                let svg = std::fs::read_to_string(case.path().join("r/tflops.svg")).unwrap();
                assert!(svg.contains("</svg>"));
                successes += 1;
            }
        }
        // Export reads the same rows and ends the same way.
        let e = tilegen(&[
            "tune",
            "export",
            path(&db),
            "-o",
            path(&case.path().join("x.csv")),
        ]);
        cases += 1;
        assert_eq!(e.ending, r.ending, "{sql}: {e:?}");
        if refused.is_some() {
            refusals += 1;
        } else {
            successes += 1;
        }
    }
    eprintln!("absurd numbers: {cases} cases, {refusals} clean refusals, {successes} successes");
}

fn sweep(t: &Path, db: &Path) -> Command {
    let mut c = Command::new(BIN);
    c.arg("tune")
        .arg(t)
        .arg("--db")
        .arg(db)
        .args(["--max-cus", "4", "--jobs", "1", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// The reproducer: two sweeps on one database each did the whole sweep (two history rows per
/// result). Sweeps sharing a database claim their work: every pair is evaluated once, and
/// each sweep ends when the whole plan is recorded, by it or by the others.
#[test]
fn sweeps_sharing_a_database_split_the_work() {
    let dir = tempfile::tempdir().unwrap();
    let t = template(dir.path());
    let db = dir.path().join("shared.db");
    let pairs = Plan::from_template(&Template::load(&t).unwrap()).pairs;
    let children: Vec<_> = (0..3).map(|_| sweep(&t, &db).spawn().unwrap()).collect();
    let mut evaluated = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let n = |k: &str| s[k].as_u64().unwrap();
        assert_eq!(
            n("evaluated") + n("skipped") + n("done_elsewhere"),
            pairs,
            "{s}"
        );
        assert_eq!(s["best"].as_array().unwrap().len(), 4, "{s}");
        evaluated += n("evaluated");
    }
    assert_eq!(evaluated, pairs);
    let db = Db::open_read_only(&db).unwrap();
    assert_eq!(
        db.counts().unwrap(),
        (pairs, pairs),
        "one history row per result"
    );
}

/// A sweep killed with SIGKILL leaves its claims behind; the next sweep sees their process is
/// gone, takes the work over and does exactly what is left.
#[test]
fn a_killed_sweeps_claims_are_taken_over_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let t = template(dir.path());
    let db = dir.path().join("k.db");
    let pairs = Plan::from_template(&Template::load(&t).unwrap()).pairs;
    let mut child = sweep(&t, &db)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let counts = |db: &Path| -> Option<(u64, u64, u64)> {
        let c = Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).ok()?;
        let n = |t: &str| {
            c.query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| {
                r.get::<_, i64>(0)
            })
            .ok()
            .map(|n| n as u64)
        };
        Some((n("results")?, n("history")?, n("claims")?))
    };
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_secs(120) {
        if db.exists() && counts(&db).is_some_and(|(r, _, c)| r > 0 && c > 0) {
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let (results, history, claims) = counts(&db).unwrap();
    assert!(results < pairs, "the sweep finished before it was killed");
    assert_eq!(results, history);
    assert!(claims > 0, "the killed sweep held no claim");
    let out = sweep(&t, &db).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(s["skipped"], results, "{s}");
    assert_eq!(s["evaluated"], pairs - results, "{s}");
    assert_eq!(counts(&db), Some((pairs, pairs, 0)));
}
