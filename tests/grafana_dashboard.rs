//! `deploy/grafana/sluice.json` against real processes: every `sluice_*` metric a
//! panel's PromQL names must be exported by a running dispatcher, worker or
//! reader (`sluice read --metrics-addr`), under the name Prometheus stores it
//! (`_total` on counters, `_bucket`/`_sum`/`_count` on histograms); every panel
//! has a title and a datasource, and the datasource is the dashboard's variable.

mod common;

use std::collections::{BTreeMap, BTreeSet};

use common::scrape::{scrape_text, scrape_until};
use common::Port;
use serde_json::Value;
use sluice_dataset::DatasetDef;
use sluice_metrics::value;

const DASHBOARD: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/grafana/sluice.json");

/// Every panel, rows' nested panels included.
fn panels(dashboard: &Value) -> Vec<&Value> {
    let mut out = Vec::new();
    let mut stack: Vec<&Value> =
        dashboard["panels"].as_array().expect("a panels list").iter().collect();
    while let Some(p) = stack.pop() {
        if let Some(nested) = p["panels"].as_array() {
            stack.extend(nested);
        }
        out.push(p);
    }
    out
}

/// Whether `c` may be part of a PromQL identifier.
fn ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == ':'
}

/// `expr` without what names labels rather than metrics: label matchers
/// (`{...}`) and the lists after `by`, `without`, `on`, `ignoring`,
/// `group_left` and `group_right`; quoted strings go too.
fn without_label_names(expr: &str) -> String {
    const GROUPING: [&str; 6] = ["by", "without", "on", "ignoring", "group_left", "group_right"];
    let mut out = String::new();
    let mut chars = expr.chars().peekable();
    let mut word = String::new();
    let mut skip_list = false;
    while let Some(c) = chars.next() {
        match c {
            '{' => {
                for c in chars.by_ref() {
                    if c == '}' {
                        break;
                    }
                }
                out.push(' ');
            }
            '"' => {
                for c in chars.by_ref() {
                    if c == '"' {
                        break;
                    }
                }
                out.push(' ');
            }
            '(' if skip_list => {
                for c in chars.by_ref() {
                    if c == ')' {
                        break;
                    }
                }
                skip_list = false;
                out.push(' ');
            }
            c if ident(c) => {
                word.push(c);
                out.push(c);
            }
            c => {
                if !word.is_empty() {
                    skip_list = GROUPING.contains(&word.as_str());
                    word.clear();
                } else if !c.is_whitespace() {
                    skip_list = false;
                }
                out.push(c);
            }
        }
    }
    out
}

/// The `sluice_*` metric names `expr` reads.
fn metric_names(expr: &str) -> BTreeSet<String> {
    without_label_names(expr)
        .split(|c: char| !ident(c))
        .filter(|w| w.starts_with("sluice_"))
        .map(str::to_string)
        .collect()
}

/// The family a stored series name belongs to and the type that suffix needs.
fn family_of(name: &str) -> (&str, &str) {
    for (suffix, kind) in [
        ("_bucket", "histogram"),
        ("_sum", "histogram"),
        ("_count", "histogram"),
        ("_total", "counter"),
    ] {
        if let Some(family) = name.strip_suffix(suffix) {
            return (family, kind);
        }
    }
    (name, "gauge")
}

/// `# TYPE name kind` lines of an exposition.
fn types(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, k)| (n.to_string(), k.to_string()))
        .collect()
}

#[test]
fn label_names_and_strings_are_not_taken_for_metric_names() {
    let expr = "histogram_quantile(0.99, sum by (sluice_job, le) (rate(\
                sluice_a_bucket{sluice_job=~\"$sluice_job\"}[5m]))) / ignoring (instance) \
                sluice_b and on (instance) (sluice_c == 1)";
    let names: Vec<String> = metric_names(expr).into_iter().collect();
    assert_eq!(names, ["sluice_a_bucket", "sluice_b", "sluice_c"]);
    assert_eq!(family_of("sluice_a_bucket"), ("sluice_a", "histogram"));
    assert_eq!(family_of("sluice_x_total"), ("sluice_x", "counter"));
    assert_eq!(family_of("sluice_raft_term"), ("sluice_raft_term", "gauge"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_metric_of_the_dashboard_is_exported_by_a_running_process() {
    let text = std::fs::read_to_string(DASHBOARD).expect("deploy/grafana/sluice.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let variables = dashboard["templating"]["list"].as_array().expect("templating variables");
    let datasource_var = variables
        .iter()
        .find(|v| v["type"] == "datasource" && v["query"] == "prometheus")
        .and_then(|v| v["name"].as_str())
        .expect("a Prometheus datasource variable");
    let datasource_ref = format!("${{{datasource_var}}}");

    let mut wanted: BTreeMap<String, String> = BTreeMap::new(); // name → panel
    for p in panels(&dashboard) {
        let title = p["title"].as_str().unwrap_or("");
        assert!(!title.trim().is_empty(), "a panel without a title: {p}");
        assert_eq!(p["datasource"]["uid"], *datasource_ref, "panel {title:?}: its datasource");
        for t in p["targets"].as_array().into_iter().flatten() {
            assert_eq!(t["datasource"]["uid"], *datasource_ref, "panel {title:?}: a target");
            let expr = t["expr"].as_str().unwrap_or_else(|| panic!("{title:?}: a target's expr"));
            for name in metric_names(expr) {
                wanted.insert(name, title.to_string());
            }
        }
    }
    for v in variables {
        if let Some(q) = v["definition"].as_str() {
            // `label_values(SERIES, LABEL)`: only SERIES names metrics.
            let q = q
                .strip_prefix("label_values(")
                .and_then(|args| args.rsplit_once(','))
                .map_or(q, |(series, _label)| series);
            for name in metric_names(q) {
                wanted.insert(name, format!("variable {}", v["name"]));
            }
        }
    }
    assert!(wanted.len() >= 15, "the dashboard's metrics: {wanted:?}");

    // A dispatcher, a worker and a reader process, each serving its metrics.
    let ports: Vec<Port> = (0..3).map(|_| Port::reserve().expect("a port")).collect();
    let [daddr, waddr, raddr] = [0, 1, 2].map(|i| ports[i].address());
    let work = tempfile::tempdir().unwrap();
    let dispatcher = common::server(&[
        "dispatcher",
        "--port",
        "0",
        "--work-dir",
        work.path().to_str().unwrap(),
        "--metrics-addr",
        &daddr,
    ]);
    let d = dispatcher.address().to_string();
    let _worker = common::server(&[
        "worker",
        "--dispatcher",
        &d,
        "--port",
        "0",
        "--buffer",
        "8",
        "--metrics-addr",
        &waddr,
    ]);
    let spec = work.path().join("spec.json");
    std::fs::write(&spec, DatasetDef::range(1000).repeat_forever().to_json()).unwrap();
    let read_args = [
        "read",
        "--dispatcher",
        &d,
        "--spec",
        spec.to_str().unwrap(),
        "--mode",
        "dynamic",
        "--job-name",
        "dashboard",
        "--quiet",
        "--metrics-addr",
        &raddr,
    ];
    let _reader = common::sluice().spawn(&read_args);
    // The reader is reading (an infinite dataset: it runs until killed at the end).
    let job = [("sluice_job", "dashboard")];
    scrape_until(&raddr, "the reader's first 200 elements", |s| {
        value(s, "sluice_client_elements_total", &job).is_some_and(|n| n >= 200.0)
    })
    .await;
    scrape_until(&waddr, "the worker's per-job series", |s| {
        value(s, "sluice_worker_buffer_elements", &job).is_some()
            && value(s, "sluice_worker_elements_delivered_total", &job).is_some()
    })
    .await;
    scrape_until(&daddr, "the dispatcher's split grants", |s| {
        value(s, "sluice_split_grants_total", &[]).is_some_and(|n| n > 0.0)
    })
    .await;

    let mut exported: BTreeSet<String> = BTreeSet::new();
    let mut kinds: BTreeMap<String, String> = BTreeMap::new();
    for addr in [&daddr, &waddr, &raddr] {
        let text = scrape_text(addr).await.expect("a scrape");
        let samples = sluice_metrics::parse(&text).expect("the exposition parses");
        exported.extend(samples.into_iter().map(|s| s.name));
        kinds.extend(types(&text));
    }
    let mut missing = Vec::new();
    for (name, panel) in &wanted {
        let (family, kind) = family_of(name);
        let exported_kind = kinds.get(family).or_else(|| kinds.get(name.as_str()));
        if !exported.contains(name) || exported_kind.map(String::as_str) != Some(kind) {
            missing.push(format!(
                "{name} (panel {panel:?}; family {family} of type {kind}, exported as \
                 {exported_kind:?})"
            ));
        }
    }
    assert!(missing.is_empty(), "the dashboard reads metrics no process exports: {missing:#?}");
}
