//! The S3-compatible test server (moto) as a child process on a reserved port.
//!
//! moto is installed by `scripts/install-s3-test-server.sh` into `<repo>/.venv-s3`
//! (override the binary with `SLUICE_MOTO_SERVER`). It is the one server from the
//! registries we can reach that gets concurrent create-if-absent right, which the
//! journal's fencing tests need. When it is missing, [`MotoServer::try_start`] says
//! how to install it (S3 tests fail, never skip).
//!
//! moto prints no `listening on` line: readiness is creating the first bucket,
//! polled with a deadline while checking that the process still runs. Like every
//! [`Child`], it is killed and reaped on drop and by the kernel if this process dies.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::{Child, Error, Port, Spec, Stderr};

/// How long moto may take to answer (it needs about 2 s on an idle machine).
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// A moto S3 server process with one bucket created.
pub struct MotoServer {
    /// Before `port`: the server goes before its port is released.
    child: Child,
    port: Port,
    bucket: String,
}

impl MotoServer {
    /// Starts a server with bucket `"sluice"`. Blocking (up to a minute).
    pub fn try_start() -> Result<MotoServer, Error> {
        let binary = moto_binary();
        if !binary.exists() {
            return Err(Error::MotoMissing { binary });
        }
        let port = Port::reserve()?;
        let mut spec = Spec::new(binary, ["-H", "127.0.0.1", "-p", &port.number().to_string()])
            .stderr(Stderr::Tail { echo: false });
        spec.pipe_stdout = false;
        let child = Child::spawn(&spec)?;
        let mut server = MotoServer { child, port, bucket: "sluice".to_string() };
        server.wait_ready()?;
        Ok(server)
    }

    /// Polls (with a deadline) until the server answers by creating the bucket.
    fn wait_ready(&mut self) -> Result<(), Error> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(self.not_ready(format!("exited ({status})")));
            }
            match http(self.port.number(), "PUT", &format!("/{}", self.bucket)) {
                Ok(200) => return Ok(()),
                Ok(code) => {
                    return Err(self.not_ready(format!("answered {code} to creating a bucket")))
                }
                Err(_) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(50));
                }
                Err(e) => {
                    return Err(
                        self.not_ready(format!("did not answer within {READY_TIMEOUT:?}: {e}"))
                    )
                }
            }
        }
    }

    fn not_ready(&mut self, what: String) -> Error {
        self.child.kill();
        Error::MotoNotReady { what, stderr: self.child.last_words() }
    }

    /// Creates another bucket.
    pub fn create_bucket(&self, name: &str) -> Result<(), String> {
        match http(self.port.number(), "PUT", &format!("/{name}")) {
            Ok(200) => Ok(()),
            Ok(code) => Err(format!("creating bucket {name} answered {code}")),
            Err(e) => Err(format!("creating bucket {name}: {e}")),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.port.address())
    }

    /// The bucket created at start.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// The `AWS_*` settings for this server, for a store's options or a child
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
}

fn moto_binary() -> PathBuf {
    if let Some(path) = std::env::var_os("SLUICE_MOTO_SERVER") {
        return PathBuf::from(path);
    }
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("repo root");
    repo.join(".venv-s3/bin/moto_server")
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
