"""Sluice: a fault-tolerant input-data service for ML training, from Python.

tf.data service's API over Sluice's Rust client and servers::

    import sluice

    with sluice.DispatchServer() as d, sluice.WorkerServer(d.target):
        ds = sluice.Dataset.range(10).map("square")
        for x in ds.distribute("distributed_epoch", d.target):
            print(int(x))

Elements arrive as read-only numpy arrays over the received bytes (no copy), a
tuple or a dict of them; ``string`` tensors as ``bytes``. Framework adapters:
``sluice.torch``, ``sluice.jax``, ``sluice.tf`` (each imports its framework only
when used). See docs/python.md.
"""

from sluice import admin, errors
from sluice._functions import by_reference
from sluice._native import Reader, TensorData, __version__
from sluice._state import merge_states
from sluice.dataset import AUTOTUNE, SHARD_HINT, Dataset
from sluice.distribute import (
    CrossTrainerCache,
    DistributedDataset,
    ShardingPolicy,
    distribute,
    from_dataset_id,
    merge_positions,
    register_dataset,
    status,
)
from sluice.errors import *  # noqa: F403  (the exception classes)
from sluice.metrics import metrics_text, serve_metrics
from sluice.servers import DispatchServer, Quorum, WorkerServer, start_quorum
from sluice.tracing import configure_tracing, flush_tracing

__all__ = [
    "Dataset",
    "by_reference",
    "AUTOTUNE",
    "SHARD_HINT",
    "DistributedDataset",
    "Reader",
    "TensorData",
    "ShardingPolicy",
    "CrossTrainerCache",
    "distribute",
    "register_dataset",
    "status",
    "from_dataset_id",
    "merge_positions",
    "merge_states",
    "DispatchServer",
    "WorkerServer",
    "Quorum",
    "start_quorum",
    "serve_metrics",
    "metrics_text",
    "errors",
    "configure_tracing",
    "flush_tracing",
    "admin",
    "__version__",
    *errors.__all__,
]
