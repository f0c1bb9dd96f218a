//! The scale section of the table: per size, the setup, per-operation latencies,
//! the dispatchers' CPU and the leader's memory per worker, job and task, the
//! snapshots, and where the size broke.

use crate::measure::{ms, Outcome};

use super::ops::OpFigures;
use super::types::{ScaleBench, ScaleCase};

pub fn render(s: &Outcome<ScaleBench>, out: &mut dyn FnMut(String)) {
    let s = match s {
        Outcome::Measured(s) => s,
        Outcome::Skipped { reason } => return out(format!("SCALE  skipped ({reason})")),
        Outcome::Failed { error } => return out(format!("SCALE  FAILED: {error}")),
    };
    out(format!(
        "SCALE  (3 nodes, sled, processes; N simulated workers + M consumers in the bench \
         process, N = M; {} consumers per job, each job one iteration with a task on every \
         worker; workers heartbeat every {} ms (held), one GetSplit per worker every {} ms; \
         consumers long-poll {} ms; {} connections each side; snapshot every {} entries; \
         steady window {:.0} s)",
        s.consumers_per_job,
        s.worker_heartbeat_ms,
        s.split_interval_ms,
        s.client_long_poll_ms,
        s.channels,
        s.snapshot_every,
        s.steady_secs
    ));
    for case in &s.cases {
        match case {
            Outcome::Measured(c) => render_case(c, out),
            Outcome::Skipped { reason } => out(format!("  skipped: {reason}")),
            Outcome::Failed { error } => out(format!("  FAILED (where it broke): {error}")),
        }
    }
}

fn render_case(c: &ScaleCase, out: &mut dyn FnMut(String)) {
    out(format!(
        "  N={} workers, M={} consumers, {} jobs, {} tasks: registered in {:.1} s, joined and \
         tasks handed out in {:.1} s",
        c.workers, c.consumers, c.jobs, c.tasks, c.register_s, c.join_s
    ));
    out(format!(
        "    {:<42} {:>9} {:>10} {:>10} {:>7}",
        "operation", "count", "p50", "p99", "errors"
    ));
    for (when, ops) in [("setup", &c.setup_ops), ("steady", &c.steady_ops)] {
        for o in ops.iter() {
            out(op_line(when, o));
        }
    }
    let events: Vec<String> = c.steady_events.iter().map(|(e, n)| format!("{e:?} {n}")).collect();
    out(format!("    steady events: {}", events.join(", ")));
    let cpu = |v: &[f64]| v.iter().map(|x| format!("{x:.0}")).collect::<Vec<_>>().join(" / ");
    out(format!(
        "    CPU-ms/s (leader / followers): workers only {}; steady {}; the simulator {:.0}",
        cpu(&c.cpu_a_ms_per_s),
        cpu(&c.cpu_b_ms_per_s),
        c.simulator_ms_per_s
    ));
    out(format!(
        "    leader CPU-ms per second: {:.3} per worker, {:.3} per consumer (with its job's grants)",
        c.leader_ms_per_worker_s, c.leader_ms_per_consumer_s
    ));
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    out(format!(
        "    leader RSS: {:.0} MiB idle, {:.0} after registration, {:.0} after joining: \
         {:.1} KiB per worker, {:.1} KiB per job (+iteration, {} tasks), {:.0} B per task",
        mib(c.rss[0]),
        mib(c.rss[1]),
        mib(c.rss[2]),
        c.rss_per_worker / 1024.0,
        c.rss_per_job / 1024.0,
        c.workers,
        c.rss_per_task
    ));
    match c.snapshots.last() {
        Some(last) => out(format!(
            "    snapshots: {} taken; the last {:.1} MiB, state lock held {}, encoded in {}, \
             saved in {}",
            c.snapshots.len(),
            last.bytes as f64 / (1 << 20) as f64,
            ms(last.lock_ms),
            ms(last.encode_ms),
            ms(last.total_ms)
        )),
        None => out("    snapshots: none taken in this run".into()),
    }
    out(format!(
        "    log entries in the run: {} (Raft term {} → {})",
        c.log_entries, c.term[0], c.term[1]
    ));
    if c.broke.is_empty() {
        out("    broke: nothing (no failed call, no p99 over 1 s, no worker lost)".into());
    } else {
        for b in &c.broke {
            out(format!("    broke: {b}"));
        }
    }
}

fn op_line(when: &str, o: &OpFigures) -> String {
    let (p50, p99) = match o.latency {
        Some(l) => (ms(l.median_ms), ms(l.p99_ms)),
        None => ("-".into(), "-".into()),
    };
    let name = format!("{when}: {}", o.name);
    format!("    {name:<42} {:>9} {p50:>10} {p99:>10} {:>7}", o.count, o.errors)
}
