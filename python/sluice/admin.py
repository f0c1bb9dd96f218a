"""Changing the dispatcher group while it serves: what ``sluice admin
add-dispatcher`` / ``remove-dispatcher`` do (docs/operations-procedures.md).

Both ask a dispatcher's **Raft port** (``raft_address``: ``"host:port"``, or several
comma-separated; any node, a follower forwards to its leader) with the group's
peer credentials: ``peer_secret_file`` (the dispatchers' ``--peer-secret-file``)
and/or ``tls_cert`` + ``tls_key`` signed by the peer CA, ``tls_ca`` to verify the
servers. A client or worker token cannot change the group (docs/security.md).
Both return the voters after the change: ``{node_id: "host:port"}``.
"""

from __future__ import annotations

import os
from typing import Union

from sluice import _native

__all__ = ["add_dispatcher", "remove_dispatcher"]

_Path = Union[str, "os.PathLike[str]"]


def _opt(p: _Path | None) -> str | None:
    return None if p is None else os.fspath(p)


def add_dispatcher(
    raft_address: str,
    node_id: int,
    address: str,
    *,
    timeout: float = 90.0,
    tls_cert: _Path | None = None,
    tls_key: _Path | None = None,
    tls_ca: _Path | None = None,
    peer_secret_file: _Path | None = None,
) -> dict[int, str]:
    """Adds dispatcher ``node_id`` at ``address`` (``"host:port[/raft_port]"``, as
    in ``--peers``): it is caught up as a learner, then made a voter. Start it
    first with an empty work_dir and ``peers`` naming the group and itself.

    Raises ``AlreadyExistsError`` (already a voter), ``FailedPreconditionError``
    (its Raft port does not answer, or it has a journal already; the group is
    unchanged), ``DeadlineExceededError`` (it did not catch up within ``timeout``
    seconds: it stays a learner), ``InvalidArgumentError`` (a bad address)."""
    return _native.add_dispatcher(
        raft_address,
        node_id,
        address,
        timeout=timeout,
        tls_cert=_opt(tls_cert),
        tls_key=_opt(tls_key),
        tls_ca=_opt(tls_ca),
        peer_secret_file=_opt(peer_secret_file),
    )


def remove_dispatcher(
    raft_address: str,
    node_id: int,
    *,
    timeout: float = 90.0,
    tls_cert: _Path | None = None,
    tls_key: _Path | None = None,
    tls_ca: _Path | None = None,
    peer_secret_file: _Path | None = None,
) -> dict[int, str]:
    """Removes dispatcher ``node_id`` (the leader too: it steps down); stop its
    process afterwards. Raises ``NotFoundError`` (not a member),
    ``FailedPreconditionError`` (the last voter, or the remaining voters could not
    form a majority)."""
    return _native.remove_dispatcher(
        raft_address,
        node_id,
        timeout=timeout,
        tls_cert=_opt(tls_cert),
        tls_key=_opt(tls_key),
        tls_ca=_opt(tls_ca),
        peer_secret_file=_opt(peer_secret_file),
    )
