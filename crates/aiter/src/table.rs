//! AITER's GEMM tables: the tuned table (`a4w4_blockscale_tuned_gemm.csv`, one measured best
//! kernel per GPU and shape) and the untuned shape list; and tables of the tuned table's columns
//! written from a device's own measurements ([`TableRow::measured`], [`write_tuned`]).

use std::path::Path;

use serde::Deserialize;
use tilegen_output::Output;

use crate::error::AiterError;

/// The tuned table's columns, in AITER's order: what [`write_tuned`] writes and the reader
/// reads by name.
pub const TUNED_COLUMNS: [&str; 11] = [
    "cu_num",
    "M",
    "N",
    "K",
    "kernelId",
    "splitK",
    "us",
    "kernelName",
    "tflops",
    "bw",
    "errRatio",
];

/// TFLOP/s and GB/s of an `m x n x k` a4w4 GEMM that took `us` microseconds, as AITER's tuner
/// computes them (`base_tuner.calculate`): `2 M N K / us / 1e6`, and the bytes of packed FP4 A
/// and B (half a byte per element, scales not counted) and bf16 D over the time, each rounded
/// to two decimals.
pub fn aiter_rates(m: u32, n: u32, k: u32, us: f64) -> (f64, f64) {
    let (m, n, k) = (f64::from(m), f64::from(n), f64::from(k));
    let flops = 2.0 * m * n * k;
    let bytes = m * k / 2.0 + n * k / 2.0 + m * n * 2.0;
    (
        round_to(flops / (us * 1e6), 2),
        round_to(bytes / (us * 1e-6) / 1e9, 2),
    )
}

/// `v` rounded to `digits` decimals (Python's `round` on the values the tuner writes).
fn round_to(v: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (v * scale).round() / scale
}

/// What is wrong with a row's numbers, if anything: the rules both the reader and
/// [`TableRow::measured`] apply.
fn row_problem(cu_num: u32, m: u32, n: u32, k: u32, split_k: u32, us: f64) -> Option<String> {
    if cu_num == 0 || m == 0 || n == 0 || k == 0 {
        return Some(format!(
            "cu_num, M, N and K must be positive (got {cu_num}, {m}, {n}, {k})"
        ));
    }
    if !(us.is_finite() && us > 0.0) {
        return Some(format!("the time must be positive and finite, got {us}"));
    }
    if split_k > 31 {
        return Some(format!("splitK = {split_k} is not a log2 split"));
    }
    None
}

/// Prefix of the asm (f4gemm) kernels' symbols in the `kernelName` column; the other rows use
/// Composable Kernel instances, which are not in this corpus.
pub const ASM_KERNEL_PREFIX: &str = "_ZN5aiter";

#[derive(Debug, Deserialize)]
struct RawRow {
    cu_num: u32,
    #[serde(rename = "M")]
    m: u32,
    #[serde(rename = "N")]
    n: u32,
    #[serde(rename = "K")]
    k: u32,
    #[serde(rename = "kernelId")]
    kernel_id: i64,
    #[serde(rename = "splitK")]
    split_k: u32,
    us: f64,
    #[serde(rename = "kernelName")]
    kernel_name: String,
    tflops: f64,
    bw: f64,
    #[serde(rename = "errRatio")]
    err_ratio: f64,
}

/// One row of the tuned table: the kernel AITER's tuner picked for a shape on a GPU with
/// `cu_num` compute units, and its measured time.
#[derive(Debug, Clone, PartialEq)]
pub struct TableRow {
    table: u32,
    line: u64,
    cu_num: u32,
    m: u32,
    n: u32,
    k: u32,
    kernel_id: i64,
    log2_k_split: u32,
    us: f64,
    kernel_name: String,
    tflops: f64,
    bw: f64,
    err_ratio: f64,
}

impl TableRow {
    /// 1-based line in the CSV file (the header is line 1).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Which table the row comes from: 0 for the wheel's, `i` for the `i`-th other one read;
    /// with [`TableRow::line`] it names the row uniquely.
    pub fn table(&self) -> u32 {
        self.table
    }

    /// The row as the `table`-th table's.
    pub(crate) fn in_table(mut self, table: u32) -> TableRow {
        self.table = table;
        self
    }

    /// Compute units of the GPU measured (256: MI355X).
    pub fn cu_num(&self) -> u32 {
        self.cu_num
    }

    /// M.
    pub fn m(&self) -> u32 {
        self.m
    }

    /// N.
    pub fn n(&self) -> u32 {
        self.n
    }

    /// K.
    pub fn k(&self) -> u32 {
        self.k
    }

    /// The tuner's index of the kernel among its candidates.
    pub fn kernel_id(&self) -> i64 {
        self.kernel_id
    }

    /// The `splitK` column: log2 of the K split (AITER passes it as `log2_k_split`).
    pub fn log2_k_split(&self) -> u32 {
        self.log2_k_split
    }

    /// Measured time in microseconds.
    pub fn us(&self) -> f64 {
        self.us
    }

    /// The kernel: an f4gemm symbol, or a Composable Kernel instance name.
    pub fn kernel_name(&self) -> &str {
        &self.kernel_name
    }

    /// Whether the row uses one of the hand-written asm kernels.
    pub fn uses_asm_kernel(&self) -> bool {
        self.kernel_name.starts_with(ASM_KERNEL_PREFIX)
    }

    /// Achieved TFLOP/s as the tuner reports it (`2 M N K / us`).
    pub fn tflops(&self) -> f64 {
        self.tflops
    }

    /// Achieved bandwidth in GB/s as the tuner reports it.
    pub fn bandwidth_gbps(&self) -> f64 {
        self.bw
    }

    /// Fraction of output elements outside the tuner's tolerance.
    pub fn err_ratio(&self) -> f64 {
        self.err_ratio
    }
}

/// One kernel timed on one shape by a device, before it becomes a [`TableRow`] through
/// [`TableRow::measured`] (which checks it and computes the rates).
#[derive(Debug, Clone, PartialEq)]
pub struct MeasuredRow {
    /// Compute units of the device.
    pub cu_num: u32,
    /// M.
    pub m: u32,
    /// N.
    pub n: u32,
    /// K.
    pub k: u32,
    /// AITER's index of the kernel among its tuner's candidates (the tuned table's), or -1 for
    /// a kernel that is not one of them.
    pub kernel_id: i64,
    /// log2 of the K split.
    pub log2_k_split: u32,
    /// The time of one launch, µs.
    pub us: f64,
    /// The kernel's name (an f4gemm symbol for AITER's kernels).
    pub kernel_name: String,
    /// Fraction of the output elements checked that were outside the tolerance, 0 to 1.
    pub err_ratio: f64,
}

impl TableRow {
    /// The row of a device's measurement, as AITER's tuner writes one: the time rounded to
    /// four decimals (µs), TFLOP/s and GB/s computed from it ([`aiter_rates`]), the error ratio
    /// rounded to four decimals. Refused with [`AiterError::BadMeasurement`] when a number
    /// breaks a rule the reader applies (positive sizes, a positive finite time after
    /// rounding, a log2 split), the error ratio is not within 0 to 1, or the name is empty or
    /// has a line break. Its [`TableRow::line`] is 0 (it was not read from a file).
    pub fn measured(r: MeasuredRow) -> Result<TableRow, AiterError> {
        let us = round_to(r.us, 4);
        let bad = |problem: String| AiterError::BadMeasurement {
            kernel: r.kernel_name.clone(),
            shape: format!("{}x{}x{}", r.m, r.n, r.k),
            problem,
        };
        if let Some(problem) = row_problem(r.cu_num, r.m, r.n, r.k, r.log2_k_split, us) {
            return Err(bad(if us != r.us && r.us.is_finite() && r.us > 0.0 {
                format!("{problem} ({} us rounded to four decimals)", r.us)
            } else {
                problem
            }));
        }
        if !(0.0..=1.0).contains(&r.err_ratio) {
            return Err(bad(format!(
                "the error ratio must be within 0 and 1, got {}",
                r.err_ratio
            )));
        }
        if r.kernel_name.trim().is_empty() || r.kernel_name.contains(['\n', '\r']) {
            return Err(bad(format!(
                "the kernel name {:?} must be non-empty and on one line",
                r.kernel_name
            )));
        }
        let (tflops, bw) = aiter_rates(r.m, r.n, r.k, us);
        Ok(TableRow {
            table: 0,
            line: 0,
            cu_num: r.cu_num,
            m: r.m,
            n: r.n,
            k: r.k,
            kernel_id: r.kernel_id,
            log2_k_split: r.log2_k_split,
            us,
            kernel_name: r.kernel_name.trim().to_string(),
            tflops,
            bw,
            err_ratio: round_to(r.err_ratio, 4),
        })
    }
}

/// `rows` as the text of a tuned table: AITER's header ([`TUNED_COLUMNS`]), then one line per
/// row in the given order.
pub fn tuned_csv(rows: &[TableRow]) -> Result<String, AiterError> {
    let csv_err = |source: csv::Error| AiterError::Csv {
        path: "<tuned table>".into(),
        source,
    };
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(TUNED_COLUMNS).map_err(csv_err)?;
    for r in rows {
        w.write_record([
            r.cu_num.to_string(),
            r.m.to_string(),
            r.n.to_string(),
            r.k.to_string(),
            r.kernel_id.to_string(),
            r.log2_k_split.to_string(),
            r.us.to_string(),
            r.kernel_name.clone(),
            r.tflops.to_string(),
            r.bw.to_string(),
            r.err_ratio.to_string(),
        ])
        .map_err(csv_err)?;
    }
    let bytes = w.into_inner().map_err(|e| csv_err(e.into_error().into()))?;
    // Every field is a number or a name checked to be one line of text.
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Writes `rows` as a tuned table to `path`, atomically (a reader sees the old file or the
/// whole new one).
pub fn write_tuned(path: &Path, rows: &[TableRow]) -> Result<(), AiterError> {
    let text = tuned_csv(rows)?;
    let output = |source| AiterError::Output {
        path: path.to_path_buf(),
        source,
    };
    Output::check(path)
        .map_err(output)?
        .write(text.as_bytes())
        .map_err(output)
}

/// Reads a table of the tuned table's columns (the wheel's, or one [`write_tuned`] wrote); a
/// `gfx` column and other extra columns are ignored.
pub fn read_tuned(path: &Path) -> Result<Vec<TableRow>, AiterError> {
    parse_tuned(path)
}

fn reader(path: &Path) -> Result<csv::Reader<std::fs::File>, AiterError> {
    csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(|source| AiterError::Csv {
            path: path.to_path_buf(),
            source,
        })
}

/// Reads the tuned table.
pub(crate) fn parse_tuned(path: &Path) -> Result<Vec<TableRow>, AiterError> {
    let mut rows = Vec::new();
    for (i, record) in reader(path)?.deserialize::<RawRow>().enumerate() {
        let r = record.map_err(|source| AiterError::Csv {
            path: path.to_path_buf(),
            source,
        })?;
        let line = i as u64 + 2;
        let bad = |problem: String| AiterError::BadRow {
            path: path.to_path_buf(),
            line,
            problem,
        };
        if let Some(problem) = row_problem(r.cu_num, r.m, r.n, r.k, r.split_k, r.us) {
            return Err(bad(problem));
        }
        rows.push(TableRow {
            table: 0,
            line,
            cu_num: r.cu_num,
            m: r.m,
            n: r.n,
            k: r.k,
            kernel_id: r.kernel_id,
            log2_k_split: r.split_k,
            us: r.us,
            kernel_name: r.kernel_name,
            tflops: r.tflops,
            bw: r.bw,
            err_ratio: r.err_ratio,
        });
    }
    Ok(rows)
}

/// A GEMM shape of the untuned table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Deserialize)]
pub struct Shape {
    /// M.
    #[serde(rename = "M")]
    pub m: u32,
    /// N.
    #[serde(rename = "N")]
    pub n: u32,
    /// K.
    #[serde(rename = "K")]
    pub k: u32,
}

/// Reads the untuned shape list.
pub(crate) fn parse_untuned(path: &Path) -> Result<Vec<Shape>, AiterError> {
    reader(path)?
        .deserialize::<Shape>()
        .map(|r| {
            r.map_err(|source| AiterError::Csv {
                path: path.to_path_buf(),
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "cu_num,M,N,K,kernelId,splitK,us,kernelName,tflops,bw,errRatio\n";

    fn tuned(text: &str) -> Result<Vec<TableRow>, AiterError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, text).unwrap();
        parse_tuned(&path)
    }

    #[test]
    fn parses_rows() {
        let rows = tuned(&format!(
            "{HEADER}256,1,800,5120,29,0,8.5995,_ZN5aiter41f4gemm_bf16_per1x32Fp4_BpreShuffle_64x128E,0.95,238.64,0.0\n\
             256,1,16384,16384,0,0,49.0507,a4w4_blockscale_256x64x128x128_16x16_16x16_8x32x1_8x32x1_1x32x1x8_8_2x2_intrawave_v3,10.95,2737.14,0.0\n"
        ))
        .unwrap();
        assert_eq!(rows.len(), 2);
        let r = &rows[0];
        assert_eq!((r.cu_num(), r.m(), r.n(), r.k()), (256, 1, 800, 5120));
        assert_eq!((r.kernel_id(), r.log2_k_split(), r.line()), (29, 0, 2));
        // Rows of another table at the same line are other rows.
        assert_eq!(r.table(), 0);
        let other = r.clone().in_table(1);
        assert_eq!((other.table(), other.line()), (1, 2));
        assert_ne!(&other, r);
        assert_eq!(r.us(), 8.5995);
        assert_eq!(
            (r.tflops(), r.bandwidth_gbps(), r.err_ratio()),
            (0.95, 238.64, 0.0)
        );
        assert!(r.uses_asm_kernel());
        assert!(!rows[1].uses_asm_kernel());
        assert_eq!(rows[1].line(), 3);
    }

    #[test]
    fn refuses_bad_rows() {
        for (row, want) in [
            ("256,0,800,5120,29,0,8.5,_ZN5aiter,1,1,0", "positive"),
            ("256,1,800,5120,29,0,0,_ZN5aiter,1,1,0", "time"),
            ("256,1,800,5120,29,0,NaN,_ZN5aiter,1,1,0", "time"),
            ("256,1,800,5120,29,40,8.5,_ZN5aiter,1,1,0", "log2"),
        ] {
            let e = tuned(&format!("{HEADER}{row}\n")).unwrap_err();
            assert!(e.to_string().contains(want), "{row}: {e}");
        }
        let e = tuned(&format!("{HEADER}256,1,800\n")).unwrap_err();
        assert!(matches!(e, AiterError::Csv { .. }), "{e}");
    }

    fn measured(us: f64, err_ratio: f64, name: &str) -> MeasuredRow {
        MeasuredRow {
            cu_num: 256,
            m: 1,
            n: 800,
            k: 5120,
            kernel_id: 29,
            log2_k_split: 0,
            us,
            kernel_name: name.into(),
            err_ratio,
        }
    }

    #[test]
    fn rates_are_aiters() {
        // The wheel's first row: 1x800x5120 in 8.5995 us is 0.95 TFLOP/s and 238.64 GB/s.
        assert_eq!(aiter_rates(1, 800, 5120, 8.5995), (0.95, 238.64));
        assert_eq!(aiter_rates(1, 16384, 16384, 49.0507), (10.95, 2737.14));
    }

    #[test]
    fn measured_rows_round_trip_through_the_reader() {
        let rows = vec![
            TableRow::measured(measured(
                8.59951,
                0.0,
                "_ZN5aiter41f4gemm_bf16_per1x32Fp4_BpreShuffle_64x128E",
            ))
            .unwrap(),
            TableRow::measured(measured(12.5, 0.012499047, "mxfp4_gemm_preb_bm16, quoted"))
                .unwrap(),
        ];
        assert_eq!(rows[0].us(), 8.5995);
        assert_eq!((rows[0].tflops(), rows[0].bandwidth_gbps()), (0.95, 238.64));
        assert_eq!(rows[1].err_ratio(), 0.0125);
        let text = tuned_csv(&rows).unwrap();
        assert!(text.starts_with(HEADER), "{text}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.csv");
        write_tuned(&path, &rows).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        let back = read_tuned(&path).unwrap();
        assert_eq!(back.len(), 2);
        for (i, (a, b)) in rows.iter().zip(&back).enumerate() {
            assert_eq!(b.line(), i as u64 + 2);
            let b = TableRow {
                line: 0,
                ..b.clone()
            };
            assert_eq!(a, &b);
        }
    }

    #[test]
    fn measured_rows_refuse_what_the_reader_would() {
        for (row, want) in [
            (measured(0.0, 0.0, "k"), "time"),
            (measured(0.00004, 0.0, "k"), "rounded to four decimals"),
            (measured(f64::NAN, 0.0, "k"), "time"),
            (measured(1.0, 1.5, "k"), "error ratio"),
            (measured(1.0, f64::NAN, "k"), "error ratio"),
            (measured(1.0, 0.0, " "), "kernel name"),
            (measured(1.0, 0.0, "a\nb"), "kernel name"),
            (
                MeasuredRow {
                    m: 0,
                    ..measured(1.0, 0.0, "k")
                },
                "positive",
            ),
            (
                MeasuredRow {
                    log2_k_split: 32,
                    ..measured(1.0, 0.0, "k")
                },
                "log2",
            ),
        ] {
            let e = TableRow::measured(row.clone()).unwrap_err();
            assert!(
                matches!(e, AiterError::BadMeasurement { .. }) && e.to_string().contains(want),
                "{row:?}: {e}"
            );
        }
    }

    #[test]
    fn parses_untuned_shapes_with_spaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("u.csv");
        std::fs::write(&path, "M,N,K\n1, 16384, 16384\n32, 106496, 16384\n").unwrap();
        assert_eq!(
            parse_untuned(&path).unwrap(),
            [
                Shape {
                    m: 1,
                    n: 16384,
                    k: 16384
                },
                Shape {
                    m: 32,
                    n: 106496,
                    k: 16384
                }
            ]
        );
    }
}
