//! Several runs in one go, as `sluice chaos` asks: a list of (scenario, seed), or
//! a soak (random scenarios and seeds until a duration is up). Each run has its
//! own directory `<out>/<scenario>-<seed>/`; the campaign prints the table of all
//! runs, the totals, and for each failing run its seed and the replay command.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::bail;
use rand::seq::SliceRandom;
use rand::Rng;

use crate::checker::{CheckResult, Summary};
use crate::report;
use crate::runner::{self, RunConfig, RunOutcome};
use crate::scenarios::{self, Scenario};

/// What to run.
#[derive(Clone, Debug)]
pub enum Plan {
    /// These runs, in order.
    Runs(Vec<(Scenario, u64)>),
    /// Random scenarios from this list with random seeds, until `duration` is up
    /// (a run in progress finishes).
    Soak { scenarios: Vec<Scenario>, duration: Duration },
}

#[derive(Clone, Debug)]
pub struct CampaignConfig {
    pub sluice: PathBuf,
    pub out: PathBuf,
    pub plan: Plan,
    /// How to name the executable in replay commands (`sluice`, a path, …).
    pub replay_prefix: String,
}

/// Every run's outcome (or the error that kept it from finishing).
pub struct Campaign {
    pub outcomes: Vec<RunOutcome>,
    pub errors: Vec<(String, u64, String)>,
    pub elapsed: Duration,
}

impl Campaign {
    pub fn passed(&self) -> bool {
        self.errors.is_empty() && self.outcomes.iter().all(|o| o.result.passed())
    }

    pub fn results(&self) -> Vec<CheckResult> {
        self.outcomes.iter().map(|o| o.result.clone()).collect()
    }
}

/// Runs the plan; prints each run's table as it ends and the summary at the end
/// (with the replay command of every failing run). [`Campaign::passed`] says
/// whether every run finished without violations.
pub async fn run(cfg: &CampaignConfig) -> anyhow::Result<Campaign> {
    std::fs::create_dir_all(&cfg.out)?;
    let start = Instant::now();
    let mut campaign = Campaign { outcomes: vec![], errors: vec![], elapsed: Duration::ZERO };
    match &cfg.plan {
        Plan::Runs(runs) => {
            for (scenario, seed) in runs {
                one(cfg, scenario, *seed, &mut campaign).await;
            }
        }
        Plan::Soak { scenarios, duration } => {
            let mut rng = rand::thread_rng();
            while start.elapsed() < *duration {
                let scenario = scenarios.choose(&mut rng).expect("at least one scenario");
                let seed = random_seed();
                one(cfg, scenario, seed, &mut campaign).await;
            }
        }
    }
    campaign.elapsed = start.elapsed();
    let results = campaign.results();
    let path = report::write_json(&cfg.out, &results)?;
    println!(
        "=== {} runs in {:.0?} (report: {})",
        campaign.outcomes.len(),
        campaign.elapsed,
        path.display()
    );
    let summaries: Vec<Summary> = results.iter().map(|r| r.summary.clone()).collect();
    println!("{}", report::render_table(&summaries));
    println!("{}", totals(&summaries));
    let notes: Vec<String> = campaign
        .outcomes
        .iter()
        .flat_map(|o| o.notes.iter().map(move |n| format!("{} seed {}: {n}", o.scenario, o.seed)))
        .collect();
    if !notes.is_empty() {
        println!("NOTES ({}): not violations, but worth a look", notes.len());
        for n in &notes {
            println!("  {n}");
        }
    }
    for o in campaign.outcomes.iter().filter(|o| !o.result.passed()) {
        println!(
            "FAILED: {} seed {} ({} violations, history {}); replay: {} chaos --scenario {} --seed {}",
            o.scenario,
            o.seed,
            o.result.violations.len(),
            o.dir.join("history.jsonl").display(),
            cfg.replay_prefix,
            o.scenario,
            o.seed
        );
    }
    for (scenario, seed, error) in &campaign.errors {
        println!(
            "ERROR: {scenario} seed {seed} did not finish: {error}; replay: {} chaos --scenario {scenario} --seed {seed}",
            cfg.replay_prefix
        );
    }
    Ok(campaign)
}

async fn one(cfg: &CampaignConfig, scenario: &Scenario, seed: u64, campaign: &mut Campaign) {
    let dir = run_dir(&cfg.out, scenario.name, seed);
    println!("=== {} seed {seed}: {} ({})", scenario.name, scenario.about, dir.display());
    let rc = RunConfig { sluice: cfg.sluice.clone(), dir };
    // The lifecycle soak has a runner of its own, which shares the one-job
    // runner's cluster and conclusion (`runner.rs`).
    let outcome = match scenario.lifecycle {
        Some(window) => crate::lifecycle::run(scenario, seed, window, &rc).await,
        None => runner::run(scenario, seed, &rc).await,
    };
    match outcome {
        Ok(outcome) => {
            println!(
                "=== {} seed {seed}: {} in {:.0?}",
                scenario.name,
                verdict(&outcome),
                outcome.elapsed
            );
            campaign.outcomes.push(outcome);
        }
        Err(e) => {
            println!("=== {} seed {seed}: ERROR {e:#}", scenario.name);
            campaign.errors.push((scenario.name.to_string(), seed, format!("{e:#}")));
        }
    }
}

fn verdict(o: &RunOutcome) -> String {
    if o.result.passed() {
        "passed".into()
    } else {
        format!("{} VIOLATIONS", o.result.violations.len())
    }
}

/// `<out>/<scenario>-<seed>`, with `-2`, `-3`… if a soak drew the same pair again.
fn run_dir(out: &Path, scenario: &str, seed: u64) -> PathBuf {
    let base = out.join(format!("{scenario}-{seed}"));
    let mut dir = base.clone();
    let mut n = 2;
    while dir.exists() {
        dir = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    dir
}

/// The totals over all runs: faults by kind, elements checked, duplicates,
/// losses (split by whether a run had worker kills), longest stall after a
/// leader kill.
pub fn totals(summaries: &[Summary]) -> String {
    let mut faults: BTreeMap<&str, u64> = BTreeMap::new();
    for s in summaries {
        for (k, n) in &s.faults_by_kind {
            *faults.entry(k.as_str()).or_default() += *n as u64;
        }
    }
    // Lifecycle runs name theirs "kill worker (replaced)" and "drain worker".
    let worker_kills = |s: &&Summary| {
        s.faults_by_kind.keys().any(|k| k.starts_with("kill worker") || k == "drain worker")
    };
    let sum = |f: &dyn Fn(&Summary) -> u64, filter: &dyn Fn(&&Summary) -> bool| -> u64 {
        summaries.iter().filter(|s| filter(s)).map(f).sum()
    };
    let all = |_: &&Summary| true;
    let stall = summaries.iter().filter_map(|s| s.longest_stall_after_leader_kill_ms).max();
    let mut out = String::from("TOTALS\n");
    out.push_str(&format!("  runs                         {}\n", summaries.len()));
    out.push_str(&format!(
        "  faults                       {} ({})\n",
        faults.values().sum::<u64>(),
        faults.iter().map(|(k, n)| format!("{k}: {n}")).collect::<Vec<_>>().join(", ")
    ));
    out.push_str(&format!(
        "  elements checked             {}\n",
        sum(&|s| s.elements_checked, &all)
    ));
    out.push_str(&format!("  duplicates                   {}\n", sum(&|s| s.duplicates, &all)));
    out.push_str(&format!(
        "  losses, dispatcher faults    {}\n",
        sum(&|s| s.losses, &|s| !worker_kills(s))
    ));
    out.push_str(&format!(
        "  losses, with worker kills    {}\n",
        sum(&|s| s.losses, &worker_kills)
    ));
    out.push_str(&format!(
        "  longest stall after a leader kill  {}\n",
        stall.map(|ms| format!("{}.{:03} s", ms / 1000, ms % 1000)).unwrap_or("-".into())
    ));
    let started = sum(&|s| s.jobs_started, &all);
    if started > 0 {
        out.push_str(&format!(
            "  lifecycle jobs               {started} started, {} completed, {} failed with a \
             reason the run caused\n",
            sum(&|s| s.jobs_completed, &all),
            sum(&|s| s.jobs_failed_with_reason, &all)
        ));
    }
    out.push_str(&format!(
        "  violations                   {}\n",
        sum(&|s| s.violations as u64, &all)
    ));
    out
}

/// A random seed, small enough to type.
pub fn random_seed() -> u64 {
    rand::thread_rng().gen_range(0..1_000_000)
}

/// Resolves `--scenario a,b` (empty: all).
pub fn select(names: &[String]) -> anyhow::Result<Vec<Scenario>> {
    if names.is_empty() {
        return Ok(scenarios::all());
    }
    names
        .iter()
        .map(|n| match scenarios::by_name(n) {
            Some(s) => Ok(s),
            None => bail!(
                "unknown scenario `{n}`; the scenarios are: {}",
                scenarios::names().join(", ")
            ),
        })
        .collect()
}

/// The `--ci` runs.
pub fn ci_runs() -> Vec<(Scenario, u64)> {
    scenarios::CI
        .iter()
        .map(|(name, seed)| (scenarios::by_name(name).expect("CI names a known scenario"), *seed))
        .collect()
}

/// Checks a saved history again, with the options of the scenario it names
/// (the defaults of a DYNAMIC scenario if this build does not know it).
pub fn recheck(history: &Path) -> anyhow::Result<(Vec<crate::history::Event>, CheckResult)> {
    let file = std::fs::File::open(history)
        .map_err(|e| anyhow::anyhow!("opening {}: {e}", history.display()))?;
    let events = crate::history::read_history(std::io::BufReader::new(file))
        .map_err(|e| anyhow::anyhow!("{}: {e}", history.display()))?;
    let scenario = events.iter().find_map(|e| match e {
        crate::history::Event::Start { scenario, .. } => scenarios::by_name(scenario),
        _ => None,
    });
    let scenario = scenario.unwrap_or_else(|| scenarios::by_name("leader").expect("known"));
    let result = crate::checker::check(&events, &runner::check_options(&scenario));
    Ok((events, result))
}

/// Parses `90s`, `20m`, `1h30m`, `2h` (a bare number is seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("`{text}` is not a duration: use e.g. 90s, 20m, 1h30m");
    let mut total = 0u64;
    let mut digits = String::new();
    for c in text.trim().chars() {
        if c.is_ascii_digit() {
            digits.push(c);
            continue;
        }
        let n: u64 = digits.parse().map_err(|_| bad())?;
        digits.clear();
        total += n * match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            _ => return Err(bad()),
        };
    }
    if !digits.is_empty() {
        total += digits.parse::<u64>().map_err(|_| bad())?;
    }
    if total == 0 {
        return Err(bad());
    }
    Ok(Duration::from_secs(total))
}

/// `target/chaos/<UTC time>`, e.g. `target/chaos/20250101T120000Z`.
pub fn default_out() -> PathBuf {
    let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    PathBuf::from(format!("target/chaos/{}", now.replace(['-', ':'], "")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("20m"), Ok(Duration::from_secs(1200)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("0m").is_err());
    }

    #[test]
    fn the_ci_selection_names_known_scenarios() {
        assert!(!ci_runs().is_empty());
        assert!(select(&["leader".into(), "s3".into()]).is_ok());
        let err = select(&["nope".into()]).unwrap_err().to_string();
        assert!(err.contains("nope") && err.contains("leader"), "{err}");
    }
}
