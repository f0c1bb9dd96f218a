//! Stream credit (`credit`): a stream never sends more elements than its reader
//! granted, each later request message grants more, and a malformed one ends
//! the stream with a clear status after what was granted.

use std::time::Duration;

use bytes::{Buf, Bytes};
use http_body_util::{BodyExt, Full};
use prost::Message;
use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::body::Body;
use tonic::transport::Channel;
use tonic::{Code, Status, Streaming};
use tower::Service;

use super::fixtures::{connect, grpc_frame, read_to_end, request, start_worker};
use super::mock_dispatcher::{task_def, MockDispatcher, WAIT};
use crate::route::GET_ELEMENTS_PATH;

const OFF: pb::ProcessingMode = pb::ProcessingMode::Off;

fn grant(elements: u32) -> pb::GetElementsRequest {
    pb::GetElementsRequest { credit_elements: elements, ..Default::default() }
}

/// Elements read from `stream` until `until` in all; the total.
async fn read_until(
    stream: &mut Streaming<pb::ElementBatch>,
    mut got: usize,
    until: usize,
) -> usize {
    while got < until {
        let batch = stream.message().await.expect("a message").expect("not the end");
        got += batch.elements.len();
    }
    got
}

#[tokio::test]
async fn a_stream_sends_no_more_elements_than_its_reader_granted() {
    let dispatcher = MockDispatcher::start(vec![task_def(2, &DatasetDef::range(50), OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;
    let first = pb::GetElementsRequest { credit_elements: 3, ..request(2, 0, 0) };
    // Retried the way a client does while the worker learns its task.
    let deadline = tokio::time::Instant::now() + WAIT;
    let (grants, mut stream) = loop {
        let (grants, requests) = mpsc::channel(4);
        grants.send(first.clone()).await.expect("queued");
        match client.get_elements(ReceiverStream::new(requests)).await {
            Err(s) if s.code() == Code::Unavailable && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            other => break (grants, other.expect("opens").into_inner()),
        }
    };
    // Without credit the first message would hold 50 (the worker's 64 a message).
    assert_eq!(read_until(&mut stream, 0, 3).await, 3, "no more than the first grant");
    grants.send(grant(4)).await.expect("queued");
    assert_eq!(read_until(&mut stream, 3, 7).await, 7, "no more than the next grant");
    grants.send(grant(100)).await.expect("queued");
    let rest = read_to_end(stream).await;
    assert!(rest.error.is_none() && rest.end_of_sequence, "{rest:?}");
    assert_eq!(rest.values, (7..50).collect::<Vec<_>>());
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

#[tokio::test]
async fn a_malformed_grant_ends_the_stream_after_what_was_granted() {
    let dispatcher = MockDispatcher::start(vec![task_def(2, &DatasetDef::range(50), OFF)]).await;
    let worker = start_worker(&dispatcher).await;
    let first = pb::GetElementsRequest { credit_elements: 2, ..request(2, 0, 0) };
    let mut body = grpc_frame(&first.encode_to_vec());
    body.extend(grpc_frame(&[0xff, 0xff, 0xff]));
    let address = format!("http://{}", worker.address());
    let mut channel = Channel::from_shared(address.clone()).expect("uri").connect().await.unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    let (elements, status) = loop {
        let request = http::Request::post(format!("{address}{GET_ELEMENTS_PATH}"))
            .header(http::header::CONTENT_TYPE, "application/grpc")
            .header("te", "trailers")
            .body(Body::new(Full::new(Bytes::from(body.clone()))))
            .expect("request");
        std::future::poll_fn(|cx| channel.poll_ready(cx)).await.expect("channel ready");
        let answer = channel.call(request).await.expect("an HTTP answer");
        if let Some(status) = Status::from_header_map(answer.headers()) {
            assert_eq!(status.code(), Code::Unavailable, "{status:?}");
            assert!(tokio::time::Instant::now() < deadline, "the task never became known");
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        }
        let collected = answer.into_body().collect().await.expect("body");
        let status = Status::from_header_map(collected.trailers().expect("trailers")).unwrap();
        break (count_elements(collected.to_bytes()), status);
    };
    assert_eq!(elements, 2, "what was granted before the malformed message went out");
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("not a valid GetElementsRequest"), "{status:?}");
    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

/// The elements of a body's length-prefixed ElementBatch messages.
fn count_elements(mut data: Bytes) -> usize {
    let mut elements = 0;
    while data.has_remaining() {
        let _compressed = data.get_u8();
        let len = data.get_u32() as usize;
        elements += pb::ElementBatch::decode(data.split_to(len)).expect("a batch").elements.len();
    }
    elements
}
