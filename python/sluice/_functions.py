"""How a user's Python function travels in the spec: by reference or by value.

A Python stage (``Dataset.map(fn)`` and friends, the spec's ``python`` stage, see
dataset/src/python.rs) names its function in one of two ways:

- **by reference**, ``{"ref": "package.module:function"}``: the workers import it,
  so the module must be installed there; any Python version may run it;
- **by value**, ``{"pickle": {"name": ..., "data": <base64>}}``: cloudpickle's bytes
  of the function, for lambdas, closures and functions of the trainer's own script;
  only a worker running the same Python minor version can load them.

Why a module of its own: deciding which form a value takes, and pickling it, is the
only part of the builder that runs user code (cloudpickle walks the function's
globals and closure), so it lives apart from the spec's plain fields. cloudpickle is
imported only when something is shipped by value.

A function shipped by value takes the code of its own module with it when that
module is the user's (not the standard library or an installed package): pytest
and ``python -m`` import the user's files as modules the workers cannot import,
and cloudpickle would otherwise pickle such functions as references to them.
"""

from __future__ import annotations

import base64
import importlib
import numbers
import platform
import sys
import sysconfig
import threading
import types
from typing import Any

from sluice._fields import MAX_BATCH_SIZE, Stage, check_bool, check_int, parallel_calls
from sluice.errors import InvalidArgumentError

__all__ = ["by_reference", "is_python", "python_stage", "python_version"]

MAX_RETRIES = 1
"""At most one retry of an element whose Python process crashed or hung
(``MAX_PY_RETRIES`` in dataset/src/python.rs)."""

MAX_PICKLE_BYTES = 8 << 20
"""The most bytes a function pickled by value may take: its base64 (a third more)
must leave room in the spec, which the dispatchers replicate as one command of at
most 16 MiB."""

_REGISTRY_LOCK = threading.Lock()


def python_version() -> str:
    """The version this client runs (``3.11.7``), recorded in every Python stage."""
    return platform.python_version()


def _is_identifier_path(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def check_reference(op: str, ref: str) -> str:
    """``package.module:qualname`` (dotted identifiers on both sides of one ``:``)."""
    module, sep, name = ref.partition(":")
    if not sep or not _is_identifier_path(module) or not _is_identifier_path(name):
        raise InvalidArgumentError(
            f"{op}: {ref!r} is not a function reference; write 'package.module:function' "
            f"(a function importable on the workers), or pass the function itself to "
            f"ship it by value"
        )
    return ref


def function_name(fn: Any) -> str:
    """A name for messages: ``<lambda>``, ``tokenize``, ``Augment.flip``."""
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return str(name) if name else type(fn).__qualname__


def by_reference(fn: Any) -> str:
    """The reference ``"module:qualname"`` of an importable module-level function,
    for ``Dataset.map`` and friends to ship it by reference: the workers then import
    it (its module must be installed there) instead of unpickling it.

    Refuses what a worker could not import: lambdas, functions defined inside other
    functions (``<locals>``), functions of the ``__main__`` script, and objects that
    are not found under their own name in their module. Ship those by value (pass
    the function itself) or move them into a module installed on the workers."""
    if not callable(fn):
        raise TypeError(f"by_reference: expected a function, got {fn!r}")
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    name = function_name(fn)
    hint = (
        "pass the function itself to ship it by value, or move it to a module installed "
        "on the workers"
    )
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise InvalidArgumentError(
            f"by_reference: {fn!r} has no module and qualified name to import it by; {hint}"
        )
    if name == "<lambda>" or "<lambda>" in qualname:
        raise InvalidArgumentError(f"by_reference: a lambda has no importable name; {hint}")
    if "<locals>" in qualname:
        raise InvalidArgumentError(
            f"by_reference: {qualname} is defined inside a function, so it has no "
            f"importable name; {hint}"
        )
    if module == "__main__":
        raise InvalidArgumentError(
            f"by_reference: {qualname} is defined in the __main__ script, which the "
            f"workers cannot import; {hint}"
        )
    try:
        found: Any = importlib.import_module(module)
    except ImportError as e:
        raise InvalidArgumentError(
            f"by_reference: module {module!r} of {qualname} is not importable here ({e}); {hint}"
        ) from e
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if found is not fn:
        raise InvalidArgumentError(
            f"by_reference: {module}:{qualname} does not name {fn!r} (it is not found "
            f"under that name in its module); {hint}"
        )
    return check_reference("by_reference", f"{module}:{qualname}")


def python_function(op: str, fn: Any) -> Stage:
    """The spec's ``fn`` of a Python stage: a reference string as it is, a callable
    pickled by value."""
    if isinstance(fn, str):
        return {"ref": check_reference(op, fn)}
    if not callable(fn):
        raise TypeError(
            f"{op}: expected a function (a callable, or a 'package.module:function' "
            f"reference), got {fn!r}"
        )
    return {"pickle": {"name": function_name(fn), "data": _pickle(op, fn)}}


def _pickle(op: str, fn: Any) -> str:
    import cloudpickle  # only when shipping by value

    module = _users_package(getattr(fn, "__module__", None))
    # cloudpickle's registry is process-wide: one dump at a time registers and
    # unregisters, so a dump on another thread never sees the module half-registered.
    with _REGISTRY_LOCK:
        by_value = (
            module is not None
            and module.__name__ not in cloudpickle.list_registry_pickle_by_value()
        )
        if by_value:
            cloudpickle.register_pickle_by_value(module)
        try:
            data = cloudpickle.dumps(fn)
        except Exception as e:
            raise InvalidArgumentError(
                f"{op}: cannot pickle {function_name(fn)} with cloudpickle: "
                f"{type(e).__name__}: {e}; make what it uses picklable, or ship it by "
                f"reference ('package.module:function', see sluice.by_reference)"
            ) from e
        finally:
            if by_value:
                cloudpickle.unregister_pickle_by_value(module)
    if len(data) > MAX_PICKLE_BYTES:
        raise InvalidArgumentError(
            f"{op}: {function_name(fn)} pickles to {len(data) / 2**20:.1f} MiB, over the "
            f"{MAX_PICKLE_BYTES >> 20} MiB a function shipped by value may take (the spec "
            f"is stored by the dispatchers): it carries what it captures (closure variables, "
            f"globals of its module, e.g. an array); load large data on the worker inside "
            f"the function (from a file) or ship it by reference"
        )
    return base64.b64encode(data).decode("ascii")


def _installed_roots() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(
        p for p in (paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")) if p
    )


def _users_package(name: str | None) -> types.ModuleType | None:
    """The user's module or package that defines ``name`` (its top-level package
    when that is the user's too, so helpers in sibling modules travel as well);
    ``None`` for anything the workers import by name."""
    module = sys.modules.get(name or "")
    if module is None or not _is_users_module(module):
        return None
    top = sys.modules.get(module.__name__.partition(".")[0])
    return top if top is not None and _is_users_module(top) else module


def _is_users_module(module: types.ModuleType) -> bool:
    """A module of the user's own files: not built in, not the standard library or
    an installed package (those the workers import by name), not Sluice itself."""
    name = module.__name__
    if name == "__main__" or name == "sluice" or name.startswith("sluice."):
        return False
    path = getattr(module, "__file__", None)
    if not path:
        return False
    return not any(path.startswith(root) for root in _installed_roots())


def is_python(fn: Any) -> bool:
    """Whether ``fn`` names a Python function (a callable, or a reference with a
    ``:``) rather than a registered built-in (a name without one)."""
    return (callable(fn) and not isinstance(fn, str)) or (isinstance(fn, str) and ":" in fn)


def python_stage(
    op: str,
    fn: Any,
    args: tuple[Any, ...] = (),
    *,
    num_parallel_calls: Any = None,
    deterministic: Any = None,
    retries: Any = 0,
    batch_size: Any = None,
    drop_remainder: Any = False,
) -> Stage:
    """The fields of a ``python`` stage, in the order (and with the defaults left
    out) of the Rust parser's canonical JSON."""
    if op == "map_batches" and isinstance(fn, str) and ":" not in fn:
        raise InvalidArgumentError(
            f"map_batches runs a Python function; {fn!r} is not one: pass a callable or a "
            f"'package.module:function' reference (built-in functions go in map)"
        )
    if args:
        raise TypeError(
            f"{op}: constant arguments go with built-in function names only; bind them "
            f"in the Python function (a closure or functools.partial), and give "
            f"num_parallel_calls and deterministic by keyword"
        )
    fields: Stage = {"op": op, "fn": python_function(op, fn), "python": python_version()}
    calls = parallel_calls(op, num_parallel_calls)
    if calls != 1:
        fields["num_parallel_calls"] = calls
    if deterministic is not None and not check_bool(f"{op}: deterministic", deterministic):
        fields["deterministic"] = False
    if op == "map_batches":
        if isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral):
            raise TypeError(f"map_batches: batch_size must be an int, got {batch_size!r}")
        size = int(batch_size)
        if not 1 <= size <= MAX_BATCH_SIZE:
            raise InvalidArgumentError(
                f"map_batches: batch_size must be in [1, {MAX_BATCH_SIZE}] (elements per "
                f"call), got {size}"
            )
        fields["batch_size"] = size
        if check_bool("map_batches: drop_remainder", drop_remainder):
            fields["drop_remainder"] = True
    retries = check_int(f"{op}: retries", retries, 0, MAX_RETRIES)
    if retries:
        fields["retries"] = retries
    return fields


def no_retries(op: str, retries: Any) -> None:
    """Refuses ``retries`` for a built-in function (they run in the worker, in Rust)."""
    if retries != 0 or isinstance(retries, bool):
        raise TypeError(
            f"{op}: retries goes with Python functions only (a built-in function runs in "
            f"the worker itself, where no Python process can crash)"
        )
