//! Shared helpers of the end-to-end tests: running LLVM's tools (the ground truth) and parsing
//! `llvm-objdump` output.
#![allow(dead_code)]

use std::path::Path;
use std::process::Command;

// Each test crate uses some of these.
#[allow(unused_imports)]
pub use tilegen_testkit::llvm::{link, lld, llvm_mc, llvm_objdump, require_tool, scratch};

/// One instruction line of `llvm-objdump -d`.
#[derive(Clone, Debug)]
pub struct DumpLine {
    /// Address.
    pub addr: u64,
    /// The instruction text (objdump's `// address: words` comment removed).
    pub text: String,
    /// Dwords objdump consumed.
    pub words: Vec<u32>,
    /// Branch annotation `<sym+0x..>` after the comment, if any.
    pub annotation: Option<String>,
}

/// Parse `llvm-objdump -d` output into instruction lines.
pub fn parse_objdump(out: &str) -> Vec<DumpLine> {
    let mut lines = Vec::new();
    for line in out.lines() {
        let Some(rest) = line.strip_prefix('\t') else {
            continue;
        };
        let Some(cpos) = rest.rfind("// ") else {
            continue;
        };
        let text = rest[..cpos].trim_end().to_string();
        let comment = &rest[cpos + 3..];
        let Some((addr, tail)) = comment.split_once(": ") else {
            continue;
        };
        let Ok(addr) = u64::from_str_radix(addr.trim(), 16) else {
            continue;
        };
        let mut words = Vec::new();
        let mut annotation = None;
        for tok in tail.split_whitespace() {
            if tok.starts_with('<') {
                annotation = Some(tail[tail.find('<').unwrap_or(0)..].to_string());
                break;
            }
            match u32::from_str_radix(tok, 16) {
                Ok(w) if tok.len() == 8 => words.push(w),
                _ => break,
            }
        }
        lines.push(DumpLine {
            addr,
            text,
            words,
            annotation,
        });
    }
    lines
}

/// Run `llvm-objdump -d --mcpu=gfx950` on a file.
pub fn objdump(path: &Path) -> Result<String, String> {
    let out = Command::new(llvm_objdump())
        .args(["-d", "--mcpu=gfx950"])
        .arg(path)
        .output()
        .map_err(|e| format!("running llvm-objdump: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "llvm-objdump failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[allow(unused_imports)]
pub use tilegen_testkit::llvm::assemble;

/// Dwords per probe slot: each probe is padded with `s_nop 0` so probes never run into each
/// other.
pub const SLOT: usize = 16;
const S_NOP0: u32 = 0xBF80_0000;

/// What llvm-objdump makes of each probe: `Some((text, dwords))`, or `None` when it cannot decode
/// it (it prints `.long`, flags the operands as invalid, or crashes on it).
pub fn objdump_probes(probes: &[Vec<u32>], dir: &Path) -> Vec<Option<(String, usize)>> {
    objdump_probes_in_slots(probes, dir, SLOT)
}

/// [`objdump_probes`] with `slot` dwords per probe (probes that cannot run past their own
/// dwords can be packed tighter).
pub fn objdump_probes_in_slots(
    probes: &[Vec<u32>],
    dir: &Path,
    slot: usize,
) -> Vec<Option<(String, usize)>> {
    let mut out = Vec::with_capacity(probes.len());
    for chunk in probes.chunks(65536 / slot) {
        out.extend(objdump_chunk(chunk, dir, slot));
    }
    out
}

fn objdump_chunk(probes: &[Vec<u32>], dir: &Path, slot: usize) -> Vec<Option<(String, usize)>> {
    let src = dir.join("probes.s");
    let obj = dir.join("probes.o");
    let mut s = String::from(".text\n");
    for p in probes {
        assert!(p.len() <= slot, "probe too long");
        let words: Vec<String> = p
            .iter()
            .copied()
            .chain(std::iter::repeat(S_NOP0))
            .take(slot)
            .map(|w| format!("{w:#010x}"))
            .collect();
        s.push_str(".long ");
        s.push_str(&words.join(","));
        s.push('\n');
    }
    std::fs::write(&src, s).expect("write probes");
    assemble(&src, &obj);
    let dump = match objdump(&obj) {
        Ok(d) => d,
        Err(_) if probes.len() > 1 => {
            // llvm-objdump-22 crashes on a few encodings: isolate them.
            let mid = probes.len() / 2;
            let mut v = objdump_chunk(&probes[..mid], dir, slot);
            v.extend(objdump_chunk(&probes[mid..], dir, slot));
            return v;
        }
        Err(_) => return vec![None],
    };
    let mut by_addr = std::collections::HashMap::new();
    for l in parse_objdump(&dump) {
        by_addr.insert(l.addr, l);
    }
    (0..probes.len())
        .map(|i| {
            let l = by_addr.get(&((i * slot * 4) as u64))?;
            if l.text.starts_with(".long")
                || l.text.contains("Invalid register")
                || l.text.contains("Invalid immediate")
            {
                return None;
            }
            Some((l.text.clone(), l.words.len()))
        })
        .collect()
}

/// A small deterministic generator (xorshift64*), so failures reproduce.
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Next 32 random bits.
    pub fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    /// Uniform in 0..n.
    pub fn below(&mut self, n: u32) -> u32 {
        (((self.next_u64() >> 32) * n as u64) >> 32) as u32
    }
}
