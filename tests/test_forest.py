"""The shared tree structure, the record encoder and the random public splits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.models import Forest, InvalidRecordError, RecordEncoder
from dpstream.models.boosting.random_splits import feature_order, random_complete_tree
from dpstream.models.forest import complete_tree_layout
from dpstream.stream import ADULT_SCHEMA, load_adult


def _naive(forest: Forest, X: np.ndarray) -> np.ndarray:
    out = np.zeros(X.shape[0])
    for i in range(X.shape[0]):
        for t in range(len(forest)):
            g = t * forest.max_nodes
            for _ in range(forest.max_depth):
                v = X[i, forest.feature[g]]
                g = forest.left[g] + (0 if v <= forest.threshold[g] else 1)
            out[i] += forest.value[g]
    return out


@settings(max_examples=20, deadline=None)
@given(depth=st.integers(1, 6), n_trees=st.integers(1, 30), seed=st.integers(0, 10**6))
def test_vectorised_prediction_matches_a_naive_walk(depth, n_trees, seed):
    rng = np.random.default_rng(seed)
    enc = RecordEncoder(ADULT_SCHEMA)
    forest = Forest(max_nodes=complete_tree_layout(depth)[0], max_depth=depth)
    for _ in range(n_trees):
        tree = random_complete_tree(enc, depth=depth, rng=rng, numeric_weight=2.0)
        forest.add_tree(feature=tree.feature, threshold=tree.threshold, left=tree.left,
                        value=rng.normal(size=tree.feature.size))
    X, _, _ = load_adult("test")
    rows = enc.encode_many([X[i] for i in rng.integers(0, len(X), 40)])
    rows[::7, 1] = np.nan                                   # some missing ages
    np.testing.assert_allclose(forest.predict_sum(rows), _naive(forest, rows), atol=1e-12)
    leaf = forest.apply(0, rows)
    assert np.all(leaf >= complete_tree_layout(depth)[2][0])
    clone = Forest.from_dict(forest.to_dict())
    np.testing.assert_array_equal(clone.predict_sum(rows), forest.predict_sum(rows))


def test_random_trees_use_only_public_domains():
    enc = RecordEncoder(ADULT_SCHEMA)
    rng = np.random.default_rng(0)
    numeric = {col: (lo, hi) for col, lo, hi in enc.numeric_columns()}
    categorical = {c for cols in enc.categorical_columns() for c in cols}
    for _ in range(50):
        tree = random_complete_tree(enc, depth=4, rng=rng)
        _, internal, leaves = complete_tree_layout(4)
        for node in internal:
            f, t = int(tree.feature[node]), float(tree.threshold[node])
            if f in numeric:
                assert numeric[f][0] <= t <= numeric[f][1]
            else:
                assert f in categorical and t == 0.5 or (f == 0 and t == np.inf)
        assert np.all(tree.threshold[leaves] == np.inf) and np.all(tree.feature[leaves] == 0)
        assert np.all(tree.left[leaves] == leaves)


def test_cyclical_trees_split_on_one_feature():
    enc = RecordEncoder(ADULT_SCHEMA)
    order = feature_order(enc)
    age = order.index("age")
    tree = random_complete_tree(enc, depth=5, rng=np.random.default_rng(1), only_feature=age)
    _, internal, _ = complete_tree_layout(5)
    assert set(tree.feature[internal].tolist()) == {enc.columns.index("age")}
    # nested thresholds narrow: a left child's threshold lies below its parent's
    for node in internal[: internal.size // 2]:
        assert tree.threshold[2 * node + 1] <= tree.threshold[node] <= tree.threshold[2 * node + 2]


def test_encoder_rejects_with_the_field_name():
    enc = RecordEncoder(ADULT_SCHEMA, on_out_of_domain="error")
    with pytest.raises(InvalidRecordError) as info:
        enc.encode_one({"age": 200.0})
    assert info.value.field == "age"
    with pytest.raises(InvalidRecordError) as info:
        enc.encode_one({"workclass": 3})
    assert info.value.field == "workclass"
    with pytest.raises(InvalidRecordError, match="expected a number") as info:
        enc.encode_one({"age": None, "sex": "Male", "fnlwgt": "1"})
    assert info.value.field == "fnlwgt"
    assert enc.encode_one({"age": None, "sex": "Male"})[1] != 0.0      # None means missing


def test_dataframe_nan_means_missing():
    pd = pytest.importorskip("pandas")
    enc = RecordEncoder(ADULT_SCHEMA)
    df = pd.DataFrame([{"age": 30.0, "sex": "Male"}, {"age": np.nan, "sex": "Female"}])
    rows = enc.encode_many(df)
    assert rows[0, enc.columns.index("age")] == 30.0
    assert np.isnan(rows[1, enc.columns.index("age")])


_MIXED_SCHEMA = {
    "features": {"x": {"type": "numeric", "min": -5, "max": 5},
                 "n": {"type": "numeric", "min": 0, "max": 100},
                 "colour": {"type": "categorical", "values": ["red", "green", "blue"]},
                 "level": {"type": "categorical", "values": [1, 2, 3]},
                 "flag": {"type": "categorical", "values": [False, True]}},
    "target": {"type": "binary", "values": [0, 1]}}

_VALUES = {
    "x": st.one_of(st.floats(-5, 5), st.integers(-5, 5), st.none(),
                   st.sampled_from([6.0, float("nan"), True, "1", [1]])),
    "n": st.one_of(st.integers(0, 100), st.none(),
                   st.sampled_from([-1, 101, np.float64(3.5), 10**400])),
    "colour": st.one_of(st.sampled_from(["red", "green", "blue"]), st.none(),
                        st.sampled_from(["pink", 1, float("nan"), ("red",)])),
    "level": st.one_of(st.sampled_from([1, 2, 3, 2.0]), st.none(),
                       st.sampled_from([True, 4, "1", np.int64(3)])),
    "flag": st.one_of(st.booleans(), st.none(), st.sampled_from([0, 1, "True"])),
}


_VALID = {
    "x": st.one_of(st.floats(-5, 5), st.integers(-5, 5), st.none()),
    "n": st.one_of(st.integers(0, 100), st.none(), st.just(np.float64(3.5))),
    "colour": st.one_of(st.sampled_from(["red", "green", "blue"]), st.none()),
    "level": st.one_of(st.sampled_from([1, 2, 3, 2.0, np.int64(3)]), st.none()),
    "flag": st.one_of(st.booleans(), st.none()),
}


@st.composite
def _records(draw):
    rec = {}
    pool = _VALID if draw(st.integers(0, 2)) else _VALUES   # mostly valid records
    for name, values in pool.items():
        if draw(st.integers(0, 9)):            # a feature is absent now and then
            rec[name] = draw(values)
    if draw(st.integers(0, 30)) == 0:
        rec["extra"] = 1.0                     # an unknown feature
    return rec


@settings(max_examples=300, deadline=None)
@given(batch=st.lists(_records(), min_size=1, max_size=12))
def test_batch_encoding_matches_record_by_record(batch):
    pd = pytest.importorskip("pandas")
    """The vectorised batch path accepts and rejects exactly what ``encode_one`` does."""
    enc = RecordEncoder(_MIXED_SCHEMA)
    expected, error = [], None
    for rec in batch:
        try:
            expected.append(enc.encode_one(rec))
        except InvalidRecordError as exc:
            error = exc
            break
    if error is None:
        np.testing.assert_array_equal(enc.encode_many(batch), np.array(expected))
        np.testing.assert_array_equal(enc._encode_columns(batch, False), np.array(expected))
        frame = pd.DataFrame(batch, columns=sorted({k for r in batch for k in r}))
        np.testing.assert_array_equal(enc.encode_many(frame), np.array(expected))
    else:
        with pytest.raises(InvalidRecordError) as info:
            enc.encode_many(batch)
        assert (info.value.field, info.value.reason) == (error.field, error.reason)


def test_batch_encoding_of_adult_matches_and_dataframes_agree():
    pd = pytest.importorskip("pandas")
    enc = RecordEncoder(ADULT_SCHEMA)
    X, _, _ = load_adult("test")
    X = [dict(r) for r in X[:2000]]
    for r in X[::13]:
        r["age"] = None                        # missing values in the batch
    for r in X[::17]:
        r.pop("workclass")
    by_record = np.array([enc.encode_one(r) for r in X])
    np.testing.assert_array_equal(enc.encode_many(X), by_record)
    np.testing.assert_array_equal(enc.encode_many(pd.DataFrame(X)), by_record)
    np.testing.assert_array_equal(enc.encode_many(iter(X)), by_record)
    assert enc.encode_many([]).shape == (0, enc.n_columns)


@settings(max_examples=20, deadline=None)
@given(depth=st.integers(1, 6), n_trees=st.integers(0, 20), seed=st.integers(0, 10**6))
def test_single_row_prediction_matches_the_batch(depth, n_trees, seed):
    rng = np.random.default_rng(seed)
    enc = RecordEncoder(ADULT_SCHEMA)
    forest = Forest(max_nodes=complete_tree_layout(depth)[0], max_depth=depth)
    for _ in range(n_trees):
        tree = random_complete_tree(enc, depth=depth, rng=rng)
        forest.add_tree(feature=tree.feature, threshold=tree.threshold, left=tree.left,
                        value=rng.normal(size=tree.feature.size))
    X, _, _ = load_adult("test")
    rows = enc.encode_many([X[i] for i in rng.integers(0, len(X), 30)])
    rows[::3, rng.integers(1, enc.n_columns, 10)] = np.nan     # missing values go right
    batch = forest.predict_sum(rows)
    single = np.array([forest.predict_sum_one(r) for r in rows])
    np.testing.assert_allclose(single, batch, atol=1e-12)


def test_compact_rows_round_trip_exactly():
    enc = RecordEncoder(ADULT_SCHEMA)
    X, _, _ = load_adult("test")
    rows = enc.encode_many(X[:500])
    rows[::7, 1] = np.nan                                     # missing numeric
    start = enc.columns.index("workclass=Private")
    rows[::5, start:start + 9] = np.nan                       # missing categorical
    small = enc.compact(rows)
    assert small["numeric"].nbytes + small["codes"].nbytes < rows.nbytes / 5
    np.testing.assert_array_equal(enc.expand(small), rows)


def test_split_features_are_drawn_with_the_declared_weights():
    """Root split of many depth-1 trees: numeric features carry weight r, categorical ones 1."""
    enc = RecordEncoder(ADULT_SCHEMA)
    rng = np.random.default_rng(3)
    n = 20000
    roots = np.array([random_complete_tree(enc, depth=1, rng=rng, numeric_weight=2.0).feature[0]
                      for _ in range(n)])
    numeric_cols = [c for c, _, _ in enc.numeric_columns()]
    total = 2.0 * len(numeric_cols) + len(enc.categorical_columns())
    for col in numeric_cols:                            # each numeric feature: 2 / total
        p = 2.0 / total
        assert abs(np.mean(roots == col) - p) < 4 * np.sqrt(p * (1 - p) / n)
    for cols in enc.categorical_columns():              # each categorical feature: 1 / total
        p = 1.0 / total
        assert abs(np.mean(np.isin(roots, cols)) - p) < 4 * np.sqrt(p * (1 - p) / n)


def _python_tree(enc, depth, rng, numeric_weight=1.0, only_feature=None):
    from dpstream.models.boosting.random_splits import _draw_python

    n_nodes, internal, _ = complete_tree_layout(depth)
    feature, threshold = np.zeros(n_nodes, dtype=np.int32), np.full(n_nodes, np.inf)
    _draw_python(enc, rng.random(2 * internal.size).tolist(), internal, numeric_weight,
                 only_feature, feature, threshold)
    return feature, threshold


@settings(max_examples=60, deadline=None)
@given(depth=st.integers(0, 7), weight=st.sampled_from([1.0, 0.3, 2.0, 0.0, -1.0, 1e-9, 3]),
       only=st.sampled_from([None, 0, 4, 13, 14, -1]), small=st.booleans(),
       seed=st.integers(0, 10**6))
def test_compiled_tree_draw_replays_the_python_draw(depth, weight, only, small, seed):
    """Same generator state, same tree: the numba draw and the reference Python draw agree
    bit for bit (non-integer weights, one-feature trees, domains that run out included)."""
    schema = ADULT_SCHEMA if not small else {
        "features": {"x": {"type": "numeric", "min": 0.0, "max": 1e-300},
                     "c": {"type": "categorical", "values": ["a", "b", "c"]},
                     "d": {"type": "categorical", "values": ["only"]}},
        "target": {"type": "binary", "values": [False, True]}}
    enc = RecordEncoder(schema)
    tree = random_complete_tree(enc, depth=depth, rng=np.random.default_rng(seed),
                                numeric_weight=weight, only_feature=only)
    feature, threshold = _python_tree(enc, depth, np.random.default_rng(seed), weight, only)
    np.testing.assert_array_equal(tree.feature, feature)
    np.testing.assert_array_equal(tree.threshold, threshold)


def test_compiled_weight_sum_is_pythons_sum():
    from dpstream.models.boosting._draw_kernels import PY_SUM_COMPENSATED, py_sum

    rng = np.random.default_rng(0)
    for _ in range(2000):
        v = rng.choice([0.0, 1.0, 0.3, 1e-9, 2.0, 0.1, 1e16, rng.random()], rng.integers(0, 20))
        assert py_sum(v, v.size, PY_SUM_COMPENSATED) == sum(v.tolist())


@pytest.mark.parametrize("order", ["C", "F"])
def test_compiled_routing_matches_the_numpy_routing(order):
    """route_block / sum_block / sum_one against the forest's numpy paths, with padded
    shallower trees, missing values and several roots."""
    from dpstream.models import forest as forest_mod

    rng = np.random.default_rng(7)
    enc = RecordEncoder(ADULT_SCHEMA)
    forest = Forest(max_nodes=complete_tree_layout(5)[0], max_depth=5)
    # 40 complete trees of one depth (a lane group walked with implicit children), then
    # mixed depths (the generic walk), and a tree that is not a complete heap
    for i in range(110):
        tree = random_complete_tree(enc, depth=5 if i < 40 else 1 + i % 5, rng=rng)
        forest.add_tree(feature=tree.feature, threshold=tree.threshold, left=tree.left,
                        value=rng.normal(size=tree.feature.size))
    forest.add_tree(feature=[3, 0, 5, 0, 0], threshold=[40.0, np.inf, 0.5, np.inf, np.inf],
                    left=[1, 1, 3, 3, 4], value=rng.normal(size=5))
    assert forest.depths[:3].tolist() == [5, 5, 5] and forest.depths[forest.n_trees - 1] == -1
    X, _, _ = load_adult("test")
    rows = enc.encode_many(X[:300])
    rows[::3, rng.integers(1, enc.n_columns, 10)] = np.nan
    rows = np.asarray(rows, order=order)
    nodes, sums = forest.nodes(rows), forest.predict_sum(rows)
    ones = [forest.predict_sum_one(r) for r in rows[:40]]
    leaf = forest.apply(3, rows)
    leaves = [forest.apply(t, rows) for t in (3, 60, forest.n_trees - 1)]
    names = ("route_block", "route_complete", "sum_block", "sum_one")
    saved = [getattr(forest_mod, name) for name in names]
    try:
        for name in names:
            setattr(forest_mod, name, None)
        np.testing.assert_array_equal(nodes, forest.nodes(rows))
        for t, leaf in zip((3, 60, forest.n_trees - 1), leaves, strict=True):
            np.testing.assert_array_equal(leaf, forest.apply(t, rows))
        np.testing.assert_allclose(sums, forest.predict_sum(rows), rtol=0, atol=1e-12)
        np.testing.assert_allclose(ones, [forest.predict_sum_one(r) for r in rows[:40]],
                                   rtol=0, atol=1e-12)
    finally:
        for name, kernel in zip(names, saved, strict=True):
            setattr(forest_mod, name, kernel)


def test_tree_depths_follow_retirement_and_are_rebuilt_for_old_forests():
    """Each tree's complete depth moves with it when older trees retire; it is never saved
    (a saved copy could disagree with ``left``) but derived again on load, also for a forest
    saved before depths existed."""
    import pickle

    rng = np.random.default_rng(3)
    enc = RecordEncoder(ADULT_SCHEMA)
    forest = Forest(max_nodes=complete_tree_layout(4)[0], max_depth=4)
    for i in range(30):   # past the initial capacity of 8 trees
        tree = random_complete_tree(enc, depth=1 + i % 4, rng=rng)
        forest.add_tree(feature=tree.feature, threshold=tree.threshold, left=tree.left,
                        value=rng.normal(size=tree.feature.size))
    assert forest.depths[:30].tolist() == [1 + i % 4 for i in range(30)]
    forest.drop_oldest(5)
    assert forest.depths[:25].tolist() == [1 + i % 4 for i in range(5, 30)]
    rows = enc.encode_many(load_adult("test")[0][:200])
    expected = forest.predict_sum(rows)
    assert "depths" not in forest.__getstate__()
    back = pickle.loads(pickle.dumps(forest))
    assert back.depths[:25].tolist() == forest.depths[:25].tolist()
    np.testing.assert_array_equal(back.predict_sum(rows), expected)
    old = Forest.__new__(Forest)
    old.__setstate__({k: v for k, v in forest.__dict__.items() if k != "depths"})
    assert old.depths[:25].tolist() == forest.depths[:25].tolist()
    np.testing.assert_array_equal(old.predict_sum(rows), expected)
