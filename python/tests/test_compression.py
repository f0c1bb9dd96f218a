"""Compression of the element stream, seen from Python: a counting TCP proxy sits
between the reader and a worker (the worker advertises the proxy's address), so
the test sees the bytes that crossed the "network". Every setting delivers the
same elements; "zstd" shrinks token ids on the wire; "none" and "auto" over
loopback send raw; an unknown value is refused naming the valid ones
(docs/operations-compression.md, guarantee OP-COMPRESS3)."""

from __future__ import annotations

import socket
import threading
from typing import Iterator

import numpy as np
import pytest

import sluice


class CountingProxy:
    """127.0.0.1:<free port> → `upstream`, counting bytes sent back to readers."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = "127.0.0.1:%d" % self.listener.getsockname()[1]
        self.upstream: tuple[str, int] | None = None
        self.to_reader = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                reader, _ = self.listener.accept()
            except OSError:
                return  # closed
            assert self.upstream is not None
            up = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(reader, up, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, reader, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, count: bool) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
                if count:
                    with self.lock:
                        self.to_reader += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self.listener.close()


def free_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as s:
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def proxied() -> Iterator[tuple[sluice.DispatchServer, CountingProxy]]:
    dispatcher = sluice.DispatchServer()
    proxy = CountingProxy()
    port = free_port()
    proxy.upstream = ("127.0.0.1", port)
    worker = sluice.WorkerServer(dispatcher.target, port=port, worker_address=proxy.address)
    yield dispatcher, proxy
    worker.stop()
    dispatcher.stop()
    proxy.close()


def read(proxied, ds: sluice.Dataset, compression) -> tuple[list[np.ndarray], int]:
    dispatcher, proxy = proxied
    before = proxy.to_reader
    got = [np.asarray(e) for e in ds.distribute("parallel_epochs", dispatcher.target, compression=compression)]
    return got, proxy.to_reader - before


def test_every_setting_delivers_the_same_elements_and_zstd_shrinks_token_ids(proxied):
    # Token ids: 64 rows of 2048 small int32 values, as a tokenizer makes them.
    rng = np.random.default_rng(7)
    tokens = rng.zipf(1.3, size=(64, 2048)).clip(0, 31999).astype(np.int32)
    ds = sluice.Dataset.from_tensor_slices(tokens)
    raw, raw_bytes = read(proxied, ds, "NONE")
    zstd, zstd_bytes = read(proxied, ds, "ZSTD")
    auto, auto_bytes = read(proxied, ds, "AUTO")
    assert len(raw) == 64
    for a, b, c, row in zip(raw, zstd, auto, tokens):
        np.testing.assert_array_equal(a, row)
        np.testing.assert_array_equal(b, row)
        np.testing.assert_array_equal(c, row)
    assert raw_bytes >= tokens.nbytes
    assert zstd_bytes * 3 < raw_bytes * 2, (zstd_bytes, raw_bytes)
    # auto over loopback: raw, like none (the proxy is on 127.0.0.1).
    assert auto_bytes * 10 > raw_bytes * 9, (auto_bytes, raw_bytes)
    # tf.data's None means no compression.
    none, none_bytes = read(proxied, ds, None)
    assert none_bytes * 10 > raw_bytes * 9 and len(none) == 64


def test_random_bytes_are_sent_raw_even_when_zstd_is_asked_for(proxied):
    rows = np.random.default_rng(3).integers(0, 256, size=(32, 16384), dtype=np.uint8)
    ds = sluice.Dataset.from_tensor_slices(rows)
    raw, raw_bytes = read(proxied, ds, "none")
    zstd, zstd_bytes = read(proxied, ds, "zstd")
    for a, b, row in zip(raw, zstd, rows):
        np.testing.assert_array_equal(a, row)
        np.testing.assert_array_equal(b, row)
    assert zstd_bytes <= raw_bytes * 1.05, (zstd_bytes, raw_bytes)


def test_an_unknown_compression_names_the_valid_values():
    with pytest.raises(sluice.InvalidArgumentError, match="auto, none, zstd"):
        sluice.Dataset.range(3).distribute("parallel_epochs", "127.0.0.1:1", compression="lz4")
    client = sluice._native.Client(["127.0.0.1:1"])
    with pytest.raises(sluice.InvalidArgumentError, match="auto, none, zstd"):
        client.read("x", "parallel_epochs", compression="gzip")
