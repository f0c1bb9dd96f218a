//! Recovery for the object-store backend: list `log/`, read every segment in seq order, fold
//! their records into a [`View`], and decide what a bad record means.
//!
//! Every object is written by one atomic PUT (on `file://`: a staged, fsynced file linked into
//! place), so no acknowledged object can be torn: a record that fails its framing or checksum
//! is corruption wherever it is, the end of the last segment included: refuse to start,
//! naming the object and the byte offset, rather than drop an acknowledged entry.
//!
//! Journals written by earlier builds may hold a cut made under the old rule (a failure at
//! the end of the last segment was taken for a torn write): a Claim record acknowledging
//! `(seq, valid_len)`. Such an acknowledged cut is still honoured (those builds cut there and
//! went on writing after it); no new one is made.

use std::collections::{BTreeMap, HashSet};

use bytes::Bytes;
use futures::{StreamExt, TryStreamExt};

use super::remote::Remote;
use super::segment::{self, Decoded, Kind, Record, UnknownVersion};
use crate::{JournalError, LogState};

/// What the log says, as the fold of all segments. Also maintained live by the writer, by
/// applying the same records it just made durable, so it always equals what a recovery
/// would compute.
#[derive(Debug, Default)]
pub(crate) struct View {
    pub entries: BTreeMap<u64, Bytes>,
    pub purged: Option<(u64, Bytes)>,
    /// The current vote object's seq and fingerprint, from the last `VoteCommit`.
    pub vote_ref: Option<(u64, Bytes)>,
    /// The current vote (loaded from `vote/<seq>` at open, then as saved).
    pub vote: Option<Bytes>,
    /// The current snapshot object's seq and fingerprint, from the last `SnapshotCommit`.
    pub snapshot_ref: Option<(u64, Bytes)>,
}

impl View {
    pub(crate) fn state(&self) -> LogState {
        LogState {
            purged_index: self.purged.as_ref().map(|(i, _)| *i),
            purged_marker: self.purged.as_ref().map(|(_, m)| m.clone()),
            first_index: self.entries.keys().next().copied(),
            last_index: self.entries.keys().next_back().copied(),
        }
    }

    /// Applies one log record; `Err` if a log segment holds a record that does not belong there.
    pub(crate) fn apply(&mut self, record: &Record) -> Result<(), String> {
        match record.kind {
            Kind::Entry => {
                self.entries.insert(record.index, record.payload.clone());
            }
            Kind::Truncate => drop(self.entries.split_off(&record.index)),
            Kind::Purge => {
                self.entries = self.entries.split_off(&record.index.saturating_add(1));
                self.purged = Some((record.index, record.payload.clone()));
            }
            Kind::Claim => {}
            Kind::VoteCommit | Kind::SnapshotCommit if record.payload.len() != 12 => {
                return Err(format!(
                    "a {:?} record of {} bytes",
                    record.kind,
                    record.payload.len()
                ));
            }
            Kind::VoteCommit => self.vote_ref = Some((record.index, record.payload.clone())),
            Kind::SnapshotCommit => {
                self.snapshot_ref = Some((record.index, record.payload.clone()));
            }
            Kind::VoteBody | Kind::SnapshotBody => {
                return Err(format!("a {:?} record inside a log segment", record.kind));
            }
        }
        Ok(())
    }
}

/// What compaction needs to know about a segment.
#[derive(Clone, Debug, Default)]
pub(crate) struct SegInfo {
    pub max_entry: Option<u64>,
    pub has_purge: bool,
    /// Some records failed to decode (an acknowledged or reported torn tail).
    pub failed: bool,
}

impl SegInfo {
    pub(crate) fn of(records: &[Record], failed: bool) -> SegInfo {
        SegInfo {
            max_entry: records.iter().filter(|r| r.kind == Kind::Entry).map(|r| r.index).max(),
            has_purge: records.iter().any(|r| r.kind == Kind::Purge),
            failed,
        }
    }
}

/// Everything recovery found.
#[derive(Debug, Default)]
pub(crate) struct Loaded {
    pub view: View,
    pub segments: BTreeMap<u64, SegInfo>,
    pub next_seq: u64,
}

pub(crate) fn log_name(seq: u64) -> String {
    format!("log/{seq:020}.seg")
}

/// Parses "00000000000000000042.seg" (with `suffix` ".seg") or "00000000000000000042" ("").
pub(crate) fn parse_seq(name: &str, suffix: &str) -> Option<u64> {
    let digits = name.strip_suffix(suffix)?;
    (digits.len() == 20 && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten()
}

/// Lists and folds the log, and loads the current vote.
pub(crate) async fn load(remote: &Remote) -> Result<Loaded, JournalError> {
    let mut seqs = Vec::new();
    for name in remote.list("log").await? {
        match parse_seq(&name, ".seg") {
            Some(seq) => seqs.push(seq),
            None => {
                tracing::warn!(object = %remote.url(&format!("log/{name}")), "ignoring a stray object")
            }
        }
    }
    seqs.sort_unstable();
    let fetched: Vec<(u64, Option<Bytes>)> = futures::stream::iter(seqs.iter().copied())
        .map(|seq| async move { remote.get(&log_name(seq)).await.map(|b| (seq, b)) })
        .buffered(16)
        .try_collect()
        .await?;

    let mut decoded: Vec<(u64, Decoded)> = Vec::with_capacity(fetched.len());
    for (seq, bytes) in fetched {
        // Missing: deleted by a compaction since we listed (only dead segments are deleted).
        let Some(bytes) = bytes else { continue };
        let d = segment::decode(&bytes, seq).map_err(|UnknownVersion(found)| {
            JournalError::UnsupportedVersion {
                location: remote.url(&log_name(seq)),
                found,
                supported: segment::FORMAT_VERSION,
            }
        })?;
        decoded.push((seq, d));
    }

    let acked: HashSet<(u64, u64)> = decoded
        .iter()
        .flat_map(|(_, d)| d.records.iter())
        .filter(|r| r.kind == Kind::Claim)
        .filter_map(|r| segment::parse_torn_ack(&r.payload))
        .collect();
    let last_seq = seqs.last().copied();
    let mut loaded = Loaded { next_seq: last_seq.map_or(1, |s| s + 1), ..Loaded::default() };
    for (seq, d) in &decoded {
        let url = remote.url(&log_name(*seq));
        if let Some((offset, reason)) = &d.failure {
            if acked.contains(&(*seq, *offset)) {
                tracing::debug!(object = %url, offset, "a cut acknowledged by an earlier build");
            } else {
                let reason = format!(
                    "{reason} at byte {offset} (objects are written whole, so this is damage, \
                     not a torn write)"
                );
                return Err(JournalError::Corrupt { location: url, offset: *offset, reason });
            }
        }
        for record in &d.records {
            loaded.view.apply(record).map_err(|reason| JournalError::Corrupt {
                location: url.clone(),
                offset: 0,
                reason,
            })?;
        }
        loaded.segments.insert(*seq, SegInfo::of(&d.records, d.failure.is_some()));
    }

    if let Some((seq, fingerprint)) = loaded.view.vote_ref.clone() {
        let rel = format!("vote/{seq:020}");
        let body = read_body(remote, &rel, seq, &fingerprint, Kind::VoteBody).await?;
        loaded.view.vote = Some(body.payload);
    }
    if let Some((seq, fingerprint)) = &loaded.view.snapshot_ref {
        // The snapshot may be large: check presence and size now, its checksum when read.
        let rel = format!("snapshot/{seq:020}");
        let expected = u64::from_le_bytes(fingerprint[4..12].try_into().expect("fingerprint"));
        match remote.size(&rel).await? {
            Some(size) if size == expected => {}
            found => {
                return Err(JournalError::Corrupt {
                    location: remote.url(&rel),
                    offset: 0,
                    reason: format!(
                        "{} commits a {expected}-byte object, found {found:?}",
                        log_name(*seq)
                    ),
                })
            }
        }
    }
    Ok(loaded)
}

/// Reads the vote or snapshot object `rel` committed with `fingerprint`, verified.
/// `Ok(None)` only via [`read_body_opt`]; here a missing object is corruption.
pub(crate) async fn read_body(
    remote: &Remote,
    rel: &str,
    seq: u64,
    fingerprint: &Bytes,
    kind: Kind,
) -> Result<Record, JournalError> {
    match read_body_opt(remote, rel, seq, fingerprint, kind).await? {
        Some(record) => Ok(record),
        None => Err(JournalError::Corrupt {
            location: remote.url(rel),
            offset: 0,
            reason: format!("committed by {} but missing", log_name(seq)),
        }),
    }
}

/// Like [`read_body`], but `None` when the object does not exist.
pub(crate) async fn read_body_opt(
    remote: &Remote,
    rel: &str,
    seq: u64,
    fingerprint: &Bytes,
    kind: Kind,
) -> Result<Option<Record>, JournalError> {
    let Some(bytes) = remote.get(rel).await? else { return Ok(None) };
    let corrupt = |offset: u64, reason: String| JournalError::Corrupt {
        location: remote.url(rel),
        offset,
        reason,
    };
    if segment::fingerprint(&bytes) != *fingerprint {
        return Err(corrupt(0, format!("does not match the checksum in {}", log_name(seq))));
    }
    let d = segment::decode(&bytes, seq).map_err(|UnknownVersion(found)| {
        JournalError::UnsupportedVersion {
            location: remote.url(rel),
            found,
            supported: segment::FORMAT_VERSION,
        }
    })?;
    if let Some((offset, reason)) = d.failure {
        return Err(corrupt(offset, reason));
    }
    match d.records.into_iter().next() {
        Some(record) if record.kind == kind => Ok(Some(record)),
        other => Err(corrupt(
            segment::HEADER_LEN as u64,
            format!("expected one {kind:?} record, found {:?}", other.map(|r| r.kind)),
        )),
    }
}
