//! The checker on synthetic histories built in code: each test makes a clean
//! run, breaks one thing (or injects one fault), and asserts what the checker
//! reports, down to the history lines it points at.

use std::time::Duration;

use sluice_chaos::checker::{check, explain, CheckOptions, CheckResult};
use sluice_chaos::history::{read_history, Event, Fault, HistoryWriter, Millis};

fn opts() -> CheckOptions {
    CheckOptions { completion_bound: Duration::from_secs(10), max_loss_per_worker_kill: 10 }
}

fn start(mode: &str, dataset_len: u64, workers: u32, consumers: u32, epochs: u32) -> Event {
    Event::Start {
        seed: 42,
        scenario: "unit".into(),
        mode: mode.into(),
        dataset_len,
        workers,
        consumers,
        epochs,
        work_dir_kind: "local disk".into(),
        exactly_once: false,
        order: None,
        lifecycle: false,
    }
}

fn element(t_ms: Millis, consumer: u32, epoch: u32, value: i64) -> Event {
    Event::Element { t_ms, consumer, epoch, value }
}

fn end(t_ms: Millis, consumer: u32, epoch: u32) -> Event {
    Event::EpochEnd { t_ms, consumer, epoch, outcome: "end".into() }
}

fn fault(t_ms: Millis, id: u32, fault: Fault) -> Event {
    Event::FaultStart { t_ms, id, fault }
}

fn heal(t_ms: Millis, id: u32) -> Event {
    Event::FaultEnd { t_ms, id }
}

fn kill_leader() -> Fault {
    Fault::KillDispatcher { node: 1, was_leader: true }
}

/// A clean run: one element a millisecond, consumers taking turns; in OFF mode
/// each epoch carries `workers` copies one after the other. Epoch `e` of a
/// DYNAMIC run of 100 elements spans about t = 101·e + 1 ..= 101·(e + 1).
fn clean(mode: &str, n: u64, workers: u32, consumers: u32, epochs: u32) -> Vec<Event> {
    let mut events = vec![start(mode, n, workers, consumers, epochs)];
    let copies = if mode == "off" { workers } else { 1 };
    let mut t = 0;
    for epoch in 0..epochs {
        for _ in 0..copies {
            for v in 0..n {
                t += 1;
                events.push(element(t, v as u32 % consumers, epoch, v as i64));
            }
        }
        t += 1;
        events.extend((0..consumers).map(|c| end(t, c, epoch)));
    }
    events
}

fn time(e: &Event) -> Millis {
    e.t_ms().unwrap_or(0)
}

/// Adds events where their times put them (after events of the same time).
fn with(mut events: Vec<Event>, extra: impl IntoIterator<Item = Event>) -> Vec<Event> {
    for e in extra {
        let at = events.iter().position(|x| time(x) > time(&e)).unwrap_or(events.len());
        events.insert(at, e);
    }
    events
}

fn without_values(
    events: Vec<Event>,
    epoch: u32,
    values: std::ops::RangeInclusive<i64>,
) -> Vec<Event> {
    events
        .into_iter()
        .filter(|e| !matches!(e, Event::Element { epoch: ep, value, .. } if *ep == epoch && values.contains(value)))
        .collect()
}

fn invariants(result: &CheckResult) -> Vec<&'static str> {
    result.violations.iter().map(|v| v.invariant).collect()
}

fn line_of(events: &[Event], wanted: &Event) -> usize {
    events.iter().position(|e| e == wanted).expect("event in history")
}

#[test]
fn a_clean_dynamic_run_passes() {
    let events = clean("dynamic", 100, 2, 3, 3);
    let result = check(&events, &opts());
    assert_eq!(result.violations, vec![]);
    let s = &result.summary;
    assert_eq!((s.seed, s.scenario.as_str(), s.mode.as_str()), (42, "unit", "dynamic"));
    assert_eq!((s.elements_checked, s.duplicates, s.losses, s.epochs), (300, 0, 0, 3));
    assert_eq!(s.time_to_recover_ms, None);
    assert_eq!(s.longest_stall_after_leader_kill_ms, None);
}

#[test]
fn a_duplicate_is_caught_with_both_deliveries_whatever_the_faults() {
    let events = with(
        clean("dynamic", 100, 2, 2, 2),
        [element(150, 1, 1, 60), fault(10, 1, Fault::KillWorker { worker: 0 }), heal(20, 1)],
    );
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["no-duplicates"]);
    let v = &result.violations[0];
    assert!(v.message.contains("epoch 1") && v.message.contains("60 ×2"), "{}", v.message);
    let first = line_of(&events, &element(101 + 61, 0, 1, 60));
    let second = line_of(&events, &element(150, 1, 1, 60));
    assert_eq!(v.lines, vec![second, first]);
    assert_eq!(result.summary.duplicates, 1);
}

#[test]
fn a_loss_under_dispatcher_only_faults_breaks_exactly_once() {
    let events = with(
        without_values(clean("dynamic", 100, 2, 2, 2), 0, 10..=14),
        [fault(5, 1, kill_leader()), heal(30, 1), fault(40, 2, Fault::S3Down), heal(45, 2)],
    );
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["exactly-once"]);
    let v = &result.violations[0];
    assert!(v.message.contains("epoch 0: 5 values never delivered"), "{}", v.message);
    assert!(v.message.contains("10..=14 (5)"), "{}", v.message);
    // The neighbour delivered before the gap, and the epoch's ends.
    assert!(v.lines.contains(&line_of(&events, &element(10, 1, 0, 9))));
    assert!(v.lines.contains(&line_of(&events, &end(101, 0, 0))));
    assert_eq!(result.summary.losses, 5);
    assert_eq!(result.summary.faults_by_kind.get("kill leader"), Some(&1));
    assert_eq!(result.summary.faults_by_kind.get("s3 down"), Some(&1));
}

#[test]
fn losses_within_the_worker_kill_bound_pass_and_go_to_the_nearest_kill() {
    // Two kills in epoch 0: a gap right after t = 20 (value 19 delivered at 20)
    // and one after t = 80; kill #7 at t = 21, kill #8 at t = 79.
    let events = with(
        without_values(without_values(clean("dynamic", 100, 2, 2, 2), 0, 20..=25), 0, 80..=83),
        [
            fault(21, 7, Fault::KillWorker { worker: 0 }),
            heal(40, 7),
            fault(79, 8, Fault::KillWorker { worker: 1 }),
            heal(95, 8),
        ],
    );
    let result = check(&events, &opts());
    assert_eq!(result.violations, vec![]);
    assert_eq!(result.summary.losses, 10);
    assert_eq!(result.summary.losses_by_worker_kill, vec![(7, 6), (8, 4)]);
}

#[test]
fn losses_beyond_the_worker_kill_bound_fail() {
    let events = with(
        without_values(clean("dynamic", 100, 2, 2, 2), 0, 20..=30),
        [fault(21, 7, Fault::KillWorker { worker: 0 }), heal(40, 7)],
    );
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["bounded-loss"]);
    let v = &result.violations[0].message;
    assert!(v.contains("11 values lost, more than 10 = 1 worker kills") && v.contains("#7"), "{v}");
    assert_eq!(result.summary.losses_by_worker_kill, vec![(7, 11)]);
}

#[test]
fn a_loss_in_an_epoch_no_worker_kill_touched_fails() {
    // The kill is in epoch 0; the loss in epoch 1.
    let events = with(
        without_values(clean("dynamic", 100, 2, 2, 2), 1, 50..=50),
        [fault(10, 7, Fault::KillWorker { worker: 0 }), heal(20, 7)],
    );
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["bounded-loss"]);
    assert!(result.violations[0].message.contains("more than 0 = 0 worker kills"));
    assert_eq!(result.summary.losses_by_worker_kill, vec![(7, 0)]);
}

#[test]
fn off_mode_complete_copies_pass() {
    let result = check(&clean("off", 50, 3, 2, 2), &opts());
    assert_eq!(result.violations, vec![]);
    assert_eq!(result.summary.elements_checked, 300);
}

#[test]
fn off_mode_a_restarted_worker_may_start_its_copy_over() {
    // Worker 2 was killed at t = 10 after delivering values 0..=4 of epoch 0,
    // and restarted: those five arrive a fourth time.
    let extra = (0..5).map(|v| element(9, 0, 0, v));
    let events = with(
        clean("off", 50, 3, 2, 2),
        extra.chain([fault(10, 3, Fault::KillWorker { worker: 2 }), heal(12, 3)]),
    );
    let result = check(&events, &opts());
    assert_eq!(result.violations, vec![]);
    assert_eq!(result.summary.duplicates, 0);
}

#[test]
fn off_mode_extra_copies_without_a_worker_kill_fail() {
    let events = with(clean("off", 50, 3, 2, 2), [element(9, 0, 0, 4)]);
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["off-copies"]);
    let v = &result.violations[0];
    assert!(v.message.contains("more than 3 workers + 0 worker kills = 3 times"), "{}", v.message);
    assert_eq!(v.lines.len(), 4, "the four deliveries of value 4");
    assert_eq!(result.summary.duplicates, 1);
}

#[test]
fn off_mode_missing_copies_fail() {
    let events = without_values(clean("off", 50, 3, 2, 2), 1, 7..=7);
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["off-copies"]);
    let v = &result.violations[0];
    assert!(v.message.contains("epoch 1: 1 values arrived fewer than 3 times"), "{}", v.message);
    assert!(v.message.contains("7 ×0"), "{}", v.message);
    assert_eq!(result.summary.losses, 3);
}

#[test]
fn a_read_that_ends_with_an_error_fails_completion() {
    let mut events = clean("dynamic", 100, 2, 2, 2);
    let at = line_of(&events, &end(202, 1, 1));
    events[at] = Event::EpochEnd {
        t_ms: 202,
        consumer: 1,
        epoch: 1,
        outcome: "worker 127.0.0.1:4001 unreachable".into(),
    };
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["completion"]);
    assert!(result.violations[0].message.contains("consumer 1: worker 127.0.0.1:4001 unreachable"));
    assert_eq!(result.violations[0].lines, vec![at]);
    assert_eq!(result.summary.epochs, 1);
}

#[test]
fn a_read_that_never_ends_fails_completion_and_says_the_history_is_incomplete() {
    let events: Vec<Event> =
        clean("dynamic", 100, 2, 2, 2).into_iter().filter(|e| *e != end(202, 0, 1)).collect();
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["history", "completion"]);
    assert!(result.violations[1].message.contains("consumers 0 never ended"));
    // The last element consumer 0 received in epoch 1.
    assert_eq!(result.violations[1].lines, vec![line_of(&events, &element(200, 0, 1, 98))]);
}

#[test]
fn an_epoch_ending_too_long_after_the_last_heal_fails_completion() {
    let bound = |ms| CheckOptions { completion_bound: Duration::from_millis(ms), ..opts() };
    let events = with(clean("dynamic", 100, 2, 2, 1), [fault(5, 1, Fault::S3Down), heal(20, 1)]);
    // Epoch 0 ends at t = 101: 81 ms after the heal.
    let late = check(&events, &bound(50));
    assert_eq!(invariants(&late), vec!["completion"]);
    assert!(late.violations[0].message.contains("0.081 s after fault #1 healed"));
    assert_eq!(
        late.violations[0].lines,
        vec![line_of(&events, &heal(20, 1)), line_of(&events, &end(101, 1, 0))]
    );
    // Measured from the heal, not from the first element (100 ms before the end).
    assert_eq!(check(&events, &bound(90)).violations, vec![]);
    // Without a heal, from the first element.
    assert_eq!(invariants(&check(&clean("dynamic", 100, 2, 2, 1), &bound(90))), vec!["completion"]);
    assert_eq!(late.summary.time_to_recover_ms, Some(81));
}

#[test]
fn a_registry_that_changed_across_a_full_restart_fails() {
    let registry = |t_ms, when: &str, digest: &str| Event::Registry {
        t_ms,
        when: when.into(),
        digest: digest.into(),
    };
    let same = with(
        clean("dynamic", 100, 2, 2, 2),
        [
            registry(110, "before", "d1"),
            fault(111, 1, Fault::FullRestart),
            heal(120, 1),
            registry(121, "after", "d1"),
        ],
    );
    assert_eq!(check(&same, &opts()).violations, vec![]);
    let changed = with(
        clean("dynamic", 100, 2, 2, 2),
        [
            registry(110, "before", "d1"),
            fault(111, 1, Fault::FullRestart),
            heal(120, 1),
            registry(121, "after", "d2"),
        ],
    );
    let result = check(&changed, &opts());
    assert_eq!(invariants(&result), vec!["registry"]);
    assert_eq!(
        result.violations[0].lines,
        vec![
            line_of(&changed, &registry(110, "before", "d1")),
            line_of(&changed, &registry(121, "after", "d2"))
        ]
    );
}

#[test]
fn values_outside_the_dataset_are_violations() {
    let events = with(
        clean("dynamic", 100, 2, 2, 1),
        [element(50, 0, 0, 100), element(51, 0, 0, -1), element(52, 0, 3, 1)],
    );
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["in-range"]);
    assert_eq!(result.violations[0].lines.len(), 3);
    assert!(result.violations[0].message.starts_with("3 lines"));
}

#[test]
fn a_truncated_history_reports_what_it_can() {
    // The run crashed mid-epoch 1, with a fault open; epoch 0 had a duplicate.
    let mut events =
        with(clean("dynamic", 100, 2, 2, 3), [element(60, 1, 0, 3), fault(150, 4, kill_leader())]);
    events.truncate(line_of(&events, &element(169, 1, 1, 67)));
    let result = check(&events, &opts());
    assert_eq!(invariants(&result), vec!["history", "no-duplicates", "completion", "completion"]);
    let incomplete = &result.violations[0];
    assert!(incomplete.message.contains("history incomplete"), "{}", incomplete.message);
    assert!(incomplete
        .message
        .contains("4 of 6 consumer epoch reads have no EpochEnd and 1 faults never healed"));
    assert_eq!(incomplete.lines, vec![line_of(&events, &fault(150, 4, kill_leader()))]);
    // No loss is claimed for the epoch that was cut short.
    assert_eq!(result.summary.losses, 0);
    assert_eq!(result.summary.epochs, 1);
}

#[test]
fn a_history_without_start_is_reported_not_panicked_on() {
    let result = check(&[element(1, 0, 0, 1)], &opts());
    assert_eq!(invariants(&result), vec!["history"]);
    assert_eq!(check(&[], &opts()).violations.len(), 1);
}

#[test]
fn the_stall_after_a_leader_kill_is_the_longest_gap_until_elements_flow_after_the_heal() {
    let mut events = vec![start("dynamic", 1000, 2, 1, 1)];
    let mut v = 0;
    let mut deliver = |times: &mut dyn Iterator<Item = Millis>, events: &mut Vec<Event>| {
        for t in times {
            events.push(element(t, 0, 0, v));
            v += 1;
        }
    };
    // Elements every 10 ms to t = 1000; the leader dies at 1000; buffered
    // elements still flow until 1200; nothing until 2500; the node is back at
    // 3000; a later 900 ms gap (4000..4900) is after the heal and not counted.
    deliver(&mut (10..=1000).step_by(10), &mut events);
    events.push(fault(1000, 1, kill_leader()));
    deliver(&mut (1010..=1200).step_by(10), &mut events);
    deliver(&mut (2500..=2990).step_by(10), &mut events);
    events.push(heal(3000, 1));
    deliver(&mut (3000..=4000).step_by(10), &mut events);
    deliver(&mut [4900].into_iter(), &mut events);
    let result = check(&events, &opts());
    assert_eq!(result.summary.longest_stall_after_leader_kill_ms, Some(1300));
    // A follower kill is not a leader kill.
    let follower: Vec<Event> = events
        .iter()
        .map(|e| match e {
            Event::FaultStart { t_ms, id, .. } => {
                fault(*t_ms, *id, Fault::KillDispatcher { node: 2, was_leader: false })
            }
            e => e.clone(),
        })
        .collect();
    assert_eq!(check(&follower, &opts()).summary.longest_stall_after_leader_kill_ms, None);
}

#[test]
fn explain_names_the_seed_the_schedule_the_violating_lines_and_the_replay_command() {
    let events = with(
        clean("dynamic", 100, 2, 2, 2),
        [element(150, 1, 1, 60), fault(10, 3, Fault::Partition { a: 1, b: 2 }), heal(20, 3)],
    );
    let result = check(&events, &opts());
    let text = explain(&events, &result);
    assert!(text.contains("FAILED: scenario unit, seed 42, mode dynamic"), "{text}");
    assert!(
        text.contains("start #3 partition  {\"kind\":\"partition\",\"a\":1,\"b\":2}"),
        "{text}"
    );
    assert!(text.contains("end   #3 partition"), "{text}");
    assert!(text.contains("1. [no-duplicates] epoch 1"), "{text}");
    let dup_line = line_of(&events, &element(150, 1, 1, 60));
    let verbatim = serde_json::to_string(&events[dup_line]).unwrap();
    assert!(text.contains(&format!("line {:>6}: {verbatim}", dup_line + 1)), "{text}");
    assert!(text.contains("replay: sluice chaos --scenario unit --seed 42"), "{text}");
}

#[test]
fn line_indexes_match_a_history_read_back_from_disk() {
    let events = with(clean("dynamic", 20, 1, 1, 1), [element(5, 0, 0, 2)]);
    let mut file = Vec::new();
    let mut writer = HistoryWriter::new(&mut file);
    for e in &events {
        writer.write(e).unwrap();
    }
    let read = read_history(std::io::Cursor::new(file)).unwrap();
    let result = check(&read, &opts());
    assert_eq!(invariants(&result), vec!["no-duplicates"]);
    assert!(result.violations[0]
        .lines
        .iter()
        .all(|l| matches!(read[*l], Event::Element { value: 2, .. })));
}
