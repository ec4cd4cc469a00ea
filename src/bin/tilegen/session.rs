//! A command's device session: the device `--device` chooses, opened with the emulator's
//! limits and Ctrl-C wired to stop a launch; a progress bar while an emulated launch runs; and
//! runtime errors in the command line's words.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Result, anyhow};
use tilegen::emu::exec::{AllocError, FaultKind, LimitError, LoadError};
use tilegen::runtime::select::{AnyDevice, Chosen};
use tilegen::runtime::{
    Device, DeviceChoice, EmuConfig, HsaOptions, LaunchControl, Limits, RuntimeError, choose,
};
use tilegen_output::OutputError;

/// The device a command runs its kernels on, and how its launches are watched.
pub struct Session {
    chosen: Chosen,
    /// The emulator's progress counters and stop flag (inert on a GPU).
    control: LaunchControl,
    show_progress: bool,
}

impl Session {
    /// Opens the device `choice` names (the emulator within `limits`), telling stderr which
    /// and why. From now on Ctrl-C (SIGINT/SIGTERM) stops the emulation, or the wait for a GPU,
    /// at its next check, and the command fails with "interrupted" (exit status 130). Launches
    /// on the emulator show their progress on stderr when it is a terminal, unless `quiet`.
    pub fn open(choice: DeviceChoice, limits: Limits, quiet: bool) -> Result<Session> {
        let cancel = tilegen_output::interrupt_flag();
        let emu = EmuConfig {
            limits,
            control: LaunchControl::with_cancel_flag(cancel.clone()),
            ..EmuConfig::default()
        };
        let chosen = choose(choice, emu, HsaOptions::new().cancel_flag(cancel))?;
        eprintln!("device: {}", chosen.reason());
        let emulated = chosen.device().as_emu();
        let control = emulated.map(|e| e.control().clone()).unwrap_or_default();
        let show_progress = !quiet && emulated.is_some() && std::io::stderr().is_terminal();
        Ok(Session {
            chosen,
            control,
            show_progress,
        })
    }

    /// The device.
    pub fn device(&self) -> &AnyDevice {
        self.chosen.device()
    }

    /// Whether the device is the emulator.
    pub fn is_emulated(&self) -> bool {
        self.device().as_emu().is_some()
    }

    /// Runs `launch` on the device behind the progress bar.
    pub fn launch<T>(&self, launch: impl FnOnce(&dyn Device) -> T) -> T {
        let progress = Progress::start(&self.control, self.show_progress);
        let result = launch(self.device());
        progress.finish();
        result
    }

    /// `e` as the command line reports it (see [`cli_error`]).
    pub fn error(&self, e: RuntimeError) -> anyhow::Error {
        cli_error(e, &self.control)
    }
}

/// A limit error in the command line's words: what was asked, the limit, and the flag that
/// raises it.
pub fn limit_text(e: &LimitError) -> String {
    match e {
        LimitError::Memory {
            what,
            requested,
            in_use,
            limit,
        } => format!(
            "{what} needs {requested} bytes, more than the {} bytes left of the device memory limit of {limit} bytes ({in_use} in use); raise the limit with --max-memory BYTES",
            limit.saturating_sub(*in_use)
        ),
        LimitError::HostMemory { what, requested } => format!(
            "the host could not allocate {requested} bytes for {what} (within --max-memory, but more than the machine has free)"
        ),
        LimitError::Overflow { what } => format!("the size of {what} overflows 64 bits"),
        LimitError::Workgroups {
            grid,
            workgroups,
            limit,
        } => format!(
            "a grid of {grid:?} is {workgroups} workgroups, over the limit of {limit}; raise the limit with --max-workgroups N"
        ),
        LimitError::WorkItems {
            grid,
            block,
            work_items,
            limit,
        } => format!(
            "a grid of {grid:?} workgroups of {block:?} is {work_items} work-items, over the limit of {limit}; raise the limit with --max-work-items N"
        ),
    }
}

/// A runtime error as the command line reports it: one message, naming the flag that raises
/// the limit it hit; an interruption ends the chain in [`OutputError::Interrupted`] (exit
/// status 130).
fn cli_error(e: RuntimeError, control: &LaunchControl) -> anyhow::Error {
    // The emulator's own errors are the sources of the device-neutral ones.
    match &e {
        RuntimeError::Limit(l) => match l.downcast_ref::<LimitError>() {
            Some(l) => anyhow!("{}", limit_text(l)),
            None => anyhow!("{e}"),
        },
        RuntimeError::Alloc { bytes, source } => match source.downcast_ref::<AllocError>() {
            Some(AllocError::Limit(l)) => anyhow!(
                "allocating {bytes} bytes of device memory: {}",
                limit_text(l)
            ),
            _ => anyhow!("{e}"),
        },
        RuntimeError::Load(source) => match source.downcast_ref::<LoadError>() {
            Some(LoadError::Alloc(AllocError::Limit(l))) => anyhow!(
                "preparing the kernels: allocating the code object image: {}",
                limit_text(l)
            ),
            _ => anyhow!("{e}"),
        },
        RuntimeError::Interrupted => {
            let (done, total) = control.progress();
            anyhow::Error::new(OutputError::Interrupted).context(format!(
                "the emulation stopped after {done} of {total} workgroups"
            ))
        }
        RuntimeError::Fault(f) => {
            let Some(emulated) = f
                .cause()
                .and_then(|c| c.downcast_ref::<tilegen::emu::exec::Fault>())
            else {
                return anyhow!("{e}");
            };
            let [x, y, z] = emulated.workgroup;
            let place = format!(
                "kernel fault: kernel `{}`, workgroup ({x}, {y}, {z}), wave {}, pc {:#x}{}",
                emulated.kernel,
                emulated.wave,
                emulated.pc,
                if emulated.inst.is_empty() {
                    String::new()
                } else {
                    format!(", `{}`", emulated.inst)
                }
            );
            match &*emulated.kind {
                FaultKind::Budget { budget } => anyhow!(
                    "{place}: the wave executed its budget of {budget} instructions without ending (an endless loop?); raise the budget with --instruction-budget N"
                ),
                FaultKind::BarrierDeadlock { .. } => anyhow!(
                    "{place}: {}; raise the budget with --instruction-budget N",
                    emulated.kind
                ),
                _ => anyhow!("{e}"),
            }
        }
        _ => anyhow!("{e}"),
    }
}

/// A progress bar of finished workgroups on stderr, drawn from a thread that polls the
/// launch's counters (so the emulator pays one relaxed atomic add per workgroup). It appears
/// only after half a second, so short runs print nothing.
struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(control: &LaunchControl, show: bool) -> Progress {
        let stop = Arc::new(AtomicBool::new(false));
        let thread = show.then(|| {
            let (stop, control) = (stop.clone(), control.clone());
            std::thread::spawn(move || {
                let tick = Duration::from_millis(100);
                for _ in 0..5 {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    std::thread::sleep(tick);
                }
                let (_, total) = control.progress();
                let bar = indicatif::ProgressBar::new(total);
                if let Ok(style) = indicatif::ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30}] {pos}/{len} workgroups, ETA {eta} (Ctrl-C stops)",
                ) {
                    bar.set_style(style.progress_chars("=> "));
                }
                while !stop.load(Ordering::Relaxed) {
                    let (done, total) = control.progress();
                    bar.set_length(total);
                    bar.set_position(done);
                    std::thread::sleep(tick);
                }
                bar.finish_and_clear();
            })
        });
        Progress { stop, thread }
    }

    fn finish(mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
