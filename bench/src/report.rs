//! The figures of one run ([`Report`]), rendered as one table for stdout and as JSON.

use std::time::Duration;

use serde::Serialize;

use crate::driver::{ExactlyOnce, RunSummary};
use crate::epoch::Epoch;
use crate::gap::ElementGap;
use crate::limits::Bandwidth;
use crate::read_failover::ReadFailover;
use crate::rss::IdleRss;
use crate::streaming::StreamCase;

/// Median, p99 and max of a set of durations, in milliseconds.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Latency {
    pub samples: usize,
    pub median_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Latency {
    pub fn of(mut v: Vec<Duration>) -> Option<Latency> {
        if v.is_empty() {
            return None;
        }
        v.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let at = |q: f64| ms(v[((v.len() - 1) as f64 * q).round() as usize]);
        Some(Latency { samples: v.len(), median_ms: at(0.5), p99_ms: at(0.99), max_ms: at(1.0) })
    }

    fn show(&self) -> String {
        format!("median {}  p99 {}", ms(self.median_ms), ms(self.p99_ms))
    }
}

/// A section's result: measured, skipped (loudly, with the reason), or failed.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome<T> {
    Measured(T),
    Skipped { reason: String },
    Failed { error: String },
}

impl<T> Outcome<T> {
    pub fn from_result(r: anyhow::Result<T>) -> Outcome<T> {
        match r {
            Ok(v) => Outcome::Measured(v),
            Err(e) => Outcome::Failed { error: format!("{e:#}") },
        }
    }

    pub fn measured(&self) -> Option<&T> {
        match self {
            Outcome::Measured(v) => Some(v),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub date_utc: String,
    pub nproc: usize,
    pub cpu: String,
    pub kernel: String,
    /// Load averages (1, 5, 15 min) when the run started and when it ended.
    pub load_start: String,
    pub load_end: String,
    /// `release` or `debug` (debug figures are not representative).
    pub build: String,
    /// Where the work dirs and the fsync file go, and its filesystem.
    pub bench_dir: String,
    pub bench_dir_fs: String,
    pub workers: usize,
    pub elements: u64,
    pub budget_s: f64,
    /// `--snapshot-every`; `None`: each dispatcher's default for its work_dir.
    pub snapshot_every: Option<u64>,
}

/// One row of the get-split table.
#[derive(Clone, Debug, Serialize)]
pub struct SplitCase {
    pub name: String,
    pub journal: String,
    pub run: RunSummary,
    /// The physical limit this case's commits wait on ("fsync" or "S3 PUT"), if any.
    pub limit: Option<String>,
    /// splits/s × the limit's median latency: splits committed per fsync (or PUT).
    pub splits_per_limit: Option<f64>,
    /// splits/s × the median latency of one journal append of one entry (sled) or
    /// one PUT (S3): about 1 means one append per split, no group commit.
    pub splits_per_append: Option<f64>,
    pub exactly_once: ExactlyOnce,
}

#[derive(Clone, Debug, Serialize)]
pub struct Failover {
    pub killed_node: u64,
    pub new_leader: Option<u64>,
    pub killed_after_s: f64,
    /// From the SIGKILL until a surviving node reported itself leader (polled).
    pub new_leader_after_ms: Option<f64>,
    /// From the SIGKILL to the first split answered to a request sent after it.
    pub first_split_after_kill_ms: Option<f64>,
    /// Splits requested before the kill whose answers arrived after it (sent by the
    /// old leader before it died, or retried on the new one).
    pub in_flight_after_kill: u64,
    /// The longest gap between consecutive answered splits in the whole run.
    pub longest_gap_ms: f64,
    pub splits_after_kill: u64,
    pub run: RunSummary,
    pub retry_policy: String,
    pub exactly_once: ExactlyOnce,
}

#[derive(Clone, Debug, Serialize)]
pub struct Restart {
    pub splits_requested: u64,
    pub fill: RunSummary,
    /// False when the fill hit `--restart-timeout-secs` before handing out them all.
    pub fill_complete: bool,
    pub journal_bytes_on_disk: u64,
    pub journal_bytes_apparent: u64,
    pub last_log_index: Option<u64>,
    pub snapshot_index: Option<u64>,
    pub listening_ms: f64,
    pub first_split_ms: f64,
    pub next_split_begin: u64,
    pub handed_out_before_kill: u64,
    pub exactly_once: ExactlyOnce,
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub machine: Machine,
    /// Loopback TCP bandwidth (own socket test): one stream, and as many streams
    /// at once as the streaming case has workers (its limit); memcpy bandwidth.
    pub loopback: Outcome<Bandwidth>,
    pub loopback_streams: Outcome<Bandwidth>,
    pub memcpy: Outcome<Bandwidth>,
    /// OFF mode through 2 worker processes: int64 scalars, then 1 MiB elements.
    pub streaming: Vec<Outcome<StreamCase>>,
    /// Last element → end of stream, OFF and DYNAMIC.
    pub epoch: Outcome<Epoch>,
    /// Leader SIGKILL under a DYNAMIC reader: the longest gap in arrivals.
    pub gap: Outcome<ElementGap>,
    /// Leader SIGKILL + restart cycles under a `sluice read` process: the stalls.
    pub gap_read: Outcome<ReadFailover>,
    pub rss: Outcome<IdleRss>,
    pub fsync: Outcome<Latency>,
    /// The sled journal's `append` of 1 entry, and of `workers` entries (one batch).
    pub sled_append_1: Outcome<Latency>,
    pub sled_append_batch: Outcome<Latency>,
    pub s3_put: Outcome<Latency>,
    pub splits: Vec<Outcome<SplitCase>>,
    /// Names of the rows of `splits`, in order (also for skipped and failed rows).
    pub split_rows: Vec<String>,
    pub failover: Outcome<Failover>,
    pub restart: Outcome<Restart>,
    pub files: Outcome<crate::files::Files>,
}

impl Report {
    /// What went wrong, for the exit status: failed sections and exactly-once violations.
    pub fn problems(&self) -> Vec<String> {
        let mut out = vec![];
        let mut failed = |name: &str, error: Option<&String>| {
            if let Some(e) = error {
                out.push(format!("{name}: {e}"));
            }
        };
        failed("loopback bandwidth", failed_error(&self.loopback));
        failed("loopback bandwidth, streams at once", failed_error(&self.loopback_streams));
        failed("memcpy bandwidth", failed_error(&self.memcpy));
        for (name, row) in STREAM_ROWS.iter().zip(&self.streaming) {
            failed(name, failed_error(row));
        }
        failed("end of epoch", failed_error(&self.epoch));
        failed("element gap", failed_error(&self.gap));
        failed("element gap, `sluice read`", failed_error(&self.gap_read));
        failed("idle RSS", failed_error(&self.rss));
        failed("fsync", failed_error(&self.fsync));
        failed("sled append", failed_error(&self.sled_append_1));
        failed("sled append (batch)", failed_error(&self.sled_append_batch));
        failed("S3 PUT", failed_error(&self.s3_put));
        for (name, row) in self.split_rows.iter().zip(&self.splits) {
            failed(name, failed_error(row));
        }
        failed("failover", failed_error(&self.failover));
        failed("restart", failed_error(&self.restart));
        failed("files", failed_error(&self.files));
        let checks = self
            .splits
            .iter()
            .filter_map(|r| r.measured().map(|c| (c.name.clone(), &c.exactly_once)))
            .chain(self.failover.measured().map(|f| ("failover".to_string(), &f.exactly_once)))
            .chain(self.restart.measured().map(|r| ("restart".to_string(), &r.exactly_once)));
        for (name, check) in checks {
            if !check.is_ok() {
                out.push(format!("{name}: exactly-once {}", check.describe()));
            }
        }
        for c in self.streaming.iter().filter_map(Outcome::measured) {
            if !c.ok() {
                out.push(format!("streaming {}: exactly-once {}", c.name, c.exactly_once));
            }
        }
        for c in self.epoch.measured().into_iter().flat_map(|e| &e.cases) {
            if !c.ok() {
                out.push(format!(
                    "end of epoch {}: runs delivered {:?} elements, not {} each",
                    c.mode, c.elements, c.expected
                ));
            }
        }
        if let Some(g) = self.gap.measured() {
            if !g.ok() {
                out.push(format!("element gap: exactly-once {}", g.exactly_once));
            }
        }
        if let Some(r) = self.restart.measured() {
            if r.next_split_begin != r.handed_out_before_kill {
                out.push(format!(
                    "restart: the first split after the restart began at {}, not at {}",
                    r.next_split_begin, r.handed_out_before_kill
                ));
            }
        }
        out
    }

    pub fn render(&self) -> String {
        let m = &self.machine;
        let mut o = String::new();
        let mut line = |s: String| {
            o.push_str(&s);
            o.push('\n');
        };
        line(format!("sluice bench  {}  ({} build)", m.date_utc, m.build));
        line(format!("machine: {} cores, {}, Linux {}", m.nproc, m.cpu, m.kernel));
        line(format!("load average: {} at the start, {} at the end", m.load_start, m.load_end));
        line(format!("bench dir: {} ({})", m.bench_dir, m.bench_dir_fs));
        line(match m.snapshot_every {
            Some(n) => format!("snapshots: every {n} log entries"),
            None => "snapshots: the dispatcher's default (every 10000 log entries on sled and \
                     in memory, 1000 on S3)"
                .into(),
        });
        line(String::new());
        line("PHYSICAL LIMITS".into());
        line(format!(
            "  {:<44} {}",
            "loopback TCP (1 sender, 1 receiver, 1 MiB)",
            show_bandwidth(&self.loopback)
        ));
        line(format!(
            "  {:<44} {}",
            format!("loopback TCP ({} streams at once, 1 MiB)", crate::streaming::WORKERS),
            show_bandwidth(&self.loopback_streams)
        ));
        line(format!(
            "  {:<44} {}",
            "memcpy (64 MiB buffer, 1 thread)",
            show_bandwidth(&self.memcpy)
        ));
        let limits = [
            ("fsync (append 4 KiB + sync_all)".to_string(), &self.fsync),
            ("sled journal append, 1 entry of 128 B".to_string(), &self.sled_append_1),
            (
                format!("sled journal append, {} entries at once", m.workers),
                &self.sled_append_batch,
            ),
            ("S3 PUT (4 KiB, create-if-absent, moto)".to_string(), &self.s3_put),
        ];
        for (what, latency) in limits {
            line(format!("  {what:<44} {}", show_latency(latency)));
        }
        line(String::new());
        self.render_streaming(&mut line);
        line(String::new());
        line(format!(
            "COMMITTED GET-SPLIT RATE  (elements_per_split = 1, range({}), DYNAMIC, {} lanes, {} s budget)",
            m.elements, m.workers, m.budget_s
        ));
        line(format!(
            "  {:<30} {:>8} {:>9} {:>26}   {:<16} {:>11} {:>12}  {}",
            "case",
            "splits",
            "splits/s",
            "call latency",
            "limit",
            "splits/lim",
            "splits/appnd",
            "exactly-once"
        ));
        for (name, row) in self.split_rows.iter().zip(&self.splits) {
            match row {
                Outcome::Measured(c) => line(format!(
                    "  {:<30} {:>8} {:>9.0} {:>26}   {:<16} {:>11} {:>12}  {}",
                    c.name,
                    c.run.splits,
                    c.run.splits_per_s,
                    c.run.call.map(|l| l.show()).unwrap_or_else(|| "-".into()),
                    match (&c.limit, c.journal.as_str()) {
                        (Some(limit), _) => limit.clone(),
                        (None, "memory://") => "none (memory)".into(),
                        (None, _) => "not measured".into(),
                    },
                    c.splits_per_limit.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                    c.splits_per_append.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into()),
                    c.exactly_once.describe()
                )),
                other => line(format!("  {name:<30} {}", not_measured(other))),
            }
        }
        for c in self.splits.iter().filter_map(Outcome::measured) {
            if !c.run.errors.is_empty() {
                line(format!("  {}: errors: {}", c.name, c.run.errors.join("; ")));
            }
        }
        line(String::new());
        line("LEADER FAILOVER  (3 nodes, sled, processes; SIGKILL the leader under load)".into());
        match &self.failover {
            Outcome::Measured(f) => {
                let opt = |v: Option<f64>| v.map(ms).unwrap_or_else(|| "none".into());
                line(format!(
                    "  killed leader node {} after {:.1} s; new leader: {}, reported {} after the kill",
                    f.killed_node,
                    f.killed_after_s,
                    f.new_leader.map(|l| format!("node {l}")).unwrap_or_else(|| "none".into()),
                    opt(f.new_leader_after_ms)
                ));
                line(format!(
                    "  kill -> first split answered to a request sent after it: {}   \
                     longest gap between answered splits: {}",
                    opt(f.first_split_after_kill_ms),
                    ms(f.longest_gap_ms)
                ));
                line(format!(
                    "  splits: {} ({} answered after the kill, {} of them requested before it)   \
                     exactly-once across the kill: {}",
                    f.run.splits,
                    f.splits_after_kill,
                    f.in_flight_after_kill,
                    f.exactly_once.describe()
                ));
                line(format!("  lanes retry with {}", f.retry_policy));
            }
            other => line(format!("  {}", not_measured(other))),
        }
        line(String::new());
        self.render_gap(&mut line);
        line(String::new());
        self.render_rss(&mut line);
        line(String::new());
        line(
            "RESTART  (1 node, sled, process; SIGKILL, restart on the same work_dir and port)"
                .into(),
        );
        match &self.restart {
            Outcome::Measured(r) => {
                let done = if r.fill_complete {
                    String::new()
                } else {
                    format!(
                        "  -- ONLY {} OF {} within --restart-timeout-secs",
                        r.fill.splits, r.splits_requested
                    )
                };
                line(format!(
                    "  handed out {} splits in {:.1} s ({:.0} splits/s, call {}){}",
                    r.fill.splits,
                    r.fill.elapsed_s,
                    r.fill.splits_per_s,
                    r.fill.call.map(|l| l.show()).unwrap_or_else(|| "-".into()),
                    done
                ));
                let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
                line(format!(
                    "  journal: {:.1} MiB on disk ({:.1} MiB apparent); last log index {}, snapshot at {}",
                    r.journal_bytes_on_disk as f64 / 1048576.0,
                    r.journal_bytes_apparent as f64 / 1048576.0,
                    opt(r.last_log_index),
                    opt(r.snapshot_index)
                ));
                line(format!(
                    "  spawn -> listening: {}   spawn -> first split answered: {}",
                    ms(r.listening_ms),
                    ms(r.first_split_ms)
                ));
                let cursor =
                    if r.next_split_begin == r.handed_out_before_kill { "ok" } else { "WRONG" };
                line(format!(
                    "  next split began at {} (handed out before the kill: {}): {}   exactly-once: {}",
                    r.next_split_begin,
                    r.handed_out_before_kill,
                    cursor,
                    r.exactly_once.describe()
                ));
            }
            other => line(format!("  {}", not_measured(other))),
        }
        line(String::new());
        match &self.files {
            Outcome::Measured(f) => {
                line(format!(
                    "TFRECORD PIPELINES  ({} files, {} records, {:.1} MB; {}x{} PNG + label per \
                     record; DYNAMIC, a split is a file; worker processes on loopback)",
                    f.files,
                    f.records,
                    f.dataset_bytes as f64 / 1e6,
                    f.image_size,
                    f.image_size
                ));
                line(
                    "  rates from the first element to the last; `1st element` includes job \
                     creation and the workers starting their tasks"
                        .into(),
                );
                line(format!(
                    "  {:<22} {:<20} {:>8} {:>13} {:>8} {:>11} {:>9} {:>9}",
                    "pipeline",
                    "setup",
                    "records",
                    "1st element",
                    "secs",
                    "records/s",
                    "MB/s",
                    "vs local"
                ));
                for c in &f.cases {
                    line(format!(
                        "  {:<22} {:<20} {:>8} {:>13} {:>8.2} {:>11.0} {:>9.1} {:>9}",
                        c.pipeline,
                        c.setup,
                        c.records,
                        ms(c.first_element_s * 1e3),
                        c.secs,
                        c.records_per_s,
                        c.mb_per_s,
                        c.vs_local.map(|v| format!("{v:.2}x")).unwrap_or_else(|| "-".into())
                    ));
                }
            }
            other => line(format!("TFRECORD PIPELINES  {}", not_measured(other))),
        }
        o
    }
}

/// Names of the rows of `Report::streaming`, in order.
pub const STREAM_ROWS: [&str; 2] = ["streaming, int64 scalars", "streaming, 1 MiB elements"];

impl Report {
    fn render_streaming(&self, line: &mut impl FnMut(String)) {
        line(format!(
            "STREAMING  (OFF, {} worker processes, in-memory dispatcher; read one element at a \
             time through the client's ElementStream in the bench process)",
            crate::streaming::WORKERS
        ));
        line(
            "  rates from the first element to the last; CPU = user+system over the read, per \
             element; `x lo`: GB/s over the loopback bandwidth of as many streams at once as \
             workers (one connection each); `x mem`: over memcpy"
                .into(),
        );
        line(format!(
            "  {:<32} {:>9} {:>6} {:>11} {:>7} {:>12} {:>13} {:>6} {:>6}  {}",
            "case",
            "elements",
            "secs",
            "elements/s",
            "GB/s",
            "reader µs/el",
            "workers µs/el",
            "x lo",
            "x mem",
            "exactly-once"
        ));
        let ratio = |gb: f64, limit: &Outcome<Bandwidth>| {
            limit.measured().map(|l| format!("{:.2}", gb / l.gb_per_s)).unwrap_or("-".into())
        };
        for (name, row) in STREAM_ROWS.iter().zip(&self.streaming) {
            match row {
                Outcome::Measured(c) => line(format!(
                    "  {:<32} {:>9} {:>6.2} {:>11.0} {:>7.3} {:>12.2} {:>13.2} {:>6} {:>6}  {}",
                    c.name,
                    c.elements,
                    c.secs,
                    c.elements_per_s,
                    c.gb_per_s,
                    c.reader_cpu_us_per_element,
                    c.workers_cpu_us_per_element,
                    ratio(c.gb_per_s, &self.loopback_streams),
                    ratio(c.gb_per_s, &self.memcpy),
                    c.exactly_once
                )),
                other => line(format!("  {name:<32} {}", not_measured(other))),
            }
        }
        line(String::new());
        line(format!(
            "END OF EPOCH  (last element -> end of stream at the reader; range({}) on the same \
             processes, DYNAMIC 1000 elements per split)",
            crate::epoch::ELEMENTS
        ));
        match &self.epoch {
            Outcome::Measured(epoch) => {
                for c in &epoch.cases {
                    line(format!(
                        "  {:<8} median {}  max {}  ({} runs)  elements per run: {}",
                        c.mode,
                        ms(c.end_after_last.median_ms),
                        ms(c.end_after_last.max_ms),
                        c.runs,
                        if c.ok() { "ok".to_string() } else { format!("WRONG {:?}", c.elements) }
                    ));
                }
            }
            other => line(format!("  {}", not_measured(other))),
        }
    }

    fn render_gap(&self, line: &mut impl FnMut(String)) {
        line(
            "LEADER SIGKILL UNDER A READER  (3 dispatcher processes on sled, 2 worker processes, \
             DYNAMIC reader)"
                .into(),
        );
        match &self.gap {
            Outcome::Measured(g) => {
                line(format!(
                    "  range({}), {} elements per split, workers ask {} splits per request; \
                     {:.0} elements/s over the whole read ({:.2} s)",
                    g.elements,
                    g.elements_per_split,
                    g.worker_splits_per_request,
                    g.elements_per_s,
                    g.secs
                ));
                line(format!(
                    "  killed leader node {} {:.2} s after the first element ({} elements read); \
                     new leader reported {} after the kill",
                    g.killed_node,
                    g.killed_after_s,
                    g.elements_before_kill,
                    g.new_leader_after_ms.map(ms).unwrap_or_else(|| "never".into())
                ));
                line(format!(
                    "  longest gap between element arrivals: {} (began {} {} the kill)   \
                     exactly-once: {}",
                    ms(g.longest_gap_ms),
                    ms(g.longest_gap_began_ms.abs()),
                    if g.longest_gap_began_ms < 0.0 { "before" } else { "after" },
                    g.exactly_once
                ));
            }
            other => line(format!("  {}", not_measured(other))),
        }
        match &self.gap_read {
            Outcome::Measured(r) => r.render(ms).into_iter().for_each(&mut *line),
            other => line(format!("  `sluice read` cycles: {}", not_measured(other))),
        }
    }

    fn render_rss(&self, line: &mut impl FnMut(String)) {
        line("IDLE RSS  (VmRSS; dispatcher in memory, 1 worker)".into());
        match &self.rss {
            Outcome::Measured(r) => {
                let mb = |b: u64| format!("{:.1} MB", b as f64 / 1e6);
                line(format!(
                    "  dispatcher: {} after start, {} after a job   worker: {} after start, {} \
                     after a job   (job: {})",
                    mb(r.dispatcher_after_start),
                    mb(r.dispatcher_after_job),
                    mb(r.worker_after_start),
                    mb(r.worker_after_job),
                    r.job
                ));
            }
            other => line(format!("  {}", not_measured(other))),
        }
    }
}

fn show_bandwidth(o: &Outcome<Bandwidth>) -> String {
    match o {
        Outcome::Measured(b) => {
            format!("{:.2} GB/s  ({:.2} GB in {:.2} s)", b.gb_per_s, b.bytes as f64 / 1e9, b.secs)
        }
        other => not_measured(other),
    }
}

fn failed_error<T>(o: &Outcome<T>) -> Option<&String> {
    match o {
        Outcome::Failed { error } => Some(error),
        _ => None,
    }
}

fn show_latency(o: &Outcome<Latency>) -> String {
    match o {
        Outcome::Measured(l) => format!("{}  ({} samples)", l.show(), l.samples),
        other => not_measured(other),
    }
}

fn not_measured<T>(o: &Outcome<T>) -> String {
    match o {
        Outcome::Measured(_) => String::new(),
        Outcome::Skipped { reason } => format!("skipped: {reason}"),
        Outcome::Failed { error } => format!("FAILED: {error}"),
    }
}

/// Milliseconds with a precision that suits the size.
fn ms(v: f64) -> String {
    if v < 10.0 {
        format!("{v:.2} ms")
    } else if v < 1000.0 {
        format!("{v:.0} ms")
    } else {
        format!("{:.2} s", v / 1000.0)
    }
}
