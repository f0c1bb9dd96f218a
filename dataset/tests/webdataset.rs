//! WebDataset shards (tar files written here by `tar::Builder`): grouping by key,
//! order, split units, the `webdataset` dataset function, bounds and bad input.

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use sluice_dataset::formats::webdataset::{MAX_RECORD_BYTES, MAX_SAMPLE_MEMBERS};
use sluice_dataset::{
    DatasetDef, DatasetError, Element, FunctionRegistry, SplitProvider, SplitRange, Stage,
};

/// A member: (name, data).
type Member = (String, Vec<u8>);

fn header(name: &str, size: u64, kind: tar::EntryType) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_size(size);
    h.set_mode(0o644);
    h.set_entry_type(kind);
    h.set_path(name).expect("a short name");
    h.set_cksum();
    h
}

/// A tar file of `members` (long names through GNU long-name entries).
fn tar_bytes(members: &[Member]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (name, data) in members {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data.as_slice()).expect("append");
    }
    b.into_inner().expect("finish")
}

fn write(dir: &std::path::Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write");
    path.to_string_lossy().into_owned()
}

fn m(name: &str, data: &str) -> Member {
    (name.to_string(), data.as_bytes().to_vec())
}

/// Shard `s` holds samples `s-0`, `s-1`, … with 1–3 members each.
fn shards(dir: &std::path::Path) -> Vec<String> {
    let layouts: [&[&[&str]]; 3] = [
        &[&["jpg", "cls"], &["jpg"], &["cls", "json", "jpg"]],
        &[&["txt"]],
        &[&["jpg", "cls"], &["jpg", "cls"]],
    ];
    layouts
        .iter()
        .enumerate()
        .map(|(s, samples)| {
            let mut members = Vec::new();
            for (k, exts) in samples.iter().enumerate() {
                for ext in *exts {
                    members.push(m(&format!("{s}-{k}.{ext}"), &format!("{s}-{k} {ext}")));
                }
            }
            write(dir, &format!("shard-{s}.tar"), &tar_bytes(&members))
        })
        .collect()
}

/// A sample as (key, [(component, text)]), components in element order.
fn sample(e: &Element) -> (String, Vec<(String, String)>) {
    let names = e.names.as_ref().expect("named components");
    let text = |i: usize| {
        let item = e.components[i].items().expect("string or bytes").remove(0);
        String::from_utf8_lossy(&item).into_owned()
    };
    assert_eq!(names[0], "__key__");
    assert_eq!(e.components[0].dtype(), sluice_dataset::DType::String);
    let rest = (1..names.len())
        .map(|i| {
            assert_eq!(e.components[i].dtype(), sluice_dataset::DType::Bytes);
            assert!(e.components[i].shape().is_empty(), "a scalar");
            (names[i].clone(), text(i))
        })
        .collect();
    (text(0), rest)
}

fn keys(items: &[Result<Element, DatasetError>]) -> Vec<String> {
    items.iter().map(|r| sample(r.as_ref().expect("no error")).0).collect()
}

#[test]
fn samples_group_consecutive_members_by_key_in_shard_order() {
    let dir = tempfile::tempdir().expect("tempdir");
    let files = shards(dir.path());
    let out = common::run(&DatasetDef::webdataset(files));
    assert_eq!(keys(&out), ["0-0", "0-1", "0-2", "1-0", "2-0", "2-1"]);
    let third = sample(out[2].as_ref().expect("ok"));
    assert_eq!(
        third.1,
        [("cls", "0-2 cls"), ("jpg", "0-2 jpg"), ("json", "0-2 json")]
            .map(|(a, b)| (a.to_string(), b.to_string())),
        "one bytes scalar per extension, in name order"
    );
    assert_eq!(sample(out[1].as_ref().expect("ok")).1, [("jpg".into(), "0-1 jpg".into())]);
}

#[test]
fn keys_keep_directories_and_extensions_follow_the_first_dot_lowercased() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut b = tar::Builder::new(Vec::new());
    b.append(&header("train/", 0, tar::EntryType::Directory), std::io::empty()).expect("dir");
    let files = [
        m("train/a.b.seg.PNG", "seg"),
        m("train/a.b.JPG", "img"),
        m("README", "no extension"),
        m("train/._a.jpg", "no key"),
        m("train/c.jpg", "c"),
    ];
    for (name, data) in &files {
        b.append(&header(name, data.len() as u64, tar::EntryType::Regular), data.as_slice())
            .expect("append");
    }
    let file = write(dir.path(), "s.tar", &b.into_inner().expect("finish"));
    let out = common::run(&DatasetDef::webdataset(vec![file]));
    let got: Vec<_> = out.iter().map(|r| sample(r.as_ref().expect("ok"))).collect();
    assert_eq!(got[0].0, "train/a");
    assert_eq!(
        got[0].1,
        [("b.jpg".to_string(), "img".to_string()), ("b.seg.png".into(), "seg".into())]
    );
    assert_eq!(got[1], ("train/c".to_string(), vec![("jpg".to_string(), "c".to_string())]));
    assert_eq!(got.len(), 2, "a directory and files without key or extension are no samples");
}

#[test]
fn long_names_and_pax_paths_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let long = format!("{}/k.jpg", "d".repeat(300));
    let mut bytes = tar_bytes(&[m(&long, "long")]);
    bytes.truncate(bytes.len() - 1024); // the end blocks
    let record = |k: &str, v: &str| {
        let body = format!(" {k}={v}\n");
        let mut n = body.len() + 1;
        while format!("{n}{body}").len() != n {
            n += 1;
        }
        format!("{n}{body}")
    };
    let pax = record("path", "pax/key.cls");
    let mut b = tar::Builder::new(bytes);
    b.append(&header("PaxHeader", pax.len() as u64, tar::EntryType::XHeader), pax.as_bytes())
        .expect("pax");
    b.append(&header("ignored.cls", 3, tar::EntryType::Regular), &b"pax"[..]).expect("member");
    let file = write(dir.path(), "s.tar", &b.into_inner().expect("finish"));
    let out = common::run(&DatasetDef::webdataset(vec![file]));
    assert_eq!(keys(&out), [format!("{}/k", "d".repeat(300)), "pax/key".to_string()]);
}

/// Hands out fixed splits, then the end of the epoch.
struct Fixed(Arc<Mutex<Vec<(u64, u64)>>>);

impl SplitProvider for Fixed {
    fn next_split(&mut self) -> Result<Option<SplitRange>, DatasetError> {
        let mut splits = self.0.lock().expect("lock");
        Ok((!splits.is_empty())
            .then(|| splits.remove(0))
            .map(|(begin, end)| SplitRange { begin, end }))
    }
    fn reset(&mut self) -> Result<(), DatasetError> {
        Ok(())
    }
}

#[test]
fn the_split_unit_is_a_shard_and_only_the_split_shards_are_read() {
    let dir = tempfile::tempdir().expect("tempdir");
    let def = DatasetDef::webdataset(shards(dir.path()));
    assert_eq!(def.source_cardinality(), Some(3));
    let splits = Box::new(Fixed(Arc::new(Mutex::new(vec![(2, 3), (0, 1)]))));
    let out: Vec<_> =
        def.iter_with_splits(&FunctionRegistry::builtin(), splits).expect("starts").collect();
    assert_eq!(keys(&out), ["2-0", "2-1", "0-0", "0-1", "0-2"]);
    assert!(matches!(&def.stages[0], Stage::WebDataset { files } if files.len() == 3));
    let json = def.to_json();
    assert!(json.contains("\"webdataset\""), "{json}");
    assert_eq!(DatasetDef::from_json(&json).expect("parses"), def);
}

#[test]
fn the_webdataset_function_reads_listed_shards_through_flat_map_and_interleave() {
    let dir = tempfile::tempdir().expect("tempdir");
    shards(dir.path());
    let pattern = format!("{}/*.tar", dir.path().display());
    let mut listed = DatasetDef::list_files(&pattern);
    listed.resolve_files().expect("lists");
    let flat = common::run(&listed.clone().flat_map("webdataset", vec![]));
    assert_eq!(keys(&flat), ["0-0", "0-1", "0-2", "1-0", "2-0", "2-1"]);
    let mut parallel = listed.clone();
    parallel.stages.push(Stage::Interleave {
        name: "webdataset".into(),
        args: vec![],
        cycle_length: 2,
        block_length: 1,
        num_parallel_calls: 2,
    });
    assert_eq!(keys(&common::run(&parallel)), ["0-0", "1-0", "0-1", "0-2", "2-0", "2-1"]);
}

fn error(item: &Result<Element, DatasetError>) -> &DatasetError {
    item.as_ref().expect_err("an error")
}

/// Samples 0 and 2 are fine, sample 1 is bad as `bad` makes it.
fn around(bad: Vec<Member>) -> Vec<u8> {
    let mut members = vec![m("0.jpg", "zero")];
    members.extend(bad);
    members.push(m("2.jpg", "two"));
    tar_bytes(&members)
}

fn bad_record(item: &Result<Element, DatasetError>, file: &str, says: &[&str]) {
    match error(item) {
        e @ DatasetError::BadRecord { file: f, .. } => {
            assert_eq!(f, file);
            assert!(e.is_element_error());
            let text = e.to_string();
            for s in says {
                assert!(text.contains(s), "`{text}` should say `{s}`");
            }
        }
        other => panic!("expected a bad record, got {other}"),
    }
}

#[test]
fn bad_samples_are_element_errors_naming_shard_and_member_and_the_shard_goes_on() {
    let dir = tempfile::tempdir().expect("tempdir");
    let many: Vec<Member> = (0..=MAX_SAMPLE_MEMBERS).map(|i| m(&format!("1.x{i}"), "m")).collect();
    let cases: Vec<(Vec<Member>, Vec<&str>)> = vec![
        (vec![m("1.jpg", "a"), m("1.JPG", "b")], vec!["1.JPG", "second `jpg`"]),
        (many, vec!["MAX_SAMPLE_MEMBERS", "1.x64"]),
        (vec![m("1.jpg", "a"), m("9.jpg", "b"), m("1.cls", "c")], vec!["1.cls", "consecutive"]),
        (vec![(format!("{}.jpg", "n".repeat(5000)), vec![1])], vec!["MAX_NAME_BYTES"]),
    ];
    for (i, (bad, says)) in cases.into_iter().enumerate() {
        let file = write(dir.path(), &format!("bad{i}.tar"), &around(bad));
        let out = common::run(&DatasetDef::webdataset(vec![file.clone()]));
        let last = out.len() - 1;
        assert_eq!(keys(&[out[0].clone(), out[last].clone()]), ["0", "2"], "case {i}");
        bad_record(&out[last - 1], &file, &says);
        assert!(out[1..last - 1].iter().all(Result::is_ok), "case {i}: one bad sample");
    }
}

/// A shard whose sample 1 has a member of `MAX_RECORD_BYTES + 1` bytes, written
/// as a sparse file (the zeros are not stored).
fn oversized(dir: &std::path::Path) -> String {
    let path = dir.join("big.tar");
    let mut f = std::fs::File::create(&path).expect("create");
    let head = tar_bytes(&[m("0.jpg", "zero")]);
    f.write_all(&head[..head.len() - 1024]).expect("write");
    let size = MAX_RECORD_BYTES + 1;
    f.write_all(header("1.jpg", size, tar::EntryType::Regular).as_bytes()).expect("header");
    f.seek(SeekFrom::Current(size.div_ceil(512) as i64 * 512)).expect("seek");
    f.write_all(&tar_bytes(&[m("2.jpg", "two")])).expect("write");
    path.to_string_lossy().into_owned()
}

#[test]
fn a_member_over_the_bound_is_skipped_unread_and_ignore_errors_counts_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = oversized(dir.path());
    let out = common::run(&DatasetDef::webdataset(vec![file.clone()]));
    assert_eq!(out.len(), 3);
    bad_record(&out[1], &file, &["sample 1", "`1.jpg`", "MAX_RECORD_BYTES", "ignore_errors"]);
    assert_eq!(keys(&[out[0].clone(), out[2].clone()]), ["0", "2"]);

    let registry = FunctionRegistry::builtin();
    let def = DatasetDef::webdataset(vec![file.clone(), file.clone()]).ignore_errors();
    assert_eq!(keys(&common::run_with(&def, &registry)), ["0", "2", "0", "2"]);
    assert_eq!(registry.errors_ignored().load(Ordering::Relaxed), 2);

    // Through an interleave read by its pool threads: the bad sample takes its
    // place in the round, and the shards go on.
    let mut def = DatasetDef::from_strings(vec![file.clone(), file]);
    def.stages.push(Stage::Interleave {
        name: "webdataset".into(),
        args: vec![],
        cycle_length: 2,
        block_length: 1,
        num_parallel_calls: 2,
    });
    let out = common::run_with(&def.ignore_errors(), &registry);
    assert_eq!(keys(&out), ["0", "0", "2", "2"]);
    assert_eq!(registry.errors_ignored().load(Ordering::Relaxed), 4);
}

fn corrupt(item: &Result<Element, DatasetError>, file: &str, at: u64, says: &[&str]) {
    match error(item) {
        e @ DatasetError::Corrupt { file: f, offset, .. } => {
            assert_eq!((f.as_str(), *offset), (file, at));
            assert!(!e.is_element_error());
            let text = e.to_string();
            for s in says {
                assert!(text.contains(s), "`{text}` should say `{s}`");
            }
        }
        other => panic!("expected a corrupt shard, got {other}"),
    }
}

#[test]
fn a_broken_framing_ends_the_read_with_the_shard_offset_and_member() {
    let dir = tempfile::tempdir().expect("tempdir");
    let good = tar_bytes(&[m("0.jpg", "zero"), m("1.jpg", &"x".repeat(600)), m("2.jpg", "two")]);
    // Headers at 0 (0.jpg), 1024 (1.jpg, data 1536..2136 padded to 2560), 2560 (2.jpg).
    let cut = write(dir.path(), "cut.tar", &good[..2000]);
    let out = common::run(&DatasetDef::webdataset(vec![cut.clone()]));
    assert_eq!(out.len(), 2, "sample 0, then the error");
    corrupt(&out[1], &cut, 1536, &["`1.jpg`", "truncated", "rewrite or remove"]);

    let mut flipped = good.clone();
    flipped[2560 + 10] ^= 0x20;
    let bad = write(dir.path(), "header.tar", &flipped);
    let def = DatasetDef::webdataset(vec![bad.clone(), cut]).ignore_errors();
    let out = common::run(&def);
    // Sample 1 is not yielded: its end (the next header) is not known.
    assert_eq!(keys(&out[..1]), ["0"]);
    assert_eq!(out.len(), 2, "ignore_errors does not skip a broken framing");
    corrupt(&out[1], &bad, 2560, &["checksum mismatch", "last member read was `1.jpg`"]);

    let not_tar = write(dir.path(), "text.tar", &[b'a'; 700]);
    let out = common::run(&DatasetDef::webdataset(vec![not_tar.clone()]));
    corrupt(&out[0], &not_tar, 0, &["not a tar file"]);
}

#[test]
fn an_empty_webdataset_source_is_refused_by_name() {
    let err = DatasetDef::webdataset(Vec::<String>::new()).validate().expect_err("refused");
    assert!(err.to_string().contains("stages[0].webdataset.files"), "{err}");
}

/// The (width, height) of a baseline JPEG, from its SOF0 segment.
fn jpeg_size(jpeg: &[u8]) -> (u16, u16) {
    let at = jpeg.windows(2).position(|w| w == [0xff, 0xc0]).expect("a SOF0 marker");
    let be = |i: usize| u16::from_be_bytes([jpeg[at + i], jpeg[at + i + 1]]);
    (be(7), be(5))
}

#[test]
fn sample_shards_hold_jpegs_of_varying_sizes_and_labels_and_their_pipeline_reads_them() {
    use sluice_dataset::sample::{webdataset_pipeline, write_webdataset, NUM_LABELS};
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("wds").to_string_lossy().into_owned();
    let summary = write_webdataset(&out, 3, 8, 32, 9).expect("writes");
    assert_eq!((summary.records, summary.files.len()), (24, 3));
    assert!(summary.files[1].ends_with("wds/shard-00001.tar"), "{:?}", summary.files);
    let on_disk: u64 =
        summary.files.iter().map(|f| std::fs::metadata(f).expect("file").len()).sum();
    assert_eq!(summary.bytes, on_disk);
    let again = tempfile::tempdir().expect("tempdir");
    let again = write_webdataset(&again.path().to_string_lossy(), 3, 8, 32, 9).expect("writes");
    assert_eq!(std::fs::read(&summary.files[2]).ok(), std::fs::read(&again.files[2]).ok());

    let samples = common::run(&DatasetDef::webdataset(summary.files.clone()));
    let mut sizes = std::collections::BTreeSet::new();
    for (i, s) in samples.iter().enumerate() {
        let (key, parts) = sample(s.as_ref().expect("ok"));
        assert_eq!(key, format!("{i:06}"));
        assert_eq!(parts[0].0, "cls");
        assert!((0..NUM_LABELS).contains(&parts[0].1.parse::<i64>().expect("a label")));
        let e = s.as_ref().expect("ok");
        let jpeg = e.components[2].items().expect("bytes").remove(0);
        let (w, h) = jpeg_size(&jpeg);
        assert!((16..=48).contains(&w) && (16..=48).contains(&h), "{w}x{h}");
        sizes.insert((w, h));
    }
    assert!(sizes.len() > 10, "sizes vary: {sizes:?}");

    let def = webdataset_pipeline(&format!("{out}/*.tar"));
    FunctionRegistry::builtin().check(&def).expect("the pipeline passes its checks");
    let batches = common::run(&def);
    let rows: u64 = batches.iter().map(|b| b.as_ref().expect("ok").components[0].shape()[0]).sum();
    assert_eq!(rows, 24);
}

/// A header claiming nearly 2^64 bytes (base-256 size field): its sample is bad
/// (no arithmetic overflows, nothing allocated), and skipping its data finds the
/// file cut short: the shard ends there, naming the member.
#[test]
fn a_header_claiming_nearly_2_64_bytes_ends_the_shard_without_overflow_or_allocation() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Headers at 0 (0.jpg), 1024 (1.cls, 5000 bytes), 6656 (1.jpg, data from 7168).
    let mut bytes = tar_bytes(&[m("0.jpg", "zero"), m("1.cls", &"c".repeat(5000))]);
    bytes.truncate(bytes.len() - 1024);
    bytes.extend_from_slice(header("1.jpg", u64::MAX - 4096, tar::EntryType::Regular).as_bytes());
    bytes.extend_from_slice(&[0u8; 512]);
    let file = write(dir.path(), "huge.tar", &bytes);
    let out = common::run(&DatasetDef::webdataset(vec![file.clone()]));
    assert_eq!(keys(&out[..1]), ["0"]);
    assert_eq!(out.len(), 2, "the bad sample's end is never seen");
    corrupt(&out[1], &file, 7168, &["truncated", "`1.jpg`"]);
}
