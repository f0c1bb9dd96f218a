"""Exactly-once reads from Python (docs/exactly-once.md): the ``exactly_once=``
and ``restore_from=`` keywords, positions as bytes (``Reader.position``,
``sluice.merge_positions``) and in the adapters' states, and every refusal, as
far as they work without exactly-once servers. The reads end to end are in
``pending_exactly_once_e2e.py`` (enabled once the worker and dispatcher parts
are merged)."""

from __future__ import annotations

import base64
import json

import pytest

import sluice
from sluice import _native
from sluice.jax import Iterator as JaxIterator

NOWHERE = "127.0.0.1:1"  # nothing is dialled by these tests


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def _field(number: int, value: int | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint((number << 3) | 2) + _varint(len(value)) + value


def position(job: str = "j", dataset: str = "ds", repetition: int = 0, generation: int = 0,
             watermark: int = 0, fmt: int = 1) -> bytes:
    """A `sluice.v1.Position` as the reader encodes it (proto/sluice.proto)."""
    consumed = _field(1, watermark)
    return (
        _field(1, fmt)
        + _field(2, job.encode())
        + _field(3, dataset.encode())
        + _field(4, repetition)
        + _field(5, generation)
        + _field(6, consumed)
        + _field(7, 1)
    )


def test_position_info_says_what_a_position_is_of():
    info = _native.position_info(position("j", "ds", repetition=3, generation=7))
    assert info == {
        "job_name": "j",
        "dataset_id": "ds",
        "repetition": 3,
        "generation": 7,
        "merged_consumers": 1,
    }


def test_bytes_that_are_not_a_position_are_refused_saying_why():
    with pytest.raises(sluice.InvalidArgumentError, match="not a usable Sluice position"):
        _native.position_info(b"\xff\xff\xff")
    assert _native.position_info(position(fmt=2))["job_name"] == "j", "format 2 is read"
    with pytest.raises(sluice.InvalidArgumentError, match="newer"):
        _native.position_info(position(fmt=3))
    with pytest.raises(sluice.InvalidArgumentError, match="no job name"):
        _native.position_info(position(job=""))


def test_merge_positions_unites_one_checkpoint_and_refuses_mixed_ones():
    merged = sluice.merge_positions([position(watermark=4), position(watermark=9)])
    info = _native.position_info(merged)
    assert (info["job_name"], info["generation"], info["merged_consumers"]) == ("j", 0, 2)
    with pytest.raises(sluice.InvalidArgumentError, match="generations"):
        sluice.merge_positions([position(generation=1), position(generation=2)])
    with pytest.raises(sluice.InvalidArgumentError, match="job names"):
        sluice.merge_positions([position(job="a"), position(job="b")])
    with pytest.raises(sluice.InvalidArgumentError, match="at least one"):
        sluice.merge_positions([])
    with pytest.raises(sluice.InvalidArgumentError, match="a list of positions"):
        sluice.merge_positions(position())  # type: ignore[arg-type]
    with pytest.raises(sluice.InvalidArgumentError, match="as bytes"):
        sluice.merge_positions(["not bytes"])  # type: ignore[list-item]


def test_the_exactly_once_keyword_is_carried_and_checked():
    ds = sluice.Dataset.range(3).distribute("distributed_epoch", NOWHERE, exactly_once=True)
    assert ds.exactly_once is True
    fid = sluice.from_dataset_id("dynamic", NOWHERE, "ds", job_name="j", exactly_once=True)
    assert fid.exactly_once is True
    assert sluice.from_dataset_id("dynamic", NOWHERE, "ds").exactly_once is False
    assert sluice.from_dataset_id("dynamic", NOWHERE, "ds", exactly_once="auto").exactly_once == "auto"
    with pytest.raises(sluice.InvalidArgumentError, match='True, False or "auto"'):
        sluice.from_dataset_id("dynamic", NOWHERE, "ds", exactly_once="yes")


def test_reads_that_cannot_be_exactly_once_are_refused_before_any_call():
    off = sluice.from_dataset_id("parallel_epochs", NOWHERE, "ds", exactly_once=True)
    with pytest.raises(sluice.InvalidArgumentError, match="dynamic"):
        off.read()
    coordinated = sluice.from_dataset_id(
        "dynamic", NOWHERE, "ds", job_name="j", num_consumers=2, consumer_index=0,
        exactly_once=True,
    )
    with pytest.raises(sluice.InvalidArgumentError, match="coordinated"):
        coordinated.read()


def test_restore_from_is_refused_without_exactly_once_or_for_another_job():
    plain = sluice.from_dataset_id("dynamic", NOWHERE, "ds", job_name="j")
    with pytest.raises(sluice.InvalidArgumentError, match="exactly_once=True"):
        plain.read(restore_from=position("j"))
    eo = sluice.from_dataset_id("dynamic", NOWHERE, "ds", job_name="other", exactly_once=True)
    with pytest.raises(sluice.InvalidArgumentError, match="job_name='j'"):
        eo.read(restore_from=position("j"))
    with pytest.raises(sluice.InvalidArgumentError, match="bytes of a position"):
        eo.read(restore_from="j")  # type: ignore[arg-type]
    with pytest.raises(sluice.InvalidArgumentError, match="not a usable Sluice position"):
        eo.read(restore_from=b"garbage")


def _eo_iterator(job: str | None = "j", exactly_once: bool = True) -> JaxIterator:
    ds = sluice.from_dataset_id("dynamic", NOWHERE, "ds", job_name=job, exactly_once=exactly_once)
    return JaxIterator(ds)


def _state(job: str = "j", pos: bytes | None = None, repetition: int = 0) -> dict:
    state = _eo_iterator(job).get_state()
    state["job_name"] = job
    state["repetition"] = repetition
    state["position"] = None if pos is None else base64.b64encode(pos).decode()
    return state


def test_an_exactly_once_state_carries_its_position_as_json_able_base64():
    it = _eo_iterator()
    assert it.get_state()["position"] is None, "between epochs: nothing to restore"
    pos = position("j", repetition=2, generation=4)
    it.set_state(_state("j", pos, repetition=2))
    state = it.get_state()
    assert base64.b64decode(state["position"]) == pos, "kept until the next epoch restores it"
    assert json.loads(json.dumps(state)) == state
    # An at-most-once reader's state has no position (the layout it always had).
    assert "position" not in _eo_iterator(exactly_once=False).get_state()


def test_an_adapter_refuses_a_position_it_cannot_restore():
    pos = position("j")
    with pytest.raises(sluice.InvalidArgumentError, match="reads job 'mine'"):
        _eo_iterator("mine").set_state(_state("j", pos))
    with pytest.raises(sluice.InvalidArgumentError, match="not exactly-once"):
        _eo_iterator(exactly_once=False).set_state(_state("j", pos))
    with pytest.raises(sluice.InvalidArgumentError, match="edited or mixed up"):
        _eo_iterator(None).set_state(_state("k", pos))  # the state names another job
    with pytest.raises(sluice.InvalidArgumentError, match="edited or mixed up"):
        _eo_iterator().set_state(_state("j", pos, repetition=1))
    bad = _state("j", pos)
    bad["position"] = "not base64!"
    with pytest.raises(sluice.InvalidArgumentError, match="base64"):
        _eo_iterator().set_state(bad)
    # A refused state leaves the iterator as it was.
    it = _eo_iterator()
    with pytest.raises(sluice.InvalidArgumentError):
        it.set_state(_state("j", b"garbage"))
    assert it.get_state()["position"] is None


def test_an_at_most_once_reader_has_no_position(service):
    reader = sluice.Dataset.range(10).distribute("dynamic", service.target).read()
    assert reader.delivery == "at_most_once"
    assert int(reader.next(timeout=60)) in range(10)
    with pytest.raises(sluice.InvalidArgumentError, match="exactly_once"):
        reader.position()
    reader.close()


def test_merge_states_joins_one_checkpoint_of_all_consumers_for_every_resuming_one():
    a = _state("j", position("j", watermark=3))
    b = _state("j", position("j", watermark=5))
    a["elements_consumed"], b["elements_consumed"] = 30, 12
    merged = sluice.merge_states([a, b])
    info = _native.position_info(base64.b64decode(merged["position"]))
    assert (info["job_name"], info["merged_consumers"]) == ("j", 2)
    assert merged["elements_consumed"] == 42
    assert json.loads(json.dumps(merged)) == merged
    _eo_iterator().set_state(merged)  # accepted by any consumer of the job
    between = [_state("j"), _state("j")]
    assert sluice.merge_states(between)["position"] is None


def test_merge_states_leaves_out_the_states_of_consumers_that_read_nothing():
    # A PyTorch loader process other than 0 of an exactly-once job reads nothing
    # (sluice.torch): its state says so, at whatever repetition its copy is.
    from sluice._state import idle_state

    reader = _state("j", position("j", watermark=3))
    reader["elements_consumed"] = 31
    idle = idle_state(_state("j", position("j", generation=7), repetition=1))
    assert idle["position"] is None and idle["idle"] is True
    merged = sluice.merge_states([reader, idle])  # not refused: the generations differ
    info = _native.position_info(base64.b64decode(merged["position"]))
    assert (info["job_name"], info["merged_consumers"], info["generation"]) == ("j", 1, 0)
    assert merged["elements_consumed"] == 31
    assert "idle" not in merged
    assert sluice.merge_states([idle])["position"] is None


def test_merge_states_refuses_states_of_different_jobs_checkpoints_or_reads():
    with pytest.raises(sluice.InvalidArgumentError, match="job_names"):
        sluice.merge_states([_state("j", position("j")), _state("k", position("k"))])
    with pytest.raises(sluice.InvalidArgumentError, match="generations"):
        sluice.merge_states(
            [_state("j", position("j", generation=1)), _state("j", position("j", generation=2))]
        )
    with pytest.raises(sluice.InvalidArgumentError, match="every state must carry a position"):
        sluice.merge_states([_state("j", position("j")), _state("j")])
    with pytest.raises(sluice.InvalidArgumentError, match="non-empty list"):
        sluice.merge_states([])
