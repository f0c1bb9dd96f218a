//! [`Remote`]: the object store under a journal's prefix, with a timeout on every call,
//! errors classified retryable or permanent, and bounded retries with backoff.
//!
//! object_store's own retry loop is turned off (`max_retries: 0`) so that one loop, this one,
//! decides: it also covers the local and in-memory stores, and it retries a create-if-absent
//! PUT after a timeout, which object_store will not do on its own (the PUT is not idempotent;
//! the caller resolves "it already exists" by comparing bytes, see `segment`).

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::location::Location;
use crate::{JournalError, OpenOptions};

/// The result of a create-if-absent PUT.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Put {
    Created,
    /// The name was taken (by another writer, or by an earlier attempt of this very PUT).
    Exists,
}

pub(crate) struct Remote {
    store: Arc<dyn ObjectStore>,
    /// The location as a URL, for messages.
    base: String,
    /// Key prefix, "" or "a/b" (no slashes at either end).
    prefix: String,
    timeout: Duration,
    attempts: u32,
}

impl Remote {
    pub(crate) fn build(loc: &Location, opts: &OpenOptions) -> Result<Remote, JournalError> {
        let base = loc.display();
        let bad = |e: object_store::Error| JournalError::InvalidLocation(format!("{base}: {e}"));
        let (store, prefix): (Arc<dyn ObjectStore>, String) = match loc {
            Location::Sled(_) => unreachable!("sled is not an object store"),
            Location::File(path) => {
                // The root's own entry durable too; object_store fsyncs what it creates below.
                crate::fs_sync::create_dir_all_durable(path)
                    .map_err(|e| JournalError::io(&base, false, e))?;
                let fs = object_store::local::LocalFileSystem::new_with_prefix(path)
                    .map_err(bad)?
                    .with_fsync(true);
                (Arc::new(fs), String::new())
            }
            Location::Memory(name) => (memory_store(name), String::new()),
            Location::S3 { bucket, prefix } => {
                install_crypto_provider();
                let mut b = object_store::aws::AmazonS3Builder::new()
                    .with_client_options(client_options())
                    .with_retry(no_retries());
                for (key, value) in settings(opts, "AWS_") {
                    if let Ok(key) = key.to_ascii_lowercase().parse() {
                        b = b.with_config(key, value);
                    }
                }
                (Arc::new(b.with_bucket_name(bucket).build().map_err(bad)?), prefix.clone())
            }
            Location::Gcs { bucket, prefix } => {
                install_crypto_provider();
                let mut b = object_store::gcp::GoogleCloudStorageBuilder::new()
                    .with_client_options(client_options())
                    .with_retry(no_retries());
                for (key, value) in settings(opts, "GOOGLE_") {
                    if let Ok(key) = key.to_ascii_lowercase().parse() {
                        b = b.with_config(key, value);
                    }
                }
                (Arc::new(b.with_bucket_name(bucket).build().map_err(bad)?), prefix.clone())
            }
        };
        Ok(Remote { store, base, prefix, timeout: opts.op_timeout, attempts: opts.attempts.max(1) })
    }

    #[cfg(feature = "testing")]
    pub(crate) fn store(&self) -> Arc<dyn ObjectStore> {
        self.store.clone()
    }

    /// The store path of `rel` ("log/000...1.seg") under the prefix.
    pub(crate) fn path(&self, rel: &str) -> Path {
        if self.prefix.is_empty() {
            Path::from(rel)
        } else {
            Path::from(format!("{}/{rel}", self.prefix))
        }
    }

    /// `rel` as a URL, for messages.
    pub(crate) fn url(&self, rel: &str) -> String {
        format!("{}/{rel}", self.base)
    }

    /// Create-if-absent PUT of `rel`.
    pub(crate) async fn put_create(&self, rel: &str, bytes: Bytes) -> Result<Put, JournalError> {
        let path = self.path(rel);
        // Large snapshots get time in proportion (at 8 MiB/s at least).
        let timeout = self.timeout + Duration::from_millis(bytes.len() as u64 / (8 << 10));
        self.retrying("put", rel, timeout, || {
            let (path, payload) = (path.clone(), PutPayload::from(bytes.clone()));
            async move {
                let opts = PutOptions::from(PutMode::Create);
                match self.store.put_opts(&path, payload, opts).await {
                    Ok(_) => Ok(Put::Created),
                    Err(object_store::Error::AlreadyExists { .. }) => Ok(Put::Exists),
                    Err(e) => Err(e),
                }
            }
        })
        .await
    }

    /// The whole object `rel`, or `None` if it does not exist.
    pub(crate) async fn get(&self, rel: &str) -> Result<Option<Bytes>, JournalError> {
        let path = self.path(rel);
        self.retrying("get", rel, self.timeout, || async {
            match self.store.get(&path).await {
                Ok(result) => result.bytes().await.map(Some),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// The size of object `rel`, or `None` if it does not exist.
    pub(crate) async fn size(&self, rel: &str) -> Result<Option<u64>, JournalError> {
        let path = self.path(rel);
        self.retrying("head", rel, self.timeout, || async {
            match self.store.head(&path).await {
                Ok(meta) => Ok(Some(meta.size)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Names of the objects directly under `dir` ("log"), relative to it, unsorted.
    pub(crate) async fn list(&self, dir: &str) -> Result<Vec<String>, JournalError> {
        let path = self.path(dir);
        let metas = self
            .retrying("list", dir, self.timeout, || {
                self.store.list(Some(&path)).try_collect::<Vec<_>>()
            })
            .await?;
        let strip = format!("{path}/");
        Ok(metas
            .into_iter()
            .filter_map(|m| m.location.as_ref().strip_prefix(&strip).map(str::to_string))
            .filter(|name| !name.contains('/'))
            .collect())
    }

    /// Deletes `rel`; a missing object is fine.
    pub(crate) async fn delete(&self, rel: &str) -> Result<(), JournalError> {
        let path = self.path(rel);
        self.retrying("delete", rel, self.timeout, || async {
            match self.store.delete(&path).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e),
            }
        })
        .await
    }

    /// Deletes `rels` in as few requests as the store allows (S3: one `DeleteObjects` per
    /// 1,000 names; GCS, local and memory: one call each, a few at a time), in one
    /// time-limited attempt; returns the names it confirmed deleted. Best effort: the caller
    /// deletes the others one by one ([`Remote::delete`], retried, a missing one fine).
    pub(crate) async fn delete_batch(&self, rels: Vec<String>) -> Vec<String> {
        let mut by_path: HashMap<Path, String> =
            rels.into_iter().map(|rel| (self.path(&rel), rel)).collect();
        let paths: Vec<Path> = by_path.keys().cloned().collect();
        // One attempt's time per 1,000 names (one bulk request each).
        let limit = self.timeout * (paths.len() / 1000 + 1) as u32;
        let stream =
            self.store.delete_stream(futures::stream::iter(paths.into_iter().map(Ok)).boxed());
        let results = match tokio::time::timeout(limit, stream.collect::<Vec<_>>()).await {
            Ok(results) => results,
            Err(_) => {
                tracing::debug!(journal = %self.base, "bulk delete timed out after {limit:?}");
                return Vec::new();
            }
        };
        let mut deleted = Vec::with_capacity(results.len());
        for result in results {
            match result {
                Ok(path) => deleted.extend(by_path.remove(&path)),
                Err(e) => tracing::debug!(journal = %self.base, "bulk delete: {e}"),
            }
        }
        deleted
    }

    /// Runs `call` with a timeout per attempt, retrying retryable failures with backoff.
    async fn retrying<T, F, Fut>(
        &self,
        what: &str,
        rel: &str,
        timeout: Duration,
        mut call: F,
    ) -> Result<T, JournalError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, object_store::Error>>,
    {
        let mut backoff = Duration::from_millis(50);
        let mut attempt = 1;
        loop {
            let (retryable, error): (bool, Box<dyn std::error::Error + Send + Sync>) =
                match tokio::time::timeout(timeout, call()).await {
                    Ok(Ok(value)) => return Ok(value),
                    Ok(Err(e)) => (is_retryable(&e), Box::new(e)),
                    Err(_) => (true, format!("{what} timed out after {timeout:?}").into()),
                };
            if !retryable || attempt >= self.attempts {
                let error = format!("{what} failed (attempt {attempt}/{}): {error}", self.attempts);
                return Err(JournalError::io(self.url(rel), retryable, error));
            }
            tracing::warn!(object = %self.url(rel), attempt, "{what} failed, retrying: {error}");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
            attempt += 1;
        }
    }
}

/// Whether a failed call may succeed if tried again: timeouts, connection trouble, 5xx, 429.
fn is_retryable(e: &object_store::Error) -> bool {
    use object_store::Error as E;
    let E::Generic { source, .. } = e else {
        // NotFound, AlreadyExists, Precondition, PermissionDenied, NotImplemented, ...:
        // the answer will not change.
        return false;
    };
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(source.as_ref());
    while let Some(err) = current {
        if let Some(http) = err.downcast_ref::<object_store::client::HttpError>() {
            use object_store::client::HttpErrorKind as K;
            // Unknown too: a connection cut mid-request (an S3 endpoint going away)
            // surfaces as Unknown after object_store's own retries. Retrying is
            // safe: writes are create-if-absent and recognise their own bytes.
            return matches!(
                http.kind(),
                K::Connect | K::Request | K::Timeout | K::Interrupted | K::Unknown
            );
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            use std::io::ErrorKind as K;
            return matches!(
                io.kind(),
                K::TimedOut
                    | K::Interrupted
                    | K::ConnectionReset
                    | K::ConnectionAborted
                    | K::ConnectionRefused
                    | K::BrokenPipe
                    | K::UnexpectedEof
            );
        }
        current = err.source();
    }
    // object_store's HTTP status error type is private; its message carries the status.
    let text = source.to_string();
    ["status code: 5", "status code: 429", "status code: 408", "returned error response"]
        .iter()
        .any(|needle| text.contains(needle))
}

/// Settings from the environment (if enabled) then the explicit ones, filtered by prefix.
fn settings(opts: &OpenOptions, prefix: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = if opts.from_env {
        std::env::vars().filter(|(k, _)| k.starts_with(prefix)).collect()
    } else {
        Vec::new()
    };
    out.extend(opts.store_env.iter().filter(|(k, _)| k.starts_with(prefix)).cloned());
    out
}

fn client_options() -> object_store::ClientOptions {
    // No client-level request timeout: `retrying` bounds every attempt (scaled for big PUTs).
    object_store::ClientOptions::new()
        .with_timeout_disabled()
        .with_connect_timeout(Duration::from_secs(5))
}

fn no_retries() -> object_store::RetryConfig {
    object_store::RetryConfig { max_retries: 0, ..Default::default() }
}

/// The TLS crypto provider (ring) for reqwest's rustls; installing twice is harmless.
fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Process-wide in-memory stores by name, so a test can "restart" a node in memory.
fn memory_store(name: &str) -> Arc<dyn ObjectStore> {
    static STORES: StdMutex<Option<HashMap<String, Arc<object_store::memory::InMemory>>>> =
        StdMutex::new(None);
    let mut stores = STORES.lock().expect("memory store registry");
    let store = stores.get_or_insert_with(HashMap::new).entry(name.to_string()).or_default();
    store.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_errors() {
        let not_found = object_store::Error::NotFound { path: "x".into(), source: "gone".into() };
        assert!(!is_retryable(&not_found));
        let timeout = std::io::Error::new(std::io::ErrorKind::TimedOut, "slow");
        let generic = object_store::Error::Generic { store: "t", source: Box::new(timeout) };
        assert!(is_retryable(&generic));
        let status = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 503 Service Unavailable: busy".into(),
        };
        assert!(is_retryable(&status));
        let denied = object_store::Error::Generic {
            store: "S3",
            source: "Server returned non-2xx status code: 400 Bad Request".into(),
        };
        assert!(!is_retryable(&denied));
    }
}
