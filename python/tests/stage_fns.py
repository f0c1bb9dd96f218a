"""Functions the Python-stage tests ship by reference (``"stage_fns:double"``): a
plain module, importable on the workers when ``python/tests`` is on their
``PYTHONPATH`` (the end-to-end tests set it), and by the tests themselves."""

from __future__ import annotations

from typing import Any

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
