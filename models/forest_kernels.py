"""Compiled routing over the shared array forest (numba), used by :class:`~.forest.Forest`,
and the in-place score update of a tree added to or retired from it (:func:`add_node_values`).

A record goes left at node ``g`` iff ``x[feature[g]] <= threshold[g]``; NaN (missing) goes
right; a leaf stays put. The kernels walk each (row, tree) pair in machine code
(:func:`route_block`, :func:`route_complete`, :func:`sum_block`, :func:`sum_one` and their
per-slot ``_parts`` variants), complete heap-layout trees without reading ``left``, and reach
the same leaves as the forest's numpy routing, which stays as the reference the tests hold
them to: every sum is bit-identical.

Why they are fast, with timings: ``docs/encoding.md#compiled-routing``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["add_node_values", "route_block", "route_complete", "sum_block", "sum_block_parts",
           "sum_one", "sum_one_parts"]


#: trees walked side by side: independent walks overlap in the CPU instead of each waiting on
#: its own chain of loads and its own mispredicted comparisons. 128 rather than 32 (until
#: 2026-11-28): 222 Adult rows through S-GBDT's 1,000 depth-6 trees 7.57 -> 6.11 us a row with
#: block sums, one row 10.85 -> 8.94 us (best of 15, 2-core machine); no slower at 40 or 100
#: trees or on the general walk. The sums are added in root order either way: same bits.
_LANES = 128
#: rows walked side by side through the same trees (routing many roots)
_ROW_LANES = 64
#: unsigned index type of the walks (no negative wrap-around check on each load)
_U = np.uint64
_ONE = np.uint64(1)
_TWO = np.uint64(2)


@njit(cache=True, nogil=True, inline="always")
def _step(x, g, feature, threshold, left):   # pragma: no cover - compiled
    # one level, branch-free: a leaf (its own left child) stays put; else left iff
    # x <= threshold, right when larger or missing (NaN fails the comparison)
    u = _U(g)
    nxt = left[u]   # (compared with the signed g: mixing signed and unsigned goes via float)
    return nxt + (not (x[_U(feature[u])] <= threshold[u])) * (nxt != g)


@njit(cache=True, nogil=True, inline="always")
def _route_rows(X, i0, i1, r, j, out, feature, threshold, left, depth):   # pragma: no cover
    # rows i0..i1 from root r into column j of out, all rows one level at a time
    for i in range(i0, i1):
        out[i, j] = r
    for _ in range(depth):
        for i in range(i0, i1):
            g = out[i, j]
            u = _U(g)
            nxt = left[u]
            out[i, j] = nxt + (not (X[_U(i), _U(feature[u])] <= threshold[u])) * (nxt != g)


@njit(cache=True, nogil=True)
def route_block(X, roots, feature, threshold, left, depth):   # pragma: no cover - compiled
    """The global node each row of ``X`` reaches from each root: shape ``(rows, roots)``.

    Examples
    --------
    >>> import numpy as np
    >>> feature = np.array([1, 0, 0], dtype=np.int32)
    >>> threshold = np.array([0.5, np.inf, np.inf])
    >>> left = np.array([1, 1, 2], dtype=np.int32)
    >>> X = np.array([[0.0, 0.2], [0.0, 0.9], [0.0, np.nan]])
    >>> roots = np.array([0], dtype=np.int64)
    >>> route_block(X, roots, feature, threshold, left, 1)[:, 0].tolist()
    [1, 2, 2]
    >>> route_complete(X, 0, feature, threshold, 1).tolist()
    [1, 2, 2]
    """
    m, k = X.shape[0], roots.shape[0]
    out = np.empty((m, k), dtype=np.int64)
    if k == 1:   # one tree (a round's pool): a column-major pool is read column by column
        _route_rows(X, 0, m, roots[0], 0, out, feature, threshold, left, depth)
        return out
    for i0 in range(0, m, _ROW_LANES):   # a block of rows stays in cache while every tree
        i1 = min(i0 + _ROW_LANES, m)       # routes it
        for j in range(k):
            _route_rows(X, i0, i1, roots[j], j, out, feature, threshold, left, depth)
    return out


@njit(cache=True, nogil=True)
def route_complete(X, root, feature, threshold, depth):   # pragma: no cover - compiled
    """The global node each row of ``X`` reaches in the complete heap-layout tree of
    ``depth`` at ``root`` (children ``2i + 1``, ``2i + 2`` of local node ``i``; ``left`` is
    not read), all rows one level at a time."""
    m = X.shape[0]
    out = np.empty(m, dtype=np.int64)
    for i in range(m):
        out[i] = root
    r = _U(root)
    for _ in range(depth):
        for i in range(m):
            g = _U(out[i])
            out[i] = np.int64(_TWO * g + _ONE - r
                              + _U(not (X[_U(i), _U(feature[g])] <= threshold[g])))
    return out


@njit(cache=True, nogil=True, inline="always")
def _group_depth(depths, t0, nb):   # pragma: no cover - compiled
    # the common depth of trees t0 .. t0 + nb - 1 if all are complete of one depth, else -1
    d = depths[t0]
    for b in range(nb):
        if depths[t0 + b] != d:
            return -1
    return d


@njit(cache=True, nogil=True, inline="always")
def _add_group(s, x, roots, t0, nb, d, feature, threshold, left, value, depth,
               g):   # pragma: no cover - compiled
    # s plus, in root order, the value x reaches in trees t0 .. t0 + nb - 1, walked side by
    # side (d >= 0: complete trees of depth d, implicit children, d steps)
    for b in range(nb):
        g[b] = roots[t0 + b]
    if d >= 0:
        for _ in range(d):
            for b in range(nb):
                gb = _U(g[b])
                g[b] = np.int64(_TWO * gb + _ONE - _U(roots[t0 + b])
                                + _U(not (x[_U(feature[gb])] <= threshold[gb])))
    else:
        for _ in range(depth):
            for b in range(nb):
                g[b] = _step(x, g[b], feature, threshold, left)
    for b in range(nb):
        s += value[_U(g[b])]
    return s


@njit(cache=True, nogil=True, inline="always")
def _sum_roots(x, roots, depths, feature, threshold, left, value, depth, g):   # pragma: no cover
    # the sum over roots in their order of the value x reaches, walking _LANES trees at a time
    k = roots.shape[0]
    s = 0.0
    for t0 in range(0, k, _LANES):
        nb = min(_LANES, k - t0)
        s = _add_group(s, x, roots, t0, nb, _group_depth(depths, t0, nb), feature, threshold,
                       left, value, depth, g)
    return s


@njit(cache=True, nogil=True)
def sum_block(X, roots, depths, feature, threshold, left, value, depth):   # pragma: no cover
    """Per row of ``X``: the sum over roots of the value of the node it reaches
    (``depths``: each root's tree depth if it is complete, else -1).

    Tiled: a block of ``_ROW_LANES`` rows walks one group of ``_LANES`` trees before the next
    group, so the group's nodes stay in the nearest cache for the whole block (a thousand
    trees do not fit there: row by row, every row fetched every tree's nodes again). Each
    row still adds the trees' values in root order, from 0.0: the same sums bit for bit.

    Examples
    --------
    >>> import numpy as np
    >>> feature = np.array([1, 0, 0], dtype=np.int32)
    >>> threshold = np.array([0.5, np.inf, np.inf])
    >>> left = np.array([1, 1, 2], dtype=np.int32)
    >>> value = np.array([0.0, -1.0, 2.0])
    >>> X = np.array([[0.0, 0.2], [0.0, 0.9], [0.0, np.nan]])
    >>> roots = np.array([0], dtype=np.int64)
    >>> depths = np.array([1])                     # one complete tree of depth 1
    >>> sum_block(X, roots, depths, feature, threshold, left, value, 1).tolist()
    [-1.0, 2.0, 2.0]
    >>> sum_one(X[1], 1, 3, depths, feature, threshold, left, value, 1)
    2.0
    >>> total, parts = sum_block_parts(X, roots, depths, feature, threshold, left, value, 1,
    ...                                np.array([1]), 2)   # the tree counts in slot 1 of 2
    >>> total.tolist(), parts.tolist()
    ([-1.0, 2.0, 2.0], [[0.0, -1.0], [0.0, 2.0], [0.0, 2.0]])
    >>> one, part = sum_one_parts(X[1], 1, 3, depths, feature, threshold, left, value, 1,
    ...                           np.array([1]), 2)
    >>> one, part.tolist()
    (2.0, [0.0, 2.0])
    """
    m, k = X.shape[0], roots.shape[0]
    out = np.zeros(m)
    g = np.empty(_LANES, dtype=np.int64)
    for i0 in range(0, m, _ROW_LANES):
        i1 = min(i0 + _ROW_LANES, m)
        for t0 in range(0, k, _LANES):
            nb = min(_LANES, k - t0)
            d = _group_depth(depths, t0, nb)
            for i in range(i0, i1):
                out[i] = _add_group(out[i], X[i], roots, t0, nb, d, feature, threshold, left,
                                    value, depth, g)
    return out


@njit(cache=True, nogil=True, inline="always")
def _add_group_parts(s, p, x, roots, slots, t0, nb, d, feature, threshold, left, value, depth,
                     g):   # pragma: no cover - compiled
    # _add_group, each value also added to its tree's slot of the row's parts ``p``. (The
    # walk is written out again: a shared inline walk measured 4% slower in sum_block and
    # 10% here, the same sums.)
    for b in range(nb):
        g[b] = roots[t0 + b]
    if d >= 0:
        for _ in range(d):
            for b in range(nb):
                gb = _U(g[b])
                g[b] = np.int64(_TWO * gb + _ONE - _U(roots[t0 + b])
                                + _U(not (x[_U(feature[gb])] <= threshold[gb])))
    else:
        for _ in range(depth):
            for b in range(nb):
                g[b] = _step(x, g[b], feature, threshold, left)
    # a slot's sum is carried in a register while consecutive trees share it (a block
    # holds many trees): the same additions in the same order as adding to p directly
    cur = _U(slots[t0])
    acc = p[cur]
    for b in range(nb):
        v = value[_U(g[b])]
        s += v
        slot = _U(slots[t0 + b])
        if slot != cur:
            p[cur] = acc
            cur = slot
            acc = p[cur]
        acc += v
    p[cur] = acc
    return s


@njit(cache=True, nogil=True)
def sum_block_parts(X, roots, depths, feature, threshold, left, value, depth, slots,
                    n_slots):   # pragma: no cover - compiled
    """:func:`sum_block`, and per row the sum of each *slot*'s trees (``slots[t]``: the slot
    of root ``t``, in ``0 .. n_slots - 1``): ``(totals, parts)``, parts of shape ``(rows,
    n_slots)``. The totals are :func:`sum_block`'s bit for bit; each slot sums its trees in
    root order from 0.0 (S-GBDT keeps a block of trees per slot and retires a block by
    subtracting its slot)."""
    m, k = X.shape[0], roots.shape[0]
    out = np.zeros(m)
    parts = np.zeros((m, n_slots))
    g = np.empty(_LANES, dtype=np.int64)
    for i0 in range(0, m, _ROW_LANES):
        i1 = min(i0 + _ROW_LANES, m)
        for t0 in range(0, k, _LANES):
            nb = min(_LANES, k - t0)
            d = _group_depth(depths, t0, nb)
            for i in range(i0, i1):
                out[i] = _add_group_parts(out[i], parts[i], X[i], roots, slots, t0, nb, d,
                                          feature, threshold, left, value, depth, g)
    return out, parts


@njit(cache=True, nogil=True)
def sum_one(row, n_trees, stride, depths, feature, threshold, left, value,
            depth):   # pragma: no cover - compiled
    """The sum over the first ``n_trees`` trees (roots ``0, stride, 2 stride, ...``) of the
    value one encoded row reaches."""
    roots = np.arange(n_trees) * stride
    g = np.empty(_LANES, dtype=np.int64)
    return _sum_roots(row, roots, depths, feature, threshold, left, value, depth, g)


@njit(cache=True, nogil=True)
def sum_one_parts(row, n_trees, stride, depths, feature, threshold, left, value, depth, slots,
                  n_slots):   # pragma: no cover - compiled
    """:func:`sum_one` (bit for bit) and the row's per-slot sums, as
    :func:`sum_block_parts` gives them: ``(total, parts)``."""
    roots = np.arange(n_trees) * stride
    g = np.empty(_LANES, dtype=np.int64)
    parts = np.zeros(n_slots)
    s = 0.0
    for t0 in range(0, n_trees, _LANES):
        nb = min(_LANES, n_trees - t0)
        s = _add_group_parts(s, parts, row, roots, slots, t0, nb, _group_depth(depths, t0, nb),
                             feature, threshold, left, value, depth, g)
    return s, parts


@njit(cache=True, nogil=True)
def add_node_values(score, value, nodes, sign):   # pragma: no cover - compiled
    """``score += sign * value[nodes]`` in place, ``sign`` being 1.0 or -1.0: a round's new
    tree (``+``) or the retired oldest tree (``-``), without the gathered temporary. (For
    ``sign = -1.0`` each step is ``score - v``, as ``score -= value[nodes]``: negating a
    float is exact.)

    Examples
    --------
    >>> import numpy as np
    >>> score = np.array([1.0, 2.0, 3.0])
    >>> add_node_values(score, np.array([0.5, -0.25, 0.125]), np.array([2, 0, 1]), 1.0)
    >>> score
    array([1.125, 2.5  , 2.75 ])
    """
    for i in range(score.size):
        score[i] += sign * value[nodes[i]]
