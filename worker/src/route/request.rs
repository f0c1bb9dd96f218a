//! Reading a GetElements request: length-prefixed gRPC messages, uncompressed,
//! each of bounded size (a request is a few ids and bounds; a peer must not make
//! the worker buffer more). The first opens the stream; later ones grant credit
//! (`credit`).

use bytes::{Buf, BytesMut};
use http_body_util::BodyExt;
use prost::Message;
use sluice_proto::v1 as pb;
use thiserror::Error;
use tonic::body::Body;
use tonic::Status;

use sluice_proto::contract::element_route::{
    MAX_REQUEST_BYTES, MESSAGE_PREFIX_BYTES as GRPC_HEADER_BYTES,
};

/// Why a GetElements request was refused.
#[derive(Debug, Error)]
pub(crate) enum BadRequest {
    #[error(
        "GetElements requests must not be compressed (the message's compressed flag is set); \
         send it uncompressed"
    )]
    Compressed,
    #[error("GetElements request too large: found {len} bytes, the limit is: {limit} bytes")]
    TooLarge { len: usize, limit: usize },
    #[error("GetElements request ended after {got} of its {expected} bytes")]
    Truncated { got: usize, expected: usize },
    #[error("GetElements request has no message")]
    Missing,
    #[error("GetElements request is not a valid GetElementsRequest: {0}")]
    Decode(#[from] prost::DecodeError),
    /// Reading the request body failed (e.g. the client reset the stream).
    #[error("reading the GetElements request failed: {0}")]
    Body(Status),
}

impl From<BadRequest> for Status {
    fn from(bad: BadRequest) -> Status {
        match bad {
            BadRequest::Body(status) => status,
            BadRequest::Compressed => Status::unimplemented(bad.to_string()),
            BadRequest::TooLarge { .. } => Status::out_of_range(bad.to_string()),
            BadRequest::Truncated { .. } | BadRequest::Missing | BadRequest::Decode(_) => {
                Status::internal(bad.to_string())
            }
        }
    }
}

/// The messages of a GetElements request body, one at a time: the first opens
/// the stream, later ones carry credit (`credit`).
pub(crate) struct Requests {
    body: Body,
    /// Received bytes not yet decoded: at most one message (bounded by
    /// `MAX_REQUEST_BYTES`, checked on its prefix) and the rest of one frame.
    buf: BytesMut,
}

impl Requests {
    /// The next message; `Ok(None)` when the body ends between messages.
    pub(crate) async fn next(&mut self) -> Result<Option<pb::GetElementsRequest>, BadRequest> {
        loop {
            if let Some(expected) = message_len(&self.buf)? {
                if self.buf.len() >= expected {
                    let mut message = self.buf.split_to(expected);
                    message.advance(GRPC_HEADER_BYTES);
                    return Ok(Some(pb::GetElementsRequest::decode(message.freeze())?));
                }
            }
            let frame = match self.body.frame().await {
                Some(frame) => frame.map_err(BadRequest::Body)?,
                None if self.buf.is_empty() => return Ok(None),
                None => {
                    let expected = message_len(&self.buf)?.unwrap_or(GRPC_HEADER_BYTES);
                    return Err(BadRequest::Truncated { got: self.buf.len(), expected });
                }
            };
            if let Ok(data) = frame.into_data() {
                self.buf.extend_from_slice(&data);
            }
        }
    }
}

/// Reads `body` until its first message is complete, and decodes it; the rest of
/// the body follows in the returned [`Requests`].
pub(crate) async fn read(body: Body) -> Result<(pb::GetElementsRequest, Requests), BadRequest> {
    let mut requests = Requests { body, buf: BytesMut::new() };
    match requests.next().await? {
        Some(first) => Ok((first, requests)),
        None => Err(BadRequest::Missing),
    }
}

impl Requests {
    /// The later messages as a stream, ending at the first error (`Grants::feed`).
    pub(crate) fn into_stream(
        self,
    ) -> impl futures::Stream<Item = Result<pb::GetElementsRequest, Status>> {
        futures::stream::unfold(Some(self), |requests| async move {
            let mut requests = requests?;
            match requests.next().await {
                Ok(Some(message)) => Some((Ok(message), Some(requests))),
                Ok(None) => None,
                Err(bad) => Some((Err(bad.into()), None)),
            }
        })
    }
}

/// The length of the first message with its prefix, once the prefix is in `buf`.
fn message_len(buf: &[u8]) -> Result<Option<usize>, BadRequest> {
    let Some(prefix) = buf.get(..GRPC_HEADER_BYTES) else { return Ok(None) };
    if prefix[0] != 0 {
        return Err(BadRequest::Compressed);
    }
    let len = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize;
    if len > MAX_REQUEST_BYTES {
        return Err(BadRequest::TooLarge { len, limit: MAX_REQUEST_BYTES });
    }
    Ok(Some(GRPC_HEADER_BYTES + len))
}
