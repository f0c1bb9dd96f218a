//! Tagged pipelines (exactly-once jobs, docs/exactly-once.md): every element
//! carries the source records it stands for, what the pipeline drops goes to
//! its sink, and the records of elements and sink cover every record once.

mod common;

use std::collections::BTreeMap;

use sluice_dataset::{Arg, DatasetDef, FunctionRegistry, Stage, TaggedIter};
use sluice_positions::{Origin, Run, Tag};

use common::Splits;

/// What a tagged run produced: each element's value(s) with its own origin, and
/// everything the sink held (taken after each element and at the end).
struct Output {
    elements: Vec<(Vec<i64>, Origin)>,
    dropped: Origin,
}

fn values(e: &sluice_dataset::Element) -> Vec<i64> {
    let t = &e.components[0];
    let data = t.data();
    data.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect()
}

fn drain(tagged: TaggedIter, read: impl Fn(&sluice_dataset::Element) -> Vec<i64>) -> Output {
    let TaggedIter { elements, dropped } = tagged;
    let mut out = Output { elements: vec![], dropped: Origin::default() };
    for item in elements {
        let mut e = item.expect("no error");
        let origin = e.origin.take().expect("every element of a tagged pipeline has an origin");
        let origin = origin.into_origin();
        out.elements.push((read(&e), origin));
        out.dropped.append(dropped.take());
    }
    out.dropped.append(dropped.take());
    out
}

/// Every record named by `origins`, counted: (unit, record) → times.
fn records<'a>(origins: impl IntoIterator<Item = &'a Origin>) -> BTreeMap<(u64, u64), u32> {
    let mut seen = BTreeMap::new();
    for o in origins {
        for r in &o.runs {
            for k in r.first..r.end() {
                *seen.entry((r.unit, k)).or_insert(0) += 1;
            }
        }
    }
    seen
}

fn once(units: impl IntoIterator<Item = (u64, u64)>) -> BTreeMap<(u64, u64), u32> {
    units.into_iter().map(|k| (k, 1)).collect()
}

#[test]
fn range_filter_shuffle_batch_covers_every_record_once_with_origins_on_the_right_elements() {
    let def = DatasetDef::range(50)
        .filter_with("mod_eq", vec![Arg::Int(3), Arg::Int(0)])
        .parallel_map("identity", vec![], 3)
        .shuffle(7, 42)
        .batch(4, true)
        .prefetch(2);
    let run = drain(def.iter_tagged(&FunctionRegistry::builtin(), None).expect("starts"), values);
    assert!(!run.elements.is_empty());
    for (vals, origin) in &run.elements {
        let mut units: Vec<u64> =
            origin.runs.iter().flat_map(|r| r.unit..r.unit + r.count).collect();
        let mut want: Vec<u64> = vals.iter().map(|v| *v as u64).collect();
        units.sort();
        want.sort();
        assert_eq!(units, want, "a batch's origin names exactly its elements' units");
    }
    // Filtered units and the dropped remainder are in the sink.
    let all = records(run.elements.iter().map(|(_, o)| o).chain([&run.dropped]));
    assert_eq!(all, once((0..50).map(|u| (u, 0))), "every record exactly once");
    assert!(run.dropped.runs.iter().any(|r| r.unit % 3 == 0), "the remainder was dropped");
}

#[test]
fn split_skip_runs_are_not_produced_again() {
    let def = DatasetDef::range_with(100, 110, 1).batch(1, false);
    let splits = Splits(
        vec![(0, 5, vec![Run::record(1, 0), Run::record(3, 0)]), (5, 10, vec![Run::record(7, 0)])],
        vec![],
    );
    let tagged = def.iter_tagged(&FunctionRegistry::builtin(), Some(Box::new(splits)));
    let run = drain(tagged.expect("starts"), values);
    let got: Vec<(i64, u64)> = run.elements.iter().map(|(v, o)| (v[0], o.runs[0].unit)).collect();
    let want: Vec<(i64, u64)> =
        [0, 2, 4, 5, 6, 8, 9].iter().map(|u| (100 + *u as i64, *u)).collect();
    assert_eq!(got, want);
    assert!(run.dropped.is_empty(), "skipped records are not reported again");
}

fn lines(e: &sluice_dataset::Element) -> Vec<i64> {
    let item = e.components[0].items().expect("a string").remove(0);
    vec![String::from_utf8_lossy(&item).parse().expect("a number")]
}

fn text_files(dir: &std::path::Path, counts: &[u64]) -> Vec<String> {
    counts
        .iter()
        .enumerate()
        .map(|(f, n)| {
            let path = dir.join(format!("{f}.txt"));
            let text: String = (0..*n).map(|k| format!("{}\n", f as u64 * 100 + k)).collect();
            std::fs::write(&path, text).expect("write");
            path.to_string_lossy().into_owned()
        })
        .collect()
}

#[test]
fn a_file_source_numbers_its_records_skips_consumed_ones_and_reports_unit_ends() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = text_files(dir.path(), &[3, 0, 2]);
    let def = DatasetDef::text_lines(files);
    let splits = Splits(vec![(0, 2, vec![Run::record(0, 1)]), (2, 3, vec![])], vec![]);
    let tagged = def.iter_tagged(&FunctionRegistry::builtin(), Some(Box::new(splits)));
    let run = drain(tagged.expect("starts"), lines);
    let got: Vec<(i64, Vec<Run>)> =
        run.elements.iter().map(|(v, o)| (v[0], o.runs.clone())).collect();
    assert_eq!(
        got,
        vec![
            (0, vec![Run::record(0, 0)]),
            (2, vec![Run::record(0, 2)]),
            (200, vec![Run::record(2, 0)]),
            (201, vec![Run::record(2, 1)]),
        ],
        "record 1 of file 0 was consumed"
    );
    let mut ends = run.dropped.unit_ends.clone();
    ends.sort();
    assert_eq!(ends, vec![(0, 3), (1, 0), (2, 2)], "a skipped record still counts");
}

/// WebDataset shards: shard `s`, sample `k` has key `s*100+k` (sample 1 of shard
/// 0 is bad: two `.jpg` members, an element error).
fn webdataset_shards(dir: &std::path::Path) -> Vec<String> {
    let shards: [&[&[&str]]; 2] =
        [&[&["jpg", "cls"], &["jpg", "jpg"], &["jpg"], &["cls", "jpg"]], &[&["jpg"], &["jpg"]]];
    shards
        .iter()
        .enumerate()
        .map(|(s, samples)| {
            let mut tar = tar::Builder::new(Vec::new());
            for (k, exts) in samples.iter().enumerate() {
                for ext in *exts {
                    let mut h = tar::Header::new_gnu();
                    h.set_size(1);
                    h.set_mode(0o644);
                    tar.append_data(&mut h, format!("{}.{ext}", s * 100 + k), &b"x"[..])
                        .expect("append");
                }
            }
            let path = dir.join(format!("{s}.tar"));
            std::fs::write(&path, tar.into_inner().expect("finish")).expect("write");
            path.to_string_lossy().into_owned()
        })
        .collect()
}

/// A re-granted shard resumes after the samples already consumed (an
/// exactly-once read resumed mid-shard), and a bad sample that `ignore_errors`
/// skips is consumed once: in the sink, or not at all if it was consumed before.
#[test]
fn a_webdataset_shard_resumes_mid_shard_and_skipped_bad_samples_are_consumed_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let for_each = [DatasetDef::webdataset(webdataset_shards(dir.path())), {
        DatasetDef::from_strings(webdataset_shards(dir.path())).flat_map("webdataset", vec![])
    }];
    for def in for_each {
        let def = def.ignore_errors();
        let consumed = vec![Run::record(0, 0), Run::record(0, 2)];
        let splits = Splits(vec![(0, 2, consumed)], vec![]);
        let tagged = def.iter_tagged(&FunctionRegistry::builtin(), Some(Box::new(splits)));
        let run = drain(tagged.expect("starts"), lines);
        let got: Vec<(i64, Vec<Run>)> =
            run.elements.iter().map(|(v, o)| (v[0], o.runs.clone())).collect();
        let want = [(3, Run::record(0, 3)), (100, Run::record(1, 0)), (101, Run::record(1, 1))];
        assert_eq!(got, want.map(|(v, r)| (v, vec![r])), "{def:?}");
        assert_eq!(run.dropped.runs, vec![Run::record(0, 1)], "the skipped bad sample");
        let mut ends = run.dropped.unit_ends.clone();
        ends.sort();
        assert_eq!(ends, vec![(0, 4), (1, 2)], "bad and consumed samples still count");

        let consumed = vec![Run { unit: 0, first: 0, count: 3 }];
        let splits = Splits(vec![(0, 1, consumed)], vec![]);
        let tagged = def.iter_tagged(&FunctionRegistry::builtin(), Some(Box::new(splits)));
        let run = drain(tagged.expect("starts"), lines);
        assert_eq!(run.elements.len(), 1);
        assert!(run.dropped.runs.is_empty(), "a consumed bad sample is not dropped again");
        assert_eq!(run.dropped.unit_ends, vec![(0, 4)]);
    }
}

#[test]
fn an_expansion_numbers_the_records_it_makes_of_each_unit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = text_files(dir.path(), &[2, 3, 1]);
    let mut registry = FunctionRegistry::builtin();
    // Drops unit 2 before the expansion: it then has no record.
    registry.register_filter("not_last", 0, |e, _| {
        Ok(!String::from_utf8_lossy(&e.components[0].items().expect("name")[0]).ends_with("2.txt"))
    });
    for threads in [1, 3] {
        let mut def = DatasetDef::from_strings(files.clone())
            .filter("not_last")
            .interleave("text_lines", 2, 1)
            .batch(2, false);
        if let Stage::Interleave { num_parallel_calls, .. } = &mut def.stages[2] {
            *num_parallel_calls = threads;
        }
        expansion_run(&def, &registry);
    }
}

fn expansion_run(def: &DatasetDef, registry: &FunctionRegistry) {
    let splits = Splits(vec![(0, 3, vec![Run::record(1, 1)])], vec![]);
    let run = drain(def.iter_tagged(registry, Some(Box::new(splits))).expect("starts"), |e| {
        e.components[0]
            .items()
            .expect("strings")
            .iter()
            .map(|i| String::from_utf8_lossy(i).parse().expect("a number"))
            .collect()
    });
    let all = records(run.elements.iter().map(|(_, o)| o));
    assert_eq!(all, once([(0, 0), (0, 1), (1, 0), (1, 2)]), "record (1, 1) was consumed");
    for (vals, origin) in &run.elements {
        let named: Vec<i64> = origin
            .runs
            .iter()
            .flat_map(|r| (r.first..r.end()).map(move |k| (r.unit * 100 + k) as i64))
            .collect();
        let mut vals = vals.clone();
        vals.sort();
        let mut named = named;
        named.sort();
        assert_eq!(vals, named, "origins stay with their elements through the interleave");
    }
    let mut ends = run.dropped.unit_ends.clone();
    ends.sort();
    assert_eq!(ends, vec![(0, 2), (1, 3), (2, 0)], "the filtered unit expands to no record");
}

#[test]
fn untagged_pipelines_carry_no_origins() {
    let def = DatasetDef::range(10).batch(3, false);
    for e in def.iter_local(&FunctionRegistry::builtin()).expect("starts") {
        assert!(e.expect("ok").origin.is_none());
    }
}

/// The origins a tagged run gives its elements, as the pipeline carries them.
fn tags(def: &DatasetDef) -> Vec<Tag> {
    let tagged = def.iter_tagged(&FunctionRegistry::builtin(), None).expect("starts");
    tagged.elements.map(|e| e.expect("ok").origin.expect("tagged")).collect()
}

#[test]
fn one_run_origins_are_inline_and_a_dropped_remainder_is_one_run_in_the_sink() {
    assert!(tags(&DatasetDef::range(5)).iter().all(|t| matches!(t, Tag::Run(_))));
    let dir = tempfile::tempdir().expect("tempdir");
    let lines = DatasetDef::text_lines(text_files(dir.path(), &[5]));
    assert_eq!(
        tags(&lines.clone().batch(4, false)),
        vec![Tag::Run(Run { unit: 0, first: 0, count: 4 }), Tag::Run(Run::record(0, 4))],
        "a batch of one file's consecutive records is one inline run"
    );
    let batched = tags(&DatasetDef::range(3).batch(3, false));
    assert!(matches!(&batched[..], [Tag::Origin(_)]), "one run per unit: {batched:?}");
    assert_eq!(batched[0].runs(), &[Run::record(0, 0), Run::record(1, 0), Run::record(2, 0)]);

    let tagged = lines.batch(3, true).iter_tagged(&FunctionRegistry::builtin(), None);
    let run = drain(tagged.expect("starts"), |_| vec![]);
    assert_eq!(run.elements.len(), 1);
    assert_eq!(run.dropped.runs, vec![Run { unit: 0, first: 3, count: 2 }], "the remainder");
    assert_eq!(run.dropped.unit_ends, vec![(0, 5)]);
}
