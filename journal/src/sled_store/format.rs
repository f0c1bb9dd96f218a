//! The sled backend's on-disk names: the format version, the `meta` tree's keys, and the
//! decoding of log keys and the snapshot value.
//!
//! Why a module of its own: both the handle (`sled_store`) and recovery at open
//! (`sled_store::recover`) read and write these; keeping them in this leaf lets recovery be
//! read without the handle, and the handle without recovery's internals.

use bytes::Bytes;

/// The on-disk format this build writes. 2: the snapshot is a file of its own
/// (`snapshot_file`); 1: it was the `meta` value `snapshot`.
pub(crate) const FORMAT_VERSION: u32 = 2;
/// The oldest format this build reads. A writable open upgrades a format-1 journal to 2
/// (`recover::upgrade`); a read-only one reads it as it is.
pub(crate) const OLDEST_FORMAT_VERSION: u32 = 1;
pub(crate) const KEY_FORMAT: &[u8] = b"format_version";
pub(crate) const KEY_VOTE: &[u8] = b"vote";
pub(crate) const KEY_PURGED: &[u8] = b"purged";
pub(crate) const KEY_SNAPSHOT: &[u8] = b"snapshot";

pub(crate) fn key_index(key: &[u8]) -> Result<u64, String> {
    let bytes: [u8; 8] = key.try_into().map_err(|_| format!("log key is {} bytes", key.len()))?;
    Ok(u64::from_be_bytes(bytes))
}

/// Where a snapshot value `[u64 LE meta_len][meta][data]` splits: the end of `meta`.
pub(crate) fn snapshot_meta_end(value: &[u8]) -> Result<usize, String> {
    let Some((len, rest)) = value.split_first_chunk::<8>() else {
        return Err(format!("snapshot value is {} bytes", value.len()));
    };
    let meta_len = u64::from_le_bytes(*len);
    if meta_len > rest.len() as u64 {
        return Err(format!("snapshot meta length {meta_len} exceeds value ({})", rest.len()));
    }
    Ok(8 + meta_len as usize)
}

/// `(meta, data)` of a snapshot value, sharing its bytes.
pub(crate) fn split_snapshot(value: Bytes) -> Result<(Bytes, Bytes), String> {
    let end = snapshot_meta_end(&value)?;
    Ok((value.slice(8..end), value.slice(end..)))
}

/// The format version a `format_version` value holds.
pub(crate) fn parse_format_version(value: &[u8]) -> Result<u32, String> {
    let bytes: [u8; 4] = value.try_into().map_err(|_| format!("{} bytes", value.len()))?;
    Ok(u32::from_le_bytes(bytes))
}

/// The `purged` value: `[u64 LE upto][marker]`.
pub(crate) fn split_purged(value: &[u8]) -> Result<(u64, Bytes), String> {
    let Some((upto, marker)) = value.split_first_chunk::<8>() else {
        return Err(format!("{} bytes", value.len()));
    };
    Ok((u64::from_le_bytes(*upto), Bytes::copy_from_slice(marker)))
}
