//! The sled backend's own behaviour beyond the conformance suite: a snapshot save that
//! stops no append, and the upgrade of a format-1 journal (snapshot in `meta`).

use std::sync::{Arc, Barrier};
use std::time::Duration;

use bytes::Bytes;

use super::format::{FORMAT_VERSION, KEY_FORMAT, KEY_SNAPSHOT};
use super::SledJournal;
use crate::frame::{seal, unseal};
use crate::observe::Timing;
use crate::Journal;

/// Generous: only a save that holds appends back (a bug) comes near it.
const DEADLINE: Duration = Duration::from_secs(60);

fn entries(range: std::ops::RangeInclusive<u64>) -> Vec<(u64, Bytes)> {
    range.map(|i| (i, Bytes::from(format!("e{i}")))).collect()
}

async fn open(dir: &std::path::Path, read_only: bool) -> SledJournal {
    let dir = dir.to_path_buf();
    SledJournal::open(dir, read_only, Timing::default()).await.unwrap().0
}

/// Waits until no handle of this process has `dir` open (sled's threads may hold its lock
/// for a moment after a drop).
async fn closed(dir: &std::path::Path) {
    let location = format!("sled:{}", dir.display());
    assert!(crate::wait_closed(&location, DEADLINE).await, "{location} stayed open");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_commit_while_a_snapshot_save_is_in_progress() {
    let dir = tempfile::tempdir().unwrap();
    let mut journal = open(dir.path(), false).await;
    journal.append(entries(1..=2)).await.unwrap();
    journal.save_snapshot(Bytes::from("m1"), Bytes::from("old")).await.unwrap();
    let gate = Arc::new((Barrier::new(2), Barrier::new(2)));
    journal.pause_save = Some(gate.clone());
    let journal = Arc::new(journal);

    let saving = tokio::spawn({
        let journal = journal.clone();
        async move { journal.save_snapshot(Bytes::from("m2"), Bytes::from("new")).await }
    });
    // The save has written its file and holds before the rename.
    let held = gate.clone();
    tokio::task::spawn_blocking(move || held.0.wait()).await.unwrap();

    // Appends (and their fsyncs) go on meanwhile; the old snapshot is still the one read.
    let append = tokio::time::timeout(DEADLINE, journal.append(entries(3..=4))).await;
    let old = journal.read_snapshot().await;
    // Let the save go whatever happened, so that a failure is reported, not hung.
    tokio::task::spawn_blocking(move || gate.1.wait()).await.unwrap();
    append.expect("an append waited for a snapshot save").unwrap();
    assert_eq!(old.unwrap(), Some((Bytes::from("m1"), Bytes::from("old"))));
    saving.await.unwrap().unwrap();
    assert_eq!(journal.read(0, 10).await.unwrap(), entries(1..=4));
    let new = Some((Bytes::from("m2"), Bytes::from("new")));
    assert_eq!(journal.read_snapshot().await.unwrap(), new);
}

/// Waits until no sled database holds `dir`'s file lock: a raw `sled::Db` (which
/// the open registry behind `closed` does not track) keeps it for a moment after
/// it is dropped, while its flusher thread ends.
async fn released(dir: &std::path::Path) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let file = std::fs::File::open(dir.join("db")).unwrap();
        if file.try_lock().is_ok() {
            return; // unlocked when `file` drops
        }
        assert!(tokio::time::Instant::now() < deadline, "{} stayed locked", dir.display());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Writes a format-1 journal as an older build did: the snapshot in `meta`.
fn write_format_one(dir: &std::path::Path) {
    let db = sled::Config::new().path(dir).open().unwrap();
    let log = db.open_tree("log").unwrap();
    let meta = db.open_tree("meta").unwrap();
    meta.insert(KEY_FORMAT, seal(&1u32.to_le_bytes())).unwrap();
    let mut value = 4u64.to_le_bytes().to_vec();
    value.extend_from_slice(b"metaold snapshot");
    meta.insert(KEY_SNAPSHOT, seal(&value)).unwrap();
    for (index, entry) in entries(1..=3) {
        log.insert(index.to_be_bytes(), seal(&entry)).unwrap();
    }
    db.flush().unwrap();
}

fn format_and_key(dir: &std::path::Path) -> (u32, bool) {
    let db = sled::Config::new().path(dir).open().unwrap();
    let meta = db.open_tree("meta").unwrap();
    let format = meta.get(KEY_FORMAT).unwrap().unwrap();
    let format = u32::from_le_bytes(unseal(&format).unwrap().try_into().unwrap());
    (format, meta.contains_key(KEY_SNAPSHOT).unwrap())
}

#[tokio::test]
async fn a_format_one_journal_is_read_as_it_is_and_upgraded_by_a_writable_open() {
    let dir = tempfile::tempdir().unwrap();
    write_format_one(dir.path());
    released(dir.path()).await;
    let snapshot = Some((Bytes::from("meta"), Bytes::from("old snapshot")));

    // Read-only: reads the `meta` value, writes nothing here.
    let read_only = open(dir.path(), true).await;
    assert_eq!(read_only.read_snapshot().await.unwrap(), snapshot);
    drop(read_only);
    closed(dir.path()).await;
    assert!(!dir.path().join("snapshot").exists());
    assert_eq!(format_and_key(dir.path()), (1, true));
    released(dir.path()).await;

    // Writable: the snapshot moves to its file, the format becomes 2.
    let journal = open(dir.path(), false).await;
    assert_eq!(journal.read_snapshot().await.unwrap(), snapshot);
    assert_eq!(journal.read(0, 10).await.unwrap(), entries(1..=3));
    drop(journal);
    closed(dir.path()).await;
    assert!(dir.path().join("snapshot").join("current").exists());
    assert_eq!(format_and_key(dir.path()), (FORMAT_VERSION, false));
    released(dir.path()).await;

    let journal = open(dir.path(), false).await;
    assert_eq!(journal.read_snapshot().await.unwrap(), snapshot);
    journal.save_snapshot(Bytes::from("m"), Bytes::from("new")).await.unwrap();
    assert_eq!(
        journal.read_snapshot().await.unwrap(),
        Some((Bytes::from("m"), Bytes::from("new")))
    );
}
