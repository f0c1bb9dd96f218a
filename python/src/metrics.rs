//! The client's Prometheus metrics from Python: `serve_metrics` serves this
//! process's client registry (`sluice_client::metrics`, which every `Reader`
//! updates) at `GET /metrics`; `metrics_text` returns the same text in-process.
//!
//! The server runs on the process's runtime and stops when `stop()` is called or
//! its object is dropped; a forked child cannot use its parent's (`runtime::Owned`).

use std::sync::Mutex;

use pyo3::prelude::*;
use sluice_client::metrics::MetricsServer as Server;

use crate::blocking;
use crate::errors;
use crate::runtime::{self, Owned};

/// A running `GET /metrics` endpoint of this process's client metrics.
#[pyclass(module = "sluice._native")]
pub struct MetricsServer {
    address: String,
    server: Mutex<Option<Owned<Server>>>,
}

#[pymethods]
impl MetricsServer {
    /// `host:port` it listens on (the port chosen if 0 was asked for).
    #[getter]
    fn address(&self) -> String {
        self.address.clone()
    }

    /// Stops serving (idempotent).
    fn stop(&self) -> PyResult<()> {
        let taken = self.server.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(server) = taken {
            server.get("metrics server")?;
            drop(server);
        }
        Ok(())
    }
}

/// Serves this process's client metrics at `http://ADDRESS/metrics` (port 0 picks
/// a free port). Off loopback it needs `insecure=True`: the endpoint has neither
/// TLS nor authentication.
#[pyfunction]
#[pyo3(signature = (address, insecure = false))]
pub fn serve_metrics(py: Python<'_>, address: &str, insecure: bool) -> PyResult<MetricsServer> {
    let addr: std::net::SocketAddr = address.parse().map_err(|e| {
        errors::invalid_argument(format!(
            "serve_metrics: {address:?} is not HOST:PORT with an IP host ({e}); e.g. \
             \"127.0.0.1:9400\", or \"127.0.0.1:0\" for any free port"
        ))
    })?;
    let host = addr.ip().to_string();
    let missing = ["TLS and authentication (the metrics endpoint has neither)"];
    sluice_security::require_secure_off_loopback("metrics endpoint", &host, &missing, insecure)
        .map_err(|e| {
            errors::failed_precondition(format!("serve_metrics: {e} (from Python: insecure=True)"))
        })?;
    let rt = runtime::get()?;
    let server = blocking::run(py, &rt, None, "binding", sluice_client::metrics::serve(addr))?
        .map_err(|e| {
            errors::new_err(
                errors::Kind::Unavailable,
                format!("serve_metrics: cannot listen on {address}: {e} (is the port in use?)"),
            )
        })?;
    let address = server.address().to_string();
    Ok(MetricsServer { address, server: Mutex::new(Some(Owned::new(rt, server))) })
}

/// This process's client metrics as OpenMetrics text (what `GET /metrics` answers).
#[pyfunction]
pub fn metrics_text() -> String {
    sluice_client::metrics::encode()
}
