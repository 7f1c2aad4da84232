"""DPGDF, the differentially private greedy decision forest of Xin et al. (2019), on windows.

:class:`GreedyForestClassifier`: each closed window's labeled records are dealt into
``n_trees`` disjoint parts, each growing one complete greedy tree with the full ``epsilon``
(parallel composition): every level picks its nodes' attributes by the exponential mechanism
on a count-weighted Gini utility (:func:`gini_utilities`, sensitivity
:data:`GINI_SENSITIVITY`, monotonic), the leaves release their labels by
report-one-sided-noisy-argmax, all through public buckets, on the window framework of
:mod:`~dpstream.models.windows.window_forest`.

The mechanisms, the sensitivity derivation and what is replaced from the paper:
docs/greedy_forest.md#the-forest-in-detail.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...accounting import ExponentialMechanism, ReportNoisyMax, noise
from ..param_table import Param, documented, own_args
from ..schema import river_check_schema
from . import random_trees
from .buckets import BucketTable, bucket_count, bucket_counts, bucket_index, bucket_keys
from .random_trees import (
    KeyedTree,
    LeafTable,
    child_keys,
    kernel_salts,
    keyed_rank,
    nth_free,
    root_keys,
    uniform_label,
)
from .window_forest import UNLABELED, WindowForestBase, window_params

__all__ = ["GreedyForestClassifier", "gini_utilities", "GINI_SENSITIVITY"]

#: rows from which a batch is scored tree by tree through a trie of the nodes it reaches
#: (:func:`~dpstream.models.windows._trie_kernels.trie_scores`); fewer walk each row alone
_BATCH = 256

#: sensitivity of the count-weighted Gini utility (Friedman and Schuster 2010; derived above)
GINI_SENSITIVITY = 2.0


def gini_utilities(counts: np.ndarray) -> np.ndarray:
    """``−Σ_v (n_v − Σ_c n_{v,c}² / n_v)`` over the last-but-one axis of class counts
    ``(..., branches, classes)`` (an empty branch contributes 0); sensitivity
    :data:`GINI_SENSITIVITY`, monotonic (docs/greedy_forest.md#the-forest-in-detail).

    >>> counts = np.array([[[5, 0], [0, 5]], [[3, 2], [2, 3]]])   # (attribute, value, class)
    >>> gini_utilities(counts).tolist()
    [-0.0, -4.8]
    """
    counts = np.asarray(counts, dtype=np.float64)
    n = counts.sum(axis=-1)
    sq = (counts * counts).sum(axis=-1)
    impurity = n - np.divide(sq, n, out=np.zeros_like(sq), where=n > 0)
    return -impurity.sum(axis=-1)


#: the greedy forest's parameters, in its signature's order
_PARAMS = window_params(
    "epsilon n_trees window_size max_windows max_depth n_bins window_seconds warmup drift "
    "drift_share drift_window min_tree_records node_buckets seed on_out_of_domain on_unknown "
    "window_decay grid_share",
    Param("max_depth", 3, "The paper's ``d``: a tree has ``d − 1`` levels of splits (at most "
          "one per attribute) and a level of leaves.", "integer", lo=1),
    Param("n_bins", 16, "Equal-width bins of a numeric attribute's public domain.", "integer",
          lo=2),
    Param("node_buckets", 4, "Public buckets per node a level may hold, through which every "
          "level releases its attributes and the leaves their labels, all of them released.",
          "integer", lo=1),
    warmup=125, min_tree_records=500)


@documented
class GreedyForestClassifier(WindowForestBase):
    """DP greedy decision forest (Xin et al., 2019, sound leaf mechanism, complete trees) on
    windows.

    {parameters}

    Examples
    --------
    >>> from dpstream.stream import load_adult
    >>> X, y, schema = load_adult("train")
    >>> model = GreedyForestClassifier(schema=schema, epsilon=1.0, n_trees=25, max_depth=5,
    ...                                min_tree_records=1500, seed=0)
    >>> model.learn_many(X[:10_000], y[:10_000])
    >>> report = model.privacy_report()
    >>> report["epsilon"], report["trees"], report["levels"]   # >= 1,500 records per tree
    (1.0, 6, 4)
    >>> report["epsilon_per_split_level"], report["epsilon_leaf"]
    (0.125, 0.5)
    >>> model.predict_one(X[20_000]) in (False, True)
    True
    """

    PARAMETERS = _PARAMS
    grid_raw_trees = False   # implicit trees: rows are scored through the grid

    def __init__(self, schema: Any = None, epsilon: float = 1.0, n_trees: int = 2,
                 window_size: int | None = 2_000, max_windows: int | None = 10,
                 max_depth: int = 3, n_bins: int = 16, window_seconds: float | None = None,
                 warmup: int | None = 125, drift: bool = True, drift_share: float = 0.05,
                 drift_window: int | None = None, min_tree_records: int | None = 500,
                 node_buckets: int = 4, seed: int | None = None,
                 on_out_of_domain: str = "clip", on_unknown: str = "ignore",
                 window_decay: float = 1.0, grid_share: float = 0.0):
        super().__init__(**own_args(locals()))
        enc = self._encoder
        self._numeric = enc.numeric_columns()
        self._groups = [np.array(g, dtype=np.intp) for g in enc.categorical_columns()]
        self._fan = np.array([n_bins] * len(self._numeric) + [g.size for g in self._groups],
                             dtype=np.int64)
        self.levels = min(max_depth - 1, self._fan.size)
        self._secret = int(noise.choose(self._rng, 2**63))
        self._next_tree = 0

    @property
    def epsilon_split(self) -> float:
        """Budget of one level of splits."""
        return self.epsilon_trees / (2 * self.levels) if self.levels else 0.0

    @property
    def epsilon_leaf(self) -> float:
        """Budget of the leaf labels (all of it when a tree has no split)."""
        return self.epsilon_trees / 2 if self.levels else self.epsilon_trees

    def level_buckets(self, n: int) -> list[int]:
        """Buckets of each level (``levels`` node levels, then the leaves) of a tree of ``n``
        records (public): :func:`~dpstream.models.windows.buckets.bucket_count` of ``node_buckets``
        per record, except where the level holds few nodes — at most ``W``, the product of
        the largest fan-outs above it — and ``node_buckets · W²`` buckets keep its nodes apart
        (two of ``W`` nodes share one with probability about ``1 / (2 node_buckets)``).

        >>> GreedyForestClassifier(schema={"features": {"a": {"type": "numeric", "min": 0,
        ...     "max": 1}, "b": {"type": "numeric", "min": 0, "max": 1}},
        ...     "target": {"type": "binary", "values": [0, 1]}}, n_bins=4,
        ...     max_depth=5).level_buckets(1500)
        [64, 256, 4096]
        """
        fans, width, out = sorted(self._fan.tolist(), reverse=True), 1, []
        for lev in range(self.levels + 1):
            out.append(bucket_count(min(int(n), self.node_buckets * width * width),
                                    self.node_buckets))
            width *= fans[lev] if lev < len(fans) else 1
        return out

    # ------------------------------------------------------------- encoding
    def codes(self, X: np.ndarray) -> np.ndarray:
        """Encoded records -> the branch each takes at each attribute (numeric bins of the
        public domain, then categorical codes; missing: the last branch)."""
        X = np.asarray(X, dtype=np.float64).reshape(-1, np.shape(X)[-1])
        if random_trees._wk is not None:
            if getattr(self, "_code_args", None) is None:
                num = self._numeric
                self._code_args = (
                    np.array([c for c, _, _ in num], dtype=np.intp),
                    np.array([lo for _, lo, _ in num], dtype=np.float64),
                    np.array([hi for _, _, hi in num], dtype=np.float64), int(self.n_bins),
                    np.array([g[0] for g in self._groups], dtype=np.intp),
                    np.array([g.size for g in self._groups], dtype=np.intp))
            return random_trees._wk.bin_codes(X, *self._code_args)
        C = np.empty((X.shape[0], self._fan.size), dtype=np.int64)
        for j, (col, lo, hi) in enumerate(self._numeric):
            v = X[:, col]
            b = np.floor((v - lo) / (hi - lo) * self.n_bins) if hi > lo else np.zeros_like(v)
            C[:, j] = np.where(np.isnan(v), self.n_bins - 1,
                               np.clip(np.nan_to_num(b), 0, self.n_bins - 1))
        for j, cols in enumerate(self._groups, start=len(self._numeric)):
            block = X[:, cols]
            C[:, j] = np.where(np.isnan(block[:, 0]), cols.size - 1, np.argmin(block, axis=1))
        return C

    # ------------------------------------------------------------- training
    def _train_window(self, X: np.ndarray, y: np.ndarray,
                      public: np.ndarray) -> tuple[list, str, dict]:
        lab = y != UNLABELED
        C, y = self.codes(X[lab]), y[lab]
        n_trees = self._window_trees or self.n_trees
        ids = np.arange(self._next_tree, self._next_tree + n_trees, dtype=np.int64)
        self._next_tree += n_trees
        tree_of = np.empty(y.size, dtype=np.int64)
        for t, part in zip(ids, self.deal(y.size), strict=True):
            tree_of[part] = t
        k, m, n = len(self._encoder.classes), self._fan.size, y.size
        roots = root_keys(self._secret, ids)
        pos = tree_of - ids[0]
        key = roots[pos]
        rows = np.arange(n)
        # every level releases through all its buckets (buckets.bucket_keys): nodes that
        # share a bucket pool their utilities and split alike, and the published tables never
        # tell which nodes hold records
        buckets = self.level_buckets(-(-n // n_trees))
        node_attr = []
        for lev in range(self.levels):
            em = ExponentialMechanism(epsilon=self.epsilon_split, sensitivity=GINI_SENSITIVITY,
                                      monotonic=True, rng=self._rng)
            nodes, first, inv = np.unique(key, return_index=True, return_inverse=True)
            U = np.empty((nodes.size, m))
            for a in range(m):
                fan = int(self._fan[a])
                cell = (inv * fan + C[:, a]) * k + y
                counts = np.bincount(cell, minlength=nodes.size * fan * k)
                U[:, a] = gini_utilities(counts.reshape(nodes.size, fan, k))
            # a bucket's utility is the sum of its nodes' (an attribute a path already used
            # leaves a node whole: no gain); each record lies in one node, so in one bucket,
            # and the level costs one epsilon_split however many buckets it has
            nb = buckets[lev]
            U_b = np.zeros((n_trees * nb, m))
            np.add.at(U_b, pos[first] * nb + bucket_index(nodes, nb), U)
            attr = em.select_rows(U_b)
            node_attr.append(attr)
            a = attr[pos * nb + bucket_index(key, nb)]
            key = child_keys(key, C[rows, a])
        counts = bucket_counts(key, pos, y, n_trees, buckets[-1], k)
        labels = ReportNoisyMax(epsilon=self.epsilon_leaf, sensitivity=1.0, monotonic=True,
                                rng=self._rng).select_rows(counts)
        votes = np.zeros_like(counts)
        votes[np.arange(counts.shape[0]), labels] = 1.0
        splits = np.concatenate(node_attr) if node_attr else np.zeros(0)
        trees = [KeyedTree(int(t), self.levels) for t in ids]
        return trees, "greedy decision forest", {
            "levels": self.levels, "buckets": buckets,
            "nodes": BucketTable(roots, [(b, lev) for lev, b in enumerate(buckets[:-1])],
                                 splits.astype(np.float64)[:, None]),
            "leaves": BucketTable(roots, [(buckets[-1], self.levels)], votes)}

    # ------------------------------------------------------------- predicting
    def _kept(self) -> tuple[np.ndarray, LeafTable, LeafTable]:
        if self._serving is None:
            wins = [w for w in self._windows if "nodes" in w.extra]
            self._serving = (
                np.array([tr.id for w in self._windows for tr in w.trees], dtype=np.int64),
                LeafTable.concat([w.extra["nodes"] for w in wins], 1),
                LeafTable.concat([w.extra["leaves"] for w in wins],
                                 len(self._encoder.classes)),
                np.array([wt for w, wt in zip(self._windows, self.window_weights(), strict=False)
                          for _ in w.trees], dtype=np.float64),
                np.array([w.extra.get("buckets", [0] * (self.levels + 1))
                          for w in self._windows for _ in w.trees],
                         dtype=np.uint64).reshape(-1, self.levels + 1))
        return self._serving[:3]

    def _tree_weights(self) -> np.ndarray:
        """Each kept tree's vote weight: its window's :meth:`window_weights` entry."""
        self._kept()
        return self._serving[3]

    def _votes(self, C: np.ndarray) -> np.ndarray:
        ids, nodes, leaves = self._kept()
        k = len(self._encoder.classes)
        out = np.zeros((C.shape[0], k))
        if ids.size == 0:
            return out
        if random_trees._wk is not None:   # compiled: walk, look up and vote in one loop
            plan = getattr(self, "_plan", None)
            if plan is None or plan[0] is not ids:   # per kept set: root keys, attributes
                self._plan = plan = (ids, root_keys(self._secret, ids),
                                     np.ascontiguousarray(nodes.values[:, 0]))
            draw, out_salt, _ = kernel_salts(k)
            if C.shape[0] >= _BATCH and self._fan.size <= 62:   # one trie per tree and batch
                tk = random_trees._tk
                return tk.trie_scores(
                    tk._trie_greedy, C, plan[1], self._tree_weights(), k,
                    (self.levels, self._fan, nodes.keys, nodes.slots(), plan[2], leaves.keys,
                     leaves.slots(), leaves.values, draw, out_salt), 0,
                    buckets=self._serving[4])
            return random_trees._wk.greedy_votes(
                np.ascontiguousarray(C), plan[1], self.levels, nodes.keys, nodes.slots(),
                plan[2], leaves.keys, leaves.slots(), leaves.values, draw, out_salt,
                self._tree_weights(), self._serving[4])
        step = max(1, 262_144 // ids.size)
        for s in range(0, C.shape[0], step):
            block = C[s:s + step]
            rows = np.repeat(np.arange(block.shape[0]), ids.size)
            key = root = root_keys(self._secret, np.tile(ids, block.shape[0]))
            nb = np.tile(self._serving[4], (block.shape[0], 1))
            free = np.ones((rows.size, self._fan.size), dtype=bool)
            at = np.arange(rows.size)
            for lev in range(self.levels):
                idx, hit = nodes.find(bucket_keys(root, key, nb[:, lev], lev))
                # a node no training record reached: uniform among the attributes left
                rank, _ = keyed_rank(key, free.sum(axis=1))
                keyed = nth_free(free, rank)
                a = np.where(hit, nodes.values[idx, 0].astype(np.intp), keyed)
                branch = block[rows, a]
                free[at, a] = False
                key = child_keys(key, branch)
            idx, hit = leaves.find(bucket_keys(root, key, nb[:, -1], self.levels))
            votes = uniform_label(key, k)
            votes[hit] = leaves.values[idx[hit]]
            out[s:s + step] = (votes.reshape(block.shape[0], ids.size, k)
                               * self._tree_weights()[:, None]).sum(axis=1)
        return out

    def _scores(self, X: np.ndarray) -> np.ndarray:
        return self._votes(self.codes(self._grid_rows(X)))

    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state.pop("_plan", None)          # the kernels' cache, rebuilt on demand
        return state

    def _score_row(self, row: np.ndarray) -> np.ndarray:
        return self._votes(self.codes(self._grid_rows(row[None, :])))[0]

    # ------------------------------------------------------------- report
    def privacy_report(self) -> dict:
        """Pure epsilon-DP: what was spent where, and why the windows compose in parallel."""
        return {
            "mechanism": "greedy decision forest (Xin et al. 2019, DPGDF): complete multiway "
                         "trees, "
                         "attribute per node by the exponential mechanism on the count-weighted "
                         "Gini utility (sensitivity 2, monotonic), leaf labels by "
                         "report-one-sided-noisy-argmax",
            **self._report_base(),
            "guarantee": (
                "pure epsilon-DP per record for the whole stream: each record lies in one "
                "window and one tree's disjoint part; per tree, each level of splits spends "
                "epsilon_per_split_level on disjoint nodes and the leaves epsilon_leaf "
                "(sequential over levels); numeric bins come from the public schema; trees are "
                "complete (no data-dependent stopping); the smooth-sensitivity leaf mechanism "
                "of the paper is not used (not proven DP)"),
            "protects": "features and labels",
            "levels": self.levels,
            "epsilon_per_split_level": self.epsilon_split,
            "epsilon_leaf": self.epsilon_leaf,
            "windows": [{"algorithm": w.kind, "records": w.records, "labeled": w.labeled,
                         "trees": len(w.trees), "levels": w.extra.get("levels")}
                        for w in self._windows],
        }

    @classmethod
    def _unit_test_params(cls):
        yield {"schema": river_check_schema("binary"), "window_size": 100, "n_trees": 5,
               "seed": 1}
