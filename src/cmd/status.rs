//! `sluice status`: a readable table of workers, datasets, jobs and progress.

use clap::Args;
use sluice_client::status::IterationStatus;
use sluice_client::{ProcessingMode, ServiceStatus};

#[derive(Args, Debug)]
pub struct StatusArgs {
    #[command(flatten)]
    pub dispatcher: super::DispatcherFlags,
}

pub async fn run(a: StatusArgs) -> anyhow::Result<()> {
    let client = a.dispatcher.client()?;
    let each = client.status_of_each().await;
    print!("{}", render_nodes(&each));
    let leader = each.iter().find_map(|(_, r)| r.as_ref().ok().filter(|s| s.from_leader));
    let any = each.iter().find_map(|(_, r)| r.as_ref().ok());
    match (leader, any) {
        (Some(s), _) => print!("{}", render(s)),
        (None, Some(s)) => {
            println!("(no leader answered: the registry below is a follower's and may be stale)");
            print!("{}", render(s))
        }
        (None, None) => {
            anyhow::bail!("no dispatcher answered: {}", a.dispatcher.dispatchers.join(", "))
        }
    }
    Ok(())
}

/// One line per dispatcher node: its Raft role and log positions.
pub fn render_nodes(
    each: &[(String, Result<ServiceStatus, sluice_client::ClientError>)],
) -> String {
    let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".into());
    let mut out = format!("DISPATCHERS ({})\n", each.len());
    out.push_str(&format!(
        "  {:<22} {:>5} {:<10} {:>6} {:>9} {:>9} {:>9}  {}\n",
        "ADDRESS", "NODE", "ROLE", "TERM", "LAST LOG", "APPLIED", "SNAPSHOT", "JOURNAL"
    ));
    for (address, r) in each {
        match r.as_ref().map(|s| s.raft.clone()) {
            Ok(Some(n)) => out.push_str(&format!(
                "  {:<22} {:>5} {:<10} {:>6} {:>9} {:>9} {:>9}  {}\n",
                address,
                n.node_id,
                n.role,
                n.term,
                opt(n.last_log_index),
                opt(n.applied_index),
                opt(n.snapshot_index),
                n.journal
            )),
            Ok(None) => out.push_str(&format!("  {address:<22} (no raft status)\n")),
            Err(e) => out.push_str(&format!("  {address:<22} unreachable: {e}\n")),
        }
    }
    // The group as its leader (else any node) knows it: it changes with `sluice
    // admin add-dispatcher` / `remove-dispatcher`, not with this command's list.
    let oks = || each.iter().filter_map(|(_, r)| r.as_ref().ok());
    let view = oks().find(|s| s.from_leader).or_else(|| oks().next());
    if let Some(raft) = view.and_then(|s| s.raft.as_ref()) {
        let members: Vec<String> = raft.members.iter().map(|(id, a)| format!("{id}={a}")).collect();
        out.push_str(&format!("  members (node {}): {}\n", raft.node_id, members.join(",")));
    }
    out
}

fn mode_name(m: Option<ProcessingMode>) -> &'static str {
    match m {
        Some(ProcessingMode::Off) => "OFF",
        Some(ProcessingMode::Dynamic) => "DYNAMIC",
        Some(ProcessingMode::File) => "FILE",
        Some(ProcessingMode::Data) => "DATA",
        Some(ProcessingMode::FileOrData) => "FILE_OR_DATA",
        Some(ProcessingMode::Hint) => "HINT",
        None => "?",
    }
}

/// The STATE column: finished / running / collected, and what liveness lost.
fn iteration_state(mode: &str, it: &IterationStatus) -> String {
    let mut state = if it.garbage_collected {
        "collected (no consumer for the GC timeout)".to_string()
    } else if it.finished {
        "finished".to_string()
    } else {
        "running".to_string()
    };
    if it.lost_tasks > 0 {
        let incomplete = match mode {
            "DYNAMIC" => "",
            "OFF" => " (their copies are incomplete)",
            _ => " (their shards are incomplete)",
        };
        state
            .push_str(&format!("; {} task(s) ended with a lost worker{incomplete}", it.lost_tasks));
    }
    if it.lost_splits > 0 {
        state.push_str(&format!(
            "; {} split(s) / {} element(s) lost with lost or restarted workers",
            it.lost_splits, it.lost_elements
        ));
    }
    state
}

/// CURSOR is dynamic sharding's split cursor: `eR@N` = epoch R, next source
/// element N (an epoch that ran out moves the cursor to the next epoch at 0).
pub fn render(s: &ServiceStatus) -> String {
    let mut out = String::new();
    out.push_str(&format!("WORKERS ({})\n", s.workers.len()));
    out.push_str(&format!(
        "  {:<24} {:>12} {:>16} {:>8} {:>14}\n",
        "ADDRESS", "ACTIVE TASKS", "LAST HEARTBEAT", "PYTHON", "ERRORS IGNORED"
    ));
    for w in &s.workers {
        let hb = w.last_heartbeat_ms_ago.map(|ms| format!("{ms} ms ago")).unwrap_or("-".into());
        let lost = if w.lost { "  LOST (no heartbeat within the worker timeout)" } else { "" };
        // "-": the worker runs no Python stages / has not reported yet.
        let python = w.python_version.as_deref().unwrap_or("-");
        let ignored = w.errors_ignored.map(|n| n.to_string()).unwrap_or("-".into());
        out.push_str(&format!(
            "  {:<24} {:>12} {:>16} {:>8} {:>14}{lost}\n",
            w.address, w.active_tasks, hb, python, ignored
        ));
    }
    out.push_str(&format!("DATASETS ({})\n", s.datasets.len()));
    out.push_str(&format!(
        "  {:<24} {:>18} {:>12} {}\n",
        "ID", "SOURCE ELEMENTS", "DEF BYTES", "OWNER"
    ));
    for d in &s.datasets {
        let card = d.source_cardinality.map(|c| c.to_string()).unwrap_or("unknown".into());
        let owner = d.owner.as_deref().unwrap_or("-");
        let line = format!("{:<24} {:>18} {:>12} {owner}", d.dataset_id, card, d.definition_bytes);
        out.push_str(&format!("  {line}\n"));
    }
    out.push_str(&format!("JOBS ({})\n", s.jobs.len()));
    out.push_str(&format!(
        "  {:<8} {:<24} {:<10} {:<8} {:<10} {:>6} {:>11} {:>8} {:>9} {}\n",
        "JOB",
        "NAME",
        "DATASET",
        "MODE",
        "ITERATION",
        "REP",
        "TASKS DONE",
        "CLIENTS",
        "SPLITS",
        "STATE (OWNER)"
    ));
    for j in &s.jobs {
        let mode = mode_name(j.mode);
        if j.iterations.is_empty() {
            let owner = j.owner.as_deref().map(|o| format!(" ({o})")).unwrap_or_default();
            out.push_str(&format!(
                "  {:<8} {:<24} {:<10} {:<8} {:<10}{owner}\n",
                j.job_id, j.job_name, j.dataset_id, mode, "-"
            ));
        }
        for it in &j.iterations {
            let splits = match (it.split_repetition, it.split_cursor) {
                (Some(r), Some(c)) => format!("e{r}@{c}"),
                _ => "-".into(),
            };
            let mut state = iteration_state(mode, it);
            if let Some(owner) = &j.owner {
                state.push_str(&format!(" ({owner})"));
            }
            out.push_str(&format!(
                "  {:<8} {:<24} {:<10} {:<8} {:<10} {:>6} {:>11} {:>8} {:>9} {}\n",
                j.job_id,
                j.job_name,
                j.dataset_id,
                mode,
                it.iteration_id,
                it.repetition,
                format!("{}/{}", it.finished_tasks, it.tasks),
                it.clients,
                splits,
                state
            ));
        }
    }
    out
}
