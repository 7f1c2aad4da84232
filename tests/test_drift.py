"""S-GBDT on a live stream: the DP drift signal, generations, the round schedule, integer keys,
and compiled routing (issue: S-GBDT that keeps up with a real stream)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from river.datasets import synth
from stattest import halfline_events, privacy_loss_lower_bound

from dpstream.models import (
    DPBoostClassifier,
    GreedyForestClassifier,
    MedianForestClassifier,
    RandomDecisionForestClassifier,
    RDTClassifier,
    SGBDTClassifier,
    SGBDTRegressor,
)
from dpstream.models import forest as forest_module
from dpstream.models.drift import DPDriftSignal
from dpstream.models.forest import Forest, complete_tree_layout
from dpstream.models.schema import SchemaError, coerce_schema
from dpstream.stream.messages import RecordValidator

AGRAWAL = {"features": {
    "salary": {"type": "numeric", "min": 20000, "max": 150000},
    "commission": {"type": "numeric", "min": 0, "max": 85000},
    "age": {"type": "numeric", "min": 20, "max": 80},
    "elevel": {"type": "numeric", "min": 0, "max": 4},
    "car": {"type": "numeric", "min": 1, "max": 20},
    "zipcode": {"type": "numeric", "min": 0, "max": 8},
    "hvalue": {"type": "numeric", "min": 0, "max": 1_200_000},
    "hyears": {"type": "numeric", "min": 1, "max": 30},
    "loan": {"type": "numeric", "min": 0, "max": 500_000}},
    "target": {"type": "binary", "values": [0, 1]}}


def _drifting(n=20_000, at=10_000):
    """River's Agrawal function 4, then function 0 (a change that the old trees get wrong)."""
    return list(synth.ConceptDriftStream(
        stream=synth.Agrawal(classification_function=4, seed=5),
        drift_stream=synth.Agrawal(classification_function=0, seed=6),
        position=at, width=500, seed=7).take(n))


def _prequential(model, rows, tail):
    ok = 0
    for i, (x, y) in enumerate(rows):
        p = model.predict_one(x)
        ok += (i >= len(rows) - tail) and p == y
        model.learn_one(x, y)
    return ok / tail


# ----------------------------------------------------------------------- the signal

@pytest.mark.slow
def test_drift_signal_release_is_epsilon_dp_and_half_noise_is_caught():
    """Each window's release through the real signal (window of one record: its loss 1 in D,
    0 in the neighbour D'). Events include {rate <= 0}, where the loss is exactly epsilon."""
    n, eps = 100_000, 1.0
    events = halfline_events([0.0, 0.25, 0.5, 0.75, 1.0])

    def releases(epsilon, loss, seed):
        signal = DPDriftSignal(epsilon, window=1, seed=seed)
        out = np.empty(n)
        for i in range(n):   # (the history keeps the last HISTORY releases only)
            signal.update(loss)
            out[i] = signal.history[-1]
        return out

    lb = privacy_loss_lower_bound(releases(eps, 1.0, 1), releases(eps, 0.0, 2), events)
    assert 0.85 * eps < lb <= eps
    broken = privacy_loss_lower_bound(releases(2 * eps, 1.0, 3), releases(2 * eps, 0.0, 4),
                                      events)
    assert broken > eps


def test_drift_signal_clips_losses_and_counts_windows():
    signal = DPDriftSignal(0.5, window=10, seed=0)
    for loss in [5.0, -3.0, float("nan")] + [0.0] * 6:
        assert not signal.update(loss)
    assert signal.pending == 9 and signal.releases == 0
    signal.update(0.0)
    assert signal.pending == 0 and signal.releases == 1 and 0.0 <= signal.history[0] <= 1.0
    with pytest.raises(ValueError, match="drift epsilon"):
        DPDriftSignal(0.0)
    with pytest.raises(ValueError, match="drift window"):
        DPDriftSignal(1.0, window=0)
    with pytest.raises(ValueError, match="detector"):
        DPDriftSignal(1.0, detector="cusum")


# ------------------------------------------------------------------- generations

def test_a_detected_change_starts_a_new_generation_and_recovers():
    rows = _drifting()
    adaptive = SGBDTClassifier(schema=AGRAWAL, epsilon=1.0, seed=3)
    frozen = SGBDTClassifier(schema=AGRAWAL, epsilon=1.0, seed=3, drift=False)
    acc_adaptive = _prequential(adaptive, rows, 4000)
    acc_frozen = _prequential(frozen, rows, 4000)
    assert acc_adaptive >= 0.80 and acc_adaptive > acc_frozen + 0.1, (acc_adaptive, acc_frozen)
    rep = adaptive.privacy_report()
    d = rep["drift"]
    assert d["generation"] >= 1 and d["changes"] == d["generation"]
    # detected after the change began (arrival 10,000), within a few windows (600 records
    # each at epsilon 1: max(200, 30 / epsilon_drift))
    assert d["window"] == 600
    assert 10_000 <= d["change_at_release"][0] * 600 <= 15_000
    assert d["records_dropped"] > 5000 and d["releases"] == len(rows) // 600
    # the guarantee: init + drift + trees within the budget, the drift share as declared
    assert rep["epsilon"] <= 1.0 + 1e-9 and rep["epsilon_drift"] == pytest.approx(0.05)
    e = adaptive.engine
    # no record took part in two initial-score releases; old trees all retired
    assert e.init_records <= e.records_added
    assert len(e.forest) <= e.rounds - (d["change_at_release"][0] * 600) // 32 + 2
    assert frozen.privacy_report()["drift"] == {"enabled": False, "generation": 0,
                                                 "records_dropped": 0}


def test_the_switch_survives_a_checkpoint_exactly_once():
    """Pickle mid-stream (after the switch), resume, finish: the same model as a run that never
    stopped — nothing learned twice, no switch repeated or lost."""
    rows = _drifting(14_000)
    straight = SGBDTClassifier(schema=AGRAWAL, epsilon=1.0, seed=5)
    _prequential(straight, rows, 1)
    first = SGBDTClassifier(schema=AGRAWAL, epsilon=1.0, seed=5)
    _prequential(first, rows[:12_000], 1)
    assert first.privacy_report()["drift"]["generation"] >= 1
    resumed = pickle.loads(pickle.dumps(first))
    _prequential(resumed, rows[12_000:], 1)
    a, b = straight.privacy_report(), resumed.privacy_report()
    for key in ("rounds", "records_learned", "records_active", "trees", "drift"):
        assert a[key] == b[key], key
    X = [x for x, _ in rows[-500:]]
    assert np.array_equal(straight.predict_proba_many(X).to_numpy(),
                          resumed.predict_proba_many(X).to_numpy())


def test_models_pickled_before_drift_adaptation_still_load():
    model = SGBDTClassifier(schema=AGRAWAL, epsilon=1.0, seed=1)
    for x, y in _drifting(300):
        model.learn_one(x, y)
    state = dict(model.__dict__)
    # what a model pickled before drift adaptation lacks
    for name in ("drift", "drift_share", "drift_window", "min_leaf_records", "_drift"):
        state.pop(name)
    old = SGBDTClassifier.__new__(SGBDTClassifier)
    old.__setstate__(state)
    assert old.privacy_report()["drift"]["enabled"] is False
    old.learn_one(*_drifting(1)[0])


def test_stream_defaults_spend_more_of_the_budget_than_the_paper_schedule():
    """One round per 32 arrivals uses the records' budgets; the paper's batch-sized 256 leaves
    most of it unspent on a 20k stream."""
    rows = list(synth.Agrawal(classification_function=2, seed=1).take(12_000))
    spent = {}
    for size in (32, 256):
        model = SGBDTClassifier(schema=AGRAWAL, epsilon=1.0, seed=0, round_size=size)
        _prequential(model, rows, 1)
        spent[size] = model.privacy_report()["spend_fraction"]["median"]
    assert spent[32] > 2 * spent[256]


def test_young_streams_grow_shallow_trees():
    model = SGBDTClassifier(schema=AGRAWAL, epsilon=1.0, seed=0)
    e = model.engine
    depths = []
    for i, (x, y) in enumerate(synth.Agrawal(seed=2).take(2000)):
        model.learn_one(x, y)
        if (i + 1) % model._round_size == 0:
            depths.append(e.round_depth())
    assert depths[0] == 1 and depths == sorted(depths) and depths[-1] < model.depth
    assert SGBDTClassifier(schema=AGRAWAL, min_leaf_records=0).engine.round_depth() == 6


def test_regression_stream_learns_abalone():
    from dpstream.stream import load_abalone

    X, y, schema = load_abalone()
    order = np.random.default_rng(0).permutation(len(y))
    model = SGBDTRegressor(schema=schema, epsilon=1.0, seed=0)
    sq, base = 0.0, 0.0
    mean = float(np.mean(y))
    for i in order:
        p = model.predict_one(X[i])
        sq += (p - y[i]) ** 2
        base += (mean - y[i]) ** 2
        model.learn_one(X[i], y[i])
    assert 1 - sq / base > 0.0   # better than the (non-private) mean on the whole stream


# -------------------------------------------------------------- integer feature keys

SEA = {"features": {i: {"type": "numeric", "min": 0, "max": 10} for i in range(3)},
       "target": {"type": "binary", "values": [False, True]}}


@pytest.mark.parametrize("cls", [SGBDTClassifier, MedianForestClassifier, RDTClassifier,
                                 RandomDecisionForestClassifier, GreedyForestClassifier,
                                 DPBoostClassifier])
def test_every_model_takes_rivers_integer_keys(cls):
    model = cls(schema=SEA, epsilon=1.0, seed=0)
    rows = list(synth.SEA(variant=0, seed=1).take(600))
    for x, y in rows:
        model.predict_one(x)
        model.learn_one(x, y)
    model.learn_one({"1": 2.0, 0: 1.0, 2: 3.0}, True)    # "1" and 1 name the same feature
    assert model.privacy_report()["epsilon"] <= 1.0 + 1e-9


def test_schema_errors_name_the_field_in_plain_words(tmp_path):
    cases = {
        "features.age: 'max' is required": {"age": {"type": "numeric", "min": 0}},
        "features.age: 'type' must be": {"age": {"type": "numerc", "min": 0, "max": 1}},
        "feature names must be strings or integers": {1.5: {"type": "numeric", "min": 0,
                                                            "max": 1}},
        "name the same feature": {1: {"type": "numeric", "min": 0, "max": 1},
                                  "1": {"type": "numeric", "min": 0, "max": 1}},
        "features.c.values: must not be empty": {"c": {"type": "categorical", "values": []}},
    }
    for text, features in cases.items():
        with pytest.raises(SchemaError, match=text.replace("(", r"\(")) as err:
            coerce_schema({"features": features, "target": {"type": "binary", "values": [0, 1]}})
        assert "pydantic" not in str(err.value) and "errors.pydantic.dev" not in str(err.value)
    path = tmp_path / "schema.json"
    path.write_text('{"features": {"age": {"type": "numeric", "min": 0}}, "target": '
                    '{"type": "binary", "values": [0, 1]}}')
    with pytest.raises(SchemaError, match="schema.json: features.age: 'max' is required"):
        coerce_schema(str(path))
    path.write_text("{not json")
    with pytest.raises(SchemaError, match="not JSON"):
        coerce_schema(str(path))


def test_messages_with_either_spelling_of_an_integer_key_validate():
    v = RecordValidator(SEA)
    rec = v.validate({"id": 1, "x": {"0": 1.0, 1: 2.0, "2": 11.0}, "y": True})
    assert rec.x == {0: 1.0, 1: 2.0, 2: 10.0} and rec.clipped == 1
    json_schema = RecordValidator({"features": {"0": {"type": "numeric", "min": 0, "max": 1}},
                                   "target": {"type": "binary", "values": [0, 1]}})
    assert json_schema.validate({"id": 2, "x": {0: 0.5}, "y": 1}).x == {"0": 0.5}


# ----------------------------------------------------------------- compiled routing

def test_compiled_routing_equals_the_numpy_routing(monkeypatch):
    rng = np.random.default_rng(0)
    forest = Forest(max_nodes=15, max_depth=3)
    for depth in (3, 2, 1, 3):
        n, internal, _ = complete_tree_layout(depth)
        feature = np.zeros(n, dtype=np.int32)
        threshold = np.full(n, np.inf)
        left = np.arange(n)
        feature[internal] = rng.integers(1, 5, internal.size)
        threshold[internal] = rng.random(internal.size)
        left[internal] = 2 * internal + 1
        forest.add_tree(feature=feature, threshold=threshold, left=left, value=rng.random(n))
    X = rng.random((300, 5))
    X[::7, 2] = np.nan                                   # missing values go right
    Xf = np.asfortranarray(X)[:250]                      # a column-major pool view
    compiled = (forest.predict_sum(X), forest.nodes(X), forest.apply(2, Xf),
                [forest.predict_sum_one(r) for r in X[:20]])
    for name in ("route_block", "sum_block", "sum_one"):
        monkeypatch.setattr(forest_module, name, None)
    plain = (forest.predict_sum(X), forest.nodes(X), forest.apply(2, Xf),
             [forest.predict_sum_one(r) for r in X[:20]])
    for a, b in zip(compiled, plain, strict=True):
        assert np.allclose(a, b)
