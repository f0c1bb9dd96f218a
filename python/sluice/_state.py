"""Where a consumer is in a named job, as a checkpointable position: the logic the
framework adapters (``sluice.torch``, ``sluice.jax``) share.

Why a job *name* is the whole trick: the dispatcher keeps a named job's
iterations (one per repetition) and, in DYNAMIC mode, the split cursor of each.
A consumer that reads the same job name and repetition again joins the same
iteration and continues from that cursor. So a checkpoint needs no element
positions, only *which* job and repetition to rejoin; the element count it also
records is for the user (and progress bars), not for the service.

A position is ``(job_name, repetition, elements)``:

* between epochs it names the repetition the next epoch reads (``elements`` 0);
* during an epoch, the repetition being read and how many of its elements this
  consumer has returned.

``Position.state()`` is a plain JSON-able dict (strings, ints, a list of
strings), so Grain/Orbax, ``torch.save`` and ``json.dumps`` all store it.

**Exactly-once reads** (``exactly_once=True``, docs/exactly-once.md) add the
reader's record position under ``"position"`` (base64 of
``reader.position()``'s bytes; ``None`` between epochs): restoring it delivers
every element the checkpointed consumers had not consumed, once, with nothing
lost from their buffers. Each ``state()`` of an open exactly-once read is a new
checkpoint of the consumer (its generation moves on). Older states (without
``"position"``) still load: they rejoin the job as above.
"""

from __future__ import annotations

import base64
import binascii
import copy
import os
import uuid
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from sluice import _native
from sluice.distribute import DistributedDataset
from sluice.errors import InvalidArgumentError

__all__ = ["STATE_VERSION", "Position", "idle_state", "is_dynamic", "merge_states"]

STATE_VERSION = 1
"""Version of the state dict's layout; a state of another version is refused."""

_KEYS = (
    "version",
    "service",
    "dataset_id",
    "processing_mode",
    "job_name",
    "repetition",
    "elements_consumed",
)


def is_dynamic(processing_mode: str) -> bool:
    """Whether ``processing_mode`` (any spelling the Rust side accepts) is DYNAMIC."""
    return processing_mode.lower() in ("dynamic", "distributed_epoch")


def _named(dataset: DistributedDataset, prefix: str) -> DistributedDataset:
    """A copy of ``dataset`` with a job name: the user's, or a fresh unique one, so
    that a later process can rejoin the job (an anonymous job cannot be)."""
    if not isinstance(dataset, DistributedDataset):
        raise InvalidArgumentError(
            f"expected a sluice.DistributedDataset (from ds.distribute(...) or "
            f"sluice.from_dataset_id(...)), got {type(dataset).__name__}"
        )
    named = copy.copy(dataset)
    if not named.job_name:
        named.job_name = f"{prefix}-{uuid.uuid4().hex}"
    return named


class Position:
    """One consumer's position in a named job, and the reader of its current epoch.

    Not thread-safe: one thread iterates (as a data loader does). A copy made by
    ``fork()`` or pickling (a ``DataLoader`` worker's) keeps the position but not
    the reader, which belongs to the original: its next epoch rejoins the
    repetition the original was at.
    """

    def __init__(self, dataset: DistributedDataset, job_prefix: str) -> None:
        # A job the user named is theirs: a position of another job is refused.
        self._user_job = dataset.job_name if isinstance(dataset, DistributedDataset) else None
        self.dataset = _named(dataset, job_prefix)
        # Exactly-once reads: the position the next epoch restores from (bytes).
        self._restore: bytes | None = None
        self.repetition = 0
        self.elements = 0
        self._reader: _native.Reader | None = None
        self._pid = os.getpid()
        # Incremented whenever the current reader changes, so an epoch iterator
        # left over from before can tell it is stale.
        self._epoch = 0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_reader"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._pid = os.getpid()

    def _own_reader(self) -> _native.Reader | None:
        """The open reader, if this process opened it (after a fork the parent's
        is left alone: the native side leaks it in the child)."""
        if self._pid != os.getpid():
            self._reader, self._pid = None, os.getpid()
        return self._reader

    @property
    def job_name(self) -> str:
        """The job's name (given by the user or generated)."""
        assert self.dataset.job_name is not None
        return self.dataset.job_name

    @property
    def reading(self) -> bool:
        """Whether an epoch is under way (a reader is open)."""
        return self._own_reader() is not None

    def set_epoch(self, repetition: int) -> None:
        """Makes the next epoch read ``repetition`` from its start (as far as the
        job is concerned: a repetition others already read is not restarted)."""
        if not isinstance(repetition, int) or repetition < 0:
            raise InvalidArgumentError(f"epoch must be an int >= 0, got {repetition!r}")
        self.close()
        self.repetition = repetition
        self.elements = 0
        self._restore = None

    def start_epoch(self, job_name: str | None = None) -> int:
        """Opens the reader of the next epoch and returns its token (see ``next``).

        From between epochs, that is ``repetition`` (rejoined if it exists: after
        ``load``, that continues a checkpointed epoch). From inside an epoch, the
        current one is abandoned and the next repetition starts. ``job_name``
        overrides the job read (a per-process job), not the one recorded.
        """
        if self._own_reader() is not None:
            self._finish_epoch()
        target = self.dataset
        if job_name is not None and job_name != target.job_name:
            target = copy.copy(target)
            target.job_name = job_name
        restore, self._restore = self._restore, None
        self._reader = target.read(repetition=self.repetition, restore_from=restore)
        self._epoch += 1
        return self._epoch

    def next(self, token: int) -> Any:
        """The next element of epoch ``token``; ``StopIteration`` at its end (or if
        another epoch started since: the old one is over for this consumer)."""
        reader = self._own_reader()
        if token != self._epoch or reader is None:
            raise StopIteration
        element = reader.next()
        if element is None:
            self._finish_epoch()
            raise StopIteration
        self.elements += 1
        return element

    def elements_of(self, token: int) -> Iterator[Any]:
        """Epoch ``token``'s elements, as an iterator."""
        while True:
            try:
                yield self.next(token)
            except StopIteration:
                return

    def _finish_epoch(self) -> None:
        self.close()
        self.repetition += 1
        self.elements = 0

    def close(self) -> None:
        """Closes the current reader (its buffered elements are dropped); the
        position stays where it is, so the next epoch rejoins the same repetition."""
        reader, self._reader = self._own_reader(), None
        self._epoch += 1
        if reader is not None:
            reader.close()

    @property
    def exactly_once(self) -> bool:
        """Whether the dataset asks for exactly-once (``True``, or ``"auto"``:
        where the job can have it; the reader's ``delivery`` says what it got)."""
        return getattr(self.dataset, "exactly_once", False) in (True, "auto")

    def state(self) -> dict[str, Any]:
        """The position as a JSON-able dict (see the module docstring)."""
        state = {
            "version": STATE_VERSION,
            "service": list(self.dataset.service),
            "dataset_id": self.dataset._registered_id(),
            "processing_mode": self.dataset.processing_mode,
            "job_name": self.job_name,
            "repetition": self.repetition,
            "elements_consumed": self.elements,
        }
        if self.exactly_once:
            reader = self._own_reader()
            if reader is None:
                position = self._restore
            elif reader.delivery == "exactly_once":
                position = reader.position()
            else:  # exactly_once="auto" fell back to at-most-once
                position = None
            state["position"] = (
                None if position is None else base64.b64encode(position).decode("ascii")
            )
        return state

    def _position_of(self, state: Mapping[str, Any]) -> bytes | None:
        """The exactly-once position a state carries, checked against the state
        and this reader; ``None`` for a state without one."""
        encoded = state.get("position")
        if encoded is None:
            return None
        if not self.exactly_once:
            raise InvalidArgumentError(
                "the state holds an exactly-once position, and this reader is not "
                "exactly-once: build it with exactly_once=True to restore it"
            )
        if not isinstance(encoded, str):
            raise InvalidArgumentError(
                f"state position must be a base64 string, got {type(encoded).__name__}"
            )
        try:
            position = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError) as e:
            raise InvalidArgumentError(f"state position is not valid base64: {e}") from None
        info = _native.position_info(position)
        if info["job_name"] != state["job_name"]:
            raise InvalidArgumentError(
                f"the state's position is of job {info['job_name']!r}, and the state names "
                f"job {state['job_name']!r}: the state was edited or mixed up"
            )
        if self._user_job is not None and info["job_name"] != self._user_job:
            raise InvalidArgumentError(
                f"the state's position is of job {info['job_name']!r}, and this reader reads "
                f"job {self._user_job!r}: restore it into a reader of job_name="
                f"{info['job_name']!r}"
            )
        if info["repetition"] != state["repetition"] or info["dataset_id"] != state["dataset_id"]:
            raise InvalidArgumentError(
                f"the state's position is of dataset {info['dataset_id']!r} repetition "
                f"{info['repetition']}, and the state of dataset {state['dataset_id']!r} "
                f"repetition {state['repetition']}: the state was edited or mixed up"
            )
        return position

    def load(self, state: Mapping[str, Any]) -> None:
        """Moves to the position ``state`` records; the next epoch rejoins its job
        and repetition. The service read is this object's (the state's is kept
        for reference): the dispatchers may have moved since the checkpoint.
        Raises ``InvalidArgumentError`` for a state of another dataset or mode."""
        if not isinstance(state, Mapping):
            raise InvalidArgumentError(f"a Sluice state is a dict, got {type(state).__name__}")
        missing = [k for k in _KEYS if k not in state]
        if missing:
            raise InvalidArgumentError(
                f"not a Sluice reader state: missing {', '.join(missing)} (expected the dict "
                f"state_dict()/get_state() returned)"
            )
        if state["version"] != STATE_VERSION:
            raise InvalidArgumentError(
                f"Sluice reader state version {state['version']!r} is not supported "
                f"(this version reads {STATE_VERSION})"
            )
        ours = self.dataset._registered_id()
        if state["dataset_id"] != ours:
            raise InvalidArgumentError(
                f"the state is of dataset {state['dataset_id']!r} but this reader reads "
                f"{ours!r}: build the reader from the same pipeline (or dataset id) as the "
                f"one checkpointed"
            )
        if is_dynamic(state["processing_mode"]) != is_dynamic(self.dataset.processing_mode):
            raise InvalidArgumentError(
                f"the state is of a {state['processing_mode']!r} job but this reader's "
                f"processing_mode is {self.dataset.processing_mode!r}"
            )
        job_name, repetition = state["job_name"], state["repetition"]
        elements = state["elements_consumed"]
        if not isinstance(job_name, str) or not job_name:
            raise InvalidArgumentError(
                f"state job_name must be a non-empty string, got {job_name!r}"
            )
        for key, value in (("repetition", repetition), ("elements_consumed", elements)):
            if not isinstance(value, int) or value < 0:
                raise InvalidArgumentError(f"state {key} must be an int >= 0, got {value!r}")
        position = self._position_of(state)
        self.close()
        self.dataset.job_name = job_name
        self.repetition = repetition
        self.elements = elements
        self._restore = position


IDLE = "idle"
"""The key that marks the state of a consumer that reads nothing (a PyTorch loader
process other than 0 of an exactly-once job): ``merge_states`` leaves it out."""


def idle_state(state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as the state of a consumer that reads nothing: no position."""
    if "position" in state:
        state["position"] = None
    state[IDLE] = True
    return state


def merge_states(states: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One checkpoint's states of all consumers of an exactly-once job (each
    consumer's ``state_dict()`` / ``get_state()``, e.g. every host's or loader
    process's), as one state whose position is their union
    (``sluice.merge_positions``). Give it to every consumer that resumes, any
    number of them: they restore the job together and get every element the
    checkpointed consumers had not returned, once. (Restoring each consumer
    from its own position instead would not claim the others' records.)
    Raises ``InvalidArgumentError`` for states of different jobs, datasets,
    repetitions or checkpoints. States of consumers that read nothing
    (``"idle"``: PyTorch loader processes other than 0 of an exactly-once job)
    are left out."""
    if isinstance(states, Mapping) or not states:
        raise InvalidArgumentError("merge_states takes a non-empty list of states")
    readers = [s for s in states if not s.get(IDLE)]
    if readers:
        states = readers
    first = states[0]
    for key in ("job_name", "dataset_id", "repetition"):
        values = {repr(s.get(key)) for s in states}
        if len(values) > 1:
            raise InvalidArgumentError(
                f"the states have different {key}s ({', '.join(sorted(values))}): merge the "
                f"states of one checkpoint of one job"
            )
    encoded = [s.get("position") for s in states]
    merged = dict(first)
    merged["elements_consumed"] = sum(int(s.get("elements_consumed", 0)) for s in states)
    if all(e is None for e in encoded):
        return merged  # between epochs: nothing to restore but the repetition
    if any(not isinstance(e, str) for e in encoded):
        raise InvalidArgumentError(
            "every state must carry a position: states of exactly-once reads, all taken "
            "during the same epoch"
        )
    try:
        positions = [base64.b64decode(e, validate=True) for e in encoded]
    except (binascii.Error, ValueError) as e:
        raise InvalidArgumentError(f"a state's position is not valid base64: {e}") from None
    merged["position"] = base64.b64encode(_native.merge_positions(positions)).decode("ascii")
    return merged


class HasPosition:
    """The properties both adapters show of their ``Position``."""

    _position: Position

    @property
    def job_name(self) -> str:
        """The name of the job read (the user's or the generated one)."""
        return self._position.job_name

    @property
    def repetition(self) -> int:
        """The repetition being read (between epochs: the next one)."""
        return self._position.repetition
