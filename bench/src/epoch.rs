//! End of epoch: how long after the last element arrives at the reader the stream
//! says it is over (`None`). In OFF mode a worker's task ends with its pipeline; in
//! DYNAMIC the last split must be taken and the end of splits seen. Either way the
//! client learns the iteration ended from a worker's end of sequence and from the
//! dispatcher (its `ClientHeartbeat` long poll, answered as soon as the iteration's
//! view changes), so this is bounded by how the client is told, not by any work left.
//!
//! Each mode reads `range(20000)` (DYNAMIC: 1,000 elements per split) a few times on
//! the streaming service's processes.

use serde::Serialize;
use sluice_client::ProcessingMode;
use sluice_dataset::DatasetDef;

use crate::measure::Latency;
use crate::service::Service;
use crate::streaming::read;

/// Elements of each end-of-epoch read.
pub const ELEMENTS: i64 = 20_000;

/// The end-of-epoch cases (a struct, so that the JSON can tag it).
#[derive(Clone, Debug, Serialize)]
pub struct Epoch {
    pub cases: Vec<EpochCase>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EpochCase {
    pub mode: String,
    pub runs: usize,
    /// Last element → `None`, over the runs.
    pub end_after_last: Latency,
    /// Elements each run delivered (OFF: once per worker).
    pub elements: Vec<u64>,
    pub expected: u64,
}

impl EpochCase {
    pub fn ok(&self) -> bool {
        self.elements.iter().all(|n| *n == self.expected)
    }
}

pub async fn run(service: &Service, runs: usize) -> anyhow::Result<Epoch> {
    let mut out = vec![];
    let modes = [
        ("OFF", ProcessingMode::Off, ELEMENTS as u64 * service.workers.len() as u64),
        ("DYNAMIC", ProcessingMode::Dynamic, ELEMENTS as u64),
    ];
    for (name, mode, expected) in modes {
        let (mut times, mut elements) = (vec![], vec![]);
        for _ in 0..runs {
            let r = read(&service.client, &DatasetDef::range(ELEMENTS), mode, |_| Ok(())).await?;
            tracing::info!(
                mode = name,
                end_after_last_ms = r.end_after_last.as_secs_f64() * 1e3,
                "end of epoch run"
            );
            times.push(r.end_after_last);
            elements.push(r.elements);
        }
        out.push(EpochCase {
            mode: name.into(),
            runs,
            end_after_last: Latency::of(times).ok_or_else(|| anyhow::anyhow!("no runs"))?,
            elements,
            expected,
        });
    }
    Ok(Epoch { cases: out })
}
