//! The Worker service as the server mounts it: `GetElements` answered here, every
//! other method by the generated `WorkerServer`.
//!
//! tonic's generated server always encodes responses with its prost codec, which
//! copies every tensor's bytes into one encode buffer (see `scatter`). So
//! [`WorkerRoutes`] takes the GetElements path itself: it reads the request with
//! standard gRPC framing (`request`), opens the stream with the same
//! [`open_stream`] as the generated method, and answers with a body (`body`) whose
//! data frames are the zero-copy chunks of each message, ending with the gRPC
//! status in trailers. To clients it is the same protocol: any gRPC client reads it.

pub(crate) mod body;
pub(crate) mod request;

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use sluice_proto::v1::worker_server::WorkerServer;
use tonic::body::Body;
use tonic::server::NamedService;
use tower::Service;

use crate::service::{open_stream, WorkerService};
use crate::state::Worker;

pub(crate) use sluice_proto::contract::element_route::PATH as GET_ELEMENTS_PATH;

/// The Worker service with GetElements served without copying tensor data.
#[derive(Clone)]
pub(crate) struct WorkerRoutes {
    worker: Arc<Worker>,
    /// Everything but GetElements, with its message size bounds.
    generated: WorkerServer<WorkerService>,
}

impl WorkerRoutes {
    pub(crate) fn new(worker: Arc<Worker>, generated: WorkerServer<WorkerService>) -> Self {
        WorkerRoutes { worker, generated }
    }
}

impl NamedService for WorkerRoutes {
    const NAME: &'static str = <WorkerServer<WorkerService> as NamedService>::NAME;
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<http::Response<Body>, Infallible>> + Send + 'static>>;

impl Service<http::Request<Body>> for WorkerRoutes {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Service::<http::Request<Body>>::poll_ready(&mut self.generated, cx)
    }

    fn call(&mut self, request: http::Request<Body>) -> ResponseFuture {
        if request.uri().path() == GET_ELEMENTS_PATH {
            let worker = self.worker.clone();
            Box::pin(async move { Ok(get_elements(&worker, request).await) })
        } else {
            Box::pin(self.generated.call(request))
        }
    }
}

/// A GetElements call: a streaming response, or (for a request refused before the
/// stream starts) a trailers-only response carrying the status, as tonic answers.
async fn get_elements(worker: &Arc<Worker>, request: http::Request<Body>) -> http::Response<Body> {
    let opened = match request::read(request.into_body()).await {
        Ok((first, rest)) => open_stream(worker, first, |grants| grants.feed(rest.into_stream())),
        Err(bad) => {
            tracing::debug!(error = %bad, "refused a malformed GetElements request");
            Err(bad.into())
        }
    };
    match opened {
        Ok(messages) => body::response(messages),
        Err(status) => status.into_http(),
    }
}
