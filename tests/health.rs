//! The standard gRPC health service (issue 16), as an orchestrator's probe sees it:
//! real `sluice` processes on loopback, `grpc.health.v1.Health/Check` without a
//! token. A dispatcher serves while it knows a leader and has applied its log; a
//! worker serves while it is registered and not draining.

mod common;

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
