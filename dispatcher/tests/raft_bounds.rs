//! The byte bounds of the replicated log, on a real (one-node, in-memory) Raft
//! group: a command over the entry cap is refused when proposed, with its size
//! and the cap named, and never reaches the log (where it would make an
//! AppendEntries no peer accepts, retried for ever while nothing commits).

use std::time::Duration;

use openraft::ServerState;
use sluice_dataset::DatasetDef;
use sluice_dispatcher::raft::MAX_ENTRY_BYTES;
use sluice_dispatcher::{
    Command, Core, DispatcherConfig, Limits, ProposeError, Response, StateError,
};

async fn leader() -> Core {
    let core = Core::start(&DispatcherConfig::default(), "127.0.0.1:1").await.unwrap();
    core.raft()
        .wait(Some(Duration::from_secs(30)))
        .state(ServerState::Leader, "one-node group elects itself")
        .await
        .unwrap();
    core
}

/// The state machine's last applied log index. Published before a proposal is
/// answered, so read right after `propose` returns it is that entry's index
/// (openraft's metrics are published later, and lag under load).
fn last_applied(core: &Core) -> u64 {
    *core.applied().borrow()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_over_the_entry_cap_is_refused_when_proposed_and_never_logged() {
    let core = leader().await;
    let small = |id: &str| Command::RegisterDataset {
        dataset_id: Some(id.into()),
        def: DatasetDef::range(3),
        limits: Limits::default(),
    };
    core.propose(small("before")).await.unwrap();
    let logged = last_applied(&core);

    // ~19 MB of file names: within the gRPC limit, over the entry cap.
    let files: Vec<String> = (0..180_000).map(|i| format!("/data/{i:0>96}.txt")).collect();
    let big = Command::RegisterDataset {
        dataset_id: Some("big".into()),
        def: DatasetDef::text_lines(files),
        limits: Limits::default(),
    };
    let size = bincode::serialized_size(&big).unwrap();
    assert!(size > MAX_ENTRY_BYTES && size < sluice_proto::MAX_MESSAGE_BYTES as u64);
    match core.propose(big).await {
        Err(ProposeError::Rejected(StateError::ResourceExhausted(m))) => assert!(
            m.contains(&format!("RegisterDataset is {size} bytes"))
                && m.contains(&format!("cap of {MAX_ENTRY_BYTES} bytes")),
            "{m}"
        ),
        r => panic!("{r:?}"),
    }
    // A batch is the batcher's to make.
    match core.propose(Command::Batch(vec![small("inside")])).await {
        Err(ProposeError::Rejected(StateError::InvalidArgument(m))) => {
            assert!(m.contains("Batch"), "{m}")
        }
        r => panic!("{r:?}"),
    }
    // The log keeps committing, the next entry right after the last accepted one.
    let r = core.propose(small("after")).await.unwrap();
    assert_eq!(r, Response::DatasetRegistered { dataset_id: "after".into() });
    assert_eq!(last_applied(&core), logged + 1, "a refused proposal reached the log");
    core.shutdown().await;
    core.close().await;
}
