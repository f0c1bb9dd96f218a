//! The state's `owners` section: who made each held dataset, job, iteration
//! and consumer (the quotas of `quotas.rs` count by it), each dataset
//! definition's size, and how often each dataset was used (what makes an
//! unused dataset's forgetting safe against a reader that just came back).
//!
//! Only things made by a command with a charge are listed: a dispatcher without
//! tokens records sizes and uses with no owner, and things logged by a build
//! before quotas are owned by nobody (they count against the dispatcher-wide
//! caps only). Entries go with what they describe (`apply/forget.rs`,
//! `apply/iterations.rs`); counts (`quotas.rs`) only look at entries whose object is still
//! held, so a missed removal can never make a quota refuse wrongly.
//!
//! Persisted layout version 5 appended this section to `State`
//! (`raft/layout_v4.rs`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::ids::{ClientId, DatasetId, IterationId, JobId};

/// One dataset's record.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DatasetRecord {
    /// The token name that registered it; `None` when the dispatcher checked
    /// no tokens.
    pub owner: Option<String>,
    /// Its definition's encoded size (`quotas::Charge::bytes`).
    pub bytes: u64,
    /// Grows at each registration of it and each job created over it: a
    /// proposal to forget it names the count it saw, and is void if it moved.
    pub uses: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owners {
    pub datasets: BTreeMap<DatasetId, DatasetRecord>,
    pub jobs: BTreeMap<JobId, String>,
    pub iterations: BTreeMap<IterationId, String>,
    pub clients: BTreeMap<ClientId, String>,
}

impl Owners {
    /// Bytes of the held definitions `owner` registered (`None`: everyone's).
    pub fn dataset_bytes(&self, owner: Option<&str>) -> u64 {
        self.datasets
            .values()
            .filter(|r| owner.is_none() || r.owner.as_deref() == owner)
            .fold(0u64, |sum, r| sum.saturating_add(r.bytes))
    }

    /// The dataset was registered again or a job was made over it.
    pub fn dataset_used(&mut self, id: &DatasetId) {
        let r = self.datasets.entry(id.clone()).or_default();
        r.uses = r.uses.wrapping_add(1);
    }

    /// `dataset_used`'s count for `id` (0 if it has no record).
    pub fn dataset_uses(&self, id: &DatasetId) -> u64 {
        self.datasets.get(id).map_or(0, |r| r.uses)
    }

    /// Records a new thing's owner, when it has one.
    pub fn record<K: Ord>(map: &mut BTreeMap<K, String>, id: K, owner: Option<&str>) {
        if let Some(o) = owner {
            map.insert(id, o.to_string());
        }
    }
}
