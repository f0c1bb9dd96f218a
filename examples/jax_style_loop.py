"""A JAX-style training loop (numpy only) over a DYNAMIC Sluice job, with a
checkpoint and a restore in the middle of an epoch.

``sluice.jax.Iterator`` is shaped like Grain's iterators: elements are numpy
arrays (what ``jax.device_put`` and jitted functions take), ``get_state()``
returns a JSON-able dict to store beside the model (e.g. with Orbax), and
``set_state()`` on a new iterator rejoins the same job and epoch. JAX itself is
not needed, so the model here is plain numpy: ``y = 3x + 2`` by gradient descent.

The restored epoch continues from the dispatcher's split cursor: no example twice.
What the crashed reader had received or had on its way is lost; how much depends
on how far the workers were ahead. This toy's batches are 128 bytes, so the 8 MiB
HTTP/2 window of a task stream can hold the rest of an epoch: a checkpoint later
in the epoch (``CHECKPOINT_AT``) may lose most of what was left. With real
batches (MiBs each) it is a few batches.

Starts three dispatchers of one Raft group and two workers in this process, and
stops them at the end. Run from the repository root after building the package
(``maturin develop`` in python/)::

    python examples/jax_style_loop.py
"""

from __future__ import annotations

import json

import numpy as np
import sluice
from sluice.jax import Iterator

N = 1024  # examples per epoch (each one split: a replicated dispatcher write)
BATCH = 16
EPOCHS = 3
CHECKPOINT_AT = (1, 4)  # (epoch, step): where the "crash" happens


def train_step(params: dict[str, float], batch: np.ndarray, lr: float = 0.5) -> float:
    """One gradient step of mean squared error; returns the loss."""
    x = batch.astype(np.float32) / N  # a new array: Sluice's is read-only
    y = 3.0 * x + 2.0
    err = params["w"] * x + params["b"] - y
    params["w"] -= lr * float(np.mean(2 * err * x))
    params["b"] -= lr * float(np.mean(2 * err))
    return float(np.mean(err**2))


def main() -> None:
    with sluice.start_quorum(3) as quorum, sluice.WorkerServer(quorum), sluice.WorkerServer(quorum):
        data = (
            sluice.Dataset.range(N)
            .shuffle(256, seed=1)
            .batch(BATCH)
            .distribute("distributed_epoch", quorum.target, max_outstanding_requests=1)
        )
        params = {"w": 0.0, "b": 0.0}
        it = Iterator(data, num_epochs=EPOCHS)
        seen: dict[int, list[int]] = {}  # epoch -> example ids, to check the resume
        losses: dict[int, list[float]] = {}  # epoch -> loss of each step
        checkpoint = None
        for batch in it:
            epoch = it.repetition
            losses.setdefault(epoch, []).append(train_step(params, batch))
            seen.setdefault(epoch, []).extend(int(v) for v in batch)
            if (epoch, len(seen[epoch]) // BATCH) == CHECKPOINT_AT:
                # Save the input position with the model, as a real loop would.
                checkpoint = json.dumps({"params": params, "data": it.get_state()})
                print(f"checkpoint at epoch {epoch}, step {CHECKPOINT_AT[1]}: {it.get_state()}")
                it.close()  # the trainer "crashes": its reader and its buffer are gone
                break
        assert checkpoint is not None

        # A new trainer restores the model and the input position.
        restored = json.loads(checkpoint)
        params = restored["params"]
        it = Iterator(data, num_epochs=EPOCHS)
        it.set_state(restored["data"])
        print(f"restored: rejoining job {it.job_name}, repetition {it.repetition}")
        for batch in it:
            epoch = it.repetition
            losses.setdefault(epoch, []).append(train_step(params, batch))
            seen.setdefault(epoch, []).extend(int(v) for v in batch)

        for epoch, ids in sorted(seen.items()):
            assert len(ids) == len(set(ids)), f"epoch {epoch} saw an example twice"
            mean_loss = float(np.mean(losses[epoch]))
            print(
                f"epoch {epoch}: {len(ids)} of {N} examples, none twice, mean loss {mean_loss:.5f}"
            )
        lost = N - len(seen[CHECKPOINT_AT[0]])
        print(f"lost in the crash: {lost} examples (the reader's buffer and what was in flight)")
        print(f"learned y = {params['w']:.2f}x + {params['b']:.2f}")
    print("servers stopped")


if __name__ == "__main__":
    main()
