//! What an exactly-once scenario's job reads: `range(n)`, or the same values
//! carried by real files — Parquet rows (`id` = 0..n, written by arrow-rs in
//! row groups, the split unit) or WebDataset samples (keys `000000`..,
//! small JPEGs, tar shards the split unit) — so that a worker's death and a
//! trainer restore land mid-row-group and mid-shard. The checker sees the same
//! values either way ([`value`]).

use sluice_dataset::formats::parquet::ParquetSource;
use sluice_dataset::{DatasetDef, Element, Stage};

/// Where an exactly-once scenario's elements come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Range,
    /// Parquet files of [`PARQUET_GROUP_ROWS`]-row groups.
    Parquet,
    /// WebDataset shards of [`SHARD_SAMPLES`] samples.
    WebDataset,
}

/// Rows per Parquet row group (the split unit; one per split in the scenarios,
/// so an epoch has as many splits as the `range` scenarios' ones).
pub const PARQUET_GROUP_ROWS: usize = 10;
/// Rows per Parquet file: several files, each of several row groups.
const PARQUET_FILE_ROWS: usize = 500;
/// Samples per WebDataset shard (the split unit).
pub const SHARD_SAMPLES: usize = 10;
/// Sides of the sample JPEGs (8 to 24 pixels): what is read is the bytes.
const IMAGE_SIZE: u32 = 16;

/// The source stage of `source` over `n` values, writing its files into `dir`
/// (which must lie under the servers' data roots). `n` is rounded up to whole
/// files; the returned count is the number of values.
pub fn write(source: Source, dir: &std::path::Path, n: u64) -> anyhow::Result<(DatasetDef, u64)> {
    let n = n as usize;
    let out = dir.to_string_lossy().into_owned();
    Ok(match source {
        Source::Range => (DatasetDef::range(n as i64), n as u64),
        Source::Parquet => {
            let files = n.div_ceil(PARQUET_FILE_ROWS);
            let s = sluice_dataset::sample::write_parquet(
                &out,
                files,
                PARQUET_FILE_ROWS,
                PARQUET_GROUP_ROWS,
                7,
            )?;
            let mut p = ParquetSource::new(s.files);
            p.columns = vec!["id".into()];
            (DatasetDef { stages: vec![Stage::Parquet(p)] }, s.records)
        }
        Source::WebDataset => {
            let files = n.div_ceil(SHARD_SAMPLES);
            let s = sluice_dataset::sample::write_webdataset(
                &out,
                files,
                SHARD_SAMPLES,
                IMAGE_SIZE,
                7,
            )?;
            (DatasetDef::webdataset(s.files), s.records)
        }
    })
}

/// The value an element stands for: a Parquet row's `id`, a WebDataset
/// sample's key as a number, or the int64 of `range`.
pub fn value(e: &Element) -> Result<i64, String> {
    if let Some(id) = e.get("id") {
        return id.as_i64().map_err(|e| e.to_string());
    }
    if let Some(key) = e.get("__key__") {
        let key = key.items().map_err(|e| e.to_string())?;
        let key = key.first().ok_or("an empty __key__")?;
        return String::from_utf8_lossy(key)
            .parse()
            .map_err(|_| format!("the key {key:?} is not a number"));
    }
    e.as_i64().map_err(|e| e.to_string())
}
