//! `tilegen pack`, `pack verify` and `gemm --pack` given what a hostile user gives them: a
//! tampered compile cache, symlinks, FIFOs and devices in a pack, unknown manifest fields, a
//! user's file in a pack being rebuilt, a symlinked output. Each reproducer is a named test,
//! run through the binary under a memory cap and a deadline.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use tilegen_testkit::{Ending, Outcome, run_capped};

const BIN: &str = env!("CARGO_BIN_EXE_tilegen");
/// Enough for LLVM and a small emulated GEMM; far below what reading `/dev/zero` would take.
const CAP: u64 = 3 << 30;

/// The default spec serves every shape: one kernel, compiled in about a second.
const TEMPLATE: &str = r#"
[model]
name = "tiny"
m = [16, 64]

[[gemm]]
name = "up"
n = 256
k = 512

[space]
variant = ["preb"]
bm = [16]
bn = [128]
bk_elems = [256]
wn = [32]
"#;

fn tilegen(args: &[&str], env: &[(&str, &str)], deadline: u64) -> Outcome {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    run_capped(
        Path::new(BIN),
        &args,
        env,
        CAP,
        Duration::from_secs(deadline),
    )
    .unwrap()
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

fn succeeded(o: &Outcome) {
    assert_eq!(o.ending, Ending::Success, "{o:?}");
}

/// Exit status 1 with `needle` in the message: a clean refusal, not a hang or a signal.
fn refused(o: &Outcome, needle: &str) {
    assert_eq!(o.ending, Ending::Exit(1), "{o:?}");
    assert!(
        o.stderr.contains(needle),
        "expected `{needle}` in: {}",
        o.stderr
    );
}

/// A template, an empty tuning database and a pack built from them with its own cache.
struct Fixture {
    _dir: tempfile::TempDir,
    template: PathBuf,
    db: PathBuf,
    pack: PathBuf,
    cache: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let template = dir.path().join("tiny.toml");
        std::fs::write(&template, TEMPLATE).unwrap();
        let db = dir.path().join("empty.db");
        drop(tilegen_tune::Db::open(&db).unwrap());
        let (pack, cache) = (dir.path().join("pack"), dir.path().join("cache"));
        let o = build(
            &template,
            &db,
            &pack,
            &[("TILEGEN_CACHE_DIR", path(&cache))],
        );
        succeeded(&o);
        Fixture {
            _dir: dir,
            template,
            db,
            pack,
            cache,
        }
    })
}

fn build(template: &Path, db: &Path, out: &Path, env: &[(&str, &str)]) -> Outcome {
    tilegen(
        &["pack", path(template), "--db", path(db), "-o", path(out)],
        env,
        120,
    )
}

/// Builds the fixture's template into `out` with the fixture's cache.
fn rebuild(out: &Path) -> Outcome {
    let f = fixture();
    build(
        &f.template,
        &f.db,
        out,
        &[("TILEGEN_CACHE_DIR", path(&f.cache))],
    )
}

fn copy_pack(to: &Path) {
    let from = &fixture().pack;
    std::fs::create_dir_all(to.join("kernels")).unwrap();
    std::fs::copy(from.join("manifest.json"), to.join("manifest.json")).unwrap();
    for e in std::fs::read_dir(from.join("kernels")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join("kernels").join(e.file_name())).unwrap();
    }
}

fn only_file(dir: &Path) -> PathBuf {
    let v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(v.len(), 1, "{v:?}");
    v[0].clone()
}

fn mkfifo(p: &Path) {
    assert!(
        std::process::Command::new("mkfifo")
            .arg(p)
            .status()
            .unwrap()
            .success()
    );
}

fn gemm(pack: &Path) -> Outcome {
    tilegen(
        &[
            "gemm",
            "--device",
            "emu",
            "--json",
            "--m",
            "16",
            "--n",
            "256",
            "--k",
            "512",
            "--pack",
            path(pack),
        ],
        &[],
        120,
    )
}

#[test]
fn a_flipped_bit_in_a_cached_code_object_never_reaches_a_pack() {
    let f = fixture();
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("cache");
    std::fs::create_dir(&cache).unwrap();
    let entry = cache.join(only_file(&f.cache).file_name().unwrap());
    std::fs::copy(only_file(&f.cache), &entry).unwrap();
    // One bit of .text: the kernel's name and metadata are intact, its result is not.
    let mut bytes = std::fs::read(&entry).unwrap();
    let co = tilegen_codeobj::CodeObject::parse(&bytes).unwrap();
    let text = co.text.1.clone();
    let at = bytes
        .windows(64)
        .position(|w| w == &text[..64])
        .expect(".text in the file");
    bytes[at + text.len() / 2] ^= 0x04;
    std::fs::write(&entry, &bytes).unwrap();

    let out = scratch.path().join("pack");
    let o = build(
        &f.template,
        &f.db,
        &out,
        &[("TILEGEN_CACHE_DIR", path(&cache))],
    );
    succeeded(&o);
    assert!(
        o.stderr.contains("warning: compile cache") && o.stderr.contains("SHA-256"),
        "{}",
        o.stderr
    );
    assert!(o.stdout.contains("1 compiled"), "{}", o.stdout);
    // The pack's kernel is the clean build's, byte for byte, and it computes the right thing.
    assert_eq!(
        std::fs::read(only_file(&out.join("kernels"))).unwrap(),
        std::fs::read(only_file(&f.pack.join("kernels"))).unwrap()
    );
    succeeded(&tilegen(&["pack", "verify", path(&out)], &[], 30));
    let g = gemm(&out);
    succeeded(&g);
    let r: serde_json::Value = serde_json::from_str(&g.stdout).unwrap();
    assert_eq!(r["check"]["passed"], true, "{r}");
    // The cache was repaired: the next build takes the kernel from it, with no warning.
    let o = build(
        &f.template,
        &f.db,
        &out,
        &[("TILEGEN_CACHE_DIR", path(&cache))],
    );
    succeeded(&o);
    assert!(!o.stderr.contains("warning"), "{}", o.stderr);
    assert!(o.stdout.contains("1 from the cache"), "{}", o.stdout);
}

#[test]
fn a_fifo_in_a_pack_is_refused_without_blocking() {
    let scratch = tempfile::tempdir().unwrap();
    let d = scratch.path().join("pack");
    copy_pack(&d);
    let k = only_file(&d.join("kernels"));
    std::fs::remove_file(&k).unwrap();
    mkfifo(&k);
    for args in [
        vec!["pack", "verify", path(&d)],
        vec!["pack", "inspect", path(&d)],
    ] {
        let o = tilegen(&args, &[], 20);
        refused(&o, "is a FIFO, not a regular file");
    }
    refused(&gemm(&d), "is a FIFO");
}

#[test]
fn a_symlink_to_dev_zero_in_a_pack_is_refused_without_reading_it() {
    let scratch = tempfile::tempdir().unwrap();
    let d = scratch.path().join("pack");
    copy_pack(&d);
    let k = only_file(&d.join("kernels"));
    std::fs::remove_file(&k).unwrap();
    symlink("/dev/zero", &k).unwrap();
    let o = tilegen(&["pack", "verify", path(&d)], &[], 20);
    refused(&o, "is a symlink, not a regular file");
    assert!(o.elapsed < Duration::from_secs(10), "{:?}", o.elapsed);
}

#[test]
fn symlinks_out_of_a_pack_are_refused_even_when_the_checksums_match() {
    let scratch = tempfile::tempdir().unwrap();
    let s = |n: &str| scratch.path().join(n);
    copy_pack(&s("outside"));
    // kernels/ itself, one code object, and the manifest, each a link to a matching copy.
    copy_pack(&s("a"));
    std::fs::remove_dir_all(s("a/kernels")).unwrap();
    symlink(s("outside/kernels"), s("a/kernels")).unwrap();
    copy_pack(&s("b"));
    let k = only_file(&s("b/kernels"));
    std::fs::remove_file(&k).unwrap();
    symlink(only_file(&s("outside/kernels")), &k).unwrap();
    copy_pack(&s("c"));
    std::fs::remove_file(s("c/manifest.json")).unwrap();
    symlink(s("outside/manifest.json"), s("c/manifest.json")).unwrap();
    for (d, needle) in [
        ("a", "is a symlink, not a directory"),
        ("b", "is a symlink, not a regular file"),
        ("c", "is a symlink, not a regular file"),
    ] {
        refused(&tilegen(&["pack", "verify", path(&s(d))], &[], 20), needle);
        refused(&gemm(&s(d)), needle);
    }
    succeeded(&tilegen(&["pack", "verify", path(&s("outside"))], &[], 20));
}

#[test]
fn unknown_manifest_fields_are_refused() {
    let scratch = tempfile::tempdir().unwrap();
    let d = scratch.path().join("pack");
    copy_pack(&d);
    let m = d.join("manifest.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&m).unwrap()).unwrap();
    v["kernels"][0]["spec"]["fast_math"] = true.into();
    std::fs::write(&m, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    refused(
        &tilegen(&["pack", "verify", path(&d)], &[], 20),
        "unknown field `fast_math`",
    );
    refused(&gemm(&d), "unknown field `fast_math`");
}

#[test]
fn rebuilding_a_pack_keeps_a_users_file_by_refusing() {
    let scratch = tempfile::tempdir().unwrap();
    let d = scratch.path().join("pack");
    copy_pack(&d);
    std::fs::write(d.join("NOTES.md"), b"my notes").unwrap();
    let o = rebuild(&d);
    refused(&o, "holds NOTES.md, which its pack did not write");
    assert_eq!(std::fs::read(d.join("NOTES.md")).unwrap(), b"my notes");
    succeeded(&tilegen(&["pack", "verify", path(&d)], &[], 20));
    // Moved out, the rebuild goes ahead and leaves nothing behind.
    std::fs::remove_file(d.join("NOTES.md")).unwrap();
    succeeded(&rebuild(&d));
    let left: Vec<_> = std::fs::read_dir(scratch.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "pack")
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_pack_output_that_is_a_symlink_stays_a_symlink() {
    let scratch = tempfile::tempdir().unwrap();
    let s = |n: &str| scratch.path().join(n);
    copy_pack(&s("v1"));
    symlink("v1", s("current")).unwrap();
    succeeded(&rebuild(&s("current")));
    assert!(
        std::fs::symlink_metadata(s("current"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    succeeded(&tilegen(&["pack", "verify", path(&s("v1"))], &[], 20));
    assert_eq!(
        std::fs::read(only_file(&s("v1/kernels"))).unwrap(),
        std::fs::read(only_file(&fixture().pack.join("kernels"))).unwrap()
    );
}
