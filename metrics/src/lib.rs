//! Sluice's Prometheus exposition, shared by the dispatcher and the worker.
//!
//! # Layout
//! ```text
//!  role's metrics.rs ──builds──► Registry (counters + a scrape-time Collector)
//!                                   │
//!  GET /metrics ──► serve (hyper HTTP/1.1) ──► encode ──► OpenMetrics text
//! ```
//! - [`serve`] / [`spawn`]: `GET /metrics` on a bound listener, with an injectable
//!   shutdown; everything else is 404 (405 for a method other than GET/HEAD).
//!   Connections are bounded ([`MAX_CONNECTIONS`]) and a client has
//!   [`HEADER_READ_TIMEOUT`] to send its request head.
//! - [`serve_with_routes`] / [`spawn_with_routes`]: the same, also answering
//!   `GET` on other paths from a [`Routes`] the role passes in (`routes.rs`; the
//!   dispatcher's status page), under the same [`Access`]. `/metrics` is always
//!   the registry's.
//! - [`encode`]: the registry as OpenMetrics text.
//! - [`Access`] (`access.rs`): TLS with the server's certificate and a `metrics`
//!   bearer token, when the server has them, so the listener may be off loopback.
//! - [`parse`]: a strict reader of that text (names, labels, values, `# EOF`), for
//!   tests and tools that check a scrape.
//! - [`labels`]: bounded label values (a job label cannot grow without end) and
//!   the latency buckets the histograms share.
//!
//! Every metric name starts with `sluice_` (the registries are made with
//! [`registry`]); counters end in `_total` (added by the encoder).
//!
//! Soft state: counters count from this process's start; a scraper sees a restart
//! as a counter reset, which Prometheus' `rate()` handles.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE as CONTENT_TYPE_HEADER};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};

mod access;
mod routes;

pub use access::Access;
pub mod labels;

pub use labels::{latency_histogram, BoundedLabel, LATENCY_BUCKETS};
pub use prometheus_client;
use prometheus_client::registry::Registry;
pub use routes::{NoRoutes, Page, Routes, MAX_PAGE_BYTES};

/// The content type of [`encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Connections served at once; an accept beyond that waits for one to close.
pub const MAX_CONNECTIONS: usize = 32;

/// How long a connection may take to send a request head before it is closed.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// A registry whose metric names all start with `sluice_`.
pub fn registry() -> Registry {
    Registry::with_prefix("sluice")
}

/// The registry as OpenMetrics text (ends with `# EOF`).
pub fn encode(registry: &Registry) -> String {
    let mut out = String::new();
    // Writing into a String fails only if a metric's own encoding does; say so
    // in the scrape rather than answer half a page.
    if let Err(e) = prometheus_client::encoding::text::encode(&mut out, registry) {
        tracing::warn!(error = %e, "encoding metrics failed");
        return format!("# encoding metrics failed: {e}\n# EOF\n");
    }
    out
}

fn respond(
    registry: &Registry,
    access: &Access,
    routes: &dyn Routes,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    // Every path is behind the same TLS and token: the pages too.
    if let Some(refusal) = access.refusal(req) {
        return refusal;
    }
    if req.uri().path() != "/metrics" {
        return routes::respond(routes, req.method(), req.uri().path());
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return routes::method_not_allowed("use GET /metrics\n");
    }
    let mut r = Response::new(Full::new(Bytes::from(encode(registry))));
    r.headers_mut().insert(CONTENT_TYPE_HEADER, HeaderValue::from_static(CONTENT_TYPE));
    r
}

/// Serves `GET /metrics` from `registry` on `listener` until `shutdown` resolves;
/// connections still open then are closed (a scrape is short and retried by the
/// scraper, so nothing waits for them).
pub async fn serve(
    listener: TcpListener,
    registry: Arc<Registry>,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_access(listener, registry, Access::open(), shutdown).await
}

/// [`serve`] under `access`: TLS and a `metrics` token when it has them.
pub async fn serve_with_access(
    listener: TcpListener,
    registry: Arc<Registry>,
    access: Access,
    shutdown: impl Future<Output = ()>,
) {
    serve_with_routes(listener, registry, access, Arc::new(NoRoutes), shutdown).await
}

/// [`serve_with_access`], also answering `GET` on other paths from `routes`
/// (`routes.rs`).
pub async fn serve_with_routes(
    listener: TcpListener,
    registry: Arc<Registry>,
    access: Access,
    routes: Arc<dyn Routes>,
    shutdown: impl Future<Output = ()>,
) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    // Dropping the set (when this future ends or is dropped) aborts the connections.
    let mut connections = JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            accepted = async {
                // Never closed, so acquiring cannot fail.
                let permit = slots.clone().acquire_owned().await.ok();
                (permit, listener.accept().await)
            } => accepted,
        };
        let (permit, stream) = match accepted {
            (permit, Ok((stream, _peer))) => (permit, stream),
            (_, Err(e)) => {
                // E.g. out of file descriptors: back off instead of spinning.
                tracing::warn!(error = %e, "metrics: accept failed");
                tokio::select! {
                    _ = &mut shutdown => return,
                    _ = tokio::time::sleep(Duration::from_millis(100)) => continue,
                }
            }
        };
        let (registry, routes) = (registry.clone(), routes.clone());
        let access = access.clone();
        connections.spawn(async move {
            let _permit = permit;
            let acceptor = access.acceptor().cloned();
            let service = service_fn(move |req| {
                let r = respond(&registry, &access, &*routes, &req);
                async move { Ok::<_, Infallible>(r) }
            });
            let Some(acceptor) = acceptor else {
                return serve_connection(stream, service).await;
            };
            // The handshake gets the same time limit as a request head.
            match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
                Ok(Ok(tls)) => serve_connection(tls, service).await,
                Ok(Err(e)) => tracing::debug!(error = %e, "metrics: TLS handshake failed"),
                Err(_) => tracing::debug!("metrics: TLS handshake timed out"),
            }
        });
    }
}

/// One HTTP/1.1 connection over `io` (plain or TLS).
async fn serve_connection<I, S>(io: I, service: S)
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::HttpService<Incoming, ResBody = Full<Bytes>>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let served = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(io), service)
        .await;
    if let Err(e) = served {
        tracing::debug!(error = %e, "metrics: connection ended with an error");
    }
}

/// A metrics endpoint running on the current runtime; stops when dropped.
pub struct MetricsServer {
    address: SocketAddr,
    task: JoinHandle<()>,
}

/// Spawns [`serve`] on the current runtime.
pub fn spawn(listener: TcpListener, registry: Arc<Registry>) -> std::io::Result<MetricsServer> {
    spawn_with_access(listener, registry, Access::open())
}

/// [`spawn`] under `access`.
pub fn spawn_with_access(
    listener: TcpListener,
    registry: Arc<Registry>,
    access: Access,
) -> std::io::Result<MetricsServer> {
    spawn_with_routes(listener, registry, access, Arc::new(NoRoutes))
}

/// Spawns [`serve_with_routes`] on the current runtime.
pub fn spawn_with_routes(
    listener: TcpListener,
    registry: Arc<Registry>,
    access: Access,
    routes: Arc<dyn Routes>,
) -> std::io::Result<MetricsServer> {
    let address = listener.local_addr()?;
    let scheme = if access.uses_tls() { "https" } else { "http" };
    tracing::info!(%address, tokens = access.checks_tokens(), "metrics served at {scheme}://{address}/metrics");
    let shutdown = std::future::pending();
    let task = tokio::spawn(serve_with_routes(listener, registry, access, routes, shutdown));
    Ok(MetricsServer { address, task })
}

impl MetricsServer {
    pub fn address(&self) -> SocketAddr {
        self.address
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One sample of a scrape: `name{labels} value`.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Reads OpenMetrics text as [`encode`] writes it, strictly: every sample belongs
/// to a family announced by `# TYPE` and `# HELP` lines, label values are quoted,
/// values are numbers, and the text ends with `# EOF`.
pub fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let mut families: BTreeMap<String, (bool, bool)> = BTreeMap::new();
    let mut samples = Vec::new();
    let mut eof = false;
    for (n, line) in text.lines().enumerate() {
        let at = |m: &str| format!("line {}: {m}: {line:?}", n + 1);
        if eof {
            return Err(at("text after # EOF"));
        }
        if line == "# EOF" {
            eof = true;
            continue;
        }
        if let Some(meta) = line.strip_prefix("# ") {
            let mut parts = meta.splitn(3, ' ');
            let (kind, name) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
            let entry = families.entry(name.to_string()).or_default();
            match kind {
                "TYPE" => entry.0 = true,
                "HELP" => entry.1 = true,
                "UNIT" => {}
                _ => return Err(at("unknown comment")),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').ok_or_else(|| at("no value"))?;
        let value: f64 = value.parse().map_err(|_| at("value is not a number"))?;
        let (name, labels) = match series.split_once('{') {
            None => (series, BTreeMap::new()),
            Some((name, rest)) => {
                let body = rest.strip_suffix('}').ok_or_else(|| at("unclosed labels"))?;
                let mut labels = BTreeMap::new();
                for pair in body.split(',').filter(|p| !p.is_empty()) {
                    let (k, v) = pair.split_once('=').ok_or_else(|| at("label without ="))?;
                    let v = v
                        .strip_prefix('"')
                        .and_then(|v| v.strip_suffix('"'))
                        .ok_or_else(|| at("unquoted label value"))?;
                    labels.insert(k.to_string(), v.to_string());
                }
                (name, labels)
            }
        };
        let valid = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
        if name.is_empty() || !name.chars().all(valid) {
            return Err(at("bad metric name"));
        }
        let family =
            family_of(name, &families).ok_or_else(|| at("sample of an undeclared family"))?;
        if families[family] != (true, true) {
            return Err(at("family without both # TYPE and # HELP"));
        }
        samples.push(Sample { name: name.to_string(), labels, value });
    }
    if !eof {
        return Err("no # EOF at the end".into());
    }
    Ok(samples)
}

/// The family a sample belongs to: its own name, or its name without the suffix
/// a counter (`_total`) or histogram (`_bucket`, `_sum`, `_count`, `_created`)
/// sample carries.
fn family_of<'a>(name: &'a str, families: &BTreeMap<String, (bool, bool)>) -> Option<&'a str> {
    const SUFFIXES: [&str; 5] = ["_total", "_bucket", "_sum", "_count", "_created"];
    std::iter::once(name)
        .chain(SUFFIXES.iter().filter_map(|s| name.strip_suffix(s)))
        .find(|f| families.contains_key(*f))
}

/// The value of the sample `name` whose labels include `labels` (the sum, if
/// several match); `None` if none does.
pub fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| labels.iter().all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v)))
        .map(|s| s.value)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

#[cfg(test)]
mod tests;
