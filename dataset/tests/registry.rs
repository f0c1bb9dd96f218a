//! The registry itself: names, lookups, registration and call checks.

use sluice_dataset::{Arg, DatasetDef, DatasetError, FnCall, FnKind, FunctionRegistry};

#[test]
fn builtin_names_are_sorted_and_prefixed() {
    let names = FunctionRegistry::builtin().names();
    assert_eq!(
        names,
        vec![
            "dataset:text_lines",
            "dataset:tfrecord",
            "dataset:tfrecord_skip_corrupt",
            "dataset:webdataset",
            "filter:eq",
            "filter:gt",
            "filter:lt",
            "filter:mod_eq",
            "map:add",
            "map:center_crop",
            "map:decode_jpeg",
            "map:decode_png",
            "map:identity",
            "map:mul",
            "map:negate",
            "map:normalize",
            "map:random_flip",
            "map:random_resized_crop",
            "map:resize",
            "map:square",
            "map:to_string",
        ]
    );
    assert_eq!(FunctionRegistry::default().names(), names);
    assert!(FunctionRegistry::empty().names().is_empty());
}

#[test]
fn has_distinguishes_maps_from_filters() {
    let r = FunctionRegistry::builtin();
    assert!(r.has(FnKind::Map, "square"));
    assert!(!r.has(FnKind::Filter, "square"));
    assert!(r.has(FnKind::Filter, "mod_eq"));
    assert!(!r.has(FnKind::Map, "nope"));
}

#[test]
fn registering_adds_and_replaces() {
    let mut r = FunctionRegistry::empty();
    r.register_map("tag", 1, |e, _| Ok(e));
    r.register_filter("all", 0, |_, _| Ok(true));
    assert_eq!(r.names(), vec!["filter:all", "map:tag"]);
    r.register_map("tag", 0, |e, _| Ok(e));
    r.check_call(FnKind::Map, &FnCall::new("tag", vec![])).expect("replaced with arity 0");
    assert_eq!(r.names().len(), 2);
}

#[test]
fn custom_functions_run_in_pipelines() {
    let mut r = FunctionRegistry::builtin();
    r.register_map("times_ten", 0, |e, _| {
        let x = e.as_i64().map_err(|e| e.to_string())?;
        Ok(sluice_dataset::Element::single(sluice_dataset::Tensor::scalar_i64(x * 10)))
    });
    r.register_filter("odd", 0, |e, _| Ok(e.as_i64().map_err(|e| e.to_string())? % 2 != 0));
    let def = DatasetDef::range(5).filter("odd").map("times_ten");
    let out: Vec<i64> =
        def.iter_local(&r).expect("valid").map(|e| e.expect("ok").as_i64().expect("int")).collect();
    assert_eq!(out, vec![10, 30]);
}

#[test]
fn check_call_reports_unknown_functions_with_the_known_ones() {
    let r = FunctionRegistry::builtin();
    let err = r.check_call(FnKind::Filter, &FnCall::new("square", vec![])).expect_err("unknown");
    match &err {
        DatasetError::UnknownFunction { kind, name, known } => {
            assert_eq!((kind.as_str(), name.as_str()), ("filter", "square"));
            assert_eq!(known, "eq, gt, lt, mod_eq");
        }
        other => panic!("expected UnknownFunction, got {other:?}"),
    }
    let err = FunctionRegistry::empty()
        .check_call(FnKind::Map, &FnCall::new("square", vec![]))
        .expect_err("empty");
    assert!(err.to_string().contains("(none)"), "{err}");
}

#[test]
fn check_call_checks_only_the_argument_count() {
    let r = FunctionRegistry::builtin();
    let err =
        r.check_call(FnKind::Filter, &FnCall::new("mod_eq", vec![Arg::Int(2)])).expect_err("arity");
    assert_eq!(
        err,
        DatasetError::BadArguments {
            name: "mod_eq".into(),
            message: "expected 2 arguments, got 1".into()
        }
    );
    // Types are the function's business at run time.
    r.check_call(FnKind::Map, &FnCall::new("add", vec![Arg::Str("x".into())])).expect("count ok");
}

#[test]
fn check_validates_the_structure_first() {
    let r = FunctionRegistry::builtin();
    let bad = DatasetDef::range(3).map("nope").batch(0, false);
    assert!(matches!(r.check(&bad), Err(DatasetError::InvalidSpec { .. })));
    let unknown = DatasetDef::range(3).map("nope");
    assert!(matches!(r.check(&unknown), Err(DatasetError::UnknownFunction { .. })));
    r.check(&DatasetDef::range(3).map("square").filter_with("lt", vec![Arg::Int(2)]))
        .expect("valid");
}

#[test]
fn debug_prints_the_names() {
    let mut r = FunctionRegistry::empty();
    r.register_map("m", 0, |e, _| Ok(e));
    assert_eq!(
        format!("{r:?}"),
        r#"FunctionRegistry { functions: ["map:m"], data_roots: (unrestricted) }"#
    );
}

#[test]
fn registry_is_shareable_across_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<FunctionRegistry>();
}
