"""Elements as numpy arrays without copies: dtypes, shapes and structure
round-trip through the service, and the arrays view the received bytes."""

from __future__ import annotations

import numpy as np
import pytest

import sluice


def read_all(service, ds, mode="distributed_epoch"):
    return list(ds.distribute(mode, service.target))


# Every dtype Sluice has, as numpy produces it, with a non-trivial shape.
ARRAYS = {
    "int64": np.arange(24, dtype=np.int64).reshape(4, 3, 2) * -7,
    "int32": np.array([[-(2**31), 0], [1, -1], [7, 2**31 - 1], [3, 4]], dtype=np.int32),
    "float32": (np.arange(12, dtype=np.float32) / 3).reshape(4, 3),
    "float64": np.linspace(-1, 1, 8, dtype=np.float64).reshape(4, 2),
    "bool": np.array([[True, False], [False, False], [True, True], [False, True]]),
    "uint8": np.arange(4 * 5 * 3, dtype=np.uint8).reshape(4, 5, 3),
}


@pytest.mark.parametrize("name", sorted(ARRAYS))
def test_each_fixed_width_dtype_and_shape_round_trips(service, name):
    source = ARRAYS[name]
    got = read_all(service, sluice.Dataset.from_tensor_slices(source))
    got.sort(key=lambda a: a.tobytes())
    want = sorted(source, key=lambda a: a.tobytes())
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert isinstance(g, np.ndarray)
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape)
        np.testing.assert_array_equal(g, w)


def test_string_and_bytes_tensors_are_bytes(service):
    got = read_all(service, sluice.Dataset.from_tensor_slices(["cat", "dog"]))
    assert sorted(got) == [b"cat", b"dog"] and all(type(g) is bytes for g in got)
    raw = [b"\x00\xff", b""]
    assert sorted(read_all(service, sluice.Dataset.from_tensor_slices(raw))) == sorted(raw)
    # A rank >= 1 string tensor is an object array of bytes in its shape.
    words = np.array([["a", "bb"], ["ccc", "d"]])
    (got,) = read_all(service, sluice.Dataset.from_tensor_slices(words[None]))
    assert got.dtype == object and got.shape == (2, 2)
    assert got.tolist() == [[b"a", b"bb"], [b"ccc", b"d"]]


def test_tuples_and_dicts_keep_their_structure(service):
    x = np.arange(6, dtype=np.float32).reshape(3, 2)
    y = np.array([10, 11, 12], dtype=np.int64)
    pairs = read_all(service, sluice.Dataset.from_tensor_slices((x, y)))
    assert all(isinstance(p, tuple) and len(p) == 2 for p in pairs)
    assert sorted((int(b), a.tolist()) for a, b in pairs) == [
        (10, [0.0, 1.0]), (11, [2.0, 3.0]), (12, [4.0, 5.0])]
    named = read_all(service, sluice.Dataset.from_tensor_slices({"image": x, "label": y}))
    assert all(list(d) == ["image", "label"] for d in named)
    assert sorted(int(d["label"]) for d in named) == [10, 11, 12]


def test_arrays_view_the_received_bytes_and_refuse_writes(service):
    images = np.arange(3 * 32 * 32 * 3, dtype=np.uint8).reshape(3, 32, 32, 3)
    got = read_all(service, sluice.Dataset.from_tensor_slices(images))
    for a in got:
        # The array's memory is the Rust buffer the element arrived in.
        assert isinstance(a.base, sluice.TensorData)
        assert a.base.zero_copy and len(a.base) == a.nbytes
        assert not a.flags.writeable and not a.flags.owndata
        with pytest.raises(ValueError, match="read-only"):
            a[0, 0, 0] = 1
    # Wider dtypes, whose payload may start anywhere in a frame: aligned either way
    # (copied once only when misaligned), and the values are right.
    floats = read_all(service, sluice.Dataset.from_tensor_slices(np.ones((5, 7), np.float64)))
    for a in floats:
        assert a.flags.aligned and isinstance(a.base, sluice.TensorData)
        np.testing.assert_array_equal(a, np.ones(7))


def test_a_payload_misaligned_for_its_dtype_is_copied_once_and_right(service):
    # A 3-byte uint8 component before a float64 one: in the message, the float64
    # payload starts at an odd offset for most elements.
    u = np.arange(30, dtype=np.uint8).reshape(10, 3)
    f = np.arange(20, dtype=np.float64).reshape(10, 2) + 0.5
    got = read_all(service, sluice.Dataset.from_tensor_slices((u, f)))
    copied = [b for _, b in got if not b.base.zero_copy]
    assert copied, "expected some float64 payloads at a misaligned offset"
    for a, b in got:
        assert b.flags.aligned and b.ctypes.data % 8 == 0
        np.testing.assert_array_equal(b, f[int(a[0]) // 3])


def test_scalars_are_zero_dimensional_arrays(service):
    (got,) = read_all(service, sluice.Dataset.range(1))
    assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == np.int64
    assert int(got) == 0
