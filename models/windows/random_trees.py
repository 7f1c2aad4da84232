"""Random decision trees that are never built: every node is a function of its key (Fletcher &
Islam 2017; Jagannathan et al. 2013).

:class:`ImplicitRandomTrees` builds nothing: every node of a complete random decision tree has
a 64-bit key (the root's from a per-model secret and the tree's id, a child's from its parent's
key and branch) and its split is a pseudo-random function of that key, so the trees are fixed
before any data arrives and routing a record ends at its leaf's key. The leaves release through
public buckets (:mod:`~dpstream.models.windows.buckets`); :class:`LeafTable` serves windows
trained before buckets. :func:`private_ranges` releases DP numeric ranges for the split points.

The design: ``docs/keyed_trees.md#keyed-random-trees``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...accounting import LaplaceMechanism, noise
from ..encoding import RecordEncoder

# compiled walks (numba); with ``_wk`` set to None (a test) the numpy walks below give the
# same keys. The forests reach the batch tries as ``random_trees._tk``.
from . import _trie_kernels as _tk  # noqa: F401
from . import window_kernels as _wk

__all__ = ["ImplicitRandomTrees", "KeyedTree", "LeafTable", "child_keys", "keyed_rank",
           "kernel_salts", "laplace_of", "nth_free", "private_ranges", "root_keys", "uniform_of",
           "uniform_label"]

_U64 = np.uint64
_GOLDEN = _U64(0x9E3779B97F4A7C15)
# salts of the pseudo-random draws: a node's split (attribute and point), a leaf's output
_ATTR, _OUT, _LAP = 0xA7, 0xC5, 0x1A9


def _mix(z: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, element-wise on uint64 (wrapping arithmetic)."""
    z = z + _GOLDEN
    z = (z ^ (z >> _U64(30))) * _U64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> _U64(27))) * _U64(0x94D049BB133111EB)
    return z ^ (z >> _U64(31))


def _salted(salt: int) -> np.uint64:
    return _mix(np.array([salt], dtype=_U64))[0]


_SALTS = {s: _salted(s) for s in (_ATTR, _OUT)}
_DRAW = _SALTS[_ATTR]
_BRANCH = _U64(0xD6E8FEB86659FD93)      # odd: distinct branches give distinct child keys
_LOW32 = _U64(0xFFFFFFFF)


def root_keys(secret: int, trees) -> np.ndarray:
    """The root key of each tree id under a model's secret."""
    return _mix(_U64(int(secret) & (2**63 - 1)) ^ _mix(np.asarray(trees, dtype=_U64)))


def child_keys(keys: np.ndarray, branch: np.ndarray) -> np.ndarray:
    """The key of child ``branch`` (0, 1, ...) of each node."""
    return _mix(keys ^ ((np.asarray(branch).astype(_U64) + _U64(1)) * _BRANCH))


def keyed_rank(keys: np.ndarray, n: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A node's one 64-bit draw: a uniform rank in ``range(n)`` from its high 32 bits, and a
    uniform [0, 1) from its low 32 bits (resolution 2**-32)."""
    z = _mix(keys ^ _DRAW)
    rank = ((z >> _U64(32)) * np.asarray(n).astype(_U64) >> _U64(32)).astype(np.intp)
    return rank, (z & _LOW32).astype(np.float64) * 2.0 ** -32


def nth_free(free: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """Per row, the column of the ``rank``-th ``True`` of ``free`` (the attribute a keyed draw
    picks among those a node may still split).

    >>> nth_free(np.array([[True, False, True], [False, True, True]]), np.array([1, 0])).tolist()
    [2, 1]
    """
    return np.argmax(np.cumsum(free, axis=1) > np.asarray(rank)[:, None], axis=1)


@dataclass
class KeyedTree:
    """A tree of a window, named by its id: its root key derives from the model's secret and
    the id (:func:`root_keys`); ``depth`` is its number of levels of splits."""

    id: int
    depth: int


def uniform_of(keys: np.ndarray, salt: int) -> np.ndarray:
    """A uniform [0, 1) draw per key: a pure function of ``(key, salt)``.

    >>> u = uniform_of(np.arange(100_000, dtype=np.uint64), 1)
    >>> bool(0 <= u.min() and u.max() < 1), round(float(u.mean()), 2)
    (True, 0.5)
    """
    s = _SALTS.get(salt)
    z = _mix(np.asarray(keys, dtype=_U64) ^ (_salted(salt) if s is None else s))
    return (z >> _U64(11)).astype(np.float64) * 2.0 ** -53


def laplace_of(keys: np.ndarray, n_classes: int, scale: np.ndarray | float) -> np.ndarray:
    """A row of ``n_classes`` independent ``Laplace(0, scale)`` draws per key (inverse CDF of
    :func:`uniform_of`, one salt per class): the Laplace mechanism's output on zero counts.
    ``scale`` is one value or one per key.

    >>> z = laplace_of(np.arange(200_000, dtype=np.uint64), 2, 2.0)
    >>> z.shape, round(float(np.median(np.abs(z))), 1)       # median |Lap(b)| = b ln 2
    ((200000, 2), 1.4)
    """
    keys = np.asarray(keys, dtype=_U64).ravel()
    scale = np.broadcast_to(np.asarray(scale, dtype=np.float64), keys.shape)
    out = np.empty((keys.size, n_classes))
    for c in range(n_classes):
        z = _mix(keys ^ _salted(_LAP + c))
        u = ((z >> _U64(11)).astype(np.float64) + 0.5) * 2.0 ** -53 - 0.5   # (-1/2, 1/2)
        out[:, c] = -scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))
    return out


def kernel_salts(n_classes: int) -> tuple[np.uint64, np.uint64, np.ndarray]:
    """The salts of :func:`keyed_rank`, :func:`uniform_label` and :func:`laplace_of`'s
    ``n_classes`` draws, for the compiled kernels
    (:mod:`~dpstream.models.windows.window_kernels`)."""
    lap = _LAP_SALTS.get(n_classes)
    if lap is None:
        lap = _LAP_SALTS[n_classes] = np.array([_salted(_LAP + c) for c in range(n_classes)],
                                               dtype=_U64)
    return _DRAW, _SALTS[_OUT], lap


_LAP_SALTS: dict[int, np.ndarray] = {}


def uniform_label(keys: np.ndarray, n_classes: int) -> np.ndarray:
    """One-hot rows of a uniformly random label per key (report-noisy-argmax on zero counts)."""
    label = np.minimum((uniform_of(keys, _OUT) * n_classes).astype(np.intp), n_classes - 1)
    out = np.zeros((np.size(keys), n_classes))
    out[np.arange(np.size(keys)), label] = 1.0
    return out


class ImplicitRandomTrees:
    """The random decision trees of one schema, each named by an integer id.

    Parameters
    ----------
    encoder
        The schema's :class:`~dpstream.models.encoding.RecordEncoder` (public domains only).
    depth
        Levels of splits from the root to a leaf.
    secret
        The key every tree derives from (draw it from the model's private random source).
    domain
        ``(lo, hi)``: the interval of each numeric attribute (schema order) inside which the
        roots draw their split points; default the schema's public domain. Pass a DP release
        (:func:`~dpstream.models.windows.random_trees.private_ranges`) to split where the data lie:
        the same secret with another domain gives the same attributes and uniform draws, the
        split points scaled into the new intervals.

    Examples
    --------
    >>> from dpstream.models.encoding import RecordEncoder
    >>> enc = RecordEncoder({"features": {"x": {"type": "numeric", "min": -10, "max": 10}},
    ...                      "target": {"type": "binary", "values": [0, 1]}})
    >>> wide = ImplicitRandomTrees(enc, depth=3, secret=3)
    >>> narrow = wide.with_domain(np.array([-1.0]), np.array([1.0]))
    >>> narrow.domain, wide.domain
    ((array([-1.]), array([1.])), (array([-10.]), array([10.])))
    >>> V = narrow.matrix(np.linspace(-1.0, 1.0, 101)[:, None])    # data inside [-1, 1]
    >>> len(set(narrow.leaf_keys(V, [0]).ravel())), len(set(wide.leaf_keys(V, [0]).ravel()))
    (6, 1)

    A numeric and a categorical attribute; missing values (NaN) go right:

    >>> enc = RecordEncoder({"features": {"age": {"type": "numeric", "min": 0, "max": 100},
    ...                                   "sex": {"type": "categorical", "values": ["F", "M"]}},
    ...                      "target": {"type": "binary", "values": [False, True]}})
    >>> trees = ImplicitRandomTrees(enc, depth=2, secret=7)
    >>> V = trees.matrix(enc.encode_many([{"age": 30, "sex": "F"}, {"age": 70}, {"age": 30}]))
    >>> V.tolist()
    [[0.0, 30.0, 0.0], [0.0, 70.0, nan], [0.0, 30.0, nan]]
    >>> keys = trees.leaf_keys(V, np.arange(4))        # (records, trees): the leaf each reaches
    >>> keys.shape, keys.dtype.name
    ((3, 4), 'uint64')
    >>> bool((trees.leaf_keys(V, np.arange(4)) == keys).all())   # a pure function
    True
    >>> table = LeafTable.build(keys[:1, :2].ravel(), np.array([[3.0, 1.0], [0.0, 2.0]]))
    >>> table.lookup(keys[0, :2], empty=lambda k: np.zeros((k.size, 2))).tolist()
    [[3.0, 1.0], [0.0, 2.0]]
    """

    def __init__(self, encoder: RecordEncoder, *, depth: int, secret: int,
                 domain: tuple[np.ndarray, np.ndarray] | None = None):
        numeric = encoder.numeric_columns()
        self._num_cols = np.array([c for c, _, _ in numeric], dtype=np.intp)
        self._cat_groups = [np.array(g, dtype=np.intp) for g in encoder.categorical_columns()]
        self.s, self.r = len(numeric), len(self._cat_groups)
        self._lo = np.array([lo for _, lo, _ in numeric], dtype=np.float64)
        self._hi = np.array([hi for _, _, hi in numeric], dtype=np.float64)
        if domain is not None:
            self._set_domain(*domain)
        self._last = np.array([g.size - 1 for g in self._cat_groups], dtype=np.float64)
        self._view: np.ndarray | None = None   # with_slots: the routing matrix's columns
        self.depth = int(depth)
        self.secret = int(secret) & (2**63 - 1)

    @property
    def domain(self) -> tuple[np.ndarray, np.ndarray]:
        """``(lo, hi)``: each numeric attribute's interval at the roots."""
        return self._lo, self._hi

    def with_domain(self, lo: np.ndarray, hi: np.ndarray) -> ImplicitRandomTrees:
        """The same trees (encoder, depth, secret) over another numeric ``domain``."""
        trees = ImplicitRandomTrees.__new__(ImplicitRandomTrees)
        trees.__dict__.update(self.__dict__)
        trees._set_domain(lo, hi)
        return trees

    def with_slots(self, counts) -> ImplicitRandomTrees:
        """The same secret's trees over attribute *slots*: attribute ``j`` (numeric ones
        first, then categorical, schema order) fills ``counts[j] >= 1`` of the slots a node
        draws uniformly among, so it is drawn with probability proportional to its count —
        relevance-weighted attributes without touching the walks (a numeric attribute may
        split again anyway; a repeated categorical slot may split a path on it twice, the
        second time sending every record one way). Route with :meth:`view` of the model's
        routing matrix. Call after :meth:`with_domain`.

        >>> from dpstream.models.encoding import RecordEncoder
        >>> enc = RecordEncoder({"features": {"a": {"type": "numeric", "min": 0, "max": 1},
        ...                                   "b": {"type": "numeric", "min": 0, "max": 1}},
        ...                      "target": {"type": "binary", "values": [0, 1]}})
        >>> base = ImplicitRandomTrees(enc, depth=2, secret=1)
        >>> slots = base.with_slots([3, 1])
        >>> V = base.matrix(enc.encode_many([{"a": 0.2, "b": 0.7}]))
        >>> slots.s, slots.view(V).tolist()
        (4, [[0.0, 0.2, 0.2, 0.2, 0.7]])
        """
        counts = np.asarray(counts, dtype=np.int64).reshape(-1)
        if counts.shape != (self.s + self.r,) or (counts < 1).any() or self._view is not None:
            raise ValueError(f"counts must be {self.s + self.r} integers >= 1, on trees "
                             f"without slots, got {counts.tolist()!r}")
        num = np.repeat(np.arange(self.s), counts[:self.s])
        cat = np.repeat(np.arange(self.r), counts[self.s:])
        trees = ImplicitRandomTrees.__new__(ImplicitRandomTrees)
        trees.__dict__.update(self.__dict__)
        trees._num_cols, trees._lo, trees._hi = self._num_cols[num], self._lo[num], self._hi[num]
        trees._cat_groups = [self._cat_groups[i] for i in cat]
        trees._last = self._last[cat]
        trees.s, trees.r = int(num.size), int(cat.size)
        trees._group_runs = None
        trees._view = np.r_[0, 1 + num, 1 + self.s + cat].astype(np.intp)
        return trees

    def view(self, V: np.ndarray) -> np.ndarray:
        """The routing matrix of these trees from the model's (:meth:`matrix` of trees
        without slots): ``V`` itself, or its columns repeated per slot."""
        cols = getattr(self, "_view", None)
        return V if cols is None else np.ascontiguousarray(V[:, cols])

    def _set_domain(self, lo, hi) -> None:
        lo, hi = (np.array(d, dtype=np.float64).reshape(-1) for d in (lo, hi))
        if lo.shape != (self.s,) or hi.shape != (self.s,) or (hi < lo).any():
            raise ValueError(f"domain must be (lo, hi) with {self.s} numeric bounds each and "
                             f"lo <= hi, got {(lo, hi)!r}")
        self._lo, self._hi = lo, hi

    def kernel_args(self) -> tuple:
        """``(lo, hi, last, draw)``: what the compiled walks of
        :mod:`~dpstream.models.windows.window_kernels` read (public domains and the split salt)."""
        return self._lo, self._hi, self._last, _DRAW

    @property
    def compiled(self) -> bool:
        """Whether the compiled walks apply (numba present, at most 62 categorical
        attributes: the lanes keep the free ones in a bit mask)."""
        return _wk is not None and self.r <= 62

    def matrix(self, X: np.ndarray) -> np.ndarray:
        """Encoded records (:class:`RecordEncoder` layout) -> routing matrix: column 0 the
        constant 0, then the numeric values, then one integer code per categorical attribute."""
        X = np.asarray(X, dtype=np.float64).reshape(-1, np.shape(X)[-1])
        groups = self.group_runs()
        if _wk is not None and groups:
            return _wk.routing_rows(X, self._num_cols, *groups)
        V = np.empty((X.shape[0], 1 + self.s + self.r))
        V[:, 0] = 0.0
        V[:, 1:1 + self.s] = X[:, self._num_cols]
        for j, cols in enumerate(self._cat_groups):
            block = X[:, cols]
            V[:, 1 + self.s + j] = np.where(np.isnan(block[:, 0]), np.nan,
                                            np.argmin(block, axis=1))
        return V

    def group_runs(self) -> tuple:
        """``(first columns, sizes)`` of the categorical groups if each is a contiguous run of
        encoded columns (what the compiled :func:`~.window_kernels.routing_rows` reads), else
        ``()``; computed once."""
        groups = getattr(self, "_group_runs", None)
        if groups is None:
            contiguous = all(g.size and (np.diff(g) == 1).all() for g in self._cat_groups)
            self._group_runs = groups = (
                np.array([g[0] for g in self._cat_groups], dtype=np.intp),
                np.array([g.size for g in self._cat_groups], dtype=np.intp)) \
                if contiguous else ()
        return groups

    def root_keys(self, trees) -> np.ndarray:
        return root_keys(self.secret, trees)

    def leaf_keys(self, V: np.ndarray, trees, *, rows: np.ndarray | None = None,
                  depth: int | None = None, chunk: int = 65_536) -> np.ndarray:
        """The key of the leaf each record reaches in each tree.

        With ``rows=None`` every row of ``V`` goes through every tree in ``trees``: the result
        has shape ``(rows, trees)``. Otherwise ``trees`` and ``rows`` are equal-length arrays of
        (tree, row) pairs and the result is flat. ``depth`` overrides the trees' depth (the
        first ``depth`` levels of the same complete trees).
        """
        trees = np.atleast_1d(np.asarray(trees, dtype=np.int64))
        depth = self.depth if depth is None else int(depth)
        if rows is None:
            shape = (V.shape[0], trees.size)
            rows = np.repeat(np.arange(V.shape[0]), trees.size)
            trees = np.tile(trees, V.shape[0])
        else:
            rows = np.asarray(rows, dtype=np.intp)
            shape = (rows.size,)
        if _wk is not None:   # compiled: one loop over the pairs, NaN read as missing there
            V = np.ascontiguousarray(V, dtype=np.float64)
            return _wk.implicit_keys(V, self.root_keys(trees), rows, depth,
                                     *self.kernel_args()).reshape(shape)
        V = np.where(np.isnan(V), np.inf, V)          # missing: right / last value
        out = np.empty(rows.size, dtype=_U64)
        for s in range(0, rows.size, chunk):
            out[s:s + chunk] = self._walk(V, trees[s:s + chunk], rows[s:s + chunk], depth)
        return out.reshape(shape)

    def _walk(self, V: np.ndarray, trees: np.ndarray, rows: np.ndarray,
              depth: int) -> np.ndarray:
        n, s = rows.size, self.s
        key = self.root_keys(trees)
        lo = np.broadcast_to(self._lo, (n, s)).copy()
        hi = np.broadcast_to(self._hi, (n, s)).copy()
        free = np.ones((n, self.r), dtype=bool)
        nfree = np.full(n, self.r, dtype=np.int64)
        at = np.arange(n)
        width = V.shape[1]
        flat = V.ravel()
        off = rows * width
        for _ in range(depth):
            avail = s + nfree
            active = avail > 0                          # else a leaf: nothing left to split
            # one 64-bit draw per node: the high 32 bits pick the attribute, the low 32 the
            # split point (resolution 2**-32 of the node's interval)
            pick, u = keyed_rank(key, avail)
            num = pick < s
            branch = np.zeros(n, dtype=np.int64)
            if s:
                j = np.where(num, pick, 0)
                lo_j, hi_j = lo[at, j], hi[at, j]
                thr = lo_j + u * (hi_j - lo_j)
                right = flat.take(off + 1 + j) > thr
                go = num & active
                left = go & ~right
                hi[at[left], j[left]] = thr[left]
                rgt = go & right
                lo[at[rgt], j[rgt]] = thr[rgt]
                branch[go] = right[go]
            cat = ~num & active
            if cat.any():
                rank = (pick - s)[cat]
                c = nth_free(free[cat], rank)
                code = np.minimum(flat.take(off[cat] + 1 + s + c), self._last[c])
                branch[cat] = code.astype(np.int64)
                free[at[cat], c] = False
                nfree[cat] -= 1
            key = np.where(active, child_keys(key, branch), key)
        return key


class LeafTable:
    """The released outputs of reached leaves, looked up by leaf key (sorted array + search)."""

    def __init__(self, keys: np.ndarray, values: np.ndarray):
        self.keys = keys
        self.values = values

    @classmethod
    def build(cls, keys: np.ndarray, values: np.ndarray) -> LeafTable:
        order = np.argsort(keys, kind="stable")
        return cls(np.asarray(keys, dtype=_U64)[order], np.asarray(values, float)[order])

    @classmethod
    def concat(cls, tables: list[LeafTable], width: int) -> LeafTable:
        if not tables:
            return cls(np.zeros(0, dtype=_U64), np.zeros((0, width)))
        return cls.build(np.concatenate([t.keys for t in tables]),
                         np.concatenate([t.values for t in tables]))

    def __len__(self) -> int:
        return self.keys.size

    def slots(self) -> np.ndarray:
        """The compiled kernels' hash index over :attr:`keys`
        (:func:`~dpstream.models.windows.window_kernels.hash_slots`), built once."""
        if getattr(self, "_slots", None) is None:
            self._slots = _wk.hash_slots(self.keys)
        return self._slots

    def find(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(index, found)`` of each key (flattened) in the table."""
        flat = np.asarray(keys, dtype=_U64).ravel()
        if not self.keys.size:
            return np.zeros(flat.size, dtype=np.intp), np.zeros(flat.size, dtype=bool)
        idx = np.minimum(np.searchsorted(self.keys, flat), self.keys.size - 1)
        return idx, self.keys[idx] == flat

    def lookup(self, keys: np.ndarray, empty: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """Output row per key: the released one, else ``empty(missing keys)``."""
        flat = np.asarray(keys, dtype=_U64).ravel()
        out = np.empty((flat.size, self.values.shape[1]))
        idx, hit = self.find(flat)
        out[hit] = self.values[idx[hit]]
        miss = ~hit
        if miss.any():
            out[miss] = empty(flat[miss])
        return out.reshape(*np.shape(keys), out.shape[1])


def private_ranges(values: np.ndarray, lo: np.ndarray, hi: np.ndarray, epsilon: float,
                   bins: int, rng: np.random.Generator,
                   public: np.ndarray | None = None,
                   coverage: float = 0.75) -> tuple[np.ndarray, np.ndarray]:
    """An ``epsilon``-DP range ``[lo', hi']`` inside each numeric attribute's public domain
    ``[lo, hi]`` where the private ``values`` (rows: records, columns: attributes) lie.

    The records are dealt at random into one part per attribute (the dealing reads nothing but
    the row order); attribute ``j`` counts its part's values in ``bins`` equal-width bins of its
    public domain and releases the counts with ``Laplace(1 / epsilon)`` noise. A record adds one
    to one count of one attribute, so the whole release is ``epsilon``-DP (parallel
    composition over the parts). The range spans the bins whose noisy count reaches
    ``(ln(bins) + 2) / epsilon`` (an empty bin passes with probability ``1 / (2 e² bins)``)
    if its noisy counts add up to ``coverage`` of the part's records (a public count); else —
    too few records to tell, or bins passed by noise — the attribute keeps its public domain.
    Rows of ``public`` (records that need no privacy, optional) are counted in every
    attribute, without noise. Missing values count nowhere.

    Random decision trees (Fan et al. 2003; Fletcher & Islam 2017, Alg. 2, line 6) draw a numeric
    split point uniformly within the attribute's *current domain*. The papers' code takes that
    domain from the data (its min and max): a private quantity, released by the trees' thresholds
    without any noise. Drawn instead over the schema's public domain, the split points miss the data
    wherever that domain is much wider than the data — Fletcher & Islam's SynthF (domain ±11.5,
    99% of the values within ±3.8) leaves most records in one leaf of most trees, and accuracy flat
    in epsilon. :func:`private_ranges` is the sound middle: a share of a window's budget buys an
    epsilon-DP range per numeric attribute, and the window's trees
    (:class:`~dpstream.models.windows.random_trees.ImplicitRandomTrees` with ``domain=``) draw their
    numeric split points inside it. The random decision forest and RDT use it
    (:mod:`~dpstream.models.windows.random_forest`, :mod:`~dpstream.models.windows.rdt`).

    Parameters
    ----------
    values
        The private records' numeric values, one column per attribute.
    lo, hi
        Each attribute's public domain.
    epsilon
        The release's budget per record (each record is counted in one attribute only).
    bins
        Equal-width bins of each public domain; the range is a span of whole bins.
    rng
        The private random source (dealing and noise).
    public
        Records that need no privacy (same columns), counted in every attribute.
    coverage
        Share of the part's records the span's noisy counts must add up to.

    Returns
    -------
    tuple of numpy.ndarray
        ``(lo', hi')``, each inside ``[lo, hi]``.

    Examples
    --------
    >>> rng = np.random.default_rng(0)
    >>> vals = rng.normal(0.0, 1.0, size=(4000, 2))
    >>> a, b = private_ranges(vals, np.array([-20.0, -20.0]), np.array([20.0, 20.0]), 1.0, 20,
    ...                       rng)
    >>> a.tolist(), b.tolist()
    ([-4.0, -4.0], [4.0, 4.0])
    >>> private_ranges(vals[:20], np.array([-20.0, -20.0]), np.array([20.0, 20.0]), 0.1, 20,
    ...                rng)[0].tolist()        # too few records to tell: the public domain
    [-20.0, -20.0]

    """
    lo, hi = np.asarray(lo, dtype=np.float64), np.asarray(hi, dtype=np.float64)
    s = lo.size
    new_lo, new_hi = lo.copy(), hi.copy()
    if s == 0:
        return new_lo, new_hi
    values = np.asarray(values, dtype=np.float64).reshape(-1, s)
    part = noise.permutation(rng, values.shape[0]) % s
    mech = LaplaceMechanism(epsilon=epsilon, sensitivity=1.0, rng=rng, integers=True)
    tau = (math.log(bins) + 2.0) / epsilon
    for j in range(s):
        if not hi[j] > lo[j]:
            continue
        edges = np.linspace(lo[j], hi[j], bins + 1)
        v = values[part == j, j]
        counts = np.histogram(np.clip(v[~np.isnan(v)], lo[j], hi[j]), edges)[0]
        counts = mech.release(counts.astype(np.float64))
        if public is not None and public.size:
            p = np.asarray(public, dtype=np.float64)[:, j]
            counts += np.histogram(np.clip(p[~np.isnan(p)], lo[j], hi[j]), edges)[0]
        keep = np.flatnonzero(counts >= tau)
        # the span must hold most of the part (its size is public): else the bins that passed
        # are noise, or too few records to say where they lie
        total = (part == j).sum() + (0 if public is None else np.asarray(public).shape[0])
        if keep.size and counts[keep[0]:keep[-1] + 1].sum() >= coverage * total:
            new_lo[j], new_hi[j] = edges[keep[0]], edges[keep[-1] + 1]
    return new_lo, new_hi
