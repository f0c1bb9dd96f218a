//! The checker of a lifecycle run (`Start.lifecycle`): every job started is
//! accounted for. It completed with the multiset its mode promises, or it failed
//! with a reason the run caused (a worker the run killed while the job could be
//! using it, named by the read's loss report); anything else is a violation.
//! The rules, and the guarantees they come from, are in docs/chaos.md
//! ("The lifecycle soak").
//!
//! ```text
//!  &[Event] ─► jobs (JobStart, JobEnd per reader and incarnation), worker kills
//!              and drains (FaultStart), workers up (WorkerUp)
//!           ─► per job: ends ─► outcomes (completion, loss-cause)
//!                        kept values ─► multiset (in-range, no-duplicates,
//!                                        exactly-once, off-copies)
//! ```

use std::collections::{BTreeMap, BTreeSet};

use super::verdict::{
    first_lines, CheckResult, Summary, Violation, COMPLETION, EXACTLY_ONCE, HISTORY, IN_RANGE,
    LOSS_CAUSE, NO_DUPLICATES, OFF_COPIES,
};
use crate::history::{Event, Fault, JobSpec, Millis, CHECKPOINTED};

/// A worker killed this long before a job started may still be in it: the
/// dispatcher declares a silent worker lost after its worker timeout (10 s,
/// started afresh by a new leader, guarantee L5), and until then a new job gets
/// a task on it (guarantee L11 covers only workers declared lost). Longer before,
/// the worker must be out of the job: a loss naming it is a violation.
pub(crate) const LOST_WITHIN_MS: Millis = 60_000;

struct Job<'a> {
    spec: &'a JobSpec,
    start: Millis,
    line: usize,
    /// reader → its `JobEnd` lines, in history order (incarnations).
    ends: BTreeMap<u32, Vec<usize>>,
}

/// A worker the run stopped: killed (SIGKILL) or drained (SIGTERM), when, where.
struct Stopped<'a> {
    worker: &'a str,
    t: Millis,
    killed: bool,
}

pub(crate) fn check(events: &[Event]) -> CheckResult {
    let mut out = Vec::new();
    let mut summary = Summary { mode: "mixed".into(), ..Summary::default() };
    let mut jobs: BTreeMap<u32, Job> = BTreeMap::new();
    let mut stopped: Vec<Stopped> = Vec::new();
    let mut up: Vec<(Millis, &str)> = Vec::new();
    let mut open_faults: BTreeMap<u32, usize> = BTreeMap::new();
    let mut bad = Vec::new();
    for (line, e) in events.iter().enumerate() {
        match e {
            Event::Start { seed, scenario, .. } => {
                summary.seed = *seed;
                summary.scenario = scenario.clone();
            }
            Event::JobStart { t_ms, job, spec } => {
                let fresh = Job { spec, start: *t_ms, line, ends: BTreeMap::new() };
                if jobs.insert(*job, fresh).is_some() {
                    bad.push(line);
                }
            }
            Event::JobEnd { job, reader, .. } => match jobs.get_mut(job) {
                Some(j) if *reader < j.spec.readers => {
                    j.ends.entry(*reader).or_default().push(line)
                }
                _ => bad.push(line),
            },
            Event::WorkerUp { t_ms, worker } => up.push((*t_ms, worker)),
            Event::FaultStart { t_ms, id, fault } => {
                open_faults.insert(*id, line);
                *summary.faults_by_kind.entry(fault.kind_name().to_string()).or_default() += 1;
                match fault {
                    Fault::WorkerKilled { worker } => {
                        stopped.push(Stopped { worker, t: *t_ms, killed: true })
                    }
                    Fault::WorkerDrained { worker } => {
                        stopped.push(Stopped { worker, t: *t_ms, killed: false })
                    }
                    _ => {}
                }
            }
            Event::FaultEnd { id, .. } => {
                let was_open = open_faults.remove(id).is_some();
                if !was_open {
                    bad.push(line);
                }
            }
            _ => {}
        }
    }
    if !bad.is_empty() {
        out.push(Violation {
            invariant: HISTORY,
            message: "a JobStart reuses a job number, a JobEnd names no started job or a reader \
                      past its readers, or a FaultEnd has no open FaultStart"
                .into(),
            lines: first_lines(bad),
        });
    }
    if !open_faults.is_empty() {
        out.push(Violation {
            invariant: HISTORY,
            message: format!(
                "history incomplete (did the run stop early?): {} lifecycle events never ended",
                open_faults.len()
            ),
            lines: first_lines(open_faults.into_values().collect()),
        });
    }
    for (&n, job) in &jobs {
        summary.jobs_started += 1;
        let verdict = check_job(events, n, job, &stopped, &up, &mut out, &mut summary);
        match verdict {
            Verdict::Completed => summary.jobs_completed += 1,
            Verdict::FailedWithReason => summary.jobs_failed_with_reason += 1,
            Verdict::Violation => {}
        }
    }
    summary.violations = out.len();
    CheckResult { summary, violations: out }
}

#[derive(PartialEq)]
enum Verdict {
    Completed,
    FailedWithReason,
    Violation,
}

/// Checks one job; says how it ended.
fn check_job(
    events: &[Event],
    n: u32,
    job: &Job,
    stopped: &[Stopped],
    up: &[(Millis, &str)],
    out: &mut Vec<Violation>,
    summary: &mut Summary,
) -> Verdict {
    let before = out.len();
    let spec = job.spec;
    let off = spec.mode == "off";
    let what = describe(n, spec);
    // Every reader's last incarnation ended (with "end" or an error).
    let unended: Vec<u32> = (0..spec.readers)
        .filter(|r| match job.ends.get(r).and_then(|l| l.last()) {
            Some(&l) => outcome(&events[l]) == CHECKPOINTED,
            None => true,
        })
        .collect();
    if !unended.is_empty() {
        out.push(Violation {
            invariant: COMPLETION,
            message: format!("{what}: readers {unended:?} never ended (no JobEnd)"),
            lines: vec![job.line],
        });
        return Verdict::Violation;
    }
    let lines: Vec<usize> = job.ends.values().flatten().copied().collect();
    let end = lines.iter().filter_map(|l| events[*l].t_ms()).max().unwrap_or(job.start);
    // Workers the run stopped while the job could have a task on them.
    let in_force = |s: &&Stopped| s.t + LOST_WITHIN_MS >= job.start && s.t <= end;
    let causes: BTreeSet<&str> =
        stopped.iter().filter(in_force).filter(|s| s.killed || off).map(|s| s.worker).collect();
    let mut failed_with_reason = false;
    let mut lost: BTreeSet<&str> = BTreeSet::new();
    let mut counts: BTreeMap<i64, u32> = BTreeMap::new();
    for &l in &lines {
        let Event::JobEnd { outcome, values, lost_workers, .. } = &events[l] else { continue };
        for r in values {
            for v in r.from..=r.to {
                *counts.entry(v).or_default() += r.count;
            }
        }
        lost.extend(lost_workers.iter().map(String::as_str));
        let uncaused: Vec<&String> =
            lost_workers.iter().filter(|w| !causes.contains(w.as_str())).collect();
        if spec.exactly_once && !lost_workers.is_empty() {
            out.push(Violation {
                invariant: LOSS_CAUSE,
                message: format!(
                    "{what}: an exactly-once read reported a loss (workers {lost_workers:?}); a \
                     lost task of an exactly-once read is not lost data (EO33)"
                ),
                lines: vec![job.line, l],
            });
        } else if !uncaused.is_empty() {
            out.push(Violation {
                invariant: LOSS_CAUSE,
                message: format!(
                    "{what}: its loss names workers {uncaused:?}, which the run did not {} while \
                     the job ran (or up to {} s before it started); workers it did: {causes:?}",
                    if off { "kill or drain" } else { "kill" },
                    LOST_WITHIN_MS / 1000
                ),
                lines: vec![job.line, l],
            });
        }
        if outcome == "end" || outcome == CHECKPOINTED {
            continue;
        }
        if !lost_workers.is_empty() && !spec.exactly_once && !spec.accept_loss {
            // DataLost: a failure with a reason, if the reason is the run's (above).
            failed_with_reason = true;
            continue;
        }
        out.push(Violation {
            invariant: COMPLETION,
            message: format!(
                "{what}: a read failed with no cause the run made (only DataLost naming a worker \
                 the run killed is one): {outcome}"
            ),
            lines: vec![job.line, l],
        });
    }
    let shown = vec![job.line, *lines.last().unwrap_or(&job.line)];
    let expected = spec.pipeline.expected();
    let expected_set: BTreeSet<i64> = expected.iter().copied().collect();
    let strangers: Vec<i64> =
        counts.keys().filter(|v| !expected_set.contains(v)).copied().take(5).collect();
    if !strangers.is_empty() {
        out.push(Violation {
            invariant: IN_RANGE,
            message: format!("{what}: values its pipeline does not yield, e.g. {strangers:?}"),
            lines: shown.clone(),
        });
    }
    let count = |v: &i64| counts.get(v).copied().unwrap_or(0);
    summary.elements_checked += counts.values().map(|c| u64::from(*c)).sum::<u64>();
    let completed = out.len() == before && !failed_with_reason;
    if off {
        let o = OffJob {
            what: &what,
            start: job.start,
            end,
            completed,
            lost: lost.len(),
            shown: &shown,
        };
        check_off(&o, up, stopped, &expected, &count, out, summary);
    } else {
        let twice: Vec<i64> = expected.iter().filter(|&&v| count(&v) > 1).copied().collect();
        if !twice.is_empty() {
            summary.duplicates += twice.iter().map(|v| u64::from(count(v) - 1)).sum::<u64>();
            out.push(Violation {
                invariant: NO_DUPLICATES,
                message: format!(
                    "{what}: {} values arrived more than once, e.g. {:?}",
                    twice.len(),
                    &twice[..twice.len().min(5)]
                ),
                lines: shown.clone(),
            });
        }
        let missing: Vec<i64> = expected.iter().filter(|&&v| count(&v) == 0).copied().collect();
        if completed && !missing.is_empty() {
            summary.losses += missing.len() as u64;
            if spec.exactly_once || lost.is_empty() {
                out.push(Violation {
                    invariant: EXACTLY_ONCE,
                    message: format!(
                        "{what}: {} of {} values never arrived{}, e.g. {:?}",
                        missing.len(),
                        expected.len(),
                        if spec.exactly_once { "" } else { " and no loss was reported" },
                        &missing[..missing.len().min(5)]
                    ),
                    lines: shown.clone(),
                });
            }
        }
    }
    if out.len() > before {
        Verdict::Violation
    } else if failed_with_reason {
        Verdict::FailedWithReason
    } else {
        Verdict::Completed
    }
}

/// What the OFF rule needs of a job.
struct OffJob<'a> {
    what: &'a str,
    start: Millis,
    end: Millis,
    /// Its reads all ended "end", or with DataLost naming workers the run stopped.
    completed: bool,
    /// Distinct workers its loss reports named.
    lost: usize,
    shown: &'a [usize],
}

/// OFF: each worker that took part and was not stopped yields a whole copy
/// (O1); a stopped worker's copy may be partial, and is then reported (L2, L10).
fn check_off(
    job: &OffJob,
    up: &[(Millis, &str)],
    stopped: &[Stopped],
    expected: &[i64],
    count: &dyn Fn(&i64) -> u32,
    out: &mut Vec<Violation>,
    summary: &mut Summary,
) {
    let what = job.what;
    // Workers up at some time during the job: each yields at most one copy.
    let workers: BTreeSet<&str> = up
        .iter()
        .filter(|(t, w)| {
            *t <= job.end && !stopped.iter().any(|s| s.worker == *w && s.t < job.start)
        })
        .map(|(_, w)| *w)
        .collect();
    let max = expected.iter().map(count).max().unwrap_or(0);
    let min = expected.iter().map(count).min().unwrap_or(0);
    if max as usize > workers.len() {
        summary.duplicates += u64::from(max) - workers.len() as u64;
        out.push(Violation {
            invariant: OFF_COPIES,
            message: format!(
                "{what}: a value arrived {max} times, more than the {} workers up while it ran",
                workers.len()
            ),
            lines: job.shown.to_vec(),
        });
    }
    if !job.completed {
        return;
    }
    // Whole copies W, partial ones at most one per lost worker: every value
    // arrives between W and W + lost times; without a loss, all W ≥ 1 copies whole.
    let whole = if job.lost == 0 { min == max && min > 0 } else { max - min <= job.lost as u32 };
    if !whole {
        summary.losses += expected.iter().map(|v| u64::from(max - count(v))).sum::<u64>();
        out.push(Violation {
            invariant: OFF_COPIES,
            message: format!(
                "{what}: values arrived between {min} and {max} times, but {} workers were \
                 reported lost: {}",
                job.lost,
                if job.lost == 0 {
                    "with no loss every copy must be whole (and there must be one)"
                } else {
                    "each lost worker's copy can make a value short by one at most"
                }
            ),
            lines: job.shown.to_vec(),
        });
    }
}

/// "job 7 (named lifecycle-7, dynamic exactly-once, range(300), 1 reader)".
fn describe(n: u32, spec: &JobSpec) -> String {
    format!(
        "job {n} ({}, {}{}, {:?}, {} readers{})",
        spec.name.as_deref().map(|n| format!("named {n}")).unwrap_or("anonymous".into()),
        spec.mode,
        if spec.exactly_once { " exactly-once" } else { "" },
        spec.pipeline,
        spec.readers,
        if spec.accept_loss { ", accepts loss" } else { "" }
    )
}

fn outcome(e: &Event) -> &str {
    match e {
        Event::JobEnd { outcome, .. } => outcome,
        _ => "",
    }
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;
