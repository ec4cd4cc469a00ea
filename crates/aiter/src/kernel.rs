//! The f4gemm kernels: AITER's index (`f4gemm_bf16_per1x32Fp4.csv`) as typed rows, and each
//! kernel's code object checked against the kernel-argument layout.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tilegen_codeobj::{CodeObject, ValueKind};

use crate::error::AiterError;
use crate::kernargs::{BLOCK, Field, KERNARG_BYTES};

/// One row of the index as AITER writes it (`tile_m,tile_n,splitK,bpreshuffle,knl_name,co_name`).
#[derive(Debug, Deserialize)]
struct IndexRow {
    tile_m: u32,
    tile_n: u32,
    #[serde(rename = "splitK")]
    split_k: u8,
    bpreshuffle: u8,
    knl_name: String,
    co_name: String,
}

/// The BpreShuffle kernels (by `(tile_m, tile_n)`) that never compare a column with N: a
/// ragged last N tile stores past N. Found running every kernel on a ragged N with a packed D
/// on the emulator and confirmed in the disassembly (the other 30 compare each wave's 32
/// columns with `Ndim` before storing; these read `Ndim` only to count tiles and bound B).
pub const UNMASKED_N_TILES: [(u32, u32); 4] = [(256, 256), (128, 512), (192, 256), (224, 256)];

/// One AITER f4gemm kernel: `D[M, N] (bf16) = A[M, K] * B[N, K]^T` over MXFP4 operands with
/// E8M0 scales per 32 K elements, one `tile_m x tile_n` tile of D per 256-work-item workgroup.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct F4GemmKernel {
    name: String,
    symbol: String,
    tile_m: u32,
    tile_n: u32,
    split_k: bool,
    bpreshuffle: bool,
    path: PathBuf,
}

impl F4GemmKernel {
    /// The code object's file stem, e.g. `f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel symbol, e.g. `_ZN5aiter42f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256E`; the
    /// tuned table's `kernelName` column holds the same string.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// Rows of D per workgroup.
    pub fn tile_m(&self) -> u32 {
        self.tile_m
    }

    /// Columns of D per workgroup.
    pub fn tile_n(&self) -> u32 {
        self.tile_n
    }

    /// `tile_m x tile_n`, e.g. `256x256`: the short name used in tables and plots.
    pub fn tile_label(&self) -> String {
        format!("{}x{}", self.tile_m, self.tile_n)
    }

    /// Whether the kernel splits K over the grid's z dimension (reading `log2_k_split`); it then
    /// adds its partial tile into D with bf16 atomics, so D must start zeroed.
    pub fn supports_split_k(&self) -> bool {
        self.split_k
    }

    /// Whether the kernel masks a ragged last N tile (N not a multiple of `tile_n`, in steps of
    /// 32 columns). All BpreShuffle kernels do except those in [`UNMASKED_N_TILES`].
    pub fn masks_ragged_n(&self) -> bool {
        !UNMASKED_N_TILES.contains(&(self.tile_m, self.tile_n))
    }

    /// Whether B and its scales are expected preshuffled (`BpreShuffle` kernels).
    pub fn bpreshuffle(&self) -> bool {
        self.bpreshuffle
    }

    /// The code object file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads and parses the code object, and checks that it holds this kernel with the
    /// argument layout of [`Field`] (a 384-byte kernarg segment; 368 without `log2_k_split` for
    /// a kernel without split-K) and 256-work-item workgroups.
    pub fn load(&self) -> Result<KernelImage, AiterError> {
        let (bytes, code_object) = read_code_object(&self.path)?;
        let bad = |problem: String| metadata_error(&self.path, &self.symbol, problem);
        let kernel = code_object.kernel(&self.symbol).ok_or_else(|| {
            bad(format!(
                "not in the code object (it has: {})",
                code_object
                    .kernels
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })?;
        let meta = &kernel.meta;
        // Kernels without split-K may end their block before `log2_k_split` (the
        // noBpreShuffle kernel declares 368 bytes); the block written is always 384.
        let shortest = if self.split_k {
            KERNARG_BYTES
        } else {
            Field::Log2KSplit.offset()
        };
        let declared = meta.kernarg_segment_size as usize;
        if !(shortest..=KERNARG_BYTES).contains(&declared) {
            return Err(bad(format!(
                "kernarg segment of {declared} bytes, expected {shortest} to {KERNARG_BYTES}"
            )));
        }
        if meta.max_flat_workgroup_size < BLOCK[0] {
            return Err(bad(format!(
                "at most {} work-items per workgroup, the kernels run {}",
                meta.max_flat_workgroup_size, BLOCK[0]
            )));
        }
        for field in Field::ALL {
            let Some(arg) = meta
                .args
                .iter()
                .find(|a| a.name.as_deref() == Some(field.metadata_name()))
            else {
                if field.offset() >= declared {
                    continue;
                }
                return Err(bad(format!("no argument named {}", field.metadata_name())));
            };
            if arg.offset as usize != field.offset() || arg.size as usize != field.size() {
                return Err(bad(format!(
                    "argument {} at offset {} ({} bytes), expected offset {} ({} bytes)",
                    field.metadata_name(),
                    arg.offset,
                    arg.size,
                    field.offset(),
                    field.size()
                )));
            }
            if field.is_pointer() != (arg.value_kind == ValueKind::GlobalBuffer) {
                return Err(bad(format!(
                    "argument {} is a {}, expected {}",
                    field.metadata_name(),
                    arg.value_kind,
                    if field.is_pointer() {
                        "global_buffer"
                    } else {
                        "by_value"
                    }
                )));
            }
        }
        Ok(KernelImage {
            lds_bytes: meta.group_segment_fixed_size,
            bytes,
        })
    }
}

/// The bytes of the code object at `path` and their parse.
pub(crate) fn read_code_object(path: &Path) -> Result<(Vec<u8>, CodeObject), AiterError> {
    let bytes = std::fs::read(path).map_err(|source| AiterError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let code_object = CodeObject::parse(&bytes).map_err(|source| AiterError::CodeObject {
        path: path.to_path_buf(),
        source,
    })?;
    Ok((bytes, code_object))
}

/// What is wrong with kernel `symbol`'s metadata in the code object at `path`.
pub(crate) fn metadata_error(path: &Path, symbol: &str, problem: String) -> AiterError {
    AiterError::KernelMetadata {
        path: path.to_path_buf(),
        symbol: symbol.to_string(),
        problem,
    }
}

/// A kernel's code object, read and checked by [`F4GemmKernel::load`].
#[derive(Debug, Clone)]
pub struct KernelImage {
    bytes: Vec<u8>,
    lds_bytes: u32,
}

impl KernelImage {
    /// The code object's bytes (what a device loads).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Static LDS per workgroup, from the metadata (the kernels use no dynamic LDS).
    pub fn lds_bytes(&self) -> u32 {
        self.lds_bytes
    }
}

/// Reads AITER's f4gemm index; each kernel's code object is `dir/<co_name>`.
pub(crate) fn parse_index(path: &Path, dir: &Path) -> Result<Vec<F4GemmKernel>, AiterError> {
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(|source| AiterError::Csv {
            path: path.to_path_buf(),
            source,
        })?;
    let mut kernels = Vec::new();
    for record in reader.deserialize::<IndexRow>() {
        let row = record.map_err(|source| AiterError::Csv {
            path: path.to_path_buf(),
            source,
        })?;
        let line = kernels.len() as u64 + 2;
        let bad = |problem: String| AiterError::BadRow {
            path: path.to_path_buf(),
            line,
            problem,
        };
        if row.tile_m == 0 || row.tile_n == 0 {
            return Err(bad(format!(
                "tile {}x{} has a zero side",
                row.tile_m, row.tile_n
            )));
        }
        let flag = |what: &str, v: u8| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad(format!("{what} = {v}, expected 0 or 1"))),
        };
        let split_k = flag("splitK", row.split_k)?;
        let bpreshuffle = flag("bpreshuffle", row.bpreshuffle)?;
        // The code object must be a plain file name inside the corpus, never a path out of it.
        let co = Path::new(&row.co_name);
        let name = match (co.file_name(), co.extension(), co.file_stem()) {
            (Some(f), Some(ext), Some(stem)) if f == co.as_os_str() && ext == "co" => {
                stem.to_string_lossy().into_owned()
            }
            _ => {
                return Err(bad(format!(
                    "co_name {:?} is not a plain `<name>.co` file name",
                    row.co_name
                )));
            }
        };
        if row.knl_name.is_empty() {
            return Err(bad("empty knl_name".into()));
        }
        kernels.push(F4GemmKernel {
            name,
            symbol: row.knl_name,
            tile_m: row.tile_m,
            tile_n: row.tile_n,
            split_k,
            bpreshuffle,
            path: dir.join(co),
        });
    }
    Ok(kernels)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A kernel for tests that never reads its code object.
    pub(crate) fn kernel(tile_m: u32, tile_n: u32, split_k: bool) -> F4GemmKernel {
        let name = format!("f4gemm_bf16_per1x32Fp4_BpreShuffle_{tile_m}x{tile_n}");
        F4GemmKernel {
            symbol: format!("_ZN5aiter{}{name}E", name.len()),
            path: PathBuf::from(format!("/nonexistent/{name}.co")),
            name,
            tile_m,
            tile_n,
            split_k,
            bpreshuffle: true,
        }
    }

    fn parse(text: &str) -> Result<Vec<F4GemmKernel>, AiterError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.csv");
        std::fs::write(&path, text).unwrap();
        parse_index(&path, Path::new("/corpus"))
    }

    const HEADER: &str = "tile_m,tile_n,splitK,bpreshuffle,knl_name,co_name\n";

    #[test]
    fn parses_rows() {
        let ks = parse(&format!(
            "{HEADER}256,256,1,1,_ZN5aiter42f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256E,f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256.co\n\
             32,128,0,1,_ZN5aiter41f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128E,f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128.co\n"
        ))
        .unwrap();
        assert_eq!(ks.len(), 2);
        assert_eq!(ks[0].name(), "f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256");
        assert_eq!(
            ks[0].symbol(),
            "_ZN5aiter42f4gemm_bf16_per1x32Fp4_BpreShuffle_256x256E"
        );
        assert!(ks[0].supports_split_k() && ks[0].bpreshuffle());
        assert!(!ks[1].supports_split_k());
        assert_eq!(ks[1].tile_label(), "32x128");
        assert_eq!(
            ks[1].path(),
            Path::new("/corpus/f4gemm_bf16_per1x32Fp4_BpreShuffle_32x128.co")
        );
    }

    #[test]
    fn refuses_bad_rows() {
        for (row, want) in [
            ("0,256,0,1,_ZN5x,a.co", "zero side"),
            ("32,128,2,1,_ZN5x,a.co", "splitK = 2"),
            ("32,128,0,7,_ZN5x,a.co", "bpreshuffle = 7"),
            ("32,128,0,1,_ZN5x,../escape.co", "plain"),
            ("32,128,0,1,_ZN5x,/abs/a.co", "plain"),
            ("32,128,0,1,_ZN5x,a.so", "plain"),
            ("32,128,0,1,,a.co", "empty knl_name"),
        ] {
            let e = parse(&format!("{HEADER}{row}\n")).unwrap_err();
            assert!(
                matches!(&e, AiterError::BadRow { line: 2, .. }) && e.to_string().contains(want),
                "{row}: {e}"
            );
        }
        let e = parse(&format!("{HEADER}x,128,0,1,_ZN5x,a.co\n")).unwrap_err();
        assert!(matches!(e, AiterError::Csv { .. }), "{e}");
        let e = parse(&format!("{HEADER}-1,128,0,1,_ZN5x,a.co\n")).unwrap_err();
        assert!(matches!(e, AiterError::Csv { .. }), "{e}");
    }

    #[test]
    fn load_reports_a_missing_file_and_a_damaged_one() {
        let e = kernel(32, 128, false).load().unwrap_err();
        assert!(matches!(e, AiterError::Io { .. }), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let mut k = kernel(32, 128, false);
        k.path = dir.path().join("damaged.co");
        std::fs::write(k.path(), b"\x7fELF not really").unwrap();
        let e = k.load().unwrap_err();
        assert!(matches!(e, AiterError::CodeObject { .. }), "{e}");
    }
}
