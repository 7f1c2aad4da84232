"""The pieces of a window forest that hold no state: heap-layout trees with their class
counts (:class:`WindowTree`), packing them into one :class:`~dpstream.models.forest.Forest`
(:func:`pack_trees`), leaf counts as class distributions (:func:`leaf_proba`), and the exact
split of a budget in a ledger's decimals (:func:`split_exact`).
:mod:`~dpstream.models.windows.window_forest` re-exports all four.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..forest import Forest

__all__ = ["WindowTree", "leaf_proba", "pack_trees", "split_exact"]


def split_exact(total: float, share: float) -> tuple[float, float]:
    """``(rest, part)``: ``part`` about ``share * total`` and ``rest + part <= total`` exactly
    in the decimal values a :class:`~dpstream.accounting.BudgetLedger` adds.

    >>> split_exact(1.5, 0.05)
    (1.425, 0.075)
    >>> split_exact(1.0, 0.2)
    (0.8, 0.2)
    """
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
        forest = Forest(max_nodes=self.feature.size, max_depth=self.depth)
        forest.add_tree(feature=self.feature, threshold=self.threshold, left=self.left,
                        value=np.zeros(self.feature.size))
        return forest.apply(0, X)


def pack_trees(trees: list[WindowTree], n_classes: int,
               weights: list[float] | None = None) -> tuple[Forest, np.ndarray]:
    """Trees in one :class:`Forest`, plus each node's leaf class distribution
    (:func:`leaf_proba`, times the tree's weight) in a table indexed by global node:
    ``table[forest.nodes(X)].sum(1)`` scores a batch."""
    stride = max((tr.feature.size for tr in trees), default=1)
    forest = Forest(max_nodes=stride, max_depth=max((tr.depth for tr in trees), default=0))
    table = np.zeros((max(1, len(trees)) * stride, n_classes))
    for i, tr in enumerate(trees):
        forest.add_tree(feature=tr.feature, threshold=tr.threshold, left=tr.left,
                        value=np.zeros(tr.feature.size))
        table[i * stride:i * stride + tr.feature.size] = leaf_proba(tr.counts) * (
            1.0 if weights is None else weights[i])
    return forest, table
