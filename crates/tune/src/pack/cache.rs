//! The persistent compile cache. It lives in a directory anyone with the user's rights may
//! write (`$TILEGEN_CACHE_DIR`, `~/.cache/tilegen/kernels`), so an entry is a claim to check,
//! not a fact: the name of an entry is `<input key>-<SHA-256 of the code object>.hsaco`, where
//! the input key hashes everything that determines the code object. An entry is used only when
//! it is a regular file of bounded size whose bytes hash to the digest its name records and
//! which holds the spec's kernel; any other is discarded (removed when it is a regular file),
//! reported, and its kernel compiled again.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use tilegen_kernels::{CompiledKernel, KernelSpec};
use tilegen_output::Output;

use super::files::{Dir, FileError};
use super::{CODE_OBJECT_MAX_BYTES, CacheDiscard, PackError, TARGET, io, sha256_hex};
use crate::sweep::{llvm_version, tilegen_version};

/// Version of the key's recipe: a change to what goes into it changes every key.
const KEY_RECIPE: u32 = 1;

/// SHA-256 of what determines a spec's code object: the spec (its values and its cache key),
/// the tilegen version (the code generator), the full LLVM version and the target.
pub(super) fn input_key(spec: &KernelSpec) -> String {
    let values = serde_json::to_string(spec).unwrap_or_else(|_| spec.kernel_name());
    sha256_hex(
        format!(
            "tilegen compile cache {KEY_RECIPE}\ntilegen {}\nllvm {}\ntarget {TARGET}\ncache key {}\nspec {values}\n",
            tilegen_version(),
            llvm_version(),
            spec.cache_key(),
        )
        .as_bytes(),
    )
}

/// The file name of an entry.
fn entry_name(key: &str, digest: &str) -> String {
    format!("{key}-{digest}.hsaco")
}

/// `(input key, digest)` of an entry's file name; `None` for any other file.
fn parse_name(name: &str) -> Option<(&str, &str)> {
    let (key, digest) = name.strip_suffix(".hsaco")?.split_once('-')?;
    let hex = |s: &str| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit());
    (hex(key) && hex(digest)).then_some((key, digest))
}

/// The cache directory as listed when a build starts.
pub(super) struct Cache {
    path: PathBuf,
    dir: Option<Dir>,
    /// Entry names by input key.
    entries: HashMap<String, Vec<String>>,
}

impl Cache {
    /// Lists `path`; a cache that does not exist yet is empty.
    pub(super) fn load(path: &Path) -> Result<Cache, PackError> {
        let mut cache = Cache {
            path: path.to_path_buf(),
            dir: None,
            entries: HashMap::new(),
        };
        let dir = match Dir::open(path) {
            Ok(d) => d,
            Err(FileError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(cache);
            }
            Err(e) => return Err(io_error("opening the compile cache", path, e)),
        };
        let names = dir
            .names()
            .map_err(|e| io_error("reading the compile cache", path, e))?;
        for name in names {
            let Some(name) = name.to_str() else { continue };
            if let Some((key, _)) = parse_name(name) {
                cache
                    .entries
                    .entry(key.to_string())
                    .or_default()
                    .push(name.to_string());
            }
        }
        cache.dir = Some(dir);
        Ok(cache)
    }

    /// The spec's kernel from the cache, if an entry for it checks out; the entries that did
    /// not, discarded.
    pub(super) fn lookup(&self, spec: &KernelSpec) -> (Option<CompiledKernel>, Vec<CacheDiscard>) {
        let mut discarded = Vec::new();
        let (Some(dir), Some(names)) = (&self.dir, self.entries.get(&input_key(spec))) else {
            return (None, discarded);
        };
        for name in names {
            match self.check(dir, name, spec) {
                Ok(k) => return (Some(k), discarded),
                Err(reason) => {
                    // Only a regular file is removed: anything else is left for its owner.
                    let removed =
                        matches!(dir.kind(name), Ok(Some(rustix::fs::FileType::RegularFile)))
                            && dir.remove(name, false).is_ok();
                    discarded.push(CacheDiscard {
                        path: self.path.join(name),
                        reason,
                        removed,
                    });
                }
            }
        }
        (None, discarded)
    }

    /// The kernel in entry `name`, or why it cannot be used.
    fn check(&self, dir: &Dir, name: &str, spec: &KernelSpec) -> Result<CompiledKernel, String> {
        let (_, digest) = parse_name(name).ok_or("not an entry name")?;
        let bytes = dir.read(name, CODE_OBJECT_MAX_BYTES).map_err(|e| match e {
            FileError::Io(e) => format!("it cannot be read: {e}"),
            FileError::Kind(k) => format!("it is a {k}, not a regular file"),
            FileError::TooBig(n) => format!(
                "it has {n} bytes, more than {CODE_OBJECT_MAX_BYTES}, the limit for a code object"
            ),
        })?;
        let sum = sha256_hex(&bytes);
        if sum != digest {
            return Err(format!(
                "its bytes hash to SHA-256 {sum}, its name records {digest} (damaged or tampered with)"
            ));
        }
        CompiledKernel::from_code_object(spec.clone(), bytes)
            .map_err(|e| format!("it does not hold kernel {}: {e}", spec.kernel_name()))
    }

    /// Adds a freshly compiled kernel, written atomically. A symlink or other non-regular file
    /// where the entry goes is left alone and the kernel is not cached: writing through it
    /// would write outside the cache.
    pub(super) fn store(&self, k: &CompiledKernel) -> Result<(), PackError> {
        std::fs::create_dir_all(&self.path)
            .map_err(io("creating the compile cache", &self.path))?;
        let name = entry_name(&input_key(k.spec()), &sha256_hex(k.code_object()));
        let path = self.path.join(&name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if !m.file_type().is_file() => return Ok(()),
            _ => {}
        }
        Output::check(&path)?.write(k.code_object())?;
        Ok(())
    }
}

fn io_error(action: &'static str, path: &Path, e: FileError) -> PackError {
    let source = match e {
        FileError::Io(e) => e,
        FileError::Kind(k) => std::io::Error::other(format!("it is a {k}")),
        FileError::TooBig(n) => std::io::Error::other(format!("{n} bytes")),
    };
    io(action, path)(source)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entry_names_round_trip_and_other_files_are_not_entries() {
        let key = "a".repeat(64);
        let digest = "0123456789abcdef".repeat(4);
        let name = entry_name(&key, &digest);
        assert_eq!(parse_name(&name), Some((key.as_str(), digest.as_str())));
        for other in [
            "README",
            "x.hsaco",
            &format!("{key}.hsaco"),
            &format!("{key}-{}.hsaco", "g".repeat(64)),
            &format!("{key}-{digest}.hsaco.tmp"),
        ] {
            assert_eq!(parse_name(other), None, "{other}");
        }
    }

    #[test]
    fn the_input_key_separates_specs() {
        let a = KernelSpec::new().into();
        let b = KernelSpec::new().b_prefetch(true).into();
        assert_eq!(input_key(&a), input_key(&KernelSpec::new().into()));
        assert_ne!(input_key(&a), input_key(&b));
        assert_eq!(input_key(&a).len(), 64);
    }
}
