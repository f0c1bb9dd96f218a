//! Replays a fuzz target's committed inputs as an ordinary test, so CI exercises every
//! fuzz entry point on stable without libFuzzer (docs/security.md, "Fuzzing").
//!
//! Why here: five crates each replay their targets' inputs; the walk over
//! `fuzz/corpus/<target>` and `fuzz/regressions/<target>`, and a failure that names the
//! input, are the same for all of them.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};

/// The repository's `fuzz/` directory.
pub fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join("fuzz")
}

/// The files directly in `dir`, sorted; none if it does not exist.
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> =
        entries.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.is_file()).collect();
    out.sort();
    out
}

/// Calls `entry` on every file of `target`'s seed corpus and regression inputs; panics
/// naming each input on which `entry` panicked, or if the corpus is empty (a replay of
/// nothing would pass without testing anything). Returns how many inputs ran.
pub fn replay(target: &str, entry: fn(&[u8])) -> usize {
    let corpus = files(&fuzz_dir().join("corpus").join(target));
    assert!(!corpus.is_empty(), "no seed corpus in fuzz/corpus/{target}");
    let regressions = files(&fuzz_dir().join("regressions").join(target));
    let mut failed = Vec::new();
    for path in corpus.iter().chain(&regressions) {
        let data =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        if catch_unwind(AssertUnwindSafe(|| entry(&data))).is_err() {
            failed.push(path.display().to_string());
        }
    }
    assert!(failed.is_empty(), "fuzz target `{target}` panicked on: {}", failed.join(", "));
    corpus.len() + regressions.len()
}
