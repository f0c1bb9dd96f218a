//! Dispatcher RSS per byte of the dataset definitions it holds (issue 33, "lean
//! dispatcher"): a `sluice dispatcher` process (on a sled work_dir, then in
//! memory), [`SPECS`] definitions of a float32 `from_tensors` of about 11 MB each
//! registered, and its `VmRSS` before, at its peak and [`FOLLOW`] after. The
//! definitions' bytes are what the caps count: their encoded length.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;
use prost::Message;
use serde::Serialize;
use sluice_client::{Client, RetryPolicy};
use sluice_dataset::{DatasetDef, Tensor};
use sluice_proto::v1 as pb;
use sluice_testkit::{Child, Port};

use crate::procstat::rss_bytes;
use crate::service::spec;

/// Definitions registered; each holds [`VALUES`] float32 values.
pub const SPECS: usize = 4;
const VALUES: usize = 2_750_000;
/// RSS growth over the definitions' bytes the issue allows.
pub const TARGET_RATIO: f64 = 1.5;
/// How long RSS is followed after the registrations: freed memory went back to
/// the kernel 7-10 s after a burst in the first measurements (the allocator
/// purges lazily), so the figure is read well after that.
const FOLLOW: Duration = Duration::from_secs(20);
const POLL: Duration = Duration::from_millis(500);

#[derive(Clone, Debug, Serialize)]
pub struct SpecRss {
    /// `sled` or `memory`.
    pub journal: String,
    pub specs: usize,
    /// Encoded bytes of the definitions registered.
    pub spec_bytes: u64,
    pub before: u64,
    /// The highest RSS seen while following it.
    pub peak: u64,
    /// RSS at the end of [`FOLLOW`].
    pub after: u64,
}

impl SpecRss {
    /// RSS growth over the definitions' bytes.
    pub fn ratio(&self) -> f64 {
        self.after.saturating_sub(self.before) as f64 / self.spec_bytes.max(1) as f64
    }
}

/// Measures a dispatcher on a sled work_dir under `scratch`, then one in memory.
pub async fn run(exe: &Path, logs: &Path, scratch: &Path) -> anyhow::Result<Vec<SpecRss>> {
    let work_dir = scratch.join("rss-specs-work-dir");
    let sled = measure(exe, logs, Some(&work_dir)).await?;
    let memory = measure(exe, logs, None).await?;
    Ok(vec![sled, memory])
}

async fn measure(exe: &Path, logs: &Path, work_dir: Option<&Path>) -> anyhow::Result<SpecRss> {
    let port = Port::reserve()?;
    // Caps high enough for the definitions (the defaults allow 64 MiB per identity).
    let mut args = ["dispatcher", "--port", &port.number().to_string()].map(String::from).to_vec();
    args.extend(
        ["--quota-dataset-bytes", "1073741824", "--max-dataset-bytes", "1073741824"]
            .map(String::from),
    );
    let journal = match work_dir {
        Some(dir) => {
            args.extend(["--work-dir".to_string(), dir.display().to_string()]);
            "sled"
        }
        None => "memory",
    };
    let log = logs.join(format!("rss-specs-{journal}-dispatcher.log"));
    let dispatcher = Child::start_async(&spec(exe, args, &log)).await?;
    let pid = dispatcher.id().to_string();
    let client = Client::new(&[port.address()], RetryPolicy::default())?;
    client.register_dataset(&DatasetDef::range(1), None).await.context("the dispatcher answers")?;
    let before = follow(&pid, POLL).await?.1;
    let mut spec_bytes = 0;
    for i in 0..SPECS {
        let values: Vec<f32> = (0..VALUES).map(|v| (v * (i + 1)) as f32 * 0.37).collect();
        let def = DatasetDef::from_tensors(vec![Tensor::from_f32s(vec![VALUES as u64], &values)?]);
        spec_bytes += pb::DatasetDef::from(&def).encoded_len() as u64;
        client.register_dataset(&def, None).await.context("registering a definition")?;
    }
    let (peak, after) = follow(&pid, FOLLOW).await?;
    Ok(SpecRss { journal: journal.into(), specs: SPECS, spec_bytes, before, peak, after })
}

/// `pid`'s RSS read every [`POLL`] for `window`: the highest, and the last.
async fn follow(pid: &str, window: Duration) -> anyhow::Result<(u64, u64)> {
    let end = Instant::now() + window;
    let (mut peak, mut last) = (0, 0);
    while Instant::now() < end {
        tokio::time::sleep(POLL).await;
        last = rss_bytes(pid)?;
        peak = peak.max(last);
    }
    Ok((peak, last))
}
