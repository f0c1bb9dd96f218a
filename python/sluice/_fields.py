"""The values of spec fields, checked where the user gives them.

``Dataset``'s methods use these to turn Python arguments into the spec's field
values: ints within the field's range, flags, function calls with JSON-able
constant arguments, file lists, ``parse_example`` features. A wrong argument is a
``TypeError`` or ``ValueError`` naming the method and the argument, raised at the
call, not later when the service parses the spec.
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from typing import Any, Union

AUTOTUNE: int = -1
"""``num_parallel_calls=AUTOTUNE`` (tf.data's value, -1): one thread per core on
the worker (the spec's ``0``). Sluice has no other AUTOTUNE."""

SHARD_HINT: int = -1
"""``shard(SHARD_HINT, SHARD_HINT)``: a placeholder that HINT sharding replaces with
(number of workers, worker index); elsewhere it means one shard. tf.data's value (-1)."""

# The spec's bounds (dataset/src/def.rs): int64 and uint64 fields, the most threads
# a stage may start, the most inputs an interleave may keep open, the most elements
# a batch stacks (dataset/src/bounds.rs), the dtypes a tf.train.Feature list holds.
I64 = (-(2**63), 2**63 - 1)
U64_MAX = 2**64 - 1
MAX_PARALLEL_CALLS = 64
MAX_CYCLE_LENGTH = 1024
MAX_BATCH_SIZE = 1 << 16
FEATURE_DTYPES = ("int64", "float32", "bytes", "string")

Stage = dict[str, Any]
"""A stage, or a field holding an object, as written in the spec."""
Filenames = Union[str, "os.PathLike[str]", Sequence[Union[str, "os.PathLike[str]"]]]


def check_int(name: str, value: Any, low: int, high: int) -> int:
    """An int (Python's or numpy's, not a bool) in ``[low, high]``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not low <= int(value) <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return int(value)


def check_count(name: str, value: Any, minimum: int = 0) -> int:
    """A uint64 field: a non-negative int (at least ``minimum``)."""
    return check_int(name, value, minimum, U64_MAX)


def check_bool(name: str, value: Any) -> bool:
    """A flag: exactly True or False (1 and 0 are refused, so mistakes show)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def fn_arg(where: str, value: Any) -> int | float | str:
    """A constant function argument: an int64, a finite float or a str."""
    if isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return check_int(where, value, *I64)
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        if not math.isfinite(float(value)):
            raise ValueError(f"{where} must be finite (JSON has no NaN or infinity), got {value}")
        return float(value)
    raise TypeError(f"{where} must be an int, a float or a str, got {value!r}")


def fn_call(op: str, what: str, name: Any, args: Sequence[Any]) -> Stage:
    """``{"fn": name, "args": [...]}``, ``args`` left out when empty (as the spec does)."""
    if callable(name) and not isinstance(name, str):
        raise TypeError(
            f"{op} takes the name of a registered {what} function, e.g. {EXAMPLES[what]}; "
            f"Python functions go in map, filter, flat_map and map_batches"
        )
    if not isinstance(name, str) or not name:
        raise TypeError(
            f"{op}: the function must be a Python function or the non-empty name of a "
            f"registered function (str), got {name!r}"
        )
    spec: Stage = {"fn": name}
    if args:
        spec["args"] = [fn_arg(f"{op} argument {i}", a) for i, a in enumerate(args)]
    return spec


EXAMPLES = {
    "map": 'ds.map("add", 1) (built-ins: identity, square, negate, add, mul, to_string, '
    "decode_png, decode_jpeg, center_crop, resize, random_resized_crop, random_flip, "
    "normalize)",
    "filter": 'ds.filter("mod_eq", 2, 0) (built-ins: mod_eq, lt, gt, eq)',
    "dataset": 'ds.interleave("tfrecord", cycle_length=4) (built-ins: tfrecord, '
    "tfrecord_skip_corrupt, text_lines, webdataset)",
}


def parallel_calls(op: str, value: Any) -> int:
    """``num_parallel_calls``: None = 1, AUTOTUNE = 0 (one thread per core)."""
    if value is None:
        return 1
    if value == AUTOTUNE and not isinstance(value, bool):
        return 0
    return check_int(f"{op}: num_parallel_calls", value, 0, MAX_PARALLEL_CALLS)


def file_names(op: str, filenames: Filenames) -> list[str]:
    """One file name or a list of them, as a non-empty list of str."""
    names = [filenames] if isinstance(filenames, (str, os.PathLike)) else list(filenames)
    if not names:
        raise ValueError(f"{op}: filenames is empty; give at least one file name")
    out = []
    for f in names:
        if not isinstance(f, (str, os.PathLike)):
            raise TypeError(f"{op}: file names must be str or path-like, got {f!r}")
        out.append(os.fspath(f))
    return out


def shard_arg(name: str, value: Any, minimum: int) -> int | str:
    """A ``shard`` field: a count, or ``SHARD_HINT`` (-1 or the spec's string)."""
    if value == "SHARD_HINT" or (value == SHARD_HINT and not isinstance(value, (bool, str))):
        return "SHARD_HINT"
    return check_count(name, value, minimum)


def feature(name: Any, spec: Any) -> Stage:
    """One ``parse_example`` feature: ``{"name", "dtype", "shape"?, "default"?}``."""
    where = f"parse_example: feature {name!r}"
    if not isinstance(name, str) or not name:
        raise TypeError(f"parse_example: feature names must be non-empty str, got {name!r}")
    if isinstance(spec, str):
        spec = {"dtype": spec}
    if not isinstance(spec, Mapping):
        raise TypeError(
            f'{where}: give a dtype name or a dict {{"dtype": ..., "shape": ..., "default": '
            f"...}}, got {spec!r}"
        )
    unknown = set(spec) - {"dtype", "shape", "default"}
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)}; known: dtype, shape, default")
    dtype = spec.get("dtype")
    if dtype not in FEATURE_DTYPES:
        raise ValueError(
            f"{where}: dtype must be one of {', '.join(FEATURE_DTYPES)}, got {dtype!r}"
        )
    out: Stage = {"name": name, "dtype": dtype}
    if spec.get("shape") is not None:
        shape = spec["shape"]
        if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
            raise TypeError(f"{where}: shape must be a list of ints, got {shape!r}")
        out["shape"] = [check_count(f"{where}: shape[{i}]", d) for i, d in enumerate(shape)]
    if spec.get("default") is not None:
        out["default"] = fn_arg(f"{where}: default", spec["default"])
    return out


def features_spec(features: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[Stage]:
    """``parse_example``'s features: a dict of name to spec, or the spec's list of
    ``{"name": ..., ...}`` dicts; non-empty, no name twice."""
    if isinstance(features, Mapping):
        items = list(features.items())
    elif isinstance(features, Sequence) and not isinstance(features, str):
        items = []
        for f in features:
            if not isinstance(f, Mapping) or "name" not in f:
                raise TypeError(
                    f'parse_example: a feature list holds {{"name": ..., "dtype": ...}} '
                    f"dicts, got {f!r}"
                )
            items.append((f["name"], {k: v for k, v in f.items() if k != "name"}))
    else:
        raise TypeError(f"parse_example: features must be a dict, got {features!r}")
    if not items:
        raise ValueError("parse_example: features is empty; list at least one feature")
    names = [n for n, _ in items]
    for i, n in enumerate(names):
        if n in names[:i]:
            raise ValueError(f"parse_example: feature {n!r} is listed twice")
    return [feature(n, s) for n, s in items]


def spec_stages(spec: Any) -> list[Stage]:
    """The stages of a spec given as a dict (``{"stages": [...]}``), as JSON data:
    a list of one-key dicts (the service checks the rest when it is registered)."""
    if not isinstance(spec, Mapping) or set(spec) != {"stages"}:
        text = repr(spec)
        text = text if len(text) <= 400 else text[:397] + "..."
        raise ValueError(f'a dataset spec is a dict {{"stages": [...]}}, got {text}')
    try:
        data = json.loads(json.dumps(spec["stages"], allow_nan=False))
    except (TypeError, ValueError) as e:
        raise ValueError(f"the dataset spec is not JSON data: {e}") from None
    if not isinstance(data, list) or not all(isinstance(s, dict) and len(s) == 1 for s in data):
        raise ValueError(
            'a dataset spec\'s "stages" is a list of stages, each a dict with one key '
            '(the op), e.g. [{"range": {"stop": 10}}]'
        )
    return data
