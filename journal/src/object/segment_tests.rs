use super::*;

fn sample() -> Vec<Record> {
    vec![
        Record::new(Kind::Claim, 0, Bytes::new()),
        Record::new(Kind::Entry, 7, Bytes::from_static(b"seven")),
        Record::new(Kind::Entry, 8, Bytes::new()),
        Record::new(Kind::Truncate, 8, Bytes::new()),
        Record::new(Kind::Purge, 6, Bytes::from_static(b"marker")),
    ]
}

#[test]
fn round_trips() {
    let bytes = encode(42, 9, &sample()).unwrap();
    let decoded = decode(&bytes, 42).unwrap();
    assert_eq!(decoded.failure, None);
    assert_eq!(decoded.records, sample());
}

#[test]
fn every_cut_is_detected_at_a_record_boundary() {
    let bytes = encode(1, 9, &sample()).unwrap();
    let full = decode(&bytes, 1).unwrap().records.len();
    for cut in 0..bytes.len() {
        let decoded = decode(&bytes.slice(..cut), 1).unwrap();
        let (offset, _) = decoded.failure.clone().unwrap_or((cut as u64, String::new()));
        // Whatever verified is a prefix of the records, and the failure is where it stopped.
        assert!(decoded.records.len() < full || cut == bytes.len());
        assert_eq!(decoded.records[..], sample()[..decoded.records.len()]);
        assert!(offset <= cut as u64);
    }
}

#[test]
fn bit_flips_are_detected() {
    let bytes = encode(1, 9, &sample()).unwrap();
    for i in 0..bytes.len() {
        let mut damaged = bytes.to_vec();
        damaged[i] ^= 0x10;
        match decode(&Bytes::from(damaged), 1) {
            Ok(decoded) => assert!(decoded.failure.is_some(), "flip at {i} went unnoticed"),
            Err(UnknownVersion(_)) => assert!((4..8).contains(&i)),
        }
    }
}

#[test]
fn unknown_version_and_wrong_name_are_reported() {
    let mut bytes = encode(3, 9, &sample()).unwrap().to_vec();
    bytes[4] = 2;
    assert!(matches!(decode(&Bytes::from(bytes), 3), Err(UnknownVersion(2))));
    let bytes = encode(3, 9, &sample()).unwrap();
    let (offset, why) = decode(&bytes, 4).unwrap().failure.unwrap();
    assert_eq!(offset, 8);
    assert!(why.contains("seq 3"), "{why}");
}

#[test]
fn torn_ack_round_trips() {
    assert_eq!(parse_torn_ack(&torn_ack(5, 100)), Some((5, 100)));
    assert_eq!(parse_torn_ack(b""), None);
}
