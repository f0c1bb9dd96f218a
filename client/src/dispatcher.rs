//! A retrying client of the Dispatcher service, shared by workers and the client
//! library.
//!
//! It holds one lazily connected channel per dispatcher address. A follower
//! refuses with `Unavailable` and the leader's address in the `sluice-leader`
//! metadata: the call goes straight there, unless that address refused a
//! connection earlier in the same call (a leader killed moments ago, which the
//! follower has not noticed yet): every attempt carries the addresses found
//! down in its call (`sluice-leader-down`), and a follower that would name one
//! of them holds its answer until it can name a live leader, so the call goes
//! to the new leader as soon as there is one, without a backoff (issue 33).
//! Any other retryable failure moves on to the
//! next address that is not down and backs off, until the [`RetryPolicy`]
//! deadline; then the call fails with `ClientError::Unavailable` naming the
//! addresses. Non-retryable statuses are returned at once as `ClientError::Rpc`.
//! Give clients every dispatcher's address: a leader hint outside the list is
//! only followed by rotation.

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sluice_proto::contract::{LEADER_DOWN_MAX_BYTES, LEADER_DOWN_METADATA};
use sluice_proto::v1 as pb;
use sluice_proto::v1::dispatcher_client::DispatcherClient as Grpc;
use sluice_proto::MAX_MESSAGE_BYTES;
use sluice_security::{Bearer, ClientSecurity};
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::service::Interceptor;
use tonic::transport::Channel;

pub use crate::channels::{channel, Authed};
use crate::error::ClientError;
use crate::retry::{describe, is_retryable_status, is_transport_failure, Attempt, RetryPolicy};

/// Cloneable, retrying handle to the dispatcher(s).
#[derive(Clone)]
pub struct DispatcherClient {
    inner: Arc<Inner>,
}

struct Inner {
    addresses: Vec<String>,
    /// `addresses` joined by commas, as a give-up error names them.
    all_addresses: String,
    channels: Vec<Channel>,
    /// Index of the address that answered last; calls start there.
    current: AtomicUsize,
    policy: RetryPolicy,
    /// TLS and token of every call (also used for the workers' channels).
    security: ClientSecurity,
}

impl DispatcherClient {
    /// `addresses`: one or more `host:port` of dispatchers. Connects lazily, in
    /// plain text and without a token (a loopback service).
    pub fn new(addresses: &[String], policy: RetryPolicy) -> Result<Self, ClientError> {
        Self::with_security(addresses, policy, ClientSecurity::none())
    }

    /// [`Self::new`] over TLS and with the token of `security`.
    pub fn with_security(
        addresses: &[String],
        policy: RetryPolicy,
        security: ClientSecurity,
    ) -> Result<Self, ClientError> {
        if addresses.is_empty() {
            return Err(ClientError::InvalidArgument("no dispatcher address given".into()));
        }
        let channels = addresses
            .iter()
            .map(|a| channel(a, &policy, &security))
            .collect::<Result<Vec<_>, ClientError>>()?;
        Ok(DispatcherClient {
            inner: Arc::new(Inner {
                addresses: addresses.to_vec(),
                all_addresses: addresses.join(","),
                channels,
                current: AtomicUsize::new(0),
                policy,
                security,
            }),
        })
    }

    pub fn addresses(&self) -> &[String] {
        &self.inner.addresses
    }

    pub fn policy(&self) -> &RetryPolicy {
        &self.inner.policy
    }

    /// The TLS and token this client presents (to dispatchers and workers).
    pub fn security(&self) -> &ClientSecurity {
        &self.inner.security
    }

    /// Runs `f` against the current dispatcher, retrying retryable failures on the
    /// next address with backoff until the policy's deadline (counted from the
    /// call's start).
    pub async fn call<T, F, Fut>(&self, name: &'static str, f: F) -> Result<T, ClientError>
    where
        F: FnMut(Grpc<DispatcherChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        self.call_with(name, &self.inner.policy, f).await
    }

    /// [`Self::call`] under another retry policy.
    async fn call_with<T, F, Fut>(
        &self,
        name: &'static str,
        policy: &RetryPolicy,
        mut f: F,
    ) -> Result<T, ClientError>
    where
        F: FnMut(Grpc<DispatcherChannel>) -> Fut,
        Fut: Future<Output = Result<tonic::Response<T>, tonic::Status>>,
    {
        let inner = &self.inner;
        let n = inner.channels.len();
        // Redirects to a named leader skip the backoff, a bounded number of times
        // (a leader change during the redirect must not make us spin).
        let redirects = AtomicUsize::new(0);
        // Addresses this call found down (see `attempt`).
        let down = AtomicU64::new(0);
        let retry = policy.retry("dispatcher", &inner.all_addresses).counting_from_start();
        retry
            .run(|_| {
                let i = inner.current.load(Ordering::Relaxed) % n;
                let call = f(self.grpc(i, down.load(Ordering::Relaxed)));
                self.attempt(name, i, call, CallState { redirects: &redirects, down: &down })
            })
            .await
    }

    /// A client of address `i` whose calls carry the token and the addresses of
    /// `down` (see [`CallHeaders`]).
    fn grpc(&self, i: usize, down: u64) -> Grpc<DispatcherChannel> {
        let inner = &self.inner;
        let headers = CallHeaders {
            bearer: inner.security.bearer().clone(),
            down: down_header(&inner.addresses, down),
        };
        Grpc::new(InterceptedService::new(inner.channels[i].clone(), headers))
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES)
    }

    /// One attempt of [`Self::call`] at address `i`, and where the next goes.
    ///
    /// An address whose attempt failed in the connection (refused or reset: a
    /// killed node) is marked *down* for this call, and a hint naming it is not
    /// followed: a follower that has not noticed the leader died names it for a
    /// few hundred milliseconds, and following it would spend the call's
    /// redirects (and then the redirect to the new leader) on a dead address. The
    /// mark is only the call's evidence of a moment: it is cleared when the
    /// address answers, or when a follower names another leader or none (the
    /// group's view moved on, so a later hint naming it is news: a restarted node
    /// may lead again). A down address stays in the rotation, so a node that came
    /// back as the leader while its followers kept naming it is still reached.
    async fn attempt<T>(
        &self,
        name: &'static str,
        i: usize,
        call: impl Future<Output = Result<tonic::Response<T>, tonic::Status>>,
        state: CallState<'_>,
    ) -> Attempt<T, String> {
        let inner = &self.inner;
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
        let seen = Seen {
            at: i,
            connection_failed: is_transport_failure(&status),
            hint: leader_hint(&status, &inner.addresses),
        };
        let n = inner.channels.len();
        let may_redirect = state.redirects.load(Ordering::Relaxed) < 2 * n;
        let (next, down) = route(seen, n, state.down.load(Ordering::Relaxed), may_redirect);
        state.down.store(down, Ordering::Relaxed);
        match next {
            Next::Leader(j) => {
                state.redirects.fetch_add(1, Ordering::Relaxed);
                inner.current.store(j, Ordering::Relaxed);
                let to = &inner.addresses[j];
                tracing::debug!(call = name, from = %address, %to, "following the leader");
                Attempt::Redirected
            }
            Next::Rotate(k) => {
                // Another call may have moved on already: only move from `i`.
                let _ = inner.current.compare_exchange(i, k, Ordering::Relaxed, Ordering::Relaxed);
                if let Some(j) = seen.hint.filter(|j| down & bit(*j) != 0) {
                    let named = &inner.addresses[j];
                    tracing::debug!(call = name, from = %address, %named, "the named leader is down");
                }
                Attempt::Failed(format!("{address}: {}", describe(&status)))
            }
        }
    }

    /// Asks every dispatcher for its status once each (no retries): one answer per
    /// address, in order, for `sluice status`.
    pub async fn status_of_each(
        &self,
    ) -> Vec<(String, Result<pb::GetStatusResponse, ClientError>)> {
        let inner = &self.inner;
        let calls = inner.addresses.iter().enumerate().map(|(i, a)| {
            let mut c = self.grpc(i, 0);
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
        self.call("GetOrCreateIteration", |mut c| {
            let req = req.clone();
            async move { c.get_or_create_iteration(req).await }
        })
        .await
    }

    /// Releases a consumer from its iteration. One attempt (following a leader
    /// redirect, but not retried when a dispatcher is unavailable): client ids
    /// are numbered from the start again by an in-memory dispatcher that
    /// restarted, so a release retried across such a restart could release a new
    /// reader that got the same id. A release that fails is made up for by the
    /// dispatcher's client timeout, which frees a silent consumer.
    pub async fn release_iteration_client(&self, client_id: u64) -> Result<(), ClientError> {
        let req = pb::ReleaseIterationClientRequest { client_id };
        let once = RetryPolicy { deadline: Duration::ZERO, ..self.inner.policy.clone() };
        self.call_with("ReleaseIterationClient", &once, |mut c| async move {
            c.release_iteration_client(req).await
        })
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
        self.call("ClientHeartbeat", |mut c| {
            let req = req.clone();
            async move { c.client_heartbeat(req).await }
        })
        .await
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

/// What one [`DispatcherClient::call`] has spent and seen so far.
#[derive(Clone, Copy)]
struct CallState<'a> {
    redirects: &'a AtomicUsize,
    /// Bit `i`: address `i` failed in the connection during this call.
    down: &'a AtomicU64,
}

/// The bit of address `i` in a down mask (addresses past 64 are never marked).
fn bit(i: usize) -> u64 {
    1u64.checked_shl(i as u32).unwrap_or(0)
}

/// What a failed attempt told about the group.
#[derive(Clone, Copy, Debug)]
struct Seen {
    /// The address tried.
    at: usize,
    /// The attempt failed in the connection: nothing answered at `at`.
    connection_failed: bool,
    /// The leader the answer named.
    hint: Option<usize>,
}

/// Where a call goes after a retryable failure at address `i` of `n`.
#[derive(Debug, PartialEq, Eq)]
enum Next {
    /// To the leader a follower named: at once.
    Leader(usize),
    /// To the next address, after a backoff.
    Rotate(usize),
}

/// The next address and the new down mask (see [`DispatcherClient::attempt`]):
/// follows a hint unless it names the address tried, a down address, or the call
/// is out of redirects; else rotates to the next address.
fn route(seen: Seen, n: usize, mut down: u64, may_redirect: bool) -> (Next, u64) {
    let i = seen.at;
    if seen.connection_failed {
        down |= bit(i);
    } else {
        // It answered; and unless it named a down address, the view moved on.
        down &= !bit(i);
        let names_down = matches!(seen.hint, Some(j) if down & bit(j) != 0);
        if !names_down {
            down = 0;
        }
    }
    let next = match seen.hint {
        Some(j) if j != i && down & bit(j) == 0 && may_redirect => Next::Leader(j),
        _ => Next::Rotate((i + 1) % n),
    };
    (next, down)
}

/// What a dispatcher call carries besides its message: the bearer token, and
/// the addresses its call found down (`sluice-leader-down`), so that a follower
/// that would name one of them as the leader holds its answer until it can
/// name a live one (the dispatcher's `Core::held`).
#[derive(Clone, Debug)]
pub struct CallHeaders {
    bearer: Bearer,
    down: Option<MetadataValue<Ascii>>,
}

/// A dispatcher channel with [`CallHeaders`].
pub type DispatcherChannel = InterceptedService<Channel, CallHeaders>;

impl Interceptor for CallHeaders {
    fn call(&mut self, request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let mut request = self.bearer.call(request)?;
        if let Some(down) = &self.down {
            request.metadata_mut().insert(LEADER_DOWN_METADATA, down.clone());
        }
        Ok(request)
    }
}

/// The addresses of the `down` mask, comma separated, if any (and if they fit
/// the bound a dispatcher reads).
fn down_header(addresses: &[String], down: u64) -> Option<MetadataValue<Ascii>> {
    if down == 0 {
        return None;
    }
    let list: Vec<&str> = addresses
        .iter()
        .enumerate()
        .filter(|(i, _)| down & bit(*i) != 0)
        .map(|(_, a)| a.as_str())
        .collect();
    let joined = list.join(",");
    if joined.len() > LEADER_DOWN_MAX_BYTES {
        return None;
    }
    joined.parse().ok()
}

/// The index in `addresses` of the leader a follower named, if any.
fn leader_hint(status: &tonic::Status, addresses: &[String]) -> Option<usize> {
    let leader = sluice_proto::contract::leader_address(status)?;
    addresses.iter().position(|a| a == leader)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(at: usize, hint: Option<usize>) -> Seen {
        Seen { at, connection_failed: false, hint }
    }

    fn refused(at: usize) -> Seen {
        Seen { at, connection_failed: true, hint: None }
    }

    #[test]
    fn a_hint_is_followed_at_once() {
        assert_eq!(route(answer(0, Some(2)), 3, 0, true), (Next::Leader(2), 0));
    }

    #[test]
    fn the_hint_is_ignored_when_it_names_the_node_that_just_failed() {
        // Node 2, the leader, refused a connection: it is down for this call.
        let (next, down) = route(refused(2), 3, 0, true);
        assert_eq!((next, down), (Next::Rotate(0), bit(2)));
        // Followers that have not noticed yet still name it: not followed, and
        // the next address is tried after a backoff.
        assert_eq!(route(answer(0, Some(2)), 3, down, true), (Next::Rotate(1), bit(2)));
        assert_eq!(route(answer(1, Some(2)), 3, down, true), (Next::Rotate(2), bit(2)));
        // Once one names the new leader, it is followed.
        assert_eq!(route(answer(1, Some(0)), 3, down, true), (Next::Leader(0), 0));
    }

    #[test]
    fn a_down_mark_ends_when_the_view_moves_on_or_the_node_answers() {
        // A follower that knows no leader: a later hint naming node 2 is news
        // (it may have restarted and been elected again).
        assert_eq!(route(answer(0, None), 3, bit(2), true), (Next::Rotate(1), 0));
        // Node 2 answered (a follower now): no longer down.
        assert_eq!(route(answer(2, Some(1)), 3, bit(2), true), (Next::Leader(1), 0));
        // A down node stays in the rotation: it is tried again in its turn.
        assert_eq!(route(answer(1, Some(2)), 3, bit(2), true).0, Next::Rotate(2));
    }

    #[test]
    fn a_follower_naming_itself_or_a_call_out_of_redirects_rotates() {
        assert_eq!(route(answer(1, Some(1)), 3, 0, true), (Next::Rotate(2), 0));
        assert_eq!(route(answer(1, Some(0)), 3, 0, false), (Next::Rotate(2), 0));
        assert_eq!(route(refused(0), 1, 0, true), (Next::Rotate(0), bit(0)));
    }
}
