"""The trainer's Prometheus metrics: how long it waited for data, and what it got.

Every reader in this process (``distribute``, ``from_dataset_id``, the framework
adapters) updates one registry, measured in the Rust reader under them:

- ``sluice_client_wait_seconds{sluice_job,consumer}`` (histogram): from the moment the
  training loop asked for the next element until it got it;
- ``sluice_client_elements_total`` and ``sluice_client_bytes_total`` (counters):
  elements and payload bytes delivered to the training loop.

``serve_metrics(9400)`` serves them for Prometheus to scrape;
``metrics_text()`` returns the same text (for a test or a log line). See
docs/operations-metrics.md for the metrics and the PromQL that tells whether
training waits on data.
"""

from __future__ import annotations

from typing import Union

from sluice import _native
from sluice._native import MetricsServer

__all__ = ["MetricsServer", "serve_metrics", "metrics_text"]


def serve_metrics(address: Union[int, str], insecure: bool = False) -> MetricsServer:
    """Serves this process's client metrics at ``http://ADDRESS/metrics``.

    ``address`` is ``"HOST:PORT"`` or a port number (then on 127.0.0.1; 0 picks a
    free port, ``.address`` says which). Serving off loopback needs
    ``insecure=True``: the endpoint has neither TLS nor authentication. Stops on
    ``.stop()`` or when the returned object is garbage-collected, so keep it.
    """
    if isinstance(address, bool) or not isinstance(address, (int, str)):
        raise TypeError(
            f"serve_metrics: address must be a port number or 'HOST:PORT', "
            f"not {type(address).__name__}"
        )
    if isinstance(address, int):
        if not 0 <= address <= 65535:
            raise ValueError(f"serve_metrics: port {address} is not in 0..65535")
        address = f"127.0.0.1:{address}"
    return _native.serve_metrics(address, insecure)


def metrics_text() -> str:
    """This process's client metrics as OpenMetrics text (ends with ``# EOF``)."""
    return _native.metrics_text()
