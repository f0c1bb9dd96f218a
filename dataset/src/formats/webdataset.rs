//! WebDataset shards: tar files whose members are grouped into samples by key.
//!
//! ```text
//!   000123.jpg │ 000123.cls │ 000123.json │ 000124.jpg │ 000124.cls │ …
//!   └──────────── sample 0 ─────────────┘ └────── sample 1 ──────┘
//! ```
//!
//! As webdataset does: a member's *key* is its name up to the first dot after
//! the last `/` (directories included: `train/000123`), its *extension* what
//! follows, lowercased; consecutive members with one key are one sample.
//! Members that are not regular files, and files whose last component has no
//! key or no extension (`README`, `.hidden`, `._x.jpg`), belong to no sample
//! and are passed over, as webdataset does.
//!
//! A sample is an element with named components: `__key__` (a string scalar)
//! first, then one bytes scalar per extension in name order; each member's
//! bytes are read straight into the tensor's buffer (after [`ITEM_PREFIX`]
//! spare bytes), so they are copied once. One sample is held at a time: a shard
//! is streamed ([`TarStream`]), never held whole.
//!
//! **Bounds and bad input.** A sample's members together hold at most
//! [`MAX_RECORD_BYTES`] (the per-record bound of the file sources), a sample
//! has at most [`MAX_SAMPLE_MEMBERS`] members, a name (and so a key) at most
//! [`MAX_NAME_BYTES`]. A sample over a bound, with a repeated extension, or
//! whose key already had a sample earlier in the shard (its members are not
//! consecutive) is a [`DatasetError::BadRecord`] naming the shard, the sample
//! and the member: the framing is intact, so the shard goes on past it (the
//! bad members' data is skipped, not read) and `ignore_errors` may skip it.
//! The sample still takes its index, so origins do not depend on whether
//! samples were skipped. A broken framing (a corrupt header, a file cut short)
//! is a [`DatasetError::Corrupt`] and ends the shard. A sample is yielded once
//! its end is seen (the next key's header, or the end of the shard), so one
//! whose end lies past a broken framing is not yielded: it may lack members.
//!
//! Repeated keys are found through a set of 64-bit key hashes, at most
//! [`MAX_TRACKED_KEYS`] per shard (about 2 MiB); past that a shard's later keys
//! are not checked (a warning says so).

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io::Read;
use std::sync::Arc;

use super::tar_stream::{Fatal, Member, TarStream};
pub use super::tar_stream::{MAX_NAME_BYTES, MAX_PAX_BYTES};
pub use super::tfrecord::MAX_RECORD_BYTES;
use crate::error::DatasetError;
use crate::tensor::{DType, Element, Tensor, ITEM_PREFIX};

/// The most members one sample may have.
pub const MAX_SAMPLE_MEMBERS: usize = 64;
/// The most keys of one shard remembered to find non-consecutive members.
pub const MAX_TRACKED_KEYS: usize = 1 << 17;
/// The component holding the sample's key, as webdataset names it.
pub const KEY: &str = "__key__";

const FORMAT: &str = "WebDataset";
/// A member buffer's first allocation; it grows as bytes arrive.
const FIRST_ALLOCATION: u64 = 1 << 20;

/// What a member is to the grouping.
enum Part {
    /// Not part of any sample.
    Skip,
    /// Its name is over [`MAX_NAME_BYTES`].
    LongName(u64),
    Named {
        key: Vec<u8>,
        ext: String,
    },
}

fn part(member: &Member) -> Part {
    if !member.is_file {
        return Part::Skip;
    }
    let name = match &member.name {
        Ok(name) => name,
        Err(len) => return Part::LongName(*len),
    };
    let base = name.iter().rposition(|b| *b == b'/').map_or(0, |i| i + 1);
    match name[base..].iter().position(|b| *b == b'.') {
        Some(dot) if dot > 0 && base + dot + 1 < name.len() => Part::Named {
            key: name[..base + dot].to_vec(),
            ext: String::from_utf8_lossy(&name[base + dot + 1..]).to_lowercase(),
        },
        _ => Part::Skip,
    }
}

/// The keys of a shard seen so far, as hashes.
#[derive(Default)]
struct KeySet {
    seen: HashSet<u64>,
    full: bool,
}

impl KeySet {
    /// Adds `key`; `false` if it was seen before.
    fn insert(&mut self, key: &[u8], file: &str) -> bool {
        if self.full {
            return true;
        }
        if self.seen.len() >= MAX_TRACKED_KEYS {
            self.full = true;
            self.seen = HashSet::new();
            tracing::warn!(
                file,
                "a WebDataset shard of more than {MAX_TRACKED_KEYS} samples: its later keys \
                 are not checked for non-consecutive members (MAX_TRACKED_KEYS)"
            );
            return true;
        }
        let mut h = DefaultHasher::new();
        key.hash(&mut h);
        self.seen.insert(h.finish())
    }
}

/// A sample being gathered.
struct Gathering {
    key: Vec<u8>,
    index: u64,
    /// (extension, framed bytes), in shard order.
    parts: Vec<(String, Vec<u8>)>,
    bytes: u64,
    /// The first problem found: (member offset, message).
    bad: Option<(u64, String)>,
}

/// Reads the samples of one WebDataset shard; `file` names it in errors.
pub struct SampleReader<R: Read> {
    tar: TarStream<R>,
    file: String,
    /// A member whose header was read (its key differs from the previous
    /// sample's) and whose data was not.
    pending: Option<Member>,
    keys: KeySet,
    /// Samples started so far (the index of the next one).
    samples: u64,
    /// The last member seen, for messages about what follows it.
    last: Option<String>,
    /// The names of the last sample made, shared while samples look alike.
    names: Option<Arc<[String]>>,
    done: bool,
}

impl<R: Read> SampleReader<R> {
    pub fn new(input: R, file: impl Into<String>) -> Self {
        SampleReader {
            tar: TarStream::new(input),
            file: file.into(),
            pending: None,
            keys: KeySet::default(),
            samples: 0,
            last: None,
            names: None,
            done: false,
        }
    }

    fn member(&mut self) -> Result<Option<Member>, Fatal> {
        if let Some(m) = self.pending.take() {
            return Ok(Some(m));
        }
        let m = self.tar.next_member()?;
        if let Some(m) = &m {
            self.last = Some(m.display_name());
        }
        Ok(m)
    }

    /// The next sample: `Ok(Err)` for a bad one (the shard goes on), `Err` for
    /// a broken framing.
    fn next_sample(&mut self) -> Result<Option<Result<Element, DatasetError>>, Fatal> {
        let (first, key, ext) = loop {
            let Some(m) = self.member()? else { return Ok(None) };
            match part(&m) {
                Part::Skip => {
                    tracing::debug!(file = %self.file, member = %m.display_name(), "not part of a sample")
                }
                Part::LongName(len) => {
                    let index = self.samples;
                    self.samples += 1;
                    let message = format!(
                        "a member whose name is {len} bytes, over the limit of {MAX_NAME_BYTES} \
                         (MAX_NAME_BYTES); shorten the member names of the shard"
                    );
                    return Ok(Some(Err(self.bad(index, None, m.offset, message))));
                }
                Part::Named { key, ext } => break (m, key, ext),
            }
        };
        let index = self.samples;
        self.samples += 1;
        let mut sample = Gathering { key, index, parts: Vec::new(), bytes: 0, bad: None };
        if !self.keys.insert(&sample.key, &self.file) {
            sample.bad = Some((
                first.offset,
                format!(
                    "member `{}`: an earlier sample of this shard has the same key, so its \
                     members are not consecutive; write each sample's members together (as \
                     webdataset's writers do)",
                    first.display_name()
                ),
            ));
        }
        self.add(&mut sample, &first, ext)?;
        while let Some(m) = self.tar.next_member()? {
            self.last = Some(m.display_name());
            match part(&m) {
                Part::Skip => {}
                Part::Named { key, ext } if key == sample.key => self.add(&mut sample, &m, ext)?,
                _ => {
                    self.pending = Some(m);
                    break;
                }
            }
        }
        Ok(Some(self.finish(sample)))
    }

    /// Reads member `m` into `sample`, or notes why the sample is bad (then
    /// its data is skipped by the next header read).
    fn add(&mut self, sample: &mut Gathering, m: &Member, ext: String) -> Result<(), Fatal> {
        if sample.bad.is_some() {
            return Ok(());
        }
        let name = m.display_name();
        let problem = if sample.parts.len() >= MAX_SAMPLE_MEMBERS {
            Some(format!(
                "member `{name}`: more than {MAX_SAMPLE_MEMBERS} members in one sample \
                 (MAX_SAMPLE_MEMBERS); is the key right? (the key is the name up to the first \
                 dot of its last component)"
            ))
        } else if ext == KEY || sample.parts.iter().any(|(e, _)| *e == ext) {
            Some(format!(
                "member `{name}`: a second `{ext}` in one sample; give each member of a \
                 sample its own extension"
            ))
        } else if m.size > MAX_RECORD_BYTES - sample.bytes {
            Some(format!(
                "member `{name}` of {} bytes makes the sample {} bytes, over the limit of \
                 {MAX_RECORD_BYTES} (MAX_RECORD_BYTES); re-shard with smaller members, or \
                 skip such samples with ignore_errors",
                m.size,
                sample.bytes.saturating_add(m.size)
            ))
        } else {
            None
        };
        if let Some(message) = problem {
            sample.parts = Vec::new(); // free what was read
            sample.bad = Some((m.offset, message));
            return Ok(());
        }
        let first = ITEM_PREFIX + m.size.min(FIRST_ALLOCATION) as usize;
        let mut data = Vec::with_capacity(first);
        data.resize(ITEM_PREFIX, 0);
        self.tar.read_data(m, &mut data)?;
        sample.bytes += m.size;
        sample.parts.push((ext, data));
        Ok(())
    }

    fn finish(&mut self, sample: Gathering) -> Result<Element, DatasetError> {
        let Gathering { key, index, mut parts, bad, .. } = sample;
        if let Some((offset, message)) = bad {
            return Err(self.bad(index, Some(&key), offset, message));
        }
        parts.sort_by(|a, b| a.0.cmp(&b.0));
        let same = self.names.as_ref().is_some_and(|n| {
            n.len() == parts.len() + 1 && n.iter().skip(1).zip(&parts).all(|(a, (b, _))| a == b)
        });
        if !same {
            let names: Vec<String> =
                std::iter::once(KEY.to_string()).chain(parts.iter().map(|p| p.0.clone())).collect();
            self.names = Some(names.into());
        }
        let names = self.names.clone().unwrap_or_else(|| Arc::from(Vec::new()));
        let mut framed_key = vec![0u8; ITEM_PREFIX];
        framed_key.extend_from_slice(&key);
        let framed = std::iter::once((DType::String, framed_key))
            .chain(parts.into_iter().map(|(_, data)| (DType::Bytes, data)));
        let components = framed
            .map(|(dtype, data)| {
                Tensor::scalar_item_framed(dtype, data).ok_or_else(|| {
                    DatasetError::io(
                        &self.file,
                        "an item longer than 4 GiB cannot be a tensor item",
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Element::named(names, components)
    }

    /// A bad sample: the error that `ignore_errors` may skip.
    fn bad(&self, index: u64, key: Option<&[u8]>, offset: u64, message: String) -> DatasetError {
        let key = key.map_or(String::new(), |k| format!(" (key `{}`)", String::from_utf8_lossy(k)));
        DatasetError::BadRecord {
            format: FORMAT,
            file: self.file.clone(),
            offset,
            message: format!("sample {index}{key}, {message}"),
        }
    }

    fn corrupt(&self, fatal: Fatal) -> DatasetError {
        let after = match &self.last {
            Some(name) => format!(" (the last member read was `{name}`)"),
            None => String::new(),
        };
        DatasetError::Corrupt {
            format: FORMAT,
            file: self.file.clone(),
            offset: fatal.offset,
            message: format!(
                "{}{after}; the rest of the shard cannot be read: rewrite or remove it",
                fatal.message
            ),
        }
    }
}

impl<R: Read> Iterator for SampleReader<R> {
    type Item = Result<Element, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_sample() {
            Ok(Some(sample)) => Some(sample),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(fatal) => {
                self.done = true;
                Some(Err(self.corrupt(fatal)))
            }
        }
    }
}
