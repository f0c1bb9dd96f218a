//! Waiting for the runtime from a Python thread.
//!
//! Every wait releases the interpreter (`py.detach`), so other Python threads run,
//! and waits in slices of at most [`SIGNAL_CHECK`], checking for signals in
//! between, so Ctrl-C interrupts a blocked call within a second.

use std::future::Future;
use std::time::{Duration, Instant};

use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors;

/// The longest a blocked call waits before it checks for Ctrl-C.
pub const SIGNAL_CHECK: Duration = Duration::from_millis(100);

/// Runs `fut` to completion as a task on `rt`, with the interpreter released.
/// Ctrl-C (or `timeout`, raising `DeadlineExceededError`) aborts the task.
pub fn run<T, Fut>(
    py: Python<'_>,
    rt: &Runtime,
    timeout: Option<Duration>,
    what: &str,
    fut: Fut,
) -> PyResult<T>
where
    T: Send + 'static,
    Fut: Future<Output = T> + Send + 'static,
{
    let mut task = rt.spawn(fut);
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let slice = slice_until(deadline);
        // Polling the handle again after a slice ended is how it is meant to be used.
        let polled =
            py.detach(|| rt.block_on(async { tokio::time::timeout(slice, &mut task).await }));
        match polled {
            Ok(Ok(v)) => return Ok(v),
            Ok(Err(e)) => return Err(errors::internal(format!("{what} failed: {e}"))),
            Err(_) => {}
        }
        if let Err(e) = interrupted(py, deadline, timeout, what) {
            task.abort();
            return Err(e);
        }
    }
}

fn slice_until(deadline: Option<Instant>) -> Duration {
    match deadline {
        Some(d) => d.saturating_duration_since(Instant::now()).min(SIGNAL_CHECK),
        None => SIGNAL_CHECK,
    }
}

/// After a slice: the exception of a pending signal, or of a passed deadline.
fn interrupted(
    py: Python<'_>,
    deadline: Option<Instant>,
    timeout: Option<Duration>,
    what: &str,
) -> PyResult<()> {
    py.check_signals()?;
    if deadline.is_some_and(|d| Instant::now() >= d) {
        return Err(errors::deadline_exceeded(format!(
            "{what} did not finish within {:?}",
            timeout.unwrap_or_default()
        )));
    }
    Ok(())
}

/// Waits for a cancel-safe future, made again by `make` for each slice (a read
/// from a channel, a clone of a shared future): a slice that ends drops it.
pub fn slices<T, F, Fut>(
    py: Python<'_>,
    rt: &Runtime,
    timeout: Option<Duration>,
    what: &str,
    mut make: F,
) -> PyResult<T>
where
    T: Send,
    F: FnMut() -> Fut + Send,
    Fut: Future<Output = T>,
{
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let slice = slice_until(deadline);
        let make = &mut make;
        if let Ok(v) =
            py.detach(|| rt.block_on(async { tokio::time::timeout(slice, make()).await }))
        {
            return Ok(v);
        }
        interrupted(py, deadline, timeout, what)?;
    }
}

/// A non-negative number of seconds, or an error naming the argument.
pub fn seconds(what: &str, s: f64) -> PyResult<Duration> {
    Duration::try_from_secs_f64(s)
        .map_err(|_| errors::invalid_argument(format!("{what}={s}: give a number of seconds >= 0")))
}
