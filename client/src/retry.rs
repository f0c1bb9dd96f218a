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

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Status;

    #[test]
    fn transport_failures_are_retryable_by_type_whatever_their_code() {
        // A stream torn down mid-call: tonic maps the h2 error to Internal.
        let torn = Status::from_error(Box::new(h2::Error::from(h2::Reason::INTERNAL_ERROR)));
        assert_eq!(torn.code(), Code::Internal);
        assert!(is_retryable_status(&torn), "{torn:?}");
        // A reset connection, wrapped once more, as a body error arrives.
        let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        let wrapped: Box<dyn std::error::Error + Send + Sync> = Box::new(Wrapper(reset));
        let status = Status::from_error(wrapped);
        assert_eq!(status.code(), Code::Unknown);
        assert!(is_retryable_status(&status), "{status:?}");
    }

    #[test]
    fn a_status_the_peer_sent_is_judged_by_its_code_not_its_text() {
        let sent = Status::internal("h2 protocol error: connection reset (transport)");
        assert!(!is_retryable_status(&sent));
        assert!(is_retryable_status(&Status::unavailable("anything")));
        assert!(!is_retryable_status(&Status::not_found("task 3")));
    }

    #[derive(Debug)]
    struct Wrapper(std::io::Error);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "reading the body")
        }
    }
    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
}
