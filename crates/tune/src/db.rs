//! The tuning database: SQLite, safe for many processes appending at once. Writers use WAL;
//! the last one to close returns the file to rollback mode, so a database at rest is one
//! complete file and a reader creates nothing beside it.
//!
//! Three tables. `results` holds one row per (gfx, CUs, M, N, K, cache key, source): the row a
//! sweep consults to resume and a pack builds from; when two rows meet (a merge), the better
//! one stays (a measurement beats a failure, a shorter time beats a longer one). `history`
//! keeps every row ever recorded, each with a unique id, so merges are idempotent and nothing
//! measured is lost. `claims` holds the (spec, shape) pairs a running sweep is evaluating, so
//! sweeps sharing the file split the work instead of repeating it.
//!
//! A file is recognised before anything is written to it: by its SQLite `application_id`
//! ([`APPLICATION_ID`]) and its schema (the `meta` format row, the tables and their columns).
//! `meta` also records the form its rows' specs are stored in (`spec_format`,
//! [`SPEC_FORMAT`]): a file without the record holds format 1, one newer than this build's is
//! refused, and a writer marks an older file with its own.
//! Another application's file, or anything that is not an SQLite database, is refused with
//! [`DbError::NotOurs`] and left byte for byte as it was: no table created, no row inserted, no
//! switch to WAL, no `-wal`/`-shm` file made beside it. Only a new or empty file is initialised.
//! Databases written before the application id existed (format row [`FORMAT`], our tables)
//! stay readable, and the first write open gives them the id.
//!
//! Reading commands open the file read-only ([`Db::open_read_only`]). A database left in WAL
//! mode (by a writer that was killed, or by an older tilegen) in a read-only directory is read
//! from its main file alone (SQLite's `immutable`), which is exact there: without a WAL file
//! beside it, the main file holds everything.

use std::collections::HashSet;
use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rusqlite::types::{FromSql, FromSqlError, FromSqlResult, ToSql, ToSqlOutput, ValueRef};
use rusqlite::{
    Connection, ErrorCode, OpenFlags, OptionalExtension, Transaction, TransactionBehavior, params,
};
use serde::{Deserialize, Serialize};
use tilegen_kernels::{SPEC_FORMAT, SpecValues};
use tilegen_output::{Output, OutputError};

use crate::eval::{By, Detail};
use crate::template::Shape;

/// Why the database failed.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    /// SQLite failed.
    #[error("tuning database {}", path.display())]
    Sqlite {
        /// The file.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file could not be inspected.
    #[error("{action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a tuning database; nothing was written to it.
    #[error("{} is not a tilegen tuning database ({why}); it was left unchanged", path.display())]
    NotOurs {
        /// The file.
        path: PathBuf,
        /// What gave it away.
        why: NotOurs,
    },
    /// The file is a tuning database of another format version.
    #[error("{} is a tilegen tuning database of format {}; this build reads {FORMAT}", path.display(), found.as_deref().unwrap_or("(none)"))]
    Format {
        /// The file.
        path: PathBuf,
        /// The format it claims.
        found: Option<String>,
    },
    /// The file stores its specs in a newer form than this build reads: its rows may hold knobs
    /// this build does not know.
    #[error(
        "{} stores kernel specs in spec format {found}; this build reads spec formats up to {SPEC_FORMAT}",
        path.display()
    )]
    SpecFormat {
        /// The file.
        path: PathBuf,
        /// The `spec_format` row of its `meta` table.
        found: String,
    },
    /// A row holds a value no evaluation can produce.
    #[error("tuning database {}: {table} row {row}: {column} {rule}", path.display())]
    Value {
        /// The file.
        path: PathBuf,
        /// `results` or `history` (or `record` for a row being written).
        table: &'static str,
        /// The row's uid (or its rowid when the uid cannot be read).
        row: String,
        /// The column.
        column: &'static str,
        /// The rule the value breaks.
        rule: String,
    },
    /// A stored spec could not be read back.
    #[error("tuning database {}: row {id} holds a spec that cannot be read", path.display())]
    Spec {
        /// The file.
        path: PathBuf,
        /// The row.
        id: String,
        /// The JSON error.
        #[source]
        source: serde_json::Error,
    },
    /// A database opened read-only was asked to write.
    #[error("tuning database {} is open read-only", .0.display())]
    ReadOnly(PathBuf),
    /// A merge input does not exist.
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
    /// The merged database could not be written.
    #[error("writing the merged database")]
    Output(#[from] OutputError),
    /// Stopped by the cancel flag; the output was not created.
    #[error("interrupted; {} was not created", .0.display())]
    Interrupted(PathBuf),
}

/// What shows a file is not a tuning database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotOurs {
    /// Not a regular file (a directory, pipe or device).
    NotAFile,
    /// Not an SQLite database at all.
    NotSqlite,
    /// Empty: nothing has been written to it (refused where a database must already exist).
    Empty,
    /// An SQLite database that another application marked as its own.
    Application(u32),
    /// An SQLite database whose schema is not a tuning database's.
    Schema(String),
}

impl std::fmt::Display for NotOurs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NotOurs::NotAFile => write!(f, "it is not a regular file"),
            NotOurs::NotSqlite => write!(f, "it is not an SQLite database"),
            NotOurs::Empty => write!(f, "it is empty"),
            NotOurs::Application(id) => write!(
                f,
                "its SQLite application id is {id:#010x}, not tilegen's {APPLICATION_ID:#010x}"
            ),
            NotOurs::Schema(s) => write!(f, "{s}"),
        }
    }
}

/// How long a connection waits for another process's lock before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(120);

fn is_busy(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}

/// Format version of the schema.
pub const FORMAT: &str = "tilegen-tune-db 1";

/// SQLite `application_id` of a tuning database: "TGDB" in ASCII. Set in the file's header
/// when it is initialised, so a file is told apart from another application's before anything
/// is written to it.
pub const APPLICATION_ID: u32 = 0x5447_4442;

/// How long a claim of another machine's sweep holds without being renewed (a claim of this
/// machine's holds exactly as long as its process runs).
pub const CLAIM_LEASE: Duration = Duration::from_secs(600);

/// Whether an evaluation produced a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured.
    Ok,
    /// Compile or launch failed; `reason` says why.
    Failed,
}

impl Status {
    /// The word stored in the database.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Failed => "failed",
        }
    }
}

/// A stored word this build does not know: the rule a `status` or `source` cell breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("= `{}` is {}", found.escape_debug(), one_of(expected))]
pub struct UnknownWord {
    /// The stored text.
    pub found: String,
    /// The words the column may hold.
    pub expected: Vec<&'static str>,
}

/// `neither a nor b`, or `none of a, b, c`.
fn one_of(words: &[&str]) -> String {
    match words {
        [a, b] => format!("neither {a} nor {b}"),
        _ => format!("none of {}", words.join(", ")),
    }
}

/// A column holding one of a fixed set of words; the words are the stored text, so a
/// database reads the same whatever the Rust names become.
trait Word: Copy + 'static {
    /// Every value, in the order an error lists them.
    const ALL: &'static [Self];
    /// The stored word.
    fn word(self) -> &'static str;
}

impl Word for Status {
    const ALL: &'static [Status] = &[Status::Ok, Status::Failed];
    fn word(self) -> &'static str {
        self.as_str()
    }
}

impl Word for By {
    const ALL: &'static [By] = &[By::Model, By::Device];
    fn word(self) -> &'static str {
        self.as_str()
    }
}

/// The value whose word `text` is.
fn from_word<T: Word>(text: &str) -> Result<T, UnknownWord> {
    T::ALL
        .iter()
        .copied()
        .find(|v| v.word() == text)
        .ok_or_else(|| UnknownWord {
            found: text.to_string(),
            expected: T::ALL.iter().map(|v| v.word()).collect(),
        })
}

fn word_result<T: Word>(value: ValueRef<'_>) -> FromSqlResult<T> {
    from_word(value.as_str()?).map_err(|e| FromSqlError::Other(Box::new(e)))
}

impl ToSql for Status {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.word()))
    }
}

impl FromSql for Status {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        word_result(value)
    }
}

impl ToSql for By {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.word()))
    }
}

impl FromSql for By {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        word_result(value)
    }
}

/// What a row's time was measured or modelled on (the `device` column).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DeviceName {
    /// The MI355X timing model.
    TimingModel,
    /// A device, by the name it reports (the emulator's, or an HSA agent's).
    Named(String),
}

impl DeviceName {
    /// The text the database, packs and reports hold.
    pub fn as_str(&self) -> &str {
        match self {
            DeviceName::TimingModel => "MI355X timing model",
            DeviceName::Named(n) => n,
        }
    }
}

impl From<&str> for DeviceName {
    fn from(text: &str) -> Self {
        if text == DeviceName::TimingModel.as_str() {
            DeviceName::TimingModel
        } else {
            DeviceName::Named(text.to_string())
        }
    }
}

impl std::fmt::Display for DeviceName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for DeviceName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for DeviceName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(DeviceName::from(String::deserialize(d)?.as_str()))
    }
}

impl ToSql for DeviceName {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::from(self.as_str()))
    }
}

impl FromSql for DeviceName {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        Ok(DeviceName::from(value.as_str()?))
    }
}

/// Why a `detail` cell is not a detail this build writes.
#[derive(Debug, thiserror::Error)]
#[error("holds JSON that is neither the timing model's detail, a device's, nor empty")]
pub struct UnknownDetail(#[source] serde_json::Error);

impl ToSql for Detail {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        let text = serde_json::to_string(self)
            .map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?;
        Ok(ToSqlOutput::from(text))
    }
}

impl FromSql for Detail {
    fn column_result(value: ValueRef<'_>) -> FromSqlResult<Self> {
        serde_json::from_str(value.as_str()?)
            .map_err(|e| FromSqlError::Other(Box::new(UnknownDetail(e))))
    }
}

/// A row's detail as its JSON text, so a row serializes as it did when the column was text.
mod detail_text {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::eval::Detail;

    pub fn serialize<S: Serializer>(d: &Detail, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&serde_json::to_string(d).map_err(serde::ser::Error::custom)?)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Detail, D::Error> {
        serde_json::from_str(&String::deserialize(d)?).map_err(D::Error::custom)
    }
}

/// One recorded evaluation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// Unique id of this record (history key).
    pub uid: String,
    /// Target (`gfx950`).
    pub gfx: String,
    /// CUs of the GPU measured or modelled.
    pub cus: u32,
    /// M.
    pub m: u32,
    /// N.
    pub n: u32,
    /// K.
    pub k: u32,
    /// The spec's cache key.
    pub cache_key: String,
    /// Kernel symbol name.
    pub kernel: String,
    /// The spec.
    pub spec: SpecValues,
    /// Ok or failed.
    pub status: Status,
    /// Why it failed.
    pub reason: Option<String>,
    /// Time per launch, µs.
    pub us: Option<f64>,
    /// TFLOP/s (2 M N K / time).
    pub tflops: Option<f64>,
    /// GB/s of the minimum traffic (A, B, scales, C) over the time.
    pub gbs: Option<f64>,
    /// Model or device.
    pub source: By,
    /// The device's name (or the timing model).
    pub device: DeviceName,
    /// Timed launches.
    pub repeats: u32,
    /// Relative spread of the repeats.
    pub spread: f64,
    /// tilegen version.
    pub tilegen_version: String,
    /// LLVM version.
    pub llvm_version: String,
    /// Compile time of the spec, ms (when compiled in this evaluation's job).
    pub compile_ms: Option<f64>,
    /// Seconds since the Unix epoch.
    pub created: f64,
    /// Source-specific detail (stored as JSON).
    #[serde(with = "detail_text")]
    pub detail: Detail,
}

impl Row {
    /// The shape.
    pub fn shape(&self) -> Shape {
        Shape {
            m: self.m,
            n: self.n,
            k: self.k,
        }
    }

    /// Checks the values an evaluation can produce: positive sizes, a finite positive time on
    /// a measured row, finite non-negative rates and durations. Returns the column and the
    /// rule it breaks. Rows are checked when written and when read, so a report, a merge or a
    /// pack never works from an impossible number.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.uid.is_empty() {
            return Err(("uid", "is empty".into()));
        }
        for (column, v) in [
            ("cus", self.cus),
            ("m", self.m),
            ("n", self.n),
            ("k", self.k),
        ] {
            if v == 0 {
                return Err((column, "= 0 must be positive".into()));
            }
        }
        match self.us {
            Some(us) if !(us.is_finite() && us > 0.0) => {
                return Err((
                    "us",
                    format!("= {} is not a time (finite and positive µs)", number(us)),
                ));
            }
            None if self.status == Status::Ok => {
                return Err(("us", "is missing on a measured row".into()));
            }
            _ => {}
        }
        let optional = [
            ("tflops", self.tflops),
            ("gbs", self.gbs),
            ("compile_ms", self.compile_ms),
        ];
        let required = [
            ("spread", Some(self.spread)),
            ("created", Some(self.created)),
        ];
        for (column, v) in optional.into_iter().chain(required) {
            if let Some(v) = v
                && !(v.is_finite() && v >= 0.0)
            {
                return Err((
                    column,
                    format!("= {} must be finite and not negative", number(v)),
                ));
            }
        }
        Ok(())
    }
}

/// A number as a message shows it: plain when moderate, in exponent form when huge or tiny.
fn number(v: f64) -> String {
    if v == 0.0 || (v.is_finite() && (1e-4..1e9).contains(&v.abs())) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

/// The key a sweep resumes by.
pub type DoneKey = (u32, u32, u32, String);

/// What a merge did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MergeStats {
    /// History rows read from the inputs.
    pub read: u64,
    /// History rows new to the output.
    pub added: u64,
    /// `results` rows inserted or replaced by a better one.
    pub improved: u64,
}

/// A sweep holding claims: which run it is, and how another process tells whether it still
/// runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimant {
    /// Unique per sweep run (two sweeps in one process are two claimants).
    pub token: String,
    /// The machine's host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// The process's start time (clock ticks after boot), which tells a reused process id
    /// apart; empty where the process table cannot be read.
    pub started: String,
}

impl Claimant {
    /// This process, for the run named `token`.
    pub fn this_process(token: &str) -> Claimant {
        let pid = std::process::id();
        Claimant {
            token: token.to_string(),
            host: host_name(),
            pid,
            started: process_start(pid).unwrap_or_default(),
        }
    }

    /// Whether the claim `(host, pid, started, heartbeat)` still holds, seen from here at
    /// `now` (seconds since the epoch).
    fn sees_alive(&self, host: &str, pid: i64, started: &str, heartbeat: f64, now: f64) -> bool {
        if host == self.host && !self.started.is_empty() {
            // This machine: the process table says whether the claimant still runs, so a
            // sweep killed with SIGKILL gives its work back at once.
            return u32::try_from(pid)
                .ok()
                .and_then(process_start)
                .is_some_and(|s| s == started);
        }
        // Another machine: a running claimant renews its claims; a silent one has stopped.
        heartbeat.is_finite() && (now - heartbeat).abs() < CLAIM_LEASE.as_secs_f64()
    }
}

/// The host name (empty when unknown).
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// The start time of process `pid` from the process table, or `None` when no such process
/// runs (a zombie has stopped running).
fn process_start(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ... starttime ...`: comm may hold spaces and parentheses, so the
    // fields are counted from the last `)`; starttime is field 22, state field 3.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    match fields.first() {
        Some(&"Z") | Some(&"X") | Some(&"x") | None => None,
        _ => fields.get(19).map(|s| s.to_string()),
    }
}

/// The shapes of one spec a claim asked for, sorted by who has them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claimed {
    /// Claimed by the caller: its to evaluate.
    pub mine: Vec<Shape>,
    /// Already in `results`.
    pub done: Vec<Shape>,
    /// Held by another running sweep.
    pub elsewhere: Vec<Shape>,
}

/// The target and source a sweep's claims and results are keyed by.
#[derive(Debug, Clone, Copy)]
pub struct WorkKey<'a> {
    /// `gfx950`.
    pub gfx: &'a str,
    /// CUs.
    pub cus: u32,
    /// Model or device.
    pub source: By,
    /// The spec's cache key.
    pub cache_key: &'a str,
}

/// An open tuning database.
pub struct Db {
    conn: Connection,
    path: PathBuf,
    writable: bool,
}

/// Columns of `results` and `history`, in the order rows are read and written.
const ROW_COLUMNS: [&str; 23] = [
    "uid",
    "gfx",
    "cus",
    "m",
    "n",
    "k",
    "cache_key",
    "kernel",
    "spec",
    "status",
    "reason",
    "us",
    "tflops",
    "gbs",
    "source",
    "device",
    "repeats",
    "spread",
    "tilegen_version",
    "llvm_version",
    "compile_ms",
    "created",
    "detail",
];

/// Columns of `claims`.
const CLAIM_COLUMNS: [&str; 12] = [
    "gfx",
    "cus",
    "m",
    "n",
    "k",
    "cache_key",
    "source",
    "owner",
    "host",
    "pid",
    "started",
    "heartbeat",
];

/// The tables of a tuning database; `claims` came later and is added on a write open.
const TABLES: [(&str, &[&str], bool); 4] = [
    ("meta", &["key", "value"], true),
    ("results", &ROW_COLUMNS, true),
    ("history", &ROW_COLUMNS, true),
    ("claims", &CLAIM_COLUMNS, false),
];

/// The key of `results` and `claims`.
const KEY: &str = "gfx, cus, m, n, k, cache_key, source";

fn columns() -> String {
    ROW_COLUMNS.join(", ")
}

fn table_sql(name: &str, unique: &str) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {name} (
            uid TEXT NOT NULL, gfx TEXT NOT NULL, cus INTEGER NOT NULL,
            m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
            cache_key TEXT NOT NULL, kernel TEXT NOT NULL, spec TEXT NOT NULL,
            status TEXT NOT NULL, reason TEXT, us REAL, tflops REAL, gbs REAL,
            source TEXT NOT NULL, device TEXT NOT NULL, repeats INTEGER NOT NULL, spread REAL NOT NULL,
            tilegen_version TEXT NOT NULL, llvm_version TEXT NOT NULL, compile_ms REAL,
            created REAL NOT NULL, detail TEXT NOT NULL,
            UNIQUE ({unique}));"
    )
}

fn claims_sql() -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS claims (
            gfx TEXT NOT NULL, cus INTEGER NOT NULL,
            m INTEGER NOT NULL, n INTEGER NOT NULL, k INTEGER NOT NULL,
            cache_key TEXT NOT NULL, source TEXT NOT NULL,
            owner TEXT NOT NULL, host TEXT NOT NULL, pid INTEGER NOT NULL, started TEXT NOT NULL,
            heartbeat REAL NOT NULL,
            UNIQUE ({KEY}));"
    )
}

/// What the first bytes of a file say.
enum Header {
    /// Zero bytes.
    Empty,
    /// An SQLite database with this application id in its header.
    Sqlite { application_id: u32 },
}

/// Reads the SQLite header of `path` without SQLite: a foreign file is refused from these
/// bytes alone, before any connection could create a journal beside it.
fn read_header(path: &Path) -> Result<Header, DbError> {
    let io = |action, source| DbError::Io {
        action,
        path: path.to_path_buf(),
        source,
    };
    let meta = std::fs::metadata(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => DbError::Missing(path.to_path_buf()),
        _ => io("inspecting", e),
    })?;
    if !meta.is_file() {
        // A pipe would block the read below; a directory or device is no database.
        return Err(not_ours(path, NotOurs::NotAFile));
    }
    let mut head = Vec::with_capacity(100);
    File::open(path)
        .and_then(|f| f.take(100).read_to_end(&mut head))
        .map_err(|e| io("reading", e))?;
    if head.is_empty() {
        return Ok(Header::Empty);
    }
    // The header: a 16-byte magic string; the application id is big-endian at offset 68.
    if head.len() < 100 || !head.starts_with(b"SQLite format 3\0") {
        return Err(not_ours(path, NotOurs::NotSqlite));
    }
    let application_id = u32::from_be_bytes([head[68], head[69], head[70], head[71]]);
    Ok(Header::Sqlite { application_id })
}

fn not_ours(path: &Path, why: NotOurs) -> DbError {
    DbError::NotOurs {
        path: path.to_path_buf(),
        why,
    }
}

/// The WAL file SQLite keeps beside `path` while a connection has it open in WAL mode.
fn wal_of(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push("-wal");
    PathBuf::from(s)
}

/// Opens `path` read-only as SQLite's `immutable`: the main file alone, without locks, and
/// nothing created beside it.
fn open_immutable(path: &Path) -> rusqlite::Result<Connection> {
    let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
    let mut uri = String::from("file://");
    // A URI path percent-encodes every byte but the unreserved ones and `/`.
    for &b in abs.as_os_str().as_encoded_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            uri.push(char::from(b));
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?mode=ro&immutable=1");
    Connection::open_with_flags(
        uri,
        OpenFlags::SQLITE_OPEN_READ_ONLY
            | OpenFlags::SQLITE_OPEN_URI
            | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
}

/// What a connection's schema says the file is.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Found {
    /// No schema at all: a new file (the caller may initialise it).
    Empty,
    /// Ours: `application_id` is 0 for a database written before the id existed.
    Ours { application_id: u32, claims: bool },
    /// Ours by its id, of another format version.
    OtherFormat(Option<String>),
    /// Not ours.
    Foreign(NotOurs),
}

/// Recognises the database on `conn` by its application id and schema. Reads only.
fn inspect(conn: &Connection) -> rusqlite::Result<Found> {
    let id: i64 = conn.pragma_query_value(None, "application_id", |r| r.get(0))?;
    // SQLite reports the 32-bit field as a signed integer.
    let application_id = id as i32 as u32;
    if application_id != 0 && application_id != APPLICATION_ID {
        return Ok(Found::Foreign(NotOurs::Application(application_id)));
    }
    let mut st = conn.prepare("SELECT type, name, tbl_name FROM sqlite_master")?;
    let objects: Vec<(String, String, String)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?
        .collect::<Result<_, _>>()?;
    // SQLite's own tables (sqlite_sequence, sqlite_stat1, autoindexes) say nothing.
    let objects: Vec<_> = objects
        .into_iter()
        .filter(|(_, name, _)| !name.to_ascii_lowercase().starts_with("sqlite_"))
        .collect();
    if objects.is_empty() {
        let user_version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        return Ok(if user_version == 0 {
            Found::Empty
        } else {
            Found::Foreign(NotOurs::Schema(format!(
                "it has no tables but user_version {user_version}"
            )))
        });
    }
    let known = |name: &str| TABLES.iter().any(|(t, _, _)| t.eq_ignore_ascii_case(name));
    let schema = |s: String| Ok(Found::Foreign(NotOurs::Schema(s)));
    let has_meta = objects
        .iter()
        .any(|(ty, name, _)| ty == "table" && name.eq_ignore_ascii_case("meta"));
    // A later format of ours says so, whatever its tables are.
    if application_id == APPLICATION_ID
        && has_meta
        && let Some(found) = format_row(conn)?
        && found != FORMAT
    {
        return Ok(Found::OtherFormat(Some(found)));
    }
    for (ty, name, table) in &objects {
        match ty.as_str() {
            "table" if known(name) => {}
            "index" if known(table) => {}
            "table" => return schema(format!("it has a table `{name}`")),
            other => return schema(format!("it has a {other} `{name}`")),
        }
    }
    let mut claims = false;
    for (table, expected, required) in TABLES {
        let present = objects
            .iter()
            .any(|(ty, name, _)| ty == "table" && name.eq_ignore_ascii_case(table));
        if !present {
            if required {
                return schema(format!("it has no `{table}` table"));
            }
            continue;
        }
        claims |= table == "claims";
        let mut st = conn.prepare(&format!("PRAGMA table_info({table})"))?;
        let mut found: Vec<String> = st
            .query_map([], |r| r.get::<_, String>(1))?
            .map(|c| c.map(|c| c.to_ascii_lowercase()))
            .collect::<Result<_, _>>()?;
        found.sort();
        let mut want: Vec<&str> = expected.to_vec();
        want.sort();
        if found != want {
            return schema(format!(
                "its `{table}` table has the columns {}",
                found.join(", ")
            ));
        }
    }
    let found = format_row(conn)?;
    if found.as_deref() != Some(FORMAT) {
        return Ok(match application_id {
            0 => Found::Foreign(NotOurs::Schema(format!(
                "its meta table holds the format {}, not {FORMAT}",
                found.as_deref().unwrap_or("(none)")
            ))),
            _ => Found::OtherFormat(found),
        });
    }
    Ok(Found::Ours {
        application_id,
        claims,
    })
}

/// The spec format the file's rows are stored in: its `meta` table's `spec_format` row (a file
/// from before the row existed holds format 1), or the refusal of one newer than this build's.
fn spec_format(conn: &Connection, path: &Path) -> Result<u32, DbError> {
    let found: Option<String> = conn
        .query_row(
            "SELECT CAST(value AS TEXT) FROM meta WHERE key = 'spec_format'",
            [],
            |r| r.get(0),
        )
        .optional()
        .map_err(|source| DbError::Sqlite {
            path: path.to_path_buf(),
            source,
        })?;
    let Some(found) = found else {
        return Ok(1);
    };
    match found.parse::<u32>() {
        Ok(v) if v <= SPEC_FORMAT => Ok(v),
        _ => Err(DbError::SpecFormat {
            path: path.to_path_buf(),
            found,
        }),
    }
}

/// The `format` row of `meta`, whatever its type; `None` also when `meta` has no such columns.
fn format_row(conn: &Connection) -> rusqlite::Result<Option<String>> {
    let Ok(mut st) = conn.prepare("SELECT value FROM meta WHERE key = 'format'") else {
        return Ok(None);
    };
    let mut rows = st.query([])?;
    let Some(r) = rows.next()? else {
        return Ok(None);
    };
    Ok(Some(match r.get_ref(0)? {
        ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned(),
        ValueRef::Null => "NULL".into(),
        ValueRef::Integer(i) => i.to_string(),
        ValueRef::Real(x) => number(x),
        ValueRef::Blob(_) => "a blob".into(),
    }))
}

impl Db {
    /// Opens the database at `path` for writing, creating it when missing. The file is
    /// recognised first ([`DbError::NotOurs`] leaves a foreign file untouched); a new or
    /// empty file is initialised.
    pub fn open(path: impl AsRef<Path>) -> Result<Db, DbError> {
        Db::open_with(path.as_ref(), true)
    }

    /// [`Db::open`]; without `wal`, the connection keeps its journal in memory, so a file
    /// that only this process sees (a merge being built) never has a file beside it.
    fn open_with(path: &Path, wal: bool) -> Result<Db, DbError> {
        let path = path.to_path_buf();
        let e = |source| DbError::Sqlite {
            path: path.clone(),
            source,
        };
        match read_header(&path) {
            Err(DbError::Missing(_)) | Ok(Header::Empty) => {}
            Err(other) => return Err(other),
            Ok(Header::Sqlite { application_id }) => {
                if application_id != 0 && application_id != APPLICATION_ID {
                    return Err(not_ours(&path, NotOurs::Application(application_id)));
                }
                if application_id == 0 {
                    // Without our id, the schema decides, read where nothing can be changed.
                    match look_without_writing(&path)? {
                        Found::Foreign(why) => return Err(not_ours(&path, why)),
                        Found::OtherFormat(found) => return Err(DbError::Format { path, found }),
                        Found::Empty | Found::Ours { .. } => {}
                    }
                }
            }
        }
        let conn = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_CREATE
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(e)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(e)?;
        if !wal {
            conn.pragma_update(None, "journal_mode", "MEMORY")
                .map_err(e)?;
        }
        let db = Db {
            conn,
            path,
            writable: true,
        };
        // Processes opening one new file at once race to create the tables and to switch it to
        // WAL. SQLite answers some of those races with SQLITE_BUSY without calling the busy
        // handler (where waiting could deadlock, or while another connection recovers the WAL),
        // so the whole setup is retried until the same timeout.
        let deadline = Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(2);
        loop {
            match db.setup(wal) {
                Err(DbError::Sqlite { source, .. })
                    if is_busy(&source) && Instant::now() < deadline =>
                {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(100));
                }
                other => return other.map(|()| db),
            }
        }
    }

    /// Opens an existing database for writing, refusing a missing file.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Db, DbError> {
        let path = path.as_ref();
        if std::fs::symlink_metadata(path).is_err() {
            return Err(DbError::Missing(path.to_path_buf()));
        }
        Db::open(path)
    }

    /// Opens an existing database read-only: nothing is written to the file, and a database
    /// in a read-only directory (or a read-only file) is read all the same.
    pub fn open_read_only(path: impl AsRef<Path>) -> Result<Db, DbError> {
        let path = path.as_ref().to_path_buf();
        let e = |source| DbError::Sqlite {
            path: path.clone(),
            source,
        };
        match read_header(&path)? {
            Header::Empty => return Err(not_ours(&path, NotOurs::Empty)),
            Header::Sqlite { application_id } => {
                if application_id != 0 && application_id != APPLICATION_ID {
                    return Err(not_ours(&path, NotOurs::Application(application_id)));
                }
                if application_id == 0 {
                    match look_without_writing(&path)? {
                        Found::Foreign(why) => return Err(not_ours(&path, why)),
                        Found::OtherFormat(found) => return Err(DbError::Format { path, found }),
                        Found::Empty | Found::Ours { .. } => {}
                    }
                }
            }
        }
        // Ours (or still to be told by its WAL): read it sharing the locks of its writers.
        let shared = Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .and_then(|c| {
            c.busy_timeout(BUSY_TIMEOUT)?;
            let found = inspect(&c)?;
            Ok((c, found))
        });
        let (conn, found) = match shared {
            Ok(x) => x,
            // SQLite cannot make the WAL index beside a database in a read-only directory.
            // There no writer can have a WAL either, so the main file alone is the database.
            Err(err)
                if matches!(
                    err.sqlite_error_code(),
                    Some(ErrorCode::ReadOnly | ErrorCode::CannotOpen)
                ) && !wal_of(&path).exists() =>
            {
                let c = open_immutable(&path).map_err(e)?;
                let found = inspect(&c).map_err(e)?;
                (c, found)
            }
            Err(err) => return Err(e(err)),
        };
        match found {
            Found::Ours { .. } => {
                spec_format(&conn, &path)?;
                Ok(Db {
                    conn,
                    path,
                    writable: false,
                })
            }
            Found::Empty => Err(not_ours(&path, NotOurs::Empty)),
            Found::Foreign(why) => Err(not_ours(&path, why)),
            Found::OtherFormat(found) => Err(DbError::Format { path, found }),
        }
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> DbError + '_ {
        |source| DbError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn writable(&self) -> Result<(), DbError> {
        if self.writable {
            Ok(())
        } else {
            Err(DbError::ReadOnly(self.path.clone()))
        }
    }

    /// Recognises the file under a write lock, then initialises it (new or empty), gives an
    /// old database the application id and the claims table, and switches it to WAL.
    fn setup(&self, wal: bool) -> Result<(), DbError> {
        let e = self.err();
        // IMMEDIATE takes the write lock before reading, so the schema cannot change between
        // the check and the writes; a refusal rolls back having written nothing.
        let tx =
            Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate).map_err(&e)?;
        match inspect(&tx).map_err(&e)? {
            Found::Empty => {
                tx.pragma_update(None, "application_id", APPLICATION_ID as i32)
                    .map_err(&e)?;
                tx.execute_batch(&format!(
                    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
                     INSERT OR IGNORE INTO meta VALUES ('format', '{FORMAT}');
                     INSERT OR IGNORE INTO meta VALUES ('spec_format', '{SPEC_FORMAT}');
                     {}
                     {}
                     {}",
                    table_sql("results", KEY),
                    table_sql("history", "uid"),
                    claims_sql(),
                ))
                .map_err(&e)?;
            }
            Found::Ours {
                application_id,
                claims,
            } => {
                if application_id == 0 {
                    tx.pragma_update(None, "application_id", APPLICATION_ID as i32)
                        .map_err(&e)?;
                }
                if !claims {
                    tx.execute_batch(&claims_sql()).map_err(&e)?;
                }
                // Rows this build writes are in its spec format: an older file is marked so.
                if spec_format(&tx, &self.path)? < SPEC_FORMAT {
                    tx.execute(
                        "INSERT OR REPLACE INTO meta VALUES ('spec_format', ?1)",
                        [SPEC_FORMAT.to_string()],
                    )
                    .map_err(&e)?;
                }
            }
            Found::OtherFormat(found) => {
                return Err(DbError::Format {
                    path: self.path.clone(),
                    found,
                });
            }
            Found::Foreign(why) => return Err(not_ours(&self.path, why)),
        }
        tx.commit().map_err(&e)?;
        if !wal {
            return Ok(());
        }
        let mode: String = self
            .conn
            .pragma_query_value(None, "journal_mode", |r| r.get(0))
            .map_err(&e)?;
        if !mode.eq_ignore_ascii_case("wal") {
            // WAL lets readers and one writer proceed together; writers queue on the busy timeout.
            self.conn
                .pragma_update(None, "journal_mode", "WAL")
                .map_err(&e)?;
        }
        self.conn
            .pragma_update(None, "synchronous", "NORMAL")
            .map_err(&e)?;
        Ok(())
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keys (M, N, K, cache key) already in `results` for this target and source.
    pub fn done(&self, gfx: &str, cus: u32, source: By) -> Result<HashSet<DoneKey>, DbError> {
        let e = self.err();
        let mut st = self
            .conn
            .prepare("SELECT m, n, k, cache_key, rowid FROM results WHERE gfx = ?1 AND cus = ?2 AND source = ?3")
            .map_err(&e)?;
        let mut rows = st.query(params![gfx, cus, source]).map_err(&e)?;
        let mut done = HashSet::new();
        while let Some(r) = rows.next().map_err(&e)? {
            let row = Cells {
                row: r,
                path: &self.path,
                table: "results",
                id: format!("rowid {}", r.get::<_, i64>(4).map_err(&e)?),
            };
            done.insert((
                row.size(0, "m")?,
                row.size(1, "n")?,
                row.size(2, "k")?,
                row.text(3, "cache_key")?,
            ));
        }
        Ok(done)
    }

    /// Records `rows` in one transaction: all of them or none. Their claims are released.
    pub fn record(&mut self, rows: &[Row]) -> Result<u64, DbError> {
        self.writable()?;
        for r in rows {
            r.check().map_err(|(column, rule)| DbError::Value {
                path: self.path.clone(),
                table: "record",
                row: r.uid.clone(),
                column,
                rule,
            })?;
        }
        let path = self.path.clone();
        let e = move |source| DbError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&e)?;
        let mut improved = 0;
        for r in rows {
            insert(&tx, "history", r, false).map_err(&e)?;
            improved += insert(&tx, "results", r, true).map_err(&e)?;
            tx.prepare_cached(&format!(
                "DELETE FROM claims WHERE ({KEY}) = (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
            ))
            .and_then(|mut st| {
                st.execute(params![r.gfx, r.cus, r.m, r.n, r.k, r.cache_key, r.source])
            })
            .map_err(&e)?;
        }
        tx.commit().map_err(e)?;
        Ok(improved)
    }

    /// Claims the pairs of `work` on `shapes` for `who`: a pair already in `results` is done,
    /// one held by another running sweep is left to it, and every other pair (new, or held by
    /// a sweep that has stopped) becomes the caller's. One transaction, so two sweeps never
    /// both get a pair.
    pub fn claim(
        &mut self,
        who: &Claimant,
        work: WorkKey<'_>,
        shapes: &[Shape],
    ) -> Result<Claimed, DbError> {
        self.writable()?;
        let path = self.path.clone();
        let e = move |source| DbError::Sqlite {
            path: path.clone(),
            source,
        };
        let now = now();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&e)?;
        let mut out = Claimed::default();
        for &shape in shapes {
            let key = params![
                work.gfx,
                work.cus,
                shape.m,
                shape.n,
                shape.k,
                work.cache_key,
                work.source
            ];
            let done = tx
                .prepare_cached(&format!(
                    "SELECT 1 FROM results WHERE ({KEY}) = (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                ))
                .and_then(|mut st| st.exists(key))
                .map_err(&e)?;
            if done {
                out.done.push(shape);
                continue;
            }
            let held = tx
                .prepare_cached(&format!(
                    "SELECT owner, host, pid, started, heartbeat FROM claims WHERE ({KEY}) = (?1, ?2, ?3, ?4, ?5, ?6, ?7)"
                ))
                .and_then(|mut st| {
                    let mut rows = st.query(key)?;
                    let Some(r) = rows.next()? else {
                        return Ok(false);
                    };
                    // A claim whose values cannot be read holds nothing.
                    let text = |i| match r.get_ref(i) {
                        Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
                        _ => String::new(),
                    };
                    let pid = match r.get_ref(2)? {
                        ValueRef::Integer(p) => p,
                        _ => -1,
                    };
                    let heartbeat = match r.get_ref(4)? {
                        ValueRef::Real(x) => x,
                        ValueRef::Integer(i) => i as f64,
                        _ => f64::NAN,
                    };
                    Ok(text(0) != who.token
                        && who.sees_alive(&text(1), pid, &text(3), heartbeat, now))
                })
                .map_err(&e)?;
            if held {
                out.elsewhere.push(shape);
                continue;
            }
            tx.prepare_cached(&format!(
                "INSERT INTO claims ({KEY}, owner, host, pid, started, heartbeat)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)
                 ON CONFLICT ({KEY}) DO UPDATE SET owner = excluded.owner, host = excluded.host,
                    pid = excluded.pid, started = excluded.started, heartbeat = excluded.heartbeat"
            ))
            .and_then(|mut st| {
                st.execute(params![
                    work.gfx,
                    work.cus,
                    shape.m,
                    shape.n,
                    shape.k,
                    work.cache_key,
                    work.source,
                    who.token,
                    who.host,
                    who.pid,
                    who.started,
                    now
                ])
            })
            .map_err(&e)?;
            out.mine.push(shape);
        }
        tx.commit().map_err(e)?;
        Ok(out)
    }

    /// Renews `who`'s claims (for sweeps on other machines, which cannot see its process).
    pub fn renew(&mut self, who: &Claimant) -> Result<(), DbError> {
        self.writable()?;
        let e = self.err();
        self.conn
            .execute(
                "UPDATE claims SET heartbeat = ?1 WHERE owner = ?2",
                params![now(), who.token],
            )
            .map_err(e)?;
        Ok(())
    }

    /// Gives back every claim of `who` (its sweep ends); returns how many there were.
    pub fn release(&mut self, who: &Claimant) -> Result<u64, DbError> {
        self.writable()?;
        let e = self.err();
        let n = self
            .conn
            .execute("DELETE FROM claims WHERE owner = ?1", params![who.token])
            .map_err(e)?;
        Ok(n as u64)
    }

    /// Calls `f` with every row of `table` (checked), in report order.
    fn each(
        &self,
        table: &'static str,
        mut f: impl FnMut(Row) -> Result<(), DbError>,
    ) -> Result<(), DbError> {
        let e = self.err();
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {}, rowid FROM {table} ORDER BY n, k, m, source, us IS NULL, us, cache_key, created",
                columns()
            ))
            .map_err(&e)?;
        let mut rows = st.query([]).map_err(&e)?;
        while let Some(r) = rows.next().map_err(&e)? {
            f(read_row(r, table, &self.path)?)?;
        }
        Ok(())
    }

    fn read(&self, table: &'static str) -> Result<Vec<Row>, DbError> {
        let mut out = Vec::new();
        self.each(table, |r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    /// Every `results` row, ordered by N, K, M, source, then time (failures last). A row
    /// holding a value no evaluation produces is refused with [`DbError::Value`].
    pub fn results(&self) -> Result<Vec<Row>, DbError> {
        self.read("results")
    }

    /// Every `history` row.
    pub fn history(&self) -> Result<Vec<Row>, DbError> {
        self.read("history")
    }

    /// Rows in `results` and in `history`.
    pub fn counts(&self) -> Result<(u64, u64), DbError> {
        let e = self.err();
        let n = |t: &str| {
            self.conn
                .query_row(&format!("SELECT COUNT(*) FROM {t}"), [], |r| {
                    r.get::<_, i64>(0)
                })
                .map(|c| c.max(0) as u64)
                .map_err(&e)
        };
        Ok((n("results")?, n("history")?))
    }

    /// Merges the databases `inputs` into this one: every history row not yet here is added;
    /// a `results` row replaces ours when it is better. Idempotent. Every input is recognised
    /// before anything is written, and the merge is one transaction: an input that fails
    /// (a missing file, a foreign one, an impossible row) leaves this database as it was.
    pub fn merge(&mut self, inputs: &[PathBuf]) -> Result<MergeStats, DbError> {
        self.merge_checked(inputs, &AtomicBool::new(false))
    }

    fn merge_checked(
        &mut self,
        inputs: &[PathBuf],
        cancel: &AtomicBool,
    ) -> Result<MergeStats, DbError> {
        self.writable()?;
        let ours = file_id(&self.path);
        let mut sources = Vec::new();
        for input in inputs {
            if file_id(input).is_some() && file_id(input) == ours {
                continue;
            }
            sources.push(Db::open_read_only(input)?);
        }
        let mut stats = MergeStats::default();
        let path = self.path.clone();
        let e = move |source| DbError::Sqlite {
            path: path.clone(),
            source,
        };
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(&e)?;
        let seen = std::cell::Cell::new(0u64);
        let stop = || {
            // Polled every thousand rows: a large merge stops soon after an interrupt.
            seen.set(seen.get() + 1);
            if seen.get() % 1024 == 1 && cancel.load(Ordering::Relaxed) {
                Err(DbError::Interrupted(self.path.clone()))
            } else {
                Ok(())
            }
        };
        for other in &sources {
            other.each("history", |r| {
                stop()?;
                stats.read += 1;
                stats.added += insert(&tx, "history", &r, false).map_err(&e)?;
                Ok(())
            })?;
            other.each("results", |r| {
                stop()?;
                stats.improved += insert(&tx, "results", &r, true).map_err(&e)?;
                Ok(())
            })?;
        }
        tx.commit().map_err(e)?;
        Ok(stats)
    }

    /// Writes `rows` as CSV in the shape of AITER's tuned-GEMM tables.
    pub fn csv(rows: &[Row]) -> String {
        let mut s = String::from(
            "gfx,cu_num,M,N,K,kernelName,cache_key,us,tflops,bw,source,repeats,spread,status,spec\n",
        );
        // Text fields are quoted when they hold a separator, a quote or a line break, so a
        // database's strings cannot add columns or rows.
        let q = |t: &str| {
            if t.contains([',', '"', '\n', '\r']) {
                format!("\"{}\"", t.replace('"', "\"\""))
            } else {
                t.to_string()
            }
        };
        for r in rows {
            // Unknown (empty) unless finite; exponent form where fixed point would be unreadable.
            let f = |v: Option<f64>| match v {
                Some(x) if x == 0.0 || (x.is_finite() && (1e-4..1e12).contains(&x.abs())) => {
                    format!("{x:.4}")
                }
                Some(x) if x.is_finite() => format!("{x:e}"),
                _ => String::new(),
            };
            s += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{},{},\"{}\"\n",
                q(&r.gfx),
                r.cus,
                r.m,
                r.n,
                r.k,
                q(&r.kernel),
                q(&r.cache_key),
                f(r.us),
                f(r.tflops),
                f(r.gbs),
                r.source.as_str(),
                r.repeats,
                f(Some(r.spread)),
                r.status.as_str(),
                serde_json::to_string(&r.spec)
                    .unwrap_or_default()
                    .replace('"', "\"\""),
            );
        }
        s
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        if self.writable {
            // The last writer to close leaves the file in rollback mode: complete in itself
            // (safe to copy), and readable without the WAL files a read-only connection would
            // otherwise create beside it. With others still connected this fails at once
            // (no busy wait) and the WAL stays for them.
            let _ = self.conn.busy_timeout(Duration::ZERO);
            let _ = self.conn.pragma_update(None, "journal_mode", "DELETE");
        }
    }
}

/// The file's identity (device, inode), which symlinks and hard links share.
fn file_id(path: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// Recognises a file without our application id, changing nothing: the main file is read
/// through an immutable connection, and only when it shows no schema while a WAL beside it
/// may hold one (a database in use, written before the id existed) is a shared read-only
/// connection opened.
fn look_without_writing(path: &Path) -> Result<Found, DbError> {
    let e = |source| DbError::Sqlite {
        path: path.to_path_buf(),
        source,
    };
    let main = open_immutable(path).and_then(|c| inspect(&c));
    let found = match main {
        Ok(f) => f,
        // Bytes after a valid header that SQLite cannot read: not a database of ours.
        Err(err) if matches!(err.sqlite_error_code(), Some(ErrorCode::NotADatabase)) => {
            return Ok(Found::Foreign(NotOurs::NotSqlite));
        }
        Err(err) if matches!(err.sqlite_error_code(), Some(ErrorCode::DatabaseCorrupt)) => {
            return Ok(Found::Foreign(NotOurs::Schema(format!(
                "SQLite cannot read it: {err}"
            ))));
        }
        Err(err) => return Err(e(err)),
    };
    if found == Found::Empty && wal_of(path).exists() {
        let c = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(e)?;
        c.busy_timeout(BUSY_TIMEOUT).map_err(e)?;
        return inspect(&c).map_err(e);
    }
    Ok(found)
}

/// What [`merge_into`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Merged {
    /// Rows read, added and improved.
    #[serde(flatten)]
    pub stats: MergeStats,
    /// Rows in `results` afterwards.
    pub results: u64,
    /// Rows in `history` afterwards.
    pub history: u64,
    /// Whether the output was created (rather than merged into).
    pub created: bool,
}

/// Merges `inputs` into the database `output`, after reading every input through and
/// checking every row. An existing database is merged into in one transaction. A new output is built in a temporary
/// file beside it and renamed into place only when the merge succeeded, so a failed or
/// interrupted merge (`cancel` raised) leaves no output behind.
pub fn merge_into(
    output: &Path,
    inputs: &[PathBuf],
    cancel: &AtomicBool,
) -> Result<Merged, DbError> {
    // Every input is read through once, every row checked, before the output is touched.
    for input in inputs {
        if file_id(input).is_some() && file_id(input) == file_id(output) {
            continue;
        }
        let db = Db::open_read_only(input)?;
        for table in ["history", "results"] {
            db.each(table, |_| Ok(()))?;
        }
    }
    let exists = std::fs::metadata(output).is_ok_and(|m| !m.is_file() || m.len() > 0);
    if exists {
        let mut db = Db::open(output)?;
        let stats = db.merge_checked(inputs, cancel)?;
        let (results, history) = db.counts()?;
        return Ok(Merged {
            stats,
            results,
            history,
            created: false,
        });
    }
    let out = Output::check(output)?;
    let temp = TempDb::new(&out)?;
    let mut db = Db::open_with(&temp.path, false)?;
    let stats = db.merge_checked(inputs, cancel).map_err(|e| match e {
        DbError::Interrupted(_) => DbError::Interrupted(output.to_path_buf()),
        e => e,
    })?;
    let (results, history) = db.counts()?;
    // Closed before the rename: every byte is in the file, and no connection follows it.
    drop(db);
    if cancel.load(Ordering::Relaxed) {
        return Err(DbError::Interrupted(output.to_path_buf()));
    }
    temp.commit(&out)?;
    Ok(Merged {
        stats,
        results,
        history,
        created: true,
    })
}

/// A database being built beside its output: removed (with any journal SQLite left) unless
/// committed.
struct TempDb {
    path: PathBuf,
    done: bool,
}

impl TempDb {
    fn new(out: &Output) -> Result<TempDb, DbError> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let target = out.target();
        let dir = match target.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let stem: String = target
            .file_name()
            .map(|n| n.to_string_lossy().chars().take(64).collect())
            .unwrap_or_default();
        loop {
            // The naming of tilegen-output's temporary files, so one pattern finds leftovers.
            let path = dir.join(format!(
                ".{stem}.{}-db{}.tilegen-tmp",
                std::process::id(),
                SERIAL.fetch_add(1, Ordering::Relaxed)
            ));
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&path)
            {
                Ok(_) => return Ok(TempDb { path, done: false }),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(DbError::Io {
                        action: "creating a temporary file for",
                        path: out.path().to_path_buf(),
                        source,
                    });
                }
            }
        }
    }

    /// Syncs the file and renames it over the output.
    fn commit(mut self, out: &Output) -> Result<(), DbError> {
        let io = |action, source| DbError::Io {
            action,
            path: out.path().to_path_buf(),
            source,
        };
        File::open(&self.path)
            .and_then(|f| f.sync_all())
            .map_err(|e| io("syncing", e))?;
        std::fs::rename(&self.path, out.target()).map_err(|e| io("renaming onto", e))?;
        self.done = true;
        if let Some(dir) = out.target().parent()
            && let Ok(d) = File::open(if dir.as_os_str().is_empty() {
                Path::new(".")
            } else {
                dir
            })
        {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        if !self.done {
            for suffix in ["", "-wal", "-shm", "-journal"] {
                let mut p = self.path.as_os_str().to_owned();
                p.push(suffix);
                let _ = std::fs::remove_file(PathBuf::from(p));
            }
        }
    }
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// One row's cells, read with the column named in any error.
struct Cells<'a, 'r> {
    row: &'a rusqlite::Row<'r>,
    path: &'a Path,
    table: &'static str,
    id: String,
}

impl Cells<'_, '_> {
    fn bad(&self, column: &'static str, rule: impl Into<String>) -> DbError {
        DbError::Value {
            path: self.path.to_path_buf(),
            table: self.table,
            row: self.id.clone(),
            column,
            rule: rule.into(),
        }
    }

    fn get(&self, i: usize, column: &'static str) -> Result<ValueRef<'_>, DbError> {
        self.row
            .get_ref(i)
            .map_err(|_| self.bad(column, "cannot be read"))
    }

    fn kind(v: &ValueRef<'_>) -> &'static str {
        match v {
            ValueRef::Null => "nothing (NULL)",
            ValueRef::Integer(_) => "an integer",
            ValueRef::Real(_) => "a real number",
            ValueRef::Text(_) => "text",
            ValueRef::Blob(_) => "a blob",
        }
    }

    fn opt_text(&self, i: usize, column: &'static str) -> Result<Option<String>, DbError> {
        match self.get(i, column)? {
            ValueRef::Null => Ok(None),
            ValueRef::Text(t) => std::str::from_utf8(t)
                .map(|s| Some(s.to_string()))
                .map_err(|_| self.bad(column, "is not UTF-8 text")),
            v => Err(self.bad(column, format!("holds {}, not text", Self::kind(&v)))),
        }
    }

    fn text(&self, i: usize, column: &'static str) -> Result<String, DbError> {
        self.opt_text(i, column)?
            .ok_or_else(|| self.bad(column, "is missing"))
    }

    /// A size or count: an integer from 0 to 2^32 - 1.
    fn int(&self, i: usize, column: &'static str) -> Result<u32, DbError> {
        match self.get(i, column)? {
            ValueRef::Integer(v) => u32::try_from(v).map_err(|_| {
                self.bad(
                    column,
                    format!("= {v} is outside 0 to {} (a 32-bit size)", u32::MAX),
                )
            }),
            v => Err(self.bad(column, format!("holds {}, not an integer", Self::kind(&v)))),
        }
    }

    fn size(&self, i: usize, column: &'static str) -> Result<u32, DbError> {
        match self.int(i, column)? {
            0 => Err(self.bad(column, "= 0 must be positive")),
            v => Ok(v),
        }
    }

    fn opt_real(&self, i: usize, column: &'static str) -> Result<Option<f64>, DbError> {
        match self.get(i, column)? {
            ValueRef::Null => Ok(None),
            ValueRef::Real(x) => Ok(Some(x)),
            ValueRef::Integer(v) => Ok(Some(v as f64)),
            v => Err(self.bad(column, format!("holds {}, not a number", Self::kind(&v)))),
        }
    }

    fn real(&self, i: usize, column: &'static str) -> Result<f64, DbError> {
        self.opt_real(i, column)?
            .ok_or_else(|| self.bad(column, "is missing"))
    }

    /// A text column read through its type's [`FromSql`], which names the rule a value this
    /// build does not know breaks.
    fn typed<T: FromSql>(&self, i: usize, column: &'static str) -> Result<T, DbError> {
        let text = self.text(i, column)?;
        T::column_result(ValueRef::Text(text.as_bytes())).map_err(|e| match e {
            FromSqlError::Other(why) => self.bad(column, why.to_string()),
            _ => self.bad(column, "cannot be read"),
        })
    }
}

/// Reads and checks one row of `SELECT {ROW_COLUMNS}, rowid`.
fn read_row(r: &rusqlite::Row<'_>, table: &'static str, path: &Path) -> Result<Row, DbError> {
    let rowid = match r.get_ref(ROW_COLUMNS.len()) {
        Ok(ValueRef::Integer(i)) => i.to_string(),
        _ => "?".into(),
    };
    let mut c = Cells {
        row: r,
        path,
        table,
        id: format!("rowid {rowid}"),
    };
    let uid = c.text(0, "uid")?;
    c.id = uid.clone();
    let spec_text = c.text(8, "spec")?;
    let status = c.typed(9, "status")?;
    let spec = serde_json::from_str(&spec_text).map_err(|source| DbError::Spec {
        path: path.to_path_buf(),
        id: uid.clone(),
        source,
    })?;
    let row = Row {
        uid,
        gfx: c.text(1, "gfx")?,
        cus: c.size(2, "cus")?,
        m: c.size(3, "m")?,
        n: c.size(4, "n")?,
        k: c.size(5, "k")?,
        cache_key: c.text(6, "cache_key")?,
        kernel: c.text(7, "kernel")?,
        spec,
        status,
        reason: c.opt_text(10, "reason")?,
        us: c.opt_real(11, "us")?,
        tflops: c.opt_real(12, "tflops")?,
        gbs: c.opt_real(13, "gbs")?,
        source: c.typed(14, "source")?,
        device: c.typed(15, "device")?,
        repeats: c.int(16, "repeats")?,
        spread: c.real(17, "spread")?,
        tilegen_version: c.text(18, "tilegen_version")?,
        llvm_version: c.text(19, "llvm_version")?,
        compile_ms: c.opt_real(20, "compile_ms")?,
        created: c.real(21, "created")?,
        detail: c.typed(22, "detail")?,
    };
    row.check().map_err(|(column, rule)| c.bad(column, rule))?;
    Ok(row)
}

/// Inserts `r` into `table`; in `results` (`upsert`), replaces the existing row of the same
/// key only when `r` is better. Returns 1 when a row was written.
fn insert(
    tx: &rusqlite::Transaction<'_>,
    table: &str,
    r: &Row,
    upsert: bool,
) -> rusqlite::Result<u64> {
    let conflict = if upsert {
        // A measurement beats a failure; between measurements the shorter time wins; equal
        // rows keep the first (idempotent merges).
        format!(
            " ON CONFLICT ({KEY}) DO UPDATE SET
            uid = excluded.uid, kernel = excluded.kernel, spec = excluded.spec,
            status = excluded.status, reason = excluded.reason, us = excluded.us,
            tflops = excluded.tflops, gbs = excluded.gbs, device = excluded.device,
            repeats = excluded.repeats, spread = excluded.spread,
            tilegen_version = excluded.tilegen_version, llvm_version = excluded.llvm_version,
            compile_ms = excluded.compile_ms, created = excluded.created, detail = excluded.detail
          WHERE (results.status != '{ok}' AND excluded.status = '{ok}')
             OR (results.status = '{ok}' AND excluded.status = '{ok}' AND excluded.us < results.us)",
            ok = Status::Ok.word()
        )
    } else {
        " ON CONFLICT (uid) DO NOTHING".to_string()
    };
    let sql = format!(
        "INSERT INTO {table} ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23){conflict}",
        columns()
    );
    let spec = serde_json::to_string(&r.spec).unwrap_or_default();
    let n = tx.prepare_cached(&sql)?.execute(params![
        r.uid,
        r.gfx,
        r.cus,
        r.m,
        r.n,
        r.k,
        r.cache_key,
        r.kernel,
        spec,
        r.status,
        r.reason,
        r.us,
        r.tflops,
        r.gbs,
        r.source,
        r.device,
        r.repeats,
        r.spread,
        r.tilegen_version,
        r.llvm_version,
        r.compile_ms,
        r.created,
        r.detail,
    ])?;
    Ok(n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::os::unix::fs::PermissionsExt;
    use tilegen_kernels::KernelSpec;

    fn row(uid: &str, m: u32, us: Option<f64>) -> Row {
        let spec = KernelSpec::preb();
        Row {
            uid: uid.into(),
            gfx: "gfx950".into(),
            cus: 256,
            m,
            n: 256,
            k: 512,
            cache_key: spec.cache_key(),
            kernel: spec.kernel_name(),
            spec: spec.values().clone(),
            status: if us.is_some() {
                Status::Ok
            } else {
                Status::Failed
            },
            reason: us.is_none().then(|| "compile: boom".to_string()),
            us,
            tflops: us.map(|t| 2.0 * f64::from(m) * 256.0 * 512.0 / t / 1e6),
            gbs: us.map(|_| 1.0),
            source: By::Model,
            device: DeviceName::TimingModel,
            repeats: 1,
            spread: 0.0,
            tilegen_version: "0.1.0".into(),
            llvm_version: "22.1.0".into(),
            compile_ms: Some(10.0),
            created: 1.0,
            detail: Detail::Empty {},
        }
    }

    /// Every file of `dir` (names and a hash of the bytes), to show nothing was written or
    /// created.
    fn snapshot(dir: &Path) -> BTreeMap<String, String> {
        use sha2::Digest;
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| {
                let e = e.unwrap();
                let bytes = if e.file_type().unwrap().is_file() {
                    std::fs::read(e.path()).unwrap()
                } else {
                    Vec::new()
                };
                let hash = sha2::Sha256::digest(&bytes);
                let hex: String = hash.iter().map(|b| format!("{b:02x}")).collect();
                (e.file_name().to_string_lossy().into_owned(), hex)
            })
            .collect()
    }

    /// Another application's database: its own `meta` and `results`, in rollback mode.
    fn foreign(path: &Path, wal: bool) {
        let c = Connection::open(path).unwrap();
        if wal {
            c.pragma_update(None, "journal_mode", "WAL").unwrap();
        }
        c.execute_batch(
            "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT INTO meta VALUES ('owner', 'someone else');
             CREATE TABLE results (id INTEGER PRIMARY KEY, score REAL);
             INSERT INTO results (score) VALUES (2.5);",
        )
        .unwrap();
    }

    /// A database as this project wrote it before the application id existed.
    fn legacy(path: &Path) {
        let c = Connection::open(path).unwrap();
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT OR IGNORE INTO meta VALUES ('format', '{FORMAT}');
             {}
             {}",
            table_sql("results", KEY),
            table_sql("history", "uid"),
        ))
        .unwrap();
        let tx = Transaction::new_unchecked(&c, TransactionBehavior::Immediate).unwrap();
        insert(&tx, "history", &row("old", 16, Some(5.0)), false).unwrap();
        insert(&tx, "results", &row("old", 16, Some(5.0)), true).unwrap();
        tx.commit().unwrap();
    }

    fn refused(r: Result<impl Sized, DbError>) -> NotOurs {
        match r {
            Err(DbError::NotOurs { why, .. }) => why,
            Err(e) => panic!("refused for another reason: {e}"),
            Ok(_) => panic!("accepted"),
        }
    }

    /// Each kind of file that is not a tuning database is refused by every open and by merge,
    /// as input and as output, and its directory is left byte for byte as it was.
    #[test]
    fn files_that_are_not_ours_are_refused_and_left_unchanged() {
        let root = tempfile::tempdir().unwrap();
        let good = root.path().join("good.db");
        Db::open(&good)
            .unwrap()
            .record(&[row("g", 16, Some(1.0))])
            .unwrap();
        type Make = fn(&Path);
        let cases: [(&str, Make); 9] = [
            ("foreign app", |p| foreign(p, false)),
            ("foreign app in WAL mode", |p| foreign(p, true)),
            ("foreign application id", |p| {
                let c = Connection::open(p).unwrap();
                c.pragma_update(None, "application_id", 0x0f05_5112)
                    .unwrap();
            }),
            ("no tables, a user_version", |p| {
                let c = Connection::open(p).unwrap();
                c.pragma_update(None, "user_version", 7).unwrap();
            }),
            ("our tables and one more", |p| {
                legacy(p);
                let c = Connection::open(p).unwrap();
                c.execute_batch("CREATE TABLE users (name TEXT)").unwrap();
            }),
            ("our tables, another format row", |p| {
                legacy(p);
                let c = Connection::open(p).unwrap();
                c.execute_batch("UPDATE meta SET value = 'someone-else 3'")
                    .unwrap();
            }),
            ("text", |p| std::fs::write(p, b"name,score\nx,1\n").unwrap()),
            ("an SQLite header and garbage", |p| {
                let mut b = b"SQLite format 3\0".to_vec();
                b.resize(4096, 0xa5);
                std::fs::write(p, b).unwrap();
            }),
            ("a directory", |p| std::fs::create_dir(p).unwrap()),
        ];
        for (what, make) in cases {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("app.db");
            make(&path);
            let before = snapshot(dir.path());
            let out = dir.path().join("merged.db");
            let never = AtomicBool::new(false);
            let whys = [
                refused(Db::open(&path)),
                refused(Db::open_existing(&path)),
                refused(Db::open_read_only(&path)),
                refused(merge_into(&out, std::slice::from_ref(&path), &never)),
                refused(merge_into(&path, std::slice::from_ref(&good), &never)),
                refused(Db::open(&good).unwrap().merge(std::slice::from_ref(&path))),
            ];
            assert!(whys.iter().all(|w| w == &whys[0]), "{what}: {whys:?}");
            assert_eq!(
                snapshot(dir.path()),
                before,
                "{what}: the directory changed"
            );
        }
        assert_eq!(Db::open(&good).unwrap().counts().unwrap(), (1, 1));
    }

    /// A pipe is refused without being opened (reading it would block).
    #[test]
    fn a_pipe_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.db");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .is_ok_and(|s| s.success());
        if !made {
            return;
        }
        assert_eq!(refused(Db::open_read_only(&fifo)), NotOurs::NotAFile);
        assert_eq!(refused(Db::open(&fifo)), NotOurs::NotAFile);
    }

    /// Rows as earlier builds wrote them (words and JSON text) read as typed values, and a
    /// merge copies their text unchanged.
    #[test]
    fn stored_words_and_details_read_typed_and_merge_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let (a, out) = (dir.path().join("a.db"), dir.path().join("out.db"));
        Db::open(&a)
            .unwrap()
            .record(&[
                row("model", 16, Some(2.0)),
                row("device", 32, Some(3.0)),
                row("failed", 64, None),
            ])
            .unwrap();
        let model = r#"{"bound":"mfma","cycles":1234,"hbm_gbs":512.25,"method":"rounds","mfma_busy":null,"occupancy":{"lds_bytes":65536,"limiter":"lds","sgprs":32,"vgprs":256,"waves_per_simd":2,"waves_per_workgroup":4,"workgroups_per_cu":2},"rounds":3}"#;
        let device = r#"{"device":"gfx950 emulator","times_us":[1.5,2.0,2.25]}"#;
        let c = Connection::open(&a).unwrap();
        for table in ["results", "history"] {
            c.execute(
                &format!("UPDATE {table} SET detail = ?1 WHERE m = 16"),
                [model],
            )
            .unwrap();
            c.execute(
                &format!(
                    "UPDATE {table} SET source = 'device', device = 'gfx950 emulator', detail = ?1 WHERE m = 32"
                ),
                [device],
            )
            .unwrap();
        }
        drop(c);
        let rows = Db::open_read_only(&a).unwrap().results().unwrap();
        let by_m = |m| rows.iter().find(|r| r.m == m).unwrap();
        assert!(
            matches!(&by_m(16).detail, Detail::Model(d) if d.mfma_busy.is_nan() && d.rounds == 3)
        );
        assert_eq!(
            (by_m(32).source, &by_m(32).device),
            (By::Device, &DeviceName::Named("gfx950 emulator".into()))
        );
        assert!(matches!(&by_m(32).detail, Detail::Device(d) if d.times_us.len() == 3));
        assert_eq!(
            (by_m(64).status, &by_m(64).device, &by_m(64).detail),
            (Status::Failed, &DeviceName::TimingModel, &Detail::Empty {})
        );
        Db::open(&out)
            .unwrap()
            .merge(std::slice::from_ref(&a))
            .unwrap();
        let text = |p: &Path| -> Vec<[String; 5]> {
            let c = Connection::open(p).unwrap();
            let mut st = c
                .prepare("SELECT uid, status, source, device, detail FROM results ORDER BY m")
                .unwrap();
            st.query_map([], |r| {
                Ok([r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?])
            })
            .unwrap()
            .map(Result::unwrap)
            .collect()
        };
        let stored = text(&a);
        assert_eq!(text(&out), stored);
        assert_eq!(stored[0][4], model);
        assert_eq!(stored[1][2..], ["device", "gfx950 emulator", device]);
        assert_eq!(
            stored[2][1..],
            ["failed", "model", "MI355X timing model", "{}"]
        );
    }

    /// A database from before the application id: read as it is, given the id (and the
    /// claims table) by the first write open, its rows intact.
    #[test]
    fn old_databases_are_read_and_upgraded_on_write() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("old.db");
        legacy(&path);
        let before = std::fs::read(&path).unwrap();
        let mut ro = Db::open_read_only(&path).unwrap();
        assert_eq!(ro.results().unwrap()[0].uid, "old");
        assert!(matches!(
            ro.claim(
                &Claimant::this_process("t"),
                WorkKey {
                    gfx: "gfx950",
                    cus: 256,
                    source: By::Model,
                    cache_key: "x"
                },
                &[]
            ),
            Err(DbError::ReadOnly(_))
        ));
        drop(ro);
        assert_eq!(std::fs::read(&path).unwrap(), before, "a read wrote");
        let mut db = Db::open(&path).unwrap();
        let id: i64 = db
            .conn
            .pragma_query_value(None, "application_id", |r| r.get(0))
            .unwrap();
        assert_eq!(id as u32, APPLICATION_ID);
        db.record(&[row("new", 64, Some(2.0))]).unwrap();
        assert_eq!(db.counts().unwrap(), (2, 2));
        drop(db);
        assert_eq!(Db::open_read_only(&path).unwrap().counts().unwrap(), (2, 2));
    }

    #[test]
    fn new_and_empty_files_are_initialised_only_for_writing() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::write(p("zero.db"), b"").unwrap();
        assert_eq!(refused(Db::open_read_only(p("zero.db"))), NotOurs::Empty);
        assert_eq!(std::fs::read(p("zero.db")).unwrap(), b"");
        assert!(matches!(
            Db::open_read_only(p("none.db")),
            Err(DbError::Missing(_))
        ));
        assert!(!p("none.db").exists());
        // An SQLite database with nothing in it is as good as new.
        Connection::open(p("blank.db"))
            .unwrap()
            .execute_batch("VACUUM")
            .unwrap();
        for name in ["zero.db", "none.db", "blank.db"] {
            Db::open(p(name)).unwrap();
            let head = std::fs::read(p(name)).unwrap();
            assert_eq!(head[68..72], APPLICATION_ID.to_be_bytes(), "{name}");
            assert_eq!(
                Db::open_read_only(p(name)).unwrap().counts().unwrap(),
                (0, 0)
            );
        }
    }

    #[test]
    fn another_format_of_ours_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v2.db");
        Db::open(&path).unwrap();
        Connection::open(&path)
            .unwrap()
            .execute_batch("UPDATE meta SET value = 'tilegen-tune-db 2'")
            .unwrap();
        for e in [
            Db::open(&path).err().unwrap(),
            Db::open_read_only(&path).err().unwrap(),
        ] {
            assert!(
                matches!(&e, DbError::Format { found: Some(f), .. } if f == "tilegen-tune-db 2"),
                "{e}"
            );
        }
    }

    /// Values no evaluation produces are refused when written and when read, naming the row,
    /// the column and the rule.
    #[test]
    fn impossible_values_are_refused_with_their_column() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut db = Db::open(&path).unwrap();
        for (column, bad) in [
            (
                "us",
                Row {
                    us: Some(f64::NAN),
                    ..row("a", 16, Some(1.0))
                },
            ),
            (
                "us",
                Row {
                    us: Some(-1e308),
                    ..row("a", 16, Some(1.0))
                },
            ),
            (
                "us",
                Row {
                    us: None,
                    status: Status::Ok,
                    ..row("a", 16, None)
                },
            ),
            (
                "tflops",
                Row {
                    tflops: Some(f64::INFINITY),
                    ..row("a", 16, Some(1.0))
                },
            ),
            (
                "spread",
                Row {
                    spread: -1.0,
                    ..row("a", 16, Some(1.0))
                },
            ),
            ("m", row("a", 0, Some(1.0))),
        ] {
            match db.record(&[row("fine", 32, Some(1.0)), bad]) {
                Err(DbError::Value { column: c, .. }) => assert_eq!(c, column),
                other => panic!("{column}: {other:?}"),
            }
        }
        assert_eq!(db.counts().unwrap(), (0, 0), "all of a record or none");
        db.record(&[row("r", 16, Some(1.0))]).unwrap();
        drop(db);
        for (column, sql) in [
            ("us", "UPDATE results SET us = -1e308, tflops = 1e308"),
            ("us", "UPDATE results SET us = 9e999"),
            ("m", "UPDATE results SET m = 4294967296"),
            ("m", "UPDATE results SET m = -1"),
            ("k", "UPDATE results SET k = 'many'"),
            // Text columns convert numbers to text; a blob stays a blob.
            ("reason", "UPDATE results SET reason = x'00ff'"),
            ("status", "UPDATE results SET status = 'great'"),
            ("status", "UPDATE results SET status = 'OK'"),
            ("source", "UPDATE results SET source = 'guess'"),
            ("source", "UPDATE results SET source = 1"),
            ("device", "UPDATE results SET device = x'00'"),
            ("detail", "UPDATE results SET detail = '{\"x\": 1}'"),
            ("detail", "UPDATE results SET detail = 'not json'"),
            ("gfx", "UPDATE results SET gfx = x'ff00'"),
        ] {
            let dir = tempfile::tempdir().unwrap();
            let bad = dir.path().join("bad.db");
            std::fs::copy(&path, &bad).unwrap();
            Connection::open(&bad).unwrap().execute_batch(sql).unwrap();
            let e = Db::open_read_only(&bad).unwrap().results().unwrap_err();
            assert!(
                matches!(&e, DbError::Value { column: c, row, .. } if *c == column && row == "r"),
                "{sql}: {e}"
            );
        }
        Connection::open(&path)
            .unwrap()
            .execute_batch("UPDATE results SET spec = '{not json'")
            .unwrap();
        assert!(matches!(
            Db::open_read_only(&path).unwrap().results(),
            Err(DbError::Spec { .. })
        ));
    }

    fn work(key: &str) -> WorkKey<'_> {
        WorkKey {
            gfx: "gfx950",
            cus: 256,
            source: By::Model,
            cache_key: key,
        }
    }

    /// Two sweeps never hold one pair; a recorded pair is done; the claim of a process that
    /// no longer runs, or of another machine's sweep that stopped renewing, is taken over.
    #[test]
    fn claims_split_work_and_end_with_their_claimant() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.db");
        let mut a_db = Db::open(&path).unwrap();
        let mut b_db = Db::open(&path).unwrap();
        let (a, b) = (Claimant::this_process("a"), Claimant::this_process("b"));
        let key = KernelSpec::preb().cache_key();
        let shape = |m| Shape { m, n: 256, k: 512 };
        let got = a_db.claim(&a, work(&key), &[shape(16), shape(64)]).unwrap();
        assert_eq!(got.mine, [shape(16), shape(64)]);
        // Claiming again is idempotent for the holder.
        assert_eq!(
            a_db.claim(&a, work(&key), &[shape(16)]).unwrap().mine,
            [shape(16)]
        );
        let got = b_db
            .claim(&b, work(&key), &[shape(16), shape(64), shape(128)])
            .unwrap();
        assert_eq!(
            (got.elsewhere, got.mine),
            (vec![shape(16), shape(64)], vec![shape(128)])
        );
        a_db.record(&[row("a16", 16, Some(1.0))]).unwrap();
        let got = b_db.claim(&b, work(&key), &[shape(16), shape(64)]).unwrap();
        assert_eq!(
            (got.done, got.elsewhere),
            (vec![shape(16)], vec![shape(64)])
        );
        // A released claim is free.
        assert_eq!(a_db.release(&a).unwrap(), 1);
        assert_eq!(
            b_db.claim(&b, work(&key), &[shape(64)]).unwrap().mine,
            [shape(64)]
        );

        // A process that has ended holds nothing, even where its id is reused.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead_pid = child.id();
        child.wait().unwrap();
        let dead = Claimant {
            pid: dead_pid,
            ..Claimant::this_process("dead")
        };
        let reused = Claimant {
            started: "1".into(),
            ..Claimant::this_process("reused")
        };
        let c = KernelSpec::preb().b_prefetch(true).cache_key();
        for (gone, m) in [(&dead, 16), (&reused, 64)] {
            assert_eq!(
                a_db.claim(gone, work(&c), &[shape(m)]).unwrap().mine,
                [shape(m)]
            );
            assert_eq!(
                b_db.claim(&b, work(&c), &[shape(m)]).unwrap().mine,
                [shape(m)]
            );
        }

        // Another machine's claim holds while renewed, and lapses after the lease.
        let far = Claimant {
            host: "elsewhere".into(),
            ..Claimant::this_process("far")
        };
        let d = KernelSpec::preb().bm(32).cache_key();
        assert_eq!(
            a_db.claim(&far, work(&d), &[shape(16)]).unwrap().mine,
            [shape(16)]
        );
        assert_eq!(
            b_db.claim(&b, work(&d), &[shape(16)]).unwrap().elsewhere,
            [shape(16)]
        );
        a_db.conn
            .execute(
                "UPDATE claims SET heartbeat = heartbeat - ?1 WHERE owner = 'far'",
                [CLAIM_LEASE.as_secs_f64() + 1.0],
            )
            .unwrap();
        assert_eq!(
            b_db.claim(&b, work(&d), &[shape(16)]).unwrap().elsewhere,
            []
        );
        // Renewed claims hold again.
        a_db.claim(&far, work(&d), &[shape(64)]).unwrap();
        a_db.conn
            .execute("UPDATE claims SET heartbeat = 0 WHERE owner = 'far'", [])
            .unwrap();
        a_db.renew(&far).unwrap();
        assert_eq!(
            b_db.claim(&b, work(&d), &[shape(64)]).unwrap().elsewhere,
            [shape(64)]
        );
    }

    /// A merge into a new file creates it only when every input is good; a merge into an
    /// existing database that fails leaves it as it was.
    #[test]
    fn merge_output_exists_only_after_success() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        Db::open(p("a.db"))
            .unwrap()
            .record(&[row("a", 16, Some(2.0))])
            .unwrap();
        std::fs::write(p("garbage.db"), b"not a database").unwrap();
        let never = AtomicBool::new(false);
        let files = || snapshot(dir.path());
        let before = files();
        for inputs in [
            vec![p("garbage.db")],
            vec![p("a.db"), p("garbage.db")],
            vec![p("a.db"), p("missing.db")],
        ] {
            assert!(merge_into(&p("m.db"), &inputs, &never).is_err());
            assert_eq!(files(), before, "{inputs:?}");
        }
        // An interrupted merge into a new file leaves nothing either.
        let raised = AtomicBool::new(true);
        assert!(matches!(
            merge_into(&p("m.db"), &[p("a.db")], &raised),
            Err(DbError::Interrupted(_))
        ));
        assert_eq!(files(), before);
        let m = merge_into(&p("m.db"), &[p("a.db")], &never).unwrap();
        assert_eq!((m.created, m.results, m.history), (true, 1, 1));
        // Into an existing database: a bad input anywhere changes nothing.
        Db::open(p("b.db"))
            .unwrap()
            .record(&[row("b", 64, Some(3.0))])
            .unwrap();
        Db::open(p("bad-row.db"))
            .unwrap()
            .record(&[row("x", 128, Some(3.0))])
            .unwrap();
        Connection::open(p("bad-row.db"))
            .unwrap()
            .execute_batch("UPDATE history SET us = -1")
            .unwrap();
        let kept = std::fs::read(p("m.db")).unwrap();
        for (bad, inputs) in [
            ("garbage", [p("b.db"), p("garbage.db")]),
            ("bad row", [p("b.db"), p("bad-row.db")]),
        ] {
            let e = merge_into(&p("m.db"), &inputs, &never).unwrap_err();
            assert!(
                matches!(e, DbError::NotOurs { .. } | DbError::Value { .. }),
                "{e}"
            );
            assert_eq!(std::fs::read(p("m.db")).unwrap(), kept, "{bad}");
        }
        let mut out = Db::open(p("m.db")).unwrap();
        assert_eq!(out.counts().unwrap(), (1, 1));
        drop(out);
        let m = merge_into(&p("m.db"), &[p("b.db"), p("m.db")], &never).unwrap();
        assert_eq!((m.created, m.results, m.history), (false, 2, 2));
        out = Db::open(p("m.db")).unwrap();
        assert_eq!(out.merge(&[p("a.db"), p("b.db")]).unwrap().added, 0);
    }

    /// A read-only file in a read-only directory is read (its main file alone, as no writer
    /// can have a WAL there).
    #[test]
    fn a_read_only_database_is_readable() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("ro");
        std::fs::create_dir(&sub).unwrap();
        let path = sub.join("t.db");
        Db::open(&path)
            .unwrap()
            .record(&[row("r", 16, Some(1.0))])
            .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o555)).unwrap();
        let read = Db::open_read_only(&path).and_then(|db| db.results());
        std::fs::set_permissions(&sub, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(read.unwrap().len(), 1);
    }

    /// Connections opening one new file at the same moment all get a working database.
    #[test]
    fn concurrent_opens_of_a_new_file_all_succeed() {
        let dir = tempfile::tempdir().unwrap();
        for round in 0..20 {
            let path = dir.path().join(format!("{round}.db"));
            let barrier = std::sync::Barrier::new(6);
            std::thread::scope(|s| {
                let opened: Vec<_> = (0..6)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            Db::open(&path).and_then(|db| db.counts())
                        })
                    })
                    .collect();
                for o in opened {
                    assert_eq!(o.join().unwrap().unwrap(), (0, 0));
                }
            });
        }
    }
}
