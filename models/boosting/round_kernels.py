"""Compiled pool-wide steps of an S-GBDT round (numba), each the same arithmetic as the numpy
expression it replaces, in the same order, so every score and release is unchanged bit for bit.

The loops read the pool's nodes once and write in place, where the numpy forms build an index
array and a gathered array per step. Design: docs/sgbdt_internals.md#compiled-round-steps.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["add_leaf_values", "category_codes_into", "clip_gradients", "grid_map_finish",
           "grid_map_start", "leaf_counts_sums", "leaf_counts_sums_rows", "move_rows"]


@njit(cache=True, nogil=True)
def leaf_counts_sums(nodes, first, sampled, g, n_leaves):   # pragma: no cover - compiled
    """Per leaf of a complete tree (local leaves ``first .. first + n_leaves - 1``): the
    number of sampled records that reach it and the sum of their gradients, added in the
    pool's order — ``np.bincount`` of ``nodes[sampled] - first`` without and with weights
    ``g[sampled]``, bit for bit.

    Examples
    --------
    >>> import numpy as np
    >>> counts, sums = leaf_counts_sums(np.array([3, 4, 3, 5]), 3, np.array([True, True, False,
    ...                                 True]), np.array([0.5, 0.25, 8.0, -1.0]), 3)
    >>> counts, sums
    (array([1., 1., 1.]), array([ 0.5 ,  0.25, -1.  ]))
    """
    counts = np.zeros(n_leaves)
    sums = np.zeros(n_leaves)
    for i in range(nodes.size):
        if sampled[i]:
            leaf = nodes[i] - first
            counts[leaf] += 1.0
            sums[leaf] += g[i]
    return counts, sums


@njit(cache=True, nogil=True)
def leaf_counts_sums_rows(nodes, first, rows, g, n_leaves):   # pragma: no cover - compiled
    """:func:`leaf_counts_sums` of the sampled records given by their positions ``rows``
    (ascending, as ``np.flatnonzero(sampled)``): the same sums, bit for bit, without reading
    the whole pool's mask.

    Examples
    --------
    >>> import numpy as np
    >>> [a.tolist() for a in leaf_counts_sums_rows(np.array([3, 4, 3, 5]), 3,
    ...                                            np.array([0, 1, 3]),
    ...                                            np.array([0.5, 0.25, 8.0, -1.0]), 3)]
    [[1.0, 1.0, 1.0], [0.5, 0.25, -1.0]]
    """
    counts = np.zeros(n_leaves)
    sums = np.zeros(n_leaves)
    for r in range(rows.size):
        i = rows[r]
        leaf = nodes[i] - first
        counts[leaf] += 1.0
        sums[leaf] += g[i]
    return counts, sums


@njit(cache=True, nogil=True)
def move_rows(X, holes, movers):   # pragma: no cover - compiled
    """``X[holes] = X[movers]`` in place for a 2-d array, column by column (a column-major
    pool: numpy's fancy assignment walks it row by row across every column, about ten times
    slower for the 250 rows an S-GBDT round evicts). ``holes`` and ``movers`` must not
    overlap.

    Examples
    --------
    >>> import numpy as np
    >>> pool = np.asfortranarray(np.arange(12.0).reshape(4, 3))
    >>> move_rows(pool, np.array([0, 1]), np.array([3, 2]))   # rows 3 and 2 fill holes 0 and 1
    >>> pool[:2].tolist()
    [[9.0, 10.0, 11.0], [6.0, 7.0, 8.0]]
    """
    for j in range(X.shape[1]):
        for i in range(holes.size):
            X[holes[i], j] = X[movers[i], j]


@njit(cache=True, nogil=True)
def clip_gradients(g, y, grad_clip, step=0.0):   # pragma: no cover - compiled
    """The start of a round over the pool, the numpy steps it replaces fused, bit for bit:
    ``g -= y`` in place (``g`` holds the scores, or their sigmoid) and ``np.clip(g, -g*,
    g*)``; with ``step`` (a power of two, and ``grad_clip`` a multiple of it) each gradient
    is then rounded to the nearest multiple of ``step``, as
    :func:`~dpstream.accounting.noise.on_lattice`. Returns whether a gradient is NaN (the
    numpy steps raise; ``g`` is then partly written).

    The costs, the filter's charge and the subsample that follow stay the accountant's
    (``RoundCostTable.cost``, ``IndividualRenyiFilter.step_sample``).

    Examples
    --------
    >>> import numpy as np
    >>> g, y = np.array([0.9, 0.2, 0.5]), np.array([0.0, 1.0, 1.0])
    >>> clip_gradients(g, y, 0.6), g.tolist()
    (False, [0.6, -0.6, -0.5])
    """
    for k in range(g.size):
        v = g[k] - y[k]
        if v != v:
            return True
        if v < -grad_clip:
            v = -grad_clip
        if v > grad_clip:
            v = grad_clip
        if step > 0.0:
            v = np.rint(v / step) * step
        g[k] = v
    return False


@njit(cache=True, nogil=True)
def add_leaf_values(score, column, values, nodes):   # pragma: no cover - compiled
    """``score += values[nodes]`` in place — and the same values to ``column`` (a block
    sum's slot) when it is not empty: ``Forest.add_tree_values`` of both, bit for bit."""
    both = column.size > 0
    for i in range(score.size):
        v = 1.0 * values[nodes[i]]
        score[i] += v
        if both:
            column[i] += v


@njit(cache=True, nogil=True)
def category_codes_into(X, starts, sizes, out):   # pragma: no cover - compiled
    """``hist_splits.category_codes`` of the rows ``X`` written to ``out``: per categorical
    feature (first column ``starts[k]``, ``sizes[k]`` values) the index of its first column
    ``<= 0.5`` (the record's value), else ``sizes[k]`` (missing)."""
    for r in range(X.shape[0]):
        for k in range(starts.size):
            code = sizes[k]
            for j in range(sizes[k]):
                if X[r, starts[k] + j] <= 0.5:
                    code = j
                    break
            out[r, k] = code


@njit(cache=True, nogil=True)
def grid_map_start(V, lo, span):   # pragma: no cover - compiled
    """``FeatureGrid.map_columns`` up to its ``np.interp``, the same float operations:
    ``clip((V - lo) / (span or 1), 0, 1) + 2k`` for column ``k`` (NaN stays NaN)."""
    out = np.empty(V.shape)
    for i in range(V.shape[0]):
        for k in range(V.shape[1]):
            s = span[k] if span[k] > 0 else 1.0
            u = (V[i, k] - lo[k]) / s
            if u == u:   # np.clip's steps (NaN passes)
                u = u if u > 0.0 else 0.0
                u = u if u < 1.0 else 1.0
            out[i, k] = u + 2.0 * k
    return out


@njit(cache=True, nogil=True)
def grid_map_finish(V, lo, span, r):   # pragma: no cover - compiled
    """``FeatureGrid.map_columns`` after its ``np.interp`` (``r``), in place on ``r``: less
    ``2k``, ``lo + span * mapped``, NaN where ``V`` is, ``V`` where the span is empty."""
    for i in range(V.shape[0]):
        for k in range(V.shape[1]):
            v = V[i, k]
            if not span[k] > 0:
                r[i, k] = v
            elif v != v:
                r[i, k] = np.nan
            else:
                r[i, k] = lo[k] + span[k] * (r[i, k] - 2.0 * k)
    return r
