//! AITER's tuned fused-MoE table (`aiter/configs/tuned_fmoe.csv`): per GPU and MoE shape, the
//! stage-1 and stage-2 kernels its tuner picked and their measured times. The rows whose
//! stage-1 kernel is one of the FP8 asm kernels indexed here ([`FmoeRow`]) are the family's
//! measurements: `us1` is that kernel alone.

use std::path::Path;

use serde::Deserialize;

use crate::error::AiterError;
use crate::fmoe::{Activation, FmoeError, FmoeKernel, FmoeLaunch, FmoeProblem};

/// The tuned fused-MoE table in the corpus.
pub const FMOE_TUNED_TABLE: &str = "aiter/configs/tuned_fmoe.csv";
/// What the FP8 stage-1 asm kernels' symbols start with in `kernelName1`.
pub const STAGE1_ASM_PREFIX: &str = "_ZN5aiter";
/// ... and contain.
pub const STAGE1_ASM_FAMILY: &str = "fmoe_stage1_bf16_pertokenFp8_";

// Only the columns this crate reads; the table's others (stage 2, totals, throughput) are not
// parsed, so a row whose trailing columns are malformed still yields its stage-1 time.
#[derive(Debug, Deserialize)]
struct RawRow {
    cu_num: u32,
    token: u32,
    model_dim: u32,
    inter_dim: u32,
    expert: u32,
    topk: u32,
    act_type: String,
    dtype: String,
    q_dtype_a: String,
    q_dtype_w: String,
    q_type: String,
    use_g1u1: u8,
    doweight_stage1: u8,
    block_m: u32,
    ksplit: u32,
    us1: f64,
    #[serde(rename = "kernelName1")]
    kernel_name1: String,
}

/// How the table's row quantised: both become per-token scales at launch (`asm_stage1`
/// repeats a per-tensor scale over the tokens and the weight rows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QuantType {
    /// `QuantType.per_Token`.
    PerToken,
    /// `QuantType.per_Tensor`.
    PerTensor,
}

/// One row of the tuned table timed with an FP8 stage-1 asm kernel on an MI355X.
#[derive(Debug, Clone, PartialEq)]
pub struct FmoeRow {
    line: u64,
    cu_num: u32,
    problem: FmoeProblem,
    quant: QuantType,
    doweight: bool,
    block_m: u32,
    us1: f64,
    symbol: String,
}

impl FmoeRow {
    /// 1-based line in the CSV (the header is line 1).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// Compute units of the GPU the row was measured on (256: MI355X).
    pub fn cu_num(&self) -> u32 {
        self.cu_num
    }

    /// The problem.
    pub fn problem(&self) -> &FmoeProblem {
        &self.problem
    }

    /// The quantisation the tuner used.
    pub fn quant(&self) -> QuantType {
        self.quant
    }

    /// Whether stage 1 applies the top-k weight.
    pub fn doweight(&self) -> bool {
        self.doweight
    }

    /// Rows per sorted block.
    pub fn block_m(&self) -> u32 {
        self.block_m
    }

    /// Measured time of the stage-1 kernel, µs.
    pub fn us(&self) -> f64 {
        self.us1
    }

    /// The stage-1 kernel's symbol.
    pub fn symbol(&self) -> &str {
        &self.symbol
    }

    /// The launch of this row's kernel among `kernels`.
    pub fn launch(&self, kernels: &[FmoeKernel]) -> Result<FmoeLaunch, FmoeError> {
        let kernel = kernels
            .iter()
            .find(|k| k.symbol() == self.symbol)
            .ok_or_else(|| FmoeError::UnknownKernel {
                line: self.line,
                symbol: self.symbol.clone(),
            })?;
        if kernel.tile_m() != self.block_m || kernel.doweight() != self.doweight {
            return Err(crate::fmoe::problem(format!(
                "tuned_fmoe.csv line {}: block_m {} / doweight {} disagree with {}",
                self.line,
                self.block_m,
                self.doweight,
                kernel.name()
            )));
        }
        FmoeLaunch::new(kernel, self.problem)
    }
}

/// Reads the table's FP8 stage-1 asm rows measured on GPUs of `cu_num` compute units.
pub fn parse_table(path: &Path, cu_num: u32) -> Result<Vec<FmoeRow>, FmoeError> {
    let csv_err = |source| AiterError::Csv {
        path: path.to_path_buf(),
        source,
    };
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .flexible(true)
        .from_path(path)
        .map_err(csv_err)?;
    let mut rows = Vec::new();
    for (i, record) in reader.deserialize::<RawRow>().enumerate() {
        let line = i as u64 + 2;
        let raw = record.map_err(csv_err)?;
        if raw.cu_num != cu_num
            || !raw.kernel_name1.starts_with(STAGE1_ASM_PREFIX)
            || !raw.kernel_name1.contains(STAGE1_ASM_FAMILY)
        {
            continue;
        }
        rows.push(row_of(raw, line).map_err(|problem| AiterError::BadRow {
            path: path.to_path_buf(),
            line,
            problem,
        })?);
    }
    Ok(rows)
}

fn row_of(raw: RawRow, line: u64) -> Result<FmoeRow, String> {
    let fp8 = "torch.float8_e4m3fn";
    if raw.q_dtype_a != fp8 || raw.q_dtype_w != fp8 || raw.dtype != "torch.bfloat16" {
        return Err(format!(
            "an FP8 stage-1 kernel with dtypes {} / {} / {}",
            raw.dtype, raw.q_dtype_a, raw.q_dtype_w
        ));
    }
    if raw.use_g1u1 != 1 {
        return Err("the stage-1 asm kernels are g1u1 only".into());
    }
    if raw.ksplit != 0 {
        return Err(format!(
            "ksplit {}: only unsplit stage-1 launches are modelled",
            raw.ksplit
        ));
    }
    let quant = match raw.q_type.as_str() {
        "QuantType.per_Token" => QuantType::PerToken,
        "QuantType.per_Tensor" => QuantType::PerTensor,
        q => return Err(format!("q_type {q}: the kernels take per-token scales")),
    };
    let activation = match raw.act_type.as_str() {
        "ActivationType.Silu" => Activation::Silu,
        "ActivationType.Gelu" => Activation::Gelu,
        a => return Err(format!("act_type {a}")),
    };
    let doweight = match raw.doweight_stage1 {
        0 => false,
        1 => true,
        v => return Err(format!("doweight_stage1 = {v}")),
    };
    if !(raw.us1.is_finite() && raw.us1 > 0.0) {
        return Err(format!("us1 = {}", raw.us1));
    }
    let problem = FmoeProblem::new(
        raw.token,
        raw.model_dim,
        raw.inter_dim,
        raw.expert,
        raw.topk,
        activation,
    )
    .map_err(|e| e.to_string())?;
    Ok(FmoeRow {
        line,
        cu_num: raw.cu_num,
        problem,
        quant,
        doweight,
        block_m: raw.block_m,
        us1: raw.us1,
        symbol: raw.kernel_name1,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fmoe::kernel::tests::kernel;

    const HEADER: &str = "cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1,block_m,ksplit,us1,kernelName1,err1,us2,kernelName2,err2,us,run_1stage,tflops,bw\n";

    fn parse(body: &str) -> Result<Vec<FmoeRow>, FmoeError> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, format!("{HEADER}{body}")).unwrap();
        parse_table(&path, 256)
    }

    fn line(cu: u32, q: &str, name: &str, tail: &str) -> String {
        format!(
            "{cu},16,7168,512,256,8,ActivationType.Gelu,torch.bfloat16,torch.float8_e4m3fn,torch.float8_e4m3fn,{q},1,1,32,0,130.25,{name},0.0%,{tail}\n"
        )
    }

    #[test]
    fn keeps_the_asm_stage1_rows_of_the_gpu() {
        let k = kernel(32, 512, true);
        let body = [
            line(256, "QuantType.per_Tensor", k.symbol(), "1,x,0%,2,0,3,4"),
            line(80, "QuantType.per_Token", k.symbol(), "1,x,0%,2,0,3,4"),
            line(
                256,
                "QuantType.per_Token",
                "moe_ck2stages_gemm1_x",
                "1,x,0%,2,0,3,4",
            ),
            line(
                256,
                "QuantType.per_Token",
                "_ZN5aiter45fmoe_bf16_pertokenFp8_g1u1_vs_gelu_1tg_32x192E",
                "1,x,0%,2,0,3,4",
            ),
            // Trailing columns shifted, as on one line of the real table: still read.
            line(256, "QuantType.per_Token", k.symbol(), "1,x,0%,0.0,419,3,4"),
        ]
        .concat();
        let rows = parse(&body).unwrap();
        assert_eq!(rows.len(), 2);
        let r = &rows[0];
        assert_eq!((r.line(), r.cu_num(), r.block_m()), (2, 256, 32));
        assert_eq!(r.quant(), QuantType::PerTensor);
        assert!(r.doweight());
        assert_eq!(r.us(), 130.25);
        assert_eq!(r.problem().activation(), Activation::Gelu);
        assert_eq!(
            (
                r.problem().tokens(),
                r.problem().model_dim(),
                r.problem().inter_dim()
            ),
            (16, 7168, 512)
        );
        let l = r.launch(std::slice::from_ref(&k)).unwrap();
        assert_eq!(l.grid(), [1, 260, 1]);
        assert!(matches!(
            r.launch(&[kernel(32, 512, false)]),
            Err(FmoeError::UnknownKernel { line: 2, .. })
        ));
        assert_eq!(rows[1].line(), 6);
    }

    #[test]
    fn refuses_rows_it_cannot_model() {
        let k = kernel(32, 512, true);
        let e = parse(&line(
            256,
            "QuantType.per_1x128",
            k.symbol(),
            "1,x,0%,2,0,3,4",
        ))
        .unwrap_err();
        assert!(e.to_string().contains("per_1x128"), "{e}");
        let bad = line(256, "QuantType.per_Token", k.symbol(), "1,x,0%,2,0,3,4")
            .replace(",1,1,32,0,", ",1,1,32,1,");
        let e = parse(&bad).unwrap_err();
        assert!(e.to_string().contains("ksplit 1"), "{e}");
    }
}
