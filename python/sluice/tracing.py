"""Logs and traces of Sluice's Rust core in this Python process.

``configure_tracing`` does for a Python process what ``--log-format`` and
``--otlp-endpoint`` do for the ``sluice`` binary (docs/operations-traces.md):
log lines on stderr as text or JSON, and spans exported over OTLP/gRPC to a
collector (the OpenTelemetry Collector, Jaeger's port 4317, ...). A read's span
and its calls' trace context then join the dispatcher's and workers' spans into
one trace.
"""

from __future__ import annotations

import atexit

from sluice import _native

__all__ = ["configure_tracing", "flush_tracing"]


def configure_tracing(
    otlp_endpoint: str | None = None,
    service_name: str | None = None,
    log_format: str = "text",
    log_level: str | None = None,
) -> bool:
    """Sets up logging and span export for this process; once per process.

    - ``otlp_endpoint``: the collector's OTLP/gRPC address, ``http://HOST:PORT``;
      default the ``OTEL_EXPORTER_OTLP_ENDPOINT`` variable; neither: no export.
    - ``service_name``: ``service.name`` of the spans (default ``sluice-python``).
    - ``log_format``: ``"text"`` or ``"json"`` (one JSON object a line on stderr).
    - ``log_level``: the log filter (``"info"``, ``"sluice_client=debug"``, ...)
      unless ``SLUICE_LOG`` is set; default ``"warn"``.

    Returns whether spans are exported. The spans still queued are exported at
    interpreter exit; ``flush_tracing()`` exports them earlier. Raises
    ``InvalidArgumentError`` for a bad endpoint or format, and
    ``FailedPreconditionError`` if called twice.
    """
    exports = _native.configure_tracing(otlp_endpoint, service_name, log_format, log_level)
    atexit.register(_native.shutdown_tracing)
    return exports


def flush_tracing() -> None:
    """Exports the spans ended so far now (a closed reader's included)."""
    _native.flush_tracing()
