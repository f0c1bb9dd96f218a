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
//! - [`client`] — [`Client`] — `register_dataset`, `from_dataset_id`, `distribute`.
//! - [`reader`] — [`ElementStream`] — one iteration's elements; a manager follows the
//!   dispatcher's task list, one reader per task streams from its worker.
//! - `worker_stream`: `GetElements` over the tonic channel without copying element
//!   bytes (decodes from the received HTTP/2 frames).
//! - `view_poll`: the manager's long poll of the task list and the end of the
//!   iteration (`ClientHeartbeat` with `known_view`).
//! - [`coordinated`] — coordinated reads (`num_consumers` + `consumer_index`): the
//!   reader that reads every task one round at a time, pauses for joining workers
//!   and votes dead ones out.
//! - [`blocking`] — the same as a blocking iterator, for callers without a runtime.
//! - [`options`] — [`ReadOptions`], [`ProcessingMode`] (`"parallel_epochs"` /
//!   `"distributed_epoch"` accepted, and the static `file`, `data`, `file_or_data`,
//!   `hint`), [`TargetWorkers`].
//! - [`dispatcher`] — [`DispatcherClient`] — retrying calls to one or more dispatchers
//!   (also used by workers).
//! - [`retry`] — [`RetryPolicy`] — bounded backoff for every remote call.
//! - [`local_workers`] — the process-wide registry of in-process workers, which
//!   `TargetWorkers::Local` reads are limited to.
//! - `cache_options`: the checks of a cross-trainer cache read (`ReadOptions`).
//! - [`error`] — [`ClientError`].

pub mod blocking;
mod cache_options;
pub mod client;
pub mod coordinated;
pub mod dispatcher;
pub mod error;
pub mod local_workers;
pub mod options;
pub mod reader;
pub mod retry;
mod view_poll;
mod worker_stream;

pub use client::Client;
pub use dispatcher::DispatcherClient;
pub use error::ClientError;
pub use options::{ProcessingMode, ReadOptions, TargetWorkers};
pub use reader::ElementStream;
pub use retry::RetryPolicy;
