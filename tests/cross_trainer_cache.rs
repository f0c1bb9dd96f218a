//! The cross-trainer cache (tf.data §6.7) through a real dispatcher and worker on
//! loopback: trainers share one element sequence through each worker's byte-bounded
//! window, each at its own cursor.

mod common;

use std::collections::BTreeSet;

use common::{Cluster, DEADLINE};
use futures::StreamExt;
use sluice_client::{Client, ElementStream, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;
use sluice_proto::v1::worker_client::WorkerClient;
use sluice_worker::WorkerConfig;
use tonic::Code;

/// Values equal their absolute index in the task's sequence (below 10^9).
fn endless() -> DatasetDef {
    DatasetDef::range(1_000_000_000).repeat_forever()
}

/// Small prefetch so a reader holds few elements it has not consumed.
fn trainer(job: &str, trainer_id: &str) -> ReadOptions {
    let mut opts = ReadOptions::new(ProcessingMode::Off)
        .job_name(job)
        .max_outstanding_requests(1)
        .worker_retry(RetryPolicy::for_tests())
        .cross_trainer_cache(trainer_id);
    opts.max_elements_per_message = 8;
    opts
}

/// One worker whose cache tasks hold at most `cache_bytes`.
async fn cluster(cache_bytes: u64) -> Cluster {
    let mut cluster = Cluster::start(0).await;
    let config = WorkerConfig {
        cross_trainer_cache_bytes: cache_bytes,
        ..WorkerConfig::for_tests(cluster.addresses())
    };
    cluster.add_worker_with(config).await;
    cluster.wait_workers(1).await;
    cluster
}

async fn take(stream: &mut ElementStream, n: usize) -> Vec<i64> {
    let mut out = Vec::with_capacity(n);
    tokio::time::timeout(DEADLINE, async {
        while out.len() < n {
            let e = stream.next().await.expect("an endless stream").expect("an element");
            out.push(e.as_i64().expect("an int64 scalar"));
        }
    })
    .await
    .expect("elements arrive before the deadline");
    out
}

/// The worker's cache of its one cache task.
async fn cache_status(cluster: &Cluster) -> pb::CacheTaskStatus {
    let address = format!("http://{}", cluster.workers[0].address());
    let mut worker = WorkerClient::connect(address).await.expect("connect to the worker");
    let resp = worker.cache_status(pb::CacheStatusRequest {}).await.expect("CacheStatus");
    let mut tasks = resp.into_inner().tasks;
    assert_eq!(tasks.len(), 1, "one cache task: {tasks:?}");
    tasks.remove(0)
}

async fn read_as(client: &Client, id: &str, opts: ReadOptions) -> ElementStream {
    client.from_dataset_id(id, opts).await.expect("join the cache job")
}

#[tokio::test]
async fn a_second_trainer_gets_the_elements_the_first_read_in_the_same_order() {
    let cluster = cluster(1 << 20).await;
    let client = cluster.client();
    // Shuffled, so "the same order" is not just counting up.
    let id = client.register_dataset(&endless().shuffle(64, 7), None).await.unwrap();

    tracing::info!("--- trainer a reads 300 elements");
    let mut a = read_as(&client, &id, trainer("shared", "a")).await;
    let read_by_a = take(&mut a, 300).await;

    tracing::info!("--- trainer b starts at the oldest cached element: the same values");
    let mut b = read_as(&client, &id, trainer("shared", "b")).await;
    let read_by_b = take(&mut b, 300).await;
    assert_eq!(read_by_b, read_by_a, "b reads a's elements, same values, same order");

    let status = cache_status(&cluster).await;
    assert_eq!(status.first_index, 0, "nothing was evicted: {status:?}");
    assert!(status.cached_bytes <= status.capacity_bytes, "{status:?}");
    assert_eq!(status.skipped_elements, 0, "{status:?}");
    assert_eq!(status.trainer_cursors.len(), 2, "{status:?}");
}

#[tokio::test]
async fn the_same_trainer_never_gets_an_element_twice_and_two_readers_split_the_stream() {
    let cluster = cluster(1 << 20).await;
    let client = cluster.client();
    let id = client.register_dataset(&endless(), None).await.unwrap();

    let mut first = read_as(&client, &id, trainer("split", "t")).await;
    let mut second = read_as(&client, &id, trainer("split", "t")).await;
    let (x, y) = tokio::join!(take(&mut first, 400), take(&mut second, 400));
    for values in [&x, &y] {
        assert!(values.windows(2).all(|w| w[0] < w[1]), "each reader's values increase");
    }
    let all: BTreeSet<i64> = x.iter().chain(&y).copied().collect();
    assert_eq!(all.len(), 800, "no element reached trainer t twice");

    tracing::info!("--- the same trainer reading again continues after everything it got");
    drop((first, second));
    let mut again = read_as(&client, &id, trainer("split", "t")).await;
    let later = take(&mut again, 50).await;
    let max_seen = *all.iter().max().unwrap();
    assert!(later[0] > max_seen, "resumes past {max_seen}, got {}", later[0]);
}

#[tokio::test]
async fn a_trainer_that_falls_behind_the_window_skips_to_its_oldest_element() {
    // Room for a few dozen int64 elements.
    let cluster = cluster(1000).await;
    let client = cluster.client();
    let id = client.register_dataset(&endless(), None).await.unwrap();

    let mut slow_opts = trainer("behind", "slow");
    slow_opts.max_elements_per_message = 0;
    let mut slow = read_as(&client, &id, slow_opts).await;
    let head = take(&mut slow, 10).await;
    assert_eq!(head, (0..10).collect::<Vec<_>>());

    tracing::info!("--- a fast trainer runs ahead until the window slid past the slow one");
    // The slow reader's stream prefetched what its HTTP/2 window holds and then
    // stopped: its cursor stays put while it is not read.
    let mut fast = read_as(&client, &id, trainer("behind", "fast")).await;
    let mut ahead = vec![];
    loop {
        ahead.extend(take(&mut fast, 1000).await);
        let window = cache_status(&cluster).await;
        if window.trainer_cursors["slow"] < window.first_index {
            break;
        }
        assert!(ahead.len() < 1_000_000, "the window never passed the slow trainer: {window:?}");
    }
    // (The fast trainer may itself have skipped while the slow stream was still
    // prefetching; it never gets an element twice either.)
    assert!(ahead.windows(2).all(|w| w[0] < w[1]), "never an element twice");

    tracing::info!("--- the slow trainer reads what it prefetched, then jumps to the window");
    // The work here is the prefetch: up to the stream's HTTP/2 window of unread
    // elements (about half a million int64 scalars), read one by one. So the wait is
    // scaled to it: each element must arrive within DEADLINE, and the jump must come
    // within the most elements the windows can hold (8 MiB of stream window plus the
    // worker's send buffer, at ≥ 8 bytes per element) — not one deadline for all,
    // which a loaded machine outran.
    const MOST_PREFETCHED: usize = 4 << 20;
    let mut rest = vec![*head.last().unwrap()];
    let gap = loop {
        let e = tokio::time::timeout(DEADLINE, slow.next())
            .await
            .expect("the slow trainer's next element arrives before the deadline")
            .expect("endless")
            .expect("an element");
        let v = e.as_i64().unwrap();
        let last = *rest.last().unwrap();
        assert!(v > last, "never an element twice: {v} after {last}");
        rest.push(v);
        if v > last + 1 {
            break v - last - 1;
        }
        assert!(rest.len() < MOST_PREFETCHED, "no jump after {} elements", rest.len());
    };
    let status = cache_status(&cluster).await;
    assert!(status.skipped_elements >= gap as u64, "skips are counted ({gap}): {status:?}");
    assert!(status.cached_bytes <= status.capacity_bytes, "{status:?}");
}

#[tokio::test]
async fn the_window_holds_exactly_as_many_elements_as_fit_its_byte_bound() {
    let capacity = 1000;
    let cluster = cluster(capacity).await;
    let client = cluster.client();
    let id = client.register_dataset(&endless(), None).await.unwrap();
    let mut reader = read_as(&client, &id, trainer("bound", "t")).await;
    take(&mut reader, 500).await;

    let status = cache_status(&cluster).await;
    assert_eq!(status.capacity_bytes, capacity);
    assert!(status.cached_elements > 0, "{status:?}");
    // int64 scalars: every element has the same framed size.
    let element = status.cached_bytes / status.cached_elements;
    assert_eq!(status.cached_bytes, element * status.cached_elements, "{status:?}");
    assert!(status.peak_bytes <= capacity, "never above the bound: {status:?}");
    assert!(status.cached_bytes <= capacity, "{status:?}");
    assert_eq!(status.cached_elements, capacity / element, "full to the last element: {status:?}");
    assert_eq!(status.end_index - status.first_index, status.cached_elements);
}

#[tokio::test]
async fn cache_jobs_need_an_infinite_dataset_and_a_name_and_keep_their_identity() {
    let cluster = cluster(1 << 20).await;
    let client = cluster.client();

    tracing::info!("--- a finite dataset is refused when the job is created");
    let finite = client.register_dataset(&DatasetDef::range(10), None).await.unwrap();
    let err = client.from_dataset_id(&finite, trainer("finite", "t")).await.err().expect("refused");
    assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("infinite") && msg.contains("10 elements"), "{msg}");
    assert!(msg.contains("repeat"), "says what to do: {msg}");

    tracing::info!("--- without a job name: refused by the client and by the dispatcher");
    let id = client.register_dataset(&endless(), None).await.unwrap();
    let mut anonymous = trainer("x", "t");
    anonymous.job_name = None;
    let err = client.from_dataset_id(&id, anonymous).await.err().expect("refused");
    assert!(err.to_string().contains("needs a job name"), "{err}");
    let req = pb::GetOrCreateJobRequest {
        dataset_id: id.clone(),
        mode: pb::ProcessingMode::Off as i32,
        job_name: String::new(),
        target_workers: 0,
        use_cross_trainer_cache: true,
        num_consumers: None,
        ..Default::default()
    };
    let err = client.dispatcher().get_or_create_job(req.clone()).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    assert!(err.to_string().contains("needs a job name"), "{err}");
    // Not together with coordinated reads.
    let both = pb::GetOrCreateJobRequest { job_name: "both".into(), num_consumers: Some(2), ..req };
    let err = client.dispatcher().get_or_create_job(both).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    assert!(
        err.to_string().contains("num_consumers") && err.to_string().contains("cache"),
        "{err}"
    );

    tracing::info!("--- the flag is part of a named job's identity");
    let plain = ReadOptions::new(ProcessingMode::Off).job_name("ident");
    let _reader = client.from_dataset_id(&id, plain).await.unwrap();
    let err = client.from_dataset_id(&id, trainer("ident", "t")).await.err().expect("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("use_cross_trainer_cache=false")
            && msg.contains("use_cross_trainer_cache=true"),
        "names both: {msg}"
    );
}

#[tokio::test]
async fn an_element_larger_than_the_whole_cache_fails_naming_both_sizes() {
    let cluster = cluster(8).await;
    let client = cluster.client();
    let id = client.register_dataset(&endless(), None).await.unwrap();
    let mut reader = read_as(&client, &id, trainer("tiny", "t")).await;
    let err = tokio::time::timeout(DEADLINE, reader.next())
        .await
        .expect("an answer before the deadline")
        .expect("an item")
        .expect_err("the element cannot be cached");
    assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("larger than the whole cross-trainer cache of 8 bytes"), "{msg}");
    assert!(msg.contains("element 0 is ") && msg.contains("--cross-trainer-cache-bytes"), "{msg}");
    let status = cache_status(&cluster).await;
    assert_eq!(status.cached_bytes, 0, "nothing was cached: {status:?}");
}
