//! Group commit above Raft, and what may be proposed at all.
//!
//! openraft 0.9 makes one log write per client write, and its core awaits each
//! write before it takes the next client write (on the leader; a follower awaits
//! each AppendEntries' write the same way). So every log entry costs a whole
//! journal write (an fsync, or a PUT to an object store), serially on the leader,
//! and the split rate is the number of commands per entry over the write time.
//! The batcher therefore keeps **one** entry in flight: proposals that arrive
//! while it replicates wait, and the next entry carries them all as one
//! `Command::Batch` (one write per node, one replication round), each caller
//! getting its own command's answer. (Several entries in flight split the same
//! callers into smaller entries that each pay a full write: measured on 3 nodes
//! on moto with 16 callers, 4 in flight gave ~2.8 commands per entry and ~330
//! splits/s, one in flight 16 per entry and ~1,300/s; on sled it doubled too.)
//!
//! The callers the last entry answered usually ask again at once, a moment after
//! the next entry would have left without them (and they would wait a whole
//! commit for the one after). So when fewer proposals are queued than the last
//! entry carried plus those queued behind it, the batcher waits for them, at most
//! [`linger`] (half the last commit time, capped): a bounded wait that only a
//! caller that keeps the pace of the commits can fill. A caller that went away
//! costs one such wait, then the expected count follows the real one.
//!
//! A batch is one log entry, so it stays within the entry cap
//! (`MAX_ENTRY_BYTES`), and [`admit`] refuses, before a command is queued, one
//! that is over the cap by itself (or a `Batch`, which only the batcher makes).

use std::collections::BTreeMap;
use std::time::Duration;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::command::{Command, Response};
use crate::error::{ProposeError, StateError};
use crate::raft::codec::{encoded_len, MAX_ENTRY_BYTES};
use crate::raft::{NodeId, Raft};

/// One caller's command and where its answer goes.
pub(crate) struct Proposal {
    pub(crate) cmd: Command,
    /// Its encoded length (≤ `MAX_ENTRY_BYTES`, checked by [`admit`]).
    pub(crate) bytes: u64,
    pub(crate) reply: oneshot::Sender<Result<Response, ProposeError>>,
}

/// Most commands in one batched log entry.
const MAX_BATCH: usize = 256;
/// The longest the batcher waits for the callers it expects (module doc).
const MAX_LINGER: Duration = Duration::from_millis(2);
/// Proposals queued before `propose` waits (backpressure).
pub(crate) const PROPOSAL_QUEUE: usize = 4096;
/// What a batch adds to its commands' encoded lengths: the variant and the
/// vector's length.
const BATCH_OVERHEAD: u64 = 12;

/// Writes one command (or batch) through Raft.
#[derive(Clone)]
pub(crate) struct Writer {
    pub(crate) raft: Raft,
    pub(crate) node_id: NodeId,
    pub(crate) members: BTreeMap<NodeId, String>,
    /// `sluice_raft_commit_seconds`: successful writes only (a refused one
    /// committed nothing).
    pub(crate) commit_latency: prometheus_client::metrics::histogram::Histogram,
    /// `sluice_raft_batch_commands`: commands per entry, successful writes only.
    pub(crate) batch_sizes: prometheus_client::metrics::histogram::Histogram,
}

impl Writer {
    fn not_leader(&self, leader_id: Option<NodeId>) -> ProposeError {
        ProposeError::NotLeader {
            node_id: self.node_id,
            leader_id,
            leader_address: leader_id.and_then(|l| {
                crate::raft::addresses::client_address_of(&self.raft, &self.members, l)
            }),
        }
    }

    async fn write(&self, cmd: Command) -> Result<Result<Response, StateError>, ProposeError> {
        let name = cmd.name();
        let commands = match &cmd {
            Command::Batch(cmds) => cmds.len(),
            _ => 1,
        };
        let start = std::time::Instant::now();
        match self.raft.client_write(cmd).await {
            Ok(resp) => {
                self.commit_latency.observe(start.elapsed().as_secs_f64());
                self.batch_sizes.observe(commands as f64);
                resp.data.ok_or_else(|| {
                    ProposeError::Unavailable(format!("{name}: no answer from apply"))
                })
            }
            Err(RaftError::APIError(ClientWriteError::ForwardToLeader(f))) => {
                Err(self.not_leader(f.leader_id))
            }
            Err(e) => Err(ProposeError::Unavailable(format!("{name}: {e}"))),
        }
    }
}

/// Joins the proposals queued on `rx` into batches, one in flight (module doc),
/// until `rx` closes.
pub(crate) async fn batcher(writer: Writer, mut rx: mpsc::Receiver<Proposal>) {
    let mut pace = Pace::default();
    let mut held: Option<Proposal> = None;
    // Queued while the last entry replicated: not among the callers it answered.
    let mut queued = 0;
    loop {
        let first = match held.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let expected = (pace.last_len + queued).clamp(1, MAX_BATCH);
        let deadline = Instant::now() + linger(pace.last_commit);
        let (batch, over) = gather(&mut rx, first, expected, deadline, |p| p.bytes).await;
        held = over;
        pace.last_len = batch.len();
        let start = Instant::now();
        let answers = commit(&writer, batch).await;
        pace.last_commit = start.elapsed();
        // Counted before the answers go out, so no answered caller is among them.
        queued = rx.len() + usize::from(held.is_some());
        for (reply, answer) in answers {
            let _ = reply.send(answer);
        }
    }
}

type Answer = (oneshot::Sender<Result<Response, ProposeError>>, Result<Response, ProposeError>);

/// What the last entry tells the next one.
#[derive(Default)]
struct Pace {
    /// Commands the last entry carried (callers likely to ask again).
    last_len: usize,
    /// How long the last entry took to commit and apply.
    last_commit: Duration,
}

/// How long to wait for expected callers: half the last commit (a caller that
/// misses the entry waits a whole commit for the next), at most [`MAX_LINGER`].
fn linger(last_commit: Duration) -> Duration {
    (last_commit / 2).min(MAX_LINGER)
}

/// One batch from `first` and what is queued on `rx`: everything queued now,
/// then what arrives before `deadline` until there are `expected`. Stops at
/// [`MAX_BATCH`], and before an item that would take the encoded size over
/// `MAX_ENTRY_BYTES` (returned apart: it starts the next batch).
async fn gather<T>(
    rx: &mut mpsc::Receiver<T>,
    first: T,
    expected: usize,
    deadline: Instant,
    bytes_of: impl Fn(&T) -> u64,
) -> (Vec<T>, Option<T>) {
    let mut bytes = bytes_of(&first);
    let mut batch = vec![first];
    while batch.len() < MAX_BATCH {
        let next = match rx.try_recv() {
            Ok(p) => p,
            Err(_) if batch.len() >= expected => break,
            Err(_) => match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(p)) => p,
                Ok(None) | Err(_) => break,
            },
        };
        if bytes + bytes_of(&next) + BATCH_OVERHEAD > MAX_ENTRY_BYTES {
            return (batch, Some(next));
        }
        bytes += bytes_of(&next);
        batch.push(next);
    }
    (batch, None)
}

/// Writes `batch` through Raft (a lone command as itself): each caller's answer.
async fn commit(writer: &Writer, mut batch: Vec<Proposal>) -> Vec<Answer> {
    if batch.len() == 1 {
        let p = batch.pop().expect("one proposal");
        let r = writer.write(p.cmd).await.and_then(|r| r.map_err(ProposeError::Rejected));
        return vec![(p.reply, r)];
    }
    let (cmds, replies): (Vec<Command>, Vec<_>) =
        batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
    let n = cmds.len();
    match writer.write(Command::Batch(cmds)).await {
        Ok(Ok(Response::Batch(results))) if results.len() == n => replies
            .into_iter()
            .zip(results)
            .map(|(reply, r)| (reply, r.map_err(ProposeError::Rejected)))
            .collect(),
        Ok(other) => {
            let e = ProposeError::Unavailable(format!("batch: unexpected answer {other:?}"));
            replies.into_iter().map(|r| (r, Err(e.clone()))).collect()
        }
        Err(e) => replies.into_iter().map(|r| (r, Err(e.clone()))).collect(),
    }
}

/// Whether `cmd` may be proposed: not a batch, and within the entry cap. Its
/// encoded length when it may.
pub(crate) fn admit(cmd: &Command) -> Result<u64, StateError> {
    if let Command::Batch(_) = cmd {
        return Err(StateError::InvalidArgument(
            "a Batch is made by the dispatcher's batcher and cannot be proposed".into(),
        ));
    }
    let bytes = encoded_len(cmd).map_err(|e| {
        StateError::InvalidArgument(format!("{}: cannot be encoded: {e}", cmd.name()))
    })?;
    if bytes > MAX_ENTRY_BYTES {
        return Err(StateError::ResourceExhausted(format!(
            "{} is {bytes} bytes encoded, over the cap of {MAX_ENTRY_BYTES} bytes on one \
             replicated command (a Raft log entry); make it smaller (e.g. a dataset with \
             fewer or shorter file names, or several datasets)",
            cmd.name()
        )));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Items `sent_at` after now, from a task (paused time: exact instants).
    fn arriving(items: Vec<(Duration, u32)>) -> mpsc::Receiver<u32> {
        let (tx, rx) = mpsc::channel(16);
        let t0 = Instant::now();
        tokio::spawn(async move {
            for (at, item) in items {
                tokio::time::sleep_until(t0 + at).await;
                tx.send(item).await.unwrap();
            }
        });
        rx
    }

    #[tokio::test(start_paused = true)]
    async fn takes_what_is_queued_and_does_not_wait_when_nothing_more_is_expected() {
        let (tx, mut rx) = mpsc::channel(16);
        for i in 1..=5 {
            tx.send(i).await.unwrap();
        }
        let t0 = Instant::now();
        let (batch, over) = gather(&mut rx, 0, 1, t0 + 2 * MS, |_| 1).await;
        assert_eq!(batch, vec![0, 1, 2, 3, 4, 5]);
        assert!(over.is_none());
        assert_eq!(Instant::now(), t0, "nothing more was expected: no wait");
    }

    /// The callers the last entry answered come back a moment later: they join
    /// this entry instead of waiting a whole commit for the next one.
    #[tokio::test(start_paused = true)]
    async fn waits_for_the_expected_callers_and_no_longer() {
        let mut rx = arriving(vec![(MS / 2, 1), (MS, 2), (3 * MS, 3)]);
        let t0 = Instant::now();
        let (batch, _) = gather(&mut rx, 0, 3, t0 + 2 * MS, |_| 1).await;
        assert_eq!(batch, vec![0, 1, 2], "the two expected callers joined");
        assert_eq!(Instant::now(), t0 + MS, "left as soon as the expected count was there");
    }

    /// A caller that does not come back costs one wait, bounded by the deadline.
    #[tokio::test(start_paused = true)]
    async fn an_expected_caller_that_does_not_come_costs_at_most_the_deadline() {
        let mut rx = arriving(vec![(MS / 2, 1), (5 * MS, 2)]);
        let t0 = Instant::now();
        let (batch, _) = gather(&mut rx, 0, 3, t0 + 2 * MS, |_| 1).await;
        assert_eq!(batch, vec![0, 1]);
        assert_eq!(Instant::now(), t0 + 2 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn an_item_that_would_pass_the_entry_cap_starts_the_next_batch() {
        let (tx, mut rx) = mpsc::channel(16);
        tx.send(1).await.unwrap();
        tx.send(2).await.unwrap();
        let half = MAX_ENTRY_BYTES / 2;
        let (batch, over) = gather(&mut rx, 0, 3, Instant::now() + 2 * MS, |_| half).await;
        assert_eq!((batch, over), (vec![0], Some(1)));
    }

    #[test]
    fn the_wait_is_half_the_last_commit_at_most_the_cap() {
        assert_eq!(linger(Duration::ZERO), Duration::ZERO);
        assert_eq!(linger(MS), MS / 2);
        assert_eq!(linger(Duration::from_secs(1)), MAX_LINGER);
    }
}
