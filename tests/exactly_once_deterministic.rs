//! Deterministic order over real processes (docs/exactly-once.md,
//! "Deterministic order"): with a seed and `n` consumers, each consumer's
//! sequence depends only on the seed, the dataset and `n` — not on how many
//! workers run, a worker SIGKILLed mid-epoch, or a restore from a checkpoint —
//! and the consumers together get every element exactly once. Pipelines that
//! mix splits, and deterministic reads without exactly-once, are refused.

mod common;

use std::collections::BTreeMap;

use common::eo_cluster::{self, Cluster};
use futures::StreamExt;
use sluice_client::{Client, ElementStream, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{DatasetDef, Element};
use sluice_positions::Position;

const N: i64 = 600;

/// 4 units per split (150 splits, so the order spans three blocks of 64 and
/// the dispatcher's window holds grants back until consumption catches up),
/// task buffers of 2.
async fn cluster(workers: usize) -> Cluster {
    eo_cluster::cluster(workers, 2).await
}

fn range() -> DatasetDef {
    DatasetDef::from_json(&format!(r#"{{"stages": [{{"range": {{"stop": {N}}}}}]}}"#)).unwrap()
}

/// Consumer `i` of 2 of job `job`, small buffers throughout.
fn opts(job: &str, seed: u64, i: u32) -> ReadOptions {
    let mut o = ReadOptions::new(ProcessingMode::Dynamic)
        .job_name(job)
        .max_outstanding_requests(1)
        .worker_retry(RetryPolicy::for_tests())
        .exactly_once(true)
        .deterministic(seed, 2, i);
    o.max_elements_per_message = 2;
    o
}

fn value(e: &Element) -> i64 {
    e.components[0].i64_values().expect("int64")[0]
}

async fn take(stream: &mut ElementStream, k: usize) -> Vec<i64> {
    let mut out = vec![];
    for _ in 0..k {
        out.push(value(&stream.next().await.expect("not the end yet").expect("element")));
    }
    out
}

async fn rest(stream: &mut ElementStream) -> Vec<i64> {
    let mut out = vec![];
    while let Some(e) = stream.next().await {
        out.push(value(&e.expect("element")));
    }
    out
}

/// Both consumers of `job` read to the end, side by side.
async fn read_both(c: &Client, id: &str, job: &str, seed: u64) -> [Vec<i64>; 2] {
    let mut a = c.from_dataset_id(id, opts(job, seed, 0)).await.unwrap();
    let mut b = c.from_dataset_id(id, opts(job, seed, 1)).await.unwrap();
    let (ra, rb) = tokio::join!(rest(&mut a), rest(&mut b));
    [ra, rb]
}

fn assert_exactly_once(seqs: &[Vec<i64>]) {
    let mut counts = BTreeMap::new();
    for v in seqs.iter().flatten() {
        *counts.entry(*v).or_insert(0usize) += 1;
    }
    let repeated: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).collect();
    let missing: Vec<_> = (0..N).filter(|v| !counts.contains_key(v)).collect();
    assert!(
        repeated.is_empty() && missing.is_empty(),
        "repeated {repeated:?}, missing {missing:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn each_consumers_sequence_depends_on_the_seed_not_on_the_number_of_workers() {
    let one = cluster(1).await;
    let id = one.client.register_dataset(&range(), None).await.unwrap();
    let with_one = read_both(&one.client, &id, "det-one", 42).await;
    drop(one);
    let three = cluster(3).await;
    let id = three.client.register_dataset(&range(), None).await.unwrap();
    let with_three = read_both(&three.client, &id, "det-three", 42).await;
    let other_seed = read_both(&three.client, &id, "det-other", 43).await;

    assert_exactly_once(&with_one);
    assert_exactly_once(&other_seed);
    assert_eq!(with_one, with_three, "1 worker or 3: the same two sequences");
    assert_ne!(with_one[0], other_seed[0], "another seed, another order");
    let sorted: Vec<i64> = (0..N).collect();
    let mut merged = with_one.concat();
    assert_ne!(merged, sorted, "not the source order");
    merged.sort_unstable();
    assert_eq!(merged, sorted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkilled_worker_changes_nothing_in_either_sequence() {
    let mut cl = cluster(2).await;
    let c = &cl.client;
    let id = c.register_dataset(&range(), None).await.unwrap();
    let undisturbed = read_both(c, &id, "det-calm", 7).await;

    let mut a = c.from_dataset_id(&id, opts("det-kill", 7, 0)).await.unwrap();
    let mut b = c.from_dataset_id(&id, opts("det-kill", 7, 1)).await.unwrap();
    let (mut ga, mut gb) = tokio::join!(take(&mut a, 60), take(&mut b, 60));
    tracing::info!("--- kill a worker mid-epoch");
    cl.workers[0].kill();
    let (ra, rb) = tokio::join!(rest(&mut a), rest(&mut b));
    ga.extend(ra);
    gb.extend(rb);
    let status = c.status().await.unwrap();
    let job = status.jobs.iter().find(|j| j.job_name == "det-kill").expect("the job");
    assert!(job.iterations[0].lost_tasks > 0, "the killed worker's task was lost mid-epoch");
    assert_eq!([ga, gb], undisturbed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_restore_from_a_checkpoint_continues_each_sequence() {
    let cl = cluster(2).await;
    let c = &cl.client;
    let id = c.register_dataset(&range(), None).await.unwrap();
    let undisturbed = read_both(c, &id, "det-base", 9).await;

    let mut a = c.from_dataset_id(&id, opts("det-restore", 9, 0)).await.unwrap();
    let mut b = c.from_dataset_id(&id, opts("det-restore", 9, 1)).await.unwrap();
    let (ba, bb) = tokio::join!(take(&mut a, 90), take(&mut b, 70));
    let merged = Position::merge([&a.position().unwrap(), &b.position().unwrap()]).unwrap();
    drop(a);
    drop(b);

    let restore = |i| opts("det-restore", 9, i).restore(merged.clone());
    let mut x = c.from_dataset_id(&id, restore(0)).await.unwrap();
    let mut y = c.from_dataset_id(&id, restore(1)).await.unwrap();
    let (rx, ry) = tokio::join!(rest(&mut x), rest(&mut y));
    assert_eq!([[ba, rx].concat(), [bb, ry].concat()], undisturbed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pipelines_that_mix_splits_and_reads_without_exactly_once_are_refused() {
    let cl = cluster(1).await;
    let c = &cl.client;
    let shuffled = DatasetDef::from_json(
        r#"{"stages": [{"range": {"stop": 10}}, {"shuffle": {"buffer_size": 4, "seed": 1}}]}"#,
    )
    .unwrap();
    let err = c.distribute(&shuffled, opts("det-shuffle", 1, 0)).await.err().expect("refused");
    let msg = err.to_string();
    assert!(msg.contains("stages[1].shuffle") && msg.contains("deterministic order"), "{msg}");
    let batched =
        DatasetDef::from_json(r#"{"stages": [{"range": {"stop": 10}}, {"batch": {"size": 2}}]}"#)
            .unwrap();
    let err = c.distribute(&batched, opts("det-batch", 1, 0)).await.err().expect("refused");
    assert!(err.to_string().contains("stages[1].batch"), "{err}");

    let err = c.distribute(&range(), opts("det-plain", 1, 0).exactly_once(false)).await;
    let msg = err.err().expect("refused").to_string();
    assert!(msg.contains("exactly-once") && msg.contains("exactly_once(true)"), "{msg}");
    let err = c.distribute(&range(), opts("det-index", 1, 0).deterministic(1, 2, 2)).await;
    let msg = err.err().expect("refused").to_string();
    assert!(msg.contains("consumer_index=2") && msg.contains("num_consumers=2"), "{msg}");
    let mut unnamed = opts("x", 1, 0);
    unnamed.job_name = None;
    let msg = c.distribute(&range(), unnamed).await.err().expect("refused").to_string();
    assert!(msg.contains("needs a job_name"), "{msg}");
    let msg = c.distribute(&range(), opts("det-many", 1, 0).deterministic(1, 5000, 0)).await;
    let msg = msg.err().expect("refused").to_string();
    assert!(msg.contains("num_consumers is 5000"), "{msg}");
}

/// `sluice read --exactly-once --deterministic --seed S --num-consumers 2
/// --consumer-index I`: two processes print the sequences the library's
/// consumers get with the same seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sluice_read_deterministic_prints_the_same_sequences() {
    let cl = cluster(2).await;
    let c = &cl.client;
    let id = c.register_dataset(&range(), None).await.unwrap();
    let want = read_both(c, &id, "det-lib", 5).await;
    let d = cl.address.clone();
    let run = |i: &'static str| {
        let (d, id) = (d.clone(), id.clone());
        tokio::task::spawn_blocking(move || {
            let args = [
                "read",
                "--dispatcher",
                &d,
                "--dataset-id",
                &id,
                "--job-name",
                "det-cli",
                "--exactly-once",
                "--deterministic",
                "--seed",
                "5",
                "--num-consumers",
                "2",
                "--consumer-index",
                i,
                "--max-outstanding-requests",
                "1",
            ];
            let (ok, out, err) = common::sluice().run_within(&args, None, common::DEADLINE);
            assert!(ok, "{err}");
            out.lines().filter(|l| !l.starts_with('#')).map(|l| l.parse().unwrap()).collect()
        })
    };
    let (a, b) = tokio::join!(run("0"), run("1"));
    let got: [Vec<i64>; 2] = [a.unwrap(), b.unwrap()];
    assert_eq!(got, want);
}
