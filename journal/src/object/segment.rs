//! The object format: a header, then checksummed records. Used for log segments
//! (`log/<seq>.seg`) and for vote and snapshot objects (`vote/<seq>`, `snapshot/<seq>`).
//!
//! ```text
//! header (28 bytes): "SLJR" | u32 version | u64 seq | u64 writer | u32 crc32c(previous 24 bytes)
//! record:            u32 len | u32 crc32c(body) | body = u8 kind | u64 index | payload
//!                    (len = 9 + payload length; all integers little-endian)
//! ```
//! `seq` repeats the object's name (a misnamed or copied object is detected) and `writer` is a
//! random id of the handle that wrote it, which makes every object's bytes unique to its
//! writer: when a create-if-absent PUT is retried after a timeout and finds the name taken,
//! comparing bytes tells "my earlier attempt landed" from "another writer took this seq".

use bytes::{BufMut, Bytes, BytesMut};

/// Magic at the start of every object.
pub(crate) const MAGIC: &[u8; 4] = b"SLJR";
/// The object format this build writes and reads.
pub(crate) const FORMAT_VERSION: u32 = 1;
pub(crate) const HEADER_LEN: usize = 28;
const RECORD_HEAD: usize = 8;
const BODY_HEAD: usize = 9;

/// What a record means. The numbers are the on-disk `kind` byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A log entry at `index`; payload = the entry.
    Entry = 1,
    /// Removes entries `>= index`.
    Truncate = 2,
    /// Removes entries `<= index`; payload = the purge marker.
    Purge = 3,
    /// A writer took over; payload = empty, or (written only by earlier builds, still
    /// honoured) `[u64 seq][u64 valid_len]`: a cut of segment `seq` that writer made at open
    /// (bytes from `valid_len` on are ignored by every later recovery).
    Claim = 4,
    /// Makes `vote/<index>` current; payload = `[u32 crc32c][u64 len]` of that object.
    VoteCommit = 5,
    /// Makes `snapshot/<index>` current; payload as for `VoteCommit`.
    SnapshotCommit = 6,
    /// The body of a vote object; payload = the vote.
    VoteBody = 7,
    /// The body of a snapshot object; index = meta length; payload = meta then data.
    SnapshotBody = 8,
}

impl Kind {
    fn from_byte(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Entry,
            2 => Kind::Truncate,
            3 => Kind::Purge,
            4 => Kind::Claim,
            5 => Kind::VoteCommit,
            6 => Kind::SnapshotCommit,
            7 => Kind::VoteBody,
            8 => Kind::SnapshotBody,
            _ => return None,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    pub kind: Kind,
    pub index: u64,
    pub payload: Bytes,
}

impl Record {
    pub(crate) fn new(kind: Kind, index: u64, payload: impl Into<Bytes>) -> Record {
        Record { kind, index, payload: payload.into() }
    }
}

/// Encodes a whole object. Fails only when a record exceeds the u32 length field (4 GiB).
pub(crate) fn encode(seq: u64, writer: u64, records: &[Record]) -> Result<Bytes, String> {
    let size: usize = records.iter().map(|r| RECORD_HEAD + BODY_HEAD + r.payload.len()).sum();
    let mut out = BytesMut::with_capacity(HEADER_LEN + size);
    out.put_slice(MAGIC);
    out.put_u32_le(FORMAT_VERSION);
    out.put_u64_le(seq);
    out.put_u64_le(writer);
    let crc = crc32c::crc32c(&out[..]);
    out.put_u32_le(crc);
    for r in records {
        let len = u32::try_from(BODY_HEAD + r.payload.len())
            .map_err(|_| format!("record of {} bytes exceeds 4 GiB", r.payload.len()))?;
        let mut body_head = [0u8; BODY_HEAD];
        body_head[0] = r.kind as u8;
        body_head[1..].copy_from_slice(&r.index.to_le_bytes());
        let crc = crc32c::crc32c_append(crc32c::crc32c(&body_head), &r.payload);
        out.put_u32_le(len);
        out.put_u32_le(crc);
        out.put_slice(&body_head);
        out.put_slice(&r.payload);
    }
    Ok(out.freeze())
}

/// A decoded object: the records that verified, and where and why decoding stopped early.
#[derive(Debug, Default)]
pub(crate) struct Decoded {
    pub records: Vec<Record>,
    /// Byte offset of the first bad byte and what is wrong there.
    pub failure: Option<(u64, String)>,
}

/// The object's bytes claim a format version this build does not read.
#[derive(Debug)]
pub(crate) struct UnknownVersion(pub u32);

/// Decodes an object named with `seq`. Stops at the first record that fails its framing or
/// checksum; the caller decides whether that is a torn tail or corruption.
pub(crate) fn decode(bytes: &Bytes, seq: u64) -> Result<Decoded, UnknownVersion> {
    let mut decoded = Decoded::default();
    let fail = |offset: usize, why: String| Some((offset as u64, why));
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        decoded.failure =
            fail(0, format!("not a journal object ({} bytes, bad magic)", bytes.len()));
        return Ok(decoded);
    }
    let version = u32::from_le_bytes(bytes[4..8].try_into().expect("4 bytes"));
    if version != FORMAT_VERSION {
        return Err(UnknownVersion(version));
    }
    if bytes.len() < HEADER_LEN {
        decoded.failure = fail(0, format!("header cut short ({} bytes)", bytes.len()));
        return Ok(decoded);
    }
    let stored = u32::from_le_bytes(bytes[24..28].try_into().expect("4 bytes"));
    if stored != crc32c::crc32c(&bytes[..24]) {
        decoded.failure = fail(0, "header checksum mismatch".to_string());
        return Ok(decoded);
    }
    let named = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if named != seq {
        decoded.failure = fail(8, format!("header says seq {named}, the name says {seq}"));
        return Ok(decoded);
    }
    let mut at = HEADER_LEN;
    while at < bytes.len() {
        let rest = bytes.len() - at;
        if rest < RECORD_HEAD + BODY_HEAD {
            decoded.failure = fail(at, format!("record header cut short ({rest} bytes left)"));
            break;
        }
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        if len < BODY_HEAD || len > rest - RECORD_HEAD {
            decoded.failure = fail(at, format!("record length {len} does not fit ({rest} left)"));
            break;
        }
        let body = &bytes[at + RECORD_HEAD..at + RECORD_HEAD + len];
        if crc32c::crc32c(body) != crc {
            decoded.failure = fail(at, "record checksum mismatch".to_string());
            break;
        }
        let Some(kind) = Kind::from_byte(body[0]) else {
            decoded.failure = fail(at, format!("unknown record kind {}", body[0]));
            break;
        };
        let index = u64::from_le_bytes(body[1..9].try_into().expect("8 bytes"));
        let start = at + RECORD_HEAD + BODY_HEAD;
        let payload = bytes.slice(start..at + RECORD_HEAD + len);
        decoded.records.push(Record { kind, index, payload });
        at += RECORD_HEAD + len;
    }
    Ok(decoded)
}

/// `[u32 crc32c][u64 len]` of an object, as stored in a commit record.
pub(crate) fn fingerprint(bytes: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(12);
    out.put_u32_le(crc32c::crc32c(bytes));
    out.put_u64_le(bytes.len() as u64);
    out.freeze()
}

/// Claim payload acknowledging the torn tail of segment `seq` from `valid_len` on.
#[cfg(test)]
pub(crate) fn torn_ack(seq: u64, valid_len: u64) -> Bytes {
    let mut out = BytesMut::with_capacity(16);
    out.put_u64_le(seq);
    out.put_u64_le(valid_len);
    out.freeze()
}

/// The `(seq, valid_len)` a Claim payload acknowledges, if any.
pub(crate) fn parse_torn_ack(payload: &[u8]) -> Option<(u64, u64)> {
    let p: &[u8; 16] = payload.try_into().ok()?;
    Some((
        u64::from_le_bytes(p[..8].try_into().expect("8 bytes")),
        u64::from_le_bytes(p[8..].try_into().expect("8 bytes")),
    ))
}

#[cfg(test)]
#[path = "segment_tests.rs"]
mod tests;
