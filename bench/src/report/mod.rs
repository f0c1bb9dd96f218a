//! The figures of one run ([`Report`]), rendered as one table for stdout
//! (`sections`: one function per section, in the table's order) and as JSON.
//!
//! The report only gathers: each row type is defined by the module that measures
//! it (`streaming`, `epoch`, `splits`, `failover`, `gap`, `rss`, `restart`,
//! `files`), and [`Latency`]/[`Outcome`] by `measure`.

use serde::Serialize;

use crate::epoch::Epoch;
use crate::failover::Failover;
use crate::gap::ElementGap;
use crate::limits::Bandwidth;
use crate::measure::failed_error;
pub use crate::measure::{Latency, Outcome};
use crate::read_failover::ReadFailover;
use crate::restart::Restart;
use crate::rss::IdleRss;
use crate::rss_specs::SpecRss;
use crate::splits::SplitCase;
use crate::streaming::StreamCase;

mod sections;

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
    /// Dispatcher RSS per byte of the dataset definitions it holds (sled, memory).
    pub rss_specs: Outcome<Vec<SpecRss>>,
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
    pub python: Outcome<crate::python::Python>,
    pub compression: Outcome<crate::compression::CompressionBench>,
    pub exactly_once: Outcome<crate::exactly_once::ExactlyOnceBench>,
    pub parquet: Outcome<crate::formats::FormatRows>,
    pub webdataset: Outcome<crate::formats::FormatRows>,
    pub jpeg: Outcome<crate::formats::Jpeg>,
    pub scale: Outcome<crate::scale::ScaleBench>,
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
        failed("python", failed_error(&self.python));
        failed("compression", failed_error(&self.compression));
        failed("exactly-once", failed_error(&self.exactly_once));
        failed("parquet", failed_error(&self.parquet));
        failed("webdataset", failed_error(&self.webdataset));
        failed("jpeg", failed_error(&self.jpeg));
        for case in self.scale.measured().into_iter().flat_map(|s| &s.cases) {
            failed("scale", failed_error(case));
        }
        let checkpoints = self.exactly_once.measured().map(|e| &e.checkpoints);
        failed("exactly-once positions", checkpoints.and_then(failed_error));
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

    /// The table printed on stdout.
    pub fn render(&self) -> String {
        use sections::*;
        let order: [fn(&Report, &mut Lines); 17] = [
            header,
            limits,
            streaming,
            epoch,
            splits,
            failover,
            gap,
            rss,
            restart,
            files,
            python,
            compression,
            exactly_once,
            parquet,
            webdataset,
            jpeg,
            scale,
        ];
        let mut out = Lines::default();
        for (i, section) in order.into_iter().enumerate() {
            if i > 0 {
                out.line(String::new());
            }
            section(self, &mut out);
        }
        out.0
    }
}

/// Names of the rows of `Report::streaming`, in order.
pub const STREAM_ROWS: [&str; 2] = ["streaming, int64 scalars", "streaming, 1 MiB elements"];
