//! The jobs of a lifecycle run: each one registers its pipeline, starts its
//! readers (a named job's readers share its iteration), and records what each
//! reader kept when it stopped (`JobEnd`, the multiset as sorted runs).
//!
//! ```text
//!  JobStart ─► register the pipeline ─► readers 0..R ──► JobEnd (each)
//!  exactly-once with a checkpoint: reader 0 takes a position after k elements,
//!  reads a few more (rolled back), stops ─► JobEnd "checkpointed"
//!  ─► a new reader restores from the position, reads to the end ─► JobEnd
//! ```
//! Every reader has a deadline ([`JOB_DEADLINE`]): a job that hangs ends with
//! that as its outcome (a violation), and the run always ends.

use std::time::Duration;

use futures::StreamExt;
use sluice_client::{Client, ClientError, ElementStream, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{Arg, DatasetDef, Element};
use sluice_positions::Position;

use crate::history::{value_runs, Event, JobSpec, Pipeline, CHECKPOINTED};
use crate::recorder::Recorder;
use crate::runner::{ELEMENTS_PER_MESSAGE, OUTSTANDING_MESSAGES};

/// A reader gives up after this long (recorded as its outcome). A job of the
/// largest size reads in well under a minute on a loaded debug build, through a
/// worker kill (the worker timeout, 10 s) or a rolling restart.
pub const JOB_DEADLINE: Duration = Duration::from_secs(180);

/// Elements an exactly-once reader takes after its position before it stops: at
/// most this many are rolled back.
const ROLL_BACK_AT_MOST: u64 = 40;

/// Reader → worker: longer than the dispatcher takes to declare a killed worker
/// lost (its worker timeout, 10 s, afresh after a leader change), shorter than
/// the job deadline, so a read waiting on a worker nothing will end fails with
/// the client's own error ("unavailable … giving up"), which names the worker.
pub fn worker_policy() -> RetryPolicy {
    RetryPolicy {
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_secs(1),
        deadline: Duration::from_secs(45),
        attempt_timeout: Duration::from_secs(5),
    }
}

pub fn dataset(p: &Pipeline) -> DatasetDef {
    match *p {
        Pipeline::Range { n } => DatasetDef::range(n as i64),
        Pipeline::Add { n, add } => {
            DatasetDef::range(n as i64).map_with("add", vec![Arg::Int(add)])
        }
        Pipeline::Batch { n, size } => DatasetDef::range(n as i64).batch(size, false),
    }
}

/// Runs job `job` to its end and records it.
pub async fn run(client: Client, recorder: Recorder, job: u32, spec: JobSpec) {
    let t_ms = recorder.now();
    recorder.record(Event::JobStart { t_ms, job, spec: spec.clone() }).await;
    let dataset_id = match client.register_dataset(&dataset(&spec.pipeline), None).await {
        Ok(id) => id,
        Err(e) => {
            let outcome = format!("registering the dataset: {e}");
            for reader in 0..spec.readers {
                let end = Ended { outcome: outcome.clone(), ..Ended::default() };
                end.record(&recorder, job, reader, 0).await;
            }
            return;
        }
    };
    let readers = (0..spec.readers).map(|reader| {
        let r = Reader { client: client.clone(), recorder: recorder.clone(), job, reader };
        let (spec, dataset_id) = (spec.clone(), dataset_id.clone());
        async move { r.run(&spec, &dataset_id).await }
    });
    futures::future::join_all(readers).await;
}

struct Reader {
    client: Client,
    recorder: Recorder,
    job: u32,
    reader: u32,
}

#[derive(Default)]
struct Ended {
    outcome: String,
    values: Vec<i64>,
    rolled_back: u64,
    lost_workers: Vec<String>,
}

impl Ended {
    async fn record(mut self, recorder: &Recorder, job: u32, reader: u32, incarnation: u32) {
        let t_ms = recorder.now();
        let values = value_runs(&mut self.values);
        tracing::info!(job, reader, incarnation, outcome = %self.outcome, "lifecycle read ended");
        recorder
            .record(Event::JobEnd {
                t_ms,
                job,
                reader,
                incarnation,
                outcome: self.outcome,
                values,
                rolled_back: self.rolled_back,
                lost_workers: self.lost_workers,
            })
            .await;
    }
}

impl Reader {
    async fn run(&self, spec: &JobSpec, dataset_id: &str) {
        let mut restore: Option<Position> = None;
        for incarnation in 0.. {
            // A checkpoint only in the first incarnation: the restored one reads to the end.
            let checkpoint = spec.checkpoint_after.filter(|_| incarnation == 0);
            let mut ended = Ended::default();
            let mut position = None;
            let read =
                self.read(spec, dataset_id, restore.take(), checkpoint, &mut ended, &mut position);
            match tokio::time::timeout(JOB_DEADLINE, read).await {
                Ok(outcome) => ended.outcome = outcome,
                Err(_) => {
                    ended.outcome =
                        format!("no end after {JOB_DEADLINE:?} (the harness's deadline)")
                }
            }
            let again = ended.outcome == CHECKPOINTED;
            ended.record(&self.recorder, self.job, self.reader, incarnation).await;
            match position {
                Some(p) if again => restore = Some(p),
                _ => break,
            }
        }
    }

    /// Reads until the end (returns "end"), an error (its text), or, with
    /// `checkpoint`, until it took a position and read a little past it
    /// ([`CHECKPOINTED`]; `ended.values` is then what the position covers).
    async fn read(
        &self,
        spec: &JobSpec,
        dataset_id: &str,
        restore: Option<Position>,
        checkpoint: Option<u64>,
        ended: &mut Ended,
        position: &mut Option<Position>,
    ) -> String {
        let mode = if spec.mode == "off" { ProcessingMode::Off } else { ProcessingMode::Dynamic };
        let mut opts = ReadOptions::new(mode)
            .max_outstanding_requests(OUTSTANDING_MESSAGES)
            .worker_retry(worker_policy())
            .accept_data_loss(spec.accept_loss)
            .exactly_once(spec.exactly_once);
        opts.max_elements_per_message = ELEMENTS_PER_MESSAGE;
        if let Some(name) = &spec.name {
            opts = opts.job_name(name.clone());
        }
        if let Some(p) = restore {
            opts = opts.restore(p);
        }
        let mut stream = match self.client.from_dataset_id(dataset_id, opts).await {
            Ok(s) => s,
            Err(e) => return e.to_string(),
        };
        let mut after_position: Vec<i64> = Vec::new();
        let roll_back = (u64::from(self.job) % ROLL_BACK_AT_MOST) + 1;
        while let Some(item) = stream.next().await {
            let values = match item.map_err(|e| failed(e, ended)).and_then(|el| values_of(&el)) {
                Ok(v) => v,
                Err(e) => return e,
            };
            if position.is_some() {
                after_position.extend(values);
                if after_position.len() as u64 >= roll_back {
                    ended.rolled_back = after_position.len() as u64;
                    return CHECKPOINTED.to_string();
                }
                continue;
            }
            ended.values.extend(values);
            if checkpoint.is_some_and(|k| ended.values.len() as u64 >= k) {
                match stream.position() {
                    Ok(p) => *position = Some(p),
                    Err(e) => return format!("taking a position: {e}"),
                }
            }
        }
        // The stream ended before the reader stopped: it kept everything.
        ended.values.append(&mut after_position);
        *position = None;
        end_of(&stream, ended)
    }
}

/// "end", noting the loss a reader that accepted it was told of.
fn end_of(stream: &ElementStream, ended: &mut Ended) -> String {
    if let Some(report) = stream.loss_report() {
        ended.lost_workers = report.tasks.iter().map(|t| t.worker_address.clone()).collect();
    }
    "end".to_string()
}

/// The error's text, noting the workers a `DataLost` names.
fn failed(e: ClientError, ended: &mut Ended) -> String {
    if let ClientError::DataLost { report } = &e {
        ended.lost_workers = report.tasks.iter().map(|t| t.worker_address.clone()).collect();
    }
    e.to_string()
}

/// Every int64 value of an element (a batch is flattened).
fn values_of(el: &Element) -> Result<Vec<i64>, String> {
    let mut out = Vec::new();
    for t in &el.components {
        out.extend(t.i64_values().map_err(|e| e.to_string())?);
    }
    Ok(out)
}
