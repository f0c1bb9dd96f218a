//! The page's data and HTML from a state built by `apply`, with the soft state
//! given by hand: roles as this node sees them, escaping, bounded tables.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use openraft::{BasicNode, Membership, RaftMetrics, ServerState, StoredMembership};
use sluice_dataset::DatasetDef;

use super::history::{History, Sample};
use super::view::{build, Soft, StatusView, MAX_ROWS};
use crate::command::Command;
use crate::limits::Limits;
use crate::raft::contacts::Contact;
use crate::state::{Mode, State};

fn apply(s: &mut State, cmd: Command) {
    crate::apply(s, cmd).expect("applied");
}

fn worker(s: &mut State, address: &str, uid: u64) {
    let cmd = Command::RegisterWorker {
        address: address.into(),
        worker_uid: uid,
        functions: vec![],
        python_version: None,
        limits: Limits::default(),
    };
    apply(s, cmd);
}

fn job(s: &mut State, name: &str) {
    apply(
        s,
        Command::RegisterDataset {
            dataset_id: None,
            def: DatasetDef::range(100),
            limits: Limits::default(),
        },
    );
    let dataset_id = s.datasets.keys().last().unwrap().clone();
    apply(
        s,
        Command::GetOrCreateJob {
            dataset_id,
            mode: Mode::Dynamic,
            job_name: Some(name.into()),
            target_workers: Default::default(),
            static_workers: vec![],
            cross_trainer_cache: false,
            num_consumers: None,
            limits: Limits::default(),
        },
    );
}

/// Node 1 of {1, 2, 3} in `state`; peer 2 answered just now, peer 3 never.
fn raft(state: ServerState, leader: Option<u64>) -> RaftMetrics<u64, BasicNode> {
    let nodes: BTreeMap<u64, BasicNode> =
        (1..=3).map(|id| (id, BasicNode::new(format!("127.0.0.1:500{id}")))).collect();
    let membership = Membership::new(vec![BTreeSet::from([1, 2, 3])], nodes);
    let mut m = RaftMetrics::new_initial(1);
    m.state = state;
    m.current_leader = leader;
    m.current_term = 4;
    m.membership_config = Arc::new(StoredMembership::new(None, membership));
    m
}

/// The view of `s`, with one history sample of `earlier` taken 5 s ago.
fn view_since(earlier: &State, s: &State, m: &RaftMetrics<u64, BasicNode>) -> StatusView {
    let now = Instant::now();
    let contacts = BTreeMap::from([(2, Contact { answered: Some(now), failed: None })]);
    let mut history = History::new(10);
    history.push(Sample::of(earlier, now - Duration::from_secs(5)));
    let soft = Soft {
        heartbeats: &HashMap::new(),
        errors_ignored: &HashMap::new(),
        contacts: &contacts,
        raft: m,
        history: &history,
        interval: Duration::from_secs(5),
        now,
    };
    build(s, &soft)
}

fn view(s: &State, m: &RaftMetrics<u64, BasicNode>) -> StatusView {
    view_since(s, s, m)
}

fn roles(v: &StatusView) -> Vec<&str> {
    v.quorum.iter().map(|n| n.role.as_str()).collect()
}

#[test]
fn the_leader_sees_answering_peers_as_followers_and_silent_ones_unreachable() {
    let s = State::default();
    let v = view(&s, &raft(ServerState::Leader, Some(1)));
    assert_eq!(roles(&v), ["leader", "follower", "unreachable"]);
    assert!(v.quorum[0].this_node && !v.quorum[1].this_node);
    // A follower knows the leader, and says it cannot see the other follower.
    let v = view(&s, &raft(ServerState::Follower, Some(2)));
    assert_eq!(roles(&v)[..2], ["follower", "leader"]);
    assert!(roles(&v)[2].starts_with("not observed"), "{:?}", roles(&v));
    let v = view(&s, &raft(ServerState::Candidate, None));
    assert!(roles(&v)[1].starts_with("unreachable"), "{:?}", roles(&v));
}

#[test]
fn user_strings_are_escaped_and_tables_are_bounded() {
    let mut s = State::default();
    job(&mut s, "<script>alert('x')</script>");
    for i in 0..MAX_ROWS + 5 {
        worker(&mut s, &format!("w{i}\"><b>"), i as u64 + 1);
    }
    let v = view(&s, &raft(ServerState::Leader, Some(1)));
    assert_eq!((v.workers.len(), v.workers_omitted), (MAX_ROWS, 5));
    let html = super::html::page(&v);
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;"), "{html}");
    assert!(!html.contains("<script"), "no script element");
    assert!(!html.contains("\"><b>"), "no attribute or tag injected by an address");
    assert!(html.contains("5 more workers not shown."));
    let long = "n".repeat(10_000);
    assert_eq!(super::text::escape(&long).chars().count(), super::text::MAX_SHOWN_CHARS + 1);
    assert!(html.contains(r#"<meta http-equiv="refresh" content="5">"#));
    // Bounded: 200 rows of long addresses stay far below the endpoint's cap.
    assert!(html.len() < sluice_metrics::MAX_PAGE_BYTES / 8, "{} bytes", html.len());
    let json = serde_json::to_value(&v).unwrap();
    assert_eq!(json["jobs"][0]["name"], "<script>alert('x')</script>", "JSON carries the raw name");
}

#[test]
fn a_dynamic_job_shows_its_progress_and_a_charted_series() {
    let mut s = State::default();
    worker(&mut s, "w1", 1);
    job(&mut s, "trainer");
    let job_id = *s.jobs.keys().next().unwrap();
    let iteration = Command::GetOrCreateIteration {
        job_id,
        repetition: 0,
        elements_per_split: 10,
        limits: Limits::default(),
    };
    apply(&mut s, iteration);
    let before = s.clone();
    let task_id = *s.workers["w1"].active_tasks.iter().next().unwrap();
    let split = Command::GetSplit {
        task_id,
        worker_uid: 1,
        sequence: 1,
        provider: 0,
        repetition: 0,
        max_splits: 3,
    };
    apply(&mut s, split);
    let v = view_since(&before, &s, &raft(ServerState::Leader, Some(1)));
    let j = &v.jobs[0];
    assert_eq!(
        (j.mode, j.splits_granted, j.splits_per_epoch, j.elements),
        ("DYNAMIC", Some(3), Some(10), Some(30))
    );
    assert_eq!(j.dataset_summary, "1 stage, 100 elements");
    // One sample 5 s ago at 0 elements, the live one at 30: 6 elements/s.
    assert_eq!(v.throughput.jobs.len(), 1);
    assert_eq!(v.throughput.jobs[0].points, vec![(0.0, 6.0)]);
    assert!(super::html::page(&v).contains(r#"<path class="series""#));
}
