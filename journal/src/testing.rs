//! Test fixtures (feature `testing`): a real S3-compatible server (moto) on a free loopback
//! port, and raw access to a journal's object store for damaging objects.
//!
//! moto is installed by `scripts/install-s3-test-server.sh` into `<repo>/.venv-s3`
//! (override the binary with `SLUICE_MOTO_SERVER`). It is the one server from the registries
//! we can reach that gets concurrent create-if-absent right, which fencing tests need.
//! When it is missing, [`MotoServer::start`] panics with the install command: S3 tests fail,
//! never skip.
//!
//! Lifecycle: the server is killed and reaped when the last handle drops (also on a test
//! panic, by unwinding). A watchdog `sh` reading our pipe kills it too if this process dies
//! without unwinding (SIGKILL, `abort`), since the pipe closes with the process.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::location::Location;
use crate::{JournalError, OpenOptions};

/// How long moto may take to answer (it needs about 2 s on an idle machine).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A moto S3 server process with one bucket created.
pub struct MotoServer {
    child: Child,
    watchdog: Child,
    port: u16,
    bucket: String,
    log: PathBuf,
}

impl MotoServer {
    /// Starts a server with bucket `"sluice"`. Panics, saying how to install moto, if it
    /// cannot be started.
    pub fn start() -> MotoServer {
        MotoServer::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// One server shared by every caller that holds the returned `Arc` at the same time
    /// (started on first use, stopped when the last holder drops it). Give each test its own
    /// bucket ([`MotoServer::create_bucket`]) or prefix.
    pub fn shared() -> Arc<MotoServer> {
        static SHARED: Mutex<Weak<MotoServer>> = Mutex::new(Weak::new());
        let mut shared = SHARED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(server) = shared.upgrade() {
            return server;
        }
        let server = Arc::new(MotoServer::start());
        *shared = Arc::downgrade(&server);
        server
    }

    /// One server for the whole process, never stopped before it exits, whose `AWS_*`
    /// settings are put in this process's environment on first use: for code that
    /// reads the environment, like the dataset crate's file layer (which caches one
    /// store per bucket, so the settings must be there before any store is built).
    /// Panics, saying how to install moto, if it cannot be started.
    pub fn in_process_env() -> Arc<MotoServer> {
        static SERVER: std::sync::OnceLock<Arc<MotoServer>> = std::sync::OnceLock::new();
        SERVER
            .get_or_init(|| {
                let server = MotoServer::start();
                for (k, v) in server.env() {
                    // Set once, before any thread of this process reads these
                    // variables (the first store is built after this returns).
                    std::env::set_var(k, v);
                }
                Arc::new(server)
            })
            .clone()
    }

    /// Starts a server, or says why not.
    pub fn try_start() -> Result<MotoServer, String> {
        let binary = moto_binary();
        if !binary.exists() {
            return Err(format!(
                "the S3 test server is not installed ({} does not exist): run \
                 scripts/install-s3-test-server.sh at the repository root (or set \
                 SLUICE_MOTO_SERVER to a moto_server binary)",
                binary.display()
            ));
        }
        let mut last_error = String::new();
        // A free port can be taken between our probe and moto's bind: try a few.
        for _ in 0..3 {
            let port = free_port().map_err(|e| format!("no free port: {e}"))?;
            let log = std::env::temp_dir().join(format!("sluice-moto-{port}.log"));
            let log_file = std::fs::File::create(&log).map_err(|e| format!("{e}"))?;
            let child = Command::new(&binary)
                .args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(log_file.try_clone().map_err(|e| format!("{e}"))?)
                .stderr(log_file)
                .spawn()
                .map_err(|e| format!("could not start {}: {e}", binary.display()))?;
            let watchdog = Command::new("sh")
                .args(["-c", "read _ignored; kill \"$0\" 2>/dev/null", &child.id().to_string()])
                .stdin(Stdio::piped())
                .spawn()
                .map_err(|e| format!("could not start the watchdog: {e}"))?;
            let mut server =
                MotoServer { child, watchdog, port, bucket: "sluice".to_string(), log };
            match server.wait_ready() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(last_error)
    }

    /// Polls (with a deadline) until the server answers by creating the bucket.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("moto_server exited ({status}): {}", self.log_tail()));
            }
            match http(self.port, "PUT", &format!("/{}", self.bucket)) {
                Ok(200) => return Ok(()),
                Ok(code) => return Err(format!("creating the bucket answered {code}")),
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    return Err(format!(
                        "moto_server did not answer within {READY_TIMEOUT:?}: {e}; {}",
                        self.log_tail()
                    ))
                }
            }
        }
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let tail: Vec<&str> = text.lines().rev().take(10).collect();
        format!(
            "log {} ends: {}",
            self.log.display(),
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        )
    }

    /// Creates another bucket.
    pub fn create_bucket(&self, name: &str) -> Result<(), String> {
        match http(self.port, "PUT", &format!("/{name}")) {
            Ok(200) => Ok(()),
            Ok(code) => Err(format!("creating bucket {name} answered {code}")),
            Err(e) => Err(format!("creating bucket {name}: {e}")),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The `AWS_*` settings for this server, for [`OpenOptions::store_env`] or a child
    /// process's environment.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ENDPOINT", self.endpoint()),
            ("AWS_ALLOW_HTTP", "true".to_string()),
            ("AWS_DEFAULT_REGION", "us-east-1".to_string()),
            ("AWS_ACCESS_KEY_ID", "test".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "test".to_string()),
            ("AWS_BUCKET", self.bucket.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// [`OpenOptions`] pointing at this server, ignoring the process environment.
    pub fn options(&self) -> OpenOptions {
        OpenOptions { from_env: false, store_env: self.env(), ..OpenOptions::default() }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        drop(self.watchdog.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = self.watchdog.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

/// The journal's object store and its root path, built exactly as `open` builds it, so a
/// test can read, damage or delete the journal's objects.
pub fn object_store_for(
    location: &str,
    options: &OpenOptions,
) -> Result<(Arc<dyn object_store::ObjectStore>, object_store::path::Path), JournalError> {
    let loc = Location::parse(location)?;
    if matches!(loc, Location::Sled(_)) {
        return Err(JournalError::InvalidLocation(format!("{location}: not an object store")));
    }
    let remote = crate::object::remote_for_tests(&loc, options)?;
    Ok((remote.store(), remote.path("")))
}

fn moto_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_MOTO_SERVER") {
        return PathBuf::from(path);
    }
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repo root");
    repo.join(".venv-s3/bin/moto_server")
}

fn free_port() -> std::io::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// A bodyless HTTP/1.1 request; returns the status code.
fn http(port: u16, method: &str, path: &str) -> std::io::Result<u16> {
    let addr = ([127, 0, 0, 1], port).into();
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 0\r\n\
         Connection: close\r\n\r\n"
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let response = String::from_utf8_lossy(&raw);
    response
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("bad response: {response:.100}")))
}
