//! The sled backend fsyncs once per acknowledged write (and once at open), never skipping one
//! and never syncing per entry: `testing::sled_sync_count` counts the journal's calls to its
//! syncer. That those calls are real `fdatasync`/`fsync` system calls on the journal's files
//! is what `dispatcher/tests/fsync_strace.rs` observes on a real dispatcher process.

use bytes::Bytes;
use sluice_journal::testing::sled_sync_count;

fn entries(range: std::ops::RangeInclusive<u64>) -> Vec<(u64, Bytes)> {
    range.map(|i| (i, Bytes::from(format!("entry {i}")))).collect()
}

#[tokio::test]
async fn every_acknowledged_write_is_followed_by_one_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (j, _) = sluice_journal::open(&format!("sled:{}", dir.path().display())).await.unwrap();
    let mut expected = sled_sync_count(dir.path());
    assert_eq!(expected, 1, "open syncs once");
    let mut step = |what: &str| {
        expected += 1;
        assert_eq!(sled_sync_count(dir.path()), expected, "after {what}");
    };

    j.append(entries(1..=1)).await.unwrap();
    step("a 1-entry append");
    // Group commit: a batch is one write and one sync, not one per entry.
    j.append(entries(2..=500)).await.unwrap();
    step("a 499-entry append");
    j.save_vote(Bytes::from_static(b"vote")).await.unwrap();
    step("save_vote");
    j.truncate(400).await.unwrap();
    step("truncate");
    j.purge(10, Bytes::from_static(b"marker")).await.unwrap();
    step("purge");
    // Large enough for sled to write it to a blob file of its own.
    j.append(vec![(400, Bytes::from(vec![7u8; 1 << 20]))]).await.unwrap();
    step("a 1 MiB append");
    assert!(
        std::fs::read_dir(dir.path().join("blobs")).unwrap().next().is_some(),
        "a 1 MiB value should have gone to a blob file (which the sync must cover)"
    );
    // A snapshot is a file of its own, synced by its own write, not by the syncer.
    j.save_snapshot(Bytes::from_static(b"meta"), Bytes::from(vec![7u8; 1 << 20])).await.unwrap();
    assert_eq!(sled_sync_count(dir.path()), expected, "save_snapshot");

    // Nothing to write, nothing to sync.
    let before = sled_sync_count(dir.path());
    j.append(Vec::new()).await.unwrap();
    j.truncate(1000).await.unwrap();
    assert_eq!(sled_sync_count(dir.path()), before);
}
