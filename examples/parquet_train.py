"""Training from Parquet files: a table written by pyarrow (as the Hugging Face Hub
and most tools write them), read by Sluice's workers through a 3-node dispatcher
quorum, each row exactly once per epoch even though a worker stops mid-epoch.

The table has a feature vector ``x`` (a list of 4 float32) and a ``label`` per
row, 4 files of 250 rows in row groups of 50; a ``note`` column is never read.
The pipeline::

    parquet("<dir>/part-*.parquet", columns=["x", "label"], batch_rows=25)

gives batches of 25 rows of one row group (``x`` float32 [25, 4], ``label``
int64 [25]); the dispatcher read each file's footer at registration, so a row
group is the unit it hands out and a row the record an exactly-once read
delivers once: the rows of the worker that stops are read again by the other,
from where it stopped. The trainer fits a logistic regression (numpy). No Python
runs on the workers.

Needs ``pip install pyarrow``; run from the repository root after building the
package (``maturin develop`` in python/)::

    python examples/parquet_train.py
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import sluice

FILES = 4
ROWS = 250
EPOCHS = 3


def write_table(directory: Path, rng: np.random.Generator) -> int:
    """Rows whose label is 1 when x's first two features outweigh the others."""
    n = 0
    for f in range(FILES):
        x = rng.normal(size=(ROWS, 4)).astype(np.float32)
        label = (x[:, 0] + x[:, 1] > x[:, 2] + x[:, 3]).astype(np.int64)
        table = pa.table({
            "id": pa.array(np.arange(n, n + ROWS), pa.int64()),
            "x": pa.array(list(x), pa.list_(pa.float32())),
            "label": label,
            "note": [f"row {i}" for i in range(n, n + ROWS)],
        })
        pq.write_table(table, directory / f"part-{f:05}.parquet", row_group_size=50)
        n += ROWS
    return n


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        total = write_table(Path(tmp), np.random.default_rng(0))
        with sluice.start_quorum(3) as quorum, sluice.WorkerServer(quorum) as first, sluice.WorkerServer(quorum):
            # The five lines a user writes:
            ds = sluice.Dataset.parquet(f"{tmp}/part-*.parquet", columns=["x", "label", "id"], batch_rows=25)
            data = ds.distribute("distributed_epoch", quorum.target, job_name="pq", exactly_once=True)
            weights = np.zeros(5)
            for epoch in range(EPOCHS):
                ids: list[int] = []
                correct = 0
                for step, batch in enumerate(data):
                    if (epoch, step) == (1, 5):
                        first.stop()  # a worker goes away mid-epoch
                    ids.extend(batch["id"].tolist())
                    x = np.concatenate([batch["x"], np.ones((len(batch["label"]), 1))], axis=1)
                    p = 1 / (1 + np.exp(-x @ weights))
                    weights -= 1.0 * x.T @ (p - batch["label"]) / len(p)
                    correct += int(np.sum((p > 0.5) == (batch["label"] == 1)))
                assert sorted(ids) == list(range(total)), "each row once"
                print(f"epoch {epoch}: {len(ids)} rows, each once, accuracy {correct / len(ids):.2f}")
            print(f"final accuracy {correct / len(ids):.2f}")


if __name__ == "__main__":
    main()
