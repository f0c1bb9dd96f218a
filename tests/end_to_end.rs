//! The data path end to end, in one process: a dispatcher and workers on
//! loopback ports, real gRPC, the client library reading.

mod common;

use common::{collect_i64, counts, Cluster};
use futures::StreamExt;
use sluice_client::{ProcessingMode, ReadOptions};
use sluice_dataset::{Arg, DatasetDef, FunctionRegistry};

fn dynamic() -> ReadOptions {
    ReadOptions::new(ProcessingMode::Dynamic).worker_retry(sluice_client::RetryPolicy::for_tests())
}
fn off() -> ReadOptions {
    ReadOptions::new(ProcessingMode::Off).worker_retry(sluice_client::RetryPolicy::for_tests())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distributed_epoch_yields_each_element_exactly_once() {
    let cluster = Cluster::start(2).await;
    let stream = cluster.client().distribute(&DatasetDef::range(10), dynamic()).await.unwrap();
    let mut got = collect_i64(stream).await;
    got.sort();
    assert_eq!(got, (0..10).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_epochs_yields_each_element_once_per_worker() {
    let cluster = Cluster::start(2).await;
    let stream = cluster.client().distribute(&DatasetDef::range(10), off()).await.unwrap();
    let got = collect_i64(stream).await;
    assert_eq!(got.len(), 20);
    assert!(counts(&got).values().all(|c| *c == 2), "{:?}", counts(&got));
    assert_eq!(counts(&got).len(), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn square_on_workers_then_add_one_on_the_client_matches_the_local_oracle() {
    let cluster = Cluster::start(2).await;
    let def = DatasetDef::range(5).map("square");
    // The same pipeline run locally is the oracle.
    let registry = FunctionRegistry::builtin();
    let oracle: Vec<i64> = def
        .clone()
        .map_with("add", vec![Arg::Int(1)])
        .iter_local(&registry)
        .unwrap()
        .map(|e| e.unwrap().as_i64().unwrap())
        .collect();
    assert_eq!(oracle, vec![1, 2, 5, 10, 17]);
    for (opts, copies) in [(off(), 2), (dynamic(), 1)] {
        let stream = cluster.client().distribute(&def, opts).await.unwrap();
        let plus_one: Vec<i64> = collect_i64(stream).await.into_iter().map(|x| x + 1).collect();
        let c = counts(&plus_one);
        assert_eq!(c.keys().copied().collect::<Vec<_>>(), oracle);
        assert!(c.values().all(|n| *n == copies), "{c:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_of_one_named_dynamic_job_share_the_data_exactly_once() {
    let cluster = Cluster::start(2).await;
    let client = cluster.client();
    let id = client.register_dataset(&DatasetDef::range(1000), None).await.unwrap();
    let a = client.from_dataset_id(&id, dynamic().job_name("shared")).await.unwrap();
    let b = client.from_dataset_id(&id, dynamic().job_name("shared")).await.unwrap();
    assert_eq!(a.iteration_id(), b.iteration_id(), "one job, one iteration");
    let (ga, gb) = tokio::join!(collect_i64(a), collect_i64(b));
    let mut all = [ga, gb].concat();
    all.sort();
    assert_eq!(all, (0..1000).collect::<Vec<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_job_names_each_receive_everything() {
    let cluster = Cluster::start(2).await;
    let client = cluster.client();
    let id = client.register_dataset(&DatasetDef::range(1000), None).await.unwrap();
    let a = client.from_dataset_id(&id, dynamic().job_name("a")).await.unwrap();
    let b = client.from_dataset_id(&id, dynamic().job_name("b")).await.unwrap();
    assert_ne!(a.iteration_id(), b.iteration_id());
    let (mut ga, mut gb) = tokio::join!(collect_i64(a), collect_i64(b));
    ga.sort();
    gb.sort();
    assert_eq!(ga, (0..1000).collect::<Vec<_>>());
    assert_eq!(gb, ga);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_dataset_yields_three_copies_in_dynamic_mode() {
    let cluster = Cluster::start(2).await;
    let def = DatasetDef::range(50).repeat(3);
    let got = collect_i64(cluster.client().distribute(&def, dynamic()).await.unwrap()).await;
    let c = counts(&got);
    assert_eq!(c.len(), 50);
    assert!(c.values().all(|n| *n == 3), "{c:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_joins_mid_iteration_takes_remaining_splits() {
    let mut cluster = Cluster::start(1).await;
    let client = cluster.client();
    let mut stream = client.distribute(&DatasetDef::range(2000), dynamic()).await.unwrap();
    let first = stream.next().await.unwrap().unwrap().as_i64().unwrap();
    cluster.add_worker().await;
    cluster.wait_workers(2).await;
    let mut got = vec![first];
    got.extend(collect_i64(stream).await);
    got.sort();
    assert_eq!(got, (0..2000).collect::<Vec<_>>(), "still exactly once with a new worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_shuffled_pipeline_matches_the_oracle_as_a_multiset() {
    let cluster = Cluster::start(1).await;
    let def = DatasetDef::range(100).shuffle(16, 7).batch(8, false);
    let registry = FunctionRegistry::builtin();
    let oracle: Vec<_> = def.iter_local(&registry).unwrap().map(|e| e.unwrap()).collect();
    let mut stream = cluster.client().distribute(&def, off()).await.unwrap();
    let mut got = vec![];
    while let Some(e) = stream.next().await {
        got.push(e.unwrap());
    }
    // One worker runs the whole pipeline: the same seeded shuffle, the same batches.
    assert_eq!(got, oracle);
    assert_eq!(got.last().unwrap().components[0].shape(), &[4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stream_ends_only_when_the_dispatcher_says_the_iteration_finished() {
    use sluice_proto::v1 as pb;
    let cluster = Cluster::start(1).await;
    let d = cluster.client().dispatcher().clone();
    // A second "worker" that registers but never serves: its task holds the
    // iteration open, as a slow worker would.
    let ghost = "127.0.0.1:9".to_string();
    let reg = pb::RegisterWorkerRequest {
        address: ghost.clone(),
        worker_uid: 1,
        functions: vec![],
        python_version: String::new(),
    };
    d.register_worker(reg).await.unwrap();
    let mut stream = cluster.client().distribute(&DatasetDef::range(10), dynamic()).await.unwrap();
    let mut got = vec![];
    for _ in 0..10 {
        got.push(stream.next().await.unwrap().unwrap().as_i64().unwrap());
    }
    got.sort();
    assert_eq!(got, (0..10).collect::<Vec<_>>(), "the real worker took every split");
    // Every element is here, but the ghost's task is unfinished: no end yet.
    let early = tokio::time::timeout(std::time::Duration::from_millis(300), stream.next()).await;
    assert!(early.is_err(), "the stream ended before the iteration finished: {early:?}");
    tracing::info!("--- the ghost reports its task finished");
    let hb =
        pb::WorkerHeartbeatRequest { address: ghost.clone(), worker_uid: 1, ..Default::default() };
    let task = d.worker_heartbeat(hb.clone()).await.unwrap().new_tasks[0].task_id;
    d.worker_heartbeat(pb::WorkerHeartbeatRequest { finished_tasks: vec![task], ..hb })
        .await
        .unwrap();
    let end = tokio::time::timeout(common::DEADLINE, stream.next()).await.expect("the stream ends");
    assert!(end.is_none(), "end of sequence, not an error: {end:?}");
}

#[test]
fn the_blocking_iterator_reads_without_an_async_caller() {
    // The servers run on their own runtime; the blocking client owns another.
    let servers = tokio::runtime::Runtime::new().unwrap();
    let cluster = servers.block_on(Cluster::start(2));
    let client = sluice_client::blocking::Client::new(
        &cluster.addresses(),
        sluice_client::RetryPolicy::for_tests(),
    )
    .unwrap();
    let id = client.register_dataset(&DatasetDef::range(100), None).unwrap();
    let mut got: Vec<i64> = client
        .from_dataset_id(&id, dynamic())
        .unwrap()
        .map(|e| e.unwrap().as_i64().unwrap())
        .collect();
    got.sort();
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    drop(client);
    servers.block_on(async move { drop(cluster) });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_gone_for_good_fails_the_read_after_the_deadline_naming_it() {
    let mut cluster = Cluster::start(1).await;
    let address = cluster.workers[0].address().to_string();
    let retry = sluice_client::RetryPolicy::for_tests()
        .with_deadline(std::time::Duration::from_millis(500));
    let opts =
        ReadOptions::new(ProcessingMode::Off).max_outstanding_requests(1).worker_retry(retry);
    let mut stream =
        cluster.client().distribute(&DatasetDef::range(1_000_000), opts).await.unwrap();
    stream.next().await.unwrap().unwrap();
    tracing::info!("--- stop the only worker for good");
    cluster.workers.pop().unwrap().shutdown().await.unwrap();
    let err = tokio::time::timeout(common::DEADLINE, async {
        loop {
            match stream.next().await {
                Some(Ok(_)) => continue,
                Some(Err(e)) => return e,
                None => panic!("the read ended although the worker never finished"),
            }
        }
    })
    .await
    .expect("the read fails before the test deadline");
    assert!(matches!(err, sluice_client::ClientError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains(&address), "names the worker: {err}");
}

/// Reads `range(n)` in one-element DYNAMIC splits through two workers made by
/// `config`, checks that each element came once, and returns the Raft log's
/// length (one entry per grant).
async fn one_element_splits_log_length(
    n: i64,
    config: impl Fn(Vec<String>) -> sluice_worker::WorkerConfig,
) -> u64 {
    let mut cluster = Cluster::start(0).await;
    for _ in 0..2 {
        cluster.add_worker_with(config(cluster.addresses())).await;
    }
    cluster.wait_workers(2).await;
    let client = cluster.client();
    let mut got =
        collect_i64(client.distribute(&DatasetDef::range(n), dynamic()).await.unwrap()).await;
    got.sort();
    assert_eq!(got, (0..n).collect::<Vec<_>>());
    client.status().await.unwrap().raft.unwrap().last_log_index.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_of_several_splits_per_request_still_deliver_each_element_once() {
    const N: i64 = 1000;
    let log = one_element_splits_log_length(N, |dispatchers| {
        let mut config = sluice_worker::WorkerConfig::for_tests(dispatchers);
        config.splits_per_request = 16;
        config
    })
    .await;
    // One log entry per grant, not per split: far fewer than N entries in all.
    assert!(log < (N as u64) / 4, "{log} log entries for {N} one-element splits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_size_grants_from_their_pace_and_deliver_each_element_once() {
    // Issue 33: with one-element splits, a grant per split made every element a
    // round trip and a log entry. A worker allowed 1024 splits per request asks
    // for about 20 ms of its work per grant.
    const N: i64 = 20_000;
    let log = one_element_splits_log_length(N, |dispatchers| sluice_worker::WorkerConfig {
        splits_per_request: sluice_proto::contract::MAX_SPLITS_PER_GRANT,
        ..sluice_worker::WorkerConfig::for_tests(dispatchers)
    })
    .await;
    // Even at 200 µs an element (a debug build on a loaded machine), a grant
    // is 100 splits once it has grown: far fewer than N/10 entries.
    assert!(log < (N as u64) / 10, "{log} log entries for {N} one-element splits");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_reader_of_a_shared_job_holds_no_more_than_its_stream_credit() {
    // Issue 33: a reader's streams were bounded in bytes (an 8 MiB HTTP/2
    // window), so one that paused took thousands of small elements the other
    // readers of its job waited for. Each stream now holds at most its credit
    // (and the reader the message it hands out).
    const N: i64 = 20_000;
    let mut cluster = Cluster::start(0).await;
    for _ in 0..2 {
        cluster
            .add_worker_with(sluice_worker::WorkerConfig {
                splits_per_request: sluice_proto::contract::MAX_SPLITS_PER_GRANT,
                ..sluice_worker::WorkerConfig::for_tests(cluster.addresses())
            })
            .await;
    }
    cluster.wait_workers(2).await;
    let client = cluster.client();
    let id = client.register_dataset(&DatasetDef::range(N), None).await.unwrap();
    let mut paused = client.from_dataset_id(&id, dynamic().job_name("shared")).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..10 {
        got.push(paused.next().await.unwrap().unwrap().as_i64().unwrap());
    }
    let other = client.from_dataset_id(&id, dynamic().job_name("shared")).await.unwrap();
    got.extend(collect_i64(other).await);
    let held = N - got.len() as i64;
    // Two streams (one per worker), each at most its credit, and the message in hand.
    let bound = 2 * i64::from(sluice_client::STREAM_CREDIT_ELEMENTS) + 64;
    assert!(held <= bound, "the paused reader held {held} elements, more than {bound}");
    got.sort();
    got.dedup();
    assert_eq!(got.len() as i64, N - held, "each element once");
}

#[test]
fn the_readme_s_first_command_starts_a_fresh_quorum_without_a_warning() {
    // Issue 31, defect 12: `sluice local` printed two WARN lines (votes a
    // node refused while the fresh group was still deciding what it is).
    let (ok, out, err) = common::sluice().run_as_user(&["local"]);
    assert!(ok, "{err}");
    assert!(out.lines().any(|l| l.starts_with("sluice local: 10 elements")), "{out}");
    let loud: Vec<&str> =
        err.lines().filter(|l| l.contains(" WARN ") || l.contains(" ERROR ")).collect();
    assert!(loud.is_empty(), "a fresh start logged:\n{}", loud.join("\n"));
}
