"""A state encoding that cannot run code when it is read back: JSON plus raw numpy arrays.

:func:`encode` turns an object graph into a JSON-able tree and a list of numpy arrays;
:func:`decode` rebuilds the graph, creating only instances of allow-listed classes
(:data:`ALLOWED_PREFIXES`, :data:`ALLOWED_CLASSES`) through ``__new__`` and ``__setstate__``;
it never unpickles and never calls anything else the input names. Shared references and cycles
are kept. What the tree may hold and how decoding stays safe:
docs/connectors.md#safe-state-encoding.
"""

from __future__ import annotations

import copyreg
import gc
import importlib
import math
from collections import OrderedDict, deque
from fractions import Fraction
from itertools import chain
from typing import Any

import numpy as np

__all__ = ["encode", "decode", "StateError", "ALLOWED_PREFIXES", "ALLOWED_CLASSES",
           "MOVED_MODULES", "current_class_name", "refresh_generators", "array_from_bytes",
           "array_meta"]

#: modules whose classes may be rebuilt from a checkpoint
ALLOWED_PREFIXES: tuple[str, ...] = ("dpstream.models.", "dpstream.accounting.")
#: third-party classes the models hold (river's drift detector and its running mean)
ALLOWED_CLASSES: frozenset[str] = frozenset({
    "river.drift.page_hinkley:PageHinkley",
    "river.stats.mean:Mean",
})
#: where the modules of older versions live now (issue 48 grouped models/ into a core and one
#: sub-package per algorithm family): a checkpoint or model-topic message written before the
#: move names its classes by the old modules, and decoding reads them through this map. Merged
#: modules map to the module that absorbed them; their classes kept their names.
MOVED_MODULES: dict[str, str] = {
    f"dpstream.models.{old}": f"dpstream.models.{new}" for old, new in {
        "_params": "params", "routing": "forest_kernels",
        "sgbdt": "boosting.sgbdt", "sgbdt_doc": "boosting.sgbdt",
        "sgbdt_engine": "boosting.sgbdt_engine", "sgbdt_stream": "boosting.sgbdt_stream",
        "sgbdt_party": "boosting.sgbdt_party", "dpboost": "boosting.dpboost",
        "hist_splits": "boosting.hist_splits", "random_splits": "boosting.random_splits",
        "split_draw": "boosting._draw_kernels", "round_kernels": "boosting.round_kernels",
        "block_sums": "boosting._block_sums", "init_score": "boosting.scores",
        "raw_score": "boosting.scores",
        "window_forest": "windows.window_forest", "window_share": "windows.window_forest",
        "window_hold": "windows.window_forest", "window_stream": "windows.window_stream",
        "window_trees": "windows.window_trees", "window_exchange": "windows.window_exchange",
        "relevance": "windows.relevance", "private_range": "windows.private_range",
        "random_trees": "windows.random_trees", "buckets": "windows.buckets",
        "median_forest": "windows.median_forest", "random_forest": "windows.random_forest",
        "rdt": "windows.rdt", "rdt_parts": "windows.rdt", "greedy_forest": "windows.greedy_forest",
        "window_kernels": "windows.window_kernels", "trie_kernels": "windows._trie_kernels",
        # single-driver modules made private (their old public names)
        "boosting.block_sums": "boosting._block_sums",
        "boosting.draw_kernels": "boosting._draw_kernels",
        "windows.trie_kernels": "windows._trie_kernels",
    }.items()}
#: attributes a class's state loses in a checkpoint, and how they are rebuilt on load
#: (river's Page-Hinkley test keeps its test as a bound method chosen by ``mode``)
_DERIVED: dict[str, tuple[str, ...]] = {"river.drift.page_hinkley:PageHinkley": ("_test_drift",)}
_BIT_GENERATORS = {name: getattr(np.random, name)
                   for name in ("PCG64", "PCG64DXSM", "MT19937", "Philox", "SFC64")}


def _cryptographic_bit_generators() -> dict[str, type]:
    # the noise generators (dpstream.accounting.noise.secure_generator): randomgen's AES counter
    # and ChaCha; their state holds the key, so a checkpoint holding one holds the key
    import randomgen

    return {"AESCounter": randomgen.AESCounter, "ChaCha": randomgen.ChaCha}


_CRYPTOGRAPHIC = frozenset(_cryptographic_bit_generators())
_BIT_GENERATORS.update(_cryptographic_bit_generators())
_PRIMITIVE = (str, int, bool, type(None))
_PLAIN = frozenset(_PRIMITIVE)
_NUMBERS = frozenset((int, bool, float))
_JSON_SCALARS = frozenset((*_PRIMITIVE, float))


def _flat(seq: list | tuple) -> bool:
    """Whether every item is a JSON scalar as is (the fast path for long lists of numbers)."""
    types = set(map(type, seq))
    if types <= _PLAIN:
        return True
    return types <= _NUMBERS and all(map(math.isfinite, seq))


def _flat_tuples(tuples: list) -> bool:
    """Whether every item of every tuple is a JSON scalar as is (one pass over all items when
    none is a float, the common case of record ids; else tuple by tuple)."""
    if set(map(type, chain.from_iterable(tuples))) <= _PLAIN:
        return True
    return all(map(_flat, tuples))


class StateError(ValueError):
    """A state that cannot be encoded, or an encoded state that is malformed or not allowed."""


# ---------------------------------------------------------------------------- encoding
def encode(obj: Any) -> tuple[Any, list[np.ndarray]]:
    """``obj`` as a JSON-able tree and the arrays it refers to (by index).

    Parameters
    ----------
    obj
        The object graph (what it may hold: docs/connectors.md#safe-state-encoding).

    Returns
    -------
    tree, arrays
        ``json.dumps(tree)`` works; ``arrays[i]`` is the array of ``{"@": "a", "k": i}``.

    Examples
    --------
    >>> tree, arrays = encode({"n": 3, "pair": (1, "x")})
    >>> tree
    {'@': 'd', 'm': {'n': 3, 'pair': {'@': 't', 'v': [1, 'x']}}}
    """
    # encoding allocates a container per list, tuple and dict it meets (100,000 for a full
    # record-id memory): the cyclic GC would walk the whole heap many times over for garbage
    # that cannot exist yet, so it pauses while the tree is built
    paused = gc.isenabled()
    gc.disable()
    try:
        return _Encoder().run(obj)
    finally:
        if paused:
            gc.enable()


class _Encoder:
    def __init__(self) -> None:
        self.memo: dict[int, tuple[int, Any]] = {}   # id -> (number, the object, kept alive)
        self.arrays: list[np.ndarray] = []
        self.busy: set[int] = set()                  # tuples being encoded (cycle guard)
        self.path: list[tuple[str, Any]] = []

    def run(self, obj: Any) -> tuple[Any, list[np.ndarray]]:
        return self.enc(obj), self.arrays

    def fail(self, what: str) -> StateError:
        where = "".join(_step(kind, key) for kind, key in self.path) or "the root"
        return StateError(f"cannot encode {what} at {where}")

    def number(self, obj: Any) -> None:
        self.memo[id(obj)] = (len(self.memo), obj)

    def enc(self, obj: Any) -> Any:
        t = type(obj)
        if t in _PRIMITIVE:
            return obj
        if t is float:
            return obj if math.isfinite(obj) else {"@": "f", "v": repr(obj)}
        seen = self.memo.get(id(obj))
        if seen is not None:
            return {"@": "ref", "n": seen[0]}
        if t is list:
            self.number(obj)
            if _flat(obj):
                return list(obj)
            if set(map(type, obj)) == {tuple} and _flat_tuples(obj):   # e.g. record ids
                return {"@": "lt", "v": list(map(list, obj))}
            if self.float_rows(obj):   # e.g. a window's buffered records: one float array
                for row in obj:
                    self.number(row)
                self.arrays.append(np.array(obj, dtype=np.float64))
                return {"@": "rows", "k": len(self.arrays) - 1}
            return [self.child("[]", i, v) for i, v in enumerate(obj)]
        if t is dict or t is OrderedDict:
            self.number(obj)
            tag = "d" if t is dict else "od"
            if all(type(k) is str for k in obj):
                return {"@": tag, "m": {k: self.child("[]", k, v) for k, v in obj.items()}}
            return {"@": tag, "i": [[self.child("key", k, k), self.child("[]", k, v)]
                                    for k, v in obj.items()]}
        if t is tuple:
            if _flat(obj):
                return {"@": "t", "v": list(obj)}
            if id(obj) in self.busy:
                raise self.fail("a tuple that contains itself")
            self.busy.add(id(obj))
            try:
                return {"@": "t", "v": [self.child("[]", i, v) for i, v in enumerate(obj)]}
            finally:
                self.busy.discard(id(obj))
        if t is np.ndarray:
            return self.array(obj)
        if isinstance(obj, np.generic):
            if obj.dtype.hasobject:
                raise self.fail(f"a numpy object scalar {obj!r}")
            return {"@": "ns", "dt": _dtype_descr(obj.dtype), "v": obj.tobytes().hex()}
        if t is set or t is frozenset:
            if t is set:
                self.number(obj)
            return {"@": "set" if t is set else "fset",
                    "v": [self.child("{}", None, v) for v in obj]}
        if t is deque:
            self.number(obj)
            return {"@": "dq", "maxlen": obj.maxlen,
                    "v": [self.child("[]", i, v) for i, v in enumerate(obj)]}
        if t is bytes:
            return {"@": "b", "v": obj.hex()}
        if t is Fraction:
            return {"@": "frac", "v": [obj.numerator, obj.denominator]}
        if isinstance(obj, np.dtype):
            return {"@": "dt", "v": _dtype_descr(obj)}
        if t is np.random.Generator:
            self.number(obj)
            return {"@": "gen", "bg": self.child(".", "bit_generator", obj.bit_generator)}
        if t in _BIT_GENERATORS.values():
            self.number(obj)
            return {"@": "bg", "cls": t.__name__,
                    "seed_seq": self.child(".", "seed_seq", obj.seed_seq),
                    "state": self.child(".", "state", obj.state)}
        if t is np.random.SeedSequence:
            self.number(obj)
            return {"@": "ss", "entropy": self.child(".", "entropy", obj.entropy),
                    "spawn_key": list(obj.spawn_key), "pool_size": obj.pool_size,
                    "n_children_spawned": obj.n_children_spawned}
        return self.instance(obj)

    def float_rows(self, obj: list) -> bool:
        """Whether ``obj`` is a list of equally long lists of floats seen nowhere before."""
        if not obj or set(map(type, obj)) != {list}:
            return False
        width = len(obj[0])
        return (width > 0 and all(len(row) == width for row in obj)
                and all(set(map(type, row)) == {float} for row in obj)
                and not any(id(row) in self.memo for row in obj))

    def child(self, kind: str, key: Any, value: Any) -> Any:
        if type(value) in _PRIMITIVE:
            return value
        self.path.append((kind, key))
        try:
            return self.enc(value)
        finally:
            self.path.pop()

    def array(self, a: np.ndarray) -> dict:
        if a.dtype.hasobject:
            raise self.fail(f"an array of Python objects (dtype {a.dtype})")
        self.number(a)
        self.arrays.append(a)
        return {"@": "a", "k": len(self.arrays) - 1}

    def instance(self, obj: Any) -> dict:
        cls = type(obj)
        name = f"{cls.__module__}:{cls.__qualname__}"
        if not _allowed(name):
            raise self.fail(f"an instance of {name} (not an allow-listed class; see "
                            f"dpstream.connectors.safe_state.ALLOWED_CLASSES)")
        try:   # (a live model refuses pickle's reduction; its unguarded one is this)
            reduce = getattr(obj, "__dpstream_reduce__", None)
            rv = obj.__reduce_ex__(4) if reduce is None else reduce(4)
        except Exception as exc:
            raise self.fail(f"an instance of {name} ({exc})") from exc
        if (not isinstance(rv, tuple) or len(rv) < 2 or rv[0] is not copyreg.__newobj__
                or rv[1] != (cls,) or any(x is not None for x in rv[3:])):
            raise self.fail(f"an instance of {name}: it pickles through a custom __reduce__, "
                            f"which a checkpoint cannot replay")
        self.number(obj)
        state = rv[2] if len(rv) > 2 else None
        if name in _DERIVED and isinstance(state, dict):
            state = {k: v for k, v in state.items() if k not in _DERIVED[name]}
        return {"@": "obj", "cls": name, "state": self.child("<>", cls.__name__, state)}


def _step(kind: str, key: Any) -> str:
    if kind == "[]":
        return f"[{key!r}]"
    if kind == "key":
        return f".key({key!r})"
    if kind == "<>":
        return f"<{key}>"
    return "{}" if kind == "{}" else f".{key}"


def _dtype_descr(dt: np.dtype) -> Any:
    descr = np.lib.format.dtype_to_descr(dt)
    return descr if isinstance(descr, str) else _lists(descr)


def _lists(value: Any) -> Any:
    """Tuples inside a structured dtype's descr as lists (JSON), back by :func:`_tuples`."""
    if isinstance(value, (list, tuple)):
        return [_lists(v) for v in value]
    return value


def _tuples(value: Any) -> Any:
    if isinstance(value, list):
        if value and all(isinstance(v, list) for v in value):
            return [_tuples(v) for v in value]       # the list of fields
        return tuple(_tuples(v) for v in value)      # one field: (name, type[, shape])
    return value


def array_meta(a: np.ndarray, offset: int) -> dict:
    """How :func:`array_from_bytes` finds ``a`` in the data section at ``offset``."""
    order = "F" if a.flags.f_contiguous and not a.flags.c_contiguous else "C"
    return {"dtype": _dtype_descr(a.dtype), "shape": list(a.shape), "order": order,
            "offset": offset, "nbytes": int(a.nbytes)}


def array_from_bytes(meta: dict, data: bytes | memoryview) -> np.ndarray:
    """The array ``meta`` describes, copied out of ``data`` (never through pickle)."""
    dt = _safe_dtype(meta["dtype"])
    shape = tuple(meta["shape"])
    if not all(type(n) is int and n >= 0 for n in shape):
        raise StateError(f"bad array shape {meta['shape']!r}")
    count = math.prod(shape)
    offset, nbytes = meta["offset"], meta["nbytes"]
    if (type(offset) is not int or type(nbytes) is not int or offset < 0
            or nbytes != count * dt.itemsize or offset + nbytes > len(data)
            or meta["order"] not in ("C", "F")):
        raise StateError(f"array {meta!r} does not fit the data section")
    flat = np.frombuffer(data, dtype=dt, count=count, offset=offset)
    return flat.reshape(shape, order=meta["order"]).copy(order="K")


def _safe_dtype(descr: Any) -> np.dtype:
    if not isinstance(descr, (str, list)):
        raise StateError(f"bad dtype {descr!r}")
    try:
        dt = np.lib.format.descr_to_dtype(descr if isinstance(descr, str) else _tuples(descr))
    except Exception as exc:
        raise StateError(f"bad dtype {descr!r}: {exc}") from None
    if dt.hasobject:
        raise StateError(f"dtype {descr!r} holds Python objects; refused (never unpickled)")
    return dt


# ---------------------------------------------------------------------------- decoding
def decode(tree: Any, arrays: list[np.ndarray]) -> Any:
    """The object graph :func:`encode` gave ``tree`` and ``arrays`` for.

    The decoded objects hold ``arrays`` themselves, not copies (a checkpoint's arrays are
    read from its file, so nothing else holds them): to decode what :func:`encode` just gave
    for a live object, pass copies, or the two share their buffers and one's training
    changes the other's.

    Raises
    ------
    StateError
        The tree is malformed, names a class that is not allow-listed, or refers to a missing
        array.

    Examples
    --------
    >>> import numpy as np
    >>> rng = np.random.default_rng(7)
    >>> shared = [1, 2.5, None]
    >>> tree, arrays = encode({"w": np.arange(3.0), "rng": rng, "a": shared, "b": shared})
    >>> back = decode(tree, arrays)
    >>> back["w"], back["a"] is back["b"], bool(back["rng"].random() == rng.random())
    (array([0., 1., 2.]), True, True)
    >>> decode({"@": "obj", "cls": "posix:system", "state": "touch /tmp/pwned"}, [])
    Traceback (most recent call last):
    ...
    dpstream.connectors.safe_state.StateError: class 'posix:system' is not allowed in a checkpoint
    """
    try:
        return _Decoder(arrays).dec(tree)
    except StateError:
        raise
    except RecursionError:
        raise StateError("the state is nested too deeply") from None
    except Exception as exc:  # malformed input: a wrong type or a missing key somewhere
        raise StateError(f"malformed state ({type(exc).__name__}: {exc})") from exc


def refresh_generators(obj: Any) -> tuple[Any, list[str]]:
    """``obj`` rebuilt with every non-cryptographic numpy generator in it replaced by a fresh
    AES-CTR one keyed from OS entropy (shared generators stay shared); and the names of the
    bit generators replaced.

    A checkpoint written before the noise came from a cryptographic generator holds PCG64
    states, which outputs can reveal: a resumed production model must not go on drawing from
    them.

    >>> back, replaced = refresh_generators({"a": np.random.default_rng(1)})
    >>> type(back["a"].bit_generator).__name__, replaced
    ('AESCounter', ['PCG64'])
    """
    tree, arrays = encode(obj)
    decoder = _Decoder([a.copy() for a in arrays], fresh_generators=True)
    out = decoder.dec(tree)
    return out, decoder.replaced


class _Decoder:
    def __init__(self, arrays: list[np.ndarray], fresh_generators: bool = False):
        self.arrays = arrays
        self.memo: list[Any] = []
        self.fresh_generators = fresh_generators
        self.replaced: list[str] = []     # bit generators given up for fresh AES-CTR ones

    def dec(self, node: Any) -> Any:
        t = type(node)
        if t in _PRIMITIVE or t is float:
            return node
        if t is list:
            if set(map(type, node)) <= _JSON_SCALARS:
                out = list(node)
                self.memo.append(out)
                return out
            out = []
            self.memo.append(out)
            out.extend(self.dec(v) for v in node)
            return out
        if t is not dict:
            raise StateError(f"unexpected node {node!r}")
        tag = node["@"]
        handler = _HANDLERS.get(tag) if isinstance(tag, str) else None
        if handler is None:
            raise StateError(f"unknown tag {tag!r}")
        return handler(self, node)

    def ref(self, node: dict) -> Any:
        n = node["n"]
        if type(n) is not int or not 0 <= n < len(self.memo):
            raise StateError(f"reference {n!r} to nothing decoded yet")
        return self.memo[n]

    def mapping(self, node: dict) -> dict:
        out = {} if node["@"] == "d" else OrderedDict()
        self.memo.append(out)
        if "m" in node:
            for k, v in node["m"].items():
                out[k] = self.dec(v)
        else:
            for k, v in node["i"]:
                out[self.dec(k)] = self.dec(v)
        return out

    def tuples(self, node: dict) -> list[tuple]:
        items = node["v"]
        if not all(type(v) is list and set(map(type, v)) <= _JSON_SCALARS for v in items):
            raise StateError("a list of tuples holds scalars only")
        out = list(map(tuple, items))
        self.memo.append(out)
        return out

    def rows(self, node: dict) -> list[list[float]]:
        k = node["k"]
        if type(k) is not int or not 0 <= k < len(self.arrays):
            raise StateError(f"array {k!r} is not in the data section")
        a = self.arrays[k]
        if a.ndim != 2 or a.dtype != np.float64:
            raise StateError("rows of floats need a 2-D float64 array")
        out = a.tolist()
        self.memo.append(out)
        self.memo.extend(out)
        return out

    def tuple_(self, node: dict) -> tuple:
        items = node["v"]
        if type(items) is list and set(map(type, items)) <= _JSON_SCALARS:
            return tuple(items)
        return tuple(self.dec(v) for v in items)

    def float_(self, node: dict) -> float:
        if node["v"] not in ("nan", "inf", "-inf"):
            raise StateError(f"bad float {node['v']!r}")
        return float(node["v"])

    def array(self, node: dict) -> np.ndarray:
        k = node["k"]
        if type(k) is not int or not 0 <= k < len(self.arrays):
            raise StateError(f"array {k!r} is not in the data section")
        a = self.arrays[k]
        self.memo.append(a)
        return a

    def scalar(self, node: dict) -> np.generic:
        dt = _safe_dtype(node["dt"])
        raw = bytes.fromhex(node["v"])
        if len(raw) != dt.itemsize:
            raise StateError(f"scalar of {len(raw)} bytes for dtype {dt}")
        return np.frombuffer(raw, dtype=dt)[0]

    def set_(self, node: dict) -> set | frozenset:
        if node["@"] == "fset":
            return frozenset(self.dec(v) for v in node["v"])
        out: set = set()
        self.memo.append(out)
        out.update(self.dec(v) for v in node["v"])
        return out

    def deque_(self, node: dict) -> deque:
        maxlen = node["maxlen"]
        if maxlen is not None and (type(maxlen) is not int or maxlen < 0):
            raise StateError(f"bad deque maxlen {maxlen!r}")
        out: deque = deque(maxlen=maxlen)
        self.memo.append(out)
        out.extend(self.dec(v) for v in node["v"])
        return out

    def bytes_(self, node: dict) -> bytes:
        return bytes.fromhex(node["v"])

    def fraction(self, node: dict) -> Fraction:
        num, den = node["v"]
        if type(num) is not int or type(den) is not int:
            raise StateError(f"bad fraction {node['v']!r}")
        return Fraction(num, den)

    def dtype(self, node: dict) -> np.dtype:
        return _safe_dtype(node["v"])

    def generator(self, node: dict) -> np.random.Generator:
        slot = len(self.memo)
        self.memo.append(None)
        bg = self.dec(node["bg"])
        if type(bg) not in _BIT_GENERATORS.values():
            raise StateError("a Generator needs a bit generator")
        if self.fresh_generators and type(bg).__name__ not in _CRYPTOGRAPHIC:
            self.replaced.append(type(bg).__name__)
            bg = _BIT_GENERATORS["AESCounter"]()          # keyed from OS entropy
        self.memo[slot] = np.random.Generator(bg)
        return self.memo[slot]

    def bit_generator(self, node: dict) -> Any:
        cls = _BIT_GENERATORS.get(node["cls"])
        if cls is None:
            raise StateError(f"bit generator {node['cls']!r} is not allowed")
        slot = len(self.memo)
        self.memo.append(None)
        seed_seq = self.dec(node["seed_seq"])
        if seed_seq is not None and type(seed_seq) is not np.random.SeedSequence:
            raise StateError("a bit generator's seed_seq must be a SeedSequence")
        bg = cls(seed_seq)
        bg.state = self.dec(node["state"])
        self.memo[slot] = bg
        return bg

    def seed_sequence(self, node: dict) -> np.random.SeedSequence:
        slot = len(self.memo)
        self.memo.append(None)
        entropy = self.dec(node["entropy"])
        ints = entropy if isinstance(entropy, list) else [entropy]
        if not all(type(v) is int for v in [*ints, *node["spawn_key"], node["pool_size"],
                                            node["n_children_spawned"]]):
            raise StateError("a SeedSequence holds integers only")
        ss = np.random.SeedSequence(entropy, spawn_key=tuple(node["spawn_key"]),
                                    pool_size=node["pool_size"],
                                    n_children_spawned=node["n_children_spawned"])
        self.memo[slot] = ss
        return ss

    def instance(self, node: dict) -> Any:
        cls = _resolve(node["cls"])
        obj = cls.__new__(cls)
        self.memo.append(obj)
        state = self.dec(node["state"])
        setstate = getattr(cls, "__setstate__", None)
        if setstate is not None:
            setstate(obj, state)
            return obj
        if state is None:
            return obj
        slots = None
        if isinstance(state, tuple) and len(state) == 2:
            state, slots = state
        if state:
            if not isinstance(state, dict):
                raise StateError(f"state of {node['cls']} is not a dict")
            obj.__dict__.update(state)
        for k, v in (slots or {}).items():
            setattr(obj, k, v)
        if node["cls"] == "river.drift.page_hinkley:PageHinkley":
            _page_hinkley_test(obj)
        return obj


_HANDLERS = {
    "ref": _Decoder.ref, "d": _Decoder.mapping, "od": _Decoder.mapping, "t": _Decoder.tuple_,
    "lt": _Decoder.tuples, "rows": _Decoder.rows,
    "f": _Decoder.float_, "a": _Decoder.array, "ns": _Decoder.scalar, "set": _Decoder.set_,
    "fset": _Decoder.set_, "dq": _Decoder.deque_, "b": _Decoder.bytes_,
    "frac": _Decoder.fraction, "dt": _Decoder.dtype, "gen": _Decoder.generator,
    "bg": _Decoder.bit_generator, "ss": _Decoder.seed_sequence, "obj": _Decoder.instance,
}


def _page_hinkley_test(obj: Any) -> None:
    tests = {"up": "_test_increase", "down": "_test_decrease", "both": "_test_both"}
    mode = obj.__dict__.get("mode")
    if mode not in tests:
        raise StateError(f"PageHinkley mode {mode!r} is not one of {sorted(tests)}")
    obj._test_drift = getattr(obj, tests[mode])


def _allowed(name: str) -> bool:
    module, _, qualname = name.partition(":")
    if not qualname or "<" in qualname:
        return False
    return name in ALLOWED_CLASSES or module.startswith(ALLOWED_PREFIXES)


def current_class_name(name: str) -> str:
    """``module:qualname`` as this version names it: a module of an older version is read
    through :data:`MOVED_MODULES`.

    >>> current_class_name("dpstream.models.sgbdt:SGBDTClassifier")
    'dpstream.models.boosting.sgbdt:SGBDTClassifier'
    >>> current_class_name("dpstream.models.forest:Forest")
    'dpstream.models.forest:Forest'
    """
    module, sep, qualname = name.partition(":")
    return f"{MOVED_MODULES.get(module, module)}{sep}{qualname}"


def _resolve(name: Any) -> type:
    """The allow-listed class called ``name`` (``module:qualname``, an older version's module
    read through :data:`MOVED_MODULES`), or :class:`StateError`."""
    if not isinstance(name, str) or not _allowed(name):
        raise StateError(f"class {name!r} is not allowed in a checkpoint")
    name = current_class_name(name)
    module, _, qualname = name.partition(":")
    try:
        obj: Any = importlib.import_module(module)
    except ImportError as exc:
        raise StateError(f"class {name!r}: {exc}") from None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            break
    if (not isinstance(obj, type) or obj.__module__ != module
            or obj.__qualname__ != qualname):
        raise StateError(f"class {name!r} is not allowed in a checkpoint (no such class)")
    return obj
