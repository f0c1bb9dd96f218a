//! Serde for a [`DatasetDef`] inside commands and state: its protobuf encoding as
//! bytes. The definition's own serde form is the JSON spec (untagged arguments,
//! optional fields), which compact binary codecs cannot read back; protobuf is the
//! stable wire form anyway.

use prost::Message;
use serde::{Deserializer, Serializer};
use sluice_dataset::DatasetDef;
use sluice_proto::v1 as pb;

pub fn serialize<S: Serializer>(def: &DatasetDef, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_bytes(&pb::DatasetDef::from(def).encode_to_vec())
}

pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DatasetDef, D::Error> {
    let bytes: Vec<u8> = serde_bytes_compat(d)?;
    let wire = pb::DatasetDef::decode(bytes.as_slice()).map_err(serde::de::Error::custom)?;
    DatasetDef::try_from(wire).map_err(serde::de::Error::custom)
}

/// Accepts what `serialize_bytes` wrote, from any serde format (a byte buffer or a
/// sequence of u8).
fn serde_bytes_compat<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("protobuf-encoded DatasetDef bytes")
        }
        fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
            let mut out = Vec::new();
            while let Some(b) = seq.next_element::<u8>()? {
                out.push(b);
            }
            Ok(out)
        }
    }
    d.deserialize_byte_buf(V)
}
