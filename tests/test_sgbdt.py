"""S-GBDT estimators: pickling, privacy accounting, stream semantics, bad input (river's checks:
tests/test_estimators.py)."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpstream.accounting import RoundCostTable, calibrate_sgbdt
from dpstream.models import (
    Forest,
    InvalidRecordError,
    RecordEncoder,
    SGBDTClassifier,
    SGBDTRegressor,
)

SCHEMA = {"features": {"a": {"type": "numeric", "min": 0, "max": 10},
                       "b": {"type": "numeric", "min": -1, "max": 1},
                       "c": {"type": "categorical", "values": ["x", "y", "z"]}},
          "target": {"type": "binary", "values": [False, True]}}
REG_SCHEMA = {**SCHEMA, "target": {"type": "numeric", "min": 0, "max": 10}}


def _rows(n, seed=0):
    rng = np.random.default_rng(seed)
    X = [{"a": float(rng.uniform(0, 10)), "b": float(rng.uniform(-1, 1)),
          "c": str(rng.choice(["x", "y", "z"]))} for _ in range(n)]
    y = [bool(x["a"] + 3 * x["b"] > 5) for x in X]
    return X, y


@pytest.mark.parametrize("cls", [SGBDTClassifier, SGBDTRegressor])
def test_pickle_round_trip_keeps_model_and_budgets(cls):
    schema = SCHEMA if cls is SGBDTClassifier else REG_SCHEMA
    X, y = _rows(600)
    if cls is SGBDTRegressor:
        y = [x["a"] for x in X]
    model = cls(schema=schema, epsilon=1.0, n_trees=10, round_size=50, seed=3)
    for xi, yi in zip(X, y, strict=True):
        model.learn_one(xi, yi)
    clone = pickle.loads(pickle.dumps(model))
    assert [clone.predict_one(x) for x in X[:50]] == [model.predict_one(x) for x in X[:50]]
    assert clone.privacy_report() == model.privacy_report()
    np.testing.assert_array_equal(clone.engine.filter.spent, model.engine.filter.spent)
    # both continue identically (same RNG state)
    for xi, yi in zip(X[:100], y[:100], strict=True):
        model.learn_one(xi, yi)
        clone.learn_one(xi, yi)
    assert clone.privacy_report() == model.privacy_report()


def test_privacy_report_matches_the_calibration():
    # the budget: epsilon = init (0.2 of it) + drift signal (0.05) + trees (the rest)
    model = SGBDTClassifier(schema=SCHEMA, epsilon=0.5, delta=1e-6, n_trees=60, subsample=0.2,
                            grad_clip=0.5, leaf_noise_split=0.3, init_share=0.2, seed=0)
    X, y = _rows(300)
    model.learn_many(X, y)
    rep = model.privacy_report()
    cal = calibrate_sgbdt(epsilon=0.375, delta=1e-6, sample_rate=0.2, rounds=60, grad_clip=0.5,
                          leaf_noise_split=0.3)
    assert rep["sigma"] == cal.sigma_leaf
    assert rep["alpha"] == cal.order
    assert rep["rho_max"] == cal.rho_max
    assert rep["rho_bound"] == cal.rho_max + 0.1 and rep["init_in_filter"]
    assert rep["epsilon_trees"] == cal.epsilon <= 0.375 + 1e-12
    assert rep["epsilon_drift"] == pytest.approx(0.025)
    assert rep["epsilon"] == pytest.approx(0.1 + 0.025 + cal.epsilon)
    assert rep["epsilon"] <= 0.5 + 1e-12
    assert rep["delta"] == 1e-6
    assert rep["accountant"] == "tight"
    assert rep["rounds"] == model.n_trees + model.extra_trees == rep["trees"]
    assert rep["records_seen"] == rep["records_learned"] == 300
    assert rep["records_active"] + rep["records_exhausted"] + rep["records_evicted"] == 300
    assert 0.0 <= rep["spend_fraction"]["min"] <= rep["spend_fraction"]["median"] \
        <= rep["spend_fraction"]["max"] <= 1.0


def test_zhu_wang_accountant_adds_noise():
    tight = SGBDTRegressor(schema=REG_SCHEMA, epsilon=0.5).privacy_report()
    loose = SGBDTRegressor(schema=REG_SCHEMA, epsilon=0.5, accountant="zhu-wang")
    assert loose.privacy_report()["sigma"] > tight["sigma"]


def _trace_rounds(model, X, y, *, learn_many=False, init_ids=None):
    """Run the model and record, per round, which records were charged and how much; the
    initial score's releases charge epsilon_init to the records that take part (their ids go
    to ``init_ids`` when given)."""
    spent: dict[int, float] = {}
    halted_for_good: set[int] = set()
    used_after_halt = []
    rho = model.privacy_report()["rho_bound"]
    engine = model.engine
    original = engine.round
    original_init = engine.charge_init
    eps_init = engine.config.epsilon_init

    def traced_init(take):
        took = original_init(take)
        for i in engine.ids[took].tolist():
            spent[i] = spent.get(i, 0.0) + eps_init
            if init_ids is not None:
                init_ids.add(i)
        return took

    def traced():
        before = set(engine.ids.tolist())
        out = original()
        last = engine.last_round
        for i, c in zip(last["cont"].tolist(), last["cost"].tolist(), strict=True):
            if i in halted_for_good:
                used_after_halt.append(i)
            spent[i] = spent.get(i, 0.0) + c
        halted_for_good.update(before - set(engine.ids.tolist()))
        return out

    engine.round = traced
    engine.charge_init = traced_init
    if learn_many:
        model.learn_many(X, y)
    else:
        for xi, yi in zip(X, y, strict=True):
            model.learn_one(xi, yi)
    return spent, used_after_halt, rho


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(50, 400), round_size=st.integers(5, 60), n_trees=st.integers(1, 12),
       subsample=st.floats(0.05, 1.0), grad_clip=st.floats(0.05, 2.0),
       individual_filter=st.booleans(), dynamic=st.booleans(), regression=st.booleans(),
       seed=st.integers(0, 10**6))
def test_no_record_ever_exceeds_rho_max(n, round_size, n_trees, subsample, grad_clip,
                                        individual_filter, dynamic, regression, seed):
    X, y = _rows(n, seed=seed)
    if regression:
        y = [float(np.random.default_rng(seed + i).uniform(0, 10)) for i in range(n)]
        model = SGBDTRegressor(schema=REG_SCHEMA, n_trees=n_trees, round_size=round_size,
                               subsample=subsample, grad_clip=grad_clip,
                               individual_filter=individual_filter,
                               dynamic_leaf_noise=dynamic, seed=seed)
    else:
        model = SGBDTClassifier(schema=SCHEMA, n_trees=n_trees, round_size=round_size,
                                subsample=subsample, grad_clip=grad_clip,
                                individual_filter=individual_filter,
                                dynamic_leaf_noise=dynamic, seed=seed)
    init_ids: set[int] = set()
    spent, used_after_halt, rho = _trace_rounds(model, X, y, init_ids=init_ids)
    assert not used_after_halt
    cal, eps_init = model.engine.calibration, model.engine.config.epsilon_init
    assert rho == cal.rho_max + eps_init
    assert all(s <= rho for s in spent.values())
    # a record in an initial-score release has rho_max left for the rounds, as in the paper
    assert all(spent[i] - eps_init <= cal.rho_max for i in init_ids)
    assert np.all(model.engine.filter.spent <= rho)
    # the pool moves records around as it compacts: rows, spends and ids must move together
    e = model.engine
    for pos, i in enumerate(e.ids.tolist()):
        assert e.filter.spent[pos] == pytest.approx(spent.get(i, 0.0), rel=1e-12, abs=1e-15)
    if len(e):
        np.testing.assert_array_equal(e.X, model._encoder.encode_many([X[i] for i in e.ids]))
    if not individual_filter:  # worst case for everyone: at most n_trees rounds each, more
        worst = model.engine.costs.max_cost   # for records that paid no initial score
        for i, s in spent.items():
            paid = eps_init if i in init_ids else 0.0
            assert round((s - paid) / worst) <= (n_trees if paid else rho // worst)


def test_a_halted_record_never_trains_again_regression():
    X, y = _rows(1200, seed=5)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=3, round_size=20, subsample=1.0, seed=1)
    spent, used_after_halt, rho = _trace_rounds(model, X, y)
    assert not used_after_halt
    assert model.privacy_report()["records_exhausted"] > 0
    # exhausted records leave memory in batches (at least 64, or 1% of the pool): fewer
    # than a batch of them can still wait in the pool, refused by the filter
    waiting = set(model.engine.ids.tolist()) & {
        i for i, s in spent.items() if rho - s < model.engine.costs.min_cost}
    assert len(waiting) < max(64, len(model.engine) // 100)


def test_individual_costs_match_theorem_23():
    X, y = _rows(200, seed=2)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=20, subsample=0.5, grad_clip=0.3,
                            leaf_noise_split=0.05, seed=2)
    model.learn_many(X, y, rounds=1)
    e = model.engine
    cal = e.calibration
    table = RoundCostTable(order=cal.order, sigma_leaf=cal.sigma_leaf, leaf_noise_split=0.05,
                           sample_rate=0.5, grad_clip=0.3)
    g = np.clip(1 / (1 + np.exp(-(e.score - e.forest.predict_sum(e.X)))) - e.y, -0.3, 0.3)
    # every record paid the initial score's epsilon_init (in the filter), then its round
    rounds = e.filter.spent - e.config.epsilon_init
    np.testing.assert_allclose(rounds, table.cost(np.abs(g)))
    assert np.all(rounds >= np.array([table.exact_cost(v) for v in g]) - 1e-15)


def test_stream_rounds_every_round_size_records_and_late_records_train():
    X, y = _rows(1000, seed=4)
    # (the regular schedule: no young phase, which test_young_streams covers)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=5, round_size=100, warmup_rounds=0, seed=4)
    assert model.predict_proba_one(X[0]) == {False: 0.5, True: 0.5}   # public default
    for i, (xi, yi) in enumerate(zip(X[:450], y[:450], strict=True), start=1):
        model.learn_one(xi, yi)
        assert model.engine.rounds == i // 100 if model._engine else i < 100
    rep = model.privacy_report()
    # the initial score is refined by one disjoint group per round (each record in one group)
    # while the released count is below INIT_TARGET
    assert rep["records_pending"] == 50 and rep["init_score_records"] == 400
    # the first records are exhausted after n_trees worst-case rounds at most; a late batch
    # enters with a full budget and trains the next trees
    for xi, yi in zip(X[450:], y[450:], strict=True):
        model.learn_one(xi, yi)
    last = model.engine.last_round
    assert set(range(900, 1000)) <= set(last["cont"].tolist())
    # without the filter every record pays the worst case: the first 500 are gone
    worst = SGBDTClassifier(schema=SCHEMA, n_trees=5, round_size=100, seed=4,
                            individual_filter=False)
    for xi, yi in zip(X, y, strict=True):
        worst.learn_one(xi, yi)
    assert worst.engine.last_round["cont"].min() >= 500


def test_max_active_evicts_the_oldest():
    X, y = _rows(500, seed=6)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=50, round_size=10, max_active=120, seed=6)
    for xi, yi in zip(X, y, strict=True):
        model.learn_one(xi, yi)
        assert len(model.engine) <= 120 if model._engine else True
    assert model.engine.ids.min() >= 500 - 120 - 10
    assert model.privacy_report()["records_evicted"] > 0


def test_eviction_does_not_depend_on_other_records_spending():
    """max_active cuts by age in arrivals: records that spent their budgets and left do not
    keep older records in the pool longer (their spending depends on their data, so a
    size-based cut would let one record's data decide another's participation)."""
    X, y = _rows(130, seed=8)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=5, seed=8)
    e = model.engine
    Xe, ye = model._encoder.encode_many(X), model._encoder.encode_targets(y)
    e.add(Xe[:100], ye[:100])
    e._remove(np.isin(e.ids, [3, 50, 77]))   # as if these three had spent their budgets
    e.add(Xe[100:], ye[100:])
    assert e.evict_oldest(100) == 29   # ids 0-29 but 3 (a size cut would have taken 27)
    assert sorted(e.ids.tolist()) == [i for i in range(30, 130) if i not in (50, 77)]
    assert len(e.filter) == len(e) == 98 and e.evict_oldest(100) == 0
    with pytest.raises(ValueError, match="holes"):
        e.filter.compact([5], [2], keep=90)   # a mover inside the kept range


def test_predict_many_matches_predict_one():
    X, y = _rows(500, seed=7)
    for model in (SGBDTClassifier(schema=SCHEMA, n_trees=10, seed=7),
                  SGBDTRegressor(schema=REG_SCHEMA, n_trees=10, seed=7)):
        model.learn_many(X, [float(x["a"]) for x in X] if model._loss == "squared" else y)
        many = list(model.predict_many(X[:100]))
        assert many == pytest.approx([model.predict_one(x) for x in X[:100]])
    proba = SGBDTClassifier(schema=SCHEMA, n_trees=10, seed=7)
    proba.learn_many(X, y)
    table = proba.predict_proba_many(X[:20])
    assert table[True].tolist() == pytest.approx([proba.predict_proba_one(x)[True]
                                                  for x in X[:20]])


def test_learn_many_runs_the_papers_rounds_and_the_filter_allows_extra():
    X, y = _rows(300, seed=8)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=10, extra_trees=7, seed=8)
    model.learn_many(X, y)
    assert model.privacy_report()["rounds"] == 17
    model.learn_many(X[:10], y[:10], rounds=3)
    assert model.privacy_report()["rounds"] == 20


BAD = [
    ({"a": 1.0, "b": 0.0, "c": "x", "zz": 1}, True, "zz", "unknown feature"),
    ({"a": math.nan, "b": 0.0, "c": "x"}, True, "a", "NaN"),
    ({"a": 11.0, "b": 0.0, "c": "x"}, True, "a", "outside the public domain"),
    ({"a": "3", "b": 0.0, "c": "x"}, True, "a", "expected a number"),
    ({"a": 1.0, "b": 0.0, "c": "w"}, True, "c", "not one of the declared categories"),
    ({"a": True, "b": 0.0, "c": "x"}, True, "a", "expected a number"),
    ({"a": 1.0, "b": 0.0, "c": "x"}, "yes", "y", "not one of the declared classes"),
    ({"a": 1.0, "b": 0.0, "c": "x"}, 2, "y", "not one of the declared classes"),
    ([1, 2, 3], True, "x", "expected a dict"),
]


@pytest.mark.parametrize(("x", "y", "field", "reason"), BAD)
def test_bad_input_names_the_field_and_changes_nothing(x, y, field, reason):
    X, Y = _rows(130, seed=9)
    # the strict input policy: unknown features and out-of-domain values raise too
    model = SGBDTClassifier(schema=SCHEMA, n_trees=5, round_size=50, seed=9,
                            on_out_of_domain="error", on_unknown="error")
    for xi, yi in zip(X, Y, strict=True):
        model.learn_one(xi, yi)
    before = pickle.dumps(model)
    with pytest.raises(InvalidRecordError, match=reason) as info:
        model.learn_one(x, y)
    assert info.value.field == field
    with pytest.raises(InvalidRecordError):
        model.learn_many([X[0], x], [Y[0], y])
    assert pickle.dumps(model) == before


def test_regression_label_outside_the_range_is_rejected():
    model = SGBDTRegressor(schema=REG_SCHEMA, seed=0, on_out_of_domain="error")
    with pytest.raises(InvalidRecordError, match="outside the public target range") as info:
        model.learn_one({"a": 1.0}, 11.0)
    assert info.value.field == "y"
    assert model.records_seen == 0


@pytest.mark.parametrize(("param", "value"), [
    ("epsilon", 0), ("delta", 1.0), ("n_trees", 0), ("depth", 0), ("subsample", 1.5),
    ("leaf_noise_split", 1.0), ("accountant", "moments"), ("l2", -1), ("round_size", 0),
    ("individual_filter", "yes"), ("init_share", 1.0), ("grad_clip", math.inf)])
def test_bad_parameters_are_rejected_by_name(param, value):
    with pytest.raises(ValueError, match=param):
        SGBDTClassifier(schema=SCHEMA, **{param: value})


def test_schema_target_must_fit_the_estimator():
    with pytest.raises(ValueError, match="binary or categorical target"):
        SGBDTClassifier(schema=REG_SCHEMA)
    with pytest.raises(ValueError, match="numeric target"):
        SGBDTRegressor(schema=SCHEMA)


def test_missing_features_route_right_and_are_not_errors():
    X, y = _rows(300, seed=10)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=5, seed=10)
    model.learn_many(X, y)
    p = model.predict_proba_one({"c": "x"})
    assert set(p) == {False, True} and abs(sum(p.values()) - 1) < 1e-12


def test_max_trees_retires_the_oldest_tree_and_keeps_scores_consistent():
    X, y = _rows(600, seed=9)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=5, extra_trees=0, round_size=20, max_trees=8,
                            seed=3)
    for xi, yi in zip(X, y, strict=True):
        model.learn_one(xi, yi)
    e = model.engine
    assert len(e.forest) == 8 and e.trees_retired == e.rounds - 8 > 0
    assert model.privacy_report()["trees_retired"] == e.trees_retired
    # the pool's cached scores are exactly what the kept trees give
    np.testing.assert_allclose(e.score, e.raw_scores(e.X), atol=1e-9)
    with pytest.raises(ValueError, match="max_trees"):
        SGBDTClassifier(schema=SCHEMA, n_trees=100, extra_trees=100, max_trees=150)


def test_forest_drop_oldest_keeps_the_rest():
    from dpstream.models.boosting.random_splits import random_complete_tree
    from dpstream.models.forest import complete_tree_layout
    enc = RecordEncoder(SCHEMA)
    rng = np.random.default_rng(0)
    forest = Forest(max_nodes=complete_tree_layout(3)[0], max_depth=3)
    for _ in range(6):
        t = random_complete_tree(enc, depth=3, rng=rng)
        forest.add_tree(feature=t.feature, threshold=t.threshold, left=t.left,
                        value=rng.normal(size=t.feature.size))
    rows = enc.encode_many(_rows(50, seed=1)[0])
    expected = sum(forest.predict_tree(i, rows) for i in range(2, 6))
    forest.drop_oldest(2)
    assert len(forest) == 4
    np.testing.assert_allclose(forest.predict_sum(rows), expected)
    np.testing.assert_allclose([forest.predict_sum_one(r) for r in rows], expected)


def test_pool_scores_stay_the_forests_scores_when_predict_one_scores_are_reused():
    """learn_one reuses predict_one's raw score for the pool (no second pass over the
    forest); the pool's scores must equal a fresh scoring, also across generation switches
    and records learned without a prediction."""
    from river.datasets import synth

    from dpstream.stream.bench.scenarios import AGRAWAL_SCHEMA as schema
    stream = synth.ConceptDriftStream(stream=synth.Agrawal(classification_function=0, seed=1),
                                      drift_stream=synth.Agrawal(classification_function=4,
                                                                 seed=2),
                                      position=3000, width=50, seed=3)
    m = SGBDTClassifier(schema=schema, epsilon=5.0, seed=0, drift_window=200)
    for i, (x, y) in enumerate(stream.take(6000)):
        if i % 3:
            m.predict_one(x)
        m.learn_one(x, y)
    e = m.engine
    assert e.generation >= 1 and e.rounds > 100
    np.testing.assert_allclose(e.score, e.raw_scores(e.X), rtol=0, atol=1e-9)


def test_records_after_the_initial_score_spend_its_share_on_rounds():
    """The initial score is charged in the filter: records in a release pay epsilon_init
    there and keep rho_max for rounds; later records never pay it and may spend the whole
    bound on rounds — and do, once rounds outlast their budget."""
    X, y = _rows(3000, seed=8)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=10, round_size=20, subsample=1.0,
                            individual_filter=False, drift=False, seed=3)
    init_ids: set[int] = set()
    spent, used_after_halt, rho = _trace_rounds(model, X, y, init_ids=init_ids)
    e = model.engine
    rho_max, eps_init = e.calibration.rho_max, e.config.epsilon_init
    assert not used_after_halt and init_ids
    later = {i: s for i, s in spent.items() if i not in init_ids}
    # worst-case costs: a record in a release affords n_trees rounds, a later one more
    assert max(spent[i] - eps_init for i in init_ids) <= rho_max
    worst = e.costs.max_cost
    assert eps_init > worst   # the share buys at least one more worst-case round
    assert max(later.values()) > rho_max
    assert max(later.values()) <= rho == rho_max + eps_init
    assert round(max(later.values()) / worst) == int(rho // worst) > model.n_trees
    assert model.privacy_report()["epsilon"] <= 1.0 + 1e-12


def test_engines_from_before_the_initial_score_in_the_filter_keep_their_accounting():
    X, y = _rows(400, seed=9)
    model = SGBDTClassifier(schema=SCHEMA, n_trees=5, round_size=50, seed=4)
    for xi, yi in zip(X[:200], y[:200], strict=True):
        model.learn_one(xi, yi)
    e = model.engine
    state = e.__getstate__()
    state.pop("init_in_filter")
    state["filter"].bound = e.calibration.rho_max   # what such an engine's filter held
    old = type(e).__new__(type(e))
    old.__setstate__(state)
    assert old.init_in_filter is False
    take = np.ones(len(old), dtype=bool)
    before = old.filter.spent.copy()
    assert np.array_equal(old.charge_init(take), take)   # paid apart: nothing charged
    assert np.array_equal(old.filter.spent, before)
    model._engine = old
    rep = model.privacy_report()
    assert rep["rho_bound"] == rep["rho_max"]
    assert rep["epsilon"] == pytest.approx(
        e.config.epsilon_init + e.config.epsilon_drift + rep["epsilon_trees"], rel=1e-12)
    for xi, yi in zip(X[200:], y[200:], strict=True):
        model.learn_one(xi, yi)
    assert np.all(model.engine.filter.spent <= rep["rho_max"])


@settings(max_examples=25, deadline=None)
@given(epsilon=st.floats(0.05, 8.0), init_share=st.floats(0.0, 0.5),
       drift_share=st.floats(0.01, 0.3), delta=st.sampled_from([1e-8, 5e-8, 1e-5]),
       regression=st.booleans())
def test_the_filter_bound_with_the_initial_score_stays_in_budget(epsilon, init_share,
                                                                 drift_share, delta,
                                                                 regression):
    """The filter's bound (rho_max + epsilon_init) converts to at most the trees' and the
    initial score's shares: the reported epsilon never passes the budget."""
    cls, schema = (SGBDTRegressor, REG_SCHEMA) if regression else (SGBDTClassifier, SCHEMA)
    model = cls(schema=schema, epsilon=epsilon, delta=delta, init_share=init_share,
                drift_share=drift_share, n_trees=20, seed=0)
    rep = model.privacy_report()
    eps_init = epsilon * init_share
    assert rep["epsilon"] == 0.0   # nothing released yet; the bound is epsilon_bound
    assert rep["rho_bound"] == rep["rho_max"] + eps_init
    assert rep["epsilon_bound"] == pytest.approx(rep["epsilon_trees"] + eps_init
                                                 + rep["epsilon_drift"], rel=1e-9, abs=1e-12)
    assert rep["epsilon_bound"] <= epsilon * (1 + 1e-9)
