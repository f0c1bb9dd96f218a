"""``config=PATH`` of ``DispatchServer`` and ``WorkerServer``: the TOML file of
``sluice dispatcher|worker --config`` (docs/operations-config.md), with real servers
in this process: the file's keys set the keywords, keywords given win, and a key
the Python server does not support, a misspelt key or a wrong type is an error
naming it."""

from __future__ import annotations

import pathlib

import pytest

import sluice

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "deploy" / "config"


def write(tmp_path: pathlib.Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_a_dispatcher_and_a_worker_take_their_settings_from_config_files(tmp_path):
    d_file = write(tmp_path, "d.toml", f'work-dir = "{tmp_path / "journal"}"\nmax-datasets = 1\n')
    with sluice.DispatchServer(config=d_file) as d:
        # max-datasets = 1 from the file: a second dataset is refused.
        dataset_id = sluice.register_dataset(d.target, sluice.Dataset.range(3))
        with pytest.raises(sluice.ResourceExhaustedError, match="max.datasets"):
            sluice.register_dataset(d.target, sluice.Dataset.range(4))
        assert (tmp_path / "journal").exists(), "work-dir from the file is not used"
        # The worker's dispatcher comes from its file alone.
        w_file = write(tmp_path, "w.toml", f'dispatcher = ["{d.address}"]\nbuffer = 8\n')
        with sluice.WorkerServer(config=w_file):
            elements = sluice.from_dataset_id("parallel_epochs", d.target, dataset_id)
            assert sorted(int(e) for e in elements) == list(range(3))


def test_keywords_given_win_over_the_file(tmp_path):
    d_file = write(tmp_path, "d.toml", "max-datasets = 1\n")
    with sluice.DispatchServer(config=d_file, max_datasets=2) as d:
        sluice.register_dataset(d.target, sluice.Dataset.range(3))
        sluice.register_dataset(d.target, sluice.Dataset.range(4))
    # A positional argument counts as given too: port 0 over the file's port.
    with sluice.DispatchServer() as taken:
        port = taken.address.rsplit(":", 1)[1]
        p_file = write(tmp_path, "p.toml", f"port = {port}\n")
        with sluice.DispatchServer(0, config=p_file) as d:
            assert d.address.rsplit(":", 1)[1] != port


def test_a_flag_the_python_server_lacks_is_an_error_naming_it():
    # The committed worker example sets metrics-addr, which WorkerServer has no keyword for.
    with pytest.raises(sluice.InvalidArgumentError, match="`metrics-addr` is a `sluice worker` flag"):
        sluice.WorkerServer(config=EXAMPLES / "worker.toml")


def test_a_misspelt_key_and_a_wrong_type_are_errors_naming_them(tmp_path):
    bad = write(tmp_path, "bad.toml", 'work_dir = "/tmp/x"\nport = "5050"\n')
    with pytest.raises(sluice.InvalidArgumentError) as e:
        sluice.DispatchServer(config=bad)
    assert "unknown key `work_dir`, did you mean `work-dir`?" in str(e.value)
    assert "`port` must be an integer, not str '5050'" in str(e.value)
    assert bad in str(e.value)


def test_a_missing_config_file_is_an_error_naming_it(tmp_path):
    missing = tmp_path / "nope.toml"
    with pytest.raises(sluice.InvalidArgumentError, match="cannot read the config file .*nope.toml"):
        sluice.DispatchServer(config=missing)


def test_a_config_file_over_the_bound_is_refused_before_it_is_parsed(tmp_path):
    huge = write(tmp_path, "huge.toml", "port = 0\n" + "# padding\n" * 120_000)
    with pytest.raises(sluice.InvalidArgumentError, match="is larger than 1048576 bytes"):
        sluice.DispatchServer(config=huge)


def test_splits_per_request_reaches_the_worker_from_a_keyword_and_from_a_file(tmp_path):
    with sluice.DispatchServer() as d:
        with pytest.raises(sluice.InvalidArgumentError, match="splits_per_request: must be between 1 and 1024"):
            sluice.WorkerServer(d.target, splits_per_request=0)
        w_file = write(tmp_path, "w.toml", f'dispatcher = ["{d.address}"]\nsplits-per-request = 2000\n')
        with pytest.raises(sluice.InvalidArgumentError, match="splits_per_request: must be between 1 and 1024"):
            sluice.WorkerServer(config=w_file)
        with sluice.WorkerServer(d.target, splits_per_request=1):
            got = sluice.Dataset.range(50).distribute("distributed_epoch", d.target)
            assert sorted(int(e) for e in got) == list(range(50))
