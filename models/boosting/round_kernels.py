"""Compiled pool-wide steps of an S-GBDT round (numba), each the same arithmetic as the numpy
expression it replaces, in the same order, so every score and release is unchanged bit for bit.

A round at a full pool touches each of up to 100,000 records several times; the numpy forms
build an index array and a gathered array per step (800 KB each) before the sum. These loops
read the pool's nodes once and write in place.

Examples
--------
>>> import numpy as np
>>> counts, sums = leaf_counts_sums(np.array([3, 4, 3, 5]), 3, np.array([True, True, False,
...                                 True]), np.array([0.5, 0.25, 8.0, -1.0]), 3)
>>> counts, sums
(array([1., 1., 1.]), array([ 0.5 ,  0.25, -1.  ]))
>>> pool = np.asfortranarray(np.arange(12.0).reshape(4, 3))
>>> move_rows(pool, np.array([0, 1]), np.array([3, 2]))   # rows 3 and 2 fill holes 0 and 1
>>> pool[:2].tolist()
[[9.0, 10.0, 11.0], [6.0, 7.0, 8.0]]
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["leaf_counts_sums", "move_rows"]


@njit(cache=True, nogil=True)
def leaf_counts_sums(nodes, first, sampled, g, n_leaves):   # pragma: no cover - compiled
    """Per leaf of a complete tree (local leaves ``first .. first + n_leaves - 1``): the
    number of sampled records that reach it and the sum of their gradients, added in the
    pool's order — ``np.bincount`` of ``nodes[sampled] - first`` without and with weights
    ``g[sampled]``, bit for bit."""
    counts = np.zeros(n_leaves)
    sums = np.zeros(n_leaves)
    for i in range(nodes.size):
        if sampled[i]:
            leaf = nodes[i] - first
            counts[leaf] += 1.0
            sums[leaf] += g[i]
    return counts, sums


@njit(cache=True, nogil=True)
def move_rows(X, holes, movers):   # pragma: no cover - compiled
    """``X[holes] = X[movers]`` in place for a 2-d array, column by column (a column-major
    pool: numpy's fancy assignment walks it row by row across every column, about ten times
    slower for the 250 rows an S-GBDT round evicts). ``holes`` and ``movers`` must not
    overlap."""
    for j in range(X.shape[1]):
        for i in range(holes.size):
            X[holes[i], j] = X[movers[i], j]
