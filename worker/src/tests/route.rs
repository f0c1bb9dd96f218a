//! GetElements as the worker serves it (`route`): the response body sends large
//! tensor data as the tensors' own memory and ends with the status in trailers;
//! requests a tonic client would not send get a clear status.

use std::future::poll_fn;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use prost::Message;
use sluice_dataset::{DatasetDef, Element};
use sluice_proto::v1 as pb;
use tokio::sync::mpsc;
use tonic::body::Body;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tower::Service;

use super::fixtures::{connect, grpc_frame, open_stream, read_to_end, request, start_worker};
use super::mock_dispatcher::{task_def, MockDispatcher};
use crate::route::body::response;
use crate::route::GET_ELEMENTS_PATH;
use crate::scatter::ZERO_COPY_MIN_BYTES;
use crate::WorkerHandle;

const OFF: pb::ProcessingMode = pb::ProcessingMode::Off;

fn image_batch(len: usize, end_of_sequence: bool) -> pb::ElementBatch {
    let pixels = Bytes::from(vec![7u8; len]);
    let label = Bytes::from(3i64.to_le_bytes().to_vec());
    let tensor = |dtype: pb::DType, data| pb::Tensor { dtype: dtype as i32, shape: vec![], data };
    pb::ElementBatch {
        elements: vec![pb::Element {
            components: vec![tensor(pb::DType::Uint8, pixels), tensor(pb::DType::Int64, label)],
            names: vec!["image".into(), "label".into()],
            ..Default::default()
        }],
        end_of_sequence,
        compressed: None,
        positions: None,
        split: None,
    }
}

/// The frames of a body: its data frames, and its trailers.
async fn frames(mut body: Body) -> (Vec<Bytes>, http::HeaderMap) {
    let mut data = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.expect("body frame");
        match frame.into_data() {
            Ok(chunk) => data.push(chunk),
            Err(frame) => {
                let trailers = frame.into_trailers().expect("data or trailers");
                assert!(body.frame().await.is_none(), "nothing after the trailers");
                return (data, trailers);
            }
        }
    }
    panic!("the body ended without trailers");
}

#[tokio::test]
async fn body_sends_each_message_as_chunks_sharing_the_tensor_memory() {
    let (tx, rx) = mpsc::channel(2);
    let first = image_batch(1 << 20, false);
    let last = image_batch(2 * ZERO_COPY_MIN_BYTES, true);
    let pixels: Vec<*const u8> =
        [&first, &last].iter().map(|b| b.elements[0].components[0].data.as_ptr()).collect();
    let mut expected = grpc_frame(&first.encode_to_vec());
    expected.extend(grpc_frame(&last.encode_to_vec()));
    tx.send(Ok(first)).await.expect("send");
    tx.send(Ok(last)).await.expect("send");
    drop(tx); // the producer ends after end_of_sequence

    let answer = response(rx);
    assert_eq!(answer.status(), http::StatusCode::OK);
    assert_eq!(answer.headers()[http::header::CONTENT_TYPE], "application/grpc");
    let (data, trailers) = frames(answer.into_body()).await;
    assert_eq!(data.concat(), expected, "the bytes tonic would have sent");
    for pixels in pixels {
        assert!(data.iter().any(|c| c.as_ptr() == pixels), "tensor data was copied");
    }
    assert_eq!(trailers["grpc-status"], "0");
}

#[tokio::test]
async fn body_ends_with_the_stream_error_in_trailers() {
    let (tx, rx) = mpsc::channel(2);
    let batch = image_batch(100, false);
    let expected = grpc_frame(&batch.encode_to_vec());
    tx.send(Ok(batch)).await.expect("send");
    tx.send(Err(Status::failed_precondition("task 8 was deleted: 100% gone"))).await.expect("send");

    let (data, trailers) = frames(response(rx).into_body()).await;
    assert_eq!(data.concat(), expected);
    let status = Status::from_header_map(&trailers).expect("a status in the trailers");
    assert_eq!(status.code(), Code::FailedPrecondition);
    assert_eq!(status.message(), "task 8 was deleted: 100% gone");
    assert!(tx.is_closed(), "the body let go of the stream's channel");
}

#[tokio::test]
async fn large_elements_reach_a_standard_client_intact() {
    let values: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 3 * ZERO_COPY_MIN_BYTES + 17]).collect();
    let dispatcher =
        MockDispatcher::start(vec![task_def(1, &DatasetDef::from_bytes(values.clone()), OFF)])
            .await;
    let worker = start_worker(&dispatcher).await;
    let mut client = connect(&worker).await;

    let mut stream = open_stream(&mut client, request(1, 4, 0)).await.expect("opens");
    let mut got = Vec::new();
    let mut ended = false;
    while let Some(batch) = stream.message().await.expect("stream ok") {
        for element in batch.elements {
            let element = Element::try_from(element).expect("element");
            got.push(element.components[0].items().expect("bytes items")[0].to_vec());
        }
        ended = batch.end_of_sequence;
    }
    assert!(ended, "the stream ends with end_of_sequence");
    assert_eq!(got, values);

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}

/// Sends `body` as a GetElements request and returns the call's status (from a
/// trailers-only response, or the trailers after the data).
async fn raw_get_elements(worker: &WorkerHandle, body: Vec<u8>) -> Status {
    let address = format!("http://{}", worker.address());
    let mut channel =
        Channel::from_shared(address.clone()).expect("uri").connect().await.expect("connect");
    let request = http::Request::post(format!("{address}{GET_ELEMENTS_PATH}"))
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header("te", "trailers")
        .body(Body::new(Full::new(Bytes::from(body))))
        .expect("request");
    poll_fn(|cx| channel.poll_ready(cx)).await.expect("channel ready");
    let answer = channel.call(request).await.expect("an HTTP answer");
    assert_eq!(answer.status(), http::StatusCode::OK);
    if let Some(status) = Status::from_header_map(answer.headers()) {
        return status;
    }
    let collected = answer.into_body().collect().await.expect("body");
    Status::from_header_map(collected.trailers().expect("trailers")).expect("a status")
}

#[tokio::test]
async fn malformed_requests_get_a_clear_status_and_the_worker_keeps_serving() {
    let dispatcher = MockDispatcher::start(vec![task_def(2, &DatasetDef::range(50), OFF)]).await;
    let worker = start_worker(&dispatcher).await;

    let not_protobuf = grpc_frame(&[0xff, 0xff, 0xff]);
    let status = raw_get_elements(&worker, not_protobuf).await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("not a valid GetElementsRequest"), "{status:?}");

    let mut compressed = grpc_frame(&request(2, 0, 0).encode_to_vec());
    compressed[0] = 1;
    let status = raw_get_elements(&worker, compressed).await;
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert!(status.message().contains("must not be compressed"), "{status:?}");

    // Refused from the prefix alone: the claimed megabyte is never read.
    let oversized = vec![0, 0, 0x10, 0, 0];
    let status = raw_get_elements(&worker, oversized).await;
    assert_eq!(status.code(), Code::OutOfRange, "{status:?}");
    assert!(status.message().contains("request too large: found 1048576 bytes"), "{status:?}");

    let mut truncated = grpc_frame(&request(2, 0, 0).encode_to_vec());
    truncated.pop();
    let status = raw_get_elements(&worker, truncated).await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("request ended after"), "{status:?}");

    let status = raw_get_elements(&worker, Vec::new()).await;
    assert_eq!(status.code(), Code::Internal, "{status:?}");
    assert!(status.message().contains("has no message"), "{status:?}");

    tracing::info!("--- a well-formed raw request streams, and so does a tonic client");
    let status = raw_get_elements(&worker, grpc_frame(&request(99, 0, 0).encode_to_vec())).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    let mut client = connect(&worker).await;
    let got = read_to_end(open_stream(&mut client, request(2, 0, 0)).await.expect("opens")).await;
    assert!(got.error.is_none() && got.end_of_sequence, "{got:?}");
    assert_eq!(got.values, (0..50).collect::<Vec<_>>());

    worker.shutdown().await.expect("worker stops");
    dispatcher.shutdown().await;
}
