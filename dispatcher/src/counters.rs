//! [`Counters`]: what this process counts as it serves (commands proposed and
//! failed by kind, GetSplit requests), for the Prometheus endpoint.
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
use prometheus_client::registry::Registry;

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
#[derive(Clone, Debug, Default)]
pub(crate) struct Counters {
    proposed: Family<KindLabels, Counter>,
    failed: Family<FailedLabels, Counter>,
    get_split_requests: Counter,
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
    }
}
