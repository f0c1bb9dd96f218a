//! The journal conformance suite: every case runs against every backend (sled in a temp dir,
//! `file://` in a temp dir, `memory://`, and S3 on a real moto server).
//!
//! `suite!` generates one `#[tokio::test]` per case per backend, named
//! `<backend>::<case>`, e.g. `s3::stale_writer_is_fenced`. The S3 cases fail (never skip)
//! when moto is not installed: run `scripts/install-s3-test-server.sh`.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{b, entries, Backend, Kind};
use sluice_journal::{open_with, JournalError, LogState, OpenOptions};

fn state(purged: Option<(u64, &str)>, range: Option<(u64, u64)>) -> LogState {
    LogState {
        purged_index: purged.map(|p| p.0),
        purged_marker: purged.map(|p| b(p.1)),
        first_index: range.map(|r| r.0),
        last_index: range.map(|r| r.1),
    }
}

async fn append_and_read_ranges(be: Backend) {
    let (j, recovery) = be.open().await;
    assert_eq!(recovery.entries, 0);
    assert_eq!(j.state().await.unwrap(), LogState::default());
    assert_eq!(j.read(0, 100).await.unwrap(), vec![]);

    // Nothing written or purged yet: any first index.
    j.append(entries(10..=14)).await.unwrap();
    assert_eq!(j.state().await.unwrap(), state(None, Some((10, 14))));
    j.append(vec![]).await.unwrap();
    j.append(entries(15..=15)).await.unwrap();
    assert_eq!(j.state().await.unwrap(), state(None, Some((10, 15))));

    assert_eq!(j.read(0, 100).await.unwrap(), entries(10..=15));
    assert_eq!(j.read(11, 13).await.unwrap(), entries(11..=12));
    assert_eq!(j.read(15, 16).await.unwrap(), entries(15..=15));
    assert_eq!(j.read(16, 20).await.unwrap(), vec![]);
    assert_eq!(j.read(13, 13).await.unwrap(), vec![]);
    assert_eq!(j.read(13, 11).await.unwrap(), vec![]);
    assert!(j.location().contains(match be.kind {
        Kind::Sled => "sled:",
        Kind::File => "file://",
        Kind::Memory => "memory://",
        Kind::S3 => "s3://",
    }));
}

async fn non_contiguous_append_is_refused(be: Backend) {
    let (j, _) = be.open().await;
    j.append(entries(1..=2)).await.unwrap();
    for bad in [entries(4..=4), entries(2..=3), entries(1..=1), vec![(3, b("x")), (5, b("y"))]] {
        let err = j.append(bad.clone()).await.unwrap_err();
        assert!(matches!(err, JournalError::InvalidArgument(_)), "{bad:?}: {err}");
    }
    assert_eq!(j.state().await.unwrap(), state(None, Some((1, 2))));
    j.append(entries(3..=3)).await.unwrap();
    let (j, _) = be.reopen(j).await;
    assert_eq!(j.read(0, 10).await.unwrap(), entries(1..=3));
}

async fn truncate_then_append_at_the_truncated_index(be: Backend) {
    let (j, _) = be.open().await;
    j.append(entries(1..=10)).await.unwrap();
    j.truncate(6).await.unwrap();
    assert_eq!(j.state().await.unwrap(), state(None, Some((1, 5))));
    assert_eq!(j.read(0, 20).await.unwrap(), entries(1..=5));
    assert!(j.append(entries(7..=7)).await.is_err());
    j.append(vec![(6, b("new6")), (7, b("new7"))]).await.unwrap();
    j.truncate(100).await.unwrap(); // beyond the end: nothing to do
    assert_eq!(j.state().await.unwrap(), state(None, Some((1, 7))));

    let (j, _) = be.reopen(j).await;
    assert_eq!(j.read(6, 8).await.unwrap(), vec![(6, b("new6")), (7, b("new7"))]);
    j.truncate(1).await.unwrap();
    assert_eq!(j.state().await.unwrap(), LogState::default());
    j.append(entries(1..=1)).await.unwrap();
    let (j, _) = be.reopen(j).await;
    assert_eq!(j.state().await.unwrap(), state(None, Some((1, 1))));
    assert_eq!(j.read(0, 20).await.unwrap(), entries(1..=1));
}

async fn purge_keeps_marker_and_index(be: Backend) {
    let (j, _) = be.open().await;
    j.append(entries(1..=10)).await.unwrap();
    j.purge(4, b("m4")).await.unwrap();
    assert_eq!(j.state().await.unwrap(), state(Some((4, "m4")), Some((5, 10))));
    assert_eq!(j.read(0, 20).await.unwrap(), entries(5..=10));
    j.append(entries(11..=11)).await.unwrap();

    let (j, _) = be.reopen(j).await;
    assert_eq!(j.state().await.unwrap(), state(Some((4, "m4")), Some((5, 11))));
    assert!(matches!(j.truncate(4).await, Err(JournalError::InvalidArgument(_))));
    assert!(matches!(j.purge(3, b("m3")).await, Err(JournalError::InvalidArgument(_))));

    // Past the end (as after installing a snapshot): the log empties, appends go on after it.
    j.purge(20, b("m20")).await.unwrap();
    assert_eq!(j.state().await.unwrap(), state(Some((20, "m20")), None));
    assert!(matches!(j.append(entries(30..=30)).await, Err(JournalError::InvalidArgument(_))));
    j.append(entries(21..=22)).await.unwrap();
    let (j, recovery) = be.reopen(j).await;
    assert_eq!(recovery.entries, 2);
    assert_eq!(j.state().await.unwrap(), state(Some((20, "m20")), Some((21, 22))));
    assert_eq!(j.read(0, 100).await.unwrap(), entries(21..=22));
}

async fn vote_round_trip_survives_reopen(be: Backend) {
    let (j, _) = be.open().await;
    assert_eq!(j.read_vote().await.unwrap(), None);
    j.save_vote(b("term 1, node 1")).await.unwrap();
    assert_eq!(j.read_vote().await.unwrap(), Some(b("term 1, node 1")));
    j.save_vote(b("term 2, node 3")).await.unwrap();
    assert_eq!(j.read_vote().await.unwrap(), Some(b("term 2, node 3")));
    let (j, _) = be.reopen(j).await;
    assert_eq!(j.read_vote().await.unwrap(), Some(b("term 2, node 3")));
    assert_eq!(j.state().await.unwrap(), LogState::default(), "a vote is not a log entry");
    if be.is_object_store() {
        assert_eq!(be.list("vote").await.len(), 1, "older vote objects are deleted");
    }
}

async fn snapshot_round_trip_replaces_the_old_one(be: Backend) {
    let (j, _) = be.open().await;
    assert_eq!(j.read_snapshot().await.unwrap(), None);
    j.save_snapshot(b("meta1"), b("data1")).await.unwrap();
    assert_eq!(j.read_snapshot().await.unwrap(), Some((b("meta1"), b("data1"))));
    let big = Bytes::from((0..(1u32 << 20)).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    j.save_snapshot(b("meta2"), big.clone()).await.unwrap();
    assert_eq!(j.read_snapshot().await.unwrap(), Some((b("meta2"), big.clone())));
    let (j, _) = be.reopen(j).await;
    assert_eq!(j.read_snapshot().await.unwrap(), Some((b("meta2"), big)));
    j.save_snapshot(Bytes::new(), Bytes::new()).await.unwrap();
    let (j, _) = be.reopen(j).await;
    assert_eq!(j.read_snapshot().await.unwrap(), Some((Bytes::new(), Bytes::new())));
    if be.is_object_store() {
        assert_eq!(be.list("snapshot").await.len(), 1, "older snapshot objects are deleted");
    }
}

/// A small deterministic model run: every step is checked against a model, and every few
/// steps the journal restarts and must come back exactly as acknowledged.
async fn reopen_recovers_exactly_what_was_acknowledged(be: Backend) {
    let (mut j, _) = be.open().await;
    let mut model: Vec<(u64, Bytes)> = Vec::new();
    let mut purged: Option<(u64, Bytes)> = None;
    let mut vote = None;
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    for step in 0..60u64 {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let next = model.last().map(|e| e.0 + 1).or(purged.as_ref().map(|p| p.0 + 1)).unwrap_or(1);
        match rng % 10 {
            0..=5 => {
                let batch: Vec<_> =
                    (next..next + 1 + rng % 4).map(|i| (i, b(&format!("s{step}i{i}")))).collect();
                j.append(batch.clone()).await.unwrap();
                model.extend(batch);
            }
            6 if !model.is_empty() => {
                let from = model[(rng as usize / 10) % model.len()].0;
                j.truncate(from).await.unwrap();
                model.retain(|e| e.0 < from);
            }
            7 if !model.is_empty() => {
                let upto = model[(rng as usize / 10) % model.len()].0;
                let marker = b(&format!("purge {upto}"));
                j.purge(upto, marker.clone()).await.unwrap();
                model.retain(|e| e.0 > upto);
                purged = Some((upto, marker));
            }
            8 => {
                let v = b(&format!("vote {step}"));
                j.save_vote(v.clone()).await.unwrap();
                vote = Some(v);
            }
            _ => {
                (j, _) = be.reopen(j).await;
            }
        }
        let expected = LogState {
            purged_index: purged.as_ref().map(|p| p.0),
            purged_marker: purged.as_ref().map(|p| p.1.clone()),
            first_index: model.first().map(|e| e.0),
            last_index: model.last().map(|e| e.0),
        };
        assert_eq!(j.state().await.unwrap(), expected, "step {step}");
        assert_eq!(j.read(0, u64::MAX).await.unwrap(), model, "step {step}");
        assert_eq!(j.read_vote().await.unwrap(), vote, "step {step}");
    }
}

/// Both backends write a batch atomically (a sled batch, one PUT), so an acknowledged entry
/// is never half-written: a checksum failure on the last one is damage, not a torn write,
/// and dropping it would lose an acknowledged entry. The journal refuses to open, naming it.
async fn checksum_failure_at_the_tail_is_corruption(be: Backend) {
    let (j, _) = be.open().await;
    for i in 1..=3 {
        j.append(entries(i..=i)).await.unwrap();
    }
    drop(j);
    let damage = be.damage_tail(3).await;
    refuses_to_open_naming(&be, damage).await;
    // And it stays refused: nothing was cut on the way.
    let again = be.try_open().await.err().expect("still corrupt at the next open");
    assert!(matches!(again, JournalError::Corrupt { .. }), "{again}");
}

async fn corruption_in_the_middle_refuses_to_open(be: Backend) {
    let (j, _) = be.open().await;
    for i in 1..=3 {
        j.append(entries(i..=i)).await.unwrap();
    }
    drop(j);
    let damage = be.damage_entry(2).await;
    refuses_to_open_naming(&be, damage).await;
}

/// Opening fails with `Corrupt` naming `names` and `offset`.
async fn refuses_to_open_naming(be: &Backend, (names, offset): (String, u64)) {
    let err = be.try_open().await.err().expect("a corrupt journal must not open");
    let message = err.to_string();
    match err {
        JournalError::Corrupt { location, offset: at, .. } => {
            assert!(location.contains(&names), "{location} should name {names}");
            assert_eq!(at, offset, "{message}");
        }
        other => panic!("expected Corrupt, got {other}"),
    }
    assert!(message.contains(&names) && message.contains(&format!("offset {offset}")), "{message}");
}

async fn stale_writer_is_fenced(be: Backend) {
    let (old, _) = be.open().await;
    old.append(entries(1..=1)).await.unwrap();
    if be.kind == Kind::Sled {
        // sled cannot be opened twice: the second open fails, naming the directory.
        let err = be.try_open().await.err().expect("a second open must fail");
        assert!(matches!(err, JournalError::Fenced { .. }), "{err}");
        assert!(err.to_string().contains(&be.location.replace("sled:", "")), "{err}");
        let (j, _) = be.reopen(old).await;
        assert_eq!(j.state().await.unwrap(), state(None, Some((1, 1))));
        return;
    }
    let (new, _) = be.open().await;
    assert_eq!(new.state().await.unwrap(), state(None, Some((1, 1))));
    for attempt in 0..2 {
        let err = old.append(entries(2..=2)).await.unwrap_err();
        assert!(matches!(err, JournalError::Fenced { .. }), "attempt {attempt}: {err}");
    }
    assert!(matches!(old.save_vote(b("stale")).await, Err(JournalError::Fenced { .. })));
    assert!(matches!(old.truncate(1).await, Err(JournalError::Fenced { .. })));
    new.append(entries(2..=2)).await.unwrap();
    new.save_vote(b("fresh")).await.unwrap();
    drop(old);
    let (j, _) = be.reopen(new).await;
    assert_eq!(j.read(0, 10).await.unwrap(), entries(1..=2));
    assert_eq!(j.read_vote().await.unwrap(), Some(b("fresh")));
}

async fn unknown_format_version_is_refused(be: Backend) {
    let (j, _) = be.open().await;
    j.append(entries(1..=1)).await.unwrap();
    drop(j);
    let newer = be.set_newer_format_version().await;
    match be.try_open().await {
        Err(e @ JournalError::UnsupportedVersion { found, supported, .. })
            if found == newer && supported == newer - 1 =>
        {
            let msg = e.to_string();
            assert!(msg.contains("written by a newer Sluice"), "{msg}");
            assert!(msg.contains("upgrade this binary or restore a backup"), "{msg}");
        }
        Err(other) => panic!("expected UnsupportedVersion, got {other}"),
        Ok(_) => panic!("a version-{newer} journal must not open"),
    }
}

/// A read-only open sees what is durable and refuses every write; the journal is then as it
/// was (the next writer's appends go on at the same index). The dispatcher checks formats
/// this way before it takes a work_dir over.
async fn read_only_open_reads_and_changes_nothing(be: Backend) {
    let (j, _) = be.open().await;
    j.append(entries(1..=3)).await.unwrap();
    j.save_vote(b("vote")).await.unwrap();
    j.purge(1, b("marker")).await.unwrap();
    j.save_snapshot(b("meta"), b("data")).await.unwrap();
    let before = j.state().await.unwrap();
    drop(j);
    let read_only = OpenOptions { read_only: true, ..be.options.clone() };
    let (r, _) = open_with(&be.location, &read_only).await.unwrap();
    assert_eq!(r.state().await.unwrap(), before);
    assert_eq!(r.read(0, 10).await.unwrap(), entries(2..=3));
    assert_eq!(r.read_vote().await.unwrap(), Some(b("vote")));
    assert_eq!(r.read_snapshot().await.unwrap(), Some((b("meta"), b("data"))));
    assert!(r.append(entries(4..=4)).await.is_err());
    assert!(r.save_vote(b("other")).await.is_err());
    assert!(r.truncate(3).await.is_err());
    assert!(r.purge(2, b("m")).await.is_err());
    assert!(r.save_snapshot(b("m"), b("d")).await.is_err());
    drop(r);
    assert!(sluice_journal::wait_closed(&be.location, Duration::from_secs(5)).await);
    let (j, _) = be.open().await;
    assert_eq!(j.state().await.unwrap(), before);
    assert_eq!(j.read_vote().await.unwrap(), Some(b("vote")));
    j.append(entries(4..=4)).await.unwrap();
    assert_eq!(j.read(0, 10).await.unwrap(), entries(2..=4));
}

/// Opens racing for one location: at most one handle may write. sled lets one open win;
/// object stores let every open claim in turn, and only the last claimer's writes land.
async fn concurrent_opens_leave_one_writer(be: Backend) {
    let opens = futures::future::join_all((0..4).map(|_| be.try_open())).await;
    let handles: Vec<_> = opens.into_iter().filter_map(Result::ok).map(|(j, _)| j).collect();
    if be.kind == Kind::Sled {
        assert_eq!(handles.len(), 1);
    }
    let appends = futures::future::join_all(handles.iter().map(|j| j.append(entries(1..=1)))).await;
    let won = appends.iter().filter(|r| r.is_ok()).count();
    assert_eq!(won, 1, "{appends:?}");
    for result in appends.iter().filter(|r| r.is_err()) {
        assert!(matches!(result, Err(JournalError::Fenced { .. })), "{result:?}");
    }
    drop(handles);
    let (j, _) = be.open().await;
    assert_eq!(j.read(0, 10).await.unwrap(), entries(1..=1));
}

/// A damaged snapshot is never handed out: sled refuses to open (it verifies every value at
/// open); object stores check the snapshot's presence and size at open and its checksum when
/// it is read.
async fn damaged_snapshot_is_reported(be: Backend) {
    let (j, _) = be.open().await;
    j.save_snapshot(b("meta"), b("data")).await.unwrap();
    drop(j);
    be.damage_snapshot().await;
    let err = match be.try_open().await {
        Err(e) => e,
        Ok((j, _)) => j.read_snapshot().await.expect_err("a damaged snapshot must not be read"),
    };
    assert!(matches!(err, JournalError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("snapshot"), "{err}");
}

/// Restart cost must follow the unpurged log, not the history: after a purge, segments
/// that only held purged entries are deleted.
async fn purge_reclaims_space(be: Backend) {
    let (j, _) = be.open().await;
    for i in 1..=30 {
        j.append(entries(i..=i)).await.unwrap();
    }
    j.save_snapshot(b("snap"), b("at 25")).await.unwrap();
    j.purge(25, b("m25")).await.unwrap();
    if be.is_object_store() {
        // Left: the segments of entries 26..=30, the snapshot commit, the purge. Deleting
        // runs in the background after the purge returns.
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut left = be.segments().await.len();
        while left > 7 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            left = be.segments().await.len();
        }
        assert!(left <= 7, "{left} segments left");
    }
    let (j, recovery) = be.reopen(j).await;
    assert_eq!(recovery.entries, 5);
    assert_eq!(j.state().await.unwrap(), state(Some((25, "m25")), Some((26, 30))));
    assert_eq!(j.read_snapshot().await.unwrap(), Some((b("snap"), b("at 25"))));
    j.purge(30, b("m30")).await.unwrap();
    let (j, _) = be.reopen(j).await;
    assert_eq!(j.state().await.unwrap(), state(Some((30, "m30")), None));
    assert_eq!(j.read_snapshot().await.unwrap(), Some((b("snap"), b("at 25"))));
    if be.is_object_store() {
        let left = be.segments().await.len();
        assert!(left <= 4, "{left} segments left");
    }
}

/// Not a benchmark: a bound that catches a missing group commit or a hung fsync, and the
/// figures for docs/journal.md (`cargo test -p sluice-journal append_latency -- --nocapture`).
async fn append_latency(be: Backend) {
    let (j, _) = be.open().await;
    let n = 50u64;
    let start = Instant::now();
    for i in 1..=n {
        j.append(vec![(i, Bytes::from(vec![7u8; 256]))]).await.unwrap();
    }
    let per_append = start.elapsed() / n as u32;
    eprintln!("{:?}: {per_append:?} per 256-byte append ({n} appends)", be.kind);
    assert!(per_append < Duration::from_secs(1), "{per_append:?} per append");
}

macro_rules! suite {
    ($backend:ident, $kind:expr; $($case:ident),* $(,)?) => {
        mod $backend {
            use super::Kind;
            $(
                #[tokio::test]
                async fn $case() {
                    super::$case(super::Backend::new($kind, stringify!($case))).await;
                }
            )*
        }
    };
}

macro_rules! all_backends {
    ($($case:ident),* $(,)?) => {
        suite!(sled, Kind::Sled; $($case),*);
        suite!(file, Kind::File; $($case),*);
        suite!(memory, Kind::Memory; $($case),*);
        suite!(s3, Kind::S3; $($case),*);
    };
}

all_backends!(
    append_and_read_ranges,
    non_contiguous_append_is_refused,
    truncate_then_append_at_the_truncated_index,
    purge_keeps_marker_and_index,
    vote_round_trip_survives_reopen,
    snapshot_round_trip_replaces_the_old_one,
    reopen_recovers_exactly_what_was_acknowledged,
    checksum_failure_at_the_tail_is_corruption,
    corruption_in_the_middle_refuses_to_open,
    stale_writer_is_fenced,
    unknown_format_version_is_refused,
    read_only_open_reads_and_changes_nothing,
    purge_reclaims_space,
    concurrent_opens_leave_one_writer,
    damaged_snapshot_is_reported,
    append_latency,
);
