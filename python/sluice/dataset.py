"""``sluice.Dataset``: tf.data's builder API, writing Sluice's JSON pipeline spec.

The spec (docs/dataset-spec.md) is the contract between Python and the Rust side:
the dispatcher stores it, every worker runs it, and the id a dataset is registered
under is derived from it. So the builder is pure Python and writes exactly the
*canonical* spec, the JSON the Rust parser prints back (``DatasetDef::from_json``
then ``to_json``): the parser's field names, and a default written or left out
just where the parser writes or leaves it out. A dataset built here therefore
equals its own round trip through Rust, and the same pipeline always gives the
same JSON.

A ``Dataset`` is immutable: each method returns a new one with one more stage.
A function is the *name* of a registry function (a built-in such as ``"square"``
or a custom worker's own, with constant arguments), or the user's Python function
(a callable, or a ``"package.module:function"`` reference), which becomes a
``python`` stage run by the workers' Python processes (``_functions``).

    ds = Dataset.range(10).map("square").batch(4)
    ds.to_json()  # '{"stages":[{"range":{"start":0,"stop":10,"step":1}},...]}'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Callable, TypeVar

from sluice._fields import (
    AUTOTUNE,
    I64,
    MAX_CYCLE_LENGTH,
    SHARD_HINT,
    Filenames,
    Stage,
    check_bool,
    check_count,
    check_int,
    features_spec,
    file_names,
    fn_arg,
    fn_call,
    parallel_calls,
    shard_arg,
    spec_stages,
)
from sluice._functions import is_python, no_retries, python_stage
from sluice._tensors import slices_spec

__all__ = ["AUTOTUNE", "SHARD_HINT", "Dataset"]

T = TypeVar("T")


class Dataset:
    """An input pipeline: a source stage and the transformations after it.

    Build one with a source (``Dataset.range``, ``from_tensor_slices``,
    ``list_files``, ``tfrecord``, ``text_lines``, ``webdataset``, ``parquet``, or ``from_json`` /
    ``from_dict``
    for a spec file), chain transformations, and read it through the service
    with ``distribute``. Equal pipelines compare equal (by their spec).
    """

    __slots__ = ("_stages",)
    _stages: tuple[Stage, ...]

    def __init__(self, stages: Sequence[Mapping[str, Any]]) -> None:
        """Wraps stages as they are written in the spec. Use the sources or
        ``from_dict`` instead: they check their input."""
        object.__setattr__(self, "_stages", tuple(dict(s) for s in stages))

    def __setattr__(self, name: str, value: Any) -> None:
        """Refused: a dataset never changes."""
        raise AttributeError("a Dataset is immutable; its methods return new datasets")

    def __reduce__(self) -> tuple[Callable[[str], Dataset], tuple[str]]:
        """Pickles as its spec (JSON text)."""
        return (Dataset.from_json, (self.to_json(),))

    def _then(self, op: str, fields: Stage) -> Dataset:
        return Dataset((*self._stages, {op: fields}))

    # ---- sources

    @staticmethod
    def range(*args: int) -> Dataset:
        """int64 scalars, like Python's ``range``: ``range(stop)``,
        ``range(start, stop)`` or ``range(start, stop, step)`` (step may be negative,
        not 0)."""
        if not 1 <= len(args) <= 3:
            raise TypeError(
                f"range takes 1 to 3 ints (stop | start, stop[, step]), got {len(args)}"
            )
        values = [check_int(f"range argument {i}", a, *I64) for i, a in enumerate(args)]
        if len(values) == 1:
            start, stop, step = 0, values[0], 1
        elif len(values) == 2:
            start, stop, step = values[0], values[1], 1
        else:
            start, stop, step = values
        if step == 0:
            raise ValueError("range: step must not be 0")
        return Dataset([{"range": {"start": start, "stop": stop, "step": step}}])

    @staticmethod
    def from_tensor_slices(tensors: Any) -> Dataset:
        """One element per row of ``tensors``, sliced along its first dimension.

        ``tensors`` is one component, a tuple of components (tuple elements) or a dict
        (named elements, in the dict's order). A component is a numpy array of rank >= 1
        (dtypes int64, int32, float32, float64, bool, uint8, and str or bytes arrays; other
        dtypes are refused, convert them first, e.g. ``x.astype(np.int64)``), or a
        rectangular list of Python ints (int64), floats (float32), bools, str or bytes.
        All components must have the same first dimension. A flat list of ints, floats,
        str or bytes is written as the spec's readable list forms; anything else as its
        ``tensors`` form (base64 payloads).
        """
        return Dataset([{"from_tensor_slices": slices_spec(tensors)}])

    @staticmethod
    def list_files(
        file_pattern: str | os.PathLike[str],
        shuffle: bool | None = None,
        seed: int | None = None,
    ) -> Dataset:
        """The names of the files matching ``file_pattern`` (a path or ``file://``,
        ``s3://``, ``gs://`` URL with ``*``, ``?``, ``[...]``), as string scalars,
        sorted; shuffled when ``shuffle`` (default True, as in tf.data) with ``seed``
        (default 0: the same order on every run; tf.data's default is a random seed).
        The dispatcher lists the files once, at registration."""
        if not isinstance(file_pattern, (str, os.PathLike)):
            raise TypeError(
                f"list_files: file_pattern must be one pattern (str), got {file_pattern!r}; "
                f"for several patterns, make one pattern match them all"
            )
        pattern = os.fspath(file_pattern)
        if not pattern:
            raise ValueError("list_files: file_pattern is empty")
        fields: Stage = {"pattern": pattern}
        if shuffle is None or check_bool("list_files: shuffle", shuffle):
            fields["shuffle"] = True
        fields["seed"] = 0 if seed is None else check_count("list_files: seed", seed)
        return Dataset([{"list_files": fields}])

    @staticmethod
    def tfrecord(filenames: Filenames, skip_corrupt: bool = False) -> Dataset:
        """The records of TFRecord files (one file name or a list), in file order, as
        bytes scalars (tf.data's ``TFRecordDataset``). ``skip_corrupt``: skip records
        whose data checksum fails instead of ending with an error."""
        fields: Stage = {"files": file_names("tfrecord", filenames)}
        if check_bool("tfrecord: skip_corrupt", skip_corrupt):
            fields["skip_corrupt"] = True
        return Dataset([{"tfrecord": fields}])

    @staticmethod
    def text_lines(filenames: Filenames) -> Dataset:
        """The lines of text files (one file name or a list), without line endings, as
        string scalars (tf.data's ``TextLineDataset``)."""
        return Dataset([{"text_lines": {"files": file_names("text_lines", filenames)}}])

    @staticmethod
    def webdataset(files_or_pattern: Filenames) -> Dataset:
        """The samples of WebDataset shards (tar files), in shard order: one dict per
        sample, ``{"__key__": key, ext: data, ...}`` with one ``bytes`` value per
        member (``000123.jpg`` gives ``"jpg"``; extensions lowercased, in name order
        after ``__key__``). Members with one key must be consecutive in the shard.

        ``files_or_pattern``: one file name or a list of them; or one pattern with
        ``*``, ``?`` or ``[...]`` (a path or ``s3://`` / ``gs://`` URL), whose files the
        dispatcher lists, sorted, at registration: then the pipeline is
        ``list_files(pattern, shuffle=False).flat_map("webdataset")``. Either way a
        shard is the split unit and a sample's position in its shard its record, so
        ``exactly_once`` reads resume mid-shard. A bad sample (over a size bound,
        members not consecutive) is a ``DataLossError`` that ``ignore_errors`` skips;
        a corrupt or truncated shard ends the read (docs/dataset-spec.md)."""
        if isinstance(files_or_pattern, (str, os.PathLike)):
            name = os.fspath(files_or_pattern)
            if any(c in name for c in "*?["):
                listed = Dataset.list_files(name, shuffle=False)
                return listed.flat_map("webdataset")
        return Dataset([{"webdataset": {"files": file_names("webdataset", files_or_pattern)}}])

    @staticmethod
    def parquet(
        files_or_pattern: Filenames,
        columns: Sequence[str] | None = None,
        batch_rows: int | None = None,
        defaults: Mapping[str, int | float | str] | None = None,
    ) -> Dataset:
        """The rows of Parquet files, in file and row order: one dict per row,
        ``{column: value}`` (numbers as scalars of their dtype, strings and binary as
        ``bytes``, lists as 1-D arrays; a struct's fields as ``"column.field"``).

        ``files_or_pattern``: one file name or a list of them, or one pattern with
        ``*``, ``?`` or ``[...]`` (a path or ``s3://`` / ``gs://`` URL) that the
        dispatcher lists, sorted, at registration. ``columns``: the columns to read
        (only these are fetched from storage), in this order; default all.
        ``batch_rows``: elements of up to this many rows of one row group, each
        value an array with a leading dimension of the rows. ``defaults``: the value
        a null takes, by column; a null elsewhere is a ``DataLossError`` naming the
        file, row group, row and column, which ``ignore_errors`` skips.

        The dispatcher reads each file's footer at registration: a row group is the
        split unit, and a row's position in its row group its record, so
        ``exactly_once`` reads resume mid-file (docs/dataset-spec.md)."""
        fields: Stage = {}
        if isinstance(files_or_pattern, (str, os.PathLike)) and any(
            c in os.fspath(files_or_pattern) for c in "*?["
        ):
            fields["pattern"] = os.fspath(files_or_pattern)
        else:
            fields["files"] = file_names("parquet", files_or_pattern)
        if columns is not None:
            if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
                raise TypeError(f"parquet: columns must be a list of str, got {columns!r}")
            fields["columns"] = list(columns)
        if batch_rows is not None:
            fields["batch_rows"] = check_count("parquet: batch_rows", batch_rows, 1)
        if defaults:
            if not isinstance(defaults, Mapping):
                raise TypeError(f"parquet: defaults must be a dict, got {defaults!r}")
            fields["defaults"] = {
                str(k): fn_arg(f"parquet: defaults[{k!r}]", int(v) if isinstance(v, bool) else v)
                for k, v in defaults.items()
            }
        return Dataset([{"parquet": fields}])

    @staticmethod
    def from_dict(spec: Mapping[str, Any]) -> Dataset:
        """A dataset for a spec given as a dict (``{"stages": [...]}``), e.g. read from
        a spec file. It is taken as written (the service checks it when it is
        registered), so it equals a built dataset only if written canonically."""
        return Dataset(spec_stages(spec))

    @staticmethod
    def from_json(spec_json: str) -> Dataset:
        """A dataset for a spec given as JSON text (see ``from_dict``)."""
        return Dataset.from_dict(json.loads(spec_json))

    # ---- transformations

    def map(
        self,
        map_func: str | Callable[..., Any],
        *args: Any,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        retries: int = 0,
    ) -> Dataset:
        """Applies ``map_func`` to every element: a registered function's name (a
        built-in such as ``"square"``, with constant ``args``), or the user's Python
        function, run on the workers' Python processes: a callable (shipped by value
        with cloudpickle) or a ``"package.module:function"`` reference (imported on
        the workers; see ``sluice.by_reference``). ``num_parallel_calls`` threads, or
        calls in flight for a Python function (``AUTOTUNE``: one per core or per
        Python process; at most 64), in input order unless ``deterministic=False``.
        ``retries`` (0 or 1, Python functions only): tries an element again once on a
        fresh process when its process crashed or hung (never after an exception)."""
        if is_python(map_func):
            fields = python_stage(
                "map",
                map_func,
                args,
                num_parallel_calls=num_parallel_calls,
                deterministic=deterministic,
                retries=retries,
            )
            return self._then("python", fields)
        no_retries("map", retries)
        fields = fn_call("map", "map", map_func, args)
        calls = parallel_calls("map", num_parallel_calls)
        if calls != 1:
            fields["num_parallel_calls"] = calls
        if deterministic is not None and not check_bool("map: deterministic", deterministic):
            fields["deterministic"] = False
        return self._then("map", fields)

    def filter(self, predicate: str | Callable[..., Any], *args: Any) -> Dataset:
        """Keeps the elements for which ``predicate`` is true: a registered filter's
        name (with constant ``args``), or a Python function returning a bool (a
        callable or a ``"package.module:function"`` reference, as for ``map``)."""
        if is_python(predicate):
            return self._then("python", python_stage("filter", predicate, args))
        return self._then("filter", fn_call("filter", "filter", predicate, args))

    def map_batches(
        self,
        fn: str | Callable[..., Any],
        batch_size: int,
        *,
        drop_remainder: bool = False,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
        retries: int = 0,
    ) -> Dataset:
        """Calls the Python function ``fn`` (a callable or a reference, as for
        ``map``) on ``batch_size`` elements at a time, stacked into columns: a numpy
        array for one component, a tuple or dict of arrays for several (Ray Data's
        batch shape). ``fn`` returns a batch of the same form (any number of rows);
        its rows become the elements that follow, so the stage is transparent to
        the stages around it. ``drop_remainder`` drops a last smaller batch."""
        fields = python_stage(
            "map_batches",
            fn,
            num_parallel_calls=num_parallel_calls,
            deterministic=deterministic,
            retries=retries,
            batch_size=batch_size,
            drop_remainder=drop_remainder,
        )
        return self._then("python", fields)

    def ignore_errors(self) -> Dataset:
        """Skips the elements a Python function failed on before this stage (it
        raised, or its process crashed or hung) instead of passing the error to the
        reader; the workers count them (``sluice status``). Other errors (a built-in
        function's, a corrupt file, a Python function that cannot be loaded on a
        worker) still end the read."""
        return self._then("ignore_errors", {})

    def batch(self, batch_size: int, drop_remainder: bool = False) -> Dataset:
        """Stacks ``batch_size`` consecutive elements; ``drop_remainder`` drops a
        final smaller batch."""
        return self._then(
            "batch",
            {
                "size": check_count("batch: batch_size", batch_size, 1),
                "drop_remainder": check_bool("batch: drop_remainder", drop_remainder),
            },
        )

    def shuffle(
        self,
        buffer_size: int,
        seed: int | None = None,
        reshuffle_each_iteration: bool | None = None,
    ) -> Dataset:
        """tf.data's buffered shuffle with a ``buffer_size``-element buffer. ``seed``
        defaults to 0 (the same order on every run). Each epoch under a ``repeat`` is
        shuffled differently: ``reshuffle_each_iteration=False`` is not supported."""
        if reshuffle_each_iteration is not None and not check_bool(
            "shuffle: reshuffle_each_iteration", reshuffle_each_iteration
        ):
            raise ValueError(
                "shuffle: reshuffle_each_iteration=False is not supported: every epoch is "
                "shuffled anew (reproducibly, from the seed); shuffle before a repeat to "
                "reshuffle, or leave the argument out"
            )
        return self._then(
            "shuffle",
            {
                "buffer_size": check_count("shuffle: buffer_size", buffer_size, 1),
                "seed": 0 if seed is None else check_count("shuffle: seed", seed),
            },
        )

    def repeat(self, count: int | None = None) -> Dataset:
        """Runs the pipeline so far ``count`` times; ``None`` (or -1) forever."""
        if count is None or (count == -1 and not isinstance(count, bool)):
            return self._then("repeat", {"count": None})
        return self._then("repeat", {"count": check_count("repeat: count", count)})

    def take(self, count: int) -> Dataset:
        """The first ``count`` elements (``count`` >= 0; there is no take(-1))."""
        return self._then("take", {"count": check_count("take: count", count)})

    def skip(self, count: int) -> Dataset:
        """All but the first ``count`` elements (``count`` >= 0)."""
        return self._then("skip", {"count": check_count("skip: count", count)})

    def prefetch(self, buffer_size: int) -> Dataset:
        """Produces up to ``buffer_size`` elements ahead on a thread of its own
        (at least 1; capped at 65536). There is no AUTOTUNE: give a size."""
        if buffer_size == AUTOTUNE and not isinstance(buffer_size, bool):
            raise ValueError("prefetch: Sluice has no AUTOTUNE buffer size; give one, e.g. 2")
        return self._then(
            "prefetch", {"buffer_size": check_count("prefetch: buffer_size", buffer_size, 1)}
        )

    def parse_example(self, features: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Dataset:
        """Parses serialized ``tf.train.Example`` records into one named component per
        feature. ``features`` maps each name to a dtype (``"int64"``, ``"float32"``,
        ``"bytes"``, ``"string"``: a 1-D tensor of however many values) or to a dict
        ``{"dtype": ..., "shape": [...], "default": ...}`` (fixed shape; default used
        when absent); or it is the spec's list of ``{"name": ..., ...}`` dicts."""
        return self._then("parse_example", {"features": features_spec(features)})

    def flat_map(self, map_func: str | Callable[..., Any], *args: Any) -> Dataset:
        """Replaces each element with the elements ``map_func`` makes of it: a
        registered dataset function's name (e.g. ``"tfrecord"`` for a file name), or
        a Python function returning an iterable of elements (a callable or a
        ``"package.module:function"`` reference, as for ``map``)."""
        if is_python(map_func):
            return self._then("python", python_stage("flat_map", map_func, args))
        return self._then("flat_map", fn_call("flat_map", "dataset", map_func, args))

    def interleave(
        self,
        map_func: str,
        *args: Any,
        cycle_length: int,
        block_length: int = 1,
        num_parallel_calls: int | None = None,
        deterministic: bool | None = None,
    ) -> Dataset:
        """Like ``flat_map``, with ``cycle_length`` (1..1024, required: Sluice has no
        AUTOTUNE for it) inputs open at once, taking ``block_length`` elements from
        each in turn; ``num_parallel_calls`` threads read them ahead. The order is
        deterministic whatever ``deterministic`` says (False allows any order, so the
        deterministic one is allowed too)."""
        fields = fn_call("interleave", "dataset", map_func, args)
        fields["cycle_length"] = check_int(
            "interleave: cycle_length", cycle_length, 1, MAX_CYCLE_LENGTH
        )
        fields["block_length"] = check_int("interleave: block_length", block_length, 1, 2**32 - 1)
        calls = parallel_calls("interleave", num_parallel_calls)
        if calls != 1:
            fields["num_parallel_calls"] = calls
        if deterministic is not None:
            check_bool("interleave: deterministic", deterministic)
        return self._then("interleave", fields)

    def zip(self, *datasets: Dataset) -> Dataset:
        """Pairs each element with the next element of each of ``datasets``: the
        components of all, in order; ends with the shortest. Works as a method
        (``a.zip(b, c)``) and as tf.data's ``Dataset.zip(a, b, c)`` or
        ``Dataset.zip((a, b, c))``."""
        given: list[Any] = list(self) if isinstance(self, (tuple, list)) else [self]
        given += datasets
        all_sets: list[Dataset] = []
        for d in given:
            if not isinstance(d, Dataset):
                raise TypeError(f"zip: expected Datasets, got {d!r}")
            all_sets.append(d)
        if len(all_sets) < 2:
            raise ValueError("zip: give at least two datasets")
        first, rest = all_sets[0], all_sets[1:]
        return first._then("zip", {"datasets": [d.to_dict() for d in rest]})

    def concatenate(self, dataset: Dataset) -> Dataset:
        """This dataset's elements, then ``dataset``'s."""
        if not isinstance(dataset, Dataset):
            raise TypeError(f"concatenate: expected a Dataset, got {dataset!r}")
        return self._then("concatenate", {"dataset": dataset.to_dict()})

    def enumerate(self, start: int = 0) -> Dataset:
        """Puts an int64 counter (from ``start``) before each element's components."""
        return self._then("enumerate", {"start": check_int("enumerate: start", start, *I64)})

    def shard(self, num_shards: int, index: int) -> Dataset:
        """Keeps the elements at positions ``index, index + num_shards, ...``. Either may
        be ``SHARD_HINT``, which HINT sharding replaces with (workers, worker index)."""
        n = shard_arg("shard: num_shards", num_shards, 1)
        i = shard_arg("shard: index", index, 0)
        if isinstance(n, int) and isinstance(i, int) and i >= n:
            raise ValueError(f"shard: index must be below num_shards ({n}), got {i}")
        return self._then("shard", {"num_shards": n, "index": i})

    def apply(self, transformation_func: Callable[[Dataset], T]) -> T:
        """``transformation_func(self)``: applies a transformation written as a
        function of a dataset, e.g. ``ds.apply(sluice.distribute(...))``."""
        return transformation_func(self)

    def distribute(self, *args: Any, **kwargs: Any) -> Any:
        """Reads this dataset through the service: ``sluice.distribute(*args,
        **kwargs)`` applied to it (see ``sluice.distribute``)."""
        from sluice.distribute import distribute

        return distribute(*args, **kwargs)(self)

    # ---- the spec

    def to_dict(self) -> dict[str, Any]:
        """The spec, ``{"stages": [...]}`` (a copy: changing it changes no dataset)."""
        spec: dict[str, Any] = json.loads(self.to_json())
        return spec

    def to_json(self) -> str:
        """The spec as compact JSON text."""
        return json.dumps(
            {"stages": list(self._stages)},
            separators=(",", ":"),
            ensure_ascii=False,
            allow_nan=False,
        )

    def __eq__(self, other: object) -> bool:
        """Whether ``other`` is a dataset with the same spec."""
        if not isinstance(other, Dataset):
            return NotImplemented
        return self._stages == other._stages

    def __hash__(self) -> int:
        """A hash of the stages' op names (equal specs have equal op names)."""
        return hash(tuple(tuple(s) for s in self._stages))

    def __repr__(self) -> str:
        """``Dataset.from_json('...')`` (which evaluates back to an equal dataset), or
        for a long spec its op names and length."""
        text = self.to_json()
        if len(text) <= _REPR_LIMIT:
            return f"Dataset.from_json({text!r})"
        ops = " -> ".join(next(iter(s), "?") for s in self._stages)
        return f"<Dataset {ops} (a {len(text)}-character spec)>"


_REPR_LIMIT = 400
