"""Sluice's Python runner: one process of a worker's pool (sluice-pyexec).

Started by the worker as `<python> -u -c <this script>`. It imports nothing of
Sluice (workers run it with whatever interpreter `--python` names); it needs numpy,
and cloudpickle only for functions shipped by value.

Protocol (the Rust side, pyexec/src/frame.rs, documents the same format): binary,
little-endian frames on the pipes the worker gave as stdin (requests) and stdout
(answers). A frame is `u32 length` then `length` bytes of body (at most 1 GiB);
the body's first byte is its kind.

  str      = u32 n, n bytes of UTF-8          blob = u32 n, n bytes
  failure  = str type, str message, str traceback
  element  = u32 ncomp, u8 named, [str name] * ncomp if named, component * ncomp
  component= u8 dtype, u8 ndim, u64 dim * ndim, u64 nbytes,
             zeros up to the next multiple of 8 of the body offset, payload
  dtype    = 0 int64, 1 float32, 2 float64, 3 string, 4 bytes, 5 bool, 6 uint8,
             7 int32
             (string/bytes payloads: per item u32 length + bytes, row-major)
  requests:
    1 LOAD   u64 key, u8 how (0 reference, 1 pickle), str made_with, str name, blob
    2 CALL   u64 key, u8 op (0 map, 1 filter, 2 flat_map, 3 map_batches),
             u32 n, element * n
    3 UNLOAD u64 key                                  (no answer)
    4 ECHO   anything                                 (answered by ECHOED, same bytes)
  answers:
    128 HELLO  str python_version, str numpy_version ("" if numpy is missing),
               str numpy_error, str cloudpickle_version ("" if missing)
    129 LOADED u64 key, u8 ok, failure if not ok
    130 RESULT u32 first, u32 count, outcome * count  (a call's outcomes in input
               order, over one or more frames until all n are sent)
    131 ECHOED the ECHO body's bytes after its kind
  outcome  = u8 tag: 0 element | 1 u8 keep | 2 u32 m, element * m | 3 failure

One file (longer than the project's usual module) because it is passed whole to
`python -c`: sections below are frames, elements both ways, functions, the loop.

Every exception a function raises becomes that element's failure (its class,
message and traceback); the other elements of the call go on. Each call of the
function runs under a time limit (SIGALRM, `TimeoutError`); the worker kills the
process if even that does not return in time.
"""

import os
import platform
import signal
import struct
import sys
import time
import traceback

MAX_FRAME = 1 << 30
FLUSH_BYTES = 1 << 20

LOAD, CALL, UNLOAD, ECHO = 1, 2, 3, 4
HELLO, LOADED, RESULT, ECHOED = 128, 129, 130, 131
INT64, FLOAT32, FLOAT64, STRING, BYTES, BOOL, UINT8, INT32 = range(8)
OPS = ("map", "filter", "flat_map", "map_batches")

U32 = struct.Struct("<I")
U64 = struct.Struct("<Q")
I64 = struct.Struct("<q")
F64 = struct.Struct("<d")
COMP_HEAD = struct.Struct("<BB")

# The protocol's pipes, moved off fd 0/1 so that the user's print() (or a C
# library writing to fd 1) goes to stderr and cannot corrupt a frame, and input()
# reads /dev/null instead of the requests.
PROTO_IN = os.dup(0)
PROTO_OUT = os.dup(1)
os.dup2(2, 1)
_null = os.open(os.devnull, os.O_RDONLY)
os.dup2(_null, 0)
os.close(_null)
sys.stdout = sys.stderr


def _forget_protocol():
    """In a child the function forks: the pipes are not its to hold (a child
    holding them open would hide its parent's death from the worker)."""
    for fd in (PROTO_IN, PROTO_OUT):
        try:
            os.close(fd)
        except OSError:
            pass


os.register_at_fork(after_in_child=_forget_protocol)

try:
    import numpy as np

    NUMPY_VERSION, NUMPY_ERROR = np.__version__, ""
except Exception as e:  # reported in HELLO; the worker refuses to start
    np, NUMPY_VERSION, NUMPY_ERROR = None, "", str(e) or type(e).__name__
try:
    import cloudpickle

    CLOUDPICKLE_VERSION = cloudpickle.__version__
except Exception:
    cloudpickle, CLOUDPICKLE_VERSION = None, ""

try:
    import faulthandler

    faulthandler.enable()  # a crash in C prints the Python stack to stderr
except Exception:
    pass


class Failure(Exception):
    """A failure with a type name of its own (BadOutput, VersionMismatch)."""

    def __init__(self, kind, message, tb=""):
        super().__init__(message)
        self.kind = kind
        self.tb = tb


def user_traceback(e):
    """The exception's traceback from the user's code on: the runner's own frames
    (this module's globals) are left out."""
    tb = e.__traceback__
    while tb is not None and tb.tb_frame.f_globals is globals():
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(e), e, tb))


def failure_of(e):
    """(type, message, traceback) of an exception the function or a load raised."""
    if isinstance(e, Failure):
        return e.kind, str(e), e.tb
    return type(e).__name__, str(e), user_traceback(e)


# --- frames -------------------------------------------------------------------


def read_exact(n):
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = os.readv(PROTO_IN, [view[got:]])
        if k == 0:
            sys.exit(0)  # the worker closed the pipe: it is done with us
        got += k
    return buf


def read_frame():
    (n,) = U32.unpack(read_exact(4))
    if n == 0 or n > MAX_FRAME:
        raise SystemExit(f"sluice runner: bad frame length {n}")
    return read_exact(n)


def write_frame(parts):
    """Writes one frame from its parts with writev (no joined copy of the body)."""
    parts = [p if isinstance(p, memoryview) else memoryview(p) for p in parts]
    total = sum(p.nbytes for p in parts)
    parts.insert(0, memoryview(U32.pack(total)))
    i = 0
    while i < len(parts):
        # At most IOV_MAX buffers per call; a pipe may take fewer bytes than asked.
        n = os.writev(PROTO_OUT, parts[i : i + 1024])
        while i < len(parts) and n >= parts[i].nbytes:
            n -= parts[i].nbytes
            i += 1
        if n:
            parts[i] = parts[i][n:]


def s(text):
    b = text.encode("utf-8", "replace")
    return U32.pack(len(b)) + b


def failure_parts(kind, message, tb):
    return [s(kind), s(message), s(tb)]


class Reader:
    def __init__(self, buf):
        self.buf = buf
        self.view = memoryview(buf).toreadonly()
        self.at = 0

    def u8(self):
        v = self.buf[self.at]
        self.at += 1
        return v

    def u32(self):
        (v,) = U32.unpack_from(self.buf, self.at)
        self.at += 4
        return v

    def u64(self):
        (v,) = U64.unpack_from(self.buf, self.at)
        self.at += 8
        return v

    def blob(self):
        n = self.u32()
        v = bytes(self.view[self.at : self.at + n])
        self.at += n
        return v

    def str(self):
        return self.blob().decode("utf-8")


# --- elements: frame -> Python ------------------------------------------------

NP_DTYPES = {}


def np_dtype(code):
    if not NP_DTYPES:
        NP_DTYPES.update(
            {
                INT64: np.dtype("<i8"),
                FLOAT32: np.dtype("<f4"),
                FLOAT64: np.dtype("<f8"),
                BOOL: np.dtype("?"),
                UINT8: np.dtype("u1"),
                INT32: np.dtype("<i4"),
            }
        )
    return NP_DTYPES[code]


def read_items(view, n):
    items, at = [], 0
    for _ in range(n):
        (k,) = U32.unpack_from(view, at)
        items.append(bytes(view[at + 4 : at + 4 + k]))
        at += 4 + k
    return items


def read_component(r):
    dtype, ndim = COMP_HEAD.unpack_from(r.buf, r.at)
    r.at += 2
    shape = struct.unpack_from("<%dQ" % ndim, r.buf, r.at) if ndim else ()
    r.at += 8 * ndim
    nbytes = r.u64()
    r.at += -r.at % 8
    start = r.at
    r.at += nbytes
    if dtype in (STRING, BYTES):
        count = 1
        for d in shape:
            count *= d
        items = read_items(r.view[start : r.at], count)
        if not shape:
            return items[0]
        arr = np.empty(count, dtype=object)
        arr[:] = items
        return arr.reshape(shape)
    # A read-only array over the frame's bytes: nothing copied per value.
    return np.ndarray(shape, np_dtype(dtype), buffer=r.view, offset=start)


def read_element(r):
    ncomp = r.u32()
    named = r.u8()
    names = [r.str() for _ in range(ncomp)] if named else None
    values = [read_component(r) for _ in range(ncomp)]
    if names is not None:
        return dict(zip(names, values))
    if ncomp == 1:
        return values[0]
    return tuple(values)


# --- elements: Python -> frame ------------------------------------------------


def items_payload(values):
    parts = []
    for v in values:
        parts.append(U32.pack(len(v)))
        parts.append(v)
    return b"".join(parts)


def array_tensor(a, what):
    """(dtype code, shape, payload) of a numpy array, by the conversion rule:
    int64/int32/float32/float64/bool/uint8 as they are; other integers (int8,
    int16, uint16, uint32, uint64) -> int64;
    float16 -> float32; str -> string; bytes -> bytes; anything else refused."""
    kind, dt = a.dtype.kind, a.dtype
    if kind == "b":
        code = BOOL
    elif kind in "iu":
        if dt.itemsize == 1 and kind == "u":
            code = UINT8
        elif dt.itemsize == 4 and kind == "i":
            code = INT32
        else:
            if dt == np.uint64 and a.size and int(a.max()) > 2**63 - 1:
                raise Failure("BadOutput", f"{what} holds uint64 values above int64's range")
            code = INT64
    elif kind == "f":
        if dt.itemsize == 8:
            code = FLOAT64
        elif dt.itemsize in (2, 4):
            code = FLOAT32
        else:
            raise Failure("BadOutput", f"{what} is a {dt} array; return float32 or float64")
    elif kind in "US" or kind == "O":
        flat = a.reshape(-1)
        if kind == "U" or (kind == "O" and flat.size and all(isinstance(x, str) for x in flat)):
            code, vals = STRING, [str(x).encode("utf-8") for x in flat]
        elif kind == "S" or all(isinstance(x, (bytes, bytearray)) for x in flat):
            code, vals = BYTES, [bytes(x) for x in flat]
        else:
            bad = next(x for x in flat if not isinstance(x, (bytes, bytearray, str)))
            raise Failure(
                "BadOutput",
                f"{what} is an object array holding a {type(bad).__name__}; object arrays "
                "must hold only str or only bytes",
            )
        return code, a.shape, items_payload(vals)
    else:
        raise Failure(
            "BadOutput",
            f"{what} is a {dt} array; return int64, int32, float32, float64, bool, uint8, str "
            "or bytes values",
        )
    target = {INT64: "<i8", INT32: "<i4", FLOAT32: "<f4", FLOAT64: "<f8", BOOL: "?", UINT8: "u1"}
    target = target[code]
    # np.asarray keeps a 0-d array 0-d (np.ascontiguousarray would make it 1-d).
    a = np.asarray(a, dtype=target, order="C")
    return code, a.shape, memoryview(a).cast("B") if a.ndim else a.tobytes()


def tensor(v, what):
    if isinstance(v, np.ndarray):
        return array_tensor(v, what)
    if isinstance(v, np.generic):
        return array_tensor(np.asarray(v), what)
    if isinstance(v, bool):
        return BOOL, (), b"\x01" if v else b"\x00"
    if isinstance(v, int):
        if not -(2**63) <= v < 2**63:
            raise Failure("BadOutput", f"{what} is the int {v}, outside int64's range")
        return INT64, (), I64.pack(v)
    if isinstance(v, float):
        return FLOAT64, (), F64.pack(v)
    if isinstance(v, str):
        return STRING, (), items_payload([v.encode("utf-8")])
    if isinstance(v, (bytes, bytearray, memoryview)):
        return BYTES, (), items_payload([bytes(v)])
    if isinstance(v, list):
        try:
            a = np.asarray(v)
        except Exception as e:
            raise Failure("BadOutput", f"{what} is a list numpy cannot make an array of: {e}")
        return array_tensor(a, what)
    if v is None:
        raise Failure("BadOutput", f"{what} is None; did the function forget to return?")
    raise Failure(
        "BadOutput",
        f"{what} is a {type(v).__name__}; return numpy arrays, numbers, str or bytes (a tuple "
        "or a dict of them for several components)",
    )


class Out:
    """An answer being built: its parts, and the body offset it has reached (for
    the payloads' padding)."""

    def __init__(self, length):
        self.parts = []
        self.length = length

    def add(self, b):
        self.parts.append(b)
        self.length += b.nbytes if isinstance(b, memoryview) else len(b)


def element_parts(value, what):
    """The encoded element (a list of byte strings) and its length, or Failure."""
    if isinstance(value, dict):
        names = list(value)
        bad = [k for k in names if not isinstance(k, str)]
        if bad:
            raise Failure("BadOutput", f"{what} is a dict with the key {bad[0]!r}; keys must be str")
        comps = [tensor(value[k], f"{what}[{k!r}]") for k in names]
    elif isinstance(value, tuple):
        if not value:
            raise Failure("BadOutput", f"{what} is an empty tuple")
        names = None
        comps = []
        for i, c in enumerate(value):
            if isinstance(c, (tuple, dict)):
                raise Failure(
                    "BadOutput",
                    f"{what}[{i}] is a {type(c).__name__}; an element's components cannot nest",
                )
            comps.append(tensor(c, f"{what}[{i}]"))
    else:
        names = None
        comps = [tensor(value, what)]
    return names, comps


COMP_HEADS = {}
ZEROS = [b"\x00" * i for i in range(8)]
SMALL = 256  # payloads below this are copied into the header part


def comp_head(ndim):
    """The struct of a component's header with `ndim` dimensions (cached)."""
    st = COMP_HEADS.get(ndim)
    if st is None:
        st = COMP_HEADS[ndim] = struct.Struct("<BB%dQQ" % ndim)
    return st


def write_element(out, names, comps, prefix=b""):
    """Appends `prefix` and the element to `out`, with as few parts as it can
    (small payloads are copied into the header before them)."""
    parts, length = out.parts, out.length
    head = prefix + U32.pack(len(comps)) + (b"\x01" if names is not None else b"\x00")
    if names is not None:
        head += b"".join(s(n) for n in names)
    for code, shape, payload in comps:
        nbytes = payload.nbytes if isinstance(payload, memoryview) else len(payload)
        head += comp_head(len(shape)).pack(code, len(shape), *shape, nbytes)
        head += ZEROS[-(length + len(head)) % 8]
        if nbytes < SMALL and not isinstance(payload, memoryview):
            head += payload
        else:
            parts.append(head)
            parts.append(payload)
            length += len(head) + nbytes
            head = b""
    if head:
        parts.append(head)
        length += len(head)
    out.length = length


# --- functions ------------------------------------------------------------------

FUNCTIONS = {}


def python_version():
    return platform.python_version()


def load(how, made_with, name, blob):
    if how == 0:
        import importlib

        ref = blob.decode("utf-8")
        module_name, _, qualname = ref.partition(":")
        try:
            obj = importlib.import_module(module_name)
        except Exception as e:
            raise Failure(
                type(e).__name__,
                f"module `{module_name}` is not importable: {e}",
                user_traceback(e),
            )
        path = module_name
        for part in qualname.split("."):
            try:
                obj = getattr(obj, part)
            except AttributeError:
                raise Failure("AttributeError", f"`{path}` has no attribute `{part}` (in `{ref}`)")
            path += ("." if path != module_name else ":") + part
        if not callable(obj):
            raise Failure("TypeError", f"`{ref}` is a {type(obj).__name__}, not a function")
        return obj
    mine = sys.version_info[:2]
    theirs = tuple(int(p) for p in made_with.split(".")[:2] if p.isdigit())
    if theirs != mine:
        raise Failure(
            "VersionMismatch",
            f"the function `{name}` was pickled by Python {made_with} and this worker runs "
            f"Python {python_version()}; cloudpickle needs the same minor version: run the "
            f"client with Python {mine[0]}.{mine[1]} or ship the function by reference "
            "(`package.module:function`)",
        )
    if cloudpickle is None:
        raise Failure(
            "ModuleNotFoundError",
            f"cannot load the pickled function `{name}`: cloudpickle is not installed in the "
            f"worker's Python ({sys.executable}); pip install cloudpickle there",
        )
    try:
        fn = cloudpickle.loads(blob)
    except Exception as e:
        raise Failure(
            type(e).__name__,
            f"cannot unpickle the function `{name}`: {e}",
            user_traceback(e),
        )
    if not callable(fn):
        raise Failure("TypeError", f"the pickled `{name}` is a {type(fn).__name__}, not a function")
    return fn


class Limit:
    """The time limit of each call of the function: SIGALRM raises TimeoutError
    in the function once it has run `seconds`.

    One timer per CALL frame, not two system calls per element: the timer is
    armed for `seconds` when the frame's work begins; when it fires, the element
    running then has either used up its limit (TimeoutError) or not, and the timer
    is armed again for what that element has left (or a full limit between
    elements). So an element is stopped exactly at its limit, and a long call of
    short elements sees one signal per `seconds`."""

    def __init__(self, seconds):
        self.seconds = seconds
        self.started = None  # when the running element began, None between them
        signal.signal(signal.SIGALRM, self.fire)

    def fire(self, signum, frame):
        started = self.started
        left = self.seconds if started is None else self.seconds - (time.monotonic() - started)
        if left > 0.001:
            signal.setitimer(signal.ITIMER_REAL, left)
            return
        self.started = None
        signal.setitimer(signal.ITIMER_REAL, self.seconds)
        raise TimeoutError(
            f"the call took longer than the worker's limit of {self.seconds:g} s "
            "(--python-call-timeout-secs)"
        )

    def begin(self):
        signal.setitimer(signal.ITIMER_REAL, self.seconds)

    def end(self):
        self.started = None
        signal.setitimer(signal.ITIMER_REAL, 0)

    def call(self, fn, arg):
        self.started = time.monotonic()
        try:
            return fn(arg)
        finally:
            self.started = None


def first_dim(value, what):
    vals = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else [value]
    rows = None
    for v in vals:
        if not isinstance(v, np.ndarray) or v.ndim == 0:
            raise Failure(
                "BadOutput",
                f"{what} holds a {type(v).__name__}{'' if not isinstance(v, np.ndarray) else ' scalar'}; "
                "map_batches must return arrays whose first dimension is the batch "
                "(a dict or tuple of them, or one array)",
            )
        if rows is None:
            rows = v.shape[0]
        elif v.shape[0] != rows:
            raise Failure(
                "BadOutput",
                f"{what} has arrays of {rows} and {v.shape[0]} rows; every array of the "
                "returned batch must have the same first dimension",
            )


def flat_map_outputs(fn):
    """fn, made to return a list: a generator runs to its end under the limit."""

    def run(x):
        result = fn(x)
        if isinstance(result, (str, bytes, dict)):
            raise Failure(
                "BadOutput",
                f"flat_map's function returned a {type(result).__name__}; return an iterable "
                "(list, generator) of elements",
            )
        try:
            it = iter(result)
        except TypeError:
            raise Failure(
                "BadOutput",
                f"flat_map's function returned a {type(result).__name__}, not an iterable of "
                "elements",
            )
        return list(it)

    return run


def run_one(op, fn, limit, x):
    """One input's outcome: (tag, encoded value); raises what the function raised
    or a Failure, which the caller turns into a failure outcome."""
    if op == 2:
        outputs = limit.call(flat_map_outputs(fn), x)
        encoded = [element_parts(v, f"element {i} of the result") for i, v in enumerate(outputs)]
        return 2, encoded
    result = limit.call(fn, x)
    if op == 1:
        return 1, [b"\x01" if bool(result) else b"\x00"]
    if op == 3:
        first_dim(result, "the returned batch")
    return 0, element_parts(result, "the result")


RESULT_HEAD = 9  # kind, first, count
TAG_ELEMENT, TAG_KEEP, TAG_ELEMENTS = b"\x00", b"\x01", b"\x02"


def outcome(op, fn, limit, x, at):
    """The encoded outcome of one input, starting at body offset `at`."""
    piece = Out(at)
    try:
        tag, enc = run_one(op, fn, limit, x)
        if tag == 1:
            piece.add(TAG_KEEP + enc[0])
        elif tag == 2:
            piece.add(TAG_ELEMENTS + U32.pack(len(enc)))
            for names, comps in enc:
                write_element(piece, names, comps)
        else:
            write_element(piece, *enc, prefix=TAG_ELEMENT)
        if piece.length - at > MAX_FRAME - 64:
            raise Failure(
                "BadOutput",
                f"the output for this element is {piece.length - at} bytes; at most 1 GiB",
            )
    # Everything the function raises is this element's failure, even SystemExit
    # (sys.exit() in a function): the process and the other elements go on.
    except BaseException as e:
        piece = Out(at)
        piece.add(b"\x03")
        for p in failure_parts(*failure_of(e)):
            piece.add(p)
    return piece


def call(r, limit):
    key, op, n = r.u64(), r.u8(), r.u32()
    fn = FUNCTIONS.get(key)
    if fn is None:
        raise SystemExit(f"sluice runner: CALL of function {key}, which was never loaded")
    inputs = [read_element(r) for _ in range(n)]
    del r
    out, first, count = Out(RESULT_HEAD), 0, 0
    limit.begin()
    try:
        for x in inputs:
            piece = outcome(op, fn, limit, x, out.length)
            out.parts.extend(piece.parts)
            out.length = piece.length
            count += 1
            if out.length >= FLUSH_BYTES:
                limit.end()  # no signal while writing
                write_frame([bytes([RESULT]), U32.pack(first), U32.pack(count)] + out.parts)
                out, first, count = Out(RESULT_HEAD), first + count, 0
                limit.begin()
    finally:
        limit.end()
    if count:
        write_frame([bytes([RESULT]), U32.pack(first), U32.pack(count)] + out.parts)


def main():
    timeout = float(os.environ.get("SLUICE_PY_CALL_TIMEOUT", "0"))
    memory = int(os.environ.get("SLUICE_PY_MEMORY_LIMIT", "0"))
    hello = [bytes([HELLO]), s(python_version()), s(NUMPY_VERSION), s(NUMPY_ERROR), s(CLOUDPICKLE_VERSION)]
    write_frame(hello)
    if np is None:
        return
    if memory > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    # The worker decides when this process ends (it also starts it in a process
    # group of its own, so a terminal's Ctrl-C reaches only the worker).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    limit = Limit(timeout)
    while True:
        body = read_frame()
        kind = body[0]
        r = Reader(body)
        r.at = 1
        if kind == CALL:
            call(r, limit)
            del body, r
        elif kind == LOAD:
            key, how, made_with, name, blob = r.u64(), r.u8(), r.str(), r.str(), r.blob()
            try:
                FUNCTIONS.pop(key, None)
                FUNCTIONS[key] = load(how, made_with, name, blob)
                write_frame([bytes([LOADED]), U64.pack(key), b"\x01"])
            except BaseException as e:
                failure = failure_parts(*failure_of(e))
                write_frame([bytes([LOADED]), U64.pack(key), b"\x00"] + failure)
        elif kind == UNLOAD:
            FUNCTIONS.pop(r.u64(), None)
        elif kind == ECHO:
            write_frame([bytes([ECHOED]), memoryview(body)[1:]])
        else:
            raise SystemExit(f"sluice runner: unknown request kind {kind}")


main()
