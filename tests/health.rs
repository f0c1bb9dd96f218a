//! The standard gRPC health service (issue 16), as an orchestrator's probe sees it:
//! real `sluice` processes on loopback, `grpc.health.v1.Health/Check` without a
//! token. A dispatcher serves while it knows a leader and has applied its log; a
//! worker serves while it is registered and not draining.

mod common;
#[path = "security/pki.rs"]
#[allow(dead_code)]
mod pki;

use common::{health_status as status, wait_until, Port};
use sluice_testkit::{Quorum, QuorumConfig};
use tonic_health::pb::health_check_response::ServingStatus;

async fn wait_status(what: &str, address: &str, service: &str, want: ServingStatus) {
    wait_until(&format!("{what}: {want:?}"), || async {
        status(address, service).await == Some(want)
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_serves_while_it_knows_a_leader() {
    common::init_tracing();
    let dir = tempfile::tempdir().unwrap();
    let work_dir = dir.path().to_str().unwrap().to_string();
    let config = QuorumConfig::new(common::sluice().exe().to_path_buf(), 3, &work_dir);
    let mut q = Quorum::start_async(config).await.unwrap();
    for id in 1..=3 {
        let a = q.address(id).to_string();
        wait_status("a node of a healthy quorum", &a, "", ServingStatus::Serving).await;
        wait_status("its Dispatcher service", &a, "sluice.v1.Dispatcher", ServingStatus::Serving)
            .await;
    }
    // Alone, the last node loses its leader (an election it cannot win): not serving,
    // and still answering the probe.
    let l = q.leader().await.unwrap();
    let last = (1..=3).find(|id| *id != l).unwrap();
    for id in (1..=3).filter(|id| *id != last) {
        q.kill(id);
    }
    let a = q.address(last).to_string();
    wait_status("a node cut off from its quorum", &a, "", ServingStatus::NotServing).await;
    // Back with a majority: serving again.
    let other = (1..=3).find(|id| *id != last).unwrap();
    q.start_node(other).unwrap();
    wait_status("the node with a majority again", &a, "", ServingStatus::Serving).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serves_once_registered_and_stops_serving_when_it_drains() {
    common::init_tracing();
    // The dispatcher's port, reserved: the worker starts before anything listens.
    let port = Port::reserve().unwrap();
    let (d_address, d_port) = (port.address(), port.number().to_string());
    let worker_args = ["worker", "--dispatcher", &d_address, "--port", "0"];
    let worker = common::server(&[&worker_args[..], &["--drain-timeout-secs", "3600"]].concat());
    let w = worker.address().to_string();
    wait_status("a worker no dispatcher has heard of", &w, "", ServingStatus::NotServing).await;
    drop(port);
    let _dispatcher = common::server(&["dispatcher", "--port", &d_port]);
    wait_status("the registered worker", &w, "", ServingStatus::Serving).await;
    wait_status("its Worker service", &w, "sluice.v1.Worker", ServingStatus::Serving).await;

    // A reader holding a stream open keeps the worker draining after SIGTERM.
    let id = {
        let (ok, id, err) = common::run_sluice(
            &["register", "--dispatcher", &d_address, "-"],
            Some(r#"{"stages": [{"range": {"stop": 100000000}}]}"#),
        );
        assert!(ok, "{err}");
        id.trim().to_string()
    };
    let read =
        ["read", "--dispatcher", &d_address, "--dataset-id", &id, "--mode", "parallel_epochs"];
    let mut reader = common::sluice().spawn(&read);
    let mut stdout = reader.take_stdout().expect("the reader's stdout");
    let mut line = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut line).expect("a first element");
    let pid = nix::unistd::Pid::from_raw(worker.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    wait_status("the draining worker", &w, "", ServingStatus::NotServing).await;
}

/// `--health-addr`: the health service alone, in plain text, next to TLS ports
/// that want tokens (Kubernetes' gRPC probes speak neither TLS nor tokens). It
/// reports what the main port reports and serves nothing else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plain_health_port_answers_probes_beside_tls_ports_and_serves_nothing_else() {
    common::init_tracing();
    let pki = pki::Pki::new();
    let (d_health, w_health) = (Port::reserve().unwrap(), Port::reserve().unwrap());
    let (d_health_address, w_health_address) = (d_health.address(), w_health.address());
    drop((d_health, w_health));
    let tls = [
        "--tls-cert",
        &pki.arg("server.pem"),
        "--tls-key",
        &pki.arg("server.key"),
        "--tls-ca",
        &pki.arg("ca.pem"),
        "--auth-tokens",
        &pki.arg("tokens"),
    ]
    .map(str::to_string);
    let tls: Vec<&str> = tls.iter().map(String::as_str).collect();
    let dispatcher = common::server(
        &[&["dispatcher", "--port", "0", "--health-addr", &d_health_address][..], &tls].concat(),
    );
    let d = dispatcher.address().to_string();
    wait_status("a dispatcher's plain health port", &d_health_address, "", ServingStatus::Serving)
        .await;
    // The TLS port does not speak plain text; the plain port serves no Dispatcher RPC.
    assert_eq!(status(&d, "").await, None, "the TLS client port answered plain text");
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{d_health_address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let refused = sluice_proto::v1::dispatcher_client::DispatcherClient::new(channel)
        .get_status(sluice_proto::v1::GetStatusRequest::default())
        .await
        .unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unimplemented, "{refused:?}");

    let token = pki.arg("worker.token");
    let worker_args = [
        &["worker", "--dispatcher", &d, "--port", "0", "--health-addr", &w_health_address][..],
        &tls,
        &["--token-file", &token, "--drain-timeout-secs", "0"],
    ]
    .concat();
    let worker = common::server(&worker_args);
    wait_status("a worker's plain health port", &w_health_address, "", ServingStatus::Serving)
        .await;
    let pid = nix::unistd::Pid::from_raw(worker.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    wait_until("the stopped worker's health port closes", || async {
        status(&w_health_address, "").await.is_none()
    })
    .await;
}
