//! Kernel packs: the best spec of every template shape, compiled ahead of time, so a serving
//! process dispatches without compiling.
//!
//! A pack is a directory: `manifest.json` (format version, tilegen and LLVM versions, the
//! target, and for every kernel its spec, cache key, code object file and SHA-256, the shapes
//! it serves and the tuning result it came from) and `kernels/<cache key>.hsaco`. It is built
//! in a new directory beside the target and swapped into place, so an interrupted build never
//! leaves half a pack; a pack is replaced only when it holds nothing but what its manifest
//! lists, so a file someone put there is never deleted. [`verify`] checks format, versions,
//! checksums and that every code object holds the kernel its spec names, reading the pack's
//! files only as regular files inside it and of bounded size; [`Pack::open`] verifies before
//! anything is used. Compiled kernels are reused from a compile cache whose entries are
//! checked by content hash (see `cache.rs`).

mod cache;
mod files;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use tilegen_kernels::{BuildError, CompiledKernel, KernelSpec, SPEC_FORMAT, SpecError};
use tilegen_output::{Output, OutputError};

use crate::db::{Db, DbError, DeviceName, Row, Status};
use crate::eval::By;
use crate::space::default_spec;
use crate::sweep::{llvm_version, tilegen_version};
use crate::template::{Shape, Template};

/// Format version of the manifest.
pub const PACK_FORMAT: u32 = 1;
/// The manifest's file name.
pub const MANIFEST: &str = "manifest.json";
/// The target every pack is built for.
pub const TARGET: &str = tilegen_arch::PROCESSOR;
/// The largest manifest read: thousands of kernels fit many times over, and a reader never
/// takes more memory than this from a file it is handed.
pub const MANIFEST_MAX_BYTES: u64 = 8 << 20;
/// The largest code object read from a pack or the compile cache (ours are tens of KiB).
pub const CODE_OBJECT_MAX_BYTES: u64 = 64 << 20;

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
    /// A database row's spec is refused as it is read: a knob where its kernel has no place
    /// for it.
    #[error("the spec of database row {uid} is refused")]
    StoredSpec {
        /// The row's history id.
        uid: String,
        /// Why.
        #[source]
        source: SpecError,
    },
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
    /// The pack directory to be replaced holds a file its pack did not write.
    #[error(
        "{} holds {file}, which its pack did not write; rebuilding replaces the whole directory, so move it out first (nothing was changed)",
        dir.display()
    )]
    Foreign {
        /// The pack directory.
        dir: PathBuf,
        /// The file, relative to it.
        file: String,
    },
    /// A pack or cache path is not the kind of file it must be: a symlink, FIFO, device or
    /// directory where a regular file belongs, say.
    #[error(
        "{} is a {found}, not a {expected}: pack files are read only as regular files and directories inside the pack, never through a symlink",
        path.display()
    )]
    FileType {
        /// The path.
        path: PathBuf,
        /// What it is.
        found: &'static str,
        /// What it must be.
        expected: &'static str,
    },
    /// A file is larger than what is read of its kind.
    #[error("{} has {size} bytes, more than {limit}, the limit for {what}", path.display())]
    TooBig {
        /// The file.
        path: PathBuf,
        /// Its size (at least the limit + 1).
        size: u64,
        /// The limit.
        limit: u64,
        /// What kind of file it is.
        what: &'static str,
    },
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
#[serde(deny_unknown_fields)]
pub struct TunedFrom {
    /// History id of the database row.
    pub uid: String,
    /// Model or device.
    pub source: By,
    /// The device (or the timing model).
    pub device: DeviceName,
    /// CUs.
    pub cus: u32,
    /// µs.
    pub us: f64,
    /// TFLOP/s.
    pub tflops: f64,
}

/// One shape a kernel serves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
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
#[serde(deny_unknown_fields)]
pub struct ManifestKernel {
    /// Kernel symbol.
    pub name: String,
    /// The spec, in its stored form (read strictly: a field this build does not know, or a knob
    /// where its kernel has no place for it, is refused).
    pub spec: KernelSpec,
    /// The spec's cache key.
    pub cache_key: String,
    /// The code object, relative to the pack.
    pub file: String,
    /// Its SHA-256, hex.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
    /// How far, in bf16 ulps, an element of its C may be from the f32-accumulated product
    /// rounded once ([`KernelSpec::bf16_ulps`]: 1, or `split_k` for a split-K kernel adding
    /// bf16 with atomics); absent in a manifest from before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bf16_ulps: Option<u32>,
    /// Shapes it serves.
    pub shapes: Vec<Served>,
}

/// `manifest.json`. Read strictly: a field this build does not know is refused, since a
/// manifest that says more than the build understands may mean something it would ignore.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`PACK_FORMAT`].
    pub format: u32,
    /// The stored form of its specs ([`SPEC_FORMAT`]); a manifest from before it was recorded
    /// holds version 1.
    #[serde(default = "spec_format_1")]
    pub spec_format: u32,
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

/// The spec format of a manifest that does not record one.
fn spec_format_1() -> u32 {
    1
}

/// A compile-cache entry that was not used: its kernel was compiled again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CacheDiscard {
    /// The entry.
    pub path: PathBuf,
    /// Why it was not used.
    pub reason: String,
    /// Removed from the cache (only a regular file is; anything else is left alone).
    pub removed: bool,
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
    /// Compile-cache entries discarded as damaged, tampered with or not regular files.
    pub cache_discarded: u64,
    /// Those entries and why.
    pub discarded: Vec<CacheDiscard>,
    /// The pack this one replaced, left at this path because a file it did not list appeared
    /// in it during the build (normally `None`: the old pack is removed).
    pub old_pack_kept: Option<PathBuf>,
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
/// prediction, then the shortest time). A kernel whose bf16 C may be more than one ulp from
/// the once-rounded product (split-K with bf16 atomics) is chosen only when the template
/// allows it (`split_k_atomic = true`), whatever rows the database holds.
pub fn choose(template: &Template, db: &Db) -> Result<HashMap<Shape, Row>, DbError> {
    let shapes: BTreeSet<Shape> = template.shapes().into_iter().collect();
    let mut best: HashMap<Shape, Row> = HashMap::new();
    for r in db.results()? {
        if r.status != Status::Ok || r.gfx != TARGET || r.spec.out_dtype != template.space.out_dtype
        {
            continue;
        }
        let inexact = KernelSpec::try_from(r.spec.clone()).is_ok_and(|s| s.bf16_ulps() > 1);
        if inexact && !template.space.split_k_atomic {
            continue;
        }
        let Some(us) = r.us else { continue };
        let shape = r.shape();
        if !shapes.contains(&shape) {
            continue;
        }
        let rank = |r: &Row| (r.source != By::Device, r.us.unwrap_or(f64::INFINITY));
        match best.get(&shape) {
            Some(b) if rank(b) <= (r.source != By::Device, us) => {}
            _ => {
                best.insert(shape, r);
            }
        }
    }
    Ok(best)
}

/// Compiles (or takes from the cache) every spec, `jobs` at a time.
fn compile_all(
    specs: &[KernelSpec],
    opts: &BuildOptions,
    report: &Mutex<BuildReport>,
) -> Result<Vec<CompiledKernel>, PackError> {
    let cache = opts
        .cache_dir
        .as_deref()
        .map(cache::Cache::load)
        .transpose()?;
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
                    let (from_cache, discarded) = match &cache {
                        Some(c) => c.lookup(spec),
                        None => (None, Vec::new()),
                    };
                    let hit = from_cache.is_some();
                    let r = match from_cache {
                        Some(k) => Ok(k),
                        None => crate::eval::compile(spec).map_err(|source| PackError::Build {
                            kernel: spec.kernel_name(),
                            source,
                        }),
                    };
                    let r = r.and_then(|k| {
                        if !hit && let Some(c) = &cache {
                            c.store(&k)?;
                        }
                        Ok(k)
                    });
                    if let Ok(mut rep) = report.lock() {
                        rep.cache_discarded += discarded.len() as u64;
                        rep.discarded.extend(discarded);
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

/// Symlinks followed before an output path is declared a loop (Linux's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// The directory a pack named `out` is written to: `out` itself, or the end of its symlink
/// chain (the link stays a link; the directory it names is replaced, or created).
fn resolve_output(out: &Path) -> Result<PathBuf, PackError> {
    let mut current = out.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        match std::fs::symlink_metadata(&current) {
            Ok(m) if m.file_type().is_symlink() => {
                let link =
                    std::fs::read_link(&current).map_err(io("reading the symlink", &current))?;
                current = if link.is_absolute() {
                    link
                } else {
                    parent_dir(&current).join(link)
                };
            }
            _ => return Ok(current),
        }
    }
    Err(io("resolving", out)(std::io::Error::other(format!(
        "more than {MAX_SYMLINK_HOPS} symlinks (a loop?)"
    ))))
}

fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// What a pack directory about to be replaced holds: nothing, or a pack and only its files.
struct OldPack {
    /// The names in `kernels/` its manifest lists and that are there.
    kernels: Vec<String>,
    /// It has a `kernels/` directory.
    has_kernels: bool,
    /// It has a manifest.
    has_manifest: bool,
}

/// Checks that `target` may be replaced by a new pack: absent (`None`), an empty directory, or
/// a pack holding nothing its manifest does not list. Anything else is refused, naming the
/// first file that is not the pack's: a rebuild never deletes what the pack did not write.
/// (Carrying such files into the new pack was the alternative; refusing is chosen because
/// the directory is the pack's, [`verify`] refuses unlisted code objects, and a user's file
/// belongs where the user can see it was kept, not silently inside a build product.)
fn replaceable(target: &Path) -> Result<Option<OldPack>, PackError> {
    match std::fs::symlink_metadata(target) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io("inspecting", target)(e)),
        Ok(m) if !m.is_dir() => return Err(PackError::NotAPack(target.to_path_buf())),
        Ok(_) => {}
    }
    let file_error = |path: PathBuf, e: files::FileError| match e {
        files::FileError::Io(source) => PackError::Io {
            action: "reading",
            path,
            source,
        },
        files::FileError::Kind(found) => PackError::FileType {
            path,
            found,
            expected: "regular file",
        },
        files::FileError::TooBig(size) => PackError::TooBig {
            path,
            size,
            limit: MANIFEST_MAX_BYTES,
            what: "a manifest",
        },
    };
    let dir = files::Dir::open(target).map_err(|e| file_error(target.to_path_buf(), e))?;
    let names = dir
        .names()
        .map_err(|e| file_error(target.to_path_buf(), e))?;
    let mut old = OldPack {
        kernels: Vec::new(),
        has_kernels: false,
        has_manifest: false,
    };
    if names.is_empty() {
        return Ok(Some(old));
    }
    let foreign = |file: String| PackError::Foreign {
        dir: target.to_path_buf(),
        file,
    };
    if dir
        .kind(MANIFEST)
        .map_err(|e| file_error(target.join(MANIFEST), e))?
        .is_none()
    {
        return Err(PackError::NotAPack(target.to_path_buf()));
    }
    let text = dir
        .read(MANIFEST, MANIFEST_MAX_BYTES)
        .map_err(|e| file_error(target.join(MANIFEST), e))?;
    old.has_manifest = true;
    // Read leniently: a pack of another format or version is still replaced, by what it lists.
    let manifest: serde_json::Value =
        serde_json::from_slice(&text).map_err(|source| PackError::Manifest {
            path: target.join(MANIFEST),
            source,
        })?;
    let listed: BTreeSet<&str> = manifest
        .get("kernels")
        .and_then(|k| k.as_array())
        .into_iter()
        .flatten()
        .filter_map(|k| k.get("file")?.as_str()?.strip_prefix("kernels/"))
        .collect();
    for name in &names {
        let shown = name.to_string_lossy();
        match name.to_str() {
            Some(MANIFEST) => {}
            Some("kernels") => {
                let sub = match dir.subdir("kernels") {
                    Ok(s) => s,
                    Err(files::FileError::Kind(k)) => {
                        return Err(foreign(format!("kernels (a {k})")));
                    }
                    Err(e) => return Err(file_error(target.join("kernels"), e)),
                };
                old.has_kernels = true;
                for k in sub
                    .names()
                    .map_err(|e| file_error(sub.path().to_path_buf(), e))?
                {
                    let shown = format!("kernels/{}", k.to_string_lossy());
                    let Some(k) = k.to_str().filter(|k| listed.contains(k)) else {
                        return Err(foreign(shown));
                    };
                    match sub.kind(k) {
                        Ok(Some(rustix::fs::FileType::RegularFile)) => {
                            old.kernels.push(k.to_string())
                        }
                        Ok(Some(t)) => {
                            return Err(foreign(format!("{shown} (a {})", files::kind_name(t))));
                        }
                        Ok(None) => {}
                        Err(e) => return Err(file_error(target.join(&shown), e)),
                    }
                }
            }
            _ => return Err(foreign(shown.into_owned())),
        }
    }
    Ok(Some(old))
}

/// Removes from `dir` (a replaced pack) exactly what `old` found its pack wrote, then `dir`
/// itself; `false` when something else is there (it then stays, whole).
fn remove_old(dir: &Path, old: &OldPack) -> bool {
    let Ok(d) = files::Dir::open(dir) else {
        return false;
    };
    if old.has_kernels {
        let Ok(sub) = d.subdir("kernels") else {
            return false;
        };
        for k in &old.kernels {
            if matches!(sub.kind(k), Ok(Some(rustix::fs::FileType::RegularFile))) {
                let _ = sub.remove(k, false);
            }
        }
        if sub.names().map_or(true, |n| !n.is_empty()) || d.remove("kernels", true).is_err() {
            return false;
        }
    }
    if old.has_manifest && d.remove(MANIFEST, false).is_err() {
        return false;
    }
    std::fs::remove_dir(dir).is_ok()
}

/// A new, empty directory beside `target` named after it; never one that existed.
fn fresh_sibling(target: &Path, what: &str) -> Result<PathBuf, PackError> {
    let parent = parent_dir(target);
    std::fs::create_dir_all(&parent).map_err(io("creating", &parent))?;
    let stem: String = target
        .file_name()
        .map(|n| n.to_string_lossy().chars().take(64).collect())
        .unwrap_or_else(|| "pack".into());
    for serial in 0u32.. {
        let p = parent.join(format!(
            ".{stem}.{}-{serial}.tilegen-pack-{what}",
            std::process::id()
        ));
        match std::fs::create_dir(&p) {
            Ok(()) => return Ok(p),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io("creating", &p)(e)),
        }
    }
    Err(io("creating a directory beside", target)(
        std::io::Error::other("every name is taken"),
    ))
}

/// Puts the built pack `tmp` in `target`'s place. An existing pack is exchanged with it in one
/// step (readers see the old pack or the new one, never neither) and then removed, file by
/// file of its own; returns where it was left if something else appeared in it.
fn swap_in(tmp: &Path, target: &Path, old: Option<&OldPack>) -> Result<Option<PathBuf>, PackError> {
    use rustix::fs::{CWD, RenameFlags, renameat_with};
    let Some(old) = old else {
        // NOREPLACE: a directory made meanwhile at the target is not replaced.
        return match renameat_with(CWD, tmp, CWD, target, RenameFlags::NOREPLACE) {
            Ok(()) => Ok(None),
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
                std::fs::rename(tmp, target)
                    .map(|()| None)
                    .map_err(io("renaming the new pack to", target))
            }
            Err(e) => Err(io("renaming the new pack to", target)(e.into())),
        };
    };
    let aside = match renameat_with(CWD, tmp, CWD, target, RenameFlags::EXCHANGE) {
        // The old pack now has the temporary name.
        Ok(()) => tmp.to_path_buf(),
        // A file system without the exchange: step aside, then take the name.
        Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {
            let aside = fresh_sibling(target, "old")?;
            std::fs::remove_dir(&aside).map_err(io("removing", &aside))?;
            std::fs::rename(target, &aside).map_err(io("moving aside", target))?;
            if let Err(e) = std::fs::rename(tmp, target) {
                let _ = std::fs::rename(&aside, target);
                return Err(io("renaming the new pack to", target)(e));
            }
            aside
        }
        Err(e) => return Err(io("exchanging the new pack with", target)(e.into())),
    };
    if remove_old(&aside, old) {
        return Ok(None);
    }
    // Kept whole, under a name that says what it is.
    let kept = match fresh_sibling(target, "old") {
        Ok(p) if std::fs::rename(&aside, &p).is_ok() => p,
        Ok(p) => {
            let _ = std::fs::remove_dir(p);
            aside
        }
        Err(_) => aside,
    };
    Ok(Some(kept))
}

/// Builds the pack of `template` from `db` into `out` (through `out` when it is a symlink).
pub fn build(
    template: &Template,
    db: &Db,
    out: &Path,
    opts: &BuildOptions,
) -> Result<BuildReport, PackError> {
    let t0 = Instant::now();
    let target = resolve_output(out)?;
    // The target must be a pack of only its own files, an empty directory or absent: checked
    // before any work, and again before the swap.
    replaceable(&target)?;
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
                KernelSpec::try_from(r.spec.clone()).map_err(|source| PackError::StoredSpec {
                    uid: r.uid.clone(),
                    source,
                })?,
                Served {
                    m: shape.m,
                    n: shape.n,
                    k: shape.k,
                    tuned: true,
                    result: Some(TunedFrom {
                        uid: r.uid.clone(),
                        source: r.source,
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
    report.discarded.sort_by(|a, b| a.path.cmp(&b.path));
    // Write into a new sibling directory, then swap it into place.
    let tmp = fresh_sibling(&target, "tmp")?;
    let mut guard = TempDir(Some(tmp.clone()));
    std::fs::create_dir(tmp.join("kernels")).map_err(io("creating", &tmp))?;
    let mut manifest = Manifest {
        format: PACK_FORMAT,
        spec_format: SPEC_FORMAT,
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
            spec: k.spec().clone(),
            cache_key: k.cache_key().to_string(),
            file,
            sha256: sha256_hex(k.code_object()),
            bytes: k.code_object().len() as u64,
            bf16_ulps: Some(k.spec().bf16_ulps()),
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
    // The build took a while: whatever appeared in the old pack meanwhile is refused too.
    let old = replaceable(&target)?;
    report.old_pack_kept = swap_in(&tmp, &target, old.as_ref())?;
    guard.0 = None;
    report.kernels = manifest.kernels.len() as u64;
    report.seconds = t0.elapsed().as_secs_f64();
    Ok(report)
}

/// Reads and checks the pack at `dir`: format, versions, target, every code object's size
/// and SHA-256, and that each holds the kernel its spec names. Every file is read relative to
/// the pack's directory, as a regular file (never through a symlink, never a FIFO or device)
/// and never beyond its limit. Returns the manifest and the code objects, by kernel index.
fn read_verified(dir: &Path) -> Result<(Manifest, Vec<Vec<u8>>), PackError> {
    let tampered = |problem: String| PackError::Tampered {
        dir: dir.to_path_buf(),
        problem,
    };
    let refused = |path: PathBuf, e: files::FileError, expected, limit, what| match e {
        files::FileError::Io(source) => PackError::Io {
            action: "reading",
            path,
            source,
        },
        files::FileError::Kind(found) => PackError::FileType {
            path,
            found,
            expected,
        },
        files::FileError::TooBig(size) => PackError::TooBig {
            path,
            size,
            limit,
            what,
        },
    };
    let top =
        files::Dir::open(dir).map_err(|e| refused(dir.to_path_buf(), e, "directory", 0, ""))?;
    let path = dir.join(MANIFEST);
    let text = top.read(MANIFEST, MANIFEST_MAX_BYTES).map_err(|e| {
        refused(
            path.clone(),
            e,
            "regular file",
            MANIFEST_MAX_BYTES,
            "a manifest",
        )
    })?;
    // Format, versions and target first, so a manifest of another build is refused by its
    // version, not by a field it has or lacks.
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
    // Specs stored in a newer form than this build reads would hold knobs it does not know.
    let spec_format = probe.get("spec_format").map_or(Some(1), |f| f.as_u64());
    if spec_format.is_none_or(|f| f > u64::from(SPEC_FORMAT)) {
        return Err(PackError::Version {
            dir: dir.to_path_buf(),
            what: "the spec format",
            found: probe
                .get("spec_format")
                .map_or("missing".into(), |f| f.to_string()),
            expected: format!("{SPEC_FORMAT} or older"),
        });
    }
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
    let text_of = |field: &str| {
        probe
            .get(field)
            .and_then(|v| v.as_str())
            .unwrap_or("missing")
            .to_string()
    };
    version(
        "the tilegen version",
        &text_of("tilegen_version"),
        tilegen_version(),
    )?;
    let major = |v: &str| v.split('.').next().unwrap_or("").to_string();
    version(
        "the LLVM major version",
        &major(&text_of("llvm_version")),
        &major(&llvm_version()),
    )?;
    version("the target", &text_of("target"), TARGET)?;
    let m: Manifest = serde_json::from_slice(&text).map_err(|source| PackError::Manifest {
        path: path.clone(),
        source,
    })?;
    let kdir = top
        .subdir("kernels")
        .map_err(|e| refused(dir.join("kernels"), e, "directory", 0, ""))?;
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
        let name = rel.file_name().and_then(|n| n.to_str()).filter(|_| plain);
        let Some(name) = name else {
            return Err(tampered(format!(
                "kernel {} names the file `{}`, outside kernels/",
                k.name, k.file
            )));
        };
        listed.insert(k.file.clone());
        if k.bytes > CODE_OBJECT_MAX_BYTES {
            return Err(PackError::TooBig {
                path: dir.join(rel),
                size: k.bytes,
                limit: CODE_OBJECT_MAX_BYTES,
                what: "a code object (the manifest's size)",
            });
        }
        let bytes = kdir.read(name, k.bytes).map_err(|e| match e {
            files::FileError::Io(e) => tampered(format!("{} cannot be read: {e}", k.file)),
            files::FileError::TooBig(size) => tampered(format!(
                "{} has {size} bytes, the manifest says {}",
                k.file, k.bytes
            )),
            e => refused(dir.join(rel), e, "regular file", k.bytes, "a code object"),
        })?;
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
        let spec = &k.spec;
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
        if let Some(ulps) = k.bf16_ulps
            && ulps != spec.bf16_ulps()
        {
            return Err(tampered(format!(
                "kernel {}: the manifest bounds it to {ulps} bf16 ulps, its spec to {}",
                k.name,
                spec.bf16_ulps()
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
        if spec.reduces_split_k() && co.kernel(&spec.reduce_name()).is_none() {
            return Err(tampered(format!(
                "{} does not hold kernel {}, the split-K reduction of {}",
                k.file,
                spec.reduce_name(),
                k.name
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
    let names = kdir
        .names()
        .map_err(|e| refused(dir.join("kernels"), e, "directory", 0, ""))?;
    for e in names {
        let name = format!("kernels/{}", e.to_string_lossy());
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
            spec: mk.spec.clone(),
            name: mk.name.clone(),
            m_bucket: bucket,
            tuned,
            code_object: self.code_objects[i].clone(),
        })
    }
}
