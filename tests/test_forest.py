"""The shared tree structure, the record encoder and the random public splits."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpstream.models import Forest, InvalidRecordError, RecordEncoder
from dpstream.models.forest import complete_tree_layout
from dpstream.models.random_splits import feature_order, random_complete_tree
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
    enc = RecordEncoder(ADULT_SCHEMA)
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
