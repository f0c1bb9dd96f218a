"""sluice.Dataset writes the canonical JSON spec (docs/dataset-spec.md).

Every method is checked against a hand-written spec, and every built dataset
against the Rust parser's round trip (``_native.canonical_spec``: parse, validate,
print), which is the contract: a built spec must come back unchanged.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import struct
import subprocess
import sys
import types
from pathlib import Path
from typing import Any, Callable

import pytest

from sluice.dataset import AUTOTUNE, SHARD_HINT, Dataset


def stages(ds: Dataset) -> list[dict[str, Any]]:
    return ds.to_dict()["stages"]


def last(ds: Dataset) -> dict[str, Any]:
    return stages(ds)[-1]


def b64(payload: bytes) -> str:
    return base64.b64encode(payload).decode("ascii")


def items(*values: bytes) -> bytes:
    """The string/bytes payload layout: each item as a u32 LE length, then its bytes."""
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


R3 = {"range": {"start": 0, "stop": 3, "step": 1}}


# ---- sources


def test_range_takes_the_forms_of_pythons_range() -> None:
    assert stages(Dataset.range(5)) == [{"range": {"start": 0, "stop": 5, "step": 1}}]
    assert stages(Dataset.range(2, 5)) == [{"range": {"start": 2, "stop": 5, "step": 1}}]
    assert stages(Dataset.range(5, -1, -2)) == [{"range": {"start": 5, "stop": -1, "step": -2}}]
    with pytest.raises(TypeError, match="1 to 3 ints"):
        Dataset.range()
    with pytest.raises(ValueError, match="step must not be 0"):
        Dataset.range(0, 3, 0)
    with pytest.raises(TypeError, match="must be an int"):
        Dataset.range(2.5)
    with pytest.raises(ValueError, match=r"must be in \[-9223372036854775808"):
        Dataset.range(2**63)


def test_flat_lists_use_the_readable_list_forms() -> None:
    def value(x: Any) -> dict[str, Any]:
        return last(Dataset.from_tensor_slices(x))["from_tensor_slices"]

    assert value([1, -2, 2**63 - 1]) == {"ints": [1, -2, 2**63 - 1]}
    assert value(["a", "é", ""]) == {"strings": ["a", "é", ""]}
    assert value([b"\x00\xff", b""]) == {"bytes": [[0, 255], []]}
    assert value([]) == {"floats": []}
    # floats are float32, written as the Rust side prints a float32: the shortest
    # decimal that reads back to it.
    assert value([0.5, 2, 0.1, 1 / 3, 16777217, 1e-50]) == {
        "floats": [0.5, 2.0, 0.1, 0.33333334, 16777216.0, 0.0]
    }


def test_lists_that_are_not_flat_scalars_use_the_tensors_form() -> None:
    def tensors(x: Any) -> list[dict[str, Any]]:
        return last(Dataset.from_tensor_slices(x))["from_tensor_slices"]["tensors"]

    assert tensors([[1, 2, 3], [4, 5, 6]]) == [
        {"dtype": "int64", "shape": [2, 3], "base64": b64(struct.pack("<6q", 1, 2, 3, 4, 5, 6))}
    ]
    assert tensors([True, False]) == [{"dtype": "bool", "shape": [2], "base64": b64(b"\x01\x00")}]
    assert tensors([float("nan"), 1]) == [
        {"dtype": "float32", "shape": [2], "base64": b64(struct.pack("<2f", float("nan"), 1))}
    ]
    assert tensors([["a", "bc"]]) == [
        {"dtype": "string", "shape": [1, 2], "base64": b64(items(b"a", b"bc"))}
    ]
    assert tensors([[b"x"], [b""]]) == [
        {"dtype": "bytes", "shape": [2, 1], "base64": b64(items(b"x", b""))}
    ]
    assert tensors([[], []]) == [{"dtype": "float32", "shape": [2, 0], "base64": ""}]


def test_a_tuple_makes_tuple_elements_and_a_dict_named_ones() -> None:
    ints = {"dtype": "int64", "shape": [2], "base64": b64(struct.pack("<2q", 1, 2))}
    strs = {"dtype": "string", "shape": [2], "base64": b64(items(b"a", b"b"))}
    assert last(Dataset.from_tensor_slices(([1, 2], ["a", "b"]))) == {
        "from_tensor_slices": {"tensors": [ints, strs]}
    }
    assert last(Dataset.from_tensor_slices({"y": [1, 2], "x": ["a", "b"]})) == {
        "from_tensor_slices": {"tensors": [ints, strs], "names": ["y", "x"]}
    }


@pytest.mark.parametrize(
    "tensors, error, message",
    [
        (
            [[1, 2], [3]],
            ValueError,
            r"tensors is ragged: a list of 1 at depth 1 where the first has 2",
        ),
        ([[1], 2], ValueError, r"is ragged: a scalar at depth 1"),
        ([1, [2]], ValueError, r"is ragged: a list at depth 1"),
        (
            ([1, 2], [1, 2, 3]),
            ValueError,
            r"tensors\[1\] has first dimension 3, but tensors\[0\] has 2",
        ),
        (
            {"a": [1], "b": [1, 2]},
            ValueError,
            r"tensors\['b'\] has first dimension 2, but tensors\['a'\] has 1",
        ),
        (5, ValueError, r"tensors is a scalar \(int\), which has no first dimension"),
        ((), ValueError, r"the tuple is empty"),
        ({}, ValueError, r"the dict is empty"),
        ([1, "a"], TypeError, r"mixes int, str"),
        ([True, 1], TypeError, r"mixes bool, int"),
        ([2**63], ValueError, r"outside int64"),
        ([1e39], ValueError, r"outside float32's range"),
        (({"a": [1]},), TypeError, r"a dict inside the structure"),
        ({1: [1]}, TypeError, r"dict keys name the components and must be non-empty str"),
        ({"": [1]}, TypeError, r"non-empty str"),
    ],
)
def test_unsupported_input_is_refused_saying_why(tensors: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        Dataset.from_tensor_slices(tensors)


def test_list_files_shuffles_by_default_like_tf_data_with_seed_zero() -> None:
    assert last(Dataset.list_files("/d/*.tfrecord")) == {
        "list_files": {"pattern": "/d/*.tfrecord", "shuffle": True, "seed": 0}
    }
    assert last(Dataset.list_files("s3://b/x-*", shuffle=False)) == {
        "list_files": {"pattern": "s3://b/x-*", "seed": 0}
    }
    assert last(Dataset.list_files(Path("/d/a*"), seed=7)) == {
        "list_files": {"pattern": "/d/a*", "shuffle": True, "seed": 7}
    }
    with pytest.raises(TypeError, match="one pattern"):
        Dataset.list_files(["/a*", "/b*"])  # type: ignore[arg-type]


def test_file_sources_take_one_name_or_a_list() -> None:
    assert last(Dataset.tfrecord("/d/a.tfrecord")) == {"tfrecord": {"files": ["/d/a.tfrecord"]}}
    assert last(Dataset.tfrecord(["a", Path("b")], skip_corrupt=True)) == {
        "tfrecord": {"files": ["a", "b"], "skip_corrupt": True}
    }
    assert last(Dataset.text_lines(["x.txt", "y.txt"])) == {
        "text_lines": {"files": ["x.txt", "y.txt"]}
    }
    with pytest.raises(ValueError, match="filenames is empty"):
        Dataset.text_lines([])
    with pytest.raises(TypeError, match="file names must be str"):
        Dataset.tfrecord([1])  # type: ignore[list-item]


# ---- transformations


def test_map_writes_only_what_differs_from_the_defaults() -> None:
    base = Dataset.range(3)
    assert last(base.map("square")) == {"map": {"fn": "square"}}
    assert last(base.map("add", 1, 0.5, "s")) == {"map": {"fn": "add", "args": [1, 0.5, "s"]}}
    assert last(base.map("square", num_parallel_calls=4, deterministic=False)) == {
        "map": {"fn": "square", "num_parallel_calls": 4, "deterministic": False}
    }
    assert last(base.map("square", num_parallel_calls=AUTOTUNE)) == {
        "map": {"fn": "square", "num_parallel_calls": 0}
    }
    assert last(base.map("square", num_parallel_calls=1, deterministic=True)) == {
        "map": {"fn": "square"}
    }


def test_functions_must_be_names_with_json_arguments() -> None:
    base = Dataset.range(3)
    with pytest.raises(TypeError, match="interleave takes the name.*built-ins.*Python functions go in"):
        base.interleave(lambda x: x, cycle_length=2)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="non-empty name"):
        base.filter("")
    with pytest.raises(TypeError, match="map argument 0 must be an int, a float or a str"):
        base.map("add", True)
    with pytest.raises(ValueError, match="must be finite"):
        base.map("add", float("inf"))
    with pytest.raises(ValueError, match="num_parallel_calls must be in \\[0, 64\\]"):
        base.map("square", num_parallel_calls=65)


def test_filter_batch_shuffle_repeat_take_skip_prefetch() -> None:
    base = Dataset.range(3)
    assert last(base.filter("mod_eq", 2, 0)) == {"filter": {"fn": "mod_eq", "args": [2, 0]}}
    assert last(base.filter("positive")) == {"filter": {"fn": "positive"}}
    assert last(base.batch(4)) == {"batch": {"size": 4, "drop_remainder": False}}
    assert last(base.batch(4, drop_remainder=True)) == {
        "batch": {"size": 4, "drop_remainder": True}
    }
    assert last(base.shuffle(100)) == {"shuffle": {"buffer_size": 100, "seed": 0}}
    assert last(base.shuffle(100, seed=7, reshuffle_each_iteration=True)) == {
        "shuffle": {"buffer_size": 100, "seed": 7}
    }
    assert last(base.repeat()) == {"repeat": {"count": None}}
    assert last(base.repeat(-1)) == {"repeat": {"count": None}}
    assert last(base.repeat(3)) == {"repeat": {"count": 3}}
    assert last(base.take(5)) == {"take": {"count": 5}}
    assert last(base.skip(1)) == {"skip": {"count": 1}}
    assert last(base.prefetch(2)) == {"prefetch": {"buffer_size": 2}}


def test_transformation_arguments_are_checked_where_they_are_given() -> None:
    base = Dataset.range(3)
    with pytest.raises(ValueError, match=r"batch: batch_size must be in \[1,"):
        base.batch(0)
    with pytest.raises(TypeError, match="drop_remainder must be True or False"):
        base.batch(2, drop_remainder=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="reshuffle_each_iteration=False is not supported"):
        base.shuffle(10, reshuffle_each_iteration=False)
    with pytest.raises(ValueError, match=r"take: count must be in \[0,"):
        base.take(-1)
    with pytest.raises(ValueError, match="no AUTOTUNE buffer size"):
        base.prefetch(AUTOTUNE)


def test_parse_example_takes_a_dict_or_the_specs_list() -> None:
    want = {
        "parse_example": {
            "features": [
                {"name": "image", "dtype": "bytes", "shape": []},
                {"name": "label", "dtype": "int64", "shape": [], "default": -1},
                {"name": "bbox", "dtype": "float32"},
            ]
        }
    }
    ds = Dataset.tfrecord("a").parse_example(
        {
            "image": {"dtype": "bytes", "shape": []},
            "label": {"dtype": "int64", "shape": (), "default": -1},
            "bbox": "float32",
        }
    )
    assert last(ds) == want
    assert last(Dataset.tfrecord("a").parse_example(want["parse_example"]["features"])) == want
    with pytest.raises(ValueError, match="dtype must be one of int64, float32, bytes, string"):
        Dataset.tfrecord("a").parse_example({"x": "float64"})
    with pytest.raises(ValueError, match="'x' is listed twice"):
        Dataset.tfrecord("a").parse_example([{"name": "x", "dtype": "int64"}] * 2)
    with pytest.raises(ValueError, match="features is empty"):
        Dataset.tfrecord("a").parse_example({})


def test_interleave_and_flat_map_call_dataset_functions() -> None:
    files = Dataset.list_files("/d/*")
    assert last(files.interleave("tfrecord", cycle_length=4)) == {
        "interleave": {"fn": "tfrecord", "cycle_length": 4, "block_length": 1}
    }
    ds = files.interleave(
        "repeat_const",
        6,
        cycle_length=2,
        block_length=4,
        num_parallel_calls=AUTOTUNE,
        deterministic=False,
    )
    assert last(ds) == {
        "interleave": {
            "fn": "repeat_const",
            "args": [6],
            "cycle_length": 2,
            "block_length": 4,
            "num_parallel_calls": 0,
        }
    }
    assert last(files.flat_map("text_lines")) == {"flat_map": {"fn": "text_lines"}}
    with pytest.raises(TypeError, match="cycle_length"):
        files.interleave("tfrecord")  # type: ignore[call-arg]
    with pytest.raises(ValueError, match=r"cycle_length must be in \[1, 1024\]"):
        files.interleave("tfrecord", cycle_length=0)


def test_zip_and_concatenate_nest_whole_pipelines() -> None:
    a, b, c = Dataset.range(3), Dataset.range(10, 20), Dataset.from_tensor_slices([7])
    want = stages(a) + [{"zip": {"datasets": [b.to_dict(), c.to_dict()]}}]
    assert stages(a.zip(b, c)) == want
    assert stages(Dataset.zip(a, b, c)) == want
    assert stages(Dataset.zip((a, b, c))) == want  # type: ignore[arg-type]
    assert last(a.concatenate(c)) == {
        "concatenate": {"dataset": {"stages": [{"from_tensor_slices": {"ints": [7]}}]}}
    }
    with pytest.raises(ValueError, match="at least two datasets"):
        a.zip()
    with pytest.raises(TypeError, match="expected a Dataset"):
        a.concatenate([1])  # type: ignore[arg-type]


def test_enumerate_and_shard() -> None:
    base = Dataset.range(3)
    assert last(base.enumerate()) == {"enumerate": {"start": 0}}
    assert last(base.enumerate(100)) == {"enumerate": {"start": 100}}
    assert last(base.shard(3, 1)) == {"shard": {"num_shards": 3, "index": 1}}
    assert last(base.shard(SHARD_HINT, SHARD_HINT)) == {
        "shard": {"num_shards": "SHARD_HINT", "index": "SHARD_HINT"}
    }
    assert last(base.shard("SHARD_HINT", 0)) == {"shard": {"num_shards": "SHARD_HINT", "index": 0}}
    with pytest.raises(ValueError, match=r"index must be below num_shards \(3\), got 3"):
        base.shard(3, 3)
    with pytest.raises(ValueError, match=r"num_shards must be in \[1,"):
        base.shard(0, 0)


# ---- the Dataset object


def test_datasets_are_immutable_values() -> None:
    base = Dataset.range(3)
    batched = base.batch(2)
    assert stages(base) == [R3], "a method must not change the dataset it is called on"
    spec = batched.to_dict()
    spec["stages"].append({"take": {"count": 1}})
    assert len(stages(batched)) == 2, "to_dict must return a copy"
    with pytest.raises(AttributeError, match="immutable"):
        base._stages = ()  # type: ignore[misc]
    assert Dataset.range(3).batch(2) == batched
    assert hash(Dataset.range(3).batch(2)) == hash(batched)
    assert batched != base and batched != "x"
    assert pickle.loads(pickle.dumps(batched)) == batched


def test_json_forms() -> None:
    ds = Dataset.range(3).map("to_string")
    text = '{"stages":[{"range":{"start":0,"stop":3,"step":1}},{"map":{"fn":"to_string"}}]}'
    assert ds.to_json() == text
    assert Dataset.from_json(text) == ds
    assert Dataset.from_dict(json.loads(text)) == ds
    assert eval(repr(ds), {"Dataset": Dataset}) == ds
    big = Dataset.from_tensor_slices(list(range(1000)))
    assert repr(big).startswith("<Dataset from_tensor_slices (a ")
    with pytest.raises(ValueError, match=r'a dataset spec is a dict \{"stages": \[...\]\}'):
        Dataset.from_dict({"stage": []})
    with pytest.raises(ValueError, match="each a dict with one key"):
        Dataset.from_dict({"stages": [{"range": {"stop": 1}, "take": {"count": 1}}]})


def test_apply_calls_the_function_with_the_dataset() -> None:
    ds = Dataset.range(3)
    assert ds.apply(lambda d: d.batch(2)) == ds.batch(2)


def test_distribute_applies_sluice_distribute(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def distribute(*args: Any, **kwargs: Any) -> Callable[[Dataset], Any]:
        calls.append((args, kwargs))
        return lambda ds: ("read", ds)

    fake = types.ModuleType("sluice.distribute")
    fake.distribute = distribute  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sluice.distribute", fake)
    ds = Dataset.range(3)
    assert ds.distribute("parallel_epochs", "localhost:5000", job_name="j") == ("read", ds)
    assert calls == [(("parallel_epochs", "localhost:5000"), {"job_name": "j"})]


def test_the_module_imports_and_builds_without_numpy() -> None:
    root = Path(__import__("sluice.dataset").dataset.__file__).parent.parent
    code = (
        "import sys; sys.modules['numpy'] = None\n"
        "from sluice.dataset import Dataset\n"
        "Dataset.from_tensor_slices(([1, 2], [[True], [False]])).batch(2).to_json()\n"
        "print('numpy' in sys.modules and sys.modules['numpy'] is not None)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


# ---- numpy input


def test_numpy_arrays_of_each_dtype_become_tensors() -> None:
    np = pytest.importorskip("numpy")

    def tensor(x: Any) -> dict[str, Any]:
        (t,) = last(Dataset.from_tensor_slices(x))["from_tensor_slices"]["tensors"]
        return dict(t)

    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    assert tensor(x) == {"dtype": "float32", "shape": [4, 3], "base64": b64(x.tobytes())}
    for dtype, name in [
        (np.int64, "int64"),
        (np.int32, "int32"),
        (np.float64, "float64"),
        (np.uint8, "uint8"),
    ]:
        a = np.arange(6, dtype=dtype).reshape(3, 1, 2)
        assert tensor(a) == {"dtype": name, "shape": [3, 1, 2], "base64": b64(a.tobytes())}
    assert tensor(np.array([True, False, True])) == {
        "dtype": "bool",
        "shape": [3],
        "base64": b64(b"\x01\x00\x01"),
    }
    # Big-endian and non-contiguous arrays are written little-endian, row-major.
    be = np.array([1.5, -2.0], dtype=">f8")
    assert tensor(be)["base64"] == b64(struct.pack("<2d", 1.5, -2.0))
    t = np.arange(6, dtype=np.int64).reshape(2, 3).T
    assert tensor(t) == {
        "dtype": "int64",
        "shape": [3, 2],
        "base64": b64(struct.pack("<6q", 0, 3, 1, 4, 2, 5)),
    }
    strings = {"dtype": "string", "shape": [2], "base64": b64(items(b"a", "é".encode()))}
    assert tensor(np.array(["a", "é"])) == strings
    assert tensor(np.array(["a", "é"], dtype=object)) == strings
    assert tensor(np.array(["a", "é"], dtype=np.dtypes.StringDType())) == strings
    raw = {"dtype": "bytes", "shape": [2], "base64": b64(items(b"\x00x", b""))}
    assert tensor(np.array([b"\x00x", b""], dtype=object)) == raw
    assert tensor(np.array([[b"ab"], [b"c"]])) == {
        "dtype": "bytes",
        "shape": [2, 1],
        "base64": b64(items(b"ab", b"c")),
    }
    # A list of numpy scalars goes through numpy.
    assert tensor([np.int64(1), np.int64(2)]) == {
        "dtype": "int64",
        "shape": [2],
        "base64": b64(struct.pack("<2q", 1, 2)),
    }


def test_a_dict_of_arrays_keeps_its_order_and_checks_first_dimensions() -> None:
    np = pytest.importorskip("numpy")
    x, y = np.zeros((4, 3), np.float32), np.arange(4)
    value = last(Dataset.from_tensor_slices({"x": x, "y": y}))["from_tensor_slices"]
    assert value["names"] == ["x", "y"]
    assert [t["dtype"] for t in value["tensors"]] == ["float32", "int64"]
    with pytest.raises(
        ValueError, match=r"tensors\['y'\] has first dimension 3, but tensors\['x'\] has 4"
    ):
        Dataset.from_tensor_slices({"x": x, "y": np.arange(3)})


@pytest.mark.parametrize(
    "make, error, message",
    [
        (
            lambda np: np.arange(3, dtype=np.int16),
            TypeError,
            r"numpy dtype int16.*x.astype\(np.int64\)",
        ),
        (
            lambda np: np.zeros(2, np.float16),
            TypeError,
            r"numpy dtype float16.*x.astype\(np.float32\)",
        ),
        (lambda np: np.zeros(2, np.complex64), TypeError, r"supported: int64, int32, float32"),
        (lambda np: np.array(5), ValueError, r"0-d array, which has no first dimension"),
        (lambda np: np.float32(1.5), ValueError, r"0-d array"),
        (lambda np: np.array(["a", b"b"], dtype=object), TypeError, r"object array of bytes, str"),
    ],
)
def test_unsupported_numpy_input_is_refused_saying_why(
    make: Callable[[Any], Any], error: type, message: str
) -> None:
    np = pytest.importorskip("numpy")
    with pytest.raises(error, match=message):
        Dataset.from_tensor_slices(make(np))


# ---- the Rust parser's round trip (needs the native module)

ROUND_TRIP: dict[str, Callable[[], Dataset]] = {
    "range": lambda: Dataset.range(10),
    "range_negative_step": lambda: Dataset.range(5, -1, -2),
    "ints": lambda: Dataset.from_tensor_slices([1, -2, 2**63 - 1, -(2**63)]),
    "floats": lambda: Dataset.from_tensor_slices([0.1, 1 / 3, 3.4e38, -1e-45, 0.0, 2]),
    "strings": lambda: Dataset.from_tensor_slices(["a", "", "ünï"]),
    "bytes": lambda: Dataset.from_tensor_slices([b"\x00\xff", b""]),
    "empty": lambda: Dataset.from_tensor_slices([]),
    "nested_lists": lambda: Dataset.from_tensor_slices({"m": [[1.5, 2], [3, 4]], "s": ["a", "b"]}),
    "tuple_with_bools": lambda: Dataset.from_tensor_slices(([True, False], [b"x", b"yz"])),
    "list_files": lambda: Dataset.list_files("/d/*.tfrecord", seed=3),
    "list_files_unshuffled": lambda: Dataset.list_files("/d/*", shuffle=False),
    "tfrecord": lambda: Dataset.tfrecord(["a", "b"], skip_corrupt=True),
    "text_lines": lambda: Dataset.text_lines("a.txt"),
    "webdataset": lambda: Dataset.webdataset(["a.tar", "b.tar"]),
    "webdataset_pattern": lambda: Dataset.webdataset("/d/shard-*.tar"),
    "parquet": lambda: Dataset.parquet(
        ["a.parquet"], columns=["text", "label"], batch_rows=64, defaults={"label": -1, "w": 0.5}
    ),
    "parquet_pattern": lambda: Dataset.parquet("s3://b/train-*.parquet"),
    "map": lambda: Dataset.range(3).map("add", 1).map("mul", 0.5).map("square"),
    "parallel_map": lambda: Dataset.range(3).map(
        "square", num_parallel_calls=AUTOTUNE, deterministic=False
    ),
    "filter": lambda: Dataset.range(3).filter("mod_eq", 2, 0),
    "batch_shuffle": lambda: Dataset.range(9).shuffle(4, seed=2).batch(2, drop_remainder=True),
    "repeat_take_skip_prefetch": lambda: Dataset.range(3).repeat().take(5).skip(1).prefetch(2),
    "repeat_count": lambda: Dataset.range(3).repeat(2),
    "parse_example": lambda: Dataset.tfrecord("a").parse_example(
        {
            "image": {"dtype": "bytes", "shape": []},
            "label": {"dtype": "int64", "shape": [], "default": -1},
            "score": {"dtype": "float32", "shape": [2], "default": 0.5},
            "tag": {"dtype": "string", "default": "none"},
        }
    ),
    "interleave": lambda: Dataset.list_files("/d/*").interleave(
        "tfrecord", cycle_length=4, block_length=2, num_parallel_calls=4
    ),
    "flat_map": lambda: Dataset.list_files("/d/*").flat_map("text_lines"),
    "zip": lambda: Dataset.range(3).zip(Dataset.range(4).map("square"), Dataset.range(5)),
    "concatenate": lambda: Dataset.range(2).concatenate(Dataset.from_tensor_slices([7])),
    "enumerate": lambda: Dataset.range(2).enumerate().enumerate(100),
    "shard": lambda: Dataset.range(9).shard(3, 1).shard(SHARD_HINT, SHARD_HINT),
}


def numpy_round_trip_cases(np: Any) -> dict[str, Dataset]:
    """Datasets from numpy input, one per dtype and structure."""
    return {
        "xy": Dataset.from_tensor_slices(
            {"x": np.arange(12, dtype=np.float32).reshape(4, 3), "y": np.arange(4)}
        ),
        "dtypes": Dataset.from_tensor_slices(
            (
                np.zeros((2, 2), np.float64),
                np.ones(2, bool),
                np.arange(4, dtype=np.uint8).reshape(2, 2),
                np.array(["a", "bc"]),
                np.array([b"x", b""]),
            )
        ),
        "batched": Dataset.from_tensor_slices(np.arange(10)).batch(3),
    }


@pytest.mark.parametrize("name", sorted(ROUND_TRIP))
def test_the_rust_parser_gives_back_the_same_spec(name: str) -> None:
    from sluice import _native

    ds = ROUND_TRIP[name]()
    assert json.loads(_native.canonical_spec(ds.to_json())) == ds.to_dict()


def test_numpy_specs_come_back_from_the_rust_parser_unchanged() -> None:
    np = pytest.importorskip("numpy")
    from sluice import _native

    for name, ds in numpy_round_trip_cases(np).items():
        assert json.loads(_native.canonical_spec(ds.to_json())) == ds.to_dict(), name


def test_a_malformed_spec_is_an_invalid_argument_naming_the_field() -> None:
    import sluice
    from sluice import _native

    bad = Dataset.from_dict({"stages": [R3, {"batch": {"size": 0}}]})
    with pytest.raises(sluice.InvalidArgumentError, match=r"stages\[1\]\.batch\.size"):
        _native.canonical_spec(bad.to_json())
    assert issubclass(sluice.InvalidArgumentError, sluice.SluiceError)
    rows = {
        "tensors": [
            {"dtype": "int64", "shape": [2], "base64": b64(struct.pack("<2q", 1, 2))},
            {"dtype": "int64", "shape": [1], "base64": b64(struct.pack("<q", 1))},
        ]
    }
    mismatched = Dataset.from_dict({"stages": [{"from_tensor_slices": rows}]})
    with pytest.raises(sluice.InvalidArgumentError, match=r"from_tensor_slices\.tensors\[1\]"):
        _native.canonical_spec(mismatched.to_json())
