//! Checksummed framing shared by both backends: `[u32 crc32c (LE)][payload]`.
//!
//! Every value the sled backend stores is framed this way, so a torn or bit-rotted value is
//! detected on read instead of being handed to Raft as a valid entry.

/// Bytes of the checksum prefix.
pub(crate) const CRC_LEN: usize = 4;

/// `[crc32c(payload)][payload]`.
pub(crate) fn seal(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(CRC_LEN + payload.len());
    out.extend_from_slice(&crc32c::crc32c(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload of a sealed value, or why it is not one.
pub(crate) fn unseal(framed: &[u8]) -> Result<&[u8], String> {
    if framed.len() < CRC_LEN {
        return Err(format!("value is {} bytes, shorter than its checksum", framed.len()));
    }
    let (crc, payload) = framed.split_at(CRC_LEN);
    let stored = u32::from_le_bytes(crc.try_into().expect("4 bytes"));
    let actual = crc32c::crc32c(payload);
    if stored != actual {
        return Err(format!("checksum mismatch (stored {stored:08x}, computed {actual:08x})"));
    }
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seal_round_trips_and_detects_damage() {
        let sealed = seal(b"hello");
        assert_eq!(unseal(&sealed).unwrap(), b"hello");
        let mut bad = sealed.clone();
        bad[6] ^= 1;
        assert!(unseal(&bad).unwrap_err().contains("checksum"));
        assert!(unseal(&sealed[..3]).is_err());
        assert_eq!(unseal(&seal(b"")).unwrap(), b"");
    }
}
