//! The report of one or more chaos runs: a summary table for the terminal (and
//! Markdown), `report.json` with every summary and violation, and per run a
//! throughput-over-time SVG chart with the faults marked ([`write_chart`], in
//! `report/svg.rs`).

mod svg;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::checker::{CheckResult, Summary};
use crate::history::Fault;
pub use svg::write_chart;

/// The summary table for one or more runs (one row per run, then a totals
/// row): faults by kind (one column per kind injected), epochs completed,
/// elements checked, duplicates, losses, longest stall after a leader kill,
/// time to recover, verdict. A Markdown pipe table, aligned for the terminal.
pub fn render_table(summaries: &[Summary]) -> String {
    let kinds = fault_columns(summaries);
    let mut header: Vec<String> = vec!["run".into(), "mode".into()];
    header.extend(kinds.iter().cloned());
    header.extend(
        [
            "epochs",
            "elements",
            "duplicates",
            "losses",
            "stall after leader kill",
            "time to recover",
            "verdict",
        ]
        .map(String::from),
    );
    let mut rows: Vec<Vec<String>> = summaries
        .iter()
        .map(|s| {
            let mut row = vec![format!("{} seed {}", s.scenario, s.seed), s.mode.clone()];
            row.extend(
                kinds.iter().map(|k| s.faults_by_kind.get(k).copied().unwrap_or(0).to_string()),
            );
            row.extend([
                s.epochs.to_string(),
                s.elements_checked.to_string(),
                s.duplicates.to_string(),
                s.losses.to_string(),
                fmt_opt_ms(s.longest_stall_after_leader_kill_ms),
                fmt_opt_ms(s.time_to_recover_ms),
                if s.violations == 0 { "PASS".into() } else { format!("FAIL ({})", s.violations) },
            ]);
            row
        })
        .collect();
    let passed = summaries.iter().filter(|s| s.violations == 0).count();
    let mut totals = vec![format!("total ({} runs)", summaries.len()), String::new()];
    totals.extend(kinds.iter().map(|k| {
        summaries
            .iter()
            .map(|s| s.faults_by_kind.get(k).copied().unwrap_or(0))
            .sum::<u32>()
            .to_string()
    }));
    totals.extend([
        summaries.iter().map(|s| s.epochs as u64).sum::<u64>().to_string(),
        summaries.iter().map(|s| s.elements_checked).sum::<u64>().to_string(),
        summaries.iter().map(|s| s.duplicates).sum::<u64>().to_string(),
        summaries.iter().map(|s| s.losses).sum::<u64>().to_string(),
        format!(
            "max {}",
            fmt_opt_ms(summaries.iter().filter_map(|s| s.longest_stall_after_leader_kill_ms).max())
        ),
        format!("max {}", fmt_opt_ms(summaries.iter().filter_map(|s| s.time_to_recover_ms).max())),
        format!("{passed}/{} passed", summaries.len()),
    ]);
    rows.push(totals);

    // Text columns (run, mode) left-aligned, numbers right-aligned.
    let widths: Vec<usize> = (0..header.len())
        .map(|c| rows.iter().chain([&header]).map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let left = |c: usize| c < 2 || c == header.len() - 1;
    let line = |cells: &[String]| {
        let padded: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if left(c) {
                    format!("{cell:<w$}", w = widths[c])
                } else {
                    format!("{cell:>w$}", w = widths[c])
                }
            })
            .collect();
        format!("| {} |\n", padded.join(" | "))
    };
    let mut out = line(&header);
    // Markdown's alignment row: a colon at the end of a cell right-aligns it.
    let rule: Vec<String> = widths
        .iter()
        .enumerate()
        .map(|(c, w)| if left(c) { "-".repeat(w + 2) } else { format!("{}:", "-".repeat(w + 1)) })
        .collect();
    out.push_str(&format!("|{}|\n", rule.join("|")));
    for row in &rows {
        out.push_str(&line(row));
    }
    out
}

/// Writes `report.json` (the summaries + violations) in `dir`.
pub fn write_json(dir: &Path, results: &[CheckResult]) -> std::io::Result<PathBuf> {
    #[derive(Serialize)]
    struct Report<'a> {
        passed: bool,
        runs: &'a [CheckResult],
    }
    let report = Report { passed: results.iter().all(CheckResult::passed), runs: results };
    let path = dir.join("report.json");
    let json = serde_json::to_string_pretty(&report).map_err(std::io::Error::other)?;
    std::fs::write(&path, json + "\n")?;
    Ok(path)
}

/// The fault kinds to give a column: those injected in any run, in the order
/// of [`Fault`]'s variants (kinds unknown to this build last).
fn fault_columns(summaries: &[Summary]) -> Vec<String> {
    let present: BTreeSet<&String> =
        summaries.iter().flat_map(|s| s.faults_by_kind.keys()).collect();
    let mut columns: Vec<String> = all_fault_kinds()
        .into_iter()
        .filter(|k| present.iter().any(|p| p.as_str() == *k))
        .map(String::from)
        .collect();
    for kind in present {
        if !columns.contains(kind) {
            columns.push(kind.clone());
        }
    }
    columns
}

/// Every [`Fault::kind_name`], in declaration order.
pub(crate) fn all_fault_kinds() -> Vec<&'static str> {
    [
        Fault::KillDispatcher { node: 0, was_leader: true },
        Fault::KillDispatcher { node: 0, was_leader: false },
        Fault::KillTwoDispatchers { nodes: Vec::new() },
        Fault::PauseDispatcher { node: 0 },
        Fault::WipeDispatcher { node: 0 },
        Fault::WipeWithCrash { wiped: 0, down: Vec::new() },
        Fault::FullRestart,
        Fault::KillWorker { worker: 0 },
        Fault::Partition { a: 0, b: 0 },
        Fault::Delay { a: 0, b: 0, ms: 0 },
        Fault::Drop { a: 0, b: 0 },
        Fault::S3Slow { ms: 0 },
        Fault::S3Down,
        Fault::RestartTrainers { consumers: 0 },
        Fault::WorkerKilled { worker: String::new() },
        Fault::WorkerDrained { worker: String::new() },
        Fault::RollingRestart,
    ]
    .iter()
    .map(Fault::kind_name)
    .collect()
}

fn fmt_opt_ms(ms: Option<u64>) -> String {
    match ms {
        Some(ms) => format!("{}.{:03} s", ms / 1000, ms % 1000),
        None => "-".into(),
    }
}
