//! Architectural state of one wave64.

use super::limits::{LimitError, try_filled};
use super::memory::Scratch;
use super::mfma::Vgpr;

/// Scalar register encodings that name special registers (the SSRC/SDST operand space).
pub mod sreg {
    /// `flat_scratch_lo`.
    pub const FLAT_SCRATCH_LO: u16 = 102;
    /// `flat_scratch_hi`.
    pub const FLAT_SCRATCH_HI: u16 = 103;
    /// `xnack_mask_lo`.
    pub const XNACK_MASK_LO: u16 = 104;
    /// `vcc_lo`.
    pub const VCC_LO: u16 = 106;
    /// `vcc_hi`.
    pub const VCC_HI: u16 = 107;
    /// First trap temporary (`ttmp0`).
    pub const TTMP0: u16 = 108;
    /// `m0`.
    pub const M0: u16 = 124;
    /// `exec_lo`.
    pub const EXEC_LO: u16 = 126;
    /// `exec_hi`.
    pub const EXEC_HI: u16 = 127;
    /// Number of scalar register slots (encodings 0..=127).
    pub const COUNT: usize = 128;
}

/// Index of the first accumulation register in [`Wave::vgpr`]: AGPR `a[i]` is `vgpr[256 + i]`.
pub const AGPR_BASE: usize = tilegen_arch::MAX_ARCH_VGPRS as usize;

/// Scheduling state of a wave.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaveStatus {
    /// Can execute.
    Ready,
    /// Waiting at `s_barrier` for the rest of the workgroup.
    AtBarrier,
    /// Executed `s_endpgm`.
    Done,
}

/// One wave's registers and control state.
#[derive(Clone, Debug)]
pub struct Wave {
    /// Scalar registers indexed by operand encoding 0..=127 (s0-s101, flat_scratch, xnack,
    /// vcc, ttmp, m0, exec).
    pub sgpr: [u32; sreg::COUNT],
    /// Scalar condition code.
    pub scc: bool,
    /// Vector registers: `vgpr[0..256]` are v0-v255, `vgpr[256..512]` are a0-a255.
    pub vgpr: Vec<Vgpr>,
    /// Program counter (a device address).
    pub pc: u64,
    /// Scheduling state.
    pub status: WaveStatus,
    /// Index of the wave within its workgroup.
    pub id: u32,
    /// Private memory.
    pub scratch: Scratch,
    /// `MODE` hardware register (round/denorm/IEEE/DX10_CLAMP bits).
    pub mode: u32,
    /// Instructions this wave has executed.
    pub executed: u64,
}

impl Wave {
    /// A wave with zeroed registers and `private_bytes` of scratch per lane.
    pub fn new(id: u32, private_bytes: u32) -> Wave {
        Wave {
            sgpr: [0; sreg::COUNT],
            scc: false,
            vgpr: vec![[0; 64]; tilegen_arch::MAX_UNIFIED_VGPRS as usize],
            pc: 0,
            status: WaveStatus::Ready,
            id,
            scratch: Scratch::new(private_bytes),
            mode: 0,
            executed: 0,
        }
    }

    /// A wave like [`Wave::new`] whose memory is allocated fallibly (an error, not an abort,
    /// when the host cannot provide it).
    pub fn try_new(id: u32, private_bytes: u32) -> Result<Wave, LimitError> {
        Ok(Wave {
            sgpr: [0; sreg::COUNT],
            scc: false,
            vgpr: try_filled(
                tilegen_arch::MAX_UNIFIED_VGPRS as usize,
                [0; 64],
                "a wave's registers",
            )?,
            pc: 0,
            status: WaveStatus::Ready,
            id,
            scratch: Scratch::try_new(private_bytes)?,
            mode: 0,
            executed: 0,
        })
    }

    /// Resets the wave to the state [`Wave::new`] gives, reusing its register storage (the
    /// scratch is reallocated, fallibly, when its size changes).
    pub fn reset(&mut self, id: u32, private_bytes: u32) -> Result<(), LimitError> {
        self.sgpr = [0; sreg::COUNT];
        self.scc = false;
        for r in self.vgpr.iter_mut() {
            *r = [0; 64];
        }
        self.pc = 0;
        self.status = WaveStatus::Ready;
        self.id = id;
        if self.scratch.per_lane() == private_bytes {
            self.scratch.clear();
        } else {
            // Free the old scratch before taking the new one.
            self.scratch = Scratch::new(0);
            self.scratch = Scratch::try_new(private_bytes)?;
        }
        self.mode = 0;
        self.executed = 0;
        Ok(())
    }

    /// Reads a 64-bit scalar register pair starting at encoding `r`.
    pub fn sgpr64(&self, r: u16) -> u64 {
        let r = r as usize;
        self.sgpr[r] as u64 | ((self.sgpr[(r + 1) % sreg::COUNT] as u64) << 32)
    }

    /// Writes a 64-bit scalar register pair starting at encoding `r`.
    pub fn set_sgpr64(&mut self, r: u16, v: u64) {
        let r = r as usize;
        self.sgpr[r] = v as u32;
        self.sgpr[(r + 1) % sreg::COUNT] = (v >> 32) as u32;
    }

    /// The EXEC mask.
    pub fn exec(&self) -> u64 {
        self.sgpr64(sreg::EXEC_LO)
    }

    /// Sets the EXEC mask.
    pub fn set_exec(&mut self, v: u64) {
        self.set_sgpr64(sreg::EXEC_LO, v)
    }

    /// The VCC mask.
    pub fn vcc(&self) -> u64 {
        self.sgpr64(sreg::VCC_LO)
    }

    /// Sets the VCC mask.
    pub fn set_vcc(&mut self, v: u64) {
        self.set_sgpr64(sreg::VCC_LO, v)
    }

    /// M0.
    pub fn m0(&self) -> u32 {
        self.sgpr[sreg::M0 as usize]
    }

    /// Writes `value` to lane `lane` of VGPR index `reg` (0-511) if the lane is in `mask`.
    #[inline]
    pub fn write_lanes(&mut self, reg: usize, mask: u64, values: &[u32; 64]) {
        let r = &mut self.vgpr[reg];
        if mask == u64::MAX {
            *r = *values;
        } else {
            for (lane, (d, s)) in r.iter_mut().zip(values).enumerate() {
                if mask >> lane & 1 != 0 {
                    *d = *s;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn special_registers_alias_the_scalar_file() {
        let mut w = Wave::new(0, 0);
        w.set_exec(0x1234_5678_9abc_def0);
        assert_eq!(w.sgpr[126], 0x9abc_def0);
        assert_eq!(w.sgpr[127], 0x1234_5678);
        w.sgpr[106] = 1;
        w.sgpr[107] = 2;
        assert_eq!(w.vcc(), (2 << 32) | 1);
        w.sgpr[124] = 77;
        assert_eq!(w.m0(), 77);
    }

    #[test]
    fn masked_vgpr_write() {
        let mut w = Wave::new(0, 0);
        let vals = [7u32; 64];
        w.write_lanes(3, 0b101, &vals);
        assert_eq!(&w.vgpr[3][..4], &[7, 0, 7, 0]);
        w.write_lanes(AGPR_BASE + 1, u64::MAX, &vals);
        assert_eq!(w.vgpr[257], vals);
    }
}
