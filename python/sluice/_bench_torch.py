"""The PyTorch side of ``python -m sluice.bench python_stages``: the tokenizer
example's tokenizer and packing (examples/text_tokens.py) in a
``DataLoader(num_workers=2)``, on this host. Run by the benchmark under an
interpreter with torch; prints ``{"tokens_per_second": ...}`` (the best of the
runs asked for).

Each loader process reads every other file, tokenizes its lines and packs them 64
lines at a time, as the Sluice pipeline does per call; the DataLoader collates
rows into ``[8, SEQ + 1]`` batches (``drop_last``)."""

from __future__ import annotations

import json
import sys
import time
from typing import Iterator

import numpy as np
import text_tokens as tt
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info


class Tokens(IterableDataset):  # type: ignore[type-arg]
    def __init__(self, files: list[str], tok: tt.WordTokenizer) -> None:
        self.files, self.tokenize = files, tt.tokenize_with(tok)

    def __iter__(self) -> Iterator[np.ndarray]:
        info = get_worker_info()
        mine = self.files[info.id :: info.num_workers] if info else self.files
        for name in mine:
            with open(name, "rb") as f:
                lines = [self.tokenize(line.rstrip(b"\n")) for line in f]
            for i in range(0, len(lines), tt.LINES_PER_PACK):
                chunk = lines[i : i + tt.LINES_PER_PACK]
                yield from tt.pack((np.stack([a for a, _ in chunk]), np.stack([n for _, n in chunk])))


def main(argv: list[str]) -> None:
    repeat, files = int(argv[0]), argv[1:]
    tok = tt.WordTokenizer.fit(line for f in files for line in open(f, encoding="utf-8"))
    loader = DataLoader(Tokens(files, tok), batch_size=tt.BATCH, drop_last=True, num_workers=2)
    best = 0.0
    for _ in range(repeat):
        started, tokens = time.perf_counter(), 0
        for batch in loader:
            assert batch.dtype == torch.int32
            tokens += batch.numel()
        best = max(best, tokens / (time.perf_counter() - started))
    print(json.dumps({"tokens_per_second": best}))


if __name__ == "__main__":
    main(sys.argv[1:])
