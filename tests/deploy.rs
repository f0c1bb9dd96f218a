//! The Kubernetes manifests (deploy/k8s) as real processes: each pod the manifests
//! describe is started with the container's own arguments, environment and config
//! files, mapped onto loopback the way Kubernetes maps them onto a cluster:
//! - a pod's network: its own loopback address (dispatchers 127.0.0.11-13, workers
//!   127.0.0.21-22), so the manifests' fixed ports serve side by side and `0.0.0.0`
//!   in a pod means that address;
//! - the headless Service's DNS names (`sluice-dispatcher-N.sluice-dispatcher`):
//!   the dispatcher pods' addresses;
//! - volumes: a directory per pod holding each mount (the ConfigMap's files, the
//!   secrets' keys, an empty journal);
//! - the downward API: the StatefulSet ordinal and the pod IP;
//! - probes: the readiness probe's gRPC health check on the pod's port, which must
//!   say SERVING before the reader starts, as the kubelet would wait.
//!
//! The secrets are what `deploy/k8s/make-secrets.sh` makes (the documented step).
//! Then a trainer reads over TLS with its token, and Prometheus scrapes a pod the
//! way extras/prometheus-scrape.yaml says. The certificate names only `sluice`
//! (docs/operations.md, "TLS in Kubernetes").

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::wait_until;
use sluice_testkit::Child;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use yaml_rust2::{Yaml, YamlLoader};

/// Every object of the manifests' resource files.
fn manifests() -> Vec<Yaml> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/k8s");
    let mut objects = vec![];
    for file in ["config.yaml", "dispatcher.yaml", "worker.yaml"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap();
        objects.extend(YamlLoader::load_from_str(&text).unwrap_or_else(|e| panic!("{file}: {e}")));
    }
    objects
}

fn find<'a>(objects: &'a [Yaml], kind: &str, name: &str) -> &'a Yaml {
    objects
        .iter()
        .find(|o| o["kind"].as_str() == Some(kind) && o["metadata"]["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("no {kind} {name} in deploy/k8s"))
}

fn s(y: &Yaml) -> &str {
    y.as_str().unwrap_or_else(|| panic!("not a string: {y:?}"))
}

/// What Kubernetes gives one pod.
struct Pod {
    ip: String,
    ordinal: usize,
    /// Where the pod's mounts live (`root` + mountPath).
    root: PathBuf,
}

/// The cluster the test stands in for: DNS names and the secrets' contents.
struct Cluster {
    dir: tempfile::TempDir,
    dns: Vec<(String, String)>,
    secrets: BTreeMap<String, BTreeMap<String, String>>,
    config_maps: BTreeMap<String, BTreeMap<String, String>>,
}

fn dispatcher_ip(ordinal: usize) -> String {
    format!("127.0.0.{}", 11 + ordinal)
}

impl Cluster {
    fn new(objects: &[Yaml]) -> Cluster {
        let dir = tempfile::tempdir().unwrap();
        // The documented step: make-secrets.sh writes one directory per secret.
        let made = dir.path().join("made");
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/k8s/make-secrets.sh");
        let out = std::process::Command::new("bash").arg(&script).arg(&made).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let mut secrets = BTreeMap::new();
        for secret in ["sluice-tls", "sluice-auth"] {
            let mut keys = BTreeMap::new();
            for f in std::fs::read_dir(made.join(secret)).unwrap() {
                let f = f.unwrap();
                let text = std::fs::read_to_string(f.path()).unwrap();
                keys.insert(f.file_name().to_string_lossy().into_owned(), text);
            }
            secrets.insert(secret.to_string(), keys);
        }
        let mut config_maps = BTreeMap::new();
        for o in objects.iter().filter(|o| o["kind"].as_str() == Some("ConfigMap")) {
            let data = o["data"].as_hash().unwrap();
            let files = data.iter().map(|(k, v)| (s(k).to_string(), s(v).to_string())).collect();
            config_maps.insert(s(&o["metadata"]["name"]).to_string(), files);
        }
        let dns = (0..3)
            .map(|i| (format!("sluice-dispatcher-{i}.sluice-dispatcher"), dispatcher_ip(i)))
            .collect();
        Cluster { dir, dns, secrets, config_maps }
    }

    /// Writes `pod`'s volumes as the pod spec `spec` mounts them for its first
    /// container, and returns the mount paths (longest first).
    fn mount(&self, spec: &Yaml, pod: &Pod) -> Vec<String> {
        let container = &spec["containers"][0];
        let volumes: BTreeMap<&str, &Yaml> =
            spec["volumes"].as_vec().into_iter().flatten().map(|v| (s(&v["name"]), v)).collect();
        let mut paths = vec![];
        for m in container["volumeMounts"].as_vec().unwrap() {
            let path = s(&m["mountPath"]).to_string();
            let dir = pod.root.join(path.trim_start_matches('/'));
            std::fs::create_dir_all(&dir).unwrap();
            // A volume not in the pod spec is a claim template: an empty volume.
            if let Some(v) = volumes.get(s(&m["name"])) {
                if let Some(name) = v["configMap"]["name"].as_str() {
                    for (file, text) in &self.config_maps[name] {
                        std::fs::write(dir.join(file), self.resolve(text, pod)).unwrap();
                    }
                } else if let Some(name) = v["secret"]["secretName"].as_str() {
                    let secret = &self.secrets[name];
                    match v["secret"]["items"].as_vec() {
                        Some(items) => {
                            for item in items {
                                let text = &secret[s(&item["key"])];
                                std::fs::write(dir.join(s(&item["path"])), text).unwrap();
                            }
                        }
                        None => {
                            for (key, text) in secret {
                                std::fs::write(dir.join(key), text).unwrap();
                            }
                        }
                    }
                }
            }
            paths.push(path);
        }
        paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
        paths
    }

    /// `text` as `pod` sees it: DNS names resolved, `0.0.0.0` its own address.
    fn resolve(&self, text: &str, pod: &Pod) -> String {
        let mut out = text.replace("0.0.0.0", &pod.ip);
        for (name, ip) in &self.dns {
            out = out.replace(name, ip);
        }
        out
    }

    /// Starts `pod` of the workload whose pod template is `template`.
    fn start(&self, template: &Yaml, pod: &Pod) -> Child {
        let spec = &template["spec"];
        let container = &spec["containers"][0];
        let mounts = self.mount(spec, pod);
        // The downward API.
        let mut env = BTreeMap::new();
        for e in container["env"].as_vec().into_iter().flatten() {
            let value = match e["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
                Some("metadata.labels['apps.kubernetes.io/pod-index']") => pod.ordinal.to_string(),
                Some("status.podIP") => pod.ip.clone(),
                Some(other) => panic!("the test does not know fieldPath {other}: teach it"),
                None => s(&e["value"]).to_string(),
            };
            env.insert(s(&e["name"]).to_string(), value);
        }
        let args: Vec<String> = container["args"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|a| {
                let mut a = s(a).to_string();
                for (k, v) in &env {
                    a = a.replace(&format!("$({k})"), v);
                }
                for m in &mounts {
                    a = a.replace(
                        m.as_str(),
                        &pod.root.join(m.trim_start_matches('/')).display().to_string(),
                    );
                }
                self.resolve(&a, pod)
            })
            .collect();
        let config = args.iter().find_map(|a| a.strip_prefix("--config=")).expect("--config");
        // Mount paths inside the config file, too.
        let mut text = std::fs::read_to_string(config).unwrap();
        for m in &mounts {
            text = text.replace(
                m.as_str(),
                &pod.root.join(m.trim_start_matches('/')).display().to_string(),
            );
        }
        let private = pod.root.join("effective.toml");
        std::fs::write(&private, text).unwrap();
        let args: Vec<String> = args
            .iter()
            .map(|a| match a.strip_prefix("--config=") {
                Some(_) => format!("--config={}", private.display()),
                None => a.clone(),
            })
            .collect();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let envs: Vec<(String, String)> = env.into_iter().collect();
        common::sluice().server_env(&args, &envs)
    }

    fn pod(&self, name: &str, ip: String, ordinal: usize) -> Pod {
        Pod { ip, ordinal, root: self.dir.path().join(name) }
    }

    /// A file make-secrets.sh made (`sluice-tls/ca.crt`, `client-token`, ...).
    fn made(&self, path: &str) -> String {
        self.dir.path().join("made").join(path).display().to_string()
    }
}

/// The kubelet's gRPC readiness probe: SERVING at `address`?
async fn ready(address: &str) -> bool {
    let Ok(endpoint) = tonic::transport::Endpoint::from_shared(format!("http://{address}")) else {
        return false;
    };
    let Ok(channel) = endpoint.timeout(Duration::from_secs(2)).connect().await else {
        return false;
    };
    let request = HealthCheckRequest { service: String::new() };
    match HealthClient::new(channel).check(request).await {
        Ok(r) => r.into_inner().status() == ServingStatus::Serving,
        Err(_) => false,
    }
}

fn probe_port(template: &Yaml) -> i64 {
    template["spec"]["containers"][0]["readinessProbe"]["grpc"]["port"].as_i64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifests_processes_form_a_quorum_with_workers_that_a_trainer_reads_over_tls() {
    common::init_tracing();
    let objects = manifests();
    let cluster = Cluster::new(&objects);
    let sts = find(&objects, "StatefulSet", "sluice-dispatcher");
    let deployment = find(&objects, "Deployment", "sluice-worker");
    assert_eq!(sts["spec"]["podManagementPolicy"].as_str(), Some("Parallel"));
    let replicas = sts["spec"]["replicas"].as_i64().unwrap() as usize;
    assert_eq!(replicas, 3, "the quorum is three dispatchers");
    let pdb = find(&objects, "PodDisruptionBudget", "sluice-dispatcher");
    assert_eq!(pdb["spec"]["maxUnavailable"].as_i64(), Some(1));
    let hpa = find(&objects, "HorizontalPodAutoscaler", "sluice-worker");
    let metric = s(&hpa["spec"]["metrics"][0]["external"]["metric"]["name"]);
    assert_eq!(metric, "sluice_trainer_wait_fraction", "the HPA scales on the trainers' wait");

    let (sts_template, w_template) = (&sts["spec"]["template"], &deployment["spec"]["template"]);
    let mut pods: Vec<(String, Child)> = vec![];
    // podManagementPolicy: Parallel: all at once, none waiting for another.
    for i in 0..replicas {
        let pod = cluster.pod(&format!("sluice-dispatcher-{i}"), dispatcher_ip(i), i);
        let health = format!("{}:{}", pod.ip, probe_port(sts_template));
        pods.push((health, cluster.start(sts_template, &pod)));
    }
    let workers = deployment["spec"]["replicas"].as_i64().unwrap() as usize;
    for i in 0..workers {
        let pod = cluster.pod(&format!("sluice-worker-{i}"), format!("127.0.0.{}", 21 + i), i);
        let health = format!("{}:{}", pod.ip, probe_port(w_template));
        pods.push((health, cluster.start(w_template, &pod)));
    }
    for (health, _) in &pods {
        wait_until(&format!("the readiness probe of {health} says SERVING"), || ready(health))
            .await;
    }

    // A trainer in the cluster: the dispatchers' DNS names, the CA, the name the
    // certificate carries, its client token.
    let dispatchers: Vec<String> =
        (0..replicas).map(|i| format!("{}:5050", dispatcher_ip(i))).collect();
    let (ca, token) = (cluster.made("sluice-tls/ca.crt"), cluster.made("client-token"));
    let flags = [
        "--dispatcher",
        &dispatchers.join(","),
        "--tls-ca",
        &ca,
        "--tls-server-name",
        "sluice",
        "--token-file",
        &token,
    ];
    let spec = r#"{"stages": [{"range": {"stop": 300}}]}"#;
    let (ok, id, err) =
        common::sluice().run(&[&["register"][..], &flags, &["-"]].concat(), Some(spec));
    assert!(ok, "{err}");
    let read = [&["read"][..], &flags, &["--dataset-id", id.trim(), "--mode", "distributed_epoch"]];
    let (ok, out, err) = common::sluice().run(&read.concat(), None);
    assert!(ok, "{err}");
    let got: Vec<i64> = out.lines().map(|l| l.trim().parse().unwrap()).collect();
    assert_eq!(got.len(), 300, "each element once: {err}");
    assert_eq!(got.iter().copied().collect::<BTreeSet<_>>(), (0..300).collect(), "{err}");
    // Without the name, the certificate does not match the address dialled.
    let unnamed = [&["status"][..], &flags[..4], &flags[6..], &["--timeout-secs", "3"]].concat();
    let (ok, _, err) = common::sluice().run(&unnamed, None);
    assert!(!ok, "a reader verified a certificate for `sluice` against an IP: {err}");

    // Prometheus, as extras/prometheus-scrape.yaml configures it.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let ca_pem = std::fs::read(&ca).unwrap();
    let metrics: std::net::SocketAddr = format!("{}:9090", dispatcher_ip(0)).parse().unwrap();
    let https = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem).unwrap())
        .resolve("sluice", metrics)
        .build()
        .unwrap();
    let metrics_token = std::fs::read_to_string(cluster.made("metrics-token")).unwrap();
    let scrape = https.get("https://sluice:9090/metrics").bearer_auth(metrics_token.trim());
    let resp = scrape.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let samples = sluice_metrics::parse(&resp.text().await.unwrap()).unwrap();
    assert!(samples.iter().any(|s| s.name == "sluice_raft_term"), "{samples:?}");
    drop(pods);
}
