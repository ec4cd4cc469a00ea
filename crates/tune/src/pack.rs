//! Kernel packs: the best spec of every template shape, compiled ahead of time, so a serving
//! process dispatches without compiling.
//!
//! A pack is a directory: `manifest.json` (format version, tilegen and LLVM versions, the
//! target, and for every kernel its spec, cache key, code object file and SHA-256, the shapes
//! it serves and the tuning result it came from) and `kernels/<cache key>.hsaco`. It is built
//! in a temporary directory beside the target and renamed into place, so an interrupted build
//! never leaves half a pack. [`verify`] checks format, versions, checksums and that every code
//! object holds the kernel its spec names; [`Pack::open`] verifies before anything is used.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tilegen_kernels::{BuildError, CompiledKernel, KernelSpec, SpecValues};
use tilegen_output::{Output, OutputError};

use crate::db::{Db, DbError, Row, Status};
use crate::space::default_spec;
use crate::sweep::{llvm_version, tilegen_version};
use crate::template::{Shape, Template};

/// Format version of the manifest.
pub const PACK_FORMAT: u32 = 1;
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";
/// The target every pack is built for.
pub const TARGET: &str = "gfx950";

/// Why a pack could not be built, verified, opened or used.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    /// A file or directory operation failed.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// Writing a file failed.
    #[error(transparent)]
    Output(#[from] OutputError),
    /// The database failed.
    #[error(transparent)]
    Db(#[from] DbError),
    /// The manifest is not valid JSON of this format.
    #[error("{}: the manifest cannot be read", path.display())]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// JSON's error.
        #[source]
        source: serde_json::Error,
    },
    /// The pack is of another format, version or target.
    #[error("{}: {what} is {found} but this build needs {expected}", dir.display())]
    Version {
        /// The pack.
        dir: PathBuf,
        /// Which field.
        what: &'static str,
        /// The pack's value.
        found: String,
        /// Ours.
        expected: String,
    },
    /// The pack's content does not match its manifest.
    #[error("{}: {problem}; nothing from this pack is used", dir.display())]
    Tampered {
        /// The pack.
        dir: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A template shape has no tuning result and `require_tuned` was asked.
    #[error("no tuning result for {0} in the database (--require-tuned)")]
    Untuned(Shape),
    /// A spec did not compile.
    #[error("compiling {kernel}")]
    Build {
        /// The kernel.
        kernel: String,
        /// Why.
        #[source]
        source: BuildError,
    },
    /// The output directory holds something that is not a pack.
    #[error("{} exists and is not a kernel pack (no {MANIFEST}); refusing to replace it", .0.display())]
    NotAPack(PathBuf),
    /// The pack serves no kernel for this N and K.
    #[error("the pack serves no kernel for N = {n}, K = {k} (it serves N x K: {served})")]
    NotServed {
        /// N.
        n: u32,
        /// K.
        k: u32,
        /// What it serves.
        served: String,
    },
    /// M = 0.
    #[error("M must be at least 1")]
    ZeroM,
    /// Stopped by a signal.
    #[error("interrupted; the pack was not written")]
    Interrupted,
}

/// The tuning result a kernel was chosen by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TunedFrom {
    /// History id of the database row.
    pub uid: String,
    /// `model` or `device`.
    pub source: String,
    /// The device (or the timing model).
    pub device: String,
    /// CUs.
    pub cus: u32,
    /// µs.
    pub us: f64,
    /// TFLOP/s.
    pub tflops: f64,
}

/// One shape a kernel serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Served {
    /// M bucket.
    pub m: u32,
    /// N.
    pub n: u32,
    /// K.
    pub k: u32,
    /// Chosen by tuning (false: the default spec, for lack of a result).
    pub tuned: bool,
    /// The result it was chosen by.
    pub result: Option<TunedFrom>,
}

/// One kernel of a pack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestKernel {
    /// Kernel symbol.
    pub name: String,
    /// The spec.
    pub spec: SpecValues,
    /// The spec's cache key.
    pub cache_key: String,
    /// The code object, relative to the pack.
    pub file: String,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
    /// Shapes it serves.
    pub shapes: Vec<Served>,
}

/// `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`PACK_FORMAT`].
    pub format: u32,
    /// tilegen version that built it.
    pub tilegen_version: String,
    /// LLVM version that compiled it.
    pub llvm_version: String,
    /// `gfx950`.
    pub target: String,
    /// The template (model) name.
    pub template: String,
    /// Seconds since the Unix epoch.
    pub created: f64,
    /// The kernels.
    pub kernels: Vec<ManifestKernel>,
}

/// Settings of [`build`].
#[derive(Debug, Clone)]
pub struct BuildOptions {
    /// Refuse a template shape without a tuning result instead of using the default spec.
    pub require_tuned: bool,
    /// The persistent compile cache; `None` compiles everything.
    pub cache_dir: Option<PathBuf>,
    /// Parallel compiles.
    pub jobs: usize,
    /// Raised to stop; the pack is then not written.
    pub cancel: Arc<AtomicBool>,
}

/// What [`build`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct BuildReport {
    /// The pack.
    pub dir: PathBuf,
    /// Kernels in it.
    pub kernels: u64,
    /// Shapes served.
    pub shapes: u64,
    /// Shapes served by the default spec for lack of a result.
    pub untuned: u64,
    /// Code objects taken from the compile cache.
    pub cache_hits: u64,
    /// Code objects compiled.
    pub compiled: u64,
    /// Wall time, s.
    pub seconds: f64,
}

/// The default compile cache: `$TILEGEN_CACHE_DIR`, else `$XDG_CACHE_HOME/tilegen/kernels`,
/// else `~/.cache/tilegen/kernels`.
pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("TILEGEN_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("tilegen").join("kernels"))
}

/// SHA-256 of `bytes`, hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> PackError {
    let path = path.to_path_buf();
    move |source| PackError::Io {
        action,
        path,
        source,
    }
}

/// The best measured row of each template shape (a device measurement over the model's
/// prediction, then the shortest time).
pub fn choose(template: &Template, db: &Db) -> Result<HashMap<Shape, Row>, DbError> {
    let shapes: BTreeSet<Shape> = template.shapes().into_iter().collect();
    let mut best: HashMap<Shape, Row> = HashMap::new();
    for r in db.results()? {
        if r.status != Status::Ok || r.gfx != TARGET || r.spec.out_dtype != template.space.out_dtype
        {
            continue;
        }
        let Some(us) = r.us else { continue };
        let shape = r.shape();
        if !shapes.contains(&shape) {
            continue;
        }
        let rank = |r: &Row| (r.source != "device", r.us.unwrap_or(f64::INFINITY));
        match best.get(&shape) {
            Some(b) if rank(b) <= (r.source != "device", us) => {}
            _ => {
                best.insert(shape, r);
            }
        }
    }
    Ok(best)
}

fn cache_file(dir: &Path, cache_key: &str) -> PathBuf {
    dir.join(format!(
        "{cache_key}-tilegen{}-llvm{}.hsaco",
        tilegen_version(),
        llvm_version()
    ))
}

/// A code object from the cache, when it is there and holds the kernel.
fn cached(dir: &Path, spec: &KernelSpec) -> Option<CompiledKernel> {
    let bytes = std::fs::read(cache_file(dir, &spec.cache_key())).ok()?;
    CompiledKernel::from_code_object(spec.clone(), bytes).ok()
}

/// Compiles (or takes from the cache) every spec, `jobs` at a time.
fn compile_all(
    specs: &[KernelSpec],
    opts: &BuildOptions,
    report: &Mutex<BuildReport>,
) -> Result<Vec<CompiledKernel>, PackError> {
    let next = Mutex::new(0usize);
    let out: Mutex<Vec<Option<Result<CompiledKernel, PackError>>>> =
        Mutex::new((0..specs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..opts.jobs.max(1) {
            s.spawn(|| {
                loop {
                    if opts.cancel.load(Ordering::Relaxed) {
                        return;
                    }
                    let i = {
                        let Ok(mut n) = next.lock() else { return };
                        let i = *n;
                        *n += 1;
                        i
                    };
                    let Some(spec) = specs.get(i) else { return };
                    let from_cache = opts.cache_dir.as_deref().and_then(|d| cached(d, spec));
                    let hit = from_cache.is_some();
                    let r = match from_cache {
                        Some(k) => Ok(k),
                        None => crate::eval::compile(spec).map_err(|source| PackError::Build {
                            kernel: spec.kernel_name(),
                            source,
                        }),
                    };
                    let r = r.and_then(|k| {
                        if !hit && let Some(d) = &opts.cache_dir {
                            std::fs::create_dir_all(d)
                                .map_err(io("creating the compile cache", d))?;
                            Output::check(cache_file(d, k.cache_key()))?.write(k.code_object())?;
                        }
                        Ok(k)
                    });
                    if let Ok(mut rep) = report.lock() {
                        if hit {
                            rep.cache_hits += 1;
                        } else {
                            rep.compiled += 1;
                        }
                    }
                    if let Ok(mut o) = out.lock() {
                        o[i] = Some(r);
                    }
                }
            });
        }
    });
    if opts.cancel.load(Ordering::Relaxed) {
        return Err(PackError::Interrupted);
    }
    let out = out.into_inner().unwrap_or_default();
    out.into_iter()
        .map(|r| r.unwrap_or(Err(PackError::Interrupted)))
        .collect()
}

/// A directory being built beside its target; removed unless committed.
struct TempDir(Option<PathBuf>);

impl Drop for TempDir {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_dir_all(p);
        }
    }
}

/// Builds the pack of `template` from `db` into `out`.
pub fn build(
    template: &Template,
    db: &Db,
    out: &Path,
    opts: &BuildOptions,
) -> Result<BuildReport, PackError> {
    let t0 = Instant::now();
    // The target must be a pack, an empty directory or absent: nothing else is replaced.
    if out.exists() {
        let empty = std::fs::read_dir(out)
            .map_err(io("reading", out))?
            .next()
            .is_none();
        if !empty && !out.join(MANIFEST).is_file() {
            return Err(PackError::NotAPack(out.to_path_buf()));
        }
    }
    let chosen = choose(template, db)?;
    let default = default_spec(&template.space);
    // Kernel per cache key, with the shapes it serves, in template order.
    let mut order: Vec<String> = Vec::new();
    let mut specs: HashMap<String, KernelSpec> = HashMap::new();
    let mut served: HashMap<String, Vec<Served>> = HashMap::new();
    let mut report = BuildReport {
        dir: out.to_path_buf(),
        ..BuildReport::default()
    };
    for shape in template.shapes() {
        let (spec, s) = match chosen.get(&shape) {
            Some(r) => (
                KernelSpec::from(r.spec.clone()),
                Served {
                    m: shape.m,
                    n: shape.n,
                    k: shape.k,
                    tuned: true,
                    result: Some(TunedFrom {
                        uid: r.uid.clone(),
                        source: r.source.clone(),
                        device: r.device.clone(),
                        cus: r.cus,
                        us: r.us.unwrap_or(0.0),
                        tflops: r.tflops.unwrap_or(0.0),
                    }),
                },
            ),
            None if opts.require_tuned => return Err(PackError::Untuned(shape)),
            None => {
                report.untuned += 1;
                (
                    default.clone(),
                    Served {
                        m: shape.m,
                        n: shape.n,
                        k: shape.k,
                        tuned: false,
                        result: None,
                    },
                )
            }
        };
        let key = spec.cache_key();
        if !specs.contains_key(&key) {
            order.push(key.clone());
            specs.insert(key.clone(), spec);
        }
        served.entry(key).or_default().push(s);
        report.shapes += 1;
    }
    let list: Vec<KernelSpec> = order.iter().filter_map(|k| specs.get(k).cloned()).collect();
    let report = Mutex::new(report);
    let kernels = compile_all(&list, opts, &report)?;
    let mut report = report.into_inner().unwrap_or_default();
    // Write into a temporary sibling, then rename into place.
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let stem = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "pack".into());
    let tmp = parent.join(format!(".{stem}.{}.tilegen-pack-tmp", std::process::id()));
    if tmp.exists() {
        std::fs::remove_dir_all(&tmp).map_err(io("removing", &tmp))?;
    }
    std::fs::create_dir_all(tmp.join("kernels")).map_err(io("creating", &tmp))?;
    let mut guard = TempDir(Some(tmp.clone()));
    let mut manifest = Manifest {
        format: PACK_FORMAT,
        tilegen_version: tilegen_version().into(),
        llvm_version: llvm_version(),
        target: TARGET.into(),
        template: template.name.clone(),
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64()),
        kernels: Vec::new(),
    };
    for k in &kernels {
        tilegen_output::check_interrupted().map_err(|_| PackError::Interrupted)?;
        let file = format!("kernels/{}.hsaco", k.cache_key());
        Output::check(tmp.join(&file))?.write(k.code_object())?;
        manifest.kernels.push(ManifestKernel {
            name: k.name().to_string(),
            spec: k.spec().values().clone(),
            cache_key: k.cache_key().to_string(),
            file,
            sha256: sha256_hex(k.code_object()),
            bytes: k.code_object().len() as u64,
            shapes: served.remove(k.cache_key()).unwrap_or_default(),
        });
    }
    let text = serde_json::to_vec_pretty(&manifest).map_err(|source| PackError::Manifest {
        path: tmp.join(MANIFEST),
        source,
    })?;
    Output::check(tmp.join(MANIFEST))?.write(&text)?;
    verify(&tmp)?;
    if opts.cancel.load(Ordering::Relaxed) {
        return Err(PackError::Interrupted);
    }
    // Swap: the old pack (if any) steps aside, the new one takes its name, the old one goes.
    let old = parent.join(format!(".{stem}.{}.tilegen-pack-old", std::process::id()));
    let had_old = out.exists();
    if had_old {
        std::fs::rename(out, &old).map_err(io("moving aside", out))?;
    }
    if let Err(e) = std::fs::rename(&tmp, out) {
        if had_old {
            let _ = std::fs::rename(&old, out);
        }
        return Err(io("renaming the new pack to", out)(e));
    }
    guard.0 = None;
    if had_old {
        std::fs::remove_dir_all(&old).map_err(io("removing the old pack", &old))?;
    }
    report.kernels = manifest.kernels.len() as u64;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// Reads and checks the pack at `dir`: format, versions, target, every code object's size
/// and SHA-256, and that each holds the kernel its spec names. Returns the manifest and the
/// code objects, by kernel index.
fn read_verified(dir: &Path) -> Result<(Manifest, Vec<Vec<u8>>), PackError> {
    let tampered = |problem: String| PackError::Tampered {
        dir: dir.to_path_buf(),
        problem,
    };
    let path = dir.join(MANIFEST);
    let text = std::fs::read(&path).map_err(io("reading the manifest", &path))?;
    // The format first, so a future manifest is refused by version, not by a field it lacks.
    let probe: serde_json::Value =
        serde_json::from_slice(&text).map_err(|source| PackError::Manifest {
            path: path.clone(),
            source,
        })?;
    let format = probe.get("format").and_then(|f| f.as_u64());
    if format != Some(u64::from(PACK_FORMAT)) {
        return Err(PackError::Version {
            dir: dir.to_path_buf(),
            what: "the pack format",
            found: format.map_or("missing".into(), |f| f.to_string()),
            expected: PACK_FORMAT.to_string(),
        });
    }
    let m: Manifest = serde_json::from_slice(&text).map_err(|source| PackError::Manifest {
        path: path.clone(),
        source,
    })?;
    let version = |what, found: &str, expected: &str| {
        if found != expected {
            Err(PackError::Version {
                dir: dir.to_path_buf(),
                what,
                found: found.into(),
                expected: expected.into(),
            })
        } else {
            Ok(())
        }
    };
    version("the tilegen version", &m.tilegen_version, tilegen_version())?;
    let major = |v: &str| v.split('.').next().unwrap_or("").to_string();
    version(
        "the LLVM major version",
        &major(&m.llvm_version),
        &major(&llvm_version()),
    )?;
    version("the target", &m.target, TARGET)?;
    let mut files = Vec::new();
    let mut shapes: BTreeMap<Shape, String> = BTreeMap::new();
    let mut listed = BTreeSet::new();
    for k in &m.kernels {
        let rel = Path::new(&k.file);
        let plain = rel.components().count() == 2
            && rel.starts_with("kernels")
            && rel
                .components()
                .all(|c| matches!(c, std::path::Component::Normal(_)));
        if !plain {
            return Err(tampered(format!(
                "kernel {} names the file `{}`, outside kernels/",
                k.name, k.file
            )));
        }
        listed.insert(k.file.clone());
        let p = dir.join(rel);
        let bytes =
            std::fs::read(&p).map_err(|e| tampered(format!("{} cannot be read: {e}", k.file)))?;
        if bytes.len() as u64 != k.bytes {
            return Err(tampered(format!(
                "{} has {} bytes, the manifest says {}",
                k.file,
                bytes.len(),
                k.bytes
            )));
        }
        let sum = sha256_hex(&bytes);
        if sum != k.sha256 {
            return Err(tampered(format!(
                "{} has SHA-256 {sum}, the manifest says {}",
                k.file, k.sha256
            )));
        }
        let spec = KernelSpec::from(k.spec.clone());
        spec.validate()
            .map_err(|e| tampered(format!("kernel {}: its spec is invalid: {e}", k.name)))?;
        if spec.cache_key() != k.cache_key || spec.kernel_name() != k.name {
            return Err(tampered(format!(
                "kernel {}: the spec gives name {} and cache key {}, the manifest says {} and {}",
                k.name,
                spec.kernel_name(),
                spec.cache_key(),
                k.name,
                k.cache_key
            )));
        }
        let co = tilegen_codeobj::CodeObject::parse(&bytes)
            .map_err(|e| tampered(format!("{} is not a code object: {e}", k.file)))?;
        if co.kernel(&k.name).is_none() {
            return Err(tampered(format!(
                "{} does not hold kernel {}",
                k.file, k.name
            )));
        }
        if k.shapes.is_empty() {
            return Err(tampered(format!("kernel {} serves no shape", k.name)));
        }
        for s in &k.shapes {
            let shape = Shape {
                m: s.m,
                n: s.n,
                k: s.k,
            };
            if let Some(other) = shapes.insert(shape, k.name.clone()) {
                return Err(tampered(format!(
                    "{shape} is served by both {other} and {}",
                    k.name
                )));
            }
        }
        files.push(bytes);
    }
    let kdir = dir.join("kernels");
    for e in std::fs::read_dir(&kdir).map_err(io("reading", &kdir))? {
        let e = e.map_err(io("reading", &kdir))?;
        let name = format!("kernels/{}", e.file_name().to_string_lossy());
        if !listed.contains(&name) {
            return Err(tampered(format!("{name} is not in the manifest")));
        }
    }
    Ok((m, files))
}

/// Verifies the pack at `dir` and returns its manifest.
pub fn verify(dir: impl AsRef<Path>) -> Result<Manifest, PackError> {
    read_verified(dir.as_ref()).map(|(m, _)| m)
}

/// Per (N, K): the (M bucket, kernel index, tuned) entries, ascending in M.
type Buckets = BTreeMap<(u32, u32), Vec<(u32, usize, bool)>>;

/// A verified pack, ready to dispatch shapes to kernels.
#[derive(Debug, Clone)]
pub struct Pack {
    dir: PathBuf,
    manifest: Manifest,
    code_objects: Vec<Arc<Vec<u8>>>,
    /// (N, K) -> [(M bucket, kernel index, tuned)], ascending in M.
    index: Buckets,
}

/// The kernel a pack serves for a shape.
#[derive(Debug, Clone)]
pub struct PackKernel {
    /// The spec.
    pub spec: KernelSpec,
    /// Kernel symbol.
    pub name: String,
    /// The M bucket it was chosen for.
    pub m_bucket: u32,
    /// Chosen by tuning (false: the default spec).
    pub tuned: bool,
    code_object: Arc<Vec<u8>>,
}

impl PackKernel {
    /// The code object.
    pub fn code_object(&self) -> &[u8] {
        &self.code_object
    }

    /// The kernel as a [`CompiledKernel`] (for `prepare_inputs`, `run`, `launch`), without
    /// compiling: the code object is the pack's.
    pub fn compiled(&self) -> Result<CompiledKernel, BuildError> {
        CompiledKernel::from_code_object(self.spec.clone(), self.code_object.to_vec())
    }
}

impl Pack {
    /// Opens and verifies the pack at `dir`; a tampered, truncated or wrong-version pack is
    /// refused and nothing from it is used.
    pub fn open(dir: impl AsRef<Path>) -> Result<Pack, PackError> {
        let dir = dir.as_ref().to_path_buf();
        let (manifest, files) = read_verified(&dir)?;
        let mut index = Buckets::new();
        for (i, k) in manifest.kernels.iter().enumerate() {
            for s in &k.shapes {
                index.entry((s.n, s.k)).or_default().push((s.m, i, s.tuned));
            }
        }
        for v in index.values_mut() {
            v.sort();
        }
        Ok(Pack {
            dir,
            manifest,
            code_objects: files.into_iter().map(Arc::new).collect(),
            index,
        })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The kernel for `m x n x k`: exact N and K; for M the smallest bucket at least M, else
    /// the largest.
    pub fn kernel_for(&self, m: u32, n: u32, k: u32) -> Result<PackKernel, PackError> {
        if m == 0 {
            return Err(PackError::ZeroM);
        }
        let buckets = self
            .index
            .get(&(n, k))
            .ok_or_else(|| PackError::NotServed {
                n,
                k,
                served: self
                    .index
                    .keys()
                    .map(|(n, k)| format!("{n}x{k}"))
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let &(bucket, i, tuned) = buckets
            .iter()
            .find(|(b, _, _)| *b >= m)
            .or_else(|| buckets.last())
            .ok_or(PackError::NotServed {
                n,
                k,
                served: String::new(),
            })?;
        let mk = &self.manifest.kernels[i];
        Ok(PackKernel {
            spec: KernelSpec::from(mk.spec.clone()),
            name: mk.name.clone(),
            m_bucket: bucket,
            tuned,
            code_object: self.code_objects[i].clone(),
        })
    }
}
