//! The OTLP collector stand-in as a process, for the Python tests
//! (python/tests): prints `listening on http://127.0.0.1:PORT`, then one JSON line
//! per span received (`CollectedSpan::to_json`), and stops at the end of its
//! stdin (so it never outlives the test that holds the pipe).

use std::io::{Read, Write};
use std::sync::Arc;

use sluice_testkit::OtlpCollector;

fn main() -> std::io::Result<()> {
    let print = Arc::new(|span: &sluice_testkit::CollectedSpan| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{}", span.to_json());
        let _ = out.flush();
    });
    let collector = OtlpCollector::start_with(Some(print))?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "listening on {}", collector.endpoint())?;
        out.flush()?;
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(collector);
    Ok(())
}
