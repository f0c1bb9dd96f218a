//! `decode_jpeg`: a JPEG file → `uint8 [height, width, 1 or 3]`, through zune-jpeg
//! (pure Rust, SIMD chosen at run time), bounded from its header.
//!
//! Why read the header twice: zune-jpeg picks its colour conversion when it reads
//! the header, and the default output (the file's own channels) is known only
//! from the header, so a grayscale file is read again with gray output (headers
//! only: a few hundred bytes). No DCT-domain downscaling: zune-jpeg 0.5 does not
//! offer it (its reduced IDCTs are for sparse blocks, at full size), so there is no
//! `scale` argument; `resize` after the decode does it instead.
//!
//! Why a trailer before the end marker: zune-jpeg (like libjpeg-turbo, which only
//! warns) decodes whatever blocks a header declares beyond the data as if the data
//! went on with zero bits, so a header that claims more rows than its data holds
//! would come out padded with made-up rows, without an error. Data never ends
//! that way in a whole file: its last block ends within the data. So before the
//! final end-of-image marker `decode_jpeg` puts [`TRAILER`], stuffed `0xFF` bytes
//! whose one-bits no Huffman code is made of (JPEG never assigns the all-ones
//! code): a decoder that runs past the data reads them and fails, one that stops
//! at the last block never reads them (look-ahead is not reading).

use std::borrow::Cow;

use zune_jpeg::zune_core::bytestream::ZCursor;
use zune_jpeg::zune_core::colorspace::ColorSpace;
use zune_jpeg::zune_core::options::DecoderOptions;
use zune_jpeg::JpegDecoder;

use super::{bytes_scalar, MAX_IMAGE_BYTES};
use crate::tensor::Tensor;

/// 32 stuffed `0xFF` bytes (`FF 00` each): 256 one-bits, more than any Huffman
/// code (16 bits at most) and the decoder's look-ahead (8 bytes).
const TRAILER: [u8; 64] = {
    let mut t = [0u8; 64];
    let mut i = 0;
    while i < 64 {
        t[i] = 0xFF;
        i += 2;
    }
    t
};

/// The end-of-image marker.
const EOI: [u8; 2] = [0xFF, 0xD9];

/// JPEG blocks are padded to whole MCUs of up to 32 × 32 pixels (sampling
/// factors up to 4): the decoder's coefficient buffers cover the padded size.
const MCU_PAD: u64 = 32;

/// A bytes scalar holding a JPEG (baseline or progressive, 8-bit) → `uint8 [h, w,
/// c]` with `c` = `channels` (1 gray, 3 RGB) or, for `None`, the file's own (1 for a
/// grayscale JPEG, 3 otherwise; CMYK is converted to RGB). Before any pixel or
/// coefficient buffer is allocated, the header's size is checked against
/// [`MAX_IMAGE_BYTES`] twice: the decoded bytes (`h × w × c`), and the decoder's
/// coefficient buffers (2 bytes per sample of each of the file's components, at the
/// padded size, as progressive and multi-scan files need). The decoder runs in
/// strict mode, so a truncated or damaged file fails instead of coming out
/// half-grey, and a file ending in the end-of-image marker gets [`TRAILER`] before
/// it, so a header claiming more blocks than the data holds fails too.
pub(crate) fn decode_jpeg(t: &Tensor, channels: Option<u8>) -> Result<Tensor, String> {
    let file = bytes_scalar(t, "a JPEG file")?;
    let data: Cow<[u8]> = match file.strip_suffix(&EOI) {
        Some(body) => Cow::Owned([body, &TRAILER, &EOI].concat()),
        None => Cow::Borrowed(&file),
    };
    // Only Sluice's bound limits the size (zune-jpeg's own default is 16,384 a side).
    let options = DecoderOptions::default()
        .set_strict_mode(true)
        .set_max_width(usize::from(u16::MAX))
        .set_max_height(usize::from(u16::MAX));
    let headers = |colorspace: ColorSpace| {
        let mut decoder = JpegDecoder::new_with_options(
            ZCursor::new(&data[..]),
            options.jpeg_set_out_colorspace(colorspace),
        );
        decoder.decode_headers().map(|()| decoder).map_err(invalid)
    };
    let mut decoder = headers(ColorSpace::RGB)?;
    let info = decoder.info().ok_or("the JPEG header could not be read")?;
    let file_gray = decoder.input_colorspace() == Some(ColorSpace::Luma);
    let channels = channels.unwrap_or(if file_gray { 1 } else { 3 });
    let (width, height) = (u64::from(info.width), u64::from(info.height));
    check_size(width, height, u64::from(info.components), u64::from(channels))?;
    if channels == 1 {
        decoder = headers(ColorSpace::Luma)?;
    }
    let size = width * height * u64::from(channels);
    if decoder.output_buffer_size() != usize::try_from(size).ok() {
        return Err(format!(
            "the decoder asks for {:?} bytes for a {width}x{height} image of {channels} \
             channel(s); expected {size}",
            decoder.output_buffer_size()
        ));
    }
    let mut pixels = vec![0u8; size as usize];
    decoder.decode_into(&mut pixels).map_err(invalid)?;
    Tensor::from_u8s(vec![height, width, u64::from(channels)], pixels).map_err(|e| e.to_string())
}

/// Refuses a `width × height` JPEG of `components` whose decoded bytes (`channels`
/// out) or coefficient buffers are over [`MAX_IMAGE_BYTES`]. JPEG sizes are 16-bit,
/// so the products fit in u64.
fn check_size(width: u64, height: u64, components: u64, channels: u64) -> Result<(), String> {
    let decoded = width * height * channels;
    let padded = |n: u64| n.div_ceil(MCU_PAD) * MCU_PAD;
    let coefficients = 2 * padded(width) * padded(height) * components;
    if decoded <= MAX_IMAGE_BYTES && coefficients <= MAX_IMAGE_BYTES {
        return Ok(());
    }
    Err(format!(
        "the JPEG header declares a {width}x{height} image of {components} component(s): \
         {decoded} bytes decoded to {channels} channel(s) and {coefficients} bytes of \
         coefficients to decode it, over the limit of {MAX_IMAGE_BYTES} bytes \
         (MAX_IMAGE_BYTES); is the file damaged?"
    ))
}

/// A decoder error as the element's message: what was wrong, and what to check.
fn invalid(e: zune_jpeg::errors::DecodeErrors) -> String {
    use zune_jpeg::errors::DecodeErrors as E;
    let what = match &e {
        E::IllegalMagicBytes(m) => {
            format!("it starts with 0x{m:04X}, not a JPEG's start-of-image marker 0xFFD8")
        }
        E::ExhaustedData | E::IoErrors(_) => {
            format!("the data ends before the image does ({}); is the file truncated?", detail(&e))
        }
        // What the decoder reads of `TRAILER` when the data ran out first.
        E::Format(m) if m.contains("0xFFFF") => format!(
            "the data ends before the image its header declares ({m}); is the file truncated, \
             or its header damaged?"
        ),
        _ => format!("{}; is the file damaged or not a JPEG?", detail(&e)),
    };
    format!("not a valid JPEG: {what}")
}

/// The decoder's own words for `e`, on one line.
fn detail(e: &zune_jpeg::errors::DecodeErrors) -> String {
    use zune_jpeg::errors::DecodeErrors as E;
    let text = match e {
        E::Format(m) => m.clone(),
        E::FormatStatic(m) => (*m).to_string(),
        other => format!("{other:?}"),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
