//! Waiting on a condition, never on a clock: poll it until it holds, and fail
//! (panic, as a test wants) once [`DEADLINE`] has passed. The polling interval is
//! how soon a change is seen, not a guess at how long something takes.

use std::future::Future;
use std::time::{Duration, Instant};

/// How long a test waits for anything (a condition, a server, a leader).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// Polls `cond` until it is true; panics with `what` after [`DEADLINE`].
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let start = Instant::now();
    while !cond().await {
        assert!(start.elapsed() < DEADLINE, "timed out after {DEADLINE:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Blocking form of [`wait_until`], for tests that drive processes.
pub fn wait_blocking(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out after {DEADLINE:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
