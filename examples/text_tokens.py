"""A language-model input pipeline with the user's own Python on the workers: text
files → a pure-Python tokenizer → packed fixed-length token sequences → a training
loop (numpy only) reading them through ``distribute`` as int32 batches.

The pipeline, as the workers run it::

    text_lines(files)                 # Rust: one string element per line
      .map(tokenize)                  # Python: line -> (ids padded to MAX_LINE, length)
      .map_batches(pack, 64)          # Python: 64 lines -> rows of SEQ + 1 tokens
      .batch(BATCH, drop_remainder)   # Rust: [BATCH, SEQ + 1] tokens per step

``tokenize`` is a closure over a word vocabulary fitted on the trainer, shipped by
value (cloudpickle: nothing to install on the workers); ``pack`` concatenates the
lines of its batch and cuts them into rows of ``SEQ + 1`` tokens (inputs and the
next-token targets), dropping each batch's last partial row, as Hugging Face's
``group_texts`` does. The int32 rows ``pack`` returns stay int32 all the way (from
the worker's Python process to the trainer: 4 bytes a token, not 8), and the
trainer gets numpy int32 batches. The model is a bigram table trained by softmax
regression: its loss falls as it learns which word follows which.

Starts a dispatcher and two workers that run Python stages (``allow_python=True``)
in this process, and stops them at the end. Run from the repository root after
building the package (``maturin develop`` in python/)::

    python examples/text_tokens.py

``python -m sluice.bench python_stages`` times the same tokenizer here and in a
PyTorch ``DataLoader`` (it imports this file's functions).
"""

from __future__ import annotations

import collections
import pathlib
import tempfile
import time
from typing import Callable, Iterable

import numpy as np
import sluice

SPECIALS = ["<pad>", "<unk>", "<bos>", "<eos>"]
PAD, UNK, BOS, EOS = range(4)
MAX_LINE = 48  # tokens per line kept (longer lines are cut)
SEQ = 32  # tokens per training sequence (rows carry SEQ + 1: inputs and targets)
LINES_PER_PACK = 64
BATCH = 8
EPOCHS = 3


class WordTokenizer:
    """Lower-cased whitespace words → ids of a fixed vocabulary (``<unk>`` for the
    others), between ``<bos>`` and ``<eos>``."""

    def __init__(self, vocab: list[str]) -> None:
        self.vocab = vocab
        self.ids = {w: i for i, w in enumerate(vocab)}

    @classmethod
    def fit(cls, lines: Iterable[str], max_words: int = 1000) -> WordTokenizer:
        counts = collections.Counter(w for line in lines for w in line.lower().split())
        return cls(SPECIALS + [w for w, _ in counts.most_common(max_words)])

    def encode(self, text: str) -> list[int]:
        return [BOS, *(self.ids.get(w, UNK) for w in text.lower().split()), EOS]


def tokenize_with(tok: WordTokenizer) -> Callable[[bytes], tuple[np.ndarray, np.ndarray]]:
    """The ``map`` function: a line (``bytes``, as Sluice gives string scalars) →
    its ids padded to ``MAX_LINE`` and their number (a batch needs equal shapes)."""

    def tokenize(line: bytes) -> tuple[np.ndarray, np.ndarray]:
        ids = tok.encode(line.decode("utf-8"))[:MAX_LINE]
        padded = np.full(MAX_LINE, PAD, dtype=np.int32)
        padded[: len(ids)] = ids
        return padded, np.array(len(ids), dtype=np.int32)

    return tokenize


def pack(batch: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The ``map_batches`` function: a batch of lines (ids ``[n, MAX_LINE]``,
    lengths ``[n]``) → rows of ``SEQ + 1`` consecutive tokens, int32."""
    ids, lengths = batch
    stream = np.concatenate([row[:n] for row, n in zip(ids, lengths)])
    rows = len(stream) // (SEQ + 1)
    return stream[: rows * (SEQ + 1)].reshape(rows, SEQ + 1).astype(np.int32)


def pipeline(files: list[str], tok: WordTokenizer) -> sluice.Dataset:
    return (
        sluice.Dataset.text_lines(files)
        .map(tokenize_with(tok))
        .map_batches(pack, LINES_PER_PACK)
        .batch(BATCH, drop_remainder=True)
    )


SUBJECTS = ["the cat", "a dog", "my friend", "the old teacher", "a small bird", "our neighbour"]
VERBS = ["sees", "follows", "likes", "calls", "finds", "feeds"]
OBJECTS = ["the ball", "a red apple", "the garden", "her brother", "the river", "a tall tree"]
ENDINGS = ["in the morning", "after lunch", "every day", "near the house", "at night", ""]


def write_corpus(directory: pathlib.Path, files: int = 4, lines: int = 300) -> list[str]:
    """Synthetic English-like text (a seeded grammar), ``files`` files of ``lines``
    lines of one to three sentences."""
    rng = np.random.default_rng(7)
    names = []
    for f in range(files):
        path = directory / f"part-{f}.txt"
        with open(path, "w", encoding="utf-8") as out:
            for _ in range(lines):
                sentences = [
                    " ".join(
                        p
                        for p in (
                            SUBJECTS[rng.integers(len(SUBJECTS))],
                            VERBS[rng.integers(len(VERBS))],
                            OBJECTS[rng.integers(len(OBJECTS))],
                            ENDINGS[rng.integers(len(ENDINGS))],
                        )
                        if p
                    )
                    + " ."
                    for _ in range(int(rng.integers(1, 4)))
                ]
                out.write(" ".join(sentences) + "\n")
        names.append(str(path))
    return names


def train_step(weights: np.ndarray, batch: np.ndarray, lr: float = 2.0) -> float:
    """One step of softmax regression of the next token on the current one (a
    bigram model); returns the mean cross-entropy in nats."""
    x, y = batch[:, :-1].reshape(-1), batch[:, 1:].reshape(-1)
    logits = weights[x]
    logits = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(axis=1, keepdims=True)
    loss = float(-np.mean(np.log(probs[np.arange(len(y)), y])))
    probs[np.arange(len(y)), y] -= 1.0
    np.add.at(weights, x, -lr * probs / len(y))
    return loss


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        files = write_corpus(pathlib.Path(tmp))
        tok = WordTokenizer.fit(line for f in files for line in open(f, encoding="utf-8"))
        vocab = len(tok.vocab)
        print(f"corpus: {len(files)} files; vocabulary of {vocab} words")
        with sluice.DispatchServer() as d, sluice.WorkerServer(
            d.target, allow_python=True
        ), sluice.WorkerServer(d.target, allow_python=True):
            data = pipeline(files, tok).distribute("distributed_epoch", d.target, job_name="lm")
            weights = np.zeros((vocab, vocab), dtype=np.float64)
            first = last = 0.0
            for epoch in range(EPOCHS):
                start, tokens, losses, dtypes = time.perf_counter(), 0, [], set()
                for batch in data:  # each epoch: the job's next repetition
                    assert batch.shape == (BATCH, SEQ + 1), batch.shape
                    dtypes.add(str(batch.dtype))
                    assert int(batch.max()) < vocab
                    losses.append(train_step(weights, batch))
                    tokens += batch.size
                seconds = time.perf_counter() - start
                mean = float(np.mean(losses))
                first, last = (mean if epoch == 0 else first), mean
                print(
                    f"epoch {epoch}: {len(losses)} batches of {BATCH}x{SEQ + 1} "
                    f"{'/'.join(sorted(dtypes))} tokens, "
                    f"mean loss {mean:.3f}, {tokens / seconds:,.0f} tokens/s"
                )
            print(f"loss fell from {first:.3f} to {last:.3f}" if last < first else "no learning")


if __name__ == "__main__":
    main()
