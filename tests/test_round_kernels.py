"""The compiled steps of an S-GBDT round give the numpy expressions' results bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.models.boosting.round_kernels import leaf_counts_sums
from dpstream.models.forest_kernels import add_node_values


def _floats(rng, n):
    # magnitudes over many binades, so the order of the additions shows in the low bits
    return rng.normal(size=n) * 10.0 ** rng.integers(-8, 8, size=n)


@pytest.mark.parametrize("seed", range(5))
def test_leaf_counts_and_sums_are_bincounts_of_the_sampled_records(seed):
    rng = np.random.default_rng(seed)
    n, first, n_leaves = 20_000, 63, 64
    nodes = rng.integers(first, first + n_leaves, size=n)
    sampled = rng.random(n) < 0.3
    g = _floats(rng, n)
    counts, sums = leaf_counts_sums(nodes, first, sampled, g, n_leaves)
    leaf = nodes[sampled] - first
    assert np.array_equal(counts, np.bincount(leaf, minlength=n_leaves).astype(np.float64))
    assert np.array_equal(sums, np.bincount(leaf, weights=g[sampled], minlength=n_leaves))
    assert counts.dtype == sums.dtype == np.float64


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_adding_or_taking_away_a_tree_is_the_numpy_update(sign):
    rng = np.random.default_rng(7)
    value = _floats(rng, 127)
    nodes = rng.integers(0, 127, size=50_000)
    score = _floats(rng, nodes.size)
    want = score.copy()
    if sign > 0:
        want += value[nodes]
    else:
        want -= value[nodes]
    add_node_values(score, value, nodes, sign)
    assert np.array_equal(score, want)


def test_the_round_steps_benchmark_checks_and_times_each_step():
    """``benchmarks/sgbdt_round_steps.py`` on a small pool: every step gives the numpy form's bits
    (the script raises otherwise) and is timed both ways."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "sgbdt_round_steps.py"
    out = subprocess.run([sys.executable, str(script), "--records", "3000", "--repeats", "2",
                          "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["trees"] == 150 and 0 < res["sampled"] < res["pool"] <= 3000, res
    for step in ("leaf", "add", "retire", "cost"):
        assert res[f"{step}_numpy_ms"] > 0 and res[f"{step}_compiled_ms"] > 0, res


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_forest_adds_or_takes_away_one_trees_values_as_predict_tree_does(sign):
    """``Forest.add_tree_values`` reads the tree at its own offset (here the third of three)."""
    from dpstream.models.forest import Forest, complete_tree_layout

    rng = np.random.default_rng(3)
    forest = Forest(max_nodes=15, max_depth=3)
    n, internal, leaves = complete_tree_layout(3)
    for _ in range(3):
        feature = rng.integers(0, 4, size=n).astype(np.int32)
        threshold = rng.normal(size=n)
        left = np.arange(n)
        left[internal] = 2 * internal + 1
        feature[leaves], threshold[leaves] = 0, np.inf
        forest.add_tree(feature=feature, threshold=threshold, left=left,
                        value=_floats(rng, n))
    X = rng.normal(size=(500, 4))
    score = _floats(rng, 500)
    want = score + sign * forest.predict_tree(2, X)
    forest.add_tree_values(score, 2, forest.apply(2, X), sign)
    assert np.array_equal(score, want)


@pytest.mark.parametrize("order", ["F", "C"])
def test_move_rows_is_numpys_row_assignment(order):
    """``move_rows`` fills the holes with the movers' rows, every column, as
    ``X[holes] = X[movers]`` does (the S-GBDT pool's eviction and its block sums)."""
    from dpstream.models.boosting.round_kernels import move_rows

    rng = np.random.default_rng(5)
    X = np.asarray(rng.normal(size=(500, 13)), order=order)
    X[::17, 4] = np.nan
    holes = np.sort(rng.choice(300, 60, replace=False))
    movers = 300 + rng.choice(200, 60, replace=False)
    want = X.copy(order=order)
    want[holes] = want[movers]
    move_rows(X, holes, movers)
    assert np.array_equal(X, want, equal_nan=True)
    move_rows(X, holes[:0], movers[:0])   # nothing to move
    assert np.array_equal(X, want, equal_nan=True)
