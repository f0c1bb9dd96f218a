"""tf.data service's seed examples, written in Python: register then read,
distribute with OFF and DYNAMIC, a shared named job read by two consumers."""

from __future__ import annotations

import threading
from collections import Counter

import numpy as np
import pytest

import sluice


def ints(elements) -> list[int]:
    return [int(e) for e in elements]


def test_distribute_dynamic_reads_each_element_once(service):
    ds = sluice.Dataset.range(50).map("square")
    got = ints(ds.distribute(sluice.ShardingPolicy.DYNAMIC, service.target))
    assert sorted(got) == [i * i for i in range(50)]


def test_distribute_off_reads_the_dataset_once_per_worker(service):
    ds = sluice.Dataset.range(20)
    got = Counter(ints(ds.apply(sluice.distribute("parallel_epochs", service.target))))
    assert got == Counter({i: len(service.workers) for i in range(20)})


def test_register_then_read_by_id(service):
    ds = sluice.Dataset.range(10)
    dataset_id = sluice.register_dataset(service.target, ds)
    # Registering the same pipeline again gives the same id (it is derived from it).
    assert sluice.register_dataset(service.target, ds) == dataset_id
    read = sluice.from_dataset_id("distributed_epoch", service.target, dataset_id)
    assert sorted(ints(read)) == list(range(10))
    # An explicit id is kept.
    assert sluice.register_dataset(service.target, ds, dataset_id="mine") == "mine"
    assert sorted(ints(sluice.from_dataset_id("dynamic", service.target, "mine"))) == list(range(10))


def test_a_shared_named_job_gives_each_element_to_one_of_two_consumers(service):
    ds = sluice.Dataset.range(400)
    results: dict[int, list[int]] = {}
    errors: list[BaseException] = []

    def consume(i: int) -> None:
        try:
            read = ds.distribute("distributed_epoch", service.target, job_name="shared-two")
            results[i] = ints(read)
        except BaseException as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    both = results[0] + results[1]
    assert sorted(both) == list(range(400)), "each element exactly once across the two"


def test_the_service_accepts_address_forms(service):
    ds = sluice.Dataset.range(3)
    for form in (service.dispatcher.address, service.target, [service.target],
                 f" {service.dispatcher.address} ,", service.dispatcher):
        assert sorted(ints(ds.distribute("dynamic", form))) == [0, 1, 2], form


def test_batches_are_arrays_with_the_batch_dimension(service):
    # OFF: each worker batches the whole range, so every batch is full.
    got = list(sluice.Dataset.range(8).batch(4).distribute("parallel_epochs", service.target))
    assert sorted(a.tolist() for a in got) == [[0, 1, 2, 3]] * 2 + [[4, 5, 6, 7]] * 2
    assert all(a.dtype == np.int64 and a.shape == (4,) for a in got)
    # DYNAMIC: each worker batches the splits it got (tf.data service does the
    # same), so batches may be partial, but every element arrives once.
    got = list(sluice.Dataset.range(8).batch(4).distribute("dynamic", service.target))
    assert sorted(x for a in got for x in a.tolist()) == list(range(8))
    assert all(1 <= a.shape[0] <= 4 for a in got)


def test_iterating_a_named_job_again_reads_its_next_repetition(service):
    read = sluice.Dataset.range(5).distribute("dynamic", service.target, job_name="epochs")
    first, second = ints(read), ints(read)
    assert sorted(first) == sorted(second) == list(range(5))


def test_reader_next_returns_none_at_the_end_and_counts(service):
    reader = iter(sluice.Dataset.range(3).distribute("dynamic", service.target))
    got = []
    while (e := reader.next(timeout=60)) is not None:
        got.append(int(e))
    assert sorted(got) == [0, 1, 2]
    assert reader.elements == 3
    with pytest.raises(StopIteration):
        next(reader)


def test_status_shows_workers_datasets_and_job_progress(service):
    ds = sluice.Dataset.range(6)
    dataset_id = sluice.register_dataset(service.target, ds)
    assert len(ints(sluice.from_dataset_id("dynamic", service.target, dataset_id, job_name="seen"))) == 6
    s = sluice.status(service.target)
    assert s["from_leader"] is True and s["raft"]["role"] == "leader"
    assert sorted(w["address"] for w in s["workers"]) == sorted(w.address for w in service.workers)
    mine = [d for d in s["datasets"] if d["dataset_id"] == dataset_id]
    assert len(mine) == 1 and mine[0]["source_cardinality"] == 6, s["datasets"]
    # No tokens: no owner; the definition's size as the dispatcher holds it.
    assert mine[0]["owner"] is None and mine[0]["definition_bytes"] > 0, mine
    (job,) = [j for j in s["jobs"] if j["job_name"] == "seen"]
    assert job["mode"] == "dynamic" and job["dataset_id"] == dataset_id
    (it,) = job["iterations"]
    assert it["finished"] and it["split_cursor"] is not None
