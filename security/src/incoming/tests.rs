//! The accept loop on loopback: silent connections closed, the TLS handshake
//! bounded, the bounds refusing at once, and a real client served after.

use std::net::SocketAddr;
use std::time::Duration;

use sluice_proto::limits::ServerLimits;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tonic::transport::{Server, ServerTlsConfig};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::Incoming;
use crate::{ClientSecurity, TlsSettings};

/// The longest any step may take before the test fails (a deadline, not a
/// measurement: each step normally takes milliseconds).
const DEADLINE: Duration = Duration::from_secs(20);

/// A health server on 127.0.0.1 within `limits`; stops when the test drops it.
struct Served {
    address: SocketAddr,
    task: tokio::task::JoinHandle<()>,
    /// The accept loop's count of open connections.
    counts: std::sync::Arc<std::sync::Mutex<super::Counts>>,
}

impl Served {
    fn open_connections(&self) -> usize {
        self.counts.lock().unwrap().total
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(limits: ServerLimits, tls: Option<ServerTlsConfig>) -> Served {
    crate::install_crypto_provider();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (_, health) = tonic_health::server::health_reporter();
    let mut builder = limits.apply(Server::builder());
    if let Some(tls) = tls {
        builder = builder.tls_config(limits.tls(tls)).unwrap();
    }
    let incoming = Incoming::new(listener, &limits, "test");
    let counts = incoming.counts.clone();
    let task = tokio::spawn(async move {
        let _ = builder.add_service(health).serve_with_incoming(incoming).await;
    });
    Served { address, task, counts }
}

/// Reads until the server closes `tcp` (EOF or a reset), whatever it sent first.
async fn closed_by_server(tcp: &mut TcpStream, what: &str) {
    let read_to_end = async {
        let mut buf = [0u8; 1024];
        while let Ok(1..) = tcp.read(&mut buf).await {}
    };
    tokio::time::timeout(DEADLINE, read_to_end)
        .await
        .unwrap_or_else(|_| panic!("{what}: the server kept the connection open"));
}

/// Waits until a real gRPC client gets an answer.
async fn served(address: SocketAddr) {
    let url = ClientSecurity::none().url(&address.to_string()).unwrap();
    let ask = async {
        loop {
            let channel = tonic::transport::Endpoint::from_shared(url.clone()).unwrap();
            if let Ok(channel) = channel.connect().await {
                let mut health = HealthClient::new(channel);
                if health.check(HealthCheckRequest::default()).await.is_ok() {
                    return;
                }
            }
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(DEADLINE, ask).await.expect("a real client was not served");
}

fn limits() -> ServerLimits {
    ServerLimits {
        silent_connection_timeout: Duration::from_millis(300),
        tls_handshake_timeout: Duration::from_millis(300),
        ..ServerLimits::default()
    }
}

#[tokio::test]
async fn silent_connections_are_closed_and_then_a_real_client_is_served() {
    let server = serve(ServerLimits { max_connections: 20, ..limits() }, None).await;
    let mut idle = vec![];
    for _ in 0..20 {
        idle.push(TcpStream::connect(server.address).await.unwrap());
    }
    for (i, tcp) in idle.iter_mut().enumerate() {
        closed_by_server(tcp, &format!("silent connection {i}")).await;
    }
    served(server.address).await;
}

#[tokio::test]
async fn a_tls_handshake_that_stalls_is_closed() {
    let (tls, _) = self_signed();
    // Silent connections are not cut here: only the handshake timeout can close it.
    let limits = ServerLimits { silent_connection_timeout: Duration::from_secs(3600), ..limits() };
    let server = serve(limits, Some(tls.server_config().unwrap())).await;
    let mut tcp = TcpStream::connect(server.address).await.unwrap();
    // The start of a TLS record (a handshake), never finished.
    tcp.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await.unwrap();
    closed_by_server(&mut tcp, "a stalled TLS handshake").await;
}

/// A self-signed certificate for `localhost`: (the server's settings, its DER).
fn self_signed() -> (TlsSettings, Vec<u8>) {
    let key = rcgen::KeyPair::generate().unwrap();
    let params = rcgen::CertificateParams::new(vec!["localhost".to_string()]).unwrap();
    let cert = params.self_signed(&key).unwrap();
    let tls = TlsSettings::from_pem(Some((cert.pem().into(), key.serialize_pem().into())), None);
    (tls, cert.der().to_vec())
}

#[tokio::test]
async fn a_tls_peer_that_finishes_its_handshake_and_then_says_nothing_is_closed() {
    let (tls, der) = self_signed();
    // The silent timeout cannot close it (the handshake's bytes came): only
    // the idle one can.
    let limits = ServerLimits {
        silent_connection_timeout: Duration::from_secs(3600),
        idle_connection_timeout: Duration::from_millis(300),
        ..limits()
    };
    let server = serve(limits, Some(tls.server_config().unwrap())).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(der.into()).unwrap();
    let config =
        rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let tcp = TcpStream::connect(server.address).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.expect("the handshake completes");
    // No HTTP/2 preface, nothing: the server closes it.
    let read_to_end = async {
        let mut buf = [0u8; 1024];
        while let Ok(1..) = tls.read(&mut buf).await {}
    };
    tokio::time::timeout(DEADLINE, read_to_end)
        .await
        .expect("a TLS peer silent after its handshake: the server kept the connection open");
}

#[tokio::test]
async fn a_live_idle_connection_outlives_the_idle_timeout_on_its_pings() {
    // Pings every 100 ms; a connection that receives nothing for 500 ms is cut.
    let limits = ServerLimits {
        http2_keepalive_interval: Duration::from_millis(100),
        http2_keepalive_timeout: Duration::from_secs(1),
        idle_connection_timeout: Duration::from_millis(500),
        ..limits()
    };
    let server = serve(limits, None).await;
    let url = ClientSecurity::none().url(&server.address.to_string()).unwrap();
    let channel = tonic::transport::Endpoint::from_shared(url).unwrap().connect().await.unwrap();
    let mut health = HealthClient::new(channel);
    health.check(HealthCheckRequest::default()).await.unwrap();
    assert_eq!(server.open_connections(), 1);
    // Idle for six idle timeouts: the one connection stays open throughout
    // (a close would drop the count to 0 until the next call reconnects).
    let idle = tokio::time::Instant::now();
    while idle.elapsed() < Duration::from_secs(3) {
        assert_eq!(server.open_connections(), 1, "the idle, live connection was closed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    health.check(HealthCheckRequest::default()).await.unwrap();
    assert_eq!(server.open_connections(), 1);
}

#[tokio::test]
async fn at_a_connection_bound_a_new_connection_is_closed_at_once() {
    // Silent connections live for an hour here: a close can only be a refusal.
    let long = Duration::from_secs(3600);
    for (all, per_ip) in [(3, 1000), (1000, 3)] {
        let limits = ServerLimits {
            max_connections: all,
            max_connections_per_ip: per_ip,
            silent_connection_timeout: long,
            ..limits()
        };
        let server = serve(limits, None).await;
        let mut held = vec![];
        for _ in 0..3 {
            held.push(TcpStream::connect(server.address).await.unwrap());
        }
        let mut over = TcpStream::connect(server.address).await.unwrap();
        closed_by_server(&mut over, &format!("the 4th connection ({all} in all, {per_ip}/IP)"))
            .await;
        drop(held);
        served(server.address).await;
    }
}

#[test]
fn refusals_are_logged_at_most_once_per_interval_counting_the_rest() {
    let mut log = super::RateLimited::default();
    assert_eq!(log.allow(), Some(0));
    assert_eq!(log.allow(), None);
    assert_eq!(log.allow(), None);
    log.last = log.last.map(|t| t - super::LOG_EVERY);
    assert_eq!(log.allow(), Some(2));
}
