mod common;
use common::{entries, Backend, Kind};
use std::time::Instant;

async fn measure(kind: Kind) {
    let be = Backend::new(kind, "measure");
    let (j, _) = be.open().await;
    let t = Instant::now();
    for i in 1..=500u64 {
        j.append(entries(i..=i)).await.unwrap();
    }
    let per = t.elapsed() / 500;
    let t = Instant::now();
    j.append((501..=1000).map(|i| (i, bytes::Bytes::from(vec![1u8; 256]))).collect())
        .await
        .unwrap();
    let batch = t.elapsed();
    let t = Instant::now();
    j.save_vote(common::b("v")).await.unwrap();
    let vote = t.elapsed();
    drop(j);
    let t = Instant::now();
    let (j, r) = be.open().await;
    let open_full = t.elapsed();
    let t = Instant::now();
    j.purge(990, common::b("m")).await.unwrap();
    let purge = t.elapsed();
    if be.is_object_store() { while be.segments().await.len() > 20 { tokio::time::sleep(std::time::Duration::from_millis(10)).await; } }
    let compacted = t.elapsed();
    drop(j);
    let t = Instant::now();
    let (_j, r2) = be.open().await;
    let open_after = t.elapsed();
    eprintln!("{kind:?}: append(1) {per:?}; append(500x256B) {batch:?}; vote {vote:?}; open with {} entries/~502 segments {open_full:?}; purge(990) {purge:?}, compaction done after {compacted:?}; open after purge ({} entries) {open_after:?}", r.entries, r2.entries);
}

#[tokio::test(flavor = "multi_thread")]
async fn measure_all() {
    for k in [Kind::Sled, Kind::File, Kind::Memory, Kind::S3] {
        measure(k).await;
    }
}
