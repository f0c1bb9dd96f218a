//! A tensor's shape may come from the network (element frames, specs): it is
//! checked before anything trusts it.

use bytes::Bytes;
use sluice_dataset::{DType, DatasetError, Tensor};

fn refused(dtype: DType, shape: Vec<u64>, data: &'static [u8]) -> String {
    match Tensor::new(dtype, shape.clone(), Bytes::from_static(data)) {
        Err(e @ DatasetError::BadTensor(_)) => e.to_string(),
        Err(e) => panic!("expected BadTensor for {shape:?}, got {e}"),
        Ok(_) => panic!("a tensor of shape {shape:?} with {} bytes was accepted", data.len()),
    }
}

#[test]
fn a_shape_whose_product_overflows_is_refused_not_wrapped() {
    // 2^32 * 2^32 wraps to 0 in u64: an empty payload must not pass for it.
    for dtype in [DType::Int64, DType::Uint8, DType::String] {
        let m = refused(dtype, vec![1 << 32, 1 << 32], b"");
        assert!(m.contains("the shape overflows"), "{m}");
    }
    // Overflowing only once multiplied by the width (8 bytes per int64).
    let m = refused(DType::Int64, vec![1 << 62], b"");
    assert!(m.contains("the shape overflows"), "{m}");
}

#[test]
fn a_dimension_beyond_int64_is_refused_even_with_a_zero_dimension() {
    let m = refused(DType::Float32, vec![u64::MAX, 0], b"");
    assert!(m.contains("exceeds i64::MAX"), "{m}");
}

#[test]
fn sound_shapes_still_build() {
    let t = Tensor::new(DType::Int64, vec![2, 0, 3], Bytes::new()).expect("empty tensor");
    assert_eq!(t.num_values(), 0);
    let t = Tensor::from_i64s(vec![2, 2], &[1, 2, 3, 4]).expect("2x2");
    assert_eq!(t.num_values(), 4);
}

#[test]
fn a_scalar_made_in_place_is_the_scalar_from_items_makes() {
    // File readers read an item after ITEM_PREFIX spare bytes and make the tensor in
    // place: it must be byte for byte the tensor a copy would have made.
    for (dtype, item) in
        [(DType::Bytes, &b"\x00record\xff"[..]), (DType::String, b"a line"), (DType::String, b"")]
    {
        let mut framed = vec![7u8; sluice_dataset::ITEM_PREFIX];
        framed.extend_from_slice(item);
        let made = Tensor::scalar_item_framed(dtype, framed).expect("a string or bytes scalar");
        let copied = Tensor::from_items(dtype, vec![], &[item]).expect("valid");
        assert_eq!(made, copied);
        assert_eq!(made.items().expect("items"), vec![Bytes::copy_from_slice(item)]);
    }
}

#[test]
fn a_scalar_made_in_place_needs_a_variable_width_dtype_and_its_prefix() {
    assert!(Tensor::scalar_item_framed(DType::Int64, vec![0; 12]).is_none());
    assert!(Tensor::scalar_item_framed(DType::Bytes, vec![0; 3]).is_none());
}
