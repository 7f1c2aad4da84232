"""The median-split private forest on tumbling windows (Huang et al., 2023): windows under
parallel composition, accounting, accuracy floor, bad input (river's checks:
tests/test_estimators.py)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from dpstream.models import MedianForestClassifier
from dpstream.stream import ADULT_SCHEMA, load_adult


def test_the_river_checks_cover_spe_and_pte():
    """tests/test_estimators.py runs river's checks on each parameter set: one per setting."""
    params = list(MedianForestClassifier._unit_test_params())
    assert [p.get("transductive", False) for p in params] == [False, True]


def test_split_budgets_are_geometric_and_sum_to_the_split_share():
    model = MedianForestClassifier(schema=ADULT_SCHEMA, epsilon=2.0, split_share=0.5)
    b = model.split_budgets(6, 1.0)
    assert sum(b) == pytest.approx(1.0)
    assert all(b[i + 1] == pytest.approx(1.5 * b[i]) for i in range(5))
    # public quantities only: ceil(log2(n / leaf_size)), capped by the number of features
    assert model.depth_for(1000) == 8          # log2(1000 / 5) = 7.6
    assert model.depth_for(5) == 0 and model.depth_for(6) == 1
    assert model.depth_for(10**9) == len(ADULT_SCHEMA.features)
    assert MedianForestClassifier(schema=ADULT_SCHEMA, max_depth=3).depth_for(10**6) == 3


def test_pickle_keeps_the_partial_window_and_the_trees():
    X, y, _ = load_adult("train")
    model = MedianForestClassifier(schema=ADULT_SCHEMA, window_size=1000, seed=3,
                                   warmup=None)
    for xi, yi in zip(X[:2500], y[:2500], strict=True):
        model.learn_one(xi, yi)
    clone = pickle.loads(pickle.dumps(model))
    assert clone.privacy_report()["records_pending"] == 500
    assert [clone.predict_one(x) for x in X[3000:3050]] == \
        [model.predict_one(x) for x in X[3000:3050]]
    for xi, yi in zip(X[2500:3000], y[2500:3000], strict=True):
        clone.learn_one(xi, yi)
    assert clone.privacy_report()["windows_closed"] == 3




@pytest.mark.parametrize("name, value", [("epsilon", 0), ("n_trees", 0), ("window_size", 1),
                                         ("split_share", 1.0), ("max_depth", -1),
                                         ("max_windows", 0), ("n_candidates", 0),
                                         ("leaf_size", 0), ("n_trees_second", 0),
                                         ("privacy", "features"), ("transductive", "yes"),
                                         ("window_seconds", -1.0), ("window_seconds", True)])
def test_bad_parameters_are_rejected_by_name(name, value):
    with pytest.raises(ValueError, match=name):
        MedianForestClassifier(schema=ADULT_SCHEMA, **{name: value})


def _holdout(frac=1.0, seeds=range(3), **params):
    """Huang et al.'s protocol on adult.data: 90/10 split; ``frac`` of the training labels kept."""
    X, y, _ = load_adult("train")
    accs = []
    for seed in seeds:
        rng = np.random.default_rng(seed)
        idx = rng.permutation(len(X))
        cut = int(0.9 * len(X))
        keep = rng.random(cut) < frac
        model = MedianForestClassifier(schema=ADULT_SCHEMA, epsilon=2.0, seed=seed, **params)
        model.learn_many([X[i] for i in idx[:cut]],
                         [y[i] if k else None for i, k in zip(idx[:cut], keep, strict=True)])
        pred = model.predict_many([X[i] for i in idx[cut:]])
        accs.append(np.mean(pred == np.array([y[i] for i in idx[cut:]], dtype=object)))
    return float(np.mean(accs)), model


def test_adult_accuracy_floor_at_epsilon_2():
    """Paper Table 1 protocol, 3 seeded repeats; target 82.05% (bench: 50 repeats), floor 81%."""
    acc, model = _holdout()
    assert model.privacy_report()["windows"][0]["algorithm"] == "SPE"
    assert acc >= 0.81, acc


@pytest.mark.parametrize("privacy, transductive, algorithm", [
    ("features_and_labels", False, "SSPE-1"), ("labels_only", False, "SSPE-2"),
    ("labels_only", True, "PTE")])
def test_adult_semi_supervised_floor_with_20_percent_labels(privacy, transductive, algorithm):
    """Paper Table 2 protocol (20% of the labels), 6 seeded repeats; targets 80.29-80.88%.

    One repeat's accuracy spreads by about 0.7 pp, so two repeats (as this test once took)
    put a mean 0.6 pp below the ten-repeat one by chance: with the exact noise of issue 65,
    seeds 0-1 of SSPE-2 gave 79.31%, seeds 0-9 79.83% (the float-noise code: 79.94%). Over
    seeds 0-5 the three algorithms measured 80.50 / 79.99 / 81.84% (``_holdout`` per seed,
    exact noise); the floor sits 3 standard errors below the lowest."""
    acc, model = _holdout(0.2, range(6), privacy=privacy, transductive=transductive)
    assert model.privacy_report()["windows"][0]["algorithm"] == algorithm
    assert acc >= 0.79, acc
