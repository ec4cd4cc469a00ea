//! Reading pack and cache files the way a verifier must: relative to a directory already open,
//! never through a symlink, only as regular files and never beyond a size limit. A FIFO would
//! block the reader, a device (or a symlink to `/dev/zero`) would feed it without end, and a
//! symlink would let a pack "verify" against bytes that live, and change, outside it.

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Mode, OFlags};

/// Why a file of a directory was not read.
#[derive(Debug)]
pub(super) enum FileError {
    /// The operating system refused (a missing file among others).
    Io(std::io::Error),
    /// It is not the kind of file asked for: what it is instead.
    Kind(&'static str),
    /// It holds more bytes than the limit: its size (at least the limit + 1).
    TooBig(u64),
}

impl From<rustix::io::Errno> for FileError {
    fn from(e: rustix::io::Errno) -> Self {
        FileError::Io(e.into())
    }
}

/// The words for a file type, as messages name it.
pub(super) fn kind_name(t: FileType) -> &'static str {
    match t {
        FileType::RegularFile => "regular file",
        FileType::Directory => "directory",
        FileType::Symlink => "symlink",
        FileType::Fifo => "FIFO",
        FileType::Socket => "socket",
        FileType::CharacterDevice => "character device",
        FileType::BlockDevice => "block device",
        _ => "file of unknown type",
    }
}

/// Flags of every open here: no symlink at the last component, no blocking on a FIFO, no
/// controlling terminal, and no descriptor leaking into a child process.
fn open_flags() -> OFlags {
    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::NOCTTY | OFlags::CLOEXEC
}

/// A directory held open, so the files read from it are the files inside it.
pub(super) struct Dir {
    fd: OwnedFd,
    path: PathBuf,
}

impl Dir {
    /// Opens the directory the user named (a symlink to it is the user's choice and followed).
    pub(super) fn open(path: &Path) -> Result<Dir, FileError> {
        let fd = rustix::fs::open(
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Dir {
            fd,
            path: path.to_path_buf(),
        })
    }

    /// The path it was opened by.
    pub(super) fn path(&self) -> &Path {
        &self.path
    }

    /// The type of `name` in the directory, not following a symlink; `None` when it is absent.
    pub(super) fn kind(&self, name: &str) -> Result<Option<FileType>, FileError> {
        match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode))),
            Err(rustix::io::Errno::NOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Opens the subdirectory `name`, which must be a directory itself, not a symlink to one.
    pub(super) fn subdir(&self, name: &str) -> Result<Dir, FileError> {
        match self.kind(name)? {
            Some(FileType::Directory) => {}
            Some(other) => return Err(FileError::Kind(kind_name(other))),
            None => return Err(FileError::Io(std::io::ErrorKind::NotFound.into())),
        }
        let fd = rustix::fs::openat(
            &self.fd,
            name,
            open_flags() | OFlags::DIRECTORY,
            Mode::empty(),
        )
        .map_err(|e| self.refusal(name, e))?;
        Ok(Dir {
            fd,
            path: self.path.join(name),
        })
    }

    /// The whole of the regular file `name`, at most `limit` bytes.
    pub(super) fn read(&self, name: &str, limit: u64) -> Result<Vec<u8>, FileError> {
        // Checked before opening, so a device is never opened (opening some has effects).
        match self.kind(name)? {
            Some(FileType::RegularFile) => {}
            Some(other) => return Err(FileError::Kind(kind_name(other))),
            None => return Err(FileError::Io(std::io::ErrorKind::NotFound.into())),
        }
        let fd = rustix::fs::openat(&self.fd, name, open_flags(), Mode::empty())
            .map_err(|e| self.refusal(name, e))?;
        // Checked again on the handle: the name may have been replaced since.
        let st = rustix::fs::fstat(&fd)?;
        let t = FileType::from_raw_mode(st.st_mode);
        if t != FileType::RegularFile {
            return Err(FileError::Kind(kind_name(t)));
        }
        let size = u64::try_from(st.st_size).unwrap_or(0);
        if size > limit {
            return Err(FileError::TooBig(size));
        }
        let mut bytes = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
        // One byte past the limit tells a file that grew after the fstat.
        std::fs::File::from(fd)
            .take(limit.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(FileError::Io)?;
        if bytes.len() as u64 > limit {
            return Err(FileError::TooBig(bytes.len() as u64));
        }
        Ok(bytes)
    }

    /// The names in the directory (without `.` and `..`).
    pub(super) fn names(&self) -> Result<Vec<OsString>, FileError> {
        let mut out = Vec::new();
        for e in rustix::fs::Dir::read_from(&self.fd)? {
            let e = e?;
            let name = e.file_name().to_bytes();
            if name != b"." && name != b".." {
                out.push(std::ffi::OsStr::from_bytes(name).to_os_string());
            }
        }
        out.sort();
        Ok(out)
    }

    /// Removes the file `name` from the directory (a directory when `dir`).
    pub(super) fn remove(&self, name: &str, dir: bool) -> Result<(), FileError> {
        let flags = if dir {
            AtFlags::REMOVEDIR
        } else {
            AtFlags::empty()
        };
        rustix::fs::unlinkat(&self.fd, name, flags)?;
        Ok(())
    }

    /// An open that failed: a symlink or another type put in place after the check is named
    /// as such, anything else is the operating system's error.
    fn refusal(&self, name: &str, e: rustix::io::Errno) -> FileError {
        match self.kind(name) {
            Ok(Some(t)) if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR => {
                FileError::Kind(kind_name(t))
            }
            _ => e.into(),
        }
    }
}
