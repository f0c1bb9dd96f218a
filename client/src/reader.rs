//! The reading end of one iteration: [`ElementStream`], fed through a bounded
//! channel by the iteration's manager task.
//!
//! ```text
//!  manager (task_readers.rs: one reader per task, or coordinated.rs: rounds)
//!     └──► [bounded channel of element batches] ──► ElementStream ──► caller
//! ```
//! The stream knows nothing of how its manager reads: `Client` picks the manager
//! and hands it to `ElementStream::start` with the channel's sending end. The
//! stream ends when the manager drops that end; an error the manager sends is the
//! stream's last item. Dropping the stream stops the manager (its task is
//! aborted) and releases the client from the iteration. Memory is bounded by
//! `max_outstanding_requests` batches in the channel. The stream also times each
//! element's wait and counts what it delivers (`metrics`).
//!
//! Exactly-once reads (`exactly_once`): each element travels with its origin,
//! and the stream records the origin as consumed at the moment it hands the
//! element out (not when it arrives), on every path that hands elements out
//! (`next`, `next_with_source`, the blocking iterator, Python). A reporter task
//! sends the consumption to the dispatcher while the stream lives, and the
//! stream's [`ElementStream::position`] is the reader's checkpoint.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use sluice_dataset::Element;
use sluice_positions::wire::ElementOrigins;
use sluice_positions::Position;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, Instrument};

use crate::dispatcher::DispatcherClient;
use crate::error::ClientError;
use crate::exactly_once::{self, reorder, Consumption, Delivery};
use crate::loss::{LossReport, LossSlot};
use crate::metrics::ReadMetrics;
use crate::stream_credit::CreditBack;

/// Elements of one message, with the worker and task that produced them.
pub(crate) struct Received {
    pub source: Arc<str>,
    pub task_id: u64,
    pub elements: Vec<Element>,
    /// Exactly-once reads: one origin per element. Empty otherwise.
    pub origins: ElementOrigins,
    /// Deterministic order: the split the message belongs to.
    pub split: Option<sluice_proto::v1::SplitNotice>,
    /// Exactly-once reads: non-zero in the manager's *drained* marker (no
    /// elements): every one of the iteration's first `drained_tasks` tasks ended
    /// here, and the marker follows everything they sent.
    pub drained_tasks: u64,
    /// The stream credit of `elements`: granted to their worker again when the
    /// stream takes this message out of the channel (`stream_credit.rs`). Only
    /// dropped, never read.
    #[allow(dead_code)]
    pub credit: CreditBack,
}

impl Received {
    /// Elements without origins (at-most-once reads).
    pub(crate) fn plain(source: Arc<str>, task_id: u64, elements: Vec<Element>) -> Self {
        let origins = ElementOrigins::default();
        let (split, drained_tasks, credit) = (None, 0, CreditBack::default());
        Received { source, task_id, elements, origins, split, drained_tasks, credit }
    }

    /// The manager's marker: this reader's first `tasks` tasks all ended.
    pub(crate) fn drained(tasks: u64) -> Self {
        Received { drained_tasks: tasks, ..Received::plain(Arc::from(""), 0, Vec::new()) }
    }
}

pub(crate) type Batch = Result<Received, ClientError>;

/// What an [`ElementStream`] is a read of.
pub(crate) struct StreamInfo {
    pub dispatcher: DispatcherClient,
    pub job_name: String,
    /// The coordinated-read consumer index, for the metrics' labels.
    pub consumer: Option<u32>,
    pub iteration_id: u64,
    pub client_id: u64,
    pub delivery: Delivery,
    /// At-most-once reads of a DYNAMIC job: why (the dispatcher's answer).
    pub at_most_once_reason: String,
    /// Exactly-once reads: their consumption (shared with the manager).
    pub consumption: Option<Arc<Consumption>>,
    /// Deterministic order: (consumer index, number of consumers).
    pub order: Option<(u32, u32)>,
}

/// An element and the address of the worker that produced it.
pub type SourcedElement = (Arc<str>, Element);

/// The elements of one iteration, as an async [`Stream`]. Dropping it stops the
/// readers and releases the client from the iteration.
pub struct ElementStream {
    rx: mpsc::Receiver<Batch>,
    current: std::vec::IntoIter<Element>,
    /// Exactly-once reads: the origins of `current`'s elements.
    current_origins: ElementOrigins,
    /// The index in `current_origins` of the next element of `current`.
    current_index: usize,
    /// The worker and task that produced `current`.
    current_source: Arc<str>,
    current_task: u64,
    manager: JoinHandle<()>,
    /// Exactly-once reads: the consumption and the task sending its reports.
    consumption: Option<(Arc<Consumption>, JoinHandle<()>)>,
    /// The drained count last given to the consumption (0: not drained).
    drained: u64,
    delivery: Delivery,
    at_most_once_reason: String,
    dispatcher: DispatcherClient,
    runtime: tokio::runtime::Handle,
    iteration_id: u64,
    client_id: u64,
    job_name: String,
    /// Set by the manager when a read that accepted loss lost data.
    loss: LossSlot,
    metrics: ReadMetrics,
    /// Deterministic order: the reorder buffer the stream hands out from, and
    /// its pump (which reads the channel instead of `rx`).
    ordered: Option<(Arc<reorder::Shared>, JoinHandle<()>)>,
}

impl ElementStream {
    /// Spawns the iteration's manager, `manage(tx, loss)`, which sends the elements
    /// through a channel of `capacity` batches and ends the stream by returning
    /// (leaving in `loss` what a read that accepted loss lost); and, for an
    /// exactly-once read, the reporter of its consumption.
    ///
    /// Both run in `span` (the read's, opened by `Client`), so every call they
    /// make carries the read's trace context.
    pub(crate) fn start<F, Fut>(
        info: StreamInfo,
        capacity: usize,
        span: tracing::Span,
        manage: F,
    ) -> Self
    where
        F: FnOnce(mpsc::Sender<Batch>, LossSlot) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, mut rx) = mpsc::channel(capacity);
        let loss = LossSlot::default();
        let ordered = match (info.order, &info.consumption) {
            (Some((i, n)), Some(c)) => {
                let (closed_tx, closed_rx) = mpsc::channel(1);
                drop(closed_tx);
                let pump_rx = std::mem::replace(&mut rx, closed_rx);
                let shared = Arc::new(reorder::Shared::new(i, n, c.clone()));
                Some((shared.clone(), tokio::spawn(pump(pump_rx, shared))))
            }
            _ => None,
        };
        let interval = match info.order {
            Some(_) => exactly_once::ORDERED_REPORT_INTERVAL,
            None => exactly_once::REPORT_INTERVAL,
        };
        let consumption = info.consumption.map(|c| {
            let (d, id) = (info.dispatcher.clone(), info.client_id);
            let reporter = exactly_once::report_loop(d, id, c.clone(), interval);
            (c, tokio::spawn(reporter.instrument(span.clone())))
        });
        let manager = tokio::spawn(manage(tx, loss.clone()).instrument(span));
        let metrics = ReadMetrics::new(&info.job_name, info.consumer);
        ElementStream {
            rx,
            current: Vec::new().into_iter(),
            current_origins: ElementOrigins::default(),
            current_index: 0,
            current_source: Arc::from(""),
            current_task: 0,
            manager,
            consumption,
            drained: 0,
            delivery: info.delivery,
            at_most_once_reason: info.at_most_once_reason,
            dispatcher: info.dispatcher,
            runtime: tokio::runtime::Handle::current(),
            iteration_id: info.iteration_id,
            client_id: info.client_id,
            job_name: info.job_name,
            loss,
            metrics,
            ordered,
        }
    }

    /// The delivery the dispatcher answered for this read's job.
    pub fn delivery(&self) -> Delivery {
        self.delivery
    }

    /// Why this read is at-most-once, as the dispatcher said (which stage keeps
    /// the pipeline from being replayed, or which option): `None` for an
    /// exactly-once read. What a read with `exactly_once_auto` fell back for.
    pub fn at_most_once_reason(&self) -> Option<&str> {
        match self.delivery {
            Delivery::ExactlyOnce => None,
            Delivery::AtMostOnce => Some(&self.at_most_once_reason),
        }
    }

    /// This reader's position (its checkpoint; docs/exactly-once.md,
    /// "Positions"): every record it consumed, every unit all readers had
    /// consumed before their positions of the same generation, and the
    /// generation, which taking a position increments. Restore from it (or
    /// from the merge of one checkpoint's positions of all readers) with
    /// `ReadOptions::restore`. Only for exactly-once reads.
    pub fn position(&self) -> Result<Position, ClientError> {
        match &self.consumption {
            Some((c, _)) => Ok(c.position()),
            None => Err(ClientError::InvalidArgument(format!(
                "job `{}` is read with {} delivery, which has no positions: read it with \
                 ReadOptions::exactly_once(true) (Python: exactly_once=True)",
                self.job_name, self.delivery
            ))),
        }
    }

    /// What the read lost, once it has ended, if it accepted loss
    /// (`ReadOptions::accept_data_loss`); `None` for a complete read (a read that
    /// did not accept loss ends with `ClientError::DataLost` instead).
    pub fn loss_report(&self) -> Option<LossReport> {
        self.loss.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn iteration_id(&self) -> u64 {
        self.iteration_id
    }
    pub fn client_id(&self) -> u64 {
        self.client_id
    }
    pub fn job_name(&self) -> &str {
        &self.job_name
    }

    /// The next element and the address of the worker that produced it (one shared
    /// `Arc<str>` per message, not a string per element). `None` at the end.
    pub async fn next_with_source(&mut self) -> Option<Result<(Arc<str>, Element), ClientError>> {
        std::future::poll_fn(|cx| self.poll_with_source(cx)).await
    }

    fn poll_with_source(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<SourcedElement, ClientError>>> {
        if let Some((shared, _)) = &self.ordered {
            self.metrics.asked();
            let next = shared.poll_next(cx);
            if let Poll::Ready(Some(Ok((_, e)))) = &next {
                self.metrics.delivered(e);
            }
            return next;
        }
        loop {
            if let Some(e) = self.current.next() {
                if let Some((consumption, _)) = &self.consumption {
                    // Consumed now, as it is handed out; or dropped, with the rest of
                    // its message, if its task was lost meanwhile.
                    let runs = self.current_origins.runs_of(self.current_index);
                    self.current_index += 1;
                    if !consumption.consume_records(self.current_task, runs, &[]) {
                        self.current = Vec::new().into_iter();
                        continue;
                    }
                }
                self.metrics.delivered(&e);
                return Poll::Ready(Some(Ok((self.current_source.clone(), e))));
            }
            // Nothing in hand: the application waits from now (or from its first
            // poll that found nothing, if this is a later one).
            self.metrics.asked();
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok(received))) => {
                    // Nothing is in hand here: a marker says the reader holds
                    // nothing of its ended tasks; a message says otherwise. Told
                    // only when it changes (not one lock per message).
                    if received.drained_tasks != self.drained {
                        self.drained = received.drained_tasks;
                        if let Some((consumption, _)) = &self.consumption {
                            consumption.set_drained(self.drained);
                        }
                    }
                    self.current_source = received.source;
                    self.current_task = received.task_id;
                    self.current = received.elements.into_iter();
                    self.current_origins = received.origins;
                    self.current_index = 0;
                }
                Poll::Ready(Some(Err(e))) => {
                    self.rx.close();
                    return Poll::Ready(Some(Err(e)));
                }
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

/// Deterministic order: moves every message of the manager's channel into the
/// reorder buffer as it arrives (eagerly: see `exactly_once/reorder.rs`).
async fn pump(mut rx: mpsc::Receiver<Batch>, shared: Arc<reorder::Shared>) {
    loop {
        let message = rx.recv().await.map(|batch| {
            batch.map(|r| {
                let items = r
                    .elements
                    .into_iter()
                    .enumerate()
                    .map(|(i, element)| reorder::Item {
                        source: r.source.clone(),
                        task_id: r.task_id,
                        element,
                        origin: r.origins.origin(i),
                    })
                    .collect();
                reorder::Message {
                    split: r.split,
                    items,
                    source: r.source,
                    drained_tasks: r.drained_tasks,
                }
            })
        });
        if shared.received(message) {
            return;
        }
    }
}

impl Stream for ElementStream {
    type Item = Result<Element, ClientError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.poll_with_source(cx).map(|r| r.map(|r| r.map(|(_, e)| e)))
    }
}

impl ElementStream {
    /// Stops the read like dropping the stream does, and waits until its manager
    /// has ended: the read's span (and its tasks') is then closed, so a process
    /// that flushes its exported spans next includes the whole read.
    pub async fn close(mut self) {
        self.manager.abort();
        if let Some((_, pump)) = &self.ordered {
            pump.abort();
        }
        let _ = (&mut self.manager).await;
        if let Some((consumption, reporter)) = self.consumption.take() {
            reporter.abort();
            let _ = reporter.await;
            exactly_once::flush(&self.dispatcher, self.client_id, &consumption).await;
        }
    }
}

impl Drop for ElementStream {
    fn drop(&mut self) {
        self.manager.abort();
        if let Some((_, pump)) = &self.ordered {
            pump.abort();
        }
        let (dispatcher, client_id) = (self.dispatcher.clone(), self.client_id);
        let consumption = self.consumption.take().map(|(c, reporter)| {
            reporter.abort();
            c
        });
        // Best effort, one attempt (see `release_iteration_client`): the
        // dispatcher's client timeout frees the consumer if this is lost. What
        // an exactly-once reader consumed and has not reported goes first.
        self.runtime.spawn(async move {
            if let Some(c) = consumption {
                exactly_once::flush(&dispatcher, client_id, &c).await;
            }
            if let Err(e) = dispatcher.release_iteration_client(client_id).await {
                debug!(client_id, error = %e, "releasing the iteration client failed");
            }
        });
    }
}

#[cfg(test)]
#[path = "reader_tests.rs"]
pub(crate) mod tests;
