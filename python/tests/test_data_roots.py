"""File access is granted, not assumed: ``data_roots`` on the servers (the
``--data-roots`` flag). A spec naming a file outside the dispatcher's roots is
refused at registration; a worker refuses a file outside its own roots when it
opens it, failing that read."""

from __future__ import annotations

import os

import pytest

import sluice


@pytest.fixture
def files(tmp_path):
    for sub, name, text in [("allowed", "a.txt", "a1\na2\n"), ("outside", "secret.txt", "s\n")]:
        (tmp_path / sub).mkdir()
        (tmp_path / sub / name).write_text(text)
    return tmp_path


def lines(elements) -> list[str]:
    return [bytes(e).decode() if not isinstance(e, str) else e for e in elements]


def test_a_spec_outside_the_roots_is_refused_naming_the_path_and_the_flag(files):
    secret = str(files / "outside" / "secret.txt")
    with sluice.DispatchServer(data_roots=[files / "allowed"]) as d:
        with pytest.raises(sluice.InvalidArgumentError, match="--data-roots") as e:
            sluice.register_dataset(d.target, sluice.Dataset.text_lines(secret))
        assert secret in str(e.value)
        with pytest.raises(sluice.InvalidArgumentError, match="/etc/passwd"):
            sluice.register_dataset(d.target, sluice.Dataset.text_lines("/etc/passwd"))
    with sluice.start_quorum(1, data_roots=str(files / "allowed")) as quorum:
        with pytest.raises(sluice.InvalidArgumentError, match="outside the data roots"):
            sluice.register_dataset(quorum, sluice.Dataset.text_lines(secret))


def test_a_read_under_an_allowed_root_works(files):
    allowed = str(files / "allowed")
    with sluice.DispatchServer(data_roots=[allowed]) as d:
        with sluice.WorkerServer(d.target, data_roots=allowed):
            ds = sluice.Dataset.text_lines(os.path.join(allowed, "a.txt"))
            got = lines(ds.distribute("parallel_epochs", d.target))
    assert got == ["a1", "a2"]


def test_a_worker_refuses_a_file_outside_its_own_roots(files):
    secret = str(files / "outside" / "secret.txt")
    # The dispatcher admits the file; the worker, which opens it, does not.
    with sluice.DispatchServer(data_roots=[files]) as d:
        with sluice.WorkerServer(d.target, data_roots=[files / "allowed"]):
            ds = sluice.Dataset.text_lines(secret)
            with pytest.raises(sluice.SluiceError, match="outside the data roots") as e:
                list(ds.distribute("parallel_epochs", d.target))
            assert secret in str(e.value)
            # The worker keeps serving.
            ok = sluice.Dataset.text_lines(str(files / "allowed" / "a.txt"))
            assert lines(ok.distribute("parallel_epochs", d.target, job_name="ok")) == ["a1", "a2"]
