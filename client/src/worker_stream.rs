//! `GetElements` read without copying element bytes.
//!
//! tonic's generated client gathers every HTTP/2 DATA frame into one buffer before
//! decoding a message, a copy of each element's bytes on top of the kernel's. For
//! 1 MiB tensors that copy (and the fresh buffer it fills) was a quarter of the
//! reader's CPU (docs/performance.md). This module speaks the same gRPC protocol
//! over the same tonic [`Channel`]: one request message, a stream of
//! length-prefixed `ElementBatch` messages, a `grpc-status` trailer. It keeps a
//! message's DATA frames as the `Bytes` h2 read them and decodes from that chain
//! ([`Chunks`]), so a tensor that lies inside one frame (a worker writes large
//! tensors as frames of their own) becomes a slice of the frame, not a copy; only
//! bytes that straddle frames are copied.
//!
//! Error mapping follows tonic's: transport errors through [`Status::from_error`],
//! a `grpc-status` in the headers (trailers-only answer) or the trailers, an HTTP
//! status without one by the gRPC HTTP mapping.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use sluice_proto::v1 as pb;
use sluice_proto::MAX_MESSAGE_BYTES;
use sluice_security::Bearer;
use tonic::transport::Channel;
use tonic::{Code, Status};
use tower::Service;

use crate::stream_credit::{framed, CreditBack, RequestBody, Shared};
use sluice_proto::contract::element_route::{MESSAGE_PREFIX_BYTES as PREFIX, PATH};

/// Opens a `GetElements` stream on `channel` (lazy channels connect here).
pub(crate) async fn get_elements(
    channel: &Channel,
    bearer: &Bearer,
    req: &pb::GetElementsRequest,
) -> Result<BatchStream, Status> {
    let first = framed(req);
    let credit = (req.credit_elements > 0).then(|| Arc::new(Shared::default()));
    let body = match &credit {
        Some(shared) => tonic::body::Body::new(RequestBody::new(first, shared.clone())),
        None => tonic::body::Body::new(http_body_util::Full::new(first)),
    };
    let mut request = http::Request::builder()
        .method(http::Method::POST)
        .uri(PATH)
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .body(body)
        .map_err(|e| Status::internal(format!("building the GetElements request: {e}")))?;
    bearer.apply(&mut request);
    let mut channel = channel.clone();
    std::future::poll_fn(|cx| channel.poll_ready(cx))
        .await
        .map_err(|e| Status::from_error(Box::new(e)))?;
    let response = channel.call(request).await.map_err(|e| Status::from_error(Box::new(e)))?;
    let (parts, body) = response.into_parts();
    // A trailers-only answer (an error before any message) has its status here.
    if let Some(status) = Status::from_header_map(&parts.headers) {
        if status.code() != Code::Ok {
            return Err(status);
        }
    }
    if parts.status != http::StatusCode::OK {
        return Err(from_http_status(parts.status));
    }
    Ok(BatchStream { body, chunks: Chunks::default(), ended: false, credit })
}

/// The messages of one `GetElements` answer.
pub(crate) struct BatchStream {
    body: tonic::body::Body,
    chunks: Chunks,
    ended: bool,
    /// The stream's credit, when the request granted some: its request ends
    /// when this stream is dropped.
    credit: Option<Arc<Shared>>,
}

impl Drop for BatchStream {
    fn drop(&mut self) {
        if let Some(credit) = &self.credit {
            credit.close();
        }
    }
}

impl BatchStream {
    /// Credit for a message of `elements`, to travel with them: granted to the
    /// worker again once the reader takes the message (nothing without credit).
    pub(crate) fn credit_back(&self, elements: usize) -> CreditBack {
        self.credit.as_ref().map(|c| c.back(elements)).unwrap_or_default()
    }

    /// The next batch; `Ok(None)` once the worker ended the call with status OK.
    pub(crate) async fn message(&mut self) -> Result<Option<pb::ElementBatch>, Status> {
        loop {
            if let Some(message) = self.chunks.next_message()? {
                return pb::ElementBatch::decode(message)
                    .map(Some)
                    .map_err(|e| Status::internal(format!("malformed ElementBatch: {e}")));
            }
            if self.ended {
                return Ok(None);
            }
            match self.body.frame().await {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => self.chunks.push(data),
                    Err(frame) => {
                        let Ok(trailers) = frame.into_trailers() else { continue };
                        self.ended = true;
                        match Status::from_header_map(&trailers) {
                            Some(s) if s.code() == Code::Ok => {}
                            Some(s) => return Err(s),
                            None => return Err(Status::unknown("trailers without grpc-status")),
                        }
                        if self.chunks.len > 0 {
                            return Err(Status::internal(format!(
                                "the call ended inside a message ({} bytes left over)",
                                self.chunks.len
                            )));
                        }
                    }
                },
                Some(Err(e)) => return Err(Status::from_error(e.into())),
                // A body that ends without a status is a protocol violation (as in tonic).
                None => return Err(Status::unknown("the call ended without a grpc-status")),
            }
        }
    }
}

/// The gRPC code for an HTTP status without `grpc-status` (gRPC's HTTP mapping).
fn from_http_status(status: http::StatusCode) -> Status {
    let code = match status {
        http::StatusCode::BAD_REQUEST => Code::Internal,
        http::StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        http::StatusCode::FORBIDDEN => Code::PermissionDenied,
        http::StatusCode::NOT_FOUND => Code::Unimplemented,
        http::StatusCode::TOO_MANY_REQUESTS
        | http::StatusCode::BAD_GATEWAY
        | http::StatusCode::SERVICE_UNAVAILABLE
        | http::StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
        _ => Code::Unknown,
    };
    Status::new(code, format!("GetElements answered HTTP {status} without a gRPC status"))
}

/// Received DATA frames not yet decoded, in order, as h2 delivered them.
#[derive(Default)]
pub(crate) struct Chunks {
    frames: VecDeque<Bytes>,
    /// Bytes in `frames`.
    len: usize,
}

impl Chunks {
    pub(crate) fn push(&mut self, data: Bytes) {
        if !data.is_empty() {
            self.len += data.len();
            self.frames.push_back(data);
        }
    }

    /// The next complete message, as a buffer over the frames that hold it.
    pub(crate) fn next_message(&mut self) -> Result<Option<MessageBuf>, Status> {
        if self.len < PREFIX {
            return Ok(None);
        }
        let mut prefix = [0u8; PREFIX];
        let mut at = 0;
        for frame in &self.frames {
            let n = frame.len().min(PREFIX - at);
            prefix[at..at + n].copy_from_slice(&frame[..n]);
            at += n;
            if at == PREFIX {
                break;
            }
        }
        if prefix[0] != 0 {
            return Err(Status::internal(
                "the worker sent a compressed message, but none was asked for",
            ));
        }
        let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
        if len > MAX_MESSAGE_BYTES {
            return Err(Status::out_of_range(format!(
                "a GetElements message of {len} bytes exceeds the limit of {MAX_MESSAGE_BYTES}"
            )));
        }
        if self.len < PREFIX + len {
            return Ok(None);
        }
        self.take(PREFIX);
        let frames = self.take(len);
        Ok(Some(MessageBuf { frames, remaining: len }))
    }

    /// Removes the first `n` bytes (all present) as frames, splitting the last.
    fn take(&mut self, mut n: usize) -> VecDeque<Bytes> {
        self.len -= n;
        let mut out = VecDeque::new();
        while n > 0 {
            let Some(front) = self.frames.front_mut() else { break };
            if front.len() <= n {
                n -= front.len();
                out.extend(self.frames.pop_front());
            } else {
                out.push_back(front.split_to(n));
                n = 0;
            }
        }
        out
    }
}

/// One message as a [`Buf`] over its frames. `copy_to_bytes` (what prost calls for
/// a `bytes` field) returns a slice of the frame when the field lies in one frame.
pub(crate) struct MessageBuf {
    frames: VecDeque<Bytes>,
    remaining: usize,
}

impl Buf for MessageBuf {
    fn remaining(&self) -> usize {
        self.remaining
    }

    fn chunk(&self) -> &[u8] {
        self.frames.front().map_or(&[], |f| f.as_ref())
    }

    fn advance(&mut self, mut cnt: usize) {
        assert!(cnt <= self.remaining, "advance past the end of the message");
        self.remaining -= cnt;
        while cnt > 0 {
            let front = self.frames.front_mut().expect("remaining counts the frames");
            if front.len() <= cnt {
                cnt -= front.len();
                self.frames.pop_front();
            } else {
                front.advance(cnt);
                cnt = 0;
            }
        }
    }

    fn copy_to_bytes(&mut self, len: usize) -> Bytes {
        match self.frames.front_mut() {
            Some(front) if front.len() >= len => {
                assert!(len <= self.remaining, "copy_to_bytes past the end of the message");
                self.remaining -= len;
                let out = front.split_to(len);
                if front.is_empty() {
                    self.frames.pop_front();
                }
                out
            }
            // Straddles frames: gather (the only copy on this path).
            _ => {
                assert!(len <= self.remaining, "copy_to_bytes past the end of the message");
                let mut out = BytesMut::with_capacity(len);
                out.put((&mut *self).take(len));
                out.freeze()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(data: Vec<Bytes>) -> pb::ElementBatch {
        let elements = data
            .into_iter()
            .map(|d| pb::Element {
                components: vec![pb::Tensor {
                    dtype: pb::DType::Bytes as i32,
                    shape: vec![],
                    data: d,
                }],
                names: vec!["x".into()],
                ..Default::default()
            })
            .collect();
        pb::ElementBatch { elements, end_of_sequence: true, compressed: None, ..Default::default() }
    }

    /// gRPC framing of `m`.
    fn framed(m: &pb::ElementBatch) -> Vec<u8> {
        let body = m.encode_to_vec();
        let mut out = vec![0u8];
        out.extend_from_slice(&(body.len() as u32).to_be_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Feeds `wire` cut at `cuts` and decodes every message.
    fn decode_all(wire: &[u8], cuts: &[usize]) -> (Vec<pb::ElementBatch>, Vec<Bytes>) {
        let mut chunks = Chunks::default();
        let mut frames = Vec::new();
        let mut last = 0;
        for &c in cuts.iter().chain([wire.len()].iter()) {
            let frame = Bytes::copy_from_slice(&wire[last..c]);
            frames.push(frame.clone());
            chunks.push(frame);
            last = c;
        }
        let mut out = Vec::new();
        while let Some(m) = chunks.next_message().expect("well formed") {
            out.push(pb::ElementBatch::decode(m).expect("decodes"));
        }
        assert_eq!(chunks.len, 0, "nothing left over");
        (out, frames)
    }

    fn within(inner: &Bytes, outer: &Bytes) -> bool {
        let (i, o) = (inner.as_ptr() as usize, outer.as_ptr() as usize);
        i >= o && i + inner.len() <= o + outer.len()
    }

    #[test]
    fn a_tensor_inside_one_frame_is_a_slice_of_that_frame_not_a_copy() {
        let big = Bytes::from(vec![7u8; 100_000]);
        let m = batch(vec![big.clone(), Bytes::from_static(b"small")]);
        let wire = framed(&m);
        // One frame for the prefix and field headers, then the tensor's own frame
        // (as a worker writes it), then the rest.
        let start = wire.windows(16).position(|w| w == [7u8; 16]).expect("payload");
        let (out, frames) = decode_all(&wire, &[3, start, start + big.len()]);
        assert_eq!(out, vec![m]);
        let got = &out[0].elements[0].components[0].data;
        assert!(within(got, &frames[2]), "the 100 kB tensor must point into its frame");
    }

    #[test]
    fn messages_split_anywhere_decode_to_the_same_batches() {
        let a = batch(vec![Bytes::from(vec![1u8; 3000]), Bytes::from(vec![2u8; 10])]);
        let b = pb::ElementBatch {
            elements: vec![],
            end_of_sequence: true,
            compressed: None,
            ..Default::default()
        };
        let c = batch(vec![Bytes::from(vec![3u8; 5000])]);
        let mut wire = framed(&a);
        wire.extend(framed(&b));
        wire.extend(framed(&c));
        for step in [1usize, 2, 4, 5, 7, 999, 4096, wire.len()] {
            let cuts: Vec<usize> = (step..wire.len()).step_by(step).collect();
            let (out, _) = decode_all(&wire, &cuts);
            assert_eq!(out, vec![a.clone(), b.clone(), c.clone()], "frames of {step} bytes");
        }
    }

    #[test]
    fn an_incomplete_message_waits_for_more_frames() {
        let m = batch(vec![Bytes::from(vec![9u8; 50])]);
        let wire = framed(&m);
        let mut chunks = Chunks::default();
        chunks.push(Bytes::copy_from_slice(&wire[..3]));
        assert!(chunks.next_message().unwrap().is_none(), "prefix incomplete");
        chunks.push(Bytes::copy_from_slice(&wire[3..20]));
        assert!(chunks.next_message().unwrap().is_none(), "body incomplete");
        chunks.push(Bytes::copy_from_slice(&wire[20..]));
        let got = pb::ElementBatch::decode(chunks.next_message().unwrap().unwrap()).unwrap();
        assert_eq!(got, m);
    }

    #[test]
    fn compressed_or_oversized_messages_are_refused_naming_why() {
        let mut chunks = Chunks::default();
        chunks.push(Bytes::from_static(&[1, 0, 0, 0, 1, 0]));
        let e = chunks.next_message().err().expect("compressed");
        assert_eq!(e.code(), Code::Internal);
        assert!(e.message().contains("compressed"), "{}", e.message());

        let mut chunks = Chunks::default();
        let too_big = (MAX_MESSAGE_BYTES as u32 + 1).to_be_bytes();
        chunks.push(Bytes::from(vec![0, too_big[0], too_big[1], too_big[2], too_big[3]]));
        let e = chunks.next_message().err().expect("too large");
        assert_eq!(e.code(), Code::OutOfRange);
        assert!(e.message().contains("exceeds the limit"), "{}", e.message());
    }

    #[test]
    fn http_statuses_without_grpc_status_map_like_grpc() {
        assert_eq!(
            from_http_status(http::StatusCode::SERVICE_UNAVAILABLE).code(),
            Code::Unavailable
        );
        assert_eq!(from_http_status(http::StatusCode::NOT_FOUND).code(), Code::Unimplemented);
        assert_eq!(from_http_status(http::StatusCode::IM_A_TEAPOT).code(), Code::Unknown);
    }
}
