"""Young streams (issue 64): the schedules a young generation follows — S-GBDT's young phase
(``warmup_rounds``, ``warmup_records``, ``split_after``) and the window forests' small
doubling warm-up with the feature grid's floor — are functions of public counts, keep every
record within its budget, survive a checkpoint, and predict a young real stream well."""

from __future__ import annotations

import json
import math
import pickle

import numpy as np
import pytest
from river import datasets

from dpstream.connectors.safe_state import decode, encode
from dpstream.models import (
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
    SGBDTClassifier,
    SGBDTRegressor,
)
from dpstream.models.boosting import sgbdt_engine

SCHEMA = {"features": {"a": {"type": "numeric", "min": 0, "max": 10},
                       "b": {"type": "numeric", "min": -1, "max": 1},
                       "c": {"type": "categorical", "values": ["x", "y", "z"]}},
          "target": {"type": "binary", "values": [False, True]}}


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    X = [{"a": float(rng.uniform(0, 10)), "b": float(rng.uniform(-1, 1)),
          "c": str(rng.choice(["x", "y", "z"]))} for _ in range(n)]
    y = [bool(x["a"] + 3 * x["b"] > 5) for x in X]
    return X, y


def _round_arrivals(model, X, y) -> list[int]:
    seen = []
    for i, (xi, yi) in enumerate(zip(X, y, strict=True), start=1):
        before = model.training_rounds
        model.learn_one(xi, yi)
        if model.training_rounds != before:
            seen.append(i)
    return seen


# ------------------------------------------------------------------ S-GBDT's young phase
def test_a_young_generation_rounds_every_ceil_a_over_warmup_rounds_arrivals():
    X, y = _rows(3000)
    m = SGBDTClassifier(schema=SCHEMA, seed=0, warmup_rounds=100, warmup_records=2000,
                        drift=False)
    seen = _round_arrivals(m, X, y)
    # the documented schedule: a round when the arrivals since the last reach the interval
    # of the arrivals so far, ceil(a / 100) capped at round_size (32), then round_size
    expect, last = [], 0
    for a in range(1, 3001):
        step = min(32, math.ceil(a / 100)) if a < 2000 else 32
        if a - last >= step:
            expect.append(a)
            last = a
    assert seen == expect
    assert seen[:100] == list(range(1, 101))          # the first hundred: a round each
    assert np.diff([a for a in seen if a > 2100]).tolist() == [32] * (len(
        [a for a in seen if a > 2100]) - 1)
    off = SGBDTClassifier(schema=SCHEMA, seed=0, warmup_rounds=0, drift=False)
    assert _round_arrivals(off, X[:200], y[:200]) == list(range(32, 201, 32))


def test_the_young_trees_retire_evenly_after_the_young_phase_and_the_filter_holds():
    X, y = _rows(1000 + sgbdt_engine.YOUNG_FADE + 640, seed=1)
    m = SGBDTClassifier(schema=SCHEMA, seed=1, warmup_rounds=200, warmup_records=1000,
                        drift=False, max_trees=None)
    for xi, yi in zip(X[:1000], y[:1000], strict=True):
        m.learn_one(xi, yi)
    e = m.engine
    young = e.trees_retired + len(e.forest)       # every tree so far grew in the young phase
    assert young > 200 and e.young is None and e.trees_retired == 0
    retired = []
    for xi, yi in zip(X[1000:], y[1000:], strict=True):
        m.learn_one(xi, yi)
        retired.append(e.trees_retired)
    first, end = e.young[1], e.young[2]
    assert (first, end) == (0, young)
    # monotone, never more than the schedule allows, and all of them once the fade is over
    assert all(a <= b for a, b in zip(retired, retired[1:], strict=False))
    assert e.trees_retired == young
    assert e.forest.n_trees == e.rounds - young       # the regular trees all stay
    assert (e.filter.spent <= e.filter.bound + 1e-12).all()
    assert m.privacy_report()["epsilon"] <= 1.0 + 1e-12


def test_a_drift_generation_restarts_the_young_phase():
    X, y = _rows(2600, seed=2)
    m = SGBDTClassifier(schema=SCHEMA, seed=2, warmup_rounds=100, warmup_records=2000)
    for xi, yi in zip(X[:2400], y[:2400], strict=True):
        m.learn_one(xi, yi)
    assert m._round_interval() == 32 and m.engine.young is not None
    m._new_generation()                              # what a detected change does
    e = m.engine
    # the last drift window's records (600 at epsilon 1) are the new generation's first
    # arrivals: its rounds come every ceil(600 / 100) arrivals, and its young trees count
    # from its first tree
    a = e.records_added - e.generation_start
    assert a == m._drift.window - 1 and m._round_interval() == math.ceil(a / 100)
    assert e.gen_first == e.trees_retired
    seen = _round_arrivals(m, X[2400:2600], y[2400:2600])
    assert np.diff(seen).max() <= math.ceil((a + 200) / 100)


def test_split_selection_waits_for_split_after_arrivals():
    X, y = _rows(1400, seed=3)
    m = SGBDTClassifier(schema=SCHEMA, seed=3, split_after=1000, drift=False)
    for xi, yi in zip(X[:990], y[:990], strict=True):
        m.learn_one(xi, yi)
    assert m.engine.split_memory == {}                # random trees only
    for xi, yi in zip(X[990:], y[990:], strict=True):
        m.learn_one(xi, yi)
    assert m.engine.split_memory != {}                # noisy histograms from then on


def test_the_young_phase_survives_a_checkpoint():
    X, y = _rows(8400, seed=4)
    a = SGBDTClassifier(schema=SCHEMA, seed=4, warmup_rounds=200, warmup_records=1500)
    for xi, yi in zip(X[:3200], y[:3200], strict=True):   # inside the fade
        a.learn_one(xi, yi)
    assert 0 < a.engine.trees_retired < a.engine.young[2]
    b = pickle.loads(pickle.dumps(a))
    tree, arrays = encode(a)                              # the service's checkpoint format
    safe = decode(json.loads(json.dumps(tree)), [x.copy() for x in arrays])   # (as if read)
    assert (safe.engine.young, safe.engine.gen_first) == (a.engine.young, a.engine.gen_first)
    for m in (a, b, safe):
        for xi, yi in zip(X[3200:], y[3200:], strict=True):
            m.learn_one(xi, yi)
    # the fade goes on where it was: every young tree retired (in whole blocks of 100: the
    # last one also held a few regular trees), bit for bit after a pickle
    end = a.engine.young[2]
    assert a.engine.trees_retired == b.engine.trees_retired == safe.engine.trees_retired
    assert end <= a.engine.trees_retired < end + 100
    assert np.array_equal(a.engine.filter.spent, b.engine.filter.spent)
    assert [a.predict_proba_one(x) for x in X[:200]] == [b.predict_proba_one(x) for x in X[:200]]
    # the safe format too: the same drift releases, filter and predictions, bit for bit
    assert np.array_equal(a.engine.filter.spent, safe.engine.filter.spent)
    assert a._drift.releases == safe._drift.releases > 0
    assert [a.predict_proba_one(x) for x in X[:200]] == [safe.predict_proba_one(x)
                                                         for x in X[:200]]


def test_an_engine_from_before_young_phases_retires_nothing_it_kept():
    X, y = _rows(3000, seed=5)
    m = SGBDTClassifier(schema=SCHEMA, seed=5, warmup_rounds=0, drift=False)
    for xi, yi in zip(X[:2000], y[:2000], strict=True):
        m.learn_one(xi, yi)
    state = m.engine.__dict__.copy()
    for name in ("young", "gen_first"):
        del state[name]
    old = sgbdt_engine.SGBDTEngine.__new__(sgbdt_engine.SGBDTEngine)
    old.__setstate__(state)
    assert old.young == [0, 0, 0]
    m._engine = old
    m.warmup_rounds, m.warmup_records = None, 1000   # even if the model turns it on now
    m._config = m._validate()
    old.config = m._config
    for xi, yi in zip(X[2000:], y[2000:], strict=True):
        m.learn_one(xi, yi)
    assert old.trees_retired == 0


def test_the_young_parameters_are_validated():
    with pytest.raises(ValueError, match="warmup_rounds"):
        SGBDTClassifier(schema=SCHEMA, warmup_rounds=-1)
    with pytest.raises(ValueError, match="warmup_records"):
        SGBDTClassifier(schema=SCHEMA, warmup_records=0)
    with pytest.raises(ValueError, match="split_after"):
        SGBDTClassifier(schema=SCHEMA, split_after=-5)
    reg = SGBDTRegressor(schema={**SCHEMA, "target": {"type": "numeric", "min": 0, "max": 1}})
    assert reg._config.warmup_records == 2000 and reg.warmup_rounds == 50


# --------------------------------------------------------- window forests' small warm-up
@pytest.mark.parametrize("cls", [RandomDecisionForestClassifier, RDTClassifier])
def test_the_grid_waits_for_a_window_of_grid_min_records_and_older_windows_retire(cls):
    X, y = _rows(2000, seed=6)
    m = cls(schema=SCHEMA, epsilon=1.0, seed=6, warmup=125, drift=False, max_windows=10)
    closes = []
    for xi, yi in zip(X, y, strict=True):
        before = m.windows_closed
        m.learn_one(xi, yi)
        if m.windows_closed != before:
            closes.append((m.windows_closed, m._grid is not None, len(m._windows)))
    # windows of 125, 250, 500 close without a grid; the 1,000-record one releases it, and
    # the three windows grown on raw rows retire once it has trees (one grid scores them all)
    assert closes == [(1, False, 1), (2, False, 2), (3, False, 3), (4, True, 1)]
    grid = m.privacy_report()["feature_grid"]
    assert grid["released"] and grid["window"] == 3 and grid["records"] == 1000
    assert m.privacy_report()["epsilon"] <= 1.0 + 1e-12


def test_a_median_forest_keeps_its_warm_up_windows_its_trees_take_raw_thresholds():
    X, y = _rows(2000, seed=7)
    m = MedianForestClassifier(schema=SCHEMA, epsilon=1.0, seed=7, drift=False)
    for xi, yi in zip(X, y, strict=True):
        m.learn_one(xi, yi)
    assert [w.records for w in m._windows] == [125, 250, 500, 1000]
    assert m._grid is not None and m.privacy_report()["epsilon"] <= 1.0 + 1e-12


# ---------------------------------------------------------------- a young real stream
def _phishing_prequential(cls, seed: int) -> float:
    rows = list(datasets.Phishing())
    schema = {"features": {k: {"type": "numeric", "min": 0, "max": 1} for k in rows[0][0]},
              "target": {"type": "binary", "values": [False, True]}}
    model, hits = cls(schema=schema, epsilon=1.0, seed=seed), []
    for x, y in rows:
        hits.append(model.predict_one(x) == y)
        model.learn_one(x, y)
    return float(np.mean(hits))


def test_a_young_real_stream_is_learned_from_its_first_records():
    """river's Phishing, 1,250 records, ε = 1, library defaults, seeds 0-2. Measured
    2026-12-05: greedy forest 0.843, S-GBDT 0.826, RDT 0.786, median 0.762, random 0.759
    (before the young schedules: 0.627-0.638, the majority share for the first thousand
    records). Floors 3-5 points below."""
    got = {cls.__name__: np.mean([_phishing_prequential(cls, s) for s in (0, 1, 2)])
           for cls in (GreedyForestClassifier, SGBDTClassifier, RDTClassifier,
                       MedianForestClassifier, RandomDecisionForestClassifier)}
    assert got["GreedyForestClassifier"] >= 0.80, got
    assert got["SGBDTClassifier"] >= 0.78, got
    assert min(got.values()) >= 0.72, got
