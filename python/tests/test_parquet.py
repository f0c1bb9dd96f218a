"""Parquet tables from Python: ``Dataset.parquet`` over files written by pyarrow
(as Hugging Face and most tools write them), read through the service: rows
arrive as dicts, only the named columns are read, a row group is the split unit,
exactly once through a worker's death and a restore onto another number of
readers; a null is a ``DataLossError`` naming the row, which ``ignore_errors``
skips and ``defaults`` fills."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import sluice
from conftest import in_threads

ROWS = 600


def write_table(path: Path, rows: int, first: int = 0, group: int = 50) -> str:
    ids = list(range(first, first + rows))
    table = pa.table({
        "id": pa.array(ids, pa.int64()),
        "text": [f"row {i}" for i in ids],
        "score": pa.array([i / 2 for i in ids], pa.float32()),
        "tokens": pa.array([[i, i + 1][: 1 + i % 2] for i in ids], pa.list_(pa.int32())),
        "image": [{"bytes": b"\xff\xd8" + bytes([i % 256]), "path": f"{i}.jpg"} for i in ids],
    })
    pq.write_table(table, path, row_group_size=group)
    return str(path)


def tables(tmp_path: Path) -> list[str]:
    """Two files of 300 rows (ids 0..599), in row groups of 50: 12 units."""
    return [write_table(tmp_path / f"t-{k}.parquet", 300, first=300 * k) for k in range(2)]


def test_parquet_spec_takes_files_or_a_pattern_and_its_options():
    files = sluice.Dataset.parquet(["/d/a.parquet", Path("/d/b.parquet")], columns=["text"])
    assert files.to_dict() == {"stages": [
        {"parquet": {"files": ["/d/a.parquet", "/d/b.parquet"], "columns": ["text"]}},
    ]}
    pattern = sluice.Dataset.parquet("s3://b/train-*.parquet", batch_rows=64, defaults={"y": -1})
    assert pattern.to_dict() == {"stages": [
        {"parquet": {"pattern": "s3://b/train-*.parquet", "batch_rows": 64, "defaults": {"y": -1}}},
    ]}
    with pytest.raises(TypeError, match="columns must be a list of str"):
        sluice.Dataset.parquet("a.parquet", columns="text")
    with pytest.raises(ValueError, match="batch_rows"):
        sluice.Dataset.parquet("a.parquet", batch_rows=0)
    with pytest.raises(ValueError, match="filenames is empty"):
        sluice.Dataset.parquet([])


def test_rows_arrive_as_dicts_of_the_columns_read_each_once(service, tmp_path):
    tables(tmp_path)
    ds = sluice.Dataset.parquet(str(tmp_path / "t-*.parquet"), columns=["id", "text", "tokens", "image"])
    got = list(ds.distribute("distributed_epoch", service.target))
    assert sorted(int(r["id"]) for r in got) == list(range(ROWS)), "every row once"
    row = next(r for r in got if int(r["id"]) == 7)
    assert list(row) == ["id", "text", "tokens", "image.bytes", "image.path"]
    assert row["text"] == b"row 7", "strings arrive as bytes, as every string tensor does"
    assert row["image.bytes"] == b"\xff\xd8\x07" and row["image.path"] == b"7.jpg"
    assert row["tokens"].dtype == np.int32 and row["tokens"].tolist() == [7, 8]
    assert "score" not in row, "only the named columns are read"


def test_batch_rows_gives_arrays_of_rows_of_one_row_group(service, tmp_path):
    path = write_table(tmp_path / "b.parquet", 10, group=4)
    ds = sluice.Dataset.parquet(path, columns=["id", "score"], batch_rows=3)
    got = list(ds.distribute("distributed_epoch", service.target))
    batches = sorted(b["id"].tolist() for b in got)
    assert batches == [[0, 1, 2], [3], [4, 5, 6], [7], [8, 9]], "a batch never spans row groups"
    assert got[0]["score"].dtype == np.float32


def test_a_null_is_a_data_loss_error_naming_the_row_and_ignore_errors_or_defaults_cure_it(
    service, tmp_path
):
    path = tmp_path / "n.parquet"
    pq.write_table(pa.table({"id": [0, 1, 2], "label": [5, None, 7]}), path, row_group_size=2)
    with pytest.raises(sluice.DataLossError) as caught:
        list(sluice.Dataset.parquet(str(path)).distribute("distributed_epoch", service.target))
    message = str(caught.value)
    assert "n.parquet" in message and "row group 0, row 1" in message and "`label` is null" in message
    skipped = sluice.Dataset.parquet(str(path)).ignore_errors()
    got = skipped.distribute("distributed_epoch", service.target)
    assert sorted(int(r["id"]) for r in got) == [0, 2], "two row groups, read by either worker"
    filled = sluice.Dataset.parquet(str(path), defaults={"label": -1})
    got = list(filled.distribute("distributed_epoch", service.target))
    assert sorted((int(r["id"]), int(r["label"])) for r in got) == [(0, 5), (1, -1), (2, 7)]


def test_a_missing_column_is_refused_at_registration_listing_the_files_columns(service, tmp_path):
    path = write_table(tmp_path / "m.parquet", 4)
    ds = sluice.Dataset.parquet(path, columns=["id", "lable"])
    with pytest.raises(sluice.InvalidArgumentError) as caught:
        list(ds.distribute("distributed_epoch", service.target))
    message = str(caught.value)
    assert "no column `lable`" in message and "id, text, score, tokens, image" in message


def _once(values: list[int]) -> None:
    dup = [v for v, n in Counter(values).items() if n > 1]
    assert not dup, f"delivered twice: {dup[:10]}"
    assert sorted(values) == list(range(ROWS)), f"missing: {sorted(set(range(ROWS)) - set(values))[:10]}"


def test_exactly_once_through_a_worker_death_and_a_restore_onto_two_readers(eo_cluster, tmp_path):
    d, workers = eo_cluster
    tables(tmp_path)

    def eo() -> sluice.DistributedDataset:
        ds = sluice.Dataset.parquet(str(tmp_path / "t-*.parquet"), columns=["id"])
        return ds.distribute("distributed_epoch", d.target, job_name="pq-eo", exactly_once=True,
                             max_outstanding_requests=1)

    first = eo().read()
    got = [int(first.next(timeout=60)["id"]) for _ in range(100)]
    workers[0].stop()  # mid-row-group: its rows come again, once
    got += [int(first.next(timeout=60)["id"]) for _ in range(100)]
    pos = first.position()
    first.close()
    # Restored on two readers that read together (two trainers instead of one).
    a, b = eo().read(restore_from=pos), eo().read(restore_from=pos)
    got += in_threads([lambda r=r: [int(x["id"]) for x in r] for r in (a, b)])
    _once(got)
