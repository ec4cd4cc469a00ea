//! Running predictors over the rows, and what comes out: error statistics, the tables, the CSV
//! and the plots.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use plotters::prelude::*;
use rayon::prelude::*;
use tilegen_output::Output;

use crate::calibrate::{CalibrationRow, PredictError, Predictor, Set};
use crate::error::AiterError;

/// The M ranges errors are reported by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MRange {
    /// `M <= 16`: decode-sized.
    UpTo16,
    /// `17 <= M <= 256`.
    UpTo256,
    /// `257 <= M <= 2048`.
    UpTo2048,
    /// `M > 2048`.
    Above2048,
}

impl MRange {
    /// Every range, ascending.
    pub const ALL: [MRange; 4] = [
        MRange::UpTo16,
        MRange::UpTo256,
        MRange::UpTo2048,
        MRange::Above2048,
    ];

    /// The range holding `m`.
    pub fn of(m: u32) -> MRange {
        match m {
            0..=16 => MRange::UpTo16,
            17..=256 => MRange::UpTo256,
            257..=2048 => MRange::UpTo2048,
            _ => MRange::Above2048,
        }
    }

    /// `M<=16`, `M 17..256`, ...
    pub fn label(self) -> &'static str {
        match self {
            MRange::UpTo16 => "M<=16",
            MRange::UpTo256 => "M 17..256",
            MRange::UpTo2048 => "M 257..2048",
            MRange::Above2048 => "M>2048",
        }
    }
}

/// The launch-size and duration regimes errors are reported by: where a model's biases show
/// (a lone workgroup's latency, a partly filled GPU, many rounds; short and long kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Regime {
    /// At most 16 workgroups.
    Workgroups16,
    /// 17 to 64 workgroups.
    Workgroups64,
    /// 65 to 256 workgroups (at most one per CU).
    Workgroups256,
    /// More than 256 workgroups.
    WorkgroupsMore,
    /// Measured under 10 µs.
    Under10us,
    /// Measured over 200 µs.
    Over200us,
}

impl Regime {
    /// Every regime.
    pub const ALL: [Regime; 6] = [
        Regime::Workgroups16,
        Regime::Workgroups64,
        Regime::Workgroups256,
        Regime::WorkgroupsMore,
        Regime::Under10us,
        Regime::Over200us,
    ];

    /// Whether `row` is in the regime.
    pub fn contains(self, row: &CalibrationRow) -> bool {
        self.holds(row.workgroups(), row.row().us())
    }

    /// Whether a launch of `wg` workgroups measured at `us` microseconds is in the regime.
    pub fn holds(self, wg: u64, us: f64) -> bool {
        match self {
            Regime::Workgroups16 => (1..=16).contains(&wg),
            Regime::Workgroups64 => (17..=64).contains(&wg),
            Regime::Workgroups256 => (65..=256).contains(&wg),
            Regime::WorkgroupsMore => wg > 256,
            Regime::Under10us => us < 10.0,
            Regime::Over200us => us > 200.0,
        }
    }

    /// `wg<=16`, `wg 17..64`, ...
    pub fn label(self) -> &'static str {
        match self {
            Regime::Workgroups16 => "wg<=16",
            Regime::Workgroups64 => "wg 17..64",
            Regime::Workgroups256 => "wg 65..256",
            Regime::WorkgroupsMore => "wg>256",
            Regime::Under10us => "<10us",
            Regime::Over200us => ">200us",
        }
    }
}

/// A group of rows errors are summarised over (within one [`Set`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// Every row of the set.
    All,
    /// The rows in an M range.
    M(MRange),
    /// The rows of a launch-size or duration regime.
    Regime(Regime),
    /// The rows of one kernel (its tile label).
    Kernel(String),
}

impl Group {
    /// A label for tables.
    pub fn label(&self) -> String {
        match self {
            Group::All => "all".into(),
            Group::M(r) => r.label().into(),
            Group::Regime(r) => r.label().into(),
            Group::Kernel(k) => format!("kernel {k}"),
        }
    }

    fn contains(&self, row: &CalibrationRow) -> bool {
        match self {
            Group::All => true,
            Group::M(r) => MRange::of(row.row().m()) == *r,
            Group::Regime(r) => r.contains(row),
            Group::Kernel(k) => row.kernel().tile_label() == *k,
        }
    }
}

/// Absolute relative errors of a group of rows.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ErrorStats {
    rows: usize,
    failed: usize,
    median: f64,
    p90: f64,
    signed_median: f64,
}

impl ErrorStats {
    /// The statistics of `errors` (signed relative errors, `(predicted - measured) /
    /// measured`) plus `failed` rows without a prediction; the quantiles are nearest-rank (NaN
    /// when no row was predicted).
    pub fn new(errors: Vec<f64>, failed: usize) -> Self {
        let q = |sorted: &[f64], p: f64| {
            if sorted.is_empty() {
                return f64::NAN;
            }
            let rank = (p * sorted.len() as f64).ceil() as usize;
            sorted[rank.clamp(1, sorted.len()) - 1]
        };
        let mut signed = errors;
        signed.sort_by(f64::total_cmp);
        let mut abs: Vec<f64> = signed.iter().map(|e| e.abs()).collect();
        abs.sort_by(f64::total_cmp);
        ErrorStats {
            rows: abs.len(),
            failed,
            median: q(&abs, 0.5),
            p90: q(&abs, 0.9),
            signed_median: q(&signed, 0.5),
        }
    }

    /// Rows predicted.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Rows the predictor failed on.
    pub fn failed(&self) -> usize {
        self.failed
    }

    /// Median absolute relative error.
    pub fn median(&self) -> f64 {
        self.median
    }

    /// 90th percentile of the absolute relative error.
    pub fn p90(&self) -> f64 {
        self.p90
    }

    /// Median of the signed relative error: positive when the predictor is too slow.
    pub fn signed_median(&self) -> f64 {
        self.signed_median
    }
}

/// The statistics of one group of one set.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupStats {
    set: Set,
    group: Group,
    stats: ErrorStats,
}

impl GroupStats {
    /// The set.
    pub fn set(&self) -> Set {
        self.set
    }

    /// The group within it.
    pub fn group(&self) -> &Group {
        &self.group
    }

    /// Its errors.
    pub fn stats(&self) -> &ErrorStats {
        &self.stats
    }
}

struct Column {
    name: String,
    summary: String,
    predictions: Vec<Result<f64, PredictError>>,
}

/// Every predictor's predictions for every row.
pub struct Evaluation {
    rows: Vec<CalibrationRow>,
    columns: Vec<Column>,
}

/// `(predicted - measured) / measured`.
fn rel_error(predicted: f64, measured: f64) -> f64 {
    (predicted - measured) / measured
}

impl Evaluation {
    /// Runs each predictor on each row (rows in parallel). A prediction that is not positive
    /// and finite counts as a failure.
    pub fn run(rows: &[CalibrationRow], predictors: &[&dyn Predictor]) -> Self {
        let columns = predictors
            .iter()
            .map(|p| Column {
                name: p.name().to_string(),
                summary: p.summary(),
                predictions: rows
                    .par_iter()
                    .map(|r| {
                        let us = p.predict_us(r.row(), r.kernel())?;
                        if us.is_finite() && us > 0.0 {
                            Ok(us)
                        } else {
                            Err(PredictError::Model(
                                format!("predicted {us} us, not a positive time").into(),
                            ))
                        }
                    })
                    .collect(),
            })
            .collect();
        Evaluation {
            rows: rows.to_vec(),
            columns,
        }
    }

    /// The rows.
    pub fn rows(&self) -> &[CalibrationRow] {
        &self.rows
    }

    /// The predictors' names, in column order.
    pub fn predictors(&self) -> Vec<&str> {
        self.columns.iter().map(|c| c.name.as_str()).collect()
    }

    /// The prediction of predictor `p` (column index) for row `i`.
    pub fn prediction(&self, p: usize, i: usize) -> Option<&Result<f64, PredictError>> {
        self.columns.get(p)?.predictions.get(i)
    }

    /// Statistics of predictor `p` over the rows of `set` in `group`.
    pub fn stats(&self, p: usize, set: Set, group: &Group) -> ErrorStats {
        let mut errors = Vec::new();
        let mut failed = 0;
        if let Some(col) = self.columns.get(p) {
            for (r, pred) in self.rows.iter().zip(&col.predictions) {
                if r.set() != set || !group.contains(r) {
                    continue;
                }
                match pred {
                    Ok(us) => errors.push(rel_error(*us, r.row().us())),
                    Err(_) => failed += 1,
                }
            }
        }
        ErrorStats::new(errors, failed)
    }

    /// Every non-empty group of both sets for predictor `p`: all rows, each M range, each
    /// kernel (by tile, in index order of first appearance sorted by tile).
    pub fn groups(&self, p: usize) -> Vec<GroupStats> {
        let mut out = Vec::new();
        for set in [Set::Calibration, Set::HeldOut, Set::Extra] {
            let mut kernels: Vec<(u32, u32)> = self
                .rows
                .iter()
                .filter(|r| r.set() == set)
                .map(|r| (r.kernel().tile_m(), r.kernel().tile_n()))
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            kernels.sort();
            let groups = std::iter::once(Group::All)
                .chain(MRange::ALL.map(Group::M))
                .chain(Regime::ALL.map(Group::Regime))
                .chain(
                    kernels
                        .into_iter()
                        .map(|(m, n)| Group::Kernel(format!("{m}x{n}"))),
                );
            for group in groups {
                let stats = self.stats(p, set, &group);
                if stats.rows() + stats.failed() > 0 {
                    out.push(GroupStats { set, group, stats });
                }
            }
        }
        out
    }

    /// The statistics of every predictor as text tables.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let pct = |v: f64| {
            if v.is_nan() {
                "-".to_string()
            } else {
                format!("{:.1}%", 100.0 * v)
            }
        };
        let signed = |v: f64| {
            if v.is_nan() {
                "-".to_string()
            } else {
                format!("{:+.1}%", 100.0 * v)
            }
        };
        for (p, col) in self.columns.iter().enumerate() {
            let _ = writeln!(s, "{}", col.summary);
            let _ = writeln!(
                s,
                "  {:<12} {:<16} {:>5} {:>7} {:>9} {:>9} {:>9}",
                "set", "group", "rows", "failed", "median", "p90", "signed"
            );
            for g in self.groups(p) {
                let _ = writeln!(
                    s,
                    "  {:<12} {:<16} {:>5} {:>7} {:>9} {:>9} {:>9}",
                    g.set.label(),
                    g.group.label(),
                    g.stats.rows(),
                    g.stats.failed(),
                    pct(g.stats.median()),
                    pct(g.stats.p90()),
                    signed(g.stats.signed_median())
                );
            }
            if let Some((i, Err(e))) = col.predictions.iter().enumerate().find(|(_, r)| r.is_err())
            {
                let _ = writeln!(
                    s,
                    "  first failure (table line {}): {}",
                    self.rows[i].row().line(),
                    error_chain(e)
                );
            }
            s.push('\n');
        }
        s
    }

    /// Predictors `a` and `b` side by side on the same rows (those both predicted): median
    /// and p90 per set and group, and which has the lower median and p90.
    pub fn comparison(&self, a: usize, b: usize) -> String {
        let mut s = String::new();
        let (Some(ca), Some(cb)) = (self.columns.get(a), self.columns.get(b)) else {
            return s;
        };
        let pct = |v: f64| {
            if v.is_nan() {
                "-".to_string()
            } else {
                format!("{:.1}%", 100.0 * v)
            }
        };
        let _ = writeln!(
            s,
            "{} vs {} on the same rows (median / p90 of |predicted - measured| / measured)",
            cb.name, ca.name
        );
        let _ = writeln!(
            s,
            "  {:<12} {:<16} {:>5} {:>17} {:>17}  {} better",
            "set", "group", "rows", ca.name, cb.name, cb.name
        );
        for g in self.groups(b) {
            let mut ea = Vec::new();
            let mut eb = Vec::new();
            for (i, r) in self.rows.iter().enumerate() {
                if r.set() != g.set || !g.group.contains(r) {
                    continue;
                }
                if let (Ok(pa), Ok(pb)) = (&ca.predictions[i], &cb.predictions[i]) {
                    ea.push(rel_error(*pa, r.row().us()));
                    eb.push(rel_error(*pb, r.row().us()));
                }
            }
            let (sa, sb) = (ErrorStats::new(ea, 0), ErrorStats::new(eb, 0));
            let verdict = match (sb.median() < sa.median(), sb.p90() < sa.p90()) {
                (true, true) => "median and p90",
                (true, false) => "median",
                (false, true) => "p90",
                (false, false) => "no",
            };
            let _ = writeln!(
                s,
                "  {:<12} {:<16} {:>5} {:>8} / {:>6} {:>8} / {:>6}  {verdict}",
                g.set.label(),
                g.group.label(),
                sa.rows(),
                pct(sa.median()),
                pct(sa.p90()),
                pct(sb.median()),
                pct(sb.p90()),
            );
        }
        s
    }

    /// One CSV row per table row: `M,N,K,kernel,split,set,measured_us`, then one column per
    /// predictor (empty where it failed).
    pub fn csv(&self) -> Result<String, AiterError> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let io = |source: csv::Error| AiterError::Csv {
            path: PathBuf::from("<calibration csv>"),
            source,
        };
        let mut header: Vec<String> = ["M", "N", "K", "kernel", "split", "set", "measured_us"]
            .map(String::from)
            .to_vec();
        header.extend(self.columns.iter().map(|c| format!("{}_us", c.name)));
        w.write_record(&header).map_err(io)?;
        for (i, r) in self.rows.iter().enumerate() {
            let t = r.row();
            let mut rec = vec![
                t.m().to_string(),
                t.n().to_string(),
                t.k().to_string(),
                r.kernel().tile_label(),
                t.log2_k_split().to_string(),
                r.set().label().to_string(),
                t.us().to_string(),
            ];
            rec.extend(self.columns.iter().map(|c| match &c.predictions[i] {
                Ok(us) => format!("{us:.4}"),
                Err(_) => String::new(),
            }));
            w.write_record(&rec).map_err(io)?;
        }
        let bytes = w.into_inner().map_err(|e| io(e.into_error().into()))?;
        // The writer only ever received strings.
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Predicted against measured for predictor `p`, log-log, one colour per kernel
    /// (calibration kernels filled, held-out hollow), with the diagonal; as SVG.
    pub fn svg(&self, p: usize) -> Result<String, AiterError> {
        let col = self.columns.get(p).ok_or_else(|| AiterError::Plot {
            what: format!("predictor #{p}"),
            source: "no such predictor".into(),
        })?;
        let plot_err = |e: Box<dyn std::error::Error + Send + Sync>| AiterError::Plot {
            what: format!("the {} plot", col.name),
            source: e,
        };
        let points: Vec<(f64, f64, &CalibrationRow)> = self
            .rows
            .iter()
            .zip(&col.predictions)
            .filter_map(|(r, pred)| pred.as_ref().ok().map(|&us| (r.row().us(), us, r)))
            .collect();
        let (lo, hi) = points
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), (x, y, _)| {
                (lo.min(*x).min(*y), hi.max(*x).max(*y))
            });
        let (lo, hi) = if points.is_empty() {
            (1.0, 10.0)
        } else {
            (lo / 1.3, hi * 1.3)
        };
        let mut kernels: Vec<(u32, u32, Set)> = self
            .rows
            .iter()
            .map(|r| (r.kernel().tile_m(), r.kernel().tile_n(), r.set()))
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        kernels.sort_by_key(|&(m, n, set)| (set, m, n));
        let mut svg = String::new();
        {
            let root = SVGBackend::with_string(&mut svg, (1200, 900)).into_drawing_area();
            root.fill(&WHITE).map_err(|e| plot_err(Box::new(e)))?;
            let mut chart = ChartBuilder::on(&root)
                .caption(
                    format!(
                        "{}: predicted vs measured on MI355X (AITER f4gemm, {} rows)",
                        col.name,
                        points.len()
                    ),
                    ("sans-serif", 22),
                )
                .margin(20)
                .x_label_area_size(50)
                .y_label_area_size(70)
                .build_cartesian_2d((lo..hi).log_scale(), (lo..hi).log_scale())
                .map_err(|e| plot_err(Box::new(e)))?;
            chart
                .configure_mesh()
                .x_desc("measured (us)")
                .y_desc(format!("{} predicted (us)", col.name))
                .draw()
                .map_err(|e| plot_err(Box::new(e)))?;
            chart
                .draw_series(LineSeries::new([(lo, lo), (hi, hi)], BLACK.stroke_width(1)))
                .map_err(|e| plot_err(Box::new(e)))?
                .label("predicted = measured")
                .legend(|(x, y)| PathElement::new([(x, y), (x + 16, y)], BLACK));
            let count = kernels.len().max(1) as f64;
            for (i, &(tm, tn, set)) in kernels.iter().enumerate() {
                // Hues up to 0.85 of the circle: the last kernel must not wrap back to red.
                let color = HSLColor(0.85 * i as f64 / count, 0.8, 0.42);
                let style = match set {
                    Set::Calibration => color.filled(),
                    Set::HeldOut => color.stroke_width(2),
                    Set::Extra => color.stroke_width(1),
                };
                let mine = points.iter().filter(|(_, _, r)| {
                    r.kernel().tile_m() == tm && r.kernel().tile_n() == tn && r.set() == set
                });
                chart
                    .draw_series(mine.map(|&(x, y, _)| Circle::new((x, y), 4, style)))
                    .map_err(|e| plot_err(Box::new(e)))?
                    .label(format!("{tm}x{tn} ({})", set.label()))
                    .legend(move |(x, y)| Circle::new((x + 8, y), 4, style));
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 13))
                .draw()
                .map_err(|e| plot_err(Box::new(e)))?;
            root.present().map_err(|e| plot_err(Box::new(e)))?;
        }
        Ok(svg)
    }

    /// Writes `calibration.csv` and `<predictor>.svg` per predictor into `dir` (which must
    /// exist), each atomically; returns the paths written.
    pub fn write(&self, dir: &Path) -> Result<Vec<PathBuf>, AiterError> {
        let mut files = vec![(dir.join("calibration.csv"), self.csv()?)];
        for (p, col) in self.columns.iter().enumerate() {
            files.push((dir.join(format!("{}.svg", col.name)), self.svg(p)?));
        }
        let mut written = Vec::new();
        for (path, text) in files {
            Output::check(&path)
                .and_then(|o| o.write(text.as_bytes()))
                .map_err(|source| AiterError::Output {
                    path: path.clone(),
                    source,
                })?;
            written.push(path);
        }
        Ok(written)
    }
}

/// An error and its sources on one line.
pub(crate) fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        let msg = inner.to_string();
        if !s.contains(&msg) {
            let _ = write!(s, ": {msg}");
        }
        source = inner.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::tests::crow;
    use crate::kernel::F4GemmKernel;
    use crate::kernel::tests::kernel;
    use crate::table::TableRow;

    /// Predicts twice the measured time, and fails on M = 7.
    struct Double;

    impl Predictor for Double {
        fn name(&self) -> &str {
            "double"
        }

        fn predict_us(&self, row: &TableRow, _: &F4GemmKernel) -> Result<f64, PredictError> {
            if row.m() == 7 {
                return Err(PredictError::Model("no M = 7".into()));
            }
            Ok(2.0 * row.us())
        }
    }

    fn rows() -> Vec<CalibrationRow> {
        let (cal, held) = (kernel(32, 128, false), kernel(256, 256, true));
        vec![
            crow(1, 256, 256, 4.0, &cal),
            crow(300, 256, 256, 8.0, &cal),
            crow(7, 256, 256, 8.0, &held),
            crow(4096, 256, 256, 10.0, &held),
            crow(20, 256, 256, 3.0, &held),
        ]
    }

    #[test]
    fn quantiles_are_nearest_rank() {
        let s = ErrorStats::new((1..=10).map(|v| v as f64).collect(), 2);
        assert_eq!(
            (s.rows(), s.failed(), s.median(), s.p90()),
            (10, 2, 5.0, 9.0)
        );
        let s = ErrorStats::new(vec![3.0], 0);
        assert_eq!((s.median(), s.p90()), (3.0, 3.0));
        // Signed errors: the median of the magnitudes, the median of the signs kept.
        let s = ErrorStats::new(vec![-0.3, -0.2, 0.1], 0);
        assert_eq!((s.median(), s.p90(), s.signed_median()), (0.2, 0.3, -0.2));
        assert!(ErrorStats::new(vec![], 1).median().is_nan());
    }

    #[test]
    fn m_ranges() {
        assert_eq!(MRange::of(1), MRange::UpTo16);
        assert_eq!(MRange::of(16), MRange::UpTo16);
        assert_eq!(MRange::of(17), MRange::UpTo256);
        assert_eq!(MRange::of(256), MRange::UpTo256);
        assert_eq!(MRange::of(257), MRange::UpTo2048);
        assert_eq!(MRange::of(2048), MRange::UpTo2048);
        assert_eq!(MRange::of(2049), MRange::Above2048);
    }

    #[test]
    fn groups_tables_csv_and_plot() {
        let rows = rows();
        let eval = Evaluation::run(&rows, &[&Double]);
        assert_eq!(eval.predictors(), ["double"]);
        let all_held = eval.stats(0, Set::HeldOut, &Group::All);
        assert_eq!((all_held.rows(), all_held.failed()), (2, 1));
        assert_eq!(all_held.median(), 1.0);
        let groups = eval.groups(0);
        let labels: Vec<String> = groups
            .iter()
            .map(|g| format!("{} {}", g.set().label(), g.group().label()))
            .collect();
        assert_eq!(
            labels,
            [
                "calibration all",
                "calibration M<=16",
                "calibration M 257..2048",
                "calibration wg<=16",
                "calibration wg 17..64",
                "calibration <10us",
                "calibration kernel 32x128",
                "held-out all",
                "held-out M<=16",
                "held-out M 17..256",
                "held-out M>2048",
                "held-out wg<=16",
                "held-out <10us",
                "held-out kernel 256x256",
            ]
        );
        // Twice the time: +100% signed, whatever the group.
        assert!(
            groups
                .iter()
                .filter(|g| g.stats().rows() > 0)
                .all(|g| g.stats().signed_median() == 1.0)
        );
        assert_eq!(rows[1].workgroups(), 10 * 2);
        let table = eval.table();
        assert!(table.contains("100.0%"), "{table}");
        assert!(table.contains("no M = 7"), "{table}");
        let csv = eval.csv().unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines[0], "M,N,K,kernel,split,set,measured_us,double_us");
        assert_eq!(lines[1], "1,256,256,32x128,0,calibration,4,8.0000");
        assert_eq!(lines[3], "7,256,256,256x256,0,held-out,8,");
        let twice = Evaluation::run(&rows, &[&Double, &Double]);
        let cmp = twice.comparison(0, 1);
        assert!(cmp.contains("held-out     all"), "{cmp}");
        assert!(cmp.lines().all(|l| !l.ends_with("median and p90")), "{cmp}");
        let svg = eval.svg(0).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("32x128 (calibration)"));
        assert!(eval.svg(1).is_err());
        let dir = tempfile::tempdir().unwrap();
        let written = eval.write(dir.path()).unwrap();
        assert_eq!(
            written,
            [
                dir.path().join("calibration.csv"),
                dir.path().join("double.svg")
            ]
        );
        assert_eq!(std::fs::read_to_string(&written[0]).unwrap(), csv);
        let e = eval.write(&dir.path().join("missing")).unwrap_err();
        assert!(matches!(e, AiterError::Output { .. }), "{e}");
    }
}
