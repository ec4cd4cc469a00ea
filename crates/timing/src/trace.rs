//! A Chrome / Perfetto trace (JSON trace-event format) of one CU's waves: one process per
//! SIMD, one thread per wave with a slice per issued instruction and a slice per stall
//! (named by its reason), a "matrix core" thread per SIMD with its MFMAs, and instant events
//! at barrier releases. Time stamps are cycles (the viewer shows them as µs: 1 µs = 1 cycle).
//! Load the file at <https://ui.perfetto.dev>.

use std::io::Write;

use serde::Serialize;
use serde_json::json;

use crate::reason::Reason;

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

/// A slice of a trace track.
struct Slice<'a> {
    name: &'a str,
    cat: &'static str,
    /// Process (SIMD) and thread (wave or matrix-core track).
    pid: u32,
    tid: u32,
    ts: u64,
    dur: u64,
    args: serde_json::Value,
}

/// An issued instruction on its wave's track.
pub(crate) struct InstSlice {
    /// The wave's track.
    pub tid: u32,
    /// Its SIMD.
    pub simd: usize,
    /// Issue cycle.
    pub ts: u64,
    /// Cycles until the wave's next issue (at most one slot).
    pub dur: u64,
    /// Mnemonic.
    pub name: &'static str,
    /// Its instruction class.
    pub class: &'static str,
    /// Its offset from the kernel's entry.
    pub pc: u64,
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

    fn slice(&mut self, s: Slice<'_>) {
        if s.ts >= self.limit {
            return;
        }
        self.trace.events.push(Event {
            name: s.name.to_string(),
            cat: s.cat,
            ph: "X",
            ts: s.ts,
            dur: Some(s.dur.min(self.limit - s.ts)),
            pid: s.pid,
            tid: s.tid,
            s: None,
            args: s.args,
        });
    }

    /// An issued instruction.
    pub(crate) fn inst(&mut self, i: &InstSlice) {
        self.slice(Slice {
            name: i.name,
            cat: i.class,
            pid: i.simd as u32,
            tid: i.tid,
            ts: i.ts,
            dur: i.dur,
            args: json!({ "pc": format!("{:#x}", i.pc) }),
        });
    }

    /// A stall from `from` to `to`.
    pub(crate) fn stall(&mut self, tid: u32, simd: usize, from: u64, to: u64, why: Reason) {
        self.slice(Slice {
            name: why.trace_label(),
            cat: "stall",
            pid: simd as u32,
            tid,
            ts: from,
            dur: to - from,
            args: serde_json::Value::Null,
        });
    }

    /// The matrix core of SIMD `simd` busy from `ts` for `dur`.
    pub(crate) fn pipe(&mut self, simd: usize, ts: u64, dur: u64, name: &str) {
        self.slice(Slice {
            name,
            cat: "mfma",
            pid: simd as u32,
            tid: PIPE_TID + simd as u32,
            ts,
            dur,
            args: serde_json::Value::Null,
        });
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
