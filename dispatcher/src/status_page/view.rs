//! What the status page shows, as data: [`StatusView`], built from this node's
//! replica (the same `GetStatus` rendering `sluice status` prints, `status.rs`),
//! its Raft metrics, its soft state (heartbeat times, peer contacts) and the
//! throughput history. Rendered as HTML by `html.rs` and as JSON as is.
//!
//! Nothing secret is in it: no tokens, no dataset spec beyond its id, its number
//! of stages and its source's size. Bounded: at most [`MAX_ROWS`] workers, lost
//! workers and jobs, [`MAX_SERIES`] charted jobs; the `*_omitted` counts say how
//! many were left out.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use serde::Serialize;
use sluice_proto::v1 as pb;

use super::history::{History, Sample, Series};
use crate::raft::contacts::Contact;
use crate::raft::NodeId;
use crate::state::{JobId, Mode, State};

/// Rows per table.
pub const MAX_ROWS: usize = 200;
/// Jobs charted (the most recent ids).
pub const MAX_SERIES: usize = 8;
/// A peer that answered this node's Raft RPCs within this long is reachable.
pub const REACHABLE_WITHIN: Duration = Duration::from_secs(3);

#[derive(Clone, Debug, Serialize)]
pub struct StatusView {
    pub node_id: u64,
    /// This node's role: whether the tables below are the leader's view.
    pub role: String,
    pub quorum: Vec<NodeRow>,
    pub workers: Vec<WorkerRow>,
    pub workers_omitted: usize,
    pub lost_workers: Vec<WorkerRow>,
    pub lost_workers_omitted: usize,
    pub jobs: Vec<JobRow>,
    pub jobs_omitted: usize,
    pub lost: LostTotals,
    pub throughput: Throughput,
}

#[derive(Clone, Debug, Serialize)]
pub struct NodeRow {
    pub node_id: u64,
    pub address: String,
    /// leader / follower / candidate / learner for this node; for a peer, what
    /// this node sees: leader, follower, unreachable, or not observed.
    pub role: String,
    pub this_node: bool,
    pub term: Option<u64>,
    /// This node's applied index; for a follower seen from the leader, the
    /// index replicated to it.
    pub applied_index: Option<u64>,
    /// Milliseconds since the peer last answered this node (peers only).
    pub last_answer_ms_ago: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct WorkerRow {
    pub address: String,
    pub state: &'static str,
    pub tasks: u32,
    /// The Python version the worker runs user functions with, if it can.
    pub python: Option<String>,
    /// Only the node workers heartbeat to (the leader) has this.
    pub last_heartbeat_ms_ago: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct JobRow {
    pub job_id: u64,
    pub name: String,
    pub dataset_id: String,
    /// E.g. "1 stage, 100 elements" (the source's).
    pub dataset_summary: String,
    pub mode: &'static str,
    pub iterations: usize,
    /// DYNAMIC: splits handed out over all iterations, and per epoch if the
    /// source's size is known.
    pub splits_granted: Option<u64>,
    pub splits_per_epoch: Option<u64>,
    /// DYNAMIC: source elements handed out over all iterations.
    pub elements: Option<u64>,
    pub tasks: u32,
    pub finished_tasks: u32,
    pub clients: u32,
    pub state: String,
    pub lost_splits: u64,
    pub lost_elements: u64,
    pub lost_tasks: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct LostTotals {
    pub workers: usize,
    pub splits: u64,
    pub elements: u64,
    pub tasks: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Throughput {
    pub interval_secs: f64,
    /// Seconds of history held (the chart's x range).
    pub span_secs: f64,
    pub jobs: Vec<JobSeries>,
    pub jobs_omitted: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct JobSeries {
    pub job_id: u64,
    pub name: String,
    /// (seconds before now, source elements handed out per second), oldest first.
    pub points: Vec<(f64, f64)>,
}

/// This node's soft state the view needs beside the replica.
pub struct Soft<'a> {
    pub heartbeats: &'a HashMap<String, Instant>,
    pub errors_ignored: &'a HashMap<String, u64>,
    pub contacts: &'a BTreeMap<NodeId, Contact>,
    pub raft: &'a openraft::RaftMetrics<NodeId, openraft::BasicNode>,
    pub history: &'a History,
    pub interval: Duration,
    pub now: Instant,
}

fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Off => "OFF",
        Mode::Dynamic => "DYNAMIC",
        Mode::File => "FILE",
        Mode::Data => "DATA",
        Mode::FileOrData => "FILE_OR_DATA",
        Mode::Hint => "HINT",
    }
}

fn role_name(s: openraft::ServerState) -> &'static str {
    match s {
        openraft::ServerState::Leader => "leader",
        openraft::ServerState::Follower => "follower",
        openraft::ServerState::Candidate => "candidate",
        openraft::ServerState::Learner => "learner",
        openraft::ServerState::Shutdown => "shutdown",
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().min(u128::from(u64::MAX)) as u64
}

/// The quorum as this node sees it (see [`NodeRow::role`]).
fn quorum(soft: &Soft) -> Vec<NodeRow> {
    let m = soft.raft;
    let leading = m.state == openraft::ServerState::Leader;
    m.membership_config
        .nodes()
        .map(|(id, node)| {
            let contact = soft.contacts.get(id);
            let answered =
                contact.and_then(|c| c.answered).map(|t| soft.now.saturating_duration_since(t));
            let mut row = NodeRow {
                node_id: *id,
                address: node.addr.clone(),
                role: String::new(),
                this_node: *id == m.id,
                term: None,
                applied_index: None,
                last_answer_ms_ago: answered.map(ms),
            };
            if row.this_node {
                row.role = role_name(m.state).into();
                row.term = Some(m.current_term);
                row.applied_index = m.last_applied.map(|l| l.index);
                row.last_answer_ms_ago = None;
            } else if leading {
                let up = answered.is_some_and(|a| a <= REACHABLE_WITHIN);
                row.role = if up { "follower" } else { "unreachable" }.into();
                row.term = up.then_some(m.current_term);
                row.applied_index = m
                    .replication
                    .as_ref()
                    .and_then(|r| r.get(id).copied().flatten())
                    .map(|l| l.index);
            } else if m.current_leader == Some(*id) {
                // This follower hears the leader's heartbeats (its election timer
                // would have fired otherwise).
                row.role = "leader".into();
                row.term = Some(m.current_term);
            } else if m.current_leader.is_none() {
                row.role = "unreachable (no leader known here)".into();
            } else {
                row.role = "not observed (only the leader sees its followers)".into();
            }
            row
        })
        .collect()
}

fn worker_row(w: &pb::WorkerStatus) -> WorkerRow {
    WorkerRow {
        address: w.address.clone(),
        state: if w.lost { "lost" } else { "active" },
        tasks: w.active_tasks,
        python: (!w.python_version.is_empty()).then(|| w.python_version.clone()),
        last_heartbeat_ms_ago: w.last_heartbeat_ms_ago,
    }
}

fn job_state(j: &pb::JobStatus) -> String {
    let Some(last) = j.iterations.iter().max_by_key(|it| it.iteration_id) else {
        return "no iteration yet".into();
    };
    let mut state = if last.garbage_collected {
        "collected (no consumer)"
    } else if last.finished {
        "finished"
    } else {
        "running"
    }
    .to_string();
    if j.iterations.iter().any(|it| it.lost_tasks > 0 || it.lost_splits > 0) {
        state.push_str("; lost work");
    }
    state
}

/// What the replica says beside the `GetStatus` rendering, per job.
struct Extra {
    mode: Mode,
    summary: String,
    handed_out: (u64, u64),
    splits_per_epoch: Option<u64>,
}

fn extras(s: &State) -> BTreeMap<JobId, Extra> {
    s.jobs
        .values()
        .map(|j| {
            let cardinality = s.source_cardinality_of(j.id);
            let stages = s.datasets.get(&j.dataset_id).map_or(0, |d| d.def.stages.len());
            let plural = if stages == 1 { "" } else { "s" };
            let summary = match cardinality {
                Some(n) => format!("{stages} stage{plural}, {n} elements"),
                None => format!("{stages} stage{plural}"),
            };
            let per = s
                .iterations
                .values()
                .find(|it| it.job_id == j.id)
                .map(|it| it.elements_per_split.max(1));
            let handed_out = s
                .iterations
                .values()
                .filter(|it| it.job_id == j.id)
                .map(|it| it.handed_out(cardinality.unwrap_or(0)))
                .fold((0u64, 0u64), |(a, b), (c, d)| (a.saturating_add(c), b.saturating_add(d)));
            let splits_per_epoch = cardinality.zip(per).map(|(n, per)| n.div_ceil(per));
            (j.id, Extra { mode: j.mode, summary, handed_out, splits_per_epoch })
        })
        .collect()
}

/// Builds the view from the replica `s` and this node's `soft` state.
pub fn build(s: &State, soft: &Soft) -> StatusView {
    let status = crate::status::render(s, soft.heartbeats, soft.errors_ignored);
    let extra = extras(s);
    let live = Sample::of(s, soft.now);
    let (lost, active): (Vec<_>, Vec<_>) = status.workers.iter().partition(|w| w.lost);
    let mut lost_totals = LostTotals { workers: lost.len(), ..LostTotals::default() };
    let mut jobs: Vec<JobRow> = status
        .jobs
        .iter()
        .rev()
        .map(|j| {
            let x = extra.get(&j.job_id);
            let dynamic = x.is_some_and(|x| x.mode == Mode::Dynamic);
            let sum = |f: fn(&pb::IterationStatus) -> u64| j.iterations.iter().map(f).sum::<u64>();
            let row = JobRow {
                job_id: j.job_id,
                name: j.job_name.clone(),
                dataset_id: j.dataset_id.clone(),
                dataset_summary: x.map(|x| x.summary.clone()).unwrap_or_default(),
                mode: x.map_or("?", |x| mode_name(x.mode)),
                iterations: j.iterations.len(),
                splits_granted: x.filter(|_| dynamic).map(|x| x.handed_out.0),
                splits_per_epoch: x.filter(|_| dynamic).and_then(|x| x.splits_per_epoch),
                elements: x.filter(|_| dynamic).map(|x| x.handed_out.1),
                tasks: j.iterations.iter().map(|it| it.tasks).sum(),
                finished_tasks: j.iterations.iter().map(|it| it.finished_tasks).sum(),
                clients: j.iterations.iter().map(|it| it.clients).sum(),
                state: job_state(j),
                lost_splits: sum(|it| it.lost_splits),
                lost_elements: sum(|it| it.lost_elements),
                lost_tasks: sum(|it| u64::from(it.lost_tasks)),
            };
            lost_totals.splits += row.lost_splits;
            lost_totals.elements += row.lost_elements;
            lost_totals.tasks += row.lost_tasks;
            row
        })
        .collect();
    let names: HashMap<u64, String> = jobs.iter().map(|j| (j.job_id, j.name.clone())).collect();
    let mut series: Vec<Series> = soft.history.series(&live);
    // The newest jobs first; only DYNAMIC jobs' counters move.
    series.retain(|s| extra.get(&s.job_id).is_some_and(|x| x.mode == Mode::Dynamic));
    series.reverse();
    let series_omitted = series.len().saturating_sub(MAX_SERIES);
    series.truncate(MAX_SERIES);
    let jobs_omitted = jobs.len().saturating_sub(MAX_ROWS);
    jobs.truncate(MAX_ROWS);
    let cap = |rows: Vec<&pb::WorkerStatus>| {
        let omitted = rows.len().saturating_sub(MAX_ROWS);
        (rows.into_iter().take(MAX_ROWS).map(worker_row).collect::<Vec<_>>(), omitted)
    };
    let (workers, workers_omitted) = cap(active);
    let (lost_workers, lost_workers_omitted) = cap(lost);
    StatusView {
        node_id: soft.raft.id,
        role: role_name(soft.raft.state).into(),
        quorum: quorum(soft),
        workers,
        workers_omitted,
        lost_workers,
        lost_workers_omitted,
        jobs,
        jobs_omitted,
        lost: lost_totals,
        throughput: Throughput {
            interval_secs: soft.interval.as_secs_f64(),
            span_secs: soft.history.span(soft.now).as_secs_f64(),
            jobs: series
                .into_iter()
                .map(|s| JobSeries {
                    name: names.get(&s.job_id).cloned().unwrap_or_default(),
                    job_id: s.job_id,
                    points: s.points,
                })
                .collect(),
            jobs_omitted: series_omitted,
        },
    }
}
