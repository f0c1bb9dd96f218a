//! The element codec of the GetElements stream: how a worker compresses a
//! message's elements into a [`pb::CompressedElements`] and how a client gets them
//! back, bounded.
//!
//! One frame per message: the protobuf encoding of an `ElementBatch` holding only
//! the elements, compressed with zstd at level 1 (fast; on token ids it shrank
//! data 2.2x where lz4 and snappy managed 1.5x, docs/operations-compression.md).
//! The frame declares its decompressed length (`raw_bytes`); [`decompress`] checks
//! it against the caller's bound *before* allocating and refuses a frame that
//! decompresses to any other length, so a hostile or broken peer cannot make the
//! reader allocate more than an uncompressed message could have made it.
//!
//! Which codec a stream uses is the client's choice, sent in its request (so the
//! dispatcher's replicated state knows nothing of it); whether a given message is
//! worth compressing is the worker's (`sluice_worker::compress`).

use bytes::Bytes;
use prost::Message;
use thiserror::Error;

use crate::v1 as pb;

/// zstd's fastest regular level.
pub const ZSTD_LEVEL: i32 = 1;

/// A compressed frame could not be turned back into elements.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum CompressionError {
    #[error("the message's codec {0} is not one this client knows (it asked for zstd or none)")]
    UnknownCodec(i32),
    #[error(
        "a compressed message declares {declared} decompressed bytes, above the limit of \
         {limit}"
    )]
    TooLarge { declared: u64, limit: usize },
    #[error("a compressed message is corrupt: {0}")]
    Corrupt(String),
    #[error("a compressed message decompressed to {actual} bytes, but declared {declared}")]
    WrongLength { declared: u64, actual: usize },
    #[error("a compressed message's elements do not decode: {0}")]
    Decode(String),
}

/// `raw` (an encoded `ElementBatch` holding only elements) compressed by
/// `compressor`, or `None` when the frame would not be smaller than `raw`.
pub fn compress(compressor: &mut Compressor, raw: &[u8]) -> Option<pb::CompressedElements> {
    // A frame no smaller than the data is a loss: send the data raw.
    let capacity = raw.len().saturating_sub(1);
    let mut out = Vec::with_capacity(capacity);
    match compressor.compress_to_buffer(raw, &mut out) {
        Ok(n) if n < raw.len() => Some(pb::CompressedElements {
            codec: pb::Compression::Zstd as i32,
            raw_bytes: raw.len() as u64,
            data: Bytes::from(out),
        }),
        // Did not fit in fewer bytes than the input (zstd reports "destination
        // buffer too small"), or failed: raw it is.
        _ => None,
    }
}

/// The elements of `frame`, which must decompress to at most `limit` bytes.
pub fn decompress(
    frame: &pb::CompressedElements,
    limit: usize,
) -> Result<Vec<pb::Element>, CompressionError> {
    if frame.codec != pb::Compression::Zstd as i32 {
        return Err(CompressionError::UnknownCodec(frame.codec));
    }
    let declared = frame.raw_bytes;
    let len = usize::try_from(declared)
        .ok()
        .filter(|&n| n <= limit)
        .ok_or(CompressionError::TooLarge { declared, limit })?;
    let mut out = Vec::with_capacity(len);
    // Writes at most `len` bytes: a frame that holds more fails here.
    let actual = zstd::bulk::Decompressor::new()
        .and_then(|mut d| d.decompress_to_buffer(&frame.data, &mut out))
        .map_err(|e| CompressionError::Corrupt(e.to_string()))?;
    if actual != len {
        return Err(CompressionError::WrongLength { declared, actual });
    }
    let batch = pb::ElementBatch::decode(Bytes::from(out))
        .map_err(|e| CompressionError::Decode(e.to_string()))?;
    if batch.compressed.is_some() || batch.end_of_sequence {
        return Err(CompressionError::Decode(
            "the frame holds more than elements (a nested frame or an end of sequence)".into(),
        ));
    }
    Ok(batch.elements)
}

/// A stream's compression context (reused across its messages).
pub type Compressor = zstd::bulk::Compressor<'static>;

/// A compressor for one stream.
pub fn compressor() -> std::io::Result<Compressor> {
    zstd::bulk::Compressor::new(ZSTD_LEVEL)
}

#[cfg(test)]
#[path = "compression_tests.rs"]
mod tests;
