//! Image maps (decode_png, center_crop, normalize) and the sample image dataset;
//! `decode_jpeg` in `image/jpeg.rs`, the augmentation maps in `image/augment.rs`.

#[path = "image/augment.rs"]
mod augment;
mod common;
#[path = "image/jpeg.rs"]
mod jpeg;

use sluice_dataset::sample::{image_pipeline, write_image_dataset};
use sluice_dataset::{
    Arg, DType, DatasetDef, DatasetError, Element, FnCall, FnKind, FunctionRegistry, Stage, Tensor,
};

fn png(
    width: u32,
    height: u32,
    color: png::ColorType,
    depth: png::BitDepth,
    data: &[u8],
) -> Vec<u8> {
    let mut out = Vec::new();
    let mut e = png::Encoder::new(&mut out, width, height);
    e.set_color(color);
    e.set_depth(depth);
    if color == png::ColorType::Indexed {
        e.set_palette(vec![10, 20, 30, 40, 50, 60]);
    }
    let mut w = e.write_header().expect("header");
    w.write_image_data(data).expect("data");
    w.finish().expect("finish");
    out
}

/// Runs `maps` over a one-element dataset whose component `img` is `t`.
fn apply(t: Tensor, maps: Vec<(&str, Vec<Arg>)>) -> Result<Element, DatasetError> {
    let mut def = DatasetDef::range(1).map("identity");
    for (name, args) in maps {
        def = def.map_with(name, args);
    }
    let mut registry = FunctionRegistry::builtin();
    let input =
        Element::named(vec!["id".to_string(), "img".to_string()], vec![Tensor::scalar_i64(5), t])
            .expect("named");
    registry.register_map("identity", 0, move |_, _| Ok(input.clone()));
    common::run_with(&def, &registry).remove(0)
}

/// A valid 1×1 RGBA PNG whose header then claims `width` × `height`, with the
/// header's checksum made right again, so only the size is hostile.
fn png_claiming(width: u32, height: u32) -> Vec<u8> {
    let mut bytes = png(1, 1, png::ColorType::Rgba, png::BitDepth::Eight, &[1, 2, 3, 4]);
    // Signature (8), IHDR length (4), "IHDR" (4), then width and height.
    bytes[16..20].copy_from_slice(&width.to_be_bytes());
    bytes[20..24].copy_from_slice(&height.to_be_bytes());
    let crc = crc32(&bytes[12..29]); // the chunk type and its 13 data bytes
    bytes[29..33].copy_from_slice(&crc.to_be_bytes());
    bytes
}

/// PNG's CRC-32 (ISO 3309), bit by bit.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

#[test]
fn a_png_header_declaring_a_huge_image_fails_its_element_before_allocating() {
    // 2^31-1 squared × 4 channels: ~16 EiB, the u64 product overflows too; and one
    // that fits u64 but not the limit (64 Ki × 64 Ki × 4 = 16 GiB).
    for (w, h) in [(i32::MAX as u32, i32::MAX as u32), (1 << 16, 1 << 16)] {
        let err =
            apply(Tensor::scalar_bytes(&png_claiming(w, h)), vec![("decode_png", vec![img()])])
                .expect_err("refused")
                .to_string();
        assert!(
            err.contains(&format!("{w}x{h}")) && err.contains("MAX_IMAGE_BYTES"),
            "names the size and the limit: {err}"
        );
    }
    // The untouched image still decodes: only the declared size was at fault.
    let ok = apply(Tensor::scalar_bytes(&png_claiming(1, 1)), vec![("decode_png", vec![img()])]);
    assert_eq!(ok.expect("decodes").components[1].shape(), [1, 1, 4]);
}

fn img() -> Arg {
    Arg::Str("img".into())
}

#[test]
fn decode_png_gives_uint8_height_width_channels() {
    let rgb: Vec<u8> = (0..2 * 3 * 3).collect();
    let e = apply(
        Tensor::scalar_bytes(&png(3, 2, png::ColorType::Rgb, png::BitDepth::Eight, &rgb)),
        vec![("decode_png", vec![img()])],
    )
    .expect("decodes");
    let t = e.get("img").expect("img");
    assert_eq!((t.dtype(), t.shape()), (DType::Uint8, &[2u64, 3, 3][..]));
    assert_eq!(t.data().as_ref(), &rgb[..]);
    assert_eq!(e.get("id").expect("kept").as_i64().expect("int"), 5);

    // Palette → RGB; 16-bit gray → 8-bit gray (the high byte).
    let e = apply(
        Tensor::scalar_bytes(&png(2, 1, png::ColorType::Indexed, png::BitDepth::Eight, &[1, 0])),
        vec![("decode_png", vec![img()])],
    )
    .expect("decodes");
    let t = e.get("img").expect("img");
    assert_eq!(t.shape(), &[1, 2, 3]);
    assert_eq!(t.data().as_ref(), &[40, 50, 60, 10, 20, 30]);
    let e = apply(
        Tensor::scalar_bytes(&png(
            2,
            1,
            png::ColorType::Grayscale,
            png::BitDepth::Sixteen,
            &[0xab, 1, 0x12, 2],
        )),
        vec![("decode_png", vec![img()])],
    )
    .expect("decodes");
    let t = e.get("img").expect("img");
    assert_eq!((t.shape(), t.data().as_ref()), (&[1u64, 2, 1][..], &[0xab, 0x12][..]));

    let err = apply(Tensor::scalar_bytes(b"not a png"), vec![("decode_png", vec![img()])])
        .expect_err("garbage")
        .to_string();
    assert!(err.contains("decode_png") && err.contains("`img`") && err.contains("PNG"), "{err}");
    let err = apply(Tensor::scalar_i64(1), vec![("decode_png", vec![Arg::Str("nope".into())])])
        .expect_err("no such component")
        .to_string();
    assert!(err.contains("no component named `nope`"), "{err}");
}

#[test]
fn center_crop_takes_the_middle_and_normalize_scales() {
    // 4x4 single-channel image with value y*4+x.
    let t = Tensor::from_u8s(vec![4, 4, 1], (0..16).collect::<Vec<u8>>()).expect("tensor");
    let e = apply(t.clone(), vec![("center_crop", vec![img(), Arg::Int(2), Arg::Int(2)])])
        .expect("crops");
    let c = e.get("img").expect("img");
    assert_eq!((c.shape(), c.data().as_ref()), (&[2u64, 2, 1][..], &[5, 6, 9, 10][..]));
    let e = apply(
        t.clone(),
        vec![("center_crop", vec![img(), Arg::Int(1), Arg::Int(3)]), ("normalize", vec![img()])],
    )
    .expect("crops and normalizes");
    let n = e.get("img").expect("img");
    assert_eq!((n.dtype(), n.shape()), (DType::Float32, &[1u64, 3, 1][..]));
    assert_eq!(n.f32_values().expect("f32"), [4.0 / 255.0, 5.0 / 255.0, 6.0 / 255.0]);

    let err = apply(t, vec![("center_crop", vec![img(), Arg::Int(5), Arg::Int(2)])])
        .expect_err("too big");
    assert!(err.to_string().contains("cannot crop 5x2 out of a 4x4 image"), "{err}");
    let r = FunctionRegistry::builtin();
    let call = FnCall::new("center_crop", vec![img(), Arg::Int(0), Arg::Int(2)]);
    let err = r.check_call(FnKind::Map, &call).expect_err("rejected before running");
    assert!(err.to_string().contains("positive integer"), "{err}");
    let call = FnCall::new("normalize", vec![Arg::Int(1)]);
    assert!(r.check_call(FnKind::Map, &call).is_err(), "the name must be a string");
}

#[test]
fn sample_dataset_runs_through_the_image_pipeline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("images").to_string_lossy().into_owned();
    let summary = write_image_dataset(&out, 3, 25, 24, 42).expect("writes");
    assert_eq!(summary.records, 75);
    assert_eq!(summary.files.len(), 3);
    assert!(
        summary.files[0].ends_with("images/part-00000-of-00003.tfrecord"),
        "{:?}",
        summary.files
    );
    let on_disk: u64 =
        summary.files.iter().map(|f| std::fs::metadata(f).expect("file").len()).sum();
    assert_eq!(summary.bytes, on_disk);
    assert!(summary.bytes > 75 * 24 * 24, "noisy images do not compress to nothing");
    let again = tempfile::tempdir().expect("tempdir");
    let again_dir = again.path().to_string_lossy().into_owned();
    let summary2 = write_image_dataset(&again_dir, 3, 25, 24, 42).expect("writes");
    assert_eq!(
        std::fs::read(&summary.files[2]).ok(),
        std::fs::read(&summary2.files[2]).ok(),
        "deterministic"
    );

    let pattern = format!("{out}/*.tfrecord");
    let def = image_pipeline(&pattern, 24);
    FunctionRegistry::builtin().check(&def).expect("the pipeline passes its checks");
    assert_eq!(DatasetDef::from_json(&def.to_json()).expect("json round trip"), def);
    assert!(
        matches!(&def.stages[1], Stage::Interleave { name, cycle_length: 4, .. } if name == "tfrecord")
    );

    // The stages after list_files → interleave, fed by the same files in order and
    // with sequential maps (interleave and parallel map are exercised by their own
    // tests in exec/).
    let mut sequential = DatasetDef::tfrecord(summary.files.clone());
    sequential.stages.extend(def.stages[2..].iter().cloned().map(|mut s| {
        if let Stage::Map { num_parallel_calls, .. } = &mut s {
            *num_parallel_calls = 1;
        }
        s
    }));
    let batches: Vec<Element> =
        common::run(&sequential).into_iter().map(|r| r.expect("ok")).collect();
    assert_eq!(batches.len(), 3, "75 records in batches of 32");
    let image = batches[0].get("image").expect("image");
    assert_eq!((image.dtype(), image.shape()), (DType::Float32, &[32u64, 16, 16, 3][..]));
    assert!(image.f32_values().expect("f32").iter().all(|v| (0.0..=1.0).contains(v)));
    let labels = batches[2].get("label").expect("label");
    assert_eq!(labels.shape(), &[11]);
    assert!(labels.i64_values().expect("int").iter().all(|l| (0..10).contains(l)));
}

/// Found by fuzzing (`fuzz/regressions/png/`): a 70-byte PNG whose header claims
/// 15,599,616 × 131,072 1-bit gray pixels made `decode_png` allocate 2 TB for them
/// (an abort); it now fails that element naming the size, before allocating.
#[test]
fn a_png_header_claiming_more_pixels_than_an_element_holds_fails_before_allocating() {
    // The fuzz input is [mode, crop h, crop w] then the file, its chunk CRCs made valid
    // (the png crate skips them in fuzz builds, under `cfg(fuzzing)`).
    let file =
        &include_bytes!("../../fuzz/regressions/png/header_claims_15599616_by_131072_pixels")[3..];
    let err = apply(Tensor::scalar_bytes(file), vec![("decode_png", vec![img()])])
        .expect_err("too large")
        .to_string();
    assert!(err.contains("15599616x131072") && err.contains("MAX_IMAGE_BYTES"), "{err}");
}
