//! The read option `compression`: which codec a reader asks its workers for, and
//! the decoding of the compressed messages they answer with.
//!
//! The choice travels in each `GetElementsRequest` (never in the dispatcher's
//! state), and each `ElementBatch` says how it is encoded, so readers of one job
//! may differ, and an old reader (which asks for nothing) gets raw messages.
//!
//! `auto` (the default) follows tf.data's intent — compress unless the data
//! never leaves the host — decided per worker from its address: a loopback
//! address (`127.0.0.0/8`, `::1`, `localhost`) reads raw, anything else asks for
//! zstd. Compressing costs CPU at both ends, and on loopback there is no
//! bandwidth to save (docs/operations-compression.md has the figures).

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use sluice_proto::compression::{decompress, CompressionError};
use sluice_proto::v1 as pb;
use sluice_proto::MAX_MESSAGE_BYTES;

use crate::error::ClientError;

/// A reader's compression choice (`ReadOptions::compression`, `sluice read
/// --compression`, Python `compression=`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Compression {
    /// zstd for workers reached over the network, raw for loopback ones.
    #[default]
    Auto,
    /// Always raw.
    None,
    /// Always zstd (level 1) where it pays; the worker still sends a message raw
    /// when it is small or does not shrink.
    Zstd,
}

impl Compression {
    /// The values `from_str` accepts, for error messages and help texts.
    pub const VALUES: &'static str = "auto, none, zstd";

    /// What to ask the worker at `address` for.
    pub fn for_worker(self, address: &str) -> pb::Compression {
        match self {
            Compression::None => pb::Compression::None,
            Compression::Zstd => pb::Compression::Zstd,
            Compression::Auto if is_loopback(address) => pb::Compression::None,
            Compression::Auto => pb::Compression::Zstd,
        }
    }
}

impl FromStr for Compression {
    type Err = ClientError;

    fn from_str(s: &str) -> Result<Self, ClientError> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(Compression::Auto),
            "none" => Ok(Compression::None),
            "zstd" => Ok(Compression::Zstd),
            _ => Err(ClientError::InvalidArgument(format!(
                "unknown compression `{s}`; valid values: {}",
                Compression::VALUES
            ))),
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Compression::Auto => "auto",
            Compression::None => "none",
            Compression::Zstd => "zstd",
        })
    }
}

/// Whether `address` (`host:port`, `[v6]:port`, or a bare host) names this host
/// over loopback.
pub fn is_loopback(address: &str) -> bool {
    let host = match address.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) && !host.ends_with(':') => {
            host
        }
        _ => address,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().map(|ip| ip.is_loopback()).unwrap_or(false)
}

/// Replaces a compressed message's frame by its elements (bounded by the message
/// limit). A bad frame is a protocol error naming the worker.
pub(crate) fn expand(batch: &mut pb::ElementBatch, worker: &str) -> Result<(), ClientError> {
    let Some(frame) = batch.compressed.take() else { return Ok(()) };
    let bad = |e: CompressionError| ClientError::Protocol {
        address: worker.to_string(),
        message: format!("{e}; read with compression=none to bypass the codec"),
    };
    if !batch.elements.is_empty() {
        return Err(bad(CompressionError::Decode(
            "a message carries both raw and compressed elements".into(),
        )));
    }
    batch.elements = decompress(&frame, MAX_MESSAGE_BYTES).map_err(bad)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_parse_and_unknown_ones_name_the_valid_ones() {
        assert_eq!("AUTO".parse::<Compression>().unwrap(), Compression::Auto);
        assert_eq!("none".parse::<Compression>().unwrap(), Compression::None);
        assert_eq!("zstd".parse::<Compression>().unwrap(), Compression::Zstd);
        for c in [Compression::Auto, Compression::None, Compression::Zstd] {
            assert_eq!(c.to_string().parse::<Compression>().unwrap(), c);
        }
        let e = "lz4".parse::<Compression>().unwrap_err().to_string();
        assert!(e.contains("`lz4`") && e.contains("auto, none, zstd"), "{e}");
    }

    #[test]
    fn auto_compresses_only_off_the_host() {
        for local in
            ["127.0.0.1:5051", "127.1.2.3:1", "localhost:80", "[::1]:5051", "::1", "LOCALHOST"]
        {
            assert!(is_loopback(local), "{local}");
            assert_eq!(Compression::Auto.for_worker(local), pb::Compression::None, "{local}");
        }
        for remote in
            ["10.0.0.7:5051", "worker-3.sluice.svc:5051", "[2001:db8::1]:5051", "192.168.1.2"]
        {
            assert!(!is_loopback(remote), "{remote}");
            assert_eq!(Compression::Auto.for_worker(remote), pb::Compression::Zstd, "{remote}");
        }
        assert_eq!(Compression::Zstd.for_worker("127.0.0.1:1"), pb::Compression::Zstd);
        assert_eq!(Compression::None.for_worker("10.0.0.7:1"), pb::Compression::None);
    }

    #[test]
    fn a_corrupt_frame_is_a_protocol_error_naming_the_worker() {
        let mut batch = pb::ElementBatch {
            compressed: Some(pb::CompressedElements {
                codec: pb::Compression::Zstd as i32,
                raw_bytes: 100,
                data: bytes::Bytes::from_static(b"not zstd at all"),
            }),
            ..Default::default()
        };
        let e = expand(&mut batch, "10.0.0.7:5051").unwrap_err();
        match &e {
            ClientError::Protocol { address, message } => {
                assert_eq!(address, "10.0.0.7:5051");
                assert!(message.contains("corrupt"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        let mut oversized = pb::ElementBatch {
            compressed: Some(pb::CompressedElements {
                codec: pb::Compression::Zstd as i32,
                raw_bytes: MAX_MESSAGE_BYTES as u64 + 1,
                data: bytes::Bytes::from_static(b"x"),
            }),
            ..Default::default()
        };
        let e = expand(&mut oversized, "w:1").unwrap_err().to_string();
        assert!(e.contains("above the limit"), "{e}");
    }
}
