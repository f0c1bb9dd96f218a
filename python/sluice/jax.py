"""``sluice.jax.Iterator``: a Grain-style checkpointable iterator over a Sluice job.

JAX takes numpy arrays directly (``jax.device_put``, or as arguments of a jitted
function), so this module only adds what a JAX training loop needs beyond a
plain ``for x in distributed_dataset``: ``get_state()`` / ``set_state()`` in the
shape of Grain's ``DatasetIterator``, so Orbax (or ``json.dump``) checkpoints the
input position beside the model. It imports nothing of JAX and works without JAX
installed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Self

from sluice._state import HasPosition, Position
from sluice.distribute import DistributedDataset
from sluice.errors import InvalidArgumentError

__all__ = ["Iterator"]


class Iterator(HasPosition):
    """Reads repetitions ``0 .. num_epochs-1`` of a named job, element by element,
    and can checkpoint and restore its position.

    ``dataset`` is a ``DistributedDataset`` (``ds.distribute(...)``). Without a
    ``job_name`` the iterator names the job itself (``jax-<uuid4>``), so a restore
    can rejoin it; give your own name to share the job with other processes.
    ``num_epochs``: how many repetitions to read (``None``: forever); epoch ``k``
    reads repetition ``k`` of the job. Elements are what Sluice returns: read-only
    numpy arrays (zero-copy), ``bytes``, tuples or dicts of them.

    **Checkpoint and restore.** ``get_state()`` returns a JSON-able dict: the
    service, the dataset id, the job name, the repetition being read (or next to
    read, between epochs) and the elements returned in it. A new ``Iterator`` over
    the same dataset given that dict by ``set_state`` rejoins that job and
    repetition instead of starting its own:

    * **DYNAMIC** (``"distributed_epoch"``): the epoch continues from the
      dispatcher's split cursor, so no element is read twice, and everything
      the old iterator had not received is delivered: the splits not yet
      handed out and the elements waiting in the workers' buffers. What it had
      received but not returned, or had on its way, is lost: at most
      ``max_outstanding_requests`` element messages buffered in its reader,
      plus, for each task stream it had open (at most
      ``max_outstanding_requests`` at once), the bytes in flight (an 8 MiB
      HTTP/2 window) and five messages being sent or decoded. A message holds
      up to 64 elements or 4 MiB. For small elements the window alone can hold
      the rest of an epoch; for batches of MiBs it is a few batches. A clean
      ``close()`` drops the same buffers.
    * **OFF** and the static modes: the workers' tasks continue where they are
      (each worker's copy is read first come, first served), with the same loss.

    * **Exactly once** (``exactly_once=True`` on the ``DistributedDataset``;
      docs/exactly-once.md): nothing is lost. The state also holds the
      iterator's record position (``"position"``, base64) and ``set_state``
      restores the job's iteration from it, so every element not returned
      before ``get_state()`` is delivered once. Each ``get_state()`` during an
      epoch is a new checkpoint. A position of another job is refused. With
      several hosts, give every resuming iterator ``sluice.merge_states`` of
      all hosts' states of one checkpoint.

    The element count in the state is this iterator's (it resumes counting from
    it); the service does not need it. Rejoining a repetition that has since
    finished gives an empty epoch.
    """

    def __init__(self, dataset: DistributedDataset, *, num_epochs: int | None = 1) -> None:
        if num_epochs is not None and (not isinstance(num_epochs, int) or num_epochs < 0):
            raise InvalidArgumentError(
                f"num_epochs must be an int >= 0 or None, got {num_epochs!r}"
            )
        self._position = Position(dataset, "jax")
        self._num_epochs = num_epochs
        self._token: int | None = None

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> Any:
        pos = self._position
        while True:
            if not pos.reading:
                if self._num_epochs is not None and pos.repetition >= self._num_epochs:
                    raise StopIteration
                self._token = pos.start_epoch()
            assert self._token is not None
            try:
                return pos.next(self._token)
            except StopIteration:
                continue  # the epoch ended: on to the next repetition (if any)

    def get_state(self) -> dict[str, Any]:
        """The position, as a JSON-able dict (see the class docstring)."""
        return self._position.state()

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Moves to the position ``state`` records (from ``get_state()``, possibly
        of another process): the next element comes from that job and
        repetition. Raises ``InvalidArgumentError`` for a state of another
        dataset or processing mode."""
        self._position.load(state)

    def close(self) -> None:
        """Stops reading: the reader's buffered elements are dropped. The position
        is kept: iterating again (or a ``set_state`` elsewhere) rejoins it."""
        self._position.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"sluice.jax.Iterator(job_name={self.job_name!r}, repetition={self.repetition}, "
            f"num_epochs={self._num_epochs!r})"
        )
