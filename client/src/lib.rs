//! Sluice's client library: register datasets, create or join jobs, read elements.
//!
//! ```no_run
//! # async fn demo() -> Result<(), sluice_client::ClientError> {
//! use futures::StreamExt;
//! use sluice_client::{Client, ProcessingMode, ReadOptions, RetryPolicy};
//! use sluice_dataset::DatasetDef;
//!
//! let client = Client::new(&["127.0.0.1:5050".to_string()], RetryPolicy::default())?;
//! let def = DatasetDef::range(10).map("square");
//! let mut elements = client.distribute(&def, ReadOptions::new(ProcessingMode::Dynamic)).await?;
//! while let Some(e) = elements.next().await {
//!     println!("{}", e?.to_json());
//! }
//! # Ok(()) }
//! ```
//!
//! # Layout
//! ```text
//!  Client ──register, job, iteration──► DispatcherClient ──retry──► dispatchers
//!    │ picks the manager
//!    ├─ task_readers: view_poll (task list) ─► one reader per task ─► worker_stream ─► worker
//!    └─ coordinated: heartbeats + rounds ─► CoordinatedGetElement ─► workers
//!          │ both send element batches through a bounded channel
//!          ▼
//!    ElementStream (reader) ──► caller   (blocking: the same as an Iterator)
//! ```
//! - [`client`] — [`Client`] — `register_dataset`, `from_dataset_id` (picks the
//!   read's manager), `distribute`.
//! - [`reader`] — [`ElementStream`] — one iteration's elements, the receiving end
//!   of the manager's channel; knows nothing of how they are read.
//! - `task_readers`: the manager of a plain read: follows the dispatcher's task
//!   list, one reader per task streams from its worker.
//! - `view_poll`: the manager's long poll of the task list and the end of the
//!   iteration (`ClientHeartbeat` with `known_view`).
//! - `worker_stream`: `GetElements` over the tonic channel without copying element
//!   bytes (decodes from the received HTTP/2 frames).
//! - [`coordinated`] — coordinated reads (`num_consumers` + `consumer_index`): the
//!   manager that reads every task one round at a time, pauses for joining
//!   workers and votes dead ones out.
//! - [`blocking`] — the same as a blocking iterator, for callers without a runtime.
//! - [`compression`] — [`Compression`]: the `compression` read option (`auto`
//!   asks non-loopback workers for zstd) and the bounded decoding of compressed
//!   messages.
//! - [`options`] — [`ReadOptions`] and its checks, [`ProcessingMode`]
//!   (`"parallel_epochs"` / `"distributed_epoch"` accepted, and the static `file`,
//!   `data`, `file_or_data`, `hint`), [`TargetWorkers`]. A leaf: the readers
//!   depend on it.
//! - [`dispatcher`] — [`DispatcherClient`] — retrying calls to one or more dispatchers
//!   (also used by workers).
//! - `channels`: the lazily connecting gRPC channels to dispatchers and workers.
//! - [`retry`] — [`RetryPolicy`] and the one retry loop ([`retry::Retry`]) every
//!   remote call goes through: bounded backoff up to a deadline.
//! - [`local_workers`] — the process-wide registry of in-process workers, which
//!   `TargetWorkers::Local` reads are limited to.
//! - [`metrics`] — the process-wide client metrics (`sluice_client_wait_seconds`,
//!   elements and bytes delivered), which every [`ElementStream`] updates, and
//!   `metrics::serve` to export them at `GET /metrics`.
//! - [`status`] — [`ServiceStatus`], what `Client::status` returns.
//! - [`error`] — [`ClientError`].
//! - [`exactly_once`] — the reader's side of exactly-once delivery: consumption
//!   recorded as the application takes elements, reports to the dispatcher (a
//!   reporter task), lost-task acknowledgements, [`ElementStream::position`];
//!   [`Delivery`].
//! - [`loss`] — [`LossReport`]: the tasks a read lost with their worker, carried by
//!   `ClientError::DataLost` or, for a reader that accepted loss, by the stream.
//! - `fuzzing` (feature `fuzzing`) — the element-frame decoder's entry point for the fuzz
//!   target in `fuzz/` and the corpus-replay test (`tests/fuzz_corpus.rs`); not an API.

pub mod blocking;
mod channels;
pub mod client;
pub mod compression;
pub mod coordinated;
pub mod dispatcher;
pub mod error;
pub mod exactly_once;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod local_workers;
pub mod loss;
pub mod metrics;
pub mod options;
pub mod reader;
pub mod retry;
pub mod status;
mod stream_credit;
mod task_readers;
mod view_poll;
mod worker_stream;

pub use client::Client;
pub use compression::Compression;
pub use dispatcher::DispatcherClient;
pub use error::ClientError;
pub use exactly_once::Delivery;
pub use loss::{LossReport, LostTask};
pub use options::{Deterministic, ProcessingMode, ReadKind, ReadOptions, TargetWorkers};
pub use reader::ElementStream;
pub use retry::RetryPolicy;
pub use status::ServiceStatus;
pub use stream_credit::STREAM_CREDIT_ELEMENTS;
