"""The trainer's Prometheus metrics (docs/operations-metrics.md): every reader in
the process feeds one registry, served by ``sluice.serve_metrics`` and returned
by ``sluice.metrics_text``. Reads go through a real dispatcher and workers; the
endpoint is scraped over HTTP and parsed strictly."""

from __future__ import annotations

import re
import urllib.request

import pytest

import sluice

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    """OpenMetrics text as (name, labels, value); fails on anything else."""
    lines = text.splitlines()
    assert lines[-1] == "# EOF", "the exposition ends with # EOF"
    samples = []
    for line in lines[:-1]:
        if line.startswith("# "):
            assert line.split(" ")[1] in ("HELP", "TYPE", "UNIT"), line
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample: {line!r}"
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        samples.append((m.group(1), labels, float(m.group(3))))
    return samples


def value(samples, name: str, **labels: str) -> float | None:
    found = [v for n, l, v in samples if n == name and all(l.get(k) == w for k, w in labels.items())]
    return sum(found) if found else None


def scrape(address: str):
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=30) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        return parse(resp.read().decode())


def test_the_wait_histogram_counts_every_element_the_trainer_got(service):
    server = sluice.serve_metrics(0)
    try:
        n = 137
        ds = sluice.Dataset.range(n)
        got = list(ds.distribute("distributed_epoch", service.target, job_name="metrics-wait"))
        assert len(got) == n
        s = scrape(server.address)
        job = {"sluice_job": "metrics-wait", "consumer": ""}
        assert value(s, "sluice_client_wait_seconds_count", **job) == n
        assert value(s, "sluice_client_wait_seconds_sum", **job) > 0
        assert value(s, "sluice_client_wait_seconds_bucket", le="+Inf", **job) == n
        assert value(s, "sluice_client_elements_total", **job) == n
        assert value(s, "sluice_client_bytes_total", **job) == 8 * n, "int64 scalars"
        # The in-process text is the same registry.
        assert value(parse(sluice.metrics_text()), "sluice_client_elements_total", **job) == n
    finally:
        server.stop()


def test_two_readers_in_one_process_share_one_registry_labelled_by_job(service):
    a = list(sluice.Dataset.range(10).distribute("off", service.target, job_name="metrics-a"))
    b = list(sluice.Dataset.range(20).distribute("off", service.target, job_name="metrics-b"))
    per_worker = len(service.workers)
    s = parse(sluice.metrics_text())
    assert len(a) == 10 * per_worker and len(b) == 20 * per_worker
    assert value(s, "sluice_client_elements_total", sluice_job="metrics-a") == len(a)
    assert value(s, "sluice_client_elements_total", sluice_job="metrics-b") == len(b)
    assert value(s, "sluice_client_wait_seconds_count", sluice_job="metrics-b") == len(b)


def test_serve_metrics_refuses_what_it_cannot_serve_safely_or_parse():
    with pytest.raises(sluice.FailedPreconditionError, match="insecure"):
        sluice.serve_metrics("0.0.0.0:0")
    with pytest.raises(sluice.InvalidArgumentError, match="HOST:PORT"):
        sluice.serve_metrics("localhost-no-port")
    with pytest.raises(ValueError, match="0..65535"):
        sluice.serve_metrics(70000)
    with pytest.raises(TypeError):
        sluice.serve_metrics(1.5)  # type: ignore[arg-type]
    server = sluice.serve_metrics("127.0.0.1:0")
    try:
        with pytest.raises(sluice.UnavailableError, match="in use"):
            sluice.serve_metrics(server.address)
    finally:
        server.stop()
    server.stop()  # idempotent


def test_the_metrics_example_in_the_docs_runs():
    import pathlib
    import subprocess
    import sys

    doc = pathlib.Path(__file__).resolve().parents[2] / "docs" / "python.md"
    section = doc.read_text().split("## Metrics: is the trainer waiting on data?", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert code, "a ```python block under '## Metrics'"
    # Any free port instead of 9400, which another process may hold.
    snippet = "import sluice\n" + code.group(1).replace("serve_metrics(9400)", "serve_metrics(0)")
    out = subprocess.run([sys.executable, "-c", snippet], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-4000:]
    # No reader ran in that process, so the page has no series yet: just its end.
    assert out.stdout.rstrip().endswith("# EOF"), out.stdout
