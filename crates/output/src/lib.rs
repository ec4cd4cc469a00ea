//! Output files written the way a careful tool writes them.
//!
//! - [`Output::check`] validates a path before any work is done: a missing directory, a directory
//!   in the file's place or a device node is reported before a kernel is compiled or a weight file
//!   is read, and a probe file proves the directory is writable.
//! - Bytes go to a temporary file beside the target; [`AtomicFile::commit`] syncs it and renames it
//!   over the target, so readers see the old file or the new one, never half of one.
//! - A failed or abandoned write removes its temporary file and leaves an existing output as it
//!   was. [`install_interrupt_handler`] extends that to SIGINT, SIGTERM and SIGHUP: every pending
//!   temporary file of the process is removed before it stops.
//! - A new file gets the mode the user's umask gives (0666 masked); a replaced file keeps its mode.
//!   A symlink is written through: its target is replaced and the link stays.
//!
//! `tempfile` covers the temporary-file part but not the interruption or the symlink and mode
//! rules, and a library that writes through it leaves `.tmpXXXX` files behind when killed; this
//! crate is the one place the project writes user-visible files.

#![deny(missing_docs)]

use std::collections::BTreeSet;
use std::fs::{File, OpenOptions, Permissions};
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

/// Why an output cannot be written.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    /// The path cannot be an output file.
    #[error("cannot write {path}: {reason}")]
    Unusable {
        /// The path as given.
        path: PathBuf,
        /// The rule it breaks.
        reason: String,
    },
    /// An I/O operation failed.
    #[error("{action} {path}")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// The process was asked to stop (SIGINT, SIGTERM or SIGHUP).
    #[error("interrupted")]
    Interrupted,
    /// The signal handler could not be installed.
    #[error("installing the interrupt handler")]
    Handler(#[source] io::Error),
}

/// Links followed before a path is declared a loop (Linux's own limit).
const MAX_SYMLINK_HOPS: usize = 40;

/// A checked output path: where the bytes will land and with which mode.
#[derive(Debug, Clone)]
pub struct Output {
    requested: PathBuf,
    target: PathBuf,
    keep_mode: Option<Permissions>,
}

impl Output {
    /// Validates `path` as an output: it is (or will be) a regular file in an existing,
    /// writable directory. A symlink resolves to the file it names (which may not exist yet).
    pub fn check(path: impl AsRef<Path>) -> Result<Output, OutputError> {
        let requested = path.as_ref().to_path_buf();
        let unusable = |reason: String| OutputError::Unusable {
            path: requested.clone(),
            reason,
        };
        if requested.as_os_str().is_empty() {
            return Err(unusable("the path is empty".into()));
        }
        let target = resolve_links(&requested).map_err(&unusable)?;
        if target.file_name().is_none() {
            return Err(unusable("the path names a directory, not a file".into()));
        }
        let keep_mode = match std::fs::metadata(&target) {
            Ok(m) if m.is_file() => Some(m.permissions()),
            Ok(m) if m.is_dir() => return Err(unusable("it is a directory".into())),
            Ok(_) => {
                return Err(unusable(
                    "it is not a regular file (a device, pipe or socket would be replaced)".into(),
                ));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                return Err(unusable(format!(
                    "{} is not a directory",
                    parent_dir(&target).display()
                )));
            }
            Err(source) => {
                return Err(OutputError::Io {
                    action: "inspecting",
                    path: target,
                    source,
                });
            }
        };
        let dir = parent_dir(&target);
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(unusable(format!("{} is not a directory", dir.display())));
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(unusable(format!(
                    "the directory {} does not exist",
                    dir.display()
                )));
            }
            Err(source) => {
                return Err(OutputError::Io {
                    action: "inspecting",
                    path: dir.to_path_buf(),
                    source,
                });
            }
        }
        let output = Output {
            requested,
            target,
            keep_mode,
        };
        // The probe proves permissions and a writable file system now, not after the work.
        drop(output.create()?);
        Ok(output)
    }

    /// The path as the user gave it.
    pub fn path(&self) -> &Path {
        &self.requested
    }

    /// The file that will be replaced (the path itself, or the end of its symlink chain).
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Starts writing: a new temporary file beside the target.
    pub fn create(&self) -> Result<AtomicFile, OutputError> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let dir = parent_dir(&self.target);
        let stem: String = self
            .target
            .file_name()
            .map(|n| n.to_string_lossy().chars().take(64).collect())
            .unwrap_or_default();
        loop {
            let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
            let temp = dir.join(format!(
                ".{stem}.{}-{serial}.tilegen-tmp",
                std::process::id()
            ));
            // Registered before it exists, so an interruption between the two cannot miss it.
            let mut pending = pending();
            pending.insert(temp.clone());
            // Mode 0666 lets the kernel apply the umask, as for any file a shell creates.
            match OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o666)
                .open(&temp)
            {
                Ok(file) => {
                    drop(pending);
                    return Ok(AtomicFile {
                        file,
                        temp,
                        output: self.clone(),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                    pending.remove(&temp);
                }
                Err(source) => {
                    pending.remove(&temp);
                    return Err(OutputError::Io {
                        action: "creating a temporary file for",
                        path: self.requested.clone(),
                        source,
                    });
                }
            }
        }
    }

    /// Removes the file, if there is one: an output a run does not produce this time must not
    /// be left from an earlier run beside the ones it wrote. A symlink goes, not its target.
    pub fn remove(&self) -> Result<(), OutputError> {
        match std::fs::remove_file(&self.requested) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(OutputError::Io {
                action: "removing",
                path: self.requested.clone(),
                source: e,
            }),
            _ => Ok(()),
        }
    }

    /// Writes `bytes` as the whole file, atomically.
    pub fn write(&self, bytes: &[u8]) -> Result<(), OutputError> {
        let mut f = self.create()?;
        f.write_all(bytes).map_err(|source| OutputError::Io {
            action: "writing",
            path: self.requested.clone(),
            source,
        })?;
        f.commit()
    }
}

/// A file being written; the target changes only on [`AtomicFile::commit`]. Dropping it
/// uncommitted removes the temporary file.
#[derive(Debug)]
pub struct AtomicFile {
    file: File,
    temp: PathBuf,
    output: Output,
}

impl AtomicFile {
    /// The open temporary file (to size it, or to write at offsets).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Syncs the bytes, gives the file its mode and renames it over the target.
    pub fn commit(self) -> Result<(), OutputError> {
        let io = |action, source| OutputError::Io {
            action,
            path: self.output.requested.clone(),
            source,
        };
        if let Some(mode) = &self.output.keep_mode {
            self.file
                .set_permissions(Permissions::from_mode(mode.mode()))
                .map_err(|e| io("setting the mode of", e))?;
        }
        self.file.sync_all().map_err(|e| io("syncing", e))?;
        {
            // Held across the rename so an interruption sees the file either pending or done.
            let mut pending = pending();
            if !pending.contains(&self.temp) {
                return Err(OutputError::Interrupted);
            }
            std::fs::rename(&self.temp, &self.output.target).map_err(|e| io("renaming onto", e))?;
            pending.remove(&self.temp);
        }
        // The rename is durable once the directory is; a failure here loses nothing written.
        if let Ok(dir) = File::open(parent_dir(&self.output.target)) {
            let _ = dir.sync_all();
        }
        Ok(())
    }
}

impl Write for AtomicFile {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }
    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.file.write_all(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

impl Drop for AtomicFile {
    fn drop(&mut self) {
        let mut pending = pending();
        if pending.remove(&self.temp) {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Temporary files of this process not yet committed or removed.
fn pending() -> MutexGuard<'static, BTreeSet<PathBuf>> {
    static PENDING: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    // A panic while holding the lock leaves a set that is still right: keep using it.
    PENDING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes every pending temporary file; they stay registered so their writers fail at commit.
fn remove_pending() {
    let pending = pending();
    for p in pending.iter() {
        let _ = std::fs::remove_file(p);
    }
    // Keep the lock: nothing may commit between the cleanup and the process's end.
    std::mem::forget(pending);
}

fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// Follows a chain of symlinks to the path that will really be written.
fn resolve_links(path: &Path) -> Result<PathBuf, String> {
    let mut current = path.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        match std::fs::symlink_metadata(&current) {
            Ok(m) if m.file_type().is_symlink() => {
                let link = std::fs::read_link(&current)
                    .map_err(|e| format!("reading the symlink {}: {e}", current.display()))?;
                current = if link.is_absolute() {
                    link
                } else {
                    parent_dir(&current).join(link)
                };
            }
            _ => return Ok(current),
        }
    }
    Err(format!(
        "more than {MAX_SYMLINK_HOPS} symlinks (a loop?) from {}",
        path.display()
    ))
}

struct Interrupts {
    flag: Arc<AtomicBool>,
    cooperative: AtomicBool,
    /// The first signal that arrived (0: none yet), for the exit status.
    signal: AtomicI32,
}

fn interrupts() -> &'static Interrupts {
    static STATE: OnceLock<Interrupts> = OnceLock::new();
    STATE.get_or_init(|| Interrupts {
        flag: Arc::new(AtomicBool::new(false)),
        cooperative: AtomicBool::new(false),
        signal: AtomicI32::new(0),
    })
}

/// The signals that stop the process cleanly.
const STOP_SIGNALS: [i32; 3] = [
    signal_hook::consts::SIGINT,
    signal_hook::consts::SIGTERM,
    signal_hook::consts::SIGHUP,
];

/// Installs the process's SIGINT/SIGTERM/SIGHUP handler (once; later calls do nothing).
///
/// On a signal every pending temporary file is removed. Then, if some long-running work polls
/// [`interrupt_flag`], the flag is raised so it can stop cleanly; otherwise (or on a second
/// signal) the process exits with [`interrupt_exit_status`] (128 + the signal's number, as a
/// shell reports a command a signal stopped: 130 for SIGINT, 143 for SIGTERM).
pub fn install_interrupt_handler() -> Result<(), OutputError> {
    static INSTALLED: OnceLock<Result<(), io::ErrorKind>> = OnceLock::new();
    let mut error = None;
    INSTALLED.get_or_init(|| {
        // The handler runs on its own thread (signal-hook's iterator), where removing files and
        // taking locks is allowed, unlike inside a signal handler.
        let mut signals = signal_hook::iterator::Signals::new(STOP_SIGNALS).map_err(|e| {
            let kind = e.kind();
            error = Some(e);
            kind
        })?;
        std::thread::Builder::new()
            .name("tilegen-signals".into())
            .spawn(move || {
                for signal in signals.forever() {
                    let state = interrupts();
                    let _ = state.signal.compare_exchange(
                        0,
                        signal,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                    let second = state.flag.swap(true, Ordering::SeqCst);
                    if state.cooperative.load(Ordering::SeqCst) && !second {
                        // Files are removed by the work itself as it unwinds; only a second
                        // signal forces the issue.
                        continue;
                    }
                    remove_pending();
                    std::process::exit(i32::from(interrupt_exit_status()));
                }
            })
            .map(|_| ())
            .map_err(|e| {
                let kind = e.kind();
                error = Some(e);
                kind
            })
    });
    match error {
        Some(e) => Err(OutputError::Handler(e)),
        None => Ok(()),
    }
}

/// The exit status of a process stopped by the signal that arrived first: 128 + its number
/// (130 for SIGINT, 143 for SIGTERM, 129 for SIGHUP); 130 when the stop came from elsewhere.
pub fn interrupt_exit_status() -> u8 {
    let signal = interrupts().signal.load(Ordering::SeqCst);
    match u8::try_from(signal) {
        Ok(n) if (1..=64).contains(&n) => 128 + n,
        _ => 128 + signal_hook::consts::SIGINT as u8,
    }
}

/// The flag a signal raises, for work that polls it and stops with [`OutputError::Interrupted`]
/// (or its own error). Asking for it tells the handler that someone polls.
pub fn interrupt_flag() -> Arc<AtomicBool> {
    let state = interrupts();
    state.cooperative.store(true, Ordering::SeqCst);
    state.flag.clone()
}

/// `Err(Interrupted)` once a signal has arrived.
pub fn check_interrupted() -> Result<(), OutputError> {
    if interrupts().flag.load(Ordering::Relaxed) {
        Err(OutputError::Interrupted)
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".tilegen-tmp"))
            .collect()
    }

    #[test]
    fn commit_replaces_and_drop_discards() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.bin");
        std::fs::write(&path, b"precious").unwrap();
        let out = Output::check(&path).unwrap();
        let mut f = out.create().unwrap();
        f.write_all(b"half").unwrap();
        drop(f);
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
        assert!(leftovers(dir.path()).is_empty());
        out.write(b"new").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn remove_takes_an_old_output_or_nothing_and_never_a_link_target() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stale.bin");
        std::fs::write(&path, b"old").unwrap();
        let out = Output::check(&path).unwrap();
        out.remove().unwrap();
        assert!(!path.exists());
        // Nothing there: nothing to do.
        out.remove().unwrap();
        // A link is removed, the file it names stays.
        let target = dir.path().join("kept.bin");
        std::fs::write(&target, b"kept").unwrap();
        let link = dir.path().join("link.bin");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        Output::check(&link).unwrap().remove().unwrap();
        assert!(std::fs::symlink_metadata(&link).is_err());
        assert_eq!(std::fs::read(&target).unwrap(), b"kept");
    }

    #[test]
    fn modes_follow_umask_or_the_replaced_file() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: umask is process-wide; this test reads it back and restores it.
        let mask = unsafe { libc_umask(0o027) };
        let fresh = dir.path().join("fresh");
        Output::check(&fresh).unwrap().write(b"x").unwrap();
        unsafe { libc_umask(mask) };
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let kept = dir.path().join("kept");
        std::fs::write(&kept, b"old").unwrap();
        std::fs::set_permissions(&kept, Permissions::from_mode(0o604)).unwrap();
        Output::check(&kept).unwrap().write(b"new").unwrap();
        let mode = std::fs::metadata(&kept).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o604);
    }

    unsafe extern "C" {
        #[link_name = "umask"]
        fn libc_umask(mask: u32) -> u32;
    }

    #[test]
    fn symlinks_are_written_through() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("real");
        std::fs::write(&real, b"old").unwrap();
        let link = dir.path().join("link");
        symlink("real", &link).unwrap();
        Output::check(&link).unwrap().write(b"new").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        // A dangling link names the file to create.
        let dangling = dir.path().join("dangling");
        symlink("created", &dangling).unwrap();
        Output::check(&dangling).unwrap().write(b"c").unwrap();
        assert_eq!(std::fs::read(dir.path().join("created")).unwrap(), b"c");
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        symlink("b", &a).unwrap();
        symlink("a", &b).unwrap();
        assert!(matches!(
            Output::check(&a),
            Err(OutputError::Unusable { .. })
        ));
    }

    #[test]
    fn unusable_paths_are_refused_before_any_work() {
        let dir = tempfile::tempdir().unwrap();
        for (path, needle) in [
            (dir.path().join("missing/x.bin"), "does not exist"),
            (dir.path().to_path_buf(), "directory"),
            (PathBuf::from("/dev/null"), "not a regular file"),
            (PathBuf::new(), "empty"),
        ] {
            let e = Output::check(&path).unwrap_err();
            assert!(e.to_string().contains(needle), "{}: {e}", path.display());
        }
        let file = dir.path().join("file");
        std::fs::write(&file, b"").unwrap();
        let e = Output::check(file.join("x")).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        assert!(leftovers(dir.path()).is_empty());
    }

    #[test]
    fn an_interrupted_cleanup_makes_commit_fail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        std::fs::write(&path, b"precious").unwrap();
        let f = Output::check(&path).unwrap().create().unwrap();
        let temp = f.temp.clone();
        assert!(temp.exists());
        // What the handler does to this file (other tests' files stay), minus the exit.
        std::fs::remove_file(&temp).unwrap();
        pending().remove(&temp);
        assert!(matches!(f.commit(), Err(OutputError::Interrupted)));
        assert_eq!(std::fs::read(&path).unwrap(), b"precious");
    }
}
