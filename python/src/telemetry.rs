//! `configure_tracing`, `flush_tracing`, `shutdown_tracing`: logs and trace export
//! of the Rust core inside a Python process, set up as the `sluice` binary's
//! `--log-format` / `--otlp-endpoint` do (sluice-telemetry,
//! docs/operations-traces.md). Readers' spans (and those of servers started in
//! this process) then go to the collector, and their gRPC calls carry the trace
//! context to the dispatcher and workers.
//!
//! The exporter runs on this process's runtime: a forked child (a `DataLoader`
//! worker) does not export; call `configure_tracing` again there if it should
//! (it fails: the subscriber is per process and was inherited — see python.md).

use std::sync::Mutex;

use pyo3::prelude::*;
use sluice_telemetry::{LogFormat, OtlpSettings, Settings, Telemetry};

use crate::{errors, runtime};

static INSTALLED: Mutex<Option<Telemetry>> = Mutex::new(None);

/// Sets up logging to stderr (`log_format` "text" or "json", level `log_level`
/// unless `SLUICE_LOG` is set, default "warn") and, when `otlp_endpoint` (or
/// `OTEL_EXPORTER_OTLP_ENDPOINT`) is given, span export over OTLP/gRPC as
/// `service_name` (default "sluice-python"). Returns whether spans are exported.
/// Once per process.
#[pyfunction]
#[pyo3(signature = (otlp_endpoint = None, service_name = None, log_format = "text", log_level = None))]
pub fn configure_tracing(
    otlp_endpoint: Option<&str>,
    service_name: Option<String>,
    log_format: &str,
    log_level: Option<&str>,
) -> PyResult<bool> {
    let format = match log_format {
        "text" => LogFormat::Text,
        "json" => LogFormat::Json,
        other => {
            return Err(errors::invalid_argument(format!(
                "log_format={other:?}: give \"text\" or \"json\""
            )))
        }
    };
    let service = service_name.unwrap_or_else(|| "sluice-python".to_string());
    let settings = Settings {
        format,
        default_filter: log_level.unwrap_or("warn").to_string(),
        otlp: OtlpSettings::from_endpoint_or_env(otlp_endpoint, service),
    };
    let rt = runtime::get()?;
    let _inside = rt.enter();
    let telemetry = Telemetry::init(&settings).map_err(|e| match e {
        sluice_telemetry::TelemetryError::AlreadySet(_) => errors::failed_precondition(format!(
            "{e}; configure_tracing can be called once per process, before other code \
             installs a tracing subscriber"
        )),
        e => errors::invalid_argument(format!("{e} (configure_tracing(otlp_endpoint=...))")),
    })?;
    let exports = telemetry.exports();
    *INSTALLED.lock().unwrap_or_else(|p| p.into_inner()) = Some(telemetry);
    Ok(exports)
}

/// Exports the spans ended so far now (export goes on).
#[pyfunction]
pub fn flush_tracing(py: Python<'_>) {
    py.detach(|| {
        if let Some(t) = INSTALLED.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            t.flush();
        }
    })
}

/// Exports the spans still queued and stops export (registered with `atexit`
/// by `sluice.configure_tracing`).
#[pyfunction]
pub fn shutdown_tracing(py: Python<'_>) {
    py.detach(|| {
        let taken = INSTALLED.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = taken {
            t.shutdown();
        }
    })
}
