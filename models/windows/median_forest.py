"""The median-split private ensembles of Huang, Lei & Kabán (2023) on tumbling windows.

:class:`MedianForestClassifier` runs the paper's SPE, SSPE-1, SSPE-2 and PTE (chosen by
``privacy``, ``transductive`` and each window's labeled share) on the window framework of
:mod:`~dpstream.models.windows.window_forest`. :func:`grow_median_tree` grows one complete
median-split tree (private medians over public intervals, exact ones when features are
public); :func:`grow_median_tree_reference` is its numpy reference.

The algorithms, why they are DP, the departures from the paper (complete trees of public
depth, averaged leaf distributions, PTE's exact soft pseudo-labels) and the stream extensions
with their measurements: docs/median_forest.md#the-median-split-trees-in-detail.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...accounting import LaplaceMechanism, PrivateMedian, noise
from ..param_table import Param, documented, own_args
from ..schema import river_check_schema
from . import window_kernels as _wk  # with ``_wk`` set to None (a test): the numpy scoring
from .window_forest import (
    UNLABELED,
    WindowForestBase,
    WindowTree,
    pack_trees,
    window_params,
)

__all__ = ["MedianForestClassifier", "grow_median_tree", "grow_median_tree_reference"]

PRIVACY_SETTINGS = ("features_and_labels", "labels_only")
_UNSET = object()


def grow_median_tree(X: np.ndarray, depth: int, *, numeric: list, categorical: list,
                     rng: np.random.Generator, budgets: list[float] | None,
                     n_candidates: int = 256,
                     weights: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """A complete median-split tree of ``depth`` over encoded rows ``X`` (heap layout).

    ``budgets[i]`` is the epsilon of every split at depth ``i`` (private medians); ``None``
    takes exact medians (features public). Returns ``(feature, threshold)``; leaves route
    through column 0 with threshold ``+inf``. Grown by the compiled
    :func:`~dpstream.models.windows.window_kernels.grow_median`: the same draws from ``rng`` in
    the same order as :func:`grow_median_tree_reference`, hence the same tree.

    >>> rng = np.random.default_rng(0)
    >>> X = np.c_[np.zeros(100), np.arange(100.0)]
    >>> f, t = grow_median_tree(X, 1, numeric=[(1, 0.0, 99.0)], categorical=[], rng=rng,
    ...                         budgets=None)
    >>> f.tolist(), t.tolist()
    ([1, 0, 0], [49.5, inf, inf])
    """
    if (_wk is None or not isinstance(rng, np.random.Generator)   # pragma: no cover
            or len(numeric) + len(categorical) > 128):   # the kernel's sum: up to 128
        return grow_median_tree_reference(X, depth, numeric=numeric, categorical=categorical,
                                          rng=rng, budgets=budgets, n_candidates=n_candidates,
                                          weights=weights)
    private = budgets is not None
    eps = np.asarray(budgets if private else [], dtype=np.float64)
    if private and (eps.size < depth or not np.all(np.isfinite(eps) & (eps > 0))):
        raise ValueError("need epsilon > 0 and finite bounds with upper > lower")
    for _, lo, hi in numeric:   # release_sorted's checks on the public bounds (the root's)
        if private and not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError("need epsilon > 0 and finite bounds with upper > lower")
    if n_candidates < 1:
        raise ValueError("need epsilon > 0 and finite bounds with upper > lower")
    sizes = [len(c) for c in categorical]
    den = 1 << noise.FACTOR_BITS
    nums = np.array([noise.distance_factor(e)[0] for e in eps], dtype=np.int64)
    w = np.zeros(0) if weights is None else np.ascontiguousarray(weights, dtype=np.float64)
    return _wk.grow_median(
        np.ascontiguousarray(X, dtype=np.float64), int(depth),
        np.array([c for c, _, _ in numeric], dtype=np.int64),
        np.array([lo for _, lo, _ in numeric], dtype=np.float64),
        np.array([hi for _, _, hi in numeric], dtype=np.float64),
        np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)]).astype(np.int64),
        np.array([c for cols in categorical for c in cols], dtype=np.int64),
        rng, nums, den, private, int(n_candidates), w, weights is not None)


def grow_median_tree_reference(X: np.ndarray, depth: int, *, numeric: list, categorical: list,
                               rng: np.random.Generator, budgets: list[float] | None,
                               n_candidates: int = 256, weights: np.ndarray | None = None
                               ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`grow_median_tree` in numpy, node by node: the reference the compiled grower
    reproduces (``tests/test_median_forest.py``).

    >>> X = np.c_[np.zeros(100), np.arange(100.0)]
    >>> a = grow_median_tree_reference(X, 2, numeric=[(1, 0.0, 99.0)], categorical=[],
    ...                                rng=np.random.default_rng(0), budgets=[0.5, 0.7])
    >>> b = grow_median_tree(X, 2, numeric=[(1, 0.0, 99.0)], categorical=[],
    ...                      rng=np.random.default_rng(0), budgets=[0.5, 0.7])
    >>> all(np.array_equal(u, v) for u, v in zip(a, b))
    True
    """
    n_nodes = 2 ** (depth + 1) - 1
    n_internal = 2 ** depth - 1
    feature = np.zeros(n_nodes, dtype=np.int32)
    threshold = np.full(n_nodes, np.inf)
    # per node: remaining numeric intervals and categorical columns still splittable
    state: dict[int, tuple[list, list]] = {
        0: ([(lo, hi) for _, lo, hi in numeric], [list(c) for c in categorical])}
    value_of = _row_categories(X, categorical)
    # each categorical feature's column -> its index among the feature's columns
    index_of = [{c: i for i, c in enumerate(cols)} for cols in categorical]
    node_of = np.zeros(X.shape[0], dtype=np.int64)
    for level in range(depth):
        first = 2 ** level - 1
        order = np.argsort(node_of, kind="stable")
        bounds = np.searchsorted(node_of[order], np.arange(first, 2 * first + 2))
        for node in range(first, 2 * first + 1):
            here = order[bounds[node - first]:bounds[node - first + 1]]
            intervals, cats = state.pop(node)
            l_iv, r_iv, l_cat, r_cat = intervals, intervals, cats, cats
            options = [j for j, (lo, hi) in enumerate(intervals) if hi > lo] + \
                      [len(numeric) + k for k, c in enumerate(cats) if len(c) > 1]
            if options:   # otherwise a pass-through node: column 0 <= inf, everything left
                if weights is None:
                    j = options[int(noise.choose(rng, len(options)))]
                else:
                    # rng.choice(len(options), p=...)'s inverse-CDF draw, without its checks
                    p = weights[options]
                    cdf = np.cumsum(p / p.sum())
                    cdf /= cdf[-1]
                    j = options[int(cdf.searchsorted(noise.uniforms(rng), side="right"))]
                if j < len(numeric):
                    col, _, _ = numeric[j]
                    lo, hi = intervals[j]
                    values = X[here, col]
                    values = values[~np.isnan(values)]
                    if budgets is not None:   # PrivateMedian(...).release(values), no object
                        t = PrivateMedian.release_sorted(
                            np.sort(values), epsilon=budgets[level], lower=lo, upper=hi,
                            n_candidates=n_candidates, rng=rng)
                    elif values.size:
                        t = float(np.median(values))
                    else:
                        t = (lo + hi) / 2.0      # an empty node: the public midpoint
                    feature[node], threshold[node] = col, t
                    l_iv, r_iv = list(intervals), list(intervals)
                    l_iv[j], r_iv[j] = (lo, t), (t, hi)
                else:
                    k = j - len(numeric)
                    cols = cats[k]
                    # each record's value as a position among the node's columns (-1: missing,
                    # or a value the path has split off — none reach here, by the path)
                    where = np.full(len(categorical[k]) + 1, -1, dtype=np.int64)
                    where[[index_of[k][c] for c in cols]] = np.arange(len(cols))
                    codes = where[value_of[here, k]]
                    codes = codes[codes >= 0]
                    if budgets is not None:
                        pick = PrivateMedian.categorical(codes, n_categories=len(cols),
                                                         epsilon=budgets[level], rng=rng)
                    else:
                        counts = np.bincount(codes, minlength=len(cols))
                        pick = int(np.argmin(np.abs(counts - codes.size / 2.0)))
                    feature[node], threshold[node] = cols[pick], 0.5   # left iff == category
                    l_cat, r_cat = list(cats), list(cats)
                    l_cat[k] = []
                    r_cat[k] = [c for c in cols if c != cols[pick]]
            node_of[here] = 2 * node + 1 + ~(X[here, feature[node]] <= threshold[node])
            state[2 * node + 1], state[2 * node + 2] = (l_iv, l_cat), (r_iv, r_cat)
    assert not state or min(state) >= n_internal
    return feature, threshold


def _row_categories(X: np.ndarray, categorical: list) -> np.ndarray:
    """Each row's value per categorical feature, as the index of its column among the
    feature's columns (the encoder writes 0 there and 1 in the others), or the number of
    columns when missing (NaN everywhere), so it indexes a lookup with one spare slot."""
    out = np.empty((X.shape[0], len(categorical)), dtype=np.int64)
    for k, cols in enumerate(categorical):
        block = X[:, cols]
        zero = block == 0.0
        out[:, k] = np.where(zero.any(axis=1), np.argmax(zero, axis=1), len(cols))
    return out


#: the median forest's parameters, in its signature's order
_PARAMS = window_params(
    "epsilon n_trees window_size max_windows privacy transductive n_trees_second split_share "
    "max_depth leaf_size n_candidates window_seconds warmup drift drift_share drift_window "
    "attributes relevance_share min_tree_records relevance_floor seed on_out_of_domain "
    "on_unknown window_decay grid_share grid_refresh",
    Param("privacy", "features_and_labels", "``'features_and_labels'`` (SPE / SSPE-1: both "
          "private) or ``'labels_only'`` (SSPE-2 / PTE: features public, labels private).",
          "choice", options=PRIVACY_SETTINGS),
    Param("transductive", False, "With ``privacy='labels_only'``: PTE (Alg. 4), a second, "
          "pseudo-labeled ensemble.", "bool"),
    Param("n_trees_second", None, "PTE's second ensemble size; ``None``: ``n_trees``.",
          "integer", lo=1, none_ok=True),
    Param("split_share", 0.3, "SPE's share of epsilon for the splits; the rest labels the "
          "leaves (the paper: 0.5).", "real", lo=0, hi=1, lo_open=True, hi_open=True),
    Param("max_depth", None, "Upper bound on the public tree depth; ``None``: the number of "
          "features.", "integer", lo=0, none_ok=True),
    Param("leaf_size", 5, "Records per leaf the public depth aims at (the paper's minimum node "
          "size, 10).", "integer", lo=1),
    Param("n_candidates", 256, "Uniform candidates of each private median.", "integer", lo=1),
    epsilon=2.0, window_size=2_000, max_windows=25, warmup=125, min_tree_records=250,
    window_decay=0.9, grid_share=0.2, grid_refresh=5)


@documented
class MedianForestClassifier(WindowForestBase):
    """Median-split private forests (Huang et al. (2023): SPE, SSPE-1, SSPE-2, PTE) on tumbling
    windows.

    {parameters}

    Examples
    --------
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> model = MedianForestClassifier(schema=schema, epsilon=2.0, window_size=10_000, seed=0)
    >>> for xi, yi in zip(X[:20_000], y[:20_000]):
    ...     model.learn_one(xi, yi)
    >>> model.privacy_report()["windows_closed"], model.privacy_report()["epsilon"]
    (7, 2.0)
    >>> model.predict_one(X[20_000]) in (False, True)
    True

    Semi-supervised: ``learn_one(x, None)`` adds an unlabeled record to the window.

    >>> ssl = MedianForestClassifier(schema=schema, privacy="labels_only", transductive=True,
    ...                              window_size=5_000, n_trees=10, warmup=None, seed=0)
    >>> for i, (xi, yi) in enumerate(zip(X[:5_000], y[:5_000])):
    ...     ssl.learn_one(xi, yi if i % 5 == 0 else None)
    >>> report = ssl.privacy_report()
    >>> report["windows"][-1]["algorithm"], report["trees"], report["protects"]  # 10 + 10 trees
    ('PTE', 20, 'labels')
    """

    PARAMETERS = _PARAMS

    def __init__(self, schema: Any = None, epsilon: float = 2.0, n_trees: int = 2,
                 window_size: int | None = 2_000, max_windows: int | None = 25,
                 privacy: str = "features_and_labels", transductive: bool = False,
                 n_trees_second: int | None = None, split_share: float = 0.3,
                 max_depth: int | None = None, leaf_size: int = 5, n_candidates: int = 256,
                 window_seconds: float | None = None, warmup: int | None = 125,
                 drift: bool = True, drift_share: float = 0.05,
                 drift_window: int | None = None, attributes: str = "relevance",
                 relevance_share: float = 0.2, min_tree_records: int | None = 250,
                 relevance_floor: float = 0.3, seed: int | None = None,
                 on_out_of_domain: str = "clip", on_unknown: str = "ignore",
                 window_decay: float = 0.9, grid_share: float = 0.2,
                 grid_refresh: int | None = 5):
        super().__init__(**own_args(locals()))
        self._setup_relevance()

    def _check_params(self) -> None:
        super()._check_params()
        if self.transductive and self.privacy != "labels_only":
            raise ValueError("transductive (PTE) needs privacy='labels_only': its "
                             "pseudo-labeled records' features are released")

    # ------------------------------------------------------------ the trees
    def depth_for(self, n_per_tree: int) -> int:
        """The public depth for trees whose leaves are filled by ``n_per_tree`` records."""
        n = max(0, int(n_per_tree))
        depth = math.ceil(math.log2(n / self.leaf_size)) if n > self.leaf_size else 0
        depth = min(len(self._encoder.schema.features), depth)
        return depth if self.max_depth is None else min(depth, self.max_depth)

    @staticmethod
    def split_budgets(depth: int, epsilon_s: float) -> list[float]:
        """epsilon_i = C * epsilon_s * (3/2)**i for i < depth, summing to epsilon_s."""
        w = [1.5 ** i for i in range(depth)]
        total = sum(w)
        return [epsilon_s * wi / total for wi in w]

    def algorithm_for(self, n_labeled: int, n_unlabeled: int) -> str:
        """Which of the paper's algorithms a window with these (public) counts runs."""
        if self.privacy == "labels_only":
            return "PTE" if self.transductive and n_unlabeled > 0 else "SSPE-2"
        return "SSPE-1" if n_unlabeled >= max(1, n_labeled) else "SPE"

    def _grow(self, X: np.ndarray, depth: int, budgets: list[float] | None) -> tuple:
        enc = self._encoder
        weights = self.__dict__.get("_attribute_weights", _UNSET)   # the window's, if set
        if weights is _UNSET:
            weights = None if self._relevance is None else self._relevance.weights()
        return grow_median_tree(X, depth, numeric=enc.numeric_columns(),
                                categorical=enc.categorical_columns(), rng=self._rng,
                                budgets=budgets, n_candidates=self.n_candidates,
                                weights=weights)

    def _tree(self, feature, threshold, depth, X_lab, y_lab, eps_l: float | None) -> WindowTree:
        """Fill the leaves with class counts (Laplace noise of ``eps_l``; ``None``: exact)."""
        k = len(self._encoder.classes)
        counts = np.zeros((feature.size, k))
        tree = WindowTree(feature=feature, threshold=threshold, counts=counts, depth=depth)
        leaf = tree.leaves(X_lab)
        if y_lab.ndim == 2:    # soft labels: a class distribution per record
            np.add.at(counts, leaf, y_lab)
        else:   # whole counts: np.add.at's (leaf, class) += 1, as one bincount
            counts += np.bincount(leaf * k + y_lab, minlength=counts.size).reshape(counts.shape)
        first_leaf = 2 ** depth - 1
        if eps_l is not None:   # each record is in one leaf: sensitivity 1 per count vector
            # whole counts are lattice points; a soft label spreads over its leaf's k counts
            soft = y_lab.ndim == 2
            counts[first_leaf:] = LaplaceMechanism(
                epsilon=eps_l, sensitivity=1.0, rng=self._rng, integers=not soft,
                touched=k if soft else None).release(counts[first_leaf:])
        return tree

    def _window_charges(self) -> list[tuple[str, float, str]]:
        charges = super()._window_charges()
        if self._relevance is None:
            return charges
        trees, relevance = self._relevance_split()
        return [c for part, _, label in charges
                for c in ((part, trees, label), (part, relevance, "AttributeRelevance"))]

    def _train_window(self, X: np.ndarray, y: np.ndarray, public: np.ndarray):
        eps, eps_r = self._relevance_split()
        lab = np.flatnonzero(y != UNLABELED)
        if self._relevance is not None:   # released first: this window's trees use it too
            self._release_relevance(X[lab], y[lab], eps_r)
        # the attribute weights are post-processing of the releases so far, which no tree of
        # the window changes: computed once for all of them
        self._attribute_weights = None if self._relevance is None else self._relevance.weights()
        try:
            return self._train_trees(X, y, lab, eps)
        finally:
            del self._attribute_weights

    def _train_trees(self, X: np.ndarray, y: np.ndarray, lab: np.ndarray, eps: float):
        unl = np.flatnonzero(y == UNLABELED)
        algo = self.algorithm_for(lab.size, unl.size)
        nt = self._window_trees or self.n_trees
        lab_parts = [lab[p] for p in self.deal(lab.size)]
        depth = self.depth_for(lab.size // nt)
        trees: list[WindowTree] = []
        extra: dict = {"depth": depth}
        if algo in ("SPE", "SSPE-1"):
            unl_parts = [unl[p] for p in self.deal(unl.size)]
            if algo == "SPE":
                eps_s, eps_l = eps * float(self.split_share), eps * (1 - float(self.split_share))
            else:
                eps_s, eps_l = eps, eps
            budgets = self.split_budgets(depth, eps_s)
            extra.update(epsilon_splits=eps_s, epsilon_leaves=eps_l, split_budgets=budgets)
            for s_i, d_i in zip(lab_parts, unl_parts, strict=True):
                rows = d_i if algo == "SSPE-1" else np.concatenate([s_i, d_i])
                f, t = self._grow(X[rows], depth, budgets)
                trees.append(self._tree(f, t, depth, X[s_i], y[s_i], eps_l))
        else:   # SSPE-2 / PTE: features public -> exact medians on every record's features
            extra.update(epsilon_splits=None, epsilon_leaves=eps)
            for s_i in lab_parts:
                f, t = self._grow(X, depth, None)
                trees.append(self._tree(f, t, depth, X[s_i], y[s_i], eps))
            if algo == "PTE":
                # ensemble 1's class distributions on D are post-processing (labels enter
                # only through its noisy counts; features are public): soft pseudo-labels
                forest, table = pack_trees(trees, len(self._encoder.classes))
                first = table[forest.nodes(X[unl])].sum(axis=1)
                pseudo = first / np.maximum(first.sum(axis=1, keepdims=True), 1e-12)
                n2 = self.n_trees_second or self.n_trees
                depth2 = self.depth_for(unl.size)
                extra.update(depth_second=depth2, trees_second=n2)
                for _ in range(n2):   # free labels: every tree of ensemble 2 gets all of D
                    f, t = self._grow(X, depth2, None)
                    trees.append(self._tree(f, t, depth2, X[unl], pseudo, None))
        return trees, algo, extra

    # ------------------------------------------------------------- predicting
    def _scores(self, X: np.ndarray) -> np.ndarray:
        """Summed leaf class distributions over every kept tree (the base's
        ``table[forest.nodes(X)].sum(1)``), walked and summed by a compiled kernel.

        (A memo of the last batch's scores, reused by ``learn_stream``'s drift scoring, was
        tried and removed: a member's window views copy the model's ``__dict__``, and the
        memo went with it to objects scoring other trees; one member's prequential accuracy
        on the scale-out stream fell from 0.85 to 0.63-0.77.)"""
        if _wk is None:
            return super()._scores(X)
        forest, table = self._serve()
        if len(forest) == 0:
            return np.zeros((X.shape[0], table.shape[1]))
        return _wk.packed_scores(np.ascontiguousarray(X, dtype=np.float64), len(forest),
                                 forest.max_nodes, forest.feature, forest.threshold,
                                 forest.left, forest.max_depth, table)

    def _score_row(self, row: np.ndarray) -> np.ndarray:
        if _wk is None:
            return super()._score_row(row)
        return self._scores(row[None, :])[0]

    # ------------------------------------------------------------- report
    def privacy_report(self) -> dict:
        """Pure epsilon-DP: what was spent where, and why the windows compose in parallel."""
        labels_only = self.privacy == "labels_only"
        guarantee = (
            "pure epsilon-DP per record for the whole stream: each record lies in exactly one "
            "window and one tree's disjoint part, each tree's mechanisms spend epsilon, so "
            "windows and trees compose in parallel; retired trees are post-processing")
        if labels_only:
            guarantee = ("pure epsilon label-DP: features are treated as PUBLIC and are not "
                         "protected (exact medians); each label lies in exactly one window and "
                         "one tree's disjoint part and is released once through Laplace leaf "
                         "counts with epsilon; pseudo-labels (PTE) are post-processing")
        windows = [{"algorithm": w.kind, "records": w.records, "labeled": w.labeled,
                    "trees": len(w.trees), **w.extra} for w in self._windows]
        return {"mechanism": "median-split private forest (Huang et al. 2023): "
                             "exponential-mechanism "
                             "medians over public intervals (exact when features are public), "
                             "Laplace leaf counts",
                **self._report_base(),
                "guarantee": guarantee,
                "protects": "labels" if labels_only else "features and labels",
                "privacy": self.privacy,
                "depth": self.last_depth, "windows": windows}

    @classmethod
    def _unit_test_params(cls):
        yield {"schema": river_check_schema("binary"), "window_size": 100, "n_trees": 5,
               "seed": 1}
        yield {"schema": river_check_schema("binary"), "window_size": 60, "n_trees": 3,
               "privacy": "labels_only", "transductive": True, "seed": 2}

