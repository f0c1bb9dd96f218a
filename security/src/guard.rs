//! [`Guard`]: the tower layer every Sluice server mounts in front of its
//! services. For each request it finds the [`Role`] the path needs (the server's
//! policy function), checks `authorization: Bearer SECRET` against the
//! [`TokenSet`], and either refuses — `Unauthenticated` when no valid token came
//! (naming what is missing and which flag gives it), `PermissionDenied` when a
//! valid token has another role (naming the token and the role wanted) — or
//! passes the request on with the [`Caller`] in its extensions (tonic hands
//! them to the service as `Request::extensions`). The secret never appears in an
//! answer or a log, and is removed from the request before the service sees it.
//!
//! A guard without tokens ([`Guard::open`]) passes everything: a loopback server
//! started with no token file (`sluice local`, the walk-throughs).
//!
//! It sits below tonic's routing, so it covers hand-written routes too (the
//! worker's `GetElements`, docs/guarantees.md W1).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tonic::Status;

use crate::tokens::{Role, TokenSet};

/// Who made a request: the role and name of the token it presented.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub role: Role,
    pub name: Arc<str>,
}

/// The standard gRPC health service (`grpc.health.v1.Health`): answered without a
/// token, because orchestrators' probes (Kubernetes' native gRPC probes) send none.
/// It tells only whether the server is serving.
pub const HEALTH_PATH: &str = "/grpc.health.v1.Health/";

/// Maps a request path (`/package.Service/Method`) to the role it needs.
pub type Policy = fn(&str) -> Role;

/// The layer; cheap to clone.
#[derive(Clone)]
pub struct Guard {
    tokens: Option<Arc<TokenSet>>,
    policy: Policy,
    /// What the refusals call this server ("dispatcher", "worker", "Raft listener").
    server: &'static str,
}

impl Guard {
    /// Requests need a token from `tokens` of the role `policy` gives their path.
    pub fn new(tokens: TokenSet, policy: Policy, server: &'static str) -> Guard {
        Guard { tokens: Some(Arc::new(tokens)), policy, server }
    }

    /// No check (no token file on a loopback server).
    pub fn open(server: &'static str) -> Guard {
        Guard { tokens: None, policy: |_| Role::Client, server }
    }

    /// [`Guard::new`] when `tokens` is given, else [`Guard::open`].
    pub fn from_tokens(tokens: Option<TokenSet>, policy: Policy, server: &'static str) -> Guard {
        match tokens {
            Some(t) => Guard::new(t, policy, server),
            None => Guard::open(server),
        }
    }

    /// Whether this guard checks tokens.
    pub fn is_checking(&self) -> bool {
        self.tokens.is_some()
    }

    /// The caller of `headers` for `path`, or the refusal. `Ok(None)`: no check.
    pub fn check(&self, path: &str, headers: &http::HeaderMap) -> Result<Option<Caller>, Status> {
        let Some(tokens) = &self.tokens else { return Ok(None) };
        if path.starts_with(HEALTH_PATH) {
            return Ok(None);
        }
        let role = (self.policy)(path);
        let server = self.server;
        let how = role.how_to_present();
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Err(Status::unauthenticated(format!(
                "{path} on this {server} needs a `{role}` bearer token (metadata \
                 `authorization: Bearer TOKEN`) and none was sent; {how}"
            )));
        };
        let presented = value.as_bytes().strip_prefix(b"Bearer ").ok_or_else(|| {
            Status::unauthenticated(format!(
                "the `authorization` metadata sent to this {server} is not `Bearer TOKEN`; {how}"
            ))
        })?;
        let token = tokens.find(presented).ok_or_else(|| {
            Status::unauthenticated(format!(
                "the bearer token sent is not one this {server} accepts ({path} needs a \
                 `{role}` token); {how}"
            ))
        })?;
        if token.role != role {
            return Err(Status::permission_denied(format!(
                "the token `{}` has role `{}`; {path} on this {server} needs a `{role}` token",
                token.name, token.role
            )));
        }
        Ok(Some(Caller { role, name: token.name.clone() }))
    }
}

impl<S> tower::Layer<S> for Guard {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded { inner, guard: self.clone() }
    }
}

/// A service behind a [`Guard`].
#[derive(Clone)]
pub struct Guarded<S> {
    inner: S,
    guard: Guard,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

impl<S, ReqB, ResB> tower::Service<http::Request<ReqB>> for Guarded<S>
where
    S: tower::Service<http::Request<ReqB>, Response = http::Response<ResB>>,
    S::Future: Send + 'static,
    S::Error: Send + 'static,
    ResB: Default + Send + 'static,
{
    type Response = http::Response<ResB>;
    type Error = S::Error;
    type Future = BoxFuture<Result<http::Response<ResB>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: http::Request<ReqB>) -> Self::Future {
        match self.guard.check(request.uri().path(), request.headers()) {
            Ok(caller) => {
                request.headers_mut().remove(http::header::AUTHORIZATION);
                if let Some(caller) = caller {
                    request.extensions_mut().insert(caller);
                }
                Box::pin(self.inner.call(request))
            }
            Err(status) => {
                tracing::debug!(path = request.uri().path(), code = ?status.code(), "refused");
                Box::pin(std::future::ready(Ok(status.into_http())))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT: &str = "cccccccccccccccccccc";
    const WORKER: &str = "wwwwwwwwwwwwwwwwwwww";

    fn guard() -> Guard {
        let set =
            TokenSet::parse(&format!("client trainer {CLIENT}\nworker pool {WORKER}")).unwrap();
        Guard::new(set, |p| if p.ends_with("/Work") { Role::Worker } else { Role::Client }, "test")
    }

    fn headers(value: Option<&str>) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        if let Some(v) = value {
            h.insert(http::header::AUTHORIZATION, v.parse().unwrap());
        }
        h
    }

    #[test]
    fn the_right_token_passes_with_its_name() {
        let c = guard().check("/s/Read", &headers(Some(&format!("Bearer {CLIENT}")))).unwrap();
        assert_eq!(c, Some(Caller { role: Role::Client, name: "trainer".into() }));
        let c = guard().check("/s/Work", &headers(Some(&format!("Bearer {WORKER}")))).unwrap();
        assert_eq!(c.unwrap().name.as_ref(), "pool");
    }

    #[test]
    fn the_health_service_needs_no_token_and_nothing_else_is_exempt() {
        let c = guard().check("/grpc.health.v1.Health/Check", &headers(None)).unwrap();
        assert_eq!(c, None, "a probe sends no token");
        assert!(guard().check("/grpc.health.v1.HealthX/Check", &headers(None)).is_err());
        assert!(guard().check("/s/grpc.health.v1.Health/", &headers(None)).is_err());
    }

    #[test]
    fn a_missing_token_is_unauthenticated_naming_the_role_and_the_flag() {
        let e = guard().check("/s/Read", &headers(None)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("`client` bearer token"), "{}", e.message());
        assert!(e.message().contains("--token-file"), "{}", e.message());
    }

    #[test]
    fn a_wrong_token_is_unauthenticated_and_not_echoed() {
        let wrong = "Bearer zzzzzzzzzzzzzzzzzzzzzzzz";
        let e = guard().check("/s/Read", &headers(Some(wrong))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::Unauthenticated);
        assert!(e.message().contains("not one this test accepts"), "{}", e.message());
        assert!(!e.message().contains("zzzz"), "{}", e.message());
        let e = guard().check("/s/Read", &headers(Some(CLIENT))).unwrap_err();
        assert!(e.message().contains("not `Bearer TOKEN`"), "{}", e.message());
    }

    #[test]
    fn a_token_of_another_role_is_permission_denied_naming_both_roles() {
        let e = guard().check("/s/Read", &headers(Some(&format!("Bearer {WORKER}")))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
        assert!(e.message().contains("`pool` has role `worker`"), "{}", e.message());
        assert!(e.message().contains("needs a `client` token"), "{}", e.message());
        let e = guard().check("/s/Work", &headers(Some(&format!("Bearer {CLIENT}")))).unwrap_err();
        assert_eq!(e.code(), tonic::Code::PermissionDenied);
    }

    #[test]
    fn an_open_guard_checks_nothing() {
        assert_eq!(Guard::open("test").check("/s/Read", &headers(None)).unwrap(), None);
    }
}
