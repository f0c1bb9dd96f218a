"""An image pipeline whose augmentation is the user's numpy function, run on the
workers between Sluice's built-in Rust stages.

The pipeline::

    from_tensor_slices({"index", "png", "label"})   # Rust: one element per image
      .map("decode_png", "png")                     # Rust: PNG bytes -> uint8 [H, W, 3]
      .map(augment, num_parallel_calls=2)           # Python: random flip and crop
      .batch(32)                                    # Rust: stacked batches

``augment`` draws its flip and crop from a generator seeded with the element's
index, so an image is augmented the same way whichever worker or Python process
gets it: the run checks every image against the same function applied here, in
plain Python, then trains a small classifier (numpy logistic regression on the
augmented images' mean colours) on the batches.

Starts a dispatcher and two workers that run Python stages (``allow_python=True``)
in this process, and stops them at the end. Run from the repository root after
building the package (``maturin develop`` in python/)::

    python examples/image_augment.py
"""

from __future__ import annotations

import struct
import zlib

import numpy as np
import sluice

N = 128  # images
SIZE = 36  # stored images are SIZE x SIZE
CROP = 32  # augmented images are CROP x CROP
SEED = 1234
EPOCHS = 4


def augment(element: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A random horizontal flip and a random ``CROP`` x ``CROP`` crop, scaled to
    float32 in [0, 1]; seeded by the element's index (reproducible anywhere)."""
    rng = np.random.default_rng([SEED, int(element["index"])])
    image = element["png"]
    if rng.random() < 0.5:
        image = image[:, ::-1]
    top, left = rng.integers(0, SIZE - CROP + 1, size=2)
    crop = image[top : top + CROP, left : left + CROP]
    return {
        "index": element["index"],
        "image": crop.astype(np.float32) / 255.0,
        "label": element["label"],
    }


def make_images(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Noisy images, label 1 mostly blue, label 0 mostly red."""
    labels = rng.integers(0, 2, size=N)
    images = rng.integers(0, 160, size=(N, SIZE, SIZE, 3))
    images[labels == 0, :, :, 0] += 90
    images[labels == 1, :, :, 2] += 90
    return images.astype(np.uint8), labels.astype(np.int64)


def png(image: np.ndarray) -> bytes:
    """A minimal RGB PNG (8 bits per channel, no filter) of ``image``."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    h, w, _ = image.shape
    raw = b"".join(b"\x00" + image[r].tobytes() for r in range(h))
    header = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def features(batch: dict[str, np.ndarray]) -> np.ndarray:
    """Each image's mean colour and a bias: ``[n, 4]``."""
    means = batch["image"].mean(axis=(1, 2))
    return np.concatenate([means, np.ones((len(means), 1), np.float32)], axis=1)


def main() -> None:
    images, labels = make_images(np.random.default_rng(0))
    ds = (
        sluice.Dataset.from_tensor_slices(
            {
                "index": np.arange(N, dtype=np.int64),
                "png": np.array([png(im) for im in images], dtype=object),
                "label": labels,
            }
        )
        .map("decode_png", "png")
        .map(augment, num_parallel_calls=2)
        .batch(32)
    )
    with sluice.DispatchServer() as d, sluice.WorkerServer(
        d.target, allow_python=True
    ), sluice.WorkerServer(d.target, allow_python=True):
        data = ds.distribute("distributed_epoch", d.target, job_name="images")
        weights = np.zeros(4)
        for epoch in range(EPOCHS):
            seen, correct = 0, 0
            for batch in data:
                if epoch == 0:  # the workers' augmentation is the local one
                    for i, image in zip(batch["index"], batch["image"]):
                        local = augment({"index": i, "png": images[i], "label": labels[i]})
                        assert np.array_equal(image, local["image"]), f"image {i} differs"
                x, y = features(batch), batch["label"]
                p = 1 / (1 + np.exp(-x @ weights))
                weights -= 4.0 * x.T @ (p - y) / len(y)
                seen += len(y)
                correct += int(np.sum((p > 0.5) == (y == 1)))
            if epoch == 0:
                print(f"all {seen} augmented images equal the local augmentation")
            print(f"epoch {epoch}: {seen} images, accuracy {correct / seen:.2f}")
        print(f"final accuracy {correct / seen:.2f}")


if __name__ == "__main__":
    main()
