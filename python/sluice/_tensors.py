"""What ``Dataset.from_tensor_slices`` writes: its input encoded in the spec's forms.

The spec (docs/dataset-spec.md, ``from_tensor_slices``) has two kinds of form:

* the list forms ``ints``, ``floats``, ``strings`` and ``bytes``, one scalar element
  per value. A plain Python list of one of these kinds is written this way, so that
  simple specs stay readable;
* the ``tensors`` form (with ``names`` for a dict): one or more tensors sliced along
  their first dimension. Each is written as its dtype, its shape and its payload in
  the element model's layout (fixed-width values little-endian in row-major order;
  a string or bytes item as a u32 little-endian length and its bytes), base64-encoded.

numpy arrays (and anything with ``__array__``) are read with numpy, imported only
then; nested Python lists, tuples and dicts need no numpy.
"""

from __future__ import annotations

import base64
import math
import struct
from collections.abc import Mapping, Sequence
from decimal import Decimal
from typing import Any, NamedTuple

_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1

SUPPORTED = (
    "int64, int32, float32, float64, bool, uint8, and str or bytes (numpy 'U', 'S', 'T', "
    "or object arrays of str or of bytes)"
)


class Encoded(NamedTuple):
    """One tensor of the ``tensors`` form: dtype name, shape, payload."""

    dtype: str
    shape: tuple[int, ...]
    payload: bytes

    def to_spec(self) -> dict[str, Any]:
        """The tensor as the spec writes it."""
        return {
            "dtype": self.dtype,
            "shape": list(self.shape),
            "base64": base64.b64encode(self.payload).decode("ascii"),
        }


def slices_spec(tensors: Any) -> dict[str, Any]:
    """The value of a ``from_tensor_slices`` stage for ``tensors``: a dict of
    components (a named element), a tuple of them (a tuple element) or one."""
    if isinstance(tensors, Mapping):
        if not tensors:
            raise ValueError("from_tensor_slices: the dict is empty; give at least one component")
        names = list(tensors)
        for name in names:
            if not isinstance(name, str) or not name:
                raise TypeError(
                    f"from_tensor_slices: dict keys name the components and must be "
                    f"non-empty str, got {name!r}"
                )
        parts = [encode(v, f"tensors[{k!r}]") for k, v in tensors.items()]
        return _tensors_form(parts, [f"tensors[{k!r}]" for k in names], names)
    if isinstance(tensors, tuple):
        if not tensors:
            raise ValueError("from_tensor_slices: the tuple is empty; give at least one component")
        labels = [f"tensors[{i}]" for i in range(len(tensors))]
        parts = [encode(v, label) for v, label in zip(tensors, labels)]
        return _tensors_form(parts, labels, None)
    if type(tensors) is list:
        simple = _list_form(tensors)
        if simple is not None:
            return simple
    return _tensors_form([encode(tensors, "tensors")], ["tensors"], None)


def _tensors_form(
    parts: list[Encoded], labels: list[str], names: list[str] | None
) -> dict[str, Any]:
    rows = parts[0].shape[0]
    for part, label in zip(parts[1:], labels[1:]):
        if part.shape[0] != rows:
            raise ValueError(
                f"from_tensor_slices: {label} has first dimension {part.shape[0]}, but "
                f"{labels[0]} has {rows}; every component is sliced along its first "
                f"dimension, so they must agree"
            )
    spec: dict[str, Any] = {"tensors": [p.to_spec() for p in parts]}
    if names is not None:
        spec["names"] = names
    return spec


def encode(value: Any, where: str) -> Encoded:
    """One component as a tensor of rank >= 1; ``where`` names it in errors."""
    if isinstance(value, Mapping):
        raise TypeError(
            f"from_tensor_slices: {where} is a dict inside the structure; elements are "
            f"flat (a tuple or a dict of tensors), so nest no further"
        )
    if isinstance(value, (list, tuple)):
        return _from_lists(value, where)
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        return _from_array(value, where)
    raise ValueError(
        f"from_tensor_slices: {where} is a scalar ({type(value).__name__}), which has no "
        f"first dimension to slice; give a list or an array of rank >= 1 (for a single "
        f"element, wrap it: [x])"
    )


def _from_lists(value: Sequence[Any], where: str) -> Encoded:
    """A rectangular nest of lists/tuples of Python scalars."""
    shape = _shape_of(value)
    leaves: list[Any] = []
    _flatten(value, shape, 0, where, leaves)
    if any(not isinstance(x, (bool, int, float, str, bytes, bytearray)) for x in leaves):
        # numpy scalars and the like: let numpy find the common dtype.
        return _from_array(value, where)
    kind = _kind(leaves, where)
    return Encoded(kind, shape, _pack(kind, leaves, where))


def _shape_of(value: Sequence[Any]) -> tuple[int, ...]:
    shape = []
    probe: Any = value
    while isinstance(probe, (list, tuple)):
        shape.append(len(probe))
        if not probe:
            break
        probe = probe[0]
    return tuple(shape)


def _flatten(value: Any, shape: tuple[int, ...], depth: int, where: str, out: list[Any]) -> None:
    if depth == len(shape):
        if isinstance(value, (list, tuple)):
            raise ValueError(
                f"from_tensor_slices: {where} is ragged: a list at depth {depth} where the "
                f"first row has a scalar; every row must have the same shape"
            )
        out.append(value)
        return
    if not isinstance(value, (list, tuple)):
        raise ValueError(
            f"from_tensor_slices: {where} is ragged: a scalar at depth {depth} where the "
            f"first row has a list of {shape[depth]}; every row must have the same shape"
        )
    if len(value) != shape[depth]:
        raise ValueError(
            f"from_tensor_slices: {where} is ragged: a list of {len(value)} at depth "
            f"{depth} where the first has {shape[depth]}; every row must have the same shape"
        )
    for item in value:
        _flatten(item, shape, depth + 1, where, out)


def _kind(leaves: list[Any], where: str) -> str:
    """The dtype of a list of Python scalars, as tf.data infers it."""
    if not leaves:
        return "float32"  # tf.data's dtype of an empty list
    if all(isinstance(x, bool) for x in leaves):
        return "bool"
    if all(isinstance(x, int) and not isinstance(x, bool) for x in leaves):
        return "int64"
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in leaves):
        return "float32"
    if all(isinstance(x, str) for x in leaves):
        return "string"
    if all(isinstance(x, (bytes, bytearray)) for x in leaves):
        return "bytes"
    kinds = sorted({type(x).__name__ for x in leaves})
    raise TypeError(
        f"from_tensor_slices: {where} mixes {', '.join(kinds)}; a tensor holds one kind of "
        f"value (ints, floats, bools, str or bytes)"
    )


def _pack(kind: str, leaves: list[Any], where: str) -> bytes:
    if kind == "int64":
        for x in leaves:
            if not _I64_MIN <= x <= _I64_MAX:
                raise ValueError(f"from_tensor_slices: {where} holds {x}, outside int64")
        return struct.pack(f"<{len(leaves)}q", *leaves)
    if kind == "float32":
        return b"".join(struct.pack("<f", f32(x, where)) for x in leaves)
    if kind == "bool":
        return bytes(1 if x else 0 for x in leaves)
    items = [_utf8(x, where) if isinstance(x, str) else bytes(x) for x in leaves]
    return _pack_items(items)


def _pack_items(items: Sequence[bytes]) -> bytes:
    out = bytearray()
    for item in items:
        out += struct.pack("<I", len(item))
        out += item
    return bytes(out)


def f32(x: float, where: str) -> float:
    """``x`` rounded to float32 (as a Python float); too large is an error."""
    try:
        return float(struct.unpack("<f", struct.pack("<f", x))[0])
    except OverflowError:
        raise ValueError(
            f"from_tensor_slices: {where} holds {x!r}, outside float32's range (about "
            f"3.4e38); give a numpy float64 array for float64 elements"
        ) from None


def f32_text(x: float, where: str) -> float:
    """The float32 nearest ``x``, as the shortest decimal that reads back to it and is
    closest to it: what the Rust side prints for a float32 (ryu), so that the ``floats``
    form is already canonical."""
    v = f32(x, where)
    if v == 0 or math.isinf(v):
        return v
    exact = Decimal(v)
    for digits in range(1, 10):
        nearest = Decimal(f"{v:.{digits - 1}e}")
        step = Decimal(1).scaleb(nearest.adjusted() - digits + 1)
        fits = [c for c in (nearest, nearest - step, nearest + step) if _reads_as(c, v)]
        if fits:
            return float(min(fits, key=lambda c: abs(c - exact)))
    return v


def _reads_as(text: Decimal, v: float) -> bool:
    """Whether the decimal reads back as float32 ``v`` (read as the Rust side does:
    to float64, then to float32)."""
    try:
        return bool(struct.unpack("<f", struct.pack("<f", float(text)))[0] == v)
    except OverflowError:
        return False


def _list_form(values: list[Any]) -> dict[str, Any] | None:
    """The readable list form of a flat list of Python scalars of one kind, or None
    when the list needs the ``tensors`` form (nested, bools, non-finite floats)."""
    if not values:
        return {"floats": []}
    if all(type(x) is int for x in values):
        _pack("int64", values, "tensors")  # range check
        return {"ints": list(values)}
    if all(type(x) in (int, float) for x in values):
        if not all(math.isfinite(x) for x in values):
            return None  # JSON numbers cannot hold NaN or infinity
        return {"floats": [f32_text(x, "tensors") for x in values]}
    if all(type(x) is str for x in values):
        for x in values:
            _utf8(x, "tensors")
        return {"strings": list(values)}
    if all(type(x) in (bytes, bytearray) for x in values):
        return {"bytes": [list(x) for x in values]}
    return None


# numpy (kind, itemsize) -> (dtype name, little-endian layout numpy writes it in).
_FIXED = {
    ("b", 1): ("bool", "u1"),
    ("u", 1): ("uint8", "u1"),
    ("i", 8): ("int64", "<i8"),
    ("i", 4): ("int32", "<i4"),
    ("f", 4): ("float32", "<f4"),
    ("f", 8): ("float64", "<f8"),
}


def _from_array(value: Any, where: str) -> Encoded:
    import numpy as np

    arr = np.asarray(value)
    if arr.ndim == 0:
        raise ValueError(
            f"from_tensor_slices: {where} is a 0-d array, which has no first dimension to "
            f"slice; give an array of rank >= 1 (for a single element: x[np.newaxis])"
        )
    shape = tuple(int(d) for d in arr.shape)
    kind, size = arr.dtype.kind, arr.dtype.itemsize
    if (kind, size) in _FIXED:
        name, layout = _FIXED[(kind, size)]
        return Encoded(name, shape, arr.astype(layout, copy=False).tobytes(order="C"))
    items = arr.reshape(-1).tolist() if kind in "USTO" else []
    if kind in "UT" or (kind == "O" and all(isinstance(x, str) for x in items)):
        return Encoded("string", shape, _pack_items([_utf8(x, where) for x in items]))
    if kind == "S" or (kind == "O" and all(isinstance(x, (bytes, bytearray)) for x in items)):
        return Encoded("bytes", shape, _pack_items([bytes(x) for x in items]))
    if kind == "O":
        kinds = sorted({type(x).__name__ for x in items})
        raise TypeError(
            f"from_tensor_slices: {where} is an object array of {', '.join(kinds)}; an "
            f"object array must hold only str or only bytes"
        )
    hints = {"i": "x.astype(np.int64)", "u": "x.astype(np.int64)", "f": "x.astype(np.float32)"}
    hint = f" (e.g. {hints[kind]})" if kind in hints else ""
    raise TypeError(
        f"from_tensor_slices: {where} has numpy dtype {arr.dtype}, which the element model "
        f"does not have; supported: {SUPPORTED}. Convert it first{hint}"
    )


def _utf8(text: str, where: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"from_tensor_slices: {where} holds a str that cannot be encoded as UTF-8 ({e})"
        ) from None
