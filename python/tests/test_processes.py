"""Fork safety and pickling: a trainer that forks (PyTorch DataLoader workers)
neither hangs nor crashes, and readers travel to other processes by their
configuration."""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import threading

import pytest

import sluice


def read_ints(distributed) -> list[int]:
    return sorted(int(e) for e in distributed)


def child_reads(distributed, out) -> None:
    try:
        out.put(("ok", read_ints(distributed)))
    except BaseException as e:  # reported to the parent
        out.put(("error", repr(e)))


def test_a_forked_child_reads_after_the_parent_did(service):
    ds = sluice.Dataset.range(30)
    distributed = ds.distribute("dynamic", service.target)
    # The parent has a native client, a runtime with threads, open connections.
    assert read_ints(distributed) == list(range(30))
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=child_reads, args=(ds.distribute("dynamic", service.target), out))
    p.start()
    status, value = out.get(timeout=120)
    p.join(timeout=60)
    assert status == "ok", value
    assert value == list(range(30))
    assert p.exitcode == 0
    # And the parent still reads.
    assert read_ints(distributed) == list(range(30))


def test_children_forked_while_the_parent_reads_and_serves_all_read(service):
    # The parent serves (in-process dispatcher and workers) and reads on another
    # thread while it forks: every thread of its runtime may hold a lock at the
    # fork. Children must still build their own runtime and read. (With tokio's
    # parking_lot locks, about one fork in seven crashed in parking_lot::park.)
    stop = threading.Event()

    def keep_reading() -> None:
        while not stop.is_set():
            for _ in sluice.Dataset.range(200).distribute("parallel_epochs", service.target):
                pass

    reader = threading.Thread(target=keep_reading)
    reader.start()
    ctx = mp.get_context("fork")
    try:
        for i in range(8):
            out = ctx.Queue()
            p = ctx.Process(target=child_reads, args=(sluice.Dataset.range(20).distribute("dynamic", service.target), out))
            p.start()
            status, value = out.get(timeout=120)
            p.join(timeout=60)
            assert (status, value, p.exitcode) == ("ok", list(range(20)), 0), (i, status, value, p.exitcode)
    finally:
        stop.set()
        reader.join()


def child_uses_parents_reader(reader, out) -> None:
    try:
        next(reader)
        out.put("no error")
    except sluice.FailedPreconditionError as e:
        out.put(str(e))
    except BaseException as e:
        out.put(f"other: {e!r}")


def test_a_reader_made_before_fork_refuses_to_be_used_in_the_child(service):
    reader = iter(sluice.Dataset.range(5).distribute("dynamic", service.target))
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=child_uses_parents_reader, args=(reader, out))
    p.start()
    message = out.get(timeout=120)
    p.join(timeout=60)
    assert "cannot be used in process" in message and "fork" in message, message
    assert p.exitcode == 0, "the child exits normally: the inherited reader is leaked, not dropped"
    assert sorted(int(e) for e in reader) == list(range(5))


def test_a_distributed_dataset_pickles_by_configuration(service):
    distributed = sluice.Dataset.range(12).map("square").distribute(
        "distributed_epoch", service.target, job_name=None, max_outstanding_requests=4
    )
    copy = pickle.loads(pickle.dumps(distributed))
    assert copy.service == distributed.service and copy.dataset == distributed.dataset
    assert read_ints(copy) == [i * i for i in range(12)]
    # A fresh interpreter (spawn) reads it with its own native client.
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    p = ctx.Process(target=child_reads, args=(distributed, out))
    p.start()
    status, value = out.get(timeout=120)
    p.join(timeout=60)
    assert (status, value) == ("ok", [i * i for i in range(12)])


def test_servers_refuse_use_after_fork(service):
    d = sluice.DispatchServer()
    ctx = mp.get_context("fork")
    out = ctx.Queue()

    def stop_in_child() -> None:
        try:
            d.stop()
            out.put("stopped")
        except sluice.FailedPreconditionError as e:
            out.put(str(e))

    p = ctx.Process(target=stop_in_child)
    p.start()
    message = out.get(timeout=120)
    p.join(timeout=60)
    assert "cannot be used in process" in message, message
    # The parent's server is untouched and stops normally.
    assert sluice.register_dataset(d.target, sluice.Dataset.range(2), dataset_id="alive") == "alive"
    d.stop()
