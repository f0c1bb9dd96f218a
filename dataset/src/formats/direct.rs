//! The reading side of a record format: small pieces (headers, short records)
//! come out of a read buffer, large ones go straight from the file into their
//! own allocation.
//!
//! Why not a `BufReader`: it copies every byte twice, from the kernel into its
//! buffer and from there into the record. For records of several KiB (TFRecord
//! images, Examples) that second copy, of a buffer the cache had already lost,
//! was ~11 % of a worker's CPU (docs/performance.md). Here a record of at least
//! [`DIRECT_MIN`] bytes that is not already buffered is read by one `read` into
//! the record's own buffer, together with the few bytes after it that the next
//! header needs ([`DirectInput::read_into`]'s `ahead`), which are kept for the
//! next call. A file of large records is then read with one copy per record (the
//! kernel's, into memory not zeroed first: zeroing it cost as much as the copy it
//! saved), in one or two system calls, and the read buffer stays empty.
//!
//! Bounded: a direct read asks for at most [`READ_STEP`] past the bytes that
//! arrived (the record's buffer grows by doubling, so it holds at most twice
//! that), so a length field that lies (a hostile or corrupt file) allocates only
//! as fast as bytes actually arrive; the read buffer is [`BUFFER`] bytes.

use std::io::{ErrorKind, Read, Result};

/// Records of at least this many bytes (not already buffered) are read straight
/// into their own buffer: a `read` from the page cache costs about as much as a
/// copy of a few KiB.
pub const DIRECT_MIN: usize = 8 << 10;

/// The read buffer for headers and short records.
pub const BUFFER: usize = 256 << 10;

/// The most a direct read adds to a record's buffer at once.
pub const READ_STEP: usize = 1 << 20;

/// An input read in pieces of known length (see the module doc).
pub struct DirectInput<R> {
    inner: R,
    /// Bytes read and not yet taken are `buf[pos..]`; allocated (to [`BUFFER`])
    /// on the first buffered read.
    buf: Vec<u8>,
    pos: usize,
}

impl<R: Read> DirectInput<R> {
    pub fn new(inner: R) -> Self {
        DirectInput { inner, buf: Vec::new(), pos: 0 }
    }

    /// Fills `dst` (a header, a footer) from the buffer, refilling it as needed;
    /// returns how many bytes it filled: fewer than `dst.len()` only at the end
    /// of the input.
    pub fn read_small(&mut self, dst: &mut [u8]) -> Result<usize> {
        let mut done = self.take_buffered(dst);
        while done < dst.len() {
            if self.fill()? == 0 {
                break;
            }
            done += self.take_buffered(&mut dst[done..]);
        }
        Ok(done)
    }

    /// Appends `n` bytes to `out`; returns how many it appended, fewer than `n`
    /// only at the end of the input. Buffered bytes go first; a rest of
    /// [`DIRECT_MIN`] or more is read straight into `out`, and with it up to
    /// `ahead` bytes past the `n`, which are kept for the next call.
    pub fn read_into(&mut self, out: &mut Vec<u8>, n: usize, ahead: usize) -> Result<usize> {
        let mut done = 0;
        loop {
            let take = self.buffered().len().min(n - done);
            out.extend_from_slice(&self.buf[self.pos..self.pos + take]);
            self.pos += take;
            done += take;
            let rest = n - done;
            if rest == 0 {
                return Ok(done);
            }
            // The buffer is empty here: everything buffered was taken.
            if rest < DIRECT_MIN {
                if self.fill()? == 0 {
                    return Ok(done);
                }
                continue;
            }
            // Into the spare capacity, not zeroed first (zeroing cost as much as
            // the copy it saves); `read_to_end` stops at `want` or the end.
            let at = out.len();
            let want = (rest + ahead).min(READ_STEP);
            out.reserve(want);
            let got = (&mut self.inner).take(want as u64).read_to_end(out)?;
            if got == 0 {
                return Ok(done);
            }
            if got > rest {
                // Read past the `n`: the start of what follows, for the next call.
                self.buf.clear();
                self.buf.extend_from_slice(&out[at + rest..]);
                self.pos = 0;
                out.truncate(at + rest);
            }
            done += got.min(rest);
        }
    }

    fn buffered(&self) -> &[u8] {
        self.buf.get(self.pos..).unwrap_or_default()
    }

    /// Moves buffered bytes into `dst`; returns how many.
    fn take_buffered(&mut self, dst: &mut [u8]) -> usize {
        let n = self.buffered().len().min(dst.len());
        dst[..n].copy_from_slice(&self.buf[self.pos..self.pos + n]);
        self.pos += n;
        n
    }

    /// Refills the (empty) buffer by one read; returns the bytes read, 0 at the
    /// end of the input.
    fn fill(&mut self) -> Result<usize> {
        self.buf.resize(BUFFER, 0);
        let got = read_once(&mut self.inner, &mut self.buf)?;
        self.buf.truncate(got);
        self.pos = 0;
        Ok(got)
    }
}

/// One `read`, retried when interrupted.
fn read_once(inner: &mut impl Read, dst: &mut [u8]) -> Result<usize> {
    loop {
        match inner.read(dst) {
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader that hands out at most `max` bytes per read and counts its reads.
    struct Trickle<'a> {
        data: &'a [u8],
        max: usize,
        reads: usize,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> Result<usize> {
            self.reads += 1;
            let n = buf.len().min(self.max).min(self.data.len());
            buf[..n].copy_from_slice(&self.data[..n]);
            self.data = &self.data[n..];
            Ok(n)
        }
    }

    fn bytes(n: usize) -> Vec<u8> {
        (0..n).map(|i| (i * 7 % 251) as u8).collect()
    }

    #[test]
    fn large_pieces_are_read_straight_into_their_buffers_with_the_lookahead() {
        // Pieces of 20 KiB, each followed by a 12-byte "header".
        let (piece, header) = (20 << 10, 12);
        let data = bytes(5 * (piece + header));
        let mut input = DirectInput::new(Trickle { data: &data, max: usize::MAX, reads: 0 });
        let mut got = Vec::new();
        let mut h = [0u8; 12];
        for i in 0..5 {
            assert_eq!(input.read_into(&mut got, piece, header).unwrap(), piece);
            assert_eq!(input.read_small(&mut h).unwrap(), header, "piece {i}");
            got.extend_from_slice(&h);
        }
        assert_eq!(got, data);
        // No buffer between the input and the pieces; `read_to_end` reads a
        // 20 KiB piece (and the header with it) in two reads, 8 KiB and the rest.
        assert!(input.inner.reads <= 10, "{} reads", input.inner.reads);
        assert!(input.buf.capacity() < BUFFER, "the read buffer was never needed");
    }

    #[test]
    fn small_pieces_come_from_the_buffer() {
        let data = bytes(64 << 10);
        let mut input = DirectInput::new(Trickle { data: &data, max: usize::MAX, reads: 0 });
        let mut got = Vec::new();
        while input.read_into(&mut got, 100, 12).unwrap() == 100 {}
        assert_eq!(got, data);
        // One read filled the buffer, one more found the end.
        assert_eq!(input.inner.reads, 2);
    }

    #[test]
    fn short_reads_and_the_end_of_input_give_what_there_is() {
        let data = bytes(50_000);
        let mut input = DirectInput::new(Trickle { data: &data, max: 3_000, reads: 0 });
        let mut got = Vec::new();
        assert_eq!(input.read_into(&mut got, 30_000, 12).unwrap(), 30_000);
        assert_eq!(input.read_into(&mut got, 30_000, 12).unwrap(), 20_000);
        assert_eq!(got, data);
        let mut h = [0u8; 12];
        assert_eq!(input.read_small(&mut h).unwrap(), 0);
    }

    #[test]
    fn a_direct_read_grows_the_buffer_by_steps_as_bytes_arrive() {
        // A piece announced as 64 MiB over an input of 10 bytes allocates no
        // more than a step past them (doubled, as a Vec grows).
        let data = bytes(10);
        let mut input = DirectInput::new(Trickle { data: &data, max: usize::MAX, reads: 0 });
        let mut got = Vec::new();
        assert_eq!(input.read_into(&mut got, 64 << 20, 12).unwrap(), 10);
        assert!(got.capacity() <= 2 * READ_STEP, "capacity {}", got.capacity());
    }
}
