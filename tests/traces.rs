//! Logs and traces (issue 16, docs/operations-traces.md), with real `sluice`
//! processes on loopback: `--log-format json` writes one JSON object a line with
//! the span ids of the handler that logged; `--otlp-endpoint` exports spans to a
//! collector (the OTLP/gRPC stand-in of sluice-testkit), and one read's spans from
//! the reader, the dispatcher and the worker join up into one trace through the
//! `traceparent` each gRPC call carries.

mod common;

use std::collections::HashMap;

use common::{wait_blocking, DEADLINE};
use sluice_testkit::{Child, CollectedSpan, OtlpCollector, Spec, Stderr};

const SPEC: &str = r#"{"stages": [{"range": {"stop": 5}}]}"#;

/// `sluice ARGS` as a server with `SLUICE_LOG=info` and its stderr in `log`.
fn server_logging_to(args: &[&str], log: &std::path::Path) -> Child {
    let spec = Spec::new(common::sluice().exe(), args.iter().copied())
        .envs([("SLUICE_LOG".to_string(), "info,openraft=warn".to_string())])
        .stderr(Stderr::File(log.to_path_buf()));
    Child::start(&spec).unwrap_or_else(|e| panic!("{e}"))
}

/// Every line of `log`, each parsed as JSON (panics naming a line that is not).
fn json_lines(log: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a JSON line ({e}): {l}")))
        .collect()
}

fn message(line: &serde_json::Value) -> &str {
    line["fields"]["message"].as_str().unwrap_or("")
}

#[test]
fn json_logs_are_one_object_a_line_with_the_handlers_span_ids() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("dispatcher.log");
    let d = server_logging_to(&["--log-format", "json", "dispatcher", "--port", "0"], &log);
    let d_address = d.address().to_string();
    let w_log = dir.path().join("worker.log");
    // The variable works as the flag does.
    let spec = Spec::new(common::sluice().exe(), ["worker", "--dispatcher", &d_address])
        .envs([("SLUICE_LOG".into(), "info".into()), ("SLUICE_LOG_FORMAT".into(), "json".into())])
        .stderr(Stderr::File(w_log.clone()));
    let _w = Child::start(&spec).unwrap_or_else(|e| panic!("{e}"));
    let (ok, out, err) =
        common::run_sluice(&["read", "--dispatcher", &d_address, "--spec", "-"], Some(SPEC));
    assert!(ok, "read: {err}");
    assert_eq!(out.lines().count(), 5);

    let mut lines = vec![];
    wait_blocking("the dispatcher's log of the read's iteration", || {
        lines = json_lines(&log);
        lines.iter().any(|l| message(l) == "client joined iteration")
    });
    for line in &lines {
        for key in ["timestamp", "level", "target", "fields"] {
            assert!(line.get(key).is_some(), "no `{key}` in {line}");
        }
    }
    let serving = lines.iter().find(|l| message(l) == "dispatcher serving").expect("startup line");
    assert_eq!(serving["level"], "INFO");
    assert_eq!(serving["target"], "sluice_dispatcher::server");
    assert_eq!(serving["fields"]["address"], d_address.as_str());
    assert_eq!(serving["fields"]["node_id"], 1);
    // Logged inside GetOrCreateIteration's handler: its span and ids come along.
    let joined = lines.iter().find(|l| message(l) == "client joined iteration").unwrap();
    assert_eq!(joined["span"]["name"], "get_or_create_iteration", "{joined}");
    assert!(joined["span"]["job_id"].is_number(), "{joined}");
    assert!(joined["fields"]["iteration_id"].is_number(), "{joined}");
    assert!(joined["spans"].as_array().is_some_and(|s| !s.is_empty()), "{joined}");

    let w_lines = json_lines(&w_log);
    assert!(!w_lines.is_empty(), "the worker logged nothing at info");
}

#[test]
fn a_bad_log_format_or_otlp_endpoint_is_refused_naming_the_flag() {
    let (ok, _, err) = common::run_sluice(&["--log-format", "yaml", "status"], None);
    assert!(!ok);
    assert!(err.contains("'yaml'") && err.contains("text, json"), "{err}");
    let (ok, _, err) = common::run_sluice(&["status", "--otlp-endpoint", "collector:4317"], None);
    assert!(!ok);
    assert!(err.contains("http://HOST:PORT") && err.contains("--otlp-endpoint"), "{err}");
}

/// The spans of `service`.
fn of<'a>(spans: &'a [CollectedSpan], service: &str) -> Vec<&'a CollectedSpan> {
    spans.iter().filter(|s| s.service == service).collect()
}

fn rpc<'a>(spans: &'a [CollectedSpan], service: &str, method: &str) -> Vec<&'a CollectedSpan> {
    of(spans, service).into_iter().filter(|s| s.name.ends_with(method)).collect()
}

#[test]
fn one_reads_spans_from_reader_dispatcher_and_worker_join_up_in_one_trace() {
    let collector = OtlpCollector::start().unwrap();
    let otlp = collector.endpoint();
    let d = common::server(&["dispatcher", "--port", "0", "--otlp-endpoint", &otlp]);
    let d_address = d.address().to_string();
    let w = common::server(&["worker", "--dispatcher", &d_address, "--otlp-endpoint", &otlp]);
    let w_address = w.address().to_string();
    let (ok, out, err) = common::run_sluice(
        &["read", "--dispatcher", &d_address, "--spec", "-", "--otlp-endpoint", &otlp],
        Some(SPEC),
    );
    assert!(ok, "read: {err}");
    assert_eq!(out.lines().count(), 5);

    // The reader flushed its spans before it exited; the servers export theirs
    // every half second.
    let joined_up = |spans: &[CollectedSpan]| {
        let Some(read) = of(spans, "sluice-read").into_iter().find(|s| s.name == "read") else {
            return false;
        };
        let in_trace = |s: &&CollectedSpan| s.trace_id == read.trace_id;
        rpc(spans, "sluice-worker", "/GetElements").iter().any(in_trace)
            && rpc(spans, "sluice-dispatcher", "/GetOrCreateIteration").iter().any(in_trace)
            && rpc(spans, "sluice-dispatcher", "/GetSplit")
                .iter()
                .any(|s| of(spans, "sluice-worker").iter().any(|p| p.span_id == s.parent_span_id))
    };
    let spans = collector.wait_for(DEADLINE, joined_up).unwrap_or_else(|spans| {
        let names: Vec<String> =
            spans.iter().map(|s| format!("{}:{}", s.service, s.name)).collect();
        panic!("the spans did not join up; received: {names:?}")
    });
    let by_id: HashMap<&str, &CollectedSpan> =
        spans.iter().map(|s| (s.span_id.as_str(), s)).collect();
    let parent = |s: &CollectedSpan| by_id.get(s.parent_span_id.as_str()).copied();

    // The reader's span is the trace's root and names the job.
    let read = of(&spans, "sluice-read").into_iter().find(|s| s.name == "read").unwrap();
    assert!(read.parent_span_id.is_empty(), "the read span is a root: {read:?}");
    let job_id = read.attr("job_id").expect("the read span's job_id").to_string();
    assert!(read.attr("iteration_id").is_some() && read.attr("client_id").is_some(), "{read:?}");

    // The dispatcher's RPC span is a child of the reader's span (the call carried
    // its traceparent), and its handler span inside carries the same job id.
    let iteration = rpc(&spans, "sluice-dispatcher", "/GetOrCreateIteration")
        .into_iter()
        .find(|s| s.trace_id == read.trace_id)
        .unwrap();
    assert_eq!(iteration.parent_span_id, read.span_id, "{iteration:?}");
    assert_eq!(iteration.attr("rpc.method"), Some("GetOrCreateIteration"));
    let handler = of(&spans, "sluice-dispatcher")
        .into_iter()
        .find(|s| s.name == "get_or_create_iteration" && s.parent_span_id == iteration.span_id)
        .expect("the handler's span inside the RPC span");
    assert_eq!(handler.attr("job_id"), Some(job_id.as_str()));
    // A write: proposed to Raft in a term.
    let propose = of(&spans, "sluice-dispatcher")
        .into_iter()
        .find(|s| s.name == "propose" && s.parent_span_id == handler.span_id)
        .expect("the Raft proposal's span inside the handler's");
    assert!(propose.attr("term").is_some_and(|t| t.parse::<u64>().unwrap() >= 1), "{propose:?}");

    // The worker's GetElements span: parent is the reader's task span, whose
    // parent is the read span, and it names the worker.
    let get = rpc(&spans, "sluice-worker", "/GetElements")
        .into_iter()
        .find(|s| s.trace_id == read.trace_id)
        .unwrap();
    let task = parent(get).expect("the reader's span the worker's call came from");
    assert_eq!(task.service, "sluice-read");
    assert_eq!(task.name, "task");
    assert_eq!(task.attr("worker"), Some(w_address.as_str()));
    assert_eq!(task.parent_span_id, read.span_id);
    let stream = of(&spans, "sluice-worker")
        .into_iter()
        .find(|s| s.name == "get_elements" && s.parent_span_id == get.span_id)
        .expect("the worker's stream span inside its RPC span");
    assert_eq!(stream.attr("worker"), Some(w_address.as_str()));
    assert_eq!(stream.attr("client_id"), read.attr("client_id"));

    // Worker → dispatcher: GetSplit's span is a child of the worker's task span.
    let split = rpc(&spans, "sluice-dispatcher", "/GetSplit")
        .into_iter()
        .find(|s| of(&spans, "sluice-worker").iter().any(|p| p.span_id == s.parent_span_id))
        .unwrap();
    let worker_task = parent(split).unwrap();
    assert_eq!(worker_task.name, "task", "{worker_task:?}");
    assert_eq!(worker_task.attr("worker"), Some(w_address.as_str()));
    drop((d, w));
}
