//! Entry point for the GetElements request fuzz target (`fuzz/`) and its corpus-replay
//! test (`tests/fuzz_corpus.rs`); feature `fuzzing`, not an API.
//!
//! Why here: the route's request reader (`route::request`) is crate-private, and the
//! replay test that CI runs on stable must call exactly what the fuzzer called.

use bytes::Bytes;
use http_body::Frame;
use tonic::body::Body;
use tonic::Status;

use crate::route::request;

/// A GetElements request body as the worker's route reads it: the input cut into DATA
/// frames, optionally ending in trailers or a body error, through `request::read` and
/// the later messages that grant credit, and a refusal into the status the client
/// would get. Input: as
/// `sluice_client::fuzzing::grpc_body` reads it (mode bit 0: a message prefix, frame
/// size 0: one frame); mode bit 1 ends the body with trailers, bit 2 with an error.
pub fn get_elements_request(data: &[u8]) {
    let Some((mode, wire, step)) = sluice_client::fuzzing::grpc_body(data) else { return };
    let mut frames: Vec<Result<Frame<Bytes>, Status>> =
        wire.chunks(step).map(|c| Ok(Frame::data(Bytes::copy_from_slice(c)))).collect();
    if mode & 2 == 2 {
        frames.push(Ok(Frame::trailers(http::HeaderMap::new())));
    }
    if mode & 4 == 4 {
        frames.push(Err(Status::cancelled("the client reset the stream")));
    }
    let body = Body::new(http_body_util::StreamBody::new(futures::stream::iter(frames)));
    // The first message, then every later one (stream credit) until the body ends.
    let read_all = async {
        let (_, mut rest) = request::read(body).await?;
        while rest.next().await?.is_some() {}
        Ok::<(), request::BadRequest>(())
    };
    if let Err(bad) = futures::executor::block_on(read_all) {
        let status = Status::from(bad);
        assert!(!status.message().is_empty(), "a refusal says why");
    }
}
