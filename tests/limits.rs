//! What one caller can make the dispatcher do or hold, through its gRPC service:
//! a worker is bound to the process it registered as, and per-dispatcher caps
//! answer ResourceExhausted naming the cap and its flag (issue 14, "Limits on
//! what one client can make the service hold").

mod common;

use common::{collect_i64, Cluster};
use sluice_client::{Client, ProcessingMode, ReadOptions};
use sluice_dataset::DatasetDef;
use sluice_dispatcher::{DispatcherConfig, Limits};
use sluice_proto::limits::ServerLimits;
use sluice_proto::v1 as pb;
use tonic::Code;

/// A DYNAMIC job's iteration over `range(n)`: (iteration id, client id).
async fn dynamic_iteration(client: &Client, n: i64) -> (u64, u64) {
    let d = client.dispatcher();
    let dataset_id = client.register_dataset(&DatasetDef::range(n), None).await.unwrap();
    let job = pb::GetOrCreateJobRequest {
        dataset_id,
        mode: pb::ProcessingMode::Dynamic as i32,
        ..Default::default()
    };
    let job_id = d.get_or_create_job(job).await.unwrap().job_id;
    let it = pb::GetOrCreateIterationRequest { job_id, repetition: 0, ..Default::default() };
    let r = d.get_or_create_iteration(it).await.unwrap();
    (r.iteration_id, r.client_id)
}

fn split_request(task_id: u64, worker_uid: u64, sequence: u64) -> pb::GetSplitRequest {
    pb::GetSplitRequest { task_id, worker_uid, sequence, max_splits: 1, ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_from_another_worker_incarnation_is_refused_and_takes_nothing() {
    // No real worker: the test speaks the worker protocol itself.
    let cluster = Cluster::start(0).await;
    let client = cluster.client();
    let d = client.dispatcher();
    let address = "127.0.0.1:9".to_string();
    let register = |uid| pb::RegisterWorkerRequest {
        address: address.clone(),
        worker_uid: uid,
        functions: vec![],
        python_version: String::new(),
    };
    d.register_worker(register(1)).await.unwrap();
    let _ = dynamic_iteration(&client, 10).await;
    // The registration answers nothing for an iteration made after it; the
    // heartbeat of the registered process gets the task.
    let hb = |uid, finished: Vec<u64>| pb::WorkerHeartbeatRequest {
        address: address.clone(),
        worker_uid: uid,
        finished_tasks: finished,
        ..Default::default()
    };
    let tasks = d.worker_heartbeat(hb(1, vec![])).await.unwrap().new_tasks;
    let task = tasks[0].task_id;

    let forged = d.get_split(split_request(task, 2, 0)).await.unwrap_err();
    assert_eq!(forged.code(), Some(Code::FailedPrecondition), "{forged}");
    let msg = forged.to_string();
    assert!(msg.contains("worker_uid 1") && msg.contains("worker_uid 2"), "{msg}");
    let err = d.worker_heartbeat(hb(2, vec![task])).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::FailedPrecondition), "{err}");
    assert!(err.to_string().contains("worker_uid 2"), "{err}");

    // Nothing was taken: the registered process gets the first split.
    let first = d.get_split(split_request(task, 1, 0)).await.unwrap();
    assert_eq!(first.split.map(|s| (s.begin, s.end)), Some((0, 1)));
    // And the forged report finished nothing.
    let status = client.status().await.unwrap();
    let finished: Vec<u32> =
        status.jobs.iter().flat_map(|j| &j.iterations).map(|it| it.finished_tasks).collect();
    assert_eq!(finished, vec![0], "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_address_readers_could_not_dial_safely_is_refused_at_registration() {
    let cluster = Cluster::start(0).await;
    let d = cluster.client().dispatcher().clone();
    let register = |address: &str| pb::RegisterWorkerRequest {
        address: address.to_string(),
        worker_uid: 1,
        functions: vec![],
        python_version: String::new(),
    };
    // This cluster serves plain text: https:// contradicts it; the rest never parse.
    for (address, why) in [
        ("not an address", "' '"),
        ("127.0.0.1:99999", "port 99999"),
        ("https://127.0.0.1:5051", "asks for TLS"),
        ("grpc://127.0.0.1:5051", "unknown scheme"),
        ("127.0.0.1:5051/path", "path"),
    ] {
        let err = d.register_worker(register(address)).await.unwrap_err();
        assert_eq!(err.code(), Some(Code::InvalidArgument), "{address}: {err}");
        let msg = err.to_string();
        assert!(msg.contains(address) && msg.contains(why), "{address}: {msg}");
        assert!(msg.contains("HOST:PORT") && msg.contains("--advertise"), "{msg}");
    }
    let status = cluster.client().status().await.unwrap();
    assert!(status.workers.is_empty(), "a refused worker was registered: {status:?}");
    // HOST:PORT, or the scheme that matches the cluster's transport, registers.
    for address in ["127.0.0.1:5051", "http://127.0.0.1:5052", "[::1]:5053"] {
        d.register_worker(register(address)).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_and_a_worker_close_connections_that_send_nothing() {
    use tokio::io::AsyncReadExt;
    let server = ServerLimits {
        silent_connection_timeout: std::time::Duration::from_millis(300),
        ..ServerLimits::default()
    };
    let mut cluster =
        Cluster::start_with(0, DispatcherConfig { server, ..Default::default() }).await;
    let mut worker = sluice_worker::WorkerConfig::for_tests(cluster.addresses());
    worker.server = server;
    cluster.add_worker_with(worker).await;
    for address in [cluster.dispatcher_address.clone(), cluster.workers[0].address().to_string()] {
        let mut idle = tokio::net::TcpStream::connect(&address).await.unwrap();
        let read_to_end = async {
            let mut buf = [0u8; 1024];
            while let Ok(1..) = idle.read(&mut buf).await {}
        };
        // A deadline far above the timeout, not a measurement.
        tokio::time::timeout(std::time::Duration::from_secs(20), read_to_end)
            .await
            .unwrap_or_else(|_| panic!("{address} kept a silent connection open"));
    }
    // Real callers are served all along.
    cluster.wait_workers(1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dispatcher_at_a_cap_answers_resource_exhausted_naming_the_flag() {
    let limits = Limits { max_datasets: 2, max_jobs: 1, ..Limits::default() };
    let cluster = Cluster::start_with(1, DispatcherConfig { limits, ..Default::default() }).await;
    let client = cluster.client();
    let a = client.register_dataset(&DatasetDef::range(3), Some("a")).await.unwrap();
    client.register_dataset(&DatasetDef::range(4), Some("b")).await.unwrap();
    let err = client.register_dataset(&DatasetDef::range(5), None).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::ResourceExhausted), "{err}");
    assert!(err.to_string().contains("--max-datasets 2"), "{err}");
    // The datasets held still serve, up to the job cap.
    let read = ReadOptions::new(ProcessingMode::Off).job_name("only");
    let got = collect_i64(client.from_dataset_id(&a, read).await.unwrap()).await;
    assert_eq!(got, vec![0, 1, 2]);
    let err = match client.from_dataset_id(&a, ReadOptions::new(ProcessingMode::Off)).await {
        Err(e) => e,
        Ok(_) => panic!("a second job past --max-jobs 1 was created"),
    };
    assert_eq!(err.code(), Some(Code::ResourceExhausted), "{err}");
    assert!(err.to_string().contains("--max-jobs 1"), "{err}");
}

/// An HTTP/2 frame: (type, flags, stream id, payload).
type Frame = (u8, u8, u32, Vec<u8>);

async fn write_frame(tcp: &mut tokio::net::TcpStream, (kind, flags, stream, payload): Frame) {
    use tokio::io::AsyncWriteExt;
    let len = payload.len() as u32;
    let mut frame = len.to_be_bytes()[1..].to_vec();
    frame.extend_from_slice(&[kind, flags]);
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(&payload);
    tcp.write_all(&frame).await.unwrap();
}

async fn read_frame(tcp: &mut tokio::net::TcpStream) -> Frame {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 9];
    tcp.read_exact(&mut head).await.unwrap();
    let len = u32::from_be_bytes([0, head[0], head[1], head[2]]) as usize;
    let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
    let mut payload = vec![0; len];
    tcp.read_exact(&mut payload).await.unwrap();
    (head[3], head[4], stream, payload)
}

/// A GetStatus request's HEADERS block (HPACK, no Huffman, nothing indexed).
fn get_status_headers() -> Vec<u8> {
    let mut block = vec![0x83, 0x86]; // :method POST, :scheme http (static table)
    let mut literal = |name: &str, value: &str| {
        block.push(0x00);
        block.push(name.len() as u8);
        block.extend_from_slice(name.as_bytes());
        block.push(value.len() as u8);
        block.extend_from_slice(value.as_bytes());
    };
    literal(":path", "/sluice.v1.Dispatcher/GetStatus");
    literal(":authority", "dispatcher");
    literal("content-type", "application/grpc");
    literal("te", "trailers");
    block
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_over_the_per_connection_cap_is_refused() {
    const HEADERS: u8 = 0x1;
    const RST_STREAM: u8 = 0x3;
    const SETTINGS: u8 = 0x4;
    const REFUSED_STREAM: u32 = 0x7;
    let server = ServerLimits { max_concurrent_streams: 3, ..ServerLimits::default() };
    let cluster = Cluster::start_with(0, DispatcherConfig { server, ..Default::default() }).await;
    // A hand-written HTTP/2 client, which (unlike a real one) ignores the cap.
    let mut tcp = tokio::net::TcpStream::connect(&cluster.dispatcher_address).await.unwrap();
    {
        use tokio::io::AsyncWriteExt;
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n").await.unwrap();
    }
    write_frame(&mut tcp, (SETTINGS, 0, 0, vec![])).await;
    let deadline = common::DEADLINE;
    tokio::time::timeout(deadline, async {
        // The server's SETTINGS carry the cap; once acknowledged it applies.
        loop {
            let (kind, flags, _, payload) = read_frame(&mut tcp).await;
            if kind == SETTINGS && flags & 1 == 0 {
                let max_streams = payload
                    .chunks(6)
                    .find(|s| s[..2] == [0, 3])
                    .map(|s| u32::from_be_bytes([s[2], s[3], s[4], s[5]]));
                assert_eq!(max_streams, Some(3), "SETTINGS_MAX_CONCURRENT_STREAMS");
                write_frame(&mut tcp, (SETTINGS, 1, 0, vec![])).await;
                break;
            }
        }
        // Four requests whose bodies never end: each holds its stream open.
        for stream in [1, 3, 5, 7] {
            write_frame(&mut tcp, (HEADERS, 0x4, stream, get_status_headers())).await;
        }
        loop {
            let (kind, _, stream, payload) = read_frame(&mut tcp).await;
            if kind == RST_STREAM {
                let code = u32::from_be_bytes([payload[0], payload[1], payload[2], payload[3]]);
                assert_eq!((stream, code), (7, REFUSED_STREAM), "only the fourth is refused");
                break;
            }
        }
    })
    .await
    .expect("the fourth stream refused within the deadline");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_is_forgotten_after_its_ttl_and_its_name_serves_again() {
    let finished_job_ttl = std::time::Duration::from_millis(200);
    let config = DispatcherConfig { finished_job_ttl, ..Default::default() };
    let cluster = Cluster::start_with(1, config).await;
    let client = cluster.client();
    let read = || ReadOptions::new(ProcessingMode::Off).job_name("once");
    let got = collect_i64(client.distribute(&DatasetDef::range(3), read()).await.unwrap()).await;
    assert_eq!(got, vec![0, 1, 2]);
    common::wait_until("the finished job forgotten", || {
        let client = client.clone();
        async move { client.status().await.is_ok_and(|s| s.jobs.is_empty()) }
    })
    .await;
    // The name makes a new job, which reads the data again.
    let got = collect_i64(client.distribute(&DatasetDef::range(3), read()).await.unwrap()).await;
    assert_eq!(got, vec![0, 1, 2]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiting_consumers_add_no_log_entry() {
    let cluster = Cluster::start(1).await;
    let client = cluster.client();
    let d = client.dispatcher();
    // An iteration that never ends, so each poll waits out its whole wait.
    let dataset_id =
        client.register_dataset(&DatasetDef::range(3).repeat_forever(), None).await.unwrap();
    let mode = pb::ProcessingMode::Off as i32;
    let job = pb::GetOrCreateJobRequest { dataset_id, mode, ..Default::default() };
    let job_id = d.get_or_create_job(job).await.unwrap().job_id;
    let mut clients = vec![];
    for _ in 0..40 {
        let it = pb::GetOrCreateIterationRequest { job_id, repetition: 0, ..Default::default() };
        clients.push(d.get_or_create_iteration(it).await.unwrap().client_id);
    }
    let log_index = || async { client.status().await.unwrap().raft.unwrap().last_log_index };
    let before = log_index().await;
    // 40 consumers, each long-polling three times (the first answers at once:
    // it has seen no view yet; the next two wait for a change that never comes).
    let polls = clients.into_iter().map(|client_id| {
        let d = d.clone();
        async move {
            let mut known_view = 0;
            for _ in 0..3 {
                let req = pb::ClientHeartbeatRequest {
                    client_id,
                    wait_for_change_ms: 100,
                    known_view,
                    ..Default::default()
                };
                known_view = d.client_heartbeat_with(req).await.unwrap().view_digest;
            }
        }
    });
    futures::future::join_all(polls).await;
    assert_eq!(log_index().await, before, "waiting consumers wrote to the log");
}

/// Issue 31, defect 6: a dataset no job uses is forgotten after
/// `unused_dataset_ttl`, by the leader's timer; one a job reads is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unused_dataset_is_forgotten_after_its_ttl_and_one_in_use_is_kept() {
    let config = DispatcherConfig {
        unused_dataset_ttl: std::time::Duration::from_millis(200),
        ..Default::default()
    };
    let cluster = Cluster::start_with(1, config).await;
    let client = cluster.client();
    let unused = client.register_dataset(&DatasetDef::range(3), Some("unused")).await.unwrap();
    // A job over `kept` holds it: an endless read with its consumer live.
    let forever = DatasetDef::range(2).repeat_forever();
    let kept = client.register_dataset(&forever, Some("kept")).await.unwrap();
    let _reading =
        client.from_dataset_id(&kept, ReadOptions::new(ProcessingMode::Off)).await.unwrap();
    common::wait_until("the unused dataset forgotten", || {
        let client = client.clone();
        async move { client.status().await.is_ok_and(|s| s.datasets.len() == 1) }
    })
    .await;
    let err = client.dispatcher().get_dataset(&unused).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::NotFound), "{err}");
    client.dispatcher().get_dataset(&kept).await.unwrap();
    // Its id can be registered again, and reads.
    client.register_dataset(&DatasetDef::range(3), Some("unused")).await.unwrap();
}
