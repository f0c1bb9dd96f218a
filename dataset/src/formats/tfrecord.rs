//! TFRecord files: a sequence of records, each framed as
//!
//! ```text
//!   u64 LE length │ u32 LE masked crc32c(length bytes) │ data │ u32 LE masked crc32c(data)
//! ```
//!
//! with `mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8` (TensorFlow's
//! `crc32c::Mask`). Both checksums are verified. A bad *data* checksum leaves the
//! framing intact, so with `skip_corrupt` such a record is skipped (and counted);
//! a bad *length* checksum or a truncated record cannot be resynchronised, so the
//! reader stops that file there (with a warning). Without `skip_corrupt` all of
//! them are a [`DatasetError::Corrupt`] naming the file and the record's offset.
//!
//! A record's length is capped at [`MAX_RECORD_BYTES`] so that a corrupt length
//! (whose checksum happens to pass, or a hostile file) cannot allocate gigabytes.
//!
//! Each record is read into a buffer that starts with [`ITEM_PREFIX`] spare bytes,
//! so the file sources make a bytes tensor of it in place
//! ([`TfRecordReader::next_framed`] → `Tensor::scalar_item_framed`). The reader
//! buffers its input itself ([`DirectInput`]): a record of
//! `DIRECT_MIN` (8 KiB) or more is read from the file
//! straight into that buffer, with its footer and the next record's header, so
//! its bytes are copied once, by the kernel; shorter records come out of a read
//! buffer. Give it an unbuffered input (`io::open_unbuffered_in`).

use std::io::{Read, Write};

use bytes::Bytes;

use super::direct::DirectInput;
use crate::error::DatasetError;
pub use crate::tensor::ITEM_PREFIX;

/// The largest record the reader accepts.
pub const MAX_RECORD_BYTES: u64 = 256 << 20;

const FORMAT: &str = "TFRecord";
const HEADER: usize = 12;
const FOOTER: usize = 4;
/// The first allocation for a record's data; it grows as bytes arrive.
const READ_CHUNK: usize = super::direct::READ_STEP;

/// TensorFlow's masked CRC-32C.
pub fn masked_crc(data: &[u8]) -> u32 {
    let crc = crc32c::crc32c(data);
    // `(crc >> 15) | (crc << 17)`, as TensorFlow writes it.
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

/// Reads records from one TFRecord file; `file` names it in errors.
pub struct TfRecordReader<R: Read> {
    input: DirectInput<R>,
    file: String,
    skip_corrupt: bool,
    /// Offset of the next record.
    offset: u64,
    /// Records skipped for a bad data checksum (with `skip_corrupt`).
    skipped: u64,
    done: bool,
}

/// What went wrong with a record: `Skippable` keeps the framing in sync.
enum Bad {
    Skippable(String),
    Fatal(String),
}

impl<R: Read> TfRecordReader<R> {
    pub fn new(input: R, file: impl Into<String>, skip_corrupt: bool) -> Self {
        TfRecordReader {
            input: DirectInput::new(input),
            file: file.into(),
            skip_corrupt,
            offset: 0,
            skipped: 0,
            done: false,
        }
    }

    /// Records skipped so far for a bad data checksum.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The next record, after [`ITEM_PREFIX`] spare bytes: `Ok(None)` at a clean
    /// end of file.
    fn read_record(&mut self) -> Result<Result<Option<Vec<u8>>, Bad>, DatasetError> {
        let mut header = [0u8; HEADER];
        let n = self
            .input
            .read_small(&mut header)
            .map_err(|e| DatasetError::reading(&self.file, &e))?;
        if n == 0 {
            return Ok(Ok(None));
        }
        if n < HEADER {
            return Ok(Err(Bad::Fatal(format!(
                "truncated record header ({n} of {HEADER} bytes); the file was cut short"
            ))));
        }
        let (len_bytes, crc_bytes) = header.split_at(8);
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap_or_default());
        let stored = u32::from_le_bytes(crc_bytes.try_into().unwrap_or_default());
        let computed = masked_crc(len_bytes);
        if stored != computed {
            return Ok(Err(Bad::Fatal(format!(
                "length checksum mismatch (stored {stored:#010x}, computed {computed:#010x})"
            ))));
        }
        if len > MAX_RECORD_BYTES {
            return Ok(Err(Bad::Fatal(format!(
                "record length {len} exceeds the maximum of {MAX_RECORD_BYTES} bytes \
                 (MAX_RECORD_BYTES)"
            ))));
        }
        // `len` is bounded above; the buffer also grows only with the bytes the file
        // really has, so a short file claiming a large record allocates little. The
        // footer is read with the data, and so is the next header when the data
        // comes straight from the file (`DirectInput::read_into`).
        let body = len as usize + FOOTER;
        let mut data = Vec::with_capacity(ITEM_PREFIX + (body + HEADER).min(READ_CHUNK));
        data.resize(ITEM_PREFIX, 0);
        let got = self
            .input
            .read_into(&mut data, body, HEADER)
            .map_err(|e| DatasetError::reading(&self.file, &e))?;
        if got < body {
            return Ok(Err(Bad::Fatal(format!(
                "truncated record ({} of {} bytes); the file was cut short",
                HEADER + got,
                HEADER + body
            ))));
        }
        let mut footer = [0u8; FOOTER];
        footer.copy_from_slice(&data[ITEM_PREFIX + len as usize..]);
        data.truncate(ITEM_PREFIX + len as usize);
        let record_len = HEADER as u64 + len + 4;
        let stored = u32::from_le_bytes(footer);
        let computed = masked_crc(&data[ITEM_PREFIX..]);
        if stored != computed {
            self.offset += record_len;
            return Ok(Err(Bad::Skippable(format!(
                "data checksum mismatch (stored {stored:#010x}, computed {computed:#010x}) \
                 in a record of {len} bytes"
            ))));
        }
        self.offset += record_len;
        Ok(Ok(Some(data)))
    }

    fn corrupt(&self, offset: u64, message: String, skippable: bool) -> DatasetError {
        let hint = if skippable {
            "pass skip_corrupt to skip such records"
        } else {
            "the rest of the file cannot be read (skip_corrupt would stop the file here); \
             rewrite or remove the file"
        };
        DatasetError::Corrupt {
            format: FORMAT,
            file: self.file.clone(),
            offset,
            message: format!("{message}; {hint}"),
        }
    }

    /// Called once at the end of the file (or where it stopped) in skip mode.
    fn report_skipped(&self) {
        if self.skipped > 0 {
            tracing::warn!(
                file = %self.file,
                skipped = self.skipped,
                "skipped {} corrupt TFRecord record(s) (data checksum mismatch)",
                self.skipped
            );
        }
    }
}

impl<R: Read> Iterator for TfRecordReader<R> {
    type Item = Result<Bytes, DatasetError>;

    fn next(&mut self) -> Option<Self::Item> {
        let framed = self.next_framed()?;
        Some(framed.map(|f| Bytes::from(f).slice(ITEM_PREFIX..)))
    }
}

impl<R: Read> TfRecordReader<R> {
    /// The next record as the iterator yields it, but after [`ITEM_PREFIX`] spare
    /// bytes (for `Tensor::scalar_item_framed`).
    pub fn next_framed(&mut self) -> Option<Result<Vec<u8>, DatasetError>> {
        while !self.done {
            let at = self.offset;
            let bad = match self.read_record() {
                Ok(Ok(Some(record))) => return Some(Ok(record)),
                Ok(Ok(None)) => {
                    self.done = true;
                    self.report_skipped();
                    return None;
                }
                Ok(Err(bad)) => bad,
                Err(e) => {
                    self.done = true;
                    return Some(Err(e));
                }
            };
            match bad {
                Bad::Skippable(_) if self.skip_corrupt => self.skipped += 1,
                Bad::Fatal(message) if self.skip_corrupt => {
                    self.done = true;
                    tracing::warn!(
                        file = %self.file,
                        offset = at,
                        "stopping this TFRecord file at a record that cannot be skipped: {message}"
                    );
                    self.report_skipped();
                    return None;
                }
                Bad::Skippable(message) => {
                    self.done = true;
                    return Some(Err(self.corrupt(at, message, true)));
                }
                Bad::Fatal(message) => {
                    self.done = true;
                    return Some(Err(self.corrupt(at, message, false)));
                }
            }
        }
        None
    }
}

/// Writes TFRecord framing around each record.
pub struct TfRecordWriter<W: Write> {
    out: W,
}

impl<W: Write> TfRecordWriter<W> {
    pub fn new(out: W) -> Self {
        TfRecordWriter { out }
    }

    /// Appends one record.
    pub fn write(&mut self, record: &[u8]) -> std::io::Result<()> {
        let len = (record.len() as u64).to_le_bytes();
        self.out.write_all(&len)?;
        self.out.write_all(&masked_crc(&len).to_le_bytes())?;
        self.out.write_all(record)?;
        self.out.write_all(&masked_crc(record).to_le_bytes())
    }

    /// The underlying writer (e.g. to `finish` a [`crate::io::FileWriter`]).
    pub fn into_inner(self) -> W {
        self.out
    }
}
