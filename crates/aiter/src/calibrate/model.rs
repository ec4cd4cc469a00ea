//! The cycle-level timing model of `tilegen_timing` as a [`Predictor`]: each row's real
//! launch (AITER's code object, its grid, its argument block bound to lazily zeroed buffers of
//! the row's sizes) is simulated and its predicted time returned.
//!
//! Decoded programs are cached per code object in a pool of workers (one device memory with
//! every code object loaded once, reused by the rows a worker runs; the row's buffers are
//! freed after it). The CPU time each row took is kept, so the harness can report the model's
//! cost against its budget (2 s of one core per row).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use tilegen_codeobj::CodeObject;
use tilegen_emu::exec::memory::{GUARD, PAGE};
use tilegen_emu::exec::{AllocError, DeviceMemory, Program};
use tilegen_timing::{
    self as timing, Bound, CrossXcd, LoopExtrapolation, Params, Prediction, TimingLaunch,
    TimingOptions,
};

use crate::calibrate::{PredictError, Predictor, describe_row};
use crate::error::AiterError;
use crate::kernargs::{Field, GemmLaunch, GemmProblem, K_STEP};
use crate::kernel::F4GemmKernel;
use crate::launch::LaunchDescription;
use crate::table::TableRow;

/// What one row's simulation produced, beyond the time.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelRun {
    /// The row's table ([`TableRow::table`]).
    pub table: u32,
    /// The row's line in the table.
    pub line: u64,
    /// Predicted time (kernel plus launch overhead), µs.
    pub us: f64,
    /// Of which launch overhead, µs.
    pub launch_us: f64,
    /// Kernel cycles.
    pub cycles: u64,
    /// Clock the cycles were converted with, GHz.
    pub clock_ghz: f64,
    /// What bounds the kernel.
    pub bound: Bound,
    /// Fraction of SIMD time the matrix cores are busy.
    pub mfma_busy: f64,
    /// Achieved HBM bandwidth, GB/s.
    pub hbm_gbs: f64,
    /// Rounds of resident workgroups on the busiest XCD.
    pub rounds: u64,
    /// Instructions simulated.
    pub instructions: u64,
    /// CPU seconds the prediction took on its thread.
    pub cpu_seconds: f64,
}

impl ModelRun {
    /// The kernel part of the time, µs.
    pub fn kernel_us(&self) -> f64 {
        self.us - self.launch_us
    }

    fn of((table, line): (u32, u64), p: &Prediction, cpu_seconds: f64) -> ModelRun {
        ModelRun {
            table,
            line,
            us: p.us,
            launch_us: p.launch_us,
            cycles: p.cycles,
            clock_ghz: p.clock_ghz,
            bound: p.bound,
            mfma_busy: p.mfma_busy,
            hbm_gbs: p.hbm_gbs,
            rounds: p.rounds,
            instructions: p.instructions,
            cpu_seconds,
        }
    }
}

/// A device memory with code objects loaded into it.
struct Worker {
    memory: DeviceMemory,
    programs: HashMap<(PathBuf, String), Program>,
}

impl Worker {
    fn new() -> Worker {
        Worker {
            memory: DeviceMemory::new(),
            programs: HashMap::new(),
        }
    }

    /// The program of `kernel`, loaded on first use.
    fn program(&mut self, kernel: &F4GemmKernel) -> Result<&Program, PredictError> {
        let key = (kernel.path().to_path_buf(), kernel.symbol().to_string());
        if !self.programs.contains_key(&key) {
            let image = kernel.load()?;
            let co = CodeObject::parse(image.bytes()).map_err(|source| AiterError::CodeObject {
                path: kernel.path().to_path_buf(),
                source,
            })?;
            let prog = Program::load(&mut self.memory, &co, kernel.symbol())
                .map_err(|e| PredictError::Model(Box::new(e)))?;
            self.programs.insert(key.clone(), prog);
        }
        Ok(&self.programs[&key])
    }
}

/// The cycle-level MI355X timing model run on each row's launch.
pub struct TimingModel {
    name: String,
    params: Params,
    options: TimingOptions,
    extrapolation: Option<LoopExtrapolation>,
    workers: Mutex<Vec<Worker>>,
    runs: Mutex<Vec<ModelRun>>,
}

impl TimingModel {
    /// The predictor's default name.
    pub const NAME: &'static str = "timing-model";

    /// The model with `params` and the default options (sampled rounds).
    pub fn new(params: Params) -> TimingModel {
        Self::with_options(params, TimingOptions::default())
    }

    /// The model with `params` and `options`.
    pub fn with_options(params: Params, options: TimingOptions) -> TimingModel {
        TimingModel {
            name: Self::NAME.to_string(),
            params,
            options,
            extrapolation: Some(LoopExtrapolation::default()),
            workers: Mutex::new(Vec::new()),
            runs: Mutex::new(Vec::new()),
        }
    }

    /// The same model under another name (a CSV column and plot of its own).
    pub fn named(mut self, name: impl Into<String>) -> TimingModel {
        self.name = name.into();
        self
    }

    /// Times long K loops from two short runs (the default, [`LoopExtrapolation::default`]) or,
    /// with `None`, simulates every K step.
    pub fn extrapolating(mut self, x: Option<LoopExtrapolation>) -> TimingModel {
        self.extrapolation = x;
        self
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.params
    }

    /// Every run so far (in completion order), and forgets them.
    pub fn take_runs(&self) -> Vec<ModelRun> {
        std::mem::take(&mut *self.runs.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Simulates `row`'s launch of `kernel` and returns the prediction and the CPU seconds it
    /// took on this thread. With [`LoopExtrapolation`], a launch of more K steps than the two
    /// short runs together is timed from those two runs (see [`LoopExtrapolation`]).
    pub fn run(
        &self,
        row: &TableRow,
        kernel: &F4GemmKernel,
    ) -> Result<(Prediction, f64), PredictError> {
        self.run_described(
            &describe_row(row, kernel)?,
            kernel,
            (row.table(), row.line()),
        )
    }

    /// Simulates `kernel` on `problem`, a shape the table need not hold (comparisons with
    /// tilegen's kernels on the same model); the run is recorded with line 0.
    pub fn run_problem(
        &self,
        problem: GemmProblem,
        kernel: &F4GemmKernel,
    ) -> Result<(Prediction, f64), PredictError> {
        let launch = GemmLaunch::new(kernel, problem).map_err(AiterError::from)?;
        self.run_described(&LaunchDescription::new(&launch), kernel, (0, 0))
    }

    fn run_described(
        &self,
        desc: &LaunchDescription,
        kernel: &F4GemmKernel,
        line: (u32, u64),
    ) -> Result<(Prediction, f64), PredictError> {
        let mut worker = self
            .workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop()
            .unwrap_or_else(Worker::new);
        let start = (thread_cpu_seconds(), Instant::now());
        let steps = desc.launch().k_per_split() / K_STEP;
        let log2_split = desc.launch().problem().log2_k_split();
        let result = match self.extrapolation {
            Some(x) if x.applies(steps) => {
                let k_of = |s: u32| (s * K_STEP) << log2_split;
                let options = x.options(&self.options);
                let short = self.simulate(
                    &mut worker,
                    kernel,
                    desc,
                    Some(k_of(x.short_steps)),
                    &options,
                );
                short.and_then(|a| {
                    // The long run loads the same lines first: the short run's census stands.
                    let mut options = options.clone();
                    if let Some(s) = &a.xcd_shares {
                        options.cross_xcd = CrossXcd::Known(s.clone());
                    }
                    let b = self.simulate(
                        &mut worker,
                        kernel,
                        desc,
                        Some(k_of(x.long_steps)),
                        &options,
                    )?;
                    Ok(x.extrapolate(&a, &b, steps))
                })
            }
            _ => self.simulate(&mut worker, kernel, desc, None, &self.options),
        };
        let cpu = match (start.0, thread_cpu_seconds()) {
            (Some(a), Some(b)) => b - a,
            _ => start.1.elapsed().as_secs_f64(),
        };
        self.workers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(worker);
        let p = result?;
        self.runs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ModelRun::of(line, &p, cpu));
        Ok((p, cpu))
    }

    /// One simulation of `desc` (with the argument block's K replaced by `k`, if given).
    fn simulate(
        &self,
        worker: &mut Worker,
        kernel: &F4GemmKernel,
        desc: &LaunchDescription,
        k: Option<u32>,
        options: &TimingOptions,
    ) -> Result<Prediction, PredictError> {
        let model = |e: Box<dyn std::error::Error + Send + Sync>| PredictError::Model(e);
        worker.program(kernel)?;
        align_next_allocation(&mut worker.memory, ROW_ALIGN).map_err(|e| model(Box::new(e)))?;
        let mut addresses = Vec::new();
        let mut failed = None;
        for b in desc.buffers() {
            match worker.memory.alloc_lazy(b.bytes().max(1)) {
                Ok(a) => addresses.push(a),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let result = match failed {
            Some(e) => Err(model(Box::new(e))),
            None => (|| {
                let mut kernarg = desc.bind(&addresses).map_err(|e| model(Box::new(e)))?;
                if let Some(k) = k {
                    let at = Field::K.offset();
                    kernarg[at..at + 4].copy_from_slice(&k.to_le_bytes());
                }
                let key = (kernel.path().to_path_buf(), kernel.symbol().to_string());
                let prog = &worker.programs[&key];
                let launch = TimingLaunch {
                    grid: desc.grid(),
                    block: desc.block(),
                    dynamic_lds: desc.dynamic_lds(),
                    kernarg: &kernarg,
                };
                timing::predict(&mut worker.memory, prog, &launch, &self.params, options)
                    .map_err(|e| model(Box::new(e)))
            })(),
        };
        for a in addresses {
            let _ = worker.memory.free(a);
        }
        result
    }
}

impl Predictor for TimingModel {
    fn name(&self) -> &str {
        &self.name
    }

    fn summary(&self) -> String {
        let c = &self.params.clock;
        let v = &self.params.vmem;
        format!(
            "{}: cycle-level MI355X model (tilegen_timing) of each row's launch; clock {:.3} GHz under MFMA load, launch {:.2} us, HBM {:.0} GB/s, MALL {:.0} GB/s",
            self.name,
            c.mfma_sustained_ghz.get(),
            c.launch_overhead_us.get(),
            v.hbm_gbs.get(),
            v.mall_gbs.get()
        )
    }

    fn predict_us(&self, row: &TableRow, kernel: &F4GemmKernel) -> Result<f64, PredictError> {
        Ok(self.run(row, kernel)?.0.us)
    }
}

/// Every row's buffers start at a multiple of this (4 GiB): the caches index lines by their
/// addresses, so a row must not see different sets depending on which rows a worker ran
/// before it (predictions are reproducible whatever the thread schedule).
const ROW_ALIGN: u64 = 1 << 32;

/// Makes `memory`'s next allocation start at a multiple of `align` (bases only grow: a lazy
/// padding allocation, which costs 8 bytes of page table per 64 KiB, is made and freed).
fn align_next_allocation(memory: &mut DeviceMemory, align: u64) -> Result<(), AllocError> {
    let probe = memory.alloc_lazy(1)?;
    memory.free(probe)?;
    // The allocator's next base after the probe.
    let next = (probe + 1 + GUARD).next_multiple_of(PAGE);
    let mut target = next.next_multiple_of(align);
    if target < next + GUARD + PAGE {
        target += align;
    }
    // A padding allocation at `next` whose end plus the guard reaches `target`.
    let pad = memory.alloc_lazy(target - next - GUARD)?;
    memory.free(pad)?;
    Ok(())
}

/// CPU time of the calling thread: Linux `/proc/thread-self/schedstat` (nanoseconds on the
/// CPU), so the cost is the model's own and not the load of a shared machine.
pub fn thread_cpu_seconds() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    let ns: u64 = s.split_whitespace().next()?.parse().ok()?;
    Some(ns as f64 * 1e-9)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_start_at_aligned_addresses() {
        let mut m = DeviceMemory::new();
        let _ = m.alloc(12_345).unwrap();
        for size in [1u64, 100_000, 7 << 20] {
            align_next_allocation(&mut m, ROW_ALIGN).unwrap();
            let a = m.alloc_lazy(size).unwrap();
            assert_eq!(a % ROW_ALIGN, 0, "{a:#x}");
            let b = m.alloc_lazy(size).unwrap();
            m.free(a).unwrap();
            m.free(b).unwrap();
        }
    }
}
