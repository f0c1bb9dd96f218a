//! The pure state machine against random command sequences: properties the
//! dispatcher's guarantees rest on, checked after every command of many seeded
//! sequences (`gen.rs` draws them from a small alphabet of ids, so commands keep
//! hitting existing and unknown datasets, jobs, iterations, tasks and workers).
//!
//! - (a) Replaying the log of commands, from an empty state or from a snapshot of
//!   a prefix (encoded as the Raft snapshot is: `Applied`, bincode), gives the
//!   live state byte for byte, and the same answers.
//! - (b) A refused command leaves the state byte for byte unchanged.
//! - (c) No element of an iteration's source epoch is granted twice.
//! - (d) Ids (dataset, job, iteration, task, client) are never reused, and
//!   nothing but a client or what `ForgetIteration` forgets is removed.
//! - (e) Only the process a worker is registered as (its uid) takes splits and
//!   reports tasks; another incarnation is refused.
//! - (f) No command takes a count past the cap it carries (`Limits`).
//! - A batch answers and changes what its commands applied one by one do, and
//!   refuses a nested batch.
//!
//! Exactly-once commands (`eo.rs`) take part in all of these; for (c), an
//! exactly-once iteration may grant a unit again only after the task it was
//! granted to was lost (an orphan handed out again).
//!
//! A failure names the seed, the step and the command; `SLUICE_APPLY_SEED=n`
//! runs that seed alone. The run also asserts that the sequences reached the
//! cases worth reaching (coverage), so a generator that stopped exercising
//! something fails rather than passing vacuously.

mod coverage;
mod eo;
mod gen;
mod ledger;

use std::panic::{catch_unwind, AssertUnwindSafe};

use coverage::Coverage;
use gen::Gen;
use ledger::{check, Ledger};
use sluice_dispatcher::raft::state_machine::Applied;
use sluice_dispatcher::{apply, Command, Response, State, StateError};

/// Sequences per run, and commands per sequence: a few seconds in a debug build.
const SEEDS: u64 = 200;
const STEPS: usize = 80;

type Answer = Result<Response, StateError>;

#[test]
fn random_command_sequences_replay_refuse_cleanly_grant_once_and_never_reuse_ids() {
    let seeds: Vec<u64> = match std::env::var("SLUICE_APPLY_SEED") {
        Ok(s) => vec![s.parse().expect("SLUICE_APPLY_SEED is a number")],
        Err(_) => (0..SEEDS).collect(),
    };
    let mut coverage = Coverage::default();
    for &seed in &seeds {
        let outcome = catch_unwind(AssertUnwindSafe(|| run(seed, &mut coverage)));
        let failure = match outcome {
            Ok(Ok(())) => continue,
            Ok(Err(e)) => e,
            Err(panic) => format!("panicked: {}", panic_message(&panic)),
        };
        panic!(
            "seed {seed}: {failure}\nrun it alone: SLUICE_APPLY_SEED={seed} cargo test -p \
             sluice-dispatcher --test apply_properties"
        );
    }
    if seeds.len() as u64 == SEEDS {
        coverage.assert_reached();
    }
}

fn run(seed: u64, coverage: &mut Coverage) -> Result<(), String> {
    let mut gen = Gen::new(seed);
    let cut = gen.below(STEPS + 1);
    let mut live = State::default();
    let mut ledger = Ledger::default();
    let (mut log, mut answers) = (vec![], vec![]);
    let mut snapshot = None;
    for step in 0..STEPS {
        if step == cut {
            snapshot = Some(snapshot_of(&live));
        }
        let cmd = gen.command(&live);
        let answer = checked_apply(&mut live, &cmd, &mut ledger, coverage)
            .map_err(|e| format!("step {step}, {cmd:?}: {e}"))?;
        log.push(cmd);
        answers.push(answer);
    }
    let snapshot = snapshot.unwrap_or_else(|| snapshot_of(&live));

    let (replayed, replay_answers) = replay(State::default(), &log);
    same_run(&replayed, &replay_answers, &live, &answers, "from an empty state")?;
    let restored = bincode::deserialize::<Applied>(&snapshot).map_err(|e| e.to_string())?.state;
    let (replayed, replay_answers) = replay(restored, &log[cut..]);
    let from = format!("from the snapshot after {cut} commands");
    same_run(&replayed, &replay_answers, &live, &answers[cut..], &from)
}

/// Applies one command, checking (b), (c) and (d); a batch is checked command by
/// command.
fn checked_apply(
    state: &mut State,
    cmd: &Command,
    ledger: &mut Ledger,
    coverage: &mut Coverage,
) -> Result<Answer, String> {
    if let Command::Batch(cmds) = cmd {
        return checked_batch(state, cmds, ledger, coverage);
    }
    let pre = state.clone();
    let pre_bytes = bytes(state);
    let answer = apply(state, cmd.clone());
    coverage.count(&pre, cmd, &answer);
    match &answer {
        Err(e) => check!(bytes(state) == pre_bytes, "(b) refused ({e}) but changed the state"),
        Ok(r) => ledger.record(&pre, cmd, r, state)?,
    }
    Ok(answer)
}

fn checked_batch(
    state: &mut State,
    cmds: &[Command],
    ledger: &mut Ledger,
    coverage: &mut Coverage,
) -> Result<Answer, String> {
    let mut one_by_one = state.clone();
    let mut expected = vec![];
    for (i, c) in cmds.iter().enumerate() {
        expected.push(match c {
            Command::Batch(_) => None,
            c => Some(
                checked_apply(&mut one_by_one, c, ledger, coverage)
                    .map_err(|e| format!("command {i} of the batch: {e}"))?,
            ),
        });
    }
    let answer = apply(state, Command::Batch(cmds.to_vec()));
    coverage.batch();
    let Ok(Response::Batch(results)) = &answer else {
        return Err(format!("a batch answered {answer:?}"));
    };
    check!(results.len() == cmds.len(), "a batch of {} answered {results:?}", cmds.len());
    for (i, (got, want)) in results.iter().zip(&expected).enumerate() {
        match want {
            None => check!(
                matches!(got, Err(StateError::InvalidArgument(_))),
                "nested batch {i} not refused: {got:?}"
            ),
            Some(want) => check!(got == want, "command {i}: {got:?} in the batch, {want:?} alone"),
        }
    }
    check!(bytes(state) == bytes(&one_by_one), "a batch changed what its commands alone do not");
    Ok(answer)
}

fn replay(mut state: State, log: &[Command]) -> (State, Vec<Answer>) {
    let answers = log.iter().map(|c| apply(&mut state, c.clone())).collect();
    (state, answers)
}

/// (a) A replay ends in the live state, byte for byte, with the same answers.
fn same_run(
    state: &State,
    answers: &[Answer],
    live: &State,
    live_answers: &[Answer],
    from: &str,
) -> Result<(), String> {
    if let Some(i) = (0..answers.len()).find(|&i| answers[i] != live_answers[i]) {
        return Err(format!(
            "(a) replay {from}: answer {i} is {:?}, live it was {:?}",
            answers[i], live_answers[i]
        ));
    }
    check!(bytes(state) == bytes(live), "(a) replay {from} ends in another state (bytes)");
    check!(state == live, "(a) replay {from} ends in another state (==)");
    Ok(())
}

/// The state's encoding: the Raft codec (bincode), as logs and snapshots use it.
fn bytes(state: &State) -> Vec<u8> {
    bincode::serialize(state).expect("the state encodes")
}

/// The state as a Raft snapshot holds it.
fn snapshot_of(state: &State) -> Vec<u8> {
    let applied = Applied { state: state.clone(), ..Applied::default() };
    bincode::serialize(&applied).expect("the snapshot encodes")
}

fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    match (panic.downcast_ref::<&str>(), panic.downcast_ref::<String>()) {
        (Some(s), _) => s.to_string(),
        (_, Some(s)) => s.clone(),
        _ => "(no message)".into(),
    }
}
