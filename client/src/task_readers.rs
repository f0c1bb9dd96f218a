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
//!
//! Loss: a task the dispatcher ended because its worker was lost (`TaskInfo.lost`),
//! and that this reader had not read to its end of sequence, lost elements. The
//! read then does not end like a complete one: its last item is
//! `ClientError::DataLost` naming the tasks and workers, or, with
//! `ReadOptions::accept_data_loss`, it ends with the report in the stream
//! (`loss.rs`).
//!
//! Exactly-once reads (`exactly_once`): a lost task is no loss. The manager
//! marks it lost in the read's `Consumption` (which drops what the stream holds
//! of it and acknowledges it in the next report), its reader stops at its next
//! message, and the dispatcher hands its unconsumed records out again. Each
//! message's positions are split here; the message's own origin counts as
//! consumed on receipt, the elements' travel with them to the stream. When
//! every task of the view has ended here, a *drained* marker follows their
//! messages, so the stream can tell the dispatcher it holds nothing of them
//! (the end-of-epoch sweep).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use sluice_dataset::Element;
use sluice_proto::contract::Reason;
use sluice_proto::v1 as pb;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tracing::{debug, Instrument};

use crate::channels::worker_channel;
use crate::dispatcher::DispatcherClient;
use crate::error::ClientError;
use crate::exactly_once::{self, Consumption};
use crate::local_workers;
use crate::loss::{LossReport, LossSlot, LostTask};
use crate::options::{ReadOptions, TargetWorkers};
use crate::reader::{Batch, Received};
use crate::retry::{describe, is_retryable_status, Attempt};
use crate::stream_credit;
use crate::view_poll::ViewPoll;
use crate::worker_stream;
use sluice_security::ClientSecurity;

/// How a task reader ended without error.
enum Ended {
    /// It read the task's end of sequence: nothing of the task is missing here.
    EndOfSequence,
    /// The dispatcher saw the task finish before this reader read its end (its
    /// elements went to another consumer, or its worker was lost).
    FinishedElsewhere,
}

pub(crate) async fn manage(
    dispatcher: DispatcherClient,
    client_id: u64,
    opts: ReadOptions,
    consumption: Option<Arc<Consumption>>,
    tx: mpsc::Sender<Batch>,
    loss: LossSlot,
) {
    // A deterministic order reads every task at once: a worker serves all the
    // consumers, so one whose streams wait would hold up the others' splits
    // (docs/exactly-once.md, "Deterministic order"; its buffer is the bound).
    let streams = match opts.deterministic {
        Some(_) => Semaphore::MAX_PERMITS,
        None => opts.max_outstanding_requests,
    };
    let permits = Arc::new(Semaphore::new(streams));
    let mut readers: JoinSet<Result<(u64, Ended), ClientError>> = JoinSet::new();
    // Tasks the dispatcher ended because their worker was lost → that worker.
    let mut lost: HashMap<u64, String> = HashMap::new();
    let mut report = LossReport::default();
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
    // Exactly-once: tasks in the last view, and the count of the last drained
    // marker sent (see `drained_marker`).
    let (mut view_tasks, mut marked) = (0u64, 0u64);
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
                if let Some(c) = &consumption {
                    c.note_watermark(hb.checkpoint_watermark, hb.checkpoint_generation);
                }
                view_tasks = hb.tasks.len() as u64;
                for task in hb.tasks {
                    if task.lost {
                        match &consumption {
                            // Not a loss: acknowledged, and read again elsewhere.
                            Some(c) => c.task_lost(task.task_id),
                            None => {
                                lost.insert(task.task_id, task.worker_address.clone());
                            }
                        }
                    }
                    if let Some(done) = started.get(&task.task_id) {
                        if task.finished {
                            let _ = done.send(true);
                        }
                        continue;
                    }
                    if skipped.contains(&task.task_id) {
                        continue;
                    }
                    if task.finished {
                        // Never read here, and ended with its worker: its elements
                        // are gone (a task that finished normally went to others).
                        if task.lost && consumption.is_none() && reads_worker(&opts, &task.worker_address) {
                            started.insert(task.task_id, watch::channel(true).0);
                            report.tasks.push(LostTask { task_id: task.task_id, worker_address: task.worker_address });
                        }
                        continue;
                    }
                    if !reads_worker(&opts, &task.worker_address) {
                        debug!(task_id = task.task_id, worker = %task.worker_address, "not a local worker; skipping its task");
                        skipped.insert(task.task_id);
                        continue;
                    }
                    let (done, finished_rx) = watch::channel(false);
                    started.insert(task.task_id, done);
                    debug!(task_id = task.task_id, worker = %task.worker_address, "reading task");
                    let span = tracing::debug_span!("task", task_id = task.task_id, worker = %task.worker_address);
                    readers.spawn(
                        read_task(task, client_id, opts.clone(), security.clone(), consumption.clone(), tx.clone(), permits.clone(), finished_rx)
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
                match result {
                    Err(e) => {
                        let _ = tx.send(Err(e)).await;
                        return;
                    }
                    Ok((task_id, Ended::FinishedElsewhere)) => {
                        if let Some(worker_address) = lost.get(&task_id) {
                            let worker_address = worker_address.clone();
                            report.tasks.push(LostTask { task_id, worker_address });
                        }
                    }
                    Ok((_, Ended::EndOfSequence)) => {}
                }
            }
        }
        if consumption.is_some() && skipped.is_empty() && !finished && readers.is_empty() {
            drained_marker(&tx, view_tasks, &mut marked);
        }
        // Every started reader has returned: its task reached end of sequence.
        let own_tasks_done = !skipped.is_empty() && !started.is_empty() && readers.is_empty();
        if (finished || own_tasks_done) && readers.is_empty() {
            if !report.is_empty() {
                tracing::warn!(%report, "the read lost data");
                if opts.accept_data_loss {
                    *loss.lock().unwrap_or_else(|e| e.into_inner()) = Some(report);
                } else {
                    let _ = tx.send(Err(ClientError::DataLost { report })).await;
                }
            }
            // Dropping `tx` ends the stream.
            return;
        }
    }
}

/// Exactly-once reads, the end-of-epoch sweep (docs/exactly-once.md): every
/// task of the last view (`tasks` of them) has ended here, so once the stream
/// has handed out what is in the channel, this reader holds nothing of them.
/// A marker after their messages tells the stream so (it reports it); sent
/// once per task count, and tried again at the next round if the channel is
/// full (a long poll answers at least once a second).
fn drained_marker(tx: &mpsc::Sender<Batch>, tasks: u64, marked: &mut u64) {
    if tasks > 0 && *marked != tasks && tx.try_send(Ok(Received::drained(tasks))).is_ok() {
        *marked = tasks;
    }
}

/// Whether this reader reads the tasks of the worker at `address`
/// (`TargetWorkers::Local` reads only workers in this process).
fn reads_worker(opts: &ReadOptions, address: &str) -> bool {
    opts.target_workers != TargetWorkers::Local || local_workers::contains(address)
}

#[allow(clippy::too_many_arguments)]
async fn read_task(
    task: pb::TaskInfo,
    client_id: u64,
    opts: ReadOptions,
    security: ClientSecurity,
    consumption: Option<Arc<Consumption>>,
    tx: mpsc::Sender<Batch>,
    permits: Arc<Semaphore>,
    finished: watch::Receiver<bool>,
) -> Result<(u64, Ended), ClientError> {
    let task_id = task.task_id;
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
        compression: opts.compression.for_worker(&address) as i32,
        consumer_index: opts.deterministic.map(|d| d.consumer_index),
        // A deterministic order's reorder buffer bounds its streams instead.
        credit_elements: match opts.deterministic {
            Some(_) => 0,
            None => stream_credit::credit_for(opts.max_elements_per_message),
        },
    };
    let bearer = security.bearer();
    let (channel, req, tx, source, finished_ref) = (&channel, &req, &tx, &source, &finished);
    let consumption = consumption.as_deref();
    let mut until_finished = finished.clone();
    // The task ended at the worker (its elements went to this or another
    // consumer): there is nothing left to fetch, even if the worker is gone.
    let task_finished = async move {
        let _ = until_finished.wait_for(|f| *f).await;
        Ended::FinishedElsewhere
    };
    let retry = policy.retry("worker", &address);
    retry
        .run_until(task_finished, move |_| async move {
            // Whether a message arrived on this attempt's stream.
            let mut progressed = false;
            let status = match worker_stream::get_elements(channel, bearer, req).await {
                Ok(mut stream) => loop {
                    match stream.message().await {
                        Ok(Some(mut batch)) => {
                            progressed = true;
                            if let Err(e) = crate::compression::expand(&mut batch, source) {
                                return Attempt::GiveUp(e);
                            }
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
                            let origins = match consumption {
                                None => Default::default(),
                                Some(c) => match exactly_once::take_origins(
                                    batch.positions.take(),
                                    elements.len(),
                                    task_id,
                                    c,
                                    source,
                                ) {
                                    Ok(Some(origins)) => origins,
                                    // The task was lost: nothing more is taken from it.
                                    Ok(None) => return Attempt::Done(Ended::FinishedElsewhere),
                                    Err(e) => return Attempt::GiveUp(e),
                                },
                            };
                            let received = Received {
                                source: source.clone(),
                                task_id,
                                credit: stream.credit_back(elements.len()),
                                elements,
                                origins,
                                split: batch.split,
                                drained_tasks: 0,
                            };
                            let news = !received.elements.is_empty() || received.split.is_some();
                            if news && tx.send(Ok(received)).await.is_err() {
                                // The reader was dropped.
                                return Attempt::Done(Ended::EndOfSequence);
                            }
                            if batch.end_of_sequence {
                                return Attempt::Done(Ended::EndOfSequence);
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
            // Exactly-once: a task the dispatcher ended (its worker was declared
            // lost, or its iteration replaced) is deleted on its worker. Nothing
            // more comes from it, and that is no loss: the dispatcher reads again
            // what no consumer took (the view marks it lost, or the sweep finds it).
            if consumption.is_some() && Reason::of(&status) == Some(Reason::TaskDeleted) {
                return Attempt::Done(Ended::FinishedElsewhere);
            }
            if !is_retryable_status(&status) {
                return Attempt::GiveUp(ClientError::from_worker(source, "GetElements", &status));
            }
            if *finished_ref.borrow() {
                return Attempt::Done(Ended::FinishedElsewhere);
            }
            if progressed {
                Attempt::FailedAfterProgress(describe(&status))
            } else {
                Attempt::Failed(describe(&status))
            }
        })
        .await
        .map(|ended| (task_id, ended))
}
