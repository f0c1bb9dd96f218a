//! map, filter, flat_map and map_batches through a real pool, by reference and
//! by value: results, the element conventions both ways, and per-element errors.

mod common;

use std::sync::atomic::Ordering;

use common::*;
use sluice_dataset::{Arg, DType, DatasetDef, Element, Phase, PyOp, Tensor};

#[test]
fn map_filter_flat_map_by_reference_equal_the_expected_values() {
    let pool = pool(2);
    let reg = registry(&pool);
    let map = DatasetDef::range(200).python(stage(&pool, PyOp::Map, by_ref("double")));
    assert_eq!(ints(&map, &reg), (0..200).map(|x| x * 2).collect::<Vec<_>>());
    let filter = DatasetDef::range(200).python(stage(&pool, PyOp::Filter, by_ref("is_even")));
    assert_eq!(ints(&filter, &reg), (0..200).filter(|x| x % 2 == 0).collect::<Vec<_>>());
    let flat = DatasetDef::range(5).python(stage(&pool, PyOp::FlatMap, by_ref("repeat_n")));
    let want: Vec<i64> = (0..5).flat_map(|x| std::iter::repeat_n(x, x as usize)).collect();
    assert_eq!(ints(&flat, &reg), want);
    // Rust stages keep running around a Python one.
    let mixed = DatasetDef::range(10)
        .map("square")
        .python(stage(&pool, PyOp::Map, by_ref("double")))
        .filter_with("mod_eq", vec![Arg::Int(4), Arg::Int(0)]);
    let want: Vec<i64> = (0..10).map(|x| 2 * x * x).filter(|x| x % 4 == 0).collect();
    assert_eq!(ints(&mixed, &reg), want);
    let s = pool.stats();
    assert!(s.calls >= 4 && s.elements >= 415, "{s:?}");
    assert_eq!((s.failures, s.restarts), (0, 0));
}

#[test]
fn parallel_calls_in_completion_order_lose_nothing() {
    let pool = pool(2);
    let reg = registry(&pool);
    let mut st = stage(&pool, PyOp::Map, by_ref("double"));
    st.num_parallel_calls = 0; // one per process
    st.deterministic = false;
    let mut got = ints(&DatasetDef::range(1000).python(st), &reg);
    got.sort();
    assert_eq!(got, (0..1000).map(|x| x * 2).collect::<Vec<_>>());
}

#[test]
fn functions_by_value_run_like_references() {
    let pool = pool(1);
    let reg = registry(&pool);
    let f = pickle("k = 7\nf = lambda x: x * k + 1\n");
    let def = DatasetDef::range(100).python(stage(&pool, PyOp::Map, f));
    assert_eq!(ints(&def, &reg), (0..100).map(|x| x * 7 + 1).collect::<Vec<_>>());
    let f = pickle("def f(x):\n    return [x, -x]\n");
    let def = DatasetDef::range(3).python(stage(&pool, PyOp::FlatMap, f));
    assert_eq!(ints(&def, &reg), vec![0, 0, 1, -1, 2, -2]);
}

#[test]
fn map_batches_gets_stacked_columns_and_its_rows_come_back() {
    let pool = pool(1);
    let reg = registry(&pool);
    let mut st = stage(&pool, PyOp::MapBatches, by_ref("batch_double"));
    st.batch_size = Some(64);
    assert_eq!(
        ints(&DatasetDef::range(1000).python(st.clone()), &reg),
        (0..1000).map(|x| x * 2).collect::<Vec<_>>()
    );
    // Named components arrive as a dict of columns.
    let named = DatasetDef::from_named_tensors(vec![
        ("a", Tensor::from_i64s(vec![4], &[1, 2, 3, 4]).unwrap()),
        ("b", Tensor::from_f32s(vec![4], &[0.5, 1.0, 1.5, 2.0]).unwrap()),
    ])
    .python(st.clone());
    let rows: Vec<Element> = run(&named, &reg).into_iter().map(Result::unwrap).collect();
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[3].get("a").unwrap().as_i64().unwrap(), 8);
    assert_eq!(rows[3].get("b").unwrap().f32_values().unwrap(), vec![4.0]);
    // Arrays of different lengths: a per-batch BadOutput, not a crash.
    st.function = by_ref("batch_ragged");
    let out = run(&DatasetDef::range(10).python(st), &reg);
    let f = failure(&out[0]);
    assert_eq!(f.failure.error_type, "BadOutput");
    assert!(f.failure.message.contains("same first dimension"), "{}", f.failure.message);
}

#[test]
fn elements_arrive_as_the_client_shows_them() {
    let pool = pool(1);
    let reg = registry(&pool);
    let describe = |def: DatasetDef| -> String {
        let out = run(&def.python(stage(&pool, PyOp::Map, by_ref("describe"))), &reg);
        let t = out[0].as_ref().unwrap().components[0].items().unwrap();
        String::from_utf8(t[0].to_vec()).unwrap()
    };
    assert_eq!(describe(DatasetDef::range(1)), "ndarray[int64,(),ro]");
    assert_eq!(describe(DatasetDef::from_strings(vec!["a"])), "bytes");
    let strings = Tensor::from_items(DType::String, vec![1, 2], &["a", "b"]).unwrap();
    assert_eq!(describe(DatasetDef::from_tensors(vec![strings])), "ndarray[object,(2,),rw]");
    let tuple = DatasetDef::range(1).zip(vec![DatasetDef::from_floats(vec![1.5])]);
    assert_eq!(describe(tuple), "tuple(ndarray[int64,(),ro],ndarray[float32,(),ro])");
    let named = DatasetDef::from_named_tensors(vec![(
        "img",
        Tensor::from_u8s(vec![1, 2, 2], vec![1, 2, 3, 4]).unwrap(),
    )]);
    assert_eq!(describe(named), "img=ndarray[uint8,(2, 2),ro]");
    let tokens = Tensor::from_i32s(vec![1, 3], &[1, -2, 3]).unwrap();
    assert_eq!(describe(DatasetDef::from_tensors(vec![tokens])), "ndarray[int32,(3,),ro]");
}

#[test]
fn int32_tensors_cross_both_ways_as_int32() {
    let pool = pool(1);
    let reg = registry(&pool);
    let extremes = [i32::MIN, -1, 0, 1, i32::MAX];
    let rows = Tensor::from_i32s(vec![1, 5], &extremes).unwrap();
    let def =
        DatasetDef::from_tensors(vec![rows]).python(stage(&pool, PyOp::Map, by_ref("identity")));
    let out = run(&def, &reg);
    let c = &out[0].as_ref().unwrap().components;
    assert_eq!(c[0], Tensor::from_i32s(vec![5], &extremes).unwrap());
    // map_batches stacks int32 rows into an int32 batch and unbatches int32 rows.
    let rows = Tensor::from_i32s(vec![3, 2], &[1, 2, 3, 4, 5, 6]).unwrap();
    let mut st = stage(&pool, PyOp::MapBatches, by_ref("batch_double"));
    st.batch_size = Some(3);
    let def = DatasetDef::from_tensors(vec![rows]).python(st);
    let got: Vec<Vec<i32>> = run(&def, &reg)
        .into_iter()
        .map(|r| r.unwrap().components[0].i32_values().unwrap())
        .collect();
    assert_eq!(got, vec![vec![2, 4], vec![6, 8], vec![10, 12]]);
}

#[test]
fn results_convert_by_the_documented_rule() {
    let pool = pool(1);
    let reg = registry(&pool);
    let out =
        run(&DatasetDef::range(3).skip(2).python(stage(&pool, PyOp::Map, by_ref("shapes"))), &reg);
    let e = out[0].as_ref().unwrap();
    let c = &e.components;
    assert_eq!(c.len(), 6);
    assert_eq!(c[0], Tensor::scalar_i64(2));
    assert_eq!(c[1], Tensor::scalar_f64(1.0));
    assert_eq!(c[2], Tensor::scalar_bool(false));
    assert_eq!(c[3], Tensor::scalar_str("n2"));
    assert_eq!(c[4], Tensor::scalar_bytes(&[2]));
    assert_eq!(c[5], Tensor::from_i64s(vec![2], &[2, 1]).unwrap());
    let out =
        run(&DatasetDef::range(3).skip(2).python(stage(&pool, PyOp::Map, by_ref("named"))), &reg);
    let e = out[0].as_ref().unwrap();
    assert_eq!(e.get("square").unwrap().as_i64().unwrap(), 4);
    assert_eq!(e.get("label").unwrap().dtype(), DType::Bytes);
    // int32 stays int32; the other narrow integers widen to int64, float16 to float32.
    let f = pickle(
        "import numpy as np\nf = lambda x: (np.array([x, -2**31, 2**31 - 1], np.int32), \
         x.astype(np.int16), x.astype(np.uint32), x.astype(np.int8), np.float16(0.5))\n",
    );
    let out = run(&DatasetDef::range(3).skip(2).python(stage(&pool, PyOp::Map, f)), &reg);
    let c = &out[0].as_ref().unwrap().components;
    assert_eq!(c[0], Tensor::from_i32s(vec![3], &[2, i32::MIN, i32::MAX]).unwrap());
    assert_eq!(
        (c[1].clone(), c[2].clone(), c[3].clone()),
        (Tensor::scalar_i64(2), Tensor::scalar_i64(2), Tensor::scalar_i64(2))
    );
    assert_eq!(c[4].dtype(), DType::Float32);
}

#[test]
fn an_exception_fails_its_element_with_its_traceback_and_the_rest_go_on() {
    let pool = pool(1);
    let reg = registry(&pool);
    let def = DatasetDef::range(6).python(stage(&pool, PyOp::Map, by_ref("fail_on_3")));
    let out = run(&def, &reg);
    assert_eq!(out.len(), 6);
    let f = failure(&out[3]);
    assert_eq!((f.phase, f.op.as_str(), f.stage.as_str()), (Phase::Call, "map", "stages[1]"));
    assert_eq!(f.function, "sluice_test_fns:fail_on_3");
    assert_eq!(f.failure.error_type, "ValueError");
    assert_eq!(f.failure.message, "three is not allowed (got 3)");
    assert!(f.failure.traceback.contains("in fail_on_3"), "{}", f.failure.traceback);
    // From the user's code on: none of the runner's own frames.
    assert!(!f.failure.traceback.contains("<string>"), "{}", f.failure.traceback);
    assert!(f.failure.traceback.contains("ValueError: three is not allowed"));
    let ok: Vec<i64> =
        out.iter().filter_map(|r| r.as_ref().ok()).map(|e| e.as_i64().unwrap()).collect();
    assert_eq!(ok, vec![100, 101, 102, 104, 105]);
    assert_eq!(pool.stats().failures, 1);
    assert_eq!(pool.stats().restarts, 0, "an exception does not cost a process");

    // ignore_errors skips it and counts it.
    let skipping = def.ignore_errors();
    assert_eq!(ints(&skipping, &reg), vec![100, 101, 102, 104, 105]);
    assert_eq!(reg.errors_ignored().load(Ordering::Relaxed), 1);
}

#[test]
fn bad_results_are_element_errors_that_name_the_type() {
    let pool = pool(1);
    let reg = registry(&pool);
    for (name, says) in [
        ("returns_none", "is None; did the function forget to return?"),
        ("returns_object", "is a object; return numpy arrays"),
    ] {
        let out = run(&DatasetDef::range(2).python(stage(&pool, PyOp::Map, by_ref(name))), &reg);
        for r in &out {
            let f = failure(r);
            assert_eq!(f.failure.error_type, "BadOutput");
            assert!(f.failure.message.contains(says), "{name}: {}", f.failure.message);
        }
    }
    // print() goes to stderr: the pipe carries only frames.
    let def = DatasetDef::range(100).python(stage(&pool, PyOp::Map, by_ref("prints")));
    assert_eq!(ints(&def, &reg), (0..100).collect::<Vec<_>>());
}

#[test]
fn empty_and_large_tensors_cross_intact() {
    let pool = pool(1);
    let reg = registry(&pool);
    let big: Vec<f32> = (0..3_000_000).map(|i| i as f32).collect();
    let inputs = vec![
        Tensor::from_i64s(vec![0], &[]).unwrap(),
        Tensor::from_items(DType::Bytes, vec![0, 2], &[] as &[&[u8]]).unwrap(),
        Tensor::from_f32s(vec![1000, 3000], &big).unwrap(),
        Tensor::from_items(DType::String, vec![3], &["", "é", "long"]).unwrap(),
    ];
    for t in inputs {
        // from_tensors slices along the first dimension: one slice is `t`.
        let mut shape = vec![1];
        shape.extend_from_slice(t.shape());
        let source = Tensor::new(t.dtype(), shape, t.data().clone()).unwrap();
        let def = DatasetDef::from_tensors(vec![source]).python(stage(
            &pool,
            PyOp::Map,
            by_ref("identity"),
        ));
        let out = run(&def, &reg);
        assert_eq!(out.len(), 1);
        // A string tensor arrives as bytes (the client's convention), and bytes
        // come back as bytes.
        let want = match t.dtype() {
            DType::String => {
                Tensor::new(DType::Bytes, t.shape().to_vec(), t.data().clone()).unwrap()
            }
            _ => t,
        };
        assert_eq!(out[0].as_ref().unwrap().components, vec![want]);
    }
}

#[test]
fn a_process_unloads_its_least_recently_used_function_past_64_and_reloads_it() {
    let pool = pool(1);
    let reg = registry(&pool);
    let sources: Vec<String> = (0..70).map(|i| format!("f = lambda x: x * 0 + {i}\n")).collect();
    let functions = pickles(&sources.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(functions.len(), 70);
    for (i, f) in functions.iter().enumerate().chain([(0, &functions[0]), (69, &functions[69])]) {
        let def = DatasetDef::range(2).python(stage(&pool, PyOp::Map, f.clone()));
        assert_eq!(ints(&def, &reg), vec![i as i64; 2], "function {i}");
    }
    assert_eq!(pool.stats().restarts, 0);
    assert!(pool.hello().numpy.starts_with('2') && !pool.hello().cloudpickle.is_empty());
}
