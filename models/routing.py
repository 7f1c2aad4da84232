"""Compiled routing over the shared array forest (numba), used by :class:`~.forest.Forest`.

A record goes left at node ``g`` iff ``x[feature[g]] <= threshold[g]``; a missing value (NaN)
fails every comparison and goes right; a leaf is its own left child and routes through the
constant column 0 with threshold ``+inf``, so it stays put (the loop stops there early). These
kernels walk each (row, tree) pair in machine code: one record through a thousand trees costs
microseconds, where the numpy version pays a dozen array calls per level.

When numba cannot be imported the forest falls back to its numpy routing (same results).

Examples
--------
>>> import numpy as np
>>> feature = np.array([1, 0, 0], dtype=np.int32)
>>> threshold = np.array([0.5, np.inf, np.inf])
>>> left = np.array([1, 1, 2], dtype=np.int32)
>>> value = np.array([0.0, -1.0, 2.0])
>>> X = np.array([[0.0, 0.2], [0.0, 0.9], [0.0, np.nan]])
>>> roots = np.array([0], dtype=np.int64)
>>> route_block(X, roots, feature, threshold, left, 1)[:, 0].tolist()
[1, 2, 2]
>>> sum_block(X, roots, feature, threshold, left, value, 1).tolist()
[-1.0, 2.0, 2.0]
>>> sum_one(X[1], 1, 3, feature, threshold, left, value, 1)
2.0
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["route_block", "sum_block", "sum_one"]


@njit(cache=True, nogil=True, inline="always")
def _walk(x, g, feature, threshold, left, depth):   # pragma: no cover - compiled
    for _ in range(depth):
        nxt = left[g]
        if nxt == g:        # a leaf (or padding): it stays put
            return g
        if x[feature[g]] <= threshold[g]:
            g = nxt
        else:               # larger, or missing (NaN fails the comparison)
            g = nxt + 1
    return g


@njit(cache=True, nogil=True)
def route_block(X, roots, feature, threshold, left, depth):   # pragma: no cover - compiled
    """The global node each row of ``X`` reaches from each root: shape ``(rows, roots)``."""
    m, k = X.shape[0], roots.shape[0]
    out = np.empty((m, k), dtype=np.int64)
    for i in range(m):
        x = X[i]
        for j in range(k):
            out[i, j] = _walk(x, roots[j], feature, threshold, left, depth)
    return out


@njit(cache=True, nogil=True)
def sum_block(X, roots, feature, threshold, left, value, depth):   # pragma: no cover
    """Per row of ``X``: the sum over roots of the value of the node it reaches."""
    m, k = X.shape[0], roots.shape[0]
    out = np.zeros(m)
    for i in range(m):
        x = X[i]
        s = 0.0
        for j in range(k):
            s += value[_walk(x, roots[j], feature, threshold, left, depth)]
        out[i] = s
    return out


@njit(cache=True, nogil=True)
def sum_one(row, n_trees, stride, feature, threshold, left, value, depth):   # pragma: no cover
    """The sum over the first ``n_trees`` trees (roots ``0, stride, 2 stride, ...``) of the
    value one encoded row reaches."""
    s = 0.0
    for t in range(n_trees):
        s += value[_walk(row, t * stride, feature, threshold, left, depth)]
    return s
