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

import os
import sys
from typing import Any, Mapping, Sequence, Union

from sluice import _config, _native
from sluice.distribute import Service, addresses

__all__ = ["DispatchServer", "WorkerServer", "Quorum", "start_quorum"]

_Path = Union[str, "os.PathLike[str]"]


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
    An entry may name the node's Raft port as ``"host:port/raft_port"`` (default:
    port + 1000), as ``sluice dispatcher --peers`` does.
    For a group on loopback with free ports, use ``sluice.start_quorum``.

    Security (docs/security.md; files are PEM / token files, as the ``sluice
    dispatcher`` flags of the same names): ``tls_cert`` + ``tls_key`` serve over
    TLS; ``tls_ca`` verifies peers; ``auth_tokens`` requires client and worker
    tokens; ``peer_ca`` / ``peer_secret_file`` authenticate Raft peers.

    The caps on what callers can make it hold (``max_datasets``, ``max_jobs``,
    ``max_iterations``, ``max_clients``, ``max_tasks_per_worker``,
    ``max_num_consumers``, ``max_dataset_bytes``), the quotas of one client
    identity (token name: ``quota_datasets``, ``quota_dataset_bytes``,
    ``quota_jobs``, ``quota_iterations``, ``quota_live_iterations``,
    ``quota_clients``), the seconds after
    which a finished job and an unused dataset are forgotten
    (``finished_job_ttl``, ``unused_dataset_ttl``) and its server's bounds
    (``max_concurrent_streams``, ``request_timeout`` in seconds) are those of
    ``sluice dispatcher``'s ``--max-*``, ``--quota-*`` and ``--*-ttl-secs``
    flags; ``None`` keeps the default. A request beyond a cap or quota raises
    ``ResourceExhaustedError`` naming it.
    ``data_roots`` (``--data-roots``) lists the only directories (or ``file://``,
    ``s3://bucket/prefix``, ``gs://`` URLs) a registered spec may name; a spec naming
    anything else is refused with ``InvalidArgumentError``. ``None``: on loopback the
    current and temp directories, elsewhere nothing (docs/security.md).

    ``config``: a ``sluice dispatcher --config`` TOML file (keys are the flags'
    long names, docs/operations-config.md); each key sets its keyword (e.g.
    ``worker-timeout-secs`` sets ``worker_timeout``), a keyword given here wins
    over the file, and a key this class has no keyword for raises
    ``InvalidArgumentError`` naming it.
    ``metrics_address`` (``--metrics-addr``, ``"host:port"``, port 0 picks one)
    serves Prometheus metrics at ``/metrics`` and the status page at ``/`` and
    ``/status.json`` (docs/operations-status.md); loopback only (with TLS and
    ``auth_tokens`` it is HTTPS and wants a ``metrics`` token). The bound address
    is ``.metrics_address``.
    """

    @_config.from_file("dispatcher")
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
        max_datasets: int | None = None,
        max_jobs: int | None = None,
        max_iterations: int | None = None,
        max_clients: int | None = None,
        max_tasks_per_worker: int | None = None,
        max_num_consumers: int | None = None,
        finished_job_ttl: float | None = None,
        unused_dataset_ttl: float | None = None,
        max_dataset_bytes: int | None = None,
        quota_datasets: int | None = None,
        quota_dataset_bytes: int | None = None,
        quota_jobs: int | None = None,
        quota_iterations: int | None = None,
        quota_live_iterations: int | None = None,
        quota_clients: int | None = None,
        max_concurrent_streams: int | None = None,
        request_timeout: float | None = None,
        tls_cert: _Path | None = None,
        tls_key: _Path | None = None,
        tls_ca: _Path | None = None,
        auth_tokens: _Path | None = None,
        peer_ca: _Path | None = None,
        peer_secret_file: _Path | None = None,
        data_roots: Union[str, Sequence[str], None] = None,
        config: _Path | None = None,
        metrics_address: str | None = None,
    ) -> None:
        limits = _limits(
            max_datasets=max_datasets,
            max_jobs=max_jobs,
            max_iterations=max_iterations,
            max_clients=max_clients,
            max_tasks_per_worker=max_tasks_per_worker,
            max_num_consumers=max_num_consumers,
            finished_job_ttl=finished_job_ttl,
            unused_dataset_ttl=unused_dataset_ttl,
            max_dataset_bytes=max_dataset_bytes,
            quota_datasets=quota_datasets,
            quota_dataset_bytes=quota_dataset_bytes,
            quota_jobs=quota_jobs,
            quota_iterations=quota_iterations,
            quota_live_iterations=quota_live_iterations,
            quota_clients=quota_clients,
            max_concurrent_streams=max_concurrent_streams,
            request_timeout=request_timeout,
        )
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
            limits=limits,
            data_roots=_roots(data_roots),
            metrics_address=metrics_address,
            **_paths(
                tls_cert=tls_cert,
                tls_key=tls_key,
                tls_ca=tls_ca,
                auth_tokens=auth_tokens,
                peer_ca=peer_ca,
                peer_secret_file=peer_secret_file,
            ),
        )

    @property
    def metrics_address(self) -> str | None:
        """``host:port`` of the metrics listener (``metrics_address=``): metrics
        at ``/metrics``, the status page at ``/``; ``None`` without one."""
        return self._native.metrics_address


def _limits(**given: float | None) -> dict[str, float]:
    """The limits given (not None), as the native servers take them."""
    return {name: float(value) for name, value in given.items() if value is not None}


def _paths(**paths: _Path | None) -> dict[str, str | None]:
    return {k: None if v is None else os.fspath(v) for k, v in paths.items()}


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
    open, checked before each open (as ``DispatchServer``'s).
    ``splits_per_request`` (DYNAMIC): the most splits one request to the
    dispatcher takes, 1..1024 (``sluice worker --splits-per-request``; ``None``:
    its default, 1024); within it a task asks for about 20 ms of its own work at
    a time (docs/guarantees.md D6).

    Security (docs/security.md): ``tls_cert`` + ``tls_key`` serve element streams
    over TLS and ``tls_ca`` verifies the dispatcher; ``auth_tokens`` requires a
    client token from readers; ``token`` is this worker's worker token.

    Python stages (docs/python-stages.md): ``allow_python=True`` runs pipelines'
    own Python functions (``Dataset.map(fn)`` ...) in a pool of
    ``python_processes`` processes (0: one per core) of the interpreter
    ``python`` (default: this one, ``sys.executable``). Each call may take
    ``python_call_timeout`` seconds; ``python_memory_limit_mb`` caps each
    process's address space. The processes see this process's ``sys.path``
    (as ``PYTHONPATH``), so a function importable here is importable there. Off
    loopback, ``allow_python`` needs ``auth_tokens``.

    ``config``: a ``sluice worker --config`` TOML file, as ``DispatchServer``'s
    (``dispatcher`` sets ``dispatcher_address``, ``token-file`` the ``token``
    read from that file); keywords given here win over it."""

    @_config.from_file("worker")
    def __init__(
        self,
        dispatcher_address: Service | None = None,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        worker_address: str | None = None,
        buffer: int = 256,
        heartbeat_interval: float = 0.5,
        drain_timeout: float = 0.0,
        dispatcher_timeout: float = 60.0,
        splits_per_request: int | None = None,
        tls_cert: _Path | None = None,
        tls_key: _Path | None = None,
        tls_ca: _Path | None = None,
        auth_tokens: _Path | None = None,
        token: str | None = None,
        data_roots: Union[str, Sequence[str], None] = None,
        allow_python: bool = False,
        python: _Path | None = None,
        python_processes: int = 0,
        python_call_timeout: float = 60.0,
        python_memory_limit_mb: int | None = None,
        config: _Path | None = None,
    ) -> None:
        if dispatcher_address is None:
            raise ValueError(
                "WorkerServer needs dispatcher_address (or a config file with `dispatcher`)"
            )
        pool = None
        if allow_python:
            pool = _native.PythonPool(
                os.fspath(python) if python is not None else sys.executable,
                processes=python_processes,
                call_timeout=python_call_timeout,
                memory_limit_mb=python_memory_limit_mb,
                env=[("PYTHONPATH", _python_path())],
            )
        elif python is not None:
            raise ValueError("python= names the interpreter of allow_python=True; pass both")
        self._native = _native.WorkerServer(
            addresses(dispatcher_address, "dispatcher_address"),
            port=port,
            host=host,
            advertise=worker_address,
            buffer=buffer,
            heartbeat_interval=heartbeat_interval,
            drain_timeout=drain_timeout,
            dispatcher_timeout=dispatcher_timeout,
            splits_per_request=splits_per_request,
            token=token,
            data_roots=_roots(data_roots),
            python=pool,
            **_paths(tls_cert=tls_cert, tls_key=tls_key, tls_ca=tls_ca, auth_tokens=auth_tokens),
        )


def _python_path() -> str:
    """This process's ``sys.path`` as a ``PYTHONPATH`` (the empty entry, the
    current directory, made absolute), followed by any ``PYTHONPATH`` it had."""
    entries = [os.path.abspath(p) if p else os.getcwd() for p in sys.path]
    inherited = os.environ.get("PYTHONPATH")
    if inherited:
        entries.append(inherited)
    return os.pathsep.join(entries)


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
    *,
    tls_cert: _Path | None = None,
    tls_key: _Path | None = None,
    tls_ca: _Path | None = None,
    auth_tokens: _Path | None = None,
    peer_ca: _Path | None = None,
    peer_secret_file: _Path | None = None,
    **limits: float | None,
) -> Quorum:
    """Starts ``n`` dispatchers of one Raft group on loopback with free ports;
    with ``work_dir`` each journals in ``work_dir/node-<id>``. ``data_roots``, the
    security keywords and ``limits`` (``max_datasets=``, ``finished_job_ttl=``, ...)
    are ``DispatchServer``'s, the same for every node."""
    return Quorum(
        _native.start_quorum(
            n,
            None if work_dir is None else str(work_dir),
            _limits(**limits),
            _roots(data_roots),
            **_paths(
                tls_cert=tls_cert,
                tls_key=tls_key,
                tls_ca=tls_ca,
                auth_tokens=auth_tokens,
                peer_ca=peer_ca,
                peer_secret_file=peer_secret_file,
            ),
        )
    )


def _roots(roots: Union[str, Sequence[str], None]) -> list[str] | None:
    """``"a,b"``, ``["a", Path("b")]`` or ``None`` as the native list."""
    if roots is None:
        return None
    if isinstance(roots, str):
        return [r for r in roots.split(",") if r.strip()]
    return [str(r) for r in roots]
