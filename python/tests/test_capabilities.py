"""Which workers run a pipeline's Python stages, and the errors a user can act on
(issue 15, "Capabilities" and "Errors the user can act on"): a job no registered
worker can run is refused naming the stage and what the workers run; status
shows each worker's Python; a function that raises on a worker reaches the reader
as ``sluice.UserFunctionError`` with its traceback."""

from __future__ import annotations

import base64
import platform

import pytest

import sluice
from conftest import wait_until


def test_user_function_error_is_a_sluice_error_carrying_its_parts():
    assert issubclass(sluice.UserFunctionError, sluice.SluiceError)
    assert "UserFunctionError" in sluice.errors.__all__
    e = sluice.UserFunctionError(
        "the Python map function `aug:flip` of stages[1] failed on worker w:1: ValueError: x",
        traceback="Traceback (most recent call last):\nValueError: x\n",
        stage="stages[1]",
        op="map",
        function="aug:flip",
        worker="w:1",
        error_type="ValueError",
        phase="call",
    )
    assert str(e).startswith("the Python map function `aug:flip`")
    assert (e.stage, e.op, e.function, e.worker) == ("stages[1]", "map", "aug:flip", "w:1")
    assert (e.error_type, e.phase) == ("ValueError", "call")
    assert e.traceback.endswith("ValueError: x\n")
    with pytest.raises(sluice.SluiceError):
        raise e


def _pickled_map(python: str) -> sluice.Dataset:
    """range(10) then a Python map of a lambda pickled by Python ``python`` (the
    bytes are never loaded: no worker here can run it)."""
    fn = {"pickle": {"name": "<lambda>", "data": base64.b64encode(b"never loaded").decode()}}
    stage = {"python": {"op": "map", "fn": fn, "python": python}}
    return sluice.Dataset.from_dict({"stages": [{"range": {"stop": 10}}, stage]})


def test_a_python_stage_no_worker_can_run_is_refused_naming_the_stage_and_the_workers(service):
    wait_until("both workers registered", lambda: len(sluice.status(service.target)["workers"]) == 2)
    workers = sluice.status(service.target)["workers"]
    assert [w["python_version"] for w in workers] == [None, None], workers
    with pytest.raises(sluice.FailedPreconditionError) as e:
        iter(_pickled_map("3.12.1").distribute("dynamic", service.target))
    message = str(e.value)
    assert "stages[1] (python map `<lambda>`, pickled with Python 3.12.1) cannot run on any worker" in message
    for w in workers:
        assert f"{w['address']} runs no Python stages" in message
    assert "--allow-python and Python 3.12" in message


def test_a_pipeline_pickled_by_two_python_versions_is_refused_at_registration(service):
    both = _pickled_map("3.11.7")
    spec = both.to_dict()
    spec["stages"].append(_pickled_map("3.12.1").to_dict()["stages"][1])
    with pytest.raises(sluice.InvalidArgumentError, match="no worker can run both"):
        sluice.register_dataset(service.target, sluice.Dataset.from_dict(spec))


def _by_reference(op: str, reference: str) -> dict:
    """A Python stage calling ``reference`` (importable in the worker's pool, which
    sees this process's ``sys.path``)."""
    return {"python": {"op": op, "fn": {"ref": reference}, "python": platform.python_version()}}


def test_an_exception_in_a_users_function_reaches_the_reader_with_its_traceback():
    d = sluice.DispatchServer()
    plain = sluice.WorkerServer(d.target)
    w = sluice.WorkerServer(d.target, allow_python=True, python_processes=1)
    try:
        wait_until("both workers registered", lambda: len(sluice.status(d.target)["workers"]) == 2)
        by_address = {x["address"]: x for x in sluice.status(d.target)["workers"]}
        assert by_address[w.address]["python_version"] == platform.python_version()
        assert by_address[plain.address]["python_version"] is None
        # math.factorial raises ValueError on -2: the read ends with the user's error,
        # from the only worker that can run the stage.
        spec = {"stages": [{"range": {"start": -2, "stop": 3}}, _by_reference("map", "math:factorial")]}
        ds = sluice.Dataset.from_dict(spec)
        with pytest.raises(sluice.UserFunctionError) as e:
            list(ds.distribute("parallel_epochs", d.target))
        err = e.value
        assert (err.stage, err.op, err.function, err.phase) == ("stages[1]", "map", "math:factorial", "call")
        assert err.worker == w.address
        assert err.error_type == "ValueError"
        assert "factorial() not defined for negative values" in str(err)
        assert f"failed on worker {w.address}" in str(err)
        assert "ValueError" in err.traceback and err.traceback.strip() in str(err)
        # A module the pool cannot import: phase "load", naming the module.
        spec = {"stages": [{"range": {"stop": 3}}, _by_reference("map", "mypkg_not_here.aug:flip")]}
        with pytest.raises(sluice.UserFunctionError) as e:
            list(sluice.Dataset.from_dict(spec).distribute("parallel_epochs", d.target))
        assert e.value.phase == "load" and "mypkg_not_here" in str(e.value), str(e.value)
    finally:
        w.stop()
        plain.stop()
        d.stop()
