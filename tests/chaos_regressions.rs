//! Every chaos seed that once found a violation, replayed as a test with real
//! `sluice` processes. (The `--ci` selection — the leader killed mid-epoch under
//! several seeds, a full restart's registry check, worker kills in DYNAMIC and OFF
//! mode — runs in `.ci/run` as `sluice chaos --ci`.) See docs/chaos.md.

use std::path::PathBuf;

use sluice_chaos::campaign::{self, CampaignConfig, Plan};
use sluice_chaos::scenarios;

/// (scenario, seed) runs that once found a violation. When `sluice chaos` prints
/// `FAILED: <scenario> seed <N>`, add `("<scenario>", N)` here with a comment
/// naming the bug, fix it, and keep the line: the seed replays the same schedule.
const REGRESSIONS: &[(&str, u64)] = &[
    // A dispatcher that restarted holding a committed vote for itself resumed as
    // leader without an election and answered `read_leader` reads (ClientHeartbeat,
    // GetStatus) from its snapshot before re-applying its log: `NotFound: iteration
    // client … not found` ended a read after `s3 down`, and a full restart's registry
    // showed a split cursor gone back (quorum seed 1, in the CI list). Fixed: a leader
    // read waits until everything in its log at the read's start is applied. The same
    // seeds also found the journal giving up on S3 after 4 quick retries (now ~60 s).
    ("s3", 1),
    ("s3", 725556),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ci_seeds_and_past_failures_show_no_violation() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_test_writer()
        .try_init();
    // The `--ci` selection itself runs in `.ci/run` (`sluice chaos --ci`, with its
    // report); this test replays the seeds that once failed.
    let mut runs = Vec::new();
    for (name, seed) in REGRESSIONS {
        let scenario = scenarios::by_name(name)
            .unwrap_or_else(|| panic!("REGRESSIONS names an unknown scenario `{name}`"));
        runs.push((scenario, *seed));
    }
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("chaos-regressions");
    let _ = std::fs::remove_dir_all(&out);
    let sluice = PathBuf::from(env!("CARGO_BIN_EXE_sluice"));
    let config = CampaignConfig {
        replay_prefix: sluice.display().to_string(),
        sluice,
        out: out.clone(),
        plan: Plan::Runs(runs),
    };
    let outcome = campaign::run(&config).await.expect("the campaign runs");
    let failed: Vec<String> = outcome
        .outcomes
        .iter()
        .filter(|o| !o.result.passed())
        .map(|o| format!("{} seed {}: {:?}", o.scenario, o.seed, o.result.violations))
        .chain(outcome.errors.iter().map(|(s, seed, e)| format!("{s} seed {seed}: {e}")))
        .collect();
    assert!(
        failed.is_empty(),
        "chaos runs failed (histories in {}):\n{}",
        out.display(),
        failed.join("\n")
    );
}
