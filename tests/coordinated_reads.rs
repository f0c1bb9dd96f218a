//! Coordinated (round-robin) reads end to end: a dispatcher and workers on
//! loopback, real gRPC, N consumers reading one named job in rounds.
//!
//! Every worker runs `range(1000).repeat()`, so a round gives consumer i the i-th
//! of N consecutive values of one worker. Each test compares what the consumers
//! read position by position: the same worker at every position (one round, one
//! worker), and consecutive values (consumer i got element i of the round).

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{Cluster, DEADLINE};
use sluice_client::{ClientError, ElementStream, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::DatasetDef;

const CYCLE: i64 = 1000;

fn coordinated(job: &str, n: u32, i: u32) -> ReadOptions {
    let mut opts = ReadOptions::new(ProcessingMode::Off)
        .job_name(job)
        .coordinated(n, i)
        .worker_retry(RetryPolicy::for_tests());
    opts.heartbeat_interval = Duration::from_millis(50);
    opts
}

fn forever() -> DatasetDef {
    DatasetDef::range(CYCLE).repeat_forever()
}

/// (worker address, value) per element, in order.
type Read = Vec<(Arc<str>, i64)>;

/// Reads elements until `done(read so far)`, with the test deadline.
async fn read_until(stream: &mut ElementStream, read: &mut Read, done: impl Fn(&Read) -> bool) {
    let reading = async {
        while !done(read) {
            let (source, e) = stream.next_with_source().await.expect("the stream goes on").unwrap();
            read.push((source, e.as_i64().expect("an int64 scalar")));
        }
    };
    tokio::time::timeout(DEADLINE, reading).await.expect("read before the deadline");
}

/// All consumers read `count` more elements, at the same time.
async fn read_more(streams: &mut [ElementStream], reads: &mut [Read], count: usize) {
    let each = streams.iter_mut().zip(reads.iter_mut()).map(|(s, r)| {
        let target = r.len() + count;
        async move { read_until(s, r, |r| r.len() >= target).await }
    });
    futures::future::join_all(each).await;
}

/// One round, one worker: at every position all consumers read from the same
/// worker, and consumer i read the value i after consumer 0's (element i of the
/// round).
fn assert_rounds_agree(reads: &[Read]) {
    let len = reads.iter().map(Vec::len).min().unwrap_or(0);
    for k in 0..len {
        let (source, first) = &reads[0][k];
        for (i, read) in reads.iter().enumerate() {
            let (s, v) = &read[k];
            assert_eq!(
                s, source,
                "position {k}: consumer {i} read worker {s}, consumer 0 {source}"
            );
            assert_eq!(*v, (first + i as i64) % CYCLE, "position {k}: consumer {i} value");
        }
    }
}

async fn start_consumers(cluster: &Cluster, job: &str, n: u32) -> Vec<ElementStream> {
    let client = cluster.client();
    let id = client.register_dataset(&forever(), Some("forever")).await.unwrap();
    let mut streams = vec![];
    for i in 0..n {
        streams.push(client.from_dataset_id(&id, coordinated(job, n, i)).await.unwrap());
    }
    streams
}

async fn every_round_comes_from_one_worker(workers: usize, consumers: u32) {
    let cluster = Cluster::start(workers).await;
    let mut streams = start_consumers(&cluster, "rounds", consumers).await;
    let mut reads = vec![Read::new(); consumers as usize];
    read_more(&mut streams, &mut reads, 20 * workers).await;
    assert_rounds_agree(&reads);
    let sources: std::collections::BTreeSet<&str> =
        reads[0].iter().map(|(s, _)| s.as_ref()).collect();
    assert_eq!(sources.len(), workers, "every worker takes part: {sources:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_one_consumer_reads_in_rounds() {
    every_round_comes_from_one_worker(1, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_two_consumers_get_one_round_from_one_worker() {
    every_round_comes_from_one_worker(1, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_worker_five_consumers_get_one_round_from_one_worker() {
    every_round_comes_from_one_worker(1, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_one_consumer_reads_every_worker_in_task_order() {
    every_round_comes_from_one_worker(3, 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_two_consumers_get_each_round_slot_from_one_worker() {
    every_round_comes_from_one_worker(3, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_five_consumers_get_each_round_slot_from_one_worker() {
    every_round_comes_from_one_worker(3, 5).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_added_mid_job_joins_every_consumer_at_the_same_round() {
    let mut cluster = Cluster::start(1).await;
    let mut streams = start_consumers(&cluster, "grow", 3).await;
    let mut reads = vec![Read::new(); 3];
    read_more(&mut streams, &mut reads, 20).await;
    let old: Arc<str> = reads[0][0].0.clone();

    tracing::info!("--- add a worker");
    cluster.add_worker().await;
    let new: Arc<str> = Arc::from(cluster.workers[1].address().to_string().as_str());
    let each =
        streams.iter_mut().zip(reads.iter_mut()).map(|(s, r)| {
            let new = new.clone();
            async move {
                read_until(s, r, |r| r.iter().filter(|(src, _)| *src == new).count() >= 10).await
            }
        });
    futures::future::join_all(each).await;
    assert_rounds_agree(&reads);
    // The same position (hence the same round) for every consumer.
    let joined: Vec<usize> =
        reads.iter().map(|r| r.iter().position(|(s, _)| *s == new).unwrap()).collect();
    assert!(joined.iter().all(|p| *p == joined[0]), "joined at positions {joined:?}");
    assert!(joined[0] >= 20, "not before it was added");
    // From then on both workers alternate (each round reads both tasks).
    let after = &reads[0][joined[0]..];
    assert!(after.iter().any(|(s, _)| *s == old), "the first worker goes on");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_stopped_mid_job_is_voted_out_and_reads_continue() {
    let mut cluster = Cluster::start(3).await;
    let mut streams = start_consumers(&cluster, "shrink", 2).await;
    let mut reads = vec![Read::new(); 2];
    read_more(&mut streams, &mut reads, 30).await;

    tracing::info!("--- stop a worker");
    let gone = cluster.workers.remove(2);
    let gone_address: Arc<str> = Arc::from(gone.address().to_string().as_str());
    gone.shutdown().await.unwrap();
    let before = reads[0].len();
    // Read until 20 elements in a row came from the two live workers.
    let each = streams.iter_mut().zip(reads.iter_mut()).map(|(s, r)| {
        let gone = gone_address.clone();
        async move {
            read_until(s, r, |r| {
                r.len() >= before + 20 && r[r.len() - 20..].iter().all(|(src, _)| *src != gone)
            })
            .await
        }
    });
    futures::future::join_all(each).await;
    assert_rounds_agree(&reads);
    let client = cluster.client();
    let status = client.status().await.unwrap();
    assert!(status.workers.iter().any(|w| w.address == *gone_address));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finite_dataset_is_refused_naming_how_soon_it_ends() {
    let cluster = Cluster::start(1).await;
    let client = cluster.client();
    let err = client
        .distribute(&DatasetDef::range(10), coordinated("finite", 2, 0))
        .await
        .err()
        .expect("refused");
    assert_eq!(err.code(), Some(tonic::Code::InvalidArgument), "{err}");
    let m = err.to_string();
    assert!(m.contains("infinite dataset") && m.contains("repeat()"), "{m}");
    assert!(m.contains("after 10 element(s)"), "{m}");

    // Unknown cardinality is accepted; the worker refuses once the pipeline ends.
    let ends = DatasetDef::range(10).filter_with("lt", vec![sluice_dataset::Arg::Int(5)]);
    let mut stream = client.distribute(&ends, coordinated("ends", 1, 0)).await.unwrap();
    let mut values = vec![];
    let err = tokio::time::timeout(DEADLINE, async {
        loop {
            match stream.next_with_source().await {
                Some(Ok((_, e))) => values.push(e.as_i64().unwrap()),
                Some(Err(e)) => return e,
                None => panic!("a coordinated read does not end quietly"),
            }
        }
    })
    .await
    .expect("the error arrives before the deadline");
    assert_eq!(err.code(), Some(tonic::Code::FailedPrecondition), "{err}");
    assert!(err.to_string().contains("the pipeline ended after 5 element(s)"), "{err}");
    assert_eq!(values, vec![0, 1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_coordinated_parameters_are_refused_naming_them() {
    let cluster = Cluster::start(1).await;
    let client = cluster.client();
    let id = client.register_dataset(&forever(), Some("forever")).await.unwrap();
    let refused = |opts: ReadOptions| {
        let client = client.clone();
        let id = id.clone();
        async move {
            match client.from_dataset_id(&id, opts).await {
                Err(ClientError::InvalidArgument(m)) => m,
                Err(e) => panic!("expected InvalidArgument, got {e}"),
                Ok(_) => panic!("accepted"),
            }
        }
    };
    assert!(refused(coordinated("p", 0, 0)).await.contains("num_consumers must be at least 1"));
    let m = refused(coordinated("p", 2, 2)).await;
    assert!(m.contains("consumer_index=2") && m.contains("num_consumers=2"), "{m}");
    let mut anonymous = coordinated("p", 2, 0);
    anonymous.job_name = None;
    assert!(refused(anonymous).await.contains("job_name"));
    let local = coordinated("p", 2, 0).target_workers(sluice_client::TargetWorkers::Local);
    assert!(refused(local).await.contains("target_workers=LOCAL"));

    // num_consumers is part of the job's identity.
    let _first = client.from_dataset_id(&id, coordinated("p", 2, 0)).await.unwrap();
    let err = client.from_dataset_id(&id, coordinated("p", 3, 0)).await.err().unwrap();
    assert_eq!(err.code(), Some(tonic::Code::InvalidArgument), "{err}");
    let m = err.to_string();
    assert!(m.contains("num_consumers=2") && m.contains("num_consumers=3"), "{m}");
    let plain = ReadOptions::new(ProcessingMode::Off).job_name("p");
    let err = client.from_dataset_id(&id, plain).await.err().unwrap();
    assert!(err.to_string().contains("num_consumers=None"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_restarting_into_a_finished_round_gets_a_clear_error() {
    let cluster = Cluster::start(1).await;
    let client = cluster.client();
    let mut streams = start_consumers(&cluster, "restart", 2).await;
    let mut reads = vec![Read::new(); 2];
    read_more(&mut streams, &mut reads, 10).await;
    assert_rounds_agree(&reads);

    tracing::info!("--- consumer 1 restarts under the same job name");
    drop(streams.pop());
    let id = client.register_dataset(&forever(), Some("forever")).await.unwrap();
    let mut again = client.from_dataset_id(&id, coordinated("restart", 2, 1)).await.unwrap();
    let err = tokio::time::timeout(DEADLINE, again.next_with_source())
        .await
        .expect("an answer before the deadline")
        .expect("an error, not the end")
        .expect_err("an error, not an element");
    assert_eq!(err.code(), Some(tonic::Code::FailedPrecondition), "{err}");
    let m = err.to_string();
    assert!(m.contains("consumer 1 asked") && m.contains("round 0"), "{m}");
    assert!(m.contains("restarted into a finished round"), "{m}");
}
