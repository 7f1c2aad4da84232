"""The parts of :mod:`~dpstream.models.rdt` that hold no model state: the height rules
(:func:`rdt_height`, :func:`signal_height`), the exact budget split (:func:`split_epsilon`),
the leaves' Laplace release (:func:`release_counts`) and RDT#'s table of leaf centers
(:class:`CenterTable`, :func:`pick_centers`). :mod:`~dpstream.models.rdt` re-exports them.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from ..accounting import LaplaceMechanism

__all__ = ["CenterTable", "pick_centers", "rdt_height", "release_counts", "signal_height",
           "split_epsilon"]


def rdt_height(k: int, b: float, n: int) -> int:
    """``min(floor(k / 2), floor(log_b n) + 1)`` (Jagannathan et al. 2013, Section V, after [13]),
    at least 1.

    >>> rdt_height(14, 8.1, 20_000), rdt_height(14, 8.1, 5_000), rdt_height(4, 2.0, 10**6)
    (5, 5, 2)
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
    return LaplaceMechanism(epsilon=epsilon, sensitivity=1.0, rng=rng).release(counts)


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
    :class:`~dpstream.models.random_trees.ImplicitRandomTrees`) from the public routing rows
    ``P``: ``ceil(n_cells |D| / N)`` per leaf, drawn at random among its public records.
    Returns the table (counts zero) and the leaf key and row of every (public row, tree) pair,
    tree-major."""
    N = P.shape[0]
    keys = router.leaf_keys(router.view(P), ids, depth=depth).T.ravel()   # tree-major
    rows = np.tile(np.arange(N), ids.size)
    order = np.lexsort((rng.random(keys.size), keys))      # by leaf, random within
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
