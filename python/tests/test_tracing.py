"""Traces and JSON logs from Python (docs/operations-traces.md):
``sluice.configure_tracing`` makes the Rust core of this process export its
spans over OTLP/gRPC, and a read's spans join the servers' through the trace
context its calls carry. The collector is sluice-testkit's OTLP stand-in (the
``otlp-collector`` binary, printing each span it receives as a JSON line); the
traced process is a child interpreter, since a process sets up tracing once."""

from __future__ import annotations

import json
import os
import pathlib
import queue
import subprocess
import sys
import threading

import pytest

import sluice

ROOT = pathlib.Path(__file__).resolve().parents[2]


def collector_exe() -> pathlib.Path:
    """The stand-in's binary, built by ``cargo test --workspace`` (or here)."""
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    exe = target / "debug" / "otlp-collector"
    if not exe.exists():
        subprocess.run(
            ["cargo", "build", "-q", "-p", "sluice-testkit", "--bin", "otlp-collector"],
            cwd=ROOT,
            check=True,
        )
    return exe


class Collector:
    """The stand-in as a child process; spans arrive on a queue."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [str(collector_exe())], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        first = self.proc.stdout.readline()
        assert first.startswith("listening on "), first
        self.endpoint = first.split()[-1]
        self.spans: queue.Queue[dict] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.spans.put(json.loads(line))

    def wait_for(self, done, deadline_s: float = 60.0) -> list[dict]:
        """Spans received until ``done(spans)`` holds; fails past the deadline."""
        import time

        got: list[dict] = []
        end = time.monotonic() + deadline_s
        while not done(got):
            left = end - time.monotonic()
            if left <= 0:
                pytest.fail(f"spans did not arrive; got {[(s['service'], s['name']) for s in got]}")
            try:
                got.append(self.spans.get(timeout=min(left, 0.5)))
            except queue.Empty:
                pass
        return got

    def stop(self) -> None:
        self.proc.stdin.close()  # it stops at the end of its stdin
        self.proc.wait(timeout=30)


@pytest.fixture
def collector():
    c = Collector()
    yield c
    c.stop()


TRACED_READ = r"""
import sys, sluice
assert sluice.configure_tracing(otlp_endpoint=sys.argv[1], service_name="py-trainer",
                                log_format="json", log_level="info")
with sluice.DispatchServer() as d, sluice.WorkerServer(d.target):
    reader = sluice.Dataset.range(5).distribute("distributed_epoch", d.target).read()
    print(sorted(int(x) for x in reader))
    reader.close()
    sluice.flush_tracing()
"""


def test_a_python_read_exports_spans_that_join_the_servers(collector):
    child = subprocess.run(
        [sys.executable, "-c", TRACED_READ, collector.endpoint],
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "SLUICE_LOG"},
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "[0, 1, 2, 3, 4]"

    def joined(spans: list[dict]) -> bool:
        reads = [s for s in spans if s["name"] == "read"]
        return any(
            s["name"].endswith("/GetElements") and s["trace_id"] == r["trace_id"]
            for r in reads
            for s in spans
        ) and any(
            s["name"].endswith("/GetOrCreateIteration") and s["parent_span_id"] == r["span_id"]
            for r in reads
            for s in spans
        )

    spans = collector.wait_for(joined)
    assert {s["service"] for s in spans} == {"py-trainer"}
    read = next(s for s in spans if s["name"] == "read")
    assert read["parent_span_id"] == ""
    assert read["attributes"]["job_id"].isdigit(), read

    # JSON log lines on stderr: every line parses, and the servers' start-up is there.
    lines = [json.loads(l) for l in child.stderr.splitlines() if l.strip()]
    assert lines, "nothing logged at info"
    for line in lines:
        assert {"timestamp", "level", "target", "fields"} <= line.keys(), line
    assert any(l["fields"].get("message") == "dispatcher serving" for l in lines)


def test_a_bad_endpoint_or_log_format_is_refused_naming_the_keyword():
    script = (
        "import sluice\n"
        "for kw in ({'otlp_endpoint': 'collector:4317'}, {'log_format': 'yaml'}):\n"
        "    try:\n"
        "        sluice.configure_tracing(**kw)\n"
        "    except sluice.InvalidArgumentError as e:\n"
        "        print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    endpoint, fmt = out.stdout.strip().splitlines()
    assert "http://HOST:PORT" in endpoint and "otlp_endpoint" in endpoint, endpoint
    assert "log_format" in fmt and '"json"' in fmt, fmt
