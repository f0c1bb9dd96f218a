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

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use sluice_dataset::Element;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::{debug, Instrument};

use crate::dispatcher::DispatcherClient;
use crate::error::ClientError;
use crate::loss::{LossReport, LossSlot};
use crate::metrics::ReadMetrics;

/// Elements of one message, with the address of the worker that produced them.
pub(crate) type Batch = Result<(Arc<str>, Vec<Element>), ClientError>;

/// An element and the address of the worker that produced it.
pub type SourcedElement = (Arc<str>, Element);

/// The elements of one iteration, as an async [`Stream`]. Dropping it stops the
/// readers and releases the client from the iteration.
pub struct ElementStream {
    rx: mpsc::Receiver<Batch>,
    current: std::vec::IntoIter<Element>,
    /// The worker that produced `current`.
    current_source: Arc<str>,
    manager: JoinHandle<()>,
    dispatcher: DispatcherClient,
    runtime: tokio::runtime::Handle,
    iteration_id: u64,
    client_id: u64,
    job_name: String,
    /// Set by the manager when a read that accepted loss lost data.
    loss: LossSlot,
    metrics: ReadMetrics,
}

impl ElementStream {
    /// Spawns the iteration's manager, `manage(tx, loss)`, which sends the elements
    /// through a channel of `capacity` batches and ends the stream by returning
    /// (leaving in `loss` what a read that accepted loss lost). `consumer` is the
    /// coordinated-read consumer index, for the metrics' labels.
    ///
    /// The manager runs in `span` (the read's, opened by `Client`), so every call it
    /// makes carries the read's trace context.
    pub(crate) fn start<F, Fut>(
        dispatcher: DispatcherClient,
        job_name: String,
        consumer: Option<u32>,
        (iteration_id, client_id): (u64, u64),
        capacity: usize,
        span: tracing::Span,
        manage: F,
    ) -> Self
    where
        F: FnOnce(mpsc::Sender<Batch>, LossSlot) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (tx, rx) = mpsc::channel(capacity);
        let loss = LossSlot::default();
        let manager = tokio::spawn(manage(tx, loss.clone()).instrument(span));
        let metrics = ReadMetrics::new(&job_name, consumer);
        ElementStream {
            rx,
            current: Vec::new().into_iter(),
            current_source: Arc::from(""),
            manager,
            dispatcher,
            runtime: tokio::runtime::Handle::current(),
            iteration_id,
            client_id,
            job_name,
            loss,
            metrics,
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
        loop {
            if let Some(e) = self.current.next() {
                self.metrics.delivered(&e);
                return Poll::Ready(Some(Ok((self.current_source.clone(), e))));
            }
            // Nothing in hand: the application waits from now (or from its first
            // poll that found nothing, if this is a later one).
            self.metrics.asked();
            match self.rx.poll_recv(cx) {
                Poll::Ready(Some(Ok((source, batch)))) => {
                    self.current_source = source;
                    self.current = batch.into_iter();
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
        let _ = (&mut self.manager).await;
    }
}

impl Drop for ElementStream {
    fn drop(&mut self) {
        self.manager.abort();
        let (dispatcher, client_id) = (self.dispatcher.clone(), self.client_id);
        // Best effort, one attempt (see `release_iteration_client`): the
        // dispatcher's client timeout frees the consumer if this is lost.
        self.runtime.spawn(async move {
            if let Err(e) = dispatcher.release_iteration_client(client_id).await {
                debug!(client_id, error = %e, "releasing the iteration client failed");
            }
        });
    }
}
