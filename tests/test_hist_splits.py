"""Split selection from noisy gradient histograms (models/boosting/hist_splits.py) and its use in
the S-GBDT engine. The mechanism's privacy is tested end to end in test_statistical_privacy.py."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from schedule import sgbdt_rounds

from dpstream.models import SGBDTClassifier, SGBDTRegressor
from dpstream.models.boosting.hist_splits import _Cells, category_codes, grow_tree, histogram_sigma
from dpstream.models.boosting.random_splits import random_complete_tree
from dpstream.models.encoding import RecordEncoder

SCHEMA = {"features": {"a": {"type": "numeric", "min": 0, "max": 10},
                       "b": {"type": "numeric", "min": -1, "max": 1},
                       "c": {"type": "categorical", "values": ["u", "v", "w"]}},
          "target": {"type": "numeric", "min": 0, "max": 1}}


def _rows(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"a": float(a), "b": float(b), "c": str(c)}
            for a, b, c in zip(rng.uniform(0, 10, n), rng.uniform(-1, 1, n),
                               rng.choice(["u", "v", "w"], n), strict=True)]


def test_every_record_is_in_exactly_one_cell_of_every_feature():
    enc = RecordEncoder(SCHEMA)
    rows = _rows(50) + [{"a": None, "b": 0.5, "c": None}, {"a": 10.0, "b": -1.0, "c": "w"}]
    X = enc.encode_many(rows)
    cells = _Cells(enc, bins=4)
    lo = np.tile([0.0, -1.0], (len(X), 1))
    hi = np.tile([10.0, 1.0], (len(X), 1))
    cell = np.concatenate((cells.numeric_cells(X, lo, hi), category_codes(enc, X)), axis=1)
    index = cells.offset[None, :] + cell
    assert index.shape == (len(X), 3)
    for f in range(3):   # each feature's cells are its own block
        hi_edge = cells.offset[f + 1] if f + 1 < 3 else cells.size
        assert np.all((index[:, f] >= cells.offset[f]) & (index[:, f] < hi_edge))
    assert index[-2, 0] == cells.offset[0] + 4      # missing numeric: the extra cell
    assert index[-2, 2] == cells.offset[2] + 3      # missing category: the extra cell
    assert index[-1, 0] == cells.offset[0] + 3      # the domain's top edge is the last bin


@pytest.mark.parametrize("kind", ["numeric", "categorical"])
def test_noiseless_histograms_find_the_split_the_gradients_change_at(kind):
    enc = RecordEncoder(SCHEMA)
    X = enc.encode_many(_rows(2000, seed=1))
    a_col = enc.numeric_columns()[0][0]
    w_col = enc.categorical_columns()[0][2]
    if kind == "numeric":
        g = np.where(X[:, a_col] <= 2.5, 1.0, -0.3)
    else:
        g = np.where(X[:, w_col] <= 0.5, 1.0, -0.5)   # the record's value is "w"
    tree = grow_tree(enc, depth=3, rng=np.random.default_rng(0), X=X, g=g, levels=1, bins=8,
                     sigma=0.0)
    if kind == "numeric":
        assert (tree.feature[0], tree.threshold[0]) == (a_col, 2.5)
    else:
        assert (tree.feature[0], tree.threshold[0]) == (w_col, 0.5)


def test_levels_below_the_selected_ones_are_random_inside_the_narrowed_intervals():
    enc = RecordEncoder(SCHEMA)
    X = enc.encode_many(_rows(500))
    a_col = enc.numeric_columns()[0][0]
    g = np.where(X[:, a_col] <= 5.0, 1.0, -1.0)
    for seed in range(20):
        tree = grow_tree(enc, depth=4, rng=np.random.default_rng(seed), X=X, g=g, levels=1,
                         bins=4, sigma=0.0)
        assert (tree.feature[0], tree.threshold[0]) == (a_col, 5.0)
        for node in (1, 3, 4, 7, 8, 9, 10):          # the left subtree: a <= 5
            if tree.feature[node] == a_col:
                assert tree.threshold[node] <= 5.0
        for node in (2, 5, 6, 11, 12, 13, 14):       # the right subtree: a > 5
            if tree.feature[node] == a_col:
                assert tree.threshold[node] >= 5.0
        assert np.all(np.isinf(tree.threshold[tree.leaves]))


def test_without_rows_the_tree_is_random_and_selection_off_keeps_the_papers_draw():
    enc = RecordEncoder(SCHEMA)
    tree = grow_tree(enc, depth=3, rng=np.random.default_rng(3), levels=2)
    assert tree.feature.size == 15 and np.all(np.isinf(tree.threshold[tree.leaves]))
    # the engine's faithful mode (split_levels=0) draws exactly the paper's random tree
    m = SGBDTRegressor(schema=SCHEMA, split_levels=0, seed=4, min_leaf_records=0)
    m.learn_many(_rows(300), list(np.linspace(0, 1, 300)), rounds=0)
    e = m.engine
    state = e.rng.bit_generator.state
    prep = e.begin_round()
    tree = e.draw_tree(prep)
    e.rng.bit_generator.state = state
    e.begin_round()
    ref = random_complete_tree(e.encoder, depth=e.config.depth, rng=e.rng)
    assert np.array_equal(tree.feature, ref.feature)
    assert np.array_equal(tree.threshold, ref.threshold)
    assert "split_share" not in prep


def test_histogram_noise_and_leaf_share_keep_the_papers_round_cost():
    """1/z^2 of a record with gradient g: histograms (L F cells moved by g) + leaf count +
    leaf sum must equal the paper's 2 (r1 + (1 - r1) g^2) / sigma^2."""
    m = SGBDTClassifier(schema={"features": SCHEMA["features"],
                                "target": {"type": "binary", "values": [0, 1]}},
                        split_levels=2, split_share=0.4, seed=0)
    c = m._config
    sigma, F, L = 3.0, 3, 2
    s_h = histogram_sigma(sigma, levels=L, n_features=F, split_share=c.r_split)
    s_n = sigma / math.sqrt(2 * c.r1)
    s_s = sigma / math.sqrt(2 * (1 - c.r1 - c.r_split))
    for g in (0.0, 0.3, 1.0):
        composed = L * F * g * g / s_h ** 2 + 1 / s_n ** 2 + g * g / s_s ** 2
        assert composed == pytest.approx(2 * (c.r1 + (1 - c.r1) * g * g) / sigma ** 2)
    assert histogram_sigma(sigma, levels=0, n_features=F, split_share=0.3) == 0.0


def test_split_rounds_train_checkpoint_and_reset_on_a_new_generation():
    schema = {"features": SCHEMA["features"], "target": {"type": "binary", "values": [0, 1]}}
    rows = _rows(3000, seed=2)
    y = [int(r["a"] <= 4.0) for r in rows]
    # (split selection from the first arrival, no young phase: the defaults wait 4,000)
    m = SGBDTClassifier(schema=schema, epsilon=2.0, seed=1, split_after=0, warmup_rounds=0)
    assert m._config.split_levels == 1     # the classifier's stream default (two classes)
    for x, yi in zip(rows, y, strict=True):
        m.learn_one(x, yi)
    e = m.engine
    assert e.rounds > 50 and "root" in e.split_memory
    split = m.privacy_report()["split_selection"]
    assert split["levels"] == 1 and split["sigma_cell"] > m.engine.calibration.sigma_leaf
    a_col = m._encoder.numeric_columns()[0][0]
    roots = e.forest.feature[::e.forest.max_nodes][:len(e.forest)]
    assert np.mean(roots == a_col) > 0.5   # the informative feature is found
    acc = np.mean([m.predict_one(x) == yi for x, yi in zip(rows[:500], y[:500], strict=True)])
    assert acc > 0.85
    clone = pickle.loads(pickle.dumps(m))
    assert np.array_equal(clone.engine.split_memory["root"], e.split_memory["root"])
    e.new_generation(keep_from=e.records_added - 100)
    assert e.split_memory == {}


def test_old_checkpoints_load_with_selection_off():
    m = SGBDTRegressor(schema=SCHEMA, seed=0)
    m.learn_many(_rows(100), list(np.linspace(0, 1, 100)), rounds=2)
    state = m.__dict__.copy()
    for name in ("split_levels", "split_share", "split_bins", "split_decay"):
        state.pop(name)
    engine_state = m.engine.__dict__.copy()
    codes = engine_state["codes"]
    for name in ("split_memory", "codes"):
        engine_state.pop(name)
    old = SGBDTRegressor.__new__(SGBDTRegressor)
    old.__setstate__(state)
    old.engine.__setstate__(engine_state)
    assert old.split_levels == 0 and old.engine.split_memory == {}
    assert np.array_equal(old.engine.codes, codes)
    old.learn_many(_rows(50, seed=3), list(np.linspace(0, 1, 50)), rounds=1)


@pytest.mark.parametrize("name,value", [("split_levels", -1), ("split_share", 1.0),
                                        ("split_share", 0.0), ("split_bins", 1),
                                        ("split_decay", 1.0), ("split_decay", -0.1)])
def test_split_parameters_are_validated(name, value):
    with pytest.raises(ValueError, match=name):
        SGBDTClassifier(schema={"features": SCHEMA["features"],
                                "target": {"type": "binary", "values": [0, 1]}},
                        **{"split_levels": 1, name: value})


def test_the_first_initial_score_release_waits_for_enough_arrivals():
    m = SGBDTRegressor(schema=SCHEMA, epsilon=1.0, init_share=0.1, seed=0)   # 100 records
    assert m.engine.init_group == 100
    for x in _rows(99):
        m.learn_one(x, 0.2)
    assert m.engine.rounds == sgbdt_rounds(99, round_size=32, warmup_rounds=50)
    assert m.engine.init_score is None
    for x in _rows(40, seed=5):
        m.learn_one(x, 0.2)
    assert m.engine.init_score is not None and m.engine.init_records >= 100


def test_compiled_histograms_equal_the_numpy_reference():
    from dpstream.models.boosting import hist_splits as hs
    enc = RecordEncoder(SCHEMA)
    rows = _rows(400, seed=7) + [{"a": None, "b": 0.5, "c": None}]
    X = np.asfortranarray(enc.encode_many(rows))
    cells = _Cells(enc, bins=5)
    rng = np.random.default_rng(0)
    idx = np.sort(rng.choice(len(X), 200, replace=False))
    idx[-1] = len(X) - 1
    pos = rng.integers(0, 2, idx.size)
    g = rng.normal(size=idx.size)
    lo = np.array([[0.0, -1.0], [2.0, -0.5]])
    hi = np.array([[10.0, 1.0], [7.0, 0.25]])
    codes = hs.category_codes(enc, X)
    assert codes[-1, 0] == 3 and set(codes[:-1, 0]) == {0, 1, 2}
    ref = hs._level_histogram_numpy(cells, X, codes, idx, pos, g, lo, hi, 2)
    assert np.allclose(hs._level_histogram(cells, X, codes, idx, pos, g, lo, hi, 2), ref)
    assert ref.size == 2 * cells.size and np.isclose(ref.sum(), 3 * g.sum())


def test_privacy_report_shows_spend_by_age():
    m = SGBDTRegressor(schema=SCHEMA, epsilon=1.0, seed=0)
    for x in _rows(2500):
        m.learn_one(x, float(x["a"] > 5))
    by_age = m.privacy_report()["spend_by_age"]
    assert list(by_age) == ["0-1000", "1000-5000", "5000-20000", "20000+"]
    assert by_age["0-1000"]["records"] + by_age["1000-5000"]["records"] == len(m.engine)
    assert by_age["20000+"] == {"records": 0, "median": None}
    assert by_age["1000-5000"]["median"] > by_age["0-1000"]["median"] > 0   # older spent more


def test_without_numba_the_same_root_is_chosen(monkeypatch):
    from dpstream.models.boosting import hist_splits as hs
    enc = RecordEncoder(SCHEMA)
    X = enc.encode_many(_rows(1500, seed=4))
    a_col = enc.numeric_columns()[0][0]
    g = np.where(X[:, a_col] <= 6.25, 0.4, -0.6)
    compiled = grow_tree(enc, depth=4, rng=np.random.default_rng(1), X=X, g=g, levels=2,
                         bins=8, sigma=0.5)
    monkeypatch.setattr(hs, "njit", None)
    plain = grow_tree(enc, depth=4, rng=np.random.default_rng(1), X=X, g=g, levels=2,
                      bins=8, sigma=0.5)
    assert np.array_equal(compiled.feature[:3], plain.feature[:3])
    assert np.array_equal(compiled.threshold[:3], plain.threshold[:3])
    assert (compiled.feature[0], compiled.threshold[0]) == (a_col, 6.25)
    assert np.all(np.isinf(plain.threshold[plain.leaves]))
