"""The window forests' compiled kernels (models/windows/window_kernels.py) against their numpy
references: the same leaf keys, the same trained tables and the same scores, bit for bit, with
missing values, categorical and numeric attributes, public records (RDT#'s centers) and a
schema without categorical attributes."""

from __future__ import annotations

import numpy as np
import pytest

from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
)
from dpstream.models.encoding import RecordEncoder
from dpstream.models.windows import (
    _trie_kernels,
    greedy_forest,
    median_forest,
    random_forest,
    random_trees,
    window_kernels,
)

MIXED = {"features": {"a": {"type": "numeric", "min": 0, "max": 10},
                      "b": {"type": "numeric", "min": -5, "max": 5},
                      "c": {"type": "categorical", "values": ["p", "q", "r"]},
                      "d": {"type": "numeric", "min": 0, "max": 1},
                      "e": {"type": "categorical", "values": list("uvwxyz")},
                      "f": {"type": "categorical", "values": ["m", "n"]}},
         "target": {"type": "categorical", "values": ["k0", "k1", "k2"]}}
NUMERIC = {"features": {n: {"type": "numeric", "min": 0, "max": 1} for n in "ghij"},
           "target": {"type": "binary", "values": [False, True]}}


def _records(schema: dict, n: int, seed: int) -> tuple[list[dict], list]:
    """Random records with about one value in ten missing, labels depending on the values."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for _ in range(n):
        x = {}
        for name, f in schema["features"].items():
            if rng.random() < 0.1:
                continue
            if f["type"] == "numeric":
                x[name] = float(rng.uniform(f["min"], f["max"]))
            else:
                x[name] = f["values"][int(rng.integers(len(f["values"])))]
        score = sum(v if isinstance(v, float) else len(v) for v in x.values())
        values = schema["target"]["values"]
        y.append(values[int(score * 7) % len(values)])
        X.append(x)
    return X, y


def _numpy_only(monkeypatch) -> None:
    monkeypatch.setattr(random_trees, "_wk", None)
    monkeypatch.setattr(median_forest, "_wk", None)


MODELS = [
    (RandomDecisionForestClassifier, {"n_trees": 20}, False),
    (RDTClassifier, {"n_trees": 5, "secondary_trees": 12}, True),
    (RDTClassifier, {"n_trees": 4, "combine": "sum", "disjoint": True}, False),
    (GreedyForestClassifier, {"n_trees": 6, "max_depth": 4}, False),
    (MedianForestClassifier, {"n_trees": 5}, False),
]


@pytest.mark.parametrize("schema", [MIXED, NUMERIC], ids=["mixed", "numeric"])
@pytest.mark.parametrize("cls, params, public", MODELS,
                         ids=[f"{c.__name__}-{i}" for i, (c, _, _) in enumerate(MODELS)])
def test_compiled_scores_equal_numpy(monkeypatch, schema, cls, params, public):
    X, y = _records(schema, 900, seed=3)
    test, _ = _records(schema, 300, seed=4)

    def trained():
        model = cls(schema=schema, epsilon=1.0, window_size=400, seed=5, **params)
        for s in range(0, 800, 400):   # two windows (the second with public records for RDT#)
            flags = [public and s > 0 and i % 3 == 0 for i in range(400)]
            model.learn_many(X[s:s + 400], y[s:s + 400], public=flags)
        return model

    assert random_trees._wk is not None and median_forest._wk is not None   # numba present
    model = trained()
    if public:
        assert len(model._kept()[1]) > 0      # RDT#: centers, so nearest-center search runs
    Xe = model._encoder.encode_many(test)
    compiled = model._scores(Xe)
    one = np.array([model._score_row(row) for row in Xe[:20]])
    compiled_pred = list(model.predict_many(test))
    _numpy_only(monkeypatch)
    # equal up to the order of float additions (RDT sums one group per window's domain)
    np.testing.assert_allclose(model._scores(Xe), compiled, rtol=0, atol=1e-12)  # kernels
    np.testing.assert_allclose(one, compiled[:20], rtol=0, atol=1e-12)
    twin = trained()                                          # training through numpy walks
    np.testing.assert_allclose(twin._scores(Xe), compiled, rtol=0, atol=1e-12)
    assert list(twin.predict_many(test)) == compiled_pred
    assert compiled.sum() > 0


@pytest.mark.parametrize("schema", [MIXED, NUMERIC], ids=["mixed", "numeric"])
def test_leaf_keys_and_routing_matrix_equal_numpy(monkeypatch, schema):
    X, _ = _records(schema, 400, seed=7)
    enc = RecordEncoder(schema)
    Xe = enc.encode_many(X)
    trees = random_trees.ImplicitRandomTrees(enc, depth=6, secret=11)
    V = trees.matrix(Xe)
    grid = trees.leaf_keys(V, np.arange(9))
    pairs = trees.leaf_keys(V, np.arange(400) % 5, rows=np.arange(400), depth=3)
    _numpy_only(monkeypatch)
    V0 = trees.matrix(Xe)
    assert np.array_equal(V, V0, equal_nan=True) and np.isnan(V).any()
    assert np.array_equal(grid, trees.leaf_keys(V0, np.arange(9)))
    assert np.array_equal(pairs, trees.leaf_keys(V0, np.arange(400) % 5, rows=np.arange(400),
                                                 depth=3))
    assert np.unique(grid).size > 9   # the records do spread over leaves


def test_greedy_codes_equal_numpy(monkeypatch):
    X, _ = _records(MIXED, 300, seed=9)
    model = GreedyForestClassifier(schema=MIXED, n_bins=3, seed=0)
    Xe = model._encoder.encode_many(X)
    compiled = model.codes(Xe)
    _numpy_only(monkeypatch)
    assert np.array_equal(compiled, model.codes(Xe))


def test_hash_slots_find_every_key_and_only_them():
    keys = random_trees.root_keys(3, np.random.default_rng(0).permutation(3000))
    keys = np.r_[keys, keys[:10]]                 # a repeated key keeps its first index
    slots = window_kernels.hash_slots(keys)
    assert slots.size >= 2 * keys.size and slots.size & (slots.size - 1) == 0
    found = [window_kernels._probe(keys, slots, k) for k in keys]
    assert found == list(range(3000)) + list(range(10))
    unknown = random_trees.root_keys(4, np.arange(300))
    assert all(window_kernels._probe(keys, slots, k) == -1 for k in unknown)
    assert window_kernels._probe(keys[:0], window_kernels.hash_slots(keys[:0]), keys[0]) == -1


@pytest.mark.parametrize("cls, module, params", [
    (RandomDecisionForestClassifier, random_forest, {"n_trees": 30}),
    (GreedyForestClassifier, greedy_forest, {"n_trees": 12, "max_depth": 5}),
], ids=["random-forest", "greedy-forest"])
def test_batch_tries_equal_row_walks(monkeypatch, cls, module, params):
    """A batch is scored tree by tree through a trie of the nodes it reaches
    (_trie_kernels.trie_scores): the same scores, bit for bit, as walking each row alone and
    as the numpy walks, over a few thousand rows, in chunks and with node tables that grow."""
    X, y = _records(MIXED, 3000, seed=11)
    test, _ = _records(MIXED, 3000, seed=12)
    model = cls(schema=MIXED, epsilon=1.0, window_size=1500, seed=2, **params)
    model.learn_many(X[:1500], y[:1500])
    model.learn_many(X[1500:], y[1500:])
    Xe = model._encoder.encode_many(test)
    assert Xe.shape[0] >= module._BATCH
    batch = model._scores(Xe)
    calls = []
    real = _trie_kernels.trie_scores

    def small(*args, **kwargs):   # the same trees in chunks of 700 rows, tables from 64 nodes
        calls.append(1)
        return real(*args, **kwargs, chunk=700, capacity=64)

    monkeypatch.setattr(_trie_kernels, "trie_scores", small)
    assert np.array_equal(model._scores(Xe), batch) and calls

    def threaded(*args, **kwargs):   # the trees shared by three threads: the same sums
        calls.append(3)
        return real(*args, **kwargs, threads=3)

    monkeypatch.setattr(_trie_kernels, "trie_scores", threaded)
    np.testing.assert_allclose(model._scores(Xe), batch, rtol=1e-12, atol=0)
    assert calls[-1] == 3
    monkeypatch.setattr(module, "_BATCH", 10**9)           # every row walked alone
    assert np.array_equal(model._scores(Xe), batch)
    _numpy_only(monkeypatch)
    assert np.array_equal(model._scores(Xe), batch)
    assert batch.sum(axis=1).min() > 0


@pytest.mark.parametrize("path", ["compiled", "numpy"])
def test_rdt_window_weights_scale_each_windows_cells(monkeypatch, path):
    """RDT: each tree's cell counts enter its ensemble's sum times its window's weight
    (window_weights), in the compiled kernel and the numpy walk alike."""
    X, y = _records(MIXED, 1100, seed=15)
    test, _ = _records(MIXED, 200, seed=16)
    model = RDTClassifier(schema=MIXED, epsilon=1.0, n_trees=3, window_size=1000, warmup=None,
                          drift=False, seed=4)
    model.learn_many(X[:1000], y[:1000])
    model.learn_many(X[1000:], y[1000:])
    assert model.window_weights() == [1.0, 0.1]
    V = model._trees.matrix(model._encoder.encode_many(test))

    def primary(weights):
        monkeypatch.setattr(type(model), "window_weights", lambda self: weights)
        model._serving = None
        trees, centers, cells, plan = model._serve_rdt()
        if path == "compiled":
            return model._compiled_cells(V, plan[0], centers, cells)
        return model._cell_values(V, [t for t in trees if t.primary], centers, cells)

    if path == "numpy":
        _numpy_only(monkeypatch)
    weighted = primary([1.0, 0.1])
    first, second = primary([1.0, 0.0]), primary([0.0, 1.0])
    assert np.allclose(weighted, first + 0.1 * second)
    assert not np.allclose(weighted, first + second)


@pytest.mark.parametrize("cls, module, params", [
    (RandomDecisionForestClassifier, random_forest, {"n_trees": 8, "min_tree_records": None}),
    (GreedyForestClassifier, greedy_forest, {"n_trees": 6, "max_depth": 4,
                                             "min_tree_records": None}),
], ids=["random-forest", "greedy-forest"])
@pytest.mark.parametrize("path", ["batch", "row", "numpy"])
def test_window_weights_scale_each_windows_votes(monkeypatch, cls, module, params, path):
    """Two windows of 1000 and 100 labeled records vote with weights 1 and 0.1
    (window_weights): the scores are the first window's votes plus a tenth of the second's,
    in the batch tries, the per-row kernels and the numpy walks alike."""
    X, y = _records(MIXED, 1100, seed=13)
    test, _ = _records(MIXED, 400, seed=14)
    model = cls(schema=MIXED, epsilon=1.0, window_size=1000, warmup=None, drift=False, seed=3,
                **params)
    model.learn_many(X[:1000], y[:1000])
    model.learn_many(X[1000:], y[1000:])
    assert model.window_weights() == [1.0, 0.1]
    if path != "batch":
        monkeypatch.setattr(module, "_BATCH", 10**9)
    if path == "numpy":
        _numpy_only(monkeypatch)
    Xe = model._encoder.encode_many(test)
    weighted = model._scores(Xe)
    n = params["n_trees"]
    model._serving = None
    model._kept()
    model._serving = model._serving[:3] + (np.r_[np.ones(n), np.zeros(n)],) + model._serving[4:5]
    first = model._scores(Xe)
    model._serving = model._serving[:3] + (np.r_[np.zeros(n), np.ones(n)],) + model._serving[4:5]
    second = model._scores(Xe)
    assert np.allclose(first.sum(axis=1), n) and np.allclose(second.sum(axis=1), n)
    assert np.allclose(weighted, first + 0.1 * second)
    assert not np.allclose(weighted, first + second)   # equal weights would score otherwise


def test_rdt_rows_split_among_threads_score_bit_for_bit(monkeypatch):
    """Large RDT batches split their rows among threads (_trie_kernels.rows_in_threads; the
    compiled kernel releases the GIL): every row is scored alone, so the scores are the same,
    bit for bit, as on one thread."""
    X, y = _records(MIXED, 2000, seed=15)
    test, _ = _records(MIXED, 1500, seed=16)
    model = RDTClassifier(schema=MIXED, epsilon=1.0, window_size=1000, seed=4, n_trees=4)
    model.learn_many(X, y)
    Xe = model._encoder.encode_many(test)
    one = model._scores(Xe)
    used = []

    def three(rows, trees, min_rows=8192):
        used.append(rows)
        return 3

    monkeypatch.setattr(_trie_kernels, "threads_for", three)
    assert np.array_equal(model._scores(Xe), one) and used
    assert one.sum() > 0


def test_the_kernels_bucket_keys_as_the_numpy_twin():
    """window_kernels._bucket (compiled) and buckets.bucket_keys share their salt and level
    tags: every bucket key the kernels look up is one the tables hold."""
    from dpstream.models.windows import buckets, window_kernels
    from dpstream.models.windows.random_trees import root_keys

    assert window_kernels._BSALT == buckets.BUCKET_SALT
    roots = root_keys(3, np.arange(4))
    keys = np.arange(1000, 1004, dtype=np.uint64)
    for level, tag in ((0, window_kernels._TAG0), (2, np.uint64(3) << window_kernels._S40)):
        assert tag == buckets.bucket_tag(level)
        got = [window_kernels._bucket(r, k, np.uint64(64), tag) for r, k in zip(roots, keys,
                                                                                strict=True)]
        assert np.array_equal(got, buckets.bucket_keys(roots, keys, 64, level))
    assert window_kernels._bucket(roots[0], keys[0], np.uint64(0), window_kernels._TAG0) \
        == keys[0]
