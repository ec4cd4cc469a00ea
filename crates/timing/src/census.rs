//! The address census of a round: which lines the workgroups of every XCD load, so that the
//! sampled simulation of XCD 0 knows how much of its HBM traffic the other XCDs share.
//!
//! The MALL sits in front of HBM for the whole GPU. When workgroups on several XCDs read the
//! same bytes in the same round (the A rows of a GEMM whose columns are spread over the XCDs,
//! say), HBM delivers the line once and the MALL serves the other XCDs. A simulation of XCD 0
//! alone cannot see that: every line its L2 misses looks like its own HBM fetch. The census
//! runs every workgroup of the round functionally (no timing, global writes discarded so the
//! simulation that follows sees the memory it would have seen) for the first instructions of
//! each wave, and records the lines each XCD loads. A line that `n` XCDs load costs each of
//! them `1/n` of its HBM transfer on average; the mean of `1/n` over the lines XCD 0 loads
//! with one load instruction is the share of that instruction's HBM traffic that is XCD 0's
//! own. A kernel repeats its address pattern every loop step, so each wave runs only until
//! it comes back to the head of a loop that loads (a slot some later branch jumps back to
//! over a load instruction) having loaded something itself: one pass of the loop, after the
//! prologue's loads if it has any (or until the instruction budget). Stopping at the first
//! arrival instead would leave the loop's loads to the prologue's lines, which in a grouped
//! MoE kernel are the routing tables every XCD reads, while the loop streams weights no other
//! XCD touches. The simulation charges each load instruction's fetches its share; the
//! instructions the census did not reach take the mean share of the lines it saw.

use std::collections::HashMap;

use tilegen_emu::exec::interp::{self, Env, Probe};
use tilegen_emu::exec::launch::{Workgroup, run_workgroup_with};
use tilegen_emu::exec::memory::DeviceMemory;
use tilegen_emu::exec::program::Program;
use tilegen_emu::exec::sched::{Budget, Step};
use tilegen_emu::exec::setup::DispatchState;
use tilegen_emu::exec::stats::Stats;
use tilegen_emu::exec::wave::Wave;

use crate::TimingError;
use crate::inst::{InstInfo, UnitKind};
use crate::mem::{BuildLineHasher, probed_lines};

/// What the census of one round found.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Census {
    /// Distinct lines XCD 0's workgroups loaded.
    pub own_lines: u64,
    /// Mean over those lines of `1 / (XCDs that loaded the line)`: the share of XCD 0's HBM
    /// traffic it would fetch itself (1 when no other XCD loads its lines).
    pub own_share: f64,
    /// The same share per load instruction (indexed by program slot); `own_share` for the
    /// instructions the census did not reach.
    pub shares: Vec<f64>,
}

/// A line seen by the census: the last XCD that loaded it, how many XCDs did, and whether
/// XCD 0 is one of them.
#[derive(Clone, Copy)]
struct Seen {
    last: u32,
    xcds: u32,
    own: bool,
}

/// A launch's workgroups as the census runs them.
pub(crate) struct CensusRun<'a> {
    pub prog: &'a Program,
    /// Device memory (global writes are discarded).
    pub device: &'a DeviceMemory,
    pub dispatch: &'a DispatchState,
    pub infos: &'a [Option<InstInfo>],
    pub waves_per_workgroup: usize,
    pub lds_bytes: u32,
    /// Compute MFMA results (see `TimingOptions::exact_mfma`).
    pub exact_mfma: bool,
    /// log2 of the line size.
    pub line_shift: u32,
}

impl CensusRun<'_> {
    /// Runs the workgroups `by_xcd[x]` of XCD `x` (XCD 0 first: the simulated one), each
    /// wave up to the head of a loop that loads once it has loaded, or for at most `budget`
    /// instructions, and counts which XCDs load which lines.
    pub(crate) fn run(&self, by_xcd: &[Vec<u64>], budget: u64) -> Result<Census, TimingError> {
        let CensusRun {
            prog,
            device,
            dispatch: d,
            infos,
            waves_per_workgroup,
            lds_bytes,
            exact_mfma,
            line_shift,
        } = *self;
        let mut seen: HashMap<u64, Seen, BuildLineHasher> = HashMap::default();
        let mut stats = Stats::default();
        let mut counts = vec![0u64; prog.instruction_count()];
        let mut probe = Probe {
            skip_mfma_math: !exact_mfma,
            discard_global_writes: true,
            ..Probe::default()
        };
        let mut waves: Vec<Wave> = Vec::with_capacity(waves_per_workgroup);
        let mut lines = [0u64; 128];
        let n_slots = prog.instruction_count();
        let is_load = |s: usize| {
            infos
                .get(s)
                .and_then(|i| i.as_ref())
                .is_some_and(|i| i.unit == UnitKind::Vmem && !i.vmem_store && !i.vmem_atomic)
        };
        // Load instructions before each slot, to tell a loop that loads from its back edge.
        let mut loads_before = vec![0u32; n_slots + 1];
        for s in 0..n_slots {
            loads_before[s + 1] = loads_before[s] + is_load(s) as u32;
        }
        // Heads of loops that load: slots some later branch jumps back to over a load.
        let mut head = vec![false; n_slots];
        for s in 0..n_slots {
            if let Some(target) = prog.at_slot(s).and_then(|i| i.branch_target)
                && let Ok((t, _)) = prog.slot(target)
                && t <= s
                && loads_before[s + 1] > loads_before[t]
            {
                head[t] = true;
            }
        }
        let mut loaded = vec![false; waves_per_workgroup];
        // The loop heads each wave of the workgroup has stood at, with its count of executed
        // instructions when it first did.
        let mut visited: Vec<Vec<(usize, u64)>> = vec![Vec::new(); waves_per_workgroup];
        // The census sets its own limit per wave (`budget`), and stops quietly at it.
        let unlimited = Budget::new(u64::MAX);
        // XCD 0's (slot, line) loads.
        let mut own: Vec<(u32, u64)> = Vec::new();
        for (x, list) in by_xcd.iter().enumerate() {
            for &index in list {
                let wg = Workgroup::new(d, index, waves_per_workgroup as u32, lds_bytes);
                let run = run_workgroup_with(prog, d, &unlimited, wg, &mut waves, |w, lds| {
                    let slot = prog.slot(w.pc).map_or(usize::MAX, |(s, _)| s);
                    let wave = w.id as usize % waves_per_workgroup;
                    let loaded = &mut loaded[wave];
                    let mut again = false;
                    if head.get(slot).copied().unwrap_or(false) {
                        // A wave held at its slot (a barrier, say) is stepped again with the
                        // same count of executed instructions: not a second arrival.
                        let seen = &mut visited[wave];
                        match seen.iter().find(|&&(s, _)| s == slot) {
                            Some(&(_, at)) => again = at != w.executed,
                            None => seen.push((slot, w.executed)),
                        }
                    }
                    if w.executed > budget || (*loaded && again) {
                        // Enough of this wave (back at the head of a loop that loads, with
                        // loads seen, the loop repeats what they showed): it leaves the
                        // workgroup as if it had ended, so barriers still release.
                        return Ok(Step::End);
                    }
                    probe.vmem.valid = false;
                    let mut env = Env {
                        prog,
                        mem: device,
                        stats: &mut stats,
                        counts: &mut counts,
                        probe: Some(&mut probe),
                    };
                    let step = interp::step(&mut env, w, lds)?;
                    if is_load(slot) && probe.vmem.valid {
                        *loaded = true;
                        let n = record(&probe, line_shift, x as u32, &mut lines, &mut seen);
                        if x == 0 {
                            own.extend(lines[..n].iter().map(|&l| (slot as u32, l)));
                        }
                    }
                    Ok(step)
                });
                loaded.fill(false);
                visited.iter_mut().for_each(Vec::clear);
                run?;
            }
        }
        let (own_lines, sum) = seen
            .values()
            .filter(|s| s.own)
            .fold((0u64, 0.0f64), |(n, sum), s| {
                (n + 1, sum + 1.0 / s.xcds.max(1) as f64)
            });
        let own_share = if own_lines > 0 {
            sum / own_lines as f64
        } else {
            1.0
        };
        own.sort_unstable();
        own.dedup();
        let mut per_slot = vec![(0u64, 0.0f64); n_slots];
        for &(s, l) in &own {
            if let (Some(acc), Some(seen)) = (per_slot.get_mut(s as usize), seen.get(&l)) {
                acc.0 += 1;
                acc.1 += 1.0 / seen.xcds.max(1) as f64;
            }
        }
        Ok(Census {
            own_lines,
            own_share,
            shares: per_slot
                .iter()
                .map(|&(n, sum)| if n > 0 { sum / n as f64 } else { own_share })
                .collect(),
        })
    }
}

/// Adds the lines of the probed load by XCD `x`; leaves them in `lines`.
fn record(
    probe: &Probe,
    line_shift: u32,
    x: u32,
    lines: &mut [u64; 128],
    seen: &mut HashMap<u64, Seen, BuildLineHasher>,
) -> usize {
    let n = probed_lines(&probe.vmem, line_shift, lines);
    for &line in &lines[..n] {
        let s = seen.entry(line).or_insert(Seen {
            last: x,
            xcds: 0,
            own: x == 0,
        });
        if s.xcds == 0 || s.last != x {
            s.xcds += 1;
            s.last = x;
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe_of(addrs: &[u64]) -> Probe {
        let mut p = Probe::default();
        p.vmem.valid = true;
        p.vmem.bytes = 4;
        for (l, &a) in addrs.iter().enumerate() {
            p.vmem.addr[l] = a;
            p.vmem.global |= 1 << l;
        }
        p
    }

    #[test]
    fn lines_count_each_xcd_once() {
        let mut seen = HashMap::default();
        let mut lines = [0u64; 128];
        // XCD 0 loads lines 0 and 1 (twice); XCD 1 loads line 1; XCD 2 loads lines 1 and 2.
        for (x, addrs) in [
            (0, vec![0, 4, 128]),
            (0, vec![130]),
            (1, vec![128, 200]),
            (2, vec![140, 256]),
        ] {
            record(&probe_of(&addrs), 7, x, &mut lines, &mut seen);
        }
        let get = |l: u64| seen.get(&l).map(|s: &Seen| (s.xcds, s.own));
        assert_eq!(get(0), Some((1, true)));
        assert_eq!(get(1), Some((3, true)));
        assert_eq!(get(2), Some((1, false)));
    }
}
