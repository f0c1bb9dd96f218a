//! A small service on 127.0.0.1 for the streaming cases: one `sluice dispatcher`
//! process (in memory, or a [`Group`] of them) and W `sluice worker` processes, read
//! by this process through `sluice_client`. Every child is SIGKILLed and reaped when
//! its guard drops.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::bail;
use sluice_chaos::procs::{reserve_port, Child, Spec};
use sluice_client::{Client, RetryPolicy};

/// One in-memory dispatcher process and its workers.
pub struct Service {
    pub dispatcher: Child,
    pub workers: Vec<Child>,
    pub addresses: Vec<String>,
    pub client: Client,
}

fn spec(exe: &Path, args: Vec<String>, log: &Path) -> Spec {
    Spec { exe: exe.to_path_buf(), args, envs: vec![], log: log.to_path_buf() }
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
        let port = reserve_port()?.local_addr()?.port();
        let args = [
            "dispatcher",
            "--port",
            &port.to_string(),
            "--elements-per-split",
            &elements_per_split.to_string(),
        ]
        .map(String::from)
        .to_vec();
        let dispatcher =
            Child::start_async(&spec(exe, args, &logs.join(format!("{tag}-dispatcher.log"))))
                .await?;
        let addresses = vec![format!("127.0.0.1:{port}")];
        let workers = start_workers(exe, &addresses, workers, &[], logs, tag).await?;
        let client = Client::new(&addresses, RetryPolicy::default())?;
        wait_registered(&client, workers.len()).await?;
        Ok(Service { dispatcher, workers, addresses, client })
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
    let deadline = Instant::now() + sluice_chaos::procs::START_TIMEOUT;
    while client.status().await?.workers.len() < n {
        if Instant::now() > deadline {
            bail!("{n} worker(s) did not register within the start timeout");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
