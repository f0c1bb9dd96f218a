"""Type stubs of ``sluice._native``, the Rust core (python/src/). Users use the
``sluice`` package; these are the objects it wraps."""

from typing import Any, Iterator, Optional

__version__: str

def canonical_spec(spec_json: str) -> str:
    """Parses a JSON dataset spec with Sluice's parser and returns its canonical
    JSON. Raises ``InvalidArgumentError`` naming the field of a malformed spec."""

def start_quorum(
    n: int = 3,
    work_dir: Optional[str] = None,
    limits: Optional[dict[str, float]] = None,
    data_roots: Optional[list[str]] = None,
    tls_cert: Optional[str] = None,
    tls_key: Optional[str] = None,
    tls_ca: Optional[str] = None,
    auth_tokens: Optional[str] = None,
    peer_ca: Optional[str] = None,
    peer_secret_file: Optional[str] = None,
) -> list[DispatchServer]:
    """Starts ``n`` dispatchers of one Raft group on loopback with free ports."""

def add_dispatcher(
    raft_address: str,
    node_id: int,
    address: str,
    *,
    timeout: float = 90.0,
    tls_cert: Optional[str] = None,
    tls_key: Optional[str] = None,
    tls_ca: Optional[str] = None,
    peer_secret_file: Optional[str] = None,
) -> dict[int, str]:
    """Adds a dispatcher to the group (``sluice.admin.add_dispatcher``)."""

def remove_dispatcher(
    raft_address: str,
    node_id: int,
    *,
    timeout: float = 90.0,
    tls_cert: Optional[str] = None,
    tls_key: Optional[str] = None,
    tls_ca: Optional[str] = None,
    peer_secret_file: Optional[str] = None,
) -> dict[int, str]:
    """Removes a dispatcher from the group (``sluice.admin.remove_dispatcher``)."""

class TensorData:
    """The Rust buffer under an element's numpy array (``array.base``)."""

    def __len__(self) -> int: ...
    @property
    def zero_copy(self) -> bool:
        """True when the array views the received bytes; False when they were
        copied once because they were misaligned for the dtype."""

class Reader(Iterator[Any]):
    """The elements of one iteration, in the process that started it."""

    def __iter__(self) -> "Reader": ...
    def __next__(self) -> Any:
        """The next element; waits with the interpreter released (Ctrl-C works);
        ``StopIteration`` at the end of the iteration; ``UserFunctionError`` if a
        function of the pipeline failed on a worker (with its traceback)."""
    def next(self, timeout: Optional[float] = None) -> Any:
        """The next element or ``None`` at the end; ``DeadlineExceededError`` if
        none arrives within ``timeout`` seconds; ``UserFunctionError`` as
        ``__next__``."""
    def close(self) -> None:
        """Stops reading and releases this consumer from the iteration."""
    @property
    def job_name(self) -> str: ...
    @property
    def iteration_id(self) -> int: ...
    @property
    def elements(self) -> int:
        """Elements this reader has returned."""
    def position(self) -> bytes:
        """Exactly-once reads: this reader's position (a checkpoint), for
        ``Client.read(restore_from=...)`` or ``merge_positions``; each call is a
        new checkpoint. ``InvalidArgumentError`` for other reads."""
    @property
    def delivery(self) -> str:
        """"exactly_once" or "at_most_once", as the dispatcher answered."""
    @property
    def at_most_once_reason(self) -> Optional[str]:
        """Why the read is at-most-once (the stage that keeps the pipeline from
        being replayed, or the option); ``None`` when exactly-once."""
    @property
    def loss_report(self) -> Optional[list[tuple[int, str]]]:
        """After a read that accepted loss and lost data: (task_id, worker_address)
        of each task ended with its lost worker; ``None`` otherwise."""

def merge_positions(positions: list[bytes]) -> bytes:
    """The union of one checkpoint's positions of all consumers."""

def position_info(position: bytes) -> dict[str, Any]:
    """``job_name``, ``dataset_id``, ``repetition``, ``generation`` and
    ``merged_consumers`` of a position; ``InvalidArgumentError`` for bytes that
    are not one."""

class Client:
    """A handle to the service's dispatchers (per process)."""

    def __init__(
        self,
        addresses: list[str],
        timeout: float = 60.0,
        tls_ca: Optional[str] = None,
        token: Optional[str] = None,
    ) -> None: ...
    def register_dataset(self, spec_json: str, dataset_id: Optional[str] = None) -> str: ...
    def status_json(self) -> str:
        """The service's status (``sluice_client::ServiceStatus``) as JSON."""
    def read(
        self,
        dataset_id: str,
        processing_mode: str,
        job_name: Optional[str] = None,
        target_workers: str = "auto",
        max_outstanding_requests: Optional[int] = None,
        repetition: int = 0,
        num_consumers: Optional[int] = None,
        consumer_index: Optional[int] = None,
        trainer_id: Optional[str] = None,
        accept_data_loss: bool = False,
        compression: str = "auto",
        exactly_once: bool = False,
        restore_from: Optional[bytes] = None,
        deterministic: bool = False,
        seed: int = 0,
        exactly_once_auto: bool = False,
    ) -> Reader:
        """``exactly_once``: ask for exactly-once delivery (docs/exactly-once.md);
        ``exactly_once_auto``: exactly-once where the job can have it, else
        at-most-once (``Reader.at_most_once_reason`` says why);
        ``restore_from``: a position to restore the iteration from (needs
        ``exactly_once``, the position's job name and repetition).
        ``compression``: "auto" (zstd from workers off this host, raw over
        loopback), "none" or "zstd"; anything else raises InvalidArgumentError."""

class DispatchServer:
    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        work_dir: Optional[str] = None,
        peers: Optional[dict[int, str]] = None,
        node_id: int = 1,
        elements_per_split: int = 1,
        worker_addresses: Optional[list[str]] = None,
        worker_timeout: float = 10.0,
        client_timeout: float = 60.0,
        job_gc_timeout: float = 300.0,
        snapshot_every: Optional[int] = None,
        limits: Optional[dict[str, float]] = None,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        tls_ca: Optional[str] = None,
        auth_tokens: Optional[str] = None,
        peer_ca: Optional[str] = None,
        peer_secret_file: Optional[str] = None,
        data_roots: Optional[list[str]] = None,
        metrics_address: Optional[str] = None,
    ) -> None: ...
    @property
    def address(self) -> str: ...
    @property
    def metrics_address(self) -> Optional[str]: ...
    def stop(self) -> None: ...
    def join(self, timeout: Optional[float] = None) -> None: ...

class WorkerServer:
    def __init__(
        self,
        dispatcher_addresses: list[str],
        port: int = 0,
        host: str = "127.0.0.1",
        advertise: Optional[str] = None,
        buffer: int = 256,
        heartbeat_interval: float = 0.5,
        drain_timeout: float = 0.0,
        dispatcher_timeout: float = 60.0,
        tls_cert: Optional[str] = None,
        tls_key: Optional[str] = None,
        tls_ca: Optional[str] = None,
        auth_tokens: Optional[str] = None,
        token: Optional[str] = None,
        data_roots: Optional[list[str]] = None,
        python: Optional[PythonPool] = None,
    ) -> None: ...
    @property
    def address(self) -> str: ...
    def stop(self) -> None: ...
    def join(self, timeout: Optional[float] = None) -> None: ...

class PythonPool:
    """The settings of a worker's pool of Python processes."""

    def __init__(
        self,
        python: str,
        processes: int = 0,
        call_timeout: float = 60.0,
        memory_limit_mb: Optional[int] = None,
        env: Optional[list[tuple[str, str]]] = None,
    ) -> None: ...

def rust_read(
    addresses: list[str],
    dataset_id: str,
    processing_mode: str = "off",
    max_outstanding_requests: int = 16,
    timeout: float = 60.0,
) -> tuple[int, int, float]:
    """Reads a dataset to the end with the Rust client, counting (for the
    benchmark): (elements, payload bytes, seconds)."""

def configure_tracing(
    otlp_endpoint: str | None,
    service_name: str | None,
    log_format: str,
    log_level: str | None,
) -> bool: ...
def flush_tracing() -> None: ...
def shutdown_tracing() -> None: ...
def build_profile() -> str:
    """"debug" or "release": how this module was built."""

class MetricsServer:
    """A running ``GET /metrics`` endpoint of this process's client metrics."""

    @property
    def address(self) -> str: ...
    def stop(self) -> None: ...

def serve_metrics(address: str, insecure: bool = False) -> MetricsServer:
    """Serves this process's client metrics at http://ADDRESS/metrics."""

def metrics_text() -> str:
    """This process's client metrics as OpenMetrics text."""
