//! Identity and transport (docs/security.md): TLS on every listener, bearer
//! tokens by role on the dispatcher and on workers' element streams, the Raft
//! peer service on its own listener taking only peers, and no listener off
//! loopback without protection. Real `sluice` processes on 127.0.0.1, with
//! certificates generated at test time (`security/pki.rs`).

#[path = "security/pki.rs"]
mod pki;

use std::time::Duration;

use futures::StreamExt;
use openraft::raft::AppendEntriesRequest;
use openraft::Vote;
use pki::{Pki, CLIENT_TOKEN, OTHER_CLIENT_TOKEN, OTHER_WORKER_TOKEN, PEER_SECRET, WORKER_TOKEN};
use sluice_client::{
    Client, ClientError, DispatcherClient, ProcessingMode, ReadOptions, RetryPolicy,
};
use sluice_dataset::DatasetDef;
use sluice_dispatcher::raft::TypeConfig;
use sluice_proto::v1 as pb;
use sluice_security::{ClientSecurity, Secret, TlsSettings};
use sluice_testkit::{wait_until, Sluice};
use tonic::Code;

fn sluice() -> Sluice {
    Sluice::new(env!("CARGO_BIN_EXE_sluice"))
}

fn policy() -> RetryPolicy {
    RetryPolicy::for_tests()
}

/// What a client presents: the test CA (if `tls`) and `token` (if any).
fn security(pki: &Pki, tls: bool, token: Option<&str>) -> ClientSecurity {
    let tls = tls.then(|| TlsSettings::from_pem(None, Some(pki.read("ca.pem"))));
    let token = token.map(|t| Secret::parse(t).unwrap());
    ClientSecurity::new(tls.as_ref(), token.as_ref()).unwrap()
}

fn client(addresses: &[String], security: ClientSecurity) -> Client {
    Client::with_security(addresses, policy(), security).unwrap()
}

/// The refusal a call ended with: its code and message.
fn refusal<T: std::fmt::Debug>(r: Result<T, ClientError>) -> (Code, String) {
    match r.expect_err("the call should be refused") {
        ClientError::Rpc { code, message, .. } => (code, message),
        other => panic!("expected a refusal, got {other}"),
    }
}

fn range(n: i64) -> DatasetDef {
    DatasetDef::range(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dispatcher_refuses_missing_wrong_and_other_role_tokens_naming_them() {
    let pki = Pki::new();
    let sluice = sluice();
    let d = sluice.server(&["dispatcher", "--port", "0", "--auth-tokens", &pki.arg("tokens")]);
    let addresses = vec![d.address().to_string()];

    tracing::info!("--- no token: Unauthenticated, naming the role and the flag");
    let none = client(&addresses, security(&pki, false, None));
    let (code, message) = refusal(none.register_dataset(&range(3), None).await);
    assert_eq!(code, Code::Unauthenticated, "{message}");
    assert!(message.contains("`client` bearer token"), "{message}");
    assert!(message.contains("none was sent") && message.contains("--token-file"), "{message}");

    tracing::info!("--- a wrong token: Unauthenticated, the token not echoed");
    let wrong = "not-a-token-anyone-issued-0000";
    let (code, message) =
        refusal(client(&addresses, security(&pki, false, Some(wrong))).status().await);
    assert_eq!(code, Code::Unauthenticated, "{message}");
    assert!(message.contains("not one this dispatcher accepts"), "{message}");
    assert!(!message.contains(wrong), "{message}");

    tracing::info!("--- a worker token for a client RPC: PermissionDenied");
    let as_worker = client(&addresses, security(&pki, false, Some(WORKER_TOKEN)));
    let (code, message) = refusal(as_worker.register_dataset(&range(3), None).await);
    assert_eq!(code, Code::PermissionDenied, "{message}");
    assert!(message.contains("`pool` has role `worker`"), "{message}");

    tracing::info!("--- a client token for a worker RPC: PermissionDenied");
    let sec = security(&pki, false, Some(CLIENT_TOKEN));
    let as_client = DispatcherClient::with_security(&addresses, policy(), sec).unwrap();
    let req = pb::RegisterWorkerRequest {
        address: "127.0.0.1:1".into(),
        worker_uid: 7,
        functions: vec![],
        python_version: String::new(),
    };
    let (code, message) = refusal(as_client.register_worker(req).await);
    assert_eq!(code, Code::PermissionDenied, "{message}");
    assert!(message.contains("RegisterWorker") && message.contains("`worker` token"), "{message}");

    tracing::info!("--- a worker without its token cannot register: it exits naming why");
    let (ok, _, stderr) =
        sluice.run(&["worker", "--dispatcher", d.address(), "--timeout-secs", "10"], None);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("refused this worker") && stderr.contains("bearer token"), "{stderr}");

    tracing::info!("--- the right token works");
    let ok = client(&addresses, security(&pki, false, Some(CLIENT_TOKEN)));
    ok.register_dataset(&range(3), None).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_is_bound_to_the_token_it_registered_with() {
    let pki = Pki::new();
    let sluice = sluice();
    let d = sluice.server(&["dispatcher", "--port", "0", "--auth-tokens", &pki.arg("tokens")]);
    let token = pki.arg("worker.token");
    let w = sluice.server(&["worker", "--dispatcher", d.address(), "--token-file", &token]);
    let addresses = vec![d.address().to_string()];
    let status = client(&addresses, security(&pki, false, Some(CLIENT_TOKEN)));
    wait_until("the worker registered with its token `pool`", || async {
        status.status().await.is_ok_and(|s| s.workers.len() == 1)
    })
    .await;
    let as_token = |t: &str| {
        DispatcherClient::with_security(&addresses, policy(), security(&pki, false, Some(t)))
            .unwrap()
    };
    // The process that registered (the dispatcher refuses another uid, SEC-L1):
    // only the token is wrong in the refusals below.
    let worker_uid = status.status().await.unwrap().workers[0].worker_uid;
    let heartbeat = || pb::WorkerHeartbeatRequest {
        address: w.address().to_string(),
        worker_uid,
        current_tasks: vec![],
        finished_tasks: vec![],
        wait_for_change_ms: 0,
        errors_ignored: 0,
        ..Default::default()
    };

    tracing::info!("--- another worker token registering or heartbeating as it: PermissionDenied");
    let other = as_token(OTHER_WORKER_TOKEN);
    let req = pb::RegisterWorkerRequest {
        address: w.address().to_string(),
        worker_uid: 2,
        functions: vec![],
        python_version: String::new(),
    };
    for refused in [
        other.register_worker(req).await.map(|_| ()),
        other.worker_heartbeat(heartbeat()).await.map(|_| ()),
    ] {
        let (code, message) = refusal(refused);
        assert_eq!(code, Code::PermissionDenied, "{message}");
        assert!(message.contains("`pool`") && message.contains("`pool-2`"), "{message}");
    }

    tracing::info!("--- control: the token it registered with is accepted");
    as_token(WORKER_TOKEN).worker_heartbeat(heartbeat()).await.unwrap();
}

/// Reads `def` in full and returns how many elements came, or the first error.
async fn read_all(client: &Client, def: &DatasetDef) -> Result<usize, ClientError> {
    let opts = ReadOptions::new(ProcessingMode::Dynamic).worker_retry(policy());
    let mut stream = client.distribute(def, opts).await?;
    let mut n = 0;
    while let Some(batch) = stream.next().await {
        batch?;
        n += 1;
    }
    Ok(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_element_stream_refuses_missing_wrong_and_worker_tokens() {
    let pki = Pki::new();
    let sluice = sluice();
    // The dispatcher checks nothing here, so every refusal below is the worker's.
    let d = sluice.server(&["dispatcher", "--port", "0"]);
    let _w = sluice.server(&[
        "worker",
        "--dispatcher",
        d.address(),
        "--auth-tokens",
        &pki.arg("tokens"),
    ]);
    let addresses = vec![d.address().to_string()];
    let status = client(&addresses, security(&pki, false, None));
    wait_until("the worker registered", || async {
        status.status().await.is_ok_and(|s| s.workers.len() == 1)
    })
    .await;

    tracing::info!("--- no token on GetElements: Unauthenticated naming the method");
    let err = read_all(&client(&addresses, security(&pki, false, None)), &range(5)).await;
    let (code, message) = refusal(err);
    assert_eq!(code, Code::Unauthenticated, "{message}");
    assert!(message.contains("GetElements") && message.contains("on this worker"), "{message}");

    tracing::info!("--- a wrong token: Unauthenticated");
    let wrong = "some-other-secret-0000000000";
    let err = read_all(&client(&addresses, security(&pki, false, Some(wrong))), &range(5)).await;
    let (code, message) = refusal(err);
    assert_eq!(code, Code::Unauthenticated, "{message}");
    assert!(!message.contains(wrong), "{message}");

    tracing::info!("--- a worker's token: PermissionDenied");
    let as_worker = client(&addresses, security(&pki, false, Some(WORKER_TOKEN)));
    let (code, message) = refusal(read_all(&as_worker, &range(5)).await);
    assert_eq!(code, Code::PermissionDenied, "{message}");

    tracing::info!("--- the client token reads everything");
    let ok = client(&addresses, security(&pki, false, Some(CLIENT_TOKEN)));
    assert_eq!(read_all(&ok, &range(5)).await.unwrap(), 5);
}

/// The flags of a dispatcher or worker serving TLS with the test certificate.
/// Issue 31, defect 6: one token's holder fills its own quotas, not the
/// dispatcher's: past them it is refused naming its token and the flag, and
/// another token's holder is served in full meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_at_its_quota_is_refused_while_another_client_reads_in_full() {
    let pki = Pki::new();
    let sluice = sluice();
    let tokens = pki.arg("tokens");
    let d = sluice.server(&[
        "dispatcher",
        "--port",
        "0",
        "--auth-tokens",
        &tokens,
        "--quota-live-iterations",
        "2",
        "--quota-dataset-bytes",
        "2000",
    ]);
    let token = pki.arg("worker.token");
    let _w = sluice.server(&["worker", "--dispatcher", d.address(), "--token-file", &token]);
    let addresses = vec![d.address().to_string()];
    let greedy = client(&addresses, security(&pki, false, Some(CLIENT_TOKEN)));
    let other = client(&addresses, security(&pki, false, Some(OTHER_CLIENT_TOKEN)));
    wait_until("the worker registered", || async {
        greedy.status().await.is_ok_and(|s| s.workers.len() == 1)
    })
    .await;

    tracing::info!("--- `trainer` holds two unfinished iterations, its quota");
    let opts = || ReadOptions::new(ProcessingMode::Dynamic).worker_retry(policy());
    let forever = range(3).repeat_forever();
    let _held: Vec<_> = [
        greedy.distribute(&forever, opts()).await.unwrap(),
        greedy.distribute(&forever, opts()).await.unwrap(),
    ]
    .into();
    let (code, message) = refusal(greedy.distribute(&forever, opts()).await.map(|_| ()));
    assert_eq!(code, Code::ResourceExhausted, "{message}");
    assert!(
        message.contains("`trainer`") && message.contains("--quota-live-iterations 2"),
        "{message}"
    );

    tracing::info!("--- a definition past its byte quota is refused, naming it");
    let files: Vec<String> =
        (0..100).map(|i| format!("{}/shard-{i:05}.txt", pki.arg("."))).collect();
    let (code, message) =
        refusal(greedy.register_dataset(&DatasetDef::text_lines(files), None).await);
    assert_eq!(code, Code::ResourceExhausted, "{message}");
    assert!(message.contains("--quota-dataset-bytes 2000"), "{message}");

    tracing::info!("--- `trainer-2` is served in full meanwhile");
    assert_eq!(read_all(&other, &range(10)).await.unwrap(), 10);

    tracing::info!("--- status says who holds what");
    let s = greedy.status().await.unwrap();
    let owners: Vec<_> = s.jobs.iter().map(|j| j.owner.as_deref()).collect();
    // Three of `trainer`'s: the third read's job was made, its iteration refused.
    assert_eq!(owners.iter().filter(|o| **o == Some("trainer")).count(), 3, "{owners:?}");
    assert_eq!(owners.iter().filter(|o| **o == Some("trainer-2")).count(), 1, "{owners:?}");
    let d = s.datasets.iter().find(|d| d.owner.as_deref() == Some("trainer")).unwrap();
    assert!(d.definition_bytes > 0, "{d:?}");
}

fn tls_flags(pki: &Pki) -> Vec<String> {
    let mut flags = vec![];
    for (flag, file) in
        [("--tls-cert", "server.pem"), ("--tls-key", "server.key"), ("--tls-ca", "ca.pem")]
    {
        flags.push(flag.to_string());
        flags.push(pki.arg(file));
    }
    flags.extend(["--auth-tokens".to_string(), pki.arg("tokens")]);
    flags
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// Three dispatchers serving TLS, wanting tokens, and a peer secret on Raft.
fn tls_quorum(pki: &Pki, sluice: &Sluice) -> sluice_testkit::Quorum {
    let work_dir = pki.dir().join("work").display().to_string();
    let mut args = tls_flags(pki);
    args.extend(["--peer-secret-file".to_string(), pki.arg("peer.secret")]);
    sluice.quorum(3, &work_dir, &strs(&args), &[])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_workers_and_a_reader_over_tls_with_tokens_read_a_dataset_in_full() {
    let pki = Pki::new();
    let sluice = sluice();
    let quorum = tls_quorum(&pki, &sluice);
    let dispatchers = quorum.addresses().join(",");
    let mut worker = vec!["worker".to_string(), "--dispatcher".into(), dispatchers.clone()];
    worker.extend(tls_flags(&pki));
    worker.extend(["--token-file".to_string(), pki.arg("worker.token")]);
    let _w1 = sluice.server(&strs(&worker));
    let _w2 = sluice.server(&strs(&worker));
    let status = client(quorum.addresses(), security(&pki, true, Some(CLIENT_TOKEN)));
    wait_until("both workers registered over TLS", || async {
        status.status().await.is_ok_and(|s| s.workers.len() == 2)
    })
    .await;

    tracing::info!("--- register and read with the CLI, over TLS with the client token");
    let (ca, token) = (pki.arg("ca.pem"), pki.arg("client.token"));
    let common = ["--dispatcher", &dispatchers, "--tls-ca", &ca, "--token-file", &token];
    let spec = r#"{"stages": [{"range": {"stop": 20}}]}"#;
    let (ok, id, stderr) = sluice.run(&[&["register"][..], &common, &["-"]].concat(), Some(spec));
    assert!(ok, "{stderr}");
    let id = id.trim();
    let read = [&["read"][..], &common, &["--dataset-id", id, "--mode", "distributed_epoch"]];
    let (ok, out, stderr) = sluice.run(&read.concat(), None);
    assert!(ok, "{stderr}");
    let mut got: Vec<i64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    got.sort();
    assert_eq!(got, (0..20).collect::<Vec<_>>(), "{stderr}");

    tracing::info!("--- the same read in plain text is refused (the servers speak only TLS)");
    let plain = ["read", "--dispatcher", &dispatchers, "--token-file", &token, "--dataset-id", id];
    let (ok, _, stderr) = sluice.run(&[&plain[..], &["--timeout-secs", "2"]].concat(), None);
    assert!(!ok, "a plain-text read of a TLS quorum succeeded: {stderr}");
}

/// One Raft RPC to `address`, presenting `tls` and `bearer`.
async fn raft_call(
    address: &str,
    tls: Option<TlsSettings>,
    bearer: Option<&str>,
    data: Vec<u8>,
) -> Result<pb::RaftMessage, tonic::Status> {
    let token = bearer.map(|b| Secret::parse(b).unwrap());
    let sec = ClientSecurity::new(tls.as_ref(), token.as_ref()).unwrap();
    let endpoint = tonic::transport::Endpoint::from_shared(sec.url(address).unwrap()).unwrap();
    let endpoint = sec.apply(endpoint.connect_timeout(Duration::from_secs(5))).unwrap();
    let channel = tonic::service::interceptor::InterceptedService::new(
        endpoint.connect_lazy(),
        sec.bearer().clone(),
    );
    let mut client = pb::raft_peer_client::RaftPeerClient::new(channel);
    let call = client.append_entries(pb::RaftMessage { data: data.into() });
    Ok(tokio::time::timeout(Duration::from_secs(10), call)
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("no answer"))??
        .into_inner())
}

/// An AppendEntries from a "leader" 2 in term `term`: a node that takes it
/// moves to that term.
fn forged_append(term: u64) -> Vec<u8> {
    let req: AppendEntriesRequest<TypeConfig> = AppendEntriesRequest {
        vote: Vote::new_committed(term, 2),
        prev_log_id: None,
        leader_commit: None,
        entries: vec![],
    };
    sluice_dispatcher::raft::codec::encode(&req).unwrap()
}

/// Node 1's Raft term.
async fn term_of(d: &DispatcherClient) -> u64 {
    let each = d.status_of_each().await;
    each[0].1.as_ref().unwrap().raft.as_ref().unwrap().term
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raft_port_takes_only_peers_and_is_not_on_the_client_port() {
    const FORGED_TERM: u64 = 1_000_000;
    let pki = Pki::new();
    let sluice = sluice();
    let quorum = tls_quorum(&pki, &sluice);
    let sec = security(&pki, true, Some(CLIENT_TOKEN));
    let d = DispatcherClient::with_security(&quorum.addresses()[..1], policy(), sec).unwrap();
    wait_until("node 1 knows a leader", || async {
        d.get_status().await.is_ok_and(|s| s.raft.is_some_and(|r| r.leader_id.is_some()))
    })
    .await;
    let raft = quorum.raft_addresses()[0].clone();
    let peer_tls = || {
        let identity = Some((pki.read("server.pem"), pki.read("server.key")));
        Some(TlsSettings::from_pem(identity, Some(pki.read("ca.pem"))))
    };

    tracing::info!("--- control: a peer's certificate and secret reach the Raft service");
    let garbage = raft_call(&raft, peer_tls(), Some(PEER_SECRET), vec![0xff; 3]).await;
    let status = garbage.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("undecodable Raft message"), "{status:?}");

    tracing::info!("--- a certificate from another CA: the TLS handshake fails");
    let stranger = Some(TlsSettings::from_pem(
        Some((pki.read("stranger.pem"), pki.read("stranger.key"))),
        Some(pki.read("ca.pem")),
    ));
    let status = raft_call(&raft, stranger, Some(PEER_SECRET), forged_append(FORGED_TERM))
        .await
        .unwrap_err();
    assert!(!matches!(status.code(), Code::Ok | Code::InvalidArgument), "{status:?}");

    tracing::info!("--- no client certificate (a client's TLS): the handshake fails");
    let client_tls = Some(TlsSettings::from_pem(None, Some(pki.read("ca.pem"))));
    let status = raft_call(&raft, client_tls, Some(PEER_SECRET), forged_append(FORGED_TERM))
        .await
        .unwrap_err();
    assert!(!matches!(status.code(), Code::Ok | Code::InvalidArgument), "{status:?}");

    tracing::info!("--- a peer certificate with a client's or worker's token, or none");
    for token in [Some(CLIENT_TOKEN), Some(WORKER_TOKEN), None] {
        let forged = raft_call(&raft, peer_tls(), token, forged_append(FORGED_TERM)).await;
        let status = forged.unwrap_err();
        assert_eq!(status.code(), Code::Unauthenticated, "{token:?}: {status:?}");
    }
    assert!(term_of(&d).await < FORGED_TERM, "a refused AppendEntries changed the term");

    tracing::info!("--- RaftPeer is not served on the client port");
    let client_port = quorum.addresses()[0].clone();
    let client_tls = Some(TlsSettings::from_pem(None, Some(pki.read("ca.pem"))));
    let status =
        raft_call(&client_port, client_tls, Some(CLIENT_TOKEN), forged_append(FORGED_TERM))
            .await
            .unwrap_err();
    assert_eq!(status.code(), Code::Unimplemented, "{status:?}");
    assert!(term_of(&d).await < FORGED_TERM);

    tracing::info!("--- the same AppendEntries with a peer's credentials does move the term");
    raft_call(&raft, peer_tls(), Some(PEER_SECRET), forged_append(FORGED_TERM)).await.unwrap();
    assert!(term_of(&d).await >= FORGED_TERM);
}

#[test]
fn a_listen_address_off_loopback_is_refused_before_binding_naming_the_flags() {
    let pki = Pki::new();
    let sluice = sluice();
    // Each is refused before it binds: nothing listens on 0.0.0.0.
    let (ok, _, stderr) = sluice.run(&["dispatcher", "--host", "0.0.0.0", "--port", "0"], None);
    assert!(!ok, "{stderr}");
    for want in ["0.0.0.0", "not loopback", "--tls-cert/--tls-key", "--auth-tokens", "--insecure"] {
        assert!(stderr.contains(want), "missing {want}: {stderr}");
    }
    let worker = ["worker", "--host", "0.0.0.0", "--port", "0", "--dispatcher", "127.0.0.1:1"];
    let (ok, _, stderr) = sluice.run(&worker, None);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("worker would listen on 0.0.0.0"), "{stderr}");
    assert!(
        stderr.contains("--tls-cert/--tls-key") && stderr.contains("--auth-tokens"),
        "{stderr}"
    );

    // TLS and tokens on the client port, but the Raft port off loopback with
    // neither mutual TLS (no CA) nor a peer secret.
    let (cert, key, tokens) = (pki.arg("server.pem"), pki.arg("server.key"), pki.arg("tokens"));
    let group = "1=0.0.0.0:0/0.0.0.0:0,2=127.0.0.1:1/127.0.0.1:2";
    let args = [
        "dispatcher",
        "--node-id",
        "1",
        "--peers",
        group,
        "--tls-cert",
        &cert,
        "--tls-key",
        &key,
        "--auth-tokens",
        &tokens,
    ];
    let (ok, _, stderr) = sluice.run(&args, None);
    assert!(!ok, "{stderr}");
    assert!(stderr.contains("Raft listener") && stderr.contains("--peer-secret-file"), "{stderr}");

    // Mutual TLS against the CA of clients' and workers' certificates is no peer
    // identity (any of them would pass): refused with --tls-ca, and with a
    // --peer-ca that is the same CA in another file (a CA of its own passes:
    // `sluice-security` `exposure::tests`).
    let ca = pki.arg("ca.pem");
    let copy = pki.dir().join("same-ca.pem");
    std::fs::write(&copy, pki.read("ca.pem")).unwrap();
    let copy = copy.display().to_string();
    for extra in [&[][..], &["--peer-ca", &copy][..]] {
        let with_ca = [&args[..], &["--tls-ca", &ca], extra].concat();
        let (ok, _, stderr) = sluice.run(&with_ca, None);
        assert!(!ok, "{extra:?}: {stderr}");
        for want in ["Raft listener", "--peer-secret-file", "--peer-ca", "other than --tls-ca"] {
            assert!(stderr.contains(want), "{extra:?}: missing {want}: {stderr}");
        }
    }

    // The metrics endpoint (plain HTTP, no authentication) off loopback, on a
    // dispatcher that is otherwise on loopback.
    let args = ["dispatcher", "--port", "0", "--metrics-addr", "0.0.0.0:0"];
    let (ok, _, stderr) = sluice.run(&args, None);
    assert!(!ok, "{stderr}");
    for want in ["--metrics-addr", "metrics endpoint would listen on 0.0.0.0", "--insecure"] {
        assert!(stderr.contains(want), "missing {want}: {stderr}");
    }
}
