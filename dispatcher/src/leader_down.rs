//! What the client of a call found down: the `sluice-leader-down` metadata
//! (`sluice_proto::contract::LEADER_DOWN_METADATA`), read by a tower layer in
//! front of the Dispatcher service and kept for the call's task, so that
//! `Core::held` can ask [`reported_down`] without every handler passing it on.
//!
//! Why: a follower keeps naming a dead leader until it misses its heartbeats;
//! a client that just had a connection refused there knows better, and says so.
//! The follower then holds its refusal until it can name a live leader.
//! Headers over `LEADER_DOWN_MAX_BYTES` are ignored (the call goes on as if
//! none was sent).

use std::sync::Arc;
use std::task::{Context, Poll};

use sluice_proto::contract::{LEADER_DOWN_MAX_BYTES, LEADER_DOWN_METADATA};
use tokio::task::futures::TaskLocalFuture;

tokio::task_local! {
    static REPORTED_DOWN: Option<Arc<str>>;
}

/// Whether the client of the call this task serves reported `address` down.
pub(crate) fn reported_down(address: &str) -> bool {
    REPORTED_DOWN
        .try_with(|down| down.as_deref().is_some_and(|d| d.split(',').any(|a| a == address)))
        .unwrap_or(false)
}

/// The layer: keeps each call's `sluice-leader-down` for its task.
#[derive(Clone, Copy, Debug, Default)]
pub struct LeaderDownLayer;

impl<S> tower::Layer<S> for LeaderDownLayer {
    type Service = LeaderDown<S>;

    fn layer(&self, inner: S) -> LeaderDown<S> {
        LeaderDown { inner }
    }
}

/// A service behind [`LeaderDownLayer`].
#[derive(Clone, Debug)]
pub struct LeaderDown<S> {
    inner: S,
}

impl<S, B> tower::Service<http::Request<B>> for LeaderDown<S>
where
    S: tower::Service<http::Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = TaskLocalFuture<Option<Arc<str>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let down = request
            .headers()
            .get(LEADER_DOWN_METADATA)
            .filter(|v| v.len() <= LEADER_DOWN_MAX_BYTES)
            .and_then(|v| v.to_str().ok())
            .map(Arc::from);
        REPORTED_DOWN.scope(down, self.inner.call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_call_sees_only_its_own_report_and_none_outside_a_call() {
        assert!(!reported_down("127.0.0.1:1"), "outside a call");
        let down = Some(Arc::from("127.0.0.1:1,127.0.0.1:2"));
        REPORTED_DOWN
            .scope(down, async {
                assert!(reported_down("127.0.0.1:2"));
                assert!(!reported_down("127.0.0.1:3"));
                assert!(!reported_down("127.0.0.1"), "whole addresses only");
            })
            .await;
        REPORTED_DOWN.scope(None, async { assert!(!reported_down("127.0.0.1:1")) }).await;
    }

    /// Answers whether its call reported 10.0.0.1:7 down.
    struct Probe;

    impl tower::Service<http::Request<()>> for Probe {
        type Response = bool;
        type Error = std::convert::Infallible;
        type Future =
            std::pin::Pin<Box<dyn std::future::Future<Output = Result<bool, Self::Error>>>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: http::Request<()>) -> Self::Future {
            Box::pin(async { Ok(reported_down("10.0.0.1:7")) })
        }
    }

    #[tokio::test]
    async fn the_layer_reads_the_header_and_ignores_one_over_the_bound() {
        use tower::{Layer, Service};
        let seen = |header: Option<String>| async move {
            let mut svc = LeaderDownLayer.layer(Probe);
            let mut req = http::Request::new(());
            if let Some(h) = header {
                req.headers_mut().insert(LEADER_DOWN_METADATA, h.parse().unwrap());
            }
            svc.call(req).await.unwrap()
        };
        assert!(seen(Some("10.0.0.1:7".into())).await);
        assert!(!seen(None).await);
        let long = format!("{},10.0.0.1:7", "x".repeat(LEADER_DOWN_MAX_BYTES));
        assert!(!seen(Some(long)).await);
    }
}
