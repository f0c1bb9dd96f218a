"""Reading a dataset through the service: tf.data service's ``distribute``,
``register_dataset`` and ``from_dataset_id``, with its argument names.

What happens on the wire is the Rust client's (``sluice._native``): this module
only turns tf.data's arguments into one read's options, and keeps the native
client per process, so a forked child (a PyTorch ``DataLoader`` worker) makes its
own instead of using the parent's threads, which it does not have.
"""

from __future__ import annotations

import enum
import hashlib
import os
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Callable, Iterator, Union

from sluice import _native
from sluice.errors import InvalidArgumentError

if TYPE_CHECKING:
    from sluice.dataset import Dataset

__all__ = [
    "ShardingPolicy",
    "CrossTrainerCache",
    "DistributedDataset",
    "distribute",
    "register_dataset",
    "from_dataset_id",
    "merge_positions",
    "status",
]

Service = Union[str, Sequence[str], Any]
"""Dispatcher addresses: ``"host:port"``, ``"grpc://host:port"``, a comma list, a
list of those, or an object with ``.addresses`` (a quorum) or ``.address`` (a
``DispatchServer``). Anything else (another scheme, no port) is refused with
``InvalidArgumentError`` when the dataset or client is made."""


class ShardingPolicy(enum.Enum):
    """How a job divides the dataset among workers (tf.data's names)."""

    OFF = "off"
    """Every worker processes the whole dataset ("parallel_epochs")."""
    DYNAMIC = "dynamic"
    """The dispatcher hands out splits, each to one worker ("distributed_epoch")."""
    FILE = "file"
    """Static: worker i of n reads files f with f mod n == i."""
    DATA = "data"
    """Static: worker i of n keeps the elements with index mod n == i."""
    FILE_OR_DATA = "file_or_data"
    """Static: FILE for a file source with enough files, DATA otherwise."""
    HINT = "hint"
    """Static: every ``shard(SHARD_HINT, SHARD_HINT)`` becomes ``shard(n, i)``."""


class CrossTrainerCache:
    """Read a named, infinite job through the workers' shared window, as trainer
    ``trainer_id``: trainers share one element sequence, each at its own cursor."""

    def __init__(self, trainer_id: str) -> None:
        if not isinstance(trainer_id, str) or not trainer_id:
            raise InvalidArgumentError("CrossTrainerCache needs a non-empty trainer_id string")
        self.trainer_id = trainer_id

    def __repr__(self) -> str:
        return f"CrossTrainerCache(trainer_id={self.trainer_id!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CrossTrainerCache) and other.trainer_id == self.trainer_id

    def __hash__(self) -> int:
        return hash(self.trainer_id)


def _mode(processing_mode: Union[ShardingPolicy, str]) -> str:
    if isinstance(processing_mode, ShardingPolicy):
        return processing_mode.value
    if isinstance(processing_mode, str):
        return processing_mode  # checked by the Rust side, with the list of valid ones
    raise InvalidArgumentError(
        f"processing_mode must be a sluice.ShardingPolicy or one of the strings "
        f"'parallel_epochs', 'distributed_epoch', 'off', 'dynamic', 'file', 'data', "
        f"'file_or_data', 'hint'; got {processing_mode!r}"
    )


_SCHEME = "grpc://"
"""The one scheme a dispatcher address may carry (tf.data's default protocol);
TLS is chosen by ``tls_ca`` / ``$SLUICE_TLS_CA``, not by the address."""


def addresses(service: Service, param: str = "service") -> list[str]:
    """The dispatcher addresses of ``service`` (see ``Service``), each checked to
    be ``host:port`` (``param`` names the argument in the error)."""
    if hasattr(service, "addresses"):
        return list(service.addresses)
    if hasattr(service, "address") and not isinstance(service, str):
        return [service.address]
    if isinstance(service, str):
        parts: list[Any] = [service]
    elif isinstance(service, (Sequence, set, frozenset)) and not isinstance(
        service, (bytes, bytearray)
    ):
        parts = list(service)
    else:
        raise InvalidArgumentError(
            f"{param} must be a dispatcher address 'host:port', a comma list or a list of "
            f"them, or a DispatchServer; got {type(service).__name__} {service!r}"
        )
    out: list[str] = []
    for part in parts:
        if not isinstance(part, str):
            raise InvalidArgumentError(
                f"{param} must be 'host:port', a comma list or a list of them; got "
                f"{type(part).__name__} {part!r} in {service!r}"
            )
        for a in part.split(","):
            a = a.strip()
            if a:
                out.append(_address(a, param))
    if not out:
        raise InvalidArgumentError(
            f"{param} names no dispatcher: give 'host:port' or a list of them, got {service!r}"
        )
    return out


def _address(address: str, param: str) -> str:
    """``address`` without its ``grpc://``, refused unless it is ``host:port``."""
    scheme, sep, rest = address.partition("://")
    if sep:
        if scheme.lower() + sep != _SCHEME:
            raise InvalidArgumentError(
                f"{param}: unknown scheme {scheme + sep!r} in {address!r}; give 'host:port' "
                f"(or '{_SCHEME}host:port'); TLS is chosen by tls_ca (or $SLUICE_TLS_CA), "
                f"not by the address"
            )
        address = rest
    host, colon, port = address.rpartition(":")
    if (
        not colon
        or not host
        or not port.isdigit()
        or not 0 < int(port) < 65536
        or any(c in host for c in "/ @?#")
    ):
        raise InvalidArgumentError(
            f"{param}: {address!r} is not a dispatcher address: give 'host:port' (a port "
            f"from 1 to 65535), e.g. 'localhost:5050' or '[::1]:5050'"
        )
    return address


class _Clients:
    """Native clients by (addresses, timeout, TLS CA, token), made in and for one
    process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._clients: dict[tuple[Any, ...], _native.Client] = {}
        # Clients inherited through fork: kept (never dropped) in the child.
        self._inherited: list[Any] = []

    def get(
        self, addrs: Sequence[str], timeout: float, tls_ca: str | None, token: str | None
    ) -> _native.Client:
        # The native client also reads $SLUICE_TLS_SERVER_NAME (docs/security.md).
        server_name = os.environ.get("SLUICE_TLS_SERVER_NAME")
        key = (tuple(addrs), float(timeout), tls_ca, token, server_name)
        with self._lock:
            if self._pid != os.getpid():
                self._inherited.append(self._clients)
                self._clients = {}
                self._pid = os.getpid()
            client = self._clients.get(key)
            if client is None:
                client = _native.Client(list(addrs), timeout, tls_ca=tls_ca, token=token)
                self._clients[key] = client
            return client


_clients = _Clients()

DEFAULT_TIMEOUT = 60.0
"""Seconds an unavailable dispatcher is retried before a call gives up."""


def client(
    service: Service,
    timeout: float = DEFAULT_TIMEOUT,
    tls_ca: str | os.PathLike[str] | None = None,
    token: str | None = None,
) -> _native.Client:
    """This process's native client of ``service``. ``tls_ca``: the PEM file of
    the CA that signed the servers' certificates (then it dials over TLS; default
    ``$SLUICE_TLS_CA``); ``token``: the client token it presents (default
    ``$SLUICE_TOKEN``). With ``$SLUICE_TLS_SERVER_NAME`` set, every server's
    certificate is verified against that name instead of the host dialled (as
    ``--tls-server-name``). See docs/security.md."""
    if tls_ca is None:
        tls_ca = os.environ.get("SLUICE_TLS_CA") or None
    if token is None:
        token = os.environ.get("SLUICE_TOKEN") or None
    ca = None if tls_ca is None else os.fspath(tls_ca)
    return _clients.get(addresses(service), timeout, ca, token)


def merge_positions(positions: Sequence[bytes]) -> bytes:
    """The union of one checkpoint's positions of all consumers of an
    exactly-once job (``reader.position()`` of each, same generation): the
    position that restores the job on any number of consumers. Raises
    ``InvalidArgumentError`` for positions of different jobs, datasets,
    repetitions or checkpoints."""
    if isinstance(positions, (bytes, bytearray, str)):
        raise InvalidArgumentError("merge_positions takes a list of positions (bytes), not one")
    bad = [type(p).__name__ for p in positions if not isinstance(p, (bytes, bytearray, memoryview))]
    if bad:
        raise InvalidArgumentError(
            f"merge_positions takes positions as bytes (reader.position()), got {', '.join(bad)}"
        )
    return _native.merge_positions([bytes(p) for p in positions])


def _dataset_id(spec_json: str) -> str:
    """An id derived from the canonical spec: readers that distribute the same
    pipeline register it under the same id, so they can share a named job."""
    canonical = _native.canonical_spec(spec_json)
    return "py-" + hashlib.sha256(canonical.encode()).hexdigest()[:20]


def _check_dataset(dataset: Any, where: str) -> None:
    """Refuses anything but a ``sluice.Dataset`` as the pipeline of ``where``."""
    from sluice.dataset import Dataset

    if isinstance(dataset, Dataset):
        return
    if isinstance(dataset, DistributedDataset):
        raise InvalidArgumentError(
            f"{where} takes a sluice.Dataset, got a DistributedDataset (a dataset already "
            f"read through the service): pass the sluice.Dataset it was made from "
            f"(its .dataset), or read it as it is"
        )
    raise InvalidArgumentError(
        f"{where} takes a sluice.Dataset, got {type(dataset).__name__} {dataset!r:.200}"
    )


def register_dataset(
    service: Service,
    dataset: "Dataset",
    dataset_id: str | None = None,
    *,
    dispatcher_timeout: float = DEFAULT_TIMEOUT,
    tls_ca: str | os.PathLike[str] | None = None,
    token: str | None = None,
) -> str:
    """Registers ``dataset`` with the service and returns its id.

    Without ``dataset_id`` the id is derived from the pipeline, so registering the
    same pipeline again returns the same id. ``dispatcher_timeout``: seconds an
    unavailable dispatcher is retried before ``UnavailableError``. ``tls_ca``,
    ``token``: as ``sluice.client`` (docs/security.md).
    """
    _check_dataset(dataset, "register_dataset")
    spec = dataset.to_json()
    native = client(service, dispatcher_timeout, tls_ca, token)
    return native.register_dataset(spec, dataset_id or _dataset_id(spec))


def status(
    service: Service,
    *,
    dispatcher_timeout: float = DEFAULT_TIMEOUT,
    tls_ca: str | os.PathLike[str] | None = None,
    token: str | None = None,
) -> dict[str, Any]:
    """What the service's leader knows: ``workers`` (address, active tasks, last
    heartbeat, lost, ``python_version`` (``None``: it runs no Python stages),
    ``errors_ignored`` (elements its ``ignore_errors()`` stages skipped)), ``datasets``, ``jobs`` with their iterations' progress
    (tasks finished, consumers, DYNAMIC split cursor, lost splits), ``raft`` (this
    node's role, term, log positions) and ``from_leader`` (False when only a
    follower answered, whose registry may be stale); what ``sluice status`` shows."""
    import json

    return json.loads(client(service, dispatcher_timeout, tls_ca, token).status_json())


class DistributedDataset:
    """A dataset read through the service. Iterating it starts a read (joining
    the job if it is named) and yields elements: numpy arrays, tuples or dicts.

    It pickles by its configuration (service, dataset, options — the token
    included), so it can be handed to another process, which then reads with its
    own native client.
    """

    def __init__(
        self,
        service: Service,
        processing_mode: Union[ShardingPolicy, str],
        *,
        dataset: "Dataset | None" = None,
        dataset_id: str | None = None,
        job_name: str | None = None,
        consumer_index: int | None = None,
        num_consumers: int | None = None,
        max_outstanding_requests: int | None = None,
        target_workers: str = "AUTO",
        cross_trainer_cache: CrossTrainerCache | None = None,
        dispatcher_timeout: float = DEFAULT_TIMEOUT,
        tls_ca: str | os.PathLike[str] | None = None,
        token: str | None = None,
        accept_data_loss: bool = False,
        compression: str | None = "AUTO",
        exactly_once: bool | str = False,
        deterministic: bool = False,
        seed: int = 0,
    ) -> None:
        if (dataset is None) == (dataset_id is None):
            raise InvalidArgumentError("give exactly one of dataset and dataset_id")
        if dataset is not None:
            _check_dataset(dataset, "distribute")
        if cross_trainer_cache is not None and not isinstance(cross_trainer_cache, CrossTrainerCache):
            raise InvalidArgumentError(
                f"cross_trainer_cache must be a sluice.CrossTrainerCache, got {cross_trainer_cache!r}"
            )
        self.service = addresses(service)
        self.processing_mode = _mode(processing_mode)
        self.dataset = dataset
        self.dataset_id = dataset_id
        self.job_name = job_name
        self.consumer_index = consumer_index
        self.num_consumers = num_consumers
        self.max_outstanding_requests = max_outstanding_requests
        self.target_workers = str(target_workers)
        self.cross_trainer_cache = cross_trainer_cache
        self.dispatcher_timeout = float(dispatcher_timeout)
        self.tls_ca = None if tls_ca is None else os.fspath(tls_ca)
        self.token = token
        self.accept_data_loss = bool(accept_data_loss)
        self.compression = _compression(compression)
        if not isinstance(exactly_once, bool) and exactly_once != "auto":
            raise InvalidArgumentError(
                f'exactly_once must be True, False or "auto", got {exactly_once!r}'
            )
        self.exactly_once = exactly_once
        if not isinstance(deterministic, bool):
            raise InvalidArgumentError(f"deterministic must be True or False, got {deterministic!r}")
        if deterministic and (num_consumers is None or consumer_index is None):
            raise InvalidArgumentError(
                "deterministic=True needs num_consumers and consumer_index: which consumer of "
                "how many this reader is"
            )
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**64:
            raise InvalidArgumentError(f"seed must be an int in [0, 2**64), got {seed!r}")
        self.deterministic = deterministic
        self.seed = seed
        self._iterations = 0

    def __getstate__(self) -> dict[str, Any]:
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def _registered_id(self) -> str:
        if self.dataset_id is None:
            assert self.dataset is not None
            self.dataset_id = register_dataset(
                self.service,
                self.dataset,
                dispatcher_timeout=self.dispatcher_timeout,
                tls_ca=self.tls_ca,
                token=self.token,
            )
        return self.dataset_id

    def read(
        self, repetition: int | None = None, restore_from: bytes | None = None
    ) -> _native.Reader:
        """Starts one read and returns its reader. ``repetition``: which pass over
        a named job to join (default: this object's next one, 0 first).
        ``restore_from`` (exactly-once reads): a position (``reader.position()``,
        or ``sluice.merge_positions`` of one checkpoint's) to restore the job's
        iteration from; the read is of the position's job and repetition."""
        exactly_once = getattr(self, "exactly_once", False)
        if restore_from is not None:
            if not isinstance(restore_from, (bytes, bytearray, memoryview)):
                raise InvalidArgumentError(
                    f"restore_from must be the bytes of a position, got {type(restore_from).__name__}"
                )
            restore_from = bytes(restore_from)
            if not exactly_once:
                raise InvalidArgumentError(
                    "restore_from needs an exactly-once read: pass exactly_once=True to "
                    "distribute / from_dataset_id"
                )
            info = _native.position_info(restore_from)
            if self.job_name != info["job_name"]:
                raise InvalidArgumentError(
                    f"the position is of job {info['job_name']!r} and this dataset reads job "
                    f"{self.job_name!r}: restore it into a read with job_name="
                    f"{info['job_name']!r}"
                )
            if repetition is None:
                repetition = info["repetition"]
        if repetition is None:
            repetition = self._iterations
            self._iterations += 1
        trainer = self.cross_trainer_cache.trainer_id if self.cross_trainer_cache else None
        return client(self.service, self.dispatcher_timeout, self.tls_ca, self.token).read(
            self._registered_id(),
            self.processing_mode,
            job_name=self.job_name,
            target_workers=self.target_workers,
            max_outstanding_requests=self.max_outstanding_requests,
            repetition=repetition if self.job_name else 0,
            num_consumers=self.num_consumers,
            consumer_index=self.consumer_index,
            trainer_id=trainer,
            accept_data_loss=self.accept_data_loss,
            compression=self.compression,
            exactly_once=exactly_once is True,
            restore_from=restore_from,
            deterministic=getattr(self, "deterministic", False),
            seed=getattr(self, "seed", 0),
            exactly_once_auto=exactly_once == "auto",
        )

    def __iter__(self) -> Iterator[Any]:
        return self.read()

    def __repr__(self) -> str:
        what = f"dataset_id={self.dataset_id!r}" if self.dataset is None else f"dataset={self.dataset!r}"
        return (
            f"DistributedDataset(service={self.service!r}, processing_mode={self.processing_mode!r}, "
            f"{what}, job_name={self.job_name!r})"
        )


_COMPRESSIONS = ("auto", "none", "zstd")


def _compression(value: str | None) -> str:
    """tf.data's spelling ("AUTO", None for none) to the client's, checked here so
    a typo fails when the dataset is made, not at its first read."""
    if value is None:
        return "none"
    if not isinstance(value, str) or value.lower() not in _COMPRESSIONS:
        raise InvalidArgumentError(
            f"unknown compression {value!r}; valid values: {', '.join(_COMPRESSIONS)} (or None)"
        )
    return value.lower()


def distribute(
    processing_mode: Union[ShardingPolicy, str],
    service: Service,
    job_name: str | None = None,
    consumer_index: int | None = None,
    num_consumers: int | None = None,
    max_outstanding_requests: int | None = None,
    target_workers: str = "AUTO",
    cross_trainer_cache: CrossTrainerCache | None = None,
    *,
    dispatcher_timeout: float = DEFAULT_TIMEOUT,
    tls_ca: str | os.PathLike[str] | None = None,
    token: str | None = None,
    accept_data_loss: bool = False,
    compression: str | None = "AUTO",
    exactly_once: bool | str = False,
    deterministic: bool = False,
    seed: int = 0,
) -> Callable[["Dataset"], DistributedDataset]:
    """A transformation reading a dataset through the service: apply it with
    ``ds.apply(sluice.distribute(...))`` or call ``ds.distribute(...)``.

    The arguments are tf.data service's: ``processing_mode`` a ``ShardingPolicy``
    or "parallel_epochs" / "distributed_epoch"; readers with the same
    ``job_name`` share one job; ``num_consumers`` + ``consumer_index`` make a
    coordinated read; ``cross_trainer_cache`` shares a named infinite job's
    elements among trainers. ``max_outstanding_requests`` bounds the reader's
    memory (element messages buffered, tasks streamed at once).
    ``dispatcher_timeout`` (Sluice's): seconds an unavailable dispatcher is
    retried before ``UnavailableError``. ``tls_ca`` and ``token`` (Sluice's): the
    CA to verify servers with (dial over TLS) and the client token to present;
    default ``$SLUICE_TLS_CA`` and ``$SLUICE_TOKEN`` (docs/security.md).
    ``accept_data_loss`` (Sluice's): a read that lost a worker's undelivered
    elements raises ``DataLossError`` at its end unless this is true; then it ends
    normally and the reader's ``loss_report`` names the lost tasks and workers.
    ``compression`` (tf.data's, per read here): "AUTO" (default: zstd from workers
    off this host, raw over loopback), "NONE" / ``None``, or "ZSTD"
    (docs/operations-compression.md). ``exactly_once`` (Sluice's): DYNAMIC jobs
    only; the job is refused unless its pipeline can be replayed, and then no
    element is lost or repeated through worker deaths, and ``reader.position()``
    checkpoints the read (restore with ``read(restore_from=...)``; see
    docs/exactly-once.md); ``exactly_once="auto"``: exactly-once where the job can
    have it, else at-most-once, never refused: ``reader.delivery`` says which and
    ``reader.at_most_once_reason`` why. ``deterministic`` (Sluice's, with ``exactly_once``):
    this reader is consumer ``consumer_index`` of ``num_consumers`` of the named
    job, and its sequence depends only on ``seed``, the dataset and
    ``num_consumers`` (not on the workers, their deaths or a restore); every
    consumer index must be read, and pipelines with a ``shuffle`` or ``batch``
    are refused (batch in the training loop)."""

    def apply(dataset: "Dataset") -> DistributedDataset:
        return DistributedDataset(
            service,
            processing_mode,
            dataset=dataset,
            job_name=job_name,
            consumer_index=consumer_index,
            num_consumers=num_consumers,
            max_outstanding_requests=max_outstanding_requests,
            target_workers=target_workers,
            cross_trainer_cache=cross_trainer_cache,
            dispatcher_timeout=dispatcher_timeout,
            tls_ca=tls_ca,
            token=token,
            accept_data_loss=accept_data_loss,
            compression=compression,
            exactly_once=exactly_once,
            deterministic=deterministic,
            seed=seed,
        )

    return apply


def from_dataset_id(
    processing_mode: Union[ShardingPolicy, str],
    service: Service,
    dataset_id: str,
    element_spec: Any = None,
    job_name: str | None = None,
    consumer_index: int | None = None,
    num_consumers: int | None = None,
    max_outstanding_requests: int | None = None,
    target_workers: str = "AUTO",
    cross_trainer_cache: CrossTrainerCache | None = None,
    *,
    dispatcher_timeout: float = DEFAULT_TIMEOUT,
    tls_ca: str | os.PathLike[str] | None = None,
    token: str | None = None,
    accept_data_loss: bool = False,
    compression: str | None = "AUTO",
    exactly_once: bool | str = False,
    deterministic: bool = False,
    seed: int = 0,
) -> DistributedDataset:
    """Reads a dataset registered earlier (``register_dataset``) by its id.
    ``element_spec`` is accepted for tf.data compatibility and not needed:
    elements carry their dtypes and shapes."""
    del element_spec
    return DistributedDataset(
        service,
        processing_mode,
        dataset_id=dataset_id,
        job_name=job_name,
        consumer_index=consumer_index,
        num_consumers=num_consumers,
        max_outstanding_requests=max_outstanding_requests,
        target_workers=target_workers,
        cross_trainer_cache=cross_trainer_cache,
        dispatcher_timeout=dispatcher_timeout,
        tls_ca=tls_ca,
        token=token,
        accept_data_loss=accept_data_loss,
        compression=compression,
        exactly_once=exactly_once,
        deterministic=deterministic,
        seed=seed,
    )
