"""Split selection from noisy gradient histograms: S-GBDT's option beyond the paper.

With ``split_levels = L > 0`` the top ``L`` levels of a round's tree are chosen from noisy
histograms of the clipped gradients over public candidate cells (:func:`grow_tree`), a
Gaussian mechanism that shares the round's Poisson subsample and its individual RDP charge;
the levels below are drawn at random as in the paper. With the cell noise of
:func:`histogram_sigma` the round's per-record cost is exactly the paper's (Theorem 23), so
the calibration, the cost table and the individual filter are unchanged.

Design and privacy argument: docs/sgbdt_internals.md#split-selection-from-noisy-histograms.
"""

from __future__ import annotations

import functools
import math
import weakref
from typing import Any

import numpy as np
from numba import njit  # set to None by a test: the numpy path below, the kernels' oracle

from ...accounting import noise
from ..encoding import RecordEncoder
from ..forest import complete_tree_layout
from .random_splits import RandomTree, pick_weighted

__all__ = ["category_codes", "grow_tree", "histogram_sigma", "split_report"]


def category_codes(encoder: RecordEncoder, X: np.ndarray) -> np.ndarray:
    """Each row's value index per categorical feature (the feature's number of values when
    missing), as ``int16`` — the compact form the histograms read (the S-GBDT pool keeps it
    next to its encoded rows). The encoder writes 0 in the column of the record's value and 1
    in the others (a split ``x[col] <= 0.5`` sends that value left); a missing value is NaN
    in every column."""
    categorical = encoder.categorical_columns()
    if not categorical or X.shape[0] == 0:
        return np.empty((X.shape[0], len(categorical)), dtype=np.int16)
    cols, local, size, starts = _code_plan(tuple((c[0], len(c)) for c in categorical))
    # every feature at once: a column's index within its feature where it holds the value,
    # else the feature's size; the smallest per feature is the first value column (argmax)
    idx = np.where(X[:, cols] <= 0.5, local, size)
    return np.minimum.reduceat(idx, starts, axis=1).astype(np.int16)


@functools.lru_cache(maxsize=32)
def _code_plan(spans: tuple) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """For :func:`category_codes`: the categorical columns, each column's index within its
    feature, its feature's size, and where each feature starts among the columns."""
    cols = np.concatenate([np.arange(a, a + k) for a, k in spans])
    local = np.concatenate([np.arange(k) for _, k in spans])
    size = np.concatenate([np.full(k, k) for _, k in spans])
    starts = np.cumsum([0] + [k for _, k in spans[:-1]])
    return cols, local, size, starts


def histogram_sigma(sigma_leaf: float, *, levels: int, n_features: int,
                    split_share: float) -> float:
    """The noise of every histogram cell: ``sigma sqrt(L F / (2 r_s))``.

    A record moves ``L F`` cells by its clipped ``g``, an L2 norm of ``|g| sqrt(L F)``; at this
    noise the histograms add ``2 r_s g^2 / sigma^2`` to its ``1 / z^2``, within the round's
    gradient share (docs/sgbdt_internals.md#split-selection-from-noisy-histograms).
    """
    if levels <= 0:
        return 0.0
    return sigma_leaf * math.sqrt(levels * n_features / (2.0 * split_share))


class _Cells:
    """The public cell layout of one node's histogram: numeric features first (``bins`` cells
    of the node's interval and one for missing), then categorical ones (one cell per value
    and one for missing)."""

    def __init__(self, encoder: RecordEncoder, bins: int):
        self.numeric = encoder.numeric_columns()
        self.categorical = encoder.categorical_columns()
        self.bins = bins
        n_num = len(self.numeric)
        cat_sizes = [len(c) + 1 for c in self.categorical]
        self.cat_offset = n_num * (bins + 1) + np.cumsum([0] + cat_sizes[:-1],
                                                         dtype=np.int64)[:len(cat_sizes)]
        self.offset = np.concatenate((np.arange(n_num) * (bins + 1), self.cat_offset)).astype(
            np.int64)
        self.size = n_num * (bins + 1) + int(sum(cat_sizes))
        self.num_cols = np.array([c for c, _, _ in self.numeric], dtype=np.int64)
        self.cat_start = np.array([c[0] for c in self.categorical], dtype=np.int64)
        self.cat_size = np.array([len(c) for c in self.categorical], dtype=np.int64)
        # (the same as Python lists, and every categorical column: _random_rest's set-up)
        self.cat_sizes = self.cat_size.tolist()
        self.cat_firsts = self.cat_start.tolist()
        self.cat_columns = np.array([c for cols in self.categorical for c in cols],
                                    dtype=np.int64)

    def numeric_cells(self, X: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """The numeric cell of each row within its node's interval ``[lo, hi]`` (per row)."""
        if not self.numeric:
            return np.empty((X.shape[0], 0), dtype=np.int64)
        x = X[:, [c for c, _, _ in self.numeric]]
        width = hi - lo
        with np.errstate(invalid="ignore", divide="ignore"):
            pos = np.floor((x - lo) / np.where(width > 0, width, 1.0) * self.bins)
        cell = np.clip(np.nan_to_num(pos, nan=0.0), 0, self.bins - 1).astype(np.int64)
        cell[~(width > 0) & ~np.isnan(x)] = 0   # an empty interval: one cell (never split)
        cell[np.isnan(x)] = self.bins          # missing: always right
        return cell


_CELLS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _cells_of(encoder: RecordEncoder, bins: int) -> _Cells:
    """The :class:`_Cells` of ``(encoder, bins)``, built once (a round draws a tree with the
    same public layout every time; the cache lets an encoder go when nothing else holds it)."""
    by_bins = _CELLS.setdefault(encoder, {})
    if bins not in by_bins:
        by_bins[bins] = _Cells(encoder, bins)
    return by_bins[bins]


def _level_histogram_numpy(cells: _Cells, X, codes, rows, pos, g, lo, hi,
                           width: int) -> np.ndarray:
    """Noiseless gradient sums per (node, cell) of one level (the reference path)."""
    Xs = X[rows]
    cell = np.concatenate((cells.numeric_cells(Xs, lo[pos], hi[pos]),
                           codes[rows].astype(np.int64)), axis=1)
    index = pos[:, None] * cells.size + cells.offset[None, :] + cell
    return np.bincount(index.ravel(), weights=np.repeat(g, cell.shape[1]),
                       minlength=width * cells.size)


@njit(cache=True, nogil=True)
def _level_histogram_kernel(X, codes, rows, pos, g, num_cols, lo, hi, bins, offset,
                            width, size):   # pragma: no cover - compiled
    # feature by feature: the pool is column-major, so each pass reads one column in
    # row order; categorical features read the compact codes, not their one-hot columns
    # (indices unsigned, as in models/forest_kernels.py: no wrap-around check on each load)
    hist = np.zeros(width * size)
    n_num, n_cat, m = num_cols.shape[0], codes.shape[1], rows.shape[0]
    u = np.uint64
    for j in range(n_num):
        c = u(num_cols[j])
        base = u(offset[j])
        for r in range(m):
            p = u(pos[r])
            x = X[u(rows[r]), c]
            if np.isnan(x):
                b = bins                      # missing: the extra cell (always right)
            else:
                lo_pj = lo[p, u(j)]
                w = hi[p, u(j)] - lo_pj
                b = 0
                if w > 0:
                    b = int(np.floor((x - lo_pj) / w * bins))
                    b = min(max(b, 0), bins - 1)
            hist[p * u(size) + base + u(b)] += g[u(r)]
    for k in range(n_cat):
        base = u(offset[n_num + k])
        for r in range(m):
            hist[u(pos[r]) * u(size) + base + u(codes[u(rows[r]), u(k)])] += g[u(r)]
    return hist


@njit(cache=True, nogil=True)
def _random_levels_kernel(u, start, n_internal, lo, hi, is_open, num_cols, cat_start,
                          cat_size, numeric_weight, allowed, feature,
                          threshold):   # pragma: no cover - compiled
    """The paper's random draw for internal nodes ``start ..`` (heap order), from the
    per-node state ``lo``/``hi`` (numeric intervals) and ``is_open`` (open categorical
    columns) that the caller set for the nodes of the first random level."""
    n_num, n_cat = num_cols.shape[0], cat_start.shape[0]
    weights = np.zeros(n_num + n_cat)
    for node in range(start, n_internal):
        a = 2 * (node - start)
        total = 0.0
        for j in range(n_num):
            w = numeric_weight if (allowed[j] and hi[node, j] > lo[node, j]) else 0.0
            weights[j] = w
            total += w
        for k in range(n_cat):
            n_open = 0
            for v in range(cat_size[k]):
                n_open += is_open[node, cat_start[k] + v]
            w = 1.0 if (allowed[n_num + k] and n_open > 1) else 0.0
            weights[n_num + k] = w
            total += w
        left = 2 * node + 1
        if left < n_internal:
            for child in (left, left + 1):
                lo[child] = lo[node]
                hi[child] = hi[node]
                is_open[child] = is_open[node]
        if total <= 0:
            feature[node], threshold[node] = 0, np.inf
            continue
        target, acc, j = u[a] * total, 0.0, -1
        for i in range(n_num + n_cat):
            if weights[i] > 0:
                j = i
                acc += weights[i]
                if target < acc:
                    break
        if j < n_num:
            t = lo[node, j] + u[a + 1] * (hi[node, j] - lo[node, j])
            feature[node], threshold[node] = num_cols[j], t
            if left < n_internal:
                hi[left, j], lo[left + 1, j] = t, t
        else:
            k = j - n_num
            n_open = 0
            for v in range(cat_size[k]):
                n_open += is_open[node, cat_start[k] + v]
            pick = min(int(u[a + 1] * n_open), n_open - 1)
            col = -1
            for v in range(cat_size[k]):
                if is_open[node, cat_start[k] + v]:
                    if pick == 0:
                        col = cat_start[k] + v
                        break
                    pick -= 1
            feature[node], threshold[node] = col, 0.5   # left iff value == this category
            if left < n_internal:
                for v in range(cat_size[k]):
                    is_open[left, cat_start[k] + v] = False
                is_open[left + 1, col] = False


@njit(cache=True, nogil=True)
def _numpy_sum(a, lo, n):   # pragma: no cover - compiled
    # ``a[lo:lo + n].sum()`` exactly as numpy adds a contiguous float64 run: pairwise,
    # eight accumulators per block of up to 128 (numpy's pairwise_sum), from 0.0
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[lo + i]
        return res
    if n > 128:
        n2 = n // 2
        n2 -= n2 % 8
        return _numpy_sum(a, lo, n2) + _numpy_sum(a, lo + n2, n - n2)
    r = a[lo:lo + 8].copy()
    i = 8
    while i < n - n % 8:
        for j in range(8):
            r[j] += a[lo + i + j]
        i += 8
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, nogil=True)
def _best_split_kernel(H, bins, num_ok, cat_off, cat_size,
                       cat_ok):   # pragma: no cover - compiled
    """:func:`_best_split` of a 1-d histogram whose categorical features are all open
    or skipped (``cat_ok``), the same steps in the same float operations: ``(kind, j,
    i)`` — kind 1: numeric feature ``j`` cut after cell ``i``; 2: categorical feature
    ``j``'s ``i``-th value; 0: none."""
    best = -np.inf
    kind, bj, bi = 0, -1, -1
    width = bins + 1
    for j in range(num_ok.size):
        if not num_ok[j]:
            continue
        base = j * width
        total = _numpy_sum(H, base, width)
        acc = 0.0
        k, top = -1, 0.0
        for b in range(bins - 1):   # np.cumsum, then -(left * (total - left)), argmax
            acc = H[base] if b == 0 else acc + H[base + b]
            v = -(acc * (total - acc))
            if k < 0 or v > top or (v != v and top == top):
                k, top = b, v
            if v != v:
                break
        if k >= 0 and top > best:
            best, kind, bj, bi = top, 1, j, k
    for j in range(cat_ok.size):
        if not cat_ok[j]:
            continue
        off, m = cat_off[j], cat_size[j]
        total = _numpy_sum(H, off, m + 1)
        k, top = -1, 0.0
        for i in range(m):
            h = H[off + i]
            v = -h * (total - h)
            if k < 0 or v > top or (v != v and top == top):
                k, top = i, v
            if v != v:
                break
        if top > best:
            best, kind, bj, bi = top, 2, j, k
    return kind, bj, bi


def _level_histogram(cells: _Cells, X, codes, rows, pos, g, lo, hi,
                     width: int) -> np.ndarray:
    """Noiseless gradient sums per (node, cell) of one level: compiled, reading the sampled
    rows of the pool in place (no copy of the sampled records)."""
    if njit is None:
        return _level_histogram_numpy(cells, X, codes, rows, pos, g, lo, hi, width)
    return _level_histogram_kernel(X, codes, rows, pos, np.asarray(g, dtype=np.float64),
                                   cells.num_cols, lo, hi, cells.bins, cells.offset, width,
                                   cells.size)


def _best_split(H: np.ndarray, cells: _Cells, iv: list, cats: list, allowed: np.ndarray):
    """The best-scoring candidate of one node's noisy histogram ``H``: ``(column, threshold,
    kind, index, cut)`` or ``None`` when no feature can split."""
    B = cells.bins
    n_num = len(cells.numeric)
    if njit is not None and H.ndim == 1:   # compiled, when every category is open or skipped
        cat_ok = [bool(allowed[n_num + k]) and c is not None and len(c) >= 2
                  for k, c in enumerate(cats)]
        if all(len(c) == len(cols) for c, cols, ok in zip(cats, cells.categorical, cat_ok,
                                                              strict=True) if ok):
            num_ok = np.array([bool(allowed[j]) and not hi <= lo
                               for j, (lo, hi) in enumerate(iv)], dtype=np.bool_)
            kind, j, i = _best_split_kernel(np.ascontiguousarray(H, dtype=np.float64), B,
                                            num_ok, cells.cat_offset, cells.cat_size,
                                            np.array(cat_ok, dtype=np.bool_))
            if kind == 1:
                lo, hi = iv[j]
                return cells.numeric[j][0], lo + (i + 1) * (hi - lo) / B, "num", j, None
            if kind == 2:
                col = cats[j][i]
                return col, 0.5, "cat", j, col
            return None
    best, best_score = None, -math.inf
    if n_num:
        Hn = H[:n_num * (B + 1)].reshape(n_num, B + 1, -1)   # (features, cells, K)
        total = Hn.sum(axis=1, keepdims=True)
        left = np.cumsum(Hn[:, :B - 1], axis=1)
        score = -(left * (total - left)).sum(axis=2)
        ks = score.argmax(axis=1).tolist()   # (each feature's first best cut, as argmax)
        for j in range(n_num):
            lo, hi = iv[j]
            if not allowed[j] or hi <= lo:
                continue
            k = ks[j]
            if score[j, k] > best_score:
                best_score = float(score[j, k])
                best = (cells.numeric[j][0], lo + (k + 1) * (hi - lo) / B, "num", j, None)
    for k, cols in enumerate(cells.categorical):
        open_cols = cats[k]
        if not allowed[n_num + k] or open_cols is None or len(open_cols) < 2:
            continue
        off = int(cells.cat_offset[k])
        Hc = H[off:off + len(cols) + 1]
        total = Hc.sum(axis=0)
        # every value still open (always at the root): the same cells as a slice
        hv = (Hc[:len(cols)] if len(open_cols) == len(cols)
              else Hc[[c - cols[0] for c in open_cols]])
        score = -hv * (total - hv)
        if score.ndim == 2:   # K-vector sums: the inner product over the components
            score = score.sum(axis=1)
        i = int(np.argmax(score))
        if score[i] > best_score:
            best_score = float(score[i])
            best = (open_cols[i], 0.5, "cat", k, open_cols[i])
    return best


def grow_tree(encoder: RecordEncoder, *, depth: int, rng: np.random.Generator,
              X: np.ndarray | None = None, g: np.ndarray | None = None,
              rows: np.ndarray | None = None, codes: np.ndarray | None = None,
              levels: int = 0,
              bins: int = 32, sigma: float = 0.0, numeric_weight: float = 1.0,
              only_feature: int | None = None, memory: dict | None = None,
              decay: float = 0.0, step: float | None = None) -> RandomTree:
    """One complete tree of ``depth``: the top ``levels`` levels chosen from noisy gradient
    histograms of the rows ``X`` (gradients ``g``, cell noise ``sigma``; see
    docs/sgbdt_internals.md#split-selection-from-noisy-histograms), the rest drawn at random
    from the public domains as in the paper.

    ``X[rows]`` (all of ``X`` when ``rows`` is ``None``) are the round's Poisson-sampled
    records and ``g`` their clipped gradients; ``codes`` the :func:`category_codes` of ``X``
    (computed when ``None``); ``sigma`` must come from
    :func:`histogram_sigma` for the round's accounting to hold, and ``g`` must lie on the
    public lattice of ``step`` (the engine's gradients do: it charges their costs on them);
    ``step=None`` puts ``g`` on the lattice of ``sigma`` here, for direct calls outside a
    privacy budget. Each cell gets exact discrete Gaussian noise on that lattice
    (:func:`~dpstream.accounting.noise.gaussian_noise_on_lattice`). ``only_feature`` restricts
    every split to one feature (numeric ones first, then categorical, as in
    :func:`~dpstream.models.boosting.random_splits.feature_order`).

    Examples
    --------
    >>> import numpy as np
    >>> from dpstream.models.encoding import RecordEncoder
    >>> enc = RecordEncoder({"features": {"x": {"type": "numeric", "min": 0, "max": 10},
    ...                                   "c": {"type": "categorical", "values": ["a", "b"]}},
    ...                      "target": {"type": "numeric", "min": 0, "max": 1}})
    >>> rng = np.random.default_rng(0)
    >>> X = enc.encode_many([{"x": float(v), "c": "a"} for v in rng.uniform(0, 10, 400)])
    >>> x_col = enc.numeric_columns()[0][0]           # column 0 is the encoder's constant
    >>> g = np.where(X[:, x_col] <= 7.5, 0.5, -0.5)   # the gradient changes sign at x = 7.5
    >>> tree = grow_tree(enc, depth=2, rng=rng, X=X, g=g, levels=1, bins=8, sigma=1.0)
    >>> int(tree.feature[0]) == x_col, float(tree.threshold[0])
    (True, 7.5)
    >>> tree.leaves.tolist()
    [3, 4, 5, 6]
    """
    n_nodes, internal, leaves = complete_tree_layout(depth)
    feature = np.zeros(n_nodes, dtype=np.int32)
    threshold = np.full(n_nodes, np.inf)
    left = np.arange(n_nodes, dtype=np.int32)
    left[internal] = 2 * internal + 1
    cells = _cells_of(encoder, bins)
    n_num, n_feat = len(cells.numeric), len(cells.numeric) + len(cells.categorical)
    allowed = np.ones(n_feat, dtype=bool)
    if only_feature is not None:
        allowed[:] = False
        allowed[only_feature] = True
    if numeric_weight <= 0:
        allowed[:n_num] = False
    levels = min(levels, depth) if X is not None and g is not None else 0
    if levels and step is None and sigma > 0:
        step = noise.lattice_step(sigma, noise.GAUSS_BITS)
        g = noise.on_lattice(g, step)

    # state of the nodes of the current level: numeric intervals and open categorical columns
    ivs = [[(lo, hi) for _, lo, hi in cells.numeric]]
    catss = [[list(c) for c in cells.categorical]]
    if levels:
        rows = np.arange(X.shape[0]) if rows is None else np.asarray(rows, dtype=np.int64)
        pos = np.zeros(rows.size, dtype=np.int64)   # each sampled row's node in its level
        if codes is None:
            codes = category_codes(encoder, X)
    for level in range(depth):
        first = 2 ** level - 1
        width = 2 ** level
        if level < levels:
            prior = None
            if level == 0 and memory is not None:
                prior = memory.get("root")
                if prior is not None and prior.shape != (cells.size, *np.shape(g)[1:]):
                    prior = None
            chosen, hist = _select_level(cells, X, codes, rows, g, pos, ivs, catss, allowed,
                                         sigma, step, rng, prior, decay)
            if level == 0 and memory is not None:
                memory["root"] = hist
        elif njit is not None:   # the remaining levels at random, compiled
            _random_rest(cells, encoder.n_columns, ivs, catss, level, depth, rng,
                         numeric_weight, allowed, feature, threshold)
            break
        else:
            u = noise.uniforms(rng, 2 * width).tolist()
            chosen = [_random_split(cells, ivs[i], catss[i], allowed, numeric_weight,
                                    u[2 * i], u[2 * i + 1]) for i in range(width)]
        next_ivs, next_cats = [], []
        for i, split in enumerate(chosen):
            node = first + i
            l_iv, r_iv = list(ivs[i]), list(ivs[i])
            l_cat, r_cat = list(catss[i]), list(catss[i])
            if split is None:
                feature[node], threshold[node] = 0, np.inf   # nothing to split: all go left
            else:
                col, t, kind, j, cut = split
                feature[node], threshold[node] = col, t
                if kind == "num":
                    lo, hi = ivs[i][j]
                    l_iv[j], r_iv[j] = (lo, t), (t, hi)
                else:
                    l_cat[j] = None
                    r_cat[j] = [c for c in catss[i][j] if c != cut]
            next_ivs += [l_iv, r_iv]
            next_cats += [l_cat, r_cat]
        if level + 1 < levels:   # rows move to the next selected level
            node = first + pos
            go_left = X[rows, feature[node]] <= threshold[node]
            pos = 2 * pos + np.where(go_left, 0, 1)
        ivs, catss = next_ivs, next_cats
    return RandomTree(feature, threshold, left, leaves)


def _random_rest(cells: _Cells, n_columns: int, ivs: list, catss: list, level: int,
                 depth: int, rng, numeric_weight: float, allowed, feature, threshold) -> None:
    """Levels ``level ..`` of the tree at random (compiled), from the state the levels above
    left: the intervals ``ivs`` and open categories ``catss`` of the nodes of ``level``."""
    n_internal = 2 ** depth - 1
    start = 2 ** level - 1
    n_num = len(cells.numeric)
    lo = np.zeros((n_internal, n_num))
    hi = np.zeros((n_internal, n_num))
    is_open = np.zeros((n_internal, n_columns), dtype=np.bool_)
    every = cells.cat_columns
    for i, (iv, cats) in enumerate(zip(ivs, catss, strict=True)):
        if n_num:
            lo[start + i], hi[start + i] = zip(*iv, strict=True)
        # the open columns: all of them, less those of features the path narrowed (a
        # fancy assignment per feature cost more than the rest of the draw)
        row = is_open[start + i]
        row[every] = True
        for cols, size, first in zip(cats, cells.cat_sizes, cells.cat_firsts, strict=True):
            if cols is None:
                row[first:first + size] = False
            elif len(cols) != size:
                row[first:first + size] = False
                row[cols] = True
    u = noise.uniforms(rng, 2 * (n_internal - start))
    _random_levels_kernel(u, start, n_internal, lo, hi, is_open, cells.num_cols,
                          cells.cat_start, cells.cat_size, float(numeric_weight), allowed,
                          feature, threshold)


def _select_level(cells: _Cells, X, codes, rows, g, pos, ivs, catss, allowed, sigma, step, rng,
                  prior=None, decay=0.0) -> tuple[list, np.ndarray]:
    """Noisy histograms of every node of one level, and each node's best split."""
    width = len(ivs)
    lo = np.array([[a for a, _ in iv] for iv in ivs]).reshape(width, -1)
    hi = np.array([[b for _, b in iv] for iv in ivs]).reshape(width, -1)
    if g.ndim == 2:   # K-vector gradients (multi-class): one histogram per component
        hist = np.stack([_level_histogram(cells, X, codes, rows, pos, g[:, k], lo, hi, width)
                         for k in range(g.shape[1])], axis=1)
    else:
        hist = _level_histogram(cells, X, codes, rows, pos, g, lo, hi, width)
    # every cell of every node is noised, empty or not: what is released does not depend on
    # which cells the records fell in
    if sigma > 0:   # (sigma 0: noiseless, for tests of the selection itself)
        hist = noise.gaussian_noise_on_lattice(rng, noise.snap(hist, step), step, sigma)
    if prior is not None:
        hist = hist + decay * prior
    return [_best_split(hist[i * cells.size:(i + 1) * cells.size], cells, ivs[i], catss[i],
                        allowed) for i in range(width)], hist


def _random_split(cells: _Cells, iv: list, cats: list, allowed: np.ndarray,
                  numeric_weight: float, u_feature: float, u_split: float):
    """The paper's random split of one node (a feature with weight ``numeric_weight`` for a
    numeric one and 1 for a categorical one, then a uniform threshold or value)."""
    n_num = len(cells.numeric)
    weights = [numeric_weight if (allowed[j] and hi > lo) else 0.0
               for j, (lo, hi) in enumerate(iv)]
    weights += [1.0 if (allowed[n_num + k] and c is not None and len(c) > 1) else 0.0
                for k, c in enumerate(cats)]
    total = sum(weights)
    if total <= 0:
        return None
    j = pick_weighted(weights, total, u_feature)
    if j < n_num:
        lo, hi = iv[j]
        return cells.numeric[j][0], lo + u_split * (hi - lo), "num", j, None
    k = j - n_num
    cols = cats[k]
    col = cols[min(int(u_split * len(cols)), len(cols) - 1)]
    return col, 0.5, "cat", k, col


def split_report(engine: Any) -> dict:
    """Split selection's part of an S-GBDT ``privacy_report()``: what the histograms
    release, at what noise (for a full-depth round; shallower early rounds release fewer
    levels, less noisily)."""
    c = engine.config
    if c.split_levels <= 0:
        return {"enabled": False, "splits": "random from the public domains (the paper)"}
    levels = min(c.split_levels, c.depth)
    return {"enabled": True, "levels": levels, "bins": c.split_bins,
            "share": c.r_split, "decay": c.split_decay,
            "sigma_cell": histogram_sigma(engine.calibration.sigma_leaf, levels=levels,
                                          n_features=engine.n_features,
                                          split_share=c.r_split),
            "guarantee": "Gaussian gradient histograms of the round's Poisson sample, one "
                         "cell per feature per level for each record, paid from the leaf "
                         "sums' share: the round's per-record cost is the paper's z(|g|)"}
