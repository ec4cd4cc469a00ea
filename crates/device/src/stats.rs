//! What a device counted during one launch.

use std::collections::BTreeMap;
use std::ops::{Index, IndexMut};

use serde::ser::{Serialize, SerializeMap, Serializer};

/// A number a device counts during one launch (besides instructions by class and mnemonic);
/// the emulator counts them all (`tilegen_emu::exec::Stats` indexes by them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Counter {
    /// Matrix instructions executed.
    Mfma,
    /// Operations the matrix instructions did (2 M N K each).
    MfmaOps,
    /// Workgroups run.
    Workgroups,
    /// Waves run.
    Waves,
    /// DS accesses that touched bytes outside the workgroup's LDS (read 0, dropped).
    LdsOutOfRange,
    /// Buffer lane-accesses that failed the range check (read 0, dropped).
    BufferOutOfRange,
    /// Clocks single-address DS accesses lost to LDS bank conflicts.
    LdsBankConflictCycles,
}

impl Counter {
    /// How many counters there are.
    pub const COUNT: usize = 7;

    /// Every counter, in report order (the index of [`Counters`]).
    pub const ALL: [Counter; Counter::COUNT] = [
        Counter::Mfma,
        Counter::MfmaOps,
        Counter::Workgroups,
        Counter::Waves,
        Counter::LdsOutOfRange,
        Counter::BufferOutOfRange,
        Counter::LdsBankConflictCycles,
    ];

    /// The counter's name in the JSON report (`tilegen emu run --json`).
    pub fn name(self) -> &'static str {
        match self {
            Counter::Mfma => "mfma",
            Counter::MfmaOps => "mfma_ops",
            Counter::Workgroups => "workgroups",
            Counter::Waves => "waves",
            Counter::LdsOutOfRange => "lds_out_of_range",
            Counter::BufferOutOfRange => "buffer_out_of_range",
            Counter::LdsBankConflictCycles => "lds_bank_conflict_cycles",
        }
    }

    /// The counter named `name` in the JSON report.
    pub fn from_name(name: &str) -> Option<Counter> {
        Counter::ALL.into_iter().find(|c| c.name() == name)
    }
}

/// One value per [`Counter`], indexed by it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters([u64; Counter::COUNT]);

impl Counters {
    /// Every counter with its value, in report order.
    pub fn iter(&self) -> impl Iterator<Item = (Counter, u64)> + '_ {
        Counter::ALL.into_iter().map(|c| (c, self[c]))
    }

    /// Adds `other` into `self`, counter by counter.
    pub fn add(&mut self, other: &Counters) {
        for c in Counter::ALL {
            self[c] += other[c];
        }
    }
}

impl Index<Counter> for Counters {
    type Output = u64;

    fn index(&self, c: Counter) -> &u64 {
        &self.0[c as usize]
    }
}

impl IndexMut<Counter> for Counters {
    fn index_mut(&mut self, c: Counter) -> &mut u64 {
        &mut self.0[c as usize]
    }
}

/// Instruction counts of one launch (the emulator counts them; a GPU does not): wave
/// instructions by class and by mnemonic, and the [`Counters`]. The total is the sum of the
/// classes by construction.
///
/// Serializes as the JSON object `tilegen emu run --json` prints (`wave_instructions`,
/// `by_class`, `by_opcode`, then the counters by [`Counter::name`]), and indexes by
/// [`Counter`] (`stats[Counter::Mfma]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchStats {
    wave_instructions: u64,
    by_class: BTreeMap<String, u64>,
    by_opcode: BTreeMap<String, u64>,
    counters: Counters,
}

impl LaunchStats {
    /// Stats from wave-instruction counts by class and by mnemonic, and the other counters.
    pub fn new<C, O, S, T>(by_class: C, by_opcode: O, counters: Counters) -> LaunchStats
    where
        C: IntoIterator<Item = (S, u64)>,
        O: IntoIterator<Item = (T, u64)>,
        S: Into<String>,
        T: Into<String>,
    {
        let by_class: BTreeMap<String, u64> =
            by_class.into_iter().map(|(k, v)| (k.into(), v)).collect();
        LaunchStats {
            wave_instructions: by_class.values().sum(),
            by_class,
            by_opcode: by_opcode.into_iter().map(|(k, v)| (k.into(), v)).collect(),
            counters,
        }
    }

    /// Wave-instructions executed in all.
    pub fn wave_instructions(&self) -> u64 {
        self.wave_instructions
    }

    /// Wave-instructions by class (`salu`, `valu`, `mfma`, `vmem_load`, ...).
    pub fn by_class(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_class.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// Wave-instructions of one class (0 for a class not counted).
    pub fn class(&self, name: &str) -> u64 {
        self.by_class.get(name).copied().unwrap_or(0)
    }

    /// Wave-instructions by mnemonic.
    pub fn by_opcode(&self) -> impl Iterator<Item = (&str, u64)> {
        self.by_opcode.iter().map(|(k, v)| (k.as_str(), *v))
    }

    /// The other counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Matrix instructions executed (`self[Counter::Mfma]`).
    pub fn mfma(&self) -> u64 {
        self[Counter::Mfma]
    }

    /// Workgroups run (`self[Counter::Workgroups]`).
    pub fn workgroups(&self) -> u64 {
        self[Counter::Workgroups]
    }

    /// Waves run (`self[Counter::Waves]`).
    pub fn waves(&self) -> u64 {
        self[Counter::Waves]
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

impl Index<Counter> for LaunchStats {
    type Output = u64;

    fn index(&self, c: Counter) -> &u64 {
        &self.counters[c]
    }
}

impl Serialize for LaunchStats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(3 + Counter::ALL.len()))?;
        map.serialize_entry("wave_instructions", &self.wave_instructions)?;
        map.serialize_entry("by_class", &self.by_class)?;
        map.serialize_entry("by_opcode", &self.by_opcode)?;
        for (c, v) in self.counters.iter() {
            map.serialize_entry(c.name(), &v)?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_is_the_sum_of_the_classes() {
        let mut counters = Counters::default();
        counters[Counter::Mfma] = 4;
        counters[Counter::Waves] = 2;
        let s = LaunchStats::new([("salu", 3), ("mfma", 4)], [("v_mfma", 4u64)], counters);
        assert_eq!(s.wave_instructions(), 7);
        assert_eq!(s[Counter::Mfma], 4);
        assert_eq!(s[Counter::Waves], 2);
        assert_eq!(s.class("mfma"), 4);
        assert_eq!(s.class("valu"), 0);
        assert_eq!(LaunchStats::default()[Counter::Mfma], 0);
    }

    #[test]
    fn counters_are_named_once_in_report_order() {
        for (i, c) in Counter::ALL.into_iter().enumerate() {
            assert_eq!(c as usize, i, "{c:?}");
            assert_eq!(Counter::from_name(c.name()), Some(c));
        }
        assert_eq!(Counter::from_name("nothing"), None);
    }
}
