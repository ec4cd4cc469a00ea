//! The AITER corpus for tests, under the peers' skip policy: `None` after a loud SKIP when setup
//! recorded PyPI as unreachable and the person running the tests allowed skipping
//! (`TILEGEN_ALLOW_SKIP=1`); a missing corpus always fails. Shared by this crate's tests and
//! the workspace's (`#[path]`), so the policy has one home.

use tilegen_aiter::{Corpus, CorpusStatus, default_dir, status};
use tilegen_testkit::ALLOW_SKIP;

/// The extracted corpus at its default place.
pub fn corpus() -> Option<Corpus> {
    let dir = default_dir();
    match status(&dir) {
        CorpusStatus::Ready => Some(Corpus::open(&dir).unwrap()),
        CorpusStatus::Unavailable(reason) => {
            assert!(
                std::env::var_os(ALLOW_SKIP).is_some_and(|v| v == "1"),
                "the AITER corpus is unavailable ({reason}); set {ALLOW_SKIP}=1 to skip the tests that need it"
            );
            eprintln!(
                "\n!!!!!!!! SKIPPED ({ALLOW_SKIP}=1): the AITER corpus is unavailable ({reason}) !!!!!!!!\n"
            );
            None
        }
        CorpusStatus::Missing => panic!(
            "the AITER corpus is missing at {}: run `cargo xtask setup`",
            dir.display()
        ),
    }
}
