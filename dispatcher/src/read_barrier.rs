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

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::Mutex;

use crate::error::ProposeError;

/// The outcome of a confirmation round: the log index it confirmed (what a read
/// must see applied), or why it could not confirm.
pub(crate) type Confirmed = Result<u64, ProposeError>;

#[derive(Default)]
pub(crate) struct ReadBarrier {
    /// Rounds started so far (the number of the latest).
    started: AtomicU64,
    /// Held while a round runs; inside, the latest completed round and its
    /// outcome. A tokio mutex: it is held across the confirmation's await, and
    /// it queues readers in arrival order.
    completed: Mutex<Option<(u64, Confirmed)>>,
    /// Confirmations actually run (for tests and the metrics).
    rounds_run: AtomicU64,
}

impl ReadBarrier {
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
        let mut completed = self.completed.lock().await;
        if let Some((round, outcome)) = completed.as_ref() {
            if *round >= needed {
                return outcome.clone();
            }
        }
        let round = self.started.fetch_add(1, Ordering::SeqCst) + 1;
        self.rounds_run.fetch_add(1, Ordering::Relaxed);
        let outcome = confirm().await;
        *completed = Some((round, outcome.clone()));
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
        let barrier = Arc::new(ReadBarrier::default());
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
}
