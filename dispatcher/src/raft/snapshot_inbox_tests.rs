use openraft::{SnapshotMeta, Vote};

use super::*;

fn chunk(id: &str, offset: u64, data: &[u8], done: bool) -> InstallSnapshotRequest<TypeConfig> {
    InstallSnapshotRequest {
        vote: Vote::new_committed(1, 2),
        meta: SnapshotMeta { snapshot_id: id.into(), ..Default::default() },
        offset,
        data: data.to_vec(),
        done,
    }
}

fn complete(r: Result<Received, PeerRefusal>) -> Vec<u8> {
    match r {
        Ok(Received::Complete(req)) => {
            assert_eq!((req.offset, req.done), (0, true));
            req.data
        }
        other => panic!("expected the whole snapshot, got {other:?}"),
    }
}

#[test]
fn chunks_are_gathered_and_a_resent_one_replaces_what_followed() {
    let inbox = SnapshotInbox::default();
    assert!(matches!(inbox.receive(chunk("a", 0, b"abc", false)), Ok(Received::More)));
    assert!(matches!(inbox.receive(chunk("a", 3, b"def", false)), Ok(Received::More)));
    assert!(matches!(inbox.receive(chunk("a", 3, b"DEF", false)), Ok(Received::More)));
    assert_eq!(complete(inbox.receive(chunk("a", 6, b"g", true))), b"abcDEFg");
    // Taken: the next chunk of the same id finds no stream.
    let r = inbox.receive(chunk("a", 7, b"h", true));
    assert!(matches!(r, Ok(Received::Mismatch(_))), "{r:?}");
}

#[test]
fn a_gap_or_a_chunk_of_no_stream_is_a_mismatch_never_filled_in() {
    let inbox = SnapshotInbox::default();
    assert!(matches!(inbox.receive(chunk("a", 5, b"x", false)), Ok(Received::Mismatch(_))));
    assert!(matches!(inbox.receive(chunk("a", 0, b"ab", false)), Ok(Received::More)));
    assert!(matches!(inbox.receive(chunk("a", 3, b"x", false)), Ok(Received::Mismatch(_))));
    // Another id at offset 0 starts over.
    assert_eq!(complete(inbox.receive(chunk("b", 0, b"new", true))), b"new");
}

#[test]
fn a_chunk_past_the_bound_is_refused_before_anything_is_allocated() {
    let inbox = SnapshotInbox::default();
    assert!(matches!(inbox.receive(chunk("a", 0, b"ab", false)), Ok(Received::More)));
    let r = inbox.receive(chunk("a", MAX_SNAPSHOT_BYTES, b"x", true));
    assert!(matches!(r, Err(PeerRefusal::SnapshotTooLarge { .. })), "{r:?}");
    let r = inbox.receive(chunk("a", u64::MAX, b"x", true));
    assert!(matches!(r, Err(PeerRefusal::SnapshotTooLarge { .. })), "{r:?}");
}

#[test]
fn a_chunk_whose_meta_changed_is_refused() {
    let inbox = SnapshotInbox::default();
    assert!(matches!(inbox.receive(chunk("a", 0, b"ab", false)), Ok(Received::More)));
    let mut other = chunk("a", 2, b"cd", true);
    other.meta.last_log_id = Some(openraft::LogId::new(openraft::CommittedLeaderId::new(1, 2), 9));
    let r = inbox.receive(other);
    assert!(matches!(r, Err(PeerRefusal::SnapshotMetaChanged { .. })), "{r:?}");
}
