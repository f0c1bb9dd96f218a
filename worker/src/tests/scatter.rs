//! The zero-copy encoding of `ElementBatch`: byte for byte tonic's framing of
//! prost's encoding, with large tensor data sent as the tensors' own memory.

use bytes::Bytes;
use prost::Message;
use sluice_proto::v1 as pb;

use crate::scatter::{encode, TooLarge, ZERO_COPY_MIN_BYTES};

const NO_LIMIT: usize = usize::MAX;

/// What tonic sends for `batch`: the gRPC prefix, then `encode_to_vec`.
fn framed(batch: &pb::ElementBatch) -> Vec<u8> {
    let encoded = batch.encode_to_vec();
    let mut out = vec![0u8];
    out.extend_from_slice(&u32::try_from(encoded.len()).expect("fits").to_be_bytes());
    out.extend_from_slice(&encoded);
    out
}

fn tensor(dtype: pb::DType, shape: &[u64], data: Bytes) -> pb::Tensor {
    pb::Tensor { dtype: dtype as i32, shape: shape.to_vec(), data }
}

fn element(components: Vec<pb::Tensor>, names: &[&str]) -> pb::Element {
    pb::Element {
        components,
        names: names.iter().map(|n| n.to_string()).collect(),
        ..Default::default()
    }
}

fn batch(elements: Vec<pb::Element>, end_of_sequence: bool) -> pb::ElementBatch {
    pb::ElementBatch { elements, end_of_sequence, compressed: None, ..Default::default() }
}

/// `len` bytes of a pattern, sliced out of a larger buffer as element data is.
fn data(len: usize, seed: u8) -> Bytes {
    let buffer: Vec<u8> =
        (0..len + 16).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
    Bytes::from(buffer).slice(8..8 + len)
}

fn scalar(dtype: pb::DType, bytes: &[u8]) -> pb::Element {
    element(vec![tensor(dtype, &[], Bytes::copy_from_slice(bytes))], &[])
}

fn string_item(s: &str) -> Vec<u8> {
    let mut out = u32::try_from(s.len()).expect("short").to_le_bytes().to_vec();
    out.extend_from_slice(s.as_bytes());
    out
}

/// Every kind of batch the worker sends, and some it does not (defaults, unknown
/// dtypes) that prost still encodes in its own way.
fn batches() -> Vec<(&'static str, pb::ElementBatch)> {
    use pb::DType as D;
    vec![
        ("empty", batch(vec![], false)),
        ("end_of_sequence only", batch(vec![], true)),
        (
            "scalars of every dtype",
            batch(
                vec![
                    scalar(D::Int64, &(-7i64).to_le_bytes()),
                    scalar(D::Float32, &1.5f32.to_le_bytes()),
                    scalar(D::Float64, &(-2.25f64).to_le_bytes()),
                    scalar(D::String, &string_item("héllo")),
                    scalar(D::Bytes, &string_item("\0\x01\x02")),
                    scalar(D::Bool, &[1]),
                    scalar(D::Uint8, &[255]),
                    scalar(D::Int32, &(-70_000i32).to_le_bytes()),
                    scalar(D::DtypeUnspecified, &[9, 9]),
                ],
                false,
            ),
        ),
        (
            "names and several components",
            batch(
                vec![element(
                    vec![
                        tensor(D::Int64, &[2], data(16, 1)),
                        tensor(D::Float32, &[2, 3], data(24, 2)),
                        tensor(D::String, &[], Bytes::from(string_item("x"))),
                    ],
                    &["ids", "", "label"],
                )],
                false,
            ),
        ),
        (
            "tensors around the threshold",
            batch(
                vec![element(
                    vec![
                        tensor(
                            D::Uint8,
                            &[ZERO_COPY_MIN_BYTES as u64 - 1],
                            data(ZERO_COPY_MIN_BYTES - 1, 3),
                        ),
                        tensor(
                            D::Uint8,
                            &[ZERO_COPY_MIN_BYTES as u64],
                            data(ZERO_COPY_MIN_BYTES, 4),
                        ),
                        tensor(
                            D::Uint8,
                            &[ZERO_COPY_MIN_BYTES as u64 + 1],
                            data(ZERO_COPY_MIN_BYTES + 1, 5),
                        ),
                    ],
                    &[],
                )],
                false,
            ),
        ),
        (
            "a 1 MiB image with small neighbours",
            batch(
                vec![element(
                    vec![
                        tensor(D::Uint8, &[512, 512, 4], data(1 << 20, 6)),
                        tensor(D::Int64, &[], data(8, 7)),
                    ],
                    &["image", "label"],
                )],
                true,
            ),
        ),
        (
            "empty data and default tensors",
            batch(
                vec![
                    element(vec![tensor(D::Float32, &[0, 3], Bytes::new())], &[]),
                    element(vec![pb::Tensor::default()], &[""]),
                    element(vec![], &[]),
                ],
                false,
            ),
        ),
        (
            "unknown dtype and extreme shape",
            batch(
                vec![element(
                    vec![pb::Tensor {
                        dtype: -1,
                        shape: vec![u64::MAX, 0, 1],
                        data: data(5000, 8),
                    }],
                    &[],
                )],
                false,
            ),
        ),
        (
            "an exactly-once message: positions, and an element that kept its origin",
            pb::ElementBatch {
                elements: vec![pb::Element {
                    origin: Some(pb::Origin { runs: vec![3, 0, 1], unit_ends: vec![3, 1] }),
                    ..scalar(D::Int64, &5i64.to_le_bytes())
                }],
                end_of_sequence: true,
                positions: Some(pb::Positions {
                    runs_per_element: vec![1, 1],
                    runs: vec![3, 0, 1, 4, 0, 2],
                    unit_ends: vec![4, 2],
                }),
                ..Default::default()
            },
        ),
        (
            "long positions columns of every varint width",
            pb::ElementBatch {
                positions: Some(pb::Positions {
                    runs_per_element: (0..300).map(|i| i % 3).collect(),
                    runs: (0..600)
                        .map(|i| if i % 7 == 0 { u64::MAX } else { 1 << (i % 64) })
                        .collect(),
                    unit_ends: vec![u64::MAX, 0, 127, 128, 16_383, 16_384],
                }),
                ..Default::default()
            },
        ),
        (
            "positions outside a compressed frame",
            pb::ElementBatch {
                compressed: Some(pb::CompressedElements {
                    codec: pb::Compression::Zstd as i32,
                    raw_bytes: 10,
                    data: data(100, 10),
                }),
                positions: Some(pb::Positions { runs_per_element: vec![0], ..Default::default() }),
                ..Default::default()
            },
        ),
        (
            "a compressed frame around the threshold, with end_of_sequence",
            pb::ElementBatch {
                elements: vec![],
                end_of_sequence: true,
                compressed: Some(pb::CompressedElements {
                    codec: pb::Compression::Zstd as i32,
                    raw_bytes: 1 << 20,
                    data: data(ZERO_COPY_MIN_BYTES, 9),
                }),
                ..Default::default()
            },
        ),
        (
            "a small compressed frame and a default one",
            pb::ElementBatch {
                elements: vec![],
                end_of_sequence: false,
                compressed: Some(pb::CompressedElements {
                    codec: pb::Compression::Zstd as i32,
                    raw_bytes: 600,
                    data: data(40, 10),
                }),
                ..Default::default()
            },
        ),
        (
            "a default compressed frame",
            pb::ElementBatch { compressed: Some(Default::default()), ..Default::default() },
        ),
        (
            "several elements then end_of_sequence",
            batch(
                (0..10u8)
                    .map(|i| {
                        let len = if i % 2 == 0 { 100 } else { 20_000 + usize::from(i) };
                        element(vec![tensor(D::Bytes, &[], data(len, i))], &["value"])
                    })
                    .collect(),
                true,
            ),
        ),
    ]
}

#[test]
fn chunks_concatenate_to_tonics_framing_of_prost_encoding() {
    for (name, batch) in batches() {
        let expected = framed(&batch);
        for threshold in [0, 1, 64, ZERO_COPY_MIN_BYTES, NO_LIMIT] {
            let chunks = encode(&batch, threshold, NO_LIMIT).expect("within the limit");
            assert!(chunks.iter().all(|c| !c.is_empty()), "{name}: an empty chunk");
            let joined: Vec<u8> = chunks.concat();
            assert!(joined == expected, "{name}, threshold {threshold}: bytes differ from prost");
        }
    }
}

#[test]
fn large_tensor_data_is_sent_as_the_tensors_own_memory() {
    for (name, batch) in batches() {
        let chunks = encode(&batch, ZERO_COPY_MIN_BYTES, NO_LIMIT).expect("within the limit");
        let tensors = batch.elements.iter().flat_map(|e| &e.components);
        let mut shared = 0;
        for t in tensors.filter(|t| t.data.len() >= ZERO_COPY_MIN_BYTES) {
            shared += t.data.len();
            let chunk = chunks.iter().find(|c| c.as_ptr() == t.data.as_ptr());
            let chunk = chunk.unwrap_or_else(|| panic!("{name}: tensor data was copied"));
            assert_eq!(chunk.len(), t.data.len(), "{name}: the whole tensor, nothing else");
        }
        // Everything else (keys, lengths, small tensors) is encoded, and only that.
        let encoded: usize = chunks.iter().map(Bytes::len).sum::<usize>() - shared;
        assert_eq!(encoded, 5 + batch.encoded_len() - shared, "{name}");
    }
}

#[test]
fn small_tensor_data_is_copied_into_the_encoded_chunks() {
    let small = data(ZERO_COPY_MIN_BYTES - 1, 9);
    let batch = batch(vec![element(vec![tensor(pb::DType::Uint8, &[], small.clone())], &[])], true);
    let chunks = encode(&batch, ZERO_COPY_MIN_BYTES, NO_LIMIT).expect("within the limit");
    assert_eq!(chunks.len(), 1, "one chunk for a message of small tensors");
    let start = small.as_ptr() as usize;
    let end = start + small.len();
    let inside = |c: &Bytes| (c.as_ptr() as usize) < end && start < c.as_ptr() as usize + c.len();
    assert!(!chunks.iter().any(inside), "a small tensor is copied, not referenced");
}

#[test]
fn a_message_over_the_limit_is_refused() {
    let batch =
        batch(vec![element(vec![tensor(pb::DType::Uint8, &[], data(10_000, 1))], &[])], true);
    let len = batch.encoded_len();
    assert!(encode(&batch, ZERO_COPY_MIN_BYTES, len).is_ok(), "exactly the limit is fine");
    let refused = encode(&batch, ZERO_COPY_MIN_BYTES, len - 1).expect_err("over the limit");
    assert_eq!(refused, TooLarge { len, limit: len - 1 });
    assert!(refused.to_string().contains("encoded message length too large"), "{refused}");
}
