"""Training from WebDataset shards: tar files of images and labels, read and decoded
by Sluice's workers, each sample exactly once per epoch.

The shards are what webdataset's writers make: ``000042.png`` (an image) and
``000042.cls`` (its label as ASCII digits) per sample, 4 shards of 48 samples,
written here with ``tarfile``. The pipeline::

    webdataset("<dir>/shard-*.tar")   # Rust: one dict per sample {"__key__", "cls", "png"}
      .map("decode_png", "png")       # Rust: PNG bytes -> uint8 [H, W, 3]
      .map("normalize", "png")        # Rust: -> float32 in [0, 1]
      .batch(16)                      # Rust: stacked batches

runs on two workers started in this process; a shard is the unit the dispatcher
hands out, a sample the record an exactly-once read delivers once (a worker that
died mid-shard would be replaced by one that resumes after the samples already
consumed). The trainer fits a logistic regression (numpy) on the images' mean
colours. No Python runs on the workers.

Run from the repository root after building the package (``maturin develop`` in
python/)::

    python examples/webdataset_train.py
"""

from __future__ import annotations

import io
import struct
import tarfile
import tempfile
import zlib
from pathlib import Path

import numpy as np
import sluice

SHARDS = 4
PER_SHARD = 48
SIZE = 24
EPOCHS = 3


def png(image: np.ndarray) -> bytes:
    """A minimal RGB PNG (8 bits per channel, no filter) of ``image``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    h, w, _ = image.shape
    raw = b"".join(b"\x00" + image[r].tobytes() for r in range(h))
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def write_shards(directory: Path, rng: np.random.Generator) -> int:
    """Noisy images, label 1 mostly blue, label 0 mostly red; returns the sample count."""
    n = 0
    for s in range(SHARDS):
        with tarfile.open(directory / f"shard-{s:05}.tar", "w") as tar:
            for _ in range(PER_SHARD):
                label = int(rng.integers(0, 2))
                image = rng.integers(0, 160, size=(SIZE, SIZE, 3))
                image[:, :, 2 if label else 0] += 90
                for ext, data in (("png", png(image.astype(np.uint8))), ("cls", str(label).encode())):
                    info = tarfile.TarInfo(f"{n:06}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
                n += 1
    return n


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        total = write_shards(Path(tmp), np.random.default_rng(0))
        ds = (
            sluice.Dataset.webdataset(f"{tmp}/shard-*.tar")
            .map("decode_png", "png")
            .map("normalize", "png")
            .batch(16)
        )
        with sluice.DispatchServer() as d, sluice.WorkerServer(d.target), sluice.WorkerServer(d.target):
            data = ds.distribute("distributed_epoch", d.target, job_name="wds", exactly_once=True)
            weights = np.zeros(4)
            for epoch in range(EPOCHS):
                keys: list[bytes] = []
                correct = 0
                for batch in data:
                    keys.extend(batch["__key__"])
                    y = np.array([int(c) for c in batch["cls"]])
                    means = batch["png"].mean(axis=(1, 2))
                    x = np.concatenate([means, np.ones((len(y), 1))], axis=1)
                    p = 1 / (1 + np.exp(-x @ weights))
                    weights -= 4.0 * x.T @ (p - y) / len(y)
                    correct += int(np.sum((p > 0.5) == (y == 1)))
                assert sorted(keys) == [f"{i:06}".encode() for i in range(total)], "each sample once"
                print(f"epoch {epoch}: {len(keys)} samples, each once, accuracy {correct / len(keys):.2f}")
            print(f"final accuracy {correct / len(keys):.2f}")


if __name__ == "__main__":
    main()
