"""Exactly-once reads end to end from Python, over real servers
(docs/exactly-once.md): every element once, through a worker's death, a
position restored in a new reader, two consumers' positions merged, the
adapters' states, and a consumer that leaves holding elements it never took
(the end-of-epoch sweep reads them again).
"""

from __future__ import annotations

import base64
from collections import Counter

import numpy as np
import pytest

import sluice
from conftest import in_threads
from sluice.jax import Iterator as JaxIterator

N = 2_000


def _eo(d, job: str | None = None, **kwargs) -> sluice.DistributedDataset:
    return sluice.Dataset.range(N).distribute(
        "distributed_epoch", d.target, job_name=job, exactly_once=True, **kwargs
    )


def _once(values: list[int]) -> None:
    dup = [v for v, n in Counter(values).items() if n > 1]
    assert not dup, f"delivered twice: {dup[:10]}"
    assert sorted(values) == list(range(N)), f"missing: {sorted(set(range(N)) - set(values))[:10]}"


def test_an_exactly_once_read_delivers_every_element_once(eo_cluster):
    d, _ = eo_cluster
    reader = _eo(d).read()
    assert reader.delivery == "exactly_once"
    _once([int(x) for x in reader])


# A 19 x 11 grayscale JPEG made with jpeg-encoder (fuzz/corpus/jpeg/e7a74b6c...).
GRAY_JPEG = base64.b64decode(
    "/9j/4AAQSkZJRgABAgAAAQABAAD/wAALCAALABMBABEA/9sAQwAGBAUGBQQGBgUGBwcGCAoQCgoJCQoUDg8MEBcU"
    "GBgXFBYWGh0lHxobIxwWFiAsICMmJykqKRkfLTAtKDAlKCko/9sAQwEHBwcKCAoTCgoTKBoWGigoKCgoKCgoKCgo"
    "KCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgoKCgo/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQF"
    "BgcICQoL/8QAtRAAAgEDAwIEAwUFBAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkK"
    "FhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVWV1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZ"
    "mqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi4+Tl5ufo6erx8vP09fb3+Pn6/9oACAEAAAA/"
    "APA/D9p93ivS/D9p93iu5gtP3K8dq8T8Pqvy8V6X4fVfl4ruYFXyV47V/9k="
)


def test_built_in_image_maps_crop_each_element_alike_in_every_exactly_once_read(eo_cluster):
    """decode_jpeg → random_resized_crop → random_flip → normalize run on the
    workers by name; an element's crop follows its origin, not the worker or the
    read, so two reads (the two workers sharing the elements differently) agree."""
    d, _ = eo_cluster
    n = 24
    ds = (
        sluice.Dataset.from_tensor_slices({"id": list(range(n)), "image": [GRAY_JPEG] * n})
        .map("decode_jpeg", "image", 3)
        .map("random_resized_crop", "image", 8, 8, 5)
        .map("random_flip", "image", 5)
        .map("normalize", "image", 0.5, 0.25, "chw")
    )

    def read(job: str) -> dict[int, np.ndarray]:
        reader = ds.distribute("distributed_epoch", d.target, job_name=job, exactly_once=True)
        return {int(e["id"]): np.array(e["image"]) for e in reader}

    first, second = read("images-1"), read("images-2")
    assert sorted(first) == list(range(n))
    for i, image in first.items():
        assert (image.dtype, image.shape) == (np.float32, (3, 8, 8))
        assert np.array_equal(image, second[i]), f"element {i} was cropped differently"
    assert len({image.tobytes() for image in first.values()}) > n // 2, "crops differ by origin"


def test_a_pipeline_that_cannot_be_replayed_is_refused_naming_the_stage(eo_cluster):
    d, _ = eo_cluster
    ds = sluice.Dataset.range(N).take(10).distribute("dynamic", d.target, exactly_once=True)
    with pytest.raises(sluice.FailedPreconditionError, match="take"):
        ds.read()


def test_auto_is_exactly_once_where_it_can_be_and_at_most_once_saying_why_elsewhere(eo_cluster):
    d, _ = eo_cluster
    auto = sluice.Dataset.range(N).distribute("dynamic", d.target, job_name="auto", exactly_once="auto")
    it = JaxIterator(auto)
    got = [int(next(it)) for _ in range(300)]
    state = it.get_state()
    assert state["position"], "an exactly-once read's state carries its position"
    it.close()
    again = JaxIterator(auto)
    again.set_state(state)
    got.extend(int(x) for x in again)
    _once(got)

    taken = sluice.Dataset.range(N).take(10).distribute("dynamic", d.target, exactly_once="auto")
    reader = taken.read()
    assert reader.delivery == "at_most_once"
    assert "take" in reader.at_most_once_reason
    values = [int(x) for x in reader]
    assert values and len(values) == len(set(values)), values
    fallback = JaxIterator(taken)
    next(fallback)
    assert fallback.get_state()["position"] is None, "no position for an at-most-once read"
    fallback.close()


def test_a_worker_death_loses_and_repeats_nothing(eo_cluster):
    d, workers = eo_cluster
    reader = _eo(d, max_outstanding_requests=1).read()
    got = [int(reader.next(timeout=60)) for _ in range(100)]
    workers[0].stop()
    got.extend(int(x) for x in reader)  # no DataLossError: the task's records come again
    assert reader.loss_report is None
    _once(got)


def test_a_position_restores_everything_not_consumed_once(eo_cluster):
    d, _ = eo_cluster
    first = _eo(d, "restore-one").read()
    got = [int(first.next(timeout=60)) for _ in range(300)]
    pos = first.position()
    first.close()  # what it held beyond the position is not lost
    restored = _eo(d, "restore-one").read(restore_from=pos)
    got.extend(int(x) for x in restored)
    _once(got)


def test_the_jax_iterator_state_restores_the_epoch_once(eo_cluster):
    d, _ = eo_cluster
    it = JaxIterator(_eo(d, "jax-eo"))
    got = [int(next(it)) for _ in range(250)]
    state = it.get_state()
    assert state["position"], state
    it.close()
    again = JaxIterator(_eo(d, "jax-eo"))
    again.set_state(state)
    got.extend(int(x) for x in again)
    _once(got)


def test_two_consumers_positions_merge_into_one_restore(eo_cluster):
    # Failed about one run in two under load until the cursor skipped units that
    # became whole below the watermark after a restore (docs/guarantees.md EO28).
    d, _ = eo_cluster
    a, b = _eo(d, "merge-two").read(), _eo(d, "merge-two").read()
    got = [int(a.next(timeout=60)) for _ in range(200)]
    got += [int(b.next(timeout=60)) for _ in range(150)]
    merged = sluice.merge_positions([a.position(), b.position()])
    a.close()
    b.close()
    got.extend(int(x) for x in _eo(d, "merge-two").read(restore_from=merged))
    _once(got)


def test_two_hosts_states_merged_restore_on_two_new_hosts_once(eo_cluster):
    d, _ = eo_cluster
    a, b = JaxIterator(_eo(d, "jax-two")), JaxIterator(_eo(d, "jax-two"))
    got = [int(next(a)) for _ in range(120)] + [int(next(b)) for _ in range(80)]
    merged = sluice.merge_states([a.get_state(), b.get_state()])
    a.close()
    b.close()
    c, e = JaxIterator(_eo(d, "jax-two")), JaxIterator(_eo(d, "jax-two"))
    c.set_state(merged)
    e.set_state(merged)
    # Both join the one restored iteration and read together, as hosts do: the
    # epoch ends for each once every element was consumed by one of them.
    got.extend(in_threads([lambda: [int(x) for x in c], lambda: [int(x) for x in e]]))
    _once(got)


def test_elements_a_closed_reader_held_are_read_again_by_another(eo_cluster):
    d, _ = eo_cluster
    first = _eo(d, "leaves", max_outstanding_requests=4).read()
    got = [int(first.next(timeout=60)) for _ in range(10)]
    second = _eo(d, "leaves").read()
    got.append(int(second.next(timeout=60)))
    # `first` leaves with what it had received and not taken: no position, no
    # restore. Those records are nobody's; the end-of-epoch sweep reads them again.
    first.close()
    got.extend(in_threads([lambda: [int(x) for x in second]]))
    _once(got)
