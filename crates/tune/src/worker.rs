//! Worker processes: a job (one spec, the shapes to evaluate it on) goes to a child process
//! as one JSON line; the child compiles once, evaluates every shape and answers line by line.
//! A compile that aborts the compiler or a launch that kills the process loses only that job:
//! the parent records its remaining shapes as failed with the reason and starts a new worker.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tilegen_kernels::{KernelSpec, SpecValues};
use tilegen_runtime::{Device, DeviceChoice, EmuDevice};
use tilegen_timing::{Params, TimingOptions};

use crate::eval::{self, By, DeviceEvaluator, Measurement, ModelEvaluator};
use crate::template::Shape;

/// How a job is evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalSettings {
    /// Model or device.
    pub by: By,
    /// The device of `By::Device` (the emulator, or what the device factory accepts).
    #[serde(with = "device_choice")]
    pub device: DeviceChoice,
    /// Untimed launches before the timed ones (device).
    pub warmup: u32,
    /// Timed launches (device).
    pub repeats: u32,
    /// Simulate at most this many CUs of XCD 0 (model; all 32 by default).
    pub max_cus: Option<u32>,
    /// Timing-model parameter overrides (TOML text), if any.
    pub params_toml: Option<String>,
}

impl Default for EvalSettings {
    fn default() -> Self {
        EvalSettings {
            by: By::Model,
            device: DeviceChoice::Emu,
            warmup: 2,
            repeats: 10,
            max_cus: None,
            params_toml: None,
        }
    }
}

/// A device choice as a job line holds it: its word (`emu`, `hsa:1`), as `--device` takes it.
mod device_choice {
    use serde::de::Error as _;
    use serde::{Deserialize, Deserializer, Serializer};
    use tilegen_runtime::DeviceChoice;

    pub fn serialize<S: Serializer>(c: &DeviceChoice, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(c)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DeviceChoice, D::Error> {
        String::deserialize(d)?.parse().map_err(D::Error::custom)
    }
}

/// One unit of work: compile `spec`, evaluate it on every shape.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// The spec's values.
    pub spec: SpecValues,
    /// Shapes to evaluate.
    pub shapes: Vec<Shape>,
    /// How.
    pub eval: EvalSettings,
}

/// What a worker answers, one JSON line each.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The spec compiled.
    Compiled {
        /// Kernel symbol.
        kernel: String,
        /// Compile wall time, ms.
        ms: f64,
    },
    /// The spec did not compile; no shape is evaluated.
    CompileFailed {
        /// Why (the error chain).
        reason: String,
    },
    /// One shape's outcome.
    Shape {
        /// The shape.
        shape: Shape,
        /// The measurement, or why there is none.
        outcome: Outcome,
        /// Wall seconds the evaluation took.
        seconds: f64,
    },
    /// The job is finished.
    Done,
}

/// A measurement or a failure.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Measured.
    Ok(Measurement),
    /// Failed, with the reason.
    Failed(String),
}

/// Formats an error with its chain on one line.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
}

fn panic_text(p: Box<dyn std::any::Any + Send>) -> String {
    p.downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Makes the device of `By::Device` jobs.
pub type DeviceFactory = dyn Fn(DeviceChoice) -> Result<Box<dyn Device>, String> + Send + Sync;

/// The default device factory: the emulator; other choices are refused.
pub fn default_devices(choice: DeviceChoice) -> Result<Box<dyn Device>, String> {
    match choice {
        DeviceChoice::Emu => Ok(Box::new(EmuDevice::new())),
        other => Err(format!(
            "device `{other}` is not available in this build (known: emu)"
        )),
    }
}

/// Evaluates jobs, keeping evaluators between jobs of the same settings.
pub struct Evaluator {
    devices: Box<DeviceFactory>,
    model: Option<(EvalSettings, ModelEvaluator)>,
    device: Option<(EvalSettings, DeviceEvaluator)>,
}

/// Environment variable of the fault-injection hook (for tests of the sweep's isolation): a
/// worker whose job's kernel name contains its value aborts the process before compiling.
pub const FAULT_ENV: &str = "TILEGEN_TUNE_ABORT_ON";

impl Evaluator {
    /// An evaluator that makes devices with `devices`.
    pub fn new(devices: Box<DeviceFactory>) -> Self {
        Evaluator {
            devices,
            model: None,
            device: None,
        }
    }

    /// Runs `job`, sending each reply to `out` (ending with [`Reply::Done`]).
    pub fn run(&mut self, job: &Job, out: &mut dyn FnMut(Reply)) {
        let spec = match KernelSpec::try_from(job.spec.clone()) {
            Ok(s) => s,
            Err(e) => {
                out(Reply::CompileFailed {
                    reason: format!("the stored spec is refused: {e}"),
                });
                out(Reply::Done);
                return;
            }
        };
        if let Ok(needle) = std::env::var(FAULT_ENV)
            && !needle.is_empty()
            && spec.kernel_name().contains(&needle)
        {
            eprintln!("{FAULT_ENV}: aborting on {}", spec.kernel_name());
            std::process::abort();
        }
        let t = Instant::now();
        let built = catch_unwind(AssertUnwindSafe(|| eval::compile(&spec)));
        let kernel = match built {
            Ok(Ok(k)) => k,
            Ok(Err(e)) => {
                out(Reply::CompileFailed { reason: chain(&e) });
                out(Reply::Done);
                return;
            }
            Err(p) => {
                out(Reply::CompileFailed {
                    reason: format!("the compiler panicked: {}", panic_text(p)),
                });
                out(Reply::Done);
                return;
            }
        };
        out(Reply::Compiled {
            kernel: kernel.name().to_string(),
            ms: t.elapsed().as_secs_f64() * 1e3,
        });
        for shape in &job.shapes {
            let t = Instant::now();
            let r = catch_unwind(AssertUnwindSafe(|| self.measure(&job.eval, &kernel, shape)));
            let outcome = match r {
                Ok(Ok(m)) => Outcome::Ok(m),
                Ok(Err(reason)) => Outcome::Failed(reason),
                Err(p) => Outcome::Failed(format!("the evaluation panicked: {}", panic_text(p))),
            };
            out(Reply::Shape {
                shape: *shape,
                outcome,
                seconds: t.elapsed().as_secs_f64(),
            });
        }
        out(Reply::Done);
    }

    fn measure(
        &mut self,
        settings: &EvalSettings,
        kernel: &tilegen_kernels::CompiledKernel,
        shape: &Shape,
    ) -> Result<Measurement, String> {
        match settings.by {
            By::Model => {
                if self.model.as_ref().is_none_or(|(s, _)| s != settings) {
                    let params = match &settings.params_toml {
                        Some(t) => Params::from_toml_str(t).map_err(|e| chain(&e))?,
                        None => Params::mi355x(),
                    };
                    let options = TimingOptions {
                        max_cus: settings.max_cus,
                        ..TimingOptions::default()
                    };
                    self.model = Some((
                        settings.clone(),
                        ModelEvaluator {
                            params,
                            options,
                            ..ModelEvaluator::default()
                        },
                    ));
                }
                let (_, m) = self.model.as_ref().ok_or("no model evaluator")?;
                m.measure(kernel, shape).map_err(|e| chain(&e))
            }
            By::Device => {
                if self.device.as_ref().is_none_or(|(s, _)| s != settings) {
                    let device = (self.devices)(settings.device)?;
                    self.device = Some((
                        settings.clone(),
                        DeviceEvaluator {
                            device,
                            warmup: settings.warmup,
                            repeats: settings.repeats,
                        },
                    ));
                }
                let (_, d) = self.device.as_ref().ok_or("no device evaluator")?;
                d.measure(kernel, shape).map_err(|e| chain(&e))
            }
        }
    }
}

/// The worker's side: reads jobs (JSON lines) from `input` until it ends, answers on `output`.
pub fn serve(
    input: impl BufRead,
    mut output: impl Write,
    devices: Box<DeviceFactory>,
) -> std::io::Result<()> {
    let mut ev = Evaluator::new(devices);
    for line in input.lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let mut failed = None;
        match serde_json::from_str::<Job>(&line) {
            Ok(job) => ev.run(&job, &mut |r| {
                if failed.is_none()
                    && let Err(e) =
                        writeln!(output, "{}", serde_json::to_string(&r).unwrap_or_default())
                            .and_then(|()| output.flush())
                {
                    failed = Some(e);
                }
            }),
            Err(e) => {
                let r = Reply::CompileFailed {
                    reason: format!("the worker could not read the job: {e}"),
                };
                for r in [r, Reply::Done] {
                    writeln!(output, "{}", serde_json::to_string(&r).unwrap_or_default())?;
                }
                output.flush()?;
            }
        }
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(())
}

/// How the parent starts a worker process: a program and its arguments.
#[derive(Debug, Clone)]
pub struct WorkerCommand {
    /// The executable (`tilegen`).
    pub program: PathBuf,
    /// Its arguments (`tune --worker`).
    pub args: Vec<String>,
}

/// Why a job was lost: the worker died or hung.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost(pub String);

/// Something that runs jobs: in this process, or in a child process.
pub trait Runner: Send {
    /// Runs `job`, giving every reply to `on_reply`; `Err` when the job was lost before
    /// [`Reply::Done`].
    fn run(&mut self, job: &Job, on_reply: &mut dyn FnMut(Reply)) -> Result<(), Lost>;
    /// Stops any process it started.
    fn shutdown(&mut self) {}
}

/// Runs jobs in this process (no isolation: for tests and library users who trust their
/// specs).
pub struct InProcess(pub Evaluator);

impl Runner for InProcess {
    fn run(&mut self, job: &Job, on_reply: &mut dyn FnMut(Reply)) -> Result<(), Lost> {
        self.0.run(job, on_reply);
        Ok(())
    }
}

struct Running {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<std::io::Result<String>>,
}

/// Runs jobs in a child process, restarted after it dies; a job that takes longer than
/// `timeout` kills it.
pub struct ChildRunner {
    command: WorkerCommand,
    timeout: Duration,
    cancel: Option<Arc<AtomicBool>>,
    running: Option<Running>,
    /// Workers started so far.
    pub started: u64,
}

impl ChildRunner {
    /// A runner that starts `command` when it first needs a worker.
    pub fn new(command: WorkerCommand, timeout: Duration) -> Self {
        ChildRunner {
            command,
            timeout,
            cancel: None,
            running: None,
            started: 0,
        }
    }

    /// Also stops (killing the worker) as soon as `flag` is raised, instead of waiting for
    /// the job to end.
    pub fn with_cancel(mut self, flag: Arc<AtomicBool>) -> Self {
        self.cancel = Some(flag);
        self
    }

    fn spawn(&mut self) -> Result<&mut Running, Lost> {
        if self.running.is_none() {
            let mut child = Command::new(&self.command.program)
                .args(&self.command.args)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| {
                    Lost(format!(
                        "could not start the worker {}: {e}",
                        self.command.program.display()
                    ))
                })?;
            let stdin = child
                .stdin
                .take()
                .ok_or_else(|| Lost("the worker has no stdin".into()))?;
            let stdout = child
                .stdout
                .take()
                .ok_or_else(|| Lost("the worker has no stdout".into()))?;
            let (tx, rx) = channel();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let end = line.is_err();
                    if tx.send(line).is_err() || end {
                        break;
                    }
                }
            });
            self.started += 1;
            self.running = Some(Running {
                child,
                stdin,
                lines: rx,
            });
        }
        self.running
            .as_mut()
            .ok_or_else(|| Lost("no worker".into()))
    }

    /// Kills the worker (ours, by its process id) and reaps it; returns how it ended.
    fn kill(&mut self) -> String {
        match self.running.take() {
            None => String::new(),
            Some(mut r) => {
                drop(r.stdin);
                let _ = r.child.kill();
                match r.child.wait() {
                    Ok(s) => describe_exit(s),
                    Err(e) => format!("could not be reaped: {e}"),
                }
            }
        }
    }

    /// How the worker ended, after it closed its output.
    fn reap(&mut self) -> String {
        match self.running.take() {
            None => String::new(),
            Some(mut r) => {
                drop(r.stdin);
                let deadline = Instant::now() + Duration::from_secs(5);
                loop {
                    match r.child.try_wait() {
                        Ok(Some(s)) => return describe_exit(s),
                        Ok(None) if Instant::now() < deadline => {
                            std::thread::sleep(Duration::from_millis(10))
                        }
                        _ => {
                            let _ = r.child.kill();
                            return r.child.wait().map(describe_exit).unwrap_or_default();
                        }
                    }
                }
            }
        }
    }
}

fn describe_exit(s: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (s.code(), s.signal()) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(sig)) => {
            let name = match sig {
                6 => " (SIGABRT)",
                9 => " (SIGKILL)",
                11 => " (SIGSEGV)",
                7 => " (SIGBUS)",
                4 => " (SIGILL)",
                8 => " (SIGFPE)",
                _ => "",
            };
            format!("was killed by signal {sig}{name}")
        }
        _ => format!("ended ({s})"),
    }
}

impl Runner for ChildRunner {
    fn run(&mut self, job: &Job, on_reply: &mut dyn FnMut(Reply)) -> Result<(), Lost> {
        let line =
            serde_json::to_string(job).map_err(|e| Lost(format!("encoding the job: {e}")))?;
        let timeout = self.timeout;
        let w = self.spawn()?;
        if writeln!(w.stdin, "{line}")
            .and_then(|()| w.stdin.flush())
            .is_err()
        {
            let how = self.reap();
            return Err(Lost(format!(
                "the worker process {how} before taking the job"
            )));
        }
        let deadline = Instant::now() + timeout;
        let mut stage = "compiling";
        loop {
            if self
                .cancel
                .as_ref()
                .is_some_and(|c| c.load(Ordering::Relaxed))
            {
                let how = self.kill();
                return Err(Lost(format!(
                    "interrupted while {stage} (the worker {how})"
                )));
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let w = self
                .running
                .as_mut()
                .ok_or_else(|| Lost("no worker".into()))?;
            match w.lines.recv_timeout(left.min(Duration::from_millis(200))) {
                Ok(Ok(text)) => {
                    let reply: Reply = match serde_json::from_str(&text) {
                        Ok(r) => r,
                        // Not ours (a library printing to stdout): ignore the line.
                        Err(_) => continue,
                    };
                    if matches!(reply, Reply::Compiled { .. } | Reply::Shape { .. }) {
                        stage = "evaluating";
                    }
                    let done = reply == Reply::Done;
                    on_reply(reply);
                    if done {
                        return Ok(());
                    }
                }
                Ok(Err(_)) | Err(RecvTimeoutError::Disconnected) => {
                    let how = self.reap();
                    return Err(Lost(format!("the worker process {how} while {stage}")));
                }
                Err(RecvTimeoutError::Timeout) if Instant::now() < deadline => {}
                Err(RecvTimeoutError::Timeout) => {
                    let how = self.kill();
                    return Err(Lost(format!(
                        "timed out after {} s while {stage} (the worker {how})",
                        timeout.as_secs_f64()
                    )));
                }
            }
        }
    }

    fn shutdown(&mut self) {
        self.kill();
    }
}

impl Drop for ChildRunner {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Builds a map from shape to its reply, for callers that collect a job's results.
pub fn collect(replies: &[Reply]) -> HashMap<Shape, Outcome> {
    replies
        .iter()
        .filter_map(|r| match r {
            Reply::Shape { shape, outcome, .. } => Some((*shape, outcome.clone())),
            _ => None,
        })
        .collect()
}
