"""The framework adapters: ``sluice.jax.Iterator`` (Grain-style state),
``sluice.torch.IterableDataset`` (DataLoader, state_dict) and ``sluice.tf``.

The resume tests checkpoint a consumer of a named DYNAMIC job mid-epoch, stop it
and let a new consumer restore the checkpoint. The new one must continue the
same job and repetition: no element twice, and everything except what the
stopped consumer had in flight. That loss depends on timing, so the tests bound
it instead of measuring it, with a dataset big enough that the bound leaves a
non-empty rest (see ``LOSS_BOUND``).
"""

from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys
import textwrap
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pytest

import sluice
from sluice.jax import Iterator as JaxIterator

K = 128
"""int64 values per element of the resume tests' dataset: 1 KiB elements."""
SPLIT = 8 * K
"""The dispatcher's elements_per_split: a split is 8 whole elements."""
N = 10_000
"""Elements in the resume tests' epoch (10 MiB)."""
FIRST = 100
"""Elements the first consumer reads before its checkpoint."""
MAX_OUTSTANDING = 1
"""The readers' max_outstanding_requests: one task stream open at a time."""

LOSS_BOUND = 8 * 1024 * 1024 // 1024 + 1 + 7 * 64
"""The most elements a stopped reader can take with it (8641). It streams one
task at a time (``MAX_OUTSTANDING``); what left that task's buffer and was not
returned is (docs/guarantees.md L8):

* the task stream's HTTP/2 window, 8 MiB: elements are over 1 KiB, so at most
  8 MiB / 1 KiB + 1 of them have bytes in it;
* messages of at most 64 elements (the worker's bound): 2 in the worker's
  response channel, 1 being written, 1 being decoded by the reader, 1 waiting
  for room, ``MAX_OUTSTANDING`` = 1 in the reader's channel, 1 being handed out:
  7 * 64.

So the restored consumer gets at least N - FIRST - LOSS_BOUND = 1259 elements.
(Measured losses are 200 to 1,300: the bound is the HTTP/2 window, rarely full.)"""


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    """A dispatcher and two workers for this module; yields the service target.
    Its own (not conftest's shared one): its splits are SPLIT elements long."""
    dispatcher = sluice.DispatchServer(elements_per_split=SPLIT)
    workers = [sluice.WorkerServer(dispatcher.target) for _ in range(2)]
    try:
        yield dispatcher.target
    finally:
        for w in workers:
            w.stop()
        dispatcher.stop()


def big_epoch(target: str) -> sluice.DistributedDataset:
    """N elements of K int64s; element i is [i*K, (i+1)*K)."""
    return (
        sluice.Dataset.range(N * K)
        .batch(K)
        .distribute("distributed_epoch", target, max_outstanding_requests=MAX_OUTSTANDING)
    )


def element_ids(elements: Iterable[Any]) -> list[int]:
    """The index i of each element [i*K, (i+1)*K) (numpy arrays or tensors)."""
    out = []
    for e in elements:
        values = np.asarray(e)
        assert values.shape == (K,) and values[0] % K == 0, values
        assert int(values[-1]) == int(values[0]) + K - 1
        out.append(int(values[0]) // K)
    return out


def check_resumed(first: list[int], second: list[int]) -> None:
    """The restored consumer continued the same epoch: nothing twice, the rest
    delivered up to what the stopped consumer had in flight."""
    assert len(first) == FIRST
    assert len(set(first)) == len(first), "the first consumer read an element twice"
    assert len(set(second)) == len(second), "the restored consumer read an element twice"
    twice = set(first) & set(second)
    assert not twice, f"{len(twice)} elements read before and after the restore: it started over"
    assert len(second) >= N - FIRST - LOSS_BOUND, (len(second), "more lost than was in flight")
    assert set(first) | set(second) <= set(range(N))


def ints(elements: Iterable[Any]) -> list[int]:
    return [int(v) for e in elements for v in np.asarray(e).reshape(-1)]


def need_torch() -> Any:
    return pytest.importorskip(
        "torch", reason="torch is not installed in this environment (CI does not install it)"
    )


def loader_context() -> Any:
    """Loader processes forked from this process, PyTorch's default on Linux, while
    its in-process servers are busy: the case that crashed with tokio's
    parking_lot locks (docs/python.md, "Threads, signals, fork")."""
    return multiprocessing.get_context("fork")


# --- sluice.jax.Iterator ---------------------------------------------------------


def test_jax_iterator_resumes_a_dynamic_epoch_from_its_state(target):
    dd = big_epoch(target)
    first_it = JaxIterator(dd)
    first = element_ids(x for _, x in zip(range(FIRST), first_it))
    state = first_it.get_state()
    first_it.close()

    assert state["job_name"].startswith("jax-"), "an unnamed job gets a generated name"
    assert state["job_name"] == first_it.job_name
    assert (state["repetition"], state["elements_consumed"]) == (0, FIRST)
    assert state["service"] == [target.removeprefix("grpc://")]
    assert state["dataset_id"] == dd._registered_id()
    state = json.loads(json.dumps(state))  # as a checkpoint stores it

    second_it = JaxIterator(dd)  # would read its own, new job
    second_it.set_state(state)
    second = element_ids(second_it)
    check_resumed(first, second)
    after = second_it.get_state()
    assert (after["repetition"], after["elements_consumed"]) == (1, 0), "the epoch ended"


def test_jax_iterator_reads_one_repetition_per_epoch(target):
    dd = sluice.Dataset.range(50).distribute("distributed_epoch", target, job_name="jax-epochs")
    it = JaxIterator(dd, num_epochs=2)
    got = Counter(ints(it))
    # Repetition 0 then 1 of the job: every element once per epoch.
    assert got == Counter({i: 2 for i in range(50)})
    assert it.get_state()["repetition"] == 2
    # A second iterator of the same named job and repetitions finds them read.
    assert list(JaxIterator(dd, num_epochs=2)) == []


def test_jax_iterator_refuses_the_state_of_another_dataset(target):
    state = JaxIterator(sluice.Dataset.range(5).distribute("dynamic", target)).get_state()
    other = JaxIterator(sluice.Dataset.range(6).distribute("dynamic", target))
    with pytest.raises(sluice.InvalidArgumentError, match="state is of dataset"):
        other.set_state(state)
    with pytest.raises(sluice.InvalidArgumentError, match="missing"):
        other.set_state({"job_name": "x"})


def test_jax_module_works_without_jax():
    # `jax` made unimportable: sluice.jax must not need it.
    code = "import sys; sys.modules['jax'] = None; import sluice.jax; print(sluice.jax.Iterator)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert "Iterator" in out.stdout


# --- sluice.torch.IterableDataset ------------------------------------------------


def test_torch_tensors_keep_structure_share_memory_and_leave_bytes(target):
    torch = need_torch()
    from sluice.torch import to_torch

    array = next(iter(sluice.Dataset.range(8).batch(4).distribute("distributed_epoch", target)))
    assert not array.flags.writeable
    tensor = to_torch(array)
    assert isinstance(tensor, torch.Tensor) and tensor.tolist() == array.tolist()
    assert tensor.data_ptr() == array.ctypes.data, "converted with a copy"

    names = np.array([b"a", b"bc"], dtype=object)
    element = {"x": (array, b"raw"), "names": names}
    converted = to_torch(element)
    assert isinstance(converted, dict) and set(converted) == {"x", "names"}
    assert isinstance(converted["x"], tuple)
    assert converted["x"][0].data_ptr() == array.ctypes.data
    assert converted["x"][1] == b"raw"
    assert converted["names"] is names

    copied = to_torch(array, copy=True)
    assert copied.data_ptr() != array.ctypes.data
    copied += 1  # a copy may be written
    assert copied.tolist() == [v + 1 for v in array.tolist()]


def test_torch_conversion_of_read_only_arrays_does_not_warn(target):
    need_torch()
    # A fresh process: PyTorch warns once per process, so only a first conversion shows it.
    code = textwrap.dedent(
        f"""
        import warnings, sys
        warnings.simplefilter("error")
        import sluice
        from sluice.torch import IterableDataset
        dd = sluice.Dataset.range(8).batch(4).distribute("distributed_epoch", {target!r})
        got = [t.tolist() for t in IterableDataset(dd)]
        print(sorted(got))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[[0, 1, 2, 3], [4, 5, 6, 7]]"


def test_torch_dataloader_resumes_a_dynamic_epoch_from_state_dict(target):
    torch = need_torch()
    from sluice.torch import IterableDataset

    ds = IterableDataset(big_epoch(target))
    batches = iter(torch.utils.data.DataLoader(ds, batch_size=None, num_workers=0))
    first = element_ids(next(batches) for _ in range(FIRST))
    state = ds.state_dict()
    ds.close()  # the process stops here; only `state` survives
    assert state["job_name"].startswith("torch-")
    assert (state["repetition"], state["elements_consumed"]) == (0, FIRST)

    resumed = IterableDataset(big_epoch(target))
    resumed.load_state_dict(json.loads(json.dumps(state)))
    second = element_ids(torch.utils.data.DataLoader(resumed, batch_size=None, num_workers=0))
    check_resumed(first, second)
    assert resumed.state_dict()["repetition"] == 1


def test_torch_stateful_dataloader_resumes_a_dynamic_epoch(target):
    need_torch()
    stateful = pytest.importorskip(
        "torchdata.stateful_dataloader",
        reason="torchdata is not installed in this environment (CI does not install it)",
    )
    from sluice.torch import IterableDataset

    loader = stateful.StatefulDataLoader(IterableDataset(big_epoch(target)), batch_size=None)
    batches = iter(loader)
    first = element_ids(next(batches) for _ in range(FIRST))
    checkpoint = loader.state_dict()
    del batches, loader

    loader = stateful.StatefulDataLoader(IterableDataset(big_epoch(target)), batch_size=None)
    loader.load_state_dict(checkpoint)
    check_resumed(first, element_ids(loader))


def test_torch_each_iter_reads_the_next_repetition(target):
    need_torch()
    from sluice.torch import IterableDataset

    ds = IterableDataset(sluice.Dataset.range(30), "distributed_epoch", target)
    assert sorted(ints(ds)) == list(range(30))  # repetition 0
    assert sorted(ints(ds)) == list(range(30))  # repetition 1, not the finished 0
    ds.set_epoch(0)
    assert list(ds) == [], "repetition 0 of the job was read already"


def test_torch_loader_processes_share_a_dynamic_job(target):
    torch = need_torch()
    from sluice.torch import IterableDataset

    # 4 splits of SPLIT elements, spread over both workers.
    ds = IterableDataset(sluice.Dataset.range(4 * SPLIT).batch(64), "distributed_epoch", target)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, timeout=120, multiprocessing_context=loader_context()
    )
    for epoch in range(2):
        ds.set_epoch(epoch)  # the loader processes are new copies each epoch
        got = Counter(ints(loader))
        # Both processes consume one job: each element once, none missing.
        assert got == Counter(range(4 * SPLIT)), f"epoch {epoch}"


def test_torch_loader_processes_each_read_an_off_job_whole(target):
    torch = need_torch()
    from sluice.torch import IterableDataset

    ds = IterableDataset(sluice.Dataset.range(100), "parallel_epochs", target)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=2, timeout=120, multiprocessing_context=loader_context()
    )
    got = Counter(ints(loader))
    # Each of 2 loader processes reads every worker's copy (2): 4 of each. One
    # shared OFF job would give 2 (its copies split between the processes).
    assert got == Counter({i: 4 for i in range(100)})


# --- sluice.tf -------------------------------------------------------------------


def test_tf_to_dataset_derives_the_signature_and_reads_each_epoch(target):
    tf = pytest.importorskip(
        "tensorflow",
        reason="tensorflow is not installed in this environment (CI does not install it)",
    )
    from sluice.tf import to_dataset

    dd = sluice.Dataset.range(10).batch(4).distribute("distributed_epoch", target, job_name="tf")
    ds = to_dataset(dd)
    assert ds.element_spec == tf.TensorSpec(shape=(None,), dtype=tf.int64)
    for _ in range(2):  # repetition 0, then 1
        assert sorted(ints(ds.as_numpy_iterator())) == list(range(10))

    pairs = sluice.Dataset.from_tensor_slices([b"ab", b"cde"]).enumerate()
    ds = to_dataset(pairs.distribute("distributed_epoch", target))
    assert ds.element_spec == (tf.TensorSpec((), tf.int64), tf.TensorSpec((), tf.string))
    assert sorted(ds.as_numpy_iterator()) == [(0, b"ab"), (1, b"cde")]


def test_tf_to_dataset_without_tensorflow_names_the_package(monkeypatch, target):
    from sluice.tf import to_dataset

    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if not installed
    dd = sluice.Dataset.range(3).distribute("distributed_epoch", target)
    with pytest.raises(ImportError, match="pip install tensorflow-cpu"):
        to_dataset(dd)


# --- exactly-once in PyTorch's DataLoader (issue 31, defect 9) -------------------

EXACT_N = 4 * SPLIT
"""Elements of the exactly-once loader tests: 4 splits, spread over both workers,
read in batches of EXACT_BATCH (256 loader items)."""
EXACT_BATCH = 16
LOADER_TIMEOUT = 60
"""Seconds the loader waits for one element: the deadline that turns the hang
the tests guard against (an epoch that never ends) into a failure."""


def exactly_once_loader_dataset(target: str, job_name: str) -> Any:
    from sluice.torch import IterableDataset

    ds = sluice.Dataset.range(EXACT_N).batch(EXACT_BATCH).distribute(
        "distributed_epoch", target, job_name=job_name, exactly_once=True
    )
    return IterableDataset(ds)


@pytest.mark.parametrize("in_order", [True, False], ids=["in_order", "any_order"])
@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_torch_loader_reads_an_exactly_once_epoch_once_and_it_ends(target, num_workers, in_order):
    torch = need_torch()
    ds = exactly_once_loader_dataset(target, f"eo-loader-{num_workers}-{in_order}")
    context = loader_context() if num_workers else None
    loader = torch.utils.data.DataLoader(
        ds, batch_size=None, num_workers=num_workers, in_order=in_order,
        timeout=LOADER_TIMEOUT if num_workers else 0, multiprocessing_context=context,
    )
    for epoch in range(2):
        ds.set_epoch(epoch)
        # The loop ends: the epoch's end does not wait on another loader process.
        got = Counter(ints(loader))
        assert got == Counter(range(EXACT_N)), f"epoch {epoch}: not each element once"


def dataset_states(checkpoint: Any) -> list[dict[str, Any]]:
    """The sluice states (one per loader process) inside a StatefulDataLoader checkpoint."""
    if isinstance(checkpoint, dict):
        if "job_name" in checkpoint and "repetition" in checkpoint:
            return [checkpoint]
        return [s for v in checkpoint.values() for s in dataset_states(v)]
    return []


@pytest.mark.parametrize("in_order", [True, False], ids=["in_order", "any_order"])
@pytest.mark.parametrize("step", [31, 30])
def test_torch_stateful_loader_restores_an_exactly_once_epoch_from_any_step(target, step, in_order):
    need_torch()
    stateful = pytest.importorskip(
        "torchdata.stateful_dataloader",
        reason="torchdata is not installed in this environment (CI does not install it)",
    )
    job = f"eo-restore-{step}-{in_order}"

    def loader() -> Any:
        return stateful.StatefulDataLoader(
            exactly_once_loader_dataset(target, job), batch_size=None, num_workers=2,
            in_order=in_order, timeout=LOADER_TIMEOUT, multiprocessing_context=loader_context(),
        )

    first_loader = loader()
    batches = iter(first_loader)
    first = ints(next(batches) for _ in range(step))
    checkpoint = json.loads(json.dumps(first_loader.state_dict()))  # as a checkpoint stores it
    del batches, first_loader  # the loader processes stop, holding prefetched elements

    states = dataset_states(checkpoint)
    assert len(states) == 2, "one state per loader process"
    merged = sluice.merge_states(states)  # the recipe for several consumers: not refused
    assert merged["position"] is not None and merged["elements_consumed"] == step

    resumed = loader()
    resumed.load_state_dict(checkpoint)
    second = ints(resumed)  # ends: the epoch is over once the rest is read
    got = Counter(first) + Counter(second)
    assert got == Counter(range(EXACT_N)), (
        f"{sum(v - 1 for v in got.values())} read twice, "
        f"{EXACT_N - len(got)} missing after a restore at step {step}"
    )
