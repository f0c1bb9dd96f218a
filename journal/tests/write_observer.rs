//! `OpenOptions::observer`: every durable write of both backends is timed, reads
//! are not (the dispatcher's `sluice_journal_fsync_seconds` counts on it).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sluice_journal::{open_with, OpenOptions, WriteObserver};

#[derive(Debug, Default)]
struct Count(AtomicU64);

impl WriteObserver for Count {
    fn durable_write(&self, _took: Duration) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

async fn writes_are_timed_and_reads_are_not(location: &str) {
    let count = Arc::new(Count::default());
    let options = OpenOptions { observer: Some(count.clone()), ..OpenOptions::default() };
    let (j, _) = open_with(location, &options).await.expect("opened");
    let seen = || count.0.load(Ordering::SeqCst);
    let opened = seen();
    j.append(vec![(1, Bytes::from_static(b"a")), (2, Bytes::from_static(b"b"))]).await.unwrap();
    let appended = seen();
    assert!(appended > opened, "{location}: the append was timed");
    j.save_vote(Bytes::from_static(b"v")).await.unwrap();
    let voted = seen();
    assert!(voted > appended, "{location}: the vote was timed");
    j.read(1, 3).await.unwrap();
    j.read_vote().await.unwrap();
    assert_eq!(seen(), voted, "{location}: reads are not timed");
}

#[tokio::test]
async fn sled_flushes_are_reported_to_the_observer() {
    let dir = tempfile::tempdir().unwrap();
    writes_are_timed_and_reads_are_not(&format!("sled:{}", dir.path().display())).await;
}

#[tokio::test]
async fn object_store_puts_are_reported_to_the_observer() {
    writes_are_timed_and_reads_are_not("memory://write-observer").await;
}
