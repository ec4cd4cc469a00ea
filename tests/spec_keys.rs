//! Kernel names and cache keys are stable: tuning databases and kernel packs hold them, so a
//! change to how specs are written in code must leave every spec's name, cache key and stored
//! form as they were. The fixture was written from the generator before the spec was
//! restructured; this test recomputes everything it records. The template sections were
//! rewritten once since, on purpose: their split-K specs became the exact (workspace and
//! reduction) kernels, named `_exact`; atomic split-K specs keep the names and keys they had.
//! The reference template's section changed once more when its space took BM 256 and
//! `a_spread` (1,888 specs to 3,520); its former 1,888 specs kept their names and keys (the old
//! template's digest still matched).
//!
//! The corpus: every spec of every GEMM template's space (in enumeration order), the
//! preshuffled-B flag combinations of three tiles, every MoE template spec's kernel names and
//! tile keys (digests of each section's lines), and hand-written specs that set every knob,
//! whose stored JSON is kept whole.

use std::path::Path;

use tilegen::kernels::KernelSpec;
use tilegen::kernels::moe::{MoeTemplate, Stage};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn line(s: &KernelSpec) -> String {
    format!("{} {}", s.kernel_name(), s.cache_key())
}

/// FNV-1a, 64 bits, over a section's lines: a stable digest without a hashing dependency.
fn digest(lines: &[String]) -> String {
    let mut h = 0xcbf29ce484222325u64;
    for l in lines {
        for b in l.bytes().chain([b'\n']) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100000001b3);
        }
    }
    format!("{h:016x}")
}

fn tomls(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    v.sort();
    v
}

/// Each section as `label count digest`.
fn sections() -> String {
    let mut out = String::new();
    let mut section = |label: String, lines: Vec<String>| {
        out.push_str(&format!("{label} {} {}\n", lines.len(), digest(&lines)));
    };
    for p in tomls(&root().join("templates")) {
        let t = tilegen_tune::Template::load(&p).unwrap();
        let e = tilegen_tune::space::enumerate(&t.space);
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        section(
            format!("template {name}"),
            e.specs.iter().map(line).collect(),
        );
    }
    for (i, base) in [
        KernelSpec::preb(),
        KernelSpec::preb().bm(32).bn(128),
        KernelSpec::preb().bm(128).bn(256).bk_elems(512),
    ]
    .into_iter()
    .enumerate()
    {
        section(
            format!("preb_flag_variants {i}"),
            base.preb_flag_variants(3)
                .into_iter()
                .map(|s| line(&s.into()))
                .collect(),
        );
    }
    for p in tomls(&root().join("templates/moe")) {
        let t: MoeTemplate = toml::from_str(&std::fs::read_to_string(&p).unwrap()).unwrap();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let lines = t
            .plan()
            .specs
            .iter()
            .map(|s| {
                format!(
                    "{} {} {} {}",
                    s.kernel_name(Stage::GateUp),
                    s.kernel_name(Stage::Down),
                    s.tile(Stage::GateUp).cache_key(),
                    s.tile(Stage::Down).cache_key()
                )
            })
            .collect();
        section(format!("moe {name}"), lines);
    }
    out
}

#[test]
fn names_and_cache_keys_of_the_corpus_are_unchanged() {
    let want = std::fs::read_to_string(root().join("tests/fixtures/spec_keys.txt")).unwrap();
    let got = sections();
    for (w, g) in want.lines().zip(got.lines()) {
        assert_eq!(w, g, "a section's names or keys changed");
    }
    assert_eq!(want.lines().count(), got.lines().count());
}

/// Specs as a database or a pack stores them read back with the same name and key, and are
/// written again byte for byte as they were.
#[test]
fn stored_specs_read_back_unchanged() {
    let text = std::fs::read_to_string(root().join("tests/fixtures/spec_keys_hand.json")).unwrap();
    let hand: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    assert!(hand.len() > 5);
    for h in hand {
        let stored = h["stored"].as_str().unwrap();
        let spec: KernelSpec = serde_json::from_str(stored).unwrap();
        spec.validate().unwrap();
        assert_eq!(spec.kernel_name(), h["name"].as_str().unwrap());
        assert_eq!(spec.cache_key(), h["key"].as_str().unwrap(), "{stored}");
        assert_eq!(serde_json::to_string(&spec).unwrap(), stored);
    }
}
