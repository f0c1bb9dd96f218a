//! Replays a fuzz target's committed inputs as an ordinary test, so CI exercises every
//! fuzz entry point on stable without libFuzzer (docs/security.md, "Fuzzing").
//!
//! Why here: five crates each replay their targets' inputs; the walk over
//! `fuzz/corpus/<target>` and `fuzz/regressions/<target>`, and a failure that names the
//! input, are the same for all of them.
//!
//! Without libFuzzer's `-malloc_limit_mb`, an input that makes a decoder allocate
//! terabytes can pass (Linux hands out untouched zeroed memory lazily). So a replay
//! test binary installs [`LargestAllocation`] as its global allocator, and [`replay`]
//! fails an input whose largest single allocation exceeds [`MALLOC_LIMIT`], the limit
//! the fuzz runs use.

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

/// The largest single allocation one input may make (`scripts/fuzz.sh` passes the same
/// to libFuzzer as `-malloc_limit_mb`).
pub const MALLOC_LIMIT: usize = 512 << 20;

/// The system allocator, recording the largest allocation since [`replay`] reset it.
/// Install it in each replay test binary:
/// `#[global_allocator] static A: LargestAllocation = LargestAllocation;`
pub struct LargestAllocation;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`; only a size is recorded.
unsafe impl GlobalAlloc for LargestAllocation {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        LARGEST.fetch_max(layout.size(), Ordering::Relaxed);
        // SAFETY: as for `alloc`.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` through this allocator.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LARGEST.fetch_max(new_size, Ordering::Relaxed);
        // SAFETY: as for `dealloc`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// One measurement at a time per process: the largest allocation is process-wide.
static REPLAYING: Mutex<()> = Mutex::new(());

/// A turn at measuring: while it is held, no other turn or [`replay`] in this process
/// runs. Take it *before* preparing a measurement's inputs, so a test's setup (a
/// 16 MB payload, say) cannot land inside another test's measurement: the test
/// harness runs tests on parallel threads, and every thread's allocations count.
pub struct Turn {
    _one: std::sync::MutexGuard<'static, ()>,
}

/// Waits for a [`Turn`].
pub fn turn() -> Turn {
    Turn { _one: REPLAYING.lock().unwrap_or_else(|e| e.into_inner()) }
}

impl Turn {
    /// Runs `f` and returns the largest single allocation made meanwhile (with
    /// [`LargestAllocation`] installed).
    pub fn largest_allocation<T>(&self, f: impl FnOnce() -> T) -> (T, usize) {
        measure(f)
    }
}

fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LARGEST.store(0, Ordering::Relaxed);
    let out = f();
    (out, LARGEST.load(Ordering::Relaxed))
}

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
/// naming each input on which `entry` panicked or allocated more than [`MALLOC_LIMIT`]
/// at once, or if the corpus is empty (a replay of nothing would pass without testing
/// anything), or if the binary did not install [`LargestAllocation`]. Returns how many
/// inputs ran.
pub fn replay(target: &str, entry: fn(&[u8])) -> usize {
    let _one = turn();
    let ((), probe) = measure(|| drop(std::hint::black_box(vec![0u8; 7])));
    assert!(
        probe >= 7,
        "install sluice_testkit::fuzz_corpus::LargestAllocation as the global allocator"
    );
    let corpus = files(&fuzz_dir().join("corpus").join(target));
    assert!(!corpus.is_empty(), "no seed corpus in fuzz/corpus/{target}");
    let regressions = files(&fuzz_dir().join("regressions").join(target));
    let mut failed = Vec::new();
    for path in corpus.iter().chain(&regressions) {
        let data =
            std::fs::read(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let (outcome, largest) = measure(|| catch_unwind(AssertUnwindSafe(|| entry(&data))));
        if outcome.is_err() {
            failed.push(format!("{} (panicked)", path.display()));
        }
        if largest > MALLOC_LIMIT {
            failed.push(format!("{} (allocated {largest} bytes at once)", path.display()));
        }
    }
    assert!(failed.is_empty(), "fuzz target `{target}` failed on: {}", failed.join(", "));
    corpus.len() + regressions.len()
}
