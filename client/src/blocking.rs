//! A blocking facade for callers without an async runtime: [`Client`] owns one,
//! and [`Elements`] is a plain `Iterator`. Do not use it from inside a runtime.

use std::sync::Arc;

use sluice_dataset::{DatasetDef, Element};
use tokio::runtime::Runtime;

use crate::error::ClientError;
use crate::options::ReadOptions;
use crate::reader::ElementStream;
use crate::retry::RetryPolicy;

pub struct Client {
    inner: crate::Client,
    rt: Arc<Runtime>,
}

impl Client {
    pub fn new(dispatcher_addresses: &[String], policy: RetryPolicy) -> Result<Self, ClientError> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| ClientError::InvalidArgument(format!("cannot start a runtime: {e}")))?;
        let rt = Arc::new(rt);
        let inner = {
            let _guard = rt.enter();
            crate::Client::new(dispatcher_addresses, policy)?
        };
        Ok(Client { inner, rt })
    }

    pub fn register_dataset(
        &self,
        def: &DatasetDef,
        dataset_id: Option<&str>,
    ) -> Result<String, ClientError> {
        self.rt.block_on(self.inner.register_dataset(def, dataset_id))
    }

    pub fn from_dataset_id(
        &self,
        dataset_id: &str,
        opts: ReadOptions,
    ) -> Result<Elements, ClientError> {
        let stream = self.rt.block_on(self.inner.from_dataset_id(dataset_id, opts))?;
        Ok(Elements { stream, rt: self.rt.clone() })
    }

    pub fn distribute(&self, def: &DatasetDef, opts: ReadOptions) -> Result<Elements, ClientError> {
        let stream = self.rt.block_on(self.inner.distribute(def, opts))?;
        Ok(Elements { stream, rt: self.rt.clone() })
    }
}

/// The elements of one iteration as a blocking iterator.
pub struct Elements {
    // Dropped before `rt`, so its release request is spawned on a live runtime.
    stream: ElementStream,
    rt: Arc<Runtime>,
}

impl Elements {
    /// The delivery of the read ([`ElementStream::delivery`]).
    pub fn delivery(&self) -> crate::Delivery {
        self.stream.delivery()
    }

    /// This reader's position ([`ElementStream::position`]); exactly-once reads only.
    pub fn position(&self) -> Result<sluice_positions::Position, ClientError> {
        self.stream.position()
    }
}

impl Iterator for Elements {
    type Item = Result<Element, ClientError>;
    fn next(&mut self) -> Option<Self::Item> {
        use futures::StreamExt;
        self.rt.block_on(self.stream.next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reader::tests::{eo_stream, message};

    #[test]
    fn the_blocking_iterator_consumes_what_it_returns() {
        let rt = Arc::new(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .unwrap(),
        );
        let mut elements = {
            let _guard = rt.enter();
            let (stream, c) = eo_stream(|c| vec![message(1, &[0, 1, 2], c)]);
            assert!(c.position().consumed.run_count() == 0);
            Elements { stream, rt: rt.clone() }
        };
        elements.next().unwrap().unwrap();
        let p = elements.position().unwrap();
        assert!(p.consumed.contains(0, 0) && !p.consumed.contains(1, 0), "{p:?}");
        assert_eq!(p.generation, 1, "the second position taken");
        assert_eq!(elements.delivery(), crate::Delivery::ExactlyOnce);
    }
}
