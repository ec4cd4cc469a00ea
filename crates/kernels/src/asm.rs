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

impl LoopStats {
    /// The loop (a label and a later branch back to it) with the most MFMAs; without a loop, the
    /// whole kernel counts as its body.
    pub fn from_asm(asm: &str) -> LoopStats {
        // Only the kernel body: a listing ends with metadata after `s_endpgm`.
        let lines: Vec<&str> = asm.lines().collect();
        let mut labels = std::collections::HashMap::new();
        for (i, l) in lines.iter().enumerate() {
            if let Some(name) = l.trim().strip_suffix(':')
                && name.starts_with(".LBB")
            {
                labels.insert(name.to_string(), i);
            }
        }
        let body = |a: usize, b: usize| {
            let ins = lines[a..=b].iter().filter(|l| is_instruction(l));
            let (mut n, mut m) = (0u32, 0u32);
            for l in ins {
                n += 1;
                if l.trim_start().starts_with("v_mfma") {
                    m += 1;
                }
            }
            (n, m)
        };
        let total = lines.iter().filter(|l| is_instruction(l)).count() as u32;
        let mut best: Option<(u32, u32)> = None;
        // Only loops that hold MFMAs count as the main loop.
        for (i, l) in lines.iter().enumerate() {
            let t = l.trim_start();
            if !(t.starts_with("s_cbranch") || t.starts_with("s_branch")) {
                continue;
            }
            let Some(target) = t.split_whitespace().nth(1) else {
                continue;
            };
            if let Some(&start) = labels.get(target)
                && start < i
            {
                let (n, m) = body(start, i);
                if m > 0 && best.is_none_or(|(bn, bm)| (m, n) > (bm, bn)) {
                    best = Some((n, m));
                }
            }
        }
        let found_loop = best.is_some();
        let (instructions, mfmas) = best.unwrap_or_else(|| body(0, lines.len().saturating_sub(1)));
        LoopStats {
            instructions,
            mfmas,
            total_instructions: total,
            found_loop,
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
