//! The manager of a plain (not coordinated) read: it follows the dispatcher's task
//! list, and one reader per task streams its elements from the worker.
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
//!
//! A task reader whose worker fails retries per `ReadOptions::worker_retry`
//! (`retry.rs`); each message that arrives restarts the failure clock, and a task
//! the dispatcher saw finish is not fetched again even if its worker is gone.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sluice_dataset::Element;
use sluice_proto::v1 as pb;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, Instrument};

use crate::channels::worker_channel;
use crate::dispatcher::DispatcherClient;
use crate::error::ClientError;
use crate::local_workers;
use crate::options::{ReadOptions, TargetWorkers};
use crate::reader::Batch;
use crate::retry::{describe, is_retryable_status, Attempt};
use crate::view_poll::ViewPoll;
use crate::worker_stream;
use sluice_security::ClientSecurity;

pub(crate) async fn manage(
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
    let security = dispatcher.security().clone();
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
                        read_task(task, client_id, opts.clone(), security.clone(), tx.clone(), permits.clone(), finished_rx)
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
    security: ClientSecurity,
    tx: mpsc::Sender<Batch>,
    permits: Arc<Semaphore>,
    finished: watch::Receiver<bool>,
) -> Result<(), ClientError> {
    let _permit = permits.acquire_owned().await.map_err(|_| ClientError::Protocol {
        address: task.worker_address.clone(),
        message: "reader stopped".into(),
    })?;
    let address = task.worker_address.clone();
    let source: Arc<str> = Arc::from(address.as_str());
    let policy = &opts.worker_retry;
    let channel = worker_channel(&address, policy, &security)?;
    let req = pb::GetElementsRequest {
        task_id: task.task_id,
        client_id,
        max_elements_per_message: opts.max_elements_per_message,
        max_bytes_per_message: 0,
        trainer_id: opts.kind.trainer_id().unwrap_or_default().to_string(),
    };
    let bearer = security.bearer();
    let (channel, req, tx, source, finished_ref) = (&channel, &req, &tx, &source, &finished);
    let mut until_finished = finished.clone();
    // The task ended at the worker (its elements went to this or another
    // consumer): there is nothing left to fetch, even if the worker is gone.
    let task_finished = async move {
        let _ = until_finished.wait_for(|f| *f).await;
    };
    let retry = policy.retry("worker", &address);
    retry
        .run_until(task_finished, move |_| async move {
            // Whether a message arrived on this attempt's stream.
            let mut progressed = false;
            let status = match worker_stream::get_elements(channel, bearer, req).await {
                Ok(mut stream) => loop {
                    match stream.message().await {
                        Ok(Some(batch)) => {
                            progressed = true;
                            let elements = batch
                                .elements
                                .into_iter()
                                .map(Element::try_from)
                                .collect::<Result<Vec<_>, _>>();
                            let elements = match elements {
                                Ok(elements) => elements,
                                Err(e) => {
                                    return Attempt::GiveUp(ClientError::Protocol {
                                        address: source.to_string(),
                                        message: format!("malformed element: {e}"),
                                    })
                                }
                            };
                            if !elements.is_empty()
                                && tx.send(Ok((source.clone(), elements))).await.is_err()
                            {
                                return Attempt::Done(()); // the reader was dropped
                            }
                            if batch.end_of_sequence {
                                return Attempt::Done(());
                            }
                        }
                        Ok(None) => {
                            break tonic::Status::unavailable(
                                "stream closed before end of sequence",
                            )
                        }
                        Err(s) => break s,
                    }
                },
                Err(s) => s,
            };
            if !is_retryable_status(&status) {
                return Attempt::GiveUp(ClientError::rpc("worker", source, "GetElements", &status));
            }
            if *finished_ref.borrow() {
                return Attempt::Done(());
            }
            if progressed {
                Attempt::FailedAfterProgress(describe(&status))
            } else {
                Attempt::Failed(describe(&status))
            }
        })
        .await
}
