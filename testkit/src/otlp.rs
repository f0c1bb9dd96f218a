//! [`OtlpCollector`]: a stand-in for an OpenTelemetry collector, for tests of
//! trace export. It serves `opentelemetry.proto.collector.trace.v1.TraceService/
//! Export` over gRPC on 127.0.0.1 (the OTLP/gRPC protocol a real collector or
//! Jaeger's port 4317 speaks) and keeps every span it is sent, flattened into
//! [`CollectedSpan`]s, for the test to look at.
//!
//! It runs on a thread of its own (its own Tokio runtime), so blocking tests and
//! async ones use it alike, and stops when dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;

/// One span as received, with ids in lower-case hex.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CollectedSpan {
    /// The `service.name` of the process that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// Attribute values as text (numbers and booleans formatted, arrays as `[..]`).
    pub attributes: BTreeMap<String, String>,
}

impl CollectedSpan {
    pub fn attr(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }

    /// One JSON object (what the `otlp-collector` binary prints per span).
    pub fn to_json(&self) -> String {
        serde_json::json!({
            "service": self.service,
            "name": self.name,
            "trace_id": self.trace_id,
            "span_id": self.span_id,
            "parent_span_id": self.parent_span_id,
            "attributes": self.attributes,
        })
        .to_string()
    }
}

type Sink = Arc<dyn Fn(&CollectedSpan) + Send + Sync>;

struct Recorder {
    spans: Arc<Mutex<Vec<CollectedSpan>>>,
    on_span: Option<Sink>,
}

#[tonic::async_trait]
impl TraceService for Recorder {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let mut got = vec![];
        for rs in request.into_inner().resource_spans {
            let resource = rs.resource.map(|r| attributes(&r.attributes)).unwrap_or_default();
            let service = resource.get("service.name").cloned().unwrap_or_default();
            for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                got.push(CollectedSpan {
                    service: service.clone(),
                    name: span.name,
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    attributes: attributes(&span.attributes),
                });
            }
        }
        if let Some(sink) = &self.on_span {
            got.iter().for_each(|s| sink(s));
        }
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).extend(got);
        Ok(tonic::Response::new(ExportTraceServiceResponse { partial_success: None }))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn attributes(kvs: &[KeyValue]) -> BTreeMap<String, String> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().and_then(|v| v.value.as_ref()).map_or_else(String::new, text),
            )
        })
        .collect()
}

fn text(v: &Value) -> String {
    match v {
        Value::StringValue(s) => s.clone(),
        Value::BoolValue(b) => b.to_string(),
        Value::IntValue(i) => i.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        Value::BytesValue(b) => hex(b),
        Value::ArrayValue(a) => {
            let items: Vec<String> =
                a.values.iter().filter_map(|v| v.value.as_ref()).map(text).collect();
            format!("[{}]", items.join(","))
        }
        other => format!("{other:?}"),
    }
}

/// A running collector stand-in; stops when dropped.
pub struct OtlpCollector {
    address: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<CollectedSpan>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl OtlpCollector {
    /// Starts one on 127.0.0.1 on a free port.
    pub fn start() -> std::io::Result<OtlpCollector> {
        Self::start_with(None)
    }

    /// [`OtlpCollector::start`], calling `on_span` for each span as it arrives.
    pub fn start_with(on_span: Option<Sink>) -> std::io::Result<OtlpCollector> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?;
        let spans = Arc::new(Mutex::new(Vec::new()));
        let recorder = Recorder { spans: spans.clone(), on_span };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        let thread =
            std::thread::Builder::new().name("otlp-collector".into()).spawn(move || {
                runtime.block_on(async move {
                    let listener = match tokio::net::TcpListener::from_std(listener) {
                        Ok(l) => l,
                        Err(e) => return eprintln!("otlp collector: {e}"),
                    };
                    let incoming = tonic::transport::server::TcpIncoming::from(listener);
                    let served = tonic::transport::Server::builder()
                        .add_service(TraceServiceServer::new(recorder))
                        .serve_with_incoming_shutdown(incoming, async {
                            let _ = stopped.await;
                        })
                        .await;
                    if let Err(e) = served {
                        eprintln!("otlp collector: {e}");
                    }
                })
            })?;
        Ok(OtlpCollector { address, spans, stop: Some(stop), thread: Some(thread) })
    }

    /// `http://127.0.0.1:PORT`, what `--otlp-endpoint` takes.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<CollectedSpan> {
        self.spans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until `done(spans so far)` holds, up to `deadline`; the spans then,
    /// or `Err` with the spans received when the deadline passed.
    pub fn wait_for(
        &self,
        deadline: Duration,
        done: impl Fn(&[CollectedSpan]) -> bool,
    ) -> Result<Vec<CollectedSpan>, Vec<CollectedSpan>> {
        let until = std::time::Instant::now() + deadline;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return Ok(spans);
            }
            if std::time::Instant::now() >= until {
                return Err(spans);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
