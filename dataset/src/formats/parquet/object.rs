//! A Parquet file in an object store, read by ranged GETs: the footer as one
//! suffix request, a row group's column chunks as the ranges the decoder asks
//! for. (arrow-rs leaves this adapter to its users since 60.0.)
//!
//! Every request has a deadline ([`REQUEST_TIMEOUT`]) and is tried
//! [`ATTEMPTS`] times with a growing pause, like the object streams of `io`;
//! a missing object is not retried. A footer is refused before it is fetched
//! when it claims more than [`MAX_FOOTER_BYTES`].

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore};
use parquet::arrow::arrow_reader::ArrowReaderOptions;
use parquet::arrow::async_reader::{AsyncFileReader, MetadataSuffixFetch};
use parquet::errors::ParquetError;
use parquet::file::metadata::{ParquetMetaData, ParquetMetaDataReader};

/// The most bytes a footer (its metadata and the 8-byte tail) may claim.
pub const MAX_FOOTER_BYTES: u64 = 64 << 20;
/// How long one GET may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// Tries per request.
const ATTEMPTS: u32 = 3;

/// An object read as a Parquet file.
pub(super) struct ObjectFile {
    store: Arc<dyn ObjectStore>,
    path: Path,
}

impl ObjectFile {
    pub fn new(store: Arc<dyn ObjectStore>, path: Path) -> Self {
        ObjectFile { store, path }
    }

    /// `get` with a deadline, tried [`ATTEMPTS`] times.
    async fn with_retries<T, F, Fut>(&self, what: &str, get: F) -> Result<T, ParquetError>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<T, object_store::Error>>,
    {
        let mut attempt = 1;
        loop {
            let failure = match tokio::time::timeout(REQUEST_TIMEOUT, get()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e @ object_store::Error::NotFound { .. })) => {
                    return Err(ParquetError::External(Box::new(e)))
                }
                Ok(Err(e)) => e.to_string(),
                Err(_) => format!("no answer within {REQUEST_TIMEOUT:?}"),
            };
            if attempt >= ATTEMPTS {
                return Err(ParquetError::General(format!(
                    "{what} of `{}` failed {ATTEMPTS} times, last: {failure}",
                    self.path
                )));
            }
            tracing::warn!(object = %self.path, attempt, "{what} failed, trying again: {failure}");
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
            attempt += 1;
        }
    }
}

impl AsyncFileReader for ObjectFile {
    fn get_bytes(&mut self, range: Range<u64>) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            let opts = || GetOptions { range: Some(range.clone().into()), ..Default::default() };
            self.with_retries("a ranged GET", || async {
                self.store.get_opts(&self.path, opts()).await?.bytes().await
            })
            .await
        }
        .boxed()
    }

    fn get_byte_ranges(
        &mut self,
        ranges: Vec<Range<u64>>,
    ) -> BoxFuture<'_, parquet::errors::Result<Vec<Bytes>>> {
        async move {
            self.with_retries("ranged GETs", || self.store.get_ranges(&self.path, &ranges)).await
        }
        .boxed()
    }

    fn get_metadata<'a>(
        &'a mut self,
        options: Option<&'a ArrowReaderOptions>,
    ) -> BoxFuture<'a, parquet::errors::Result<Arc<ParquetMetaData>>> {
        async move {
            let metadata = ParquetMetaDataReader::new()
                .with_arrow_reader_options(options)
                .load_via_suffix_and_finish(self)
                .await?;
            Ok(Arc::new(metadata))
        }
        .boxed()
    }
}

impl MetadataSuffixFetch for &mut ObjectFile {
    fn fetch_suffix(&mut self, suffix: usize) -> BoxFuture<'_, parquet::errors::Result<Bytes>> {
        async move {
            if suffix as u64 > MAX_FOOTER_BYTES {
                return Err(ParquetError::General(format!(
                    "the footer claims {suffix} bytes, over the limit of {MAX_FOOTER_BYTES} \
                     (MAX_FOOTER_BYTES)"
                )));
            }
            let opts = || GetOptions {
                range: Some(GetRange::Suffix(suffix as u64)),
                ..Default::default()
            };
            self.with_retries("the footer's GET", || async {
                self.store.get_opts(&self.path, opts()).await?.bytes().await
            })
            .await
        }
        .boxed()
    }
}
