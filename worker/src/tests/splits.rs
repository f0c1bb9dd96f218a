//! `RemoteSplitProvider` on its own, driven from a blocking thread as the pipeline
//! thread drives it.

use std::time::Duration;

use sluice_client::{DispatcherClient, RetryPolicy};
use sluice_dataset::{SplitProvider, SplitRange};
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::mock_dispatcher::{MockDispatcher, WAIT};
use crate::buffer::StopReason;
use crate::splits::{GrantSize, RemoteSplitProvider};

fn provider(
    dispatcher: &MockDispatcher,
    policy: RetryPolicy,
) -> (RemoteSplitProvider, watch::Sender<Option<StopReason>>) {
    let client = DispatcherClient::new(&[dispatcher.address()], policy).expect("client");
    let (stop, stopped) = watch::channel(None);
    (RemoteSplitProvider::new(client, Handle::current(), stopped, 7, 42, 0, 1), stop)
}

#[tokio::test]
async fn sequence_advances_per_answer_and_reset_advances_repetition() {
    let dispatcher = MockDispatcher::start(vec![]).await;
    dispatcher.set_splits(vec![(0, 10), (10, 20)]);
    dispatcher.fail_get_split_times(1);
    let (mut splits, _stop) = provider(&dispatcher, RetryPolicy::for_tests());

    let got = tokio::task::spawn_blocking(move || {
        let first = splits.next_split();
        let second = splits.next_split();
        splits.reset().expect("reset");
        // The mock ends every repetition after the first.
        let third = splits.next_split();
        (first, second, third)
    })
    .await
    .expect("provider thread");

    assert_eq!(got.0, Ok(Some(SplitRange { begin: 0, end: 10 })));
    assert_eq!(got.1, Ok(Some(SplitRange { begin: 10, end: 20 })));
    assert_eq!(got.2, Ok(None));
    // (sequence, repetition): the failed first attempt is resent with the same key;
    // once a grant was read, the next is asked ahead (2, 0), and the reset waits
    // for its answer before the next epoch's first request.
    assert_eq!(dispatcher.split_requests(), vec![(0, 0), (0, 0), (1, 0), (2, 0), (3, 1)]);
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn stopping_the_task_releases_a_waiting_split_request() {
    let dispatcher = MockDispatcher::start(vec![]).await;
    // Unavailable for longer than the test waits: only the stop can end the call.
    dispatcher.fail_get_split_times(u32::MAX);
    let policy = RetryPolicy::for_tests().with_deadline(Duration::from_secs(3600));
    let (mut splits, stop) = provider(&dispatcher, policy);

    let waiting = tokio::task::spawn_blocking(move || splits.next_split());
    dispatcher.wait_split_requests(1).await;
    stop.send_replace(Some(StopReason::Deleted));
    let result = tokio::time::timeout(WAIT, waiting).await.expect("released").expect("thread");
    assert!(
        matches!(&result, Err(sluice_dataset::DatasetError::Split(m)) if m.contains("stopped")),
        "{result:?}"
    );
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn stopping_the_task_ends_the_pause_after_a_wait_answer() {
    let dispatcher = MockDispatcher::start(vec![]).await;
    // Exactly-once: `wait` for longer than the test waits; only the stop ends it.
    dispatcher.answer_wait(u32::MAX);
    let (mut splits, stop) = provider(&dispatcher, RetryPolicy::for_tests());

    let waiting = tokio::task::spawn_blocking(move || splits.next_split());
    tracing::info!("--- two wait answers: the provider asks again after each pause");
    dispatcher.wait_split_requests(2).await;
    stop.send_replace(Some(StopReason::Deleted));
    let result = tokio::time::timeout(WAIT, waiting).await.expect("released").expect("thread");
    assert!(
        matches!(&result, Err(sluice_dataset::DatasetError::Split(m)) if m.contains("stopped")),
        "{result:?}"
    );
    let sequences = dispatcher.split_sequences();
    assert_eq!(sequences[..2], [0, 1], "each wait answer used its sequence");
    dispatcher.shutdown().await;
}

/// A provider whose grant window no pace on a loaded machine comes near: every
/// grant counts as fast, so asks and requests ahead do not depend on timing.
fn fast_provider(
    dispatcher: &MockDispatcher,
    cap: u32,
) -> (RemoteSplitProvider, watch::Sender<Option<StopReason>>, watch::Sender<bool>) {
    let client =
        DispatcherClient::new(&[dispatcher.address()], RetryPolicy::for_tests()).expect("client");
    let (stop, stopped) = watch::channel(None);
    let (drain, draining) = watch::channel(false);
    let size = GrantSize::new(cap).with_window(Duration::from_secs(3600));
    let splits = RemoteSplitProvider::new(client, Handle::current(), stopped, 7, 42, 0, cap)
        .draining(draining)
        .sized(size);
    (splits, stop, drain)
}

#[tokio::test]
async fn the_next_grant_is_asked_ahead_while_the_source_reads_and_asks_grow_to_the_cap() {
    let dispatcher = MockDispatcher::start(vec![]).await;
    dispatcher.set_splits((0..6).map(|i| (i, i + 1)).collect());
    let (mut splits, _stop, _drain) = fast_provider(&dispatcher, 32);

    let mut splits = tokio::task::spawn_blocking(move || {
        assert_eq!(splits.next_split(), Ok(Some(SplitRange { begin: 0, end: 1 })));
        assert_eq!(splits.next_split(), Ok(Some(SplitRange { begin: 1, end: 2 })));
        splits
    })
    .await
    .expect("provider thread");
    // The source holds split [1, 2) and has not asked again: the request for
    // the next grant is already out, with the next sequence.
    dispatcher.wait_split_requests(3).await;
    assert_eq!(dispatcher.split_sequences(), vec![0, 1, 2]);

    let rest = tokio::task::spawn_blocking(move || {
        let mut rest = Vec::new();
        while let Some(split) = splits.next_split().expect("a split") {
            rest.push(split.begin);
        }
        rest
    })
    .await
    .expect("provider thread");
    assert_eq!(rest, vec![2, 3, 4, 5]);
    // One split until a grant was read, then 4× per grant up to the cap.
    assert_eq!(dispatcher.split_asks(), vec![1, 4, 16, 32, 32, 32, 32]);
    assert_eq!(dispatcher.split_sequences(), (0..7).collect::<Vec<_>>());
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn a_grant_asked_ahead_is_read_when_the_worker_starts_draining_and_nothing_after() {
    let dispatcher = MockDispatcher::start(vec![]).await;
    dispatcher.set_splits((0..6).map(|i| (i, i + 1)).collect());
    let (mut splits, _stop, drain) = fast_provider(&dispatcher, 8);

    let got = tokio::task::spawn_blocking(move || {
        let mut got = vec![splits.next_split(), splits.next_split()];
        // Split [2, 3) was asked ahead before the drain: the dispatcher handed it
        // out, so the source reads it; then it takes nothing more.
        drain.send_replace(true);
        got.push(splits.next_split());
        got.push(splits.next_split());
        got
    })
    .await
    .expect("provider thread");
    assert_eq!(
        got,
        vec![
            Ok(Some(SplitRange { begin: 0, end: 1 })),
            Ok(Some(SplitRange { begin: 1, end: 2 })),
            Ok(Some(SplitRange { begin: 2, end: 3 })),
            Ok(None),
        ]
    );
    assert_eq!(dispatcher.split_sequences(), vec![0, 1, 2], "no request after the drain");
    dispatcher.shutdown().await;
}
