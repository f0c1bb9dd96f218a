"""NOT COLLECTED (issue 17, next part): a reader that leaves an exactly-once
iteration holding elements it received but never took.

Here host ``c`` takes one element, then ``for x in c`` starts a new read of the
adapter (closing the first reader with the elements it had buffered). Those
records were delivered to a reader that left, never consumed, and are never
read again: the restored iteration stays unfinished and both readers wait for
it (observed: 1991-1995 of 2000 delivered, then a hang). The fix is the
end-of-epoch sweep in docs/exactly-once.md ("Not yet: records delivered and
never consumed"); rename this file to ``test_...`` when it lands.

Also here, NOT SOLVED: ``test_two_consumers_positions_merge_into_one_restore``
passed in the lead's worktree and failed once in the fresh-clone CI of
2026-11-24 (b1d6d0b) with "delivered twice: [237]": a record consumed by ``a``
or ``b`` before their positions came again after the merged restore. The
cluster fixture's 0.5 s worker timeout under CI load (a worker declared lost
while alive) is the first suspect; the Rust tests of the same path
(tests/exactly_once.rs) passed. To be found before exactly-once is the default.
"""

from __future__ import annotations

from test_exactly_once_e2e import N, _eo, _once, cluster  # noqa: F401

import sluice
from sluice.jax import Iterator as JaxIterator


def test_two_hosts_states_merged_restore_on_two_new_hosts_once(cluster):
    d, _ = cluster
    a, b = JaxIterator(_eo(d, "jax-two")), JaxIterator(_eo(d, "jax-two"))
    got = [int(next(a)) for _ in range(120)] + [int(next(b)) for _ in range(80)]
    merged = sluice.merge_states([a.get_state(), b.get_state()])
    a.close()
    b.close()
    c, e = JaxIterator(_eo(d, "jax-two")), JaxIterator(_eo(d, "jax-two"))
    c.set_state(merged)
    e.set_state(merged)
    # Both join the one restored iteration: together they read the rest once.
    got.append(int(next(c)))
    got.extend(int(x) for x in e)
    got.extend(int(x) for x in c)
    _once(got)


def test_two_consumers_positions_merge_into_one_restore(cluster):
    d, _ = cluster
    a, b = _eo(d, "merge-two").read(), _eo(d, "merge-two").read()
    got = [int(a.next(timeout=60)) for _ in range(200)]
    got += [int(b.next(timeout=60)) for _ in range(150)]
    merged = sluice.merge_positions([a.position(), b.position()])
    a.close()
    b.close()
    got.extend(int(x) for x in _eo(d, "merge-two").read(restore_from=merged))
    _once(got)
