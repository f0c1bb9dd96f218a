//! `s3://` and `gs://` objects: listing, streaming reads with bounded read-ahead,
//! and multipart writes.
//!
//! Stores are configured from the environment exactly as the journal configures
//! its own (`AWS_*`: `AWS_ENDPOINT`/`AWS_ENDPOINT_URL`, `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`, `AWS_REGION`, `AWS_ALLOW_HTTP`, …; `GOOGLE_*` for
//! `gs://`), read once per bucket: one store per bucket is cached for the life of
//! the process, so its HTTP connection pool is shared by every file of that bucket.
//!
//! A read never holds the whole object: a task on the I/O runtime pulls the GET
//! stream into a channel of [`READ_AHEAD_CHUNKS`] chunks and the reader drains it,
//! so a 10 GB object is read with a few hundred KiB of memory. A stream that breaks
//! mid-object is resumed with a ranged GET from the last byte delivered.

use std::collections::HashMap;
use std::io::{BufRead, Read, Write};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};
use tokio::io::AsyncWriteExt;

use super::listing::{has_glob, ListBudget, MAX_LIST_ENTRIES};
use super::runtime;
use super::url::ObjectUrl;
use super::writer::FileWriter;
use crate::error::DatasetError;

/// Chunks of a GET stream buffered ahead of the reader.
pub const READ_AHEAD_CHUNKS: usize = 4;
/// How long one chunk (or the start of a GET) may take before the read fails.
const CHUNK_TIMEOUT: Duration = Duration::from_secs(60);
/// GETs per object read: the first and the resumptions after a broken stream.
const GET_ATTEMPTS: u32 = 3;
/// Bytes a writer collects before handing them to the multipart upload.
const WRITE_CHUNK: usize = 8 << 20;

/// The store of `url`'s bucket, built on first use.
fn store(url: &ObjectUrl) -> Result<Arc<dyn ObjectStore>, DatasetError> {
    type Stores = HashMap<(String, String), Arc<dyn ObjectStore>>;
    static STORES: Mutex<Option<Stores>> = Mutex::new(None);
    // Held only to look up or insert: building a store does no I/O.
    let mut stores = STORES.lock().unwrap_or_else(|p| p.into_inner());
    let stores = stores.get_or_insert_with(HashMap::new);
    let key = (url.scheme.to_string(), url.bucket.clone());
    if let Some(s) = stores.get(&key) {
        return Ok(s.clone());
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let bad = |e: object_store::Error| DatasetError::io(url.to_string(), e);
    let options = object_store::ClientOptions::new()
        .with_timeout_disabled()
        .with_connect_timeout(Duration::from_secs(5));
    let s: Arc<dyn ObjectStore> = match url.scheme {
        "s3" => {
            let mut b = object_store::aws::AmazonS3Builder::new().with_client_options(options);
            for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("AWS_")) {
                if let Ok(k) = k.to_ascii_lowercase().parse() {
                    b = b.with_config(k, v);
                }
            }
            Arc::new(b.with_bucket_name(&url.bucket).build().map_err(bad)?)
        }
        _ => {
            let mut b =
                object_store::gcp::GoogleCloudStorageBuilder::new().with_client_options(options);
            for (k, v) in std::env::vars().filter(|(k, _)| k.starts_with("GOOGLE_")) {
                if let Ok(k) = k.to_ascii_lowercase().parse() {
                    b = b.with_config(k, v);
                }
            }
            Arc::new(b.with_bucket_name(&url.bucket).build().map_err(bad)?)
        }
    };
    stores.insert(key, s.clone());
    Ok(s)
}

/// An object key as a store path, keeping keys from a listing exactly as listed.
fn key_path(key: &str) -> Path {
    Path::parse(key).unwrap_or_else(|_| Path::from(key))
}

/// URLs of the objects whose keys match `url.key` (a glob; `*` stays within one
/// `/`-separated component). Lists only under the longest wildcard-free directory.
/// Bounded like a local listing: at most `MAX_LIST_ENTRIES` keys, within `budget`.
pub(super) fn list(url: &ObjectUrl, budget: &ListBudget) -> Result<Vec<String>, DatasetError> {
    let shown = url.to_string();
    let pattern = glob::Pattern::new(&url.key)
        .map_err(|e| DatasetError::io(&shown, format!("bad glob pattern: {e}")))?;
    let literal: Vec<&str> = url.key.split('/').take_while(|c| !has_glob(c)).collect();
    // The last literal component may be the file name itself: list its directory.
    let dir_parts = if literal.len() == url.key.split('/').count() {
        &literal[..literal.len().saturating_sub(1)]
    } else {
        &literal[..]
    };
    let prefix = dir_parts.join("/");
    let store = store(url)?;
    let what = shown.clone();
    let budget = budget.clone();
    let keys = runtime::run(&shown, async move {
        let prefix = (!prefix.is_empty()).then(|| Path::from(prefix.as_str()));
        let mut stream = store.list(prefix.as_ref());
        let mut keys = Vec::new();
        while let Some(meta) = stream.next().await {
            let meta = meta.map_err(|e| DatasetError::io(&what, format!("listing failed: {e}")))?;
            if keys.len() as u64 >= MAX_LIST_ENTRIES {
                return Err(DatasetError::io(
                    &what,
                    format!(
                        "listing found more than {MAX_LIST_ENTRIES} objects under the pattern's \
                         fixed prefix; narrow the pattern (a longer fixed prefix)"
                    ),
                ));
            }
            budget.check(&what)?;
            keys.push(meta.location.as_ref().to_string());
        }
        Ok(keys)
    })?;
    let opts = glob::MatchOptions { require_literal_separator: true, ..Default::default() };
    Ok(keys
        .into_iter()
        .filter(|k| pattern.matches_with(k, opts))
        .map(|k| ObjectUrl { scheme: url.scheme, bucket: url.bucket.clone(), key: k }.to_string())
        .collect())
}

/// The store of `url`'s bucket and the object's path in it, for a reader that
/// makes its own (ranged) requests: the Parquet source.
pub(super) fn store_and_path(
    url: &ObjectUrl,
) -> Result<(Arc<dyn ObjectStore>, Path), DatasetError> {
    Ok((store(url)?, key_path(&url.key)))
}

/// Streams `url` through a bounded channel filled by a task on the I/O runtime.
pub(super) fn open(url: &ObjectUrl) -> Result<ObjectReader, DatasetError> {
    let store = store(url)?;
    let shown = url.to_string();
    let path = key_path(&url.key);
    let (tx, rx) = tokio::sync::mpsc::channel(READ_AHEAD_CHUNKS);
    let task_url = shown.clone();
    runtime::handle()?.spawn(async move {
        if let Err(e) = pump(store, path, &task_url, &tx).await {
            let _ = tx.send(Err(e)).await;
        }
    });
    Ok(ObjectReader { url: shown, rx, chunk: Bytes::new(), done: false })
}

/// Sends the object's bytes, in order, to `tx` until the end or until the reader
/// goes away; resumes a broken stream from the last byte sent.
async fn pump(
    store: Arc<dyn ObjectStore>,
    path: Path,
    url: &str,
    tx: &tokio::sync::mpsc::Sender<Result<Bytes, DatasetError>>,
) -> Result<(), DatasetError> {
    let mut sent: u64 = 0;
    let mut attempt = 1;
    loop {
        let opts = GetOptions {
            range: (sent > 0).then_some(GetRange::Offset(sent)),
            ..Default::default()
        };
        let failure = match tokio::time::timeout(CHUNK_TIMEOUT, store.get_opts(&path, opts)).await {
            Err(_) => format!("GET timed out after {CHUNK_TIMEOUT:?}"),
            Ok(Err(e @ object_store::Error::NotFound { .. })) => {
                let (file, message) = (url.to_string(), format!("no such object: {e}"));
                return Err(DatasetError::NotFound { file, message });
            }
            Ok(Err(e)) => format!("GET failed: {e}"),
            Ok(Ok(result)) => {
                let mut stream = result.into_stream();
                loop {
                    match tokio::time::timeout(CHUNK_TIMEOUT, stream.next()).await {
                        Err(_) => break format!("no data for {CHUNK_TIMEOUT:?}"),
                        Ok(None) => return Ok(()),
                        Ok(Some(Err(e))) => break format!("stream broke at byte {sent}: {e}"),
                        Ok(Some(Ok(chunk))) => {
                            sent += chunk.len() as u64;
                            if tx.send(Ok(chunk)).await.is_err() {
                                return Ok(()); // the reader was dropped
                            }
                        }
                    }
                }
            }
        };
        if attempt >= GET_ATTEMPTS {
            return Err(DatasetError::io(
                url,
                format!("{failure} (attempt {attempt}/{GET_ATTEMPTS}); check the store and retry"),
            ));
        }
        tracing::warn!(object = url, attempt, "read failed, resuming at byte {sent}: {failure}");
        tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        attempt += 1;
    }
}

/// An object's bytes as they arrive: the chunk at hand is the read buffer.
pub(super) struct ObjectReader {
    url: String,
    rx: tokio::sync::mpsc::Receiver<Result<Bytes, DatasetError>>,
    chunk: Bytes,
    done: bool,
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let chunk = self.fill_buf()?;
        let n = buf.len().min(chunk.len());
        buf[..n].copy_from_slice(&chunk[..n]);
        self.consume(n);
        Ok(n)
    }
}

impl BufRead for ObjectReader {
    fn fill_buf(&mut self) -> std::io::Result<&[u8]> {
        while self.chunk.is_empty() && !self.done {
            // The executor's threads are plain threads (or spawn_blocking ones),
            // where a blocking receive is allowed.
            match self.rx.blocking_recv() {
                None => self.done = true,
                Some(Ok(chunk)) => self.chunk = chunk,
                Some(Err(e)) => {
                    self.done = true;
                    return Err(std::io::Error::other(e));
                }
            }
        }
        Ok(&self.chunk)
    }

    fn consume(&mut self, amt: usize) {
        let n = amt.min(self.chunk.len());
        bytes::Buf::advance(&mut self.chunk, n);
    }
}

impl std::fmt::Debug for ObjectReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectReader").field("url", &self.url).finish()
    }
}

/// Collects [`WRITE_CHUNK`] bytes at a time and hands them to a multipart upload
/// (`object_store::buffered::BufWriter`); the object appears only on `finish`.
struct ObjectWriter {
    url: String,
    inner: Option<object_store::buffered::BufWriter>,
    pending: Vec<u8>,
}

pub(super) fn create(url: &ObjectUrl) -> Result<Box<dyn FileWriter>, DatasetError> {
    let store = store(url)?;
    let inner = object_store::buffered::BufWriter::new(store, key_path(&url.key));
    Ok(Box::new(ObjectWriter { url: url.to_string(), inner: Some(inner), pending: Vec::new() }))
}

impl ObjectWriter {
    /// Uploads `pending` (blocking), then optionally completes the object.
    fn ship(&mut self, finish: bool) -> Result<(), DatasetError> {
        let mut inner = self.inner.take().ok_or_else(|| DatasetError::io(&self.url, "finished"))?;
        let data = std::mem::take(&mut self.pending);
        let url = self.url.clone();
        let inner = runtime::run(&self.url, async move {
            inner.write_all(&data).await.map_err(|e| DatasetError::io(&url, e))?;
            if finish {
                inner.shutdown().await.map_err(|e| DatasetError::io(&url, e))?;
            }
            Ok(inner)
        })?;
        if !finish {
            self.inner = Some(inner);
        }
        Ok(())
    }
}

impl Write for ObjectWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(WRITE_CHUNK.saturating_sub(self.pending.len()).max(1));
        self.pending.extend_from_slice(&buf[..n]);
        if self.pending.len() >= WRITE_CHUNK {
            self.ship(false).map_err(std::io::Error::other)?;
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        // Nothing is visible before `finish` anyway; uploading small parts early
        // would only make more of them.
        Ok(())
    }
}

impl FileWriter for ObjectWriter {
    fn finish(mut self: Box<Self>) -> Result<(), DatasetError> {
        self.ship(true)
    }
}
