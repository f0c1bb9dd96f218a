"""TLS and tokens from Python (docs/security.md): a quorum, workers and a reader
all over TLS with tokens read a dataset in full; a missing or wrong token is
``UnauthenticatedError``, a token of the other role ``PermissionDeniedError``.
Certificates are made with ``openssl`` into the test's temporary directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import sluice
from sluice.errors import PermissionDeniedError, UnauthenticatedError

CLIENT_TOKEN = "client-secret-0123456789abcdef"
WORKER_TOKEN = "worker-secret-0123456789abcdef"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]


def _leaf(pki: Path, stem: str, cn: str, san: str) -> None:
    """``stem.pem``/``stem.key``: a certificate signed by ``ca.pem`` for ``san``."""
    _openssl("req", *_EC, "-subj", f"/CN={cn}", "-keyout", f"{stem}.key",
             "-out", f"{stem}.csr", cwd=pki)
    (pki / f"{stem}.cnf").write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\n"
        "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n"
    )
    _openssl("x509", "-req", "-in", f"{stem}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
             "-CAcreateserial", "-days", "1", "-extfile", f"{stem}.cnf", "-out", f"{stem}.pem",
             cwd=pki)


@pytest.fixture
def pki(tmp_path: Path) -> Path:
    """ca.pem, server.pem/server.key (127.0.0.1, localhost), tokens, peer.secret."""
    _openssl("req", "-x509", *_EC, "-subj", "/CN=test-ca", "-days", "1",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign",
             "-keyout", "ca.key", "-out", "ca.pem", cwd=tmp_path)
    _leaf(tmp_path, "server", "localhost", "IP:127.0.0.1,DNS:localhost")
    (tmp_path / "tokens").write_text(
        f"client trainer {CLIENT_TOKEN}\nworker pool {WORKER_TOKEN}\n"
    )
    (tmp_path / "peer.secret").write_text("peer-secret-0123456789abcdef\n")
    return tmp_path


def test_a_quorum_workers_and_a_reader_over_tls_with_tokens_read_in_full(pki: Path) -> None:
    tls = dict(tls_cert=pki / "server.pem", tls_key=pki / "server.key", tls_ca=pki / "ca.pem")
    with sluice.start_quorum(
        3, **tls, auth_tokens=pki / "tokens", peer_secret_file=pki / "peer.secret"
    ) as quorum:
        workers = [
            sluice.WorkerServer(quorum, **tls, auth_tokens=pki / "tokens", token=WORKER_TOKEN)
            for _ in range(2)
        ]
        try:
            ds = sluice.Dataset.range(10).distribute(
                "distributed_epoch", quorum, tls_ca=pki / "ca.pem", token=CLIENT_TOKEN
            )
            assert sorted(int(x) for x in ds) == list(range(10))
        finally:
            for w in workers:
                w.stop()


def test_a_missing_or_wrong_token_is_unauthenticated_and_the_other_role_is_denied(
    pki: Path,
) -> None:
    with sluice.DispatchServer(auth_tokens=pki / "tokens") as d:
        ds = sluice.Dataset.range(3)
        with pytest.raises(UnauthenticatedError, match="`client` bearer token"):
            sluice.register_dataset(d.target, ds, dispatcher_timeout=5)
        with pytest.raises(UnauthenticatedError, match="not one this dispatcher accepts"):
            sluice.register_dataset(d.target, ds, token="wrong-token-0000000000000")
        with pytest.raises(PermissionDeniedError, match="has role `worker`"):
            sluice.register_dataset(d.target, ds, token=WORKER_TOKEN)
        assert sluice.register_dataset(d.target, ds, token=CLIENT_TOKEN)


def test_a_token_file_with_a_bad_line_is_refused_naming_the_line(pki: Path) -> None:
    bad = pki / "bad-tokens"
    bad.write_text(f"client trainer {CLIENT_TOKEN}\nadmin root {WORKER_TOKEN}\n")
    with pytest.raises(sluice.errors.InvalidArgumentError, match="line 2: unknown role `admin`"):
        sluice.DispatchServer(auth_tokens=bad)


def test_a_server_off_loopback_without_tls_and_tokens_is_refused_before_it_binds() -> None:
    # Refused before the socket is bound: nothing listens on 0.0.0.0 here.
    with pytest.raises(sluice.errors.FailedPreconditionError, match="not loopback") as e:
        sluice.DispatchServer(host="0.0.0.0")
    assert "--tls-cert/--tls-key" in str(e.value) and "--auth-tokens" in str(e.value)
    refused = sluice.errors.FailedPreconditionError
    with pytest.raises(refused, match="worker would listen on 0.0.0.0"):
        sluice.WorkerServer("127.0.0.1:1", host="0.0.0.0")


def test_tls_server_name_verifies_every_server_against_one_name(
    pki: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A certificate naming only ``sluice`` (no IP) serves 127.0.0.1: a reader
    refuses it unless ``$SLUICE_TLS_SERVER_NAME=sluice`` (``--tls-server-name``),
    the way pods that advertise their IPs are verified in Kubernetes."""
    _leaf(pki, "named", "sluice", "DNS:sluice")
    tls = dict(tls_cert=pki / "named.pem", tls_key=pki / "named.key", tls_ca=pki / "ca.pem")
    ds = sluice.Dataset.range(5)
    monkeypatch.delenv("SLUICE_TLS_SERVER_NAME", raising=False)
    with sluice.DispatchServer(**tls) as d:
        with pytest.raises(sluice.errors.SluiceError):
            sluice.register_dataset(d.target, ds, tls_ca=pki / "ca.pem", dispatcher_timeout=3)
    monkeypatch.setenv("SLUICE_TLS_SERVER_NAME", "sluice")
    with sluice.DispatchServer(**tls) as d, sluice.WorkerServer(d, **tls):
        got = ds.distribute("distributed_epoch", d, tls_ca=pki / "ca.pem")
        assert sorted(int(x) for x in got) == list(range(5))
