//! Running the `tilegen` binary as a hostile user would: under a memory cap and a deadline, and
//! classifying how it ended, so a test can require "a clean error or success, never a signal
//! or a hang".

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How a child process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Exit status 0.
    Success,
    /// A non-zero exit status (a refusal or a reported fault).
    Exit(i32),
    /// Killed by a signal (an abort, a crash, or the memory cap).
    Signal(i32),
    /// Still running at the deadline; killed.
    Timeout,
}

/// What a capped run produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// How it ended.
    pub ending: Ending,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
    /// Wall time.
    pub elapsed: Duration,
}

impl Outcome {
    /// Exit status 0 or 1: the binary decided how to end.
    pub fn is_clean(&self) -> bool {
        matches!(self.ending, Ending::Success | Ending::Exit(1))
    }
}

/// Runs `program args` with its address space capped at `memory_bytes` (RLIMIT_AS, so an
/// unbounded allocation fails inside the child instead of exhausting the machine) and kills it
/// at `deadline`. Extra environment variables go in `env`.
pub fn run_capped(
    program: &Path,
    args: &[String],
    env: &[(&str, &str)],
    memory_bytes: u64,
    deadline: Duration,
) -> std::io::Result<Outcome> {
    let kib = memory_bytes / 1024;
    // A shell sets the limit and execs the program: no unsafe pre_exec hook in the tests.
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!("ulimit -v {kib} && exec \"$0\" \"$@\""))
        .arg(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = cmd.spawn()?;
    // Drain both pipes on threads so a chatty child cannot block on a full pipe.
    let mut out = child.stdout.take().expect("piped stdout");
    let mut err = child.stderr.take().expect("piped stderr");
    let out_thread = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let ending = loop {
        if let Some(status) = child.try_wait()? {
            use std::os::unix::process::ExitStatusExt;
            break match (status.code(), status.signal()) {
                (Some(0), _) => Ending::Success,
                (Some(c), _) => Ending::Exit(c),
                (None, Some(s)) => Ending::Signal(s),
                (None, None) => Ending::Signal(0),
            };
        }
        if start.elapsed() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break Ending::Timeout;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let elapsed = start.elapsed();
    let stdout = String::from_utf8_lossy(&out_thread.join().unwrap_or_default()).into_owned();
    let stderr = String::from_utf8_lossy(&err_thread.join().unwrap_or_default()).into_owned();
    Ok(Outcome {
        ending,
        stdout,
        stderr,
        elapsed,
    })
}
