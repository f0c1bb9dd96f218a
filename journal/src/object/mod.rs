//! The object-store backend: the journal as immutable objects in S3, GCS, a local directory
//! (`file://`) or process memory (`memory://`).
//!
//! Why this shape: object stores have no append and no rename, but they do have atomic
//! create-if-absent PUTs. So every durable write is one new object named by the next sequence
//! number, and the log is the fold of all of them:
//!
//! ```text
//!   <prefix>/log/<seq:020>.seg     Claim | Entry.. | Truncate | Purge | VoteCommit | SnapshotCommit
//!   <prefix>/vote/<seq:020>        one VoteBody, made current by the VoteCommit in log/<seq>.seg
//!   <prefix>/snapshot/<seq:020>    one SnapshotBody (meta + data), made current likewise
//! ```
//! (record format in `segment`). **Fencing**: every write, including votes and snapshots,
//! ends with a create-if-absent PUT of `log/<seq>.seg`. A new writer claims the next seq at
//! open (a `Claim` segment), so a stale writer's next write finds its name taken and gets
//! `Fenced`, forever. A vote or snapshot object only counts once its commit segment exists,
//! so a fenced writer's late vote object is ignored. **Recovery**: see `recover`.
//! **Compaction**: after a purge, the oldest segments that the latest purge made dead are
//! deleted, so restart time follows the unpurged log, not the history.
//!
//! A write whose outcome is unknown (it failed after retries) poisons the handle: later writes
//! are refused until the journal is reopened, which recovers what is durable.

mod compact;
pub(crate) mod recover;
mod remote;
pub(crate) mod segment;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex as StdMutex};

use bytes::Bytes;
use tokio::sync::Mutex;

use self::recover::{log_name, SegInfo, View};
use self::remote::{Put, Remote};
use self::segment::{Kind, Record};
use crate::location::Location;
use crate::{Journal, JournalError, LogState, OpenOptions, Recovery};

/// How many times `open` re-lists after losing the race for its claim.
const CLAIM_ATTEMPTS: u32 = 5;

pub(crate) struct ObjectJournal {
    remote: Arc<Remote>,
    location: String,
    /// Random id written into every object header (see `segment`).
    writer_id: u64,
    /// The durable state. A std mutex: held for short sections, never across an `.await`.
    view: StdMutex<View>,
    /// Serializes writes. Shared with background cleanup, which updates `segments`.
    writer: Arc<Mutex<Writer>>,
    cleaner: compact::Cleaner,
    /// Told how long each PUT of a write took.
    timing: crate::observe::Timing,
}

struct Writer {
    next_seq: u64,
    segments: BTreeMap<u64, SegInfo>,
    /// Set once this handle must not write any more.
    broken: Option<Broken>,
}

enum Broken {
    Fenced(String),
    Poisoned(String),
}

impl ObjectJournal {
    pub(crate) async fn open(
        loc: Location,
        opts: &OpenOptions,
    ) -> Result<(ObjectJournal, Recovery), JournalError> {
        let remote = Arc::new(Remote::build(&loc, opts)?);
        let location = loc.display();
        let writer_id = random_id();
        if opts.read_only {
            let loaded = recover::load(&remote).await?;
            let recovery = Recovery { entries: loaded.view.entries.len() as u64 };
            let broken = Some(Broken::Poisoned("opened read-only".into()));
            let writer = Writer { next_seq: loaded.next_seq, segments: loaded.segments, broken };
            let timing = crate::observe::Timing(opts.observer.clone());
            let journal =
                ObjectJournal::new(remote, location, writer_id, loaded.view, writer, timing);
            return Ok((journal, recovery));
        }
        for attempt in 1..=CLAIM_ATTEMPTS {
            let mut loaded = recover::load(&remote).await?;
            let seq = loaded.next_seq;
            let claim = [Record::new(Kind::Claim, 0, Bytes::new())];
            let bytes = segment::encode(seq, writer_id, &claim).expect("small record");
            if put_checked(&remote, &log_name(seq), bytes).await? == Put::Exists {
                tracing::info!(journal = %location, seq, attempt, "lost the claim race, re-listing");
                continue;
            }
            loaded.segments.insert(seq, SegInfo::default());
            let recovery = Recovery { entries: loaded.view.entries.len() as u64 };
            let writer = Writer { next_seq: seq + 1, segments: loaded.segments, broken: None };
            let timing = crate::observe::Timing(opts.observer.clone());
            let journal =
                ObjectJournal::new(remote, location, writer_id, loaded.view, writer, timing);
            tracing::info!(journal = %journal.location, claim = seq, entries = recovery.entries,
                state = ?journal.marks(), "journal opened");
            journal.finish_interrupted_cleanup().await;
            return Ok((journal, recovery));
        }
        Err(JournalError::Fenced {
            location,
            detail: format!(
                "another writer kept taking the next sequence number while this one opened \
                 ({CLAIM_ATTEMPTS} attempts)"
            ),
        })
    }

    fn new(
        remote: Arc<Remote>,
        location: String,
        writer_id: u64,
        view: View,
        writer: Writer,
        timing: crate::observe::Timing,
    ) -> ObjectJournal {
        ObjectJournal {
            cleaner: compact::Cleaner {
                remote: remote.clone(),
                location: location.clone(),
                serial: Arc::new(Mutex::new(())),
            },
            remote,
            location,
            writer_id,
            view: StdMutex::new(view),
            writer: Arc::new(Mutex::new(writer)),
            timing,
        }
    }

    fn view(&self) -> std::sync::MutexGuard<'_, View> {
        self.view.lock().expect("view lock")
    }

    fn marks(&self) -> LogState {
        self.view().state()
    }

    /// Writes `records` as the next segment, then applies them to the view.
    async fn write_log(&self, w: &mut Writer, records: Vec<Record>) -> Result<(), JournalError> {
        let seq = w.next_seq;
        let bytes = self.encode(seq, &records)?;
        self.put(w, &log_name(seq), bytes).await?;
        w.next_seq += 1;
        w.segments.insert(seq, SegInfo::of(&records, false));
        let mut view = self.view();
        for record in &records {
            view.apply(record).expect("the writer only writes log records");
        }
        Ok(())
    }

    /// Refuses if broken; a create-if-absent PUT that marks the handle fenced or poisoned.
    async fn put(&self, w: &mut Writer, rel: &str, bytes: Bytes) -> Result<(), JournalError> {
        match &w.broken {
            Some(Broken::Fenced(detail)) => return Err(self.fenced(detail.clone())),
            Some(Broken::Poisoned(why)) => {
                return Err(JournalError::io(&self.location, false, why.clone()))
            }
            None => {}
        }
        let start = std::time::Instant::now();
        let put = put_checked(&self.remote, rel, bytes).await;
        self.timing.done(start);
        match put {
            Ok(Put::Created) => Ok(()),
            Ok(Put::Exists) => {
                let detail =
                    format!("{} already exists: a newer writer claimed it", self.remote.url(rel));
                w.broken = Some(Broken::Fenced(detail.clone()));
                Err(self.fenced(detail))
            }
            Err(e) => {
                w.broken = Some(Broken::Poisoned(format!(
                    "an earlier write failed ({e}); its outcome is unknown: reopen the journal"
                )));
                Err(e)
            }
        }
    }

    fn fenced(&self, detail: String) -> JournalError {
        JournalError::Fenced { location: self.location.clone(), detail }
    }

    fn encode(&self, seq: u64, records: &[Record]) -> Result<Bytes, JournalError> {
        segment::encode(seq, self.writer_id, records).map_err(JournalError::InvalidArgument)
    }

    /// Writes a vote or snapshot object at the next seq, then its commit segment.
    /// `then` updates the view once committed, still under the writer lock.
    async fn save_body(
        &self,
        dir: &str,
        body: Record,
        commit: Kind,
        then: impl FnOnce(&mut View),
    ) -> Result<u64, JournalError> {
        let mut w = self.writer.lock().await;
        let seq = w.next_seq;
        let bytes = self.encode(seq, &[body])?;
        let fingerprint = segment::fingerprint(&bytes);
        self.put(&mut w, &format!("{dir}/{seq:020}"), bytes).await?;
        self.write_log(&mut w, vec![Record::new(commit, seq, fingerprint)]).await?;
        then(&mut self.view());
        Ok(seq)
    }

    /// At open, inline: deletes what a crash kept earlier cleanups from deleting.
    async fn finish_interrupted_cleanup(&self) {
        let mut w = self.writer.lock().await;
        let plan = self.compaction_plan(&w);
        for seq in self.cleaner.delete_segments(plan).await {
            w.segments.remove(&seq);
        }
        drop(w);
        // Bind first: a view guard must not live across an await (futures must be Send).
        let vote = self.view().vote_ref.as_ref().map(|r| r.0);
        let snapshot = self.view().snapshot_ref.as_ref().map(|r| r.0);
        self.cleaner.delete_older("vote", vote).await;
        self.cleaner.delete_older("snapshot", snapshot).await;
    }

    /// What the latest purge made dead (see `compact`).
    fn compaction_plan(&self, w: &Writer) -> compact::Plan {
        let view = self.view();
        let Some((upto, _)) = view.purged else { return compact::Plan::default() };
        let keep = [view.vote_ref.as_ref().map(|r| r.0), view.snapshot_ref.as_ref().map(|r| r.0)];
        compact::plan(&w.segments, upto, keep)
    }

    /// Runs `work` in the background, then forgets the segments it deleted.
    fn spawn_cleanup<F>(&self, work: F)
    where
        F: std::future::Future<Output = Vec<u64>> + Send + 'static,
    {
        let writer = self.writer.clone();
        tokio::spawn(async move {
            let deleted = work.await;
            let mut w = writer.lock().await;
            for seq in deleted {
                w.segments.remove(&seq);
            }
        });
    }
}

/// The store as the journal at `loc` would use it (for `testing::object_store_for`).
#[cfg(feature = "testing")]
pub(crate) fn remote_for_tests(loc: &Location, opts: &OpenOptions) -> Result<Remote, JournalError> {
    Remote::build(loc, opts)
}

/// A create-if-absent PUT where "already exists" with our own bytes (an earlier attempt of
/// this PUT that landed although it timed out) counts as created.
async fn put_checked(remote: &Remote, rel: &str, bytes: Bytes) -> Result<Put, JournalError> {
    match remote.put_create(rel, bytes.clone()).await? {
        Put::Created => Ok(Put::Created),
        Put::Exists => match remote.get(rel).await? {
            Some(existing) if existing == bytes => Ok(Put::Created),
            _ => Ok(Put::Exists),
        },
    }
}

#[async_trait::async_trait]
impl Journal for ObjectJournal {
    async fn state(&self) -> Result<LogState, JournalError> {
        Ok(self.marks())
    }

    async fn append(&self, entries: Vec<(u64, Bytes)>) -> Result<(), JournalError> {
        if entries.is_empty() {
            return Ok(());
        }
        let mut w = self.writer.lock().await;
        self.marks().check_append(&entries)?;
        let records = entries.into_iter().map(|(i, p)| Record::new(Kind::Entry, i, p)).collect();
        self.write_log(&mut w, records).await
    }

    async fn read(&self, from: u64, to: u64) -> Result<Vec<(u64, Bytes)>, JournalError> {
        if from >= to {
            return Ok(Vec::new());
        }
        Ok(self.view().entries.range(from..to).map(|(i, p)| (*i, p.clone())).collect())
    }

    async fn truncate(&self, from: u64) -> Result<(), JournalError> {
        let mut w = self.writer.lock().await;
        let state = self.marks();
        state.check_truncate(from)?;
        match state.last_index {
            Some(last) if from <= last => {}
            _ => return Ok(()),
        }
        self.write_log(&mut w, vec![Record::new(Kind::Truncate, from, Bytes::new())]).await
    }

    async fn purge(&self, upto: u64, marker: Bytes) -> Result<(), JournalError> {
        let mut w = self.writer.lock().await;
        self.marks().check_purge(upto)?;
        self.write_log(&mut w, vec![Record::new(Kind::Purge, upto, marker)]).await?;
        let plan = self.compaction_plan(&w);
        drop(w);
        let cleaner = self.cleaner.clone();
        self.spawn_cleanup(async move { cleaner.delete_segments(plan).await });
        Ok(())
    }

    async fn save_vote(&self, vote: Bytes) -> Result<(), JournalError> {
        let body = Record::new(Kind::VoteBody, 0, vote.clone());
        let seq = self.save_body("vote", body, Kind::VoteCommit, |v| v.vote = Some(vote)).await?;
        let cleaner = self.cleaner.clone();
        tokio::spawn(async move { cleaner.delete_older("vote", Some(seq)).await });
        Ok(())
    }

    async fn read_vote(&self) -> Result<Option<Bytes>, JournalError> {
        Ok(self.view().vote.clone())
    }

    async fn save_snapshot(&self, meta: Bytes, data: Bytes) -> Result<(), JournalError> {
        let mut payload = Vec::with_capacity(meta.len() + data.len());
        payload.extend_from_slice(&meta);
        payload.extend_from_slice(&data);
        let body = Record::new(Kind::SnapshotBody, meta.len() as u64, payload);
        let seq = self.save_body("snapshot", body, Kind::SnapshotCommit, |_| {}).await?;
        let cleaner = self.cleaner.clone();
        tokio::spawn(async move { cleaner.delete_older("snapshot", Some(seq)).await });
        Ok(())
    }

    async fn read_snapshot(&self) -> Result<Option<(Bytes, Bytes)>, JournalError> {
        // A concurrent save may delete the object we were about to read: then read the new one.
        for _ in 0..3 {
            let Some((seq, fingerprint)) = self.view().snapshot_ref.clone() else {
                return Ok(None);
            };
            let rel = format!("snapshot/{seq:020}");
            let found =
                recover::read_body_opt(&self.remote, &rel, seq, &fingerprint, Kind::SnapshotBody)
                    .await?;
            let Some(record) = found else { continue };
            let meta_len = record.index as usize;
            if meta_len > record.payload.len() {
                return Err(JournalError::Corrupt {
                    location: self.remote.url(&rel),
                    offset: segment::HEADER_LEN as u64,
                    reason: format!("meta length {meta_len} exceeds the record"),
                });
            }
            let (meta, data) = (record.payload.slice(..meta_len), record.payload.slice(meta_len..));
            return Ok(Some((meta, data)));
        }
        let seq = self.view().snapshot_ref.as_ref().map_or(0, |r| r.0);
        Err(JournalError::Corrupt {
            location: self.remote.url(&format!("snapshot/{seq:020}")),
            offset: 0,
            reason: format!("committed by {} but missing", log_name(seq)),
        })
    }

    fn location(&self) -> String {
        self.location.clone()
    }
}

/// A random id without a dependency: std's per-process random hasher keys, time and pid.
fn random_id() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A create-if-absent PUT retried after a timeout finds its own earlier attempt: that is
    /// success, not fencing. Someone else's bytes under the name are fencing.
    #[tokio::test]
    async fn a_retried_put_that_finds_its_own_bytes_succeeded() {
        let loc = Location::Memory("put-checked".into());
        let remote = Remote::build(&loc, &OpenOptions::default()).unwrap();
        let mine = segment::encode(1, 11, &[Record::new(Kind::Claim, 0, Bytes::new())]).unwrap();
        let theirs = segment::encode(1, 22, &[Record::new(Kind::Claim, 0, Bytes::new())]).unwrap();
        assert_eq!(remote.put_create("log/x", mine.clone()).await.unwrap(), Put::Created);
        assert_eq!(put_checked(&remote, "log/x", mine).await.unwrap(), Put::Created);
        assert_eq!(put_checked(&remote, "log/x", theirs).await.unwrap(), Put::Exists);
    }
}
