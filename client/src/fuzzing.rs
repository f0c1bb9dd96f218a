//! Entry points for the element-frame fuzz target (`fuzz/`) and its corpus-replay test
//! (`tests/fuzz_corpus.rs`); feature `fuzzing`, not an API.
//!
//! Why here: the frame decoder (`worker_stream::Chunks`) is crate-private, and the
//! replay test that CI runs on stable must call exactly what the fuzzer called.

use bytes::Bytes;
use prost::Message;
use sluice_dataset::Element;
use sluice_proto::v1 as pb;

use crate::worker_stream::Chunks;

/// A `GetElements` response body as the reader receives it: the input, cut into DATA
/// frames, through [`Chunks`] and `ElementBatch` decoding, then each element into the
/// dataset's types. Input: as [`grpc_body`] reads it.
/// A message decoded over its frames must equal the same bytes decoded in one piece.
pub fn element_frames(data: &[u8]) {
    let Some((_, wire, step)) = grpc_body(data) else { return };
    let mut chunks = Chunks::default();
    let mut at = 0;
    for frame in wire.chunks(step) {
        chunks.push(Bytes::copy_from_slice(frame));
        loop {
            let message = match chunks.next_message() {
                Ok(Some(message)) => message,
                Ok(None) => break,
                Err(_) => return,
            };
            let len = u32::from_be_bytes(wire[at + 1..at + 5].try_into().expect("4 bytes"));
            let whole = &wire[at + 5..at + 5 + len as usize];
            at += 5 + len as usize;
            let framed = pb::ElementBatch::decode(message);
            let contiguous = pb::ElementBatch::decode(whole);
            assert_eq!(framed.is_ok(), contiguous.is_ok(), "framing changes the decoding");
            let Ok(batch) = framed else { continue };
            assert_eq!(Some(&batch), contiguous.as_ref().ok(), "framing changes the decoding");
            for element in batch.elements {
                let _ = Element::try_from(element);
            }
        }
    }
}

/// A gRPC body from a fuzz input `[mode][frame size][body]`: the mode byte, the body
/// (with bit 0 of the mode, behind a gRPC message prefix: uncompressed, the body's
/// length) and the size of the DATA frames to cut it into (frame size 0 = one frame).
/// Shared with the worker's request target, which reads the same shape of input.
pub fn grpc_body(data: &[u8]) -> Option<(u8, Vec<u8>, usize)> {
    let [mode, step, body @ ..] = data else { return None };
    let mut wire = Vec::with_capacity(body.len() + 5);
    if mode & 1 == 1 {
        wire.push(0);
        wire.extend_from_slice(&(body.len() as u32).to_be_bytes());
    }
    wire.extend_from_slice(body);
    let step = if *step == 0 { wire.len().max(1) } else { usize::from(*step) };
    Some((*mode, wire, step))
}
