//! `sluice._native`: the Rust core of the `sluice` Python package.
//!
//! A thin binding: the Python package (`python/sluice/`) holds the API users see
//! (tf.data service's names, the framework adapters, fork handling); this module
//! exposes the Rust client and servers to it and converts elements to numpy
//! arrays without copying. It re-implements nothing of the protocol.
//!
//! - `runtime` — one tokio runtime per process, and what a fork does to it.
//! - `blocking` — waiting with the interpreter released, Ctrl-C checked.
//! - `client` — `Client` (register, read) and `Reader` (an iteration's elements).
//! - `elements` — elements as numpy arrays over the received bytes.
//! - `servers` — `DispatchServer`, `WorkerServer`, `start_quorum`.
//! - `positions` — `merge_positions`, `position_info`: exactly-once positions as bytes.
//! - `metrics` — `serve_metrics`, `metrics_text`: the client's Prometheus metrics.
//! - `security` — the TLS and token keywords as the crates' settings.
//! - `errors` — Rust errors as `sluice.errors` exceptions.
//! - `telemetry` — `configure_tracing`: logs and OTLP trace export of the core.
//! - `admin` — `add_dispatcher`, `remove_dispatcher` (membership changes).
//! - `bench` — the Rust client's figure for `python -m sluice.bench`.

use pyo3::prelude::*;

mod admin;
mod bench;
mod blocking;
mod client;
mod elements;
mod errors;
mod limits;
mod metrics;
mod positions;
mod runtime;
mod security;
mod servers;
mod telemetry;

/// The binary's allocator in the module too: it keeps freed message buffers for
/// reuse (docs/performance.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Parses a JSON dataset spec with Sluice's parser and returns its canonical
/// JSON (what the dispatcher stores). Raises `InvalidArgumentError` naming the
/// field of a malformed spec.
#[pyfunction]
fn canonical_spec(spec_json: &str) -> PyResult<String> {
    Ok(client::parse_spec(spec_json)?.to_json())
}

/// "debug" or "release": how this module was built (benchmarks warn on debug).
#[pyfunction]
fn build_profile() -> &'static str {
    if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<client::Client>()?;
    m.add_class::<client::Reader>()?;
    m.add_class::<elements::TensorData>()?;
    m.add_class::<servers::DispatchServer>()?;
    m.add_class::<servers::WorkerServer>()?;
    m.add_class::<servers::PythonPool>()?;
    m.add_function(wrap_pyfunction!(servers::start_quorum, m)?)?;
    m.add_class::<metrics::MetricsServer>()?;
    m.add_function(wrap_pyfunction!(metrics::serve_metrics, m)?)?;
    m.add_function(wrap_pyfunction!(metrics::metrics_text, m)?)?;
    m.add_function(wrap_pyfunction!(canonical_spec, m)?)?;
    m.add_function(wrap_pyfunction!(positions::merge_positions, m)?)?;
    m.add_function(wrap_pyfunction!(positions::position_info, m)?)?;
    m.add_function(wrap_pyfunction!(admin::add_dispatcher, m)?)?;
    m.add_function(wrap_pyfunction!(admin::remove_dispatcher, m)?)?;
    m.add_function(wrap_pyfunction!(bench::rust_read, m)?)?;
    m.add_function(wrap_pyfunction!(build_profile, m)?)?;
    m.add_function(wrap_pyfunction!(telemetry::configure_tracing, m)?)?;
    m.add_function(wrap_pyfunction!(telemetry::flush_tracing, m)?)?;
    m.add_function(wrap_pyfunction!(telemetry::shutdown_tracing, m)?)?;
    Ok(())
}
