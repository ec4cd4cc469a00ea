//! The tuning database: SQLite in WAL mode, safe for many processes appending at once.
//!
//! Two tables. `results` holds one row per (gfx, CUs, M, N, K, cache key, source): the row a
//! sweep consults to resume and a pack builds from; when two rows meet (a merge), the better
//! one stays (a measurement beats a failure, a shorter time beats a longer one). `history`
//! keeps every row ever recorded, each with a unique id, so merges are idempotent and nothing
//! measured is lost.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{
    Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior, params,
};
use serde::{Deserialize, Serialize};
use tilegen_kernels::SpecValues;

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
    /// The file is not a tuning database of this format.
    #[error("{} is not a tilegen tuning database (format {found:?}; this build reads {FORMAT})", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// The format it claims.
        found: Option<String>,
    },
    /// A merge input does not exist.
    #[error("{} does not exist", .0.display())]
    Missing(PathBuf),
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

/// Whether an evaluation produced a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Measured.
    Ok,
    /// Compile or launch failed; `reason` says why.
    Failed,
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
    /// `model` or `device`.
    pub source: String,
    /// The device's name (or `MI355X timing model`).
    pub device: String,
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
    /// Source-specific detail (JSON).
    pub detail: String,
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

/// An open tuning database.
pub struct Db {
    conn: Connection,
    path: PathBuf,
}

const COLUMNS: &str = "uid, gfx, cus, m, n, k, cache_key, kernel, spec, status, reason, us, tflops, gbs, source, device, repeats, spread, tilegen_version, llvm_version, compile_ms, created, detail";

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

impl Db {
    /// Opens (creating when missing) the database at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Db, DbError> {
        let path = path.as_ref().to_path_buf();
        let e = |source| DbError::Sqlite {
            path: path.clone(),
            source,
        };
        let conn = Connection::open(&path).map_err(e)?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(e)?;
        let db = Db { conn, path };
        // Processes opening one new file at once race to switch it to WAL and to create the
        // tables. SQLite answers some of those races with SQLITE_BUSY without calling the busy
        // handler (where waiting could deadlock, or while another connection recovers the WAL),
        // so the whole setup is retried until the same timeout.
        let deadline = Instant::now() + BUSY_TIMEOUT;
        let mut pause = Duration::from_millis(2);
        loop {
            match db.setup() {
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

    /// Opens an existing database, refusing a missing file.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<Db, DbError> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(DbError::Missing(path.to_path_buf()));
        }
        Db::open(path)
    }

    fn err(&self) -> impl Fn(rusqlite::Error) -> DbError + '_ {
        |source| DbError::Sqlite {
            path: self.path.clone(),
            source,
        }
    }

    fn setup(&self) -> Result<(), DbError> {
        let e = self.err();
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
        let tx =
            Transaction::new_unchecked(&self.conn, TransactionBehavior::Immediate).map_err(&e)?;
        tx.execute_batch(&format!(
            "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
             INSERT OR IGNORE INTO meta VALUES ('format', '{FORMAT}');
             {}
             {}",
            table_sql("results", "gfx, cus, m, n, k, cache_key, source"),
            table_sql("history", "uid"),
        ))
        .map_err(&e)?;
        tx.commit().map_err(&e)?;
        let found: Option<String> = self
            .conn
            .query_row("SELECT value FROM meta WHERE key = 'format'", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(&e)?;
        if found.as_deref() != Some(FORMAT) {
            return Err(DbError::Format {
                path: self.path.clone(),
                found,
            });
        }
        Ok(())
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Keys (M, N, K, cache key) already in `results` for this target and source.
    pub fn done(&self, gfx: &str, cus: u32, source: &str) -> Result<HashSet<DoneKey>, DbError> {
        let e = self.err();
        let mut st = self
            .conn
            .prepare("SELECT m, n, k, cache_key FROM results WHERE gfx = ?1 AND cus = ?2 AND source = ?3")
            .map_err(&e)?;
        let rows = st
            .query_map(params![gfx, cus, source], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
            })
            .map_err(&e)?;
        rows.collect::<Result<_, _>>().map_err(e)
    }

    /// Records `rows` in one transaction: all of them or none.
    pub fn record(&mut self, rows: &[Row]) -> Result<u64, DbError> {
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
        }
        tx.commit().map_err(e)?;
        Ok(improved)
    }

    fn read(&self, table: &str, filter: &str) -> Result<Vec<Row>, DbError> {
        let e = self.err();
        let mut st = self
            .conn
            .prepare(&format!(
                "SELECT {COLUMNS} FROM {table} {filter} ORDER BY n, k, m, source, us IS NULL, us, cache_key, created"
            ))
            .map_err(&e)?;
        let rows = st.query_map([], from_sql).map_err(&e)?;
        let raw: Vec<(Row, String)> = rows.collect::<Result<_, _>>().map_err(&e)?;
        raw.into_iter()
            .map(|(mut row, spec)| {
                row.spec = serde_json::from_str(&spec).map_err(|source| DbError::Spec {
                    path: self.path.clone(),
                    id: row.uid.clone(),
                    source,
                })?;
                Ok(row)
            })
            .collect()
    }

    /// Every `results` row, ordered by N, K, M, source, then time (failures last).
    pub fn results(&self) -> Result<Vec<Row>, DbError> {
        self.read("results", "")
    }

    /// Every `history` row.
    pub fn history(&self) -> Result<Vec<Row>, DbError> {
        self.read("history", "")
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
    /// a `results` row replaces ours when it is better. Idempotent.
    pub fn merge(&mut self, inputs: &[PathBuf]) -> Result<MergeStats, DbError> {
        let mut stats = MergeStats::default();
        let ours = std::fs::canonicalize(&self.path).ok();
        for input in inputs {
            if !input.is_file() {
                return Err(DbError::Missing(input.clone()));
            }
            if std::fs::canonicalize(input).ok() == ours {
                continue;
            }
            let other = Db::open_existing(input)?;
            let history = other.history()?;
            let results = other.results()?;
            let path = self.path.clone();
            let e = move |source| DbError::Sqlite {
                path: path.clone(),
                source,
            };
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .map_err(&e)?;
            stats.read += history.len() as u64;
            for r in &history {
                stats.added += insert(&tx, "history", r, false).map_err(&e)?;
            }
            for r in &results {
                stats.improved += insert(&tx, "results", r, true).map_err(&e)?;
            }
            tx.commit().map_err(e)?;
        }
        Ok(stats)
    }

    /// Writes `rows` as CSV in the shape of AITER's tuned-GEMM tables.
    pub fn csv(rows: &[Row]) -> String {
        let mut s = String::from(
            "gfx,cu_num,M,N,K,kernelName,cache_key,us,tflops,bw,source,repeats,spread,status,spec\n",
        );
        let q = |t: &str| format!("\"{}\"", t.replace('"', "\"\""));
        for r in rows {
            let f = |v: Option<f64>| v.map_or(String::new(), |x| format!("{x:.4}"));
            s += &format!(
                "{},{},{},{},{},{},{},{},{},{},{},{},{:.4},{},{}\n",
                r.gfx,
                r.cus,
                r.m,
                r.n,
                r.k,
                r.kernel,
                r.cache_key,
                f(r.us),
                f(r.tflops),
                f(r.gbs),
                r.source,
                r.repeats,
                r.spread,
                match r.status {
                    Status::Ok => "ok",
                    Status::Failed => "failed",
                },
                q(&serde_json::to_string(&r.spec).unwrap_or_default()),
            );
        }
        s
    }
}

fn from_sql(r: &rusqlite::Row<'_>) -> rusqlite::Result<(Row, String)> {
    let status: String = r.get(9)?;
    let spec: String = r.get(8)?;
    Ok((
        Row {
            uid: r.get(0)?,
            gfx: r.get(1)?,
            cus: r.get(2)?,
            m: r.get(3)?,
            n: r.get(4)?,
            k: r.get(5)?,
            cache_key: r.get(6)?,
            kernel: r.get(7)?,
            spec: tilegen_kernels::KernelSpec::preb().values().clone(),
            status: if status == "ok" {
                Status::Ok
            } else {
                Status::Failed
            },
            reason: r.get(10)?,
            us: r.get(11)?,
            tflops: r.get(12)?,
            gbs: r.get(13)?,
            source: r.get(14)?,
            device: r.get(15)?,
            repeats: r.get(16)?,
            spread: r.get(17)?,
            tilegen_version: r.get(18)?,
            llvm_version: r.get(19)?,
            compile_ms: r.get(20)?,
            created: r.get(21)?,
            detail: r.get(22)?,
        },
        spec,
    ))
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
        " ON CONFLICT (gfx, cus, m, n, k, cache_key, source) DO UPDATE SET
            uid = excluded.uid, kernel = excluded.kernel, spec = excluded.spec,
            status = excluded.status, reason = excluded.reason, us = excluded.us,
            tflops = excluded.tflops, gbs = excluded.gbs, device = excluded.device,
            repeats = excluded.repeats, spread = excluded.spread,
            tilegen_version = excluded.tilegen_version, llvm_version = excluded.llvm_version,
            compile_ms = excluded.compile_ms, created = excluded.created, detail = excluded.detail
          WHERE (results.status != 'ok' AND excluded.status = 'ok')
             OR (results.status = 'ok' AND excluded.status = 'ok' AND excluded.us < results.us)"
    } else {
        " ON CONFLICT (uid) DO NOTHING"
    };
    let sql = format!(
        "INSERT INTO {table} ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, ?23){conflict}"
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
        match r.status {
            Status::Ok => "ok",
            Status::Failed => "failed",
        },
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
