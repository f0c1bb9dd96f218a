use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use tokio::time::{sleep, Instant};
use tonic::Status;

use super::*;

fn policy() -> RetryPolicy {
    RetryPolicy {
        initial_backoff: Duration::from_millis(10),
        max_backoff: Duration::from_millis(200),
        deadline: Duration::from_secs(5),
        attempt_timeout: Duration::from_secs(1),
    }
}

fn unavailable(r: Result<(), ClientError>) -> (u32, Duration, String) {
    match r {
        Err(ClientError::Unavailable { peer, address, attempts, elapsed, last_error }) => {
            assert_eq!((peer, address.as_str()), ("worker", "w:1"));
            (attempts, elapsed, last_error)
        }
        other => panic!("expected Unavailable, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn gives_up_at_the_deadline_naming_the_peer_the_attempts_and_the_last_error() {
    let p = policy();
    let times = Mutex::new(Vec::new());
    let start = Instant::now();
    let result: Result<(), _> = p
        .retry("worker", "w:1")
        .run(|failures| {
            let mut t = times.lock().unwrap();
            assert_eq!(failures as usize, t.len(), "the operation sees the failures so far");
            t.push(Instant::now());
            let n = t.len();
            async move { Attempt::<(), _>::Failed(format!("refused #{n}")) }
        })
        .await;
    let (attempts, elapsed, last_error) = unavailable(result);
    let times = times.into_inner().unwrap();
    assert_eq!(attempts as usize, times.len());
    assert_eq!(last_error, format!("refused #{}", times.len()));
    assert!(elapsed >= p.deadline, "{elapsed:?}");
    // The last attempt goes out at the deadline, not a backoff after it.
    let total = start.elapsed();
    assert!(total >= p.deadline && total < p.deadline + p.initial_backoff, "{total:?}");
    // Backoffs grow from the first and stay under the cap (with its jitter).
    let gaps: Vec<Duration> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(gaps[0] <= p.initial_backoff.mul_f64(1.25) + Duration::from_millis(1), "{gaps:?}");
    let cap = p.max_backoff.mul_f64(1.25) + Duration::from_millis(1);
    assert!(gaps.iter().all(|g| *g <= cap), "{gaps:?}");
    assert!(gaps.iter().rev().skip(1).any(|g| *g >= p.max_backoff.mul_f64(0.75)), "{gaps:?}");
}

#[tokio::test(start_paused = true)]
async fn a_permanent_error_is_never_retried() {
    let calls = AtomicU32::new(0);
    let result: Result<(), _> = policy()
        .retry("worker", "w:1")
        .run(|_| {
            calls.fetch_add(1, Ordering::Relaxed);
            async { Attempt::<(), String>::GiveUp(ClientError::InvalidArgument("no".into())) }
        })
        .await;
    assert!(matches!(result, Err(ClientError::InvalidArgument(ref m)) if m == "no"), "{result:?}");
    assert_eq!(calls.load(Ordering::Relaxed), 1);
}

#[tokio::test(start_paused = true)]
async fn progress_restarts_the_clock_and_the_count() {
    let p = policy();
    let start = Instant::now();
    let last_progress = Mutex::new(None);
    let result: Result<(), _> = p
        .retry("worker", "w:1")
        .run(|_| {
            let t = start.elapsed();
            let mut last = last_progress.lock().unwrap();
            // Alive (waiting) once at 4 s, a stream that made progress at 8 s,
            // failures otherwise: without the resets this gives up at 5 s.
            let attempt = if last.is_none() && t >= Duration::from_secs(4) {
                *last = Some(t);
                Attempt::Waiting
            } else if last.is_some_and(|l| l < Duration::from_secs(8))
                && t >= Duration::from_secs(8)
            {
                *last = Some(t);
                Attempt::FailedAfterProgress("broke after a message".to_string())
            } else {
                Attempt::Failed("refused".to_string())
            };
            async move { attempt }
        })
        .await;
    let (attempts, elapsed, _) = unavailable(result);
    let progress = last_progress.into_inner().unwrap().expect("progress was made");
    assert!(progress >= Duration::from_secs(8), "{progress:?}");
    assert!(elapsed >= p.deadline && elapsed < p.deadline + p.initial_backoff, "{elapsed:?}");
    assert!(start.elapsed() >= progress + p.deadline, "{:?}", start.elapsed());
    // Counted since the progress: a 5 s run of backoffs capped at 200 ms.
    assert!((20..=60).contains(&attempts), "{attempts}");
}

#[tokio::test(start_paused = true)]
async fn a_redirect_goes_out_at_once_and_is_not_counted() {
    let start = Instant::now();
    let calls = AtomicU32::new(0);
    let result = policy()
        .retry("dispatcher", "d:1")
        .run(|failures| {
            assert_eq!(failures, 0);
            let n = calls.fetch_add(1, Ordering::Relaxed);
            async move {
                if n < 3 {
                    Attempt::<u32, String>::Redirected
                } else {
                    Attempt::Done(n)
                }
            }
        })
        .await;
    assert_eq!(result.unwrap(), 3);
    assert_eq!(Instant::now(), start, "no backoff before a redirected attempt");
}

#[tokio::test(start_paused = true)]
async fn stop_cuts_a_backoff_short_but_never_an_attempt() {
    let p = policy();
    // Failing attempts: the stop ends the loop during a backoff.
    let result = p
        .retry("worker", "w:1")
        .run_until(
            async {
                sleep(Duration::from_millis(300)).await;
                7
            },
            |_| async { Attempt::<u32, String>::Failed("refused".into()) },
        )
        .await;
    assert_eq!(result.unwrap(), 7);
    // A long attempt runs to its end although the stop resolved meanwhile.
    let result = p
        .retry("worker", "w:1")
        .run_until(async { 7 }, |_| async {
            sleep(Duration::from_secs(2)).await;
            Attempt::<u32, String>::Done(1)
        })
        .await;
    assert_eq!(result.unwrap(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_counting_from_its_start_includes_its_first_attempt() {
    let p = policy();
    let slow_failure = |_| async {
        sleep(Duration::from_secs(6)).await;
        Attempt::<(), String>::Failed("no answer".into())
    };
    let (attempts, elapsed, _) =
        unavailable(p.retry("worker", "w:1").counting_from_start().run(slow_failure).await);
    assert_eq!(attempts, 1, "the first attempt alone outlasted the deadline");
    assert!(elapsed >= Duration::from_secs(6), "{elapsed:?}");
    // Counting from the failure, the same call is tried again.
    let (attempts, _, _) = unavailable(p.retry("worker", "w:1").run(slow_failure).await);
    assert_eq!(attempts, 2);
}

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
