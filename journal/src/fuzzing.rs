//! Entry points for the fuzz targets (`fuzz/`) and their corpus-replay test
//! (`tests/fuzz_corpus.rs`); feature `fuzzing`, not an API.
//!
//! Why here and not in `fuzz/`: the decoders are crate-private, and the replay test
//! that CI runs on stable must call exactly what the fuzzer called. Each function
//! takes any bytes and must return normally: a panic, an abort or an allocation
//! beyond the fuzzer's limit is a finding.
//!
//! Checksums stop a coverage-guided fuzzer at the first record, so each entry point
//! also has a mode (chosen by the input's first byte) that repairs the checksums of
//! the input before decoding it; what follows them is then reached.

use bytes::Bytes;

use crate::frame::{seal, unseal};
use crate::object::recover::{parse_seq, View};
use crate::object::segment::{self, Kind, HEADER_LEN, MAGIC};
use crate::sled_store::format;

/// The object-store segment decoder (`object::segment::decode`), then the fold of its
/// records into a recovery view. Input: `[mode][object bytes]`; mode bit 0 repairs the
/// header and record checksums (and the magic, version and seq) so records decode;
/// in that mode the records must encode back to the same bytes.
pub fn segment(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else { return };
    let mut bytes = rest.to_vec();
    let repaired = mode & 1 == 1;
    if repaired {
        repair_segment(&mut bytes);
    }
    let seq = bytes.get(8..16).map_or(0, |s| u64::from_le_bytes(s.try_into().expect("8 bytes")));
    let seq = if mode & 2 == 2 { seq ^ 1 } else { seq };
    let bytes = Bytes::from(bytes);
    let Ok(decoded) = segment::decode(&bytes, seq) else { return };
    let mut view = View::default();
    for record in &decoded.records {
        if view.apply(record).is_err() {
            break;
        }
        if record.kind == Kind::Claim {
            let _ = segment::parse_torn_ack(&record.payload);
        }
    }
    let _ = view.state();
    if repaired && mode & 2 == 0 && decoded.failure.is_none() {
        let writer = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
        let again = segment::encode(seq, writer, &decoded.records).expect("small records");
        assert_eq!(again, bytes, "a decoded object must encode back to its bytes");
    }
    if let Ok(name) = std::str::from_utf8(rest) {
        let _ = parse_seq(name, ".seg");
    }
}

/// Writes a valid magic, version and header checksum, then each record's checksum for
/// as long as the record lengths fit.
fn repair_segment(bytes: &mut Vec<u8>) {
    if bytes.len() < HEADER_LEN {
        bytes.resize(HEADER_LEN, 0);
    }
    bytes[..4].copy_from_slice(MAGIC);
    bytes[4..8].copy_from_slice(&segment::FORMAT_VERSION.to_le_bytes());
    let crc = crc32c::crc32c(&bytes[..24]);
    bytes[24..28].copy_from_slice(&crc.to_le_bytes());
    let mut at = HEADER_LEN;
    while let Some(head) = bytes.get(at..at + 8) {
        let len = u32::from_le_bytes(head[..4].try_into().expect("4 bytes")) as usize;
        let Some(body) = bytes.get(at + 8..(at + 8).saturating_add(len)) else { break };
        let crc = crc32c::crc32c(body);
        bytes[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
        at += 8 + len;
    }
}

/// The sled backend's value decoders, as recovery and the handle call them on one
/// stored value. Input: `[mode][key length][key][value]`; mode bits 0..2 pick the key's
/// meaning (format version, vote, purge marker, snapshot, log entry), bit 3 seals the
/// value with a valid checksum first.
pub fn sled_record(data: &[u8]) {
    let [mode, key_len, rest @ ..] = data else { return };
    let (key, value) = rest.split_at(usize::from(*key_len).min(rest.len()));
    let sealed;
    let value = if mode & 8 == 8 {
        sealed = seal(value);
        &sealed[..]
    } else {
        value
    };
    let Ok(payload) = unseal(value) else { return };
    match mode & 7 {
        0 => {
            let _ = format::parse_format_version(payload);
        }
        1 => {
            let _ = Bytes::copy_from_slice(payload);
        }
        2 => {
            let _ = format::split_purged(payload);
        }
        3 => {
            let _ = format::split_snapshot(Bytes::copy_from_slice(payload));
        }
        _ => {
            let _ = format::key_index(key);
        }
    }
}
