//! Group commit above Raft, and what may be proposed at all.
//!
//! openraft 0.9 makes one log write per client write and waits for it, so
//! proposals that arrive while batches are in flight are joined into one
//! `Command::Batch` entry — one fsync or PUT, one replication round — and each
//! caller gets its own command's answer. A batch is one log entry, so it stays
//! within the entry cap (`MAX_ENTRY_BYTES`), and [`admit`] refuses, before a
//! command is queued, one that is over the cap by itself (or a `Batch`, which
//! only the batcher makes).

use std::collections::BTreeMap;
use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use tokio::sync::{mpsc, oneshot, Semaphore};

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
/// Batches being replicated at once; while they are, new proposals gather into
/// the next batch.
const BATCHES_IN_FLIGHT: usize = 4;
/// Proposals queued before `propose` waits (backpressure).
pub(crate) const PROPOSAL_QUEUE: usize = 4096;
/// What a batch adds to its commands' encoded lengths: the variant and the
/// vector's length.
const BATCH_OVERHEAD: u64 = 12;

/// Writes one command (or batch) through Raft; shared by the batcher's tasks.
#[derive(Clone)]
pub(crate) struct Writer {
    pub(crate) raft: Raft,
    pub(crate) node_id: NodeId,
    pub(crate) members: BTreeMap<NodeId, String>,
    /// `sluice_raft_commit_seconds`: successful writes only (a refused one
    /// committed nothing).
    pub(crate) commit_latency: prometheus_client::metrics::histogram::Histogram,
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
        let start = std::time::Instant::now();
        match self.raft.client_write(cmd).await {
            Ok(resp) => {
                self.commit_latency.observe(start.elapsed().as_secs_f64());
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

/// Joins the proposals queued on `rx` into batches (module doc) until `rx`
/// closes.
pub(crate) async fn batcher(writer: Writer, mut rx: mpsc::Receiver<Proposal>) {
    let slots = Arc::new(Semaphore::new(BATCHES_IN_FLIGHT));
    let mut held: Option<Proposal> = None;
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let first = match held.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        // A batch is one log entry: it stays within the entry cap (a proposal
        // that would take it over waits for the next batch).
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(p) if bytes + p.bytes + BATCH_OVERHEAD > MAX_ENTRY_BYTES => {
                    held = Some(p);
                    break;
                }
                Ok(p) => {
                    bytes += p.bytes;
                    batch.push(p);
                }
                Err(_) => break,
            }
        }
        let writer = writer.clone();
        tokio::spawn(async move {
            let _permit = permit;
            if batch.len() == 1 {
                let p = batch.pop().expect("one proposal");
                let r = writer.write(p.cmd).await.and_then(|r| r.map_err(ProposeError::Rejected));
                let _ = p.reply.send(r);
                return;
            }
            let (cmds, replies): (Vec<Command>, Vec<_>) =
                batch.into_iter().map(|p| (p.cmd, p.reply)).unzip();
            let n = cmds.len();
            match writer.write(Command::Batch(cmds)).await {
                Ok(Ok(Response::Batch(results))) if results.len() == n => {
                    for (reply, r) in replies.into_iter().zip(results) {
                        let _ = reply.send(r.map_err(ProposeError::Rejected));
                    }
                }
                Ok(other) => {
                    let e =
                        ProposeError::Unavailable(format!("batch: unexpected answer {other:?}"));
                    replies.into_iter().for_each(|r| drop(r.send(Err(e.clone()))));
                }
                Err(e) => replies.into_iter().for_each(|r| drop(r.send(Err(e.clone())))),
            }
        });
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
