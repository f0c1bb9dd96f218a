//! Exactly-once delivery over real processes (docs/exactly-once.md): a worker
//! SIGKILLed mid-epoch loses and repeats nothing; a reader restored from its
//! position gets exactly what it had not consumed (including what it consumed
//! after the position, which a restored trainer must see again); two readers'
//! merged positions restore the job on one reader; a pipeline that cannot be
//! replayed is refused when exactly-once is required; records a departed
//! reader held unconsumed are read again by the end-of-epoch sweep.
//!
//! Every element is checked: the union of what the readers consumed (minus what
//! a restore rolled back) must be each source element exactly once.

mod common;

use std::collections::BTreeMap;

use common::eo_cluster::{self, dispatcher, Cluster};
use common::{wait_until, DEADLINE};
use futures::StreamExt;
use sluice_client::{Client, ElementStream, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_dataset::{DatasetDef, Element};
use sluice_positions::Position;

fn client(d: &str) -> Client {
    Client::new(&[d.to_string()], RetryPolicy::for_tests()).unwrap()
}

/// A dispatcher and two workers (the processes, killed on drop) with task
/// buffers of 4, and a client once both workers registered.
async fn cluster() -> Cluster {
    eo_cluster::cluster(2, 4).await
}

/// range(n) → shuffle across units → batch(5): a pipeline whose elements mix
/// units, so positions must name records, not output offsets.
fn pipeline(n: i64) -> DatasetDef {
    DatasetDef::from_json(&format!(
        r#"{{"stages": [{{"range": {{"stop": {n}}}}},
            {{"shuffle": {{"buffer_size": 16, "seed": 7}}}},
            {{"batch": {{"size": 5}}}}]}}"#
    ))
    .unwrap()
}

fn opts(job: &str) -> ReadOptions {
    let mut o = ReadOptions::new(ProcessingMode::Dynamic)
        .job_name(job)
        .max_outstanding_requests(1)
        .worker_retry(RetryPolicy::for_tests())
        .exactly_once(true);
    o.max_elements_per_message = 4;
    o
}

fn values(e: &Element) -> Vec<i64> {
    e.components[0].i64_values().expect("int64 batch")
}

/// Takes `k` elements (batches) from `stream`, flattened.
async fn take(stream: &mut ElementStream, k: usize) -> Vec<i64> {
    let mut out = vec![];
    for _ in 0..k {
        let e = stream.next().await.expect("not the end yet").expect("element");
        out.extend(values(&e));
    }
    out
}

async fn rest(stream: &mut ElementStream) -> Vec<i64> {
    let mut out = vec![];
    while let Some(e) = stream.next().await {
        out.extend(values(&e.expect("element")));
    }
    out
}

/// Asserts `got` is 0..n, each exactly once.
fn assert_exactly_once(got: &[i64], n: i64) {
    let mut counts = BTreeMap::new();
    for v in got {
        *counts.entry(*v).or_insert(0usize) += 1;
    }
    let repeated: Vec<_> = counts.iter().filter(|(_, c)| **c > 1).map(|(v, _)| *v).collect();
    let missing: Vec<_> = (0..n).filter(|v| !counts.contains_key(v)).collect();
    assert!(
        repeated.is_empty() && missing.is_empty() && counts.len() == n as usize,
        "{} repeated (first {:?}), {} missing (first {:?})",
        repeated.len(),
        &repeated[..repeated.len().min(10)],
        missing.len(),
        &missing[..missing.len().min(10)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkilled_worker_loses_and_repeats_nothing() {
    const N: i64 = 4000;
    let mut cl = cluster().await;
    let c = &cl.client;
    let mut stream = c.distribute(&pipeline(N), opts("kill-a-worker")).await.unwrap();
    let mut got = take(&mut stream, 60).await;
    cl.workers[0].kill();
    got.extend(rest(&mut stream).await);
    assert!(stream.loss_report().is_none(), "exactly-once: a lost worker is no loss");
    assert_exactly_once(&got, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reader_restored_from_its_position_gets_exactly_what_it_had_not_consumed() {
    const N: i64 = 3000;
    let cl = cluster().await;
    let c = &cl.client;
    // One dataset for both reads: a position restores a read of its own dataset.
    let id = c.register_dataset(&pipeline(N), None).await.unwrap();
    let mut first = c.from_dataset_id(&id, opts("restore")).await.unwrap();
    let before = take(&mut first, 100).await;
    let bytes = first.position().expect("a position").encode();
    // Consumed after the checkpoint, then the trainer dies: a restored trainer's
    // model never saw these, so they must come again.
    let after = take(&mut first, 40).await;
    drop(first);

    let position = Position::decode(&bytes).unwrap();
    assert!(bytes.len() < 4096, "{} bytes for a position of one reader", bytes.len());
    let mut second = c.from_dataset_id(&id, opts("restore").restore(position)).await.unwrap();
    let rest = rest(&mut second).await;
    for v in &after {
        assert!(rest.contains(v), "{v}, consumed after the position, is delivered again");
    }
    assert_exactly_once(&[before, rest].concat(), N);
}

/// `distribute` registers its definition anew on every call: a restored read
/// must land on the position's dataset, and a different definition is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn distribute_restores_into_the_position_dataset_and_refuses_another_definition() {
    const N: i64 = 1000;
    let cl = cluster().await;
    let c = &cl.client;
    let mut first = c.distribute(&pipeline(N), opts("distribute")).await.unwrap();
    let before = take(&mut first, 30).await;
    let position = first.position().expect("a position");
    drop(first);

    let other = c.distribute(&pipeline(N + 1), opts("distribute").restore(position.clone())).await;
    let e = other.err().expect("another definition is refused");
    assert!(e.to_string().contains("different definition"), "{e}");
    let mut second =
        c.distribute(&pipeline(N), opts("distribute").restore(position)).await.unwrap();
    assert_exactly_once(&[before, rest(&mut second).await].concat(), N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_readers_positions_merged_restore_the_job_on_one_reader() {
    const N: i64 = 3000;
    let cl = cluster().await;
    let c = &cl.client;
    let id = c.register_dataset(&pipeline(N), None).await.unwrap();
    let mut a = c.from_dataset_id(&id, opts("elastic")).await.unwrap();
    let mut b = c.from_dataset_id(&id, opts("elastic")).await.unwrap();
    let mut consumed = take(&mut a, 50).await;
    consumed.extend(take(&mut b, 50).await);
    // One checkpoint: both readers take their position (generation 0).
    let pa = a.position().unwrap();
    let pb = b.position().unwrap();
    // b runs ahead of the checkpoint before the job stops.
    let _ = take(&mut b, 20).await;
    drop(a);
    drop(b);

    let merged = Position::merge([&pa, &pb]).unwrap();
    assert_eq!(merged.merged_consumers, 2);
    let mut one = c.from_dataset_id(&id, opts("elastic").restore(merged)).await.unwrap();
    consumed.extend(rest(&mut one).await);
    assert_exactly_once(&consumed, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pipeline_that_cannot_be_replayed_is_refused_when_exactly_once_is_required() {
    let d = dispatcher();
    let d = d.address().to_string();
    let _w = eo_cluster::worker(&d, 4);
    let c = client(&d);
    let def =
        DatasetDef::from_json(r#"{"stages": [{"range": {"stop": 10}}, {"take": {"count": 5}}]}"#)
            .unwrap();
    let err = c.distribute(&def, opts("refused")).await.err().expect("refused");
    let msg = err.to_string();
    assert!(msg.contains("take") && msg.contains("exactly"), "{msg}");
}

/// `exactly_once_auto`: exactly-once where the pipeline can be replayed (a
/// worker SIGKILL then loses and repeats nothing, positions work), at-most-once
/// with the reason where it cannot (the read runs instead of being refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_auto_read_is_exactly_once_where_it_can_be_and_says_why_not_elsewhere() {
    const N: i64 = 2000;
    let mut cl = cluster().await;
    let c = &cl.client;
    let auto = |job: &str| {
        let mut o = opts(job);
        o.exactly_once = false;
        o.exactly_once_auto(true)
    };
    let take5 =
        DatasetDef::from_json(r#"{"stages": [{"range": {"stop": 10}}, {"take": {"count": 5}}]}"#)
            .unwrap();
    let mut stream = c.distribute(&take5, auto("auto-take")).await.unwrap();
    assert_eq!(stream.delivery(), sluice_client::Delivery::AtMostOnce);
    let reason = stream.at_most_once_reason().expect("a reason").to_string();
    assert!(reason.contains("take"), "{reason}");
    let mut values = vec![];
    while let Some(e) = stream.next().await {
        values.push(e.unwrap().components[0].i64_values().unwrap()[0]);
    }
    // DYNAMIC `take` applies per task's pipeline (as in tf.data): the read
    // runs to its end at-most-once, every value of the source at most once.
    values.sort();
    assert!(!values.is_empty() && values.iter().all(|v| (0..10).contains(v)), "{values:?}");
    assert!(values.windows(2).all(|w| w[0] < w[1]), "{values:?}");
    // The CLI: `sluice read --exactly-once-auto` says what it got on stderr.
    let spec = r#"{"stages": [{"range": {"stop": 10}}, {"take": {"count": 5}}]}"#;
    let d = cl.address.as_str();
    let args = ["read", "--dispatcher", d, "--spec", "-", "--exactly-once-auto", "--quiet"];
    let (ok, _, err) = common::run_sluice(&args, Some(spec));
    assert!(ok && err.contains("delivery: at-most-once") && err.contains("take"), "{err}");
    let plain = r#"{"stages": [{"range": {"stop": 10}}]}"#;
    let args = ["read", "--dispatcher", d, "--spec", "-", "--exactly-once-auto", "--quiet"];
    let (ok, _, err) = common::run_sluice(&args, Some(plain));
    assert!(ok && err.contains("delivery: exactly-once"), "{err}");

    let mut stream = c.distribute(&pipeline(N), auto("auto")).await.unwrap();
    assert_eq!(stream.delivery(), sluice_client::Delivery::ExactlyOnce);
    assert_eq!(stream.at_most_once_reason(), None);
    let mut got = take(&mut stream, 40).await;
    stream.position().expect("an exactly-once read has positions");
    cl.workers[0].kill();
    got.extend(rest(&mut stream).await);
    assert!(stream.loss_report().is_none(), "exactly-once: a lost worker is no loss");
    assert_exactly_once(&got, N);
}

/// `sluice read --exactly-once --checkpoint FILE`, SIGKILLed after a few
/// checkpoints and started again with the same flags: the lines it printed
/// before the marker of the generation in FILE, and everything the second run
/// prints, are each element exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sigkilled_sluice_read_started_again_on_its_checkpoint_file_misses_and_repeats_nothing() {
    use std::io::BufRead;
    const N: i64 = 3000;
    let cl = cluster().await;
    let d = cl.address.as_str();
    let spec = format!(
        r#"{{"stages": [{{"range": {{"stop": {N}}}}}, {{"shuffle": {{"buffer_size": 16, "seed": 5}}}}]}}"#
    );
    let (ok, id, err) = common::run_sluice(&["register", "--dispatcher", d, "-"], Some(&spec));
    assert!(ok, "{err}");
    let id = id.trim().to_string();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reader.position");
    let file_arg = file.to_str().unwrap().to_string();
    let read = [
        "read",
        "--dispatcher",
        d,
        "--dataset-id",
        &id,
        "--job-name",
        "cli-reader",
        "--exactly-once",
        "--checkpoint",
        &file_arg,
        "--checkpoint-every",
        "50",
        "--max-outstanding-requests",
        "1",
    ];

    let mut first = common::sluice().spawn(&read);
    let out = first.take_stdout().expect("stdout");
    // Lines up to the third checkpoint and a few past it, then SIGKILL.
    let mut lines = vec![];
    let mut markers = 0;
    let mut out = out.lines();
    for line in out.by_ref() {
        let line = line.unwrap();
        if line.starts_with("# checkpoint") {
            markers += 1;
        }
        lines.push(line);
        if markers >= 3 && lines.last().is_some_and(|l| !l.starts_with('#')) && lines.len() > 200 {
            break;
        }
    }
    first.kill();
    // What it printed before it died, still in the pipe: the marker of the
    // generation in the file is printed (and flushed) before the file is replaced,
    // so it is among these lines even if the file changed after the loop stopped.
    lines.extend(out.map_while(Result::ok));
    let saved = Position::decode(&std::fs::read(&file).unwrap()).unwrap();
    let marker = format!("# checkpoint {}", saved.generation);
    let upto = lines.iter().position(|l| *l == marker).expect("the file's marker was printed");
    let kept: Vec<i64> =
        lines[..upto].iter().filter(|l| !l.starts_with('#')).map(|l| l.parse().unwrap()).collect();

    let within = common::DEADLINE + std::time::Duration::from_millis(3 * N as u64);
    let (ok, out, err) = common::sluice().run_within(&read, None, within);
    assert!(ok, "{err}");
    assert!(err.contains("restoring from"), "{err}");
    let second: Vec<i64> =
        out.lines().filter(|l| !l.starts_with('#')).map(|l| l.parse().unwrap()).collect();
    assert_exactly_once(&[kept, second].concat(), N);
}

/// The merged positions of two readers restore the job on two new readers,
/// which read the rest side by side: together, exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_merged_position_restores_the_job_on_two_readers_reading_together() {
    const N: i64 = 2000;
    let cl = cluster().await;
    let c = &cl.client;
    let id = c.register_dataset(&pipeline(N), None).await.unwrap();
    let mut a = c.from_dataset_id(&id, opts("elastic-two")).await.unwrap();
    let mut b = c.from_dataset_id(&id, opts("elastic-two")).await.unwrap();
    let mut consumed = take(&mut a, 24).await;
    consumed.extend(take(&mut b, 16).await);
    let merged = Position::merge([&a.position().unwrap(), &b.position().unwrap()]).unwrap();
    drop(a);
    drop(b);
    let mut x = c.from_dataset_id(&id, opts("elastic-two").restore(merged.clone())).await.unwrap();
    let mut y = c.from_dataset_id(&id, opts("elastic-two").restore(merged)).await.unwrap();
    let (rx, ry) = tokio::join!(rest(&mut x), rest(&mut y));
    consumed.extend(rx);
    consumed.extend(ry);
    assert_exactly_once(&consumed, N);
}

/// The iteration status of job `name` (its only iteration).
async fn iteration_of(c: &Client, name: &str) -> Option<sluice_client::status::IterationStatus> {
    let s = c.status().await.ok()?;
    s.jobs.into_iter().find(|j| j.job_name == name)?.iterations.into_iter().next()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn records_a_departed_reader_held_are_read_again_by_the_end_of_epoch_sweep() {
    // Small enough that the workers' tasks end while `a` holds most of it
    // unconsumed (in its channel, its task readers and the transport).
    const N: i64 = 60;
    let cl = cluster().await;
    let c = &cl.client;
    let id = c.register_dataset(&pipeline(N), None).await.unwrap();
    // Both task streams open at once (one would wait for the other's permit).
    let mut a = c.from_dataset_id(&id, opts("sweep").max_outstanding_requests(2)).await.unwrap();
    let mut consumed = take(&mut a, 2).await;
    // Every task ended: all that `a` did not consume was delivered to it, and no
    // task is lost, so no orphan covers it.
    wait_until("the workers' tasks ended", || async {
        iteration_of(c, "sweep")
            .await
            .is_some_and(|it| it.tasks > 0 && it.finished_tasks == it.tasks)
    })
    .await;
    drop(a);
    let mut b = c.from_dataset_id(&id, opts("sweep")).await.unwrap();
    let read = tokio::time::timeout(DEADLINE, rest(&mut b)).await;
    consumed.extend(read.expect("the read ends: what `a` held is read again"));
    assert_exactly_once(&consumed, N);
    let it = iteration_of(c, "sweep").await.expect("the iteration");
    assert_eq!((it.lost_tasks, it.tasks), (0, 3), "the sweep read the rest on a new task: {it:?}");
}
