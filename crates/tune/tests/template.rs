//! Templates: the shipped ones parse and enumerate; malformed ones are refused with the file,
//! the line and column of the value, and the rule.

use std::path::{Path, PathBuf};

use tilegen_kernels::KernelSpec;
use tilegen_tune::space::{default_spec, enumerate, worth};
use tilegen_tune::{Plan, Shape, Template};

fn templates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../templates")
}

#[test]
fn every_shipped_template_parses_and_has_valid_specs() {
    let mut names = Vec::new();
    for e in std::fs::read_dir(templates_dir()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "toml") {
            let t = Template::load(&p).unwrap_or_else(|e| panic!("{e}"));
            // Model templates tune every power of two; the reference set judged against AITER
            // has its own fixed M values.
            let m: &[u32] = if t.name == "reference" {
                &[1, 16, 64, 256, 2048, 8192]
            } else {
                &[
                    1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192,
                ]
            };
            assert_eq!(t.m, m, "{}", t.name);
            let plan = Plan::from_template(&t);
            assert!(
                plan.specs.len() > 50,
                "{}: {} specs",
                t.name,
                plan.specs.len()
            );
            assert_eq!(
                plan.specs[0],
                default_spec(&t.space),
                "the default spec comes first"
            );
            for s in &plan.specs {
                s.validate().unwrap();
            }
            names.push(t.name);
        }
    }
    names.sort();
    assert_eq!(
        names,
        [
            "deepseek-v3",
            "gpt-oss-120b",
            "gpt-oss-20b",
            "kimi-k2",
            "llama-3.1-405b",
            "llama-3.1-70b",
            "reference"
        ]
    );
}

#[test]
fn gpt_oss_shapes_are_the_models_projections_padded() {
    let t = Template::load(templates_dir().join("gpt-oss-120b.toml")).unwrap();
    let nk: Vec<(u32, u32, Option<u32>)> = t.gemms.iter().map(|g| (g.n, g.k, g.k_model)).collect();
    assert_eq!(
        nk,
        [
            (5120, 3072, Some(2880)),
            (2880, 4096, None),
            (5760, 3072, Some(2880)),
            (2880, 3072, Some(2880))
        ]
    );
    assert_eq!(t.shapes().len(), 56);
    let ds = Template::load(templates_dir().join("deepseek-v3.toml")).unwrap();
    for (n, k) in [(7168, 2048), (4096, 7168)] {
        assert!(
            ds.gemms.iter().any(|g| g.n == n && g.k == k),
            "DeepSeek-V3 lacks {n}x{k}"
        );
    }
}

const GOOD: &str = r#"
[model]
name = "tiny"
m = [16, 64]

[[gemm]]
name = "a"
n = 256
k = 512

[space]
variant = ["preb"]
bm = [16, 32]
bn = [128]
bk_elems = [256]
wn = [32, 64]
b_prefetch = [false, true]
"#;

fn refuse(text: &str) -> (usize, usize, String) {
    let e = Template::parse(text, "t.toml").expect_err("refused");
    let shown = e.to_string();
    assert!(
        shown.starts_with(&format!("t.toml:{}:{}: ", e.line, e.column)),
        "{shown}"
    );
    (e.line, e.column, e.rule)
}

#[test]
fn a_good_template_enumerates_and_counts() {
    let t = Template::parse(GOOD, "t.toml").unwrap();
    let e = enumerate(&t.space);
    // preb: bm 2 x wn 2 x (no prefetch + prefetch without and with nothing else) = 8.
    assert_eq!(e.stats.combinations, 8);
    assert_eq!(
        e.stats.valid + e.stats.pruned_total() + e.stats.duplicates,
        8
    );
    assert!(e.specs.iter().all(|s| s.validate().is_ok()));
    // bm 16 covers M = 16, so taller tiles are not worth it there but are at M = 64.
    let tall: KernelSpec = KernelSpec::preb()
        .bm(32)
        .bn(128)
        .bk_elems(256)
        .wn(32)
        .into();
    assert!(!worth(
        &t.space,
        &tall,
        &Shape {
            m: 16,
            n: 256,
            k: 512
        }
    ));
    assert!(worth(
        &t.space,
        &tall,
        &Shape {
            m: 64,
            n: 256,
            k: 512
        }
    ));
    assert!(worth(
        &t.space,
        &default_spec(&t.space),
        &Shape {
            m: 1,
            n: 256,
            k: 512
        }
    ));
}

#[test]
fn malformed_templates_name_the_line_and_the_rule() {
    let (line, _, rule) = refuse(&GOOD.replace("k = 512", "k = 2880"));
    assert_eq!(line, 9);
    assert!(
        rule.contains("gemm.k = 2880 must be a multiple of 256"),
        "{rule}"
    );

    let (line, col, rule) = refuse(&GOOD.replace("k = 512", "k = 512\nk_model = 100"));
    assert_eq!((line, col), (10, 11));
    assert!(rule.contains("rounded up"), "{rule}");

    let (line, _, rule) = refuse(&GOOD.replace("n = 256", "n = 250"));
    assert_eq!(line, 8);
    assert!(rule.contains("multiple of 16"), "{rule}");

    let (line, _, rule) = refuse(&GOOD.replace("m = [16, 64]", "m = [64, 16]"));
    assert_eq!(line, 4);
    assert!(rule.contains("ascend"), "{rule}");

    let (line, _, rule) = refuse(&GOOD.replace("wn = [32, 64]", "wn = [32, 64]\ncolour = 3"));
    assert_eq!(line, 17);
    assert!(rule.contains("colour"), "{rule}");

    let (line, _, rule) = refuse(&GOOD.replace("variant = [\"preb\"]", "variant = [\"fast\"]"));
    assert_eq!(line, 12);
    assert!(rule.contains("fast"), "{rule}");

    let (line, _, rule) = refuse(&GOOD.replace("bm = [16, 32]", "bm = []"));
    assert_eq!(line, 13);
    assert!(rule.contains("at least one"), "{rule}");

    let (line, _, rule) = refuse(&GOOD.replace("bm = [16, 32]", "bm = [16, 16]"));
    assert_eq!(line, 13);
    assert!(rule.contains("twice"), "{rule}");

    let (line, _, rule) = refuse(&GOOD.replace("bm = [16, 32]", "bm = [-16]"));
    assert_eq!(line, 13);
    assert!(rule.contains("positive"), "{rule}");

    let (_, _, rule) = refuse(&GOOD.replace("b_prefetch = [false, true]", "waves_per_eu = [9]"));
    assert!(rule.contains("waves_per_eu = 9"), "{rule}");

    let (line, _, rule) = refuse(&format!(
        "{GOOD}\n[[gemm]]\nname = \"a\"\nn = 16\nk = 256\n"
    ));
    assert_eq!(line, 20);
    assert!(rule.contains("listed twice"), "{rule}");

    // Nothing valid: 1024-wide waves exceed every budget.
    let (line, _, rule) = refuse(
        &GOOD
            .replace("wn = [32, 64]", "wn = [1024]")
            .replace("bn = [128]", "bn = [1024]"),
    );
    assert_eq!(line, 11);
    assert!(rule.contains("no spec of the space is valid"), "{rule}");

    // Syntax errors carry TOML's position.
    let (line, _, _) = refuse(&GOOD.replace("n = 256", "n = = 256"));
    assert_eq!(line, 8);

    let (_, _, rule) = refuse(&GOOD.replace("[[gemm]]\nname = \"a\"\nn = 256\nk = 512\n", ""));
    assert!(rule.contains("no [[gemm]]"), "{rule}");

    // A bucket so large the C matrix passes 4 GiB.
    let (line, _, rule) = refuse(
        &GOOD
            .replace("m = [16, 64]", "m = [16, 64, 100000000]")
            .replace("n = 256", "n = 4096"),
    );
    assert!((6..=9).contains(&line), "line {line}");
    assert!(rule.contains("does not fit"), "{rule}");
}

#[test]
fn a_missing_file_is_named() {
    let e = Template::load("/nonexistent/t.toml").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/t.toml"), "{e}");
    assert!(std::error::Error::source(&e).is_some());
}
