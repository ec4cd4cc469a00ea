//! The tuning database: resume keys, the better row wins, idempotent merges with history,
//! concurrent writers from many connections lose nothing, CSV.

use std::path::Path;

use tilegen_kernels::KernelSpec;
use tilegen_tune::db::{Db, DeviceName, Row, Status};
use tilegen_tune::sweep::unique_id;
use tilegen_tune::{By, Detail};

fn row(m: u32, spec: &KernelSpec, us: Option<f64>) -> Row {
    Row {
        uid: unique_id("test"),
        gfx: "gfx950".into(),
        cus: 256,
        m,
        n: 256,
        k: 512,
        cache_key: spec.cache_key(),
        kernel: spec.kernel_name(),
        spec: spec.values().clone(),
        status: if us.is_some() {
            Status::Ok
        } else {
            Status::Failed
        },
        reason: us.is_none().then(|| "compile: boom".to_string()),
        us,
        tflops: us.map(|t| 2.0 * f64::from(m) * 256.0 * 512.0 / t / 1e6),
        gbs: us.map(|_| 1.0),
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

fn keys(db: &Db) -> Vec<(u32, String, Status, Option<f64>)> {
    db.results()
        .unwrap()
        .into_iter()
        .map(|r| (r.m, r.cache_key, r.status, r.us))
        .collect()
}

#[test]
fn records_resume_keys_and_better_rows_win() {
    let dir = tempfile::tempdir().unwrap();
    let mut db = Db::open(dir.path().join("t.db")).unwrap();
    let a: KernelSpec = KernelSpec::preb().into();
    let b: KernelSpec = KernelSpec::preb().b_prefetch(true).into();
    db.record(&[row(16, &a, Some(5.0)), row(16, &b, None)])
        .unwrap();
    let done = db.done("gfx950", 256, By::Model).unwrap();
    assert!(done.contains(&(16, 256, 512, a.cache_key())));
    assert!(done.contains(&(16, 256, 512, b.cache_key())));
    assert!(db.done("gfx950", 256, By::Device).unwrap().is_empty());
    // A measurement replaces a failure; a slower one does not replace a faster one.
    db.record(&[row(16, &b, Some(4.0)), row(16, &a, Some(9.0))])
        .unwrap();
    let k = keys(&db);
    assert!(
        k.contains(&(16, a.cache_key(), Status::Ok, Some(5.0))),
        "{k:?}"
    );
    assert!(
        k.contains(&(16, b.cache_key(), Status::Ok, Some(4.0))),
        "{k:?}"
    );
    assert_eq!(db.counts().unwrap(), (2, 4));
    let csv = Db::csv(&db.results().unwrap());
    assert!(csv.starts_with("gfx,cu_num,M,N,K,kernelName"), "{csv}");
    assert_eq!(csv.lines().count(), 3);
}

#[test]
fn merges_are_idempotent_and_keep_the_best_and_the_history() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let a: KernelSpec = KernelSpec::preb().into();
    let mut s0 = Db::open(p("s0.db")).unwrap();
    s0.record(&[row(16, &a, Some(5.0)), row(64, &a, None)])
        .unwrap();
    let mut s1 = Db::open(p("s1.db")).unwrap();
    s1.record(&[row(16, &a, Some(3.0)), row(64, &a, Some(7.0))])
        .unwrap();
    drop((s0, s1));
    let mut out = Db::open(p("out.db")).unwrap();
    let st = out.merge(&[p("s0.db"), p("s1.db")]).unwrap();
    assert_eq!((st.read, st.added), (4, 4));
    let first = keys(&out);
    assert_eq!(
        first,
        [
            (16, a.cache_key(), Status::Ok, Some(3.0)),
            (64, a.cache_key(), Status::Ok, Some(7.0))
        ]
    );
    // Again: nothing new, nothing changes.
    let st = out.merge(&[p("s0.db"), p("s1.db"), p("out.db")]).unwrap();
    assert_eq!((st.added, st.improved), (0, 0));
    assert_eq!(keys(&out), first);
    assert_eq!(out.counts().unwrap(), (2, 4));
    let missing = out.merge(&[p("nope.db")]).unwrap_err();
    assert!(missing.to_string().contains("nope.db"), "{missing}");
}

#[test]
fn concurrent_writers_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.db");
    Db::open(&path).unwrap();
    let spec: KernelSpec = KernelSpec::preb().into();
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let (path, spec) = (&path, &spec);
            s.spawn(move || {
                let mut db = Db::open(path).unwrap();
                for i in 0..50u32 {
                    db.record(&[row(1 + t * 1000 + i, spec, Some(1.0))])
                        .unwrap();
                }
            });
        }
    });
    let db = Db::open(&path).unwrap();
    assert_eq!(db.counts().unwrap(), (200, 200));
}

#[test]
fn a_file_that_is_not_a_tuning_database_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.db");
    std::fs::write(
        &p,
        b"this is not sqlite at all, just some text padding it out",
    )
    .unwrap();
    assert!(Db::open(&p).is_err());
    assert!(Db::open_existing(Path::new("/nonexistent/x.db")).is_err());
}
