//! Who may read a metrics listener, and over what: TLS with the server's own
//! certificate when it has one, and a bearer token of role `metrics` when it checks
//! tokens (`--auth-tokens`), so `/metrics` (and the status page beside it) can listen
//! off loopback under the same rule as every other listener: authenticated and
//! encrypted (docs/security.md, "Metrics and status page").
//!
//! A `metrics` token may call no RPC (the gRPC guards want `client`, `worker` or
//! `peer`), and a `client` or `worker` token may not scrape: a scraper holds the
//! least privilege that lets it scrape.

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, AUTHORIZATION, WWW_AUTHENTICATE};
use hyper::{Request, Response, StatusCode};
use sluice_security::{Role, SecurityError, TlsSettings, TokenSet};
use tokio_rustls::TlsAcceptor;

/// The protections of one metrics listener.
#[derive(Clone, Default)]
pub struct Access {
    tls: Option<TlsAcceptor>,
    tokens: Option<Arc<TokenSet>>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Access")
            .field("tls", &self.tls.is_some())
            .field("tokens", &self.tokens.as_ref().map(|t| t.len()))
            .finish()
    }
}

impl Access {
    /// Plain HTTP, no token: the loopback default.
    pub fn open() -> Access {
        Access::default()
    }

    /// TLS with `tls`'s certificate (when it has one) and, with `tokens`, a
    /// `metrics` bearer token on every request.
    pub fn new(
        tls: Option<&TlsSettings>,
        tokens: Option<TokenSet>,
    ) -> Result<Access, SecurityError> {
        let tls = match tls {
            Some(t) if t.has_identity() => Some(TlsAcceptor::from(t.http_server_config()?)),
            _ => None,
        };
        Ok(Access { tls, tokens: tokens.map(Arc::new) })
    }

    /// Whether connections must speak TLS.
    pub fn uses_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Whether requests must carry a `metrics` token.
    pub fn checks_tokens(&self) -> bool {
        self.tokens.is_some()
    }

    pub(crate) fn acceptor(&self) -> Option<&TlsAcceptor> {
        self.tls.as_ref()
    }

    /// `None` when `req` may be answered; else the refusal to send, which names
    /// what is missing or wrong (never a secret).
    pub(crate) fn refusal<B>(&self, req: &Request<B>) -> Option<Response<Full<Bytes>>> {
        let Some(tokens) = &self.tokens else { return None };
        let presented = req
            .headers()
            .get(AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map(str::trim);
        let Some(presented) = presented else {
            return Some(refuse(
                StatusCode::UNAUTHORIZED,
                "this endpoint wants a `metrics` bearer token (`Authorization: Bearer TOKEN`; \
                 a `metrics` line of the server's --auth-tokens file)\n"
                    .to_string(),
            ));
        };
        match tokens.find(presented.as_bytes()) {
            None => Some(refuse(
                StatusCode::UNAUTHORIZED,
                "the bearer token is not one this server accepts (see its --auth-tokens)\n"
                    .to_string(),
            )),
            Some(t) if t.role != Role::Metrics => Some(refuse(
                StatusCode::FORBIDDEN,
                format!(
                    "the token `{}` has role `{}`; scraping needs a `metrics` token\n",
                    t.name, t.role
                ),
            )),
            Some(_) => None,
        }
    }
}

fn refuse(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if status == StatusCode::UNAUTHORIZED {
        r.headers_mut().insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    r
}
