"""The pieces of a window forest that hold no state: heap-layout trees with their class
counts (:class:`WindowTree`), packing them into one :class:`~dpstream.models.forest.Forest`
(:func:`pack_trees`), leaf counts as class distributions (:func:`leaf_proba`), and the exact
split of a budget in a ledger's decimals (:func:`split_exact`).
:mod:`~dpstream.models.windows.window_forest` re-exports all four.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..forest import Forest

# the compiled heap walk (numba); with ``_wk`` set to None (a test) Forest.apply gives the
# same nodes
from . import window_kernels as _wk

__all__ = ["WindowTree", "leaf_proba", "pack_trees", "split_exact"]


def split_exact(total: float, share: float) -> tuple[float, float]:
    """``(rest, part)``: ``part`` about ``share * total`` and ``rest + part <= total`` exactly
    in the decimal values a :class:`~dpstream.accounting.BudgetLedger` adds.

    >>> split_exact(1.5, 0.05)
    (1.425, 0.075)
    >>> split_exact(1.0, 0.2)
    (0.8, 0.2)
    """
    return _split_exact(float(total), float(share))


@functools.lru_cache(maxsize=256)
def _split_exact(total: float, share: float) -> tuple[float, float]:
    # a pure function of two floats, asked the same few pairs at every window: remembered
    whole = Fraction(repr(float(total)))
    rest = float(whole * (1 - Fraction(repr(float(share)))))
    part = float(whole - Fraction(repr(rest)))
    while Fraction(repr(rest)) + Fraction(repr(part)) > whole:
        part = math.nextafter(part, 0.0)
    return rest, part


def leaf_proba(counts: np.ndarray) -> np.ndarray:
    """Noisy class counts (rows) as class distributions: negatives clipped to 0, rows
    normalised; an all-zero row stays zero (a leaf with no evidence does not vote).

    >>> leaf_proba(np.array([[3.0, 1.0], [-0.5, 2.0], [0.0, -1.0]])).tolist()
    [[0.75, 0.25], [0.0, 1.0], [0.0, 0.0]]
    """
    if (_wk is not None and type(counts) is np.ndarray and counts.ndim == 2
            and counts.dtype == np.float64 and 0 < counts.shape[1] <= 128):
        return _wk.leaf_proba_rows(counts)   # compiled: the same numbers
    c = np.maximum(counts, 0.0)
    total = c.sum(axis=1, keepdims=True)
    return np.divide(c, total, out=np.zeros_like(c), where=total > 0)


@dataclass
class WindowTree:
    """One tree of a window: heap-layout arrays and class counts per node (zero off leaves)."""

    feature: np.ndarray
    threshold: np.ndarray
    counts: np.ndarray          # (n_nodes, n_classes)
    depth: int

    @property
    def left(self) -> np.ndarray:
        n = self.feature.size
        internal = np.arange(n) < (n - 1) // 2
        return np.where(internal, 2 * np.arange(n) + 1, np.arange(n)).astype(np.int32)

    def leaves(self, X: np.ndarray) -> np.ndarray:
        """The node (heap index) each encoded row of ``X`` reaches."""
        if _wk is not None and self.feature.size == 2 ** (self.depth + 1) - 1:
            # a complete heap of its depth, walked compiled: the nodes Forest.apply gives
            return _wk.heap_leaves(np.ascontiguousarray(X, dtype=np.float64), self.feature,
                                   self.threshold, self.depth)
        forest = Forest(max_nodes=self.feature.size, max_depth=self.depth)
        forest.add_tree(feature=self.feature, threshold=self.threshold, left=self.left,
                        value=np.zeros(self.feature.size))
        return forest.apply(0, X)


def pack_trees(trees: list[WindowTree], n_classes: int,
               weights: list[float] | None = None) -> tuple[Forest, np.ndarray]:
    """Trees in one :class:`Forest`, plus each node's leaf class distribution
    (:func:`leaf_proba`, times the tree's weight) in a table indexed by global node:
    ``table[forest.nodes(X)].sum(1)`` scores a batch.

    The forest's arrays are written in one pass (a window forest repacks its kept trees each
    time a window closes): the arrays, tree depths and capacity that
    :meth:`Forest.add_tree <dpstream.models.forest.Forest.add_tree>` of each tree in turn
    would leave, and the table :func:`leaf_proba` of each tree's counts gives (row-wise).

    >>> a = WindowTree(np.array([1, 0, 0], np.int32), np.array([0.5, np.inf, np.inf]),
    ...                np.array([[0.0, 0.0], [3.0, 1.0], [-1.0, 2.0]]), 1)
    >>> forest, table = pack_trees([a, a], 2, [1.0, 0.5])
    >>> forest.left[:6].tolist(), table[3:].tolist()
    ([1, 1, 2, 4, 4, 5], [[0.0, 0.0], [0.375, 0.125], [0.0, 0.5]])
    """
    stride = max((tr.feature.size for tr in trees), default=1)
    forest = Forest(max_nodes=stride, max_depth=max((tr.depth for tr in trees), default=0))
    n = len(trees)
    table = np.zeros((max(1, n) * stride, n_classes))
    if n == 0:
        return forest, table
    cap = forest.feature.size // stride   # trees' room: Forest doubles it as add_tree would
    while cap < n:
        cap *= 2
    feature = np.zeros(cap * stride, dtype=np.int32)
    threshold = np.full(cap * stride, np.inf)
    left = np.zeros(cap * stride, dtype=np.int32)
    left[:n * stride] = np.arange(n * stride, dtype=np.int32)   # leaves and padding: loops
    depths = np.full(cap, -1, dtype=np.int64)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)[:n]
    for i, tr in enumerate(trees):
        base, size = i * stride, tr.feature.size
        feature[base:base + size] = tr.feature
        threshold[base:base + size] = tr.threshold
        internal = (size - 1) // 2   # WindowTree.left: heap children of the first half
        left[base:base + internal] = base + 2 * np.arange(internal, dtype=np.int32) + 1
        d = (internal + 1).bit_length() - 1   # complete_depth of that heap layout
        depths[i] = d if (1 << d) - 1 == internal else -1
        table[base:base + size] = tr.counts
    table = leaf_proba(table) * np.repeat(w, stride)[:, None]
    forest.feature, forest.threshold, forest.left = feature, threshold, left
    forest.value, forest.depths, forest.n_trees = np.zeros(cap * stride), depths, n
    return forest, table
