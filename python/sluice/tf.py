"""``sluice.tf.to_dataset``: a Sluice read as a ``tf.data.Dataset``, for Keras
``fit`` and other code that takes one.

TensorFlow is imported only when ``to_dataset`` is called: ``import sluice`` (and
this module) work without it. The elements go through
``tf.data.Dataset.from_generator``, which copies each numpy array into a
TensorFlow tensor: the price of handing elements to TensorFlow's runtime.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from sluice.distribute import DistributedDataset
from sluice.errors import InvalidArgumentError

__all__ = ["signature_of", "to_dataset"]


def _tensorflow() -> Any:
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError(
            "sluice.tf.to_dataset needs TensorFlow, which is not installed: "
            "`pip install tensorflow-cpu` (or `tensorflow`)"
        ) from e
    return tf


def signature_of(element: Any) -> Any:
    """The ``tf.TensorSpec`` structure of ``element``, for ``output_signature``:
    each numpy array's dtype and shape with the first dimension left open (a
    pipeline's last batch may be smaller), ``bytes`` and string arrays as
    ``tf.string``, tuples and dicts kept."""
    tf = _tensorflow()
    if isinstance(element, (bytes, str)):
        return tf.TensorSpec(shape=(), dtype=tf.string)
    if isinstance(element, np.ndarray):
        shape = (None, *element.shape[1:]) if element.ndim else ()
        dtype = tf.string if element.dtype == object else tf.as_dtype(element.dtype)
        return tf.TensorSpec(shape=shape, dtype=dtype)
    if isinstance(element, tuple):
        return tuple(signature_of(e) for e in element)
    if isinstance(element, dict):
        return {k: signature_of(v) for k, v in element.items()}
    raise InvalidArgumentError(
        f"cannot derive a tf.TensorSpec from a {type(element).__name__}; pass output_signature"
    )


def to_dataset(distributed_dataset: DistributedDataset, output_signature: Any = None) -> Any:
    """A ``tf.data.Dataset`` of ``distributed_dataset``'s elements.

    Each iteration of the returned dataset (each Keras epoch) starts one read of
    ``distributed_dataset`` (for a named job: its next repetition).
    ``output_signature`` (a structure of ``tf.TensorSpec``) is taken from the first
    element when not given (see ``signature_of``): that starts the first read at
    once, and the first iteration continues it. Give it for elements whose shapes
    vary beyond the first dimension.

    Raises ``ImportError`` (naming ``pip install tensorflow-cpu``) without
    TensorFlow, and ``InvalidArgumentError`` when the signature must be derived
    and the read is empty.
    """
    tf = _tensorflow()
    if not isinstance(distributed_dataset, DistributedDataset):
        raise InvalidArgumentError(
            f"expected a sluice.DistributedDataset (ds.distribute(...)), got "
            f"{type(distributed_dataset).__name__}"
        )
    pending: list[tuple[Any, Any]] = []  # the first read and its first element
    if output_signature is None:
        reader = distributed_dataset.read()
        first = reader.next()
        if first is None:
            reader.close()
            raise InvalidArgumentError(
                "the first read of the dataset is empty, so its element signature cannot "
                "be derived: pass output_signature"
            )
        output_signature = signature_of(first)
        pending.append((reader, first))

    def generate() -> Iterator[Any]:
        if pending:
            reader, first = pending.pop()
            yield first
        else:
            reader = distributed_dataset.read()
        try:
            yield from reader
        finally:
            reader.close()

    return tf.data.Dataset.from_generator(generate, output_signature=output_signature)
