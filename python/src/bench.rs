//! The Rust client's figure for `python -m sluice.bench`: the same read as the
//! Python loop, consumed in Rust (elements counted, never converted), so the
//! Python figures stand next to what the client itself does in the same run.

use std::time::Instant;

use futures::StreamExt;
use pyo3::prelude::*;
use sluice_client::{ProcessingMode, ReadOptions, RetryPolicy};

use crate::blocking::{self, seconds};
use crate::{errors, runtime};

/// Reads `dataset_id` to the end with the Rust client; returns (elements,
/// payload bytes, seconds).
#[pyfunction]
#[pyo3(signature = (addresses, dataset_id, processing_mode = "off", max_outstanding_requests = 16, timeout = 60.0))]
pub fn rust_read(
    py: Python<'_>,
    addresses: Vec<String>,
    dataset_id: String,
    processing_mode: &str,
    max_outstanding_requests: usize,
    timeout: f64,
) -> PyResult<(u64, u64, f64)> {
    let mode: ProcessingMode = processing_mode.parse().map_err(errors::from_client)?;
    let policy = RetryPolicy::default().with_deadline(seconds("timeout", timeout)?);
    let rt = runtime::get()?;
    let read = async move {
        let client = sluice_client::Client::new(&addresses, policy)?;
        let opts = ReadOptions::new(mode).max_outstanding_requests(max_outstanding_requests);
        let started = Instant::now();
        let mut stream = client.from_dataset_id(&dataset_id, opts).await?;
        let (mut elements, mut bytes) = (0u64, 0u64);
        while let Some(e) = stream.next().await {
            let e = e?;
            elements += 1;
            bytes += e.components.iter().map(|t| t.byte_len() as u64).sum::<u64>();
        }
        Ok::<_, sluice_client::ClientError>((elements, bytes, started.elapsed().as_secs_f64()))
    };
    blocking::run(py, &rt, None, "the Rust read", read)?.map_err(errors::from_client)
}
