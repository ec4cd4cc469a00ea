//! Split-K in kernel packs: a decode template's pack, swept by the timing model, holds split-K
//! kernels that each run on the emulator within one bf16 ulp of the exact product rounded once,
//! at every shape they serve, and records that bound. Results of bf16 atomics are left out of a
//! pack unless its template allows them.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tilegen_kernels::KernelSpec;
use tilegen_mx::MxMatrix;
use tilegen_runtime::EmuDevice;
use tilegen_tune::pack::{self, BuildOptions, Pack};
use tilegen_tune::sweep::{self, Quiet};
use tilegen_tune::worker::{EvalSettings, Evaluator, InProcess, Runner, default_devices};
use tilegen_tune::{Db, DeviceName, Plan, Shard, SweepOptions, Target, Template};

/// Decode shapes whose few tiles leave most CUs idle: every spec splits K in four.
fn template(atomic: bool) -> Template {
    let text = format!(
        r#"
[model]
name = "decode"
m = [1, 16]

[[gemm]]
name = "up"
n = 208
k = 1024

[[gemm]]
name = "down"
n = 80
k = 2048

[space]
bm = [16]
bn = [64, 128]
bk_elems = [256]
wn = [32]
split_k = [4]
split_k_atomic = {atomic}
"#
    );
    Template::parse(&text, "decode.toml").unwrap()
}

fn options() -> SweepOptions {
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
        shard: Shard::default(),
        budget_per_shape: None,
        cancel: Arc::new(AtomicBool::new(false)),
    }
}

fn sweep(t: &Template, db: &mut Db) {
    let runner = Box::new(InProcess(Evaluator::new(Box::new(default_devices)))) as Box<dyn Runner>;
    let s = sweep::run(
        &Plan::from_template(t),
        db,
        vec![runner],
        &options(),
        &Quiet,
    )
    .unwrap();
    assert_eq!(s.failed, 0);
}

fn build_options(require_tuned: bool) -> BuildOptions {
    BuildOptions {
        require_tuned,
        cache_dir: None,
        jobs: 1,
        cancel: Arc::new(AtomicBool::new(false)),
    }
}

/// Random FP4 codes with scales in {2^-1, 1, 2}: every sum of their products up to K = 4096
/// fits f32 exactly, so the f32-accumulated product is the exact one in any order.
fn narrow(rows: usize, k: usize, seed: u64) -> MxMatrix {
    let (data, scales) = MxMatrix::random(rows, k, seed).unwrap().into_parts();
    let scales = scales.into_iter().map(|s| 126 + s % 3).collect();
    MxMatrix::from_parts(rows, k, data, scales).unwrap()
}

/// `x` (exact in f32) rounded to nearest even bf16, as its bits.
fn bf16_bits(x: f64) -> u16 {
    let b = (x as f32).to_bits();
    ((b + 0x7fff + ((b >> 16) & 1)) >> 16) as u16
}

/// bf16 ulps between two finite values given by their bits.
fn ulps(x: u16, y: u16) -> u32 {
    let place = |b: u16| {
        let b = i32::from(b);
        if b & 0x8000 != 0 { -(b & 0x7fff) } else { b }
    };
    place(x).abs_diff(place(y))
}

#[test]
fn every_kernel_of_a_split_k_pack_is_within_one_bf16_ulp() {
    let dir = tempfile::tempdir().unwrap();
    let t = template(false);
    let mut db = Db::open(dir.path().join("t.db")).unwrap();
    sweep(&t, &mut db);
    let out = dir.path().join("pack");
    pack::build(&t, &db, &out, &build_options(true)).unwrap();
    let pack = Pack::open(&out).unwrap();
    let manifest = pack.manifest().clone();
    assert!(!manifest.kernels.is_empty());
    // The model prefers splitting K at these shapes (the default spec is swept too).
    assert!(
        manifest.kernels.iter().any(|k| k.spec.reduces_split_k()),
        "{:?}",
        manifest.kernels.iter().map(|k| &k.name).collect::<Vec<_>>()
    );
    let dev = EmuDevice::new();
    for k in &manifest.kernels {
        assert_eq!(k.bf16_ulps, Some(1), "{}", k.name);
        for s in &k.shapes {
            let (m, n, kd) = (s.m as usize, s.n as usize, s.k as usize);
            let kernel = pack.kernel_for(s.m, s.n, s.k).unwrap().compiled().unwrap();
            assert_eq!(kernel.name(), k.name);
            let (a, b) = (narrow(m, kd, 7), narrow(n, kd, 8));
            let (c, _) = kernel
                .run(&dev, &kernel.prepare_inputs(&a, &b).unwrap())
                .unwrap();
            let (da, db) = (a.dequantize(), b.dequantize());
            let mut worst = 0;
            for (i, got) in c.bytes().chunks_exact(2).enumerate() {
                let (row, col) = (i / n, i % n);
                let exact: f64 = (0..kd)
                    .map(|j| da[row * kd + j] as f64 * db[col * kd + j] as f64)
                    .sum();
                worst = worst.max(ulps(u16::from_le_bytes([got[0], got[1]]), bf16_bits(exact)));
            }
            assert!(worst <= 1, "{} at {m}x{n}x{kd}: {worst} ulps", k.name);
        }
    }
}

#[test]
fn bf16_atomics_enter_a_pack_only_when_the_template_allows_them() {
    let dir = tempfile::tempdir().unwrap();
    let allowed = template(true);
    let mut db = Db::open(dir.path().join("t.db")).unwrap();
    sweep(&allowed, &mut db);
    // Every split-K row adds with atomics (the default spec, unsplit, is swept beside them).
    let specs: Vec<KernelSpec> = db
        .results()
        .unwrap()
        .into_iter()
        .map(|r| KernelSpec::try_from(r.spec).unwrap())
        .collect();
    assert!(specs.iter().any(|s| s.split_k() > 1));
    for s in &specs {
        let atomic = s.split_k() > 1;
        assert_eq!(s.split_k_atomic(), atomic, "{}", s.kernel_name());
        assert_eq!(s.bf16_ulps(), if atomic { 4 } else { 1 });
    }
    // The template that allows them packs them, and says what they cost.
    let out = dir.path().join("atomic");
    pack::build(&allowed, &db, &out, &build_options(true)).unwrap();
    let m = pack::verify(&out).unwrap();
    assert!(m.kernels.iter().any(|k| k.bf16_ulps == Some(4)));
    for k in &m.kernels {
        assert_eq!(k.bf16_ulps, Some(k.spec.bf16_ulps()));
    }
    // The same shapes under a template that does not: only the unsplit rows are chosen.
    let exact = template(false);
    let chosen = pack::choose(&exact, &db).unwrap();
    assert!(!chosen.is_empty());
    for row in chosen.values() {
        assert_eq!(row.spec.split_k, 1);
    }
    let out = dir.path().join("exact");
    pack::build(&exact, &db, &out, &build_options(true)).unwrap();
    let m = pack::verify(&out).unwrap();
    assert!(m.kernels.iter().all(|k| k.bf16_ulps == Some(1)));
}
