//! A Chrome / Perfetto trace (JSON trace-event format) of one CU's waves: one process per
//! SIMD, one thread per wave with a slice per issued instruction and a slice per stall
//! (named by its reason), a "matrix core" thread per SIMD with its MFMAs, and instant events
//! at barrier releases. Time stamps are cycles (the viewer shows them as µs: 1 µs = 1 cycle).
//! Load the file at <https://ui.perfetto.dev>.

use std::io::Write;

use serde::Serialize;
use serde_json::json;

use crate::cu::Reason;

/// What to trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TraceOptions {
    /// Trace the first `cycles` cycles of the first simulated CU.
    pub cycles: u64,
}

/// One trace event.
#[derive(Clone, Debug, Serialize)]
struct Event {
    name: String,
    #[serde(skip_serializing_if = "str::is_empty")]
    cat: &'static str,
    ph: &'static str,
    ts: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    dur: Option<u64>,
    pid: u32,
    tid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    s: Option<&'static str>,
    #[serde(skip_serializing_if = "serde_json::Value::is_null")]
    args: serde_json::Value,
}

/// The trace of one simulated CU.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    events: Vec<Event>,
    /// Engine clock the cycles run at (GHz), for the reader.
    pub clock_ghz: f64,
}

/// Trace recording inside the simulation.
#[derive(Clone, Debug)]
pub(crate) struct TraceBuf {
    limit: u64,
    next_wave: u32,
    pub trace: Trace,
}

/// Thread id of SIMD `s`'s matrix-core track.
const PIPE_TID: u32 = 10_000;

fn reason_name(r: Reason) -> &'static str {
    match r {
        Reason::Issued => "issued",
        Reason::Dependency => "stall: dependency",
        Reason::MfmaHazard => "stall: mfma hazard",
        Reason::WaitcntVm => "stall: waitcnt vmcnt",
        Reason::WaitcntLgkm => "stall: waitcnt lgkmcnt",
        Reason::Barrier => "stall: barrier",
        Reason::IssueConflict => "stall: issue conflict",
        Reason::PipeBusy => "stall: pipe busy",
        Reason::Sleep => "stall: sleep",
        Reason::Nop => "stall: s_nop",
        Reason::Branch => "stall: branch",
        Reason::Idle => "stall: not started",
    }
}

impl TraceBuf {
    pub(crate) fn new(opts: TraceOptions, simds: usize, clock_ghz: f64) -> TraceBuf {
        let mut t = TraceBuf {
            limit: opts.cycles,
            next_wave: 0,
            trace: Trace {
                events: Vec::new(),
                clock_ghz,
            },
        };
        for s in 0..simds as u32 {
            t.meta("process_name", s, 0, format!("SIMD {s}"));
            t.meta("thread_name", s, PIPE_TID + s, format!("matrix core {s}"));
        }
        t
    }

    fn meta(&mut self, what: &'static str, pid: u32, tid: u32, name: String) {
        self.trace.events.push(Event {
            name: what.to_string(),
            cat: "",
            ph: "M",
            ts: 0,
            dur: None,
            pid,
            tid,
            s: None,
            args: json!({ "name": name }),
        });
    }

    /// A new wave track; returns its thread id.
    pub(crate) fn new_wave(&mut self, wg: u64, wave: u32, simd: usize) -> u32 {
        self.next_wave += 1;
        let tid = self.next_wave;
        self.meta(
            "thread_name",
            simd as u32,
            tid,
            format!("wg {wg} wave {wave}"),
        );
        tid
    }

    #[allow(clippy::too_many_arguments)]
    fn slice(
        &mut self,
        name: &str,
        cat: &'static str,
        pid: u32,
        tid: u32,
        ts: u64,
        dur: u64,
        args: serde_json::Value,
    ) {
        if ts >= self.limit {
            return;
        }
        self.trace.events.push(Event {
            name: name.to_string(),
            cat,
            ph: "X",
            ts,
            dur: Some(dur.min(self.limit - ts)),
            pid,
            tid,
            s: None,
            args,
        });
    }

    /// An issued instruction.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn inst(
        &mut self,
        tid: u32,
        simd: usize,
        ts: u64,
        dur: u64,
        name: &str,
        class: &'static str,
        pc: u64,
    ) {
        self.slice(
            name,
            class,
            simd as u32,
            tid,
            ts,
            dur,
            json!({ "pc": format!("{pc:#x}") }),
        );
    }

    /// A stall from `from` to `to`.
    pub(crate) fn stall(&mut self, tid: u32, simd: usize, from: u64, to: u64, why: Reason) {
        self.slice(
            reason_name(why),
            "stall",
            simd as u32,
            tid,
            from,
            to - from,
            serde_json::Value::Null,
        );
    }

    /// The matrix core of SIMD `simd` busy from `ts` for `dur`.
    pub(crate) fn pipe(&mut self, simd: usize, ts: u64, dur: u64, name: &str) {
        self.slice(
            name,
            "mfma",
            simd as u32,
            PIPE_TID + simd as u32,
            ts,
            dur,
            serde_json::Value::Null,
        );
    }

    /// A barrier release of workgroup `wg`.
    pub(crate) fn barrier(&mut self, wg: u64, ts: u64) {
        if ts >= self.limit {
            return;
        }
        self.trace.events.push(Event {
            name: format!("barrier release (wg {wg})"),
            cat: "barrier",
            ph: "i",
            ts,
            dur: None,
            pid: 0,
            tid: 0,
            s: Some("g"),
            args: serde_json::Value::Null,
        });
    }
}

impl Trace {
    /// Number of events.
    pub fn len(&self) -> usize {
        self.events.len()
    }

    /// Whether there are no events.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Writes the trace as Chrome trace-event JSON (`{"traceEvents": [...]}`).
    pub fn write_json<W: Write>(&self, w: W) -> Result<(), serde_json::Error> {
        let doc = json!({
            "traceEvents": &self.events,
            "displayTimeUnit": "ns",
            "otherData": {
                "time_unit": "1 trace µs = 1 engine cycle",
                "clock_ghz": self.clock_ghz,
                "producer": "tilegen-emu timing model",
            },
        });
        serde_json::to_writer(w, &doc)
    }
}
