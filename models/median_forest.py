"""The median-split private ensemble of seed 000 (Huang, Lei, Kabán), Alg. 1-2, on windows.

Each tree: at every internal node a split attribute is drawn uniformly among the attributes that
can still split (public information), and the split point is a private median of the node's
values (:class:`~dpstream.accounting.PrivateMedian`: exponential mechanism over uniform
candidates in the node's PUBLIC interval — the schema domain narrowed by the split path; the
paper's ``[min V, max V]`` would leak the extremes). Categorical attributes choose a category by
the seed's count utility and split "== category". The split budget ``epsilon_s`` is spread over
the depths geometrically, ``epsilon_i = C * epsilon_s * (3/2)**i``; nodes of one depth hold
disjoint records, so they compose in parallel. Leaves release their class counts with Laplace
noise (``epsilon_l``); a tree votes for its leaf's noisy majority class.

**Departure (sound).** The paper stops splitting a node with at most 10 records: a
data-dependent shape leaks. Trees here are complete, of depth
``min(number of features, floor(log2(part_size / 10)))`` where ``part_size =
window_size // n_trees`` is public — the depth at which median splits would leave about 10
records per leaf — or ``max_depth`` if smaller. Nothing about the shape is read from the data.

Examples
--------
>>> from dpstream.stream import load_adult
>>> X, y, schema = load_adult("train")
>>> model = MedianForestClassifier(schema=schema, epsilon=2.0, window_size=10_000, seed=0)
>>> for xi, yi in zip(X[:20_000], y[:20_000]):
...     model.learn_one(xi, yi)
>>> model.privacy_report()["windows_closed"], model.privacy_report()["epsilon"]
(2, 2.0)
>>> model.predict_one(X[20_000]) in (False, True)
True
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..accounting import LaplaceMechanism, PrivateMedian
from .window_forest import WindowForestBase

__all__ = ["MedianForestClassifier"]


class MedianForestClassifier(WindowForestBase):
    """Median-split private forest (seed 000, Alg. 1-2) refreshed on tumbling windows.

    Parameters
    ----------
    schema
        The public schema (domains and classes); nothing is read from the data.
    epsilon
        Budget of every tree (parallel composition makes it the stream's guarantee).
    n_trees
        Trees per window (the window's records are dealt disjointly among them).
    window_size
        Records per tumbling window.
    max_windows
        Windows whose trees are kept (older ones retire); ``None``: all.
    split_share
        Share of epsilon for the splits (epsilon_s); the rest labels the leaves (epsilon_l).
    max_depth
        Upper bound on the (public) tree depth; ``None``: the number of features.
    n_candidates
        Uniform candidates of each private median.
    seed
        ``None`` for OS entropy; an int for tests and benchmarks.
    """

    def __init__(self, schema: Any, epsilon: float = 2.0, n_trees: int = 10,
                 window_size: int = 10_000, max_windows: int | None = 5,
                 split_share: float = 0.5, max_depth: int | None = None,
                 n_candidates: int = 256, seed: int | None = None):
        self.split_share = split_share
        self.max_depth = max_depth
        self.n_candidates = n_candidates
        if isinstance(split_share, bool) or not isinstance(split_share, (int, float)) \
                or not 0 < split_share < 1:
            raise ValueError(f"split_share must be in (0, 1), got {split_share!r}")
        if max_depth is not None and (isinstance(max_depth, bool) or
                                      not isinstance(max_depth, int) or max_depth < 0):
            raise ValueError(f"max_depth must be an integer >= 0 or None, got {max_depth!r}")
        if isinstance(n_candidates, bool) or not isinstance(n_candidates, int) \
                or n_candidates < 1:
            raise ValueError(f"n_candidates must be an integer >= 1, got {n_candidates!r}")
        super().__init__(schema, epsilon, n_trees, window_size, max_windows, seed)

    # ------------------------------------------------------------ the tree
    def depth_for(self, window_size: int) -> int:
        """The public depth for a window of ``window_size`` records."""
        part = max(1, window_size // self.n_trees)
        depth = min(len(self._encoder.schema.features),
                    max(0, int(math.floor(math.log2(max(part / 10.0, 1.0))))))
        return depth if self.max_depth is None else min(depth, self.max_depth)

    def split_budgets(self, depth: int) -> list[float]:
        """epsilon_i = C * epsilon_s * (3/2)**i for i < depth, summing to epsilon_s."""
        eps_s = float(self.epsilon) * float(self.split_share)
        w = [1.5 ** i for i in range(depth)]
        total = sum(w)
        return [eps_s * wi / total for wi in w]

    def _build_tree(self, X: np.ndarray, y: np.ndarray, *, window_size: int) -> tuple:
        enc, rng = self._encoder, self._rng
        depth = self.depth_for(window_size)
        budgets = self.split_budgets(depth)
        n_nodes = 2 ** (depth + 1) - 1
        feature = np.zeros(n_nodes, dtype=np.int32)
        threshold = np.full(n_nodes, np.inf)
        left = np.arange(n_nodes, dtype=np.int32)
        numeric = enc.numeric_columns()
        categorical = enc.categorical_columns()
        state = {0: ([(lo, hi) for _, lo, hi in numeric], [list(c) for c in categorical])}
        node_of = np.zeros(y.size, dtype=np.int64)
        for node in range(2 ** depth - 1):
            level = int(math.floor(math.log2(node + 1)))
            intervals, cats = state.pop(node)
            left[node] = 2 * node + 1
            here = np.flatnonzero(node_of == node)
            options = [j for j, (lo, hi) in enumerate(intervals) if hi > lo] + \
                      [len(numeric) + k for k, c in enumerate(cats) if len(c) > 1]
            l_iv, r_iv, l_cat, r_cat = list(intervals), list(intervals), list(cats), list(cats)
            if not options:   # nothing left to split on: a pass-through node (all go left)
                feature[node], threshold[node] = 0, np.inf
            else:
                j = options[int(rng.integers(len(options)))]
                eps = budgets[level]
                if j < len(numeric):
                    col, _, _ = numeric[j]
                    lo, hi = intervals[j]
                    values = X[here, col]
                    values = values[~np.isnan(values)]
                    t = PrivateMedian(epsilon=eps, lower=lo, upper=hi,
                                      n_candidates=self.n_candidates, rng=rng).release(values)
                    feature[node], threshold[node] = col, t
                    l_iv[j], r_iv[j] = (lo, t), (t, hi)
                else:
                    k = j - len(numeric)
                    cols = cats[k]
                    block = X[np.ix_(here, cols)]
                    present = ~np.isnan(block[:, 0]) & (block.min(axis=1) == 0.0)
                    codes = np.argmin(block[present], axis=1)
                    pick = PrivateMedian.categorical(codes, n_categories=len(cols),
                                                     epsilon=eps, rng=rng)
                    feature[node], threshold[node] = cols[pick], 0.5   # left iff == category
                    l_cat[k] = []
                    r_cat[k] = [c for c in cols if c != cols[pick]]
            xv = X[here, feature[node]]
            go_right = ~(xv <= threshold[node])
            node_of[here] = left[node] + go_right
            for child, iv, cat in ((2 * node + 1, l_iv, l_cat), (2 * node + 2, r_iv, r_cat)):
                state[child] = (iv, cat)
        # leaves: Laplace-noised class counts (each record is in one leaf: sensitivity 1)
        first_leaf = 2 ** depth - 1
        k = len(enc.classes)
        counts = np.zeros((n_nodes - first_leaf, k))
        np.add.at(counts, (node_of - first_leaf, y), 1.0)
        eps_l = float(self.epsilon) * (1.0 - float(self.split_share))
        noisy = LaplaceMechanism(epsilon=eps_l, sensitivity=1.0, rng=rng).release(counts)
        leaf_class = np.zeros(n_nodes)
        leaf_class[first_leaf:] = np.argmax(noisy, axis=1)
        return feature, threshold, left, leaf_class, depth

    # ------------------------------------------------------------- report
    def privacy_report(self) -> dict:
        """Pure epsilon-DP: what was spent where, and why the windows compose in parallel."""
        depth = self.last_depth if self.last_depth is not None else \
            self.depth_for(self.window_size)
        return {"mechanism": "median-split private forest (seed 000): exponential-mechanism "
                             "medians over public intervals, Laplace leaf counts",
                **self._report_base(),
                "epsilon_splits": float(self.epsilon) * float(self.split_share),
                "epsilon_leaves": float(self.epsilon) * (1 - float(self.split_share)),
                "depth": depth, "split_budgets": self.split_budgets(depth)}

    @classmethod
    def _unit_test_params(cls):
        from .sgbdt import SGBDTClassifier
        yield {"schema": SGBDTClassifier._test_schema(), "window_size": 100, "n_trees": 5,
               "seed": 1}
