use std::sync::Arc;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use tokio::net::TcpListener;

use super::*;

fn http() -> reqwest::Client {
    // reqwest is built without a default TLS provider; plain HTTP still needs one set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

fn sample_registry() -> (Arc<Registry>, Counter, Gauge) {
    let mut r = registry();
    let requests = Counter::default();
    let open = Gauge::default();
    r.register("requests", "Requests served", requests.clone());
    r.register("streams_open", "Streams open now", open.clone());
    (Arc::new(r), requests, open)
}

#[tokio::test]
async fn get_metrics_answers_openmetrics_text_that_parses_and_moves_with_the_counters() {
    let (registry, requests, open) = sample_registry();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = spawn(listener, registry).unwrap();
    let url = format!("http://{}/metrics", server.address());
    let http = http();

    let scrape = || async {
        let resp = http.get(&url).send().await.expect("scrape");
        assert_eq!(resp.status(), 200);
        let ct = resp.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().to_string();
        assert_eq!(ct, CONTENT_TYPE);
        parse(&resp.text().await.unwrap()).expect("the exposition parses")
    };
    let s = scrape().await;
    assert_eq!(value(&s, "sluice_requests_total", &[]), Some(0.0));
    assert_eq!(value(&s, "sluice_streams_open", &[]), Some(0.0));

    requests.inc_by(3);
    open.set(2);
    let s = scrape().await;
    assert_eq!(value(&s, "sluice_requests_total", &[]), Some(3.0));
    assert_eq!(value(&s, "sluice_streams_open", &[]), Some(2.0));
}

#[tokio::test]
async fn other_paths_are_404_and_other_methods_405() {
    let (registry, _, _) = sample_registry();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = spawn(listener, registry).unwrap();
    let base = format!("http://{}", server.address());
    let http = http();
    let resp = http.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(resp.status(), 404);
    let resp = http.post(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 405);
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let (registry, _, _) = sample_registry();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = spawn(listener, registry).unwrap();
    let url = format!("http://{}/metrics", server.address());
    drop(server);
    // The abort lands at the task's next poll; the listener is closed with it.
    let http = http();
    let start = std::time::Instant::now();
    while http.get(&url).send().await.is_ok() {
        assert!(start.elapsed() < Duration::from_secs(10), "still serving after drop");
        tokio::task::yield_now().await;
    }
}

#[test]
fn parse_reads_labels_and_rejects_what_is_not_exposition() {
    let text = "# HELP sluice_x X.\n# TYPE sluice_x counter\nsluice_x_total{kind=\"a\"} 2\n\
                sluice_x_total{kind=\"b\"} 3\n# EOF\n";
    let s = parse(text).unwrap();
    assert_eq!(value(&s, "sluice_x_total", &[]), Some(5.0));
    assert_eq!(value(&s, "sluice_x_total", &[("kind", "b")]), Some(3.0));
    assert_eq!(value(&s, "sluice_x_total", &[("kind", "c")]), None);

    assert!(parse("# HELP a A\n# TYPE a gauge\na 1\n").is_err(), "no # EOF");
    assert!(parse("a 1\n# EOF\n").is_err(), "undeclared family");
    assert!(parse("# TYPE a gauge\na 1\n# EOF\n").is_err(), "no HELP");
    assert!(parse("# HELP a A\n# TYPE a gauge\na x\n# EOF\n").is_err(), "not a number");
    assert!(parse("# HELP a A\n# TYPE a gauge\na{k=v} 1\n# EOF\n").is_err(), "unquoted");
}

#[test]
fn a_histogram_parses_into_its_bucket_sum_and_count_samples() {
    let mut r = registry();
    let h = latency_histogram();
    r.register("wait_seconds", "Waits", h.clone());
    h.observe(0.003);
    h.observe(0.2);
    let s = parse(&encode(&r)).expect("a histogram's exposition parses");
    assert_eq!(value(&s, "sluice_wait_seconds_count", &[]), Some(2.0));
    assert!((value(&s, "sluice_wait_seconds_sum", &[]).unwrap() - 0.203).abs() < 1e-9);
    assert_eq!(value(&s, "sluice_wait_seconds_bucket", &[("le", "0.005")]), Some(1.0));
    assert_eq!(value(&s, "sluice_wait_seconds_bucket", &[("le", "+Inf")]), Some(2.0));
    assert!(parse("# HELP a A\n# TYPE a gauge\nb_sum 1\n# EOF\n").is_err(), "undeclared b");
}
