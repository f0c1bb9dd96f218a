//! The producer of a GetElements stream: a tokio task that takes batches from the
//! task's buffer and sends them into the stream's bounded response channel.
//!
//! It reserves room in the channel *before* taking a batch, and takes no more
//! elements than the reader granted (`credit`), so a slow or paused consumer
//! leaves elements in the task buffer for faster ones instead of holding them. It
//! stops when the client goes away (the channel's receiver is dropped), the task is
//! stopped, or the sequence ends. The channel carries messages, not bytes: the HTTP
//! layer (`route`) encodes them, so there is one producer whatever the encoding.
//!
//! An exactly-once task's messages carry their elements' origins in `positions`
//! (outside the elements and their compression, so they stay readable without
//! decompressing), and the end_of_sequence message the records dropped after
//! the last element. The buffer keeps each element's origin apart from its wire
//! form (`Batch::origins`), and the columns are written from them directly.

use std::sync::Arc;
use std::time::Duration;

use prost::Message;
use sluice_positions::{Origin, PositionColumns};
use sluice_proto::v1 as pb;
use tokio::sync::mpsc;
use tonic::Status;

use crate::buffer::{Batch, Limits};
use crate::compress::StreamCompression;
use crate::credit::Credit;
use crate::state::Worker;
use crate::task::Task;

/// Batches a stream may have produced and the client not yet read.
pub(crate) const RESPONSE_BUFFER: usize = 2;

/// How long a stopped stream waits for room to tell its client why. Bounded so a
/// client that stopped reading does not keep the task (and its thread) alive.
const STOP_NOTICE_TIMEOUT: Duration = Duration::from_secs(5);

/// One message of a stream, or the status that ends it.
pub(crate) type BatchResult = Result<pb::ElementBatch, Status>;

/// The answer for a task that already finished: one empty end_of_sequence batch,
/// once the dispatcher knows it finished (`Worker::until_reported`).
pub(crate) fn end_of_sequence(worker: Arc<Worker>, task_id: u64) -> mpsc::Receiver<BatchResult> {
    let (tx, rx) = mpsc::channel(1);
    let end = pb::ElementBatch {
        elements: Vec::new(),
        end_of_sequence: true,
        compressed: None,
        positions: None,
        split: None,
    };
    tokio::spawn(async move {
        tokio::select! {
            () = worker.until_reported(task_id) => {
                let _ = tx.send(Ok(end)).await;
            }
            _ = tx.closed() => {}
        }
    });
    rx
}

/// Who a stream reads for: a trainer of a cross-trainer cache, a consumer of a
/// deterministic order, or anyone (first come first served).
#[derive(Clone, Debug, Default)]
pub(crate) enum Reader {
    #[default]
    Any,
    Trainer(String),
    Consumer(u32),
}

/// The next message of a stream: from the task's cross-trainer cache at the
/// trainer's cursor, from a deterministic order's queue of the consumer, or
/// first come first served from its buffer.
async fn next_batch(task: &Task, reader: &Reader, limits: Limits) -> Result<Batch, Status> {
    let trainer = match reader {
        Reader::Trainer(t) => Some(t.as_str()),
        Reader::Consumer(i) => {
            if let Some(ordered) = &task.ordered {
                return ordered.next_batch(*i).await;
            }
            None
        }
        Reader::Any => None,
    };
    match (&task.cache, trainer) {
        (Some(cache), Some(trainer)) => {
            let elements = cache.next_batch(&task.buffer, trainer, limits).await?;
            Ok(Batch { elements, ..Batch::default() })
        }
        _ => task.buffer.next_batch(limits).await,
    }
}

/// The `positions` of a message of `batch`'s elements (exactly-once tasks):
/// their origins, and `message`, the message's own origin (records dropped
/// after its last element, at the end of the sequence).
pub(crate) fn positions(batch: &Batch, message: Origin) -> pb::Positions {
    let mut columns = PositionColumns::with_capacity(batch.elements.len());
    for i in 0..batch.elements.len() {
        columns.push(batch.origin(i));
    }
    columns.finish(message)
}

pub(crate) async fn produce(
    worker: Arc<Worker>,
    task: Arc<Task>,
    reader: Reader,
    limits: Limits,
    mut compression: StreamCompression,
    mut credit: Credit,
    tx: mpsc::Sender<BatchResult>,
) {
    let _open = crate::drain::OpenStream::new(&task);
    let _counted = worker.counters.stream_opened();
    let counters = worker.counters.for_job(&task.job);
    let (mut sent, mut messages) = (0u64, 0u64);
    loop {
        let permit = tokio::select! {
            permit = tx.reserve() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // the client went away
            },
            reason = task.stopped() => {
                tracing::debug!(sent, ?reason, "stream stopped");
                // Batches already queued go first; a client that stopped reading
                // altogether sees the stream end without end_of_sequence instead.
                let notice = tx.send(Err(reason.status(task.task_id)));
                let _ = tokio::time::timeout(STOP_NOTICE_TIMEOUT, notice).await;
                return;
            }
        };
        // Never more elements than the reader granted (`credit`), unless the
        // worker is draining: what it holds goes to its readers' buffers or is
        // lost with it.
        let batch = tokio::select! {
            batch = async {
                let mut draining = worker.draining.subscribe();
                let room = tokio::select! {
                    biased;
                    _ = draining.wait_for(|d| *d) => u32::MAX,
                    room = credit.available() => room?,
                };
                next_batch(&task, &reader, limits.lowered_to(room, 0)).await
            } => batch,
            reason = task.stopped() => Err(reason.status(task.task_id)),
            _ = tx.closed() => break,
        };
        match batch {
            Ok(mut batch) => {
                let end = batch.end_of_sequence;
                sent += batch.elements.len() as u64;
                credit.spend(batch.elements.len());
                // The first stream to see the end finishes the task for everyone;
                // in a deterministic order, the last consumer to see its end.
                if end && task.ordered.as_ref().is_none_or(|o| o.end_taken()) {
                    worker.finish(&task);
                }
                // The end goes out once the dispatcher knows the task finished
                // (`Worker::until_reported`), with the last elements if this
                // message carries some; earlier messages do not wait.
                if end {
                    tokio::select! {
                        () = worker.until_reported(task.task_id) => {}
                        reason = task.stopped() => {
                            drop(permit);
                            let notice = tx.send(Err(reason.status(task.task_id)));
                            let _ = tokio::time::timeout(STOP_NOTICE_TIMEOUT, notice).await;
                            return;
                        }
                        _ = tx.closed() => break,
                    }
                }
                let elements = batch.elements.len();
                let positions = task.exactly_once.then(|| {
                    // A deterministic order's router cut the end origin by split.
                    let end_origin = if end && task.ordered.is_none() {
                        task.buffer.end_origin()
                    } else {
                        std::mem::take(&mut batch.own)
                    };
                    positions(&batch, end_origin)
                });
                let message = pb::ElementBatch {
                    elements: batch.elements,
                    end_of_sequence: end,
                    compressed: None,
                    positions,
                    split: batch.split,
                };
                // With a channel slot reserved and no lock held (a large message on
                // the blocking pool): the HTTP layer then only writes the bytes.
                let Some((codec, message)) = compression.apply_off_runtime(message).await else {
                    return; // the runtime is shutting down
                };
                compression = codec;
                counters.streamed(elements, message.encoded_len());
                permit.send(Ok(message));
                messages += 1;
                if end {
                    tracing::debug!(sent, messages, "stream reached end of sequence");
                    return;
                }
            }
            Err(status) => {
                // A pipeline that failed because its task was stopped (a split
                // request or a `wait` pause cut short) answers with the stop's
                // status (retryable while the worker shuts down), not as an
                // internal error the reader would give up on.
                let status = task.stop_reason().map_or(status, |r| r.status(task.task_id));
                tracing::debug!(sent, code = ?status.code(), "stream failed");
                permit.send(Err(status));
                return;
            }
        }
    }
    tracing::debug!(sent, "stream closed by the client");
}
