"""Functions the sluice-pyexec tests run by reference (`sluice_test_fns:name`)."""

import ctypes
import os
import time

import numpy as np


def double(x):
    return x * 2


def identity(x):
    return x


def is_even(x):
    return x % 2 == 0


def repeat_n(x):
    """flat_map: x copies of x (0 for x = 0)."""
    return [x] * int(x)


def fail_on_3(x):
    if x == 3:
        raise ValueError(f"three is not allowed (got {int(x)})")
    return x + 100


def abort_on_3(x):
    if x == 3:
        os.abort()
    return x + 100


def exit_on_3(x):
    if x == 3:
        os._exit(3)
    return x + 100


def sleep_on_3(x):
    if x == 3:
        time.sleep(3600)
    return x + 100


def c_hang_on_3(x):
    """Blocks inside one C call: SIGALRM's Python handler never gets to run."""
    if x == 3:
        libc = ctypes.CDLL(None)
        libc.pause.restype = ctypes.c_int
        # pause() returns on a handled signal; loop in C via sigsuspend-like
        # behaviour: block SIGALRM first so even that does not wake it.
        import signal

        signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
        libc.pause()
    return x + 100


def allocate_a_lot(x):
    return np.ones(1 << 31, dtype=np.uint8)  # 2 GiB


def shapes(x):
    """A tuple of several kinds of output."""
    return (int(x), float(x) / 2, bool(x % 2), f"n{int(x)}", bytes([int(x)]), [int(x), 1])


def named(x):
    return {"x": x, "square": x * x, "label": np.array([b"a", b"bc"], dtype=object)}


def describe(e):
    """What the function received, as a string (the element conventions)."""
    def one(v):
        if isinstance(v, np.ndarray):
            kind = "ro" if not v.flags.writeable else "rw"
            return f"ndarray[{v.dtype},{v.shape},{kind}]"
        return type(v).__name__

    if isinstance(e, dict):
        return ";".join(f"{k}={one(v)}" for k, v in e.items())
    if isinstance(e, tuple):
        return "tuple(" + ",".join(one(v) for v in e) + ")"
    return one(e)


def batch_double(b):
    return {k: v * 2 for k, v in b.items()} if isinstance(b, dict) else b * 2


def batch_ragged(b):
    return {"a": np.zeros(3), "b": np.zeros(4)}


def prints(x):
    print("hello from the function")  # must not corrupt the pipe
    return x


def returns_none(x):
    pass


def returns_object(x):
    return object()


VALUE = 3


def endless(x):
    """flat_map: a generator that never ends (the time limit stops it)."""
    while True:
        time.sleep(0.01)
        yield x


def mark_and_sleep(x):
    """Leaves a file named after its pid in $SLUICE_TEST_MARKS, then sleeps."""
    open(os.path.join(os.environ["SLUICE_TEST_MARKS"], str(os.getpid())), "w").close()
    time.sleep(3600)
    return x


def fork_then_abort_on_3(x):
    """Forks a child that sleeps an hour (its pid in $SLUICE_TEST_MARKS), then
    aborts on 3: the worker must see the death at once and kill the child too."""
    if x == 3:
        pid = os.fork()
        if pid == 0:
            time.sleep(3600)
            os._exit(0)
        open(os.path.join(os.environ["SLUICE_TEST_MARKS"], str(pid)), "w").close()
        os.abort()
    return x + 100
