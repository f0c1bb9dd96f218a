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

/// A route table for the tests: `/` answers a page, `/big` one over the bound.
struct TwoPages;

impl Routes for TwoPages {
    fn page(&self, path: &str) -> Option<Page> {
        match path {
            "/" => Some(Page::html("<p>hello</p>".into())),
            "/big" => Some(Page::html("x".repeat(MAX_PAGE_BYTES + 1))),
            _ => None,
        }
    }
}

#[tokio::test]
async fn routes_answer_their_pages_beside_metrics_which_they_cannot_shadow() {
    let (registry, _, _) = sample_registry();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let server = spawn_with_routes(listener, registry, Access::open(), Arc::new(TwoPages)).unwrap();
    let base = format!("http://{}", server.address());
    let http = http();

    let resp = http.get(format!("{base}/?refresh=1")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let ct = resp.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap().to_string();
    assert_eq!(ct, "text/html; charset=utf-8");
    assert_eq!(resp.headers()[reqwest::header::CACHE_CONTROL], "no-store");
    assert_eq!(resp.text().await.unwrap(), "<p>hello</p>");

    let resp = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    parse(&resp.text().await.unwrap()).expect("/metrics is still the registry's");

    assert_eq!(http.get(format!("{base}/nope")).send().await.unwrap().status(), 404);
    assert_eq!(http.post(format!("{base}/")).send().await.unwrap().status(), 405);
    assert_eq!(http.get(format!("{base}/big")).send().await.unwrap().status(), 500);
}

/// A CA and a certificate it signs for 127.0.0.1, as PEM: (ca, cert, key).
fn test_pki() -> (String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair, SanType};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    leaf.subject_alt_names.push(SanType::IpAddress([127, 0, 0, 1].into()));
    let key = KeyPair::generate().unwrap();
    let cert = leaf.signed_by(&key, &ca).unwrap();
    (ca.pem(), cert.pem(), key.serialize_pem())
}

#[tokio::test]
async fn with_tls_and_tokens_only_a_metrics_token_over_tls_may_scrape() {
    const SCRAPER: &str = "metrics-secret-0123456789abcdef";
    const TRAINER: &str = "client-secret-0123456789abcdef";
    let (ca, cert, key) = test_pki();
    let tls = sluice_security::TlsSettings::from_pem(Some((cert.into(), key.into())), None);
    let tokens = sluice_security::TokenSet::parse(&format!(
        "metrics prometheus {SCRAPER}\nclient trainer {TRAINER}\n"
    ))
    .unwrap();
    let access = Access::new(Some(&tls), Some(tokens)).unwrap();
    let (registry, requests, _) = sample_registry();
    requests.inc_by(7);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    // The pages beside /metrics are behind the same TLS and token.
    let server = spawn_with_routes(listener, registry, access, Arc::new(TwoPages)).unwrap();
    let addr = server.address();

    // Plain HTTP gets no answer from a TLS listener.
    assert!(http().get(format!("http://{addr}/metrics")).send().await.is_err());

    let _ = rustls::crypto::ring::default_provider().install_default();
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .build()
        .unwrap();
    let url = format!("https://{addr}/metrics");
    let resp = https.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    assert_eq!(resp.headers()[reqwest::header::WWW_AUTHENTICATE], "Bearer");
    assert!(resp.text().await.unwrap().contains("`metrics` bearer token"));

    let resp = https.get(&url).bearer_auth("wrong-secret-000000000000000").send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = https.get(&url).bearer_auth(TRAINER).send().await.unwrap();
    assert_eq!(resp.status(), 403);
    let body = resp.text().await.unwrap();
    assert!(body.contains("`trainer` has role `client`") && !body.contains(TRAINER), "{body}");

    let resp = https.get(&url).bearer_auth(SCRAPER).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let s = parse(&resp.text().await.unwrap()).unwrap();
    assert_eq!(value(&s, "sluice_requests_total", &[]), Some(7.0));
    let page = format!("https://{addr}/");
    assert_eq!(https.get(&page).send().await.unwrap().status(), 401, "a page without a token");
    assert_eq!(https.get(&page).bearer_auth(TRAINER).send().await.unwrap().status(), 403);
    let resp = https.get(&page).bearer_auth(SCRAPER).send().await.unwrap();
    assert_eq!(resp.text().await.unwrap(), "<p>hello</p>");
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
