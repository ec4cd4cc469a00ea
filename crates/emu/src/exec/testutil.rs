//! Test harness: one wave executing hand-assembled code (assembled with
//! `llvm-mc-22 -arch=amdgcn -mcpu=gfx950 -show-encoding`; each test quotes its source).

use super::fault::FaultKind;
use super::interp::{self, Env, Probe};
use super::memory::{DeviceMemory, Lds};
use super::program::Program;
use super::sched::Step;
use super::setup::KernelSetup;
use super::stats::Stats;
use super::wave::Wave;

/// A single wave with its own memory and LDS.
pub struct Harness {
    pub mem: DeviceMemory,
    pub prog: Program,
    pub w: Wave,
    pub lds: Lds,
    pub stats: Stats,
    /// Attached to every step when set.
    pub probe: Option<Probe>,
    counts: Vec<u64>,
}

impl Harness {
    /// A wave about to run `words` (an `s_endpgm` is appended), all lanes active, IEEE and
    /// DX10_CLAMP mode set as compilers request, 256 bytes of scratch per lane and 64 KiB of
    /// LDS.
    pub fn new(words: &[u32]) -> Harness {
        let mut mem = DeviceMemory::new();
        let mut code: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        code.extend_from_slice(&0xbf81_0000u32.to_le_bytes());
        let prog = Program::load_code(
            &mut mem,
            "test",
            &code,
            KernelSetup::from_descriptor(&[0; 64]),
        )
        .unwrap();
        let mut w = Wave::new(0, 256);
        w.pc = prog.entry();
        w.set_exec(u64::MAX);
        w.mode = (1 << 9) | (1 << 8);
        let counts = vec![0; prog.instruction_count()];
        Harness {
            mem,
            prog,
            w,
            lds: Lds::new(64 * 1024).unwrap(),
            stats: Stats::default(),
            probe: None,
            counts,
        }
    }

    /// Executes one instruction.
    pub fn step(&mut self) -> Result<Step, FaultKind> {
        let mut env = Env {
            prog: &self.prog,
            mem: &self.mem,
            stats: &mut self.stats,
            counts: &mut self.counts,
            probe: self.probe.as_mut(),
        };
        let r = interp::step(&mut env, &mut self.w, &mut self.lds);
        interp::fold_counts(&self.prog, &mut self.counts, &mut self.stats);
        r
    }

    /// Runs to `s_endpgm` (barriers are passed straight through: there is one wave).
    pub fn run(&mut self) -> Result<(), FaultKind> {
        for _ in 0..100_000 {
            if self.step()? == Step::End {
                return Ok(());
            }
        }
        panic!("test program did not end");
    }

    /// Sets VGPR `r` lane by lane.
    pub fn set_v(&mut self, r: usize, f: impl Fn(usize) -> u32) {
        for l in 0..64 {
            self.w.vgpr[r][l] = f(l);
        }
    }

    /// VGPR `r`.
    pub fn v(&self, r: usize) -> [u32; 64] {
        self.w.vgpr[r]
    }
}
