//! Split mode: the source produces only the elements of the splits it is handed,
//! and `repeat` resets the provider between epochs.

use std::sync::{Arc, Mutex};

use sluice_dataset::{Arg, DatasetDef, DatasetError, FunctionRegistry, SplitProvider, SplitRange};

/// Hands out scripted splits per epoch and records every call.
#[derive(Clone, Default)]
struct Scripted {
    log: Arc<Mutex<Vec<String>>>,
    epochs: Arc<Vec<Vec<(u64, u64)>>>,
    epoch: usize,
    next: usize,
    fail_on_epoch: Option<usize>,
}

impl Scripted {
    fn new(epochs: Vec<Vec<(u64, u64)>>) -> Self {
        Scripted { epochs: Arc::new(epochs), ..Default::default() }
    }
    fn log(&self) -> Vec<String> {
        self.log.lock().expect("log lock").clone()
    }
}

impl SplitProvider for Scripted {
    fn next_split(&mut self) -> Result<Option<SplitRange>, DatasetError> {
        if self.fail_on_epoch == Some(self.epoch) {
            return Err(DatasetError::Split("dispatcher unavailable".into()));
        }
        let split = self.epochs.get(self.epoch).and_then(|e| e.get(self.next)).copied();
        self.next += 1;
        self.log.lock().expect("log lock").push(match split {
            Some((b, e)) => format!("split {b}..{e}"),
            None => "end".to_string(),
        });
        Ok(split.map(|(begin, end)| SplitRange { begin, end }))
    }
    fn reset(&mut self) -> Result<(), DatasetError> {
        self.log.lock().expect("log lock").push("reset".into());
        self.epoch += 1;
        self.next = 0;
        Ok(())
    }
}

fn run(def: &DatasetDef, provider: Scripted) -> Vec<Result<i64, DatasetError>> {
    def.iter_with_splits(&FunctionRegistry::builtin(), Box::new(provider))
        .expect("valid pipeline")
        .map(|r| r.and_then(|e| e.as_i64()))
        .collect()
}

fn ok(v: Vec<Result<i64, DatasetError>>) -> Vec<i64> {
    v.into_iter().map(|r| r.expect("no error")).collect()
}

#[test]
fn source_produces_only_the_handed_out_splits() {
    let provider = Scripted::new(vec![vec![(0, 3), (3, 5)]]);
    let out = ok(run(&DatasetDef::range(10).map("square"), provider.clone()));
    assert_eq!(out, vec![0, 1, 4, 9, 16]);
    assert_eq!(provider.log(), vec!["split 0..3", "split 3..5", "end"]);
}

#[test]
fn splits_apply_to_from_tensor_slices_in_the_order_given() {
    let provider = Scripted::new(vec![vec![(3, 5), (0, 1), (2, 2)]]);
    let out = ok(run(&DatasetDef::from_ints(vec![10, 11, 12, 13, 14]), provider));
    assert_eq!(out, vec![13, 14, 10]);
}

#[test]
fn repeat_resets_once_and_uses_the_next_epochs_splits() {
    let provider = Scripted::new(vec![vec![(0, 3), (3, 5)], vec![(7, 9)]]);
    let out = ok(run(&DatasetDef::range(10).repeat(2), provider.clone()));
    assert_eq!(out, vec![0, 1, 2, 3, 4, 7, 8]);
    let log = provider.log();
    assert_eq!(log.iter().filter(|l| *l == "reset").count(), 1, "{log:?}");
    assert_eq!(log, vec!["split 0..3", "split 3..5", "end", "reset", "split 7..9", "end"]);
}

#[test]
fn downstream_stages_run_on_the_split_elements() {
    let provider = Scripted::new(vec![vec![(2, 8)]]);
    let def =
        DatasetDef::range(10).filter_with("mod_eq", vec![Arg::Int(2), Arg::Int(0)]).batch(2, false);
    let out: Vec<serde_json::Value> = def
        .iter_with_splits(&FunctionRegistry::builtin(), Box::new(provider))
        .expect("valid")
        .map(|r| r.expect("ok").to_json())
        .collect();
    assert_eq!(out, vec![serde_json::json!([2, 4]), serde_json::json!([6])]);
}

#[test]
fn repeat_forever_keeps_going_through_epochs_without_splits() {
    // Epoch 0 gets nothing (other workers took the splits), epoch 1 gets [1, 2).
    let provider = Scripted::new(vec![vec![], vec![(1, 2)]]);
    let out = ok(run(&DatasetDef::range(5).repeat_forever().take(1), provider.clone()));
    assert_eq!(out, vec![1]);
    assert_eq!(provider.log(), vec!["end", "reset", "split 1..2"]);
}

#[test]
fn repeat_forever_of_an_empty_source_ends_in_split_mode() {
    let provider = Scripted::new(vec![]);
    assert!(run(&DatasetDef::range(0).repeat_forever(), provider).is_empty());
}

#[test]
fn provider_errors_pass_through_and_end_the_stream() {
    let mut provider = Scripted::new(vec![vec![(0, 2)], vec![(0, 2)]]);
    provider.fail_on_epoch = Some(1);
    let out = run(&DatasetDef::range(4).repeat(3), provider);
    assert_eq!(out.len(), 3, "{out:?}");
    assert_eq!(out[0].as_ref().ok(), Some(&0));
    assert_eq!(out[1].as_ref().ok(), Some(&1));
    assert!(matches!(&out[2], Err(DatasetError::Split(m)) if m.contains("unavailable")));
}

#[test]
fn a_split_outside_the_source_is_an_error() {
    let out = run(&DatasetDef::range(4), Scripted::new(vec![vec![(2, 9)]]));
    assert_eq!(out.len(), 1);
    assert!(matches!(&out[0], Err(DatasetError::Split(m)) if m.contains("[2, 9)")), "{out:?}");
    let out = run(&DatasetDef::range(4), Scripted::new(vec![vec![(3, 1)]]));
    assert!(matches!(&out[0], Err(DatasetError::Split(_))), "{out:?}");
}
