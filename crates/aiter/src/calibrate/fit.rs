//! Fitting the timing model's free parameters on the calibration rows, and nothing else.
//!
//! # The procedure
//! The free parameters are the entries of `params.toml` whose source is an estimate or a
//! derivation ([`FREE`]); the measured and documented ones (MFMA passes, cache sizes, LDS
//! banks, ...) are not touched. The objective is the one the harness reports: the median plus
//! the 90th percentile of the absolute relative error `|predicted - measured| / measured` over
//! the [`Set::Calibration`](crate::calibrate::Set) rows (the caller passes only those).
//!
//! * The launch overhead is additive: it is never simulated. For a set of simulated kernel
//!   times it is chosen by a scan of 0 to [`MAX_LAUNCH_US`] in steps of 0.01 µs that minimises
//!   the objective, so every candidate of the other parameters is scored at its best launch
//!   overhead without running the model again.
//! * Every other parameter is fitted by coordinate descent on a multiplicative grid: from the
//!   current values, each parameter in [`FREE`] order is tried at `x (1 + s)` and `x / (1 + s)`
//!   (clamped to its range); the best of the three is kept and, while a move improves the
//!   objective, the search keeps stepping that way. A sweep visits every parameter once; the
//!   sweeps use the steps of [`STEPS`] (coarse, then fine). Each candidate is one run of the
//!   model on every calibration row (rows in parallel). The fine sweeps skip the parameters
//!   the coarse one found flat.
//! * A move is kept only if it lowers the objective by more than 0.1 percentage point. A
//!   parameter without a kept move whose trials all leave the objective within 0.5 point of
//!   the best is not identifiable from these rows: it keeps its value and its source says so.
//! * [`fit_with`] runs the same procedure on other rows (a device's measurements: their source
//!   goes with the fitted entries, [`FitOptions::source`]) and may stop after a number of
//!   candidates ([`FitOptions::max_trials`]): the parameters not tried by then keep their values
//!   and sources, and [`Fitted::untried`] names them.

use std::fmt::Write as _;

use rayon::prelude::*;
use tilegen_timing::{Number, Param, Params};

use crate::calibrate::{CalibrationRow, PredictError, TimingModel};
use crate::error::AiterError;

/// The source written for every fitted entry.
pub const CALIBRATED_SOURCE: &str = "calibrated on AITER a4w4_blockscale_tuned_gemm.csv calibration rows (32x128, 128x512, 160x256 kernels)";

/// The source of a fitted entry: `source`, after what the entry's old source said it is (the
/// text before an earlier fit's clause, which starts with "calibrated on"), so a refit keeps
/// the entry's description and its references. An estimate's source is replaced whole: the
/// value no longer comes from it.
fn fitted_source(old: &str, source: &str) -> String {
    match old.find("calibrated on") {
        Some(i) if i > 0 => format!("{}{source}", &old[..i]),
        _ => source.to_string(),
    }
}

/// Largest launch overhead the scan considers, µs.
pub const MAX_LAUNCH_US: f64 = 10.0;

/// Relative steps of the coordinate-descent sweeps.
pub const STEPS: [f64; 2] = [0.25, 0.08];

/// A move is kept only if it lowers the objective by more than this (0.1 percentage point:
/// smaller changes are the noise of discrete effects, not a better parameter).
const GAIN: f64 = 1e-3;

/// A parameter is identifiable if some trial moved the objective by more than this (0.5
/// percentage point).
const FLAT: f64 = 5e-3;

/// A free parameter: its dotted name in `params.toml`, the range the search tries and how to
/// reach it. The range lies within the entry's bound in `Params::bounds` (a test checks
/// it), so every candidate the search scores is a valid parameter table; whether the value
/// is a whole number comes from that bound.
#[derive(Clone, Copy)]
pub struct FreeParam {
    /// `table.entry` in `params.toml`.
    pub name: &'static str,
    /// Smallest value tried.
    pub min: f64,
    /// Largest value tried.
    pub max: f64,
    entry: fn(&mut Params) -> &mut Param,
}

/// The parameters the procedure fits besides the launch overhead (`clock.launch_overhead_us`),
/// in the order the sweeps visit them: the memory system from the far end in, then the small
/// latencies. The sustained clock is not among them: a published figure fixes it, and the
/// calibration rows alone put it below what AITER's fastest measured rows need.
pub const FREE: [FreeParam; 12] = [
    FreeParam {
        name: "vmem.hbm_latency_ns",
        min: 20.0,
        max: 3000.0,
        entry: |p| &mut p.vmem.hbm_latency_ns,
    },
    FreeParam {
        name: "vmem.hbm_loaded_latency_ns",
        min: 0.0,
        max: 3000.0,
        entry: |p| &mut p.vmem.hbm_loaded_latency_ns,
    },
    FreeParam {
        name: "vmem.hbm_gbs",
        min: 2000.0,
        max: 8000.0,
        entry: |p| &mut p.vmem.hbm_gbs,
    },
    FreeParam {
        name: "vmem.mall_latency_ns",
        min: 20.0,
        max: 2000.0,
        entry: |p| &mut p.vmem.mall_latency_ns,
    },
    FreeParam {
        name: "vmem.mall_gbs",
        min: 2000.0,
        max: 40000.0,
        entry: |p| &mut p.vmem.mall_gbs,
    },
    // The documented 128 B/clock of an L2 channel is a peak; the rate a channel sustains
    // under a GEMM's mix of hits, fills and write-backs is not published. Never above it.
    FreeParam {
        name: "vmem.l2_channel_bytes_per_cycle",
        min: 32.0,
        max: 128.0,
        entry: |p| &mut p.vmem.l2_channel_bytes_per_cycle,
    },
    FreeParam {
        name: "vmem.l2_hit_latency_cycles",
        min: 40.0,
        max: 2000.0,
        entry: |p| &mut p.vmem.l2_hit_latency_cycles,
    },
    FreeParam {
        name: "clock.workgroup_dispatch_cycles",
        min: 10.0,
        max: 5000.0,
        entry: |p| &mut p.clock.workgroup_dispatch_cycles,
    },
    FreeParam {
        name: "vmem.l1_hit_latency_cycles",
        min: 20.0,
        max: 1000.0,
        entry: |p| &mut p.vmem.l1_hit_latency_cycles,
    },
    FreeParam {
        name: "salu.smem_latency_cycles",
        min: 20.0,
        max: 2000.0,
        entry: |p| &mut p.salu.smem_latency_cycles,
    },
    FreeParam {
        name: "vmem.store_ack_latency_cycles",
        min: 20.0,
        max: 4000.0,
        entry: |p| &mut p.vmem.store_ack_latency_cycles,
    },
    FreeParam {
        name: "issue.barrier_latency_cycles",
        min: 4.0,
        max: 400.0,
        entry: |p| &mut p.issue.barrier_latency_cycles,
    },
];

impl FreeParam {
    /// Whether the entry holds whole numbers (cycles), as its bound says.
    pub fn integer(&self) -> bool {
        Params::bound(self.name).is_some_and(|b| b.number != Number::Real)
    }

    /// The parameter's value in `p`.
    pub fn get(&self, p: &Params) -> f64 {
        let mut q = p.clone();
        (self.entry)(&mut q).value
    }

    /// `p` with this parameter at `v` (clamped to the range, rounded if whole).
    pub fn with(&self, p: &Params, v: f64) -> Params {
        let mut q = p.clone();
        let v = v.clamp(self.min, self.max);
        (self.entry)(&mut q).value = if self.integer() { v.round() } else { v };
        q
    }

    fn set_source(&self, p: &mut Params, source: String) {
        (self.entry)(p).source = source;
    }
}

/// Median plus 90th percentile (nearest rank) of the absolute relative errors of
/// `kernel_us + launch_us` against `measured`.
pub fn objective(kernel_us: &[f64], measured: &[f64], launch_us: f64) -> f64 {
    let mut e: Vec<f64> = kernel_us
        .iter()
        .zip(measured)
        .map(|(k, m)| (k + launch_us - m).abs() / m)
        .collect();
    if e.is_empty() {
        return f64::INFINITY;
    }
    e.sort_by(f64::total_cmp);
    let q = |p: f64| e[((p * e.len() as f64).ceil() as usize).clamp(1, e.len()) - 1];
    q(0.5) + q(0.9)
}

/// The launch overhead (0 to [`MAX_LAUNCH_US`], 0.01 µs steps) minimising [`objective`], and
/// the objective there.
pub fn best_launch(kernel_us: &[f64], measured: &[f64]) -> (f64, f64) {
    (0..=(MAX_LAUNCH_US * 100.0) as u32)
        .map(|i| {
            let l = i as f64 / 100.0;
            (l, objective(kernel_us, measured, l))
        })
        .fold((0.0, f64::INFINITY), |a, b| if b.1 < a.1 { b } else { a })
}

/// One candidate the search scored.
#[derive(Debug, Clone)]
pub struct Trial {
    /// The parameter moved (`None`: the starting point).
    pub param: Option<&'static str>,
    /// Its value.
    pub value: f64,
    /// Best launch overhead for it, µs.
    pub launch_us: f64,
    /// Objective (median + p90) at that launch overhead.
    pub objective: f64,
    /// CPU seconds the model took over all rows.
    pub cpu_seconds: f64,
}

/// What the procedure found.
pub struct Fitted {
    /// The fitted parameters (every fitted entry's source set).
    pub params: Params,
    /// Objective of the starting parameters (with their best launch overhead).
    pub start_objective: f64,
    /// Objective of the fitted parameters.
    pub objective: f64,
    /// `(name, start value, fitted value, identifiable)` per free parameter, launch first.
    pub values: Vec<(&'static str, f64, f64, bool)>,
    /// Every candidate scored, in order.
    pub trials: Vec<Trial>,
    /// The candidate limit the search stopped at, if it stopped there
    /// ([`FitOptions::max_trials`]); the parameters it had not tried yet keep their values.
    pub stopped_at: Option<usize>,
    /// The free parameters never tried because the search stopped at its limit.
    pub untried: Vec<&'static str>,
}

impl Fitted {
    /// The fitted entries as a `params.toml` override (each with its source).
    pub fn toml(&self) -> String {
        let mut by_table: Vec<(&str, Vec<(&str, Param)>)> = Vec::new();
        let launch = (
            "clock.launch_overhead_us",
            self.params.clock.launch_overhead_us.clone(),
        );
        let entries = std::iter::once(launch).chain(
            FREE.iter()
                .map(|f| (f.name, (f.entry)(&mut self.params.clone()).clone())),
        );
        for (name, param) in entries {
            let (table, key) = name.split_once('.').unwrap_or(("", name));
            match by_table.iter_mut().find(|(t, _)| *t == table) {
                Some((_, v)) => v.push((key, param)),
                None => by_table.push((table, vec![(key, param)])),
            }
        }
        let mut s = String::from(
            "# Timing-model parameters fitted by `aiter-calibrate --fit` on the calibration rows\n",
        );
        for (table, entries) in by_table {
            let _ = writeln!(s, "\n[{table}]");
            for (key, p) in entries {
                let _ = writeln!(
                    s,
                    "{key} = {{ value = {}, source = {:?} }}",
                    format_value(p.value),
                    p.source
                );
            }
        }
        s
    }

    /// The procedure's outcome in words.
    pub fn report(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "fit on the calibration rows: median + p90 {:.1}% -> {:.1}% after {} candidates ({:.0} s of model CPU time){}",
            100.0 * self.start_objective,
            100.0 * self.objective,
            self.trials.len(),
            self.trials.iter().map(|t| t.cpu_seconds).sum::<f64>(),
            match self.stopped_at {
                Some(n) => format!(", stopped at the limit of {n} candidates"),
                None => String::new(),
            }
        );
        for (name, from, to, identifiable) in &self.values {
            let note = if self.untried.contains(name) {
                "  (not tried: outside --fit-only or past the candidate limit; kept)"
            } else if *identifiable {
                ""
            } else {
                "  (not identifiable: kept)"
            };
            let _ = writeln!(
                s,
                "  {name:<34} {:>10} -> {:>10}{note}",
                format_value(*from),
                format_value(*to),
            );
        }
        s
    }
}

/// `text` (a `params.toml`) with the entries the fit owns (the launch overhead and
/// [`FREE`]) replaced by their values and sources in `params`; every other line is kept.
pub fn update_params_toml(text: &str, params: &Params) -> String {
    let mut owned: Vec<(&str, Param)> = vec![(
        "clock.launch_overhead_us",
        params.clock.launch_overhead_us.clone(),
    )];
    owned.extend(
        FREE.iter()
            .map(|f| (f.name, (f.entry)(&mut params.clone()).clone())),
    );
    let mut table = String::new();
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('[') && !t.starts_with("[[") {
            table = t.trim_matches(|c| c == '[' || c == ']').trim().to_string();
        } else if t.starts_with("[[") {
            table = t.trim_matches(|c| c == '[' || c == ']').trim().to_string();
        }
        let key = t.split_once('=').map(|(k, _)| k.trim());
        let hit = key.and_then(|k| {
            owned
                .iter()
                .find(|(name, _)| *name == format!("{table}.{k}"))
        });
        match hit {
            Some((name, p)) if t.contains("value") => {
                let key = name.split_once('.').map_or(*name, |(_, k)| k);
                let _ = writeln!(
                    out,
                    "{key} = {{ value = {}, source = {:?} }}",
                    format_value(p.value),
                    p.source
                );
            }
            _ => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
    out
}

fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v:.4}")
            .trim_end_matches('0')
            .trim_end_matches('.')
            .to_string()
    }
}

/// Simulated kernel times (without launch overhead) of `rows` under `params`, in row order,
/// and the model's CPU seconds over all rows.
pub fn kernel_times(
    rows: &[CalibrationRow],
    params: &Params,
) -> Result<(Vec<f64>, f64), PredictError> {
    let model = TimingModel::new(params.clone());
    let runs: Vec<(f64, f64)> = rows
        .par_iter()
        .map(|r| {
            let (p, cpu) = model.run(r.row(), r.kernel())?;
            Ok((p.us - p.launch_us, cpu))
        })
        .collect::<Result<_, PredictError>>()?;
    Ok((
        runs.iter().map(|r| r.0).collect(),
        runs.iter().map(|r| r.1).sum(),
    ))
}

/// How [`fit_with`] runs: where the evidence comes from, and how many candidates it may score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FitOptions {
    source: String,
    max_trials: Option<usize>,
    only: Option<Vec<&'static str>>,
}

impl Default for FitOptions {
    /// The procedure on AITER's table: [`CALIBRATED_SOURCE`], no candidate limit.
    fn default() -> Self {
        FitOptions {
            source: CALIBRATED_SOURCE.to_string(),
            max_trials: None,
            only: None,
        }
    }
}

impl FitOptions {
    /// The source written for every fitted entry (what the rows are and where they were
    /// measured, worded as [`CALIBRATED_SOURCE`] is: `calibrated on ...`); [`CALIBRATED_SOURCE`]
    /// by default.
    pub fn source(mut self, source: impl Into<String>) -> Self {
        self.source = source.into();
        self
    }

    /// Stops the search after `n` candidates (the starting point is the first; at least 1),
    /// keeping the best found: a quick, partial fit. `None` (the default) runs the procedure
    /// to its end.
    pub fn max_trials(mut self, n: Option<usize>) -> Self {
        self.max_trials = n;
        self
    }

    /// Fits only the named entries of [`FREE`] (the launch overhead is always scanned): the
    /// others keep their values and sources, and [`Fitted::untried`] names them. For refitting
    /// a parameter a model change has left stale without moving the rest. Refused when a name
    /// is not in [`FREE`] or no name is given.
    pub fn only<S: AsRef<str>>(mut self, names: &[S]) -> Result<Self, AiterError> {
        if names.is_empty() {
            return Err(fit_err(
                "an empty list of parameters to fit leaves nothing to fit".into(),
            ));
        }
        let mut only = Vec::with_capacity(names.len());
        for name in names {
            let name = name.as_ref();
            let Some(f) = FREE.iter().find(|f| f.name == name) else {
                return Err(fit_err(format!(
                    "`{name}` is not a free parameter of the fit (those are: {})",
                    FREE.map(|f| f.name).join(", ")
                )));
            };
            only.push(f.name);
        }
        self.only = Some(only);
        Ok(self)
    }

    /// The source written for every fitted entry.
    pub fn source_text(&self) -> &str {
        &self.source
    }

    /// The candidate limit, if any.
    pub fn trial_limit(&self) -> Option<usize> {
        self.max_trials
    }
}

/// The timing model's fit refused, with why.
fn fit_err(problem: String) -> AiterError {
    AiterError::Fit {
        predictor: TimingModel::NAME.into(),
        problem,
    }
}

/// Fits the free parameters of `start` on `rows` (pass the calibration rows only) by the
/// procedure of the module documentation; `log` receives a line per candidate.
pub fn fit(
    rows: &[CalibrationRow],
    start: &Params,
    log: &mut dyn FnMut(&str),
) -> Result<Fitted, AiterError> {
    fit_with(rows, start, &FitOptions::default(), log)
}

/// [`fit`] with `options`: the fitted entries' source, and a limit on the candidates scored.
pub fn fit_with(
    rows: &[CalibrationRow],
    start: &Params,
    options: &FitOptions,
    log: &mut dyn FnMut(&str),
) -> Result<Fitted, AiterError> {
    if rows.is_empty() {
        return Err(fit_err("no calibration rows".into()));
    }
    if options.max_trials == Some(0) {
        return Err(fit_err(
            "a limit of 0 candidates leaves not even the starting point to score (at least 1)"
                .into(),
        ));
    }
    let source = options.source.as_str();
    let limit = options.max_trials.unwrap_or(usize::MAX);
    let measured: Vec<f64> = rows.iter().map(|r| r.row().us()).collect();
    let mut trials = Vec::new();
    let score = |params: &Params,
                 param: Option<&'static str>,
                 value: f64,
                 trials: &mut Vec<Trial>,
                 log: &mut dyn FnMut(&str)|
     -> Result<(f64, f64), AiterError> {
        let (k, cpu) = kernel_times(rows, params)
            .map_err(|e| fit_err(format!("the model failed on a calibration row: {e}")))?;
        let (launch, obj) = best_launch(&k, &measured);
        log(&format!(
            "  {:<34} {:>10}  launch {launch:5.2} us  median+p90 {:6.2}%  ({cpu:.0} s CPU)",
            param.unwrap_or("start"),
            format_value(value),
            100.0 * obj
        ));
        trials.push(Trial {
            param,
            value,
            launch_us: launch,
            objective: obj,
            cpu_seconds: cpu,
        });
        Ok((launch, obj))
    };
    let mut cur = start.clone();
    let (mut launch, start_objective) = score(&cur, None, 0.0, &mut trials, log)?;
    let mut best = start_objective;
    let mut sensitive = [false; FREE.len()];
    let mut tried = [false; FREE.len()];
    let mut stopped_at = None;
    'search: for (sweep, &step) in STEPS.iter().enumerate() {
        log(&format!(
            "sweep {} (steps of {:.0}%)",
            sweep + 1,
            100.0 * step
        ));
        for (i, f) in FREE.iter().enumerate() {
            if sweep > 0 && !sensitive[i] {
                // Flat in the coarse sweep: the fine one would be flat too.
                continue;
            }
            if options
                .only
                .as_ref()
                .is_some_and(|only| !only.contains(&f.name))
            {
                continue;
            }
            let x0 = f.get(&cur);
            let mut moved = false;
            for dir in [1.0 + step, 1.0 / (1.0 + step)] {
                let mut x = x0;
                loop {
                    let next = f.with(&cur, x * dir);
                    let xn = f.get(&next);
                    if xn == f.get(&cur) {
                        break;
                    }
                    if trials.len() >= limit {
                        log(&format!("stopped at the limit of {limit} candidates"));
                        stopped_at = Some(limit);
                        break 'search;
                    }
                    tried[i] = true;
                    let (l, obj) = score(&next, Some(f.name), xn, &mut trials, log)?;
                    if (obj - best).abs() > FLAT {
                        sensitive[i] = true;
                    }
                    if obj < best - GAIN {
                        // A kept move is evidence enough: the parameter is fitted.
                        sensitive[i] = true;
                        (cur, best, launch, x, moved) = (next, obj, l, xn, true);
                    } else {
                        break;
                    }
                }
                if moved {
                    break;
                }
            }
        }
    }
    let mut params = cur;
    params.clock.launch_overhead_us.value = launch;
    params.clock.launch_overhead_us.source =
        fitted_source(&start.clock.launch_overhead_us.source, source);
    let mut values = vec![(
        "clock.launch_overhead_us",
        start.clock.launch_overhead_us.value,
        launch,
        true,
    )];
    let mut untried = Vec::new();
    for (i, f) in FREE.iter().enumerate() {
        let from = f.get(start);
        let to = f.get(&params);
        if sensitive[i] {
            let old = (f.entry)(&mut params.clone()).source.clone();
            f.set_source(&mut params, fitted_source(&old, source));
        } else if !tried[i] {
            // Never moved: the value and its source are the start's.
            untried.push(f.name);
        } else {
            let old = (f.entry)(&mut params.clone()).source.clone();
            let note = if source == CALIBRATED_SOURCE {
                "not identifiable on the AITER calibration rows (the fit's trials left the error unchanged)".to_string()
            } else {
                format!(
                    "not identifiable when {source} (the fit's trials left the error unchanged)"
                )
            };
            let source = if old.starts_with(source) {
                format!("{source}; flat in the last fit, value kept")
            } else if old.ends_with(&note) {
                old
            } else {
                format!("{old}; {note}")
            };
            f.set_source(&mut params, source);
        }
        values.push((f.name, from, to, sensitive[i]));
    }
    Ok(Fitted {
        params,
        start_objective,
        objective: best,
        values,
        trials,
        stopped_at,
        untried,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objective_is_median_plus_p90_and_launch_is_scanned() {
        let measured = [10.0; 10];
        let kernel: Vec<f64> = (0..10).map(|i| 7.0 + i as f64 * 0.1).collect();
        // Errors at launch 2: |7.0 + 0.1 i + 2 - 10| / 10 = 0.1 - 0.01 i, i.e. 0.01 to 0.10:
        // the 5th (median) and 9th (p90) smallest are 0.05 and 0.09.
        let o = objective(&kernel, &measured, 2.0);
        assert!((o - (0.05 + 0.09)).abs() < 1e-12, "{o}");
        let (l, best) = best_launch(&kernel, &measured);
        assert!(best < o && (2.0..=3.0).contains(&l), "{l} {best}");
    }

    #[test]
    fn only_names_free_parameters() {
        let o = FitOptions::default()
            .only(&["vmem.l2_channel_bytes_per_cycle"])
            .unwrap();
        assert_eq!(o.only, Some(vec!["vmem.l2_channel_bytes_per_cycle"]));
        let e = FitOptions::default()
            .only(&["clock.mfma_sustained_ghz"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("clock.mfma_sustained_ghz") && e.contains("vmem.hbm_gbs"),
            "{e}"
        );
        let none: [&str; 0] = [];
        assert!(FitOptions::default().only(&none).is_err());
    }

    #[test]
    fn the_search_ranges_lie_within_the_parameter_bounds() {
        for f in FREE {
            let b = Params::bound(f.name).unwrap_or_else(|| panic!("{} has no bound", f.name));
            assert!(
                b.min <= f.min && f.min < f.max && f.max <= b.max,
                "{}: tried from {} to {}, bound {b}",
                f.name,
                f.min,
                f.max
            );
            // Every candidate (rounded where whole) is a value the model accepts.
            for v in [f.min, f.max, (f.min + f.max) / 2.0] {
                let x = f.get(&f.with(&Params::mi355x(), v));
                assert!(b.admits(x), "{} = {x}", f.name);
            }
        }
        // Clock cycles are whole numbers; times in ns, rates and clocks are not.
        for f in FREE {
            assert_eq!(f.integer(), f.name.ends_with("_cycles"), "{}", f.name);
        }
        let launch = Params::bound("clock.launch_overhead_us").unwrap();
        assert!(launch.min <= 0.0 && MAX_LAUNCH_US <= launch.max);
        for l in [0.0, 0.01 * (MAX_LAUNCH_US * 100.0).floor()] {
            assert!(launch.admits(l));
        }
    }

    #[test]
    fn a_limit_of_no_candidate_is_refused_before_the_model_runs() {
        let k = crate::kernel::tests::kernel(32, 128, false);
        let rows = [crate::calibrate::tests::crow(1, 256, 512, 5.0, &k)];
        let options = FitOptions::default().max_trials(Some(0));
        let e = fit_with(&rows, &Params::mi355x(), &options, &mut |_| {})
            .err()
            .expect("refused");
        assert!(e.to_string().contains("at least 1"), "{e}");
        assert_eq!(FitOptions::default().source_text(), CALIBRATED_SOURCE);
        assert_eq!(FitOptions::default().trial_limit(), None);
    }

    #[test]
    fn free_parameters_round_trip_and_clamp() {
        let p = Params::mi355x();
        for f in FREE {
            let v = f.get(&p);
            assert!(
                v >= f.min && v <= f.max,
                "{} = {v} outside its range",
                f.name
            );
            assert_eq!(f.get(&f.with(&p, v)), v);
            assert_eq!(f.get(&f.with(&p, f.max * 10.0)), f.max);
        }
        let dispatch = FREE
            .iter()
            .find(|f| f.name == "clock.workgroup_dispatch_cycles")
            .expect("the dispatch cycles are fitted");
        let q = dispatch.with(&p, 123.4);
        assert_eq!(q.clock.workgroup_dispatch_cycles.value, 123.0);
    }

    #[test]
    fn a_refit_keeps_the_description_before_the_calibration() {
        let new = "calibrated on other rows";
        assert_eq!(
            super::fitted_source(
                "the rate a channel sustains (docs, Memory); calibrated on AITER rows; refitted",
                new
            ),
            "the rate a channel sustains (docs, Memory); calibrated on other rows"
        );
        assert_eq!(super::fitted_source("calibrated on AITER rows", new), new);
        assert_eq!(
            super::fitted_source("estimate (a microbenchmark); calibrate", new),
            new
        );
    }

    #[test]
    fn the_override_names_every_fitted_entry_with_its_source() {
        let mut params = Params::mi355x();
        params.vmem.hbm_latency_ns.value = 300.0;
        params.vmem.hbm_latency_ns.source = CALIBRATED_SOURCE.into();
        let f = Fitted {
            params,
            start_objective: 1.0,
            objective: 0.5,
            values: vec![],
            trials: vec![],
            stopped_at: None,
            untried: vec![],
        };
        let toml = f.toml();
        let back = Params::from_toml_str(&toml).unwrap();
        assert_eq!(back.vmem.hbm_latency_ns.value, 300.0);
        assert_eq!(back.vmem.hbm_latency_ns.source, CALIBRATED_SOURCE);
        for name in FREE.iter().map(|f| f.name) {
            let key = name.split_once('.').unwrap().1;
            assert!(toml.contains(&format!("{key} = ")), "{name}");
        }
        // Written into the embedded table, the fitted entries change and nothing else.
        let updated = update_params_toml(Params::DEFAULT_TOML, &f.params);
        let reread = Params::from_toml_str(&updated).unwrap();
        assert_eq!(reread, f.params);
        assert_eq!(
            updated.lines().count(),
            Params::DEFAULT_TOML.lines().count()
        );
        let changed: Vec<(&str, &str)> = updated
            .lines()
            .zip(Params::DEFAULT_TOML.lines())
            .filter(|(a, b)| a != b)
            .collect();
        assert_eq!(changed.len(), 1, "{changed:?}");
        assert!(changed[0].0.starts_with("hbm_latency_ns = { value = 300, "));
    }
}
