use super::*;

fn elements(n: usize) -> Vec<pb::Element> {
    (0..n)
        .map(|i| pb::Element {
            components: vec![pb::Tensor {
                dtype: pb::DType::Int32 as i32,
                shape: vec![256],
                // Token-id-like: small int32 values, so mostly zero bytes.
                data: Bytes::from(
                    (0..256u32)
                        .flat_map(|t| ((t * 7 + i as u32) % 300).to_le_bytes())
                        .collect::<Vec<u8>>(),
                ),
            }],
            names: vec![],
            ..Default::default()
        })
        .collect()
}

fn raw(elements: &[pb::Element]) -> Vec<u8> {
    pb::ElementBatch { elements: elements.to_vec(), ..Default::default() }.encode_to_vec()
}

fn frame_of(elements: &[pb::Element]) -> pb::CompressedElements {
    compress(&mut compressor().unwrap(), &raw(elements)).expect("token ids compress")
}

#[test]
fn elements_round_trip_and_shrink() {
    let e = elements(16);
    let frame = frame_of(&e);
    assert!(frame.data.len() * 2 < raw(&e).len(), "{} of {}", frame.data.len(), raw(&e).len());
    assert_eq!(decompress(&frame, crate::MAX_MESSAGE_BYTES).unwrap(), e);
}

#[test]
fn incompressible_data_is_left_raw() {
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let random: Vec<u8> = (0..64 * 1024)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    assert!(compress(&mut compressor().unwrap(), &random).is_none());
    assert!(compress(&mut compressor().unwrap(), b"").is_none());
}

#[test]
fn a_declared_length_above_the_limit_is_refused_before_allocating() {
    let mut frame = frame_of(&elements(4));
    let limit = frame.raw_bytes as usize - 1;
    let e = decompress(&frame, limit).unwrap_err();
    assert!(matches!(e, CompressionError::TooLarge { .. }), "{e}");
    // A huge declaration (a bomb's header) is refused the same way, not allocated.
    frame.raw_bytes = u64::MAX;
    let e = decompress(&frame, crate::MAX_MESSAGE_BYTES).unwrap_err();
    assert!(e.to_string().contains("above the limit"), "{e}");
}

#[test]
fn a_frame_that_decompresses_to_more_or_less_than_declared_is_refused() {
    let mut frame = frame_of(&elements(4));
    frame.raw_bytes -= 1;
    let e = decompress(&frame, crate::MAX_MESSAGE_BYTES).unwrap_err();
    assert!(matches!(e, CompressionError::Corrupt(_)), "more than declared: {e}");
    let mut frame = frame_of(&elements(4));
    frame.raw_bytes += 10;
    let e = decompress(&frame, crate::MAX_MESSAGE_BYTES).unwrap_err();
    assert!(
        matches!(e, CompressionError::WrongLength { .. } | CompressionError::Corrupt(_)),
        "less than declared: {e}"
    );
}

#[test]
fn corrupt_or_foreign_frames_are_errors_not_panics() {
    let good = frame_of(&elements(4));
    for cut in [0, 1, 4, good.data.len() / 2, good.data.len() - 1] {
        let frame = pb::CompressedElements { data: good.data.slice(..cut), ..good.clone() };
        assert!(decompress(&frame, crate::MAX_MESSAGE_BYTES).is_err(), "cut at {cut}");
    }
    let mut flipped = good.data.to_vec();
    for b in flipped.iter_mut().skip(8).step_by(3) {
        *b ^= 0x5a;
    }
    let frame = pb::CompressedElements { data: Bytes::from(flipped), ..good.clone() };
    assert!(decompress(&frame, crate::MAX_MESSAGE_BYTES).is_err());
    let frame = pb::CompressedElements { codec: 9, ..good.clone() };
    assert_eq!(
        decompress(&frame, crate::MAX_MESSAGE_BYTES),
        Err(CompressionError::UnknownCodec(9))
    );
    // Valid zstd of bytes that are not an element batch.
    let data = Bytes::from(zstd::bulk::compress(&[0xff; 100], 1).unwrap());
    let frame = pb::CompressedElements { codec: good.codec, raw_bytes: 100, data };
    assert!(matches!(
        decompress(&frame, crate::MAX_MESSAGE_BYTES),
        Err(CompressionError::Decode(_))
    ));
}
