//! The linker's output, byte for byte, on objects LLVM produced for the project's kernels.
//!
//! A corpus is a directory of relocatable objects with a `link-digests.txt` naming, per object,
//! the SHA-256 of the code object the linker made of it when the digests were recorded. Linking
//! again must give the same bytes: the linker's structure may change, its output may not
//! (`ld.lld-22` is the reference for what loads, see `crates/dsl/tests/link_vs_lld.rs`; the
//! rest, the symbol and section-name tables, is fixed by these digests).
//!
//! `tests/data/link/` holds a handful: an LDS-staged and a preshuffled-B GEMM, a MoE down
//! projection and its reduce kernel, a paged-attention kernel and its split-KV reduce. A larger
//! corpus (every kernel of `examples/dump_listings.rs`, say) is checked by the ignored test with
//! `TILEGEN_LINK_CORPUS=DIR cargo test -p tilegen-codeobj --test link_corpus -- --ignored`.

use std::path::Path;

use sha2::{Digest, Sha256};
use tilegen_codeobj::link::link;

/// Links every object `dir/link-digests.txt` names; returns how many matched and a line per
/// object that did not.
fn check(dir: &Path) -> (usize, Vec<String>) {
    let manifest = std::fs::read_to_string(dir.join("link-digests.txt"))
        .unwrap_or_else(|e| panic!("{}/link-digests.txt: {e}", dir.display()));
    let mut matched = 0;
    let mut differ = Vec::new();
    for line in manifest.lines().filter(|l| !l.trim().is_empty()) {
        let (object, want) = line
            .split_once(' ')
            .unwrap_or_else(|| panic!("manifest line `{line}`: want `OBJECT SHA256`"));
        let bytes = std::fs::read(dir.join(object)).unwrap();
        let got = match link(&bytes) {
            Ok(code_object) => hex(&Sha256::digest(&code_object)),
            Err(e) => format!("error: {e}"),
        };
        if got == want.trim() {
            matched += 1;
        } else {
            differ.push(format!("{object}: {got}, recorded {want}"));
        }
    }
    (matched, differ)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn project_kernels_link_to_their_recorded_bytes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/link");
    let (matched, differ) = check(&dir);
    assert!(differ.is_empty(), "{}", differ.join("\n"));
    assert_eq!(matched, 6);
}

#[test]
#[ignore = "needs a corpus directory in TILEGEN_LINK_CORPUS"]
fn corpus_links_to_its_recorded_bytes() {
    let dir = std::env::var_os("TILEGEN_LINK_CORPUS")
        .expect("TILEGEN_LINK_CORPUS: a directory of objects with link-digests.txt");
    let (matched, differ) = check(Path::new(&dir));
    println!("{matched} objects link to their recorded bytes");
    assert!(
        differ.is_empty(),
        "{} of {} differ:\n{}",
        differ.len(),
        matched + differ.len(),
        differ.join("\n")
    );
}
