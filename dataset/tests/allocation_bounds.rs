//! Memory that outside input can make the dataset crate allocate, measured by the
//! largest single allocation (this test binary's global allocator records it:
//! `sluice_testkit::fuzz_corpus::LargestAllocation`).
//! The first two were found by fuzzing (`fuzz/regressions/example/`): a 20-byte
//! input made `parse_example` take 512 MiB at once.

use bytes::Bytes;
use sluice_dataset::formats::example;
use sluice_dataset::{Arg, DType, FeatureSpec, Tensor};
use sluice_testkit::fuzz_corpus::{turn, LargestAllocation};

#[global_allocator]
static ALLOCATOR: LargestAllocation = LargestAllocation;

#[test]
fn checking_a_string_tensor_counts_its_items_without_collecting_them() {
    let turn = turn();
    // 4 million empty items: 16 MB of payload (their slices were 128 MB).
    let items = 4 << 20;
    let data = Bytes::from(vec![0u8; 4 * items]);
    let (t, largest) =
        turn.largest_allocation(|| Tensor::new(DType::String, vec![items as u64], data.clone()));
    assert_eq!(t.expect("valid").num_values(), items as u64);
    assert!(largest < 1 << 20, "checking the tensor allocated {largest} bytes at once");
}

#[test]
fn a_string_default_broadcast_allocates_its_payload_not_a_slice_per_value() {
    let turn = turn();
    let values = 1u64 << 22;
    let spec = FeatureSpec {
        name: "s".into(),
        dtype: DType::String,
        shape: Some(vec![values]),
        default: Some(Arg::Str("x".into())),
    };
    let specs = vec![spec];
    let names = example::names(&specs);
    let (e, largest) =
        turn.largest_allocation(|| example::parse(Bytes::new(), &specs, &names).expect("default"));
    assert_eq!(e.components[0].num_values(), values);
    // The payload is 5 bytes per value; a slice per value was 16.
    assert!(largest <= 5 * values as usize, "the broadcast allocated {largest} bytes at once");
}

/// An 8 × 8 gray JPEG whose frame header then claims `width × height`.
fn jpeg_claiming(width: u16, height: u16) -> Vec<u8> {
    let mut file = Vec::new();
    let encoder = jpeg_encoder::Encoder::new(&mut file, 90);
    encoder.encode(&[128; 64], 8, 8, jpeg_encoder::ColorType::Luma).expect("encodes");
    let sof = file.windows(2).position(|w| w == [0xFF, 0xC0]).expect("a baseline frame header");
    // FF C0, length (2), precision (1), then height and width.
    file[sof + 5..sof + 7].copy_from_slice(&height.to_be_bytes());
    file[sof + 7..sof + 9].copy_from_slice(&width.to_be_bytes());
    file
}

#[test]
fn a_jpeg_header_claiming_a_huge_image_fails_before_any_pixel_is_allocated() {
    use sluice_dataset::{DatasetDef, Element, FunctionRegistry};
    let turn = turn();
    let mut registry = FunctionRegistry::builtin();
    let file = jpeg_claiming(u16::MAX, u16::MAX);
    registry.register_map("file", 0, move |_, _| {
        Element::named(vec!["img".into()], vec![Tensor::scalar_bytes(&file)])
            .map_err(|e| e.to_string())
    });
    // 65,535² pixels: 12 GiB decoded to RGB, 4 GiB to gray.
    for channels in [3, 1] {
        let def = DatasetDef::range(1)
            .map("file")
            .map_with("decode_jpeg", vec![Arg::Str("img".into()), Arg::Int(channels)]);
        let (items, largest) = turn
            .largest_allocation(|| def.iter_local(&registry).expect("starts").collect::<Vec<_>>());
        let err = items[0].as_ref().expect_err("refused").to_string();
        assert!(err.contains("65535x65535") && err.contains("MAX_IMAGE_BYTES"), "{err}");
        assert!(largest < 1 << 20, "decoding allocated {largest} bytes at once");
    }
}
