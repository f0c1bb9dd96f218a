//! [`Counters`]: what this process counts as it serves (commands proposed and
//! failed by kind, GetSplit requests and the splits granted, the Raft commit and
//! journal write latencies), for the Prometheus endpoint.
//!
//! Its own module so that [`Core`](crate::core::Core), which counts, and
//! `metrics.rs`, which registers them beside the state's gauges and reads `Core`,
//! do not depend on each other. Soft state of this process: the counters start
//! from zero when it restarts, and a follower counts what it was asked, not what
//! the group did.
//!
//! Label sets are bounded: command kinds and failure reasons are fixed lists;
//! nothing is labelled by job, iteration, task or worker.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::time::Duration;

use crate::error::ProposeError;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindLabels {
    /// `Command::name()`: a fixed list.
    kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailedLabels {
    kind: &'static str,
    /// `rejected` (the state machine refused it), `not_leader`, `unavailable`.
    reason: &'static str,
}

/// Counters of this process, shared by `Core` and the handlers (cloning shares
/// them).
#[derive(Clone, Debug)]
pub(crate) struct Counters {
    proposed: Family<KindLabels, Counter>,
    failed: Family<FailedLabels, Counter>,
    get_split_requests: Counter,
    split_grants: Counter,
    split_elements_granted: Counter,
    /// `client_write` → applied, on this node as leader (`batcher::Writer`).
    raft_commit: Histogram,
    /// Commands per log entry this node proposed (`batcher`): group commit at work.
    raft_batch: Histogram,
    /// Durable journal writes (`JournalTiming`).
    journal_fsync: Histogram,
}

impl Default for Counters {
    fn default() -> Self {
        Counters {
            proposed: Family::default(),
            failed: Family::default(),
            get_split_requests: Counter::default(),
            split_grants: Counter::default(),
            split_elements_granted: Counter::default(),
            raft_commit: sluice_metrics::latency_histogram(),
            // 1, 2, 4, … 256 (the batcher's most).
            raft_batch: Histogram::new(prometheus_client::metrics::histogram::exponential_buckets(
                1.0, 2.0, 9,
            )),
            journal_fsync: sluice_metrics::latency_histogram(),
        }
    }
}

/// Feeds the journal's durable-write times into `sluice_journal_fsync_seconds`.
#[derive(Debug)]
pub(crate) struct JournalTiming(Histogram);

impl sluice_journal::WriteObserver for JournalTiming {
    fn durable_write(&self, took: Duration) {
        self.0.observe(took.as_secs_f64());
    }
}

impl Counters {
    pub(crate) fn proposed(&self, kind: &'static str) {
        self.proposed.get_or_create(&KindLabels { kind }).inc();
    }

    pub(crate) fn failed(&self, kind: &'static str, e: &ProposeError) {
        let reason = match e {
            ProposeError::Rejected(_) => "rejected",
            ProposeError::NotLeader { .. } => "not_leader",
            ProposeError::Unavailable(_) => "unavailable",
        };
        self.failed.get_or_create(&FailedLabels { kind, reason }).inc();
    }

    pub(crate) fn get_split_request(&self) {
        self.get_split_requests.inc();
    }

    /// This node answered a GetSplit with the source range `begin..end`.
    pub(crate) fn split_granted(&self, begin: u64, end: u64) {
        self.split_grants.inc();
        self.split_elements_granted.inc_by(end.saturating_sub(begin));
    }

    /// The histogram of Raft commit latency, for the writer that times it.
    pub(crate) fn raft_commit(&self) -> Histogram {
        self.raft_commit.clone()
    }

    /// `sluice_raft_batch_commands`, for the batcher.
    pub(crate) fn raft_batch(&self) -> Histogram {
        self.raft_batch.clone()
    }

    /// The observer to open the journal with.
    pub(crate) fn journal_timing(&self) -> JournalTiming {
        JournalTiming(self.journal_fsync.clone())
    }

    /// Adds every counter, with its name and help, to `r`.
    pub(crate) fn register(&self, r: &mut Registry) {
        r.register(
            "commands_proposed",
            "Commands this node proposed to Raft (each command of a batch counts), by kind",
            self.proposed.clone(),
        );
        r.register(
            "commands_failed",
            "Proposed commands that failed, by kind and reason (rejected by the state \
             machine, not_leader, unavailable)",
            self.failed.clone(),
        );
        r.register(
            "get_split_requests",
            "GetSplit requests this node received (DYNAMIC sharding)",
            self.get_split_requests.clone(),
        );
        r.register(
            "split_grants",
            "GetSplit answers of this node that granted a range of source elements (an \
             idempotent resend counts again)",
            self.split_grants.clone(),
        );
        r.register(
            "split_elements_granted",
            "Source elements in the ranges this node granted",
            self.split_elements_granted.clone(),
        );
        r.register(
            "raft_commit_seconds",
            "Seconds from proposing a log entry (one command or a batch) on this node as \
             leader to its being applied here",
            self.raft_commit.clone(),
        );
        r.register(
            "raft_batch_commands",
            "Commands per log entry this node proposed as leader (the batcher joins the \
             proposals that arrive while the previous entry replicates)",
            self.raft_batch.clone(),
        );
        r.register(
            "journal_fsync_seconds",
            "Seconds each durable write of this node's journal took: a sled flush and \
             fsync, or an object-store PUT with its retries",
            self.journal_fsync.clone(),
        );
    }
}
