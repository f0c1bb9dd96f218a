//! Liveness and durable state: every consumer's read of every epoch ends with
//! "end", soon enough after the last fault healed; and the registry read after a
//! full-cluster restart equals the one read before it.

use super::run::Run;
use super::verdict::{first_lines, fmt_ms, CheckOptions, Violation, COMPLETION, HISTORY, REGISTRY};
use crate::history::Event;

pub(crate) fn check(run: &Run, opts: &CheckOptions, out: &mut Vec<Violation>) {
    for epoch in 0..run.epochs.len() {
        let lines = &run.epochs[epoch];
        let mut errors = Vec::new();
        let mut error_lines = Vec::new();
        let mut unended = Vec::new();
        let mut unended_lines = Vec::new();
        for (consumer, end) in lines.ends.iter().enumerate() {
            match end.map(|l| (l, &run.events[l])) {
                Some((_, Event::EpochEnd { outcome, .. })) if outcome == "end" => {}
                Some((l, Event::EpochEnd { outcome, .. })) => {
                    errors.push(format!("consumer {consumer}: {outcome}"));
                    error_lines.push(l);
                }
                _ => {
                    unended.push(consumer.to_string());
                    // The last element it got shows how far it came.
                    let last = lines.elements.iter().rev().find(|l| {
                        matches!(&run.events[**l], Event::Element { consumer: c, .. } if *c as usize == consumer)
                    });
                    unended_lines.extend(last);
                }
            }
        }
        if !errors.is_empty() {
            out.push(Violation {
                invariant: COMPLETION,
                message: format!("epoch {epoch}: read ended with an error: {}", errors.join("; ")),
                lines: first_lines(error_lines),
            });
        }
        if !unended.is_empty() {
            out.push(Violation {
                invariant: COMPLETION,
                message: format!(
                    "epoch {epoch}: consumers {} never ended their read (no EpochEnd); the lines \
                     are the last element each received",
                    unended.join(", ")
                ),
                lines: first_lines(unended_lines),
            });
        }
        if run.completed(epoch) {
            check_bound(run, epoch, opts, out);
        }
    }
}

/// The epoch's last end must come within the bound after the later of its
/// first element and the last `FaultEnd` before that end.
fn check_bound(run: &Run, epoch: usize, opts: &CheckOptions, out: &mut Vec<Violation>) {
    let lines = &run.epochs[epoch];
    let Some(end_line) = lines.ends.iter().flatten().copied().max_by_key(|l| run.time(*l)) else {
        return;
    };
    let end = run.time(end_line);
    let first = lines.elements.iter().map(|l| run.time(*l)).min().unwrap_or(run.span(epoch).0);
    let heal = run
        .faults
        .iter()
        .filter_map(|f| Some((f.end?, f.end_line?, f.id)))
        .filter(|(t, _, _)| *t <= end)
        .max_by_key(|(t, _, _)| *t);
    let (from, from_what, mut shown) = match heal {
        Some((t, line, id)) if t > first => (t, format!("fault #{id} healed"), vec![line]),
        _ => (first, "its first element".to_string(), Vec::new()),
    };
    let bound = opts.completion_bound.as_millis() as u64;
    if end.saturating_sub(from) > bound {
        shown.push(end_line);
        out.push(Violation {
            invariant: COMPLETION,
            message: format!(
                "epoch {epoch} ended at {}, {} after {from_what} at {}: over the {} bound",
                fmt_ms(end),
                fmt_ms(end.saturating_sub(from)),
                fmt_ms(from),
                fmt_ms(bound)
            ),
            lines: first_lines(shown),
        });
    }
}

/// Each `Registry` "after" line must carry the digest of the "before" line
/// that precedes it.
pub(crate) fn check_registry(run: &Run, out: &mut Vec<Violation>) {
    let mut before: Option<(usize, &str)> = None;
    for &line in &run.registry {
        let Event::Registry { when, digest, .. } = &run.events[line] else { continue };
        match when.as_str() {
            "before" => before = Some((line, digest)),
            "after" => match before.take() {
                Some((_, d)) if d == digest => {}
                Some((b, d)) => out.push(Violation {
                    invariant: REGISTRY,
                    message: format!(
                        "the registry after the full restart differs from before: {} ≠ {}",
                        shorten(digest),
                        shorten(d)
                    ),
                    lines: vec![b, line],
                }),
                None => out.push(Violation {
                    invariant: REGISTRY,
                    message: "a Registry \"after\" line has no \"before\" to compare with".into(),
                    lines: vec![line],
                }),
            },
            other => out.push(Violation {
                invariant: REGISTRY,
                message: format!("Registry line with when = {other:?} (expected before/after)"),
                lines: vec![line],
            }),
        }
    }
    if let Some((line, _)) = before {
        out.push(Violation {
            invariant: HISTORY,
            message: "history incomplete: a Registry \"before\" line has no \"after\" (the run \
                      stopped during a full restart?)"
                .into(),
            lines: vec![line],
        });
    }
}

fn shorten(digest: &str) -> String {
    const MAX: usize = 60;
    match digest.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{:?}…", &digest[..cut]),
        None => format!("{digest:?}"),
    }
}
