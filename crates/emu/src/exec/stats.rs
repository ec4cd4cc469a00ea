//! Execution counters for a `--stats` report.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::{Index, IndexMut};

// The counters' one home is the device crate, whose launch reports name them; the emulator
// counts them.
pub use tilegen_device::{Counter, Counters};

/// Coarse instruction classes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum InstClass {
    /// Scalar ALU (SOP1/SOP2/SOPK/SOPC and non-branch SOPP).
    Salu,
    /// Branches, calls and `s_setpc`-style jumps.
    Branch,
    /// Scalar memory (SMEM).
    Smem,
    /// Vector ALU (VOP1/VOP2/VOP3/VOPC, DPP, SDWA).
    Valu,
    /// Packed math (VOP3P, excluding matrix ops).
    Vop3p,
    /// Matrix core (MFMA).
    Mfma,
    /// LDS / DS instructions.
    Lds,
    /// Vector memory loads (MUBUF, FLAT, GLOBAL, SCRATCH).
    VmemLoad,
    /// Vector memory stores.
    VmemStore,
    /// Vector memory atomics.
    VmemAtomic,
    /// `s_barrier`.
    Barrier,
    /// Everything that only orders or hints (waitcnt, nop, setprio, sleep, ...).
    Control,
}

impl InstClass {
    /// All classes, in report order.
    pub const ALL: [InstClass; 12] = [
        InstClass::Salu,
        InstClass::Branch,
        InstClass::Smem,
        InstClass::Valu,
        InstClass::Vop3p,
        InstClass::Mfma,
        InstClass::Lds,
        InstClass::VmemLoad,
        InstClass::VmemStore,
        InstClass::VmemAtomic,
        InstClass::Barrier,
        InstClass::Control,
    ];

    /// Short name used in reports.
    pub fn name(self) -> &'static str {
        match self {
            InstClass::Salu => "salu",
            InstClass::Branch => "branch",
            InstClass::Smem => "smem",
            InstClass::Valu => "valu",
            InstClass::Vop3p => "vop3p",
            InstClass::Mfma => "mfma",
            InstClass::Lds => "lds",
            InstClass::VmemLoad => "vmem_load",
            InstClass::VmemStore => "vmem_store",
            InstClass::VmemAtomic => "vmem_atomic",
            InstClass::Barrier => "barrier",
            InstClass::Control => "control",
        }
    }
}

/// Counters of one launch (or a merge of several). Indexes by [`Counter`]
/// (`stats[Counter::Mfma] += 1`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Wave-instructions executed, by class (indexed like [`InstClass::ALL`]).
    pub by_class: [u64; 12],
    /// Wave-instructions executed, by mnemonic.
    pub by_opcode: BTreeMap<&'static str, u64>,
    /// The other counters.
    pub counters: Counters,
}

impl Stats {
    /// Total wave-instructions.
    pub fn instructions(&self) -> u64 {
        self.by_class.iter().sum()
    }

    /// Count of one class.
    pub fn class(&self, c: InstClass) -> u64 {
        self.by_class[c as usize]
    }

    /// Adds one executed instruction.
    #[inline]
    pub fn count(&mut self, class: InstClass, mnemonic: &'static str) {
        self.by_class[class as usize] += 1;
        *self.by_opcode.entry(mnemonic).or_insert(0) += 1;
    }

    /// Adds `other` into `self`.
    pub fn merge(&mut self, other: &Stats) {
        for (a, b) in self.by_class.iter_mut().zip(other.by_class) {
            *a += b;
        }
        for (k, v) in &other.by_opcode {
            *self.by_opcode.entry(k).or_insert(0) += v;
        }
        self.counters.add(&other.counters);
    }
}

impl Index<Counter> for Stats {
    type Output = u64;

    fn index(&self, c: Counter) -> &u64 {
        &self.counters[c]
    }
}

impl IndexMut<Counter> for Stats {
    fn index_mut(&mut self, c: Counter) -> &mut u64 {
        &mut self.counters[c]
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} workgroups, {} waves, {} wave-instructions",
            self[Counter::Workgroups],
            self[Counter::Waves],
            self.instructions()
        )?;
        for c in InstClass::ALL {
            let n = self.class(c);
            if n > 0 {
                writeln!(f, "  {:<12} {n}", c.name())?;
            }
        }
        writeln!(f, "  mfma ops     {}", self[Counter::MfmaOps])?;
        let (lds, buffer) = (
            self[Counter::LdsOutOfRange],
            self[Counter::BufferOutOfRange],
        );
        if lds + buffer > 0 {
            writeln!(
                f,
                "  out of range: {lds} LDS accesses, {buffer} buffer lanes"
            )?;
        }
        let mut ops: Vec<_> = self.by_opcode.iter().collect();
        ops.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        for (name, n) in ops {
            writeln!(f, "    {name:<40} {n}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn count_merge_report() {
        let mut a = Stats::default();
        a.count(InstClass::Mfma, "v_mfma_f32_16x16x32_bf16");
        a.count(InstClass::Salu, "s_add_u32");
        a.count(InstClass::Salu, "s_add_u32");
        let mut b = Stats::default();
        b.count(InstClass::Salu, "s_add_u32");
        b[Counter::Workgroups] = 2;
        a.merge(&b);
        assert_eq!(a.instructions(), 4);
        assert_eq!(a.class(InstClass::Salu), 3);
        assert_eq!(a.by_opcode["s_add_u32"], 3);
        assert_eq!(a[Counter::Workgroups], 2);
        let text = a.to_string();
        assert!(
            text.contains("salu") && text.contains("s_add_u32"),
            "{text}"
        );
    }
}
