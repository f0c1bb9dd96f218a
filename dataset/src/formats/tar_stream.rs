//! A streaming, bounded reader of tar members: the framing under WebDataset
//! shards (`formats::webdataset`).
//!
//! ```text
//!   header (512) │ data, padded to 512 │ header │ data … │ zero block (end)
//! ```
//!
//! Why not `tar::Archive::entries`: its iterator borrows the archive, so a pull
//! iterator that owns its shard (what a split unit is) would have to borrow from
//! itself; and it reads GNU long names and pax headers whole, however large the
//! header says they are. Here the `tar` crate parses each header
//! ([`tar::Header`]: checksum field, sizes in octal or base-256, ustar prefixes)
//! and pax records ([`tar::PaxExtensions`]); this module does the framing, with
//! every size it reads into memory bounded: a long name at [`MAX_NAME_BYTES`]
//! (a longer one is skipped and reported on its member), a pax header at
//! [`MAX_PAX_BYTES`]. A member's data is read by the caller
//! ([`TarStream::read_data`]) or skipped, streamed, by the next
//! [`TarStream::next_member`].
//!
//! What cannot be resynchronised is a [`Fatal`] error at a byte offset: a
//! header whose checksum fails or whose fields do not parse, a file cut short,
//! a pax header over its bound, a GNU sparse member.

use std::io::Read;

use tar::{EntryType, Header, PaxExtensions};

/// Bytes of a tar block (headers, and the unit data is padded to).
const BLOCK: u64 = 512;
/// The longest member name (GNU long name or pax `path`) read; a member with a
/// longer one is reported (its data skipped), not read.
pub const MAX_NAME_BYTES: u64 = 4096;
/// The largest pax extended header read into memory; a larger one is corrupt
/// input (it may carry the next member's size, so it cannot be skipped).
pub const MAX_PAX_BYTES: u64 = 64 << 10;
/// Bytes read at a time while skipping data.
const SKIP_CHUNK: usize = 64 << 10;

/// A member's header, its data not yet read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The member's path: `Err(length)` for a name over [`MAX_NAME_BYTES`].
    pub name: Result<Vec<u8>, u64>,
    /// Bytes of data.
    pub size: u64,
    /// A regular file (anything else — directories, links, devices — carries no
    /// sample data).
    pub is_file: bool,
    /// Offset of the member's first header in the file.
    pub offset: u64,
}

impl Member {
    /// The name for messages: lossy UTF-8, or a note that it was too long.
    pub fn display_name(&self) -> String {
        match &self.name {
            Ok(name) => String::from_utf8_lossy(name).into_owned(),
            Err(len) => format!("<a name of {len} bytes>"),
        }
    }
}

/// The framing is lost at byte `offset`: the rest of the file cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fatal {
    pub offset: u64,
    pub message: String,
}

/// Reads tar members from `input` one header at a time.
pub struct TarStream<R: Read> {
    input: R,
    /// Bytes consumed from `input`.
    pos: u64,
    /// Data (and padding) of the current member not read yet.
    unread: u64,
    done: bool,
}

fn padded(size: u64) -> Option<u64> {
    size.checked_add(BLOCK - 1).map(|s| s & !(BLOCK - 1))
}

impl<R: Read> TarStream<R> {
    pub fn new(input: R) -> Self {
        TarStream { input, pos: 0, unread: 0, done: false }
    }

    fn fatal(&self, offset: u64, message: impl Into<String>) -> Fatal {
        Fatal { offset, message: message.into() }
    }

    /// Reads up to `buf.len()` bytes; fewer only at the end of the input.
    fn fill(&mut self, buf: &mut [u8]) -> Result<usize, Fatal> {
        let mut got = 0;
        while got < buf.len() {
            match self.input.read(&mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => {
                    return Err(self.fatal(self.pos + got as u64, format!("read failed: {e}")))
                }
            }
        }
        self.pos += got as u64;
        Ok(got)
    }

    /// Discards `n` bytes, failing if the input ends first.
    fn skip(&mut self, mut n: u64, what: &str) -> Result<(), Fatal> {
        let mut buf = vec![0u8; SKIP_CHUNK.min(n as usize)];
        let start = self.pos;
        while n > 0 {
            let want = buf.len().min(usize::try_from(n).unwrap_or(usize::MAX));
            let got = self.fill(&mut buf[..want])?;
            if got == 0 {
                return Err(self.truncated(start, what));
            }
            n -= got as u64;
        }
        Ok(())
    }

    fn truncated(&self, at: u64, what: &str) -> Fatal {
        self.fatal(at, format!("{what} is cut short at byte {}: the file was truncated", self.pos))
    }

    /// Reads `size` bytes (at most `bound`, checked by the caller) plus padding.
    fn read_small(&mut self, size: u64, what: &str) -> Result<Vec<u8>, Fatal> {
        let start = self.pos;
        let mut data = vec![0u8; size as usize];
        if self.fill(&mut data)? < data.len() {
            return Err(self.truncated(start, what));
        }
        self.skip(padded(size).unwrap_or(size) - size, what)?;
        Ok(data)
    }

    /// The next header block, `None` at the end (a zero block, or the input
    /// ending exactly between members).
    fn header(&mut self) -> Result<Option<(Header, u64)>, Fatal> {
        let at = self.pos;
        let mut header = Header::new_old();
        let got = self.fill(header.as_mut_bytes())?;
        if got == 0 {
            return Ok(None);
        }
        if got < BLOCK as usize {
            return Err(self.truncated(at, "a header"));
        }
        let bytes = header.as_bytes();
        if bytes.iter().all(|b| *b == 0) {
            return Ok(None);
        }
        let sum: u32 = bytes[..148].iter().chain(&bytes[156..]).map(|b| u32::from(*b)).sum::<u32>()
            + 8 * u32::from(b' ');
        match header.cksum() {
            Ok(stored) if stored == sum => Ok(Some((header, at))),
            Ok(stored) => Err(self.fatal(
                at,
                format!("header checksum mismatch (stored {stored}, computed {sum}): not a tar file, or corrupt"),
            )),
            Err(e) => Err(self.fatal(at, format!("header checksum field unreadable ({e}): not a tar file, or corrupt"))),
        }
    }

    /// The next member's header (long names and pax records applied), skipping
    /// what is left of the previous member's data; `None` at the end.
    pub fn next_member(&mut self) -> Result<Option<Member>, Fatal> {
        if self.done {
            return Ok(None);
        }
        let result = self.next_member_inner();
        if !matches!(result, Ok(Some(_))) {
            self.done = true;
        }
        result
    }

    fn next_member_inner(&mut self) -> Result<Option<Member>, Fatal> {
        let unread = std::mem::take(&mut self.unread);
        self.skip(unread, "a member's data")?;
        let mut long_name: Option<Result<Vec<u8>, u64>> = None;
        let mut pax_path: Option<Vec<u8>> = None;
        let mut pax_size: Option<u64> = None;
        let mut first: Option<u64> = None;
        loop {
            let Some((header, at)) = self.header()? else {
                if let Some(at) = first {
                    return Err(self.fatal(
                        at,
                        "an extended header is not followed by its member: the file was truncated",
                    ));
                }
                return Ok(None);
            };
            let first_at = *first.get_or_insert(at);
            let size = header.entry_size().map_err(|e| {
                self.fatal(at, format!("header size field unreadable ({e}): corrupt"))
            })?;
            let data_end = padded(size).ok_or_else(|| self.fatal(at, "header size overflows"))?;
            let kind = header.entry_type();
            if kind.is_gnu_longname() {
                long_name = Some(if size > MAX_NAME_BYTES {
                    self.skip(data_end, "a long name")?;
                    Err(size)
                } else {
                    let mut name = self.read_small(size, "a long name")?;
                    while name.last() == Some(&0) {
                        name.pop();
                    }
                    Ok(name)
                });
                continue;
            }
            if kind.is_pax_local_extensions() {
                if size > MAX_PAX_BYTES {
                    return Err(self.fatal(
                        at,
                        format!("a pax header of {size} bytes, over the limit of {MAX_PAX_BYTES} (MAX_PAX_BYTES): corrupt, or not a WebDataset shard"),
                    ));
                }
                let data = self.read_small(size, "a pax header")?;
                for ext in PaxExtensions::new(&data) {
                    let ext =
                        ext.map_err(|e| self.fatal(at, format!("malformed pax record ({e})")))?;
                    match ext.key() {
                        Ok("path") => pax_path = Some(ext.value_bytes().to_vec()),
                        Ok("size") => {
                            let v = ext.value().ok().and_then(|v| v.parse::<u64>().ok());
                            pax_size =
                                Some(v.ok_or_else(|| self.fatal(at, "malformed pax size record"))?);
                        }
                        _ => {}
                    }
                }
                continue;
            }
            if kind.is_gnu_longlink() || kind.is_pax_global_extensions() {
                self.skip(data_end, "an extended header")?;
                continue;
            }
            if kind.is_gnu_sparse() {
                return Err(self.fatal(
                    at,
                    "a GNU sparse member: not supported; write the shard without --sparse",
                ));
            }
            let size = pax_size.unwrap_or(size);
            let data_end = padded(size).ok_or_else(|| self.fatal(at, "pax size overflows"))?;
            let name = match (pax_path, long_name) {
                (Some(path), _) if path.len() as u64 > MAX_NAME_BYTES => Err(path.len() as u64),
                (Some(path), _) => Ok(path),
                (None, Some(name)) => name,
                (None, None) => Ok(header.path_bytes().into_owned()),
            };
            let is_file = matches!(kind, EntryType::Regular | EntryType::Continuous);
            self.unread = data_end;
            return Ok(Some(Member { name, size, is_file, offset: first_at }));
        }
    }

    /// Reads the current member's data (`size` bytes, as its header said) onto
    /// the end of `out`, growing `out` only as bytes arrive (a header claiming
    /// more than the file holds allocates little).
    pub fn read_data(&mut self, member: &Member, out: &mut Vec<u8>) -> Result<(), Fatal> {
        let start = self.pos;
        let want = member.size;
        let read = (&mut self.input).take(want).read_to_end(out);
        let got = match read {
            Ok(n) => n as u64,
            Err(e) => {
                self.done = true;
                return Err(self.fatal(start, format!("read failed: {e}")));
            }
        };
        self.pos += got;
        if got < want {
            self.done = true;
            let what = format!("member `{}`", member.display_name());
            return Err(self.truncated(start, &what));
        }
        self.unread = self.unread.saturating_sub(want);
        Ok(())
    }
}
