//! The health-only listener (`--health-addr`): the standard gRPC health service
//! (`grpc.health.v1.Health`) and nothing else, in plain text, without a token.
//!
//! Why a second listener: Kubernetes' native gRPC probes speak plain-text HTTP/2
//! only, and a server's own port is TLS off loopback. What this port tells anyone
//! who reaches it is one word per service (SERVING or NOT_SERVING), the same the
//! main port already answers without a token; it carries no other service, so it
//! is the one listener allowed off loopback without TLS (a deliberate deviation
//! from "every listener off loopback is encrypted", docs/security.md).

use std::future::Future;

use tokio::net::TcpListener;
use tonic::transport::Server;
use tonic_health::pb::health_server::{Health, HealthServer};

/// Serves `health` alone on `listener` until `shutdown` resolves.
pub async fn serve<T: Health>(
    listener: TcpListener,
    health: HealthServer<T>,
    shutdown: impl Future<Output = ()>,
) -> Result<(), tonic::transport::Error> {
    if let Ok(address) = listener.local_addr() {
        tracing::info!(%address, "health service served in plain text (--health-addr)");
    }
    let limits = sluice_proto::limits::ServerLimits::default();
    let incoming = crate::Incoming::new(listener, &limits, "health port");
    limits
        .apply(Server::builder())
        .add_service(health)
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
}
