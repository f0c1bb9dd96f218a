"""Functions the Python-stage tests ship by reference (``"stage_fns:double"``): a
plain module, importable on the workers when ``python/tests`` is on their
``PYTHONPATH`` (the end-to-end tests set it), and by the tests themselves; and
``module_from_file``, which makes a module the workers cannot import."""

from __future__ import annotations

import contextlib
import importlib.util
import pathlib
import sys
import types
from typing import Any, Iterator

import numpy as np


def double(x: np.ndarray) -> np.ndarray:
    return x * 2


def is_even(x: np.ndarray) -> bool:
    return bool(x % 2 == 0)


def repeat_self(x: np.ndarray) -> list[np.ndarray]:
    """``x`` copies of ``x`` (0 for 0): a flat_map's varying fan-out."""
    return [x] * int(x % 4)


def square_batch(batch: np.ndarray) -> np.ndarray:
    return batch * batch


def fails_on_sevens(x: np.ndarray) -> np.ndarray:
    if int(x) % 7 == 3:
        raise ValueError(f"element {int(x)} is unlucky")  # the line the traceback shows
    return x + 1


class Scaler:
    """A class whose static method is referenced as ``stage_fns:Scaler.triple``."""

    @staticmethod
    def triple(x: Any) -> Any:
        return x * 3


@contextlib.contextmanager
def module_from_file(path: pathlib.Path) -> Iterator[types.ModuleType]:
    """Imports the file `path` as a module of the user's that no other process
    can import (it is not on any path), for as long as the block runs."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[path.stem]
