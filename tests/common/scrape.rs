//! Scraping a real process's `GET /metrics`, strictly parsed
//! (`sluice_metrics::parse`), for the metrics tests.

use sluice_metrics::{parse, Sample};

/// The body of GET http://ADDR/metrics after checking status and content type;
/// `None` while the endpoint does not answer.
pub async fn scrape_text(addr: &str) -> Option<String> {
    // reqwest is built without a default TLS provider; plain HTTP still needs one set.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let resp = reqwest::get(format!("http://{addr}/metrics")).await.ok()?;
    assert_eq!(resp.status(), 200, "GET /metrics");
    let content_type = resp.headers()[reqwest::header::CONTENT_TYPE].to_str().unwrap();
    assert_eq!(content_type, sluice_metrics::CONTENT_TYPE);
    Some(resp.text().await.expect("the scrape's body"))
}

/// GET http://ADDR/metrics, parsed; `None` while the endpoint does not answer.
pub async fn scrape(addr: &str) -> Option<Vec<Sample>> {
    let text = scrape_text(addr).await?;
    Some(parse(&text).unwrap_or_else(|e| panic!("the exposition parses: {e}\n{text}")))
}

/// Scrapes until `cond` holds; returns that scrape. Panics after `super::DEADLINE`.
pub async fn scrape_until(addr: &str, what: &str, cond: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let start = std::time::Instant::now();
    loop {
        match scrape(addr).await {
            Some(s) if cond(&s) => return s,
            last => assert!(
                start.elapsed() < super::DEADLINE,
                "timed out waiting for {what}; last scrape: {last:?}"
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
