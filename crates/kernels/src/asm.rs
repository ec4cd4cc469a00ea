//! Static facts read off an assembly listing (ours or another compiler's): the main loop's size
//! and MFMA count. Works on LLVM's AMDGPU listing syntax, which every gfx950 compiler here
//! (LLVM, Triton) prints.

use serde::Serialize;

/// Size of a kernel's main loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct LoopStats {
    /// Instructions in the loop body (labels, directives and comments excluded).
    pub instructions: u32,
    /// MFMAs in the loop body.
    pub mfmas: u32,
    /// Instructions in the whole kernel.
    pub total_instructions: u32,
    /// Whether a loop holding MFMAs was found (else the counts are the whole kernel's).
    pub found_loop: bool,
}

fn is_instruction(line: &str) -> bool {
    let t = line.trim_start();
    !(t.is_empty()
        || t.starts_with(';')
        || t.starts_with('.')
        || t.starts_with("//")
        || t.ends_with(':'))
        && line.starts_with(['\t', ' '])
}

/// A basic block of a listing: its label, the loop header its annotation names (LLVM prints
/// `; =>This Inner Loop Header` and `;   in Loop: Header=BB0_3` with verbose assembly), and its
/// line range.
struct Block<'a> {
    label: &'a str,
    loop_header: Option<&'a str>,
    lines: std::ops::Range<usize>,
}

fn blocks<'a>(lines: &[&'a str]) -> Vec<Block<'a>> {
    let mut out: Vec<Block<'a>> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let t = l.trim_start();
        let Some((label, comment)) = t.split_once(':') else {
            continue;
        };
        if !label.starts_with(".LBB") || label.contains(char::is_whitespace) {
            continue;
        }
        if let Some(prev) = out.last_mut() {
            prev.lines.end = i;
        }
        let name = label.trim_start_matches('.');
        let loop_header = if comment.contains("Loop Header") {
            Some(name)
        } else {
            comment
                .split("Header=")
                .nth(1)
                .and_then(|h| h.split_whitespace().next())
        };
        out.push(Block {
            label,
            loop_header,
            lines: i..lines.len(),
        });
    }
    out
}

/// The lines of the main loop (the loop holding the most MFMAs), in listing order: from LLVM's
/// loop annotations when the listing has them (a loop's blocks need not be contiguous), else a
/// label and a later branch back to it. `None` when no loop holds an MFMA.
pub fn main_loop_lines(asm: &str) -> Option<Vec<&str>> {
    let lines: Vec<&str> = asm.lines().collect();
    let mfmas = |r: &[std::ops::Range<usize>]| -> (usize, usize) {
        let body = r
            .iter()
            .flat_map(|r| lines[r.clone()].iter())
            .filter(|l| is_instruction(l));
        body.fold((0, 0), |(n, m), l| {
            (n + 1, m + l.trim_start().starts_with("v_mfma") as usize)
        })
    };
    let blocks = blocks(&lines);
    let mut candidates: Vec<Vec<std::ops::Range<usize>>> = Vec::new();
    let headers: std::collections::BTreeSet<&str> =
        blocks.iter().filter_map(|b| b.loop_header).collect();
    if headers.is_empty() {
        let start_of = |target: &str| {
            blocks
                .iter()
                .find(|b| b.label == target)
                .map(|b| b.lines.start)
        };
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            if (t.starts_with("s_cbranch") || t.starts_with("s_branch"))
                && let Some(start) = t.split_whitespace().nth(1).and_then(start_of)
                && start < i
            {
                candidates.push(std::iter::once(start..i + 1).collect());
            }
        }
    } else {
        for h in headers {
            candidates.push(
                blocks
                    .iter()
                    .filter(|b| b.loop_header == Some(h))
                    .map(|b| b.lines.clone())
                    .collect(),
            );
        }
    }
    let best = candidates
        .into_iter()
        .map(|r| (mfmas(&r), r))
        .filter(|((_, m), _)| *m > 0)
        .max_by_key(|((n, m), _)| (*m, *n))?;
    Some(
        best.1
            .into_iter()
            .flat_map(|r| lines[r].iter().copied())
            .collect(),
    )
}

impl LoopStats {
    /// Counts of [`main_loop_lines`]; without a loop holding MFMAs, of the whole kernel.
    pub fn from_asm(asm: &str) -> LoopStats {
        let count = |lines: &[&str]| {
            let body = lines.iter().filter(|l| is_instruction(l));
            body.fold((0u32, 0u32), |(n, m), l| {
                (n + 1, m + l.trim_start().starts_with("v_mfma") as u32)
            })
        };
        let all: Vec<&str> = asm.lines().collect();
        let total = count(&all).0;
        let found = main_loop_lines(asm);
        let (instructions, mfmas) = count(found.as_deref().unwrap_or(&all));
        LoopStats {
            instructions,
            mfmas,
            total_instructions: total,
            found_loop: found.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_loop_with_most_mfmas() {
        let asm = "k:\n\ts_mov_b32 s0, 0\n.LBB0_1:\n\tv_add_u32_e32 v0, v1, v0\n\ts_cbranch_scc1 .LBB0_1\n.LBB0_2:\n\tv_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:7], v[8:11], v[0:3], v12, v13\n\t; comment\n\tv_mfma_scale_f32_16x16x128_f8f6f4 v[0:3], v[4:7], v[8:11], v[0:3], v12, v13\n\ts_cbranch_scc0 .LBB0_2\n\ts_endpgm\n";
        let s = LoopStats::from_asm(asm);
        assert_eq!(
            s,
            LoopStats {
                instructions: 3,
                mfmas: 2,
                total_instructions: 7,
                found_loop: true
            }
        );
        let flat =
            LoopStats::from_asm("\tv_mfma_f32_4x4x1f32 a[0:3], v0, v1, a[0:3]\n\ts_endpgm\n");
        assert!(!flat.found_loop);
        assert_eq!((flat.instructions, flat.mfmas), (2, 1));
    }
}
