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

use sluice_proto::v1 as pb;
use sluice_proto::v1::dispatcher_client::DispatcherClient as Grpc;
use sluice_proto::MAX_MESSAGE_BYTES;
use tonic::transport::Channel;

pub use crate::channels::channel;
use crate::error::ClientError;
use crate::retry::{describe, is_retryable_status, Attempt, RetryPolicy};

/// Cloneable, retrying handle to the dispatcher(s).
#[derive(Clone)]
pub struct DispatcherClient {
    inner: Arc<Inner>,
}

struct Inner {
    addresses: Vec<String>,
    /// `addresses` joined by commas, as a give-up error names them.
    all_addresses: String,
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
                all_addresses: addresses.join(","),
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
    /// next address with backoff until the policy's deadline (counted from the
    /// call's start).
    pub async fn call<T, F, Fut>(&self, name: &'static str, mut f: F) -> Result<T, ClientError>
    where
        F: FnMut(Grpc<Channel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let inner = &self.inner;
        let n = inner.clients.len();
        // Redirects to a named leader skip the backoff, a bounded number of times
        // (a leader change during the redirect must not make us spin).
        let redirects = AtomicUsize::new(0);
        let retry = inner.policy.retry("dispatcher", &inner.all_addresses).counting_from_start();
        retry
            .run(|_| {
                let i = inner.current.load(Ordering::Relaxed) % n;
                self.attempt(name, i, f(inner.clients[i].clone()), &redirects)
            })
            .await
    }

    /// One attempt of [`Self::call`] at address `i`, and where the next goes.
    async fn attempt<T>(
        &self,
        name: &'static str,
        i: usize,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
        redirects: &AtomicUsize,
    ) -> Attempt<T, String> {
        let inner = &self.inner;
        let n = inner.clients.len();
        let timeout = inner.policy.attempt_timeout;
        let status = match tokio::time::timeout(timeout, call).await {
            Ok(Ok(resp)) => return Attempt::Done(resp.into_inner()),
            Ok(Err(status)) => status,
            Err(_) => tonic::Status::deadline_exceeded(format!("no answer within {timeout:?}")),
        };
        let address = &inner.addresses[i];
        if !is_retryable_status(&status) {
            return Attempt::GiveUp(ClientError::rpc("dispatcher", address, name, &status));
        }
        if let Some(j) = leader_hint(&status, &inner.addresses) {
            if j != i && redirects.load(Ordering::Relaxed) < 2 * n {
                redirects.fetch_add(1, Ordering::Relaxed);
                inner.current.store(j, Ordering::Relaxed);
                let to = &inner.addresses[j];
                tracing::debug!(call = name, from = %address, %to, "following the leader");
                return Attempt::Redirected;
            }
        }
        // Try the next dispatcher; with one address this is the same one again.
        let next = (i + 1) % n;
        let _ = inner.current.compare_exchange(i, next, Ordering::Relaxed, Ordering::Relaxed);
        Attempt::Failed(format!("{address}: {}", describe(&status)))
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
                    Ok(Err(s)) => Err(ClientError::rpc("dispatcher", a, "GetStatus", &s)),
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

    /// `ClientHeartbeat` of a coordinated read (`consumer_index`,
    /// `coordinated_paused_at` set by the caller): [`Self::client_heartbeat_with`].
    pub async fn coordinated_heartbeat(
        &self,
        req: pb::ClientHeartbeatRequest,
    ) -> Result<pb::ClientHeartbeatResponse, ClientError> {
        self.client_heartbeat_with(req).await
    }

    /// A coordinated reader's vote to remove a task whose worker it cannot reach.
    pub async fn maybe_remove_task(
        &self,
        req: pb::MaybeRemoveTaskRequest,
    ) -> Result<pb::MaybeRemoveTaskResponse, ClientError> {
        self.call("MaybeRemoveTask", |mut c| async move { c.maybe_remove_task(req).await }).await
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
