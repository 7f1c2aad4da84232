"""The compiled median-tree grower draws what the numpy reference draws: the same trees, bit for
bit, and the generator left in the same state (private and exact medians, relevance weights,
categorical splits, missing values); the compiled mechanism cores equal the accounting ones."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.accounting import PrivateMedian
from dpstream.accounting.exponential import _gumbel_argmax, gumbel_argmax_core
from dpstream.accounting.median import categorical_log_weights_core, median_log_weights_core
from dpstream.models.windows import window_kernels as wk
from dpstream.models.windows.median_forest import grow_median_tree, grow_median_tree_reference


def _case(seed: int):
    g = np.random.default_rng(seed)
    n = int(g.integers(0, 400))
    n_num, sizes = int(g.integers(0, 5)), [int(s) for s in g.integers(1, 6, g.integers(0, 4))]
    if n_num + len(sizes) == 0:
        n_num = 1
    X = np.zeros((n, 1 + n_num + sum(sizes)))
    numeric, col = [], 1
    for _ in range(n_num):
        lo, hi = sorted(g.uniform(-50, 50, 2))
        if g.random() < 0.2:
            X[:, col] = np.round(g.uniform(lo, hi, n))   # ties
            lo, hi = float(np.floor(lo)), float(np.ceil(hi))
        else:
            X[:, col] = g.uniform(lo, hi, n)
        X[g.random(n) < 0.1, col] = np.nan
        numeric.append((col, float(lo), float(hi)))
        col += 1
    categorical = []
    for k in sizes:
        cols = list(range(col, col + k))
        block = np.ones((n, k))
        block[np.arange(n), g.integers(0, k, n)] = 0.0
        block[g.random(n) < 0.1] = np.nan
        X[:, cols] = block
        categorical.append(cols)
        col += k
    X[g.random(n) < 0.05, 0] = np.nan
    depth = int(g.integers(0, 8))
    budgets = None if g.random() < 0.3 else list(g.uniform(0.05, 3.0, depth))
    weights = None if g.random() < 0.5 else g.random(n_num + len(sizes)) + 0.01
    return X, depth, dict(numeric=numeric, categorical=categorical, budgets=budgets,
                          weights=weights, n_candidates=int(g.choice([1, 7, 256])))


@pytest.mark.parametrize("seed", range(300))
def test_compiled_grower_is_the_reference(seed):
    X, depth, kw = _case(seed)
    r1, r2 = np.random.default_rng(seed), np.random.default_rng(seed)
    f1, t1 = grow_median_tree_reference(X, depth, rng=r1, **kw)
    f2, t2 = grow_median_tree(X, depth, rng=r2, **kw)
    assert f1.dtype == f2.dtype and t1.dtype == t2.dtype
    np.testing.assert_array_equal(f1, f2)
    np.testing.assert_array_equal(t1, t2)
    assert r1.random() == r2.random()   # the same number of draws


def test_compiled_grower_checks_bounds():
    X = np.c_[np.zeros(5), np.arange(5.0)]
    with pytest.raises(ValueError):   # a value outside the public interval
        grow_median_tree(X, 1, numeric=[(1, 0.0, 3.0)], categorical=[],
                         rng=np.random.default_rng(0), budgets=[1.0])
    with pytest.raises(ValueError, match="epsilon > 0"):
        grow_median_tree(X, 1, numeric=[(1, 0.0, 9.0)], categorical=[],
                         rng=np.random.default_rng(0), budgets=[0.0])


@pytest.mark.parametrize("seed", range(50))
def test_compiled_mechanism_cores_are_the_accounting_releases(seed):
    g = np.random.default_rng(1000 + seed)
    lo, hi = sorted(g.uniform(-10, 10, 2))
    v = np.sort(g.uniform(lo, hi, int(g.integers(0, 60))))
    eps, nc = float(g.uniform(0.01, 5)), int(g.integers(1, 300))
    want = PrivateMedian.release_sorted(v, epsilon=eps, lower=lo, upper=hi, n_candidates=nc,
                                        rng=np.random.default_rng(seed))
    cand, logw = np.empty(nc), np.empty(nc)
    for compiled in (False, True):
        rng = np.random.default_rng(seed)
        (wk._median_logw if compiled else median_log_weights_core)(v, v.size, eps, lo, hi, rng,
                                                                   cand, logw)
        pick = (wk._em_pick if compiled else gumbel_argmax_core)(rng, logw, nc)
        assert cand[pick] == want
    k = int(g.integers(1, 9))
    codes = g.integers(0, k, size=int(g.integers(0, 40)))
    want = PrivateMedian.categorical(codes, n_categories=k, epsilon=eps, rng=seed)
    counts, logw = np.bincount(codes, minlength=k), np.empty(k)
    for compiled in (False, True):
        (wk._category_logw if compiled else categorical_log_weights_core)(counts, k, eps, logw)
        pick = (wk._em_pick if compiled else gumbel_argmax_core)(np.random.default_rng(seed),
                                                                 logw, k)
        assert pick == want
    lw = g.normal(size=k) * 30
    assert gumbel_argmax_core(np.random.default_rng(seed), lw, k) == \
        _gumbel_argmax(np.random.default_rng(seed), lw, None)
