//! openraft's own storage test suite (`openraft::testing::Suite`) run against the
//! dispatcher's log store and state machine on every journal backend: sled,
//! `file://`, `memory://` and a real S3-compatible server (moto).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use sluice_dispatcher::raft::log_store::LogStore;
use sluice_dispatcher::raft::state_machine::StateMachine;
use sluice_dispatcher::raft::{NodeId, TypeConfig};
use sluice_journal::OpenOptions;

/// Builds a fresh store for every case of the suite; `G` keeps its directory alive.
struct Builder {
    /// Makes a new, empty journal location for each case.
    make: Box<dyn Fn(u64) -> (String, Option<tempfile::TempDir>) + Send + Sync>,
    options: OpenOptions,
    n: AtomicU64,
}

impl StoreBuilder<TypeConfig, LogStore, StateMachine, Option<tempfile::TempDir>> for Builder {
    async fn build(
        &self,
    ) -> Result<(Option<tempfile::TempDir>, LogStore, StateMachine), StorageError<NodeId>> {
        let (location, dir) = (self.make)(self.n.fetch_add(1, Ordering::Relaxed));
        let (journal, _) = sluice_journal::open_with(&location, &self.options)
            .await
            .unwrap_or_else(|e| panic!("open {location}: {e}"));
        let log = LogStore::open(Arc::clone(&journal)).await?;
        let sm = StateMachine::open(journal).await?;
        Ok((dir, log, sm))
    }
}

fn run(
    make: impl Fn(u64) -> (String, Option<tempfile::TempDir>) + Send + Sync + 'static,
    options: OpenOptions,
) {
    let builder = Builder { make: Box::new(make), options, n: AtomicU64::new(0) };
    Suite::test_all(builder).expect("openraft storage suite");
}

#[test]
fn openraft_suite_on_sled() {
    run(
        |_| {
            let dir = tempfile::tempdir().unwrap();
            (dir.path().join("j").to_string_lossy().into_owned(), Some(dir))
        },
        OpenOptions::default(),
    );
}

#[test]
fn openraft_suite_on_local_files() {
    run(
        |_| {
            let dir = tempfile::tempdir().unwrap();
            (format!("file://{}", dir.path().display()), Some(dir))
        },
        OpenOptions::default(),
    );
}

#[test]
fn openraft_suite_in_memory() {
    let pid = std::process::id();
    run(move |n| (format!("memory://suite-{pid}-{n}/j"), None), OpenOptions::default());
}

#[test]
fn openraft_suite_on_s3() {
    let s3 = sluice_journal::testing::MotoServer::start();
    let bucket = s3.bucket().to_string();
    run(move |n| (format!("s3://{bucket}/suite-{n}"), None), OpenOptions::with_store_env(s3.env()));
}
