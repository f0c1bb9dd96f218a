//! A snapshot being encoded must not stop readers: the write that waits for it
//! waits on `encoding`, not on the std lock (behind which new readers queue).

use std::time::Duration;

use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

use super::*;
use crate::command::Command;
use crate::raft::codec::decode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_apply_waiting_for_a_snapshot_blocks_no_reader() {
    let (journal, _) = sluice_journal::open("memory://sm-encoding").await.unwrap();
    let sm = StateMachine::open(journal).await.unwrap();
    let shared = sm.shared();
    // As `build_snapshot` holds them while it encodes (the lock on a thread of
    // its own, as the blocking encoder does).
    let encoding = shared.encoding.clone().read_owned().await;
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (held, holding) = std::sync::mpsc::channel::<()>();
    let snapshot = std::thread::spawn({
        let shared = shared.clone();
        move || {
            let _read = shared.read();
            held.send(()).unwrap();
            let _ = released.recv();
        }
    });
    holding.recv().unwrap();

    let mut applier = sm.clone();
    let apply = tokio::spawn(async move {
        let entry = Entry::<TypeConfig> {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), 1),
            payload: EntryPayload::Normal(Command::ReleaseClient { client_id: 7 }),
        };
        applier.apply(vec![entry]).await.unwrap();
    });
    // Until the apply is waiting for the snapshot (a condition with a deadline).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while shared.waited_for_snapshots.load(Ordering::Relaxed) == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the apply never waited for the snapshot");
        tokio::task::yield_now().await;
    }
    // A reader now is served: no writer waits on the std lock (it would queue
    // every new reader behind it, and each handler's thread with them).
    let reader = std::thread::spawn({
        let shared = shared.clone();
        move || shared.read().last_applied
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !reader.is_finished() {
        assert!(std::time::Instant::now() < deadline, "a reader waited behind the apply");
        std::thread::yield_now();
    }
    assert_eq!(reader.join().unwrap(), None, "the apply waits until the snapshot is done");
    assert!(!apply.is_finished());

    release.send(()).unwrap();
    snapshot.join().unwrap();
    drop(encoding);
    apply.await.unwrap();
    assert_eq!(shared.read().last_applied.map(|l| l.index), Some(1));
}

fn entry(index: u64) -> Entry<TypeConfig> {
    Entry::<TypeConfig> {
        log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
        payload: EntryPayload::Normal(Command::ReleaseClient { client_id: 7 }),
    }
}

/// A snapshot encodes a copy of the state taken under the lock, so applies (and the
/// grants they answer) go on while it encodes: before, they waited for the whole
/// encoding (33–300 ms at 2,000 workers, the scale bench's grant p99).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applies_go_on_while_a_snapshot_encodes_its_copy_of_the_state() {
    let (journal, _) = sluice_journal::open("memory://sm-copy").await.unwrap();
    let mut sm = StateMachine::open(journal).await.unwrap();
    let shared = sm.shared();
    sm.apply(vec![entry(1)]).await.unwrap();

    // The encoding is held until released.
    let (reached, reaching) = std::sync::mpsc::channel::<()>();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let (reached, released) = (std::sync::Mutex::new(reached), std::sync::Mutex::new(released));
    sm.encode_hook = EncodeHook(Some(Arc::new(move || {
        reached.lock().unwrap().send(()).unwrap();
        let _ = released.lock().unwrap().recv();
    })));
    let mut builder = sm.clone();
    let build = tokio::spawn(async move { builder.build_snapshot().await.unwrap() });
    tokio::task::spawn_blocking(move || reaching.recv_timeout(Duration::from_secs(30)))
        .await
        .unwrap()
        .expect("the snapshot never reached its encoding");

    // An apply now finishes while the encoding is held (a deadline, not a sleep).
    tokio::time::timeout(Duration::from_secs(30), sm.apply(vec![entry(2)]))
        .await
        .expect("the apply waited for the snapshot's encoding")
        .unwrap();
    assert_eq!(shared.read().last_applied.map(|l| l.index), Some(2));
    assert_eq!(shared.waited_for_snapshots.load(Ordering::Relaxed), 0);

    // The snapshot is the state as copied: before the second apply.
    release.send(()).unwrap();
    let snapshot = build.await.unwrap();
    assert_eq!(snapshot.meta.last_log_id.map(|l| l.index), Some(1));
    let body: Applied = decode(snapshot.snapshot.get_ref()).unwrap();
    assert_eq!(body.last_applied.map(|l| l.index), Some(1));
}
