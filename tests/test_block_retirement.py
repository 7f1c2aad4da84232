"""S-GBDT retires its oldest trees in blocks (``retire_block``): each pool record keeps one sum
of tree values per block of live trees, so a retiring block leaves the pool's scores by one
subtraction instead of a route of the whole pool through every retired tree.

What must hold: the forest keeps between ``max_trees - retire_block + 1`` and ``max_trees``
trees and retires whole blocks; the pool's scores follow the live forest; the kept block sums
are exactly what summing the live trees again gives (so a restore, which sums them again, goes
on bit for bit); the stream paths (``learn_one``, ``learn_stream``, a predicted batch reused)
end in the same state; and ``retire_block=1`` is the one-tree-a-round retirement of before.
"""

from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
from river.datasets import synth
from test_sgbdt_stream import _same
from test_window_stream import _drifting

from dpstream.connectors.safe_state import decode, encode
from dpstream.models import SGBDTClassifier, SGBDTRegressor
from dpstream.models import forest as forest_module
from dpstream.models.forest import Forest
from dpstream.stream import load_abalone
from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as AGRAWAL

#: a small forest and a round every 20 records: trees retire within a few thousand records
#: (no young phase: its faster early rounds would shift every count below)
SMALL = {"n_trees": 5, "extra_trees": 0, "max_trees": 24, "pool_rounds": None,
         "round_size": 20, "depth": 3, "warmup_rounds": 0}


def _stationary(n: int, seed: int = 1) -> tuple[list, list]:
    rows = list(synth.Agrawal(classification_function=4, seed=seed).take(n))
    return [x for x, _ in rows], [y for _, y in rows]


def _model(**params) -> SGBDTClassifier:
    return SGBDTClassifier(schema=AGRAWAL, seed=4, drift_window=300, **{**SMALL, **params})


def _check_invariants(model) -> None:
    e = model.engine
    f = e.forest
    b = e.retire_block
    assert e.config.max_trees - b + 1 <= len(f) <= e.config.max_trees
    # the kept block sums are the live trees summed again, bit for bit (what a restore does)
    again = f.predict_sum_parts(e.X, e._slots(), e.blocks.n_slots)[1]
    assert np.array_equal(e.parts, again)
    # and every slot that holds no live tree is empty
    live = set(e._slots().tolist())
    for slot in range(e.blocks.n_slots):
        if slot not in live:
            assert not e.parts[:, slot].any()
    # the pool's scores are the initial score plus the live trees (summed in another order)
    np.testing.assert_allclose(e.score, e.base_score + f.predict_sum(e.X), rtol=0, atol=1e-9)


def test_whole_blocks_retire_and_the_pool_follows_the_live_forest():
    X, y = _stationary(4000)   # retirement alone
    m = _model(retire_block=6)
    sizes = []
    for i in range(0, len(y), 100):
        m.learn_stream(X[i:i + 100], y[i:i + 100])
        sizes.append(len(m.engine.forest))
    e = m.engine
    assert e.rounds == len(y) // 20 and e.trees_retired > 100
    assert e.trees_retired % 6 == 0                      # whole blocks only
    assert min(sizes[20:]) >= 24 - 6 + 1 and max(sizes) == 24
    _check_invariants(m)
    report = m.privacy_report()
    assert report["trees_retired"] == e.trees_retired and report["retire_block"] == 6


def test_one_tree_at_a_time_is_the_retirement_of_before():
    """``retire_block=1`` keeps exactly ``max_trees`` trees once full and routes the pool
    through each retired tree: no block sums are kept."""
    X, y = _stationary(2000)
    m = _model(retire_block=1)
    m.learn_stream(X, y)
    e = m.engine
    assert len(e.forest) == 24 and e.trees_retired == e.rounds - 24 > 0
    assert e.parts is None and m.engine.raw_scores_parts(e.X[:3])[1] is None
    np.testing.assert_allclose(e.score, e.base_score + e.forest.predict_sum(e.X), atol=1e-9)


@pytest.mark.parametrize("params", [{"retire_block": 6}, {"retire_block": 24},
                                    {"retire_block": 5, "max_active": 600}])
def test_learn_one_and_learn_stream_agree_bit_for_bit(params):
    """The scoring at arrival hands its block sums to the pool in both paths (and across a
    drift detection, which retires every tree); a checkpoint drops them and the restored
    model sums them again: every path ends in the same state."""
    X, y = _drifting(6000, 3000)
    a, b = _model(**params), _model(**params)
    for xi, yi in zip(X, y, strict=True):
        a.learn_one(xi, yi)
    rng = np.random.default_rng(1)
    i = 0
    while i < len(y):
        k = int(rng.choice([1, 19, 20, 150, 700]))
        b.learn_stream(X[i:i + k], y[i:i + k])
        i += k
    assert a.engine.generation >= 1 and a.engine.trees_retired > 0
    _same(a, b)
    assert np.array_equal(a.engine.parts, b.engine.parts)
    _check_invariants(a)
    tree, arrays = encode(b)                          # a checkpoint holds no block sums
    assert b.engine.blocks.__getstate__()["_rows"] is None
    c = decode(json.loads(json.dumps(tree)), arrays)
    assert not c.engine.blocks.ready
    more_X, more_y = _stationary(2000, seed=7)
    for xi, yi in zip(more_X, more_y, strict=True):
        a.learn_one(xi, yi)
    c.learn_stream(more_X, more_y)
    _same(a, c)
    assert np.array_equal(a.engine.parts, c.engine.parts)


def test_a_predicted_batch_hands_its_block_sums_to_the_pool():
    """The service predicts a batch, then learns it: the block sums ``predict_many`` computed
    go to the pool with the scores (no second scoring), and the state is what learning
    without predicting gives."""
    X, y = _drifting(5000, 2500)
    a, b = _model(retire_block=6), _model(retire_block=6)
    flushed = []
    real_add = a.engine.add

    def spy(Xa, ya, raw=None, parts=None):
        flushed.append(parts is not None)
        return real_add(Xa, ya, raw=raw, parts=parts)
    a.engine.add = spy
    i = 0
    while i < len(y):
        room, labeled = a.stream_room()
        k = min(37, room, labeled or room, len(y) - i)
        batch = [dict(x) for x in X[i:i + k]]
        a.predict_many(batch)
        a.learn_stream(batch, y[i:i + k])
        i += k
    b.learn_stream(X, y)
    del a.engine.add
    assert sum(flushed) > 0.9 * len(flushed)
    _same(a, b)


def test_a_pickled_model_sums_its_blocks_again_and_goes_on_the_same():
    X, y = _stationary(3000)
    a = _model(retire_block=4)
    a.learn_stream(X[:2000], y[:2000])
    c = pickle.loads(pickle.dumps(a))
    assert not c.engine.blocks.ready and c._buffer_parts == [None] * len(c._buffer_y)
    a.learn_stream(X[2000:], y[2000:])
    c.learn_stream(X[2000:], y[2000:])
    _same(a, c)
    _check_invariants(c)


def test_regression_retires_blocks_too():
    X, y, schema = load_abalone()
    m = SGBDTRegressor(schema=schema, seed=0, n_trees=5, max_trees=30, retire_block=10,
                       pool_rounds=None, round_size=16)
    m.learn_stream(X, y)
    assert m.engine.trees_retired > 100
    _check_invariants(m)


def test_checkpoints_from_before_block_retirement_retire_one_tree_at_a_time():
    """A model saved before ``retire_block`` existed has neither the parameter nor the
    engine's block state: it restores with one tree at a time, as it was trained."""
    X, y = _stationary(1500)
    m = _model(retire_block=1)
    m.learn_stream(X[:1000], y[:1000])
    state = m.__getstate__()
    state.pop("retire_block")
    engine_state = state["_engine"].__getstate__()
    for name in ("blocks", "_keep"):
        engine_state.pop(name)
    engine = object.__new__(type(state["_engine"]))
    engine.__setstate__(engine_state)
    state["_engine"] = engine
    old = object.__new__(SGBDTClassifier)
    old.__setstate__(state)
    assert old.retire_block == 1 and old.engine.retire_block == 1
    old.learn_stream(X[1000:], y[1000:])
    assert len(old.engine.forest) == 24


def test_defaults_and_bad_values():
    schema = AGRAWAL
    assert SGBDTClassifier(schema=schema)._config.retire_block == 100   # max_trees 1000
    assert SGBDTClassifier(schema=schema, max_trees=8, n_trees=4,
                           extra_trees=0)._config.retire_block == 1
    assert SGBDTClassifier(schema=schema, max_trees=None)._config.retire_block == 1
    with pytest.raises(ValueError, match="retire_block"):
        SGBDTClassifier(schema=schema, retire_block=0)
    with pytest.raises(ValueError, match="retire_block .* must be <= max_trees"):
        SGBDTClassifier(schema=schema, max_trees=300, retire_block=301)
    with pytest.raises(ValueError, match="retire_block"):
        SGBDTClassifier(schema=schema, max_trees=None, retire_block=1.5)


def _forest(rng, n_trees: int, depth: int, width: int) -> Forest:
    n = 2 ** (depth + 1) - 1
    f = Forest(max_nodes=n, max_depth=depth)
    internal = np.arange(n // 2)
    for _ in range(n_trees):
        feature = np.zeros(n, dtype=np.int32)
        feature[internal] = rng.integers(1, width, internal.size)
        threshold = np.full(n, np.inf)
        threshold[internal] = rng.random(internal.size)
        left = np.arange(n)
        left[internal] = 2 * internal + 1
        # values over many binades, so a sum in another order would show
        value = rng.normal(size=n) * 2.0 ** rng.integers(-20, 20, n)
        f.add_tree(feature=feature, threshold=threshold, left=left, value=value)
    return f


@pytest.mark.parametrize("n_trees", [1, 31, 33, 70])
def test_block_sums_are_the_trees_summed_in_order(n_trees):
    """The compiled kernels' totals are ``predict_sum``'s bit for bit, and each slot holds
    its trees' values added in tree order from 0.0 (the order the pool keeps them in)."""
    rng = np.random.default_rng(n_trees)
    f = _forest(rng, n_trees, depth=3, width=6)
    X = rng.random((150, 6))
    X[::7, 2] = np.nan                                   # missing values go right
    slots = (np.arange(n_trees) + 3) // 8 % 5
    total, parts = f.predict_sum_parts(X, slots, 5)
    assert np.array_equal(total, f.predict_sum(X))
    want = np.zeros((150, 5))
    values = f.leaf_values(X)
    for t in range(n_trees):
        want[:, slots[t]] += values[:, t]
    assert np.array_equal(parts, want)
    for i in (0, 7, 149):
        one, part = f.predict_sum_parts_one(X[i], slots, 5)
        assert one == f.predict_sum_one(X[i]) and np.array_equal(part, want[i])
    with pytest.raises(ValueError, match="slots"):
        f.predict_sum_parts(X, slots[:-1], 5)
    with pytest.raises(ValueError, match="slots"):
        f.predict_sum_parts(X, np.full(n_trees, 4), 2)


def test_block_sums_without_the_compiled_kernels(monkeypatch):
    rng = np.random.default_rng(0)
    f = _forest(rng, 40, depth=2, width=4)
    X = rng.random((20, 4))
    slots = np.arange(40) // 10
    want = f.predict_sum_parts(X, slots, 4)
    monkeypatch.setattr(forest_module, "sum_block_parts", None)
    monkeypatch.setattr(forest_module, "sum_one_parts", None)
    total, parts = f.predict_sum_parts(X, slots, 4)
    np.testing.assert_allclose(total, want[0], atol=1e-12)
    assert np.array_equal(parts, want[1])
    one, part = f.predict_sum_parts_one(X[3], slots, 4)
    assert np.array_equal(part, want[1][3])


def test_the_retire_blocks_benchmark_runs_both_ways():
    """``benchmarks/sgbdt_retire_blocks.py`` on a short stream with a small forest: one tree at a
    time and in blocks, each retiring trees, with accuracies and rates reported."""
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "benchmarks" / "sgbdt_retire_blocks.py"
    out = subprocess.run([sys.executable, str(script), "--records", "8000", "--functions", "1",
                          "--blocks", "1,20", "--max-trees", "200", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    runs = [json.loads(line) for line in out.stdout.splitlines()]
    assert [r["retire_block"] for r in runs] == [1, 20]
    one, blocks = runs
    assert one["trees"] == 200 and one["trees_retired"] == one["rounds"] - 200 > 0
    assert 181 <= blocks["trees"] <= 200
    assert blocks["trees_retired"] > 0 and one["rounds"] == blocks["rounds"]
    for r in runs:
        assert 0.5 < r["accuracy"] <= 1 and r["rows_per_s"] > 0


def test_the_pools_capacity_stops_at_the_age_cut_after_a_shrink():
    """The pool's arrays (and the block sums with them) grow by doubling, but past
    ``max_active`` only by a flush's margin: the pool never holds more. After a new generation
    shrank the pool it grows back to that capacity, not a doubling beyond it (a 1M-record
    soak's resident set stepped up by 50-60 MiB there)."""
    X, y = _stationary(3000)
    m = _model(retire_block=6, max_active=20_000)
    m.learn_stream(X, y)
    e = m.engine
    limit = 20_000 + 4096
    rows, targets = e.X[:2000].copy(), e.y[:2000].copy()

    def fill(to: int) -> None:
        while len(e) < to:
            e.add(rows, targets)
            assert e._X.shape[0] <= limit and e.blocks.view(len(e)).base.shape[0] == \
                e._X.shape[0]

    fill(19_000)
    e._remove(np.arange(len(e)) >= 5000)       # the pool shrinks (as at a new generation)
    assert e._X.shape[0] == 10_000              # to twice what is left
    fill(21_000)                                # 10,000 -> 20,000 -> the limit, not 40,000
    assert e._X.shape[0] == limit
    _check_invariants(m)
