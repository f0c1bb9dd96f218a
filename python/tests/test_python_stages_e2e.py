"""Python stages end to end (docs/python-stages.md): a real dispatcher and workers
started with ``allow_python=True`` in this process, each running its pool of
Python processes; pipelines with the user's functions, by reference and by value,
read through ``distribute``. Every result is compared with the same function
applied in plain Python to the same elements."""

from __future__ import annotations

import os
import pathlib
from typing import Any, Callable, Iterator

import numpy as np
import pytest
import stage_fns

import sluice
from conftest import Service
from sluice import Dataset

N = 100

@pytest.fixture(scope="module")
def py_service() -> Iterator[Service]:
    # WorkerServer gives its Python processes this process's sys.path, so the
    # by-reference functions of stage_fns (in this directory) import there.
    s = Service(workers=2, worker_args={"allow_python": True, "python_processes": 1})
    yield s
    s.stop()


def element(i: int) -> np.ndarray:
    """Element ``i`` of ``Dataset.range`` as a function receives it: a 0-d int64 array."""
    return np.array(i, dtype=np.int64)


def read(ds: Dataset, service: Service) -> list[int]:
    """Every element of one DYNAMIC epoch (each element read once by whichever
    worker got its split), as sorted ints."""
    return sorted(int(e) for e in ds.distribute("distributed_epoch", service.target))


PLAIN: dict[str, tuple[Callable[[Dataset], Dataset], Callable[[int], list[int]]]] = {
    "map": (
        lambda ds: ds.map("stage_fns:double"),
        lambda i: [int(stage_fns.double(element(i)))],
    ),
    "filter": (
        lambda ds: ds.filter("stage_fns:is_even"),
        lambda i: [i] if stage_fns.is_even(element(i)) else [],
    ),
    "flat_map": (
        lambda ds: ds.flat_map("stage_fns:repeat_self"),
        lambda i: [int(e) for e in stage_fns.repeat_self(element(i))],
    ),
    "map_batches": (
        lambda ds: ds.map_batches("stage_fns:square_batch", 8),
        lambda i: [int(v) for v in stage_fns.square_batch(np.array([i], dtype=np.int64))],
    ),
}


@pytest.mark.parametrize("op", sorted(PLAIN))
def test_each_op_by_reference_equals_plain_python(op: str, py_service: Service) -> None:
    build, plain = PLAIN[op]
    expected = sorted(v for i in range(N) for v in plain(i))
    assert read(build(Dataset.range(N)), py_service) == expected


@pytest.mark.parametrize("op", ["map", "filter", "flat_map"])
def test_each_op_by_value_equals_plain_python(op: str, py_service: Service) -> None:
    fns: dict[str, Callable[[Any], Any]] = {
        "map": lambda x: x * 3 + 1,
        "filter": lambda x: int(x) % 3 == 0,
        "flat_map": lambda x: [x, x + 1000],
    }
    fn = fns[op]
    out = [fn(element(i)) for i in range(N)]
    if op == "map":
        expected = sorted(int(v) for v in out)
    elif op == "filter":
        expected = [i for i in range(N) if out[i]]
    else:
        expected = sorted(int(v) for vs in out for v in vs)
    assert read(getattr(Dataset.range(N), op)(fn), py_service) == expected


def test_a_closure_and_built_in_stages_around_it(py_service: Service) -> None:
    offset = np.int64(7)
    ds = Dataset.range(N).map("square").map(lambda x: x - offset).filter("mod_eq", 2, 0)
    expected = sorted(i * i - 7 for i in range(N) if (i * i - 7) % 2 == 0)
    assert read(ds, py_service) == expected


def test_a_function_of_a_module_the_workers_cannot_import_runs_by_value(
    tmp_path: pathlib.Path, py_service: Service
) -> None:
    (tmp_path / "users_tok.py").write_text(
        "def scale(x):\n    return x * 100\n\ndef tokenize(x):\n    return scale(x) + 5\n"
    )
    with stage_fns.module_from_file(tmp_path / "users_tok.py") as module:
        ds = Dataset.range(N).map(module.tokenize)
    assert read(ds, py_service) == [i * 100 + 5 for i in range(N)]


def test_map_batches_gets_and_gives_a_dict_of_columns(py_service: Service) -> None:
    x = np.arange(N, dtype=np.int64)

    def add_columns(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        assert isinstance(batch, dict) and batch["x"].ndim == 1 and len(batch["x"]) <= 16
        return {"sum": batch["x"] + batch["y"], "x": batch["x"]}

    ds = Dataset.from_tensor_slices({"x": x, "y": 10 * x}).map_batches(add_columns, 16)
    read_rows = ds.distribute("distributed_epoch", py_service.target)
    rows = sorted((int(e["x"]), int(e["sum"])) for e in read_rows)
    assert rows == [(i, 11 * i) for i in range(N)]


def test_dynamic_sharding_reads_every_element_exactly_once(py_service: Service) -> None:
    ds = Dataset.range(400).map(lambda x: (x, np.int64(os.getpid())))
    seen = [int(e[0]) for e in ds.distribute("distributed_epoch", py_service.target)]
    assert sorted(seen) == list(range(400))  # none lost, none twice


def test_an_exception_reaches_the_reader_with_its_traceback(py_service: Service) -> None:
    ds = Dataset.range(20).map("stage_fns:fails_on_sevens")
    with pytest.raises(sluice.UserFunctionError) as caught:
        read(ds, py_service)
    e = caught.value
    assert "ValueError" in str(e) and "is unlucky" in str(e) and "stages[1]" in str(e)
    assert (e.stage, e.op, e.function, e.error_type) == (
        "stages[1]",
        "map",
        "stage_fns:fails_on_sevens",
        "ValueError",
    )
    assert e.worker in {w.address for w in py_service.workers}
    assert "stage_fns.py" in e.traceback
    assert 'raise ValueError(f"element {int(x)} is unlucky")' in e.traceback


def test_a_lambdas_exception_names_it_and_its_line(py_service: Service) -> None:
    def explode(x: Any) -> Any:
        raise KeyError(f"no key for {int(x)}")  # this line

    with pytest.raises(sluice.UserFunctionError) as caught:
        read(Dataset.range(5).map(explode), py_service)
    assert "KeyError" in str(caught.value)
    assert 'raise KeyError(f"no key for {int(x)}")  # this line' in caught.value.traceback


def test_ignore_errors_skips_the_failing_elements(py_service: Service) -> None:
    ds = Dataset.range(N).map("stage_fns:fails_on_sevens").ignore_errors()
    expected = sorted(i + 1 for i in range(N) if i % 7 != 3)
    assert read(ds, py_service) == expected


def test_a_job_with_a_python_stage_is_refused_by_workers_without_python() -> None:
    plain = Service(workers=2)  # workers without allow_python
    try:
        # The refusal names the workers registered when the job is made.
        plain.wait_for_workers()
        ds = Dataset.range(10).map("square").map(stage_fns.double)
        with pytest.raises(sluice.SluiceError, match=r"stages\[2\]") as caught:
            list(ds.distribute("distributed_epoch", plain.target))
        # Refused by the dispatcher when the job is made, which names each worker
        # (not a task failing on a worker without Python).
        message = str(caught.value)
        assert "--allow-python" in message
        assert all(f"{w.address} runs no Python stages" in message for w in plain.workers)
        # A pipeline without Python stages still runs there.
        rest = Dataset.range(5).distribute("distributed_epoch", plain.target)
        assert sorted(int(e) for e in rest) == [0, 1, 2, 3, 4]
    finally:
        plain.stop()


def test_int32_crosses_a_python_stage_as_int32(py_service: Service) -> None:
    """An int32 column of ``from_tensor_slices`` reaches the function as numpy int32,
    and an int32 result reaches the reader as numpy int32 (not widened to int64)."""
    tokens = (np.arange(12).reshape(4, 3) - 2**31).astype(np.int32)

    def shift(x: np.ndarray) -> np.ndarray:
        assert x.dtype == np.int32, x.dtype  # fails the element if widened on the way in
        return (x + 1).astype(np.int32)

    got = list(
        Dataset.from_tensor_slices(tokens).map(shift).distribute(
            "distributed_epoch", py_service.target
        )
    )
    assert all(isinstance(g, np.ndarray) and g.dtype == np.int32 for g in got), got
    assert sorted(g.tolist() for g in got) == sorted((tokens + 1).tolist())
    # A function that makes int32 from int64 input returns int32 too.
    made = list(
        Dataset.range(5).map(lambda x: np.full(2, x, dtype=np.int32)).distribute(
            "distributed_epoch", py_service.target
        )
    )
    assert sorted(m.tolist() for m in made) == [[i, i] for i in range(5)]
    assert {m.dtype for m in made} == {np.dtype(np.int32)}
