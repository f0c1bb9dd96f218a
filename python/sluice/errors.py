"""Sluice's exceptions: one class per kind of failure, all subclasses of `SluiceError`.

The names are tf.errors' (``NotFoundError``, ``InvalidArgumentError``, ...), one per
gRPC status code, so code written against tf.data service catches the same
names. Each also derives from the built-in exception a Python user would reach
for first (``ValueError`` for an invalid argument, ``TimeoutError`` for a
deadline, ``LookupError`` for something unknown), so ``except ValueError`` works
too. The message is the Rust side's, intact: it says what was wrong and what to do.

``UserFunctionError`` is the one that is not about Sluice: your own function in a
pipeline (``Dataset.map(fn)`` and friends) raised on a worker; it carries your
exception's traceback and where it ran.
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
    "UserFunctionError",
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


class UserFunctionError(SluiceError):
    """Your function in a pipeline failed on a worker (an exception it raised, or a
    function the worker could not load); the read ended there.

    ``str(e)`` says which stage's function failed on which worker, with which
    exception, followed by the Python traceback from the worker. The parts:

    - ``traceback``: the Python traceback as text, as the worker's Python printed
      it (its end only, if it was very long); empty when there is none.
    - ``stage``: the stage's path in the pipeline, e.g. ``"stages[2]"``.
    - ``op``: ``"map"``, ``"filter"``, ``"flat_map"`` or ``"map_batches"``.
    - ``function``: the function's reference (``"mypkg.aug:flip"``) or, for a
      function shipped by value, its name (``"<lambda>"``).
    - ``worker``: the address (``host:port``) of the worker it ran on.
    - ``error_type``: the exception's class name (``"ValueError"``), or what the
      worker's Python pool saw: ``"ProcessDied"``, ``"Timeout"``,
      ``"VersionMismatch"``, ``"NoPythonExecutor"``, ``"BadOutput"``.
    - ``phase``: ``"call"`` (it raised on an element; an ``ignore_errors()``
      stage after it would have skipped that element) or ``"load"`` (it could not
      be imported or unpickled on the worker, so the stage could not run at all).
    """

    def __init__(
        self,
        message: str,
        *,
        traceback: str = "",
        stage: str = "",
        op: str = "",
        function: str = "",
        worker: str = "",
        error_type: str = "",
        phase: str = "call",
    ) -> None:
        super().__init__(message)
        self.traceback = traceback
        self.stage = stage
        self.op = op
        self.function = function
        self.worker = worker
        self.error_type = error_type
        self.phase = phase
