//! Bounds on a serialized `tf.train.Example`, checked by walking its wire format
//! *before* prost decodes it.
//!
//! Why: decoding allocates more than the record's size. Each feature becomes a map
//! entry, each `bytes_list` item a `Bytes` handle (32 bytes for as little as 2 bytes of
//! input), each varint of an `int64_list` 8 bytes: a 256 MiB record (the TFRecord
//! bound) of tiny features or items would need gigabytes. The walk counts features
//! and values without allocating and refuses a record over
//! [`MAX_EXAMPLE_FEATURES`] or [`MAX_EXAMPLE_VALUES`], naming the limit.
//!
//! The walk follows the fixed nesting `Example.features` → `Features.feature` (map
//! entries) → `Feature.kind` → the list's `value`, skipping unknown fields, with no
//! recursion. Malformed framing stops it early: prost then reports the error.

use crate::error::DatasetError;

/// Upper bound of the features of one Example.
pub const MAX_EXAMPLE_FEATURES: u64 = 1 << 16;
/// Upper bound of the values of one Example, all features together (items of
/// `bytes_list`s, floats, int64s): 4 Mi, e.g. a 2048 × 2048 image as a float list.
pub const MAX_EXAMPLE_VALUES: u64 = 1 << 22;

/// Counts of one Example.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub features: u64,
    pub values: u64,
}

/// Checks `record` against the limits; `Ok` also for a record too malformed to walk
/// (decoding it then fails with prost's error).
pub(crate) fn check(record: &[u8]) -> Result<(), DatasetError> {
    let c = count(record);
    if c.features > MAX_EXAMPLE_FEATURES {
        return Err(DatasetError::BadExample(format!(
            "the record has {} features, over the limit of {MAX_EXAMPLE_FEATURES} \
             (MAX_EXAMPLE_FEATURES)",
            c.features
        )));
    }
    if c.values > MAX_EXAMPLE_VALUES {
        return Err(DatasetError::BadExample(format!(
            "the record has {} values, over the limit of {MAX_EXAMPLE_VALUES} \
             (MAX_EXAMPLE_VALUES)",
            c.values
        )));
    }
    Ok(())
}

/// The features and values of `record`, as far as its framing goes.
pub(crate) fn count(record: &[u8]) -> Counts {
    let mut c = Counts::default();
    for (field, value) in Fields(record) {
        let (1, Value::Bytes(features)) = (field, value) else { continue };
        for (field, value) in Fields(features) {
            let (1, Value::Bytes(entry)) = (field, value) else { continue };
            c.features += 1;
            for (field, value) in Fields(entry) {
                let (2, Value::Bytes(feature)) = (field, value) else { continue };
                for (kind, value) in Fields(feature) {
                    let Value::Bytes(list) = value else { continue };
                    c.values += list_values(kind, list);
                }
            }
        }
    }
    c
}

/// The values of a list of `kind` (1 bytes, 2 float, 3 int64): items, packed or not.
fn list_values(kind: u64, list: &[u8]) -> u64 {
    let mut n = 0u64;
    for (field, value) in Fields(list) {
        if field != 1 {
            continue;
        }
        n += match (kind, value) {
            (2, Value::Bytes(packed)) => packed.len() as u64 / 4,
            // One varint ends at each byte without the continuation bit.
            (3, Value::Bytes(packed)) => packed.iter().filter(|b| **b < 0x80).count() as u64,
            _ => 1,
        };
    }
    n
}

/// A field's value, as far as the walk needs it.
enum Value<'a> {
    Bytes(&'a [u8]),
    Scalar,
}

/// The `(field number, value)` pairs of one message; ends at the end or at
/// malformed framing.
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = (u64, Value<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        let tag = varint(&mut self.0)?;
        let value = match tag & 7 {
            0 => varint(&mut self.0).map(|_| Value::Scalar),
            1 => take(&mut self.0, 8).map(|_| Value::Scalar),
            2 => {
                let len = usize::try_from(varint(&mut self.0)?).ok()?;
                take(&mut self.0, len).map(Value::Bytes)
            }
            5 => take(&mut self.0, 4).map(|_| Value::Scalar),
            _ => None, // groups (3, 4) and invalid types: not in an Example
        };
        match value {
            Some(v) => Some((tag >> 3, v)),
            None => {
                self.0 = &[];
                None
            }
        }
    }
}

fn varint(buf: &mut &[u8]) -> Option<u64> {
    let mut v = 0u64;
    for i in 0..10 {
        let (&b, rest) = buf.split_first()?;
        *buf = rest;
        v |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            return Some(v);
        }
    }
    None
}

fn take<'a>(buf: &mut &'a [u8], len: usize) -> Option<&'a [u8]> {
    if buf.len() < len {
        return None;
    }
    let (head, rest) = buf.split_at(len);
    *buf = rest;
    Some(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::example::{encode, Feature};

    #[test]
    fn counts_match_what_prost_decodes() {
        let record = encode([
            ("a".to_string(), Feature::bytes([&b"x"[..], b"yy", b""])),
            ("b".to_string(), Feature::floats(vec![1.0, 2.0])),
            ("c".to_string(), Feature::ints(vec![0, -1, 300, i64::MAX])),
            ("d".to_string(), Feature { kind: None }),
        ]);
        assert_eq!(count(&record), Counts { features: 4, values: 3 + 2 + 4 });
        check(&record).expect("within the limits");
    }

    #[test]
    fn too_many_features_or_values_are_refused_naming_the_limit() {
        let many = (0..=MAX_EXAMPLE_FEATURES).map(|i| (i.to_string(), Feature { kind: None }));
        let err = check(&encode(many)).expect_err("too many features").to_string();
        assert!(err.contains("MAX_EXAMPLE_FEATURES"), "{err}");
        // Empty byte items: 2 bytes of input each, 32 bytes each once decoded.
        let items = vec![&b""[..]; MAX_EXAMPLE_VALUES as usize + 1];
        let err = check(&encode([("x".to_string(), Feature::bytes(items))]))
            .expect_err("too many values")
            .to_string();
        assert!(err.contains("MAX_EXAMPLE_VALUES"), "{err}");
        let ints = vec![0i64; MAX_EXAMPLE_VALUES as usize + 1];
        assert!(check(&encode([("x".to_string(), Feature::ints(ints))])).is_err());
    }

    #[test]
    fn malformed_framing_ends_the_walk_without_panicking() {
        for bad in [&[0x0a, 0xff][..], &[0x0a, 0x05, 0x0a], &[0xff; 11], &[0x0b, 0x00]] {
            let _ = count(bad);
            check(bad).expect("left to prost");
        }
    }
}
