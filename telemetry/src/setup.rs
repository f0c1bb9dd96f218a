//! [`Telemetry::init`]: the process's `tracing` subscriber.
//!
//! Two layers, each with its own filter:
//! - log lines on stderr, text or JSON ([`LogFormat`]), filtered by `SLUICE_LOG`
//!   (an `EnvFilter`) or the role's default level;
//! - when [`OtlpSettings`] are given, OpenTelemetry: Sluice's spans (down to
//!   DEBUG, which is where the per-task and per-stream spans are) and events at
//!   INFO and above (WARN and above from other crates) go to a batch processor
//!   whose queue is bounded (spans are dropped, not buffered without end, when
//!   the collector is slow or away) and which exports them over OTLP/gRPC.
//!
//! Without an endpoint nothing of OpenTelemetry is built: no layer, no thread,
//! no channel, and propagation stays off.

use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::{Level, Metadata};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use crate::error::TelemetryError;

/// The standard variable OpenTelemetry SDKs read for the collector's address;
/// used when no endpoint is given explicitly.
pub const OTEL_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";

/// Spans waiting for export, at most; more are dropped (and counted by the SDK).
pub const MAX_QUEUED_SPANS: usize = 4096;
/// Spans per export call, at most.
pub const MAX_EXPORT_BATCH: usize = 512;
/// How often the batch processor exports what it has.
pub const EXPORT_DELAY: Duration = Duration::from_millis(500);
/// How long one export call may take before it is abandoned.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// How log lines look on stderr.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines (`tracing_subscriber`'s default format).
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `fields` (with
    /// `message`), `span` (the current span's name and fields) and `spans` (every
    /// enclosing span, outermost first).
    Json,
}

/// Where and as what to export spans.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtlpSettings {
    /// The collector's OTLP/gRPC address, `http://HOST:PORT` (4317 by convention).
    pub endpoint: String,
    /// `service.name` of this process's spans (e.g. `sluice-dispatcher`).
    pub service_name: String,
}

impl OtlpSettings {
    /// `endpoint` if given, else `OTEL_EXPORTER_OTLP_ENDPOINT` if set and not
    /// empty; `None` when neither (export off).
    pub fn from_endpoint_or_env(
        endpoint: Option<&str>,
        service_name: impl Into<String>,
    ) -> Option<OtlpSettings> {
        let from_env = std::env::var(OTEL_ENDPOINT_ENV).ok();
        let endpoint = endpoint.map(str::to_string).or(from_env)?;
        let endpoint = endpoint.trim().to_string();
        (!endpoint.is_empty()).then(|| OtlpSettings { endpoint, service_name: service_name.into() })
    }

    fn check(&self) -> Result<(), TelemetryError> {
        let bad = |reason: &str| TelemetryError::Endpoint {
            endpoint: self.endpoint.clone(),
            reason: reason.to_string(),
        };
        let rest = match self.endpoint.split_once("://") {
            Some(("http", rest)) => rest,
            Some(("https", _)) => {
                return Err(bad(
                    "https is not supported by this build's exporter; send to a collector on \
                     the same host or network over http://HOST:4317",
                ))
            }
            _ => {
                return Err(bad("give the collector's OTLP/gRPC address as http://HOST:PORT \
                     (e.g. http://127.0.0.1:4317)"))
            }
        };
        let authority = rest.split('/').next().unwrap_or("");
        let port = authority.rsplit_once(':').map(|(_, p)| p);
        if authority.is_empty() || port.is_some_and(|p| p.parse::<u16>().is_err()) {
            return Err(bad("no HOST[:PORT] after http:// (e.g. http://127.0.0.1:4317)"));
        }
        Ok(())
    }
}

/// What [`Telemetry::init`] sets up.
#[derive(Clone, Debug)]
pub struct Settings {
    pub format: LogFormat,
    /// The log filter when `SLUICE_LOG` is unset (an `EnvFilter` directive).
    pub default_filter: String,
    /// Export spans here; `None`: no export.
    pub otlp: Option<OtlpSettings>,
}

/// The installed subscriber's exporter, to flush at the end. Dropping it flushes
/// too.
#[derive(Debug)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Installs the process-wide subscriber. With OTLP settings it must be called
    /// inside a Tokio runtime (the exporter's channel is spawned on it) that
    /// outlives [`Telemetry::shutdown`]. Fails if a subscriber is already set.
    pub fn init(settings: &Settings) -> Result<Telemetry, TelemetryError> {
        let filter = EnvFilter::try_from_env("SLUICE_LOG")
            .unwrap_or_else(|_| EnvFilter::new(&settings.default_filter));
        let provider = settings.otlp.as_ref().map(provider).transpose()?;
        let otel = provider.as_ref().map(|p| {
            tracing_opentelemetry::layer()
                .with_tracer(p.tracer("sluice"))
                .with_threads(false)
                .with_filter(tracing_subscriber::filter::filter_fn(exported))
        });
        tracing_subscriber::registry()
            .with(log_layer(settings.format).with_filter(filter))
            .with(otel)
            .try_init()
            .map_err(|e| TelemetryError::AlreadySet(e.to_string()))?;
        if provider.is_some() {
            crate::propagation::activate();
        }
        Ok(Telemetry { provider })
    }

    /// Whether spans are exported.
    pub fn exports(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports the spans queued so far (blocks until done or the export timeout);
    /// export goes on afterwards. Call it outside the runtime's worker threads.
    pub fn flush(&self) {
        if let Some(p) = &self.provider {
            if let Err(e) = p.force_flush() {
                tracing::warn!(error = %e, "exporting spans failed");
            }
        }
    }

    /// Exports the spans still queued and stops the exporter (blocks until done
    /// or the export timeout). Call it outside the runtime's worker threads.
    pub fn shutdown(mut self) {
        self.flush_and_stop();
    }

    fn flush_and_stop(&mut self) {
        if let Some(p) = self.provider.take() {
            if let Err(e) = p.shutdown() {
                eprintln!("warning: exporting the last spans failed: {e}");
            }
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.flush_and_stop();
    }
}

type BoxedLayer = Box<dyn Layer<tracing_subscriber::Registry> + Send + Sync>;

fn log_layer(format: LogFormat) -> BoxedLayer {
    use std::io::IsTerminal;
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Text => layer.with_ansi(std::io::stderr().is_terminal()).boxed(),
        LogFormat::Json => {
            layer.json().with_current_span(true).with_span_list(true).flatten_event(false).boxed()
        }
    }
}

/// What goes to OpenTelemetry: Sluice's spans down to DEBUG (per task and per
/// stream, never per element), events of INFO and above from Sluice and of WARN
/// and above from anything else.
fn exported(meta: &Metadata<'_>) -> bool {
    let ours = meta.target().starts_with("sluice");
    if meta.is_span() {
        ours && *meta.level() <= Level::DEBUG
    } else {
        *meta.level() <= Level::WARN || (ours && *meta.level() <= Level::INFO)
    }
}

fn provider(otlp: &OtlpSettings) -> Result<SdkTracerProvider, TelemetryError> {
    otlp.check()?;
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(otlp.endpoint.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
    let batch = BatchConfigBuilder::default()
        .with_max_queue_size(MAX_QUEUED_SPANS)
        .with_max_export_batch_size(MAX_EXPORT_BATCH)
        .with_scheduled_delay(EXPORT_DELAY)
        .build();
    let processor = BatchSpanProcessor::builder(exporter).with_batch_config(batch).build();
    let resource = Resource::builder().with_service_name(otlp.service_name.clone()).build();
    Ok(SdkTracerProvider::builder().with_span_processor(processor).with_resource(resource).build())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(endpoint: &str) -> OtlpSettings {
        OtlpSettings { endpoint: endpoint.into(), service_name: "t".into() }
    }

    #[test]
    fn an_endpoint_must_be_http_host_port() {
        settings("http://127.0.0.1:4317").check().unwrap();
        settings("http://collector").check().unwrap();
        let e = settings("127.0.0.1:4317").check().unwrap_err().to_string();
        assert!(e.contains("http://HOST:PORT"), "{e}");
        let e = settings("https://c:4317").check().unwrap_err().to_string();
        assert!(e.contains("https is not supported"), "{e}");
        let e = settings("http://c:notaport").check().unwrap_err().to_string();
        assert!(e.contains("no HOST[:PORT]"), "{e}");
        assert!(settings("http://").check().is_err());
    }

    #[test]
    fn only_sluice_spans_and_important_events_are_exported() {
        use tracing::callsite::Identifier;
        use tracing::metadata::Kind;
        struct Cs;
        impl tracing::Callsite for Cs {
            fn set_interest(&self, _: tracing::subscriber::Interest) {}
            fn metadata(&self) -> &Metadata<'_> {
                unreachable!()
            }
        }
        static CS: Cs = Cs;
        let meta = |target: &'static str, level: Level, kind: Kind| {
            Metadata::new(
                "m",
                target,
                level,
                None,
                None,
                None,
                tracing::field::FieldSet::new(&[], Identifier(&CS)),
                kind,
            )
        };
        assert!(exported(&meta("sluice_worker::task", Level::DEBUG, Kind::SPAN)));
        assert!(!exported(&meta("sluice_worker::task", Level::TRACE, Kind::SPAN)));
        assert!(!exported(&meta("h2::proto", Level::INFO, Kind::SPAN)));
        assert!(exported(&meta("sluice_dispatcher", Level::INFO, Kind::EVENT)));
        assert!(!exported(&meta("sluice_dispatcher", Level::DEBUG, Kind::EVENT)));
        assert!(exported(&meta("openraft::core", Level::WARN, Kind::EVENT)));
        assert!(!exported(&meta("openraft::core", Level::INFO, Kind::EVENT)));
    }
}
