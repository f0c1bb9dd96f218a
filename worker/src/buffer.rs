//! A task's bounded buffer, the consumers' side of it, and its stop signal.
//!
//! ```text
//!  pipeline thread ──blocking_send──▶ mpsc (bounded) ──▶ TaskBuffer ──▶ next_batch: GetElements
//!  (`runner`)         the pipeline waits when full       (tokio Mutex)   streams, the cache
//!                                                                      take_one: coordinated rounds
//! ```
//!
//! This module is a leaf: it knows nothing else of the crate, so every reader of a
//! task — streams (`producer`), the cross-trainer cache (`cache`), coordinated
//! rounds (`coordinated`) and the DYNAMIC source waiting for a split (`splits`) —
//! depends on it rather than on `task`, which composes them. It also holds what
//! those readers share about a buffer: the message bounds ([`Limits`], measured with
//! [`framed_len`]) and why a task stopped ([`StopReason`], [`StopSignal`]).
//!
//! The buffer's occupancy ([`Occupancy`]: elements and payload bytes the pipeline
//! produced that no consumer took yet) is counted as elements cross the channel,
//! by the sending half ([`BufferTx`]) and the consumers' end, so a scrape reads
//! two atomics instead of taking the consumers' lock.
//!
//! Soft state: the buffered elements exist only in this process; a restarted worker
//! runs its tasks again (see `task`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prost::Message;
use sluice_dataset::{DatasetError, Element};
use sluice_positions::{Origin, Tag};
use sluice_proto::contract::Reason;
use sluice_proto::v1 as pb;
use tokio::sync::{mpsc, watch, Mutex};
use tonic::Status;

/// What a pipeline thread sends into its task's buffer.
pub(crate) type Item = Result<Element, DatasetError>;

/// A bounded channel from a pipeline thread to its task's buffer on the worker at
/// `worker` (named in the errors of user functions). The pipeline ends by dropping
/// the sender (end of sequence) or sending an error (sticky failure).
pub(crate) fn channel(task_id: u64, worker: Arc<str>, capacity: usize) -> (BufferTx, TaskBuffer) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let occupancy = Arc::new(Occupancy::default());
    let inner = Inner { rx, carry: None, state: State::Open };
    let end_origin = EndOrigin::default();
    let tx = BufferTx { tx, occupancy: occupancy.clone(), end_origin: end_origin.clone() };
    (tx, TaskBuffer { task_id, worker, inner: Mutex::new(inner), occupancy, end_origin })
}

/// Elements (and their payload bytes) in a task's buffer: sent by the pipeline and
/// not yet taken by a consumer.
#[derive(Debug, Default)]
pub(crate) struct Occupancy {
    elements: AtomicU64,
    bytes: AtomicU64,
}

impl Occupancy {
    /// (elements, payload bytes) buffered now.
    pub(crate) fn get(&self) -> (u64, u64) {
        (self.elements.load(Ordering::Relaxed), self.bytes.load(Ordering::Relaxed))
    }

    fn add(&self, bytes: u64) {
        self.elements.fetch_add(1, Ordering::Relaxed);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
    }

    fn sub(&self, bytes: u64) {
        // Saturating: a take never outruns its send, but a metric must not wrap.
        let dec = |a: &AtomicU64, n: u64| {
            let _ =
                a.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| Some(v.saturating_sub(n)));
        };
        dec(&self.elements, 1);
        dec(&self.bytes, bytes);
    }
}

/// The pipeline's end of a task's buffer: an `mpsc::Sender` that counts what it
/// sends into the buffer's [`Occupancy`].
#[derive(Clone)]
pub(crate) struct BufferTx {
    tx: mpsc::Sender<Item>,
    occupancy: Arc<Occupancy>,
    end_origin: EndOrigin,
}

/// Exactly-once tasks: what the pipeline dropped after its last element (and the
/// unit ends it reported then), set by the pipeline thread before it ends the
/// sequence, read by the streams' end_of_sequence messages. A std `Mutex`: held
/// only to store or clone it, never across an await.
#[derive(Clone, Default)]
struct EndOrigin(Arc<std::sync::Mutex<Origin>>);

impl BufferTx {
    /// Sends `item`, waiting while the buffer is full; `Err` once no consumer end
    /// is left (the task was dropped). Called from the pipeline's own thread.
    ///
    /// A full buffer is waited on until a quarter of it is free ([`refill`]), not
    /// one slot: streams take elements one at a time, and waking the pipeline
    /// thread for each freed slot cost two context switches per element (the
    /// thread parks again at once), a quarter of a worker's futex calls on raw
    /// TFRecord records (docs/performance.md).
    pub(crate) fn blocking_send(&self, item: Item) -> Result<(), mpsc::error::SendError<Item>> {
        use mpsc::error::{SendError, TrySendError};
        self.counted(item, |item| match self.tx.try_send(item) {
            Ok(()) => Ok(()),
            Err(TrySendError::Closed(item)) => Err(SendError(item)),
            Err(TrySendError::Full(item)) => {
                let wanted = refill(self.tx.max_capacity());
                match futures::executor::block_on(self.tx.reserve_many(wanted)) {
                    // The other permits go back as they drop: the next sends find
                    // their slots free without waiting.
                    Ok(mut permits) => match permits.next() {
                        Some(permit) => {
                            permit.send(item);
                            Ok(())
                        }
                        None => self.tx.blocking_send(item),
                    },
                    Err(_) => Err(SendError(item)),
                }
            }
        })
    }

    /// Exactly-once: the origin of the end of the sequence (records dropped after
    /// the last element); set before the sender is dropped.
    pub(crate) fn set_end_origin(&self, origin: Origin) {
        *self.end_origin.0.lock().unwrap_or_else(|p| p.into_inner()) = origin;
    }

    /// `blocking_send` without waiting, for tests that fill the buffer from a runtime.
    #[cfg(test)]
    pub(crate) fn try_send(&self, item: Item) -> Result<(), mpsc::error::TrySendError<Item>> {
        self.counted(item, |item| self.tx.try_send(item))
    }

    /// Sends `item` with `send`; an element sent counts into the occupancy.
    fn counted<E>(&self, item: Item, send: impl FnOnce(Item) -> Result<(), E>) -> Result<(), E> {
        let element_bytes = item.as_ref().ok().map(|e| e.byte_len() as u64);
        send(item)?;
        if let Some(bytes) = element_bytes {
            self.occupancy.add(bytes);
        }
        Ok(())
    }
}

/// Slots a full buffer waits to have free before its pipeline sends again: a
/// quarter of it (at least one).
fn refill(capacity: usize) -> usize {
    (capacity / 4).max(1)
}

impl From<mpsc::Sender<Item>> for BufferTx {
    /// A sender counting into an occupancy of its own (tests of the pipeline).
    fn from(tx: mpsc::Sender<Item>) -> Self {
        BufferTx { tx, occupancy: Arc::default(), end_origin: EndOrigin::default() }
    }
}

/// Bytes an element adds to an `ElementBatch`: its encoding plus field key and length.
pub(crate) fn framed_len(element: &pb::Element) -> u64 {
    let len = element.encoded_len();
    (1 + prost::length_delimiter_len(len) + len) as u64
}

/// Bytes a taken element adds to its message: [`framed_len`] and its origin's
/// numbers in the message's positions.
fn taken_len((element, origin): &Taken) -> u64 {
    framed_len(element) + origin.as_ref().map_or(0, Tag::wire_len) as u64
}

/// Per-message bounds of one GetElements stream.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub(crate) max_elements: usize,
    pub(crate) max_bytes: u64,
}

impl Limits {
    /// Explicit bounds (each at least 1).
    pub(crate) fn bounded(max_elements: usize, max_bytes: u64) -> Self {
        Limits { max_elements: max_elements.max(1), max_bytes: max_bytes.max(1) }
    }

    /// These bounds as a request may lower them: 0 keeps a bound as it is, a larger
    /// number than the bound does not raise it.
    pub(crate) fn lowered_to(self, max_elements: u32, max_bytes: u64) -> Self {
        let lower = |asked: u64, own: u64| if asked == 0 { own } else { asked.min(own) };
        let elements = lower(u64::from(max_elements), self.max_elements as u64);
        Limits::bounded(
            usize::try_from(elements).unwrap_or(usize::MAX),
            lower(max_bytes, self.max_bytes),
        )
    }
}

/// Why a task's streams were cut short.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StopReason {
    /// The dispatcher no longer wants the task run (`tasks_to_delete`).
    Deleted,
    ShuttingDown,
}

impl StopReason {
    /// The status a request on a task stopped for this reason gets; a deleted task's
    /// carries [`Reason::TaskDeleted`], which clients match on.
    pub(crate) fn status(self, task_id: u64) -> Status {
        match self {
            StopReason::Deleted => Reason::TaskDeleted.attach(Status::failed_precondition(
                format!("task {task_id} was deleted by the dispatcher before it finished"),
            )),
            // Retryable: the same address may come back (a restarted worker).
            StopReason::ShuttingDown => Status::unavailable("the worker is shutting down"),
        }
    }
}

/// Whether (and why) a task was stopped: set once, watched by its streams, its
/// coordinated rounds and a DYNAMIC source waiting for a split.
pub(crate) struct StopSignal(watch::Sender<Option<StopReason>>);

impl StopSignal {
    pub(crate) fn new() -> Self {
        StopSignal(watch::channel(None).0)
    }

    /// Stops the task; the first reason wins, so a deleted task stays "deleted"
    /// when the worker then stops.
    pub(crate) fn stop(&self, reason: StopReason) {
        self.0.send_if_modified(|r| {
            let first = r.is_none();
            if first {
                *r = Some(reason);
            }
            first
        });
    }

    /// The reason, once [`StopSignal::stop`] was called.
    pub(crate) fn reason(&self) -> Option<StopReason> {
        *self.0.borrow()
    }

    /// Resolves once [`StopSignal::stop`] was called.
    pub(crate) async fn stopped(&self) -> StopReason {
        let mut rx = self.0.subscribe();
        let reason = match rx.wait_for(Option::is_some).await {
            Ok(reason) => reason.unwrap_or(StopReason::ShuttingDown),
            // Unreachable while `self` (which owns the sender) is borrowed.
            Err(_) => StopReason::ShuttingDown,
        };
        reason
    }

    /// A receiver for a thread that cannot borrow the signal (the split provider).
    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<StopReason>> {
        self.0.subscribe()
    }
}

/// One message's worth of elements, first come first served.
#[derive(Default)]
pub(crate) struct Batch {
    pub elements: Vec<pb::Element>,
    /// Exactly-once: the elements' origins, one per element ([`Batch::push`]);
    /// empty while no element has one, so other tasks pay nothing for it.
    pub origins: Vec<Option<Tag>>,
    pub end_of_sequence: bool,
    /// Deterministic order (`ordered.rs`): the message's own origin (records of
    /// its split dropped by the pipeline) and the split it belongs to.
    pub own: Origin,
    pub split: Option<pb::SplitNotice>,
}

impl Batch {
    /// Adds an element and its origin.
    pub(crate) fn push(&mut self, element: pb::Element, origin: Option<Tag>) {
        if origin.is_some() || !self.origins.is_empty() {
            self.origins.resize_with(self.elements.len(), || None);
            self.origins.push(origin);
        }
        self.elements.push(element);
    }

    /// The origin of element `i`, if it has one.
    pub(crate) fn origin(&self, i: usize) -> Option<&Tag> {
        self.origins.get(i).and_then(Option::as_ref)
    }
}

/// An element taken from the channel, as the wire carries it, and its origin
/// (exactly-once tasks), which the message carries apart.
type Taken = (pb::Element, Option<Tag>);

/// What [`TaskBuffer::take_one`] found.
pub(crate) enum Took {
    Element(pb::Element),
    /// Nothing within the wait.
    Nothing,
    /// The pipeline ended.
    Ended,
}

/// The consumers' end of a task's pipeline. Every read takes the lock, so readers
/// are served one at a time, first come first served.
pub(crate) struct TaskBuffer {
    task_id: u64,
    /// This worker's address, for the errors of user functions.
    worker: Arc<str>,
    inner: Mutex<Inner>,
    occupancy: Arc<Occupancy>,
    end_origin: EndOrigin,
}

struct Inner {
    rx: mpsc::Receiver<Item>,
    /// An element taken from `rx` that did not fit the previous message's byte bound.
    carry: Option<Taken>,
    state: State,
}

enum State {
    Open,
    /// The pipeline ended and every element was taken.
    Ended,
    /// Sticky: every later request gets this error.
    Failed(Status),
}

impl TaskBuffer {
    pub(crate) fn task_id(&self) -> u64 {
        self.task_id
    }

    pub(crate) fn occupancy(&self) -> &Occupancy {
        &self.occupancy
    }

    /// Exactly-once: what the pipeline dropped after its last element, for an
    /// end_of_sequence message (every such message carries it: consuming the
    /// same records twice is harmless, missing them would keep their units open).
    pub(crate) fn end_origin(&self) -> Origin {
        self.end_origin.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// An element taken from the channel, as the wire carries it, and its origin.
    fn took(&self, element: Element) -> Taken {
        self.occupancy.sub(element.byte_len() as u64);
        element.into_pb_and_origin()
    }

    /// The pipeline could not start: every request gets `message` as its error.
    pub(crate) fn fail_at_start(&mut self, message: String) {
        self.inner.get_mut().state = State::Failed(self.failure(&message));
    }

    /// Takes the next message's elements, first come first served: waits for one
    /// element, then adds those already buffered up to the bounds. The returned batch
    /// has `end_of_sequence` once the pipeline ended and the buffer is empty.
    ///
    /// Cancel-safe: the only awaits (the lock and the first `recv`) lose nothing if
    /// dropped; after the first element no await remains.
    pub(crate) async fn next_batch(&self, limits: Limits) -> Result<Batch, Status> {
        let mut buf = self.inner.lock().await;
        let first = match buf.carry.take() {
            Some(element) => element,
            None => match &buf.state {
                State::Ended => return Ok(Batch { end_of_sequence: true, ..Batch::default() }),
                State::Failed(status) => return Err(status.clone()),
                State::Open => match buf.rx.recv().await {
                    Some(Ok(element)) => self.took(element),
                    Some(Err(e)) => return Err(self.fail(&mut buf, e)),
                    None => {
                        buf.state = State::Ended;
                        return Ok(Batch { end_of_sequence: true, ..Batch::default() });
                    }
                },
            },
        };
        let mut bytes = taken_len(&first);
        let mut batch = Batch::default();
        batch.push(first.0, first.1);
        while batch.elements.len() < limits.max_elements {
            match buf.rx.try_recv() {
                Ok(Ok(element)) => {
                    let taken = self.took(element);
                    let len = taken_len(&taken);
                    if bytes.saturating_add(len) > limits.max_bytes {
                        buf.carry = Some(taken);
                        break;
                    }
                    bytes += len;
                    batch.push(taken.0, taken.1);
                }
                // Deliver what was taken; the next request gets the error.
                Ok(Err(e)) => {
                    self.fail(&mut buf, e);
                    break;
                }
                Err(mpsc::error::TryRecvError::Empty) => break,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    buf.state = State::Ended;
                    batch.end_of_sequence = true;
                    return Ok(batch);
                }
            }
        }
        Ok(batch)
    }

    /// Once the pipeline thread returned: if every element it produced has been
    /// taken by a stream, marks the buffer ended and returns true. This finishes a
    /// task whose consumers are no longer reading it: e.g. a restarted worker whose
    /// task got no splits left while its consumers had already seen the end of
    /// sequence from the previous process. Without it such a task would never be
    /// reported finished, and its iteration would never end.
    pub(crate) async fn ended_when_drained(&self) -> bool {
        let mut buf = self.inner.lock().await;
        if !matches!(buf.state, State::Open) || buf.carry.is_some() {
            return false;
        }
        match buf.rx.try_recv() {
            Err(mpsc::error::TryRecvError::Disconnected) => {
                buf.state = State::Ended;
                true
            }
            // Left for a stream, which will see the end after it.
            Ok(Ok(element)) => {
                buf.carry = Some(self.took(element));
                false
            }
            Ok(Err(e)) => {
                self.fail(&mut buf, e);
                false
            }
            Err(mpsc::error::TryRecvError::Empty) => false,
        }
    }

    /// One element for a coordinated round, waiting at most `wait` for it.
    pub(crate) async fn take_one(&self, wait: std::time::Duration) -> Result<Took, Status> {
        let mut buf = self.inner.lock().await;
        // Taken from the channel by `ended_when_drained`, not yet delivered.
        // (Coordinated reads are never exactly-once: no origin to keep.)
        if let Some((element, _)) = buf.carry.take() {
            return Ok(Took::Element(element));
        }
        match &buf.state {
            State::Ended => return Ok(Took::Ended),
            State::Failed(status) => return Err(status.clone()),
            State::Open => {}
        }
        match tokio::time::timeout(wait, buf.rx.recv()).await {
            Err(_) => Ok(Took::Nothing),
            Ok(Some(Ok(element))) => Ok(Took::Element(self.took(element).0)),
            Ok(Some(Err(e))) => Err(self.fail(&mut buf, e)),
            Ok(None) => {
                buf.state = State::Ended;
                Ok(Took::Ended)
            }
        }
    }

    /// The pipeline failed: every later request gets the returned status, whose
    /// code names the kind of failure (`user_error`: a corrupt file `DataLoss`, a
    /// missing one `NotFound`). A user function's failure carries
    /// [`Reason::UserFunction`] and the failure itself, so the reader can show the
    /// user their exception.
    fn fail(&self, buf: &mut Inner, error: DatasetError) -> Status {
        tracing::warn!(task_id = self.task_id, message = %error, "pipeline failed");
        let status = crate::user_error::status_of(self.task_id, &error, &self.worker);
        buf.state = State::Failed(status.clone());
        status
    }

    fn failure(&self, message: &str) -> Status {
        Status::internal(crate::user_error::pipeline_failed(self.task_id, message))
    }
}
