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
use tilegen_tune::{Db, Plan, Shard, SweepOptions, Target, Template};

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
            device: "MI355X timing model".into(),
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
