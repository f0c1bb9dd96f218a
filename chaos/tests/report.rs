//! The report: the summary table, `report.json` and the SVG chart, on
//! synthetic runs.

use std::collections::BTreeMap;
use std::time::Duration;

use sluice_chaos::checker::{check, CheckOptions, Summary};
use sluice_chaos::history::{Event, Fault, Millis};
use sluice_chaos::report::{render_table, write_chart, write_json};

fn summary(seed: u64, faults: &[(&str, u32)], violations: usize) -> Summary {
    Summary {
        seed,
        scenario: "leader-kills".into(),
        mode: "dynamic".into(),
        faults_by_kind: faults.iter().map(|(k, n)| (k.to_string(), *n)).collect::<BTreeMap<_, _>>(),
        elements_checked: 1000 * seed,
        duplicates: 0,
        losses: violations as u64,
        losses_by_worker_kill: vec![],
        longest_stall_after_leader_kill_ms: Some(400 * seed),
        time_to_recover_ms: Some(1500),
        epochs: 3,
        violations,
        ..Summary::default()
    }
}

#[test]
fn the_table_has_a_row_per_run_and_a_totals_row() {
    let table = render_table(&[
        summary(1, &[("kill leader", 2), ("partition", 1)], 0),
        summary(2, &[("kill leader", 1), ("kill worker", 3)], 2),
    ]);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "header, rule, two runs, totals:\n{table}");
    let header = lines[0];
    // One column per fault kind injected, in the order of Fault's variants.
    let kinds: Vec<usize> = ["kill leader", "kill worker", "partition"]
        .iter()
        .map(|k| header.find(k).expect(k))
        .collect();
    assert!(kinds.windows(2).all(|w| w[0] < w[1]), "{header}");
    for column in [
        "epochs",
        "elements",
        "duplicates",
        "losses",
        "stall after leader kill",
        "time to recover",
        "verdict",
    ] {
        assert!(header.contains(column), "{column} missing: {header}");
    }
    assert!(lines[2].starts_with("| leader-kills seed 1") && lines[2].contains("PASS"), "{table}");
    assert!(lines[3].contains("FAIL (2)") && lines[3].contains("0.800 s"), "{table}");
    let totals = lines[4];
    assert!(totals.starts_with("| total (2 runs)"), "{table}");
    assert!(totals.contains("1/2 passed") && totals.contains("max 0.800 s"), "{table}");
    // kill leader 2 + 1, kill worker 3, partition 1, elements 3000.
    let cells: Vec<&str> = totals.split('|').map(str::trim).collect();
    assert_eq!(&cells[3..6], ["3", "3", "1"], "{table}");
    assert!(cells.contains(&"3000"), "{table}");
    // Every row has the same width (aligned columns).
    assert!(lines.iter().all(|l| l.chars().count() == header.chars().count()), "{table}");
}

/// Twelve seconds of reading at about 4,000 elements/s with faults that slow
/// it: a leader kill (stall), a partition, a worker kill (a gap in its split).
fn run_with_faults() -> Vec<Event> {
    let mut events = vec![Event::Start {
        seed: 7,
        scenario: "mixed".into(),
        mode: "dynamic".into(),
        dataset_len: 12_000,
        workers: 2,
        consumers: 2,
        epochs: 2,
        work_dir_kind: "s3".into(),
        exactly_once: false,
        order: None,
        lifecycle: false,
    }];
    let faults: [(Millis, Millis, Fault); 4] = [
        (2_000, 3_500, Fault::KillDispatcher { node: 1, was_leader: true }),
        (2_600, 4_000, Fault::S3Slow { ms: 200 }),
        (6_000, 7_000, Fault::Partition { a: 2, b: 3 }),
        (8_500, 9_000, Fault::KillWorker { worker: 1 }),
    ];
    for (id, (start, _, fault)) in faults.iter().enumerate() {
        events.push(Event::FaultStart { t_ms: *start, id: id as u32 + 1, fault: fault.clone() });
    }
    let mut t = 0;
    for epoch in 0..2 {
        for value in 0..12_000i64 {
            // 2 per ms, nothing from 2.4 s to 3.1 s (leader gone, buffers
            // drained), and the split worker 1 held at 8.5 s is lost.
            t += if (2_400..3_100).contains(&t) { 700 } else { u64::from(value % 2 == 0) };
            if epoch == 1 && (2_000..2_040).contains(&value) {
                continue;
            }
            events.push(Event::Element { t_ms: t, consumer: (value % 2) as u32, epoch, value });
        }
        t += 30;
        for consumer in 0..2 {
            events.push(Event::EpochEnd { t_ms: t, consumer, epoch, outcome: "end".into() });
        }
    }
    for (id, (_, end, _)) in faults.iter().enumerate() {
        events.push(Event::FaultEnd { t_ms: *end, id: id as u32 + 1 });
    }
    events
}

#[test]
fn json_and_svg_are_written_next_to_each_other_with_the_faults_labelled() {
    let dir = tempfile::tempdir().unwrap();
    let events = run_with_faults();
    let opts =
        CheckOptions { completion_bound: Duration::from_secs(30), max_loss_per_worker_kill: 64 };
    let result = check(&events, &opts);

    let json_path = write_json(dir.path(), std::slice::from_ref(&result)).unwrap();
    assert_eq!(json_path, dir.path().join("report.json"));
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    assert_eq!(json["runs"][0]["summary"]["seed"], 7);
    assert_eq!(json["runs"][0]["summary"]["faults_by_kind"]["kill leader"], 1);
    assert_eq!(json["passed"], true, "{}", sluice_chaos::checker::explain(&events, &result));
    assert_eq!(json["runs"][0]["summary"]["losses_by_worker_kill"], serde_json::json!([[4, 40]]));
    assert!(json["runs"][0]["violations"].is_array());

    let svg_path = write_chart(dir.path(), "mixed-seed-7", &events).unwrap();
    assert_eq!(svg_path, dir.path().join("mixed-seed-7.svg"));
    let svg = std::fs::read_to_string(&svg_path).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..80]);
    for label in [
        "#1 kill leader",
        "#2 s3 slow",
        "#3 partition",
        "#4 kill worker",
        "epoch 0 end",
        "elements/s",
        "time since the run started (s)",
    ] {
        assert!(svg.contains(label), "{label} missing from the chart");
    }
}

#[test]
fn a_failed_read_is_marked_and_an_empty_history_still_charts() {
    let dir = tempfile::tempdir().unwrap();
    let mut events = run_with_faults();
    if let Some(Event::EpochEnd { outcome, .. }) =
        events.iter_mut().rev().find(|e| matches!(e, Event::EpochEnd { .. }))
    {
        *outcome = "deadline exceeded".into();
    }
    let svg = std::fs::read_to_string(write_chart(dir.path(), "failed", &events).unwrap()).unwrap();
    assert!(svg.contains("epoch 1 error"));
    let empty = std::fs::read_to_string(write_chart(dir.path(), "empty", &[]).unwrap()).unwrap();
    assert!(empty.contains("elements/s"));
}
