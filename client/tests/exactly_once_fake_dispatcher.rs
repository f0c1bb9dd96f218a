//! The client's exactly-once wiring against a fake dispatcher and a fake worker
//! (a unit test of the client: the real servers' sides are tested in their
//! crates, and end to end in `tests/exactly_once.rs`): what it asks for, that a
//! lost task is acknowledged in a report instead of failing the read, that
//! consumption reaches the dispatcher in reports, that bad positions columns
//! fail the read, that a position comes out of a read, and that a restore sends
//! its position.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use sluice_client::{Client, ClientError, Delivery, ProcessingMode, ReadOptions, RetryPolicy};
use sluice_positions::{Position, RecordSet, Run};
use sluice_proto::v1 as pb;
use sluice_proto::v1::dispatcher_server::{Dispatcher, DispatcherServer};

#[path = "common/fake_worker.rs"]
mod fake_worker;
use tonic::{Request, Response, Status};

/// The lost task every view shows (its worker was declared dead).
const LOST_TASK: u64 = 5;

#[derive(Default)]
struct Seen {
    jobs: Vec<pb::GetOrCreateJobRequest>,
    iterations: Vec<pb::GetOrCreateIterationRequest>,
    reports: Vec<pb::ConsumedReport>,
    released: Vec<u64>,
}

#[derive(Clone)]
struct Fake {
    seen: Arc<Mutex<Seen>>,
    delivery: pb::Delivery,
    /// The view's tasks; by default only the lost one.
    tasks: Vec<pb::TaskInfo>,
}

impl Fake {
    fn acked(&self) -> bool {
        let seen = self.seen.lock().unwrap();
        seen.reports.iter().any(|r| r.lost_tasks_done.contains(&LOST_TASK))
    }
}

fn unused<T>() -> Result<Response<T>, Status> {
    Err(Status::unimplemented("not in this fake"))
}

#[tonic::async_trait]
impl Dispatcher for Fake {
    async fn register_dataset(
        &self,
        _: Request<pb::RegisterDatasetRequest>,
    ) -> Result<Response<pb::RegisterDatasetResponse>, Status> {
        unused()
    }
    async fn get_dataset(
        &self,
        _: Request<pb::GetDatasetRequest>,
    ) -> Result<Response<pb::GetDatasetResponse>, Status> {
        unused()
    }
    async fn get_or_create_job(
        &self,
        req: Request<pb::GetOrCreateJobRequest>,
    ) -> Result<Response<pb::GetOrCreateJobResponse>, Status> {
        let req = req.into_inner();
        let job_name = req.job_name.clone();
        self.seen.lock().unwrap().jobs.push(req);
        let reason = match self.delivery {
            pb::Delivery::ExactlyOnce => String::new(),
            _ => "stage `take` cannot be replayed".to_string(),
        };
        Ok(Response::new(pb::GetOrCreateJobResponse {
            job_id: 1,
            job_name,
            delivery: self.delivery as i32,
            at_most_once_reason: reason,
        }))
    }
    async fn get_or_create_iteration(
        &self,
        req: Request<pb::GetOrCreateIterationRequest>,
    ) -> Result<Response<pb::GetOrCreateIterationResponse>, Status> {
        self.seen.lock().unwrap().iterations.push(req.into_inner());
        Ok(Response::new(pb::GetOrCreateIterationResponse {
            iteration_id: 1,
            client_id: 1,
            delivery: self.delivery as i32,
        }))
    }
    async fn release_iteration_client(
        &self,
        req: Request<pb::ReleaseIterationClientRequest>,
    ) -> Result<Response<pb::ReleaseIterationClientResponse>, Status> {
        self.seen.lock().unwrap().released.push(req.into_inner().client_id);
        Ok(Response::new(pb::ReleaseIterationClientResponse::default()))
    }
    async fn client_heartbeat(
        &self,
        req: Request<pb::ClientHeartbeatRequest>,
    ) -> Result<Response<pb::ClientHeartbeatResponse>, Status> {
        if let Some(report) = req.into_inner().consumed {
            self.seen.lock().unwrap().reports.push(report);
        }
        // With the lost task, an exactly-once iteration ends once it is
        // acknowledged (the real dispatcher re-reads its records first); any
        // other at once (the read then ends with its tasks).
        let lost = self.tasks.iter().any(|t| t.lost);
        let finished = !lost || self.acked() || self.delivery != pb::Delivery::ExactlyOnce;
        Ok(Response::new(pb::ClientHeartbeatResponse {
            iteration_id: 1,
            tasks: self.tasks.clone(),
            iteration_finished: finished,
            view_digest: if finished { 2 } else { 1 },
            checkpoint_watermark: 3,
            checkpoint_generation: 0,
            ..Default::default()
        }))
    }
    async fn register_worker(
        &self,
        _: Request<pb::RegisterWorkerRequest>,
    ) -> Result<Response<pb::RegisterWorkerResponse>, Status> {
        unused()
    }
    async fn worker_heartbeat(
        &self,
        _: Request<pb::WorkerHeartbeatRequest>,
    ) -> Result<Response<pb::WorkerHeartbeatResponse>, Status> {
        unused()
    }
    async fn get_split(
        &self,
        _: Request<pb::GetSplitRequest>,
    ) -> Result<Response<pb::GetSplitResponse>, Status> {
        unused()
    }
    async fn get_status(
        &self,
        _: Request<pb::GetStatusRequest>,
    ) -> Result<Response<pb::GetStatusResponse>, Status> {
        unused()
    }
    async fn maybe_remove_task(
        &self,
        _: Request<pb::MaybeRemoveTaskRequest>,
    ) -> Result<Response<pb::MaybeRemoveTaskResponse>, Status> {
        unused()
    }
}

/// A loopback listener for a test's server, and its address.
async fn listen() -> (tokio_stream::wrappers::TcpListenerStream, String) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    (tokio_stream::wrappers::TcpListenerStream::new(listener), address)
}

/// Serves a fake dispatcher whose view has only the lost task, for the test's
/// lifetime (its runtime).
async fn serve(delivery: pb::Delivery) -> (Fake, Client) {
    let lost = pb::TaskInfo {
        task_id: LOST_TASK,
        worker_address: "127.0.0.1:9".into(),
        finished: true,
        lost: true,
        ..Default::default()
    };
    serve_view(delivery, vec![lost]).await
}

async fn serve_view(delivery: pb::Delivery, tasks: Vec<pb::TaskInfo>) -> (Fake, Client) {
    let fake = Fake { seen: Arc::default(), delivery, tasks };
    let (incoming, address) = listen().await;
    let server =
        tonic::transport::Server::builder().add_service(DispatcherServer::new(fake.clone()));
    tokio::spawn(server.serve_with_incoming(incoming));
    let client = Client::new(&[address], RetryPolicy::for_tests()).unwrap();
    (fake, client)
}

fn eo(job: &str) -> ReadOptions {
    let mut opts = ReadOptions::new(ProcessingMode::Dynamic).job_name(job).exactly_once(true);
    opts.long_poll = Duration::from_millis(50);
    opts
}

#[tokio::test]
async fn a_lost_task_of_an_exactly_once_read_is_acknowledged_not_lost() {
    let (fake, client) = serve(pb::Delivery::ExactlyOnce).await;
    let mut stream = client.from_dataset_id("ds", eo("j")).await.unwrap();
    assert_eq!(stream.delivery(), Delivery::ExactlyOnce);
    // Without exactly-once this read ends with DataLost (the task was never read).
    let end = tokio::time::timeout(Duration::from_secs(60), stream.next()).await.expect("ends");
    assert!(end.is_none(), "the read ends normally: {end:?}");
    assert!(stream.loss_report().is_none(), "no loss to report");
    assert!(fake.seen.lock().unwrap().jobs[0].require_exactly_once);
    assert!(fake.acked(), "the lost task was acknowledged in a report");
    let p = stream.position().unwrap();
    assert_eq!((p.job_name.as_str(), p.dataset_id.as_str(), p.generation), ("j", "ds", 0));
    assert_eq!(p.consumed.watermark(), 3, "the dispatcher's checkpoint watermark");
}

#[tokio::test]
async fn a_plain_read_of_the_same_view_still_reports_the_loss() {
    let (fake, client) = serve(pb::Delivery::AtMostOnce).await;
    let mut opts = ReadOptions::new(ProcessingMode::Dynamic).job_name("j");
    opts.long_poll = Duration::from_millis(50);
    let mut stream = client.from_dataset_id("ds", opts).await.unwrap();
    assert_eq!(stream.delivery(), Delivery::AtMostOnce);
    let end = tokio::time::timeout(Duration::from_secs(60), stream.next()).await.expect("ends");
    assert!(matches!(end, Some(Err(ClientError::DataLost { .. }))), "{end:?}");
    let seen = fake.seen.lock().unwrap();
    assert!(!seen.jobs[0].require_exactly_once);
    assert!(seen.reports.is_empty(), "an at-most-once read sends no reports");
}

#[tokio::test]
async fn an_exactly_once_read_answered_at_most_once_fails_naming_why() {
    let (fake, client) = serve(pb::Delivery::AtMostOnce).await;
    let Err(e) = client.from_dataset_id("ds", eo("j")).await else { panic!("accepted") };
    assert!(e.to_string().contains("`take`"), "{e}");
    assert_eq!(fake.seen.lock().unwrap().released, vec![1], "it left the iteration");
}

fn position(job: &str, dataset: &str) -> Position {
    Position {
        job_name: job.into(),
        dataset_id: dataset.into(),
        repetition: 4,
        generation: 2,
        consumed: RecordSet::from_parts(7, [Run::record(9, 0)], []),
        merged_consumers: 2,
    }
}

#[tokio::test]
async fn a_restore_sends_its_position_and_continues_its_generation() {
    let (fake, client) = serve(pb::Delivery::ExactlyOnce).await;
    let p = position("j", "ds");
    let stream = client.from_dataset_id("ds", eo("j").restore(p.clone())).await.unwrap();
    {
        let seen = fake.seen.lock().unwrap();
        assert_eq!(seen.iterations[0].repetition, 4);
        assert_eq!(seen.iterations[0].restore, Some(p.to_pb()));
    }
    let next = stream.position().unwrap();
    assert_eq!(next.generation, 3, "after the restored position's");
    assert!(next.consumed.contains(9, 0) && next.consumed.contains(6, 5));
}

#[tokio::test]
async fn a_restore_of_another_job_or_dataset_or_without_exactly_once_is_refused() {
    let (fake, client) = serve(pb::Delivery::ExactlyOnce).await;
    let refused = |opts: ReadOptions| {
        let client = client.clone();
        async move {
            let Err(e) = client.from_dataset_id("ds", opts).await else { panic!("accepted") };
            e.to_string()
        }
    };
    let e = refused(eo("other").restore(position("j", "ds"))).await;
    assert!(e.contains("job `j`") && e.contains("set job_name to `j`"), "{e}");
    let e = refused(eo("j").restore(position("j", "other-ds"))).await;
    assert!(e.contains("dataset `other-ds`"), "{e}");
    let plain = ReadOptions::new(ProcessingMode::Dynamic).job_name("j");
    let e = refused(plain.restore(position("j", "ds"))).await;
    assert!(e.contains("exactly_once"), "{e}");
    let e = refused(ReadOptions::new(ProcessingMode::Off).exactly_once(true)).await;
    assert!(e.contains("dynamic"), "{e}");
    let e = refused(eo("j").coordinated(2, 0)).await;
    assert!(e.contains("coordinated"), "{e}");
    assert!(fake.seen.lock().unwrap().jobs.is_empty(), "refused before asking the dispatcher");
}

/// A view with task 1 on a fake worker serving `batches`, and a reader of it.
async fn read_worker(batches: Vec<pb::ElementBatch>) -> (Fake, sluice_client::ElementStream) {
    let worker = fake_worker::serve([(1, batches)].into()).await;
    let task = pb::TaskInfo { task_id: 1, worker_address: worker, ..Default::default() };
    let (fake, client) = serve_view(pb::Delivery::ExactlyOnce, vec![task]).await;
    let stream = client.from_dataset_id("ds", eo("j")).await.unwrap();
    (fake, stream)
}

fn reported(fake: &Fake) -> Vec<Run> {
    let seen = fake.seen.lock().unwrap();
    let mut runs: Vec<Run> = seen
        .reports
        .iter()
        .flat_map(|r| {
            let mut runs = sluice_positions::wire::runs_from_flat(&r.runs).unwrap();
            // Spans of first records, one unit at a time.
            for (b, n) in sluice_positions::wire::spans_from_flat(&r.firsts).unwrap() {
                runs.extend((b..b + n).map(|u| Run::record(u, 0)));
            }
            runs
        })
        .collect();
    runs.sort();
    runs
}

/// Waits (with a deadline) until the dispatcher was told of `runs`.
async fn wait_reported(fake: &Fake, runs: &[Run]) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !runs.iter().all(|r| reported(fake).contains(r)) {
        assert!(tokio::time::Instant::now() < deadline, "never reported: {:?}", reported(fake));
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn unit(e: &sluice_dataset::Element) -> u64 {
    e.components[0].i64_values().unwrap()[0] as u64
}

#[tokio::test]
async fn what_the_application_takes_reaches_the_dispatcher_in_reports() {
    let dropped = sluice_positions::Origin::record(3, 0); // filtered after unit 2
    let (fake, mut stream) = read_worker(vec![
        fake_worker::message(&[0, 1, 2], dropped, false),
        fake_worker::message(&[4], sluice_positions::Origin::default(), true),
    ])
    .await;
    let taken = [stream.next().await, stream.next().await];
    let taken: Vec<u64> =
        taken.iter().map(|e| unit(e.as_ref().unwrap().as_ref().unwrap())).collect();
    assert_eq!(taken, vec![0, 1]);
    wait_reported(&fake, &[Run::record(0, 0), Run::record(1, 0), Run::record(3, 0)]).await;
    assert!(!reported(&fake).contains(&Run::record(2, 0)), "arrived, not taken: not consumed");
    let rest: Vec<u64> = (&mut stream).map(|e| unit(&e.unwrap())).collect().await;
    assert_eq!(rest, vec![2, 4]);
    wait_reported(&fake, &[Run::record(2, 0), Run::record(4, 0)]).await;
    let p = stream.position().unwrap();
    for u in 0..5 {
        assert!(p.consumed.contains(u, 0), "unit {u} in the position");
    }
    let seen = fake.seen.lock().unwrap();
    assert!(seen.reports.iter().all(|r| r.generation == 0));
}

#[tokio::test]
async fn a_task_its_worker_says_was_deleted_ends_an_exactly_once_read_without_error() {
    // The worker got the dispatcher's deletion (the task was declared lost, or its
    // iteration replaced) before this reader's view said so: no data is lost,
    // the dispatcher reads again what nobody took.
    let batches = [(1, vec![fake_worker::message(&[0, 1], Default::default(), true)])];
    let worker = fake_worker::serve_deleting(batches.into(), [2].into()).await;
    let tasks = [1, 2].map(|task_id| pb::TaskInfo {
        task_id,
        worker_address: worker.clone(),
        ..Default::default()
    });
    let (_, client) = serve_view(pb::Delivery::ExactlyOnce, tasks.to_vec()).await;
    let stream = client.from_dataset_id("ds", eo("j")).await.unwrap();
    let items: Vec<_> = stream.collect().await;
    let units: Vec<u64> = items.iter().map(|e| unit(e.as_ref().expect("no error"))).collect();
    assert_eq!(units, vec![0, 1]);
}

#[tokio::test]
async fn positions_that_do_not_match_their_elements_fail_the_read_naming_the_worker() {
    let mut lying = fake_worker::message(&[0, 1], sluice_positions::Origin::default(), true);
    lying.positions.as_mut().unwrap().runs_per_element = vec![1, 1, 1]; // 3 runs claimed, 2 sent
    let (_, mut stream) = read_worker(vec![lying]).await;
    let e = stream.next().await.expect("an item").unwrap_err();
    assert!(e.to_string().contains("do not match its elements"), "{e}");
    assert!(
        matches!(&e, ClientError::Protocol { address, .. } if address.starts_with("127.0.0.1:"))
    );

    let mut bare = fake_worker::message(&[0], sluice_positions::Origin::default(), true);
    bare.positions = None;
    let (_, mut stream) = read_worker(vec![bare]).await;
    let e = stream.next().await.expect("an item").unwrap_err();
    assert!(e.to_string().contains("without their positions"), "{e}");
}
