"""The JPEG section's peer: the same image work as Sluice's built-in maps, done by
Pillow (its libjpeg-turbo decoder) and numpy, as a PyTorch/torchvision input
pipeline does it. Run by `sluice bench` (bench/src/formats/jpeg.rs) with the bench
venv's interpreter (scripts/install-bench-venv.sh: Pillow and numpy from PyPI).

Per image, from the encoded bytes in WebDataset tar shards:

  1. decode to RGB with Pillow, `Image.draft("RGB", (w, h))` first so libjpeg-turbo
     may scale by 1/2, 1/4 or 1/8 in the DCT while keeping the crop window's
     pixels at least 224 (the fair per-core baseline; Sluice decodes at full size);
  2. torchvision's RandomResizedCrop window (scale 0.08-1, ratio 3/4-4/3, 10 tries,
     else the center crop), cropped and resized to 224 x 224 bilinearly (Pillow's
     `resize` with `box`, as torchvision's PIL path does);
  3. a horizontal flip with probability 1/2;
  4. float32 `(x / 255 - mean) / std` per channel (ImageNet's), transposed to CHW.

Modes (argv[1]): `single` times the work on one thread (CPU seconds and wall);
`single-full` the same without `draft` (every JPEG decoded at full size);
`pool` runs it in a `multiprocessing` pool of `argv[3]` processes (what
`torch.utils.data.DataLoader(num_workers=N)` is: worker processes sending
decoded arrays to the trainer) and stacks batches of `argv[4]` in this process.
argv[2] is a file listing the shards, one per line. Prints one JSON line.
"""

from __future__ import annotations

import io
import json
import math
import multiprocessing
import random
import sys
import tarfile
import time

import numpy as np
import PIL
from PIL import Image

SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def jpegs(shards: list[str]) -> list[bytes]:
    out = []
    for shard in shards:
        with tarfile.open(shard) as tar:
            for member in tar:
                if member.isfile() and member.name.lower().endswith(".jpg"):
                    out.append(tar.extractfile(member).read())
    return out


def window(w: int, h: int, rng: random.Random) -> tuple[int, int, int, int]:
    """torchvision.transforms.RandomResizedCrop.get_params."""
    area = w * h
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(*log_ratio))
        cw = int(round(math.sqrt(target * ratio)))
        ch = int(round(math.sqrt(target / ratio)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    in_ratio = w / h
    if in_ratio < 3 / 4:
        cw, ch = w, int(round(w / (3 / 4)))
    elif in_ratio > 4 / 3:
        ch, cw = h, int(round(h * (4 / 3)))
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def preprocess(data: bytes, seed: int, draft: bool = True) -> np.ndarray:
    rng = random.Random(seed)
    image = Image.open(io.BytesIO(data))
    w, h = image.size
    x, y, cw, ch = window(w, h, rng)
    # Let the decoder scale down while the window keeps >= SIZE pixels a side.
    scale = min(cw / SIZE, ch / SIZE)
    if draft and scale >= 2:
        image.draft("RGB", (math.ceil(w / scale), math.ceil(h / scale)))
    image = image.convert("RGB")
    sx, sy = image.size[0] / w, image.size[1] / h
    box = (x * sx, y * sy, (x + cw) * sx, (y + ch) * sy)
    image = image.resize((SIZE, SIZE), Image.BILINEAR, box=box)
    if rng.random() < 0.5:
        image = image.transpose(Image.FLIP_LEFT_RIGHT)
    pixels = np.asarray(image, np.float32) / 255.0
    return ((pixels - MEAN) / STD).transpose(2, 0, 1)


def task(args: tuple[bytes, int]) -> np.ndarray:
    return preprocess(*args)


def main() -> None:
    mode, listing = sys.argv[1], sys.argv[2]
    with open(listing) as f:
        shards = [line.strip() for line in f if line.strip()]
    images = jpegs(shards)
    out = {"images": len(images), "pillow": PIL.__version__, "numpy": np.__version__}
    if mode in ("single", "single-full"):
        draft = mode == "single"
        preprocess(images[0], 0)  # warm-up: imports, first allocations
        cpu, wall = time.process_time(), time.perf_counter()
        for i, data in enumerate(images):
            preprocess(data, i, draft)
        out["cpu_s"] = time.process_time() - cpu
        out["wall_s"] = time.perf_counter() - wall
    else:
        processes, size = int(sys.argv[3]), int(sys.argv[4])
        with multiprocessing.get_context("fork").Pool(processes) as pool:
            pool.map(task, [(images[0], 0)] * processes)  # start the processes
            wall = time.perf_counter()
            batch, batches = [], 0
            for array in pool.imap(task, ((d, i) for i, d in enumerate(images)), chunksize=8):
                batch.append(array)
                if len(batch) == size:
                    np.stack(batch)
                    batch, batches = [], batches + 1
            if batch:
                np.stack(batch)
            out["wall_s"] = time.perf_counter() - wall
        out["processes"] = processes
        out["batch"] = size
    print(json.dumps(out))


if __name__ == "__main__":
    main()
