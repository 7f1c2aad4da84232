"""Fletcher and Islam's differentially private random decision forest (2017) on windows.

:class:`RandomDecisionForestClassifier`: random trees drawn without data, of the paper's
Theorem-2 depth (:func:`theorem2_depth`), whose leaves release their majority label by
report-one-sided-noisy-argmax (:func:`release_leaf_labels`, the paper's addendum) through
public buckets, on the window framework of :mod:`~dpstream.models.windows.window_forest`;
numeric split points fall inside a DP range of each attribute.

The mechanism, why it is DP, the private range and the measurements behind it:
docs/random_forest.md#the-forest-in-detail.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...accounting import ReportNoisyMax, noise
from ..param_table import Param, documented, own_args
from ..schema import river_check_schema
from . import random_trees
from .buckets import BucketTable, bucket_count, bucket_counts, bucket_keys
from .random_trees import (
    ImplicitRandomTrees,
    KeyedTree,
    LeafTable,
    kernel_salts,
    private_ranges,
    root_keys,
    uniform_label,
)
from .relevance import slot_counts
from .window_forest import UNLABELED, WindowForestBase, split_exact, window_params

__all__ = ["RandomDecisionForestClassifier", "release_leaf_labels", "theorem2_depth"]

_NTH = random_trees._wk.nth_table() if random_trees._wk is not None else None
#: rows from which a batch is scored tree by tree through a trie of the nodes it reaches
#: (:func:`~dpstream.models.windows._trie_kernels.trie_scores`); fewer walk each row alone
_BATCH = 256

#: the name checkpoints written before trees were shared with the other keyed forests use
RandomTree = KeyedTree


def release_leaf_labels(counts: np.ndarray, epsilon: float,
                        rng: np.random.Generator) -> np.ndarray:
    """The label each leaf releases: report-one-sided-noisy-argmax of its class counts.

    One row of ``counts`` per leaf; leaves hold disjoint records, so every row may spend the
    full ``epsilon``. Utility = class count, sensitivity 1, monotonic (adding a record only
    raises a count): exponential noise of scale ``1/epsilon``, argmax (Fletcher & Islam 2017,
    addendum).

    >>> release_leaf_labels(np.array([[0.0, 40.0], [30.0, 1.0]]), 1.0,
    ...                     np.random.default_rng(0)).tolist()
    [1, 0]
    """
    return ReportNoisyMax(epsilon=epsilon, sensitivity=1.0, monotonic=True,
                          rng=rng).select_rows(counts)


def theorem2_depth(s: int, r: int) -> int:
    """Tree depth for ``s`` numeric and ``r`` categorical attributes (Fletcher & Islam, 2017,
    Theorem 2 as tabulated in its Table 4, plus ``r // 2`` for the categorical ones).

    >>> [theorem2_depth(s, 0) for s in (4, 5, 10, 15, 16, 20)]
    [4, 5, 8, 12, 12, 15]
    >>> theorem2_depth(6, 8), theorem2_depth(0, 16), theorem2_depth(0, 8)
    (9, 8, 4)
    >>> theorem2_depth(5, 0), theorem2_depth(20, 0), theorem2_depth(0, 22)
    (5, 15, 11)
    """
    s, r = int(s), int(r)
    if s < 0 or r < 0:
        raise ValueError("attribute counts must be >= 0")
    depth = 0
    if s > 0:
        t = 0
        while s * ((s - 1) / s) ** t >= s / 2:
            t += 1
        depth = t + 1
    return depth + r // 2


#: the random decision forest's parameters, in its signature's order
_PARAMS = window_params(
    "epsilon n_trees window_size max_windows max_depth range_share range_bins window_seconds "
    "warmup drift drift_share drift_window min_tree_records attributes relevance_share "
    "relevance_floor leaf_buckets seed on_out_of_domain on_unknown window_decay grid_share",
    Param("max_depth", None, "Overrides the Theorem-2 depth.", "integer", lo=0, none_ok=True),
    Param("leaf_buckets", 8, "Public buckets per training record of a tree through which the "
          "leaves release their labels, every bucket released "
          "(docs/random_forest.md#trees-that-are-never-built).", "integer", lo=1),
    n_trees=100, window_size=20_000, max_windows=2, range_share=0.2, range_bins=24,
    min_tree_records=50, relevance_floor=0.1, grid_share=0.2)


@documented
class RandomDecisionForestClassifier(WindowForestBase):
    """DP random decision forest (Fletcher & Islam 2017, with its addendum's leaf mechanism) on
    windows.

    {parameters}

    Examples
    --------
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> model = RandomDecisionForestClassifier(schema=schema, epsilon=1.0, window_size=20_000,
    ...                                        seed=0)
    >>> for xi, yi in zip(X[:20_000], y[:20_000]):
    ...     model.learn_one(xi, yi)
    >>> report = model.privacy_report()       # warm-up windows 1k .. 8k; the newest 2 vote
    >>> report["epsilon"], report["trees"], report["depth"]   # 4k: 80 trees of 50 records, 8k: 100
    (1.0, 180, 9)
    >>> model.predict_one(X[25_000]) in (False, True)
    True
    """

    PARAMETERS = _PARAMS
    grid_raw_trees = False   # implicit trees: rows are scored through the grid

    def __init__(self, schema: Any = None, epsilon: float = 1.0, n_trees: int = 100,
                 window_size: int | None = 20_000, max_windows: int | None = 2,
                 max_depth: int | None = None, range_share: float = 0.2, range_bins: int = 24,
                 window_seconds: float | None = None, warmup: int | None = 250,
                 drift: bool = True, drift_share: float = 0.05,
                 drift_window: int | None = None, min_tree_records: int | None = 50,
                 attributes: str = "relevance", relevance_share: float = 0.2,
                 relevance_floor: float = 0.1, leaf_buckets: int = 8,
                 seed: int | None = None,
                 on_out_of_domain: str = "clip", on_unknown: str = "ignore",
                 window_decay: float = 1.0, grid_share: float = 0.2):
        super().__init__(**own_args(locals()))
        enc = self._encoder
        depth = theorem2_depth(len(enc.numeric_columns()), len(enc.categorical_columns()))
        self.depth = depth if max_depth is None else max_depth
        self._trees = ImplicitRandomTrees(enc, depth=self.depth,
                                          secret=int(noise.choose(self._rng, 2**63)))
        self._next_tree = 0
        self._window_labeled = 0     # labeled records of the window being trained (public)
        self._setup_relevance()

    # ------------------------------------------------------------- accounting
    def ranged(self, n_labeled: int) -> bool:
        """Whether a window of ``n_labeled`` labeled records (a public count) buys a private
        numeric range: each attribute's part must hold at least ``8 * tau`` records, ``tau =
        (ln(range_bins) + 2) / epsilon_range`` the noisy count a bin needs (else the range
        all but surely falls back to the public domain and the budget is better left to
        the leaves: small warm-up windows, small epsilons)."""
        if not (self.range_share and self._trees.s):
            return False
        eps_range = split_exact(self._relevance_split()[0], self.range_share)[1]
        tau = (math.log(self.range_bins) + 2.0) / eps_range
        return n_labeled / self._trees.s >= 8.0 * tau

    def _train_closed(self, X, y, public, fed, held=None) -> None:
        self._window_labeled = int((y != UNLABELED).sum())
        super()._train_closed(X, y, public, fed, held=held)

    def _hold_window(self, X, y, public, fed, grid_rows=None) -> None:
        self._window_labeled = int((y != UNLABELED).sum())   # its charges' label reads it
        super()._hold_window(X, y, public, fed, grid_rows=grid_rows)

    def _leaf_and_range_epsilon(self) -> tuple[float, float]:
        """``(leaves, range)``: what a window's ``epsilon_trees`` leaves after the relevance
        release, split exactly (in the ledger's decimals) into the leaf labels' and the
        private numeric range's parts; the range gets nothing unless the window is
        :meth:`ranged`."""
        rest = self._relevance_split()[0]
        if not self.ranged(self._window_labeled):
            return rest, 0.0
        return split_exact(rest, self.range_share)

    def _window_charges(self) -> list[tuple[str, float, str]]:
        eps_leaf, eps_range = self._leaf_and_range_epsilon()
        eps_rel = self._relevance_split()[1]
        label = type(self).__name__
        if eps_range or eps_rel:
            label += (f": every record in one attribute's histogram of the relevance release "
                      f"(epsilon {eps_rel!r}), in one attribute's part of the private numeric "
                      f"range (epsilon {eps_range!r}), then in one leaf of this tree "
                      f"(epsilon {eps_leaf!r}); sequential, one charge")
        return [(f"tree-{t}", self.epsilon_trees, label)
                for t in range(self._window_trees or self.n_trees)]

    # ------------------------------------------------------------- training
    def _window_router(self, V: np.ndarray, epsilon: float) -> ImplicitRandomTrees:
        """The window's random trees: the model's (same secret: the same attributes and
        uniform draws) with their numeric split points drawn inside an ``epsilon``-DP range
        of the window's labeled records
        (:func:`~dpstream.models.windows.random_trees.private_ranges`) instead of the schema's
        whole public domain; the model's own trees if ``epsilon`` is 0.
        """
        trees = self._trees
        if epsilon <= 0:
            return trees
        return trees.with_domain(*private_ranges(V[:, 1:1 + trees.s], *trees.domain, epsilon,
                                                 self.range_bins, self._rng))

    def _train_window(self, X: np.ndarray, y: np.ndarray,
                      public: np.ndarray) -> tuple[list, str, dict]:
        labeled = y != UNLABELED
        X, y = X[labeled], y[labeled]
        n_trees = self._window_trees or self.n_trees
        ids = np.arange(self._next_tree, self._next_tree + n_trees)
        self._next_tree += n_trees
        tree_of = np.empty(y.size, dtype=np.int64)
        for t, part in zip(ids, self.deal(y.size, n_trees), strict=True):
            tree_of[part] = t
        eps_leaf, eps_range = self._leaf_and_range_epsilon()
        V = self._trees.matrix(X)
        router = self._window_router(V, eps_range)
        ranged = router is not self._trees
        domain = router.domain
        if self._relevance is not None:   # released first: this window's trees use it too
            self._release_relevance(X, y, self._relevance_split()[1])
            router = router.with_slots(slot_counts(self._relevance.weights(),
                                                   n_numeric=self._trees.s))
        keys = router.leaf_keys(router.view(V), tree_of, rows=np.arange(y.size))
        k = len(self._encoder.classes)
        # every leaf's label is released through its bucket: all buckets of every tree, so
        # the published table never tells which leaves hold records (buckets.bucket_keys)
        buckets = bucket_count(-(-y.size // n_trees), self.leaf_buckets)
        roots = root_keys(self._trees.secret, ids)
        counts = bucket_counts(keys, tree_of - ids[0], y, n_trees, buckets, k)
        # one report per bucket: the buckets of a tree are disjoint, trees hold disjoint parts
        labels = release_leaf_labels(counts, eps_leaf, self._rng)
        votes = np.zeros_like(counts)
        votes[np.arange(counts.shape[0]), labels] = 1.0
        trees = [KeyedTree(int(t), self.depth) for t in ids]
        extra = {"depth": self.depth, "buckets": buckets,
                 "table": BucketTable(roots, [(buckets, 0)], votes),
                 "epsilon_leaves": eps_leaf, "epsilon_range": eps_range,
                 "epsilon_relevance": self._relevance_split()[1],
                 # read from the raw counts: NOT differentially private, kept out of the report
                 "diagnostics": {"leaves_reached": int(np.unique(keys).size),
                                 "buckets_reached": int((counts.sum(axis=1) > 0).sum()),
                                 "labels_flipped_by_noise":
                                     int((labels != counts.argmax(axis=1))[
                                         counts.sum(axis=1) > 0].sum())}}
        if router is not self._trees:
            extra["router"] = router
        if ranged:
            extra["numeric_range"] = [[float(a), float(b)] for a, b in
                                      zip(*domain, strict=True)]
        return trees, "random decision forest", extra

    # ------------------------------------------------------------- predicting
    def _kept(self) -> tuple[np.ndarray, LeafTable, list[tuple], np.ndarray]:
        """``(tree ids, merged leaf table, groups, vote weights)`` of the kept trees, cached in
        ``_serving`` (with each tree's buckets) until a window closes or retires. A group is
        one window's ``(router, positions in ids, root keys)``: its trees walk with its
        numeric domain. Each tree votes with its window's :meth:`window_weights` entry."""
        if self._serving is None:
            ids = np.array([tr.id for win in self._windows for tr in win.trees], dtype=np.int64)
            table = LeafTable.concat([w.extra["table"] for w in self._windows
                                      if "table" in w.extra], len(self._encoder.classes))
            weights = np.array([wt for win, wt in zip(self._windows, self.window_weights(),
                                                      strict=True)
                                for _ in win.trees], dtype=np.float64)
            groups, start = [], 0
            for win in self._windows:
                at = np.arange(start, start + len(win.trees))
                start += len(win.trees)
                router = win.extra.get("router", self._trees)
                if groups and groups[-1][0] is router:    # windows on the public domain
                    groups[-1][1] = np.r_[groups[-1][1], at]
                elif at.size:
                    groups.append([router, at])
            buckets = np.array([win.extra.get("buckets", 0) for win in self._windows
                                for _ in win.trees], dtype=np.uint64)
            self._serving = (ids, table, [(r, at, r.root_keys(ids[at])) for r, at in groups],
                             weights, buckets)
        return self._serving[:4]

    def _tree_weights(self) -> np.ndarray:
        """Each kept tree's vote weight: its window's :meth:`window_weights` entry."""
        return self._kept()[3]

    def _empty(self, keys: np.ndarray) -> np.ndarray:
        return uniform_label(keys, len(self._encoder.classes))

    def _votes(self, V: np.ndarray) -> np.ndarray:
        ids, table, groups, weights = self._kept()
        out = np.zeros((V.shape[0], len(self._encoder.classes)))
        buckets = self._serving[4]
        for router, at, roots in groups:
            out += self._group_votes(V, table, router, ids[at], roots, weights[at], buckets[at])
        return out

    def _group_votes(self, V: np.ndarray, table: LeafTable, router: ImplicitRandomTrees,
                     ids: np.ndarray, roots: np.ndarray, weights: np.ndarray,
                     buckets: np.ndarray) -> np.ndarray:
        """The weighted votes of trees that share one numeric domain (one window's)."""
        k = len(self._encoder.classes)
        V = router.view(V)
        if router.compiled and V.shape[0] >= _BATCH:   # one trie per tree and batch
            wk = random_trees._wk
            lo, hi, last, draw = router.kernel_args()
            tk = random_trees._tk
            return tk.trie_scores(
                tk._trie_votes, V, roots, weights, k,
                (self.depth, lo, hi, last, draw, _NTH, table.keys, table.slots(), table.values,
                 kernel_salts(k)[1]), max(1, router.s), buckets=buckets)
        if router.compiled:   # compiled: walk, look up and vote in one loop
            wk = random_trees._wk
            return wk.implicit_votes(
                np.ascontiguousarray(V), roots, self.depth,
                *router.kernel_args(), _NTH, table.keys, table.slots(), table.values,
                kernel_salts(k)[1], weights, buckets)
        keys = bucket_keys(roots[None, :], router.leaf_keys(V, ids), buckets[None, :])
        return (table.lookup(keys, self._empty) * weights[:, None]).sum(axis=1)

    def _scores(self, X: np.ndarray) -> np.ndarray:
        return self._votes(self._trees.matrix(self._grid_rows(X)))

    def _score_row(self, row: np.ndarray) -> np.ndarray:
        """:meth:`_scores` of one encoded row, the same values bit for bit: one compiled call
        (:func:`~dpstream.models.windows.window_kernels.implicit_votes_row`: the routing row, then
        every group's trees) with the arguments :meth:`_row_plan` prepared."""
        plan = self._row_plan()
        row = self._grid_rows(row[None, :])[0]
        if plan is None:
            return self._votes(self._trees.matrix(row[None, :]))[0]
        return random_trees._wk.implicit_votes_row(
            np.ascontiguousarray(row, dtype=np.float64), *plan)

    def _row_plan(self) -> tuple | None:
        """The arguments of :func:`~dpstream.models.windows.window_kernels.implicit_votes_row` after
        the row, cached with ``_serving``: the routing row's layout, then per group of
        :meth:`_kept` (its bounds in the packed arrays) the root keys, routing columns,
        numeric domain, last categorical codes and vote weights. ``None`` when a group cannot
        use the compiled walk or the routing row is not compiled."""
        ids, table, groups, weights = self._kept()
        if len(self._serving) == 5:
            trees, plan = self._trees, None
            runs = trees.group_runs() if trees.compiled else ()
            if runs and all(router.compiled for router, _, _ in groups):
                width = np.arange(1 + trees.s + trees.r, dtype=np.intp)
                parts = [(roots, width if getattr(router, "_view", None) is None
                          else router._view, router._lo, router._hi, router._last)
                         for router, _, roots in groups]
                bounds, off = np.zeros((len(parts), 8), dtype=np.int64), [0] * 5
                for g, part in enumerate(parts):   # t0 t1, c0 c1, s0 s1 (lo, hi), r0 r1
                    end = [a + p.size for a, p in zip(off, part, strict=True)]
                    bounds[g] = off[0], end[0], off[1], end[1], off[2], end[2], off[4], end[4]
                    off = end
                packed = [np.concatenate([part[f] for part in parts], dtype=dtype) if parts
                          else np.zeros(0, dtype) for f, dtype in
                          enumerate((np.uint64, np.intp, np.float64, np.float64, np.float64))]
                draw, out_salt, _ = kernel_salts(len(self._encoder.classes))
                w = np.concatenate([weights[at] for _, at, _ in groups]) if groups \
                    else np.zeros(0)
                bk = np.concatenate([self._serving[4][at] for _, at, _ in groups]) if groups \
                    else np.zeros(0, dtype=np.uint64)
                plan = (trees._num_cols, *runs, bounds, *packed,
                        np.ascontiguousarray(w, dtype=np.float64), self.depth, draw, _NTH,
                        table.keys, table.slots(), table.values, out_salt,
                        np.ascontiguousarray(bk, dtype=np.uint64))
            self._serving = (*self._serving, plan)
        return self._serving[5]

    def __setstate__(self, state: dict) -> None:
        # parameters from after a checkpoint come from the table (a checkpoint from before
        # private ranges: range_share 0, its windows split over the public domain; from
        # before buckets: its windows keep leaf keys)
        state.setdefault("_window_labeled", 0)
        super().__setstate__(state)

    # ------------------------------------------------------------- report
    def privacy_report(self) -> dict:
        """Pure epsilon-DP: what was spent where, and why the windows compose in parallel."""
        return {
            "mechanism": "random decision forest (Fletcher & Islam 2017): data-independent "
                         "random trees, "
                         "leaf labels by report-one-sided-noisy-argmax (exponential noise, "
                         "utility = class count, sensitivity 1, monotonic; the paper's "
                         "addendum)",
            **self._report_base(),
            "guarantee": (
                "pure epsilon-DP per record for the whole stream: the trees' structure reads no "
                "data; each record lies in exactly one window, one tree's disjoint part and one "
                "leaf, whose label is one epsilon-DP report-noisy-argmax; retired trees are "
                "post-processing. The smooth-sensitivity exponential mechanism of the original "
                "paper is not used (not proven DP)"),
            "protects": "features and labels",
            "depth": self.depth,
            "windows": [{"algorithm": w.kind, "records": w.records, "labeled": w.labeled,
                         "trees": len(w.trees), "depth": w.extra.get("depth")}
                        for w in self._windows],
        }

    def diagnostics(self) -> list[dict]:
        """Per kept window: how many leaves a training record reached and how many of their
        labels the noise flipped. Read from the raw counts — **not** differentially private:
        for the data owner's eyes only, never in :meth:`privacy_report` or the service."""
        return [dict(w.extra.get("diagnostics", {})) for w in self._windows]

    @classmethod
    def _unit_test_params(cls):
        yield {"schema": river_check_schema("binary"), "window_size": 100, "n_trees": 10,
               "seed": 1}
