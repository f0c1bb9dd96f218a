"""Sluice's exceptions: one class per kind of failure, all subclasses of `SluiceError`.

The names are tf.errors' (``NotFoundError``, ``InvalidArgumentError``, ...), one per
gRPC status code, so code written against tf.data service catches the same
names. Each also derives from the built-in exception a Python user would reach
for first (``ValueError`` for an invalid argument, ``TimeoutError`` for a
deadline, ``LookupError`` for something unknown), so ``except ValueError`` works
too. The message is the Rust side's, intact: it says what was wrong and what to do.
"""

from __future__ import annotations

__all__ = [
    "SluiceError",
    "CancelledError",
    "UnknownError",
    "InvalidArgumentError",
    "DeadlineExceededError",
    "NotFoundError",
    "AlreadyExistsError",
    "PermissionDeniedError",
    "ResourceExhaustedError",
    "FailedPreconditionError",
    "AbortedError",
    "OutOfRangeError",
    "UnimplementedError",
    "InternalError",
    "UnavailableError",
    "DataLossError",
    "UnauthenticatedError",
]


class SluiceError(Exception):
    """Base class of every error Sluice raises."""


class CancelledError(SluiceError):
    """The operation was cancelled."""


class UnknownError(SluiceError):
    """An error of no known kind (the message says what happened)."""


class InvalidArgumentError(SluiceError, ValueError):
    """A malformed dataset spec, a bad option, a conflicting job parameter."""


class DeadlineExceededError(SluiceError, TimeoutError):
    """A call (e.g. ``next(timeout=...)``) did not finish in time."""


class NotFoundError(SluiceError, LookupError):
    """An unknown dataset, job, iteration or task id."""


class AlreadyExistsError(SluiceError):
    """Something with this id exists already, with a different definition."""


class PermissionDeniedError(SluiceError):
    """The caller may not do this."""


class ResourceExhaustedError(SluiceError):
    """A bound was reached (message size, buffer, memory)."""


class FailedPreconditionError(SluiceError):
    """The system is not in a state where this can run (e.g. an object used after fork)."""


class AbortedError(SluiceError):
    """The operation was aborted (e.g. by a concurrent change); retrying may work."""


class OutOfRangeError(SluiceError):
    """Read past the end."""


class UnimplementedError(SluiceError):
    """Not supported by this version."""


class InternalError(SluiceError):
    """A broken invariant inside Sluice: please report it with the message."""


class UnavailableError(SluiceError, ConnectionError):
    """A dispatcher or worker could not be reached before the retry deadline."""


class DataLossError(SluiceError):
    """Data was lost or corrupted (e.g. a corrupt record or journal)."""


class UnauthenticatedError(SluiceError):
    """The request carried no valid credential."""
