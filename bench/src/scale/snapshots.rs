//! Snapshot sizes and times, read from a dispatcher's log: the state machine logs
//! `snapshot saved … bytes=B lock_ms=L encode_ms=E total_ms=T` for each snapshot
//! it builds (`dispatcher/src/raft/state_machine.rs`): `lock_ms` is how long it
//! held the state's read lock (encoding it; applying waited that long),
//! `encode_ms` includes it. A line without `lock_ms` (an older build) encoded
//! under the lock too: its lock time is its encode time.

use std::path::Path;

use serde::Serialize;

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Snapshot {
    pub bytes: u64,
    /// The state's read lock held (applying waited this long).
    pub lock_ms: f64,
    /// Copying and encoding the state.
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
    let encode_ms = field("encode_ms")?;
    Some(Snapshot {
        bytes: field("bytes")? as u64,
        lock_ms: field("lock_ms").unwrap_or(encode_ms),
        encode_ms,
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
                     snapshot saved index=Some(1000) bytes=4096 lock_ms=0.5 encode_ms=1.5 \
                     total_ms=3.25";
        let s = parse(plain).unwrap();
        assert_eq!((s.bytes, s.lock_ms, s.encode_ms, s.total_ms), (4096, 0.5, 1.5, 3.25));
        let coloured = "\u{1b}[32m INFO\u{1b}[0m snapshot saved \u{1b}[3mbytes\u{1b}[0m=7 \
                        \u{1b}[3mencode_ms\u{1b}[0m=0.5 \u{1b}[3mtotal_ms\u{1b}[0m=1";
        let s = parse(coloured).unwrap();
        assert_eq!((s.bytes, s.lock_ms), (7, 0.5), "no lock_ms: encoded under the lock");
        assert!(parse("snapshot saved index=None").is_none());
    }
}
