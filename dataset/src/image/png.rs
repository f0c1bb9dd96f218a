//! `decode_png`: a PNG file → `uint8 [height, width, channels]`, bounded from its header.

use super::{bytes_scalar, MAX_IMAGE_BYTES};
use crate::tensor::Tensor;

/// A bytes scalar holding a PNG → `uint8 [h, w, c]`. Palette and low-bit images are
/// expanded, 16-bit ones stripped to 8 bits. The size the header declares is checked
/// against [`MAX_IMAGE_BYTES`] before the output buffer is allocated (the png
/// crate's `Limits` bound only its own buffers, not the output), so a forged
/// header fails its element instead of allocating gigabytes (a 70-byte file whose
/// header claims 15,599,616 × 131,072 pixels used to allocate 2 TB; found by fuzzing).
pub(crate) fn decode_png(t: &Tensor) -> Result<Tensor, String> {
    let data = bytes_scalar(t, "a PNG file")?;
    let limits = png::Limits { bytes: MAX_IMAGE_BYTES as usize };
    let mut decoder = png::Decoder::new_with_limits(std::io::Cursor::new(data.as_ref()), limits);
    decoder.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = decoder.read_info().map_err(|e| match e {
        // The png crate's own buffers (sized from the header) hit `limits`.
        png::DecodingError::LimitsExceeded => over_limit(header_size(&data), None),
        e => format!("not a valid PNG: {e}"),
    })?;
    check_declared_size(&reader)?;
    let mut buf = vec![0u8; reader.output_buffer_size()];
    let frame = reader.next_frame(&mut buf).map_err(|e| format!("not a valid PNG: {e}"))?;
    if frame.bit_depth != png::BitDepth::Eight {
        return Err(format!("unsupported bit depth {:?} after expansion", frame.bit_depth));
    }
    let channels = frame.color_type.samples() as u64;
    buf.truncate(frame.buffer_size());
    Tensor::from_u8s(vec![u64::from(frame.height), u64::from(frame.width), channels], buf)
        .map_err(|e| e.to_string())
}

/// Refuses an image whose decoded size (width × height × samples × bytes per
/// sample after the transformations) is over [`MAX_IMAGE_BYTES`], counted without
/// overflow.
fn check_declared_size<R: std::io::Read>(reader: &png::Reader<R>) -> Result<(), String> {
    let (width, height) = (reader.info().width, reader.info().height);
    let (color, depth) = reader.output_color_type();
    let sample_bytes = if depth == png::BitDepth::Sixteen { 2 } else { 1 };
    let bytes = u64::from(width)
        .checked_mul(u64::from(height))
        .and_then(|n| n.checked_mul(color.samples() as u64 * sample_bytes));
    match bytes {
        Some(b) if b <= MAX_IMAGE_BYTES => Ok(()),
        _ => Err(over_limit(Some((width, height)), Some(color.samples()))),
    }
}

/// Width and height from the IHDR chunk, which a valid PNG has first (bytes 16..24).
fn header_size(data: &[u8]) -> Option<(u32, u32)> {
    let field = |at: usize| Some(u32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?));
    Some((field(16)?, field(20)?))
}

fn over_limit(size: Option<(u32, u32)>, channels: Option<usize>) -> String {
    let size = size.map_or_else(|| "an image".into(), |(w, h)| format!("a {w}x{h} image"));
    let channels = channels.map_or_else(String::new, |c| format!(" of {c} channel(s)"));
    format!(
        "the PNG header declares {size}{channels}, over the limit of {MAX_IMAGE_BYTES} decoded \
         bytes (MAX_IMAGE_BYTES); is the file damaged?"
    )
}
