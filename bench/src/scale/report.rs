//! The scale section of the table: per size, the setup, per-operation latencies,
//! the dispatchers' CPU and the leader's memory per worker, job and task, the
//! snapshots, and where the size broke.

use crate::measure::{ms, Outcome};

use super::ops::OpFigures;
use super::types::{ScaleBench, ScaleCase};

/// Printed for a per-worker, per-consumer or per-job figure whose phase did not
/// raise the total (a small size, where the difference is below the noise).
const BELOW_NOISE: &str = "(below the noise)";

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
    let leader = |v: &[f64]| v.first().copied().unwrap_or(0.0);
    let consumer_cpu = if leader(&c.cpu_b_ms_per_s) > leader(&c.cpu_a_ms_per_s) {
        format!("{:.3}", c.leader_ms_per_consumer_s)
    } else {
        BELOW_NOISE.to_string()
    };
    out(format!(
        "    leader CPU-ms per second: {:.3} per worker, {consumer_cpu} per consumer (with its \
         job's grants)",
        c.leader_ms_per_worker_s
    ));
    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let grew = |from: u64, to: u64, per: f64, unit: &str| {
        if to <= from {
            BELOW_NOISE.to_string()
        } else if unit == "B" {
            format!("{per:.0} B")
        } else {
            format!("{per:.1} {unit}")
        }
    };
    out(format!(
        "    leader RSS: {:.0} MiB idle, {:.0} after registration, {:.0} after joining: \
         {} per worker, {} per job (+iteration, {} tasks), {} per task",
        mib(c.rss[0]),
        mib(c.rss[1]),
        mib(c.rss[2]),
        grew(c.rss[0], c.rss[1], c.rss_per_worker / 1024.0, "KiB"),
        grew(c.rss[1], c.rss[2], c.rss_per_job / 1024.0, "KiB"),
        c.workers,
        grew(c.rss[1], c.rss[2], c.rss_per_task, "B"),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn case(cpu_a: f64, cpu_b: f64, rss: [u64; 3]) -> ScaleCase {
        ScaleCase {
            workers: 20,
            consumers: 20,
            jobs: 2,
            tasks: 40,
            register_s: 0.0,
            join_s: 0.0,
            setup_ops: vec![],
            steady_ops: vec![],
            steady_events: vec![],
            cpu_a_ms_per_s: vec![cpu_a, 1.0, 1.0],
            cpu_b_ms_per_s: vec![cpu_b, 1.0, 1.0],
            simulator_ms_per_s: 1.0,
            leader_ms_per_worker_s: cpu_a / 20.0,
            leader_ms_per_consumer_s: (cpu_b - cpu_a).max(0.0) / 20.0,
            rss,
            rss_per_worker: rss[1].saturating_sub(rss[0]) as f64 / 20.0,
            rss_per_job: rss[2].saturating_sub(rss[1]) as f64 / 2.0,
            rss_per_task: rss[2].saturating_sub(rss[1]) as f64 / 40.0,
            snapshots: vec![],
            workers_lost: 0,
            term: [1, 1],
            leader: [1, 1],
            log_entries: 0,
            broke: vec![],
        }
    }

    fn lines(c: ScaleCase) -> String {
        let bench = ScaleBench {
            consumers_per_job: 10,
            split_interval_ms: 1000,
            worker_heartbeat_ms: 500,
            client_long_poll_ms: 1000,
            channels: 32,
            snapshot_every: 1000,
            steady_secs: 3.0,
            cases: vec![Outcome::Measured(c)],
        };
        let mut out = vec![];
        render(&Outcome::Measured(bench), &mut |l| out.push(l));
        out.join("\n")
    }

    #[test]
    fn a_figure_whose_phase_raised_nothing_is_below_the_noise_not_zero() {
        // A small size: the steady window used less leader CPU than the workers-only
        // one, and registration did not grow the leader's RSS.
        let text = lines(case(30.0, 23.0, [80 << 20, 79 << 20, 84 << 20]));
        assert!(text.contains("per worker, (below the noise) per consumer"), "{text}");
        assert!(
            text.contains("after joining: (below the noise) per worker, 2560.0 KiB per job"),
            "{text}"
        );
        assert!(!text.contains("0.000 per consumer"), "{text}");
        // A size where both grew prints the figures.
        let text = lines(case(30.0, 50.0, [80 << 20, 82 << 20, 84 << 20]));
        assert!(text.contains("1.000 per consumer"), "{text}");
        assert!(text.contains("102.4 KiB per worker"), "{text}");
    }
}
