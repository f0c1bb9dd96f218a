//! `decode_jpeg` on JPEGs made at test time (jpeg-encoder): baseline and
//! progressive, subsampled or not, gray and RGB, odd sizes; and damaged ones.

use jpeg_encoder::{ColorType, Encoder, SamplingFactor};
use sluice_dataset::{Arg, DType, FnCall, FnKind, FunctionRegistry, Tensor};

use super::{apply, img};

/// How a test JPEG is encoded.
#[derive(Clone, Copy)]
pub(crate) struct Encoding {
    pub(crate) progressive: bool,
    pub(crate) sampling: SamplingFactor,
}

pub(crate) const BASELINE_444: Encoding =
    Encoding { progressive: false, sampling: SamplingFactor::F_1_1 };

/// A smooth `width × height` image of `channels` (1 or 3): JPEG keeps it closely.
pub(crate) fn pixels(width: u16, height: u16, channels: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(usize::from(width) * usize::from(height) * channels);
    for y in 0..usize::from(height) {
        for x in 0..usize::from(width) {
            for c in 0..channels {
                out.push((40 + 3 * x + 2 * y + 50 * c).min(250) as u8);
            }
        }
    }
    out
}

/// `data` (`channels` 1 or 3) as a JPEG of quality 95.
pub(crate) fn jpeg(
    data: &[u8],
    width: u16,
    height: u16,
    channels: usize,
    how: Encoding,
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut encoder = Encoder::new(&mut out, 95);
    encoder.set_progressive(how.progressive);
    encoder.set_sampling_factor(how.sampling);
    let color = if channels == 1 { ColorType::Luma } else { ColorType::Rgb };
    encoder.encode(data, width, height, color).expect("encodes");
    out
}

/// The error of decoding `file`, which must fail.
fn decode_err(file: &[u8], extra: Vec<Arg>) -> String {
    match decode(file, extra) {
        Ok(t) => panic!("decoded to {:?} instead of failing", t.shape()),
        Err(e) => e,
    }
}

fn decode(file: &[u8], extra: Vec<Arg>) -> Result<Tensor, String> {
    let mut args = vec![img()];
    args.extend(extra);
    apply(Tensor::scalar_bytes(file), vec![("decode_jpeg", args)])
        .map(|e| e.get("img").expect("img").clone())
        .map_err(|e| e.to_string())
}

/// The mean and largest absolute difference of two pixel buffers.
fn difference(a: &[u8], b: &[u8]) -> (f64, u8) {
    assert_eq!(a.len(), b.len());
    let total: u64 = a.iter().zip(b).map(|(x, y)| u64::from(x.abs_diff(*y))).sum();
    let largest = a.iter().zip(b).map(|(x, y)| x.abs_diff(*y)).max().unwrap_or(0);
    (total as f64 / a.len().max(1) as f64, largest)
}

#[test]
fn decode_jpeg_gives_the_encoded_pixels_within_jpeg_tolerance() {
    let encodings = [
        BASELINE_444,
        Encoding { progressive: false, sampling: SamplingFactor::F_2_2 },
        Encoding { progressive: true, sampling: SamplingFactor::F_1_1 },
        Encoding { progressive: true, sampling: SamplingFactor::F_2_1 },
    ];
    for (width, height) in [(37u16, 23u16), (1, 1), (9, 17)] {
        for how in encodings {
            for channels in [1usize, 3] {
                let data = pixels(width, height, channels);
                let t =
                    decode(&jpeg(&data, width, height, channels, how), vec![]).expect("decodes");
                let shape = [u64::from(height), u64::from(width), channels as u64];
                assert_eq!((t.dtype(), t.shape()), (DType::Uint8, &shape[..]));
                // Quality 95 of a smooth image: a few levels on average (chroma
                // subsampling blurs the colour edges a little more).
                let (mean, largest) = difference(t.data(), &data);
                assert!(
                    mean <= 3.0 && largest <= 24,
                    "{width}x{height}x{channels} progressive={}: mean {mean}, largest {largest}",
                    how.progressive
                );
            }
        }
    }
}

#[test]
fn decode_jpeg_converts_to_the_channels_asked_for() {
    let (width, height) = (13u16, 7u16);
    let gray = jpeg(&pixels(width, height, 1), width, height, 1, BASELINE_444);
    let as_rgb = decode(&gray, vec![Arg::Int(3)]).expect("gray → RGB");
    assert_eq!(as_rgb.shape(), &[7, 13, 3]);
    assert!(as_rgb.data().chunks_exact(3).all(|p| p[0] == p[1] && p[1] == p[2]), "R = G = B");
    let as_gray = decode(&gray, vec![Arg::Int(1)]).expect("gray → gray");
    assert_eq!(as_gray.shape(), &[7, 13, 1]);
    assert_eq!(
        as_gray.data().as_ref(),
        &as_rgb.data().iter().step_by(3).copied().collect::<Vec<u8>>()[..]
    );

    // An RGB file to gray: its luma (here near the mean of the channels' values).
    let rgb = jpeg(&pixels(width, height, 3), width, height, 3, BASELINE_444);
    let luma = decode(&rgb, vec![Arg::Int(1)]).expect("RGB → gray");
    assert_eq!(luma.shape(), &[7, 13, 1]);
    let expected: Vec<u8> = pixels(width, height, 3)
        .chunks_exact(3)
        .map(|p| {
            (0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2])).round()
                as u8
        })
        .collect();
    let (mean, _) = difference(luma.data(), &expected);
    assert!(mean <= 3.0, "luma off by {mean} on average");

    let r = FunctionRegistry::builtin();
    for bad in [Arg::Int(2), Arg::Int(4), Arg::Str("rgb".into())] {
        let call = FnCall::new("decode_jpeg", vec![img(), bad]);
        let err = r.check_call(FnKind::Map, &call).expect_err("refused before running");
        assert!(err.to_string().contains("1 (grayscale) or 3 (RGB)"), "{err}");
    }
}

/// A baseline JPEG whose frame header (SOF0) then claims `width × height`.
pub(crate) fn jpeg_claiming(width: u16, height: u16) -> Vec<u8> {
    encoded_claiming(BASELINE_444, width, height)
}

/// An 8 × 8 JPEG encoded `how` whose frame header then claims `width × height`.
fn encoded_claiming(how: Encoding, width: u16, height: u16) -> Vec<u8> {
    let mut file = jpeg(&pixels(8, 8, 3), 8, 8, 3, how);
    let sof = sof_at(&file);
    // FF C0, length (2), precision (1), then height and width.
    file[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    file[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    file
}

/// Where the first frame marker (FF C0 or FF C2) is.
fn sof_at(file: &[u8]) -> usize {
    file.windows(2).position(|w| w == [0xFF, 0xC0] || w == [0xFF, 0xC2]).expect("a frame header")
}

#[test]
fn a_jpeg_header_declaring_a_huge_image_fails_naming_the_size_and_the_limit() {
    // 65,535² × 3 bytes = 12 GiB decoded (the allocation itself is measured in
    // allocation_bounds.rs); 9,500² is under the limit decoded to gray (86 MiB)
    // but its coefficient buffers (2 bytes × 3 components × padded pixels) are not.
    for (w, h, channels) in [(u16::MAX, u16::MAX, None), (9500, 9500, Some(1))] {
        let extra = channels.map(|c| vec![Arg::Int(c)]).unwrap_or_default();
        let err = decode_err(&jpeg_claiming(w, h), extra);
        assert!(
            err.contains(&format!("{w}x{h}")) && err.contains("MAX_IMAGE_BYTES"),
            "names the size and the limit: {err}"
        );
    }
    // A header that lies within the limit: 64 × 64 (or 8 × 16) declared, 8 × 8
    // encoded. It fails rather than coming out with made-up rows.
    let progressive = Encoding { progressive: true, sampling: SamplingFactor::F_1_1 };
    for how in [BASELINE_444, progressive] {
        for (w, h) in [(64, 64), (8, 16)] {
            let err = decode_err(&encoded_claiming(how, w, h), vec![]);
            assert!(
                err.contains("ends before the image its header declares"),
                "{w}x{h} progressive={}: {err}",
                how.progressive
            );
        }
        let untouched = decode(&encoded_claiming(how, 8, 8), vec![]).expect("untouched");
        assert_eq!(untouched.shape(), &[8, 8, 3]);
    }
}

#[test]
fn a_damaged_jpeg_fails_its_element_saying_what_is_wrong() {
    let good = jpeg(&pixels(33, 21, 3), 33, 21, 3, BASELINE_444);
    // Truncated: the header, or the entropy-coded data, cut short.
    for keep in [good.len() / 2, sof_at(&good) + 4, 40] {
        let err = decode_err(&good[..keep], vec![]);
        assert!(
            err.contains("decode_jpeg")
                && err.contains("`img`")
                && err.contains("not a valid JPEG")
                && err.contains("truncated"),
            "cut at {keep}: {err}"
        );
    }
    // Garbled entropy-coded data (one-bits no Huffman code has) in the middle:
    // an error, not an image grey from there on.
    let mut garbled = good.clone();
    let sos = garbled.windows(2).rposition(|w| w == [0xFF, 0xDA]).expect("a scan");
    let data = sos + 2 + usize::from(u16::from_be_bytes([garbled[sos + 2], garbled[sos + 3]]));
    let middle = (data + garbled.len()) / 2;
    garbled[middle..middle + 16].copy_from_slice(&[0xFF, 0x00].repeat(8));
    let err = decode_err(&garbled, vec![]);
    assert!(err.contains("not a valid JPEG") && err.contains("Huffman"), "{err}");
    // Not a JPEG at all: the first marker is wrong.
    let mut png_like = good.clone();
    png_like[..2].copy_from_slice(&[0x89, 0x50]);
    let err = decode_err(&png_like, vec![]);
    assert!(err.contains("0x8950") && err.contains("0xFFD8"), "{err}");
    // A frame of a kind the decoder does not take (SOF3, lossless).
    let mut lossless = good.clone();
    let sof = sof_at(&lossless);
    lossless[sof + 1] = 0xC3;
    let err = decode_err(&lossless, vec![]);
    assert!(err.contains("not a valid JPEG"), "{err}");
    // Not bytes, or no such component.
    let err = decode_value(Tensor::scalar_i64(3));
    assert!(err.contains("expected a bytes scalar (a JPEG file)"), "{err}");
    assert_eq!(decode(&good, vec![]).expect("the original decodes").shape(), &[21, 33, 3]);
}

/// The error of decoding `t`, which must fail.
fn decode_value(t: Tensor) -> String {
    match apply(t, vec![("decode_jpeg", vec![img()])]) {
        Ok(e) => panic!("decoded to {:?} instead of failing", e.get("img").map(Tensor::shape)),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_damaged_jpeg_fails_only_its_element_which_ignore_errors_skips_and_its_record_is_consumed() {
    let good = jpeg(&pixels(8, 8, 3), 8, 8, 3, BASELINE_444);
    let mut registry = FunctionRegistry::builtin();
    // Element i holds the good file, but element 1 only its first half.
    registry.register_map("file", 0, move |e, _| {
        let i = e.as_i64().map_err(|e| e.to_string())?;
        let file = if i == 1 { &good[..good.len() / 2] } else { &good[..] };
        sluice_dataset::Element::named(vec!["img".into()], vec![Tensor::scalar_bytes(file)])
            .map_err(|e| e.to_string())
    });
    let files = sluice_dataset::DatasetDef::range(3).map("file");
    for parallel in [1, 2] {
        let def = files.clone().parallel_map("decode_jpeg", vec![img()], parallel);
        // Exactly once: the error names the record, the stream goes on, and the
        // damaged element's record is consumed (in the sink), once.
        let tagged = def.iter_tagged(&registry, None).expect("starts");
        let items: Vec<_> = tagged.elements.collect();
        assert_eq!(items.len(), 3, "{parallel} thread(s): {items:?}");
        assert!(items[0].is_ok() && items[2].is_ok(), "{items:?}");
        let err = items[1].as_ref().expect_err("the damaged one fails");
        assert!(err.is_element_error(), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("not a valid JPEG") && msg.contains("unit 1, record 0"), "{msg}");
        let dropped = tagged.dropped.take();
        let units: Vec<u64> = dropped.runs.iter().map(|r| r.unit).collect();
        assert_eq!(units, [1], "the damaged element's record is consumed with the others");

        // ignore_errors skips it and counts it.
        let registry = registry.clone();
        let before = registry.errors_ignored().load(std::sync::atomic::Ordering::Relaxed);
        let out: Vec<_> =
            def.clone().ignore_errors().iter_local(&registry).expect("starts").collect();
        assert_eq!(out.len(), 2, "{out:?}");
        assert!(out.iter().all(Result::is_ok));
        let after = registry.errors_ignored().load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!(after - before, 1);
    }
}
