"""Bad input raises the exception of its kind, with the Rust message intact, and
a blocked read can be interrupted (Ctrl-C) or bounded (timeout)."""

from __future__ import annotations

import _thread
import os
import signal
import subprocess
import sys
import textwrap
import threading

import pytest

import sluice


def test_every_error_is_a_sluice_error_and_a_builtin_one():
    assert issubclass(sluice.InvalidArgumentError, (sluice.SluiceError, ValueError))
    assert issubclass(sluice.DeadlineExceededError, TimeoutError)
    assert issubclass(sluice.NotFoundError, LookupError)
    assert issubclass(sluice.UnavailableError, ConnectionError)
    for name in sluice.errors.__all__:
        assert issubclass(getattr(sluice, name), sluice.SluiceError)


def test_a_malformed_spec_names_the_field(service):
    bad = sluice.Dataset.from_json('{"stages": [{"range": {"stop": 3}}, {"batch": {"size": "four"}}]}')
    with pytest.raises(sluice.InvalidArgumentError, match=r"stages\[1\]\.batch\.size"):
        list(bad.distribute("dynamic", service.target))


def test_an_unknown_function_is_refused_at_registration(service):
    ds = sluice.Dataset.range(3).map("no_such_function")
    with pytest.raises(sluice.InvalidArgumentError, match="no_such_function"):
        sluice.register_dataset(service.target, ds)


def test_an_unknown_dataset_id_is_not_found(service):
    with pytest.raises(sluice.NotFoundError, match="dataset `nope` not found; register it first"):
        iter(sluice.from_dataset_id("dynamic", service.target, "nope"))


def test_conflicting_job_parameters_say_both(service):
    ds = sluice.Dataset.range(5)
    first = iter(ds.distribute("dynamic", service.target, job_name="conflict"))
    with pytest.raises(sluice.InvalidArgumentError, match="already exists") as e:
        iter(ds.distribute("parallel_epochs", service.target, job_name="conflict"))
    assert "mode" in str(e.value)
    first.close()


def test_bad_read_options_are_invalid_arguments(service):
    ds = sluice.Dataset.range(5)
    with pytest.raises(sluice.InvalidArgumentError, match="unknown processing mode `bogus`"):
        iter(ds.distribute("bogus", service.target))
    with pytest.raises(sluice.InvalidArgumentError, match="go together"):
        iter(ds.distribute("dynamic", service.target, job_name="j", num_consumers=2))
    with pytest.raises(sluice.InvalidArgumentError, match="two different ways"):
        iter(ds.distribute("dynamic", service.target, job_name="j", num_consumers=2,
                           consumer_index=0, cross_trainer_cache=sluice.CrossTrainerCache("t")))
    with pytest.raises(sluice.InvalidArgumentError, match="max_outstanding_requests"):
        iter(ds.distribute("dynamic", service.target, max_outstanding_requests=0))
    with pytest.raises(sluice.InvalidArgumentError, match="service"):
        ds.distribute("dynamic", [])


def test_an_unreachable_dispatcher_is_unavailable_after_the_deadline():
    # A port nothing listens on: bind one, note it, close it.
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ds = sluice.Dataset.range(3)
    with pytest.raises(sluice.UnavailableError, match="unavailable") as e:
        sluice.register_dataset(f"127.0.0.1:{port}", ds, dispatcher_timeout=0.5)
    assert f"127.0.0.1:{port}" in str(e.value) and "Check that it is running" in str(e.value)


def blocked_reader():
    """A read that can never get an element: a dispatcher with no worker."""
    d = sluice.DispatchServer()
    return d, iter(sluice.Dataset.range(3).distribute("dynamic", d.target))


def test_a_blocked_read_with_a_timeout_raises_deadline_exceeded():
    d, reader = blocked_reader()
    try:
        with pytest.raises(sluice.DeadlineExceededError, match="within"):
            reader.next(timeout=0.3)
        # The reader is still usable afterwards.
        with pytest.raises(sluice.DeadlineExceededError):
            reader.next(timeout=0.1)
    finally:
        reader.close()
        d.stop()


def after_main_releases_the_interpreter(action):
    """Runs `action` on a helper thread once the main thread has released the
    interpreter: with a switch interval of an hour the helper cannot take the GIL
    from the main thread by time slicing, so it only runs when the main thread
    waits with the GIL released (inside the native read). An action taken before
    the read started would prove nothing: Python itself raises a pending
    KeyboardInterrupt before the next call."""
    gate = threading.Lock()
    gate.acquire()

    def run() -> None:
        with gate:
            action()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return gate, t


@pytest.fixture
def sigint_raises():
    """SIGINT handled as in an interactive Python (KeyboardInterrupt). A test run
    started in the background of a non-interactive shell (CI, `cmd &`) inherits
    SIGINT ignored, and Python then installs no handler: Ctrl-C would do nothing."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_ctrl_c_interrupts_a_blocked_read_in_this_process(sigint_raises):
    d, reader = blocked_reader()
    old = sys.getswitchinterval()
    sys.setswitchinterval(3600)
    try:
        gate, t = after_main_releases_the_interpreter(_thread.interrupt_main)
        with pytest.raises(KeyboardInterrupt):
            gate.release()
            next(reader)  # blocks: no worker will ever serve it
        t.join()
    finally:
        sys.setswitchinterval(old)
        reader.close()
        d.stop()


def test_sigint_stops_a_blocked_read_in_a_script():
    script = textwrap.dedent(
        """
        import signal, sluice, sys, threading
        # As in a terminal, whatever the test runner's shell left ignored.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        d = sluice.DispatchServer()
        reader = iter(sluice.Dataset.range(3).distribute("dynamic", d.target))
        # The helper prints only once the main thread released the interpreter,
        # i.e. is inside the read (see after_main_releases_the_interpreter).
        sys.setswitchinterval(3600)
        gate = threading.Lock()
        gate.acquire()
        def announce():
            with gate:
                print("blocked", flush=True)
        threading.Thread(target=announce, daemon=True).start()
        try:
            gate.release()
            next(reader)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            sys.exit(3)
        """
    )
    p = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None
        assert p.stdout.readline().strip() == "blocked"
        os.kill(p.pid, signal.SIGINT)
        # Generous: the point is that it ends at all (a read that ignored signals
        # would block forever), not how fast on a busy machine.
        assert p.wait(timeout=60) == 3
        assert p.stdout.read().strip() == "interrupted"
    finally:
        p.kill()
        p.wait()


def test_a_pipeline_of_too_many_stages_is_refused_naming_the_bound(service):
    ds = sluice.Dataset.range(10)
    for _ in range(300):
        ds = ds.take(10)
    with pytest.raises(sluice.InvalidArgumentError, match="more than 256 stages"):
        sluice.register_dataset(service.target, ds)


# --- what was wrong, said by the exception's class and message (issue 31, defect 10)


@pytest.mark.parametrize(
    "service, says",
    [
        (1, "service must be a dispatcher address 'host:port'.*got int 1"),
        (b"127.0.0.1:5050", "service must be.*got bytes"),
        (["127.0.0.1:5050", 2], "service must be.*got int 2"),
        ("grp://127.0.0.1:5050", "service: unknown scheme 'grp://'"),
        ("foo://127.0.0.1:5050", "service: unknown scheme 'foo://'"),
        ("http://127.0.0.1:5050", "service: unknown scheme 'http://'"),
        ("https://127.0.0.1:5050", "service: unknown scheme 'https://'.*tls_ca"),
        ("127.0.0.1", "service: '127.0.0.1' is not a dispatcher address"),
        ("127.0.0.1:0", "service: '127.0.0.1:0' is not a dispatcher address"),
    ],
)
def test_a_service_that_is_not_a_dispatcher_address_is_refused_naming_it(service, says):
    # Refused when the dataset is made: nothing dials, so nothing waits out a timeout.
    with pytest.raises(sluice.InvalidArgumentError, match=says):
        sluice.Dataset.range(3).distribute("parallel_epochs", service)
    with pytest.raises(sluice.InvalidArgumentError, match=says.replace("service", "dispatcher_address")):
        sluice.WorkerServer(service)


def test_the_accepted_service_forms_are_kept():
    ds = sluice.Dataset.range(3)
    assert ds.distribute("dynamic", "grpc://127.0.0.1:5050").service == ["127.0.0.1:5050"]
    assert ds.distribute("dynamic", "a:1, b:2").service == ["a:1", "b:2"]
    assert ds.distribute("dynamic", ("[::1]:5050", "h:3")).service == ["[::1]:5050", "h:3"]


def test_a_distributed_dataset_where_a_dataset_belongs_is_refused_saying_so(service):
    distributed = sluice.Dataset.range(3).distribute("dynamic", service.target)
    with pytest.raises(sluice.InvalidArgumentError, match="register_dataset takes a sluice.Dataset, got a DistributedDataset"):
        sluice.register_dataset(service.target, distributed)
    with pytest.raises(sluice.InvalidArgumentError, match="distribute takes a sluice.Dataset, got a DistributedDataset"):
        sluice.distribute("dynamic", service.target)(distributed)
    with pytest.raises(sluice.InvalidArgumentError, match="got list"):
        sluice.register_dataset(service.target, [1, 2])


@pytest.mark.parametrize("mode", ["distributed_epoch", "parallel_epochs"])
def test_a_corrupt_tfrecord_is_data_loss_and_a_missing_one_not_found(service, tmp_path, mode):
    corrupt = tmp_path / "corrupt.tfrecord"
    corrupt.write_bytes(b"\x05" + bytes(7) + b"not a checksum, not a record")
    with pytest.raises(sluice.DataLossError, match="corrupt TFRecord in `.*corrupt.tfrecord` at byte 0"):
        list(sluice.Dataset.tfrecord(str(corrupt)).distribute(mode, service.target))
    missing = tmp_path / "missing.tfrecord"
    with pytest.raises(sluice.NotFoundError, match="`.*missing.tfrecord` does not exist"):
        list(sluice.Dataset.tfrecord(str(missing)).distribute(mode, service.target))
