//! Group commit: one writer task owns the journal's appends and merges every
//! append queued while a write is in flight into the next write, so concurrent
//! proposals share one fsync (or one PUT).
//!
//! ```text
//!  LogStore::append ──(entries into `pending`, Op::Append)──► queue ──► writer: drain queue,
//!                                                                       one Journal::append,
//!                                                                       drop from `pending`,
//!                                                                       call every LogFlushed
//! ```
//! openraft's contract: entries are readable when `append` returns (they are, from
//! `pending`), and durable when the callback is called (after the journal write).
//! Operations that must follow the appends (truncate, purge, vote) first wait for
//! a `Barrier`, which the writer answers once everything queued before it is on
//! disk.
//!
//! openraft 0.9's core awaits each append's callback before it goes on, so in
//! practice one write carries one client write's entry (leader) or one
//! AppendEntries' entries (follower), measured; the merging here is for a runtime
//! that submits the next append earlier. Fewer, larger entries come from the
//! batcher above Raft (`batcher.rs`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use openraft::storage::LogFlushed;
use sluice_journal::Journal;
use tokio::sync::{mpsc, oneshot};

use super::TypeConfig;

/// Most entries, and bytes, one journal write carries.
const MAX_BATCH_ENTRIES: usize = 4096;
const MAX_BATCH_BYTES: usize = 8 * 1024 * 1024;
/// Queued operations before `append` waits (backpressure).
const QUEUE: usize = 4096;

pub enum Op {
    Append {
        entries: Vec<(u64, Bytes)>,
        callback: LogFlushed<TypeConfig>,
    },
    /// Answered when every earlier op is durable: `Err` carries the writer's failure.
    Barrier(oneshot::Sender<Result<(), String>>),
}

/// Appended entries not yet durable, readable meanwhile. A std Mutex: map
/// operations only, never held across an await.
pub type Pending = Arc<Mutex<BTreeMap<u64, Bytes>>>;

pub fn lock(p: &Pending) -> std::sync::MutexGuard<'_, BTreeMap<u64, Bytes>> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Starts the writer; it stops when every sender is dropped.
pub fn start(journal: Arc<dyn Journal>, pending: Pending) -> mpsc::Sender<Op> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(writer(journal, pending, rx));
    tx
}

async fn writer(journal: Arc<dyn Journal>, pending: Pending, mut rx: mpsc::Receiver<Op>) {
    // After a failed write nothing more may be acknowledged: openraft treats the
    // error as fatal and the node stops; later callers get the same error.
    let mut failed: Option<String> = None;
    let mut held: Option<Op> = None;
    loop {
        let op = match held.take() {
            Some(op) => op,
            None => match rx.recv().await {
                Some(op) => op,
                None => return,
            },
        };
        match op {
            Op::Barrier(reply) => {
                let _ = reply.send(failed.clone().map_or(Ok(()), Err));
            }
            Op::Append { entries, callback } => {
                let mut batch = entries;
                let mut callbacks = vec![callback];
                let mut bytes: usize = batch.iter().map(|(_, b)| b.len()).sum();
                // Everything queued meanwhile joins this write.
                while batch.len() < MAX_BATCH_ENTRIES && bytes < MAX_BATCH_BYTES {
                    match rx.try_recv() {
                        Ok(Op::Append { entries, callback }) => {
                            bytes += entries.iter().map(|(_, b)| b.len()).sum::<usize>();
                            batch.extend(entries);
                            callbacks.push(callback);
                        }
                        Ok(other) => {
                            held = Some(other);
                            break;
                        }
                        Err(_) => break,
                    }
                }
                let result = match &failed {
                    Some(e) => Err(e.clone()),
                    // Only entries below the purge point were appended: nothing to
                    // write, but the callback keeps its place in the order.
                    None if batch.is_empty() => Ok(()),
                    None => {
                        let last = batch.last().map(|(i, _)| *i);
                        let first = batch.first().map(|(i, _)| *i);
                        let r = journal.append(batch).await.map_err(|e| e.to_string());
                        if r.is_ok() {
                            let mut p = lock(&pending);
                            if let (Some(first), Some(last)) = (first, last) {
                                let flushed: Vec<u64> =
                                    p.range(first..=last).map(|(i, _)| *i).collect();
                                flushed.iter().for_each(|i| {
                                    p.remove(i);
                                });
                            }
                        }
                        r
                    }
                };
                if let Err(e) = &result {
                    tracing::error!(journal = %journal.location(), "log append failed: {e}");
                    failed = Some(e.clone());
                }
                for cb in callbacks {
                    cb.log_io_completed(result.clone().map_err(std::io::Error::other));
                }
            }
        }
    }
}
