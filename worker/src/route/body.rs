//! The GetElements response: `200 application/grpc`, then for each message of the
//! stream's channel its `scatter` chunks as data frames, then the gRPC status in
//! trailers (`grpc-status: 0` when the channel closes, the error otherwise).
//!
//! Messages are encoded as the body is polled, so the channel (bounded, filled by
//! the stream's producer) stays the only buffer between the task and the socket,
//! apart from the chunks of the one message being written.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use bytes::Bytes;
use http::header::{HeaderValue, CONTENT_TYPE};
use http::HeaderMap;
use http_body::Frame;
use sluice_proto::MAX_MESSAGE_BYTES;
use tokio::sync::mpsc;
use tonic::body::Body;
use tonic::{Code, Status};

use crate::producer::BatchResult;
use crate::scatter::{self, ZERO_COPY_MIN_BYTES};

/// The response streaming `messages`.
pub(crate) fn response(messages: mpsc::Receiver<BatchResult>) -> http::Response<Body> {
    let body = ElementBody { messages: Some(messages), chunks: Vec::new().into_iter() };
    let mut response = http::Response::new(Body::new(body));
    response.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    response
}

struct ElementBody {
    /// `None` once the trailers are sent (dropping it tells the producer to stop).
    messages: Option<mpsc::Receiver<BatchResult>>,
    /// The rest of the message being sent.
    chunks: std::vec::IntoIter<Bytes>,
}

impl http_body::Body for ElementBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(chunk) = this.chunks.next() {
            return Poll::Ready(Some(Ok(Frame::data(chunk))));
        }
        let Some(messages) = this.messages.as_mut() else { return Poll::Ready(None) };
        let end = match ready!(messages.poll_recv(cx)) {
            Some(Ok(batch)) => {
                match scatter::encode(&batch, ZERO_COPY_MIN_BYTES, MAX_MESSAGE_BYTES) {
                    Ok(chunks) => {
                        this.chunks = chunks.into_iter();
                        // Never empty: the first chunk holds at least the gRPC prefix.
                        let first = this.chunks.next().unwrap_or_default();
                        return Poll::Ready(Some(Ok(Frame::data(first))));
                    }
                    Err(too_large) => Status::out_of_range(too_large.to_string()),
                }
            }
            Some(Err(status)) => status,
            None => Status::new(Code::Ok, ""),
        };
        this.messages = None;
        Poll::Ready(Some(Ok(Frame::trailers(trailers(&end)))))
    }

    fn is_end_stream(&self) -> bool {
        self.messages.is_none() && self.chunks.len() == 0
    }
}

/// `grpc-status` (and `grpc-message`, details, metadata) of `status`.
fn trailers(status: &Status) -> HeaderMap {
    let mut map = HeaderMap::new();
    if let Err(unsendable) = status.add_header(&mut map) {
        map.clear();
        let fallback = Status::internal(format!(
            "the stream failed with a status that cannot be sent ({unsendable}): {}",
            status.message()
        ));
        // Percent-encoded message, no details or metadata: this one always fits.
        let _ = fallback.add_header(&mut map);
    }
    map
}
