//! What a device counted during one launch.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Index;

use serde::ser::{Serialize, SerializeMap, Serializer};

/// Counters of one launch that are plain numbers (no invariant ties them together).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Matrix instructions executed.
    pub mfma: u64,
    /// Operations the matrix instructions did (2 M N K each).
    pub mfma_ops: u64,
    /// Workgroups run.
    pub workgroups: u64,
    /// Waves run.
    pub waves: u64,
    /// DS accesses that touched bytes outside the workgroup's LDS (read 0, dropped).
    pub lds_out_of_range: u64,
    /// Buffer lane-accesses that failed the range check (read 0, dropped).
    pub buffer_out_of_range: u64,
    /// Clocks single-address DS accesses lost to LDS bank conflicts.
    pub lds_bank_conflict_cycles: u64,
}

/// Instruction counts of one launch (the emulator counts them; a GPU does not): wave
/// instructions by class and by mnemonic, and the [`Counters`]. The total is the sum of the
/// classes by construction.
///
/// Serializes as the JSON object `tilegen emu run --json` prints (`wave_instructions`,
/// `by_class`, `by_opcode`, then the counters), and indexes by those names
/// (`stats["mfma"].get()`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchStats {
    wave_instructions: Count,
    by_class: BTreeMap<String, Count>,
    by_opcode: BTreeMap<String, Count>,
    counters: Counters,
    /// The counters again as [`Count`]s, for [`Index`].
    named: [Count; 7],
}

const COUNTER_NAMES: [&str; 7] = [
    "mfma",
    "mfma_ops",
    "workgroups",
    "waves",
    "lds_out_of_range",
    "buffer_out_of_range",
    "lds_bank_conflict_cycles",
];

impl LaunchStats {
    /// Stats from wave-instruction counts by class and by mnemonic, and the other counters.
    pub fn new<C, O, S, T>(by_class: C, by_opcode: O, counters: Counters) -> LaunchStats
    where
        C: IntoIterator<Item = (S, u64)>,
        O: IntoIterator<Item = (T, u64)>,
        S: Into<String>,
        T: Into<String>,
    {
        let by_class: BTreeMap<String, Count> = by_class
            .into_iter()
            .map(|(k, v)| (k.into(), Count(Some(v))))
            .collect();
        let total = by_class.values().map(Count::get).sum();
        let c = counters;
        LaunchStats {
            wave_instructions: Count(Some(total)),
            by_class,
            by_opcode: by_opcode
                .into_iter()
                .map(|(k, v)| (k.into(), Count(Some(v))))
                .collect(),
            counters,
            named: [
                c.mfma,
                c.mfma_ops,
                c.workgroups,
                c.waves,
                c.lds_out_of_range,
                c.buffer_out_of_range,
                c.lds_bank_conflict_cycles,
            ]
            .map(|v| Count(Some(v))),
        }
    }

    /// Wave-instructions executed in all.
    pub fn wave_instructions(&self) -> u64 {
        self.wave_instructions.get()
    }

    /// Wave-instructions by class (`salu`, `valu`, `mfma`, `vmem_load`, ...).
    pub fn by_class(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_class.iter().map(|(k, v)| (k.as_str(), v.get()))
    }

    /// Wave-instructions of one class (0 for a class not counted).
    pub fn class(&self, name: &str) -> u64 {
        self.by_class.get(name).map_or(0, Count::get)
    }

    /// Wave-instructions by mnemonic.
    pub fn by_opcode(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_opcode.iter().map(|(k, v)| (k.as_str(), v.get()))
    }

    /// The other counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Matrix instructions executed.
    pub fn mfma(&self) -> u64 {
        self.counters.mfma
    }

    /// Workgroups run.
    pub fn workgroups(&self) -> u64 {
        self.counters.workgroups
    }

    /// Waves run.
    pub fn waves(&self) -> u64 {
        self.counters.waves
    }
}

impl Default for LaunchStats {
    /// No instructions, every counter zero.
    fn default() -> Self {
        LaunchStats::new(
            std::iter::empty::<(String, u64)>(),
            std::iter::empty::<(String, u64)>(),
            Counters::default(),
        )
    }
}

/// One counter as [`LaunchStats`]' index operator returns it: absent for a name the stats do
/// not have.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Count(Option<u64>);

impl Count {
    /// The value (0 when absent).
    pub fn get(&self) -> u64 {
        self.0.unwrap_or(0)
    }

    /// The value, `None` when the stats have no counter of that name.
    pub fn as_u64(&self) -> Option<u64> {
        self.0
    }
}

impl fmt::Display for Count {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(v) => write!(f, "{v}"),
            None => f.write_str("null"),
        }
    }
}

static ABSENT: Count = Count(None);

/// `stats["wave_instructions"]`, `stats["mfma"]`, ... by the names of the JSON report.
impl Index<&str> for LaunchStats {
    type Output = Count;

    fn index(&self, name: &str) -> &Count {
        if name == "wave_instructions" {
            return &self.wave_instructions;
        }
        COUNTER_NAMES
            .iter()
            .position(|n| *n == name)
            .map_or(&ABSENT, |i| &self.named[i])
    }
}

impl Serialize for LaunchStats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let counts = |m: &BTreeMap<String, Count>| -> BTreeMap<String, u64> {
            m.iter().map(|(k, v)| (k.clone(), v.get())).collect()
        };
        let mut map = s.serialize_map(Some(3 + COUNTER_NAMES.len()))?;
        map.serialize_entry("wave_instructions", &self.wave_instructions())?;
        map.serialize_entry("by_class", &counts(&self.by_class))?;
        map.serialize_entry("by_opcode", &counts(&self.by_opcode))?;
        for (name, v) in COUNTER_NAMES.iter().zip(&self.named) {
            map.serialize_entry(name, &v.get())?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_is_the_sum_of_the_classes() {
        let s = LaunchStats::new(
            [("salu", 3), ("mfma", 4)],
            [("v_mfma", 4u64)],
            Counters {
                mfma: 4,
                waves: 2,
                ..Counters::default()
            },
        );
        assert_eq!(s.wave_instructions(), 7);
        assert_eq!(s["wave_instructions"].as_u64(), Some(7));
        assert_eq!(s["mfma"].get(), 4);
        assert_eq!(s["waves"].to_string(), "2");
        assert_eq!(s["nothing"].as_u64(), None);
        assert_eq!(s.class("mfma"), 4);
        assert_eq!(s.class("valu"), 0);
        assert_eq!(LaunchStats::default()["mfma"].as_u64(), Some(0));
    }
}
