"""The DP feature grid in S-GBDT (models/boosting/sgbdt_grid.py, issue 51): when it is
released, what it costs in the individual filter, trees stored in raw units, and where no
grid is released."""

from __future__ import annotations

import pickle

import dp_accounting
import dp_accounting.rdp
import numpy as np
import pytest

from dpstream.models import SGBDTClassifier, SGBDTRegressor
from dpstream.models.boosting.hist_splits import grow_tree
from dpstream.models.boosting.random_splits import route_tree
from dpstream.models.boosting.sgbdt_grid import GRID_RECORDS, raw_tree, release_grid
from dpstream.models.grid import FeatureGrid

pytestmark = pytest.mark.filterwarnings("ignore::dpstream.models.params.SmallStreamWarning")

SCHEMA = {"features": {"a": {"type": "numeric", "min": 0.0, "max": 1.0},
                       "b": {"type": "numeric", "min": 0.0, "max": 100.0},
                       "c": {"type": "categorical", "values": ["x", "y", "z"]}},
          "target": {"type": "binary", "values": [0, 1]}}


def _rows(n: int, seed: int = 0) -> tuple[list[dict], list[int]]:
    rng = np.random.default_rng(seed)
    a = rng.beta(1.0, 25.0, n)            # skewed: most values below 0.1
    b = rng.uniform(0.0, 100.0, n)
    c = rng.choice(["x", "y", "z"], n)
    y = ((a > 0.04) ^ (b > 70.0)).astype(int)
    rows = [{"a": float(ai), "b": float(bi), "c": str(ci)}
            for ai, bi, ci in zip(a, b, c, strict=True)]
    return rows, y.tolist()


def _learn(model, X, y):
    for xi, yi in zip(X, y, strict=True):
        model.learn_one(xi, yi)
    return model


def test_the_grid_is_released_once_after_the_public_count_and_charged_in_the_filter():
    X, y = _rows(GRID_RECORDS + 400)
    # (the regular round schedule: a young phase's rounds exhaust more records before it)
    model = _learn(SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=0, grid_share=0.2,
                                   warmup_rounds=0),
                   X[:GRID_RECORDS - 1], y[:GRID_RECORDS - 1])
    assert model.engine.grid is None
    assert model.privacy_report()["feature_grid"]["released"] is False
    _learn(model, X[GRID_RECORDS - 1:], y[GRID_RECORDS - 1:])
    e = model.engine
    report = model.privacy_report()
    grid = report["feature_grid"]
    assert grid["released"] and grid["epsilon"] == pytest.approx(0.2)
    assert grid["records_in_release"] >= GRID_RECORDS - 64   # the pool then (few have left)
    assert grid["records_learned_at_release"] >= GRID_RECORDS   # (both curator-only)
    # the released quantiles follow the skewed feature, not its domain
    assert grid["quantiles_10_50_90"]["a"][1] < 0.15
    # charged from the same bound: the guarantee does not move
    assert report["epsilon"] <= 1.0 + 1e-9
    assert (e.filter.spent <= e.filter.bound + 1e-12).all()
    first = e.grid
    _learn(model, *_rows(600, seed=1))
    assert model.engine.grid is first   # once per model


def test_release_charges_exactly_the_records_that_can_afford_it():
    X, y = _rows(GRID_RECORDS)
    model = SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=0, grid_share=0.3)
    e = model.engine
    e.add(model._encoder.encode_many(X), np.array(y, dtype=float))
    poor = np.arange(len(e)) % 7 == 0
    e.filter.spent[poor] = e.filter.bound - 0.01   # cannot afford the release
    before = e.filter.spent.copy()
    release_grid(e)
    paid = e.filter.spent - before
    # the oracle: dp-accounting's RDP of two continuous Laplace histograms (scale 2 / 0.3
    # each); the release is discrete Laplace on a lattice, whose exact RDP
    # (noise.discrete_laplace_rdp, checked by brute force in test_discrete_noise) lies a hair
    # below the continuous one
    acc = dp_accounting.rdp.RdpAccountant(orders=[e.calibration.order])
    acc.compose(dp_accounting.LaplaceDpEvent(2 / 0.3), 2)
    assert e.grid_info["rdp"] == pytest.approx(acc._rdp[0], rel=1e-6)
    assert e.grid_info["rdp"] <= acc._rdp[0] * (1 + 1e-12)
    assert e.grid_info["rdp"] < 0.3   # below the pure epsilon
    assert np.allclose(paid[poor], 0.0)
    assert np.allclose(paid[~poor], e.grid_info["rdp"])
    assert e.grid_info["records"] == int((~poor).sum())
    assert e.split_memory == {}


def test_trees_grown_on_the_map_route_raw_rows_as_they_route_mapped_rows():
    X, _ = _rows(3000, seed=2)
    model = SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=0)
    enc = model._encoder
    raw = enc.encode_many(X)
    grid = FeatureGrid.release(raw, enc.numeric_columns(), epsilon=1.0, rng=0)
    mapped = grid.forward(raw)
    rng = np.random.default_rng(3)
    g = rng.uniform(-1, 1, raw.shape[0])
    for levels in (0, 2):
        tree = grow_tree(enc, depth=5, rng=rng, X=mapped, g=g, levels=levels, bins=8,
                         sigma=1.0)
        stored = raw_tree(grid, tree)
        assert not np.array_equal(stored.threshold, tree.threshold)
        np.testing.assert_array_equal(route_tree(stored, raw), route_tree(tree, mapped))


def test_predictions_and_checkpoints_do_not_need_the_grid():
    X, y = _rows(GRID_RECORDS + 800)
    model = _learn(SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=0), X, y)
    assert model.engine.grid is not None   # the classifier's default releases one
    copy = pickle.loads(pickle.dumps(model))
    Xt, _ = _rows(300, seed=5)
    assert [copy.predict_proba_one(x) for x in Xt] == [model.predict_proba_one(x) for x in Xt]
    # the stored forest's thresholds are raw: scoring through the forest alone agrees
    e = model.engine
    rows = model._encoder.encode_many(Xt)
    np.testing.assert_allclose(e.raw_scores(rows), [model._raw_one(x) for x in Xt])


def test_learn_stream_matches_learn_one_across_the_release():
    X, y = _rows(GRID_RECORDS + 500)
    one = _learn(SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=4), X, y)
    many = SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=4)
    many.learn_stream(X, y)
    assert many.engine.grid is not None
    np.testing.assert_array_equal(many.engine.grid.cdf, one.engine.grid.cdf)
    assert [many.predict_proba_one(x) for x in X[:200]] == \
        [one.predict_proba_one(x) for x in X[:200]]


@pytest.mark.parametrize("make", [
    lambda: SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=0, grid_share=0.0),
    lambda: SGBDTRegressor(schema={**SCHEMA, "target": {"type": "numeric", "min": 0,
                                                         "max": 1}}, epsilon=1.0, seed=0),
])
def test_no_grid_without_a_share(make):
    X, y = _rows(GRID_RECORDS + 300)
    model = _learn(make(), X, y)
    assert model.engine.grid is None
    assert model.privacy_report()["feature_grid"] == {
        "enabled": False, "released": False, "after_arrivals": GRID_RECORDS}


def test_batch_training_releases_no_grid():
    X, y = _rows(GRID_RECORDS + 500)
    model = SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=0, n_trees=5, extra_trees=0)
    model.learn_many(X, y)
    _learn(model, *_rows(300, seed=1))
    assert model.engine.grid is None
    assert model.privacy_report()["feature_grid"]["enabled"] is False


def test_a_grid_no_record_can_afford_is_not_released():
    X, y = _rows(GRID_RECORDS + 300)
    model = _learn(SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=0, grid_share=0.95,
                                   init_share=0.0), X, y)
    assert model.engine.grid is None
    grid = model.privacy_report()["feature_grid"]
    assert grid["enabled"] is False and "not below the filter's bound" in grid["skipped"]


def test_grid_share_is_validated():
    for bad in (-0.1, 1.5):
        with pytest.raises(ValueError, match="grid_share"):
            SGBDTClassifier(schema=SCHEMA, grid_share=bad)


def test_a_checkpoint_after_the_release_trains_on_exactly_as_the_original():
    """The pool's mapped columns are derived state: a restored engine maps its pool again
    and every later round is the one the original runs."""
    X, y = _rows(GRID_RECORDS + 1200, seed=7)
    # (split selection from the first round: the mapped columns serve it)
    model = _learn(SGBDTClassifier(schema=SCHEMA, epsilon=1.0, seed=3, split_after=0),
                   X[:GRID_RECORDS + 400], y[:GRID_RECORDS + 400])
    assert model.engine.gcols is not None
    copy = pickle.loads(pickle.dumps(model))
    assert copy.engine.gcols is None
    for m in (model, copy):
        _learn(m, X[GRID_RECORDS + 400:], y[GRID_RECORDS + 400:])
    probe = X[:300]
    assert [copy.predict_proba_one(x) for x in probe] == [model.predict_proba_one(x) for x in probe]
    np.testing.assert_array_equal(copy.engine.gcols, model.engine.gcols)
