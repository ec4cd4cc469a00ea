//! Why a SIMD's issue slot issued nothing, or that it issued: one enum, each reason named once,
//! and arrays indexed by it ([`PerReason`]).

use std::ops::{Index, IndexMut};

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

/// Why a SIMD issue slot issued nothing (or that it issued).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Reason {
    /// Something issued.
    Issued,
    /// A source register is not ready (VALU/SALU latency).
    Dependency,
    /// A source register is an MFMA result still in the hazard window.
    MfmaHazard,
    /// `s_waitcnt vmcnt` (or a full vmcnt counter).
    WaitcntVm,
    /// `s_waitcnt lgkmcnt` (or a full lgkmcnt counter).
    WaitcntLgkm,
    /// Waiting at `s_barrier`.
    Barrier,
    /// Another wave took the instruction's category in this slot.
    IssueConflict,
    /// The unit (VALU, matrix core, LDS port, texture addresser) is busy.
    PipeBusy,
    /// `s_sleep`.
    Sleep,
    /// `s_nop` wait states.
    Nop,
    /// Branch redirect.
    Branch,
    /// No wave resident (or all done).
    Idle,
}

impl Reason {
    /// Number of reasons.
    pub const COUNT: usize = 12;

    /// Every reason, in report order (the order of their values too).
    pub const ALL: [Reason; Reason::COUNT] = [
        Reason::Issued,
        Reason::Dependency,
        Reason::MfmaHazard,
        Reason::WaitcntVm,
        Reason::WaitcntLgkm,
        Reason::Barrier,
        Reason::IssueConflict,
        Reason::PipeBusy,
        Reason::Sleep,
        Reason::Nop,
        Reason::Branch,
        Reason::Idle,
    ];

    /// The reason's name, as in the JSON report.
    pub const fn name(self) -> &'static str {
        match self {
            Reason::Issued => "issued",
            Reason::Dependency => "dependency",
            Reason::MfmaHazard => "mfma_hazard",
            Reason::WaitcntVm => "waitcnt_vm",
            Reason::WaitcntLgkm => "waitcnt_lgkm",
            Reason::Barrier => "barrier",
            Reason::IssueConflict => "issue_conflict",
            Reason::PipeBusy => "pipe_busy",
            Reason::Sleep => "sleep",
            Reason::Nop => "nop",
            Reason::Branch => "branch",
            Reason::Idle => "idle",
        }
    }

    /// The label of a trace slice a wave spent for this reason.
    pub const fn trace_label(self) -> &'static str {
        match self {
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
}

impl Serialize for Reason {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

/// One value per [`Reason`], indexed by it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PerReason<T>([T; Reason::COUNT]);

impl<T> Index<Reason> for PerReason<T> {
    type Output = T;

    fn index(&self, r: Reason) -> &T {
        &self.0[r as usize]
    }
}

impl<T> IndexMut<Reason> for PerReason<T> {
    fn index_mut(&mut self, r: Reason) -> &mut T {
        &mut self.0[r as usize]
    }
}

impl<T: Copy> PerReason<T> {
    /// Every reason with its value, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (Reason, T)> + '_ {
        Reason::ALL.into_iter().map(|r| (r, self[r]))
    }
}

/// Cycles by reason of one SIMD (each issue slot counts `slot_cycles`), serialized as an
/// object of the reasons' names in report order.
pub type StallBreakdown = PerReason<u64>;

impl PerReason<u64> {
    /// Every reason with its cycles, named as in the JSON report.
    pub fn by_reason(&self) -> [(&'static str, u64); Reason::COUNT] {
        Reason::ALL.map(|r| (r.name(), self[r]))
    }

    /// All cycles.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }

    /// Adds `other`, reason by reason.
    pub(crate) fn add(&mut self, other: &PerReason<u64>) {
        for (a, b) in self.0.iter_mut().zip(other.0) {
            *a += b;
        }
    }
}

impl<T: Serialize + Copy> Serialize for PerReason<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(Reason::COUNT))?;
        for (r, v) in self.iter() {
            map.serialize_entry(r.name(), &v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_are_named_as_in_the_json_report_in_order() {
        let mut a = StallBreakdown::default();
        for (i, r) in Reason::ALL.into_iter().enumerate() {
            assert_eq!(r as usize, i, "ALL follows the declaration");
            a[r] = 1 << i;
        }
        let json = serde_json::to_string(&a).unwrap();
        let names: Vec<String> = Reason::ALL
            .iter()
            .enumerate()
            .map(|(i, r)| format!("\"{}\":{}", r.name(), 1u64 << i))
            .collect();
        assert_eq!(json, format!("{{{}}}", names.join(",")));
        for (name, cycles) in a.by_reason() {
            let r = Reason::ALL.iter().find(|r| r.name() == name).unwrap();
            assert_eq!(a[*r], cycles);
            assert_eq!(serde_json::to_value(r).unwrap(), name);
        }
        assert_eq!(a.total(), (1 << Reason::COUNT) - 1);
    }
}
