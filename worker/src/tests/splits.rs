//! `RemoteSplitProvider` on its own, driven from a blocking thread as the pipeline
//! thread drives it.

use std::time::Duration;

use sluice_client::{DispatcherClient, RetryPolicy};
use sluice_dataset::{SplitProvider, SplitRange};
use tokio::runtime::Handle;
use tokio::sync::watch;

use super::mock_dispatcher::{MockDispatcher, WAIT};
use crate::buffer::StopReason;
use crate::splits::RemoteSplitProvider;

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
    // (sequence, repetition): the failed first attempt is resent with the same key.
    assert_eq!(dispatcher.split_requests(), vec![(0, 0), (0, 0), (1, 0), (2, 1)]);
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
