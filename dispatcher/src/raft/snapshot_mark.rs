//! How far the journal's snapshot covers the log, so the log is never purged
//! past it.
//!
//! When a follower installs a leader's snapshot, openraft 0.9 issues the log
//! purge up to the snapshot's last log id at the same time as it hands the
//! snapshot to the state machine, and the log store runs it at once. If the
//! purge became durable and the install then failed (a full disk, a journal
//! outage past its retries), the journal would hold a purge point beyond its
//! snapshot: openraft refuses to start on that (issue 31). So the peer service
//! announces a checked snapshot before handing it over (`announce`), the state
//! machine reports each snapshot it made durable (`saved`) or failed to install
//! (`failed`), and the log store's purge up to an announced point waits until
//! a saved snapshot covers it (`covers`), refusing if the install failed. A
//! purge nothing announced (after this node's own snapshot, already saved)
//! does not wait.
//!
//! Soft state: at open, `durable` is the journal's snapshot; nothing is
//! announced.

use std::sync::Arc;
use std::time::Duration;

use openraft::LogId;
use tokio::sync::watch;

use super::NodeId;

/// How long a purge waits for the snapshot install it depends on: an install
/// is a decode and one journal write, whose retries end within about a minute
/// (`core.rs`, `JOURNAL_ATTEMPTS`).
pub const INSTALL_WAIT: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, Default)]
struct Marks {
    /// The last log id of the journal's latest snapshot.
    durable: Option<LogId<NodeId>>,
    /// The last log id of the latest snapshot handed to openraft to install.
    announced: Option<LogId<NodeId>>,
    /// The last log id of a snapshot whose install failed.
    failed: Option<LogId<NodeId>>,
}

/// Shared by the peer service, the state machine and the log store.
#[derive(Clone)]
pub struct SnapshotMark(Arc<watch::Sender<Marks>>);

/// A purge refused: the snapshot it depended on was not made durable.
#[derive(Debug, thiserror::Error)]
#[error(
    "not purging the log up to {upto}: the snapshot installed up to there {why}; the log \
     is kept, so this node restarts on its previous snapshot and catches up again"
)]
pub struct PurgeRefused {
    upto: LogId<NodeId>,
    why: &'static str,
}

impl SnapshotMark {
    /// `durable`: the last log id of the snapshot the journal holds, if any.
    pub fn new(durable: Option<LogId<NodeId>>) -> Self {
        SnapshotMark(Arc::new(watch::channel(Marks { durable, ..Marks::default() }).0))
    }

    /// A checked snapshot up to `upto` is about to be installed.
    pub fn announce(&self, upto: Option<LogId<NodeId>>) {
        self.0.send_modify(|m| {
            m.announced = m.announced.max(upto);
            m.failed = None;
        });
    }

    /// A snapshot up to `upto` is durable in the journal.
    pub fn saved(&self, upto: Option<LogId<NodeId>>) {
        self.0.send_modify(|m| m.durable = m.durable.max(upto));
    }

    /// The install of a snapshot up to `upto` failed: nothing of it is durable.
    pub fn failed(&self, upto: Option<LogId<NodeId>>) {
        self.0.send_modify(|m| m.failed = m.failed.max(upto));
    }

    /// Ok once the log may be purged up to `upto`: at once unless an announced
    /// install covers it, else when a saved snapshot does (`Err` if that install
    /// failed or took over `within`).
    pub async fn covers(&self, upto: LogId<NodeId>, within: Duration) -> Result<(), PurgeRefused> {
        let upto_ = Some(upto);
        let mut rx = self.0.subscribe();
        let waited = tokio::time::timeout(
            within,
            rx.wait_for(|m| m.announced < upto_ || m.durable >= upto_ || m.failed >= upto_),
        )
        .await;
        match waited {
            Err(_) => Err(PurgeRefused { upto, why: "was not saved within the wait" }),
            // The sender lives in this `SnapshotMark`.
            Ok(Err(_)) => unreachable!("the snapshot mark's sender is held by its owner"),
            Ok(Ok(m)) if m.announced < upto_ || m.durable >= upto_ => Ok(()),
            Ok(Ok(_)) => Err(PurgeRefused { upto, why: "failed to install" }),
        }
    }
}

#[cfg(test)]
mod tests {
    use openraft::CommittedLeaderId;

    use super::*;

    fn id(index: u64) -> Option<LogId<NodeId>> {
        Some(LogId::new(CommittedLeaderId::new(1, 1), index))
    }

    #[tokio::test]
    async fn a_purge_nothing_announced_covers_goes_on_at_once() {
        let mark = SnapshotMark::new(None);
        mark.covers(id(5).unwrap(), Duration::ZERO).await.unwrap();
    }

    #[tokio::test]
    async fn a_purge_waits_for_the_announced_install_and_is_refused_if_it_failed() {
        let mark = SnapshotMark::new(id(3));
        mark.announce(id(10));
        let wait = Duration::from_secs(60);
        let pending = tokio::spawn({
            let mark = mark.clone();
            async move { mark.covers(id(10).unwrap(), wait).await }
        });
        mark.saved(id(10));
        pending.await.unwrap().unwrap();

        mark.announce(id(20));
        let pending = tokio::spawn({
            let mark = mark.clone();
            async move { mark.covers(id(20).unwrap(), wait).await }
        });
        mark.failed(id(20));
        let refused = pending.await.unwrap().unwrap_err();
        assert!(refused.to_string().contains("failed to install"), "{refused}");
    }

    /// The install path as openraft drives it on a follower: the purge to the
    /// snapshot's last log id runs beside the state machine's install. A body
    /// the install refuses leaves the journal unpurged, and so startable.
    #[tokio::test]
    async fn a_failed_install_leaves_the_journal_unpurged() {
        use openraft::storage::{RaftLogStorage, RaftStateMachine};
        use openraft::SnapshotMeta;

        use crate::raft::{log_store::LogStore, state_machine::StateMachine};

        let (journal, _) = sluice_journal::open("memory://failed-install").await.unwrap();
        let mut sm = StateMachine::open(journal.clone()).await.unwrap();
        let log = LogStore::open(journal.clone()).await.unwrap();
        let mut log = log.gated_by(sm.snapshot_mark());
        let at = id(1_000_000_000);
        // As the peer service does once it has checked a snapshot (this one it
        // would have refused: the state machine checks again).
        sm.snapshot_mark().announce(at);
        let purge = tokio::spawn(async move { log.purge(at.unwrap()).await });
        let meta =
            SnapshotMeta { last_log_id: at, snapshot_id: "forged".into(), ..Default::default() };
        let garbage = Box::new(std::io::Cursor::new(vec![0xa5; 200]));
        sm.install_snapshot(&meta, garbage).await.unwrap_err();
        let refused = purge.await.unwrap().unwrap_err();
        assert!(refused.to_string().contains("failed to install"), "{refused}");
        let state = journal.state().await.unwrap();
        assert!(state.purged_marker.is_none(), "the purge became durable");
        assert!(journal.read_snapshot().await.unwrap().is_none());
    }

    /// A journal an earlier build left purged past its snapshot is refused at
    /// start, naming the work_dir and what to do, where openraft panicked.
    #[tokio::test]
    async fn a_journal_purged_past_its_snapshot_is_refused_at_start() {
        use openraft::storage::RaftLogStorage;

        use crate::config::DispatcherConfig;
        use crate::error::DispatcherError;
        use crate::raft::log_store::LogStore;

        let dir = tempfile::tempdir().unwrap();
        let work_dir = dir.path().to_str().unwrap().to_string();
        let config = DispatcherConfig { work_dir: Some(work_dir), ..DispatcherConfig::default() };
        let location = config.journal_location();
        {
            let (journal, _) = sluice_journal::open(&location).await.unwrap();
            let mut log = LogStore::open(journal).await.unwrap();
            log.purge(id(1_000_000_000).unwrap()).await.unwrap();
        }
        assert!(sluice_journal::wait_closed(&location, Duration::from_secs(30)).await);
        let refused = crate::core::Core::start(&config, "127.0.0.1:1").await.err();
        let Some(DispatcherError::PurgedPastSnapshot { journal, purged, .. }) = &refused else {
            panic!("expected PurgedPastSnapshot, got {refused:?}")
        };
        assert_eq!((journal.as_str(), *purged), (location.as_str(), 1_000_000_000));
        let message = refused.unwrap().to_string();
        assert!(message.contains("empty work_dir"), "{message}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_purge_waits_a_bounded_time() {
        let mark = SnapshotMark::new(None);
        mark.announce(id(10));
        let refused = mark.covers(id(10).unwrap(), Duration::from_secs(1)).await.unwrap_err();
        assert!(refused.to_string().contains("within the wait"), "{refused}");
    }
}
