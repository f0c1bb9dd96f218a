//! The wire contract beyond the messages of `sluice.proto`: what a peer reads off a
//! `tonic::Status` besides its code (a [`Reason`], the leader's address), and the
//! framing of the element route that workers serve and readers call without
//! tonic's codec.
//!
//! Why here: each of these is written by one crate and read by another. Defined
//! once, set where the error is made and matched where it is read, nothing in
//! Sluice decides what to do by comparing message text, and a reworded message
//! cannot change behaviour.

use tonic::metadata::MetadataValue;
use tonic::Status;

/// Metadata key carrying the leader's address (`host:port`) when a dispatcher that
/// is not the leader refuses a write. Clients follow it instead of trying each
/// address in turn.
pub const LEADER_METADATA: &str = "sluice-leader";

/// Metadata key a client sets on a dispatcher call with the addresses (comma
/// separated) that refused it a connection earlier in the same call: a
/// follower that would name one of them as leader holds its refusal until it
/// can name a live leader (the dispatcher's `Core::held`), instead of sending
/// the client to a dead address. At most [`LEADER_DOWN_MAX_BYTES`] are read.
pub const LEADER_DOWN_METADATA: &str = "sluice-leader-down";
pub const LEADER_DOWN_MAX_BYTES: usize = 1024;

/// Metadata key carrying a [`Reason`] (its [`Reason::as_str`]).
pub const REASON_METADATA: &str = "sluice-reason";

/// Why a call failed, when its code alone does not tell the caller what to do.
/// Travels as [`REASON_METADATA`] beside the status's code and human message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// The dispatcher deleted the task on this worker before it finished (its
    /// iteration was released or the task was voted out): the task's remaining
    /// elements are gone for good; do not retry this task.
    TaskDeleted,
    /// The worker is alive but has not yet heard of the task from the dispatcher
    /// (it learns of it in its next heartbeat answer): retry the same worker.
    TaskNotYetKnown,
    /// A user's function in the pipeline (a Python stage) failed: the status's
    /// details carry what failed as JSON (`sluice_dataset::UserFunctionFailure`:
    /// the stage, the function, the worker, the exception and its traceback).
    /// The pipeline ended; retrying runs the same function on the same element.
    UserFunction,
}

impl Reason {
    const ALL: [Reason; 3] = [Reason::TaskDeleted, Reason::TaskNotYetKnown, Reason::UserFunction];

    /// The metadata value: stable, lower-case words joined by `-`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Reason::TaskDeleted => "task-deleted",
            Reason::TaskNotYetKnown => "task-not-yet-known",
            Reason::UserFunction => "user-function",
        }
    }

    /// The reason a metadata value names; `None` for a value this build does not know
    /// (a newer peer's reason): the caller then decides by the code alone.
    pub fn parse(value: &str) -> Option<Reason> {
        Reason::ALL.into_iter().find(|r| r.as_str() == value)
    }

    /// `status` with this reason attached.
    pub fn attach(self, mut status: Status) -> Status {
        status.metadata_mut().insert(REASON_METADATA, MetadataValue::from_static(self.as_str()));
        status
    }

    /// The reason attached to `status`, if any.
    pub fn of(status: &Status) -> Option<Reason> {
        Reason::parse(status.metadata().get(REASON_METADATA)?.to_str().ok()?)
    }
}

/// `status` naming `address` as the leader's; an address that cannot travel as
/// metadata (not visible ASCII) is left out.
pub fn with_leader_address(mut status: Status, address: &str) -> Status {
    if let Ok(value) = address.parse() {
        status.metadata_mut().insert(LEADER_METADATA, value);
    }
    status
}

/// The leader's address a refusing dispatcher named in `status`, if any.
pub fn leader_address(status: &Status) -> Option<&str> {
    status.metadata().get(LEADER_METADATA)?.to_str().ok()
}

/// The most splits one `GetSplit` may take (`GetSplitRequest.max_splits`): the
/// dispatcher clamps a request to it, a worker sizes its grants within it.
pub const MAX_SPLITS_PER_GRANT: u32 = 1024;

/// The element route: `Worker.GetElements` as a plain HTTP/2 gRPC call, served by
/// workers (`sluice-worker`'s `route`) and called by readers (`sluice-client`'s
/// `worker_stream`) without tonic's codec, so tensor data moves without copies.
pub mod element_route {
    /// The request path (the generated service's name and method).
    pub const PATH: &str = "/sluice.v1.Worker/GetElements";
    /// gRPC's length prefix before each message: one compression flag byte, then
    /// the message length as a big-endian `u32`.
    pub const MESSAGE_PREFIX_BYTES: usize = 5;
    /// The largest `GetElementsRequest` a worker accepts (the message's length, the
    /// prefix not counted). A request names a task and a consumer: far below this.
    pub const MAX_REQUEST_BYTES: usize = 64 * 1024;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_reason_round_trips_through_a_status() {
        for r in Reason::ALL {
            let status = r.attach(Status::not_found("gone"));
            assert_eq!(Reason::of(&status), Some(r));
            // Through the headers a status travels in, as a peer decodes them.
            let mut headers = http::HeaderMap::new();
            status.add_header(&mut headers).unwrap();
            let back = Status::from_header_map(&headers).unwrap();
            assert_eq!(Reason::of(&back), Some(r));
        }
    }

    #[test]
    fn a_status_without_or_with_an_unknown_reason_has_none() {
        assert_eq!(Reason::of(&Status::unavailable("x")), None);
        let mut s = Status::unavailable("x");
        s.metadata_mut().insert(REASON_METADATA, MetadataValue::from_static("from-the-future"));
        assert_eq!(Reason::of(&s), None);
    }

    #[test]
    fn the_leader_address_round_trips() {
        let s = with_leader_address(Status::unavailable("not the leader"), "127.0.0.1:5051");
        assert_eq!(leader_address(&s), Some("127.0.0.1:5051"));
        let s = with_leader_address(Status::unavailable("x"), "bad\naddress");
        assert_eq!(leader_address(&s), None);
    }

    #[test]
    fn the_element_route_path_is_the_generated_method() {
        let name = crate::v1::worker_server::SERVICE_NAME;
        assert_eq!(element_route::PATH, format!("/{name}/GetElements"));
    }
}
