"""The dispatcher's status page from a Python-started dispatcher
(``DispatchServer(metrics_address=...)``; docs/operations-status.md): ``/`` is
the HTML page, ``/status.json`` its data, next to ``/metrics``."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest

import sluice

HOSTILE = "<script>alert('x')</script>"


def get(address: str, path: str) -> tuple[int, str, str]:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=30) as resp:
        return resp.status, resp.headers["Content-Type"], resp.read().decode()


def test_the_status_page_and_its_json_show_the_worker_and_the_jobs_read():
    with sluice.DispatchServer(metrics_address="127.0.0.1:0", elements_per_split=10) as d:
        assert d.metrics_address is not None and d.metrics_address != d.address
        with sluice.WorkerServer(d.target) as w:
            ds = sluice.Dataset.range(50)
            assert sorted(int(e) for e in ds.distribute("distributed_epoch", d, job_name="py-trainer")) == list(range(50))
            assert len(list(ds.distribute("distributed_epoch", d, job_name=HOSTILE))) == 50

            deadline = time.monotonic() + 60
            while True:
                status, content_type, body = get(d.metrics_address, "/status.json")
                assert status == 200 and content_type == "application/json"
                s = json.loads(body)
                if any(x["address"] == w.address for x in s["workers"]) or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            assert s["role"] == "leader"
            assert [n["role"] for n in s["quorum"]] == ["leader"]
            assert [x["address"] for x in s["workers"]] == [w.address]
            jobs = {j["name"]: j for j in s["jobs"]}
            assert set(jobs) == {"py-trainer", HOSTILE}
            assert jobs["py-trainer"]["mode"] == "DYNAMIC"
            assert jobs["py-trainer"]["elements"] == 50
            assert jobs["py-trainer"]["splits_granted"] == 5

            status, content_type, html = get(d.metrics_address, "/")
            assert status == 200 and content_type.startswith("text/html")
            assert w.address in html and ">py-trainer<" in html
            assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
            assert "<script" not in html
            # /metrics is unchanged beside the page.
            status, _, metrics = get(d.metrics_address, "/metrics")
            assert status == 200 and "sluice_jobs 2" in metrics


def test_without_metrics_address_there_is_no_listener_and_off_loopback_is_refused():
    with sluice.DispatchServer() as d:
        assert d.metrics_address is None
    with pytest.raises(sluice.FailedPreconditionError, match="metrics_address"):
        sluice.DispatchServer(metrics_address="0.0.0.0:0")
    with pytest.raises(sluice.InvalidArgumentError, match="HOST:PORT"):
        sluice.DispatchServer(metrics_address="localhost")
