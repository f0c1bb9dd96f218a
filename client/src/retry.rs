//! Bounded retries: exponential backoff with jitter, capped, up to a deadline.
//!
//! Every remote call in Sluice that may meet an unavailable peer goes through
//! [`RetryPolicy`], so no loop retries forever and every give-up names the peer.

use std::time::Duration;

use rand::Rng;
use tonic::Code;

/// How long and how often to retry a call that failed with a retryable status.
#[derive(Clone, Debug)]
pub struct RetryPolicy {
    /// First backoff; each later one is 1.5× the previous, up to `max_backoff`.
    pub initial_backoff: Duration,
    pub max_backoff: Duration,
    /// Give up once this much time has passed since the first attempt.
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
}

/// Status codes that mean "the peer may answer later": retry them.
pub fn is_retryable(code: Code) -> bool {
    matches!(code, Code::Unavailable | Code::Aborted | Code::Cancelled | Code::DeadlineExceeded)
}

/// Whether a failed call is worth retrying: the retryable codes, and the transport
/// failures (a connection reset by a killed peer mid-call) that tonic reports as
/// `Unknown`.
pub fn is_retryable_status(status: &tonic::Status) -> bool {
    if is_retryable(status.code()) {
        return true;
    }
    let m = status.message().to_ascii_lowercase();
    status.code() == Code::Unknown
        && ["transport", "connection", "broken pipe", "reset", "h2 protocol", "stream"]
            .iter()
            .any(|w| m.contains(w))
}
