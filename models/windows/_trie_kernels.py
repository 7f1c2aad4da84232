"""Batch scoring of the keyed random and greedy forests through per-tree tries (numba).

A batch of rows meets each tree's shallow nodes over and over: the per-pair walks of
:mod:`~dpstream.models.windows.window_kernels` recompute their keys and splits (two splitmix64
rounds a level) for every row. These kernels walk one tree at a time over all the rows, level by
level, and materialise every node the batch reaches once; the arithmetic of each node is exactly the
per-pair walk's, and every row sums the trees in the same order, so the scores are bit for bit
the same (``tests/test_window_kernels.py::test_batch_tries_equal_row_walks``).
The forests reach it as ``random_trees._tk``.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit

from .window_kernels import (
    _LOW32,
    _S32,
    _S40,
    _TAG0,
    _TWO_M32,
    _bucket,
    _child,
    _label,
    _mix,
    _nth_bit,
    _probe,
    _rank,
)

# A batch of rows meets each tree's shallow nodes over and over: the per-pair walks above
# recompute their keys and splits (two splitmix64 rounds a level) for every row. The batch
# kernels below walk one tree at a time over all the rows, level by level, and materialise
# every node the batch reaches once — its key, split and child block — in a trie kept only for
# that tree and batch: a row's step is then a table read and a comparison. On Adult a tree
# of depth 9 meets ~9k distinct nodes for 32k rows (293k row-levels). The arithmetic of each
# node (key, draw, threshold) is exactly the per-pair walk's, and every row sums the trees in
# the same order, so the scores are bit for bit the same. Node records pack the child block's
# start, the column read and a categorical flag: ``start << 17 | column << 1 | categorical``.

@njit(cache=True, nogil=True)
def _trie_step(V, m, node, rec, npar, stamp, t, parent, newc, newp,
               newb):   # pragma: no cover - compiled
    # one level: every row moves to the child its value picks (branch-free), then the
    # children no row reached before are listed once (newc, their parents newp, branches newb)
    for i in range(m):
        n = node[i]
        wd = rec[n]
        par = npar[n]
        x = V[((wd >> 1) & 0xFFFF) * m + i]
        le = x <= par                                   # missing (NaN) fails: right / last
        xc = x if le else par
        cat = wd & 1
        br = (np.int64(xc) & -cat) | (np.int64(not le) & (cat - 1))
        parent[i] = n
        node[i] = (wd >> 17) + br
    nn = 0
    for i in range(m):
        c = node[i]
        if stamp[c] != t:
            stamp[c] = t
            newc[nn] = c
            newp[nn] = parent[i]
            nn += 1
    for j in range(nn):
        newb[j] = newc[j] - (rec[newp[j]] >> 17)
    return nn


@njit(cache=True, nogil=True)
def _trie_sum(out, m, node, nslot, values, weight):   # pragma: no cover
    # add each row's leaf: a released row (slot >= 0), else the keyed label -1 - slot
    k = values.shape[1]
    for i in range(m):
        idx = nslot[node[i]]
        if idx >= 0:
            for c in range(k):
                out[i, c] += weight * values[idx, c]
        else:
            out[i, -1 - idx] += weight


@njit(cache=True, nogil=True)
def _trie_votes(V, m, roots, t0, weights, buckets, depth, lo0, hi0, last, draw, nth, keys, slots,
                values, out_salt, out, rec, npar, nkey, nslot, stamp, elo, ehi, emask, node,
                parent, newc, newp, newb):   # pragma: no cover - compiled
    # implicit_votes for a batch (V: the routing matrix column-major, flat); returns the
    # first tree it could not finish for want of node capacity (the caller grows and resumes)
    k, s, r = values.shape[1], lo0.shape[0], last.shape[0]
    cap, ecap = rec.shape[0], elo.shape[0]
    maxfan = 2
    for q in range(r):
        maxfan = max(maxfan, np.int64(last[q]) + 1)
    for t in range(t0, roots.shape[0]):
        nkey[0] = roots[t]
        stamp[0] = t
        for j in range(s):
            elo[0, j] = lo0[j]
            ehi[0, j] = hi0[j]
        emask[0] = (np.int64(1) << r) - 1
        nslot[0] = 0
        cnt, ecnt = 1, 1
        for i in range(m):
            node[i] = 0
        nn = 1
        newc[0] = 0
        for lev in range(depth + 1):
            if lev > 0:
                nn = _trie_step(V, m, node, rec, npar, stamp, t, parent, newc, newp, newb)
                for j in range(nn):
                    nkey[newc[j]] = _child(nkey[newp[j]], newb[j])
            for j in range(nn):
                c = newc[j]
                key = nkey[c]
                p, pe, pcat, pj, mask = 0, 0, 0, 0, emask[0]
                if lev > 0:   # the parent's path state, less the parent's own split
                    p = newp[j]
                    pw = rec[p]
                    pe = nslot[p]
                    pcat = pw & 1
                    pj = ((pw >> 1) & 0xFFFF) - 1
                    mask = emask[pe] & ~(pcat << max(pj - s, 0))
                nfree = 0
                for q in range(r):
                    nfree += (mask >> q) & 1
                avail = s + nfree
                if lev == depth or avail == 0:   # a leaf (stays put if above the last level)
                    idx = _probe(keys, slots, _bucket(roots[t], key, buckets[t], _TAG0))
                    nslot[c] = idx if idx >= 0 else -1 - _label(key, out_salt, k)
                    rec[c] = c << 17
                    npar[c] = np.inf
                    continue
                if cnt + maxfan > cap or ecnt >= ecap:
                    return t
                e = ecnt
                ecnt += 1
                for q in range(s):
                    elo[e, q] = elo[pe, q]
                    ehi[e, q] = ehi[pe, q]
                if lev > 0:
                    if s and pcat == 0:
                        if newb[j]:
                            elo[e, pj] = npar[p]
                        else:
                            ehi[e, pj] = npar[p]
                emask[e] = mask
                nslot[c] = e
                z = _mix(key ^ draw)
                pick = np.int64(((z >> _S32) * np.uint64(avail)) >> _S32)
                if pick < s:
                    u = np.float64(z & _LOW32) * _TWO_M32
                    a, b = elo[e, pick], ehi[e, pick]
                    npar[c] = a + u * (b - a)
                    rec[c] = (cnt << 17) | ((1 + pick) << 1)
                    cnt += 2
                else:
                    q = nth[mask & 255, (pick - s) & 7] if r <= 8 else _nth_bit(mask, pick - s,
                                                                                  r)
                    npar[c] = last[q]
                    rec[c] = (cnt << 17) | ((1 + s + q) << 1) | 1
                    cnt += np.int64(last[q]) + 1
        _trie_sum(out, m, node, nslot, values, weights[t])
    return roots.shape[0]


@njit(cache=True, nogil=True, inline="always")
def _nth_mask(mask, rank, a_count):   # pragma: no cover - compiled
    # _nth_free over a bit mask: the rank-th set bit, else the last attribute
    for c in range(a_count):
        if (mask >> c) & 1:
            if rank == 0:
                return c
            rank -= 1
    return a_count - 1


@njit(cache=True, nogil=True)
def _trie_greedy(C, m, roots, t0, weights, buckets, levels, fan, nkeys, nslots, nattr, lkeys,
                 lslots, lvalues, draw, out_salt, out, rec, npar, nkey, nslot, stamp, emask, node,
                 parent, newc, newp, newb):   # pragma: no cover - compiled
    # greedy_votes for a batch (C: branch codes column-major, flat); same contract as
    # _trie_votes. A node reads column = its attribute; npar is +inf so every branch is the
    # code itself (codes are in range).
    k, a_count = lvalues.shape[1], fan.shape[0]
    cap, ecap = rec.shape[0], emask.shape[0]
    maxfan = 1
    for a in range(a_count):
        maxfan = max(maxfan, fan[a])
    for t in range(t0, roots.shape[0]):
        nkey[0] = roots[t]
        stamp[0] = t
        emask[0] = (np.int64(1) << a_count) - 1
        nslot[0] = 0
        cnt, ecnt = 1, 1
        for i in range(m):
            node[i] = 0
        nn = 1
        newc[0] = 0
        for lev in range(levels + 1):
            if lev > 0:
                nn = _trie_step(C, m, node, rec, npar, stamp, t, parent, newc, newp, newb)
                for j in range(nn):
                    nkey[newc[j]] = _child(nkey[newp[j]], newb[j])
            for j in range(nn):
                c = newc[j]
                key = nkey[c]
                mask = emask[0]
                if lev > 0:
                    p = newp[j]
                    mask = emask[nslot[p]] & ~(np.int64(1) << ((rec[p] >> 1) & 0xFFFF))
                tag = np.uint64(lev + 1) << _S40
                if lev == levels:
                    idx = _probe(lkeys, lslots, _bucket(roots[t], key, buckets[t, lev], tag))
                    nslot[c] = idx if idx >= 0 else -1 - _label(key, out_salt, k)
                    continue
                if cnt + maxfan > cap or ecnt >= ecap:
                    return t
                e = ecnt
                ecnt += 1
                emask[e] = mask
                nslot[c] = e
                idx = _probe(nkeys, nslots, _bucket(roots[t], key, buckets[t, lev], tag))
                if idx >= 0:
                    a = np.int64(nattr[idx])
                else:   # reached by no training record: uniform among the attributes left
                    nfree = 0
                    for q in range(a_count):
                        nfree += (mask >> q) & 1
                    rank, _u = _rank(key, draw, nfree)
                    a = _nth_mask(mask, rank, a_count)
                npar[c] = np.inf
                rec[c] = (cnt << 17) | (a << 1) | 1
                cnt += fan[a]
        _trie_sum(out, m, node, nslot, lvalues, weights[t])
    return roots.shape[0]


def threads_for(rows: int, trees: int, min_rows: int = 8192) -> int:
    """Threads for a batch of ``rows`` through ``trees`` trees: one per usable CPU (at most
    4), and only for batches worth a thread (>= ``min_rows`` rows, >= 32 trees per thread)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:   # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    if rows < min_rows:
        return 1
    return max(1, min(cpus, 4, trees // 32))


#: rows from which :func:`trie_scores` shares the trees among threads: each thread builds
#: its own node tables (tens of MiB at a 32k-row chunk), so smaller batches stay on one
#: thread and keep the random forest's memory where it was (docs/random_forest.md)
TRIE_THREAD_ROWS = 65_536


def rows_in_threads(kernel, V: np.ndarray, *args) -> np.ndarray:
    """``kernel(V, *args)`` for a per-row kernel that releases the GIL, its rows split among
    :func:`threads_for` threads (the same rows out, bit for bit: each row is scored alone)."""
    workers = threads_for(V.shape[0], 32 * V.shape[0])
    if workers <= 1:
        return kernel(V, *args)
    cuts = np.linspace(0, V.shape[0], workers + 1).astype(np.intp)
    with ThreadPoolExecutor(workers) as pool:
        parts = list(pool.map(lambda ab: kernel(V[ab[0]:ab[1]], *args),
                              zip(cuts[:-1], cuts[1:], strict=False)))
    return np.concatenate(parts)


def trie_scores(kernel, X: np.ndarray, roots: np.ndarray, weights: np.ndarray, n_classes: int,
                args: tuple, ranges: int, *, buckets: np.ndarray | None = None,
                chunk: int = 32_768,
                capacity: int | None = None, threads: int | None = None) -> np.ndarray:
    """Run a batch kernel (:func:`_trie_votes` or :func:`_trie_greedy`) over the rows of
    ``X`` in chunks, growing its node tables until every tree is done.

    ``args`` are the kernel's arguments between ``buckets`` (each tree's buckets, one row per
    tree: one value for a random tree's leaves, one per level for a greedy tree;
    :func:`~dpstream.models.windows.buckets.bucket_keys`; default 0: looked up by node key) and
    ``out``; ``ranges`` the width
    of the path state (numeric attributes) a trie node keeps (0: the greedy kernel);
    ``capacity`` the first size of the node tables (tests: force them to grow); ``threads``
    the threads that share the trees (default :func:`threads_for`; the sum of the slices'
    scores is the same up to the order of floating-point additions)."""
    X = np.asarray(X)
    m = X.shape[0]
    buckets = (np.zeros(roots.shape[0], dtype=np.uint64) if buckets is None
               else np.ascontiguousarray(buckets, dtype=np.uint64))
    workers = (threads_for(m, roots.shape[0], TRIE_THREAD_ROWS) if threads is None
               else int(threads))
    if workers > 1:   # the kernels release the GIL: each thread takes a slice of the trees
        cuts = np.linspace(0, roots.shape[0], workers + 1).astype(np.intp)
        with ThreadPoolExecutor(workers) as pool:
            parts = list(pool.map(
                lambda ab: _serial_scores(kernel, X, roots[ab[0]:ab[1]], weights[ab[0]:ab[1]],
                                          buckets[ab[0]:ab[1]], n_classes, args, ranges,
                                          chunk, capacity),
                zip(cuts[:-1], cuts[1:], strict=False)))
        return np.sum(parts, axis=0)
    return _serial_scores(kernel, X, roots, weights, buckets, n_classes, args, ranges, chunk,
                          capacity)


def _serial_scores(kernel, X, roots, weights, buckets, n_classes, args, ranges, chunk,
                   capacity):
    """:func:`trie_scores` in the calling thread."""
    m = X.shape[0]
    out = np.zeros((m, n_classes))
    size = min(m, chunk)
    cap, ecap = (8 * size + 4096, 2 * size + 64) if capacity is None else (capacity, capacity)
    for c0 in range(0, m, chunk):
        block = X[c0:c0 + chunk]
        rows = block.shape[0]
        flat = np.ascontiguousarray(block.T).ravel()      # column-major: a level reads columns
        scratch = [np.empty(rows, dtype=np.int64) for _ in range(5)]
        t = 0
        while t < roots.shape[0]:
            tables = [np.empty(cap, dtype=np.int64), np.empty(cap), np.empty(cap, np.uint64),
                      np.empty(cap, dtype=np.int64), np.full(cap, -1, dtype=np.int64)]
            if ranges:
                tables += [np.empty((ecap, ranges)), np.empty((ecap, ranges))]
            tables.append(np.empty(ecap, dtype=np.int64))
            t = kernel(flat, rows, roots, t, weights, buckets, *args, out[c0:c0 + chunk], *tables,
                       *scratch)
            if t < roots.shape[0]:
                cap, ecap = 2 * cap, 2 * ecap
    return out
