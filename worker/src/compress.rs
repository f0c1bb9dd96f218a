//! A GetElements stream's compression: which messages the producer compresses,
//! before they enter the response channel (so the HTTP layer only writes bytes,
//! and no lock is held while compressing). A message of [`BLOCKING_FROM_BYTES`]
//! or more is compressed on tokio's blocking pool ([`StreamCompression::apply_off_runtime`]):
//! a 4 MiB message takes tens of milliseconds, which must not stall the runtime
//! threads that serve the worker's other streams and its heartbeats.
//!
//! The client asks for a codec in its request (`GetElementsRequest.compression`);
//! a client that asks for nothing (an old one) gets raw messages. A message is
//! sent raw when compressing cannot pay: it is below [`MIN_COMPRESS_BYTES`], or
//! the frame would save less than 1/[`MIN_SAVING_FRACTION`] of it. After a message
//! that did not shrink, the stream skips the next 1, 2, 4, … up to [`MAX_SKIP`]
//! messages before it tries again, so incompressible data (random bytes, already
//! compressed images) costs a compression attempt in a few messages, not in each.

use prost::Message;
use sluice_proto::compression::{self, Compressor};
use sluice_proto::v1 as pb;

/// Smaller messages go raw: a frame's own overhead and the per-message
/// compression call would eat the little they could save.
pub(crate) const MIN_COMPRESS_BYTES: usize = 512;
/// A frame must be at least 1/16 smaller than the message, or it is not worth the
/// client's decompression.
pub(crate) const MIN_SAVING_FRACTION: usize = 16;
/// Most messages skipped after ones that did not shrink.
pub(crate) const MAX_SKIP: u32 = 32;
/// Messages at least this large are compressed off the runtime threads.
pub(crate) const BLOCKING_FROM_BYTES: usize = 64 * 1024;

/// One stream's compression state.
pub(crate) struct StreamCompression {
    /// `None`: the client did not ask for compression.
    compressor: Option<Compressor>,
    /// Messages still to send raw before the next attempt.
    skip: u32,
    /// The pause after the next failed attempt.
    backoff: u32,
}

impl StreamCompression {
    /// The compression a request asked for (`GetElementsRequest.compression`).
    pub(crate) fn for_request(codec: i32) -> Self {
        let compressor = if codec == pb::Compression::Zstd as i32 {
            compression::compressor()
                .map_err(|e| tracing::warn!(error = %e, "no zstd context; sending raw"))
                .ok()
        } else {
            None
        };
        StreamCompression { compressor, skip: 0, backoff: 1 }
    }

    /// [`apply`](Self::apply), on the blocking pool for a large message. `None`
    /// only if the runtime is shutting down (the stream ends with it).
    pub(crate) async fn apply_off_runtime(
        mut self,
        mut message: pb::ElementBatch,
    ) -> Option<(Self, pb::ElementBatch)> {
        let large = || {
            message.elements.iter().map(|e| e.encoded_len()).sum::<usize>() >= BLOCKING_FROM_BYTES
        };
        if self.compressor.is_none() || self.skip > 0 || !large() {
            self.apply(&mut message);
            return Some((self, message));
        }
        let done = tokio::task::spawn_blocking(move || {
            self.apply(&mut message);
            (self, message)
        });
        match done.await {
            Ok(done) => Some(done),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(_) => None,
        }
    }

    /// Replaces `message`'s elements by their compressed frame when that pays.
    pub(crate) fn apply(&mut self, message: &mut pb::ElementBatch) {
        let Some(compressor) = self.compressor.as_mut() else { return };
        if message.elements.is_empty() {
            return;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        let raw = pb::ElementBatch {
            elements: std::mem::take(&mut message.elements),
            ..Default::default()
        };
        let len = raw.encoded_len();
        if len < MIN_COMPRESS_BYTES {
            message.elements = raw.elements;
            return;
        }
        match compression::compress(compressor, &raw.encode_to_vec()) {
            Some(frame) if frame.data.len() <= len - len / MIN_SAVING_FRACTION => {
                message.compressed = Some(frame);
                self.backoff = 1;
            }
            _ => {
                message.elements = raw.elements;
                self.skip = self.backoff;
                self.backoff = (self.backoff * 2).min(MAX_SKIP);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn message(data: Vec<u8>) -> pb::ElementBatch {
        let tensor =
            pb::Tensor { dtype: pb::DType::Int32 as i32, shape: vec![], data: Bytes::from(data) };
        pb::ElementBatch {
            elements: vec![pb::Element {
                components: vec![tensor],
                names: vec![],
                ..Default::default()
            }],
            end_of_sequence: false,
            compressed: None,
            positions: None,
            split: None,
        }
    }

    fn random(n: usize, seed: u64) -> Vec<u8> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    #[test]
    fn compressible_messages_are_compressed_only_when_asked() {
        let mut raw = StreamCompression::for_request(pb::Compression::Unspecified as i32);
        let mut m = message(vec![1; 8192]);
        raw.apply(&mut m);
        assert!(m.compressed.is_none() && m.elements.len() == 1, "an old client gets raw");

        let mut zstd = StreamCompression::for_request(pb::Compression::Zstd as i32);
        let original = message(vec![1; 8192]);
        let mut m = original.clone();
        zstd.apply(&mut m);
        let frame = m.compressed.as_ref().expect("compressed");
        assert!(m.elements.is_empty());
        assert_eq!(compression::decompress(frame, 1 << 20).unwrap(), original.elements);
    }

    #[tokio::test]
    async fn large_messages_are_compressed_off_the_runtime_and_come_back_whole() {
        let original = message(vec![3; 2 * BLOCKING_FROM_BYTES]);
        let s = StreamCompression::for_request(pb::Compression::Zstd as i32);
        let (s, m) = s.apply_off_runtime(original.clone()).await.expect("runtime alive");
        let frame = m.compressed.as_ref().expect("compressed");
        assert_eq!(compression::decompress(frame, 1 << 20).unwrap(), original.elements);
        // The stream's state came back with it: it compresses the next one too.
        let (_, m) = s.apply_off_runtime(original).await.expect("runtime alive");
        assert!(m.compressed.is_some());
    }

    #[test]
    fn small_messages_and_incompressible_ones_go_raw_and_back_off() {
        let mut s = StreamCompression::for_request(pb::Compression::Zstd as i32);
        let mut m = message(vec![0; MIN_COMPRESS_BYTES / 2]);
        s.apply(&mut m);
        assert!(m.compressed.is_none(), "too small to pay");
        // Incompressible: one attempt, then 1 skipped, then 2, then 4...
        let mut attempts = 0;
        for i in 0..40 {
            let before = s.skip;
            let mut m = message(random(4096, i));
            s.apply(&mut m);
            assert!(m.compressed.is_none());
            if before == 0 {
                attempts += 1;
            }
        }
        assert!(attempts <= 6, "{attempts} attempts over 40 incompressible messages");
        // Compressible data compresses again once the pause is over.
        let compressed = (0..MAX_SKIP + 1).any(|_| {
            let mut m = message(vec![7; 8192]);
            s.apply(&mut m);
            m.compressed.is_some()
        });
        assert!(compressed);
    }
}
