"""The compiled median-tree grower draws what the numpy reference draws: the same trees, bit for
bit, and the generator left in the same state (private and exact medians, relevance weights,
categorical splits, missing values); the compiled mechanism cores equal the accounting ones
(the exact exponential mechanism on integer distances, issue 65)."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.accounting import PrivateMedian
from dpstream.accounting.median import categorical_distances_core, median_candidates_core
from dpstream.accounting.noise import distance_factor, em_pick_dist
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
    cand, dist = np.empty(nc), np.empty(nc, dtype=np.int64)
    num, den = distance_factor(eps)
    for compiled in (False, True):
        rng = np.random.default_rng(seed)
        (wk._median_cand if compiled else median_candidates_core)(v, v.size, lo, hi, rng,
                                                                   cand, dist)
        assert cand[em_pick_dist(rng, dist, nc, num, den)] == want
    k = int(g.integers(1, 9))
    codes = g.integers(0, k, size=int(g.integers(0, 40)))
    want = PrivateMedian.categorical(codes, n_categories=k, epsilon=eps, rng=seed)
    counts, dist = np.bincount(codes, minlength=k), np.empty(k, dtype=np.int64)
    for compiled in (False, True):
        (wk._category_dist if compiled else categorical_distances_core)(counts, k, dist)
        assert em_pick_dist(np.random.default_rng(seed), dist, k, num, den) == want


def _old_pack(trees, n_classes, weights=None):
    """pack_trees as it was: one Forest.add_tree per tree."""
    from dpstream.models.forest import Forest
    from dpstream.models.windows.window_trees import leaf_proba
    stride = max((tr.feature.size for tr in trees), default=1)
    forest = Forest(max_nodes=stride, max_depth=max((tr.depth for tr in trees), default=0))
    table = np.zeros((max(1, len(trees)) * stride, n_classes))
    for i, tr in enumerate(trees):
        forest.add_tree(feature=tr.feature, threshold=tr.threshold, left=tr.left,
                        value=np.zeros(tr.feature.size))
        table[i * stride:i * stride + tr.feature.size] = leaf_proba(tr.counts) * (
            1.0 if weights is None else weights[i])
    return forest, table


@pytest.mark.parametrize("seed", range(40))
def test_pack_trees_is_add_tree_per_tree(seed):
    from dpstream.models.windows.window_trees import WindowTree, pack_trees
    g = np.random.default_rng(seed)
    trees, k = [], int(g.integers(1, 13))
    for _ in range(int(g.integers(0, 40))):
        d = int(g.integers(0, 7))
        size = 2 ** (d + 1) - 1 if g.random() < 0.9 else int(g.integers(1, 40))
        trees.append(WindowTree(g.integers(0, 9, size).astype(np.int32), g.normal(size=size),
                                g.normal(size=(size, k)) * g.choice([0, 1, 100]), d))
    weights = None if g.random() < 0.3 else list(g.random(len(trees)))
    (f1, t1), (f2, t2) = _old_pack(trees, k, weights), pack_trees(trees, k, weights)
    assert set(f1.__dict__) == set(f2.__dict__)
    for key, v in f1.__dict__.items():
        if isinstance(v, np.ndarray):
            assert v.dtype == f2.__dict__[key].dtype
            np.testing.assert_array_equal(v, f2.__dict__[key])
        else:
            assert v == f2.__dict__[key]
    assert t1.shape == t2.shape and np.array_equal(t1.view(np.int64), t2.view(np.int64))


def test_label_codes_match_the_per_label_path():
    from dpstream.models.encoding import RecordEncoder
    from dpstream.models.windows.window_stream import UNLABELED, _label_codes
    schema = {"features": {"a": {"type": "numeric", "min": 0, "max": 1}},
              "target": {"type": "binary", "values": [False, True]}}
    enc = RecordEncoder(schema)
    y = [True, False, None, np.True_, 1, 0, np.int64(1), True, 0.0]
    want = [UNLABELED if v is None else int(enc.encode_target_one(v)) for v in y]
    assert _label_codes(enc, y).tolist() == want
    assert _label_codes(enc, [True, False] * 3).tolist() == [1, 0] * 3
    with pytest.raises((ValueError, TypeError)):
        _label_codes(enc, [True, 5])
    with pytest.raises((ValueError, TypeError)):
        _label_codes(enc, [True, [1]])


@pytest.mark.parametrize("depth", range(0, 9))
def test_heap_leaves_are_forest_apply(depth):
    from dpstream.models.forest import Forest
    from dpstream.models.windows.window_trees import WindowTree
    g = np.random.default_rng(depth)
    size = 2 ** (depth + 1) - 1
    X = g.normal(size=(500, 6))
    X[g.random(X.shape) < 0.1] = np.nan
    internal = 2 ** depth - 1
    feature = np.where(np.arange(size) < internal, g.integers(0, 6, size), 0).astype(np.int32)
    threshold = np.where(np.arange(size) < internal, g.normal(size=size), np.inf)
    tree = WindowTree(feature, threshold, np.zeros((size, 2)), depth)
    forest = Forest(max_nodes=size, max_depth=depth)
    forest.add_tree(feature=feature, threshold=threshold, left=tree.left, value=np.zeros(size))
    np.testing.assert_array_equal(tree.leaves(X), forest.apply(0, X))


@pytest.mark.parametrize("seed", range(30))
def test_leaf_proba_compiled_is_numpys(seed):
    from dpstream.models.windows.window_trees import leaf_proba
    g = np.random.default_rng(seed)
    C = g.normal(size=(int(g.integers(0, 200)), int(g.integers(1, 40)))) * g.choice([1e-3, 1e6])
    C[g.random(C.shape) < 0.2] = 0.0
    C[g.random(C.shape) < 0.05] = -0.0
    c = np.maximum(C, 0.0)
    total = c.sum(axis=1, keepdims=True)
    want = np.divide(c, total, out=np.zeros_like(c), where=total > 0)
    got = leaf_proba(C)
    assert got.shape == want.shape and np.array_equal(got.view(np.int64), want.view(np.int64))
