//! A dispatcher and worker *processes* for the exactly-once tests
//! (`tests/exactly_once.rs`, `tests/exactly_once_deterministic.rs`): 4 units per
//! split, a short worker timeout (a SIGKILLed worker is declared lost within
//! seconds), a client timeout long enough that a loaded machine never expires
//! a live reader (3 s once did: "iteration client not found" in a
//! deterministic read), a client once every worker registered. Killed on drop.

use sluice_client::{Client, RetryPolicy};

use super::{server, wait_until, Proc};

pub fn dispatcher() -> Proc {
    server(&[
        "dispatcher",
        "--port",
        "0",
        "--worker-timeout-secs",
        "2",
        "--client-timeout-secs",
        "20",
        "--elements-per-split",
        "4",
    ])
}

/// A worker whose task buffers hold `buffer` elements.
pub fn worker(dispatcher: &str, buffer: u32) -> Proc {
    let buffer = buffer.to_string();
    server(&[
        "worker",
        "--dispatcher",
        dispatcher,
        "--port",
        "0",
        "--buffer",
        &buffer,
        "--timeout-secs",
        "20",
    ])
}

pub struct Cluster {
    pub address: String,
    pub workers: Vec<Proc>,
    pub client: Client,
    pub dispatcher: Proc,
}

/// A dispatcher and `workers` workers with task buffers of `buffer` elements.
pub async fn cluster(workers: usize, buffer: u32) -> Cluster {
    let dispatcher = dispatcher();
    let address = dispatcher.address().to_string();
    let procs = (0..workers).map(|_| worker(&address, buffer)).collect();
    let client = Client::new(std::slice::from_ref(&address), RetryPolicy::for_tests()).unwrap();
    let c = &client;
    wait_until("the workers", || async {
        c.status().await.is_ok_and(|s| s.workers.len() == workers)
    })
    .await;
    Cluster { address, workers: procs, client, dispatcher }
}
