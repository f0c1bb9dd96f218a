//! Snapshot sizes and times, read from a dispatcher's log: the state machine logs
//! `snapshot saved … bytes=B encode_ms=E total_ms=T` for each snapshot it builds
//! (`dispatcher/src/raft/state_machine.rs`); encoding holds the state's read lock,
//! so `encode_ms` is also how long applying waited.

use std::path::Path;

use serde::Serialize;

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Snapshot {
    pub bytes: u64,
    /// Encoding the state (under its read lock).
    pub encode_ms: f64,
    /// Encoding and saving to the journal.
    pub total_ms: f64,
}

/// The snapshots logged in `log` after its first `skip_bytes` bytes.
pub fn read(log: &Path, skip_bytes: u64) -> Vec<Snapshot> {
    let Ok(text) = std::fs::read(log) else { return vec![] };
    let text = String::from_utf8_lossy(text.get(skip_bytes as usize..).unwrap_or_default());
    text.lines().filter(|l| l.contains("snapshot saved")).filter_map(parse).collect()
}

/// The length of `log` now (where the next run's lines begin).
pub fn log_len(log: &Path) -> u64 {
    std::fs::metadata(log).map(|m| m.len()).unwrap_or(0)
}

fn parse(line: &str) -> Option<Snapshot> {
    let plain = strip_ansi(line);
    let field = |name: &str| -> Option<f64> {
        let key = format!("{name}=");
        plain.split_whitespace().find_map(|w| w.strip_prefix(&key)).and_then(|v| v.parse().ok())
    };
    Some(Snapshot {
        bytes: field("bytes")? as u64,
        encode_ms: field("encode_ms")?,
        total_ms: field("total_ms")?,
    })
}

/// Drops terminal colour sequences (`ESC [ … m`).
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_plain_and_a_coloured_line() {
        let plain = "2026-11-24T22:00:00Z  INFO sluice_dispatcher::raft::state_machine: \
                     snapshot saved index=Some(1000) bytes=4096 encode_ms=1.5 total_ms=3.25";
        let s = parse(plain).unwrap();
        assert_eq!((s.bytes, s.encode_ms, s.total_ms), (4096, 1.5, 3.25));
        let coloured = "\u{1b}[32m INFO\u{1b}[0m snapshot saved \u{1b}[3mbytes\u{1b}[0m=7 \
                        \u{1b}[3mencode_ms\u{1b}[0m=0.5 \u{1b}[3mtotal_ms\u{1b}[0m=1";
        assert_eq!(parse(coloured).unwrap().bytes, 7);
        assert!(parse("snapshot saved index=None").is_none());
    }
}
