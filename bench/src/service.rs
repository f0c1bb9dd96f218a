//! A small service on 127.0.0.1 for the streaming cases: one `sluice dispatcher`
//! process (in memory, or a [`Group`] of them) and W `sluice worker` processes, read
//! by this process through `sluice_client`. Every child is a `sluice_testkit::Child`:
//! SIGKILLed and reaped when its guard drops, killed by the kernel if the bench dies.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use sluice_client::{Client, RetryPolicy};
use sluice_testkit::{harness_log_env, Child, Port, Spec, Stderr, START_TIMEOUT};

/// One in-memory dispatcher process and its workers.
pub struct Service {
    pub dispatcher: Child,
    pub workers: Vec<Child>,
    pub addresses: Vec<String>,
    pub client: Client,
    /// The dispatcher's port, held while it runs.
    _port: Port,
}

/// `sluice ARGS` with its stderr appended to `log`.
pub(crate) fn spec(exe: &Path, args: Vec<String>, log: &Path) -> Spec {
    Spec::new(exe, args).envs([harness_log_env()]).stderr(Stderr::File(log.to_path_buf()))
}

impl Service {
    /// Starts the dispatcher (in memory, `elements_per_split`) and `workers` workers;
    /// returns once every worker registered. Logs go to `<logs>/<tag>-*.log`.
    pub async fn start(
        exe: &Path,
        workers: usize,
        elements_per_split: u64,
        logs: &Path,
        tag: &str,
    ) -> anyhow::Result<Service> {
        let port = Port::reserve()?;
        let args = [
            "dispatcher",
            "--port",
            &port.number().to_string(),
            "--elements-per-split",
            &elements_per_split.to_string(),
        ]
        .map(String::from)
        .to_vec();
        let dispatcher =
            Child::start_async(&spec(exe, args, &logs.join(format!("{tag}-dispatcher.log"))))
                .await?;
        let addresses = vec![port.address()];
        let workers = start_workers(exe, &addresses, workers, &[], logs, tag).await?;
        let client = Client::new(&addresses, RetryPolicy::default())?;
        wait_registered(&client, workers.len()).await?;
        Ok(Service { dispatcher, workers, addresses, client, _port: port })
    }
}

/// Starts `n` workers of the dispatcher(s) at `addresses`, with `extra` flags.
pub async fn start_workers(
    exe: &Path,
    addresses: &[String],
    n: usize,
    extra: &[String],
    logs: &Path,
    tag: &str,
) -> anyhow::Result<Vec<Child>> {
    let mut out = vec![];
    for i in 0..n {
        let mut args = vec!["worker".to_string(), "--dispatcher".into(), addresses.join(",")];
        args.extend(extra.iter().cloned());
        out.push(
            Child::start_async(&spec(exe, args, &logs.join(format!("{tag}-worker-{i}.log"))))
                .await?,
        );
    }
    Ok(out)
}

/// Waits (bounded) until at least `n` workers are registered.
pub async fn wait_registered(client: &Client, n: usize) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    while client.status().await?.workers.len() < n {
        if Instant::now() > deadline {
            bail!("{n} worker(s) did not register within the start timeout");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
