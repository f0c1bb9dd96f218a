"""``config=PATH`` of ``DispatchServer`` and ``WorkerServer``: the TOML file of
``sluice dispatcher --config`` / ``sluice worker --config`` (keys are the long
flag names, docs/operations-config.md), as keyword arguments.

Each key the Python server supports maps to its keyword; a key that is a flag of
the role but has no keyword here (``health-addr``, ``insecure``, ...) is an error
naming it, as is a key that is no flag at all (with the closest key). Keywords
given to the constructor win over the file; ``SLUICE_*`` variables are the
command line's and do not apply here.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import tomllib
from typing import Any, Callable, Mapping, TypeVar, cast

from sluice.errors import InvalidArgumentError

# Key -> (keyword, kind). Kinds: int, float, str, bool, list (a list of strings or
# their comma-separated string), token-file (the file's content).
_SERVER = {
    "port": ("port", "int"),
    "host": ("host", "str"),
    "tls-cert": ("tls_cert", "str"),
    "tls-key": ("tls_key", "str"),
    "tls-ca": ("tls_ca", "str"),
    "auth-tokens": ("auth_tokens", "str"),
    "data-roots": ("data_roots", "list"),
}

_DISPATCHER = {
    **_SERVER,
    "work-dir": ("work_dir", "str"),
    "peers": ("peers", "list"),
    "node-id": ("node_id", "int"),
    "elements-per-split": ("elements_per_split", "int"),
    "worker-addresses": ("worker_addresses", "list"),
    "worker-timeout-secs": ("worker_timeout", "float"),
    "client-timeout-secs": ("client_timeout", "float"),
    "job-gc-timeout-secs": ("job_gc_timeout", "float"),
    "snapshot-every": ("snapshot_every", "int"),
    "max-datasets": ("max_datasets", "int"),
    "max-jobs": ("max_jobs", "int"),
    "max-iterations": ("max_iterations", "int"),
    "max-clients": ("max_clients", "int"),
    "max-tasks-per-worker": ("max_tasks_per_worker", "int"),
    "max-num-consumers": ("max_num_consumers", "int"),
    "finished-job-ttl-secs": ("finished_job_ttl", "float"),
    "unused-dataset-ttl-secs": ("unused_dataset_ttl", "float"),
    "max-dataset-bytes": ("max_dataset_bytes", "int"),
    "quota-datasets": ("quota_datasets", "int"),
    "quota-dataset-bytes": ("quota_dataset_bytes", "int"),
    "quota-jobs": ("quota_jobs", "int"),
    "quota-iterations": ("quota_iterations", "int"),
    "quota-live-iterations": ("quota_live_iterations", "int"),
    "quota-clients": ("quota_clients", "int"),
    "max-concurrent-streams": ("max_concurrent_streams", "int"),
    "request-timeout-secs": ("request_timeout", "float"),
    "peer-ca": ("peer_ca", "str"),
    "peer-secret-file": ("peer_secret_file", "str"),
    "metrics-addr": ("metrics_address", "str"),
}

_WORKER = {
    **_SERVER,
    "dispatcher": ("dispatcher_address", "list"),
    "timeout-secs": ("dispatcher_timeout", "float"),
    "advertise": ("worker_address", "str"),
    "buffer": ("buffer", "int"),
    "splits-per-request": ("splits_per_request", "int"),
    "drain-timeout-secs": ("drain_timeout", "float"),
    "token-file": ("token", "token-file"),
    "allow-python": ("allow_python", "bool"),
    "python": ("python", "str"),
    "python-processes": ("python_processes", "int"),
    "python-call-timeout-secs": ("python_call_timeout", "float"),
    "python-memory-limit-mb": ("python_memory_limit_mb", "int"),
}

# The role's flags that the Python server has no keyword for (`sluice ROLE --help`).
_CLI_ONLY = {
    "dispatcher": {
        "raft-dial",
        "gc-dynamic-jobs",
        "raft-heartbeat-ms",
        "election-timeout-ms",
        "insecure",
        "health-addr",
        "tls-server-name",
        "log-format",
        "otlp-endpoint",
        "otlp-service-name",
    },
    "worker": {
        "cross-trainer-cache-bytes",
        "exit-when-idle",
        "idle-grace-secs",
        "metrics-addr",
        "max-concurrent-streams",
        "request-timeout-secs",
        "insecure",
        "health-addr",
        "tls-server-name",
        "log-format",
        "otlp-endpoint",
        "otlp-service-name",
    },
}

_ROLES = {"dispatcher": _DISPATCHER, "worker": _WORKER}

_EXPECTED = {
    "int": "an integer",
    "float": "a number",
    "str": "a string",
    "bool": "a boolean (true or false)",
    "list": "a string or an array of strings",
    "token-file": "a string (the token file's path)",
}


def keywords(path: str | os.PathLike[str], role: str) -> dict[str, Any]:
    """The constructor keywords of the ``sluice ROLE`` config file at ``path``."""
    table = _load(path)
    known = _ROLES[role]
    out: dict[str, Any] = {}
    errors = []
    for key, value in table.items():
        if key not in known:
            errors.append(_unsupported(key, role))
            continue
        keyword, kind = known[key]
        try:
            converted = _convert(kind, value)
        except OSError as e:
            errors.append(f"`{key}`: cannot read {value}: {e}")
            continue
        if converted is None:
            errors.append(f"`{key}` must be {_EXPECTED[kind]}, not {type(value).__name__} {value!r}")
        else:
            out[keyword] = converted
    if errors:
        lines = "".join(f"\n  - {e}" for e in errors)
        raise InvalidArgumentError(f"the config file {os.fspath(path)} (for `sluice {role}`):{lines}")
    return out


# As `sluice --config`: a config file holds flags, a few KiB.
MAX_CONFIG_BYTES = 1 << 20


def _load(path: str | os.PathLike[str]) -> dict[str, Any]:
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)  # bounded before it is parsed
        if len(data) > MAX_CONFIG_BYTES:
            raise InvalidArgumentError(
                f"the config file {os.fspath(path)} is larger than {MAX_CONFIG_BYTES} bytes;"
                " a config file holds flags (keys are the long flag names), not data"
            )
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise InvalidArgumentError(f"the config file {os.fspath(path)} is not UTF-8: {e}") from e
    except OSError as e:
        raise InvalidArgumentError(f"cannot read the config file {os.fspath(path)}: {e}") from e
    except tomllib.TOMLDecodeError as e:
        raise InvalidArgumentError(f"the config file {os.fspath(path)} is not valid TOML: {e}") from e


def _unsupported(key: str, role: str) -> str:
    if key in _CLI_ONLY[role]:
        return f"`{key}` is a `sluice {role}` flag that the Python server does not support"
    flags = sorted(set(_ROLES[role]) | _CLI_ONLY[role])
    close = difflib.get_close_matches(key, flags, n=1)
    hint = f", did you mean `{close[0]}`?" if close else f"; see `sluice {role} --help`"
    return f"unknown key `{key}`{hint}"


def _convert(kind: str, value: Any) -> Any:
    """``value`` as the keyword takes it, or None if it is of the wrong type."""
    if kind == "bool":
        return value if isinstance(value, bool) else None
    if isinstance(value, bool):
        return None
    if kind == "int":
        return value if isinstance(value, int) else None
    if kind == "float":
        return float(value) if isinstance(value, (int, float)) else None
    if kind == "str":
        return value if isinstance(value, str) else None
    if kind == "token-file":
        if not isinstance(value, str):
            return None
        with open(value, encoding="utf-8") as f:
            return f.read().strip()
    # list: a comma-separated string, or an array of strings.
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    return None


_Init = TypeVar("_Init", bound=Callable[..., None])


def from_file(role: str) -> Callable[[_Init], _Init]:
    """Makes ``__init__``'s ``config=PATH`` keyword work: the file's keywords,
    under those the caller passed (positionally or by name)."""

    def wrap(init: _Init) -> _Init:
        signature = inspect.signature(init)

        @functools.wraps(init)
        def with_config(self: Any, *args: Any, **kwargs: Any) -> None:
            config = kwargs.pop("config", None)
            if config is not None:
                given = signature.bind_partial(self, *args, **kwargs).arguments
                for keyword, value in keywords(config, role).items():
                    if keyword not in given:
                        kwargs[keyword] = _peers(value) if keyword == "peers" else value
            init(self, *args, **kwargs)

        return cast(_Init, with_config)

    return wrap


def _peers(entries: list[str]) -> Mapping[int, str] | str:
    """``peers``' entries as the ``"1=h:p,2=h:p"`` string ``DispatchServer`` takes."""
    return ",".join(entries)
