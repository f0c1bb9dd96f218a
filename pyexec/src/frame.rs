//! Frames on the pipes between the worker and a Python process, and the cursor
//! and builder the codec reads and writes their bodies with.
//!
//! The format (the runner, `runner.py`, documents the same in its docstring): all
//! integers little-endian; a frame is `u32 length` then `length` bytes of body, at
//! most [`MAX_FRAME`]; the body's first byte is its kind.
//!
//! ```text
//! str       = u32 n, n bytes of UTF-8          blob = u32 n, n bytes
//! failure   = str type, str message, str traceback
//! element   = u32 ncomp, u8 named, [str name] * ncomp if named, component * ncomp
//! component = u8 dtype, u8 ndim, u64 dim * ndim, u64 nbytes,
//!             zeros up to the next multiple of 8 of the body offset, payload
//! dtype     = 0 int64, 1 float32, 2 float64, 3 string, 4 bytes, 5 bool, 6 uint8,
//!             7 int32
//!             (payloads as in a Tensor: string/bytes items are u32 length + bytes)
//! requests (worker -> runner)
//!   1 LOAD    u64 key, u8 how (0 reference, 1 pickle), str made_with, str name, blob
//!   2 CALL    u64 key, u8 op (0 map, 1 filter, 2 flat_map, 3 map_batches), u32 n, element * n
//!   3 UNLOAD  u64 key                                  (no answer)
//!   4 ECHO    any bytes                                (answered by ECHOED)
//! answers (runner -> worker)
//!   128 HELLO   str python_version, str numpy_version ("" = missing), str numpy_error,
//!               str cloudpickle_version ("" = missing)   (sent once, at start)
//!   129 LOADED  u64 key, u8 ok, failure if !ok
//!   130 RESULT  u32 first, u32 count, outcome * count  (a call's outcomes in input order,
//!               over as many frames as the runner needs to bound each to ~1 MiB + one element)
//!   131 ECHOED  the ECHO's bytes
//! outcome   = u8 tag: 0 element | 1 u8 keep | 2 u32 m, element * m | 3 failure
//! ```
//!
//! Why this shape: payloads are 8-byte aligned in the body so the runner makes
//! numpy arrays directly over the bytes it read (`np.ndarray(buffer=...)`, no
//! per-value Python object), and the worker slices tensors out of the answer's
//! [`Bytes`] without copying. Every length the worker reads is checked against
//! what remains before it is used, so a runner that goes wrong (or user code that
//! writes to the pipe) is a malformed answer, never an allocation of its claim.

use std::io::{self, Read, Write};

use bytes::{BufMut, Bytes, BytesMut};

/// The largest frame either side writes or reads: 1 GiB.
pub const MAX_FRAME: usize = 1 << 30;

pub(crate) const LOAD: u8 = 1;
pub(crate) const CALL: u8 = 2;
pub(crate) const UNLOAD: u8 = 3;
pub(crate) const ECHO: u8 = 4;
pub(crate) const HELLO: u8 = 128;
pub(crate) const LOADED: u8 = 129;
pub(crate) const RESULT: u8 = 130;
pub(crate) const ECHOED: u8 = 131;

/// A frame that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The pipe closed (the process exited) or failed.
    #[error("the pipe closed: {0}")]
    Closed(io::Error),
    /// The frame breaks the format.
    #[error("malformed frame: {0}")]
    Malformed(String),
}

/// Reads one frame's body; its length is checked before anything is allocated.
pub fn read_frame(r: &mut impl Read) -> Result<Bytes, FrameError> {
    let mut head = [0u8; 4];
    r.read_exact(&mut head).map_err(FrameError::Closed)?;
    let n = u32::from_le_bytes(head) as usize;
    if n == 0 || n > MAX_FRAME {
        return Err(FrameError::Malformed(format!(
            "a frame of {n} bytes (at least 1, at most {MAX_FRAME})"
        )));
    }
    let mut body = vec![0u8; n];
    r.read_exact(&mut body).map_err(FrameError::Closed)?;
    Ok(Bytes::from(body))
}

/// A frame body being built: small fields are copied into one buffer, large
/// payloads are kept as references to the tensors' [`Bytes`] and written as they
/// are.
pub(crate) struct FrameBuilder {
    parts: Vec<Bytes>,
    head: BytesMut,
    len: usize,
}

/// Payloads at least this large are written from the tensor's own buffer.
const INLINE_MAX: usize = 4096;

impl FrameBuilder {
    pub(crate) fn new(kind: u8) -> Self {
        let mut b = FrameBuilder { parts: Vec::new(), head: BytesMut::with_capacity(256), len: 0 };
        b.u8(kind);
        b
    }
    pub(crate) fn u8(&mut self, v: u8) {
        self.head.put_u8(v);
        self.len += 1;
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.head.put_u32_le(v);
        self.len += 4;
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.head.put_u64_le(v);
        self.len += 8;
    }
    /// `u32` length and bytes; refuses more than a frame can hold.
    pub(crate) fn blob(&mut self, v: &[u8]) -> Result<(), String> {
        let n = u32::try_from(v.len()).ok().filter(|n| (*n as usize) < MAX_FRAME);
        let n = n.ok_or_else(|| format!("a field of {} bytes exceeds a frame", v.len()))?;
        self.u32(n);
        self.head.put_slice(v);
        self.len += v.len();
        Ok(())
    }
    /// Zeros up to the next multiple of 8 of the body offset, then `payload`.
    pub(crate) fn aligned_payload(&mut self, payload: &Bytes) {
        let pad = self.len.wrapping_neg() % 8;
        self.head.put_bytes(0, pad);
        self.len += pad;
        if payload.len() < INLINE_MAX {
            self.head.put_slice(payload);
        } else {
            let head = self.head.split().freeze();
            self.parts.push(head);
            self.parts.push(payload.clone());
        }
        self.len += payload.len();
    }
    /// The body's length so far.
    pub(crate) fn len(&self) -> usize {
        self.len
    }
    /// Writes the frame (length, then body) and flushes.
    pub(crate) fn write_to(mut self, w: &mut impl Write) -> io::Result<()> {
        if self.len > MAX_FRAME {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("a request of {} bytes exceeds the {MAX_FRAME}-byte frame limit", self.len),
            ));
        }
        w.write_all(&(self.len as u32).to_le_bytes())?;
        self.parts.push(self.head.split().freeze());
        for p in &self.parts {
            w.write_all(p)?;
        }
        w.flush()
    }
}

/// Reads a frame body field by field; every read is bounds-checked.
pub(crate) struct Cursor {
    body: Bytes,
    at: usize,
}

impl Cursor {
    pub(crate) fn new(body: Bytes) -> Self {
        Cursor { body, at: 0 }
    }
    pub(crate) fn offset(&self) -> usize {
        self.at
    }
    pub(crate) fn remaining(&self) -> usize {
        self.body.len() - self.at
    }
    /// The next `n` bytes, as a zero-copy slice of the body.
    pub(crate) fn take(&mut self, n: usize, what: &str) -> Result<Bytes, FrameError> {
        if n > self.remaining() {
            return Err(FrameError::Malformed(format!(
                "{what} claims {n} bytes at offset {}, {} remain",
                self.at,
                self.remaining()
            )));
        }
        let out = self.body.slice(self.at..self.at + n);
        self.at += n;
        Ok(out)
    }
    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], FrameError> {
        let b = self.take(N, what)?;
        Ok(b[..].try_into().expect("took N bytes"))
    }
    pub(crate) fn u8(&mut self, what: &str) -> Result<u8, FrameError> {
        Ok(self.array::<1>(what)?[0])
    }
    pub(crate) fn u32(&mut self, what: &str) -> Result<u32, FrameError> {
        Ok(u32::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn u64(&mut self, what: &str) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(self.array(what)?))
    }
    pub(crate) fn blob(&mut self, what: &str) -> Result<Bytes, FrameError> {
        let n = self.u32(what)? as usize;
        self.take(n, what)
    }
    pub(crate) fn str(&mut self, what: &str) -> Result<String, FrameError> {
        let b = self.blob(what)?;
        String::from_utf8(b.to_vec())
            .map_err(|_| FrameError::Malformed(format!("{what} is not UTF-8")))
    }
    /// Skips the zeros up to the next multiple of 8 of the body offset.
    pub(crate) fn align(&mut self) -> Result<(), FrameError> {
        let pad = self.at.wrapping_neg() % 8;
        self.take(pad, "padding").map(drop)
    }
    pub(crate) fn at_end(&self) -> bool {
        self.at == self.body.len()
    }
}
