"""Compiled draw of a random complete tree (numba), used by
:func:`~.random_splits.random_complete_tree`: :func:`draw_splits` and :func:`py_sum`.

The kernel replays the pure-Python draw (``random_splits._draw_python``, the tests'
reference) step for step on the same pre-drawn uniforms, so the same generator state gives
the same tree. Design: docs/sgbdt_internals.md#compiled-tree-draws.
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit

#: Python's ``sum`` of floats adds Neumaier's compensation from 3.12 on.
PY_SUM_COMPENSATED = sys.version_info >= (3, 12)


@njit(cache=True, nogil=True)
def py_sum(values, n, compensated):   # pragma: no cover - compiled
    """``sum(values[:n])`` of floats exactly as the running Python computes it.

    >>> py_sum(np.array([0.1, 0.2, 0.3]), 3, PY_SUM_COMPENSATED) == sum([0.1, 0.2, 0.3])
    True
    """
    total = 0.0
    c = 0.0
    for i in range(n):
        x = values[i]
        t = total + x
        if compensated:
            if abs(total) >= abs(x):
                c += (total - t) + x
            else:
                c += (x - t) + total
        total = t
    if compensated and c != 0.0 and np.isfinite(c):
        total += c
    return total


@njit(cache=True, nogil=True)
def draw_splits(uniforms, n_internal, num_col, num_lo, num_hi, cat_start, cat_k,
                numeric_weight, only_feature, compensated, feature,
                threshold):   # pragma: no cover - compiled
    """Fill ``feature`` / ``threshold`` of the internal nodes ``0 .. n_internal - 1``.

    ``num_*`` describe the numeric features (column, public min, max), ``cat_*`` the categorical
    ones (first column, number of values); ``only_feature < 0`` means no restriction.
    Per node the kernel keeps the narrowed numeric intervals and, per categorical feature,
    which of its columns are still open (in schema order) or whether the path has fixed the
    value; a threshold is ``lo + u * (hi - lo)``, two uniforms per node (feature, split).

    Examples
    --------
    >>> import numpy as np
    >>> feature, threshold = np.zeros(3, dtype=np.int32), np.full(3, np.inf)
    >>> draw_splits(np.array([0.9, 0.5]), 1, np.array([1], dtype=np.int64), np.array([0.0]),
    ...             np.array([10.0]), np.array([2], dtype=np.int64),
    ...             np.array([2], dtype=np.int64), 1.0, -1, False, feature, threshold)
    >>> feature.tolist(), threshold.tolist()    # u = 0.9 picks the categorical feature, value 1
    ([3, 0, 0], [0.5, inf, inf])
    """
    n_num, n_cat = num_col.shape[0], cat_start.shape[0]
    n_feat = n_num + n_cat
    off = np.zeros(n_cat + 1, dtype=np.int64)
    for k in range(n_cat):
        off[k + 1] = off[k] + cat_k[k]
    lo = np.empty((n_internal, n_num))
    hi = np.empty((n_internal, n_num))
    is_open = np.empty((n_internal, off[n_cat]), dtype=np.bool_)
    n_open = np.empty((n_internal, n_cat), dtype=np.int64)
    fixed = np.empty((n_internal, n_cat), dtype=np.bool_)
    if n_internal > 0:
        lo[0, :] = num_lo
        hi[0, :] = num_hi
        is_open[0, :] = True
        n_open[0, :] = cat_k
        fixed[0, :] = False
    weights = np.empty(n_feat)
    for node in range(n_internal):
        for i in range(n_num):
            weights[i] = numeric_weight if hi[node, i] > lo[node, i] else 0.0
        for k in range(n_cat):
            weights[n_num + k] = 1.0 if (not fixed[node, k] and n_open[node, k] > 1) else 0.0
        if only_feature >= 0:
            for i in range(n_feat):
                if i != only_feature:
                    weights[i] = 0.0
        total = py_sum(weights, n_feat, compensated)
        # the children start from this node's state (the split narrows it below)
        for child in (2 * node + 1, 2 * node + 2):
            if child < n_internal:
                lo[child, :] = lo[node, :]
                hi[child, :] = hi[node, :]
                is_open[child, :] = is_open[node, :]
                n_open[child, :] = n_open[node, :]
                fixed[child, :] = fixed[node, :]
        u_feature, u_split = uniforms[2 * node], uniforms[2 * node + 1]
        if total <= 0:   # nothing left to split on: everything goes left
            feature[node], threshold[node] = 0, np.inf
            continue
        target, acc, j = u_feature * total, 0.0, -1
        for i in range(n_feat):
            w = weights[i]
            if w > 0:
                j = i
                acc += w
                if target < acc:
                    break
        left, right = 2 * node + 1, 2 * node + 2
        if j < n_num:
            a, b = lo[node, j], hi[node, j]
            t = a + u_split * (b - a)
            feature[node], threshold[node] = num_col[j], t
            if left < n_internal:
                hi[left, j] = t
            if right < n_internal:
                lo[right, j] = t
        else:
            k = j - n_num
            cnt = n_open[node, k]
            pick = min(int(u_split * cnt), cnt - 1)
            pos = -1
            for p in range(cat_k[k]):   # the pick-th column still open, in schema order
                if is_open[node, off[k] + p]:
                    pick -= 1
                    if pick < 0:
                        pos = p
                        break
            feature[node], threshold[node] = cat_start[k] + pos, 0.5
            if left < n_internal:
                fixed[left, k] = True
            if right < n_internal:
                is_open[right, off[k] + pos] = False
                n_open[right, k] = cnt - 1
