//! AITER's GEMM tables: the tuned table (`a4w4_blockscale_tuned_gemm.csv`, one measured best
//! kernel per GPU and shape) and the untuned shape list.

use std::path::Path;

use serde::Deserialize;

use crate::error::AiterError;

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
        if r.cu_num == 0 || r.m == 0 || r.n == 0 || r.k == 0 {
            return Err(bad(format!(
                "cu_num, M, N and K must be positive (got {}, {}, {}, {})",
                r.cu_num, r.m, r.n, r.k
            )));
        }
        if !(r.us.is_finite() && r.us > 0.0) {
            return Err(bad(format!(
                "the time must be positive and finite, got {}",
                r.us
            )));
        }
        if r.split_k > 31 {
            return Err(bad(format!("splitK = {} is not a log2 split", r.split_k)));
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
