//! `sluice chaos`: real dispatcher and worker processes, a seeded fault schedule,
//! a recorded history and a checker. Flags only; the suite lives in
//! `sluice-chaos`. See docs/chaos.md.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use sluice_chaos::campaign::{self, CampaignConfig, Plan};

#[derive(Args, Debug)]
pub struct ChaosArgs {
    /// Scenarios, comma-separated (default: all): leader, quorum, network, wipe, s3,
    /// workers, off, exactly-once, exactly-once-long, deterministic, lifecycle
    /// (docs/chaos.md).
    #[arg(long, value_delimiter = ',')]
    pub scenario: Vec<String>,
    /// The seed of every scenario run (default: a random one, printed).
    #[arg(long, conflicts_with = "seeds")]
    pub seed: Option<u64>,
    /// Several seeds, comma-separated: each scenario runs once per seed.
    #[arg(long, value_delimiter = ',')]
    pub seeds: Vec<u64>,
    /// The CI selection with its fixed seeds (the leader killed mid-epoch under
    /// several seeds, and each invariant touched once).
    #[arg(long, conflicts_with_all = ["scenario", "seed", "seeds", "duration", "check"])]
    pub ci: bool,
    /// Soak: run random scenarios (of --scenario) with random seeds until this much
    /// time is up (e.g. 30m, 1h), then print the table of all runs and the totals.
    #[arg(long, value_parser = campaign::parse_duration, conflicts_with_all = ["seed", "seeds"])]
    pub duration: Option<Duration>,
    /// Where to write each run's history, report and chart (default:
    /// target/chaos/<UTC time>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Lifecycle runs: start jobs for this long instead of a minute (e.g. 30m: one
    /// cluster serving jobs through 30 minutes of lifecycle events).
    #[arg(long, value_parser = campaign::parse_duration, conflicts_with_all = ["ci", "check"])]
    pub jobs_for: Option<Duration>,
    /// Check a saved history.jsonl again instead of running anything.
    #[arg(long, conflicts_with_all = ["scenario", "seed", "seeds", "duration"])]
    pub check: Option<PathBuf>,
}

pub async fn run(a: ChaosArgs) -> anyhow::Result<()> {
    if let Some(history) = &a.check {
        let (events, result) = campaign::recheck(history)?;
        println!("{}", sluice_chaos::report::render_table(std::slice::from_ref(&result.summary)));
        if !result.passed() {
            println!("{}", sluice_chaos::checker::explain(&events, &result));
            bail!("{}: {} violations", history.display(), result.violations.len());
        }
        return Ok(());
    }
    let sluice = std::env::current_exe().context("locating the sluice executable")?;
    let plan = if a.ci {
        Plan::Runs(campaign::ci_runs())
    } else {
        let mut scenarios = campaign::select(&a.scenario)?;
        for s in scenarios.iter_mut().filter(|s| s.lifecycle.is_some()) {
            s.lifecycle = a.jobs_for.or(s.lifecycle);
        }
        match a.duration {
            Some(duration) => Plan::Soak { scenarios, duration },
            None => {
                let seeds = match (a.seed, a.seeds.is_empty()) {
                    (Some(seed), _) => vec![seed],
                    (None, false) => a.seeds.clone(),
                    (None, true) => {
                        let seed = campaign::random_seed();
                        println!("seed: {seed} (random; replay with --seed {seed})");
                        vec![seed]
                    }
                };
                let runs = scenarios
                    .iter()
                    .flat_map(|s| seeds.iter().map(move |seed| (s.clone(), *seed)))
                    .collect();
                Plan::Runs(runs)
            }
        }
    };
    let out = a.out.unwrap_or_else(campaign::default_out);
    let config = CampaignConfig { replay_prefix: sluice.display().to_string(), sluice, out, plan };
    let outcome = campaign::run(&config).await?;
    if !outcome.passed() {
        bail!("chaos: violations or failed runs (see above; output in {})", config.out.display());
    }
    Ok(())
}
