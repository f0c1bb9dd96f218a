//! Resident memory (`VmRSS`) of an idle `sluice dispatcher` (in memory) and an idle
//! `sluice worker`: just after start, and after a small job (`range(100000)`, OFF)
//! has been read to its end. Each figure is read after the processes have been idle
//! for [`SETTLE`].

use std::path::Path;
use std::time::Duration;

use serde::Serialize;
use sluice_client::ProcessingMode;
use sluice_dataset::DatasetDef;

use crate::procstat::rss_bytes;
use crate::service::Service;
use crate::streaming::read;

const SETTLE: Duration = Duration::from_secs(1);
const JOB_ELEMENTS: i64 = 100_000;

#[derive(Clone, Debug, Serialize)]
pub struct IdleRss {
    pub dispatcher_after_start: u64,
    pub worker_after_start: u64,
    pub dispatcher_after_job: u64,
    pub worker_after_job: u64,
    pub job: String,
}

pub async fn run(exe: &Path, logs: &Path) -> anyhow::Result<IdleRss> {
    let service = Service::start(exe, 1, 1000, logs, "rss").await?;
    let (d, w) = (service.dispatcher.id().to_string(), service.workers[0].id().to_string());
    tokio::time::sleep(SETTLE).await;
    let (d0, w0) = (rss_bytes(&d)?, rss_bytes(&w)?);
    let def = DatasetDef::range(JOB_ELEMENTS);
    let r = read(&service.client, &def, ProcessingMode::Off, |_| Ok(())).await?;
    anyhow::ensure!(r.elements == JOB_ELEMENTS as u64, "the job delivered {} elements", r.elements);
    tokio::time::sleep(SETTLE).await;
    Ok(IdleRss {
        dispatcher_after_start: d0,
        worker_after_start: w0,
        dispatcher_after_job: rss_bytes(&d)?,
        worker_after_job: rss_bytes(&w)?,
        job: format!("range({JOB_ELEMENTS}), OFF, 1 worker"),
    })
}
