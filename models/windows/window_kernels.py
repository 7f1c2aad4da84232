"""Compiled kernels of the window forests (numba): one record through every kept tree in
machine code.

The walks of the keyed random trees (:func:`implicit_keys`, :func:`implicit_votes`, RDT's
:func:`implicit_cells`), the greedy forest (:func:`greedy_votes`) and the median forest's packed
heap trees (:func:`packed_scores`), with the same arithmetic as the numpy references the tests
hold them to. They read released outputs and public structure only and draw no noise — except
:func:`grow_median`, the median forest's tree growth, which makes the same private draws in the
same order as its plain-Python reference, so the same trees bit for bit.

The design: ``docs/keyed_trees.md#compiled-kernels-of-the-window-forests``.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from ...accounting.median import categorical_distances_core, median_candidates_core
from ...accounting.noise import em_pick_dist, nb_choose, nb_uniform

__all__ = ["bin_codes", "greedy_votes", "grow_median", "heap_leaves", "implicit_cells",
           "implicit_keys", "implicit_votes", "implicit_votes_row", "leaf_proba_rows",
           "packed_scores", "routing_rows"]

# splitmix64 (as models/windows/random_trees.py): every constant a uint64 so numba keeps
# integer maths
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_BRANCH = np.uint64(0xD6E8FEB86659FD93)
_LOW32 = np.uint64(0xFFFFFFFF)
_ONE = np.uint64(1)
_S11, _S27, _S30, _S31, _S32 = (np.uint64(v) for v in (11, 27, 30, 31, 32))
_TWO_M32 = 2.0 ** -32
_TWO_M53 = 2.0 ** -53
# buckets (buckets.bucket_keys): the salt, and the level tag's shift
_BSALT = np.uint64(0x5851F42D4C957F2D)
_S40 = np.uint64(40)
_TAG0 = np.uint64(1) << _S40     # a random tree's leaves: level 0


@njit(cache=True, nogil=True, inline="always")
def _mix(z):   # pragma: no cover - compiled
    z = z + _GOLDEN
    z = (z ^ (z >> _S30)) * _M1
    z = (z ^ (z >> _S27)) * _M2
    return z ^ (z >> _S31)


@njit(cache=True, nogil=True, inline="always")
def _child(key, branch):   # pragma: no cover - compiled
    return _mix(key ^ ((np.uint64(branch) + _ONE) * _BRANCH))


@njit(cache=True, nogil=True, inline="always")
def _rank(key, draw, n):   # pragma: no cover - compiled
    # keyed_rank: a uniform rank in range(n) from the high 32 bits, a uniform [0, 1) from the low
    z = _mix(key ^ draw)
    return np.int64(((z >> _S32) * np.uint64(n)) >> _S32), np.float64(z & _LOW32) * _TWO_M32


@njit(cache=True, nogil=True, inline="always")
def _uniform(key, salt):   # pragma: no cover - compiled
    return np.float64(_mix(key ^ salt) >> _S11) * _TWO_M53


@njit(cache=True, nogil=True, inline="always")
def _label(key, salt, k):   # pragma: no cover - compiled
    # uniform_label: report-noisy-argmax's output on zero counts
    return min(np.int64(_uniform(key, salt) * k), k - 1)


@njit(cache=True, nogil=True, inline="always")
def _bucket(root, key, buckets, tag):   # pragma: no cover - compiled
    # buckets.bucket_keys of one key: its released node (buckets 0: the key itself)
    if buckets == 0:
        return key
    return _mix(root ^ (tag | (_mix(key ^ _BSALT) & (buckets - _ONE))))


@njit(cache=True, nogil=True)
def hash_slots(keys):   # pragma: no cover - compiled
    """An open-addressing index over ``keys`` (uint64, already uniformly mixed): a power-of-two
    array of at least twice as many slots holding each key's index, ``-1`` where empty; a key
    seen twice keeps its first index (as ``LeafTable.find``'s leftmost search does)."""
    size = 2
    while size < 2 * keys.shape[0]:
        size *= 2
    mask = np.uint64(size - 1)
    slots = np.full(size, -1, dtype=np.int64)
    for i in range(keys.shape[0]):
        h = np.int64(keys[i] & mask)
        while slots[h] >= 0:
            if keys[slots[h]] == keys[i]:
                break
            h = (h + 1) & (size - 1)
        if slots[h] < 0:
            slots[h] = i
    return slots


@njit(cache=True, nogil=True, inline="always")
def _probe(keys, slots, key):   # pragma: no cover - compiled
    # the index of key in keys through hash_slots' index, or -1
    size = slots.shape[0]
    h = np.int64(key & np.uint64(size - 1))
    while True:
        i = slots[h]
        if i < 0 or keys[i] == key:
            return i
        h = (h + 1) & (size - 1)


@njit(cache=True, nogil=True, inline="always")
def _nth_free(free, rank):   # pragma: no cover - compiled
    for c in range(free.shape[0]):
        if free[c]:
            if rank == 0:
                return c
            rank -= 1
    return free.shape[0] - 1


@njit(cache=True, nogil=True)
def _walk(v, key, depth, lo0, hi0, last, draw, lo, hi, free):   # pragma: no cover - compiled
    # ImplicitRandomTrees._walk for one routing row v from root key; lo/hi/free: scratch
    s, r = lo0.shape[0], last.shape[0]
    for j in range(s):
        lo[j] = lo0[j]
        hi[j] = hi0[j]
    for c in range(r):
        free[c] = True
    nfree = r
    for _ in range(depth):
        avail = s + nfree
        if avail == 0:            # nothing left to split: a leaf
            break
        pick, u = _rank(key, draw, avail)
        if pick < s:
            a, b = lo[pick], hi[pick]
            thr = a + u * (b - a)
            if v[1 + pick] <= thr:          # missing (NaN) fails: right
                hi[pick] = thr
                branch = 0
            else:
                lo[pick] = thr
                branch = 1
        else:
            c = _nth_free(free, pick - s)
            x = v[1 + s + c]
            branch = np.int64(x) if x <= last[c] else np.int64(last[c])   # missing: last
            free[c] = False
            nfree -= 1
        key = _child(key, branch)
    return key


@njit(cache=True, nogil=True)
def implicit_keys(V, roots, rows, depth, lo0, hi0, last, draw):   # pragma: no cover
    """Leaf key of each (root key ``roots[p]``, row ``V[rows[p]]``) pair after ``depth`` levels
    (:meth:`~dpstream.models.windows.random_trees.ImplicitRandomTrees.leaf_keys`)."""
    n = roots.shape[0]
    out = np.empty(n, dtype=np.uint64)
    lo, hi = np.empty(lo0.shape[0]), np.empty(lo0.shape[0])
    free = np.empty(last.shape[0], dtype=np.bool_)
    for p in range(n):
        out[p] = _walk(V[rows[p]], roots[p], depth, lo0, hi0, last, draw, lo, hi, free)
    return out


#: trees walked side by side for one record: their chains of dependent multiplies overlap
_LANES = 16


def nth_table() -> np.ndarray:
    """``table[mask, rank]``: the position of the ``rank``-th set bit of an 8-bit ``mask`` (the
    categorical attribute a keyed draw picks among those still free; 0 where none)."""
    table = np.zeros((256, 8), dtype=np.int64)
    for mask in range(256):
        bits = [q for q in range(8) if mask >> q & 1]
        table[mask, :len(bits)] = bits
    return table


@njit(cache=True, nogil=True, inline="always")
def _nth_bit(mask, rank, r):   # pragma: no cover - compiled
    # the rank-th set bit of mask among its low r bits, without a branch per bit
    c, count = 0, 0
    for q in range(r):
        bit = (mask >> q) & 1
        c += q * (bit & (count == rank))
        count += bit
    return c


@njit(cache=True, nogil=True)
def _walk_lanes(v, roots, t0, nb, depth, lo0, hi0, lastp, draw, nth, lo, hi, mask, nfree,
                key):   # pragma: no cover - compiled
    # _walk of one routing row through trees t0 .. t0 + nb, branch-free, lanes side by side;
    # leaves the leaf keys in key[:nb]. lastp: last codes plus a pad (r may be 0).
    s, r = lo0.shape[0], lastp.shape[0] - 1
    for b in range(nb):
        key[b] = roots[t0 + b]
        mask[b] = (np.int64(1) << r) - 1
        nfree[b] = r
        for j in range(s):
            lo[b, j] = lo0[j]
            hi[b, j] = hi0[j]
    for _ in range(depth):
        for b in range(nb):
            avail = s + nfree[b]
            k0 = key[b]
            z = _mix(k0 ^ draw)
            pick = np.int64(((z >> _S32) * np.uint64(avail)) >> _S32)
            u = np.float64(z & _LOW32) * _TWO_M32
            num = pick < s
            j = pick if num else 0
            a, e = lo[b, j], hi[b, j]
            thr = a + u * (e - a)
            right = not (v[1 + j if s else 0] <= thr)      # missing (NaN) fails: right
            lo[b, j] = thr if num and right else a
            hi[b, j] = thr if num and not right else e
            rank = 0 if num else pick - s
            m = mask[b]
            c = nth[m & 255, rank & 7] if r <= 8 else _nth_bit(m, rank, r)
            x, lc = v[1 + s + c if r else 0], lastp[c]
            code = np.int64(x if x <= lc else lc)           # missing: the last value
            cat = (not num) and avail > 0
            mask[b] = m & ~(np.int64(1) << c) if cat else m
            nfree[b] -= 1 if cat else 0
            nk = _child(k0, np.int64(right) if num else code)
            key[b] = nk if avail > 0 else k0


@njit(cache=True, nogil=True)
def implicit_votes(V, roots, depth, lo0, hi0, last, draw, nth, keys, slots, values,
                   out_salt, weights, buckets):   # pragma: no cover - compiled
    """Per row of ``V``, the sum over trees (root keys ``roots``) of the released row of the
    bucket of the leaf it reaches (``keys`` with their :func:`hash_slots`, ``values`` one row
    each; tree ``t`` has ``buckets[t]`` buckets, 0: looked up by leaf key), else a uniformly
    random one-hot label drawn from the leaf's key (the random decision forest's vote in a
    window from before buckets), each tree's times its ``weights`` entry."""
    m, k, s = V.shape[0], values.shape[1], lo0.shape[0]
    out = np.zeros((m, k))
    lo, hi = np.empty((_LANES, max(1, s))), np.empty((_LANES, max(1, s)))
    mask, nfree = np.empty(_LANES, np.int64), np.empty(_LANES, np.int64)
    key = np.empty(_LANES, np.uint64)
    lastp = np.append(last, 0.0)
    for i in range(m):
        v = V[i]
        for t0 in range(0, roots.shape[0], _LANES):
            nb = min(_LANES, roots.shape[0] - t0)
            _walk_lanes(v, roots, t0, nb, depth, lo0, hi0, lastp, draw, nth, lo, hi, mask,
                        nfree, key)
            for b in range(nb):
                idx = _probe(keys, slots, _bucket(roots[t0 + b], key[b], buckets[t0 + b],
                                                  _TAG0))
                wt = weights[t0 + b]
                if idx >= 0:
                    for c in range(k):
                        out[i, c] += wt * values[idx, c]
                else:
                    out[i, _label(key[b], out_salt, k)] += wt
    return out


@njit(cache=True, nogil=True)
def implicit_votes_row(x, num_cols, group_start, group_size, bounds, roots, cols, lo0, hi0,
                       last, weights, depth, draw, nth, keys, slots, values,
                       out_salt, buckets):   # pragma: no cover - compiled
    """One encoded (C-contiguous) row ``x``: its :func:`routing_rows` row, then per group
    ``g`` of trees :func:`implicit_votes` of that row's columns
    ``cols[bounds[g, 2]:bounds[g, 3]]`` through root keys ``roots`` and ``weights``
    (``[bounds[g, 0]:bounds[g, 1]]``), domains ``lo0`` / ``hi0`` (``[4:6]``) and ``last``
    codes (``[6:8]``) and ``buckets`` (as ``weights``); the groups' sums added in turn to a
    zero row: the same values as one such call per group, in one call."""
    k = values.shape[1]
    base = routing_rows(x.reshape((1, x.shape[0])), num_cols, group_start, group_size)[0]
    out = np.zeros(k)
    for g in range(bounds.shape[0]):
        t0, t1, c0, c1 = bounds[g, 0], bounds[g, 1], bounds[g, 2], bounds[g, 3]
        s0, s1, r0, r1 = bounds[g, 4], bounds[g, 5], bounds[g, 6], bounds[g, 7]
        v = np.empty((1, c1 - c0))
        for c in range(c1 - c0):
            v[0, c] = base[cols[c0 + c]]
        part = implicit_votes(v, roots[t0:t1], depth, lo0[s0:s1], hi0[s0:s1], last[r0:r1],
                              draw, nth, keys, slots, values, out_salt, weights[t0:t1],
                              buckets[t0:t1])
        for c in range(k):
            out[c] += part[0, c]
    return out


@njit(cache=True, nogil=True, inline="always")
def _pairwise(a, n):   # pragma: no cover - compiled
    # numpy's pairwise sum of a[:n] for n <= 128 (eight accumulators from 8 on)
    if n < 8:
        res = 0.0
        for i in range(n):
            res += a[i]
        return res
    r0, r1, r2, r3, r4, r5, r6, r7 = a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]
    i = 8
    while i < n - n % 8:
        r0 += a[i]
        r1 += a[i + 1]
        r2 += a[i + 2]
        r3 += a[i + 3]
        r4 += a[i + 4]
        r5 += a[i + 5]
        r6 += a[i + 6]
        r7 += a[i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[i]
        i += 1
    return res


@njit(cache=True, nogil=True)
def _nearest(q, key, ckeys, cpoint, cpoints, dscale, n_numeric, buf):   # pragma: no cover
    # CenterTable.nearest for one query row q (routing row without column 0): -1 if none
    lo, hi = 0, ckeys.shape[0]
    while lo < hi:
        mid = (lo + hi) >> 1
        if ckeys[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    best, best_d = -1, np.inf
    j = lo
    while j < ckeys.shape[0] and ckeys[j] == key:
        p = cpoints[cpoint[j]]
        for a in range(n_numeric):
            diff = q[a] - p[a]
            buf[a] = 1.0 if diff != diff else diff * diff * dscale[a]
        d = _pairwise(buf, n_numeric)
        miss = 0
        for a in range(n_numeric, q.shape[0]):
            miss += q[a] != p[a]
        d += miss
        if d < best_d:
            best, best_d = j, d
        j += 1
    return best


@njit(cache=True, nogil=True)
def implicit_cells(V, roots, depth, lo0, hi0, last, draw, nth, primary, scale, average,
                   ckeys, cpoint, cvalues, cpoints, dscale, n_numeric,
                   lkeys, lslots, lvalues, lap_salts, buckets,
                   weights=None):   # pragma: no cover - compiled
    """RDT: per row of ``V``, the sum over trees of the cell each reaches — the nearest center
    of its leaf (``ckeys`` / ``cpoint`` / ``cvalues`` / ``cpoints``, distances scaled by
    ``dscale``), else, for a ``primary`` tree, the released counts of the leaf's bucket
    (``lkeys`` with their :func:`hash_slots` ``lslots``, ``lvalues``; ``buckets[t]`` of tree
    ``t``) or — a window from before buckets — its key-derived ``Laplace(scale)`` counts
    (salts ``lap_salts``), else nothing; with ``average`` each cell's counts are clipped at 0
    and normalised first. Tree ``t``'s cell counts ``weights[t]`` (default 1)."""
    m, k, s = V.shape[0], lvalues.shape[1], lo0.shape[0]
    out = np.zeros((m, k))
    lo, hi = np.empty((_LANES, max(1, s))), np.empty((_LANES, max(1, s)))
    mask, nfree = np.empty(_LANES, np.int64), np.empty(_LANES, np.int64)
    key = np.empty(_LANES, np.uint64)
    lastp = np.append(last, 0.0)
    buf = np.empty(max(1, n_numeric))
    val = np.empty(k)
    for i in range(m):
        v = V[i]
        for t0 in range(0, roots.shape[0], _LANES):
            nb = min(_LANES, roots.shape[0] - t0)
            _walk_lanes(v, roots, t0, nb, depth, lo0, hi0, lastp, draw, nth, lo, hi, mask,
                        nfree, key)
            for b in range(nb):
                t = t0 + b
                near = _nearest(v[1:], key[b], ckeys, cpoint, cpoints, dscale, n_numeric,
                                buf) if ckeys.shape[0] else -1
                if near >= 0:
                    for c in range(k):
                        val[c] = cvalues[near, c]
                elif primary[t]:
                    idx = _probe(lkeys, lslots, _bucket(roots[t], key[b], buckets[t], _TAG0))
                    if idx >= 0:
                        for c in range(k):
                            val[c] = lvalues[idx, c]
                    else:   # laplace_of: the mechanism's output on zero counts, from the key
                        for c in range(k):
                            z = _mix(key[b] ^ lap_salts[c])
                            u = (np.float64(z >> _S11) + 0.5) * _TWO_M53 - 0.5
                            val[c] = -scale[t] * np.sign(u) * np.log1p(-2.0 * np.abs(u))
                else:
                    for c in range(k):
                        val[c] = 0.0
                if average:   # leaf_proba
                    for c in range(k):
                        val[c] = max(val[c], 0.0)
                    total = _pairwise(val, k)
                    for c in range(k):
                        val[c] = val[c] / total if total > 0 else 0.0
                wt = 1.0
                if weights is not None:
                    wt = weights[t]
                for c in range(k):
                    out[i, c] += wt * val[c]
    return out


@njit(cache=True, nogil=True)
def greedy_votes(C, roots, levels, nkeys, nslots, nattr, lkeys, lslots, lvalues, draw,
                 out_salt, weights, buckets):   # pragma: no cover - compiled
    """The greedy forest: per row of branch codes ``C``, the sum over trees of the released
    label of the leaf it reaches. A node splits on its released attribute (``nkeys`` with
    their :func:`hash_slots`, ``nattr``), or — reached by no training record — on a keyed
    uniform draw among the attributes left; a leaf no training record reached (``lkeys``,
    ``lslots``, ``lvalues``) votes a keyed uniform label. Tree ``t``'s vote counts
    ``weights[t]``; its nodes and leaves are looked up by their bucket of level ``l``
    (``buckets[t, l]`` of them, leaves at ``l = levels``; 0: by node key, a window from
    before buckets, whose tables hold reached nodes only)."""
    m, a_count, k = C.shape[0], C.shape[1], lvalues.shape[1]
    out = np.zeros((m, k))
    free = np.empty(a_count, dtype=np.bool_)
    for i in range(m):
        for t in range(roots.shape[0]):
            key = roots[t]
            for a in range(a_count):
                free[a] = True
            nfree = a_count
            for lev in range(levels):
                idx = _probe(nkeys, nslots, _bucket(roots[t], key, buckets[t, lev],
                                                    np.uint64(lev + 1) << _S40))
                if idx >= 0:
                    a = np.int64(nattr[idx])
                else:
                    rank, _u = _rank(key, draw, nfree)
                    a = _nth_free(free, rank)
                if free[a]:
                    free[a] = False
                    nfree -= 1
                key = _child(key, C[i, a])
            idx = _probe(lkeys, lslots, _bucket(roots[t], key, buckets[t, levels],
                                                np.uint64(levels + 1) << _S40))
            if idx >= 0:
                for c in range(k):
                    out[i, c] += weights[t] * lvalues[idx, c]
            else:
                out[i, _label(key, out_salt, k)] += weights[t]
    return out


@njit(cache=True, nogil=True)
def packed_scores(X, n_trees, stride, feature, threshold, left, depth,
                  table):   # pragma: no cover - compiled
    """Per encoded row, the sum over the packed heap trees (roots ``0, stride, ...``) of the
    ``table`` row of the node it reaches (go left iff ``x[feature] <= threshold``; missing goes
    right; a leaf is its own left child). Eight trees walk side by side (a leaf stays put), so
    that their chains of dependent loads overlap; their rows are added in tree order.

    Examples
    --------
    >>> X = np.array([[0.0, 0.2], [0.0, 0.9], [0.0, np.nan]])
    >>> feature = np.array([1, 0, 0], dtype=np.int32)
    >>> threshold = np.array([0.5, np.inf, np.inf])
    >>> left = np.array([1, 1, 2], dtype=np.int32)
    >>> table = np.array([[0.0, 0.0], [1.0, 0.0], [0.25, 0.75]])
    >>> packed_scores(X, 1, 3, feature, threshold, left, 1, table).tolist()
    [[1.0, 0.0], [0.25, 0.75], [0.25, 0.75]]
    """
    m, k = X.shape[0], table.shape[1]
    out = np.zeros((m, k))
    g = np.empty(8, dtype=np.int64)
    for i in range(m):
        x = X[i]
        for t0 in range(0, n_trees, 8):
            nb = min(8, n_trees - t0)
            for lane in range(nb):
                g[lane] = (t0 + lane) * stride
            for _ in range(depth):
                for lane in range(nb):
                    at = g[lane]
                    nxt = left[at]
                    step = nxt + (not (x[feature[at]] <= threshold[at]))
                    g[lane] = at if nxt == at else step
            for lane in range(nb):
                for c in range(k):
                    out[i, c] += table[g[lane], c]
    return out


@njit(cache=True, nogil=True)
def leaf_proba_rows(counts):   # pragma: no cover - compiled
    """:func:`~dpstream.models.windows.window_trees.leaf_proba` (rows of at most 128
    classes): ``np.maximum(counts, 0)`` (NaN kept, ``-0.0`` to ``0.0``), each row over its
    numpy sum (pairwise, :func:`_pairwise`), zero where the sum is not positive."""
    n, k = counts.shape
    out = np.zeros((n, k))
    c = np.empty(k)
    for i in range(n):
        for j in range(k):
            x = counts[i, j]
            c[j] = x if (x > 0.0 or x != x) else 0.0
        total = _pairwise(c, k)
        if total > 0:
            for j in range(k):
                out[i, j] = c[j] / total
    return out


@njit(cache=True, nogil=True)
def heap_leaves(X, feature, threshold, depth):   # pragma: no cover - compiled
    """The node each row reaches in a complete heap-layout tree of ``depth``
    (:class:`~dpstream.models.windows.window_trees.WindowTree`): node ``g < 2**depth - 1``
    sends a row to ``2g + 1`` iff ``x[feature[g]] <= threshold[g]`` (missing goes right)."""
    out = np.empty(X.shape[0], dtype=np.int64)
    for i in range(X.shape[0]):
        g = 0
        for _ in range(depth):
            g = 2 * g + 1 + (not (X[i, feature[g]] <= threshold[g]))
        out[i] = g
    return out


@njit(cache=True, nogil=True)
def routing_rows(X, num_cols, group_start, group_size):   # pragma: no cover - compiled
    """:meth:`~dpstream.models.windows.random_trees.ImplicitRandomTrees.matrix`: column 0 zero, the
    numeric columns, then each categorical group's code (first smallest column; NaN if the
    value is missing)."""
    m, s, r = X.shape[0], num_cols.shape[0], group_start.shape[0]
    V = np.empty((m, 1 + s + r))
    for i in range(m):
        V[i, 0] = 0.0
        for j in range(s):
            V[i, 1 + j] = X[i, num_cols[j]]
        for g in range(r):
            V[i, 1 + s + g] = _argmin_code(X[i], group_start[g], group_size[g])
    return V


@njit(cache=True, nogil=True, inline="always")
def _argmin_code(x, start, size):   # pragma: no cover - compiled
    # np.argmin over x[start:start+size] (the first NaN wins), NaN when the first is missing
    if x[start] != x[start]:
        return np.nan
    best, at = x[start], 0
    for j in range(1, size):
        v = x[start + j]
        if v != v:
            return np.float64(j)
        if v < best:
            best, at = v, j
    return np.float64(at)


@njit(cache=True, nogil=True)
def bin_codes(X, num_cols, lo, hi, n_bins, group_start, group_size):   # pragma: no cover
    """The greedy forest's branch codes: ``n_bins`` equal-width bins of each numeric column's
    public domain, then each categorical group's code; missing takes the last branch."""
    m, s, r = X.shape[0], num_cols.shape[0], group_start.shape[0]
    out = np.empty((m, s + r), dtype=np.int64)
    for i in range(m):
        for j in range(s):
            v = X[i, num_cols[j]]
            if v != v:
                out[i, j] = n_bins - 1
                continue
            b = np.floor((v - lo[j]) / (hi[j] - lo[j]) * n_bins) if hi[j] > lo[j] else 0.0
            out[i, j] = np.int64(min(max(b, 0.0), n_bins - 1.0))
        for g in range(r):
            c = _argmin_code(X[i], group_start[g], group_size[g])
            out[i, s + g] = group_size[g] - 1 if c != c else np.int64(c)
    return out



_median_cand = njit(cache=True, nogil=True)(median_candidates_core)
_category_dist = njit(cache=True, nogil=True)(categorical_distances_core)


@njit(cache=True, nogil=True)
def _draw_option(rng, options, n_opt, weights, weighted, p):   # pragma: no cover - compiled
    # grow_median_tree_reference's attribute draw: rng.integers(n_opt), or the inverse-CDF
    # draw of weights[options] (np.sum, divide, np.cumsum, normalise, searchsorted "right")
    if not weighted:
        return options[nb_choose(rng, n_opt)]
    for q in range(n_opt):
        p[q] = weights[options[q]]
    total = _pairwise(p, n_opt)
    acc = 0.0
    for q in range(n_opt):
        acc += p[q] / total
        p[q] = acc
    last = p[n_opt - 1]
    for q in range(n_opt):
        p[q] /= last
    u = nb_uniform(rng)
    q = 0
    while q < n_opt and p[q] <= u:
        q += 1
    return options[q]


@njit(cache=True, nogil=True)
def grow_median(X, depth, num_col, num_lo, num_hi, cat_ptr, cat_col, rng, nums, den, private,
                n_candidates, weights, weighted):   # pragma: no cover - compiled
    """:func:`~dpstream.models.windows.median_forest.grow_median_tree_reference` compiled:
    the same nodes in the same order, the same draws from ``rng``; returns ``(feature,
    threshold)``. Categorical feature ``k`` owns columns ``cat_col[cat_ptr[k]:cat_ptr[k+1]]``;
    ``private``: medians are released with the exponent factor ``nums[level] / den`` per unit
    of distance (:func:`~dpstream.accounting.noise.distance_factor` of the level's epsilon),
    else exact."""
    n, n_num, n_cat = X.shape[0], num_col.shape[0], cat_ptr.shape[0] - 1
    n_nodes = 2 ** (depth + 1) - 1
    feature = np.zeros(n_nodes, dtype=np.int32)
    threshold = np.full(n_nodes, np.inf)
    widest = 1
    for k in range(n_cat):
        widest = max(widest, cat_ptr[k + 1] - cat_ptr[k])
    # each row's value per categorical feature: its first zero column's index, else missing
    value = np.empty((n, max(n_cat, 1)), dtype=np.int64)
    for i in range(n):
        for k in range(n_cat):
            a, b = cat_ptr[k], cat_ptr[k + 1]
            value[i, k] = b - a
            for c in range(a, b):
                if X[i, cat_col[c]] == 0.0:
                    value[i, k] = c - a
                    break
    # per node: its numeric intervals, the categorical columns still splittable, its records
    lo = np.empty((n_nodes, n_num))
    hi = np.empty((n_nodes, n_num))
    alive = np.ones((n_nodes, cat_col.shape[0]), dtype=np.bool_)
    lo[0], hi[0] = num_lo, num_hi
    seg = np.zeros(n_nodes + 1, dtype=np.int64)   # node's records: order[seg[node]:end[node]]
    end = np.zeros(n_nodes, dtype=np.int64)
    end[0] = n
    order = np.arange(n)
    right = np.empty(n, dtype=np.int64)
    vals = np.empty(n)
    options = np.empty(n_num + n_cat, dtype=np.int64)
    p = np.empty(n_num + n_cat)
    cand = np.empty(n_candidates)
    dist = np.empty(max(n_candidates, widest), dtype=np.int64)   # |2 rank - n| per candidate
    pos = np.empty(widest + 1, dtype=np.int64)
    counts = np.empty(widest, dtype=np.int64)
    for level in range(depth):
        first = 2 ** level - 1
        for node in range(first, 2 * first + 1):
            s, e = seg[node], end[node]
            n_opt = 0
            for j in range(n_num):
                if hi[node, j] > lo[node, j]:
                    options[n_opt] = j
                    n_opt += 1
            for k in range(n_cat):
                if alive[node, cat_ptr[k]:cat_ptr[k + 1]].sum() > 1:
                    options[n_opt] = n_num + k
                    n_opt += 1
            kids = (2 * node + 1, 2 * node + 2)
            for kid in kids:
                lo[kid], hi[kid], alive[kid] = lo[node], hi[node], alive[node]
            f, t = 0, np.inf   # no option: a pass-through node, column 0 <= inf
            if n_opt > 0:
                j = _draw_option(rng, options, n_opt, weights, weighted, p)
                if j < n_num:
                    f = num_col[j]
                    m = 0
                    for q in range(s, e):
                        v = X[order[q], f]
                        if v == v:
                            vals[m] = v
                            m += 1
                    vals[:m].sort()
                    if private:
                        _median_cand(vals, m, lo[node, j], hi[node, j], rng, cand, dist)
                        t = cand[em_pick_dist(rng, dist, n_candidates, nums[level], den)]
                    elif m % 2 == 1:   # np.median
                        t = vals[m // 2]
                    elif m > 0:
                        t = (vals[m // 2 - 1] + vals[m // 2]) / 2.0
                    else:   # an empty node: the public midpoint
                        t = (lo[node, j] + hi[node, j]) / 2.0
                    hi[kids[0], j], lo[kids[1], j] = t, t
                else:
                    k = j - n_num
                    a, b = cat_ptr[k], cat_ptr[k + 1]
                    na = 0   # each column's position among the node's live columns, or -1
                    for c in range(a, b):
                        pos[c - a] = na if alive[node, c] else -1
                        na += alive[node, c]
                    pos[b - a] = -1   # missing
                    counts[:na] = 0
                    for q in range(s, e):
                        c = pos[value[order[q], k]]
                        if c >= 0:
                            counts[c] += 1
                    if private:
                        _category_dist(counts, na, dist)
                        pick = em_pick_dist(rng, dist, na, nums[level], den)
                    else:   # np.argmin(|counts - size / 2|)
                        half = counts[:na].sum() / 2.0
                        pick, best = 0, np.inf
                        for c in range(na):
                            if abs(counts[c] - half) < best:
                                pick, best = c, abs(counts[c] - half)
                    for c in range(a, b):
                        if pos[c - a] == pick:
                            f = cat_col[c]
                            alive[kids[0], a:b] = False
                            alive[kids[1], c] = False
                    t = 0.5   # left iff == the category
            feature[node], threshold[node] = f, t
            nl, nr = 0, 0   # route: left iff x[f] <= t (missing goes right)
            for q in range(s, e):
                r = order[q]
                if X[r, f] <= t:
                    order[s + nl] = r
                    nl += 1
                else:
                    right[nr] = r
                    nr += 1
            order[s + nl:e] = right[:nr]
            seg[kids[0]], end[kids[0]] = s, s + nl
            seg[kids[1]], end[kids[1]] = s + nl, e
    return feature, threshold
