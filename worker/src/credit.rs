//! Stream credit: how many more elements a GetElements stream may send before
//! its reader says it took some (issue 33).
//!
//! The transport bounds a stream in bytes (the reader's HTTP/2 window, 8 MiB),
//! which is thousands of small elements. A reader that pauses while it shares a
//! job would keep receiving them, and in an exactly-once job the other readers
//! then wait for records it holds and may never take. So a reader that asks for
//! credit (`GetElementsRequest.credit_elements` in its first message) gets at
//! most that many elements, and each later message of its request stream adds
//! the `credit_elements` it carries (the elements it handed out). A first message
//! without credit (0, what an older client sends) reads without this bound.
//!
//! ```text
//!  request body ──feed──► Shared { granted } ◄──available / spent── producer
//! ```
//! The feeder owns the request body; the producer owns what it spent. A request
//! stream that ends grants nothing more; one that is malformed ends the stream
//! with the feeder's error. The producer aborts the feeder when it ends. A
//! draining worker sends what it holds regardless (`producer`): a paused reader's
//! buffers are where a leaving worker's elements go, or they leave with it.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt};
use sluice_proto::v1 as pb;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tonic::Status;

/// What a stream's feeder and producer share.
#[derive(Default)]
struct Shared {
    /// Elements granted so far, first message included.
    granted: AtomicU64,
    /// Set when the feeder stops on a malformed request stream.
    failed: Mutex<Option<Status>>,
    /// Woken when `granted` grows or `failed` is set.
    changed: Notify,
}

impl Shared {
    fn grant(&self, elements: u32) {
        if elements > 0 {
            self.granted.fetch_add(u64::from(elements), Ordering::Release);
            self.changed.notify_one();
        }
    }

    fn fail(&self, status: Status) {
        *self.failed.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
        self.changed.notify_one();
    }
}

/// The grants of a stream's request, as the feeder receives them.
#[derive(Clone)]
pub(crate) struct Grants(Arc<Shared>);

impl Grants {
    /// Adds a later message's `credit_elements`.
    pub(crate) fn grant(&self, elements: u32) {
        self.0.grant(elements);
    }

    /// The request stream was malformed: the stream ends with `status`.
    pub(crate) fn fail(&self, status: Status) {
        self.0.fail(status);
    }

    /// Grants each later message's credit, until the request ends (nothing more
    /// is granted) or breaks the protocol (the stream ends with its error). The
    /// one feeder of both GetElements paths (`route`, the generated service).
    pub(crate) async fn feed<S>(self, requests: S)
    where
        S: Stream<Item = Result<pb::GetElementsRequest, Status>>,
    {
        let mut requests = std::pin::pin!(requests);
        while let Some(message) = requests.next().await {
            match message {
                Ok(message) => self.grant(message.credit_elements),
                Err(status) => return self.fail(status),
            }
        }
    }
}

/// A stream's credit as its producer spends it.
pub(crate) struct Credit {
    /// `None`: the reader asked for no credit (unbounded).
    shared: Option<Arc<Shared>>,
    spent: u64,
    /// Reads the rest of the request; aborted when the producer ends.
    feeder: Option<JoinHandle<()>>,
}

impl Credit {
    /// No bound: a reader that asked for none, or a deterministic-order consumer
    /// (its messages are its splits' and cannot be cut; the reorder buffer bounds it).
    pub(crate) fn unbounded() -> Self {
        Credit { shared: None, spent: 0, feeder: None }
    }

    /// The credit of a request whose first message granted `initial` elements
    /// (0: unbounded, and the rest of the request is not read), with `feed`
    /// reading the rest of the request into the [`Grants`] it is given.
    pub(crate) fn start<F, Fut>(initial: u32, feed: F) -> Self
    where
        F: FnOnce(Grants) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        if initial == 0 {
            return Credit::unbounded();
        }
        let shared = Arc::new(Shared::default());
        shared.grant(initial);
        let feeder = tokio::spawn(feed(Grants(shared.clone())));
        Credit { shared: Some(shared), spent: 0, feeder: Some(feeder) }
    }

    /// How many elements the next message may hold (at least 1), once the reader
    /// granted any; `u32::MAX` when unbounded. Waits for a grant while none is left.
    pub(crate) async fn available(&self) -> Result<u32, Status> {
        let Some(shared) = &self.shared else { return Ok(u32::MAX) };
        loop {
            let changed = shared.changed.notified();
            let granted = shared.granted.load(Ordering::Acquire);
            if granted > self.spent {
                return Ok(u32::try_from(granted - self.spent).unwrap_or(u32::MAX));
            }
            if let Some(status) = shared.failed.lock().unwrap_or_else(|p| p.into_inner()).clone() {
                return Err(status);
            }
            changed.await;
        }
    }

    /// Records that a message of `elements` went out.
    pub(crate) fn spend(&mut self, elements: usize) {
        self.spent += elements as u64;
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        if let Some(feeder) = self.feeder.take() {
            feeder.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::FutureExt;

    use super::*;

    #[tokio::test]
    async fn a_stream_waits_for_a_grant_once_its_credit_is_spent() {
        let (tx, rx) = tokio::sync::oneshot::channel::<Grants>();
        let mut credit = Credit::start(3, |grants| async move {
            let _ = tx.send(grants);
        });
        let grants = rx.await.unwrap();
        assert_eq!(credit.available().await.unwrap(), 3);
        credit.spend(3);
        assert!(credit.available().now_or_never().is_none(), "nothing left until a grant");
        grants.grant(2);
        assert_eq!(credit.available().await.unwrap(), 2);
        grants.fail(Status::invalid_argument("bad"));
        assert_eq!(credit.available().await.unwrap(), 2, "granted credit is still spent");
        credit.spend(2);
        assert_eq!(credit.available().await.unwrap_err().code(), tonic::Code::InvalidArgument);
    }

    #[tokio::test]
    async fn no_initial_credit_is_unbounded_and_reads_no_further() {
        let credit = Credit::start(0, |_| async { panic!("the rest is not read") });
        assert_eq!(credit.available().await.unwrap(), u32::MAX);
    }
}
