//! gRPC server reflection (issue 16, item 2) on real `sluice` processes, as
//! `grpcurl -plaintext HOST:PORT list` sees it: a dispatcher's client port lists
//! `sluice.v1.Dispatcher` and the health service, a worker's `sluice.v1.Worker`;
//! neither lists the Raft port's service. With tokens, reflection needs a token like
//! every service but health (docs/security.md, "gRPC reflection").

mod common;

// Shared with tests/security.rs, which uses all of it.
#[allow(dead_code)]
#[path = "security/pki.rs"]
mod pki;

use std::time::Duration;

use futures::StreamExt;
use tonic::metadata::MetadataValue;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

/// The services `address` lists over reflection, with `token` if given.
async fn list(address: &str, token: Option<&str>) -> Result<Vec<String>, tonic::Status> {
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?;
    let ask = ServerReflectionRequest {
        host: String::new(),
        message_request: Some(MessageRequest::ListServices(String::new())),
    };
    let mut request = tonic::Request::new(futures::stream::iter([ask]));
    if let Some(t) = token {
        let value: MetadataValue<_> = format!("Bearer {t}").parse().unwrap();
        request.metadata_mut().insert("authorization", value);
    }
    let mut answers =
        ServerReflectionClient::new(channel).server_reflection_info(request).await?.into_inner();
    let answer = answers.next().await.expect("one answer")?;
    match answer.message_response {
        Some(MessageResponse::ListServicesResponse(l)) => {
            let mut names: Vec<String> = l.service.into_iter().map(|s| s.name).collect();
            names.sort();
            Ok(names)
        }
        other => panic!("not a service list: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dispatchers_and_workers_list_their_services_over_reflection() {
    common::init_tracing();
    let d = common::server(&["dispatcher", "--port", "0"]);
    let w = common::server(&["worker", "--dispatcher", d.address(), "--port", "0"]);
    let health = "grpc.health.v1.Health".to_string();
    let reflection = "grpc.reflection.v1.ServerReflection".to_string();
    assert_eq!(
        list(d.address(), None).await.unwrap(),
        [health.clone(), reflection.clone(), "sluice.v1.Dispatcher".to_string()]
    );
    assert_eq!(
        list(w.address(), None).await.unwrap(),
        [health, reflection, "sluice.v1.Worker".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tokens_reflection_needs_a_client_token() {
    common::init_tracing();
    let pki = pki::Pki::new();
    let d = common::server(&["dispatcher", "--port", "0", "--auth-tokens", &pki.arg("tokens")]);
    let refused = list(d.address(), None).await.unwrap_err();
    assert_eq!(refused.code(), tonic::Code::Unauthenticated, "{refused:?}");
    let services = list(d.address(), Some(pki::CLIENT_TOKEN)).await.unwrap();
    assert!(services.contains(&"sluice.v1.Dispatcher".to_string()), "{services:?}");
}
