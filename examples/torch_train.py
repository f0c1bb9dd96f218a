"""Trains a tiny linear model with PyTorch on a DYNAMIC Sluice job, and resumes
the input mid-epoch from a checkpoint.

Starts a whole service in this process (three dispatchers of one Raft group and
two workers), reads a pipeline through ``sluice.torch.IterableDataset`` and a
``DataLoader``, fits ``y = 3x + 2`` for a few epochs, prints the loss, and stops
the servers. In the middle of epoch 1 it saves ``state_dict()`` (model and
input), drops the loader as a crashed trainer would, and continues from the
checkpoint with new objects: the rest of the epoch comes from the same job, no
example twice. Needs ``pip install torch``; run from the repository root after
building the package (``maturin develop`` in python/)::

    python examples/torch_train.py
"""

from __future__ import annotations

from statistics import mean
from typing import Any

import sluice
import sluice.torch
import torch

N = 1024  # examples per epoch (each one split: a replicated dispatcher write)
BATCH = 16
EPOCHS = 3
CHECKPOINT_AT = (1, 4)  # (epoch, step) where the trainer "crashes"


def train_step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, batch: torch.Tensor
) -> float:
    """One SGD step on a batch of ints; returns the loss."""
    # The tensor views Sluice's buffer (no copy): read it, never modify it in
    # place. `.to` and `/` make new tensors.
    x = (batch.to(torch.float32) / N).unsqueeze(1)
    y = 3.0 * x + 2.0
    loss = torch.nn.functional.mse_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return float(loss.item())


def report(epoch: int, ids: list[int], losses: list[float]) -> None:
    """Prints an epoch's examples and loss; checks that none came twice."""
    assert len(ids) == len(set(ids)), f"epoch {epoch} saw an example twice"
    lost = N - len(ids)
    print(
        f"epoch {epoch}: {len(ids)} examples, none twice, {lost} lost, mean loss {mean(losses):.5f}"
    )


def main() -> None:
    with sluice.start_quorum(3) as quorum, sluice.WorkerServer(quorum), sluice.WorkerServer(quorum):
        # Batches of 16 shuffled ints; the two workers split the epoch between
        # them, each split (one int) going to exactly one of them.
        pipeline = sluice.Dataset.range(N).shuffle(256, seed=1).batch(BATCH)
        data = sluice.torch.IterableDataset(pipeline, "distributed_epoch", quorum.target)
        # batch_size=None: the pipeline batches. Loader processes
        # (num_workers > 0) would share the same DYNAMIC job; see sluice.torch.
        loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=0)

        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
        ids: list[int] = []  # the examples of the current epoch
        losses: list[float] = []
        checkpoint: dict[str, Any] = {}
        for epoch in range(EPOCHS):
            data.set_epoch(epoch)  # epoch k reads repetition k of the job
            ids, losses = [], []
            for step, batch in enumerate(loader):
                losses.append(train_step(model, optimizer, batch))
                ids.extend(batch.tolist())
                if (epoch, step) == CHECKPOINT_AT:
                    checkpoint = {"model": model.state_dict(), "data": data.state_dict()}
                    break  # the trainer "crashes" here
            if checkpoint:
                break
            report(epoch, ids, losses)
        print(f"checkpoint after {len(ids)} examples of epoch {epoch}: {checkpoint['data']}")
        data.close()  # its buffered batches are gone, as in a crash

        # A new trainer: new objects, state from the checkpoint.
        model.load_state_dict(checkpoint["model"])
        data = sluice.torch.IterableDataset(pipeline, "distributed_epoch", quorum.target)
        data.load_state_dict(checkpoint["data"])
        loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=0)
        for epoch in range(CHECKPOINT_AT[0], EPOCHS):
            # The first iteration rejoins the checkpointed epoch; the next ones follow.
            for batch in loader:
                losses.append(train_step(model, optimizer, batch))
                ids.extend(batch.tolist())
            report(epoch, ids, losses)
            ids, losses = [], []
        w, b = model.weight.item(), model.bias.item()
        print(f"learned y = {w:.2f}x + {b:.2f} (job {data.job_name})")
    print("servers stopped")


if __name__ == "__main__":
    main()
