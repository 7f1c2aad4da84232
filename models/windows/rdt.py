"""Jagannathan et al.'s DP random decision trees (RDT) and the semi-supervised RDT# (2013).

:class:`RDTClassifier`: random trees drawn before any data is seen, of a public height
(:func:`rdt_height`, :func:`signal_height`), whose leaves release Laplace-noised class counts
(:func:`release_counts`) through public buckets; with records sent as ``public=True``, RDT#
routes private records to centers drawn among the public ones (:class:`CenterTable`,
:func:`pick_centers`) and adds a secondary, pseudo-labeled ensemble. Windows come from
:mod:`~dpstream.models.windows.window_forest`; numeric split points fall inside a DP range of
each attribute (:func:`split_epsilon` charges it with the trees).

The mechanisms, why they are DP, the departures from the papers and their measurements:
docs/rdt.md#the-trees-in-detail.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from ...accounting import LaplaceMechanism, noise
from ..param_table import Param, documented, own_args
from ..schema import river_check_schema
from . import random_trees
from .buckets import BucketTable, bucket_count, bucket_counts, bucket_keys
from .random_trees import (
    ImplicitRandomTrees,
    KeyedTree,
    LeafTable,
    kernel_salts,
    laplace_of,
    private_ranges,
    root_keys,
)
from .relevance import slot_counts
from .window_forest import UNLABELED, WindowForestBase, leaf_proba, window_params

__all__ = ["RDTClassifier", "CenterTable", "pick_centers", "release_counts", "rdt_height",
           "private_ranges", "signal_height", "split_epsilon"]

COMBINE = ("average", "sum")
HEIGHT_RULES = ("signal", "paper")
_NTH = random_trees._wk.nth_table() if random_trees._wk is not None else None


# ------------------------------------------------------------ stateless parts: heights, budget,
# the leaves' release and RDT#'s table of leaf centers
def rdt_height(k: int, b: float, n: int) -> int:
    """``min(floor(k / 2), floor(log_b n) + 1)`` (Jagannathan et al. 2013, Section V, after [13]),
    at least 1.

    >>> rdt_height(14, 8.1, 20_000), rdt_height(14, 8.1, 5_000), rdt_height(4, 2.0, 10**6)
    (5, 5, 2)
    >>> rdt_height(14, 8.0, 2000)
    4
    """
    if k < 1 or n < 1 or b <= 1:
        raise ValueError(f"need k >= 1 attributes, n >= 1 records and b > 1, got {k}, {n}, {b}")
    m = 0
    while b ** (m + 1) <= n * (1 + 1e-12):   # floor(log_b n) without log rounding
        m += 1
    return max(1, min(k // 2, m + 1))


def signal_height(b: float, n: int, epsilon: float, signal: float = 4.0) -> int:
    """The largest height ``h`` whose ``b ** h`` leaves hold, on average, ``signal`` times the
    Laplace noise scale ``1 / epsilon`` of a count: ``floor(log_b(n * epsilon / signal))``,
    at least 1 (a function of public counts and budgets only).

    >>> signal_height(2.0, 20_000, 0.171), signal_height(2.0, 1_000, 0.0855)
    (9, 4)
    """
    if n < 1 or b <= 1 or epsilon <= 0 or signal <= 0:
        raise ValueError(f"need n >= 1, b > 1, epsilon > 0 and signal > 0, got {n}, {b}, "
                         f"{epsilon}, {signal}")
    target, m = n * epsilon / signal, 0
    while b ** (m + 1) <= target * (1 + 1e-12):
        m += 1
    return max(1, m)


def split_epsilon(epsilon: float, share: float) -> tuple[float, float]:
    """``(rest, part)`` with ``part`` about ``share * epsilon`` and ``rest + part <= epsilon``
    exactly in the decimals a :class:`~dpstream.accounting.BudgetLedger` adds.

    >>> split_epsilon(2.0, 0.1), split_epsilon(1.0, 0.0)
    ((1.8, 0.2), (1.0, 0.0))
    """
    total = Fraction(repr(float(epsilon)))
    part = float(total * Fraction(repr(float(share))))
    rest = float(total - Fraction(repr(part)))
    while Fraction(repr(rest)) + Fraction(repr(part)) > total:
        rest = math.nextafter(rest, 0.0)
    return rest, part


def release_counts(counts: np.ndarray, epsilon: float, rng: np.random.Generator) -> np.ndarray:
    """Class counts of disjoint cells plus ``Laplace(1 / epsilon)`` noise each: ``epsilon``-DP
    (one record changes one count by one; Jagannathan et al. (2013) Theorem 3).

    >>> release_counts(np.zeros((2, 3)), 1.0, np.random.default_rng(0)).shape
    (2, 3)
    """
    if counts.size == 0:
        return counts.astype(np.float64)
    return LaplaceMechanism(epsilon=epsilon, sensitivity=1.0, rng=rng,
                            integers=True).release(counts)


class CenterTable:
    """Region centers of leaves, sorted by leaf key: each center is a row of ``points`` (its
    record's routing-matrix row) and holds a row of class counts."""

    def __init__(self, keys: np.ndarray, point: np.ndarray, values: np.ndarray,
                 points: np.ndarray):
        self.keys = keys          # (m,) uint64 leaf key of each center, sorted
        self.point = point        # (m,) index of its record in ``points``
        self.values = values      # (m, classes) counts
        self.points = points      # (unique center records, columns)

    @classmethod
    def empty(cls, width: int, n_classes: int) -> CenterTable:
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.intp), np.zeros((0, n_classes)),
                   np.zeros((0, width)))

    @classmethod
    def concat(cls, tables: list[CenterTable], width: int, n_classes: int) -> CenterTable:
        tables = [t for t in tables if len(t)]
        if not tables:
            return cls.empty(width, n_classes)
        offsets = np.cumsum([0] + [t.points.shape[0] for t in tables[:-1]])
        keys = np.concatenate([t.keys for t in tables])
        order = np.argsort(keys, kind="stable")
        point = np.concatenate([t.point + o for t, o in zip(tables, offsets, strict=True)])
        return cls(keys[order], point[order],
                   np.concatenate([t.values for t in tables])[order],
                   np.concatenate([t.points for t in tables]))

    def __len__(self) -> int:
        return self.keys.size

    def nearest(self, keys: np.ndarray, Q: np.ndarray, rows: np.ndarray, scale: np.ndarray,
                n_numeric: int, chunk: int = 131_072) -> np.ndarray:
        """Index of the center nearest to each query row ``Q[rows[i]]`` among the centers of
        leaf ``keys[i]`` (``-1`` where the leaf has none). Distance: squared numeric differences
        times ``scale`` (1 / public range²), plus 1 per differing categorical code; a missing
        value counts as the largest difference (1)."""
        out = np.full(keys.size, -1, dtype=np.intp)
        if not len(self):
            return out
        for s in range(0, keys.size, chunk):
            k, q = keys[s:s + chunk], Q[rows[s:s + chunk]]
            start = np.searchsorted(self.keys, k, side="left")
            count = np.searchsorted(self.keys, k, side="right") - start
            best, best_d = out[s:s + chunk], np.full(k.size, np.inf)
            for j in range(int(count.max(initial=0))):
                sel = np.flatnonzero(count > j)
                idx = start[sel] + j
                p = self.points[self.point[idx]]
                diff = q[sel, :n_numeric] - p[:, :n_numeric]
                d = np.where(np.isnan(diff), 1.0, diff * diff * scale).sum(axis=1)
                d += (q[sel, n_numeric:] != p[:, n_numeric:]).sum(axis=1)
                better = d < best_d[sel]
                best[sel[better]] = idx[better]
                best_d[sel[better]] = d[better]
        return out


def pick_centers(P: np.ndarray, ids: np.ndarray, depth: int, router, n_cells: int,
                 n_classes: int, rng: np.random.Generator) -> tuple:
    """RDT#'s centers of trees ``ids`` (routed by ``router``, an
    :class:`~dpstream.models.windows.random_trees.ImplicitRandomTrees`) from the public routing rows
    ``P``: ``ceil(n_cells |D| / N)`` per leaf, drawn at random among its public records.
    Returns the table (counts zero) and the leaf key and row of every (public row, tree) pair,
    tree-major."""
    N = P.shape[0]
    keys = router.leaf_keys(router.view(P), ids, depth=depth).T.ravel()   # tree-major
    rows = np.tile(np.arange(N), ids.size)
    order = np.lexsort((noise.uniforms(rng, keys.size), keys))      # by leaf, random within
    sk = keys[order]
    first = np.r_[True, sk[1:] != sk[:-1]]
    group = np.cumsum(first) - 1
    starts = np.flatnonzero(first)
    size = np.diff(np.r_[starts, sk.size])
    need = np.ceil(n_cells * size / N).astype(np.int64)
    rank = np.arange(sk.size) - starts[group]
    chosen = order[rank < need[group]]                           # still sorted by leaf
    uniq, point = np.unique(rows[chosen], return_inverse=True)
    table = CenterTable(keys[chosen], point.astype(np.intp), np.zeros((chosen.size, n_classes)),
                        P[uniq, 1:])
    return table, keys, rows


def _proba_one(counts: np.ndarray) -> np.ndarray:
    """:func:`leaf_proba` of one row of counts (shape ``(1, k)``), the same values bit for
    bit with less overhead."""
    c = np.maximum(counts, 0.0)
    total = np.add.reduce(c, axis=1, keepdims=True)   # what c.sum(axis=1, ...) runs
    return c / total if total[0, 0] > 0 else np.zeros_like(c)


@dataclass
class RDTTree(KeyedTree):
    """A tree of a window (its height is ``depth``): a primary one (private counts, Laplace
    ``scale``) or a secondary one (pseudo-label counts)."""

    primary: bool
    scale: float
    #: the random trees of its window (their numeric split domain); ``None``: the model's
    #: trees over the public domain (windows trained before private ranges existed)
    router: Any = None
    #: buckets its leaves release through (:func:`~.buckets.bucket_keys`; 0: none)
    buckets: int = 0


#: RDT's parameters, in its signature's order
_PARAMS = window_params(
    "epsilon n_trees window_size max_windows disjoint secondary_trees n_cells combine max_depth "
    "range_share range_bins height_rule leaf_signal window_seconds warmup drift drift_share "
    "drift_window attributes relevance_share relevance_floor leaf_buckets seed "
    "on_out_of_domain on_unknown window_decay grid_share",
    Param("epsilon", 1.0, "Budget of every window (windows are disjoint: the stream's "
          "epsilon).", "real", lo=0, lo_open=True),
    Param("n_trees", 5, "Primary trees ``p`` per window (the paper uses 5); each sees every "
          "labeled record with ``epsilon / n_trees`` unless ``disjoint``.", "integer", lo=1),
    Param("disjoint", False, "Deal the labeled records into ``n_trees`` disjoint parts, full "
          "``epsilon`` per tree, instead.", "bool"),
    Param("secondary_trees", 200, "RDT#'s secondary ensemble ``t`` (used only in windows with "
          "public records).", "integer", lo=0),
    Param("n_cells", 10, "RDT#'s ``N_CELLS``: centers over all leaves of a tree, at least one "
          "per leaf with public data.", "integer", lo=1),
    Param("combine", "average", "How an ensemble's trees are combined: ``'average'`` of each "
          "tree's class distribution in the record's cell, or ``'sum'`` of the raw counts (the "
          "paper's Figure 4); both post-processing.", "choice", options=COMBINE),
    Param("max_depth", None, "Overrides the height ``min(floor(k/2), floor(log_b n) + 1)``.",
          "integer", lo=1, none_ok=True),
    Param("height_rule", "signal", "``'paper'``: the paper's height; ``'signal'``: the paper's "
          "or, if larger, :func:`signal_height` (a function of public counts).", "choice",
          options=HEIGHT_RULES),
    Param("leaf_signal", 2.0, "With ``height_rule='signal'``: how many Laplace noise scales of "
          "a count a leaf holds on average.", "real", lo=0, lo_open=True),
    Param("leaf_buckets", 4, "Public buckets per leaf that may hold records, whose counts are "
          "all released, so that no release shows which leaves hold records.", "integer",
          lo=1),
    window_size=20_000, max_windows=2, relevance_share=0.35, grid_share=0.2)


@documented
class RDTClassifier(WindowForestBase):
    """DP random decision trees (RDT, [13]) and, with public records, RDT# (Jagannathan et al.,
    2013).

    {parameters}

    Examples
    --------
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> rdt = RDTClassifier(schema=schema, epsilon=1.0, window_size=10_000, seed=0)
    >>> rdt.learn_many(X[:10_000], y[:10_000])
    >>> report = rdt.privacy_report()
    >>> report["epsilon"], report["trees"], report["windows"][0]["height"]
    (1.0, 5, 5)

    RDT#: records sent with ``public=True`` lend their features to the trees' centers.

    >>> sharp = RDTClassifier(schema=schema, epsilon=1.0, secondary_trees=20, seed=0)
    >>> labels = [yi if i % 5 == 0 else None for i, yi in enumerate(y[:10_000])]
    >>> sharp.learn_many(X[:10_000], labels, public=[v is None for v in labels])
    >>> w = sharp.privacy_report()["windows"][0]
    >>> w["algorithm"], w["labeled"], w["public"], w["primary_trees"], w["secondary_trees"]
    ('RDT#', 10000, 8000, 5, 20)
    """

    PARAMETERS = _PARAMS

    #: windows stay whole in a multi-process ensemble: every window fills the same fixed trees
    share_scales = False
    grid_raw_trees = False   # implicit trees: rows are scored through the grid

    def __init__(self, schema: Any = None, epsilon: float = 1.0, n_trees: int = 5,
                 window_size: int | None = 20_000, max_windows: int | None = 2,
                 disjoint: bool = False, secondary_trees: int = 200, n_cells: int = 10,
                 combine: str = "average", max_depth: int | None = None,
                 range_share: float = 0.1, range_bins: int = 16,
                 height_rule: str = "signal", leaf_signal: float = 2.0,
                 window_seconds: float | None = None, warmup: int | None = 250,
                 drift: bool = True, drift_share: float = 0.05,
                 drift_window: int | None = None, attributes: str = "relevance",
                 relevance_share: float = 0.35, relevance_floor: float = 0.3,
                 leaf_buckets: int = 4, seed: int | None = None,
                 on_out_of_domain: str = "clip", on_unknown: str = "ignore",
                 window_decay: float = 1.0, grid_share: float = 0.2):
        super().__init__(**own_args(locals()))
        enc = self._encoder
        self._trees = ImplicitRandomTrees(enc, depth=1, secret=int(noise.choose(self._rng, 2**63)))
        s, r = self._trees.s, self._trees.r
        # routing-matrix columns 1.. : numeric values, then categorical codes
        width = np.array([hi - lo for _, lo, hi in enc.numeric_columns()], dtype=np.float64)
        self._scale = 1.0 / np.where(width > 0, width, 1.0) ** 2
        self._k_attributes = s + r
        self._b = (2 * s + sum(len(g) for g in enc.categorical_columns())) / max(1, s + r)
        self._next_tree = 0
        self._setup_relevance()

    def height(self, n: int, epsilon: float | None = None) -> int:
        """The trees' height for ``n`` labeled records per tree (public) whose counts get
        ``epsilon`` each (``height_rule="signal"`` only)."""
        if self.max_depth is not None:
            return int(self.max_depth)
        paper = rdt_height(self._k_attributes, self._b, max(1, n))
        if self.height_rule == "signal" and epsilon is not None:
            return max(paper, signal_height(self._b, max(1, n), epsilon, self.leaf_signal))
        return paper

    # ------------------------------------------------------------- accounting
    def _ranged(self) -> bool:
        """Whether windows spend ``range_share`` on a private numeric range."""
        return self.range_share > 0 and self._trees.s > 0

    def _leaf_and_range_epsilon(self) -> tuple[float, float]:
        """What a window's ``epsilon_trees`` leaves after the relevance release, split
        exactly into the leaves' and the range's parts."""
        return split_epsilon(self._relevance_split()[0],
                             self.range_share if self._ranged() else 0.0)

    def _window_charges(self) -> list[tuple[str, float, str]]:
        eps_leaf, eps_range = self._leaf_and_range_epsilon()
        eps_rel = self._relevance_split()[1]
        ranged = (f"; every record first in one attribute's histogram of the relevance release "
                  f"(epsilon {eps_rel!r}), in one attribute's part of the private numeric range "
                  f"(epsilon {eps_range!r}, parallel), then in the leaves (epsilon "
                  f"{eps_leaf!r}): sequential, one charge" if eps_range or eps_rel else "")
        if self.disjoint:
            return [(f"tree-{t}", self.epsilon_trees, f"RDTClassifier{ranged}")
                    for t in range(self.n_trees)]
        return [("trees", self.epsilon_trees,
                 f"RDT: {self.n_trees} trees on every labeled record, epsilon/{self.n_trees} "
                 f"each (sequential){ranged}")]

    # ------------------------------------------------------------- training
    def _ids(self, n: int) -> np.ndarray:
        ids = np.arange(self._next_tree, self._next_tree + n, dtype=np.int64)
        self._next_tree += n
        return ids

    def _window_router(self, V: np.ndarray, public: np.ndarray,
                       epsilon: float) -> ImplicitRandomTrees:
        """The window's random trees: the model's (same secret, so the same attributes and
        uniform draws), their numeric split points drawn inside the private range of the
        window's records (:func:`private_ranges`) instead of the whole public domain."""
        trees = self._trees
        if epsilon <= 0:
            return trees
        cols = slice(1, 1 + trees.s)
        return trees.with_domain(*private_ranges(V[~public, cols], *trees.domain, epsilon,
                                                 self.range_bins, self._rng,
                                                 public=V[public, cols]))

    def _nearest(self, table: CenterTable, keys: np.ndarray, V: np.ndarray,
                 rows: np.ndarray) -> np.ndarray:
        return table.nearest(keys, V[:, 1:], rows, self._scale, self._trees.s)

    def _train_window(self, X: np.ndarray, y: np.ndarray,
                      public: np.ndarray) -> tuple[list, str, dict]:
        V = self._trees.matrix(X)
        lab = y != UNLABELED
        Vl, yl = V[lab], y[lab]
        P = V[public]
        p, k = self.n_trees, len(self._encoder.classes)
        ids = self._ids(p)
        eps_leaf, eps_range = self._leaf_and_range_epsilon()
        router = self._window_router(V, public, eps_range)
        domain = router.kernel_args()[:2]
        if self._relevance is not None:   # released first: this window's trees use it too
            self._release_relevance(X[lab], yl, self._relevance_split()[1])
            if not P.shape[0]:   # RDT# windows keep the model's attributes (centers, below)
                router = router.with_slots(slot_counts(self._relevance.weights(),
                                                       n_numeric=self._trees.s))
        if self.disjoint:
            tree_of = np.empty(yl.size, dtype=np.int64)
            for t, part in zip(ids, self.deal(yl.size), strict=True):
                tree_of[part] = t
            row_of = np.arange(yl.size)
            eps_tree, n = eps_leaf, yl.size // p
        else:
            tree_of = np.tile(ids, yl.size)
            row_of = np.repeat(np.arange(yl.size), p)
            eps_tree, n = eps_leaf / p, yl.size
        h = self.height(n, eps_tree)
        scale = 1.0 / eps_tree
        # primary trees: private labels into the nearest center (or the leaf), Laplace noise
        if P.shape[0]:
            centers, _, _ = pick_centers(P, ids, h, router, self.n_cells, k, self._rng)
        else:
            centers = CenterTable.empty(V.shape[1] - 1, k)
        keys = router.leaf_keys(router.view(Vl), tree_of, rows=row_of, depth=h)
        near = self._nearest(centers, keys, Vl, row_of)
        at = near >= 0
        np.add.at(centers.values, (near[at], yl[row_of[at]]), 1.0)
        centers.values = release_counts(centers.values, eps_tree, self._rng)
        # every leaf releases its counts through its bucket, and every bucket of every tree
        # is released with fresh Laplace noise: the published table never tells which leaves
        # hold records, and no noise is a function of anything published
        buckets = bucket_count(min(n, 4 * int(math.ceil(self._b ** h))), self.leaf_buckets)
        counts = bucket_counts(keys[~at], tree_of[~at] - ids[0], yl[row_of[~at]], p, buckets, k)
        released = release_counts(counts, eps_tree, self._rng)
        cells = BucketTable(root_keys(self._trees.secret, ids), [(buckets, 0)],
                            released.astype(np.float32))   # rounded: half the stored size
        trees = [RDTTree(int(t), h, True, scale, router, buckets) for t in ids]
        extra = {"height": h, "buckets": buckets, "epsilon_per_tree": eps_tree,
                 "epsilon_range": eps_range, "epsilon_relevance": self._relevance_split()[1],
                 "public": int(P.shape[0]), "primary_trees": p, "secondary_trees": 0}
        if eps_range:
            lo, hi = domain
            extra["numeric_range"] = [[float(a), float(b)] for a, b in zip(lo, hi, strict=True)]
        tables = [centers]
        if P.shape[0] and self.secondary_trees:
            # RDT# post-processing: pseudo-label the public pool with the primary trees, fill
            # a secondary ensemble with those labels (no private record is read again)
            pseudo = np.argmax(self._ensemble_proba(P, trees, centers, cells), axis=1)
            ids2 = self._ids(self.secondary_trees)
            second, keys2, rows2 = pick_centers(P, ids2, h, router, self.n_cells, k, self._rng)
            near2 = self._nearest(second, keys2, P, rows2)
            np.add.at(second.values, (near2, pseudo[rows2]), 1.0)
            tables.append(second)
            trees += [RDTTree(int(t), h, False, 0.0, router) for t in ids2]
            extra["secondary_trees"] = int(ids2.size)
        extra["centers"] = CenterTable.concat(tables, V.shape[1] - 1, k)
        extra["cells"] = cells
        kind = "RDT#" if P.shape[0] else "RDT"
        return trees, kind, extra

    # ------------------------------------------------------------- predicting
    def _cell_values(self, V: np.ndarray, trees: list[RDTTree], centers: CenterTable,
                     cells: LeafTable) -> np.ndarray:
        """Per row, the sum over ``trees`` of the counts (``combine="sum"``: Figure 4's
        numerator) or class distributions (``"average"``) of the cell the row reaches: the
        nearest center of its leaf; else the leaf's released or key-derived counts for a primary
        tree, nothing for a secondary one."""
        k = len(self._encoder.classes)
        out = np.zeros((V.shape[0], k))
        weight = self._tree_weights()
        for router, depth, group in self._groups(trees):
            ids = np.array([tr.id for tr in group], dtype=np.int64)
            primary = np.array([tr.primary for tr in group])
            scale = np.array([tr.scale for tr in group])
            weights = np.array([weight.get(tr.id, 1.0) for tr in group])
            buckets = np.array([tr.buckets for tr in group], dtype=np.uint64)
            step = max(1, 131_072 // ids.size)
            for s in range(0, V.shape[0], step):
                out[s:s + step] += self._group_values(V[s:s + step], ids, depth, primary,
                                                      scale, centers, cells, router, weights,
                                                      buckets)
        return out

    def _tree_weights(self) -> dict[int, float]:
        """Tree id -> its window's vote weight (:meth:`window_weights`)."""
        return {tr.id: wt
                for w, wt in zip(self._windows, self.window_weights(), strict=True)
                for tr in w.trees}

    def _groups(self, trees: list[RDTTree]) -> list[tuple]:
        """``(router, height, trees)``: the trees that walk alike (one window's trees share
        their router, so its numeric domain)."""
        groups: dict[tuple, tuple] = {}
        for tr in trees:
            router = self._trees if tr.router is None else tr.router
            groups.setdefault((id(router), tr.depth), (router, tr.depth, []))[2].append(tr)
        return list(groups.values())

    def _group_values(self, V, ids, depth, primary, scale, centers, cells,
                      router=None, weights=None, buckets=None) -> np.ndarray:
        """:meth:`_cell_values` of trees of one router and height (a block of rows), each
        tree's cells times its ``weights`` entry (default 1)."""
        k = len(self._encoder.classes)
        router = self._trees if router is None else router
        keys = router.leaf_keys(router.view(V), ids, depth=depth).ravel()   # row-major pairs
        rows = np.repeat(np.arange(V.shape[0]), ids.size)
        col = np.tile(np.arange(ids.size), V.shape[0])
        vals = np.zeros((keys.size, k))
        near = self._nearest(centers, keys, V, rows)
        at = near >= 0
        vals[at] = centers.values[near[at]]
        leaf = ~at & primary[col]
        if leaf.any():
            nb = np.zeros(ids.size, np.uint64) if buckets is None else buckets
            idx, hit = cells.find(bucket_keys(router.root_keys(ids)[col[leaf]], keys[leaf],
                                              nb[col[leaf]]))
            sub = laplace_of(keys[leaf], k, scale[col[leaf]])   # trees from before buckets
            sub[hit] = cells.values[idx[hit]]
            vals[leaf] = sub
        if self.combine == "average":
            vals = leaf_proba(vals)
        if weights is not None:
            vals = vals * weights[col][:, None]
        return vals.reshape(V.shape[0], ids.size, k).sum(axis=1)

    def _ensemble_proba(self, V: np.ndarray, trees: list[RDTTree], centers: CenterTable,
                        cells: LeafTable) -> np.ndarray:
        """One ensemble's class distribution per row (Figure 4, or the average of its trees'
        distributions), clipped at 0 and normalised; zero rows where it has no evidence."""
        return leaf_proba(self._cell_values(V, trees, centers, cells))

    def _kept(self) -> tuple[list[RDTTree], CenterTable, LeafTable]:
        return self._serve_rdt()[:3]

    def _serve_rdt(self) -> tuple:
        """``(trees, centers, cells, plan)`` of the kept windows, cached in ``_serving`` until a
        window closes or retires; ``plan`` lists per ensemble (primary, then secondary) its
        trees of each router and height as ``(height, root keys, primary flags, Laplace
        scales, router, vote weights, buckets)``."""
        if self._serving is None:
            k, width = len(self._encoder.classes), 1 + self._trees.s + self._trees.r
            wins = [w for w in self._windows if "cells" in w.extra]
            trees = [tr for w in self._windows for tr in w.trees]
            weight = self._tree_weights()
            plan = []
            for group in ([t for t in trees if t.primary], [t for t in trees if not t.primary]):
                if group:
                    plan.append([(depth, self._trees.root_keys([tr.id for tr in g]),
                                  np.array([tr.primary for tr in g]),
                                  np.array([tr.scale for tr in g], dtype=np.float64), router,
                                  np.array([weight[tr.id] for tr in g], dtype=np.float64),
                                  np.array([tr.buckets for tr in g], dtype=np.uint64))
                                 for router, depth, g in self._groups(group)])
            self._serving = (
                trees,
                CenterTable.concat([w.extra["centers"] for w in wins], width - 1, k),
                LeafTable.concat([w.extra["cells"] for w in wins], k), plan)
        return self._serving[:4]

    def _scores(self, X: np.ndarray) -> np.ndarray:
        """The mean of the primary ensemble's and (RDT#) the secondary ensemble's class
        distributions."""
        trees, centers, cells, plan = self._serve_rdt()
        V = self._trees.matrix(self._grid_rows(X))
        if not plan:
            return np.zeros((V.shape[0], len(self._encoder.classes)))
        if self._trees.compiled:   # compiled: walk, find the cell and sum in one loop
            return sum(leaf_proba(self._compiled_cells(V, group, centers, cells))
                       for group in plan) / len(plan)
        groups = [g for g in ([t for t in trees if t.primary],
                              [t for t in trees if not t.primary]) if g]
        return sum(self._ensemble_proba(V, g, centers, cells) for g in groups) / len(groups)

    def _compiled_cells(self, V: np.ndarray, group: list, centers: CenterTable,
                        cells: LeafTable) -> np.ndarray:
        """:meth:`_cell_values` of one ensemble by :func:`~.window_kernels.implicit_cells`."""
        k = len(self._encoder.classes)
        V = np.ascontiguousarray(V, dtype=np.float64)
        out = np.zeros((V.shape[0], k))
        for depth, roots, primary, scale, router, weights, buckets in group:
            # a slot router's trees have no centers: the kernel reads its view for routing
            # only (a center's distance reads the row only when the leaf has centers)
            out += random_trees._tk.rows_in_threads(   # large batches: rows split in threads
                random_trees._wk.implicit_cells, router.view(V), roots, depth,
                *router.kernel_args(), _NTH, primary, scale, self.combine == "average",
                centers.keys, centers.point, centers.values, centers.points, self._scale,
                self._trees.s, cells.keys, cells.slots(), cells.values, kernel_salts(k)[2],
                buckets, weights)
        return out

    def _score_row(self, row: np.ndarray) -> np.ndarray:
        """:meth:`_scores` of one encoded row, the same values bit for bit: one compiled call
        per group of :meth:`_row_plan`, its arguments prepared once per serving."""
        plan = self._row_plan()
        if plan is None:
            return self._scores(row[None, :])[0]
        if not plan:
            return np.zeros(len(self._encoder.classes))
        V = self._trees.matrix(self._grid_rows(row[None, :]))
        cells, total = random_trees._wk.implicit_cells, 0
        for ensemble in plan:   # the steps of _scores and _compiled_cells, in the same order
            out = np.zeros((1, len(self._encoder.classes)))
            for cols, args in ensemble:
                out += cells(V if cols is None else V.take(cols, axis=1), *args)
            total = total + _proba_one(out)
        return (total / len(plan))[0]

    def _row_plan(self) -> list[list[tuple]] | None:
        """Per ensemble of :meth:`_serve_rdt`'s plan, per group ``(routing columns, the
        other arguments of :func:`~.window_kernels.implicit_cells`)``, cached with
        ``_serving``; ``None`` where the compiled walk does not apply."""
        _, centers, cells, plan = self._serve_rdt()
        if not self._trees.compiled:
            return None
        if len(self._serving) == 4:
            common = (centers.keys, centers.point, centers.values, centers.points, self._scale,
                      self._trees.s, cells.keys, cells.slots(), cells.values,
                      kernel_salts(len(self._encoder.classes))[2])
            rows = [[(getattr(router, "_view", None),
                      (roots, depth, *router.kernel_args(), _NTH, primary, scale,
                       self.combine == "average", *common, buckets, weights))
                     for depth, roots, primary, scale, router, weights, buckets in group]
                    for group in plan]
            self._serving = (*self._serving, rows)
        return self._serving[4]

    # ------------------------------------------------------------- report
    def privacy_report(self) -> dict:
        """Pure epsilon-DP: what was spent where, and why."""
        mode = ("disjoint parts, epsilon per tree (parallel)" if self.disjoint else
                f"every tree sees every labeled record, epsilon/{self.n_trees} per tree "
                f"(sequential)")
        return {
            "mechanism": "random decision trees (Jagannathan et al. 2013 and its ref. [13]): "
                         "data-independent trees, "
                         "Laplace noise on every leaf's (or center's) class counts; RDT# with "
                         f"public records; {mode}",
            **self._report_base(),
            "guarantee": (
                "pure epsilon-DP per private record for the whole stream: tree structure reads "
                "no data; centers are public records; each private record changes one count by "
                "one per tree it feeds, released with Laplace(1/epsilon_per_tree); windows are "
                "disjoint; pseudo-labels and the secondary trees post-process the release and "
                "public records; retired trees are post-processing"),
            "protects": "features and labels of private records (public=True records are not "
                        "protected: the caller declared them non-private)",
            "windows": [{"algorithm": w.kind, "records": w.records, "labeled": w.labeled,
                         **{key: v for key, v in w.extra.items()
                            if key not in ("centers", "cells")}}
                        for w in self._windows],
        }

    @classmethod
    def _unit_test_params(cls):
        yield {"schema": river_check_schema("binary"), "window_size": 100, "n_trees": 5,
               "secondary_trees": 10, "seed": 1}

