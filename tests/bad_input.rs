//! Bad input gets a clear error, and the service keeps serving afterwards.

mod common;

use common::{collect_i64, Cluster, Port};
use sluice_client::{ClientError, ProcessingMode, ReadOptions};
use sluice_dataset::{DatasetDef, DatasetError};
use sluice_proto::v1 as pb;
use tonic::Code;

fn dynamic() -> ReadOptions {
    ReadOptions::new(ProcessingMode::Dynamic).worker_retry(sluice_client::RetryPolicy::for_tests())
}

/// After every refusal, the same cluster still serves a read.
async fn still_serves(cluster: &Cluster) {
    let stream = cluster.client().distribute(&DatasetDef::range(5), dynamic()).await.unwrap();
    let mut got = collect_i64(stream).await;
    got.sort();
    assert_eq!(got, vec![0, 1, 2, 3, 4]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_dataset_id_is_not_found_naming_it() {
    let cluster = Cluster::start(1).await;
    let err = match cluster.client().from_dataset_id("no-such-dataset", dynamic()).await {
        Err(e) => e,
        Ok(_) => panic!("reading an unknown dataset succeeded"),
    };
    assert_eq!(err.code(), Some(Code::NotFound), "{err}");
    assert!(err.to_string().contains("no-such-dataset"), "{err}");
    let err = cluster.client().dispatcher().get_dataset("nope").await.unwrap_err();
    assert!(err.to_string().contains("`nope` not found"), "{err}");
    still_serves(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_mode_string_is_refused_naming_the_choices() {
    let err = "sideways".parse::<ProcessingMode>().unwrap_err().to_string();
    assert!(err.contains("sideways") && err.contains("distributed_epoch"), "{err}");
    assert_eq!("parallel_epochs".parse::<ProcessingMode>().unwrap(), ProcessingMode::Off);
    assert_eq!("distributed_epoch".parse::<ProcessingMode>().unwrap(), ProcessingMode::Dynamic);
    // An unspecified mode on the wire is refused by the dispatcher too.
    let cluster = Cluster::start(1).await;
    let client = cluster.client();
    let id = client.register_dataset(&DatasetDef::range(3), None).await.unwrap();
    let req = pb::GetOrCreateJobRequest {
        dataset_id: id,
        mode: 0,
        job_name: String::new(),
        target_workers: 0,
        use_cross_trainer_cache: false,
        num_consumers: None,
        ..Default::default()
    };
    let err = client.dispatcher().get_or_create_job(req).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    assert!(err.to_string().contains("OFF") && err.to_string().contains("DYNAMIC"), "{err}");
    still_serves(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_json_spec_names_the_field() {
    let err = DatasetDef::from_json(
        r#"{"stages": [{"range": {"stop": 10}}, {"batch": {"size": "four"}}]}"#,
    )
    .unwrap_err();
    match &err {
        DatasetError::InvalidSpec { field, .. } => assert!(field.contains("stages[1]"), "{err}"),
        e => panic!("expected InvalidSpec, got {e}"),
    }
    assert!(err.to_string().contains("size"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_function_is_rejected_at_registration_naming_it() {
    let cluster = Cluster::start(1).await;
    let def = DatasetDef::range(3).map("frobnicate");
    let err = cluster.client().register_dataset(&def, None).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("frobnicate") && msg.contains("square"),
        "names it and the known ones: {msg}"
    );
    // Wrong arity of a known function, too.
    let def = DatasetDef::range(3).map("add");
    let err = cluster.client().register_dataset(&def, None).await.unwrap_err();
    assert!(err.to_string().contains("add"), "{err}");
    still_serves(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_job_reuse_is_invalid_argument_naming_both() {
    let cluster = Cluster::start(1).await;
    let client = cluster.client();
    let id = client.register_dataset(&DatasetDef::range(3), None).await.unwrap();
    let _first = client.from_dataset_id(&id, dynamic().job_name("j")).await.unwrap();
    let off = ReadOptions::new(ProcessingMode::Off).job_name("j");
    let err = match client.from_dataset_id(&id, off).await {
        Err(e) => e,
        Ok(_) => panic!("conflicting reuse accepted"),
    };
    assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    let msg = err.to_string();
    assert!(msg.contains("mode=DYNAMIC") && msg.contains("mode=OFF"), "{msg}");
    still_serves(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_definition_under_an_existing_id_is_refused() {
    let cluster = Cluster::start(1).await;
    let client = cluster.client();
    client.register_dataset(&DatasetDef::range(3), Some("train")).await.unwrap();
    let again = client.register_dataset(&DatasetDef::range(3), Some("train")).await.unwrap();
    assert_eq!(again, "train");
    let err = client.register_dataset(&DatasetDef::range(4), Some("train")).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::AlreadyExists), "{err}");
    still_serves(&cluster).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_dispatcher_fails_after_the_deadline_naming_the_address() {
    // Reserved and never bound: nothing serves on that port.
    let unbound = Port::reserve().unwrap();
    let addr = unbound.address();
    let policy = sluice_client::RetryPolicy::for_tests()
        .with_deadline(std::time::Duration::from_millis(300));
    let client = sluice_client::Client::new(std::slice::from_ref(&addr), policy).unwrap();
    let err = client.register_dataset(&DatasetDef::range(3), None).await.unwrap_err();
    assert!(matches!(err, ClientError::Unavailable { .. }), "{err}");
    assert!(err.to_string().contains(&addr), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zero_max_outstanding_requests_is_refused() {
    let cluster = Cluster::start(1).await;
    let opts = dynamic().max_outstanding_requests(0);
    let err = match cluster.client().distribute(&DatasetDef::range(3), opts).await {
        Err(e) => e,
        Ok(_) => panic!("accepted"),
    };
    assert!(err.to_string().contains("max_outstanding_requests"), "{err}");
}

/// The attack that aborted a worker (issue 14): a 480 KB spec of `range(10)` and
/// 20,000 `take` stages, sent as the wire's JSON straight to the dispatcher (the
/// client would refuse it itself). The dispatcher refuses it naming the bound,
/// and the service keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_of_20000_stages_is_refused_at_registration_naming_the_bound() {
    let cluster = Cluster::start(1).await;
    let def = (0..20_000).fold(DatasetDef::range(10), |d, _| d.take(10));
    let req = pb::RegisterDatasetRequest {
        dataset: Some(pb::DatasetDef { json: def.to_json_compact() }),
        dataset_id: String::new(),
    };
    let err = cluster.client().dispatcher().register_dataset(req).await.unwrap_err();
    assert_eq!(err.code(), Some(Code::InvalidArgument), "{err}");
    assert!(err.to_string().contains("more than 256 stages"), "{err}");
    still_serves(&cluster).await;
}
