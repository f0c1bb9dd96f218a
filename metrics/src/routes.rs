//! Extra pages beside `GET /metrics` on the same listener (the dispatcher's status
//! page): a role passes a [`Routes`] to [`crate::spawn_with_routes`], and the
//! server asks it for every `GET`/`HEAD` path other than `/metrics`.
//!
//! Narrow on purpose: a route sees only the path (the query string is dropped)
//! and answers a whole [`Page`] synchronously, so a route cannot hold a
//! connection open, read a body or stream; `/metrics` is always answered by the
//! registry first and cannot be shadowed. A page over [`MAX_PAGE_BYTES`] is
//! answered as a 500 that says so, so a bug in a route cannot make the endpoint
//! serve unbounded bodies.

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{HeaderValue, ALLOW, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Response, StatusCode};

/// The largest body a route may answer (4 MiB).
pub const MAX_PAGE_BYTES: usize = 4 << 20;

/// One answer of a [`Routes`]: a content type and a body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Page {
    pub content_type: &'static str,
    pub body: String,
}

impl Page {
    pub fn html(body: String) -> Page {
        Page { content_type: "text/html; charset=utf-8", body }
    }

    pub fn json(body: String) -> Page {
        Page { content_type: "application/json", body }
    }
}

/// Pages served beside `/metrics`. `None`: no such page (404).
pub trait Routes: Send + Sync + 'static {
    /// The page at `path` (e.g. `/`), rendered now. Called on the runtime: it
    /// must not block for long (read in-memory state only).
    fn page(&self, path: &str) -> Option<Page>;
}

/// No extra pages: every path but `/metrics` is 404.
pub struct NoRoutes;

impl Routes for NoRoutes {
    fn page(&self, _path: &str) -> Option<Page> {
        None
    }
}

pub(crate) fn plain(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r
}

/// 405 with the methods every page accepts.
pub(crate) fn method_not_allowed(hint: &'static str) -> Response<Full<Bytes>> {
    let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, hint);
    r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    r
}

/// The answer of `routes` for a request other than `/metrics`.
pub(crate) fn respond(routes: &dyn Routes, method: &Method, path: &str) -> Response<Full<Bytes>> {
    // Checked before rendering: a POST flood costs no page renders.
    if method != Method::GET && method != Method::HEAD {
        return method_not_allowed("pages are read with GET\n");
    }
    let Some(page) = routes.page(path) else {
        return plain(StatusCode::NOT_FOUND, "not found: metrics are at GET /metrics\n");
    };
    if page.body.len() > MAX_PAGE_BYTES {
        tracing::warn!(path, bytes = page.body.len(), "a page is over the size bound");
        return plain(StatusCode::INTERNAL_SERVER_ERROR, "page over its size bound\n");
    }
    let mut r = Response::new(Full::new(Bytes::from(page.body)));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(page.content_type));
    // Pages show live state: never serve one from a cache.
    r.headers_mut().insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}
