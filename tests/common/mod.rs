//! Fixtures for the integration tests: an in-process cluster on 127.0.0.1 with
//! real gRPC, and the one harness for real `sluice` processes (`sluice_testkit`:
//! child processes, quorums, reserved ports, moto, waits with deadlines) bound to
//! the binary under test.
#![allow(dead_code)]

pub mod eo_cluster;
pub mod scrape;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use futures::StreamExt;
use sluice_client::{Client, ElementStream, RetryPolicy};
use sluice_dataset::FunctionRegistry;
use sluice_dispatcher::{DispatcherConfig, DispatcherHandle};
use sluice_testkit::Sluice;
use sluice_worker::{WorkerConfig, WorkerHandle};
use tokio::net::TcpListener;

// Each test binary uses some of these.
#[allow(unused_imports)]
pub use sluice_testkit::{wait_blocking, wait_until, Child as Proc, Port, Quorum, DEADLINE};

/// Longer than any test's deadline: a wait that ends by itself fails the test.
pub const LONG: Duration = Duration::from_secs(3600);

/// A dispatcher whose long polls (consumers' and workers') may wait an hour, so
/// only the wake-up on a change can end one within `DEADLINE`.
pub fn patient_config() -> DispatcherConfig {
    DispatcherConfig { max_client_wait: LONG, ..DispatcherConfig::default() }
}

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
}

/// A dispatcher and workers in this process, each on its own reserved loopback
/// port, so a restart binds its address again without racing anyone for it.
pub struct Cluster {
    /// `None` only while `restart_dispatcher` swaps it.
    pub dispatcher: Option<DispatcherHandle>,
    pub dispatcher_address: String,
    pub workers: Vec<WorkerHandle>,
    /// Every port bound here, held for the cluster's life.
    ports: Vec<Port>,
}

/// A listener on a newly reserved port (kept in `ports`).
async fn bind_reserved(ports: &mut Vec<Port>) -> TcpListener {
    let port = Port::reserve().expect("a loopback port");
    let listener = TcpListener::bind(port.address()).await.unwrap();
    ports.push(port);
    listener
}

impl Cluster {
    pub async fn start(workers: usize) -> Cluster {
        Self::start_with(workers, DispatcherConfig::default()).await
    }

    pub async fn start_with(workers: usize, config: DispatcherConfig) -> Cluster {
        init_tracing();
        let mut ports = vec![];
        let listener = bind_reserved(&mut ports).await;
        let dispatcher =
            sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap();
        let dispatcher_address = dispatcher.address().to_string();
        let mut cluster =
            Cluster { dispatcher: Some(dispatcher), dispatcher_address, workers: vec![], ports };
        for _ in 0..workers {
            cluster.add_worker().await;
        }
        cluster.wait_workers(workers).await;
        cluster
    }

    /// A dispatcher whose `worker_addresses` lists `workers` workers, and those
    /// workers, in list order: `workers[i]` reads static shard `i`. Their ports are
    /// bound before the dispatcher starts, so the list is known without a race.
    pub async fn start_listed(workers: usize) -> Cluster {
        init_tracing();
        let (mut ports, mut listeners) = (vec![], vec![]);
        for _ in 0..workers {
            listeners.push(bind_reserved(&mut ports).await);
        }
        let worker_addresses: Vec<String> =
            listeners.iter().map(|l| l.local_addr().unwrap().to_string()).collect();
        let config = DispatcherConfig { worker_addresses, ..DispatcherConfig::default() };
        let listener = bind_reserved(&mut ports).await;
        let dispatcher =
            sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap();
        let dispatcher_address = dispatcher.address().to_string();
        let mut cluster =
            Cluster { dispatcher: Some(dispatcher), dispatcher_address, workers: vec![], ports };
        for listener in listeners {
            let config = WorkerConfig::for_tests(cluster.addresses());
            let w = sluice_worker::spawn(listener, config, FunctionRegistry::builtin());
            cluster.workers.push(w.await.unwrap());
        }
        cluster.wait_workers(workers).await;
        cluster
    }

    /// Stops worker `i` and starts a new one (new `worker_uid`, no state) on the
    /// same address, at the same position in `workers`.
    pub async fn restart_worker(&mut self, i: usize) {
        let old = self.workers.remove(i);
        let address = old.address().to_string();
        old.shutdown().await.unwrap();
        let listener = TcpListener::bind(&address).await.unwrap();
        let config = WorkerConfig::for_tests(self.addresses());
        let new = sluice_worker::spawn(listener, config, FunctionRegistry::builtin());
        self.workers.insert(i, new.await.unwrap());
    }

    pub fn addresses(&self) -> Vec<String> {
        vec![self.dispatcher_address.clone()]
    }

    /// Stops the dispatcher and starts a new one, with empty in-memory state, on
    /// the same address.
    pub async fn restart_dispatcher(&mut self) {
        if let Some(old) = self.dispatcher.take() {
            old.shutdown().await.unwrap();
        }
        let listener = TcpListener::bind(&self.dispatcher_address).await.unwrap();
        let config = DispatcherConfig::default();
        let d = sluice_dispatcher::spawn(listener, config, FunctionRegistry::builtin()).await;
        self.dispatcher = Some(d.unwrap());
    }

    pub async fn add_worker(&mut self) {
        self.add_worker_with(WorkerConfig::for_tests(self.addresses())).await;
    }

    pub async fn add_worker_with(&mut self, config: WorkerConfig) {
        let listener = bind_reserved(&mut self.ports).await;
        let w = sluice_worker::spawn(listener, config, FunctionRegistry::builtin()).await.unwrap();
        self.workers.push(w);
    }

    pub fn client(&self) -> Client {
        Client::new(&self.addresses(), RetryPolicy::for_tests()).unwrap()
    }

    /// Waits until `n` workers are registered with the dispatcher.
    pub async fn wait_workers(&self, n: usize) {
        let client = self.client();
        wait_until(&format!("{n} registered workers"), || {
            let client = client.clone();
            async move { client.status().await.map(|s| s.workers.len() >= n).unwrap_or(false) }
        })
        .await;
    }
}

/// Reads a stream of int64 scalars to the end.
pub async fn collect_i64(mut stream: ElementStream) -> Vec<i64> {
    rest_i64(&mut stream).await
}

/// Reads the rest of a stream of int64 scalars to its end, keeping the stream
/// (e.g. for its `loss_report`).
pub async fn rest_i64(stream: &mut ElementStream) -> Vec<i64> {
    let mut out = vec![];
    let read = tokio::time::timeout(DEADLINE, async {
        while let Some(e) = stream.next().await {
            out.push(e.expect("element").as_i64().expect("an int64 scalar"));
        }
    });
    read.await.expect("the read ends before the deadline");
    out
}

/// Value → how often it arrived.
pub fn counts(values: &[i64]) -> BTreeMap<i64, usize> {
    let mut m = BTreeMap::new();
    for v in values {
        *m.entry(*v).or_insert(0) += 1;
    }
    m
}

/// The harness bound to the `sluice` binary under test: every child is killed and
/// reaped when dropped (and by the kernel if the test process dies), every wait has
/// a deadline, and a failure to start quotes the child's stderr.
pub fn sluice() -> Sluice {
    Sluice::new(env!("CARGO_BIN_EXE_sluice"))
}

/// Starts `sluice ARGS` and waits for its `listening on` line (see [`Sluice::server`]).
pub fn server(args: &[&str]) -> Proc {
    sluice().server(args)
}

/// [`server`] with extra environment variables.
pub fn server_env(args: &[&str], envs: &[(String, String)]) -> Proc {
    sluice().server_env(args, envs)
}

/// Runs `sluice ARGS` to completion, with a deadline; returns (status ok, stdout, stderr).
pub fn run_sluice(args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    sluice().run(args, stdin)
}

/// The registry as the leader reports it: a follower's answer, or a leader's that
/// could not confirm itself in time, may lag.
pub async fn leader_status(client: &Client) -> sluice_client::ServiceStatus {
    let start = Instant::now();
    loop {
        if let Ok(s) = client.status().await {
            if s.from_leader {
                return s;
            }
        }
        assert!(start.elapsed() < DEADLINE, "no leader answered status within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The standard gRPC health status of `service` ("" = the server as a whole) at
/// `address`, as an orchestrator's probe sees it (no token); `None` when nothing
/// answers.
pub async fn health_status(
    address: &str,
    service: &str,
) -> Option<tonic_health::pb::health_check_response::ServingStatus> {
    use tonic_health::pb::{health_client::HealthClient, HealthCheckRequest};
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .ok()?
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(2))
        .connect()
        .await
        .ok()?;
    let request = HealthCheckRequest { service: service.to_string() };
    let answer = HealthClient::new(channel).check(request).await.ok()?;
    Some(answer.into_inner().status())
}

/// Whether the server at `address` reports SERVING (a Kubernetes readiness probe).
pub async fn health_serving(address: &str) -> bool {
    use tonic_health::pb::health_check_response::ServingStatus;
    health_status(address, "").await == Some(ServingStatus::Serving)
}
