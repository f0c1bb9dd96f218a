//! `Client` and `Reader`: the Rust client (`sluice_client`) as Python objects.
//!
//! Every call that can wait releases the interpreter (`py.detach`), so other
//! Python threads run, and waits in slices of at most [`SIGNAL_CHECK`], checking
//! for signals in between, so Ctrl-C interrupts a blocked read within a second.
//! Elements already received are handed over without releasing the interpreter
//! (releasing and re-taking it costs more than the element).

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use sluice_client::{
    ClientError, ElementStream, ProcessingMode, ReadKind, ReadOptions, RetryPolicy, TargetWorkers,
};
use sluice_dataset::{DatasetDef, Element};
use tokio::runtime::Runtime;
use tokio::sync::Mutex;

use crate::blocking::{self, seconds};
use crate::runtime::{self, Owned};
use crate::{elements, errors};

/// A handle to a Sluice service: its dispatchers' addresses.
#[pyclass(frozen, module = "sluice._native")]
pub struct Client {
    inner: Owned<sluice_client::Client>,
}

#[pymethods]
impl Client {
    /// `addresses`: every dispatcher's `host:port`. Calls to an unavailable
    /// dispatcher are retried with backoff for up to `timeout` seconds. With
    /// `tls_ca` (a PEM file) it dials over TLS; `token` is presented to
    /// dispatchers and workers (docs/security.md).
    #[new]
    #[pyo3(signature = (addresses, timeout = 60.0, tls_ca = None, token = None))]
    fn new(
        addresses: Vec<String>,
        timeout: f64,
        tls_ca: Option<std::path::PathBuf>,
        token: Option<String>,
    ) -> PyResult<Self> {
        let policy = RetryPolicy::default().with_deadline(seconds("timeout", timeout)?);
        let rt = runtime::get()?;
        let client = {
            let _guard = rt.enter();
            let security = crate::security::client(tls_ca, token.as_deref())?;
            sluice_client::Client::with_security(&addresses, policy, security)
                .map_err(errors::from_client)?
        };
        Ok(Client { inner: Owned::new(rt, client) })
    }

    /// Registers the dataset spec (JSON) and returns its id.
    #[pyo3(signature = (spec_json, dataset_id = None))]
    fn register_dataset(
        &self,
        py: Python<'_>,
        spec_json: &str,
        dataset_id: Option<String>,
    ) -> PyResult<String> {
        let def = parse_spec(spec_json)?;
        let (rt, client) = self.inner.get("client")?;
        let client = client.clone();
        let id = blocking::run(py, rt, None, "register_dataset", async move {
            client.register_dataset(&def, dataset_id.as_deref()).await
        })?;
        id.map_err(errors::from_client)
    }

    /// Workers, datasets, jobs and their progress as the leader sees them (a
    /// follower's view, with `from_leader` false, when no leader answers), as JSON.
    fn status_json(&self, py: Python<'_>) -> PyResult<String> {
        let (rt, client) = self.inner.get("client")?;
        let client = client.clone();
        let status = blocking::run(py, rt, None, "status", async move { client.status().await })?
            .map_err(errors::from_client)?;
        serde_json::to_string(&status).map_err(|e| errors::internal(e.to_string()))
    }

    /// Gets or creates the job and its iteration, and returns a reader of it.
    #[pyo3(signature = (dataset_id, processing_mode, job_name = None, target_workers = "auto",
        max_outstanding_requests = None, repetition = 0, num_consumers = None,
        consumer_index = None, trainer_id = None, accept_data_loss = false,
        compression = "auto", exactly_once = false, restore_from = None, deterministic = false,
        seed = 0, exactly_once_auto = false))]
    #[allow(clippy::too_many_arguments)]
    fn read(
        &self,
        py: Python<'_>,
        dataset_id: String,
        processing_mode: &str,
        job_name: Option<String>,
        target_workers: &str,
        max_outstanding_requests: Option<usize>,
        repetition: u64,
        num_consumers: Option<u32>,
        consumer_index: Option<u32>,
        trainer_id: Option<String>,
        accept_data_loss: bool,
        compression: &str,
        exactly_once: bool,
        restore_from: Option<Bound<'_, PyBytes>>,
        deterministic: bool,
        seed: u64,
        exactly_once_auto: bool,
    ) -> PyResult<Reader> {
        let mode: ProcessingMode = processing_mode.parse().map_err(errors::from_client)?;
        let target: TargetWorkers = target_workers.parse().map_err(errors::from_client)?;
        let mut opts = ReadOptions::new(mode).target_workers(target);
        opts.job_name = job_name;
        opts.repetition = repetition;
        opts.accept_data_loss = accept_data_loss;
        opts.compression = compression.parse().map_err(errors::from_client)?;
        if let Some(n) = max_outstanding_requests {
            opts = opts.max_outstanding_requests(n);
        }
        // With deterministic, num_consumers / consumer_index are the order's.
        match (deterministic, num_consumers, consumer_index) {
            (true, Some(n), Some(i)) if trainer_id.is_none() => {
                opts = opts.deterministic(seed, n, i);
            }
            (true, _, _) => {
                return Err(errors::invalid_argument(
                    "deterministic=True needs num_consumers and consumer_index (which consumer \
                     of how many this reader is) and no cross_trainer_cache",
                ))
            }
            (false, ..) => opts.kind = read_kind(num_consumers, consumer_index, trainer_id)?,
        }
        opts.exactly_once = exactly_once;
        opts.exactly_once_auto = exactly_once_auto;
        if let Some(bytes) = restore_from {
            opts = opts.restore(crate::positions::decode(bytes.as_bytes())?);
            if opts.repetition != repetition {
                return Err(errors::invalid_argument(format!(
                    "restore_from is a position of repetition {}, and repetition={repetition} \
                     was asked; restore reads the position's repetition",
                    opts.repetition
                )));
            }
        }
        let (rt, client) = self.inner.get("client")?;
        let client = client.clone();
        let stream = blocking::run(py, rt, None, "starting the read", async move {
            client.from_dataset_id(&dataset_id, opts).await
        })?
        .map_err(errors::from_client)?;
        Ok(Reader::new(rt.clone(), stream))
    }
}

/// One enum on the Rust side; three optional arguments on tf.data's.
fn read_kind(
    num_consumers: Option<u32>,
    consumer_index: Option<u32>,
    trainer_id: Option<String>,
) -> PyResult<ReadKind> {
    match (num_consumers, consumer_index, trainer_id) {
        (None, None, None) => Ok(ReadKind::Plain),
        (None, None, Some(trainer_id)) => Ok(ReadKind::CrossTrainerCache { trainer_id }),
        (Some(num_consumers), Some(consumer_index), None) => {
            Ok(ReadKind::Coordinated { num_consumers, consumer_index })
        }
        (Some(_), None, _) | (None, Some(_), _) => Err(errors::invalid_argument(
            "num_consumers and consumer_index go together: set both (a coordinated read) or \
             neither",
        )),
        (Some(_), Some(_), Some(_)) => Err(errors::invalid_argument(
            "cross_trainer_cache and num_consumers/consumer_index are two different ways to \
             share a job; use one of them",
        )),
    }
}

/// Parses a JSON dataset spec, as `sluice register` does.
pub fn parse_spec(spec_json: &str) -> PyResult<DatasetDef> {
    let def =
        DatasetDef::from_json(spec_json).map_err(|e| errors::invalid_argument(e.to_string()))?;
    def.validate().map_err(|e| errors::invalid_argument(e.to_string()))?;
    Ok(def)
}

/// The elements of one iteration. Iterate it, or call `next(timeout)`.
#[pyclass(frozen, module = "sluice._native")]
pub struct Reader {
    job_name: String,
    iteration_id: u64,
    delivery: sluice_client::Delivery,
    at_most_once_reason: Option<String>,
    /// An async mutex: a read holds it while it waits (in `block_on`), and a
    /// second thread reading the same reader waits its turn.
    state: Mutex<Option<Owned<ElementStream>>>,
    elements: std::sync::atomic::AtomicU64,
    runtime: Arc<Runtime>,
}

impl Reader {
    fn new(runtime: Arc<Runtime>, stream: ElementStream) -> Self {
        Reader {
            job_name: stream.job_name().to_string(),
            iteration_id: stream.iteration_id(),
            delivery: stream.delivery(),
            at_most_once_reason: stream.at_most_once_reason().map(str::to_string),
            state: Mutex::new(Some(Owned::new(runtime.clone(), stream))),
            elements: Default::default(),
            runtime,
        }
    }

    /// The next element (`None` at the end), waiting up to `timeout`.
    fn next_element(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<Py<PyAny>>> {
        let item = match self.try_next()? {
            Some(item) => item,
            None => self.wait_next(py, timeout)?,
        };
        match item {
            None => Ok(None),
            Some(Ok(e)) => {
                self.elements.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                elements::to_python(py, e).map(Some)
            }
            Some(Err(e)) => Err(errors::from_client(e)),
        }
    }

    /// An element already received, without releasing the interpreter. `None`
    /// when the caller has to wait (or another thread is reading).
    #[allow(clippy::type_complexity)]
    fn try_next(&self) -> PyResult<Option<Option<Result<Element, ClientError>>>> {
        let Ok(mut guard) = self.state.try_lock() else { return Ok(None) };
        let Some(owned) = guard.as_mut() else { return Ok(Some(None)) };
        let (_, stream) = owned.get_mut("reader")?;
        Ok(stream.next().now_or_never())
    }

    fn wait_next(
        &self,
        py: Python<'_>,
        timeout: Option<Duration>,
    ) -> PyResult<Option<Result<Element, ClientError>>> {
        let rt = self.runtime.clone();
        // Checked once here; `slices` locks again for each slice.
        if let Ok(guard) = self.state.try_lock() {
            if let Some(owned) = guard.as_ref() {
                owned.get("reader")?;
            }
        }
        blocking::slices(py, &rt, timeout, "reading the next element", || async {
            let mut guard = self.state.lock().await;
            match guard.as_mut() {
                None => None,
                Some(owned) => owned.get_mut("reader").ok()?.1.next().await,
            }
        })
    }
}

#[pymethods]
impl Reader {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        self.next_element(py, None)
    }

    /// The next element, or `None` at the end of the iteration. Raises
    /// `DeadlineExceededError` if none arrives within `timeout` seconds.
    #[pyo3(signature = (timeout = None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<Py<PyAny>>> {
        let timeout = timeout.map(|t| seconds("timeout", t)).transpose()?;
        self.next_element(py, timeout)
    }

    /// Stops reading and releases this consumer from the iteration.
    fn close(&self, py: Python<'_>) {
        // Not in the runtime (a Python thread): blocking is allowed, and waits for
        // a read in progress on another thread to end its slice (<= 100 ms).
        let taken = self.state.blocking_lock().take();
        // Waits for the read's manager to end, so its span is closed (and goes
        // out with the next flush of exported spans). In a fork it is leaked.
        if let Some(Ok((rt, stream))) = taken.map(|owned| owned.into_inner("reader")) {
            py.detach(|| rt.block_on(stream.close()));
        }
    }

    /// This reader's position (exactly-once reads): bytes to checkpoint, restored
    /// with `read(..., restore_from=...)` (or merged with the other consumers'
    /// of the same checkpoint by `merge_positions`). Each call is a new
    /// checkpoint of this reader (its generation moves on).
    fn position<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyBytes>> {
        // Waits for a read in progress on another thread to end its slice.
        let guard = py.detach(|| self.state.blocking_lock());
        let Some(owned) = guard.as_ref() else {
            return Err(errors::invalid_argument(
                "the reader is closed: take the position before close()",
            ));
        };
        let (_, stream) = owned.get("reader")?;
        let position = stream.position().map_err(errors::from_client)?;
        Ok(PyBytes::new(py, &position.encode()))
    }

    /// "exactly_once" or "at_most_once": the delivery the dispatcher answered.
    #[getter]
    fn delivery(&self) -> String {
        self.delivery.to_string()
    }

    /// Why this read is at-most-once, as the dispatcher said (what an
    /// `exactly_once="auto"` read fell back for); `None` when exactly-once.
    #[getter]
    fn at_most_once_reason(&self) -> Option<String> {
        self.at_most_once_reason.clone()
    }

    /// The job's name (generated for an anonymous job).
    #[getter]
    fn job_name(&self) -> &str {
        &self.job_name
    }

    #[getter]
    fn iteration_id(&self) -> u64 {
        self.iteration_id
    }

    /// Elements this reader has returned.
    #[getter]
    fn elements(&self) -> u64 {
        self.elements.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// After the end of a read that accepted loss (`accept_data_loss=True`) and
    /// lost data: `[(task_id, worker_address), ...]`, the tasks ended with their
    /// lost worker before this reader read them to the end. `None` otherwise.
    #[getter]
    fn loss_report(&self) -> Option<Vec<(u64, String)>> {
        let guard = self.state.try_lock().ok()?;
        let (_, stream) = guard.as_ref()?.get("reader").ok()?;
        let report = stream.loss_report()?;
        Some(report.tasks.into_iter().map(|t| (t.task_id, t.worker_address)).collect())
    }
}
