"""``sluice.admin``: adding and removing a dispatcher of a running group from
Python, against dispatchers started in this process (docs/operations-procedures.md)."""

from __future__ import annotations

import socket

import pytest

import sluice
from conftest import wait_until


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (all held while choosing)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def test_a_dispatcher_is_added_and_another_removed(tmp_path):
    ports = _free_ports(8)
    entry = {i: f"127.0.0.1:{ports[2 * i - 2]}/{ports[2 * i - 1]}" for i in (1, 2, 3, 4)}
    raft = {i: f"127.0.0.1:{ports[2 * i - 1]}" for i in (1, 2, 3, 4)}
    group = {i: entry[i] for i in (1, 2, 3)}
    nodes = {
        i: sluice.DispatchServer(work_dir=str(tmp_path), peers=group, node_id=i) for i in (1, 2, 3)
    }
    try:
        everyone = ",".join(n.address for n in nodes.values())
        wait_until("a leader", lambda: sluice.status(everyone)["from_leader"])

        with pytest.raises(sluice.errors.FailedPreconditionError, match="does not answer"):
            sluice.admin.add_dispatcher(raft[1], 4, entry[4], timeout=20)
        with pytest.raises(sluice.errors.AlreadyExistsError, match="already a voter"):
            sluice.admin.add_dispatcher(raft[1], 2, entry[4])

        nodes[4] = sluice.DispatchServer(work_dir=str(tmp_path), peers=entry, node_id=4)
        voters = sluice.admin.add_dispatcher(raft[1], 4, entry[4])
        assert voters[4] == nodes[4].address and len(voters) == 4

        with pytest.raises(sluice.errors.NotFoundError, match="not a member"):
            sluice.admin.remove_dispatcher(raft[4], 9)
        voters = sluice.admin.remove_dispatcher(raft[4], 3)
        assert sorted(voters) == [1, 2, 4]
        nodes.pop(3).stop()

        remaining = ",".join(n.address for n in nodes.values())
        wait_until("a leader of 1, 2, 4", lambda: sluice.status(remaining)["from_leader"])
        members = sluice.status(remaining)["raft"]["members"]
        assert sorted(int(k) for k in members) == [1, 2, 4]
        ds = sluice.Dataset.range(5)
        assert sluice.register_dataset(remaining, ds)
    finally:
        for n in nodes.values():
            n.stop()
