//! A retrying client of the Dispatcher service, shared by workers and the client
//! library.
//!
//! It holds one lazily connected channel per dispatcher address. A follower
//! refuses with `Unavailable` and the leader's address in the `sluice-leader`
//! metadata: the call goes straight there. Any other retryable failure moves on to
//! the next address and backs off, until the [`RetryPolicy`] deadline; then the
//! call fails with `ClientError::Unavailable` naming the addresses. Non-retryable
//! statuses are returned at once as `ClientError::Rpc`. Give clients every
//! dispatcher's address: a leader hint outside the list is only followed by
//! rotation.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use sluice_proto::v1 as pb;
use sluice_proto::v1::dispatcher_client::DispatcherClient as Grpc;
use sluice_proto::MAX_MESSAGE_BYTES;
use tonic::transport::{Channel, Endpoint};

use crate::error::ClientError;
use crate::retry::{is_retryable_status, RetryPolicy};

/// Builds a lazily connecting channel to `address` (`host:port` or a URL).
pub fn channel(address: &str, policy: &RetryPolicy) -> Result<Channel, ClientError> {
    Ok(endpoint(address, policy)?.http2_adaptive_window(true).connect_lazy())
}

/// HTTP/2 receive windows of a connection to a worker: how many bytes of element
/// messages a worker may send before the reader acknowledges them. The default
/// 64 KiB (and the adaptive window, which grows from it by RTT estimates that are
/// noise on loopback) stalls the sender on every large message.
pub(crate) const WORKER_STREAM_WINDOW_BYTES: u32 = 8 << 20;
pub(crate) const WORKER_CONNECTION_WINDOW_BYTES: u32 = 16 << 20;
/// The largest HTTP/2 frame a worker may send (up to the stream window): a message
/// of the worker's default 4 MiB bound travels in one frame, so the reader decodes
/// its tensors as slices of that frame (`worker_stream.rs`) rather than gathering
/// 16 KiB frames (the default) into a copy.
pub(crate) const WORKER_MAX_FRAME_BYTES: u32 = WORKER_STREAM_WINDOW_BYTES;

/// A lazily connecting channel to a worker, with windows sized for element streams.
pub(crate) fn worker_channel(address: &str, policy: &RetryPolicy) -> Result<Channel, ClientError> {
    Ok(endpoint(address, policy)?
        .initial_stream_window_size(WORKER_STREAM_WINDOW_BYTES)
        .initial_connection_window_size(WORKER_CONNECTION_WINDOW_BYTES)
        .max_frame_size(WORKER_MAX_FRAME_BYTES)
        .connect_lazy())
}

fn endpoint(address: &str, policy: &RetryPolicy) -> Result<Endpoint, ClientError> {
    let url =
        if address.contains("://") { address.to_string() } else { format!("http://{address}") };
    Ok(Endpoint::from_shared(url)
        .map_err(|e| ClientError::InvalidArgument(format!("bad address `{address}`: {e}")))?
        .connect_timeout(policy.attempt_timeout)
        .tcp_nodelay(true))
}

/// Cloneable, retrying handle to the dispatcher(s).
#[derive(Clone)]
pub struct DispatcherClient {
    inner: Arc<Inner>,
}

struct Inner {
    addresses: Vec<String>,
    clients: Vec<Grpc<Channel>>,
    /// Index of the address that answered last; calls start there.
    current: AtomicUsize,
    policy: RetryPolicy,
}

impl DispatcherClient {
    /// `addresses`: one or more `host:port` of dispatchers. Connects lazily.
    pub fn new(addresses: &[String], policy: RetryPolicy) -> Result<Self, ClientError> {
        if addresses.is_empty() {
            return Err(ClientError::InvalidArgument("no dispatcher address given".into()));
        }
        let clients = addresses
            .iter()
            .map(|a| {
                Ok(Grpc::new(channel(a, &policy)?)
                    .max_decoding_message_size(MAX_MESSAGE_BYTES)
                    .max_encoding_message_size(MAX_MESSAGE_BYTES))
            })
            .collect::<Result<Vec<_>, ClientError>>()?;
        Ok(DispatcherClient {
            inner: Arc::new(Inner {
                addresses: addresses.to_vec(),
                clients,
                current: AtomicUsize::new(0),
                policy,
            }),
        })
    }

    pub fn addresses(&self) -> &[String] {
        &self.inner.addresses
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.inner.policy
    }

    /// Runs `f` against the current dispatcher, retrying retryable failures on the
    /// next address with backoff until the policy's deadline.
    pub async fn call<T, F, Fut>(&self, name: &'static str, mut f: F) -> Result<T, ClientError>
    where
        F: FnMut(Grpc<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let inner = &self.inner;
        let start = Instant::now();
        let mut attempt = 0u32;
        // Redirects to a named leader skip the backoff, a bounded number of times
        // (a leader change during the redirect must not make us spin).
        let mut redirects = 0usize;
        loop {
            let i = inner.current.load(Ordering::Relaxed) % inner.clients.len();
            let result =
                tokio::time::timeout(inner.policy.attempt_timeout, f(inner.clients[i].clone()))
                    .await
                    .unwrap_or_else(|_| {
                        Err(tonic::Status::deadline_exceeded(format!(
                            "no answer within {:?}",
                            inner.policy.attempt_timeout
                        )))
                    });
            let status = match result {
                Ok(resp) => return Ok(resp.into_inner()),
                Err(s) => s,
            };
            let address = inner.addresses[i].clone();
            if !is_retryable_status(&status) {
                return Err(ClientError::Rpc {
                    peer: "dispatcher",
                    address,
                    call: name,
                    code: status.code(),
                    message: status.message().to_string(),
                });
            }
            if let Some(j) = leader_hint(&status, &inner.addresses) {
                if j != i && redirects < 2 * inner.addresses.len() {
                    redirects += 1;
                    inner.current.store(j, Ordering::Relaxed);
                    tracing::debug!(call = name, from = %address, to = %inner.addresses[j], "following the leader");
                    continue;
                }
            }
            attempt += 1;
            let elapsed = start.elapsed();
            if elapsed >= inner.policy.deadline {
                return Err(ClientError::Unavailable {
                    peer: "dispatcher",
                    address: inner.addresses.join(","),
                    attempts: attempt,
                    elapsed,
                    last_error: format!("{}: {:?}: {}", address, status.code(), status.message()),
                });
            }
            tracing::debug!(call = name, %address, attempt, code = ?status.code(), "retrying");
            // Try the next dispatcher; with one address this is the same one again.
            let _ = inner.current.compare_exchange(
                i,
                (i + 1) % inner.clients.len(),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            let backoff = inner.policy.backoff(attempt - 1);
            let left = inner.policy.deadline.saturating_sub(elapsed);
            tokio::time::sleep(backoff.min(left)).await;
        }
    }

    /// Asks every dispatcher for its status once each (no retries): one answer per
    /// address, in order, for `sluice status`.
    pub async fn status_of_each(
        &self,
    ) -> Vec<(String, Result<pb::GetStatusResponse, ClientError>)> {
        let inner = &self.inner;
        let calls = inner.clients.iter().zip(&inner.addresses).map(|(c, a)| {
            let mut c = c.clone();
            async move {
                let r = tokio::time::timeout(
                    inner.policy.attempt_timeout,
                    c.get_status(pb::GetStatusRequest {}),
                )
                .await;
                let r = match r {
                    Ok(Ok(resp)) => Ok(resp.into_inner()),
                    Ok(Err(s)) => Err(ClientError::Rpc {
                        peer: "dispatcher",
                        address: a.clone(),
                        call: "GetStatus",
                        code: s.code(),
                        message: s.message().to_string(),
                    }),
                    Err(_) => Err(ClientError::Unavailable {
                        peer: "dispatcher",
                        address: a.clone(),
                        attempts: 1,
                        elapsed: inner.policy.attempt_timeout,
                        last_error: "no answer".into(),
                    }),
                };
                (a.clone(), r)
            }
        });
        futures::future::join_all(calls).await
    }

    pub async fn register_dataset(
        &self,
        req: pb::RegisterDatasetRequest,
    ) -> Result<pb::RegisterDatasetResponse, ClientError> {
        self.call("RegisterDataset", |mut c| {
            let req = req.clone();
            async move { c.register_dataset(req).await }
        })
        .await
    }

    pub async fn get_dataset(
        &self,
        dataset_id: &str,
    ) -> Result<pb::GetDatasetResponse, ClientError> {
        let req = pb::GetDatasetRequest { dataset_id: dataset_id.to_string() };
        self.call("GetDataset", |mut c| {
            let req = req.clone();
            async move { c.get_dataset(req).await }
        })
        .await
    }

    pub async fn get_or_create_job(
        &self,
        req: pb::GetOrCreateJobRequest,
    ) -> Result<pb::GetOrCreateJobResponse, ClientError> {
        self.call("GetOrCreateJob", |mut c| {
            let req = req.clone();
            async move { c.get_or_create_job(req).await }
        })
        .await
    }

    pub async fn get_or_create_iteration(
        &self,
        req: pb::GetOrCreateIterationRequest,
    ) -> Result<pb::GetOrCreateIterationResponse, ClientError> {
        self.call(
            "GetOrCreateIteration",
            |mut c| async move { c.get_or_create_iteration(req).await },
        )
        .await
    }

    pub async fn release_iteration_client(&self, client_id: u64) -> Result<(), ClientError> {
        let req = pb::ReleaseIterationClientRequest { client_id };
        self.call(
            "ReleaseIterationClient",
            |mut c| async move { c.release_iteration_client(req).await },
        )
        .await
        .map(|_| ())
    }

    pub async fn client_heartbeat(
        &self,
        client_id: u64,
    ) -> Result<pb::ClientHeartbeatResponse, ClientError> {
        let req = pb::ClientHeartbeatRequest { client_id, ..Default::default() };
        self.client_heartbeat_with(req).await
    }

    /// A `ClientHeartbeat` with every field chosen by the caller (the long poll:
    /// `wait_for_change_ms`, `known_view`).
    pub async fn client_heartbeat_with(
        &self,
        req: pb::ClientHeartbeatRequest,
    ) -> Result<pb::ClientHeartbeatResponse, ClientError> {
        self.call("ClientHeartbeat", |mut c| async move { c.client_heartbeat(req).await }).await
    }

    pub async fn register_worker(
        &self,
        req: pb::RegisterWorkerRequest,
    ) -> Result<pb::RegisterWorkerResponse, ClientError> {
        self.call("RegisterWorker", |mut c| {
            let req = req.clone();
            async move { c.register_worker(req).await }
        })
        .await
    }

    pub async fn worker_heartbeat(
        &self,
        req: pb::WorkerHeartbeatRequest,
    ) -> Result<pb::WorkerHeartbeatResponse, ClientError> {
        self.call("WorkerHeartbeat", |mut c| {
            let req = req.clone();
            async move { c.worker_heartbeat(req).await }
        })
        .await
    }

    pub async fn get_split(
        &self,
        req: pb::GetSplitRequest,
    ) -> Result<pb::GetSplitResponse, ClientError> {
        self.call("GetSplit", |mut c| async move { c.get_split(req).await }).await
    }

    pub async fn get_status(&self) -> Result<pb::GetStatusResponse, ClientError> {
        self.call("GetStatus", |mut c| async move { c.get_status(pb::GetStatusRequest {}).await })
            .await
    }
}

/// The index in `addresses` of the leader a follower named, if any.
fn leader_hint(status: &tonic::Status, addresses: &[String]) -> Option<usize> {
    let leader = sluice_proto::contract::leader_address(status)?;
    addresses.iter().position(|a| a == leader)
}
