//! Stream credit, the reader's side (the worker's is `worker/src/credit.rs`).
//!
//! A GetElements stream is bounded in bytes by its HTTP/2 window, which holds
//! thousands of small elements: a reader that pauses while it shares a job would
//! keep receiving what the other readers wait for (issue 33). So a reader grants
//! its stream [`credit_for`] elements in its first request message, and grants
//! them again as the stream hands them out: each message's elements come with a
//! [`CreditBack`] that travels with them through the read's channel and, when
//! the stream takes the message out of it, adds them to [`Shared::taken`]; the
//! request body ([`RequestBody`]) sends what was taken since its last message as
//! a message of its own. So a stream holds at most its credit in transit and in
//! the channel, plus the message being handed out.
//!
//! ```text
//!  ElementStream takes a message ─► CreditBack ─► taken ─► RequestBody ─► worker
//! ```

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use futures::task::AtomicWaker;
use http_body::Frame;
use prost::Message;
use sluice_proto::contract::element_route::MESSAGE_PREFIX_BYTES;
use sluice_proto::v1 as pb;
use tonic::Status;

/// Elements a stream may hold before the reader hands some out: four messages
/// of the worker's default 64 elements, enough to cover a round trip at a
/// million small elements a second, and far below an epoch a paused reader of a
/// shared job could otherwise take.
pub const STREAM_CREDIT_ELEMENTS: u32 = 256;

/// The credit a stream asks for when its messages hold at most
/// `max_elements_per_message` (0: the worker's bound): room for two of them.
pub(crate) fn credit_for(max_elements_per_message: u32) -> u32 {
    STREAM_CREDIT_ELEMENTS.max(max_elements_per_message.saturating_mul(2))
}

/// What a stream's request body and the credit it gives back share.
#[derive(Default)]
pub(crate) struct Shared {
    /// Elements handed out of the stream's messages so far.
    taken: AtomicU64,
    /// Set when the stream's reader is done: the request body ends.
    closed: AtomicBool,
    /// The request body, waiting for `taken` to grow or `closed`.
    waker: AtomicWaker,
}

impl Shared {
    /// The reader is done with the stream: its request ends.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }

    /// Credit for `elements` travelling with them; given back when dropped.
    pub(crate) fn back(self: &Arc<Self>, elements: usize) -> CreditBack {
        CreditBack { shared: Some(self.clone()), elements: elements as u64 }
    }
}

/// Elements of one message: dropped when the stream takes the message, and then
/// granted to its worker again.
#[derive(Default)]
pub(crate) struct CreditBack {
    shared: Option<Arc<Shared>>,
    elements: u64,
}

impl Drop for CreditBack {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take() {
            if self.elements > 0 {
                shared.taken.fetch_add(self.elements, Ordering::AcqRel);
                shared.waker.wake();
            }
        }
    }
}

/// A GetElements request body with credit: the first message, then a credit
/// message whenever elements were taken since the last one, until closed.
pub(crate) struct RequestBody {
    first: Option<Bytes>,
    shared: Arc<Shared>,
    /// Elements already granted back.
    granted: u64,
}

impl RequestBody {
    pub(crate) fn new(first: Bytes, shared: Arc<Shared>) -> Self {
        RequestBody { first: Some(first), shared, granted: 0 }
    }
}

impl http_body::Body for RequestBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        let this = self.get_mut();
        if let Some(first) = this.first.take() {
            return Poll::Ready(Some(Ok(Frame::data(first))));
        }
        this.shared.waker.register(cx.waker());
        if this.shared.closed.load(Ordering::Acquire) {
            return Poll::Ready(None);
        }
        let taken = this.shared.taken.load(Ordering::Acquire);
        if taken <= this.granted {
            return Poll::Pending;
        }
        let elements = u32::try_from(taken - this.granted).unwrap_or(u32::MAX);
        this.granted += u64::from(elements);
        let grant = pb::GetElementsRequest { credit_elements: elements, ..Default::default() };
        Poll::Ready(Some(Ok(Frame::data(framed(&grant)))))
    }

    fn is_end_stream(&self) -> bool {
        self.first.is_none() && self.shared.closed.load(Ordering::Acquire)
    }
}

/// `message` with gRPC's length prefix (uncompressed).
pub(crate) fn framed(message: &pb::GetElementsRequest) -> Bytes {
    let len = message.encoded_len();
    let mut out = BytesMut::with_capacity(MESSAGE_PREFIX_BYTES + len);
    out.put_u8(0);
    // A request is a few ids and bounds: far below 4 GiB.
    out.put_u32(len as u32);
    message.encode(&mut out).expect("the buffer has room for the message");
    out.freeze()
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;
    use http_body_util::BodyExt;

    use super::*;

    fn decode(frame: Frame<Bytes>) -> pb::GetElementsRequest {
        let data = frame.into_data().expect("data");
        pb::GetElementsRequest::decode(&data[MESSAGE_PREFIX_BYTES..]).unwrap()
    }

    #[test]
    fn a_stream_asks_for_256_elements_or_two_of_its_messages() {
        assert_eq!(credit_for(0), STREAM_CREDIT_ELEMENTS, "0: the worker's bound, 64");
        assert_eq!(credit_for(64), STREAM_CREDIT_ELEMENTS);
        assert_eq!(credit_for(1000), 2000, "larger messages: two of them");
        assert_eq!(credit_for(u32::MAX), u32::MAX, "saturates");
    }

    #[tokio::test]
    async fn the_body_grants_what_was_taken_since_its_last_message_until_closed() {
        let shared = Arc::new(Shared::default());
        let first = pb::GetElementsRequest { task_id: 7, credit_elements: 4, ..Default::default() };
        let mut body = RequestBody::new(framed(&first), shared.clone());
        assert_eq!(decode(body.frame().await.unwrap().unwrap()), first);
        assert!(body.frame().now_or_never().is_none(), "nothing taken, nothing granted");
        let (a, b) = (shared.back(3), shared.back(2));
        drop(a);
        drop(b);
        assert_eq!(decode(body.frame().await.unwrap().unwrap()).credit_elements, 5);
        drop(shared.back(0));
        assert!(body.frame().now_or_never().is_none(), "an empty message grants nothing");
        shared.close();
        assert!(body.frame().await.is_none(), "a closed stream's request ends");
    }
}
