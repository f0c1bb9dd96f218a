//! Reading a GetElements request: one length-prefixed gRPC message, uncompressed,
//! of bounded size (a request is a few ids and bounds; a peer must not make the
//! worker buffer more).

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

/// Reads `body` until its first message is complete, and decodes it.
pub(crate) async fn read(mut body: Body) -> Result<pb::GetElementsRequest, BadRequest> {
    let mut buf = BytesMut::new();
    loop {
        if let Some(expected) = message_len(&buf)? {
            if buf.len() >= expected {
                buf.advance(GRPC_HEADER_BYTES);
                buf.truncate(expected - GRPC_HEADER_BYTES);
                return Ok(pb::GetElementsRequest::decode(buf.freeze())?);
            }
        }
        let frame = match body.frame().await {
            Some(frame) => frame.map_err(BadRequest::Body)?,
            None if buf.is_empty() => return Err(BadRequest::Missing),
            None => {
                let expected = message_len(&buf)?.unwrap_or(GRPC_HEADER_BYTES);
                return Err(BadRequest::Truncated { got: buf.len(), expected });
            }
        };
        if let Ok(data) = frame.into_data() {
            // Never more than the largest message: the rest is not read anyway.
            let room = (GRPC_HEADER_BYTES + MAX_REQUEST_BYTES).saturating_sub(buf.len());
            buf.extend_from_slice(&data[..data.len().min(room)]);
        }
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
