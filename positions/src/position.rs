//! [`Position`]: a consumer's checkpoint of an exactly-once iteration — which
//! records it consumed — and the union of several consumers' positions that
//! restores a job with a different number of consumers.

use prost::Message;
use sluice_proto::v1 as pb;

use crate::error::PositionError;
use crate::limits::MAX_POSITION_BYTES;
use crate::records::RecordSet;

/// The newest [`pb::Position`] format this build reads. It writes format 2
/// when the position holds spans of first records (`ConsumedRecords.firsts`:
/// one entry for many one-element units, ~10× smaller), else format 1, which
/// builds before format 2 read too.
pub const POSITION_FORMAT: u32 = 2;

/// A consumer's checkpoint. `consumed` holds the records this consumer
/// consumed, plus (below its watermark) every unit all consumers had consumed
/// before their positions of the same generation: restoring the union of one
/// checkpoint's positions delivers every other record exactly once.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Position {
    pub job_name: String,
    pub dataset_id: String,
    pub repetition: u64,
    /// How many positions the consumer had taken before this one.
    pub generation: u64,
    pub consumed: RecordSet,
    /// How many consumers' positions this is the union of (1 for one consumer).
    pub merged_consumers: u32,
}

impl Position {
    pub fn to_pb(&self) -> pb::Position {
        pb::Position {
            format: if self.consumed.has_spans() { 2 } else { 1 },
            job_name: self.job_name.clone(),
            dataset_id: self.dataset_id.clone(),
            repetition: self.repetition,
            generation: self.generation,
            consumed: Some(self.consumed.to_pb()),
            merged_consumers: self.merged_consumers,
        }
    }

    pub fn from_pb(p: &pb::Position) -> Result<Position, PositionError> {
        if p.format > POSITION_FORMAT {
            return Err(PositionError::NewerFormat { found: p.format, supported: POSITION_FORMAT });
        }
        if p.format == 0 {
            return Err(PositionError::Malformed(
                "format 0: not a position written by Sluice".into(),
            ));
        }
        if p.job_name.is_empty() {
            return Err(PositionError::Malformed(
                "no job name: positions exist only for named jobs".into(),
            ));
        }
        let consumed = match &p.consumed {
            Some(c) => RecordSet::from_pb(c)?,
            None => RecordSet::new(),
        };
        Ok(Position {
            job_name: p.job_name.clone(),
            dataset_id: p.dataset_id.clone(),
            repetition: p.repetition,
            generation: p.generation,
            consumed,
            merged_consumers: p.merged_consumers.max(1),
        })
    }

    /// The bytes a checkpoint stores.
    pub fn encode(&self) -> Vec<u8> {
        self.to_pb().encode_to_vec()
    }

    /// Reads a checkpoint's bytes, refusing more than
    /// [`crate::limits::MAX_POSITION_BYTES`] before decoding.
    pub fn decode(bytes: &[u8]) -> Result<Position, PositionError> {
        if bytes.len() > MAX_POSITION_BYTES {
            return Err(PositionError::TooLarge { bytes: bytes.len(), limit: MAX_POSITION_BYTES });
        }
        let p = pb::Position::decode(bytes).map_err(|e| PositionError::Malformed(e.to_string()))?;
        Position::from_pb(&p)
    }

    /// The union of positions of one checkpoint (same job, dataset, repetition and
    /// generation): what restores the job on any number of consumers.
    pub fn merge<'a>(
        positions: impl IntoIterator<Item = &'a Position>,
    ) -> Result<Position, PositionError> {
        let mut it = positions.into_iter();
        let mut out = it.next().ok_or(PositionError::Empty)?.clone();
        for p in it {
            same("job names", &out.job_name, &p.job_name)?;
            same("datasets", &out.dataset_id, &p.dataset_id)?;
            same("repetitions", &out.repetition, &p.repetition)?;
            same("generations (checkpoints)", &out.generation, &p.generation)?;
            out.consumed.union(&p.consumed);
            out.merged_consumers = out.merged_consumers.saturating_add(p.merged_consumers);
        }
        Ok(out)
    }

    /// A key naming what this position restores: readers restoring from equal
    /// positions join one restored iteration. FNV-1a over the encoding (stable
    /// across builds and platforms, unlike std's hasher).
    pub fn restore_key(&self) -> u64 {
        let mut p = self.to_pb();
        p.merged_consumers = 0;
        let bytes = p.encode_to_vec();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h.max(1)
    }
}

fn same<T: PartialEq + std::fmt::Debug>(
    what: &'static str,
    a: &T,
    b: &T,
) -> Result<(), PositionError> {
    if a == b {
        Ok(())
    } else {
        Err(PositionError::Mismatch { what, a: format!("{a:?}"), b: format!("{b:?}") })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Run;

    fn pos(generation: u64, watermark: u64, runs: &[(u64, u64)]) -> Position {
        Position {
            job_name: "j".into(),
            dataset_id: "d".into(),
            repetition: 0,
            generation,
            consumed: RecordSet::from_parts(
                watermark,
                runs.iter().map(|(u, r)| Run::record(*u, *r)),
                [],
            ),
            merged_consumers: 1,
        }
    }

    #[test]
    fn encode_decode_round_trip() {
        let p = pos(3, 10, &[(12, 0), (15, 0)]);
        assert_eq!(Position::decode(&p.encode()).unwrap(), p);
    }

    #[test]
    fn merge_is_the_union_and_counts_consumers() {
        let m = Position::merge([&pos(2, 10, &[(12, 0)]), &pos(2, 11, &[(13, 0)])]).unwrap();
        assert_eq!(m.consumed.watermark(), 11);
        assert!(m.consumed.contains(12, 0) && m.consumed.contains(13, 0));
        assert!(!m.consumed.contains(14, 0));
        assert_eq!(m.merged_consumers, 2);
    }

    #[test]
    fn positions_of_different_checkpoints_do_not_merge() {
        let err = Position::merge([&pos(2, 10, &[]), &pos(3, 10, &[])]).unwrap_err();
        assert!(err.to_string().contains("generations"), "{err}");
    }

    #[test]
    fn garbage_and_oversized_bytes_are_refused() {
        assert!(Position::decode(b"\xff\xff\xff").is_err());
        let big = vec![0u8; crate::limits::MAX_POSITION_BYTES + 1];
        assert!(matches!(Position::decode(&big), Err(PositionError::TooLarge { .. })));
        let mut p = pos(0, 0, &[]).to_pb();
        p.format = POSITION_FORMAT + 1;
        let err = Position::from_pb(&p).unwrap_err();
        assert!(err.to_string().contains("newer"), "{err}");
    }

    #[test]
    fn one_element_units_travel_as_spans_in_format_2_and_plain_runs_in_format_1() {
        // Every other unit of 10,000 from unit 100, plus one unit of two records.
        let mut p = pos(3, 100, &[(20_000, 0), (20_000, 1)]);
        for u in (100..20_100).step_by(2) {
            p.consumed.insert(Run::record(u, 0));
        }
        let bytes = p.encode();
        assert_eq!(p.to_pb().format, 2);
        assert_eq!(Position::decode(&bytes).unwrap(), p);
        let units: Vec<(u64, u64)> = (100..20_100).step_by(2).map(|u| (u, 0)).collect();
        let mut as_runs = pb::ConsumedRecords { watermark: 100, ..Default::default() };
        crate::wire::runs_to_flat(
            units.iter().map(|(u, r)| Run::record(*u, *r)),
            &mut as_runs.runs,
        );
        // Spans of one unit each here (every other unit): a pair instead of a
        // triple per unit; consecutive units (below) save nearly all of it.
        assert!(
            bytes.len() < as_runs.encoded_len(),
            "{} vs {}",
            bytes.len(),
            as_runs.encoded_len()
        );
        let mut dense = pos(3, 100, &[]);
        dense.consumed.insert_firsts(100, 50_000);
        assert!(dense.encode().len() < 64, "{} bytes for 50,000 units", dense.encode().len());
        assert_eq!(Position::decode(&dense.encode()).unwrap(), dense);
        let plain = pos(3, 100, &[(200, 1), (200, 2)]);
        assert_eq!(plain.to_pb().format, 1, "no spans: a format builds before spans read");
    }

    #[test]
    fn spans_past_the_unit_bound_or_ragged_are_refused() {
        let mut p = pos(1, 0, &[]).to_pb();
        let c = p.consumed.as_mut().unwrap();
        c.firsts = vec![0, crate::limits::MAX_RUNS as u64 + 1];
        let err = Position::from_pb(&p).unwrap_err();
        assert!(err.to_string().contains("more than"), "{err}");
        p.consumed.as_mut().unwrap().firsts = vec![0, 5, 9];
        assert!(Position::from_pb(&p).is_err());
        p.consumed.as_mut().unwrap().firsts = vec![u64::MAX, 5];
        assert!(Position::from_pb(&p).is_err(), "a span past u64");
    }

    #[test]
    fn restore_key_ignores_the_consumer_count_only() {
        let a = pos(1, 5, &[(6, 0)]);
        let mut b = a.clone();
        b.merged_consumers = 4;
        assert_eq!(a.restore_key(), b.restore_key());
        assert_ne!(a.restore_key(), pos(1, 5, &[(7, 0)]).restore_key());
    }
}
