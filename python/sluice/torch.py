"""``sluice.torch.IterableDataset``: a Sluice job as a PyTorch ``IterableDataset``,
with the ``state_dict()`` / ``load_state_dict()`` that torchdata's
``StatefulDataLoader`` (or a hand-written checkpoint) uses to resume mid-epoch.

**Zero-copy tensors, read-only by contract.** Sluice hands out numpy arrays that
view the bytes received from the worker (read-only: the buffer may be shared).
``torch.from_numpy`` wraps them without a copy, and PyTorch has no read-only
tensors, so it warns once per process that writing to such a tensor is undefined
behaviour. This module suppresses that one warning (only around its own first
conversion in each process, so the user's own warnings are untouched) and makes
it a rule instead: **do not modify the tensors in place** (``x += 1``, ``x[0] =
...``, in-place ops of an optimizer on input tensors); ops that make new tensors
(``x + 1``, ``.to(device)``, ``.float()`` of another dtype, ``.clone()``) are
fine. Pass ``copy=True`` to get writable copies (one copy per array).

Element structure is kept: a tuple of arrays becomes a tuple of tensors, a dict a
dict; ``bytes`` (string scalars) stay ``bytes`` and non-scalar string tensors stay
numpy object arrays of ``bytes`` (PyTorch has no string tensors).

Imports PyTorch at import (the class subclasses ``torch.utils.data``'s); ``import
sluice`` alone never does.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

try:
    import torch
    from torch.utils.data import IterableDataset as _TorchIterableDataset
    from torch.utils.data import get_worker_info
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError(
        "sluice.torch needs PyTorch, which is not installed: `pip install torch` "
        "(or read Sluice elements as numpy arrays without this module)"
    ) from e

from sluice._state import HasPosition, Position, idle_state, is_dynamic
from sluice.distribute import DistributedDataset
from sluice.errors import InvalidArgumentError

__all__ = ["IterableDataset", "to_torch"]

_NOT_WRITABLE = "The given NumPy array is not writable"

# Whether this process's one "not writable" warning has been swallowed already.
# PyTorch emits it once per process; a forked child inherits both flags.
_warning_swallowed = False


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    global _warning_swallowed
    if array.flags.writeable or _warning_swallowed:
        return torch.from_numpy(array)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_NOT_WRITABLE, category=UserWarning)
        tensor = torch.from_numpy(array)
    _warning_swallowed = True
    return tensor


def to_torch(element: Any, copy: bool = False) -> Any:
    """``element`` (as Sluice returns it) with its numpy arrays as tensors: no
    copy unless ``copy``; tuples, lists and dicts keep their structure; ``bytes``
    and string (object) arrays are returned as they are."""
    if isinstance(element, np.ndarray):
        if element.dtype == object:
            return element
        return torch.from_numpy(element.copy()) if copy else _from_numpy(element)
    if isinstance(element, tuple):
        return tuple(to_torch(e, copy) for e in element)
    if isinstance(element, list):
        return [to_torch(e, copy) for e in element]
    if isinstance(element, dict):
        return {k: to_torch(v, copy) for k, v in element.items()}
    return element


class IterableDataset(HasPosition, _TorchIterableDataset):  # type: ignore[type-arg]
    """A Sluice job read as a ``torch.utils.data.IterableDataset`` of tensors.

    Build it from a ``DistributedDataset``::

        ds = sluice.torch.IterableDataset(
            sluice.Dataset.range(1000).batch(32).distribute("distributed_epoch", service))
        loader = torch.utils.data.DataLoader(ds, batch_size=None)

    or from a ``sluice.Dataset`` and ``distribute``'s arguments:
    ``IterableDataset(dataset, "distributed_epoch", service, job_name=...)``. Elements
    are already batched by the pipeline, hence ``batch_size=None``.

    **Epochs.** Each ``iter()`` reads the next repetition of one named job: epoch
    ``k`` reads repetition ``k``. Without a ``job_name`` one is generated
    (``torch-<uuid4>``) when the object is made, so a checkpoint can name the job.
    ``set_epoch(k)`` makes the next ``iter()`` read repetition ``k``.

    **Loader processes** (``DataLoader(num_workers=n)``): each loader process
    iterates its own copy, and so is its own consumer (``get_worker_info()``):

    * DYNAMIC (``"distributed_epoch"``): all of them consume the *same* job and
      repetition, so together they read each element once;
    * an exactly-once DYNAMIC read (``exactly_once=True`` or ``"auto"``): loader
      process 0 alone reads the job, the others end their epoch at once (and
      their ``state_dict()`` says ``"idle": True``). Why: an exactly-once
      reader's epoch ends only once every record of the job is consumed, so it
      waits for the elements other live readers of the job hold; the loader
      takes from its processes in turn and asks none for more while it waits
      for one, so two readers in one loader would wait for each other for
      ever. And one reader's ``state_dict()`` at any step is a whole
      checkpoint (positions of several readers merge only when each took as
      many, which the loader's processes do only at every n-th step). The
      work is the Sluice workers'; a loader process only wraps arrays as
      tensors, so one of them keeps up;
    * OFF and the static modes: with ``n > 1`` loader process ``i`` reads its own
      job, ``<job_name>-loader<i>``, so each reads everything (two loader
      processes sharing one OFF job would split it first come, first served).

    The copies are made when the loader starts its processes. With
    ``persistent_workers=False`` (the default) that is every epoch, from this
    object, whose epoch counter the loader processes do not advance: call
    ``set_epoch(epoch)`` before each epoch, as with ``DistributedSampler``, or
    every epoch after the first reads the finished repetition 0 again (nothing).
    With ``persistent_workers=True`` each copy counts its own epochs.

    Forking is safe also in a process that runs Sluice servers (tests,
    notebooks): a forked loader process builds its own runtime. ``"forkserver"``
    and ``"spawn"`` work too (the object pickles by its configuration);
    preloading ``torch`` in the fork server
    (``get_context("forkserver").set_forkserver_preload(["torch"])``) keeps each
    epoch's process start short.

    **Checkpoint and resume.** ``state_dict()`` returns a dict (JSON-able) with
    the service, the dataset id, the processing mode, the job name, the
    repetition being read (between epochs: the next one) and the elements this
    consumer returned in it (``elements_consumed``). ``load_state_dict(state)``
    on a new object over the same dataset makes its next ``iter()`` rejoin that
    job and repetition instead of starting a new one; the epochs after it follow
    as usual. ``StatefulDataLoader`` calls both by itself (per loader process).
    What resumes, for a DYNAMIC job:

    * everything the stopped consumer had not received: the splits the
      dispatcher had not handed out and the elements waiting in the workers'
      buffers. No element is delivered twice: the split cursor is the job's,
      not the consumer's.
    * What is lost is what it had received but not returned, or had on its
      way: at most ``max_outstanding_requests`` element messages buffered in
      its reader, plus, for each task stream it had open (at most
      ``max_outstanding_requests`` at once), the bytes in flight (an 8 MiB
      HTTP/2 window) and five messages being sent or decoded. A message holds
      up to 64 elements or 4 MiB. For small elements the window alone can hold
      the rest of an epoch; for batches of MiBs it is a few batches. A clean
      ``close()`` drops the same buffers.

    **Exactly once** (``exactly_once=True``, a DYNAMIC job over a replayable
    pipeline, docs/exactly-once.md): nothing above is lost. ``state_dict()``
    also holds the consumer's record position (``"position"``, base64), and
    ``load_state_dict`` restores the job's iteration from it: every element
    the checkpointed consumer had not returned is delivered once. Each
    ``state_dict()`` of a read under way is a new checkpoint of the consumer.
    A position of another job is refused (``InvalidArgumentError``). In one
    ``DataLoader``, any ``num_workers``, ``in_order`` either way, a checkpoint
    at any step: ``StatefulDataLoader`` restores each loader process from its
    own state (process 0's is the job's only reader). With several consumers
    of the job (hosts, each with its loader), restore every resuming consumer
    from ``sluice.merge_states`` of all their states of one checkpoint (one
    step: each host's reader took as many positions): one consumer's position
    alone does not claim the records the others consumed.

    For an OFF job the workers' tasks continue where they are, with the same
    loss. Rejoining a repetition that has finished gives an empty epoch. The saved
    ``elements_consumed`` is for the user: the service needs only the job name
    and repetition, so a hand-written checkpoint may save ``state_dict()`` of
    the main-process object when it called ``set_epoch`` (loader processes'
    counts are known only to their copies, which ``StatefulDataLoader`` collects).
    """

    def __init__(
        self,
        dataset: Any,
        processing_mode: Any = None,
        service: Any = None,
        *,
        copy: bool = False,
        **distribute_args: Any,
    ) -> None:
        super().__init__()
        if isinstance(dataset, DistributedDataset):
            if processing_mode is not None or service is not None or distribute_args:
                raise InvalidArgumentError(
                    "a DistributedDataset carries its own processing_mode, service and "
                    "options: give either it alone, or a sluice.Dataset with them"
                )
            distributed = dataset
        else:
            from sluice.dataset import Dataset

            if not isinstance(dataset, Dataset):
                raise InvalidArgumentError(
                    f"expected a sluice.DistributedDataset or a sluice.Dataset, got "
                    f"{type(dataset).__name__}"
                )
            if processing_mode is None or service is None:
                raise InvalidArgumentError(
                    "a sluice.Dataset needs processing_mode and service, as for "
                    "Dataset.distribute(processing_mode, service, ...)"
                )
            distributed = dataset.distribute(processing_mode, service, **distribute_args)
        self._position = Position(distributed, "torch")
        self._copy = bool(copy)

    def _process_job_name(self) -> str | None:
        """This loader process's job, when it differs from the shared one."""
        info = get_worker_info()
        ds = self._position.dataset
        if info is None or info.num_workers <= 1 or is_dynamic(ds.processing_mode):
            return None
        if ds.num_consumers is not None or ds.cross_trainer_cache is not None:
            return None  # these reads name their consumers themselves
        return f"{self._position.job_name}-loader{info.id}"

    def _idle_process(self) -> bool:
        """Whether this is a loader process that reads nothing: an exactly-once
        DYNAMIC job is read by loader process 0 alone (see the class docstring)."""
        info = get_worker_info()
        if info is None or info.id == 0:
            return False
        return self._position.exactly_once and is_dynamic(self._position.dataset.processing_mode)

    def __iter__(self) -> Iterator[Any]:
        if self._idle_process():
            return iter(())
        position, copy = self._position, self._copy
        token = position.start_epoch(job_name=self._process_job_name())
        return (to_torch(e, copy) for e in position.elements_of(token))

    def set_epoch(self, epoch: int) -> None:
        """Makes the next ``iter()`` read repetition ``epoch`` (closing a read under
        way). Needed before each epoch with loader processes that are not
        persistent (see the class docstring)."""
        self._position.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        """The position (see the class docstring), a JSON-able dict. A loader
        process that reads nothing says so (``"idle": True``, no position):
        ``merge_states`` leaves its state out."""
        if self._idle_process():
            return idle_state(self._position.state())
        return self._position.state()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Makes the next ``iter()`` rejoin the job and repetition of
        ``state_dict`` (closing a read under way). Raises
        ``InvalidArgumentError`` for a state of another dataset or mode."""
        self._position.load(state_dict)

    def close(self) -> None:
        """Stops the read under way, if any (the position is kept)."""
        self._position.close()

    def __repr__(self) -> str:
        return (
            f"sluice.torch.IterableDataset(job_name={self.job_name!r}, "
            f"repetition={self.repetition}, copy={self._copy})"
        )
