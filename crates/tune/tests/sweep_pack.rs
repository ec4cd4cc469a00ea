//! A small sweep by the timing model (in process), resumed and sharded; a pack built from its
//! database, verified, dispatched from, run on the emulator against the reference, rebuilt
//! from the compile cache, and refused when tampered with.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tilegen_mx::{MxMatrix, reference_gemm};
use tilegen_runtime::EmuDevice;
use tilegen_tune::pack::{self, BuildOptions, MANIFEST, Manifest, Pack, PackError};
use tilegen_tune::sweep::{self, Quiet};
use tilegen_tune::worker::{EvalSettings, Evaluator, InProcess, Runner, default_devices};
use tilegen_tune::{Db, DeviceName, Plan, Shard, SweepOptions, Target, Template};

const TINY: &str = r#"
[model]
name = "tiny"
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
variant = ["preb", "lds"]
bm = [16, 64]
bn = [128]
bk_elems = [256]
wm = [64]
wn = [32, 64]
b_prefetch = [false, true]
"#;

fn options(shard: Shard) -> SweepOptions {
    SweepOptions {
        eval: EvalSettings {
            max_cus: Some(4),
            ..EvalSettings::default()
        },
        target: Target {
            gfx: "gfx950".into(),
            cus: 256,
            device: DeviceName::TimingModel,
        },
        shard,
        budget_per_shape: None,
        cancel: Arc::new(AtomicBool::new(false)),
    }
}

fn runners(n: usize) -> Vec<Box<dyn Runner>> {
    (0..n)
        .map(|_| Box::new(InProcess(Evaluator::new(Box::new(default_devices)))) as Box<dyn Runner>)
        .collect()
}

fn model_rows(db: &Db) -> Vec<(u32, u32, u32, String, Option<f64>)> {
    let mut v: Vec<_> = db
        .results()
        .unwrap()
        .into_iter()
        .map(|r| (r.m, r.n, r.k, r.cache_key, r.us))
        .collect();
    v.sort_by(|a, b| format!("{a:?}").cmp(&format!("{b:?}")));
    v
}

#[test]
fn sweep_resume_shards_and_packs() {
    let dir = tempfile::tempdir().unwrap();
    let p = |n: &str| dir.path().join(n);
    let t = Template::parse(TINY, "tiny.toml").unwrap();
    let plan = Plan::from_template(&t);

    // The whole work in one process.
    let mut db = Db::open(p("all.db")).unwrap();
    let s = sweep::run(
        &plan,
        &mut db,
        runners(2),
        &options(Shard::default()),
        &Quiet,
    )
    .unwrap();
    assert_eq!(s.evaluated, plan.pairs);
    assert_eq!(s.skipped, 0);
    assert_eq!(
        s.failed,
        0,
        "{:?}",
        db.results()
            .unwrap()
            .iter()
            .filter_map(|r| r.reason.clone())
            .collect::<Vec<_>>()
    );
    assert_eq!(s.compiled as usize, plan.specs.len());
    assert_eq!(s.best.len(), 4, "a best config for every shape");
    assert!(
        s.best
            .iter()
            .all(|b| b.us > 0.0 && b.vs_default.is_some_and(|v| v >= 1.0))
    );

    // Run again: nothing is repeated.
    let again = sweep::run(
        &plan,
        &mut db,
        runners(1),
        &options(Shard::default()),
        &Quiet,
    )
    .unwrap();
    assert_eq!(
        (again.evaluated, again.skipped, again.compiled),
        (0, plan.pairs, 0)
    );
    assert_eq!(db.counts().unwrap(), (plan.pairs, plan.pairs));

    // Three shards, merged, equal the single sweep (the model is deterministic).
    let mut shard_paths = Vec::new();
    let mut shard_pairs = 0;
    for i in 0..3 {
        let path = p(&format!("s{i}.db"));
        let mut sdb = Db::open(&path).unwrap();
        let shard = Shard { index: i, count: 3 };
        let s = sweep::run(&plan, &mut sdb, runners(1), &options(shard), &Quiet).unwrap();
        shard_pairs += s.evaluated;
        shard_paths.push(path);
    }
    assert_eq!(shard_pairs, plan.pairs);
    let mut merged = Db::open(p("merged.db")).unwrap();
    merged.merge(&shard_paths).unwrap();
    assert_eq!(model_rows(&merged), model_rows(&db));

    // The pack: every template shape, tuned, verified.
    let cache = p("cache");
    let opts = BuildOptions {
        require_tuned: true,
        cache_dir: Some(cache.clone()),
        jobs: 2,
        cancel: Arc::new(AtomicBool::new(false)),
    };
    let out = p("pack");
    let r = pack::build(&t, &db, &out, &opts).unwrap();
    assert_eq!((r.shapes, r.untuned, r.cache_hits), (4, 0, 0));
    assert_eq!(r.compiled, r.kernels);
    let m = pack::verify(&out).unwrap();
    assert_eq!(m.kernels.len() as u64, r.kernels);
    // Rebuilt from the cache: nothing compiles.
    let r2 = pack::build(&t, &db, &out, &opts).unwrap();
    assert_eq!((r2.compiled, r2.cache_hits), (0, r.kernels));
    pack::verify(&out).unwrap();
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("tilegen-pack"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");

    // Dispatch: M between the buckets takes the next bucket up, beyond them the largest.
    let pk = Pack::open(&out).unwrap();
    assert_eq!(pk.kernel_for(40, 256, 512).unwrap().m_bucket, 64);
    assert_eq!(pk.kernel_for(1, 256, 512).unwrap().m_bucket, 16);
    assert_eq!(pk.kernel_for(1000, 128, 256).unwrap().m_bucket, 64);
    assert!(matches!(
        pk.kernel_for(16, 512, 512),
        Err(PackError::NotServed { n: 512, .. })
    ));
    assert!(matches!(pk.kernel_for(0, 256, 512), Err(PackError::ZeroM)));

    // The pack's kernel runs on the emulator without compiling and matches the reference.
    let k = pk.kernel_for(40, 256, 512).unwrap().compiled().unwrap();
    assert!(k.asm().is_empty(), "nothing was compiled");
    let a = MxMatrix::random(40, 512, 1).unwrap();
    let b = MxMatrix::random(256, 512, 2).unwrap();
    let inputs = k.prepare_inputs(&a, &b).unwrap();
    let (c, _) = k.run(&EmuDevice::new(), &inputs).unwrap();
    let cmp = c.compare(&reference_gemm(&a, &b).unwrap()).unwrap();
    assert!(cmp.passed(), "{cmp}");

    // Without results the default spec serves, marked untuned; --require-tuned refuses.
    let empty = Db::open(p("empty.db")).unwrap();
    let e = pack::build(&t, &empty, &p("pack2"), &opts).unwrap_err();
    assert!(matches!(e, PackError::Untuned(_)), "{e}");
    let loose = BuildOptions {
        require_tuned: false,
        ..opts.clone()
    };
    let r3 = pack::build(&t, &empty, &p("pack2"), &loose).unwrap();
    assert_eq!(r3.untuned, 4);
    let m3 = pack::verify(p("pack2")).unwrap();
    assert!(
        m3.kernels
            .iter()
            .all(|k| k.shapes.iter().all(|s| !s.tuned && s.result.is_none()))
    );
    assert!(
        !Pack::open(p("pack2"))
            .unwrap()
            .kernel_for(16, 256, 512)
            .unwrap()
            .tuned
    );

    // Something that is not a pack is never replaced.
    std::fs::create_dir_all(p("precious")).unwrap();
    std::fs::write(p("precious/data"), b"keep").unwrap();
    assert!(matches!(
        pack::build(&t, &db, &p("precious"), &opts),
        Err(PackError::NotAPack(_))
    ));
    assert_eq!(std::fs::read(p("precious/data")).unwrap(), b"keep");

    tampering_is_refused(&out, dir.path());
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to.join("kernels")).unwrap();
    for e in std::fs::read_dir(from.join("kernels")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join("kernels").join(e.file_name())).unwrap();
    }
    std::fs::copy(from.join(MANIFEST), to.join(MANIFEST)).unwrap();
}

fn tampering_is_refused(good: &Path, scratch: &Path) {
    let manifest: Manifest =
        serde_json::from_slice(&std::fs::read(good.join(MANIFEST)).unwrap()).unwrap();
    let first = good.join(&manifest.kernels[0].file);
    type Tamper = Box<dyn Fn(&Path)>;
    let file = manifest.kernels[0].file.clone();
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "flipped byte",
            Box::new({
                let file = file.clone();
                move |d: &Path| {
                    let p = d.join(&file);
                    let mut b = std::fs::read(&p).unwrap();
                    let i = b.len() / 2;
                    b[i] ^= 1;
                    std::fs::write(p, b).unwrap();
                }
            }),
            "SHA-256",
        ),
        (
            "truncated",
            Box::new({
                let file = file.clone();
                move |d: &Path| {
                    let p = d.join(&file);
                    let b = std::fs::read(&p).unwrap();
                    std::fs::write(p, &b[..b.len() / 3]).unwrap();
                }
            }),
            "bytes",
        ),
        (
            "missing",
            Box::new({
                let file = file.clone();
                move |d: &Path| std::fs::remove_file(d.join(&file)).unwrap()
            }),
            "cannot be read",
        ),
        (
            "extra",
            Box::new(|d: &Path| std::fs::write(d.join("kernels/evil.hsaco"), b"x").unwrap()),
            "not in the manifest",
        ),
        (
            "wrong format",
            Box::new(|d: &Path| edit(d, |m| m["format"] = 2.into())),
            "pack format",
        ),
        (
            "wrong version",
            Box::new(|d: &Path| edit(d, |m| m["tilegen_version"] = "0.0.1".into())),
            "tilegen version",
        ),
        (
            "wrong target",
            Box::new(|d: &Path| edit(d, |m| m["target"] = "gfx942".into())),
            "target",
        ),
        (
            "escaping path",
            Box::new(|d: &Path| edit(d, |m| m["kernels"][0]["file"] = "../../etc/passwd".into())),
            "outside kernels",
        ),
        (
            "swapped spec",
            Box::new(|d: &Path| edit(d, |m| m["kernels"][0]["spec"]["bn"] = 64.into())),
            "spec",
        ),
        (
            "garbage manifest",
            Box::new(|d: &Path| std::fs::write(d.join(MANIFEST), b"{ not json").unwrap()),
            "manifest",
        ),
    ];
    assert!(first.exists());
    for (i, (what, tamper, expect)) in cases.iter().enumerate() {
        let d = scratch.join(format!("tampered-{i}"));
        copy_dir(good, &d);
        pack::verify(&d).unwrap_or_else(|e| panic!("{what}: the copy should verify: {e}"));
        tamper(&d);
        let e = Pack::open(&d).expect_err(what);
        let text = format!(
            "{e}: {}",
            std::error::Error::source(&e)
                .map(|s| s.to_string())
                .unwrap_or_default()
        );
        assert!(text.contains(expect), "{what}: {text}");
    }
}

fn edit(d: &Path, f: impl Fn(&mut serde_json::Value)) {
    let p = d.join(MANIFEST);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
    f(&mut v);
    std::fs::write(&p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
}

// ---------------------------------------------------------------------------------------------
// Packs and the compile cache under hostile input. One small pack (the default spec serving
// every shape of TINY: one kernel) is built once and copied; each case changes a copy.

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use tilegen_tune::pack::{BuildReport, CODE_OBJECT_MAX_BYTES, MANIFEST_MAX_BYTES};

struct Fixture {
    _dir: tempfile::TempDir,
    template: Template,
    /// An empty tuning database: every shape is served by the default spec.
    db: PathBuf,
    /// A pack built from an empty cache.
    pack: PathBuf,
    /// The cache that build left: one entry.
    cache: PathBuf,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let template = Template::parse(TINY, "tiny.toml").unwrap();
        let db = dir.path().join("empty.db");
        drop(Db::open(&db).unwrap());
        let pack = dir.path().join("pack");
        let cache = dir.path().join("cache");
        let r = pack::build(
            &template,
            &Db::open(&db).unwrap(),
            &pack,
            &loose(Some(cache.clone())),
        )
        .unwrap();
        assert_eq!((r.kernels, r.compiled, r.cache_hits), (1, 1, 0));
        Fixture {
            _dir: dir,
            template,
            db,
            pack,
            cache,
        }
    })
}

fn loose(cache: Option<PathBuf>) -> BuildOptions {
    BuildOptions {
        require_tuned: false,
        cache_dir: cache,
        jobs: 1,
        cancel: Arc::new(AtomicBool::new(false)),
    }
}

fn build_with(out: &Path, cache: &Path) -> Result<BuildReport, PackError> {
    let f = fixture();
    let db = Db::open(&f.db).unwrap();
    pack::build(&f.template, &db, out, &loose(Some(cache.to_path_buf())))
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The one cache entry of a cache directory.
fn entry(cache: &Path) -> PathBuf {
    let n = names(cache);
    assert_eq!(n.len(), 1, "{n:?}");
    cache.join(&n[0])
}

fn mkfifo(p: &Path) {
    let st = std::process::Command::new("mkfifo")
        .arg(p)
        .status()
        .unwrap();
    assert!(st.success());
}

/// Error text with its sources.
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// `f` on another thread, failed (not hung) past a deadline: a FIFO must not block a reader.
fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what}: still running after 20 s"))
}

/// Two packs are the same: every code object byte for byte, the manifest but its time.
fn assert_same_pack(a: &Path, b: &Path) {
    assert_eq!(names(&a.join("kernels")), names(&b.join("kernels")));
    for n in names(&a.join("kernels")) {
        assert_eq!(
            std::fs::read(a.join("kernels").join(&n)).unwrap(),
            std::fs::read(b.join("kernels").join(&n)).unwrap(),
            "{n}"
        );
    }
    let manifest = |d: &Path| {
        let mut v: serde_json::Value =
            serde_json::from_slice(&std::fs::read(d.join(MANIFEST)).unwrap()).unwrap();
        v["created"] = 0.into();
        v
    };
    assert_eq!(manifest(a), manifest(b));
    assert_eq!(names(a), names(b));
}

/// Flips one bit inside the `.text` of a code object file: a kernel that still loads and
/// runs, and computes something else.
fn flip_text_bit(path: &Path) {
    let mut bytes = std::fs::read(path).unwrap();
    let co = tilegen_codeobj::CodeObject::parse(&bytes).unwrap();
    let text = &co.text.1;
    assert!(text.len() > 64);
    let at = bytes
        .windows(64)
        .position(|w| w == &text[..64])
        .expect(".text in the file");
    bytes[at + text.len() / 2] ^= 0x04;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_tampered_compile_cache_entry_is_discarded_and_rebuilt() {
    let f = fixture();
    let scratch = tempfile::tempdir().unwrap();
    let cache = scratch.path().join("cache");
    copy_tree(&f.cache, &cache);
    let entry = entry(&cache);
    let good = std::fs::read(&entry).unwrap();
    // The reproducer: one flipped bit in .text, name and kernel symbol intact.
    flip_text_bit(&entry);
    let out = scratch.path().join("pack");
    let r = build_with(&out, &cache).unwrap();
    assert_eq!((r.compiled, r.cache_hits, r.cache_discarded), (1, 0, 1));
    assert_eq!(r.discarded[0].path, entry);
    assert!(
        r.discarded[0].reason.contains("SHA-256"),
        "{:?}",
        r.discarded
    );
    assert!(r.discarded[0].removed);
    // The pack equals the one built from a clean cache, and verifies.
    pack::verify(&out).unwrap();
    assert_same_pack(&f.pack, &out);
    // The cache holds the good entry again and serves the next build.
    assert_eq!(std::fs::read(&entry).unwrap(), good);
    let r = build_with(&out, &cache).unwrap();
    assert_eq!((r.compiled, r.cache_hits, r.cache_discarded), (0, 1, 0));
    assert_same_pack(&f.pack, &out);
}

#[test]
fn unusable_compile_cache_entries_are_discarded_never_followed() {
    let f = fixture();
    let scratch = tempfile::tempdir().unwrap();
    let s = |n: &str| scratch.path().join(n);
    let name = std::fs::read_dir(&f.cache)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .file_name();
    let good = std::fs::read(f.cache.join(&name)).unwrap();
    std::fs::write(s("outside.hsaco"), &good).unwrap();
    // A valid code object of another kernel.
    let other =
        tilegen_tune::eval::compile(&tilegen_kernels::KernelSpec::new().bn(64).into()).unwrap();
    type Plant = Box<dyn Fn(&Path)>;
    // (case, how the entry is planted, words of the reason, removed)
    let cases: Vec<(&str, Plant, &str, bool)> = vec![
        (
            "truncated",
            Box::new({
                let good = good.clone();
                move |p: &Path| std::fs::write(p, &good[..good.len() / 2]).unwrap()
            }),
            "SHA-256",
            true,
        ),
        (
            "symlink to a matching copy outside the cache",
            Box::new({
                let o = s("outside.hsaco");
                move |p: &Path| symlink(&o, p).unwrap()
            }),
            "symlink",
            false,
        ),
        ("FIFO", Box::new(|p: &Path| mkfifo(p)), "FIFO", false),
        (
            "symlink to /dev/zero",
            Box::new(|p: &Path| symlink("/dev/zero", p).unwrap()),
            "symlink",
            false,
        ),
        (
            "directory",
            Box::new(|p: &Path| std::fs::create_dir(p).unwrap()),
            "directory",
            false,
        ),
        (
            "huge (sparse)",
            Box::new(|p: &Path| {
                let f = std::fs::File::create(p).unwrap();
                f.set_len(CODE_OBJECT_MAX_BYTES + 1).unwrap();
            }),
            "limit",
            true,
        ),
        (
            "another kernel under this key, with its true digest",
            Box::new({
                let co = other.code_object().to_vec();
                move |p: &Path| {
                    let digest = pack::sha256_hex(&co);
                    let n = p.file_name().unwrap().to_str().unwrap();
                    let key = n.split('-').next().unwrap();
                    let renamed = p.with_file_name(format!("{key}-{digest}.hsaco"));
                    std::fs::write(renamed, &co).unwrap();
                }
            }),
            "does not hold kernel",
            true,
        ),
    ];
    let mut refused = 0;
    for (i, (what, plant, reason, removed)) in cases.into_iter().enumerate() {
        let cache = s(&format!("cache{i}"));
        std::fs::create_dir(&cache).unwrap();
        plant(&cache.join(&name));
        let planted = names(&cache);
        let out = s(&format!("pack{i}"));
        let r = within(what, {
            let (out, cache) = (out.clone(), cache.clone());
            move || build_with(&out, &cache)
        })
        .unwrap_or_else(|e| panic!("{what}: {}", chain(&e)));
        assert_eq!((r.cache_hits, r.compiled), (0, 1), "{what}");
        assert_eq!(r.discarded.len(), 1, "{what}: {:?}", r.discarded);
        let d = &r.discarded[0];
        assert!(d.reason.contains(reason), "{what}: {}", d.reason);
        assert_eq!(d.removed, removed, "{what}");
        assert_eq!(d.path, cache.join(&planted[0]), "{what}");
        if !removed {
            // Left for its owner, and nothing was written through it.
            assert!(std::fs::symlink_metadata(&d.path).is_ok(), "{what}");
        }
        assert_eq!(std::fs::read(s("outside.hsaco")).unwrap(), good, "{what}");
        pack::verify(&out).unwrap();
        assert_same_pack(&f.pack, &out);
        refused += 1;
    }
    eprintln!("cache: {refused} unusable entries discarded, {refused} packs equal the clean one");
}

/// A fresh copy of the fixture's pack.
fn pack_copy(scratch: &Path, name: &str) -> PathBuf {
    let d = scratch.join(name);
    copy_tree(&fixture().pack, &d);
    pack::verify(&d).unwrap();
    d
}

fn kernel_file(pack: &Path) -> PathBuf {
    let k = pack.join("kernels");
    k.join(&names(&k)[0])
}

#[test]
fn pack_files_are_read_only_as_regular_files_inside_the_pack() {
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    let outside = pack_copy(s, "outside");
    type Tamper = Box<dyn Fn(&Path)>;
    let code = |p: &Path| kernel_file(p);
    let cases: Vec<(&str, Tamper, &str)> = vec![
        (
            "code object: symlink to a matching copy outside",
            Box::new({
                let o = outside.clone();
                move |d: &Path| {
                    let k = code(d);
                    std::fs::remove_file(&k).unwrap();
                    symlink(code(&o), &k).unwrap();
                }
            }),
            "is a symlink, not a regular file",
        ),
        (
            "kernels/: symlink to a matching copy outside",
            Box::new({
                let o = outside.clone();
                move |d: &Path| {
                    std::fs::remove_dir_all(d.join("kernels")).unwrap();
                    symlink(o.join("kernels"), d.join("kernels")).unwrap();
                }
            }),
            "is a symlink, not a directory",
        ),
        (
            "manifest: symlink to a matching copy outside",
            Box::new({
                let o = outside.clone();
                move |d: &Path| {
                    std::fs::remove_file(d.join(MANIFEST)).unwrap();
                    symlink(o.join(MANIFEST), d.join(MANIFEST)).unwrap();
                }
            }),
            "is a symlink, not a regular file",
        ),
        (
            "code object: FIFO",
            Box::new(move |d: &Path| {
                let k = code(d);
                std::fs::remove_file(&k).unwrap();
                mkfifo(&k);
            }),
            "is a FIFO",
        ),
        (
            "manifest: FIFO",
            Box::new(|d: &Path| {
                std::fs::remove_file(d.join(MANIFEST)).unwrap();
                mkfifo(&d.join(MANIFEST));
            }),
            "is a FIFO",
        ),
        (
            "code object: symlink to /dev/zero",
            Box::new(move |d: &Path| {
                let k = code(d);
                std::fs::remove_file(&k).unwrap();
                symlink("/dev/zero", &k).unwrap();
            }),
            "is a symlink",
        ),
        (
            "code object: a directory",
            Box::new(move |d: &Path| {
                let k = code(d);
                std::fs::remove_file(&k).unwrap();
                std::fs::create_dir(&k).unwrap();
            }),
            "is a directory",
        ),
        (
            "code object: bigger than its manifest says",
            Box::new(move |d: &Path| {
                let k = code(d);
                let f = std::fs::OpenOptions::new().append(true).open(&k).unwrap();
                f.set_len(f.metadata().unwrap().len() + (1 << 30)).unwrap();
            }),
            "bytes, the manifest says",
        ),
        (
            "manifest: claims a 1 TiB code object",
            Box::new(|d: &Path| edit(d, |m| m["kernels"][0]["bytes"] = (1u64 << 40).into())),
            "the limit for a code object",
        ),
        (
            "manifest: huge (sparse)",
            Box::new(|d: &Path| {
                let f = std::fs::OpenOptions::new()
                    .append(true)
                    .open(d.join(MANIFEST))
                    .unwrap();
                f.set_len(MANIFEST_MAX_BYTES + 1).unwrap();
            }),
            "the limit for a manifest",
        ),
    ];
    let mut refused = 0;
    for (i, (what, tamper, expect)) in cases.into_iter().enumerate() {
        let d = pack_copy(s, &format!("case{i}"));
        tamper(&d);
        for open in [false, true] {
            let d = d.clone();
            let e = within(what, move || {
                if open {
                    Pack::open(&d).map(|_| ())
                } else {
                    pack::verify(&d).map(|_| ())
                }
            })
            .expect_err(what);
            let text = chain(&e);
            assert!(text.contains(expect), "{what}: {text}");
            refused += 1;
        }
    }
    // The pack directory itself may be a symlink: the user named it.
    let link = s.join("link");
    symlink(&outside, &link).unwrap();
    Pack::open(&link).unwrap();
    eprintln!("pack files: {refused} clean refusals, 1 success");
}

#[test]
fn unknown_manifest_fields_are_refused() {
    let scratch = tempfile::tempdir().unwrap();
    type Edit = Box<dyn Fn(&mut serde_json::Value)>;
    let result = serde_json::json!({
        "uid": "u", "source": "model", "device": "MI355X timing model",
        "cus": 256, "us": 1.0, "tflops": 2.0
    });
    let cases: Vec<(&str, Edit, bool)> = vec![
        (
            "top level",
            Box::new(|m| m["signed_by"] = "me".into()),
            false,
        ),
        (
            "kernel",
            Box::new(|m| m["kernels"][0]["entry"] = 0.into()),
            false,
        ),
        (
            "spec",
            Box::new(|m| m["kernels"][0]["spec"]["fast_math"] = true.into()),
            false,
        ),
        (
            "shape",
            Box::new(|m| m["kernels"][0]["shapes"][0]["batch"] = 2.into()),
            false,
        ),
        (
            "tuning result",
            Box::new({
                let mut r = result.clone();
                r["note"] = "x".into();
                move |m| m["kernels"][0]["shapes"][0]["result"] = r.clone()
            }),
            false,
        ),
        // Known fields, spelled out, are fine.
        (
            "a known tuning result",
            Box::new({
                let r = result.clone();
                move |m| m["kernels"][0]["shapes"][0]["result"] = r.clone()
            }),
            true,
        ),
        (
            "a spec field at its default",
            Box::new(|m| m["kernels"][0]["spec"]["xcd_group_m"] = 0.into()),
            true,
        ),
    ];
    let (mut refusals, mut successes) = (0, 0);
    for (i, (what, change, accepted)) in cases.into_iter().enumerate() {
        let d = pack_copy(scratch.path(), &format!("case{i}"));
        edit(&d, change);
        match pack::verify(&d) {
            Ok(_) if accepted => successes += 1,
            Err(e) if !accepted => {
                let text = chain(&e);
                assert!(text.contains("unknown field"), "{what}: {text}");
                refusals += 1;
            }
            r => panic!("{what}: {:?}", r.map(|_| ()).map_err(|e| chain(&e))),
        }
    }
    // A spec key given twice (JSON allows it; the manifest does not).
    let d = pack_copy(scratch.path(), "duplicate");
    let text = std::fs::read_to_string(d.join(MANIFEST)).unwrap();
    let text = text.replacen("\"bm\":", "\"bm\": 999, \"bm\":", 1);
    std::fs::write(d.join(MANIFEST), text).unwrap();
    let e = pack::verify(&d).unwrap_err();
    assert!(chain(&e).contains("duplicate field `bm`"), "{}", chain(&e));
    refusals += 1;
    eprintln!("manifest fields: {refusals} clean refusals, {successes} successes");
}

#[test]
fn rebuilding_a_pack_never_deletes_a_file_it_did_not_write() {
    let f = fixture();
    let scratch = tempfile::tempdir().unwrap();
    let s = scratch.path();
    type Plant = Box<dyn Fn(&Path)>;
    let cases: Vec<(&str, Plant, &str)> = vec![
        (
            "a user's file beside the manifest",
            Box::new(|d: &Path| std::fs::write(d.join("notes.txt"), b"mine").unwrap()),
            "notes.txt",
        ),
        (
            "a user's file in kernels/",
            Box::new(|d: &Path| std::fs::write(d.join("kernels/mine.hsaco"), b"mine").unwrap()),
            "kernels/mine.hsaco",
        ),
        (
            "a user's directory",
            Box::new(|d: &Path| {
                std::fs::create_dir(d.join("data")).unwrap();
                std::fs::write(d.join("data/x"), b"mine").unwrap();
            }),
            "data",
        ),
        (
            "a symlink in kernels/",
            Box::new(|d: &Path| symlink("/etc/hostname", d.join("kernels/link.hsaco")).unwrap()),
            "kernels/link.hsaco",
        ),
    ];
    let mut refusals = 0;
    for (i, (what, plant, named)) in cases.into_iter().enumerate() {
        let d = pack_copy(s, &format!("case{i}"));
        plant(&d);
        let before = snapshot(&d);
        let e = build_with(&d, &f.cache).expect_err(what);
        assert!(matches!(e, PackError::Foreign { .. }), "{what}: {e}");
        assert!(e.to_string().contains(named), "{what}: {e}");
        assert_eq!(snapshot(&d), before, "{what}: the directory is unchanged");
        refusals += 1;
    }
    // An old pack of another tilegen version holding only its own files is replaced.
    let d = pack_copy(s, "old-version");
    edit(&d, |m| m["tilegen_version"] = "0.0.1".into());
    let r = build_with(&d, &f.cache).unwrap();
    assert_eq!(r.old_pack_kept, None);
    assert_same_pack(&f.pack, &d);
    let left: Vec<_> = names(s)
        .into_iter()
        .filter(|n| n.contains("tilegen-pack"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
    eprintln!("pack rebuilds: {refusals} clean refusals, 1 success");
}

/// Every path under `d` with its bytes (or link target), to compare before and after.
fn snapshot(d: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![d.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            out.push((
                p.clone(),
                std::fs::read_link(&p)
                    .unwrap()
                    .into_os_string()
                    .into_encoded_bytes(),
            ));
        } else if m.is_dir() {
            out.push((p.clone(), Vec::new()));
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        } else {
            out.push((p.clone(), std::fs::read(&p).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn a_pack_is_written_through_a_symlink_and_the_link_stays() {
    let f = fixture();
    let scratch = tempfile::tempdir().unwrap();
    let s = |n: &str| scratch.path().join(n);
    // A link to an existing pack: the pack it names is replaced.
    let real = pack_copy(scratch.path(), "real");
    std::fs::create_dir(s("links")).unwrap();
    symlink("../real", s("links/current")).unwrap();
    build_with(&s("links/current"), &f.cache).unwrap();
    assert!(
        std::fs::symlink_metadata(s("links/current"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_same_pack(&f.pack, &real);
    // A dangling link: the pack is made where it points.
    symlink("new-pack", s("dangling")).unwrap();
    build_with(&s("dangling"), &f.cache).unwrap();
    assert!(
        std::fs::symlink_metadata(s("dangling"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_same_pack(&f.pack, &s("new-pack"));
    Pack::open(s("dangling")).unwrap();
    // A link to something that is not a pack is refused, and the link and its target stay.
    std::fs::create_dir(s("precious")).unwrap();
    std::fs::write(s("precious/data"), b"keep").unwrap();
    symlink("precious", s("to-precious")).unwrap();
    assert!(matches!(
        build_with(&s("to-precious"), &f.cache),
        Err(PackError::NotAPack(_))
    ));
    assert_eq!(std::fs::read(s("precious/data")).unwrap(), b"keep");
    let left: Vec<_> = names(scratch.path())
        .into_iter()
        .chain(names(&s("links")))
        .filter(|n| n.contains("tilegen-pack"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}
