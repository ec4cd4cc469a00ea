//! A tuning sweep: the (spec, shape) work of a template, sharded, resumed from the database,
//! run on parallel workers, every result recorded.
//!
//! Sweeps sharing a database split the work: each job is claimed in the database before it
//! runs ([`Db::claim`]), a pair another running sweep holds is left to it and taken up again if
//! that sweep stops without recording it, and a sweep returns once every pair of its shard is
//! recorded, by it or by the others.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tilegen_kernels::KernelSpec;

use crate::db::{CLAIM_LEASE, Claimant, Db, DbError, DeviceName, Row, Status, WorkKey};
use crate::eval::{By, Detail};
use crate::space::{EnumStats, default_spec, enumerate, worth};
use crate::template::{Shape, Space, Template};
use crate::worker::{EvalSettings, Job, Lost, Outcome, Reply, Runner};

/// A deterministic slice of the work: specs whose index is `index` modulo `count`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Shard {
    /// This shard, 0-based.
    pub index: u32,
    /// Shards in all.
    pub count: u32,
}

impl Default for Shard {
    fn default() -> Self {
        Shard { index: 0, count: 1 }
    }
}

/// A malformed `--shard`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shard `{0}` must be I/N with 0 <= I < N (N >= 1)")]
pub struct ShardError(pub String);

impl FromStr for Shard {
    type Err = ShardError;
    fn from_str(s: &str) -> Result<Shard, ShardError> {
        let err = || ShardError(s.to_string());
        let (i, n) = s.split_once('/').ok_or_else(err)?;
        let index: u32 = i.trim().parse().map_err(|_| err())?;
        let count: u32 = n.trim().parse().map_err(|_| err())?;
        if count == 0 || index >= count {
            return Err(err());
        }
        Ok(Shard { index, count })
    }
}

impl std::fmt::Display for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.index, self.count)
    }
}

/// The whole work of a sweep, before sharding and resuming.
#[derive(Debug, Clone)]
pub struct Plan {
    /// Model name (or `shapes`).
    pub name: String,
    /// The space.
    pub space: Space,
    /// Every shape, GEMM-major.
    pub shapes: Vec<Shape>,
    /// Valid specs: the default spec first, then the space's in enumeration order.
    pub specs: Vec<KernelSpec>,
    /// Enumeration counts.
    pub stats: EnumStats,
    /// (spec, shape) pairs worth evaluating.
    pub pairs: u64,
    /// (spec, shape) pairs skipped as tall tiles.
    pub tall_tile_pairs: u64,
}

impl Plan {
    /// The plan of a template.
    pub fn new(name: &str, space: &Space, shapes: Vec<Shape>) -> Plan {
        let e = enumerate(space);
        let d = default_spec(space);
        let dk = d.cache_key();
        let mut specs = vec![d];
        specs.extend(e.specs.into_iter().filter(|s| s.cache_key() != dk));
        let mut pairs = 0;
        let mut tall = 0;
        for s in &specs {
            for sh in &shapes {
                if worth(space, s, sh) {
                    pairs += 1;
                } else {
                    tall += 1;
                }
            }
        }
        Plan {
            name: name.to_string(),
            space: space.clone(),
            shapes,
            specs,
            stats: e.stats,
            pairs,
            tall_tile_pairs: tall,
        }
    }

    /// The plan of a template's shapes and space.
    pub fn from_template(t: &Template) -> Plan {
        Plan::new(&t.name, &t.space, t.shapes())
    }

    /// The specs of `shard` with the shapes each is worth evaluating on.
    pub fn shard_work(&self, shard: Shard) -> Vec<(KernelSpec, Vec<Shape>)> {
        self.specs
            .iter()
            .enumerate()
            .filter(|(i, _)| *i as u64 % u64::from(shard.count) == u64::from(shard.index))
            .map(|(_, s)| {
                let shapes = self
                    .shapes
                    .iter()
                    .copied()
                    .filter(|sh| worth(&self.space, s, sh))
                    .collect();
                (s.clone(), shapes)
            })
            .collect()
    }
}

/// What is measured or modelled: the identity rows are keyed by.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Target {
    /// `gfx950`.
    pub gfx: String,
    /// CUs.
    pub cus: u32,
    /// The device's name (or the timing model).
    pub device: DeviceName,
}

/// Settings of a sweep.
#[derive(Clone)]
pub struct SweepOptions {
    /// How results are ranked.
    pub eval: EvalSettings,
    /// What rows are keyed by.
    pub target: Target,
    /// This process's slice.
    pub shard: Shard,
    /// Wall seconds of evaluation one shape may receive in this run (then its remaining
    /// specs wait for a later run).
    pub budget_per_shape: Option<f64>,
    /// Raised to stop: finished jobs are kept, jobs in flight are dropped (and redone by the
    /// next run).
    pub cancel: Arc<AtomicBool>,
}

/// Progress reports of a sweep.
pub trait Observer: Send + Sync {
    /// The sweep starts: `total` pairs to evaluate in this run, `skipped` already done.
    fn start(&self, _total: u64, _skipped: u64) {}
    /// `n` more pairs are finished; `note` names the last spec.
    fn advance(&self, _n: u64, _note: &str) {}
    /// The sweep ended.
    fn finish(&self) {}
}

/// An observer that reports nothing.
pub struct Quiet;
impl Observer for Quiet {}

/// The best result of one shape.
#[derive(Debug, Clone, Serialize)]
pub struct Best {
    /// The shape.
    pub shape: Shape,
    /// Kernel symbol.
    pub kernel: String,
    /// Cache key.
    pub cache_key: String,
    /// µs.
    pub us: f64,
    /// TFLOP/s.
    pub tflops: f64,
    /// Speed-up over the default spec, when both are measured.
    pub vs_default: Option<f64>,
}

/// What a sweep did.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Template (model) name.
    pub template: String,
    /// Ranking source.
    pub by: By,
    /// The shard.
    pub shard: Shard,
    /// Shapes.
    pub shapes: u64,
    /// Enumeration counts.
    pub specs: EnumStats,
    /// Valid specs evaluated (the default spec included).
    pub specs_in_plan: u64,
    /// (spec, shape) pairs skipped as tall tiles (whole plan).
    pub tall_tile_pairs: u64,
    /// (spec, shape) pairs of this shard.
    pub pairs: u64,
    /// Results new in this run (failures included).
    pub evaluated: u64,
    /// Pairs already in the database.
    pub skipped: u64,
    /// Pairs another sweep sharing the database recorded while this one ran.
    pub done_elsewhere: u64,
    /// Of `evaluated`, failures.
    pub failed: u64,
    /// Pairs left for a later run by the per-shape budget.
    pub over_budget: u64,
    /// Specs compiled in this run.
    pub compiled: u64,
    /// Specs that did not compile.
    pub compile_failed: u64,
    /// Sum of compile wall times, s.
    pub compile_seconds: f64,
    /// Worker processes that died or hung.
    pub workers_lost: u64,
    /// Wall time, s.
    pub elapsed_seconds: f64,
    /// The best result per shape in the database (this target and source).
    pub best: Vec<Best>,
}

/// Why a sweep stopped.
#[derive(Debug, thiserror::Error)]
pub enum SweepError {
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// Stopped by the cancel flag; finished results were recorded.
    #[error("interrupted; {recorded} results recorded (run the same command again to resume)")]
    Interrupted {
        /// Results recorded before the stop.
        recorded: u64,
    },
}

/// tilegen's version, as rows record it.
pub fn tilegen_version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}

/// LLVM's version, as rows and packs record it.
pub fn llvm_version() -> String {
    let (a, b, c) = inkwell::support::get_llvm_version();
    format!("{a}.{b}.{c}")
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// A unique id for a history row.
pub fn unique_id(salt: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let text = format!(
        "{} {} {nanos} {} {salt}",
        host.trim(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let mut h1 = 0xcbf29ce484222325u64;
    let mut h2 = 0x84222325cbf29ce4u64;
    for b in text.bytes() {
        h1 = (h1 ^ u64::from(b)).wrapping_mul(0x100000001b3);
        h2 = (h2 ^ u64::from(b) ^ 0x5a).wrapping_mul(0x100000001b3);
    }
    format!("{h1:016x}{h2:016x}")
}

struct JobResult {
    spec: KernelSpec,
    shapes: Vec<Shape>,
    replies: Vec<Reply>,
    lost: Option<Lost>,
}

/// Builds the database rows of one finished (or lost) job.
fn rows_of(r: &JobResult, opts: &SweepOptions, out: tilegen_kernels::OutDtype) -> Vec<Row> {
    let mut compile_ms = None;
    let mut kernel = r.spec.kernel_name();
    let mut compile_failed = None;
    let mut outcomes: HashMap<Shape, Outcome> = HashMap::new();
    for reply in &r.replies {
        match reply {
            Reply::Compiled { kernel: k, ms } => {
                compile_ms = Some(*ms);
                kernel = k.clone();
            }
            Reply::CompileFailed { reason } => compile_failed = Some(reason.clone()),
            Reply::Shape { shape, outcome, .. } => {
                outcomes.insert(*shape, outcome.clone());
            }
            Reply::Done => {}
        }
    }
    let cache_key = r.spec.cache_key();
    r.shapes
        .iter()
        .map(|shape| {
            let outcome = match (outcomes.get(shape), &compile_failed, &r.lost) {
                (Some(o), _, _) => o.clone(),
                (None, Some(reason), _) => Outcome::Failed(format!("compile: {reason}")),
                (None, None, Some(Lost(reason))) => Outcome::Failed(reason.clone()),
                (None, None, None) => Outcome::Failed("the worker gave no result".into()),
            };
            let failed = |reason| (Status::Failed, Some(reason), None, 0, 0.0, Detail::Empty {});
            let (status, reason, times, repeats, spread, detail) = match outcome {
                Outcome::Ok(m) => match rates(&m, shape, out) {
                    Ok(t) => (Status::Ok, None, Some(t), m.repeats, m.spread, m.detail),
                    Err(reason) => failed(reason),
                },
                Outcome::Failed(reason) => failed(reason),
            };
            Row {
                uid: unique_id(&format!("{cache_key} {shape}")),
                gfx: opts.target.gfx.clone(),
                cus: opts.target.cus,
                m: shape.m,
                n: shape.n,
                k: shape.k,
                cache_key: cache_key.clone(),
                kernel: kernel.clone(),
                spec: r.spec.values().clone(),
                status,
                reason,
                us: times.map(|t| t.0),
                tflops: times.map(|t| t.1),
                gbs: times.map(|t| t.2),
                source: opts.eval.by,
                device: opts.target.device.clone(),
                repeats,
                spread,
                tilegen_version: tilegen_version().into(),
                llvm_version: llvm_version(),
                compile_ms,
                created: now(),
                detail,
            }
        })
        .collect()
}

/// The time, TFLOP/s and GB/s of a measurement, or why they are not numbers a database
/// keeps (an evaluator's bug must not become a winning row).
fn rates(
    m: &crate::eval::Measurement,
    shape: &Shape,
    out: tilegen_kernels::OutDtype,
) -> Result<(f64, f64, f64), String> {
    let us = m.us;
    let tflops = shape.flops() / us / 1e6;
    let gbs = shape.min_bytes(out) / us / 1e3;
    let spread = m.spread;
    if !(us.is_finite() && us > 0.0 && tflops.is_finite() && gbs.is_finite()) {
        return Err(format!(
            "the evaluation gave {us} us, which is not a time (finite and positive, with finite rates)"
        ));
    }
    if !(spread.is_finite() && spread >= 0.0) {
        return Err(format!("the evaluation gave a spread of {spread}"));
    }
    Ok((us, tflops, gbs))
}

/// How often a sweep waiting for pairs another sweep holds looks again.
const CLAIM_POLL: Duration = Duration::from_millis(500);

/// How often a sweep renews its claims (well within [`CLAIM_LEASE`]).
const CLAIM_RENEW: Duration = Duration::from_secs(CLAIM_LEASE.as_secs() / 10);

/// Locks `m`; a panic elsewhere while it was held leaves data that is still right.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the shard's work not yet in `db` on `runners` (one thread each), recording each job's
/// results in one transaction as it finishes. Each job is claimed in `db` first, so sweeps
/// sharing the database never evaluate a pair twice.
pub fn run(
    plan: &Plan,
    db: &mut Db,
    runners: Vec<Box<dyn Runner>>,
    opts: &SweepOptions,
    observer: &dyn Observer,
) -> Result<Summary, SweepError> {
    let t0 = Instant::now();
    let done = db.done(&opts.target.gfx, opts.target.cus, opts.eval.by)?;
    let mut queue = VecDeque::new();
    let mut pairs = 0;
    for (spec, shapes) in plan.shard_work(opts.shard) {
        let key = spec.cache_key();
        pairs += shapes.len() as u64;
        let todo: Vec<Shape> = shapes
            .into_iter()
            .filter(|s| !done.contains(&(s.m, s.n, s.k, key.clone())))
            .collect();
        if !todo.is_empty() {
            queue.push_back((spec, todo));
        }
    }
    let total: u64 = queue.iter().map(|(_, v)| v.len() as u64).sum();
    let skipped = pairs - total;
    observer.start(total, skipped);
    let who = Claimant::this_process(&unique_id("sweep"));
    let db = Mutex::new(db);
    let queue = Mutex::new(queue);
    // Jobs whose pairs another sweep holds: looked at again once the queue is empty.
    let deferred: Mutex<Vec<(KernelSpec, Vec<Shape>)>> = Mutex::new(Vec::new());
    let done_elsewhere = AtomicU64::new(0);
    let spent: Mutex<HashMap<Shape, f64>> = Mutex::new(HashMap::new());
    let over_budget = AtomicU64::new(0);
    let db_error: Mutex<Option<DbError>> = Mutex::new(None);
    let fail = |e: DbError| {
        // Stop handing out work; the threads finish their jobs and end.
        opts.cancel.store(true, Ordering::Relaxed);
        lock(&db_error).get_or_insert(e);
    };
    let (tx, rx) = channel::<JobResult>();
    let mut summary = Summary {
        template: plan.name.clone(),
        by: opts.eval.by,
        shard: opts.shard,
        shapes: plan.shapes.len() as u64,
        specs: plan.stats.clone(),
        specs_in_plan: plan.specs.len() as u64,
        tall_tile_pairs: plan.tall_tile_pairs,
        pairs,
        evaluated: 0,
        skipped,
        done_elsewhere: 0,
        failed: 0,
        over_budget: 0,
        compiled: 0,
        compile_failed: 0,
        compile_seconds: 0.0,
        workers_lost: 0,
        elapsed_seconds: 0.0,
        best: Vec::new(),
    };
    std::thread::scope(|scope| {
        for mut runner in runners {
            let tx = tx.clone();
            let (queue, deferred, spent, over_budget) = (&queue, &deferred, &spent, &over_budget);
            let (db, who, fail, done_elsewhere) = (&db, &who, &fail, &done_elsewhere);
            scope.spawn(move || {
                loop {
                    if opts.cancel.load(Ordering::Relaxed) {
                        break;
                    }
                    let next = lock(queue).pop_front();
                    let Some((spec, shapes)) = next else {
                        if lock(deferred).is_empty() {
                            break;
                        }
                        // Only pairs other sweeps hold are left: wait for them to record
                        // those pairs or to stop, then look again.
                        let until = Instant::now() + CLAIM_POLL;
                        while Instant::now() < until && !opts.cancel.load(Ordering::Relaxed) {
                            std::thread::sleep(Duration::from_millis(20));
                        }
                        let mut q = lock(queue);
                        q.extend(lock(deferred).drain(..));
                        continue;
                    };
                    let shapes: Vec<Shape> = match opts.budget_per_shape {
                        Some(b) => {
                            let s = lock(spent);
                            let (keep, drop): (Vec<Shape>, Vec<Shape>) = shapes
                                .into_iter()
                                .partition(|sh| s.get(sh).copied().unwrap_or(0.0) < b);
                            over_budget.fetch_add(drop.len() as u64, Ordering::Relaxed);
                            keep
                        }
                        None => shapes,
                    };
                    if shapes.is_empty() {
                        continue;
                    }
                    let key = spec.cache_key();
                    let work = WorkKey {
                        gfx: &opts.target.gfx,
                        cus: opts.target.cus,
                        source: opts.eval.by,
                        cache_key: &key,
                    };
                    let claimed = match lock(db).claim(who, work, &shapes) {
                        Ok(c) => c,
                        Err(e) => {
                            fail(e);
                            break;
                        }
                    };
                    if !claimed.done.is_empty() {
                        done_elsewhere.fetch_add(claimed.done.len() as u64, Ordering::Relaxed);
                        observer.advance(claimed.done.len() as u64, "recorded by another sweep");
                    }
                    if !claimed.elsewhere.is_empty() {
                        lock(deferred).push((spec.clone(), claimed.elsewhere));
                    }
                    let shapes = claimed.mine;
                    if shapes.is_empty() {
                        continue;
                    }
                    let job = Job {
                        spec: spec.values().clone(),
                        shapes: shapes.clone(),
                        eval: opts.eval.clone(),
                    };
                    let mut replies = Vec::new();
                    let mut compile_s = 0.0;
                    let lost = runner
                        .run(&job, &mut |r| {
                            match &r {
                                Reply::Compiled { ms, .. } => compile_s = ms / 1e3,
                                Reply::Shape { shape, seconds, .. } => {
                                    *lock(spent).entry(*shape).or_default() +=
                                        seconds + compile_s / shapes.len() as f64;
                                }
                                _ => {}
                            }
                            replies.push(r);
                        })
                        .err();
                    if tx
                        .send(JobResult {
                            spec,
                            shapes,
                            replies,
                            lost,
                        })
                        .is_err()
                    {
                        break;
                    }
                }
                runner.shutdown();
            });
        }
        drop(tx);
        let mut renewed = Instant::now();
        loop {
            let r = match rx.recv_timeout(CLAIM_RENEW) {
                Ok(r) => Some(r),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            if renewed.elapsed() >= CLAIM_RENEW {
                // Sweeps on other machines see this one by its renewals.
                if let Err(e) = lock(&db).renew(&who) {
                    fail(e);
                }
                renewed = Instant::now();
            }
            let Some(r) = r else { continue };
            if opts.cancel.load(Ordering::Relaxed) && r.lost.is_some() {
                // Lost to the interruption, not to the spec: the next run does it again.
                continue;
            }
            if r.lost.is_some() {
                summary.workers_lost += 1;
            }
            for reply in &r.replies {
                match reply {
                    Reply::Compiled { ms, .. } => {
                        summary.compiled += 1;
                        summary.compile_seconds += ms / 1e3;
                    }
                    Reply::CompileFailed { .. } => summary.compile_failed += 1,
                    _ => {}
                }
            }
            let rows = rows_of(&r, opts, plan.space.out_dtype);
            if lock(&db_error).is_none() {
                match lock(&db).record(&rows) {
                    Ok(_) => {
                        summary.evaluated += rows.len() as u64;
                        summary.failed +=
                            rows.iter().filter(|r| r.status == Status::Failed).count() as u64;
                    }
                    Err(e) => fail(e),
                }
            }
            observer.advance(rows.len() as u64, &r.spec.kernel_name());
        }
    });
    observer.finish();
    let db = db.into_inner().unwrap_or_else(|p| p.into_inner());
    // What this run holds and did not record (an interruption, an error) goes back at once.
    // Should this fail, the claims still end with this process, as a killed sweep's do.
    let _ = db.release(&who);
    if let Some(e) = db_error.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e.into());
    }
    summary.over_budget = over_budget.load(Ordering::Relaxed);
    summary.done_elsewhere = done_elsewhere.load(Ordering::Relaxed);
    summary.elapsed_seconds = t0.elapsed().as_secs_f64();
    let remaining = lock(&queue).len() + lock(&deferred).len();
    if opts.cancel.load(Ordering::Relaxed)
        && (remaining > 0
            || summary.evaluated + summary.over_budget + summary.done_elsewhere < total)
    {
        return Err(SweepError::Interrupted {
            recorded: summary.evaluated,
        });
    }
    summary.best = best_of(db, plan, opts)?;
    Ok(summary)
}

/// The best row per shape of `plan` in `db` for the sweep's target and source, with the
/// speed-up over the default spec.
pub fn best_of(db: &Db, plan: &Plan, opts: &SweepOptions) -> Result<Vec<Best>, DbError> {
    let dk = default_spec(&plan.space).cache_key();
    let mut by_shape: BTreeMap<Shape, (Option<Row>, Option<f64>)> = BTreeMap::new();
    for r in db.results()? {
        if r.gfx != opts.target.gfx || r.cus != opts.target.cus || r.source != opts.eval.by {
            continue;
        }
        let Some(us) = r.us else { continue };
        let shape = r.shape();
        if !plan.shapes.contains(&shape) {
            continue;
        }
        let e = by_shape.entry(shape).or_default();
        if r.cache_key == dk {
            e.1 = Some(us);
        }
        if e.0.as_ref().is_none_or(|b| b.us.is_some_and(|b| us < b)) {
            e.0 = Some(r);
        }
    }
    Ok(plan
        .shapes
        .iter()
        .filter_map(|s| {
            let (best, default) = by_shape.get(s)?;
            let best = best.as_ref()?;
            let us = best.us?;
            Some(Best {
                shape: *s,
                kernel: best.kernel.clone(),
                cache_key: best.cache_key.clone(),
                us,
                tflops: s.flops() / us / 1e6,
                vs_default: default.map(|d| d / us),
            })
        })
        .collect())
}
