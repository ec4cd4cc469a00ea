//! The best configuration per shape, as a table (Markdown, CSV) and an SVG chart of TFLOP/s
//! for the best configuration against the runner-up and against the default spec.
//!
//! Rows read from a database are checked there ([`crate::Db::results`]); these functions
//! also take rows built elsewhere, so they rank only finite positive times and chart only
//! finite positive rates, on an axis of bounded span whatever the numbers are.

use std::collections::BTreeMap;

use plotters::prelude::*;
use serde::Serialize;
use tilegen_kernels::KernelSpec;

use crate::db::{Row, Status};
use crate::eval::By;
use crate::template::Shape;

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
#[error("drawing the chart: {0}")]
pub struct ChartError(String);

/// One shape's standing.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeReport {
    /// The shape.
    pub shape: Shape,
    /// Model or device.
    pub source: By,
    /// The fastest configuration.
    pub best: Row,
    /// The second fastest.
    pub runner_up: Option<Row>,
    /// The default spec (`KernelSpec::preb()` with the same output type), when measured.
    pub default: Option<Row>,
    /// Configurations measured on this shape.
    pub measured: u64,
    /// Configurations that failed on it.
    pub failed: u64,
    /// How much slower the runner-up is than the best (`runner-up us / best us - 1`).
    pub margin: Option<f64>,
    /// Ranked by the model and the margin is inside its held-out error
    /// ([`tilegen_timing::HELD_OUT_ERROR`]): the evidence does not tell the two apart.
    pub within_band: bool,
}

/// Groups `rows` (a database's `results`) by shape and source, best first. With `source`, only
/// that source's rows count.
pub fn per_shape(rows: &[Row], source: Option<By>) -> Vec<ShapeReport> {
    // Grouped by the stored word, so the report's order stays that of the text (device
    // before model).
    let mut groups: BTreeMap<(&str, u32, u32, Shape), Vec<&Row>> = BTreeMap::new();
    for r in rows {
        if source.is_some_and(|s| s != r.source) {
            continue;
        }
        groups
            .entry((r.source.as_str(), r.n, r.k, r.shape()))
            .or_default()
            .push(r);
    }
    let mut out = Vec::new();
    for ((_, _, _, shape), rows) in groups {
        let Some(source) = rows.first().map(|r| r.source) else {
            continue;
        };
        let failed = rows.iter().filter(|r| r.status == Status::Failed).count() as u64;
        let mut ok: Vec<&Row> = rows
            .into_iter()
            .filter(|r| r.status == Status::Ok && r.us.is_some_and(|t| t.is_finite() && t > 0.0))
            .collect();
        ok.sort_by(|a, b| {
            a.us.unwrap_or(f64::INFINITY)
                .total_cmp(&b.us.unwrap_or(f64::INFINITY))
                .then(a.cache_key.cmp(&b.cache_key))
        });
        let Some(best) = ok.first() else { continue };
        let runner_up = ok.get(1).map(|r| (*r).clone());
        let margin = match (best.us, runner_up.as_ref().and_then(|r| r.us)) {
            (Some(b), Some(r)) if (r / b).is_finite() => Some(r / b - 1.0),
            _ => None,
        };
        let within_band = source == By::Model
            && match (best.us, runner_up.as_ref().and_then(|r| r.us)) {
                (Some(b), Some(r)) => tilegen_timing::HELD_OUT_ERROR.ties(b, r),
                _ => false,
            };
        let default_key = KernelSpec::preb()
            .out_dtype(best.spec.out_dtype)
            .cache_key();
        out.push(ShapeReport {
            shape,
            source,
            best: (*best).clone(),
            runner_up,
            default: ok
                .iter()
                .find(|r| r.cache_key == default_key)
                .map(|r| (*r).clone()),
            measured: ok.len() as u64,
            failed,
            margin,
            within_band,
        });
    }
    out
}

fn tflops(r: Option<&Row>) -> Option<f64> {
    r.and_then(|r| r.tflops)
}

/// A number with `decimals` places, or in exponent form when it is too large or too small
/// to read that way (or not finite).
fn num(v: f64, decimals: usize) -> String {
    if v == 0.0 || (v.is_finite() && (1e-3..1e9).contains(&v.abs())) {
        format!("{v:.decimals$}")
    } else {
        format!("{v:.3e}")
    }
}

/// Text as one Markdown table cell inside backticks: no line breaks, no cell separators.
fn cell(t: &str) -> String {
    t.chars()
        .map(|c| match c {
            '|' | '`' => '_',
            c if c.is_control() => ' ',
            c => c,
        })
        .collect()
}

/// Decades the chart's axis spans at most: the chart stays readable, and the axis finite.
const MAX_DECADES: f64 = 12.0;

/// The chart's TFLOP/s axis for `values` (finite, positive): from below the smallest to
/// above the largest, with room for the labels on top, within [`MAX_DECADES`] decades
/// ending at the largest value, and within what `f64` holds.
fn axis(values: &[f64]) -> (f64, f64) {
    let max = values.iter().copied().fold(1.0f64, f64::max).min(1e300) * 1.5;
    let min = values
        .iter()
        .copied()
        .fold(max, f64::min)
        .max(1e-3)
        .max(max / 10f64.powf(MAX_DECADES))
        / 1.5;
    (min, max)
}

/// The reports as a Markdown table. Model-ranked ratios carry the model's held-out error
/// band, and a best whose margin over the runner-up is inside it is marked `(tie)`.
pub fn markdown(reports: &[ShapeReport]) -> String {
    let band = tilegen_timing::HELD_OUT_ERROR;
    let mut s = String::new();
    if reports.iter().any(|r| r.source == By::Model) {
        s += &format!(
            "Model-ranked rows: the timing model's error on held-out MI355X measurements is {} over {} rows; a margin or ratio inside it is not a win.\n\n",
            band.label(),
            band.rows
        );
    }
    s += "| M | N | K | source | best kernel | µs | TFLOP/s | runner-up TFLOP/s | margin | default TFLOP/s | vs default | measured | failed |\n|---:|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|\n";
    // A rate that is not a finite non-negative number is shown as unknown.
    let f = |v: Option<f64>| {
        v.filter(|x| x.is_finite() && *x >= 0.0)
            .map_or("-".to_string(), |x| num(x, 1))
    };
    for r in reports {
        let model = r.source == By::Model;
        let vs = match (r.best.us, r.default.as_ref().and_then(|d| d.us)) {
            (Some(b), Some(d)) if (d / b).is_finite() => format!(
                "{}x{}",
                num(d / b, 2),
                if model {
                    format!(" ±{:.0}%", 100.0 * band.median)
                } else {
                    String::new()
                }
            ),
            _ => "-".into(),
        };
        let margin = match r.margin {
            Some(m) => format!(
                "{:+.1}%{}",
                100.0 * m,
                if r.within_band { " (tie)" } else { "" }
            ),
            None => "-".into(),
        };
        s += &format!(
            "| {} | {} | {} | {} | `{}` | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            r.shape.m,
            r.shape.n,
            r.shape.k,
            r.source.as_str(),
            cell(&r.best.kernel),
            r.best.us.map_or("-".to_string(), |t| num(t, 2)),
            f(r.best.tflops),
            f(tflops(r.runner_up.as_ref())),
            margin,
            f(tflops(r.default.as_ref())),
            vs,
            r.measured,
            r.failed
        );
    }
    // A winner that is fast because it rounds more says so.
    let inexact: Vec<String> = reports
        .iter()
        .filter_map(|r| {
            let ulps = KernelSpec::try_from(r.best.spec.clone()).ok()?.bf16_ulps();
            (ulps > 1).then(|| format!("`{}` (up to {ulps})", cell(&r.best.kernel)))
        })
        .collect();
    if !inexact.is_empty() {
        s += &format!(
            "\nSplit-K with bf16 atomics (the template allows it): these best kernels' C may be more than one bf16 ulp from the once-rounded product, and its last bit varies from run to run: {}.\n",
            inexact.join(", ")
        );
    }
    s
}

/// The best row of each shape as CSV (AITER's tuned-GEMM columns).
pub fn csv(reports: &[ShapeReport]) -> String {
    let rows: Vec<Row> = reports.iter().map(|r| r.best.clone()).collect();
    crate::db::Db::csv(&rows)
}

/// An SVG chart: TFLOP/s per shape (log scale) of the best configuration, the runner-up and
/// the default spec.
pub fn svg(reports: &[ShapeReport], title: &str) -> Result<String, ChartError> {
    let e = |x: &dyn std::fmt::Display| ChartError(x.to_string());
    let n = reports.len().max(1);
    let width = u32::try_from(n)
        .map_or(u32::MAX, |n| n.saturating_mul(26).saturating_add(160))
        .clamp(640, 4000);
    let mut text = String::new();
    {
        let root = SVGBackend::with_string(&mut text, (width, 560)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let all: Vec<f64> = reports
            .iter()
            .flat_map(|r| {
                [
                    tflops(Some(&r.best)),
                    tflops(r.runner_up.as_ref()),
                    tflops(r.default.as_ref()),
                ]
            })
            .flatten()
            .filter(|v| v.is_finite() && *v > 0.0)
            .collect();
        let (min, max) = axis(&all);
        let labels: Vec<String> = reports.iter().map(|r| r.shape.m.to_string()).collect();
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(64)
            .build_cartesian_2d(-0.5f64..(n as f64 - 0.5), (min..max * 4.0).log_scale())
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .y_max_light_lines(0)
            .x_labels(n)
            .x_label_formatter(&|x| {
                let i = x.round();
                if (x - i).abs() < 1e-6 && i >= 0.0 {
                    labels.get(i as usize).cloned().unwrap_or_default()
                } else {
                    String::new()
                }
            })
            .x_label_style(("sans-serif", 10))
            .y_desc("TFLOP/s (log)")
            .x_desc("M (tokens), grouped by N x K")
            .draw()
            .map_err(|x| e(&x))?;
        // One group per GEMM (the shapes come GEMM-major): a separator and its N x K on top.
        let mut start = 0;
        for i in 1..=reports.len() {
            let nk = |j: usize| (reports[j].shape.n, reports[j].shape.k);
            if i == reports.len() || nk(i) != nk(start) {
                let (gn, gk) = nk(start);
                let mid = (start + i - 1) as f64 / 2.0;
                chart
                    .draw_series(std::iter::once(Text::new(
                        format!("N={gn} K={gk}"),
                        (mid - 1.0, max * 2.0),
                        ("sans-serif", 12),
                    )))
                    .map_err(|x| e(&x))?;
                if i < reports.len() {
                    let x = i as f64 - 0.5;
                    chart
                        .draw_series(LineSeries::new([(x, min), (x, max * 4.0)], BLACK.mix(0.4)))
                        .map_err(|x| e(&x))?;
                }
                start = i;
            }
        }
        // Values off the axis (an absurd rate in a hand-made row) are left out, not clipped.
        let point =
            |i: usize, v: Option<f64>| v.filter(|v| (min..=max).contains(v)).map(|v| (i as f64, v));
        let (red, blue, grey) = (
            RGBColor(200, 30, 30),
            RGBColor(30, 90, 200),
            RGBColor(120, 120, 120),
        );
        let defaults: Vec<_> = reports
            .iter()
            .enumerate()
            .filter_map(|(i, r)| point(i, tflops(r.default.as_ref())))
            .collect();
        chart
            .draw_series(
                defaults
                    .iter()
                    .map(|&p| TriangleMarker::new(p, 5, grey.filled())),
            )
            .map_err(|x| e(&x))?
            .label("default spec")
            .legend(move |(x, y)| TriangleMarker::new((x + 8, y), 5, grey.filled()));
        let runners: Vec<_> = reports
            .iter()
            .enumerate()
            .filter_map(|(i, r)| point(i, tflops(r.runner_up.as_ref())))
            .collect();
        chart
            .draw_series(
                runners
                    .iter()
                    .map(|&p| Circle::new(p, 7, blue.stroke_width(2))),
            )
            .map_err(|x| e(&x))?
            .label("runner-up")
            .legend(move |(x, y)| Circle::new((x + 8, y), 6, blue.stroke_width(2)));
        let best: Vec<_> = reports
            .iter()
            .enumerate()
            .filter_map(|(i, r)| point(i, tflops(Some(&r.best))))
            .collect();
        chart
            .draw_series(best.iter().map(|&p| Circle::new(p, 4, red.filled())))
            .map_err(|x| e(&x))?
            .label("best")
            .legend(move |(x, y)| Circle::new((x + 8, y), 4, red.filled()));
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn row(m: u32, key: &str, us: Option<f64>, tflops: Option<f64>) -> Row {
        let spec = KernelSpec::preb();
        Row {
            uid: format!("{m}-{key}"),
            gfx: "gfx950".into(),
            cus: 256,
            m,
            n: 256,
            k: 512,
            cache_key: key.into(),
            kernel: format!("k|{key}`\n"),
            spec: spec.values().clone(),
            status: Status::Ok,
            reason: None,
            us,
            tflops,
            gbs: None,
            source: By::Model,
            device: "test".into(),
            repeats: 1,
            spread: 0.0,
            tilegen_version: "0".into(),
            llvm_version: "0".into(),
            compile_ms: None,
            created: 0.0,
            detail: crate::eval::Detail::Empty {},
        }
    }

    /// Any number a row can hold, finite or not, gives a report and a chart, promptly: the
    /// chart's axis once spun forever on `tflops = 1e308`.
    #[test]
    fn reports_survive_any_number() {
        let odd = [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1e308,
            -1.0,
            0.0,
            5e-324,
            1e-300,
            1e308,
            f64::MAX,
        ];
        let mut rows = Vec::new();
        for (i, &a) in odd.iter().enumerate() {
            for (j, &b) in odd.iter().enumerate() {
                let m = 16 * (1 + i as u32);
                rows.push(row(m, &format!("{j}a"), Some(a), Some(b)));
                rows.push(row(m, &format!("{j}b"), Some(b), Some(a)));
                rows.push(row(m, &format!("{j}c"), Some(1.0), Some(b)));
            }
        }
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let reports = per_shape(&rows, None);
            let out = (markdown(&reports), csv(&reports), svg(&reports, "t<&>"));
            let _ = tx.send((reports.len(), out));
        });
        let (shapes, (md, csv, svg)) = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the report finishes");
        assert_eq!(shapes, odd.len());
        let svg = svg.unwrap();
        assert!(svg.contains("<svg") && svg.contains("t&lt;&amp;&gt;"));
        let table: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
        // Only finite positive times rank.
        for line in table.iter().skip(2) {
            assert!(!line.contains("NaN") && !line.contains("inf"), "{line}");
        }
        // One row per shape; a kernel name's separators cannot make more rows or cells.
        let records = csv.lines().filter(|l| l.starts_with("gfx950,")).count();
        assert_eq!(records, odd.len(), "{csv}");
        assert!(!csv.contains("NaN") && !csv.contains("inf"), "{csv}");
        assert_eq!(table.len(), 2 + odd.len(), "{md}");
        assert!(table.iter().all(|l| l.matches('|').count() == 14), "{md}");
    }

    /// A best kernel with bf16 atomics is named below the table with its bound; an exact
    /// split-K one is not.
    #[test]
    fn a_winner_with_bf16_atomics_says_so() {
        let mut exact = row(16, "e", Some(2.0), Some(1.0));
        exact.spec = KernelSpec::preb().split_k(4).values();
        let md = markdown(&per_shape(&[exact.clone()], None));
        assert!(!md.contains("bf16 atomics"), "{md}");
        let mut atomic = row(16, "a", Some(1.0), Some(2.0));
        atomic.spec = KernelSpec::preb().split_k(4).split_k_atomic(true).values();
        let md = markdown(&per_shape(&[exact, atomic], None));
        assert!(
            md.contains("bf16 atomics") && md.contains("(up to 4)"),
            "{md}"
        );
    }

    /// A model-ranked best whose margin over the runner-up is inside the model's held-out
    /// error is marked a tie; a device-measured one never is (its spread is its own).
    #[test]
    fn margins_inside_the_model_band_are_ties() {
        let rows = vec![
            row(16, "a", Some(100.0), Some(1.0)),
            row(16, "b", Some(105.0), Some(1.0)),
            row(32, "a", Some(100.0), Some(1.0)),
            row(32, "b", Some(120.0), Some(1.0)),
        ];
        let reports = per_shape(&rows, None);
        let tie: Vec<(u32, bool)> = reports.iter().map(|r| (r.shape.m, r.within_band)).collect();
        assert_eq!(tie, [(16, true), (32, false)]);
        assert!((reports[0].margin.unwrap() - 0.05).abs() < 1e-12);
        let md = markdown(&reports);
        assert!(
            md.contains("+5.0% (tie)") && md.contains("+20.0% |"),
            "{md}"
        );
        assert!(md.contains(&tilegen_timing::HELD_OUT_ERROR.label()), "{md}");
        let measured: Vec<Row> = rows
            .into_iter()
            .map(|mut r| {
                r.source = By::Device;
                r
            })
            .collect();
        assert!(per_shape(&measured, None).iter().all(|r| !r.within_band));
    }

    #[test]
    fn the_axis_is_finite_and_bounded() {
        for values in [
            vec![],
            vec![1e-300],
            vec![1e308, 1e-300],
            vec![f64::MAX],
            vec![0.5, 3.0, 1000.0],
        ] {
            let (lo, hi) = axis(&values);
            assert!(
                lo.is_finite() && hi.is_finite() && 0.0 < lo && lo < hi,
                "{values:?}"
            );
            assert!((hi * 4.0).is_finite());
            assert!(
                (hi / lo).log10() <= MAX_DECADES + 1.0,
                "{values:?}: {lo} {hi}"
            );
            for v in values.iter().filter(|v| (1e-3..=1e300).contains(*v)) {
                assert!(*v <= hi, "{v} above {hi}");
            }
        }
        // Ordinary values keep the chart they always had.
        let (lo, hi) = axis(&[0.5, 3.0, 1000.0]);
        assert_eq!((lo, hi), (0.5 / 1.5, 1500.0));
    }
}
