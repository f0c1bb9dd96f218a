//! Memory that outside input can make the dataset crate allocate, measured by the
//! largest single allocation (this test binary's global allocator records it:
//! `sluice_testkit::fuzz_corpus::LargestAllocation`).
//! Both were found by fuzzing (`fuzz/regressions/example/`): a 20-byte input made
//! `parse_example` take 512 MiB at once.

use bytes::Bytes;
use sluice_dataset::formats::example;
use sluice_dataset::{Arg, DType, FeatureSpec, Tensor};
use sluice_testkit::fuzz_corpus::{largest_allocation, LargestAllocation};

#[global_allocator]
static ALLOCATOR: LargestAllocation = LargestAllocation;

#[test]
fn checking_a_string_tensor_counts_its_items_without_collecting_them() {
    // 4 million empty items: 16 MB of payload (their slices were 128 MB).
    let items = 4 << 20;
    let data = Bytes::from(vec![0u8; 4 * items]);
    let (t, largest) =
        largest_allocation(|| Tensor::new(DType::String, vec![items as u64], data.clone()));
    assert_eq!(t.expect("valid").num_values(), items as u64);
    assert!(largest < 1 << 20, "checking the tensor allocated {largest} bytes at once");
}

#[test]
fn a_string_default_broadcast_allocates_its_payload_not_a_slice_per_value() {
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
        largest_allocation(|| example::parse(Bytes::new(), &specs, &names).expect("default"));
    assert_eq!(e.components[0].num_values(), values);
    // The payload is 5 bytes per value; a slice per value was 16.
    assert!(largest <= 5 * values as usize, "the broadcast allocated {largest} bytes at once");
}
