//! The spec format a tuning database records: a new file holds this build's, a file from
//! before the record existed reads as format 1 (and is marked with this build's once it writes
//! to it), a file of a newer format is refused by readers and writers alike, and a stored spec
//! with a knob where its kernel has no place for it is refused when read, never dropped.

use tilegen_kernels::{KernelSpec, Prefetch, SPEC_FORMAT};
use tilegen_tune::db::{Db, DbError, DeviceName, Row, Status};
use tilegen_tune::sweep::unique_id;
use tilegen_tune::{By, Detail};

fn row(spec: &KernelSpec) -> Row {
    Row {
        uid: unique_id("test"),
        gfx: "gfx950".into(),
        cus: 256,
        m: 16,
        n: 256,
        k: 512,
        cache_key: spec.cache_key(),
        kernel: spec.kernel_name(),
        spec: spec.values(),
        status: Status::Ok,
        reason: None,
        us: Some(5.0),
        tflops: Some(1.0),
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

fn recorded(path: &std::path::Path) -> Option<String> {
    let c = rusqlite::Connection::open(path).unwrap();
    c.query_row(
        "SELECT value FROM meta WHERE key = 'spec_format'",
        [],
        |r| r.get(0),
    )
    .ok()
}

fn set(path: &std::path::Path, sql: &str) {
    rusqlite::Connection::open(path)
        .unwrap()
        .execute_batch(sql)
        .unwrap();
}

#[test]
fn databases_record_their_spec_format_and_newer_ones_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let burst: KernelSpec = KernelSpec::new()
        .prefetch(Some(Prefetch::new().b_burst(true)))
        .into();
    let plain: KernelSpec = KernelSpec::new().into();
    Db::open(&path)
        .unwrap()
        .record(&[row(&burst), row(&plain)])
        .unwrap();
    assert_eq!(recorded(&path), Some(SPEC_FORMAT.to_string()));
    let rows = Db::open_read_only(&path).unwrap().results().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let spec = KernelSpec::try_from(r.spec).unwrap();
        assert_eq!(spec.cache_key(), r.cache_key);
    }

    // A file from before the record: read as format 1, marked once written.
    set(&path, "DELETE FROM meta WHERE key = 'spec_format'");
    assert_eq!(
        Db::open_read_only(&path).unwrap().results().unwrap().len(),
        2
    );
    assert_eq!(recorded(&path), None);
    Db::open(&path).unwrap();
    assert_eq!(recorded(&path), Some(SPEC_FORMAT.to_string()));

    // A newer (or unreadable) format: refused by readers and writers, named in the message.
    for found in [(SPEC_FORMAT + 1).to_string(), "two".to_string()] {
        set(
            &path,
            &format!("INSERT OR REPLACE INTO meta VALUES ('spec_format', '{found}')"),
        );
        for e in [Db::open_read_only(&path).err(), Db::open(&path).err()] {
            let e = e.expect("refused");
            assert!(
                matches!(&e, DbError::SpecFormat { found: f, .. } if *f == found),
                "{e}"
            );
            assert!(e.to_string().contains("spec format"), "{e}");
        }
    }
}

#[test]
fn a_stored_spec_with_a_misplaced_knob_is_refused_not_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.db");
    let spec: KernelSpec = KernelSpec::new().into();
    Db::open(&path).unwrap().record(&[row(&spec)]).unwrap();
    // deep_prime without b_prefetch: the kernel has no place for it.
    let json = serde_json::to_string(&spec).unwrap();
    let bad = json.replace("\"deep_prime\":false", "\"deep_prime\":true");
    assert_ne!(bad, json);
    set(
        &path,
        &format!("UPDATE results SET spec = '{bad}'; UPDATE history SET spec = '{bad}'"),
    );
    let rows = Db::open_read_only(&path).unwrap().results().unwrap();
    let e = KernelSpec::try_from(rows[0].spec.clone()).unwrap_err();
    assert!(
        e.to_string().contains("deep_prime requires b_prefetch"),
        "{e}"
    );
    // A field no build knows is refused as the row is read.
    let unknown = json.replacen('{', "{\"warp_n\":64,", 1);
    set(&path, &format!("UPDATE results SET spec = '{unknown}'"));
    assert!(Db::open_read_only(&path).unwrap().results().is_err());
}

/// A pack's manifest records its spec format: a newer one is refused before anything else of
/// the pack is read; a manifest without it is read as format 1 (and then judged by the rest).
#[test]
fn packs_of_a_newer_spec_format_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = |extra: &str| {
        std::fs::write(
            dir.path().join("manifest.json"),
            format!("{{\"format\": 1{extra}, \"tilegen_version\": \"0\"}}"),
        )
        .unwrap();
        tilegen_tune::pack::verify(dir.path())
            .unwrap_err()
            .to_string()
    };
    let newer = manifest(&format!(", \"spec_format\": {}", SPEC_FORMAT + 1));
    assert!(newer.contains("the spec format"), "{newer}");
    let old = manifest("");
    assert!(!old.contains("spec format"), "{old}");
    assert!(old.contains("tilegen version"), "{old}");
}
