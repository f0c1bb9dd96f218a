//! Encoding of everything the dispatcher stores or sends between nodes: log
//! entries, votes, purge markers, snapshots and Raft RPCs. One codec (bincode 1,
//! fixed-int little-endian) behind these functions, so a format change happens here.
//!
//! Decoding is bounded: a length prefix that claims more bytes than the input
//! holds is refused before anything is allocated for it (bincode's byte limit,
//! set to the input's length), and a `Command::Batch` inside a batch is refused
//! while decoding (see `command.rs`), so a forged message can neither allocate
//! what it does not carry nor recurse the decoder into a stack overflow. The
//! options are those of `bincode::serialize` (fixint, little-endian, trailing
//! bytes allowed), so the bytes are the same as before the limit (tested below).

use bincode::Options;
use serde::de::DeserializeOwned;
use serde::Serialize;

/// The most bytes one replicated command (a log entry, a batch of commands
/// included) may take encoded: a quarter of the gRPC message limit
/// (`sluice_proto::MAX_MESSAGE_BYTES`), so any entry fits in an AppendEntries
/// with room to spare. A larger command is refused when it is proposed.
pub const MAX_ENTRY_BYTES: u64 = 16 * 1024 * 1024;

/// The most bytes of one Raft RPC a node sends: the gRPC limit less 1 MiB for
/// the envelope. An AppendEntries over it is sent in smaller pieces.
pub const MAX_RAFT_MESSAGE_BYTES: u64 = sluice_proto::MAX_MESSAGE_BYTES as u64 - 1024 * 1024;

/// The most bytes of one snapshot a node takes from a peer (InstallSnapshot,
/// in chunks within the gRPC limit): it holds one such snapshot in memory
/// until the last chunk, and checks it before openraft sees it
/// (`snapshot_inbox.rs`). 32 times the 30 MiB state of 2,000 workers and 200
/// jobs (docs/performance.md); a node whose snapshot grows past it warns
/// (`state_machine.rs`), since its followers would refuse it.
pub const MAX_SNAPSHOT_BYTES: u64 = 1024 * 1024 * 1024;

fn options() -> impl Options {
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .with_little_endian()
        .allow_trailing_bytes()
}

pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::Error> {
    options().serialize(value)
}

/// `encode` in one pass into a buffer of `capacity`: `encode` walks the value
/// twice (bincode 1 measures it first to allocate exactly), which for a
/// snapshot of tens of MiB, encoded while applies wait, is the cost that
/// matters. Same bytes (tested below).
pub fn encode_with_capacity<T: Serialize>(
    value: &T,
    capacity: usize,
) -> Result<Vec<u8>, bincode::Error> {
    let mut out = Vec::with_capacity(capacity);
    options().serialize_into(&mut out, value)?;
    Ok(out)
}

/// The length `encode` would produce, without encoding.
pub fn encoded_len<T: Serialize>(value: &T) -> Result<u64, bincode::Error> {
    options().serialized_size(value)
}

/// Decodes `bytes`, reading at most `bytes.len()` of them: a length prefix
/// claiming more is `SizeLimit` before anything is allocated for it. (Through
/// `deserialize_from`: bincode 1.3's `deserialize` of a slice drops the limit,
/// relying on the slice's end alone.)
pub fn decode<T: DeserializeOwned>(mut bytes: &[u8]) -> Result<T, bincode::Error> {
    options().with_limit(bytes.len() as u64).deserialize_from(&mut bytes)
}

#[cfg(test)]
#[path = "codec_tests.rs"]
mod tests;
