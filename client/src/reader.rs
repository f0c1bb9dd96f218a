//! Reading one iteration: a manager task that follows the dispatcher's task list,
//! and one reader per task that streams its elements from the worker.
//!
//! ```text
//!  dispatcher ◄─ClientHeartbeat─ manager ──spawns──► task reader ◄─GetElements stream─ worker
//!                                   │                     │
//!                                   └──── end ────►  [bounded channel of element batches] ──► ElementStream
//! ```
//! The stream ends when the dispatcher reports the iteration finished and every
//! task reader has seen its task's end of sequence. The manager learns of it from
//! a long poll (`view_poll.rs`) the dispatcher answers as soon as it applies the
//! end, not from its next poll. A reader that skips tasks
//! (`TargetWorkers::Local` reads only workers in this process) cannot wait for the
//! iteration to finish, since it does not read all of it: it ends once it has read
//! a task and every task it reads has reached end of sequence. Memory is bounded by
//! `max_outstanding_requests`: that many batches in the channel, that many task
//! streams at once.

use std::collections::{HashMap, HashSet};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::Stream;
use sluice_dataset::Element;
use sluice_proto::v1 as pb;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::{JoinHandle, JoinSet};
use tracing::{debug, Instrument};

use crate::dispatcher::{worker_channel, DispatcherClient};
use crate::error::ClientError;
use crate::local_workers;
use crate::options::{ReadOptions, TargetWorkers};
use crate::retry::is_retryable_status;
use crate::view_poll::ViewPoll;
use crate::worker_stream;

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
}

impl ElementStream {
    pub(crate) fn start(
        dispatcher: DispatcherClient,
        job_name: String,
        iteration_id: u64,
        client_id: u64,
        opts: ReadOptions,
    ) -> Self {
        let (tx, rx) = mpsc::channel(opts.max_outstanding_requests);
        let span = tracing::info_span!("read", iteration_id, client_id, job = %job_name);
        let manager = if opts.num_consumers.is_some() {
            let rounds = crate::coordinated::manage(dispatcher.clone(), client_id, opts, tx);
            tokio::spawn(rounds.instrument(span))
        } else {
            tokio::spawn(manage(dispatcher.clone(), client_id, opts, tx).instrument(span))
        };
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
        }
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
                return Poll::Ready(Some(Ok((self.current_source.clone(), e))));
            }
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

impl Drop for ElementStream {
    fn drop(&mut self) {
        self.manager.abort();
        let (dispatcher, client_id) = (self.dispatcher.clone(), self.client_id);
        // Best effort: the dispatcher forgets the client either way when it restarts.
        self.runtime.spawn(async move {
            if let Err(e) = dispatcher.release_iteration_client(client_id).await {
                debug!(client_id, error = %e, "releasing the iteration client failed");
            }
        });
    }
}

async fn manage(
    dispatcher: DispatcherClient,
    client_id: u64,
    opts: ReadOptions,
    tx: mpsc::Sender<Batch>,
) {
    let permits = Arc::new(Semaphore::new(opts.max_outstanding_requests));
    let mut readers: JoinSet<Result<(), ClientError>> = JoinSet::new();
    // Per started task: tells its reader the dispatcher saw the task finish.
    let mut started: HashMap<u64, watch::Sender<bool>> = HashMap::new();
    // One long poll always in flight (kept across select rounds: dropping it
    // would cancel the call); none once the iteration finished.
    let mut poll = Some(Box::pin(ViewPoll::new(dispatcher, client_id, &opts).next()));
    let mut finished = false;
    // Tasks left to other readers by `target_workers`; once there is one, this
    // reader ends with its own tasks instead of with the iteration.
    let mut skipped: HashSet<u64> = HashSet::new();
    loop {
        tokio::select! {
            (poller, hb) = async { poll.as_mut().expect("polled only while set").await }, if poll.is_some() => {
                let hb = match hb {
                    Ok(hb) => hb,
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                };
                for task in hb.tasks {
                    if let Some(done) = started.get(&task.task_id) {
                        if task.finished {
                            let _ = done.send(true);
                        }
                        continue;
                    }
                    if task.finished || skipped.contains(&task.task_id) {
                        continue;
                    }
                    if opts.target_workers == TargetWorkers::Local
                        && !local_workers::contains(&task.worker_address)
                    {
                        debug!(task_id = task.task_id, worker = %task.worker_address, "not a local worker; skipping its task");
                        skipped.insert(task.task_id);
                        continue;
                    }
                    let (done, finished_rx) = watch::channel(false);
                    started.insert(task.task_id, done);
                    debug!(task_id = task.task_id, worker = %task.worker_address, "reading task");
                    let span = tracing::debug_span!("task", task_id = task.task_id, worker = %task.worker_address);
                    readers.spawn(
                        read_task(task, client_id, opts.clone(), tx.clone(), permits.clone(), finished_rx)
                            .instrument(span),
                    );
                }
                finished = hb.iteration_finished;
                poll = (!finished).then(|| Box::pin(poller.next()));
            }
            Some(joined) = readers.join_next() => {
                let result = joined.unwrap_or_else(|e| Err(ClientError::Protocol {
                    address: "client".into(),
                    message: format!("task reader panicked: {e}"),
                }));
                if let Err(e) = result {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            }
        }
        // Every started reader has returned: its task reached end of sequence.
        let own_tasks_done = !skipped.is_empty() && !started.is_empty() && readers.is_empty();
        if (finished || own_tasks_done) && readers.is_empty() {
            // Dropping `tx` ends the stream.
            return;
        }
    }
}

async fn read_task(
    task: pb::TaskInfo,
    client_id: u64,
    opts: ReadOptions,
    tx: mpsc::Sender<Batch>,
    permits: Arc<Semaphore>,
    mut finished: watch::Receiver<bool>,
) -> Result<(), ClientError> {
    let _permit = permits.acquire_owned().await.map_err(|_| ClientError::Protocol {
        address: task.worker_address.clone(),
        message: "reader stopped".into(),
    })?;
    let address = task.worker_address.clone();
    let source: Arc<str> = Arc::from(address.as_str());
    let policy = &opts.worker_retry;
    let channel = worker_channel(&address, policy)?;
    let req = pb::GetElementsRequest {
        task_id: task.task_id,
        client_id,
        max_elements_per_message: opts.max_elements_per_message,
        max_bytes_per_message: 0,
        trainer_id: opts.trainer_id.clone().unwrap_or_default(),
    };
    // Time and count of failures since the last message that arrived.
    let mut failing_since: Option<Instant> = None;
    let mut attempts = 0u32;
    loop {
        let status = match worker_stream::get_elements(&channel, &req).await {
            Ok(mut stream) => {
                loop {
                    match stream.message().await {
                        Ok(Some(batch)) => {
                            failing_since = None;
                            attempts = 0;
                            let elements = batch
                                .elements
                                .into_iter()
                                .map(Element::try_from)
                                .collect::<Result<Vec<_>, _>>()
                                .map_err(|e| ClientError::Protocol {
                                    address: address.clone(),
                                    message: format!("malformed element: {e}"),
                                })?;
                            if !elements.is_empty()
                                && tx.send(Ok((source.clone(), elements))).await.is_err()
                            {
                                return Ok(()); // the reader was dropped
                            }
                            if batch.end_of_sequence {
                                return Ok(());
                            }
                        }
                        Ok(None) => {
                            break tonic::Status::unavailable(
                                "stream closed before end of sequence",
                            )
                        }
                        Err(s) => break s,
                    }
                }
            }
            Err(s) => s,
        };
        if !is_retryable_status(&status) {
            return Err(ClientError::Rpc {
                peer: "worker",
                address,
                call: "GetElements",
                code: status.code(),
                message: status.message().to_string(),
            });
        }
        // The task ended at the worker (its elements went to this or another
        // consumer): there is nothing left to fetch, even if the worker is gone.
        if *finished.borrow() {
            return Ok(());
        }
        let since = *failing_since.get_or_insert_with(Instant::now);
        attempts += 1;
        if since.elapsed() >= policy.deadline {
            return Err(ClientError::Unavailable {
                peer: "worker",
                address,
                attempts,
                elapsed: since.elapsed(),
                last_error: format!("{:?}: {}", status.code(), status.message()),
            });
        }
        debug!(attempts, code = ?status.code(), "worker unavailable, retrying");
        tokio::select! {
            _ = tokio::time::sleep(policy.backoff(attempts - 1)) => {}
            _ = finished.wait_for(|f| *f) => return Ok(()),
        }
    }
}
