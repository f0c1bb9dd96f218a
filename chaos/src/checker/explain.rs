//! The human-readable failure report: what ran, the fault schedule, each
//! violation with the history lines that show it, and how to replay the run.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::verdict::{fmt_ms, CheckResult};
use crate::history::Event;

pub fn explain(events: &[Event], result: &CheckResult) -> String {
    let s = &result.summary;
    let mut out = String::new();
    let verdict = if result.violations.is_empty() { "PASSED" } else { "FAILED" };
    let _ = writeln!(
        out,
        "chaos run {verdict}: scenario {}, seed {}, mode {}",
        shell_word(&s.scenario),
        s.seed,
        s.mode
    );
    let start = events.iter().find(|e| matches!(e, Event::Start { .. }));
    if let Some(Event::Start { workers, consumers, work_dir_kind, lifecycle: true, .. }) = start {
        let _ = writeln!(
            out,
            "  lifecycle: {workers} workers at first, at most {consumers} jobs at once, work_dir \
             on {work_dir_kind}\n  {} jobs started, {} completed, {} failed with a reason the \
             run caused; {} elements checked, {} duplicates, {} lost",
            s.jobs_started,
            s.jobs_completed,
            s.jobs_failed_with_reason,
            s.elements_checked,
            s.duplicates,
            s.losses
        );
    } else {
        summary_lines(&mut out, events, result);
    }

    let kinds: BTreeMap<u32, &'static str> = events
        .iter()
        .filter_map(|e| match e {
            Event::FaultStart { id, fault, .. } => Some((*id, fault.kind_name())),
            _ => None,
        })
        .collect();
    // In time order (the history is in the order the runner wrote it).
    let mut faults: Vec<(usize, &Event)> = events
        .iter()
        .enumerate()
        .filter(|(_, e)| matches!(e, Event::FaultStart { .. } | Event::FaultEnd { .. }))
        .collect();
    faults.sort_by_key(|(_, e)| match e {
        Event::FaultStart { t_ms, .. } | Event::FaultEnd { t_ms, .. } => *t_ms,
        _ => 0,
    });
    let schedule: Vec<String> = faults
        .into_iter()
        .filter_map(|(i, e)| match e {
            Event::FaultStart { t_ms, id, fault } => {
                let json = serde_json::to_string(fault).unwrap_or_default();
                Some(format!(
                    "  {:>10}  line {:>6}  start #{id} {}  {json}",
                    fmt_ms(*t_ms),
                    i + 1,
                    fault.kind_name()
                ))
            }
            Event::FaultEnd { t_ms, id } => Some(format!(
                "  {:>10}  line {:>6}  end   #{id} {}",
                fmt_ms(*t_ms),
                i + 1,
                kinds.get(id).copied().unwrap_or("(unknown fault)")
            )),
            _ => None,
        })
        .collect();
    let _ = writeln!(out, "\nfault schedule ({} faults):", kinds.len());
    if schedule.is_empty() {
        let _ = writeln!(out, "  (none)");
    }
    for line in schedule {
        let _ = writeln!(out, "{line}");
    }

    let _ = writeln!(out, "\n{} violations:", result.violations.len());
    for (n, v) in result.violations.iter().enumerate() {
        let _ = writeln!(out, "{}. [{}] {}", n + 1, v.invariant, v.message);
        for &line in &v.lines {
            let json = events
                .get(line)
                .and_then(|e| serde_json::to_string(e).ok())
                .unwrap_or_else(|| "(no such line)".into());
            let _ = writeln!(out, "   line {:>6}: {json}", line + 1);
        }
    }
    let _ = writeln!(
        out,
        "\nreplay: sluice chaos --scenario {} --seed {}",
        shell_word(&s.scenario),
        s.seed
    );
    out
}

/// The scenario as one shell word (quoted only if it needs to be).
fn shell_word(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// What ran and the totals, for an epoch-based run.
fn summary_lines(out: &mut String, events: &[Event], result: &CheckResult) {
    let s = &result.summary;
    if let Some(Event::Start { dataset_len, workers, consumers, epochs, work_dir_kind, .. }) =
        events.iter().find(|e| matches!(e, Event::Start { .. }))
    {
        let _ = writeln!(
            out,
            "  range({dataset_len}), {workers} workers, {consumers} consumers, {epochs} epochs, \
             work_dir on {work_dir_kind}"
        );
    }
    let _ = writeln!(
        out,
        "  {} elements checked, {} duplicates, {} lost, {} of {} epochs completed",
        s.elements_checked,
        s.duplicates,
        s.losses,
        s.epochs,
        events
            .iter()
            .find_map(|e| match e {
                Event::Start { epochs, .. } => Some(epochs.to_string()),
                _ => None,
            })
            .unwrap_or_else(|| "?".into())
    );
}
