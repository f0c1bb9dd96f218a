//! Encoding an `ElementBatch` as a gRPC message without copying tensor data.
//!
//! tonic's prost codec encodes every response into one contiguous buffer, which
//! copies each tensor's bytes (already a `Bytes` into the element's buffer) once
//! more per message, and faults in a fresh encode buffer for large messages: for
//! 1 MiB elements that copy was a large share of the worker's CPU. h2 writes a
//! DATA frame's payload larger than a few hundred bytes with a vectored write
//! instead of copying it, so a response body made of a chain of `Bytes` chunks
//! reaches the socket without the copy.
//!
//! [`encode`] produces that chain: the gRPC message prefix (compressed flag 0 and
//! the big-endian length), then the protobuf encoding, where every `Tensor.data`
//! of at least [`ZERO_COPY_MIN_BYTES`] is its own chunk — the very same `Bytes` —
//! and everything else is encoded (with prost's own field encoders, so the result
//! is byte for byte what `Message::encode_to_vec` gives) into small chunks that
//! share one allocation. Smaller tensors are copied: every chunk is a DATA frame
//! of its own, and h2 writes each large frame with its own `writev`, so a message
//! of 11 KB TFRecord records as chunks cost one system call (and one wake-up of
//! the reader) per record. Copying up to 256 KiB costs less than that call; the
//! threshold was 4 KiB, and raising it took the reader's CPU per raw record from
//! 11 to 5–7 µs (docs/performance.md, "Records at the speed of bytes").

use bytes::{BufMut, Bytes, BytesMut};
use prost::encoding::{self, encode_key, encode_varint, WireType};
use prost::Message;
use sluice_proto::v1 as pb;
use thiserror::Error;

/// Tensor data at least this long is sent as its own chunk instead of copied
/// (see the module docs for why not less).
pub(crate) const ZERO_COPY_MIN_BYTES: usize = 256 << 10;

/// The gRPC message prefix: compressed flag and big-endian u32 length.
pub(crate) use sluice_proto::contract::element_route::MESSAGE_PREFIX_BYTES as GRPC_HEADER_BYTES;

// Field numbers of `proto/sluice.proto`.
const BATCH_ELEMENTS: u32 = 1;
const BATCH_END_OF_SEQUENCE: u32 = 2;
const BATCH_COMPRESSED: u32 = 3;
const BATCH_POSITIONS: u32 = 4;
const BATCH_SPLIT: u32 = 5;
const COMPRESSED_CODEC: u32 = 1;
const COMPRESSED_RAW_BYTES: u32 = 2;
const COMPRESSED_DATA: u32 = 3;
const ELEMENT_COMPONENTS: u32 = 1;
const ELEMENT_NAMES: u32 = 2;
const ELEMENT_ORIGIN: u32 = 20;
const TENSOR_DTYPE: u32 = 1;
const TENSOR_SHAPE: u32 = 2;
const TENSOR_DATA: u32 = 3;
const POSITIONS_RUNS_PER_ELEMENT: u32 = 1;
const POSITIONS_RUNS: u32 = 2;
const POSITIONS_UNIT_ENDS: u32 = 3;

/// The message is larger than the peer may accept (the `max_encoding_message_size`
/// every Sluice endpoint applies).
#[derive(Debug, Error, PartialEq, Eq)]
#[error("Error, encoded message length too large: found {len} bytes, the limit is: {limit} bytes")]
pub(crate) struct TooLarge {
    pub len: usize,
    pub limit: usize,
}

/// `batch` as a length-prefixed gRPC message, in chunks whose concatenation is the
/// 5-byte prefix followed by `batch.encode_to_vec()`. Tensor data of at least
/// `zero_copy_min` bytes is a chunk of its own that shares the tensor's memory.
pub(crate) fn encode(
    batch: &pb::ElementBatch,
    zero_copy_min: usize,
    limit: usize,
) -> Result<Vec<Bytes>, TooLarge> {
    let len = batch.encoded_len();
    if len > limit || u32::try_from(len).is_err() {
        return Err(TooLarge { len, limit });
    }
    let shared: usize = tensors(batch).map(|t| t.data.len()).filter(|&n| n >= zero_copy_min).sum();
    let mut out = Scatter {
        // Exactly the bytes that are not shared: one allocation for every prefix chunk.
        prefix: BytesMut::with_capacity(GRPC_HEADER_BYTES + len - shared),
        chunks: Vec::new(),
        zero_copy_min,
    };
    out.prefix.put_u8(0); // not compressed
    out.prefix.put_u32(len as u32);
    for element in &batch.elements {
        encode_key(BATCH_ELEMENTS, WireType::LengthDelimited, &mut out.prefix);
        encode_varint(element.encoded_len() as u64, &mut out.prefix);
        out.element(element);
    }
    if batch.end_of_sequence {
        encoding::bool::encode(BATCH_END_OF_SEQUENCE, &batch.end_of_sequence, &mut out.prefix);
    }
    if let Some(frame) = &batch.compressed {
        encode_key(BATCH_COMPRESSED, WireType::LengthDelimited, &mut out.prefix);
        encode_varint(frame.encoded_len() as u64, &mut out.prefix);
        out.compressed(frame);
    }
    // Exactly-once tasks: small packed columns, encoded whole.
    if let Some(positions) = &batch.positions {
        out.positions(positions);
    }
    // Deterministic order: the message's split, a few varints.
    if let Some(split) = &batch.split {
        encoding::message::encode(BATCH_SPLIT, split, &mut out.prefix);
    }
    Ok(out.finish())
}

fn tensors(batch: &pb::ElementBatch) -> impl Iterator<Item = &pb::Tensor> {
    batch.elements.iter().flat_map(|e| e.components.iter())
}

struct Scatter {
    /// Encoded bytes not yet cut into a chunk.
    prefix: BytesMut,
    chunks: Vec<Bytes>,
    zero_copy_min: usize,
}

impl Scatter {
    fn element(&mut self, element: &pb::Element) {
        for tensor in &element.components {
            encode_key(ELEMENT_COMPONENTS, WireType::LengthDelimited, &mut self.prefix);
            encode_varint(tensor.encoded_len() as u64, &mut self.prefix);
            self.tensor(tensor);
        }
        encoding::string::encode_repeated(ELEMENT_NAMES, &element.names, &mut self.prefix);
        // Never set by this worker (origins travel in `positions`); encoded for a
        // faithful copy anyway.
        if let Some(origin) = &element.origin {
            encoding::message::encode(ELEMENT_ORIGIN, origin, &mut self.prefix);
        }
    }

    /// As prost does: default values (dtype 0, empty shape, empty data) are left out.
    fn tensor(&mut self, tensor: &pb::Tensor) {
        if tensor.dtype != 0 {
            encoding::int32::encode(TENSOR_DTYPE, &tensor.dtype, &mut self.prefix);
        }
        encoding::uint64::encode_packed(TENSOR_SHAPE, &tensor.shape, &mut self.prefix);
        self.data(TENSOR_DATA, &tensor.data);
    }

    /// A compressed frame: its data, like a tensor's, is a chunk of its own when large.
    fn compressed(&mut self, frame: &pb::CompressedElements) {
        if frame.codec != 0 {
            encoding::int32::encode(COMPRESSED_CODEC, &frame.codec, &mut self.prefix);
        }
        if frame.raw_bytes != 0 {
            encoding::uint64::encode(COMPRESSED_RAW_BYTES, &frame.raw_bytes, &mut self.prefix);
        }
        self.data(COMPRESSED_DATA, &frame.data);
    }

    /// Exactly-once positions: packed columns of a few numbers per element.
    /// prost writes a varint a byte at a time (`BufMut::put_u8`, a capacity
    /// check and a copy per byte: a visible share of an exactly-once worker's
    /// CPU); each column here goes through a stack buffer, byte for byte the same.
    fn positions(&mut self, p: &pb::Positions) {
        encode_key(BATCH_POSITIONS, WireType::LengthDelimited, &mut self.prefix);
        encode_varint(p.encoded_len() as u64, &mut self.prefix);
        let per_element = p.runs_per_element.iter().map(|n| u64::from(*n));
        self.packed(POSITIONS_RUNS_PER_ELEMENT, per_element);
        self.packed(POSITIONS_RUNS, p.runs.iter().copied());
        self.packed(POSITIONS_UNIT_ENDS, p.unit_ends.iter().copied());
    }

    /// A packed repeated varint field, as prost encodes it (nothing when empty).
    fn packed(&mut self, field: u32, values: impl Iterator<Item = u64> + Clone) {
        let len: usize = values.clone().map(encoding::encoded_len_varint).sum();
        if len == 0 {
            return;
        }
        encode_key(field, WireType::LengthDelimited, &mut self.prefix);
        encode_varint(len as u64, &mut self.prefix);
        let mut buf = [0u8; 256];
        let mut at = 0;
        for mut v in values {
            // A varint is at most 10 bytes.
            if at > buf.len() - 10 {
                self.prefix.extend_from_slice(&buf[..at]);
                at = 0;
            }
            while v >= 0x80 {
                buf[at] = (v as u8) | 0x80;
                v >>= 7;
                at += 1;
            }
            buf[at] = v as u8;
            at += 1;
        }
        self.prefix.extend_from_slice(&buf[..at]);
    }

    /// A `bytes` field: shared as its own chunk from `zero_copy_min` bytes, else copied.
    fn data(&mut self, field: u32, data: &Bytes) {
        if data.len() >= self.zero_copy_min && !data.is_empty() {
            encode_key(field, WireType::LengthDelimited, &mut self.prefix);
            encode_varint(data.len() as u64, &mut self.prefix);
            self.cut();
            self.chunks.push(data.clone());
        } else if !data.is_empty() {
            encoding::bytes::encode(field, data, &mut self.prefix);
        }
    }

    /// Ends the current prefix chunk; the next one continues in the same allocation.
    fn cut(&mut self) {
        if !self.prefix.is_empty() {
            self.chunks.push(self.prefix.split().freeze());
        }
    }

    fn finish(mut self) -> Vec<Bytes> {
        self.cut();
        self.chunks
    }
}
