"""WebDataset shards from Python: ``Dataset.webdataset`` over a list of tar files or a
pattern, read through the service; samples arrive as dicts of bytes, a bad sample is a
``DataLossError`` naming the shard and the member, which ``ignore_errors`` skips."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

import sluice


def write_shard(path: Path, members: list[tuple[str, bytes]]) -> str:
    with tarfile.open(path, "w", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def shards(tmp_path: Path) -> list[str]:
    """Two shards: sample ``s-k`` has a ``jpg`` and (but ``0-1``) a ``cls``."""
    return [
        write_shard(tmp_path / "a-0.tar", [
            ("0-0.jpg", b"\xff\xd8 0-0"), ("0-0.cls", b"3"),
            ("0-1.jpg", b"\xff\xd8 0-1"),
            ("0-2.cls", b"7"), ("0-2.JPG", b"\xff\xd8 0-2"),
        ]),
        write_shard(tmp_path / "a-1.tar", [("1-0.jpg", b"\xff\xd8 1-0"), ("1-0.cls", b"1")]),
    ]


def test_webdataset_spec_takes_files_or_a_pattern():
    files = sluice.Dataset.webdataset(["/d/a.tar", Path("/d/b.tar")])
    assert files.to_dict() == {"stages": [{"webdataset": {"files": ["/d/a.tar", "/d/b.tar"]}}]}
    assert sluice.Dataset.webdataset("/d/a.tar") == sluice.Dataset.webdataset(["/d/a.tar"])
    pattern = sluice.Dataset.webdataset("s3://b/train/shard-*.tar")
    assert pattern.to_dict() == {"stages": [
        {"list_files": {"pattern": "s3://b/train/shard-*.tar", "seed": 0}},
        {"flat_map": {"fn": "webdataset"}},
    ]}
    with pytest.raises(ValueError, match="webdataset: filenames is empty"):
        sluice.Dataset.webdataset([])


def test_webdataset_samples_arrive_as_dicts_of_bytes_each_once(service, tmp_path):
    files = shards(tmp_path)
    want = {
        "0-0": {"__key__": b"0-0", "cls": b"3", "jpg": b"\xff\xd8 0-0"},
        "0-1": {"__key__": b"0-1", "jpg": b"\xff\xd8 0-1"},
        "0-2": {"__key__": b"0-2", "cls": b"7", "jpg": b"\xff\xd8 0-2"},
        "1-0": {"__key__": b"1-0", "cls": b"1", "jpg": b"\xff\xd8 1-0"},
    }
    for ds in (sluice.Dataset.webdataset(files), sluice.Dataset.webdataset(str(tmp_path / "*.tar"))):
        got = list(ds.distribute("distributed_epoch", service.target))
        assert all(isinstance(s, dict) for s in got)
        assert all(type(v) is bytes for s in got for v in s.values())
        by_key = {s["__key__"].decode(): s for s in got}
        assert len(got) == len(by_key) == 4, "each sample once"
        assert by_key == want
        assert list(by_key["0-0"]) == ["__key__", "cls", "jpg"]
        # One worker reads a whole shard, in order.
        keys = [s["__key__"] for s in got]
        assert keys.index(b"0-0") < keys.index(b"0-1") < keys.index(b"0-2")


def test_a_bad_sample_names_shard_and_member_and_ignore_errors_skips_it(service, tmp_path):
    bad = write_shard(tmp_path / "bad.tar", [
        ("0.jpg", b"a"), ("1.jpg", b"b"), ("1.jpg", b"c"), ("2.jpg", b"d"),
    ])
    with pytest.raises(sluice.DataLossError) as caught:
        list(sluice.Dataset.webdataset(bad).distribute("distributed_epoch", service.target))
    message = str(caught.value)
    assert "bad.tar" in message and "`1.jpg`" in message and "second `jpg`" in message
    ds = sluice.Dataset.webdataset(bad).ignore_errors()
    got = list(ds.distribute("distributed_epoch", service.target))
    assert [s["__key__"] for s in got] == [b"0", b"2"]
