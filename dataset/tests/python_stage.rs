//! The executor's Python stage against a stand-in executor (the real one, a pool of
//! Python processes, is `sluice-pyexec`, tested there with real interpreters): the
//! order of results, chunking, `map_batches`' unbatching, element failures that do
//! not end the pipeline, `ignore_errors`, and load failures that do.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex};

use sluice_dataset::{
    DatasetDef, DatasetError, Element, FunctionRegistry, Phase, Pickled, PyCall, PyFailure,
    PyFunction, PyOp, PyOutcome, PyReply, PythonExecutor, PythonStage, Tensor,
};

/// Runs "functions" in Rust, keyed by reference: `t:times10` (map; fails on 3),
/// `t:even` (filter), `t:twice` (flat_map), `t:plus1` (map_batches over int64
/// columns). Answers a full call with an even ticket only after the next call, so
/// that answers arrive out of order.
struct Stand {
    held: Mutex<Option<PyReply>>,
    out: Mutex<Option<Sender<PyReply>>>,
    calls: Mutex<Vec<usize>>,
}

impl Stand {
    fn new() -> Arc<Stand> {
        Arc::new(Stand { held: Mutex::new(None), out: Mutex::new(None), calls: Mutex::new(vec![]) })
    }
}

fn int(e: &Element) -> i64 {
    e.as_i64().unwrap()
}

fn answer(call: &PyCall) -> Vec<PyOutcome> {
    let name = call.function.display_name().to_string();
    call.inputs
        .iter()
        .map(|e| match name.as_str() {
            "t:times10" if int(e) == 3 => {
                PyOutcome::Failed(PyFailure::new("ValueError", "three is not allowed"))
            }
            "t:times10" => PyOutcome::Element(Element::single(Tensor::scalar_i64(int(e) * 10))),
            "t:even" => PyOutcome::Keep(int(e).rem_euclid(2) == 0),
            "t:twice" => PyOutcome::Elements(vec![e.clone(), e.clone()]),
            "t:plus1" => {
                let values: Vec<i64> =
                    e.components[0].i64_values().unwrap().iter().map(|v| v + 1).collect();
                let t = Tensor::from_i64s(vec![values.len() as u64], &values).unwrap();
                PyOutcome::Element(Element::single(t))
            }
            other => PyOutcome::Failed(PyFailure::new("NameError", other)),
        })
        .collect()
}

impl PythonExecutor for Stand {
    fn version(&self) -> &str {
        "3.11.7"
    }
    fn processes(&self) -> usize {
        2
    }
    fn prepare(&self, function: &Arc<PyFunction>, _made_with: &str) -> Result<(), PyFailure> {
        match function.display_name() {
            "t:missing" => Err(PyFailure::new("ModuleNotFoundError", "No module named 't'")),
            _ => Ok(()),
        }
    }
    fn submit(&self, call: PyCall, ticket: u64, reply: Sender<PyReply>) {
        self.calls.lock().unwrap().push(call.inputs.len());
        *self.out.lock().unwrap() = Some(reply.clone());
        let this = PyReply { ticket, response: Ok(answer(&call)) };
        let full = call.inputs.len() == 64;
        let mut held = self.held.lock().unwrap();
        if ticket.is_multiple_of(2) && full && held.is_none() {
            *held = Some(this);
            return;
        }
        let _ = reply.send(this);
        if let Some(earlier) = held.take() {
            let _ = reply.send(earlier);
        }
    }
}

fn stage(op: PyOp, name: &str) -> PythonStage {
    PythonStage::new(op, PyFunction::Ref(name.into()), "3.11.7")
}

fn run(def: &DatasetDef, registry: &FunctionRegistry) -> Vec<Result<i64, DatasetError>> {
    def.iter_local(registry).unwrap().map(|e| e.map(|e| int(&e))).collect()
}

fn with(stand: &Arc<Stand>) -> FunctionRegistry {
    FunctionRegistry::builtin().with_python(stand.clone())
}

#[test]
fn results_keep_the_input_order_when_answers_come_out_of_order() {
    let stand = Stand::new();
    let mut s = stage(PyOp::Map, "t:times10");
    s.num_parallel_calls = 4;
    let even = vec![sluice_dataset::Arg::Int(2), sluice_dataset::Arg::Int(0)];
    let def = DatasetDef::range(300).filter_with("mod_eq", even).python(s);
    let out = run(&def, &with(&stand));
    let expected: Vec<i64> = (0..300).filter(|x| x % 2 == 0).map(|x| x * 10).collect();
    assert_eq!(out.into_iter().map(Result::unwrap).collect::<Vec<_>>(), expected);
    let calls = stand.calls.lock().unwrap().clone();
    assert_eq!(calls, vec![64, 64, 22], "chunks of 64 elements");
}

#[test]
fn without_determinism_every_result_comes_once() {
    let stand = Stand::new();
    let mut s = stage(PyOp::Map, "t:times10");
    (s.num_parallel_calls, s.deterministic) = (3, false);
    let def = DatasetDef::range(500).python(s).ignore_errors();
    let mut out: Vec<i64> = run(&def, &with(&stand)).into_iter().map(Result::unwrap).collect();
    out.sort_unstable();
    let expected: Vec<i64> = (0..500).filter(|x| *x != 3).map(|x| x * 10).collect();
    assert_eq!(out, expected);
}

#[test]
fn filter_flat_map_and_map_batches() {
    let stand = Stand::new();
    let r = with(&stand);
    let even = DatasetDef::range(10).python(stage(PyOp::Filter, "t:even"));
    assert_eq!(run(&even, &r).into_iter().map(Result::unwrap).collect::<Vec<_>>(), [0, 2, 4, 6, 8]);
    let twice = DatasetDef::range(3).python(stage(PyOp::FlatMap, "t:twice"));
    assert_eq!(
        run(&twice, &r).into_iter().map(Result::unwrap).collect::<Vec<_>>(),
        [0, 0, 1, 1, 2, 2]
    );
    for (drop_remainder, expected) in [(false, 12), (true, 10)] {
        let mut s = stage(PyOp::MapBatches, "t:plus1");
        (s.batch_size, s.drop_remainder) = (Some(5), drop_remainder);
        let out = run(&DatasetDef::range(12).python(s), &r);
        let want: Vec<i64> = (1..=expected).collect();
        assert_eq!(out.into_iter().map(Result::unwrap).collect::<Vec<_>>(), want);
    }
}

#[test]
fn a_failed_element_is_an_error_in_its_place_and_the_stage_goes_on() {
    let stand = Stand::new();
    let def = DatasetDef::range(6).python(stage(PyOp::Map, "t:times10"));
    let out = run(&def, &with(&stand));
    assert_eq!(out.len(), 6, "{out:?}");
    match &out[3] {
        Err(DatasetError::UserFunction(f)) => {
            assert_eq!((f.stage.as_str(), f.op.as_str()), ("stages[1]", "map"));
            assert_eq!(f.function, "t:times10");
            assert_eq!(f.phase, Phase::Call);
            assert_eq!(f.failure.error_type, "ValueError");
            assert!(f.to_string().contains("three is not allowed"), "{f}");
        }
        other => panic!("expected the failure at position 3, got {other:?}"),
    }
    assert_eq!(out[4].as_ref().unwrap(), &40);
}

#[test]
fn ignore_errors_skips_and_counts_failed_elements_through_a_batch() {
    let stand = Stand::new();
    let r = with(&stand);
    let def = DatasetDef::range(8)
        .python(stage(PyOp::Map, "t:times10"))
        .python(stage(PyOp::Filter, "t:even"))
        .ignore_errors();
    let out: Vec<i64> = run(&def, &r).into_iter().map(Result::unwrap).collect();
    assert_eq!(out, [0, 10, 20, 40, 50, 60, 70], "the failure passed the second stage in order");
    assert_eq!(r.errors_ignored().load(Ordering::Relaxed), 1);
    // A batch keeps the elements it had gathered across a skipped failure.
    let def = DatasetDef::range(6).python(stage(PyOp::Map, "t:times10")).batch(4, false);
    let items: Vec<_> = def.iter_local(&r).unwrap().collect();
    assert_eq!(items.len(), 3, "batch, error, batch: {items:?}");
    let first = items[1..].iter().find_map(|i| i.as_ref().ok()).unwrap();
    assert_eq!(first.components[0].i64_values().unwrap(), [0, 10, 20, 40]);
}

#[test]
fn a_function_that_cannot_load_ends_the_read_even_under_ignore_errors() {
    let stand = Stand::new();
    let def = DatasetDef::range(5).python(stage(PyOp::Map, "t:missing")).ignore_errors();
    let out = run(&def, &with(&stand));
    match out.as_slice() {
        [Err(DatasetError::UserFunction(f))] => {
            assert_eq!(f.phase, Phase::Load);
            assert!(f.to_string().contains("cannot be loaded"), "{f}");
            assert!(f.to_string().contains("No module named 't'"), "{f}");
        }
        other => panic!("expected one load failure, got {other:?}"),
    }
}

#[test]
fn without_an_executor_a_python_stage_says_how_to_allow_it() {
    let pickled = PyFunction::Pickle(Pickled { name: "<lambda>".into(), data: vec![1] });
    let def = DatasetDef::range(5).python(PythonStage::new(PyOp::Map, pickled, "3.11.7"));
    let out = run(&def, &FunctionRegistry::builtin());
    match out.as_slice() {
        [Err(DatasetError::UserFunction(f))] => {
            assert_eq!(f.failure.error_type, "NoPythonExecutor");
            assert!(f.to_string().contains("--allow-python"), "{f}");
        }
        other => panic!("expected one failure, got {other:?}"),
    }
}

#[test]
fn the_spec_round_trips_and_bad_stages_are_refused_naming_the_field() {
    let mut s = stage(PyOp::MapBatches, "mypkg.aug:flip");
    s.batch_size = Some(32);
    let def = DatasetDef::range(4).python(s).ignore_errors();
    let json = def.to_json();
    assert!(json.contains(r#""python""#) && json.contains(r#""ignore_errors""#), "{json}");
    assert_eq!(DatasetDef::from_json(&json).unwrap(), def);
    let bad: BTreeMap<&str, &str> = [
        (r#"{"op": "map_batches", "fn": {"ref": "m:f"}, "python": "3.11"}"#, "batch_size"),
        (r#"{"op": "map", "fn": {"ref": "m:f"}, "python": "3.11", "batch_size": 3}"#, "batch_size"),
        (r#"{"op": "map", "fn": {"ref": "no_colon"}, "python": "3.11"}"#, "fn.ref"),
        (r#"{"op": "map", "fn": {"ref": "m:f"}, "python": "eleven"}"#, "python"),
        (r#"{"op": "map", "fn": {"ref": "m:f"}, "python": "3.11", "retries": 2}"#, "retries"),
        (
            r#"{"op": "map", "fn": {"pickle": {"name": "f", "data": "!!"}}, "python": "3.11"}"#,
            "data",
        ),
    ]
    .into_iter()
    .collect();
    for (stage, field) in bad {
        let spec = format!(r#"{{"stages": [{{"range": {{"stop": 3}}}}, {{"python": {stage}}}]}}"#);
        let e = DatasetDef::from_json(&spec).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains("stages[1]"), "{stage}: {e}");
    }
}

/// Tagged (exactly-once): outputs keep their inputs' origins whatever order the
/// answers come in, and a filtered or failed (then ignored) element's record goes
/// to the sink; together every record once.
#[test]
fn tagged_python_stages_keep_origins_and_sink_what_they_drop() {
    let stand = Stand::new();
    let r = with(&stand);
    let mut map = stage(PyOp::Map, "t:times10");
    (map.num_parallel_calls, map.deterministic) = (3, false);
    let mut filter = stage(PyOp::Filter, "t:even");
    filter.num_parallel_calls = 2;
    for (def, unit_of) in [
        (DatasetDef::range(300).python(map).ignore_errors(), (|v| v / 10) as fn(i64) -> i64),
        (DatasetDef::range(300).python(filter), |v| v),
    ] {
        let tagged = def.iter_tagged(&r, None).unwrap();
        let mut seen = BTreeMap::new();
        for item in tagged.elements {
            let e = item.unwrap();
            let origin = e.origin.clone().expect("an origin").into_origin();
            assert_eq!(origin.runs.len(), 1);
            assert_eq!(origin.runs[0].unit as i64, unit_of(int(&e)), "{def:?}");
            *seen.entry(origin.runs[0].unit).or_insert(0) += 1;
        }
        for run in tagged.dropped.take().runs {
            *seen.entry(run.unit).or_insert(0) += run.count;
        }
        assert_eq!(seen, (0..300).map(|u| (u, 1)).collect::<BTreeMap<u64, u64>>(), "{def:?}");
    }
}
