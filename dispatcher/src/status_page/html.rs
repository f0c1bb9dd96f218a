//! The status page as HTML: one self-contained document (inline CSS, the chart
//! as inline SVG, no script, no external asset) that reloads itself every
//! [`REFRESH_SECS`]. Every string that comes from outside this process (job
//! names, dataset ids, addresses, Python versions) goes through `text::escape`.

use std::fmt::Write;

use super::chart;
use super::text::escape;
use super::view::{JobRow, StatusView, WorkerRow};

/// The page's `<meta http-equiv="refresh">` period.
pub const REFRESH_SECS: u32 = 5;

const STYLE: &str = "body{font:14px/1.4 system-ui,sans-serif;margin:1em;color:#222}\
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}\
table{border-collapse:collapse}th,td{padding:.2em .5em;border-bottom:1px solid #ddd;text-align:left}\
th{background:#f4f4f4;vertical-align:bottom}td{white-space:nowrap}td.wrap{white-space:normal;min-width:8em;max-width:16em;overflow-wrap:anywhere}td.n{text-align:right;font-variant-numeric:tabular-nums}\
.lost{color:#b00020}.muted{color:#777}.axis{font-size:11px;fill:#555}\
.legend{list-style:none;padding:0}.legend li{display:inline-block;margin-right:1.5em}\
.swatch{display:inline-block;width:.9em;height:.9em;margin-right:.3em;vertical-align:middle}";

fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn age(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".into(), |ms| format!("{:.1} s ago", ms as f64 / 1000.0))
}

fn omitted(out: &mut String, n: usize, what: &str) {
    if n > 0 {
        let _ = write!(out, r#"<p class="muted">{n} more {what} not shown.</p>"#);
    }
}

fn workers_table(out: &mut String, rows: &[WorkerRow], id: &str) {
    let _ = write!(
        out,
        r#"<table id="{id}"><tr><th>Address</th><th>State</th><th>Tasks</th><th>Python</th><th>Last heartbeat</th></tr>"#
    );
    for w in rows {
        let class = if w.state == "lost" { r#" class="lost""# } else { "" };
        let _ = write!(
            out,
            r#"<tr{class}><td>{}</td><td>{}</td><td class="n">{}</td><td>{}</td><td>{}</td></tr>"#,
            escape(&w.address),
            w.state,
            w.tasks,
            w.python.as_deref().map_or_else(|| "no".into(), escape),
            age(w.last_heartbeat_ms_ago)
        );
    }
    out.push_str("</table>");
}

fn progress(j: &JobRow) -> String {
    match (j.splits_granted, j.splits_per_epoch) {
        (Some(g), Some(per)) => format!("{g} / {per}"),
        (Some(g), None) => format!("{g} / ?"),
        _ => "-".into(),
    }
}

fn jobs_table(out: &mut String, jobs: &[JobRow]) {
    out.push_str(
        r#"<table id="jobs"><tr><th>Job</th><th>Name</th><th>Dataset</th><th>Mode</th><th>Iterations</th><th>Splits granted / per epoch</th><th>Elements</th><th>Tasks done</th><th>Consumers</th><th>Lost splits / elements / tasks</th><th>State</th></tr>"#,
    );
    for j in jobs {
        let _ = write!(
            out,
            r#"<tr><td class="n">{}</td><td class="wrap job-name">{}</td><td>{}<br><span class="muted">{}</span></td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{}</td><td class="n">{} / {}</td><td class="n">{}</td><td class="n">{} / {} / {}</td><td class="wrap">{}</td></tr>"#,
            j.job_id,
            escape(&j.name),
            escape(&j.dataset_id),
            escape(&j.dataset_summary),
            j.mode,
            j.iterations,
            progress(j),
            opt(j.elements),
            j.finished_tasks,
            j.tasks,
            j.clients,
            j.lost_splits,
            j.lost_elements,
            j.lost_tasks,
            escape(&j.state)
        );
    }
    out.push_str("</table>");
}

/// The whole page.
pub fn page(v: &StatusView) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let _ = write!(
        out,
        r#"<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><meta http-equiv="refresh" content="{REFRESH_SECS}"><title>Sluice dispatcher {}</title><style>{STYLE}</style></head><body>"#,
        v.node_id
    );
    let _ = write!(
        out,
        r#"<h1>Sluice dispatcher, node {}</h1><p class="muted">This node is {}; the tables are its replica{}. Reloads every {REFRESH_SECS} s; <a href="/status.json">JSON</a>, <a href="/metrics">metrics</a>.</p>"#,
        v.node_id,
        escape(&v.role),
        if v.role == "leader" { "" } else { " (a follower's may lag the leader's)" }
    );
    out.push_str(r#"<h2>Quorum</h2><table id="quorum"><tr><th>Node</th><th>Address</th><th>Role (as this node sees it)</th><th>Term</th><th>Applied index</th><th>Last answer</th></tr>"#);
    for n in &v.quorum {
        let this = if n.this_node { " (this node)" } else { "" };
        let class = if n.role.starts_with("unreachable") { r#" class="lost""# } else { "" };
        let _ = write!(
            out,
            r#"<tr{class}><td class="n">{}{this}</td><td>{}</td><td>{}</td><td class="n">{}</td><td class="n">{}</td><td>{}</td></tr>"#,
            n.node_id,
            escape(&n.address),
            escape(&n.role),
            opt(n.term),
            opt(n.applied_index),
            age(n.last_answer_ms_ago)
        );
    }
    out.push_str("</table>");
    let _ = write!(out, "<h2>Workers ({})</h2>", v.workers.len() + v.workers_omitted);
    workers_table(&mut out, &v.workers, "workers");
    omitted(&mut out, v.workers_omitted, "workers");
    let _ = write!(out, "<h2>Lost workers ({})</h2>", v.lost.workers);
    if v.lost_workers.is_empty() {
        out.push_str(r#"<p class="muted">None.</p>"#);
    } else {
        workers_table(&mut out, &v.lost_workers, "lost-workers");
    }
    omitted(&mut out, v.lost_workers_omitted, "lost workers");
    let _ = write!(out, "<h2>Jobs ({})</h2>", v.jobs.len() + v.jobs_omitted);
    jobs_table(&mut out, &v.jobs);
    omitted(&mut out, v.jobs_omitted, "jobs (the oldest)");
    let _ = write!(
        out,
        r#"<h2>Lost work</h2><p id="lost">{} split(s), {} source element(s) and {} task(s) lost with lost or restarted workers, over all jobs.</p>"#,
        v.lost.splits, v.lost.elements, v.lost.tasks
    );
    let t = &v.throughput;
    let _ = write!(
        out,
        r#"<h2>Throughput</h2><p class="muted">Source elements handed out per second in DYNAMIC splits, per job, sampled on this node every {:.0} s ({:.0} s held; history starts when this node starts).</p>"#,
        t.interval_secs, t.span_secs
    );
    if t.jobs.is_empty() {
        out.push_str(r#"<p class="muted">No DYNAMIC job has been sampled yet.</p>"#);
    } else {
        out.push_str(&chart::svg(t));
    }
    omitted(&mut out, t.jobs_omitted, "jobs (not charted)");
    out.push_str("</body></html>\n");
    out
}
