//! Long loops timed from two short runs, so a prediction's cost does not grow with the trip
//! count of a kernel's main loop (a GEMM's K).
//!
//! Once a kernel's software pipeline is full, every step of its main loop costs the same, so
//! the kernel's time is affine in the number of steps: `T(s) = T(a) + (s - a) (T(b) - T(a)) /
//! (b - a)`. A launch of `s > a + b` steps is simulated with `a` and `b` steps instead. Only
//! the trip count changes between the runs (the caller rewrites the kernel argument that
//! holds it; grid, buffers, strides and addresses stay), so the caches see the same lines and
//! the long run reuses the short run's cross-XCD census. `b - a` should be a multiple of the
//! main loop's unrolling. Both runs take each round as the first one's cold time
//! (`TimingOptions::warm_rounds` off, [`LoopExtrapolation::options`]): simulating two rounds
//! together doubles a run's cost, and on AITER's GEMMs it moved the predictions by a median
//! 0.4%; the bound on a prediction's cost is what the extrapolation is for.

use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;

use crate::{CrossXcd, Params, Prediction, TimingError, TimingLaunch, TimingOptions, predict};

/// The two short runs a long loop is timed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopExtrapolation {
    /// Steps of the short run.
    pub short_steps: u32,
    /// Steps of the long run.
    pub long_steps: u32,
}

impl Default for LoopExtrapolation {
    /// 4 and 16 steps: past the deepest prologue of the GEMMs modelled (a depth-2 prefetch)
    /// and 12 steps apart, a multiple of the unrollings 2, 3, 4 and 6. The long run is what
    /// bounds a prediction's cost: with 28 steps (24 apart) the slowest AITER rows (three
    /// rounds of 256x256 workgroups at 25 to 32 steps, simulated whole) took 2 to 3 s of one
    /// core, over the model's 2 s budget; with 16 the slowest takes 1.7 s with both cores
    /// busy. Against simulating every step (`aiter-calibrate --set calibration --full-k`, the
    /// 115 calibration rows of more than 20 steps) the extrapolated time is within 1.0% at the
    /// median, 3.3% at the 90th percentile and 5.8% at worst (signed median -0.9%); 4 and 28
    /// steps gave 0.7%, 2.0% and 3.8% on the 55 rows of more than 32 steps.
    fn default() -> Self {
        LoopExtrapolation {
            short_steps: 4,
            long_steps: 16,
        }
    }
}

impl LoopExtrapolation {
    /// Whether a launch of `steps` steps is extrapolated (it runs longer than both short runs
    /// together).
    pub fn applies(&self, steps: u32) -> bool {
        steps > self.short_steps + self.long_steps
    }

    /// The options of both runs: `opts` with every round taking the first one's cold time.
    pub fn options(&self, opts: &TimingOptions) -> TimingOptions {
        TimingOptions {
            warm_rounds: false,
            ..opts.clone()
        }
    }

    /// The prediction of `steps` steps from the runs of `short_steps` (`a`) and `long_steps`
    /// (`b`): times, cycles and instructions extrapolated, utilizations from the long run.
    pub fn extrapolate(&self, a: &Prediction, b: &Prediction, steps: u32) -> Prediction {
        let (sa, sb) = (self.short_steps as f64, self.long_steps as f64);
        let f = (steps as f64 - sa) / (sb - sa);
        let line = |ya: f64, yb: f64| ya + f * (yb - ya);
        let kernel_us = line(a.us - a.launch_us, b.us - b.launch_us).max(b.us - b.launch_us);
        let mut p = b.clone();
        p.us = b.launch_us + kernel_us;
        p.cycles = line(a.cycles as f64, b.cycles as f64).max(b.cycles as f64) as u64;
        p.instructions = line(a.instructions as f64, b.instructions as f64).max(0.0) as u64;
        p.method_detail = format!(
            "{steps} loop steps extrapolated from simulations of {} and {} steps; each: {}",
            self.short_steps, self.long_steps, b.method_detail
        );
        p
    }
}

/// [`predict`] of a launch whose main loop runs `steps` steps, timed from two short runs when
/// `extrapolation` applies. `kernarg_for(s)` builds the launch's kernel argument segment with
/// the trip count set to `s` steps (`launch.kernarg` is used as is when nothing is
/// extrapolated); its error, like the model's, comes back as the caller's `E`.
#[allow(clippy::too_many_arguments)]
pub fn predict_loop<E: From<TimingError>>(
    memory: &mut DeviceMemory,
    prog: &Program,
    launch: &TimingLaunch<'_>,
    steps: u32,
    kernarg_for: &dyn Fn(u32) -> Result<Vec<u8>, E>,
    params: &Params,
    opts: &TimingOptions,
    extrapolation: Option<LoopExtrapolation>,
) -> Result<Prediction, E> {
    let Some(x) = extrapolation.filter(|x| x.applies(steps)) else {
        return Ok(predict(memory, prog, launch, params, opts)?);
    };
    let run = |memory: &mut DeviceMemory, s: u32, opts: &TimingOptions| {
        let kernarg = kernarg_for(s)?;
        let short = TimingLaunch {
            kernarg: &kernarg,
            ..*launch
        };
        Ok::<_, E>(predict(memory, prog, &short, params, opts)?)
    };
    let opts = &x.options(opts);
    let a = run(memory, x.short_steps, opts)?;
    // The long run loads the same lines first: the short run's census stands.
    let mut long_opts = opts.clone();
    if let Some(s) = &a.xcd_shares {
        long_opts.cross_xcd = CrossXcd::Known(s.clone());
    }
    let b = run(memory, x.long_steps, &long_opts)?;
    Ok(x.extrapolate(&a, &b, steps))
}
