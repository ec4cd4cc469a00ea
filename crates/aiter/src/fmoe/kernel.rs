//! The index of the FP8 stage-1 asm kernels (`fmoe_stage1_bf16_pertokenFp8_[doweight_]g1u1`)
//! and their code objects.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use tilegen_codeobj::ValueKind;

use crate::error::AiterError;
use crate::fmoe::kernargs::{FmoeField, KERNARG_BYTES};
use crate::fmoe::{BLOCK, FmoeError, problem};
use crate::kernel::{metadata_error, read_code_object};

/// The fused-MoE 2-stage kernels' directory in the corpus.
pub const FMOE_DIR: &str = "aiter_meta/hsa/gfx950/fmoe_2stages";
/// The index of the stage-1 kernels that leave the top-k weight to stage 2.
pub const FMOE_INDEX: &str = "fmoe_stage1_bf16_pertokenFp8_g1u1.csv";
/// The index of the stage-1 kernels that multiply by the top-k weight (`doweight_stage1`).
pub const FMOE_DOWEIGHT_INDEX: &str = "fmoe_stage1_bf16_pertokenFp8_doweight_g1u1.csv";

/// One FP8 stage-1 kernel: its code object and what its name says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FmoeKernel {
    name: String,
    symbol: String,
    path: PathBuf,
    tile_m: u32,
    tile_n: u32,
    doweight: bool,
    workgroups_per_cu: Option<u32>,
    prefetch: u32,
}

// Only the four columns the index files have: any other column is a layout this reader does
// not know, and is refused rather than ignored.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IndexRow {
    tile_m: u32,
    tile_n: u32,
    knl_name: String,
    co_name: String,
}

impl FmoeKernel {
    /// The code object's file stem, e.g. `fmoe_stage1_bf16_pertokenFp8_g1u1_32x64_4tg_pf2`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kernel symbol (`_ZN5aiter...E`), as the tuned table names it.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The code object.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Rows of the sorted token list per workgroup: the launch's `block_m`.
    pub fn tile_m(&self) -> u32 {
        self.tile_m
    }

    /// Columns of the intermediate dimension per workgroup (each of gate and up).
    pub fn tile_n(&self) -> u32 {
        self.tile_n
    }

    /// Whether the kernel multiplies its output by the token's top-k weight.
    pub fn doweight(&self) -> bool {
        self.doweight
    }

    /// The `<n>tg` of the name: workgroups per CU the kernel is written for, if it says.
    pub fn workgroups_per_cu(&self) -> Option<u32> {
        self.workgroups_per_cu
    }

    /// The `pf<n>` of the name: the depth of its load pipeline.
    pub fn prefetch(&self) -> u32 {
        self.prefetch
    }

    /// `32x64`, `128x128`, ...
    pub fn tile_label(&self) -> String {
        format!("{}x{}", self.tile_m, self.tile_n)
    }

    /// Reads and parses the code object and checks that it holds this kernel with the
    /// argument layout of [`FmoeField`] (368 bytes) and 256-work-item workgroups.
    pub fn load(&self) -> Result<FmoeImage, FmoeError> {
        let (bytes, code_object) = read_code_object(&self.path)?;
        let bad = |problem: String| metadata_error(&self.path, &self.symbol, problem);
        let kernel = code_object
            .kernel(&self.symbol)
            .ok_or_else(|| bad("not in the code object".into()))?;
        let meta = &kernel.meta;
        if meta.kernarg_segment_size as usize != KERNARG_BYTES {
            return Err(bad(format!(
                "kernarg segment of {} bytes, expected {KERNARG_BYTES}",
                meta.kernarg_segment_size
            ))
            .into());
        }
        if meta.max_flat_workgroup_size < BLOCK[0] {
            return Err(bad(format!(
                "at most {} work-items per workgroup, AITER launches {}",
                meta.max_flat_workgroup_size, BLOCK[0]
            ))
            .into());
        }
        for field in FmoeField::ALL {
            let arg = meta
                .args
                .iter()
                .find(|a| a.name.as_deref() == Some(field.metadata_name()))
                .ok_or_else(|| bad(format!("no argument named {}", field.metadata_name())))?;
            let declared = (arg.size as usize, arg.value_kind == ValueKind::GlobalBuffer);
            // Every code object declares `SW` a 4-byte i32, yet the doweight kernels read it
            // with `s_load_dwordx2` as the pointer the launcher writes there: either is taken.
            let shape_ok = declared == (field.size(), field.is_pointer())
                || (field == FmoeField::SortedWeights && declared == (4, false));
            if arg.offset as usize != field.offset() || !shape_ok {
                return Err(bad(format!(
                    "argument {} at offset {} ({} bytes, {}), expected offset {} ({} bytes)",
                    field.metadata_name(),
                    arg.offset,
                    arg.size,
                    arg.value_kind,
                    field.offset(),
                    field.size()
                ))
                .into());
            }
        }
        Ok(FmoeImage {
            lds_bytes: meta.group_segment_fixed_size,
            bytes,
        })
    }
}

/// A stage-1 kernel's code object, read and checked by [`FmoeKernel::load`].
#[derive(Debug, Clone)]
pub struct FmoeImage {
    bytes: Vec<u8>,
    lds_bytes: u32,
}

impl FmoeImage {
    /// The code object's bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Static LDS per workgroup from the metadata (AITER launches with no dynamic LDS).
    pub fn lds_bytes(&self) -> u32 {
        self.lds_bytes
    }
}

/// Splits `..._g1u1_<tm>x<tn>[_<n>tg]_pf<p>` into `(tm, tn, n, p)`.
fn parse_name_tail(name: &str) -> Option<(u32, u32, Option<u32>, u32)> {
    let tail = name.rsplit_once("_g1u1_")?.1;
    let mut parts = tail.split('_');
    let (tm, tn) = parts.next()?.split_once('x')?;
    let mut next = parts.next()?;
    let tg = match next.strip_suffix("tg") {
        Some(n) => {
            let n = n.parse().ok()?;
            next = parts.next()?;
            Some(n)
        }
        None => None,
    };
    let pf = next.strip_prefix("pf")?.parse().ok()?;
    if parts.next().is_some() {
        return None;
    }
    Some((tm.parse().ok()?, tn.parse().ok()?, tg, pf))
}

/// Reads one stage-1 index; each kernel's code object is `dir/<co_name>`.
pub(crate) fn parse_index(
    path: &Path,
    dir: &Path,
    doweight: bool,
) -> Result<Vec<FmoeKernel>, FmoeError> {
    let csv_err = |source| AiterError::Csv {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_path(path)
        .map_err(csv_err)?;
    let mut kernels = Vec::new();
    for record in reader.deserialize::<IndexRow>() {
        let row = record.map_err(csv_err)?;
        let line = kernels.len() as u64 + 2;
        let bad = |problem: String| AiterError::BadRow {
            path: path.to_path_buf(),
            line,
            problem,
        };
        let co = Path::new(&row.co_name);
        let name = match (co.file_name(), co.extension(), co.file_stem()) {
            (Some(f), Some(ext), Some(stem)) if f == co.as_os_str() && ext == "co" => {
                stem.to_string_lossy().into_owned()
            }
            _ => {
                return Err(bad(format!(
                    "co_name {:?} is not a plain `<name>.co` file name",
                    row.co_name
                ))
                .into());
            }
        };
        let want_symbol = format!("_ZN5aiter{}{name}E", name.len());
        if row.knl_name != want_symbol {
            return Err(bad(format!(
                "knl_name {} is not the symbol of {name}.co ({want_symbol})",
                row.knl_name
            ))
            .into());
        }
        let Some((tm, tn, tg, pf)) = parse_name_tail(&name) else {
            return Err(bad(format!("{name}: not `..._g1u1_<tm>x<tn>[_<n>tg]_pf<p>`")).into());
        };
        if (tm, tn) != (row.tile_m, row.tile_n) || tm == 0 || tn == 0 {
            return Err(bad(format!(
                "tile {}x{} of the columns disagrees with the name's {tm}x{tn} (or is empty)",
                row.tile_m, row.tile_n
            ))
            .into());
        }
        if name.contains("_doweight_") != doweight {
            return Err(bad(format!("{name} in the wrong index")).into());
        }
        kernels.push(FmoeKernel {
            name,
            symbol: row.knl_name,
            path: dir.join(co),
            tile_m: tm,
            tile_n: tn,
            doweight,
            workgroups_per_cu: tg,
            prefetch: pf,
        });
    }
    if kernels.is_empty() {
        return Err(problem(format!("{} lists no kernel", path.display())));
    }
    Ok(kernels)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A kernel for tests that never reads its code object.
    pub(crate) fn kernel(tile_m: u32, tile_n: u32, doweight: bool) -> FmoeKernel {
        let dw = if doweight { "doweight_" } else { "" };
        let name = format!("fmoe_stage1_bf16_pertokenFp8_{dw}g1u1_{tile_m}x{tile_n}_pf2");
        FmoeKernel {
            symbol: format!("_ZN5aiter{}{name}E", name.len()),
            path: PathBuf::from(format!("/nonexistent/{name}.co")),
            name,
            tile_m,
            tile_n,
            doweight,
            workgroups_per_cu: None,
            prefetch: 2,
        }
    }

    fn parse(text: &str, doweight: bool) -> Result<Vec<FmoeKernel>, FmoeError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.csv");
        std::fs::write(&path, text).unwrap();
        parse_index(&path, Path::new("/corpus"), doweight)
    }

    const HEADER: &str = "tile_m,tile_n,knl_name,co_name\n";

    #[test]
    fn parses_names() {
        assert_eq!(
            parse_name_tail("fmoe_stage1_bf16_pertokenFp8_g1u1_32x64_4tg_pf2"),
            Some((32, 64, Some(4), 2))
        );
        assert_eq!(
            parse_name_tail("fmoe_stage1_bf16_pertokenFp8_doweight_g1u1_128x128_pf3"),
            Some((128, 128, None, 3))
        );
        assert_eq!(parse_name_tail("fmoe_stage1_g1u1_32x64_pf2_x"), None);
        assert_eq!(parse_name_tail("fmoe_stage1_g1u1_32x64"), None);
    }

    #[test]
    fn parses_rows() {
        let ks = parse(
            &format!(
                "{HEADER}32,64,_ZN5aiter47fmoe_stage1_bf16_pertokenFp8_g1u1_32x64_4tg_pf2E,fmoe_stage1_bf16_pertokenFp8_g1u1_32x64_4tg_pf2.co\n"
            ),
            false,
        )
        .unwrap();
        assert_eq!(ks.len(), 1);
        let k = &ks[0];
        assert_eq!(k.tile_label(), "32x64");
        assert_eq!((k.workgroups_per_cu(), k.prefetch()), (Some(4), 2));
        assert!(!k.doweight());
        assert_eq!(
            k.path(),
            Path::new("/corpus/fmoe_stage1_bf16_pertokenFp8_g1u1_32x64_4tg_pf2.co")
        );
    }

    #[test]
    fn refuses_bad_rows() {
        let good = "_ZN5aiter47fmoe_stage1_bf16_pertokenFp8_g1u1_32x64_4tg_pf2E,fmoe_stage1_bf16_pertokenFp8_g1u1_32x64_4tg_pf2.co";
        for (row, doweight, want) in [
            (format!("32,128,{good}"), false, "disagrees"),
            (format!("32,64,{good}"), true, "wrong index"),
            ("32,64,_ZN5x,fmoe_a.co".to_string(), false, "not the symbol"),
            ("32,64,_ZN5x,../a.co".to_string(), false, "plain"),
        ] {
            let e = parse(&format!("{HEADER}{row}\n"), doweight).unwrap_err();
            assert!(e.to_string().contains(want), "{row}: {e}");
        }
        let e = parse(
            "tile_m,tile_n,extra,knl_name,co_name\n1,2,3,a,b.co\n",
            false,
        )
        .unwrap_err();
        assert!(
            matches!(e, FmoeError::Corpus(AiterError::Csv { .. })),
            "{e}"
        );
        let e = parse(HEADER, false).unwrap_err();
        assert!(e.to_string().contains("no kernel"), "{e}");
    }
}
