//! Remote failures on a real S3 server (moto): what the journal does when the store goes away.

use std::time::Duration;

use bytes::Bytes;
use sluice_journal::testing::MotoServer;
use sluice_journal::{open_with, JournalError, OpenOptions};

#[tokio::test]
async fn an_outage_is_a_retryable_error_then_the_handle_refuses_writes() {
    // Its own server: this test kills it.
    let moto = MotoServer::start();
    let options = OpenOptions { op_timeout: Duration::from_secs(2), attempts: 2, ..moto.options() };
    let location = format!("s3://{}/outage", moto.bucket());
    let (j, _) = open_with(&location, &options).await.unwrap();
    j.append(vec![(1, Bytes::from_static(b"one"))]).await.unwrap();

    tracing::info!("--- the store goes away");
    drop(moto);
    let err = j.append(vec![(2, Bytes::from_static(b"two"))]).await.unwrap_err();
    assert!(matches!(err, JournalError::Io { retryable: true, .. }), "{err}");
    assert!(err.to_string().contains(&location), "{err}");

    // Whether that PUT landed is unknown: no more writes until a reopen recovers the truth.
    let err = j.append(vec![(2, Bytes::from_static(b"two"))]).await.unwrap_err();
    assert!(matches!(err, JournalError::Io { retryable: false, .. }), "{err}");
    assert!(err.to_string().contains("reopen"), "{err}");
    // Reads are served from what is known to be durable.
    assert_eq!(j.read(0, 10).await.unwrap(), vec![(1, Bytes::from_static(b"one"))]);
    assert_eq!(j.state().await.unwrap().last_index, Some(1));
}

#[tokio::test]
async fn opening_against_a_dead_server_fails_retryably() {
    let moto = MotoServer::start();
    let options = OpenOptions { op_timeout: Duration::from_secs(2), attempts: 2, ..moto.options() };
    let location = format!("s3://{}/dead", moto.bucket());
    drop(moto);
    match open_with(&location, &options).await {
        Err(err @ JournalError::Io { retryable: true, .. }) => {
            assert!(err.to_string().contains(&location), "{err}")
        }
        Err(other) => panic!("expected a retryable Io error, got {other}"),
        Ok(_) => panic!("opened against a dead server"),
    }
}
