//! The `int32` dtype end to end in the crate: building and checking a tensor, its
//! wire form, a `from_tensor_slices` source of it, and batching it (e.g. packed
//! token ids, which would take twice the bytes as int64).

mod common;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use bytes::Bytes;
use common::{json, run};
use serde_json::json;
use sluice_dataset::{DType, DatasetDef, DatasetError, Element, Tensor};
use sluice_proto::v1 as pb;

fn i32s(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

#[test]
fn an_int32_tensor_is_four_little_endian_bytes_a_value() {
    assert_eq!((DType::Int32.width(), DType::Int32.name()), (Some(4), "int32"));
    let values = [i32::MIN, -1, 0, 7, i32::MAX];
    let t = Tensor::from_i32s(vec![5], &values).expect("int32 tensor");
    assert_eq!((t.dtype(), t.byte_len()), (DType::Int32, 20));
    assert_eq!(t.data().as_ref(), i32s(&values).as_slice());
    assert_eq!(t.i32_values().expect("int32 values"), values);
    assert_eq!(t.to_json(), json!([i32::MIN, -1, 0, 7, i32::MAX]));
    assert_eq!(Tensor::scalar_i32(-3).to_json(), json!(-3));
    // Not an int64 tensor: reading it as one says so, and the other way round.
    match t.i64_values() {
        Err(DatasetError::TypeMismatch { expected, found }) => {
            assert_eq!((expected.as_str(), found.as_str()), ("int64", "int32"))
        }
        other => panic!("expected a type mismatch, got {other:?}"),
    }
    assert!(Tensor::scalar_i64(1).i32_values().is_err());
}

#[test]
fn an_int32_payload_of_the_wrong_size_is_refused() {
    // 8 bytes are two int32 values, not three (nor one int64 value's worth of int32).
    let e = Tensor::new(DType::Int32, vec![3], Bytes::from(i32s(&[1, 2]))).unwrap_err();
    assert!(e.to_string().contains("int32 tensor of shape [3] needs 12 bytes, got 8"), "{e}");
    let e = Tensor::new(DType::Int32, vec![1 << 62], Bytes::new()).unwrap_err();
    assert!(e.to_string().contains("the shape overflows"), "{e}");
}

#[test]
fn int32_round_trips_through_the_wire_form() {
    let t = Tensor::from_i32s(vec![2, 2], &[1, -2, 3, i32::MAX]).expect("tensor");
    let wire = pb::Tensor::from(t.clone());
    assert_eq!(wire.dtype, pb::DType::Int32 as i32);
    assert_eq!(Tensor::try_from(wire).expect("back"), t);
    let e = Element::new(vec![t, Tensor::scalar_i64(5)]);
    assert_eq!(Element::try_from(pb::Element::from(e.clone())).expect("element back"), e);
    // A dtype code past the last one is still refused, naming it.
    let unknown = pb::Tensor { dtype: 99, shape: vec![], data: Bytes::from(i32s(&[1])) };
    let err = Tensor::try_from(unknown).unwrap_err();
    assert!(err.to_string().contains("unknown dtype 99"), "{err}");
}

#[test]
fn from_tensor_slices_slices_an_int32_matrix_into_int32_rows() {
    let tokens = i32s(&[1, 2, 3, 4, 5, i32::MIN]);
    let spec = json!({"stages": [{"from_tensor_slices": {"tensors": [
        {"dtype": "int32", "shape": [3, 2], "base64": STANDARD.encode(&tokens)}
    ]}}]});
    let def = DatasetDef::from_json(&spec.to_string()).expect("an int32 tensor parses");
    let rows: Vec<Vec<i32>> = run(&def)
        .into_iter()
        .map(|r| {
            let t = r.expect("row").components.remove(0);
            assert_eq!((t.dtype(), t.shape()), (DType::Int32, &[2][..]));
            t.i32_values().expect("int32")
        })
        .collect();
    assert_eq!(rows, vec![vec![1, 2], vec![3, 4], vec![5, i32::MIN]]);
    // The spec prints back with the dtype name `int32`.
    let printed: serde_json::Value = serde_json::from_str(&def.to_json_compact()).expect("json");
    assert_eq!(printed["stages"][0], spec["stages"][0]);
    // A payload sized for int64 is refused with the int32 arithmetic.
    let wrong = json!({"stages": [{"from_tensor_slices": {"tensors": [
        {"dtype": "int32", "shape": [3, 2], "base64": STANDARD.encode([0u8; 48])}
    ]}}]});
    let e = DatasetDef::from_json(&wrong.to_string()).unwrap_err().to_string();
    assert!(e.contains("int32 tensor of shape [3, 2] needs 6 values x 4 bytes = 24 bytes"), "{e}");
}

#[test]
fn batch_stacks_int32_rows_into_an_int32_batch() {
    let rows = Tensor::from_i32s(vec![5, 2], &[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]).expect("rows");
    let def = DatasetDef::from_tensors(vec![rows]).batch(2, false);
    let out = run(&def);
    let first = &out[0].as_ref().expect("batch").components[0];
    assert_eq!((first.dtype(), first.shape()), (DType::Int32, &[2, 2][..]));
    assert_eq!(json(&def), vec![json!([[0, 1], [2, 3]]), json!([[4, 5], [6, 7]]), json!([[8, 9]])]);
    // int32 and int64 rows do not stack together.
    let mixed = DatasetDef::from_tensors(vec![Tensor::from_i32s(vec![1], &[1]).expect("int32")])
        .concatenate(DatasetDef::from_ints(vec![2]))
        .batch(2, false);
    let e = run(&mixed).into_iter().find_map(Result::err).expect("a mismatch error");
    assert!(e.to_string().contains("int32") && e.to_string().contains("int64"), "{e}");
}
