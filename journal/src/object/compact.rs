//! Which log segments a purge made dead, so restart time follows the unpurged log rather
//! than the journal's history.
//!
//! The rule, kept simple enough to check by eye: below the segment holding the latest Purge
//! record, walk up in seq order and take every segment whose entries are all purged; skip
//! (keep, but walk past) the segments committing the current vote and snapshot, which hold
//! nothing else; stop at anything else. Why this is safe:
//! - the latest Purge segment and everything after it stay, so the highest seq (which fences
//!   the next writer) and every live entry stay;
//! - a deleted segment's Entry records are all at or below the purge point, so the kept Purge
//!   record removes them anyway; its Truncate/Purge records only ever affected entries in
//!   earlier segments, which are purged too; its commits are superseded by the current ones;
//! - a torn segment must never outlive the Claim that acknowledges its cut (a later
//!   recovery would see "corruption in the middle"), so torn segments are deleted first, one
//!   at a time, and the rest only if those succeeded; the rest may go in any order, so they
//!   go in bulk (one S3 `DeleteObjects` per 1,000), then one by one for what the bulk call
//!   did not confirm.
//!
//! Deleting runs in a background task after a purge (the purge is durable once its segment
//! is written; "space may be reclaimed later"), so a purge of many segments does not stall
//! the next append. Deleting a dead segment is safe whoever writes next, even after this
//! handle is dropped or fenced: a dead segment changes no fold. Open runs it inline.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use futures::StreamExt;
use tokio::sync::Mutex;

use super::recover::{log_name, parse_seq, SegInfo};
use super::remote::Remote;

/// The dead segments: torn ones (delete first, in order), then the others (any order).
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Plan {
    pub torn: Vec<u64>,
    pub rest: Vec<u64>,
}

/// `upto` = purged index; `keep` = seqs of the current vote and snapshot commit segments.
pub(crate) fn plan(segments: &BTreeMap<u64, SegInfo>, upto: u64, keep: [Option<u64>; 2]) -> Plan {
    let mut plan = Plan::default();
    let Some(purge_seq) = segments.iter().rev().find(|(_, i)| i.has_purge).map(|(s, _)| *s) else {
        return plan;
    };
    for (seq, info) in segments.range(..purge_seq) {
        if keep.contains(&Some(*seq)) {
            if info.failed {
                break;
            }
            continue;
        }
        if info.max_entry.is_some_and(|m| m > upto) {
            break;
        }
        if info.failed {
            plan.torn.push(*seq);
        } else {
            plan.rest.push(*seq);
        }
    }
    plan
}

/// Deletes dead objects; one deletion pass at a time per journal handle.
#[derive(Clone)]
pub(crate) struct Cleaner {
    pub remote: Arc<Remote>,
    pub location: String,
    pub serial: Arc<Mutex<()>>,
}

impl Cleaner {
    /// Deletes the plan's segments (best effort); returns the seqs deleted.
    pub(crate) async fn delete_segments(&self, plan: Plan) -> Vec<u64> {
        let _serial = self.serial.lock().await;
        let mut deleted = Vec::new();
        for seq in plan.torn {
            if let Err(e) = self.remote.delete(&log_name(seq)).await {
                tracing::warn!(journal = %self.location, "compaction stopped: {e}");
                return deleted;
            }
            deleted.push(seq);
        }
        // The rest in bulk (one request per 1,000 on S3: per-object DELETEs of a
        // thousand segments, from every node at once, starved the log's PUTs of the
        // store), then one by one whatever the bulk call did not confirm.
        let names: Vec<String> = plan.rest.iter().map(|&seq| log_name(seq)).collect();
        let confirmed: HashSet<String> =
            self.remote.delete_batch(names).await.into_iter().collect();
        let (done, left): (Vec<u64>, Vec<u64>) =
            plan.rest.into_iter().partition(|&seq| confirmed.contains(&log_name(seq)));
        deleted.extend(done);
        let results: Vec<_> = futures::stream::iter(left)
            .map(|seq| async move { (seq, self.remote.delete(&log_name(seq)).await) })
            .buffer_unordered(16)
            .collect()
            .await;
        for (seq, result) in results {
            match result {
                Ok(()) => deleted.push(seq),
                Err(e) => tracing::warn!(journal = %self.location, "compaction: {e}"),
            }
        }
        if !deleted.is_empty() {
            tracing::debug!(journal = %self.location, segments = deleted.len(), "compacted");
        }
        deleted
    }

    /// Deletes `dir/<seq>` objects older than `current` (best effort). Only older ones: a
    /// newer one may be another writer's vote or snapshot whose commit is in flight.
    pub(crate) async fn delete_older(&self, dir: &str, current: Option<u64>) {
        let Some(current) = current else { return };
        let _serial = self.serial.lock().await;
        let names = match self.remote.list(dir).await {
            Ok(names) => names,
            Err(e) => return tracing::warn!(journal = %self.location, "cleanup of {dir}/: {e}"),
        };
        for name in names {
            if parse_seq(&name, "").is_some_and(|seq| seq < current) {
                if let Err(e) = self.remote.delete(&format!("{dir}/{name}")).await {
                    return tracing::warn!(journal = %self.location, "cleanup of {dir}/: {e}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(max_entry: Option<u64>, has_purge: bool, failed: bool) -> SegInfo {
        SegInfo { max_entry, has_purge, failed }
    }

    #[test]
    fn deletes_the_dead_prefix_below_the_latest_purge() {
        let segments: BTreeMap<u64, SegInfo> = [
            (1, seg(None, false, false)),     // claim
            (2, seg(Some(5), false, false)),  // entries ..=5
            (3, seg(None, false, false)),     // current vote commit
            (4, seg(Some(9), false, true)),   // torn, acknowledged
            (5, seg(Some(12), false, false)), // live entry 12: stop here
            (6, seg(Some(8), false, false)),  // dead, but after a live one: kept
            (7, seg(None, true, false)),      // the purge
            (8, seg(Some(13), false, false)),
        ]
        .into();
        let plan = plan(&segments, 10, [Some(3), None]);
        assert_eq!(plan, Plan { torn: vec![4], rest: vec![1, 2] });
    }

    #[test]
    fn nothing_without_a_purge_and_never_the_purge_itself() {
        let mut segments: BTreeMap<u64, SegInfo> =
            [(1, seg(Some(1), false, false)), (2, seg(Some(2), false, false))].into();
        assert_eq!(plan(&segments, 5, [None, None]), Plan::default());
        segments.insert(3, seg(None, true, false));
        assert_eq!(plan(&segments, 5, [None, None]).rest, vec![1, 2]);
    }

    #[test]
    fn a_torn_current_commit_stops_the_walk() {
        let segments: BTreeMap<u64, SegInfo> = [
            (1, seg(None, false, true)),
            (2, seg(Some(1), false, false)),
            (3, seg(None, true, false)),
        ]
        .into();
        assert_eq!(plan(&segments, 5, [None, Some(1)]), Plan::default());
    }
}
