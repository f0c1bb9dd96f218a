"""Sluice's servers inside the Python process: ``DispatchServer``, ``WorkerServer``
and ``Quorum`` (several dispatchers of one Raft group).

They run on background threads of the native runtime, so a notebook or a test
starts a whole service in three lines::

    with sluice.DispatchServer() as d, sluice.WorkerServer(d.target):
        print(list(sluice.Dataset.range(5).distribute("parallel_epochs", d.target)))

A server belongs to the process that started it: after ``fork()`` the child
cannot use (or stop) it; start servers in the child if it needs its own.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence, Union

from sluice import _native
from sluice.distribute import Service, addresses

__all__ = ["DispatchServer", "WorkerServer", "Quorum", "start_quorum"]


class _Server:
    _native: Any

    @property
    def address(self) -> str:
        """``host:port`` the server serves on."""
        return self._native.address

    @property
    def target(self) -> str:
        """``grpc://host:port``, as tf.data's ``.target``; every ``service``
        argument accepts it."""
        return "grpc://" + self.address

    def stop(self) -> None:
        """Stops the server and waits until it has stopped. Idempotent."""
        self._native.stop()

    def join(self, timeout: float | None = None) -> None:
        """Blocks until the server stops (``stop()`` from another thread, or a
        failure); raises ``DeadlineExceededError`` after ``timeout`` seconds."""
        self._native.join(timeout)

    def __enter__(self) -> "_Server":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(address={self.address!r})"


class DispatchServer(_Server):
    """A dispatcher: the registry of datasets and jobs and the split cursors,
    journaled to ``work_dir`` (a directory, or a ``file://``, ``s3://``, ``gs://``
    URL) when given, else kept in memory.

    ``peers`` (node id → ``"host:port"`` of every voter, or ``"1=h:p,2=h:p"``)
    makes it node ``node_id`` of a Raft group; it then listens on its own entry.
    For a group on loopback with free ports, use ``sluice.start_quorum``.

    ``data_roots`` (``--data-roots``) lists the only directories (or ``file://``,
    ``s3://bucket/prefix``, ``gs://`` URLs) a registered spec may name; a spec naming
    anything else is refused with ``InvalidArgumentError``. ``None``: on loopback the
    current and temp directories, elsewhere nothing (docs/security.md).
    """

    def __init__(
        self,
        port: int = 0,
        work_dir: str | None = None,
        peers: Union[Mapping[int, str], str, None] = None,
        node_id: int = 1,
        *,
        host: str = "127.0.0.1",
        elements_per_split: int = 1,
        worker_addresses: Sequence[str] | None = None,
        worker_timeout: float = 10.0,
        client_timeout: float = 60.0,
        job_gc_timeout: float = 300.0,
        snapshot_every: int | None = None,
        data_roots: Union[str, Sequence[str], None] = None,
    ) -> None:
        if isinstance(peers, str):
            peers = _parse_peers(peers)
        self._native = _native.DispatchServer(
            port=port,
            host=host,
            work_dir=None if work_dir is None else str(work_dir),
            peers=None if peers is None else {int(k): str(v) for k, v in peers.items()},
            node_id=node_id,
            elements_per_split=elements_per_split,
            worker_addresses=None if worker_addresses is None else list(worker_addresses),
            worker_timeout=worker_timeout,
            client_timeout=client_timeout,
            job_gc_timeout=job_gc_timeout,
            snapshot_every=snapshot_every,
            data_roots=_roots(data_roots),
        )


def _parse_peers(peers: str) -> dict[int, str]:
    out: dict[int, str] = {}
    for entry in peers.split(","):
        node, sep, address = entry.strip().partition("=")
        if not sep or not node.strip().isdigit() or not address.strip():
            from sluice.errors import InvalidArgumentError

            raise InvalidArgumentError(
                f"peers entry {entry!r} is not ID=HOST:PORT (e.g. '1=127.0.0.1:5050,2=...')"
            )
        out[int(node)] = address.strip()
    return out


class WorkerServer(_Server):
    """A worker: registers with the dispatchers, runs its tasks' pipelines and
    streams elements to readers. ``dispatcher_address`` takes anything a
    ``service`` argument takes (an address, a list, a ``DispatchServer``'s
    ``.target``, a ``Quorum``). ``data_roots``: the only files its pipelines may
    open, checked before each open (as ``DispatchServer``'s)."""

    def __init__(
        self,
        dispatcher_address: Service,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        worker_address: str | None = None,
        buffer: int = 256,
        heartbeat_interval: float = 0.5,
        drain_timeout: float = 0.0,
        dispatcher_timeout: float = 60.0,
        data_roots: Union[str, Sequence[str], None] = None,
    ) -> None:
        self._native = _native.WorkerServer(
            addresses(dispatcher_address),
            port=port,
            host=host,
            advertise=worker_address,
            buffer=buffer,
            heartbeat_interval=heartbeat_interval,
            drain_timeout=drain_timeout,
            dispatcher_timeout=dispatcher_timeout,
            data_roots=_roots(data_roots),
        )


class Quorum:
    """Several dispatchers of one Raft group on loopback. ``addresses`` is what a
    ``service`` argument takes; stopping one node (``nodes[i].stop()``) shows the
    failover."""

    def __init__(self, nodes: Sequence[Any]) -> None:
        self.nodes: list[DispatchServer] = []
        for n in nodes:
            server = DispatchServer.__new__(DispatchServer)
            server._native = n
            self.nodes.append(server)

    @property
    def addresses(self) -> list[str]:
        """Every node's ``host:port``."""
        return [n.address for n in self.nodes]

    @property
    def target(self) -> str:
        """The nodes as one ``service`` string: ``"h:p,h:p,h:p"``."""
        return ",".join(self.addresses)

    def stop(self) -> None:
        """Stops every node. Idempotent."""
        for n in self.nodes:
            n.stop()

    def __enter__(self) -> "Quorum":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Quorum(addresses={self.addresses!r})"


def start_quorum(
    n: int = 3,
    work_dir: str | None = None,
    data_roots: Union[str, Sequence[str], None] = None,
) -> Quorum:
    """Starts ``n`` dispatchers of one Raft group on loopback with free ports;
    with ``work_dir`` each journals in ``work_dir/node-<id>``; ``data_roots`` as
    ``DispatchServer``'s."""
    return Quorum(
        _native.start_quorum(n, None if work_dir is None else str(work_dir), _roots(data_roots))
    )


def _roots(roots: Union[str, Sequence[str], None]) -> list[str] | None:
    """``"a,b"``, ``["a", Path("b")]`` or ``None`` as the native list."""
    if roots is None:
        return None
    if isinstance(roots, str):
        return [r for r in roots.split(",") if r.strip()]
    return [str(r) for r in roots]
