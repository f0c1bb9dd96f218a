//! Bounded retries: exponential backoff with jitter, capped, up to a deadline.
//!
//! Every remote call in Sluice that may meet an unavailable peer goes through
//! [`RetryPolicy`], so no loop retries forever (unless asked to, with an explicit
//! unbounded deadline) and every give-up names the peer. The one retry loop is
//! [`Retry::run`]: the caller's operation makes one attempt and says what it came
//! to ([`Attempt`]); the loop keeps the failure clock and count, backs off and
//! gives up. What differs between callers stays in their operation:
//!
//! ```text
//!  op(failures so far) ──Done(v)──────────────► Ok(v)
//!        │  ──GiveUp(e)─────────────────────────► Err(e)          (a permanent error)
//!        │  ──Waiting───► clock reset, at once ─┐ (the peer is alive, nothing yet)
//!        │  ──Redirected► at once ──────────────┤ (a follower named the leader)
//!        │  ──Failed(e)─► count; past the deadline? ──yes──► Err(Unavailable{peer, attempts, e})
//!        │                 │ no: back off (or `stop` resolves ──► Ok(stop's value))
//!        └────────────────┴─────────────────────┘
//! ```
//!
//! A side step after some failures (a coordinated reader's vote to remove a task)
//! is the operation's own: it gets the number of failures so far.

use std::fmt::Display;
use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tonic::Code;

use crate::error::ClientError;

#[cfg(test)]
mod tests;

/// How long and how often to retry a call that failed with a retryable status.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// First backoff; each later one is 1.5× the previous, up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Give up once this much time has passed since the first failure (for a
    /// call that [`Retry::counting_from_start`], since the call began).
    pub deadline: Duration,
    /// Timeout of one attempt.
    pub attempt_timeout: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            initial_backoff: Duration::from_millis(20),
            // Low: the common retryable failure is a leader election (a few hundred
            // ms); a long backoff would add up to itself to every failover. Four
            // attempts a second per caller is cheap for a dispatcher or a worker.
            max_backoff: Duration::from_millis(250),
            deadline: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// Small timeouts for tests on loopback.
    pub fn for_tests() -> Self {
        RetryPolicy {
            initial_backoff: Duration::from_millis(10),
            max_backoff: Duration::from_millis(200),
            deadline: Duration::from_secs(20),
            attempt_timeout: Duration::from_secs(5),
        }
    }

    pub fn with_deadline(mut self, deadline: Duration) -> Self {
        self.deadline = deadline;
        self
    }

    /// The backoff before attempt `n + 1` (n ≥ 0), with ±25% jitter.
    pub fn backoff(&self, n: u32) -> Duration {
        let base = self.initial_backoff.as_secs_f64() * 1.5f64.powi(n.min(40) as i32);
        let capped = base.min(self.max_backoff.as_secs_f64());
        let jitter = rand::thread_rng().gen_range(0.75..1.25);
        Duration::from_secs_f64(capped * jitter)
    }

    /// A retry loop of calls to `peer` ("dispatcher", "worker") at `address`
    /// (named in the give-up error) under this policy.
    pub fn retry<'a>(&'a self, peer: &'static str, address: &'a str) -> Retry<'a> {
        Retry { policy: self, peer, address, from_start: false }
    }
}

/// What one attempt came to: the retry loop's next step.
#[derive(Debug)]
pub enum Attempt<T, E> {
    /// The result: stop with it.
    Done(T),
    /// A failure no retry changes (the peer's verdict, a malformed answer): stop.
    GiveUp(ClientError),
    /// A retryable failure: count it and back off, or give up past the deadline
    /// with `Unavailable` carrying this error's text.
    Failed(E),
    /// A retryable failure of an attempt that got something from the peer first
    /// (a stream delivered messages, then broke): the peer was alive until now,
    /// so the clock and the count restart with this failure.
    FailedAfterProgress(E),
    /// The peer answered but has nothing yet (a long poll's `waiting`): it is
    /// alive, so the clock and the count restart, and the next attempt goes out
    /// at once.
    Waiting,
    /// Sent elsewhere (a follower named the leader): the next attempt goes out at
    /// once, uncounted; the clock runs on. The operation bounds its redirects.
    Redirected,
}

/// One retry loop; see the module doc. Made by [`RetryPolicy::retry`].
#[must_use = "a Retry does nothing until run"]
pub struct Retry<'a> {
    policy: &'a RetryPolicy,
    peer: &'static str,
    address: &'a str,
    from_start: bool,
}

impl Retry<'_> {
    /// Counts the deadline from the start of the first attempt, not from the first
    /// failure: for a call bounded as a whole (a dispatcher call), where the time
    /// a failing first attempt took counts. A stream, which may run for hours
    /// before it fails, counts from its failure (the default).
    pub fn counting_from_start(mut self) -> Self {
        self.from_start = true;
        self
    }

    /// Runs `op` until it is done, gives up, or the deadline passes. `op` gets the
    /// number of failures so far (since the last progress).
    pub async fn run<T, E, F, Fut>(self, op: F) -> Result<T, ClientError>
    where
        E: Display,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Attempt<T, E>>,
    {
        self.run_until(std::future::pending(), op).await
    }

    /// [`Retry::run`], and a backoff is cut short by `stop`, whose value is then
    /// the result (the task ended meanwhile, the worker is stopping). `stop` is
    /// only polled between attempts: an attempt is never cut off by it (an
    /// operation that should be stops itself).
    pub async fn run_until<T, E, F, Fut, S>(self, stop: S, mut op: F) -> Result<T, ClientError>
    where
        E: Display,
        F: FnMut(u32) -> Fut,
        Fut: Future<Output = Attempt<T, E>>,
        S: Future<Output = T>,
    {
        let policy = self.policy;
        let mut stop = std::pin::pin!(stop);
        let mut failing_since = self.from_start.then(Instant::now);
        let mut failures = 0u32;
        loop {
            let error = match op(failures).await {
                Attempt::Done(v) => return Ok(v),
                Attempt::GiveUp(e) => return Err(e),
                Attempt::Redirected => continue,
                Attempt::Waiting => {
                    failing_since = None;
                    failures = 0;
                    continue;
                }
                Attempt::Failed(e) => e,
                Attempt::FailedAfterProgress(e) => {
                    failing_since = None;
                    failures = 0;
                    e
                }
            };
            let since = *failing_since.get_or_insert_with(Instant::now);
            failures += 1;
            let elapsed = since.elapsed();
            if elapsed >= policy.deadline {
                return Err(ClientError::Unavailable {
                    peer: self.peer,
                    address: self.address.to_string(),
                    attempts: failures,
                    elapsed,
                    last_error: error.to_string(),
                });
            }
            let (peer, address) = (self.peer, self.address);
            tracing::debug!(peer, address, failures, error = %error, "retrying");
            // Never sleep past the deadline: the last attempt goes out at it.
            let pause = policy.backoff(failures - 1).min(policy.deadline - elapsed);
            tokio::select! {
                _ = tokio::time::sleep(pause) => {}
                v = &mut stop => return Ok(v),
            }
        }
    }
}

/// A status as the last error of a give-up: its code and message.
pub(crate) fn describe(status: &tonic::Status) -> String {
    format!("{:?}: {}", status.code(), status.message())
}

/// Status codes that mean "the peer may answer later": retry them.
pub fn is_retryable(code: Code) -> bool {
    matches!(code, Code::Unavailable | Code::Aborted | Code::Cancelled | Code::DeadlineExceeded)
}

/// Whether a failed call is worth retrying: a retryable code, or a failure of the
/// connection itself ([`is_transport_failure`]) whatever code tonic gave it.
pub fn is_retryable_status(status: &tonic::Status) -> bool {
    is_retryable(status.code()) || is_transport_failure(status)
}

/// Whether the call failed in the connection rather than in the peer's answer: a
/// connection reset by a killed peer, or an HTTP/2 stream torn down by a stopping
/// one. Told by the type of the error tonic keeps as the status's source (h2,
/// hyper, I/O or tonic transport errors), never by its text; tonic maps these to
/// `Unknown`, `Internal` or `Cancelled`. A status the peer sent has no source.
pub fn is_transport_failure(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(e) = source {
        if e.is::<h2::Error>()
            || e.is::<hyper::Error>()
            || e.is::<std::io::Error>()
            || e.is::<tonic::transport::Error>()
        {
            return true;
        }
        source = e.source();
    }
    false
}
