//! [`ReadBarrier`]: one leadership confirmation for every leader read waiting
//! at the same time.
//!
//! A leader read (`Core::read_leader`) must confirm, with a quorum, that this
//! node still leads — openraft's `ensure_linearizable`, one heartbeat round to
//! every follower — and the confirmation must *start after the read arrived*
//! (one that started earlier could predate a newer leader). Each long-poll call
//! (`long_poll.rs`) begins with such a read; with every consumer and worker
//! long-polling, a confirmation per call made the quorum traffic grow with the
//! number of waiting callers.
//!
//! So confirmations are rounds, run one at a time. A read that arrives while
//! round `k` is under way needs round `k + 1` (which starts after it arrived);
//! every read that arrived during round `k` shares that one round:
//!
//! ```text
//!  reads:   a        b  c  d             e
//!  rounds:  [── 1 ──]  [────── 2 ──────]  [── 3 ──]
//!            serves a   serves b, c, d     serves e
//! ```
//!
//! Cost: at most one confirmation in flight and one queued, whatever the number
//! of readers; a read waits at most about two rounds. Nothing here is
//! replicated and no log entry is written: a read is never a command.
//!
//! And a round starts no sooner than [`MIN_ROUND_GAP`] after the previous one
//! started. Back to back, rounds ran as fast as a follower answers (~0.5 ms on
//! loopback): with 2,000 workers and 2,000 consumers long-polling, ~1,500 rounds
//! a second, each an AppendEntries to every follower (openraft's
//! `ensure_linearizable`) — more Raft RPCs than the replication itself, and most
//! of the followers' CPU. The gap bounds that at 500 rounds a second whatever
//! the load, for at most 2 ms more on a read that arrives just after a round
//! started (a read that finds no round for 2 ms starts one at once). The wait
//! is before the round's number is taken, so the round still starts after
//! every read it serves arrived.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::error::ProposeError;

/// The outcome of a confirmation round: the log index it confirmed (what a read
/// must see applied), or why it could not confirm.
pub(crate) type Confirmed = Result<u64, ProposeError>;

/// The least time between the starts of two confirmation rounds (module doc).
pub(crate) const MIN_ROUND_GAP: Duration = Duration::from_millis(2);

pub(crate) struct ReadBarrier {
    /// Rounds started so far (the number of the latest).
    started: AtomicU64,
    /// Held while a round runs (and while it waits for its turn); inside, the
    /// latest completed round. A tokio mutex: it is held across the
    /// confirmation's await, and it queues readers in arrival order.
    rounds: Mutex<Rounds>,
    /// Confirmations actually run (for tests and the metrics).
    rounds_run: AtomicU64,
    /// [`MIN_ROUND_GAP`], but for tests.
    gap: Duration,
}

#[derive(Default)]
struct Rounds {
    /// The latest completed round and its outcome.
    completed: Option<(u64, Confirmed)>,
    /// When the latest round started.
    last_start: Option<Instant>,
}

impl Default for ReadBarrier {
    fn default() -> Self {
        ReadBarrier::with_gap(MIN_ROUND_GAP)
    }
}

impl ReadBarrier {
    fn with_gap(gap: Duration) -> Self {
        ReadBarrier {
            started: AtomicU64::new(0),
            rounds: Mutex::default(),
            rounds_run: AtomicU64::new(0),
            gap,
        }
    }

    /// The outcome of a confirmation that started after this call did: a round
    /// already due for a reader that arrived no earlier, or one run now with
    /// `confirm`.
    pub(crate) async fn confirm<F, Fut>(&self, confirm: F) -> Confirmed
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Confirmed>,
    {
        // Any round numbered above the ones started so far starts later.
        let needed = self.started.load(Ordering::SeqCst) + 1;
        let mut rounds = self.rounds.lock().await;
        if let Some((round, outcome)) = rounds.completed.as_ref() {
            if *round >= needed {
                return outcome.clone();
            }
        }
        // Readers arriving during this wait still need this round (`started`
        // has not moved), and will find it completed when they get the lock.
        if let Some(last) = rounds.last_start {
            tokio::time::sleep_until(last + self.gap).await;
        }
        let round = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        rounds.last_start = Some(Instant::now());
        self.rounds_run.fetch_add(1, Ordering::Relaxed);
        let outcome = confirm().await;
        rounds.completed = Some((round, outcome.clone()));
        outcome
    }

    /// Confirmations run so far.
    pub(crate) fn rounds_run(&self) -> u64 {
        self.rounds_run.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::{mpsc, oneshot};

    use super::*;

    /// A confirmation the test completes by hand, announcing when it starts.
    async fn held(started: mpsc::UnboundedSender<oneshot::Sender<Confirmed>>) -> Confirmed {
        let (tx, rx) = oneshot::channel();
        started.send(tx).unwrap();
        rx.await.unwrap()
    }

    #[tokio::test]
    async fn reads_arriving_during_a_round_share_the_next_one() {
        let barrier = Arc::new(ReadBarrier::with_gap(Duration::ZERO));
        let (starts, mut started) = mpsc::unbounded_channel();
        let read = |barrier: Arc<ReadBarrier>| {
            let starts = starts.clone();
            tokio::spawn(async move { barrier.confirm(|| held(starts)).await })
        };
        let first = read(barrier.clone());
        let round_1 = started.recv().await.unwrap();
        // Ten reads arrive while round 1 runs; they queue behind it.
        let waiting: Vec<_> = (0..10).map(|_| read(barrier.clone())).collect();
        // On this one-thread runtime, each yield lets every spawned read run up
        // to the lock, where it waits (it needs round 2 whenever it got there:
        // no round starts before round 1 ends).
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        round_1.send(Ok(7)).unwrap();
        assert_eq!(first.await.unwrap(), Ok(7));
        // One round (2) serves all ten: it started after each of them arrived.
        let round_2 = started.recv().await.unwrap();
        round_2.send(Ok(9)).unwrap();
        for w in waiting {
            assert_eq!(w.await.unwrap(), Ok(9), "a read got a round that predates it");
        }
        assert_eq!(barrier.rounds_run(), 2);
        // A read after that needs a round of its own.
        let late = read(barrier.clone());
        started.recv().await.unwrap().send(Err(ProposeError::Unavailable("x".into()))).unwrap();
        assert!(late.await.unwrap().is_err());
        assert_eq!(barrier.rounds_run(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_starts_no_sooner_than_the_gap_after_the_last_and_serves_the_reads_that_waited()
    {
        let gap = Duration::from_millis(2);
        let barrier = Arc::new(ReadBarrier::with_gap(gap));
        let starts = Arc::new(std::sync::Mutex::new(vec![]));
        let read = |barrier: Arc<ReadBarrier>, answer: u64| {
            let starts = starts.clone();
            tokio::spawn(async move {
                let confirm = || async move {
                    starts.lock().unwrap().push(Instant::now());
                    Ok(answer)
                };
                barrier.confirm(confirm).await
            })
        };
        let t0 = Instant::now();
        assert_eq!(read(barrier.clone(), 1).await.unwrap(), Ok(1), "the first round at once");
        // Five reads right after it: one round, once the gap has passed, for all.
        let waiting: Vec<_> = (0..5).map(|i| read(barrier.clone(), 2 + i)).collect();
        let answers: Vec<_> = futures::future::join_all(waiting).await;
        assert!(answers.iter().all(|a| matches!(a, Ok(Ok(2)))), "{answers:?}");
        assert_eq!(barrier.rounds_run(), 2);
        assert_eq!(*starts.lock().unwrap(), vec![t0, t0 + gap]);
        // A read once the gap has passed since the last round: a round at once.
        tokio::time::advance(gap * 3).await;
        let t1 = Instant::now();
        assert_eq!(read(barrier.clone(), 9).await.unwrap(), Ok(9));
        assert_eq!(starts.lock().unwrap()[2], t1);
    }
}
