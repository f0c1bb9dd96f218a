"""Python stages in the spec (docs/python-stages.md, section 1): what
``Dataset.map(fn)`` and friends write, checked against the Rust parser's round
trip, and the errors a bad function gives at the call. No worker runs here; the
end-to-end tests are in test_python_stages_e2e.py."""

from __future__ import annotations

import base64
import functools
import json
import pathlib
import platform
import subprocess
import sys
import textwrap
import types
from typing import Any

import cloudpickle
import numpy as np
import pytest
import stage_fns

import sluice
from sluice import Dataset, _native


def last(ds: Dataset) -> dict[str, Any]:
    return ds.to_dict()["stages"][-1]


def canonical(ds: Dataset) -> dict[str, Any]:
    return json.loads(_native.canonical_spec(ds.to_json()))


def unpickled(stage: dict[str, Any]) -> Any:
    return cloudpickle.loads(base64.b64decode(stage["python"]["fn"]["pickle"]["data"]))


VERSION = platform.python_version()


def test_a_reference_is_written_as_it_is_with_the_clients_python_version() -> None:
    ds = Dataset.range(4).map("stage_fns:double")
    assert last(ds) == {
        "python": {"op": "map", "fn": {"ref": "stage_fns:double"}, "python": VERSION}
    }
    assert canonical(ds) == ds.to_dict()


def test_a_callable_is_pickled_by_value_and_comes_back_callable() -> None:
    offset = 5
    ds = Dataset.range(4).map(lambda x: x + offset)
    stage = last(ds)["python"]
    assert (stage["op"], stage["python"], stage["fn"]["pickle"]["name"]) == (
        "map",
        VERSION,
        "test_a_callable_is_pickled_by_value_and_comes_back_callable.<locals>.<lambda>",
    )
    assert unpickled(last(ds))(np.int64(1)) == 6
    assert canonical(ds) == ds.to_dict()


@pytest.mark.parametrize("op", ["map", "filter", "flat_map"])
def test_each_op_writes_a_python_stage(op: str) -> None:
    ds = getattr(Dataset.range(4), op)("stage_fns:is_even")
    assert last(ds) == {"python": {"op": op, "fn": {"ref": "stage_fns:is_even"}, "python": VERSION}}
    assert canonical(ds) == ds.to_dict()
    by_value = getattr(Dataset.range(4), op)(stage_fns.is_even)
    assert last(by_value)["python"]["op"] == op
    assert canonical(by_value) == by_value.to_dict()


def test_map_options_are_written_only_when_not_the_default() -> None:
    ds = Dataset.range(4).map(
        "stage_fns:double", num_parallel_calls=sluice.AUTOTUNE, deterministic=False, retries=1
    )
    assert last(ds)["python"] == {
        "op": "map",
        "fn": {"ref": "stage_fns:double"},
        "python": VERSION,
        "num_parallel_calls": 0,
        "deterministic": False,
        "retries": 1,
    }
    assert canonical(ds) == ds.to_dict()
    plain = Dataset.range(4).map("stage_fns:double", num_parallel_calls=1, deterministic=True)
    assert set(last(plain)["python"]) == {"op", "fn", "python"}


def test_map_batches_writes_its_batch_size_and_options() -> None:
    ds = Dataset.range(10).map_batches(
        stage_fns.square_batch, 4, drop_remainder=True, num_parallel_calls=2
    )
    stage = last(ds)["python"]
    assert (stage["op"], stage["batch_size"], stage["drop_remainder"]) == ("map_batches", 4, True)
    assert stage["num_parallel_calls"] == 2
    assert canonical(ds) == ds.to_dict()
    ref = Dataset.range(10).map_batches("stage_fns:square_batch", batch_size=1024)
    assert last(ref)["python"] == {
        "op": "map_batches",
        "fn": {"ref": "stage_fns:square_batch"},
        "python": VERSION,
        "batch_size": 1024,
    }
    assert canonical(ref) == ref.to_dict()


def test_ignore_errors_is_a_stage_of_its_own() -> None:
    ds = Dataset.range(4).map(stage_fns.fails_on_sevens).ignore_errors()
    assert last(ds) == {"ignore_errors": {}}
    assert canonical(ds) == ds.to_dict()
    assert "ignore_errors" in ds.to_json() and '"python"' in ds.to_json()


def test_built_in_names_are_unchanged() -> None:
    ds = Dataset.range(4).map("add", 1).filter("mod_eq", 2, 0).flat_map("text_lines")
    assert [list(s) for s in ds.to_dict()["stages"][1:]] == [["map"], ["filter"], ["flat_map"]]
    assert last(Dataset.range(3).map("square")) == {"map": {"fn": "square"}}


def test_by_reference_names_importable_module_level_functions() -> None:
    assert sluice.by_reference(stage_fns.double) == "stage_fns:double"
    assert sluice.by_reference(stage_fns.Scaler.triple) == "stage_fns:Scaler.triple"
    assert sluice.by_reference(json.dumps) == "json:dumps"
    ds = Dataset.range(3).map(sluice.by_reference(stage_fns.double))
    assert last(ds)["python"]["fn"] == {"ref": "stage_fns:double"}


def test_by_reference_refuses_what_a_worker_cannot_import() -> None:
    def local(x: Any) -> Any:
        return x

    with pytest.raises(sluice.InvalidArgumentError, match="lambda.*ship it by value"):
        sluice.by_reference(lambda x: x)
    with pytest.raises(sluice.InvalidArgumentError, match="inside a function.*move it to a module"):
        sluice.by_reference(local)
    with pytest.raises(sluice.InvalidArgumentError, match="no module and qualified name"):
        sluice.by_reference(functools.partial(stage_fns.double))
    copy = types.FunctionType(stage_fns.double.__code__, stage_fns.double.__globals__, "double")
    with pytest.raises(sluice.InvalidArgumentError, match="stage_fns:double does not name"):
        sluice.by_reference(copy)
    with pytest.raises(TypeError, match="expected a function"):
        sluice.by_reference(3)


def test_by_reference_refuses_a_function_of_the_main_script(tmp_path: pathlib.Path) -> None:
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(
            """
            import sluice
            def f(x):
                return x
            try:
                sluice.by_reference(f)
            except sluice.InvalidArgumentError as e:
                print(e)
            """
        )
    )
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "__main__ script, which the workers cannot import" in out.stdout


@pytest.mark.parametrize(
    "ref", ["stage_fns", "stage_fns:", ":double", "stage fns:double", "a:b:c", "1mod:f"]
)
def test_a_bad_reference_is_refused_at_the_call(ref: str) -> None:
    with pytest.raises(sluice.InvalidArgumentError, match="not a function reference"):
        Dataset.range(3).map_batches(ref if ":" in ref else ref + ":", 4)
    if ":" in ref:
        with pytest.raises(sluice.InvalidArgumentError, match="package.module:function"):
            Dataset.range(3).map(ref)


def test_bad_arguments_are_refused_at_the_call() -> None:
    base = Dataset.range(3)
    with pytest.raises(TypeError, match="filter: the function must be a Python function or"):
        base.filter(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="map_batches: expected a function"):
        base.map_batches(3, 4)  # type: ignore[arg-type]
    with pytest.raises(sluice.InvalidArgumentError, match=r"batch_size must be in \[1, 65536\]"):
        base.map_batches(stage_fns.square_batch, 0)
    with pytest.raises(sluice.InvalidArgumentError, match="batch_size"):
        base.map_batches(stage_fns.square_batch, -3)
    with pytest.raises(TypeError, match="batch_size must be an int"):
        base.map_batches(stage_fns.square_batch, 2.5)  # type: ignore[arg-type]
    with pytest.raises(sluice.InvalidArgumentError, match="map_batches runs a Python function"):
        base.map_batches("square", 4)
    with pytest.raises(TypeError, match="constant arguments go with built-in"):
        base.map(stage_fns.double, 1)
    with pytest.raises(TypeError, match="retries goes with Python functions"):
        base.map("square", retries=1)
    with pytest.raises(ValueError, match=r"retries must be in \[0, 1\]"):
        base.map(stage_fns.double, retries=2)
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        base.map(stage_fns.double, deterministic=1)  # type: ignore[arg-type]


def test_an_unpicklable_function_is_refused_naming_it() -> None:
    import threading

    lock = threading.Lock()

    def holds_a_lock(x: Any) -> Any:
        with lock:
            return x

    with pytest.raises(sluice.InvalidArgumentError, match="cannot pickle .*holds_a_lock"):
        Dataset.range(3).map(holds_a_lock)


def test_a_function_of_the_users_own_module_travels_with_its_code(tmp_path: pathlib.Path) -> None:
    """A module the workers cannot import (here: one loaded from a file) is pickled
    by value, with the helpers its function calls: a fresh interpreter without the
    file on its path runs the unpickled function."""
    (tmp_path / "users_aug.py").write_text(
        "def helper(x):\n    return x * 10\n\ndef aug(x):\n    return helper(x) + 1\n"
    )
    with stage_fns.module_from_file(tmp_path / "users_aug.py") as module:
        data = last(Dataset.range(3).map(module.aug))["python"]["fn"]["pickle"]["data"]
    assert "users_aug" not in cloudpickle.list_registry_pickle_by_value()
    code = (
        "import base64, sys, cloudpickle; "
        "print(cloudpickle.loads(base64.b64decode(sys.argv[1]))(4))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, data], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "41"


def test_a_dataset_with_python_stages_pickles_and_compares_by_its_spec() -> None:
    import pickle

    ds = Dataset.range(5).map("stage_fns:double").filter("stage_fns:is_even").ignore_errors()
    assert pickle.loads(pickle.dumps(ds)) == ds
    assert Dataset.from_json(ds.to_json()) == ds


def test_a_function_of_the_users_own_package_travels_with_its_siblings(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function of ``userpkg.aug`` that calls ``userpkg.helpers``: the whole user
    package travels by value, so a fresh interpreter without it on its path runs
    the function."""
    pkg = tmp_path / "userpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text("def scale(x):\n    return x * 3\n")
    (pkg / "aug.py").write_text(
        "from userpkg.helpers import scale\n\ndef aug(x):\n    return scale(x) - 1\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import userpkg.aug  # type: ignore[import-not-found]

    try:
        data = last(Dataset.range(3).map(userpkg.aug.aug))["python"]["fn"]["pickle"]["data"]
    finally:
        for name in ["userpkg.aug", "userpkg.helpers", "userpkg"]:
            sys.modules.pop(name, None)
    code = (
        "import base64, sys, cloudpickle; "
        "print(cloudpickle.loads(base64.b64decode(sys.argv[1]))(5))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, data], capture_output=True, text=True, timeout=120, cwd="/"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "14"


def test_a_function_carrying_too_much_is_refused_at_the_call() -> None:
    big = np.zeros(9 << 20, dtype=np.uint8)
    with pytest.raises(sluice.InvalidArgumentError, match="pickles to 9.0 MiB.*load large data"):
        Dataset.range(3).map(lambda x: x + big[0])
