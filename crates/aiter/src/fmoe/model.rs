//! The cycle-level MI355X timing model (`tilegen_timing::predict`) on every MI355X row of the
//! fused-MoE stage-1 family, and the error statistics of its predictions.
//!
//! Each row's real launch runs: AITER's code object, its grid (every allocated sorted block),
//! its argument block, and buffers of the row's sizes. The routing buffers hold the row's real
//! routing ([`Routing::uniform`] with a fixed seed, sorted for the row's `block_m`): they decide
//! which workgroups exit at once and which expert's weights each block streams. Activations,
//! weights and scales are lazily zeroed memory: the kernels' control flow does not read them.
//!
//! Nothing is fitted on these rows: the model's parameters are the ones calibrated on the
//! f4gemm family, so every row is held out.

use std::time::Instant;

use tilegen_codeobj::CodeObject;
use tilegen_emu::exec::{DeviceMemory, Program};
use tilegen_timing::{self as timing, Bound, Method, Params, TimingLaunch, TimingOptions};

use crate::AiterError;
use crate::calibrate::thread_cpu_seconds;
use crate::calibrate::{ErrorStats, Regime};
use crate::fmoe::{
    FmoeError, FmoeField, FmoeKernel, FmoeLaunch, FmoePointers, FmoeRow, Routing, SortedRouting,
    problem,
};

/// Seed of the routing every row is timed with.
pub const ROUTING_SEED: u64 = 0x5eed_f00d;

/// One simulation of a row: the prediction and what it cost.
#[derive(Debug, Clone, PartialEq)]
pub struct FmoeTiming {
    /// Predicted time (kernel plus launch overhead), µs.
    pub us: f64,
    /// Kernel cycles.
    pub cycles: u64,
    /// What bounds the kernel.
    pub bound: Bound,
    /// Achieved HBM bandwidth, GB/s.
    pub hbm_gbs: f64,
    /// Workgroups simulated in detail.
    pub workgroups_simulated: u64,
    /// CPU seconds the simulation took on its thread.
    pub cpu_seconds: f64,
}

/// A row with its launch, routing and predictions.
#[derive(Debug, Clone)]
pub struct FmoeRun {
    row: FmoeRow,
    launch: FmoeLaunch,
    working_workgroups: u64,
    sampled: Result<FmoeTiming, String>,
    full: Option<Result<FmoeTiming, String>>,
}

impl FmoeRun {
    /// The row.
    pub fn row(&self) -> &FmoeRow {
        &self.row
    }

    /// Its launch.
    pub fn launch(&self) -> &FmoeLaunch {
        &self.launch
    }

    /// Workgroups that do work: the grid's columns times the valid sorted blocks (the rest of
    /// the grid exits at once).
    pub fn working_workgroups(&self) -> u64 {
        self.working_workgroups
    }

    /// The sampled prediction ([`TimingOptions::default`]), or why it failed.
    pub fn sampled(&self) -> &Result<FmoeTiming, String> {
        &self.sampled
    }

    /// The full simulation ([`Method::Full`]), if it was run.
    pub fn full(&self) -> Option<&Result<FmoeTiming, String>> {
        self.full.as_ref()
    }

    /// `(predicted - measured) / measured` of the sampled prediction.
    pub fn sampled_error(&self) -> Option<f64> {
        self.sampled
            .as_ref()
            .ok()
            .map(|t| relative(t.us, self.row.us()))
    }

    /// `(predicted - measured) / measured` of the full simulation.
    pub fn full_error(&self) -> Option<f64> {
        match &self.full {
            Some(Ok(t)) => Some(relative(t.us, self.row.us())),
            _ => None,
        }
    }
}

fn relative(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured
}

/// The timing model with its parameters.
#[derive(Debug, Clone)]
pub struct FmoeModel {
    params: Params,
}

impl FmoeModel {
    /// The model with `params` (the f4gemm-calibrated `Params::mi355x()` by default).
    pub fn new(params: Params) -> FmoeModel {
        FmoeModel { params }
    }

    /// Runs `row` (its kernel among `kernels`): the sampled method always, and a full
    /// simulation too when `full` says so for the row.
    pub fn run(
        &self,
        row: &FmoeRow,
        kernels: &[FmoeKernel],
        full: bool,
    ) -> Result<FmoeRun, FmoeError> {
        let launch = row.launch(kernels)?;
        let p = *launch.problem();
        let routing = Routing::uniform(&p, ROUTING_SEED);
        let sorted = SortedRouting::new(&p, &routing, launch.block_m())?;
        let prog_bytes = launch.kernel().load()?;
        let co =
            CodeObject::parse(prog_bytes.bytes()).map_err(|source| AiterError::CodeObject {
                path: launch.kernel().path().to_path_buf(),
                source,
            })?;
        let simulate = |method: Method| {
            let options = TimingOptions {
                method,
                ..TimingOptions::default()
            };
            self.simulate(&co, &launch, &sorted, &options)
                .map_err(|e| error_chain(&e))
        };
        let sampled = simulate(Method::Rounds);
        let full = full.then(|| simulate(Method::Full));
        Ok(FmoeRun {
            row: row.clone(),
            working_workgroups: launch.grid()[0] as u64 * sorted.valid_blocks() as u64,
            launch,
            sampled,
            full,
        })
    }

    /// One simulation on a fresh device memory (the same addresses for every row and method).
    fn simulate(
        &self,
        co: &CodeObject,
        launch: &FmoeLaunch,
        sorted: &SortedRouting,
        options: &TimingOptions,
    ) -> Result<FmoeTiming, FmoeError> {
        let model = |e: Box<dyn std::error::Error + Send + Sync>| problem(error_chain(&*e));
        let start = (thread_cpu_seconds(), Instant::now());
        let mut memory = DeviceMemory::new();
        let prog = Program::load(&mut memory, co, launch.kernel().symbol())
            .map_err(|e| model(e.into()))?;
        let mut ptrs = FmoePointers::default();
        for b in launch.buffers() {
            let addr = memory.alloc_lazy(b.bytes()).map_err(|e| model(e.into()))?;
            let routing = match b.field() {
                FmoeField::ValidIds => Some(sorted.valid_ids_bytes()),
                FmoeField::SortedTokens => Some(sorted.token_ids_bytes()),
                FmoeField::SortedExperts => Some(sorted.expert_ids_bytes()),
                FmoeField::SortedWeights => Some(sorted.weights_bytes()),
                _ => None,
            };
            if let Some(bytes) = routing {
                memory.write(addr, &bytes).map_err(|e| model(e.into()))?;
            }
            ptrs.set(b.field(), addr)?;
        }
        let kernarg = launch.kernargs(&ptrs);
        let tl = TimingLaunch {
            grid: launch.grid(),
            block: launch.block(),
            dynamic_lds: 0,
            kernarg: &kernarg,
        };
        let p = timing::predict(&mut memory, &prog, &tl, &self.params, options)
            .map_err(|e| model(e.into()))?;
        let cpu_seconds = match (start.0, thread_cpu_seconds()) {
            (Some(a), Some(b)) => b - a,
            _ => start.1.elapsed().as_secs_f64(),
        };
        Ok(FmoeTiming {
            us: p.us,
            cycles: p.cycles,
            bound: p.bound,
            hbm_gbs: p.hbm_gbs,
            workgroups_simulated: p.workgroups_simulated,
            cpu_seconds,
        })
    }
}

fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(c) = source {
        s.push_str(": ");
        s.push_str(&c.to_string());
        source = c.source();
    }
    s
}

/// Whether a run is in `regime`: the workgroup regimes count the workgroups that do work
/// ([`FmoeRun::working_workgroups`]; every launched grid of the table is past 256 because it
/// covers every allocated sorted block), the duration regimes the measured time.
pub fn in_regime(run: &FmoeRun, regime: Regime) -> bool {
    regime.holds(run.working_workgroups, run.row.us())
}

/// A group of runs errors are summarised over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FmoeGroup {
    /// Every run.
    All,
    /// A launch-size or duration regime ([`in_regime`]).
    Regime(Regime),
    /// The runs of one tile (`32x512`, ...).
    Tile(String),
}

impl FmoeGroup {
    /// Every group with rows among `runs`: all, the regimes, then the tiles in order.
    pub fn of(runs: &[FmoeRun]) -> Vec<FmoeGroup> {
        let mut tiles: Vec<(u32, u32)> = runs
            .iter()
            .map(|r| (r.launch.kernel().tile_m(), r.launch.kernel().tile_n()))
            .collect();
        tiles.sort();
        tiles.dedup();
        std::iter::once(FmoeGroup::All)
            .chain(Regime::ALL.into_iter().map(FmoeGroup::Regime))
            .chain(
                tiles
                    .into_iter()
                    .map(|(m, n)| FmoeGroup::Tile(format!("{m}x{n}"))),
            )
            .collect()
    }

    /// A label for tables.
    pub fn label(&self) -> String {
        match self {
            FmoeGroup::All => "all".into(),
            FmoeGroup::Regime(r) => r.label().into(),
            FmoeGroup::Tile(t) => format!("tile {t}"),
        }
    }

    /// Whether `run` is in the group.
    pub fn contains(&self, run: &FmoeRun) -> bool {
        match self {
            FmoeGroup::All => true,
            FmoeGroup::Regime(r) => in_regime(run, *r),
            FmoeGroup::Tile(t) => run.launch.kernel().tile_label() == *t,
        }
    }

    /// The statistics of the sampled predictions (`full == false`) or of the full
    /// simulations of the runs in the group; failures count as failed, runs without a full
    /// simulation are left out of the full statistics.
    pub fn stats(&self, runs: &[FmoeRun], full: bool) -> ErrorStats {
        let mut errors = Vec::new();
        let mut failed = 0;
        for r in runs.iter().filter(|r| self.contains(r)) {
            let result = if full {
                match r.full() {
                    Some(t) => t,
                    None => continue,
                }
            } else {
                r.sampled()
            };
            match result {
                Ok(t) => errors.push(relative(t.us, r.row.us())),
                Err(_) => failed += 1,
            }
        }
        ErrorStats::new(errors, failed)
    }
}

/// The error table: per group, rows, median, p90 and signed median of the sampled method,
/// and of the full simulation where it ran.
pub fn report(runs: &[FmoeRun]) -> String {
    let pct = |v: f64| {
        if v.is_nan() {
            "-".to_string()
        } else {
            format!("{:+.1}%", 100.0 * v)
        }
    };
    let abs = |v: f64| {
        if v.is_nan() {
            "-".to_string()
        } else {
            format!("{:.1}%", 100.0 * v)
        }
    };
    let mut s = format!(
        "{:<14} {:>5} {:>7} {:>7} {:>8} | {:>5} {:>7} {:>7} {:>8}\n",
        "group", "rows", "median", "p90", "signed", "full", "median", "p90", "signed"
    );
    for g in FmoeGroup::of(runs) {
        let (a, b) = (g.stats(runs, false), g.stats(runs, true));
        if a.rows() + a.failed() == 0 {
            continue;
        }
        s.push_str(&format!(
            "{:<14} {:>5} {:>7} {:>7} {:>8} | {:>5} {:>7} {:>7} {:>8}\n",
            g.label(),
            if a.failed() > 0 {
                format!("{}+{}f", a.rows(), a.failed())
            } else {
                a.rows().to_string()
            },
            abs(a.median()),
            abs(a.p90()),
            pct(a.signed_median()),
            b.rows(),
            abs(b.median()),
            abs(b.p90()),
            pct(b.signed_median()),
        ));
    }
    // The two methods on the same rows: those with a full simulation.
    let both: Vec<(f64, f64, f64)> = runs
        .iter()
        .filter_map(|r| match (r.sampled(), r.full()) {
            (Ok(a), Some(Ok(b))) => Some((a.us, b.us, r.row().us())),
            _ => None,
        })
        .collect();
    if !both.is_empty() {
        let of =
            |f: &dyn Fn(&(f64, f64, f64)) -> f64| ErrorStats::new(both.iter().map(f).collect(), 0);
        let (a, b, d) = (
            of(&|t| relative(t.0, t.2)),
            of(&|t| relative(t.1, t.2)),
            of(&|t| relative(t.0, t.1)),
        );
        s.push_str(&format!(
            "same {} rows: sampled median {} p90 {} signed {}; full median {} p90 {} signed {}; sampled vs full: median {} p90 {} signed {}\n",
            both.len(),
            abs(a.median()),
            abs(a.p90()),
            pct(a.signed_median()),
            abs(b.median()),
            abs(b.p90()),
            pct(b.signed_median()),
            abs(d.median()),
            abs(d.p90()),
            pct(d.signed_median()),
        ));
    }
    let cpu: Vec<f64> = runs
        .iter()
        .filter_map(|r| r.sampled().as_ref().ok().map(|t| t.cpu_seconds))
        .collect();
    let full_cpu: Vec<f64> = runs
        .iter()
        .filter_map(|r| match r.full() {
            Some(Ok(t)) => Some(t.cpu_seconds),
            _ => None,
        })
        .collect();
    s.push_str(&format!(
        "CPU s per row, sampled: median {:.2} max {:.2}; full: median {:.2} max {:.2} ({} rows)\n",
        median(&cpu),
        max(&cpu),
        median(&full_cpu),
        max(&full_cpu),
        full_cpu.len()
    ));
    s
}

fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[(s.len() - 1) / 2]
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NAN, f64::max)
}

/// The runs as CSV, one line per row.
pub fn runs_csv(runs: &[FmoeRun]) -> String {
    let mut s = String::from(
        "line,kernel,tile,tokens,model_dim,inter_dim,experts,topk,block_m,doweight,activation,quant,grid_x,grid_y,workgroups,working_workgroups,measured_us,sampled_us,sampled_error,sampled_bound,sampled_cpu_s,full_us,full_error,full_cpu_s,error\n",
    );
    for r in runs {
        let (row, l) = (r.row(), r.launch());
        let p = l.problem();
        let t = |x: Option<&Result<FmoeTiming, String>>| match x {
            Some(Ok(t)) => (
                format!("{:.3}", t.us),
                format!("{:.4}", relative(t.us, row.us())),
                format!("{:?}", t.bound),
                format!("{:.3}", t.cpu_seconds),
            ),
            _ => Default::default(),
        };
        let (su, se, sb, sc) = t(Some(r.sampled()));
        let (fu, fe, _, fc) = t(r.full());
        let err = [
            r.sampled().as_ref().err(),
            r.full().and_then(|f| f.as_ref().err()),
        ]
        .into_iter()
        .flatten()
        .map(|e| e.replace([',', '\n', '"'], " "))
        .collect::<Vec<_>>()
        .join("; ");
        s.push_str(&format!(
            "{},{},{},{},{},{},{},{},{},{},{:?},{:?},{},{},{},{},{},{su},{se},{sb},{sc},{fu},{fe},{fc},{err}\n",
            row.line(),
            l.kernel().name(),
            l.kernel().tile_label(),
            p.tokens(),
            p.model_dim(),
            p.inter_dim(),
            p.experts(),
            p.topk(),
            row.block_m(),
            row.doweight() as u8,
            p.activation(),
            row.quant(),
            l.grid()[0],
            l.grid()[1],
            l.workgroups(),
            r.working_workgroups(),
            row.us(),
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fmoe::kernel::tests::kernel;

    /// Runs of two rows of the 32x512 kernel measured at 100 and 300 µs, predicted 10% over
    /// and 20% under, the second without a full simulation.
    fn runs() -> Vec<FmoeRun> {
        let k = kernel(32, 512, true);
        let header = "cu_num,token,model_dim,inter_dim,expert,topk,act_type,dtype,q_dtype_a,q_dtype_w,q_type,use_g1u1,doweight_stage1,block_m,ksplit,us1,kernelName1\n";
        let line = |tokens: u32, us: f64| {
            format!(
                "256,{tokens},7168,512,256,8,ActivationType.Silu,torch.bfloat16,torch.float8_e4m3fn,torch.float8_e4m3fn,QuantType.per_Token,1,1,32,0,{us},{}\n",
                k.symbol()
            )
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(
            &path,
            format!("{header}{}{}", line(16, 100.0), line(2048, 300.0)),
        )
        .unwrap();
        let rows = super::super::table::parse_table(&path, 256).unwrap();
        let timing = |us: f64| FmoeTiming {
            us,
            cycles: 1,
            bound: Bound::MemoryBandwidth,
            hbm_gbs: 1.0,
            workgroups_simulated: 1,
            cpu_seconds: 0.5,
        };
        rows.iter()
            .zip([(110.0, Some(105.0)), (240.0, None)])
            .map(|(row, (sampled, full))| {
                let launch = row.launch(std::slice::from_ref(&k)).unwrap();
                let p = *launch.problem();
                let sorted =
                    SortedRouting::new(&p, &Routing::uniform(&p, 1), launch.block_m()).unwrap();
                FmoeRun {
                    row: row.clone(),
                    working_workgroups: sorted.valid_blocks() as u64,
                    launch,
                    sampled: Ok(timing(sampled)),
                    full: full.map(|f| Ok(timing(f))),
                }
            })
            .collect()
    }

    #[test]
    fn groups_and_statistics() {
        let runs = runs();
        // 16 tokens x 8 experts over 256 experts: fewer than 256 blocks; 2048 tokens: more.
        assert!(in_regime(&runs[0], Regime::Workgroups256));
        assert!(in_regime(&runs[1], Regime::WorkgroupsMore));
        assert!(in_regime(&runs[1], Regime::Over200us) && !in_regime(&runs[0], Regime::Over200us));
        let groups = FmoeGroup::of(&runs);
        assert_eq!(groups.first(), Some(&FmoeGroup::All));
        assert_eq!(groups.last(), Some(&FmoeGroup::Tile("32x512".into())));
        let all = FmoeGroup::All.stats(&runs, false);
        assert_eq!((all.rows(), all.failed()), (2, 0));
        assert!((all.signed_median() + 0.2).abs() < 1e-12);
        assert!((all.p90() - 0.2).abs() < 1e-12);
        let full = FmoeGroup::All.stats(&runs, true);
        assert_eq!(full.rows(), 1);
        assert!((full.median() - 0.05).abs() < 1e-12);
        let text = report(&runs);
        assert!(text.contains("same 1 rows"), "{text}");
        let csv = runs_csv(&runs);
        assert_eq!(csv.lines().count(), 3);
        assert!(
            csv.lines().nth(1).unwrap().contains(",110.000,0.1000,"),
            "{csv}"
        );
    }

    #[test]
    fn median_and_max_of_small_lists() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.0);
        assert!(median(&[]).is_nan());
        assert_eq!(max(&[1.0, 5.0, 2.0]), 5.0);
    }
}
