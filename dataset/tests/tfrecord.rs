//! TFRecord framing: round trip, checksum and truncation errors, skip_corrupt.

use std::io::Cursor;

use sluice_dataset::formats::tfrecord::{
    masked_crc, TfRecordReader, TfRecordWriter, MAX_RECORD_BYTES,
};
use sluice_dataset::DatasetError;

fn records() -> Vec<Vec<u8>> {
    vec![b"first".to_vec(), vec![], vec![7u8; 1000], b"last".to_vec()]
}

fn encode(records: &[Vec<u8>]) -> Vec<u8> {
    let mut w = TfRecordWriter::new(Vec::new());
    for r in records {
        w.write(r).expect("write to a Vec");
    }
    w.into_inner()
}

fn read(bytes: Vec<u8>, skip_corrupt: bool) -> Vec<Result<Vec<u8>, DatasetError>> {
    TfRecordReader::new(Cursor::new(bytes), "mem.tfrecord", skip_corrupt)
        .map(|r| r.map(|b| b.to_vec()))
        .collect()
}

/// Offset of record `i` in `encode(records())`.
fn offset_of(i: usize) -> u64 {
    records()[..i].iter().map(|r| 16 + r.len() as u64).sum()
}

/// Counts the reads made of the bytes it holds.
struct CountedReads {
    inner: Cursor<Vec<u8>>,
    reads: usize,
}

impl std::io::Read for CountedReads {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.reads += 1;
        self.inner.read(buf)
    }
}

/// Large records (here 20 KiB: images, Examples) are read straight into their
/// own buffers with the footer and the next header: the kernel's copy is the
/// only one. Mixed with small ones (buffered), all round-trip.
#[test]
fn large_records_skip_the_read_buffer_and_small_ones_share_it() {
    let large: Vec<Vec<u8>> = (0..50u8).map(|i| vec![i; 20 << 10]).collect();
    let mut input = CountedReads { inner: Cursor::new(encode(&large)), reads: 0 };
    let mut reader = TfRecordReader::new(&mut input, "mem.tfrecord", false);
    let out: Vec<Vec<u8>> = reader.by_ref().map(|r| r.unwrap().to_vec()).collect();
    drop(reader);
    assert_eq!(out, large);
    // The first buffer fill holds a dozen records; each later one takes at most
    // two reads (8 KiB, then the rest with the next header), where a reader
    // without its own buffer took four (header, data in two, footer).
    let most = 2 * large.len() + 2;
    assert!(input.reads <= most, "{} reads for {} records", input.reads, large.len());

    let mixed: Vec<Vec<u8>> =
        (0..200usize).map(|i| vec![i as u8; if i % 3 == 0 { 30_000 } else { i % 50 }]).collect();
    let out: Vec<Vec<u8>> = read(encode(&mixed), false).into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(out, mixed);
}

#[test]
fn write_then_read_round_trips() {
    let bytes = encode(&records());
    assert_eq!(bytes.len() as u64, offset_of(4));
    let out: Vec<Vec<u8>> = read(bytes, false).into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(out, records());
}

#[test]
fn masked_crc_matches_tensorflow() {
    // crc32c("") = 0, masked: rotate (0) + 0xa282ead8.
    assert_eq!(masked_crc(b""), 0xa282_ead8);
    // crc32c("123456789") = 0xe3069283 (the standard check value), rotated right by
    // 15 and offset, computed by hand.
    assert_eq!(masked_crc(b"123456789"), 0xc78a_b0e5);
}

#[test]
fn flipped_data_byte_is_an_error_naming_file_and_offset() {
    let mut bytes = encode(&records());
    let at = offset_of(2) as usize + 12 + 500;
    bytes[at] ^= 0x01;
    let out = read(bytes, false);
    assert_eq!(out.len(), 3, "two good records then the error: {out:?}");
    let err = out[2].clone().unwrap_err();
    match &err {
        DatasetError::Corrupt { file, offset, message, .. } => {
            assert_eq!(file, "mem.tfrecord");
            assert_eq!(*offset, offset_of(2));
            assert!(message.contains("data checksum mismatch"), "{message}");
        }
        other => panic!("expected Corrupt, got {other:?}"),
    }
    let text = err.to_string();
    assert!(text.contains("mem.tfrecord") && text.contains(&format!("byte {}", offset_of(2))));
    assert!(text.contains("skip_corrupt"), "{text}");
}

#[test]
fn skip_corrupt_skips_exactly_the_bad_record() {
    let mut bytes = encode(&records());
    bytes[offset_of(1) as usize + 12] ^= 0xff; // the empty record's data crc
    bytes[offset_of(2) as usize + 12 + 10] ^= 0x01;
    let mut reader = TfRecordReader::new(Cursor::new(bytes), "mem.tfrecord", true);
    let out: Vec<Vec<u8>> = reader.by_ref().map(|r| r.unwrap().to_vec()).collect();
    assert_eq!(out, vec![records()[0].clone(), records()[3].clone()]);
    assert_eq!(reader.skipped(), 2);
}

#[test]
fn bad_length_checksum_stops_the_file() {
    let mut bytes = encode(&records());
    bytes[offset_of(1) as usize + 8] ^= 0x01; // record 1's length crc
    let out = read(bytes.clone(), false);
    assert_eq!(out.len(), 2);
    let err = out[1].clone().unwrap_err().to_string();
    assert!(err.contains("length checksum mismatch") && err.contains("byte 21"), "{err}");
    // skip_corrupt cannot resynchronise: the records before, then the end.
    let out = read(bytes, true);
    assert_eq!(out.into_iter().map(|r| r.unwrap()).collect::<Vec<_>>(), vec![records()[0].clone()]);
}

#[test]
fn truncated_file_is_an_error_or_a_stop() {
    let full = encode(&records());
    for cut in [offset_of(3) as usize + 5, offset_of(3) as usize + 14, full.len() - 1] {
        let bytes = full[..cut].to_vec();
        let out = read(bytes.clone(), false);
        assert_eq!(out.len(), 4, "cut at {cut}");
        let err = out[3].clone().unwrap_err();
        assert!(
            matches!(&err, DatasetError::Corrupt { offset, .. } if *offset == offset_of(3)),
            "cut at {cut}: {err:?}"
        );
        assert!(err.to_string().contains("truncated"), "{err}");
        let ok: Vec<_> = read(bytes, true).into_iter().map(|r| r.unwrap()).collect();
        assert_eq!(ok, records()[..3].to_vec());
    }
}

#[test]
fn huge_length_is_refused_without_allocating() {
    let len = (MAX_RECORD_BYTES + 1).to_le_bytes();
    let mut bytes = len.to_vec();
    bytes.extend_from_slice(&masked_crc(&len).to_le_bytes());
    let out = read(bytes, false);
    let err = out[0].clone().unwrap_err().to_string();
    assert!(err.contains("exceeds the maximum") && err.contains("MAX_RECORD_BYTES"), "{err}");
}

#[test]
fn a_short_file_claiming_the_largest_record_is_truncated_not_allocated() {
    let len = MAX_RECORD_BYTES.to_le_bytes();
    let mut bytes = len.to_vec();
    bytes.extend_from_slice(&masked_crc(&len).to_le_bytes());
    bytes.extend_from_slice(b"only a few bytes");
    let out = read(bytes, false);
    let err = out[0].clone().unwrap_err().to_string();
    // 12 bytes of header, the data, 4 of footer.
    let whole = format!("28 of {} bytes", MAX_RECORD_BYTES + 16);
    assert!(err.contains("truncated") && err.contains(&whole), "{err}");
}
